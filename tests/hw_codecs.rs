//! The two readings of the wire formats side by side, without the device model's engine in
//! between: what the driver writes (commands §8; WQEs §10, through its work-queue writers)
//! parsed by the model's decoders, and what the model emits (CQEs §11 through the driver's CQ
//! reader, QP attributes §8) read by the driver. Every field carries a distinct value, so one
//! misplaced offset on either side fails.

mod common;

use common::Harness;
use pvrdma_ndk::pvrdma::cmd::{self as dc, Command as _, request_bytes};
use pvrdma_ndk::pvrdma::cq::{CqBells, CqReader};
use pvrdma_ndk::pvrdma::cqe::{CqeView, WcFlags, wc_opcode, wc_status};
use pvrdma_ndk::pvrdma::queue::{CqRing, QpLayout, QpQueues};
use pvrdma_ndk::pvrdma::uar::{CqDoorbell, QpDoorbell};
use pvrdma_ndk::pvrdma::wq::{RecvWriter, SendWriter};
use pvrdma_ndk::pvrdma::wqe::{AccessFlags, SendFlags, Sge, SqHeader, WrOpcode};
use pvrdma_sim::cmd::{self as sc, Command as _};
use pvrdma_sim::le::Le;
use pvrdma_sim::wqe as sw;

fn parse<C: sc::Command>(req: &[u8; dc::REQ_MAX]) -> C {
    C::parse(&Le(&req[..]))
}

fn ah() -> dc::AhAttr {
    dc::AhAttr {
        dgid: core::array::from_fn(|i| 0xA0 + i as u8),
        flow_label: 0x000B_CDEF,
        sgid_index: 3,
        hop_limit: 0x40,
        traffic_class: 0x22,
        dlid: 0x1234,
        vlan_id: 0x0567,
        sl: 5,
        src_path_bits: 0x80,
        static_rate: 6,
        ah_flags: 1,
        port_num: 1,
        dmac: [1, 2, 3, 4, 5, 6],
    }
}

fn qp_attr() -> dc::QpAttr {
    dc::QpAttr {
        qp_state: 3,
        cur_qp_state: 2,
        path_mtu: 4,
        path_mig_state: 1,
        qkey: 0x8001_0002,
        rq_psn: 0x00AB_CDEF,
        sq_psn: 0x0012_3456,
        dest_qp_num: 0x00F0_0F01,
        qp_access_flags: 0xF,
        pkey_index: 0x0102,
        alt_pkey_index: 0x0304,
        en_sqd_async_notify: 1,
        sq_draining: 2,
        max_rd_atomic: 3,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 5,
        port_num: 6,
        timeout: 7,
        retry_cnt: 8,
        rnr_retry: 9,
        alt_port_num: 10,
        alt_timeout: 11,
        cap: dc::QpCap {
            max_send_wr: 101,
            max_recv_wr: 102,
            max_send_sge: 103,
            max_recv_sge: 104,
            max_inline_data: 105,
        },
        ah_attr: ah(),
        alt_ah_attr: dc::AhAttr {
            dgid: [0x5A; 16],
            dmac: [9, 8, 7, 6, 5, 4],
            flow_label: 7,
            ..ah()
        },
    }
}

macro_rules! same_fields {
    ($a:expr, $b:expr, $($f:ident),+ $(,)?) => {
        $( assert_eq!($a.$f, $b.$f, stringify!($f)); )+
    };
}

fn same_ah(d: &dc::AhAttr, s: &pvrdma_sim::qp::AhAttr) {
    same_fields!(
        d,
        s,
        dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class,
        dlid,
        vlan_id,
        sl,
        src_path_bits,
        static_rate,
        ah_flags,
        port_num,
        dmac
    );
}

fn same_attr(d: &dc::QpAttr, s: &pvrdma_sim::qp::QpAttr) {
    same_fields!(
        d,
        s,
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout
    );
    same_fields!(
        d.cap,
        s.cap,
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data
    );
    same_ah(&d.ah_attr, &s.ah_attr);
    same_ah(&d.alt_ah_attr, &s.alt_ah_attr);
}

#[test]
fn command_requests_read_back_by_the_model() {
    // Header: response key @0 is the channel's; code @8.
    let r = request_bytes(&dc::CreatePd { ctx_handle: 0x0BAD });
    let h = sc::ReqHeader::parse(&r);
    assert_eq!(h.cmd, sc::code::CREATE_PD);
    assert_eq!(parse::<sc::CreatePd>(&r).ctx_handle, 0x0BAD);
    assert_eq!(dc::CreatePd::REQ_LEN, sc::CreatePd::REQ_LEN);

    let r = request_bytes(&dc::QueryPkey {
        port_num: 1,
        index: 7,
    });
    let q = parse::<sc::QueryPkey>(&r);
    assert_eq!((q.port_num, q.index), (1, 7));

    let mr = dc::CreateMr {
        start: 0x1111_2222_3333_4444,
        length: 0x0000_0005_6666_7777,
        pdir_dma: 0x7E00_0001_2000,
        pd_handle: 0x0A0B,
        access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
        flags: dc::mr_flags::FRMR,
        nchunks: 0x0C0D,
    };
    let s = parse::<sc::CreateMr>(&request_bytes(&mr));
    same_fields!(mr, s, start, length, pdir_dma, pd_handle, flags, nchunks);
    assert_eq!(s.access_flags, mr.access_flags.bits());
    assert_eq!(dc::CreateMr::REQ_LEN, sc::CreateMr::REQ_LEN);

    let cq = dc::CreateCq {
        pdir_dma: 0x7E00_0009_8000,
        ctx_handle: 0x77,
        cqe: 0x400,
        nchunks: 0x11,
    };
    let s = parse::<sc::CreateCq>(&request_bytes(&cq));
    same_fields!(cq, s, pdir_dma, ctx_handle, cqe, nchunks);
    assert_eq!(dc::CreateCq::REQ_LEN, sc::CreateCq::REQ_LEN);

    let qp = dc::CreateQp {
        pdir_dma: 0x7E00_0003_4000,
        pd_handle: 0x101,
        send_cq_handle: 0x102,
        recv_cq_handle: 0x103,
        srq_handle: 0x104,
        max_send_wr: 0x105,
        max_recv_wr: 0x106,
        max_send_sge: 0x107,
        max_recv_sge: 0x108,
        max_inline_data: 0x109,
        lkey: 0x10A,
        access_flags: AccessFlags::REMOTE_READ,
        total_chunks: 0x10B,
        send_chunks: 0x10C,
        max_atomic_arg: 0x10D,
        sq_sig_all: 1,
        qp_type: dc::QpType::Ud,
        is_srq: 1,
    };
    let s = parse::<sc::CreateQp>(&request_bytes(&qp));
    same_fields!(
        qp,
        s,
        pdir_dma,
        pd_handle,
        send_cq_handle,
        recv_cq_handle,
        srq_handle,
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data,
        lkey,
        total_chunks,
        send_chunks,
        max_atomic_arg,
        sq_sig_all,
        is_srq
    );
    assert_eq!(s.access_flags, AccessFlags::REMOTE_READ.bits());
    assert_eq!(s.qp_type, 4);
    assert_eq!(dc::CreateQp::REQ_LEN, sc::CreateQp::REQ_LEN);

    let m = dc::ModifyQp {
        qp_handle: 0x55,
        attr_mask: dc::QpAttrMask::all(),
        attr: qp_attr(),
    };
    let s = parse::<sc::ModifyQp>(&request_bytes(&m));
    assert_eq!(s.qp_handle, 0x55);
    assert_eq!(s.attr_mask, 0x1F_FFFF);
    same_attr(&m.attr, &s.attr);
    assert_eq!(dc::ModifyQp::REQ_LEN, sc::ModifyQp::REQ_LEN);

    let q = parse::<sc::QueryQp>(&request_bytes(&dc::QueryQp {
        qp_handle: 9,
        attr_mask: dc::QpAttrMask::CAP,
    }));
    assert_eq!((q.qp_handle, q.attr_mask), (9, 1 << 19));

    let gid: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
    let b = dc::CreateBind {
        mtu: 1024,
        vlan: 0xFFF,
        index: 5,
        new_gid: gid,
        gid_type: 2,
    };
    let r = request_bytes(&b);
    let s = parse::<sc::CreateBind>(&r);
    same_fields!(b, s, mtu, vlan, index, gid_type);
    let at = sc::gid_field::CREATE_BIND_GID;
    assert_eq!(r[at..at + 16], gid);
    let r = request_bytes(&dc::DestroyBind {
        index: 6,
        dest_gid: gid,
    });
    assert_eq!(parse::<sc::DestroyBind>(&r).index, 6);
    let at = sc::gid_field::DESTROY_BIND_GID;
    assert_eq!(r[at..at + 16], gid);

    let srq = dc::CreateSrq {
        pdir_dma: 0x7E00_0004_5000,
        pd_handle: 0x21,
        nchunks: 0x22,
        attr: dc::SrqAttr {
            max_wr: 0x23,
            max_sge: 0x24,
            srq_limit: 0x25,
        },
        srq_type: 0,
    };
    let s = parse::<sc::CreateSrq>(&request_bytes(&srq));
    same_fields!(srq, s, pdir_dma, pd_handle, nchunks, srq_type);
    same_fields!(srq.attr, s, max_wr, max_sge, srq_limit);
    let m = dc::ModifySrq {
        srq_handle: 0x31,
        attr_mask: dc::srq_attr_mask::LIMIT,
        attr: dc::SrqAttr {
            max_wr: 0x32,
            max_sge: 0x33,
            srq_limit: 0x34,
        },
    };
    let s = parse::<sc::ModifySrq>(&request_bytes(&m));
    same_fields!(m, s, srq_handle, attr_mask);
    same_fields!(m.attr, s, max_wr, max_sge, srq_limit);
    for (code, req) in [
        (
            sc::code::DESTROY_PD,
            request_bytes(&dc::DestroyPd { pd_handle: 0x41 }),
        ),
        (
            sc::code::DESTROY_MR,
            request_bytes(&dc::DestroyMr { mr_handle: 0x41 }),
        ),
        (
            sc::code::DESTROY_CQ,
            request_bytes(&dc::DestroyCq { cq_handle: 0x41 }),
        ),
        (
            sc::code::DESTROY_QP,
            request_bytes(&dc::DestroyQp { qp_handle: 0x41 }),
        ),
        (
            sc::code::DESTROY_SRQ,
            request_bytes(&dc::DestroySrq { srq_handle: 0x41 }),
        ),
        (
            sc::code::QUERY_SRQ,
            request_bytes(&dc::QuerySrq { srq_handle: 0x41 }),
        ),
    ] {
        assert_eq!(sc::ReqHeader::parse(&req).cmd, code);
        assert_eq!(Le(&req[..]).u32(16), 0x41, "handle @16 of command {code}");
    }
}

#[test]
fn qp_attr_emitted_by_the_model_decodes_in_the_driver() {
    // The model's QUERY_QP answer is `QpAttr::emit` at @16 of the response.
    let d = qp_attr();
    let m = dc::ModifyQp {
        qp_handle: 1,
        attr_mask: dc::QpAttrMask::all(),
        attr: d,
    };
    let sim_attr = parse::<sc::ModifyQp>(&request_bytes(&m)).attr;
    let mut resp = [0u8; dc::RESP_MAX];
    resp[8..12].copy_from_slice(&(dc::code::QUERY_QP | dc::RESP_BIT).to_le_bytes());
    sim_attr.emit(&mut Le(&mut resp[..]), 16);
    let back = dc::decode_response::<dc::QueryQp>(&resp, 20).unwrap();
    assert_eq!(back, d);
}

/// A QP's writers (SQ: 8 × 2 SGEs, stride 128; RQ: 8 × 3 SGEs, stride 64) and a 16-entry
/// CQ's reader, on the harness device's DMA and UAR.
struct Rings {
    _q: QpQueues,
    sq: SendWriter,
    rq: RecvWriter,
    _cq: CqRing,
    cq: CqReader,
}

fn rings(h: &Harness) -> Rings {
    let dev = h.dev();
    let dma = dev.platform().dma();
    let q = QpQueues::alloc(dma, &QpLayout::new(8, 2, Some((8, 3))).unwrap()).unwrap();
    let sq = q.sq.writer(dev.bell(QpDoorbell::send(1))).unwrap();
    let rq =
        q.rq.as_ref()
            .unwrap()
            .writer(dev.bell(QpDoorbell::recv(1)))
            .unwrap();
    let cq_ring = CqRing::alloc(dma, 16).unwrap();
    let cq = cq_ring
        .reader(CqBells {
            arm: dev.bell(CqDoorbell::arm(1)),
            arm_solicited: dev.bell(CqDoorbell::arm_solicited(1)),
            poll: dev.bell(CqDoorbell::poll(1)),
        })
        .unwrap();
    Rings {
        _q: q,
        sq,
        rq,
        _cq: cq_ring,
        cq,
    }
}

/// Writes send WQE `index` and returns its element's bytes.
fn send_bytes(r: &Rings, index: u32, wr_id: u64, h: &SqHeader, sges: &[Sge]) -> [u8; 128] {
    assert!(r.sq.slot(index).write_send(wr_id, h, sges));
    let mut slot = [0u8; 128];
    r.sq.read_element(index, &mut slot);
    slot
}

/// The driver's reading of a CQE the model emitted: into the ring as the device writes it,
/// out through the reader.
fn read_cqe(r: &Rings, cqe: &sw::Cqe) -> CqeView {
    let head = r.cq.head();
    r.cq.produce_for_test(&cqe.emit());
    let c = r.cq.load(head);
    assert_eq!(
        r.cq.load_core(head),
        (c.wr_id, c.qp, c.status),
        "the fast path's view"
    );
    r.cq.consume(r.cq.next(head));
    c
}

#[test]
fn send_wqes_read_back_by_the_model() {
    let h = Harness::deterministic();
    let r = rings(&h);
    let sges = [
        Sge {
            addr: 0x0102_0304_0506_0708,
            length: 0x1111,
            lkey: 0x0000_0201,
        },
        Sge {
            addr: 0x1112_1314_1516_1718,
            length: 0x2222,
            lkey: 0x0000_0302,
        },
    ];
    let rdma = SqHeader {
        op_word: SqHeader::op_word(
            WrOpcode::RdmaWriteWithImm,
            SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE,
        ),
        ex: u32::from_le_bytes([0xC0, 0xFF, 0xEE, 0x01]),
        body: SqHeader::rdma_body(0x7000_0000_1234, 0x0000_0A5A),
    };
    let slot = send_bytes(&r, 0, 0xDEAD_BEEF_0000_0001, &rdma, &sges);
    let w = sw::SqWqe::parse(&slot, 2);
    assert_eq!(w.wr_id, 0xDEAD_BEEF_0000_0001);
    assert_eq!(w.num_sge, 2);
    assert_eq!(w.opcode, sw::wr::RDMA_WRITE_WITH_IMM);
    assert_eq!(
        w.send_flags,
        sw::send_flags::SIGNALED | sw::send_flags::SOLICITED | sw::send_flags::FENCE
    );
    assert_eq!(w.ex, [0xC0, 0xFF, 0xEE, 0x01], "imm bytes stored unchanged");
    assert_eq!(w.rdma(), (0x7000_0000_1234, 0x0A5A));
    assert_eq!(
        w.sges,
        sges.iter()
            .map(|s| sw::Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(w.total_len(), 0x3333);

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let fr = SqHeader {
        op_word: SqHeader::op_word(WrOpcode::FastRegMr, SendFlags::empty()),
        ex: 0,
        body: SqHeader::fast_reg_body(
            0x0000_7F00_0000_0010,
            0x7E00_0000_9000,
            37,
            0x24FF0,
            access,
            0x0000_0742,
        ),
    };
    let slot = send_bytes(&r, 1, 2, &fr, &[]);
    let w = sw::SqWqe::parse(&slot, 1);
    assert_eq!(w.opcode, sw::wr::FAST_REG_MR);
    assert!(!w.signaled());
    let f = w.fast_reg();
    assert_eq!(
        (
            f.iova_start,
            f.pl_pdir_dma,
            f.page_shift,
            f.page_list_len,
            f.length,
            f.rkey
        ),
        (
            0x0000_7F00_0000_0010,
            0x7E00_0000_9000,
            12,
            37,
            0x24FF0,
            0x742
        )
    );
    assert_eq!(f.access_flags, access.bits());

    let inv = SqHeader {
        op_word: SqHeader::op_word(WrOpcode::LocalInv, SendFlags::SIGNALED),
        ex: 0x0000_0742,
        body: [0; 6],
    };
    // Slot 9 is slot 1 again: what the fast-register left there is overwritten.
    let slot = send_bytes(&r, 9, 3, &inv, &[]);
    let w = sw::SqWqe::parse(&slot, 1);
    assert_eq!((w.opcode, w.invalidate_rkey()), (sw::wr::LOCAL_INV, 0x742));
    assert_eq!(w.fast_reg().iova_start, 0, "the union is rewritten whole");
    assert!(w.signaled());
    drop(r);
    h.finish();
}

#[test]
fn recv_wqe_read_back_by_the_model() {
    let h = Harness::deterministic();
    let r = rings(&h);
    let sges: Vec<Sge> = (0..3)
        .map(|i| Sge {
            addr: 0x1000 * (i + 1),
            length: 100 + i as u32,
            lkey: 0x100 * (i as u32 + 1),
        })
        .collect();
    assert!(r.rq.slot(5).write_recv(0x0123_4567_89AB_CDEF, &sges));
    let mut slot = [0u8; 64];
    r.rq.read_element(5, &mut slot);
    let w = sw::RecvWqe::parse(&slot, 3);
    assert_eq!((w.wr_id, w.num_sge), (0x0123_4567_89AB_CDEF, 3));
    assert_eq!(w.capacity(), 303);
    for (a, b) in sges.iter().zip(&w.sges) {
        same_fields!(a, b, addr, length, lkey);
    }
    drop(r);
    h.finish();
}

/// Every field the driver reads of a CQE (the completion path's [`CqeView`]); the others
/// (source QP, vendor error, P_Key index, port, SMAC, network header type) it never reads.
#[test]
fn cqes_emitted_by_the_model_read_by_the_driver() {
    let h = Harness::deterministic();
    let r = rings(&h);
    let recv = sw::Cqe {
        wr_id: 0xFEDC_BA98_7654_3210,
        qp: 0x3FF,
        opcode: sw::wc::RECV,
        status: sw::status::SUCCESS,
        byte_len: 0x8000_0000,
        imm_data: [0x11, 0x22, 0x33, 0x44],
        src_qp: 0x00AB_CDEF,
        wc_flags: sw::wc_flags::GRH
            | sw::wc_flags::WITH_IMM
            | sw::wc_flags::WITH_SMAC
            | sw::wc_flags::WITH_NETWORK_HDR_TYPE,
        vendor_err: 0x55,
        pkey_index: 0x0102,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
        port_num: 1,
        smac: [0x00, 0x50, 0x56, 0xAA, 0xBB, 0xCC],
        network_hdr_type: 2,
    };
    let c = read_cqe(&r, &recv);
    assert_eq!(
        c,
        CqeView {
            wr_id: recv.wr_id,
            qp: 0x3FF,
            opcode: wc_opcode::RECV,
            status: wc_status::SUCCESS,
            byte_len: 0x8000_0000,
            ex: u32::from_le_bytes([0x11, 0x22, 0x33, 0x44]),
            wc_flags: (WcFlags::GRH
                | WcFlags::WITH_IMM
                | WcFlags::WITH_SMAC
                | WcFlags::WITH_NETWORK_HDR_TYPE)
                .bits(),
        }
    );

    let inv = sw::Cqe {
        opcode: sw::wc::RECV,
        imm_data: 0x0000_0742u32.to_le_bytes(),
        wc_flags: sw::wc_flags::WITH_INVALIDATE,
        network_hdr_type: 0,
        ..recv
    };
    let c = read_cqe(&r, &inv);
    assert_eq!((c.ex, c.wc_flags), (0x742, WcFlags::WITH_INVALIDATE.bits()));

    // Every opcode and status the model writes is the driver's value for it.
    for (sim, drv) in [
        (sw::wc::SEND, wc_opcode::SEND),
        (sw::wc::RDMA_WRITE, wc_opcode::RDMA_WRITE),
        (sw::wc::RDMA_READ, wc_opcode::RDMA_READ),
        (sw::wc::LOCAL_INV, wc_opcode::LOCAL_INV),
        (sw::wc::FAST_REG_MR, wc_opcode::FAST_REG_MR),
        (sw::wc::RECV, wc_opcode::RECV),
        (sw::wc::RECV_RDMA_WITH_IMM, wc_opcode::RECV_RDMA_WITH_IMM),
    ] {
        let e = sw::Cqe {
            opcode: sim,
            qp: 1,
            ..Default::default()
        };
        assert_eq!(read_cqe(&r, &e).opcode, drv);
    }
    for (sim, drv) in [
        (sw::status::LOC_LEN_ERR, wc_status::LOC_LEN_ERR),
        (sw::status::LOC_QP_OP_ERR, wc_status::LOC_QP_OP_ERR),
        (sw::status::LOC_PROT_ERR, wc_status::LOC_PROT_ERR),
        (sw::status::WR_FLUSH_ERR, wc_status::WR_FLUSH_ERR),
        (sw::status::BAD_RESP_ERR, wc_status::BAD_RESP_ERR),
        (sw::status::LOC_ACCESS_ERR, wc_status::LOC_ACCESS_ERR),
        (sw::status::REM_INV_REQ_ERR, wc_status::REM_INV_REQ_ERR),
        (sw::status::REM_ACCESS_ERR, wc_status::REM_ACCESS_ERR),
        (sw::status::REM_OP_ERR, wc_status::REM_OP_ERR),
        (sw::status::RETRY_EXC_ERR, wc_status::RETRY_EXC_ERR),
        (sw::status::RNR_RETRY_EXC_ERR, wc_status::RNR_RETRY_EXC_ERR),
        (sw::status::FATAL_ERR, wc_status::FATAL_ERR),
        (sw::status::GENERAL_ERR, wc_status::GENERAL_ERR),
    ] {
        let e = sw::Cqe {
            status: sim,
            qp: 1,
            wr_id: 9,
            ..Default::default()
        };
        let c = read_cqe(&r, &e);
        assert_eq!((c.status, c.wr_id), (drv, 9));
    }
    drop(r);
    h.finish();
}

#[test]
fn wr_opcodes_and_flags_agree() {
    for (d, s) in [
        (WrOpcode::RdmaWrite, sw::wr::RDMA_WRITE),
        (WrOpcode::RdmaWriteWithImm, sw::wr::RDMA_WRITE_WITH_IMM),
        (WrOpcode::Send, sw::wr::SEND),
        (WrOpcode::SendWithImm, sw::wr::SEND_WITH_IMM),
        (WrOpcode::RdmaRead, sw::wr::RDMA_READ),
        (WrOpcode::SendWithInv, sw::wr::SEND_WITH_INV),
        (WrOpcode::LocalInv, sw::wr::LOCAL_INV),
        (WrOpcode::FastRegMr, sw::wr::FAST_REG_MR),
    ] {
        assert_eq!(d as u32, s);
        assert_eq!(
            sw::wc_opcode_for(s),
            Some(match d {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => wc_opcode::RDMA_WRITE,
                WrOpcode::RdmaRead => wc_opcode::RDMA_READ,
                WrOpcode::LocalInv => wc_opcode::LOCAL_INV,
                WrOpcode::FastRegMr => wc_opcode::FAST_REG_MR,
                _ => wc_opcode::SEND,
            }),
            "{d:?}"
        );
    }
    assert_eq!(SendFlags::FENCE.bits(), sw::send_flags::FENCE);
    assert_eq!(SendFlags::SIGNALED.bits(), sw::send_flags::SIGNALED);
    assert_eq!(SendFlags::SOLICITED.bits(), sw::send_flags::SOLICITED);
    assert_eq!(SendFlags::INLINE.bits(), sw::send_flags::INLINE);
}
