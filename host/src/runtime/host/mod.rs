//! What a guest may import: the host side of each WIT interface, one file each, working on
//! the store data of [`crate::runtime::sandbox::store`].

pub mod grants;
pub mod http;
pub mod io_error;
pub mod kv;
pub mod legacy;
pub mod log;
pub mod outbound;
pub mod stdio;
pub mod websocket;

/// `types` holds only types: there is nothing to implement.
impl crate::runtime::bindings::ankh::plugin::types::Host
    for crate::runtime::sandbox::store::HostState
{
}
