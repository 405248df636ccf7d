//! Host bindings generated from `wit/plugin.wit`: the `Plugin` world, its imports as traits the
//! host implements (see [`super::state`]), and typed accessors for its exports.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub use self::ankh::plugin::types;
pub use self::exports::ankh::plugin::handler;
