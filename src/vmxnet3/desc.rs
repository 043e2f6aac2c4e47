//! The 16-byte ring descriptors (vmxnet3.md §3.7): bit positions of the fields this driver
//! writes and reads, and the decoders of what the device writes, which check before use.
#![deny(unsafe_code)]

use crate::os::DmaView;

/// Bytes per descriptor of every ring.
pub const DESC_SIZE: usize = 16;
/// Largest buffer one Tx descriptor carries (a length field of 0 means this much).
pub const MAX_TX_BUF: u32 = 1 << 14;
/// Descriptors one packet may use without TSO.
pub const MAX_TXD_PER_PKT: u32 = 16;

/// Writes descriptor `i` of `ring` as two 64-bit stores: `lo` (the buffer address), then `hi`
/// (dwords 2 and 3, the generation among them). Nothing is written outside the ring.
#[inline]
pub fn write_desc(ring: &DmaView<'_>, i: u32, lo: u64, hi: u64) {
    let mut b = [0u8; DESC_SIZE];
    let (l, h) = b.split_at_mut(8);
    l.copy_from_slice(&lo.to_le_bytes());
    h.copy_from_slice(&hi.to_le_bytes());
    ring.write_block(i as usize * DESC_SIZE, &b);
}

/// Writes the 64-bit word at byte `off` of `ring` with one store.
#[inline]
pub fn write_word(ring: &DmaView<'_>, off: usize, v: u64) {
    ring.write_block(off, &v.to_le_bytes());
}

/// The four dwords of descriptor `i` (two 64-bit loads); zeros outside the ring.
#[inline]
pub fn read_desc(ring: &DmaView<'_>, i: u32) -> [u32; 4] {
    let [a, b] = ring
        .read_words::<2>(i as usize * DESC_SIZE)
        .unwrap_or([0, 0]);
    // CAST: the halves of each word.
    [a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32]
}

/// Tx descriptor dword 2: `len` (14 bits), `gen` (bit 14).
pub mod tx {
    /// `len` mask (0 means 16 KiB).
    pub const LEN_MASK: u32 = 0x3FFF;
    /// `gen`.
    pub const GEN: u32 = 1 << 14;
    /// dword 3 `eop`.
    pub const EOP: u32 = 1 << 12;
    /// dword 3 `cq` (completion requested).
    pub const CQ: u32 = 1 << 13;
}

/// Rx descriptor dword 2: `len`, `btype` (bit 14, 0 = head), `dtype` (bit 15), `gen` (bit 31).
pub mod rx {
    /// `len` mask.
    pub const LEN_MASK: u32 = 0x3FFF;
    /// `gen`.
    pub const GEN: u32 = 1 << 31;
}

/// Completion descriptors: `gen` and `type` in dword 3.
pub mod comp {
    /// `gen`.
    pub const GEN: u32 = 1 << 31;
    /// `type` (bits 30:24).
    pub const TYPE_SHIFT: u32 = 24;
    /// `type` mask after the shift.
    pub const TYPE_MASK: u32 = 0x7F;
    /// Tx completion type.
    pub const TYPE_TX: u32 = 0;
    /// Rx completion type.
    pub const TYPE_RX: u32 = 3;
    /// The type QEMU writes into Rx completions: it zeroes the descriptor and never sets the
    /// field (vmxnet3.md V9). Linux and DPDK look at the type only for LRO completions.
    pub const TYPE_RX_QEMU: u32 = 0;
}

/// A Tx completion, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxComp {
    /// Index of the packet's EOP descriptor.
    pub eop: u32,
}

/// A Tx completion that is not one: its type is not TXCOMP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadCompletion;

impl TxComp {
    /// Decodes dwords 0 and 3 (the generation already matched).
    pub fn parse(d0: u32, d3: u32) -> Result<Self, BadCompletion> {
        if (d3 >> comp::TYPE_SHIFT) & comp::TYPE_MASK != comp::TYPE_TX {
            return Err(BadCompletion);
        }
        Ok(TxComp { eop: d0 & 0xFFF })
    }
}

/// An Rx completion, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxComp {
    /// Index of the descriptor (and buffer) it completes.
    pub idx: u32,
    /// `rqID`: queue, or queue + numRxQueues for ring 1.
    pub rqid: u32,
    /// Start and end of packet.
    pub sop: bool,
    /// See `sop`.
    pub eop: bool,
    /// Bytes written to the buffer.
    pub len: u32,
    /// The device flagged an error.
    pub err: bool,
}

impl RxComp {
    /// Decodes the four dwords (the generation already matched); anything but RXCOMP (3, or
    /// 0 as QEMU leaves it) is refused (LRO completions need a feature this driver does not
    /// enable).
    pub fn parse(d: [u32; 4]) -> Result<Self, BadCompletion> {
        let ty = (d[3] >> comp::TYPE_SHIFT) & comp::TYPE_MASK;
        if ty != comp::TYPE_RX && ty != comp::TYPE_RX_QEMU {
            return Err(BadCompletion);
        }
        Ok(RxComp {
            idx: d[0] & 0xFFF,
            rqid: (d[0] >> 16) & 0x3FF,
            sop: d[0] & (1 << 15) != 0,
            eop: d[0] & (1 << 14) != 0,
            len: d[2] & 0x3FFF,
            err: d[2] & (1 << 14) != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_decode_the_reference_bits_and_refuse_other_types() {
        assert_eq!(
            TxComp::parse(0xFFFF_F00A, 0x8000_0000),
            Ok(TxComp { eop: 10 })
        );
        assert_eq!(TxComp::parse(1, 0x8300_0000), Err(BadCompletion));
        let d = [
            5 | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 30),
            0xDEAD_BEEF,
            1514 | (1 << 14),
            (3 << 24) | (1 << 31),
        ];
        assert_eq!(
            RxComp::parse(d),
            Ok(RxComp {
                idx: 5,
                rqid: 1,
                sop: true,
                eop: true,
                len: 1514,
                err: true
            })
        );
        let mut lro = d;
        lro[3] = (4 << 24) | (1 << 31);
        assert_eq!(RxComp::parse(lro), Err(BadCompletion));
        // QEMU leaves the type 0 (it zeroes the descriptor and never sets it).
        let mut qemu = d;
        qemu[3] = 1 << 31;
        assert_eq!(RxComp::parse(qemu), RxComp::parse(d));
        for ty in [1, 2, 5, 0x7F] {
            let mut other = d;
            other[3] = (ty << 24) | (1 << 31);
            assert_eq!(RxComp::parse(other), Err(BadCompletion), "type {ty}");
        }
    }
}
