//! Typed commands and the command channel (§8; style.md §8, nova-core `gsp/cmdq.rs`).
//!
//! Each command is a type implementing [`Command`]: its code, request length, an encoder for
//! the request body at the reference's exact offsets, and a decoder for the response body.
//! [`CmdChannel`] implements `pvrdma_cmd_post`: one command outstanding at a time, later ones
//! wait in a FIFO (each entry allocated at submit time, never in a data path, or reserved
//! ahead with [`CmdChannel::reserve`] for a command that must not fail to queue); the request is
//! copied into the command slot, REQUEST is written, then ERR is read; the response arrives
//! with vector 0 and is accepted only if its `response` key matches the outstanding command
//! (stale vector-0 interrupts are counted and ignored), `ack == code | 0x80000000` and
//! `hdr.err == 0` (M8). A timer fails the command with [`PvrdmaError::Timeout`].
//!
//! Unlike Linux, the channel waits for the response of every command, the NOOP ones included:
//! M9 promises a response and vector 0 for each, and M8 has us check `hdr.err` everywhere.
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};
use core::marker::PhantomData;

use crate::os::alloc::{KBox, try_arc, try_box};
use crate::os::dma::PAGE_SIZE;
use crate::os::sync::{from_device_barrier, mmio_flush, to_device_barrier};
use crate::os::{DmaBuffer, DpcHandler, Platform, SharedDma, SpinLock, Timer};

use super::bytes::{Sink, get, get_u8, get_u16, get_u32};
use super::device_enum::device_enum;
use super::error::PvrdmaError;
use super::regs::{self, version};
use super::wqe::AccessFlags;

/// Largest request (`union pvrdma_cmd_req`, MODIFY_QP).
pub const REQ_MAX: usize = 184;
/// Largest response (`union pvrdma_cmd_resp`, QUERY_QP).
pub const RESP_MAX: usize = 176;
/// Response code bit.
pub const RESP_BIT: u32 = 0x8000_0000;
/// Linux `PVRDMA_CMD_TIMEOUT`: 10 s.
pub const DEFAULT_TIMEOUT_NS: u64 = 10_000_000_000;

/// Command codes (§8).
pub mod code {
    #![allow(missing_docs)]
    pub const QUERY_PORT: u32 = 0;
    pub const QUERY_PKEY: u32 = 1;
    pub const CREATE_PD: u32 = 2;
    pub const DESTROY_PD: u32 = 3;
    pub const CREATE_MR: u32 = 4;
    pub const DESTROY_MR: u32 = 5;
    pub const CREATE_CQ: u32 = 6;
    pub const RESIZE_CQ: u32 = 7;
    pub const DESTROY_CQ: u32 = 8;
    pub const CREATE_QP: u32 = 9;
    pub const MODIFY_QP: u32 = 10;
    pub const QUERY_QP: u32 = 11;
    pub const DESTROY_QP: u32 = 12;
    pub const CREATE_UC: u32 = 13;
    pub const DESTROY_UC: u32 = 14;
    pub const CREATE_BIND: u32 = 15;
    pub const DESTROY_BIND: u32 = 16;
    pub const CREATE_SRQ: u32 = 17;
    pub const MODIFY_SRQ: u32 = 18;
    pub const QUERY_SRQ: u32 = 19;
    pub const DESTROY_SRQ: u32 = 20;
}

/// A device command: request layout and response type.
pub trait Command {
    /// Command code.
    const CODE: u32;
    /// Request size including the 16-byte header.
    const REQ_LEN: usize;
    /// Decoded response body.
    type Resp: Send + 'static;
    /// Writes the request body (bytes 16..REQ_LEN) into a zeroed request buffer.
    fn encode(&self, req: &mut [u8; REQ_MAX]);
    /// Decodes the response body; the header (`ack`, `err`) was already checked.
    fn decode(resp: &[u8; RESP_MAX], device_version: u32) -> Self::Resp;
}

/// Builds the full request bytes (header with key 0) of a command (tests, tracing).
pub fn request_bytes<C: Command>(cmd: &C) -> [u8; REQ_MAX] {
    let mut req = [0u8; REQ_MAX];
    cmd.encode(&mut req);
    req.put_u32(8, C::CODE);
    req
}

/// Checks a response header and decodes the body.
///
/// # Errors
///
/// [`PvrdmaError::BadAck`] or [`PvrdmaError::CommandFailed`].
pub fn decode_response<C: Command>(
    resp: &[u8; RESP_MAX],
    device_version: u32,
) -> Result<C::Resp, PvrdmaError> {
    check_header(C::CODE, resp)?;
    Ok(C::decode(resp, device_version))
}

fn check_header(code: u32, resp: &[u8; RESP_MAX]) -> Result<(), PvrdmaError> {
    let ack = get_u32(resp, 8);
    if ack != code | RESP_BIT {
        return Err(PvrdmaError::BadAck { code, ack });
    }
    let err = get_u8(resp, 12);
    if err != 0 {
        return Err(PvrdmaError::CommandFailed { code, err });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Shared structures.

device_enum! {
    /// QP types (`pvrdma_qp_type`), the ones v1 creates.
    pub enum QpType: u8 {
        /// QP1.
        Gsi = 1,
        /// Reliable connected.
        Rc = 2,
        /// Unreliable datagram.
        Ud = 4,
    }
    /// A QP type the driver does not create.
    unknown UnknownQpType;
}

device_enum! {
    /// QP states.
    #[allow(missing_docs)]
    pub enum QpState: u32 {
        Reset = 0,
        Init = 1,
        Rtr = 2,
        Rts = 3,
        Sqd = 4,
        Sqe = 5,
        Err = 6,
    }
    /// A QP state the driver does not know.
    unknown UnknownQpState;
}

bitflags::bitflags! {
    /// MODIFY_QP / QUERY_QP `attr_mask` (IB bits).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[allow(missing_docs)]
    pub struct QpAttrMask: u32 {
        const STATE = 1 << 0;
        const CUR_STATE = 1 << 1;
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        const ACCESS_FLAGS = 1 << 3;
        const PKEY_INDEX = 1 << 4;
        const PORT = 1 << 5;
        const QKEY = 1 << 6;
        const AV = 1 << 7;
        const PATH_MTU = 1 << 8;
        const TIMEOUT = 1 << 9;
        const RETRY_CNT = 1 << 10;
        const RNR_RETRY = 1 << 11;
        const RQ_PSN = 1 << 12;
        const MAX_QP_RD_ATOMIC = 1 << 13;
        const ALT_PATH = 1 << 14;
        const MIN_RNR_TIMER = 1 << 15;
        const SQ_PSN = 1 << 16;
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        const PATH_MIG_STATE = 1 << 18;
        const CAP = 1 << 19;
        const DEST_QPN = 1 << 20;
    }
}

/// `CREATE_MR.flags`.
pub mod mr_flags {
    /// Normal MR: pages in `pdir_dma`.
    pub const NORMAL: u32 = 0;
    /// `PVRDMA_MR_FLAG_DMA`: all of memory, LOCAL_WRITE only.
    pub const DMA: u32 = 1 << 0;
    /// `PVRDMA_MR_FLAG_FRMR`: fast-register MR of `nchunks` pages.
    pub const FRMR: u32 = 1 << 1;
}

/// MODIFY_SRQ `attr_mask` bits (`ib_srq_attr_mask`).
pub mod srq_attr_mask {
    /// Resize (unsupported by the device, M44).
    pub const MAX_WR: u32 = 1 << 0;
    /// Set `srq_limit`.
    pub const LIMIT: u32 = 1 << 1;
}

/// `pvrdma_ah_attr` (40 B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct AhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub dlid: u16,
    pub vlan_id: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    /// Bit 0: GRH present.
    pub ah_flags: u8,
    pub port_num: u8,
    pub dmac: [u8; 6],
}

impl AhAttr {
    fn put(&self, b: &mut [u8], o: usize) {
        b.put(o, &self.dgid);
        b.put_u32(o + 16, self.flow_label);
        b.put_u8(o + 20, self.sgid_index);
        b.put_u8(o + 21, self.hop_limit);
        b.put_u8(o + 22, self.traffic_class);
        b.put_u16(o + 24, self.dlid);
        b.put_u16(o + 26, self.vlan_id);
        b.put_u8(o + 28, self.sl);
        b.put_u8(o + 29, self.src_path_bits);
        b.put_u8(o + 30, self.static_rate);
        b.put_u8(o + 31, self.ah_flags);
        b.put_u8(o + 32, self.port_num);
        b.put(o + 33, &self.dmac);
    }
    fn get(b: &[u8], o: usize) -> Self {
        AhAttr {
            dgid: get(b, o),
            flow_label: get_u32(b, o + 16),
            sgid_index: get_u8(b, o + 20),
            hop_limit: get_u8(b, o + 21),
            traffic_class: get_u8(b, o + 22),
            dlid: get_u16(b, o + 24),
            vlan_id: get_u16(b, o + 26),
            sl: get_u8(b, o + 28),
            src_path_bits: get_u8(b, o + 29),
            static_rate: get_u8(b, o + 30),
            ah_flags: get_u8(b, o + 31),
            port_num: get_u8(b, o + 32),
            dmac: get(b, o + 33),
        }
    }
}

/// `pvrdma_qp_cap` (24 B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `pvrdma_qp_attr` (160 B). Raw integers: a QUERY_QP answer is reported as read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    /// 1 = 256 … 5 = 4096.
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
}

impl QpAttr {
    fn put(&self, b: &mut [u8], o: usize) {
        let u32s = [
            self.qp_state,
            self.cur_qp_state,
            self.path_mtu,
            self.path_mig_state,
            self.qkey,
            self.rq_psn,
            self.sq_psn,
            self.dest_qp_num,
            self.qp_access_flags,
        ];
        for (i, v) in u32s.iter().enumerate() {
            b.put_u32(o + 4 * i, *v);
        }
        b.put_u16(o + 36, self.pkey_index);
        b.put_u16(o + 38, self.alt_pkey_index);
        b.put(
            o + 40,
            &[
                self.en_sqd_async_notify,
                self.sq_draining,
                self.max_rd_atomic,
                self.max_dest_rd_atomic,
                self.min_rnr_timer,
                self.port_num,
                self.timeout,
                self.retry_cnt,
                self.rnr_retry,
                self.alt_port_num,
                self.alt_timeout,
            ],
        );
        let c = &self.cap;
        for (i, v) in [
            c.max_send_wr,
            c.max_recv_wr,
            c.max_send_sge,
            c.max_recv_sge,
            c.max_inline_data,
        ]
        .iter()
        .enumerate()
        {
            b.put_u32(o + 56 + 4 * i, *v);
        }
        self.ah_attr.put(b, o + 80);
        self.alt_ah_attr.put(b, o + 120);
    }

    fn get(b: &[u8], o: usize) -> Self {
        let u = |i: usize| get_u32(b, o + 4 * i);
        let y = |i: usize| get_u8(b, o + 40 + i);
        let c = |i: usize| get_u32(b, o + 56 + 4 * i);
        QpAttr {
            qp_state: u(0),
            cur_qp_state: u(1),
            path_mtu: u(2),
            path_mig_state: u(3),
            qkey: u(4),
            rq_psn: u(5),
            sq_psn: u(6),
            dest_qp_num: u(7),
            qp_access_flags: u(8),
            pkey_index: get_u16(b, o + 36),
            alt_pkey_index: get_u16(b, o + 38),
            en_sqd_async_notify: y(0),
            sq_draining: y(1),
            max_rd_atomic: y(2),
            max_dest_rd_atomic: y(3),
            min_rnr_timer: y(4),
            port_num: y(5),
            timeout: y(6),
            retry_cnt: y(7),
            rnr_retry: y(8),
            alt_port_num: y(9),
            alt_timeout: y(10),
            cap: QpCap {
                max_send_wr: c(0),
                max_recv_wr: c(1),
                max_send_sge: c(2),
                max_recv_sge: c(3),
                max_inline_data: c(4),
            },
            ah_attr: AhAttr::get(b, o + 80),
            alt_ah_attr: AhAttr::get(b, o + 120),
        }
    }
}

/// `pvrdma_port_attr` (48 B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PortAttr {
    /// 0 NOP, 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
}

/// `pvrdma_srq_attr` (16 B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Ring size.
    pub max_wr: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Limit-event threshold (0 = disarmed).
    pub srq_limit: u32,
}

impl SrqAttr {
    fn put(&self, b: &mut [u8], o: usize) {
        b.put_u32(o, self.max_wr);
        b.put_u32(o + 4, self.max_sge);
        b.put_u32(o + 8, self.srq_limit);
    }
    fn get(b: &[u8], o: usize) -> Self {
        SrqAttr {
            max_wr: get_u32(b, o),
            max_sge: get_u32(b, o + 4),
            srq_limit: get_u32(b, o + 8),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Commands.

macro_rules! handle_only {
    ($(#[$m:meta])* $name:ident, $code:expr, $field:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            #[allow(missing_docs)]
            pub $field: u32,
        }
        impl Command for $name {
            const CODE: u32 = $code;
            const REQ_LEN: usize = 24;
            type Resp = ();
            fn encode(&self, req: &mut [u8; REQ_MAX]) {
                req.put_u32(16, self.$field);
            }
            fn decode(_: &[u8; RESP_MAX], _: u32) {}
        }
    };
}

handle_only!(
    /// DESTROY_PD.
    DestroyPd, code::DESTROY_PD, pd_handle);
handle_only!(
    /// DESTROY_MR.
    DestroyMr, code::DESTROY_MR, mr_handle);
handle_only!(
    /// DESTROY_CQ.
    DestroyCq, code::DESTROY_CQ, cq_handle);
handle_only!(
    /// DESTROY_SRQ.
    DestroySrq, code::DESTROY_SRQ, srq_handle);

/// QUERY_PORT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryPort {
    /// Port (1).
    pub port_num: u8,
}

impl Command for QueryPort {
    const CODE: u32 = code::QUERY_PORT;
    const REQ_LEN: usize = 24;
    type Resp = PortAttr;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u8(16, self.port_num);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> PortAttr {
        let o = 16;
        PortAttr {
            state: get_u32(r, o),
            max_mtu: get_u32(r, o + 4),
            active_mtu: get_u32(r, o + 8),
            gid_tbl_len: get_u32(r, o + 12),
            port_cap_flags: get_u32(r, o + 16),
            max_msg_sz: get_u32(r, o + 20),
            bad_pkey_cntr: get_u32(r, o + 24),
            qkey_viol_cntr: get_u32(r, o + 28),
            pkey_tbl_len: get_u16(r, o + 32),
            lid: get_u16(r, o + 34),
            sm_lid: get_u16(r, o + 36),
            lmc: get_u8(r, o + 38),
            max_vl_num: get_u8(r, o + 39),
            sm_sl: get_u8(r, o + 40),
            subnet_timeout: get_u8(r, o + 41),
            init_type_reply: get_u8(r, o + 42),
            active_width: get_u8(r, o + 43),
            active_speed: get_u8(r, o + 44),
            phys_state: get_u8(r, o + 45),
        }
    }
}

/// QUERY_PKEY (optional in v1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryPkey {
    /// Port.
    pub port_num: u8,
    /// Table index.
    pub index: u8,
}

impl Command for QueryPkey {
    const CODE: u32 = code::QUERY_PKEY;
    const REQ_LEN: usize = 24;
    type Resp = u16;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u8(16, self.port_num);
        req.put_u8(17, self.index);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> u16 {
        get_u16(r, 16)
    }
}

/// CREATE_PD; responds with `pd_handle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreatePd {
    /// 0 for kernel objects.
    pub ctx_handle: u32,
}

impl Command for CreatePd {
    const CODE: u32 = code::CREATE_PD;
    const REQ_LEN: usize = 24;
    type Resp = u32;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.ctx_handle);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> u32 {
        get_u32(r, 16)
    }
}

/// CREATE_MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateMr {
    /// Start address (normal MR).
    pub start: u64,
    /// Length in bytes.
    pub length: u64,
    /// Page directory (normal MR; 0 for DMA/FRMR).
    pub pdir_dma: u64,
    /// PD.
    pub pd_handle: u32,
    /// Access.
    pub access_flags: AccessFlags,
    /// [`mr_flags`].
    pub flags: u32,
    /// Pages (normal) or capacity (FRMR).
    pub nchunks: u32,
}

/// CREATE_MR response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateMrResp {
    /// Handle.
    pub mr_handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

impl Command for CreateMr {
    const CODE: u32 = code::CREATE_MR;
    const REQ_LEN: usize = 56;
    type Resp = CreateMrResp;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u64(16, self.start);
        req.put_u64(24, self.length);
        req.put_u64(32, self.pdir_dma);
        req.put_u32(40, self.pd_handle);
        req.put_u32(44, self.access_flags.bits());
        req.put_u32(48, self.flags);
        req.put_u32(52, self.nchunks);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> CreateMrResp {
        CreateMrResp {
            mr_handle: get_u32(r, 16),
            lkey: get_u32(r, 20),
            rkey: get_u32(r, 24),
        }
    }
}

/// CREATE_CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateCq {
    /// Directory.
    pub pdir_dma: u64,
    /// 0 for kernel objects.
    pub ctx_handle: u32,
    /// Entries (power of two).
    pub cqe: u32,
    /// Pages including the ring-state page.
    pub nchunks: u32,
}

/// CREATE_CQ response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateCqResp {
    /// Handle.
    pub cq_handle: u32,
    /// Entries granted (the driver's N).
    pub cqe: u32,
}

impl Command for CreateCq {
    const CODE: u32 = code::CREATE_CQ;
    const REQ_LEN: usize = 40;
    type Resp = CreateCqResp;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u64(16, self.pdir_dma);
        req.put_u32(24, self.ctx_handle);
        req.put_u32(28, self.cqe);
        req.put_u32(32, self.nchunks);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> CreateCqResp {
        CreateCqResp {
            cq_handle: get_u32(r, 16),
            cqe: get_u32(r, 20),
        }
    }
}

/// CREATE_QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct CreateQp {
    pub pdir_dma: u64,
    pub pd_handle: u32,
    pub send_cq_handle: u32,
    pub recv_cq_handle: u32,
    pub srq_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub lkey: u32,
    pub access_flags: AccessFlags,
    pub total_chunks: u16,
    pub send_chunks: u16,
    pub max_atomic_arg: u16,
    pub sq_sig_all: u8,
    pub qp_type: QpType,
    pub is_srq: u8,
}

/// CREATE_QP response, either layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct CreateQpResp {
    pub qpn: u32,
    /// v20: the separate handle; before v20: equal to `qpn` (M10).
    pub qp_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Command for CreateQp {
    const CODE: u32 = code::CREATE_QP;
    const REQ_LEN: usize = 80;
    type Resp = CreateQpResp;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u64(16, self.pdir_dma);
        req.put_u32(24, self.pd_handle);
        req.put_u32(28, self.send_cq_handle);
        req.put_u32(32, self.recv_cq_handle);
        req.put_u32(36, self.srq_handle);
        req.put_u32(40, self.max_send_wr);
        req.put_u32(44, self.max_recv_wr);
        req.put_u32(48, self.max_send_sge);
        req.put_u32(52, self.max_recv_sge);
        req.put_u32(56, self.max_inline_data);
        req.put_u32(60, self.lkey);
        req.put_u32(64, self.access_flags.bits());
        req.put_u16(68, self.total_chunks);
        req.put_u16(70, self.send_chunks);
        req.put_u16(72, self.max_atomic_arg);
        req.put_u8(74, self.sq_sig_all);
        req.put_u8(75, self.qp_type as u8);
        req.put_u8(76, self.is_srq);
    }
    fn decode(r: &[u8; RESP_MAX], device_version: u32) -> CreateQpResp {
        let qpn = get_u32(r, 16);
        if device_version >= version::QPHANDLE {
            CreateQpResp {
                qpn,
                qp_handle: get_u32(r, 20),
                max_send_wr: get_u32(r, 24),
                max_recv_wr: get_u32(r, 28),
                max_send_sge: get_u32(r, 32),
                max_recv_sge: get_u32(r, 36),
                max_inline_data: get_u32(r, 40),
            }
        } else {
            CreateQpResp {
                qpn,
                qp_handle: qpn,
                max_send_wr: get_u32(r, 20),
                max_recv_wr: get_u32(r, 24),
                max_send_sge: get_u32(r, 28),
                max_recv_sge: get_u32(r, 32),
                max_inline_data: get_u32(r, 36),
            }
        }
    }
}

/// MODIFY_QP (response: header only, `err` checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyQp {
    /// QP handle.
    pub qp_handle: u32,
    /// Attributes to change.
    pub attr_mask: QpAttrMask,
    /// Values.
    pub attr: QpAttr,
}

impl Command for ModifyQp {
    const CODE: u32 = code::MODIFY_QP;
    const REQ_LEN: usize = 184;
    type Resp = ();
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.qp_handle);
        req.put_u32(20, self.attr_mask.bits());
        self.attr.put(req, 24);
    }
    fn decode(_: &[u8; RESP_MAX], _: u32) {}
}

/// QUERY_QP (optional in v1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryQp {
    /// QP handle.
    pub qp_handle: u32,
    /// Attributes wanted.
    pub attr_mask: QpAttrMask,
}

impl Command for QueryQp {
    const CODE: u32 = code::QUERY_QP;
    const REQ_LEN: usize = 24;
    type Resp = QpAttr;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.qp_handle);
        req.put_u32(20, self.attr_mask.bits());
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> QpAttr {
        QpAttr::get(r, 16)
    }
}

/// DESTROY_QP; responds with `events_reported`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyQp {
    /// QP handle.
    pub qp_handle: u32,
}

impl Command for DestroyQp {
    const CODE: u32 = code::DESTROY_QP;
    const REQ_LEN: usize = 24;
    type Resp = u32;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.qp_handle);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> u32 {
        get_u32(r, 16)
    }
}

/// CREATE_BIND (GID registration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateBind {
    /// Bytes; Linux: 1024 ([`CreateBind::roce_v2`]).
    pub mtu: u32,
    /// Linux: 0xFFF, no VLAN ([`CreateBind::roce_v2`]).
    pub vlan: u32,
    /// GID table index.
    pub index: u32,
    /// The GID.
    pub new_gid: [u8; 16],
    /// 2 = RoCEv2 (as the flag value, M38).
    pub gid_type: u8,
}

impl CreateBind {
    /// The bind Linux's `pvrdma_add_gid` sends (pvrdma.md §4 step 10): GID table entry
    /// `index` holds the RoCEv2 GID `gid` (`gid_type` 2, the flag value, M38), with no VLAN
    /// (0xFFF) and MTU `mtu` (Linux: always 1024; the driver: the device's `gid_mtu`, the
    /// operational RoCE MTU the miniport set). The one place a CREATE_BIND is built.
    pub const fn roce_v2(index: u32, gid: [u8; 16], mtu: u32) -> CreateBind {
        CreateBind {
            mtu,
            vlan: 0xFFF,
            index,
            new_gid: gid,
            gid_type: 2,
        }
    }
}

impl Command for CreateBind {
    const CODE: u32 = code::CREATE_BIND;
    const REQ_LEN: usize = 48;
    type Resp = ();
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.mtu);
        req.put_u32(20, self.vlan);
        req.put_u32(24, self.index);
        req.put(28, &self.new_gid);
        req.put_u8(44, self.gid_type);
    }
    fn decode(_: &[u8; RESP_MAX], _: u32) {}
}

/// DESTROY_BIND.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyBind {
    /// GID table index.
    pub index: u32,
    /// The GID.
    pub dest_gid: [u8; 16],
}

impl Command for DestroyBind {
    const CODE: u32 = code::DESTROY_BIND;
    const REQ_LEN: usize = 40;
    type Resp = ();
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.index);
        req.put(20, &self.dest_gid);
    }
    fn decode(_: &[u8; RESP_MAX], _: u32) {}
}

/// CREATE_SRQ; responds with `srqn` (the SRQ handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateSrq {
    /// Directory.
    pub pdir_dma: u64,
    /// PD.
    pub pd_handle: u32,
    /// Pages including the ring-state page.
    pub nchunks: u32,
    /// Sizes and limit.
    pub attr: SrqAttr,
    /// 0 = BASIC.
    pub srq_type: u8,
}

impl Command for CreateSrq {
    const CODE: u32 = code::CREATE_SRQ;
    const REQ_LEN: usize = 56;
    type Resp = u32;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u64(16, self.pdir_dma);
        req.put_u32(24, self.pd_handle);
        req.put_u32(28, self.nchunks);
        self.attr.put(req, 32);
        req.put_u8(48, self.srq_type);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> u32 {
        get_u32(r, 16)
    }
}

/// MODIFY_SRQ (v1: `attr_mask` = LIMIT only, M44).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifySrq {
    /// SRQ handle.
    pub srq_handle: u32,
    /// [`srq_attr_mask`] bits.
    pub attr_mask: u32,
    /// Values.
    pub attr: SrqAttr,
}

impl Command for ModifySrq {
    const CODE: u32 = code::MODIFY_SRQ;
    const REQ_LEN: usize = 40;
    type Resp = ();
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.srq_handle);
        req.put_u32(20, self.attr_mask);
        self.attr.put(req, 24);
    }
    fn decode(_: &[u8; RESP_MAX], _: u32) {}
}

/// QUERY_SRQ (optional in v1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuerySrq {
    /// SRQ handle.
    pub srq_handle: u32,
}

impl Command for QuerySrq {
    const CODE: u32 = code::QUERY_SRQ;
    const REQ_LEN: usize = 24;
    type Resp = SrqAttr;
    fn encode(&self, req: &mut [u8; REQ_MAX]) {
        req.put_u32(16, self.srq_handle);
    }
    fn decode(r: &[u8; RESP_MAX], _: u32) -> SrqAttr {
        SrqAttr::get(r, 16)
    }
}

// ---------------------------------------------------------------------------------------------
// The channel.

type RawResult = Result<[u8; RESP_MAX], PvrdmaError>;
type ResultCell<T> = SpinLock<Option<Result<T, PvrdmaError>>>;
type Completion = KBox<dyn FnOnce(RawResult) + Send>;

/// A command entry and completion allocated in advance ([`CmdChannel::reserve`]); dropping it
/// unsubmitted drops the completion uncalled.
pub struct Reserved<C: Command> {
    entry: KBox<Pending>,
    _cmd: PhantomData<fn(C)>,
}

struct Pending {
    req: [u8; REQ_MAX],
    len: usize,
    code: u32,
    key: u64,
    done: Option<Completion>,
    result: Option<RawResult>,
    next: Option<KBox<Pending>>,
}

/// An intrusive FIFO of pending commands (no allocation when linking).
#[derive(Default)]
struct Fifo {
    head: Option<KBox<Pending>>,
    len: usize,
}

impl Fifo {
    fn push_back(&mut self, p: KBox<Pending>) {
        let mut cur = &mut self.head;
        while let Some(node) = cur {
            cur = &mut node.next;
        }
        *cur = Some(p);
        self.len = self.len.saturating_add(1);
    }
    fn pop_front(&mut self) -> Option<KBox<Pending>> {
        let mut p = self.head.take()?;
        self.head = p.next.take();
        self.len = self.len.saturating_sub(1);
        Some(p)
    }
}

struct ChanState {
    outstanding: Option<KBox<Pending>>,
    deadline_ns: u64,
    waiting: Fifo,
    next_key: u64,
    closed: bool,
    timer: Option<Timer>,
    stats: ChannelStats,
}

/// Channel counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Commands submitted.
    pub submitted: u64,
    /// Commands completed with a response (success or `hdr.err`).
    pub responses: u64,
    /// Vector-0 events that matched no outstanding command.
    pub stale_interrupts: u64,
    /// Commands refused through ERR.
    pub rejected: u64,
    /// Commands timed out.
    pub timeouts: u64,
}

/// The command channel: command and response slots plus the one-outstanding FIFO.
pub struct CmdChannel {
    platform: Arc<dyn Platform>,
    slot: SharedDma,
    resp: SharedDma,
    device_version: u32,
    timeout_ns: u64,
    state: SpinLock<ChanState>,
}

struct TimerHook(Weak<CmdChannel>);

impl DpcHandler for TimerHook {
    fn run(&self) {
        if let Some(ch) = self.0.upgrade() {
            ch.on_timer();
        }
    }
}

impl CmdChannel {
    /// Allocates the two slot pages and the timeout timer. PASSIVE_LEVEL.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::NoMemory`].
    pub fn new(
        platform: Arc<dyn Platform>,
        device_version: u32,
        timeout_ns: u64,
    ) -> Result<Arc<Self>, PvrdmaError> {
        let slot = DmaBuffer::alloc(platform.dma(), PAGE_SIZE)?.share();
        let resp = DmaBuffer::alloc(platform.dma(), PAGE_SIZE)?.share();
        let ch = try_arc(CmdChannel {
            platform,
            slot,
            resp,
            device_version,
            timeout_ns,
            state: SpinLock::new(ChanState {
                outstanding: None,
                deadline_ns: 0,
                waiting: Fifo::default(),
                next_key: 1,
                closed: false,
                timer: None,
                stats: ChannelStats::default(),
            }),
        })?;
        let hook: Arc<dyn DpcHandler> = try_arc(TimerHook(Arc::downgrade(&ch)))?;
        let timer = Timer::new(ch.platform.scheduler(), hook)?;
        ch.state.lock().timer = Some(timer);
        Ok(ch)
    }

    /// Command slot address (DSR `cmd_slot_dma`).
    pub fn cmd_slot_dma(&self) -> u64 {
        self.slot.logical()
    }

    /// Response slot address (DSR `resp_slot_dma`).
    pub fn resp_slot_dma(&self) -> u64 {
        self.resp.logical()
    }

    /// Counters.
    pub fn stats(&self) -> ChannelStats {
        self.state.lock().stats
    }

    /// Queues `cmd`; `done` runs exactly once with the outcome, at DISPATCH_LEVEL from the
    /// vector-0 or timer DPC (or inline, from this call, if the device refuses the command
    /// through ERR). IRQL <= DISPATCH_LEVEL. The only allocation is this command's entry.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::NoMemory`] or [`PvrdmaError::Shutdown`]; `done` is then not called.
    pub fn submit<C: Command>(
        &self,
        cmd: &C,
        done: impl FnOnce(Result<C::Resp, PvrdmaError>) + Send + 'static,
    ) -> Result<(), PvrdmaError> {
        let device_version = self.device_version;
        let typed = move |r: RawResult| {
            done(r.and_then(|b| decode_response::<C>(&b, device_version)));
        };
        let completion: Completion =
            try_box(typed)?.map_box(|b| b as alloc::boxed::Box<dyn FnOnce(RawResult) + Send>);
        let mut req = [0u8; REQ_MAX];
        cmd.encode(&mut req);
        let entry = try_box(Pending {
            req,
            len: C::REQ_LEN.min(REQ_MAX),
            code: C::CODE,
            key: 0,
            done: Some(completion),
            result: None,
            next: None,
        })?;
        if self.state.lock().closed {
            return Err(PvrdmaError::Shutdown);
        }
        self.enqueue(entry);
        Ok(())
    }

    /// Keys `entry`, queues it and starts it if the channel is idle; on a closed channel
    /// completes it with [`PvrdmaError::Shutdown`].
    fn enqueue(&self, mut entry: KBox<Pending>) {
        let mut finished = Fifo::default();
        {
            let mut st = self.state.lock();
            if st.closed {
                drop(st);
                entry.result = Some(Err(PvrdmaError::Shutdown));
                finished.push_back(entry);
                run_finished(finished);
                return;
            }
            entry.key = st.next_key;
            st.next_key = st.next_key.wrapping_add(1).max(1);
            let (key, code) = (entry.key, entry.code);
            entry.req.put_u64(0, key);
            entry.req.put_u32(8, code);
            entry.req.put_u32(12, 0);
            st.stats.submitted = st.stats.submitted.wrapping_add(1);
            st.waiting.push_back(entry);
            self.start_next(&mut st, &mut finished);
        }
        run_finished(finished);
    }

    /// Allocates, ahead of time, everything a later [`CmdChannel::submit_reserved`] of a `C`
    /// needs: the FIFO entry and the completion `done`. Object creates reserve their DESTROY
    /// this way, so the close (which cannot fail, ndkpi.md §5.1) allocates nothing.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::NoMemory`]; `done` is then dropped uncalled.
    pub fn reserve<C: Command>(
        &self,
        done: impl FnOnce(Result<C::Resp, PvrdmaError>) + Send + 'static,
    ) -> Result<Reserved<C>, PvrdmaError> {
        let device_version = self.device_version;
        let typed = move |r: RawResult| {
            done(r.and_then(|b| decode_response::<C>(&b, device_version)));
        };
        let completion: Completion =
            try_box(typed)?.map_box(|b| b as alloc::boxed::Box<dyn FnOnce(RawResult) + Send>);
        let entry = try_box(Pending {
            req: [0u8; REQ_MAX],
            len: C::REQ_LEN.min(REQ_MAX),
            code: C::CODE,
            key: 0,
            done: Some(completion),
            result: None,
            next: None,
        })?;
        Ok(Reserved {
            entry,
            _cmd: PhantomData,
        })
    }

    /// Queues `cmd` in the entry reserved for it; allocates nothing and cannot fail. The
    /// reserved completion runs exactly once as for [`CmdChannel::submit`]; after
    /// [`CmdChannel::shutdown`] it runs right away with [`PvrdmaError::Shutdown`].
    pub fn submit_reserved<C: Command>(&self, reserved: Reserved<C>, cmd: &C) {
        let mut entry = reserved.entry;
        cmd.encode(&mut entry.req);
        self.enqueue(entry);
    }

    /// Submits and waits (PASSIVE_LEVEL only).
    ///
    /// # Errors
    ///
    /// Whatever the command completes with, [`PvrdmaError::Timeout`] if the wait itself
    /// expires, or a submit error.
    pub fn execute<C: Command>(&self, cmd: &C) -> Result<C::Resp, PvrdmaError> {
        let cell: Arc<ResultCell<C::Resp>> = try_arc(SpinLock::new(None))?;
        let c2 = cell.clone();
        self.submit(cmd, move |r| *c2.lock() = Some(r))?;
        // The channel's own timer fires at `timeout_ns`; wait a little longer than that so
        // the timer, not this wait, decides, unless the DPC machinery itself is stuck.
        let wait_ns = self
            .timeout_ns
            .saturating_mul(2)
            .saturating_add(1_000_000_000);
        self.platform.wait_until(&|| cell.lock().is_some(), wait_ns);
        let r = cell.lock().take();
        r.unwrap_or(Err(PvrdmaError::Timeout))
    }

    /// Starts waiting commands until one is outstanding; commands refused through ERR are
    /// moved to `finished`.
    fn start_next(&self, st: &mut ChanState, finished: &mut Fifo) {
        while st.outstanding.is_none() {
            let Some(mut p) = st.waiting.pop_front() else {
                return;
            };
            let bar1 = self.platform.bar1();
            let slot = self.slot.view();
            slot.write_bytes(0, p.req.get(..p.len).unwrap_or(&[]));
            // The request must be in memory before the device is told to read it.
            to_device_barrier();
            regs::REQUEST.write(bar1, 0);
            // REQUEST must reach the device before ERR is read back.
            mmio_flush();
            let err = regs::ERR.read(bar1);
            if err != 0 {
                st.stats.rejected = st.stats.rejected.wrapping_add(1);
                p.result = Some(Err(PvrdmaError::CommandRejected { code: p.code, err }));
                finished.push_back(p);
                continue;
            }
            st.deadline_ns = self.platform.now_ns().saturating_add(self.timeout_ns);
            if let Some(t) = &st.timer {
                t.schedule_in(self.timeout_ns);
            }
            st.outstanding = Some(p);
        }
    }

    /// Vector-0 DPC body: completes the outstanding command if its response is in the slot.
    pub fn on_vector0(&self) {
        let mut finished = Fifo::default();
        {
            let mut st = self.state.lock();
            let resp = self.resp.view();
            let matches = st
                .outstanding
                .as_ref()
                .is_some_and(|p| resp.read_u64(0) == p.key);
            if !matches {
                st.stats.stale_interrupts = st.stats.stale_interrupts.wrapping_add(1);
                return;
            }
            // The key says the response is ours; read the rest only after it.
            from_device_barrier();
            let mut buf = [0u8; RESP_MAX];
            resp.read_bytes(0, &mut buf);
            if let Some(mut p) = st.outstanding.take() {
                if let Some(t) = &st.timer {
                    t.cancel();
                }
                st.stats.responses = st.stats.responses.wrapping_add(1);
                p.result = Some(check_header(p.code, &buf).map(|()| buf));
                finished.push_back(p);
            }
            self.start_next(&mut st, &mut finished);
        }
        run_finished(finished);
    }

    /// Timer DPC body: fails the outstanding command once its deadline has passed.
    pub fn on_timer(&self) {
        let mut finished = Fifo::default();
        {
            let mut st = self.state.lock();
            if st.outstanding.is_none() {
                return;
            }
            let now = self.platform.now_ns();
            if now < st.deadline_ns {
                let left = st.deadline_ns - now;
                if let Some(t) = &st.timer {
                    t.schedule_in(left);
                }
                return;
            }
            if let Some(mut p) = st.outstanding.take() {
                st.stats.timeouts = st.stats.timeouts.wrapping_add(1);
                p.result = Some(Err(PvrdmaError::Timeout));
                finished.push_back(p);
            }
            self.start_next(&mut st, &mut finished);
        }
        run_finished(finished);
    }

    /// Whether [`CmdChannel::shutdown`] ran: the device was RESET and touches no memory any
    /// more.
    pub fn is_shut_down(&self) -> bool {
        self.state.lock().closed
    }

    /// Refuses new commands and fails every pending one with [`PvrdmaError::Shutdown`]
    /// (teardown, after RESET: the device will not answer any more).
    pub fn shutdown(&self) {
        let mut finished = Fifo::default();
        {
            let mut st = self.state.lock();
            st.closed = true;
            if let Some(t) = &st.timer {
                t.cancel();
            }
            if let Some(p) = st.outstanding.take() {
                finished.push_back(p);
            }
            while let Some(p) = st.waiting.pop_front() {
                finished.push_back(p);
            }
        }
        let mut f = finished;
        while let Some(mut p) = f.pop_front() {
            if p.result.is_none() {
                p.result = Some(Err(PvrdmaError::Shutdown));
            }
            let mut one = Fifo::default();
            one.push_back(p);
            run_finished(one);
        }
    }

    /// Commands waiting behind the outstanding one.
    pub fn waiting(&self) -> usize {
        self.state.lock().waiting.len
    }

    /// Whether a command is outstanding.
    pub fn busy(&self) -> bool {
        self.state.lock().outstanding.is_some()
    }
}

fn run_finished(mut finished: Fifo) {
    while let Some(mut p) = finished.pop_front() {
        let result = p.result.take().unwrap_or(Err(PvrdmaError::Shutdown));
        if let Some(done) = p.done.take() {
            (done.into_inner())(result);
        }
    }
}

#[cfg(test)]
mod tests;
