//! One PVRDMA miniport adapter, portable: what the NDIS handlers do once the FFI layer
//! (`ndis/entry.rs`) has marshalled their arguments (ndkpi.md §6.1).
//!
//! - [`Miniport::initialize`]: bring-up through the hardware layer on an already-built
//!   platform (the device, its hardware seam, the NDK device), then the attribute values.
//! - The NDK open/close handlers: version negotiation and the NDK_ADAPTERs this adapter
//!   handed out, each closed at most once and only if it is one of them.
//! - OID_NDK_SET_STATE and the NDK PnP events ([`super::state`]), OIDs ([`super::oid`]).
//! - Halt: opens stop; NDK_ADAPTERs NDIS left open get DEVICE_FATAL (every CQ reports
//!   STATUS_INTERNAL_ERROR, so their consumers close) and a bounded wait for their closes;
//!   then the miniport lets go of the device. Whatever is still open keeps the device (and
//!   its memory) alive, and the last close resets and frees it: Halt never waits forever
//!   and never frees memory the device or a consumer may still use.
#![deny(unsafe_code)]

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use super::abi::*;
use super::attributes::{GeneralAttributes, MAX_LOOKAHEAD, mac_from_registers};
use super::caps::{CAPS_VERSION, ndk_capabilities};
use super::counters::CounterSource;
use super::state::{Lifecycle, NdkState};
use crate::ndk::NdkDevice;
use crate::ndk::adapter::{Adapter, adapter_info};
use crate::ndk::object::ObjRef;
use crate::ndkpi::{NDK_ADAPTER, NDK_ADAPTER_INFO, NDK_VERSION};
use crate::os::alloc::try_arc;
use crate::os::{Platform, SpinLock};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{CreateBind, DEFAULT_TIMEOUT_NS};
use crate::pvrdma::device::{Device, DeviceConfig};
use crate::pvrdma::dsr::Caps;
use crate::pvrdma::regs::{self, Ctl, IMR_ALL_MASKED};
use crate::pvrdma::verbs::Verbs;

pub use super::oid::OidResult;
pub use super::resources::{MemRange, Resources, parse_resources};

/// How long Halt waits for NDK_ADAPTERs NDIS left open to close after DEVICE_FATAL.
pub const HALT_GRACE_NS: u64 = 5_000_000_000;

/// What InitializeEx read from the registry, and Halt's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniportConfig {
    /// The `*NetworkDirect` keyword ≠ 0 (its INF default is 1, §6.7).
    pub network_direct: bool,
    /// Halt's wait for adapters left open.
    pub halt_grace_ns: u64,
    /// The device command timeout.
    pub cmd_timeout_ns: u64,
}

impl Default for MiniportConfig {
    fn default() -> Self {
        MiniportConfig {
            network_direct: true,
            halt_grace_ns: HALT_GRACE_NS,
            cmd_timeout_ns: DEFAULT_TIMEOUT_NS,
        }
    }
}

/// The device, its verbs and its NDK device, dropped in that reverse order.
struct Stack {
    ndk: Arc<NdkDevice>,
    hw: Arc<Verbs>,
    dev: Arc<Device>,
}

/// One PVRDMA adapter = the MiniportAdapterContext.
pub struct Miniport {
    platform: Arc<dyn Platform>,
    resources: Resources,
    /// `None` once halted.
    stack: SpinLock<Option<Stack>>,
    state: NdkState,
    /// The device limits the verbs honour.
    caps: Caps,
    /// The NDK_ADAPTER_INFO the capabilities point at (kept for the adapter's lifetime,
    /// §6.4).
    info: NDK_ADAPTER_INFO,
    mac: [u8; 6],
    /// The NDK_ADAPTERs opened and not yet closed (a memory count each: the close count is
    /// the consumer's, taken back by the close).
    open: SpinLock<Vec<ObjRef<Adapter>>>,
    packet_filter: AtomicU32,
    lookahead: AtomicU32,
    halt_grace_ns: u64,
}

/// A bring-up failure as InitializeEx returns it.
fn bring_up_status(e: PvrdmaError) -> NDIS_STATUS {
    match e {
        PvrdmaError::NoMemory => NDIS_STATUS_RESOURCES,
        PvrdmaError::UnsupportedVersion(_) | PvrdmaError::UnsupportedDevice => {
            NDIS_STATUS_NOT_SUPPORTED
        }
        _ => NDIS_STATUS_FAILURE,
    }
}

impl Miniport {
    /// Bring-up with the default configuration ([`MiniportConfig::default`]).
    ///
    /// # Errors
    /// As [`Miniport::initialize_with`].
    pub fn initialize(
        platform: Arc<dyn Platform>,
        res: &Resources,
    ) -> Result<Arc<Miniport>, NDIS_STATUS> {
        Self::initialize_with(platform, res, &MiniportConfig::default())
    }

    /// InitializeEx's work once the BARs are mapped and the platform built over them
    /// (PASSIVE_LEVEL). Binds no GID: addresses arrive later ([`Miniport::add_gid`]).
    ///
    /// # Errors
    /// NDIS_STATUS_RESOURCES for fewer than three MSI-X messages or an allocation failure;
    /// NDIS_STATUS_NOT_SUPPORTED for a device version or caps the driver does not support;
    /// NDIS_STATUS_FAILURE when the device refuses activation. Everything brought up so far
    /// is released (the device is reset) before the error returns.
    pub fn initialize_with(
        platform: Arc<dyn Platform>,
        res: &Resources,
        cfg: &MiniportConfig,
    ) -> Result<Arc<Miniport>, NDIS_STATUS> {
        if res.message_interrupts < super::resources::MESSAGES_NEEDED {
            return Err(NDIS_STATUS_RESOURCES);
        }
        let dev = Device::probe(
            platform.clone(),
            &DeviceConfig {
                cmd_timeout_ns: cfg.cmd_timeout_ns,
                ..DeviceConfig::default()
            },
        )
        .map_err(bring_up_status)?;
        let dev = try_arc(dev).map_err(|_| NDIS_STATUS_RESOURCES)?;
        let hw = Verbs::new(dev.clone()).map_err(|_| NDIS_STATUS_RESOURCES)?;
        let ndk = NdkDevice::new(hw.clone()).map_err(|_| NDIS_STATUS_RESOURCES)?;
        let caps = *hw.caps();
        let bar1 = platform.bar1();
        let mac = mac_from_registers(regs::MACL.read(bar1), regs::MACH.read(bar1));
        try_arc(Miniport {
            resources: *res,
            stack: SpinLock::new(Some(Stack { ndk, hw, dev })),
            state: NdkState::new(cfg.network_direct),
            caps,
            info: adapter_info(&caps, CAPS_VERSION),
            mac,
            open: SpinLock::new(Vec::new()),
            packet_filter: AtomicU32::new(0),
            lookahead: AtomicU32::new(MAX_LOOKAHEAD),
            halt_grace_ns: cfg.halt_grace_ns,
            platform,
        })
        .map_err(|_| NDIS_STATUS_RESOURCES)
    }

    /// The resources InitializeEx was given.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// NDIS_NDK_CAPABILITIES for NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES; `NdkInfo` points into
    /// this miniport, valid while it lives.
    pub fn ndk_capabilities(&self) -> NDIS_NDK_CAPABILITIES {
        ndk_capabilities(&self.caps, &self.info)
    }

    /// NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES.Enabled: whether NDK is enabled now.
    pub fn ndk_enabled(&self) -> bool {
        self.state.enabled()
    }

    /// The general attributes.
    pub fn general_attributes(&self) -> GeneralAttributes {
        GeneralAttributes::new(self.mac)
    }

    /// The NDK PnP event the FFI layer's work item must issue next with NdisMNetPnPEvent,
    /// outside any OID handler (§6.5); call again until `None`.
    pub fn next_ndk_pnp_event(&self) -> Option<NET_PNP_EVENT_CODE> {
        self.state.next_event()
    }

    /// Binds `gid` at `index` of the device's GID table (CREATE_BIND, RoCEv2), for the
    /// address notifications of the connection manager. PASSIVE_LEVEL (waits for the
    /// command).
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY after Halt; NDIS_STATUS_RESOURCES or
    /// NDIS_STATUS_FAILURE when the command fails.
    pub fn add_gid(&self, index: u32, gid: [u8; 16]) -> Result<(), NDIS_STATUS> {
        let dev = self.device().ok_or(NDIS_STATUS_ADAPTER_NOT_READY)?;
        dev.cmd()
            .execute(&CreateBind::roce_v2(index, gid))
            .map_err(|e| match e {
                PvrdmaError::NoMemory | PvrdmaError::QueueFull => NDIS_STATUS_RESOURCES,
                _ => NDIS_STATUS_FAILURE,
            })
    }

    /// Starts connection management over the interface's address `resolver` (PASSIVE_LEVEL,
    /// once InitializeEx's bring-up is done): QP1, a GID per interface address, the CM. The
    /// node GUID is the port MAC's EUI-64.
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY after Halt; NDIS_STATUS_RESOURCES or
    /// NDIS_STATUS_FAILURE when the engine cannot start.
    pub fn start_connections(
        &self,
        resolver: Arc<dyn crate::os::net::AddressResolver>,
    ) -> Result<(), NDIS_STATUS> {
        let ndk = self.ndk_device().ok_or(NDIS_STATUS_ADAPTER_NOT_READY)?;
        let m = self.mac;
        let guid = u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]]);
        // CAST: the low bits of the clock are the randomness wanted.
        let seed = (self.platform.now_ns() as u32) ^ (guid as u32);
        let cfg = crate::ndk::connect::EngineConfig::new(guid, seed);
        crate::ndk::connect::start(&ndk, self.platform.clone(), resolver, cfg).map_err(
            |e| match e {
                PvrdmaError::NoMemory => NDIS_STATUS_RESOURCES,
                _ => NDIS_STATUS_FAILURE,
            },
        )
    }

    /// The NDK device (None after Halt).
    pub fn ndk_device(&self) -> Option<Arc<NdkDevice>> {
        self.stack.lock().as_ref().map(|s| s.ndk.clone())
    }

    /// The hardware device (None after Halt), for the connection manager's QP transitions.
    pub fn device(&self) -> Option<Arc<Device>> {
        self.stack.lock().as_ref().map(|s| s.dev.clone())
    }

    /// NDK_ADAPTERs open now.
    pub fn open_adapters(&self) -> usize {
        self.open.lock().len()
    }

    /// MiniportHaltEx (PASSIVE_LEVEL): see the module docs.
    pub fn halt(&self) {
        self.state.move_to(Lifecycle::Halted);
        if self.open_adapters() != 0 {
            if let Some(ndk) = self.ndk_device() {
                ndk.device_fatal();
            }
            let open = &self.open;
            self.platform
                .wait_until(&|| open.lock().is_empty(), self.halt_grace_ns);
        }
        if let Some(ndk) = self.ndk_device() {
            ndk.stop_connections();
        }
        let stack = self.stack.lock().take();
        if let Some(Stack { ndk, hw, dev }) = stack {
            drop(ndk);
            drop(hw);
            drop(dev);
        }
    }

    /// MiniportPause: nothing to stop (no NDIS data path; NDK keeps running).
    pub fn pause(&self) -> NDIS_STATUS {
        self.state.move_to(Lifecycle::Paused);
        NDIS_STATUS_SUCCESS
    }

    /// MiniportRestart.
    pub fn restart(&self) -> NDIS_STATUS {
        match self.state.move_to(Lifecycle::Running) {
            Lifecycle::Halted => NDIS_STATUS_ADAPTER_NOT_READY,
            _ => NDIS_STATUS_SUCCESS,
        }
    }

    /// MiniportShutdownEx: may run at any IRQL (a bugcheck's shutdown too), so it takes no
    /// lock and frees nothing: it masks the interrupts and resets the device, which stops
    /// its DMA (pvrdma.md §5).
    pub fn shutdown(&self) {
        let bar1 = self.platform.bar1();
        regs::IMR.write(bar1, IMR_ALL_MASKED);
        Ctl::Reset.write(bar1);
    }

    /// MiniportDevicePnPEventNotify. Surprise removal: the device is gone, so every NDK
    /// object learns it (DEVICE_FATAL) before NDIS closes the adapters and halts.
    pub fn pnp_event(&self, event: u32) {
        if event == NdisDevicePnPEventSurpriseRemoved
            && let Some(ndk) = self.ndk_device()
        {
            ndk.device_fatal();
        }
    }

    /// OPEN_NDK_ADAPTER_HANDLER (PASSIVE_LEVEL): {1,0}..{1,2} and {2,0}..{2,1} open at the
    /// highest minor of their major (§1.7).
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY while NDK is disabled or after Halt;
    /// NDIS_STATUS_BAD_VERSION; NDIS_STATUS_RESOURCES.
    pub fn open_ndk_adapter(&self, version: NDK_VERSION) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        self.state.may_open()?;
        let ndk = self.ndk_device().ok_or(NDIS_STATUS_ADAPTER_NOT_READY)?;
        let ptr = ndk.open_adapter(version)?;
        let adapter = borrow_opened(ptr).ok_or(NDIS_STATUS_RESOURCES)?;
        let filed = {
            let mut open = self.open.lock();
            // Checked again under the list's lock: a Halt that began meanwhile waits only
            // for adapters it can see.
            let ok = open.try_reserve(1).is_ok() && self.state.may_open().is_ok();
            if ok {
                open.push(adapter.clone());
            }
            ok
        };
        if !filed {
            adapter.close_blocking();
            return Err(match self.state.may_open() {
                Ok(()) => NDIS_STATUS_RESOURCES,
                Err(st) => st,
            });
        }
        Ok(ptr)
    }

    /// CLOSE_NDK_ADAPTER_HANDLER (PASSIVE_LEVEL): blocks until every object under the
    /// adapter has closed and every callback on them has returned (§6.3). A pointer this
    /// miniport did not hand out, or already closed, is ignored.
    pub fn close_ndk_adapter(&self, adapter: *mut NDK_ADAPTER) {
        let found = {
            let mut open = self.open.lock();
            open.iter()
                .position(|a| core::ptr::eq(a.ndk_ptr(), adapter))
                .map(|i| open.swap_remove(i))
        };
        if let Some(a) = found {
            a.close_blocking();
        }
    }

    pub(super) fn state(&self) -> &NdkState {
        &self.state
    }

    pub(super) fn counter_source(&self) -> CounterSource {
        match self.ndk_device() {
            Some(ndk) => CounterSource {
                traffic: ndk.traffic(),
                cq_errors: ndk.cq_errors(),
                active_connections: ndk.connected_qps(),
            },
            None => CounterSource::default(),
        }
    }

    pub(super) fn packet_filter(&self) -> u32 {
        self.packet_filter.load(Ordering::Relaxed)
    }

    pub(super) fn set_packet_filter(&self, f: u32) {
        self.packet_filter.store(f, Ordering::Relaxed);
    }

    pub(super) fn lookahead(&self) -> u32 {
        self.lookahead.load(Ordering::Relaxed)
    }

    pub(super) fn set_lookahead(&self, l: u32) {
        self.lookahead.store(l, Ordering::Relaxed);
    }
}

/// A memory count of an adapter `open_adapter` just returned.
#[allow(unsafe_code)]
fn borrow_opened(ptr: *mut NDK_ADAPTER) -> Option<ObjRef<Adapter>> {
    // SAFETY: `ptr` was returned by `NdkDevice::open_adapter` a moment ago and nobody else
    // has it yet, so it cannot have been closed.
    unsafe { ObjRef::<Adapter>::borrow(ptr) }
}
