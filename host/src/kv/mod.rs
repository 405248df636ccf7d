//! The key-value store behind the `kv` and `wasi:keyvalue` imports: one namespace per plugin
//! name, shared by every worker and instance of that plugin, and kept when the plugin is
//! unmounted (a later plugin of the same name sees it again).
//!
//! - [`Backend`]: where namespaces live. [`file`](mod@file) is the default: a crash-safe redb database in
//!   the data directory, written by one thread that commits concurrent writes together
//!   (group commit: one transaction and one fsync for all of them). [`memory`] keeps
//!   everything in memory, for tests and throwaway runs. [`redis`](mod@redis) keeps
//!   namespaces in a Redis server that several ankh processes share.
//! - [`rules`]: what each write does (quotas, expiry, compare-and-swap, increment), written once
//!   over a small transaction trait that both backends implement.
//! - [`Namespace`]: one plugin's handle, which checks sizes and batch bounds before a call
//!   reaches the backend. [`Namespace::bucket`] is a named `wasi:keyvalue` bucket inside it:
//!   a key space of its own under the same quota.
//!
//! Every namespace is bounded: the size of a key, of a value, of a batch, the keys it holds and
//! the bytes (keys plus values) it holds (the plugin's `kv_max_bytes`). The memory or disk a
//! plugin can fill through this store is its quota, not the machine.

pub(crate) mod file;
mod handoff;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod rules;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::limits;

/// Milliseconds since the Unix epoch: expiry uses the wall clock, so a time-to-live survives
/// a restart.
pub(crate) type Millis = u64;

/// The wall clock now, in [`Millis`].
pub(crate) fn now() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Why a key-value call failed. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KvError {
    #[error("a key, a value or a batch is over the size limit")]
    TooLarge,
    #[error("the namespace is full")]
    Full,
    #[error("the value is not a decimal 64-bit integer")]
    NotANumber,
    #[error("the result would overflow a 64-bit integer")]
    Overflow,
    #[error("{0}")]
    Invalid(String),
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
}

/// The bounds of one namespace and of each call on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes of keys plus values the namespace may hold.
    pub max_bytes: u64,
    /// Keys the namespace may hold.
    pub max_keys: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    /// Keys, and bytes of keys plus values, in one batch call.
    pub batch_keys: usize,
    pub batch_bytes: usize,
    /// Keys in one page of a listing.
    pub page_keys: usize,
}

impl Bounds {
    /// The default bounds with a byte quota of `max_bytes`.
    pub(crate) fn with_quota(max_bytes: usize) -> Bounds {
        Bounds {
            max_bytes: max_bytes as u64,
            max_keys: limits::KV_MAX_KEYS as u64,
            key_bytes: limits::KV_MAX_KEY_BYTES,
            value_bytes: limits::KV_MAX_VALUE_BYTES,
            batch_keys: limits::KV_MAX_BATCH_KEYS,
            batch_bytes: limits::KV_MAX_BATCH_BYTES,
            page_keys: limits::KV_MAX_PAGE_KEYS,
        }
    }
}

/// What a namespace holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub keys: u64,
    /// Bytes of keys plus values, expired entries included until they are reclaimed.
    pub bytes: u64,
}

/// One atomic write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Store every entry (the last of a key given twice wins), expiring at `expires`.
    Set {
        entries: Vec<(String, Vec<u8>)>,
        expires: Option<Millis>,
    },
    /// Remove every key.
    Delete { keys: Vec<String> },
    /// Store `value` if the live value equals `expected` (`None`: absent).
    Swap {
        key: String,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        expires: Option<Millis>,
    },
    /// Add `delta` to a decimal integer (absent is 0), keeping the key's expiry.
    Increment { key: String, delta: i64 },
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Stored,
    /// How many of the keys held a value.
    Deleted(u32),
    /// Whether the compare-and-swap stored.
    Swapped(bool),
    /// The new value of an increment.
    Number(i64),
}

/// What the store did, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Writes applied (each call, a batch counting once).
    pub writes: AtomicU64,
    /// Transactions committed to disk (file backend): `writes / commits` is the mean group.
    pub commits: AtomicU64,
    /// Calls answered `unavailable`.
    pub unavailable: AtomicU64,
}

/// Where namespaces live. Every method is atomic; a write that returned `Ok` is as durable as
/// the backend promises (on disk, for [`file`](mod@file)).
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// The live values at `keys`, in order, read at one instant. Reads answer at once from
    /// a local store, and later from a remote one: awaiting them holds no thread.
    fn get_many(&self, ns: &str, keys: &[String], now: Millis) -> Pending<Vec<Option<Vec<u8>>>>;
    /// Whether `key` holds a live value.
    fn exists(&self, ns: &str, key: &str, now: Millis) -> Pending<bool>;
    /// Up to `limit` live keys starting with `prefix`, after `after` if given, in order.
    fn list(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Pending<Vec<String>>;
    /// Applies `write` to `ns` within `bounds`, atomically. The outcome may come later (once
    /// the write is durable): awaiting it holds no thread.
    fn write(&self, ns: &str, write: Write, bounds: &Bounds, now: Millis) -> Pending<Written>;
    #[cfg(test)]
    /// What `ns` holds.
    fn usage(&self, ns: &str) -> Result<Usage, KvError>;
    /// Removes up to `max` entries that expired by `now`; returns how many.
    fn sweep(&self, now: Millis, max: usize) -> Result<usize, KvError>;
    /// Its counters.
    fn stats(&self) -> &Arc<Stats>;
    /// Why the store cannot serve now, if it cannot (for `/readyz`).
    fn trouble(&self) -> Option<String> {
        None
    }
}

/// The outcome of a write: known at once (the memory backend, a write refused before it was
/// queued), or once the writer thread has committed it (the file backend). Await it from a
/// plugin call, or [`wait`](Pending::wait) for it from a thread with nothing else to do.
#[derive(Debug)]
pub(crate) struct Pending<T>(PendingState<T>);

#[derive(Debug)]
enum PendingState<T> {
    Ready(Option<Result<T, KvError>>),
    Answer(handoff::Waiting<Result<T, KvError>>),
    /// Running as a task of a backend's own runtime (the Redis backend's).
    Task(tokio::task::JoinHandle<Result<T, KvError>>),
}

/// A writer thread that stopped before answering.
fn writer_stopped() -> KvError {
    KvError::Unavailable("the store is shutting down".into())
}

impl<T> Pending<T> {
    pub(crate) fn ready(result: Result<T, KvError>) -> Self {
        Pending(PendingState::Ready(Some(result)))
    }

    fn answer(waiting: handoff::Waiting<Result<T, KvError>>) -> Self {
        Pending(PendingState::Answer(waiting))
    }

    fn task(task: tokio::task::JoinHandle<Result<T, KvError>>) -> Self {
        Pending(PendingState::Task(task))
    }

    /// Blocks this thread until the outcome is known.
    pub(crate) fn wait(self) -> Result<T, KvError>
    where
        T: Send + 'static,
    {
        match self.0 {
            PendingState::Ready(result) => result.unwrap_or_else(|| Err(writer_stopped())),
            PendingState::Answer(waiting) => {
                waiting.wait().unwrap_or_else(|| Err(writer_stopped()))
            }
            PendingState::Task(task) => handoff::block_on(task).unwrap_or_else(task_failed),
        }
    }
}

/// A backend task that panicked or was cancelled.
fn task_failed<T>(e: tokio::task::JoinError) -> Result<T, KvError> {
    Err(KvError::Unavailable(format!(
        "the store's task failed: {e}"
    )))
}

impl<T: Unpin> std::future::Future for Pending<T> {
    type Output = Result<T, KvError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // Neither variant is self-referential: the future may move between polls.
        let this = self.get_mut();
        match &mut this.0 {
            PendingState::Ready(result) => {
                std::task::Poll::Ready(result.take().unwrap_or_else(|| Err(writer_stopped())))
            }
            PendingState::Answer(waiting) => std::pin::Pin::new(waiting)
                .poll(cx)
                .map(|answer| answer.unwrap_or_else(|| Err(writer_stopped()))),
            PendingState::Task(task) => std::pin::Pin::new(task)
                .poll(cx)
                .map(|done| done.unwrap_or_else(task_failed)),
        }
    }
}

/// Where plugins' key-value data lives (`--kv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvBackend {
    /// A crash-safe database, `kv.redb` in the data directory.
    File,
    /// In memory: lost when the server stops.
    Memory,
    /// A Redis server (`redis://...`, `rediss://...`) that several processes share.
    Redis(String),
}

impl std::str::FromStr for KvBackend {
    type Err = String;

    /// `file`, `memory` or a Redis URL.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "file" => Ok(KvBackend::File),
            "memory" => Ok(KvBackend::Memory),
            url if url.contains("://") => {
                redis::check_url(url)?;
                Ok(KvBackend::Redis(url.to_owned()))
            }
            _ => Err("expected `file`, `memory` or a redis:// URL".to_owned()),
        }
    }
}

impl std::fmt::Display for KvBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvBackend::File => f.write_str("file"),
            KvBackend::Memory => f.write_str("memory"),
            KvBackend::Redis(url) => f.write_str(url),
        }
    }
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error(transparent)]
    File(#[from] file::OpenError),
    #[error(transparent)]
    Redis(#[from] redis::OpenError),
}

/// The store: a backend, and the thread that reclaims expired keys.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    _sweeper: Arc<Sweeper>,
}

impl Store {
    /// Opens the store `backend` names (a file store in `data_dir`). A file store that
    /// cannot be opened (its directory cannot be created, another process holds it, it is
    /// corrupt) is an error, never an empty store.
    pub(crate) fn open(
        backend: &KvBackend,
        data_dir: &std::path::Path,
    ) -> Result<Store, OpenError> {
        let backend: Arc<dyn Backend> = match backend {
            KvBackend::Memory => Arc::new(memory::Memory::default()),
            KvBackend::File => Arc::new(file::File::open(data_dir)?),
            KvBackend::Redis(url) => Arc::new(redis::Redis::open(url)?),
        };
        Ok(Store::with_backend(backend))
    }

    /// An in-memory store.
    pub fn memory() -> Store {
        Store::with_backend(Arc::new(memory::Memory::default()))
    }

    fn with_backend(backend: Arc<dyn Backend>) -> Store {
        let sweeper = Sweeper::start(Arc::downgrade(&backend), limits::KV_SWEEP_INTERVAL);
        Store {
            backend,
            _sweeper: Arc::new(sweeper),
        }
    }

    /// The namespace of plugin `name`, within `bounds`.
    pub(crate) fn namespace(&self, name: &str, bounds: Bounds) -> Namespace {
        Namespace {
            name: Arc::from(name),
            backend: self.backend.clone(),
            bounds,
            bucket: None,
        }
    }

    /// What the store did so far.
    pub(crate) fn stats(&self) -> Arc<Stats> {
        self.backend.stats().clone()
    }

    /// Why the store cannot serve now, if it cannot (for `/readyz`).
    pub(crate) fn trouble(&self) -> Option<String> {
        self.backend.trouble()
    }
}

/// The thread that reclaims expired keys, every [`limits::KV_SWEEP_INTERVAL`]. It holds the
/// backend weakly and stops when the store is dropped.
#[derive(Debug)]
struct Sweeper {
    stop: crossbeam_channel::Sender<()>,
}

impl Sweeper {
    fn start(backend: std::sync::Weak<dyn Backend>, every: Duration) -> Sweeper {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let spawned = std::thread::Builder::new()
            .name("ankh-kv-sweep".into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    let Some(backend) = backend.upgrade() else {
                        return;
                    };
                    if let Err(e) = backend.sweep(now(), limits::KV_SWEEP_BATCH) {
                        warn_limited!("reclaiming expired keys failed: {e}");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the key-value sweeper, expired keys stay on disk: {e}");
        }
        Sweeper { stop }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        // Wakes the thread; its receive then fails, and it ends.
        let _ = self.stop.try_send(());
    }
}

/// One plugin's namespace: size and batch checks, then the backend.
///
/// A named bucket ([`Namespace::bucket`]) is a view of the same namespace whose keys are
/// stored under the prefix `NUL name NUL`: the bucket's keys count against the plugin's one
/// quota, and no bucket sees another's keys or the plain ones. Keys that start with NUL are
/// therefore reserved: the plain key space (`ankh:plugin/kv`, the default bucket) refuses
/// them, and its listings skip the buckets' keys (they sort first, below [`BUCKETS_END`]).
#[derive(Debug, Clone)]
pub(crate) struct Namespace {
    name: Arc<str>,
    backend: Arc<dyn Backend>,
    bounds: Bounds,
    /// The stored prefix of a named bucket's keys (`NUL name NUL`); `None` for the plain
    /// key space.
    bucket: Option<Arc<str>>,
}

/// Greater than every stored bucket key (`NUL`, then a bucket name of printable ASCII,
/// which is below DEL), and less than every plain key (which never starts with NUL).
const BUCKETS_END: &str = "\0\x7f";

/// The longest bucket name, in bytes.
pub(crate) const BUCKET_NAME_BYTES: usize = 64;

/// A time-to-live in milliseconds, as an absolute expiry.
fn expiry(ttl_ms: Option<u64>, now: Millis) -> Result<Option<Millis>, KvError> {
    match ttl_ms {
        None => Ok(None),
        Some(0) => Err(KvError::Invalid(
            "a time-to-live must be at least 1 ms".into(),
        )),
        Some(ms) => Ok(Some(now.saturating_add(ms))),
    }
}

impl Namespace {
    /// Counts a failure of the store itself.
    fn counted<T>(&self, result: Result<T, KvError>) -> Result<T, KvError> {
        if let Err(KvError::Unavailable(_)) = &result {
            self.backend
                .stats()
                .unavailable
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    pub(crate) fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// The bucket `name` of this plugin: its own key space, under the plugin's quota. A name
    /// is 1 to [`BUCKET_NAME_BYTES`] bytes of printable ASCII (no spaces).
    pub(crate) fn bucket(&self, name: &str) -> Result<Namespace, KvError> {
        if name.is_empty()
            || name.len() > BUCKET_NAME_BYTES
            || !name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(KvError::Invalid(format!(
                "a bucket name is 1 to {BUCKET_NAME_BYTES} bytes of printable ASCII without spaces"
            )));
        }
        Ok(Namespace {
            bucket: Some(Arc::from(format!("\0{name}\0"))),
            ..self.clone()
        })
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.len() > self.bounds.key_bytes {
            return Err(KvError::TooLarge);
        }
        if self.bucket.is_none() && key.starts_with('\0') {
            return Err(KvError::Invalid(
                "keys starting with a NUL byte are reserved (wasi:keyvalue buckets)".into(),
            ));
        }
        Ok(())
    }

    /// `key` as stored: behind the bucket's prefix, if this is a bucket.
    fn stored(&self, key: String) -> String {
        match &self.bucket {
            Some(prefix) => format!("{prefix}{key}"),
            None => key,
        }
    }

    /// Every key of `keys` as stored.
    fn stored_all(&self, keys: Vec<String>) -> Vec<String> {
        match &self.bucket {
            Some(_) => keys.into_iter().map(|k| self.stored(k)).collect(),
            None => keys,
        }
    }

    /// A stored key as the plugin named it.
    fn named(&self, mut key: String) -> String {
        if let Some(prefix) = &self.bucket {
            key.drain(..prefix.len());
        }
        key
    }

    fn check_value(&self, value: &[u8]) -> Result<(), KvError> {
        if value.len() > self.bounds.value_bytes {
            return Err(KvError::TooLarge);
        }
        Ok(())
    }

    fn check_batch<'a>(
        &self,
        keys: impl ExactSizeIterator<Item = (&'a str, usize)>,
    ) -> Result<(), KvError> {
        if keys.len() > self.bounds.batch_keys {
            return Err(KvError::TooLarge);
        }
        let mut bytes = 0usize;
        for (key, value_len) in keys {
            self.check_key(key)?;
            if value_len > self.bounds.value_bytes {
                return Err(KvError::TooLarge);
            }
            bytes = bytes.saturating_add(key.len() + value_len);
        }
        if bytes > self.bounds.batch_bytes {
            return Err(KvError::TooLarge);
        }
        Ok(())
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.check_key(key)?;
        let read = self
            .backend
            .get_many(&self.name, &[self.stored(key.to_owned())], now());
        let mut values = self.counted(read.await)?;
        Ok(values.pop().flatten())
    }

    /// The values at `keys`; their total size is bounded like a batch write's.
    pub(crate) async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.check_batch(keys.iter().map(|k| (k.as_str(), 0)))?;
        let stored = self.stored_all(keys.to_vec());
        let values = self.counted(self.backend.get_many(&self.name, &stored, now()).await)?;
        let bytes: usize = values.iter().flatten().map(Vec::len).sum();
        if bytes > self.bounds.batch_bytes {
            return Err(KvError::TooLarge);
        }
        Ok(values)
    }

    pub(crate) async fn exists(&self, key: &str) -> Result<bool, KvError> {
        self.check_key(key)?;
        let key = self.stored(key.to_owned());
        self.counted(self.backend.exists(&self.name, &key, now()).await)
    }

    /// Applies a write and awaits its outcome (holding no thread while the file backend
    /// commits it).
    async fn write(&self, write: Write, now: Millis) -> Result<Written, KvError> {
        let written = self
            .backend
            .write(&self.name, write, &self.bounds, now)
            .await;
        self.counted(written)
    }

    pub(crate) async fn set(
        &self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), KvError> {
        self.check_key(&key)?;
        self.check_value(&value)?;
        let now = now();
        let expires = expiry(ttl_ms, now)?;
        let write = Write::Set {
            entries: vec![(self.stored(key), value)],
            expires,
        };
        self.write(write, now).await.map(drop)
    }

    pub(crate) async fn set_many(
        &self,
        entries: Vec<(String, Vec<u8>)>,
        ttl_ms: Option<u64>,
    ) -> Result<(), KvError> {
        self.check_batch(entries.iter().map(|(k, v)| (k.as_str(), v.len())))?;
        let now = now();
        let expires = expiry(ttl_ms, now)?;
        let entries = entries
            .into_iter()
            .map(|(k, v)| (self.stored(k), v))
            .collect();
        let write = Write::Set { entries, expires };
        self.write(write, now).await.map(drop)
    }

    pub(crate) async fn delete(&self, key: String) -> Result<bool, KvError> {
        self.delete_many(vec![key]).await.map(|n| n > 0)
    }

    pub(crate) async fn delete_many(&self, keys: Vec<String>) -> Result<u32, KvError> {
        self.check_batch(keys.iter().map(|k| (k.as_str(), 0)))?;
        let keys = self.stored_all(keys);
        match self.write(Write::Delete { keys }, now()).await? {
            Written::Deleted(n) => Ok(n),
            other => unreachable_written(other),
        }
    }

    pub(crate) async fn compare_and_swap(
        &self,
        key: String,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<bool, KvError> {
        self.check_key(&key)?;
        self.check_value(&value)?;
        let now = now();
        let expires = expiry(ttl_ms, now)?;
        let write = Write::Swap {
            key: self.stored(key),
            expected,
            value,
            expires,
        };
        match self.write(write, now).await? {
            Written::Swapped(stored) => Ok(stored),
            other => unreachable_written(other),
        }
    }

    pub(crate) async fn increment(&self, key: String, delta: i64) -> Result<i64, KvError> {
        self.check_key(&key)?;
        let key = self.stored(key);
        match self.write(Write::Increment { key, delta }, now()).await? {
            Written::Number(n) => Ok(n),
            other => unreachable_written(other),
        }
    }

    /// One page of keys starting with `prefix`, after `cursor`; the page's last key is the
    /// cursor of the next one when more may follow.
    pub(crate) async fn list_page(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<String>, Option<String>), KvError> {
        self.check_key(prefix)?;
        if let Some(cursor) = cursor {
            self.check_key(cursor)?;
            if !cursor.starts_with(prefix) {
                return Err(KvError::Invalid(
                    "the cursor does not belong to this prefix".into(),
                ));
            }
        }
        if limit == 0 {
            return Err(KvError::Invalid("a page limit must be at least 1".into()));
        }
        let limit = limit.min(self.bounds.page_keys);
        let stored_prefix = self.stored(prefix.to_owned());
        let after = match (cursor, &self.bucket) {
            (Some(cursor), _) => Some(self.stored(cursor.to_owned())),
            // The plain key space starts after the buckets' keys, which sort first.
            (None, None) if prefix.is_empty() => Some(BUCKETS_END.to_owned()),
            (None, _) => None,
        };
        // One more than asked, to know whether a next page exists.
        let listed = self.backend.list(
            &self.name,
            &stored_prefix,
            after.as_deref(),
            limit + 1,
            now(),
        );
        let mut keys = self.counted(listed.await)?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        let keys: Vec<String> = keys.into_iter().map(|k| self.named(k)).collect();
        let next = if more { keys.last().cloned() } else { None };
        Ok((keys, next))
    }

    /// Every key starting with `prefix` (0.1.0's unpaged listing; at most the namespace's
    /// key limit).
    pub(crate) async fn list_all(&self, prefix: &str) -> Result<Vec<String>, KvError> {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let (keys, next) = self
                .list_page(prefix, cursor.as_deref(), self.bounds.page_keys)
                .await?;
            all.extend(keys);
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(all),
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn usage(&self) -> Result<Usage, KvError> {
        self.backend.usage(&self.name)
    }
}

/// A backend answered a write with the result of another kind of write: a bug in the backend.
fn unreachable_written<T>(other: Written) -> Result<T, KvError> {
    Err(KvError::Unavailable(format!(
        "the store answered with {other:?}"
    )))
}

#[cfg(test)]
mod tests;
