//! Every command with its success layout and error responses (§8; M8-M11, M38, M41, M43, M44).

use pvrdma_sim::DeviceConfig;
use pvrdma_sim::testutil::{Host, PdirBuf, QpSpec, Req};

#[test]
fn response_echoes_key_and_acks_with_high_bit() {
    let h = Host::default_up();
    let req = Req::new(2).u64(0, 0x0123_4567_89AB_CDEF);
    let r = h.cmd_ok(&req);
    assert_eq!(r.u64(0), 0x0123_4567_89AB_CDEF);
    assert_eq!(r.ack(), 0x8000_0002);
}

#[test]
fn query_port_reports_m41_values() {
    let h = Host::default_up();
    let r = h.cmd_ok(&Req::new(0).u8(16, 1));
    assert_eq!(r.ack(), 0x8000_0000);
    let o = 16;
    assert_eq!(r.u32(o), 4);
    assert_eq!(r.u32(o + 4), 3);
    assert_eq!(r.u32(o + 8), 3);
    assert_eq!(r.u32(o + 12), 16);
    assert_eq!(r.u32(o + 16), 1 << 26);
    assert_eq!(r.u32(o + 20), 0x8000_0000);
    assert_eq!(r.u32(o + 24), 0);
    assert_eq!(r.u16(o + 32), 1);
    assert_eq!(r.bytes[o + 43], 1);
    assert_eq!(r.bytes[o + 44], 32);
    assert_eq!(r.bytes[o + 45], 5);
    let h5 = Host::new(DeviceConfig {
        port_mtu: 5,
        ..Default::default()
    });
    let r = h5.cmd_ok(&Req::new(0).u8(16, 1));
    assert_eq!((r.u32(20), r.u32(24)), (5, 5));
    assert_eq!(h.cmd(&Req::new(0).u8(16, 2)).err(), 22);
}

#[test]
fn query_pkey_index_0_is_full_member_default() {
    let h = Host::default_up();
    let r = h.cmd_ok(&Req::new(1).u8(16, 1).u8(17, 0));
    assert_eq!(r.u16(16), 0xFFFF);
    assert_eq!(h.cmd(&Req::new(1).u8(16, 1).u8(17, 1)).err(), 22);
}

#[test]
fn pd_handles_are_lowest_free_and_limited_by_max_pd() {
    let mut cfg = DeviceConfig::default();
    cfg.caps.max_pd = 4;
    let h = Host::new(cfg);
    assert_eq!(h.create_pd(), 1);
    assert_eq!(h.create_pd(), 2);
    assert_eq!(h.create_pd(), 3);
    let r = h.cmd(&Req::new(2));
    assert_eq!((r.err_reg, r.err(), r.u32(16)), (12, 12, 0));
    h.cmd_ok(&Req::new(3).u32(16, 2));
    assert_eq!(h.create_pd(), 2);
    assert_eq!(h.cmd(&Req::new(3).u32(16, 9)).err(), 2);
    assert_eq!(h.cmd(&Req::new(2).u32(16, 5)).err(), 2); // no user contexts
}

#[test]
fn destroy_pd_in_use_is_busy() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let mr = h.create_mr(pd, 0x1000, 4096, 1);
    assert_eq!(h.cmd(&Req::new(3).u32(16, pd)).err(), 16);
    h.cmd_ok(&Req::new(5).u32(16, mr.handle));
    h.cmd_ok(&Req::new(3).u32(16, pd));
}

#[test]
fn create_mr_normal_returns_index_keys() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let a = h.create_mr(pd, 0x10_0800, 8192, 1 | 4);
    assert_eq!((a.handle, a.lkey, a.rkey), (1, 0x100, 0x100));
    let b = h.create_mr(pd, 0, 100, 0);
    assert_eq!((b.handle, b.lkey, b.rkey), (2, 0x200, 0x200));
    h.cmd_ok(&Req::new(5).u32(16, 1));
    let c = h.create_mr(pd, 0, 100, 0);
    assert_eq!(c.handle, 1);
    assert_eq!(h.cmd(&Req::new(5).u32(16, 7)).err(), 2);
}

#[test]
fn create_mr_rejects_bad_arguments_with_exact_codes() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let buf = PdirBuf::new(&h.dma, 2);
    let base = |start: u64, len: u64, access: u32, flags: u32, n: u32| {
        Req::new(4)
            .u64(16, start)
            .u64(24, len)
            .u64(32, buf.pdir())
            .u32(40, pd)
            .u32(44, access)
            .u32(48, flags)
            .u32(52, n)
    };
    // nchunks does not cover [start, start+len): 0x800 + 8192 needs 3 pages.
    assert_eq!(h.cmd(&base(0x800, 8192, 1, 0, 2)).err(), 22);
    // REMOTE_WRITE without LOCAL_WRITE.
    assert_eq!(h.cmd(&base(0, 4096, 2, 0, 1)).err(), 22);
    // Undefined access bit.
    assert_eq!(h.cmd(&base(0, 4096, 0x80, 0, 1)).err(), 22);
    // Unknown PD.
    assert_eq!(h.cmd(&base(0, 4096, 1, 0, 1).u32(40, 99)).err(), 2);
    // DMA MR may only have LOCAL_WRITE.
    assert_eq!(h.cmd(&base(0, 0, 1 | 4, 1, 0)).err(), 22);
    let r = h.cmd_ok(&base(0, 0, 1, 1, 0));
    assert_eq!(r.u32(20), r.u32(16) << 8);
    // FRMR: capacity 1..=512 and access 0.
    assert_eq!(h.cmd(&base(0, 0, 0, 2, 0)).err(), 22);
    assert_eq!(h.cmd(&base(0, 0, 0, 2, 513)).err(), 22);
    assert_eq!(h.cmd(&base(0, 0, 1, 2, 4)).err(), 22);
    h.cmd_ok(&base(0, 0, 0, 2, 512));
    // Both flags at once.
    assert_eq!(h.cmd(&base(0, 0, 0, 3, 4)).err(), 22);
    // Directory at unregistered memory → 22, never a panic.
    let bad = Req::new(4)
        .u64(24, 4096)
        .u64(32, 0x7777_0000)
        .u32(40, pd)
        .u32(44, 1)
        .u32(52, 1);
    let faults = h.dev.counters().dma_faults;
    assert_eq!(h.cmd(&bad).err(), 22);
    assert_eq!(h.dev.counters().dma_faults, faults + 1);
    // Unaligned directory.
    assert_eq!(
        h.cmd(&base(0, 4096, 1, 0, 1).u64(32, buf.pdir() + 8)).err(),
        22
    );
}

#[test]
fn frmr_limit_follows_configured_page_list_len() {
    let mut cfg = DeviceConfig::default();
    cfg.caps.max_fast_reg_page_list_len = 16;
    let h = Host::new(cfg);
    let pd = h.create_pd();
    assert_eq!(
        h.cmd(&Req::new(4).u32(40, pd).u32(48, 2).u32(52, 17)).err(),
        22
    );
    h.cmd_ok(&Req::new(4).u32(40, pd).u32(48, 2).u32(52, 16));
}

#[test]
fn create_cq_validates_size_and_pages() {
    let h = Host::default_up();
    let buf = PdirBuf::new(&h.dma, 3);
    let req = |cqe: u32, n: u32| Req::new(6).u64(16, buf.pdir()).u32(28, cqe).u32(32, n);
    let r = h.cmd_ok(&req(128, 3));
    assert_eq!((r.u32(16), r.u32(20)), (1, 128));
    assert_eq!(h.cmd(&req(128, 2)).err(), 22); // needs 1 + 2 pages
    assert_eq!(h.cmd(&req(100, 3)).err(), 22); // not a power of two
    assert_eq!(h.cmd(&req(0, 3)).err(), 22);
    assert_eq!(h.cmd(&req(131072, 3)).err(), 22); // > max_cqe
    assert_eq!(h.cmd(&req(64, 3).u32(24, 3)).err(), 2); // unknown context
    assert_eq!(h.cmd(&req(64, 2).u64(16, 0x5000)).err(), 22);
    assert_eq!(h.cmd(&Req::new(8).u32(16, 5)).err(), 2);
    h.cmd_ok(&Req::new(8).u32(16, 1));
}

#[test]
fn destroy_cq_in_use_by_qp_is_busy() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    assert_eq!(h.cmd(&Req::new(8).u32(16, cq.handle)).err(), 16);
    let r = h.cmd_ok(&Req::new(12).u32(16, qp.handle));
    assert_eq!(r.u32(16), 0);
    h.cmd_ok(&Req::new(8).u32(16, cq.handle));
}

#[test]
fn create_qp_v20_returns_handle_and_qpn_0x100_plus_handle() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    assert_eq!((qp.handle, qp.qpn), (1, 0x101));
    let r = h.cmd_ok(&Req::new(11).u32(16, qp.handle));
    assert_eq!(r.u32(16), 0); // RESET
    // cap echoes: max_send_wr @16+56
    assert_eq!(r.u32(16 + 56), 8);
    assert_eq!(r.u32(16 + 64), 2);
    let gsi = h.create_qp(&QpSpec {
        qp_type: 1,
        ..QpSpec::rc(pd, cq.handle, cq.handle)
    });
    assert_eq!((gsi.handle, gsi.qpn), (2, 1));
    // Only one GSI QP.
    let r = h.cmd(
        &Req::new(9)
            .u64(16, gsi.buf.pdir())
            .u32(24, pd)
            .u32(28, 1)
            .u32(32, 1)
            .u32(40, 8)
            .u32(44, 8)
            .u32(48, 1)
            .u32(52, 1)
            .u16(68, 2)
            .u16(70, 1)
            .u8(75, 1),
    );
    assert_eq!(r.err(), 22);
}

#[test]
fn create_qp_v18_response_layout_and_gsi_handle_1() {
    let h = Host::new(DeviceConfig {
        version: 18,
        ..Default::default()
    });
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let spec = QpSpec {
        send_wr: 16,
        recv_wr: 4,
        send_sge: 3,
        recv_sge: 1,
        ..QpSpec::rc(pd, cq.handle, cq.handle)
    };
    let qp = h.create_qp(&spec);
    assert_eq!((qp.handle, qp.qpn), (2, 2));
    let gsi = h.create_qp(&QpSpec { qp_type: 1, ..spec });
    assert_eq!((gsi.handle, gsi.qpn), (1, 1));
    // Response < v20: qpn @16, max_send_wr @20 ... max_inline_data @36.
    let buf = PdirBuf::new(&h.dma, 8);
    let r = h.cmd_ok(
        &Req::new(9)
            .u64(16, buf.pdir())
            .u32(24, pd)
            .u32(28, cq.handle)
            .u32(32, cq.handle)
            .u32(40, 16)
            .u32(44, 4)
            .u32(48, 3)
            .u32(52, 1)
            .u16(68, 8)
            .u16(70, 4)
            .u8(75, 4),
    );
    assert_eq!(r.u32(16), 3);
    assert_eq!(
        [r.u32(20), r.u32(24), r.u32(28), r.u32(32), r.u32(36)],
        [16, 4, 3, 1, 0]
    );
}

#[test]
fn create_qp_rejects_invalid_parameters_with_22() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let buf = PdirBuf::new(&h.dma, 8);
    // sq: 8 WRs × 128 B = 1 page + state page; rq: 8 × 32 B = 1 page → total 3, send_chunks 1.
    let ok = || {
        Req::new(9)
            .u64(16, buf.pdir())
            .u32(24, pd)
            .u32(28, cq.handle)
            .u32(32, cq.handle)
            .u32(40, 8)
            .u32(44, 8)
            .u32(48, 2)
            .u32(52, 1)
            .u16(68, 3)
            .u16(70, 1)
            .u8(75, 2)
    };
    let cases: Vec<(&str, Req)> = vec![
        ("uc type", ok().u8(75, 3)),
        ("send wr not pow2", ok().u32(40, 6)),
        ("send wr > max", ok().u32(40, 8192)),
        ("recv sge 0", ok().u32(52, 0)),
        ("send sge > max", ok().u32(48, 17)),
        ("inline", ok().u32(56, 64)),
        ("total pages short", ok().u16(68, 2)),
        ("send pages short", ok().u16(70, 0)),
        ("bad pd", ok().u32(24, 9)),
        ("bad cq", ok().u32(32, 9)),
        ("srq handle without is_srq", ok().u32(36, 1)),
        ("is_srq without srq", ok().u8(76, 1).u32(44, 0).u32(52, 0)),
        ("unregistered pdir", ok().u64(16, 0x9000)),
    ];
    for (what, req) in cases {
        let r = h.cmd(&req);
        assert_eq!((r.err_reg, r.err()), (22, 22), "{what}");
    }
    let r = h.cmd_ok(&ok());
    assert_eq!(r.u32(20), 1);
}

#[test]
fn qp_handles_exhaust_with_no_resources() {
    let mut cfg = DeviceConfig::default();
    cfg.caps.max_qp = 3;
    let h = Host::new(cfg);
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let spec = QpSpec::rc(pd, cq.handle, cq.handle);
    h.create_qp(&spec);
    h.create_qp(&spec);
    let buf = PdirBuf::new(&h.dma, 8);
    let r = h.cmd(
        &Req::new(9)
            .u64(16, buf.pdir())
            .u32(24, pd)
            .u32(28, 1)
            .u32(32, 1)
            .u32(40, 8)
            .u32(44, 8)
            .u32(48, 2)
            .u32(52, 2)
            .u16(68, 3)
            .u16(70, 1)
            .u8(75, 2),
    );
    assert_eq!(r.err(), 12);
}

#[test]
fn bind_stores_gid_and_destroy_needs_matching_gid() {
    let h = Host::default_up();
    let gid: Vec<u8> = (0..16).collect();
    let bind = |idx: u32| {
        Req::new(15)
            .u32(16, 1024)
            .u32(20, 0xFFF)
            .u32(24, idx)
            .bytes(28, &gid)
            .u8(44, 2)
    };
    h.cmd_ok(&bind(3));
    let e = h.dev.with_core(|c| c.gid(3)).unwrap();
    assert_eq!(e.gid.to_vec(), gid);
    assert_eq!(e.gid_type, 2);
    assert_eq!(h.cmd(&bind(16)).err(), 22);
    assert_eq!(
        h.cmd(&Req::new(16).u32(16, 3).bytes(20, &[9; 16])).err(),
        22
    );
    h.cmd_ok(&Req::new(16).u32(16, 3).bytes(20, &gid));
    assert!(h.dev.with_core(|c| c.gid(3)).is_none());
    assert_eq!(h.cmd(&Req::new(16).u32(16, 3).bytes(20, &gid)).err(), 22);
}

#[test]
fn unsupported_and_unknown_commands_answer_95() {
    let h = Host::default_up();
    for code in [7u32, 13, 14, 21, 0x1234] {
        let r = h.cmd(&Req::new(code));
        assert_eq!(
            (r.err_reg, r.err(), r.ack()),
            (95, 95, code | 0x8000_0000),
            "code {code}"
        );
    }
}

fn srq_req(h: &Host, buf: &PdirBuf, pd: u32, max_wr: u32, max_sge: u32, limit: u32, n: u32) -> Req {
    let _ = h;
    Req::new(17)
        .u64(16, buf.pdir())
        .u32(24, pd)
        .u32(28, n)
        .u32(32, max_wr)
        .u32(36, max_sge)
        .u32(40, limit)
}

#[test]
fn srq_commands_create_query_modify_destroy() {
    let h = Host::default_up();
    let pd = h.create_pd();
    // 16 WRs × 32 B = 1 page + state page.
    let buf = PdirBuf::new(&h.dma, 4);
    let r = h.cmd_ok(&srq_req(&h, &buf, pd, 16, 1, 4, 4));
    let srq = r.u32(16);
    assert_eq!(srq, 1);
    let q = h.cmd_ok(&Req::new(19).u32(16, srq));
    assert_eq!([q.u32(16), q.u32(20), q.u32(24), q.u32(28)], [16, 1, 4, 0]);
    // MODIFY_SRQ: only LIMIT, limit ≤ N.
    assert_eq!(
        h.cmd(&Req::new(18).u32(16, srq).u32(20, 1).u32(24, 32))
            .err(),
        22
    );
    assert_eq!(
        h.cmd(&Req::new(18).u32(16, srq).u32(20, 3).u32(32, 2))
            .err(),
        22
    );
    assert_eq!(
        h.cmd(&Req::new(18).u32(16, srq).u32(20, 2).u32(32, 17))
            .err(),
        22
    );
    assert_eq!(h.cmd(&Req::new(19).u32(16, srq)).u32(24), 4);
    h.cmd_ok(&Req::new(18).u32(16, srq).u32(20, 2).u32(32, 9));
    assert_eq!(h.cmd(&Req::new(19).u32(16, srq)).u32(24), 9);
    assert_eq!(h.cmd(&Req::new(18).u32(16, 5).u32(20, 2)).err(), 2);
    // Busy while a QP uses it.
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec {
        srq: Some(srq),
        ..QpSpec::rc(pd, cq.handle, cq.handle)
    });
    assert_eq!(h.cmd(&Req::new(20).u32(16, srq)).err(), 16);
    h.cmd_ok(&Req::new(12).u32(16, qp.handle));
    h.cmd_ok(&Req::new(20).u32(16, srq));
    assert_eq!(h.cmd(&Req::new(19).u32(16, srq)).err(), 2);
}

#[test]
fn create_srq_rejects_invalid_parameters() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let buf = PdirBuf::new(&h.dma, 4);
    let cases = [
        ("not pow2", srq_req(&h, &buf, pd, 12, 1, 0, 4)),
        ("> max_srq_wr", srq_req(&h, &buf, pd, 8192, 1, 0, 4)),
        ("sge 0", srq_req(&h, &buf, pd, 16, 0, 0, 4)),
        ("sge > max", srq_req(&h, &buf, pd, 16, 17, 0, 4)),
        ("limit > max_wr", srq_req(&h, &buf, pd, 16, 1, 17, 4)),
        ("bad pd", srq_req(&h, &buf, 7, 16, 1, 0, 4)),
        ("pages short", srq_req(&h, &buf, pd, 16, 1, 0, 1)),
        ("xrc", srq_req(&h, &buf, pd, 16, 1, 0, 4).u8(48, 1)),
    ];
    for (what, req) in cases {
        assert_eq!(h.cmd(&req).err(), 22, "{what}");
    }
}

#[test]
fn qp_on_srq_of_another_pd_is_rejected() {
    let h = Host::default_up();
    let pd1 = h.create_pd();
    let pd2 = h.create_pd();
    let buf = PdirBuf::new(&h.dma, 4);
    let srq = h.cmd_ok(&srq_req(&h, &buf, pd1, 16, 1, 0, 4)).u32(16);
    let cq = h.create_cq(16);
    let qbuf = PdirBuf::new(&h.dma, 4);
    let r = h.cmd(
        &Req::new(9)
            .u64(16, qbuf.pdir())
            .u32(24, pd2)
            .u32(28, cq.handle)
            .u32(32, cq.handle)
            .u32(36, srq)
            .u32(40, 8)
            .u32(48, 1)
            .u16(68, 2)
            .u16(70, 1)
            .u8(75, 2)
            .u8(76, 1),
    );
    assert_eq!(r.err(), 22);
}

#[test]
fn srq_commands_answer_95_without_srq_support() {
    let mut cfg = DeviceConfig::default();
    cfg.caps.max_srq = 0;
    let h = Host::new(cfg);
    for code in 17..=20 {
        assert_eq!(h.cmd(&Req::new(code)).err(), 95);
    }
}

#[test]
fn destroy_qp_reports_events_posted_for_it() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let mut qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    h.rc_to_rts(qp.handle, 1);
    // Corrupt SQ prod_tail → QP_FATAL (one event).
    qp.sq_tail = 17;
    qp.buf.data.write_u32(0, 17);
    h.dev.uar_write32(0, qp.handle | 1 << 30);
    h.dev.run_until_idle();
    assert_eq!(h.events(), vec![(1, qp.handle)]);
    let r = h.cmd_ok(&Req::new(12).u32(16, qp.handle));
    assert_eq!(r.u32(16), 1);
    assert_eq!(h.cmd(&Req::new(12).u32(16, qp.handle)).err(), 2);
}

/// Deterministic garbage: every command code with random fields never panics, always answers
/// with the right ack, and leaves the device usable.
#[test]
fn garbage_commands_never_panic_and_always_answer() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let _qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for round in 0..2000u32 {
        let code = round % 22;
        let mut req = Req::new(code);
        for i in 16..184 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly small values so handles and counts are sometimes valid.
            let b = if x.is_multiple_of(3) {
                (x >> 8) as u8
            } else {
                (x >> 8) as u8 & 3
            };
            req = req.u8(i, b);
        }
        let r = h.cmd(&req);
        assert_eq!(r.ack(), code | 0x8000_0000);
        assert_eq!(r.err_reg, u32::from(r.err()));
    }
    // Still alive and consistent.
    h.create_pd();
    h.dev.uar_write32(0, 1 | 3 << 30);
    h.dev.run_until_idle();
}

#[test]
fn test_hook_fails_the_nth_matching_command_without_executing_it() {
    let h = Host::default_up();
    // Count CREATE_PD (2) only: the second CREATE_PD fails with 12; QUERY_PORT is not counted.
    h.dev.with_core(|c| c.fail_nth_command(2, 12, 1 << 2));
    let first = h.create_pd();
    h.cmd_ok(&Req::new(0).u8(16, 1));
    assert!(h.dev.with_core(|c| c.command_fault_pending()));
    let r = h.cmd(&Req::new(2));
    assert_eq!((r.err_reg, r.err(), r.ack()), (12, 12, 0x8000_0002));
    assert!(!h.dev.with_core(|c| c.command_fault_pending()));
    assert_eq!(
        h.dev.with_core(|c| c.object_counts()).pds,
        1,
        "not executed"
    );
    // Disarmed after firing: the next CREATE_PD succeeds with the next free handle.
    assert_eq!(h.create_pd(), first + 1);
}
