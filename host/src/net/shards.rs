//! Several event loops, one per core by default (`--io-threads`): how they are built, how an
//! accepted connection reaches its loop, and how they run and end together.
//!
//! Loop 0 owns the listener. It accepts, checks the global connection cap, and hands each
//! connection to the loop with the fewest open (ties in turn) through that loop's hand-off
//! queue and waker; the connection stays there for life. Every loop has its own poll, table,
//! timers, permessage-deflate codec and reply queue; workers address a reply to the loop named
//! by the connection's id ([`crate::message::ConnId::shard`]), and a WebSocket's loop is kept
//! in the [`Hub`](crate::hub::Hub). The worker pool, its queue bound, the registry and the hub
//! are shared, so every limit that users read as the server's stays global.

use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpListener;
use mio::{Poll, Waker};

use super::event_loop::{
    Accepted, Common, Ended, EventLoop, Lanes, Parts, RUN, Shared, StopHandle,
};
use crate::pool::reply::{Replies, ReplyRx};

/// One loop's poll, before the loops exist: its waker goes to the workers' reply queue first.
pub(crate) struct Seat {
    pub poll: Poll,
    pub waker: Arc<Waker>,
}

/// A poll and a waker for each of `loops` loops.
pub(crate) fn seats(loops: usize) -> io::Result<Vec<Seat>> {
    (0..loops)
        .map(|_| {
            let (poll, waker) = EventLoop::poll_and_waker()?;
            Ok(Seat { poll, waker })
        })
        .collect()
}

/// The loops, from their seats and reply queues (`replies[i]` is loop `i`'s, whose senders
/// make `forward`). Loop 0 gets the listener.
pub(crate) fn build(
    seats: Vec<Seat>,
    replies: Vec<ReplyRx>,
    forward: Replies,
    listener: TcpListener,
    dispatcher: Box<dyn super::Handler>,
    shared: &Shared,
) -> io::Result<(Vec<EventLoop>, StopHandle)> {
    let inboxes: Vec<(Sender<Accepted>, Receiver<Accepted>)> = seats
        .iter()
        .map(|_| crossbeam_channel::unbounded())
        .collect();
    let lanes = Arc::new(Lanes {
        lanes: inboxes
            .iter()
            .zip(&seats)
            .map(|((tx, _), seat)| (tx.clone(), seat.waker.clone()))
            .collect(),
        closed: Default::default(),
    });
    let stop = StopHandle {
        command: Arc::new(AtomicU8::new(RUN)),
        wakers: seats.iter().map(|s| s.waker.clone()).collect(),
    };
    let common = Common {
        dispatcher,
        forward,
        lanes,
        command: stop.command.clone(),
        drain_lock: Arc::default(),
    };
    shared.metrics.set_io_loops(seats.len());
    let mut listener = Some(listener);
    let loops = seats
        .into_iter()
        .zip(replies)
        .zip(inboxes)
        .enumerate()
        .map(|(shard, ((seat, replies), (_, inbox)))| {
            let parts = Parts {
                shard,
                poll: seat.poll,
                listener: listener.take(),
                replies,
                inbox,
            };
            EventLoop::new(parts, &common, shared)
        })
        .collect::<io::Result<Vec<_>>>()?;
    Ok((loops, stop))
}

/// Runs every loop, loop 0 on the calling thread and each other on its own (`ankh-io-N`),
/// until all have ended. Should one fail, the others are stopped and its error returned.
pub(crate) fn run(loops: Vec<EventLoop>, stop: &StopHandle) -> io::Result<Ended> {
    let mut loops = loops.into_iter();
    let Some(first) = loops.next() else {
        return Ok(Ended::Stopped);
    };
    let others = loops
        .map(|event_loop| {
            let shard = event_loop.shard;
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("ankh-io-{shard}"))
                .spawn(move || {
                    let ended = event_loop.run();
                    if ended.is_err() {
                        stop.stop();
                    }
                    ended
                })
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut ended = first.run();
    if ended.is_err() {
        stop.stop();
    }
    for thread in others {
        let one = thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("an event loop panicked")));
        ended = match (ended, one) {
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(a), Ok(b)) => Ok(together(a, b)),
        };
    }
    ended
}

/// How two loops' ends read as one: any connection force-closed counts.
fn together(a: Ended, b: Ended) -> Ended {
    match (a, b) {
        (Ended::ForceClosed(x), Ended::ForceClosed(y)) => Ended::ForceClosed(x + y),
        (Ended::ForceClosed(x), _) | (_, Ended::ForceClosed(x)) => Ended::ForceClosed(x),
        (Ended::Stopped, _) | (_, Ended::Stopped) => Ended::Stopped,
        (Ended::Drained, Ended::Drained) => Ended::Drained,
    }
}
