//! A tiny hand-written fake of the device's BAR1 and DSR handling for unit tests (not the
//! device model): it logs register accesses, loads the DSR on DSRHIGH and fills caps,
//! answers commands from the command slot as each test scripts, and can post EQEs and CQNEs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use crate::os::dma::test_alloc::TestDma;
use crate::os::host::{HostDevice, HostPlatform};
use crate::os::{DmaAllocator, RegisterIo};
use crate::pvrdma::cmd::{REQ_MAX, RESP_BIT, RESP_MAX};
use crate::pvrdma::dsr::Caps;

/// One BAR1 access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    R(u32, u32),
    W(u32, u32),
}

/// How the next command is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Respond,
    /// ERR = value after REQUEST; the response and vector 0 still follow (M9).
    RejectErr(u32),
    HdrErr(u8),
    BadAck,
    /// No response, no interrupt.
    Silent,
    /// Response held until [`FakeDevice::release`].
    Defer,
}

pub struct FakeState {
    pub version: u32,
    pub caps: Caps,
    pub log: Vec<Access>,
    pub activate_err: u32,
    pub modes: VecDeque<Mode>,
    pub requests: Vec<[u8; REQ_MAX]>,
    /// Bytes 16.. of every response.
    pub resp_body: [u8; RESP_MAX - 16],
    pub dsr_low: u32,
    pub dsr: u64,
    pub err: u32,
    pub deferred: VecDeque<[u8; RESP_MAX]>,
    pub async_tail: u32,
    pub cq_tail: u32,
}

pub type IrqHook = Arc<dyn Fn(u32) + Send + Sync>;

pub struct FakeDevice {
    pub dma: Arc<TestDma>,
    pub st: Mutex<FakeState>,
    pub irq: Mutex<Option<IrqHook>>,
}

impl FakeDevice {
    pub fn new(version: u32) -> Arc<Self> {
        Arc::new(FakeDevice {
            dma: Arc::new(TestDma::raw()),
            st: Mutex::new(FakeState {
                version,
                caps: Caps::model_defaults(),
                log: Vec::new(),
                activate_err: 0,
                modes: VecDeque::new(),
                requests: Vec::new(),
                resp_body: [0; RESP_MAX - 16],
                dsr_low: 0,
                dsr: 0,
                err: 0,
                deferred: VecDeque::new(),
                async_tail: 0,
                cq_tail: 0,
            }),
            irq: Mutex::new(None),
        })
    }

    /// A host platform over this BAR1 with `dma` and the UAR at `uar_pfn`, on two
    /// processors; the device's interrupts are raised on it.
    pub fn platform(
        self: &Arc<Self>,
        dma: Arc<dyn DmaAllocator>,
        uar_pfn: u64,
    ) -> Arc<HostPlatform> {
        let platform = HostPlatform::new(
            HostDevice {
                bar1: self.clone(),
                dma,
                doorbell: None,
                uar_pfn,
                pump: None,
            },
            2,
        );
        let w = Arc::downgrade(&platform);
        *self.irq.lock().unwrap() = Some(Arc::new(move |v| {
            if let Some(p) = w.upgrade() {
                p.raise_interrupt(v);
            }
        }));
        platform
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            let p = self
                .dma
                .cpu_of(addr + i as u64)
                .expect("device read of unmapped address");
            // SAFETY: `p` points into a live TestDma allocation.
            *o = unsafe { core::ptr::read_volatile(p) };
        }
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        for (i, d) in data.iter().enumerate() {
            let p = self
                .dma
                .cpu_of(addr + i as u64)
                .expect("device write of unmapped address");
            // SAFETY: `p` points into a live TestDma allocation.
            unsafe { core::ptr::write_volatile(p, *d) };
        }
    }

    /// Publishes a shared ring index with one atomic 32-bit store, as a device does. Byte-wise
    /// stores let the driver read a torn index (e.g. 0x00FF -> 0x0100 seen as 0x01FF), which it
    /// rightly treats as a corrupt ring (M14) — a flaky test, not a driver bug.
    pub fn write_index(&self, addr: u64, value: u32) {
        let p = self
            .dma
            .cpu_of(addr)
            .expect("device write of unmapped address");
        assert!(
            (p as usize).is_multiple_of(4),
            "ring index not 4-byte aligned"
        );
        // SAFETY: `p` points into a live TestDma allocation, is 4-byte aligned (checked) and
        // the driver accesses this word only atomically.
        let cell = unsafe { core::sync::atomic::AtomicU32::from_ptr(p.cast::<u32>()) };
        cell.store(value, core::sync::atomic::Ordering::Release);
    }

    pub fn read_u64(&self, addr: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(addr, &mut b);
        u64::from_le_bytes(b)
    }

    pub fn read_u32(&self, addr: u64) -> u32 {
        let mut b = [0u8; 4];
        self.read(addr, &mut b);
        u32::from_le_bytes(b)
    }

    fn raise(&self, vector: u32) {
        let h = self.irq.lock().unwrap().clone();
        if let Some(h) = h {
            h(vector);
        }
    }

    /// Writes the oldest deferred response and raises vector 0.
    pub fn release(&self) {
        let (resp, dsr) = {
            let mut st = self.st.lock().unwrap();
            (st.deferred.pop_front().expect("nothing deferred"), st.dsr)
        };
        let slot = self.read_u64(dsr + 24);
        self.write(slot, &resp);
        self.raise(0);
    }

    fn request(&self) {
        let (dsr, mode, body) = {
            let mut st = self.st.lock().unwrap();
            let m = st.modes.pop_front().unwrap_or(Mode::Respond);
            (st.dsr, m, st.resp_body)
        };
        let slot = self.read_u64(dsr + 16);
        let mut req = [0u8; REQ_MAX];
        self.read(slot, &mut req);
        let code = u32::from_le_bytes(req[8..12].try_into().unwrap());
        let mut resp = [0u8; RESP_MAX];
        resp[0..8].copy_from_slice(&req[0..8]);
        resp[8..12].copy_from_slice(&(code | RESP_BIT).to_le_bytes());
        resp[16..].copy_from_slice(&body);
        let mut st = self.st.lock().unwrap();
        st.requests.push(req);
        st.err = 0;
        match mode {
            Mode::Respond => {}
            Mode::RejectErr(e) => st.err = e,
            Mode::HdrErr(e) => resp[12] = e,
            Mode::BadAck => resp[8..12].copy_from_slice(&code.to_le_bytes()),
            Mode::Silent => return,
            Mode::Defer => {
                st.deferred.push_back(resp);
                return;
            }
        }
        drop(st);
        let rslot = self.read_u64(dsr + 24);
        self.write(rslot, &resp);
        self.raise(0);
    }

    fn ring_page(&self, ring_off: u64, page: u64) -> u64 {
        let dsr = self.st.lock().unwrap().dsr;
        let pdir = self.read_u64(dsr + ring_off + 8);
        let table = self.read_u64(pdir);
        self.read_u64(table + page * 8)
    }

    /// Posts an EQE on the async ring (N = 1536) and raises vector 1.
    pub fn post_eqe(&self, kind: u32, info: u32) {
        let tail = self.st.lock().unwrap().async_tail;
        let slot = u64::from(tail & (1536 - 1));
        let page = self.ring_page(32, 1 + slot * 8 / 4096);
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&kind.to_le_bytes());
        e[4..].copy_from_slice(&info.to_le_bytes());
        self.write(page + (slot * 8) % 4096, &e);
        let next = (tail + 1) & (2 * 1536 - 1);
        self.st.lock().unwrap().async_tail = next;
        let p0 = self.ring_page(32, 0);
        self.write_index(p0 + 8, next);
        self.raise(1);
    }

    /// Posts a CQNE (N = 3072) and raises vector 2.
    pub fn post_cqne(&self, cq: u32) {
        let tail = self.st.lock().unwrap().cq_tail;
        let slot = u64::from(tail & (3072 - 1));
        let page = self.ring_page(48, 1 + slot * 4 / 4096);
        self.write(page + (slot * 4) % 4096, &cq.to_le_bytes());
        let next = (tail + 1) & (2 * 3072 - 1);
        self.st.lock().unwrap().cq_tail = next;
        let p0 = self.ring_page(48, 0);
        self.write_index(p0 + 8, next);
        self.raise(2);
    }

    /// Overwrites the async ring's prod_tail (corruption tests) and raises vector 1.
    pub fn corrupt_async_tail(&self, v: u32) {
        let p0 = self.ring_page(32, 0);
        self.write_index(p0 + 8, v);
        self.raise(1);
    }

    pub fn writes(&self) -> Vec<(u32, u32)> {
        self.st
            .lock()
            .unwrap()
            .log
            .iter()
            .filter_map(|a| match *a {
                Access::W(o, v) => Some((o, v)),
                Access::R(..) => None,
            })
            .collect()
    }
}

impl RegisterIo for FakeDevice {
    fn read32(&self, off: u32) -> u32 {
        let mut st = self.st.lock().unwrap();
        let v = match off {
            0x00 => st.version,
            0x14 => st.err,
            _ => 0,
        };
        st.log.push(Access::R(off, v));
        v
    }

    fn write32(&self, off: u32, val: u32) {
        let mut st = self.st.lock().unwrap();
        st.log.push(Access::W(off, val));
        match off {
            0x04 => st.dsr_low = val,
            0x08 => {
                st.dsr = (u64::from(val) << 32) | u64::from(st.dsr_low);
                let (dsr, caps) = (st.dsr, st.caps);
                drop(st);
                let mut b = [0u8; 208];
                caps.write(&mut b);
                self.write(dsr + 72, &b);
            }
            0x0C => match val {
                0 => st.err = if st.dsr != 0 { st.activate_err } else { 1 },
                2 => {
                    st.dsr = 0;
                    st.err = 0;
                }
                _ => st.err = 0,
            },
            0x10 => {
                drop(st);
                self.request();
            }
            _ => {}
        }
    }
}
