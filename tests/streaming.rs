//! Streamed responses (issue 34): a body that leaves as it is written, with chunked framing,
//! trailers, backpressure from a client that does not read, and a client that leaves. The
//! producers are a `wasi:http` component (`httpecho`), whose body ankh streams, and an
//! own-world plugin built with the SDK (`probe`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{Options, TestServer, plugins, read_chunked, read_response, read_to_close};
use crate::metrics::{admin_addr, scrape, value, wait_metric};
use crate::upstream::{Mode, Upstream};

const MIB: u64 = 1024 * 1024;

/// Reads a response head: the status line and the header lines, lowercased names.
fn read_head(r: &mut impl BufRead) -> (String, Vec<(String, String)>) {
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            return (status, headers);
        }
        let (n, v) = line.split_once(':').unwrap();
        headers.push((n.to_ascii_lowercase(), v.trim().to_owned()));
    }
}

/// One chunk of a chunked body (its data), or `None` at the last chunk.
fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    let size = usize::from_str_radix(size.trim_end(), 16).unwrap();
    if size == 0 {
        return None;
    }
    let mut data = vec![0; size + 2];
    r.read_exact(&mut data).unwrap();
    data.truncate(size);
    Some(data)
}

/// A server with plugin `wasm` (served as `name`), granted outbound HTTP to `origin`.
fn granted(wasm: &str, name: &str, origin: std::net::SocketAddr) -> TestServer {
    Options::default()
        .plugin(wasm)
        .file(
            &format!("{name}.toml"),
            format!("[capabilities]\nhttp = [\"http://{origin}\"]\n").as_bytes(),
        )
        .start()
}

/// Answers the handler's call to `gate` (one request) with `body`, so that it goes on.
fn open_gate(gate: &TcpListener, body: &str) {
    let (mut held, _) = gate.accept().unwrap();
    let mut request = [0u8; 1024];
    let _ = held.read(&mut request).unwrap();
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    held.write_all(answer.as_bytes()).unwrap();
}

/// The first piece reaches the client while the handler still runs: the handler waits for a
/// gate that the test opens only after it has read that piece.
#[test]
fn the_first_piece_arrives_before_the_handler_ends() {
    let gate = TcpListener::bind("127.0.0.1:0").unwrap();
    let gate_addr = gate.local_addr().unwrap();
    let s = granted(plugins::HTTPECHO, "httpecho", gate_addr);
    let mut c = s.connect();
    c.write_all(
        format!("GET /httpecho/gated?gate={gate_addr} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (status, headers) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        headers.contains(&("transfer-encoding".into(), "chunked".into())),
        "{headers:?}"
    );
    assert!(
        !headers.iter().any(|(n, _)| n == "content-length"),
        "{headers:?}"
    );
    assert_eq!(read_chunk(&mut r).unwrap(), b"first\n");
    // Only now does the handler's outbound call get its answer.
    open_gate(&gate, "open");
    let (rest, _) = read_chunked(&mut r);
    assert_eq!(String::from_utf8_lossy(&rest), "second 200 open\n");
    // The connection stays open for the next request.
    c.write_all(b"GET /httpecho/ HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut r, false).text(),
        "hello from wasi:http\n"
    );
    s.wait_for_log("GET /httpecho/gated");

    // The same ordering seen by curl -N: it prints the first piece while the handler waits.
    let Some(curl) = ankh_test_support::services::installed("curl", "curl") else {
        return;
    };
    let mut curl = std::process::Command::new(curl)
        .args(["-sN", &s.url(&format!("/httpecho/gated?gate={gate_addr}"))])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(curl.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "first\n");
    open_gate(&gate, "again");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "second 200 again\n");
    assert!(curl.wait().unwrap().success());
}

/// Lines written over time arrive one by one, with curl -N as with a raw socket; an
/// HTTP/1.0 client gets the body delimited by the close; trailers reach the wire.
#[test]
fn bodies_written_over_time_and_trailers_reach_the_client() {
    let s = Options::default().plugin(plugins::HTTPECHO).start();
    // curl with no buffering: every line, in order, whatever the framing.
    if let Ok(out) = std::process::Command::new("curl")
        .args(["-sN", &s.url("/httpecho/lines?n=5&ms=50")])
        .output()
    {
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "line 0\nline 1\nline 2\nline 3\nline 4\n"
        );
    }
    let r = s.request(b"GET /httpecho/lines?n=3&ms=20 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.text(), "line 0\nline 1\nline 2\n");

    let old = s.raw(b"GET /httpecho/lines?n=3&ms=20 HTTP/1.0\r\n\r\n");
    assert!(old.contains("connection: close\r\n"), "{old}");
    assert!(!old.contains("transfer-encoding"), "{old}");
    assert!(old.ends_with("\r\n\r\nline 0\nline 1\nline 2\n"), "{old}");

    let r = s.request(b"GET /httpecho/trailers HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.text(), "body before trailers");
    assert_eq!(r.trailers, [("x-trailer".to_owned(), "t".to_owned())]);

    // gzip on a stream: each piece decodes as it arrives.
    let mut c = s.connect();
    c.write_all(
        b"GET /httpecho/lines?n=3&ms=20 HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let (_, headers) = read_head(&mut r);
    assert!(
        headers.contains(&("content-encoding".into(), "gzip".into())),
        "{headers:?}"
    );
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    for i in 0..3 {
        let piece = read_chunk(&mut r).unwrap();
        decoder.write_all(&piece).unwrap();
        decoder.flush().unwrap();
        let text = String::from_utf8_lossy(decoder.get_ref()).into_owned();
        assert!(text.ends_with(&format!("line {i}\n")), "{text:?}");
    }
}

/// A client that stops reading holds the producer: the bytes the host took stop growing far
/// short of the body, other requests are answered meanwhile, and once the client reads
/// again the whole body arrives, byte for byte.
#[test]
fn a_client_that_stops_reading_holds_the_producer() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .flag("--admin", "127.0.0.1:0")
        .flag("--workers", 1)
        .start();
    let total = 256 * MIB;
    let c = held_by_a_stalled_client(
        &s,
        "httpecho",
        "/httpecho/stream?bytes=16777216",
        &format!("/httpecho/stream?bytes={total}"),
    );
    // Reading again, the body arrives whole and right.
    read_alphabet(&s, c, total);
}

/// Warms `plugin` with two whole streams of 16 MiB (`warm`, one per event loop), then asks
/// for `stalled` and reads nothing: the bytes the host takes from the producer stop short of
/// 32 MiB, the server's resident memory grows by at most 8 MiB, and the plugin answers
/// `/PLUGIN/...` requests meanwhile. Returns the stalled connection.
fn held_by_a_stalled_client(s: &TestServer, plugin: &str, warm: &str, stalled: &str) -> TcpStream {
    let admin = admin_addr(s);
    let streamed = || {
        value(
            &scrape(admin),
            "ankh_plugin_streamed_bytes_total",
            &[("plugin", plugin)],
        )
    };
    // Warm: what is measured is what a stalled stream holds, not what the first stream of a
    // process sets up. One per event loop (connections go to the loops in turn).
    for _ in 0..2 {
        let warmed = s.request(format!("GET {warm} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(warmed.body.len(), 16 << 20);
    }
    let rss_before = s.rss_kib();
    let before = streamed();
    let mut c = s.connect();
    c.write_all(format!("GET {stalled} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    // Not reading: the count stops moving once the socket buffers and the flow are full.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut last, mut still) = (-1.0, 0);
    while still < 5 {
        assert!(
            Instant::now() < deadline,
            "the stream never stopped growing"
        );
        std::thread::sleep(Duration::from_millis(200));
        let now = streamed() - before;
        if now == last && now > 0.0 {
            still += 1;
        } else {
            still = 0;
        }
        last = now;
    }
    eprintln!("{plugin}, a client not reading: {last} bytes taken from the producer");
    assert!(
        last < (32 * MIB) as f64,
        "{last} bytes taken from the producer"
    );
    // What the host itself holds of it: the flow's limit, plus at most one piece and its
    // framing (`STREAM_BUFFER_BYTES` and `STREAM_PIECE_BYTES`).
    let held = value(
        &scrape(admin),
        "ankh_plugin_stream_buffered_bytes",
        &[("plugin", plugin)],
    );
    eprintln!("{plugin}, a client not reading: the host holds {held} bytes of it");
    assert!(
        (256.0 * 1024.0..=(320.0 + 1.0) * 1024.0).contains(&held),
        "{held} bytes held"
    );
    let grown = s.rss_kib().saturating_sub(rss_before);
    eprintln!("{plugin}, a client not reading: resident memory grew by {grown} KiB");
    // A backstop for buffering the metric would not see (the producer gave up to 32 MiB):
    // 2.3-4.3 MiB when this test runs alone, 8.4 MiB once in CI's run of the whole suite on
    // two shared cores, where the producer got further and the allocator kept more of what
    // passed through. What the host holds is the precise bound, above.
    assert!(grown <= 16 * 1024, "resident memory grew by {grown} KiB");
    // The one worker thread answers other requests meanwhile.
    assert_eq!(s.get(&format!("/{plugin}/nothing-here")).0, 404);
    c
}

/// Reads a streamed response of `total` bytes from `c`, each byte `a`+its offset%26, and
/// returns how much the server's resident memory grew at most meanwhile.
fn read_alphabet(s: &TestServer, c: TcpStream, total: u64) -> u64 {
    let before = s.rss_kib();
    let mut r = BufReader::with_capacity(1 << 20, c);
    let (status, _) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let (mut received, mut peak) = (0u64, before);
    while let Some(piece) = read_chunk(&mut r) {
        assert!(
            piece
                .iter()
                .enumerate()
                .all(|(i, &b)| b == b'a' + ((received + i as u64) % 26) as u8),
            "wrong bytes after {received}"
        );
        received += piece.len() as u64;
        if received % (64 * MIB) < piece.len() as u64 {
            peak = peak.max(s.rss_kib());
        }
    }
    assert_eq!(received, total);
    peak.saturating_sub(before)
}

/// A client that leaves mid-stream: the component's next write fails, within a second, and
/// its call ends; the access line counts what was sent, no stream stays open, and /metrics
/// counts the stream as unfinished.
#[test]
fn a_client_that_leaves_mid_stream_ends_the_call() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .flag("--admin", "127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let mut c = s.connect();
    c.write_all(
        format!(
            "GET /httpecho/stream?bytes={} HTTP/1.1\r\nHost: x\r\n\r\n",
            4096 * MIB
        )
        .as_bytes(),
    )
    .unwrap();
    let mut some = vec![0u8; 1 << 20];
    c.read_exact(&mut some).unwrap();
    let open = || {
        value(
            &scrape(admin),
            "ankh_plugin_streams_open",
            &[("plugin", "httpecho")],
        )
    };
    assert_eq!(open(), 1.0);
    let left = Instant::now();
    drop(c);
    let failed = s.wait_for_log("stream: the write failed");
    let took = left.elapsed();
    eprintln!("the component's write failed {took:?} after its client left");
    assert!(took < Duration::from_secs(1), "{took:?}: {failed}");
    let line = s.wait_for_log("GET /httpecho/stream");
    assert!(line.contains(" 200 "), "{line}");
    // The line counts what was sent: at least what the client read, far from the 4 GiB asked.
    let line = line
        .lines()
        .find(|l| l.contains("GET /httpecho/stream"))
        .unwrap();
    let field = |name: &str| -> u64 {
        crate::harness::log_field(line, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    let sent = field("bytes");
    assert!(
        (MIB..64 * MIB).contains(&sent),
        "{sent} bytes counted: {line}"
    );
    assert!(field("duration_us") > 0, "{line}");
    assert_eq!(open(), 0.0);
    assert_eq!(
        value(
            &scrape(admin),
            "ankh_plugin_streams_unfinished_total",
            &[("plugin", "httpecho")],
        ),
        1.0
    );
    assert_eq!(s.get("/httpecho/").0, 200);
}

/// A stream whose status has no body (204, 304) sends its head alone, without framing, and
/// the connection goes on: what the producer writes is not sent.
#[test]
fn a_stream_with_a_bodyless_status_sends_its_head_alone() {
    let s = Options::default().plugin(plugins::PROBE).start();
    let mut c = s.connect();
    let mut r = BufReader::new(c.try_clone().unwrap());
    for status in [204, 304] {
        c.write_all(
            format!("GET /probe/stream?n=3&size=10&status={status}&trailer=1 HTTP/1.1\r\nHost: x\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let (line, headers) = read_head(&mut r);
        assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line}");
        assert!(
            !headers
                .iter()
                .any(|(n, _)| n == "transfer-encoding" || n == "content-length"),
            "{status}: {headers:?}"
        );
        // The next answer on the connection comes right after that head.
        c.write_all(b"GET /probe/ok HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let next = read_response(&mut r, false);
        assert_eq!(next.status, 200, "after {status}");
    }
    s.wait_for_log_count("stream wrote 3", 2);
}

/// A large body streams through in bounded memory: 1 GiB, byte-exact, the server's resident
/// memory growing by at most 32 MiB, from a wasi:http component and from an own-world plugin.
#[test]
fn a_gibibyte_streams_through_in_bounded_memory() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .plugin(plugins::PROBE)
        .start();
    assert_eq!(s.get("/httpecho/").0, 200);
    assert!(s.get("/probe/ok").1.starts_with("ok "));
    let total = 1024 * MIB;
    for target in [
        format!("/httpecho/stream?bytes={total}"),
        format!("/probe/alphabet?bytes={total}"),
    ] {
        let started = Instant::now();
        let mut c = s.connect();
        c.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let grown = read_alphabet(&s, c, total);
        eprintln!(
            "1 GiB from {target} in {:?}, resident memory grew by {grown} KiB",
            started.elapsed()
        );
        assert!(
            grown <= 32 * 1024,
            "{target}: resident memory grew by {grown} KiB"
        );
    }
}

/// Once a response streams, the stream's limits bound its call, not the handler timeout: a
/// stream longer than the handler timeout completes; one whose plugin pauses past
/// `stream_idle_timeout_ms`, or that outlasts `stream_timeout_ms`, is ended (cut, its call
/// stopped).
#[test]
fn streams_are_bounded_by_their_own_limits() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .plugin_as("pausing", plugins::HTTPECHO)
        .plugin_as("endless", plugins::HTTPECHO)
        .file("httpecho.toml", b"[limits]\nhandler_timeout_ms = 300\n")
        .file(
            "pausing.toml",
            b"[limits]\nhandler_timeout_ms = 300\nstream_idle_timeout_ms = 500\n",
        )
        .file(
            "endless.toml",
            b"[limits]\nstream_idle_timeout_ms = 5000\nstream_timeout_ms = 1000\n",
        )
        .flag("--admin", "127.0.0.1:0")
        .start();
    let started = Instant::now();
    let r = s.request(b"GET /httpecho/lines?n=5&ms=200 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.text(), "line 0\nline 1\nline 2\nline 3\nline 4\n");
    assert!(started.elapsed() >= Duration::from_millis(800));

    // A pause of 2 s between lines: the stream ends after the first, at the idle limit.
    let started = Instant::now();
    let cut = s.raw(b"GET /pausing/lines?n=3&ms=2000 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(cut.ends_with("7\r\nline 0\n\r\n"), "{cut:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(2000),
        "{took:?}"
    );

    // Lines every 100 ms for a minute: the total limit ends it after about a second.
    let started = Instant::now();
    let cut = s.raw(b"GET /endless/lines?n=600&ms=100 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(cut.contains("line 3\n"), "{cut:?}");
    assert!(!cut.ends_with("0\r\n\r\n"), "{cut:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_secs(10),
        "{took:?}"
    );
    s.wait_for_log("GET /endless/lines");
    let admin = admin_addr(&s);
    for plugin in ["pausing", "endless"] {
        let open = value(
            &scrape(admin),
            "ankh_plugin_streams_open",
            &[("plugin", plugin)],
        );
        assert_eq!(open, 0.0, "{plugin}");
    }
}

/// A plugin relays a 1 GiB download from a granted origin to its client as it arrives: the
/// body crosses whole and right, and the server holds a few MiB of it at most (the policy
/// raises the plugin's outbound body cap from its 16 MiB default).
#[test]
fn a_gibibyte_download_is_relayed_in_bounded_memory() {
    let total = 1024 * MIB;
    let upstream = Upstream::start(Mode::Huge(total));
    let policy = format!(
        "[capabilities]\nhttp = [\"{}\"]\n[outbound]\nmax_response_bytes = {}\n",
        upstream.origin(),
        2 * total
    );
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .file("httpecho.toml", policy.as_bytes())
        .start();
    assert_eq!(s.get("/httpecho/").0, 200);
    // Relayed twice: the first warms what any relay leaves behind (the instance's memory,
    // the allocator's per-thread heaps, the outbound pool), and the bound is on the second,
    // on what grows with the body's size.
    let relay = || {
        let before = s.rss_kib();
        let mut c = s.connect();
        c.write_all(
            format!(
                "GET /httpecho/relay?from={} HTTP/1.1\r\nHost: x\r\n\r\n",
                upstream.addr
            )
            .as_bytes(),
        )
        .unwrap();
        let mut r = BufReader::with_capacity(1 << 20, c);
        let (status, headers) = read_head(&mut r);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert!(
            headers.contains(&("content-length".into(), total.to_string())),
            "{headers:?}"
        );
        let (mut received, mut peak) = (0u64, 0u64);
        let mut buf = vec![0u8; 1 << 20];
        while received < total {
            let n = r.read(&mut buf).unwrap();
            assert!(n > 0, "the body ended after {received} bytes");
            assert!(buf[..n].iter().all(|&b| b == b'x'));
            let before_read = received;
            received += n as u64;
            if received / (64 * MIB) != before_read / (64 * MIB) {
                peak = peak.max(s.rss_kib());
            }
        }
        assert_eq!(received, total);
        peak.saturating_sub(before)
    };
    let first = relay();
    let grown = relay();
    eprintln!("1 GiB relayed twice, resident memory grew by {first} KiB, then {grown} KiB");
    assert!(grown <= 32 * 1024, "resident memory grew by {grown} KiB");
}

/// A plugin uploads 256 MiB to a granted origin, writing the body after sending the request:
/// the body leaves as it is written, whole and right, and the server holds a few MiB of it
/// at most.
#[test]
fn an_upload_streams_out_in_bounded_memory() {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = upstream.local_addr().unwrap();
    let s = granted(plugins::HTTPECHO, "httpecho", origin);
    let pid = s.pid();
    // The upstream: reads each POST's chunked body as it comes, checks it, and samples the
    // server's resident memory every 16 MiB; answers `got N`.
    let served = std::thread::spawn(move || {
        let mut peaks = Vec::new();
        for _ in 0..2 {
            let (conn, _) = upstream.accept().unwrap();
            let mut r = BufReader::with_capacity(1 << 20, conn);
            let (line, headers) = read_head(&mut r);
            assert!(line.starts_with("POST / HTTP/1.1"), "{line}");
            assert!(
                headers.contains(&("transfer-encoding".into(), "chunked".into())),
                "{headers:?}"
            );
            let before = crate::harness::rss_kib(pid).unwrap();
            let (mut received, mut peak) = (0u64, before);
            while let Some(piece) = read_chunk(&mut r) {
                assert!(
                    piece
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == b'a' + ((received + i as u64) % 26) as u8),
                    "wrong bytes after {received}"
                );
                let at = received;
                received += piece.len() as u64;
                if received / (16 * MIB) != at / (16 * MIB) {
                    peak = peak.max(crate::harness::rss_kib(pid).unwrap());
                }
            }
            // The trailer section's end.
            let mut end = String::new();
            r.read_line(&mut end).unwrap();
            assert_eq!(end, "\r\n");
            let body = format!("got {received}");
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            r.get_mut().write_all(answer.as_bytes()).unwrap();
            peaks.push(peak.saturating_sub(before));
        }
        peaks
    });
    // Twice: the first warms what any upload leaves behind, the bound is on the second.
    for total in [16 * MIB, 256 * MIB] {
        let (status, body) = s.get(&format!("/httpecho/upload?to={origin}&bytes={total}"));
        assert_eq!(
            (status, body.as_str()),
            (200, format!("200 got {total}").as_str())
        );
    }
    let peaks = served.join().unwrap();
    eprintln!("uploads of 16 MiB and 256 MiB: resident memory grew by {peaks:?} KiB");
    assert!(
        peaks[1] <= 16 * 1024,
        "resident memory grew by {} KiB",
        peaks[1]
    );
}

/// A stream under way when its plugin is replaced finishes on the version that started it,
/// while new requests reach the new version.
#[test]
fn a_running_stream_finishes_on_its_version_across_a_reload() {
    let s = Options::default()
        .plugin_as("app", plugins::HTTPECHO)
        .start();
    let mut c = s.connect();
    c.write_all(b"GET /app/lines?n=20&ms=50 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let (status, _) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(read_chunk(&mut r).unwrap(), b"line 0\n");
    s.install("app", plugins::HELLO);
    // The new version answers new requests.
    s.eventually("/app/", |status, body| {
        status == 200 && body != "hello from wasi:http\n"
    });
    let (rest, _) = read_chunked(&mut r);
    let expected: String = (1..20).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&rest), expected);
}

/// At a graceful drain a stream runs on to its end, like any response; Server-Sent Events,
/// which a client resumes, end whole at their next event (their call stopped); a stream
/// still open at the drain's deadline is cut there, without its last chunk, so its client
/// cannot take it for whole. The server then exits 0.
#[test]
fn a_drain_lets_streams_end_and_ends_event_streams_whole() {
    let mut s = Options::default()
        .plugin(plugins::HTTPECHO)
        .plugin(plugins::TICKER)
        .flag("--drain-timeout-ms", 3000)
        .start();
    let open = |target: &str| {
        let mut c = s.connect();
        c.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut r = BufReader::new(c);
        let (status, _) = read_head(&mut r);
        assert!(status.starts_with("HTTP/1.1 200"), "{target}: {status}");
        let first = read_chunk(&mut r).expect("a first piece");
        (r, first)
    };
    // 40 lines 25 ms apart: it ends on its own, a second after the signal.
    let (mut finite, first) = open("/httpecho/lines?n=40&ms=25");
    assert_eq!(first, b"line 0\n");
    let (mut events, first) = open("/ticker/events?count=1000&interval_ms=100");
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(first.contains("id: 1\n"), "{first}");
    // Lines for the next 30 minutes.
    let (mut endless, first) = open("/httpecho/lines?n=100000&ms=20");
    assert_eq!(first, b"line 0\n");
    let signalled = Instant::now();
    s.signal("TERM");

    // The event stream: a few more events, then its last chunk, then the close.
    let (rest, _) = read_chunked(&mut events);
    let ended = signalled.elapsed();
    let text = String::from_utf8_lossy(&rest).into_owned();
    assert!(text.matches("id: ").count() < 10, "{text}");
    assert!(ended < Duration::from_secs(2), "{ended:?}");
    let mut more = Vec::new();
    events.read_to_end(&mut more).unwrap();
    assert!(more.is_empty(), "{more:?}");

    // The finite stream: every line, then its last chunk.
    let (rest, _) = read_chunked(&mut finite);
    let expected: String = (1..40).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&rest), expected);

    // The endless one: cut at the deadline, with no last chunk.
    let mut cut = Vec::new();
    let _ = endless.read_to_end(&mut cut);
    let at = signalled.elapsed();
    let cut = String::from_utf8_lossy(&cut).into_owned();
    assert!(!cut.ends_with("0\r\n\r\n"), "ended whole: {cut:?}");
    assert!(cut.contains("line 10\n"), "{cut:?}");
    assert!(at >= Duration::from_millis(2900), "cut after {at:?}");
    drop((finite, events, endless));
    assert!(s.wait_exit().success());
    assert!(
        signalled.elapsed() < Duration::from_secs(8),
        "{:?}",
        signalled.elapsed()
    );
}

/// Streams are calls: a plugin's `max_concurrency` holds how many it may have open. A
/// thousand clients asking at once for streams that would last a minute and a half get 8
/// (its limit) and 503 for the rest, the server's memory stays flat, and once the streams
/// end the plugin answers again.
#[test]
fn a_plugins_streams_are_held_by_its_concurrency_limit() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .file("httpecho.toml", b"[limits]\nmax_concurrency = 8\n")
        .flag("--admin", "127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    // Warm the plugin (its first instance, compiled code paged in).
    assert_eq!(s.get("/httpecho/").0, 200);
    let rss_before = s.rss_kib();
    let (mut open, mut refused) = (Vec::new(), 0);
    for _ in 0..1000 {
        let mut c = s.connect();
        c.write_all(b"GET /httpecho/lines?n=1000&ms=100 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(c);
        let (status, _) = read_head(&mut r);
        if status.starts_with("HTTP/1.1 503") {
            refused += 1;
        } else {
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
            assert_eq!(read_chunk(&mut r).unwrap(), b"line 0\n");
            open.push(r);
        }
    }
    assert_eq!((open.len(), refused), (8, 992));
    let labels = [("plugin", "httpecho")];
    assert_eq!(
        value(&scrape(admin), "ankh_plugin_streams_open", &labels),
        8.0
    );
    let grown = s.rss_kib().saturating_sub(rss_before);
    eprintln!("8 streams open, 992 refused: resident memory grew by {grown} KiB");
    assert!(grown <= 16 * 1024, "resident memory grew by {grown} KiB");
    drop(open);
    s.eventually("/httpecho/", |status, _| status == 200);
    wait_metric(admin, "ankh_plugin_streams_open", &labels, |n| n == 0.0);
}

/// HEAD to a streaming handler: the head GET would get, at once, with no body; the
/// component's writes fail, so it ends, and the connection serves the next request.
#[test]
fn head_to_a_stream_gets_its_head_alone() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .flag("--admin", "127.0.0.1:0")
        .start();
    let mut c = s.connect();
    // A line every 100 ms for 100 s: without an end at the head, the access line would
    // wait for the whole body.
    c.write_all(b"HEAD /httpecho/lines?n=1000&ms=100 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (status, headers) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        !headers.iter().any(|(n, _)| n == "transfer-encoding"),
        "{headers:?}"
    );
    c.write_all(b"GET /httpecho/ HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut r, false).text(),
        "hello from wasi:http\n"
    );
    s.wait_for_log("HEAD /httpecho/lines");
    let open = value(
        &scrape(admin_addr(&s)),
        "ankh_plugin_streams_open",
        &[("plugin", "httpecho")],
    );
    assert_eq!(open, 0.0);
}

// ankh's own world (`ankh:plugin@0.3.0`): a plugin built with the SDK streams through
// `Request::stream`, `BodyWriter::write` and `finish` (the `probe` test plugin's `/stream`
// routes). The host's side of the stream is the one the wasi:http tests above exercise.

/// An own-world handler's first piece reaches the client while the handler still runs: it
/// waits for a gate the test opens only after reading that piece.
#[test]
fn an_own_world_handler_sends_its_first_piece_before_it_ends() {
    let gate = TcpListener::bind("127.0.0.1:0").unwrap();
    let gate_addr = gate.local_addr().unwrap();
    let s = granted(plugins::PROBE, "probe", gate_addr);
    let mut c = s.connect();
    c.write_all(
        format!("GET /probe/stream?n=3&size=5&gate={gate_addr} HTTP/1.1\r\nHost: x\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (status, headers) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        headers.contains(&("transfer-encoding".into(), "chunked".into())),
        "{headers:?}"
    );
    assert_eq!(read_chunk(&mut r).unwrap(), b"aaaaa");
    open_gate(&gate, "");
    let (rest, _) = read_chunked(&mut r);
    assert_eq!(rest, b"bbbbbccccc");
    s.wait_for_log("stream wrote 3");
    // The connection stays open for the next request.
    c.write_all(b"GET /probe/ok HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut r, false).text().starts_with("ok "));
}

/// The framings an own-world stream can take: chunked with trailers, a declared length, an
/// HTTP/1.0 body delimited by the close, gzip flushed per piece, and HEAD (the head alone);
/// curl -N reads pieces written over time.
#[test]
fn an_own_world_stream_takes_every_framing() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--admin", "127.0.0.1:0")
        .start();
    if let Ok(out) = std::process::Command::new("curl")
        .args(["-sN", &s.url("/probe/stream?n=3&size=4&ms=30")])
        .output()
    {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "aaaabbbbcccc");
    }
    let r = s.request(b"GET /probe/stream?n=3&size=2&trailer=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.text(), "aabbcc");
    assert_eq!(r.trailers, [("x-pieces".to_owned(), "3".to_owned())]);

    let r = s.request(b"GET /probe/stream?n=2&size=3&len=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.header("content-length"), Some("6"));
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.text(), "aaabbb");

    let old = s.raw(b"GET /probe/stream?n=2&size=3 HTTP/1.0\r\n\r\n");
    assert!(old.contains("connection: close\r\n"), "{old}");
    assert!(!old.contains("transfer-encoding"), "{old}");
    assert!(old.ends_with("\r\n\r\naaabbb"), "{old}");

    let mut c = s.connect();
    c.write_all(
        b"GET /probe/stream?n=3&size=64&ms=20 HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let (_, headers) = read_head(&mut r);
    assert!(
        headers.contains(&("content-encoding".into(), "gzip".into())),
        "{headers:?}"
    );
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    for i in 0..3u8 {
        let piece = read_chunk(&mut r).unwrap();
        decoder.write_all(&piece).unwrap();
        decoder.flush().unwrap();
        assert_eq!(decoder.get_ref().len(), 64 * (usize::from(i) + 1));
        assert!(decoder.get_ref().ends_with(&[b'a' + i; 64]));
    }

    let mut c = s.connect();
    c.write_all(b"HEAD /probe/stream?n=3&size=4 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (status, _) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    c.write_all(b"GET /probe/ok HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut r, false).text().starts_with("ok "));
    s.wait_for_log("HEAD /probe/stream");
    let open = value(
        &scrape(admin_addr(&s)),
        "ankh_plugin_streams_open",
        &[("plugin", "probe")],
    );
    assert_eq!(open, 0.0);
}

/// The streaming imports called out of order answer with the error that says so, and a
/// handler that streamed cannot also respond.
#[test]
fn the_streaming_imports_refuse_calls_out_of_order() {
    let s = Options::default().plugin(plugins::PROBE).start();
    let r = s.request(b"GET /probe/stream-misuse HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "write before start: Err(StreamError::NotStarted)\nstart: Ok(())\n\
         start again: Err(StreamError::AlreadyResponded)\n\
         respond: Err(RespondError::AlreadyResponded)\n"
    );
    s.wait_for_log(
        "misuse: finish Ok(()), write after Err(StreamError::NotStarted), \
         finish again Err(StreamError::NotStarted)",
    );
}

/// A client that leaves mid-stream: the own-world producer's next write fails with `closed`
/// and its call ends promptly; /metrics counts the stream as unfinished.
#[test]
fn an_own_world_producer_learns_its_client_left() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--admin", "127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let mut c = s.connect();
    c.write_all(b"GET /probe/stream-forever HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut some = vec![0u8; 1 << 20];
    c.read_exact(&mut some).unwrap();
    let left = Instant::now();
    drop(c);
    let line = s.wait_for_log("stream ended after");
    let took = left.elapsed();
    eprintln!("the producer's write failed {took:?} after its client left");
    assert!(line.contains("Closed("), "{line}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    s.wait_for_log("GET /probe/stream-forever");
    let scraped = scrape(admin);
    let labels = [("plugin", "probe")];
    assert_eq!(value(&scraped, "ankh_plugin_streams_open", &labels), 0.0);
    assert_eq!(
        value(&scraped, "ankh_plugin_streams_unfinished_total", &labels),
        1.0
    );
    assert!(s.get("/probe/ok").1.starts_with("ok "));
}

/// A hostile producer writing as fast as it can to a client that does not read: the host
/// takes a bounded amount of its body, its memory stays flat, and the one worker thread
/// answers other requests meanwhile.
#[test]
fn an_own_world_producer_cannot_outrun_a_stalled_client() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--admin", "127.0.0.1:0")
        .flag("--workers", 1)
        .start();
    let c = held_by_a_stalled_client(
        &s,
        "probe",
        "/probe/stream?n=256&size=65536",
        "/probe/stream-forever",
    );
    // Leaving without reading: the suspended call is stopped (it never writes again) and
    // the stream's access line is written; what the host held of it is let go.
    drop(c);
    s.wait_for_log("GET /probe/stream-forever");
    let labels = [("plugin", "probe")];
    assert_eq!(
        value(&scrape(admin_addr(&s)), "ankh_plugin_streams_open", &labels),
        0.0
    );
    wait_metric(
        admin_addr(&s),
        "ankh_plugin_stream_buffered_bytes",
        &labels,
        |held| held == 0.0,
    );
}

// Request bodies reach a wasi:http component as they arrive (`httpecho`'s `/drip` answers a
// line per read, streamed, then the request's trailers).

/// The component reads the first piece of a chunked body, and answers it, before the client
/// has sent the rest; the trailers reach it; the connection then serves the next request.
#[test]
fn a_request_body_reaches_a_component_as_it_arrives() {
    let s = Options::default().plugin(plugins::HTTPECHO).start();
    let mut c = s.connect();
    c.write_all(
        b"POST /httpecho/drip HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (status, _) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // Only the first piece was sent: the component read it and said so.
    assert_eq!(read_chunk(&mut r).unwrap(), b"read 5\n");
    c.write_all(b"3\r\nabc\r\n0\r\nx-sum: 8\r\n\r\n").unwrap();
    let (rest, _) = read_chunked(&mut r);
    assert_eq!(
        String::from_utf8_lossy(&rest),
        "read 3\ntrailer x-sum: 8\nend\n"
    );
    // Pipelined behind a body of known length: the next request is read after it.
    c.write_all(
        b"POST /httpecho/drip HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcdGET /httpecho/ HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut r, false).text(), "read 4\nend\n");
    assert_eq!(
        read_response(&mut r, false).text(),
        "hello from wasi:http\n"
    );
}

/// A chunked body that passes the plugin's limit after its request was handed out: the
/// component's next read fails, its answer is sent, and the connection closes (what follows
/// cannot be framed). A declared length over the limit is still refused at the head.
#[test]
fn a_request_body_past_the_limit_fails_the_components_read() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .file("httpecho.toml", b"[limits]\nmax_body_bytes = 100\n")
        .start();
    let mut c = s.connect();
    let mut request =
        b"POST /httpecho/drip HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n"
            .to_vec();
    request.extend_from_slice(&[b'a'; 80]);
    request.extend_from_slice(b"\r\n50\r\n");
    request.extend_from_slice(&[b'b'; 80]);
    request.extend_from_slice(b"\r\n0\r\n\r\n");
    c.write_all(&request).unwrap();
    // Read to the close, then decode: how the pieces were cut into chunks is the host's
    // business (two writes may leave as one chunk or two).
    let raw = read_to_close(&mut c);
    let answer = read_response(&mut std::io::Cursor::new(&raw), false);
    let text = answer.text();
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&raw));
    assert!(text.starts_with("read 80\nerror: "), "{text}");
    assert!(!text.contains("end\n"), "{text}");

    let refused = s.raw(
        b"POST /httpecho/drip HTTP/1.1\r\nHost: x\r\nContent-Length: 160\r\nConnection: close\r\n\r\n",
    );
    assert!(refused.starts_with("HTTP/1.1 413"), "{refused}");
}

/// A client that leaves in the middle of its body: the component's read fails, its call
/// ends, and the server serves on.
#[test]
fn a_client_that_leaves_mid_body_ends_the_components_call() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .flag("--admin", "127.0.0.1:0")
        .start();
    let mut c = s.connect();
    c.write_all(
        b"POST /httpecho/drip HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789",
    )
    .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (status, _) = read_head(&mut r);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(read_chunk(&mut r).unwrap(), b"read 10\n");
    drop(r);
    drop(c);
    s.wait_for_log("POST /httpecho/drip");
    let open = value(
        &scrape(admin_addr(&s)),
        "ankh_plugin_calls_in_flight",
        &[("plugin", "httpecho")],
    );
    assert_eq!(open, 0.0);
    assert_eq!(s.get("/httpecho/").0, 200);
}

/// An own-world stream that would go on for a minute is cut at its plugin's
/// `stream_timeout_ms`, and its call stopped.
#[test]
fn an_own_world_stream_is_cut_at_its_time_limit() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .file(
            "probe.toml",
            b"[limits]\nstream_idle_timeout_ms = 5000\nstream_timeout_ms = 1000\n",
        )
        .start();
    let started = Instant::now();
    let cut = s.raw(b"GET /probe/stream?n=600&size=4&ms=100 HTTP/1.1\r\nHost: x\r\n\r\n");
    let took = started.elapsed();
    assert!(cut.contains("\r\n4\r\nbbbb\r\n"), "{cut:?}");
    assert!(!cut.ends_with("0\r\n\r\n"), "{cut:?}");
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_secs(10),
        "{took:?}"
    );
    s.wait_for_log("GET /probe/stream");
    assert!(!s.log().contains("stream wrote 600"), "{}", s.log());
}

/// Server-Sent Events from the ticker example, gzip-compressed: each event is readable,
/// whole, as soon as its chunk arrives, and nginx is told not to buffer the stream.
#[test]
fn compressed_server_sent_events_are_readable_one_by_one() {
    let s = Options::default().plugin(plugins::TICKER).start();
    let mut c = s.connect();
    c.write_all(
        b"GET /ticker/events?count=3&interval_ms=50 HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let (_, headers) = read_head(&mut r);
    for expected in [
        ("content-type", "text/event-stream"),
        ("content-encoding", "gzip"),
        ("x-accel-buffering", "no"),
    ] {
        assert!(
            headers.contains(&(expected.0.into(), expected.1.into())),
            "{headers:?}"
        );
    }
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    for id in 1..=3 {
        let piece = read_chunk(&mut r).unwrap();
        decoder.write_all(&piece).unwrap();
        decoder.flush().unwrap();
        let text = String::from_utf8_lossy(decoder.get_ref()).into_owned();
        assert!(text.ends_with("\n\n"), "event {id} is not whole: {text:?}");
        assert!(text.contains(&format!("id: {id}\n")), "{text:?}");
    }
}
