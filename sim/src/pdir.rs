//! Two-level page directories (reference §6; M16) and the paged memory they describe.
#![deny(unsafe_code)]

use crate::dma::{DmaFault, DmaSpace};

/// Largest page count a directory can describe (`PVRDMA_PAGE_DIR_MAX_PAGES`).
pub const MAX_PAGES: u32 = 512 * 512;
/// Page size.
pub const PAGE: u64 = 4096;

/// Why a page directory was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PdirError {
    /// Page count 0 or above [`MAX_PAGES`].
    Count,
    /// Directory, table or page address not 4 KiB aligned.
    Align,
    /// Directory or table not readable.
    Fault(DmaFault),
}

/// Reads the directory at `pdir` describing `npages` pages (M16: at creation time).
pub fn read_pdir(dma: &DmaSpace, pdir: u64, npages: u32) -> Result<Vec<u64>, PdirError> {
    if npages == 0 || npages > MAX_PAGES {
        return Err(PdirError::Count);
    }
    if !pdir.is_multiple_of(PAGE) {
        return Err(PdirError::Align);
    }
    let ntables = ((npages - 1) >> 9) + 1;
    let mut pages = Vec::with_capacity(npages as usize);
    for t in 0..ntables {
        let table = dma
            .read_u64(pdir + 8 * u64::from(t))
            .map_err(PdirError::Fault)?;
        if !table.is_multiple_of(PAGE) {
            return Err(PdirError::Align);
        }
        let in_table = (npages - t * 512).min(512) as usize;
        let mut raw = vec![0u8; in_table * 8];
        dma.read(table, &mut raw).map_err(PdirError::Fault)?;
        for c in raw.chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            let page = u64::from_le_bytes(b);
            if !page.is_multiple_of(PAGE) {
                return Err(PdirError::Align);
            }
            pages.push(page);
        }
    }
    Ok(pages)
}

/// Memory described by a page list: byte offset `o` is at `pages[o / 4096] + o % 4096`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PagedMem {
    pages: Vec<u64>,
}

impl PagedMem {
    /// Wraps a page list.
    pub fn new(pages: Vec<u64>) -> Self {
        Self { pages }
    }

    /// Number of pages.
    pub fn npages(&self) -> usize {
        self.pages.len()
    }

    /// Bus address of page `i`.
    pub fn page(&self, i: usize) -> Option<u64> {
        self.pages.get(i).copied()
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }

    /// True for an empty list.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    fn fault(off: u64, len: usize) -> DmaFault {
        DmaFault { bus: off, len }
    }

    fn bus_of(&self, off: u64) -> Option<u64> {
        let page = *self.pages.get(usize::try_from(off / PAGE).ok()?)?;
        Some(page + off % PAGE)
    }

    /// Reads `out.len()` bytes at offset `off`, crossing pages as needed.
    pub fn read(&self, dma: &DmaSpace, off: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        let mut done = 0usize;
        while done < out.len() {
            let o = off + done as u64;
            let bus = self.bus_of(o).ok_or(Self::fault(o, out.len() - done))?;
            let chunk = ((PAGE - o % PAGE) as usize).min(out.len() - done);
            dma.read(bus, &mut out[done..done + chunk])?;
            done += chunk;
        }
        Ok(())
    }

    /// Writes `data` at offset `off`, crossing pages as needed.
    pub fn write(&self, dma: &DmaSpace, off: u64, data: &[u8]) -> Result<(), DmaFault> {
        let mut done = 0usize;
        while done < data.len() {
            let o = off + done as u64;
            let bus = self.bus_of(o).ok_or(Self::fault(o, data.len() - done))?;
            let chunk = ((PAGE - o % PAGE) as usize).min(data.len() - done);
            dma.write(bus, &data[done..done + chunk])?;
            done += chunk;
        }
        Ok(())
    }

    /// Atomic read of a shared u32 at `off` (ring indices).
    pub fn read_u32(&self, dma: &DmaSpace, off: u64) -> Result<u32, DmaFault> {
        dma.read_u32(self.bus_of(off).ok_or(Self::fault(off, 4))?)
    }

    /// Atomic write of a shared u32 at `off`.
    pub fn write_u32(&self, dma: &DmaSpace, off: u64, v: u32) -> Result<(), DmaFault> {
        dma.write_u32(self.bus_of(off).ok_or(Self::fault(off, 4))?, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::DmaBuffer;
    use std::sync::Arc;

    #[test]
    fn reads_two_level_directory_and_validates() {
        let s = Arc::new(DmaSpace::new());
        let data = DmaBuffer::new(&s, 3);
        let table = DmaBuffer::new(&s, 1);
        let dir = DmaBuffer::new(&s, 1);
        for i in 0..3 {
            table.write_u64(8 * i, data.page_bus(2 - i));
        }
        dir.write_u64(0, table.bus());
        let pages = read_pdir(&s, dir.bus(), 3).unwrap();
        assert_eq!(
            pages,
            vec![data.page_bus(2), data.page_bus(1), data.page_bus(0)]
        );
        let m = PagedMem::new(pages);
        m.write(&s, 4090, &[9; 12]).unwrap();
        assert_eq!(data.read_vec(2 * 4096 + 4090, 6), vec![9; 6]);
        assert_eq!(data.read_vec(4096, 6), vec![9; 6]);
        assert!(m.read(&s, 3 * 4096 - 2, &mut [0; 4]).is_err());

        assert_eq!(read_pdir(&s, dir.bus(), 0), Err(PdirError::Count));
        assert_eq!(
            read_pdir(&s, dir.bus(), MAX_PAGES + 1),
            Err(PdirError::Count)
        );
        assert_eq!(read_pdir(&s, dir.bus() + 8, 1), Err(PdirError::Align));
        // 513 pages need a second table, whose entry is 0 → unregistered → fault.
        assert!(matches!(
            read_pdir(&s, dir.bus(), 513),
            Err(PdirError::Fault(_))
        ));
        table.write_u64(0, data.bus() + 8);
        assert_eq!(read_pdir(&s, dir.bus(), 1), Err(PdirError::Align));
        assert!(matches!(read_pdir(&s, 0x1000, 1), Err(PdirError::Fault(_))));
    }
}
