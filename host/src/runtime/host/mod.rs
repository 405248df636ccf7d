//! What a guest may import: the host side of each WIT interface, one file each, working on
//! the store data of [`crate::runtime::sandbox::store`].

pub(crate) mod grants;
pub(crate) mod head;
pub mod http;
pub(crate) mod io_error;
pub(crate) mod kv;
pub(crate) mod legacy;
pub(crate) mod log;
pub(crate) mod outbound;
pub(crate) mod stdio;
pub(crate) mod v02;
pub mod websocket;

/// `types` holds only types: there is nothing to implement.
impl crate::runtime::bindings::ankh::plugin::types::Host
    for crate::runtime::sandbox::store::HostState
{
}
