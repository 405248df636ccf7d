//! Host bindings generated from the WIT: the current `plugin` world (`wit/plugin.wit`,
//! `ankh:plugin@0.2.0`) at the top level, the 0.1.0 world that older plugins target in
//! [`legacy`], and the standard `wasi:keyvalue` interfaces in [`keyvalue`]. Their imports are
//! traits the host implements (see [`super::state`], [`super::kv_host`], [`super::legacy`]).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub use self::ankh::plugin::types;
pub use self::exports::ankh::plugin::handler;

/// `ankh:plugin@0.1.0`, frozen in `wit/legacy/`. Its `types` interface is identical to the
/// current one, so both worlds share those Rust types and a 0.1.0 call needs no conversion.
pub mod legacy {
    wasmtime::component::bindgen!({
        path: "../wit/legacy/ankh-plugin-0.1.0.wit",
        world: "plugin",
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
        with: {
            "wasi:keyvalue/store.bucket": crate::runtime::kv_host::Bucket,
        },
    });
}
