//! Little-endian field access on byte views that never panics (smoltcp-style accessors).
//!
//! Reads past the end of the view return zero and writes past it are dropped; every layout in
//! this crate reads fixed-size buffers at constant offsets, and the unit tests of each layout pin
//! the sizes, so these fallbacks exist only to keep untrusted-input paths panic-free.
#![deny(unsafe_code)]

/// Read-only little-endian view over bytes.
#[derive(Clone, Copy, Debug)]
pub struct Le<T: AsRef<[u8]>>(pub T);

impl<T: AsRef<[u8]>> Le<T> {
    fn get<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        if let Some(s) = self.0.as_ref().get(off..off + N) {
            b.copy_from_slice(s);
        }
        b
    }
    /// u8 at `off`.
    pub fn u8(&self, off: usize) -> u8 {
        self.get::<1>(off)[0]
    }
    /// u16 at `off`.
    pub fn u16(&self, off: usize) -> u16 {
        u16::from_le_bytes(self.get(off))
    }
    /// u32 at `off`.
    pub fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.get(off))
    }
    /// u64 at `off`.
    pub fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.get(off))
    }
    /// `N` raw bytes at `off`.
    pub fn bytes<const N: usize>(&self, off: usize) -> [u8; N] {
        self.get(off)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Le<T> {
    fn put(&mut self, off: usize, b: &[u8]) {
        if let Some(s) = self.0.as_mut().get_mut(off..off + b.len()) {
            s.copy_from_slice(b);
        }
    }
    /// Sets u8 at `off`.
    pub fn set_u8(&mut self, off: usize, v: u8) {
        self.put(off, &[v]);
    }
    /// Sets u16 at `off`.
    pub fn set_u16(&mut self, off: usize, v: u16) {
        self.put(off, &v.to_le_bytes());
    }
    /// Sets u32 at `off`.
    pub fn set_u32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_le_bytes());
    }
    /// Sets u64 at `off`.
    pub fn set_u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_le_bytes());
    }
    /// Copies raw bytes to `off`.
    pub fn set_bytes(&mut self, off: usize, b: &[u8]) {
        self.put(off, b);
    }
}
