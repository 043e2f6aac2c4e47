//! Doorbells (§12): their values, bound to the mapped UAR page as an [`os::Bell`](Bell) (the
//! one writer of a doorbell) by [`bell`]. Call sites build a value (`QpDoorbell::send(handle)`)
//! and bind it once; offsets never appear outside this file.
#![allow(unsafe_code)]

use alloc::sync::Arc;

use crate::os::{Bell, Uar};

/// `PVRDMA_UAR_HANDLE_MASK`.
pub const HANDLE_MASK: u32 = 0x00FF_FFFF;

const QP_OFFSET: u32 = 0x0;
const CQ_OFFSET: u32 = 0x4;
const SRQ_OFFSET: u32 = 0x8;
const QP_SEND: u32 = 1 << 30;
const QP_RECV: u32 = 1 << 31;
const CQ_ARM: u32 = 1 << 30;
const CQ_ARM_SOL: u32 = 1 << 29;
const CQ_POLL: u32 = 1 << 31;
const SRQ_RECV: u32 = 1 << 30;

/// A doorbell: one 32-bit value at one UAR offset.
pub trait Doorbell: Copy {
    /// Byte offset in the UAR page.
    fn offset(self) -> u32;
    /// Value to store.
    fn value(self) -> u32;
}

/// QP doorbell (UAR 0x0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpDoorbell(u32);

impl QpDoorbell {
    /// New SQ WQEs up to `prod_tail`.
    pub const fn send(handle: u32) -> Self {
        QpDoorbell((handle & HANDLE_MASK) | QP_SEND)
    }
    /// New RQ WQEs.
    pub const fn recv(handle: u32) -> Self {
        QpDoorbell((handle & HANDLE_MASK) | QP_RECV)
    }
}

impl Doorbell for QpDoorbell {
    fn offset(self) -> u32 {
        QP_OFFSET
    }
    fn value(self) -> u32 {
        self.0
    }
}

/// CQ doorbell (UAR 0x4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqDoorbell(u32);

impl CqDoorbell {
    /// Notify on the next completion.
    pub const fn arm(handle: u32) -> Self {
        CqDoorbell((handle & HANDLE_MASK) | CQ_ARM)
    }
    /// Notify on the next solicited or error completion (M18).
    pub const fn arm_solicited(handle: u32) -> Self {
        CqDoorbell((handle & HANDLE_MASK) | CQ_ARM_SOL)
    }
    /// "Found empty": written by a poll that found the CQ empty, before it looks once more
    /// (Linux does the same; a device that fetches completions only when asked writes them
    /// before the store returns, M48; M17 otherwise ignores it).
    pub const fn poll(handle: u32) -> Self {
        CqDoorbell((handle & HANDLE_MASK) | CQ_POLL)
    }
}

impl Doorbell for CqDoorbell {
    fn offset(self) -> u32 {
        CQ_OFFSET
    }
    fn value(self) -> u32 {
        self.0
    }
}

/// SRQ doorbell (UAR 0x8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqDoorbell(u32);

impl SrqDoorbell {
    /// New SRQ WQEs up to the SRQ `prod_tail`.
    pub const fn recv(handle: u32) -> Self {
        SrqDoorbell((handle & HANDLE_MASK) | SRQ_RECV)
    }
}

impl Doorbell for SrqDoorbell {
    fn offset(self) -> u32 {
        SRQ_OFFSET
    }
    fn value(self) -> u32 {
        self.0
    }
}

/// `db` bound to the UAR page `uar` (which the bell co-owns).
pub fn bell(uar: Arc<Uar>, db: impl Doorbell) -> Bell {
    Bell::new(uar, db.offset(), db.value())
}

/// `db` bound to the UAR page that `owner` holds (`uar` projects it; the bell co-owns
/// `owner`).
pub fn bell_owned_by<K: Send + Sync + 'static>(
    owner: Arc<K>,
    uar: fn(&K) -> &Uar,
    db: impl Doorbell,
) -> Bell {
    Bell::owned_by(owner, uar, db.offset(), db.value())
}

/// A UAR page whose doorbells the unit tests of the writer and the reader record.
#[cfg(test)]
pub(crate) mod recording {
    use super::*;
    use core::ptr::NonNull;
    use std::boxed::Box;
    use std::sync::Mutex;
    use std::vec::Vec;

    /// Every doorbell rung on a test UAR page: `(offset, value)` of each store, as the
    /// page's hook saw them, or, in a `bare-doorbell` build (no hook), as read back from the
    /// page after each ring.
    #[derive(Clone)]
    pub(crate) struct Log {
        page: NonNull<u32>,
        #[cfg(not(feature = "bare-doorbell"))]
        hooked: Arc<Mutex<Vec<(u32, u32)>>>,
        seen: Arc<Mutex<Vec<(u32, u32)>>>,
    }

    impl Log {
        /// Records the store `ring` makes at `off` (read back from the page).
        pub(crate) fn after(&self, off: u32, ring: impl FnOnce()) {
            ring();
            // SAFETY: `off` < 4096 and 4-aligned: inside the leaked page.
            let at = unsafe { self.page.add(off as usize / 4) };
            // SAFETY: as above: a valid, aligned word of the page.
            let v = unsafe { at.read_volatile() };
            self.seen.lock().unwrap().push((off, v));
        }

        /// The doorbells rung, checked against the hook's record where it exists.
        pub(crate) fn rung(&self) -> Vec<(u32, u32)> {
            let seen = self.seen.lock().unwrap().clone();
            #[cfg(not(feature = "bare-doorbell"))]
            assert_eq!(*self.hooked.lock().unwrap(), seen);
            seen
        }
    }

    /// Every page handed out. A page lives as long as the test process (a `Uar` may outlive
    /// its `Log`); kept reachable from a static, it is not a leak to Miri's leak check.
    static PAGES: Mutex<Vec<core::sync::atomic::AtomicPtr<u32>>> = Mutex::new(Vec::new());

    /// A UAR page whose doorbells are recorded.
    pub(crate) fn uar() -> (Arc<Uar>, Log) {
        let page: &'static mut [u32; 1024] = Box::leak(Box::new([0u32; 1024]));
        // From the whole page, not `&mut page[0]`: that pointer could reach the first word only.
        let base = NonNull::from(page).cast::<u32>();
        PAGES
            .lock()
            .unwrap()
            .push(core::sync::atomic::AtomicPtr::new(base.as_ptr()));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_values() {
        assert_eq!(QpDoorbell::send(5).value(), 0x4000_0005);
        assert_eq!(QpDoorbell::recv(5).value(), 0x8000_0005);
        assert_eq!(QpDoorbell::send(0x1FF_FFFF).value(), 0x40FF_FFFF);
        assert_eq!(QpDoorbell::send(1).offset(), 0);
        assert_eq!(CqDoorbell::arm(3).value(), 0x4000_0003);
        assert_eq!(CqDoorbell::arm_solicited(3).value(), 0x2000_0003);
        assert_eq!(CqDoorbell::poll(3).value(), 0x8000_0003);
        assert_eq!(CqDoorbell::arm(3).offset(), 4);
        assert_eq!(SrqDoorbell::recv(9).value(), 0x4000_0009);
        assert_eq!(SrqDoorbell::recv(9).offset(), 8);
    }
}
