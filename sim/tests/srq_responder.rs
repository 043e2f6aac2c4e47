//! SRQ take/limit/error and the responder side of the transport boundary (§9, §13, §14;
//! M24, M25, M28, M43-M47).

use pvrdma_sim::device::{RecvCompletion, TakeError};
use pvrdma_sim::testutil::{Host, PdirBuf, QpSpec, Req, TestCq};
use pvrdma_sim::wqe::Cqe;

struct Srq {
    handle: u32,
    buf: PdirBuf,
    n: u32,
    tail: u32,
}

impl Srq {
    fn post(&mut self, wr_id: u64, sges: &[(u64, u32, u32)]) {
        let stride = 32; // roundup_pow2(16 + 16·1)
        let slot = (self.tail & (self.n - 1)) as usize;
        let mut img = vec![0u8; stride];
        img[0..8].copy_from_slice(&wr_id.to_le_bytes());
        img[8..12].copy_from_slice(&(sges.len() as u32).to_le_bytes());
        for (i, (a, l, k)) in sges.iter().enumerate() {
            let o = 16 + 16 * i;
            img[o..o + 8].copy_from_slice(&a.to_le_bytes());
            img[o + 8..o + 12].copy_from_slice(&l.to_le_bytes());
            img[o + 12..o + 16].copy_from_slice(&k.to_le_bytes());
        }
        self.buf.data.write(4096 + slot * stride, &img);
        self.tail = (self.tail + 1) & (2 * self.n - 1);
        self.buf.data.write_u32(8, self.tail);
    }
}

struct Rig {
    h: Host,
    pd: u32,
    cq: TestCq,
    srq: Srq,
    qps: Vec<u32>,
    _qp_mem: Vec<PdirBuf>,
}

fn rig(limit: u32, nqps: usize) -> Rig {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(64);
    let buf = PdirBuf::new(&h.dma, 3);
    let r = h.cmd_ok(
        &Req::new(17)
            .u64(16, buf.pdir())
            .u32(24, pd)
            .u32(28, 3)
            .u32(32, 8)
            .u32(36, 1)
            .u32(40, limit),
    );
    let srq = Srq {
        handle: r.u32(16),
        buf,
        n: 8,
        tail: 0,
    };
    let mut qps = Vec::new();
    let mut qp_mem = Vec::new();
    for _ in 0..nqps {
        let qp = h.create_qp(&QpSpec {
            srq: Some(srq.handle),
            ..QpSpec::rc(pd, cq.handle, cq.handle)
        });
        h.rc_to_rts(qp.handle, 7);
        qp_mem.push(qp.buf);
        qps.push(qp.handle);
    }
    Rig {
        h,
        pd,
        cq,
        srq,
        qps,
        _qp_mem: qp_mem,
    }
}

fn recv_ok(byte_len: u32) -> RecvCompletion {
    RecvCompletion {
        opcode: 128,
        byte_len,
        src_qp: 0x155,
        ..Default::default()
    }
}

#[test]
fn srq_take_advances_cons_head_and_completes_on_the_takers_cq() {
    let mut r = rig(0, 2);
    let mr = r.h.create_mr(r.pd, 0x8000, 4096, 1);
    r.srq.post(1, &[(0x8000, 64, mr.lkey)]);
    r.srq.post(2, &[(0x8040, 64, mr.lkey)]);
    r.h.dev.uar_write32(8, r.srq.handle | 1 << 30);
    r.h.dev.run_until_idle();
    let (a, b) = (r.qps[0], r.qps[1]);
    let (wa, wb) = r.h.dev.with_core(|c| {
        (
            c.take_recv(b).unwrap().unwrap(),
            c.take_recv(a).unwrap().unwrap(),
        )
    });
    assert_eq!((wa.wqe.wr_id, wb.wqe.wr_id), (1, 2));
    assert_eq!(r.srq.buf.data.read_u32(12), 2);
    r.h.dev.with_core(|c| {
        c.recv_scatter(b, wa.token, 0, b"payload").unwrap();
        assert_eq!(c.recv_scatter(b, wa.token, 60, b"toolong"), Err(1));
        assert!(c.complete_recv(b, wa.token, &recv_ok(7)));
        assert!(c.take_recv(a).unwrap().is_none());
    });
    assert_eq!(mr.buf.as_ref().unwrap().data.read_vec(0, 7), b"payload");
    assert_eq!(
        r.cq.poll(),
        vec![Cqe {
            wr_id: 1,
            qp: u64::from(b),
            opcode: 128,
            byte_len: 7,
            src_qp: 0x155,
            port_num: 1,
            ..Default::default()
        }]
    );
    // RQ doorbells for an SRQ QP are ignored.
    let ignored = r.h.dev.counters().db_ignored;
    r.h.dev.uar_write32(0, a | 1 << 31);
    assert_eq!(r.h.dev.counters().db_ignored, ignored + 1);
}

#[test]
fn srq_limit_event_is_one_shot_and_rearmed_by_modify() {
    let mut r = rig(2, 1);
    let q = r.qps[0];
    for i in 0..4 {
        r.srq.post(i, &[]);
    }
    let take = |r: &Rig| r.h.dev.with_core(|c| c.take_recv(q).unwrap().unwrap());
    take(&r); // 3 left
    take(&r); // 2 left: not below the limit
    assert!(r.h.events().is_empty());
    take(&r); // 1 left < 2 → event, limit 0
    assert_eq!(r.h.events(), vec![(15, r.srq.handle)]);
    assert_eq!(r.h.cmd_ok(&Req::new(19).u32(16, r.srq.handle)).u32(24), 0);
    take(&r);
    assert!(r.h.events().is_empty());
    // Re-arm: no event by itself even though 0 < limit.
    r.h.cmd_ok(&Req::new(18).u32(16, r.srq.handle).u32(20, 2).u32(32, 3));
    assert!(r.h.events().is_empty());
    r.srq.post(9, &[]);
    take(&r);
    assert_eq!(r.h.events(), vec![(15, r.srq.handle)]);
}

#[test]
fn corrupt_srq_prod_tail_is_srq_err_and_fails_takers() {
    let r = rig(0, 2);
    r.srq.buf.data.write_u32(8, 100);
    r.h.dev.uar_write32(8, r.srq.handle | 1 << 30);
    r.h.dev.run_until_idle();
    assert_eq!(r.h.events(), vec![(14, r.srq.handle)]);
    let q = r.qps[0];
    assert_eq!(r.h.dev.with_core(|c| c.take_recv(q)), Err(TakeError::Fatal));
    // QP_FATAL, then (flush done) QP_LAST_WQE_REACHED.
    assert_eq!(r.h.events(), vec![(1, q), (16, q)]);
    // Later doorbells are ignored; QUERY/MODIFY still work.
    r.h.dev.uar_write32(8, r.srq.handle | 1 << 30);
    r.h.dev.run_until_idle();
    assert!(r.h.events().is_empty());
    r.h.cmd_ok(&Req::new(19).u32(16, r.srq.handle));
    r.h.cmd_ok(&Req::new(18).u32(16, r.srq.handle).u32(20, 2).u32(32, 1));
}

#[test]
fn srq_qp_error_flushes_only_its_taken_wqe_then_last_wqe_reached() {
    let mut r = rig(0, 2);
    for i in 0..3 {
        r.srq.post(10 + i, &[]);
    }
    let (a, b) = (r.qps[0], r.qps[1]);
    r.h.dev.with_core(|c| c.take_recv(a).unwrap().unwrap());
    assert_eq!(r.h.modify_qp(a, 1, |x| x.u32(24, 6)).err(), 0);
    assert_eq!(
        r.cq.poll(),
        vec![Cqe {
            wr_id: 10,
            qp: u64::from(a),
            opcode: 128,
            status: 5,
            ..Default::default()
        }]
    );
    assert_eq!(r.h.events(), vec![(16, a)]);
    // The other QP still gets the remaining WQEs, in order.
    let w = r.h.dev.with_core(|c| c.take_recv(b).unwrap().unwrap());
    assert_eq!(w.wqe.wr_id, 11);
}

#[test]
fn malformed_srq_wqe_is_reported_to_the_responder() {
    let mut r = rig(0, 1);
    r.srq.post(1, &[(0, 0, 0)]);
    r.srq.buf.data.write_u32(4096 + 8, 2); // num_sge 2 > max_sge 1
    let q = r.qps[0];
    let w = r.h.dev.with_core(|c| c.take_recv(q).unwrap().unwrap());
    assert!(w.malformed);
    r.h.dev.with_core(|c| {
        c.complete_recv(
            q,
            w.token,
            &RecvCompletion {
                status: 2,
                ..Default::default()
            },
        )
    });
    assert_eq!(
        r.cq.poll(),
        vec![Cqe {
            wr_id: 1,
            qp: u64::from(q),
            opcode: 128,
            status: 2,
            ..Default::default()
        }]
    );
    assert_eq!(r.h.cmd_ok(&Req::new(11).u32(16, q)).u32(16), 6);
}

#[test]
fn remote_access_needs_rkey_rights_pd_and_range() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let pd2 = h.create_pd();
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle)).handle;
    let rw = h.create_mr(pd, 0x1_0000, 8192, 1 | 2 | 4);
    let ro = h.create_mr(pd, 0x1_0000, 8192, 4);
    let local = h.create_mr(pd, 0x1_0000, 8192, 1);
    let other = h.create_mr(pd2, 0x1_0000, 8192, 1 | 2 | 4);
    let dma_mr = h
        .cmd_ok(&Req::new(4).u32(40, pd).u32(44, 1).u32(48, 1))
        .u32(24);
    h.dev.with_core(|c| {
        assert!(c.remote_check(qp, rw.rkey, 0x1_0000, 8192, true));
        assert!(c.remote_check(qp, rw.rkey, 0x1_1FFF, 1, false));
        assert!(!c.remote_check(qp, rw.rkey, 0x1_1FFF, 2, false));
        assert!(!c.remote_check(qp, rw.rkey, 0xFFFF, 1, false));
        assert!(c.remote_check(qp, ro.rkey, 0x1_0000, 1, false));
        assert!(!c.remote_check(qp, ro.rkey, 0x1_0000, 1, true));
        assert!(!c.remote_check(qp, local.rkey, 0x1_0000, 1, false));
        assert!(!c.remote_check(qp, other.rkey, 0x1_0000, 1, false));
        assert!(!c.remote_check(qp, dma_mr, 0x1_0000, 1, false));
        assert!(!c.remote_check(qp, rw.rkey ^ 1, 0x1_0000, 1, false));
        // Zero-length accesses skip key and range checks.
        assert!(c.remote_check(qp, 0xDEAD_BEEF, 0, 0, true));
        assert!(c.remote_write(qp, rw.rkey, 0x1_0FFE, b"xyzw"));
    });
    let d = &rw.buf.as_ref().unwrap().data;
    assert_eq!(d.read_vec(0xFFE, 4), b"xyzw");
}

#[test]
fn remote_invalidate_applies_local_inv_rules_in_the_responder_pd() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle)).handle;
    let fr = h.create_frmr(pd, 2);
    let mr = h.create_mr(pd, 0, 4096, 1);
    h.dev.with_core(|c| {
        assert!(c.remote_invalidate(qp, fr.rkey));
        assert!(!c.remote_invalidate(qp, fr.rkey | 1));
        assert!(!c.remote_invalidate(qp, mr.rkey));
    });
}

#[test]
fn receive_completion_carries_invalidated_key_and_imm() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let mut qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    h.rc_to_rts(qp.handle, 7);
    qp.post_recv(1, &[]);
    qp.post_recv(2, &[]);
    let q = qp.handle;
    h.dev.with_core(|c| {
        let w = c.take_recv(q).unwrap().unwrap();
        let inv = RecvCompletion {
            opcode: 128,
            wc_flags: 4,
            imm_data: 0x1234_5601u32.to_le_bytes(),
            ..Default::default()
        };
        c.complete_recv(q, w.token, &inv);
        let w = c.take_recv(q).unwrap().unwrap();
        let imm = RecvCompletion {
            opcode: 129,
            byte_len: 5,
            wc_flags: 2,
            imm_data: [0xA, 0xB, 0xC, 0xD],
            ..Default::default()
        };
        c.complete_recv(q, w.token, &imm);
    });
    let cqes = cq.poll();
    assert_eq!(cqes.len(), 2);
    assert_eq!(
        (cqes[0].wc_flags, cqes[0].imm_data),
        (4, [0x01, 0x56, 0x34, 0x12])
    );
    assert_eq!(
        (cqes[1].opcode, cqes[1].byte_len, cqes[1].imm_data),
        (129, 5, [0xA, 0xB, 0xC, 0xD])
    );
    assert_eq!(qp.rq_cons(), 2);
}
