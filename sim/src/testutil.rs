//! Driver-side test helpers (feature `test-utils`; vm-virtio `mock.rs` style).
//!
//! Everything here plays the *driver*: page-aligned DMA buffers, page directories, raw command
//! images built from literal reference offsets, and bring-up. Command and WQE encodings are
//! written by offset here, not with the model's own parsers, so a misread offset in the model
//! fails a test.
#![deny(unsafe_code)]
#![allow(missing_docs, clippy::new_without_default)]

use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::dma::{DmaBuffer, DmaSpace};
use crate::dsr::DeviceConfig;
use crate::intr::InterruptSink;

/// Records delivered vectors.
#[derive(Debug, Default)]
pub struct IrqLog {
    pub raised: Mutex<Vec<u32>>,
}

impl IrqLog {
    /// Takes the recorded vectors.
    pub fn take(&self) -> Vec<u32> {
        std::mem::take(&mut *self.raised.lock().unwrap())
    }
    /// Number of recorded raises of `v` (without taking).
    pub fn count(&self, v: u32) -> usize {
        self.raised
            .lock()
            .unwrap()
            .iter()
            .filter(|&&x| x == v)
            .count()
    }
}

impl InterruptSink for IrqLog {
    fn raise(&self, vector: u32) {
        self.raised.lock().unwrap().push(vector);
    }
}

/// Contiguous data pages behind a two-level page directory.
#[derive(Debug)]
pub struct PdirBuf {
    pub dir: DmaBuffer,
    pub tables: Vec<DmaBuffer>,
    pub data: DmaBuffer,
}

impl PdirBuf {
    pub fn new(dma: &Arc<DmaSpace>, npages: usize) -> Self {
        let data = DmaBuffer::new(dma, npages);
        let dir = DmaBuffer::new(dma, 1);
        let ntables = npages.div_ceil(512).max(1);
        let mut tables = Vec::new();
        for t in 0..ntables {
            let tb = DmaBuffer::new(dma, 1);
            for i in 0..512.min(npages.saturating_sub(t * 512)) {
                tb.write_u64(8 * i, data.page_bus(t * 512 + i));
            }
            dir.write_u64(8 * t, tb.bus());
            tables.push(tb);
        }
        Self { dir, tables, data }
    }
    pub fn pdir(&self) -> u64 {
        self.dir.bus()
    }
}

/// A raw request image (184 bytes) built by offset.
#[derive(Clone, Debug)]
pub struct Req(pub [u8; 184]);

impl Req {
    pub fn new(code: u32) -> Self {
        let mut r = Req([0; 184]);
        r.0[0..8].copy_from_slice(
            &0x5EED_0000_0000_0000u64
                .wrapping_add(u64::from(code))
                .to_le_bytes(),
        );
        r.0[8..12].copy_from_slice(&code.to_le_bytes());
        r
    }
    pub fn u8(mut self, off: usize, v: u8) -> Self {
        self.0[off] = v;
        self
    }
    pub fn u16(mut self, off: usize, v: u16) -> Self {
        self.0[off..off + 2].copy_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, off: usize, v: u32) -> Self {
        self.0[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, off: usize, v: u64) -> Self {
        self.0[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, off: usize, b: &[u8]) -> Self {
        self.0[off..off + b.len()].copy_from_slice(b);
        self
    }
}

/// A response read back from the slot.
#[derive(Clone, Debug)]
pub struct Resp {
    /// ERR register after REQUEST.
    pub err_reg: u32,
    pub bytes: Vec<u8>,
}

impl Resp {
    pub fn ack(&self) -> u32 {
        self.u32(8)
    }
    pub fn err(&self) -> u8 {
        self.bytes[12]
    }
    pub fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.bytes[off..off + 4].try_into().unwrap())
    }
    pub fn u16(&self, off: usize) -> u16 {
        u16::from_le_bytes(self.bytes[off..off + 2].try_into().unwrap())
    }
    pub fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.bytes[off..off + 8].try_into().unwrap())
    }
}

/// Reads a device-produced ring (async events, CQNEs, CQEs) as the driver does.
#[derive(Debug)]
pub struct DevRingReader {
    pub buf: PdirBuf,
    pub n: u32,
    pub elem: usize,
}

impl DevRingReader {
    pub fn new(dma: &Arc<DmaSpace>, pages: usize, n: u32, elem: usize) -> Self {
        Self {
            buf: PdirBuf::new(dma, pages),
            n,
            elem,
        }
    }
    pub fn tail(&self) -> u32 {
        self.buf.data.read_u32(8)
    }
    pub fn head(&self) -> u32 {
        self.buf.data.read_u32(12)
    }
    /// Pops all available elements (Linux arithmetic, §7).
    pub fn drain(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut head = self.head();
        let tail = self.tail();
        let mask2 = 2 * self.n - 1;
        while head != tail {
            let slot = (head & (self.n - 1)) as usize;
            out.push(self.buf.data.read_vec(4096 + slot * self.elem, self.elem));
            head = (head + 1) & mask2;
        }
        self.buf.data.write_u32(12, head);
        out
    }
}

/// A brought-up device with its driver-side memory.
pub struct Host {
    pub dma: Arc<DmaSpace>,
    pub dev: Arc<Device>,
    pub dsr: DmaBuffer,
    pub cmd: DmaBuffer,
    pub resp: DmaBuffer,
    pub async_ring: DevRingReader,
    pub cqne_ring: DevRingReader,
    pub irqs: Arc<IrqLog>,
}

impl Host {
    /// Allocates DSR, slots and 4-page device rings and writes DSRLOW/DSRHIGH (no ACTIVATE).
    pub fn load(cfg: DeviceConfig) -> Self {
        let dma = Arc::new(DmaSpace::new());
        let dev = Device::new(dma.clone(), cfg);
        Self::load_on(dev)
    }

    /// [`Host::load`] for an existing device (e.g. a `World` node), using its memory.
    pub fn load_on(dev: Arc<Device>) -> Self {
        let dma = dev.dma();
        let irqs = Arc::new(IrqLog::default());
        dev.set_interrupt_sink(irqs.clone());
        let dsr = DmaBuffer::new(&dma, 1);
        let cmd = DmaBuffer::new(&dma, 1);
        let resp = DmaBuffer::new(&dma, 1);
        let async_ring = DevRingReader::new(&dma, 4, 3 * 4096 / 8, 8);
        let cqne_ring = DevRingReader::new(&dma, 4, 3 * 4096 / 4, 4);
        dsr.write_u32(0, 20);
        dsr.write_u64(8, 2);
        dsr.write_u64(16, cmd.bus());
        dsr.write_u64(24, resp.bus());
        dsr.write_u32(32, 4);
        dsr.write_u64(40, async_ring.buf.pdir());
        dsr.write_u32(48, 4);
        dsr.write_u64(56, cqne_ring.buf.pdir());
        let h = Self {
            dma,
            dev,
            dsr,
            cmd,
            resp,
            async_ring,
            cqne_ring,
            irqs,
        };
        h.dev.bar1_write32(0x04, h.dsr.bus() as u32);
        h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
        h
    }

    /// Full bring-up: load, IMR = 0, ACTIVATE (asserting ERR = 0).
    pub fn new(cfg: DeviceConfig) -> Self {
        let h = Self::load(cfg);
        h.dev.bar1_write32(0x1C, 0);
        h.dev.bar1_write32(0x0C, 0);
        assert_eq!(h.dev.bar1_read32(0x14), 0, "ACTIVATE failed");
        h
    }

    /// Full bring-up of an existing device (e.g. a `World` node).
    pub fn on(dev: Arc<Device>) -> Self {
        let h = Self::load_on(dev);
        h.dev.bar1_write32(0x1C, 0);
        h.dev.bar1_write32(0x0C, 0);
        assert_eq!(h.dev.bar1_read32(0x14), 0, "ACTIVATE failed");
        h
    }

    /// CREATE_BIND of `gid` at `index` (mtu @16, vlan @20, index @24, gid @28, gid_type @44).
    pub fn bind_gid(&self, index: u32, gid: [u8; 16]) {
        self.cmd_ok(
            &Req::new(15)
                .u32(16, 3)
                .u32(24, index)
                .bytes(28, &gid)
                .u8(44, 2),
        );
    }

    /// SQ doorbell (UAR 0x0, `handle | 1 << 30`).
    pub fn ring_sq(&self, qp: u32) {
        self.dev.uar_write32(0, qp | (1 << 30));
    }

    /// RQ doorbell (UAR 0x0, `handle | 1 << 31`).
    pub fn ring_rq(&self, qp: u32) {
        self.dev.uar_write32(0, qp | (1 << 31));
    }

    /// CQ arm doorbell (UAR 0x4, `handle | 1 << 30`; `solicited` → `1 << 29`).
    pub fn arm_cq(&self, cq: u32, solicited: bool) {
        let bit = if solicited { 1 << 29 } else { 1 << 30 };
        self.dev.uar_write32(4, cq | bit);
    }

    /// Drives an RC QP RESET → INIT → RTR → RTS with the attributes of `p`.
    pub fn rc_connect(&self, qp: u32, p: &RcPath) {
        let r = self.modify_qp(qp, 1 | (1 << 3) | (1 << 4) | (1 << 5), |q| {
            q.u32(24, 1).u32(24 + 32, p.access).u8(24 + 45, 1)
        });
        assert_eq!(r.err(), 0, "RESET->INIT");
        // AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
        let m = 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15);
        let r = self.modify_qp(qp, m, |q| {
            q.u32(24, 2)
                .u32(24 + 8, p.path_mtu)
                .u32(24 + 28, p.dest_qpn)
                .u32(24 + 20, p.rq_psn)
                .u8(24 + 43, p.max_dest_rd_atomic)
                .u8(24 + 44, p.min_rnr_timer)
                .bytes(24 + 80, &p.dgid)
                .u8(24 + 80 + 20, p.sgid_index)
                .u8(24 + 80 + 21, 64)
                .u8(24 + 80 + 31, 1)
                .u8(24 + 80 + 32, 1)
                .bytes(24 + 80 + 33, &p.dmac)
        });
        assert_eq!(r.err(), 0, "INIT->RTR");
        self.dev.run_until_idle();
        // TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC
        let m = 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13);
        let r = self.modify_qp(qp, m, |q| {
            q.u32(24, 3)
                .u8(24 + 46, p.timeout)
                .u8(24 + 47, p.retry_cnt)
                .u8(24 + 48, p.rnr_retry)
                .u32(24 + 24, p.sq_psn)
                .u8(24 + 42, p.max_rd_atomic)
        });
        assert_eq!(r.err(), 0, "RTR->RTS");
    }

    /// Drives a UD (or GSI, `gsi`) QP RESET → INIT → RTR → RTS with Q_Key `qkey`.
    pub fn ud_to_rts(&self, qp: u32, qkey: u32, gsi: bool) {
        let m = if gsi {
            1 | (1 << 4) | (1 << 6)
        } else {
            1 | (1 << 4) | (1 << 5) | (1 << 6)
        };
        let r = self.modify_qp(qp, m, |q| q.u32(24, 1).u32(24 + 16, qkey).u8(24 + 45, 1));
        assert_eq!(r.err(), 0, "RESET->INIT");
        let r = self.modify_qp(qp, 1, |q| q.u32(24, 2));
        assert_eq!(r.err(), 0, "INIT->RTR");
        let r = self.modify_qp(qp, 1 | (1 << 16), |q| q.u32(24, 3).u32(24 + 24, 7));
        assert_eq!(r.err(), 0, "RTR->RTS");
    }

    /// Default configuration.
    pub fn default_up() -> Self {
        Self::new(DeviceConfig::default())
    }

    /// Posts a command, runs the device, returns the response (176 bytes) and ERR.
    pub fn cmd(&self, req: &Req) -> Resp {
        self.cmd.write(0, &req.0);
        self.resp.write(0, &[0u8; 176]);
        self.dev.bar1_write32(0x10, 0);
        let err_reg = self.dev.bar1_read32(0x14);
        self.dev.run_until_idle();
        Resp {
            err_reg,
            bytes: self.resp.read_vec(0, 176),
        }
    }

    /// Posts a command that must succeed; returns the response.
    pub fn cmd_ok(&self, req: &Req) -> Resp {
        let r = self.cmd(req);
        assert_eq!(
            (r.err_reg, r.err()),
            (0, 0),
            "command {} failed",
            u32::from_le_bytes(req.0[8..12].try_into().unwrap())
        );
        r
    }

    /// Async events (type, info) posted since the last call.
    pub fn events(&self) -> Vec<(u32, u32)> {
        self.async_ring
            .drain()
            .iter()
            .map(|e| {
                (
                    u32::from_le_bytes(e[0..4].try_into().unwrap()),
                    u32::from_le_bytes(e[4..8].try_into().unwrap()),
                )
            })
            .collect()
    }

    /// CQ handles notified since the last call.
    pub fn cqnes(&self) -> Vec<u32> {
        self.cqne_ring
            .drain()
            .iter()
            .map(|e| u32::from_le_bytes(e[0..4].try_into().unwrap()))
            .collect()
    }

    pub fn create_pd(&self) -> u32 {
        self.cmd_ok(&Req::new(2)).u32(16)
    }

    /// A CQ of `n` entries; returns its handle and ring memory.
    pub fn create_cq(&self, n: u32) -> TestCq {
        let pages = 1 + (64 * n as usize).div_ceil(4096);
        let buf = PdirBuf::new(&self.dma, pages);
        let r = self.cmd_ok(
            &Req::new(6)
                .u64(16, buf.pdir())
                .u32(28, n)
                .u32(32, pages as u32),
        );
        TestCq {
            handle: r.u32(16),
            n,
            buf,
        }
    }

    /// A QP (kernel layout, §9). `srq` = Some(handle) creates it on an SRQ.
    pub fn create_qp(&self, spec: &QpSpec) -> TestQp {
        let sq_stride = (80 + 16 * spec.send_sge as usize).next_power_of_two();
        let rq_stride = (16 + 16 * spec.recv_sge as usize).next_power_of_two();
        let send_pages = 1 + (spec.send_wr as usize * sq_stride).div_ceil(4096);
        let recv_pages = if spec.srq.is_some() {
            0
        } else {
            (spec.recv_wr as usize * rq_stride).div_ceil(4096)
        };
        let buf = PdirBuf::new(&self.dma, send_pages + recv_pages);
        let (rwr, rsge) = if spec.srq.is_some() {
            (0, 0)
        } else {
            (spec.recv_wr, spec.recv_sge)
        };
        let req = Req::new(9)
            .u64(16, buf.pdir())
            .u32(24, spec.pd)
            .u32(28, spec.send_cq)
            .u32(32, spec.recv_cq)
            .u32(36, spec.srq.unwrap_or(0))
            .u32(40, spec.send_wr)
            .u32(44, rwr)
            .u32(48, spec.send_sge)
            .u32(52, rsge)
            .u32(64, 1)
            .u16(68, (send_pages + recv_pages) as u16)
            .u16(70, (send_pages - 1) as u16)
            .u8(74, spec.sq_sig_all)
            .u8(75, spec.qp_type)
            .u8(76, u8::from(spec.srq.is_some()));
        let r = self.cmd_ok(&req);
        let v20 = self.dev.bar1_read32(0) >= 20;
        let handle = if v20 { r.u32(20) } else { r.u32(16) };
        TestQp {
            handle,
            qpn: r.u32(16),
            buf,
            sq_stride,
            rq_stride,
            send_wr: spec.send_wr,
            recv_wr: rwr,
            rq_base: send_pages * 4096,
            sq_tail: 0,
            rq_tail: 0,
        }
    }

    /// MODIFY_QP with an attribute closure writing into the 160-byte attr at request @24.
    pub fn modify_qp(&self, qp: u32, mask: u32, attr: impl FnOnce(Req) -> Req) -> Resp {
        let req = Req::new(10).u32(16, qp).u32(20, mask);
        self.cmd(&attr(req))
    }

    /// Drives an RC QP RESET → INIT → RTR → RTS with typical attributes.
    pub fn rc_to_rts(&self, qp: u32, access: u32) {
        // RESET→INIT: PKEY_INDEX | PORT | ACCESS_FLAGS
        let r = self.modify_qp(qp, 1 | (1 << 3) | (1 << 4) | (1 << 5), |q| {
            q.u32(24, 1).u32(24 + 32, access).u8(24 + 45, 1)
        });
        assert_eq!(r.err(), 0);
        // INIT→RTR: AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
        let m = 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15);
        let r = self.modify_qp(qp, m, |q| {
            q.u32(24, 2)
                .u32(24 + 8, 3)
                .u32(24 + 28, 0x102)
                .u32(24 + 20, 100)
                .u8(24 + 43, 4)
                .u8(24 + 44, 12)
                .u8(24 + 80 + 31, 1)
        });
        assert_eq!(r.err(), 0);
        // RTR→RTS: TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC
        let m = 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13);
        let r = self.modify_qp(qp, m, |q| {
            q.u32(24, 3)
                .u8(24 + 46, 14)
                .u8(24 + 47, 7)
                .u8(24 + 48, 7)
                .u32(24 + 24, 200)
                .u8(24 + 42, 4)
        });
        assert_eq!(r.err(), 0);
    }

    /// CREATE_MR normal over a fresh buffer of `pages` pages starting at virtual `start`.
    pub fn create_mr(&self, pd: u32, start: u64, len: u64, access: u32) -> TestMr {
        let pages = ((start & 0xFFF) + len).div_ceil(4096).max(1) as usize;
        let buf = PdirBuf::new(&self.dma, pages);
        let r = self.cmd_ok(
            &Req::new(4)
                .u64(16, start)
                .u64(24, len)
                .u64(32, buf.pdir())
                .u32(40, pd)
                .u32(44, access)
                .u32(48, 0)
                .u32(52, pages as u32),
        );
        TestMr {
            handle: r.u32(16),
            lkey: r.u32(20),
            rkey: r.u32(24),
            start,
            buf: Some(buf),
        }
    }

    /// CREATE_MR FRMR with capacity `pages`.
    pub fn create_frmr(&self, pd: u32, pages: u32) -> TestMr {
        let r = self.cmd_ok(&Req::new(4).u32(40, pd).u32(48, 2).u32(52, pages));
        TestMr {
            handle: r.u32(16),
            lkey: r.u32(20),
            rkey: r.u32(24),
            start: 0,
            buf: None,
        }
    }
}

/// RC connection attributes for [`Host::rc_connect`] (offsets of `pvrdma_qp_attr`, §8).
#[derive(Clone, Copy, Debug)]
pub struct RcPath {
    pub dest_qpn: u32,
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
    pub sgid_index: u8,
    pub path_mtu: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub access: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
}

impl RcPath {
    /// MTU 1024, PSNs just below the 24-bit wrap, timeout 14 (67 ms), 7 retries, infinite
    /// RNR retry, RNR timer 1 (10 µs), 4 READs each way, LOCAL_WRITE | REMOTE_WRITE |
    /// REMOTE_READ.
    pub fn new(dest_qpn: u32, dgid: [u8; 16], dmac: [u8; 6]) -> Self {
        Self {
            dest_qpn,
            dgid,
            dmac,
            sgid_index: 0,
            path_mtu: 3,
            rq_psn: 0xFF_FFF0,
            sq_psn: 0xFF_FFF0,
            access: 7,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
        }
    }
}

/// CREATE_QP parameters.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub send_wr: u32,
    pub recv_wr: u32,
    pub send_sge: u32,
    pub recv_sge: u32,
    pub qp_type: u8,
    pub sq_sig_all: u8,
}

impl QpSpec {
    pub fn rc(pd: u32, scq: u32, rcq: u32) -> Self {
        Self {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            srq: None,
            send_wr: 8,
            recv_wr: 8,
            send_sge: 2,
            recv_sge: 2,
            qp_type: 2,
            sq_sig_all: 0,
        }
    }
}

#[derive(Debug)]
pub struct TestCq {
    pub handle: u32,
    pub n: u32,
    pub buf: PdirBuf,
}

impl TestCq {
    pub fn tail(&self) -> u32 {
        self.buf.data.read_u32(8)
    }
    pub fn head(&self) -> u32 {
        self.buf.data.read_u32(12)
    }
    /// Pops every available CQE (raw 64-byte images).
    pub fn poll(&self) -> Vec<crate::wqe::Cqe> {
        let mut out = Vec::new();
        let mut head = self.head();
        let tail = self.tail();
        while head != tail {
            let slot = (head & (self.n - 1)) as usize;
            out.push(crate::wqe::Cqe::parse(
                &self.buf.data.read_vec(4096 + 64 * slot, 64),
            ));
            head = (head + 1) & (2 * self.n - 1);
        }
        self.buf.data.write_u32(12, head);
        out
    }
}

#[derive(Debug)]
pub struct TestMr {
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub start: u64,
    pub buf: Option<PdirBuf>,
}

#[derive(Debug)]
pub struct TestQp {
    pub handle: u32,
    pub qpn: u32,
    pub buf: PdirBuf,
    pub sq_stride: usize,
    pub rq_stride: usize,
    pub send_wr: u32,
    pub recv_wr: u32,
    pub rq_base: usize,
    pub sq_tail: u32,
    pub rq_tail: u32,
}

/// A send WQE built by offset (§10).
#[derive(Clone, Debug)]
pub struct SendWqe(pub Vec<u8>);

impl SendWqe {
    pub fn new(wr_id: u64, opcode: u32, flags: u32) -> Self {
        let mut b = vec![0u8; 80];
        b[0..8].copy_from_slice(&wr_id.to_le_bytes());
        b[16..20].copy_from_slice(&opcode.to_le_bytes());
        b[20..24].copy_from_slice(&flags.to_le_bytes());
        Self(b)
    }
    pub fn at(mut self, off: usize, v: &[u8]) -> Self {
        self.0[off..off + v.len()].copy_from_slice(v);
        self
    }
    pub fn sge(mut self, addr: u64, len: u32, lkey: u32) -> Self {
        let n = u32::from_le_bytes(self.0[8..12].try_into().unwrap());
        self.0[8..12].copy_from_slice(&(n + 1).to_le_bytes());
        self.0.extend_from_slice(&addr.to_le_bytes());
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(&lkey.to_le_bytes());
        self
    }
    pub fn num_sge(mut self, n: u32) -> Self {
        self.0[8..12].copy_from_slice(&n.to_le_bytes());
        self
    }
}

impl TestQp {
    /// Writes a send WQE at the SQ tail and advances `prod_tail` (no doorbell).
    pub fn post_send(&mut self, w: &SendWqe) {
        let slot = (self.sq_tail & (self.send_wr - 1)) as usize;
        let mut img = w.0.clone();
        img.resize(self.sq_stride, 0);
        self.buf.data.write(4096 + slot * self.sq_stride, &img);
        self.sq_tail = (self.sq_tail + 1) & (2 * self.send_wr - 1);
        self.buf.data.write_u32(0, self.sq_tail);
    }
    /// Writes a receive WQE (wr_id, SGEs) at the RQ tail and advances `prod_tail`.
    pub fn post_recv(&mut self, wr_id: u64, sges: &[(u64, u32, u32)]) {
        let slot = (self.rq_tail & (self.recv_wr - 1)) as usize;
        let mut img = vec![0u8; self.rq_stride];
        img[0..8].copy_from_slice(&wr_id.to_le_bytes());
        img[8..12].copy_from_slice(&(sges.len() as u32).to_le_bytes());
        for (i, (a, l, k)) in sges.iter().enumerate() {
            let o = 16 + 16 * i;
            img[o..o + 8].copy_from_slice(&a.to_le_bytes());
            img[o + 8..o + 12].copy_from_slice(&l.to_le_bytes());
            img[o + 12..o + 16].copy_from_slice(&k.to_le_bytes());
        }
        self.buf
            .data
            .write(self.rq_base + slot * self.rq_stride, &img);
        self.rq_tail = (self.rq_tail + 1) & (2 * self.recv_wr - 1);
        self.buf.data.write_u32(8, self.rq_tail);
    }
    pub fn sq_cons(&self) -> u32 {
        self.buf.data.read_u32(4)
    }
    pub fn rq_cons(&self) -> u32 {
        self.buf.data.read_u32(12)
    }
}

impl Host {
    /// INIT → RTR → RTS for an RC QP already in INIT.
    pub fn rc_to_rts_from_init(&self, qp: u32) {
        let m = 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15);
        let r = self.modify_qp(qp, m, |q| {
            q.u32(24, 2)
                .u32(24 + 8, 3)
                .u32(24 + 28, 0x102)
                .u8(24 + 80 + 31, 1)
        });
        assert_eq!(r.err(), 0);
        let m = 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13);
        let r = self.modify_qp(qp, m, |q| q.u32(24, 3));
        assert_eq!(r.err(), 0);
    }

    /// CREATE_QP (RC, 8×2 SGE SQ, 8×2 SGE RQ: 3 pages, send_chunks 1) over an existing buffer.
    pub fn create_qp_from(&self, buf: &PdirBuf, spec: &QpSpec) -> u32 {
        let req = Req::new(9)
            .u64(16, buf.pdir())
            .u32(24, spec.pd)
            .u32(28, spec.send_cq)
            .u32(32, spec.recv_cq)
            .u32(40, 8)
            .u32(44, 8)
            .u32(48, 2)
            .u32(52, 2)
            .u16(68, 3)
            .u16(70, 1)
            .u8(75, 2);
        self.cmd_ok(&req).u32(20)
    }
}
