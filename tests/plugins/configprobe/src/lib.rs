//! Reads its configuration values (`wasi:config/store`, through the SDK), and tries what a
//! hostile plugin would with them, for the configuration and secrets tests.
//!
//! - `GET /configprobe/get?name=N` → the value, or `404 absent`
//! - `GET /configprobe/all` → every value it has, `name=value` lines, sorted
//! - `GET /configprobe/leak?name=N` → writes the value to stdout, to stderr and through the
//!   `log` import (message and field), then answers `logged`
//! - `GET /configprobe/panic?name=N` → panics with the value in the message (a 500)

use ankh_guest::prelude::*;

fn name(req: &Request) -> String {
    req.query_param("name").unwrap_or_default()
}

fn get(req: &Request) -> Response {
    match config::get(&name(req)) {
        Some(value) => Response::text(value),
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
