//! QPs by device handle, as the CQ pollers see them: a CQE names its QP by device handle,
//! and the poller finds the QP with a few loads, without a lock or a count, however many
//! QPs share the CQ.
//!
//! Two tables:
//! - [`CqQps`], one per CQ: the CQ's own QPs by handle residue (the first residue, or the
//!   next one after a collision). The fast path reads only this: one masked load and the
//!   QP's handle. Only QPs whose sends complete on this CQ are in it, so nothing else is
//!   checked.
//! - [`QpTable`], one per device: every QP by handle, with the handles of its two CQs. The
//!   general path falls back on it (a QP whose residues were both taken, or whose receives
//!   alone complete on the CQ); a poller of CQ `c` accepts a slot's QP only if `c` is one of
//!   its CQs, which it checks on the slot itself, so it never dereferences a QP of another
//!   CQ (a CQE is device memory and may name any handle). The poller then checks that the
//!   CQE's queue completes on `c`.
//!
//! Polls are serialized per CQ (ndkpi.md §5.4) but not across CQs, and a QP may close while
//! its CQs are polled. Memory safety without counts on the poll path rests on three rules:
//! - The device table's slot owns one count of its QP. At the QP's teardown (writers take
//!   locks) the QP leaves both tables and the slot's count moves to the [`Graveyard`] of each
//!   of the QP's CQs.
//! - Only that CQ's poller empties its graveyard, and only where it holds no QP reference:
//!   NdkArmCq (never concurrent with a poll of the CQ, §5.4), the start of the general path,
//!   a device-table lookup. So a poller that found the QP before it left the tables keeps
//!   it alive for as long as it uses it. A torn-down QP's memory thus goes at its CQ's next
//!   arm, receive, failure or flush completion, or close.
//! - The CQ's teardown empties its graveyard: no poll runs after the close (§5.2), and a CQ
//!   closes only after its QPs have (§1.6), so every QP of the CQ is in it by then.

use alloc::boxed::Box;
use core::ptr::{NonNull, null_mut};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use super::error::{NdkError, NdkResult};
use super::object::{ObjRef, ProviderObject, try_box, try_vec};
use super::qp::Qp;
use crate::os::SpinLock;

/// A QP's address, valid as the module docs say.
pub(crate) type RawQp = NonNull<ProviderObject<Qp>>;

struct Entry {
    /// Null, or a QP this slot owns one count of.
    qp: AtomicPtr<ProviderObject<Qp>>,
    /// The QP's CQ handles: send in the low half, receive in the high half.
    cqs: AtomicU64,
}

/// QPs by device handle.
pub(crate) struct QpTable {
    writers: SpinLock<()>,
    slots: Box<[Entry]>,
}

impl QpTable {
    /// Room for handles `0..n`.
    pub(crate) fn new(n: u32) -> NdkResult<Self> {
        Ok(QpTable {
            writers: SpinLock::new(()),
            slots: try_vec(n as usize, || Entry {
                qp: AtomicPtr::new(null_mut()),
                cqs: AtomicU64::new(0),
            })?,
        })
    }

    /// Registers `qp` under `handle`, completing on CQs `send_cq` and `recv_cq`.
    ///
    /// # Errors
    /// NdkError::Device for a handle outside the table or already in use (the device
    /// misbehaves).
    pub(crate) fn insert(
        &self,
        handle: u32,
        qp: &ObjRef<Qp>,
        send_cq: u32,
        recv_cq: u32,
    ) -> NdkResult<()> {
        let _w = self.writers.lock();
        let slot = self.slots.get(handle as usize).ok_or(NdkError::Device)?;
        if !slot.qp.load(Ordering::Relaxed).is_null() {
            return Err(NdkError::Device);
        }
        // Release on both: a poller that reads these CQ handles also sees the emptying of
        // the slot that preceded them (see `lookup`).
        slot.cqs.store(
            u64::from(send_cq) | u64::from(recv_cq) << 32,
            Ordering::Release,
        );
        slot.qp
            .store(qp.clone().into_raw().as_ptr(), Ordering::Release);
        Ok(())
    }

    /// Empties `handle` if it still holds `qp` (a device that reused a handle cannot make
    /// one QP's teardown unregister another), returning the slot's count.
    pub(crate) fn remove_exact(&self, handle: u32, qp: &Qp) -> Option<ObjRef<Qp>> {
        let _w = self.writers.lock();
        let slot = self.slots.get(handle as usize)?;
        let p = NonNull::new(slot.qp.load(Ordering::Relaxed))?;
        // SAFETY: a non-null slot owns a count, and only writers (serialized by the lock
        // held here) drop it.
        if !core::ptr::eq(unsafe { p.as_ref() }.state(), qp) {
            return None;
        }
        slot.qp.store(null_mut(), Ordering::Release);
        // SAFETY: the slot's count, given by `into_raw` in `insert`, moves to the handle.
        Some(unsafe { ObjRef::from_raw(p) })
    }

    /// For the poller of CQ `cq`: the QP registered under `handle`, if it completes on `cq`.
    /// Dereferencing the result is sound until that poller next empties its graveyard
    /// (module docs).
    #[inline(always)]
    pub(crate) fn lookup(&self, handle: u32, cq: u32) -> Option<RawQp> {
        let slot = self.slots.get(handle as usize)?;
        let p = slot.qp.load(Ordering::Acquire);
        let cqs = slot.cqs.load(Ordering::Acquire);
        // The CQ handles are `p`'s only if the slot still holds `p` after reading them: a
        // slot emptied and refilled meanwhile holds another address, or (the allocator
        // reused the memory) a QP that those handles do describe.
        if slot.qp.load(Ordering::Relaxed) != p {
            return None;
        }
        let p = NonNull::new(p)?;
        // CAST: the two halves of `cqs`.
        (cqs as u32 == cq || (cqs >> 32) as u32 == cq).then_some(p)
    }
}

impl Drop for QpTable {
    fn drop(&mut self) {
        for s in self.slots.iter() {
            if let Some(p) = NonNull::new(s.qp.swap(null_mut(), Ordering::Acquire)) {
                // SAFETY: the slot's count (from `insert`), dropped once.
                drop(unsafe { ObjRef::from_raw(p) });
            }
        }
    }
}

/// A QP's links in its CQs' graveyards (one per CQ; a QP whose CQs are one uses the first).
#[derive(Default)]
pub(crate) struct GraveLinks([AtomicPtr<ProviderObject<Qp>>; 2]);

impl GraveLinks {
    /// The link for the CQ that is the QP's send CQ (`send`) or only its receive CQ.
    pub(crate) fn link(&self, send: bool) -> &AtomicPtr<ProviderObject<Qp>> {
        let [first, second] = &self.0;
        if send { first } else { second }
    }
}

/// QPs a CQ's poller must let go (module docs): a lock-free stack that closing QPs push
/// onto and the poller takes whole.
pub(crate) struct Graveyard {
    head: AtomicPtr<ProviderObject<Qp>>,
    /// The CQ's handle: which of a QP's links it uses.
    cq: u32,
}

impl Graveyard {
    /// The graveyard of CQ `cq`.
    pub(crate) const fn new(cq: u32) -> Self {
        Graveyard {
            head: AtomicPtr::new(null_mut()),
            cq,
        }
    }

    /// Hands one count of `qp` (a QP completing on this CQ) to the CQ's poller.
    pub(crate) fn push(&self, qp: ObjRef<Qp>) {
        let p = qp.into_raw();
        // SAFETY: the count just given to `p` keeps the QP alive.
        let link = unsafe { p.as_ref() }.state().grave_link(self.cq);
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            link.store(head, Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                p.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Whether nothing waits (the poller's test before it drains).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// The CQ's poller (or its teardown) drops every count handed over.
    pub(crate) fn drain(&self) {
        let mut next = self.head.swap(null_mut(), Ordering::Acquire);
        while let Some(p) = NonNull::new(next) {
            // SAFETY: each entry owns the count `push` gave it; the link was written before
            // the entry was published (release/acquire on `head`).
            next = unsafe { p.as_ref() }
                .state()
                .grave_link(self.cq)
                .load(Ordering::Relaxed);
            // SAFETY: that count, taken back once.
            drop(unsafe { ObjRef::from_raw(p) });
        }
    }
}

impl Drop for Graveyard {
    fn drop(&mut self) {
        self.drain();
    }
}

/// One generation of a [`CqQps`] table: `e.len()` is a power of two; `older` owns the
/// generations before it (kept until the CQ goes: a poller may still read one).
struct Residues {
    e: Box<[AtomicPtr<ProviderObject<Qp>>]>,
    older: Option<Box<Residues>>,
}

/// What [`CqQps`]' writers share (under its lock).
struct Binding {
    /// QPs bound.
    count: usize,
    /// The current generation (`None` only before the first bind).
    current: Option<Box<Residues>>,
}

/// The QPs completing on one CQ, by device handle modulo a power of two: the poller's
/// first lookup is one masked load, and needs no check beyond the QP's own handle, because
/// only QPs of this CQ are in it (each unbinds, then goes to this CQ's graveyard, at its
/// teardown). A QP whose two residues are taken (handles are dense, so this is rare) is
/// found through the device's [`QpTable`] instead. The table doubles when half full; older
/// generations stay allocated until the CQ goes (they add up to less than the current one).
pub(crate) struct CqQps {
    /// The current generation's `len − 1` (0 with no table).
    mask: AtomicU32,
    /// The current generation's first entry (a dangling-free sentinel with no table: see
    /// `EMPTY`).
    entries: AtomicPtr<AtomicPtr<ProviderObject<Qp>>>,
    writers: SpinLock<Binding>,
}

/// The one-entry table a `CqQps` reads before its first bind (always null).
static EMPTY: AtomicPtr<ProviderObject<Qp>> = AtomicPtr::new(null_mut());

/// Largest generation: handles are below 65536 (M5, M10).
const MAX_RESIDUES: usize = 1 << 16;

impl CqQps {
    pub(crate) fn new() -> Self {
        CqQps {
            mask: AtomicU32::new(0),
            entries: AtomicPtr::new(core::ptr::from_ref(&EMPTY).cast_mut()),
            writers: SpinLock::new(Binding {
                count: 0,
                current: None,
            }),
        }
    }

    /// The poller's fast lookup: the QP of this CQ with device handle `handle` (the low half
    /// of a CQE's `qp`), if at its first residue (the usual place: a QP is at its second
    /// only after a collision, see [`Self::find`]). Dereferencing the result is sound until
    /// the poller next empties the CQ's graveyard (module docs).
    #[inline(always)]
    pub(crate) fn find_first(&self, handle: u64) -> Option<RawQp> {
        let (e, mask) = self.table();
        Self::hit(e, handle, handle & mask)
    }

    /// [`Self::find_first`], then the second residue.
    #[inline(always)]
    pub(crate) fn find(&self, handle: u64) -> Option<RawQp> {
        let (e, mask) = self.table();
        match Self::hit(e, handle, handle & mask) {
            Some(p) => Some(p),
            None => Self::second(e, handle, mask),
        }
    }

    /// The current table's first entry and mask.
    #[inline(always)]
    fn table(&self) -> (*mut AtomicPtr<ProviderObject<Qp>>, u64) {
        // The mask first: a writer publishes a larger table before its mask, so the mask
        // read here never exceeds the table read after it (tables only grow).
        let mask = u64::from(self.mask.load(Ordering::Acquire));
        (self.entries.load(Ordering::Acquire), mask)
    }

    /// The second residue (`handle + 1`), out of line: used only after a collision (the
    /// first residue is never empty while the second holds a QP of it: see `unbind`).
    #[cold]
    #[inline(never)]
    fn second(e: *mut AtomicPtr<ProviderObject<Qp>>, handle: u64, mask: u64) -> Option<RawQp> {
        Self::hit(e, handle, handle.wrapping_add(1) & mask)
    }

    /// The QP at entry `i` (≤ the mask `e` was read with) if its handle is `handle`.
    #[inline(always)]
    fn hit(e: *mut AtomicPtr<ProviderObject<Qp>>, handle: u64, i: u64) -> Option<RawQp> {
        // CAST: masked by the caller, at most 65535.
        let p = Self::entry(e, i as usize)?;
        // SAFETY: only QPs of this CQ are in the table, alive until this poller empties
        // the graveyard they go to after leaving it (module docs).
        (unsafe { p.as_ref() }.state().live_handle() == handle).then_some(p)
    }

    /// Entry `i` of the table at `e`.
    #[inline(always)]
    fn entry(e: *mut AtomicPtr<ProviderObject<Qp>>, i: usize) -> Option<RawQp> {
        // SAFETY: `e` is `EMPTY` (mask 0) or the first entry of a generation of at least
        // `mask + 1` entries (see `table`), and `i` ≤ mask, so the entry is in bounds...
        let slot = unsafe { e.add(i) };
        // SAFETY: ...and no generation is freed while `self` lives.
        NonNull::new(unsafe { &*slot }.load(Ordering::Acquire))
    }

    /// Binds `qp` (a QP of CQ `cq`, with device handle `handle`) if its sends complete on
    /// `cq`: at the first free of its two residues, growing the table first when half full.
    /// With both residues taken, or after an allocation failure, the QP is found through
    /// the device table. A QP whose receives alone complete on `cq` is never bound: the
    /// fast path trusts this table without further checks and retires only sends, so a
    /// send CQE on the QP's receive CQ must not find it there (the general path, which
    /// finds it through the device table, checks each queue's CQ).
    pub(crate) fn bind(&self, qp: &ObjRef<Qp>, handle: u32, cq: u32) {
        if qp.cq_handles().0 != cq {
            return;
        }
        let mut w = self.writers.lock();
        w.count += 1;
        let len = w.current.as_ref().map_or(0, |r| r.e.len());
        if w.count * 2 > len && len < MAX_RESIDUES {
            let _ = Self::grow(&mut w, (len * 2).max(4));
            if let Some(r) = &w.current {
                // CAST: `len` ≤ 65536.
                let mask = (r.e.len() - 1) as u32;
                // The table, then its mask (see `table`).
                self.entries
                    .store(r.e.as_ptr().cast_mut(), Ordering::Release);
                self.mask.store(mask, Ordering::Release);
            }
        }
        let Some(r) = &w.current else {
            return;
        };
        let _ = place(&r.e, handle, qp.as_raw());
    }

    /// Unbinds `qp` (handle `handle`) at its teardown, before it goes to the graveyard.
    /// A QP sitting at its second residue next to the freed entry moves to its first (and so
    /// on along), so a first residue is never empty while its second holds a QP of it.
    pub(crate) fn unbind(&self, qp: &Qp, handle: u32) {
        let mut w = self.writers.lock();
        w.count = w.count.saturating_sub(1);
        let Some(r) = &w.current else {
            return;
        };
        let e = &r.e;
        let mask = e.len() - 1;
        let Some(mut hole) = residues(handle, e.len()).into_iter().find(|&i| {
            e.get(i).is_some_and(|s| {
                let p = s.load(Ordering::Relaxed);
                // SAFETY: a bound QP is alive until it is unbound here (its teardown).
                NonNull::new(p).is_some_and(|p| core::ptr::eq(unsafe { p.as_ref() }.state(), qp))
            })
        }) else {
            return;
        };
        loop {
            let next = (hole + 1) & mask;
            let moved = e
                .get(next)
                .and_then(|s| NonNull::new(s.load(Ordering::Relaxed)));
            // SAFETY: as above, for the QP bound at `next`.
            let home = moved.map(|p| unsafe { p.as_ref() }.state().handle() as usize & mask);
            let (Some(dst), Some(src)) = (e.get(hole), e.get(next)) else {
                return;
            };
            match moved {
                Some(p) if home == Some(hole) && next != hole => {
                    // A poller between the two stores finds it at either place.
                    dst.store(p.as_ptr(), Ordering::Release);
                    src.store(null_mut(), Ordering::Release);
                    hole = next;
                }
                _ => {
                    dst.store(null_mut(), Ordering::Release);
                    return;
                }
            }
        }
    }

    /// A generation of `len` entries holding every QP of the current one that lands on a
    /// free residue.
    fn grow(w: &mut Binding, len: usize) -> NdkResult<()> {
        let e: Box<[AtomicPtr<ProviderObject<Qp>>]> = try_vec(len, || AtomicPtr::new(null_mut()))?;
        if let Some(old) = &w.current {
            for s in old.e.iter() {
                let Some(p) = NonNull::new(s.load(Ordering::Relaxed)) else {
                    continue;
                };
                // SAFETY: bound QPs are alive until unbound, which takes this lock.
                let h = unsafe { p.as_ref() }.state().handle();
                let _ = place(&e, h, p);
            }
        }
        let mut next = try_box(Residues { e, older: None })?;
        next.older = w.current.take();
        w.current = Some(next);
        Ok(())
    }
}

/// The two residues of `handle` in a table of `len` (a power of two) entries.
fn residues(handle: u32, len: usize) -> [usize; 2] {
    let h = handle as usize;
    [h & (len - 1), h.wrapping_add(1) & (len - 1)]
}

/// Stores `p` at the first free residue of `handle` in `e` (writers only, under the lock);
/// false when both are taken.
fn place(e: &[AtomicPtr<ProviderObject<Qp>>], handle: u32, p: RawQp) -> bool {
    for i in residues(handle, e.len()) {
        if let Some(slot) = e.get(i).filter(|s| s.load(Ordering::Relaxed).is_null()) {
            slot.store(p.as_ptr(), Ordering::Release);
            return true;
        }
    }
    false
}
