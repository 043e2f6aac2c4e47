//! Device-written memory against the real provider: the DSR caps and command responses at
//! bring-up, then CQ rings, CQEs and the device's event rings under a consumer's calls.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvrdma_ndk_fuzz::consumer::{DeviceInput, run_device};

fuzz_target!(|input: DeviceInput| run_device(&input));
