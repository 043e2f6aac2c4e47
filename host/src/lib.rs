//! Host (Linux, std) test infrastructure for `pvrdma-ndk`, kept out of the driver crate: the
//! DPC executor, timers and clocks, and the platforms the tests, examples and benches run the
//! driver on ([`HostPlatform`] for the PVRDMA function, [`HostNicPlatform`] for a network
//! function). The device-specific parts (BAR1, DMA, doorbell forwarding, interrupts) come from
//! the harness that joins the driver to the device model (tests/common, examples/perfkit).
//!
//! `platform.rs` is also compiled into the driver's own unit tests (`pvrdma_ndk::os` under
//! `cfg(test)`), which read crate-private items and so cannot link this crate; it names the
//! OS seam as `crate::os`, which is the driver's `os` module in both builds.
// Linux test infrastructure: the Windows-target checks of the workspace find it empty.
#![cfg(not(target_os = "windows"))]
// A poisoned std mutex in test infrastructure is a test failure: it may unwrap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pvrdma_ndk::os;

mod platform;

pub use os::sync::{SPIN_LOCKS_COUNTED, held_spin_locks};
pub use platform::*;
