//! A mock vmxnet3 driver for the model's tests (feature `test-utils`; vm-virtio `mock.rs`
//! style). DriverShared, queue descriptors and ring descriptors are written here with literal
//! offsets and bit positions from `docs/reference/vmxnet3.md` §3.5–§3.7, not with the model's
//! [`super::layout`], so a misread offset on either side fails a test.
#![allow(missing_docs, clippy::new_without_default)]

use std::sync::{Arc, Mutex};

use crate::dma::{DmaBuffer, DmaSpace};
use crate::testutil::IrqLog;

use super::{Vmxnet3, Vmxnet3Config};

/// Commands by value (§3.3).
pub const ACTIVATE: u32 = 0xCAFE_0000;
pub const QUIESCE: u32 = 0xCAFE_0001;
pub const RESET: u32 = 0xCAFE_0002;
pub const UPDATE_RX_MODE: u32 = 0xCAFE_0003;
pub const UPDATE_MAC_FILTERS: u32 = 0xCAFE_0004;
pub const UPDATE_VLAN_FILTERS: u32 = 0xCAFE_0005;
pub const GET_QUEUE_STATUS: u32 = 0xF00D_0000;
pub const GET_STATS: u32 = 0xF00D_0001;
pub const GET_LINK: u32 = 0xF00D_0002;

/// Where the mock puts things in its one shared page.
pub const TXQ_DESC: usize = 1024;
pub const RXQ_DESC: usize = 1280;
pub const MF_TABLE: usize = 2048;

/// What the mock writes into DriverShared and its queue descriptors.
#[derive(Clone, Debug)]
pub struct MockConfig {
    pub tx_size: u32,
    pub tx_comp_size: u32,
    pub rx_sizes: [u32; 2],
    pub rx_comp_size: u32,
    pub mtu: u32,
    pub num_intrs: u8,
    pub event_intr: u8,
    pub tx_intr: u8,
    pub rx_intr: u8,
    pub auto_mask: u8,
    pub gos_type: u32,
    pub rx_mode: u32,
    pub max_rx_sg: u16,
    pub features: u64,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            tx_size: 64,
            tx_comp_size: 64,
            rx_sizes: [64, 32],
            rx_comp_size: 96,
            mtu: 1500,
            num_intrs: 3,
            event_intr: 2,
            tx_intr: 1,
            rx_intr: 0,
            auto_mask: 1,
            gos_type: 1,
            rx_mode: 0x01 | 0x04,
            max_rx_sg: 4,
            features: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Ring {
    next: u32,
    gen_bit: u32,
}

impl Ring {
    fn new() -> Self {
        Self {
            next: 0,
            gen_bit: 1,
        }
    }
    fn advance(&mut self, size: u32) {
        self.next += 1;
        if self.next == size {
            self.next = 0;
            self.gen_bit ^= 1;
        }
    }
}

#[derive(Debug)]
struct State {
    tx: Ring,
    txc: Ring,
    rx: [Ring; 2],
    rxc: Ring,
    /// Next free byte of the Tx data page.
    tx_data: usize,
}

/// One Rx completion as the mock reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxComp {
    pub idx: u32,
    pub rqid: u32,
    pub len: u32,
    pub sop: bool,
    pub eop: bool,
    pub err: bool,
    pub ts: bool,
    pub tci: u16,
    pub kind: u32,
    pub cnc: bool,
}

/// A Tx descriptor as the mock writes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct TxSpec {
    pub addr: u64,
    pub len: u32,
    pub eop: bool,
    pub dtype: u32,
    pub om: u32,
    pub hlen: u32,
    pub msscof: u32,
    pub ti: bool,
    pub tci: u16,
}

/// The mock driver: its memory and its ring positions.
#[derive(Debug)]
pub struct MockNic {
    pub dev: Arc<Vmxnet3>,
    pub dma: Arc<DmaSpace>,
    pub irq: Arc<IrqLog>,
    pub cfg: MockConfig,
    pub shared: DmaBuffer,
    pub tx_ring: DmaBuffer,
    pub tx_comp: DmaBuffer,
    pub rx_rings: [DmaBuffer; 2],
    pub rx_comp: DmaBuffer,
    /// Rx buffers: 2 KiB each, ring r slot i at page (r·64 + i)/2.
    pub rx_bufs: DmaBuffer,
    pub tx_data: DmaBuffer,
    state: Mutex<State>,
}

fn pages(entries: u32) -> usize {
    (entries as usize * 16).div_ceil(4096).max(1)
}

/// Bytes per Rx buffer the mock posts by default.
pub const RX_BUF: u32 = 2048;

impl MockNic {
    /// Memory for `mc`, DriverShared written, nothing told to the device yet.
    pub fn new(cfg: Vmxnet3Config, mc: MockConfig) -> Self {
        let dma = Arc::new(DmaSpace::new());
        Self::on(Vmxnet3::new(dma.clone(), cfg), dma, mc)
    }

    /// As [`MockNic::new`] on an existing device.
    pub fn on(dev: Arc<Vmxnet3>, dma: Arc<DmaSpace>, mc: MockConfig) -> Self {
        let irq = Arc::new(IrqLog::default());
        dev.set_interrupt_sink(irq.clone());
        let n = Self {
            shared: DmaBuffer::new(&dma, 1),
            tx_ring: DmaBuffer::new(&dma, pages(mc.tx_size)),
            tx_comp: DmaBuffer::new(&dma, pages(mc.tx_comp_size)),
            rx_rings: [
                DmaBuffer::new(&dma, pages(mc.rx_sizes[0])),
                DmaBuffer::new(&dma, pages(mc.rx_sizes[1])),
            ],
            rx_comp: DmaBuffer::new(&dma, pages(mc.rx_comp_size)),
            rx_bufs: DmaBuffer::new(&dma, 64 * 2),
            tx_data: DmaBuffer::new(&dma, 16),
            dev,
            dma,
            irq,
            cfg: mc,
            state: Mutex::new(State {
                tx: Ring::new(),
                txc: Ring::new(),
                rx: [Ring::new(), Ring::new()],
                rxc: Ring::new(),
                tx_data: 0,
            }),
        };
        n.write_shared();
        n
    }

    /// Writes DriverShared and both queue descriptors from `self.cfg` (literal offsets).
    pub fn write_shared(&self) {
        let s = &self.shared;
        let c = &self.cfg;
        s.write(0, &[0; 4096]);
        s.write_u32(0, 0xBABE_FEE1);
        s.write_u32(8, 1); // driver version
        s.write_u32(12, 2 | (c.gos_type << 2)); // 64-bit, gosType
        s.write_u32(16, 1);
        s.write_u32(20, 1);
        s.write_u64(24, c.features);
        s.write_u64(40, s.bus() + TXQ_DESC as u64);
        s.write_u32(52, 512);
        s.write_u32(56, c.mtu);
        s.write(60, &c.max_rx_sg.to_le_bytes());
        s.write(62, &[1, 1]);
        s.write(80, &[c.auto_mask, c.num_intrs, c.event_intr]);
        s.write_u32(108, 1); // DISABLE_ALL until enable_interrupts
        s.write_u32(120, c.rx_mode);
        s.write(124, &0u16.to_le_bytes());
        s.write_u64(128, s.bus() + MF_TABLE as u64);
        let t = TXQ_DESC;
        s.write_u64(t + 16, self.tx_ring.bus());
        s.write_u64(t + 32, self.tx_comp.bus());
        s.write_u32(t + 56, c.tx_size);
        s.write_u32(t + 64, c.tx_comp_size);
        s.write(t + 72, &[c.tx_intr]);
        let r = RXQ_DESC;
        s.write_u64(r + 16, self.rx_rings[0].bus());
        s.write_u64(r + 24, self.rx_rings[1].bus());
        s.write_u64(r + 32, self.rx_comp.bus());
        s.write_u32(r + 56, c.rx_sizes[0]);
        s.write_u32(r + 60, c.rx_sizes[1]);
        s.write_u32(r + 64, c.rx_comp_size);
        s.write(r + 72, &[c.rx_intr]);
    }

    pub fn bar1_w(&self, off: u32, v: u32) {
        self.dev.bar1_write32(off, v);
    }
    pub fn bar1_r(&self, off: u32) -> u32 {
        self.dev.bar1_read32(off)
    }
    pub fn bar0_w(&self, off: u32, v: u32) {
        self.dev.bar0_write32(off, v);
    }

    /// VRRS = revision 1, UVRS = 1.
    pub fn select(&self) {
        self.bar1_w(0x00, 1);
        self.bar1_w(0x08, 1);
    }

    /// CMD write then read-back.
    pub fn cmd(&self, c: u32) -> u32 {
        self.bar1_w(0x20, c);
        self.bar1_r(0x20)
    }

    /// DSAL, DSAH, ACTIVATE_DEV; the read-back.
    pub fn activate(&self) -> u32 {
        self.bar1_w(0x10, self.shared.bus() as u32);
        self.bar1_w(0x18, (self.shared.bus() >> 32) as u32);
        self.cmd(ACTIVATE)
    }

    /// DISABLE_ALL cleared and every vector unmasked.
    pub fn enable_interrupts(&self) {
        self.shared.write_u32(108, 0);
        for i in 0..u32::from(self.cfg.num_intrs) {
            self.bar0_w(8 * i, 0);
        }
    }

    /// Selected, activated (asserting success), interrupts on, ring 0 full of 2 KiB head
    /// buffers and ring 1 of body buffers (minus one slot each, as Linux).
    pub fn up(cfg: Vmxnet3Config, mc: MockConfig) -> Self {
        let n = Self::new(cfg, mc);
        n.select();
        assert_eq!(
            n.activate(),
            0,
            "{:?}",
            n.dev.counters().last_activate_error
        );
        n.enable_interrupts();
        let [r0, r1] = n.cfg.rx_sizes;
        n.fill_rx(0, r0.saturating_sub(1), RX_BUF, 0);
        n.fill_rx(1, r1.saturating_sub(1), RX_BUF, 1);
        n
    }

    /// The default device and mock, up.
    pub fn default_up() -> Self {
        Self::up(Vmxnet3Config::default(), MockConfig::default())
    }

    /// Bus address of the buffer of ring `r` slot `i`.
    pub fn rx_buf_bus(&self, r: usize, i: u32) -> u64 {
        self.rx_bufs.bus() + ((r as u64 * 64 + u64::from(i % 64)) * u64::from(RX_BUF))
    }

    /// Gives `n` buffers of `len` bytes and type `btype` to ring `r` (gen written last by
    /// writing the whole descriptor with the generation bit in the final dword store).
    pub fn fill_rx(&self, r: usize, n: u32, len: u32, btype: u32) {
        self.fill_rx_with(r, n, |_, i| (self.rx_buf_bus(r, i), len, btype, 0));
    }

    /// As [`MockNic::fill_rx`] with every field chosen by `f(ring, index)`: (addr, len,
    /// btype, dtype).
    pub fn fill_rx_with(&self, r: usize, n: u32, f: impl Fn(usize, u32) -> (u64, u32, u32, u32)) {
        if n == 0 {
            return;
        }
        let size = self.cfg.rx_sizes[r];
        let mut st = self.state.lock().unwrap();
        for _ in 0..n {
            let ring = st.rx[r];
            let (addr, len, btype, dtype) = f(r, ring.next);
            let at = ring.next as usize * 16;
            self.rx_rings[r].write_u64(at, addr);
            self.rx_rings[r].write_u32(at + 12, 0);
            let d2 = (len & 0x3FFF) | (btype << 14) | (dtype << 15) | (ring.gen_bit << 31);
            self.rx_rings[r].write_u32(at + 8, d2);
            st.rx[r].advance(size);
        }
        let next = st.rx[r].next;
        drop(st);
        self.bar0_w(if r == 0 { 0x800 } else { 0xA00 }, next);
    }

    /// Copies `data` into the Tx data pages; its bus address.
    pub fn stage(&self, data: &[u8]) -> u64 {
        let mut st = self.state.lock().unwrap();
        if st.tx_data + data.len() > self.tx_data.len() {
            st.tx_data = 0;
        }
        let at = st.tx_data;
        st.tx_data += data.len().div_ceil(64) * 64;
        self.tx_data.write(at, data);
        self.tx_data.bus() + at as u64
    }

    /// Writes descriptors for `specs` (the first is the SOP, handed over last by flipping its
    /// generation), then rings TXPROD. Returns the EOP index.
    pub fn post(&self, specs: &[TxSpec]) -> u32 {
        let size = self.cfg.tx_size;
        let mut st = self.state.lock().unwrap();
        let sop_at = st.tx.next as usize * 16;
        let sop_gen = st.tx.gen_bit;
        let mut last = 0;
        for (k, s) in specs.iter().enumerate() {
            let at = st.tx.next as usize * 16;
            let g = if k == 0 { sop_gen ^ 1 } else { st.tx.gen_bit };
            let d2 = (s.len & 0x3FFF) | (g << 14) | (s.dtype << 16) | ((s.msscof & 0x3FFF) << 18);
            let d3 = (s.hlen & 0x3FF)
                | ((s.om & 3) << 10)
                | (u32::from(s.eop) << 12)
                | (1 << 13)
                | (u32::from(s.ti) << 15)
                | (u32::from(s.tci) << 16);
            self.tx_ring.write_u64(at, s.addr);
            self.tx_ring.write_u32(at + 8, d2);
            self.tx_ring.write_u32(at + 12, d3);
            last = st.tx.next;
            st.tx.advance(size);
        }
        // Hand the packet over: flip the SOP's generation.
        let d2 = self.tx_ring.read_u32(sop_at + 8) ^ (1 << 14);
        self.tx_ring.write_u32(sop_at + 8, d2);
        let next = st.tx.next;
        drop(st);
        self.bar0_w(0x600, next);
        last
    }

    /// Sends `frags` as one packet (one descriptor each).
    pub fn send(&self, frags: &[&[u8]]) -> u32 {
        let n = frags.len();
        let specs: Vec<TxSpec> = frags
            .iter()
            .enumerate()
            .map(|(k, f)| TxSpec {
                addr: self.stage(f),
                len: f.len() as u32,
                eop: k + 1 == n,
                ..TxSpec::default()
            })
            .collect();
        self.post(&specs)
    }

    /// Runs the device's queued Tx work and delivers interrupts.
    pub fn run(&self) {
        self.dev.run_until_idle();
    }

    /// Takes the frames the device sent (no fabric attached).
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.dev.with_core(|c| c.take_sent())
    }

    /// Reaps Tx completions: their `txdIdx` values.
    pub fn tx_completions(&self) -> Vec<u32> {
        let size = self.cfg.tx_comp_size;
        let mut st = self.state.lock().unwrap();
        let mut out = Vec::new();
        loop {
            let at = st.txc.next as usize * 16;
            let d3 = self.tx_comp.read_u32(at + 12);
            if d3 >> 31 != st.txc.gen_bit {
                break;
            }
            assert_eq!((d3 >> 24) & 0x7F, 0, "Tx completion type");
            out.push(self.tx_comp.read_u32(at) & 0xFFF);
            st.txc.advance(size);
        }
        out
    }

    /// Reaps Rx completions.
    pub fn rx_completions(&self) -> Vec<RxComp> {
        let size = self.cfg.rx_comp_size;
        let mut st = self.state.lock().unwrap();
        let mut out = Vec::new();
        loop {
            let at = st.rxc.next as usize * 16;
            let d3 = self.rx_comp.read_u32(at + 12);
            if d3 >> 31 != st.rxc.gen_bit {
                break;
            }
            let d0 = self.rx_comp.read_u32(at);
            let d2 = self.rx_comp.read_u32(at + 8);
            out.push(RxComp {
                idx: d0 & 0xFFF,
                rqid: (d0 >> 16) & 0x3FF,
                len: d2 & 0x3FFF,
                sop: d0 & (1 << 15) != 0,
                eop: d0 & (1 << 14) != 0,
                err: d2 & (1 << 14) != 0,
                ts: d2 & (1 << 15) != 0,
                tci: (d2 >> 16) as u16,
                kind: (d3 >> 24) & 0x7F,
                cnc: d0 & (1 << 30) != 0,
            });
            st.rxc.advance(size);
        }
        out
    }

    /// The bytes of a received frame, from its completions (ring from `rqid`).
    pub fn rx_frame(&self, comps: &[RxComp]) -> Vec<u8> {
        let mut v = Vec::new();
        for c in comps {
            let r = if c.rqid >= 1 { 1 } else { 0 };
            let mut b = vec![0u8; c.len as usize];
            self.dma.read(self.rx_buf_bus(r, c.idx), &mut b).unwrap();
            v.extend_from_slice(&b);
        }
        v
    }

    /// DriverShared `ecr`.
    pub fn ecr(&self) -> u32 {
        self.shared.read_u32(696)
    }

    /// The queue descriptor status (stopped, error) of the Tx (false) or Rx (true) queue,
    /// after GET_QUEUE_STATUS.
    pub fn queue_status(&self, rx: bool) -> (u8, u32) {
        assert_eq!(self.cmd(GET_QUEUE_STATUS), 0);
        let base = if rx { RXQ_DESC } else { TXQ_DESC };
        (
            self.shared.read_vec(base + 80, 1)[0],
            self.shared.read_u32(base + 84),
        )
    }

    /// The ten UPT1 counters of the Tx (false) or Rx (true) queue, after GET_STATS.
    pub fn stats(&self, rx: bool) -> [u64; 10] {
        assert_eq!(self.cmd(GET_STATS), 0);
        let base = if rx { RXQ_DESC } else { TXQ_DESC } + 88;
        let mut s = [0u64; 10];
        for (i, x) in s.iter_mut().enumerate() {
            *x = self.shared.read_u64(base + 8 * i);
        }
        s
    }

    /// Writes the multicast table and its length (no command).
    pub fn set_multicast(&self, macs: &[[u8; 6]]) {
        let mut b = Vec::new();
        for m in macs {
            b.extend_from_slice(m);
        }
        self.shared.write(MF_TABLE, &b);
        self.shared.write(124, &(b.len() as u16).to_le_bytes());
    }
}

/// An Ethernet frame: `dst`, `src`, EtherType, then `len - 14` bytes of payload.
pub fn frame(dst: [u8; 6], src: [u8; 6], ethertype: u16, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    // CAST: a pattern byte.
    f.extend((14..len).map(|i| (i * 7 + 3) as u8));
    f
}
