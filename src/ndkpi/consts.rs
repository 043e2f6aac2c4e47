//! NDKPI enums and flag values (ndkpi.md §1.1, §3.4, §3.8, §4.1–4.4).
//!
//! C enums are `int`; they are `#[repr(transparent)]` newtypes over `i32` with the
//! enumerators as associated constants (and re-exported as module constants under the C
//! names), because a Rust `enum` holding a value C made up would be undefined behaviour.

use super::types::ULONG;

/// `NDK_OBJECT_TYPE` (§1.1).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NDK_OBJECT_TYPE(pub i32);

impl NDK_OBJECT_TYPE {
    pub const NdkObjectTypeUndefined: Self = Self(0);
    pub const NdkObjectTypeAdapter: Self = Self(1);
    pub const NdkObjectTypeQp: Self = Self(2);
    pub const NdkObjectTypeCq: Self = Self(3);
    pub const NdkObjectTypeMr: Self = Self(4);
    pub const NdkObjectTypeMw: Self = Self(5);
    pub const NdkObjectTypePd: Self = Self(6);
    pub const NdkObjectTypeSharedEndpoint: Self = Self(7);
    pub const NdkObjectTypeConnector: Self = Self(8);
    pub const NdkObjectTypeListener: Self = Self(9);
    pub const NdkObjectTypeSrq: Self = Self(10);
    /// "might change in future versions".
    pub const NdkObjectTypeMax: Self = Self(11);
}

pub const NdkObjectTypeUndefined: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeUndefined;
pub const NdkObjectTypeAdapter: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeAdapter;
pub const NdkObjectTypeQp: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeQp;
pub const NdkObjectTypeCq: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeCq;
pub const NdkObjectTypeMr: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeMr;
pub const NdkObjectTypeMw: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeMw;
pub const NdkObjectTypePd: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypePd;
pub const NdkObjectTypeSharedEndpoint: NDK_OBJECT_TYPE =
    NDK_OBJECT_TYPE::NdkObjectTypeSharedEndpoint;
pub const NdkObjectTypeConnector: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeConnector;
pub const NdkObjectTypeListener: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeListener;
pub const NdkObjectTypeSrq: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeSrq;
pub const NdkObjectTypeMax: NDK_OBJECT_TYPE = NDK_OBJECT_TYPE::NdkObjectTypeMax;

/// `NDK_OPERATION_TYPE` (§3.4): `NDK_RESULT_EX.Type`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NDK_OPERATION_TYPE(pub i32);

impl NDK_OPERATION_TYPE {
    pub const NdkOperationTypeReceive: Self = Self(0x1);
    /// Also the sender-side type of NdkSendAndInvalidate.
    pub const NdkOperationTypeSend: Self = Self(0x2);
    pub const NdkOperationTypeFastRegister: Self = Self(0x4);
    pub const NdkOperationTypeBind: Self = Self(0x8);
    pub const NdkOperationTypeInvalidate: Self = Self(0x10);
    pub const NdkOperationTypeRead: Self = Self(0x20);
    pub const NdkOperationTypeWrite: Self = Self(0x40);
    /// Receive side of a peer's NdkSendAndInvalidate (0x8001, not sign-extended).
    pub const NdkOperationTypeReceiveAndInvalidate: Self = Self(0x8001);
}

pub const NdkOperationTypeReceive: NDK_OPERATION_TYPE = NDK_OPERATION_TYPE::NdkOperationTypeReceive;
pub const NdkOperationTypeSend: NDK_OPERATION_TYPE = NDK_OPERATION_TYPE::NdkOperationTypeSend;
pub const NdkOperationTypeFastRegister: NDK_OPERATION_TYPE =
    NDK_OPERATION_TYPE::NdkOperationTypeFastRegister;
pub const NdkOperationTypeBind: NDK_OPERATION_TYPE = NDK_OPERATION_TYPE::NdkOperationTypeBind;
pub const NdkOperationTypeInvalidate: NDK_OPERATION_TYPE =
    NDK_OPERATION_TYPE::NdkOperationTypeInvalidate;
pub const NdkOperationTypeRead: NDK_OPERATION_TYPE = NDK_OPERATION_TYPE::NdkOperationTypeRead;
pub const NdkOperationTypeWrite: NDK_OPERATION_TYPE = NDK_OPERATION_TYPE::NdkOperationTypeWrite;
pub const NdkOperationTypeReceiveAndInvalidate: NDK_OPERATION_TYPE =
    NDK_OPERATION_TYPE::NdkOperationTypeReceiveAndInvalidate;

/// `NDK_RDMA_TECHNOLOGY` (§3.8): `NDK_ADAPTER_INFO.RdmaTechnology`; the same numbers as the
/// `*NetworkDirectTechnology` INF keyword (§6.7).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NDK_RDMA_TECHNOLOGY(pub i32);

impl NDK_RDMA_TECHNOLOGY {
    pub const NdkUndefined: Self = Self(0);
    pub const NdkiWarp: Self = Self(1);
    pub const NdkInfiniBand: Self = Self(2);
    pub const NdkRoCE: Self = Self(3);
    pub const NdkRoCEv2: Self = Self(4);
    pub const NdkMaxTechnology: Self = Self(5);
}

pub const NdkUndefined: NDK_RDMA_TECHNOLOGY = NDK_RDMA_TECHNOLOGY::NdkUndefined;
pub const NdkiWarp: NDK_RDMA_TECHNOLOGY = NDK_RDMA_TECHNOLOGY::NdkiWarp;
pub const NdkInfiniBand: NDK_RDMA_TECHNOLOGY = NDK_RDMA_TECHNOLOGY::NdkInfiniBand;
pub const NdkRoCE: NDK_RDMA_TECHNOLOGY = NDK_RDMA_TECHNOLOGY::NdkRoCE;
pub const NdkRoCEv2: NDK_RDMA_TECHNOLOGY = NDK_RDMA_TECHNOLOGY::NdkRoCEv2;
pub const NdkMaxTechnology: NDK_RDMA_TECHNOLOGY = NDK_RDMA_TECHNOLOGY::NdkMaxTechnology;

// §4.1 NDK_OP_FLAG_*: `Flags` of work requests.
pub const NDK_OP_FLAG_SILENT_SUCCESS: ULONG = 0x0000_0001;
pub const NDK_OP_FLAG_READ_FENCE: ULONG = 0x0000_0002;
pub const NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT: ULONG = 0x0000_0004;
pub const NDK_OP_FLAG_ALLOW_REMOTE_READ: ULONG = 0x0000_0008;
pub const NDK_OP_FLAG_ALLOW_LOCAL_WRITE: ULONG = 0x0000_0010;
/// Includes the local-write bit 0x10.
pub const NDK_OP_FLAG_ALLOW_REMOTE_WRITE: ULONG = 0x0000_0030;
pub const NDK_OP_FLAG_INLINE: ULONG = 0x0000_0040;
/// Value from the public ndkpi.h copy only (Project decision (b)).
pub const NDK_OP_FLAG_RDMA_READ_SINK: ULONG = 0x0000_0080;
/// Header value 0x100; the Learn page's 0x200 collides with DEFER (Appendix B #1).
pub const NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE: ULONG = 0x0000_0100;
pub const NDK_OP_FLAG_DEFER: ULONG = 0x0000_0200;

// §4.2 NDK_MR_FLAG_*: `Flags` of NdkRegisterMr.
/// Zero: local read is always granted, this "flag" sets no bit.
pub const NDK_MR_FLAG_ALLOW_LOCAL_READ: ULONG = 0x0000_0000;
pub const NDK_MR_FLAG_ALLOW_LOCAL_WRITE: ULONG = 0x0000_0001;
pub const NDK_MR_FLAG_ALLOW_REMOTE_READ: ULONG = 0x0000_0002;
/// Includes the local-write bit 0x1.
pub const NDK_MR_FLAG_ALLOW_REMOTE_WRITE: ULONG = 0x0000_0005;
pub const NDK_MR_FLAG_RDMA_READ_SINK: ULONG = 0x0000_0008;

// §4.3 NDK_ADAPTER_FLAG_*: `NDK_ADAPTER_INFO.AdapterFlags`.
pub const NDK_ADAPTER_FLAG_IN_ORDER_DMA_SUPPORTED: ULONG = 0x0000_0001;
pub const NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED: ULONG = 0x0000_0002;
pub const NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED: ULONG = 0x0000_0004;
pub const NDK_ADAPTER_FLAG_MULTI_ENGINE_SUPPORTED: ULONG = 0x0000_0008;
pub const NDK_ADAPTER_FLAG_RDMA_READ_LOCAL_INVALIDATE_SUPPORTED: ULONG = 0x0000_0010;
pub const NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED: ULONG = 0x0000_0100;
pub const NDK_ADAPTER_FLAG_LOOPBACK_CONNECTIONS_SUPPORTED: ULONG = 0x0001_0000;

// §4.4 NDK_CQ_NOTIFY_*: `Type` of NdkArmCq.
pub const NDK_CQ_NOTIFY_ERRORS: ULONG = 0;
pub const NDK_CQ_NOTIFY_ANY: ULONG = 1;
pub const NDK_CQ_NOTIFY_SOLICITED: ULONG = 2;
