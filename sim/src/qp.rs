//! Queue pairs: attributes, the state machine and per-QP queue bookkeeping (reference §8, §9;
//! M10, M11, M15, M32, M33, M39).
#![deny(unsafe_code)]

use std::collections::VecDeque;

use crate::le::Le;
use crate::pdir::PagedMem;
use crate::ring::Ring;
use crate::wqe::{RecvWqe, SqWqe};

/// QP types (`pvrdma_qp_type`) the model supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// QP1.
    Gsi,
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
}

impl QpType {
    /// From the CREATE_QP byte; other types are refused (M11).
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Gsi),
            2 => Some(Self::Rc),
            4 => Some(Self::Ud),
            _ => None,
        }
    }
}

/// QP states (§8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// 0
    Reset,
    /// 1
    Init,
    /// 2
    Rtr,
    /// 3
    Rts,
    /// 6
    Err,
}

impl QpState {
    /// From the wire value; SQD (4) and SQE (5) are out of scope.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Reset),
            1 => Some(Self::Init),
            2 => Some(Self::Rtr),
            3 => Some(Self::Rts),
            6 => Some(Self::Err),
            _ => None,
        }
    }
    /// Wire value.
    pub fn to_u32(self) -> u32 {
        match self {
            Self::Reset => 0,
            Self::Init => 1,
            Self::Rtr => 2,
            Self::Rts => 3,
            Self::Err => 6,
        }
    }
}

/// attr_mask bits (§8).
pub mod mask {
    #![allow(missing_docs)]
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
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
    pub ah_flags: u8,
    pub port_num: u8,
    pub dmac: [u8; 6],
}

impl AhAttr {
    fn parse(v: &Le<&[u8]>, o: usize) -> Self {
        Self {
            dgid: v.bytes(o),
            flow_label: v.u32(o + 16),
            sgid_index: v.u8(o + 20),
            hop_limit: v.u8(o + 21),
            traffic_class: v.u8(o + 22),
            dlid: v.u16(o + 24),
            vlan_id: v.u16(o + 26),
            sl: v.u8(o + 28),
            src_path_bits: v.u8(o + 29),
            static_rate: v.u8(o + 30),
            ah_flags: v.u8(o + 31),
            port_num: v.u8(o + 32),
            dmac: v.bytes(o + 33),
        }
    }
    fn emit(&self, b: &mut Le<&mut [u8]>, o: usize) {
        b.set_bytes(o, &self.dgid);
        b.set_u32(o + 16, self.flow_label);
        b.set_u8(o + 20, self.sgid_index);
        b.set_u8(o + 21, self.hop_limit);
        b.set_u8(o + 22, self.traffic_class);
        b.set_u16(o + 24, self.dlid);
        b.set_u16(o + 26, self.vlan_id);
        b.set_u8(o + 28, self.sl);
        b.set_u8(o + 29, self.src_path_bits);
        b.set_u8(o + 30, self.static_rate);
        b.set_u8(o + 31, self.ah_flags);
        b.set_u8(o + 32, self.port_num);
        b.set_bytes(o + 33, &self.dmac);
    }
}

/// QP capacities (`cap` in `pvrdma_qp_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `pvrdma_qp_attr` (160 B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
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

/// Size of `pvrdma_qp_attr`.
pub const QP_ATTR_SIZE: usize = 160;

impl QpAttr {
    /// Decodes the 160-byte attribute block starting at `o` of `v`.
    pub fn parse(v: &Le<&[u8]>, o: usize) -> Self {
        Self {
            qp_state: v.u32(o),
            cur_qp_state: v.u32(o + 4),
            path_mtu: v.u32(o + 8),
            path_mig_state: v.u32(o + 12),
            qkey: v.u32(o + 16),
            rq_psn: v.u32(o + 20),
            sq_psn: v.u32(o + 24),
            dest_qp_num: v.u32(o + 28),
            qp_access_flags: v.u32(o + 32),
            pkey_index: v.u16(o + 36),
            alt_pkey_index: v.u16(o + 38),
            en_sqd_async_notify: v.u8(o + 40),
            sq_draining: v.u8(o + 41),
            max_rd_atomic: v.u8(o + 42),
            max_dest_rd_atomic: v.u8(o + 43),
            min_rnr_timer: v.u8(o + 44),
            port_num: v.u8(o + 45),
            timeout: v.u8(o + 46),
            retry_cnt: v.u8(o + 47),
            rnr_retry: v.u8(o + 48),
            alt_port_num: v.u8(o + 49),
            alt_timeout: v.u8(o + 50),
            cap: QpCap {
                max_send_wr: v.u32(o + 56),
                max_recv_wr: v.u32(o + 60),
                max_send_sge: v.u32(o + 64),
                max_recv_sge: v.u32(o + 68),
                max_inline_data: v.u32(o + 72),
            },
            ah_attr: AhAttr::parse(v, o + 80),
            alt_ah_attr: AhAttr::parse(v, o + 120),
        }
    }

    /// Encodes into `b` at `o`.
    pub fn emit(&self, b: &mut Le<&mut [u8]>, o: usize) {
        b.set_u32(o, self.qp_state);
        b.set_u32(o + 4, self.cur_qp_state);
        b.set_u32(o + 8, self.path_mtu);
        b.set_u32(o + 12, self.path_mig_state);
        b.set_u32(o + 16, self.qkey);
        b.set_u32(o + 20, self.rq_psn);
        b.set_u32(o + 24, self.sq_psn);
        b.set_u32(o + 28, self.dest_qp_num);
        b.set_u32(o + 32, self.qp_access_flags);
        b.set_u16(o + 36, self.pkey_index);
        b.set_u16(o + 38, self.alt_pkey_index);
        b.set_u8(o + 40, self.en_sqd_async_notify);
        b.set_u8(o + 41, self.sq_draining);
        b.set_u8(o + 42, self.max_rd_atomic);
        b.set_u8(o + 43, self.max_dest_rd_atomic);
        b.set_u8(o + 44, self.min_rnr_timer);
        b.set_u8(o + 45, self.port_num);
        b.set_u8(o + 46, self.timeout);
        b.set_u8(o + 47, self.retry_cnt);
        b.set_u8(o + 48, self.rnr_retry);
        b.set_u8(o + 49, self.alt_port_num);
        b.set_u8(o + 50, self.alt_timeout);
        b.set_u32(o + 56, self.cap.max_send_wr);
        b.set_u32(o + 60, self.cap.max_recv_wr);
        b.set_u32(o + 64, self.cap.max_send_sge);
        b.set_u32(o + 68, self.cap.max_recv_sge);
        b.set_u32(o + 72, self.cap.max_inline_data);
        self.ah_attr.emit(b, o + 80);
        self.alt_ah_attr.emit(b, o + 120);
    }

    /// Copies the attributes selected by `m` from `new` (STATE and CUR_STATE excluded).
    pub fn apply(&mut self, m: u32, new: &QpAttr) {
        if m & mask::EN_SQD_ASYNC_NOTIFY != 0 {
            self.en_sqd_async_notify = new.en_sqd_async_notify;
        }
        if m & mask::ACCESS_FLAGS != 0 {
            self.qp_access_flags = new.qp_access_flags;
        }
        if m & mask::PKEY_INDEX != 0 {
            self.pkey_index = new.pkey_index;
        }
        if m & mask::PORT != 0 {
            self.port_num = new.port_num;
        }
        if m & mask::QKEY != 0 {
            self.qkey = new.qkey;
        }
        if m & mask::AV != 0 {
            self.ah_attr = new.ah_attr;
        }
        if m & mask::PATH_MTU != 0 {
            self.path_mtu = new.path_mtu;
        }
        if m & mask::TIMEOUT != 0 {
            self.timeout = new.timeout;
        }
        if m & mask::RETRY_CNT != 0 {
            self.retry_cnt = new.retry_cnt;
        }
        if m & mask::RNR_RETRY != 0 {
            self.rnr_retry = new.rnr_retry;
        }
        if m & mask::RQ_PSN != 0 {
            self.rq_psn = new.rq_psn;
        }
        if m & mask::MAX_QP_RD_ATOMIC != 0 {
            self.max_rd_atomic = new.max_rd_atomic;
        }
        if m & mask::ALT_PATH != 0 {
            self.alt_ah_attr = new.alt_ah_attr;
            self.alt_pkey_index = new.alt_pkey_index;
            self.alt_port_num = new.alt_port_num;
            self.alt_timeout = new.alt_timeout;
        }
        if m & mask::MIN_RNR_TIMER != 0 {
            self.min_rnr_timer = new.min_rnr_timer;
        }
        if m & mask::SQ_PSN != 0 {
            self.sq_psn = new.sq_psn;
        }
        if m & mask::MAX_DEST_RD_ATOMIC != 0 {
            self.max_dest_rd_atomic = new.max_dest_rd_atomic;
        }
        if m & mask::PATH_MIG_STATE != 0 {
            self.path_mig_state = new.path_mig_state;
        }
        if m & mask::DEST_QPN != 0 {
            self.dest_qp_num = new.dest_qp_num;
        }
    }
}

/// Required and optional attribute masks of a transition ([IBCORE] `qp_state_table`, M39);
/// `None` if the transition is not allowed.
pub fn transition_masks(ty: QpType, from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState::*;
    use mask::*;
    let (rc, ud) = (ty == QpType::Rc, ty != QpType::Rc);
    let gsi = ty == QpType::Gsi;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => {
            if rc {
                (PKEY_INDEX | PORT | ACCESS_FLAGS, 0)
            } else if gsi {
                (PKEY_INDEX | QKEY, 0)
            } else {
                (PKEY_INDEX | PORT | QKEY, 0)
            }
        }
        (Init, Init) => {
            if rc {
                (0, PKEY_INDEX | PORT | ACCESS_FLAGS)
            } else if gsi {
                (0, PKEY_INDEX | QKEY)
            } else {
                (0, PKEY_INDEX | PORT | QKEY)
            }
        }
        (Init, Rtr) => {
            if rc {
                (
                    AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                    ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
                )
            } else {
                debug_assert!(ud);
                (0, PKEY_INDEX | QKEY)
            }
        }
        (Rtr, Rts) => {
            if rc {
                (
                    TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC,
                    CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE,
                )
            } else {
                (SQ_PSN, CUR_STATE | QKEY)
            }
        }
        (Rts, Rts) => {
            if rc {
                (
                    0,
                    CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER,
                )
            } else {
                (0, CUR_STATE | QKEY)
            }
        }
        _ => return None,
    })
}

/// A work queue's geometry inside the QP/SRQ buffer (§9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqGeom {
    /// Ring of N WQEs.
    pub ring: Ring,
    /// WQE stride in bytes.
    pub stride: u32,
    /// Byte offset of WQE 0 in the buffer.
    pub base: u64,
    /// SGE limit.
    pub max_sge: u32,
}

impl WqGeom {
    /// Byte offset of the WQE at ring index `i`.
    pub fn offset(&self, i: u32) -> u64 {
        self.base + u64::from(self.ring.slot(i)) * u64::from(self.stride)
    }
}

/// Where a started SQ WQE stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqProgress {
    /// Handed to the transport (or executing).
    Started,
    /// Finished with a status and byte count; waiting for earlier WQEs to retire (M15).
    Done {
        /// WC status.
        status: u32,
        /// CQE byte_len.
        byte_len: u32,
    },
}

/// A started, not yet retired SQ WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqEntry {
    /// Ring index (identifies the WQE to the transport).
    pub index: u32,
    /// The WQE as read when it started (M16).
    pub wqe: SqWqe,
    /// Signalled (own flag or `sq_sig_all`).
    pub signaled: bool,
    /// Progress.
    pub progress: SqProgress,
}

/// A receive WQE taken by the responder and not yet completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvEntry {
    /// Identifies the WQE: RQ ring index, or a per-QP sequence for SRQ WQEs.
    pub token: u32,
    /// The WQE copied at take time (M46).
    pub wqe: RecvWqe,
}

/// A device-side QP.
#[derive(Clone, Debug)]
pub struct Qp {
    /// Handle (doorbells, CQE `qp`, commands).
    pub handle: u32,
    /// Wire QP number (M10).
    pub qpn: u32,
    /// Type.
    pub ty: QpType,
    /// PD handle.
    pub pd: u32,
    /// Send CQ handle.
    pub send_cq: u32,
    /// Receive CQ handle.
    pub recv_cq: u32,
    /// SRQ handle if created with one.
    pub srq: Option<u32>,
    /// State.
    pub state: QpState,
    /// Every WQE signalled.
    pub sq_sig_all: bool,
    /// QP buffer pages (page 0 = ring state).
    pub mem: PagedMem,
    /// Send queue geometry.
    pub sq: WqGeom,
    /// Receive queue geometry (`None` with an SRQ).
    pub rq: Option<WqGeom>,
    /// Attributes as last modified (QUERY_QP, transport).
    pub attr: QpAttr,
    /// Created capacities (CREATE_QP response, QUERY_QP).
    pub cap: QpCap,
    /// SQ `cons_head` as published (oldest unretired WQE).
    pub sq_head: u32,
    /// Next SQ WQE to start.
    pub sq_next: u32,
    /// Started, unretired SQ WQEs, in ring order.
    pub sq_active: VecDeque<SqEntry>,
    /// RQ `cons_head` as published.
    pub rq_head: u32,
    /// Next RQ WQE to take.
    pub rq_next: u32,
    /// Taken, uncompleted receive WQEs (RQ or SRQ), oldest first.
    pub recv_active: VecDeque<RecvEntry>,
    /// Sequence for SRQ receive tokens.
    pub srq_seq: u32,
    /// Async events posted for this QP (DESTROY_QP response).
    pub events_reported: u32,
}

/// SQ ring-state offsets in QP page 0.
pub mod ring_off {
    /// SQ prod_tail (driver).
    pub const SQ_PROD: u64 = 0;
    /// SQ cons_head (device).
    pub const SQ_CONS: u64 = 4;
    /// RQ prod_tail (driver).
    pub const RQ_PROD: u64 = 8;
    /// RQ cons_head (device).
    pub const RQ_CONS: u64 = 12;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_attr_round_trips_at_reference_offsets() {
        let mut raw = [0u8; QP_ATTR_SIZE];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = i as u8;
        }
        // bytes 51..56, 76..80 are padding/reserved and not carried.
        for i in (51..56).chain(76..80).chain([103, 119, 143, 159]) {
            raw[i] = 0;
        }
        let a = QpAttr::parse(&Le(&raw[..]), 0);
        assert_eq!(a.dest_qp_num, u32::from_le_bytes([28, 29, 30, 31]));
        assert_eq!(a.min_rnr_timer, 44);
        assert_eq!(a.cap.max_send_wr, u32::from_le_bytes([56, 57, 58, 59]));
        assert_eq!(a.ah_attr.dgid[0], 80);
        assert_eq!(a.ah_attr.ah_flags, 111);
        assert_eq!(a.alt_ah_attr.dmac, [153, 154, 155, 156, 157, 158]);
        let mut out = [0u8; QP_ATTR_SIZE];
        a.emit(&mut Le(&mut out[..]), 0);
        assert_eq!(out, raw);
    }

    #[test]
    fn transition_table_matches_ib_core() {
        use QpState::*;
        assert_eq!(
            transition_masks(QpType::Rc, Reset, Init),
            Some((mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS, 0))
        );
        assert_eq!(
            transition_masks(QpType::Gsi, Reset, Init).unwrap().0,
            mask::PKEY_INDEX | mask::QKEY
        );
        assert_eq!(
            transition_masks(QpType::Ud, Rtr, Rts).unwrap().0,
            mask::SQ_PSN
        );
        assert_eq!(transition_masks(QpType::Rc, Reset, Rtr), None);
        assert_eq!(transition_masks(QpType::Rc, Rtr, Rtr), None);
        assert_eq!(transition_masks(QpType::Rc, Rts, Init), None);
        assert_eq!(transition_masks(QpType::Rc, Err, Reset), Some((0, 0)));
    }
}
