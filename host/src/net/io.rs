//! Non-blocking I/O idioms, named once (see mio's "Draining readiness").

use std::io::{self, Read, Write};

/// What a non-blocking read or write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// This many bytes moved.
    Moved(usize),
    /// The socket has nothing more for now; wait for the next readiness event.
    WouldBlock,
    /// The peer closed its side (a read of 0 bytes).
    Eof,
}

/// One `read`, retried on `Interrupted`, with `WouldBlock` and EOF as values.
pub(crate) fn read_some(src: &mut impl Read, buf: &mut [u8]) -> io::Result<Step> {
    loop {
        match src.read(buf) {
            Ok(0) => return Ok(Step::Eof),
            Ok(n) => return Ok(Step::Moved(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::WouldBlock),
            Err(e) => return Err(e),
        }
    }
}

/// One `write`, retried on `Interrupted`, with `WouldBlock` as a value.
pub(crate) fn write_some(dst: &mut impl Write, buf: &[u8]) -> io::Result<Step> {
    loop {
        match dst.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => return Ok(Step::Moved(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::WouldBlock),
            Err(e) => return Err(e),
        }
    }
}
