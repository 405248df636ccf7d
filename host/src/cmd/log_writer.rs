//! Where the log goes: stderr, with access lines batched the way nginx's
//! `access_log ... buffer=` batches them.
//!
//! One access line per request written straight to stderr is a `write` system call per request
//! (and the stderr lock): measured, the access log cost 12-22% of hello-world throughput. Here
//! an access line is appended to a shared buffer, and the buffer is written in one call when it
//! passes [`FLUSH_BYTES`], every [`FLUSH_EVERY`] (a flusher thread), or as soon as any other
//! line is logged: a warning or an error is never held back, and every line keeps its place,
//! since whatever was batched before it is written first. At exit the buffer is written out.
//! What a `kill -9` loses is at most [`FLUSH_EVERY`] of access lines.
//!
//! Appending never waits for a write: the batch is swapped out under the buffer's lock, and
//! written under a second lock (taken before the first is released, so batches go out in
//! order). Writing 32 KiB to a file inside the buffer's lock made every worker that logged
//! meanwhile sleep on it, which cost a tenth of hello world's throughput with two event loops.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Batched access lines are written once this many bytes wait...
const FLUSH_BYTES: usize = 32 * 1024;

/// ...or this long after the first of them, whichever comes first.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The target whose lines are batched.
const ACCESS_TARGET: &str = ankh::access::TARGET;

/// The log's writer (cheap to clone: one shared buffer).
#[derive(Clone, Default)]
pub(crate) struct LogWriter {
    pending: Arc<Mutex<Vec<u8>>>,
    /// Held while a batch is written to stderr, so that batches keep their order; its buffer
    /// is the spare that the next batch swaps in.
    output: Arc<Mutex<Vec<u8>>>,
    /// Access lines wait in `pending` (a flusher thread runs).
    batch: bool,
    /// Rung when a line lands in an empty `pending`: the flusher sleeps on it while there is
    /// nothing to write (an idle server's log thread never wakes).
    arrived: Arc<Condvar>,
}

impl LogWriter {
    /// A writer that writes every line at once.
    pub(crate) fn direct() -> LogWriter {
        LogWriter::default()
    }

    /// A writer that batches access lines, with a thread that writes them out
    /// [`FLUSH_EVERY`] after the first of a batch arrived. Without that thread, every line is
    /// written at once.
    pub(crate) fn batching() -> LogWriter {
        let writer = LogWriter {
            batch: true,
            ..LogWriter::default()
        };
        let flusher = writer.clone();
        let spawned = std::thread::Builder::new()
            .name("ankh-log".into())
            .spawn(move || {
                loop {
                    let pending = flusher.lock();
                    let pending = flusher
                        .arrived
                        .wait_while(pending, |p| p.is_empty())
                        .unwrap_or_else(PoisonError::into_inner);
                    drop(pending);
                    std::thread::sleep(FLUSH_EVERY);
                    flusher.flush();
                }
            });
        match spawned {
            Ok(_) => writer,
            Err(_) => LogWriter::direct(),
        }
    }

    /// An access line, formatted whole (see [`ankh::access::Sink`]): batched like any.
    pub(crate) fn append_access(&self, line: &[u8]) {
        let _ = Line {
            writer: self,
            batched: self.batch,
        }
        .write(line);
    }

    /// Writes out whatever is batched.
    pub(crate) fn flush(&self) {
        let pending = self.lock();
        self.write_out(pending);
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the batch out of `pending` (which it unlocks) and writes it to stderr in one call
    /// (or as few as the pipe takes). A log that cannot be written is dropped, as `eprintln!`
    /// would not.
    fn write_out(&self, mut pending: MutexGuard<'_, Vec<u8>>) {
        if pending.is_empty() {
            return;
        }
        let mut batch = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::swap(&mut *pending, &mut *batch);
        drop(pending);
        let _ = std::io::stderr().lock().write_all(&batch);
        batch.clear();
        if batch.capacity() > 4 * FLUSH_BYTES {
            batch.shrink_to(FLUSH_BYTES);
        }
    }
}

/// One event's output.
pub(crate) struct Line<'a> {
    writer: &'a LogWriter,
    batched: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let mut pending = self.writer.lock();
        let first = pending.is_empty();
        pending.extend_from_slice(data);
        if !self.batched || pending.len() >= FLUSH_BYTES {
            self.writer.write_out(pending);
        } else if first {
            self.writer.arrived.notify_one();
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            writer: self,
            batched: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Line<'a> {
        Line {
            writer: self,
            batched: self.batch && meta.target() == ACCESS_TARGET,
        }
    }
}
