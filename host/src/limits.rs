//! Every bound the host enforces, in one place.
//!
//! Each constant carries its unit in its name and is the default of a field of [`Limits`], which
//! the configuration may override. Nothing else in the host hard-codes a size, a count or a time.

use std::time::Duration;

/// Largest request head (request line plus header block) in bytes; past it: 431.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Largest request-target in bytes; past it: 414.
pub const MAX_TARGET_BYTES: usize = 4 * 1024;

/// Most header fields in one request; past it: 431.
pub const MAX_HEADERS: usize = 100;

/// Largest request body in bytes, declared or chunked; past it: 413.
pub const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// Longest chunk-size line (size plus extensions) in bytes; past it: 400.
pub const MAX_CHUNK_LINE_BYTES: usize = 1024;

/// Requests waiting for a worker before new ones get 503 + `Retry-After`.
pub const QUEUE_DEPTH: usize = 1024;

/// Plugin calls in flight at once, running or suspended in a wait (a sleep, a socket, a
/// commit): each holds an instance and a fiber stack. Past it, requests wait in the queue.
/// Sizes the pooling allocator, whose address-space reservation grows with it (about 8 GiB
/// of virtual memory, not resident, per call: 42 TiB of the 128 TiB a process may address,
/// and 52 MiB resident at start). Four times one plugin's share ([`MAX_CONCURRENCY`]), so
/// that a plugin alone still has the 1,024 calls in flight it had before shares existed.
pub const MAX_CALLS: usize = 4096;

/// Calls one plugin may have in flight at once: its requests (answered early or not, until
/// their handler returns) and its WebSocket events. Past it the plugin's requests get 503 +
/// `Retry-After` and its WebSocket events wait, so that no plugin holds every one of the
/// server's [`MAX_CALLS`] and the others are always served. Its default is a quarter of
/// `max_calls` (`--max-calls`), whatever that is set to. Policy: `limits.max_concurrency`,
/// which may only lower it.
pub const MAX_CONCURRENCY: usize = MAX_CALLS / 4;

/// Seconds a client is told to wait in `Retry-After` when the queue is full.
pub const RETRY_AFTER_SECS: u32 = 1;

/// Worker threads per CPU core when `--workers` is not given. Handlers block (a database call, a
/// sleep), so, as in Mummy, the pool is much larger than the core count.
pub const WORKERS_PER_CORE: usize = 10;

/// CPU time one plugin call (a request or an event) may use before it is interrupted: 504.
pub const GUEST_CPU_DEADLINE: Duration = Duration::from_secs(2);

/// Wall-clock time one plugin call (a request or an event, or an instantiation) may take,
/// waiting included; past it the call is stopped: 504, instance replaced.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// Period of the epoch ticker that checks the deadline. The deadline is enforced within one tick.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// A response body past this many bytes is encoded (and compressed), and a wasi:http
/// component's body past it collected, on a worker rather than on the event loop that started
/// the call: compressing 256 KiB takes about 0.25 ms here (a 60 MiB body took 55 ms), the
/// order of what one loop spends on one call's guest before it hands the call on.
pub const LOOP_BODY_BYTES: usize = 256 * 1024;

/// The most bytes of one streamed response the host holds, handed over by the call and not
/// yet written to the client: past it, the call's next write waits (suspended) until the
/// client has read. With [`STREAM_PIECE_BYTES`], a response holds at most their sum.
pub const STREAM_BUFFER_BYTES: usize = 256 * 1024;

/// The largest piece a streamed body is handed to the event loop in: a bigger write is split.
pub const STREAM_PIECE_BYTES: usize = 64 * 1024;

/// Where event loops are fewer than cores: the guest time one loop spends on the calls it
/// starts itself between two polls. Past it, the round's new calls go to the workers, which
/// run on the cores no loop holds (where every core has a loop, a loop keeps them all).
pub const LOOP_GUEST_BUDGET: Duration = Duration::from_millis(1);

/// Linear memory one plugin instance may grow to; past it the instance traps: 500.
pub const GUEST_MEMORY_BYTES: usize = 64 * 1024 * 1024;

/// Wasm stack one plugin call may use; past it the call traps (stack overflow): 500.
pub const GUEST_STACK_BYTES: usize = 1024 * 1024;

/// Stack for host code on a call's fiber, above the guest's [`GUEST_STACK_BYTES`] (a host import
/// runs on the fiber of the call that made it). Touched pages only are resident.
pub const FIBER_HOST_STACK_BYTES: usize = 1024 * 1024;

/// Entries (streams, pollables, sockets...) one instance's resource table may hold; past it the
/// host call that needed one traps: 500, instance replaced. wasmtime's own default is a
/// million, about 50 MB of host memory per instance for a guest that leaks pollables.
pub const GUEST_TABLE_ENTRIES: usize = 10_000;

/// Elements one wasm table of an instance may grow to (function references); past it the
/// growth fails as wasm's `table.grow` does. wasmtime's own default allows any.
pub const GUEST_TABLE_ELEMENTS: usize = 1_000_000;

/// Resolution of the clocks a plugin reads unless its policy asks for `precise_clocks`: the
/// one browsers use against timing side channels.
pub const GUEST_CLOCK_RESOLUTION: Duration = Duration::from_micros(100);

/// At start, how long the server waits for a compiled plugin's start code before it listens
/// without it (the plugin is mounted once it has started, like a hot reload).
pub const PLUGIN_START_GRACE: Duration = Duration::from_secs(1);

/// An instance whose linear memory grew by more than this during its life is replaced after
/// the call that grew it: wasm memory never shrinks, and a burst of large requests must not
/// pin workers × plugins × their peak for the life of the process. Policy:
/// `instances.recycle_growth_mib`.
pub const INSTANCE_RECYCLE_GROWTH_BYTES: usize = 8 * 1024 * 1024;

/// Idle instances one plugin keeps for its next calls, unless its policy says otherwise
/// (`instances.max_idle`); more are made on demand. Calls that wait together finish together,
/// so a pool smaller than the calls in flight drops instances at every wave and makes them
/// again at the next (measured: 1,000 connections sleeping 10 ms, with 64 kept, spent a
/// third of the CPU making and unmapping instances).
pub const INSTANCES_IDLE_PER_PLUGIN: usize = 1024;

/// Requests one instance of a WASI 0.3 component serves at once (`instances.concurrent`), as
/// `wasmtime serve` and Spin do by default.
pub const P3_CONCURRENT_REQUESTS: usize = 16;

/// Requests one instance of a WASI 0.3 component serves in all before it goes, unless its
/// policy sets `instances.recycle_after` (`instances.mode = "fresh"`: one), as `wasmtime
/// serve` and Spin do by default.
pub const P3_REUSE_REQUESTS: usize = 128;

/// Instance slots the pooling allocator lets wait before it gives their memory back to the
/// system in one batch. Batching saves a system call and a TLB flush per slot: with a fresh
/// wasi:http instance per request, 64 gave 19% more requests than 1 (about 7,800 against
/// 5,950 req/s here), and 8 as many as 64 within the noise. A waiting slot keeps what its
/// instance touched, so what the pool keeps after a burst is at most this many slots'
/// memory (8 × `--memory-limit-mib`; 64 kept 2.2 GB after 30 instances of 60 MiB).
pub const DECOMMIT_BATCH_SLOTS: usize = 8;

/// Idle instances all plugins together keep; sizes the pooling allocator beside
/// [`MAX_CALLS`].
pub const INSTANCES_IDLE_TOTAL: usize = 1024;

/// An idle instance unused this long is dropped, so the pool shrinks back after a burst.
pub const INSTANCE_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often idle instances are checked against [`INSTANCE_IDLE_TIMEOUT`].
pub const INSTANCE_TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Instances that may exist beside calls and idle ones: plugins being loaded and checked
/// (each is instantiated once to prove that it starts).
pub const INSTANCES_SPARE: usize = 64;

/// Connections the kernel may hold for the listener before they are accepted (the kernel
/// caps it at `net.core.somaxconn`, 4096 by default).
pub const LISTEN_BACKLOG: i32 = 4096;

/// Bytes read from a socket per `read` call.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Bodies at or below this size are never compressed (the gain does not pay the CPU).
pub const GZIP_MIN_BYTES: usize = 860;

/// The gzip/deflate level for responses. Level 1 (nginx's default) compressed a 4.6 KB JSON body
/// to 407 bytes in 11 µs; levels 4-6 got 364 bytes in 20-35 µs (`cargo bench --bench micro`).
pub const GZIP_LEVEL: u32 = 1;

/// Longest line a plugin may write to stdout/stderr before it is split.
pub const GUEST_LOG_LINE_BYTES: usize = 4 * 1024;

/// Lines a plugin may put in the host's log in each one-second window (stdout, stderr and
/// `log` calls together). Past it lines are dropped and counted
/// (`ankh_plugin_log_lines_dropped_total`), and the next line that passes is preceded by a
/// warning saying how many were dropped: a chatty or hostile plugin cannot flood the log.
pub const GUEST_LOG_LINES_PER_SECOND: u32 = 1000;

/// Longest message of a plugin's `log` call, in bytes; the rest is cut and the line says so.
pub const GUEST_LOG_MESSAGE_BYTES: usize = 8 * 1024;

/// Largest key-value key, in bytes.
pub const KV_MAX_KEY_BYTES: usize = 1024;

/// Largest key-value value, in bytes.
pub const KV_MAX_VALUE_BYTES: usize = 1024 * 1024;

/// Most keys in one plugin's key-value namespace.
pub const KV_MAX_KEYS: usize = 100_000;

/// Bytes one plugin's key-value namespace may hold (keys plus values); past it: `full`.
pub const KV_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Most keys in one key-value batch call (`get-many`, `set-many`, `delete-many`).
pub const KV_MAX_BATCH_KEYS: usize = 1000;

/// Most bytes (keys plus values) one key-value batch call moves, either way.
pub const KV_MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// Most keys in one page of `list-keys` (a larger limit is lowered to this).
pub const KV_MAX_PAGE_KEYS: usize = 1000;

/// Most writes the file store commits together, in one transaction and one fsync.
pub const KV_GROUP_COMMIT_MAX: usize = 1024;

/// How often expired keys are reclaimed, and how many at most in one pass.
pub const KV_SWEEP_INTERVAL: Duration = Duration::from_secs(1);
pub const KV_SWEEP_BATCH: usize = 10_000;

/// Memory the file store may use to cache pages of its database.
pub const KV_FILE_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// After an I/O error (a full disk, a read-only device), how often the file store tries to
/// reopen its database.
pub const KV_REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// Open `list-keys` cursors one `wasi:keyvalue` bucket remembers (its cursors are numbers;
/// the oldest is forgotten first).
pub const KV_WASI_CURSORS: usize = 64;

/// The Redis key-value backend: connections to Redis per process (each multiplexes every
/// call in flight).
pub const KV_REDIS_CONNECTIONS: usize = 4;

/// The Redis key-value backend: how long a connection attempt, and the answer to a call, may
/// take before the call answers `unavailable`.
pub const KV_REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// The Redis key-value backend: how often Redis is pinged, so `/readyz` follows its state.
pub const KV_REDIS_PING_INTERVAL: Duration = Duration::from_secs(1);

/// Cross-process WebSockets (`--pubsub`): how long a process's node stays alive in Redis
/// after its last refresh (every [`KV_REDIS_PING_INTERVAL`]). A connection of a process gone
/// this long answers `closed` to a sender on another process.
pub const CLUSTER_NODE_TTL: Duration = Duration::from_secs(5);

/// Cross-process WebSockets: opened and closed connections waiting to be written to Redis's
/// roster. Beyond this, a connection is not reachable from other processes (and a warning
/// says so).
pub const CLUSTER_ROSTER_QUEUE: usize = 65_536;

/// Cross-process WebSockets: roster entries written in one pipelined round trip.
pub const CLUSTER_ROSTER_BATCH: usize = 1024;

/// Outbound HTTP (`wasi:http/outgoing-handler`): how long a connection may take to open (the
/// name lookup included). wasi-http's own default is 600 s.
pub const OUTBOUND_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Outbound HTTP: how long the response head may take once the request is sent.
pub const OUTBOUND_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Outbound HTTP: how long the response body may go without a byte.
pub const OUTBOUND_BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(30);

/// Outbound HTTP: the largest response body a plugin receives; past it the body ends with
/// `HTTP-response-body-size`.
pub const OUTBOUND_MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// Outbound HTTP: requests in flight, and connections open, from one plugin to one origin;
/// a request past it waits for one to finish. Every connection may stay idle for reuse.
/// (At 16, 64 clients each waiting on one call to the same service queued for these places:
/// 0.85 of the throughput at 64, by round, and p99 8.1 against 5.6 ms; see
/// docs/performance.md.)
pub const OUTBOUND_CONNECTIONS_PER_ORIGIN: usize = 64;

/// Outbound HTTP: requests in flight, and connections open, from one plugin to all origins.
pub const OUTBOUND_CONNECTIONS_PER_PLUGIN: usize = 256;

/// Outbound HTTP: an idle pooled connection is closed after this long.
pub const OUTBOUND_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Outbound HTTP: origins per plugin with a request limiter of their own (a wildcard grant
/// names many); past it, limiters with nothing in flight are forgotten.
pub const OUTBOUND_ORIGINS_POOLED: usize = 1024;

/// Outbound HTTP: origins per plugin counted apart in `/metrics`; the rest count as `other`.
pub const OUTBOUND_ORIGINS_COUNTED: usize = 64;

/// The largest `wasi:http/proxy` response body read whole, where the call has no connection
/// to stream it to (the `Runtime` API); past it the client gets 502. A served body past
/// [`STREAM_PIECE_BYTES`] streams instead.
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes one write into a wasi:http body stream may carry (wasi-http's `check-write`
/// budget). Small, so that the host memory a body buffers is bounded by its byte cap
/// whatever the write pattern (see `runtime::engine::proxy`).
pub const HTTP_BODY_WRITE_BYTES: usize = 4096;

/// The most of a wasi:http body the host holds that its reader has not taken: what a guest
/// may write into its response before `response-outparam.set` (or into an outbound request
/// before sending it), and what a streamed body may run ahead of the client, on top of
/// [`STREAM_BUFFER_BYTES`]. Past it the guest's write waits (a guest that writes more than
/// this before `set` waits until its handler timeout, as under `wasmtime serve`, whose
/// buffer is one chunk of 1 MiB).
pub const HTTP_BODY_AHEAD_BYTES: usize = 1024 * 1024;

/// The admin listener: the longest request head, in bytes (past it: 431).
pub const ADMIN_MAX_REQUEST_BYTES: usize = 4096;

/// The admin listener: connections open at once; past it the oldest is closed to make room
/// for the new one, so a probe is always taken in however many clients drip bytes.
pub const ADMIN_MAX_CONNECTIONS: usize = 1024;

/// The admin listener: how long an answer may take to be written out before its connection
/// is dropped. (Its request heads have the main port's deadline, `--head-timeout-ms`.)
pub const ADMIN_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Open client connections; the one past this is accepted and closed at once.
pub const MAX_CONNECTIONS: usize = 10_000;

/// Unsent response bytes one connection may hold. A reply that would push a backlog that is
/// already non-empty past this closes the connection: the client is not reading.
pub const MAX_SEND_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// A connection with no request in progress (before its first byte, or between keep-alive
/// requests) is closed after this long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// From the first byte of a request to the end of its head; past it: 408 and close, however
/// steadily the bytes trickle in.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// From the first byte of a request to the end of its body, plus a second for every
/// [`MIN_BODY_RATE`] bytes of body received; past it: 408 and close. A steady upload faster
/// than that rate is never cut, however long it takes; a slower one (slowloris) is.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The slowest average rate, in bytes per second, at which a body may arrive once
/// [`REQUEST_TIMEOUT`] has passed (see there).
pub const MIN_BODY_RATE: u64 = 1024;

/// A body from which no byte arrives for this long is cut: 408 and close (nginx's
/// `client_body_timeout`).
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection whose pending output makes no progress for this long is closed.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A streamed response whose producer hands over no piece for this long is ended: its
/// connection closes, and the producer's call is stopped. Server-Sent Events sources send a
/// comment as a keep-alive more often than this (the SDK's `sse` keep-alive: every 15 s).
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a streamed response may last, from its head: past it, it is ended as at
/// [`STREAM_IDLE_TIMEOUT`]. Once a response streams, this (not [`HANDLER_TIMEOUT`]) bounds
/// its call's wall-clock time.
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(3600);

/// After SIGTERM/SIGINT, how long in-flight requests get to finish before everything still
/// open is closed.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// After an answer that closes the connection (an error, or `Connection: close`), the server
/// shuts down its sending side and reads on, discarding, so that a client still uploading
/// a body reads the answer instead of a reset (RFC 9112 §9.6; nginx's `lingering_close`).
/// It stops when the client closes, or after this long in all...
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(30);

/// ...or after this long without a byte from the client...
pub const LINGER_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// ...or once this many bytes were discarded.
pub const LINGER_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Largest WebSocket message a client may send, in bytes; a frame declaring more is refused
/// with Close 1009 as soon as its length is read, before its payload is buffered.
pub const WS_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// A WebSocket connection silent for this long is pinged.
pub const WS_PING_INTERVAL: Duration = Duration::from_secs(30);

/// A pinged WebSocket connection that sends nothing back for this long is closed.
pub const WS_PONG_TIMEOUT: Duration = Duration::from_secs(30);

/// After a Close frame is sent, how long the peer has to answer before TCP is closed anyway.
pub const WS_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Events of one WebSocket connection waiting for the plugin; past this the host stops reading
/// from that connection until the plugin catches up (back-pressure on the client).
pub const WS_MAX_QUEUED_EVENTS: usize = 64;

/// Whether WebSockets negotiate permessage-deflate (RFC 7692) with clients that offer it. A
/// compressed message is held to [`WS_MAX_MESSAGE_BYTES`] once inflated, checked while it is.
pub const WS_COMPRESSION: bool = true;

/// Longest topic name, in bytes.
pub const WS_MAX_TOPIC_BYTES: usize = 256;

/// Most topics one connection may subscribe to.
pub const WS_MAX_TOPICS_PER_CONNECTION: usize = 64;

/// Most configuration values one plugin may declare (`[[config]]` in its policy).
pub const CONFIG_VALUES_PER_PLUGIN: usize = 256;

/// Longest configuration value, in bytes, from any source: a longer one refuses the plugin.
pub const CONFIG_VALUE_MAX_BYTES: usize = 64 * 1024;

/// Largest secrets file (`--secrets FILE`), or file of a secrets directory, ankh reads.
pub const SECRETS_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// Most schedules one plugin may declare (`[[schedule]]` in its policy).
pub const SCHEDULES_PER_PLUGIN: usize = 64;

/// The shortest interval a schedule may give (`every`).
pub const SCHEDULE_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a tick's claim is kept in the store at least (and at most one hour): longer than
/// any clock skew between the processes that compete for it.
pub const SCHEDULE_TICK_CLAIM_MIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Beyond its plugin's `handler_timeout_ms`, how long a run's claim on its schedule outlives
/// the run's start: a process killed in a run frees its schedule after that.
pub const SCHEDULE_RUN_CLAIM_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a tick that waits for the run before it (`overlap = "queue"`) asks again.
pub const SCHEDULE_QUEUE_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// How often the scheduler looks for plugins that were loaded, reloaded or removed.
pub const SCHEDULE_RESCAN: std::time::Duration = std::time::Duration::from_millis(500);

/// A configuration that holds a set of [`Limits`]: the server's, or a plugin policy's (which
/// starts from the server's). Lets one declaration of each limit (`config::limit_settings`)
/// read and write both.
pub(crate) trait HasLimits {
    fn limits(&self) -> &Limits;
    fn limits_mut(&mut self) -> &mut Limits;
}

/// The limits in force, with the constants above as defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// See [`MAX_HEAD_BYTES`].
    pub max_head_bytes: usize,
    /// See [`MAX_TARGET_BYTES`].
    pub max_target_bytes: usize,
    /// See [`MAX_HEADERS`].
    pub max_headers: usize,
    /// See [`MAX_BODY_BYTES`].
    pub max_body_bytes: u64,
    /// See [`QUEUE_DEPTH`].
    pub queue_depth: usize,
    /// See [`MAX_CALLS`].
    pub max_calls: usize,
    /// See [`MAX_CONCURRENCY`].
    pub max_concurrency: usize,
    /// See [`GUEST_CPU_DEADLINE`].
    pub guest_cpu_deadline: Duration,
    /// See [`GUEST_MEMORY_BYTES`].
    pub guest_memory_bytes: usize,
    /// See [`HANDLER_TIMEOUT`].
    pub handler_timeout: Duration,
    /// See [`KV_MAX_BYTES`].
    pub kv_max_bytes: usize,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`MAX_SEND_BUFFER_BYTES`].
    pub max_send_buffer_bytes: usize,
    /// See [`IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`HEAD_TIMEOUT`].
    pub head_timeout: Duration,
    /// See [`REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// See [`MIN_BODY_RATE`].
    pub min_body_rate: u64,
    /// See [`BODY_IDLE_TIMEOUT`].
    pub body_idle_timeout: Duration,
    /// See [`SEND_TIMEOUT`].
    pub send_timeout: Duration,
    /// See [`STREAM_IDLE_TIMEOUT`].
    pub stream_idle_timeout: Duration,
    /// See [`STREAM_TIMEOUT`].
    pub stream_timeout: Duration,
    /// See [`DRAIN_TIMEOUT`].
    pub drain_timeout: Duration,
    /// See [`WS_MAX_MESSAGE_BYTES`].
    pub ws_max_message_bytes: usize,
    /// See [`WS_PING_INTERVAL`].
    pub ws_ping_interval: Duration,
    /// See [`WS_PONG_TIMEOUT`].
    pub ws_pong_timeout: Duration,
    /// See [`WS_COMPRESSION`].
    pub ws_compression: bool,
    /// See [`MAX_RESPONSE_BYTES`].
    pub max_response_bytes: u64,
    /// See [`OUTBOUND_CONNECT_TIMEOUT`].
    pub outbound_connect_timeout: Duration,
    /// See [`OUTBOUND_FIRST_BYTE_TIMEOUT`].
    pub outbound_first_byte_timeout: Duration,
    /// See [`OUTBOUND_BETWEEN_BYTES_TIMEOUT`].
    pub outbound_between_bytes_timeout: Duration,
    /// See [`OUTBOUND_MAX_RESPONSE_BYTES`].
    pub outbound_max_response_bytes: u64,
    /// See [`OUTBOUND_CONNECTIONS_PER_ORIGIN`].
    pub outbound_connections_per_origin: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: MAX_HEAD_BYTES,
            max_target_bytes: MAX_TARGET_BYTES,
            max_headers: MAX_HEADERS,
            max_body_bytes: MAX_BODY_BYTES,
            queue_depth: QUEUE_DEPTH,
            max_calls: MAX_CALLS,
            max_concurrency: MAX_CONCURRENCY,
            guest_cpu_deadline: GUEST_CPU_DEADLINE,
            guest_memory_bytes: GUEST_MEMORY_BYTES,
            handler_timeout: HANDLER_TIMEOUT,
            kv_max_bytes: KV_MAX_BYTES,
            max_connections: MAX_CONNECTIONS,
            max_send_buffer_bytes: MAX_SEND_BUFFER_BYTES,
            idle_timeout: IDLE_TIMEOUT,
            head_timeout: HEAD_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            min_body_rate: MIN_BODY_RATE,
            body_idle_timeout: BODY_IDLE_TIMEOUT,
            send_timeout: SEND_TIMEOUT,
            stream_idle_timeout: STREAM_IDLE_TIMEOUT,
            stream_timeout: STREAM_TIMEOUT,
            drain_timeout: DRAIN_TIMEOUT,
            ws_max_message_bytes: WS_MAX_MESSAGE_BYTES,
            ws_ping_interval: WS_PING_INTERVAL,
            ws_pong_timeout: WS_PONG_TIMEOUT,
            ws_compression: WS_COMPRESSION,
            max_response_bytes: MAX_RESPONSE_BYTES,
            outbound_connect_timeout: OUTBOUND_CONNECT_TIMEOUT,
            outbound_first_byte_timeout: OUTBOUND_FIRST_BYTE_TIMEOUT,
            outbound_between_bytes_timeout: OUTBOUND_BETWEEN_BYTES_TIMEOUT,
            outbound_max_response_bytes: OUTBOUND_MAX_RESPONSE_BYTES,
            outbound_connections_per_origin: OUTBOUND_CONNECTIONS_PER_ORIGIN,
        }
    }
}
