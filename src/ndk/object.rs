//! The provider object framework (ndkpi.md §1.4–1.6, §5.1–5.2).
//!
//! Every provider object is a [`ProviderObject`]: `#[repr(C)]`, the consumer-visible
//! `NDK_xxx` (header + dispatch pointer) at offset 0, then a memory reference count, then the
//! object's state. The `NDK_xxx` pointer handed to the consumer is therefore also the
//! provider object's address, and a thunk recovers the state from it without ever reading
//! `Dispatch` back (§1.5: the consumer may overwrite it).
//!
//! Two counts, two questions:
//! - **Memory** ([`ObjRef`]): how many Rust handles keep the allocation alive. The consumer's
//!   handle is one of them, from creation until the close has drained; each thunk holds its
//!   own while it runs (§5.1: the consumer may close the object from inside a completion the
//!   provider is still delivering).
//! - **Close** ([`Lifetime`]): the consumer's open handle, every successor (§1.6), every
//!   request that will complete asynchronously and every event callback in progress. The
//!   close returns STATUS_SUCCESS when it drops the last of these and STATUS_PENDING
//!   otherwise; whoever drops the last one later tears the object down, calls CloseCompletion
//!   (the last callback for the object, §5.1), and only then releases the object's
//!   antecedents, so an antecedent's close never completes before a successor's
//!   CloseCompletion has returned (§5.2).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::error::{NdkError, NdkResult};
use crate::ndkpi::*;
use crate::os::SpinLock;

/// State of one kind of provider object.
pub trait NdkObject: Send + Sync + Sized {
    /// The consumer-visible `NDK_xxx` struct.
    type Ndk;
    /// Close bookkeeping of this object.
    fn lifetime(&self) -> &Lifetime;
    /// The close has drained: release device resources. Runs before CloseCompletion.
    fn teardown(&self) {}
    /// CloseCompletion has returned (or the close completed inline): drop this object's
    /// successor counts on its antecedents.
    fn release_antecedents(&self) {}
}

/// A provider object's dispatch table (the `Dispatch` pointer of its `NDK_xxx`): declared and
/// implemented in `dispatch/<object>.rs` with its thunks, so an object names its table as
/// `Self::TABLE` and the object core never imports the dispatch layer above it.
pub trait Dispatched: NdkObject {
    /// The table's ABI type (`NDK_xxx_DISPATCH`).
    type Table: 'static;
    /// The table.
    const TABLE: &'static Self::Table;
}

/// `#[repr(C)]`: `ndk` must stay at offset 0 (see the module docs). The `UnsafeCell` is what
/// lets the consumer write `Dispatch` (or its reserved header block) while Rust holds shared
/// references to the object.
#[repr(C)]
pub struct ProviderObject<T: NdkObject> {
    ndk: UnsafeCell<T::Ndk>,
    refs: AtomicUsize,
    state: T,
}

/// A counted handle to a provider object (an `Arc` with a fallible constructor and a known
/// data address).
pub struct ObjRef<T: NdkObject> {
    // INVARIANT: points to a live `ProviderObject<T>` allocated by `try_new`, and this handle
    // owns one count of its `refs`.
    ptr: NonNull<ProviderObject<T>>,
}

// SAFETY: the state is `Send + Sync` (trait bound). After publication the provider never
// writes `ndk` and reads only the header's `ObjectType`, which the consumer does not write
// (it owns only `NdkReserved` and may replace `Dispatch`), so sharing a handle across
// threads adds no data race.
unsafe impl<T: NdkObject> Send for ObjRef<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: NdkObject> Sync for ObjRef<T> {}

/// Fallible non-paged allocation through the OS seam (`crate::os::alloc::try_box`: failure
/// injection included). The object's memory is then owned by its [`ObjRef`] counts, so it
/// leaves the seam's live-allocation accounting.
pub fn try_box<T>(value: T) -> NdkResult<Box<T>> {
    crate::os::alloc::try_box(value)
        .map(crate::os::alloc::KBox::into_inner)
        .map_err(|_| NdkError::InsufficientResources)
}

/// Fallible `Vec` with `n` elements made by `f`; used for per-slot records at create time.
pub fn try_vec<T>(n: usize, mut f: impl FnMut() -> T) -> NdkResult<Box<[T]>> {
    if crate::os::alloc::injected_failure() {
        return Err(NdkError::InsufficientResources);
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| NdkError::InsufficientResources)?;
    for _ in 0..n {
        v.push(f());
    }
    Ok(v.into_boxed_slice())
}

/// A fresh object header: negotiated version, type set, reserved block zero (§1.4).
pub fn header(version: NDK_VERSION, ty: NDK_OBJECT_TYPE) -> NDK_OBJECT_HEADER {
    NDK_OBJECT_HEADER {
        Version: version,
        ObjectType: ty,
        NdkReserved: NDK_OBJECT_HEADER_RESERVED_BLOCK::ZERO,
    }
}

impl<T: NdkObject> ObjRef<T> {
    /// Allocates an object; `ndk` already carries its header and dispatch pointer.
    pub fn try_new(ndk: T::Ndk, state: T) -> NdkResult<Self> {
        let b = try_box(ProviderObject {
            ndk: UnsafeCell::new(ndk),
            refs: AtomicUsize::new(1),
            state,
        })?;
        // INVARIANT: fresh allocation with one count, owned by the new handle.
        Ok(ObjRef {
            ptr: NonNull::from(Box::leak(b)),
        })
    }

    fn obj(&self) -> &ProviderObject<T> {
        // SAFETY: type invariant: the object is live while this handle exists.
        unsafe { self.ptr.as_ref() }
    }

    /// The consumer-visible struct (also the provider object's address).
    ///
    /// Cast from the allocation's own pointer, never from `&self.ndk`: a pointer made from a
    /// reference to one field may only reach that field (Stacked Borrows), and every entry
    /// point casts the consumer's pointer back to the whole object.
    pub fn ndk_ptr(&self) -> *mut T::Ndk {
        // CAST: `ndk` is the first field of a `#[repr(C)]` struct and `UnsafeCell<N>` has the
        // layout of `N`, so the object and its `NDK_xxx` share an address.
        self.ptr.as_ptr().cast()
    }

    /// The object's header, the `NDK_OBJECT_HEADER*` consumers pass to close.
    pub fn header_ptr(&self) -> *mut NDK_OBJECT_HEADER {
        self.ndk_ptr().cast()
    }

    /// Hands this handle to the consumer: it becomes the consumer's count, reclaimed when the
    /// close drains.
    pub fn publish(self) -> *mut T::Ndk {
        let p = self.ndk_ptr();
        core::mem::forget(self);
        p
    }

    /// A new counted handle to the object behind a consumer pointer; `None` for null.
    ///
    /// # Safety
    /// `p` is null or was returned by [`ObjRef::publish`] for this `T`, and the object's close
    /// has not drained (the consumer contract of §5.2: no calls after close, except from
    /// completions this provider is delivering while holding its own handle).
    pub unsafe fn borrow(p: *mut T::Ndk) -> Option<Self> {
        // CAST: `ndk` is the first field of a `#[repr(C)]` struct and `UnsafeCell<N>` has the
        // layout of `N`, so the object and its `NDK_xxx` share an address.
        let ptr = NonNull::new(p.cast::<ProviderObject<T>>())?;
        // SAFETY: caller contract: the object is live.
        let obj = unsafe { ptr.as_ref() };
        obj.refs.fetch_add(1, Ordering::Relaxed);
        // INVARIANT: one count taken above.
        Some(ObjRef { ptr })
    }

    /// The object behind a consumer pointer, without taking a count; `None` for null. For
    /// the data-path functions (post, poll), which start no callback: the consumer does not
    /// close an object while one of its functions runs (ndkpi.md §5.2), so the object
    /// outlives the call.
    ///
    /// # Safety
    /// As [`ObjRef::borrow`], and the reference must not be used after the call into the
    /// provider that received `p` returns, nor across a callback into the consumer.
    #[inline(always)]
    pub unsafe fn peek<'a>(p: *mut T::Ndk) -> Option<&'a T> {
        let ptr = NonNull::new(p.cast::<ProviderObject<T>>())?;
        // SAFETY: caller contract: the object is live for the call.
        Some(unsafe { &ptr.as_ref().state })
    }

    /// Drops one close count (successor, request, callback); drains the object if it was the
    /// last one after a close.
    pub fn put(&self) {
        if self.lifetime().put() {
            self.finish(true);
        }
    }

    /// NDK_FN_CLOSE_OBJECT: never fails; STATUS_SUCCESS if nothing is outstanding (no
    /// callback), otherwise STATUS_PENDING and CloseCompletion once the last count drops.
    pub fn close(&self, completion: Option<(NDK_FN_CLOSE_COMPLETION, usize)>) -> NTSTATUS {
        match self.lifetime().close(completion) {
            CloseOutcome::Drained => {
                self.finish(false);
                STATUS_SUCCESS
            }
            CloseOutcome::Pending => STATUS_PENDING,
            // A second close breaks the consumer contract; the first one owns the teardown.
            CloseOutcome::AlreadyClosing => STATUS_SUCCESS,
        }
    }

    fn finish(&self, call_completion: bool) {
        let state: &T = self;
        state.teardown();
        let completion = if call_completion {
            state.lifetime().take_completion()
        } else {
            None
        };
        if let Some((cb, ctx)) = completion {
            upcall::close_completion(cb, ctx);
        }
        state.release_antecedents();
        // Reclaim the consumer's count (published at creation).
        // INVARIANT: `publish` forgot exactly this count, and a close drains exactly once.
        drop(ObjRef { ptr: self.ptr });
    }
}

impl<T: NdkObject> core::ops::Deref for ObjRef<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.obj().state
    }
}

impl<T: NdkObject> Clone for ObjRef<T> {
    fn clone(&self) -> Self {
        self.obj().refs.fetch_add(1, Ordering::Relaxed);
        // INVARIANT: one more count taken.
        ObjRef { ptr: self.ptr }
    }
}

impl<T: NdkObject> ObjRef<T> {
    /// The last count went away: frees the object (out of line, so the data path's drop of a
    /// borrowed handle stays one atomic decrement).
    #[cold]
    #[inline(never)]
    fn free_last(&mut self) {
        core::sync::atomic::fence(Ordering::Acquire);
        // SAFETY: called only after the last count was dropped (see `drop`), so no other
        // handle or reference exists, and the allocation came from `Box` in `try_new`.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

impl<T: NdkObject> Drop for ObjRef<T> {
    #[inline]
    fn drop(&mut self) {
        if self.obj().refs.fetch_sub(1, Ordering::Release) == 1 {
            self.free_last();
        }
    }
}

impl<T: NdkObject> ObjRef<T> {
    /// Gives this handle's count to the returned address (for lock-free tables and lists,
    /// [`super::qp_table`]); [`ObjRef::from_raw`] takes it back.
    pub(crate) fn into_raw(self) -> NonNull<ProviderObject<T>> {
        let p = self.ptr;
        core::mem::forget(self);
        p
    }

    /// The object's address (no count moves).
    pub(crate) fn as_raw(&self) -> NonNull<ProviderObject<T>> {
        self.ptr
    }

    /// Takes back the count [`ObjRef::into_raw`] gave to `p`.
    ///
    /// # Safety
    /// `p` came from `into_raw`, and its count is taken back only once.
    pub(crate) unsafe fn from_raw(p: NonNull<ProviderObject<T>>) -> Self {
        // INVARIANT: the count `into_raw` gave away moves back into a handle.
        ObjRef { ptr: p }
    }
}

impl<T: NdkObject> ProviderObject<T> {
    /// The object's state.
    pub(crate) fn state(&self) -> &T {
        &self.state
    }
}

impl<T: NdkObject> PartialEq for ObjRef<T> {
    fn eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}

/// Hand-off between a create function and the hardware's completion of it (§5.1).
///
/// The completion may run before the create function returns (the hardware answered inline)
/// or later (from the command-completion DPC). In the first case the create function returns
/// the object inline (STATUS_SUCCESS, no callback); in the second it returns STATUS_PENDING
/// and the completion calls CreateCompletion exactly once. The lock decides which, so the
/// consumer never sees both.
pub struct CreateHandoff<T: NdkObject> {
    state: SpinLock<Handoff<T>>,
    completion: NDK_FN_CREATE_COMPLETION,
    context: usize,
}

enum Handoff<T: NdkObject> {
    InCall,
    Inline(NdkResult<ObjRef<T>>),
    Returned,
    Done,
}

impl<T: NdkObject> CreateHandoff<T> {
    /// A hand-off for one create call.
    pub fn new(
        completion: NDK_FN_CREATE_COMPLETION,
        context: usize,
    ) -> NdkResult<alloc::sync::Arc<Self>> {
        crate::os::alloc::try_arc(CreateHandoff {
            state: SpinLock::new(Handoff::InCall),
            completion,
            context,
        })
        .map_err(|_| NdkError::InsufficientResources)
    }

    /// The hardware finished the create (successfully or not).
    pub fn complete(&self, r: NdkResult<ObjRef<T>>) {
        let deliver = {
            let mut g = self.state.lock();
            match core::mem::replace(&mut *g, Handoff::Done) {
                Handoff::InCall => {
                    *g = Handoff::Inline(r);
                    return;
                }
                Handoff::Returned => r,
                // A second completion would break "exactly once"; drop it.
                other => {
                    *g = other;
                    return;
                }
            }
        };
        let (status, header) = match deliver {
            Ok(obj) => (STATUS_SUCCESS, obj.publish().cast::<NDK_OBJECT_HEADER>()),
            Err(e) => (e.to_ntstatus(), core::ptr::null_mut()),
        };
        upcall::create_completion(self.completion, self.context, status, header);
    }

    /// The create function is returning: `Some(result)` if the hardware already completed
    /// (return it inline), `None` if the completion will call CreateCompletion (return
    /// STATUS_PENDING).
    pub fn finish_call(&self) -> Option<NdkResult<ObjRef<T>>> {
        let mut g = self.state.lock();
        match core::mem::replace(&mut *g, Handoff::Done) {
            Handoff::Inline(r) => Some(r),
            _ => {
                *g = Handoff::Returned;
                None
            }
        }
    }
}

/// Hand-off between a request function (NdkRegisterMr, NdkInitializeFastRegisterMr, …) and
/// the hardware's completion of it: the same inline-or-pending decision as
/// [`CreateHandoff`], ending in RequestCompletion exactly once when the call returned
/// STATUS_PENDING (§5.1).
pub struct RequestHandoff {
    state: SpinLock<Request>,
    completion: NDK_FN_REQUEST_COMPLETION,
    context: usize,
}

#[derive(Clone, Copy)]
enum Request {
    InCall,
    Inline(NTSTATUS),
    Returned,
    Done,
}

impl RequestHandoff {
    /// A hand-off for one request.
    pub fn new(
        completion: NDK_FN_REQUEST_COMPLETION,
        context: usize,
    ) -> NdkResult<alloc::sync::Arc<Self>> {
        crate::os::alloc::try_arc(RequestHandoff {
            state: SpinLock::new(Request::InCall),
            completion,
            context,
        })
        .map_err(|_| NdkError::InsufficientResources)
    }

    /// The request finished: its status is STATUS_SUCCESS or its error's.
    pub fn complete(&self, r: NdkResult<()>) {
        let status = super::error::status(r);
        let deliver = {
            let mut g = self.state.lock();
            match *g {
                Request::InCall => {
                    *g = Request::Inline(status);
                    false
                }
                Request::Returned => {
                    *g = Request::Done;
                    true
                }
                _ => false,
            }
        };
        if deliver {
            upcall::request_completion(self.completion, self.context, status);
        }
    }

    /// The request function is returning: the inline status, or STATUS_PENDING when the
    /// completion will call RequestCompletion.
    pub fn finish_call(&self) -> NTSTATUS {
        let mut g = self.state.lock();
        match *g {
            Request::Inline(st) => {
                *g = Request::Done;
                st
            }
            _ => {
                *g = Request::Returned;
                STATUS_PENDING
            }
        }
    }
}

/// Result of [`Lifetime::close`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseOutcome {
    /// Nothing was outstanding: the close completes inline.
    Drained,
    /// Successors, requests or callbacks remain; the last one completes the close.
    Pending,
    /// The object was already closing.
    AlreadyClosing,
}

const CLOSING: u64 = 1 << 63;

/// Close bookkeeping: the consumer's open handle + successors + pending requests +
/// callbacks in progress, and the close completion to call when they drain.
pub struct Lifetime {
    // Bit 63: close started. Bits 62..0: outstanding counts (1 = the open handle).
    state: AtomicU64,
    completion: SpinLock<Option<(NDK_FN_CLOSE_COMPLETION, usize)>>,
}

impl Default for Lifetime {
    fn default() -> Self {
        Self::new()
    }
}

impl Lifetime {
    /// An open object with nothing outstanding.
    pub const fn new() -> Self {
        Lifetime {
            state: AtomicU64::new(1),
            completion: SpinLock::new(None),
        }
    }

    /// Takes a count for a new successor, a pending request or a callback about to be
    /// delivered; fails once the close has started (no new callbacks after a close, §5.2).
    pub fn try_get(&self) -> bool {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s & CLOSING != 0 {
                    None
                } else {
                    s.checked_add(1).filter(|n| n & CLOSING == 0)
                }
            })
            .is_ok()
    }

    /// Drops a count; true if this drained a closing object (the caller finishes it).
    pub fn put(&self) -> bool {
        match self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s & !CLOSING == 0 { None } else { Some(s - 1) }
            }) {
            Ok(prev) => prev == (CLOSING | 1),
            Err(_) => false,
        }
    }

    /// Starts the close: stores the completion, drops the open handle.
    pub fn close(&self, completion: Option<(NDK_FN_CLOSE_COMPLETION, usize)>) -> CloseOutcome {
        if self.state.load(Ordering::Acquire) & CLOSING != 0 {
            return CloseOutcome::AlreadyClosing;
        }
        *self.completion.lock() = completion;
        let prev = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s & CLOSING != 0 || s == 0 {
                    None
                } else {
                    Some((s - 1) | CLOSING)
                }
            });
        match prev {
            Ok(1) => {
                // Completed inline: no CloseCompletion (§5.1).
                *self.completion.lock() = None;
                CloseOutcome::Drained
            }
            Ok(_) => CloseOutcome::Pending,
            Err(_) => CloseOutcome::AlreadyClosing,
        }
    }

    /// True once closed and drained.
    pub fn is_drained(&self) -> bool {
        self.state.load(Ordering::Acquire) == CLOSING
    }

    /// True once the close has started.
    pub fn is_closing(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLOSING != 0
    }

    /// Outstanding counts (tests and diagnostics).
    pub fn outstanding(&self) -> u64 {
        self.state.load(Ordering::Acquire) & !CLOSING
    }

    fn take_completion(&self) -> Option<(NDK_FN_CLOSE_COMPLETION, usize)> {
        self.completion.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe {
        lifetime: Lifetime,
        value: u64,
    }

    impl NdkObject for Probe {
        type Ndk = NDK_OBJECT_HEADER;
        fn lifetime(&self) -> &Lifetime {
            &self.lifetime
        }
    }

    /// Defect 8: the published pointer was made from `&self.ndk`, so its provenance covered
    /// the header only, and every entry point's cast back to the whole object read the
    /// counts and the state out of bounds of it (Miri, in `peek`: "trying to retag from <..>
    /// for SharedReadWrite permission at alloc..[0x28], but that tag does not exist in the
    /// borrow stack for this location", the tag "created by a SharedReadWrite retag at
    /// offsets [0x0..0x28]" in `ndk_ptr`).
    #[test]
    fn object_pointer_from_header_has_provenance_for_whole_object() {
        let version = NDK_VERSION { Major: 1, Minor: 2 };
        let obj = ObjRef::try_new(
            header(version, NdkObjectTypePd),
            Probe {
                lifetime: Lifetime::new(),
                value: 0x5eed_0bec,
            },
        )
        .expect("allocation");
        let consumer = obj.publish();
        // The consumer owns the reserved block and writes it while the provider holds
        // references to the object.
        let mark = core::ptr::without_provenance_mut(0x77);
        // SAFETY: `consumer` is the live published object; the reserved block is the
        // consumer's to write (ndkpi.md §1.3) and sits in the object's `UnsafeCell`.
        unsafe { (*consumer).NdkReserved.rf[3] = mark };

        // SAFETY: `consumer` was published for `Probe` and is not closed.
        let peeked = unsafe { ObjRef::<Probe>::peek(consumer) }.expect("non-null");
        assert_eq!(peeked.value, 0x5eed_0bec);
        // SAFETY: as above.
        let handle = unsafe { ObjRef::<Probe>::borrow(consumer) }.expect("non-null");
        assert_eq!(handle.value, 0x5eed_0bec);
        // SAFETY: as above; the provider reads the header's `ObjectType` only.
        let ty = unsafe { (*handle.header_ptr()).ObjectType };
        assert_eq!(ty, NdkObjectTypePd);
        // SAFETY: as above; the test reads back the consumer's own write.
        assert_eq!(unsafe { (*consumer).NdkReserved.rf[3] }, mark);
        assert_eq!(handle.close(None), STATUS_SUCCESS);
        assert!(handle.lifetime().is_drained());
        drop(handle);
    }

    #[test]
    fn close_with_nothing_outstanding_drains_inline() {
        let l = Lifetime::new();
        assert_eq!(l.close(None), CloseOutcome::Drained);
        assert!(l.is_drained());
        assert!(!l.try_get());
    }

    #[test]
    fn close_pends_until_last_count_drops() {
        let l = Lifetime::new();
        assert!(l.try_get());
        assert!(l.try_get());
        assert_eq!(l.close(None), CloseOutcome::Pending);
        assert!(!l.try_get(), "no new callbacks or successors after close");
        assert!(!l.put());
        assert_eq!(l.outstanding(), 1);
        assert!(l.put());
        assert!(l.is_drained());
        assert!(!l.put(), "underflow is refused, not wrapped");
        assert_eq!(l.close(None), CloseOutcome::AlreadyClosing);
    }

    #[test]
    fn put_without_close_never_drains() {
        let l = Lifetime::new();
        assert!(l.try_get());
        assert!(!l.put());
        assert_eq!(l.outstanding(), 1);
        assert!(!l.is_closing());
    }
}
