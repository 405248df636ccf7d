//! The key-value store behind the `kv` import: one namespace per plugin, shared by every worker.
//!
//! In memory for now: contents are lost when the host stops. Keys are kept sorted so that
//! `list-keys` by prefix is a range scan.
//!
//! Every namespace is bounded three ways: the size of a key, the size of a value, and the total
//! bytes (keys plus values) it holds, which the plugin's policy sets (`kv_max_bytes`). The host
//! memory a plugin can fill through this store is therefore its quota, not the machine.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use super::guest_limits::GuestLimits;
use crate::runtime::bindings::types::KvError;

/// All namespaces.
#[derive(Debug, Default)]
pub struct KvStore {
    namespaces: Mutex<HashMap<String, Arc<Namespace>>>,
}

/// One plugin's keys.
#[derive(Debug, Default)]
pub struct Namespace {
    map: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: BTreeMap<String, Vec<u8>>,
    /// Key plus value bytes of every entry.
    bytes: usize,
}

impl Entries {
    /// Stores `value` at `key` if the namespace stays within its byte quota and key count.
    fn put(&mut self, key: String, value: Vec<u8>, limits: &GuestLimits) -> Result<(), KvError> {
        let old = self.map.get(&key).map(|v| key.len() + v.len());
        if old.is_none() && self.map.len() >= limits.kv_max_keys {
            return Err(KvError::Full);
        }
        let next = self.bytes - old.unwrap_or(0) + key.len() + value.len();
        if next > limits.kv_max_bytes && next > self.bytes {
            return Err(KvError::Full);
        }
        self.bytes = next;
        self.map.insert(key, value);
        Ok(())
    }
}

impl KvStore {
    /// The namespace called `name`, created on first use. A reloaded plugin gets the same one.
    pub fn namespace(&self, name: &str) -> Arc<Namespace> {
        let mut all = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.entry(name.to_owned()).or_default().clone()
    }
}

impl Namespace {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().map.get(key).cloned()
    }

    /// Stores `value` at `key`, within the plugin's `limits`: a write that would take the
    /// namespace past its byte quota is refused with `full` (one that shrinks it is always
    /// allowed).
    pub fn set(&self, key: String, value: Vec<u8>, limits: &GuestLimits) -> Result<(), KvError> {
        if key.len() > limits.kv_max_key_bytes || value.len() > limits.kv_max_value_bytes {
            return Err(KvError::TooLarge);
        }
        self.lock().put(key, value, limits)
    }

    pub fn delete(&self, key: &str) -> bool {
        let mut entries = self.lock();
        match entries.map.remove_entry(key) {
            Some((k, v)) => {
                entries.bytes -= k.len() + v.len();
                true
            }
            None => false,
        }
    }

    pub fn list_keys(&self, prefix: &str) -> Vec<String> {
        self.lock()
            .map
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Key plus value bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    pub fn increment(&self, key: String, delta: i64, limits: &GuestLimits) -> Result<i64, KvError> {
        if key.len() > limits.kv_max_key_bytes {
            return Err(KvError::TooLarge);
        }
        let mut entries = self.lock();
        let current = match entries.map.get(&key) {
            None => 0,
            Some(bytes) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or(KvError::NotANumber)?,
        };
        let next = current.checked_add(delta).ok_or(KvError::Overflow)?;
        entries.put(key, next.to_string().into_bytes(), limits)?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default limits with a byte quota of `max`.
    fn quota(max: usize) -> GuestLimits {
        let policy = super::super::policy::Policy::defaults("t", &crate::limits::Limits::default());
        GuestLimits {
            kv_max_bytes: max,
            ..GuestLimits::for_plugin(&policy, 1024)
        }
    }

    #[test]
    fn namespaces_are_separate_and_shared_by_name() {
        let store = KvStore::default();
        store
            .namespace("a")
            .set("k".into(), b"1".to_vec(), &quota(usize::MAX))
            .unwrap();
        assert_eq!(store.namespace("a").get("k"), Some(b"1".to_vec()));
        assert_eq!(store.namespace("b").get("k"), None);
    }

    #[test]
    fn increment_and_prefix_listing() {
        let ns = Namespace::default();
        let max = &quota(usize::MAX);
        assert!(matches!(ns.increment("n".into(), 5, max), Ok(5)));
        assert!(matches!(ns.increment("n".into(), -7, max), Ok(-2)));
        ns.set("x".into(), b"abc".to_vec(), max).unwrap();
        assert!(matches!(
            ns.increment("x".into(), 1, max),
            Err(KvError::NotANumber)
        ));
        ns.set("big".into(), i64::MAX.to_string().into_bytes(), max)
            .unwrap();
        assert!(matches!(
            ns.increment("big".into(), 1, max),
            Err(KvError::Overflow)
        ));
        ns.set("item/2".into(), vec![], max).unwrap();
        ns.set("item/1".into(), vec![], max).unwrap();
        ns.set("iten".into(), vec![], max).unwrap();
        assert_eq!(ns.list_keys("item/"), vec!["item/1", "item/2"]);
        assert!(ns.delete("item/1"));
        assert!(!ns.delete("item/1"));
        assert!(matches!(
            ns.set("k".repeat(2000), vec![], max),
            Err(KvError::TooLarge)
        ));
    }

    #[test]
    fn the_byte_quota_counts_keys_and_values_and_frees_on_delete() {
        let ns = Namespace::default();
        ns.set("a".into(), vec![0; 99], &quota(200)).unwrap();
        assert_eq!(ns.bytes(), 100);
        ns.set("b".into(), vec![0; 99], &quota(200)).unwrap();
        assert!(matches!(
            ns.set("c".into(), vec![0; 1], &quota(200)),
            Err(KvError::Full)
        ));
        // Replacing a value with a smaller one is always allowed, and counted.
        ns.set("a".into(), vec![0; 9], &quota(200)).unwrap();
        assert_eq!(ns.bytes(), 110);
        assert!(ns.delete("b"));
        assert_eq!(ns.bytes(), 10);
        ns.set("c".into(), vec![0; 150], &quota(200)).unwrap();
        assert!(matches!(
            ns.increment("n".into(), 1, &quota(162)),
            Err(KvError::Full)
        ));
    }
}
