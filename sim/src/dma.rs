//! Host memory as the device sees it: a bus address space of registered regions.
//!
//! The device model reaches host (driver) memory only through [`DmaSpace`]. Host code registers a
//! region and hands the returned *bus address* to the device (DSR, commands, page directories), as
//! a real driver hands out DMA addresses. Bus addresses live in their own range (from
//! [`BUS_BASE`]), never equal to host pointers, and keep the host pointer's offset within its
//! 4 KiB page so page-aligned memory gets page-aligned bus addresses.
//!
//! Any access not entirely inside one registered region is a [`DmaFault`]: a driver bug shows up
//! as a counted fault and a device-level error, never as undefined behaviour or a panic.
//!
//! Memory registered with [`DmaSpace::register`] is *shared*: the driver accesses it with its own
//! atomic or volatile accesses while the device runs (ring indices, WQEs, CQEs), so every device
//! access to it is atomic: 32-bit indices with acquire/release ordering, bulk copies relaxed with
//! a fence. A bulk copy moves aligned 64-bit words (`AtomicU64`) and only the unaligned head and
//! tail byte by byte: each word is one relaxed load or store, so a copy racing with the other
//! side may tear at word boundaries, exactly as a byte-wise copy may tear at byte boundaries,
//! and no access is a data race. Bytes keep their memory order (native-endian words). The
//! copy's ordering comes from the fences, not from the width: an acquire fence after the loads
//! of a read pairs with the writer's release index store, a release fence before the stores of
//! a write pairs with the reader's acquire index load.
//!
//! A [`DmaBuffer`]'s memory is *owned* by the model: nothing but this space's accessors can
//! reach it (the buffer hands out no pointer or slice), and every accessor holds the space's
//! lock for the whole access. Two accesses to owned memory are therefore never concurrent (the
//! lock orders them, and its release/acquire gives the ordering the fences give above), so a
//! bulk copy there is a plain `copy_nonoverlapping`, at memcpy speed, and no access is a data
//! race either. Tests, benches and the test-utils host use owned memory; the driver's harness
//! registers shared memory.
//!
//! Regions are kept in a vector sorted by bus address (bus addresses only grow, so a new
//! region is appended) and found by binary search: several lookups per packet, and the
//! B-tree's range walk cost more than the rest of a small access. This is the only module of
//! the crate with `unsafe` code.
#![allow(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering, fence};

/// First bus address handed out; chosen far from typical user-space pointers.
pub const BUS_BASE: u64 = 0x0000_7e00_0000_0000;
const PAGE: u64 = 4096;

/// A device access outside registered memory, or a misaligned index access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaFault {
    /// Bus address of the faulting access.
    pub bus: u64,
    /// Length of the faulting access in bytes.
    pub len: usize,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    /// Bus address of byte 0.
    bus: u64,
    /// Host address with exposed provenance (see `register`).
    host: usize,
    len: usize,
    /// Owned memory (see the module docs): only this space's accessors reach it, under the lock.
    owned: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// Sorted by `bus` (see the module docs).
    regions: Vec<Region>,
    next_page: u64,
    bytes: usize,
}

/// Where a resolved access lands.
#[derive(Clone, Copy)]
struct Target {
    host: usize,
    owned: bool,
}

/// The bus address space shared by a host and one or more device models.
#[derive(Debug)]
pub struct DmaSpace {
    inner: Mutex<Inner>,
}

impl Default for DmaSpace {
    fn default() -> Self {
        Self::new()
    }
}

impl DmaSpace {
    /// An empty address space.
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                regions: Vec::new(),
                next_page: BUS_BASE,
                bytes: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves the map consistent (every update is a
        // single insert/remove), so poisoning is ignored.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers `len` bytes at `ptr` and returns their bus address.
    ///
    /// The bus address has the same offset within a 4 KiB page as `ptr`. A guard page separates
    /// consecutive regions so an overrun faults instead of landing in a neighbour.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes, and stay valid (not freed, not moved)
    /// until [`DmaSpace::unregister`] returns for this bus address or the `DmaSpace` is dropped.
    /// The memory may be accessed concurrently by other threads only through atomic or volatile
    /// accesses (the device model uses atomics).
    pub unsafe fn register(&self, ptr: *mut u8, len: usize) -> u64 {
        // SAFETY: the caller upholds `register`'s contract, which is `add_region`'s for shared
        // memory.
        unsafe { self.add_region(ptr, len, false) }
    }

    /// Registers owned memory (a [`DmaBuffer`]'s; see the module docs).
    ///
    /// # Safety
    ///
    /// As for [`register`](Self::register), and nothing may access the memory other than
    /// through this space until it is unregistered: no pointer to it is used, no reference to
    /// it exists.
    unsafe fn register_owned(&self, ptr: *mut u8, len: usize) -> u64 {
        // SAFETY: the caller upholds `register_owned`'s contract, `add_region`'s for owned memory.
        unsafe { self.add_region(ptr, len, true) }
    }

    /// Records a region; every later access trusts it.
    ///
    /// # Safety
    ///
    /// [`register`](Self::register)'s contract, and [`register_owned`](Self::register_owned)'s
    /// if `owned`.
    unsafe fn add_region(&self, ptr: *mut u8, len: usize, owned: bool) -> u64 {
        let mut inner = self.lock();
        let host = ptr.expose_provenance();
        let offset = (host as u64) & (PAGE - 1);
        let bus = inner.next_page + offset;
        let span_pages = (offset + len as u64).div_ceil(PAGE).max(1);
        // One unmapped guard page after each region.
        inner.next_page += (span_pages + 1) * PAGE;
        // `next_page` only grows, so `bus` is above every registered region: appending keeps
        // the vector sorted.
        inner.regions.push(Region {
            bus,
            host,
            len,
            owned,
        });
        inner.bytes += len;
        bus
    }

    /// Forgets the region registered at `bus`; returns false if there is none.
    pub fn unregister(&self, bus: u64) -> bool {
        let mut inner = self.lock();
        match inner.regions.binary_search_by_key(&bus, |r| r.bus) {
            Ok(i) => {
                let r = inner.regions.remove(i);
                inner.bytes -= r.len;
                true
            }
            Err(_) => false,
        }
    }

    /// Number of registered regions (leak checks).
    pub fn region_count(&self) -> usize {
        self.lock().regions.len()
    }

    /// Total bytes registered (leak checks).
    pub fn bytes_registered(&self) -> usize {
        self.lock().bytes
    }

    /// Where `[bus, bus + len)` lands if it lies entirely in one region.
    fn resolve(inner: &Inner, bus: u64, len: usize) -> Result<Target, DmaFault> {
        let fault = DmaFault { bus, len };
        // The last region starting at or below `bus`.
        let below = inner.regions.partition_point(|r| r.bus <= bus);
        let region = below
            .checked_sub(1)
            .and_then(|i| inner.regions.get(i))
            .ok_or(fault)?;
        let off = bus - region.bus;
        let end = off.checked_add(len as u64).ok_or(fault)?;
        if end > region.len as u64 {
            return Err(fault);
        }
        Ok(Target {
            // CAST: off < region.len, a usize.
            host: region.host + off as usize,
            owned: region.owned,
        })
    }

    /// Whether `len` bytes at bus address `bus` could be read or written now (the fault
    /// [`DmaSpace::read`] would return, without copying anything).
    pub fn check(&self, bus: u64, len: usize) -> Result<(), DmaFault> {
        Self::resolve(&self.lock(), bus, len).map(|_| ())
    }

    /// Copies `out.len()` bytes from bus address `bus`.
    pub fn read(&self, bus: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        let inner = self.lock();
        let Target { host, owned } = Self::resolve(&inner, bus, out.len())?;
        if owned {
            let src = std::ptr::with_exposed_provenance::<u8>(host);
            // SAFETY: `src..src + out.len()` lies in a live registered region (checked by
            // `resolve` with the lock held, so it cannot be unregistered meanwhile). The region
            // is owned: every other access to it also holds the lock, so none is concurrent with
            // this one, and no Rust reference points into it, so it cannot overlap `out`.
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        let (head, rest) = out.split_at_mut(unaligned_head(host, out.len()));
        for (i, b) in head.iter_mut().enumerate() {
            let p = std::ptr::with_exposed_provenance_mut::<u8>(host + i);
            // SAFETY: `p` lies inside a registered region (checked by `resolve` while the lock is
            // held, so it cannot be unregistered meanwhile); the region is valid memory by the
            // `register` contract, and u8 has no alignment requirement.
            let cell = unsafe { AtomicU8::from_ptr(p) };
            *b = cell.load(Ordering::Relaxed);
        }
        let words_at = host + head.len();
        let tail_at = words_at + rest.len() / 8 * 8;
        let mut words = rest.chunks_exact_mut(8);
        for (k, chunk) in words.by_ref().enumerate() {
            let p = std::ptr::with_exposed_provenance_mut::<u64>(words_at + 8 * k);
            // SAFETY: `words_at` is 8-byte aligned (`unaligned_head`) and these 8 bytes lie
            // inside the resolved range, in a live registered region as above.
            let cell = unsafe { AtomicU64::from_ptr(p) };
            chunk.copy_from_slice(&cell.load(Ordering::Relaxed).to_ne_bytes());
        }
        for (i, b) in words.into_remainder().iter_mut().enumerate() {
            let p = std::ptr::with_exposed_provenance_mut::<u8>(tail_at + i);
            // SAFETY: as for the head: inside the live resolved range; u8 needs no alignment.
            let cell = unsafe { AtomicU8::from_ptr(p) };
            *b = cell.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        Ok(())
    }

    /// Copies `data` to bus address `bus`.
    pub fn write(&self, bus: u64, data: &[u8]) -> Result<(), DmaFault> {
        let inner = self.lock();
        let Target { host, owned } = Self::resolve(&inner, bus, data.len())?;
        if owned {
            let dst = std::ptr::with_exposed_provenance_mut::<u8>(host);
            // SAFETY: as in `read`'s owned case: a live owned region, no concurrent access (all
            // of them hold the lock), and no reference into it that `data` could be.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
            return Ok(());
        }
        fence(Ordering::Release);
        let (head, rest) = data.split_at(unaligned_head(host, data.len()));
        for (i, b) in head.iter().enumerate() {
            let p = std::ptr::with_exposed_provenance_mut::<u8>(host + i);
            // SAFETY: as in `read`: inside a registered, live region; u8 needs no alignment.
            let cell = unsafe { AtomicU8::from_ptr(p) };
            cell.store(*b, Ordering::Relaxed);
        }
        let words_at = host + head.len();
        let words = rest.chunks_exact(8);
        let tail = words.remainder();
        for (k, chunk) in words.enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let p = std::ptr::with_exposed_provenance_mut::<u64>(words_at + 8 * k);
            // SAFETY: as in `read`: 8-byte aligned, inside the live resolved range.
            let cell = unsafe { AtomicU64::from_ptr(p) };
            cell.store(u64::from_ne_bytes(word), Ordering::Relaxed);
        }
        let tail_at = words_at + rest.len() / 8 * 8;
        for (i, b) in tail.iter().enumerate() {
            let p = std::ptr::with_exposed_provenance_mut::<u8>(tail_at + i);
            // SAFETY: as in `read`: inside a registered, live region; u8 needs no alignment.
            let cell = unsafe { AtomicU8::from_ptr(p) };
            cell.store(*b, Ordering::Relaxed);
        }
        Ok(())
    }

    fn atomic_u32(&self, inner: &Inner, bus: u64) -> Result<usize, DmaFault> {
        // Owned memory too gets an atomic access here: it costs nothing more, and the plain
        // copies above never run concurrently with it (the lock).
        let Target { host, .. } = Self::resolve(inner, bus, 4)?;
        if !host.is_multiple_of(4) {
            return Err(DmaFault { bus, len: 4 });
        }
        Ok(host)
    }

    /// Reads a shared 32-bit index with acquire ordering (later element reads see the data the
    /// other side wrote before publishing the index).
    pub fn read_u32(&self, bus: u64) -> Result<u32, DmaFault> {
        let inner = self.lock();
        let host = self.atomic_u32(&inner, bus)?;
        let p = std::ptr::with_exposed_provenance_mut::<u32>(host);
        // SAFETY: `p` is 4-byte aligned (checked) and its 4 bytes lie in a live registered region.
        let cell = unsafe { AtomicU32::from_ptr(p) };
        Ok(cell.load(Ordering::Acquire))
    }

    /// Writes a shared 32-bit index with release ordering (publishes earlier element writes).
    pub fn write_u32(&self, bus: u64, value: u32) -> Result<(), DmaFault> {
        let inner = self.lock();
        let host = self.atomic_u32(&inner, bus)?;
        let p = std::ptr::with_exposed_provenance_mut::<u32>(host);
        // SAFETY: as in `read_u32`.
        let cell = unsafe { AtomicU32::from_ptr(p) };
        cell.store(value, Ordering::Release);
        Ok(())
    }

    /// Reads a little-endian u64 (page-directory entries; not shared concurrently).
    pub fn read_u64(&self, bus: u64) -> Result<u64, DmaFault> {
        let mut b = [0u8; 8];
        self.read(bus, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// Bytes from host address `host` to the next 8-byte boundary, at most `len`: the part of a copy
/// done byte-wise before the aligned words.
fn unaligned_head(host: usize, len: usize) -> usize {
    host.wrapping_neg().rem_euclid(8).min(len)
}

/// One 4 KiB page; `Box<[Page]>` gives page-aligned host memory without `unsafe` allocation.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
pub struct Page(pub [u8; 4096]);

/// Page-aligned, zeroed host memory registered in a [`DmaSpace`] for its whole lifetime.
///
/// This is what a test uses as "DMA memory": the device sees it at [`DmaBuffer::bus`]; the host
/// reads and writes it through the same accessors, which serialize on the space's lock (owned
/// memory, see the module docs).
#[derive(Debug)]
pub struct DmaBuffer {
    space: std::sync::Arc<DmaSpace>,
    host: *mut Page,
    pages: usize,
    bus: u64,
}

// SAFETY: the raw pointer is owned exclusively by this value (from `Box::into_raw`) and all
// accesses go through `DmaSpace`'s accessors, which serialize on its lock.
unsafe impl Send for DmaBuffer {}
// SAFETY: as above; `&DmaBuffer` only allows accesses through the `DmaSpace`.
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    /// Allocates `pages` zeroed pages (at least one) and registers them.
    pub fn new(space: &std::sync::Arc<DmaSpace>, pages: usize) -> Self {
        let pages = pages.max(1);
        let boxed: Box<[Page]> = vec![Page([0; 4096]); pages].into_boxed_slice();
        let host = Box::into_raw(boxed).cast::<Page>();
        // SAFETY: `host` came from `Box::into_raw` and is freed only in `Drop`, after
        // `unregister`, so it stays valid while registered; this buffer hands out no pointer or
        // slice into it, so only the space's accessors reach it (owned memory).
        let bus = unsafe { space.register_owned(host.cast::<u8>(), pages * 4096) };
        Self {
            space: space.clone(),
            host,
            pages,
            bus,
        }
    }

    /// Bus address of byte 0.
    pub fn bus(&self) -> u64 {
        self.bus
    }

    /// Bus address of page `i`.
    pub fn page_bus(&self, i: usize) -> u64 {
        self.bus + (i as u64) * 4096
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.pages * 4096
    }

    /// Always false (at least one page).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Reads `out.len()` bytes at `off`. Panics (test helper) if out of range.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        self.space
            .read(self.bus + off as u64, out)
            .expect("DmaBuffer::read out of range");
    }

    /// Reads `len` bytes at `off` into a new vector.
    pub fn read_vec(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(off, &mut v);
        v
    }

    /// Writes `data` at `off`. Panics (test helper) if out of range.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.space
            .write(self.bus + off as u64, data)
            .expect("DmaBuffer::write out of range");
    }

    /// Atomic acquire read of a u32 at `off`.
    pub fn read_u32(&self, off: usize) -> u32 {
        self.space
            .read_u32(self.bus + off as u64)
            .expect("DmaBuffer::read_u32 out of range")
    }

    /// Atomic release write of a u32 at `off`.
    pub fn write_u32(&self, off: usize, v: u32) {
        self.space
            .write_u32(self.bus + off as u64, v)
            .expect("DmaBuffer::write_u32 out of range");
    }

    /// Writes a little-endian u64 at `off`.
    pub fn write_u64(&self, off: usize, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    /// Reads a little-endian u64 at `off`.
    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        self.space.unregister(self.bus);
        let slice = std::ptr::slice_from_raw_parts_mut(self.host, self.pages);
        // SAFETY: `slice` is exactly the pointer and length produced by `Box::into_raw` in `new`;
        // it is no longer registered, so no device access can reach it after this point.
        drop(unsafe { Box::from_raw(slice) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bus_addresses_are_distinct_page_aligned_and_not_host_pointers() {
        let s = Arc::new(DmaSpace::new());
        let a = DmaBuffer::new(&s, 2);
        let b = DmaBuffer::new(&s, 1);
        assert_eq!(a.bus() % 4096, 0);
        assert_eq!(b.bus() % 4096, 0);
        assert!(a.bus() >= BUS_BASE);
        assert_ne!(a.bus(), a.host as u64);
        // Guard page: b starts at least one page after a's end.
        assert!(b.bus() >= a.bus() + 3 * 4096);
        assert_eq!(s.region_count(), 2);
        assert_eq!(s.bytes_registered(), 3 * 4096);
        drop(a);
        drop(b);
        assert_eq!(s.region_count(), 0);
        assert_eq!(s.bytes_registered(), 0);
    }

    #[test]
    fn accesses_outside_regions_fault() {
        let s = Arc::new(DmaSpace::new());
        let a = DmaBuffer::new(&s, 1);
        let mut buf = [0u8; 8];
        assert!(s.read(a.bus() + 4092, &mut buf).is_err());
        assert!(s.read(a.bus() + 4088, &mut buf).is_ok());
        assert!(s.read(a.bus() + 4096, &mut buf[..1]).is_err());
        assert!(s.read(0, &mut buf).is_err());
        assert!(s.read(u64::MAX - 2, &mut buf).is_err());
        assert_eq!(
            s.read_u32(a.bus() + 2),
            Err(DmaFault {
                bus: a.bus() + 2,
                len: 4
            })
        );
        assert!(s.write_u32(a.bus() + 4096, 1).is_err());
        let bus = a.bus();
        drop(a);
        assert!(s.read(bus, &mut buf).is_err());
        assert!(!s.unregister(bus));
    }

    /// Writes and reads back every offset 0..9 and length 0..=40 at `bus` (64 bytes of memory).
    fn check_every_alignment_and_length(s: &DmaSpace, bus: u64) {
        let pattern: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0xA5).collect();
        for off in 0..9usize {
            for len in 0..=40usize {
                s.write(bus, &[0xEE; 64]).unwrap();
                s.write(bus + off as u64, &pattern[..len]).unwrap();
                let mut want = vec![0xEE; 64];
                want[off..off + len].copy_from_slice(&pattern[..len]);
                let mut whole = vec![0; 64];
                s.read(bus, &mut whole).unwrap();
                assert_eq!(whole, want, "write at {off}, {len} bytes");
                let mut got = vec![0; len];
                s.read(bus + off as u64, &mut got).unwrap();
                assert_eq!(got, &want[off..off + len], "read at {off}, {len} bytes");
            }
        }
    }

    #[test]
    fn copies_of_every_alignment_and_length_move_exactly_their_bytes() {
        let s = Arc::new(DmaSpace::new());
        // Owned memory: plain copies.
        let a = DmaBuffer::new(&s, 1);
        assert!(DmaSpace::resolve(&s.lock(), a.bus(), 64).unwrap().owned);
        check_every_alignment_and_length(&s, a.bus());
        // Shared memory, as the driver's harness registers it: word-wise atomic copies.
        let shared: Box<[AtomicU64]> = (0..8).map(|_| AtomicU64::new(0)).collect();
        let ptr = shared.as_ptr().cast::<u8>().cast_mut();
        // SAFETY: `shared` outlives the registration (unregistered below) and is accessed
        // only atomically (through the space).
        let bus = unsafe { s.register(ptr, 64) };
        assert!(!DmaSpace::resolve(&s.lock(), bus, 64).unwrap().owned);
        check_every_alignment_and_length(&s, bus);
        assert!(s.unregister(bus));
        drop(shared);
    }

    #[test]
    fn round_trip_through_bus_and_host_views() {
        let s = Arc::new(DmaSpace::new());
        let a = DmaBuffer::new(&s, 1);
        s.write(a.bus() + 10, &[1, 2, 3]).unwrap();
        assert_eq!(a.read_vec(9, 5), vec![0, 1, 2, 3, 0]);
        a.write_u32(16, 0xdead_beef);
        assert_eq!(s.read_u32(a.bus() + 16), Ok(0xdead_beef));
        assert_eq!(s.read_u64(a.bus() + 16), Ok(0xdead_beef));
    }
}
