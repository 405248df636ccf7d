//! What bounds a call: the data of every store, the caps on its memory and CPU, the limits of
//! one plugin in one place, the wall-clock watch of a call and every wait it bounds, the guest
//! timer, the clocks a guest reads, and how a call failed.

pub mod caps;
pub mod clocks;
pub mod exec;
pub mod failure;
pub mod guest_limits;
pub mod store;
pub mod timer;
pub mod waits;
pub mod watch;
