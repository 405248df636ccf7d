//! `wasi:io/error`'s `to-debug-string`, replaced: wasmtime-wasi formats a host error with
//! `{:?}`, which carries its backtrace (host file paths and all) whenever `RUST_BACKTRACE`
//! or `RUST_LIB_BACKTRACE` is set, and a guest passes the text on (into a 502 body, say).
//! Here the error is formatted with its causes and without a backtrace.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::IoError;

use crate::runtime::sandbox::store::HostState;
use crate::runtime::sandbox::waits::WASI_VERSION;

/// Replaces `error.to-debug-string` in a linker that already has WASI.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut error = linker.instance(&format!("wasi:io/error@{WASI_VERSION}"))?;
    error.func_wrap(
        "[method]error.to-debug-string",
        |mut store: StoreContextMut<'_, HostState>, (err,): (Resource<IoError>,)| {
            let err = store.data_mut().table().get(&err)?;
            Ok((format!("{err:#}"),))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
