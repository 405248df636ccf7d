//! The host side of the key-value imports: `ankh:plugin/kv@0.2.0` and the standard
//! `wasi:keyvalue` (`store`, `atomics`, `batch`), both over the plugin's own namespace. A
//! plugin reaches no other namespace. `wasi:keyvalue`'s `open` of `""` or `"default"` is the
//! plain key space that `ankh:plugin/kv` sees too; any other name (wasmCloud's `"in_memory"`,
//! a Spin label) is a bucket of the plugin's own, a key space apart under the same quota
//! ([`Namespace::bucket`]).

use std::collections::VecDeque;

use wasmtime::component::{HasSelf, Linker, Resource};

use crate::kv::{KvError, Namespace};
use crate::limits::KV_WASI_CURSORS;
use crate::runtime::bindings::ankh::plugin::kv;
use crate::runtime::bindings::keyvalue::wasi::keyvalue::{atomics, batch, store};
use crate::runtime::sandbox::store::HostState;

/// Runs a key-value operation of the store's plugin call as a span of that call's trace
/// (when its spans are recorded): `traced!(self, "kv.get", self.kv.get(&key).await)`.
macro_rules! traced {
    ($state:expr, $name:literal, $op:expr) => {{
        let span =
            crate::trace::Timed::start($state.tags.trace(), $name, crate::trace::Kind::Internal);
        let result: Result<_, KvError> = $op;
        if let Some(span) = span {
            let error = result.as_ref().err().map(ToString::to_string);
            span.end(
                vec![("db.system.name", crate::trace::Attr::Text("ankh-kv".into()))],
                error,
            );
        }
        result
    }};
}

impl From<KvError> for kv::Error {
    fn from(e: KvError) -> Self {
        match e {
            KvError::TooLarge => kv::Error::TooLarge,
            KvError::Full => kv::Error::Full,
            KvError::NotANumber => kv::Error::NotANumber,
            KvError::Overflow => kv::Error::Overflow,
            KvError::Invalid(why) => kv::Error::Invalid(why),
            KvError::Unavailable(why) => kv::Error::Unavailable(why),
        }
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, kv::Error> {
        Ok(traced!(self, "kv.get", self.kv.get(&key).await)?)
    }

    async fn get_many(&mut self, keys: Vec<String>) -> Result<Vec<Option<Vec<u8>>>, kv::Error> {
        Ok(traced!(self, "kv.get_many", self.kv.get_many(&keys).await)?)
    }

    async fn exists(&mut self, key: String) -> Result<bool, kv::Error> {
        Ok(traced!(self, "kv.exists", self.kv.exists(&key).await)?)
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), kv::Error> {
        Ok(traced!(
            self,
            "kv.set",
            self.kv.set(key, value, ttl_ms).await
        )?)
    }

    async fn set_many(
        &mut self,
        entries: Vec<(String, Vec<u8>)>,
        ttl_ms: Option<u64>,
    ) -> Result<(), kv::Error> {
        Ok(traced!(
            self,
            "kv.set_many",
            self.kv.set_many(entries, ttl_ms).await
        )?)
    }

    async fn delete(&mut self, key: String) -> Result<bool, kv::Error> {
        Ok(traced!(self, "kv.delete", self.kv.delete(key).await)?)
    }

    async fn delete_many(&mut self, keys: Vec<String>) -> Result<u32, kv::Error> {
        Ok(traced!(
            self,
            "kv.delete_many",
            self.kv.delete_many(keys).await
        )?)
    }

    async fn compare_and_swap(
        &mut self,
        key: String,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<bool, kv::Error> {
        Ok(traced!(
            self,
            "kv.compare_and_swap",
            self.kv.compare_and_swap(key, expected, value, ttl_ms).await
        )?)
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, kv::Error> {
        Ok(traced!(
            self,
            "kv.increment",
            self.kv.increment(key, delta).await
        )?)
    }

    async fn list_keys(
        &mut self,
        prefix: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<kv::KeyPage, kv::Error> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let (keys, cursor) = traced!(
            self,
            "kv.list_keys",
            self.kv.list_page(&prefix, cursor.as_deref(), limit).await
        )?;
        Ok(kv::KeyPage { keys, cursor })
    }
}

/// An open `wasi:keyvalue` bucket: the plugin's plain key space or one of its named
/// buckets. Its `list-keys` cursors are numbers, so the bucket remembers the key each one
/// stands for (the newest [`KV_WASI_CURSORS`]; an older cursor is refused).
#[derive(Debug)]
#[allow(unreachable_pub)] // named by bindgen's `with` mapping, which re-exports it
pub struct Bucket {
    keys: Namespace,
    cursors: VecDeque<(u64, String)>,
    next_cursor: u64,
}

impl Bucket {
    fn new(keys: Namespace) -> Bucket {
        Bucket {
            keys,
            cursors: VecDeque::new(),
            next_cursor: 0,
        }
    }

    fn remember(&mut self, key: String) -> u64 {
        self.next_cursor += 1;
        if self.cursors.len() == KV_WASI_CURSORS {
            self.cursors.pop_front();
        }
        self.cursors.push_back((self.next_cursor, key));
        self.next_cursor
    }

    fn recall(&self, cursor: u64) -> Option<&str> {
        self.cursors
            .iter()
            .find(|(n, _)| *n == cursor)
            .map(|(_, key)| key.as_str())
    }
}

impl From<KvError> for store::Error {
    fn from(e: KvError) -> Self {
        match e {
            KvError::Unavailable(why) => store::Error::Other(format!("unavailable: {why}")),
            other => store::Error::Other(other.to_string()),
        }
    }
}

/// Links `wasi:keyvalue/{store,atomics,batch}`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    store::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    atomics::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    batch::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}

/// Converts the resource-table failure of a bucket lookup.
fn table_error(e: wasmtime::component::ResourceTableError) -> store::Error {
    store::Error::Other(e.to_string())
}

impl store::Host for HostState {
    /// `""` and `"default"` open the plain key space; any other name the plugin's bucket of
    /// that name (created by its first write). A name that cannot be a bucket's is
    /// `no-such-store`.
    fn open(&mut self, identifier: String) -> Result<Resource<Bucket>, store::Error> {
        let keys = match identifier.as_str() {
            "" | "default" => self.kv.clone(),
            name => self
                .kv
                .bucket(name)
                .map_err(|_| store::Error::NoSuchStore)?,
        };
        self.table().push(Bucket::new(keys)).map_err(table_error)
    }
}

impl HostState {
    /// The key space of an open bucket.
    fn bucket(&mut self, bucket: &Resource<Bucket>) -> Result<Namespace, store::Error> {
        Ok(self.table().get(bucket).map_err(table_error)?.keys.clone())
    }
}

impl store::HostBucket for HostState {
    async fn get(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> Result<Option<Vec<u8>>, store::Error> {
        Ok(traced!(
            self,
            "kv.get",
            self.bucket(&bucket)?.get(&key).await
        )?)
    }

    async fn set(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), store::Error> {
        Ok(traced!(
            self,
            "kv.set",
            self.bucket(&bucket)?.set(key, value, None).await
        )?)
    }

    async fn delete(&mut self, bucket: Resource<Bucket>, key: String) -> Result<(), store::Error> {
        traced!(self, "kv.delete", self.bucket(&bucket)?.delete(key).await)?;
        Ok(())
    }

    async fn exists(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> Result<bool, store::Error> {
        Ok(traced!(
            self,
            "kv.exists",
            self.bucket(&bucket)?.exists(&key).await
        )?)
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<Bucket>,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, store::Error> {
        let after = match cursor {
            None => None,
            Some(n) => {
                let b = self.table().get(&bucket).map_err(table_error)?;
                Some(
                    b.recall(n)
                        .ok_or_else(|| {
                            store::Error::Other(format!("cursor {n} is unknown or too old"))
                        })?
                        .to_owned(),
                )
            }
        };
        let space = self.bucket(&bucket)?;
        let page = space.bounds().page_keys;
        let (keys, next) = space.list_page("", after.as_deref(), page).await?;
        let cursor = match next {
            Some(key) => {
                let b = self.table().get_mut(&bucket).map_err(table_error)?;
                Some(b.remember(key))
            }
            None => None,
        };
        Ok(store::KeyResponse { keys, cursor })
    }

    fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table().delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for HostState {
    /// The same decimal counters as `kv.increment`; a delta past `i64::MAX`, or a counter
    /// below zero, is an error (this interface counts in unsigned numbers).
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, store::Error> {
        let delta = i64::try_from(delta)
            .map_err(|_| store::Error::Other("the delta is over 2^63 - 1".into()))?;
        let value = traced!(
            self,
            "kv.increment",
            self.bucket(&bucket)?.increment(key, delta).await
        )?;
        u64::try_from(value)
            .map_err(|_| store::Error::Other(format!("the counter is negative ({value})")))
    }
}

impl batch::Host for HostState {
    async fn get_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, store::Error> {
        let values = traced!(
            self,
            "kv.get_many",
            self.bucket(&bucket)?.get_many(&keys).await
        )?;
        Ok(keys
            .into_iter()
            .zip(values)
            .map(|(key, value)| value.map(|v| (key, v)))
            .collect())
    }

    async fn set_many(
        &mut self,
        bucket: Resource<Bucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), store::Error> {
        Ok(traced!(
            self,
            "kv.set_many",
            self.bucket(&bucket)?.set_many(key_values, None).await
        )?)
    }

    async fn delete_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<(), store::Error> {
        traced!(
            self,
            "kv.delete_many",
            self.bucket(&bucket)?.delete_many(keys).await
        )?;
        Ok(())
    }
}
