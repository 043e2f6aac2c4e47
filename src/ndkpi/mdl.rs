//! The memory descriptor list, `struct _MDL` (windows-build.md §6), and the `Mm*` accessor
//! macros NDK providers use on it, as functions that read only the MDL's own fields.
//!
//! For NDK the MDL virtual address is an index into the registered region, never a pointer
//! the provider dereferences (ndkpi.md §5.7), so the helpers return addresses as values.

use core::ffi::c_void;

use super::types::{CSHORT, PFN_NUMBER};

/// `struct _MDL` (x64: 0x30 bytes, align 8). The PFN array (`PFN_NUMBER` entries, one per
/// page spanned by `StartVa + ByteOffset .. + ByteCount`) follows the structure in memory.
/// Offsets 0x0C–0x0F are padding in the public header; PDB layouts name them as below.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MDL {
    pub Next: *mut MDL,
    pub Size: CSHORT,
    pub MdlFlags: CSHORT,
    pub AllocationProcessorNumber: u16,
    pub Reserved: u16,
    pub Process: *mut c_void,
    pub MappedSystemVa: *mut c_void,
    pub StartVa: *mut c_void,
    pub ByteCount: u32,
    pub ByteOffset: u32,
}

/// `MappedSystemVa` holds a valid system mapping.
pub const MDL_MAPPED_TO_SYSTEM_VA: CSHORT = 0x0001;
/// The pages are locked (probed and locked, or built for nonpaged memory).
pub const MDL_PAGES_LOCKED: CSHORT = 0x0002;
/// The buffer is nonpaged pool; `MappedSystemVa` is valid.
pub const MDL_SOURCE_IS_NONPAGED_POOL: CSHORT = 0x0004;
/// A partial MDL (IoBuildPartialMdl) describing part of another MDL's buffer.
pub const MDL_PARTIAL: CSHORT = 0x0010;

/// `PAGE_SIZE` on x64 and ARM64.
pub const PAGE_SIZE: usize = 0x1000;
/// `PAGE_SHIFT`.
pub const PAGE_SHIFT: u32 = 12;

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
#[inline]
pub fn MmGetMdlPfnArray(mdl: &MDL) -> *const PFN_NUMBER {
    (mdl as *const MDL).wrapping_add(1).cast()
}

/// Pages described by the MDL: `ADDRESS_AND_SIZE_TO_SPAN_PAGES(MmGetMdlVirtualAddress,
/// ByteCount)`, the PFN array length.
#[inline]
pub fn mdl_page_count(mdl: &MDL) -> u32 {
    ADDRESS_AND_SIZE_TO_SPAN_PAGES(MmGetMdlVirtualAddress(mdl), mdl.ByteCount)
}
