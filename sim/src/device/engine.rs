//! Queue engine: device rings (EQE/CQNE), CQE writer, SQ/RQ/SRQ processing, local WQEs and
//! the error/flush machinery (reference §7, §10, §11, §13, §14; M12-M19, M22, M26, M27, M29,
//! M32, M33, M40, M45-M47).
#![deny(unsafe_code)]

use super::{Core, DevRing, Work};
use crate::cq::{self, Arm};
use crate::intr::{VEC_ASYNC, VEC_CQ};
use crate::mr::{MrKind, Need, access};
use crate::pdir::{PagedMem, read_pdir};
use crate::qp::{QpState, QpType, RecvEntry, SqEntry, SqProgress, ring_off};
use crate::srq;
use crate::wqe::{Cqe, RecvWqe, SqWqe, event, send_flags, status, wc, wc_opcode_for, wr};

/// Result of trying to put one element on a device ring.
enum RingPut {
    Done,
    Full,
    Dead,
}

impl DevRing {
    fn put(
        &mut self,
        dma: &crate::dma::DmaSpace,
        elem: &[u8],
        counters: &mut crate::counters::Counters,
    ) -> RingPut {
        if self.abandoned {
            return RingPut::Dead;
        }
        let head = match self.mem.read_u32(dma, 12) {
            Ok(h) => h,
            Err(_) => {
                counters.dma_faults += 1;
                self.abandoned = true;
                counters.rings_abandoned += 1;
                return RingPut::Dead;
            }
        };
        if self.ring.check(self.tail, head).is_err() {
            // M14: a bad driver index abandons the ring; the test must fail on the counter.
            counters.bad_indices += 1;
            counters.rings_abandoned += 1;
            self.abandoned = true;
            return RingPut::Dead;
        }
        if self.ring.full(self.tail, head) {
            return RingPut::Full;
        }
        let at = 4096 + u64::from(self.ring.slot(self.tail)) * self.elem;
        if self.mem.write(dma, at, elem).is_err() {
            counters.dma_faults += 1;
            return RingPut::Dead;
        }
        self.tail = self.ring.inc(self.tail);
        if self.mem.write_u32(dma, 8, self.tail).is_err() {
            counters.dma_faults += 1;
        }
        RingPut::Done
    }
}

impl Core {
    /// Posts an async event (held in order while the ring is full, M12).
    pub fn post_event(&mut self, ty: u32, info: u32) {
        if matches!(
            ty,
            event::QP_FATAL
                | event::QP_REQ_ERR
                | event::QP_ACCESS_ERR
                | event::COMM_EST
                | event::QP_LAST_WQE_REACHED
        ) && let Some(qp) = self.qps.get_mut(info)
        {
            qp.events_reported += 1;
        }
        self.pending_events.push_back((ty, info));
        self.flush_pending_rings();
    }

    fn post_cqne(&mut self, cq: u32) {
        // A full CQNE ring holds one coalesced notification per CQ (M12).
        if !self.pending_cqnes.contains(&cq) {
            self.pending_cqnes.push_back(cq);
        }
        self.flush_pending_rings();
    }

    /// Posts held events and CQNEs while their rings have space.
    pub(crate) fn flush_pending_rings(&mut self) {
        let mut raised_async = false;
        while let Some(&(ty, info)) = self.pending_events.front() {
            let Some(ring) = self.async_ring.as_mut() else {
                self.pending_events.clear();
                break;
            };
            let mut e = [0u8; 8];
            e[..4].copy_from_slice(&ty.to_le_bytes());
            e[4..].copy_from_slice(&info.to_le_bytes());
            match ring.put(&self.dma, &e, &mut self.counters) {
                RingPut::Done => {
                    self.pending_events.pop_front();
                    self.counters.events += 1;
                    raised_async = true;
                }
                RingPut::Full => break,
                RingPut::Dead => {
                    self.pending_events.clear();
                    break;
                }
            }
        }
        if raised_async {
            self.intr.raise(VEC_ASYNC);
        }
        let mut raised_cq = false;
        while let Some(&cqh) = self.pending_cqnes.front() {
            let Some(ring) = self.cqne_ring.as_mut() else {
                self.pending_cqnes.clear();
                break;
            };
            match ring.put(&self.dma, &cqh.to_le_bytes(), &mut self.counters) {
                RingPut::Done => {
                    self.pending_cqnes.pop_front();
                    self.counters.cqnes += 1;
                    raised_cq = true;
                }
                RingPut::Full => break,
                RingPut::Dead => {
                    self.pending_cqnes.clear();
                    break;
                }
            }
        }
        if raised_cq {
            self.intr.raise(VEC_CQ);
        }
    }

    fn cq_error(&mut self, h: u32) {
        if let Some(c) = self.cqs.get_mut(h) {
            if c.stopped {
                return;
            }
            c.stopped = true;
        }
        self.post_event(event::CQ_ERR, h);
    }

    /// Completes one CQE on CQ `h` (M19, M35, M40): written to the ring, or with lazy
    /// completion held until the CQ is polled or an arm of it is satisfied (M48). Returns
    /// false if it was dropped (stopped CQ, overflow, bad `cons_head`, unwritable page).
    pub fn write_cqe(&mut self, h: u32, cqe: &Cqe, solicited: bool) -> bool {
        if self.cfg.lazy_completion {
            return self.hold_cqe(h, cqe, solicited);
        }
        if !self.put_cqe(h, cqe) {
            return false;
        }
        if self.arm_satisfied(h, cqe, solicited) {
            self.post_cqne(h);
        }
        true
    }

    /// Harness knob: writes `cqe` into CQ `h`'s ring as a completion is written, and nothing
    /// else (no arm is consulted, no CQNE follows, lazy completion does not hold it), for a
    /// test that plays the device's completions, the ones the driver must not trust among
    /// them (a QP the CQ does not serve, a request never posted). Returns false where the
    /// device would drop it (stopped CQ, overflow, bad `cons_head`).
    pub fn inject_cqe(&mut self, h: u32, cqe: &Cqe) -> bool {
        self.put_cqe(h, cqe)
    }

    /// Harness knob: a CQ notification for CQ `h` whatever its arm (a late or stray CQNE,
    /// which the driver must tolerate).
    pub fn inject_cqne(&mut self, h: u32) {
        self.post_cqne(h);
    }

    /// Clears and reports a matching arm of CQ `h` (M18) for a CQE just completed.
    fn arm_satisfied(&mut self, h: u32, cqe: &Cqe, solicited: bool) -> bool {
        let Some(c) = self.cqs.get_mut(h) else {
            return false;
        };
        let fire = match c.arm {
            Arm::Any => true,
            Arm::Solicited => solicited || cqe.status != status::SUCCESS,
            Arm::None => false,
        };
        if fire {
            c.arm = Arm::None;
        }
        fire
    }

    /// The driver's `cons_head` of CQ `h`, validated against the device's `prod_tail`
    /// (M14), with the CQEs in the ring; `None` (CQ_ERR raised) if it cannot be read or is
    /// bad.
    fn cq_used(&mut self, h: u32) -> Option<u32> {
        let c = self.cqs.get(h)?;
        let head = match c.mem.read_u32(&self.dma, cq::CONS_HEAD) {
            Ok(v) => v,
            Err(_) => {
                self.counters.dma_faults += 1;
                self.cq_error(h);
                return None;
            }
        };
        match c.ring.check(c.tail, head) {
            Ok(used) => Some(used),
            Err(_) => {
                self.counters.bad_indices += 1;
                self.cq_error(h);
                None
            }
        }
    }

    /// Lazy completion (M48): keeps the CQE back; an arm it satisfies writes every held CQE
    /// to the ring before the CQNE. A CQE that would not fit once the held ones are written
    /// overflows the CQ now (M40), as it would have with the option off, and the held ones
    /// (which fit) are written first, where the option off would have put them.
    fn hold_cqe(&mut self, h: u32, cqe: &Cqe, solicited: bool) -> bool {
        match self.cqs.get(h) {
            Some(c) if !c.stopped => {}
            _ => {
                self.counters.cqes_dropped += 1;
                return false;
            }
        }
        let Some(used) = self.cq_used(h) else {
            self.counters.cqes_dropped += 1;
            return false;
        };
        let Some(c) = self.cqs.get_mut(h) else {
            return false;
        };
        let waiting = u32::try_from(c.held.len()).unwrap_or(u32::MAX);
        if used.saturating_add(waiting) >= c.ring.cap() {
            self.write_held_cqes(h);
            self.counters.cqes_dropped += 1;
            self.cq_error(h);
            return false;
        }
        c.held.push_back((*cqe, solicited));
        self.counters.cqes_held += 1;
        if self.arm_satisfied(h, cqe, solicited) {
            self.write_held_cqes(h);
            self.post_cqne(h);
        }
        true
    }

    /// Writes CQ `h`'s held CQEs to its ring, oldest first (M48: a POLL doorbell, or an
    /// arm satisfied). A CQE the ring refuses stops the CQ (M40) and the rest are dropped.
    pub(crate) fn write_held_cqes(&mut self, h: u32) {
        let Some(c) = self.cqs.get_mut(h) else {
            return;
        };
        let held = std::mem::take(&mut c.held);
        for (cqe, _) in held {
            // A refused CQE stops the CQ, which then drops (and counts) the rest.
            self.put_cqe(h, &cqe);
        }
    }

    /// Writes one CQE to CQ `h`'s ring and publishes `prod_tail` (M40 on overflow). Returns
    /// false if it was dropped.
    fn put_cqe(&mut self, h: u32, cqe: &Cqe) -> bool {
        match self.cqs.get(h) {
            Some(c) if !c.stopped => {}
            _ => {
                self.counters.cqes_dropped += 1;
                return false;
            }
        }
        let Some(used) = self.cq_used(h) else {
            self.counters.cqes_dropped += 1;
            return false;
        };
        let Some(c) = self.cqs.get(h) else {
            return false;
        };
        if used == c.ring.cap() {
            self.counters.cqes_dropped += 1;
            self.cq_error(h);
            return false;
        }
        let at = 4096 + u64::from(c.ring.slot(c.tail)) * 64;
        if c.mem.write(&self.dma, at, &cqe.emit()).is_err() {
            self.counters.dma_faults += 1;
            self.counters.cqes_dropped += 1;
            self.cq_error(h);
            return false;
        }
        let tail = c.ring.inc(c.tail);
        if c.mem.write_u32(&self.dma, cq::PROD_TAIL, tail).is_err() {
            self.counters.dma_faults += 1;
        }
        self.counters.cqes += 1;
        if let Some(c) = self.cqs.get_mut(h) {
            c.tail = tail;
        }
        true
    }

    fn send_cqe(&self, qp: u32, e: &SqEntry, st: u32, byte_len: u32) -> Cqe {
        let opcode = wc_opcode_for(e.wqe.opcode).unwrap_or(wc::SEND);
        if st == status::SUCCESS {
            Cqe {
                wr_id: e.wqe.wr_id,
                qp: u64::from(qp),
                opcode,
                status: st,
                byte_len,
                port_num: 1,
                ..Default::default()
            }
        } else {
            // Error and flush CQEs: only wr_id, qp, status (and the WC opcode, M32) are set.
            Cqe {
                wr_id: e.wqe.wr_id,
                qp: u64::from(qp),
                opcode,
                status: st,
                ..Default::default()
            }
        }
    }

    fn write_qp_u32(&mut self, qph: u32, off: u64, v: u32) {
        let Some(qp) = self.qps.get(qph) else { return };
        if qp.mem.write_u32(&self.dma, off, v).is_err() {
            self.counters.dma_faults += 1;
        }
    }

    /// Reads and validates the SQ `prod_tail` (M14) against the device's own indices.
    fn sq_tail(&mut self, qph: u32) -> Option<u32> {
        let qp = self.qps.get(qph)?;
        let tail = match qp.mem.read_u32(&self.dma, ring_off::SQ_PROD) {
            Ok(t) => t,
            Err(_) => {
                self.counters.dma_faults += 1;
                return None;
            }
        };
        let r = qp.sq.ring;
        let ok = r.check(tail, qp.sq_head).is_ok()
            && r.used(tail, qp.sq_head) >= r.used(qp.sq_next, qp.sq_head);
        if ok {
            Some(tail)
        } else {
            self.counters.bad_indices += 1;
            None
        }
    }

    fn rq_tail(&mut self, qph: u32) -> Option<u32> {
        let qp = self.qps.get(qph)?;
        let rq = qp.rq?;
        let tail = match qp.mem.read_u32(&self.dma, ring_off::RQ_PROD) {
            Ok(t) => t,
            Err(_) => {
                self.counters.dma_faults += 1;
                return None;
            }
        };
        let ok = rq.ring.check(tail, qp.rq_head).is_ok()
            && rq.ring.used(tail, qp.rq_head) >= rq.ring.used(qp.rq_next, qp.rq_head);
        if ok {
            Some(tail)
        } else {
            self.counters.bad_indices += 1;
            None
        }
    }

    /// QP_FATAL then ERR with flush (bad index, unreadable WQE, stopped CQ, SRQ in error).
    pub(crate) fn qp_fatal(&mut self, qph: u32) {
        if self.qps.get(qph).is_none_or(|q| q.state == QpState::Err) {
            return;
        }
        self.post_event(event::QP_FATAL, qph);
        self.enter_err(qph);
    }

    /// Moves a QP to ERR and flushes its queues in the order of M32 (the failing WQE's CQE,
    /// if any, has been written by the caller).
    pub(crate) fn enter_err(&mut self, qph: u32) {
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        let was_err = qp.state == QpState::Err;
        qp.state = QpState::Err;
        if !was_err {
            self.notify_state(qph, QpState::Err);
        }
        self.flush_sq(qph);
        self.flush_rq(qph);
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        if !was_err && qp.srq.is_some() {
            self.post_event(event::QP_LAST_WQE_REACHED, qph);
        }
    }

    pub(crate) fn notify_state(&mut self, qph: u32, st: QpState) {
        if let Some(mut t) = self.transport.take() {
            t.qp_state_changed(self, qph, st);
            self.transport = Some(t);
        }
    }

    /// WR_FLUSH_ERR for every unretired SQ WQE, in SQ order (M32).
    fn flush_sq(&mut self, qph: u32) {
        let tail = self.sq_tail(qph);
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        let active: Vec<SqEntry> = qp.sq_active.drain(..).collect();
        let send_cq = qp.send_cq;
        for e in &active {
            let c = self.send_cqe(qph, e, status::WR_FLUSH_ERR, 0);
            self.write_cqe(send_cq, &c, false);
        }
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        let mut head = qp.sq_next;
        if let Some(tail) = tail {
            while head != tail {
                let Some(qp) = self.qps.get(qph) else { return };
                let mut buf = vec![0u8; qp.sq.stride as usize];
                let off = qp.sq.offset(head);
                let max = qp.sq.max_sge;
                let wr_id = if qp.mem.read(&self.dma, off, &mut buf).is_ok() {
                    SqWqe::parse(&buf, max).wr_id
                } else {
                    self.counters.dma_faults += 1;
                    0
                };
                let opcode = SqWqe::parse(&buf, 0).opcode;
                let c = Cqe {
                    wr_id,
                    qp: u64::from(qph),
                    opcode: wc_opcode_for(opcode).unwrap_or(wc::SEND),
                    status: status::WR_FLUSH_ERR,
                    ..Default::default()
                };
                self.write_cqe(send_cq, &c, false);
                let Some(qp) = self.qps.get(qph) else { return };
                head = qp.sq.ring.inc(head);
            }
        }
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        qp.sq_next = head;
        qp.sq_head = head;
        self.write_qp_u32(qph, ring_off::SQ_CONS, head);
    }

    /// WR_FLUSH_ERR for taken receive WQEs and (RQ only) every posted one (M32, M46).
    fn flush_rq(&mut self, qph: u32) {
        let tail = self.rq_tail(qph);
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        let taken: Vec<RecvEntry> = qp.recv_active.drain(..).collect();
        let recv_cq = qp.recv_cq;
        let has_rq = qp.rq.is_some();
        for e in &taken {
            let c = Cqe {
                wr_id: e.wqe.wr_id,
                qp: u64::from(qph),
                opcode: wc::RECV,
                status: status::WR_FLUSH_ERR,
                ..Default::default()
            };
            self.write_cqe(recv_cq, &c, false);
        }
        if !has_rq {
            return;
        }
        let Some(qp) = self.qps.get(qph) else { return };
        let mut head = qp.rq_next;
        if let Some(tail) = tail {
            while head != tail {
                let Some(qp) = self.qps.get(qph) else { return };
                let Some(rq) = qp.rq else { return };
                let mut buf = vec![0u8; rq.stride as usize];
                let wr_id = if qp.mem.read(&self.dma, rq.offset(head), &mut buf).is_ok() {
                    RecvWqe::parse(&buf, 0).wr_id
                } else {
                    self.counters.dma_faults += 1;
                    0
                };
                let c = Cqe {
                    wr_id,
                    qp: u64::from(qph),
                    opcode: wc::RECV,
                    status: status::WR_FLUSH_ERR,
                    ..Default::default()
                };
                self.write_cqe(recv_cq, &c, false);
                head = rq.ring.inc(head);
            }
        }
        let Some(qp) = self.qps.get_mut(qph) else {
            return;
        };
        qp.rq_next = head;
        qp.rq_head = head;
        self.write_qp_u32(qph, ring_off::RQ_CONS, head);
    }

    /// Retires finished SQ WQEs in order: CQE if signalled or failed, then `cons_head` (M15).
    pub(crate) fn retire_sq(&mut self, qph: u32) {
        loop {
            let Some(qp) = self.qps.get_mut(qph) else {
                return;
            };
            let Some(front) = qp.sq_active.front() else {
                return;
            };
            let SqProgress::Done {
                status: st,
                byte_len,
            } = front.progress
            else {
                return;
            };
            let e = qp.sq_active.pop_front().expect("front exists");
            qp.sq_head = qp.sq.ring.inc(qp.sq_head);
            let head = qp.sq_head;
            let send_cq = qp.send_cq;
            let mut cq_ok = true;
            if e.signaled || st != status::SUCCESS {
                let c = self.send_cqe(qph, &e, st, byte_len);
                cq_ok = self.write_cqe(send_cq, &c, false);
            }
            self.write_qp_u32(qph, ring_off::SQ_CONS, head);
            if !cq_ok {
                // M40: a QP that needs a stopped CQ enters ERR with QP_FATAL.
                self.qp_fatal(qph);
                return;
            }
        }
    }

    /// Completes the started SQ WQE at ring index `index` (M31, M32): success retires in
    /// order; an error writes its CQE first, then the QP enters ERR and flushes.
    pub(crate) fn finish_sq(&mut self, qph: u32, index: u32, st: u32, byte_len: u32) -> bool {
        let Some(qp) = self.qps.get_mut(qph) else {
            return false;
        };
        let Some(pos) = qp.sq_active.iter().position(|e| e.index == index) else {
            return false;
        };
        if st == status::SUCCESS {
            qp.sq_active[pos].progress = SqProgress::Done {
                status: st,
                byte_len,
            };
            self.retire_sq(qph);
            return true;
        }
        // CQEs of a queue appear in posting order (M36): the older WQEs still in flight are
        // flushed before the failing WQE's error CQE, the younger ones after it (M32).
        let older: Vec<SqEntry> = qp.sq_active.drain(..pos).collect();
        let e = qp.sq_active.pop_front().expect("position valid");
        let send_cq = qp.send_cq;
        for o in &older {
            let c = self.send_cqe(qph, o, status::WR_FLUSH_ERR, 0);
            self.write_cqe(send_cq, &c, false);
        }
        let c = self.send_cqe(qph, &e, st, 0);
        self.write_cqe(send_cq, &c, true);
        self.enter_err(qph);
        true
    }

    /// SQ doorbell (M17).
    pub(crate) fn kick_sq(&mut self, qph: u32) {
        let Some(qp) = self.qps.get(qph) else { return };
        match qp.state {
            QpState::Reset => {}
            QpState::Err => {
                // Later-posted WQEs are flushed at their doorbell (§14).
                if self.sq_tail(qph).is_none() {
                    self.counters.db_ignored += 1;
                }
                self.flush_sq(qph);
            }
            QpState::Init | QpState::Rtr => {
                // Posted WQEs wait for RTS, but the index is validated now (M14).
                if self.sq_tail(qph).is_none() {
                    self.qp_fatal(qph);
                }
            }
            QpState::Rts => {
                let _ = self.advance_sq(qph, false);
                if let Some(mut t) = self.transport.take() {
                    t.sq_kick(self, qph);
                    self.transport = Some(t);
                }
            }
        }
    }

    /// RQ doorbell (M17): validates the index; flushes new WQEs in ERR.
    pub(crate) fn kick_rq(&mut self, qph: u32) {
        let Some(qp) = self.qps.get(qph) else { return };
        let st = qp.state;
        if st == QpState::Reset {
            return;
        }
        if st == QpState::Err {
            self.flush_rq(qph);
            return;
        }
        if self.rq_tail(qph).is_none() {
            self.qp_fatal(qph);
        }
    }

    /// See [`Device::kick_gsi_queues`]; true when it queued work or posted a CQNE.
    pub(crate) fn kick_gsi_queues(&mut self) -> bool {
        let mut cqs = Vec::new();
        let queued = self.work.len();
        let mut notified = false;
        for (h, qp) in self.qps.iter() {
            if qp.ty != QpType::Gsi || qp.state == QpState::Reset {
                continue;
            }
            // A driver rings after posting: a queue whose `prod_tail` names no WQE the device
            // has not taken yet would get a doorbell no driver rings. An RQ doorbell does more
            // than check the index only in ERR (M17), and QP1 always has receives posted.
            let posted = |off, next| qp.mem.read_u32(&self.dma, off) != Ok(next);
            if posted(ring_off::SQ_PROD, qp.sq_next) {
                self.work.push_back(Work::Sq(h));
            }
            if qp.state == QpState::Err
                && qp.srq.is_none()
                && qp.rq.is_some()
                && posted(ring_off::RQ_PROD, qp.rq_next)
            {
                self.work.push_back(Work::Rq(h));
            }
            cqs.extend([qp.send_cq, qp.recv_cq]);
        }
        cqs.dedup();
        for h in cqs {
            if self.cqs.get(h).is_some_and(|c| !c.held.is_empty()) {
                self.write_held_cqes(h);
                notified = true;
            }
            if self.cq_unconsumed(h) {
                self.post_cqne(h);
                notified = true;
            }
        }
        notified || self.work.len() != queued
    }

    /// True when CQ `h` is in service and its ring holds CQEs past the driver's `cons_head`;
    /// an unreadable or bad index reads as none here (the next CQE's write reports it).
    fn cq_unconsumed(&self, h: u32) -> bool {
        let Some(c) = self.cqs.get(h) else {
            return false;
        };
        if c.stopped {
            return false;
        }
        c.mem
            .read_u32(&self.dma, cq::CONS_HEAD)
            .ok()
            .and_then(|head| c.ring.check(c.tail, head).ok())
            .is_some_and(|used| used > 0)
    }

    /// SRQ doorbell (M17, M47): validates the index.
    pub(crate) fn kick_srq(&mut self, h: u32) {
        let _ = self.srq_tail(h);
    }

    /// Validated SRQ `prod_tail`; a bad one puts the SRQ in error (M47).
    pub(crate) fn srq_tail(&mut self, h: u32) -> Option<u32> {
        let s = self.srqs.get(h)?;
        if s.error {
            return None;
        }
        let t = match s.mem.read_u32(&self.dma, srq::PROD_TAIL) {
            Ok(t) if s.ring.check(t, s.head).is_ok() => Some(t),
            Ok(_) => {
                self.counters.bad_indices += 1;
                None
            }
            Err(_) => {
                self.counters.dma_faults += 1;
                None
            }
        };
        if t.is_none() {
            self.srq_error(h);
        }
        t
    }

    pub(crate) fn srq_error(&mut self, h: u32) {
        if let Some(s) = self.srqs.get_mut(h)
            && !s.error
        {
            s.error = true;
            self.post_event(event::SRQ_ERR, h);
        }
    }

    /// Runs the SQ of a QP in RTS: local WQEs execute, the first network WQE either stops the
    /// engine (`start_network` false) or is started and returned (M17, M29, M36).
    pub(crate) fn advance_sq(&mut self, qph: u32, start_network: bool) -> Option<SqEntry> {
        loop {
            let qp = self.qps.get(qph)?;
            if qp.state != QpState::Rts {
                return None;
            }
            let Some(tail) = self.sq_tail(qph) else {
                self.qp_fatal(qph);
                return None;
            };
            let qp = self.qps.get(qph)?;
            if qp.sq_next == tail {
                return None;
            }
            let index = qp.sq_next;
            let mut buf = vec![0u8; qp.sq.stride as usize];
            if qp
                .mem
                .read(&self.dma, qp.sq.offset(index), &mut buf)
                .is_err()
            {
                self.counters.dma_faults += 1;
                self.qp_fatal(qph);
                return None;
            }
            let wqe = SqWqe::parse(&buf, qp.sq.max_sge);
            let signaled = qp.sq_sig_all || wqe.signaled();
            let ty = qp.ty;
            let max_sge = qp.sq.max_sge;
            let opcode_ok = match ty {
                QpType::Rc => matches!(
                    wqe.opcode,
                    wr::RDMA_WRITE
                        | wr::RDMA_WRITE_WITH_IMM
                        | wr::SEND
                        | wr::SEND_WITH_IMM
                        | wr::RDMA_READ
                        | wr::SEND_WITH_INV
                        | wr::LOCAL_INV
                        | wr::FAST_REG_MR
                ),
                QpType::Ud | QpType::Gsi => matches!(wqe.opcode, wr::SEND | wr::SEND_WITH_IMM),
            };
            let local = matches!(wqe.opcode, wr::LOCAL_INV | wr::FAST_REG_MR);
            // FENCE holds a WQE until every earlier READ has completed (M36).
            let fenced = wqe.send_flags & send_flags::FENCE != 0
                && qp
                    .sq_active
                    .iter()
                    .any(|e| e.wqe.opcode == wr::RDMA_READ && e.progress == SqProgress::Started);
            let entry = SqEntry {
                index,
                wqe,
                signaled,
                progress: SqProgress::Started,
            };
            let early_fail = if !opcode_ok
                || entry.wqe.send_flags & send_flags::INLINE != 0
                || entry.wqe.num_sge > max_sge
            {
                Some(status::LOC_QP_OP_ERR)
            } else {
                None
            };
            if early_fail.is_none() && fenced {
                return None;
            }
            if early_fail.is_none() && !local {
                if !start_network {
                    return None;
                }
                if entry.wqe.opcode == wr::RDMA_READ {
                    let limit = u32::from(qp.attr.max_rd_atomic.max(1));
                    let outstanding = qp
                        .sq_active
                        .iter()
                        .filter(|e| {
                            e.wqe.opcode == wr::RDMA_READ && e.progress == SqProgress::Started
                        })
                        .count() as u32;
                    if outstanding >= limit {
                        return None;
                    }
                }
            }
            // Start it.
            let qp = self.qps.get_mut(qph)?;
            qp.sq_next = qp.sq.ring.inc(qp.sq_next);
            qp.sq_active.push_back(entry.clone());
            if let Some(st) = early_fail {
                self.finish_sq(qph, index, st, 0);
                return None;
            }
            if local {
                let st = if entry.wqe.opcode == wr::FAST_REG_MR {
                    self.fast_reg(qph, &entry.wqe)
                } else {
                    self.local_inv(qph, entry.wqe.invalidate_rkey())
                };
                self.finish_sq(qph, index, st, 0);
                continue;
            }
            // Network WQE: requester checks (M29) before it is handed out.
            if let Some(st) = self.check_send_local(qph, &entry.wqe) {
                self.finish_sq(qph, index, st, 0);
                return None;
            }
            return Some(entry);
        }
    }

    /// M29 requester checks that need the MR tables: gather SGEs for SEND/WRITE, lengths.
    fn check_send_local(&mut self, qph: u32, w: &SqWqe) -> Option<u32> {
        let qp = self.qps.get(qph)?;
        let len = w.total_len();
        let max = match qp.ty {
            QpType::Rc => 0x8000_0000u64,
            QpType::Ud | QpType::Gsi => 128u64 << self.cfg.port_mtu.clamp(1, 5),
        };
        if len > max {
            return Some(status::LOC_LEN_ERR);
        }
        if w.opcode == wr::RDMA_READ {
            return None; // checked when the response data is scattered (M29)
        }
        let pd = qp.pd;
        for s in &w.sges {
            if s.length == 0 {
                continue;
            }
            let ok = self
                .mrs
                .get(s.lkey >> 8)
                .is_some_and(|m| m.check(s.lkey, pd, Need::LocalRead, s.addr, u64::from(s.length)));
            if !ok {
                return Some(status::LOC_PROT_ERR);
            }
        }
        None
    }

    /// FAST_REG_MR (M26).
    fn fast_reg(&mut self, qph: u32, w: &SqWqe) -> u32 {
        let Some(pd) = self.qps.get(qph).map(|q| q.pd) else {
            return status::LOC_QP_OP_ERR;
        };
        let f = w.fast_reg();
        let bad = status::LOC_QP_OP_ERR;
        let Some(mr) = self.mrs.get(f.rkey >> 8) else {
            return bad;
        };
        let MrKind::Frmr {
            capacity, valid, ..
        } = mr.kind
        else {
            return bad;
        };
        if valid
            || mr.pd != pd
            || f.page_list_len == 0
            || f.page_list_len > capacity
            || f.page_shift != 12
            || (f.iova_start & 0xFFF) + u64::from(f.length) > u64::from(f.page_list_len) * 4096
            || f.access_flags & !0xF != 0
            || !access::local_write_rule_ok(f.access_flags)
        {
            return bad;
        }
        let pages = match read_pdir(&self.dma, f.pl_pdir_dma, f.page_list_len) {
            Ok(p) => p,
            Err(_) => {
                self.counters.dma_faults += 1;
                return bad;
            }
        };
        let Some(mr) = self.mrs.get_mut(f.rkey >> 8) else {
            return bad;
        };
        mr.lkey = f.rkey;
        mr.rkey = f.rkey;
        mr.access = f.access_flags;
        mr.kind = MrKind::Frmr {
            capacity,
            valid: true,
            iova: f.iova_start,
            length: u64::from(f.length),
            pages: PagedMem::new(pages),
        };
        status::SUCCESS
    }

    /// LOCAL_INV (M27); also used for remote invalidation in the responder's PD (M28).
    pub(crate) fn local_inv(&mut self, qph: u32, key: u32) -> u32 {
        let Some(pd) = self.qps.get(qph).map(|q| q.pd) else {
            return status::LOC_QP_OP_ERR;
        };
        let Some(mr) = self.mrs.get_mut(key >> 8) else {
            return status::LOC_QP_OP_ERR;
        };
        match &mut mr.kind {
            MrKind::Frmr { valid, .. } if mr.pd == pd && mr.lkey == key => {
                *valid = false;
                status::SUCCESS
            }
            _ => status::LOC_QP_OP_ERR,
        }
    }
}
