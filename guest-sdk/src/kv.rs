//! The plugin's key-value store: one namespace per plugin, shared by every worker and
//! instance of it, and durable (the host keeps it in a crash-safe database by default: a
//! write that returned `Ok` is on disk).
//!
//! Instances share no memory (each worker has its own), so state that every request must see,
//! such as a counter, a session or a list of items, belongs here rather than in a `static`.
//!
//! Every call is atomic, batches included. Every call can fail: with [`KvError::Unavailable`]
//! when the store itself cannot be read or written (a full disk), or because a key, a value or
//! the namespace is over its limit. A [`KvError`] is an [`IntoOutcome`], so
//! `?` in a handler answers with a fitting status:
//!
//! ```no_run
//! use ankh_guest::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Session {
//!     user: String,
//! }
//!
//! fn login(req: &Request) -> Result<Response, kv::KvError> {
//!     let id = kv::increment("session-counter", 1)?;
//!     let session = Session { user: req.query_param("user").unwrap_or_default() };
//!     // Sessions expire after an hour.
//!     kv::set_json_with_ttl(&format!("session/{id}"), &session, std::time::Duration::from_secs(3600))?;
//!     Ok(Response::text(id.to_string()))
//! }
//! # let _ = login;
//! ```

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::ankh::plugin::kv as imports;
use crate::{IntoOutcome, Outcome, Response};

/// Why a key-value call failed. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// A key (1 KiB), a value (1 MiB) or a batch (1000 keys, 16 MiB) is over the host's limit.
    TooLarge,
    /// The namespace holds as many keys or bytes as its quota allows.
    Full,
    /// `increment` found a value that is not a decimal 64-bit integer.
    NotANumber,
    /// `increment` would overflow a 64-bit integer.
    Overflow,
    /// An argument is out of range, or a stored value is not what a typed getter expected.
    Invalid(String),
    /// The store cannot be read or written now (a full disk, a failing device).
    Unavailable(String),
}

impl From<imports::Error> for KvError {
    fn from(e: imports::Error) -> Self {
        match e {
            imports::Error::TooLarge => KvError::TooLarge,
            imports::Error::Full => KvError::Full,
            imports::Error::NotANumber => KvError::NotANumber,
            imports::Error::Overflow => KvError::Overflow,
            imports::Error::Invalid(why) => KvError::Invalid(why),
            imports::Error::Unavailable(why) => KvError::Unavailable(why),
        }
    }
}

/// A time-to-live in milliseconds, at least 1 (a shorter one would be refused as invalid).
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The value stored at `key`; `None` when absent or expired.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, KvError> {
    imports::get(key).map_err(KvError::from)
}

/// The value stored at `key` as UTF-8 text; text that is not UTF-8 is an `Invalid` error.
pub fn get_string(key: &str) -> Result<Option<String>, KvError> {
    get(key)?
        .map(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| KvError::Invalid(format!("the value at {key:?} is not UTF-8")))
        })
        .transpose()
}

/// The value stored at `key`, decoded from JSON; a value that does not decode as `T` is an
/// `Invalid` error.
///
/// ```no_run
/// # use ankh_guest::kv;
/// let tags: Option<Vec<String>> = kv::get_json("tags")?;
/// # Ok::<(), kv::KvError>(())
/// ```
pub fn get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, KvError> {
    get(key)?
        .map(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| {
                KvError::Invalid(format!(
                    "the value at {key:?} is not the JSON expected: {e}"
                ))
            })
        })
        .transpose()
}

/// The values at `keys`, in the same order, read at one instant.
pub fn get_many(keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    imports::get_many(&keys).map_err(KvError::from)
}

/// Whether `key` holds a value.
pub fn exists(key: &str) -> Result<bool, KvError> {
    imports::exists(key).map_err(KvError::from)
}

/// Stores `value` at `key`, replacing any previous value (and dropping its expiry).
pub fn set(key: &str, value: impl AsRef<[u8]>) -> Result<(), KvError> {
    imports::set(key, value.as_ref(), None).map_err(KvError::from)
}

/// Stores `value` at `key`; the key expires `ttl` from now (at a millisecond's precision).
///
/// ```no_run
/// # use ankh_guest::kv;
/// use std::time::Duration;
/// kv::set_with_ttl("rate/203.0.113.7", "1", Duration::from_secs(60))?;
/// # Ok::<(), kv::KvError>(())
/// ```
pub fn set_with_ttl(key: &str, value: impl AsRef<[u8]>, ttl: Duration) -> Result<(), KvError> {
    imports::set(key, value.as_ref(), Some(ttl_ms(ttl))).map_err(KvError::from)
}

/// Stores `value` as JSON at `key`.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), KvError> {
    set(key, to_json(value)?)
}

/// Stores `value` as JSON at `key`, expiring `ttl` from now.
pub fn set_json_with_ttl<T: Serialize + ?Sized>(
    key: &str,
    value: &T,
    ttl: Duration,
) -> Result<(), KvError> {
    set_with_ttl(key, to_json(value)?, ttl)
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, KvError> {
    serde_json::to_vec(value).map_err(|e| KvError::Invalid(format!("cannot encode as JSON: {e}")))
}

/// Stores every entry, all or none.
///
/// ```no_run
/// # use ankh_guest::kv;
/// kv::set_many(&[("user/7/name", b"Ada".as_slice()), ("user/7/lang", b"en")])?;
/// # Ok::<(), kv::KvError>(())
/// ```
pub fn set_many(entries: &[(&str, &[u8])]) -> Result<(), KvError> {
    imports::set_many(&owned(entries), None).map_err(KvError::from)
}

/// Stores every entry, all or none, each expiring `ttl` from now.
pub fn set_many_with_ttl(entries: &[(&str, &[u8])], ttl: Duration) -> Result<(), KvError> {
    imports::set_many(&owned(entries), Some(ttl_ms(ttl))).map_err(KvError::from)
}

fn owned(entries: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
        .collect()
}

/// Removes `key`; returns whether it held a value.
pub fn delete(key: &str) -> Result<bool, KvError> {
    imports::delete(key).map_err(KvError::from)
}

/// Removes every key given, all or none; returns how many held a value.
pub fn delete_many(keys: &[&str]) -> Result<u32, KvError> {
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    imports::delete_many(&keys).map_err(KvError::from)
}

/// Stores `value` at `key` only if the current value is `expected` (`None`: only if the key is
/// absent). Returns whether it stored. Of many callers racing from the same `expected`, exactly
/// one wins.
///
/// ```no_run
/// # use ankh_guest::kv;
/// // Claim a name once, whoever asks first.
/// let mine = kv::compare_and_swap("owner/room-1", None, b"ada")?;
/// # Ok::<(), kv::KvError>(())
/// ```
pub fn compare_and_swap(
    key: &str,
    expected: Option<&[u8]>,
    value: impl AsRef<[u8]>,
) -> Result<bool, KvError> {
    imports::compare_and_swap(key, expected, value.as_ref(), None).map_err(KvError::from)
}

/// [`compare_and_swap`], and the key expires `ttl` from now when it stores.
pub fn compare_and_swap_with_ttl(
    key: &str,
    expected: Option<&[u8]>,
    value: impl AsRef<[u8]>,
    ttl: Duration,
) -> Result<bool, KvError> {
    imports::compare_and_swap(key, expected, value.as_ref(), Some(ttl_ms(ttl)))
        .map_err(KvError::from)
}

/// Atomically adds `delta` to the decimal integer stored at `key` (absent counts as 0),
/// stores the result and returns it. The key keeps its expiry. Use it for ids and counters
/// that every instance shares.
pub fn increment(key: &str, delta: i64) -> Result<i64, KvError> {
    imports::increment(key, delta).map_err(KvError::from)
}

/// One page of keys.
pub use imports::KeyPage;

/// One page of at most `limit` keys starting with `prefix` (the host caps a page at 1000);
/// pass the page's `cursor` back for the next one.
pub fn list_page(prefix: &str, cursor: Option<&str>, limit: u32) -> Result<KeyPage, KvError> {
    imports::list_keys(prefix, cursor, limit).map_err(KvError::from)
}

/// Every key starting with `prefix`, in lexicographic order (`""` lists every key), fetched a
/// page at a time as the iterator advances.
///
/// ```no_run
/// # use ankh_guest::kv;
/// for key in kv::list_keys("item/") {
///     let key = key?;
///     // ...
/// }
/// # Ok::<(), kv::KvError>(())
/// ```
pub fn list_keys(prefix: &str) -> Keys {
    Keys {
        prefix: prefix.to_owned(),
        page: Vec::new().into_iter(),
        cursor: None,
        done: false,
    }
}

/// The keys of [`list_keys`].
#[derive(Debug)]
pub struct Keys {
    prefix: String,
    page: std::vec::IntoIter<String>,
    cursor: Option<String>,
    done: bool,
}

/// Keys fetched per page by [`Keys`].
const PAGE: u32 = 1000;

impl Iterator for Keys {
    type Item = Result<String, KvError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(key) = self.page.next() {
                return Some(Ok(key));
            }
            if self.done {
                return None;
            }
            match list_page(&self.prefix, self.cursor.as_deref(), PAGE) {
                Ok(page) => {
                    self.done = page.cursor.is_none();
                    self.cursor = page.cursor;
                    self.page = page.keys.into_iter();
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvError::TooLarge => f.write_str("a key, a value or a batch is over the size limit"),
            KvError::Full => f.write_str("the plugin's key-value store is full"),
            KvError::NotANumber => f.write_str("the value is not a decimal 64-bit integer"),
            KvError::Overflow => f.write_str("the result would overflow a 64-bit integer"),
            KvError::Invalid(why) => f.write_str(why),
            KvError::Unavailable(why) => write!(f, "the key-value store is unavailable: {why}"),
        }
    }
}

impl std::error::Error for KvError {}

/// The status that fits each error: 413 too large, 507 full, 409 not a number or overflow,
/// 400 invalid, 503 (with `Retry-After: 1`) unavailable. The body is the message as text.
impl From<KvError> for Response {
    fn from(e: KvError) -> Response {
        let status = match e {
            KvError::TooLarge => 413,
            KvError::Full => 507,
            KvError::NotANumber | KvError::Overflow => 409,
            KvError::Invalid(_) => 400,
            KvError::Unavailable(_) => 503,
        };
        let response = Response::text(e.to_string()).with_status(status);
        if status == 503 {
            response.with_header("retry-after", "1")
        } else {
            response
        }
    }
}

impl IntoOutcome for KvError {
    fn into_outcome(self) -> Outcome {
        Outcome::Respond(Response::from(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_answer_with_a_fitting_status() {
        assert_eq!(Response::from(KvError::Full).status(), 507);
        let r = Response::from(KvError::Unavailable("disk full".into()));
        assert_eq!(r.status(), 503);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert!(String::from_utf8_lossy(r.body()).contains("disk full"));
        assert_eq!(ttl_ms(Duration::from_micros(10)), 1);
        assert_eq!(ttl_ms(Duration::from_secs(2)), 2000);
    }
}
