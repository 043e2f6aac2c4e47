//! Cross-object checks compare identity, never device handle values: two adapters on two
//! devices allocate their handles the same way (the model is deterministic), so adapter B's
//! PD and MR carry the same handles as adapter A's. A work request on A's QP that names B's
//! MR must fail as an MR of another PD does (ndkpi.md §5.7: STATUS_INVALID_PARAMETER) and put
//! nothing in A's send queue.

mod common;

use common::Mode;
use common::memory::BuiltMdl;
use common::ndk::{Cluster, Cq, Lam, Mr, Pd, Qp, QpSpec};
use pvrdma_ndk::ndk::object::ObjRef;
use pvrdma_ndk::ndkpi::*;

const QPC_A: usize = 0xA0A0;
const QPC_B: usize = 0xB0B0;
const VA_A: u64 = 0x1000_0000;
const VA_B: u64 = 0x7000_0000;
const FR_FLAGS: u32 =
    NDK_OP_FLAG_ALLOW_LOCAL_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_ALLOW_REMOTE_WRITE;

fn pd_handle(pd: &Pd) -> u32 {
    // SAFETY: a live PD of this provider.
    let p = unsafe { ObjRef::<pvrdma_ndk::ndk::pd::Pd>::borrow(pd.ptr) }.expect("live PD");
    p.handle()
}

/// One side: a PD, a CQ, a QP and an initialized fast-register MR of one page, with the
/// page's LAM built.
struct Side {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    fr: Mr,
    mdl: BuiltMdl,
    lam: Lam,
}

fn side(c: &Cluster, host: usize, qpc: usize, va: u64) -> (Side, common::memory::ConsumerMem) {
    let pd = c.adapter(host).create_pd().expect("PD");
    let cq = c.adapter(host).create_cq(64, None).expect("CQ");
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(qpc)).expect("QP");
    let fr = pd.create_mr(true).expect("FR MR");
    assert_eq!(fr.initialize_fast_register(1, true), STATUS_SUCCESS);
    let mem = c.host(host).mem(1, va);
    let mdl = mem.mdl(0, 4096);
    let lam = c.adapter(host).build_lam(&mdl, 4096).expect("NdkBuildLAM");
    (
        Side {
            pd,
            cq,
            qp,
            fr,
            mdl,
            lam,
        },
        mem,
    )
}

/// Two connected hosts whose PDs (and FRMRs, and QPs) have equal device handles.
fn colliding() -> (Cluster, Side, Side, Vec<common::memory::ConsumerMem>) {
    let c = Cluster::new(Mode::Deterministic, 2);
    let (a, mem_a) = side(&c, 0, QPC_A, VA_A);
    let (b, mem_b) = side(&c, 1, QPC_B, VA_B);
    c.connect(&a.qp, &b.qp);
    assert_eq!(
        pd_handle(&a.pd),
        pd_handle(&b.pd),
        "the premise: the two devices gave the PDs one handle"
    );
    assert_eq!(a.qp.handle(), b.qp.handle(), "and the QPs one handle");
    (c, a, b, vec![mem_a, mem_b])
}

fn finish(c: Cluster, sides: [Side; 2], mems: Vec<common::memory::ConsumerMem>) {
    for (i, s) in sides.into_iter().enumerate() {
        let Side {
            pd,
            cq,
            qp,
            fr,
            mdl,
            lam,
        } = s;
        qp.close();
        assert!(cq.results(8).is_empty(), "no stray results on side {i}");
        fr.close();
        c.adapter(i).release_lam(lam);
        drop(mdl);
        cq.close();
        pd.close();
    }
    drop(mems);
    c.finish();
}

/// A's QP posts nothing for the refused request: the next request it takes is the only
/// completion its CQ reports.
fn assert_send_queue_untouched(a: &Side) {
    let pages = a.lam.pages();
    assert_eq!(
        a.qp.fast_register(0xA9, &a.fr, &pages, a.lam.fbo, 4096, VA_A, FR_FLAGS),
        STATUS_SUCCESS
    );
    let r = a.cq.wait_results(1);
    assert_eq!(
        (
            r[0].Status,
            r[0].QPContext as usize,
            r[0].RequestContext as usize
        ),
        (STATUS_SUCCESS, QPC_A, 0xA9)
    );
    assert!(a.cq.results(8).is_empty(), "exactly one completion on A");
}

#[test]
fn fast_register_of_another_adapters_mr_with_an_equal_pd_handle_is_an_invalid_parameter() {
    let (c, a, b, mems) = colliding();
    let b_token = b.fr.remote_token();
    let a_token = a.fr.remote_token();
    let pages = b.lam.pages();
    assert_eq!(
        a.qp.fast_register(0xA1, &b.fr, &pages, b.lam.fbo, 4096, VA_B, FR_FLAGS),
        STATUS_INVALID_PARAMETER
    );
    c.settle();
    assert!(
        a.cq.results(8).is_empty(),
        "no completion for a refused post"
    );
    assert_eq!(b.fr.remote_token(), b_token, "B's MR keeps its key");
    assert_eq!(a.fr.remote_token(), a_token, "A's MR keeps its key");
    assert_send_queue_untouched(&a);
    finish(c, [a, b], mems);
}

#[test]
fn invalidate_of_another_adapters_mr_with_an_equal_pd_handle_is_an_invalid_parameter() {
    let (c, a, b, mems) = colliding();
    // B's MR is fast-registered by B, so it has a live key A could name.
    let pages = b.lam.pages();
    assert_eq!(
        b.qp.fast_register(0xB1, &b.fr, &pages, b.lam.fbo, 4096, VA_B, FR_FLAGS),
        STATUS_SUCCESS
    );
    assert_eq!(b.cq.wait_results(1)[0].Status, STATUS_SUCCESS);
    let b_token = b.fr.remote_token();
    assert_eq!(a.qp.invalidate(0xA1, &b.fr, 0), STATUS_INVALID_PARAMETER);
    c.settle();
    assert!(
        a.cq.results(8).is_empty(),
        "no completion for a refused post"
    );
    assert_eq!(b.fr.remote_token(), b_token, "B's MR keeps its key");
    // B's own invalidate of its key still works: nothing consumed it.
    assert_eq!(b.qp.invalidate(0xB2, &b.fr, 0), STATUS_SUCCESS);
    let r = b.cq.wait_results(1);
    assert_eq!(
        (r[0].Status, r[0].RequestContext as usize),
        (STATUS_SUCCESS, 0xB2)
    );
    assert_send_queue_untouched(&a);
    finish(c, [a, b], mems);
}

#[test]
fn qp_on_another_adapters_cqs_with_equal_handles_is_an_invalid_parameter() {
    let (c, a, b, mems) = colliding();
    let err = |r: Result<Qp, NTSTATUS>| r.err();
    assert_eq!(
        err(a.pd.create_qp(&b.cq, &a.cq, QpSpec::new(QPC_A))),
        Some(STATUS_INVALID_PARAMETER),
        "B's initiator CQ"
    );
    assert_eq!(
        err(a.pd.create_qp(&a.cq, &b.cq, QpSpec::new(QPC_A))),
        Some(STATUS_INVALID_PARAMETER),
        "B's receive CQ"
    );
    finish(c, [a, b], mems);
}
