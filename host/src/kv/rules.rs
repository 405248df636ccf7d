//! What each write does, once for every backend: a backend offers a [`Txn`] over one
//! namespace (read an entry, put one, remove one), and [`apply`] decides the rest. A write is
//! planned whole before anything is written, so one that breaks a rule (the quota, a
//! compare-and-swap that does not match, an increment of text) changes nothing.

use std::collections::BTreeMap;

use super::{Bounds, KvError, Millis, Usage, Write, Written};

/// A stored entry: the value, and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub value: Vec<u8>,
    pub expires: Option<Millis>,
}

impl Entry {
    /// Whether the entry is still visible at `now`.
    pub(crate) fn live(&self, now: Millis) -> bool {
        self.expires.is_none_or(|at| at > now)
    }

    /// What it counts against the quota, with its key.
    pub(crate) fn size(&self, key: &str) -> u64 {
        (key.len() + self.value.len()) as u64
    }

    /// The stored form: 8 bytes of expiry (big-endian milliseconds, 0 for never), then the
    /// value.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.value.len());
        out.extend_from_slice(&self.expires.unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&self.value);
        out
    }

    /// Reads [`Entry::encode`]'s form; `None` when it is too short to be one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Entry> {
        let (head, value) = bytes.split_first_chunk::<8>()?;
        let at = u64::from_be_bytes(*head);
        Some(Entry {
            value: value.to_vec(),
            expires: (at != 0).then_some(at),
        })
    }

    /// The expiry stored in an encoded entry, without copying its value.
    pub(crate) fn decode_expiry(bytes: &[u8]) -> Option<Option<Millis>> {
        let (head, _) = bytes.split_first_chunk::<8>()?;
        let at = u64::from_be_bytes(*head);
        Some((at != 0).then_some(at))
    }
}

/// One namespace inside a backend's transaction.
pub(crate) trait Txn {
    /// The entry at `key`, expired or not.
    fn get(&mut self, key: &str) -> Result<Option<Entry>, KvError>;
    /// Stores `entry` at `key`, replacing `old` (the backend keeps its expiry index).
    fn put(&mut self, key: &str, entry: Entry, old: Option<&Entry>) -> Result<(), KvError>;
    /// Removes `old` from `key`.
    fn remove(&mut self, key: &str, old: &Entry) -> Result<(), KvError>;
}

/// One key's planned change: `None` removes it.
struct Change {
    old: Option<Entry>,
    new: Option<Entry>,
}

/// Applies `write` through `txn`, keeping `usage` (the namespace's, before the write) up to
/// date, within `bounds`. On an error nothing was written and `usage` is unchanged.
pub(crate) fn apply(
    txn: &mut impl Txn,
    usage: &mut Usage,
    write: Write,
    bounds: &Bounds,
    now: Millis,
) -> Result<Written, KvError> {
    let mut plan: BTreeMap<String, Change> = BTreeMap::new();
    let written = match write {
        Write::Set { entries, expires } => {
            for (key, value) in entries {
                let old = match plan.remove(&key) {
                    Some(change) => change.old,
                    None => txn.get(&key)?,
                };
                let new = Some(Entry { value, expires });
                plan.insert(key, Change { old, new });
            }
            Written::Stored
        }
        Write::Delete { keys } => {
            let mut deleted = 0u32;
            for key in keys {
                if plan.contains_key(&key) {
                    continue;
                }
                let old = txn.get(&key)?;
                if old.as_ref().is_some_and(|e| e.live(now)) {
                    deleted += 1;
                }
                if old.is_some() {
                    plan.insert(key, Change { old, new: None });
                }
            }
            Written::Deleted(deleted)
        }
        Write::Swap {
            key,
            expected,
            value,
            expires,
        } => {
            let old = txn.get(&key)?;
            let current = old.as_ref().filter(|e| e.live(now)).map(|e| &e.value);
            if current != expected.as_ref() {
                return Ok(Written::Swapped(false));
            }
            plan.insert(
                key,
                Change {
                    old,
                    new: Some(Entry { value, expires }),
                },
            );
            Written::Swapped(true)
        }
        Write::Increment { key, delta } => {
            let old = txn.get(&key)?;
            let live = old.as_ref().filter(|e| e.live(now));
            let current = match live {
                None => 0,
                Some(entry) => counter(&entry.value).ok_or(KvError::NotANumber)?,
            };
            let next = current.checked_add(delta).ok_or(KvError::Overflow)?;
            let expires = live.and_then(|e| e.expires);
            plan.insert(
                key,
                Change {
                    old,
                    new: Some(Entry {
                        value: next.to_string().into_bytes(),
                        expires,
                    }),
                },
            );
            Written::Number(next)
        }
    };
    let after = usage_after(usage, &plan);
    // A write that frees space is always allowed; one that grows the namespace past a bound
    // is refused.
    if (after.bytes > bounds.max_bytes && after.bytes > usage.bytes)
        || (after.keys > bounds.max_keys && after.keys > usage.keys)
    {
        return Err(KvError::Full);
    }
    for (key, change) in plan {
        match (change.new, change.old) {
            (Some(new), old) => txn.put(&key, new, old.as_ref())?,
            (None, Some(old)) => txn.remove(&key, &old)?,
            (None, None) => {}
        }
    }
    *usage = after;
    Ok(written)
}

fn usage_after(usage: &Usage, plan: &BTreeMap<String, Change>) -> Usage {
    let mut keys = usage.keys;
    let mut bytes = usage.bytes;
    for (key, change) in plan {
        if let Some(old) = &change.old {
            keys = keys.saturating_sub(1);
            bytes = bytes.saturating_sub(old.size(key));
        }
        if let Some(new) = &change.new {
            keys += 1;
            bytes += new.size(key);
        }
    }
    Usage { keys, bytes }
}

/// The number a counter's value holds: the canonical decimal text of a 64-bit integer
/// (an optional `-`, no `+`, no leading zero, no space), the same rule Redis applies to
/// `HINCRBY`, so that every backend agrees on which values can be incremented.
fn counter(value: &[u8]) -> Option<i64> {
    let n: i64 = std::str::from_utf8(value).ok()?.parse().ok()?;
    (n.to_string().as_bytes() == value).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transaction over a plain map.
    #[derive(Default)]
    struct Map(BTreeMap<String, Entry>);

    impl Txn for Map {
        fn get(&mut self, key: &str) -> Result<Option<Entry>, KvError> {
            Ok(self.0.get(key).cloned())
        }
        fn put(&mut self, key: &str, entry: Entry, _: Option<&Entry>) -> Result<(), KvError> {
            self.0.insert(key.to_owned(), entry);
            Ok(())
        }
        fn remove(&mut self, key: &str, _: &Entry) -> Result<(), KvError> {
            self.0.remove(key);
            Ok(())
        }
    }

    fn set(key: &str, value: &str, expires: Option<Millis>) -> Write {
        Write::Set {
            entries: vec![(key.into(), value.into())],
            expires,
        }
    }

    #[test]
    fn encoding_round_trips() {
        for e in [
            Entry {
                value: b"v".to_vec(),
                expires: None,
            },
            Entry {
                value: vec![],
                expires: Some(42),
            },
        ] {
            assert_eq!(Entry::decode(&e.encode()), Some(e.clone()));
            assert_eq!(Entry::decode_expiry(&e.encode()), Some(e.expires));
        }
        assert_eq!(Entry::decode(b"short"), None);
    }

    #[test]
    fn a_write_over_the_quota_changes_nothing() {
        let bounds = Bounds {
            max_bytes: 10,
            ..Bounds::with_quota(10)
        };
        let mut txn = Map::default();
        let mut usage = Usage::default();
        apply(&mut txn, &mut usage, set("a", "1234", None), &bounds, 0).unwrap();
        assert_eq!(usage, Usage { keys: 1, bytes: 5 });
        let many = Write::Set {
            entries: vec![("b".into(), b"1".to_vec()), ("c".into(), b"12345".to_vec())],
            expires: None,
        };
        assert_eq!(
            apply(&mut txn, &mut usage, many, &bounds, 0),
            Err(KvError::Full)
        );
        assert_eq!(usage, Usage { keys: 1, bytes: 5 });
        assert_eq!(txn.0.len(), 1, "nothing of the refused batch was written");
        // Shrinking is allowed even over the quota.
        let tight = Bounds {
            max_bytes: 1,
            ..bounds
        };
        apply(&mut txn, &mut usage, set("a", "1", None), &tight, 0).unwrap();
        assert_eq!(usage.bytes, 2);
    }

    #[test]
    fn expired_entries_are_absent_but_counted_until_replaced() {
        let bounds = Bounds::with_quota(1 << 20);
        let mut txn = Map::default();
        let mut usage = Usage::default();
        apply(&mut txn, &mut usage, set("k", "old", Some(10)), &bounds, 0).unwrap();
        // At 10 it has expired: a swap expecting absence wins, and the old bytes are freed.
        let swap = Write::Swap {
            key: "k".into(),
            expected: None,
            value: b"new!".to_vec(),
            expires: None,
        };
        assert_eq!(
            apply(&mut txn, &mut usage, swap, &bounds, 10),
            Ok(Written::Swapped(true))
        );
        assert_eq!(usage, Usage { keys: 1, bytes: 5 });
        // An expired counter restarts from 0; a live one keeps its expiry.
        apply(&mut txn, &mut usage, set("n", "5", Some(100)), &bounds, 10).unwrap();
        let incr = || Write::Increment {
            key: "n".into(),
            delta: 2,
        };
        assert_eq!(
            apply(&mut txn, &mut usage, incr(), &bounds, 50),
            Ok(Written::Number(7))
        );
        assert_eq!(txn.0["n"].expires, Some(100));
        assert_eq!(
            apply(&mut txn, &mut usage, incr(), &bounds, 100),
            Ok(Written::Number(2))
        );
        assert_eq!(txn.0["n"].expires, None);
        // Deleting an expired key removes it but does not count it.
        apply(&mut txn, &mut usage, set("gone", "x", Some(5)), &bounds, 0).unwrap();
        let delete = Write::Delete {
            keys: vec!["gone".into(), "k".into(), "k".into(), "never".into()],
        };
        assert_eq!(
            apply(&mut txn, &mut usage, delete, &bounds, 10),
            Ok(Written::Deleted(1))
        );
        assert!(!txn.0.contains_key("gone"));
        assert_eq!(usage, Usage { keys: 1, bytes: 2 });
    }

    #[test]
    fn swap_compares_the_live_value_and_set_many_keeps_the_last() {
        let bounds = Bounds::with_quota(1 << 20);
        let mut txn = Map::default();
        let mut usage = Usage::default();
        let swap = |expected: Option<&str>, value: &str| Write::Swap {
            key: "k".into(),
            expected: expected.map(|e| e.as_bytes().to_vec()),
            value: value.into(),
            expires: None,
        };
        let mut run = |w| apply(&mut txn, &mut usage, w, &bounds, 0);
        assert_eq!(run(swap(Some("x"), "1")), Ok(Written::Swapped(false)));
        assert_eq!(run(swap(None, "1")), Ok(Written::Swapped(true)));
        assert_eq!(run(swap(None, "2")), Ok(Written::Swapped(false)));
        assert_eq!(run(swap(Some("1"), "2")), Ok(Written::Swapped(true)));
        let many = Write::Set {
            entries: vec![("d".into(), b"1".to_vec()), ("d".into(), b"22".to_vec())],
            expires: None,
        };
        assert_eq!(run(many), Ok(Written::Stored));
        assert_eq!(txn.0["d"].value, b"22");
        assert_eq!(usage, Usage { keys: 2, bytes: 5 });
        let mut run = |w| apply(&mut txn, &mut usage, w, &bounds, 0);
        assert_eq!(
            run(Write::Increment {
                key: "d".into(),
                delta: i64::MAX
            }),
            Err(KvError::Overflow)
        );
        assert_eq!(
            run(Write::Increment {
                key: "k".into(),
                delta: 1
            }),
            Ok(Written::Number(3))
        );
        assert_eq!(
            run(set("t", "text", None)).and_then(|_| run(Write::Increment {
                key: "t".into(),
                delta: 1
            })),
            Err(KvError::NotANumber)
        );
    }
}
