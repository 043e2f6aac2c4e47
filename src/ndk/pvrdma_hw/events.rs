//! The device's events wired to the NDK objects. The device reads them off its rings in its
//! DPCs and finds the target with one lookup in its own handler table; the handlers here hold
//! the NDK object itself, so nothing else is looked up or locked on the way:
//! - a CQ's handler is its [`CqLink`], registered by [`bind_cq`] (CQNE, CQ_ERR);
//! - an SRQ's is its [`SrqLink`], registered by [`bind_srq`] (SRQ_LIMIT_REACHED, SRQ_ERR);
//! - device-wide events go to the NDK device ([`DeviceHook`]), which fans DEVICE_FATAL out to
//!   its objects.
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};

use super::hw_error;
use crate::ndk::adapter::NdkDevice;
use crate::ndk::cq::{Cq, CqLink};
use crate::ndk::error::HwError;
use crate::ndk::object::ObjRef;
use crate::ndk::srq::Srq;
use crate::os::Processor;
use crate::os::alloc::try_arc;
use crate::pvrdma::device::{CqEvents, Device, DeviceEvents, SrqEvents};
use crate::pvrdma::eqe::EqeType;

/// Registers `cq`'s [`CqLink`] as the device's handler of its handle: a CQNE reaches the NDK
/// CQ with that one lookup, on the CQ's DPC targeted at the first processor of its
/// GROUP_AFFINITY if it has one (NdkCreateCq `Affinity`), else on the CQ-notification DPC.
pub(super) fn bind_cq(dev: &Device, cq: &ObjRef<Cq>) -> Result<(), HwError> {
    let link: Arc<dyn CqEvents> = try_arc(CqLink::new(cq)).map_err(|_| HwError::NoResources)?;
    let target = cq
        .affinity()
        .filter(|a| a.Mask != 0)
        .map_or(Processor::Current, |a| {
            Processor::from_affinity(a.Group, a.Mask as u64)
        });
    dev.register_cq_on(cq.handle(), link, target)
        .map_err(hw_error)
}

/// Registers `srq`'s [`SrqLink`] as the device's handler of its handle.
pub(super) fn bind_srq(dev: &Device, srq: &ObjRef<Srq>) -> Result<(), HwError> {
    let link: Arc<dyn SrqEvents> = try_arc(SrqLink::new(srq)).map_err(|_| HwError::NoResources)?;
    dev.register_srq(srq.handle(), link).map_err(hw_error)
}

/// The device's handler of one NDK SRQ: an SRQ event the device's DPC found under the SRQ's
/// handle goes straight to the SRQ (no second lookup, no lock).
pub struct SrqLink(ObjRef<Srq>);

impl SrqLink {
    /// The handler of `srq`; it keeps the SRQ's memory alive until the device drops it
    /// (unregistered at teardown, by `destroy_srq`).
    pub fn new(srq: &ObjRef<Srq>) -> Self {
        SrqLink(srq.clone())
    }
}

impl SrqEvents for SrqLink {
    fn event(&self, kind: EqeType) {
        match kind {
            EqeType::SrqLimitReached => self.0.limit_event(),
            EqeType::SrqErr => self.0.error_event(),
            _ => {}
        }
    }
}

/// Device-wide events: DEVICE_FATAL fails every CQ and SRQ of the NDK device; port events
/// are not mapped yet.
pub(super) struct DeviceHook {
    pub(super) ndk: Weak<NdkDevice>,
}

impl DeviceEvents for DeviceHook {
    fn port_event(&self, _kind: EqeType, _port: u32) {}
    fn device_fatal(&self) {
        if let Some(d) = self.ndk.upgrade() {
            d.device_fatal();
        }
    }
}
