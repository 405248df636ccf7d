//! Ids and messages every layer shares: which connection, which WebSocket, what a WebSocket
//! message is, and the signal that cancels a call. A leaf: it imports nothing of the host, so
//! the socket loop, the pool and the runtime can all name these without naming each other.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Identifies a connection for the lifetime of the process: the event loop that owns it (its
/// shard), the slot it occupies in that loop's table, and a serial number that is never reused
/// there. A reply goes to the loop named by `shard`; one whose serial does not match the
/// slot's current connection belongs to a connection that is gone, and is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub shard: usize,
    pub slot: usize,
    pub serial: u64,
}

/// Identifies a WebSocket connection for plugins. Never reused by a running host, and unique
/// across the processes of a cluster: its top [`NODE_BITS`] bits are the process's node
/// number (0 outside a cluster), the rest a keyed permutation of a counter.
pub type WsId = u64;

/// How many top bits of a connection or request id name the process (`--pubsub`): 24, which
/// leaves 2^40 ids per process.
pub(crate) const NODE_BITS: u32 = 24;

/// The bits below the node number.
pub(crate) const LOCAL_ID_BITS: u32 = 64 - NODE_BITS;

/// The node number in an id.
pub(crate) fn node_of(id: u64) -> u32 {
    (id >> LOCAL_ID_BITS) as u32
}

/// A message a plugin sends. Its payload is reference-counted: a publish to many connections
/// holds one copy, not one per subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// A text message (the payload is UTF-8), else binary.
    pub text: bool,
    pub payload: bytes::Bytes,
}

impl Outbound {
    pub fn text(text: impl Into<String>) -> Self {
        Outbound {
            text: true,
            payload: bytes::Bytes::from(text.into().into_bytes()),
        }
    }

    pub fn binary(bytes: impl Into<Vec<u8>>) -> Self {
        Outbound {
            text: false,
            payload: bytes::Bytes::from(bytes.into()),
        }
    }
}

/// A complete WebSocket data message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsMessage {
    Text(String),
    Binary(Vec<u8>),
}

/// What happened on a WebSocket connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEvent {
    Message(WsMessage),
    /// A compressed message (permessage-deflate), inflated by the worker that delivers it, so
    /// inflating never holds up the I/O thread. The plugin sees the [`WsEvent::Message`] it
    /// inflates to.
    Compressed(Compressed),
    /// The connection ended; `clean` when the closing handshake completed.
    Close {
        code: u16,
        reason: String,
        clean: bool,
    },
}

/// A compressed message on its way to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compressed {
    pub text: bool,
    /// As sent, without the 4-byte tail.
    pub payload: Vec<u8>,
    /// The most it may inflate to.
    pub max: usize,
    /// For a client that keeps its compression context: what its earlier messages inflated
    /// to, which this one may refer back into. It travels with the message (a connection has
    /// one event in flight at a time) and comes back, grown, when the event is done.
    pub window: Option<DeflateWindow>,
}

/// The last plaintext a client sent in compressed messages, as far back as its window
/// reaches: what its next message may refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeflateWindow {
    bytes: Vec<u8>,
    cap: usize,
}

impl DeflateWindow {
    /// A window of 2^`bits` bytes, empty.
    pub fn new(bits: u8) -> Self {
        DeflateWindow {
            bytes: Vec::new(),
            cap: 1 << bits.clamp(8, 15),
        }
    }

    /// What it holds, oldest first.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    #[cfg(test)]
    /// Bytes held (for memory accounting).
    pub(crate) fn held(&self) -> usize {
        self.bytes.capacity()
    }

    /// Adds `data`, keeping only the last `cap` bytes.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if data.len() >= self.cap {
            self.bytes.clear();
            self.bytes.extend_from_slice(&data[data.len() - self.cap..]);
            return;
        }
        let excess = (self.bytes.len() + data.len()).saturating_sub(self.cap);
        self.bytes.drain(..excess);
        let need = self.bytes.len() + data.len();
        if need > self.bytes.capacity() {
            // Grow by doubling, but never past the window.
            let target = need.max(self.bytes.capacity() * 2).min(self.cap);
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend_from_slice(data);
    }
}

/// A cancellation signal, shared by the I/O thread (which fires it when the client leaves) and
/// the worker running the call.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<CancelInner>);

#[derive(Debug, Default)]
struct CancelInner {
    /// When it first fired; unset until it does.
    fired_at: std::sync::OnceLock<std::time::Instant>,
    /// The call's response streams: its handler deadline is suspended, and its connection's
    /// stream limits bound it instead (see [`Cancel::set_streaming`]).
    streaming: AtomicBool,
    /// The guest's current wait, if it is waiting.
    waker: Mutex<Option<Waker>>,
}

impl Cancel {
    /// Fires the signal: the call's current wait ends now, and so does every later one.
    pub fn cancel(&self) {
        self.0.fired_at.get_or_init(std::time::Instant::now);
        wake_parked(&self.0.waker);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.fired_at.get().is_some()
    }

    /// When the signal first fired, if it has.
    pub(crate) fn fired_at(&self) -> Option<std::time::Instant> {
        self.0.fired_at.get().copied()
    }

    /// While `on`, the call's response is streaming: its wall-clock deadline does not stop
    /// it (the connection ends the stream at its idle or total limit, which cancels the
    /// call). Once the stream ends the deadline, long past by then, applies again.
    pub fn set_streaming(&self, on: bool) {
        self.0.streaming.store(on, Ordering::Release);
    }

    pub(crate) fn is_streaming(&self) -> bool {
        self.0.streaming.load(Ordering::Acquire)
    }

    pub(crate) fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        park(&self.0.waker, cx);
        // `cancel` may have fired between the check and storing the waker.
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// How plugins' WebSocket messages reach the event loops that own the sockets: the pool
/// implements it over its reply queues. `home` is the loop of the connection, as the
/// [`Hub`](crate::hub::Hub) knows it.
pub trait WsOut: Send + Sync + std::fmt::Debug {
    /// A message for one connection.
    fn send(&self, home: usize, ws: WsId, message: Outbound);
    /// Starts the closing handshake of one connection.
    fn close(&self, home: usize, ws: WsId, code: u16, reason: String);
    /// One message for every subscriber of a topic (`(home, ws)`, ordered by home), as one
    /// unit: every subscriber sees a topic's messages in one order.
    fn publish(&self, subscribers: Vec<(usize, WsId)>, message: Outbound);
}

/// The flow control of one streamed response, shared by the call that writes its body and the
/// event loop that sends it: the bytes handed over and not yet written to the socket, and
/// whether the client is gone.
///
/// The writer takes room before each piece ([`Flow::poll_room`]); past [`Flow::limit`] it
/// waits, its call suspended, until the loop has written enough ([`Flow::release`]). So the
/// host holds at most the limit plus one piece for a response, however slow its client. When
/// the connection ends the loop closes the flow, and the writer's wait, and every later write,
/// fails.
#[derive(Debug, Clone)]
pub struct Flow(Arc<FlowInner>);

#[derive(Debug)]
struct FlowInner {
    held: std::sync::atomic::AtomicUsize,
    /// Where the held bytes are also summed (its plugin's gauge), if anywhere.
    tally: Option<Arc<AtomicI64>>,
    limit: usize,
    times: StreamTimes,
    closed: AtomicBool,
    /// The server is draining: Server-Sent Events end at their next event.
    draining: AtomicBool,
    /// The writer, while it waits for room.
    waker: Mutex<Option<Waker>>,
}

/// How long a streamed response may last, and go without a piece (its plugin's
/// `stream_timeout_ms` and `stream_idle_timeout_ms`). The connection enforces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamTimes {
    pub idle: std::time::Duration,
    pub total: std::time::Duration,
}

/// The client of a streamed response is gone: nothing more can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowClosed;

impl Flow {
    /// A flow that lets at most `limit` bytes wait to be written, for a stream bounded by
    /// `times`.
    pub fn new(limit: usize, times: StreamTimes) -> Self {
        Self::with_tally(limit, times, None)
    }

    /// A flow whose held bytes are also added to `tally` (and taken off it as they are
    /// written, or when the flow is dropped), so that one gauge sums a plugin's streams.
    pub fn with_tally(limit: usize, times: StreamTimes, tally: Option<Arc<AtomicI64>>) -> Self {
        Flow(Arc::new(FlowInner {
            held: std::sync::atomic::AtomicUsize::new(0),
            tally,
            limit,
            times,
            closed: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            waker: Mutex::new(None),
        }))
    }

    /// The most bytes that wait to be written before the writer waits.
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// How long the stream may last, and pause.
    pub fn times(&self) -> StreamTimes {
        self.0.times
    }

    /// Bytes handed over and not yet written.
    pub fn held(&self) -> usize {
        self.0.held.load(Ordering::Acquire)
    }

    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    /// Ready once a piece may be handed over (fewer than `limit` bytes wait), or with
    /// [`FlowClosed`] once the client is gone.
    pub fn poll_room(&self, cx: &mut Context<'_>) -> Poll<Result<(), FlowClosed>> {
        let ready = || {
            if self.is_closed() {
                Some(Err(FlowClosed))
            } else if self.held() < self.0.limit {
                Some(Ok(()))
            } else {
                None
            }
        };
        if let Some(ready) = ready() {
            return Poll::Ready(ready);
        }
        park(&self.0.waker, cx);
        // The loop may have released or closed between the check and storing the waker.
        ready().map_or(Poll::Pending, Poll::Ready)
    }

    /// Waits for room (see [`Flow::poll_room`]).
    pub async fn room(&self) -> Result<(), FlowClosed> {
        std::future::poll_fn(|cx| self.poll_room(cx)).await
    }

    /// Whether the loop closed the flow; if not, wakes `cx` when it does (or when it writes,
    /// so ask again). Shares the writer's waker: never wait on this and on room at once.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_closed() {
            return Poll::Ready(());
        }
        park(&self.0.waker, cx);
        if self.is_closed() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// The writer hands over `n` bytes.
    pub fn add(&self, n: usize) {
        self.0.held.fetch_add(n, Ordering::AcqRel);
        if let Some(tally) = &self.0.tally {
            tally.fetch_add(n as i64, Ordering::Relaxed);
        }
    }

    /// The loop wrote `n` of the bytes handed over: a writer waiting for room may go on.
    pub fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self
            .0
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                Some(h.saturating_sub(n))
            })
            .unwrap_or(0);
        if let Some(tally) = &self.0.tally {
            tally.fetch_sub(before.min(n) as i64, Ordering::Relaxed);
        }
        if before >= self.0.limit && before.saturating_sub(n) < self.0.limit {
            wake_parked(&self.0.waker);
        }
    }

    /// The server is draining: the writer of Server-Sent Events ends the stream, whole, at
    /// its next event; other streams go on (the drain's deadline cuts them).
    pub fn drain(&self) {
        self.0.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Acquire)
    }

    /// The connection is gone: the writer's wait and every later write fail.
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        wake_parked(&self.0.waker);
    }
}

impl Drop for FlowInner {
    /// What was never written (its client left) no longer counts.
    fn drop(&mut self) {
        if let Some(tally) = &self.tally {
            tally.fetch_sub(*self.held.get_mut() as i64, Ordering::Relaxed);
        }
    }
}

/// A request body on its way from a connection to a call that reads it as it arrives (a
/// wasi:http component's `incoming-body`): the event loop decodes the body and puts each piece
/// in; the call takes the pieces out, waiting (suspended) while none is there.
///
/// Nothing here bounds the pieces: the loop stops taking a body at its plugin's
/// `max_body_bytes`, so an inflow holds at most what a buffered request would.
#[derive(Debug, Clone, Default)]
pub struct Inflow(Arc<InflowInner>);

#[derive(Debug, Default)]
struct InflowInner {
    state: Mutex<InflowState>,
    /// The reader, while it waits for a piece or the end.
    waker: Mutex<Option<Waker>>,
}

#[derive(Debug, Default)]
struct InflowState {
    pieces: std::collections::VecDeque<Vec<u8>>,
    end: Option<InflowEnd>,
    /// The reader is gone: later pieces are dropped.
    abandoned: bool,
}

/// How a body ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InflowEnd {
    /// Whole, with its trailer fields (none unless it was chunked and had some).
    Complete(Vec<(String, Vec<u8>)>),
    /// Past the plugin's body limit of this many bytes: the rest was refused.
    TooLarge(u64),
    /// The client left, or broke the framing, before the end.
    Cut,
}

/// What the reader takes next.
#[derive(Debug, PartialEq, Eq)]
pub enum Inflowing {
    Piece(Vec<u8>),
    End(InflowEnd),
}

impl Inflow {
    /// The loop: the next piece of the body.
    pub fn push(&self, piece: Vec<u8>) {
        if piece.is_empty() {
            return;
        }
        {
            let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.abandoned || state.end.is_some() {
                return;
            }
            state.pieces.push_back(piece);
        }
        wake_parked(&self.0.waker);
    }

    /// The loop: the body ended (a second end is ignored).
    pub fn end(&self, end: InflowEnd) {
        {
            let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.end.is_some() {
                return;
            }
            state.end = Some(end);
        }
        wake_parked(&self.0.waker);
    }

    /// Whether the body has ended, as far as the loop is concerned.
    pub fn has_ended(&self) -> bool {
        let state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.end.is_some()
    }

    /// The reader: the next piece, or the end once every piece was taken; pending (and woken
    /// by the loop) while neither is there.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Inflowing> {
        let take = || {
            let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(piece) = state.pieces.pop_front() {
                return Some(Inflowing::Piece(piece));
            }
            state.end.clone().map(Inflowing::End)
        };
        if let Some(next) = take() {
            return Poll::Ready(next);
        }
        park(&self.0.waker, cx);
        // A piece that came between the look and the parking.
        match take() {
            Some(next) => Poll::Ready(next),
            None => Poll::Pending,
        }
    }

    /// The reader is gone: what is left of the body is dropped as it comes.
    pub fn abandon(&self) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.abandoned = true;
        state.pieces.clear();
    }
}

/// Keeps the waker of the task that waits on `slot` (one waiter at a time: the call).
fn park(slot: &Mutex<Option<Waker>>, cx: &Context<'_>) {
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
}

/// Wakes the task parked on `slot`, if one is.
fn wake_parked(slot: &Mutex<Option<Waker>>) {
    let waker = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(waker) = waker {
        waker.wake();
    }
}
