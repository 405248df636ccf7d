//! Host bindings generated from the WIT: the current `plugin` world (`wit/plugin.wit`,
//! `ankh:plugin@0.3.0`) at the top level, the 0.2.0 and 0.1.0 worlds that older plugins
//! target in [`v02`] and [`legacy`], and the standard `wasi:keyvalue` interfaces in
//! [`keyvalue`]. Their imports are traits the host implements (see
//! [`crate::runtime::sandbox::store`], [`crate::runtime::host::kv`],
//! [`crate::runtime::host::legacy`]).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    // Calls run on fibers (see `crate::pool`). A key-value call awaits the store (a write its
    // commit, a read a remote store's answer), and a WebSocket send, close or publish may
    // await Redis (a connection on another process, `--pubsub`): either suspends the call and
    // frees its thread. An early response with a big body first moves its call off the event
    // loop (see `exec::leave_loop`), and a streamed write waits for room while the client
    // reads slower than the plugin writes. The other imports answer at once.
    exports: { default: async },
    imports: {
        "ankh:plugin/http.respond": async,
        "ankh:plugin/http.write": async,
        "ankh:plugin/kv.get": async,
        "ankh:plugin/kv.get-many": async,
        "ankh:plugin/kv.exists": async,
        "ankh:plugin/kv.list-keys": async,
        "ankh:plugin/kv.set": async,
        "ankh:plugin/kv.set-many": async,
        "ankh:plugin/kv.delete": async,
        "ankh:plugin/kv.delete-many": async,
        "ankh:plugin/kv.compare-and-swap": async,
        "ankh:plugin/kv.increment": async,
        "ankh:plugin/websocket.send": async,
        "ankh:plugin/websocket.close": async,
        "ankh:plugin/websocket.publish": async,
    },
});

pub use self::ankh::plugin::types;

/// `ankh:plugin@0.2.0`, frozen in `wit/legacy/`. Its `types` interface is identical to the
/// current one, so both worlds share those Rust types; its `kv` is identical too, but only a
/// whole interface can be shared, so its two records are converted.
pub mod v02 {
    wasmtime::component::bindgen!({
        path: "../wit/legacy/ankh-plugin-0.2.0.wit",
        world: "plugin",
        exports: { default: async },
        imports: {
            "ankh:plugin/http.respond": async,
            "ankh:plugin/kv.get": async,
            "ankh:plugin/kv.get-many": async,
            "ankh:plugin/kv.exists": async,
            "ankh:plugin/kv.list-keys": async,
            "ankh:plugin/kv.set": async,
            "ankh:plugin/kv.set-many": async,
            "ankh:plugin/kv.delete": async,
            "ankh:plugin/kv.delete-many": async,
            "ankh:plugin/kv.compare-and-swap": async,
            "ankh:plugin/kv.increment": async,
            "ankh:plugin/websocket.send": async,
            "ankh:plugin/websocket.close": async,
            "ankh:plugin/websocket.publish": async,
        },
        with: {
            "ankh:plugin/types@0.2.0": super::ankh::plugin::types,
        },
    });
}

/// `ankh:plugin@0.1.0`, frozen in `wit/legacy/`. Its `types` interface is identical to the
/// current one, so both worlds share those Rust types and a 0.1.0 call needs no conversion.
pub mod legacy {
    wasmtime::component::bindgen!({
        path: "../wit/legacy/ankh-plugin-0.1.0.wit",
        world: "plugin",
        exports: { default: async },
        imports: {
            "ankh:plugin/http.respond": async,
            "ankh:plugin/kv.get": async,
            "ankh:plugin/kv.list-keys": async,
            "ankh:plugin/kv.set": async,
            "ankh:plugin/kv.delete": async,
            "ankh:plugin/kv.increment": async,
            "ankh:plugin/websocket.send": async,
            "ankh:plugin/websocket.close": async,
            "ankh:plugin/websocket.publish": async,
        },
        with: {
            "ankh:plugin/types@0.1.0": super::ankh::plugin::types,
        },
    });
}

/// `wasi:keyvalue@0.2.0-draft` (`store`, `atomics`, `batch`), from `wit/deps/keyvalue/`.
pub mod keyvalue {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "wasi:keyvalue/imports",
        imports: {
            "wasi:keyvalue/store.[method]bucket.get": async,
            "wasi:keyvalue/store.[method]bucket.exists": async,
            "wasi:keyvalue/store.[method]bucket.list-keys": async,
            "wasi:keyvalue/batch.get-many": async,
            "wasi:keyvalue/store.[method]bucket.set": async,
            "wasi:keyvalue/store.[method]bucket.delete": async,
            "wasi:keyvalue/atomics.increment": async,
            "wasi:keyvalue/batch.set-many": async,
            "wasi:keyvalue/batch.delete-many": async,
        },
        with: {
            "wasi:keyvalue/store.bucket": crate::runtime::host::kv::Bucket,
        },
    });
}
