//! The Redis backend (`--kv redis://[:PASSWORD@]HOST:PORT[/DB]`, `rediss://` for TLS): every
//! namespace in one Redis server that any number of ankh processes share, so a plugin sees
//! the same data whichever process serves its request.
//!
//! - **Atomic across processes.** Every call is one Redis command or one Lua script, which
//!   Redis runs alone: a batch is written whole or not at all, a compare-and-swap or an
//!   increment sees no other process's write half-done, and the rules of [`super::rules`]
//!   (quota, keys, expiry, compare-and-swap, increment) are the same, written here in Lua
//!   because they must run inside Redis.
//! - **Layout.** A namespace `NS` is four keys sharing the hash tag `{NS}`: `ankh:kv:{NS}:v`
//!   (a hash, key → value), `:k` (a sorted set of the keys, for listing in order with
//!   `ZRANGEBYLEX`), `:x` (a sorted set of expiries, in milliseconds since the epoch) and
//!   `:u` (the namespace's usage: keys and bytes). `ankh:kv:expiring` names the namespaces
//!   that hold expiring keys, for the sweeper. Expiry is ankh's, not Redis's: an expired key is
//!   invisible at once and reclaimed by the sweeper of any process within a second, exactly as
//!   on the file backend. (One Redis server or a primary with replicas; not Redis Cluster.)
//! - **Waits hold no thread.** Calls run as tasks of a small runtime of the backend's own, over
//!   a bounded pool of multiplexed connections; a plugin call awaiting one is suspended.
//! - **Failures.** Each call is bounded by [`KV_REDIS_TIMEOUT`] for its answer and each
//!   connection attempt by the same; a lost connection is re-made in the background with
//!   backoff. While Redis cannot be reached every call answers `unavailable` with the reason
//!   (never a hang), `/readyz` says so (a ping every [`KV_REDIS_PING_INTERVAL`] notices without
//!   traffic), and everything recovers on its own once Redis is back.
//!
//! [`KV_REDIS_TIMEOUT`]: crate::limits::KV_REDIS_TIMEOUT
//! [`KV_REDIS_PING_INTERVAL`]: crate::limits::KV_REDIS_PING_INTERVAL

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};

#[cfg(test)]
use super::Usage;
use super::{Backend, Bounds, KvError, Millis, Pending, Stats, Write, Written};
use crate::limits::{KV_REDIS_CONNECTIONS, KV_REDIS_PING_INTERVAL, KV_REDIS_TIMEOUT};

/// Every key ankh keeps starts with this.
const PREFIX: &str = "ankh:kv:";

/// Lua shared by the scripts: whether `key` of expiry set `x` is expired at `now`.
const EXPIRED: &str = r"
local function expired(x, key, now)
  local at = redis.call('ZSCORE', x, key)
  return at ~= false and tonumber(at) <= now
end
local function usage(u)
  local keys = tonumber(redis.call('HGET', u, 'keys') or '0')
  local bytes = tonumber(redis.call('HGET', u, 'bytes') or '0')
  return keys, bytes
end
local function set_usage(u, keys, bytes)
  redis.call('HSET', u, 'keys', string.format('%d', keys), 'bytes', string.format('%d', bytes))
end
local function over(nk, nb, keys, bytes, maxk, maxb)
  return (nb > maxb and nb > bytes) or (nk > maxk and nk > keys)
end
";

/// KEYS: v x; ARGV: now, key... → each live value, or nil.
const READ: &str = r"
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if value and expired(KEYS[2], ARGV[i], now) then value = false end
  out[#out + 1] = value
end
return out
";

/// KEYS: k x; ARGV: now, prefix, after, has-after (0/1), limit → live keys in order.
const LIST: &str = r"
local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local limit = tonumber(ARGV[5])
local min, max
if ARGV[4] == '1' then min = '(' .. ARGV[3] elseif prefix == '' then min = '-' else min = '[' .. prefix end
if prefix == '' then max = '+' else max = '[' .. prefix .. '\255' end
local out = {}
while #out < limit do
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], min, max, 'LIMIT', 0, limit)
  for _, key in ipairs(batch) do
    if not expired(KEYS[2], key, now) then
      out[#out + 1] = key
      if #out == limit then return out end
    end
  end
  if #batch < limit then break end
  min = '(' .. batch[#batch]
end
return out
";

/// KEYS: v x k u expiring; ARGV: now, expires (0: never), max bytes, max keys, ns,
/// then key, value pairs → {0} stored, {1} full.
const SET: &str = r"
local exp = tonumber(ARGV[2])
local maxb, maxk = tonumber(ARGV[3]), tonumber(ARGV[4])
local values, order = {}, {}
for i = 6, #ARGV, 2 do
  local key = ARGV[i]
  if values[key] == nil then order[#order + 1] = key end
  values[key] = ARGV[i + 1]
end
local keys, bytes = usage(KEYS[4])
local nk, nb = keys, bytes
for _, key in ipairs(order) do
  local old = redis.call('HGET', KEYS[1], key)
  if old then nk = nk - 1; nb = nb - #key - #old end
  nk = nk + 1; nb = nb + #key + #values[key]
end
if over(nk, nb, keys, bytes, maxk, maxb) then return {1} end
for _, key in ipairs(order) do
  redis.call('HSET', KEYS[1], key, values[key])
  redis.call('ZADD', KEYS[3], 0, key)
  if exp > 0 then redis.call('ZADD', KEYS[2], exp, key) else redis.call('ZREM', KEYS[2], key) end
end
if exp > 0 then redis.call('SADD', KEYS[5], ARGV[5]) end
set_usage(KEYS[4], nk, nb)
return {0}
";

/// KEYS: v x k u; ARGV: now, key... → {0, deleted live keys}.
const DELETE: &str = r"
local now = tonumber(ARGV[1])
local seen, deleted, removed = {}, 0, 0
local keys, bytes = usage(KEYS[4])
for i = 2, #ARGV do
  local key = ARGV[i]
  if not seen[key] then
    seen[key] = true
    local old = redis.call('HGET', KEYS[1], key)
    if old then
      if not expired(KEYS[2], key, now) then deleted = deleted + 1 end
      redis.call('HDEL', KEYS[1], key)
      redis.call('ZREM', KEYS[3], key)
      redis.call('ZREM', KEYS[2], key)
      keys = keys - 1; bytes = bytes - #key - #old
      removed = removed + 1
    end
  end
end
if removed > 0 then set_usage(KEYS[4], keys, bytes) end
return {0, deleted}
";

/// KEYS: v x k u expiring; ARGV: now, expires, max bytes, max keys, ns, key, has-expected
/// (0/1), expected, value → {0, 1} swapped, {0, 0} not, {1} full.
const SWAP: &str = r"
local now, exp = tonumber(ARGV[1]), tonumber(ARGV[2])
local maxb, maxk = tonumber(ARGV[3]), tonumber(ARGV[4])
local key, value = ARGV[6], ARGV[9]
local old = redis.call('HGET', KEYS[1], key)
local live = old
if old and expired(KEYS[2], key, now) then live = false end
if ARGV[7] == '1' then
  if live ~= ARGV[8] then return {0, 0} end
elseif live then
  return {0, 0}
end
local keys, bytes = usage(KEYS[4])
local nk, nb = keys + 1, bytes + #key + #value
if old then nk = nk - 1; nb = nb - #key - #old end
if over(nk, nb, keys, bytes, maxk, maxb) then return {1} end
redis.call('HSET', KEYS[1], key, value)
redis.call('ZADD', KEYS[3], 0, key)
if exp > 0 then
  redis.call('ZADD', KEYS[2], exp, key)
  redis.call('SADD', KEYS[5], ARGV[5])
else
  redis.call('ZREM', KEYS[2], key)
end
set_usage(KEYS[4], nk, nb)
return {0, 1}
";

/// KEYS: v x k u; ARGV: now, max bytes, max keys, key, delta → {0, new value}, {1} full,
/// {2} not a number, {3} overflow. Redis does the 64-bit arithmetic (`HINCRBY`), so the
/// counter is exact however large.
const INCREMENT: &str = r"
local now = tonumber(ARGV[1])
local maxb, maxk = tonumber(ARGV[2]), tonumber(ARGV[3])
local key = ARGV[4]
local keys, bytes = usage(KEYS[4])
local old = redis.call('HGET', KEYS[1], key)
local at = redis.call('ZSCORE', KEYS[2], key)
local nk, nb = keys, bytes
local stale, stale_at = false, false
if old and at and tonumber(at) <= now then
  -- Expired: counts from zero, without its expiry, as a new key.
  stale, stale_at = old, at
  redis.call('HDEL', KEYS[1], key)
  redis.call('ZREM', KEYS[2], key)
  nk = nk - 1; nb = nb - #key - #old
  old = false
end
local r = redis.pcall('HINCRBY', KEYS[1], key, ARGV[5])
if type(r) == 'table' and r.err then
  if string.find(r.err, 'overflow') then return {3} end
  return {2}
end
local new = redis.call('HGET', KEYS[1], key)
if old then nb = nb - #old + #new else nk = nk + 1; nb = nb + #key + #new end
if over(nk, nb, keys, bytes, maxk, maxb) then
  -- Refused: everything as it was.
  if old then
    redis.call('HSET', KEYS[1], key, old)
  elseif stale then
    redis.call('HSET', KEYS[1], key, stale)
    redis.call('ZADD', KEYS[2], stale_at, key)
  else
    redis.call('HDEL', KEYS[1], key)
  end
  return {1}
end
redis.call('ZADD', KEYS[3], 0, key)
set_usage(KEYS[4], nk, nb)
return {0, new}
";

/// KEYS: v x k u expiring; ARGV: now, most, ns → how many were reclaimed.
const SWEEP: &str = r"
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local keys, bytes = usage(KEYS[4])
for _, key in ipairs(due) do
  local old = redis.call('HGET', KEYS[1], key)
  if old then
    redis.call('HDEL', KEYS[1], key)
    keys = keys - 1; bytes = bytes - #key - #old
  end
  redis.call('ZREM', KEYS[3], key)
  redis.call('ZREM', KEYS[2], key)
end
if #due > 0 then set_usage(KEYS[4], keys, bytes) end
if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[5], ARGV[3]) end
return #due
";

/// The scripts, each with the shared Lua in front.
struct Scripts {
    read: Script,
    list: Script,
    set: Script,
    delete: Script,
    swap: Script,
    increment: Script,
    sweep: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let script = |body: &str| Script::new(&format!("{EXPIRED}{body}"));
        Scripts {
            read: script(READ),
            list: script(LIST),
            set: script(SET),
            delete: script(DELETE),
            swap: script(SWAP),
            increment: script(INCREMENT),
            sweep: script(SWEEP),
        }
    }
}

/// The keys of namespace `ns`.
struct Keys {
    values: String,
    expiries: String,
    keys: String,
    usage: String,
}

impl Keys {
    fn of(ns: &str) -> Keys {
        Keys {
            values: format!("{PREFIX}{{{ns}}}:v"),
            expiries: format!("{PREFIX}{{{ns}}}:x"),
            keys: format!("{PREFIX}{{{ns}}}:k"),
            usage: format!("{PREFIX}{{{ns}}}:u"),
        }
    }

    /// `script` on this namespace: its four keys first, in the order every write script
    /// reads them (`KEYS[1..4]`).
    fn call<'a>(&self, script: &'a Script) -> redis::ScriptInvocation<'a> {
        let mut call = script.key(&self.values);
        call.key(&self.expiries).key(&self.keys).key(&self.usage);
        call
    }
}

/// The set of namespaces holding expiring keys.
fn expiring() -> String {
    format!("{PREFIX}expiring")
}

/// Why the store cannot be reached, shared with `/readyz`.
type Trouble = Arc<Mutex<Option<String>>>;

/// Namespaces in a Redis server (see the module's documentation).
pub(crate) struct Redis {
    /// Where, for messages (without a password).
    target: String,
    runtime: tokio::runtime::Runtime,
    connections: Vec<ConnectionManager>,
    next: AtomicUsize,
    scripts: Arc<Scripts>,
    stats: Arc<Stats>,
    trouble: Trouble,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Why the Redis store could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("{url:?} is not a Redis URL: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot reach the key-value store at {target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error("cannot start the Redis client's threads: {0}")]
    Runtime(std::io::Error),
}

/// `redis://[:password@]host:port/db` without the password, for messages and logs.
pub(crate) fn display_url(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://{}", &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// Whether `url` is one the Redis client takes (`redis://`, `rediss://`).
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err("the scheme must be redis:// or rediss://".into());
    }
    redis::Client::open(url)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What a Redis failure tells the plugin.
fn unavailable(e: impl std::fmt::Display) -> KvError {
    KvError::Unavailable(format!("redis: {e}"))
}

impl Redis {
    /// Connects to `url` (every connection of the pool, once, to prove the server is there).
    pub(crate) fn open(url: &str) -> Result<Redis, OpenError> {
        let target = display_url(url);
        let client = redis::Client::open(url).map_err(|e| OpenError::Url {
            url: target.clone(),
            reason: e.to_string(),
        })?;
        let runtime = client_runtime("ankh-redis").map_err(OpenError::Runtime)?;
        let config = manager_config();
        let connections = runtime
            .block_on(async {
                let mut all = Vec::new();
                for _ in 0..KV_REDIS_CONNECTIONS {
                    all.push(
                        client
                            .get_connection_manager_with_config(config.clone())
                            .await?,
                    );
                }
                Ok::<_, redis::RedisError>(all)
            })
            .map_err(|e| OpenError::Unreachable {
                target: target.clone(),
                reason: e.to_string(),
            })?;
        let trouble = Trouble::default();
        runtime.spawn(ping(connections.clone(), trouble.clone(), target.clone()));
        Ok(Redis {
            target,
            runtime,
            connections,
            next: AtomicUsize::new(0),
            scripts: Arc::new(Scripts::new()),
            stats: Arc::default(),
            trouble,
        })
    }

    /// The next connection of the pool.
    fn connection(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        self.connections[i].clone()
    }

    /// Runs `op` on a connection as a task of the backend's runtime, within the timeout; a
    /// failure of Redis itself becomes `unavailable` and is remembered for `/readyz`.
    fn run<T, F, Fut>(&self, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(ConnectionManager, Arc<Scripts>) -> Fut,
        Fut: std::future::Future<Output = Result<Result<T, KvError>, redis::RedisError>>
            + Send
            + 'static,
    {
        let work = op(self.connection(), self.scripts.clone());
        let trouble = self.trouble.clone();
        let target = self.target.clone();
        Pending::task(self.runtime.spawn(async move {
            // The client bounds each answer and connection attempt; this bounds a call whose
            // reconnection is retried too.
            let outcome = match tokio::time::timeout(KV_REDIS_TIMEOUT * 3, work).await {
                Ok(Ok(answer)) => {
                    set_trouble(&trouble, None, &target);
                    return answer;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {:?}", KV_REDIS_TIMEOUT * 3),
            };
            set_trouble(&trouble, Some(outcome.clone()), &target);
            Err(unavailable(outcome))
        }))
    }

    /// Runs `op` and waits for it on this thread (for calls made outside plugin calls).
    fn block<T: Send + 'static>(&self, pending: Pending<T>) -> Result<T, KvError> {
        pending.wait()
    }
}

/// A runtime of one thread for a Redis client's tasks: the store's, or the cluster's.
pub(crate) fn client_runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
}

/// How every pooled Redis connection of ankh behaves: connection attempts and answers
/// bounded by [`KV_REDIS_TIMEOUT`], a lost connection re-made with backoff (50 ms to 1 s).
pub(crate) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(KV_REDIS_TIMEOUT))
        .set_response_timeout(Some(KV_REDIS_TIMEOUT))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_secs(1))
}

/// Records (or clears) why Redis cannot be reached; logs each change once.
fn set_trouble(trouble: &Trouble, now: Option<String>, target: &str) {
    let mut current = trouble.lock().unwrap_or_else(PoisonError::into_inner);
    match (&*current, &now) {
        (None, Some(why)) => tracing::warn!("key-value store {target} unavailable: {why}"),
        (Some(_), None) => tracing::info!("key-value store {target} works again"),
        _ => {}
    }
    *current = now;
}

/// Pings Redis on every connection of the pool every [`KV_REDIS_PING_INTERVAL`], so that
/// `/readyz` follows its state without traffic, and so that a connection lost in an outage
/// is re-made by a ping rather than by the first plugin call after Redis returns (the client
/// answers the call that finds a connection broken with the error, then reconnects).
async fn ping(connections: Vec<ConnectionManager>, trouble: Trouble, target: String) {
    loop {
        tokio::time::sleep(KV_REDIS_PING_INTERVAL).await;
        let mut now = None;
        for mut connection in connections.iter().cloned() {
            let answer = tokio::time::timeout(
                KV_REDIS_TIMEOUT,
                redis::cmd("PING").query_async::<String>(&mut connection),
            )
            .await;
            let why = match answer {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer to PING within {KV_REDIS_TIMEOUT:?}"),
            };
            now.get_or_insert(why);
        }
        set_trouble(&trouble, now, &target);
    }
}

/// A Redis answer as `T`.
fn parse<T: redis::FromRedisValue>(v: Value) -> Result<T, redis::RedisError> {
    T::from_redis_value(v).map_err(Into::into)
}

/// A script's `{code, value}` answer.
fn outcome(v: Value) -> Result<(i64, Option<Value>), redis::RedisError> {
    let mut items: Vec<Value> = parse(v)?;
    let value = if items.len() > 1 { items.pop() } else { None };
    let code = items.pop().ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "an empty answer"))
    })?;
    Ok((parse(code)?, value))
}

/// The error a script's code stands for.
fn refused(code: i64) -> KvError {
    match code {
        1 => KvError::Full,
        2 => KvError::NotANumber,
        3 => KvError::Overflow,
        other => KvError::Unavailable(format!("redis: unexpected answer {other}")),
    }
}

impl Backend for Redis {
    fn get_many(&self, ns: &str, keys: &[String], now: Millis) -> Pending<Vec<Option<Vec<u8>>>> {
        let k = Keys::of(ns);
        let keys = keys.to_vec();
        self.run(move |mut c, scripts| async move {
            let mut call = scripts.read.key(&k.values);
            call.key(&k.expiries).arg(now).arg(&keys);
            let values: Vec<Option<Vec<u8>>> = call.invoke_async(&mut c).await?;
            Ok(Ok(values))
        })
    }

    fn exists(&self, ns: &str, key: &str, now: Millis) -> Pending<bool> {
        let k = Keys::of(ns);
        let key = key.to_owned();
        self.run(move |mut c, scripts| async move {
            let mut call = scripts.read.key(&k.values);
            call.key(&k.expiries).arg(now).arg(&key);
            let values: Vec<Option<Vec<u8>>> = call.invoke_async(&mut c).await?;
            Ok(Ok(values.first().is_some_and(Option::is_some)))
        })
    }

    fn list(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Pending<Vec<String>> {
        let k = Keys::of(ns);
        let prefix = prefix.to_owned();
        let after = after.map(str::to_owned);
        self.run(move |mut c, scripts| async move {
            let mut call = scripts.list.key(&k.keys);
            call.key(&k.expiries)
                .arg(now)
                .arg(&prefix)
                .arg(after.as_deref().unwrap_or(""))
                .arg(u8::from(after.is_some()))
                .arg(limit);
            let keys: Vec<String> = call.invoke_async(&mut c).await?;
            Ok(Ok(keys))
        })
    }

    fn write(&self, ns: &str, write: Write, bounds: &Bounds, now: Millis) -> Pending<Written> {
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        let k = Keys::of(ns);
        let ns = ns.to_owned();
        let bounds = *bounds;
        self.run(move |mut c, scripts| async move {
            let answer: Value = match &write {
                Write::Set { entries, expires } => {
                    let mut call = k.call(&scripts.set);
                    call.key(expiring())
                        .arg(now)
                        .arg(expires.unwrap_or(0))
                        .arg(bounds.max_bytes)
                        .arg(bounds.max_keys)
                        .arg(&ns);
                    for (key, value) in entries {
                        call.arg(key).arg(value);
                    }
                    call.invoke_async(&mut c).await?
                }
                Write::Delete { keys } => {
                    let mut call = k.call(&scripts.delete);
                    call.arg(now).arg(keys);
                    call.invoke_async(&mut c).await?
                }
                Write::Swap {
                    key,
                    expected,
                    value,
                    expires,
                } => {
                    let mut call = k.call(&scripts.swap);
                    call.key(expiring())
                        .arg(now)
                        .arg(expires.unwrap_or(0))
                        .arg(bounds.max_bytes)
                        .arg(bounds.max_keys)
                        .arg(&ns)
                        .arg(key)
                        .arg(u8::from(expected.is_some()))
                        .arg(expected.as_deref().unwrap_or(b""))
                        .arg(value);
                    call.invoke_async(&mut c).await?
                }
                Write::Increment { key, delta } => {
                    let mut call = k.call(&scripts.increment);
                    call.arg(now)
                        .arg(bounds.max_bytes)
                        .arg(bounds.max_keys)
                        .arg(key)
                        .arg(delta);
                    call.invoke_async(&mut c).await?
                }
            };
            let (code, value) = outcome(answer)?;
            if code != 0 {
                return Ok(Err(refused(code)));
            }
            let number = |v: Option<Value>| parse::<i64>(v.unwrap_or(Value::Nil));
            Ok(Ok(match write {
                Write::Set { .. } => Written::Stored,
                Write::Delete { .. } => Written::Deleted(number(value)?.try_into().unwrap_or(0)),
                Write::Swap { .. } => Written::Swapped(number(value)? == 1),
                Write::Increment { .. } => {
                    let text: String = parse(value.unwrap_or(Value::Nil))?;
                    match text.parse() {
                        Ok(n) => Written::Number(n),
                        Err(_) => return Ok(Err(KvError::NotANumber)),
                    }
                }
            }))
        })
    }

    #[cfg(test)]
    fn usage(&self, ns: &str) -> Result<Usage, KvError> {
        let k = Keys::of(ns);
        self.block(self.run(move |mut c, _| async move {
            let (keys, bytes): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
                .arg(&k.usage)
                .arg("keys")
                .arg("bytes")
                .query_async(&mut c)
                .await?;
            Ok(Ok(Usage {
                keys: keys.unwrap_or(0),
                bytes: bytes.unwrap_or(0),
            }))
        }))
    }

    fn sweep(&self, now: Millis, max: usize) -> Result<usize, KvError> {
        self.block(self.run(move |mut c, scripts| async move {
            let namespaces: Vec<String> = redis::cmd("SMEMBERS")
                .arg(expiring())
                .query_async(&mut c)
                .await?;
            let mut swept = 0usize;
            for ns in namespaces {
                if swept >= max {
                    break;
                }
                let k = Keys::of(&ns);
                let mut call = k.call(&scripts.sweep);
                call.key(expiring())
                    .arg(now)
                    // As a count Redis takes (a 64-bit signed number).
                    .arg((max - swept).min(1 << 30))
                    .arg(&ns);
                let n: usize = call.invoke_async(&mut c).await?;
                swept += n;
            }
            Ok(Ok(swept))
        }))
    }

    fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    fn trouble(&self) -> Option<String> {
        self.trouble
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|why| format!("the key-value store {} is unavailable: {why}", self.target))
    }
}
