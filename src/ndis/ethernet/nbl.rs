//! Reading a NET_BUFFER's frame as device addresses: the MDL chain from `CurrentMdl` at
//! `CurrentMdlOffset`, `DataLength` bytes, cut at page boundaries into pieces whose address
//! is the page's PFN (no DMA remapping: the same reading of MDLs the NDK memory-registration
//! path makes, `os::mdl`), physically adjacent pieces merged.
//!
//! Unlike an NDK registration, a NET_BUFFER's MDLs are separate buffers (a header MDL, then
//! the payload's): each is walked on its own. Every MDL is validated before its PFN array is
//! read ([`SgError::Malformed`]); a frame needing more pieces than the caller's list holds is
//! [`SgError::TooManyPieces`]. Nothing is allocated.
#![allow(unsafe_code)]

use crate::os::dma::PAGE_SIZE;
use crate::os::mdl::{MDL, MmGetMdlPfnArray, MmGetMdlVirtualAddress, PAGE_SHIFT, mdl_page_count};
use crate::vmxnet3::Sge;

use super::abi::NET_BUFFER;

/// Why a NET_BUFFER could not be mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgError {
    /// A null or inconsistent MDL (`Size` too small for its PFN array, `ByteOffset` past the
    /// page, a PFN beyond 52 bits), an offset past the first MDL, or a chain shorter than
    /// `DataLength`.
    Malformed,
    /// More pieces than the list holds.
    TooManyPieces,
}

/// The frame of `nb` as at most `out.len()` pieces; returns how many and the frame length.
///
/// # Safety
///
/// `nb` must be a NET_BUFFER the caller owns (NDIS handed it to the miniport), whose MDL
/// chain is valid, each MDL followed by its PFN array, unchanged during the call.
pub unsafe fn net_buffer_sg(
    nb: *const NET_BUFFER,
    out: &mut [Sge],
) -> Result<(usize, u32), SgError> {
    // SAFETY: the caller's NET_BUFFER (contract).
    let b = unsafe { &*nb };
    let (mut mdl, mut offset, length) =
        (b.CurrentMdl.cast_const(), b.CurrentMdlOffset, b.DataLength);
    // The ULONG half of the union (contract of the layout).
    let Ok(length) = u32::try_from(length & 0xFFFF_FFFF) else {
        return Err(SgError::Malformed);
    };
    let mut left = length;
    let mut n = 0usize;
    while left > 0 {
        if mdl.is_null() {
            return Err(SgError::Malformed);
        }
        // SAFETY: a non-null MDL of the chain (contract).
        let m: MDL = unsafe { mdl.read() };
        let need = u64::from(mdl_page_count(&m)) * 8 + core::mem::size_of::<MDL>() as u64;
        if (m.ByteOffset as usize) >= PAGE_SIZE || u64::from(m.Size as u16) < need {
            return Err(SgError::Malformed);
        }
        if offset > m.ByteCount {
            return Err(SgError::Malformed);
        }
        let take = (m.ByteCount - offset).min(left);
        let va = MmGetMdlVirtualAddress(&m) as u64 + u64::from(offset);
        let base = m.StartVa as u64;
        let mut done = 0u32;
        while done < take {
            let at = va + u64::from(done);
            let page = (at - (base & !(PAGE_SIZE as u64 - 1))) >> PAGE_SHIFT;
            let in_page = (at & (PAGE_SIZE as u64 - 1)) as u32;
            let piece = (PAGE_SIZE as u32 - in_page).min(take - done);
            // `page` < the MDL's page count: `at` lies inside StartVa + ByteOffset + ByteCount.
            if page >= u64::from(mdl_page_count(&m)) {
                return Err(SgError::Malformed);
            }
            // SAFETY: `page` indexes the PFN array after the MDL (checked just above against
            // its page count, which `Size` covers), inside the MDL's allocation.
            let slot = unsafe { MmGetMdlPfnArray(mdl).add(page as usize) };
            // SAFETY: in bounds (above); the array is 8-aligned after the 0x30-byte MDL.
            let pfn = unsafe { slot.read() } as u64;
            if pfn >> 52 != 0 {
                return Err(SgError::Malformed);
            }
            let addr = (pfn << PAGE_SHIFT) | u64::from(in_page);
            let merged = n > 0
                && out.get_mut(n - 1).is_some_and(|p| {
                    p.addr + u64::from(p.len) == addr && {
                        p.len += piece;
                        true
                    }
                });
            if !merged {
                let slot = out.get_mut(n).ok_or(SgError::TooManyPieces)?;
                *slot = Sge { addr, len: piece };
                n += 1;
            }
            done += piece;
        }
        left -= take;
        offset = 0;
        mdl = m.Next;
    }
    Ok((n, length))
}
