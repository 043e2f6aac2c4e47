//! Queues and notifications between the driver and the model (pvrdma.md §7, §9-§13, M14-M19,
//! M22, M26, M27, M40): WQEs written by the driver's work-queue writers and executed by the
//! model's local engine, CQEs written by the model and read by the driver's CQ reader, CQ
//! arming through the reader's doorbell up to its CqEvents handler, async events up to the
//! registered handlers.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use common::memory::ConsumerMem;
use common::objects::*;
use common::{Harness, Mode};
use pvrdma_host::current_processor;
use pvrdma_ndk::os::Processor;
use pvrdma_ndk::pvrdma::cmd::{
    CreateMr, DestroyMr, QpAttrMask, QpState, QpType, QueryQp, mr_flags,
};
use pvrdma_ndk::pvrdma::cqe::{wc_opcode, wc_status};
use pvrdma_ndk::pvrdma::device::{CqEvents, Device, QpEvents};
use pvrdma_ndk::pvrdma::eqe::EqeType;
use pvrdma_ndk::pvrdma::pdir::PageDir;
use pvrdma_ndk::pvrdma::uar::CqDoorbell;
use pvrdma_ndk::pvrdma::wqe::{AccessFlags, SendFlags, SqHeader, WrOpcode};
use pvrdma_sim::DeviceConfig;

/// Records CQ handler calls and the processor each ran on.
#[derive(Default)]
struct CqRec {
    completions: AtomicU32,
    errors: AtomicU32,
    on: Mutex<Vec<Option<u32>>>,
}

impl CqEvents for CqRec {
    fn completion(&self) {
        self.on.lock().unwrap().push(current_processor());
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
    fn error(&self) {
        self.errors.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct QpRec(Mutex<Vec<EqeType>>);

impl QpEvents for QpRec {
    fn event(&self, kind: EqeType) {
        self.0.lock().unwrap().push(kind);
    }
}

/// A PD, a CQ of `cq_entries`, an RC QP in RTS on it, and an FRMR of 4 pages with its page
/// list over 4 consumer pages.
struct Setup {
    pd: u32,
    cq: Cq,
    qp: Qp,
    frmr: u32,
    pl: PageDir,
    mem: ConsumerMem,
}

fn setup(h: &Harness, cq_entries: u32) -> Setup {
    let dev = h.dev();
    let pd = create_pd(dev);
    let cq = create_cq(dev, cq_entries).unwrap();
    let qp = create_qp(
        dev,
        &QpSpec {
            sq: (64, 1),
            ..QpSpec::rc(pd, cq.handle)
        },
    )
    .unwrap();
    to_rts(dev, qp.handle(), QpType::Rc, 0x77).unwrap();
    let frmr = dev
        .cmd()
        .execute(&CreateMr {
            start: 0,
            length: 0,
            pdir_dma: 0,
            pd_handle: pd,
            access_flags: AccessFlags::empty(),
            flags: mr_flags::FRMR,
            nchunks: 4,
        })
        .unwrap()
        .mr_handle;
    let mem = ConsumerMem::new(&h.rig.space, 4, 0x7700_0000);
    let pl = PageDir::new(dev.platform().dma(), 4).unwrap();
    // Pages in reverse order: the mapping must follow the list, not the memory order.
    for i in 0..4 {
        pl.set_page(i, mem.bus(3 - i as usize)).unwrap();
    }
    Setup {
        pd,
        cq,
        qp,
        frmr,
        pl,
        mem,
    }
}

fn teardown(h: Harness, s: Setup) {
    let dev = h.dev();
    destroy_qp(dev, s.qp);
    dev.cmd().execute(&DestroyMr { mr_handle: s.frmr }).unwrap();
    destroy_cq(dev, s.cq);
    destroy_pd(dev, s.pd);
    drop((s.pl, s.mem));
    h.finish();
}

/// What WQE builders need from a [`Setup`] (Copy, so building a WQE borrows nothing).
#[derive(Clone, Copy)]
struct K {
    frmr: u32,
    pl: u64,
    va: u64,
}

impl Setup {
    fn k(&self) -> K {
        K {
            frmr: self.frmr,
            pl: self.pl.dma(),
            va: self.mem.va,
        }
    }
}

/// A send WQE: its `wr_id` and header (no SGEs: these are local operations).
#[derive(Clone, Copy)]
struct Wr {
    wr_id: u64,
    h: SqHeader,
}

fn fast_reg(wr_id: u64, s: K, key: u8, flags: SendFlags) -> Wr {
    Wr {
        wr_id,
        h: SqHeader {
            op_word: SqHeader::op_word(WrOpcode::FastRegMr, flags),
            ex: 0,
            body: SqHeader::fast_reg_body(
                s.va + 0x10,
                s.pl,
                4,
                4 * 4096 - 0x10,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
                (s.frmr << 8) | u32::from(key),
            ),
        },
    }
}

fn local_inv(wr_id: u64, s: K, key: u8, flags: SendFlags) -> Wr {
    Wr {
        wr_id,
        h: SqHeader {
            op_word: SqHeader::op_word(WrOpcode::LocalInv, flags),
            ex: (s.frmr << 8) | u32::from(key),
            body: [0; 6],
        },
    }
}

/// Writes `wr` (no doorbell: a batch shares one).
fn write(qp: &mut Qp, wr: Wr) {
    qp.write_send(wr.wr_id, &wr.h, &[]);
}

/// Writes `wr` and rings the SQ doorbell.
fn post(qp: &mut Qp, wr: Wr) {
    write(qp, wr);
    qp.ring_send();
}

fn qp_state(dev: &Device, qp: u32) -> u32 {
    dev.cmd()
        .execute(&QueryQp {
            qp_handle: qp,
            attr_mask: QpAttrMask::STATE,
        })
        .unwrap()
        .qp_state
}

#[test]
fn fast_reg_and_local_inv_complete_with_cqes_read_by_the_driver() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 64);
    let k = s.k();
    let qh = s.qp.handle();
    let key = (s.frmr << 8) | 0x5A;
    post(
        &mut s.qp,
        fast_reg(0xF00D_0001, k, 0x5A, SendFlags::SIGNALED),
    );
    h.settle();
    let c = s.cq.poll();
    assert_eq!(c.len(), 1);
    let c = c[0];
    assert_eq!(c.wr_id, 0xF00D_0001);
    assert_eq!(c.qp, u64::from(qh));
    assert_eq!(c.status, wc_status::SUCCESS);
    assert_eq!(c.opcode, wc_opcode::FAST_REG_MR);
    assert_eq!(s.qp.q.sq.outstanding(), Ok(0), "cons_head advanced (M15)");
    // The registration follows the driver's page list: iova + 0x10 + 4096·k lands in page
    // list entry k, which is consumer page 3 − k.
    s.mem.buf.write(2 * 4096, b"page-two");
    let mut got = [0u8; 8];
    let va = s.mem.va + 0x1000; // list entry 1 → consumer page 2
    assert!(
        h.rig
            .model
            .with_core(|c| c.remote_read(qh, key, va, &mut got))
    );
    assert_eq!(&got, b"page-two");
    assert!(
        h.rig
            .model
            .with_core(|c| !c.remote_check(qh, key, s.mem.va, 4, false))
    );
    // Unsignalled LOCAL_INV: no CQE, slot retired; then the key no longer works.
    post(
        &mut s.qp,
        local_inv(0xF00D_0002, k, 0x5A, SendFlags::empty()),
    );
    h.settle();
    assert!(s.cq.poll().is_empty());
    assert_eq!(s.qp.q.sq.outstanding(), Ok(0));
    assert!(
        h.rig
            .model
            .with_core(|c| !c.remote_check(qh, key, va, 8, false))
    );
    // A batch under one doorbell: FAST_REG (new key), LOCAL_INV, both signalled.
    write(&mut s.qp, fast_reg(3, k, 0x5B, SendFlags::SIGNALED));
    write(&mut s.qp, local_inv(4, k, 0x5B, SendFlags::SIGNALED));
    s.qp.ring_send();
    h.settle();
    let c: Vec<_> = s.cq.poll().into_iter().collect();
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.opcode, c.status))
            .collect::<Vec<_>>(),
        [
            (3, wc_opcode::FAST_REG_MR, wc_status::SUCCESS),
            (4, wc_opcode::LOCAL_INV, wc_status::SUCCESS)
        ]
    );
    assert_eq!(h.rig.model.counters().cqes, 3);
    teardown(h, s);
}

#[test]
fn failed_local_wqe_errors_the_qp_and_flushes() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 64);
    let k = s.k();
    let dev = h.dev();
    let qh = s.qp.handle();
    // Registering a valid FRMR again fails (M26: LOC_QP_OP_ERR); what follows is flushed.
    write(&mut s.qp, fast_reg(10, k, 1, SendFlags::empty()));
    write(&mut s.qp, fast_reg(11, k, 2, SendFlags::empty()));
    write(&mut s.qp, local_inv(12, k, 2, SendFlags::SIGNALED));
    s.qp.ring_send();
    h.settle();
    let c: Vec<_> = s.cq.poll().into_iter().collect();
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [
            (11, wc_status::LOC_QP_OP_ERR),
            (12, wc_status::WR_FLUSH_ERR)
        ],
        "the unsignalled success makes no CQE; the error and the flush do"
    );
    assert!(c.iter().all(|c| c.qp == u64::from(qh) && c.byte_len == 0));
    assert_eq!(qp_state(dev, qh), QpState::Err as u32);
    assert_eq!(s.qp.q.sq.outstanding(), Ok(0));
    // Posting in ERR flushes at the doorbell (M17).
    post(&mut s.qp, local_inv(13, k, 1, SendFlags::empty()));
    h.settle();
    let c = s.cq.poll();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (13, wc_status::WR_FLUSH_ERR));
    teardown(h, s);
}

fn arm_and_notify(mode: Mode) {
    let h = Harness::new(mode, 2, DeviceConfig::default());
    let mut s = setup(&h, 64);
    let k = s.k();
    let dev = h.dev();
    let rec = Arc::new(CqRec::default());
    dev.register_cq(s.cq.handle, rec.clone()).unwrap();
    let wait_n = |n: u32| {
        h.rig.wait_for("notification", || {
            rec.completions.load(Ordering::SeqCst) >= n
        });
        h.settle();
        assert_eq!(rec.completions.load(Ordering::SeqCst), n);
    };
    // Not armed: a completion does not notify.
    post(&mut s.qp, fast_reg(1, k, 1, SendFlags::SIGNALED));
    h.settle();
    assert_eq!(s.cq.poll().len(), 1);
    assert_eq!(rec.completions.load(Ordering::SeqCst), 0);
    // Armed: the next completion notifies once; ARM twice is still one arm (M18).
    s.cq.reader.arm(false);
    s.cq.reader.arm(false);
    post(&mut s.qp, local_inv(2, k, 1, SendFlags::SIGNALED));
    wait_n(1);
    post(&mut s.qp, fast_reg(3, k, 2, SendFlags::SIGNALED));
    h.settle();
    assert_eq!(rec.completions.load(Ordering::SeqCst), 1, "arm consumed");
    assert_eq!(s.cq.poll().len(), 2);
    // Re-arm: one more notification.
    s.cq.reader.arm(false);
    post(&mut s.qp, local_inv(4, k, 2, SendFlags::SIGNALED));
    wait_n(2);
    assert_eq!(s.cq.poll().len(), 1);
    // ARM_SOL: a successful send completion is not solicited; nothing fires.
    s.cq.reader.arm(true);
    post(&mut s.qp, fast_reg(5, k, 3, SendFlags::SIGNALED));
    h.settle();
    assert_eq!(rec.completions.load(Ordering::SeqCst), 2);
    assert_eq!(s.cq.poll().len(), 1);
    dev.bell(CqDoorbell::poll(s.cq.handle)).ring();
    let st = dev.stats();
    let mc = h.rig.model.counters();
    assert_eq!(mc.cqnes, 2);
    assert_eq!(st.cq_notifications, 2);
    assert_eq!(st.dropped_notifications, 0);
    assert_eq!((mc.db_cq_arm, mc.db_cq_arm_sol, mc.db_cq_poll), (3, 1, 1));
    assert_eq!(rec.errors.load(Ordering::SeqCst), 0);
    assert!(dev.unregister_cq(s.cq.handle).is_some());
    // Unsolicited arm left pending; DESTROY_CQ clears it (M18).
    post(&mut s.qp, local_inv(6, k, 3, SendFlags::empty()));
    teardown(h, s);
}

#[test]
fn cq_arm_notifies_the_handler_once_per_arm() {
    arm_and_notify(Mode::Deterministic);
}

#[test]
fn cq_arm_notifies_the_handler_once_per_arm_threaded() {
    arm_and_notify(Mode::Threaded);
}

#[test]
fn cq_overflow_raises_cq_err_and_qp_fatal() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 2);
    let k = s.k();
    let dev = h.dev();
    let qh = s.qp.handle();
    let cqrec = Arc::new(CqRec::default());
    let qprec = Arc::new(QpRec::default());
    dev.register_cq(s.cq.handle, cqrec.clone()).unwrap();
    dev.register_qp(qh, qprec.clone()).unwrap();
    // Three signalled completions into a 2-entry CQ nobody polls.
    write(&mut s.qp, fast_reg(1, k, 1, SendFlags::SIGNALED));
    write(&mut s.qp, local_inv(2, k, 1, SendFlags::SIGNALED));
    write(&mut s.qp, fast_reg(3, k, 2, SendFlags::SIGNALED));
    s.qp.ring_send();
    h.settle();
    assert_eq!(
        cqrec.errors.load(Ordering::SeqCst),
        1,
        "CQ_ERR reached the CQ handler"
    );
    assert_eq!(*qprec.0.lock().unwrap(), [EqeType::QpFatal], "M40");
    assert_eq!(dev.stats().events, 2);
    assert_eq!(dev.stats().dropped_events, 0);
    assert_eq!(qp_state(dev, qh), QpState::Err as u32);
    // The two CQEs that fit are intact.
    let c: Vec<_> = s.cq.poll().into_iter().map(|c| c.wr_id).collect();
    assert_eq!(c, [1, 2]);
    dev.unregister_cq(s.cq.handle);
    dev.unregister_qp(qh);
    let dummy = create_dummy(&h, &s);
    let qp = std::mem::replace(&mut s.qp, dummy);
    assert_eq!(
        destroy_qp(dev, qp),
        1,
        "events_reported counts the QP_FATAL"
    );
    teardown(h, s);
}

/// A second QP to stand in for the destroyed one in `Setup` (destroyed by `teardown`).
fn create_dummy(h: &Harness, s: &Setup) -> Qp {
    create_qp(h.dev(), &QpSpec::rc(s.pd, s.cq.handle)).unwrap()
}

#[test]
fn corrupted_sq_index_raises_qp_fatal() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 64);
    let dev = h.dev();
    let qh = s.qp.handle();
    let rec = Arc::new(QpRec::default());
    dev.register_qp(qh, rec.clone()).unwrap();
    // Page 0 of the QP buffer through its directory, as the device finds it (§6, §9).
    let space = &h.rig.space;
    let table = space.read_u64(s.qp.q.pdir_dma()).unwrap();
    let page0 = space.read_u64(table).unwrap();
    space.write_u32(page0, 64 * 2 + 5).unwrap(); // prod_tail beyond 2·N: invalid (M14)
    s.qp.ring_send();
    h.settle();
    assert_eq!(*rec.0.lock().unwrap(), [EqeType::QpFatal]);
    assert_eq!(qp_state(dev, qh), QpState::Err as u32);
    // Validated on every read (M14): at the kick, and again by the flush on entering ERR.
    assert_eq!(h.rig.model.counters().bad_indices, 2);
    dev.unregister_qp(qh);
    let dummy = create_dummy(&h, &s);
    let qp = std::mem::replace(&mut s.qp, dummy);
    assert_eq!(destroy_qp(dev, qp), 1);
    teardown(h, s);
}

#[test]
fn cq_notification_runs_on_the_cq_target_processor() {
    let h = Harness::new(Mode::Deterministic, 4, DeviceConfig::default());
    let mut s = setup(&h, 64);
    let k = s.k();
    let dev = h.dev();
    let second = create_cq(dev, 16).unwrap();
    let (on3, here) = (Arc::new(CqRec::default()), Arc::new(CqRec::default()));
    dev.register_cq_on(s.cq.handle, on3.clone(), Processor::Index(3))
        .unwrap();
    dev.register_cq_on(second.handle, here.clone(), Processor::Current)
        .unwrap();
    for round in 1..=3u64 {
        s.cq.reader.arm(false);
        post(
            &mut s.qp,
            fast_reg(round, k, round as u8, SendFlags::SIGNALED),
        );
        post(
            &mut s.qp,
            local_inv(round + 10, k, round as u8, SendFlags::SIGNALED),
        );
        h.settle();
        assert_eq!(s.cq.poll().len(), 2);
    }
    assert_eq!(
        *on3.on.lock().unwrap(),
        [Some(3); 3],
        "one upcall per arm, on processor 3"
    );
    // An untargeted CQ is called inline from the vector-2 DPC, which the ISR queued to its
    // own processor (a simulated ISR on a non-executor thread → processor 0).
    let qp2 = create_qp(dev, &QpSpec::rc(s.pd, second.handle)).unwrap();
    to_rts(dev, qp2.handle(), QpType::Rc, 1).unwrap();
    let mut qp2 = qp2;
    second.reader.arm(false);
    post(&mut qp2, fast_reg(99, k, 9, SendFlags::SIGNALED));
    h.settle();
    assert_eq!(*here.on.lock().unwrap(), [Some(0)]);
    assert_eq!(dev.stats().cq_notifications, 4);
    dev.unregister_cq(s.cq.handle);
    dev.unregister_cq(second.handle);
    destroy_qp(dev, qp2);
    destroy_cq(dev, second);
    teardown(h, s);
}

#[derive(Default)]
struct PortRec(Mutex<Vec<(EqeType, u32)>>);

impl pvrdma_ndk::pvrdma::device::DeviceEvents for PortRec {
    fn port_event(&self, kind: EqeType, port: u32) {
        self.0.lock().unwrap().push((kind, port));
    }
    fn device_fatal(&self) {
        panic!("unexpected DEVICE_FATAL");
    }
}

/// The async ring with 4 pages has N = 1536 (non-power-of-two, §7): 3000 events in bursts
/// larger than its 512 usable slots wrap the indices several times; the model holds what does
/// not fit (M12) and both sides must agree on every index.
#[test]
fn async_ring_wraps_in_order() {
    let h = Harness::deterministic();
    let rec = Arc::new(PortRec::default());
    h.dev().set_device_events(Some(rec.clone()));
    let mut want = Vec::new();
    for burst in 0..5 {
        for _ in 0..600 {
            let up = h.rig.model.with_core(|c| {
                let up = !c.link_up();
                c.set_link(up);
                up
            });
            want.push((
                if up {
                    EqeType::PortActive
                } else {
                    EqeType::PortErr
                },
                1,
            ));
        }
        h.settle();
        assert_eq!(rec.0.lock().unwrap().len(), want.len(), "burst {burst}");
    }
    assert_eq!(*rec.0.lock().unwrap(), want);
    let st = h.dev().stats();
    assert_eq!((st.events, st.dropped_events), (3000, 0));
    assert!(!st.async_ring_broken);
    let mc = h.rig.model.counters();
    assert_eq!(
        (mc.events, mc.rings_abandoned, mc.bad_indices),
        (3000, 0, 0)
    );
    h.dev().set_device_events(None);
    h.finish();
}

/// The CQ-notification ring (N = 3072, 1024 usable) through more than two index cycles.
#[test]
fn cq_notification_ring_wraps() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 64);
    let k = s.k();
    let dev = h.dev();
    let rec = Arc::new(CqRec::default());
    dev.register_cq(s.cq.handle, rec.clone()).unwrap();
    const ROUNDS: u32 = 2 * 2048 + 100;
    for i in 0..ROUNDS {
        s.cq.reader.arm(false);
        let key = (i / 2) as u8;
        let wr = if i % 2 == 0 {
            fast_reg(u64::from(i), k, key, SendFlags::SIGNALED)
        } else {
            local_inv(u64::from(i), k, key, SendFlags::SIGNALED)
        };
        post(&mut s.qp, wr);
        h.settle();
        let c = s.cq.poll();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].wr_id, u64::from(i));
    }
    assert_eq!(rec.completions.load(Ordering::SeqCst), ROUNDS);
    let st = dev.stats();
    assert_eq!(st.cq_notifications, u64::from(ROUNDS));
    assert!(!st.cq_ring_broken);
    assert_eq!(h.rig.model.counters().rings_abandoned, 0);
    dev.unregister_cq(s.cq.handle);
    teardown(h, s);
}

/// RQ WQEs where the driver puts them (§9: after the SQ pages) are where the model reads
/// them: flushing on ERR reports their `wr_id`s in order (M32).
#[test]
fn receive_queue_doorbell_and_flush_in_order() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 64);
    let dev = h.dev();
    let qh = s.qp.handle();
    let page = s.mem.bus(0);
    for id in [0x51u64, 0x52, 0x53] {
        let sge = pvrdma_ndk::pvrdma::wqe::Sge {
            addr: page,
            length: 64,
            lkey: 0,
        };
        s.qp.write_recv(id, &[sge]);
    }
    s.qp.rq.as_ref().unwrap().ring_doorbell();
    h.settle();
    let mc = h.rig.model.counters();
    assert_eq!((mc.db_qp_recv, mc.db_ignored, mc.bad_indices), (1, 0, 0));
    assert!(s.cq.poll().is_empty(), "no transport: nothing received");
    modify(dev, qh, QpState::Err, QpAttrMask::empty(), rts_attrs(0)).unwrap();
    h.settle();
    let c: Vec<_> = s.cq.poll().into_iter().collect();
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.qp))
            .collect::<Vec<_>>(),
        [0x51, 0x52, 0x53].map(|id| (id, wc_opcode::RECV, wc_status::WR_FLUSH_ERR, u64::from(qh)))
    );
    assert_eq!(s.qp.q.rq.as_ref().unwrap().outstanding(), Ok(0));
    teardown(h, s);
}

/// M33: RESET drops posted WQEs without CQEs and zeroes the device's indices; the driver
/// zeroes its own, and the QP works again from index 0.
#[test]
fn reset_drops_waiting_wqes_and_restarts_at_zero() {
    let h = Harness::deterministic();
    let mut s = setup(&h, 64);
    let k = s.k();
    let dev = h.dev();
    let qh = s.qp.handle();
    modify(dev, qh, QpState::Reset, QpAttrMask::empty(), rts_attrs(0)).unwrap();
    s.qp.restart_sq();
    let a = rts_attrs(0x77);
    modify(
        dev,
        qh,
        QpState::Init,
        QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
        a,
    )
    .unwrap();
    // Posted in INIT: they wait for RTS (M17) ...
    post(&mut s.qp, fast_reg(1, k, 1, SendFlags::SIGNALED));
    post(&mut s.qp, local_inv(2, k, 1, SendFlags::SIGNALED));
    h.settle();
    assert!(s.cq.poll().is_empty());
    assert_eq!(s.qp.q.sq.outstanding(), Ok(2));
    // ... and RESET drops them silently.
    modify(dev, qh, QpState::Reset, QpAttrMask::empty(), a).unwrap();
    h.settle();
    assert_eq!(s.qp.sq.device_cons_head(), 0);
    s.qp.restart_sq();
    to_rts(dev, qh, QpType::Rc, 0x77).unwrap();
    post(&mut s.qp, fast_reg(3, k, 2, SendFlags::SIGNALED));
    h.settle();
    let c: Vec<_> = s.cq.poll().into_iter().collect();
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3]);
    assert_eq!(s.qp.sq.published(), 1);
    assert_eq!(h.rig.model.counters().cqes, 1);
    teardown(h, s);
}

#[derive(Default)]
struct SrqRec(Mutex<Vec<EqeType>>);

impl pvrdma_ndk::pvrdma::device::SrqEvents for SrqRec {
    fn event(&self, kind: EqeType) {
        self.0.lock().unwrap().push(kind);
    }
}

/// SRQ doorbell decode (UAR 0x8) and SRQ_ERR on a corrupted SRQ index (M47).
#[test]
fn srq_doorbell_and_srq_err() {
    let h = Harness::deterministic();
    let dev = h.dev();
    let pd = create_pd(dev);
    let mut srq = create_srq(dev, pd, 16, 1, 0).unwrap();
    let rec = Arc::new(SrqRec::default());
    dev.register_srq(srq.handle, rec.clone()).unwrap();
    for id in 0..3 {
        srq.write(id, &[]);
    }
    srq.writer.ring_doorbell();
    h.settle();
    let mc = h.rig.model.counters();
    assert_eq!((mc.db_srq, mc.db_ignored, mc.bad_indices), (1, 0, 0));
    assert!(rec.0.lock().unwrap().is_empty());
    // SRQ prod_tail lives at @8 of page 0 (§7).
    let space = &h.rig.space;
    let table = space.read_u64(srq.q.pdir_dma()).unwrap();
    let page0 = space.read_u64(table).unwrap();
    assert_eq!(space.read_u32(page0 + 8), Ok(3));
    space.write_u32(page0 + 8, 40).unwrap(); // beyond 2·N
    srq.writer.ring_doorbell();
    h.settle();
    assert_eq!(*rec.0.lock().unwrap(), [EqeType::SrqErr]);
    // An SRQ in error ignores its doorbell (M17).
    srq.writer.ring_doorbell();
    h.settle();
    assert_eq!(h.rig.model.counters().db_ignored, 1);
    dev.unregister_srq(srq.handle);
    destroy_srq(dev, srq);
    destroy_pd(dev, pd);
    h.finish();
}
