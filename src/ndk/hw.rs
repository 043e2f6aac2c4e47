//! The hardware seam of the NDK layer: what the NDK objects need from the PVRDMA device
//! (pvrdma.md §1 "NDK → PVRDMA mapping", §8–§13), as one trait.
//!
//! The PVRDMA hardware layer (`src/pvrdma`) implements it over the command channel, the
//! queue rings and the UAR doorbells; `tests/` implement it with a recording fake. Handles
//! are the device's handles (PD, CQ, QP, SRQ, MR). Object commands go through the trait;
//! the data path does not: when an NDK queue object is built it takes the queue's writer
//! (`pvrdma::wq`) or reader (`pvrdma::cq`), through which posts write WQEs and ring doorbells
//! and polls read CQEs directly, with no call, lock or lookup (ndkpi.md §5.3: the consumer
//! serializes each
//! queue). Slot indices are free-running `u32` counters: a ring of N entries uses slot
//! `index % N` and `prod_tail = index mod 2N`; the doorbell is separate from publishing so
//! that deferred WQEs share one (ndkpi.md §5.5, pvrdma.md §12 "one doorbell write per batch").
#![deny(unsafe_code)]

use super::cq::Cq;
use super::error::HwError;
use super::object::ObjRef;
use super::srq::Srq;
use crate::ndkpi::{GROUP_AFFINITY, NDK_LOGICAL_ADDRESS};
use crate::pvrdma::cq::CqReader;
use crate::pvrdma::wq::{RecvWriter, SendWriter};
#[cfg(doc)]
use crate::pvrdma::wqe::AccessFlags;

/// Device limits the NDK layer reports and enforces (pvrdma.md §4 `caps`, plus the port's
/// `max_msg_sz`, M41). Mirrors the fields of the hardware layer's `Caps` it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwCaps {
    /// `vendor_id` (0x15AD).
    pub vendor_id: u32,
    /// `vendor_part_id` (0x0820).
    pub vendor_part_id: u32,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `max_qp`: QP handles are below it (M10); sizes the QP handle table.
    pub max_qp: u32,
    /// `max_qp_wr`: per-queue WR limit (QP rings are powers of two, M11).
    pub max_qp_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_sge_rd`.
    pub max_sge_rd: u32,
    /// `max_cq`: CQ handles are below it (M10).
    pub max_cq: u32,
    /// `max_cqe` (CQ rings are powers of two, M11).
    pub max_cqe: u32,
    /// `max_mr`: MR indexes (key >> 8) are below it (M10, M24).
    pub max_mr: u32,
    /// `max_qp_rd_atom`: inbound reads per QP (IRD).
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`: outbound reads per QP (ORD).
    pub max_qp_init_rd_atom: u32,
    /// `max_srq` (0 = no SRQs, M43).
    pub max_srq: u32,
    /// `max_srq_wr`.
    pub max_srq_wr: u32,
    /// `max_srq_sge`.
    pub max_srq_sge: u32,
    /// `max_fast_reg_page_list_len` (v18+; 128 on older devices, §4).
    pub max_fast_reg_page_list_len: u32,
    /// Port `max_msg_sz` (M41: 0x8000_0000).
    pub max_msg_sz: u32,
}

impl HwCaps {
    /// The device model's defaults (pvrdma.md §4, M5, M41).
    pub const MODEL_DEFAULT: HwCaps = HwCaps {
        vendor_id: 0x15AD,
        vendor_part_id: 0x0820,
        max_mr_size: 1 << 30,
        max_qp: 1024,
        max_qp_wr: 4096,
        max_sge: 16,
        max_sge_rd: 16,
        max_cq: 1024,
        max_cqe: 65536,
        max_mr: 16384,
        max_qp_rd_atom: 16,
        max_qp_init_rd_atom: 16,
        max_srq: 1024,
        max_srq_wr: 4096,
        max_srq_sge: 16,
        max_fast_reg_page_list_len: 512,
        max_msg_sz: 0x8000_0000,
    };
}

impl HwCaps {
    /// The fields the NDK layer uses from the device caps read at bring-up. The FRMR page
    /// limit goes through `PVRDMA_GET_CAP` (128 unless VERSION ≥ 18, §4); `max_msg_sz` is the
    /// port limit (M41), not a caps field.
    pub fn from_caps(c: &crate::pvrdma::dsr::Caps, device_version: u32) -> HwCaps {
        HwCaps {
            vendor_id: c.vendor_id,
            vendor_part_id: c.vendor_part_id,
            max_mr_size: c.max_mr_size,
            max_qp: c.max_qp,
            max_qp_wr: c.max_qp_wr,
            max_sge: c.max_sge,
            max_sge_rd: c.max_sge_rd,
            max_cq: c.max_cq,
            max_cqe: c.max_cqe,
            max_mr: c.max_mr,
            max_qp_rd_atom: c.max_qp_rd_atom,
            max_qp_init_rd_atom: c.max_qp_init_rd_atom,
            max_srq: c.max_srq,
            max_srq_wr: c.max_srq_wr,
            max_srq_sge: c.max_srq_sge,
            max_fast_reg_page_list_len: c.max_fast_reg_pages(device_version),
            max_msg_sz: crate::pvrdma::device::MAX_MSG_SZ,
        }
    }
}

/// Kind of MR to create (pvrdma.md §1: CREATE_MR flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrSpec<'a> {
    /// The PD's privileged-token MR: CREATE_MR flags DMA, LOCAL_WRITE only (M11, pitfall 13).
    Dma,
    /// NdkRegisterMr: flags 0 over `[start, start + length)` with `access` bits (IB order:
    /// bit 0 LOCAL_WRITE, bit 1 REMOTE_WRITE, bit 2 REMOTE_READ).
    Normal {
        /// MDL virtual address (an index, never dereferenced, §5.7).
        start: u64,
        /// Bytes.
        length: u64,
        /// IB access bits.
        access: u32,
        /// Adapter logical address of each page spanned, the first holding `start`
        /// (the MR's page directory, §9).
        pages: &'a [u64],
    },
    /// NdkInitializeFastRegisterMr: flags FRMR with a page-list capacity.
    FastReg {
        /// Page-list capacity (`nchunks`).
        max_pages: u32,
    },
}

/// Keys and handle of a created MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// `mr_handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// IB access bits (pvrdma.md §1: ALLOW_LOCAL_WRITE/REMOTE_READ/REMOTE_WRITE → 0/2/1), as
/// [`MrSpec::Normal`] carries them: the device's [`AccessFlags`] values.
pub mod access {
    use crate::pvrdma::wqe::AccessFlags;
    /// LOCAL_WRITE.
    pub const LOCAL_WRITE: u32 = AccessFlags::LOCAL_WRITE.bits();
    /// REMOTE_WRITE.
    pub const REMOTE_WRITE: u32 = AccessFlags::REMOTE_WRITE.bits();
    /// REMOTE_READ.
    pub const REMOTE_READ: u32 = AccessFlags::REMOTE_READ.bits();
}

/// CREATE_QP parameters (pvrdma.md §8, §9). Counts are the ring sizes (powers of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSpec {
    /// PD handle.
    pub pd: u32,
    /// Send CQ handle (NDK initiator CQ).
    pub send_cq: u32,
    /// Receive CQ handle.
    pub recv_cq: u32,
    /// SRQ handle for a QP created with an SRQ.
    pub srq: Option<u32>,
    /// SQ ring entries.
    pub max_send_wr: u32,
    /// RQ ring entries (0 with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per SQ WQE.
    pub max_send_sge: u32,
    /// SGEs per RQ WQE (0 with an SRQ).
    pub max_recv_sge: u32,
}

/// CREATE_SRQ parameters (pvrdma.md §1 SRQ mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqSpec {
    /// PD handle.
    pub pd: u32,
    /// Ring entries (power of two).
    pub max_wr: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Initial `srq_limit` (0 = not armed).
    pub limit: u32,
}

/// A QP's primary path for MODIFY_QP (pvrdma.md §8 `pvrdma_ah_attr`): where its packets go
/// and which of the adapter's GIDs they come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpPath {
    /// The peer's GID (its IP address as a RoCEv2 GID, cm.md §2.3).
    pub dgid: [u8; 16],
    /// The next hop's MAC (address resolution, `os::net`).
    pub dmac: [u8; 6],
    /// The index of the source GID in the adapter's GID table ([`Hardware::bind_gid_async`]).
    pub sgid_index: u8,
    /// IP hop limit / TTL (0: the device's default).
    pub hop_limit: u8,
    /// IP traffic class / TOS.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
}

/// A MODIFY_QP as the NDK layer (and the connection manager above it) asks for it: each
/// `Some` field is set, and only those (the attribute mask follows from which are present, so
/// it cannot disagree with the values). The transitions and the attributes each requires are
/// pvrdma.md §8's table; the device refuses a transition without them (M39).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpModify {
    /// The new state.
    pub state: Option<QpState>,
    /// Path MTU (IB code: 1 = 256 … 5 = 4096).
    pub path_mtu: Option<u8>,
    /// The peer's QP number (24 bits).
    pub dest_qpn: Option<u32>,
    /// First PSN expected from the peer (24 bits).
    pub rq_psn: Option<u32>,
    /// First PSN sent (24 bits).
    pub sq_psn: Option<u32>,
    /// The primary path (RC INIT → RTR).
    pub path: Option<QpPath>,
    /// RDMA READs in flight as initiator (ORD).
    pub max_rd_atomic: Option<u8>,
    /// RDMA READs accepted as responder (IRD).
    pub max_dest_rd_atomic: Option<u8>,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout; 0..=31).
    pub timeout: Option<u8>,
    /// Transport retries (0..=7).
    pub retry_cnt: Option<u8>,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry: Option<u8>,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: Option<u8>,
    /// Q_Key (UD and GSI).
    pub qkey: Option<u32>,
    /// Remote access ([`access`] bits).
    pub access: Option<u32>,
    /// P_Key index (the device has one P_Key: 0).
    pub pkey_index: Option<u16>,
}

/// The QP states MODIFY_QP moves between (pvrdma.md §8).
pub use crate::pvrdma::cmd::QpState;

/// Completion of an object command: runs exactly once, at IRQL ≤ DISPATCH_LEVEL, with no
/// driver lock held (it may call back into the hardware, and the NDK completion it drives
/// calls the consumer). It may run before the issuing call returns (when the command cannot
/// be issued, or the device answers at once), or later from the command-completion DPC.
pub type HwDone<T> = alloc::boxed::Box<dyn FnOnce(Result<T, HwError>) + Send>;

/// The PVRDMA device as the NDK objects use it: device objects made and unmade by
/// asynchronous commands, the routing of their device events, the ring handles of the data
/// path, and what a blocking close needs.
///
/// - **Commands** (`create_*_async`, `modify_srq_limit_async`): callable at IRQL ≤
///   DISPATCH_LEVEL, as the NDK functions that issue them; the outcome goes to the
///   [`HwDone`]. An object the completion reports created is the caller's until its
///   `destroy_*`.
/// - **Destroys** (`destroy_*`, `flush_qp`, `try_destroy_mr`): IRQL ≤ DISPATCH_LEVEL, return at
///   once without waiting for the device, allocate nothing and (but for `try_destroy_mr`)
///   cannot fail: the seam reserved what they need when the object was created (ndkpi.md
///   §5.1 "A close request can never fail"). A handle is destroyed at most once.
/// - **Event routing** (`bind_cq`, `bind_srq`): once the NDK object exists, its device events
///   (CQNE and CQ_ERR, SRQ_LIMIT_REACHED and SRQ_ERR) are delivered to it straight from the
///   device's DPC, with the one lookup the device makes of the handle; `destroy_*` undoes it.
///   Device-wide events reach [`super::NdkDevice::device_fatal`].
/// - **Data path** (`qp_writers`, `srq_writer`, `cq_reader`): taken once, when the NDK queue
///   object is built; posts and polls then go through the writers and reader alone.
///   `fast_reg_pages` and `srq_queued` run in the data path (a post, an SRQ arm) at IRQL ≤
///   DISPATCH_LEVEL and allocate nothing.
pub trait Hardware: Send + Sync {
    /// Device limits (any IRQL; fixed at device start).
    fn caps(&self) -> &HwCaps;

    /// CREATE_PD, then the PD's DMA MR (its privileged token, [`MrSpec::Dma`]); `done` gets
    /// the PD handle and the DMA MR's keys. When the DMA MR fails the PD is destroyed and
    /// `done` gets the error: no object is left behind.
    fn create_pd_async(&self, done: HwDone<(u32, MrKeys)>);
    /// DESTROY_PD (its DMA MR is destroyed first, by [`Hardware::destroy_mr`]).
    fn destroy_pd(&self, pd: u32);

    /// CREATE_CQ with `entries` (a power of two); `done` gets the CQ handle. `affinity` is
    /// NdkCreateCq's GROUP_AFFINITY (§5.4), applied to its notifications by
    /// [`Hardware::bind_cq`].
    fn create_cq_async(&self, entries: u32, affinity: Option<GROUP_AFFINITY>, done: HwDone<u32>);
    /// Routes the device's notifications (CQNE) and errors (CQ_ERR) for `cq` to it: from
    /// then until [`Hardware::destroy_cq`] they arrive as calls of its
    /// [`super::cq::CqLink`], at DISPATCH_LEVEL with no driver lock held, on a processor of
    /// the CQ's affinity when it has one. Called once, by the CREATE_CQ completion that
    /// builds the NDK CQ (IRQL ≤ DISPATCH_LEVEL); it allocates the link and, for a CQ with an
    /// affinity, the CQ's DPC.
    fn bind_cq(&self, cq: &ObjRef<Cq>) -> Result<(), HwError>;
    /// DESTROY_CQ; the CQ's events stop before this returns, but for a notification already
    /// queued to its processor, which may still run once.
    fn destroy_cq(&self, cq: u32);

    /// CREATE_MR of `spec` in `pd`; `done` gets the keys. The spec's page list is consumed
    /// before this returns.
    fn create_mr_async(&self, pd: u32, spec: &MrSpec<'_>, done: HwDone<MrKeys>);
    /// DESTROY_MR (close, re-initialization of an FRMR, the PD's DMA MR).
    fn destroy_mr(&self, mr: u32);
    /// DESTROY_MR for NdkDeregisterMr, which reports its outcome: `Err` when the command
    /// could not be issued, and the MR is then still registered in the device. It cannot
    /// fail for an MR this hardware created (its DESTROY is reserved).
    fn try_destroy_mr(&self, mr: u32) -> Result<(), HwError>;

    /// CREATE_QP (RC), then RESET → INIT; `done` gets the QP handle. When the INIT fails the
    /// QP is destroyed and `done` gets the error.
    fn create_qp_async(&self, spec: &QpSpec, done: HwDone<u32>);
    /// MODIFY_QP → ERR for NdkFlush: the device completes every outstanding WQE with
    /// WR_FLUSH_ERR (M32). Only the first flush of a QP issues it; the QP stays in ERR.
    fn flush_qp(&self, qp: u32);
    /// DESTROY_QP.
    fn destroy_qp(&self, qp: u32);

    /// CREATE_SRQ; `done` gets the SRQ handle.
    fn create_srq_async(&self, spec: &SrqSpec, done: HwDone<u32>);
    /// MODIFY_SRQ `attr_mask` = LIMIT (NdkModifySrq's threshold, M44).
    fn modify_srq_limit_async(&self, srq: u32, limit: u32, done: HwDone<()>);
    /// Routes the device's SRQ_LIMIT_REACHED and SRQ_ERR for `srq` to it (as
    /// [`Hardware::bind_cq`], through the SRQ's `limit_event` and `error_event`), until
    /// [`Hardware::destroy_srq`].
    fn bind_srq(&self, srq: &ObjRef<Srq>) -> Result<(), HwError>;
    /// WQEs posted to the SRQ and not yet taken by a QP (`prod_tail − cons_head`, M45), for
    /// the check NdkModifySrq makes when it arms (the device never raises the event at arm
    /// time, M44). 0 for an unknown SRQ.
    fn srq_queued(&self, srq: u32) -> u32;
    /// DESTROY_SRQ; the SRQ's events stop before this returns.
    fn destroy_srq(&self, srq: u32);

    /// The writers of QP `qp`: its send queue and, unless it takes receives from an SRQ, its
    /// receive queue. Posts then write WQEs, publish `prod_tail` and ring doorbells through
    /// them without calling the hardware.
    fn qp_writers(&self, qp: u32) -> Result<(SendWriter, Option<RecvWriter>), HwError>;
    /// The writer of SRQ `srq`.
    fn srq_writer(&self, srq: u32) -> Result<RecvWriter, HwError>;
    /// The reader of CQ `cq` (its ring and its arm doorbells).
    fn cq_reader(&self, cq: u32) -> Result<CqReader, HwError>;
    /// Writes the page list of a FAST_REG_MR WQE for FRMR `mr` into the FRMR's page-list
    /// directory (§9 MRs) and returns the directory's address (`pl_pdir_dma`). Runs in a
    /// post: no allocation, no command.
    fn fast_reg_pages(&self, mr: u32, pages: &[NDK_LOGICAL_ADDRESS]) -> Result<u64, HwError>;

    /// MODIFY_QP of `qp` with the attributes `m` names (callable at IRQL ≤ DISPATCH_LEVEL);
    /// `done` gets the device's answer. An attribute out of its range (a PSN or QPN above 24
    /// bits, a path MTU outside 1..=5, a timer code above 31, a retry count above 7) is
    /// refused with [`HwError::Invalid`] before anything reaches the device. Entering ERR
    /// completes every outstanding WQE with WR_FLUSH_ERR before `done` runs (M32), which the
    /// NDK QP reports as STATUS_CANCELLED. A hardware without it refuses.
    fn modify_qp_async(&self, qp: u32, m: &QpModify, done: HwDone<()>) {
        let _ = (qp, m);
        done(Err(HwError::Invalid));
    }

    /// The wire QP number of QP `qp` (CREATE_QP's `qpn`: from VERSION 20 it differs from the
    /// handle, pvrdma.md §8 pitfall 9), which the connection manager puts in its REQ and REP.
    /// `None` for a QP this hardware does not know.
    fn qp_number(&self, qp: u32) -> Option<u32> {
        let _ = qp;
        None
    }

    /// CREATE_BIND: GID table entry `index` holds the RoCEv2 GID `gid` (an IP address of the
    /// interface, [`crate::cm::addr::gid_from_ip`]); packets sent from `sgid_index = index`
    /// carry it as their source address, and the device accepts packets addressed to it
    /// (M38). `done` gets the answer; an index the table does not have fails.
    fn bind_gid_async(&self, index: u32, gid: [u8; 16], done: HwDone<()>) {
        let _ = (index, gid);
        done(Err(HwError::Invalid));
    }

    /// DESTROY_BIND: clears GID table entry `index` if it holds `gid`.
    fn unbind_gid_async(&self, index: u32, gid: [u8; 16], done: HwDone<()>) {
        let _ = (index, gid);
        done(Err(HwError::Invalid));
    }

    /// CREATE_QP of type GSI (QP1; one per device), then RESET → INIT with P_Key index 0 and
    /// Q_Key 0x80010000 (cm.md §2, pvrdma.md §14 "UD and GSI"); `done` gets the QP handle.
    /// RTR and RTS follow through [`Hardware::modify_qp_async`]. `spec.srq` must be `None`.
    fn create_gsi_qp_async(&self, spec: &QpSpec, done: HwDone<u32>) {
        let _ = spec;
        done(Err(HwError::Invalid));
    }

    /// Routes the device's notifications and errors for CQ `cq` to `handler` (the per-adapter
    /// QP1's CQ, which no NDK CQ object stands for); as [`Hardware::bind_cq`] otherwise, and
    /// [`Hardware::destroy_cq`] undoes it. The handler runs in the CQ-notification DPC.
    fn bind_cq_handler(
        &self,
        cq: u32,
        handler: alloc::sync::Arc<dyn crate::pvrdma::device::CqEvents>,
    ) -> Result<(), HwError> {
        let _ = (cq, handler);
        Err(HwError::Invalid)
    }

    /// `len` bytes of memory the device can read and write (the QP1 MAD buffers, allocated
    /// once when the adapter's QP1 is opened). PASSIVE_LEVEL, as the OS seam's allocator.
    fn alloc_dma(&self, len: usize) -> Result<crate::os::SharedDma, HwError> {
        let _ = len;
        Err(HwError::NoResources)
    }

    /// Adapter logical address of the locked page `pfn` (an MDL PFN), for NdkRegisterMr and
    /// NdkBuildLam (IRQL ≤ DISPATCH_LEVEL). The default is the physical address, which is
    /// what PVRDMA DMA uses when no IOMMU remaps the guest; the Windows build must route this
    /// through the DMA adapter of the OS seam (not written yet) when DMA remapping is on.
    fn page_address(&self, pfn: u64) -> Option<u64> {
        pfn.checked_mul(crate::ndkpi::PAGE_SIZE as u64)
    }

    /// Blocks until `cond` holds (PASSIVE_LEVEL only): the wait of CloseNDKAdapterHandler
    /// for every object of the adapter to close and every callback on them to return (§5.2).
    fn wait_until(&self, cond: &dyn Fn() -> bool);
}

/// Largest power of two ≤ `n` (0 for 0): ring sizes the device accepts (M11).
pub const fn pow2_floor(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        1 << (31 - n.leading_zeros())
    }
}

/// Smallest power of two ≥ `n` (1 for 0), `None` above 2^31.
pub const fn pow2_ceil(n: u32) -> Option<u32> {
    n.checked_next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pvrdma::dsr::Caps;

    /// The model's default caps as the device presents them in the DSR.
    fn model_caps() -> Caps {
        Caps::parse(&pvrdma_sim::dsr::Caps::default().emit([0; 6]))
    }

    #[test]
    fn caps_conversion_matches_the_model_defaults() {
        assert_eq!(HwCaps::from_caps(&model_caps(), 20), HwCaps::MODEL_DEFAULT);
        // Before VERSION 18 the FRMR page limit field is not valid: PVRDMA_GET_CAP gives 128.
        assert_eq!(
            HwCaps::from_caps(&model_caps(), 17).max_fast_reg_page_list_len,
            128
        );
    }

    #[test]
    fn powers_of_two() {
        assert_eq!(pow2_floor(0), 0);
        assert_eq!(pow2_floor(1), 1);
        assert_eq!(pow2_floor(4095), 2048);
        assert_eq!(pow2_floor(4096), 4096);
        assert_eq!(pow2_ceil(0), Some(1));
        assert_eq!(pow2_ceil(5), Some(8));
        assert_eq!(pow2_ceil(0x8000_0001), None);
    }
}
