//! Which WebSocket connections are open and what topics they subscribe to, shared by the
//! workers (whose plugins send and publish) and the I/O thread (which opens and closes them).
//!
//! Ids are handed out here and never reused, so a plugin that keeps an id of a connection that
//! closed can only ever reach nothing: its sends fail with `closed`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::job::WsId;
use crate::limits::{WS_MAX_TOPIC_BYTES, WS_MAX_TOPICS_PER_CONNECTION};

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeError {
    /// The connection is not open.
    Closed,
    /// The topic name, or the number of topics of this connection, is over the limit.
    TooLarge,
}

/// The shared table of open connections and topics.
#[derive(Debug)]
pub struct Hub {
    next: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Open connections and their topics.
    open: HashMap<WsId, HashSet<String>>,
    topics: HashMap<String, HashSet<WsId>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            next: AtomicU64::new(1),
            inner: Mutex::default(),
        }
    }
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh id, already marked open.
    pub fn open(&self) -> WsId {
        let ws = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().open.insert(ws, HashSet::new());
        ws
    }

    pub fn is_open(&self, ws: WsId) -> bool {
        self.lock().open.contains_key(&ws)
    }

    /// Open connections.
    pub fn open_count(&self) -> usize {
        self.lock().open.len()
    }

    /// Forgets a connection and its subscriptions.
    pub fn closed(&self, ws: WsId) {
        let mut inner = self.lock();
        if let Some(topics) = inner.open.remove(&ws) {
            for topic in topics {
                if let Some(subs) = inner.topics.get_mut(&topic) {
                    subs.remove(&ws);
                    if subs.is_empty() {
                        inner.topics.remove(&topic);
                    }
                }
            }
        }
    }

    pub fn subscribe(&self, ws: WsId, topic: &str) -> Result<(), SubscribeError> {
        if topic.len() > WS_MAX_TOPIC_BYTES {
            return Err(SubscribeError::TooLarge);
        }
        let mut inner = self.lock();
        let topics = inner.open.get_mut(&ws).ok_or(SubscribeError::Closed)?;
        if topics.len() >= WS_MAX_TOPICS_PER_CONNECTION && !topics.contains(topic) {
            return Err(SubscribeError::TooLarge);
        }
        topics.insert(topic.to_owned());
        inner.topics.entry(topic.to_owned()).or_default().insert(ws);
        Ok(())
    }

    pub fn unsubscribe(&self, ws: WsId, topic: &str) -> Result<(), SubscribeError> {
        let mut inner = self.lock();
        let topics = inner.open.get_mut(&ws).ok_or(SubscribeError::Closed)?;
        topics.remove(topic);
        if let Some(subs) = inner.topics.get_mut(topic) {
            subs.remove(&ws);
            if subs.is_empty() {
                inner.topics.remove(topic);
            }
        }
        Ok(())
    }

    /// The connections subscribed to `topic`, in id order.
    pub fn subscribers(&self, topic: &str) -> Vec<WsId> {
        let inner = self.lock();
        let mut subs: Vec<WsId> = inner
            .topics
            .get(topic)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        subs.sort_unstable();
        subs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_and_closing_forgets_topics() {
        let hub = Hub::default();
        let a = hub.open();
        let b = hub.open();
        assert_ne!(a, b);
        hub.subscribe(a, "room").unwrap();
        hub.subscribe(b, "room").unwrap();
        assert_eq!(hub.subscribers("room"), vec![a, b]);
        hub.closed(a);
        assert!(!hub.is_open(a));
        assert_eq!(hub.subscribers("room"), vec![b]);
        assert_eq!(hub.subscribe(a, "room"), Err(SubscribeError::Closed));
        let c = hub.open();
        assert!(c > b);
        hub.unsubscribe(b, "room").unwrap();
        assert!(hub.subscribers("room").is_empty());
        assert_eq!(
            hub.subscribe(c, &"x".repeat(1000)),
            Err(SubscribeError::TooLarge)
        );
    }
}
