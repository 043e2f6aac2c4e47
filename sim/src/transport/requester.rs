//! RC requester (reference §14 "RC operations" and "Requester response handling"; M23, M31,
//! M36, M42): segmentation at `path_mtu` with one PSN per packet, go-back-N on sequence NAKs
//! and timeouts, the RNR timer, NAK → status mapping, READ responses scattered in order.
#![deny(unsafe_code)]

use std::collections::VecDeque;

use super::{PortLink, RoceTransport, Route, TIMER_RETRY, TIMER_RNR, mtu_bytes, timer_token};
use crate::device::{Core, QpInfo, SendWork};
use crate::fabric::TimerId;
use crate::qp::{QpState, QpType};
use crate::wire::opcode as op;
use crate::wire::roce::RocePacket;
use crate::wire::{AethSyndrome, ExtRepr, NakCode, Psn, RethRepr};
use crate::wqe::{send_flags, status, wr};

/// RNR NAK timer code → microseconds (IB encoding as rxe `rnrnak_usec`; §14).
const RNR_USEC: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// RNR wait in ns for timer code `t`.
pub(crate) fn rnr_ns(t: u8) -> u64 {
    RNR_USEC[usize::from(t & 0x1F)] * 1_000
}

/// Retransmission timeout in ns: 4.096 µs · 2^timeout, `None` for 0 (infinite; §14).
pub(crate) fn timeout_ns(t: u8) -> Option<u64> {
    (t != 0).then(|| 4_096u64 << u32::from(t.min(31)))
}

/// One started RC message.
#[derive(Debug)]
struct Msg {
    index: u32,
    opcode: u32,
    first_psn: Psn,
    /// PSNs the message uses (READ: response packets).
    npkts: u32,
    payload: Vec<u8>,
    len: u32,
    raddr: u64,
    rkey: u32,
    ex: [u8; 4],
    inv: u32,
    solicited: bool,
    read_bytes: u64,
    read_pkts: u32,
}

impl Msg {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
    fn is_read(&self) -> bool {
        self.opcode == wr::RDMA_READ
    }
}

/// Requester state of one RC QP in RTS.
#[derive(Debug)]
pub(super) struct Requester {
    next_psn: Psn,
    msgs: VecDeque<Msg>,
    retry_left: u8,
    rnr_left: u8,
    retry_timer: Option<TimerId>,
    retry_gen: u64,
    rnr_timer: Option<TimerId>,
    rnr_gen: u64,
    rnr_psn: Option<Psn>,
    /// UD/GSI: PSN of the next datagram.
    pub(super) ud_psn: Psn,
}

impl Requester {
    pub(super) fn new(info: &QpInfo) -> Self {
        Self {
            next_psn: Psn::new(info.attr.sq_psn),
            msgs: VecDeque::new(),
            retry_left: info.attr.retry_cnt.min(7),
            rnr_left: info.attr.rnr_retry.min(7),
            retry_timer: None,
            retry_gen: 0,
            rnr_timer: None,
            rnr_gen: 0,
            rnr_psn: None,
            ud_psn: Psn::new(info.attr.sq_psn),
        }
    }

    pub(super) fn cancel_timers(&self, link: &PortLink) {
        if let Some(t) = self.retry_timer {
            link.cancel(t);
        }
        if let Some(t) = self.rnr_timer {
            link.cancel(t);
        }
    }

    fn msg_at(&self, psn: Psn) -> Option<usize> {
        self.msgs
            .iter()
            .position(|m| psn.in_window(m.first_psn, m.npkts))
    }
}

fn nak_status(code: NakCode) -> u32 {
    match code {
        NakCode::InvalidRequest => status::REM_INV_REQ_ERR,
        NakCode::RemoteAccessError => status::REM_ACCESS_ERR,
        // 0x64 is treated as 0x63 (M31); reserved codes likewise.
        _ => status::REM_OP_ERR,
    }
}

impl RoceTransport {
    fn take_req(&mut self, core: &Core, qp: u32) -> Option<Requester> {
        let info = core.qp_info(qp)?;
        if info.state != QpState::Rts {
            return None;
        }
        let t = self.qps.entry(qp).or_default();
        Some(t.req.take().unwrap_or_else(|| Requester::new(&info)))
    }

    fn put_req(&mut self, core: &Core, qp: u32, req: Requester) {
        if super::qp_state(core, qp) == Some(QpState::Rts) {
            self.qps.entry(qp).or_default().req = Some(req);
        } else {
            req.cancel_timers(&self.link);
        }
    }

    fn still_rts(core: &Core, qp: u32) -> bool {
        super::qp_state(core, qp) == Some(QpState::Rts)
    }

    /// Starts every executable SQ WQE (M17). Returns true if any started.
    pub(super) fn req_pump(&mut self, core: &mut Core, qp: u32) -> bool {
        let Some(info) = core.qp_info(qp) else {
            return false;
        };
        let Some(mut req) = self.take_req(core, qp) else {
            return false;
        };
        let mut progress = false;
        if matches!(info.ty, QpType::Ud | QpType::Gsi) {
            while let Some(w) = core.next_send(qp) {
                self.ud_send(core, &info, &mut req, w);
                progress = true;
            }
            self.put_req(core, qp, req);
            return progress;
        }
        if req.rnr_psn.is_none() {
            let mtu = mtu_bytes(info.attr.path_mtu);
            let route = Self::rc_route(core, qp);
            while let Some(w) = core.next_send(qp) {
                progress = true;
                let m = Self::new_msg(&mut req, w, mtu);
                if let Some(r) = &route {
                    let end = if m.is_read() { 1 } else { m.npkts };
                    for k in 0..end {
                        self.emit_req(core, r, &info, mtu, &m, k);
                    }
                } else {
                    self.count(|c| c.tx_errors += 1);
                }
                req.msgs.push_back(m);
            }
            if progress && req.retry_timer.is_none() {
                self.arm_retry(core, qp, &mut req);
            }
        }
        self.put_req(core, qp, req);
        progress
    }

    fn new_msg(req: &mut Requester, w: SendWork, mtu: usize) -> Msg {
        let len = u32::try_from(w.wqe.total_len()).unwrap_or(u32::MAX);
        let npkts = (len as usize).div_ceil(mtu).max(1) as u32;
        let (raddr, rkey) = w.wqe.rdma();
        let m = Msg {
            index: w.index,
            opcode: w.wqe.opcode,
            first_psn: req.next_psn,
            npkts,
            payload: w.payload,
            len,
            raddr,
            rkey,
            ex: w.wqe.ex,
            inv: w.wqe.invalidate_rkey(),
            solicited: w.wqe.send_flags & send_flags::SOLICITED != 0,
            read_bytes: 0,
            read_pkts: 0,
        };
        req.next_psn = req.next_psn.add(npkts);
        m
    }

    /// Emits packet `k` of message `m` (a READ has only its request, k = 0).
    fn emit_req(&self, core: &Core, route: &Route, info: &QpInfo, mtu: usize, m: &Msg, k: u32) {
        let first = k == 0;
        let last = m.is_read() || k + 1 == m.npkts;
        let psn = m.first_psn.add(k);
        let mut ext = ExtRepr::default();
        let reth = RethRepr {
            va: m.raddr,
            rkey: m.rkey,
            dma_len: m.len,
        };
        let imm = u32::from_be_bytes(m.ex);
        let opcode = match m.opcode {
            wr::RDMA_READ => {
                ext.reth = Some(reth);
                op::RC_RDMA_READ_REQUEST
            }
            wr::RDMA_WRITE | wr::RDMA_WRITE_WITH_IMM => {
                let with_imm = m.opcode == wr::RDMA_WRITE_WITH_IMM;
                if first {
                    ext.reth = Some(reth);
                }
                if last && with_imm {
                    ext.immdt = Some(imm);
                }
                match (first, last, with_imm) {
                    (true, true, false) => op::RC_RDMA_WRITE_ONLY,
                    (true, true, true) => op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                    (true, false, _) => op::RC_RDMA_WRITE_FIRST,
                    (false, false, _) => op::RC_RDMA_WRITE_MIDDLE,
                    (false, true, false) => op::RC_RDMA_WRITE_LAST,
                    (false, true, true) => op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                }
            }
            _ => {
                let kind = m.opcode;
                if last && kind == wr::SEND_WITH_IMM {
                    ext.immdt = Some(imm);
                }
                if last && kind == wr::SEND_WITH_INV {
                    ext.ieth = Some(m.inv);
                }
                match (first, last) {
                    (true, true) => match kind {
                        wr::SEND_WITH_IMM => op::RC_SEND_ONLY_WITH_IMMEDIATE,
                        wr::SEND_WITH_INV => op::RC_SEND_ONLY_WITH_INVALIDATE,
                        _ => op::RC_SEND_ONLY,
                    },
                    (true, false) => op::RC_SEND_FIRST,
                    (false, false) => op::RC_SEND_MIDDLE,
                    (false, true) => match kind {
                        wr::SEND_WITH_IMM => op::RC_SEND_LAST_WITH_IMMEDIATE,
                        wr::SEND_WITH_INV => op::RC_SEND_LAST_WITH_INVALIDATE,
                        _ => op::RC_SEND_LAST,
                    },
                }
            }
        };
        let payload: &[u8] = if m.is_read() {
            &[]
        } else {
            let lo = (k as usize * mtu).min(m.payload.len());
            let hi = (lo + mtu).min(m.payload.len());
            &m.payload[lo..hi]
        };
        let mut bth = Self::bth(opcode, info.attr.dest_qp_num, psn);
        bth.ack_req = last;
        bth.solicited = last
            && m.solicited
            && matches!(
                m.opcode,
                wr::SEND | wr::SEND_WITH_IMM | wr::SEND_WITH_INV | wr::RDMA_WRITE_WITH_IMM
            );
        self.send_frame(core, route, bth, ext, payload);
    }

    fn arm_retry(&mut self, core: &Core, qp: u32, req: &mut Requester) {
        let old = req.retry_timer.take();
        let delay = if req.msgs.is_empty() || req.rnr_psn.is_some() {
            None
        } else {
            core.qp_info(qp)
                .and_then(|info| timeout_ns(info.attr.timeout))
                .map(|ns| ns.saturating_mul(u64::from(core.config().timer_scale.max(1))))
        };
        let Some(ns) = delay else {
            if let Some(t) = old {
                self.link.cancel(t);
            }
            return;
        };
        let generation = self.next_gen();
        req.retry_gen = generation;
        req.retry_timer = Some(
            self.link
                .rearm(old, ns, timer_token(qp, TIMER_RETRY, generation)),
        );
    }

    /// Resends every unfinished message from PSN `from` on (go-back-N; a READ is re-requested
    /// whole and its progress restarts).
    fn retransmit_from(&mut self, core: &Core, qp: u32, req: &mut Requester, from: Psn) {
        let Some(info) = core.qp_info(qp) else { return };
        let mtu = mtu_bytes(info.attr.path_mtu);
        let route = Self::rc_route(core, qp);
        let mut sent = 0u64;
        for m in req.msgs.iter_mut() {
            if m.last_psn().diff(from) < 0 {
                continue;
            }
            let k0 = if from.in_window(m.first_psn, m.npkts) && !m.is_read() {
                from.distance_from(m.first_psn)
            } else {
                0
            };
            if m.is_read() {
                m.read_bytes = 0;
                m.read_pkts = 0;
            }
            let Some(r) = &route else { continue };
            let end = if m.is_read() { 1 } else { m.npkts };
            for k in k0..end {
                self.emit_req(core, r, &info, mtu, m, k);
                sent += 1;
            }
        }
        self.count(|c| c.retransmits += sent);
    }

    /// Completes, in order, every SEND/WRITE whose last PSN is at or before `upto`.
    /// Returns whether anything completed.
    fn ack_upto(&mut self, core: &mut Core, qp: u32, req: &mut Requester, upto: Psn) -> bool {
        let mut done = false;
        let mut i = 0;
        while i < req.msgs.len() {
            let m = &req.msgs[i];
            if m.first_psn.diff(upto) > 0 {
                break;
            }
            if !m.is_read() && m.last_psn().diff(upto) <= 0 {
                let m = req.msgs.remove(i).expect("index in range");
                core.complete_send(qp, m.index, status::SUCCESS, m.len);
                done = true;
                if !Self::still_rts(core, qp) {
                    return done;
                }
            } else {
                i += 1;
            }
        }
        done
    }

    fn progressed(&mut self, core: &Core, qp: u32, req: &mut Requester) {
        if let Some(info) = core.qp_info(qp) {
            req.retry_left = info.attr.retry_cnt.min(7);
            req.rnr_left = info.attr.rnr_retry.min(7);
        }
        self.arm_retry(core, qp, req);
        self.pump.insert(qp);
    }

    /// Fails the message holding `psn` (or the oldest) with `st`: error CQE, QP → ERR (M31).
    fn fail_msg(core: &mut Core, qp: u32, req: &mut Requester, psn: Option<Psn>, st: u32) {
        let at = psn.and_then(|p| req.msg_at(p)).unwrap_or(0);
        if let Some(m) = req.msgs.remove(at) {
            core.complete_send(qp, m.index, st, 0);
        }
    }

    /// An ACK, NAK or READ response for requester QP `qp`.
    pub(super) fn req_response(&mut self, core: &mut Core, qp: u32, pkt: &RocePacket<'_>) {
        let Some(mut req) = self.take_req(core, qp) else {
            return;
        };
        let psn = pkt.bth.psn;
        if pkt.bth.opcode == op::RC_ACKNOWLEDGE {
            let Some(aeth) = pkt.ext.aeth else {
                self.put_req(core, qp, req);
                return;
            };
            match aeth.syndrome {
                AethSyndrome::Ack { .. } => {
                    self.count(|c| c.acks_received += 1);
                    if self.ack_upto(core, qp, &mut req, psn) {
                        self.progressed(core, qp, &mut req);
                    }
                }
                AethSyndrome::RnrNak { timer } => {
                    self.count(|c| c.rnr_naks_received += 1);
                    self.ack_upto(core, qp, &mut req, psn.sub(1));
                    if req.msg_at(psn).is_none() || req.rnr_psn.is_some() {
                        self.put_req(core, qp, req);
                        return;
                    }
                    let infinite = core.qp_info(qp).is_some_and(|i| i.attr.rnr_retry >= 7);
                    if !infinite && req.rnr_left == 0 {
                        Self::fail_msg(core, qp, &mut req, Some(psn), status::RNR_RETRY_EXC_ERR);
                    } else {
                        if !infinite {
                            req.rnr_left -= 1;
                        }
                        if let Some(t) = req.retry_timer.take() {
                            self.link.cancel(t);
                        }
                        req.rnr_psn = Some(psn);
                        let scale = u64::from(core.config().timer_scale.max(1));
                        let at = self
                            .link
                            .now()
                            .saturating_add(rnr_ns(timer).saturating_mul(scale));
                        let generation = self.next_gen();
                        req.rnr_gen = generation;
                        req.rnr_timer = Some(
                            self.link
                                .schedule(at, timer_token(qp, TIMER_RNR, generation)),
                        );
                    }
                }
                AethSyndrome::Nak(code) => {
                    self.count(|c| c.naks_received += 1);
                    self.ack_upto(core, qp, &mut req, psn.sub(1));
                    if Self::still_rts(core, qp) && req.msg_at(psn).is_some() {
                        if code == NakCode::PsnSequenceError && req.rnr_psn == Some(psn) {
                            // The responder RNR-NAKed this PSN and now NAKs the packets
                            // behind it as out of sequence (rxe and the model's responder
                            // both do): the RNR timer's resend from that PSN answers both.
                            // Resending now, and spending a transport retry on it, would
                            // fail the message with RETRY_EXC_ERR within microseconds
                            // whatever the RNR retry count.
                        } else if code == NakCode::PsnSequenceError {
                            if req.retry_left == 0 {
                                Self::fail_msg(
                                    core,
                                    qp,
                                    &mut req,
                                    Some(psn),
                                    status::RETRY_EXC_ERR,
                                );
                            } else {
                                req.retry_left -= 1;
                                self.count(|c| c.retries += 1);
                                self.retransmit_from(core, qp, &mut req, psn);
                                self.arm_retry(core, qp, &mut req);
                            }
                        } else {
                            Self::fail_msg(core, qp, &mut req, Some(psn), nak_status(code));
                        }
                    }
                }
                AethSyndrome::Reserved(_) => {}
            }
            self.put_req(core, qp, req);
            return;
        }
        // READ response.
        let Some(i) = req.msg_at(psn) else {
            self.put_req(core, qp, req);
            return;
        };
        if !req.msgs[i].is_read()
            || psn != req.msgs[i].first_psn.add(req.msgs[i].read_pkts)
            || pkt.payload.len() as u64 + req.msgs[i].read_bytes > u64::from(req.msgs[i].len)
        {
            // Out of order or stray: the timeout re-requests the READ.
            self.put_req(core, qp, req);
            return;
        }
        let first_psn = req.msgs[i].first_psn;
        // A response implies every earlier request was executed.
        self.ack_upto(core, qp, &mut req, first_psn.sub(1));
        if !Self::still_rts(core, qp) {
            self.put_req(core, qp, req);
            return;
        }
        let Some(i) = req.msg_at(psn) else {
            self.put_req(core, qp, req);
            return;
        };
        let (index, offset) = (req.msgs[i].index, req.msgs[i].read_bytes);
        if !pkt.payload.is_empty()
            && let Err(st) = core.scatter_read(qp, index, offset, pkt.payload)
        {
            req.msgs.remove(i);
            core.complete_send(qp, index, st, 0);
            self.put_req(core, qp, req);
            return;
        }
        let m = &mut req.msgs[i];
        m.read_bytes += pkt.payload.len() as u64;
        m.read_pkts += 1;
        let done = matches!(
            pkt.bth.opcode,
            op::RC_RDMA_READ_RESPONSE_LAST | op::RC_RDMA_READ_RESPONSE_ONLY
        );
        if done {
            let m = req.msgs.remove(i).expect("index in range");
            let st = if m.read_bytes == u64::from(m.len) {
                status::SUCCESS
            } else {
                status::BAD_RESP_ERR
            };
            core.complete_send(qp, m.index, st, m.read_bytes as u32);
        }
        self.progressed(core, qp, &mut req);
        self.put_req(core, qp, req);
    }

    /// Retransmission timer expiry (§14: consumes a retry; none left → RETRY_EXC_ERR).
    pub(super) fn req_timeout(&mut self, core: &mut Core, qp: u32, generation: u64) {
        let Some(mut req) = self.take_req(core, qp) else {
            return;
        };
        if req.retry_timer.is_none() || req.retry_gen != generation {
            self.put_req(core, qp, req);
            return;
        }
        req.retry_timer = None;
        if req.msgs.is_empty() || req.rnr_psn.is_some() {
            self.put_req(core, qp, req);
            return;
        }
        self.count(|c| c.timeouts += 1);
        if req.retry_left == 0 {
            Self::fail_msg(core, qp, &mut req, None, status::RETRY_EXC_ERR);
        } else {
            req.retry_left -= 1;
            self.count(|c| c.retries += 1);
            let from = req.msgs[0].first_psn;
            self.retransmit_from(core, qp, &mut req, from);
            self.arm_retry(core, qp, &mut req);
        }
        self.put_req(core, qp, req);
    }

    /// RNR timer expiry: resend from the RNR NAK'd PSN.
    pub(super) fn req_rnr_expired(&mut self, core: &mut Core, qp: u32, generation: u64) {
        let Some(mut req) = self.take_req(core, qp) else {
            return;
        };
        if req.rnr_timer.is_none() || req.rnr_gen != generation {
            self.put_req(core, qp, req);
            return;
        }
        req.rnr_timer = None;
        if let Some(p) = req.rnr_psn.take() {
            self.count(|c| c.rnr_retries += 1);
            self.retransmit_from(core, qp, &mut req, p);
            self.arm_retry(core, qp, &mut req);
            self.pump.insert(qp);
        }
        self.put_req(core, qp, req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rnr_timer_follows_the_ib_encoding() {
        assert_eq!(rnr_ns(0), 655_360_000);
        assert_eq!(rnr_ns(1), 10_000);
        assert_eq!(rnr_ns(12), 640_000);
        assert_eq!(rnr_ns(31), 491_520_000);
    }

    #[test]
    fn timeout_is_4096_ns_times_two_to_the_timeout_and_zero_is_infinite() {
        assert_eq!(timeout_ns(0), None);
        assert_eq!(timeout_ns(1), Some(8_192));
        assert_eq!(timeout_ns(14), Some(67_108_864));
        assert_eq!(timeout_ns(31), Some(4_096 << 31));
    }

    #[test]
    fn nak_codes_map_to_the_requester_statuses() {
        assert_eq!(nak_status(NakCode::InvalidRequest), status::REM_INV_REQ_ERR);
        assert_eq!(
            nak_status(NakCode::RemoteAccessError),
            status::REM_ACCESS_ERR
        );
        assert_eq!(
            nak_status(NakCode::RemoteOperationalError),
            status::REM_OP_ERR
        );
        assert_eq!(nak_status(NakCode::InvalidRdRequest), status::REM_OP_ERR);
    }
}
