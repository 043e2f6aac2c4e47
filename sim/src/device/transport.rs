//! The boundary between the device core and the network transport (reference §14; M22-M31,
//! M34, M46).
//!
//! The core owns queues, keys and completions; the transport (RC/UD requester and responder,
//! added later) owns the wire. The transport is installed with `Device::set_transport` and runs
//! inside [`Transport::poll`] with the device locked, calling the `Core` methods below:
//!
//! - requester: [`Core::next_send`] starts the next executable SQ WQE (local WQEs before it have
//!   run; M29 checks done; fence and READ limit respected) and returns it with its gathered
//!   payload; [`Core::scatter_read`] places READ response data (LOCAL_WRITE checked at scatter
//!   time, M29); [`Core::complete_send`] finishes it (in-order retirement, error CQE + ERR + flush).
//! - responder: [`Core::remote_check`] / [`Core::remote_read`] / [`Core::remote_write`] for RDMA
//!   (M24, M25), [`Core::remote_invalidate`] (M28), [`Core::take_recv`] (RQ or SRQ, M46),
//!   [`Core::recv_scatter`], [`Core::complete_recv`] (receive CQE, M35).
//! - both: [`Core::post_qp_event`], [`Core::set_qp_error`], [`Core::qp_info`],
//!   [`Core::qp_by_qpn`], [`Core::gid`], `Core::mac`, `Core::config` (timer scale, M42).
//!
//! Until a transport is installed, SEND/WRITE/READ WQEs stay queued: nothing fakes completions.
#![deny(unsafe_code)]

use super::{Core, GidEntry};
use crate::mr::Need;
use crate::qp::{QpAttr, QpState, QpType, RecvEntry};
use crate::srq;
use crate::wqe::{Cqe, RecvWqe, SqWqe, event, status, wc};

/// What the fabric hands to a device's transport ([`crate::Device::transport_input`]).
#[derive(Debug)]
pub enum TransportInput {
    /// A frame delivered to the device's port.
    Frame(Vec<u8>),
    /// A timer the transport scheduled fired; its token.
    Timer(u64),
    /// The port's link went up (true) or down.
    Link(bool),
}

/// The network side of a device. All methods run with the device locked.
pub trait Transport: Send {
    /// Does pending transport work (timers, fabric frames). Returns true if it made progress;
    /// `Device::process` calls it until it returns false and no doorbell work is left.
    fn poll(&mut self, core: &mut Core) -> bool;
    /// Queues an input for the next [`poll`](Self::poll), which handles inputs in arrival order.
    fn input(&mut self, input: TransportInput) {
        let _ = input;
    }
    /// Makes the transport's statistics visible to their readers (it may keep them privately
    /// while it runs; [`crate::Device::publish_transport`] calls this before a read).
    fn publish(&self) {}
    /// SQ doorbell for a QP in RTS, after local WQEs at the head of the SQ have run.
    fn sq_kick(&mut self, core: &mut Core, qp: u32) {
        let _ = (core, qp);
    }
    /// QP state changed (MODIFY_QP or an error). RESET means: drop transport state (M33).
    fn qp_state_changed(&mut self, core: &mut Core, qp: u32, state: QpState) {
        let _ = (core, qp, state);
    }
    /// QP destroyed.
    fn qp_destroyed(&mut self, core: &mut Core, qp: u32) {
        let _ = (core, qp);
    }
    /// Device RESET (M7): forget everything.
    fn reset(&mut self, core: &mut Core) {
        let _ = core;
    }
}

/// A started SQ WQE handed to the requester.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWork {
    /// Ring index; pass back to [`Core::complete_send`] / [`Core::scatter_read`].
    pub index: u32,
    /// The decoded WQE (opcode, flags, imm/invalidate key, RDMA or UD fields, SGEs).
    pub wqe: SqWqe,
    /// Gathered payload for SEND*/WRITE* (empty for READ).
    pub payload: Vec<u8>,
}

/// A receive WQE taken for an incoming message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWork {
    /// Identifies the WQE; pass back to [`Core::recv_scatter`] / [`Core::complete_recv`].
    pub token: u32,
    /// The WQE as copied at take time.
    pub wqe: RecvWqe,
    /// `num_sge` exceeded the queue's limit: complete with LOC_QP_OP_ERR (§14).
    pub malformed: bool,
}

/// Why no receive WQE could be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakeError {
    /// Unknown QP handle.
    NoQp,
    /// The QP entered ERR with QP_FATAL (bad index, unreadable WQE, SRQ in error).
    Fatal,
}

/// Fields of a receive completion (M28, M35, M37). `status` ≠ 0 → error CQE, QP → ERR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvCompletion {
    /// WC status.
    pub status: u32,
    /// 128 RECV or 129 RECV_RDMA_WITH_IMM.
    pub opcode: u32,
    /// Payload bytes (UD: + 40).
    pub byte_len: u32,
    /// imm_data bytes or invalidated key (LE) @28.
    pub imm_data: [u8; 4],
    /// Peer QPN.
    pub src_qp: u32,
    /// wc_flags.
    pub wc_flags: u32,
    /// UD/GSI source MAC.
    pub smac: [u8; 6],
    /// UD/GSI network header type.
    pub network_hdr_type: u8,
    /// The message had SOLICITED set (M18).
    pub solicited: bool,
}

/// What the transport needs to know about a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// Handle.
    pub handle: u32,
    /// Wire QPN.
    pub qpn: u32,
    /// Type.
    pub ty: QpType,
    /// State.
    pub state: QpState,
    /// PD handle.
    pub pd: u32,
    /// SRQ handle, if any.
    pub srq: Option<u32>,
    /// Attributes as modified: dest_qp_num, path_mtu, rq_psn, sq_psn, timeout, retry_cnt,
    /// rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, qkey, qp_access_flags,
    /// ah_attr (dgid, sgid_index, dmac, ...).
    pub attr: QpAttr,
}

/// Why a scatter failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScatterError {
    /// Beyond the SGEs, or an SGE's key, PD, range or right failed.
    Rejected,
    /// The MR's memory faulted (counted as a DMA fault).
    DmaFault,
}

impl Core {
    /// QP facts for the transport.
    pub fn qp_info(&self, qp: u32) -> Option<QpInfo> {
        let q = self.qps.get(qp)?;
        Some(QpInfo {
            handle: q.handle,
            qpn: q.qpn,
            ty: q.ty,
            state: q.state,
            pd: q.pd,
            srq: q.srq,
            attr: q.attr,
        })
    }

    /// QP handle owning wire QPN `qpn`.
    pub fn qp_by_qpn(&self, qpn: u32) -> Option<u32> {
        self.qps.iter().find(|(_, q)| q.qpn == qpn).map(|(h, _)| h)
    }

    /// Handles of all QPs.
    pub fn qp_handles(&self) -> Vec<u32> {
        self.qps.handles()
    }

    /// GID table entry `index` (M38).
    pub fn gid(&self, index: u32) -> Option<GidEntry> {
        self.gids.get(index as usize).copied().flatten()
    }

    /// All bound GIDs.
    pub fn gids(&self) -> Vec<(u32, GidEntry)> {
        self.gids
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.map(|g| (i as u32, g)))
            .collect()
    }

    /// Posts a QP async event (QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, ...; info = handle).
    pub fn post_qp_event(&mut self, qp: u32, ty: u32) {
        self.post_event(ty, qp);
    }

    /// Moves a QP to ERR and flushes (M32); the caller has written any failing WQE's CQE.
    pub fn set_qp_error(&mut self, qp: u32) {
        self.enter_err(qp);
    }

    /// Starts the next executable SQ WQE of a QP in RTS (see module docs). `None` when the SQ is
    /// empty, blocked (fence, READ limit), the QP is not in RTS, or the WQE failed M29 checks
    /// (its error CQE is written and the QP is in ERR).
    pub fn next_send(&mut self, qp: u32) -> Option<SendWork> {
        let e = self.advance_sq(qp, true)?;
        let mut payload = Vec::new();
        if e.wqe.opcode != crate::wqe::wr::RDMA_READ {
            let pd = self.qps.get(qp)?.pd;
            for s in &e.wqe.sges {
                if s.length == 0 {
                    continue;
                }
                // Chunked so a huge SGE on an unbounded DMA MR faults instead of allocating.
                let mut ok = self.mrs.get(s.lkey >> 8).is_some_and(|m| m.pd == pd);
                let mut done = 0u64;
                while ok && done < u64::from(s.length) {
                    let n = (u64::from(s.length) - done).min(64 * 1024) as usize;
                    let mut buf = vec![0u8; n];
                    ok = self.mrs.get(s.lkey >> 8).is_some_and(|m| {
                        m.read(&self.dma, s.addr.wrapping_add(done), &mut buf)
                            .is_ok()
                    });
                    payload.extend_from_slice(&buf);
                    done += n as u64;
                }
                if !ok {
                    self.counters.dma_faults += 1;
                    self.finish_sq(qp, e.index, status::LOC_PROT_ERR, 0);
                    return None;
                }
            }
        }
        Some(SendWork {
            index: e.index,
            wqe: e.wqe,
            payload,
        })
    }

    /// Finishes a started SQ WQE: success retires in order (CQE if signalled, M15); an error
    /// writes the error CQE, then ERR and flush (M32). Returns false for an unknown WQE.
    pub fn complete_send(&mut self, qp: u32, index: u32, st: u32, byte_len: u32) -> bool {
        self.finish_sq(qp, index, st, byte_len)
    }

    /// Places `data` at byte `offset` of a started READ's local SGEs, checking each SGE's
    /// lkey, PD, range and LOCAL_WRITE now (M29). `Err(LOC_PROT_ERR)` on failure (the transport
    /// then completes the WQE with that status).
    pub fn scatter_read(
        &mut self,
        qp: u32,
        index: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), u32> {
        let q = self.qps.get(qp).ok_or(status::LOC_PROT_ERR)?;
        let e = q
            .sq_active
            .iter()
            .find(|e| e.index == index)
            .ok_or(status::LOC_PROT_ERR)?;
        let placed = Self::scatter(&self.mrs, &self.dma, &e.wqe.sges, q.pd, offset, data);
        self.count_scatter(placed)
    }

    /// Counts a scatter's DMA fault; any failure is `LOC_PROT_ERR`.
    fn count_scatter(&mut self, placed: Result<(), ScatterError>) -> Result<(), u32> {
        placed.map_err(|e| {
            if e == ScatterError::DmaFault {
                self.counters.dma_faults += 1;
            }
            status::LOC_PROT_ERR
        })
    }

    /// Borrows only the MR table and the bus, not the whole core: the SGEs stay borrowed from
    /// the QP, where cloning them cost an allocation per packet.
    fn scatter(
        mrs: &super::table::Table<crate::mr::Mr>,
        dma: &crate::dma::DmaSpace,
        sges: &[crate::wqe::Sge],
        pd: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ScatterError> {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if offset + data.len() as u64 > total {
            return Err(ScatterError::Rejected);
        }
        let mut pos = 0u64; // start of current SGE in message space
        let mut done = 0usize;
        for s in sges {
            let len = u64::from(s.length);
            let (lo, hi) = (offset + done as u64, offset + data.len() as u64);
            if done == data.len() {
                break;
            }
            if lo < pos + len && s.length > 0 {
                let within = lo - pos;
                let n = (len - within).min(hi - lo) as usize;
                let va = s.addr + within;
                let mr = mrs.get(s.lkey >> 8).ok_or(ScatterError::Rejected)?;
                if !mr.check(s.lkey, pd, Need::LocalWrite, va, n as u64) {
                    return Err(ScatterError::Rejected);
                }
                if mr.write(dma, va, &data[done..done + n]).is_err() {
                    return Err(ScatterError::DmaFault);
                }
                done += n;
            }
            pos += len;
        }
        if done == data.len() {
            Ok(())
        } else {
            Err(ScatterError::Rejected)
        }
    }

    /// Checks an rkey access for a QP's PD (M24, M25): key, validity, PD, REMOTE_READ/WRITE and
    /// range. Zero-length accesses always pass.
    pub fn remote_check(&self, qp: u32, rkey: u32, va: u64, len: u64, write: bool) -> bool {
        if len == 0 {
            return true;
        }
        let Some(q) = self.qps.get(qp) else {
            return false;
        };
        let need = if write {
            Need::RemoteWrite
        } else {
            Need::RemoteRead
        };
        self.mrs
            .get(rkey >> 8)
            .is_some_and(|m| m.check(rkey, q.pd, need, va, len))
    }

    /// Reads `out.len()` bytes of a remote READ target after [`Core::remote_check`] semantics.
    pub fn remote_read(&mut self, qp: u32, rkey: u32, va: u64, out: &mut [u8]) -> bool {
        if !self.remote_check(qp, rkey, va, out.len() as u64, false) {
            return false;
        }
        if out.is_empty() {
            return true;
        }
        let ok = self
            .mrs
            .get(rkey >> 8)
            .is_some_and(|m| m.read(&self.dma, va, out).is_ok());
        if !ok {
            self.counters.dma_faults += 1;
        }
        ok
    }

    /// Writes remote WRITE data after [`Core::remote_check`] semantics.
    pub fn remote_write(&mut self, qp: u32, rkey: u32, va: u64, data: &[u8]) -> bool {
        if !self.remote_check(qp, rkey, va, data.len() as u64, true) {
            return false;
        }
        if data.is_empty() {
            return true;
        }
        let ok = self
            .mrs
            .get(rkey >> 8)
            .is_some_and(|m| m.write(&self.dma, va, data).is_ok());
        if !ok {
            self.counters.dma_faults += 1;
        }
        ok
    }

    /// SEND_WITH_INV at the responder: M27 in the QP's PD (M28).
    pub fn remote_invalidate(&mut self, qp: u32, rkey: u32) -> bool {
        self.local_inv(qp, rkey) == status::SUCCESS
    }

    /// Takes the next receive WQE (RQ, or the QP's SRQ, M46). `Ok(None)` = queue empty (RNR /
    /// silent drop). SRQ takes advance the SRQ `cons_head` at once and may post
    /// SRQ_LIMIT_REACHED (M45).
    pub fn take_recv(&mut self, qp: u32) -> Result<Option<RecvWork>, TakeError> {
        let q = self.qps.get(qp).ok_or(TakeError::NoQp)?;
        if let Some(sh) = q.srq {
            return self.take_srq(qp, sh);
        }
        let Some(rq) = q.rq else {
            return Err(TakeError::NoQp);
        };
        let Some(tail) = self.rq_tail_pub(qp) else {
            self.qp_fatal(qp);
            return Err(TakeError::Fatal);
        };
        let q = self.qps.get(qp).ok_or(TakeError::NoQp)?;
        if q.rq_next == tail {
            return Ok(None);
        }
        let index = q.rq_next;
        let mut buf = vec![0u8; rq.stride as usize];
        if q.mem.read(&self.dma, rq.offset(index), &mut buf).is_err() {
            self.counters.dma_faults += 1;
            self.qp_fatal(qp);
            return Err(TakeError::Fatal);
        }
        let wqe = RecvWqe::parse(&buf, rq.max_sge);
        let malformed = wqe.num_sge > rq.max_sge;
        let q = self.qps.get_mut(qp).ok_or(TakeError::NoQp)?;
        q.rq_next = rq.ring.inc(q.rq_next);
        q.recv_active.push_back(RecvEntry {
            token: index,
            wqe: wqe.clone(),
        });
        Ok(Some(RecvWork {
            token: index,
            wqe,
            malformed,
        }))
    }

    fn rq_tail_pub(&mut self, qp: u32) -> Option<u32> {
        let q = self.qps.get(qp)?;
        let rq = q.rq?;
        let t = q.mem.read_u32(&self.dma, crate::qp::ring_off::RQ_PROD).ok();
        let ok = t.is_some_and(|t| {
            rq.ring.check(t, q.rq_head).is_ok()
                && rq.ring.used(t, q.rq_head) >= rq.ring.used(q.rq_next, q.rq_head)
        });
        if !ok {
            self.counters.bad_indices += 1;
            return None;
        }
        t
    }

    fn take_srq(&mut self, qp: u32, sh: u32) -> Result<Option<RecvWork>, TakeError> {
        let Some(tail) = self.srq_tail(sh) else {
            // M47: an SRQ in error fails each QP that needs a WQE from it.
            self.qp_fatal(qp);
            return Err(TakeError::Fatal);
        };
        let s = self.srqs.get(sh).ok_or(TakeError::NoQp)?;
        if s.head == tail {
            return Ok(None);
        }
        let mut buf = vec![0u8; s.stride as usize];
        let off = 4096 + u64::from(s.ring.slot(s.head)) * u64::from(s.stride);
        if s.mem.read(&self.dma, off, &mut buf).is_err() {
            self.counters.dma_faults += 1;
            self.srq_error(sh);
            self.qp_fatal(qp);
            return Err(TakeError::Fatal);
        }
        let wqe = RecvWqe::parse(&buf, s.max_sge);
        let malformed = wqe.num_sge > s.max_sge;
        let s = self.srqs.get_mut(sh).ok_or(TakeError::NoQp)?;
        s.head = s.ring.inc(s.head);
        let head = s.head;
        let left = s.ring.used(tail, head);
        let fire = s.limit != 0 && left < s.limit;
        if fire {
            s.limit = 0;
        }
        if s.mem.write_u32(&self.dma, srq::CONS_HEAD, head).is_err() {
            self.counters.dma_faults += 1;
        }
        if fire {
            self.post_event(event::SRQ_LIMIT_REACHED, sh);
        }
        let q = self.qps.get_mut(qp).ok_or(TakeError::NoQp)?;
        let token = q.srq_seq;
        q.srq_seq = q.srq_seq.wrapping_add(1);
        q.recv_active.push_back(RecvEntry {
            token,
            wqe: wqe.clone(),
        });
        Ok(Some(RecvWork {
            token,
            wqe,
            malformed,
        }))
    }

    /// The receive WQE [`Core::take_recv`] would take next, read without taking it (UD drops a
    /// message whose buffer is too small without consuming the WQE, §14). `None` when the
    /// queue is empty or its index or memory cannot be read (the take then reports it).
    pub fn peek_recv(&mut self, qp: u32) -> Option<RecvWqe> {
        let q = self.qps.get(qp)?;
        if let Some(sh) = q.srq {
            let s = self.srqs.get(sh)?;
            if s.error {
                return None;
            }
            let tail = s.mem.read_u32(&self.dma, srq::PROD_TAIL).ok()?;
            if s.ring.check(tail, s.head).is_err() || s.head == tail {
                return None;
            }
            let mut buf = vec![0u8; s.stride as usize];
            let off = 4096 + u64::from(s.ring.slot(s.head)) * u64::from(s.stride);
            s.mem.read(&self.dma, off, &mut buf).ok()?;
            return Some(RecvWqe::parse(&buf, s.max_sge));
        }
        let rq = q.rq?;
        let t = q
            .mem
            .read_u32(&self.dma, crate::qp::ring_off::RQ_PROD)
            .ok()?;
        if rq.ring.check(t, q.rq_head).is_err() || q.rq_next == t {
            return None;
        }
        let mut buf = vec![0u8; rq.stride as usize];
        q.mem.read(&self.dma, rq.offset(q.rq_next), &mut buf).ok()?;
        Some(RecvWqe::parse(&buf, rq.max_sge))
    }

    /// Scatters receive data at byte `offset` of a taken WQE's SGEs (LOCAL_WRITE, QP's PD).
    /// `Err(LOC_PROT_ERR)` or `Err(LOC_LEN_ERR)` (beyond the SGEs) on failure.
    pub fn recv_scatter(
        &mut self,
        qp: u32,
        token: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), u32> {
        let q = self.qps.get(qp).ok_or(status::LOC_PROT_ERR)?;
        let e = q
            .recv_active
            .iter()
            .find(|e| e.token == token)
            .ok_or(status::LOC_PROT_ERR)?;
        if offset + data.len() as u64 > e.wqe.capacity() {
            return Err(status::LOC_LEN_ERR);
        }
        let placed = Self::scatter(&self.mrs, &self.dma, &e.wqe.sges, q.pd, offset, data);
        self.count_scatter(placed)
    }

    /// Completes a taken receive WQE with a CQE on the QP's receive CQ (`qp` = handle, M46).
    /// A non-zero status then moves the QP to ERR (its CQE comes first, M30).
    pub fn complete_recv(&mut self, qp: u32, token: u32, c: &RecvCompletion) -> bool {
        let Some(q) = self.qps.get_mut(qp) else {
            return false;
        };
        let Some(pos) = q.recv_active.iter().position(|e| e.token == token) else {
            return false;
        };
        let e = q.recv_active.remove(pos).expect("position valid");
        let recv_cq = q.recv_cq;
        let from_rq = q.rq.is_some();
        if let Some(rq) = q.rq {
            q.rq_head = rq.ring.inc(q.rq_head);
        }
        let head = q.rq_head;
        let cqe = if c.status == status::SUCCESS {
            Cqe {
                wr_id: e.wqe.wr_id,
                qp: u64::from(qp),
                opcode: c.opcode,
                status: c.status,
                byte_len: c.byte_len,
                imm_data: c.imm_data,
                src_qp: c.src_qp,
                wc_flags: c.wc_flags,
                port_num: 1,
                smac: c.smac,
                network_hdr_type: c.network_hdr_type,
                ..Default::default()
            }
        } else {
            Cqe {
                wr_id: e.wqe.wr_id,
                qp: u64::from(qp),
                opcode: wc::RECV,
                status: c.status,
                ..Default::default()
            }
        };
        let ok = self.write_cqe(recv_cq, &cqe, c.solicited);
        if from_rq
            && let Some(q) = self.qps.get(qp)
            && q.mem
                .write_u32(&self.dma, crate::qp::ring_off::RQ_CONS, head)
                .is_err()
        {
            self.counters.dma_faults += 1;
        }
        if c.status != status::SUCCESS {
            self.enter_err(qp);
        } else if !ok {
            self.qp_fatal(qp);
        }
        true
    }
}
