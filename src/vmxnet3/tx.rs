//! The Tx queue (vmxnet3.md §3.7; model rule V8): a packet from a scatter-gather list into
//! Tx descriptors, handed over by flipping the SOP's generation bit last, the doorbell batched
//! by `txThreshold`; completions matched to the oldest outstanding packet.
//!
//! Nothing is allocated per packet: each EOP descriptor index has a preallocated record (the
//! caller's token, where the packet starts, how many descriptors it took). A completion must
//! name the EOP of the oldest outstanding packet (one completion per packet, as Linux's
//! `vmxnet3_unmap_pkt` requires); anything else is a device protocol violation and the queue
//! stops taking packets until a reset.
#![deny(unsafe_code)]

use crate::os::alloc::KVec;
use crate::os::sync::{from_device_barrier, to_device_barrier};
use crate::os::{DmaAllocator, DmaBuffer, RegisterIo, SharedDma, SpinLock};

use super::Vmxnet3Error;
use super::batch::Batch;
use super::desc::{self, DESC_SIZE, MAX_TX_BUF, MAX_TXD_PER_PKT, TxComp, write_desc};
use super::regs::Reg;
use super::shared::Shared;
use alloc::sync::Arc;

/// One piece of a frame: a device (logical) address and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Logical address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
}

/// Why a frame was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No room in the Tx ring now; completions will make some.
    Full,
    /// More than 16 descriptors (16 KiB each) would be needed: linearize the frame first.
    TooManyFragments,
    /// Shorter than an Ethernet header or longer than the MTU allows.
    BadLength,
    /// The queue is not running (bring-up, reset, halt, or a device error).
    Stopped,
}

/// Per EOP descriptor: the packet ending there.
#[derive(Clone, Copy, Debug, Default)]
struct TxInfo {
    token: u64,
    sop: u32,
    ndesc: u32,
    valid: bool,
}

struct TxState {
    /// Next descriptor to fill and the ring's generation there.
    fill: u32,
    generation: u32,
    /// SOP index of the oldest outstanding packet.
    oldest: u32,
    /// Descriptors outstanding.
    used: u32,
    /// Next completion to look at, and its generation.
    comp_next: u32,
    comp_gen: u32,
    /// Packets queued since the last doorbell, and the value last written to
    /// `txNumDeferred` (written only when it changes).
    deferred: u32,
    shared_deferred: u32,
    /// Frames and bytes queued (counted under the lock the post holds anyway).
    frames: u64,
    bytes: u64,
    info: KVec<TxInfo>,
    open: bool,
    broken: bool,
}

/// How a reap ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reaped {
    /// Nothing more to take now.
    Done,
    /// The batch filled: call again.
    More,
    /// A completion failed validation: the queue is broken.
    Corrupt,
}

pub(super) struct TxQueue {
    ring: SharedDma,
    comp: SharedDma,
    size: u32,
    max_frame: u32,
    state: SpinLock<TxState>,
}

impl TxQueue {
    /// A ring of `size` descriptors (and as many completions) for frames of at most
    /// `max_frame` bytes. PASSIVE_LEVEL.
    pub(super) fn new(
        dma: &Arc<dyn DmaAllocator>,
        size: u32,
        max_frame: u32,
    ) -> Result<Self, Vmxnet3Error> {
        let bytes = size as usize * DESC_SIZE;
        let ring = DmaBuffer::alloc(dma, bytes)?.share();
        let comp = DmaBuffer::alloc(dma, bytes)?.share();
        let mut info = KVec::try_with_capacity(size as usize)?;
        for _ in 0..size {
            let _ = info.push_within_capacity(TxInfo::default());
        }
        Ok(TxQueue {
            ring,
            comp,
            size,
            max_frame,
            state: SpinLock::new(TxState {
                fill: 0,
                generation: 1,
                oldest: 0,
                used: 0,
                comp_next: 0,
                comp_gen: 1,
                deferred: 0,
                shared_deferred: 0,
                frames: 0,
                bytes: 0,
                info,
                open: false,
                broken: false,
            }),
        })
    }

    /// Logical addresses of the ring and the completion ring.
    pub(super) fn addrs(&self) -> (u64, u64) {
        (self.ring.logical(), self.comp.logical())
    }

    /// Accepts sends from now on.
    pub(super) fn open(&self) {
        self.state.lock().open = true;
    }

    /// Refuses sends from now on.
    pub(super) fn close(&self) {
        self.state.lock().open = false;
    }

    /// Packets outstanding (sent to the device, not completed).
    pub(super) fn outstanding(&self) -> u32 {
        self.state.lock().info.iter().filter(|i| i.valid).count() as u32
    }

    /// Queues one frame (`sg`, `token`); rings the doorbell when `txThreshold` packets are
    /// deferred or `more` is false. Any IRQL ≤ DISPATCH_LEVEL.
    pub(super) fn send(
        &self,
        shared: Shared<'_>,
        bar0: &dyn RegisterIo,
        txprod: Reg,
        sg: &[Sge],
        token: u64,
        more: bool,
    ) -> Result<(), SendError> {
        // Descriptors and bytes, checked before anything is written.
        let mut need = 0u32;
        let mut total = 0u64;
        for s in sg {
            need = need.saturating_add(s.len.div_ceil(MAX_TX_BUF));
            total += u64::from(s.len);
        }
        if total < 14 || total > u64::from(self.max_frame) {
            return Err(SendError::BadLength);
        }
        if need > MAX_TXD_PER_PKT {
            return Err(SendError::TooManyFragments);
        }
        let mut st = self.state.lock();
        if !st.open || st.broken {
            return Err(SendError::Stopped);
        }
        // One descriptor stays free, as Linux keeps it.
        if st.used + need > self.size - 1 {
            return Err(SendError::Full);
        }
        let ring = self.ring.view();
        let sop = st.fill;
        let mut sop_d2 = 0;
        let mut eop = sop;
        let mut left = need;
        for s in sg {
            let mut addr = s.addr;
            let mut rest = s.len;
            while rest > 0 {
                let len = rest.min(MAX_TX_BUF);
                left -= 1;
                let i = st.fill;
                let d2 = (len & desc::tx::LEN_MASK) | (st.generation * desc::tx::GEN);
                // The SOP goes out with the inverted generation: not the device's until it
                // flips below, after the rest of the packet.
                let d2 = if i == sop {
                    sop_d2 = d2;
                    d2 ^ desc::tx::GEN
                } else {
                    d2
                };
                let d3 = if left == 0 {
                    desc::tx::EOP | desc::tx::CQ
                } else {
                    0
                };
                write_desc(&ring, i, addr, u64::from(d2) | (u64::from(d3) << 32));
                eop = i;
                addr += u64::from(len);
                rest -= len;
                st.fill += 1;
                if st.fill == self.size {
                    st.fill = 0;
                    st.generation ^= 1;
                }
            }
        }
        if let Some(i) = st.info.get_mut(eop as usize) {
            *i = TxInfo {
                token,
                sop,
                ndesc: need,
                valid: true,
            };
        }
        st.used += need;
        st.frames += 1;
        st.bytes += total;
        // Every descriptor of the packet before the SOP's generation flips (Linux dma_wmb).
        to_device_barrier();
        ring.write_u32(sop as usize * DESC_SIZE + 8, sop_d2);
        st.deferred += 1;
        // txThreshold is the device's; 0 or an absurd value must not stall the queue.
        if !more || st.deferred >= shared.tx_threshold().clamp(1, 64) {
            st.deferred = 0;
            if st.shared_deferred != 0 {
                st.shared_deferred = 0;
                shared.set_tx_deferred(0);
            }
            to_device_barrier();
            txprod.write(bar0, st.fill);
        } else {
            st.shared_deferred = st.deferred;
            shared.set_tx_deferred(st.deferred);
        }
        Ok(())
    }

    /// Rings the doorbell if packets are deferred (the end of a send batch).
    pub(super) fn flush(&self, shared: Shared<'_>, bar0: &dyn RegisterIo, txprod: Reg) {
        let mut st = self.state.lock();
        if st.deferred != 0 && st.open {
            st.deferred = 0;
            st.shared_deferred = 0;
            shared.set_tx_deferred(0);
            to_device_barrier();
            txprod.write(bar0, st.fill);
        }
    }

    /// Takes completed packets' tokens into `out` until it is full; returns how it ended.
    pub(super) fn reap<const N: usize>(&self, out: &mut Batch<u64, N>) -> Reaped {
        let mut st = self.state.lock();
        if st.broken || !st.open {
            return Reaped::Done;
        }
        let comp = self.comp.view();
        while !out.is_full() {
            let off = st.comp_next as usize * DESC_SIZE;
            let d3 = comp.read_u32(off + 12);
            if (d3 >> 31) != st.comp_gen {
                return Reaped::Done;
            }
            // The completion's other fields after its generation (Linux dma_rmb).
            from_device_barrier();
            let Ok(c) = TxComp::parse(comp.read_u32(off), d3) else {
                st.broken = true;
                return Reaped::Corrupt;
            };
            let oldest = st.oldest;
            let rec = st.info.get(c.eop as usize).copied();
            let Some(rec) = rec.filter(|r| r.valid && r.sop == oldest) else {
                st.broken = true;
                return Reaped::Corrupt;
            };
            if let Some(i) = st.info.get_mut(c.eop as usize) {
                i.valid = false;
            }
            st.oldest = if c.eop + 1 == self.size { 0 } else { c.eop + 1 };
            st.used -= rec.ndesc;
            st.comp_next += 1;
            if st.comp_next == self.size {
                st.comp_next = 0;
                st.comp_gen ^= 1;
            }
            out.push(rec.token);
        }
        Reaped::More
    }

    /// Frames and bytes queued so far.
    pub(super) fn counts(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.frames, st.bytes)
    }

    /// Whether a completion is waiting (the DPC's re-check after unmasking).
    pub(super) fn pending(&self) -> bool {
        let st = self.state.lock();
        let off = st.comp_next as usize * DESC_SIZE;
        st.open && !st.broken && (self.comp.view().read_u32(off + 12) >> 31) == st.comp_gen
    }

    /// Takes up to `out.len()` outstanding packets' tokens, oldest first, forgetting them (a
    /// reset or halt aborts them). The queue must be closed and the device reset.
    pub(super) fn take_outstanding(&self, out: &mut [u64]) -> usize {
        let mut st = self.state.lock();
        let mut n = 0;
        let mut i = st.oldest;
        for _ in 0..self.size {
            if n == out.len() {
                break;
            }
            let rec = st.info.get(i as usize).copied();
            if let Some(r) = rec.filter(|r| r.valid)
                && let Some(o) = out.get_mut(n)
            {
                *o = r.token;
                n += 1;
                if let Some(x) = st.info.get_mut(i as usize) {
                    x.valid = false;
                }
            }
            i = (i + 1) % self.size;
        }
        n
    }

    /// Back to the state of bring-up: rings zeroed, indices 0, generation 1, nothing
    /// outstanding. Only with the device reset and every token taken.
    pub(super) fn reinit(&self) {
        let mut st = self.state.lock();
        self.ring.view().zero();
        self.comp.view().zero();
        st.fill = 0;
        st.generation = 1;
        st.oldest = 0;
        st.used = 0;
        st.comp_next = 0;
        st.comp_gen = 1;
        st.deferred = 0;
        st.shared_deferred = 0;
        st.broken = false;
        for i in st.info.iter_mut() {
            *i = TxInfo::default();
        }
    }
}
