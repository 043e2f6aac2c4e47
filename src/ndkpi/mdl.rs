//! The memory descriptor list and the `Mm*` accessor macros, part of the interface NDKPI
//! functions take (NdkRegisterMr, NdkBuildLam). The MDL is a Windows kernel structure, so it
//! is declared once, in the OS seam ([`crate::os::mdl`], which also walks chains of them);
//! this module names it with the rest of the ABI. Its x64 layout is asserted in `layout.rs`.

pub use crate::os::mdl::{
    ADDRESS_AND_SIZE_TO_SPAN_PAGES, BYTE_OFFSET, MDL, MDL_MAPPED_TO_SYSTEM_VA, MDL_PAGES_LOCKED,
    MDL_PARTIAL, MDL_SOURCE_IS_NONPAGED_POOL, MmGetMdlBaseVa, MmGetMdlByteCount,
    MmGetMdlByteOffset, MmGetMdlPfnArray, MmGetMdlVirtualAddress, PAGE_SHIFT, PAGE_SIZE,
    mdl_page_count,
};
