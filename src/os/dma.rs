//! DMA-coherent memory (style.md §6, after Rust-for-Linux `rust/kernel/dma.rs`).
//!
//! A [`DmaBuffer`] is CPU-owned: the device does not know its address yet, so plain `&mut`
//! access is sound. [`DmaBuffer::share`] turns it into a [`SharedDma`] once its logical
//! address is about to be handed to the device (DSR registers, a page directory that goes into
//! a command, ...). From then on the CPU may touch it only through volatile accesses and
//! atomic ring indices ([`DmaView`]). Dropping either frees the region through its allocator;
//! for a `SharedDma` that is legal only once the device can no longer access it (after RESET
//! or the destroy command's response), which the owning objects guarantee by field order.
//!
//! Logical addresses are device bus addresses, never host pointers.

use alloc::sync::Arc;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::OsError;

/// Page size of the device and of every DMA region.
pub const PAGE_SIZE: usize = 4096;
/// log2([`PAGE_SIZE`]).
pub const PAGE_SHIFT: u32 = 12;
const _: () = assert!(1 << PAGE_SHIFT == PAGE_SIZE);

static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn live() -> (usize, usize) {
    (
        LIVE_BUFFERS.load(Ordering::Relaxed),
        LIVE_BYTES.load(Ordering::Relaxed),
    )
}

/// A region returned by a [`DmaAllocator`].
#[derive(Debug)]
pub struct DmaRegion {
    /// CPU virtual address of the first byte.
    pub cpu: NonNull<u8>,
    /// Device logical (bus) address of the first byte.
    pub logical: u64,
    /// Length in bytes, a multiple of [`PAGE_SIZE`].
    pub len: usize,
}

// SAFETY: a DmaRegion is a plain description of memory owned by whoever holds it; the memory
// is not thread-affine (non-paged pool / host heap).
unsafe impl Send for DmaRegion {}

/// Source of DMA-coherent memory. Windows: `NdisMAllocateSharedMemory`; host tests: the harness
/// (registers the memory with the device model and returns the model's bus address).
///
/// # Safety
///
/// Implementors guarantee that a region returned by `alloc(len)`:
/// 1. points to `len` rounded up to [`PAGE_SIZE`] bytes (reported in `len`) that are readable
///    and writable by the CPU, not aliased by any other live region, and stay valid until the
///    region is passed to `free`;
/// 2. is zeroed, and both `cpu` and `logical` are `PAGE_SIZE`-aligned.
pub unsafe trait DmaAllocator: Send + Sync {
    /// Allocates at least `len` bytes, or `None`.
    fn alloc(&self, len: usize) -> Option<DmaRegion>;
    /// Returns a region obtained from `alloc`.
    ///
    /// May be called at DISPATCH_LEVEL: the last reference to a queue's rings can go in a
    /// CQ poll or NdkArmCq (a torn-down QP released by its CQ's poller, `ndk::qp_table`) or
    /// in NdkCloseObject. `NdisMFreeSharedMemory` needs PASSIVE_LEVEL, so the Windows
    /// implementation must defer such frees to a work item.
    fn free(&self, region: DmaRegion);
}

/// CPU-owned DMA memory: the device does not know its address yet.
pub struct DmaBuffer {
    // INVARIANT: `region` came from `allocator.alloc` (see DmaAllocator's contract) and is
    // returned to it exactly once, in `Drop`.
    region: Option<DmaRegion>,
    allocator: Arc<dyn DmaAllocator>,
}

impl DmaBuffer {
    /// Allocates `len` bytes (rounded up to whole pages), zeroed.
    pub fn alloc(allocator: &Arc<dyn DmaAllocator>, len: usize) -> Result<Self, OsError> {
        if len == 0 || super::alloc::injected_failure() {
            return Err(OsError::NoMemory);
        }
        let region = allocator.alloc(len).ok_or(OsError::NoMemory)?;
        if region.len < len
            || !region.len.is_multiple_of(PAGE_SIZE)
            || !region.logical.is_multiple_of(PAGE_SIZE as u64)
            || !(region.cpu.as_ptr() as usize).is_multiple_of(PAGE_SIZE)
        {
            allocator.free(region);
            return Err(OsError::NoMemory);
        }
        LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(region.len, Ordering::Relaxed);
        Ok(DmaBuffer {
            region: Some(region),
            allocator: allocator.clone(),
        })
    }

    fn region(&self) -> (NonNull<u8>, u64, usize) {
        match &self.region {
            Some(r) => (r.cpu, r.logical, r.len),
            None => (NonNull::dangling(), 0, 0),
        }
    }

    /// Device logical address.
    pub fn logical(&self) -> u64 {
        self.region().1
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.region().2
    }

    /// Always false (allocation of zero bytes fails); present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory, CPU-owned.
    pub fn as_slice(&self) -> &[u8] {
        let (cpu, _, len) = self.region();
        // SAFETY: the region is valid for `len` bytes and initialised (zeroed at allocation);
        // the device does not know the address yet, so nothing else writes it (type invariant).
        unsafe { core::slice::from_raw_parts(cpu.as_ptr(), len) }
    }

    /// The memory, CPU-owned and writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (cpu, _, len) = self.region();
        // SAFETY: as in `as_slice`, and `&mut self` gives exclusive access.
        unsafe { core::slice::from_raw_parts_mut(cpu.as_ptr(), len) }
    }

    /// Hands the buffer to the device side: from now on only volatile/atomic access.
    pub fn share(self) -> SharedDma {
        SharedDma { buf: self }
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        if let Some(region) = self.region.take() {
            LIVE_BUFFERS.fetch_sub(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(region.len, Ordering::Relaxed);
            self.allocator.free(region);
        }
    }
}

/// DMA memory whose address the device knows: volatile and atomic access only.
pub struct SharedDma {
    buf: DmaBuffer,
}

// SAFETY: all CPU access to the memory goes through volatile/atomic operations on `&self`,
// so sharing between threads cannot create a data race in the Rust sense beyond what the
// device itself does; the region is owned by this value.
unsafe impl Sync for SharedDma {}
// SAFETY: owning handle to non-thread-affine memory.
unsafe impl Send for DmaBuffer {}
// SAFETY: `&DmaBuffer` only gives shared slices; concurrent readers are fine.
unsafe impl Sync for DmaBuffer {}

impl SharedDma {
    /// Device logical address.
    pub fn logical(&self) -> u64 {
        self.buf.logical()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The whole buffer as a volatile view.
    pub fn view(&self) -> DmaView<'_> {
        let (cpu, _, len) = self.buf.region();
        DmaView {
            ptr: cpu,
            len,
            _life: PhantomData,
        }
    }
}

/// A bounds-checked window on shared DMA memory. Accessors never panic: an access outside the
/// window reads 0 / writes nothing (views are sized by construction so that does not happen;
/// [`DmaView::sub`] is the checked constructor).
#[derive(Clone, Copy)]
pub struct DmaView<'a> {
    // INVARIANT: `ptr .. ptr + len` lies inside a live DMA region borrowed for 'a.
    ptr: NonNull<u8>,
    len: usize,
    _life: PhantomData<&'a SharedDma>,
}

impl<'a> DmaView<'a> {
    /// A view on plain host memory (tests and encoders into local arrays).
    pub fn from_mut_slice(s: &'a mut [u8]) -> Self {
        DmaView {
            ptr: NonNull::from(&mut *s).cast(),
            len: s.len(),
            _life: PhantomData,
        }
    }

    /// Length of the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The window's first byte, for the data-path writer and reader, which precompute element
    /// addresses (`pvrdma::wq`, `pvrdma::cq`); valid for `len` bytes while the borrowed region
    /// lives.
    pub fn as_non_null(&self) -> NonNull<u8> {
        self.ptr
    }

    /// True when the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes at `off`, if inside this window.
    pub fn sub(&self, off: usize, len: usize) -> Option<DmaView<'a>> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `off <= self.len`, so the result stays within (or one past) the region.
        let ptr = unsafe { self.ptr.add(off) };
        Some(DmaView {
            ptr,
            len,
            _life: PhantomData,
        })
    }

    fn at<const N: usize>(&self, off: usize) -> Option<*mut u8> {
        let end = off.checked_add(N)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `off + N <= len`: in bounds of the window (type invariant).
        Some(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// Volatile byte read.
    pub fn read_u8(&self, off: usize) -> u8 {
        let mut b = [0u8; 1];
        self.read_bytes(off, &mut b);
        b[0]
    }

    /// Volatile little-endian u16 read.
    pub fn read_u16(&self, off: usize) -> u16 {
        let mut b = [0u8; 2];
        self.read_bytes(off, &mut b);
        u16::from_le_bytes(b)
    }

    /// Volatile little-endian u32 read (one 32-bit access when aligned).
    pub fn read_u32(&self, off: usize) -> u32 {
        match self.at::<4>(off) {
            Some(p) if (p as usize).is_multiple_of(4) => {
                // SAFETY: in bounds (checked by `at`) and 4-byte aligned.
                u32::from_le(unsafe { core::ptr::read_volatile(p.cast::<u32>()) })
            }
            _ => {
                let mut b = [0u8; 4];
                self.read_bytes(off, &mut b);
                u32::from_le_bytes(b)
            }
        }
    }

    /// Volatile little-endian u64 read.
    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read_bytes(off, &mut b);
        u64::from_le_bytes(b)
    }

    /// Volatile copy out of the window; `out` is left zeroed where out of bounds.
    pub fn read_bytes(&self, off: usize, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = match off.checked_add(i).and_then(|o| self.at::<1>(o)) {
                // SAFETY: in bounds (checked by `at`).
                Some(p) => unsafe { core::ptr::read_volatile(p) },
                None => 0,
            };
        }
    }

    /// Volatile copy of the `W` little-endian 64-bit words at `off`: one bounds check for the
    /// block, then `W` aligned 64-bit loads (a CQE is eight loads, not 64 checked byte reads).
    /// `None` when the block is not inside the window or `off` is not 8-byte aligned.
    pub fn read_words<const W: usize>(&self, off: usize) -> Option<[u64; W]> {
        let bytes = W.checked_mul(8)?;
        let end = off.checked_add(bytes)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `off <= end <= len`: in bounds of the window (type invariant).
        let p = unsafe { self.ptr.as_ptr().add(off) }.cast::<u64>();
        if !p.is_aligned() {
            return None;
        }
        let mut out = [0u64; W];
        for (i, o) in out.iter_mut().enumerate() {
            // SAFETY: word `i < W` ends at `off + 8i + 8 <= end <= len`; `p` is aligned.
            *o = u64::from_le(unsafe { core::ptr::read_volatile(p.wrapping_add(i)) });
        }
        Some(out)
    }

    /// Volatile copy of `data` to `off` with one bounds check for the block and 64-bit
    /// volatile stores when `off` and the length allow (WQE headers and SGEs); returns false
    /// and writes nothing when the block is not inside the window.
    pub fn write_block(&self, off: usize, data: &[u8]) -> bool {
        let Some(end) = off.checked_add(data.len()) else {
            return false;
        };
        if end > self.len {
            return false;
        }
        // SAFETY: `off <= end <= len`: in bounds of the window (type invariant).
        let p = unsafe { self.ptr.as_ptr().add(off) };
        if data.len().is_multiple_of(8) && (p as usize).is_multiple_of(8) {
            for (i, chunk) in data.chunks_exact(8).enumerate() {
                let mut w = [0u8; 8];
                w.copy_from_slice(chunk);
                // SAFETY: word `i` ends at `8i + 8 <= data.len()`, inside `off..end`, which
                // is in bounds; `p` is 8-byte aligned.
                unsafe {
                    core::ptr::write_volatile(
                        p.cast::<u64>().wrapping_add(i),
                        u64::from_ne_bytes(w),
                    )
                }
            }
        } else {
            for (i, d) in data.iter().enumerate() {
                // SAFETY: `i < data.len()`, so `off + i < end <= len`.
                unsafe { core::ptr::write_volatile(p.wrapping_add(i), *d) }
            }
        }
        true
    }

    /// Volatile byte write.
    pub fn write_u8(&self, off: usize, v: u8) {
        self.write_bytes(off, &[v]);
    }

    /// Volatile little-endian u16 write.
    pub fn write_u16(&self, off: usize, v: u16) {
        self.write_bytes(off, &v.to_le_bytes());
    }

    /// Volatile little-endian u32 write (one 32-bit access when aligned).
    pub fn write_u32(&self, off: usize, v: u32) {
        match self.at::<4>(off) {
            Some(p) if (p as usize).is_multiple_of(4) => {
                // SAFETY: in bounds (checked by `at`) and 4-byte aligned.
                unsafe { core::ptr::write_volatile(p.cast::<u32>(), v.to_le()) }
            }
            _ => self.write_bytes(off, &v.to_le_bytes()),
        }
    }

    /// Volatile little-endian u64 write.
    pub fn write_u64(&self, off: usize, v: u64) {
        self.write_bytes(off, &v.to_le_bytes());
    }

    /// Volatile copy into the window; bytes out of bounds are dropped.
    pub fn write_bytes(&self, off: usize, data: &[u8]) {
        for (i, d) in data.iter().enumerate() {
            if let Some(p) = off.checked_add(i).and_then(|o| self.at::<1>(o)) {
                // SAFETY: in bounds (checked by `at`).
                unsafe { core::ptr::write_volatile(p, *d) }
            }
        }
    }

    /// Zeroes the window.
    pub fn zero(&self) {
        for off in 0..self.len {
            self.write_u8(off, 0);
        }
    }

    /// The 4-byte-aligned u32 at `off` as an atomic (ring indices shared with the device).
    pub fn atomic_u32(&self, off: usize) -> Option<&'a AtomicU32> {
        let p = self.at::<4>(off)?;
        if !(p as usize).is_multiple_of(core::mem::align_of::<AtomicU32>()) {
            return None;
        }
        // SAFETY: in bounds, aligned, valid for 'a; all CPU accesses to ring-index words go
        // through atomics, and the device's accesses are 32-bit aligned stores/loads.
        Some(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }
}

#[cfg(test)]
pub(crate) mod test_alloc {
    //! Host DMA for unit tests: page-aligned std allocations whose logical address is a fake
    //! bus address (a counter far from any host pointer).
    use super::*;
    use std::alloc::{Layout, alloc_zeroed, dealloc};
    use std::sync::Mutex;
    use std::vec::Vec;

    pub struct TestDma {
        next: Mutex<u64>,
        live: Mutex<Vec<(u64, usize, usize)>>, // (logical, cpu, len)
    }

    pub const FAKE_BASE: u64 = 0x7_0000_0000;

    impl TestDma {
        pub fn new_dyn() -> Arc<dyn DmaAllocator> {
            Arc::new(Self::raw())
        }
        pub fn raw() -> Self {
            TestDma {
                next: Mutex::new(FAKE_BASE),
                live: Mutex::new(Vec::new()),
            }
        }
        /// Host pointer of a logical address handed out earlier (the fake device side).
        pub fn cpu_of(&self, logical: u64) -> Option<*mut u8> {
            let live = self.live.lock().unwrap();
            live.iter().find_map(|&(l, c, len)| {
                (logical >= l && logical < l + len as u64)
                    .then(|| (c + (logical - l) as usize) as *mut u8)
            })
        }
        pub fn live_count(&self) -> usize {
            self.live.lock().unwrap().len()
        }
    }

    // SAFETY: regions are fresh zeroed page-aligned std allocations, unaliased until freed.
    unsafe impl DmaAllocator for TestDma {
        fn alloc(&self, len: usize) -> Option<DmaRegion> {
            let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
            let layout = Layout::from_size_align(len, PAGE_SIZE).ok()?;
            // SAFETY: layout has non-zero size.
            let p = unsafe { alloc_zeroed(layout) };
            let cpu = NonNull::new(p)?;
            let mut next = self.next.lock().unwrap();
            let logical = *next;
            *next += len as u64 + PAGE_SIZE as u64;
            self.live.lock().unwrap().push((logical, p as usize, len));
            Some(DmaRegion { cpu, logical, len })
        }
        fn free(&self, region: DmaRegion) {
            self.live
                .lock()
                .unwrap()
                .retain(|&(l, _, _)| l != region.logical);
            let layout = Layout::from_size_align(region.len, PAGE_SIZE).unwrap();
            // SAFETY: allocated above with this layout.
            unsafe { dealloc(region.cpu.as_ptr(), layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_alloc::TestDma;
    use super::*;

    #[test]
    fn buffer_is_zeroed_aligned_and_freed() {
        let raw = Arc::new(TestDma::raw());
        let dma: Arc<dyn DmaAllocator> = raw.clone();
        let mut b = DmaBuffer::alloc(&dma, 100).unwrap();
        assert_eq!(b.len(), PAGE_SIZE);
        assert_eq!(b.logical() % PAGE_SIZE as u64, 0);
        assert_ne!(b.logical(), b.as_slice().as_ptr() as u64);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[8] = 0x11;
        let s = b.share();
        let v = s.view();
        assert_eq!(v.read_u32(8), 0x11);
        v.write_u64(16, 0x0102_0304_0506_0708);
        assert_eq!(v.read_u8(16), 8);
        assert_eq!(v.read_u32(20), 0x0102_0304);
        assert_eq!(v.read_u32(4094), 0, "straddling the end reads zero-filled");
        v.write_u32(4095, 0xFFFF_FFFF);
        assert_eq!(v.read_u8(4095), 0xFF);
        assert!(v.sub(4090, 7).is_none());
        let a = v.atomic_u32(12).unwrap();
        a.store(9, Ordering::Release);
        assert_eq!(v.read_u32(12), 9);
        assert!(v.atomic_u32(13).is_none());
        // Block accessors: one bounds check per block, wide accesses, nothing out of bounds.
        assert!(v.write_block(64, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]));
        assert_eq!(
            v.read_words::<2>(64),
            Some([0x0807_0605_0403_0201, 0x100F_0E0D_0C0B_0A09])
        );
        assert!(
            v.write_block(81, &[0xAA, 0xBB, 0xCC]),
            "unaligned block, byte stores"
        );
        assert_eq!(v.read_u32(80), 0xCCBB_AA00);
        assert!(
            !v.write_block(4090, &[0xEE; 8]),
            "a block past the end writes nothing"
        );
        assert_eq!(v.read_u8(4090), 0);
        assert!(!v.write_block(usize::MAX, &[1]));
        assert_eq!(v.read_words::<1>(4088), Some([0xFF00_0000_0000_0000]));
        assert_eq!(v.read_words::<2>(4088), None, "past the end");
        assert_eq!(v.read_words::<1>(65), None, "unaligned");
        assert_eq!(v.read_words::<1>(usize::MAX), None);
        assert_eq!(raw.live_count(), 1);
        assert_eq!(
            raw.cpu_of(s.logical() + 8),
            Some(v.sub(8, 1).unwrap().ptr.as_ptr())
        );
        drop(s);
        assert_eq!(raw.live_count(), 0);
    }
}
