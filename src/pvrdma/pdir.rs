//! Two-level page directories (§6) and page-directory-backed buffers.
//!
//! A directory page holds u64 addresses of table pages; each table page holds 512 u64 page
//! addresses. Page `i` → `dir[(i >> 9) & 0x1FF]` → `table[i & 0x1FF]`; at most 512·512 pages.
//! Directory and tables are [`SharedDma`] from the start: their entries are written with
//! volatile stores, which also covers FRMR page lists rewritten at each fast-register post.

use alloc::sync::Arc;

use crate::os::alloc::KVec;
use crate::os::dma::PAGE_SIZE;
use crate::os::{DmaAllocator, DmaBuffer, DmaView, SharedDma};

use super::error::PvrdmaError;

/// `PVRDMA_PAGE_DIR_MAX_PAGES`.
pub const MAX_PAGES: u32 = 512 * 512;
/// Entries per table (and per directory).
pub const ENTRIES: u32 = 512;

/// Tables needed for `npages` pages: `((npages − 1) >> 9) + 1`.
pub const fn tables_for(npages: u32) -> u32 {
    ((npages - 1) >> 9) + 1
}

/// A page directory of fixed capacity.
pub struct PageDir {
    dir: SharedDma,
    tables: KVec<SharedDma>,
    capacity: u32,
}

impl PageDir {
    /// A directory with room for `capacity` pages, all entries 0.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`] for 0 or more than [`MAX_PAGES`] pages;
    /// [`PvrdmaError::NoMemory`].
    pub fn new(dma: &Arc<dyn DmaAllocator>, capacity: u32) -> Result<Self, PvrdmaError> {
        if capacity == 0 || capacity > MAX_PAGES {
            return Err(PvrdmaError::InvalidParameter);
        }
        let ntables = tables_for(capacity);
        let mut tables = KVec::try_with_capacity(ntables as usize)?;
        let dir = DmaBuffer::alloc(dma, PAGE_SIZE)?.share();
        for t in 0..ntables {
            let table = DmaBuffer::alloc(dma, PAGE_SIZE)?.share();
            dir.view().write_u64(t as usize * 8, table.logical());
            tables
                .push_within_capacity(table)
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        Ok(PageDir {
            dir,
            tables,
            capacity,
        })
    }

    /// The directory's address (`pdir_dma` in commands and the DSR).
    pub fn dma(&self) -> u64 {
        self.dir.logical()
    }

    /// Pages this directory can describe.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn entry(&self, i: u32) -> Option<(DmaView<'_>, usize)> {
        if i >= self.capacity {
            return None;
        }
        let table = self.tables.get((i >> 9) as usize)?;
        Some((table.view(), ((i & 0x1FF) * 8) as usize))
    }

    /// Sets page `i` to `addr`.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`] if `i` is beyond the capacity or `addr` is not
    /// page aligned.
    pub fn set_page(&self, i: u32, addr: u64) -> Result<(), PvrdmaError> {
        if !addr.is_multiple_of(PAGE_SIZE as u64) {
            return Err(PvrdmaError::InvalidParameter);
        }
        let (v, off) = self.entry(i).ok_or(PvrdmaError::InvalidParameter)?;
        v.write_u64(off, addr);
        Ok(())
    }

    /// Page `i`'s address as stored.
    pub fn page(&self, i: u32) -> Option<u64> {
        self.entry(i).map(|(v, off)| v.read_u64(off))
    }

    /// Directory entry `t` as stored (tests).
    pub fn dir_entry(&self, t: u32) -> u64 {
        self.dir.view().read_u64(t as usize * 8)
    }
}

/// DMA memory of `npages` pages described by its own page directory (rings, QPs, SRQs, CQs).
/// Pages are allocated one by one, as Linux `pvrdma_page_dir_init` does.
pub struct PagedBuffer {
    pages: KVec<SharedDma>,
    pdir: PageDir,
}

impl PagedBuffer {
    /// Allocates `npages` zeroed pages and their directory.
    ///
    /// # Errors
    ///
    /// As [`PageDir::new`].
    pub fn alloc(dma: &Arc<dyn DmaAllocator>, npages: u32) -> Result<Self, PvrdmaError> {
        let pdir = PageDir::new(dma, npages)?;
        let mut pages = KVec::try_with_capacity(npages as usize)?;
        for i in 0..npages {
            let p = DmaBuffer::alloc(dma, PAGE_SIZE)?.share();
            pdir.set_page(i, p.logical())?;
            pages
                .push_within_capacity(p)
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        Ok(PagedBuffer { pages, pdir })
    }

    /// The page directory.
    pub fn pdir(&self) -> &PageDir {
        &self.pdir
    }

    /// Number of pages (`nchunks` / `num_pages` / `total_chunks`).
    pub fn npages(&self) -> u32 {
        self.pages.len() as u32
    }

    /// Page `i`.
    pub fn page(&self, i: u32) -> Option<&SharedDma> {
        self.pages.get(i as usize)
    }

    /// `len` bytes at byte offset `off` of the buffer, if they lie within one page.
    pub fn view(&self, off: usize, len: usize) -> Option<DmaView<'_>> {
        let page = self.pages.get(off / PAGE_SIZE)?;
        page.view().sub(off % PAGE_SIZE, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::dma::test_alloc::TestDma;

    #[test]
    fn table_count_formula() {
        assert_eq!(tables_for(1), 1);
        assert_eq!(tables_for(512), 1);
        assert_eq!(tables_for(513), 2);
        assert_eq!(tables_for(MAX_PAGES), 512);
    }

    #[test]
    fn directory_contents_and_capacity_checks() {
        let raw = Arc::new(TestDma::raw());
        let dma: Arc<dyn DmaAllocator> = raw.clone();
        assert_eq!(
            PageDir::new(&dma, 0).err(),
            Some(PvrdmaError::InvalidParameter)
        );
        assert_eq!(
            PageDir::new(&dma, MAX_PAGES + 1).err(),
            Some(PvrdmaError::InvalidParameter)
        );
        let pd = PageDir::new(&dma, 600).unwrap();
        assert_eq!(raw.live_count(), 3); // dir + 2 tables
        let t0 = pd.dir_entry(0);
        let t1 = pd.dir_entry(1);
        assert_ne!(t0, 0);
        assert_ne!(t1, 0);
        assert_eq!(pd.dir_entry(2), 0);
        pd.set_page(0, 0xA000).unwrap();
        pd.set_page(511, 0xB000).unwrap();
        pd.set_page(512, 0xC000).unwrap();
        pd.set_page(599, 0xD000).unwrap();
        assert_eq!(pd.set_page(600, 0xE000), Err(PvrdmaError::InvalidParameter));
        assert_eq!(pd.set_page(1, 0xE001), Err(PvrdmaError::InvalidParameter));
        // Read the tables through the fake bus addresses, as the device would.
        let rd = |addr: u64| {
            let p = raw.cpu_of(addr).unwrap();
            // SAFETY: test-only read of a live TestDma allocation.
            u64::from_le_bytes(unsafe { core::ptr::read_unaligned(p.cast::<[u8; 8]>()) })
        };
        assert_eq!(rd(pd.dma()), t0);
        assert_eq!(rd(t0), 0xA000);
        assert_eq!(rd(t0 + 511 * 8), 0xB000);
        assert_eq!(rd(t1), 0xC000);
        assert_eq!(rd(t1 + 87 * 8), 0xD000);
        assert_eq!(pd.page(599), Some(0xD000));
        assert_eq!(pd.page(600), None);
        drop(pd);
        assert_eq!(raw.live_count(), 0);
    }

    #[test]
    fn paged_buffer_maps_its_pages() {
        let raw = Arc::new(TestDma::raw());
        let dma: Arc<dyn DmaAllocator> = raw.clone();
        let b = PagedBuffer::alloc(&dma, 3).unwrap();
        assert_eq!(b.npages(), 3);
        for i in 0..3 {
            assert_eq!(b.pdir().page(i), Some(b.page(i).unwrap().logical()));
        }
        b.view(4096 + 8, 8).unwrap().write_u64(0, 0x55);
        assert_eq!(b.page(1).unwrap().view().read_u64(8), 0x55);
        assert!(b.view(4090, 8).is_none());
        assert!(b.view(3 * 4096, 1).is_none());
        drop(b);
        assert_eq!(raw.live_count(), 0);
    }
}
