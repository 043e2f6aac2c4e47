//! Walking MDL chains (windows-build.md §6): the (virtual address, logical page address) pairs
//! NdkRegisterMr and NdkBuildLam turn into page lists.
//!
//! Only the `MDL` structures and their PFN arrays are read; the described buffer never is (for
//! NDK its virtual address is an index, ndkpi.md §5.7). A chain must be virtually contiguous
//! (each MDL's `StartVa + ByteOffset` equals the previous MDL's end), else
//! [`MdlError::NotContiguous`]. Where a chain boundary falls inside a page, that page appears
//! in both MDLs; it is yielded once, and both PFNs must agree.

use core::ptr;

use crate::ndkpi::mdl::{MDL, MmGetMdlVirtualAddress, PAGE_SIZE, mdl_page_count};
use crate::ndkpi::types::PFN_NUMBER;

/// Why an MDL chain was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MdlError {
    /// `StartVa` not page aligned, `ByteOffset` ≥ 4096, `ByteCount` 0, `Size` too small for
    /// the PFN array, an address overflow, a PFN beyond 52 bits, or a page shared by two
    /// MDLs with different PFNs.
    Malformed,
    /// The next MDL does not start where the previous one ended.
    NotContiguous,
}

/// One page of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdlPage {
    /// Page-aligned virtual address of the page.
    pub va: u64,
    /// Logical (bus) address of the page: PFN << 12.
    pub logical: u64,
}

/// Iterator over the pages of an MDL chain (see [`pages`]). After an error it yields `None`.
pub struct MdlPages<'a> {
    cur: Option<&'a MDL>,
    /// Page index inside `cur`; `None` before `cur` was validated.
    index: Option<u32>,
    npages: u32,
    /// End VA of the previous MDL.
    prev_end: Option<u64>,
    /// End VA of the current MDL.
    end: u64,
    last: Option<MdlPage>,
    failed: bool,
}

/// Pages of the chain starting at `first` (null: an empty chain).
///
/// # Safety
///
/// Every MDL reachable through `Next` from `first` must be a valid, readable `MDL` followed
/// in memory by its PFN array of `ADDRESS_AND_SIZE_TO_SPAN_PAGES(VA, ByteCount)` entries, and
/// stay unchanged for `'a`. The chain must end with a null `Next`.
pub unsafe fn pages<'a>(first: *const MDL) -> MdlPages<'a> {
    // SAFETY: `first` is null or a valid MDL for 'a (caller contract).
    let cur = unsafe { first.as_ref() };
    MdlPages {
        cur,
        index: None,
        npages: 0,
        prev_end: None,
        end: 0,
        last: None,
        failed: false,
    }
}

/// The virtual span `(start VA, byte count)` of a chain, validating every MDL and its PFNs.
///
/// # Errors
///
/// [`MdlError`] as the walk finds it; [`MdlError::Malformed`] for an empty chain.
///
/// # Safety
///
/// As [`pages`].
pub unsafe fn span(first: *const MDL) -> Result<(u64, u64), MdlError> {
    // SAFETY: `first` is null or a valid MDL (caller contract).
    let head = unsafe { first.as_ref() }.ok_or(MdlError::Malformed)?;
    let start = MmGetMdlVirtualAddress(head) as u64;
    // SAFETY: forwarded caller contract.
    let walk = unsafe { pages(first) };
    let mut end = start;
    for p in walk {
        p?;
    }
    // SAFETY: forwarded caller contract; a second pass only reads the same MDL fields.
    let mut m = unsafe { first.as_ref() };
    while let Some(mdl) = m {
        end = (MmGetMdlVirtualAddress(mdl) as u64)
            .checked_add(u64::from(mdl.ByteCount))
            .ok_or(MdlError::Malformed)?;
        // SAFETY: `Next` is null or a valid MDL (caller contract).
        m = unsafe { mdl.Next.cast_const().as_ref() };
    }
    Ok((start, end - start))
}

impl MdlPages<'_> {
    fn fail(&mut self, e: MdlError) -> Option<Result<MdlPage, MdlError>> {
        self.failed = true;
        Some(Err(e))
    }

    /// Validates `m` on entry; returns its page count and end VA.
    fn enter(&self, m: &MDL) -> Result<(u32, u64), MdlError> {
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
        if let Some(prev) = self.prev_end
            && prev != va
        {
            return Err(MdlError::NotContiguous);
        }
        Ok((npages, end))
    }
}

impl Iterator for MdlPages<'_> {
    type Item = Result<MdlPage, MdlError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            let m = self.cur?;
            let i = match self.index {
                Some(i) => i,
                None => match self.enter(m) {
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
                // SAFETY: `Next` is null or a valid MDL for 'a (contract of `pages`).
                self.cur = unsafe { m.Next.cast_const().as_ref() };
                self.index = None;
                continue;
            }
            self.index = Some(i + 1);
            let array = ptr::from_ref(m).wrapping_add(1).cast::<PFN_NUMBER>();
            // SAFETY: `i < npages`, the length of the PFN array that follows `m`
            // (contract of `pages`), so the element is in bounds.
            let slot = unsafe { array.add(i as usize) };
            // SAFETY: in bounds (above); the array follows an 8-aligned 0x30-byte MDL, so it
            // is aligned for the 8-byte PFN_NUMBER.
            let pfn = unsafe { slot.read() } as u64;
            if pfn > u64::MAX >> 12 {
                return self.fail(MdlError::Malformed);
            }
            let Some(va) = (m.StartVa as u64).checked_add(u64::from(i) * PAGE_SIZE as u64) else {
                return self.fail(MdlError::Malformed);
            };
            let page = MdlPage {
                va,
                logical: pfn << 12,
            };
            match self.last {
                Some(last) if last.va == va => {
                    if last.logical != page.logical {
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

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::c_void;
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
                MdlFlags: 0x2,
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

    fn collect(first: &Built) -> Vec<Result<MdlPage, MdlError>> {
        // SAFETY: `first` and its chain are live `Built`s with their PFN arrays.
        unsafe { pages(&first.mdl) }.collect()
    }

    fn page(va: u64, pfn: u64) -> Result<MdlPage, MdlError> {
        Ok(MdlPage {
            va,
            logical: pfn << 12,
        })
    }

    #[test]
    fn single_mdl_spanning_three_pages() {
        // 0x100 bytes into page 0x10000 .. 0x2100 bytes → ends inside the third page.
        let m = build(0x10000, 0x100, 0x2100, &[0x500, 0x7F3, 0x123]);
        assert_eq!(
            collect(&m),
            [
                page(0x10000, 0x500),
                page(0x11000, 0x7F3),
                page(0x12000, 0x123)
            ]
        );
        // SAFETY: as in `collect`.
        assert_eq!(unsafe { span(&m.mdl) }, Ok((0x10100, 0x2100)));
    }

    #[test]
    fn contiguous_chain_shares_a_boundary_page_once() {
        let mut a = build(0x40000, 0x800, 0x1000, &[0x10, 0x11]); // ends at 0x41800
        let b = build(0x41000, 0x800, 0x900, &[0x11, 0x12]); // 0x41800 .. 0x42100
        a.mdl.Next = ptr::from_ref(&b.mdl).cast_mut();
        assert_eq!(
            collect(&a),
            [
                page(0x40000, 0x10),
                page(0x41000, 0x11),
                page(0x42000, 0x12)
            ]
        );
        // SAFETY: as in `collect`.
        assert_eq!(unsafe { span(&a.mdl) }, Ok((0x40800, 0x1900)));
    }

    #[test]
    fn gap_or_overlap_is_not_contiguous() {
        let mut a = build(0x40000, 0, 0x1000, &[1]);
        let b = build(0x42000, 0, 0x1000, &[2]);
        a.mdl.Next = ptr::from_ref(&b.mdl).cast_mut();
        assert_eq!(
            collect(&a),
            [page(0x40000, 1), Err(MdlError::NotContiguous)]
        );
        // SAFETY: as in `collect`.
        assert_eq!(unsafe { span(&a.mdl) }, Err(MdlError::NotContiguous));
        let c = build(0x40000, 0xFFF, 1, &[3]);
        a.mdl.Next = ptr::from_ref(&c.mdl).cast_mut();
        assert_eq!(
            collect(&a),
            [page(0x40000, 1), Err(MdlError::NotContiguous)]
        );
    }

    #[test]
    fn malformed_mdls_are_refused() {
        let misaligned = build(0x40010, 0, 16, &[1]);
        assert_eq!(collect(&misaligned), [Err(MdlError::Malformed)]);
        let big_offset = build(0x40000, 0x1000, 16, &[1]);
        assert_eq!(collect(&big_offset), [Err(MdlError::Malformed)]);
        let empty = build(0x40000, 0, 0, &[]);
        assert_eq!(collect(&empty), [Err(MdlError::Malformed)]);
        let mut short = build(0x40000, 0, 0x2000, &[1, 2]);
        short.mdl.Size = 0x30 + 8; // room for one PFN, two needed
        assert_eq!(collect(&short), [Err(MdlError::Malformed)]);
        let huge_pfn = build(0x40000, 0, 8, &[1 << 60]);
        assert_eq!(collect(&huge_pfn), [Err(MdlError::Malformed)]);
        // A boundary page whose two PFNs disagree.
        let mut a = build(0x40000, 0, 0x800, &[5]);
        let b = build(0x40000, 0x800, 0x800, &[6]);
        a.mdl.Next = ptr::from_ref(&b.mdl).cast_mut();
        assert_eq!(collect(&a), [page(0x40000, 5), Err(MdlError::Malformed)]);
        // SAFETY: a null chain is allowed.
        assert_eq!(unsafe { pages(ptr::null()) }.count(), 0);
        // SAFETY: as above.
        assert_eq!(unsafe { span(ptr::null()) }, Err(MdlError::Malformed));
    }
}
