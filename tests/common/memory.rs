//! Consumer memory in the model's DMA space and real MDLs describing it (windows-build.md §6),
//! for NdkRegisterMr / NdkBuildLam style tests.

use std::ptr;
use std::sync::Arc;

use pvrdma_ndk::ndkpi::mdl::MDL;
use pvrdma_sim::{DmaBuffer, DmaSpace};

/// Pages a consumer registered: host memory the model sees at `bus(i)`, and a virtual address
/// the consumer uses for it (an index for NDK, never dereferenced by the provider).
pub struct ConsumerMem {
    /// The memory (read/write it through the model's accessors).
    pub buf: DmaBuffer,
    /// Virtual address of byte 0 (page aligned).
    pub va: u64,
}

impl ConsumerMem {
    /// `pages` zeroed pages at consumer virtual address `va` (page aligned).
    pub fn new(space: &Arc<DmaSpace>, pages: usize, va: u64) -> Self {
        assert_eq!(va % 4096, 0);
        ConsumerMem {
            buf: DmaBuffer::new(space, pages),
            va,
        }
    }

    /// Bus (logical) address of page `i`.
    pub fn bus(&self, i: usize) -> u64 {
        self.buf.page_bus(i)
    }

    /// An MDL for `len` bytes at byte `offset` of this memory.
    pub fn mdl(&self, offset: usize, len: u32) -> BuiltMdl {
        let first = offset / 4096;
        let span = (offset % 4096 + len as usize).div_ceil(4096);
        assert!(first + span <= self.buf.pages(), "MDL beyond the memory");
        let pfns: Vec<u64> = (first..first + span).map(|i| self.bus(i) >> 12).collect();
        BuiltMdl::new(
            self.va + (first * 4096) as u64,
            (offset % 4096) as u32,
            len,
            &pfns,
        )
    }
}

/// An `MDL` followed by its PFN array, in one 8-aligned allocation.
pub struct BuiltMdl {
    words: Box<[u64]>,
}

const MDL_WORDS: usize = std::mem::size_of::<MDL>() / 8;

impl BuiltMdl {
    /// `StartVa` (page aligned), `ByteOffset`, `ByteCount` and the PFNs (one per spanned page).
    pub fn new(start_va: u64, byte_offset: u32, byte_count: u32, pfns: &[u64]) -> Self {
        let mut words = vec![0u64; MDL_WORDS + pfns.len()].into_boxed_slice();
        words[MDL_WORDS..].copy_from_slice(pfns);
        let mdl = MDL {
            Next: ptr::null_mut(),
            Size: (std::mem::size_of::<MDL>() + 8 * pfns.len()) as i16,
            MdlFlags: 0x2, // MDL_PAGES_LOCKED
            AllocationProcessorNumber: 0,
            Reserved: 0,
            Process: ptr::null_mut(),
            MappedSystemVa: ptr::null_mut(),
            StartVa: start_va as *mut core::ffi::c_void,
            ByteCount: byte_count,
            ByteOffset: byte_offset,
        };
        // SAFETY: `words` is 8-aligned and at least size_of::<MDL>() bytes long; MDL has
        // alignment 8.
        unsafe { words.as_mut_ptr().cast::<MDL>().write(mdl) };
        BuiltMdl { words }
    }

    /// The MDL.
    pub fn as_ptr(&self) -> *const MDL {
        self.words.as_ptr().cast()
    }

    /// Sets `MappedSystemVa` (and MDL_MAPPED_TO_SYSTEM_VA): where the CPU reads the bytes.
    pub fn set_system_va(&mut self, va: *mut core::ffi::c_void) {
        let m = self.words.as_mut_ptr().cast::<MDL>();
        // SAFETY: `m` points to the MDL written in `new`, exclusively borrowed through `self`.
        let m = unsafe { &mut *m };
        m.MappedSystemVa = va;
        m.MdlFlags |= 0x1;
    }

    /// Links `next` after this MDL (`next` must outlive every walk of the chain).
    pub fn set_next(&mut self, next: Option<&BuiltMdl>) {
        let p = next.map_or(ptr::null_mut(), |n| n.as_ptr().cast_mut());
        let m = self.words.as_mut_ptr().cast::<MDL>();
        // SAFETY: `m` points to the MDL written in `new`, exclusively borrowed through `self`.
        unsafe { (*m).Next = p };
    }
}
