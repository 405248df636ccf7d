//! The commands of the `ankh` binary besides `serve` (which is the library's
//! [`ankh::server`]): their flags, and the tools they run. Nothing here is part of the library.

pub(crate) mod build;
pub(crate) mod check;
pub(crate) mod cli;
pub(crate) mod dev;
pub(crate) mod log_writer;
pub(crate) mod new;
#[cfg(target_os = "linux")]
pub(crate) mod processes;
