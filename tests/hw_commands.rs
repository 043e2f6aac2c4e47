//! Every command the hardware layer offers, round-tripped against the model (pvrdma.md §8,
//! M8-M11, M38, M43, M44): handles as M10 assigns them, responses decoded at the driver's
//! offsets, device error codes surfacing as `PvrdmaError` and NTSTATUS.

mod common;

use common::memory::ConsumerMem;
use common::objects::*;
use common::{Harness, Mode};
use pvrdma_ndk::ndk::NdkError;
use pvrdma_ndk::ndkpi::{NTSTATUS, STATUS_INTERNAL_ERROR, STATUS_INVALID_PARAMETER};
use pvrdma_ndk::pvrdma::cmd::{
    CreateBind, CreateCq, CreateMr, CreatePd, DestroyBind, DestroyCq, DestroyMr, DestroyPd,
    ModifySrq, QpAttrMask, QpState, QpType, QueryPkey, QueryPort, QuerySrq, SrqAttr, code,
    mr_flags, srq_attr_mask,
};
use pvrdma_ndk::pvrdma::pdir::PageDir;
use pvrdma_ndk::pvrdma::wqe::AccessFlags;
use pvrdma_sim::{DeviceConfig, ObjectCounts};

/// The NTSTATUS a consumer sees for a device error.
fn status(e: pvrdma_ndk::pvrdma::PvrdmaError) -> NTSTATUS {
    NdkError::from(e).to_ntstatus()
}

fn counts(pds: usize, mrs: usize, cqs: usize, qps: usize, srqs: usize) -> ObjectCounts {
    ObjectCounts {
        pds,
        mrs,
        cqs,
        qps,
        srqs,
    }
}

#[test]
fn query_port_and_pkey() {
    let h = Harness::deterministic();
    let p = h.dev().cmd().execute(&QueryPort { port_num: 1 }).unwrap();
    assert_eq!((p.state, p.max_mtu, p.active_mtu), (4, 3, 3));
    assert_eq!(p.gid_tbl_len, 16);
    assert_eq!(p.max_msg_sz, 0x8000_0000);
    assert_eq!(p.port_cap_flags, 1 << 26);
    assert_eq!(p.pkey_tbl_len, 1);
    assert_eq!((p.active_width, p.active_speed, p.phys_state), (1, 32, 5));
    let e = h
        .dev()
        .cmd()
        .execute(&QueryPort { port_num: 2 })
        .unwrap_err();
    assert_eq!(e, dev_err(code::QUERY_PORT, 22));
    assert_eq!(status(e), STATUS_INVALID_PARAMETER);
    let cmd = QueryPkey {
        port_num: 1,
        index: 0,
    };
    assert_eq!(h.dev().cmd().execute(&cmd), Ok(0xFFFF));
    let bad = QueryPkey {
        port_num: 1,
        index: 1,
    };
    assert_eq!(
        h.dev().cmd().execute(&bad),
        Err(dev_err(code::QUERY_PKEY, 22))
    );
    h.finish();
}

#[test]
fn pd_handles_and_errors() {
    let h = Harness::deterministic();
    let dev = h.dev();
    assert_eq!(create_pd(dev), 1);
    assert_eq!(create_pd(dev), 2);
    // A user context that does not exist (no CREATE_UC): unknown handle.
    let e = dev.cmd().execute(&CreatePd { ctx_handle: 5 }).unwrap_err();
    assert_eq!(e, dev_err(code::CREATE_PD, 2));
    assert_eq!(status(e), STATUS_INTERNAL_ERROR);
    destroy_pd(dev, 1);
    assert_eq!(create_pd(dev), 1, "lowest free handle (M10)");
    assert_eq!(h.rig.model_objects(), counts(2, 0, 0, 0, 0));
    destroy_pd(dev, 1);
    destroy_pd(dev, 2);
    // A refused command ends without waiting (ERR, §8 step 3), but its response and vector 0
    // still come (M9): with nothing outstanding, the driver counts the interrupt as stale.
    assert_eq!(
        dev.cmd().execute(&DestroyPd { pd_handle: 77 }),
        Err(dev_err(code::DESTROY_PD, 2))
    );
    h.settle();
    let st = dev.cmd().stats();
    assert_eq!((st.submitted, st.responses, st.rejected), (8, 6, 2));
    assert_eq!(st.stale_interrupts, 1);
    assert_eq!(h.rig.model.counters().command_errors, 2);
    assert_eq!(
        h.dev().stats().interrupts[0],
        h.rig.model.counters().interrupts[0]
    );
    h.finish();
}

#[test]
fn memory_regions_normal_dma_frmr() {
    let h = Harness::deterministic();
    let dev = h.dev();
    let pd = create_pd(dev);
    // Normal MR over 3 consumer pages, starting 0x80 into the first.
    let mem = ConsumerMem::new(&h.rig.space, 3, 0x5000_0000);
    let dir = PageDir::new(dev.platform().dma(), 3).unwrap();
    for i in 0..3 {
        dir.set_page(i, mem.bus(i as usize)).unwrap();
    }
    let normal = CreateMr {
        start: mem.va + 0x80,
        length: 2 * 4096,
        pdir_dma: dir.dma(),
        pd_handle: pd,
        access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        flags: mr_flags::NORMAL,
        nchunks: 3,
    };
    let r = dev.cmd().execute(&normal).unwrap();
    assert_eq!((r.mr_handle, r.lkey, r.rkey), (1, 0x100, 0x100));
    // nchunks not covering [start, start + length): 2 pages for 0x80 + 8 KiB.
    let short = CreateMr {
        nchunks: 2,
        ..normal
    };
    assert_eq!(dev.cmd().execute(&short), Err(dev_err(code::CREATE_MR, 22)));
    // REMOTE_WRITE without LOCAL_WRITE breaks the LOCAL_WRITE rule.
    let rule = CreateMr {
        access_flags: AccessFlags::REMOTE_WRITE,
        ..normal
    };
    assert_eq!(dev.cmd().execute(&rule), Err(dev_err(code::CREATE_MR, 22)));
    // DMA MR: LOCAL_WRITE only.
    let dma_mr = CreateMr {
        start: 0,
        length: 0,
        pdir_dma: 0,
        pd_handle: pd,
        access_flags: AccessFlags::LOCAL_WRITE,
        flags: mr_flags::DMA,
        nchunks: 0,
    };
    let d = dev.cmd().execute(&dma_mr).unwrap();
    assert_eq!((d.mr_handle, d.lkey), (2, 0x200));
    let wide = CreateMr {
        access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        ..dma_mr
    };
    assert_eq!(dev.cmd().execute(&wide), Err(dev_err(code::CREATE_MR, 22)));
    // FRMR: capacity within max_fast_reg_page_list_len, access 0.
    let frmr = CreateMr {
        flags: mr_flags::FRMR,
        access_flags: AccessFlags::empty(),
        nchunks: 512,
        ..dma_mr
    };
    let f = dev.cmd().execute(&frmr).unwrap();
    assert_eq!((f.mr_handle, f.lkey, f.rkey), (3, 0x300, 0x300));
    let too_big = CreateMr {
        nchunks: 513,
        ..frmr
    };
    assert_eq!(
        dev.cmd().execute(&too_big),
        Err(dev_err(code::CREATE_MR, 22))
    );
    // A PD with MRs is busy; an unknown PD is an unknown handle.
    let e = dev.cmd().execute(&DestroyPd { pd_handle: pd }).unwrap_err();
    assert_eq!(e, dev_err(code::DESTROY_PD, 16));
    assert_eq!(status(e), STATUS_INTERNAL_ERROR);
    let orphan = CreateMr {
        pd_handle: 9,
        ..dma_mr
    };
    assert_eq!(dev.cmd().execute(&orphan), Err(dev_err(code::CREATE_MR, 2)));
    assert_eq!(h.rig.model_objects(), counts(1, 3, 0, 0, 0));
    for mr_handle in [1, 2, 3] {
        dev.cmd().execute(&DestroyMr { mr_handle }).unwrap();
    }
    assert_eq!(
        dev.cmd().execute(&DestroyMr { mr_handle: 1 }),
        Err(dev_err(code::DESTROY_MR, 2))
    );
    destroy_pd(dev, pd);
    drop(dir);
    drop(mem);
    h.finish();
}

#[test]
fn completion_queues() {
    let h = Harness::deterministic();
    let dev = h.dev();
    let a = create_cq(dev, 64).unwrap();
    let b = create_cq(dev, 4096).unwrap();
    assert_eq!((a.handle, b.handle), (1, 2));
    assert_eq!(b.ring.nchunks(), 65);
    // Non-power-of-two, above max_cqe, too few pages: all 22 (M11).
    let ring = &a.ring;
    for (cqe, nchunks) in [(48, ring.nchunks()), (131_072, 2049), (128, 2)] {
        let e = dev
            .cmd()
            .execute(&CreateCq {
                pdir_dma: ring.pdir_dma(),
                ctx_handle: 0,
                cqe,
                nchunks,
            })
            .unwrap_err();
        assert_eq!(
            e,
            dev_err(code::CREATE_CQ, 22),
            "cqe {cqe} nchunks {nchunks}"
        );
    }
    assert_eq!(
        dev.cmd().execute(&DestroyCq { cq_handle: 3 }),
        Err(dev_err(code::DESTROY_CQ, 2))
    );
    destroy_cq(dev, a);
    destroy_cq(dev, b);
    h.finish();
}

fn qp_walk(version: u32) {
    let h = Harness::new(
        Mode::Deterministic,
        2,
        DeviceConfig {
            version,
            ..DeviceConfig::default()
        },
    );
    let dev = h.dev();
    let pd = create_pd(dev);
    let cq = create_cq(dev, 64).unwrap();
    // RC: handle and QPN per M10.
    let spec = QpSpec {
        sq: (16, 2),
        rq: Some((32, 3)),
        ..QpSpec::rc(pd, cq.handle)
    };
    let rc = create_qp(dev, &spec).unwrap();
    let (want_handle, want_qpn) = if version >= 20 { (1, 0x101) } else { (2, 2) };
    assert_eq!(
        (rc.resp.qp_handle, rc.resp.qpn),
        (want_handle, want_qpn),
        "v{version}"
    );
    assert_eq!(
        (
            rc.resp.max_send_wr,
            rc.resp.max_recv_wr,
            rc.resp.max_send_sge,
            rc.resp.max_recv_sge,
            rc.resp.max_inline_data
        ),
        (16, 32, 2, 3, 0),
        "caps echoed in the v{version} layout"
    );
    let qh = rc.handle();
    let q = |h: u32| {
        dev.cmd()
            .execute(&pvrdma_ndk::pvrdma::cmd::QueryQp {
                qp_handle: h,
                attr_mask: QpAttrMask::all(),
            })
            .unwrap()
    };
    assert_eq!(q(qh).qp_state, QpState::Reset as u32);
    // RESET → RTS is no transition; INIT without its required attributes is refused.
    let a = rts_attrs(0x42);
    assert_eq!(
        modify(dev, qh, QpState::Rts, QpAttrMask::empty(), a),
        Err(dev_err(code::MODIFY_QP, 22))
    );
    assert_eq!(
        modify(dev, qh, QpState::Init, QpAttrMask::PORT, a),
        Err(dev_err(code::MODIFY_QP, 22))
    );
    assert_eq!(
        modify(dev, 999, QpState::Init, QpAttrMask::empty(), a),
        Err(dev_err(code::MODIFY_QP, 2))
    );
    to_rts(dev, qh, QpType::Rc, 0x42).unwrap();
    let got = q(qh);
    assert_eq!((got.qp_state, got.cur_qp_state), (3, 3));
    assert_eq!(got.path_mtu, 3);
    assert_eq!(got.dest_qp_num, 0x42);
    assert_eq!((got.rq_psn, got.sq_psn), (a.rq_psn, a.sq_psn));
    assert_eq!(got.qp_access_flags, a.qp_access_flags);
    assert_eq!((got.port_num, got.pkey_index), (1, 0));
    assert_eq!(
        (got.max_rd_atomic, got.max_dest_rd_atomic, got.min_rnr_timer),
        (4, 5, 12)
    );
    assert_eq!((got.timeout, got.retry_cnt, got.rnr_retry), (14, 7, 6));
    assert_eq!(got.ah_attr.dgid, a.ah_attr.dgid);
    assert_eq!(got.ah_attr.dmac, a.ah_attr.dmac);
    assert_eq!((got.ah_attr.hop_limit, got.ah_attr.ah_flags), (64, 1));
    assert_eq!(
        (
            got.cap.max_send_wr,
            got.cap.max_recv_wr,
            got.cap.max_send_sge,
            got.cap.max_recv_sge
        ),
        (16, 32, 2, 3)
    );
    // UD and GSI.
    let ud = create_qp(
        dev,
        &QpSpec {
            ty: QpType::Ud,
            ..QpSpec::rc(pd, cq.handle)
        },
    )
    .unwrap();
    to_rts(dev, ud.handle(), QpType::Ud, 0).unwrap();
    assert_eq!(q(ud.handle()).qkey, a.qkey);
    let gsi_spec = QpSpec {
        ty: QpType::Gsi,
        ..QpSpec::rc(pd, cq.handle)
    };
    let gsi = create_qp(dev, &gsi_spec).unwrap();
    assert_eq!(gsi.resp.qpn, 1, "GSI QPN (M10)");
    if version < 20 {
        assert_eq!(gsi.handle(), 1);
    }
    to_rts(dev, gsi.handle(), QpType::Gsi, 0).unwrap();
    assert_eq!(q(gsi.handle()).qp_state, 3);
    assert_eq!(
        create_qp(dev, &gsi_spec).err(),
        Some(dev_err(code::CREATE_QP, 22)),
        "one GSI QP"
    );
    // A referenced CQ is busy; back to RESET and ERR are always allowed.
    let e = dev
        .cmd()
        .execute(&DestroyCq {
            cq_handle: cq.handle,
        })
        .unwrap_err();
    assert_eq!(e, dev_err(code::DESTROY_CQ, 16));
    modify(dev, qh, QpState::Err, QpAttrMask::empty(), a).unwrap();
    assert_eq!(q(qh).qp_state, QpState::Err as u32);
    modify(dev, qh, QpState::Reset, QpAttrMask::empty(), a).unwrap();
    assert_eq!(q(qh).qp_state, 0);
    assert_eq!(h.rig.model_objects(), counts(1, 0, 1, 3, 0));
    for qp in [rc, ud, gsi] {
        assert_eq!(destroy_qp(dev, qp), 0, "no events reported");
    }
    destroy_cq(dev, cq);
    destroy_pd(dev, pd);
    h.finish();
}

#[test]
fn queue_pairs_v20() {
    qp_walk(20);
}

#[test]
fn queue_pairs_v19_and_v18_layout() {
    qp_walk(19);
    qp_walk(18);
}

#[test]
fn shared_receive_queues() {
    let h = Harness::deterministic();
    let dev = h.dev();
    let pd = create_pd(dev);
    let cq = create_cq(dev, 64).unwrap();
    let srq = create_srq(dev, pd, 64, 2, 8).unwrap();
    assert_eq!(srq.handle, 1);
    let query = |s| dev.cmd().execute(&QuerySrq { srq_handle: s });
    assert_eq!(
        query(1),
        Ok(SrqAttr {
            max_wr: 64,
            max_sge: 2,
            srq_limit: 8
        })
    );
    let limit = ModifySrq {
        srq_handle: 1,
        attr_mask: srq_attr_mask::LIMIT,
        attr: SrqAttr {
            srq_limit: 32,
            ..SrqAttr::default()
        },
    };
    dev.cmd().execute(&limit).unwrap();
    assert_eq!(query(1).unwrap().srq_limit, 32);
    let resize = ModifySrq {
        attr_mask: srq_attr_mask::MAX_WR,
        ..limit
    };
    assert_eq!(
        dev.cmd().execute(&resize),
        Err(dev_err(code::MODIFY_SRQ, 22)),
        "resize unsupported (M44)"
    );
    assert_eq!(query(5), Err(dev_err(code::QUERY_SRQ, 2)));
    assert_eq!(
        create_srq(dev, pd, 64, 2, 65).err(),
        Some(dev_err(code::CREATE_SRQ, 22)),
        "srq_limit > max_wr"
    );
    // A QP on the SRQ references it.
    let qp = create_qp(
        dev,
        &QpSpec {
            rq: None,
            srq: Some(srq.handle),
            ..QpSpec::rc(pd, cq.handle)
        },
    )
    .unwrap();
    assert_eq!(qp.q.layout.total_chunks, 2, "no RQ pages with an SRQ");
    let e = dev
        .cmd()
        .execute(&pvrdma_ndk::pvrdma::cmd::DestroySrq { srq_handle: 1 })
        .unwrap_err();
    assert_eq!(e, dev_err(code::DESTROY_SRQ, 16));
    destroy_qp(dev, qp);
    destroy_srq(dev, srq);
    destroy_cq(dev, cq);
    destroy_pd(dev, pd);
    h.finish();
}

#[test]
fn srq_commands_unsupported_without_srqs() {
    let mut m = DeviceConfig::default();
    m.caps.max_srq = 0;
    let h = Harness::new(Mode::Deterministic, 1, m);
    let pd = create_pd(h.dev());
    let e = create_srq(h.dev(), pd, 64, 1, 0).err().unwrap();
    assert_eq!(e, dev_err(code::CREATE_SRQ, 95));
    assert_eq!(status(e), STATUS_INVALID_PARAMETER);
    destroy_pd(h.dev(), pd);
    h.finish();
}

#[test]
fn gid_bind_and_unbind() {
    let h = Harness::deterministic();
    let dev = h.dev();
    let gid = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let bind = CreateBind {
        mtu: 1024,
        vlan: 0xFFF,
        index: 3,
        new_gid: gid,
        gid_type: 2,
    };
    dev.cmd().execute(&bind).unwrap();
    let e = h.rig.model.with_core(|c| c.gid(3)).unwrap();
    assert_eq!((e.gid, e.gid_type), (gid, 2));
    let out_of_table = CreateBind { index: 16, ..bind };
    assert_eq!(
        dev.cmd().execute(&out_of_table),
        Err(dev_err(code::CREATE_BIND, 22))
    );
    let wrong = DestroyBind {
        index: 3,
        dest_gid: [0; 16],
    };
    assert_eq!(
        dev.cmd().execute(&wrong),
        Err(dev_err(code::DESTROY_BIND, 22))
    );
    dev.cmd()
        .execute(&DestroyBind {
            index: 3,
            dest_gid: gid,
        })
        .unwrap();
    assert_eq!(h.rig.model.with_core(|c| c.bound_gids()), 0);
    h.finish();
}
