//! The NDK provider object layer: every NDKPI object over the PVRDMA device
//! (docs/reference/ndkpi.md §1, §2, §5; pvrdma.md §1 "NDK → PVRDMA mapping").
//!
//! The object core: one file per object ([`adapter`], [`pd`], [`cq`], [`mr`], [`mw`],
//! [`qp`], [`srq`]), each safe code over the object framework ([`object`]: allocation,
//! header, memory and close counts, create/request hand-offs) and the device's verbs
//! (`crate::pvrdma::verbs`); [`completion`] maps CQEs to NDK_RESULTs; [`error`] is the one
//! error type and its NTSTATUS mapping. Above the core: [`connect`], the connection side
//! (its engine, QP1, the connector, listener and shared endpoint), which the device holds
//! as an [`adapter::Connections`]; and [`dispatch`], the ten dispatch tables with every
//! `extern "system"` entry point, which implement each object's [`object::Dispatched`].
//! Neither is named by the core; consumer callbacks are called only from
//! `crate::ndkpi::upcall`.
//!
//! Entry points for the NDIS glue: [`NdkDevice::new`] at device start (over
//! `pvrdma::verbs::Verbs::new`), [`NdkDevice::open_adapter`] from OpenNDKAdapterHandler,
//! [`dispatch::close_adapter`] from CloseNDKAdapterHandler. Device events reach each CQ and
//! SRQ through the handler its creation routed to it (`Verbs::route_cq`, `route_srq`), and
//! DEVICE_FATAL through [`NdkDevice::device_fatal`].
//!
//! Connection management ([`connect`]): its engine joins the sans-IO CM (`crate::cm`) to
//! QP1, the GID table and the OS's address resolver; [`connect::start`] starts it (without
//! it the connection creates answer STATUS_NOT_IMPLEMENTED). Connectors mark their QP
//! connected at RTS; [`set_qp_connected`] remains for tests that wire QPs by hand.

pub mod adapter;
pub mod completion;
pub mod connect;
pub mod consumer_array;
pub mod cq;
pub mod dispatch;
pub mod error;
pub mod mr;
pub mod mw;
pub mod object;
pub mod pd;
pub mod qp;
pub(crate) mod qp_table;
pub mod srq;
pub mod traffic;

pub use adapter::{NdkDevice, negotiate_version};
pub use error::NdkError;
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
