//! ACTIVATE_DEV: DriverShared and the queue descriptors read and validated (vmxnet3.md §3.4–
//! §3.6; model rules V4–V7 of vmxnet3.md §5).
//!
//! Every value the driver wrote is checked before the device uses it, the way pvrdma.md M14
//! checks PVRDMA's: counts, sizes, alignments, indices and every address the device will
//! reach (each ring is read whole once here, so a ring the device cannot reach fails the
//! activation instead of faulting later). A failure leaves the device inactive, answers 1 to
//! the CMD read-back and records the [`ActivateError`]; nothing panics and nothing is read
//! out of bounds.
#![deny(unsafe_code)]

use crate::dma::DmaSpace;
use crate::le::Le;

use super::layout::{self, rxq, shared, txq};

/// Why ACTIVATE_DEV failed: the first check that failed, named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivateError {
    /// VRRS was never written with an offered revision (V1).
    NoRevision,
    /// UVRS was never written with an offered UPT version (V1).
    NoUptVersion,
    /// DSAL/DSAH name no DriverShared (0), or an address not 8-byte aligned.
    SharedAddress,
    /// The 720 bytes of DriverShared are not all in DMA memory.
    SharedUnreadable,
    /// `magic` is not 0xBABEFEE1.
    BadMagic,
    /// `numTxQueues` or `numRxQueues` is 0 or above the device's limit.
    QueueCount,
    /// `queueDescPA` is not 128-byte aligned.
    QueueDescAlign,
    /// `queueDescLen` is smaller than the descriptors `numTxQueues + numRxQueues` need.
    QueueDescLen,
    /// The queue descriptors are not all in DMA memory.
    QueueDescUnreadable,
    /// `mtu` outside 60..=9000.
    Mtu,
    /// `numIntrs` is 0 or above the vectors the device offers.
    NumIntrs,
    /// `eventIntrIdx` ≥ `numIntrs`.
    EventIntrIdx,
    /// `autoMask` is neither 0 nor 1 (a C `Bool`).
    AutoMask,
    /// A `modLevels[i]` (i < `numIntrs`) above 8 (UPT1_IML_ADAPTIVE).
    ModLevel,
    /// `intrCtrl` has bits other than DISABLE_ALL.
    IntrCtrl,
    /// `rxMode` has undefined bits.
    RxMode,
    /// `mfTableLen` is not a multiple of 6, or the table is not in DMA memory.
    MulticastTable,
    /// Tx queue: ring base not 512-byte aligned.
    TxRingAlign(u8),
    /// Tx queue: `txRingSize` not a multiple of 32 in 32..=4096.
    TxRingSize(u8),
    /// Tx queue: completion ring base not 512-byte aligned.
    TxCompAlign(u8),
    /// Tx queue: `compRingSize` not a multiple of 32 in `txRingSize`..=4096 (V5).
    TxCompSize(u8),
    /// Tx queue: `intrIdx` ≥ `numIntrs`.
    TxIntrIdx(u8),
    /// Tx queue: the Tx ring or its completion ring is not all in DMA memory.
    TxRingUnreachable(u8),
    /// Rx queue, ring 0 or 1: base not 512-byte aligned.
    RxRingAlign(u8, u8),
    /// Rx queue, ring 0 or 1: size not a multiple of 32 ≤ 4096 (ring 0 at least 32; ring 1
    /// may be 0, V6).
    RxRingSize(u8, u8),
    /// Rx queue: completion ring base not 512-byte aligned.
    RxCompAlign(u8),
    /// Rx queue: `compRingSize` not a multiple of 32 in `ring0 + ring1`..=8192 (V5).
    RxCompSize(u8),
    /// Rx queue: `intrIdx` ≥ `numIntrs`.
    RxIntrIdx(u8),
    /// Rx queue: a ring or the completion ring is not all in DMA memory.
    RxRingUnreachable(u8),
}

/// A ring the device walks: base, size and the device-side index and generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevRing {
    /// Bus address of descriptor 0.
    pub base: u64,
    /// Number of descriptors (0: the ring is absent).
    pub size: u32,
    /// Next descriptor the device looks at (command rings) or writes (completion rings).
    pub next: u32,
    /// The device's generation for `next` (starts at 1, flips on wrap).
    pub generation: u32,
}

impl DevRing {
    fn new(base: u64, size: u32) -> Self {
        Self {
            base,
            size,
            next: 0,
            generation: 1,
        }
    }

    /// Bus address of descriptor `i`.
    pub fn at(&self, i: u32) -> u64 {
        self.base + u64::from(i) * layout::DESC_SIZE
    }

    /// Moves `next` on by one, flipping `gen` on wrap.
    pub fn advance(&mut self) {
        self.next += 1;
        if self.next >= self.size {
            self.next = 0;
            self.generation ^= 1;
        }
    }
}

/// UPT1 Tx statistics (`UPT1_TxStats`, in header order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TxStats {
    pub tso_pkts: u64,
    pub tso_bytes: u64,
    pub ucast_pkts: u64,
    pub ucast_bytes: u64,
    pub mcast_pkts: u64,
    pub mcast_bytes: u64,
    pub bcast_pkts: u64,
    pub bcast_bytes: u64,
    pub error: u64,
    pub discard: u64,
}

impl TxStats {
    /// The 80 bytes GET_STATS writes.
    pub fn bytes(&self) -> [u8; 80] {
        words_le([
            self.tso_pkts,
            self.tso_bytes,
            self.ucast_pkts,
            self.ucast_bytes,
            self.mcast_pkts,
            self.mcast_bytes,
            self.bcast_pkts,
            self.bcast_bytes,
            self.error,
            self.discard,
        ])
    }
}

/// UPT1 Rx statistics (`UPT1_RxStats`, in header order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RxStats {
    pub lro_pkts: u64,
    pub lro_bytes: u64,
    pub ucast_pkts: u64,
    pub ucast_bytes: u64,
    pub mcast_pkts: u64,
    pub mcast_bytes: u64,
    pub bcast_pkts: u64,
    pub bcast_bytes: u64,
    pub out_of_buf: u64,
    pub error: u64,
}

impl RxStats {
    /// The 80 bytes GET_STATS writes.
    pub fn bytes(&self) -> [u8; 80] {
        words_le([
            self.lro_pkts,
            self.lro_bytes,
            self.ucast_pkts,
            self.ucast_bytes,
            self.mcast_pkts,
            self.mcast_bytes,
            self.bcast_pkts,
            self.bcast_bytes,
            self.out_of_buf,
            self.error,
        ])
    }
}

fn words_le(w: [u64; 10]) -> [u8; 80] {
    let mut b = [0u8; 80];
    for (i, v) in w.iter().enumerate() {
        b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// Why a queue stopped: `status.error` (a `VMXNET3_ERR_*` code, [`layout::qerr`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStatus {
    /// Stopped (no further descriptor is taken until RESET_DEV and ACTIVATE_DEV).
    pub stopped: bool,
    /// The reason.
    pub error: u32,
}

/// An activated Tx queue.
#[derive(Clone, Debug)]
pub struct TxQueue {
    /// Bus address of its queue descriptor.
    pub desc: u64,
    /// The Tx ring.
    pub ring: DevRing,
    /// The Tx completion ring.
    pub comp: DevRing,
    /// Its vector.
    pub intr: u8,
    /// Status for GET_QUEUE_STATUS.
    pub status: QueueStatus,
    /// Statistics for GET_STATS.
    pub stats: TxStats,
}

/// An activated Rx queue.
#[derive(Clone, Debug)]
pub struct RxQueue {
    /// Bus address of its queue descriptor.
    pub desc: u64,
    /// Rings 0 and 1.
    pub rings: [DevRing; 2],
    /// The Rx completion ring.
    pub comp: DevRing,
    /// Its vector.
    pub intr: u8,
    /// The latest RXPROD / RXPROD2 values (0 until written).
    pub prod: [u32; 2],
    /// Status for GET_QUEUE_STATUS.
    pub status: QueueStatus,
    /// Statistics for GET_STATS.
    pub stats: RxStats,
}

/// Receive filter (`rxFilterConf`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RxFilter {
    /// `VMXNET3_RXM_*` bits.
    pub mode: u32,
    /// The multicast table.
    pub multicast: Vec<[u8; 6]>,
    /// One bit per VLAN id.
    pub vlans: Vec<u32>,
}

/// Everything ACTIVATE_DEV read and checked.
#[derive(Clone, Debug)]
pub struct Active {
    /// DriverShared address.
    pub shared: u64,
    /// `uptFeatures`.
    pub features: u64,
    /// `mtu`.
    pub mtu: u32,
    /// `maxNumRxSG`, 0 taken as 1.
    pub max_rx_sg: u32,
    /// gosType is Windows: continuation buffers come from ring 0 (QEMU's rule, V9).
    pub windows: bool,
    /// `autoMask`.
    pub auto_mask: bool,
    /// `numIntrs`.
    pub num_intrs: u8,
    /// `eventIntrIdx`.
    pub event_intr: u8,
    /// Tx queues.
    pub txq: Vec<TxQueue>,
    /// Rx queues.
    pub rxq: Vec<RxQueue>,
    /// The Rx filter.
    pub filter: RxFilter,
}

/// Device limits ACTIVATE checks against.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// MSI-X vectors the device offers.
    pub vectors: u32,
    /// Tx queues.
    pub max_tx: u8,
    /// Rx queues.
    pub max_rx: u8,
}

fn check_ring(base: u64, size: u32, min: u32, max: u32) -> (bool, bool) {
    let aligned = base.is_multiple_of(layout::RING_ALIGN);
    let sized = size.is_multiple_of(layout::RING_SIZE_ALIGN) && (min..=max).contains(&size);
    (aligned, sized)
}

fn reachable(dma: &DmaSpace, base: u64, size: u32) -> bool {
    if size == 0 {
        return true;
    }
    let len = u64::from(size) * layout::DESC_SIZE;
    let Ok(len) = usize::try_from(len) else {
        return false;
    };
    let mut buf = vec![0u8; len];
    dma.read(base, &mut buf).is_ok()
}

/// Reads the multicast table `mfTablePA`/`mfTableLen` of the DriverShared bytes `v`.
pub fn read_multicast(dma: &DmaSpace, v: &Le<&[u8]>) -> Result<Vec<[u8; 6]>, ActivateError> {
    let len = usize::from(v.u16(shared::MF_TABLE_LEN));
    if !len.is_multiple_of(6) {
        return Err(ActivateError::MulticastTable);
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    let mut raw = vec![0u8; len];
    dma.read(v.u64(shared::MF_TABLE_PA), &mut raw)
        .map_err(|_| ActivateError::MulticastTable)?;
    Ok(raw
        .chunks_exact(6)
        .map(|c| {
            let mut m = [0u8; 6];
            m.copy_from_slice(c);
            m
        })
        .collect())
}

/// Reads the VLAN filter table of the DriverShared bytes `v`.
pub fn read_vlans(v: &Le<&[u8]>) -> Vec<u32> {
    (0..layout::shared::VF_TABLE_LEN / 4)
        .map(|i| v.u32(shared::VF_TABLE + 4 * i))
        .collect()
}

/// Reads DriverShared at `addr` and everything it points to; the first failed check is the
/// error.
pub fn activate(dma: &DmaSpace, addr: u64, lim: Limits) -> Result<Active, ActivateError> {
    use ActivateError as E;
    if addr == 0 || !addr.is_multiple_of(8) {
        return Err(E::SharedAddress);
    }
    let mut raw = [0u8; layout::SHARED_LEN];
    dma.read(addr, &mut raw).map_err(|_| E::SharedUnreadable)?;
    let v = Le(&raw[..]);
    if v.u32(shared::MAGIC) != layout::REV1_MAGIC {
        return Err(E::BadMagic);
    }
    let ntx = v.u8(shared::NUM_TX_QUEUES);
    let nrx = v.u8(shared::NUM_RX_QUEUES);
    if ntx == 0 || nrx == 0 || ntx > lim.max_tx || nrx > lim.max_rx {
        return Err(E::QueueCount);
    }
    let qd = v.u64(shared::QUEUE_DESC_PA);
    if !qd.is_multiple_of(layout::QUEUE_DESC_ALIGN) {
        return Err(E::QueueDescAlign);
    }
    let qd_len = (usize::from(ntx) + usize::from(nrx)) * layout::QUEUE_DESC_SIZE;
    if (v.u32(shared::QUEUE_DESC_LEN) as usize) < qd_len {
        return Err(E::QueueDescLen);
    }
    let mut qraw = vec![0u8; qd_len];
    dma.read(qd, &mut qraw)
        .map_err(|_| E::QueueDescUnreadable)?;
    let mtu = v.u32(shared::MTU);
    if !(layout::MTU_MIN..=layout::MTU_MAX).contains(&mtu) {
        return Err(E::Mtu);
    }
    let num_intrs = v.u8(shared::NUM_INTRS);
    if num_intrs == 0 || u32::from(num_intrs) > lim.vectors.min(layout::MAX_INTRS) {
        return Err(E::NumIntrs);
    }
    let event_intr = v.u8(shared::EVENT_INTR_IDX);
    if event_intr >= num_intrs {
        return Err(E::EventIntrIdx);
    }
    let auto_mask = match v.u8(shared::AUTO_MASK) {
        0 => false,
        1 => true,
        _ => return Err(E::AutoMask),
    };
    if (0..usize::from(num_intrs)).any(|i| v.u8(shared::MOD_LEVELS + i) > layout::IML_MAX) {
        return Err(E::ModLevel);
    }
    if v.u32(shared::INTR_CTRL) & !layout::INTR_CTRL_DISABLE_ALL != 0 {
        return Err(E::IntrCtrl);
    }
    let mode = v.u32(shared::RX_MODE);
    if mode & !layout::rxm::ALL != 0 {
        return Err(E::RxMode);
    }
    let multicast = read_multicast(dma, &v)?;
    let mut txqs = Vec::new();
    for q in 0..ntx {
        let off = usize::from(q) * layout::QUEUE_DESC_SIZE;
        let d = Le(&qraw[off..off + layout::QUEUE_DESC_SIZE]);
        let (base, size) = (d.u64(txq::RING_BASE), d.u32(txq::RING_SIZE));
        let (cbase, csize) = (d.u64(txq::COMP_RING_BASE), d.u32(txq::COMP_RING_SIZE));
        let (aligned, sized) = check_ring(base, size, layout::RING_SIZE_ALIGN, layout::RING_MAX);
        if !aligned {
            return Err(E::TxRingAlign(q));
        }
        if !sized {
            return Err(E::TxRingSize(q));
        }
        let (caligned, csized) = check_ring(cbase, csize, size, layout::RING_MAX);
        if !caligned {
            return Err(E::TxCompAlign(q));
        }
        if !csized {
            return Err(E::TxCompSize(q));
        }
        let intr = d.u8(txq::INTR_IDX);
        if intr >= num_intrs {
            return Err(E::TxIntrIdx(q));
        }
        if !reachable(dma, base, size) || !reachable(dma, cbase, csize) {
            return Err(E::TxRingUnreachable(q));
        }
        txqs.push(TxQueue {
            desc: qd + off as u64,
            ring: DevRing::new(base, size),
            comp: DevRing::new(cbase, csize),
            intr,
            status: QueueStatus::default(),
            stats: TxStats::default(),
        });
    }
    let mut rxqs = Vec::new();
    for q in 0..nrx {
        let off = (usize::from(ntx) + usize::from(q)) * layout::QUEUE_DESC_SIZE;
        let d = Le(&qraw[off..off + layout::QUEUE_DESC_SIZE]);
        let bases = [d.u64(rxq::RING0_BASE), d.u64(rxq::RING1_BASE)];
        let sizes = [d.u32(rxq::RING0_SIZE), d.u32(rxq::RING1_SIZE)];
        for r in 0..2u8 {
            let i = usize::from(r);
            let min = if r == 0 { layout::RING_SIZE_ALIGN } else { 0 };
            let (aligned, sized) = check_ring(bases[i], sizes[i], min, layout::RING_MAX);
            // An absent ring 1 (size 0) has no base to check (iPXE leaves it 0).
            if !aligned && sizes[i] != 0 {
                return Err(E::RxRingAlign(q, r));
            }
            if !sized {
                return Err(E::RxRingSize(q, r));
            }
        }
        let (cbase, csize) = (d.u64(rxq::COMP_RING_BASE), d.u32(rxq::COMP_RING_SIZE));
        let (caligned, csized) =
            check_ring(cbase, csize, sizes[0] + sizes[1], layout::RX_COMP_RING_MAX);
        if !caligned {
            return Err(E::RxCompAlign(q));
        }
        if !csized {
            return Err(E::RxCompSize(q));
        }
        let intr = d.u8(rxq::INTR_IDX);
        if intr >= num_intrs {
            return Err(E::RxIntrIdx(q));
        }
        if !reachable(dma, bases[0], sizes[0])
            || !reachable(dma, bases[1], sizes[1])
            || !reachable(dma, cbase, csize)
        {
            return Err(E::RxRingUnreachable(q));
        }
        rxqs.push(RxQueue {
            desc: qd + off as u64,
            rings: [
                DevRing::new(bases[0], sizes[0]),
                DevRing::new(bases[1], sizes[1]),
            ],
            comp: DevRing::new(cbase, csize),
            intr,
            prod: [0; 2],
            status: QueueStatus::default(),
            stats: RxStats::default(),
        });
    }
    let gos = v.u32(shared::GOS);
    let max_rx_sg = u32::from(v.u16(shared::MAX_NUM_RX_SG)).max(1);
    Ok(Active {
        shared: addr,
        features: v.u64(shared::UPT_FEATURES),
        mtu,
        max_rx_sg,
        windows: (gos >> 2) & 0xF == layout::GOS_TYPE_WIN,
        auto_mask,
        num_intrs,
        event_intr,
        txq: txqs,
        rxq: rxqs,
        filter: RxFilter {
            mode,
            multicast,
            vlans: read_vlans(&v),
        },
    })
}
