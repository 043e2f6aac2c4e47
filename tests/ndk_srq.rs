//! Shared receive queues end to end through the dispatch tables (ndkpi.md §5.9; pvrdma.md §1
//! "SRQ mapping", M43–M47): NdkCreateSrq limits, one SRQ feeding two QPs (completions on each
//! QP's receive CQ with that QP's QPContext, bytes verified), NotifyThreshold notifications
//! (M45: once per arm, re-arm by NdkModifySrq, immediate when already below, threshold 0
//! keeps the arm state), the NdkModifySrq depth rules, and a device without SRQs.

mod common;

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, Cq, Pd, Qp, QpSpec, Registered, Srq, fill, verify};
use pvrdma_ndk::ndkpi::*;
use pvrdma_sim::world::NodeConfig;

const QPC_A1: usize = 0xA1A1;
const QPC_A2: usize = 0xA2A2;
const QPC_B1: usize = 0xB1B1;
const QPC_B2: usize = 0xB2B2;
const LOCAL: u32 = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;

/// Host a: two QPs on one CQ. Host b: one SRQ shared by two QPs, each with its own CQ
/// (receive and initiator). a1 ↔ b1, a2 ↔ b2.
struct World {
    c: Cluster,
    pd_a: Pd,
    pd_b: Pd,
    cq_a: Cq,
    cq_b1: Cq,
    cq_b2: Cq,
    srq: Srq,
    qa1: Qp,
    qa2: Qp,
    qb1: Qp,
    qb2: Qp,
    a: Registered,
    b: Registered,
}

fn world(depth: u32, threshold: u32) -> World {
    let c = Cluster::new(Mode::Deterministic, 2);
    let pd_a = c.adapter(0).create_pd().expect("PD a");
    let pd_b = c.adapter(1).create_pd().expect("PD b");
    let cq_a = c.adapter(0).create_cq(64, None).expect("CQ a");
    let cq_b1 = c.adapter(1).create_cq(64, None).expect("CQ b1");
    let cq_b2 = c.adapter(1).create_cq(64, None).expect("CQ b2");
    let srq = pd_b.create_srq(depth, 2, threshold).expect("SRQ");
    let qa1 = pd_a
        .create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A1))
        .expect("QP a1");
    let qa2 = pd_a
        .create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A2))
        .expect("QP a2");
    let qb1 = pd_b
        .create_qp_with_srq(&cq_b1, &cq_b1, &srq, QpSpec::new(QPC_B1))
        .expect("QP b1 with SRQ");
    let qb2 = pd_b
        .create_qp_with_srq(&cq_b2, &cq_b2, &srq, QpSpec::new(QPC_B2))
        .expect("QP b2 with SRQ");
    c.connect(&qa1, &qb1);
    c.connect(&qa2, &qb2);
    let a = Registered::new(c.host(0), &pd_a, 4, 0x1000_0000, LOCAL);
    let b = Registered::new(c.host(1), &pd_b, 4, 0x7000_0000, LOCAL);
    World {
        c,
        pd_a,
        pd_b,
        cq_a,
        cq_b1,
        cq_b2,
        srq,
        qa1,
        qa2,
        qb1,
        qb2,
        a,
        b,
    }
}

impl World {
    /// Posts SRQ receive `ctx` into b's buffer at `ctx * 256` (256 bytes).
    fn post(&self, ctx: usize) {
        let r = self.srq.receive(ctx, &[self.b.sge(ctx as u64 * 256, 256)]);
        assert_eq!(r, STATUS_SUCCESS, "NdkSrqReceive {ctx}");
    }

    /// Sends `len` pattern bytes (seed `seed`) from a's QP `which` (1 or 2), waits for the
    /// send's success, then for exactly one receive result on the matching b CQ; returns
    /// (Status, BytesTransferred, QPContext, RequestContext) of it and the bytes sent.
    fn send(&self, which: u8, seed: u8, len: u32) -> ((NTSTATUS, u32, usize, usize), Vec<u8>) {
        let (qa, qpc_a, cq_b) = match which {
            1 => (&self.qa1, QPC_A1, &self.cq_b1),
            _ => (&self.qa2, QPC_A2, &self.cq_b2),
        };
        let off = u64::from(seed) * 512;
        assert!(
            off + u64::from(len) <= 4 * 4096,
            "a's buffer holds seeds < 32"
        );
        let bytes = fill(&self.a.mem, off as usize, seed, len as usize);
        assert_eq!(
            qa.send(usize::from(seed), &[self.a.sge(off, len)], 0),
            STATUS_SUCCESS
        );
        let ra = self.cq_a.wait_results(1);
        assert_eq!(
            (
                ra[0].Status,
                ra[0].QPContext as usize,
                ra[0].RequestContext as usize
            ),
            (STATUS_SUCCESS, qpc_a, usize::from(seed))
        );
        let rb = cq_b.wait_results(1);
        let r = &rb[0];
        (
            (
                r.Status,
                r.BytesTransferred,
                r.QPContext as usize,
                r.RequestContext as usize,
            ),
            bytes,
        )
    }

    fn finish(self) {
        let World {
            c,
            pd_a,
            pd_b,
            cq_a,
            cq_b1,
            cq_b2,
            srq,
            qa1,
            qa2,
            qb1,
            qb2,
            a,
            b,
        } = self;
        let mems = [a.close(), b.close()];
        for q in [qa1, qa2, qb1, qb2] {
            q.close();
        }
        srq.close();
        for cq in [cq_a, cq_b1, cq_b2] {
            assert!(cq.results(8).is_empty(), "no stray results");
            cq.close();
        }
        pd_a.close();
        pd_b.close();
        drop(mems);
        c.finish();
    }
}

#[test]
fn create_srq_limits() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let info = c.adapter(0).query_info().expect("info");
    assert_ne!(info.MaxSrqDepth, 0, "the model supports SRQs");
    let pd = c.adapter(0).create_pd().expect("PD");
    let at_max = pd
        .create_srq(info.MaxSrqDepth, info.MaxReceiveRequestSge, 1)
        .expect("SRQ at MaxSrqDepth and MaxReceiveRequestSge");
    for (depth, sge) in [
        (info.MaxSrqDepth + 1, 1),
        (8, info.MaxReceiveRequestSge + 1),
        (0, 1),
    ] {
        let (cr, _notes) = pd.create_srq_raw(depth, sge, 0);
        assert_eq!(
            cr.inline, STATUS_INVALID_PARAMETER,
            "depth {depth}, sge {sge}"
        );
        assert!(cr.out.is_null());
    }
    // Beyond the limit on SGEs per SRQ receive.
    let s = pd.create_srq(4, 2, 0).expect("SRQ");
    let m = Registered::new(c.host(0), &pd, 1, 0x2000_0000, LOCAL);
    let three = [m.sge(0, 8), m.sge(8, 8), m.sge(16, 8)];
    assert_eq!(s.receive(1, &three), STATUS_INVALID_PARAMETER);
    assert_eq!(s.receive(1, &three[..2]), STATUS_SUCCESS);
    c.settle();
    assert!(at_max.notifications().is_empty());
    let mem = m.close();
    s.close();
    at_max.close();
    pd.close();
    drop(mem);
    c.finish();
}

#[test]
fn two_qps_share_one_srq() {
    let w = world(8, 0);
    for ctx in 1..=4 {
        w.post(ctx);
    }
    // Receives are taken oldest first, by whichever QP a message arrives on (M46).
    let (r, sent) = w.send(1, 0x11, 100);
    assert_eq!(r, (STATUS_SUCCESS, 100, QPC_B1, 1));
    verify(&w.b.mem, 256, &sent);
    let (r, sent) = w.send(2, 0x12, 50);
    assert_eq!(r, (STATUS_SUCCESS, 50, QPC_B2, 2));
    verify(&w.b.mem, 2 * 256, &sent);
    let (r, sent) = w.send(2, 0x13, 256);
    assert_eq!(r, (STATUS_SUCCESS, 256, QPC_B2, 3));
    verify(&w.b.mem, 3 * 256, &sent);
    let (r, sent) = w.send(1, 0x14, 1);
    assert_eq!(r, (STATUS_SUCCESS, 1, QPC_B1, 4));
    verify(&w.b.mem, 4 * 256, &sent);
    verify(&w.b.mem, 4 * 256 + 1, &[0; 255]);
    assert!(w.cq_b1.results(4).is_empty() && w.cq_b2.results(4).is_empty());
    // A full SRQ again: the records wrap around the ring (8), contexts stay exact.
    for ctx in 5..=12 {
        w.post(ctx);
    }
    for ctx in 5..=12u8 {
        let which = 1 + ctx % 2;
        let (r, sent) = w.send(which, ctx, 20 + u32::from(ctx));
        let qpc = if which == 1 { QPC_B1 } else { QPC_B2 };
        assert_eq!(
            r,
            (STATUS_SUCCESS, 20 + u32::from(ctx), qpc, usize::from(ctx))
        );
        verify(&w.b.mem, usize::from(ctx) * 256, &sent);
    }
    assert!(
        w.srq.notifications().is_empty(),
        "no threshold, no callback"
    );
    w.finish();
}

#[test]
fn srq_threshold_notifies_once_per_arm() {
    let w = world(8, 3);
    let notes = |n: usize| {
        w.c.settle();
        assert_eq!(w.srq.notifications(), vec![STATUS_SUCCESS; n]);
    };
    for ctx in 1..=5 {
        w.post(ctx);
    }
    notes(0);
    // 5 → 4 → 3 queued: not below 3.
    assert_eq!(w.send(1, 1, 10).0, (STATUS_SUCCESS, 10, QPC_B1, 1));
    assert_eq!(w.send(2, 2, 10).0, (STATUS_SUCCESS, 10, QPC_B2, 2));
    notes(0);
    // 2 queued: below the threshold set at create → one notification.
    assert_eq!(w.send(1, 3, 10).0, (STATUS_SUCCESS, 10, QPC_B1, 3));
    notes(1);
    // Disarmed: 1 queued, nothing more.
    assert_eq!(w.send(1, 4, 10).0, (STATUS_SUCCESS, 10, QPC_B1, 4));
    notes(1);

    // Re-arm with NdkModifySrq(0, 3) at 5 queued: nothing at once; below 3 → one more.
    for ctx in 6..=9 {
        w.post(ctx);
    }
    assert_eq!(w.srq.modify(0, 3), STATUS_SUCCESS);
    notes(1);
    assert_eq!(w.send(2, 5, 10).0, (STATUS_SUCCESS, 10, QPC_B2, 5));
    assert_eq!(w.send(2, 6, 10).0, (STATUS_SUCCESS, 10, QPC_B2, 6));
    notes(1);
    assert_eq!(w.send(1, 7, 10).0, (STATUS_SUCCESS, 10, QPC_B1, 7));
    notes(2);

    // NotifyThreshold 0 keeps the (disarmed) state: nothing at 1 queued.
    assert_eq!(w.srq.modify(0, 0), STATUS_SUCCESS);
    assert_eq!(w.send(1, 8, 10).0, (STATUS_SUCCESS, 10, QPC_B1, 8));
    notes(2);

    // Arming while already below: immediate notification (1 queued < 5).
    assert_eq!(w.srq.modify(0, 5), STATUS_SUCCESS);
    notes(3);

    // NotifyThreshold 0 keeps the armed state too (receive 9 is still queued: 5 queued).
    for ctx in 10..=13 {
        w.post(ctx);
    }
    assert_eq!(w.srq.modify(0, 3), STATUS_SUCCESS);
    notes(3);
    assert_eq!(w.srq.modify(0, 0), STATUS_SUCCESS);
    notes(3);
    assert_eq!(w.send(2, 9, 10).0, (STATUS_SUCCESS, 10, QPC_B2, 9));
    assert_eq!(w.send(2, 10, 10).0, (STATUS_SUCCESS, 10, QPC_B2, 10));
    notes(3);
    assert_eq!(w.send(2, 11, 10).0, (STATUS_SUCCESS, 10, QPC_B2, 11));
    notes(4);
    w.finish();
}

#[test]
fn modify_srq_depth_rules() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let info = c.adapter(0).query_info().expect("info");
    let pd = c.adapter(0).create_pd().expect("PD");
    let m = Registered::new(c.host(0), &pd, 1, 0x2000_0000, LOCAL);
    // Depth 5: the ring is 8 (a power of two), the posting cap 5.
    let s = pd.create_srq(5, 1, 0).expect("SRQ");
    for i in 0..5 {
        assert_eq!(s.receive(i, &[m.sge(i as u64 * 64, 64)]), STATUS_SUCCESS);
    }
    assert_eq!(
        s.receive(5, &[m.sge(5 * 64, 64)]),
        STATUS_INSUFFICIENT_RESOURCES,
        "the SRQ holds its depth"
    );
    // Depth 0 keeps the depth.
    assert_eq!(s.modify(0, 0), STATUS_SUCCESS);
    assert_eq!(
        s.receive(5, &[m.sge(5 * 64, 64)]),
        STATUS_INSUFFICIENT_RESOURCES
    );
    // Up to the ring size: the cap grows.
    assert_eq!(s.modify(8, 0), STATUS_SUCCESS);
    for i in 5..8 {
        assert_eq!(s.receive(i, &[m.sge(i as u64 * 64, 64)]), STATUS_SUCCESS);
    }
    assert_eq!(s.receive(8, &[m.sge(0, 64)]), STATUS_INSUFFICIENT_RESOURCES);
    // Above the ring: the device cannot resize an SRQ (M44).
    assert_eq!(s.modify(9, 0), STATUS_NOT_SUPPORTED);
    assert_eq!(s.modify(info.MaxSrqDepth, 0), STATUS_NOT_SUPPORTED);
    // Above MaxSrqDepth: NDK's rule.
    assert_eq!(s.modify(info.MaxSrqDepth + 1, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(s.modify(info.MaxSrqDepth + 1, 2), STATUS_INVALID_PARAMETER);
    // A failed modify changed nothing: still capped at 8.
    assert_eq!(s.receive(8, &[m.sge(0, 64)]), STATUS_INSUFFICIENT_RESOURCES);
    c.settle();
    assert!(s.notifications().is_empty());
    let mem = m.close();
    s.close();
    pd.close();
    drop(mem);
    c.finish();
}

fn no_srq_on_host_1(i: usize, n: &mut NodeConfig) {
    if i == 1 {
        n.device.caps.max_srq = 0;
    }
}

#[test]
fn device_without_srqs_reports_depth_zero_and_not_supported() {
    let mut cfg = ClusterConfig::new(Mode::Deterministic, 2);
    cfg.tweak = Some(no_srq_on_host_1);
    let c = Cluster::with(cfg);
    let info = c.adapter(1).query_info().expect("info");
    assert_eq!(info.MaxSrqDepth, 0);
    assert_ne!(c.adapter(0).query_info().expect("info 0").MaxSrqDepth, 0);
    let pd = c.adapter(1).create_pd().expect("PD");
    let cq = c.adapter(1).create_cq(16, None).expect("CQ");
    for (depth, sge) in [(1, 1), (8, 2), (0, 0)] {
        let (cr, _notes) = pd.create_srq_raw(depth, sge, 0);
        assert_eq!(
            cr.inline, STATUS_NOT_SUPPORTED,
            "NdkCreateSrq({depth}, {sge})"
        );
        assert!(cr.out.is_null());
    }
    // NdkCreateQpWithSrq needs an SRQ object; none can exist on this adapter, so one from
    // the other host's adapter is passed (the provider refuses before looking at it).
    let pd0 = c.adapter(0).create_pd().expect("PD 0");
    let foreign = pd0.create_srq(8, 1, 0).expect("SRQ on host 0");
    let cr = pd.create_qp_with_srq_raw(&cq, &cq, &foreign, QpSpec::new(1));
    assert_eq!(cr.inline, STATUS_NOT_SUPPORTED);
    assert!(cr.out.is_null());
    c.settle();
    assert_eq!(cr.ctx.calls(), 0);
    // Plain QPs still work.
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(2)).expect("QP");
    qp.close();
    foreign.close();
    pd0.close();
    cq.close();
    pd.close();
    c.finish();
}

#[test]
fn an_srq_qp_in_error_leaves_the_shared_receives_to_the_other_qp() {
    let w = world(8, 0);
    for ctx in 1..=3 {
        w.post(ctx);
    }
    // Receive overflow on b1 (300 bytes into a 256-byte SRQ receive): b1 takes receive 1,
    // completes it BUFFER_OVERFLOW and enters ERR; a1's send fails (REM_INV_REQ_ERR).
    fill(&w.a.mem, 0, 0x66, 300);
    assert_eq!(w.qa1.send(0xA1, &[w.a.sge(0, 300)], 0), STATUS_SUCCESS);
    let ra = w.cq_a.wait_results(1);
    assert_eq!(
        (
            ra[0].Status,
            ra[0].QPContext as usize,
            ra[0].RequestContext as usize
        ),
        (STATUS_REMOTE_RESOURCES, QPC_A1, 0xA1)
    );
    let rb = w.cq_b1.wait_results_ex(1);
    assert_eq!(
        (
            rb[0].Status,
            rb[0].QPContext as usize,
            rb[0].RequestContext as usize,
            rb[0].Type
        ),
        (STATUS_BUFFER_OVERFLOW, QPC_B1, 1, NdkOperationTypeReceive)
    );
    // Only the WQE b1 had taken is gone (M46): b2 gets receives 2 and 3.
    let (r, sent) = w.send(2, 0x12, 77);
    assert_eq!(r, (STATUS_SUCCESS, 77, QPC_B2, 2));
    verify(&w.b.mem, 2 * 256, &sent);
    // NdkFlush of b1 (already in ERR) cancels nothing of the SRQ's.
    w.qb1.flush();
    w.c.settle();
    assert!(
        w.cq_b1.results(4).is_empty(),
        "no SRQ receive flushed by b1"
    );
    let (r, sent) = w.send(2, 0x13, 5);
    assert_eq!(r, (STATUS_SUCCESS, 5, QPC_B2, 3));
    verify(&w.b.mem, 3 * 256, &sent);
    // b1's own initiator queue is broken: a send completes CANCELLED on its CQ.
    assert_eq!(w.qb1.send(0xB1, &[w.b.sge(0, 8)], 0), STATUS_SUCCESS);
    let rb = w.cq_b1.wait_results(1);
    assert_eq!(
        (
            rb[0].Status,
            rb[0].QPContext as usize,
            rb[0].RequestContext as usize
        ),
        (STATUS_CANCELLED, QPC_B1, 0xB1)
    );
    w.finish();
}

#[test]
fn flushing_a_healthy_srq_qp_keeps_the_shared_receives() {
    let w = world(8, 0);
    for ctx in 1..=2 {
        w.post(ctx);
    }
    w.qb1.flush();
    w.c.settle();
    assert!(w.cq_b1.results(4).is_empty(), "b1 had taken no SRQ receive");
    let (r, sent) = w.send(2, 0x1A, 64);
    assert_eq!(r, (STATUS_SUCCESS, 64, QPC_B2, 1));
    verify(&w.b.mem, 256, &sent);
    let (r, _) = w.send(2, 0x1B, 64);
    assert_eq!(r, (STATUS_SUCCESS, 64, QPC_B2, 2));
    w.finish();
}

#[test]
fn create_qp_with_srq_limits() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let info = c.adapter(0).query_info().expect("info");
    let pd = c.adapter(0).create_pd().expect("PD");
    let cq = c.adapter(0).create_cq(16, None).expect("CQ");
    let srq = pd.create_srq(16, 1, 0).expect("SRQ");
    let max = QpSpec {
        context: 7,
        // Ignored with an SRQ (no receive queue): even values above the limits.
        receive_depth: info.MaxReceiveQueueDepth + 1,
        receive_sge: info.MaxReceiveRequestSge + 1,
        initiator_depth: info.MaxInitiatorQueueDepth,
        initiator_sge: info.MaxInitiatorRequestSge,
        inline_data: info.MaxInlineDataSize,
    };
    let qp = pd
        .create_qp_with_srq(&cq, &cq, &srq, max)
        .expect("QP with SRQ at every initiator maximum");
    for s in [
        QpSpec {
            initiator_depth: max.initiator_depth + 1,
            ..max
        },
        QpSpec {
            initiator_sge: max.initiator_sge + 1,
            ..max
        },
        QpSpec {
            inline_data: max.inline_data + 1,
            ..max
        },
    ] {
        let cr = pd.create_qp_with_srq_raw(&cq, &cq, &srq, s);
        assert_eq!(cr.inline, STATUS_INVALID_PARAMETER, "{s:?}");
        assert!(cr.out.is_null());
    }
    // NdkReceive on a QP with an SRQ is refused inline.
    let m = Registered::new(c.host(0), &pd, 1, 0x2000_0000, LOCAL);
    assert_eq!(qp.receive(1, &[m.sge(0, 8)]), STATUS_INVALID_DEVICE_REQUEST);
    c.settle();
    assert!(cq.results(4).is_empty());
    let mem = m.close();
    qp.close();
    srq.close();
    cq.close();
    pd.close();
    drop(mem);
    c.finish();
}
