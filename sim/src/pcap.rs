//! Classic libpcap writer for simulated RoCEv2 traffic (cm.md §7.5).
//!
//! Global header: magic 0xA1B2C3D4 (µs) or 0xA1B23C4D (ns), version 2.4, thiszone 0, sigfigs 0,
//! snaplen 65535, network 1 (LINKTYPE_ETHERNET), written in native byte order as libpcap does
//! (readers detect the order from the magic). Timestamps are the fabric's virtual nanoseconds.
#![deny(unsafe_code)]

use std::io::{self, Write};

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Snapshot length written in the global header; longer frames are truncated in the capture.
pub const SNAPLEN: u32 = 65_535;

/// Timestamp resolution of the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsResolution {
    /// Magic 0xA1B2C3D4, `ts_usec` in microseconds.
    Micro,
    /// Magic 0xA1B23C4D, `ts_usec` in nanoseconds.
    Nano,
}

impl TsResolution {
    /// The global-header magic number.
    pub const fn magic(self) -> u32 {
        match self {
            Self::Micro => 0xA1B2_C3D4,
            Self::Nano => 0xA1B2_3C4D,
        }
    }
}

/// Writes a pcap stream to any `Write`.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    res: TsResolution,
    frames: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header.
    ///
    /// # Errors
    /// Any I/O error of `out`.
    pub fn new(mut out: W, res: TsResolution) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&res.magic().to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        // thiszone (8..12) and sigfigs (12..16) stay 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_ne_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        out.write_all(&h)?;
        Ok(Self {
            out,
            res,
            frames: 0,
        })
    }

    /// Appends one frame captured at virtual time `ts_ns`.
    ///
    /// # Errors
    /// Any I/O error of the underlying writer.
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let secs = ts_ns / 1_000_000_000;
        let frac = ts_ns % 1_000_000_000;
        let frac = match self.res {
            TsResolution::Micro => frac / 1_000,
            TsResolution::Nano => frac,
        };
        // CAST: pcap's 32-bit seconds wrap after 136 years of virtual time; frac < 10^9.
        let (secs, frac) = (secs as u32, frac as u32);
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&incl.to_ne_bytes());
        h[12..16].copy_from_slice(&orig.to_ne_bytes());
        self.out.write_all(&h)?;
        // CAST: incl <= frame.len().
        self.out.write_all(&frame[..incl as usize])?;
        self.frames += 1;
        Ok(())
    }

    /// Frames written so far.
    pub const fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes the underlying writer.
    ///
    /// # Errors
    /// Any I/O error of the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests;
