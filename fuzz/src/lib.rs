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
