//! UD and GSI (reference §14 "UD and GSI"; M37): SEND_ONLY(_IMM) with a DETH, routed by the
//! AV; receives get the 40-byte GRH area first; silent drops on an empty RQ, a too-small
//! buffer or a Q_Key mismatch; sends complete when handed to the fabric.
#![deny(unsafe_code)]

use super::requester::Requester;
use super::{RoceTransport, Route};
use crate::device::{Core, QpInfo, RecvCompletion, SendWork};
use crate::qp::QpType;
use crate::wire::opcode as op;
use crate::wire::roce::{RocePacket, grh_area};
use crate::wire::{DethRepr, ExtRepr};
use crate::wqe::{send_flags, status, wc, wc_flags, wr};

/// `IB_QP1_QKEY`: the Q_Key of QP1 (GSI).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Bytes of GRH area in front of every UD receive.
const GRH_LEN: usize = 40;

impl RoceTransport {
    /// Sends one UD/GSI datagram and completes its WQE (handed to the fabric = done).
    pub(super) fn ud_send(
        &mut self,
        core: &mut Core,
        info: &QpInfo,
        req: &mut Requester,
        w: SendWork,
    ) {
        let ud = w.wqe.ud();
        // Linux substitutes the QP's Q_Key when bit 31 of remote_qkey is set (§10).
        let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
            if info.ty == QpType::Gsi {
                GSI_QKEY
            } else {
                info.attr.qkey
            }
        } else {
            ud.remote_qkey
        };
        match core.gid(u32::from(ud.gid_index)) {
            Some(sgid) => {
                let route = Route {
                    dmac: ud.dmac,
                    sgid: sgid.gid,
                    dgid: ud.dgid,
                    traffic_class: (ud.sl_tclass_flowlabel >> 20) as u8,
                    hop_limit: if ud.hop_limit == 0 { 64 } else { ud.hop_limit },
                    udp_src: 0xC000 | (info.qpn & 0x3FFF) as u16,
                };
                let with_imm = w.wqe.opcode == wr::SEND_WITH_IMM;
                let opcode = if with_imm {
                    op::UD_SEND_ONLY_WITH_IMMEDIATE
                } else {
                    op::UD_SEND_ONLY
                };
                let mut bth = Self::bth(opcode, ud.remote_qpn & 0xFF_FFFF, req.ud_psn);
                bth.solicited = w.wqe.send_flags & send_flags::SOLICITED != 0;
                req.ud_psn = req.ud_psn.next();
                let ext = ExtRepr {
                    deth: Some(DethRepr {
                        qkey,
                        src_qp: info.qpn,
                    }),
                    immdt: with_imm.then(|| u32::from_be_bytes(w.wqe.ex)),
                    ..Default::default()
                };
                self.send_frame(core, &route, bth, ext, &w.payload);
            }
            None => self.count(|c| c.tx_errors += 1),
        }
        core.complete_send(
            info.handle,
            w.index,
            status::SUCCESS,
            w.payload.len() as u32,
        );
    }

    /// A UD/GSI datagram for QP `qp` (in RTR or RTS).
    pub(super) fn ud_receive(
        &mut self,
        core: &mut Core,
        qp: u32,
        pkt: &RocePacket<'_>,
        frame: &[u8],
    ) {
        let Some(info) = core.qp_info(qp) else { return };
        let Some(deth) = pkt.ext.deth else { return };
        let want = if info.ty == QpType::Gsi {
            GSI_QKEY
        } else {
            info.attr.qkey
        };
        let need = (GRH_LEN + pkt.payload.len()) as u64;
        // An empty queue falls through to the take, which also reports a failed RQ/SRQ.
        let too_small = core.peek_recv(qp).is_some_and(|w| w.capacity() < need);
        if deth.qkey != want || too_small {
            self.count(|c| c.ud_dropped += 1);
            return;
        }
        let w = match core.take_recv(qp) {
            Ok(Some(w)) => w,
            _ => {
                self.count(|c| c.ud_dropped += 1);
                return;
            }
        };
        let fail = |core: &mut Core, st: u32| {
            let c = RecvCompletion {
                status: st,
                opcode: wc::RECV,
                ..Default::default()
            };
            core.complete_recv(qp, w.token, &c);
        };
        if w.malformed {
            fail(core, status::LOC_QP_OP_ERR);
            return;
        }
        let Ok(grh) = grh_area(frame) else {
            fail(core, status::LOC_PROT_ERR);
            return;
        };
        if let Err(st) = core.recv_scatter(qp, w.token, 0, &grh) {
            fail(core, st);
            return;
        }
        if !pkt.payload.is_empty()
            && let Err(st) = core.recv_scatter(qp, w.token, GRH_LEN as u64, pkt.payload)
        {
            fail(core, st);
            return;
        }
        let mut flags = wc_flags::GRH | wc_flags::WITH_SMAC | wc_flags::WITH_NETWORK_HDR_TYPE;
        let mut imm = [0u8; 4];
        if let Some(i) = pkt.ext.immdt {
            flags |= wc_flags::WITH_IMM;
            imm = i.to_be_bytes();
        }
        let c = RecvCompletion {
            status: status::SUCCESS,
            opcode: wc::RECV,
            byte_len: need as u32,
            imm_data: imm,
            src_qp: deth.src_qp,
            wc_flags: flags,
            smac: pkt.src_mac,
            network_hdr_type: if pkt.is_ipv4() { 1 } else { 2 },
            solicited: pkt.bth.solicited,
        };
        core.complete_recv(qp, w.token, &c);
    }
}
