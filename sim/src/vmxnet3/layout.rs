//! The vmxnet3 device interface as the model reads it: register offsets, commands, and the
//! byte offsets of DriverShared, the queue descriptors and the 16-byte ring descriptors
//! (`docs/reference/vmxnet3.md` §3.2–§3.7). Written from the reference's tables, not from any
//! driver: the driver crate has its own definitions, so a misread offset fails a test.
//!
//! Everything is little-endian and naturally aligned; offsets are from the start of the
//! structure named by the module.
#![deny(unsafe_code)]

/// BAR1 ("VD", virtual device) registers, 32-bit, 8-byte spaced (§3.2).
pub mod bar1 {
    /// Revision report (read: mask of supported revisions) / selection (write: `1 << (rev-1)`).
    pub const VRRS: u32 = 0x00;
    /// UPT version report / selection, same protocol.
    pub const UVRS: u32 = 0x08;
    /// DriverShared physical address, low half.
    pub const DSAL: u32 = 0x10;
    /// DriverShared physical address, high half.
    pub const DSAH: u32 = 0x18;
    /// Command (write) and command result (read).
    pub const CMD: u32 = 0x20;
    /// Current MAC, bytes 0–3 (byte 0 in bits 7:0).
    pub const MACL: u32 = 0x28;
    /// Current MAC, bytes 4–5 in bits 15:0.
    pub const MACH: u32 = 0x30;
    /// Interrupt cause (INTx/MSI).
    pub const ICR: u32 = 0x38;
    /// Event cause acknowledgement (write the handled bits).
    pub const ECR: u32 = 0x40;
}

/// BAR0 ("PT", pass-through) registers (§3.2).
pub mod bar0 {
    /// IMR of vector `i` at `IMR + 8·i`.
    pub const IMR: u32 = 0x000;
    /// Tx producer of queue `q` at `TXPROD + 8·q`.
    pub const TXPROD: u32 = 0x600;
    /// Rx ring 0 producer of queue `q` at `RXPROD + 8·q`.
    pub const RXPROD: u32 = 0x800;
    /// Rx ring 1 producer of queue `q` at `RXPROD2 + 8·q`.
    pub const RXPROD2: u32 = 0xA00;
}

/// Size of BAR0 and BAR1 (`VMXNET3_PT_REG_SIZE`, `VMXNET3_VD_REG_SIZE`).
pub const BAR_SIZE: u32 = 4096;
/// Register spacing (`VMXNET3_REG_ALIGN`).
pub const REG_ALIGN: u32 = 8;

/// Commands written to CMD (§3.3).
pub mod cmd {
    /// First SET command.
    pub const FIRST_SET: u32 = 0xCAFE_0000;
    /// ACTIVATE_DEV (result 0 on success).
    pub const ACTIVATE_DEV: u32 = FIRST_SET;
    /// QUIESCE_DEV.
    pub const QUIESCE_DEV: u32 = FIRST_SET + 1;
    /// RESET_DEV.
    pub const RESET_DEV: u32 = FIRST_SET + 2;
    /// UPDATE_RX_MODE.
    pub const UPDATE_RX_MODE: u32 = FIRST_SET + 3;
    /// UPDATE_MAC_FILTERS (the multicast table).
    pub const UPDATE_MAC_FILTERS: u32 = FIRST_SET + 4;
    /// UPDATE_VLAN_FILTERS.
    pub const UPDATE_VLAN_FILTERS: u32 = FIRST_SET + 5;
    /// UPDATE_RSSIDT.
    pub const UPDATE_RSSIDT: u32 = FIRST_SET + 6;
    /// UPDATE_IML.
    pub const UPDATE_IML: u32 = FIRST_SET + 7;
    /// UPDATE_PMCFG.
    pub const UPDATE_PMCFG: u32 = FIRST_SET + 8;
    /// UPDATE_FEATURE.
    pub const UPDATE_FEATURE: u32 = FIRST_SET + 9;
    /// The last SET command of revision 1 (0x0C, ACTIVATE_VF / reserved).
    pub const LAST_SET_REV1: u32 = FIRST_SET + 0x0C;
    /// First GET command.
    pub const FIRST_GET: u32 = 0xF00D_0000;
    /// GET_QUEUE_STATUS: the device writes each queue descriptor's `status`.
    pub const GET_QUEUE_STATUS: u32 = FIRST_GET;
    /// GET_STATS: the device writes each queue descriptor's `stats`.
    pub const GET_STATS: u32 = FIRST_GET + 1;
    /// GET_LINK: `speed_Mbps << 16 | up`.
    pub const GET_LINK: u32 = FIRST_GET + 2;
    /// GET_PERM_MAC_LO.
    pub const GET_PERM_MAC_LO: u32 = FIRST_GET + 3;
    /// GET_PERM_MAC_HI.
    pub const GET_PERM_MAC_HI: u32 = FIRST_GET + 4;
    /// GET_DID_LO.
    pub const GET_DID_LO: u32 = FIRST_GET + 5;
    /// GET_DID_HI.
    pub const GET_DID_HI: u32 = FIRST_GET + 6;
    /// GET_DEV_EXTRA_INFO.
    pub const GET_DEV_EXTRA_INFO: u32 = FIRST_GET + 7;
    /// GET_CONF_INTR: bits 1:0 interrupt type, 3:2 mask mode.
    pub const GET_CONF_INTR: u32 = FIRST_GET + 8;
    /// GET_ADAPTIVE_RING_INFO (the last GET command of revision 1).
    pub const GET_ADAPTIVE_RING_INFO: u32 = FIRST_GET + 9;
}

/// `VMXNET3_REV1_MAGIC`.
pub const REV1_MAGIC: u32 = 0xBABE_FEE1;
/// DriverShared of revision 1 (no `devReadExt`).
pub const SHARED_LEN: usize = 720;
/// Size of one Tx or Rx queue descriptor.
pub const QUEUE_DESC_SIZE: usize = 256;
/// Queue descriptor table alignment (`VMXNET3_QUEUE_DESC_ALIGN`).
pub const QUEUE_DESC_ALIGN: u64 = 128;
/// Ring base alignment (`VMXNET3_RING_BA_ALIGN`).
pub const RING_ALIGN: u64 = 512;
/// Ring sizes are multiples of this (`VMXNET3_RING_SIZE_ALIGN`).
pub const RING_SIZE_ALIGN: u32 = 32;
/// Largest Tx, Tx completion and Rx ring.
pub const RING_MAX: u32 = 4096;
/// Largest Rx completion ring.
pub const RX_COMP_RING_MAX: u32 = 8192;
/// Every ring descriptor is 16 bytes.
pub const DESC_SIZE: u64 = 16;
/// Largest MTU (`VMXNET3_MAX_MTU`) and smallest (`VMXNET3_MIN_MTU`).
pub const MTU_MAX: u32 = 9000;
/// See [`MTU_MAX`].
pub const MTU_MIN: u32 = 60;
/// MSI-X vectors of revision 1 (8 Tx + 16 Rx + 1 event).
pub const MAX_INTRS: u32 = 25;
/// Queue limits of revision 1.
pub const MAX_TX_QUEUES: u8 = 8;
/// See [`MAX_TX_QUEUES`].
pub const MAX_RX_QUEUES: u8 = 16;
/// Largest moderation level (UPT1_IML_ADAPTIVE).
pub const IML_MAX: u8 = 8;
/// Descriptors one non-TSO packet may use (`VMXNET3_MAX_TXD_PER_PKT`).
pub const MAX_TXD_PER_PKT: usize = 16;
/// A Tx descriptor length of 0 means this many bytes (`VMXNET3_MAX_TX_BUF_SIZE`).
pub const MAX_TX_BUF: u32 = 1 << 14;
/// Smallest head (type 0) Rx buffer (`VMXNET3_MIN_T0_BUF_SIZE`).
pub const MIN_HEAD_BUF: u32 = 128;

/// DriverShared offsets (§3.5; misc, intrConf and rxFilterConf at their absolute offsets).
pub mod shared {
    /// u32 magic.
    pub const MAGIC: usize = 0;
    /// misc.driverInfo.version.
    pub const DRIVER_VERSION: usize = 8;
    /// misc.driverInfo.gos (bits 1:0 gosBits, 5:2 gosType, 21:6 gosVer, 31:22 misc).
    pub const GOS: usize = 12;
    /// misc.driverInfo.vmxnet3RevSpt.
    pub const REV_SPT: usize = 16;
    /// misc.driverInfo.uptVerSpt.
    pub const UPT_SPT: usize = 20;
    /// misc.uptFeatures (u64).
    pub const UPT_FEATURES: usize = 24;
    /// misc.ddPA (u64).
    pub const DD_PA: usize = 32;
    /// misc.queueDescPA (u64).
    pub const QUEUE_DESC_PA: usize = 40;
    /// misc.ddLen.
    pub const DD_LEN: usize = 48;
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
    /// intrConf.autoMask (u8 Bool).
    pub const AUTO_MASK: usize = 80;
    /// intrConf.numIntrs (u8).
    pub const NUM_INTRS: usize = 81;
    /// intrConf.eventIntrIdx (u8).
    pub const EVENT_INTR_IDX: usize = 82;
    /// intrConf.modLevels, 25 × u8.
    pub const MOD_LEVELS: usize = 83;
    /// intrConf.intrCtrl (u32; bit 0 DISABLE_ALL).
    pub const INTR_CTRL: usize = 108;
    /// rxFilterConf.rxMode.
    pub const RX_MODE: usize = 120;
    /// rxFilterConf.mfTableLen (u16, bytes).
    pub const MF_TABLE_LEN: usize = 124;
    /// rxFilterConf.mfTablePA (u64).
    pub const MF_TABLE_PA: usize = 128;
    /// rxFilterConf.vfTable, 128 × u32, one bit per VLAN id.
    pub const VF_TABLE: usize = 136;
    /// Bytes of the VLAN filter table.
    pub const VF_TABLE_LEN: usize = 512;
    /// ecr (device → driver event bits).
    pub const ECR: usize = 696;
}

/// Event bits of `ecr` (§3.5).
pub mod ecr {
    /// An Rx queue stopped with an error.
    pub const RQERR: u32 = 1 << 0;
    /// A Tx queue stopped with an error.
    pub const TQERR: u32 = 1 << 1;
    /// The link changed.
    pub const LINK: u32 = 1 << 2;
    /// Device implementation changed.
    pub const DIC: u32 = 1 << 3;
    /// Debug.
    pub const DEBUG: u32 = 1 << 4;
}

/// `intrCtrl` bit 0.
pub const INTR_CTRL_DISABLE_ALL: u32 = 1;

/// Rx mode bits (`VMXNET3_RXM_*`).
pub mod rxm {
    /// Unicast to the current MAC.
    pub const UCAST: u32 = 0x01;
    /// Multicast passing the table.
    pub const MCAST: u32 = 0x02;
    /// Broadcast.
    pub const BCAST: u32 = 0x04;
    /// Every multicast.
    pub const ALL_MULTI: u32 = 0x08;
    /// Everything.
    pub const PROMISC: u32 = 0x10;
    /// Every defined bit.
    pub const ALL: u32 = 0x1F;
}

/// UPT1 feature bits of `uptFeatures`.
pub mod upt {
    /// Rx checksum verification.
    pub const RXCSUM: u64 = 0x1;
    /// RSS.
    pub const RSS: u64 = 0x2;
    /// VLAN tag stripping.
    pub const RXVLAN: u64 = 0x4;
    /// LRO.
    pub const LRO: u64 = 0x8;
}

/// Guest OS type of `gos` bits 5:2.
pub const GOS_TYPE_WIN: u32 = 2;

/// Tx queue descriptor offsets (§3.6).
pub mod txq {
    /// ctrl.txNumDeferred (driver-written).
    pub const NUM_DEFERRED: usize = 0;
    /// ctrl.txThreshold (device-written).
    pub const THRESHOLD: usize = 4;
    /// conf.txRingBasePA.
    pub const RING_BASE: usize = 16;
    /// conf.dataRingBasePA.
    pub const DATA_RING_BASE: usize = 24;
    /// conf.compRingBasePA.
    pub const COMP_RING_BASE: usize = 32;
    /// conf.txRingSize.
    pub const RING_SIZE: usize = 56;
    /// conf.dataRingSize.
    pub const DATA_RING_SIZE: usize = 60;
    /// conf.compRingSize.
    pub const COMP_RING_SIZE: usize = 64;
    /// conf.intrIdx (u8).
    pub const INTR_IDX: usize = 72;
    /// status.stopped (u8).
    pub const STOPPED: usize = 80;
    /// status.error.
    pub const ERROR: usize = 84;
    /// stats (UPT1_TxStats, 10 × u64).
    pub const STATS: usize = 88;
}

/// Rx queue descriptor offsets (§3.6).
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
    /// stats (UPT1_RxStats, 10 × u64).
    pub const STATS: usize = 88;
}

/// Fields of the 16-byte descriptors (§3.7), as (dword, shift, width).
pub mod desc {
    /// Tx: dword 2 `len` (14 bits; 0 = 16 KiB).
    pub const TX_LEN: (usize, u32, u32) = (2, 0, 14);
    /// Tx: dword 2 `gen`.
    pub const TX_GEN: (usize, u32, u32) = (2, 14, 1);
    /// Tx: dword 2 `dtype`.
    pub const TX_DTYPE: (usize, u32, u32) = (2, 16, 1);
    /// Tx: dword 2 `msscof`.
    pub const TX_MSSCOF: (usize, u32, u32) = (2, 18, 14);
    /// Tx: dword 3 `hlen`.
    pub const TX_HLEN: (usize, u32, u32) = (3, 0, 10);
    /// Tx: dword 3 `om`.
    pub const TX_OM: (usize, u32, u32) = (3, 10, 2);
    /// Tx: dword 3 `eop`.
    pub const TX_EOP: (usize, u32, u32) = (3, 12, 1);
    /// Tx: dword 3 `cq`.
    pub const TX_CQ: (usize, u32, u32) = (3, 13, 1);
    /// Tx: dword 3 `ti`.
    pub const TX_TI: (usize, u32, u32) = (3, 15, 1);
    /// Tx: dword 3 `tci`.
    pub const TX_TCI: (usize, u32, u32) = (3, 16, 16);
    /// Tx completion: dword 0 `txdIdx`.
    pub const TCD_TXIDX: (usize, u32, u32) = (0, 0, 12);
    /// Tx completion: dword 3 `type`.
    pub const TCD_TYPE: (usize, u32, u32) = (3, 24, 7);
    /// Tx completion: dword 3 `gen`.
    pub const TCD_GEN: (usize, u32, u32) = (3, 31, 1);
    /// Rx: dword 2 `len`.
    pub const RX_LEN: (usize, u32, u32) = (2, 0, 14);
    /// Rx: dword 2 `btype` (0 head, 1 body).
    pub const RX_BTYPE: (usize, u32, u32) = (2, 14, 1);
    /// Rx: dword 2 `dtype`.
    pub const RX_DTYPE: (usize, u32, u32) = (2, 15, 1);
    /// Rx: dword 2 `gen`.
    pub const RX_GEN: (usize, u32, u32) = (2, 31, 1);
    /// Rx completion: dword 0 `rxdIdx`.
    pub const RCD_RXIDX: (usize, u32, u32) = (0, 0, 12);
    /// Rx completion: dword 0 `eop`.
    pub const RCD_EOP: (usize, u32, u32) = (0, 14, 1);
    /// Rx completion: dword 0 `sop`.
    pub const RCD_SOP: (usize, u32, u32) = (0, 15, 1);
    /// Rx completion: dword 0 `rqID`.
    pub const RCD_RQID: (usize, u32, u32) = (0, 16, 10);
    /// Rx completion: dword 0 `cnc` (checksum not calculated).
    pub const RCD_CNC: (usize, u32, u32) = (0, 30, 1);
    /// Rx completion: dword 2 `len`.
    pub const RCD_LEN: (usize, u32, u32) = (2, 0, 14);
    /// Rx completion: dword 2 `err`.
    pub const RCD_ERR: (usize, u32, u32) = (2, 14, 1);
    /// Rx completion: dword 2 `ts` (tag stripped).
    pub const RCD_TS: (usize, u32, u32) = (2, 15, 1);
    /// Rx completion: dword 2 `tci`.
    pub const RCD_TCI: (usize, u32, u32) = (2, 16, 16);
    /// Rx completion: dword 3 `type`.
    pub const RCD_TYPE: (usize, u32, u32) = (3, 24, 7);
    /// Rx completion: dword 3 `gen`.
    pub const RCD_GEN: (usize, u32, u32) = (3, 31, 1);
    /// Completion type of a Tx completion.
    pub const TYPE_TXCOMP: u32 = 0;
    /// Completion type of an Rx completion.
    pub const TYPE_RXCOMP: u32 = 3;
    /// Offload mode: none.
    pub const OM_NONE: u32 = 0;
    /// Offload mode: checksum.
    pub const OM_CSUM: u32 = 2;
    /// Offload mode: TSO.
    pub const OM_TSO: u32 = 3;
    /// Rx buffer type: head.
    pub const BTYPE_HEAD: u32 = 0;
    /// Rx buffer type: body.
    pub const BTYPE_BODY: u32 = 1;

    /// Reads a field from a descriptor's four dwords.
    pub fn get(d: &[u32; 4], f: (usize, u32, u32)) -> u32 {
        let (w, shift, width) = f;
        let mask = if width == 32 {
            u32::MAX
        } else {
            (1 << width) - 1
        };
        d.get(w).map_or(0, |v| (v >> shift) & mask)
    }

    /// Sets a field in a descriptor's four dwords.
    pub fn set(d: &mut [u32; 4], f: (usize, u32, u32), v: u32) {
        let (w, shift, width) = f;
        let mask = if width == 32 {
            u32::MAX
        } else {
            (1 << width) - 1
        };
        if let Some(x) = d.get_mut(w) {
            *x = (*x & !(mask << shift)) | ((v & mask) << shift);
        }
    }

    /// The four dwords of 16 little-endian bytes.
    pub fn dwords(b: &[u8; 16]) -> [u32; 4] {
        let mut d = [0u32; 4];
        for (i, w) in d.iter_mut().enumerate() {
            let mut x = [0u8; 4];
            x.copy_from_slice(&b[4 * i..4 * i + 4]);
            *w = u32::from_le_bytes(x);
        }
        d
    }

    /// 16 little-endian bytes of four dwords.
    pub fn bytes(d: &[u32; 4]) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, w) in d.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// Reasons a queue stops (`VMXNET3_ERR_*`, written to a queue descriptor's `status.error`).
pub mod qerr {
    /// No EOP descriptor for a packet.
    pub const NOEOP: u32 = 0x8000_0000;
    /// Too many descriptors for one packet.
    pub const BIG_PKT: u32 = 0x8000_0002;
    /// Descriptor type not supported (a non-zero `dtype`, a head buffer in Rx ring 1).
    pub const DESC_NOT_SPT: u32 = 0x8000_0003;
    /// Head buffer smaller than [`super::MIN_HEAD_BUF`], or a zero-length Rx buffer.
    pub const SMALL_BUF: u32 = 0x8000_0004;
    /// A descriptor whose memory the device cannot reach, or a producer index out of range.
    pub const INVALID: u32 = 0x8000_0007;
}

/// PCI identity (§3.1): device id and the revision GET_DID_HI reports.
pub const DEVICE_ID: u32 = 0x07B0;
/// See [`DEVICE_ID`].
pub const DEVICE_REVISION: u32 = 1;
