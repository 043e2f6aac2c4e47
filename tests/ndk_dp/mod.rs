//! Shared wiring of the seed-function and data-path tests (`ndk_seed`, `ndk_datapath`): a
//! connected QP pair on two hosts, result tuples, raw create/close through the dispatch
//! tables for tests that look at the out pointer or a create's callbacks.
#![allow(dead_code)]

use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pvrdma_ndk::ndkpi::*;

use crate::common::ndk::{Cluster, Cq, CreateCtx, Notes, Pd, Qp, QpSpec, on_create, on_notify};

/// QPContext of host 0's QP.
pub const QPC_A: usize = 0xA0A0;
/// QPContext of host 1's QP.
pub const QPC_B: usize = 0xB0B0;

/// Local read/write.
pub const LOCAL: u32 = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;
/// Local plus remote read and write.
pub const REMOTE: u32 = LOCAL | NDK_MR_FLAG_ALLOW_REMOTE_READ | NDK_MR_FLAG_ALLOW_REMOTE_WRITE;

/// PD, CQ and QP on each of hosts 0 (`a`) and 1 (`b`); one CQ per host for both queues.
pub struct Pair {
    pub pd_a: Pd,
    pub pd_b: Pd,
    pub cq_a: Cq,
    pub cq_b: Cq,
    pub qa: Qp,
    pub qb: Qp,
}

impl Pair {
    /// Default sizes ([`QpSpec::new`]), connected.
    pub fn new(c: &Cluster) -> Pair {
        Self::with(c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), true)
    }

    /// With explicit specs, connected or not.
    pub fn with(c: &Cluster, sa: QpSpec, sb: QpSpec, connected: bool) -> Pair {
        let pd_a = c.adapter(0).create_pd().expect("PD a");
        let pd_b = c.adapter(1).create_pd().expect("PD b");
        let cq_a = c.adapter(0).create_cq(256, None).expect("CQ a");
        let cq_b = c.adapter(1).create_cq(256, None).expect("CQ b");
        let qa = pd_a.create_qp(&cq_a, &cq_a, sa).expect("QP a");
        let qb = pd_b.create_qp(&cq_b, &cq_b, sb).expect("QP b");
        if connected {
            c.connect(&qa, &qb);
        }
        Pair {
            pd_a,
            pd_b,
            cq_a,
            cq_b,
            qa,
            qb,
        }
    }

    /// Closes everything (the MRs on the PDs must be closed already).
    pub fn close(self) {
        self.qa.close();
        self.qb.close();
        self.cq_a.close();
        self.cq_b.close();
        self.pd_a.close();
        self.pd_b.close();
    }
}

/// (Status, BytesTransferred, QPContext, RequestContext).
pub fn res(r: &NDK_RESULT) -> (NTSTATUS, u32, usize, usize) {
    (
        r.Status,
        r.BytesTransferred,
        r.QPContext as usize,
        r.RequestContext as usize,
    )
}

/// (Status, QPContext, RequestContext, Type) of an Ex result.
pub fn res_ex(r: &NDK_RESULT_EX) -> (NTSTATUS, usize, usize, NDK_OPERATION_TYPE) {
    (
        r.Status,
        r.QPContext as usize,
        r.RequestContext as usize,
        r.Type,
    )
}

/// An out-pointer value the provider must never write on the PENDING path.
pub const SENTINEL: usize = 0x5E17_0E17_0000;

/// NdkCreateCq straight through the dispatch table with `*ppNdkCq` preset to [`SENTINEL`]:
/// (inline status, the out pointer after the call, completion context, notes).
pub fn create_cq_sentinel(
    c: &Cluster,
    host: usize,
    depth: u32,
) -> (NTSTATUS, usize, Arc<CreateCtx>, Arc<Notes>) {
    let a = c.adapter(host).ptr;
    let ctx = Arc::new(CreateCtx::default());
    let notes = Arc::new(Notes::default());
    let mut out = SENTINEL as *mut NDK_CQ;
    // SAFETY: a live adapter of this cluster.
    let d = unsafe { (*a).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let d = unsafe { &*d };
    // SAFETY: live adapter; both contexts are kept alive by the returned Arcs until the
    // test closes the CQ.
    let st = unsafe {
        (d.NdkCreateCq)(
            a,
            depth,
            on_notify,
            Arc::as_ptr(&notes) as PVOID,
            null_mut(),
            on_create,
            Arc::as_ptr(&ctx) as PVOID,
            &mut out,
        )
    };
    (st, out as usize, ctx, notes)
}

#[derive(Default)]
struct Closed(AtomicU32);

unsafe extern "system" fn on_closed(ctx: PVOID) {
    // SAFETY: an `Arc<Closed>` that `close_cq_raw` keeps alive until the completion came.
    let c = unsafe { &*(ctx as *const Closed) };
    c.0.fetch_add(1, Ordering::SeqCst);
}

/// NdkCloseCq of a CQ created through [`create_cq_sentinel`]; waits for CloseCompletion
/// when pended.
pub fn close_cq_raw(c: &Cluster, cq: *mut NDK_CQ) {
    let closed = Arc::new(Closed::default());
    // SAFETY: a live CQ of this provider.
    let d = unsafe { (*cq).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let d = unsafe { &*d };
    // SAFETY: live CQ, closed once; the context outlives the completion (waited for).
    let st = unsafe { (d.NdkCloseCq)(cq.cast(), on_closed, Arc::as_ptr(&closed) as PVOID) };
    if st == STATUS_PENDING {
        c.wait_for("CloseCompletion", || closed.0.load(Ordering::SeqCst) != 0);
    } else {
        assert_eq!(st, STATUS_SUCCESS);
    }
    c.settle();
    assert_eq!(
        closed.0.load(Ordering::SeqCst),
        u32::from(st == STATUS_PENDING)
    );
}
