//! Reads its configuration values (`wasi:config/store`, through the SDK), and tries what a
//! hostile plugin would with them, for the configuration and secrets tests.
//!
//! - `GET /configprobe/get?name=N` → the value, or `404 absent` (`&n=K`: read K times; 0: `not read`)
//! - `GET /configprobe/all` → every value it has, `name=value` lines, sorted
//! - `GET /configprobe/leak?name=N` → writes the value to stdout, to stderr and through the
//!   `log` import (message and field), then answers `logged`
//! - `GET /configprobe/panic?name=N` → panics with the value in the message (a 500)

use ankh_guest::prelude::*;

fn name(req: &Request) -> String {
    req.query_param("name").unwrap_or_default()
}

fn get(req: &Request) -> Response {
    // `n=N` reads it N times (the micro benchmark's cost of a read; 0 reads none).
    let n: usize = req
        .query_param("n")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let name = name(req);
    let mut value = None;
    for _ in 0..n {
        value = std::hint::black_box(config::get(std::hint::black_box(&name)));
    }
    match value {
        Some(value) => Response::text(value),
        None if n == 0 => Response::text("not read"),
        None => Response::text("absent").with_status(404),
    }
}

fn all(_req: &Request) -> Response {
    let mut values = config::all();
    values.sort();
    let lines: String = values
        .iter()
        .map(|(name, value)| format!("{name}={value}\n"))
        .collect();
    Response::text(lines)
}

fn leak(req: &Request) -> Response {
    let value = config::get(&name(req)).unwrap_or_default();
    println!("stdout has {value} in it");
    eprintln!("stderr has {value}, twice: {value}");
    log::log(
        log::Level::Info,
        &format!("log has {value}"),
        &[("field", value.as_str())],
    );
    Response::text("logged")
}

fn panic(req: &Request) -> Response {
    let value = config::get(&name(req)).unwrap_or_default();
    panic!("panicking with {value}");
}

fn router() -> Router {
    Router::new()
        .get("/get", get)
        .get("/all", all)
        .get("/leak", leak)
        .get("/panic", panic)
}

ankh_guest::export_plugin!(router);
