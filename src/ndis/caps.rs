//! NDIS_NDK_CAPABILITIES from the device caps (ndkpi.md §6.4). The per-consumer part is the
//! NDK_ADAPTER_INFO that NdkQueryAdapterInfo returns (`ndk::adapter::adapter_info`, the one
//! derivation); the adapter-wide counts come from the same caps.
#![deny(unsafe_code)]

use super::abi::*;
use crate::ndkpi::{NDK_ADAPTER_INFO, NDK_VERSION};
use crate::pvrdma::dsr::Caps;

/// The version whose NDK_ADAPTER_INFO the capabilities carry: the highest this provider
/// opens (Project decision (a)).
pub const CAPS_VERSION: NDK_VERSION = NDK_VERSION { Major: 2, Minor: 1 };

/// Counters of NDIS_NDK_PERFORMANCE_COUNTERS this provider does not keep: none. Connect,
/// Accept, ConnectFailure and ConnectionError are kept and are 0 until the connection
/// manager exists (no NDK connection can be made before), ActiveConnection counts connected
/// QPs, CQError and the RDMA traffic counters are counted (`counters.rs`).
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
    use crate::ndk::adapter::adapter_info;

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
}
