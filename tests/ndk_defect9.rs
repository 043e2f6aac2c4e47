//! Issue 13 defect 9, one named test per hole, each through the dispatch tables against the
//! device model: a CQ that reported CQ_ERR returns no completions (ndkpi.md §5.4); a CREATE_CQ
//! response with fewer entries than asked for fails the create (M11: response `cqe` =
//! request, `pvrdma::verbs` unit tests); queue memory whose DESTROY failed is quarantined until the
//! device is RESET, not freed; memory an MR registered without NDK_MR_FLAG_ALLOW_LOCAL_WRITE
//! covers is not writable by the device (a receive or READ into it fails,
//! STATUS_ACCESS_VIOLATION).

mod common;
mod ndk_dp;

use std::sync::{Arc, Mutex};

use common::ndk::{Cluster, QpSpec, Registered, fill, verify};
use common::{Harness, Mode};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::pvrdma::PvrdmaError;
use pvrdma_ndk::pvrdma::verbs::Verbs;

/// DESTROY_CQ's command code (pvrdma.md §8).
const DESTROY_CQ: u32 = 8;
/// M8: the device is busy.
const BUSY: u32 = 16;

/// A CQ of depth 2 takes three WRITE completions: the model drops the third, raises CQ_ERR
/// and stops the CQ (M40); the consumer armed for errors hears STATUS_BUFFER_OVERFLOW, and
/// from then on the CQ returns nothing, although its ring still holds the two CQEs written
/// before the overflow. Before the fix the next poll returned both.
#[test]
fn cq_that_reported_cq_err_returns_no_completions() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let pd_a = c.adapter(0).create_pd().expect("PD a");
    let pd_b = c.adapter(1).create_pd().expect("PD b");
    let cq_a = c.adapter(0).create_cq(2, None).expect("CQ a");
    let cq_b = c.adapter(1).create_cq(16, None).expect("CQ b");
    let qa = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A)).unwrap();
    let qb = pd_b.create_qp(&cq_b, &cq_b, QpSpec::new(QPC_B)).unwrap();
    c.connect(&qa, &qb);
    let ma = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &pd_b, 1, 0x2000_0000, REMOTE);
    cq_a.arm(NDK_CQ_NOTIFY_ERRORS);
    // From here on: the connection's MADs made CQEs on QP1's CQs too.
    let before = c.host(0).model.counters();
    for i in 0..3u64 {
        let st = qa.write(
            i as usize,
            &[ma.sge(8 * i, 8)],
            mb.mem.va + 8 * i,
            mb.mr.remote_token(),
            0,
        );
        assert_eq!(st, STATUS_SUCCESS);
    }
    c.wait_for("the CQ error", || !cq_a.notifications().is_empty());
    c.settle();
    assert_eq!(cq_a.notifications(), vec![STATUS_BUFFER_OVERFLOW]);
    let model = c.host(0).model.counters();
    assert_eq!(
        (
            model.cqes - before.cqes,
            model.cqes_dropped - before.cqes_dropped
        ),
        (2, 1)
    );
    assert_eq!(
        cq_a.results(4).len(),
        0,
        "a failed CQ returns no completions"
    );
    assert_eq!(cq_a.results_ex(4).len(), 0);
    drop([ma.close(), mb.close()]);
    for q in [qa, qb] {
        q.close();
    }
    for q in [cq_a, cq_b] {
        q.close();
    }
    for p in [pd_a, pd_b] {
        p.close();
    }
    c.finish();
}

/// The model answers a CQ's DESTROY with an error (16, busy): the device still has the CQ and
/// may still write its ring, so the ring is quarantined, not freed: it stays allocated and is
/// counted. It is freed once the device was RESET (the driver's teardown), so nothing leaks.
/// Before the fix the DESTROY's completion freed the ring whatever the device answered.
#[test]
fn queue_memory_whose_destroy_failed_is_quarantined_until_reset() {
    let mut h = Harness::deterministic();
    let dev = Arc::new(h.dev.take().expect("probed"));
    let hw = Verbs::new(dev.clone()).expect("hw");
    let answer: Arc<Mutex<Option<Result<u32, PvrdmaError>>>> = Arc::new(Mutex::new(None));
    let a = answer.clone();
    hw.create_cq(64, Box::new(move |r| *a.lock().unwrap() = Some(r)));
    h.rig
        .wait_for("CREATE_CQ", || answer.lock().unwrap().is_some());
    let cq = answer.lock().unwrap().take().unwrap().expect("a CQ");
    h.settle();
    let live = h.rig.dma.live();
    h.rig
        .model
        .with_core(|c| c.fail_nth_command(1, BUSY, 1 << DESTROY_CQ));
    hw.destroy_cq(cq);
    h.rig.wait_for("the failed DESTROY_CQ", || {
        !h.rig.model.with_core(|c| c.command_fault_pending())
    });
    // The DESTROY's completion has run in the command DPC.
    h.settle();
    assert_eq!(h.rig.model_objects().cqs, 1, "the device still has the CQ");
    assert_eq!(h.rig.dma.live(), live, "its ring stays allocated");
    assert_eq!(hw.quarantined(), 1);
    // Teardown: the driver RESETs the device, and only then frees the quarantine.
    drop(dev);
    drop(hw);
    let Harness { rig, .. } = h;
    assert!(!rig.model.with_core(|c| c.is_active()), "RESET");
    rig.finish();
}

/// NdkRegisterMr with NDK_MR_FLAG_ALLOW_LOCAL_READ only (flags 0) gives the device no write
/// access: a receive into it fails with a local protection error (LOC_PROT_ERR →
/// STATUS_ACCESS_VIOLATION) and leaves the memory as it was; the sender learns of the
/// responder's failure (REM_OP_ERR → STATUS_REMOTE_RESOURCES). Before the fix LOCAL_WRITE was
/// always granted and the message landed in the read-only registration.
#[test]
fn receive_into_a_read_only_registration_fails_with_access_violation() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(
        c.host(1),
        &p.pd_b,
        1,
        0x2000_0000,
        NDK_MR_FLAG_ALLOW_LOCAL_READ,
    );
    fill(&ma.mem, 0, 0x31, 4096);
    let before = fill(&mb.mem, 0, 0x32, 4096);
    assert_eq!(p.qb.receive(9, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(p.qa.send(7, &[ma.sge(0, 16)], 0), STATUS_SUCCESS);
    let rb = p.cq_b.wait_results_ex(1);
    assert_eq!(
        res_ex(&rb[0]),
        (STATUS_ACCESS_VIOLATION, QPC_B, 9, NdkOperationTypeReceive)
    );
    let ra = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&ra[0]),
        (STATUS_REMOTE_RESOURCES, QPC_A, 7, NdkOperationTypeSend)
    );
    verify(&mb.mem, 0, &before);
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// An RDMA READ whose local SGE is in a read-only registration fails with
/// STATUS_ACCESS_VIOLATION (LOC_PROT_ERR: LOCAL_WRITE missing for a READ destination,
/// pvrdma.md §14) and writes nothing there. Before the fix the READ succeeded and wrote it.
#[test]
fn read_into_a_read_only_registration_fails_with_access_violation() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(
        c.host(0),
        &p.pd_a,
        1,
        0x1000_0000,
        NDK_MR_FLAG_ALLOW_LOCAL_READ,
    );
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
    let before = fill(&ma.mem, 0, 0x41, 4096);
    fill(&mb.mem, 0, 0x42, 4096);
    let st =
        p.qa.read(5, &[ma.sge(0, 32)], mb.mem.va, mb.mr.remote_token(), 0);
    assert_eq!(st, STATUS_SUCCESS);
    let ra = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&ra[0]),
        (STATUS_ACCESS_VIOLATION, QPC_A, 5, NdkOperationTypeRead)
    );
    verify(&ma.mem, 0, &before);
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// NdkFastRegister without NDK_OP_FLAG_ALLOW_LOCAL_WRITE makes the FRMR read-only to the
/// device as well: a READ into it through its local token fails with
/// STATUS_ACCESS_VIOLATION and writes nothing. Before the fix the fast-register WQE always
/// carried LOCAL_WRITE.
#[test]
fn read_into_a_read_only_fast_registration_fails_with_access_violation() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let mem = c.host(0).mem(1, 0x4000_0000);
    let mr = p.pd_a.create_mr(true).unwrap();
    assert_eq!(mr.initialize_fast_register(1, false), STATUS_SUCCESS);
    let va = 0x7700_0000u64;
    let st = p.qa.fast_register(60, &mr, &[mem.bus(0)], 0, 4096, va, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A, 60, NdkOperationTypeFastRegister)
    );
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
    let before = fill(&mem, 0, 0x61, 4096);
    fill(&mb.mem, 0, 0x62, 4096);
    let sink = common::ndk::sge(va + 100, 64, mr.local_token());
    let st = p.qa.read(61, &[sink], mb.mem.va, mb.mr.remote_token(), 0);
    assert_eq!(st, STATUS_SUCCESS);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_ACCESS_VIOLATION, QPC_A, 61, NdkOperationTypeRead)
    );
    verify(&mem, 0, &before);
    drop(mb.close());
    mr.close();
    p.close();
    drop(mem);
    c.finish();
}
