//! The global allocator and the panic handler of the image linked without the WDK (with
//! `--features wdk`, wdk-alloc and wdk-panic provide the same two things).
//!
//! Every build that targets Windows without the WDK uses these, the Windows-target check
//! included: an always-null allocator would let LTO prove that every allocation fails and
//! strip the driver down to its first one, so no such stand-in exists any more.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use super::imports::{ExAllocatePool2, ExFreePoolWithTag, KeBugCheckEx};
use super::ke::POOL_FLAG_NON_PAGED;

/// Pool tag 'Pvrd' (shown by `!poolused` as "Pvrd": MSVC's multi-character constant order).
pub const POOL_TAG: u32 = u32::from_le_bytes(*b"Pvrd");

/// What x64 pool guarantees for every allocation (`MEMORY_ALLOCATION_ALIGNMENT`).
const POOL_ALIGNMENT: usize = 16;

/// Non-paged pool through `ExAllocatePool2`: usable at IRQL <= DISPATCH_LEVEL, zeroed, and
/// fallible (null on exhaustion, which the driver's `try_box`/`KVec` report as
/// `OsError::NoMemory`).
pub struct NonPagedPool;

// SAFETY: `alloc` returns either null or a fresh pool block of at least `layout.size()` bytes
// aligned to 16 (refusing stricter alignments), and `dealloc` returns exactly such blocks.
unsafe impl GlobalAlloc for NonPagedPool {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() > POOL_ALIGNMENT {
            return core::ptr::null_mut();
        }
        // A zero-size request still needs a unique pointer: ask for one byte.
        let size = layout.size().max(1);
        // SAFETY: non-paged pool may be requested at IRQL <= DISPATCH_LEVEL, which is every
        // context this driver allocates in (never at DIRQL: ISRs only queue DPCs).
        unsafe { ExAllocatePool2(POOL_FLAG_NON_PAGED, size, POOL_TAG) }.cast()
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above (GlobalAlloc contract), with the same tag.
        unsafe { ExFreePoolWithTag(ptr.cast::<c_void>(), POOL_TAG) }
    }
}

/// Bug-check code of a driver panic: 'RPNC', as wdk-panic uses, so crash dumps read alike
/// whichever build produced the image.
pub const PANIC_BUGCHECK: u32 = u32::from_be_bytes(*b"RPNC");

/// A panic in kernel code is a bug check: there is no unwinding and nothing to return to.
/// Parameter 1 is the source line, for a first look at a dump without symbols.
pub fn bugcheck(info: &core::panic::PanicInfo<'_>) -> ! {
    let line = info.location().map_or(0, |l| l.line() as usize);
    // SAFETY: KeBugCheckEx may be called at any IRQL and does not return.
    unsafe { KeBugCheckEx(PANIC_BUGCHECK, line, 0, 0, 0) }
}
