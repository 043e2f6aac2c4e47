//! `Device::kick_gsi_queues`, the harness knob standing in for QP1 doorbells a bare-doorbell
//! harness never handed the device: posted work runs, unconsumed CQEs notify, arm states,
//! other QPs and an idle device are left as they were.

use pvrdma_sim::DeviceConfig;
use pvrdma_sim::testutil::{Host, QpSpec, SendWqe, TestCq, TestQp};

struct Rig {
    h: Host,
    cq: TestCq,
    qp: TestQp,
    frmr_key: u32,
}

fn rig(cfg: DeviceConfig) -> Rig {
    let h = Host::new(cfg);
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec {
        send_wr: 16,
        qp_type: 1,
        ..QpSpec::rc(pd, cq.handle, cq.handle)
    });
    h.ud_to_rts(qp.handle, 0x8001_0000, true);
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
    /// Posts a signalled LOCAL_INV of an FRMR, no doorbell (its CQE's status is not what
    /// these tests look at).
    fn post_ok(&mut self, wr_id: u64) {
        self.qp
            .post_send(&SendWqe::new(wr_id, 10, 2).at(24, &self.frmr_key.to_le_bytes()));
    }
    fn kick(&self) {
        self.h.dev.kick_gsi_queues();
        self.h.dev.run_until_idle();
    }
    fn wr_ids(&self) -> Vec<u64> {
        self.cq.poll().iter().map(|c| c.wr_id).collect()
    }
}

const CQ_ARM: u32 = 1 << 30;
const CQ_POLL: u32 = 1 << 31;

#[test]
fn posted_sends_run_without_their_doorbell() {
    let mut r = rig(DeviceConfig::default());
    r.post_ok(1);
    r.post_ok(2);
    r.h.dev.run_until_idle();
    assert_eq!(r.cq.tail(), 0, "no doorbell, no work");
    r.kick();
    assert_eq!(r.cq.tail(), 2);
    assert_eq!(r.wr_ids(), vec![1, 2]);
    r.kick();
    assert_eq!(r.cq.tail(), 2, "a second kick finds nothing new");
}

#[test]
fn unconsumed_cqes_notify_whatever_the_arm_and_consumed_ones_do_not() {
    let mut r = rig(DeviceConfig::default());
    r.post_ok(1);
    r.kick();
    // The CQE was written unarmed: it notified no one. Its kick found it still in the ring
    // only after the pass that wrote it, so the next kick notifies.
    assert!(r.h.cqnes().is_empty());
    r.kick();
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    assert_eq!(r.h.irqs.take(), vec![2]);
    assert_eq!(r.wr_ids(), vec![1]);
    r.kick();
    assert!(r.h.cqnes().is_empty(), "consumed: nothing to notify");
    assert!(r.h.irqs.take().is_empty());
    assert_eq!(r.h.dev.counters().cqnes, 1);
}

#[test]
fn an_arm_survives_the_kick_and_fires_on_the_next_cqe() {
    let mut r = rig(DeviceConfig::default());
    r.h.dev.uar_write32(4, r.cq.handle | CQ_ARM);
    r.kick();
    assert!(r.h.cqnes().is_empty(), "an empty CQ notifies nothing");
    r.post_ok(1);
    r.h.ring_sq(r.qp.handle);
    r.h.dev.run_until_idle();
    assert_eq!(r.h.cqnes(), vec![r.cq.handle], "the arm was still set");
    assert_eq!(r.wr_ids(), vec![1]);
}

#[test]
fn held_cqes_are_written_as_a_poll_would() {
    let mut r = rig(DeviceConfig {
        lazy_completion: true,
        ..DeviceConfig::default()
    });
    r.post_ok(1);
    r.h.ring_sq(r.qp.handle);
    r.h.dev.run_until_idle();
    assert_eq!(r.cq.tail(), 0, "held");
    r.kick();
    assert_eq!(r.cq.tail(), 1);
    assert_eq!(r.h.cqnes(), vec![r.cq.handle]);
    assert_eq!(r.wr_ids(), vec![1]);
    // A POLL of its own finds nothing more.
    r.h.dev.uar_write32(4, r.cq.handle | CQ_POLL);
    assert_eq!(r.cq.tail(), 1);
}

#[test]
fn other_qps_are_left_to_their_own_doorbells() {
    let r = rig(DeviceConfig::default());
    let pd = r.h.create_pd();
    let rc = r.h.create_qp(&QpSpec::rc(pd, r.cq.handle, r.cq.handle));
    r.h.rc_to_rts(rc.handle, 7);
    let mut rc = rc;
    rc.post_send(&SendWqe::new(9, 10, 2).at(24, &r.frmr_key.to_le_bytes()));
    r.kick();
    assert_eq!(r.cq.tail(), 0, "the RC QP's WQE waits for its doorbell");
    r.h.ring_sq(rc.handle);
    r.h.dev.run_until_idle();
    assert_eq!(r.wr_ids(), vec![9]);
}
