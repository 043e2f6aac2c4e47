//! Software model of the VMware PVRDMA paravirtual RDMA device and of a simulated RoCEv2
//! fabric joining several such devices.
//!
//! Written from `shared/reference/pvrdma.md`, independently of the driver crate: the model
//! never imports the driver's hardware types, so a misreading of the reference on either side
//! shows up as a failing test instead of agreeing with itself.
#![deny(unsafe_code)]

pub mod fabric;
pub mod pcap;
pub mod rng;
pub mod wire;
