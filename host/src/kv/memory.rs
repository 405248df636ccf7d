//! The in-memory backend (`--kv memory`): sorted maps behind one lock per namespace. Its
//! contents are gone when the process ends; for tests and throwaway runs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use super::rules::{self, Entry, Txn};
use super::{Backend, Bounds, KvError, Millis, Pending, Stats, Usage, Write, Written};

/// Every namespace, by name.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    spaces: RwLock<HashMap<String, Arc<Mutex<Space>>>>,
    stats: Arc<Stats>,
}

/// One namespace.
#[derive(Debug, Default)]
struct Space {
    map: BTreeMap<String, Entry>,
    /// (expiry, key) of every entry that expires.
    expiring: BTreeSet<(Millis, String)>,
    usage: Usage,
}

impl Txn for Space {
    fn get(&mut self, key: &str) -> Result<Option<Entry>, KvError> {
        Ok(self.map.get(key).cloned())
    }

    fn put(&mut self, key: &str, entry: Entry, old: Option<&Entry>) -> Result<(), KvError> {
        if let Some(at) = old.and_then(|o| o.expires) {
            self.expiring.remove(&(at, key.to_owned()));
        }
        if let Some(at) = entry.expires {
            self.expiring.insert((at, key.to_owned()));
        }
        self.map.insert(key.to_owned(), entry);
        Ok(())
    }

    fn remove(&mut self, key: &str, old: &Entry) -> Result<(), KvError> {
        if let Some(at) = old.expires {
            self.expiring.remove(&(at, key.to_owned()));
        }
        self.map.remove(key);
        Ok(())
    }
}

fn lock(space: &Mutex<Space>) -> MutexGuard<'_, Space> {
    space.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Memory {
    /// The namespace `ns`, if it was ever written.
    fn find(&self, ns: &str) -> Option<Arc<Mutex<Space>>> {
        let spaces = self.spaces.read().unwrap_or_else(PoisonError::into_inner);
        spaces.get(ns).cloned()
    }

    /// The namespace `ns`, created on first use.
    fn space(&self, ns: &str) -> Arc<Mutex<Space>> {
        if let Some(space) = self.find(ns) {
            return space;
        }
        let mut spaces = self.spaces.write().unwrap_or_else(PoisonError::into_inner);
        spaces.entry(ns.to_owned()).or_default().clone()
    }
}

impl Memory {
    fn read_many(&self, ns: &str, keys: &[String], now: Millis) -> Vec<Option<Vec<u8>>> {
        let Some(space) = self.find(ns) else {
            return vec![None; keys.len()];
        };
        let space = lock(&space);
        keys.iter()
            .map(|k| {
                space
                    .map
                    .get(k)
                    .filter(|e| e.live(now))
                    .map(|e| e.value.clone())
            })
            .collect()
    }

    fn read_list(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Vec<String> {
        let Some(space) = self.find(ns) else {
            return Vec::new();
        };
        let space = lock(&space);
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(prefix),
        };
        space
            .map
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(_, e)| e.live(now))
            .take(limit)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl Backend for Memory {
    fn get_many(&self, ns: &str, keys: &[String], now: Millis) -> Pending<Vec<Option<Vec<u8>>>> {
        Pending::ready(Ok(self.read_many(ns, keys, now)))
    }

    fn exists(&self, ns: &str, key: &str, now: Millis) -> Pending<bool> {
        Pending::ready(Ok(self
            .find(ns)
            .is_some_and(|s| lock(&s).map.get(key).is_some_and(|e| e.live(now)))))
    }

    fn list(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Pending<Vec<String>> {
        Pending::ready(Ok(self.read_list(ns, prefix, after, limit, now)))
    }

    fn write(&self, ns: &str, write: Write, bounds: &Bounds, now: Millis) -> Pending<Written> {
        let space = self.space(ns);
        let mut space = lock(&space);
        let mut usage = space.usage;
        let written = rules::apply(&mut *space, &mut usage, write, bounds, now);
        if written.is_ok() {
            space.usage = usage;
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
        }
        Pending::ready(written)
    }

    #[cfg(test)]
    fn usage(&self, ns: &str) -> Result<Usage, KvError> {
        Ok(self.find(ns).map(|s| lock(&s).usage).unwrap_or_default())
    }

    fn sweep(&self, now: Millis, max: usize) -> Result<usize, KvError> {
        let spaces: Vec<_> = {
            let spaces = self.spaces.read().unwrap_or_else(PoisonError::into_inner);
            spaces.values().cloned().collect()
        };
        let mut swept = 0;
        for space in spaces {
            let mut space = lock(&space);
            while swept < max {
                let Some((at, key)) = space.expiring.first().cloned() else {
                    break;
                };
                if at > now {
                    break;
                }
                space.expiring.pop_first();
                if let Some(entry) = space.map.remove(&key) {
                    space.usage.keys = space.usage.keys.saturating_sub(1);
                    space.usage.bytes = space.usage.bytes.saturating_sub(entry.size(&key));
                }
                swept += 1;
            }
        }
        Ok(swept)
    }

    fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }
}
