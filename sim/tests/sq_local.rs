//! SQ processing without a network: local WQEs (FAST_REG_MR, LOCAL_INV), requester checks,
//! flush on ERR, RESET, retirement and host-corrupted indices (§10, §11, §14; M14-M17, M26,
//! M27, M29, M32, M33, M35).

use pvrdma_sim::testutil::{Host, PdirBuf, QpSpec, Req, SendWqe, TestCq, TestQp};
use pvrdma_sim::wqe::Cqe;

const SIGNALED: u32 = 2;
const FENCE: u32 = 1;
const INLINE: u32 = 8;
const SEND: u32 = 2;
const WRITE: u32 = 0;
const READ: u32 = 4;
const LOCAL_INV: u32 = 10;
const FAST_REG: u32 = 11;

type MakeWqe = dyn Fn(&Rig, u32, &PdirBuf) -> SendWqe;
type PickKey = fn(u32, u32, u32) -> u32;

struct Rig {
    h: Host,
    pd: u32,
    scq: TestCq,
    rcq: TestCq,
    qp: TestQp,
}

fn rig_with(spec: impl FnOnce(QpSpec) -> QpSpec, rts: bool) -> Rig {
    let h = Host::default_up();
    let pd = h.create_pd();
    let scq = h.create_cq(16);
    let rcq = h.create_cq(16);
    let qp = h.create_qp(&spec(QpSpec::rc(pd, scq.handle, rcq.handle)));
    if rts {
        h.rc_to_rts(qp.handle, 7);
    }
    Rig {
        h,
        pd,
        scq,
        rcq,
        qp,
    }
}

fn rig() -> Rig {
    rig_with(|s| s, true)
}

impl Rig {
    fn post(&mut self, w: SendWqe) {
        self.qp.post_send(&w);
        self.h.dev.uar_write32(0, self.qp.handle | 1 << 30);
        self.h.dev.run_until_idle();
    }
    fn state(&self) -> u32 {
        self.h.cmd_ok(&Req::new(11).u32(16, self.qp.handle)).u32(16)
    }
}

fn local_inv(wr_id: u64, key: u32, flags: u32) -> SendWqe {
    SendWqe::new(wr_id, LOCAL_INV, flags).at(24, &key.to_le_bytes())
}

fn fast_reg(
    wr_id: u64,
    iova: u64,
    pl: &PdirBuf,
    npages: u32,
    len: u32,
    access: u32,
    rkey: u32,
) -> SendWqe {
    SendWqe::new(wr_id, FAST_REG, SIGNALED)
        .at(32, &iova.to_le_bytes())
        .at(40, &pl.pdir().to_le_bytes())
        .at(48, &12u32.to_le_bytes())
        .at(52, &npages.to_le_bytes())
        .at(56, &len.to_le_bytes())
        .at(60, &access.to_le_bytes())
        .at(64, &rkey.to_le_bytes())
}

fn ok_cqe(wr_id: u64, qp: u32, opcode: u32) -> Cqe {
    Cqe {
        wr_id,
        qp: u64::from(qp),
        opcode,
        status: 0,
        byte_len: 0,
        port_num: 1,
        ..Default::default()
    }
}

fn err_cqe(wr_id: u64, qp: u32, opcode: u32, status: u32) -> Cqe {
    Cqe {
        wr_id,
        qp: u64::from(qp),
        opcode,
        status,
        ..Default::default()
    }
}

#[test]
fn signaled_local_inv_completes_with_opcode_7_and_retires() {
    let mut r = rig();
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(0xAB, fr.lkey, SIGNALED));
    assert_eq!(r.scq.poll(), vec![ok_cqe(0xAB, r.qp.handle, 7)]);
    assert_eq!(r.qp.sq_cons(), 1);
    assert!(r.rcq.poll().is_empty());
    assert_eq!(r.h.dev.counters().cqes, 1);
}

#[test]
fn unsignaled_success_retires_silently_unless_sq_sig_all() {
    let mut r = rig();
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(1, fr.lkey, 0));
    assert!(r.scq.poll().is_empty());
    assert_eq!(r.qp.sq_cons(), 1);

    let mut r = rig_with(|s| QpSpec { sq_sig_all: 1, ..s }, true);
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(2, fr.lkey, 0));
    assert_eq!(r.scq.poll(), vec![ok_cqe(2, r.qp.handle, 7)]);
}

#[test]
fn fast_reg_changes_key_byte_and_makes_the_mr_usable() {
    let mut r = rig();
    let fr = r.h.create_frmr(r.pd, 4);
    assert_eq!(fr.lkey & 0xFF, 0);
    let pages = PdirBuf::new(&r.h.dma, 2);
    pages.data.write(0x10, b"hello");
    let key = fr.lkey | 0x5A;
    r.post(fast_reg(7, 0x4000_0010, &pages, 2, 6000, 1 | 2 | 4, key));
    assert_eq!(r.scq.poll(), vec![ok_cqe(7, r.qp.handle, 8)]);
    let qp = r.qp.handle;
    r.h.dev.with_core(|c| {
        assert!(c.remote_check(qp, key, 0x4000_0010, 6000, true));
        assert!(!c.remote_check(qp, key, 0x4000_0010, 6001, true));
        assert!(!c.remote_check(qp, fr.lkey, 0x4000_0010, 16, false));
        let mut b = [0u8; 5];
        assert!(c.remote_read(qp, key, 0x4000_0010, &mut b));
        assert_eq!(&b, b"hello");
        assert!(c.remote_write(qp, key, 0x4000_0000 + 4096, b"PAGE1"));
    });
    assert_eq!(pages.data.read_vec(4096, 5), b"PAGE1");
    // Invalidate with the new key: the key is dead afterwards.
    r.post(local_inv(8, key, SIGNALED));
    assert_eq!(r.scq.poll(), vec![ok_cqe(8, r.qp.handle, 7)]);
    assert!(
        !r.h.dev
            .with_core(|c| c.remote_check(qp, key, 0x4000_0010, 1, false))
    );
}

#[test]
fn fast_reg_rule_violations_complete_loc_qp_op_err_and_fail_the_qp() {
    let cases: Vec<(&str, Box<MakeWqe>)> = vec![
        (
            "page shift 13",
            Box::new(|_, k, p| fast_reg(1, 0, p, 1, 100, 1, k).at(48, &13u32.to_le_bytes())),
        ),
        (
            "page list longer than capacity",
            Box::new(|_, k, p| fast_reg(1, 0, p, 5, 100, 1, k)),
        ),
        (
            "length beyond pages",
            Box::new(|_, k, p| fast_reg(1, 0x800, p, 1, 4096, 1, k)),
        ),
        (
            "access bit 4",
            Box::new(|_, k, p| fast_reg(1, 0, p, 1, 100, 0x10, k)),
        ),
        (
            "remote write without local write",
            Box::new(|_, k, p| fast_reg(1, 0, p, 1, 100, 2, k)),
        ),
        (
            "not an frmr",
            Box::new(|r, _, p| {
                let mr = r.h.create_mr(r.pd, 0, 4096, 1);
                fast_reg(1, 0, p, 1, 100, 1, mr.lkey | 1)
            }),
        ),
        (
            "frmr of another pd",
            Box::new(|r, _, p| {
                let pd2 = r.h.create_pd();
                let fr2 = r.h.create_frmr(pd2, 4);
                fast_reg(1, 0, p, 1, 100, 1, fr2.lkey | 1)
            }),
        ),
        (
            "page list unreadable",
            Box::new(|_, k, p| fast_reg(1, 0, p, 1, 100, 1, k).at(40, &0x3000u64.to_le_bytes())),
        ),
    ];
    for (what, make) in cases {
        let mut r = rig();
        let fr = r.h.create_frmr(r.pd, 4);
        let pages = PdirBuf::new(&r.h.dma, 4);
        let w = make(&r, fr.lkey | 0x11, &pages);
        r.post(w);
        assert_eq!(r.scq.poll(), vec![err_cqe(1, r.qp.handle, 8, 2)], "{what}");
        assert_eq!(r.state(), 6, "{what}");
    }
    // Registering an already valid FRMR fails too.
    let mut r = rig();
    let fr = r.h.create_frmr(r.pd, 4);
    let pages = PdirBuf::new(&r.h.dma, 4);
    r.post(fast_reg(1, 0, &pages, 1, 100, 1, fr.lkey | 1));
    r.post(fast_reg(2, 0, &pages, 1, 100, 1, fr.lkey | 2));
    assert_eq!(
        r.scq.poll(),
        vec![ok_cqe(1, r.qp.handle, 8), err_cqe(2, r.qp.handle, 8, 2)]
    );
}

#[test]
fn local_inv_needs_the_exact_current_key_of_an_frmr_in_the_pd() {
    let mut r = rig();
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(1, fr.lkey | 3, SIGNALED));
    assert_eq!(r.scq.poll(), vec![err_cqe(1, r.qp.handle, 7, 2)]);
    let mut r = rig();
    let mr = r.h.create_mr(r.pd, 0, 4096, 1);
    r.post(local_inv(1, mr.lkey, SIGNALED));
    assert_eq!(r.scq.poll(), vec![err_cqe(1, r.qp.handle, 7, 2)]);
}

#[test]
fn requester_rejects_bad_opcode_inline_and_too_many_sges() {
    let mut r = rig_with(|s| QpSpec { qp_type: 4, ..s }, false);
    let ud = r.qp.handle;
    let h = &r.h;
    assert_eq!(
        h.modify_qp(ud, 1 | 1 << 4 | 1 << 5 | 1 << 6, |q| q
            .u32(24, 1)
            .u8(24 + 45, 1))
            .err(),
        0
    );
    assert_eq!(h.modify_qp(ud, 1, |q| q.u32(24, 2)).err(), 0);
    assert_eq!(h.modify_qp(ud, 1 | 1 << 16, |q| q.u32(24, 3)).err(), 0);
    r.post(SendWqe::new(5, WRITE, SIGNALED));
    assert_eq!(r.scq.poll(), vec![err_cqe(5, ud, 1, 2)]);
    assert_eq!(r.state(), 6);

    let mut r = rig();
    r.post(SendWqe::new(6, SEND, SIGNALED | INLINE));
    assert_eq!(r.scq.poll(), vec![err_cqe(6, r.qp.handle, 0, 2)]);

    let mut r = rig();
    r.post(SendWqe::new(7, SEND, 0).num_sge(3));
    assert_eq!(r.scq.poll(), vec![err_cqe(7, r.qp.handle, 0, 2)]);

    let mut r = rig();
    r.post(SendWqe::new(8, 5, 0)); // atomic: out of scope
    assert_eq!(r.scq.poll(), vec![err_cqe(8, r.qp.handle, 0, 2)]);
}

#[test]
fn network_wqes_stay_queued_without_a_transport() {
    let mut r = rig();
    r.post(SendWqe::new(1, SEND, SIGNALED));
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(2, fr.lkey, SIGNALED));
    assert!(r.scq.poll().is_empty());
    assert_eq!(r.qp.sq_cons(), 0);
    assert_eq!(r.h.dev.counters().cqes, 0);
}

#[test]
fn modify_to_err_flushes_sq_then_rq_in_order_before_the_response() {
    let r = rig_with(|s| s, true);
    let mut r = Rig { ..r };
    // One CQ for both queues to see the global order.
    r.qp.post_recv(100, &[(0, 0, 0)]);
    r.qp.post_recv(101, &[(0, 0, 0)]);
    r.h.dev.uar_write32(0, r.qp.handle | 1 << 31);
    r.post(SendWqe::new(1, SEND, SIGNALED));
    r.post(SendWqe::new(2, WRITE, 0));
    r.post(SendWqe::new(3, READ, 0));
    let resp = r.h.modify_qp(r.qp.handle, 1, |q| q.u32(24, 6));
    assert_eq!(resp.err(), 0);
    // No process() call: flush CQEs were written inside the command.
    let q = r.qp.handle;
    assert_eq!(
        r.scq.poll(),
        vec![
            err_cqe(1, q, 0, 5),
            err_cqe(2, q, 1, 5),
            err_cqe(3, q, 2, 5)
        ]
    );
    assert_eq!(
        r.rcq.poll(),
        vec![err_cqe(100, q, 128, 5), err_cqe(101, q, 128, 5)]
    );
    assert_eq!((r.qp.sq_cons(), r.qp.rq_cons()), (3, 2));
    // Later posts are flushed at their doorbell.
    r.post(SendWqe::new(4, SEND, 0));
    assert_eq!(r.scq.poll(), vec![err_cqe(4, q, 0, 5)]);
    r.qp.post_recv(102, &[]);
    r.h.dev.uar_write32(0, q | 1 << 31);
    r.h.dev.run_until_idle();
    assert_eq!(r.rcq.poll(), vec![err_cqe(102, q, 128, 5)]);
}

#[test]
fn failing_wqe_cqe_precedes_flush_of_later_wqes() {
    let mut r = rig();
    let fr = r.h.create_frmr(r.pd, 4);
    r.qp.post_recv(50, &[]);
    // Post two WQEs before one doorbell: a bad LOCAL_INV then a SEND.
    r.qp.post_send(&local_inv(10, fr.lkey | 9, 0));
    r.qp.post_send(&SendWqe::new(11, SEND, 0));
    r.h.dev.uar_write32(0, r.qp.handle | 1 << 30 | 1 << 31);
    r.h.dev.run_until_idle();
    let q = r.qp.handle;
    assert_eq!(
        r.scq.poll(),
        vec![err_cqe(10, q, 7, 2), err_cqe(11, q, 0, 5)]
    );
    assert_eq!(r.rcq.poll(), vec![err_cqe(50, q, 128, 5)]);
    assert_eq!(r.state(), 6);
}

#[test]
fn wqes_posted_before_rts_run_on_reaching_rts() {
    let mut r = rig_with(|s| s, false);
    let fr = r.h.create_frmr(r.pd, 4);
    let q = r.qp.handle;
    r.h.modify_qp(q, 1 | 1 << 3 | 1 << 4 | 1 << 5, |x| {
        x.u32(24, 1).u8(24 + 45, 1)
    });
    r.post(local_inv(1, fr.lkey, SIGNALED));
    assert!(r.scq.poll().is_empty());
    r.h.rc_to_rts_from_init(q);
    assert_eq!(r.scq.poll(), vec![ok_cqe(1, q, 7)]);
}

#[test]
fn doorbells_for_reset_or_unknown_qps_are_ignored() {
    let mut r = rig_with(|s| s, false);
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(1, fr.lkey, SIGNALED));
    r.h.dev.uar_write32(0, 77 | 1 << 30);
    r.h.dev.uar_write32(4, 77 | 1 << 30);
    r.h.dev.run_until_idle();
    assert!(r.scq.poll().is_empty());
    assert_eq!(r.h.dev.counters().db_ignored, 3);
}

#[test]
fn modify_to_reset_drops_wqes_without_cqes_and_zeroes_indices() {
    let mut r = rig();
    r.post(SendWqe::new(1, SEND, SIGNALED));
    r.post(SendWqe::new(2, SEND, SIGNALED));
    assert_eq!(r.h.modify_qp(r.qp.handle, 1, |q| q.u32(24, 0)).err(), 0);
    assert!(r.scq.poll().is_empty());
    assert_eq!(r.qp.sq_cons(), 0);
    // The driver zeroes its indices too; the QP works again from index 0.
    r.qp.buf.data.write_u32(0, 0);
    r.qp.sq_tail = 0;
    r.h.rc_to_rts(r.qp.handle, 7);
    let fr = r.h.create_frmr(r.pd, 4);
    r.post(local_inv(3, fr.lkey, SIGNALED));
    assert_eq!(r.scq.poll(), vec![ok_cqe(3, r.qp.handle, 7)]);
    assert_eq!(r.qp.sq_cons(), 1);
}

#[test]
fn corrupt_sq_prod_tail_is_qp_fatal() {
    for bad in [16u32, 0xFFFF_FFFF, 9] {
        let mut r = rig();
        r.qp.buf.data.write_u32(0, bad);
        r.h.dev.uar_write32(0, r.qp.handle | 1 << 30);
        r.h.dev.run_until_idle();
        assert_eq!(r.h.events(), vec![(1, r.qp.handle)], "tail {bad}");
        assert_eq!(r.state(), 6);
        assert!(r.h.dev.counters().bad_indices >= 1);
        // Once in ERR, no second QP_FATAL.
        r.h.dev.uar_write32(0, r.qp.handle | 1 << 30);
        r.h.dev.run_until_idle();
        assert!(r.h.events().is_empty());
        let _ = &mut r;
    }
}

#[test]
fn corrupt_rq_prod_tail_is_qp_fatal() {
    let r = rig();
    r.qp.buf.data.write_u32(8, 40);
    r.h.dev.uar_write32(0, r.qp.handle | 1 << 31);
    r.h.dev.run_until_idle();
    assert_eq!(r.h.events(), vec![(1, r.qp.handle)]);
    assert_eq!(r.state(), 6);
}

#[test]
fn unreadable_wqe_page_is_qp_fatal() {
    let mut r = rig();
    // Point SQ page 1 (the first WQE page) at unregistered memory.
    r.qp.buf.tables[0].write_u64(8, 0x10_0000);
    let resp = r.h.cmd(&Req::new(12).u32(16, r.qp.handle));
    assert_eq!(resp.err(), 0);
    let q =
        r.h.create_qp_from(&r.qp.buf, &QpSpec::rc(r.pd, r.scq.handle, r.rcq.handle));
    r.h.rc_to_rts(q, 7);
    r.qp.handle = q;
    r.qp.sq_tail = 0;
    r.post(SendWqe::new(1, SEND, 0));
    assert_eq!(r.h.events(), vec![(1, q)]);
    assert_eq!(r.state(), 6);
}

#[test]
fn sge_checks_at_gather_give_loc_prot_err() {
    // Each case gets a fresh QP: the MR at handle 1 (PD 1, [0x1000, 0x2000), LOCAL_WRITE),
    // an MR of another PD at handle 2, an invalid FRMR at handle 3.
    let cases: [(&str, u64, u32, PickKey); 4] = [
        ("wrong key byte", 0x1000, 16, |mr, _, _| mr | 1),
        ("other pd", 0x1000, 16, |_, other, _| other),
        ("outside the mr", 0x1F00, 0x200, |mr, _, _| mr),
        ("invalid frmr", 0, 16, |_, _, fr| fr),
    ];
    for (i, (what, addr, len, key)) in cases.into_iter().enumerate() {
        let mut r = rig();
        let mr = r.h.create_mr(r.pd, 0x1000, 4096, 1);
        let pd2 = r.h.create_pd();
        let other = r.h.create_mr(pd2, 0x1000, 4096, 1);
        let fr = r.h.create_frmr(r.pd, 4);
        r.post(SendWqe::new(i as u64, SEND, 0).sge(addr, len, key(mr.lkey, other.lkey, fr.lkey)));
        let q = r.qp.handle;
        assert!(r.h.dev.with_core(|c| c.next_send(q)).is_none(), "{what}");
        assert_eq!(r.scq.poll(), vec![err_cqe(i as u64, q, 0, 4)], "{what}");
        assert_eq!(r.state(), 6, "{what}");
    }
}

#[test]
fn next_send_gathers_payload_and_complete_send_retires_in_order() {
    let mut r = rig();
    let mr = r.h.create_mr(r.pd, 0x2000_0FF0, 64, 1);
    let data = &mr.buf.as_ref().unwrap().data;
    data.write(0xFF0, b"0123456789ABCDEF");
    data.write(0x1000, b"ghij");
    let q = r.qp.handle;
    r.post(
        SendWqe::new(1, SEND, SIGNALED)
            .sge(0x2000_0FF0, 16, mr.lkey)
            .sge(0x2000_1000, 4, mr.lkey),
    );
    // A zero-length SGE skips key checks (M25).
    r.post(
        SendWqe::new(2, WRITE, 0)
            .at(32, &0x99u64.to_le_bytes())
            .sge(0x2000_1000, 2, mr.lkey)
            .sge(0, 0, 0xDEAD),
    );
    let (a, b) =
        r.h.dev
            .with_core(|c| (c.next_send(q).unwrap(), c.next_send(q).unwrap()));
    assert_eq!(a.payload, b"0123456789ABCDEFghij");
    assert_eq!(b.payload, b"gh");
    assert_eq!(b.wqe.rdma().0, 0x99);
    // Completing the second first retires nothing until the first is done.
    r.h.dev
        .with_core(|c| assert!(c.complete_send(q, b.index, 0, 2)));
    assert_eq!(r.qp.sq_cons(), 0);
    r.h.dev
        .with_core(|c| assert!(c.complete_send(q, a.index, 0, 20)));
    assert_eq!(r.qp.sq_cons(), 2);
    assert_eq!(
        r.scq.poll(),
        vec![Cqe {
            byte_len: 20,
            ..ok_cqe(1, q, 0)
        }]
    );
}

#[test]
fn fence_waits_for_earlier_reads_and_read_scatter_checks_local_write() {
    let mut r = rig();
    let ro = r.h.create_mr(r.pd, 0x1000, 4096, 0);
    let rw = r.h.create_mr(r.pd, 0x1000, 4096, 1);
    let q = r.qp.handle;
    r.post(SendWqe::new(1, READ, SIGNALED).sge(0x1000, 8, rw.lkey));
    r.post(SendWqe::new(2, SEND, FENCE));
    let first = r.h.dev.with_core(|c| c.next_send(q)).unwrap();
    assert!(r.h.dev.with_core(|c| c.next_send(q)).is_none());
    r.h.dev.with_core(|c| {
        c.scatter_read(q, first.index, 0, b"abcd").unwrap();
        c.scatter_read(q, first.index, 4, b"efgh").unwrap();
        assert_eq!(c.scatter_read(q, first.index, 8, b"x"), Err(4));
        c.complete_send(q, first.index, 0, 8);
    });
    assert_eq!(rw.buf.as_ref().unwrap().data.read_vec(0, 8), b"abcdefgh");
    assert!(r.h.dev.with_core(|c| c.next_send(q)).is_some());
    assert_eq!(
        r.scq.poll(),
        vec![Cqe {
            byte_len: 8,
            ..ok_cqe(1, q, 2)
        }]
    );

    let mut r2 = rig();
    let ro2 = r2.h.create_mr(r2.pd, 0x1000, 4096, 0);
    let q2 = r2.qp.handle;
    r2.post(SendWqe::new(9, READ, 0).sge(0x1000, 8, ro2.lkey));
    let w = r2.h.dev.with_core(|c| c.next_send(q2)).unwrap();
    let st =
        r2.h.dev
            .with_core(|c| c.scatter_read(q2, w.index, 0, b"zz"));
    assert_eq!(st, Err(4));
    r2.h.dev.with_core(|c| c.complete_send(q2, w.index, 4, 0));
    assert_eq!(r2.scq.poll(), vec![err_cqe(9, q2, 2, 4)]);
    let _ = ro;
}

#[test]
fn ud_send_longer_than_path_mtu_is_loc_len_err() {
    let mut r = rig_with(|s| QpSpec { qp_type: 4, ..s }, false);
    let ud = r.qp.handle;
    r.h.modify_qp(ud, 1 | 1 << 4 | 1 << 5 | 1 << 6, |q| {
        q.u32(24, 1).u8(24 + 45, 1)
    });
    r.h.modify_qp(ud, 1, |q| q.u32(24, 2));
    r.h.modify_qp(ud, 1 | 1 << 16, |q| q.u32(24, 3));
    let mr = r.h.create_mr(r.pd, 0, 8192, 1);
    r.post(SendWqe::new(1, SEND, 0).sge(0, 1025, mr.lkey));
    assert!(r.h.dev.with_core(|c| c.next_send(ud)).is_none());
    assert_eq!(r.scq.poll(), vec![err_cqe(1, ud, 0, 1)]);
}

#[test]
fn dma_mr_gather_past_registered_memory_is_loc_prot_err_not_a_crash() {
    let mut r = rig();
    let dma_key =
        r.h.cmd_ok(&Req::new(4).u32(40, r.pd).u32(44, 1).u32(48, 1))
            .u32(20);
    let q = r.qp.handle;
    let page = r.qp.buf.data.bus();
    r.post(SendWqe::new(1, SEND, 0).sge(page, 0x7FFF_FFFF, dma_key));
    assert!(r.h.dev.with_core(|c| c.next_send(q)).is_none());
    assert_eq!(r.scq.poll(), vec![err_cqe(1, q, 0, 4)]);
}

#[test]
fn garbage_wqes_never_panic() {
    let mut r = rig_with(|s| QpSpec { send_wr: 64, ..s }, true);
    let mr = r.h.create_mr(r.pd, 0, 8192, 7);
    let _ = mr;
    let mut x: u64 = 0x1234_5678_9ABC_DEF1;
    for i in 0..200u64 {
        let mut w = SendWqe::new(i, 0, 0);
        for b in 8..80 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.0[b] = if x.is_multiple_of(2) {
                (x >> 16) as u8 & 0xF
            } else {
                (x >> 16) as u8
            };
        }
        w = w.sge(
            x & 0x1FFF,
            (x >> 20) as u32 & 0xFFF,
            0x100 | ((x >> 40) as u32 & 1),
        );
        r.qp.post_send(&w);
        r.h.dev.uar_write32(0, r.qp.handle | 1 << 30);
        r.h.dev.run_until_idle();
        let q = r.qp.handle;
        while let Some(s) = r.h.dev.with_core(|c| c.next_send(q)) {
            r.h.dev.with_core(|c| c.complete_send(q, s.index, 0, 0));
        }
        if r.state() == 6 {
            break;
        }
    }
    assert_eq!(r.state(), 6);
}
