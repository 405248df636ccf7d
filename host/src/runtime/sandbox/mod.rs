//! What bounds a call: the data of every store, the caps on its memory and CPU, the limits of
//! one plugin in one place, the wall-clock watch of a call and every wait it bounds, the guest
//! timer, the clocks a guest reads, and how a call failed.

pub(crate) mod caps;
pub(crate) mod clocks;
pub mod exec;
pub(crate) mod failure;
pub(crate) mod guest_limits;
pub(crate) mod store;
pub(crate) mod timer;
pub(crate) mod waits;
pub(crate) mod watch;
