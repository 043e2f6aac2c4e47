//! Command execution (reference §8, §9; M8-M11, M33, M38, M39, M41, M43, M44).
#![deny(unsafe_code)]

use super::{Core, GidEntry};
use crate::cmd::{self, Command, ReqHeader, Response, code, err};
use crate::cq::{Arm, Cq};
use crate::le::Le;
use crate::mr::{Mr, MrKind, access, flags};
use crate::pd::Pd;
use crate::pdir::{MAX_PAGES, PagedMem, read_pdir};
use crate::qp::{Qp, QpCap, QpState, QpType, WqGeom, mask, transition_masks};
use crate::ring::Ring;
use crate::srq::Srq;
use std::collections::VecDeque;

type CmdResult = Result<(), u32>;

fn pow2(v: u32) -> bool {
    v != 0 && v.is_power_of_two()
}

fn stride(hdr: u32, sge: u32) -> u32 {
    (hdr + 16 * sge).next_power_of_two()
}

fn pages_for(n: u32, stride: u32) -> u64 {
    (u64::from(n) * u64::from(stride)).div_ceil(4096)
}

impl Core {
    /// REQUEST = 0: run the command in the slot, write the response, latch vector 0 (M8, M9).
    pub(crate) fn execute_command(&mut self) {
        self.counters.commands += 1;
        let Some(slots) = self.slots else {
            self.err = err::INVALID;
            self.counters.command_errors += 1;
            return;
        };
        let mut req = [0u8; cmd::REQ_MAX];
        if self.dma.read(slots.cmd, &mut req).is_err() {
            self.counters.dma_faults += 1;
            self.err = err::INVALID;
            self.counters.command_errors += 1;
            return;
        }
        let hdr = ReqHeader::parse(&req);
        let v = Le(&req[..]);
        let (len, result, resp) = match self.take_command_fault(hdr.cmd) {
            Some(code) => (cmd::HDR, Err(code), None),
            None => self.dispatch(&hdr, &v),
        };
        let mut r = resp.unwrap_or_else(|| Response::new(&hdr, len));
        r.len = len.clamp(cmd::HDR, cmd::RESP_MAX);
        let e = match result {
            Ok(()) => err::OK,
            Err(e) => {
                // Error responses carry no data (M8).
                r = Response::new(&hdr, len);
                e
            }
        };
        r.set_err(e);
        if e != err::OK {
            self.counters.command_errors += 1;
        }
        self.err = e;
        if self.dma.write(slots.resp, r.bytes()).is_err() {
            self.counters.dma_faults += 1;
        }
        self.intr.raise(crate::intr::VEC_CMD);
    }

    /// Consumes one step of a test-injected command fault matching `cmd`; returns the error
    /// to answer when this command is the one to fail.
    fn take_command_fault(&mut self, cmd: u32) -> Option<u32> {
        let f = self.command_fault.as_mut()?;
        if cmd >= 64 || f.mask & (1u64 << cmd) == 0 {
            return None;
        }
        f.countdown -= 1;
        if f.countdown != 0 {
            return None;
        }
        let code = f.code;
        self.command_fault = None;
        Some(code)
    }

    fn dispatch(&mut self, hdr: &ReqHeader, v: &Le<&[u8]>) -> (usize, CmdResult, Option<Response>) {
        macro_rules! run {
            ($ty:ty, $f:ident) => {{
                let c = <$ty>::parse(v);
                let mut r = Response::new(hdr, <$ty>::RESP_LEN);
                let res = self.$f(&c, &mut r, v);
                (<$ty>::RESP_LEN, res, Some(r))
            }};
        }
        let srq_off = self.cfg.caps.max_srq == 0;
        match hdr.cmd {
            code::QUERY_PORT => run!(cmd::QueryPort, query_port),
            code::QUERY_PKEY => run!(cmd::QueryPkey, query_pkey),
            code::CREATE_PD => run!(cmd::CreatePd, create_pd),
            code::DESTROY_PD => run!(cmd::DestroyPd, destroy_pd),
            code::CREATE_MR => run!(cmd::CreateMr, create_mr),
            code::DESTROY_MR => run!(cmd::DestroyMr, destroy_mr),
            code::CREATE_CQ => run!(cmd::CreateCq, create_cq),
            code::DESTROY_CQ => run!(cmd::DestroyCq, destroy_cq),
            code::CREATE_QP => {
                let len = if self.cfg.version >= 20 { 48 } else { 40 };
                let c = cmd::CreateQp::parse(v);
                let mut r = Response::new(hdr, len);
                let res = self.create_qp(&c, &mut r, v);
                (len, res, Some(r))
            }
            code::MODIFY_QP => run!(cmd::ModifyQp, modify_qp),
            code::QUERY_QP => run!(cmd::QueryQp, query_qp),
            code::DESTROY_QP => run!(cmd::DestroyQp, destroy_qp),
            code::CREATE_BIND => run!(cmd::CreateBind, create_bind),
            code::DESTROY_BIND => run!(cmd::DestroyBind, destroy_bind),
            code::CREATE_SRQ if !srq_off => run!(cmd::CreateSrq, create_srq),
            code::MODIFY_SRQ if !srq_off => run!(cmd::ModifySrq, modify_srq),
            code::QUERY_SRQ if !srq_off => run!(cmd::QuerySrq, query_srq),
            code::DESTROY_SRQ if !srq_off => run!(cmd::DestroySrq, destroy_srq),
            // RESIZE_CQ, UC commands, SRQ commands without SRQ support, unknown codes (M11, M43).
            _ => (cmd::HDR, Err(err::UNSUPPORTED), None),
        }
    }

    fn query_port(&mut self, c: &cmd::QueryPort, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        if c.port_num != 1 {
            return Err(err::INVALID);
        }
        let o = cmd::HDR;
        let b = &mut r.buf;
        b.set_u32(o, if self.link_up { 4 } else { 1 });
        b.set_u32(o + 4, self.cfg.port_mtu);
        b.set_u32(o + 8, self.cfg.port_mtu);
        b.set_u32(o + 12, self.cfg.caps.gid_tbl_len);
        b.set_u32(o + 16, 1 << 26);
        b.set_u32(o + 20, 0x8000_0000);
        b.set_u16(o + 32, 1);
        b.set_u8(o + 43, 1);
        b.set_u8(o + 44, 32);
        b.set_u8(o + 45, 5);
        Ok(())
    }

    fn query_pkey(&mut self, c: &cmd::QueryPkey, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        if c.port_num != 1 || u16::from(c.index) >= self.cfg.caps.max_pkeys {
            return Err(err::INVALID);
        }
        r.buf.set_u16(cmd::HDR, 0xFFFF);
        Ok(())
    }

    fn create_pd(&mut self, c: &cmd::CreatePd, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        if c.ctx_handle != 0 {
            // No user contexts exist (CREATE_UC is unsupported).
            return Err(err::UNKNOWN_HANDLE);
        }
        let h = self
            .pds
            .free_handle(1, self.cfg.caps.max_pd)
            .ok_or(err::NO_RESOURCES)?;
        self.pds.insert(h, Pd::default());
        r.buf.set_u32(16, h);
        Ok(())
    }

    fn destroy_pd(&mut self, c: &cmd::DestroyPd, _: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let pd = self.pds.get(c.pd_handle).ok_or(err::UNKNOWN_HANDLE)?;
        if pd.refs != 0 {
            return Err(err::BUSY);
        }
        self.pds.remove(c.pd_handle);
        Ok(())
    }

    fn pd_ref(&mut self, h: u32, delta: i32) {
        if let Some(p) = self.pds.get_mut(h) {
            p.refs = p.refs.saturating_add_signed(delta);
        }
    }

    fn create_mr(&mut self, c: &cmd::CreateMr, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        if self.pds.get(c.pd_handle).is_none() {
            return Err(err::UNKNOWN_HANDLE);
        }
        let a = c.access_flags;
        if a & !access::ALL != 0 || !access::local_write_rule_ok(a) {
            return Err(err::INVALID);
        }
        let kind = match c.flags {
            flags::FRMR => {
                if c.nchunks == 0 || c.nchunks > self.cfg.caps.max_fast_reg_page_list_len || a != 0
                {
                    return Err(err::INVALID);
                }
                MrKind::Frmr {
                    capacity: c.nchunks,
                    valid: false,
                    iova: 0,
                    length: 0,
                    pages: PagedMem::default(),
                }
            }
            flags::DMA => {
                if a & !access::LOCAL_WRITE != 0 {
                    return Err(err::INVALID);
                }
                MrKind::Dma
            }
            0 => {
                let need = ((c.start & 0xFFF) + c.length).div_ceil(4096);
                if c.length == 0
                    || c.length > self.cfg.caps.max_mr_size
                    || c.start.checked_add(c.length).is_none()
                    || u64::from(c.nchunks) < need
                    || c.nchunks > MAX_PAGES
                {
                    return Err(err::INVALID);
                }
                let pages = read_pdir(&self.dma, c.pdir_dma, c.nchunks).map_err(|_| {
                    self.counters.dma_faults += 1;
                    err::INVALID
                })?;
                MrKind::Normal {
                    start: c.start,
                    length: c.length,
                    pages: PagedMem::new(pages),
                }
            }
            _ => return Err(err::INVALID),
        };
        let h = self
            .mrs
            .free_handle(1, self.cfg.caps.max_mr)
            .ok_or(err::NO_RESOURCES)?;
        let key = h << 8;
        self.mrs.insert(
            h,
            Mr {
                pd: c.pd_handle,
                access: a,
                lkey: key,
                rkey: key,
                kind,
            },
        );
        self.pd_ref(c.pd_handle, 1);
        r.buf.set_u32(16, h);
        r.buf.set_u32(20, key);
        r.buf.set_u32(24, key);
        Ok(())
    }

    fn destroy_mr(&mut self, c: &cmd::DestroyMr, _: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let mr = self.mrs.remove(c.mr_handle).ok_or(err::UNKNOWN_HANDLE)?;
        self.pd_ref(mr.pd, -1);
        Ok(())
    }

    fn create_cq(&mut self, c: &cmd::CreateCq, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        if c.ctx_handle != 0 {
            return Err(err::UNKNOWN_HANDLE);
        }
        if !pow2(c.cqe) || c.cqe > self.cfg.caps.max_cqe {
            return Err(err::INVALID);
        }
        let need = 1 + (64 * u64::from(c.cqe)).div_ceil(4096);
        if u64::from(c.nchunks) < need || c.nchunks > MAX_PAGES {
            return Err(err::INVALID);
        }
        let pages = read_pdir(&self.dma, c.pdir_dma, c.nchunks).map_err(|_| {
            self.counters.dma_faults += 1;
            err::INVALID
        })?;
        let h = self
            .cqs
            .free_handle(1, self.cfg.caps.max_cq)
            .ok_or(err::NO_RESOURCES)?;
        let ring = Ring::new(c.cqe).ok_or(err::INVALID)?;
        self.cqs.insert(
            h,
            Cq {
                mem: PagedMem::new(pages),
                ring,
                tail: 0,
                arm: Arm::None,
                stopped: false,
                refs: 0,
                held: std::collections::VecDeque::new(),
            },
        );
        r.buf.set_u32(16, h);
        r.buf.set_u32(20, c.cqe);
        Ok(())
    }

    fn destroy_cq(&mut self, c: &cmd::DestroyCq, _: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let cq = self.cqs.get(c.cq_handle).ok_or(err::UNKNOWN_HANDLE)?;
        if cq.refs != 0 {
            return Err(err::BUSY);
        }
        self.cqs.remove(c.cq_handle);
        self.pending_cqnes.retain(|&h| h != c.cq_handle);
        Ok(())
    }

    fn create_qp(&mut self, c: &cmd::CreateQp, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let caps = &self.cfg.caps;
        let inval = Err(err::INVALID);
        let Some(ty) = QpType::from_u8(c.qp_type) else {
            return inval;
        };
        if !pow2(c.max_send_wr) || c.max_send_wr > caps.max_qp_wr {
            return inval;
        }
        if c.max_send_sge == 0 || c.max_send_sge > caps.max_sge || c.max_inline_data != 0 {
            return inval;
        }
        if c.sq_sig_all > 1 || self.pds.get(c.pd_handle).is_none() {
            return inval;
        }
        if self.cqs.get(c.send_cq_handle).is_none() || self.cqs.get(c.recv_cq_handle).is_none() {
            return inval;
        }
        let srq = match c.is_srq {
            0 if c.srq_handle == 0 => None,
            1 => match self.srqs.get(c.srq_handle) {
                Some(s) if s.pd == c.pd_handle && c.max_recv_wr == 0 && c.max_recv_sge == 0 => {
                    Some(c.srq_handle)
                }
                _ => return inval,
            },
            _ => return inval,
        };
        if srq.is_none()
            && (!pow2(c.max_recv_wr)
                || c.max_recv_wr > caps.max_qp_wr
                || c.max_recv_sge == 0
                || c.max_recv_sge > caps.max_sge)
        {
            return inval;
        }
        if ty == QpType::Gsi && self.qps.iter().any(|(_, q)| q.ty == QpType::Gsi) {
            return inval;
        }
        let sq_stride = stride(80, c.max_send_sge);
        let npages_send = 1 + pages_for(c.max_send_wr, sq_stride);
        let send_chunks = u64::from(c.send_chunks);
        let total = u64::from(c.total_chunks);
        if send_chunks + 1 < npages_send {
            return inval;
        }
        let rq = if srq.is_none() {
            let rq_stride = stride(16, c.max_recv_sge);
            if total < send_chunks + 1 + pages_for(c.max_recv_wr, rq_stride) {
                return inval;
            }
            Some(WqGeom {
                ring: Ring::new(c.max_recv_wr).ok_or(err::INVALID)?,
                stride: rq_stride,
                base: (send_chunks + 1) * 4096,
                max_sge: c.max_recv_sge,
            })
        } else {
            if total < send_chunks + 1 {
                return inval;
            }
            None
        };
        let pages = read_pdir(&self.dma, c.pdir_dma, u32::from(c.total_chunks)).map_err(|_| {
            self.counters.dma_faults += 1;
            err::INVALID
        })?;
        // Handles and QPNs (M10).
        let v20 = self.cfg.version >= 20;
        let max_qp = self.cfg.caps.max_qp;
        let handle = if !v20 && ty == QpType::Gsi {
            if self.qps.get(1).is_some() || max_qp <= 1 {
                return Err(err::NO_RESOURCES);
            }
            1
        } else {
            let min = if v20 { 1 } else { 2 };
            self.qps.free_handle(min, max_qp).ok_or(err::NO_RESOURCES)?
        };
        let qpn = match (v20, ty) {
            (_, QpType::Gsi) => 1,
            (true, _) => 0x100 + handle,
            (false, _) => handle,
        };
        let cap = QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: 0,
        };
        let qp = Qp {
            handle,
            qpn,
            ty,
            pd: c.pd_handle,
            send_cq: c.send_cq_handle,
            recv_cq: c.recv_cq_handle,
            srq,
            state: QpState::Reset,
            sq_sig_all: c.sq_sig_all == 1,
            mem: PagedMem::new(pages),
            sq: WqGeom {
                ring: Ring::new(c.max_send_wr).ok_or(err::INVALID)?,
                stride: sq_stride,
                base: 4096,
                max_sge: c.max_send_sge,
            },
            rq,
            attr: Default::default(),
            cap,
            sq_head: 0,
            sq_next: 0,
            sq_active: VecDeque::new(),
            rq_head: 0,
            rq_next: 0,
            recv_active: VecDeque::new(),
            srq_seq: 0,
            events_reported: 0,
        };
        self.qps.insert(handle, qp);
        self.pd_ref(c.pd_handle, 1);
        for h in [c.send_cq_handle, c.recv_cq_handle] {
            if let Some(cq) = self.cqs.get_mut(h) {
                cq.refs += 1;
            }
        }
        if let Some(s) = srq.and_then(|s| self.srqs.get_mut(s)) {
            s.refs += 1;
        }
        let b = &mut r.buf;
        b.set_u32(16, qpn);
        let o = if v20 {
            b.set_u32(20, handle);
            24
        } else {
            20
        };
        b.set_u32(o, cap.max_send_wr);
        b.set_u32(o + 4, cap.max_recv_wr);
        b.set_u32(o + 8, cap.max_send_sge);
        b.set_u32(o + 12, cap.max_recv_sge);
        b.set_u32(o + 16, 0);
        Ok(())
    }

    fn modify_qp(&mut self, c: &cmd::ModifyQp, _: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let caps_ports = self.cfg.caps.phys_port_cnt;
        let max_pkeys = self.cfg.caps.max_pkeys;
        let qp = self.qps.get_mut(c.qp_handle).ok_or(err::UNKNOWN_HANDLE)?;
        let m = c.attr_mask;
        let from = qp.state;
        let to = if m & mask::STATE != 0 {
            QpState::from_u32(c.attr.qp_state).ok_or(err::INVALID)?
        } else {
            from
        };
        let (req, opt) = transition_masks(qp.ty, from, to).ok_or(err::INVALID)?;
        let attrs = m & !mask::STATE;
        if attrs & req != req || attrs & !(req | opt) != 0 {
            return Err(err::INVALID);
        }
        let a = &c.attr;
        if (m & mask::PORT != 0 && (a.port_num == 0 || a.port_num > caps_ports))
            || (m & mask::PKEY_INDEX != 0 && a.pkey_index >= max_pkeys)
            || (m & mask::MIN_RNR_TIMER != 0 && a.min_rnr_timer > 31)
            || (m & mask::PATH_MTU != 0 && !(1..=5).contains(&a.path_mtu))
            || (m & mask::ACCESS_FLAGS != 0 && a.qp_access_flags & !access::ALL != 0)
            || (qp.ty == QpType::Rc
                && to == QpState::Rtr
                && from == QpState::Init
                && a.ah_attr.ah_flags & 1 == 0)
        {
            return Err(err::INVALID);
        }
        qp.attr.apply(m, a);
        let h = c.qp_handle;
        if to == from && m & mask::STATE == 0 {
            return Ok(());
        }
        match to {
            QpState::Err => {
                // ERR → ERR re-flushes anything posted since (idempotent otherwise).
                self.enter_err(h);
            }
            QpState::Reset => {
                // M33: drop WQEs without CQEs, zero the device indices.
                qp.state = QpState::Reset;
                qp.sq_head = 0;
                qp.sq_next = 0;
                qp.rq_head = 0;
                qp.rq_next = 0;
                qp.sq_active.clear();
                qp.recv_active.clear();
                qp.attr = Default::default();
                self.notify_state(h, QpState::Reset);
                for off in [crate::qp::ring_off::SQ_CONS, crate::qp::ring_off::RQ_CONS] {
                    let Some(qp) = self.qps.get(h) else { break };
                    if qp.mem.write_u32(&self.dma, off, 0).is_err() {
                        self.counters.dma_faults += 1;
                    }
                }
            }
            s => {
                qp.state = s;
                self.notify_state(h, s);
                if s == QpState::Rts {
                    // Posted WQEs wait in INIT/RTR and run on reaching RTS (M17).
                    self.kick_sq(h);
                }
            }
        }
        Ok(())
    }

    fn query_qp(&mut self, c: &cmd::QueryQp, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let qp = self.qps.get(c.qp_handle).ok_or(err::UNKNOWN_HANDLE)?;
        let mut a = qp.attr;
        a.qp_state = qp.state.to_u32();
        a.cur_qp_state = a.qp_state;
        a.cap = qp.cap;
        let mut out = [0u8; crate::qp::QP_ATTR_SIZE];
        a.emit(&mut Le(&mut out[..]), 0);
        r.buf.set_bytes(16, &out);
        Ok(())
    }

    fn destroy_qp(&mut self, c: &cmd::DestroyQp, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let qp = self.qps.remove(c.qp_handle).ok_or(err::UNKNOWN_HANDLE)?;
        self.pd_ref(qp.pd, -1);
        for h in [qp.send_cq, qp.recv_cq] {
            if let Some(cq) = self.cqs.get_mut(h) {
                cq.refs = cq.refs.saturating_sub(1);
            }
        }
        if let Some(s) = qp.srq.and_then(|s| self.srqs.get_mut(s)) {
            s.refs = s.refs.saturating_sub(1);
        }
        self.work
            .retain(|w| !matches!(w, super::Work::Sq(h) | super::Work::Rq(h) if *h == c.qp_handle));
        if let Some(mut t) = self.transport.take() {
            t.qp_destroyed(self, c.qp_handle);
            self.transport = Some(t);
        }
        r.buf.set_u32(16, qp.events_reported);
        Ok(())
    }

    fn create_bind(&mut self, c: &cmd::CreateBind, _: &mut Response, v: &Le<&[u8]>) -> CmdResult {
        let slot = self.gids.get_mut(c.index as usize).ok_or(err::INVALID)?;
        *slot = Some(GidEntry {
            gid: v.bytes(cmd::gid_field::CREATE_BIND_GID),
            gid_type: c.gid_type,
            mtu: c.mtu,
        });
        Ok(())
    }

    fn destroy_bind(&mut self, c: &cmd::DestroyBind, _: &mut Response, v: &Le<&[u8]>) -> CmdResult {
        let gid: [u8; 16] = v.bytes(cmd::gid_field::DESTROY_BIND_GID);
        let slot = self.gids.get_mut(c.index as usize).ok_or(err::INVALID)?;
        match slot {
            Some(e) if e.gid == gid => {
                *slot = None;
                Ok(())
            }
            _ => Err(err::INVALID),
        }
    }

    fn create_srq(&mut self, c: &cmd::CreateSrq, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let caps = &self.cfg.caps;
        if c.srq_type != 0
            || !pow2(c.max_wr)
            || c.max_wr > caps.max_srq_wr
            || c.max_sge == 0
            || c.max_sge > caps.max_srq_sge
            || c.srq_limit > c.max_wr
            || self.pds.get(c.pd_handle).is_none()
        {
            return Err(err::INVALID);
        }
        let st = stride(16, c.max_sge);
        let need = 1 + pages_for(c.max_wr, st);
        if u64::from(c.nchunks) < need || c.nchunks > MAX_PAGES {
            return Err(err::INVALID);
        }
        // Only the pages the ring uses are kept (§9).
        let pages = read_pdir(&self.dma, c.pdir_dma, need as u32).map_err(|_| {
            self.counters.dma_faults += 1;
            err::INVALID
        })?;
        let h = self
            .srqs
            .free_handle(1, self.cfg.caps.max_srq)
            .ok_or(err::NO_RESOURCES)?;
        self.srqs.insert(
            h,
            Srq {
                pd: c.pd_handle,
                mem: PagedMem::new(pages),
                ring: Ring::new(c.max_wr).ok_or(err::INVALID)?,
                max_sge: c.max_sge,
                stride: st,
                limit: c.srq_limit,
                head: 0,
                error: false,
                refs: 0,
            },
        );
        self.pd_ref(c.pd_handle, 1);
        r.buf.set_u32(16, h);
        Ok(())
    }

    fn modify_srq(&mut self, c: &cmd::ModifySrq, _: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let s = self.srqs.get_mut(c.srq_handle).ok_or(err::UNKNOWN_HANDLE)?;
        if c.attr_mask != 1 << 1 || c.srq_limit > s.ring.n() {
            return Err(err::INVALID);
        }
        s.limit = c.srq_limit;
        Ok(())
    }

    fn query_srq(&mut self, c: &cmd::QuerySrq, r: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let s = self.srqs.get(c.srq_handle).ok_or(err::UNKNOWN_HANDLE)?;
        r.buf.set_u32(16, s.ring.n());
        r.buf.set_u32(20, s.max_sge);
        r.buf.set_u32(24, s.limit);
        Ok(())
    }

    fn destroy_srq(&mut self, c: &cmd::DestroySrq, _: &mut Response, _: &Le<&[u8]>) -> CmdResult {
        let s = self.srqs.get(c.srq_handle).ok_or(err::UNKNOWN_HANDLE)?;
        if s.refs != 0 {
            return Err(err::BUSY);
        }
        let s = self.srqs.remove(c.srq_handle).ok_or(err::UNKNOWN_HANDLE)?;
        self.pd_ref(s.pd, -1);
        Ok(())
    }
}
