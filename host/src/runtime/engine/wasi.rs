//! The WASI a plugin's instances are given: clocks (coarsened unless its policy asks for
//! precise ones), random, captured stdout and stderr, and only what its policy grants besides:
//! environment variables, directories and outbound TCP addresses.
//!
//! **Directories are opened once**, when the policy is read, and every instance gets that
//! open directory, never its path again: a plugin that can write where another plugin's grant
//! lies cannot move that grant elsewhere (by replacing the directory with a symbolic link,
//! say) for the other plugin's next instances. A grant's path is walked without following
//! symbolic links when it is opened (see `engine::policy`).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use crate::runtime::engine::policy::Policy;
use crate::runtime::host::stdio::{GuestOutput, LogTags};
use crate::runtime::sandbox::clocks;
use crate::runtime::sandbox::guest_limits::GuestLimits;

/// The WASI context of a new instance of a plugin with `policy`, logging as `tags`.
pub(crate) fn context(policy: &Policy, limits: &GuestLimits, tags: &Arc<LogTags>) -> WasiCtx {
    let (monotonic, wall) = clocks::at_resolution(limits.clock_resolution);
    let mut builder = WasiCtxBuilder::new();
    builder
        .monotonic_clock(monotonic)
        .wall_clock(wall)
        .stdout(GuestOutput::stdout(tags.clone()))
        .stderr(GuestOutput::stderr(tags.clone()))
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .envs(&policy.env);
    for dir in &policy.dirs {
        let perms = if dir.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        // The directory opened when the policy was read, reopened through its descriptor:
        // whatever has happened to its path since.
        let opened = format!("/proc/self/fd/{}", dir.opened.as_raw_fd());
        if let Err(e) = builder.preopened_dir(&opened, &dir.guest, perms) {
            tracing::warn!(plugin = %tags.plugin, dir = %dir.host.display(), "cannot grant directory: {e}");
        }
    }
    // Outbound TCP only to the addresses the policy lists; none by default.
    let allowed: Arc<[std::net::SocketAddr]> = policy.network.clone().into();
    builder.allow_tcp(!allowed.is_empty());
    builder.socket_addr_check(move |addr, use_| {
        let ok = match use_ {
            SocketAddrUse::TcpConnect => allowed.contains(&addr),
            // The implicit bind of an outgoing connection (wildcard address, any port).
            SocketAddrUse::TcpBind => {
                !allowed.is_empty() && addr.ip().is_unspecified() && addr.port() == 0
            }
            _ => false,
        };
        Box::pin(async move { ok })
    });
    builder.build()
}
