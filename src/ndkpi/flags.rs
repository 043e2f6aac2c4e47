//! `bitflags` views of the NDKPI flag words for the provider's own use (ndkpi.md §4.1–4.3),
//! each bit defined from the C constant in [`super::consts`].
//!
//! Multi-bit C values are kept as they are: `ALLOW_REMOTE_WRITE` contains the local-write
//! bit in both the op and MR flags, so `contains(ALLOW_REMOTE_WRITE)` implies local write.

use bitflags::bitflags;

use super::consts::*;

bitflags! {
    /// `NDK_OP_FLAG_*`: the `Flags` of work requests (§4.1).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct OpFlags: u32 {
        const SILENT_SUCCESS = NDK_OP_FLAG_SILENT_SUCCESS;
        const READ_FENCE = NDK_OP_FLAG_READ_FENCE;
        const SEND_AND_SOLICIT_EVENT = NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT;
        const ALLOW_REMOTE_READ = NDK_OP_FLAG_ALLOW_REMOTE_READ;
        const ALLOW_LOCAL_WRITE = NDK_OP_FLAG_ALLOW_LOCAL_WRITE;
        /// 0x30: includes ALLOW_LOCAL_WRITE.
        const ALLOW_REMOTE_WRITE = NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
        const INLINE = NDK_OP_FLAG_INLINE;
        const RDMA_READ_SINK = NDK_OP_FLAG_RDMA_READ_SINK;
        const RDMA_READ_LOCAL_INVALIDATE = NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE;
        const DEFER = NDK_OP_FLAG_DEFER;
    }
}

bitflags! {
    /// `NDK_MR_FLAG_*`: the `Flags` of NdkRegisterMr (§4.2). `NDK_MR_FLAG_ALLOW_LOCAL_READ`
    /// is 0 (always granted), so it has no bit here: `MrFlags::empty()` is local read only.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct MrFlags: u32 {
        const ALLOW_LOCAL_WRITE = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;
        const ALLOW_REMOTE_READ = NDK_MR_FLAG_ALLOW_REMOTE_READ;
        /// 0x5: includes ALLOW_LOCAL_WRITE.
        const ALLOW_REMOTE_WRITE = NDK_MR_FLAG_ALLOW_REMOTE_WRITE;
        const RDMA_READ_SINK = NDK_MR_FLAG_RDMA_READ_SINK;
    }
}

bitflags! {
    /// `NDK_ADAPTER_FLAG_*` our provider may advertise in `NDK_ADAPTER_INFO.AdapterFlags`
    /// (§4.3). RDMA_READ_LOCAL_INVALIDATE_SUPPORTED (0x10) is deliberately absent until the
    /// matching op-flag value is confirmed (Project decision (b)).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct AdapterFlags: u32 {
        const IN_ORDER_DMA_SUPPORTED = NDK_ADAPTER_FLAG_IN_ORDER_DMA_SUPPORTED;
        const RDMA_READ_SINK_NOT_REQUIRED = NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED;
        const CQ_INTERRUPT_MODERATION_SUPPORTED =
            NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED;
        const MULTI_ENGINE_SUPPORTED = NDK_ADAPTER_FLAG_MULTI_ENGINE_SUPPORTED;
        const CQ_RESIZE_SUPPORTED = NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED;
        const LOOPBACK_CONNECTIONS_SUPPORTED = NDK_ADAPTER_FLAG_LOOPBACK_CONNECTIONS_SUPPORTED;
    }
}
