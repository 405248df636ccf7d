//! Structured logging into the host's log; each line carries the plugin's name and the id of
//! the request being handled.
//!
//! `println!`/`eprintln!` also reach the host's log, but as unstructured text; prefer these.

use crate::bindings::ankh::plugin::log as imports;

pub use crate::wit::LogLevel as Level;

/// Logs `message` at `level` with `fields` as `key=value` pairs.
///
/// ```no_run
/// ankh_guest::log::log(ankh_guest::log::Level::Info, "item created", &[("id", "7")]);
/// ```
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|&(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    imports::log(level, message, &fields);
}

/// Logs `message` at [`Level::Trace`].
pub fn trace(message: &str) {
    log(Level::Trace, message, &[]);
}

/// Logs `message` at [`Level::Debug`].
pub fn debug(message: &str) {
    log(Level::Debug, message, &[]);
}

/// Logs `message` at [`Level::Info`].
pub fn info(message: &str) {
    log(Level::Info, message, &[]);
}

/// Logs `message` at [`Level::Warn`].
pub fn warn(message: &str) {
    log(Level::Warn, message, &[]);
}

/// Logs `message` at [`Level::Error`].
pub fn error(message: &str) {
    log(Level::Error, message, &[]);
}
