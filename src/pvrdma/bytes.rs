//! Little-endian field access on byte buffers and DMA views that never panics: writes outside
//! the buffer are dropped and reads outside it return 0. Encoders size their buffers up front.
#![deny(unsafe_code)]

use crate::os::DmaView;

/// A destination for little-endian encoders: a byte slice (tests, command requests) or a DMA
/// window (ring slots).
pub trait Sink {
    /// Copies `data` to `off`.
    fn put(&mut self, off: usize, data: &[u8]);
    /// One byte.
    fn put_u8(&mut self, off: usize, v: u8) {
        self.put(off, &[v]);
    }
    /// LE u16.
    fn put_u16(&mut self, off: usize, v: u16) {
        self.put(off, &v.to_le_bytes());
    }
    /// LE u32.
    fn put_u32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_le_bytes());
    }
    /// LE u64.
    fn put_u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_le_bytes());
    }
    /// Bytes available.
    fn capacity(&self) -> usize;
}

impl Sink for [u8] {
    fn put(&mut self, off: usize, data: &[u8]) {
        if let Some(dst) = off
            .checked_add(data.len())
            .and_then(|end| self.get_mut(off..end))
        {
            dst.copy_from_slice(data);
        }
    }
    fn capacity(&self) -> usize {
        self.len()
    }
}

impl Sink for DmaView<'_> {
    fn put(&mut self, off: usize, data: &[u8]) {
        // One bounds check and wide stores for the block (encoders hand over whole headers
        // and SGEs); a block that does not fit is dropped, as encoders size-check first.
        if !self.write_block(off, data) {
            self.write_bytes(off, data);
        }
    }
    fn put_u32(&mut self, off: usize, v: u32) {
        self.write_u32(off, v);
    }
    fn put_u64(&mut self, off: usize, v: u64) {
        // Two aligned 32-bit stores: the device reads WQEs only after the index update.
        self.write_u32(off, v as u32);
        self.write_u32(off.wrapping_add(4), (v >> 32) as u32);
    }
    fn capacity(&self) -> usize {
        self.len()
    }
}

/// Reads `N` bytes at `off` (zero-filled outside `b`).
pub fn get<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = off.checked_add(N).and_then(|end| b.get(off..end)) {
        out.copy_from_slice(src);
    }
    out
}

/// LE u8.
pub fn get_u8(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}
/// LE u16.
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(get(b, off))
}
/// LE u32.
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(get(b, off))
}
/// LE u64.
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(get(b, off))
}
