//! Fuzz targets for the provider, driven the way a consumer drives it: through the dispatch
//! tables with `extern "system"` callbacks, against the device model (`pvrdma-sim`), on the
//! test kit of `tests/common` (shared through `#[path]`, as examples and benches share it).
//!
//! - [`consumer`]: random sequences of NDK calls with random arguments (target
//!   `consumer_calls`), and the same sequences interleaved with writes into device-owned
//!   memory (target `device_memory`).
//! - [`bringup`]: the device-written memory of bring-up and of the command channel: the DSR
//!   caps the device reports and command responses, corrupted before the driver reads them
//!   (target `device_memory`, its first phase).
//!
//! Every invariant is an `assert!`: libFuzzer reports a panic as a crash.

#[path = "../../tests/common/mod.rs"]
#[allow(clippy::all, unused_imports)]
pub mod common;

pub mod bringup;
pub mod consumer;
pub mod seed;
pub mod status;

/// The device model's capabilities for the fuzz targets: the default device with object
/// limits a little above what an input can create (`consumer::MAX_OBJECTS` of each kind),
/// and queue depths of 1,024 WQEs and 4,096 CQEs. The driver sizes its handle tables and
/// the model its own from these, so a world is smaller to build and to search; depths above
/// the limits are still asked for (and refused), and a bring-up input can still write any
/// capability value.
pub fn fuzz_caps(c: &mut pvrdma_sim::Caps) {
    c.max_qp = 32;
    c.max_cq = 32;
    c.max_pd = 32;
    c.max_srq = 32;
    c.max_ah = 32;
    c.max_mr = 64;
    c.max_qp_wr = 1024;
    c.max_srq_wr = 1024;
    c.max_cqe = 4096;
}
