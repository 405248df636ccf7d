//! The plugin's key-value store: one namespace per plugin, shared by every worker and
//! instance of it.
//!
//! Instances share no memory (each worker has its own), so state that every request must see,
//! such as a counter or a list of items, belongs here rather than in a `static`.

use crate::bindings::ankh::plugin::kv as imports;

pub use crate::wit::KvError;

/// The value stored at `key`, if any.
pub fn get(key: &str) -> Option<Vec<u8>> {
    imports::get(key)
}

/// The value stored at `key` as UTF-8 text; `None` when absent or not UTF-8.
pub fn get_string(key: &str) -> Option<String> {
    get(key).and_then(|bytes| String::from_utf8(bytes).ok())
}

/// Stores `value` at `key`, replacing any previous value.
pub fn set(key: &str, value: impl AsRef<[u8]>) -> Result<(), KvError> {
    imports::set(key, value.as_ref())
}

/// Removes `key`; returns whether it existed.
pub fn delete(key: &str) -> bool {
    imports::delete(key)
}

/// The keys that start with `prefix`, in lexicographic order (`""` lists every key).
pub fn list_keys(prefix: &str) -> Vec<String> {
    imports::list_keys(prefix)
}

/// Atomically adds `delta` to the decimal integer stored at `key` (absent counts as 0),
/// stores the result and returns it. Use it for ids and counters that every instance shares.
pub fn increment(key: &str, delta: i64) -> Result<i64, KvError> {
    imports::increment(key, delta)
}
