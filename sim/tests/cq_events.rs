//! CQ arming and notification, overflow, device rings (EQE/CQNE) fullness and corruption
//! (§7, §11, §13; M12, M14, M18, M19, M22, M40), lazy completion (M48).

use pvrdma_sim::DeviceConfig;
use pvrdma_sim::testutil::{Host, QpSpec, SendWqe, TestCq, TestQp};

struct Rig {
    h: Host,
    cq: TestCq,
    qp: TestQp,
    frmr_key: u32,
}

fn rig_cq(n: u32) -> Rig {
    rig_cq_on(n, DeviceConfig::default())
}

fn rig_cq_on(n: u32, cfg: DeviceConfig) -> Rig {
    let h = Host::new(cfg);
    let pd = h.create_pd();
    let cq = h.create_cq(n);
    let qp = h.create_qp(&QpSpec {
        send_wr: 16,
        ..QpSpec::rc(pd, cq.handle, cq.handle)
    });
    h.rc_to_rts(qp.handle, 7);
    let frmr_key = h.create_frmr(pd, 4).lkey;
    h.irqs.take();
    Rig {
        h,
        cq,
        qp,
        frmr_key,
    }
}

impl Rig {
    /// A successful signalled completion (LOCAL_INV of an invalid FRMR).
    fn complete_ok(&mut self, wr_id: u64) {
        self.qp
            .post_send(&SendWqe::new(wr_id, 10, 2).at(24, &self.frmr_key.to_le_bytes()));
        self.ring();
    }
    fn ring(&self) {
        self.h.dev.uar_write32(0, self.qp.handle | 1 << 30);
        self.h.dev.run_until_idle();
    }
    fn arm(&self, bits: u32) {
        self.h.dev.uar_write32(4, self.cq.handle | bits);
    }
}

const ARM: u32 = 1 << 30;
const ARM_SOL: u32 = 1 << 29;
const POLL: u32 = 1 << 31;

#[test]
fn arm_gives_exactly_one_cqne_and_vector_2() {
    let mut r = rig_cq(16);
    r.arm(ARM);
    r.complete_ok(1);
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    assert_eq!(r.h.irqs.take(), vec![2]);
    r.complete_ok(2);
    assert!(r.h.cqnes().is_empty());
    assert!(r.h.irqs.take().is_empty());
    r.arm(ARM);
    r.complete_ok(3);
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    assert_eq!(r.cq.poll().len(), 3);
    assert_eq!(r.h.dev.counters().cqnes, 2);
}

#[test]
fn cqes_present_at_arm_time_never_notify() {
    let mut r = rig_cq(16);
    r.complete_ok(1);
    r.arm(ARM);
    r.h.dev.run_until_idle();
    assert!(r.h.cqnes().is_empty());
    r.complete_ok(2);
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
}

#[test]
fn arm_sol_ignores_successful_sends_but_fires_on_errors() {
    let mut r = rig_cq(16);
    r.arm(ARM_SOL);
    r.complete_ok(1);
    assert!(r.h.cqnes().is_empty());
    // A bad LOCAL_INV: error CQE (+ flush) → one notification.
    r.qp.post_send(&SendWqe::new(2, 10, 2).at(24, &(r.frmr_key | 7).to_le_bytes()));
    r.qp.post_send(&SendWqe::new(3, 2, 2));
    r.ring();
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    let st: Vec<u32> = r.cq.poll().iter().map(|c| c.status).collect();
    assert_eq!(st, vec![0, 2, 5]);
}

#[test]
fn arm_sol_fires_on_solicited_receive() {
    let mut r = rig_cq(16);
    r.qp.post_recv(9, &[]);
    r.h.dev.uar_write32(0, r.qp.handle | 1 << 31);
    r.arm(ARM_SOL);
    let q = r.qp.handle;
    r.h.dev.with_core(|c| {
        let w = c.take_recv(q).unwrap().unwrap();
        let done = pvrdma_sim::device::RecvCompletion {
            opcode: 128,
            solicited: false,
            ..Default::default()
        };
        let w2 = w.token;
        assert!(c.complete_recv(q, w2, &done));
    });
    r.h.dev.run_until_idle();
    assert!(r.h.cqnes().is_empty());
    r.qp.post_recv(10, &[]);
    r.h.dev.with_core(|c| {
        let w = c.take_recv(q).unwrap().unwrap();
        let done = pvrdma_sim::device::RecvCompletion {
            opcode: 128,
            solicited: true,
            ..Default::default()
        };
        assert!(c.complete_recv(q, w.token, &done));
    });
    r.h.dev.run_until_idle();
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    assert_eq!(r.qp.rq_cons(), 2);
}

#[test]
fn arm_wins_over_arm_sol_and_poll_is_ignored() {
    let mut r = rig_cq(16);
    r.arm(ARM_SOL);
    r.arm(ARM);
    r.arm(ARM_SOL);
    r.arm(POLL);
    r.complete_ok(1);
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    let c = r.h.dev.counters();
    assert_eq!((c.db_cq_arm, c.db_cq_arm_sol, c.db_cq_poll), (1, 2, 1));
}

#[test]
fn cq_overflow_drops_cqe_posts_cq_err_and_fails_the_qp() {
    let mut r = rig_cq(2);
    r.complete_ok(1);
    r.complete_ok(2);
    assert!(r.h.events().is_empty());
    r.complete_ok(3);
    // CQ_ERR(cq) then QP_FATAL(qp) for the QP that needed the CQ.
    assert_eq!(r.h.events(), vec![(0, r.cq.handle), (1, r.qp.handle)]);
    let wr: Vec<u64> = r.cq.poll().iter().map(|c| c.wr_id).collect();
    assert_eq!(wr, vec![1, 2]);
    // The CQ stays stopped even with space.
    r.complete_ok(4);
    assert!(r.cq.poll().is_empty());
    assert!(r.h.dev.counters().cqes_dropped >= 2);
    assert_eq!(r.h.irqs.take(), vec![1]);
}

#[test]
fn corrupt_cq_cons_head_is_cq_err() {
    let mut r = rig_cq(16);
    r.cq.buf.data.write_u32(12, 40);
    r.complete_ok(1);
    assert_eq!(r.h.events(), vec![(0, r.cq.handle), (1, r.qp.handle)]);
    assert!(r.h.dev.counters().bad_indices >= 1);
}

fn small_rings(async_pages: u32) -> Host {
    let h = Host::load(DeviceConfig::default());
    h.dsr.write_u32(32, async_pages);
    h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
    h.dev.bar1_write32(0x1C, 0);
    h.dev.bar1_write32(0x0C, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 0);
    h
}

#[test]
fn four_page_async_ring_holds_512_events_then_holds_the_rest_in_order() {
    let h = Host::default_up();
    h.dev
        .with_core(|c| (0..600).for_each(|i| c.post_event(9, i)));
    let first = h.events();
    assert_eq!(first.len(), 512);
    assert_eq!(first[511], (9, 511));
    assert_eq!(h.dev.counters().events, 512);
    h.dev.run_until_idle();
    let rest = h.events();
    assert_eq!(rest.len(), 88);
    assert_eq!(rest[0], (9, 512));
    assert_eq!(rest[87], (9, 599));
}

#[test]
fn two_page_async_ring_is_power_of_two_and_holds_512() {
    let h = small_rings(2);
    h.dev
        .with_core(|c| (0..513).for_each(|i| c.post_event(10, i)));
    // N = 512: the reader arithmetic uses n = 512 here.
    let reader = pvrdma_sim::testutil::DevRingReader {
        buf: h.async_ring.buf,
        n: 512,
        elem: 8,
    };
    assert_eq!(reader.drain().len(), 512);
    h.dev.run_until_idle();
    assert_eq!(reader.drain().len(), 1);
}

#[test]
fn corrupt_async_cons_head_abandons_the_ring() {
    let h = Host::default_up();
    h.async_ring.buf.data.write_u32(12, 5000);
    h.dev.with_core(|c| c.post_event(9, 1));
    let c = h.dev.counters();
    assert_eq!((c.rings_abandoned, c.events), (1, 0));
    assert!(c.bad_indices >= 1);
}

#[test]
fn full_cqne_ring_coalesces_one_notification_per_cq() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let a = h.create_cq(2048);
    let qp = h.create_qp(&QpSpec {
        send_wr: 2048,
        send_sge: 1,
        ..QpSpec::rc(pd, a.handle, a.handle)
    });
    h.rc_to_rts(qp.handle, 7);
    let key = h.create_frmr(pd, 1).lkey;
    let mut qp = qp;
    // 1024 arms + completions fill the CQNE ring (cap 1024 with 4 pages).
    for i in 0..1024u64 {
        h.dev.uar_write32(4, a.handle | ARM);
        qp.post_send(&SendWqe::new(i, 10, 2).at(24, &key.to_le_bytes()));
        h.dev.uar_write32(0, qp.handle | 1 << 30);
        h.dev.process();
    }
    assert_eq!(h.dev.counters().cqnes, 1024);
    // Two more notifications for A while the ring is full coalesce into one held CQNE.
    for i in 0..2u64 {
        h.dev.uar_write32(4, a.handle | ARM);
        qp.post_send(&SendWqe::new(5000 + i, 10, 2).at(24, &key.to_le_bytes()));
        h.dev.uar_write32(0, qp.handle | 1 << 30);
        h.dev.process();
    }
    assert_eq!(h.dev.counters().cqnes, 1024);
    let drained = h.cqnes();
    assert_eq!(drained.len(), 1024);
    h.dev.run_until_idle();
    assert_eq!(h.cqnes(), vec![a.handle]);
}

fn lazy() -> DeviceConfig {
    DeviceConfig {
        lazy_completion: true,
        ..DeviceConfig::default()
    }
}

fn wr_ids(cq: &TestCq) -> Vec<u64> {
    cq.poll().iter().map(|c| c.wr_id).collect()
}

#[test]
fn lazy_completion_holds_cqes_until_the_poll_doorbell() {
    let mut r = rig_cq_on(16, lazy());
    r.complete_ok(1);
    r.complete_ok(2);
    assert!(r.cq.poll().is_empty(), "held, not in the ring");
    assert_eq!(r.cq.tail(), 0);
    r.arm(POLL);
    // In the ring before the POLL write returned, oldest first.
    assert_eq!(r.cq.tail(), 2);
    assert_eq!(wr_ids(&r.cq), vec![1, 2]);
    r.arm(POLL);
    assert!(r.cq.poll().is_empty());
    let c = r.h.dev.counters();
    assert_eq!((c.cqes_held, c.cqes, c.db_cq_poll), (2, 2, 2));
    assert!(r.h.cqnes().is_empty());
}

#[test]
fn lazy_completion_writes_held_cqes_before_the_cqne_of_a_satisfied_arm() {
    let mut r = rig_cq_on(16, lazy());
    r.complete_ok(1);
    r.arm(ARM_SOL);
    // A success does not satisfy ARM_SOL: still held.
    r.complete_ok(2);
    assert_eq!(r.cq.tail(), 0);
    assert!(r.h.cqnes().is_empty());
    r.arm(ARM);
    r.complete_ok(3);
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    assert_eq!(r.h.irqs.take(), vec![2]);
    assert_eq!(wr_ids(&r.cq), vec![1, 2, 3]);
    // The arm was consumed: the next CQE is held again.
    r.complete_ok(4);
    assert!(r.cq.poll().is_empty());
    r.arm(ARM | POLL);
    assert_eq!(wr_ids(&r.cq), vec![4]);
    assert!(
        r.h.cqnes().is_empty(),
        "CQEs present at arm time never notify (M18)"
    );
}

#[test]
fn lazy_completion_overflows_when_ring_and_held_cqes_exceed_the_cq() {
    let mut r = rig_cq_on(2, lazy());
    r.complete_ok(1);
    r.complete_ok(2);
    assert!(r.h.events().is_empty());
    r.complete_ok(3);
    assert_eq!(r.h.events(), vec![(0, r.cq.handle), (1, r.qp.handle)]);
    // The held CQEs, which fit, were written where the option off would have put them;
    // the CQ stays stopped.
    assert_eq!(wr_ids(&r.cq), vec![1, 2]);
    r.complete_ok(4);
    r.arm(POLL);
    assert!(r.cq.poll().is_empty());
    assert_eq!(r.h.dev.counters().cqes_dropped, 2);
}
