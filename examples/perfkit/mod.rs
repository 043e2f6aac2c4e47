//! Shared by `examples/ndkperf.rs`, `benches/instructions.rs` and `benches/datapath.rs`:
//! N simulated hosts on one `pvrdma_sim::world::World`, each with the driver's hardware
//! layer probed against its device model, the NDK layer over its verbs (`pvrdma::verbs::Verbs`,
//! routed by its `NdkDevice`) and one adapter opened through `NdkDevice::open_adapter`; every NDK
//! call below goes through the dispatch tables, as a kernel consumer's. Creates that answer
//! STATUS_PENDING are waited for through their CreateCompletion/RequestCompletion.
//!
//! Connections ([`Cluster::connect`]): every host runs its connection engine (a `Neighbours`
//! resolver knowing every host) and QPs connect through NdkListen / NdkConnect / NdkAccept /
//! NdkCompleteConnect, one listener per host; they part with NdkDisconnect
//! ([`Cluster::disconnect_all`]). QP1's MADs need the model to see every doorbell, which an
//! unhooked harness does not hand it: while an unhooked cluster connects or disconnects, every
//! pump first has each model kick QP1's queues (`Device::kick_gsi_queues`), and a connection
//! is made only once every MAD sent has arrived, so no CM traffic is left for a measurement.
//!
//! Doorbells: with `hooked`, every UAR store is also forwarded to the model and counted (the
//! host hook of `os::Uar`). Without it (instruction counting) a doorbell is the bare volatile
//! store the Windows build performs, and the harness forwards the last stored word itself
//! ([`Cluster::kick`]), outside the measured calls.
#![allow(dead_code, clippy::missing_safety_doc)]

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pvrdma_host::{HostDevice, HostPlatform};
use pvrdma_ndk::ndk::connect::EngineConfig;
use pvrdma_ndk::ndk::object::ObjRef;
use pvrdma_ndk::ndk::{NdkDevice, Qp};
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::net::Neighbours;
use pvrdma_ndk::os::{DmaAllocator, DmaRegion, Platform};
use pvrdma_ndk::pvrdma::device::{Device as DrvDevice, DeviceConfig as DrvConfig};
use pvrdma_ndk::pvrdma::verbs::Verbs;
use pvrdma_sim::world::World;

use crate::common::ndk::{SockBuf, guid_from_mac};
use crate::common::{DEFAULT_UAR_PFN, PlatformSink, SimBar1, SimDma};

/// One simulated host.
pub struct Node {
    /// Index in the world.
    pub index: usize,
    /// OS seam (DPC executor, UAR page).
    pub platform: Arc<HostPlatform>,
    /// The driver's hardware layer.
    pub dev: Arc<DrvDevice>,
    /// The verbs the NDK layer is built on.
    pub hw: Arc<Verbs>,
    /// NDK device.
    pub ndk: Arc<NdkDevice>,
    /// The open adapter.
    pub adapter: *mut NDK_ADAPTER,
    /// One PD.
    pub pd: *mut NDK_PD,
    /// Its privileged token (local SGEs address memory by logical address with it).
    pub token: u32,
    /// DMA allocator for data buffers.
    pub dma: Arc<SimDma>,
    /// UAR stores seen by the hook (hooked mode), CQ POLL kicks excepted.
    pub doorbells: Arc<AtomicU64>,
    /// CQ POLL doorbells (offset 0x4 with bit 31, pvrdma.md §12): the provider rings one when
    /// a poll runs the ring dry (Linux's pvrdma_poll_one), so a poller spinning on an idle CQ
    /// rings them at its polling rate, not per request.
    pub poll_doorbells: Arc<AtomicU64>,
    /// Wall-clock ns spent inside the hook (the model's doorbell work), so a provider call's
    /// time can leave it out.
    pub hook_ns: Arc<AtomicU64>,
    /// The port MAC.
    pub mac: [u8; 6],
    /// The bound GID.
    pub gid: [u8; 16],
    /// The GID's IP address.
    pub ip: IpAddr,
}

impl Node {
    /// Interrupts the driver's ISR has taken, all vectors.
    pub fn interrupts(&self) -> u64 {
        self.dev.stats().interrupts.iter().sum()
    }

    /// DPC routines run on this host's processors.
    pub fn dpcs(&self) -> u64 {
        let ex = self.platform.executor();
        (0..PROCESSORS).map(|p| ex.runs_on(p)).sum()
    }
}

/// Heap accounting for memory figures: a counting global allocator (install it with
/// `#[global_allocator] static A: heap::Counting = heap::Counting;`) that counts live bytes
/// allocated on the DPC threads and, on the thread that calls [`heap::measure`], inside it;
/// DMA memory (reported by the OS seam) and the harness's DMA bookkeeping are left out by
/// [`heap::Uncounted`]. The world runs on the measuring thread outside `measure`, so the
/// model's own allocations are not counted.
pub mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicIsize, Ordering};

    use pvrdma_ndk::os::{DmaAllocator, DmaRegion};

    static LIVE: AtomicIsize = AtomicIsize::new(0);

    thread_local! {
        /// 1: counted (DPC threads), 0: not counted; the measuring thread starts at 0 and
        /// `measure` raises it, `Uncounted` lowers it.
        static COUNT: Cell<i32> = const { Cell::new(1) };
    }

    fn counted() -> bool {
        COUNT.try_with(|c| c.get() > 0).unwrap_or(false)
    }

    fn adjust(d: i32) {
        let _ = COUNT.try_with(|c| c.set(c.get() + d));
    }

    /// Live bytes counted so far.
    pub fn live() -> isize {
        LIVE.load(Ordering::SeqCst)
    }

    /// Marks the calling thread as the measuring thread (not counted outside `measure`).
    pub fn main_thread() {
        adjust(-1);
    }

    /// Runs `f` with the calling thread's allocations counted.
    pub fn measure<R>(f: impl FnOnce() -> R) -> R {
        adjust(1);
        let r = f();
        adjust(-1);
        r
    }

    /// Runs `f` with the calling thread's allocations not counted.
    pub fn uncounted<R>(f: impl FnOnce() -> R) -> R {
        adjust(-1);
        let r = f();
        adjust(1);
        r
    }

    /// The system allocator, counting.
    pub struct Counting;

    // SAFETY: every call is forwarded unchanged to `System`; the counter has no effect on
    // the memory returned.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            if counted() {
                LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
            }
            // SAFETY: caller contract of `GlobalAlloc::alloc`, forwarded.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            if counted() {
                LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
            }
            // SAFETY: `p` came from `System` with layout `l` (caller contract).
            unsafe { System.dealloc(p, l) }
        }
    }

    /// A DMA allocator whose allocations (regions and bookkeeping) are not counted.
    pub struct Uncounted(pub Arc<dyn DmaAllocator>);

    // SAFETY: forwards to an allocator that upholds the contract.
    unsafe impl DmaAllocator for Uncounted {
        fn alloc(&self, len: usize) -> Option<DmaRegion> {
            uncounted(|| self.0.alloc(len))
        }
        fn free(&self, region: DmaRegion) {
            uncounted(|| self.0.free(region));
        }
    }
}

/// Simulated processors per host.
pub const PROCESSORS: u32 = 2;

/// Hosts on one fabric.
pub struct Cluster {
    /// The fabric and models.
    pub world: Arc<World>,
    /// The hosts.
    pub nodes: Vec<Node>,
    /// Whether doorbells reach the model through the hook.
    pub hooked: bool,
    /// Unhooked: while set, every pump has each model kick QP1's queues first (connection
    /// setup and teardown, whose QP1 doorbells the harness does not forward).
    kick_qp1: Arc<AtomicBool>,
    /// One listener per host (index = host), made on the first connection to it.
    listeners: Mutex<Vec<Option<Listening>>>,
    /// The CM connections, in the order they were made.
    links: Mutex<Vec<Link>>,
    /// The OutboundReadLimit the last CM connection negotiated (0: none made).
    outbound_reads: AtomicU32,
}

/// Connection slots of every host's engine: 1024 connections and as many in TIMEWAIT.
const CM_CAPACITY: usize = 2048;
/// InboundReadLimit and OutboundReadLimit every connection asks for (the adapter caps them).
pub const READ_LIMIT: u32 = 16;
/// The port every host listens on (perftest's default), so a capture's REQs name it.
pub const LISTEN_PORT: u16 = 18515;

/// A listener and the connectors its NdkConnectEventCallback delivered.
struct Listening {
    ptr: *mut NDK_LISTENER,
    incoming: Box<Mutex<VecDeque<usize>>>,
    addr: SocketAddr,
}

/// Both connectors of a connection, each with its disconnect-event count.
struct Link {
    host: [usize; 2],
    connector: [*mut NDK_CONNECTOR; 2],
    disconnects: [Box<AtomicU32>; 2],
}

unsafe extern "system" fn no_notify(_: PVOID, _: NTSTATUS) {}

/// Where one CreateCompletion or RequestCompletion lands (the callback context).
pub struct Done {
    status: AtomicU32,
    obj: AtomicUsize,
}

/// `status` before the completion ran.
const NOT_YET: u32 = u32::MAX;

impl Done {
    /// Nothing completed yet.
    pub fn new() -> Done {
        Done {
            status: AtomicU32::new(NOT_YET),
            obj: AtomicUsize::new(0),
        }
    }
    fn ctx(&self) -> PVOID {
        self as *const Done as PVOID
    }
    fn finished(&self) -> bool {
        self.status.load(Ordering::SeqCst) != NOT_YET
    }
}

unsafe extern "system" fn on_create(ctx: PVOID, st: NTSTATUS, obj: *mut NDK_OBJECT_HEADER) {
    // SAFETY: the context is a `Done` the waiting caller keeps alive until it has run.
    let d = unsafe { &*(ctx as *const Done) };
    d.obj.store(obj as usize, Ordering::SeqCst);
    d.status.store(st as u32, Ordering::SeqCst);
}

unsafe extern "system" fn on_request(ctx: PVOID, st: NTSTATUS) {
    // SAFETY: as in `on_create`.
    let d = unsafe { &*(ctx as *const Done) };
    d.status.store(st as u32, Ordering::SeqCst);
}

/// CQ notification callback: counts into the `AtomicU64` its context points at.
pub unsafe extern "system" fn count_notify(ctx: PVOID, _: NTSTATUS) {
    // SAFETY: the context is an `AtomicU64` the caller keeps alive while the CQ exists.
    let c = unsafe { &*(ctx as *const AtomicU64) };
    c.fetch_add(1, Ordering::SeqCst);
}

/// The dispatch table of an NDK object.
pub fn disp<'a, D>(dispatch: *const D) -> &'a D {
    // SAFETY: providers' dispatch tables are statics.
    unsafe { &*dispatch }
}

/// An SGE by logical address.
pub fn sge(addr: u64, len: u32, token: u32) -> NDK_SGE {
    NDK_SGE {
        Anonymous: NDK_SGE_0 {
            LogicalAddress: addr as _,
        },
        Length: len,
        MemoryRegionToken: token,
    }
}

/// A data buffer in host memory the model can reach.
pub struct Buf {
    /// Region (logical = bus address).
    pub region: DmaRegion,
}

impl Buf {
    /// Bus address.
    pub fn addr(&self) -> u64 {
        self.region.logical
    }
    /// Bytes.
    pub fn len(&self) -> usize {
        self.region.len
    }
    /// Page addresses.
    pub fn pages(&self) -> Vec<NDK_LOGICAL_ADDRESS> {
        (0..self.region.len / 4096)
            .map(|i| (self.region.logical + (i as u64) * 4096) as _)
            .collect()
    }
    /// The bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the region is `len` bytes of host memory owned by this Buf for its life;
        // the model writes it only while the harness runs the world, never concurrently
        // with a reader here (deterministic mode).
        unsafe { std::slice::from_raw_parts_mut(self.region.cpu.as_ptr(), self.region.len) }
    }
}

/// A remotely accessible registration (FRMR, fast-registered).
#[derive(Clone, Copy)]
pub struct Remote {
    /// The MR.
    pub mr: *mut NDK_MR,
    /// Address peers use.
    pub va: u64,
    /// Remote token.
    pub rkey: u32,
}

impl Cluster {
    /// `n` hosts (n ≤ 8). `hooked`: doorbells are forwarded to the model by the UAR hook.
    /// The models complete lazily (pvrdma.md M48) when `PVRDMA_SIM_LAZY=1`.
    pub fn new(n: u8, hooked: bool) -> Cluster {
        let lazy = std::env::var("PVRDMA_SIM_LAZY").is_ok_and(|v| v == "1");
        Self::with_completion(n, hooked, lazy)
    }

    /// [`Cluster::new`] with the models' lazy completion (M48) on or off.
    pub fn with_completion(n: u8, hooked: bool, lazy: bool) -> Cluster {
        let mut w = World::new(0x5EED);
        for i in 0..n {
            let mut cfg = pvrdma_sim::world::NodeConfig::ipv4(i);
            cfg.device.lazy_completion = lazy;
            // Room for 1024 RC QPs (and a CQ each) besides the special QPs.
            cfg.device.caps.max_qp = 2048;
            cfg.device.caps.max_cq = 2048;
            w.add_node(cfg);
        }
        let world = Arc::new(w);
        let kick_qp1 = Arc::new(AtomicBool::new(false));
        let mut nodes = Vec::new();
        for i in 0..n as usize {
            let node = world.node(i);
            let model = node.device().clone();
            let dma = SimDma::new(node.dma().clone());
            let doorbells = Arc::new(AtomicU64::new(0));
            let poll_doorbells = Arc::new(AtomicU64::new(0));
            let hook_ns = Arc::new(AtomicU64::new(0));
            let hook: Option<pvrdma_ndk::os::mmio::DoorbellHook> = if hooked {
                let m = model.clone();
                let c = doorbells.clone();
                let p = poll_doorbells.clone();
                let spent = hook_ns.clone();
                Some(Arc::new(move |off, val| {
                    let is_poll = off == 0x4 && val & (1 << 31) != 0;
                    if is_poll { &p } else { &c }.fetch_add(1, Ordering::Relaxed);
                    let t = std::time::Instant::now();
                    m.uar_write32(off, val);
                    // CAST: a single doorbell's work is far below u64::MAX ns.
                    spent.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }))
            } else {
                None
            };
            let w = world.clone();
            let kicking = kick_qp1.clone();
            let platform = HostPlatform::new(
                HostDevice {
                    bar1: SimBar1::new(model.clone()),
                    dma: Arc::new(heap::Uncounted(dma.clone())),
                    doorbell: hook,
                    uar_pfn: DEFAULT_UAR_PFN,
                    pump: Some(Arc::new(move || {
                        if kicking.load(Ordering::SeqCst) {
                            (0..w.len()).for_each(|d| w.device(d).kick_gsi_queues());
                        }
                        w.run_until_idle();
                        std::thread::yield_now();
                    })),
                },
                PROCESSORS,
            );
            world.set_interrupt_sink(i, Arc::new(PlatformSink(Arc::downgrade(&platform))));
            let gid = node.gid();
            let p: Arc<dyn Platform> = platform.clone();
            // The connection engine binds the GID.
            let dev = Arc::new(
                DrvDevice::probe(p, &DrvConfig::default()).expect("probe against the model"),
            );
            let hw = Verbs::new(dev.clone()).expect("hardware tables");
            let ndk = NdkDevice::new(hw.clone()).expect("NDK device");
            let adapter = ndk
                .open_adapter(NDK_VERSION { Major: 2, Minor: 1 })
                .expect("open adapter");
            let mut pd = null_mut();
            let create = disp(unsafe_dispatch_adapter(adapter)).NdkCreatePd;
            let done = Done::new();
            // SAFETY: a live adapter; `pd` is a valid out pointer; `done` outlives the wait.
            let st = unsafe { create(adapter, on_create, done.ctx(), &mut pd) };
            let pd = created(&platform, st, pd, &done, "NdkCreatePd");
            let mut token = 0;
            let get = disp(unsafe_dispatch_pd(pd)).NdkGetPrivilegedMemoryRegionToken;
            // SAFETY: a live PD; `token` is a valid out pointer.
            unsafe { get(pd, &mut token) };
            nodes.push(Node {
                index: i,
                platform,
                dev,
                hw,
                ndk,
                adapter,
                pd,
                token,
                dma,
                doorbells,
                hook_ns,
                poll_doorbells,
                mac: node.mac(),
                gid,
                ip: pvrdma_ndk::cm::addr::ip_from_gid(gid),
            });
        }
        start_engines(&nodes);
        Cluster {
            world,
            nodes,
            hooked,
            kick_qp1,
            listeners: Mutex::new(Vec::new()),
            links: Mutex::new(Vec::new()),
            outbound_reads: AtomicU32::new(0),
        }
    }

    /// Runs the devices and the fabric until nothing is left to do.
    pub fn run(&self) {
        self.world.run_until_idle();
    }

    /// Unhooked mode: hands the last word stored at UAR offset `off` of host `i` to its
    /// model, as the device would have seen the store.
    pub fn kick(&self, i: usize, off: u32) {
        if !self.hooked {
            let v = self.nodes[i].platform.uar_word(off);
            self.world.device(i).uar_write32(off, v);
        }
    }

    /// Waits (pumping the world) for `done` on host `i`; see [`created`].
    fn created<T>(&self, i: usize, st: NTSTATUS, out: *mut T, done: &Done, what: &str) -> *mut T {
        created(&self.nodes[i].platform, st, out, done, what)
    }

    /// NdkCreateCq with a notification counter (or none).
    pub fn cq(&self, i: usize, depth: u32, notify: Option<&AtomicU64>) -> *mut NDK_CQ {
        let a = self.nodes[i].adapter;
        let mut cq = null_mut();
        let (f, ctx): (NDK_FN_CQ_NOTIFICATION_CALLBACK, PVOID) = match notify {
            Some(c) => (count_notify, c as *const AtomicU64 as PVOID),
            None => (no_notify, null_mut()),
        };
        let create = disp(unsafe_dispatch_adapter(a)).NdkCreateCq;
        let done = Done::new();
        // SAFETY: a live adapter; the context outlives the CQ (caller); `cq` is an out
        // pointer; `done` outlives the wait below.
        let st = unsafe { create(a, depth, f, ctx, null_mut(), on_create, done.ctx(), &mut cq) };
        self.created(i, st, cq, &done, "NdkCreateCq")
    }

    /// NdkCreateQp (the QP comes back in INIT).
    pub fn qp(
        &self,
        i: usize,
        rcq: *mut NDK_CQ,
        icq: *mut NDK_CQ,
        depth: u32,
        sge: u32,
    ) -> *mut NDK_QP {
        let pd = self.nodes[i].pd;
        let mut qp = null_mut();
        let create = disp(unsafe_dispatch_pd(pd)).NdkCreateQp;
        let done = Done::new();
        // SAFETY: live PD and CQs of this adapter; `qp` is an out pointer; `done` outlives
        // the wait below.
        let st = unsafe {
            create(
                pd,
                rcq,
                icq,
                null_mut(),
                depth,
                depth,
                sge,
                sge,
                0,
                on_create,
                done.ctx(),
                &mut qp,
            )
        };
        self.created(i, st, qp, &done, "NdkCreateQp")
    }

    /// Connects `qa` on host `a` and `qb` on host `b` through the CM.
    pub fn connect(&self, a: usize, qa: *mut NDK_QP, b: usize, qb: *mut NDK_QP) {
        self.cm_traffic(|| self.cm_connect(a, qa, b, qb));
    }

    /// Runs `f`, which exchanges MADs, then waits until the CM's traffic is over: every MAD
    /// sent has arrived, no host runs a DPC, and a whole pump raised no interrupt (unhooked,
    /// its kicks found no QP1 completion left unreaped). Unhooked, every pump from the start
    /// of `f` to then has each model kick QP1's queues (see the module docs).
    fn cm_traffic<R>(&self, f: impl FnOnce() -> R) -> R {
        self.kick_qp1.store(!self.hooked, Ordering::SeqCst);
        let r = f();
        let seen = std::cell::Cell::new(None);
        let over = self.nodes[0].platform.wait_until(
            &|| {
                let (sent, arrived) = self.mads();
                let interrupts: u64 = self.nodes.iter().map(Node::interrupts).sum();
                let quiet = seen.replace(Some(interrupts)) == Some(interrupts);
                quiet
                    && sent == arrived
                    && self.nodes.iter().all(|n| n.platform.executor().is_idle())
                    && self.world.is_idle()
            },
            WAIT_NS,
        );
        assert!(over, "CM traffic still under way: MADs {:?}", self.mads());
        self.kick_qp1.store(false, Ordering::SeqCst);
        r
    }

    /// CM MADs (sent, received) over every host.
    pub fn mads(&self) -> (u64, u64) {
        self.nodes.iter().fold((0, 0), |(o, i), n| {
            let s = pvrdma_ndk::ndk::connect::engine(&n.ndk)
                .expect("a connection engine")
                .stats();
            (o + s.mads_out, i + s.mads_in)
        })
    }

    /// NdkConnect from `a` to the listener on `b`, NdkAccept of `qb` from the connect event,
    /// NdkCompleteConnect.
    fn cm_connect(&self, a: usize, qa: *mut NDK_QP, b: usize, qb: *mut NDK_QP) {
        let (na, nb) = (&self.nodes[a], &self.nodes[b]);
        let mut listeners = self.listeners.lock().unwrap();
        if listeners.len() <= b {
            listeners.resize_with(b + 1, || None);
        }
        let l = listeners[b].get_or_insert_with(|| listen(nb));
        let client = create_connector(na);
        let disconnects = [Box::new(AtomicU32::new(0)), Box::new(AtomicU32::new(0))];
        let (src, src_len) = SockBuf::from(SocketAddr::new(na.ip, 0));
        let (dst, dst_len) = SockBuf::from(l.addr);
        let connect_done = Done::new();
        let d = disp(unsafe_dispatch_connector(client));
        // SAFETY: live connector and QP of host `a`; the addresses outlive the call and
        // `connect_done` outlives the wait for its completion below.
        let st = unsafe {
            (d.NdkConnect)(
                client,
                qa,
                src.0.as_ptr().cast(),
                src_len,
                dst.0.as_ptr().cast(),
                dst_len,
                READ_LIMIT,
                READ_LIMIT,
                null_mut(),
                0,
                on_request,
                connect_done.ctx(),
            )
        };
        assert_eq!(st, STATUS_PENDING, "NdkConnect");
        let incoming = &l.incoming;
        let got = nb
            .platform
            .wait_until(&|| !incoming.lock().unwrap().is_empty(), WAIT_NS);
        assert!(got, "no NdkConnectEventCallback");
        let server = incoming.lock().unwrap().pop_front().unwrap() as *mut NDK_CONNECTOR;
        let accept_done = Done::new();
        let d = disp(unsafe_dispatch_connector(server));
        // SAFETY: the connector the connect event delivered and a live QP of host `b`;
        // the counter and `accept_done` outlive the connector and the wait below.
        let st = unsafe {
            (d.NdkAccept)(
                server,
                qb,
                READ_LIMIT,
                READ_LIMIT,
                null_mut(),
                0,
                Some(on_disconnect),
                &*disconnects[1] as *const AtomicU32 as PVOID,
                on_request,
                accept_done.ctx(),
            )
        };
        let accept_st = st;
        assert_eq!(
            finish_request(na, STATUS_PENDING, &connect_done, "NdkConnect"),
            STATUS_SUCCESS
        );
        let (mut ird, mut ord, mut len) = (0, 0, 0);
        let d = disp(unsafe_dispatch_connector(client));
        // SAFETY: a connector whose connect completed; no private data buffer (length 0).
        let st =
            unsafe { (d.NdkGetConnectionData)(client, &mut ird, &mut ord, null_mut(), &mut len) };
        assert!(
            st == STATUS_SUCCESS || st == STATUS_BUFFER_TOO_SMALL,
            "NdkGetConnectionData {st:#x}"
        );
        self.outbound_reads.store(ord, Ordering::SeqCst);
        let complete_done = Done::new();
        // SAFETY: a connector whose connect completed; as above.
        let st = unsafe {
            (d.NdkCompleteConnect)(
                client,
                Some(on_disconnect),
                &*disconnects[0] as *const AtomicU32 as PVOID,
                on_request,
                complete_done.ctx(),
            )
        };
        let st = finish_request(na, st, &complete_done, "NdkCompleteConnect");
        assert_eq!(st, STATUS_SUCCESS);
        // The RTU the completion sent ends the accept.
        let st = finish_request(nb, accept_st, &accept_done, "NdkAccept");
        assert_eq!(st, STATUS_SUCCESS);
        self.links.lock().unwrap().push(Link {
            host: [a, b],
            connector: [client, server],
            disconnects,
        });
    }

    /// The OutboundReadLimit the CM negotiated for the last connection (`None`: none made).
    pub fn outbound_read_limit(&self) -> Option<u32> {
        Some(self.outbound_reads.load(Ordering::SeqCst)).filter(|&n| n != 0)
    }

    /// Parts every CM connection (NdkDisconnect from the connecting side; the peer
    /// disconnects on its DisconnectEvent), closes the connectors and the listeners.
    pub fn disconnect_all(&self) {
        self.cm_traffic(|| self.part_all());
    }

    fn part_all(&self) {
        let links = std::mem::take(&mut *self.links.lock().unwrap());
        for l in &links {
            let [na, nb] = [&self.nodes[l.host[0]], &self.nodes[l.host[1]]];
            let [client, server] = l.connector;
            let client_done = Done::new();
            let d = disp(unsafe_dispatch_connector(client));
            // SAFETY: a live, connected connector; `client_done` outlives the wait below.
            let st = unsafe { (d.NdkDisconnect)(client, on_request, client_done.ctx()) };
            let peer = &l.disconnects[1];
            let heard = nb
                .platform
                .wait_until(&|| peer.load(Ordering::SeqCst) != 0, WAIT_NS);
            assert!(heard, "the peer's DisconnectEvent");
            let server_done = Done::new();
            let d = disp(unsafe_dispatch_connector(server));
            // SAFETY: as above.
            let sst = unsafe { (d.NdkDisconnect)(server, on_request, server_done.ctx()) };
            let sst = finish_request(nb, sst, &server_done, "NdkDisconnect");
            assert_eq!(sst, STATUS_SUCCESS, "the peer's NdkDisconnect");
            let st = finish_request(na, st, &client_done, "NdkDisconnect");
            assert_eq!(st, STATUS_SUCCESS, "NdkDisconnect");
            close(na, client.cast(), d.NdkCloseConnector);
            close(nb, server.cast(), d.NdkCloseConnector);
        }
        let listeners = std::mem::take(&mut *self.listeners.lock().unwrap());
        for (i, l) in listeners.into_iter().enumerate() {
            if let Some(l) = l {
                let d = disp(unsafe_dispatch_listener(l.ptr));
                close(&self.nodes[i], l.ptr.cast(), d.NdkCloseListener);
                // The listener is closed: no connect event can use the queue any more.
                drop(l.incoming);
            }
        }
        self.run();
    }

    /// NdkCreateMr (fast-register) + NdkInitializeFastRegisterMr for `pages` pages on host
    /// `i`.
    pub fn frmr(&self, i: usize, pages: u32) -> *mut NDK_MR {
        let pd = self.nodes[i].pd;
        let mut mr = null_mut();
        let create = disp(unsafe_dispatch_pd(pd)).NdkCreateMr;
        let done = Done::new();
        // SAFETY: a live PD; `mr` is an out pointer; `done` outlives the wait below.
        let st = unsafe { create(pd, 1, on_create, done.ctx(), &mut mr) };
        let mr = self.created(i, st, mr, &done, "NdkCreateMr");
        let init = disp(unsafe_dispatch_mr(mr)).NdkInitializeFastRegisterMr;
        let done = Done::new();
        // SAFETY: a live fast-register MR; `done` outlives the wait below.
        let st = unsafe { init(mr, pages, 1, on_request, done.ctx()) };
        self.created(i, st, mr, &done, "NdkInitializeFastRegisterMr")
    }

    /// A DMA buffer of `bytes` (rounded up to pages) on host `i`.
    pub fn buffer(&self, i: usize, bytes: usize) -> Buf {
        let region = self.nodes[i]
            .dma
            .alloc(bytes.max(4096))
            .expect("buffer memory");
        Buf { region }
    }

    /// An FRMR over `buf`, fast-registered through `qp` (completion reaped from `cq`) with
    /// remote read and write.
    pub fn remote(&self, i: usize, qp: *mut NDK_QP, cq: *mut NDK_CQ, buf: &Buf) -> Remote {
        let pages = buf.pages();
        let mr = self.frmr(i, pages.len() as u32);
        let md = disp(unsafe_dispatch_mr(mr));
        let va = buf.addr();
        let fr = disp(unsafe_dispatch_qp(qp)).NdkFastRegister;
        // SAFETY: live QP and MR; `pages` holds the count given.
        let st = unsafe {
            fr(
                qp,
                null_mut(),
                mr,
                pages.len() as u32,
                pages.as_ptr(),
                0,
                buf.len(),
                va as PVOID,
                NDK_OP_FLAG_ALLOW_LOCAL_WRITE
                    | NDK_OP_FLAG_ALLOW_REMOTE_READ
                    | NDK_OP_FLAG_ALLOW_REMOTE_WRITE,
            )
        };
        assert_eq!(st, STATUS_SUCCESS, "NdkFastRegister");
        self.kick(i, 0);
        self.run();
        let r = self.drain(cq, 1);
        assert_eq!(r, vec![STATUS_SUCCESS], "fast-register completion");
        Remote {
            mr,
            va,
            rkey: {
                let get = md.NdkGetRemoteTokenFromMr;
                // SAFETY: a live MR.
                unsafe { get(mr) }
            },
        }
    }

    /// Polls `cq` until `n` results arrived (running the world in between); their statuses.
    pub fn drain(&self, cq: *mut NDK_CQ, n: usize) -> Vec<NTSTATUS> {
        let mut out = Vec::new();
        let mut res = [empty_result(); 16];
        let mut idle = 0;
        while out.len() < n {
            let k = get_results(cq, &mut res[..16.min(n - out.len())]);
            out.extend(res[..k].iter().map(|r| r.Status));
            if k == 0 {
                idle += 1;
                assert!(idle < 1000, "completions missing: {} of {n}", out.len());
                self.run();
            }
        }
        out
    }
}

/// The benchmark layout (instr, benches/datapath.rs): host 0 initiates on `qa[k]`, each
/// connected to `qb[k]` on host 1; `shared` puts every QP of a host on one CQ (else a CQ per
/// QP) of `depth` entries; `local` is a 64 KiB buffer on host 0, `remote` 64 KiB on host 1
/// registered for remote access.
pub struct Pair {
    /// The two hosts.
    pub c: Cluster,
    /// Host 0's QPs.
    pub qa: Vec<*mut NDK_QP>,
    /// Host 1's QPs.
    pub qb: Vec<*mut NDK_QP>,
    /// Host 0's CQs (one, or one per QP).
    pub cqa: Vec<*mut NDK_CQ>,
    /// Host 1's CQs.
    pub cqb: Vec<*mut NDK_CQ>,
    /// Host 0's buffer.
    pub local: Buf,
    /// Host 1's buffer, remotely accessible.
    pub remote: Remote,
}

impl Pair {
    /// `nqp` connected QP pairs (32-deep queues, 1 SGE).
    pub fn new(nqp: usize, shared: bool, depth: u32, hooked: bool) -> Pair {
        let c = Cluster::new(2, hooked);
        let ncq = if shared { 1 } else { nqp };
        let cqa: Vec<_> = (0..ncq).map(|_| c.cq(0, depth, None)).collect();
        let cqb: Vec<_> = (0..ncq).map(|_| c.cq(1, depth, None)).collect();
        let mut qa = Vec::new();
        let mut qb = Vec::new();
        for i in 0..nqp {
            let (a, b) = (cqa[i % ncq], cqb[i % ncq]);
            let x = c.qp(0, a, a, 32, 1);
            let y = c.qp(1, b, b, 32, 1);
            c.connect(0, x, 1, y);
            qa.push(x);
            qb.push(y);
        }
        let local = c.buffer(0, 65536);
        let rbuf = c.buffer(1, 65536);
        // The region stays allocated: a Buf never frees it.
        let remote = c.remote(1, qb[0], cqb[0], &rbuf);
        Pair {
            c,
            qa,
            qb,
            cqa,
            cqb,
            local,
            remote,
        }
    }

    /// QP pair `k mod n` and their CQs: (qa, qb, cqa, cqb).
    pub fn at(&self, k: usize) -> (*mut NDK_QP, *mut NDK_QP, *mut NDK_CQ, *mut NDK_CQ) {
        let k = k % self.qa.len();
        let j = k % self.cqa.len();
        (self.qa[k], self.qb[k], self.cqa[j], self.cqb[j])
    }

    /// NdkRead of 64 bytes from `remote` into `local` on `qa`.
    pub fn read(&self, qa: *mut NDK_QP, flags: u32) {
        let sg = [sge(self.local.addr(), 64, self.c.nodes[0].token)];
        let st = rdma(qa, true, &sg, self.remote.va, self.remote.rkey, flags);
        assert_eq!(st, STATUS_SUCCESS, "NdkRead");
    }

    /// Hands host 0's SQ doorbell to its model and runs the world (outside measured calls).
    pub fn flush(&self) {
        self.c.kick(0, 0);
        self.c.run();
    }

    /// [`Pair::flush`], then reaps `n` successful completions from `cq`.
    pub fn reap(&self, cq: *mut NDK_CQ, n: usize) {
        self.flush();
        assert!(self.c.drain(cq, n).iter().all(|&st| st == STATUS_SUCCESS));
    }
}

/// Bound on a wait for a completion or an event (a hang, not a timing).
const WAIT_NS: u64 = 20_000_000_000;

/// Gives every node a resolver knowing every node and starts its connection engine.
fn start_engines(nodes: &[Node]) {
    for n in nodes {
        let p: Arc<dyn Platform> = n.platform.clone();
        let r = Neighbours::new(p.clone(), 64, 50_000_000).expect("resolver");
        for m in nodes.iter().filter(|m| m.index != n.index) {
            r.set_neighbour(m.ip, m.mac).expect("neighbour");
        }
        r.add_address(n.ip).expect("address");
        let cfg = EngineConfig {
            capacity: CM_CAPACITY,
            ..EngineConfig::new(guid_from_mac(n.mac), 0x5EED ^ n.index as u32)
        };
        pvrdma_ndk::ndk::connect::start(&n.ndk, p, r, cfg).expect("connection engine starts");
    }
    // The engines bind their GIDs from DPCs: done before the hosts are used (or measured).
    for n in nodes {
        let engine = pvrdma_ndk::ndk::connect::engine(&n.ndk).expect("a connection engine");
        let ready = n.platform.wait_until(
            &|| engine.bound_gids().contains(&Some(n.ip)) && n.platform.executor().is_idle(),
            WAIT_NS,
        );
        assert!(ready, "host {}: the engine bound no GID", n.index);
    }
}

unsafe extern "system" fn on_connect_event(ctx: PVOID, c: *mut NDK_CONNECTOR) {
    // SAFETY: the context is a listener's queue, which outlives the listener.
    let q = unsafe { &*(ctx as *const Mutex<VecDeque<usize>>) };
    q.lock().unwrap().push_back(c as usize);
}

unsafe extern "system" fn on_disconnect(ctx: PVOID) {
    // SAFETY: the context is a connection's counter, which outlives its connector.
    let n = unsafe { &*(ctx as *const AtomicU32) };
    n.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "system" fn on_close(ctx: PVOID) {
    // SAFETY: the context is a `Done` the closing caller keeps alive until it has run.
    let d = unsafe { &*(ctx as *const Done) };
    d.status.store(STATUS_SUCCESS as u32, Ordering::SeqCst);
}

/// NdkCreateListener and NdkListen on the node's address, [`LISTEN_PORT`].
fn listen(n: &Node) -> Listening {
    let incoming: Box<Mutex<VecDeque<usize>>> = Box::default();
    let mut l = null_mut();
    let done = Done::new();
    let d = disp(unsafe_dispatch_adapter(n.adapter));
    // SAFETY: a live adapter; the queue outlives the listener (closed before it is dropped);
    // `l` is an out pointer; `done` outlives the wait.
    let st = unsafe {
        (d.NdkCreateListener)(
            n.adapter,
            on_connect_event,
            &*incoming as *const Mutex<VecDeque<usize>> as PVOID,
            on_create,
            done.ctx(),
            &mut l,
        )
    };
    let l = created(&n.platform, st, l, &done, "NdkCreateListener");
    let (at, len) = SockBuf::from(SocketAddr::new(n.ip, LISTEN_PORT));
    let done = Done::new();
    let ld = disp(unsafe_dispatch_listener(l));
    // SAFETY: a live listener; the address outlives the call, `done` the wait.
    let st = unsafe { (ld.NdkListen)(l, at.0.as_ptr().cast(), len, on_request, done.ctx()) };
    assert_eq!(
        finish_request(n, st, &done, "NdkListen"),
        STATUS_SUCCESS,
        "NdkListen"
    );
    let mut b = SockBuf([0; 28]);
    let mut len: ULONG = 28;
    // SAFETY: a live listener; the buffer holds `len` bytes.
    let st = unsafe { (ld.NdkGetLocalAddress)(l, b.0.as_mut_ptr().cast(), &mut len) };
    assert_eq!(st, STATUS_SUCCESS, "NdkGetListenerLocalAddress");
    Listening {
        ptr: l,
        incoming,
        addr: b.addr().expect("the listener's address"),
    }
}

/// NdkCreateConnector.
fn create_connector(n: &Node) -> *mut NDK_CONNECTOR {
    let mut c = null_mut();
    let done = Done::new();
    let d = disp(unsafe_dispatch_adapter(n.adapter));
    // SAFETY: a live adapter; `c` is an out pointer; `done` outlives the wait.
    let st = unsafe { (d.NdkCreateConnector)(n.adapter, on_create, done.ctx(), &mut c) };
    created(&n.platform, st, c, &done, "NdkCreateConnector")
}

/// The final status of a request the provider answered `st` to (inline, or the
/// RequestCompletion's once it ran).
fn finish_request(n: &Node, st: NTSTATUS, done: &Done, what: &str) -> NTSTATUS {
    if st != STATUS_PENDING {
        return st;
    }
    let finished = heap::uncounted(|| n.platform.wait_until(&|| done.finished(), WAIT_NS));
    assert!(finished, "{what}: no completion");
    done.status.load(Ordering::SeqCst) as NTSTATUS
}

/// Closes `obj` through `slot`, waiting for its CloseCompletion if it pends.
fn close(n: &Node, obj: *mut NDK_OBJECT_HEADER, slot: NDK_FN_CLOSE_OBJECT) {
    let done = Done::new();
    // SAFETY: a live object of this provider, closed once; `done` outlives the wait.
    let st = unsafe { slot(obj, on_close, done.ctx()) };
    assert!(finish_request(n, st, &done, "close") == STATUS_SUCCESS);
}

/// Waits for a create or request the provider answered `st` to: `out` when it completed
/// inline, the object from `done` once its completion ran when it answered STATUS_PENDING.
/// The wait pumps the world (the platform's pump); completions run in the command DPC.
pub fn created<T>(
    platform: &HostPlatform,
    st: NTSTATUS,
    out: *mut T,
    done: &Done,
    what: &str,
) -> *mut T {
    if st == STATUS_SUCCESS {
        return out;
    }
    assert_eq!(st, STATUS_PENDING, "{what}");
    // The world runs in the wait: its allocations are not the provider's.
    let finished = heap::uncounted(|| platform.wait_until(&|| done.finished(), 20_000_000_000));
    assert!(finished, "{what}: no completion");
    let st = done.status.load(Ordering::SeqCst) as NTSTATUS;
    assert_eq!(st, STATUS_SUCCESS, "{what} completion");
    match done.obj.load(Ordering::SeqCst) {
        0 => out, // a RequestCompletion: the object was the caller's
        p => p as *mut T,
    }
}

/// The QPN of QP `handle` (M10: VERSION 20 numbers QPs 0x100 + handle, older ones use the
/// handle).
pub fn qpn(dev: &DrvDevice, handle: u32) -> u32 {
    if dev.version() >= 20 {
        0x100 + handle
    } else {
        handle
    }
}

/// The device handle of an NDK QP.
pub fn qp_handle(qp: *mut NDK_QP) -> u32 {
    // SAFETY: a live QP of this provider.
    unsafe { ObjRef::<Qp>::borrow(qp) }
        .expect("live QP")
        .handle()
}

/// Dispatch pointer of an adapter.
pub fn unsafe_dispatch_adapter(a: *mut NDK_ADAPTER) -> *const NDK_ADAPTER_DISPATCH {
    // SAFETY: a live adapter.
    unsafe { (*a).Dispatch }
}
/// Dispatch pointer of a PD.
pub fn unsafe_dispatch_pd(p: *mut NDK_PD) -> *const NDK_PD_DISPATCH {
    // SAFETY: a live PD.
    unsafe { (*p).Dispatch }
}
/// Dispatch pointer of a CQ.
pub fn unsafe_dispatch_cq(p: *mut NDK_CQ) -> *const NDK_CQ_DISPATCH {
    // SAFETY: a live CQ.
    unsafe { (*p).Dispatch }
}
/// Dispatch pointer of a QP.
pub fn unsafe_dispatch_qp(p: *mut NDK_QP) -> *const NDK_QP_DISPATCH {
    // SAFETY: a live QP.
    unsafe { (*p).Dispatch }
}
/// Dispatch pointer of a connector.
pub fn unsafe_dispatch_connector(p: *mut NDK_CONNECTOR) -> *const NDK_CONNECTOR_DISPATCH {
    // SAFETY: a live connector.
    unsafe { (*p).Dispatch }
}
/// Dispatch pointer of a listener.
pub fn unsafe_dispatch_listener(p: *mut NDK_LISTENER) -> *const NDK_LISTENER_DISPATCH {
    // SAFETY: a live listener.
    unsafe { (*p).Dispatch }
}
/// Dispatch pointer of an MR.
pub fn unsafe_dispatch_mr(p: *mut NDK_MR) -> *const NDK_MR_DISPATCH {
    // SAFETY: a live MR.
    unsafe { (*p).Dispatch }
}

/// Keeps `c` alive until the process exits (examples and benches end with `exit`; tearing
/// the hosts down is the tests' business).
pub fn leak(c: Cluster) {
    std::mem::forget(c);
}

/// A zeroed NDK_RESULT.
pub fn empty_result() -> NDK_RESULT {
    NDK_RESULT {
        Status: 0,
        BytesTransferred: 0,
        QPContext: null_mut(),
        RequestContext: null_mut(),
    }
}

/// NdkGetCqResults into `out`; the number written.
pub fn get_results(cq: *mut NDK_CQ, out: &mut [NDK_RESULT]) -> usize {
    let f = disp(unsafe_dispatch_cq(cq)).NdkGetCqResults;
    // SAFETY: a live CQ; `out` is writable for its length.
    unsafe { f(cq, out.as_mut_ptr(), out.len() as u32) as usize }
}

/// NdkArmCq.
pub fn arm(cq: *mut NDK_CQ, ty: u32) {
    let f = disp(unsafe_dispatch_cq(cq)).NdkArmCq;
    // SAFETY: a live CQ.
    unsafe { f(cq, ty) }
}

/// NdkRead (`read`) or NdkWrite of `sgl` to/from `(va, rkey)`.
pub fn rdma(
    qp: *mut NDK_QP,
    read: bool,
    sgl: &[NDK_SGE],
    va: u64,
    rkey: u32,
    flags: u32,
) -> NTSTATUS {
    let d = disp(unsafe_dispatch_qp(qp));
    let f = if read { d.NdkRead } else { d.NdkWrite };
    // SAFETY: a live QP; `sgl` holds the count given.
    unsafe {
        f(
            qp,
            null_mut(),
            sgl.as_ptr(),
            sgl.len() as u32,
            va,
            rkey,
            flags,
        )
    }
}

/// NdkSend.
pub fn send(qp: *mut NDK_QP, sgl: &[NDK_SGE], flags: u32) -> NTSTATUS {
    let f = disp(unsafe_dispatch_qp(qp)).NdkSend;
    // SAFETY: a live QP; `sgl` holds the count given.
    unsafe { f(qp, null_mut(), sgl.as_ptr(), sgl.len() as u32, flags) }
}

/// NdkReceive.
pub fn receive(qp: *mut NDK_QP, sgl: &[NDK_SGE]) -> NTSTATUS {
    let f = disp(unsafe_dispatch_qp(qp)).NdkReceive;
    // SAFETY: a live QP; `sgl` holds the count given.
    unsafe { f(qp, null_mut(), sgl.as_ptr(), sgl.len() as u32) }
}

/// NdkFastRegister of `pages` into `mr` with remote access.
pub fn fast_register(
    qp: *mut NDK_QP,
    mr: *mut NDK_MR,
    pages: &[NDK_LOGICAL_ADDRESS],
    va: u64,
    flags: u32,
) -> NTSTATUS {
    let f = disp(unsafe_dispatch_qp(qp)).NdkFastRegister;
    // SAFETY: live QP and MR; `pages` holds the count given.
    unsafe {
        f(
            qp,
            null_mut(),
            mr,
            pages.len() as u32,
            pages.as_ptr(),
            0,
            pages.len() * 4096,
            va as PVOID,
            flags
                | NDK_OP_FLAG_ALLOW_LOCAL_WRITE
                | NDK_OP_FLAG_ALLOW_REMOTE_READ
                | NDK_OP_FLAG_ALLOW_REMOTE_WRITE,
        )
    }
}

/// NdkInvalidate of an MR.
pub fn invalidate(qp: *mut NDK_QP, mr: *mut NDK_MR, flags: u32) -> NTSTATUS {
    let f = disp(unsafe_dispatch_qp(qp)).NdkInvalidate;
    // SAFETY: live QP and MR of this provider.
    unsafe { f(qp, null_mut(), mr.cast(), flags) }
}
