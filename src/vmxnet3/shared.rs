//! DriverShared and the queue descriptors (vmxnet3.md §3.5, §3.6): the one definition of their
//! offsets in the driver, the bring-up image written while the memory is CPU-owned, and the
//! few fields either side changes afterwards (read and written volatile through a
//! [`DmaView`]).
//!
//! The driver's control page holds, at fixed offsets, DriverShared (720 bytes, revision 1),
//! the Tx and Rx queue descriptors (256 bytes each, 128-byte aligned) and the multicast table.
#![deny(unsafe_code)]

use crate::os::DmaView;

/// `VMXNET3_REV1_MAGIC`.
pub const MAGIC: u32 = 0xBABE_FEE1;
/// Offset of DriverShared in the control page.
pub const SHARED: usize = 0;
/// Bytes of DriverShared (revision 1).
pub const SHARED_LEN: usize = 720;
/// Offset of the Tx queue descriptor in the control page.
pub const TXQ: usize = 1024;
/// Offset of the Rx queue descriptor (right after the Tx one, as the device expects).
pub const RXQ: usize = TXQ + QUEUE_DESC_SIZE;
/// Size of one queue descriptor.
pub const QUEUE_DESC_SIZE: usize = 256;
/// Offset of the multicast table in the control page.
pub const MF_TABLE: usize = 2048;
/// Multicast addresses the table holds (NDIS's usual maximum list size).
pub const MAX_MULTICAST: usize = 32;

/// DriverShared field offsets.
pub mod ds {
    /// u32 magic.
    pub const MAGIC: usize = 0;
    /// misc.driverInfo.version.
    pub const DRIVER_VERSION: usize = 8;
    /// misc.driverInfo.gos.
    pub const GOS: usize = 12;
    /// misc.driverInfo.vmxnet3RevSpt.
    pub const REV_SPT: usize = 16;
    /// misc.driverInfo.uptVerSpt.
    pub const UPT_SPT: usize = 20;
    /// misc.uptFeatures (u64).
    pub const UPT_FEATURES: usize = 24;
    /// misc.queueDescPA (u64).
    pub const QUEUE_DESC_PA: usize = 40;
    /// misc.queueDescLen.
    pub const QUEUE_DESC_LEN: usize = 52;
    /// misc.mtu.
    pub const MTU: usize = 56;
    /// misc.maxNumRxSG (u16).
    pub const MAX_NUM_RX_SG: usize = 60;
    /// misc.numTxQueues (u8).
    pub const NUM_TX_QUEUES: usize = 62;
    /// misc.numRxQueues (u8).
    pub const NUM_RX_QUEUES: usize = 63;
    /// intrConf.autoMask (u8).
    pub const AUTO_MASK: usize = 80;
    /// intrConf.numIntrs (u8).
    pub const NUM_INTRS: usize = 81;
    /// intrConf.eventIntrIdx (u8).
    pub const EVENT_INTR_IDX: usize = 82;
    /// intrConf.modLevels (25 × u8).
    pub const MOD_LEVELS: usize = 83;
    /// intrConf.intrCtrl (bit 0 DISABLE_ALL).
    pub const INTR_CTRL: usize = 108;
    /// rxFilterConf.rxMode.
    pub const RX_MODE: usize = 120;
    /// rxFilterConf.mfTableLen (u16, bytes).
    pub const MF_TABLE_LEN: usize = 124;
    /// rxFilterConf.mfTablePA (u64).
    pub const MF_TABLE_PA: usize = 128;
    /// ecr (device-written event bits).
    pub const ECR: usize = 696;
}

/// Tx queue descriptor offsets.
pub mod txq {
    /// ctrl.txNumDeferred (driver-written).
    pub const NUM_DEFERRED: usize = 0;
    /// ctrl.txThreshold (device-written).
    pub const THRESHOLD: usize = 4;
    /// conf.txRingBasePA.
    pub const RING_BASE: usize = 16;
    /// conf.compRingBasePA.
    pub const COMP_RING_BASE: usize = 32;
    /// conf.txRingSize.
    pub const RING_SIZE: usize = 56;
    /// conf.compRingSize.
    pub const COMP_RING_SIZE: usize = 64;
    /// conf.intrIdx (u8).
    pub const INTR_IDX: usize = 72;
    /// status.stopped (u8, after GET_QUEUE_STATUS).
    pub const STOPPED: usize = 80;
    /// status.error.
    pub const ERROR: usize = 84;
    /// stats (UPT1_TxStats, 10 × u64, after GET_STATS).
    pub const STATS: usize = 88;
}

/// Rx queue descriptor offsets.
pub mod rxq {
    /// ctrl.updateRxProd (u8, device-written).
    pub const UPDATE_RX_PROD: usize = 0;
    /// conf.rxRingBasePA[0].
    pub const RING0_BASE: usize = 16;
    /// conf.rxRingBasePA[1].
    pub const RING1_BASE: usize = 24;
    /// conf.compRingBasePA.
    pub const COMP_RING_BASE: usize = 32;
    /// conf.rxRingSize[0].
    pub const RING0_SIZE: usize = 56;
    /// conf.rxRingSize[1].
    pub const RING1_SIZE: usize = 60;
    /// conf.compRingSize.
    pub const COMP_RING_SIZE: usize = 64;
    /// conf.intrIdx (u8).
    pub const INTR_IDX: usize = 72;
    /// status.stopped (u8).
    pub const STOPPED: usize = 80;
    /// status.error.
    pub const ERROR: usize = 84;
    /// stats (UPT1_RxStats).
    pub const STATS: usize = 88;
}

/// `intrCtrl` DISABLE_ALL.
pub const INTR_CTRL_DISABLE_ALL: u32 = 1;

/// `ecr` bits.
pub mod ecr {
    /// An Rx queue stopped with an error.
    pub const RQERR: u32 = 1 << 0;
    /// A Tx queue stopped with an error.
    pub const TQERR: u32 = 1 << 1;
    /// The link changed.
    pub const LINK: u32 = 1 << 2;
}

/// `gos`: 64-bit Windows (gosBits 2, gosType 2 in bits 5:2; version 0).
pub const GOS_WINDOWS_64: u32 = 2 | (2 << 2);
/// `driverInfo.version` this driver reports.
pub const DRIVER_VERSION: u32 = 0x0100_0000;

/// What bring-up writes into DriverShared and the two queue descriptors.
#[derive(Clone, Copy, Debug)]
pub struct SharedInit {
    /// Logical address of the control page (queue descriptors and multicast table inside).
    pub page: u64,
    /// Tx ring, its size; Tx completion ring, its size.
    pub tx: (u64, u32, u64, u32),
    /// Rx ring 0, its size; Rx completion ring, its size (ring 1 absent).
    pub rx: (u64, u32, u64, u32),
    /// MTU.
    pub mtu: u32,
    /// Vectors used, event vector, Tx vector, Rx vector.
    pub intrs: (u8, u8, u8, u8),
    /// `autoMask`.
    pub auto_mask: bool,
    /// Initial `rxMode`.
    pub rx_mode: u32,
}

/// Writes the bring-up image into the CPU-owned control page `page` (zeroed by the
/// allocator); `intrCtrl` starts with DISABLE_ALL, cleared once the vectors are ready.
pub fn write_init(page: &mut [u8], init: &SharedInit) {
    let mut w = |off: usize, b: &[u8]| {
        if let Some(d) = page.get_mut(off..off + b.len()) {
            d.copy_from_slice(b);
        }
    };
    let s = SHARED;
    w(s + ds::MAGIC, &MAGIC.to_le_bytes());
    w(s + ds::DRIVER_VERSION, &DRIVER_VERSION.to_le_bytes());
    w(s + ds::GOS, &GOS_WINDOWS_64.to_le_bytes());
    w(s + ds::REV_SPT, &1u32.to_le_bytes());
    w(s + ds::UPT_SPT, &1u32.to_le_bytes());
    w(s + ds::UPT_FEATURES, &0u64.to_le_bytes());
    w(
        s + ds::QUEUE_DESC_PA,
        &(init.page + TXQ as u64).to_le_bytes(),
    );
    // CAST: two 256-byte descriptors.
    w(
        s + ds::QUEUE_DESC_LEN,
        &((2 * QUEUE_DESC_SIZE) as u32).to_le_bytes(),
    );
    w(s + ds::MTU, &init.mtu.to_le_bytes());
    w(s + ds::MAX_NUM_RX_SG, &1u16.to_le_bytes());
    w(s + ds::NUM_TX_QUEUES, &[1]);
    w(s + ds::NUM_RX_QUEUES, &[1]);
    let (n, ev, _, _) = init.intrs;
    w(s + ds::AUTO_MASK, &[u8::from(init.auto_mask)]);
    w(s + ds::NUM_INTRS, &[n]);
    w(s + ds::EVENT_INTR_IDX, &[ev]);
    w(s + ds::INTR_CTRL, &INTR_CTRL_DISABLE_ALL.to_le_bytes());
    w(s + ds::RX_MODE, &init.rx_mode.to_le_bytes());
    w(
        s + ds::MF_TABLE_PA,
        &(init.page + MF_TABLE as u64).to_le_bytes(),
    );
    let (tx_ring, tx_size, tx_comp, tx_comp_size) = init.tx;
    w(TXQ + txq::RING_BASE, &tx_ring.to_le_bytes());
    w(TXQ + txq::COMP_RING_BASE, &tx_comp.to_le_bytes());
    w(TXQ + txq::RING_SIZE, &tx_size.to_le_bytes());
    w(TXQ + txq::COMP_RING_SIZE, &tx_comp_size.to_le_bytes());
    w(TXQ + txq::INTR_IDX, &[init.intrs.2]);
    let (rx_ring, rx_size, rx_comp, rx_comp_size) = init.rx;
    w(RXQ + rxq::RING0_BASE, &rx_ring.to_le_bytes());
    w(RXQ + rxq::RING0_SIZE, &rx_size.to_le_bytes());
    w(RXQ + rxq::COMP_RING_BASE, &rx_comp.to_le_bytes());
    w(RXQ + rxq::COMP_RING_SIZE, &rx_comp_size.to_le_bytes());
    w(RXQ + rxq::INTR_IDX, &[init.intrs.3]);
}

/// The control page once shared with the device: the fields that change after bring-up.
#[derive(Clone, Copy)]
pub struct Shared<'a>(pub DmaView<'a>);

impl Shared<'_> {
    /// `ecr` (device-written).
    pub fn ecr(&self) -> u32 {
        self.0.read_u32(SHARED + ds::ECR)
    }
    /// Clears `ecr` (before a re-activation).
    pub fn clear_ecr(&self) {
        self.0.write_u32(SHARED + ds::ECR, 0);
    }
    /// Sets or clears DISABLE_ALL in `intrCtrl`.
    pub fn set_interrupts_disabled(&self, off: bool) {
        let v = if off { INTR_CTRL_DISABLE_ALL } else { 0 };
        self.0.write_u32(SHARED + ds::INTR_CTRL, v);
    }
    /// `rxMode`.
    pub fn set_rx_mode(&self, mode: u32) {
        self.0.write_u32(SHARED + ds::RX_MODE, mode);
    }
    /// The multicast table and its length; `macs` at most [`MAX_MULTICAST`] (longer lists are
    /// cut: the caller checks).
    pub fn set_multicast(&self, macs: &[[u8; 6]]) {
        let n = macs.len().min(MAX_MULTICAST);
        for (i, m) in macs.iter().take(n).enumerate() {
            self.0.write_bytes(MF_TABLE + 6 * i, m);
        }
        // CAST: n ≤ 32, 6·n < 2^16.
        self.0.write_u16(SHARED + ds::MF_TABLE_LEN, (6 * n) as u16);
    }
    /// `txNumDeferred`.
    pub fn set_tx_deferred(&self, n: u32) {
        self.0.write_u32(TXQ + txq::NUM_DEFERRED, n);
    }
    /// `txThreshold` (device-written).
    pub fn tx_threshold(&self) -> u32 {
        self.0.read_u32(TXQ + txq::THRESHOLD)
    }
    /// `updateRxProd` (device-written; the low byte of an aligned dword: one load).
    pub fn update_rx_prod(&self) -> bool {
        self.0.read_u32(RXQ + rxq::UPDATE_RX_PROD) & 0xFF != 0
    }
    /// Tx and Rx queue status (stopped, error), as GET_QUEUE_STATUS left them.
    pub fn queue_status(&self) -> [(bool, u32); 2] {
        [
            (
                self.0.read_u8(TXQ + txq::STOPPED) != 0,
                self.0.read_u32(TXQ + txq::ERROR),
            ),
            (
                self.0.read_u8(RXQ + rxq::STOPPED) != 0,
                self.0.read_u32(RXQ + rxq::ERROR),
            ),
        ]
    }
    /// The ten UPT1 counters of the Tx (`rx` false) or Rx queue, as GET_STATS left them.
    pub fn stats(&self, rx: bool) -> [u64; 10] {
        let base = if rx {
            RXQ + rxq::STATS
        } else {
            TXQ + txq::STATS
        };
        let mut s = [0u64; 10];
        for (i, x) in s.iter_mut().enumerate() {
            *x = self.0.read_u64(base + 8 * i);
        }
        s
    }
    /// Zeroes the device-written queue fields before a re-activation (status, statistics,
    /// `txNumDeferred`).
    pub fn clear_queue_state(&self) {
        for base in [TXQ, RXQ] {
            if let Some(v) = self
                .0
                .sub(base + txq::STOPPED, QUEUE_DESC_SIZE - txq::STOPPED)
            {
                v.zero();
            }
        }
        self.set_tx_deferred(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bring_up_image_has_the_reference_offsets() {
        let mut page = [0u8; 4096];
        write_init(
            &mut page,
            &SharedInit {
                page: 0x1_0000,
                tx: (0x2_0000, 256, 0x3_0000, 256),
                rx: (0x4_0000, 128, 0x5_0000, 128),
                mtu: 1500,
                intrs: (3, 2, 1, 0),
                auto_mask: true,
                rx_mode: 5,
            },
        );
        let u32_at = |o: usize| u32::from_le_bytes(page[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(page[o..o + 8].try_into().unwrap());
        // Offsets as vmxnet3.md §3.5/§3.6 give them, literally.
        assert_eq!(u32_at(0), 0xBABE_FEE1);
        assert_eq!(u32_at(12), 0x0A, "gos: 64-bit Windows");
        assert_eq!((u32_at(16), u32_at(20)), (1, 1));
        assert_eq!(u64_at(40), 0x1_0000 + 1024);
        assert_eq!(u32_at(52), 512);
        assert_eq!(u32_at(56), 1500);
        assert_eq!(&page[60..64], &[1, 0, 1, 1]);
        assert_eq!(&page[80..83], &[1, 3, 2]);
        assert_eq!(u32_at(108), 1);
        assert_eq!(u32_at(120), 5);
        assert_eq!(u64_at(128), 0x1_0000 + 2048);
        assert_eq!(u64_at(1024 + 16), 0x2_0000);
        assert_eq!(u64_at(1024 + 32), 0x3_0000);
        assert_eq!((u32_at(1024 + 56), u32_at(1024 + 64)), (256, 256));
        assert_eq!(page[1024 + 72], 1);
        assert_eq!(u64_at(1280 + 16), 0x4_0000);
        assert_eq!(u64_at(1280 + 24), 0, "ring 1 absent");
        assert_eq!(u64_at(1280 + 32), 0x5_0000);
        assert_eq!((u32_at(1280 + 56), u32_at(1280 + 60)), (128, 0));
        assert_eq!(u32_at(1280 + 64), 128);
        assert_eq!(page[1280 + 72], 0);
    }
}
