//! The Rx queue (vmxnet3.md §3.7; model rule V9): a pool of preallocated 2 KiB receive
//! buffers posted to ring 0 as head buffers, one frame per buffer; completions validated and
//! handed up in batches; buffers come back immediately or, when the consumer keeps them (an
//! NDIS receive indication), through [`super::Vmxnet3::return_rx`].
//!
//! Nothing is allocated per frame: the pool, the per-descriptor buffer table, the free list
//! and the per-buffer owner table are allocated at bring-up. Every device-written value is
//! checked before use: the completion type, `rqID` (queue 0, ring 0 only: ring 1 is absent),
//! the descriptor index (one this driver posted and the device has not returned yet; skipped
//! descriptors before it come back unused, as Linux's "device may skip"), the length (at most
//! the buffer). A failure breaks the queue until a reset; nothing is read or written outside
//! the driver's own buffers.
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::cell::Cell;

use crate::os::alloc::KVec;
use crate::os::sync::{from_device_barrier, to_device_barrier};
use crate::os::{DmaAllocator, DmaBuffer, DmaView, SharedDma, SpinLock};

use super::Vmxnet3Error;
use super::batch::Batch;
use super::desc::{self, DESC_SIZE, RxComp, read_desc, write_word};

/// Bytes of one receive buffer: a whole untagged or tagged frame of MTU ≤ 2030.
pub const RX_BUF: u32 = 2048;
/// Buffers per DMA chunk (16 pages): the pool is allocated in 64 KiB pieces.
const PER_CHUNK: u32 = 32;
/// Marks a descriptor without a buffer.
const NONE: u32 = u32::MAX;

/// The index after `i` in a ring of `size` (`i < size`).
#[inline]
fn next(i: u32, size: u32) -> u32 {
    if i + 1 == size { 0 } else { i + 1 }
}

/// A received frame: which buffer holds it, and how many bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxFrame {
    /// Buffer id (stable for the adapter's life).
    pub buffer: u32,
    /// Frame length.
    pub len: u32,
}

/// Who holds a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Free,
    Posted,
    Client,
}

/// Frames dropped here, by reason (counted by the caller).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Drops {
    /// The device flagged an error.
    pub error: u32,
    /// Shorter than an Ethernet header.
    pub runt: u32,
    /// Spread over several buffers (not supported: MTU ≤ 2030 fits one).
    pub multi: u32,
}

struct RxState {
    fill: u32,
    generation: u32,
    /// Oldest posted descriptor.
    oldest: u32,
    posted: u32,
    comp_next: u32,
    comp_gen: u32,
    /// Buffer of each descriptor.
    slot: KVec<u32>,
    free: KVec<u32>,
    owner: KVec<Owner>,
    /// Buffers with the consumer.
    loaned: u32,
    /// Frames and bytes handed up (counted under the lock the reap holds anyway).
    frames: u64,
    bytes: u64,
    /// Inside a frame spread over several buffers, dropping its pieces.
    dropping: bool,
    open: bool,
    broken: bool,
}

/// How a reap ended.
pub(super) use super::tx::Reaped;

pub(super) struct RxQueue {
    ring: SharedDma,
    comp: SharedDma,
    chunks: KVec<SharedDma>,
    /// Logical address of each buffer (the refill's one lookup).
    addrs: KVec<u64>,
    size: u32,
    count: u32,
    state: SpinLock<RxState>,
}

impl RxQueue {
    /// Ring 0 of `size` descriptors, a completion ring as large, and `count` buffers.
    /// PASSIVE_LEVEL.
    pub(super) fn new(
        dma: &Arc<dyn DmaAllocator>,
        size: u32,
        count: u32,
    ) -> Result<Self, Vmxnet3Error> {
        let bytes = size as usize * DESC_SIZE;
        let ring = DmaBuffer::alloc(dma, bytes)?.share();
        let comp = DmaBuffer::alloc(dma, bytes)?.share();
        let nchunks = count.div_ceil(PER_CHUNK);
        let mut chunks = KVec::try_with_capacity(nchunks as usize)?;
        for _ in 0..nchunks {
            let c = DmaBuffer::alloc(dma, (PER_CHUNK * RX_BUF) as usize)?.share();
            let _ = chunks.push_within_capacity(c);
        }
        let mut addrs = KVec::try_with_capacity(count as usize)?;
        for id in 0..count {
            let a = chunks
                .get((id / PER_CHUNK) as usize)
                .map_or(0, |c| c.logical() + u64::from((id % PER_CHUNK) * RX_BUF));
            let _ = addrs.push_within_capacity(a);
        }
        let mut slot = KVec::try_with_capacity(size as usize)?;
        for _ in 0..size {
            let _ = slot.push_within_capacity(NONE);
        }
        let mut free = KVec::try_with_capacity(count as usize)?;
        let mut owner = KVec::try_with_capacity(count as usize)?;
        // Popped from the end: buffer 0 is posted first.
        for id in (0..count).rev() {
            let _ = free.push_within_capacity(id);
            let _ = owner.push_within_capacity(Owner::Free);
        }
        Ok(RxQueue {
            ring,
            comp,
            chunks,
            addrs,
            size,
            count,
            state: SpinLock::new(RxState {
                fill: 0,
                generation: 1,
                oldest: 0,
                posted: 0,
                comp_next: 0,
                comp_gen: 1,
                slot,
                free,
                owner,
                loaned: 0,
                frames: 0,
                bytes: 0,
                dropping: false,
                open: false,
                broken: false,
            }),
        })
    }

    /// Logical addresses of ring 0 and the completion ring.
    pub(super) fn addrs(&self) -> (u64, u64) {
        (self.ring.logical(), self.comp.logical())
    }

    /// Where buffer `id` is (its chunk and offset), if it exists.
    fn locate(&self, id: u32) -> Option<(&SharedDma, usize)> {
        if id >= self.count {
            return None;
        }
        let c = self.chunks.get((id / PER_CHUNK) as usize)?;
        Some((c, ((id % PER_CHUNK) * RX_BUF) as usize))
    }

    /// The first `len` bytes of buffer `id` (at most the buffer), for the consumer to read.
    pub(super) fn view(&self, id: u32, len: u32) -> Option<DmaView<'_>> {
        let (c, off) = self.locate(id)?;
        c.view().sub(off, len.min(RX_BUF) as usize)
    }

    /// Logical address of buffer `id`.
    pub(super) fn buffer_logical(&self, id: u32) -> Option<u64> {
        self.addrs.get(id as usize).copied()
    }

    /// Posts free buffers while the ring has room (one descriptor stays free, as Linux keeps
    /// it); returns the ring's fill index.
    fn refill(&self, st: &mut RxState) -> u32 {
        let ring = self.ring.view();
        while st.posted < self.size - 1 {
            let Some(id) = st.free.pop() else {
                break;
            };
            let Some(addr) = self.buffer_logical(id) else {
                continue;
            };
            let off = st.fill as usize * DESC_SIZE;
            write_word(&ring, off, addr);
            // The address before the generation that hands the descriptor over.
            to_device_barrier();
            write_word(
                &ring,
                off + 8,
                u64::from(RX_BUF | (st.generation * desc::rx::GEN)),
            );
            if let Some(s) = st.slot.get_mut(st.fill as usize) {
                *s = id;
            }
            if let Some(o) = st.owner.get_mut(id as usize) {
                *o = Owner::Posted;
            }
            st.posted += 1;
            st.fill += 1;
            if st.fill == self.size {
                st.fill = 0;
                st.generation ^= 1;
            }
        }
        st.fill
    }

    /// Fills the ring and opens the queue; returns the fill index (for RXPROD).
    pub(super) fn start(&self) -> u32 {
        let mut st = self.state.lock();
        st.open = true;
        self.refill(&mut st)
    }

    /// Stops taking completions.
    pub(super) fn close(&self) {
        self.state.lock().open = false;
    }

    /// Buffers with the consumer.
    pub(super) fn loaned(&self) -> u32 {
        self.state.lock().loaned
    }

    /// Takes completed frames into `out` until it is full; buffers of dropped frames go back
    /// to the ring. Returns why it stopped, what it dropped and, if it reposted buffers, the
    /// new fill index.
    pub(super) fn reap<const N: usize>(
        &self,
        out: &mut Batch<RxFrame, N>,
    ) -> (Reaped, Drops, Option<u32>) {
        let mut st = self.state.lock();
        let mut drops = Drops::default();
        if st.broken || !st.open {
            return (Reaped::Done, drops, None);
        }
        let comp = self.comp.view();
        let mut end = Reaped::More;
        while !out.is_full() {
            let off = st.comp_next as usize * DESC_SIZE;
            let d3 = comp.read_u32(off + 12);
            if (d3 >> 31) != st.comp_gen {
                end = Reaped::Done;
                break;
            }
            // The completion's other fields after its generation (Linux dma_rmb).
            from_device_barrier();
            let mut d = read_desc(&comp, st.comp_next);
            d[3] = d3;
            let Some((id, c)) = self.take(&mut st, d) else {
                st.broken = true;
                end = Reaped::Corrupt;
                break;
            };
            st.comp_next += 1;
            if st.comp_next == self.size {
                st.comp_next = 0;
                st.comp_gen ^= 1;
            }
            let keep = if st.dropping {
                st.dropping = !c.eop;
                false
            } else if !c.eop {
                st.dropping = true;
                drops.multi += 1;
                false
            } else if c.err {
                drops.error += 1;
                false
            } else if c.len < 14 {
                drops.runt += 1;
                false
            } else {
                true
            };
            if keep {
                out.push(RxFrame {
                    buffer: id,
                    len: c.len,
                });
                if let Some(w) = st.owner.get_mut(id as usize) {
                    *w = Owner::Client;
                }
                st.loaned += 1;
                st.frames += 1;
                st.bytes += u64::from(c.len);
            } else {
                Self::free(&mut st, id);
            }
        }
        let fill =
            (drops != Drops::default() && end != Reaped::Corrupt).then(|| self.refill(&mut st));
        (end, drops, fill)
    }

    /// Frames and bytes handed up so far.
    pub(super) fn counts(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.frames, st.bytes)
    }

    /// Validates completion `d` against what was posted and takes its buffer out of the ring
    /// (with any descriptors the device skipped before it, which go back to the free list).
    fn take(&self, st: &mut RxState, d: [u32; 4]) -> Option<(u32, RxComp)> {
        let c = RxComp::parse(d).ok()?;
        if c.rqid != 0 || c.idx >= self.size || c.len > RX_BUF {
            return None;
        }
        if st.dropping == c.sop {
            // A piece without a start, or a start inside another frame.
            return None;
        }
        // Descriptors from the oldest posted one to this one (no division on the data path).
        let dist = if c.idx >= st.oldest {
            c.idx - st.oldest
        } else {
            c.idx + self.size - st.oldest
        };
        if dist >= st.posted {
            return None;
        }
        for _ in 0..dist {
            let i = st.oldest as usize;
            let skipped = st.slot.get(i).copied().unwrap_or(NONE);
            if let Some(s) = st.slot.get_mut(i) {
                *s = NONE;
            }
            Self::free(st, skipped);
            st.oldest = next(st.oldest, self.size);
        }
        let id = st.slot.get(c.idx as usize).copied().unwrap_or(NONE);
        if let Some(s) = st.slot.get_mut(c.idx as usize) {
            *s = NONE;
        }
        st.posted -= dist + 1;
        st.oldest = next(c.idx, self.size);
        (id != NONE).then_some((id, c))
    }

    fn free(st: &mut RxState, id: u32) {
        if let Some(o) = st.owner.get_mut(id as usize) {
            *o = Owner::Free;
            let _ = st.free.push_within_capacity(id);
        }
    }

    /// A batch handed up comes back, but for the frames whose bit is set in `kept`: to the
    /// ring at once. Returns the fill index.
    pub(super) fn give_back_batch(&self, frames: &[RxFrame], kept: u64) -> u32 {
        let mut st = self.state.lock();
        for (i, f) in frames.iter().enumerate() {
            if i >= 64 || kept & (1 << i) == 0 {
                Self::give(&mut st, f.buffer);
            }
        }
        self.refill_if_open(&mut st)
    }

    /// Buffers `ids` the consumer kept come back. Returns the fill index, and how many ids
    /// were not the consumer's (ignored).
    pub(super) fn give_back(&self, ids: &[u32]) -> (u32, u32) {
        let mut st = self.state.lock();
        let mut bad = 0;
        for &id in ids {
            if !Self::give(&mut st, id) {
                bad += 1;
            }
        }
        (self.refill_if_open(&mut st), bad)
    }

    /// A buffer the consumer held goes back to the free list; false if it did not hold it.
    fn give(st: &mut RxState, id: u32) -> bool {
        if st.owner.get(id as usize) != Some(&Owner::Client) {
            return false;
        }
        st.loaned -= 1;
        Self::free(st, id);
        true
    }

    fn refill_if_open(&self, st: &mut RxState) -> u32 {
        if st.open { self.refill(st) } else { st.fill }
    }

    /// Whether a completion is waiting (the DPC's re-check after unmasking).
    pub(super) fn pending(&self) -> bool {
        let st = self.state.lock();
        let off = st.comp_next as usize * DESC_SIZE;
        st.open && !st.broken && (self.comp.view().read_u32(off + 12) >> 31) == st.comp_gen
    }

    /// Back to bring-up state with the device reset: every posted buffer is free again
    /// (loaned ones stay with the consumer), the rings zeroed, indices 0, generation 1.
    pub(super) fn reinit(&self) {
        let mut st = self.state.lock();
        for i in 0..self.size as usize {
            let id = st.slot.get(i).copied().unwrap_or(NONE);
            if let Some(s) = st.slot.get_mut(i) {
                *s = NONE;
            }
            if id != NONE {
                Self::free(&mut st, id);
            }
        }
        self.ring.view().zero();
        self.comp.view().zero();
        st.fill = 0;
        st.generation = 1;
        st.oldest = 0;
        st.posted = 0;
        st.comp_next = 0;
        st.comp_gen = 1;
        st.dropping = false;
        st.broken = false;
    }
}

/// A batch of received frames handed to the consumer ([`super::NicClient::received`]). Each
/// frame's buffer returns to the ring when the call returns, unless the consumer
/// [`keep`](RxBatch::keep)s it; a kept buffer is the consumer's until it hands it back with
/// [`super::Vmxnet3::return_rx`].
pub struct RxBatch<'a> {
    pub(super) rx: &'a RxQueue,
    pub(super) frames: &'a [RxFrame],
    pub(super) kept: Cell<u64>,
}

impl<'a> RxBatch<'a> {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frame `i`.
    pub fn frame(&self, i: usize) -> Option<RxFrame> {
        self.frames.get(i).copied()
    }

    /// The bytes of frame `i` (volatile reads through the view).
    pub fn data(&self, i: usize) -> Option<DmaView<'a>> {
        let f = self.frames.get(i)?;
        self.rx.view(f.buffer, f.len)
    }

    /// Keeps frame `i`'s buffer past the call; false if there is no frame `i`.
    pub fn keep(&self, i: usize) -> bool {
        if i >= self.frames.len() || i >= 64 {
            return false;
        }
        self.kept.set(self.kept.get() | (1 << i));
        true
    }

    /// Whether frame `i` is kept.
    pub fn is_kept(&self, i: usize) -> bool {
        i < 64 && self.kept.get() & (1 << i) != 0
    }
}
