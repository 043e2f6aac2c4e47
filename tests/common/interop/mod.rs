//! NDK-side implementations of the protocols of Linux's RDMA tools (rping, ucmatose,
//! perftest), so a real Linux peer can be either end of each tool, and the rig that joins a
//! Linux guest to the kit's hosts. Each protocol drives the provider only through the
//! dispatch tables, as a kernel consumer would.
#![allow(dead_code)]

pub mod agent;
pub mod cmatose;
pub mod perftest;
pub mod rig;
pub mod rping;

use pvrdma_ndk::ndkpi::NDK_RESULT;

use super::ndk::{Cluster, Cq};

/// Waits for the next completion on `cq` (one result, no settling: a real peer keeps the
/// fabric busy).
pub fn next_result(c: &Cluster, cq: &Cq, what: &str) -> NDK_RESULT {
    let mut got = None;
    c.wait_for(what, || {
        got = cq.results(1).pop();
        got.is_some()
    });
    got.unwrap()
}
