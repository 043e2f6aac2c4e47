//! The per-adapter connection engine: the sans-IO connection manager ([`crate::cm::Cm`]) joined
//! to QP1, the GID table, the address resolver, a timer and the NDK connector and listener
//! objects (the "how the NDK layer drives it" contract of the `cm` module docs).
//!
//! One [`CmEngine`] per [`NdkDevice`](crate::ndk::NdkDevice), started at PASSIVE_LEVEL once the device runs
//! ([`super::start`]) and stopped before it goes
//! ([`NdkDevice::stop_connections`](crate::ndk::NdkDevice::stop_connections)):
//! - **GIDs**: one RoCEv2 GID per unicast address of the interface (IPv4 v4-mapped, IPv6 as
//!   is) in the device's GID table, kept current by the resolver's address events.
//! - **Inputs** (consumer calls, QP1 receives, the timer DPC) all run
//!   `lock; cm.<input>(now, ..); unlock; pump`. The pump takes the CM's queued actions one
//!   at a time and performs each with no lock held; one thread pumps at a time (a second
//!   input leaves its actions to the thread already pumping), so the actions of one
//!   connection are performed in the order the CM queued them.
//! - **Actions**: `Send` goes out on QP1 from the GID of the path's local address to the
//!   MAC the neighbour cache holds for the peer (filled by resolutions and by received
//!   MADs' source MACs); `ModifyQp` and `Deliver` go to the connection's connector, which
//!   serializes them behind its MODIFY_QPs in flight ([`super::connector`]); `Deliver` of a
//!   `ConnectRequest` makes the passive connector and hands it to its listener.
//! - **Timer**: an [`crate::os::Timer`] DPC set to [`Cm::next_timer`] after every input. The
//!   CM counts time in nanoseconds of [`Platform::now_ns`].
//! - **Endpoints**: every local address:port in use (connectors, listeners, shared
//!   endpoints), with ephemeral ports 49152–65535 handed out cyclically and returned when
//!   their last user closes (ndkpi.md §5.10, §5.11).
#![deny(unsafe_code)]

use alloc::boxed::Box;
use alloc::sync::{Arc, Weak};
use core::net::{IpAddr, SocketAddr};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::conn_stats::{ConnCounters, ConnStats, EndpointRole};
use super::connector::Connector;
use super::listener::Listener;
use super::qp1::{MAD_LEN, MadPath, MadSink, MadSource, Qp1, Qp1Config};
use crate::cm::addr::{Gid, gid_from_ip, ip_from_gid};
use crate::cm::limits::ReadLimits;
use crate::cm::{Action, Cm, CmConfig, CmError, ConnId, Event, ListenerId};
use crate::ndk::error::{NdkError, NdkResult};
use crate::ndk::object::{ObjRef, try_vec};
use crate::os::net::{AddressEvents, AddressResolver, Mac};
use crate::os::{DpcHandler, Platform, SpinLock, Timer};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::verbs::{Done, Verbs};

/// GID table entries the engine uses (the model's and the device's default table holds 16).
pub const MAX_GIDS: usize = 16;
/// Neighbours remembered (IP → MAC); the oldest entry makes room.
const NEIGHBOURS: usize = 64;
/// Local endpoints in use at once (connectors, listeners, shared endpoints).
pub const ENDPOINTS: usize = 1024;
/// The IANA dynamic range NdkConnect and NdkListen take port 0 from (ndkpi.md §5.10).
const EPHEMERAL_FIRST: u16 = 49152;
const EPHEMERAL_COUNT: u32 = 65536 - EPHEMERAL_FIRST as u32;
/// Tries of a release refused for a full action queue.
const RELEASE_TRIES: u32 = 10_000;
/// Bound on a PASSIVE_LEVEL wait for a GID command at start or stop.
const COMMAND_WAIT_NS: u64 = 10_000_000_000;

/// The engine's fixed parameters.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Connection slots (every state, TIMEWAIT included).
    pub capacity: usize,
    /// Listeners at once.
    pub listeners: usize,
    /// The adapter's node GUID (REQ/REP Local CA GUID).
    pub ca_guid: u64,
    /// Random at each start: communication IDs, transaction IDs and PSNs derive from it.
    pub seed: u32,
    /// QP1's queues.
    pub qp1: Qp1Config,
    /// Path MTU code of every connection this side starts, and the largest it accepts
    /// (3 = 1024, Linux's; the miniport sets the operational `*NetworkDirectRoCEFrameSize`).
    pub path_mtu: u8,
    /// REQ CM Response Timeout of the connections this side starts (rdma_cm: 20, 4.3 s):
    /// with twice the packet lifetime, the wait before each REQ, REP or DREQ retransmission.
    pub cm_response_timeout: u8,
    /// REQ Max CM Retries of the connections this side starts (rdma_cm: 15): a REQ, and the
    /// DREQ of such a connection, goes out 1 + this many times before STATUS_IO_TIMEOUT.
    pub max_cm_retries: u8,
}

impl EngineConfig {
    /// 256 connections, 64 listeners, QP1 of 64 + 64 MADs, path MTU 1024.
    pub const fn new(ca_guid: u64, seed: u32) -> Self {
        EngineConfig {
            capacity: 256,
            listeners: 64,
            ca_guid,
            seed,
            qp1: Qp1Config {
                recv_depth: 64,
                send_depth: 64,
            },
            path_mtu: 3,
            cm_response_timeout: 20,
            max_cm_retries: 15,
        }
    }
}

/// Transport retries of every connection (the IB maximum).
pub const RETRY_COUNT: u8 = 7;
/// RNR retries (6: 7 would retry forever, and a send with no receive posted must fail).
pub const RNR_RETRY_COUNT: u8 = 6;
/// Minimum RNR NAK timer (code 12: 0.64 ms, Linux's default).
pub const MIN_RNR_TIMER: u8 = 12;

/// What the engine counted (diagnostics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// MADs received and handed to the CM.
    pub mads_in: u64,
    /// MADs the CM dropped.
    pub mads_dropped: u64,
    /// MADs sent on QP1.
    pub mads_out: u64,
    /// MADs not sent: no MAC or GID for the path, or QP1 full.
    pub mads_unsent: u64,
    /// Releases that never found room in the action queue (their slots stay owned).
    pub release_failures: u64,
}

#[derive(Default)]
struct Counters {
    mads_in: AtomicU64,
    mads_dropped: AtomicU64,
    mads_out: AtomicU64,
    mads_unsent: AtomicU64,
    release_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

#[derive(Clone, Copy)]
struct Endpoint {
    ip: IpAddr,
    port: u16,
    role: EndpointRole,
}

struct Endpoints {
    slots: Box<[Option<Endpoint>]>,
    /// Next ephemeral port tried (offset from [`EPHEMERAL_FIRST`]).
    cursor: u32,
}

impl Endpoints {
    fn overlaps(&self, ip: IpAddr, port: u16) -> bool {
        // An unspecified IPv6 address stands for both families (as a dual-stack bind).
        let covers =
            |a: IpAddr, b: IpAddr| a == b || (a.is_unspecified() && (a.is_ipv6() || b.is_ipv4()));
        self.slots
            .iter()
            .flatten()
            .any(|e| e.port == port && (covers(e.ip, ip) || covers(ip, e.ip)))
    }

    fn reserve(&mut self, ip: IpAddr, port: u16, role: EndpointRole) -> NdkResult<u16> {
        let free = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(NdkError::InsufficientResources)?;
        let port = if port != 0 {
            if self.overlaps(ip, port) {
                return Err(NdkError::SharingViolation);
            }
            port
        } else {
            let mut found = None;
            for i in 0..EPHEMERAL_COUNT {
                let off = self.cursor.wrapping_add(i) % EPHEMERAL_COUNT;
                // CAST: off < 16384, so the sum stays below 65536.
                let candidate = EPHEMERAL_FIRST + off as u16;
                if !self.overlaps(ip, candidate) {
                    self.cursor = off.wrapping_add(1) % EPHEMERAL_COUNT;
                    found = Some(candidate);
                    break;
                }
            }
            found.ok_or(NdkError::TooManyAddresses)?
        };
        if let Some(slot) = self.slots.get_mut(free) {
            *slot = Some(Endpoint { ip, port, role });
        }
        Ok(port)
    }

    fn release(&mut self, ip: IpAddr, port: u16) {
        if let Some(slot) = self
            .slots
            .iter_mut()
            .find(|s| s.is_some_and(|e| e.ip == ip && e.port == port))
        {
            *slot = None;
        }
    }

    fn in_use(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

struct Neighbours {
    /// `NEIGHBOURS` slots, allocated at start: inline, the engine's literal was several KiB
    /// of stack (moved more than once in a debug build, which overran the kernel stack).
    entries: Box<[Option<(IpAddr, Mac)>]>,
    next: usize,
}

impl Neighbours {
    fn learn(&mut self, ip: IpAddr, mac: Mac) {
        if let Some(e) = self.entries.iter_mut().flatten().find(|(i, _)| *i == ip) {
            e.1 = mac;
            return;
        }
        let at = self.next % NEIGHBOURS;
        if let Some(slot) = self.entries.get_mut(at) {
            *slot = Some((ip, mac));
        }
        self.next = at.wrapping_add(1);
    }

    fn lookup(&self, ip: IpAddr) -> Option<Mac> {
        self.entries
            .iter()
            .flatten()
            .find(|(i, _)| *i == ip)
            .map(|(_, m)| *m)
    }
}

/// (local, remote) of one connection.
type FourTuple = (SocketAddr, SocketAddr);

/// Objects by key, in slots allocated at start.
type Table<K, T> = Box<[Option<(K, ObjRef<T>)>]>;

/// Pump states (as QP1's poller): nobody pumps; one pumps; one pumps and more came.
const IDLE: u8 = 0;
const BUSY: u8 = 1;
const AGAIN: u8 = 2;

/// The connection engine of one device (see the module docs).
pub struct CmEngine {
    me: SpinLock<Weak<CmEngine>>,
    platform: Arc<dyn Platform>,
    hw: Arc<Verbs>,
    resolver: Arc<dyn AddressResolver>,
    cfg: EngineConfig,
    cm: SpinLock<Cm>,
    qp1: SpinLock<Option<Qp1>>,
    gids: SpinLock<[Option<IpAddr>; MAX_GIDS]>,
    neighbours: SpinLock<Neighbours>,
    /// The connector of each live connection, by communication ID.
    conns: SpinLock<Table<ConnId, Connector>>,
    listeners: SpinLock<Table<ListenerId, Listener>>,
    endpoints: SpinLock<Endpoints>,
    /// (local, remote) of every connect through a shared endpoint (ndkpi.md §5.10's
    /// 4-tuple rule; a connector's own endpoint is unique by itself).
    tuples: SpinLock<Box<[Option<FourTuple>]>>,
    timer: SpinLock<Option<Timer>>,
    pump_state: AtomicU8,
    psn: AtomicU32,
    stopped: AtomicBool,
    counters: Counters,
    /// The NDIS connection counters (ndkpi.md §6.6).
    conn_stats: ConnStats,
}

impl crate::ndk::adapter::Connections for CmEngine {
    fn stop(&self) {
        CmEngine::stop(self);
    }
}

struct Sink(Weak<CmEngine>);

impl MadSink for Sink {
    fn mad(&self, from: &MadSource, mad: &[u8; MAD_LEN]) {
        if let Some(e) = self.0.upgrade() {
            e.on_mad(from, mad);
        }
    }
}

struct Tick(Weak<CmEngine>);

impl DpcHandler for Tick {
    fn run(&self) {
        if let Some(e) = self.0.upgrade() {
            e.on_timer();
        }
    }
}

struct Addresses(Weak<CmEngine>);

impl AddressEvents for Addresses {
    fn added(&self, ip: IpAddr) {
        if let Some(e) = self.0.upgrade() {
            e.bind_address(ip, None);
        }
    }
    fn removed(&self, ip: IpAddr) {
        if let Some(e) = self.0.upgrade() {
            e.unbind_address(ip, None);
        }
    }
}

/// Runs one asynchronous seam command and waits for it (PASSIVE_LEVEL).
fn wait_for(platform: &dyn Platform, issue: impl FnOnce(Done<()>)) -> Result<(), PvrdmaError> {
    let cell: Arc<SpinLock<Option<Result<(), PvrdmaError>>>> =
        crate::os::alloc::try_arc(SpinLock::new(None)).map_err(|_| PvrdmaError::NoMemory)?;
    let c2 = cell.clone();
    let done = crate::os::alloc::try_box(move |r: Result<(), PvrdmaError>| *c2.lock() = Some(r))
        .map_err(|_| PvrdmaError::NoMemory)?
        .map_box(|b| b as Done<()>)
        .into_inner();
    issue(done);
    platform.wait_until(&|| cell.lock().is_some(), COMMAND_WAIT_NS);
    let r = cell.lock().take();
    r.unwrap_or(Err(PvrdmaError::Timeout))
}

/// A boxed seam completion (IRQL ≤ DISPATCH_LEVEL: non-paged pool).
pub(crate) fn hw_done<T: 'static>(
    f: impl FnOnce(Result<T, PvrdmaError>) + Send + 'static,
) -> Option<Done<T>> {
    crate::os::alloc::try_box(f)
        .ok()
        .map(|b| b.map_box(|b| b as Done<T>).into_inner())
}

impl CmEngine {
    /// Opens QP1, binds a GID for each unicast address of the interface and starts watching
    /// the addresses (PASSIVE_LEVEL: allocates and waits for the device).
    ///
    /// # Errors
    /// What QP1, the CM or an allocation reported; what was made is undone.
    pub fn start(
        platform: Arc<dyn Platform>,
        hw: Arc<Verbs>,
        resolver: Arc<dyn AddressResolver>,
        cfg: EngineConfig,
    ) -> Result<Arc<CmEngine>, PvrdmaError> {
        let caps = *hw.caps();
        let clamp = |v: u32| u8::try_from(v).unwrap_or(u8::MAX);
        let mut cm_cfg = CmConfig::rdma_cm_defaults(cfg.capacity, cfg.ca_guid, cfg.seed);
        cm_cfg.listeners = cfg.listeners;
        cm_cfg.max_path_mtu = cfg.path_mtu;
        cm_cfg.cm_response_timeout = cfg.cm_response_timeout;
        cm_cfg.max_cm_retries = cfg.max_cm_retries;
        cm_cfg.adapter_max =
            ReadLimits::new(clamp(caps.max_qp_rd_atom), clamp(caps.max_qp_init_rd_atom));
        let cm = Cm::new(cm_cfg).map_err(|_| PvrdmaError::NoMemory)?;
        let nr = |_| PvrdmaError::NoMemory;
        let conns = try_vec(cfg.capacity, || None).map_err(|_| PvrdmaError::NoMemory)?;
        let listeners = try_vec(cm_cfg.listeners, || None).map_err(|_| PvrdmaError::NoMemory)?;
        let endpoints = try_vec(ENDPOINTS, || None).map_err(|_| PvrdmaError::NoMemory)?;
        let tuples = try_vec(ENDPOINTS, || None).map_err(|_| PvrdmaError::NoMemory)?;
        let neighbour_slots = try_vec(NEIGHBOURS, || None).map_err(|_| PvrdmaError::NoMemory)?;
        let engine = crate::os::alloc::try_arc(CmEngine {
            me: SpinLock::new(Weak::new()),
            platform: platform.clone(),
            hw: hw.clone(),
            resolver: resolver.clone(),
            cfg,
            cm: SpinLock::new(cm),
            qp1: SpinLock::new(None),
            gids: SpinLock::new([None; MAX_GIDS]),
            neighbours: SpinLock::new(Neighbours {
                entries: neighbour_slots,
                next: 0,
            }),
            conns: SpinLock::new(conns),
            listeners: SpinLock::new(listeners),
            endpoints: SpinLock::new(Endpoints {
                slots: endpoints,
                cursor: cfg.seed % EPHEMERAL_COUNT,
            }),
            tuples: SpinLock::new(tuples),
            timer: SpinLock::new(None),
            pump_state: AtomicU8::new(IDLE),
            psn: AtomicU32::new(cfg.seed.rotate_left(11)),
            stopped: AtomicBool::new(false),
            counters: Counters::default(),
            conn_stats: ConnStats::default(),
        })
        .map_err(nr)?;
        *engine.me.lock() = Arc::downgrade(&engine);
        let tick: Arc<dyn DpcHandler> =
            crate::os::alloc::try_arc(Tick(Arc::downgrade(&engine))).map_err(nr)?;
        let timer = Timer::new(platform.scheduler(), tick).map_err(nr)?;
        *engine.timer.lock() = Some(timer);
        let sink: Arc<dyn MadSink> =
            crate::os::alloc::try_arc(Sink(Arc::downgrade(&engine))).map_err(nr)?;
        let qp1 = Qp1::open(hw.clone(), cfg.qp1, sink)?;
        *engine.qp1.lock() = Some(qp1);
        let mut addrs = [IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED); MAX_GIDS];
        let n = resolver.unicast_addresses(&mut addrs).min(MAX_GIDS);
        for ip in addrs.iter().take(n) {
            engine.bind_address(*ip, Some(&*platform));
        }
        let watcher: Arc<dyn AddressEvents> =
            crate::os::alloc::try_arc(Addresses(Arc::downgrade(&engine))).map_err(nr)?;
        resolver.watch_addresses(Some(watcher));
        Ok(engine)
    }

    /// Stops the engine (PASSIVE_LEVEL; every connector and listener is closed): address
    /// events stop, QP1 is flushed and destroyed, every GID is unbound.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.resolver.watch_addresses(None);
        if let Some(t) = self.timer.lock().take() {
            t.cancel();
        }
        let qp1 = self.qp1.lock().take();
        if let Some(q) = qp1 {
            let _ = q.close();
        }
        let mut bound = [None; MAX_GIDS];
        bound.copy_from_slice(&*self.gids.lock());
        for ip in bound.iter().flatten() {
            self.unbind_address(*ip, Some(&*self.platform));
        }
    }

    /// The platform (time, DPCs).
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.platform
    }

    /// The hardware.
    pub fn hw(&self) -> &Arc<Verbs> {
        &self.hw
    }

    /// The resolver.
    pub fn resolver(&self) -> &Arc<dyn AddressResolver> {
        &self.resolver
    }

    /// The fixed parameters.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// A counted handle to this engine (for completions that outlive a call).
    pub(crate) fn handle(&self) -> Option<Arc<CmEngine>> {
        self.weak().upgrade()
    }

    fn weak(&self) -> Weak<CmEngine> {
        self.me.lock().clone()
    }

    /// The counters.
    pub fn stats(&self) -> EngineStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            mads_in: l(&c.mads_in),
            mads_dropped: l(&c.mads_dropped),
            mads_out: l(&c.mads_out),
            mads_unsent: l(&c.mads_unsent),
            release_failures: l(&c.release_failures),
        }
    }

    /// Connections the CM holds (TIMEWAIT included), connectors registered, listeners and
    /// local endpoints in use (leak checks).
    pub fn live(&self) -> (usize, usize, usize, usize) {
        let held = self.cm.lock().live_connections();
        let conns = self.conns.lock().iter().flatten().count();
        let listeners = self.listeners.lock().iter().flatten().count();
        let endpoints = self.endpoints.lock().in_use();
        (held, conns, listeners, endpoints)
    }

    /// The GIDs bound now, by table index.
    pub fn bound_gids(&self) -> [Option<IpAddr>; MAX_GIDS] {
        *self.gids.lock()
    }

    // ----- addresses -----

    /// Binds `ip`'s GID at the first free index. With `wait` (PASSIVE_LEVEL) the command is
    /// waited for; otherwise the index is taken at once and given back if the device refuses.
    fn bind_address(&self, ip: IpAddr, wait: Option<&dyn Platform>) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        let index = {
            let mut g = self.gids.lock();
            if g.iter().flatten().any(|a| *a == ip) {
                return;
            }
            let Some(i) = g.iter().position(Option::is_none) else {
                return;
            };
            if let Some(slot) = g.get_mut(i) {
                *slot = Some(ip);
            }
            i
        };
        // CAST: index < MAX_GIDS.
        let idx = index as u32;
        let gid = gid_from_ip(ip);
        let me = self.weak();
        let undo = move |r: Result<(), PvrdmaError>| {
            if r.is_err()
                && let Some(e) = me.upgrade()
                && let Some(slot) = e.gids.lock().get_mut(index)
                && *slot == Some(ip)
            {
                *slot = None;
            }
        };
        match wait {
            Some(p) => {
                let r = wait_for(p, |d| self.hw.bind_gid(idx, gid, d));
                undo(r);
            }
            None => match hw_done(undo) {
                Some(d) => self.hw.bind_gid(idx, gid, d),
                None => {
                    if let Some(slot) = self.gids.lock().get_mut(index) {
                        *slot = None;
                    }
                }
            },
        }
    }

    fn unbind_address(&self, ip: IpAddr, wait: Option<&dyn Platform>) {
        let index = {
            let mut g = self.gids.lock();
            let Some(i) = g.iter().position(|a| *a == Some(ip)) else {
                return;
            };
            if let Some(slot) = g.get_mut(i) {
                *slot = None;
            }
            i
        };
        // CAST: index < MAX_GIDS.
        let idx = index as u32;
        let gid = gid_from_ip(ip);
        match wait {
            Some(p) => {
                let _ = wait_for(p, |d| self.hw.unbind_gid(idx, gid, d));
            }
            None => {
                if let Some(d) = hw_done(|_| {}) {
                    self.hw.unbind_gid(idx, gid, d);
                }
            }
        }
    }

    /// The GID index of `gid`, if bound.
    pub fn gid_index(&self, gid: &Gid) -> Option<u8> {
        let ip = ip_from_gid(*gid);
        let g = self.gids.lock();
        // CAST: below MAX_GIDS.
        g.iter().position(|a| *a == Some(ip)).map(|i| i as u8)
    }

    /// The first bound address of `ip`'s family (for an unspecified source address).
    pub fn local_address_like(&self, ip: IpAddr) -> Option<IpAddr> {
        let g = self.gids.lock();
        g.iter()
            .flatten()
            .find(|a| a.is_ipv4() == ip.is_ipv4())
            .copied()
    }

    /// Whether `ip` is one of the interface's bound addresses.
    pub fn is_local(&self, ip: IpAddr) -> bool {
        self.gids.lock().iter().flatten().any(|a| *a == ip)
    }

    /// Remembers `ip`'s MAC.
    pub fn learn(&self, ip: IpAddr, mac: Mac) {
        self.neighbours.lock().learn(ip, mac);
    }

    /// The MAC remembered for `ip`.
    pub fn neighbour(&self, ip: IpAddr) -> Option<Mac> {
        self.neighbours.lock().lookup(ip)
    }

    // ----- endpoints -----

    /// Reserves `ip:port` (`port` 0: an ephemeral port); returns the port.
    ///
    /// # Errors
    /// STATUS_SHARING_VIOLATION (in use), STATUS_TOO_MANY_ADDRESSES (no ephemeral port
    /// left), STATUS_INSUFFICIENT_RESOURCES (the endpoint table is full).
    pub fn reserve_endpoint(&self, ip: IpAddr, port: u16) -> NdkResult<u16> {
        self.endpoints
            .lock()
            .reserve(ip, port, EndpointRole::Connector)
    }

    /// [`Self::reserve_endpoint`] for a listener or a shared endpoint (the endpoints
    /// OID_NDK_LOCAL_ENDPOINTS lists).
    ///
    /// # Errors
    /// As [`Self::reserve_endpoint`].
    pub fn reserve_endpoint_as(&self, ip: IpAddr, port: u16, role: EndpointRole) -> NdkResult<u16> {
        self.endpoints.lock().reserve(ip, port, role)
    }

    /// Gives `ip:port` back.
    pub fn release_endpoint(&self, ip: IpAddr, port: u16) {
        self.endpoints.lock().release(ip, port);
    }

    /// Claims the 4-tuple of a connect through a shared endpoint.
    ///
    /// # Errors
    /// STATUS_ADDRESS_ALREADY_EXISTS (claimed already), STATUS_INSUFFICIENT_RESOURCES.
    pub fn claim_tuple(&self, local: SocketAddr, remote: SocketAddr) -> NdkResult<()> {
        let mut t = self.tuples.lock();
        if t.iter().flatten().any(|&(l, r)| l == local && r == remote) {
            return Err(NdkError::AddressAlreadyExists);
        }
        let slot = t
            .iter_mut()
            .find(|s| s.is_none())
            .ok_or(NdkError::InsufficientResources)?;
        *slot = Some((local, remote));
        Ok(())
    }

    /// Gives a 4-tuple back.
    pub fn release_tuple(&self, local: SocketAddr, remote: SocketAddr) {
        let mut t = self.tuples.lock();
        if let Some(slot) = t.iter_mut().find(|s| **s == Some((local, remote))) {
            *slot = None;
        }
    }

    /// 4-tuples claimed through shared endpoints (leak checks).
    pub fn tuples_in_use(&self) -> usize {
        self.tuples.lock().iter().flatten().count()
    }

    /// A fresh starting PSN (24 bits).
    pub fn next_psn(&self) -> u32 {
        let n = self.psn.fetch_add(0x9E37_79B9, Ordering::Relaxed);
        (n ^ (n >> 13)).wrapping_mul(0x85EB_CA6B) & 0x00FF_FFFF
    }

    // ----- the connector and listener tables -----

    pub(crate) fn register_conn(&self, conn: ConnId, c: &ObjRef<Connector>) -> bool {
        let mut t = self.conns.lock();
        match t.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some((conn, c.clone()));
                true
            }
            None => false,
        }
    }

    pub(crate) fn unregister_conn(&self, conn: ConnId) {
        let gone = {
            let mut t = self.conns.lock();
            t.iter_mut()
                .find(|s| s.as_ref().is_some_and(|(id, _)| *id == conn))
                .and_then(Option::take)
        };
        // The count is dropped with no lock held.
        drop(gone);
    }

    fn connector(&self, conn: ConnId) -> Option<ObjRef<Connector>> {
        let t = self.conns.lock();
        t.iter()
            .flatten()
            .find(|(id, _)| *id == conn)
            .map(|(_, c)| c.clone())
    }

    pub(crate) fn register_listener(&self, id: ListenerId, l: &ObjRef<Listener>) -> bool {
        let mut t = self.listeners.lock();
        match t.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some((id, l.clone()));
                true
            }
            None => false,
        }
    }

    pub(crate) fn unregister_listener(&self, id: ListenerId) {
        let gone = {
            let mut t = self.listeners.lock();
            t.iter_mut()
                .find(|s| s.as_ref().is_some_and(|(l, _)| *l == id))
                .and_then(Option::take)
        };
        drop(gone);
    }

    fn listener(&self, id: ListenerId) -> Option<ObjRef<Listener>> {
        let t = self.listeners.lock();
        t.iter()
            .flatten()
            .find(|(l, _)| *l == id)
            .map(|(_, l)| l.clone())
    }

    // ----- inputs -----

    /// Runs `f` on the CM under its lock, then performs what it queued (no lock held).
    pub fn input<R>(&self, f: impl FnOnce(&mut Cm, u64) -> R) -> R {
        let now = self.platform.now_ns();
        let r = f(&mut self.cm.lock(), now);
        self.pump();
        r
    }

    /// [`Cm::release`], which a full action queue can only delay: the thread pumping it
    /// empties it, so the release is retried until it fits (bounded, as a last resort the
    /// slot stays owned and is counted as leaked).
    pub fn release(&self, conn: ConnId) {
        if let Err(CmError::QueueFull) = self.input_when_room(|cm, now| cm.release(now, conn)) {
            bump(&self.counters.release_failures);
        }
    }

    /// [`Self::input`] of an input the CM refuses with [`CmError::QueueFull`] while its
    /// action queue is full, retried while the thread pumping empties it (bounded: a full
    /// queue the caller's own thread is pumping, from a consumer callback, never empties;
    /// then `QueueFull` is returned).
    pub fn input_when_room<R>(
        &self,
        mut f: impl FnMut(&mut Cm, u64) -> Result<R, CmError>,
    ) -> Result<R, CmError> {
        for _ in 1..RELEASE_TRIES {
            match self.input(&mut f) {
                Err(CmError::QueueFull) => core::hint::spin_loop(),
                r => return r,
            }
        }
        self.input(f)
    }

    /// Reads the CM under its lock (queries queue nothing).
    pub fn query<R>(&self, f: impl FnOnce(&Cm) -> R) -> R {
        f(&self.cm.lock())
    }

    fn on_mad(&self, from: &MadSource, mad: &[u8; MAD_LEN]) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        bump(&self.counters.mads_in);
        let peer = ip_from_gid(from.grh.sgid);
        self.learn(peer, from.smac);
        let path = crate::cm::Path {
            local_gid: from.grh.dgid,
            remote_gid: from.grh.sgid,
            hop_limit: 64,
            traffic_class: from.grh.traffic_class,
            flow_label: 0,
        };
        let r = self.input(|cm, now| cm.on_mad(now, &path, mad));
        if r.is_err() {
            bump(&self.counters.mads_dropped);
        }
    }

    fn on_timer(&self) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.input(|cm, now| cm.on_timer(now));
    }

    /// The CM's next queued action, taken under its lock. This, `perform` and `rearm` are
    /// out of line on purpose: inlined into the pump's loop, the optimizer kept the spin
    /// lock's import address in a register and called through it, an indirect call the CFG
    /// check (tools/pecheck.py --all-guarded) flags as unguarded.
    #[inline(never)]
    fn next_action(&self) -> Option<Action> {
        self.cm.lock().poll_action()
    }

    /// Performs every queued action, one thread at a time (see the module docs), then
    /// re-arms the timer.
    fn pump(&self) {
        loop {
            match self
                .pump_state
                .compare_exchange(IDLE, BUSY, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(AGAIN) => return,
                Err(_) => {
                    if self
                        .pump_state
                        .compare_exchange(BUSY, AGAIN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return;
                    }
                }
            }
        }
        loop {
            // One action per lock hold: a batch of 4 (a MAD each) was a 10 KiB frame in a
            // debug build, and the CM's lock is not on any data path.
            while let Some(a) = self.next_action() {
                self.perform(a);
            }
            self.rearm();
            if self
                .pump_state
                .compare_exchange(BUSY, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
            self.pump_state.store(BUSY, Ordering::Release);
        }
    }

    #[inline(never)]
    fn rearm(&self) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        let next = self.cm.lock().next_timer();
        let timer = self.timer.lock().clone();
        if let (Some(at), Some(t)) = (next, timer) {
            t.schedule_in(at.saturating_sub(self.platform.now_ns()));
        }
    }

    #[inline(never)]
    fn perform(&self, a: Action) {
        match a {
            Action::Send { conn, path, mad } => match conn.and_then(|conn| self.connector(conn)) {
                Some(c) => c.send_in_order(path, mad),
                None => self.send_mad(&path, &mad),
            },
            Action::ModifyQp {
                conn, transition, ..
            } => {
                // A connection with no connector was released: its close took the QP to
                // ERR itself.
                if let Some(c) = self.connector(conn) {
                    c.modify_in_order(transition);
                }
            }
            Action::Deliver { conn, event } => match event {
                Event::ConnectRequest { listener } => self.connect_request(conn, listener),
                e => {
                    if let Some(c) = self.connector(conn) {
                        c.deliver_in_order(e);
                    }
                }
            },
        }
    }

    /// Sends `mad` on QP1 along `path` (a lost packet to the CM if it cannot).
    pub(crate) fn send_mad(&self, path: &crate::cm::Path, mad: &[u8; MAD_LEN]) {
        let dmac = self.neighbour(ip_from_gid(path.remote_gid));
        let sgid = self.gid_index(&path.local_gid);
        let (Some(dmac), Some(sgid_index)) = (dmac, sgid) else {
            return bump(&self.counters.mads_unsent);
        };
        let mp = MadPath {
            dgid: path.remote_gid,
            dmac,
            sgid_index,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
        };
        let sent = match &*self.qp1.lock() {
            Some(q) => q.send(&mp, mad).is_ok(),
            None => false,
        };
        if sent {
            bump(&self.counters.mads_out);
        } else {
            bump(&self.counters.mads_unsent);
        }
    }

    /// A REQ passed the CM's checks for `listener`: a new connector for it goes to the
    /// listener's consumer; without one (the listener closing, no memory) the request is
    /// refused on the wire.
    fn connect_request(&self, conn: ConnId, listener: ListenerId) {
        let made = self
            .listener(listener)
            .and_then(|l| Connector::incoming(self, &l, conn).map(|c| (l, c)));
        match made {
            Some((l, c)) => l.deliver_connect(c),
            None => self.release(conn),
        }
    }
}

/// A connection OID_NDK_CONNECTIONS lists: established, or disconnecting (DREQ sent or
/// received), while its connector holds it.
fn listed(state: Option<crate::cm::State>) -> bool {
    use crate::cm::State;
    matches!(
        state,
        Some(State::Established | State::DreqSent | State::DreqRcvd)
    )
}

// ----- what NDIS reads (issue 23: OID_NDK_CONNECTIONS, OID_NDK_LOCAL_ENDPOINTS, counters) -----
impl CmEngine {
    /// The connection counters ([`super::conn_stats`]).
    pub fn conn_stats(&self) -> &ConnStats {
        &self.conn_stats
    }

    /// Calls `f(local, remote)` for every connection a connector holds that is established
    /// or disconnecting; returns how many. One consistent snapshot: the CM's lock and the
    /// connector table's (that order, as a connect registers its connector) are held
    /// throughout, so no connection changes state or appears meanwhile. `f` runs under
    /// spin locks: it must not block or call back into the engine.
    pub fn connections(&self, mut f: impl FnMut(SocketAddr, SocketAddr)) -> usize {
        let cm = self.cm.lock();
        let conns = self.conns.lock();
        let mut n = 0;
        for (id, _) in conns.iter().flatten() {
            if !listed(cm.state(*id)) {
                continue;
            }
            if let Some((local, remote)) = cm.addresses(*id) {
                f(local, remote);
                n += 1;
            }
        }
        n
    }

    /// Calls `f(local, listener)` for every listener (`true`) and shared endpoint (`false`)
    /// address in use; returns how many. One consistent snapshot under the endpoint table's
    /// lock (`f` as for [`Self::connections`]).
    pub fn local_endpoints(&self, mut f: impl FnMut(SocketAddr, bool)) -> usize {
        let e = self.endpoints.lock();
        let mut n = 0;
        for ep in e.slots.iter().flatten() {
            let listener = match ep.role {
                EndpointRole::Listener => true,
                EndpointRole::Shared => false,
                EndpointRole::Connector => continue,
            };
            f(SocketAddr::new(ep.ip, ep.port), listener);
            n += 1;
        }
        n
    }

    /// The connection counters, ActiveConnection being the connections
    /// [`Self::connections`] lists.
    pub fn conn_counters(&self) -> ConnCounters {
        // CAST: at most the connection table's capacity.
        let active = self.connections(|_, _| {}) as u64;
        self.conn_stats.snapshot(active)
    }
}
