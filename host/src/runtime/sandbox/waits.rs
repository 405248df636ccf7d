//! Every blocking wait of a guest, bounded by its call's [`Watch`](crate::runtime::sandbox::watch::Watch).
//!
//! A guest blocks in exactly these WASI functions: `wasi:io/poll.poll`, `pollable.block`, and
//! the `blocking-*` methods of `wasi:io/streams` (a sleep is a clock pollable plus `block` or
//! `poll`; a blocking socket read is `blocking-read`). This module replaces them with
//! asynchronous host functions: the same futures wasmtime-wasi waits on, raced against
//! [`Watch::stopped`](crate::runtime::sandbox::watch::Watch::stopped). While one waits, the call's fiber is
//! suspended and the worker thread runs other calls; when the call's wall-clock deadline
//! passes or its client disconnects, the wait ends at once with a trap. The clock pollables a guest waits on come from ankh's own timer
//! ([`crate::runtime::sandbox::timer`]), which wakes on time. Everything else of WASI is untouched.

use std::future::Future;

use std::time::Duration;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as _;
use wasmtime_wasi::p2::bindings::io::poll::{Host as _, HostPollable as _};
use wasmtime_wasi::p2::bindings::io::streams::{HostInputStream as _, HostOutputStream as _};
use wasmtime_wasi::p2::bindings::sync::io::streams::{Host as _, StreamError as WitStreamError};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamResult};

use crate::runtime::sandbox::store::HostState;
use crate::runtime::sandbox::timer;
use crate::runtime::sandbox::watch::{Stopped, race};

/// The version of the WASI interfaces whose functions are replaced: the one wasmtime-wasi
/// links (guests importing an older 0.2.x are matched to it). Unit tests check it.
pub(crate) const WASI_VERSION: &str = "0.2.12";

/// The interface whose two `subscribe-*` functions are replaced, at the version wasmtime-wasi
/// links (guests importing an older 0.2.x are matched to it). A unit test checks that this
/// names an interface the linker already has.
pub(crate) const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces `subscribe-duration` and `subscribe-instant` in a linker that already has WASI.
pub(crate) fn add_clocks_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store: StoreContextMut<'_, HostState>, (ns,): (u64,)| {
            let table = store.data_mut().table();
            Ok((timer::subscribe(table, Duration::from_nanos(ns))?,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: StoreContextMut<'_, HostState>, (when,): (u64,)| {
            let state = store.data_mut();
            let now = wasmtime_wasi::clocks::WasiClocksView::clocks(state).now()?;
            let table = state.table();
            Ok((timer::subscribe(
                table,
                Duration::from_nanos(when.saturating_sub(now)),
            )?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Runs one wait of the guest to completion, unless its call is stopped first: then the wait
/// ends with a trap that says why. A wait that is not ready at once suspends the call (its
/// fiber), freeing the worker thread for other calls until the wait is over.
async fn bounded<'a, T, F>(
    state: &'a mut HostState,
    wait: impl FnOnce(&'a mut wasmtime::component::ResourceTable) -> F,
) -> wasmtime::Result<T>
where
    F: Future<Output = T> + Send + 'a,
{
    let (table, watch) = state.table_and_watch();
    let stop = watch.stopped();
    let outcome = race(wait(table), stop).await;
    outcome.map_err(|reason| {
        watch.record(reason);
        wasmtime::Error::new(Stopped(reason))
    })
}

/// A wait that may have suspended the call: the worker ran other calls meanwhile, so the CPU
/// budget's clock starts again from now (see [`crate::runtime::sandbox::caps::CpuBudget::resumed`]), and the
/// epoch check is pushed a tick ahead: the epoch moved while the call waited, and a call just
/// resumed has nothing to yield for.
fn resumed(store: &mut Store<'_>) {
    store.data_mut().budget.resumed();
    store.set_epoch_deadline(1);
}

/// A stream operation's result as the guest sees it: a `stream-error` value, or a trap.
fn to_wit<T>(
    state: &mut HostState,
    result: StreamResult<T>,
) -> wasmtime::Result<Result<T, WitStreamError>> {
    match result {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(state.table().convert_stream_error(e)?)),
    }
}

type Store<'a> = StoreContextMut<'a, HostState>;

/// Replaces the waiting functions of `wasi:io` in a linker that already has WASI.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(&format!("wasi:io/poll@{WASI_VERSION}"))?;
    poll.func_wrap_async(
        "poll",
        |mut store: Store<'_>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            Box::new(async move {
                let ready = bounded(store.data_mut(), |t| t.poll(pollables)).await;
                resumed(&mut store);
                Ok((ready??,))
            })
        },
    )?;
    poll.func_wrap_async(
        "[method]pollable.block",
        |mut store: Store<'_>, (pollable,): (Resource<DynPollable>,)| {
            Box::new(async move {
                let done = bounded(store.data_mut(), |t| t.block(pollable)).await;
                resumed(&mut store);
                done??;
                Ok(())
            })
        },
    )?;

    let mut streams = linker.instance(&format!("wasi:io/streams@{WASI_VERSION}"))?;
    /// One blocking stream method: its wait bounded, its result as the guest sees it.
    macro_rules! stream_wait {
        ($name:literal, |$t:ident, ($($arg:ident: $ty:ty),*)| $wait:expr) => {
            streams.func_wrap_async(
                $name,
                |mut store: Store<'_>, ($($arg,)*): ($($ty,)*)| {
                    Box::new(async move {
                        let result = bounded(store.data_mut(), |$t| $wait).await;
                        resumed(&mut store);
                        Ok((to_wit(store.data_mut(), result?)?,))
                    })
                },
            )?;
        };
    }
    stream_wait!("[method]input-stream.blocking-read", |t, (stream: Resource<DynInputStream>, len: u64)| t.blocking_read(stream, len));
    stream_wait!("[method]input-stream.blocking-skip", |t, (stream: Resource<DynInputStream>, len: u64)| t.blocking_skip(stream, len));
    stream_wait!("[method]output-stream.blocking-write-and-flush", |t, (stream: Resource<DynOutputStream>, bytes: Vec<u8>)| t.blocking_write_and_flush(stream, bytes));
    stream_wait!("[method]output-stream.blocking-write-zeroes-and-flush", |t, (stream: Resource<DynOutputStream>, len: u64)| t.blocking_write_zeroes_and_flush(stream, len));
    stream_wait!("[method]output-stream.blocking-flush", |t, (stream: Resource<DynOutputStream>)| t.blocking_flush(stream));
    stream_wait!("[method]output-stream.blocking-splice", |t, (dst: Resource<DynOutputStream>, src: Resource<DynInputStream>, len: u64)| t.blocking_splice(dst, src, len));
    linker.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replaced_functions_are_the_ones_wasi_links() {
        // Without shadowing, defining a function the linker already has is an error: so each
        // of these fails exactly when the name is one wasmtime-wasi added.
        let engine = wasmtime::Engine::default();
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        let cases = [
            ("poll", "poll"),
            ("poll", "[method]pollable.block"),
            ("streams", "[method]input-stream.blocking-read"),
            ("streams", "[method]input-stream.blocking-skip"),
            ("streams", "[method]output-stream.blocking-write-and-flush"),
            (
                "streams",
                "[method]output-stream.blocking-write-zeroes-and-flush",
            ),
            ("streams", "[method]output-stream.blocking-flush"),
            ("streams", "[method]output-stream.blocking-splice"),
        ];
        for (interface, func) in cases {
            let mut instance = linker
                .instance(&format!("wasi:io/{interface}@{WASI_VERSION}"))
                .unwrap();
            let redefined = instance.func_wrap(func, |_: Store<'_>, (): ()| Ok(()));
            assert!(
                redefined.is_err(),
                "wasi:io/{interface}@{WASI_VERSION}#{func} is not linked by WASI"
            );
        }
        add_to_linker(&mut linker).unwrap();
    }

    #[test]
    fn the_replaced_interface_is_the_one_wasi_links() {
        // Without shadowing, defining a function the linker already has is an error: so this
        // fails exactly when MONOTONIC_CLOCK names the interface wasmtime-wasi added.
        let engine = wasmtime::Engine::default();
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        let mut clock = linker.instance(MONOTONIC_CLOCK).unwrap();
        let redefined = clock.func_wrap(
            "subscribe-duration",
            |_: StoreContextMut<'_, HostState>, (_,): (u64,)| -> wasmtime::Result<(u64,)> {
                Ok((0,))
            },
        );
        assert!(
            redefined.is_err(),
            "{MONOTONIC_CLOCK} is not linked by WASI"
        );
        add_clocks_to_linker(&mut linker).unwrap();
    }
}
