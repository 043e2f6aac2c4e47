//! The NDK-consumer test kit: N hosts on one `pvrdma_sim::world::World` (RoCEv2 between
//! device models), each with the driver probed against its node, the NDK layer over it and
//! one open NDK_ADAPTER, and thin consumer wrappers that make every call through the
//! objects' dispatch tables (ndkpi.md §2) with `extern "system"` callbacks recording into
//! per-call context objects passed as RequestContext (no statics: tests run in parallel
//! threads; only the leak baseline is serialized by the harness lock).
//!
//! - Creates and requests wait for their completion when the provider pends (§5.1) and
//!   return the final status; `*_raw` variants return the inline status and the pending
//!   context for tests of the PENDING path itself.
//! - Closes are explicit (`close(self)`, no `Drop`), so tests control ordering; a close that
//!   pends waits for CloseCompletion and asserts it came exactly once; an inline close
//!   asserts none came.
//! - Clusters are connection-managed by default ([`ClusterConfig::cm`]), and
//!   [`Cluster::connect`] connects two QPs through NdkListen / NdkConnect / NdkAccept /
//!   NdkCompleteConnect; [`Qp::close`] and [`Cluster::finish`] part the connection with
//!   NdkDisconnect and close its connectors before the QP closes ([`links`]). [`cm_connect`]
//!   is the same exchange with the connectors and listener handed to the test. [`wire`] is
//!   the raw wiring (MODIFY_QP RTR/RTS with the peer's QPN, GID and MAC through the hardware
//!   layer, then `set_qp_connected`) for clusters built [`ClusterConfig::without_cm`].
//! - [`Cluster::finish`] closes the adapters and checks the leak invariants.
#![allow(dead_code, clippy::too_many_arguments)]

use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

use pvrdma_host::{HostDevice, HostExecutor, HostPlatform, HostTime, current_processor};
use pvrdma_ndk::ndis::pair::PairRegistry;
use pvrdma_ndk::ndis::{
    MiniportConfig, NDIS_PACKET_TYPE_BROADCAST, NDIS_PACKET_TYPE_DIRECTED,
    NDIS_PACKET_TYPE_MULTICAST, NDIS_STATUS_SUCCESS, NetEventNDKEnable,
};
use pvrdma_ndk::ndk::connect::EngineConfig;
use pvrdma_ndk::ndk::dispatch::close_adapter;
use pvrdma_ndk::ndk::object::ObjRef;
use pvrdma_ndk::ndk::{NdkDevice, set_qp_connected};
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::Platform;
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_ndk::os::clock::Clock;
use pvrdma_ndk::pvrdma::device::{Device as DrvDevice, DeviceConfig as DrvConfig};
use pvrdma_ndk::pvrdma::verbs::Verbs;
use pvrdma_sim::ObjectCounts;
use pvrdma_sim::external::UdpWire;
use pvrdma_sim::fabric::ThreadMode;
use pvrdma_sim::wire::roce::gid_from_ipv4;
use pvrdma_sim::world::{NodeConfig, VnicConfig, World};

use super::memory::{BuiltMdl, ConsumerMem};
use super::objects::{rc_rtr_rts, rts_attrs};
use super::pair::{PairedVnic, VnicSpec};
use super::vmx_ndis::Stack;
use super::{
    DEFAULT_UAR_PFN, Mode, PlatformSink, Quiescent, SETTLE_DEADLINE, SimBar1, SimDma, dpc_runs,
    serial, settle_threaded,
};

/// Bound on every wait: a hang, not a timing assertion.
const HANG: Duration = Duration::from_secs(20);
/// The same with a real peer: its guest runs under TCG on busy cores.
const HANG_WITH_REAL_PEER: Duration = Duration::from_secs(120);

// ------------------------------------------------------------------------------- waiting

/// What waits need: the world to pump (deterministic mode) and the hosts' DPC executors.
///
/// In virtual time ([`ClusterConfig::virtual_time`]) the hosts' clocks are the world's and a
/// wait moves it one event at a time ([`Pump::step_virtual`]), never while a DPC runs.
pub struct Pump {
    world: Arc<World>,
    mode: Mode,
    platforms: Mutex<Vec<Arc<HostPlatform>>>,
    /// DPC executors of other host platforms (a vmxnet3 function's, `HostNicPlatform`).
    executors: Mutex<Vec<Arc<HostExecutor>>>,
    provider_polls: Arc<AtomicU64>,
    virtual_time: bool,
    /// A real peer shares the fabric ([`ClusterConfig::real_time`]): it never goes idle, so
    /// settling waits for the hosts' models and DPCs alone, and a wait allows it longer.
    real_peer: bool,
    /// One thread moves virtual time at a time (provider waits on several threads pump).
    stepping: Mutex<()>,
    /// The hosts' executors have no threads ([`ClusterConfig::thread_free`]): every wait
    /// and settle runs their DPCs itself.
    thread_free: bool,
    me: Weak<Pump>,
    /// The kit's connections ([`Cluster::connect`]), parted when one of their QPs closes.
    links: Mutex<Vec<links::Link>>,
}

/// The world's virtual time as a host platform clock. Weak: the world must not outlive the
/// cluster through a platform; once it is gone the clock stays at its last reading.
struct WorldClock {
    world: Weak<World>,
    last: AtomicU64,
}

impl Clock for WorldClock {
    fn now_ns(&self) -> u64 {
        match self.world.upgrade() {
            Some(w) => {
                let now = w.now_ns();
                self.last.fetch_max(now, Ordering::SeqCst);
                now
            }
            None => self.last.load(Ordering::SeqCst),
        }
    }
}

impl Pump {
    /// A pump for hosts brought up outside a [`Cluster`] (the NDIS host harness brings them
    /// up through the miniport); give each host's platform [`Pump::platform_pump`] and
    /// [`Pump::add_platform`] it. Wall-clock time.
    pub fn new(world: Arc<World>, mode: Mode) -> Arc<Pump> {
        Self::with_time(world, mode, false, false, false)
    }

    fn with_time(
        world: Arc<World>,
        mode: Mode,
        virtual_time: bool,
        real_peer: bool,
        thread_free: bool,
    ) -> Arc<Pump> {
        assert!(
            !virtual_time || mode == Mode::Deterministic,
            "virtual time needs Mode::Deterministic (threaded hosts run on the wall clock)"
        );
        assert!(
            !real_peer || mode == Mode::Threaded,
            "a real peer needs Mode::Threaded (the fabric in real time)"
        );
        assert!(
            !thread_free || mode == Mode::Deterministic,
            "thread-free hosts need Mode::Deterministic (one thread drives everything)"
        );
        Arc::new_cyclic(|me| Pump {
            world,
            mode,
            platforms: Mutex::new(Vec::new()),
            executors: Mutex::new(Vec::new()),
            provider_polls: Arc::new(AtomicU64::new(0)),
            virtual_time,
            real_peer,
            stepping: Mutex::new(()),
            thread_free,
            me: me.clone(),
            links: Mutex::new(Vec::new()),
        })
    }

    /// Whether the hosts run in the world's virtual time.
    pub fn is_virtual_time(&self) -> bool {
        self.virtual_time
    }

    /// The world's virtual time (what every host's `Platform::now_ns` reads in virtual time).
    pub fn now_ns(&self) -> u64 {
        self.world.now_ns()
    }

    /// The time source for a host platform on this pump.
    pub fn host_time(&self) -> HostTime {
        if !self.virtual_time {
            return HostTime::Wall;
        }
        HostTime::Virtual(Arc::new(WorldClock {
            world: Arc::downgrade(&self.world),
            last: AtomicU64::new(0),
        }))
    }

    /// What a host platform calls while the provider waits, as [`Cluster`]'s hosts do.
    pub fn platform_pump(&self) -> Arc<dyn Fn() + Send + Sync> {
        let polls = self.provider_polls.clone();
        match self.mode {
            Mode::Deterministic if self.virtual_time => {
                // Weak: the platforms the pump holds hold this closure.
                let me = self.me.clone();
                Arc::new(move || {
                    polls.fetch_add(1, Ordering::SeqCst);
                    if !me.upgrade().is_some_and(|p| p.step_virtual()) {
                        std::thread::yield_now();
                    }
                })
            }
            Mode::Deterministic => {
                let w = Arc::downgrade(&self.world);
                let me = self.me.clone();
                Arc::new(move || {
                    polls.fetch_add(1, Ordering::SeqCst);
                    let mut ran = false;
                    if let Some(w) = w.upgrade() {
                        ran = w.run_until_idle() != 0;
                    }
                    // Thread-free: nobody else runs the DPCs, and a yield only loses the core.
                    if let Some(p) = me.upgrade().filter(|p| p.thread_free)
                        && (p.run_dpcs() || ran)
                    {
                        return;
                    }
                    std::thread::yield_now();
                })
            }
            Mode::Threaded => Arc::new(move || {
                polls.fetch_add(1, Ordering::SeqCst);
                std::thread::yield_now();
            }),
        }
    }

    /// Adds a host platform whose DPC executor [`Pump::settle`] waits for.
    pub fn add_platform(&self, p: Arc<HostPlatform>) {
        self.platforms.lock().unwrap().push(p);
    }

    /// Adds another platform's DPC executor for [`Pump::settle`] and waits to drain.
    pub fn add_executor(&self, e: Arc<HostExecutor>) {
        self.executors.lock().unwrap().push(e);
    }

    /// Thread-free hosts ([`ClusterConfig::thread_free`]): runs every queued DPC of every
    /// host on this thread until none is queued. Returns whether any ran; false at once with
    /// threaded executors.
    pub fn run_dpcs(&self) -> bool {
        if !self.thread_free {
            return false;
        }
        // One platform at a time, by index, with the list unlocked while its DPCs run (a
        // DPC may reach the pump), and without a copy of the list: a fuzz target pumps after
        // every step, and an allocation costs a sanitizer's allocator a stack trace.
        let platform = |i: usize| self.platforms.lock().unwrap().get(i).cloned();
        let mut any = false;
        loop {
            let mut n = 0;
            let mut i = 0;
            while let Some(p) = platform(i) {
                n += p.executor().run_queued();
                i += 1;
            }
            if n == 0 {
                return any;
            }
            any = true;
        }
    }

    /// Forgets the platforms (at teardown).
    pub fn clear_platforms(&self) {
        self.platforms.lock().unwrap().clear();
        self.executors.lock().unwrap().clear();
    }

    /// Times a provider wait (`Platform::wait_until` on any host) found its condition false
    /// and pumped: evidence that a thread is blocked inside the provider, e.g. a close
    /// waiting for children.
    pub fn provider_polls(&self) -> u64 {
        self.provider_polls.load(Ordering::SeqCst)
    }

    /// How long a wait may take before it counts as a hang.
    fn hang(&self) -> Duration {
        if self.real_peer {
            HANG_WITH_REAL_PEER
        } else {
            HANG
        }
    }

    /// Waits until `cond` holds, pumping the world in deterministic mode (in virtual time one
    /// event at a time: see [`Pump::step_virtual`]). Panics after 20 s of wall time (120 s with
    /// a real peer, whose guest runs emulated).
    pub fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + self.hang();
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}{}",
                if self.virtual_time {
                    format!(" (virtual time {} ns)", self.world.now_ns())
                } else {
                    String::new()
                }
            );
            if self.virtual_time {
                if !self.step_virtual() {
                    // Nothing pending at all: only another thread can make `cond` true.
                    std::thread::yield_now();
                }
                continue;
            }
            if self.mode == Mode::Deterministic {
                let ran = self.world.run_until_idle() != 0;
                if self.run_dpcs() || (ran && self.thread_free) {
                    continue;
                }
            }
            std::thread::yield_now();
        }
    }

    /// Virtual time, one step. First runs everything due now: device work, interrupts and
    /// the DPCs they queue, until a round finds devices quiet and no DPC ran. If nothing was
    /// due, moves virtual time to the earliest pending deadline, either the world's next
    /// event (handled, with the devices it wakes) or a host timer (the world's clock is set to
    /// it and every host fires what is due, so a timer DPC reads its deadline from
    /// `now_ns()`); a world event due at the same instant as a timer goes first. Returns
    /// false when nothing ran and nothing is pending.
    pub fn step_virtual(&self) -> bool {
        if current_processor().is_some() {
            // A provider wait on a DPC thread (a consumer callback that blocks) cannot wait
            // for the DPCs to drain, nor let time pass under a running DPC.
            return self.world.run_devices();
        }
        let _stepping = match self.stepping.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // Another thread is moving time; its step is this one's progress too.
            Err(TryLockError::WouldBlock) => {
                std::thread::yield_now();
                return true;
            }
        };
        let platforms = self.platforms.lock().unwrap().clone();
        let extra = self.executors.lock().unwrap().clone();
        let executors: Vec<&HostExecutor> = platforms
            .iter()
            .map(|p| &**p.executor())
            .chain(extra.iter().map(|e| &**e))
            .collect();
        let deadline = Instant::now() + HANG;
        let mut ran = false;
        loop {
            // Counted runs, not idleness alone: a DPC that finished between the device pass
            // and the idle check may have rung a doorbell the pass did not see.
            let runs = dpc_runs(&executors);
            let devices = self.world.run_devices();
            while !executors.iter().all(|e| e.is_idle()) {
                assert!(Instant::now() < deadline, "DPCs did not drain");
                if executors.iter().map(|e| e.run_queued()).sum::<usize>() == 0 {
                    std::thread::yield_now();
                }
            }
            if !devices && dpc_runs(&executors) == runs {
                break;
            }
            ran = true;
        }
        if ran {
            return true;
        }
        let timer = executors.iter().filter_map(|e| e.next_timer_ns()).min();
        let event = self.world.next_event_ns();
        match (event, timer) {
            (None, None) => false,
            (Some(e), Some(t)) if t < e => self.fire_timers_at(t, &executors),
            (None, Some(t)) => self.fire_timers_at(t, &executors),
            (Some(_), _) => {
                self.world.step();
                true
            }
        }
    }

    /// Moves virtual time to `t` (nothing of the world's is due before it) and fires every
    /// host's timers due by then.
    fn fire_timers_at(&self, t: u64, executors: &[&HostExecutor]) -> bool {
        self.world
            .advance_time(t.saturating_sub(self.world.now_ns()));
        let now = self.world.now_ns();
        for e in executors {
            e.fire_due(now);
        }
        true
    }

    fn executors_idle(&self) -> bool {
        self.platforms
            .lock()
            .unwrap()
            .iter()
            .all(|p| p.executor().is_idle())
            && self.executors.lock().unwrap().iter().all(|e| e.is_idle())
    }

    /// Deterministic: runs devices, fabric and DPCs until an iteration finds nothing to do.
    /// Threaded: [`settle_threaded`] over every node's model, the fabric and every host's DPC
    /// executor.
    ///
    /// Virtual time: steps ([`Pump::step_virtual`]) until nothing is due or pending, host
    /// timers included, so virtual time runs through every armed timer.
    pub fn settle(&self) {
        if self.virtual_time {
            let deadline = Instant::now() + SETTLE_DEADLINE;
            while self.step_virtual() {
                assert!(
                    Instant::now() < deadline,
                    "cluster did not settle (virtual time {} ns)",
                    self.world.now_ns()
                );
            }
            return;
        }
        if self.mode == Mode::Threaded {
            let platforms = self.platforms.lock().unwrap().clone();
            let extra = self.executors.lock().unwrap().clone();
            let executors: Vec<&HostExecutor> = platforms
                .iter()
                .map(|p| &**p.executor())
                .chain(extra.iter().map(|e| &**e))
                .collect();
            // Every PVRDMA model, and the vmxnet3 model of every vNIC (paired hosts).
            let models: Vec<&dyn Quiescent> = (0..self.world.len())
                .map(|i| &**self.world.device(i) as &dyn Quiescent)
                .chain(
                    (0..self.world.vnic_count())
                        .map(|i| &**self.world.vnic(i).vmxnet3() as &dyn Quiescent),
                )
                .collect();
            // A real peer never leaves the fabric idle: settle the hosts' side alone.
            let fabric = (!self.real_peer).then(|| self.world.fabric());
            settle_threaded(&models, &executors, fabric);
            return;
        }
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            assert!(Instant::now() < deadline, "cluster did not settle");
            let d = self.world.run_devices();
            let f = self.world.run_until_idle();
            let ran = d || f != 0;
            let mut waited = false;
            while !self.executors_idle() {
                waited = true;
                assert!(Instant::now() < deadline, "DPCs did not drain");
                if !self.run_dpcs() {
                    std::thread::yield_now();
                }
            }
            if !ran && !waited {
                return;
            }
        }
    }
}

// ------------------------------------------------------------------------------- callbacks

/// Context of one create call: the CreateCompletion's status and object, and how many
/// times it was called.
#[derive(Default)]
pub struct CreateCtx {
    calls: AtomicU32,
    result: Mutex<Option<(NTSTATUS, usize)>>,
}

impl CreateCtx {
    /// CreateCompletion calls so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
    /// The completion's (status, object), once called.
    pub fn result(&self) -> Option<(NTSTATUS, *mut NDK_OBJECT_HEADER)> {
        (*self.result.lock().unwrap()).map(|(s, o)| (s, o as *mut NDK_OBJECT_HEADER))
    }
}

/// The consumer's CreateCompletion: records into the [`CreateCtx`] its context points at.
pub unsafe extern "system" fn on_create(ctx: PVOID, st: NTSTATUS, obj: *mut NDK_OBJECT_HEADER) {
    // SAFETY: the context is an `Arc<CreateCtx>` pointer its `Creation` keeps alive.
    let c = unsafe { &*(ctx as *const CreateCtx) };
    *c.result.lock().unwrap() = Some((st, obj as usize));
    c.calls.fetch_add(1, Ordering::SeqCst);
}

/// Context of one request (RequestCompletion): status and call count.
#[derive(Default)]
pub struct RequestCtx {
    calls: AtomicU32,
    status: Mutex<Option<NTSTATUS>>,
}

impl RequestCtx {
    /// RequestCompletion calls so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
    /// The completion's status, once called.
    pub fn status(&self) -> Option<NTSTATUS> {
        *self.status.lock().unwrap()
    }
}

/// The consumer's RequestCompletion.
pub unsafe extern "system" fn on_request(ctx: PVOID, st: NTSTATUS) {
    // SAFETY: the context is an `Arc<RequestCtx>` pointer its `Request` keeps alive.
    let c = unsafe { &*(ctx as *const RequestCtx) };
    *c.status.lock().unwrap() = Some(st);
    c.calls.fetch_add(1, Ordering::SeqCst);
}

/// Statuses of every notification callback (CQ or SRQ) of one object, in order, and the
/// simulated processor each ran on.
#[derive(Default)]
pub struct Notes(Mutex<Vec<NTSTATUS>>, Mutex<Vec<Option<u32>>>);

impl Notes {
    /// The statuses so far.
    pub fn get(&self) -> Vec<NTSTATUS> {
        self.0.lock().unwrap().clone()
    }

    /// `current_processor()` inside each callback so far (None: not an executor thread).
    pub fn processors(&self) -> Vec<Option<u32>> {
        self.1.lock().unwrap().clone()
    }
}

/// The consumer's CQ / SRQ notification callback.
pub unsafe extern "system" fn on_notify(ctx: PVOID, st: NTSTATUS) {
    // SAFETY: the context is an `Arc<Notes>` its object wrapper keeps alive past close.
    let n = unsafe { &*(ctx as *const Notes) };
    n.1.lock().unwrap().push(pvrdma_host::current_processor());
    n.0.lock().unwrap().push(st);
}

#[derive(Default)]
struct CloseCtx(pub(crate) AtomicU32);

unsafe extern "system" fn on_close(ctx: PVOID) {
    // SAFETY: the context is an `Arc<CloseCtx>` `close_object` keeps alive until it returns.
    let c = unsafe { &*(ctx as *const CloseCtx) };
    c.0.fetch_add(1, Ordering::SeqCst);
}

/// A create call as the provider answered it.
pub struct Creation {
    /// Inline status (STATUS_PENDING when the object comes through CreateCompletion).
    pub inline: NTSTATUS,
    /// What the provider stored through the out pointer.
    pub out: *mut NDK_OBJECT_HEADER,
    /// The completion context.
    pub ctx: Arc<CreateCtx>,
    pump: Arc<Pump>,
}

impl Creation {
    /// The final status and object: the inline ones, or (PENDING) the CreateCompletion's,
    /// after waiting for it. Asserts the completion comes exactly once when pended, never
    /// otherwise.
    pub fn wait(&self) -> (NTSTATUS, *mut NDK_OBJECT_HEADER) {
        if self.inline != STATUS_PENDING {
            assert_eq!(
                self.ctx.calls(),
                0,
                "CreateCompletion after an inline return"
            );
            return (self.inline, self.out);
        }
        self.pump
            .wait_for("CreateCompletion", || self.ctx.calls() != 0);
        assert_eq!(self.ctx.calls(), 1, "one CreateCompletion");
        self.ctx.result().unwrap()
    }
}

/// A request with a RequestCompletion (register, deregister, modify SRQ, ...).
pub struct Request {
    /// Inline status.
    pub inline: NTSTATUS,
    /// The completion context.
    pub ctx: Arc<RequestCtx>,
    pump: Arc<Pump>,
}

impl Request {
    /// The final status (inline, or the RequestCompletion's after waiting for it).
    pub fn wait(&self) -> NTSTATUS {
        if self.inline != STATUS_PENDING {
            assert_eq!(
                self.ctx.calls(),
                0,
                "RequestCompletion after an inline return"
            );
            return self.inline;
        }
        self.pump
            .wait_for("RequestCompletion", || self.ctx.calls() != 0);
        assert_eq!(self.ctx.calls(), 1, "one RequestCompletion");
        self.ctx.status().unwrap()
    }

    /// Whether the provider pended.
    pub fn pended(&self) -> bool {
        self.inline == STATUS_PENDING
    }
}

fn ptr_of<T>(a: &Arc<T>) -> PVOID {
    Arc::as_ptr(a) as PVOID
}

/// Closes `obj` through `slot`; waits for CloseCompletion if pended (exactly once) and
/// checks none came for an inline close. Returns the inline status.
fn close_object(pump: &Pump, obj: *mut NDK_OBJECT_HEADER, slot: NDK_FN_CLOSE_OBJECT) -> NTSTATUS {
    let ctx = Arc::new(CloseCtx::default());
    // SAFETY: a live object of the provider, closed once; the context outlives the call and
    // its completion (waited for below).
    let st = unsafe { slot(obj, on_close, ptr_of(&ctx)) };
    if st == STATUS_PENDING {
        pump.wait_for("CloseCompletion", || ctx.0.load(Ordering::SeqCst) != 0);
        pump.settle();
        assert_eq!(ctx.0.load(Ordering::SeqCst), 1, "one CloseCompletion");
    } else {
        assert_eq!(st, STATUS_SUCCESS, "close returns SUCCESS or PENDING");
        assert_eq!(ctx.0.load(Ordering::SeqCst), 0, "no CloseCompletion inline");
    }
    st
}

fn table<'a, D>(d: *const D) -> &'a D {
    // SAFETY: the provider's dispatch tables are statics.
    unsafe { &*d }
}

// ------------------------------------------------------------------------------- cluster

/// Cluster options.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Model mode.
    pub mode: Mode,
    /// Hosts (≤ 254).
    pub hosts: u8,
    /// IPv6 GIDs `fd00::<i+1>` instead of `::ffff:10.0.0.<i+1>`.
    pub ipv6: bool,
    /// Version requested at OpenNDKAdapter.
    pub version: NDK_VERSION,
    /// DPC processors per host.
    pub processors: u32,
    /// Fault-roll seed of the fabric.
    pub seed: u64,
    /// Per-node adjustment of the node config (caps, ...).
    pub tweak: Option<fn(usize, &mut NodeConfig)>,
    /// Models in lazy-completion mode (M48); defaults to [`super::lazy_from_env`].
    pub lazy: bool,
    /// Hosts read the world's virtual time (`Platform::now_ns`) and their timers fire in it
    /// ([`Pump::step_virtual`]); Mode::Deterministic only. Default false: the wall clock.
    pub virtual_time: bool,
    /// Connection management (the default): every host gets a `Neighbours` resolver holding
    /// every host's IP and MAC and its own IP as the interface's address, and its NDK device
    /// starts its connection engine (which binds the GIDs; the probe binds none then).
    /// Without it the probe binds each host's GID and [`Cluster::connect`] wires QPs raw.
    pub cm: bool,
    /// How long the resolvers take to give up on an unknown destination.
    pub resolve_bound_ns: u64,
    /// The fabric's delivery thread follows the wall clock (`ThreadMode::ScaledReal` at
    /// 1.0) instead of jumping to each event: a real peer on an external wire answers in real
    /// time, and in virtual time the model's transport timers expire first. Threaded only;
    /// settling then ignores the fabric, which a real peer never leaves idle.
    pub real_time: bool,
    /// Addresses from the benchmarking ranges instead of 10.0.0.x / fd00::x: host `i` holds
    /// 198.18.0.`i+1` and 2001:2::`i+1` (RFC 2544 / RFC 5180), both interface addresses,
    /// its GID (and `Host::ip`) the IPv6 one if [`ClusterConfig::ipv6`]. For an external
    /// wire, whose inner addresses must come from these ranges.
    pub benchmark_addresses: bool,
    /// The hosts' DPC executors have no threads ([`HostPlatform::without_threads`]): DPCs
    /// run on the thread that waits or settles, as a DPC preempting it would. One thread then
    /// drives the whole cluster: no thread hand-off per interrupt, and a run does not depend
    /// on how the machine schedules threads (the fuzz targets). Mode::Deterministic only.
    pub thread_free: bool,
    /// The connection engines' path MTU code (`EngineConfig::path_mtu`; 3 = 1024, 5 = 4096).
    pub path_mtu: u8,
    /// The engines' CM Response Timeout and Max CM Retries (`EngineConfig`; rdma_cm's 20
    /// and 15 by default).
    pub cm_timing: (u8, u8),
    /// The engines' connection slots (`EngineConfig::capacity`).
    pub cm_capacity: usize,
    /// Each host is a paired vNIC (the default; issue 25, `super::pair`): the vmxnet3
    /// function (`ndis::ethernet`) carries the IP interface and registers NDK, the PVRDMA
    /// function (`ndis::Miniport`, paired) serves it, the two joined through a
    /// `PairRegistry` (even hosts start the vmxnet3 function first, odd ones the PVRDMA
    /// function); the host's adapter is opened through the vmxnet3 adapter's NDK surface
    /// (`NicNdk`: what WskOpenNdkAdapter by the interface's IfIndex reaches); the connection
    /// engine runs over that interface's addresses; neighbours are resolved by the host's IP
    /// stack over the vmxnet3 adapter (smoltcp: ARP and neighbour discovery,
    /// [`Cluster::resolve_neighbours`]). False: the PVRDMA function alone, the driver probed
    /// directly and its NDK device opened without NDIS; [`ClusterConfig::without_cm`] and
    /// [`ClusterConfig::real_peer`] clusters are, thread-free ones must be, and every cluster
    /// is under Miri (`tests/miri.sh`; see [`ClusterConfig::new`]).
    pub paired: bool,
}

impl ClusterConfig {
    /// IPv4, NDKPI 2.1, 2 processors, connection management.
    pub fn new(mode: Mode, hosts: u8) -> Self {
        ClusterConfig {
            mode,
            hosts,
            ipv6: false,
            version: NDK_VERSION { Major: 2, Minor: 1 },
            processors: 2,
            seed: 0x5EED,
            tweak: None,
            lazy: super::lazy_from_env(),
            virtual_time: false,
            cm: true,
            resolve_bound_ns: 50_000_000,
            real_time: false,
            benchmark_addresses: false,
            thread_free: false,
            path_mtu: pvrdma_ndk::ndk::connect::EngineConfig::new(0, 0).path_mtu,
            cm_timing: {
                let e = pvrdma_ndk::ndk::connect::EngineConfig::new(0, 0);
                (e.cm_response_timeout, e.max_cm_retries)
            },
            cm_capacity: pvrdma_ndk::ndk::connect::EngineConfig::new(0, 0).capacity,
            // Under Miri, PVRDMA alone: the vmxnet3 driver reads the completion descriptors
            // the model writes with plain volatile loads, which Miri's race detector reports
            // against the model's atomic stores from another thread (it has no notion of
            // DMA); the PVRDMA side reads device-written ring words atomically.
            paired: !cfg!(miri),
        }
    }

    /// This configuration with the PVRDMA function alone ([`ClusterConfig::paired`] false).
    pub fn alone(self) -> Self {
        ClusterConfig {
            paired: false,
            ..self
        }
    }

    /// Hosts that meet a real peer on an external wire ([`Cluster::attach_wire`]): threaded
    /// in real time, benchmarking addresses, resolutions allowed 5 s (the peer answers ARP
    /// from an emulated guest). PVRDMA alone: the wire's responder answers the peer's ARP and
    /// neighbour solicitations for the host and feeds its resolver all along, which the
    /// paired host's IP stack, run only while [`Cluster::resolve_neighbours`] runs, would not.
    pub fn real_peer(hosts: u8) -> Self {
        ClusterConfig {
            paired: false,
            real_time: true,
            benchmark_addresses: true,
            resolve_bound_ns: 5_000_000_000,
            ..Self::new(Mode::Threaded, hosts)
        }
    }

    /// The same in the world's virtual time (see [`ClusterConfig::virtual_time`]).
    pub fn virtual_time(mode: Mode, hosts: u8) -> Self {
        ClusterConfig {
            virtual_time: true,
            ..Self::new(mode, hosts)
        }
    }

    /// As [`ClusterConfig::new`], with connection management ([`ClusterConfig::cm`]).
    pub fn cm(mode: Mode, hosts: u8) -> Self {
        ClusterConfig {
            cm: true,
            ..Self::new(mode, hosts)
        }
    }

    /// As [`ClusterConfig::new`] without connection management: no engine, no QP1, the
    /// probe binds the GIDs and [`Cluster::connect`] is [`wire`]. For tests that need the
    /// device to themselves (their own QP1, every QP handle) or QPs the CM must not touch.
    /// PVRDMA alone: a paired function starts its engine when the interface attaches.
    pub fn without_cm(mode: Mode, hosts: u8) -> Self {
        ClusterConfig {
            cm: false,
            paired: false,
            ..Self::new(mode, hosts)
        }
    }
}

/// One simulated host.
pub struct Host {
    /// Index in the world.
    pub index: usize,
    /// OS seam.
    pub platform: Arc<HostPlatform>,
    /// The driver's DMA allocator.
    pub dma: Arc<SimDma>,
    /// The host memory the device model sees.
    pub space: Arc<pvrdma_sim::DmaSpace>,
    /// The device model.
    pub model: Arc<pvrdma_sim::Device>,
    /// BAR1 as the driver writes it (the DSR address: where to find the device rings).
    pub bar1: Arc<SimBar1>,
    /// The probed driver device.
    pub dev: Arc<DrvDevice>,
    /// The verbs the NDK layer is built on.
    pub hw: Arc<Verbs>,
    /// NDK device.
    pub ndk: Arc<NdkDevice>,
    /// The open adapter.
    pub adapter: Adapter,
    /// Bound GID (index 0).
    pub gid: [u8; 16],
    /// Port MAC.
    pub mac: [u8; 6],
    /// The host's IP address (its GID's).
    pub ip: std::net::IpAddr,
    /// Every interface address of the host, `ip` first.
    pub addresses: Vec<std::net::IpAddr>,
    /// The address resolver of a connection-managed cluster.
    pub resolver: Option<Arc<pvrdma_ndk::os::net::Neighbours>>,
    /// The model's objects once the connection engine started (its QP1's PD, MR, CQ and QP).
    pub engine_objects: ObjectCounts,
    /// A paired host's vNIC: the vmxnet3 adapter, its NDK surface, the PVRDMA adapter
    /// ([`ClusterConfig::paired`]).
    pub vnic: Option<PairedVnic>,
}

impl Host {
    /// The host's address of `peer`'s family (its first if it has none of that family).
    pub fn ip_for(&self, peer: std::net::IpAddr) -> std::net::IpAddr {
        self.addresses
            .iter()
            .copied()
            .find(|a| a.is_ipv4() == peer.is_ipv4())
            .unwrap_or(self.ip)
    }

    /// `pages` zeroed pages of consumer memory at consumer VA `va` in this host's memory.
    pub fn mem(&self, pages: usize, va: u64) -> ConsumerMem {
        ConsumerMem::new(&self.space, pages, va)
    }

    /// The model's live objects.
    pub fn model_objects(&self) -> ObjectCounts {
        self.model.with_core(|c| c.object_counts())
    }

    /// A paired host's vNIC.
    pub fn vnic(&self) -> &PairedVnic {
        self.vnic.as_ref().expect("a paired host")
    }

    /// The model's live objects but the connection engine's own.
    pub fn consumer_objects(&self) -> ObjectCounts {
        let (m, e) = (self.model_objects(), self.engine_objects);
        ObjectCounts {
            pds: m.pds - e.pds,
            mrs: m.mrs - e.mrs,
            cqs: m.cqs - e.cqs,
            qps: m.qps - e.qps,
            srqs: m.srqs - e.srqs,
        }
    }
}

/// Hosts on one fabric (see the module docs).
pub struct Cluster {
    /// The fabric and models.
    pub world: Arc<World>,
    /// The hosts.
    pub hosts: Vec<Host>,
    /// Mode.
    pub mode: Mode,
    pump: Arc<Pump>,
    /// Whether the hosts run connection engines ([`ClusterConfig::cm`]).
    cm: bool,
    /// The slot table of paired hosts ([`ClusterConfig::paired`]).
    registry: Option<Arc<PairRegistry>>,
    links: links::Links,
    /// External wires ([`Cluster::attach_wire`]), closed before the fabric stops.
    wires: Mutex<Vec<Arc<UdpWire>>>,
    baseline: AllocStats,
    _serial: MutexGuard<'static, ()>,
}

impl Cluster {
    /// `hosts` IPv4 hosts in `mode` with NDKPI 2.1 adapters.
    pub fn new(mode: Mode, hosts: u8) -> Cluster {
        Self::with(ClusterConfig::new(mode, hosts))
    }

    /// With full control.
    pub fn with(cfg: ClusterConfig) -> Cluster {
        assert!(
            !(cfg.paired && cfg.thread_free),
            "thread-free hosts are PVRDMA alone (`ClusterConfig::alone`): the vmxnet3 \
             function's platform runs DPC threads"
        );
        assert!(
            !cfg.paired || cfg.cm,
            "a paired host runs a connection engine: `without_cm` clusters are PVRDMA alone"
        );
        let guard = serial();
        let baseline = stats();
        let mut w = World::new(cfg.seed);
        for i in 0..cfg.hosts {
            let mut n = if cfg.ipv6 {
                NodeConfig::ipv6(i)
            } else {
                NodeConfig::ipv4(i)
            };
            if cfg.benchmark_addresses {
                n.gid = gid_of(benchmark_addresses(i)[usize::from(cfg.ipv6)]);
            }
            n.device.lazy_completion = cfg.lazy;
            if let Some(t) = cfg.tweak {
                t(usize::from(i), &mut n);
            }
            if cfg.paired {
                let v = VnicConfig {
                    rdma: Some((1, n)),
                    ..VnicConfig::ethernet(i)
                };
                w.add_vnic(v).expect("a paired vNIC");
            } else {
                w.add_node(n);
            }
        }
        if cfg.mode == Mode::Threaded {
            w.start_threads_with(if cfg.real_time {
                ThreadMode::ScaledReal { scale: 1.0 }
            } else {
                ThreadMode::Virtual
            });
        }
        let world = Arc::new(w);
        let pump = Pump::with_time(
            world.clone(),
            cfg.mode,
            cfg.virtual_time,
            cfg.real_time,
            cfg.thread_free,
        );
        if cfg.paired {
            return Self::with_paired(cfg, world, pump, baseline, guard);
        }
        let mut hosts = Vec::new();
        for i in 0..usize::from(cfg.hosts) {
            let node = world.node(i);
            let model = node.device().clone();
            let space = node.dma().clone();
            let dma = SimDma::new(space.clone());
            let m = model.clone();
            let bar1 = SimBar1::new(model.clone());
            let build = if cfg.thread_free {
                HostPlatform::without_threads
            } else {
                HostPlatform::with_time
            };
            let platform = build(
                HostDevice {
                    bar1: bar1.clone(),
                    dma: dma.clone(),
                    doorbell: Some(Arc::new(move |off, val| m.uar_write32(off, val))),
                    uar_pfn: DEFAULT_UAR_PFN,
                    pump: Some(pump.platform_pump()),
                },
                cfg.processors,
                pump.host_time(),
            );
            world.set_interrupt_sink(i, Arc::new(PlatformSink(Arc::downgrade(&platform))));
            pump.platforms.lock().unwrap().push(platform.clone());
            let gid = node.gid();
            let p: Arc<dyn Platform> = platform.clone();
            let gids = [gid];
            // With connection management the engine binds the GIDs.
            let probe_gids: &[[u8; 16]] = if cfg.cm { &[] } else { &gids };
            let dev = Arc::new(
                DrvDevice::probe(
                    p,
                    &DrvConfig {
                        gids: probe_gids,
                        ..DrvConfig::default()
                    },
                )
                .expect("probe against the world node"),
            );
            let hw = Verbs::new(dev.clone()).expect("hardware seam");
            let ndk = NdkDevice::new(hw.clone()).expect("NDK device");
            let a = ndk.open_adapter(cfg.version).expect("open adapter");
            hosts.push(Host {
                index: i,
                platform,
                dma,
                space,
                model,
                bar1,
                dev,
                hw,
                ndk,
                adapter: Adapter {
                    ptr: a,
                    pump: pump.clone(),
                    host: i,
                },
                gid,
                mac: node.mac(),
                ip: pvrdma_ndk::cm::addr::ip_from_gid(gid),
                addresses: host_addresses(&cfg, i, gid),
                resolver: None,
                engine_objects: ObjectCounts::default(),
                vnic: None,
            });
        }
        if cfg.cm {
            cm::start_engines(&mut hosts, &cfg);
            for h in &mut hosts {
                h.engine_objects = h.model_objects();
            }
        }
        Cluster {
            world,
            hosts,
            mode: cfg.mode,
            pump,
            cm: cfg.cm,
            registry: None,
            links: links::Links::default(),
            wires: Mutex::new(Vec::new()),
            baseline,
            _serial: guard,
        }
    }

    /// The paired hosts of [`Cluster::with`] ([`ClusterConfig::paired`]): each vNIC's two
    /// functions started (alternating the order), joined, NDK enabled on the vmxnet3 adapter
    /// and opened through it, then every neighbour resolved by the hosts' IP stacks.
    fn with_paired(
        cfg: ClusterConfig,
        world: Arc<World>,
        pump: Arc<Pump>,
        baseline: AllocStats,
        guard: MutexGuard<'static, ()>,
    ) -> Cluster {
        let registry = Arc::new(PairRegistry::new());
        let mut hosts = Vec::new();
        // The RoCE frame size the engines' path MTU asks for, and an Ethernet MTU that
        // carries it (a jumbo frame above 1024).
        let roce = 128u32 << cfg.path_mtu;
        let mut miniport = MiniportConfig::default();
        miniport.keywords.roce_frame_size = roce;
        if roce > 1024 {
            miniport.keywords.jumbo_packet = 9014;
        }
        for i in 0..usize::from(cfg.hosts) {
            let node = world.node(i);
            let gid = node.gid();
            let addresses = host_addresses(&cfg, i, gid);
            let seed = (cfg.seed as u32) ^ (i as u32).wrapping_mul(0x9E37_79B9);
            let spec = VnicSpec {
                processors: cfg.processors,
                time: pump.host_time(),
                thread_free: false,
                addresses: addresses.clone(),
                resolver_entries: 64,
                resolve_bound_ns: cfg.resolve_bound_ns,
                own_resolver_platform: false,
                miniport,
                engine: Some(EngineConfig {
                    cm_response_timeout: cfg.cm_timing.0,
                    max_cm_retries: cfg.cm_timing.1,
                    capacity: cfg.cm_capacity,
                    ..EngineConfig::new(0, seed)
                }),
                mtu: miniport.keywords.ethernet_mtu(),
                grace_ns: pvrdma_ndk::ndis::pair::nic::PART_GRACE_NS,
                ..VnicSpec::new(addresses.clone())
            };
            let mut v = PairedVnic::new(&world, i, &pump, spec);
            if i % 2 == 0 {
                v.start_nic(&registry);
                v.start_rdma(&registry);
            } else {
                v.start_rdma(&registry);
                v.start_nic(&registry);
            }
            pump.settle();
            assert!(registry.is_joined(v.at), "host {i}: functions joined");
            assert_eq!(
                v.pnp_events(),
                vec![NetEventNDKEnable],
                "host {i}: NDK enabled"
            );
            let mp = v.mp().clone();
            assert!(
                !mp.ndk_enabled(),
                "the PVRDMA adapter registers no NDK of its own"
            );
            let a = v
                .open(cfg.version)
                .expect("OpenNDKAdapter on the vmxnet3 adapter");
            let ndk = mp.ndk_device().expect("NDK device");
            hosts.push(Host {
                index: i,
                platform: v.pv_platform.clone(),
                dma: v.pv_dma.clone(),
                space: node.dma().clone(),
                model: v.model.clone(),
                bar1: v.bar1.inner.clone(),
                dev: mp.device().expect("device"),
                hw: ndk.hw_handle(),
                ndk,
                adapter: Adapter {
                    ptr: a,
                    pump: pump.clone(),
                    host: i,
                },
                gid,
                mac: world.vnic(i).mac(),
                ip: pvrdma_ndk::cm::addr::ip_from_gid(gid),
                addresses,
                resolver: Some(v.eth.neighbours.clone()),
                engine_objects: ObjectCounts::default(),
                vnic: Some(v),
            });
        }
        let mut c = Cluster {
            world,
            hosts,
            mode: cfg.mode,
            pump,
            cm: true,
            registry: Some(registry),
            links: links::Links::default(),
            wires: Mutex::new(Vec::new()),
            baseline,
            _serial: guard,
        };
        c.resolve_neighbours();
        c.settle();
        for h in &mut c.hosts {
            h.engine_objects = h.model_objects();
        }
        c
    }

    /// Paired hosts: every host's IP stack (smoltcp over its vmxnet3 adapter, with the
    /// host's addresses; the packet filter and multicast list tcpip.sys sets) resolves every
    /// other host's address of a family it has, through ARP or neighbour discovery over the
    /// vmxnet3 functions and the fabric; what it resolves feeds the host's resolver, where
    /// the connection engine looks neighbours up. Run at build; run it again after
    /// changing a host's addresses. Returns the frames the vmxnet3 adapters received.
    pub fn resolve_neighbours(&self) -> usize {
        let vnics: Vec<&PairedVnic> = self.hosts.iter().map(Host::vnic).collect();
        let mut stacks = Vec::new();
        let mut wanted: Vec<Vec<std::net::IpAddr>> = Vec::new();
        for h in &self.hosts {
            let v = h.vnic();
            let addresses = v.eth.addresses();
            assert_eq!(
                v.eth.set_filter(
                    NDIS_PACKET_TYPE_DIRECTED
                        | NDIS_PACKET_TYPE_MULTICAST
                        | NDIS_PACKET_TYPE_BROADCAST
                ),
                NDIS_STATUS_SUCCESS
            );
            assert_eq!(
                v.eth.set_multicast(&Stack::multicast_macs_of(&addresses)),
                NDIS_STATUS_SUCCESS
            );
            let want: Vec<std::net::IpAddr> = self
                .hosts
                .iter()
                .filter(|o| o.index != h.index)
                .flat_map(|o| o.vnic().eth.addresses())
                .filter(|a| addresses.iter().any(|m| m.is_ipv4() == a.is_ipv4()))
                .collect();
            let s = Stack::with_addresses(&v.eth, &addresses);
            s.wanted.lock().unwrap().extend(want.iter().copied());
            wanted.push(want);
            stacks.push(s);
        }
        let done = |vnics: &[&PairedVnic]| {
            vnics.iter().zip(&wanted).all(|(v, want)| {
                let learned = v.eth.ndis.learned.lock().unwrap();
                want.iter().all(|a| learned.contains(a))
            })
        };
        let mut now_ms = 0;
        let mut rounds = 0;
        while !done(&vnics) {
            rounds += 1;
            assert!(
                rounds < 64,
                "neighbours not resolved in 64 rounds: wanted {wanted:?}, learned {:?}",
                vnics
                    .iter()
                    .map(|v| v.eth.ndis.learned.lock().unwrap().clone())
                    .collect::<Vec<_>>()
            );
            // A second apart: smoltcp sends one neighbour request per second (its cache's
            // rate limit covers every destination), and every answer arrives within a round.
            now_ms += 1_000;
            for (v, s) in vnics.iter().zip(stacks.iter_mut()) {
                s.poll(&v.eth, now_ms);
            }
            self.pump.settle();
            for v in &vnics {
                v.eth.return_held();
            }
        }
        let mut frames = 0;
        for v in &vnics {
            frames += v.eth.ndis.take().frames.len();
            v.eth.ndis.inbox.lock().unwrap().clear();
        }
        frames
    }

    /// The slot table of a paired cluster.
    pub fn registry(&self) -> &Arc<PairRegistry> {
        self.registry.as_ref().expect("a paired cluster")
    }

    /// Whether the hosts are paired vNICs ([`ClusterConfig::paired`]).
    pub fn is_paired(&self) -> bool {
        self.registry.is_some()
    }

    /// Closes host `i`'s kit adapter as NDIS does (the vmxnet3 adapter's
    /// CloseNDKAdapterHandler on a paired host, the dispatch table's close otherwise) and
    /// forgets it ([`Cluster::finish`] then closes none).
    pub fn close_adapter(&mut self, i: usize) {
        let ptr = self.take_adapter(i);
        match &self.hosts[i].vnic {
            Some(v) => v.nic().close_ndk_adapter(ptr),
            // SAFETY: opened by `Cluster::with`, closed once (taken above).
            None => unsafe { close_adapter(ptr) },
        }
    }

    /// Host `i`'s kit adapter, which the caller now closes ([`Cluster::finish`] closes
    /// none): for a close through a vmxnet3 adapter that has halted.
    pub fn take_adapter(&mut self, i: usize) -> *mut NDK_ADAPTER {
        let ptr = std::mem::replace(&mut self.hosts[i].adapter.ptr, null_mut());
        assert!(!ptr.is_null(), "host {i}'s adapter taken once");
        ptr
    }

    /// Paired host `i`'s vmxnet3 adapter parts from its PVRDMA function and halts (NDIS's
    /// Halt; surprise removal ends in it); returns its NDK surface, through which NDIS may
    /// still close an NDK_ADAPTER. [`Cluster::finish`] then halts the PVRDMA function only.
    pub fn halt_nic(&mut self, i: usize) -> Arc<pvrdma_ndk::ndis::pair::NicNdk> {
        let registry = self.registry().clone();
        let v = self.hosts[i].vnic.as_mut().expect("a paired host");
        let nic = v.halt_nic(&registry);
        self.pump.settle();
        nic
    }

    /// Paired host `i`'s PVRDMA adapter parts from its vmxnet3 adapter and halts; the host's
    /// `dev`, `hw` and `ndk` are then the kit's alone (the device resets when
    /// [`Cluster::finish`] drops them).
    pub fn halt_rdma(&mut self, i: usize) {
        let registry = self.registry().clone();
        let v = self.hosts[i].vnic.as_mut().expect("a paired host");
        v.halt_rdma(&registry);
        self.pump.settle();
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// Adapter of host `i`.
    pub fn adapter(&self, i: usize) -> &Adapter {
        &self.hosts[i].adapter
    }

    /// The waiter shared by every wrapper.
    pub fn pump(&self) -> &Arc<Pump> {
        &self.pump
    }

    /// See [`Pump::settle`].
    pub fn settle(&self) {
        self.pump.settle();
    }

    /// See [`Pump::wait_for`].
    pub fn wait_for(&self, what: &str, cond: impl FnMut() -> bool) {
        self.pump.wait_for(what, cond);
    }

    /// Connects `a` and `b`: through the CM on a connection-managed cluster (parted when
    /// either QP closes, see [`links`]), else [`wire`].
    pub fn connect(&self, a: &Qp, b: &Qp) {
        if self.cm {
            links::connect(self, a, b);
        } else {
            wire(self, a, b);
        }
    }

    /// Whether the hosts run connection engines.
    pub fn has_cm(&self) -> bool {
        self.cm
    }

    /// Pool/DMA allocations made outside this cluster while it lived and kept for good by
    /// design (an object another rig's driver quarantined, `Tables::file`): [`Cluster::finish`]
    /// expects them still live. For a harness that keeps one cluster across many runs of
    /// something else (the fuzz targets).
    pub fn expect_kept(&mut self, kept: AllocStats) {
        let b = &mut self.baseline;
        b.live_allocs += kept.live_allocs;
        b.live_bytes += kept.live_bytes;
        b.dma_buffers += kept.dma_buffers;
        b.dma_bytes += kept.dma_bytes;
    }

    /// Closes every adapter (the test closed its objects), waits for the model to hold no
    /// object, drops the driver (RESET), stops the world's threads and checks: no DMA region
    /// left (driver or consumer memory: drop `ConsumerMem`s first), every SimDma region
    /// freed, allocation stats back at their value before the cluster was built.
    pub fn finish(mut self) {
        let mut hosts = std::mem::take(&mut self.hosts);
        let (world, pump, baseline) = (self.world.clone(), self.pump.clone(), self.baseline);
        pump.part_all_links();
        self.close_wires();
        self.links.close_listeners();
        pump.settle();
        for h in &hosts {
            // A test that closed an adapter itself nulls its pointer.
            if h.adapter.ptr.is_null() {
                continue;
            }
            match &h.vnic {
                Some(v) => v.nic().close_ndk_adapter(h.adapter.ptr),
                // SAFETY: opened by `Cluster::with`, closed once here.
                None => unsafe { close_adapter(h.adapter.ptr) },
            }
        }
        if let Some(registry) = self.registry.clone() {
            // Paired: the vmxnet3 adapter halts first (its parting detaches the interface:
            // the engine stops, the GIDs are unbound), then the PVRDMA adapter.
            cm::check_engines_idle(&hosts);
            let frames: usize = hosts
                .iter()
                .map(|h| h.vnic().eth.ndis.seen.lock().unwrap().frames.len())
                .sum();
            assert_eq!(
                frames, 0,
                "frames reached the vmxnet3 adapters outside neighbour resolution (RoCE is \
                 steered to the PVRDMA function, vmxnet3.md P5)"
            );
            for h in &mut hosts {
                let v = h.vnic.as_mut().expect("a paired host");
                if v.nic.is_some() {
                    let nic = v.halt_nic(&registry);
                    pump.settle();
                    assert_eq!(Arc::strong_count(&nic), 1, "NicNdk still referenced");
                    drop(nic);
                }
                let gids = v.bound_gids();
                assert!(
                    gids.is_empty(),
                    "host {}: GID bindings left: {gids:?}",
                    h.index
                );
                if v.mp.is_some() {
                    v.halt_rdma(&registry);
                    pump.settle();
                }
            }
            assert_eq!(registry.occupied(), 0, "slot table empty");
        }
        cm::stop_engines(&hosts);
        pump.wait_for("the models to hold no object", || {
            hosts
                .iter()
                .all(|h| h.model_objects() == ObjectCounts::default())
        });
        pump.settle();
        let mut keep = Vec::new();
        let mut vnics = Vec::new();
        for h in hosts {
            let Host {
                platform,
                dma,
                space,
                model,
                dev,
                hw,
                ndk,
                vnic,
                ..
            } = h;
            drop(ndk);
            drop(hw);
            assert_eq!(Arc::strong_count(&dev), 1, "driver device still referenced");
            drop(dev);
            assert!(!model.with_core(|c| c.is_active()), "RESET on drop");
            keep.push((platform, dma, space));
            vnics.extend(vnic);
        }
        for n in 0..world.len() {
            world.device(n).stop_thread();
        }
        for n in 0..world.vnic_count() {
            world.vnic(n).vmxnet3().stop_thread();
        }
        world.fabric().stop();
        for v in vnics {
            // The vmxnet3 function's executor, its DMA and its "NDIS"; then its memory (the
            // harness's Tx buffers) goes before the DMA space is checked below.
            v.shut_down(&pump);
            drop(v);
        }
        for (platform, dma, space) in &keep {
            let ex = platform.executor().clone();
            let deadline = Instant::now() + HANG;
            while !ex.is_idle() {
                assert!(Instant::now() < deadline, "DPCs did not drain at teardown");
                if ex.run_queued() == 0 {
                    std::thread::yield_now();
                }
            }
            ex.shutdown();
            assert_eq!(dma.live(), 0, "DMA regions leaked");
            assert_eq!(dma.allocs(), dma.frees());
            assert_eq!(space.region_count(), 0, "regions left in the DmaSpace");
            assert_eq!(space.bytes_registered(), 0);
        }
        pump.clear_platforms();
        drop(keep);
        drop(self.registry.take());
        assert_eq!(
            stats(),
            baseline,
            "pool/DMA accounting not back at baseline"
        );
        // The harness lock is released last, with `self`.
        drop(self);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.close_wires();
        // The kit's connectors hold the pump: let the cycle go.
        self.pump.forget_links();
        self.links.forget();
        // Also on a failing test: stop the DPC threads (the world stops its own on drop).
        for h in &self.hosts {
            h.platform.executor().shutdown();
            if let Some(v) = &h.vnic {
                for e in v.executors() {
                    e.shutdown();
                }
            }
        }
    }
}

/// Host `i`'s interface addresses: its GID's, then (benchmarking addresses) the other
/// family's.
fn host_addresses(cfg: &ClusterConfig, i: usize, gid: [u8; 16]) -> Vec<std::net::IpAddr> {
    let ip = pvrdma_ndk::cm::addr::ip_from_gid(gid);
    let mut a = vec![ip];
    if cfg.benchmark_addresses {
        // CAST: hosts ≤ 254.
        a.extend(
            benchmark_addresses(i as u8)
                .into_iter()
                .filter(|&x| x != ip),
        );
    }
    a
}

pub mod cm;
#[allow(unused_imports)]
pub use cm::*;
pub mod peer;
#[allow(unused_imports)]
pub use peer::*;
pub mod links;
#[allow(unused_imports)]
pub use links::KIT_READ_LIMIT;

// ------------------------------------------------------------------------------- adapter

/// An open NDK_ADAPTER (closed by [`Cluster::finish`]).
pub struct Adapter {
    /// The adapter.
    pub ptr: *mut NDK_ADAPTER,
    pump: Arc<Pump>,
    host: usize,
}

/// A logical address mapping from NdkBuildLAM.
pub struct Lam {
    words: Box<[u64]>,
    /// LAM size the provider reported.
    pub size: u32,
    /// First byte offset.
    pub fbo: u32,
}

impl Lam {
    /// The mapping.
    pub fn as_ptr(&self) -> *const NDK_LOGICAL_ADDRESS_MAPPING {
        self.words.as_ptr().cast()
    }

    /// The adapter pages.
    pub fn pages(&self) -> Vec<u64> {
        let p = self.as_ptr();
        // SAFETY: the buffer holds a LAM header the provider filled.
        let n = unsafe { (*p).AdapterPageCount } as usize;
        // SAFETY: the provider wrote `n` entries, which fit the buffer (it checked the size).
        let arr = unsafe { std::ptr::addr_of!((*p).AdapterPageArray).cast::<u64>() };
        // SAFETY: `n` entries in bounds (above).
        unsafe { std::slice::from_raw_parts(arr, n) }.to_vec()
    }
}

impl Adapter {
    /// Wraps an NDK_ADAPTER opened outside a [`Cluster`] (through the miniport).
    pub fn from_raw(ptr: *mut NDK_ADAPTER, pump: Arc<Pump>, host: usize) -> Adapter {
        Adapter { ptr, pump, host }
    }

    fn d(&self) -> &'static NDK_ADAPTER_DISPATCH {
        // SAFETY: a live adapter.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// Host index.
    pub fn host(&self) -> usize {
        self.host
    }

    /// NdkQueryAdapterInfo with a full-size buffer.
    pub fn query_info(&self) -> Result<NDK_ADAPTER_INFO, NTSTATUS> {
        // SAFETY: NDK_ADAPTER_INFO is plain data; zero is a valid value.
        let mut info: NDK_ADAPTER_INFO = unsafe { std::mem::zeroed() };
        let mut size = std::mem::size_of::<NDK_ADAPTER_INFO>() as u32;
        // SAFETY: live adapter; `info` holds `size` bytes.
        let st = unsafe { (self.d().NdkQueryAdapterInfo)(self.ptr, &mut info, &mut size) };
        if st == STATUS_SUCCESS {
            Ok(info)
        } else {
            Err(st)
        }
    }

    /// NdkCreateCq, raw.
    pub fn create_cq_raw(
        &self,
        depth: u32,
        affinity: Option<&mut GROUP_AFFINITY>,
    ) -> (Creation, Arc<Notes>) {
        let ctx = Arc::new(CreateCtx::default());
        let notes = Arc::new(Notes::default());
        let mut out: *mut NDK_CQ = null_mut();
        let aff = affinity.map_or(null_mut(), |a| a as *mut GROUP_AFFINITY);
        // SAFETY: live adapter; contexts live in the returned wrappers.
        let st = unsafe {
            (self.d().NdkCreateCq)(
                self.ptr,
                depth,
                on_notify,
                ptr_of(&notes),
                aff,
                on_create,
                ptr_of(&ctx),
                &mut out,
            )
        };
        let c = Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        };
        (c, notes)
    }

    /// NdkCreateCq, waiting for CreateCompletion.
    pub fn create_cq(
        &self,
        depth: u32,
        affinity: Option<&mut GROUP_AFFINITY>,
    ) -> Result<Cq, NTSTATUS> {
        let (c, notes) = self.create_cq_raw(depth, affinity);
        let (st, o) = c.wait();
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        Ok(Cq {
            ptr: o.cast(),
            pended: c.inline == STATUS_PENDING,
            notes,
            pump: self.pump.clone(),
            host: self.host,
        })
    }

    /// NdkCreateCq with the test's own notification callback and context (the context must
    /// outlive the CQ); waits for CreateCompletion. The wrapper's `notifications()` stays
    /// empty.
    pub fn create_cq_with_callback(
        &self,
        depth: u32,
        notify: NDK_FN_CQ_NOTIFICATION_CALLBACK,
        notify_context: PVOID,
    ) -> Result<Cq, NTSTATUS> {
        let ctx = Arc::new(CreateCtx::default());
        let mut out: *mut NDK_CQ = null_mut();
        // SAFETY: live adapter; the create context lives in `c`, the notification context is
        // the caller's.
        let st = unsafe {
            (self.d().NdkCreateCq)(
                self.ptr,
                depth,
                notify,
                notify_context,
                null_mut(),
                on_create,
                ptr_of(&ctx),
                &mut out,
            )
        };
        let c = Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        };
        let (st, o) = c.wait();
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        Ok(Cq {
            ptr: o.cast(),
            pended: c.inline == STATUS_PENDING,
            notes: Arc::new(Notes::default()),
            pump: self.pump.clone(),
            host: self.host,
        })
    }

    /// NdkCreatePd, raw.
    pub fn create_pd_raw(&self) -> Creation {
        let ctx = Arc::new(CreateCtx::default());
        let mut out: *mut NDK_PD = null_mut();
        // SAFETY: live adapter; context kept by the Creation.
        let st = unsafe { (self.d().NdkCreatePd)(self.ptr, on_create, ptr_of(&ctx), &mut out) };
        Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        }
    }

    /// NdkCreatePd, waiting for CreateCompletion.
    pub fn create_pd(&self) -> Result<Pd, NTSTATUS> {
        let c = self.create_pd_raw();
        let (st, o) = c.wait();
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        Ok(Pd {
            ptr: o.cast(),
            pended: c.inline == STATUS_PENDING,
            pump: self.pump.clone(),
            host: self.host,
        })
    }

    /// NdkBuildLAM for `len` bytes of `mdl` (buffer sized for every page the MDL spans),
    /// waiting for the completion when pended.
    pub fn build_lam(&self, mdl: &BuiltMdl, len: usize) -> Result<Lam, NTSTATUS> {
        let pages = (len + 4096 * 2).div_ceil(4096) as u32;
        let size = ndk_lam_size(pages).expect("LAM size");
        let mut words = vec![0u64; (size as usize).div_ceil(8)].into_boxed_slice();
        let mut lam_size = size;
        let mut fbo = 0;
        let ctx = Arc::new(RequestCtx::default());
        // SAFETY: live adapter; the MDL and the LAM buffer (`lam_size` bytes) outlive the
        // request (waited for below).
        let st = unsafe {
            (self.d().NdkBuildLAM)(
                self.ptr,
                mdl.as_ptr().cast_mut(),
                len,
                Some(on_request),
                ptr_of(&ctx),
                words.as_mut_ptr().cast(),
                &mut lam_size,
                &mut fbo,
            )
        };
        let r = Request {
            inline: st,
            ctx,
            pump: self.pump.clone(),
        };
        match r.wait() {
            STATUS_SUCCESS => Ok(Lam {
                words,
                size: lam_size,
                fbo,
            }),
            e => Err(e),
        }
    }

    /// NdkReleaseLAM.
    pub fn release_lam(&self, mut lam: Lam) {
        // SAFETY: a LAM this adapter built, released once.
        unsafe { (self.d().NdkReleaseLAM)(self.ptr, lam.words.as_mut_ptr().cast()) };
    }
}

// ------------------------------------------------------------------------------- PD

/// An NDK_PD.
pub struct Pd {
    /// The PD.
    pub ptr: *mut NDK_PD,
    /// Whether its creation pended.
    pub pended: bool,
    pump: Arc<Pump>,
    host: usize,
}

/// NdkCreateQp sizes and context.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    /// QPContext (reported in every result).
    pub context: usize,
    /// ReceiveQueueDepth (ignored with an SRQ).
    pub receive_depth: u32,
    /// InitiatorQueueDepth.
    pub initiator_depth: u32,
    /// MaxReceiveRequestSge (ignored with an SRQ).
    pub receive_sge: u32,
    /// MaxInitiatorRequestSge.
    pub initiator_sge: u32,
    /// InlineDataSize.
    pub inline_data: u32,
}

impl QpSpec {
    /// 16 deep both ways, 2 SGEs, no inline data.
    pub fn new(context: usize) -> Self {
        QpSpec {
            context,
            receive_depth: 16,
            initiator_depth: 16,
            receive_sge: 2,
            initiator_sge: 2,
            inline_data: 0,
        }
    }
}

impl Pd {
    fn d(&self) -> &'static NDK_PD_DISPATCH {
        // SAFETY: a live PD.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// NdkGetPrivilegedMemoryRegionToken.
    pub fn privileged_token(&self) -> u32 {
        let mut t = 0;
        // SAFETY: live PD.
        unsafe { (self.d().NdkGetPrivilegedMemoryRegionToken)(self.ptr, &mut t) };
        t
    }

    /// NdkCreateQp, raw.
    pub fn create_qp_raw(&self, rcq: &Cq, icq: &Cq, s: QpSpec) -> Creation {
        let ctx = Arc::new(CreateCtx::default());
        let mut out: *mut NDK_QP = null_mut();
        // SAFETY: live PD and CQs; context kept by the Creation.
        let st = unsafe {
            (self.d().NdkCreateQp)(
                self.ptr,
                rcq.ptr,
                icq.ptr,
                s.context as PVOID,
                s.receive_depth,
                s.initiator_depth,
                s.receive_sge,
                s.initiator_sge,
                s.inline_data,
                on_create,
                ptr_of(&ctx),
                &mut out,
            )
        };
        Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        }
    }

    fn qp_from(&self, c: &Creation, s: &QpSpec) -> Result<Qp, NTSTATUS> {
        let (st, o) = c.wait();
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        Ok(Qp {
            ptr: o.cast(),
            pended: c.inline == STATUS_PENDING,
            context: s.context,
            pump: self.pump.clone(),
            host: self.host,
        })
    }

    /// NdkCreateQp, waiting for CreateCompletion.
    pub fn create_qp(&self, rcq: &Cq, icq: &Cq, s: QpSpec) -> Result<Qp, NTSTATUS> {
        let c = self.create_qp_raw(rcq, icq, s);
        self.qp_from(&c, &s)
    }

    /// NdkCreateQpWithSrq, raw.
    pub fn create_qp_with_srq_raw(&self, rcq: &Cq, icq: &Cq, srq: &Srq, s: QpSpec) -> Creation {
        let ctx = Arc::new(CreateCtx::default());
        let mut out: *mut NDK_QP = null_mut();
        // SAFETY: live PD, CQs and SRQ; context kept by the Creation.
        let st = unsafe {
            (self.d().NdkCreateQpWithSrq)(
                self.ptr,
                rcq.ptr,
                icq.ptr,
                srq.ptr,
                s.context as PVOID,
                s.initiator_depth,
                s.initiator_sge,
                s.inline_data,
                on_create,
                ptr_of(&ctx),
                &mut out,
            )
        };
        Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        }
    }

    /// NdkCreateQpWithSrq, waiting for CreateCompletion.
    pub fn create_qp_with_srq(
        &self,
        rcq: &Cq,
        icq: &Cq,
        srq: &Srq,
        s: QpSpec,
    ) -> Result<Qp, NTSTATUS> {
        let c = self.create_qp_with_srq_raw(rcq, icq, srq, s);
        self.qp_from(&c, &s)
    }

    /// NdkCreateSrq, raw.
    pub fn create_srq_raw(&self, depth: u32, sge: u32, threshold: u32) -> (Creation, Arc<Notes>) {
        let ctx = Arc::new(CreateCtx::default());
        let notes = Arc::new(Notes::default());
        let mut out: *mut NDK_SRQ = null_mut();
        // SAFETY: live PD; contexts kept by the returned values.
        let st = unsafe {
            (self.d().NdkCreateSrq)(
                self.ptr,
                depth,
                sge,
                threshold,
                Some(on_notify),
                ptr_of(&notes),
                null_mut(),
                on_create,
                ptr_of(&ctx),
                &mut out,
            )
        };
        let c = Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        };
        (c, notes)
    }

    /// NdkCreateSrq (notification threshold `threshold`), waiting for CreateCompletion.
    pub fn create_srq(&self, depth: u32, sge: u32, threshold: u32) -> Result<Srq, NTSTATUS> {
        let (c, notes) = self.create_srq_raw(depth, sge, threshold);
        let (st, o) = c.wait();
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        Ok(Srq {
            ptr: o.cast(),
            pended: c.inline == STATUS_PENDING,
            notes,
            pump: self.pump.clone(),
            host: self.host,
        })
    }

    /// NdkCreateMr, raw.
    pub fn create_mr_raw(&self, fast_register: bool) -> Creation {
        let ctx = Arc::new(CreateCtx::default());
        let mut out: *mut NDK_MR = null_mut();
        // SAFETY: live PD; context kept by the Creation.
        let st = unsafe {
            (self.d().NdkCreateMr)(
                self.ptr,
                u8::from(fast_register),
                on_create,
                ptr_of(&ctx),
                &mut out,
            )
        };
        Creation {
            inline: st,
            out: out.cast(),
            ctx,
            pump: self.pump.clone(),
        }
    }

    /// NdkCreateMr, waiting for CreateCompletion if pended.
    pub fn create_mr(&self, fast_register: bool) -> Result<Mr, NTSTATUS> {
        let c = self.create_mr_raw(fast_register);
        let (st, o) = c.wait();
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        Ok(Mr {
            ptr: o.cast(),
            pended: c.inline == STATUS_PENDING,
            pump: self.pump.clone(),
        })
    }

    /// NdkClosePd; see the module docs.
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkClosePd)
    }
}

// ------------------------------------------------------------------------------- MR

/// An NDK_MR.
pub struct Mr {
    /// The MR.
    pub ptr: *mut NDK_MR,
    /// Whether its creation pended.
    pub pended: bool,
    pump: Arc<Pump>,
}

impl Mr {
    fn d(&self) -> &'static NDK_MR_DISPATCH {
        // SAFETY: a live MR.
        table(unsafe { (*self.ptr).Dispatch })
    }

    fn request(&self, inline: NTSTATUS, ctx: Arc<RequestCtx>) -> Request {
        Request {
            inline,
            ctx,
            pump: self.pump.clone(),
        }
    }

    /// NdkRegisterMr, raw (the MDL must outlive the request's completion).
    pub fn register_raw(&self, mdl: &BuiltMdl, len: usize, flags: u32) -> Request {
        let ctx = Arc::new(RequestCtx::default());
        // SAFETY: live MR; MDL with its PFN array; context kept by the Request.
        let st = unsafe {
            (self.d().NdkRegisterMr)(
                self.ptr,
                mdl.as_ptr().cast_mut(),
                len,
                flags,
                on_request,
                ptr_of(&ctx),
            )
        };
        self.request(st, ctx)
    }

    /// NdkRegisterMr (`NDK_MR_FLAG_*`), final status.
    pub fn register(&self, mdl: &BuiltMdl, len: usize, flags: u32) -> NTSTATUS {
        self.register_raw(mdl, len, flags).wait()
    }

    /// NdkDeregisterMr, raw.
    pub fn deregister_raw(&self) -> Request {
        let ctx = Arc::new(RequestCtx::default());
        // SAFETY: live MR; context kept by the Request.
        let st = unsafe { (self.d().NdkDeregisterMr)(self.ptr, on_request, ptr_of(&ctx)) };
        self.request(st, ctx)
    }

    /// NdkDeregisterMr, final status.
    pub fn deregister(&self) -> NTSTATUS {
        self.deregister_raw().wait()
    }

    /// NdkInitializeFastRegisterMr, raw.
    pub fn initialize_fast_register_raw(&self, pages: u32, remote: bool) -> Request {
        let ctx = Arc::new(RequestCtx::default());
        // SAFETY: live MR; context kept by the Request.
        let st = unsafe {
            (self.d().NdkInitializeFastRegisterMr)(
                self.ptr,
                pages,
                u8::from(remote),
                on_request,
                ptr_of(&ctx),
            )
        };
        self.request(st, ctx)
    }

    /// NdkInitializeFastRegisterMr, final status.
    pub fn initialize_fast_register(&self, pages: u32, remote: bool) -> NTSTATUS {
        self.initialize_fast_register_raw(pages, remote).wait()
    }

    /// NdkGetRemoteTokenFromMr.
    pub fn remote_token(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (self.d().NdkGetRemoteTokenFromMr)(self.ptr) }
    }

    /// NdkGetLocalTokenFromMr.
    pub fn local_token(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (self.d().NdkGetLocalTokenFromMr)(self.ptr) }
    }

    /// NdkCloseMr; see the module docs.
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseMr)
    }
}

// ------------------------------------------------------------------------------- CQ

/// An NDK_CQ.
pub struct Cq {
    /// The CQ.
    pub ptr: *mut NDK_CQ,
    /// Whether its creation pended.
    pub pended: bool,
    notes: Arc<Notes>,
    pump: Arc<Pump>,
    host: usize,
}

fn zero_result() -> NDK_RESULT {
    NDK_RESULT {
        Status: 0,
        BytesTransferred: 0,
        QPContext: null_mut(),
        RequestContext: null_mut(),
    }
}

fn zero_result_ex() -> NDK_RESULT_EX {
    // SAFETY: plain data; zero is a valid value of every field.
    unsafe { std::mem::zeroed() }
}

impl Cq {
    fn d(&self) -> &'static NDK_CQ_DISPATCH {
        // SAFETY: a live CQ.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// NdkArmCq (`NDK_CQ_NOTIFY_*`).
    pub fn arm(&self, ty: u32) {
        // SAFETY: live CQ.
        unsafe { (self.d().NdkArmCq)(self.ptr, ty) };
    }

    /// NdkGetCqResults for at most `n` results.
    pub fn results(&self, n: usize) -> Vec<NDK_RESULT> {
        let mut v = vec![zero_result(); n];
        // SAFETY: live CQ; `n` entries.
        let got = unsafe { (self.d().NdkGetCqResults)(self.ptr, v.as_mut_ptr(), n as u32) };
        assert!(got as usize <= n, "more results than asked for");
        v.truncate(got as usize);
        v
    }

    /// NdkGetCqResultsEx for at most `n` results.
    pub fn results_ex(&self, n: usize) -> Vec<NDK_RESULT_EX> {
        let mut v = vec![zero_result_ex(); n];
        // SAFETY: live CQ; `n` entries.
        let got = unsafe { (self.d().NdkGetCqResultsEx)(self.ptr, v.as_mut_ptr(), n as u32) };
        assert!(got as usize <= n, "more results than asked for");
        v.truncate(got as usize);
        v
    }

    /// Polls (NdkGetCqResults) until exactly `n` results came, then checks no more follow
    /// after a settle.
    pub fn wait_results(&self, n: usize) -> Vec<NDK_RESULT> {
        let mut all = Vec::new();
        self.pump.wait_for("CQ results", || {
            all.extend(self.results(n.saturating_sub(all.len()).max(1)));
            all.len() >= n
        });
        self.pump.settle();
        all.extend(self.results(4));
        assert_eq!(all.len(), n, "exactly {n} results");
        all
    }

    /// Like [`Cq::wait_results`] with NdkGetCqResultsEx.
    pub fn wait_results_ex(&self, n: usize) -> Vec<NDK_RESULT_EX> {
        let mut all = Vec::new();
        self.pump.wait_for("CQ results", || {
            all.extend(self.results_ex(n.saturating_sub(all.len()).max(1)));
            all.len() >= n
        });
        self.pump.settle();
        all.extend(self.results_ex(4));
        assert_eq!(all.len(), n, "exactly {n} results");
        all
    }

    /// Statuses of the NdkCqNotificationCallback calls so far.
    pub fn notifications(&self) -> Vec<NTSTATUS> {
        self.notes.get()
    }

    /// The simulated processor each NdkCqNotificationCallback call ran on.
    pub fn notification_processors(&self) -> Vec<Option<u32>> {
        self.notes.processors()
    }

    /// NdkCloseCq; see the module docs.
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseCq)
    }
}

// ------------------------------------------------------------------------------- SRQ

/// An NDK_SRQ.
pub struct Srq {
    /// The SRQ.
    pub ptr: *mut NDK_SRQ,
    /// Whether its creation pended.
    pub pended: bool,
    notes: Arc<Notes>,
    pump: Arc<Pump>,
    host: usize,
}

impl Srq {
    fn d(&self) -> &'static NDK_SRQ_DISPATCH {
        // SAFETY: a live SRQ.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// NdkSrqReceive; inline status.
    pub fn receive(&self, ctx: usize, sgl: &[NDK_SGE]) -> NTSTATUS {
        // SAFETY: live SRQ; `sgl` has `len` entries.
        unsafe { (self.d().NdkSrqReceive)(self.ptr, ctx as PVOID, sgl.as_ptr(), sgl.len() as u32) }
    }

    /// NdkModifySrq, raw.
    pub fn modify_raw(&self, depth: u32, threshold: u32) -> Request {
        let ctx = Arc::new(RequestCtx::default());
        // SAFETY: live SRQ; context kept by the Request.
        let st = unsafe {
            (self.d().NdkModifySrq)(self.ptr, depth, threshold, on_request, ptr_of(&ctx))
        };
        Request {
            inline: st,
            ctx,
            pump: self.pump.clone(),
        }
    }

    /// NdkModifySrq, final status.
    pub fn modify(&self, depth: u32, threshold: u32) -> NTSTATUS {
        self.modify_raw(depth, threshold).wait()
    }

    /// Statuses of the SRQ notification callback calls so far.
    pub fn notifications(&self) -> Vec<NTSTATUS> {
        self.notes.get()
    }

    /// NdkCloseSrq; see the module docs.
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseSrq)
    }
}

// ------------------------------------------------------------------------------- QP

/// An NDK_QP.
pub struct Qp {
    /// The QP.
    pub ptr: *mut NDK_QP,
    /// Whether its creation pended.
    pub pended: bool,
    /// Its QPContext.
    pub context: usize,
    pump: Arc<Pump>,
    host: usize,
}

impl Qp {
    fn d(&self) -> &'static NDK_QP_DISPATCH {
        // SAFETY: a live QP.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// Host index.
    pub fn host(&self) -> usize {
        self.host
    }

    /// The device QP handle (through the provider object).
    pub fn handle(&self) -> u32 {
        // SAFETY: a live QP of this provider.
        let q = unsafe { ObjRef::<pvrdma_ndk::ndk::Qp>::borrow(self.ptr) }.expect("live QP");
        q.handle()
    }

    /// NdkSend.
    pub fn send(&self, ctx: usize, sgl: &[NDK_SGE], flags: u32) -> NTSTATUS {
        // SAFETY: live QP; `sgl` has `len` entries.
        unsafe {
            (self.d().NdkSend)(
                self.ptr,
                ctx as PVOID,
                sgl.as_ptr(),
                sgl.len() as u32,
                flags,
            )
        }
    }

    /// NdkReceive.
    pub fn receive(&self, ctx: usize, sgl: &[NDK_SGE]) -> NTSTATUS {
        // SAFETY: live QP; `sgl` has `len` entries.
        unsafe { (self.d().NdkReceive)(self.ptr, ctx as PVOID, sgl.as_ptr(), sgl.len() as u32) }
    }

    /// NdkRead of `remote_va`/`token` into `sgl`.
    pub fn read(
        &self,
        ctx: usize,
        sgl: &[NDK_SGE],
        remote_va: u64,
        token: u32,
        flags: u32,
    ) -> NTSTATUS {
        // SAFETY: live QP; `sgl` has `len` entries.
        unsafe {
            (self.d().NdkRead)(
                self.ptr,
                ctx as PVOID,
                sgl.as_ptr(),
                sgl.len() as u32,
                remote_va,
                token,
                flags,
            )
        }
    }

    /// NdkWrite of `sgl` to `remote_va`/`token`.
    pub fn write(
        &self,
        ctx: usize,
        sgl: &[NDK_SGE],
        remote_va: u64,
        token: u32,
        flags: u32,
    ) -> NTSTATUS {
        // SAFETY: live QP; `sgl` has `len` entries.
        unsafe {
            (self.d().NdkWrite)(
                self.ptr,
                ctx as PVOID,
                sgl.as_ptr(),
                sgl.len() as u32,
                remote_va,
                token,
                flags,
            )
        }
    }

    /// NdkSendAndInvalidate (`token` is the peer's token to invalidate).
    pub fn send_and_invalidate(
        &self,
        ctx: usize,
        sgl: &[NDK_SGE],
        flags: u32,
        token: u32,
    ) -> NTSTATUS {
        // SAFETY: live QP; `sgl` has `len` entries.
        unsafe {
            (self.d().NdkSendAndInvalidate)(
                self.ptr,
                ctx as PVOID,
                sgl.as_ptr(),
                sgl.len() as u32,
                flags,
                token,
            )
        }
    }

    /// NdkFastRegister of `mr` over `pages` (adapter logical addresses).
    pub fn fast_register(
        &self,
        ctx: usize,
        mr: &Mr,
        pages: &[u64],
        fbo: u32,
        len: usize,
        va: u64,
        flags: u32,
    ) -> NTSTATUS {
        // SAFETY: live QP and MR; `pages` has `len` entries.
        unsafe {
            (self.d().NdkFastRegister)(
                self.ptr,
                ctx as PVOID,
                mr.ptr,
                pages.len() as u32,
                pages.as_ptr().cast(),
                fbo,
                len,
                va as PVOID,
                flags,
            )
        }
    }

    /// NdkInvalidate of a fast-registered MR.
    pub fn invalidate(&self, ctx: usize, mr: &Mr, flags: u32) -> NTSTATUS {
        // SAFETY: live QP and MR.
        unsafe { (self.d().NdkInvalidate)(self.ptr, ctx as PVOID, mr.ptr.cast(), flags) }
    }

    /// NdkFlush.
    pub fn flush(&self) {
        // SAFETY: live QP.
        unsafe { (self.d().NdkFlush)(self.ptr) };
    }

    /// NdkCloseQp, after parting the kit connection of this QP if it has one; see the
    /// module docs.
    pub fn close(self) -> NTSTATUS {
        self.pump.part_link_of(self.ptr);
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseQp)
    }

    /// NdkCloseQp, waiting for a pended close's CloseCompletion and nothing more: in
    /// virtual time, no timer (TIMEWAIT) runs out meanwhile, as [`Self::close`]'s settle
    /// lets them.
    pub fn close_at_once(self) -> NTSTATUS {
        let ctx = Arc::new(CloseCtx::default());
        // SAFETY: a live QP, closed once; the context outlives the call and its completion.
        let st = unsafe { (self.d().NdkCloseQp)(self.ptr.cast(), on_close, ptr_of(&ctx)) };
        if st == STATUS_PENDING {
            self.pump
                .wait_for("CloseCompletion", || ctx.0.load(Ordering::SeqCst) != 0);
        }
        st
    }
}

/// PSN of the direction a → b (b's RQ PSN); b → a uses `PSN_BA`.
pub const PSN_AB: u32 = 0x0010_0000;
/// PSN of the direction b → a.
pub const PSN_BA: u32 = 0x0020_0000;

/// Raw wiring, for clusters without connection management: both QPs are INIT since
/// creation (the provider moves them there, §5.3); RTR and RTS through the hardware layer's
/// MODIFY_QP with the peer's QPN (from the peer model), GID and MAC, then both are marked
/// connected so the NDK layer accepts initiator requests.
pub fn wire(c: &Cluster, a: &Qp, b: &Qp) {
    // Paired hosts always run their engines (the function starts one when the interface
    // attaches); QPs wired beside them are ones the CM never sees.
    assert!(
        !c.cm || c.is_paired(),
        "a connection-managed cluster connects through the CM"
    );
    let qpn = |q: &Qp| {
        let h = q.handle();
        c.hosts[q.host]
            .model
            .with_core(|core| core.qp_info(h))
            .expect("QP in the model")
            .qpn
    };
    let (qa, qb) = (qpn(a), qpn(b));
    for (me, peer, peer_qpn, sq, rq) in [(a, b, qb, PSN_AB, PSN_BA), (b, a, qa, PSN_BA, PSN_AB)] {
        let ph = &c.hosts[peer.host];
        let mut at = rts_attrs(peer_qpn);
        at.sq_psn = sq;
        at.rq_psn = rq;
        at.ah_attr.dgid = ph.gid;
        at.ah_attr.dmac = ph.mac;
        at.ah_attr.sgid_index = 0;
        rc_rtr_rts(&c.hosts[me.host].dev, me.handle(), at).expect("RTR/RTS");
    }
    for q in [a, b] {
        // SAFETY: a live QP of this provider.
        unsafe { set_qp_connected(q.ptr, true) };
    }
}

// ------------------------------------------------------------------------------- memory

/// An SGE by consumer virtual address (memory registered through an MR).
pub fn sge(va: u64, len: u32, token: u32) -> NDK_SGE {
    NDK_SGE {
        Anonymous: NDK_SGE_0 {
            VirtualAddress: va as PVOID,
        },
        Length: len,
        MemoryRegionToken: token,
    }
}

/// An SGE by logical (bus) address, for the privileged token or fast-registered memory.
pub fn sge_logical(addr: u64, len: u32, token: u32) -> NDK_SGE {
    NDK_SGE {
        Anonymous: NDK_SGE_0 {
            LogicalAddress: addr as _,
        },
        Length: len,
        MemoryRegionToken: token,
    }
}

/// `len` pattern bytes derived from `seed` (distinct per seed and offset).
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// Writes `pattern(seed, len)` at `off` of `mem`; returns it.
pub fn fill(mem: &ConsumerMem, off: usize, seed: u8, len: usize) -> Vec<u8> {
    let p = pattern(seed, len);
    mem.buf.write(off, &p);
    p
}

/// Reads `len` bytes at `off` of `mem`.
pub fn read(mem: &ConsumerMem, off: usize, len: usize) -> Vec<u8> {
    mem.buf.read_vec(off, len)
}

/// Asserts `mem` holds `want` at `off`.
pub fn verify(mem: &ConsumerMem, off: usize, want: &[u8]) {
    assert_eq!(read(mem, off, want.len()), want, "bytes at offset {off}");
}

/// Consumer memory registered through an MR: the memory, its MDL (kept alive with the
/// registration) and the MR.
pub struct Registered {
    /// The memory.
    pub mem: ConsumerMem,
    /// The MDL the MR was registered with.
    pub mdl: BuiltMdl,
    /// The MR.
    pub mr: Mr,
}

impl Registered {
    /// Creates an MR on `pd`, and registers all `pages` of fresh memory at `va` on `host`
    /// with `flags`; panics unless every step succeeds.
    pub fn new(host: &Host, pd: &Pd, pages: usize, va: u64, flags: u32) -> Registered {
        let mem = host.mem(pages, va);
        let len = pages * 4096;
        let mdl = mem.mdl(0, len as u32);
        let mr = pd.create_mr(false).expect("NdkCreateMr");
        assert_eq!(
            mr.register(&mdl, len, flags),
            STATUS_SUCCESS,
            "NdkRegisterMr"
        );
        Registered { mem, mdl, mr }
    }

    /// An SGE over `len` bytes at `off` with the local token.
    pub fn sge(&self, off: u64, len: u32) -> NDK_SGE {
        sge(self.mem.va + off, len, self.mr.local_token())
    }

    /// Deregisters and closes the MR; returns the memory.
    pub fn close(self) -> ConsumerMem {
        assert_eq!(self.mr.deregister(), STATUS_SUCCESS, "NdkDeregisterMr");
        self.mr.close();
        self.mem
    }
}
