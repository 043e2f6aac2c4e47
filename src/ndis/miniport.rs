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

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::abi::*;
use super::attributes::{GeneralAttributes, mac_from_registers};
use super::caps::NdisBlock;
use super::config::{
    ConfigEvent, ConfigEvents, EmptyRegistry, KW_PAIRED, Keywords, Registry, mtu_code,
    operational_mtu,
};
use super::counters::CounterSource;
use super::link::{LinkHook, LinkState, StatusSink, port_speed_bps};
use super::state::{Lifecycle, NdkState};
use crate::ndk::NdkDevice;
use crate::ndk::adapter::Adapter;
use crate::ndk::object::ObjRef;
use crate::ndkpi::{NDK_ADAPTER, NDK_VERSION};
use crate::os::alloc::try_arc;
use crate::os::{Platform, SpinLock};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{CreateBind, DEFAULT_TIMEOUT_NS, QueryPort};
use crate::pvrdma::device::{Device, DeviceConfig, DeviceEvents};
use crate::pvrdma::eqe::EqeType;
use crate::pvrdma::regs::{self, Ctl, IMR_ALL_MASKED};
use crate::pvrdma::verbs::Verbs;

pub use super::oid::OidResult;
pub use super::resources::{MemRange, Resources, parse_resources};

/// How long Halt waits for NDK_ADAPTERs NDIS left open to close after DEVICE_FATAL.
pub const HALT_GRACE_NS: u64 = 5_000_000_000;

/// What InitializeEx read from the registry ([`super::config`]), and Halt's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniportConfig {
    /// The keywords, validated.
    pub keywords: Keywords,
    /// What reading them found wrong (each is logged; none fails InitializeEx).
    pub events: ConfigEvents,
    /// Halt's wait for adapters left open.
    pub halt_grace_ns: u64,
    /// The device command timeout.
    pub cmd_timeout_ns: u64,
    /// The function is one half of a paired slot (`super::pair`): it registers no NDK of its
    /// own (`Enabled` FALSE, OID_NDK_SET_STATE cannot enable it) and serves the Ethernet
    /// function's through `super::pair::RdmaFunction`.
    pub paired: bool,
}

impl Default for MiniportConfig {
    fn default() -> Self {
        MiniportConfig::from_registry(&EmptyRegistry)
    }
}

impl MiniportConfig {
    /// The configuration the adapter's registry keywords give.
    pub fn from_registry(reg: &dyn Registry) -> Self {
        let mut events = ConfigEvents::default();
        let keywords = Keywords::read(reg, &mut events);
        MiniportConfig {
            keywords,
            events,
            halt_grace_ns: HALT_GRACE_NS,
            cmd_timeout_ns: DEFAULT_TIMEOUT_NS,
            // Read after the four keywords; any value but 0 pairs.
            paired: reg.integer(KW_PAIRED).is_some_and(|v| v != 0),
        }
    }

    /// The defaults with `*NetworkDirect` = `enabled`.
    pub fn network_direct(enabled: bool) -> Self {
        let mut c = MiniportConfig::default();
        c.keywords.network_direct = enabled;
        c
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
    /// What NDIS holds pointers to (capabilities, adapter info, PM capabilities), for the
    /// adapter's life (§6.4).
    ndis: Box<NdisBlock>,
    mac: [u8; 6],
    keywords: Keywords,
    /// InitializeEx's configuration events (the FFI layer logs them).
    events: ConfigEvents,
    /// The RoCE path MTU in use (bytes): REQ/REP, RTR, CREATE_BIND.
    roce_mtu: u32,
    /// The port's speed at InitializeEx (QUERY_PORT), the link's maximum.
    port_speed_bps: u64,
    link: SpinLock<LinkState>,
    /// Bumped by every port event; a QUERY_PORT answer older than the last event is dropped.
    link_generation: AtomicU64,
    status_sink: SpinLock<Option<Arc<dyn StatusSink>>>,
    /// The NDK_ADAPTERs opened and not yet closed (a memory count each: the close count is
    /// the consumer's, taken back by the close).
    open: SpinLock<Vec<ObjRef<Adapter>>>,
    packet_filter: AtomicU32,
    lookahead: AtomicU32,
    halt_grace_ns: u64,
    /// The interface the paired Ethernet function attached (`super::rdma`).
    pub(super) iface: SpinLock<Option<super::pair::NetInterface>>,
    /// UNQUIESCE writes after a link up that the device refused (ERR ≠ 0).
    pub(super) unquiesce_failures: AtomicU64,
    /// The connection engine's parameters, when set ([`Miniport::set_engine_config`]).
    engine_config: SpinLock<Option<crate::ndk::connect::EngineConfig>>,
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
        // The port: link state and speed, and the MTU it carries (pvrdma.md M41).
        let mut events = cfg.events;
        let keywords = cfg.keywords;
        let (link, port_mtu_code, port_speed) = match dev.cmd().execute(&QueryPort { port_num: 1 })
        {
            Ok(p) => (
                LinkState::from_port(&p),
                p.active_mtu,
                port_speed_bps(p.active_width, p.active_speed).unwrap_or(NDIS_LINK_SPEED_UNKNOWN),
            ),
            Err(_) => {
                events.push(ConfigEvent::PortQueryFailed);
                (LinkState::UNKNOWN, 0, NDIS_LINK_SPEED_UNKNOWN)
            }
        };
        let roce_mtu = operational_mtu(
            keywords.roce_frame_size,
            port_mtu_code,
            keywords.ethernet_mtu(),
        );
        if roce_mtu != keywords.roce_frame_size {
            events.push(ConfigEvent::OperationalMtu {
                configured: keywords.roce_frame_size,
                operational: roce_mtu,
            });
        }
        // Before any GID is bound: every CREATE_BIND carries the operational MTU.
        dev.set_gid_mtu(roce_mtu);
        let hw = Verbs::new(dev.clone()).map_err(|_| NDIS_STATUS_RESOURCES)?;
        let ndk = NdkDevice::new(hw.clone()).map_err(|_| NDIS_STATUS_RESOURCES)?;
        let ndis = NdisBlock::new(hw.caps()).ok_or(NDIS_STATUS_RESOURCES)?;
        let bar1 = platform.bar1();
        let mac = mac_from_registers(regs::MACL.read(bar1), regs::MACH.read(bar1));
        let m = try_arc(Miniport {
            resources: *res,
            stack: SpinLock::new(Some(Stack {
                ndk: ndk.clone(),
                hw,
                dev: dev.clone(),
            })),
            state: NdkState::new(keywords.network_direct && !cfg.paired),
            ndis,
            mac,
            keywords,
            events,
            roce_mtu,
            port_speed_bps: port_speed,
            link: SpinLock::new(link),
            link_generation: AtomicU64::new(0),
            status_sink: SpinLock::new(None),
            open: SpinLock::new(Vec::new()),
            packet_filter: AtomicU32::new(0),
            lookahead: AtomicU32::new(keywords.ethernet_mtu()),
            halt_grace_ns: cfg.halt_grace_ns,
            iface: SpinLock::new(None),
            unquiesce_failures: AtomicU64::new(0),
            engine_config: SpinLock::new(None),
            platform,
        })
        .map_err(|_| NDIS_STATUS_RESOURCES)?;
        // Port events reach the link from here on (DEVICE_FATAL still reaches the NDK device).
        let hook: Arc<dyn DeviceEvents> = try_arc(LinkHook {
            miniport: Arc::downgrade(&m),
            ndk: Arc::downgrade(&ndk),
        })
        .map_err(|_| NDIS_STATUS_RESOURCES)?;
        dev.set_device_events(Some(hook));
        Ok(m)
    }

    /// The resources InitializeEx was given.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// The platform the adapter runs on.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.platform
    }

    pub(super) fn ndis_block(&self) -> &NdisBlock {
        &self.ndis
    }

    /// NDIS_NDK_CAPABILITIES for NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES; it and the
    /// NDK_ADAPTER_INFO it points at live as long as the miniport.
    pub fn ndk_capabilities(&self) -> &NDIS_NDK_CAPABILITIES {
        self.ndis.caps()
    }

    /// The pointer the NDK attributes hand NDIS (valid while the miniport lives).
    pub fn ndk_capabilities_ptr(&self) -> *mut NDIS_NDK_CAPABILITIES {
        self.ndis.caps_ptr()
    }

    /// The general attributes' `PowerManagementCapabilitiesEx` (valid while the miniport
    /// lives).
    pub fn pm_capabilities_ptr(&self) -> *mut NDIS_PM_CAPABILITIES {
        self.ndis.pm_ptr()
    }

    /// What InitializeEx found wrong in the configuration, for the event log.
    pub fn config_events(&self) -> &ConfigEvents {
        &self.events
    }

    /// The keywords in effect.
    pub fn keywords(&self) -> &Keywords {
        &self.keywords
    }

    /// The RoCE path MTU in use, in bytes (`*NetworkDirectRoCEFrameSize` bounded by the port
    /// and the Ethernet MTU, [`super::config::operational_mtu`]).
    pub fn roce_mtu(&self) -> u32 {
        self.roce_mtu
    }

    /// The link as NDIS was last told.
    pub fn link(&self) -> LinkState {
        *self.link.lock()
    }

    /// Where link indications go from now on (the FFI layer installs NdisMIndicateStatusEx
    /// once InitializeEx has set the attributes). A change since the attributes is indicated
    /// at once.
    pub fn set_status_sink(&self, sink: Arc<dyn StatusSink>, reported: LinkState) {
        *self.status_sink.lock() = Some(sink.clone());
        let now = self.link();
        if now != reported {
            sink.link_state(&now);
        }
    }

    /// A device-wide event of the port (the device's async DPC).
    pub(super) fn port_event(self: &Arc<Self>, kind: EqeType) {
        let up = match kind {
            EqeType::PortActive => true,
            EqeType::PortErr => false,
            _ => return,
        };
        let generation = self
            .link_generation
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        let state = if up {
            LinkState {
                connected: true,
                speed_bps: self.port_speed_bps,
            }
        } else {
            LinkState::UNKNOWN
        };
        self.update_link(state);
        if !up {
            return;
        }
        // The speed may have changed while the port was down: ask again.
        let Some(dev) = self.device() else { return };
        let me = Arc::downgrade(self);
        let _ = dev.cmd().submit(&QueryPort { port_num: 1 }, move |r| {
            if let (Some(m), Ok(p)) = (me.upgrade(), r)
                && m.link_generation.load(Ordering::Acquire) == generation
            {
                m.update_link(LinkState::from_port(&p));
            }
        });
    }

    /// The port's speed at InitializeEx.
    pub(super) fn port_speed_bps(&self) -> u64 {
        self.port_speed_bps
    }

    /// Records `state` and indicates it if it differs from what NDIS was last told.
    pub(super) fn update_link(&self, state: LinkState) {
        let changed = {
            let mut l = self.link.lock();
            let changed = *l != state;
            *l = state;
            changed
        };
        if !changed {
            return;
        }
        let sink = self.status_sink.lock().clone();
        if let Some(s) = sink {
            s.link_state(&state);
        }
    }

    /// NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES.Enabled: whether NDK is enabled now.
    pub fn ndk_enabled(&self) -> bool {
        self.state.enabled()
    }

    /// The general attributes.
    pub fn general_attributes(&self) -> GeneralAttributes {
        GeneralAttributes::new(
            self.mac,
            self.keywords.ethernet_mtu(),
            &self.link(),
            self.port_speed_bps,
        )
    }

    /// The Ethernet MTU the adapter reports (`*JumboPacket` less the header).
    pub fn ethernet_mtu(&self) -> u32 {
        self.keywords.ethernet_mtu()
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
            .execute(&CreateBind::roce_v2(index, gid, dev.gid_mtu()))
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
        self.start_connections_as(resolver, self.mac)
    }

    /// As [`Miniport::start_connections`], with the node GUID from `mac` (the paired
    /// interface's).
    ///
    /// # Errors
    /// As [`Miniport::start_connections`].
    pub(super) fn start_connections_as(
        &self,
        resolver: Arc<dyn crate::os::net::AddressResolver>,
        m: [u8; 6],
    ) -> Result<(), NDIS_STATUS> {
        let ndk = self.ndk_device().ok_or(NDIS_STATUS_ADAPTER_NOT_READY)?;
        let guid = u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]]);
        // CAST: the low bits of the clock are the randomness wanted.
        let seed = (self.platform.now_ns() as u32) ^ (guid as u32);
        let mut cfg = (*self.engine_config.lock())
            .unwrap_or_else(|| crate::ndk::connect::EngineConfig::new(guid, seed));
        cfg.ca_guid = guid;
        // The operational RoCE MTU is one of the five IB MTUs by construction.
        cfg.path_mtu = mtu_code(self.roce_mtu).unwrap_or(cfg.path_mtu);
        crate::ndk::connect::start(&ndk, self.platform.clone(), resolver, cfg).map_err(
            |e| match e {
                PvrdmaError::NoMemory => NDIS_STATUS_RESOURCES,
                _ => NDIS_STATUS_FAILURE,
            },
        )
    }

    /// The connection engine's parameters from the next start on (capacity, listeners, QP1
    /// depths, CM timing, seed) instead of the defaults and a clock-derived seed: what a host
    /// harness sets to run every adapter alike. The node GUID and the path MTU stay the
    /// adapter's (the MAC's EUI-64, the operational RoCE MTU).
    pub fn set_engine_config(&self, cfg: crate::ndk::connect::EngineConfig) {
        *self.engine_config.lock() = Some(cfg);
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
        // NDIS's handle dies with Halt: no indication after this point.
        let sink = self.status_sink.lock().take();
        drop(sink);
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

    /// OPEN_NDK_ADAPTER_HANDLER with its NDIS 6.50 parameters: NDK on a NIC switch's vPort
    /// (NDKPI 2.0 "Mode 2", a non-default `SwitchId` or `VPortId`) is not offered, and is
    /// refused rather than opened as the native adapter (ndkpi.md §6.3).
    ///
    /// # Errors
    /// NDIS_STATUS_NOT_SUPPORTED for a non-default switch or vPort; then as
    /// [`Self::open_ndk_adapter`].
    pub fn open_ndk_adapter_with(
        &self,
        p: &NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        if p.SwitchId != NDIS_DEFAULT_SWITCH_ID || p.VPortId != NDIS_DEFAULT_VPORT_ID {
            return Err(NDIS_STATUS_NOT_SUPPORTED);
        }
        self.open_ndk_adapter(p.Version)
    }

    /// OPEN_NDK_ADAPTER_HANDLER (PASSIVE_LEVEL): {1,0}..{1,2} and {2,0}..{2,1} open at the
    /// highest minor of their major (§1.7).
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY while NDK is disabled or after Halt;
    /// NDIS_STATUS_BAD_VERSION; NDIS_STATUS_RESOURCES.
    pub fn open_ndk_adapter(&self, version: NDK_VERSION) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        self.state.may_open()?;
        self.open_filed(version, || self.state.may_open())
    }

    /// Opens an NDK_ADAPTER and files it in the list Halt waits on; `may_open` is checked
    /// again under the list's lock.
    pub(super) fn open_filed(
        &self,
        version: NDK_VERSION,
        may_open: impl Fn() -> Result<(), NDIS_STATUS>,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        let ndk = self.ndk_device().ok_or(NDIS_STATUS_ADAPTER_NOT_READY)?;
        let ptr = ndk.open_adapter(version)?;
        let adapter = borrow_opened(ptr).ok_or(NDIS_STATUS_RESOURCES)?;
        let filed = {
            let mut open = self.open.lock();
            // Checked again under the list's lock: a Halt that began meanwhile waits only
            // for adapters it can see.
            let ok = open.try_reserve(1).is_ok() && may_open().is_ok();
            if ok {
                open.push(adapter.clone());
            }
            ok
        };
        if !filed {
            adapter.close_blocking();
            return Err(match may_open() {
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
                connections: crate::ndk::connect::engine(&ndk)
                    .map(|e| e.conn_counters())
                    .unwrap_or_default(),
            },
            None => CounterSource::default(),
        }
    }

    /// The connection engine (None before it starts, after Halt, or without one).
    pub fn connection_engine(&self) -> Option<Arc<crate::ndk::connect::CmEngine>> {
        self.ndk_device()
            .and_then(|n| crate::ndk::connect::engine(&n))
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
