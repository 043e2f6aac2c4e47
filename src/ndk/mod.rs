//! The NDK provider object layer: every NDKPI object over the PVRDMA device
//! (docs/reference/ndkpi.md §1, §2, §5; pvrdma.md §1 "NDK → PVRDMA mapping").
//!
//! One file per object ([`adapter`], [`pd`], [`cq`], [`mr`], [`mw`], [`qp`], [`srq`],
//! [`connector`], [`listener`], [`shared_endpoint`]), each safe code over the object
//! framework ([`object`]: allocation, header, memory and close counts, create/request
//! hand-offs) and the hardware seam ([`hw`]). [`dispatch`] holds the ten dispatch tables and
//! every `extern "system"` entry point and consumer-callback call; [`completion`] maps CQEs
//! to NDK_RESULTs; [`error`] is the one error type and its NTSTATUS mapping; [`qp1`] is
//! the adapter's GSI QP carrying the connection manager's MADs;
//! [`pvrdma_hw`] implements the seam over `crate::pvrdma` (commands, rings, doorbells,
//! events).
//!
//! Entry points for the NDIS glue: [`NdkDevice::new`] at device start (with
//! [`pvrdma_hw::PvrdmaHardware::new`] and `attach`), [`NdkDevice::open_adapter`] from
//! OpenNDKAdapterHandler, [`dispatch::close_adapter`] from CloseNDKAdapterHandler. Device
//! events reach each CQ and SRQ through the handler the hardware bound to it
//! ([`Hardware::bind_cq`], [`Hardware::bind_srq`]), and DEVICE_FATAL through
//! [`NdkDevice::device_fatal`].
//!
//! Connection management: [`cm_engine`] joins the sans-IO CM (`crate::cm`) to QP1, the GID
//! table and the OS's address resolver; [`NdkDevice::start_connections`] starts it (without
//! it the connection creates answer STATUS_NOT_IMPLEMENTED). Connectors mark their QP
//! connected at RTS; [`set_qp_connected`] remains for tests that wire QPs by hand.

pub mod adapter;
pub mod cm_engine;
pub mod completion;
pub mod conn_stats;
pub mod connector;
pub mod consumer_array;
pub mod cq;
pub mod dispatch;
pub mod error;
pub mod hw;
pub mod listener;
pub mod mr;
pub mod mw;
pub mod object;
pub mod pd;
pub mod pvrdma_hw;
pub mod qp;
pub mod qp1;
pub(crate) mod qp_table;
pub mod shared_endpoint;
pub mod srq;
pub mod traffic;

pub use adapter::{NdkDevice, negotiate_version};
pub use error::{HwError, NdkError};
pub use hw::{Hardware, HwCaps};
pub use qp::Qp;

/// Marks a QP connected (initiator requests accepted) or not, as a connector does at RTS;
/// for tests that wire QPs without the connection manager: below the NDK layer (mock
/// hardware, the MODIFY_QP and miniport tests, the fuzzing consumer) or where the model
/// cannot carry QP1's MADs (the unhooked instruction-count harness). Not for consumers.
///
/// # Safety
/// `qp` was returned by this provider's NdkCreateQp(WithSrq) and is not closed.
#[doc(hidden)]
pub unsafe fn set_qp_connected(qp: *mut crate::ndkpi::NDK_QP, connected: bool) {
    // SAFETY: caller contract.
    if let Some(q) = unsafe { object::ObjRef::<Qp>::borrow(qp) } {
        q.set_connected(connected);
    }
}
