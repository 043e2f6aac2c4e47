//! The memory descriptor list, `struct _MDL` (windows-build.md §6), the `Mm*` accessor macros
//! as functions that read only the MDL's own fields, and the one walker of MDL chains: the
//! (virtual address, PFN) pages NdkRegisterMr and NdkBuildLam map (ndkpi.md §5.7).
//!
//! The MDL is a Windows kernel structure, so it is declared here, in the OS seam at the
//! bottom of the crate; `crate::ndkpi` re-exports it with the rest of the ABI and asserts its
//! x64 layout (`ndkpi/layout.rs`).
//!
//! Only the `MDL` structures and their PFN arrays are read; the described buffer never is (for
//! NDK its virtual address is an index, ndkpi.md §5.7), so addresses are returned as values.
//! Every MDL the walk enters is validated ([`MdlError::Malformed`]), and a chain must be
//! virtually contiguous (each MDL's `StartVa + ByteOffset` equals the previous MDL's end), else
//! [`MdlError::NotContiguous`]. Where a chain boundary falls inside a page, that page appears
//! in both MDLs; it is yielded once, and both PFNs must agree.
#![allow(non_snake_case, non_camel_case_types)]

use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::NonNull;

pub use super::dma::{PAGE_SHIFT, PAGE_SIZE};

/// `PFN_NUMBER` (`ULONG_PTR`): a physical page number.
pub type PFN_NUMBER = usize;

/// `struct _MDL` (x64: 0x30 bytes, align 8). The PFN array (`PFN_NUMBER` entries, one per
/// page spanned by `StartVa + ByteOffset .. + ByteCount`) follows the structure in memory.
/// Offsets 0x0C–0x0F are padding in the public header; PDB layouts name them as below.
/// `Size` and `MdlFlags` are `CSHORT`s.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MDL {
    pub Next: *mut MDL,
    pub Size: i16,
    pub MdlFlags: i16,
    pub AllocationProcessorNumber: u16,
    pub Reserved: u16,
    pub Process: *mut c_void,
    pub MappedSystemVa: *mut c_void,
    pub StartVa: *mut c_void,
    pub ByteCount: u32,
    pub ByteOffset: u32,
}

/// `MappedSystemVa` holds a valid system mapping.
pub const MDL_MAPPED_TO_SYSTEM_VA: i16 = 0x0001;
/// The pages are locked (probed and locked, or built for nonpaged memory).
pub const MDL_PAGES_LOCKED: i16 = 0x0002;
/// The buffer is nonpaged pool; `MappedSystemVa` is valid.
pub const MDL_SOURCE_IS_NONPAGED_POOL: i16 = 0x0004;
/// A partial MDL (IoBuildPartialMdl) describing part of another MDL's buffer.
pub const MDL_PARTIAL: i16 = 0x0010;

/// `BYTE_OFFSET(Va)`: offset of `va` within its page.
#[inline]
pub const fn BYTE_OFFSET(va: usize) -> u32 {
    (va & (PAGE_SIZE - 1)) as u32
}

/// `ADDRESS_AND_SIZE_TO_SPAN_PAGES(Va, Size)`: pages spanned by `size` bytes at `va`.
/// Computed in `u64`, where `0xFFF + u32::MAX + 0xFFF` cannot overflow.
#[inline]
pub const fn ADDRESS_AND_SIZE_TO_SPAN_PAGES(va: usize, size: u32) -> u32 {
    ((BYTE_OFFSET(va) as u64 + size as u64 + (PAGE_SIZE as u64 - 1)) >> PAGE_SHIFT) as u32
}

/// Pages spanned by `length` bytes at `va`, in 64 bits (`None` on overflow).
pub const fn span_pages(va: u64, length: u64) -> Option<u64> {
    let page = PAGE_SIZE as u64;
    match (va & (page - 1)).checked_add(length) {
        Some(end) => match end.checked_add(page - 1) {
            Some(b) => Some(b >> PAGE_SHIFT),
            None => None,
        },
        None => None,
    }
}

/// `MmGetMdlBaseVa`: the page-aligned `StartVa`.
#[inline]
pub const fn MmGetMdlBaseVa(mdl: &MDL) -> *mut c_void {
    mdl.StartVa
}

/// `MmGetMdlVirtualAddress`: `StartVa + ByteOffset`, as a value (an index for NDK).
#[inline]
pub fn MmGetMdlVirtualAddress(mdl: &MDL) -> usize {
    (mdl.StartVa as usize).wrapping_add(mdl.ByteOffset as usize)
}

/// `MmGetMdlByteCount`.
#[inline]
pub const fn MmGetMdlByteCount(mdl: &MDL) -> u32 {
    mdl.ByteCount
}

/// `MmGetMdlByteOffset`.
#[inline]
pub const fn MmGetMdlByteOffset(mdl: &MDL) -> u32 {
    mdl.ByteOffset
}

/// `MmGetMdlPfnArray`: the address right after the MDL, where the PFN array starts. Only
/// computed, not read; the caller must know the MDL came with its array (`Size`).
///
/// A raw pointer, not `&MDL`: the result may be read only with the provenance of `mdl`, and
/// a pointer made from a reference to the structure reaches the structure alone (Stacked
/// Borrows), never the array after it.
#[inline]
pub fn MmGetMdlPfnArray(mdl: *const MDL) -> *const PFN_NUMBER {
    mdl.wrapping_add(1).cast()
}

/// Pages described by the MDL: `ADDRESS_AND_SIZE_TO_SPAN_PAGES(MmGetMdlVirtualAddress,
/// ByteCount)`, the PFN array length.
#[inline]
pub fn mdl_page_count(mdl: &MDL) -> u32 {
    ADDRESS_AND_SIZE_TO_SPAN_PAGES(MmGetMdlVirtualAddress(mdl), mdl.ByteCount)
}

/// Why an MDL chain was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MdlError {
    /// `StartVa` not page aligned, `ByteOffset` ≥ 4096, `ByteCount` 0, `Size` too small for
    /// the PFN array, an address overflow, a PFN beyond 52 bits, a page shared by two MDLs
    /// with different PFNs, or a region of 0 bytes asked for.
    Malformed,
    /// The next MDL does not start where the previous one ended.
    NotContiguous,
    /// The chain ends before the region asked for does.
    TooShort,
}

/// One page of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdlPage {
    /// Page-aligned virtual address of the page.
    pub va: u64,
    /// Its page frame number (below 2^52). What address a device reaches it at is the
    /// caller's mapping to make (`pvrdma::verbs::Verbs::page_address`).
    pub pfn: u64,
}

/// One MDL of a consumer's chain, held by the consumer's own pointer (or the `Next` before it),
/// whose provenance covers the PFN array after the structure: a pointer made from an `&MDL`
/// would reach the 0x30 bytes of the structure only.
#[derive(Clone, Copy, Debug)]
struct MdlPtr<'a> {
    // INVARIANT: a valid MDL followed by its PFN array, unchanged for 'a (contract of
    // `MdlChain::from_ptr`).
    ptr: NonNull<MDL>,
    chain: PhantomData<&'a MDL>,
}

impl<'a> MdlPtr<'a> {
    fn new(p: *const MDL) -> Option<Self> {
        // INVARIANT: `p` is the chain's first MDL or a `Next` of one (contract of `from_ptr`).
        Some(MdlPtr {
            ptr: NonNull::new(p.cast_mut())?,
            chain: PhantomData,
        })
    }

    /// The structure's fields (not the PFN array: see [`MdlPtr::pfn`]).
    fn mdl(self) -> &'a MDL {
        // SAFETY: a valid, unchanging MDL for 'a (type invariant).
        unsafe { self.ptr.as_ref() }
    }

    fn next(self) -> Option<Self> {
        Self::new(self.mdl().Next)
    }

    /// PFN `i` of the array after the MDL.
    ///
    /// # Safety
    /// `i < mdl_page_count(self.mdl())`, the length of the array (contract of `from_ptr`).
    unsafe fn pfn(self, i: u32) -> PFN_NUMBER {
        let array = MmGetMdlPfnArray(self.ptr.as_ptr());
        // SAFETY: `i` is inside the PFN array (caller contract), which `ptr`'s provenance
        // covers (type invariant).
        let slot = unsafe { array.add(i as usize) };
        // SAFETY: in bounds (above); the array follows an 8-aligned 0x30-byte MDL, so it is
        // aligned for the 8-byte PFN_NUMBER.
        unsafe { slot.read() }
    }
}

/// A consumer's MDL chain, readable for `'a`.
#[derive(Clone, Copy, Debug)]
pub struct MdlChain<'a> {
    first: MdlPtr<'a>,
}

/// The first `length` bytes of an [`MdlChain`], checked to be covered by valid, virtually
/// contiguous MDLs: the region NdkRegisterMr registers and NdkBuildLam maps.
#[derive(Clone, Copy, Debug)]
pub struct MdlRegion<'a> {
    chain: MdlChain<'a>,
    va: u64,
    length: u64,
    pages: usize,
    /// MDLs holding the region's bytes (the first ones of the chain).
    mdls: usize,
}

/// Iterator over the pages of an MDL chain (see [`MdlChain::pages`]). After an error it
/// yields `None`.
pub struct MdlPages<'a> {
    cur: Option<MdlPtr<'a>>,
    /// Page index inside `cur`; `None` before `cur` was validated.
    index: Option<u32>,
    npages: u32,
    /// End VA of the previous MDL.
    prev_end: Option<u64>,
    /// End VA of the current MDL.
    end: u64,
    last: Option<MdlPage>,
    failed: bool,
    /// MDLs still to be walked, the current one included (`None`: to the end of the chain).
    mdls_left: Option<usize>,
    /// The walk ends at the first page at or above this VA.
    end_page: u64,
}

/// Validates `m` as a walk enters it after an MDL that ended at `prev_end`; returns its page
/// count and end VA.
fn enter(m: &MDL, prev_end: Option<u64>) -> Result<(u32, u64), MdlError> {
    let start_va = m.StartVa as u64;
    if !start_va.is_multiple_of(PAGE_SIZE as u64)
        || m.ByteOffset as usize >= PAGE_SIZE
        || m.ByteCount == 0
    {
        return Err(MdlError::Malformed);
    }
    let va = MmGetMdlVirtualAddress(m) as u64;
    let end = va
        .checked_add(u64::from(m.ByteCount))
        .ok_or(MdlError::Malformed)?;
    let npages = mdl_page_count(m);
    let need = u64::from(npages) * 8 + core::mem::size_of::<MDL>() as u64;
    if (m.Size as u16 as u64) < need {
        return Err(MdlError::Malformed);
    }
    if let Some(prev) = prev_end
        && prev != va
    {
        return Err(MdlError::NotContiguous);
    }
    Ok((npages, end))
}

impl<'a> MdlChain<'a> {
    /// The chain starting at `first`; `None` for null.
    ///
    /// # Safety
    ///
    /// Every MDL reachable through `Next` from `first` must be a valid, readable `MDL`
    /// followed in memory by its PFN array of `ADDRESS_AND_SIZE_TO_SPAN_PAGES(VA, ByteCount)`
    /// entries, and stay unchanged for `'a`. The chain must end with a null `Next`.
    pub unsafe fn from_ptr(first: *const MDL) -> Option<Self> {
        Some(MdlChain {
            first: MdlPtr::new(first)?,
        })
    }

    /// `MmGetMdlVirtualAddress` of the first MDL: where the chain starts.
    pub fn va(self) -> u64 {
        MmGetMdlVirtualAddress(self.first.mdl()) as u64
    }

    /// Every page of the chain, in order.
    pub fn pages(self) -> MdlPages<'a> {
        MdlPages {
            cur: Some(self.first),
            index: None,
            npages: 0,
            prev_end: None,
            end: 0,
            last: None,
            failed: false,
            mdls_left: None,
            end_page: u64::MAX,
        }
    }

    /// The virtual span `(start VA, byte count)` of the whole chain, validating every MDL and
    /// its PFNs.
    ///
    /// # Errors
    ///
    /// [`MdlError`] as the walk finds it.
    pub fn span(self) -> Result<(u64, u64), MdlError> {
        for p in self.pages() {
            p?;
        }
        Ok((self.va(), self.cover(u64::MAX)?.0))
    }

    /// The first `length` bytes of the chain. Only the MDLs that hold them are entered (and
    /// validated); their PFNs are checked as [`MdlRegion::pages`] reads them.
    ///
    /// # Errors
    ///
    /// [`MdlError::Malformed`] for a bad MDL or `length` 0, [`MdlError::NotContiguous`],
    /// [`MdlError::TooShort`] if the chain holds fewer than `length` bytes.
    pub fn region(self, length: u64) -> Result<MdlRegion<'a>, MdlError> {
        if length == 0 {
            return Err(MdlError::Malformed);
        }
        let (covered, mdls) = self.cover(length)?;
        if covered < length {
            return Err(MdlError::TooShort);
        }
        let va = self.va();
        let pages = span_pages(va, length)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(MdlError::Malformed)?;
        Ok(MdlRegion {
            chain: self,
            va,
            length,
            pages,
            mdls,
        })
    }

    /// Bytes from the start covered by the MDLs entered until `limit` bytes are (the whole
    /// chain if it is shorter), each validated on entry, and how many MDLs that took.
    fn cover(self, limit: u64) -> Result<(u64, usize), MdlError> {
        let start = self.va();
        let mut covered = 0;
        let mut mdls = 0;
        let mut prev_end = None;
        let mut m = Some(self.first);
        while let Some(mdl) = m
            && covered < limit
        {
            let (_, end) = enter(mdl.mdl(), prev_end)?;
            mdls += 1;
            // Contiguity makes every end at least `start`.
            covered = end.saturating_sub(start);
            prev_end = Some(end);
            m = mdl.next();
        }
        Ok((covered, mdls))
    }
}

impl<'a> MdlRegion<'a> {
    /// The region's start: `MmGetMdlVirtualAddress` of the first MDL.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Its length in bytes (not 0).
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Pages it spans (`ADDRESS_AND_SIZE_TO_SPAN_PAGES`): what [`Self::pages`] yields.
    pub fn page_count(&self) -> usize {
        self.pages
    }

    /// Offset of its first byte in its first page (the FBO of a LAM).
    pub fn first_byte_offset(&self) -> u32 {
        BYTE_OFFSET(self.va as usize)
    }

    /// Its pages in order, [`Self::page_count`] of them unless the walk fails. Every MDL
    /// holding region bytes is read, so a page the region shares between two MDLs has both
    /// PFNs checked; no MDL after them is.
    pub fn pages(&self) -> MdlPages<'a> {
        let first_page = self.va & !(PAGE_SIZE as u64 - 1);
        MdlPages {
            mdls_left: Some(self.mdls),
            end_page: first_page.saturating_add((self.pages as u64) << PAGE_SHIFT),
            ..self.chain.pages()
        }
    }
}

impl Iterator for MdlPages<'_> {
    type Item = Result<MdlPage, MdlError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            let cur = self.cur?;
            let m = cur.mdl();
            let i = match self.index {
                Some(i) => i,
                None => match enter(m, self.prev_end) {
                    Ok((n, end)) => {
                        self.npages = n;
                        self.end = end;
                        self.index = Some(0);
                        0
                    }
                    Err(e) => return self.fail(e),
                },
            };
            if i >= self.npages {
                self.prev_end = Some(self.end);
                self.mdls_left = self.mdls_left.map(|n| n.saturating_sub(1));
                self.cur = if self.mdls_left == Some(0) {
                    None
                } else {
                    cur.next()
                };
                self.index = None;
                continue;
            }
            self.index = Some(i + 1);
            let Some(va) = (m.StartVa as u64).checked_add(u64::from(i) * PAGE_SIZE as u64) else {
                return self.fail(MdlError::Malformed);
            };
            if va >= self.end_page {
                self.cur = None;
                return None;
            }
            // SAFETY: `i < npages`, the MDL's page count (`enter`).
            let pfn = unsafe { cur.pfn(i) } as u64;
            if pfn > u64::MAX >> PAGE_SHIFT {
                return self.fail(MdlError::Malformed);
            }
            let page = MdlPage { va, pfn };
            match self.last {
                Some(last) if last.va == va => {
                    if last.pfn != page.pfn {
                        return self.fail(MdlError::Malformed);
                    }
                    continue;
                }
                _ => {}
            }
            self.last = Some(page);
            return Some(Ok(page));
        }
    }
}

impl MdlPages<'_> {
    fn fail(&mut self, e: MdlError) -> Option<Result<MdlPage, MdlError>> {
        self.failed = true;
        Some(Err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ptr;
    use std::vec;
    use std::vec::Vec;

    /// An MDL with its PFN array in one 8-aligned allocation.
    #[repr(C)]
    struct Built {
        mdl: MDL,
        pfns: [u64; 8],
    }

    fn build(start_va: u64, offset: u32, count: u32, pfns: &[u64]) -> std::boxed::Box<Built> {
        let mut b = std::boxed::Box::new(Built {
            mdl: MDL {
                Next: ptr::null_mut(),
                Size: (0x30 + 8 * pfns.len()) as i16,
                MdlFlags: MDL_PAGES_LOCKED,
                AllocationProcessorNumber: 0,
                Reserved: 0,
                Process: ptr::null_mut(),
                MappedSystemVa: ptr::null_mut(),
                StartVa: start_va as *mut c_void,
                ByteCount: count,
                ByteOffset: offset,
            },
            pfns: [0xDEAD; 8],
        });
        b.pfns[..pfns.len()].copy_from_slice(pfns);
        b
    }

    /// The MDL's address as a consumer passes it: a pointer to the whole `Built`, PFNs
    /// included (`mdl` is at offset 0 of the `#[repr(C)]` struct), not one made from `&b.mdl`.
    fn mdl_ptr(b: &Built) -> *const MDL {
        ptr::from_ref(b).cast()
    }

    fn link(a: &mut Built, b: &Built) {
        a.mdl.Next = mdl_ptr(b).cast_mut();
    }

    fn chain(first: &Built) -> MdlChain<'_> {
        // SAFETY: `first` and its chain are live `Built`s with their PFN arrays.
        unsafe { MdlChain::from_ptr(mdl_ptr(first)) }.unwrap()
    }

    fn collect(first: &Built) -> Vec<Result<MdlPage, MdlError>> {
        chain(first).pages().collect()
    }

    fn region(first: &Built, length: u64) -> Result<Vec<Result<MdlPage, MdlError>>, MdlError> {
        let r = chain(first).region(length)?;
        assert_eq!(r.length(), length);
        let pages: Vec<_> = r.pages().collect();
        let ok = pages.iter().filter(|p| p.is_ok()).count();
        // Exactly the region's pages, or fewer and then the error that stopped the walk.
        assert!(ok == r.page_count() && ok == pages.len() || ok + 1 == pages.len());
        Ok(pages)
    }

    fn page(va: u64, pfn: u64) -> Result<MdlPage, MdlError> {
        Ok(MdlPage { va, pfn })
    }

    /// Defect 8: the walk made the PFN array's address from an `&MDL`, whose provenance ends
    /// with the structure, so every PFN read was out of bounds of it (Miri: "attempting a read
    /// access using <..> at alloc..[0x30], but that tag does not exist in the borrow stack for
    /// this location", the tag "created by a SharedReadOnly retag at offsets [0x0..0x30]").
    #[test]
    fn pfn_array_read_has_the_provenance_of_the_consumer_pointer() {
        let m = build(0x7000, 0, 0x2000, &[0x31, 0x32]);
        // SAFETY: `m` is a live MDL with its PFN array, unchanged during the walk.
        let chain = unsafe { MdlChain::from_ptr(mdl_ptr(&m)) }.unwrap();
        assert_eq!(
            chain.pages().collect::<Vec<_>>(),
            [page(0x7000, 0x31), page(0x8000, 0x32)]
        );
        let r = chain.region(0x1001).unwrap();
        assert_eq!(
            r.pages().collect::<Vec<_>>(),
            [page(0x7000, 0x31), page(0x8000, 0x32)]
        );
    }

    #[test]
    fn single_mdl_spanning_three_pages() {
        // 0x100 bytes into page 0x10000 .. 0x2100 bytes → ends inside the third page.
        let m = build(0x10000, 0x100, 0x2100, &[0x500, 0x7F3, 0x123]);
        let all = [
            page(0x10000, 0x500),
            page(0x11000, 0x7F3),
            page(0x12000, 0x123),
        ];
        assert_eq!(collect(&m), all);
        assert_eq!(chain(&m).span(), Ok((0x10100, 0x2100)));
        let r = chain(&m).region(0x1F00).unwrap();
        assert_eq!(
            (r.va(), r.page_count(), r.first_byte_offset()),
            (0x10100, 2, 0x100)
        );
        assert_eq!(region(&m, 0x1F00), Ok(all[..2].to_vec()));
        assert_eq!(region(&m, 0x1F01), Ok(all.to_vec()));
        assert_eq!(region(&m, 0x2100), Ok(all.to_vec()));
        assert_eq!(region(&m, 0x2101).unwrap_err(), MdlError::TooShort);
        assert_eq!(region(&m, 0).unwrap_err(), MdlError::Malformed);
    }

    #[test]
    fn contiguous_chain_shares_a_boundary_page_once() {
        let mut a = build(0x40000, 0x800, 0x1000, &[0x10, 0x11]); // ends at 0x41800
        let b = build(0x41000, 0x800, 0x900, &[0x11, 0x12]); // 0x41800 .. 0x42100
        link(&mut a, &b);
        let all = [
            page(0x40000, 0x10),
            page(0x41000, 0x11),
            page(0x42000, 0x12),
        ];
        assert_eq!(collect(&a), all);
        assert_eq!(chain(&a).span(), Ok((0x40800, 0x1900)));
        assert_eq!(
            region(&a, 0x1000),
            Ok(all[..2].to_vec()),
            "inside the first MDL"
        );
        assert_eq!(
            region(&a, 0x1001),
            Ok(all[..2].to_vec()),
            "into the shared page"
        );
        assert_eq!(region(&a, 0x1801), Ok(all.to_vec()));
        assert_eq!(region(&a, 0x1901).unwrap_err(), MdlError::TooShort);
    }

    #[test]
    fn gap_or_overlap_is_not_contiguous() {
        let mut a = build(0x40000, 0, 0x1000, &[1]);
        let b = build(0x42000, 0, 0x1000, &[2]);
        link(&mut a, &b);
        assert_eq!(
            collect(&a),
            [page(0x40000, 1), Err(MdlError::NotContiguous)]
        );
        assert_eq!(chain(&a).span(), Err(MdlError::NotContiguous));
        // A region inside the first MDL never reads the second; one beyond it does.
        assert_eq!(region(&a, 0x1000), Ok(vec![page(0x40000, 1)]));
        assert_eq!(region(&a, 0x1001).unwrap_err(), MdlError::NotContiguous);
        let c = build(0x40000, 0xFFF, 1, &[3]);
        link(&mut a, &c);
        assert_eq!(
            collect(&a),
            [page(0x40000, 1), Err(MdlError::NotContiguous)]
        );
        assert_eq!(region(&a, 0x1001).unwrap_err(), MdlError::NotContiguous);
    }

    #[test]
    fn malformed_mdls_are_refused() {
        let misaligned = build(0x40010, 0, 16, &[1]);
        let big_offset = build(0x40000, 0x1000, 16, &[1]);
        let empty = build(0x40000, 0, 0, &[]);
        let mut short = build(0x40000, 0, 0x2000, &[1, 2]);
        short.mdl.Size = 0x30 + 8; // room for one PFN, two needed
        let mut unsized_mdl = build(0x40000, 0, 8, &[1]);
        unsized_mdl.mdl.Size = 0;
        let huge_pfn = build(0x40000, 0, 8, &[1 << 60]);
        let overflow = build(0xFFFF_FFFF_FFFF_F000, 0x800, 0x1000, &[1, 2]);
        for (m, what) in [
            (&misaligned, "StartVa not page aligned"),
            (&big_offset, "ByteOffset ≥ PAGE_SIZE"),
            (&empty, "ByteCount 0"),
            (&short, "Size too small for the PFN array"),
            (&unsized_mdl, "Size 0"),
            (&huge_pfn, "PFN beyond 52 bits"),
            (&overflow, "end VA overflows"),
        ] {
            assert_eq!(collect(m), [Err(MdlError::Malformed)], "{what}");
            assert_eq!(chain(m).span(), Err(MdlError::Malformed), "{what}");
        }
        // The header checks fail the region before any page is read; a bad PFN fails the
        // page it is in.
        for m in [
            &misaligned,
            &big_offset,
            &empty,
            &short,
            &unsized_mdl,
            &overflow,
        ] {
            assert_eq!(region(m, 1).unwrap_err(), MdlError::Malformed);
        }
        assert_eq!(region(&huge_pfn, 8), Ok(vec![Err(MdlError::Malformed)]));
        // A boundary page whose two PFNs disagree.
        let mut a = build(0x40000, 0, 0x800, &[5]);
        let b = build(0x40000, 0x800, 0x800, &[6]);
        link(&mut a, &b);
        assert_eq!(collect(&a), [page(0x40000, 5), Err(MdlError::Malformed)]);
        assert_eq!(
            region(&a, 0x1000),
            Ok(vec![page(0x40000, 5), Err(MdlError::Malformed)])
        );
        // A region inside the first MDL does not read the second.
        assert_eq!(region(&a, 0x800), Ok(vec![page(0x40000, 5)]));
        // A bad second MDL fails a region that reaches it.
        let mut c = build(0x40000, 0, 0x1000, &[5]);
        let mut bad = build(0x41000, 0, 0x1000, &[6]);
        bad.mdl.Size = 0x30;
        link(&mut c, &bad);
        assert_eq!(region(&c, 0x1001).unwrap_err(), MdlError::Malformed);
        // SAFETY: a null chain is allowed.
        assert!(unsafe { MdlChain::from_ptr(ptr::null()) }.is_none());
    }

    #[test]
    fn span_pages_in_64_bits() {
        assert_eq!(span_pages(0x1FFF, 2), Some(2));
        assert_eq!(span_pages(0x1000, 0), Some(0));
        assert_eq!(span_pages(0xFFF, u64::MAX), None);
        assert_eq!(span_pages(0, u64::MAX), None);
    }
}
