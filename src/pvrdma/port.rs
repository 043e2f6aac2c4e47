//! Data-path ports (§7, §9–§12): everything a post or a poll touches, resolved once when the
//! queue is created, so that posting a WQE is a handful of stores and reaping a CQE a handful
//! of loads, with no lock, no table lookup and no allocation.
//!
//! - [`WqPort`]: the producer side of a driver-produced ring (QP send queue, QP receive queue,
//!   SRQ): write the WQE into its slot, publish `prod_tail`, ring the doorbell. The ring's
//!   WQE format is part of the port's type ([`SendPort`], [`RecvPort`]): only a send port
//!   writes send WQEs, only a receive port receive WQEs, and each port's constructor checks
//!   that its elements hold its header and its SGEs, so no safe call writes past an element.
//! - [`CqPort`]: the consumer side of a CQ ring: read the device's `prod_tail` (validated,
//!   M14), load CQEs, publish `cons_head`.
//! - [`Bell`]: one doorbell value bound to the mapped UAR page (one volatile store).
//!
//! A port addresses its elements through a table of the ring's page pointers (the buffer is
//! allocated page by page, §6): element `i` lives at `pages[(i·stride) >> 12] + (i·stride &
//! 4095)`; strides are powers of two ≤ 4096, so an element never straddles a page. A port
//! keeps its buffer alive ([`Arc<PagedBuffer>`]), so the memory outlives every post or poll
//! even when the device's DESTROY response has already released the queue's other owner.
//!
//! Ports are `Sync` but not internally synchronized beyond single-word atomics: each ring has
//! one producer (the consumer serializes posts per queue, ndkpi.md §5.3) or one consumer
//! (polls and arms are serialized per CQ, §5.4). Two concurrent producers would interleave
//! WQEs, never touch memory outside the ring.
#![allow(unsafe_code)]
// The accessors below store or load several words of one ring element in a block whose
// single SAFETY argument (the element is live, aligned and large enough) covers every word;
// repeating it per store would say the same thing ten times.
#![allow(clippy::multiple_unsafe_ops_per_block)]

use alloc::sync::Arc;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::os::alloc::KVec;
use crate::os::dma::PAGE_SIZE;
use crate::os::sync::{from_device_barrier, to_device_barrier};
use crate::os::{DmaView, Uar};

use super::cqe::CQE_SIZE;
use super::error::PvrdmaError;
use super::pdir::PagedBuffer;
use super::uar::Doorbell;
use super::wqe::{Ex, RQ_WQE_HDR_SIZE, SGE_SIZE, SQ_WQE_HDR_SIZE, SendWr, Sge, WrBody};

const PAGE_SHIFT: u32 = 12;
const _: () = assert!(1 << PAGE_SHIFT == PAGE_SIZE);

/// One doorbell value bound to the UAR page: ringing it is a barrier and one 32-bit store.
pub struct Bell {
    // INVARIANT: `word` is `uar.word(offset)` of a `Uar` that `_keep` keeps alive (and `uar`
    // points to it where the host's doorbell hook exists: the only reason to read it).
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    uar: NonNull<Uar>,
    word: NonNull<u32>,
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    offset: u32,
    value: u32,
    _keep: Arc<dyn Send + Sync>,
}

// SAFETY: `Bell` only ever hands out `&Uar`, which is `Sync` (a doorbell is one volatile store
// that any processor may issue), and owns its keeper `Arc`.
unsafe impl Send for Bell {}
// SAFETY: as for `Send`.
unsafe impl Sync for Bell {}

impl Bell {
    /// A bell on a UAR page this bell co-owns.
    pub fn new(uar: Arc<Uar>, db: impl Doorbell) -> Bell {
        Bell {
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            uar: NonNull::from(&*uar),
            word: uar.word(db.offset()),
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            offset: db.offset(),
            value: db.value(),
            _keep: uar,
        }
    }

    /// A bell on the UAR page that `owner` holds (`uar` projects it), co-owning `owner`.
    pub fn owned_by<K: Send + Sync + 'static>(
        owner: Arc<K>,
        uar: fn(&K) -> &Uar,
        db: impl Doorbell,
    ) -> Bell {
        let u = uar(&owner);
        Bell {
            // The reference lives as long as `owner`, which the bell keeps.
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            uar: NonNull::from(u),
            word: u.word(db.offset()),
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            offset: db.offset(),
            value: db.value(),
            _keep: owner,
        }
    }

    /// Orders every earlier store to shared memory (`prod_tail`) before the doorbell (§12),
    /// then stores the value.
    #[inline(always)]
    pub fn ring(&self) {
        to_device_barrier();
        // SAFETY: type invariant: `word` is a doorbell word of the live UAR page.
        unsafe { core::ptr::write_volatile(self.word.as_ptr(), self.value.to_le()) };
        #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
        {
            // SAFETY: type invariant: the UAR outlives `self`.
            let uar = unsafe { self.uar.as_ref() };
            uar.after_store(self.offset, self.value);
        }
    }
}

/// One element of a ring: its address, and what the ring's producer records beside it
/// (`()` for nothing), so that one index computation finds both.
struct Entry<R> {
    at: NonNull<u8>,
    rec: R,
}

/// The address of every element of one ring: one load per element access instead of
/// the page arithmetic (8 bytes per element, against 64 or more bytes of element), next to
/// the producer's record of the element, if any ([`WqPort::with_records`]).
struct Pages<R = ()> {
    // INVARIANT: `entries.len()` = `mask + 1`; `entries[i].at` is the CPU address of element
    // `i`, a `1 << shift`-byte, 8-aligned run inside one live page of the owning buffer.
    entries: KVec<Entry<R>>,
    /// log2 of the element size (≤ 12).
    shift: u32,
    /// N − 1 (N a power of two).
    mask: u32,
}

impl Pages {
    fn new(buf: &PagedBuffer, first: u32, n: u32, stride: u32) -> Result<Pages, PvrdmaError> {
        if !n.is_power_of_two() || !stride.is_power_of_two() || stride as usize > PAGE_SIZE {
            return Err(PvrdmaError::InvalidParameter);
        }
        let mut entries = KVec::try_with_capacity(n as usize)?;
        for i in 0..n {
            let off = u64::from(i) * u64::from(stride);
            let page = u32::try_from(off >> PAGE_SHIFT)
                .ok()
                .and_then(|p| first.checked_add(p))
                .and_then(|p| buf.page(p))
                .ok_or(PvrdmaError::InvalidParameter)?;
            let view = page
                .view()
                .sub((off as usize) & (PAGE_SIZE - 1), stride as usize)
                .ok_or(PvrdmaError::InvalidParameter)?;
            entries
                .push_within_capacity(Entry {
                    at: view.as_non_null(),
                    rec: (),
                })
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        Ok(Pages {
            entries,
            shift: stride.trailing_zeros(),
            mask: n - 1,
        })
    }
}

impl<R> Pages<R> {
    /// The same elements with a record each, from `rec`.
    fn with_records<S>(&self, mut rec: impl FnMut() -> S) -> Result<Pages<S>, PvrdmaError> {
        let mut entries = KVec::try_with_capacity(self.entries.len())?;
        for e in self.entries.iter() {
            entries
                .push_within_capacity(Entry {
                    at: e.at,
                    rec: rec(),
                })
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        // INVARIANT: the same addresses, as many.
        Ok(Pages {
            entries,
            shift: self.shift,
            mask: self.mask,
        })
    }

    /// The entry of free-running index `i`.
    #[inline(always)]
    fn entry(&self, i: u32) -> &Entry<R> {
        // Unchecked because it pays: a checked `get` with a cold failure measured +2.0 per
        // post (read, chain16, send, receive, fastreg) and +4.0 per CQE (poll1, poll16);
        // masking by `len - 1` instead of `mask`, +4.0 and +8 to +10.
        // SAFETY: `i & mask < entries.len()` (type invariant).
        unsafe { self.entries.get_unchecked((i & self.mask) as usize) }
    }

    /// The element of free-running index `i`.
    #[inline(always)]
    fn element(&self, i: u32) -> *mut u8 {
        self.entry(i).at.as_ptr()
    }

    fn stride(&self) -> usize {
        1 << self.shift
    }
}

/// # Safety
/// `p` is valid for an aligned 8-byte write.
#[inline(always)]
unsafe fn put64(p: *mut u8, off: usize, v: u64) {
    // SAFETY: caller contract (every element offset used here is 8-aligned in a page-aligned,
    // power-of-two sized element).
    unsafe { core::ptr::write_volatile(p.add(off).cast::<u64>(), v.to_le()) }
}

/// # Safety
/// `p + off` is valid for an aligned 8-byte read.
#[inline(always)]
unsafe fn get64(p: *const u8, off: usize) -> u64 {
    // SAFETY: caller contract.
    u64::from_le(unsafe { core::ptr::read_volatile(p.add(off).cast::<u64>()) })
}

/// The words of a send-WQE header (§10) after `wr_id` and `num_sge`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqHeader {
    /// `opcode` (`PVRDMA_WR_*`) @16 and `send_flags` @20 as one little-endian word
    /// ([`SqHeader::op_word`]): posters look it up whole in a table built at compile time.
    pub op_word: u64,
    /// `ex`: `invalidate_rkey` (or 0).
    pub ex: u32,
    /// The `wr` union as six little-endian words (@32..@80).
    pub body: [u64; 6],
}

impl SqHeader {
    /// The header words of `wr`, as [`super::wqe::encode_send`] lays them out (`INLINE` is
    /// the caller's to refuse: the flag is copied like any other).
    pub fn of(wr: &SendWr<'_>) -> SqHeader {
        let ex = match wr.ex {
            Ex::None => 0,
            // The four bytes as they stand in the WQE.
            Ex::Imm(b) => u32::from_le_bytes(b),
            Ex::InvalidateRkey(k) => k,
        };
        let body = match wr.body {
            WrBody::None => [0; 6],
            WrBody::Rdma { remote_addr, rkey } => Self::rdma_body(remote_addr, rkey),
            WrBody::FastReg(f) => [
                f.iova_start,
                f.pl_pdir_dma,
                u64::from(f.page_shift) | u64::from(f.page_list_len) << 32,
                u64::from(f.length) | u64::from(f.access_flags.bits()) << 32,
                u64::from(f.rkey),
                0,
            ],
            WrBody::Ud {
                remote_qpn,
                remote_qkey,
                av,
            } => {
                // `pvrdma_av` @40: port_pd, sl_tclass_flowlabel, dgid[16], src_path_bits,
                // gid_index, stat_rate, hop_limit, dmac[6], reserved[2].
                let [
                    g0,
                    g1,
                    g2,
                    g3,
                    g4,
                    g5,
                    g6,
                    g7,
                    g8,
                    g9,
                    g10,
                    g11,
                    g12,
                    g13,
                    g14,
                    g15,
                ] = av.dgid;
                let [m0, m1, m2, m3, m4, m5] = av.dmac;
                [
                    u64::from(remote_qpn) | u64::from(remote_qkey) << 32,
                    u64::from(av.port_pd) | u64::from(av.sl_tclass_flowlabel) << 32,
                    u64::from_le_bytes([g0, g1, g2, g3, g4, g5, g6, g7]),
                    u64::from_le_bytes([g8, g9, g10, g11, g12, g13, g14, g15]),
                    u64::from_le_bytes([
                        av.src_path_bits,
                        av.gid_index,
                        av.stat_rate,
                        av.hop_limit,
                        m0,
                        m1,
                        m2,
                        m3,
                    ]),
                    u64::from_le_bytes([m4, m5, 0, 0, 0, 0, 0, 0]),
                ]
            }
        };
        SqHeader {
            op_word: Self::op_word(wr.opcode as u32, wr.flags.bits()),
            ex,
            body,
        }
    }

    /// The word @16: `opcode` in the low half, `send_flags` in the high half.
    pub const fn op_word(opcode: u32, send_flags: u32) -> u64 {
        opcode as u64 | (send_flags as u64) << 32
    }

    /// The `rdma` union member: `remote_addr` @32, `rkey` @40.
    pub const fn rdma_body(remote_addr: u64, rkey: u32) -> [u64; 6] {
        [remote_addr, rkey as u64, 0, 0, 0, 0]
    }

    /// The `fast_reg` union member: `iova_start` @32, `pl_pdir_dma` @40, `page_shift` @48,
    /// `page_list_len` @52, `length` @56, `access_flags` @60, `rkey` @64.
    pub const fn fast_reg_body(
        iova_start: u64,
        pl_pdir_dma: u64,
        page_list_len: u32,
        length: u32,
        access_flags: u32,
        rkey: u32,
    ) -> [u64; 6] {
        [
            iova_start,
            pl_pdir_dma,
            PAGE_SHIFT as u64 | (page_list_len as u64) << 32,
            length as u64 | (access_flags as u64) << 32,
            rkey as u64,
            0,
        ]
    }
}

/// Where a driver-produced ring lives in its buffer (§9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqGeometry {
    /// Page of WQE 0.
    pub first_page: u32,
    /// N (a power of two).
    pub n: u32,
    /// Bytes per WQE (a power of two ≤ 4096).
    pub stride: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Byte offset of `prod_tail` in page 0 (`cons_head` follows).
    pub state: usize,
}

mod sealed {
    pub trait Sealed {}
}

/// The WQE format of a driver-produced ring, as a type: [`SendRing`] or [`RecvRing`]. Sealed:
/// the port's memory safety rests on [`Self::HEADER`] being the header its writer stores.
pub trait WqKind: sealed::Sealed {
    /// Header bytes before the SGEs of a WQE of this format.
    const HEADER: usize;
}

/// A QP send queue: `pvrdma_sq_wqe_hdr` (80 bytes) and SGEs (§10).
#[derive(Debug)]
pub enum SendRing {}

/// A QP receive queue or an SRQ: `pvrdma_rq_wqe_hdr` (16 bytes) and SGEs (§10).
#[derive(Debug)]
pub enum RecvRing {}

impl sealed::Sealed for SendRing {}
impl sealed::Sealed for RecvRing {}

impl WqKind for SendRing {
    const HEADER: usize = SQ_WQE_HDR_SIZE;
}

impl WqKind for RecvRing {
    const HEADER: usize = RQ_WQE_HDR_SIZE;
}

/// The port of a QP send queue.
pub type SendPort<R = ()> = WqPort<SendRing, R>;

/// The port of a QP receive queue or of an SRQ.
pub type RecvPort<R = ()> = WqPort<RecvRing, R>;

/// The producer side of a driver-produced ring (QP SQ, QP RQ, SRQ) whose WQE format is `K`
/// ([`SendRing`], [`RecvRing`]), with a record of type `R` per element for the producer's
/// bookkeeping ([`Self::with_records`]; none by default).
///
/// A send WQE is written only through a send port, a receive WQE only through a receive
/// port: an 80-byte send header cannot land in the smaller element of a receive ring.
///
/// ```compile_fail
/// # use pvrdma_ndk::pvrdma::port::{RecvPort, SqHeader};
/// fn post(rq: &RecvPort) -> bool {
///     rq.write_send(0, 0, &SqHeader::default(), &[])
/// }
/// ```
///
/// ```compile_fail
/// # use pvrdma_ndk::pvrdma::port::SendPort;
/// fn post(sq: &SendPort) -> bool {
///     sq.slot(0).write_recv(0, &[])
/// }
/// ```
///
/// whereas each port writes its own format:
///
/// ```
/// # use pvrdma_ndk::pvrdma::port::{RecvPort, SendPort, SqHeader};
/// fn post(sq: &SendPort, rq: &RecvPort) -> bool {
///     sq.write_send(0, 0, &SqHeader::default(), &[]) && rq.slot(0).write_recv(0, &[])
/// }
/// ```
pub struct WqPort<K, R = ()> {
    pages: Pages<R>,
    // INVARIANT: points to this ring's `prod_tail` word in page 0 of `_buf`.
    prod_tail: NonNull<AtomicU32>,
    /// 2N − 1.
    wrap: u32,
    // INVARIANT: ≥ 1, and an element holds the `K::HEADER`-byte header of the port's WQE
    // format and this many SGEs.
    /// SGEs a WQE of this ring can hold.
    max_sge: u32,
    bell: Bell,
    _buf: Arc<PagedBuffer>,
    /// The WQE format (no value: `fn() -> K` so that it adds no auto-trait bound).
    _kind: PhantomData<fn() -> K>,
}

// SAFETY: the raw pointers address memory owned by `_buf` (kept alive) and shared with the
// device; all access is volatile or atomic. The records are `R`s like any other field; `K`
// is a type-level tag with no value.
unsafe impl<K, R: Send> Send for WqPort<K, R> {}
// SAFETY: as for `Send`; only `&R` is handed out.
unsafe impl<K, R: Sync> Sync for WqPort<K, R> {}

impl<K: WqKind> WqPort<K> {
    /// A port on the ring `g` of `buf`, whose WQEs have format `K`.
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for a geometry outside the buffer, no SGE per WQE or
    /// a stride that cannot hold a `K` header and `max_sge` SGEs; [`PvrdmaError::NoMemory`].
    pub fn new(buf: Arc<PagedBuffer>, g: WqGeometry, bell: Bell) -> Result<Self, PvrdmaError> {
        let WqGeometry {
            first_page,
            n,
            stride,
            max_sge,
            state,
        } = g;
        let need = (max_sge as usize)
            .checked_mul(SGE_SIZE)
            .and_then(|b| b.checked_add(K::HEADER))
            .ok_or(PvrdmaError::InvalidParameter)?;
        if max_sge == 0 || need > stride as usize || n > 1 << 30 {
            return Err(PvrdmaError::InvalidParameter);
        }
        let pages = Pages::new(&buf, first_page, n, stride)?;
        let prod_tail = buf
            .page(0)
            .and_then(|p| p.view().atomic_u32(state))
            .filter(|_| state + 8 <= PAGE_SIZE)
            .map(NonNull::from)
            .ok_or(PvrdmaError::InvalidParameter)?;
        Ok(WqPort {
            pages,
            prod_tail,
            wrap: 2 * n - 1,
            max_sge,
            bell,
            _buf: buf,
            _kind: PhantomData,
        })
    }
}

impl<K, R> WqPort<K, R> {
    /// The same port with a record per element, each from `rec` (allocates: creation time
    /// only). The poster keeps what it needs to know about each posted WQE there, so one
    /// index computation finds both the record and the WQE ([`Self::slot`]).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`].
    pub fn with_records<S>(self, rec: impl FnMut() -> S) -> Result<WqPort<K, S>, PvrdmaError> {
        let pages = self.pages.with_records(rec)?;
        // INVARIANT: the same elements, format and SGE count.
        Ok(WqPort {
            pages,
            prod_tail: self.prod_tail,
            wrap: self.wrap,
            max_sge: self.max_sge,
            bell: self.bell,
            _buf: self._buf,
            _kind: PhantomData,
        })
    }

    /// N.
    pub fn entries(&self) -> u32 {
        self.pages.mask + 1
    }

    /// SGEs per WQE.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    fn prod_tail(&self) -> &AtomicU32 {
        // SAFETY: type invariant.
        unsafe { self.prod_tail.as_ref() }
    }

    /// The record of free-running index `index`.
    #[inline(always)]
    pub fn record(&self, index: u32) -> &R {
        &self.pages.entry(index).rec
    }

    /// Element `index` (a free-running index), resolved once for its record and its WQE.
    #[inline(always)]
    pub fn slot(&self, index: u32) -> WqSlot<'_, K, R> {
        // INVARIANT: an entry of this port, whose elements hold a `K` WQE of `max_sge` SGEs,
        // kept alive by `self._buf` for as long as `self` is borrowed.
        WqSlot {
            entry: self.pages.entry(index),
            max_sge: self.max_sge,
            _kind: PhantomData,
        }
    }

    /// Hands every WQE before free-running index `next` to the device: barrier, then
    /// `prod_tail` = `next mod 2N` (§7).
    #[inline(always)]
    pub fn publish(&self, next: u32) {
        to_device_barrier();
        self.prod_tail().store(next & self.wrap, Ordering::Release);
    }

    /// Rings this ring's doorbell.
    #[inline(always)]
    pub fn ring(&self) {
        self.bell.ring();
    }

    /// Our `prod_tail` as last published (diagnostics and tests).
    pub fn published(&self) -> u32 {
        self.prod_tail().load(Ordering::Relaxed)
    }

    /// The device's `cons_head` as it stands (diagnostics; never used to post).
    pub fn device_cons_head(&self) -> u32 {
        // SAFETY: `cons_head` follows `prod_tail` in the same 8-byte ring state (§7).
        let c = unsafe { &*self.prod_tail.as_ptr().add(1) };
        c.load(Ordering::Relaxed)
    }

    /// Copies WQE `index` out of the ring (tests and diagnostics).
    pub fn read_element(&self, index: u32, out: &mut [u8]) {
        let p = self.pages.element(index);
        for (i, o) in out.iter_mut().take(self.pages.stride()).enumerate() {
            // SAFETY: `i` < stride: inside the element.
            *o = unsafe { core::ptr::read_volatile(p.add(i)) };
        }
    }
}

impl<R> WqPort<SendRing, R> {
    /// Writes send WQE `index` ([`WqSlot::write_send`]).
    #[inline(always)]
    pub fn write_send(&self, index: u32, wr_id: u64, h: &SqHeader, sges: &[Sge]) -> bool {
        self.slot(index).write_send(wr_id, h, sges)
    }
}

impl<R> WqPort<RecvRing, R> {
    /// Writes receive WQE `index` ([`WqSlot::write_recv`]).
    #[inline(always)]
    pub fn write_recv(&self, index: u32, wr_id: u64, sges: &[Sge]) -> bool {
        self.slot(index).write_recv(wr_id, sges)
    }
}

/// One element of a [`WqPort`] of WQE format `K`: its record and its WQE (the caller owns
/// the element: its index was retired, so the device is done with it).
pub struct WqSlot<'a, K, R> {
    // INVARIANT: `entry.at` is 8-aligned and valid for writes of a `K` header and `max_sge`
    // (≥ 1) SGEs for 'a. (The address is loaded where a WQE is written, not before: a post
    // that stores its record first keeps one register free.)
    entry: &'a Entry<R>,
    max_sge: u32,
    _kind: PhantomData<fn() -> K>,
}

/// One WQE slot of a ring of format `K` outside any port, with no record: the hardware
/// layer's own posts ([`super::queue`]) write their WQEs through it ([`Self::slot`]), so
/// that every WQE is written by this module.
pub(crate) struct WqElement<'a, K> {
    // INVARIANT: `entry.at` is 8-aligned and valid for writes of a `K` header and `max_sge`
    // (≥ 1) SGEs for 'a.
    entry: Entry<()>,
    max_sge: u32,
    _life: PhantomData<DmaView<'a>>,
    _kind: PhantomData<fn() -> K>,
}

impl<'a, K: WqKind> WqElement<'a, K> {
    /// The slot `view` of a ring whose WQEs hold up to `max_sge` SGEs; `None` unless `view`
    /// is 8-aligned and holds a `K` header and `max_sge` (≥ 1) SGEs.
    pub fn on_view(view: DmaView<'a>, max_sge: u32) -> Option<Self> {
        let need = (max_sge as usize)
            .checked_mul(SGE_SIZE)?
            .checked_add(K::HEADER)?;
        let at = view.as_non_null();
        if max_sge == 0 || need > view.len() || !at.as_ptr().addr().is_multiple_of(8) {
            return None;
        }
        // INVARIANT: checked above; the view's memory lives for 'a.
        Some(WqElement {
            entry: Entry { at, rec: () },
            max_sge,
            _life: PhantomData,
            _kind: PhantomData,
        })
    }

    /// The slot, to write its WQE.
    pub fn slot(&self) -> WqSlot<'_, K, ()> {
        // INVARIANT: as `self`'s, for no longer than `self` (which lives no longer than 'a).
        WqSlot {
            entry: &self.entry,
            max_sge: self.max_sge,
            _kind: PhantomData,
        }
    }
}

impl<'a, K, R> WqSlot<'a, K, R> {
    /// The element's record.
    #[inline(always)]
    pub fn record(&self) -> &'a R {
        &self.entry.rec
    }

    /// SGEs this WQE holds.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// False for more SGEs than a WQE holds. A WQE holds at least one (type invariant), so
    /// a post whose SGE count is known to be 0 or 1 compiles this away.
    #[inline(always)]
    fn fits(&self, sges: &[Sge]) -> bool {
        sges.len() <= 1 || sges.len() <= self.max_sge as usize
    }
}

impl<R> WqSlot<'_, SendRing, R> {
    /// Writes the send WQE; `false` (nothing written) for more SGEs than the ring holds.
    #[inline(always)]
    pub fn write_send(&self, wr_id: u64, h: &SqHeader, sges: &[Sge]) -> bool {
        if !self.fits(sges) {
            return false;
        }
        let p = self.entry.at.as_ptr();
        // SAFETY: `p` is a whole element of a send ring (type invariant), 80 + 16·max_sge
        // bytes at least (`SendRing::HEADER`, checked in `WqPort::new`), page-aligned runs so
        // every word offset is aligned.
        unsafe {
            put64(p, 0, wr_id);
            put64(p, 8, sges.len() as u64);
            put64(p, 16, h.op_word);
            put64(p, 24, u64::from(h.ex));
            let [b0, b1, b2, b3, b4, b5] = h.body;
            put64(p, 32, b0);
            put64(p, 40, b1);
            put64(p, 48, b2);
            put64(p, 56, b3);
            put64(p, 64, b4);
            put64(p, 72, b5);
        }
        // SAFETY: `sges.len() <= max_sge` (`fits`), which the element holds after the
        // header.
        unsafe { put_sges(p.add(SQ_WQE_HDR_SIZE), sges) };
        true
    }
}

impl<R> WqSlot<'_, RecvRing, R> {
    /// Writes the receive WQE (RQ or SRQ format); `false` for too many SGEs.
    #[inline(always)]
    pub fn write_recv(&self, wr_id: u64, sges: &[Sge]) -> bool {
        if !self.fits(sges) {
            return false;
        }
        let p = self.entry.at.as_ptr();
        // SAFETY: `p` is a whole element of a receive ring (type invariant), 16 + 16·max_sge
        // bytes at least (`RecvRing::HEADER`, checked in `WqPort::new`), page-aligned runs so
        // every word offset is aligned; `fits` bounds the SGEs.
        unsafe {
            put64(p, 0, wr_id);
            put64(p, 8, sges.len() as u64);
            put_sges(p.add(RQ_WQE_HDR_SIZE), sges);
        }
        true
    }
}

/// # Safety
/// `p` is 8-aligned and valid for `16 · sges.len()` bytes of writes.
#[inline(always)]
unsafe fn put_sges(p: *mut u8, sges: &[Sge]) {
    match sges {
        [] => {}
        // SAFETY: caller contract (one SGE).
        [one] => unsafe { put_sge(p, one) },
        // SAFETY: caller contract.
        many => unsafe { put_many_sges(p, many) },
    }
}

/// # Safety
/// `p` is 8-aligned and valid for 16 bytes of writes.
#[inline(always)]
unsafe fn put_sge(p: *mut u8, s: &Sge) {
    // SAFETY: caller contract.
    unsafe {
        put64(p, 0, s.addr);
        put64(p, 8, u64::from(s.length) | u64::from(s.lkey) << 32);
    }
}

/// [`put_sges`] for two or more SGEs, out of line.
///
/// # Safety
/// As [`put_sges`].
#[inline(never)]
unsafe fn put_many_sges(p: *mut u8, sges: &[Sge]) {
    for (i, s) in sges.iter().enumerate() {
        let o = i * SGE_SIZE;
        // SAFETY: caller contract.
        unsafe {
            put64(p, o, s.addr);
            put64(p, o + 8, u64::from(s.length) | u64::from(s.lkey) << 32);
        }
    }
}

/// The fields of a CQE (§11) the completion path reads, straight from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeView {
    /// `wr_id` @0.
    pub wr_id: u64,
    /// `qp` @8 (64 bits as written; validate before use).
    pub qp: u64,
    /// `opcode` @16.
    pub opcode: u32,
    /// `status` @20.
    pub status: u32,
    /// `byte_len` @24.
    pub byte_len: u32,
    /// `imm_data` / invalidated rkey @28 (LE).
    pub ex: u32,
    /// `wc_flags` @36.
    pub wc_flags: u32,
}

/// Result of checking a CQ's `prod_tail` against our `cons_head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqState {
    /// CQEs ready, the count.
    Ready(u32),
    /// Nothing new.
    Empty,
    /// The device's index failed validation (M14): the ring is unusable.
    Corrupt,
}

/// The consumer side of a CQ ring.
pub struct CqPort {
    pages: Pages,
    // INVARIANT: points to the `rx.prod_tail` word of page 0 of `_buf` (`cons_head` follows).
    prod_tail: NonNull<AtomicU32>,
    /// Our `cons_head` in [0, 2N).
    head: AtomicU32,
    /// 2N − 1.
    wrap: u32,
    /// N, the number of CQEs.
    n: u32,
    arm: Bell,
    arm_solicited: Bell,
    _buf: Arc<PagedBuffer>,
}

// SAFETY: as for `WqPort` (no records).
unsafe impl Send for CqPort {}
// SAFETY: as for `WqPort`.
unsafe impl Sync for CqPort {}

impl CqPort {
    /// A port on a CQ of `n` CQEs from page 1 of `buf`, its ring state in page 0 (`rx` @8).
    ///
    /// # Errors
    /// As [`WqPort::new`].
    pub fn new(
        buf: Arc<PagedBuffer>,
        n: u32,
        arm: Bell,
        arm_solicited: Bell,
    ) -> Result<CqPort, PvrdmaError> {
        if n > 1 << 30 {
            return Err(PvrdmaError::InvalidParameter);
        }
        let pages = Pages::new(&buf, 1, n, CQE_SIZE as u32)?;
        let prod_tail = buf
            .page(0)
            .and_then(|p| p.view().atomic_u32(8))
            .map(NonNull::from)
            .ok_or(PvrdmaError::InvalidParameter)?;
        Ok(CqPort {
            pages,
            prod_tail,
            head: AtomicU32::new(0),
            wrap: 2 * n - 1,
            n,
            arm,
            arm_solicited,
            _buf: buf,
        })
    }

    /// N.
    pub fn entries(&self) -> u32 {
        self.pages.mask + 1
    }

    fn index(&self, i: usize) -> &AtomicU32 {
        // SAFETY: type invariant; `i` ≤ 1 stays in the 8-byte `rx` ring state.
        unsafe { &*self.prod_tail.as_ptr().add(i) }
    }

    /// Our `cons_head`.
    #[inline(always)]
    pub fn head(&self) -> u32 {
        self.head.load(Ordering::Relaxed)
    }

    /// CQEs between `head` and the device's `prod_tail`, after validating it (M14: in
    /// [0, 2N) and at most N ahead); CQE reads that follow are ordered after it.
    #[inline(always)]
    pub fn ready(&self, head: u32) -> CqState {
        let tail = self.index(0).load(Ordering::Acquire);
        if tail == head {
            return CqState::Empty;
        }
        let d = tail.wrapping_sub(head) & self.wrap;
        // `wrap` is 2N − 1, all ones: `tail > wrap` is `tail ∉ [0, 2N)`.
        if tail > self.wrap || d > self.n {
            return CqState::Corrupt;
        }
        from_device_barrier();
        CqState::Ready(d)
    }

    /// Loads the CQE at free-running index `i` (one of those [`Self::ready`] counted).
    #[inline(always)]
    pub fn load(&self, i: u32) -> CqeView {
        let p = self.pages.element(i);
        // SAFETY: `p` is a 64-byte CQE slot of the ring; the offsets are 8-aligned.
        let (w0, w1, w2, w3, w4) = unsafe {
            (
                get64(p, 0),
                get64(p, 8),
                get64(p, 16),
                get64(p, 24),
                get64(p, 32),
            )
        };
        CqeView {
            wr_id: w0,
            qp: w1,
            opcode: w2 as u32,
            status: (w2 >> 32) as u32,
            byte_len: w3 as u32,
            ex: (w3 >> 32) as u32,
            wc_flags: (w4 >> 32) as u32,
        }
    }

    /// The three words the completion fast path reads of CQE `i`: `wr_id`, `qp` and
    /// `status`.
    #[inline(always)]
    pub fn load_core(&self, i: u32) -> (u64, u64, u32) {
        let p = self.pages.element(i);
        // SAFETY: as in `load`.
        let (w0, w1, w2) = unsafe { (get64(p, 0), get64(p, 8), get64(p, 16)) };
        (w0, w1, (w2 >> 32) as u32)
    }

    /// Consumes every CQE before `head` (a value from [`Self::next`]): our reads of them
    /// happen before the device may reuse their slots.
    #[inline(always)]
    pub fn consume(&self, head: u32) {
        self.head.store(head, Ordering::Relaxed);
        self.index(1).store(head, Ordering::Release);
    }

    /// The index after `i`.
    #[inline(always)]
    pub fn next(&self, i: u32) -> u32 {
        i.wrapping_add(1) & self.wrap
    }

    /// True when CQEs are waiting (or the ring is corrupt: the caller must look).
    pub fn has_entries(&self) -> bool {
        self.ready(self.head()) != CqState::Empty
    }

    /// Arms the CQ: CQ_ARM_SOL if `solicited_only`, else CQ_ARM (§12, M18).
    pub fn arm(&self, solicited_only: bool) {
        if solicited_only {
            self.arm_solicited.ring();
        } else {
            self.arm.ring();
        }
    }

    /// Copies CQE `i` out of the ring (tests and diagnostics).
    pub fn read_element(&self, i: u32) -> [u8; CQE_SIZE] {
        let p = self.pages.element(i);
        let mut out = [0u8; CQE_SIZE];
        for (k, o) in out.iter_mut().enumerate() {
            // SAFETY: `k` < 64: inside the CQE.
            *o = unsafe { core::ptr::read_volatile(p.add(k)) };
        }
        out
    }

    /// Test producer: writes `cqe` at the device's `prod_tail` and advances it, as the
    /// device would (fakes of the hardware seam use it; the driver never produces CQEs).
    #[doc(hidden)]
    pub fn produce_for_test(&self, cqe: &[u8; CQE_SIZE]) {
        let tail = self.index(0).load(Ordering::Relaxed);
        let p = self.pages.element(tail);
        for (k, b) in cqe.iter().enumerate() {
            // SAFETY: `k` < 64: inside the CQE.
            unsafe { core::ptr::write_volatile(p.add(k), *b) };
        }
        self.index(0)
            .store(tail.wrapping_add(1) & self.wrap, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::dma::test_alloc::TestDma;
    use crate::pvrdma::queue::{CqRing, QpLayout, QpQueues};
    use crate::pvrdma::uar::{CqDoorbell, QpDoorbell};
    use crate::pvrdma::wqe::{
        AccessFlags, Av, Ex, FastReg, SendFlags, SendWr, WrBody, WrOpcode, encode_recv, encode_send,
    };
    use std::boxed::Box;
    use std::sync::Mutex;
    use std::vec::Vec;

    /// Every doorbell rung on a test UAR page: `(offset, value)` of each store, as the
    /// page's hook saw them, or, in a `bare-doorbell` build (no hook), as read back from the
    /// page after each ring.
    #[derive(Clone)]
    struct Log {
        page: NonNull<u32>,
        #[cfg(not(feature = "bare-doorbell"))]
        hooked: Arc<Mutex<Vec<(u32, u32)>>>,
        seen: Arc<Mutex<Vec<(u32, u32)>>>,
    }

    impl Log {
        /// Records the store `ring` makes at `off` (read back from the page).
        fn after(&self, off: u32, ring: impl FnOnce()) {
            ring();
            // SAFETY: `off` < 4096 and 4-aligned: inside the leaked page.
            let v = unsafe { self.page.add(off as usize / 4).read_volatile() };
            self.seen.lock().unwrap().push((off, v));
        }

        /// The doorbells rung, checked against the hook's record where it exists.
        fn rung(&self) -> Vec<(u32, u32)> {
            let seen = self.seen.lock().unwrap().clone();
            #[cfg(not(feature = "bare-doorbell"))]
            assert_eq!(*self.hooked.lock().unwrap(), seen);
            seen
        }
    }

    /// A UAR page whose doorbells are recorded.
    fn uar() -> (Arc<Uar>, Log) {
        let page: &'static mut [u32; 1024] = Box::leak(Box::new([0u32; 1024]));
        let base = NonNull::from(&mut page[0]);
        let log = Log {
            page: base,
            #[cfg(not(feature = "bare-doorbell"))]
            hooked: Arc::new(Mutex::new(Vec::new())),
            seen: Arc::new(Mutex::new(Vec::new())),
        };
        // SAFETY: the page is leaked: valid, aligned and writable forever.
        let u = unsafe { Uar::new(base) };
        #[cfg(not(feature = "bare-doorbell"))]
        let u = {
            let l = log.hooked.clone();
            u.with_hook(Arc::new(move |o, v| {
                l.lock().unwrap().push((o, v));
            }))
        };
        (Arc::new(u), log)
    }

    fn sge(i: u64) -> Sge {
        Sge {
            addr: 0x1000_0000_0000 + i * 0x111,
            length: 100 + i as u32,
            lkey: 0x500 + i as u32,
        }
    }

    #[test]
    fn send_and_receive_wqes_match_the_reference_encoder() {
        let dma = TestDma::new_dyn();
        let (u, log) = uar();
        let layout = QpLayout::new(8, 4, Some((4, 3))).unwrap();
        let q = QpQueues::alloc(&dma, &layout).unwrap();
        let sq =
            q.sq.port(Bell::new(u.clone(), QpDoorbell::send(7)))
                .unwrap();
        let rq =
            q.rq.as_ref()
                .unwrap()
                .port(Bell::new(u.clone(), QpDoorbell::recv(7)))
                .unwrap();
        assert_eq!((sq.entries(), sq.max_sge(), rq.entries()), (8, 4, 4));
        let sges: Vec<Sge> = (0..3).map(sge).collect();
        let cases = [
            (
                SqHeader {
                    op_word: SqHeader::op_word(WrOpcode::RdmaRead as u32, 3),
                    ex: 0,
                    body: SqHeader::rdma_body(0xAB_CDEF_0123, 0x4455),
                },
                SendWr {
                    wr_id: 0x1_0000_0009,
                    opcode: WrOpcode::RdmaRead,
                    flags: SendFlags::FENCE | SendFlags::SIGNALED,
                    ex: Ex::None,
                    body: WrBody::Rdma {
                        remote_addr: 0xAB_CDEF_0123,
                        rkey: 0x4455,
                    },
                    sges: &sges,
                },
            ),
            (
                SqHeader {
                    op_word: SqHeader::op_word(WrOpcode::FastRegMr as u32, 2),
                    ex: 0,
                    body: SqHeader::fast_reg_body(0x7000_1000, 0xD1D1_0000, 16, 65000, 7, 0x1234),
                },
                SendWr {
                    wr_id: 0x1_0000_0009,
                    opcode: WrOpcode::FastRegMr,
                    flags: SendFlags::SIGNALED,
                    ex: Ex::None,
                    body: WrBody::FastReg(FastReg {
                        iova_start: 0x7000_1000,
                        pl_pdir_dma: 0xD1D1_0000,
                        page_shift: 12,
                        page_list_len: 16,
                        length: 65000,
                        access_flags: AccessFlags::from_bits_truncate(7),
                        rkey: 0x1234,
                    }),
                    sges: &[],
                },
            ),
            (
                SqHeader {
                    op_word: SqHeader::op_word(WrOpcode::SendWithInv as u32, 6),
                    ex: 0xCAFE_0101,
                    body: [0; 6],
                },
                SendWr {
                    wr_id: 0x1_0000_0009,
                    opcode: WrOpcode::SendWithInv,
                    flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
                    ex: Ex::InvalidateRkey(0xCAFE_0101),
                    body: WrBody::None,
                    sges: &sges[..1],
                },
            ),
        ];
        for (h, wr) in cases {
            // Slot 9 & 7 = 1 holds stale bytes from an earlier, longer WQE first.
            let mut stale = [0u8; 144];
            assert!(sq.write_send(1, u64::MAX, &cases[1].0, &sges));
            assert!(sq.write_send(9, wr.wr_id, &h, wr.sges));
            let mut got = [0u8; 144];
            sq.read_element(9, &mut got);
            let n = encode_send(&mut stale[..], &wr).unwrap();
            assert_eq!(&got[..n], &stale[..n], "{:?}", wr.opcode);
        }
        // Too many SGEs: refused, nothing written.
        let five: Vec<Sge> = (0..5).map(sge).collect();
        let mut before = [0u8; 144];
        sq.read_element(2, &mut before);
        assert!(!sq.write_send(2, 1, &cases[0].0, &five));
        let mut after = [0u8; 144];
        sq.read_element(2, &mut after);
        assert_eq!(before, after);

        assert!(rq.write_recv(6, 0x2_0000_0006, &sges));
        let mut got = [0u8; 64];
        rq.read_element(6, &mut got);
        let mut want = [0u8; 64];
        let n = encode_recv(&mut want[..], 0x2_0000_0006, &sges).unwrap();
        assert_eq!(&got[..n], &want[..n]);
        assert!(!rq.write_recv(0, 1, &five[..4]));

        // prod_tail wraps at 2N; the doorbell is one store with the QP handle.
        sq.publish(17);
        assert_eq!(sq.published(), 1);
        rq.publish(8);
        assert_eq!(rq.published(), 0);
        log.after(0, || sq.ring());
        log.after(0, || rq.ring());
        assert_eq!(log.rung(), [(0, 0x4000_0007), (0, 0x8000_0007)]);
        assert_eq!(sq.device_cons_head(), 0);
    }

    #[test]
    fn each_port_checks_its_elements_hold_its_header_and_sges() {
        let dma = TestDma::new_dyn();
        let (u, _log) = uar();
        let buf = Arc::new(PagedBuffer::alloc(&dma, 3).unwrap());
        let g = |stride, max_sge| WqGeometry {
            first_page: 1,
            n: 8,
            stride,
            max_sge,
            state: 0,
        };
        let send = |g| SendPort::new(buf.clone(), g, Bell::new(u.clone(), QpDoorbell::send(1)));
        let recv = |g| RecvPort::new(buf.clone(), g, Bell::new(u.clone(), QpDoorbell::recv(1)));
        // A receive ring's 64-byte elements hold 16 + 3·16 bytes; a send WQE's 80-byte header
        // alone does not fit, so the same geometry gives no send port.
        assert!(recv(g(64, 3)).is_ok());
        assert_eq!(send(g(64, 3)).err(), Some(PvrdmaError::InvalidParameter));
        assert_eq!(send(g(64, 1)).err(), Some(PvrdmaError::InvalidParameter));
        // At the limit and one SGE over it.
        assert!(send(g(128, 3)).is_ok());
        assert_eq!(send(g(128, 4)).err(), Some(PvrdmaError::InvalidParameter));
        assert!(recv(g(32, 1)).is_ok());
        assert_eq!(recv(g(64, 4)).err(), Some(PvrdmaError::InvalidParameter));
        // No SGE at all, or a count whose bytes overflow.
        assert_eq!(send(g(128, 0)).err(), Some(PvrdmaError::InvalidParameter));
        assert_eq!(recv(g(64, 0)).err(), Some(PvrdmaError::InvalidParameter));
        assert_eq!(
            recv(g(4096, u32::MAX)).err(),
            Some(PvrdmaError::InvalidParameter)
        );
        // The geometry checks every port makes: a power-of-two stride within a page, a
        // power-of-two N, elements and ring state inside the buffer.
        for bad in [
            WqGeometry {
                stride: 96,
                ..g(128, 1)
            },
            WqGeometry {
                stride: 8192,
                ..g(128, 1)
            },
            WqGeometry { n: 6, ..g(128, 1) },
            WqGeometry {
                n: 128,
                ..g(128, 1)
            },
            WqGeometry {
                first_page: 3,
                ..g(128, 1)
            },
            WqGeometry {
                state: 4092,
                ..g(128, 1)
            },
        ] {
            assert_eq!(
                send(bad).err(),
                Some(PvrdmaError::InvalidParameter),
                "{bad:?}"
            );
            assert_eq!(
                recv(bad).err(),
                Some(PvrdmaError::InvalidParameter),
                "{bad:?}"
            );
        }
        // A port keeps its format through `with_records`; its bounds are the ones checked.
        let sq = send(g(128, 3)).unwrap().with_records(|| 0u8).unwrap();
        assert_eq!((sq.entries(), sq.max_sge()), (8, 3));
        let h = SqHeader::default();
        let three: Vec<Sge> = (0..3).map(sge).collect();
        assert!(sq.write_send(7, 1, &h, &three));
        let four: Vec<Sge> = (0..4).map(sge).collect();
        assert!(!sq.write_send(7, 1, &h, &four));
        let rq = recv(g(64, 3)).unwrap();
        assert!(rq.write_recv(7, 1, &three));
        assert!(!rq.write_recv(7, 1, &four));
    }

    #[test]
    fn header_of_a_work_request_matches_the_reference_encoder() {
        let sges: Vec<Sge> = (0..2).map(sge).collect();
        let mut dgid = [0u8; 16];
        for (i, g) in dgid.iter_mut().enumerate() {
            *g = 0xA0 + i as u8;
        }
        let base = SendWr {
            wr_id: 0x8000_0000_0000_0001,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            ex: Ex::None,
            body: WrBody::None,
            sges: &sges,
        };
        let wrs = [
            base,
            SendWr {
                opcode: WrOpcode::RdmaWriteWithImm,
                ex: Ex::Imm([0xDE, 0xAD, 0xBE, 0xEF]),
                body: WrBody::Rdma {
                    remote_addr: 0x7000_1000,
                    rkey: 0xA01,
                },
                ..base
            },
            SendWr {
                opcode: WrOpcode::LocalInv,
                ex: Ex::InvalidateRkey(0x1234_5678),
                sges: &[],
                ..base
            },
            SendWr {
                opcode: WrOpcode::FastRegMr,
                body: WrBody::FastReg(FastReg {
                    iova_start: 0x1_0000_0010,
                    pl_pdir_dma: 0x9000,
                    page_shift: 16,
                    page_list_len: 3,
                    length: 0x3_0000,
                    access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                    rkey: 0x207,
                }),
                sges: &[],
                ..base
            },
            SendWr {
                flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
                body: WrBody::Ud {
                    remote_qpn: 0x00AB_CDEF,
                    remote_qkey: 0x8001_0000,
                    av: Av {
                        port_pd: Av::port_pd(3, 1),
                        sl_tclass_flowlabel: Av::sl_tclass_flowlabel(0x10, 0x12345),
                        dgid,
                        src_path_bits: 0x80,
                        gid_index: 2,
                        stat_rate: 7,
                        hop_limit: 64,
                        dmac: [0x00, 0x50, 0x56, 0xAA, 0xBB, 0xCC],
                    },
                },
                ..base
            },
        ];
        for wr in wrs {
            // A slot full of stale bytes: every header byte is written.
            let mut got = [0xEEu8; 128];
            let view = DmaView::from_mut_slice(&mut got[..]);
            let slot = WqElement::<SendRing>::on_view(view, 3).unwrap();
            assert!(
                slot.slot()
                    .write_send(wr.wr_id, &SqHeader::of(&wr), wr.sges)
            );
            let mut want = [0xEEu8; 128];
            let n = encode_send(&mut want[..], &wr).unwrap();
            assert_eq!(got[..n], want[..n], "{:?}", wr.opcode);
            assert!(got[n..].iter().all(|&b| b == 0xEE), "{:?}", wr.opcode);
        }
    }

    #[test]
    fn a_slot_on_a_view_is_checked_like_a_port() {
        #[repr(align(8))]
        struct Slot([u8; 136]);
        let mut m = Slot([0; 136]);
        let whole = DmaView::from_mut_slice(&mut m.0[..]);
        let v = |off, len| whole.sub(off, len).unwrap();
        assert!(WqElement::<SendRing>::on_view(v(0, 128), 3).is_some());
        assert!(WqElement::<SendRing>::on_view(v(0, 128), 4).is_none());
        assert!(WqElement::<SendRing>::on_view(v(0, 64), 1).is_none());
        assert!(WqElement::<SendRing>::on_view(v(0, 128), 0).is_none());
        assert!(
            WqElement::<SendRing>::on_view(v(4, 128), 1).is_none(),
            "misaligned"
        );
        assert!(WqElement::<RecvRing>::on_view(v(8, 64), 3).is_some());
        assert!(WqElement::<RecvRing>::on_view(v(8, 64), 4).is_none());
        assert!(WqElement::<RecvRing>::on_view(v(8, 64), u32::MAX).is_none());
        let rq = WqElement::<RecvRing>::on_view(v(8, 64), 3).unwrap();
        let sges: Vec<Sge> = (0..4).map(sge).collect();
        assert!(
            !rq.slot().write_recv(1, &sges),
            "more SGEs than the slot holds"
        );
        assert!(rq.slot().write_recv(0x55, &sges[..3]));
        let mut want = [0u8; 64];
        encode_recv(&mut want[..], 0x55, &sges[..3]).unwrap();
        let mut got = [0u8; 136];
        whole.read_bytes(0, &mut got);
        assert_eq!(got[8..72], want);
        assert!(got[..8].iter().chain(&got[72..]).all(|&b| b == 0));
    }

    #[test]
    fn records_and_wqes_share_one_index_across_the_wrap() {
        let dma = TestDma::new_dyn();
        let (u, _log) = uar();
        let layout = QpLayout::new(8, 1, None).unwrap();
        let q = QpQueues::alloc(&dma, &layout).unwrap();
        let plain =
            q.sq.port(Bell::new(u.clone(), QpDoorbell::send(7)))
                .unwrap();
        let mut k = 0u32;
        let sq =
            q.sq.port(Bell::new(u, QpDoorbell::send(7)))
                .unwrap()
                .with_records(|| {
                    k += 1;
                    AtomicU32::new(k)
                })
                .unwrap();
        assert_eq!((sq.entries(), sq.max_sge()), (8, 1));
        let h = SqHeader {
            op_word: SqHeader::op_word(WrOpcode::RdmaWrite as u32, 2),
            ex: 0,
            body: SqHeader::rdma_body(0x1234, 5),
        };
        // Free-running indices around the wrap of the ring and of u32.
        for i in (u32::MAX - 9..=u32::MAX).chain(0..20) {
            let slot = sq.slot(i);
            assert!(core::ptr::eq(slot.record(), sq.record(i)));
            assert!(core::ptr::eq(sq.record(i), sq.record(i.wrapping_add(8))));
            assert_eq!(sq.record(i).load(Ordering::Relaxed), (i & 7) + 1, "{i}");
            let wr_id = 0x1_0000_0000 | u64::from(i);
            assert!(slot.write_send(wr_id, &h, &[sge(1)]));
            // The element the record sits beside is the one the port without records sees.
            let mut got = [0u8; 96];
            plain.read_element(i & 7, &mut got);
            assert_eq!(got[0..8], wr_id.to_le_bytes(), "{i}");
            assert_eq!(got[8], 1);
            // Too many SGEs: refused, nothing written.
            assert!(!slot.write_send(0, &h, &[sge(1), sge(2)]));
            plain.read_element(i, &mut got);
            assert_eq!(got[0..8], wr_id.to_le_bytes());
        }
    }

    #[test]
    fn cq_port_validates_the_device_index_and_decodes_cqes() {
        let dma = TestDma::new_dyn();
        let (u, log) = uar();
        let ring = CqRing::alloc(&dma, 4).unwrap();
        let cq = ring
            .port(
                Bell::new(u.clone(), CqDoorbell::arm(3)),
                Bell::new(u.clone(), CqDoorbell::arm_solicited(3)),
            )
            .unwrap();
        // A second port stands in for the device (its producer side).
        let dev = ring
            .port(
                Bell::new(u.clone(), CqDoorbell::arm(3)),
                Bell::new(u, CqDoorbell::arm_solicited(3)),
            )
            .unwrap();
        assert_eq!(cq.ready(0), CqState::Empty);
        assert!(!cq.has_entries());
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&0x2_0000_0005u64.to_le_bytes());
        b[8] = 9;
        b[16] = 128;
        b[20] = 0;
        b[24..28].copy_from_slice(&4096u32.to_le_bytes());
        b[28..32].copy_from_slice(&0x77u32.to_le_bytes());
        b[36] = 4;
        for _ in 0..3 {
            dev.produce_for_test(&b);
        }
        assert_eq!(cq.ready(0), CqState::Ready(3));
        assert!(cq.has_entries());
        let c = cq.load(2);
        assert_eq!(
            c,
            CqeView {
                wr_id: 0x2_0000_0005,
                qp: 9,
                opcode: 128,
                status: 0,
                byte_len: 4096,
                ex: 0x77,
                wc_flags: 4,
            }
        );
        assert_eq!(cq.read_element(2), b);
        // Consume two: cons_head (@12) follows, the rest stays ready.
        cq.consume(cq.next(cq.next(0)));
        assert_eq!(cq.head(), 2);
        assert_eq!(cq.ready(2), CqState::Ready(1));
        // Indices wrap at 2N = 8.
        assert_eq!(cq.next(7), 0);
        // A device index outside [0, 2N), or more than N ahead, is corrupt (M14).
        let tail = cq.index(0);
        tail.store(8, Ordering::Relaxed);
        assert_eq!(cq.ready(2), CqState::Corrupt);
        tail.store(7, Ordering::Relaxed);
        assert_eq!(cq.ready(2), CqState::Corrupt, "5 ahead of a 4-entry ring");
        tail.store(6, Ordering::Relaxed);
        assert_eq!(cq.ready(2), CqState::Ready(4));
        log.after(4, || cq.arm(false));
        log.after(4, || cq.arm(true));
        assert_eq!(log.rung(), [(4, 0x4000_0003), (4, 0x2000_0003)]);
    }
}
