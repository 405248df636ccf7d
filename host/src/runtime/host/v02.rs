//! The imports of `ankh:plugin@0.2.0`, so plugins built against it run unchanged: each is the
//! current import under its old name (0.3.0 only added to `http`), with the same Rust types.

use wasmtime::component::{HasSelf, Linker};

use crate::runtime::bindings::ankh::plugin as current;
use crate::runtime::bindings::types::{ConnectionId, Message, RespondError, Response, WsError};
use crate::runtime::bindings::v02::ankh::plugin::{http, kv, log, websocket};
use crate::runtime::sandbox::store::HostState;

use kv::{Error, KeyPage};

/// The same error, as 0.2.0's type.
fn old(e: current::kv::Error) -> Error {
    use current::kv::Error as New;
    match e {
        New::TooLarge => Error::TooLarge,
        New::Full => Error::Full,
        New::NotANumber => Error::NotANumber,
        New::Overflow => Error::Overflow,
        New::Invalid(why) => Error::Invalid(why),
        New::Unavailable(why) => Error::Unavailable(why),
    }
}

/// Links every 0.2.0 import.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    // `types` holds only types: an empty instance satisfies it.
    linker.instance("ankh:plugin/types@0.2.0")?;
    log::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    kv::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    http::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    websocket::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}

impl log::Host for HostState {
    fn log(
        &mut self,
        level: current::types::LogLevel,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        current::log::Host::log(self, level, message, fields);
    }
}

impl http::Host for HostState {
    async fn respond(&mut self, response: Response) -> Result<(), RespondError> {
        current::http::Host::respond(self, response).await
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, Error> {
        current::kv::Host::get(self, key).await.map_err(old)
    }

    async fn get_many(&mut self, keys: Vec<String>) -> Result<Vec<Option<Vec<u8>>>, Error> {
        current::kv::Host::get_many(self, keys).await.map_err(old)
    }

    async fn exists(&mut self, key: String) -> Result<bool, Error> {
        current::kv::Host::exists(self, key).await.map_err(old)
    }

    async fn set(&mut self, key: String, value: Vec<u8>, ttl_ms: Option<u64>) -> Result<(), Error> {
        current::kv::Host::set(self, key, value, ttl_ms)
            .await
            .map_err(old)
    }

    async fn set_many(
        &mut self,
        entries: Vec<(String, Vec<u8>)>,
        ttl_ms: Option<u64>,
    ) -> Result<(), Error> {
        current::kv::Host::set_many(self, entries, ttl_ms)
            .await
            .map_err(old)
    }

    async fn delete(&mut self, key: String) -> Result<bool, Error> {
        current::kv::Host::delete(self, key).await.map_err(old)
    }

    async fn delete_many(&mut self, keys: Vec<String>) -> Result<u32, Error> {
        current::kv::Host::delete_many(self, keys)
            .await
            .map_err(old)
    }

    async fn compare_and_swap(
        &mut self,
        key: String,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<bool, Error> {
        current::kv::Host::compare_and_swap(self, key, expected, value, ttl_ms)
            .await
            .map_err(old)
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, Error> {
        current::kv::Host::increment(self, key, delta)
            .await
            .map_err(old)
    }

    async fn list_keys(
        &mut self,
        prefix: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<KeyPage, Error> {
        let page = current::kv::Host::list_keys(self, prefix, cursor, limit).await;
        page.map(|p| KeyPage {
            keys: p.keys,
            cursor: p.cursor,
        })
        .map_err(old)
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
