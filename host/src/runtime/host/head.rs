//! `outgoing-response.body`, replaced for HEAD: a response to HEAD has no body, but it may
//! declare the length GET's would have (RFC 9110 §9.3.2), and frameworks do (axum keeps
//! `content-length` on HEAD and writes nothing). wasmtime-wasi-http holds the body to the
//! declared length, so finishing an empty one fails and the guest traps after its response
//! was set. Here, while a HEAD request is served, the body is made without that length; the
//! headers, `content-length` included, stay as the guest set them.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::HostOutgoingResponse as _;
use wasmtime_wasi_http::p2::body::HostOutgoingBody;
use wasmtime_wasi_http::p2::types::HostOutgoingResponse;

use crate::runtime::sandbox::store::HostState;

/// The version of wasi:http the linker has (wasmtime-wasi-http 48's).
const HTTP_VERSION: &str = "0.2.12";

/// Replaces `[method]outgoing-response.body` in a linker that already has wasi:http.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(&format!("wasi:http/types@{HTTP_VERSION}"))?;
    types.func_wrap(
        "[method]outgoing-response.body",
        |mut store: StoreContextMut<'_, HostState>,
         (response,): (Resource<HostOutgoingResponse>,)| {
            let state = store.data_mut();
            let again = Resource::<HostOutgoingResponse>::new_borrow(response.rep());
            // For HEAD, the body is made from no headers, so with no length to meet.
            let saved = match state.head_request {
                true => Some(std::mem::take(
                    &mut state.table().get_mut(&response)?.headers,
                )),
                false => None,
            };
            let body: Result<Resource<HostOutgoingBody>, ()> = state.http().body(response)?;
            if let Some(headers) = saved {
                state.table().get_mut(&again)?.headers = headers;
            }
            Ok((body,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
