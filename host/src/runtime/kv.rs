//! The key-value store behind the `kv` import: one namespace per plugin, shared by every worker.
//!
//! In memory for now: contents are lost when the host stops. Keys are kept sorted so that
//! `list-keys` by prefix is a range scan.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use crate::limits::{KV_MAX_KEY_BYTES, KV_MAX_KEYS, KV_MAX_VALUE_BYTES};
use crate::runtime::bindings::types::KvError;

/// All namespaces.
#[derive(Debug, Default)]
pub struct KvStore {
    namespaces: Mutex<HashMap<String, Arc<Namespace>>>,
}

/// One plugin's keys.
#[derive(Debug, Default)]
pub struct Namespace {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
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
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().get(key).cloned()
    }

    pub fn set(&self, key: String, value: Vec<u8>) -> Result<(), KvError> {
        if key.len() > KV_MAX_KEY_BYTES || value.len() > KV_MAX_VALUE_BYTES {
            return Err(KvError::TooLarge);
        }
        let mut map = self.lock();
        if map.len() >= KV_MAX_KEYS && !map.contains_key(&key) {
            return Err(KvError::Full);
        }
        map.insert(key, value);
        Ok(())
    }

    pub fn delete(&self, key: &str) -> bool {
        self.lock().remove(key).is_some()
    }

    pub fn list_keys(&self, prefix: &str) -> Vec<String> {
        self.lock()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn increment(&self, key: String, delta: i64) -> Result<i64, KvError> {
        if key.len() > KV_MAX_KEY_BYTES {
            return Err(KvError::TooLarge);
        }
        let mut map = self.lock();
        let current = match map.get(&key) {
            None => 0,
            Some(bytes) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or(KvError::NotANumber)?,
        };
        let next = current.checked_add(delta).ok_or(KvError::Overflow)?;
        if map.len() >= KV_MAX_KEYS && !map.contains_key(&key) {
            return Err(KvError::Full);
        }
        map.insert(key, next.to_string().into_bytes());
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_separate_and_shared_by_name() {
        let store = KvStore::default();
        store.namespace("a").set("k".into(), b"1".to_vec()).unwrap();
        assert_eq!(store.namespace("a").get("k"), Some(b"1".to_vec()));
        assert_eq!(store.namespace("b").get("k"), None);
    }

    #[test]
    fn increment_and_prefix_listing() {
        let ns = Namespace::default();
        assert!(matches!(ns.increment("n".into(), 5), Ok(5)));
        assert!(matches!(ns.increment("n".into(), -7), Ok(-2)));
        ns.set("x".into(), b"abc".to_vec()).unwrap();
        assert!(matches!(
            ns.increment("x".into(), 1),
            Err(KvError::NotANumber)
        ));
        ns.set("big".into(), i64::MAX.to_string().into_bytes())
            .unwrap();
        assert!(matches!(
            ns.increment("big".into(), 1),
            Err(KvError::Overflow)
        ));
        ns.set("item/2".into(), vec![]).unwrap();
        ns.set("item/1".into(), vec![]).unwrap();
        ns.set("iten".into(), vec![]).unwrap();
        assert_eq!(ns.list_keys("item/"), vec!["item/1", "item/2"]);
        assert!(ns.delete("item/1"));
        assert!(!ns.delete("item/1"));
        assert!(matches!(
            ns.set("k".repeat(2000), vec![]),
            Err(KvError::TooLarge)
        ));
    }
}
