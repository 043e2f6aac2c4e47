//! NDIS_NDK_CAPABILITIES from the device caps (ndkpi.md §6.4). The per-consumer part is the
//! NDK_ADAPTER_INFO that NdkQueryAdapterInfo returns (`ndk::adapter::adapter_info`, the one
//! derivation); the adapter-wide counts come from the same caps.
//!
//! [`NdisBlock`] holds every structure InitializeEx hands NDIS a pointer to that NDIS may
//! keep: the capabilities, the NDK_ADAPTER_INFO they point at, and the power-management
//! capabilities of the general attributes. Whether NDIS copies them is unconfirmed
//! (ndkpi.md Appendix C), so they live in one heap block for the adapter's life, never on
//! InitializeEx's stack (the emulated run poisons that stack after InitializeEx returns and
//! reads the capabilities through NDIS's pointer again).
#![deny(unsafe_code)]

use alloc::boxed::Box;

use super::abi::*;
use crate::ndk::adapter::adapter_info;
use crate::ndkpi::{NDK_ADAPTER_INFO, NDK_VERSION};
use crate::os::alloc::try_box;
use crate::pvrdma::dsr::Caps;

/// See the module docs.
pub struct NdisBlock {
    info: NDK_ADAPTER_INFO,
    caps: NDIS_NDK_CAPABILITIES,
    pm: NDIS_PM_CAPABILITIES,
}

// SAFETY: the only pointer inside is `caps.NdkInfo`, to `info` in the same immutable heap
// block; nothing writes the block after `new`, so sharing it across threads is sharing
// plain data.
#[allow(unsafe_code)]
unsafe impl Send for NdisBlock {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for NdisBlock {}

impl NdisBlock {
    /// The block for a device with `caps` (as the verbs honour them).
    ///
    /// # Errors
    /// `None` when the allocation fails.
    pub fn new(caps: &Caps) -> Option<Box<NdisBlock>> {
        let info = adapter_info(caps, CAPS_VERSION);
        let mut b = try_box(NdisBlock {
            info,
            caps: ndk_capabilities(caps, &info),
            pm: pm_capabilities(),
        })
        .ok()?
        .into_inner();
        // The block is on the heap now: point the capabilities at its own NDK_ADAPTER_INFO.
        b.caps.NdkInfo = core::ptr::from_ref(&b.info).cast_mut();
        Some(b)
    }

    /// NDIS_NDK_CAPABILITIES.
    pub fn caps(&self) -> &NDIS_NDK_CAPABILITIES {
        &self.caps
    }

    /// The pointer NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES carries (NDIS only reads through it).
    pub fn caps_ptr(&self) -> *mut NDIS_NDK_CAPABILITIES {
        core::ptr::from_ref(&self.caps).cast_mut()
    }

    /// The general attributes' `PowerManagementCapabilitiesEx` (NDIS only reads through it).
    pub fn pm_ptr(&self) -> *mut NDIS_PM_CAPABILITIES {
        core::ptr::from_ref(&self.pm).cast_mut()
    }

    /// The NDK_ADAPTER_INFO the capabilities point at.
    pub fn info(&self) -> &NDK_ADAPTER_INFO {
        &self.info
    }
}

/// NDIS_PM_CAPABILITIES (REVISION_2): no wake-up of any kind, no protocol offload (the
/// function has no receive path to wake on). Mandatory for NDIS 6.20+ drivers
/// (Learn, NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES.PowerManagementCapabilitiesEx).
pub fn pm_capabilities() -> NDIS_PM_CAPABILITIES {
    NDIS_PM_CAPABILITIES {
        Header: NDIS_OBJECT_HEADER {
            Type: NDIS_OBJECT_TYPE_DEFAULT,
            Revision: NDIS_PM_CAPABILITIES_REVISION_2,
            Size: NDIS_SIZEOF_NDIS_PM_CAPABILITIES_REVISION_2,
        },
        MinMagicPacketWakeUp: NdisDeviceStateUnspecified,
        MinPatternWakeUp: NdisDeviceStateUnspecified,
        MinLinkChangeWakeUp: NdisDeviceStateUnspecified,
        ..NDIS_PM_CAPABILITIES::default()
    }
}

/// The version whose NDK_ADAPTER_INFO the capabilities carry: the highest this provider
/// opens (Project decision (a)).
pub const CAPS_VERSION: NDK_VERSION = NDK_VERSION { Major: 2, Minor: 1 };

/// Counters of NDIS_NDK_PERFORMANCE_COUNTERS this provider does not keep: none. Connect,
/// Accept, ConnectFailure, ConnectionError and ActiveConnection come from the connection
/// engine (`ndk::connect::conn_stats`), CQError from the CQs, the four RDMA traffic counters from the
/// QPs (`ndk::traffic`). The traffic counters see what this host posts and completes, not
/// the responder side of a READ or WRITE a peer aims at it (the device serves those alone,
/// and PVRDMA has no traffic counter to ask, pvrdma.md §8), nor ACKs. The mask has one bit
/// per counter, so a counter that is kept but partial cannot be marked: setting its bit
/// would hide the traffic that is counted (NDIS reports a marked counter as unsupported,
/// and Test-NetStack's RDMA stages read exactly these counters). docs/DEPLOY.md says which
/// workloads are affected.
pub const MISSING_COUNTER_MASK: u64 = 0;

/// The capabilities, `NdkInfo` pointing at `info` (which must live as long as the miniport
/// adapter: whether NDIS copies it is unconfirmed, Appendix C).
///
/// - MaxQpCount / MaxCqCount / MaxMrCount / MaxSrqCount / MaxPdCount: the device's handle
///   limits (`caps`, as the verbs honour them: `pvrdma::verbs::Verbs::caps`).
/// - MaxInboundReadLimit: `max_res_rd_atom`, the device-wide responder resources for
///   incoming reads; MaxOutboundReadLimit 0 (the device has no adapter-wide initiator
///   limit, only per QP, which `NdkInfo` carries).
/// - MaxMwCount 0: memory windows are not supported (pvrdma.md §1).
pub fn ndk_capabilities(caps: &Caps, info: &NDK_ADAPTER_INFO) -> NDIS_NDK_CAPABILITIES {
    NDIS_NDK_CAPABILITIES {
        Header: NDIS_OBJECT_HEADER {
            Type: NDIS_OBJECT_TYPE_DEFAULT,
            Revision: NDIS_NDK_CAPABILITIES_REVISION_1,
            Size: NDIS_SIZEOF_NDK_CAPABILITIES_REVISION_1,
        },
        Flags: 0,
        MaxQpCount: caps.max_qp,
        MaxCqCount: caps.max_cq,
        MaxMrCount: caps.max_mr,
        MaxPdCount: caps.max_pd,
        MaxInboundReadLimit: caps.max_res_rd_atom,
        MaxOutboundReadLimit: 0,
        MaxMwCount: 0,
        MaxSrqCount: caps.max_srq,
        MissingCounterMask: MISSING_COUNTER_MASK,
        NdkInfo: core::ptr::from_ref(info).cast_mut(),
    }
}

/// NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES for InitializeEx: `Enabled` is the state at that
/// moment (§6.5), reported even when disabled.
pub fn ndk_attributes(
    enabled: bool,
    caps: *mut NDIS_NDK_CAPABILITIES,
) -> NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES {
    NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES {
        Header: NDIS_OBJECT_HEADER {
            Type: NDIS_OBJECT_TYPE_MINIPORT_ADAPTER_NDK_ATTRIBUTES,
            Revision: NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES_REVISION_1,
            Size: NDIS_SIZEOF_MINIPORT_ADAPTER_NDK_ATTRIBUTES_REVISION_1,
        },
        Enabled: u8::from(enabled),
        NdkCapabilities: caps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_model_caps() {
        let caps = Caps::parse(&pvrdma_sim::dsr::Caps::default().emit([0; 6]));
        let info = adapter_info(&caps, CAPS_VERSION);
        let c = ndk_capabilities(&caps, &info);
        assert_eq!(
            (c.Header.Type, c.Header.Revision, c.Header.Size),
            (0x80, 1, 0x38)
        );
        assert_eq!(c.Flags, 0);
        assert_eq!(
            (c.MaxQpCount, c.MaxCqCount, c.MaxMrCount, c.MaxPdCount),
            (1024, 1024, 16384, 1024)
        );
        assert_eq!(
            (c.MaxInboundReadLimit, c.MaxOutboundReadLimit),
            (caps.max_res_rd_atom, 0)
        );
        assert_eq!((c.MaxMwCount, c.MaxSrqCount), (0, 1024));
        assert_eq!(c.MissingCounterMask, 0);
        assert!(core::ptr::eq(c.NdkInfo, &info));
        let a = ndk_attributes(false, core::ptr::null_mut());
        assert_eq!(
            (a.Header.Type, a.Header.Revision, a.Header.Size, a.Enabled),
            (0xB3, 1, 0x10, 0)
        );
    }

    #[test]
    fn the_block_points_into_itself_and_outlives_a_move() {
        let caps = Caps::parse(&pvrdma_sim::dsr::Caps::default().emit([0; 6]));
        let b = NdisBlock::new(&caps).unwrap();
        let info = core::ptr::from_ref(b.info());
        let moved = b;
        assert!(core::ptr::eq(moved.caps().NdkInfo, info));
        assert!(core::ptr::eq(moved.caps_ptr(), moved.caps()));
        let pm = pm_capabilities();
        assert_eq!(
            (pm.Header.Type, pm.Header.Revision, pm.Header.Size),
            (0x80, 2, 0x3C)
        );
        assert_eq!(
            (pm.MinMagicPacketWakeUp, pm.Flags, pm.SupportedWakeUpEvents),
            (0, 0, 0)
        );
    }
}
