//! What one connection has read and may read next, HTTP or WebSocket alike.

use std::io::Read;

use super::io::{Step, read_some};
use crate::limits::READ_CHUNK_BYTES;

thread_local! {
    /// Where reads land before they are appended to a connection's buffer.
    static SCRATCH: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; READ_CHUNK_BYTES].into_boxed_slice());
}

/// Capacity a read buffer keeps once it is empty.
const IDLE_CAPACITY_BYTES: usize = 16 * 1024;

/// The read side of a connection.
#[derive(Debug)]
pub(crate) struct Input {
    /// Bytes read and not yet used.
    pub buf: Vec<u8>,
    /// The peer closed its end, or a read failed: nothing more will come.
    pub eof: bool,
    /// The socket may have unread input: set by a readiness event, cleared when a read would
    /// block or comes back short. Saves a `read` syscall per request (see [`Input::read`]).
    readable: bool,
    /// A readiness event said the peer's end of the stream closed: read to the end.
    pub read_closed: bool,
    /// Bytes read since the event loop last collected them for `/metrics`.
    pub bytes_in: u64,
}

impl Default for Input {
    fn default() -> Self {
        Input {
            buf: Vec::new(),
            eof: false,
            readable: true,
            read_closed: false,
            bytes_in: 0,
        }
    }
}

impl Input {
    /// A readiness event arrived.
    pub(crate) fn ready(&mut self, read_closed: bool) {
        self.readable = true;
        self.read_closed |= read_closed;
    }

    /// Reads once through the I/O thread's scratch buffer, so an idle connection holds no
    /// read buffer of its own (with thousands of idle WebSockets, that is most of the memory).
    /// The scratch buffer is zeroed once per thread, not per read: a fresh 16 KiB array on the
    /// stack cost a 16 KiB `memset` per read, 2% of a hello-world load.
    ///
    /// A short read means the socket is drained. The poller is edge-triggered and reports the
    /// next arrival, so the connection is marked unreadable without a second `read` that would
    /// only say `WouldBlock` (tokio does the same). Once the peer has closed its end, reads go
    /// on until end of stream, since no further event will come.
    pub(crate) fn read(&mut self, src: &mut impl Read) -> std::io::Result<Step> {
        if !self.readable {
            return Ok(Step::WouldBlock);
        }
        let step = SCRATCH.with_borrow_mut(|scratch| {
            let step = read_some(src, &mut scratch[..]);
            if let Ok(Step::Moved(n)) = step {
                self.buf.extend_from_slice(&scratch[..n]);
            }
            step
        });
        match step {
            Ok(Step::Moved(n)) => {
                self.bytes_in += n as u64;
                if n < READ_CHUNK_BYTES && !self.read_closed {
                    self.readable = false;
                }
            }
            Ok(Step::WouldBlock) => self.readable = false,
            _ => {}
        }
        step
    }

    /// The next read goes to the socket whether or not a readiness event said so: for a last
    /// look at a connection whose event may not have been handled yet.
    pub(crate) fn look_again(&mut self) {
        self.readable = true;
    }

    /// Frees a large buffer once it is empty.
    pub(crate) fn shrink(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > IDLE_CAPACITY_BYTES {
            self.buf = Vec::new();
        }
    }
}
