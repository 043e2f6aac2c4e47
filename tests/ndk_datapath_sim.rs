//! The NDK data path over `pvrdma::verbs::Verbs` on two simulated hosts (the ndkperf cluster): bytes
//! moved by READ, WRITE and SEND, and the doorbell rule (one per non-deferred post, one per
//! DEFER chain; a poll rings POLL when it finds the ring empty, at its start or once it ran dry
//! with results still wanted, as Linux's does). Both with a model that writes CQEs as they complete and with one that holds them
//! until polled (lazy completion, pvrdma.md M48).

#[path = "common/mod.rs"]
mod common;
#[path = "../examples/perfkit/mod.rs"]
mod perfkit;

use std::sync::atomic::Ordering;

use perfkit::*;
use pvrdma_ndk::ndkpi::*;

#[test]
fn read_write_send_move_bytes_and_ring_once_per_chain() {
    read_write_send(false);
}

#[test]
fn read_write_send_move_bytes_and_ring_once_per_chain_lazy_completion() {
    read_write_send(true);
}

/// Issue 13 defect 9: the provider never rang the CQ POLL doorbell, so against a device that
/// writes completions only when polled (QEMU's did, M48) a poll found nothing, forever.
/// Linux's `pvrdma_poll_one` rings POLL once when it finds the CQ empty and looks again.
#[test]
fn empty_poll_rings_cq_poll_and_reaps_what_a_lazy_device_held() {
    let c = Cluster::with_completion(2, true, true);
    let cqa = c.cq(0, 64, None);
    let cqb = c.cq(1, 64, None);
    let (qa, qb) = (c.qp(0, cqa, cqa, 32, 1), c.qp(1, cqb, cqb, 32, 1));
    c.connect(0, qa, 1, qb);
    let la = c.buffer(0, 4096);
    let rb = c.buffer(1, 4096);
    let remote = c.remote(1, qb, cqb, &rb);
    let tok = c.nodes[0].token;
    let model = || c.world.device(0).counters();
    // The connection's MADs made (and QP1 holds) CQEs of their own: count from here.
    let base = model();
    for i in 0..3u64 {
        let st = rdma(
            qa,
            false,
            &[sge(la.addr() + 8 * i, 8, tok)],
            remote.va,
            remote.rkey,
            0,
        );
        assert_eq!(st, STATUS_SUCCESS);
    }
    c.run();
    let before = model();
    assert_eq!(
        (before.cqes_held - base.cqes_held, before.cqes - base.cqes),
        (3, 0),
        "held by the device"
    );
    let polls = || c.nodes[0].poll_doorbells.load(Ordering::SeqCst);
    let db = polls();
    let mut res = [empty_result(); 4];
    assert_eq!(get_results(cqa, &mut res), 3);
    assert_eq!(
        res[..3].iter().map(|r| r.Status).collect::<Vec<_>>(),
        vec![STATUS_SUCCESS; 3]
    );
    // One POLL for the empty ring, one more for the ring run dry with a result still
    // wanted (Linux's pvrdma_poll_one rings it whenever it finds the ring empty).
    let after = model();
    assert_eq!(after.db_cq_poll - before.db_cq_poll, 2, "two POLLs");
    assert_eq!(polls() - db, 2, "both seen by the UAR hook as POLL kicks");
    assert_eq!(after.cqes - base.cqes, 3);
    // Found empty again: one more POLL, nothing held, nothing returned.
    assert_eq!(get_results(cqa, &mut res), 0);
    assert_eq!(model().db_cq_poll - after.db_cq_poll, 1);
    // A poll that fills its array rings nothing.
    for i in 0..2u64 {
        let st = rdma(
            qa,
            false,
            &[sge(la.addr() + 8 * i, 8, tok)],
            remote.va,
            remote.rkey,
            0,
        );
        assert_eq!(st, STATUS_SUCCESS);
    }
    c.run();
    // Held: the first look finds the ring empty and POLLs; both CQEs fill the array of 2.
    let polls = model().db_cq_poll;
    assert_eq!(get_results(cqa, &mut res[..2]), 2);
    assert_eq!(
        model().db_cq_poll - polls,
        1,
        "POLL for the empty ring only"
    );
    assert_eq!(c.nodes[0].ndk.bad_cqes() + c.nodes[1].ndk.bad_cqes(), 0);
    leak(c);
}

fn read_write_send(lazy: bool) {
    let c = Cluster::with_completion(2, true, lazy);
    let (cqa, cqb) = (c.cq(0, 64, None), c.cq(1, 64, None));
    let (qa, qb) = (c.qp(0, cqa, cqa, 32, 1), c.qp(1, cqb, cqb, 32, 1));
    c.connect(0, qa, 1, qb);
    let mut la = c.buffer(0, 8192);
    let mut rb = c.buffer(1, 8192);
    let remote = c.remote(1, qb, cqb, &rb);
    let tok = c.nodes[0].token;
    rb.bytes()[..8].copy_from_slice(b"remote!!");
    // Every UAR store the hook sees: post doorbells and CQ POLL kicks.
    let db = || {
        let n = &c.nodes[0];
        n.doorbells.load(Ordering::SeqCst) + n.poll_doorbells.load(Ordering::SeqCst)
    };

    let d0 = db();
    assert_eq!(
        rdma(
            qa,
            true,
            &[sge(la.addr(), 8, tok)],
            remote.va,
            remote.rkey,
            0
        ),
        STATUS_SUCCESS
    );
    assert_eq!(db() - d0, 1, "one doorbell per non-deferred post");
    c.run();
    assert_eq!(c.drain(cqa, 1), vec![STATUS_SUCCESS]);
    assert_eq!(&la.bytes()[..8], b"remote!!");

    la.bytes()[100..108].copy_from_slice(b"written!");
    let d1 = db();
    for i in 0..8u64 {
        let f = if i < 7 { NDK_OP_FLAG_DEFER } else { 0 };
        let st = rdma(
            qa,
            false,
            &[sge(la.addr() + 100, 8, tok)],
            remote.va + 8 * i,
            remote.rkey,
            f,
        );
        assert_eq!(st, STATUS_SUCCESS);
    }
    assert_eq!(db() - d1, 1, "one doorbell for a DEFER chain of 8");
    c.run();
    assert_eq!(c.drain(cqa, 8), vec![STATUS_SUCCESS; 8]);
    assert_eq!(&rb.bytes()[56..64], b"written!");

    let d2 = db();
    let mut res = [empty_result(); 4];
    assert_eq!(get_results(cqa, &mut res), 0);
    assert_eq!(db() - d2, 1, "one POLL doorbell on an empty poll");

    la.bytes()[200..205].copy_from_slice(b"hello");
    assert_eq!(
        receive(qb, &[sge(rb.addr() + 4096, 64, c.nodes[1].token)]),
        STATUS_SUCCESS
    );
    assert_eq!(send(qa, &[sge(la.addr() + 200, 5, tok)], 0), STATUS_SUCCESS);
    c.run();
    assert_eq!(c.drain(cqa, 1), vec![STATUS_SUCCESS]);
    let mut r = [empty_result(); 1];
    assert_eq!(get_results(cqb, &mut r), 1);
    assert_eq!((r[0].Status, r[0].BytesTransferred), (STATUS_SUCCESS, 5));
    assert_eq!(&rb.bytes()[4096..4101], b"hello");
    assert_eq!(c.nodes[0].ndk.bad_cqes() + c.nodes[1].ndk.bad_cqes(), 0);
    leak(c);
}
