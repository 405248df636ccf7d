//! The imports of `ankh:plugin@0.1.0`, so plugins built against it run unchanged: `log`,
//! `http` and `websocket` are the current ones under their old names; `kv` is the old, smaller
//! interface over the same store.
//!
//! 0.1.0's `kv` cannot report a failing store: there, a read that fails answers "absent" (and
//! the host logs why), and a write that fails answers `full`.

use wasmtime::component::{HasSelf, Linker};

use crate::kv::KvError as StoreError;
use crate::runtime::bindings::ankh::plugin as current;
use crate::runtime::bindings::legacy::ankh::plugin::{http, kv, log, websocket};
use crate::runtime::bindings::types::{
    ConnectionId, KvError, LogLevel, Message, RespondError, Response, WsError,
};
use crate::runtime::sandbox::store::HostState;

/// Links every 0.1.0 import.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    // `types` holds only types: an empty instance satisfies it.
    linker.instance("ankh:plugin/types@0.1.0")?;
    log::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    kv::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    http::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    websocket::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}

impl log::Host for HostState {
    fn log(&mut self, level: LogLevel, message: String, fields: Vec<(String, String)>) {
        current::log::Host::log(self, level, message, fields);
    }
}

impl http::Host for HostState {
    async fn respond(&mut self, response: Response) -> Result<(), RespondError> {
        current::http::Host::respond(self, response).await
    }
}

impl websocket::Host for HostState {
    async fn send(&mut self, conn: ConnectionId, message: Message) -> Result<(), WsError> {
        current::websocket::Host::send(self, conn, message).await
    }

    async fn close(
        &mut self,
        conn: ConnectionId,
        code: u16,
        reason: String,
    ) -> Result<(), WsError> {
        current::websocket::Host::close(self, conn, code, reason).await
    }

    fn subscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        current::websocket::Host::subscribe(self, conn, topic)
    }

    fn unsubscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        current::websocket::Host::unsubscribe(self, conn, topic)
    }

    async fn publish(&mut self, topic: String, message: Message) -> Result<u32, WsError> {
        current::websocket::Host::publish(self, topic, message).await
    }
}

/// 0.1.0's error for a current one.
fn old_error(e: StoreError) -> KvError {
    match e {
        StoreError::TooLarge => KvError::TooLarge,
        StoreError::NotANumber => KvError::NotANumber,
        StoreError::Overflow => KvError::Overflow,
        // 0.1.0 has no way to say "unavailable"; `full` is the nearest: nothing was stored.
        StoreError::Full | StoreError::Invalid(_) | StoreError::Unavailable(_) => KvError::Full,
    }
}

impl HostState {
    /// A read that failed, logged, for an interface that cannot report it.
    fn lost_read<T: Default>(&self, what: &str, e: StoreError) -> T {
        warn_limited!(plugin = %self.tags.plugin, "kv {what} failed, answered as absent (0.1.0 cannot report it): {e}");
        T::default()
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Option<Vec<u8>> {
        let read = self.kv.get(&key).await;
        read.unwrap_or_else(|e| self.lost_read("get", e))
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), KvError> {
        self.kv.set(key, value, None).await.map_err(old_error)
    }

    async fn delete(&mut self, key: String) -> bool {
        let deleted = self.kv.delete(key).await;
        deleted.unwrap_or_else(|e| self.lost_read("delete", e))
    }

    async fn list_keys(&mut self, prefix: String) -> Vec<String> {
        let listed = self.kv.list_all(&prefix).await;
        listed.unwrap_or_else(|e| self.lost_read("list-keys", e))
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, KvError> {
        self.kv.increment(key, delta).await.map_err(old_error)
    }
}
