//! Random NDK call sequences with random arguments through the dispatch tables.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvrdma_ndk_fuzz::consumer::{Call, run_calls};

fuzz_target!(|calls: Vec<Call>| run_calls(&calls));
