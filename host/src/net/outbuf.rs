//! The bytes waiting to go out on one connection, HTTP or WebSocket alike: a buffer, how much
//! of it is written, and when output last moved (for the send timeout).

use std::io::Write;
use std::time::{Duration, Instant};

use super::io::{Step, write_some};

/// Capacity a buffer keeps once it is empty: typical responses fit, the largest ever sent
/// does not stay allocated.
const IDLE_CAPACITY_BYTES: usize = 16 * 1024;

/// Output of one connection.
#[derive(Debug, Default)]
pub(crate) struct OutBuf {
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    pos: usize,
    /// When pending output last moved, or first waited: read from the clock only when a
    /// write leaves bytes behind (`None` while output that appeared since is not flushed),
    /// so a response written whole costs no clock read.
    progress: Option<Instant>,
}

impl OutBuf {
    pub(crate) fn new() -> Self {
        OutBuf {
            buf: Vec::new(),
            pos: 0,
            progress: None,
        }
    }

    /// Whether anything is waiting to be written.
    pub(crate) fn pending(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// Unwritten bytes.
    pub(crate) fn backlog(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// How long pending output has made no progress; `None` when nothing is pending.
    pub(crate) fn stalled(&self, now: Instant) -> Option<Duration> {
        self.pending().then(|| {
            self.progress
                .map_or(Duration::ZERO, |p| now.saturating_duration_since(p))
        })
    }

    /// Appends bytes.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.append(|buf| buf.extend_from_slice(bytes));
    }

    /// Appends a whole response; onto an empty backlog it becomes the backlog itself, so the
    /// I/O thread does not copy it.
    pub(crate) fn push_owned(&mut self, bytes: Vec<u8>) {
        if self.pending() {
            self.push(&bytes);
        } else {
            self.progress = None;
            self.buf = bytes;
            self.pos = 0;
        }
    }

    /// Lets `write` append to the unwritten bytes (a frame writer, say).
    pub(crate) fn append(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        if !self.pending() {
            self.progress = None;
        }
        self.compact();
        write(&mut self.buf);
    }

    /// Drops what was written, so the buffer holds only the backlog.
    fn compact(&mut self) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// Writes until everything is written or `dst` would block; returns the bytes written.
    pub(crate) fn flush(&mut self, dst: &mut impl Write) -> std::io::Result<usize> {
        let mut written = 0;
        while self.pending() {
            match write_some(dst, &self.buf[self.pos..])? {
                Step::Moved(n) => {
                    self.pos += n;
                    written += n;
                }
                Step::WouldBlock | Step::Eof => {
                    // Bytes are left behind: the send timeout counts from now.
                    if written > 0 || self.progress.is_none() {
                        self.progress = Some(Instant::now());
                    }
                    return Ok(written);
                }
            }
        }
        self.buf.clear();
        self.pos = 0;
        if self.buf.capacity() > IDLE_CAPACITY_BYTES {
            self.buf = Vec::new();
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `room` bytes, then would block.
    struct Narrow {
        out: Vec<u8>,
        room: usize,
    }

    impl Write for Narrow {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.room);
            self.out.extend_from_slice(&buf[..n]);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_keep_order_and_count() {
        let mut out = OutBuf::new();
        out.push_owned(b"hello ".to_vec());
        out.push(b"world");
        assert_eq!(out.backlog(), 11);
        let mut dst = Narrow {
            out: Vec::new(),
            room: 4,
        };
        assert_eq!(out.flush(&mut dst).unwrap(), 4);
        assert_eq!(out.backlog(), 7);
        out.append(|buf| buf.extend_from_slice(b"!"));
        dst.room = 100;
        assert_eq!(out.flush(&mut dst).unwrap(), 8);
        assert_eq!(dst.out, b"hello world!");
        assert!(!out.pending());
        assert_eq!(out.stalled(Instant::now()), None);
    }

    #[test]
    fn a_stall_counts_from_the_last_write_that_left_bytes_behind() {
        let mut out = OutBuf::new();
        out.push_owned(b"abcdef".to_vec());
        // Not flushed yet: nothing has stalled.
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(out.stalled(later), Some(Duration::ZERO));
        let mut dst = Narrow {
            out: Vec::new(),
            room: 0,
        };
        assert_eq!(out.flush(&mut dst).unwrap(), 0);
        let blocked = out.stalled(later).unwrap();
        assert!(blocked >= Duration::from_secs(59), "{blocked:?}");
        // More output onto a blocked backlog does not restart the clock.
        out.push(b"gh");
        assert!(out.stalled(later).unwrap() >= Duration::from_secs(59));
        dst.room = 2;
        out.flush(&mut dst).unwrap();
        dst.room = 100;
        out.flush(&mut dst).unwrap();
        assert_eq!(out.stalled(later), None);
        assert_eq!(dst.out, b"abcdefgh");
    }
}
