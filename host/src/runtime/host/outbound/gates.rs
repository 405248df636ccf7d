//! Bounds on what one plugin holds at once (requests in flight, or connections open): so many
//! per origin, so many in all. A place is given in the order it was asked for.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// `scheme://host:port`, the key of the pool and of the figures.
pub(super) type Origin = String;

/// Bounds on things a plugin holds at once (requests in flight, or open connections): so many
/// per origin, so many in all.
pub(super) struct Gates {
    per_origin: usize,
    origins: Mutex<HashMap<Origin, Arc<Semaphore>>>,
    total: Arc<Semaphore>,
}

/// One place taken at a [`Gates`], given back when dropped.
pub(super) struct Pass {
    _origin: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

impl Gates {
    pub(super) fn new(per_origin: usize, total: usize) -> Self {
        Gates {
            per_origin,
            origins: Mutex::new(HashMap::new()),
            total: Arc::new(Semaphore::new(total)),
        }
    }

    /// Waits for a place at `origin` and in all. Places are given in the order they were
    /// asked for, from the first poll of this future.
    pub(super) async fn enter(self: Arc<Self>, origin: String) -> Pass {
        let gate = {
            let mut map = self.origins.lock().unwrap_or_else(PoisonError::into_inner);
            // Bounded: a plugin reaches only granted origins, but a wildcard grant names many;
            // an origin with nothing in use is forgotten first.
            if map.len() >= crate::limits::OUTBOUND_ORIGINS_POOLED && !map.contains_key(&origin) {
                map.retain(|_, s| s.available_permits() < self.per_origin);
            }
            map.entry(origin)
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_origin)))
                .clone()
        };
        // Neither semaphore is ever closed.
        let origin = gate.acquire_owned().await.expect("an open semaphore");
        let total = self
            .total
            .clone()
            .acquire_owned()
            .await
            .expect("an open semaphore");
        Pass {
            _origin: origin,
            _total: total,
        }
    }

    /// A place at `origin` asked for now (its turn fixed), to be awaited later.
    pub(super) fn line_up(
        self: &Arc<Self>,
        origin: String,
    ) -> Pin<Box<dyn Future<Output = Pass> + Send>> {
        let mut place = Box::pin(self.clone().enter(origin));
        // One poll puts it in line, or gives it its place at once.
        match place
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
        {
            Poll::Ready(pass) => Box::pin(std::future::ready(pass)),
            Poll::Pending => place,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `f` once: its output if it is ready at once.
    fn at_once<F: Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        match f
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
        {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    #[test]
    fn gates_bound_each_origin_and_the_whole() {
        let gates = Arc::new(Gates::new(2, 3));
        let enter = |origin: &str| gates.clone().enter(origin.to_owned());
        let a1 = at_once(enter("http://a:80")).expect("a place");
        let _a2 = at_once(enter("http://a:80")).expect("a place");
        assert!(
            at_once(enter("http://a:80")).is_none(),
            "a third at one origin"
        );
        let _b1 = at_once(enter("http://b:80")).expect("a place");
        assert!(at_once(enter("http://c:80")).is_none(), "a fourth in all");
        drop(a1);
        assert!(
            at_once(enter("http://c:80")).is_some(),
            "a place given back"
        );
    }

    #[test]
    fn places_are_given_in_the_order_they_were_asked_for() {
        let gates = Arc::new(Gates::new(1, 10));
        let first = at_once(gates.clone().enter("o".into())).expect("a place");
        let mut second = gates.line_up("o".into());
        let mut third = gates.line_up("o".into());
        drop(first);
        let noop = &mut Context::from_waker(std::task::Waker::noop());
        assert!(
            third.as_mut().poll(noop).is_pending(),
            "the third went first"
        );
        let Poll::Ready(second) = second.as_mut().poll(noop) else {
            panic!("the second's turn")
        };
        drop(second);
        assert!(third.as_mut().poll(noop).is_ready());
    }
}
