//! RC responder (reference §14 responder table; M22 COMM_EST, M23, M28, M30, M34-M36, M46):
//! PSN checking (duplicates re-ACKed, duplicate READs re-executed, one sequence NAK per gap),
//! execution in PSN order, receive CQEs, and the exact NAK / QP error / async event per class.
#![deny(unsafe_code)]

use super::{RoceTransport, TIMER_DELAYED, mtu_bytes, timer_token};
use crate::device::{Core, QpInfo, RecvCompletion};
use crate::mr::access;
use crate::qp::QpState;
use crate::wire::opcode as op;
use crate::wire::roce::RocePacket;
use crate::wire::{AethRepr, AethSyndrome, ExtRepr, NakCode, Psn, RethRepr};
use crate::wqe::{event, status, wc, wc_flags};

/// A multi-packet message being received.
#[derive(Clone, Copy, Debug)]
enum InMsg {
    Send {
        token: u32,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        len: u64,
        offset: u64,
    },
}

/// Responder state of one RC QP in RTR or RTS.
#[derive(Debug)]
pub(super) struct Responder {
    epsn: Psn,
    msn: u32,
    nak_sent: bool,
    comm_est: bool,
    cur: Option<InMsg>,
}

impl Responder {
    fn new(info: &QpInfo) -> Self {
        Self {
            epsn: Psn::new(info.attr.rq_psn),
            msn: 0,
            nak_sent: false,
            comm_est: false,
            cur: None,
        }
    }
}

/// What the packet's opcode says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Send { first: bool, last: bool },
    Write { first: bool, last: bool },
    Read,
}

fn classify(opcode: u8) -> Option<Class> {
    Some(match opcode {
        op::RC_SEND_FIRST => Class::Send {
            first: true,
            last: false,
        },
        op::RC_SEND_MIDDLE => Class::Send {
            first: false,
            last: false,
        },
        op::RC_SEND_LAST | op::RC_SEND_LAST_WITH_IMMEDIATE | op::RC_SEND_LAST_WITH_INVALIDATE => {
            Class::Send {
                first: false,
                last: true,
            }
        }
        op::RC_SEND_ONLY | op::RC_SEND_ONLY_WITH_IMMEDIATE | op::RC_SEND_ONLY_WITH_INVALIDATE => {
            Class::Send {
                first: true,
                last: true,
            }
        }
        op::RC_RDMA_WRITE_FIRST => Class::Write {
            first: true,
            last: false,
        },
        op::RC_RDMA_WRITE_MIDDLE => Class::Write {
            first: false,
            last: false,
        },
        op::RC_RDMA_WRITE_LAST | op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => Class::Write {
            first: false,
            last: true,
        },
        op::RC_RDMA_WRITE_ONLY | op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => Class::Write {
            first: true,
            last: true,
        },
        op::RC_RDMA_READ_REQUEST => Class::Read,
        _ => return None,
    })
}

/// How a request packet ended.
enum Outcome {
    /// Executed; `ack` = the last packet of a SEND/WRITE (the message is done: MSN + 1 and
    /// an ACK). A middle packet whose AckReq is set is ACKed too (without the MSN).
    Done { ack: bool, psns: u32 },
    /// No receive WQE: RNR NAK, PSN not consumed.
    Rnr,
    /// Fatal for the QP: NAK `code`, then ERR (unless a receive CQE already did it) and
    /// `event` if any.
    Fail {
        code: NakCode,
        event: Option<u32>,
        enter_err: bool,
    },
    /// Dropped (QP failed fatally meanwhile).
    Drop,
}

impl RoceTransport {
    fn send_aeth(&self, core: &Core, qp: u32, psn: Psn, syndrome: AethSyndrome, msn: u32) {
        let Some(info) = core.qp_info(qp) else { return };
        let Some(route) = Self::rc_route(core, qp) else {
            self.count(|c| c.tx_errors += 1);
            return;
        };
        let ext = ExtRepr {
            aeth: Some(AethRepr {
                syndrome,
                msn: msn & 0xFF_FFFF,
            }),
            ..Default::default()
        };
        let bth = Self::bth(op::RC_ACKNOWLEDGE, info.attr.dest_qp_num, psn);
        self.send_frame(core, &route, bth, ext, &[]);
    }

    /// A request packet for responder QP `qp` (in RTR or RTS).
    pub(super) fn resp_request(&mut self, core: &mut Core, qp: u32, pkt: &RocePacket<'_>) {
        let Some(info) = core.qp_info(qp) else { return };
        let t = self.qps.entry(qp).or_default();
        let mut r = t.resp.take().unwrap_or_else(|| Responder::new(&info));
        if info.state == QpState::Rtr && !r.comm_est {
            core.post_qp_event(qp, event::COMM_EST);
        }
        r.comm_est = true;
        let psn = pkt.bth.psn;
        let d = psn.diff(r.epsn);
        if d < 0 {
            self.count(|c| c.duplicates += 1);
            if pkt.bth.opcode == op::RC_RDMA_READ_REQUEST {
                // M23: duplicate READs are re-executed (nothing changes if the access now fails).
                if let Some(reth) = pkt.ext.reth
                    && Self::read_allowed(&info)
                    && core.remote_check(qp, reth.rkey, reth.va, u64::from(reth.dma_len), false)
                {
                    self.read_respond(core, qp, &info, psn, reth, r.msn);
                }
            } else if pkt.bth.ack_req {
                self.count(|c| c.acks_sent += 1);
                let ack = AethSyndrome::Ack {
                    credits: AethSyndrome::UNLIMITED_CREDITS,
                };
                self.send_aeth(core, qp, r.epsn.sub(1), ack, r.msn);
            }
            self.put_resp(core, qp, r);
            return;
        }
        if d > 0 {
            if !r.nak_sent {
                r.nak_sent = true;
                self.count(|c| {
                    c.naks_sent += 1;
                    c.seq_naks_sent += 1;
                });
                let nak = AethSyndrome::Nak(NakCode::PsnSequenceError);
                self.send_aeth(core, qp, r.epsn, nak, r.msn);
            }
            self.put_resp(core, qp, r);
            return;
        }
        r.nak_sent = false;
        match self.execute(core, qp, &info, &mut r, pkt) {
            Outcome::Done { ack, psns } => {
                r.epsn = r.epsn.add(psns);
                if ack {
                    r.msn = r.msn.wrapping_add(1) & 0xFF_FFFF;
                }
                // A request packet with AckReq set is acknowledged, also in the middle of a
                // message, as rxe's responder does (rxe_resp.c `acknowledge`: an ACK whenever
                // `bth_ack(pkt)`): a requester that bounds its unacknowledged packets (rxe:
                // 128, AckReq every 64) waits for these, and without them stalls until its
                // retransmission timer. A READ is acknowledged by its response.
                let ack_req = pkt.bth.ack_req && pkt.bth.opcode != op::RC_RDMA_READ_REQUEST;
                if ack || ack_req {
                    self.count(|c| c.acks_sent += 1);
                    let s = AethSyndrome::Ack {
                        credits: AethSyndrome::UNLIMITED_CREDITS,
                    };
                    self.send_aeth(core, qp, psn, s, r.msn);
                }
            }
            Outcome::Rnr => {
                self.count(|c| c.rnr_naks_sent += 1);
                let s = AethSyndrome::RnrNak {
                    timer: info.attr.min_rnr_timer & 0x1F,
                };
                self.send_aeth(core, qp, psn, s, r.msn);
            }
            Outcome::Fail {
                code,
                event,
                enter_err,
            } => {
                self.count(|c| c.naks_sent += 1);
                self.send_aeth(core, qp, psn, AethSyndrome::Nak(code), r.msn);
                if enter_err {
                    core.set_qp_error(qp);
                }
                if let Some(e) = event {
                    core.post_qp_event(qp, e);
                }
                r.cur = None;
            }
            Outcome::Drop => {}
        }
        self.put_resp(core, qp, r);
    }

    fn put_resp(&mut self, core: &Core, qp: u32, r: Responder) {
        if core
            .qp_info(qp)
            .is_some_and(|i| matches!(i.state, QpState::Rtr | QpState::Rts))
        {
            self.qps.entry(qp).or_default().resp = Some(r);
        }
    }

    fn read_allowed(info: &QpInfo) -> bool {
        info.attr.qp_access_flags & access::REMOTE_READ != 0 && info.attr.max_dest_rd_atomic > 0
    }

    fn invalid() -> Outcome {
        Outcome::Fail {
            code: NakCode::InvalidRequest,
            event: Some(event::QP_REQ_ERR),
            enter_err: true,
        }
    }

    fn access_err() -> Outcome {
        Outcome::Fail {
            code: NakCode::RemoteAccessError,
            event: Some(event::QP_ACCESS_ERR),
            enter_err: true,
        }
    }

    /// A receive WQE failed with `st` (its CQE moves the QP to ERR), wire NAK `code`.
    fn recv_fail(core: &mut Core, qp: u32, token: u32, st: u32, code: NakCode) -> Outcome {
        let c = RecvCompletion {
            status: st,
            opcode: wc::RECV,
            ..Default::default()
        };
        core.complete_recv(qp, token, &c);
        Outcome::Fail {
            code,
            event: None,
            enter_err: false,
        }
    }

    /// Takes a receive WQE for a SEND or WRITE_WITH_IMM (RQ or SRQ, M46).
    fn take_for(core: &mut Core, qp: u32) -> Result<u32, Outcome> {
        match core.take_recv(qp) {
            Err(_) => Err(Outcome::Drop),
            Ok(None) => Err(Outcome::Rnr),
            Ok(Some(w)) if w.malformed => Err(Self::recv_fail(
                core,
                qp,
                w.token,
                status::LOC_QP_OP_ERR,
                NakCode::RemoteOperationalError,
            )),
            Ok(Some(w)) => Ok(w.token),
        }
    }

    fn execute(
        &mut self,
        core: &mut Core,
        qp: u32,
        info: &QpInfo,
        r: &mut Responder,
        pkt: &RocePacket<'_>,
    ) -> Outcome {
        let opcode = pkt.bth.opcode;
        let Some(class) = classify(opcode) else {
            return Self::invalid();
        };
        let data = pkt.payload;
        let seq_ok = match (r.cur, class) {
            (None, Class::Read) => true,
            (None, Class::Send { first, .. } | Class::Write { first, .. }) => first,
            (Some(InMsg::Send { .. }), Class::Send { first, .. }) => !first,
            (Some(InMsg::Write { .. }), Class::Write { first, .. }) => !first,
            _ => false,
        };
        if !seq_ok {
            return Self::invalid();
        }
        let imm = pkt.ext.immdt.map(u32::to_be_bytes);
        match class {
            Class::Read => {
                let Some(reth) = pkt.ext.reth else {
                    return Self::invalid();
                };
                if !Self::read_allowed(info) {
                    return Self::invalid();
                }
                let len = u64::from(reth.dma_len);
                if !core.remote_check(qp, reth.rkey, reth.va, len, false) {
                    return Self::access_err();
                }
                r.msn = r.msn.wrapping_add(1) & 0xFF_FFFF;
                if !self.read_respond(core, qp, info, pkt.bth.psn, reth, r.msn) {
                    return Self::access_err();
                }
                let mtu = mtu_bytes(info.attr.path_mtu) as u64;
                let psns = len.div_ceil(mtu).max(1) as u32;
                Outcome::Done { ack: false, psns }
            }
            Class::Send { first, last } => {
                if first {
                    match Self::take_for(core, qp) {
                        Ok(token) => r.cur = Some(InMsg::Send { token, offset: 0 }),
                        Err(o) => return o,
                    }
                }
                let Some(InMsg::Send { token, offset }) = r.cur else {
                    return Self::invalid();
                };
                let mut flags = 0;
                let mut key = [0u8; 4];
                if let Some(k) = pkt.ext.ieth {
                    // M28: in the responder's PD, before data placement.
                    if !core.remote_invalidate(qp, k) {
                        r.cur = None;
                        return Self::recv_fail(
                            core,
                            qp,
                            token,
                            status::REM_INV_REQ_ERR,
                            NakCode::InvalidRequest,
                        );
                    }
                    flags |= wc_flags::WITH_INVALIDATE;
                    key = k.to_le_bytes();
                }
                if !data.is_empty()
                    && let Err(st) = core.recv_scatter(qp, token, offset, data)
                {
                    r.cur = None;
                    return if st == status::LOC_LEN_ERR {
                        Self::recv_fail(core, qp, token, st, NakCode::InvalidRequest)
                    } else {
                        Self::recv_fail(
                            core,
                            qp,
                            token,
                            status::LOC_PROT_ERR,
                            NakCode::RemoteOperationalError,
                        )
                    };
                }
                let offset = offset + data.len() as u64;
                if !last {
                    r.cur = Some(InMsg::Send { token, offset });
                    return Outcome::Done {
                        ack: false,
                        psns: 1,
                    };
                }
                r.cur = None;
                if let Some(i) = imm {
                    flags |= wc_flags::WITH_IMM;
                    key = i;
                }
                let c = RecvCompletion {
                    status: status::SUCCESS,
                    opcode: wc::RECV,
                    byte_len: offset as u32,
                    imm_data: key,
                    src_qp: info.attr.dest_qp_num,
                    wc_flags: flags,
                    solicited: pkt.bth.solicited,
                    ..Default::default()
                };
                core.complete_recv(qp, token, &c);
                Outcome::Done { ack: true, psns: 1 }
            }
            Class::Write { first, last } => {
                if first {
                    let Some(reth) = pkt.ext.reth else {
                        return Self::invalid();
                    };
                    if info.attr.qp_access_flags & access::REMOTE_WRITE == 0 {
                        return Self::invalid();
                    }
                    let len = u64::from(reth.dma_len);
                    if !core.remote_check(qp, reth.rkey, reth.va, len, true) {
                        return Self::access_err();
                    }
                    r.cur = Some(InMsg::Write {
                        va: reth.va,
                        rkey: reth.rkey,
                        len,
                        offset: 0,
                    });
                }
                let Some(InMsg::Write {
                    va,
                    rkey,
                    len,
                    offset,
                }) = r.cur
                else {
                    return Self::invalid();
                };
                let end = offset + data.len() as u64;
                if end > len || (last && end != len) {
                    return Self::invalid();
                }
                // WRITE_WITH_IMM takes its receive WQE before placing the last data, so an
                // RNR retry of the last packet finds the QP unchanged.
                let token = if last && imm.is_some() {
                    match Self::take_for(core, qp) {
                        Ok(t) => Some(t),
                        Err(o) => return o,
                    }
                } else {
                    None
                };
                if !data.is_empty() && !core.remote_write(qp, rkey, va.wrapping_add(offset), data) {
                    return Self::access_err();
                }
                if !last {
                    r.cur = Some(InMsg::Write {
                        va,
                        rkey,
                        len,
                        offset: end,
                    });
                    return Outcome::Done {
                        ack: false,
                        psns: 1,
                    };
                }
                r.cur = None;
                if let (Some(token), Some(i)) = (token, imm) {
                    let c = RecvCompletion {
                        status: status::SUCCESS,
                        opcode: wc::RECV_RDMA_WITH_IMM,
                        byte_len: end as u32,
                        imm_data: i,
                        src_qp: info.attr.dest_qp_num,
                        wc_flags: wc_flags::WITH_IMM,
                        solicited: pkt.bth.solicited,
                        ..Default::default()
                    };
                    core.complete_recv(qp, token, &c);
                }
                Outcome::Done { ack: true, psns: 1 }
            }
        }
    }

    /// Sends the READ responses for `reth` starting at `psn`. False if the memory could not
    /// be read.
    fn read_respond(
        &mut self,
        core: &mut Core,
        qp: u32,
        info: &QpInfo,
        psn: Psn,
        reth: RethRepr,
        msn: u32,
    ) -> bool {
        let Some(route) = Self::rc_route(core, qp) else {
            self.count(|c| c.tx_errors += 1);
            return true;
        };
        let mtu = mtu_bytes(info.attr.path_mtu);
        let len = reth.dma_len as usize;
        let n = len.div_ceil(mtu).max(1);
        let delay = self.link.read_delay();
        let mut held = Vec::new();
        // Built first, then transmitted together under one fabric lock: the frames go out in
        // the same order and with the same sequence numbers as one by one.
        let mut ready = std::mem::take(&mut self.responses);
        for k in 0..n {
            let lo = k * mtu;
            let chunk = (len - lo).min(mtu);
            let opcode = match (k == 0, k + 1 == n) {
                (true, true) => op::RC_RDMA_READ_RESPONSE_ONLY,
                (true, false) => op::RC_RDMA_READ_RESPONSE_FIRST,
                (false, false) => op::RC_RDMA_READ_RESPONSE_MIDDLE,
                (false, true) => op::RC_RDMA_READ_RESPONSE_LAST,
            };
            let mut ext = ExtRepr::default();
            if opcode != op::RC_RDMA_READ_RESPONSE_MIDDLE {
                ext.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::Ack {
                        credits: AethSyndrome::UNLIMITED_CREDITS,
                    },
                    msn: msn & 0xFF_FFFF,
                });
            }
            let bth = Self::bth(opcode, info.attr.dest_qp_num, psn.add(k as u32));
            let va = reth.va.wrapping_add(lo as u64);
            let frame = self.build_frame_filled(core, &route, bth, ext, chunk, |core, data| {
                core.remote_read(qp, reth.rkey, va, data)
            });
            match frame {
                Err(()) => {
                    self.transmit_all(&mut ready);
                    self.responses = ready;
                    return false;
                }
                Ok(Some(f)) if delay == 0 => ready.push(f),
                Ok(Some(f)) => held.push(f),
                Ok(None) => {}
            }
        }
        self.transmit_all(&mut ready);
        self.responses = ready;
        if !held.is_empty() {
            let generation = self.next_gen();
            let at = self.link.now().saturating_add(delay);
            self.delayed.insert(generation, held);
            self.link
                .schedule(at, timer_token(0, TIMER_DELAYED, generation));
        }
        true
    }
}
