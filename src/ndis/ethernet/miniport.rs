//! One vmxnet3 Ethernet adapter (15AD:07B0), portable: what the NDIS handlers do once the FFI
//! layer (`ethernet/entry.rs`) has marshalled their arguments. The hardware is
//! `crate::vmxnet3`; this file is the NDIS data path over it.
//!
//! - Send: each NET_BUFFER of each NET_BUFFER_LIST is one frame, mapped from its MDLs
//!   ([`super::nbl::net_buffer_sg`]) into Tx descriptors with the NET_BUFFER as the token;
//!   the NBL keeps a count of its NET_BUFFERs in flight (`MiniportReserved[0]`) and completes
//!   (NdisMSendNetBufferListsComplete, [`EthSink::send_complete`]) when it reaches 0. Frames
//!   the ring has no room for wait in a FIFO of NBLs linked through `MiniportReserved[1]`,
//!   drained as completions free descriptors. Nothing is allocated per frame.
//! - Receive: one NBL (one NET_BUFFER, one MDL over the buffer) per receive buffer, allocated
//!   at InitializeEx through [`RxNblPool`]; a received frame sets its NET_BUFFER's
//!   `DataLength` and its NBL is indicated ([`EthSink::indicate_receive`]) with the buffer
//!   kept; MiniportReturnNetBufferLists gives the buffer back to the ring. When the buffers
//!   the ring can still get fall below a ring's worth, the batch is indicated with
//!   NDIS_RECEIVE_FLAGS_RESOURCES and taken back at once.
//! - Pause stops the device (every frame in flight ends NDIS_STATUS_REQUEST_ABORTED, every
//!   waiting one NDIS_STATUS_PAUSED) and pends until NDIS has returned every indicated NBL;
//!   restart re-activates it. Reset (MiniportResetEx, or a device fault) resets the device
//!   with traffic in flight; waiting frames stay queued and go out after it. Surprise
//!   removal stops register access; Halt frees the receive NBLs after the device.
//! - Link: the device's LINK events become NDIS_STATUS_LINK_STATE, never twice the same.
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::ptr::{NonNull, null_mut};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use super::super::abi::*;
use super::super::link::LinkState;
use super::super::resources::Resources;
use super::abi::*;
use super::nbl::{SgError, net_buffer_sg};
use crate::os::alloc::{KVec, try_arc};
use crate::os::{NicPlatform, SpinLock};
use crate::vmxnet3::{
    self, Config, Fault, NicClient, RX_BUF, RxBatch, RxMode, SendError, Sge, TxStatus, Vmxnet3,
    Vmxnet3Error,
};

/// PCI device ID of the vmxnet3 function (VMware vendor 15AD).
pub const VMXNET3_DEVICE_ID: u16 = 0x07B0;
/// PCI device ID of the PVRDMA function.
pub const PVRDMA_DEVICE_ID: u16 = 0x0820;
/// VMware's PCI vendor ID.
pub const VMWARE_VENDOR_ID: u16 = 0x15AD;

/// Which adapter type serves a PCI function: one .sys serves both (issue 25 pairs them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterKind {
    /// 15AD:0820: the NDK provider (`ndis::miniport::Miniport`).
    Pvrdma,
    /// 15AD:07B0: the Ethernet miniport ([`EthMiniport`]).
    Vmxnet3,
}

impl AdapterKind {
    /// The adapter type for a function's vendor and device IDs (PCI configuration space);
    /// `None` for a function this driver does not serve.
    pub fn from_pci_ids(vendor: u16, device: u16) -> Option<Self> {
        match (vendor, device) {
            (VMWARE_VENDOR_ID, PVRDMA_DEVICE_ID) => Some(AdapterKind::Pvrdma),
            (VMWARE_VENDOR_ID, VMXNET3_DEVICE_ID) => Some(AdapterKind::Vmxnet3),
            _ => None,
        }
    }
}

/// The Ethernet MTU (no jumbo frames: Rx ring 1 is not used, `vmxnet3/mod.rs`).
pub const ETH_MTU: u32 = 1500;
/// Bytes of an untagged Ethernet header.
pub const ETH_HEADER: u32 = 14;
/// Multicast addresses the device's table holds (`vmxnet3::shared::MAX_MULTICAST`).
pub const MAX_MULTICAST: usize = 32;
/// Pieces one frame may take (the device's per-packet descriptor limit).
const MAX_PIECES: usize = 16;
/// NBLs returned to the device per `return_rx` call.
const RETURN_BATCH: usize = 64;

/// Where the miniport's indications go: NDIS in the FFI layer, a recording "NDIS" in tests.
/// Every method is called at IRQL ≤ DISPATCH_LEVEL with no driver lock held.
pub trait EthSink: Send + Sync {
    /// NdisMSendNetBufferListsComplete with the chain `nbls` (each NBL's `Status` set).
    fn send_complete(&self, nbls: NonNull<NET_BUFFER_LIST>, flags: u32);
    /// NdisMIndicateReceiveNetBufferLists with `count` NBLs chained from `nbls`.
    fn indicate_receive(&self, nbls: NonNull<NET_BUFFER_LIST>, count: u32, flags: u32);
    /// NdisMIndicateStatusEx(NDIS_STATUS_LINK_STATE).
    fn link_state(&self, state: &LinkState);
    /// NdisMPauseComplete: a pause that pended is done.
    fn pause_complete(&self);
    /// NdisMResetMiniport: the device failed ([`Fault`]); NDIS is asked to reset the adapter.
    fn reset_needed(&self);
}

/// The receive NBLs, from NDIS's pools in the FFI layer (NdisAllocateNetBufferListPool,
/// NdisAllocateMdl, NdisAllocateNetBufferAndNetBufferList; `SourceHandle` set to the
/// adapter's handle), built by the test's "NDIS" on the host.
pub trait RxNblPool: Send + Sync {
    /// An NBL with one NET_BUFFER whose one MDL describes `len` bytes at `va` (device address
    /// `logical`). PASSIVE_LEVEL.
    fn alloc(&self, va: NonNull<u8>, logical: u64, len: u32) -> Option<NonNull<NET_BUFFER_LIST>>;
    /// Frees an NBL `alloc` returned, with its NET_BUFFER and MDL. PASSIVE_LEVEL.
    fn free(&self, nbl: NonNull<NET_BUFFER_LIST>);
}

/// Lifecycle of the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EthState {
    /// After InitializeEx and before the first restart: NDIS sends nothing yet.
    Paused = 0,
    Running = 1,
    /// Pause pended: receives still lent.
    Pausing = 2,
    Resetting = 3,
    /// Surprise removal: the device is gone.
    Removed = 4,
    Halted = 5,
}

impl EthState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => EthState::Running,
            2 => EthState::Pausing,
            3 => EthState::Resetting,
            4 => EthState::Removed,
            5 => EthState::Halted,
            _ => EthState::Paused,
        }
    }
}

/// Bring-up parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthConfig {
    /// Tx ring and Rx ring 0 size (multiples of 32, 32..=4096).
    pub tx_ring: u32,
    pub rx_ring: u32,
    /// Receive buffers (and receive NBLs): the surplus over `rx_ring` is what NDIS may hold.
    pub rx_buffers: u32,
    /// A locally administered MAC instead of the permanent one (`NetworkAddress`).
    pub mac: Option<[u8; 6]>,
}

impl Default for EthConfig {
    fn default() -> Self {
        EthConfig {
            tx_ring: 256,
            rx_ring: 256,
            rx_buffers: 512,
            mac: None,
        }
    }
}

/// Counts the miniport keeps itself (the device's are in [`EthMiniport::statistics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthCounters {
    /// NBLs completed: total, and with a status other than success.
    pub nbls_completed: u64,
    pub nbls_failed: u64,
    /// NET_BUFFERs that could not be mapped (malformed MDLs, more than 16 pieces).
    pub tx_unmappable: u64,
    /// Frames that waited for ring space.
    pub tx_waited: u64,
    /// NBLs indicated, and of those with NDIS_RECEIVE_FLAGS_RESOURCES.
    pub rx_indicated: u64,
    pub rx_low_resources: u64,
    /// Frames received while not running (dropped).
    pub rx_not_running: u64,
    /// Returned NBLs that were not this miniport's or not lent (ignored).
    pub bad_returns: u64,
    /// Device faults (each asked NDIS for a reset).
    pub faults: u64,
    /// Resets done.
    pub resets: u64,
}

#[derive(Default)]
struct Counters {
    nbls_completed: AtomicU64,
    nbls_failed: AtomicU64,
    tx_unmappable: AtomicU64,
    tx_waited: AtomicU64,
    rx_indicated: AtomicU64,
    rx_low_resources: AtomicU64,
    rx_not_running: AtomicU64,
    bad_returns: AtomicU64,
    faults: AtomicU64,
    resets: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// An NBL pointer owned by the miniport between NDIS's call and its completion.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Nbl(NonNull<NET_BUFFER_LIST>);
// SAFETY: NBLs are handed between threads by NDIS; the miniport touches an NBL only while it
// owns it, under the Tx lock or in the one thread that owns the call.
#[allow(unsafe_code)]
unsafe impl Send for Nbl {}

/// A chain of NBLs being completed, linked through `Next`, in order.
struct Chain {
    head: Option<Nbl>,
    tail: Option<Nbl>,
    count: u64,
    failed: u64,
}

impl Chain {
    const fn new() -> Self {
        Chain {
            head: None,
            tail: None,
            count: 0,
            failed: 0,
        }
    }

    #[allow(unsafe_code)]
    fn push(&mut self, n: Nbl) {
        let p = n.0.as_ptr();
        // SAFETY: the miniport owns `n` until it completes it (this chain's purpose).
        unsafe { (*p).Next = null_mut() };
        // SAFETY: as above.
        if unsafe { (*p).Status } != NDIS_STATUS_SUCCESS {
            self.failed += 1;
        }
        match self.tail {
            // SAFETY: the tail is owned the same way.
            Some(t) => unsafe { (*t.0.as_ptr()).Next = p },
            None => self.head = Some(n),
        }
        self.tail = Some(n);
        self.count += 1;
    }
}

/// The send FIFO and the bookkeeping of NBLs in flight (under one lock).
struct TxState {
    /// NBLs with frames not yet queued to the device, oldest first, linked through
    /// `MiniportReserved[1]`.
    head: Option<Nbl>,
    tail: Option<Nbl>,
    /// The head NBL's next NET_BUFFER to queue.
    cursor: *mut NET_BUFFER,
}
// SAFETY: the pointers are owned NBLs / NET_BUFFERs, only touched under the lock.
#[allow(unsafe_code)]
unsafe impl Send for TxState {}

/// What the device and NDIS share: the NicClient half of the adapter.
struct Inner {
    nic: SpinLock<Option<Arc<Vmxnet3>>>,
    sink: SpinLock<Option<Arc<dyn EthSink>>>,
    state: AtomicU8,
    tx: SpinLock<TxState>,
    /// Receive NBL of each buffer id (filled once at InitializeEx, after the probe that
    /// allocates the buffers).
    rx_nbls: SpinLock<KVec<Nbl>>,
    rx_buffers: u32,
    rx_ring: u32,
    link: SpinLock<LinkState>,
    /// Statistics folded in before each (re)activation: the device counts from 0 after it.
    stats_base: SpinLock<vmxnet3::Stats>,
    filter: SpinLock<Filter>,
    counters: Counters,
    /// A fault asked NDIS for a reset that has not run yet.
    reset_asked: AtomicBool,
    /// The device is activated (InitializeEx, restart) and not quiesced since.
    active: AtomicBool,
}

#[derive(Clone, Copy)]
struct Filter {
    packet_filter: u32,
    multicast: [[u8; 6]; MAX_MULTICAST],
    multicast_len: usize,
    lookahead: u32,
}

/// One vmxnet3 adapter = the MiniportAdapterContext of a 15AD:07B0 function.
pub struct EthMiniport {
    inner: Arc<Inner>,
    pool: Arc<dyn RxNblPool>,
    resources: Resources,
    mac: [u8; 6],
    perm_mac: [u8; 6],
}

fn link_from(l: vmxnet3::LinkState) -> LinkState {
    if l.up {
        LinkState {
            connected: true,
            speed_bps: u64::from(l.speed_mbps) * 1_000_000,
        }
    } else {
        LinkState {
            connected: false,
            speed_bps: NDIS_LINK_SPEED_UNKNOWN,
        }
    }
}

fn bring_up_status(e: Vmxnet3Error) -> NDIS_STATUS {
    match e {
        Vmxnet3Error::NoMemory => NDIS_STATUS_RESOURCES,
        Vmxnet3Error::UnsupportedRevision(_)
        | Vmxnet3Error::UnsupportedUpt(_)
        | Vmxnet3Error::UnsupportedInterrupts(_) => NDIS_STATUS_NOT_SUPPORTED,
        _ => NDIS_STATUS_FAILURE,
    }
}

/// The Rx mode an NDIS packet filter asks for.
pub fn rx_mode_for(filter: u32) -> RxMode {
    let mut m = RxMode::empty();
    for (bit, mode) in [
        (NDIS_PACKET_TYPE_DIRECTED, RxMode::UNICAST),
        (NDIS_PACKET_TYPE_MULTICAST, RxMode::MULTICAST),
        (NDIS_PACKET_TYPE_ALL_MULTICAST, RxMode::ALL_MULTICAST),
        (NDIS_PACKET_TYPE_BROADCAST, RxMode::BROADCAST),
        (NDIS_PACKET_TYPE_PROMISCUOUS, RxMode::PROMISCUOUS),
    ] {
        if filter & bit != 0 {
            m |= mode;
        }
    }
    m
}

impl EthMiniport {
    /// InitializeEx's work once the BARs are mapped and the platform built over them
    /// (PASSIVE_LEVEL): the device brought up with an empty receive filter (NDIS sets the
    /// packet filter before it wants frames), one receive NBL per buffer.
    ///
    /// # Errors
    /// NDIS_STATUS_RESOURCES (memory, NBLs), NDIS_STATUS_NOT_SUPPORTED (revision, UPT,
    /// interrupt type), NDIS_STATUS_FAILURE (the device refused activation or is gone).
    /// Everything brought up so far is released first.
    pub fn initialize(
        platform: Arc<dyn NicPlatform>,
        res: &Resources,
        cfg: &EthConfig,
        pool: Arc<dyn RxNblPool>,
    ) -> Result<Arc<EthMiniport>, NDIS_STATUS> {
        let nr = |_| NDIS_STATUS_RESOURCES;
        let inner = try_arc(Inner {
            nic: SpinLock::new(None),
            sink: SpinLock::new(None),
            state: AtomicU8::new(EthState::Paused as u8),
            tx: SpinLock::new(TxState {
                head: None,
                tail: None,
                cursor: null_mut(),
            }),
            rx_nbls: SpinLock::new(KVec::new()),
            rx_buffers: cfg.rx_buffers,
            rx_ring: cfg.rx_ring,
            link: SpinLock::new(LinkState::UNKNOWN),
            stats_base: SpinLock::new(vmxnet3::Stats::default()),
            filter: SpinLock::new(Filter {
                packet_filter: 0,
                multicast: [[0; 6]; MAX_MULTICAST],
                multicast_len: 0,
                lookahead: ETH_MTU,
            }),
            counters: Counters::default(),
            reset_asked: AtomicBool::new(false),
            active: AtomicBool::new(true),
        })
        .map_err(nr)?;
        let client: Arc<dyn NicClient> = inner.clone();
        let nic = Vmxnet3::probe(
            platform,
            &Config {
                mtu: ETH_MTU,
                tx_ring: cfg.tx_ring,
                rx_ring: cfg.rx_ring,
                rx_buffers: cfg.rx_buffers,
                mac: cfg.mac,
                rx_mode: RxMode::empty(),
            },
            client,
        )
        .map_err(bring_up_status)?;
        let nic = try_arc(nic).map_err(nr)?;
        let m = EthMiniport {
            mac: nic.mac(),
            perm_mac: nic.permanent_mac(),
            inner,
            pool,
            resources: *res,
        };
        // One NBL per receive buffer, built once over the buffer's memory.
        let mut nbls = KVec::try_with_capacity(cfg.rx_buffers as usize).map_err(nr)?;
        let mut ok = true;
        for id in 0..cfg.rx_buffers {
            let va = nic.rx_data(id, RX_BUF).map(|v| v.as_non_null());
            let logical = nic.rx_buffer_logical(id);
            let got = match (va, logical) {
                (Some(va), Some(l)) => m.pool.alloc(va, l, RX_BUF),
                _ => None,
            };
            match got {
                Some(n) => {
                    set_reserved(n, 0, id as usize);
                    let _ = nbls.push_within_capacity(Nbl(n));
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            drop(nic);
            for n in nbls.iter() {
                m.pool.free(n.0);
            }
            return Err(NDIS_STATUS_RESOURCES);
        }
        *m.inner.link.lock() = link_from(nic.link());
        *m.inner.rx_nbls.lock() = nbls;
        *m.inner.nic.lock() = Some(nic);
        try_arc(m).map_err(nr)
    }

    /// The resources InitializeEx was given.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// The MAC in use (NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES.CurrentMacAddress).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The permanent MAC (GET_PERM_MAC).
    pub fn permanent_mac(&self) -> [u8; 6] {
        self.perm_mac
    }

    /// The link as NDIS was last told (the general attributes' at first).
    pub fn link(&self) -> LinkState {
        *self.inner.link.lock()
    }

    /// The data path's state.
    pub fn state(&self) -> EthState {
        self.inner.state()
    }

    /// Where indications go from now on (after the attributes are set). A link change
    /// since `reported` (what the attributes said) is indicated at once.
    pub fn set_sink(&self, sink: Arc<dyn EthSink>, reported: LinkState) {
        *self.inner.sink.lock() = Some(sink.clone());
        let now = self.link();
        if now != reported {
            sink.link_state(&now);
        }
    }

    /// The miniport's own counts.
    pub fn counters(&self) -> EthCounters {
        let c = &self.inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EthCounters {
            nbls_completed: l(&c.nbls_completed),
            nbls_failed: l(&c.nbls_failed),
            tx_unmappable: l(&c.tx_unmappable),
            tx_waited: l(&c.tx_waited),
            rx_indicated: l(&c.rx_indicated),
            rx_low_resources: l(&c.rx_low_resources),
            rx_not_running: l(&c.rx_not_running),
            bad_returns: l(&c.bad_returns),
            faults: l(&c.faults),
            resets: l(&c.resets),
        }
    }

    /// The hardware layer (None after Halt), for its counters.
    pub fn nic(&self) -> Option<Arc<Vmxnet3>> {
        self.inner.nic()
    }

    /// Receive NBLs NDIS holds now.
    pub fn rx_lent(&self) -> u32 {
        self.inner.nic().map_or(0, |n| n.rx_loaned())
    }

    /// NBLs waiting for ring space.
    pub fn tx_waiting(&self) -> usize {
        let tx = self.inner.tx.lock();
        let mut n = 0;
        let mut cur = tx.head;
        while let Some(c) = cur {
            n += 1;
            cur = reserved(c.0, 1);
        }
        n
    }

    /// MiniportSendNetBufferLists (IRQL ≤ DISPATCH_LEVEL): see the module docs. Every NBL of
    /// the chain is completed exactly once, here or later.
    ///
    /// # Safety
    /// `nbls` must be null or a chain of NBLs NDIS hands to the miniport, each with a valid
    /// NET_BUFFER chain whose MDLs are valid (with their PFN arrays) until completion.
    #[allow(unsafe_code)]
    pub unsafe fn send_net_buffer_lists(&self, nbls: *mut NET_BUFFER_LIST, send_flags: u32) {
        let flags = send_flags & NDIS_SEND_FLAGS_DISPATCH_LEVEL;
        let state = self.inner.state();
        let refuse = match state {
            EthState::Running => None,
            EthState::Resetting => None,
            EthState::Paused | EthState::Pausing => Some(NDIS_STATUS_PAUSED),
            EthState::Removed | EthState::Halted => Some(NDIS_STATUS_REQUEST_ABORTED),
        };
        let mut done = Chain::new();
        {
            let mut tx = self.inner.tx.lock();
            let mut cur = NonNull::new(nbls);
            while let Some(n) = cur {
                // SAFETY: an NBL of the chain NDIS handed over (contract).
                cur = NonNull::new(unsafe { (*n.as_ptr()).Next });
                // SAFETY: as above.
                let first = unsafe { (*n.as_ptr()).FirstNetBuffer }.cast::<NET_BUFFER>();
                if let Some(st) =
                    refuse.or(first.is_null().then_some(NDIS_STATUS_INVALID_PARAMETER))
                {
                    // SAFETY: as above.
                    unsafe { (*n.as_ptr()).Status = st };
                    done.push(Nbl(n));
                    continue;
                }
                // SAFETY: as above.
                unsafe { (*n.as_ptr()).Status = NDIS_STATUS_SUCCESS };
                set_reserved(n, 0, 0);
                set_reserved(n, 1, 0);
                match tx.tail {
                    Some(t) => set_reserved(t.0, 1, n.as_ptr() as usize),
                    None => {
                        tx.head = Some(Nbl(n));
                        tx.cursor = first;
                    }
                }
                tx.tail = Some(Nbl(n));
            }
            if state == EthState::Running {
                self.inner.drain(&mut tx, &mut done);
            }
        }
        self.inner.complete(done, flags);
    }

    /// MiniportReturnNetBufferLists (IRQL ≤ DISPATCH_LEVEL): each NBL's buffer goes back to
    /// the ring. An NBL that is not one of this miniport's receive NBLs is ignored (counted).
    ///
    /// # Safety
    /// `nbls` must be null or a chain of NBLs NDIS returns (readable `Next`).
    #[allow(unsafe_code)]
    pub unsafe fn return_net_buffer_lists(&self, nbls: *mut NET_BUFFER_LIST) {
        let Some(nic) = self.inner.nic() else { return };
        let mut ids = [0u32; RETURN_BATCH];
        let mut n = 0;
        let mut cur = NonNull::new(nbls);
        while let Some(p) = cur {
            // SAFETY: an NBL of the returned chain (contract).
            cur = NonNull::new(unsafe { (*p.as_ptr()).Next });
            let id = reserved_usize(p, 0);
            let ours = self.inner.rx_nbls.lock().get(id).is_some_and(|x| x.0 == p);
            if !ours {
                add(&self.inner.counters.bad_returns, 1);
                continue;
            }
            if let Some(slot) = ids.get_mut(n) {
                // CAST: ids are below rx_buffers (a u32).
                *slot = id as u32;
                n += 1;
            }
            if n == RETURN_BATCH {
                nic.return_rx(&ids);
                n = 0;
            }
        }
        if let Some(rest) = ids.get(..n).filter(|r| !r.is_empty()) {
            nic.return_rx(rest);
        }
        if self.inner.state() == EthState::Pausing && nic.rx_loaned() == 0 {
            self.inner.finish_pause();
        }
    }

    /// MiniportPause (PASSIVE_LEVEL): NDIS_STATUS_SUCCESS, or NDIS_STATUS_PENDING until
    /// NDIS has returned every indicated NBL ([`EthSink::pause_complete`]).
    pub fn pause(&self) -> NDIS_STATUS {
        let i = &*self.inner;
        let prev = i.swap_state(EthState::Pausing);
        if matches!(prev, EthState::Halted) {
            i.set_state(prev);
            return NDIS_STATUS_FAILURE;
        }
        if let Some(nic) = i.nic() {
            i.fold_stats(&nic);
            // Frames in flight end aborted (NicClient::sent).
            nic.quiesce();
            i.active.store(false, Ordering::Release);
        }
        i.fail_waiting(NDIS_STATUS_PAUSED);
        let lent = i.nic().map_or(0, |n| n.rx_loaned());
        if prev == EthState::Removed {
            i.set_state(EthState::Removed);
            return NDIS_STATUS_SUCCESS;
        }
        // The last return may race this check: whichever side moves Pausing to Paused
        // completes the pause, exactly once (here by the status, there by pause_complete).
        let done = lent == 0
            && i.state
                .compare_exchange(
                    EthState::Pausing as u8,
                    EthState::Paused as u8,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok();
        if done {
            NDIS_STATUS_SUCCESS
        } else {
            NDIS_STATUS_PENDING
        }
    }

    /// MiniportRestart (PASSIVE_LEVEL): the device activated again (rings rebuilt), the
    /// filter and multicast table written back, the link re-read and indicated if changed.
    pub fn restart(&self) -> NDIS_STATUS {
        let i = &*self.inner;
        match i.state() {
            EthState::Running => return NDIS_STATUS_SUCCESS,
            EthState::Halted | EthState::Removed | EthState::Pausing | EthState::Resetting => {
                return NDIS_STATUS_ADAPTER_NOT_READY;
            }
            EthState::Paused => {}
        }
        let Some(nic) = i.nic() else {
            return NDIS_STATUS_ADAPTER_NOT_READY;
        };
        // The device is active from InitializeEx until the first pause.
        let link = if i.active.load(Ordering::Acquire) {
            Ok(nic.link())
        } else {
            nic.restart()
        };
        i.active.store(link.is_ok(), Ordering::Release);
        match link {
            Ok(l) => {
                i.set_state(EthState::Running);
                i.update_link(link_from(l));
                let mut tx = i.tx.lock();
                let mut done = Chain::new();
                i.drain(&mut tx, &mut done);
                drop(tx);
                i.complete(done, 0);
                NDIS_STATUS_SUCCESS
            }
            Err(_) => NDIS_STATUS_FAILURE,
        }
    }

    /// MiniportResetEx's work (PASSIVE_LEVEL: the FFI layer runs it from a work item and
    /// completes with NdisMResetComplete): the device reset with traffic in flight; frames
    /// in the device end aborted, frames waiting stay queued and go out after it.
    pub fn reset(&self) -> NDIS_STATUS {
        let i = &*self.inner;
        let prev = i.state();
        if !matches!(prev, EthState::Running | EthState::Paused) {
            return if prev == EthState::Removed {
                NDIS_STATUS_FAILURE
            } else {
                NDIS_STATUS_SUCCESS
            };
        }
        let Some(nic) = i.nic() else {
            return NDIS_STATUS_FAILURE;
        };
        i.set_state(EthState::Resetting);
        add(&i.counters.resets, 1);
        i.reset_asked.store(false, Ordering::Release);
        i.fold_stats(&nic);
        let r = nic.reset();
        // The filter lives in DriverShared, which the restart re-read: nothing to redo.
        i.set_state(prev);
        match r {
            Ok(l) => {
                i.update_link(link_from(l));
                if prev == EthState::Running {
                    let mut tx = i.tx.lock();
                    let mut done = Chain::new();
                    i.drain(&mut tx, &mut done);
                    drop(tx);
                    i.complete(done, 0);
                }
                NDIS_STATUS_SUCCESS
            }
            Err(_) => NDIS_STATUS_FAILURE,
        }
    }

    /// MiniportDevicePnPEventNotify: on surprise removal no register is touched again and
    /// every waiting frame fails; frames in the device end at Halt.
    pub fn pnp_event(&self, event: u32) {
        if event != NdisDevicePnPEventSurpriseRemoved {
            return;
        }
        let i = &*self.inner;
        i.set_state(EthState::Removed);
        if let Some(nic) = i.nic() {
            nic.mark_removed();
        }
        i.fail_waiting(NDIS_STATUS_REQUEST_ABORTED);
    }

    /// MiniportHaltEx (PASSIVE_LEVEL; NDIS has paused the adapter and holds no receive NBL):
    /// the device stopped and freed (frames still in it end aborted), then the receive NBLs
    /// freed. An NBL NDIS still held would keep its buffer's memory: both are leaked rather
    /// than freed under it.
    pub fn halt(&self) {
        let i = &*self.inner;
        i.set_state(EthState::Halted);
        let nic = i.nic.lock().take();
        let lent = nic.as_ref().map_or(0, |n| n.rx_loaned());
        if let Some(nic) = nic {
            // DPCs that took a count of the device finish before the last one goes here.
            let mut nic = nic;
            loop {
                match Arc::try_unwrap(nic) {
                    Ok(n) => {
                        drop(n);
                        break;
                    }
                    Err(back) => {
                        nic = back;
                        core::hint::spin_loop();
                    }
                }
            }
        }
        i.fail_waiting(NDIS_STATUS_REQUEST_ABORTED);
        let sink = i.sink.lock().take();
        drop(sink);
        if lent == 0 {
            let nbls = core::mem::take(&mut *i.rx_nbls.lock());
            for n in nbls.iter() {
                self.pool.free(n.0);
            }
        }
    }

    /// MiniportShutdownEx (any IRQL): the device stops DMA; nothing is freed.
    pub fn shutdown(&self) {
        if let Some(nic) = self.inner.nic.try_lock().and_then(|n| n.clone()) {
            nic.mark_removed();
        }
    }

    /// The packet filter NDIS set.
    pub fn packet_filter(&self) -> u32 {
        self.inner.filter.lock().packet_filter
    }

    /// OID_GEN_CURRENT_PACKET_FILTER: the device's Rx mode follows.
    pub(super) fn set_packet_filter(&self, f: u32) -> NDIS_STATUS {
        let mut flt = self.inner.filter.lock();
        let Some(nic) = self.inner.nic() else {
            return NDIS_STATUS_ADAPTER_NOT_READY;
        };
        match nic.set_rx_mode(rx_mode_for(f)) {
            Ok(()) => {
                flt.packet_filter = f;
                NDIS_STATUS_SUCCESS
            }
            Err(_) => NDIS_STATUS_FAILURE,
        }
    }

    /// The multicast list NDIS set (OID_802_3_MULTICAST_LIST), copied into `out`; returns
    /// how many.
    pub fn multicast_list(&self, out: &mut [[u8; 6]]) -> usize {
        let f = self.inner.filter.lock();
        let list = f.multicast.get(..f.multicast_len).unwrap_or(&[]);
        for (o, m) in out.iter_mut().zip(list) {
            *o = *m;
        }
        list.len()
    }

    /// OID_802_3_MULTICAST_LIST set: the device's table follows.
    pub(super) fn set_multicast_list(&self, macs: &[[u8; 6]]) -> NDIS_STATUS {
        if macs.len() > MAX_MULTICAST {
            return NDIS_STATUS_MULTICAST_FULL;
        }
        let mut flt = self.inner.filter.lock();
        let Some(nic) = self.inner.nic() else {
            return NDIS_STATUS_ADAPTER_NOT_READY;
        };
        match nic.set_multicast(macs) {
            Ok(()) => {
                for (d, s) in flt.multicast.iter_mut().zip(macs) {
                    *d = *s;
                }
                flt.multicast_len = macs.len();
                NDIS_STATUS_SUCCESS
            }
            Err(vmxnet3::device::FilterError::TooMany) => NDIS_STATUS_MULTICAST_FULL,
            Err(_) => NDIS_STATUS_FAILURE,
        }
    }

    pub(super) fn lookahead(&self) -> u32 {
        self.inner.filter.lock().lookahead
    }

    pub(super) fn set_lookahead(&self, l: u32) {
        self.inner.filter.lock().lookahead = l;
    }

    /// The device's statistics since InitializeEx (GET_STATS plus what earlier activations
    /// counted) and the driver's own.
    pub fn statistics(&self) -> (vmxnet3::Stats, EthCounters) {
        let mut s = *self.inner.stats_base.lock();
        if let Some(nic) = self.inner.nic() {
            let now = nic.stats();
            for (a, b) in s.tx.iter_mut().zip(now.tx) {
                *a += b;
            }
            for (a, b) in s.rx.iter_mut().zip(now.rx) {
                *a += b;
            }
        }
        (s, self.counters())
    }
}

impl Inner {
    fn nic(&self) -> Option<Arc<Vmxnet3>> {
        self.nic.lock().clone()
    }

    fn state(&self) -> EthState {
        EthState::from_u8(self.state.load(Ordering::Acquire))
    }

    fn set_state(&self, s: EthState) {
        self.state.store(s as u8, Ordering::Release);
    }

    fn swap_state(&self, s: EthState) -> EthState {
        EthState::from_u8(self.state.swap(s as u8, Ordering::AcqRel))
    }

    fn sink(&self) -> Option<Arc<dyn EthSink>> {
        self.sink.lock().clone()
    }

    fn finish_pause(&self) {
        if self
            .state
            .compare_exchange(
                EthState::Pausing as u8,
                EthState::Paused as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
            && let Some(s) = self.sink()
        {
            s.pause_complete();
        }
    }

    fn fold_stats(&self, nic: &Vmxnet3) {
        let now = nic.stats();
        let mut b = self.stats_base.lock();
        for (a, v) in b.tx.iter_mut().zip(now.tx) {
            *a += v;
        }
        for (a, v) in b.rx.iter_mut().zip(now.rx) {
            *a += v;
        }
    }

    /// Completes `done` (no lock held).
    fn complete(&self, done: Chain, flags: u32) {
        let Some(head) = done.head else { return };
        add(&self.counters.nbls_completed, done.count);
        add(&self.counters.nbls_failed, done.failed);
        if let Some(s) = self.sink() {
            s.send_complete(head.0, flags);
        }
    }

    /// Queues waiting frames to the device while it has room (Tx lock held).
    #[allow(unsafe_code)]
    fn drain(&self, tx: &mut TxState, done: &mut Chain) {
        let Some(nic) = self.nic() else { return };
        let mut sg = [Sge { addr: 0, len: 0 }; MAX_PIECES];
        let mut queued = false;
        while let Some(head) = tx.head {
            let nb = tx.cursor;
            if !nb.is_null() {
                // SAFETY: a NET_BUFFER of an NBL the miniport owns (send contract).
                let mapped = unsafe { net_buffer_sg(nb, &mut sg) };
                let failed = match mapped {
                    Ok((n, _len)) => {
                        let pieces = sg.get(..n).unwrap_or(&[]);
                        match nic.send(pieces, nb as u64, true) {
                            Ok(()) => {
                                queued = true;
                                // SAFETY: as above: the NET_BUFFER's own reserved word.
                                unsafe {
                                    (*nb).MiniportReserved[0] = head.0.as_ptr().cast();
                                }
                                set_reserved(head.0, 0, reserved_usize(head.0, 0) + 1);
                                None
                            }
                            Err(SendError::Full) => {
                                add(&self.counters.tx_waited, 1);
                                break;
                            }
                            Err(SendError::Stopped) => {
                                // A device error or a removal: the frames wait for a reset,
                                // or fail at Halt.
                                break;
                            }
                            Err(SendError::BadLength) => Some(NDIS_STATUS_INVALID_LENGTH),
                            Err(SendError::TooManyFragments) => Some(NDIS_STATUS_RESOURCES),
                        }
                    }
                    Err(SgError::TooManyPieces) => {
                        add(&self.counters.tx_unmappable, 1);
                        Some(NDIS_STATUS_RESOURCES)
                    }
                    Err(SgError::Malformed) => {
                        add(&self.counters.tx_unmappable, 1);
                        Some(NDIS_STATUS_INVALID_PARAMETER)
                    }
                };
                if let Some(st) = failed {
                    // SAFETY: the owned NBL.
                    unsafe { (*head.0.as_ptr()).Status = st };
                }
                // SAFETY: as above.
                tx.cursor = unsafe { (*nb).Next };
            }
            if tx.cursor.is_null() {
                // Every frame of the head NBL is with the device (or failed).
                let next = reserved(head.0, 1);
                tx.head = next;
                if next.is_none() {
                    tx.tail = None;
                }
                tx.cursor = next.map_or(null_mut(), |n| {
                    // SAFETY: an owned NBL of the FIFO.
                    unsafe { (*n.0.as_ptr()).FirstNetBuffer }.cast::<NET_BUFFER>()
                });
                if reserved_usize(head.0, 0) == 0 {
                    done.push(head);
                }
            }
        }
        if queued {
            nic.flush_tx();
        }
    }

    /// Fails every waiting frame with `status`.
    #[allow(unsafe_code)]
    fn fail_waiting(&self, status: NDIS_STATUS) {
        let mut done = Chain::new();
        {
            let mut tx = self.tx.lock();
            while let Some(head) = tx.head {
                let next = reserved(head.0, 1);
                // SAFETY: an owned NBL of the FIFO.
                unsafe { (*head.0.as_ptr()).Status = status };
                tx.head = next;
                if reserved_usize(head.0, 0) == 0 {
                    done.push(head);
                }
            }
            tx.tail = None;
            tx.cursor = null_mut();
        }
        self.complete(done, 0);
    }

    fn update_link(&self, state: LinkState) {
        let changed = {
            let mut l = self.link.lock();
            let changed = *l != state;
            *l = state;
            changed
        };
        if changed && let Some(s) = self.sink() {
            s.link_state(&state);
        }
    }
}

impl NicClient for Inner {
    #[allow(unsafe_code)]
    fn received(&self, batch: &RxBatch<'_>) {
        if self.state() != EthState::Running {
            add(&self.counters.rx_not_running, batch.len() as u64);
            return;
        }
        let Some(sink) = self.sink() else { return };
        let lent = self.nic().map_or(0, |n| n.rx_loaned());
        // Buffers the ring can still be refilled from after this batch is kept.
        let spare = self.rx_buffers.saturating_sub(lent + batch.len() as u32);
        let low = spare < self.rx_ring;
        let mut head: *mut NET_BUFFER_LIST = null_mut();
        let mut tail: Option<NonNull<NET_BUFFER_LIST>> = None;
        let mut count = 0u32;
        let table = self.rx_nbls.lock();
        for k in 0..batch.len() {
            let Some(f) = batch.frame(k) else { continue };
            let Some(n) = table.get(f.buffer as usize) else {
                continue;
            };
            let p = n.0.as_ptr();
            // SAFETY: the NBL of buffer `f.buffer`, the miniport's while the buffer is not
            // lent (it comes back only with its buffer).
            let nbl = unsafe { &mut *p };
            // SAFETY: the one NET_BUFFER the pool allocated with it, owned the same way.
            let Some(nb) = (unsafe { nbl.FirstNetBuffer.cast::<NET_BUFFER>().as_mut() }) else {
                continue;
            };
            nb.DataLength = f.len as usize;
            nb.DataOffset = 0;
            nb.CurrentMdlOffset = 0;
            nb.CurrentMdl = nb.MdlChain;
            nbl.Next = null_mut();
            nbl.Status = NDIS_STATUS_SUCCESS;
            match tail {
                // SAFETY: the previous NBL of this indication, the miniport's.
                Some(t) => unsafe { (*t.as_ptr()).Next = p },
                None => head = p,
            }
            tail = Some(n.0);
            count += 1;
            if !low {
                batch.keep(k);
            }
        }
        drop(table);
        let Some(first) = NonNull::new(head) else {
            return;
        };
        add(&self.counters.rx_indicated, u64::from(count));
        let mut flags = NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL;
        if low {
            add(&self.counters.rx_low_resources, u64::from(count));
            flags |= NDIS_RECEIVE_FLAGS_RESOURCES;
        }
        sink.indicate_receive(first, count, flags);
    }

    fn sent(&self, tokens: &[u64], status: TxStatus) {
        let mut done = Chain::new();
        {
            let mut tx = self.tx.lock();
            for &t in tokens {
                let nb = t as usize as *mut NET_BUFFER;
                if nb.is_null() {
                    continue;
                }
                #[allow(unsafe_code)]
                // SAFETY: the token is a NET_BUFFER queued by `drain`, whose NBL the miniport
                // owns until this completion brings its count to 0.
                let owner = unsafe { (*nb).MiniportReserved[0] }.cast::<NET_BUFFER_LIST>();
                let Some(nbl) = NonNull::new(owner) else {
                    continue;
                };
                if status == TxStatus::Aborted {
                    #[allow(unsafe_code)]
                    // SAFETY: as above.
                    unsafe {
                        (*nbl.as_ptr()).Status = NDIS_STATUS_REQUEST_ABORTED;
                    }
                }
                let left = reserved_usize(nbl, 0).saturating_sub(1);
                set_reserved(nbl, 0, left);
                // The head NBL may still have frames to queue: it completes when the FIFO
                // lets go of it.
                let waiting = tx.head.is_some_and(|h| h.0 == nbl);
                if left == 0 && !waiting {
                    done.push(Nbl(nbl));
                }
            }
            if self.state() == EthState::Running {
                self.drain(&mut tx, &mut done);
            }
        }
        self.complete(done, NDIS_SEND_FLAGS_DISPATCH_LEVEL);
    }

    fn link_changed(&self, link: vmxnet3::LinkState) {
        self.update_link(link_from(link));
    }

    fn device_error(&self, _fault: Fault) {
        add(&self.counters.faults, 1);
        if !self.reset_asked.swap(true, Ordering::AcqRel)
            && let Some(s) = self.sink()
        {
            s.reset_needed();
        }
    }
}

/// `MiniportReserved[i]` of an owned NBL as a value.
#[allow(unsafe_code)]
fn reserved_usize(n: NonNull<NET_BUFFER_LIST>, i: usize) -> usize {
    // SAFETY: an NBL the miniport owns; `i` < 2 at every call site.
    unsafe {
        (*n.as_ptr())
            .MiniportReserved
            .get(i)
            .map_or(0, |p| *p as usize)
    }
}

/// `MiniportReserved[i]` of an owned NBL as the next NBL.
fn reserved(n: NonNull<NET_BUFFER_LIST>, i: usize) -> Option<Nbl> {
    NonNull::new(reserved_usize(n, i) as *mut NET_BUFFER_LIST).map(Nbl)
}

#[allow(unsafe_code)]
fn set_reserved(n: NonNull<NET_BUFFER_LIST>, i: usize, v: usize) {
    // SAFETY: an NBL the miniport owns.
    if let Some(slot) = unsafe { (*n.as_ptr()).MiniportReserved.get_mut(i) } {
        *slot = v as *mut core::ffi::c_void;
    }
}
