//! The NDK surface of the Ethernet adapter of a paired slot (smb-direct.md §5.1 item 1, A2):
//! NDIS sees NDK on the adapter that owns the IP interface, and every NDK request is served
//! by the slot's RDMA function ([`RdmaFunction`]) while it is here.
//!
//! - NDK attributes: `Enabled` is `*NetworkDirect` and the function's presence
//!   ([`NdkState::with_presence`]); the capabilities live in a block of this adapter's (NDIS
//!   may keep the pointer, ndkpi.md §6.4), copied from the function when it first joins.
//! - The function joins ([`PairedNic::joined`], on the thread that registered the second
//!   function: an InitializeEx): the join is only recorded and the FFI layer's work item
//!   kicked ([`NdkEvents`]); the work item does it ([`NicNdk::run_deferred`], PASSIVE_LEVEL
//!   on a system worker thread, whose stack is its own: attaching starts the connection
//!   engine, deep in a debug build, which InitializeEx's stack had no room for). There the
//!   interface (NET_LUID, IfIndex, MAC, MTU) and its address resolver are attached to the
//!   function, so the connection engine binds a GID per address of this interface and
//!   follows its changes; a link that is down is reported; then NDK is enabled (the same
//!   work item issues NetEventNDKEnable). The NDK attributes InitializeEx registers
//!   therefore say `Enabled` FALSE whatever the start order.
//! - It leaves ([`PairedNic::parting`], from either side's Halt): a join still waiting for
//!   the work item is cancelled, one the work item is running is waited for (bounded); then
//!   opens stop at once, NDK is disabled (NetEventNDKDisable: NDIS closes every
//!   NDK_ADAPTER), the NDK objects still open are failed (their CQs report
//!   STATUS_INTERNAL_ERROR, ndkpi.md §5.4) and a bounded wait lets their consumers close
//!   them; then the interface is detached. An NDK_ADAPTER NDIS closes later still reaches
//!   the function that opened it.
//! - Link changes of the interface go to the function (down: port error; up: UNQUIESCE),
//!   as Linux's vmw_pvrdma does on NETDEV_DOWN / NETDEV_UP (vmxnet3.md §1.2).
#![deny(unsafe_code)]

use alloc::sync::Arc;

use super::super::abi::*;
use super::super::counters::STATISTICS_INFO_LEN;
use super::super::counters::statistics_info_bytes;
use super::super::oid::{OidResult, object_query};
use super::super::state::{Lifecycle, NdkState};
use super::function::{NetInterface, RdmaFunction};
use super::registry::PairedNic;
use crate::ndkpi::{NDK_ADAPTER, NDK_ADAPTER_INFO, NDK_VERSION};
use crate::os::alloc::{KBox, KVec, try_arc, try_box};
use crate::os::net::{AddressResolver, Mac};
use crate::os::{Platform, SpinLock};

/// How long a parting waits for NDK_ADAPTERs to close after their objects were failed.
pub const PART_GRACE_NS: u64 = 5_000_000_000;

/// How long a parting waits for a join the work item is running (the connection engine's
/// start: device commands, each bounded by the device layer's own timeout).
pub const JOIN_WAIT_NS: u64 = 30_000_000_000;

/// NDK_ADAPTERs one Ethernet adapter tracks at once (NDIS opens one per consumer).
const MAX_OPEN: usize = 64;

/// Where the adapter's NDK state changes are announced, and its deferred join requested:
/// the FFI layer queues its work item, which runs [`NicNdk::run_deferred`] then issues
/// [`NicNdk::next_ndk_pnp_event`]'s events (never from an OID handler, ndkpi.md §6.5).
/// Called with no lock held, IRQL ≤ DISPATCH_LEVEL.
pub trait NdkEvents: Send + Sync {
    fn ndk_state_changed(&self);
}

/// The join the work item owes ([`PairedNic::joined`] records it, [`NicNdk::run_deferred`]
/// does it, [`PairedNic::parting`] cancels or waits for it).
struct Deferred {
    /// Recorded, not yet taken by the work item.
    join: Option<Arc<dyn RdmaFunction>>,
    /// The work item is attaching this function now.
    running: Option<Arc<dyn RdmaFunction>>,
    /// A parting gave up waiting for the running join: the work item undoes it instead of
    /// offering NDK.
    cancelled: bool,
}

/// What NDIS keeps pointers to: the capabilities and the adapter info they point at.
struct Block {
    info: NDK_ADAPTER_INFO,
    caps: NDIS_NDK_CAPABILITIES,
    /// Filled from a function.
    filled: bool,
}

// SAFETY: `caps.NdkInfo` points into the same block; no thread-affine data.
#[allow(unsafe_code)]
unsafe impl Send for Block {}

/// An NDK_ADAPTER handed out, and the function that opened it.
struct Opened {
    adapter: usize,
    by: Arc<dyn RdmaFunction>,
}

/// See the module docs. One per Ethernet adapter of a paired slot.
pub struct NicNdk {
    platform: Arc<dyn Platform>,
    iface: SpinLock<NetInterface>,
    resolver: Arc<dyn AddressResolver>,
    state: NdkState,
    function: SpinLock<Option<Arc<dyn RdmaFunction>>>,
    link_up: SpinLock<bool>,
    open: SpinLock<KVec<Opened>>,
    block: KBox<SpinLock<Block>>,
    events: SpinLock<Option<Arc<dyn NdkEvents>>>,
    deferred: SpinLock<Deferred>,
    grace_ns: u64,
}

impl NicNdk {
    /// At the Ethernet adapter's InitializeEx (PASSIVE_LEVEL): its interface, the resolver of
    /// its addresses, `*NetworkDirect`, the link as the adapter reports it, and the parting
    /// grace. NDK starts disabled until the RDMA function joins.
    ///
    /// # Errors
    /// NDIS_STATUS_RESOURCES.
    pub fn new(
        platform: Arc<dyn Platform>,
        iface: NetInterface,
        resolver: Arc<dyn AddressResolver>,
        network_direct: bool,
        link_up: bool,
        grace_ns: u64,
    ) -> Result<Arc<NicNdk>, NDIS_STATUS> {
        let nr = |_| NDIS_STATUS_RESOURCES;
        let block = try_box(SpinLock::new(Block {
            info: empty_info(),
            caps: empty_caps(),
            filled: false,
        }))
        .map_err(nr)?;
        let n = try_arc(NicNdk {
            platform,
            iface: SpinLock::new(iface),
            resolver,
            state: NdkState::with_presence(network_direct, false),
            function: SpinLock::new(None),
            link_up: SpinLock::new(link_up),
            open: SpinLock::new(KVec::try_with_capacity(MAX_OPEN).map_err(nr)?),
            block,
            events: SpinLock::new(None),
            deferred: SpinLock::new(Deferred {
                join: None,
                running: None,
                cancelled: false,
            }),
            grace_ns,
        })
        .map_err(nr)?;
        {
            let mut b = n.block.lock();
            b.caps.NdkInfo = core::ptr::from_mut(&mut b.info);
        }
        Ok(n)
    }

    /// Where state changes are announced from now on.
    pub fn set_events(&self, e: Option<Arc<dyn NdkEvents>>) {
        let old = core::mem::replace(&mut *self.events.lock(), e);
        drop(old);
    }

    fn announce(&self) {
        let e = self.events.lock().clone();
        if let Some(e) = e {
            e.ndk_state_changed();
        }
    }

    /// The interface as attached.
    pub fn interface(&self) -> NetInterface {
        *self.iface.lock()
    }

    /// NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES.Enabled now.
    pub fn ndk_enabled(&self) -> bool {
        self.state.enabled()
    }

    /// The capabilities pointer for the NDK attributes (valid while this lives; filled from
    /// the function when it first joins).
    pub fn capabilities_ptr(&self) -> *mut NDIS_NDK_CAPABILITIES {
        let mut b = self.block.lock();
        core::ptr::from_mut(&mut b.caps)
    }

    /// The capabilities as NDIS reads them, and whether a function has filled them.
    pub fn capabilities(&self) -> (NDIS_NDK_CAPABILITIES, NDK_ADAPTER_INFO, bool) {
        let b = self.block.lock();
        (b.caps, b.info, b.filled)
    }

    /// Whether the RDMA function is joined now.
    pub fn has_function(&self) -> bool {
        self.function.lock().is_some()
    }

    /// NDK_ADAPTERs handed out and not closed.
    pub fn open_adapters(&self) -> usize {
        self.open.lock().len()
    }

    /// The next NDK PnP event the FFI layer's work item must issue (until `None`).
    pub fn next_ndk_pnp_event(&self) -> Option<NET_PNP_EVENT_CODE> {
        self.state.next_event()
    }

    /// The NDK attributes' `Enabled` as InitializeEx registers them (the function may have
    /// joined already): NDIS knows this state from then on, nothing is announced for it.
    pub fn report_attributes(&self) -> bool {
        self.state.report()
    }

    /// Whether the FFI layer's work item has something to do: an NDK PnP event, or a join
    /// (recorded before the events were installed, [`NicNdk::set_events`]).
    pub fn has_pending_event(&self) -> bool {
        self.deferred.lock().join.is_some() || self.state.pending()
    }

    /// Whether a join waits for the work item, or runs in it.
    pub fn join_pending(&self) -> bool {
        let d = self.deferred.lock();
        d.join.is_some() || d.running.is_some()
    }

    /// The work item's first task (PASSIVE_LEVEL, no lock held): the join
    /// [`PairedNic::joined`] recorded, if any. The function is attached the interface; if
    /// that succeeds and no parting cancelled it meanwhile, it serves NDK from now on, and
    /// the enable is left for [`NicNdk::next_ndk_pnp_event`] (nothing is announced: the
    /// caller drains the events next). Returns whether a join was done.
    pub fn run_deferred(&self) -> bool {
        let rdma = {
            let mut d = self.deferred.lock();
            let Some(r) = d.join.take() else {
                return false;
            };
            d.running = Some(r.clone());
            r
        };
        let attached = self.state.lifecycle() != Lifecycle::Halted
            && rdma
                .attach_interface(self.interface(), self.resolver.clone())
                .is_ok();
        if attached {
            if !self.link_up() {
                rdma.link_changed(false);
            }
            self.copy_capabilities(&*rdma);
        }
        // Offered under the deferral's lock: a parting either finds the join still running
        // (and waits, or cancels it) or finds the function offered (and withdraws it).
        let offered = {
            let mut d = self.deferred.lock();
            d.running = None;
            let cancelled = core::mem::take(&mut d.cancelled);
            let offer = attached && !cancelled;
            if offer {
                *self.function.lock() = Some(rdma.clone());
                self.state.set_present(true);
            }
            offer
        };
        if attached && !offered {
            rdma.detach_interface();
        }
        offered
    }

    /// OPEN_NDK_ADAPTER_HANDLER with its NDIS 6.50 parameters (PASSIVE_LEVEL).
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY while NDK is disabled, the function absent or after
    /// Halt; then what the function answers; NDIS_STATUS_RESOURCES.
    pub fn open_ndk_adapter_with(
        &self,
        p: &NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        self.state.may_open()?;
        let f = self
            .function
            .lock()
            .clone()
            .ok_or(NDIS_STATUS_ADAPTER_NOT_READY)?;
        let ptr = f.open_ndk(p)?;
        let filed = {
            let mut open = self.open.lock();
            // Checked again under the list's lock: a parting that began meanwhile waits
            // only for adapters it can see, and must see this one.
            let still = self.function.lock().as_ref().is_some_and(|g| same(g, &f));
            let ok = still && self.state.may_open().is_ok() && open.len() < MAX_OPEN;
            if ok {
                let _ = open.push_within_capacity(Opened {
                    adapter: ptr as usize,
                    by: f.clone(),
                });
            }
            ok
        };
        if !filed {
            f.close_ndk(ptr);
            return Err(match self.state.may_open() {
                Ok(()) if self.has_function() => NDIS_STATUS_RESOURCES,
                Ok(()) => NDIS_STATUS_ADAPTER_NOT_READY,
                Err(st) => st,
            });
        }
        Ok(ptr)
    }

    /// OPEN_NDK_ADAPTER_HANDLER on the default switch and vPort.
    ///
    /// # Errors
    /// As [`NicNdk::open_ndk_adapter_with`].
    pub fn open_ndk_adapter(&self, version: NDK_VERSION) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        let p = NDIS_OPEN_NDK_ADAPTER_PARAMETERS {
            Version: version,
            SwitchId: NDIS_DEFAULT_SWITCH_ID,
            VPortId: NDIS_DEFAULT_VPORT_ID,
        };
        self.open_ndk_adapter_with(&p)
    }

    /// CLOSE_NDK_ADAPTER_HANDLER (PASSIVE_LEVEL): forwarded to the function that opened it,
    /// here or gone; a pointer this adapter did not hand out, or already closed, is ignored.
    pub fn close_ndk_adapter(&self, adapter: *mut NDK_ADAPTER) {
        let found = {
            let mut open = self.open.lock();
            open.iter()
                .position(|o| o.adapter == adapter as usize)
                .and_then(|i| {
                    let last = open.len().saturating_sub(1);
                    open.swap(i, last);
                    open.pop()
                })
        };
        if let Some(o) = found {
            o.by.close_ndk(adapter);
        }
    }

    /// The four NDK OIDs (ndkpi.md §6.6); `None` for any other OID. Without a function the
    /// statistics are zero and the lists empty.
    pub fn query_oid(&self, oid: NDIS_OID, buf: &mut [u8]) -> Option<OidResult> {
        let f = self.function.lock().clone();
        Some(match oid {
            OID_NDK_STATISTICS => {
                let c = f.as_ref().map(|f| f.statistics()).unwrap_or_default();
                let info = statistics_info_bytes(&c);
                object_query(buf, STATISTICS_INFO_LEN, |out| out.copy_from_slice(&info))
            }
            OID_NDK_CONNECTIONS => match f {
                Some(f) => f.connections(buf),
                None => super::super::lists::connections(None, buf),
            },
            OID_NDK_LOCAL_ENDPOINTS => match f {
                Some(f) => f.local_endpoints(buf),
                None => super::super::lists::local_endpoints(None, buf),
            },
            _ => return None,
        })
    }

    /// OID_NDK_SET_STATE (one BOOLEAN, never pends; ndkpi.md §6.6); `None` for any other
    /// OID.
    pub fn set_oid(&self, oid: NDIS_OID, buf: &[u8]) -> Option<OidResult> {
        if oid != OID_NDK_SET_STATE {
            return None;
        }
        let [b] = buf else {
            return Some(OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 1));
        };
        let enable = match b {
            0 => false,
            1 => true,
            _ => return Some(OidResult::needs(NDIS_STATUS_INVALID_DATA, 1)),
        };
        Some(match self.state.set(enable) {
            Ok(()) => {
                self.announce();
                OidResult::done(1)
            }
            Err(st) => OidResult::needs(st, 1),
        })
    }

    /// The interface's link changed (IRQL ≤ DISPATCH_LEVEL, no lock held): told to the
    /// function, once per change.
    pub fn link_changed(&self, up: bool) {
        let changed = {
            let mut l = self.link_up.lock();
            let changed = *l != up;
            *l = up;
            changed
        };
        let f = self.function.lock().clone();
        if let (true, Some(f)) = (changed, f) {
            f.link_changed(up);
        }
    }

    /// The link as last told.
    pub fn link_up(&self) -> bool {
        *self.link_up.lock()
    }

    /// The interface's MAC changed.
    pub fn mac_changed(&self, mac: Mac) {
        self.iface.lock().mac = mac;
        let f = self.function.lock().clone();
        if let Some(f) = f {
            f.mac_changed(mac);
        }
    }

    /// Surprise removal of the Ethernet function: the interface is gone, so every NDK
    /// object learns it (DEVICE_FATAL) before NDIS closes the adapters and halts.
    pub fn surprise_removed(&self) {
        let f = self.function.lock().clone();
        if let Some(f) = f {
            f.device_failed();
        }
    }

    /// Halt of the Ethernet adapter (before or after the registry parted it): no open, no
    /// event; the events sink is let go.
    pub fn halt(&self) {
        self.state.move_to(Lifecycle::Halted);
        self.set_events(None);
    }

    fn copy_capabilities(&self, f: &dyn RdmaFunction) {
        let (caps, info) = f.capabilities();
        let mut b = self.block.lock();
        if b.filled {
            return;
        }
        b.info = info;
        b.caps = caps;
        b.caps.NdkInfo = core::ptr::from_mut(&mut b.info);
        b.filled = true;
    }
}

/// The capabilities before a function has joined: all limits 0 (with `Enabled` FALSE).
fn empty_caps() -> NDIS_NDK_CAPABILITIES {
    NDIS_NDK_CAPABILITIES {
        Header: NDIS_OBJECT_HEADER {
            Type: NDIS_OBJECT_TYPE_DEFAULT,
            Revision: NDIS_NDK_CAPABILITIES_REVISION_1,
            Size: NDIS_SIZEOF_NDK_CAPABILITIES_REVISION_1,
        },
        Flags: 0,
        MaxQpCount: 0,
        MaxCqCount: 0,
        MaxMrCount: 0,
        MaxPdCount: 0,
        MaxInboundReadLimit: 0,
        MaxOutboundReadLimit: 0,
        MaxMwCount: 0,
        MaxSrqCount: 0,
        MissingCounterMask: 0,
        NdkInfo: core::ptr::null_mut(),
    }
}

fn empty_info() -> NDK_ADAPTER_INFO {
    NDK_ADAPTER_INFO {
        Version: NDK_VERSION { Major: 0, Minor: 0 },
        VendorId: 0,
        DeviceId: 0,
        MaxRegistrationSize: 0,
        MaxWindowSize: 0,
        FRMRPageCount: 0,
        MaxInitiatorRequestSge: 0,
        MaxReceiveRequestSge: 0,
        MaxReadRequestSge: 0,
        MaxTransferLength: 0,
        MaxInlineDataSize: 0,
        MaxInboundReadLimit: 0,
        MaxOutboundReadLimit: 0,
        MaxReceiveQueueDepth: 0,
        MaxInitiatorQueueDepth: 0,
        MaxSrqDepth: 0,
        MaxCqDepth: 0,
        LargeRequestThreshold: 0,
        MaxCallerData: 0,
        MaxCalleeData: 0,
        AdapterFlags: 0,
        RdmaTechnology: crate::ndkpi::NDK_RDMA_TECHNOLOGY(0),
    }
}

fn same(a: &Arc<dyn RdmaFunction>, b: &Arc<dyn RdmaFunction>) -> bool {
    core::ptr::eq(Arc::as_ptr(a).cast::<()>(), Arc::as_ptr(b).cast::<()>())
}

impl PairedNic for NicNdk {
    /// Records the join for the work item ([`NicNdk::run_deferred`]) and kicks it: this
    /// runs on an InitializeEx's stack, which the connection engine's start must stay off.
    fn joined(&self, rdma: Arc<dyn RdmaFunction>) {
        if self.state.lifecycle() == Lifecycle::Halted {
            return;
        }
        let old = self.deferred.lock().join.replace(rdma);
        drop(old);
        self.announce();
    }

    fn parting(&self, rdma: &Arc<dyn RdmaFunction>) {
        // A join the work item has not taken yet: cancelled (the run that finds nothing does
        // nothing). One it is running: waited for, then undone below like any other.
        let cancelled = {
            let mut d = self.deferred.lock();
            match &d.join {
                Some(j) if same(j, rdma) => d.join.take(),
                _ => None,
            }
        };
        drop(cancelled);
        let deferred = &self.deferred;
        let done = || {
            !deferred
                .lock()
                .running
                .as_ref()
                .is_some_and(|r| same(r, rdma))
        };
        if !done() && !self.platform.wait_until(&done, JOIN_WAIT_NS) {
            let mut d = self.deferred.lock();
            if d.running.as_ref().is_some_and(|r| same(r, rdma)) {
                // Still attaching after the wait: the work item undoes its own attach when it
                // finishes (it never offers NDK), and the function keeps what it needs.
                d.cancelled = true;
                return;
            }
        }
        let was = {
            let mut f = self.function.lock();
            match f.as_ref() {
                Some(g) if same(g, rdma) => f.take(),
                _ => None,
            }
        };
        if was.is_none() {
            // It never got as far as offering NDK (its attach failed): nothing to undo.
            return;
        }
        if self.state.set_present(false) {
            self.announce();
        }
        let mine = |o: &Opened| same(&o.by, rdma);
        if self.open.lock().iter().any(mine) {
            rdma.device_failed();
            let open = &self.open;
            self.platform
                .wait_until(&|| !open.lock().iter().any(mine), self.grace_ns);
        }
        rdma.detach_interface();
    }
}
