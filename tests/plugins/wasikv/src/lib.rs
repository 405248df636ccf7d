//! A component written against the standard `wasi:keyvalue@0.2.0-draft` interfaces (`store`,
//! `atomics`, `batch`), bound with wit-bindgen directly rather than the ankh SDK: the way a
//! wasmCloud application talks to its store. It exports ankh's handler only to be reachable
//! over HTTP; every store call is standard.
//!
//! - `GET /wasikv/set?key=K&value=V` → `ok`
//! - `GET /wasikv/get?key=K` → the value, or `404 absent`
//! - `GET /wasikv/exists?key=K` → `true` or `false`
//! - `GET /wasikv/del?key=K` → `ok`
//! - `GET /wasikv/incr?key=K&delta=D` → the new value
//! - `GET /wasikv/batch` → sets `a`, `b`; reads `a`, `b`, `c`; deletes `a`: `a=1,b=2,c=-,a:false`
//! - `GET /wasikv/keys` → every key, paging with the cursor: `PAGES KEYS` then the keys
//! - `GET /wasikv/fill?n=N` → writes keys `k00000`.. in batches of 500 → `ok`
//! - `GET /wasikv/open?name=N` → `ok`, or the store's error
//! - every route but `open` takes `&bucket=NAME`: that bucket instead of the default one
//! - `GET /wasikv/forge?cursor=N` → `list-keys` from a cursor the bucket never gave out

wit_bindgen::generate!({
    inline: "
        package test:wasikv;

        world wasikv {
            import wasi:keyvalue/store@0.2.0-draft;
            import wasi:keyvalue/atomics@0.2.0-draft;
            import wasi:keyvalue/batch@0.2.0-draft;
            export ankh:plugin/handler@0.3.0;
            export ankh:plugin/websocket-handler@0.3.0;
        }
    ",
    path: "../../../wit",
    generate_all,
});

use ankh::plugin::types::{CloseInfo, Header, Message, Outcome, Request, Response};
use wasi::keyvalue::{atomics, batch, store};

struct WasiKv;

fn query<'a>(req: &'a Request, name: &str) -> &'a str {
    req.query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or("")
}

fn text(status: u16, body: impl Into<String>) -> Response {
    Response {
        status,
        headers: vec![Header {
            name: "content-type".into(),
            value: b"text/plain".to_vec(),
        }],
        body: body.into().into_bytes(),
    }
}

fn run(req: &Request) -> Result<Response, store::Error> {
    let route = req.path.strip_prefix(&req.mount).unwrap_or(&req.path);
    if route == "/open" {
        return store::open(query(req, "name")).map(|_| text(200, "ok"));
    }
    // `bucket=NAME` picks a bucket of the plugin's own; the default one otherwise.
    let bucket = store::open(match query(req, "bucket") {
        "" => "default",
        name => name,
    })?;
    Ok(match route {
        "/set" => {
            bucket.set(query(req, "key"), query(req, "value").as_bytes())?;
            text(200, "ok")
        }
        "/get" => match bucket.get(query(req, "key"))? {
            Some(v) => text(200, String::from_utf8_lossy(&v)),
            None => text(404, "absent"),
        },
        "/exists" => text(200, bucket.exists(query(req, "key"))?.to_string()),
        "/del" => {
            bucket.delete(query(req, "key"))?;
            text(200, "ok")
        }
        "/incr" => {
            let delta = query(req, "delta").parse().unwrap_or(1);
            text(
                200,
                atomics::increment(&bucket, query(req, "key"), delta)?.to_string(),
            )
        }
        "/batch" => {
            batch::set_many(
                &bucket,
                &[("a".into(), b"1".to_vec()), ("b".into(), b"2".to_vec())],
            )?;
            let got = batch::get_many(&bucket, &["a".into(), "b".into(), "c".into()])?;
            let shown: Vec<String> = ["a", "b", "c"]
                .iter()
                .zip(got)
                .map(|(name, v)| match v {
                    Some((k, v)) => format!("{k}={}", String::from_utf8_lossy(&v)),
                    None => format!("{name}=-"),
                })
                .collect();
            batch::delete_many(&bucket, &["a".into()])?;
            text(
                200,
                format!("{},a:{}", shown.join(","), bucket.exists("a")?),
            )
        }
        "/forge" => {
            let cursor = query(req, "cursor").parse().unwrap_or(u64::MAX);
            let page = bucket.list_keys(Some(cursor))?;
            text(200, format!("{} keys", page.keys.len()))
        }
        "/fill" => {
            let n: usize = query(req, "n").parse().unwrap_or(0);
            for start in (0..n).step_by(500) {
                let batch: Vec<(String, Vec<u8>)> = (start..n.min(start + 500))
                    .map(|i| (format!("k{i:05}"), i.to_string().into_bytes()))
                    .collect();
                batch::set_many(&bucket, &batch)?;
            }
            text(200, "ok")
        }
        "/keys" => {
            let mut keys = Vec::new();
            let mut pages = 0;
            let mut cursor = None;
            loop {
                let page = bucket.list_keys(cursor)?;
                pages += 1;
                keys.extend(page.keys);
                match page.cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            text(200, format!("{pages} {}\n{}", keys.len(), keys.join("\n")))
        }
        _ => text(404, "not found"),
    })
}

impl exports::ankh::plugin::handler::Guest for WasiKv {
    fn handle_request(req: Request) -> Outcome {
        Outcome::Respond(run(&req).unwrap_or_else(|e| text(500, format!("store error: {e:?}"))))
    }
}

impl exports::ankh::plugin::websocket_handler::Guest for WasiKv {
    fn on_open(_conn: u64, _request: Request) {}
    fn on_message(_conn: u64, _message: Message) {}
    fn on_close(_conn: u64, _info: CloseInfo) {}
}

export!(WasiKv);
