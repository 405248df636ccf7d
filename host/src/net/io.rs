//! Non-blocking I/O idioms, named once (see mio's "Draining readiness").

use std::io::{self, Read, Write};
use std::net::SocketAddr;

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

/// A listening socket on `addr` with a backlog of [`LISTEN_BACKLOG`](crate::limits::LISTEN_BACKLOG)
/// (std's `TcpListener::bind` asks for 128: a burst of a few thousand connections then loses
/// SYNs, and their clients wait a second or more to retransmit).
/// With `reuse_port`, `SO_REUSEPORT`: several processes bind the same port and the kernel
/// spreads new connections over them.
pub(crate) fn listen(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // As std does on Unix: a restarted server rebinds while old connections linger.
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(crate::limits::LISTEN_BACKLOG)?;
    Ok(socket.into())
}
