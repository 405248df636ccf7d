//! The sans-IO protocol layer against baselines in the same run (`cargo bench -p benches`):
//!
//! - parsing a browser-like request head with `ankh::proto::request::parse` (httparse plus
//!   ankh's framing and header validation) against bare `httparse::Request::parse`;
//! - encoding a response with `ankh::proto::response::encode` (direct appends into a reused
//!   buffer) against the same bytes built with `format!`.

use std::hint::black_box;

use ankh::limits::Limits;
use ankh::proto::Version;
use ankh::proto::response::{RequestMeta, encode};
use benches::{ns_per_iter, report};

const HEAD: &[u8] = b"GET /todo/items?sort=asc&page=2 HTTP/1.1\r\n\
Host: localhost:8080\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Connection: keep-alive\r\n\
Cookie: session=4f6c2b1e9a; theme=dark\r\n\
Upgrade-Insecure-Requests: 1\r\n\
Sec-Fetch-Dest: document\r\n\
Sec-Fetch-Mode: navigate\r\n\
Sec-Fetch-Site: none\r\n\
Priority: u=0, i\r\n\r\n";

const ROUNDS: usize = 7;
const ITERS: u64 = 100_000;

fn main() {
    let limits = Limits::default();
    let ankh_parse = ns_per_iter(ROUNDS, ITERS, || {
        black_box(ankh::proto::request::parse(black_box(HEAD), &limits).unwrap());
    });
    let bare_parse = ns_per_iter(ROUNDS, ITERS, || {
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut req = httparse::Request::new(&mut headers);
        black_box(req.parse(black_box(HEAD)).unwrap());
    });
    report(
        "parse: ankh (validated, owned)",
        ankh_parse,
        "bare httparse",
        bare_parse,
    );

    let headers = vec![(
        "content-type".to_owned(),
        b"text/plain; charset=utf-8".to_vec(),
    )];
    let body = b"Hello, World!";
    let meta = RequestMeta {
        version: Version::Http11,
        head: false,
        keep_alive: true,
        accept_encoding: None,
    };
    let mut out = Vec::with_capacity(256);
    let ankh_encode = ns_per_iter(ROUNDS, ITERS, || {
        out.clear();
        black_box(encode(200, &headers, body, &meta, &mut out).unwrap());
    });
    let formatted = ns_per_iter(ROUNDS, ITERS, || {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let text = format!(
            "HTTP/1.1 {} {}\r\ndate: {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n\r\n",
            200,
            "OK",
            date,
            "text/plain; charset=utf-8",
            body.len()
        );
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(body);
        black_box(bytes);
    });
    report(
        "encode: ankh (appends, cached Date)",
        ankh_encode,
        "format! per response",
        formatted,
    );
}
