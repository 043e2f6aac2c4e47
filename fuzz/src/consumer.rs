//! A consumer making random NDK calls with random arguments on two hosts of one fabric, and
//! (target `device_memory`) a device writing random bytes where only the device writes.
//!
//! Invariants, checked after every step:
//! - every call returns a status of its documented set ([`crate::status`]);
//! - every result names a request this consumer posted, on the CQ that request's queue
//!   completes to, with that QP's QPContext, the request's operation type, and no more bytes
//!   than it posted; no request completes twice, a SILENT_SUCCESS request never completes
//!   with success;
//! - at most one CQ notification per arm; notification statuses are documented ones;
//! - a pending close completes exactly once, after the objects it waits for are closed; an
//!   inline close never calls back;
//! - at the end (everything flushed, drained and closed): every request that could still
//!   complete did, exactly once; the models hold no object, and the leak checks of
//!   `Cluster::finish` pass (no DMA region, no pool allocation left).

use std::cell::RefCell;
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use arbitrary::Arbitrary;
use pvrdma_ndk::ndk::set_qp_connected;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_sim::ObjectCounts;

use crate::common::Mode;
use crate::common::memory::{BuiltMdl, ConsumerMem};
use crate::common::ndk::{Cluster, ClusterConfig, Cq, Mr, PSN_AB, PSN_BA, Pd, Qp, QpSpec, Srq};
use crate::common::objects::{rc_rtr_rts, rts_attrs};
use crate::status::{self, check};

/// Pages of consumer memory per host, at [`VA`] + host · 16 MiB.
const MEM_PAGES: usize = 16;
const VA: u64 = 0x7000_0000_0000;
/// SGEs a post may carry (above every default SGE limit, so the limit is tested).
const MAX_SGES: usize = 20;
/// Objects of one kind a session may create: beyond this, creates are skipped (keeps one
/// input's run short).
const MAX_OBJECTS: usize = 12;

// ---------------------------------------------------------------------------- the input

/// One SGE: `source` picks the memory (0 a registered MR's local token, 1 the PD's
/// privileged token with a logical address, 2 a registered MR's remote token, 3 a made-up
/// token), the MR among the live ones and, with `offset` and `length`, the range.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sg {
    pub source: u8,
    pub offset: u16,
    pub length: u16,
}

/// The work request verbs that carry SGEs.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Send,
    SendAndInvalidate,
    Read,
    Write,
    Receive,
}

/// The object kinds a consumer closes.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cq,
    Pd,
    Mr,
    Mw,
    Srq,
    Qp,
}

/// One consumer call. Object operands (`cq`, `pd`, `mr`, ...) index the live objects of
/// their kind (modulo their count); a call whose operands do not exist is skipped.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Call {
    CreateCq {
        host: u8,
        depth: u16,
    },
    CreatePd {
        host: u8,
    },
    CreateMr {
        pd: u8,
        fast: bool,
    },
    CreateMw {
        pd: u8,
    },
    CreateSrq {
        pd: u8,
        depth: u16,
        sge: u8,
        threshold: u8,
    },
    CreateQp {
        pd: u8,
        rcq: u8,
        icq: u8,
        srq: Option<u8>,
        receive_depth: u16,
        initiator_depth: u16,
        receive_sge: u8,
        initiator_sge: u8,
        inline_data: u16,
    },
    Register {
        mr: u8,
        offset: u16,
        pages: u8,
        length: u16,
        flags: u8,
    },
    Deregister {
        mr: u8,
    },
    InitializeFastRegister {
        mr: u8,
        pages: u16,
        remote: bool,
    },
    /// Test wiring (no CM yet): RTR/RTS between fresh QPs of the two hosts.
    Connect {
        a: u8,
        b: u8,
    },
    Post {
        qp: u8,
        verb: Verb,
        count: u8,
        sges: [Sg; 3],
        flags: u16,
        remote: Sg,
        token: u32,
    },
    SrqReceive {
        srq: u8,
        count: u8,
        sges: [Sg; 3],
    },
    FastRegister {
        qp: u8,
        mr: u8,
        pages: u8,
        fbo: u16,
        length: u32,
        va_page: u8,
        flags: u16,
    },
    Invalidate {
        qp: u8,
        target: u8,
        window: bool,
        flags: u16,
    },
    Bind {
        qp: u8,
        mr: u8,
        mw: u8,
        offset: u16,
        length: u32,
        flags: u16,
    },
    Poll {
        cq: u8,
        n: u8,
        ex: bool,
    },
    Arm {
        cq: u8,
        ty: u8,
    },
    Flush {
        qp: u8,
    },
    ModifySrq {
        srq: u8,
        depth: u16,
        threshold: u8,
    },
    Close {
        kind: Kind,
        index: u8,
    },
    /// Lets the devices and the fabric run until nothing is left to do.
    Settle,
}

/// A write where only the device writes (target `device_memory`).
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum DeviceWrite {
    /// Bytes into a CQE of a CQ's ring (slot and offset modulo the ring).
    CqeBytes {
        cq: u8,
        slot: u16,
        offset: u8,
        bytes: [u8; 8],
    },
    /// A whole CQE naming a QP of this host and a slot (`wr_id`, under queue tag `tag`: 0
    /// SQ, 2 RQ, 3 SRQ), then (`publish`) `prod_tail` + 1.
    ForgeCqe {
        cq: u8,
        qp: u8,
        wr_id: u16,
        tag: u8,
        opcode: u8,
        status: u8,
        byte_len: u32,
        wc_flags: u8,
        publish: bool,
    },
    /// A CQ's `prod_tail`: `head + delta` (a small step) or `raw`.
    CqTail { cq: u8, delta: u8, raw: Option<u32> },
    /// Bytes into the async-event ring (page 1 on, offset modulo the ring), its tail
    /// (`head + delta`, or raw), then vector 1.
    AsyncRing {
        host: u8,
        offset: u16,
        bytes: [u8; 8],
        delta: u8,
        raw: Option<u32>,
    },
    /// The same for the CQ-notification ring and vector 2.
    CqNotificationRing {
        host: u8,
        offset: u16,
        bytes: [u8; 4],
        delta: u8,
        raw: Option<u32>,
    },
    /// An interrupt nobody asked for (vector modulo 4: one beyond the three).
    Interrupt { host: u8, vector: u8 },
}

/// A step of target `device_memory`.
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Call(Call),
    Device(DeviceWrite),
}

// ---------------------------------------------------------------------------- callbacks

#[derive(Default)]
struct CloseCtx(AtomicU32);

unsafe extern "system" fn on_close(ctx: PVOID) {
    // SAFETY: the context is an `Arc<CloseCtx>` its object's record keeps alive until the end.
    let c = unsafe { &*(ctx as *const CloseCtx) };
    c.0.fetch_add(1, Ordering::SeqCst);
}

#[derive(Default)]
struct MwCreate {
    calls: AtomicU32,
    status: AtomicU32,
    object: std::sync::atomic::AtomicUsize,
}

unsafe extern "system" fn on_create_mw(ctx: PVOID, st: NTSTATUS, obj: *mut NDK_OBJECT_HEADER) {
    // SAFETY: the context is an `Arc<MwCreate>` `create_mw` keeps alive until it returns.
    let c = unsafe { &*(ctx as *const MwCreate) };
    c.status.store(st as u32, Ordering::SeqCst);
    c.object.store(obj as usize, Ordering::SeqCst);
    c.calls.fetch_add(1, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------- the records

/// A close this consumer started: pending (its completion must come once) or inline.
struct Closing {
    pended: bool,
    ctx: Arc<CloseCtx>,
}

impl Closing {
    fn completions(&self) -> u32 {
        self.ctx.0.load(Ordering::SeqCst)
    }
}

struct Rec<T> {
    obj: T,
    host: usize,
    closing: Option<Closing>,
}

struct MrRec {
    mr: Mr,
    _pd: usize,
    fast: bool,
    /// VA and length of the registration, while registered.
    registered: Option<(u64, u64)>,
    /// Fast-register capacity once initialized (pages, remote access).
    fast_ready: bool,
    /// Every MDL it was registered with: the consumer keeps them until the MR is gone.
    mdls: Vec<BuiltMdl>,
}

struct MwRec {
    ptr: *mut NDK_MW,
    _pd: usize,
}

struct QpRec {
    qp: Qp,
    _pd: usize,
    rcq: usize,
    icq: usize,
    srq: Option<usize>,
    connected: bool,
    /// Never connected, flushed or errored: may still be wired.
    fresh: bool,
    /// The last accepted initiator request had DEFER (a chain left open, §5.5).
    chain_open: bool,
}

struct SrqRec {
    srq: Srq,
    _pd: usize,
}

struct CqRec {
    cq: Cq,
    arms: u32,
    /// Page 0 of its ring and its data pages, and N (read from CREATE_CQ right after the
    /// create, while the command is still in the slot).
    ring: Option<CqRing>,
}

#[derive(Clone, Debug)]
struct CqRing {
    state: u64,
    pages: Vec<u64>,
    n: u32,
}

/// What a posted request expects of its completion.
#[derive(Clone, Copy, Debug)]
struct Req {
    /// The QP it was posted on (None: an SRQ receive).
    qp: Option<usize>,
    srq: Option<usize>,
    receive: bool,
    op: NDK_OPERATION_TYPE,
    length: u64,
    signaled: bool,
    done: u32,
}

/// Which invariants still hold exactly after what the target did.
#[derive(Default, Clone, Copy)]
struct Taint {
    /// Some device memory was written: completions may be lost (not duplicated), the device
    /// may have failed.
    device: bool,
}

// ---------------------------------------------------------------------------- the world

/// The two hosts and their consumer memory, kept from one input to the next while inputs
/// leave them as they were built (see [`World::take`]): building them (two models, two
/// probes, two adapters) costs more than most inputs.
///
/// Thread-free ([`ClusterConfig::thread_free`]): the fuzzer's thread runs every DPC, so an
/// input costs no thread hand-off per interrupt and replays the same way on a busy machine.
/// No connection engines ([`ClusterConfig::without_cm`]): `Call::Connect` wires QPs raw.
pub struct World {
    c: Cluster,
    mems: Vec<ConsumerMem>,
}

/// DMA regions (allocator and space) of each host, and the pool/DMA counters.
#[derive(Debug, PartialEq, Eq)]
struct Accounting {
    hosts: Vec<(usize, usize, usize)>,
    stats: AllocStats,
}

/// The kept world. Its destructor (a thread-local's, which `exit` runs on the main thread
/// before LeakSanitizer's final check) tears it down with every check of `Cluster::finish`,
/// so the adapters' close and the device's RESET are checked once per fuzzing run and the
/// world is not reported as a leak.
struct Kept(RefCell<Option<World>>);

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(w) = self.0.get_mut().take() {
            w.finish();
        }
    }
}

thread_local! {
    /// libFuzzer runs every input on the main thread.
    static WORLD: Kept = const { Kept(RefCell::new(None)) };
}

impl World {
    /// Two thread-free hosts in deterministic mode without connection engines, on devices
    /// with the fuzz targets' capabilities ([`crate::fuzz_caps`]), 16 pages of consumer
    /// memory on each.
    fn build() -> World {
        let c = Cluster::with(ClusterConfig {
            thread_free: true,
            tweak: Some(|_, n| crate::fuzz_caps(&mut n.device.caps)),
            ..ClusterConfig::without_cm(Mode::Deterministic, 2)
        });
        let mems = (0..2)
            .map(|h| c.host(h).mem(MEM_PAGES, VA + (h as u64) * 0x100_0000))
            .collect();
        c.settle();
        World { c, mems }
    }

    fn accounting(c: &Cluster) -> Accounting {
        Accounting {
            hosts: c
                .hosts
                .iter()
                .map(|h| {
                    (
                        h.dma.live(),
                        h.space.region_count(),
                        h.space.bytes_registered(),
                    )
                })
                .collect(),
            stats: stats(),
        }
    }

    /// The world the last input left clean, or a new one.
    fn take() -> World {
        WORLD
            .with(|w| w.0.borrow_mut().take())
            .unwrap_or_else(World::build)
    }

    /// After an input that closed every object it made and wrote no device memory: the
    /// models hold no object, every DMA region and pool allocation the input made is freed
    /// (the accounting is back at `before`, taken when the input started: the pool counters
    /// are global, and `bringup::run` may have left a quarantined object behind, by design),
    /// and the consumer memory is zeroed for the next input, which gets this world.
    fn keep(self, before: &Accounting) {
        self.c.settle();
        for h in &self.c.hosts {
            assert_eq!(
                h.model_objects(),
                ObjectCounts::default(),
                "host {}: the model still holds objects",
                h.index
            );
            assert!(h.platform.executor().is_idle(), "a DPC is still queued");
        }
        assert_eq!(
            &Self::accounting(&self.c),
            before,
            "DMA regions or pool allocations left behind"
        );
        static ZERO: [u8; 4096] = [0; 4096];
        for m in &self.mems {
            for p in 0..m.buf.pages() {
                m.buf.write(p * 4096, &ZERO);
            }
        }
        WORLD.with(|w| *w.0.borrow_mut() = Some(self));
    }

    /// Tears the world down with the cluster's own checks (`Cluster::finish`: adapters
    /// closed, RESET, nothing left at all).
    fn finish(self) {
        let World { c, mems, .. } = self;
        drop(mems);
        c.finish();
    }
}

/// One run: two hosts, the consumer's objects, its requests.
pub struct Session {
    c: Cluster,
    mems: Vec<ConsumerMem>,
    /// The world's accounting when this input started.
    before: Accounting,
    cqs: Vec<Rec<CqRec>>,
    pds: Vec<Rec<Pd>>,
    mrs: Vec<Rec<MrRec>>,
    mws: Vec<Rec<MwRec>>,
    srqs: Vec<Rec<SrqRec>>,
    qps: Vec<Rec<QpRec>>,
    reqs: Vec<Req>,
    taint: Taint,
}

fn live<T>(v: &[Rec<T>], pred: impl Fn(&Rec<T>) -> bool) -> Vec<usize> {
    (0..v.len())
        .filter(|&i| v[i].closing.is_none() && pred(&v[i]))
        .collect()
}

fn live_count<T>(v: &[Rec<T>]) -> usize {
    v.iter().filter(|r| r.closing.is_none()).count()
}

/// The `index`-th (modulo their count) live record that satisfies `pred`, counted without a
/// list (an allocation per pick is most of a pick's cost under a sanitizer's allocator).
fn pick<T>(v: &[Rec<T>], index: u8, pred: impl Fn(&Rec<T>) -> bool) -> Option<usize> {
    let ok = |r: &Rec<T>| r.closing.is_none() && pred(r);
    let n = v.iter().filter(|r| ok(r)).count();
    if n == 0 {
        return None;
    }
    let k = usize::from(index) % n;
    v.iter()
        .enumerate()
        .filter(|(_, r)| ok(r))
        .nth(k)
        .map(|(i, _)| i)
}

fn depth_of(raw: u16) -> u32 {
    // Mostly small; the top bit asks for a huge depth (refused, or a big allocation).
    if raw & 0x8000 != 0 {
        u32::from(raw & 0x7FFF) << 6
    } else {
        u32::from(raw & 0x1FF)
    }
}

fn ctx_of(i: usize) -> PVOID {
    (((i + 1) << 4) | 0xA) as PVOID
}

fn req_of(ctx: PVOID) -> Option<usize> {
    let v = ctx as usize;
    (v & 0xF == 0xA && v >> 4 != 0).then(|| (v >> 4) - 1)
}

fn qp_context(i: usize) -> usize {
    0x0C0D_0000 + i
}

fn table<'a, D>(d: *const D) -> &'a D {
    // SAFETY: the provider's dispatch tables are statics.
    unsafe { &*d }
}

fn zero_sge() -> NDK_SGE {
    NDK_SGE {
        Anonymous: NDK_SGE_0 {
            VirtualAddress: null_mut(),
        },
        Length: 0,
        MemoryRegionToken: 0,
    }
}

impl Session {
    /// On the world the last input left clean, or a new one ([`World`]).
    pub fn new() -> Session {
        let World { c, mems } = World::take();
        let before = World::accounting(&c);
        Session {
            c,
            mems,
            before,
            cqs: Vec::new(),
            pds: Vec::new(),
            mrs: Vec::new(),
            mws: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            reqs: Vec::new(),
            taint: Taint::default(),
        }
    }

    fn broken(&self) -> bool {
        self.taint.device
    }

    // ------------------------------------------------------------------------ creates

    fn create_cq(&mut self, host: usize, depth: u32) {
        if self.cqs.len() >= MAX_OBJECTS {
            return;
        }
        match self.c.adapter(host).create_cq(depth, None) {
            Ok(cq) => {
                let ring = self.last_cq_ring(host);
                status::trace(format_args!("CQ {} created: ring {ring:?}", self.cqs.len()));
                self.cqs.push(Rec {
                    obj: CqRec { cq, arms: 0, ring },
                    host,
                    closing: None,
                });
            }
            Err(st) => check("NdkCreateCq", st, status::CREATE, self.broken()),
        }
    }

    /// The ring of the CQ created last on `host`: CREATE_CQ is still in the command slot
    /// (`pdir_dma` @16, `cqe` @28).
    fn last_cq_ring(&self, host: usize) -> Option<CqRing> {
        let h = self.c.host(host);
        let sp = &h.space;
        let slot = sp.read_u64(h.bar1.dsr_address() + 16).ok()?;
        let pdir = sp.read_u64(slot + 16).ok()?;
        let n = sp.read_u32(slot + 28).ok()?;
        let table = sp.read_u64(pdir).ok()?;
        let data_pages = (64 * u64::from(n)).div_ceil(4096);
        let mut pages = Vec::new();
        for i in 0..=data_pages.min(511) {
            pages.push(sp.read_u64(table + 8 * i).ok()?);
        }
        let state = pages.remove(0);
        Some(CqRing { state, pages, n })
    }

    fn create_pd(&mut self, host: usize) {
        if self.pds.len() >= MAX_OBJECTS {
            return;
        }
        match self.c.adapter(host).create_pd() {
            Ok(pd) => self.pds.push(Rec {
                obj: pd,
                host,
                closing: None,
            }),
            Err(st) => check("NdkCreatePd", st, status::CREATE, self.broken()),
        }
    }

    fn create_mr(&mut self, pd: u8, fast: bool) {
        let Some(p) = pick(&self.pds, pd, |_| true) else {
            return;
        };
        if self.mrs.len() >= MAX_OBJECTS {
            return;
        }
        let host = self.pds[p].host;
        match self.pds[p].obj.create_mr(fast) {
            Ok(mr) => self.mrs.push(Rec {
                obj: MrRec {
                    mr,
                    _pd: p,
                    fast,
                    registered: None,
                    fast_ready: false,
                    mdls: Vec::new(),
                },
                host,
                closing: None,
            }),
            Err(st) => check("NdkCreateMr", st, status::CREATE, self.broken()),
        }
    }

    fn create_mw(&mut self, pd: u8) {
        let Some(p) = pick(&self.pds, pd, |_| true) else {
            return;
        };
        if self.mws.len() >= MAX_OBJECTS {
            return;
        }
        let pdp = self.pds[p].obj.ptr;
        // SAFETY: a live PD of this provider.
        let d = table(unsafe { (*pdp).Dispatch });
        let ctx = Arc::new(MwCreate::default());
        let mut out: *mut NDK_MW = null_mut();
        // SAFETY: live PD; the context outlives the call and its completion (waited for).
        let st =
            unsafe { (d.NdkCreateMw)(pdp, on_create_mw, Arc::as_ptr(&ctx) as PVOID, &mut out) };
        check("NdkCreateMw", st, status::CREATE, self.broken());
        let (st, obj) = if st == STATUS_PENDING {
            self.c.wait_for("MW CreateCompletion", || {
                ctx.calls.load(Ordering::SeqCst) != 0
            });
            (
                ctx.status.load(Ordering::SeqCst) as NTSTATUS,
                ctx.object.load(Ordering::SeqCst) as *mut NDK_MW,
            )
        } else {
            (st, out)
        };
        let host = self.pds[p].host;
        if st == STATUS_SUCCESS {
            self.mws.push(Rec {
                obj: MwRec { ptr: obj, _pd: p },
                host,
                closing: None,
            });
        } else {
            check("NdkCreateMw completion", st, status::CREATE, self.broken());
        }
        self.c.settle();
        let calls = ctx.calls.load(Ordering::SeqCst);
        assert_eq!(
            calls,
            u32::from(st == STATUS_PENDING || calls != 0),
            "MW CreateCompletion count"
        );
    }

    fn create_srq(&mut self, pd: u8, depth: u32, sge: u32, threshold: u32) {
        let Some(p) = pick(&self.pds, pd, |_| true) else {
            return;
        };
        if self.srqs.len() >= MAX_OBJECTS {
            return;
        }
        let host = self.pds[p].host;
        match self.pds[p].obj.create_srq(depth, sge, threshold) {
            Ok(srq) => self.srqs.push(Rec {
                obj: SrqRec { srq, _pd: p },
                host,
                closing: None,
            }),
            Err(st) => check("NdkCreateSrq", st, status::CREATE, self.broken()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create_qp(&mut self, pd: u8, rcq: u8, icq: u8, srq: Option<u8>, spec: QpSpec) {
        let Some(p) = pick(&self.pds, pd, |_| true) else {
            return;
        };
        if self.qps.len() >= MAX_OBJECTS {
            return;
        }
        let host = self.pds[p].host;
        let (Some(r), Some(i)) = (
            pick(&self.cqs, rcq, |c| c.host == host),
            pick(&self.cqs, icq, |c| c.host == host),
        ) else {
            return;
        };
        let s = match srq {
            Some(s) => match pick(&self.srqs, s, |x| x.host == host) {
                Some(s) => Some(s),
                None => return,
            },
            None => None,
        };
        let index = self.qps.len();
        let spec = QpSpec {
            context: qp_context(index),
            ..spec
        };
        let pdo = &self.pds[p].obj;
        let made = match s {
            Some(s) => pdo.create_qp_with_srq(
                &self.cqs[r].obj.cq,
                &self.cqs[i].obj.cq,
                &self.srqs[s].obj.srq,
                spec,
            ),
            None => pdo.create_qp(&self.cqs[r].obj.cq, &self.cqs[i].obj.cq, spec),
        };
        match made {
            Ok(qp) => self.qps.push(Rec {
                obj: QpRec {
                    qp,
                    _pd: p,
                    rcq: r,
                    icq: i,
                    srq: s,
                    connected: false,
                    fresh: true,
                    chain_open: false,
                },
                host,
                closing: None,
            }),
            Err(st) => check("NdkCreateQp", st, status::CREATE, self.broken()),
        }
    }

    // ------------------------------------------------------------------------ MRs

    fn register(&mut self, mr: u8, offset: u16, pages: u8, length: u16, flags: u8) {
        let Some(m) = pick(&self.mrs, mr, |_| true) else {
            return;
        };
        let mem = &self.mems[self.mrs[m].host];
        let off = usize::from(offset) % (MEM_PAGES * 4096);
        let room = MEM_PAGES * 4096 - off;
        let len = (usize::from(pages) * 4096 + usize::from(length)).min(room);
        let mdl = mem.mdl(off, len as u32);
        let va = mem.va + off as u64;
        // Flags beyond the defined four are refused as a whole (INVALID_PARAMETER).
        let flags = if flags & 0x80 != 0 {
            u32::from(flags) << 8
        } else {
            u32::from(flags & 0xF)
        };
        let st = {
            let r = self.mrs[m].obj.mr.register_raw(&mdl, len, flags);
            check("NdkRegisterMr", r.inline, status::REQUEST, self.broken());
            r.wait()
        };
        check(
            "NdkRegisterMr completion",
            st,
            status::REQUEST,
            self.broken(),
        );
        let rec = &mut self.mrs[m].obj;
        rec.mdls.push(mdl);
        if st == STATUS_SUCCESS {
            assert!(!rec.fast, "NdkRegisterMr accepted on a fast-register MR");
            rec.registered = Some((va, len as u64));
        }
    }

    fn deregister(&mut self, mr: u8) {
        let Some(m) = pick(&self.mrs, mr, |_| true) else {
            return;
        };
        let r = self.mrs[m].obj.mr.deregister_raw();
        check("NdkDeregisterMr", r.inline, status::REQUEST, self.broken());
        let st = r.wait();
        check(
            "NdkDeregisterMr completion",
            st,
            status::REQUEST,
            self.broken(),
        );
        if st == STATUS_SUCCESS {
            self.mrs[m].obj.registered = None;
        }
    }

    fn initialize_fast_register(&mut self, mr: u8, pages: u16, remote: bool) {
        let Some(m) = pick(&self.mrs, mr, |_| true) else {
            return;
        };
        let pages = if pages & 0x8000 != 0 {
            u32::from(pages) << 4
        } else {
            u32::from(pages & 0x7F)
        };
        let r = self.mrs[m]
            .obj
            .mr
            .initialize_fast_register_raw(pages, remote);
        check(
            "NdkInitializeFastRegisterMr",
            r.inline,
            status::REQUEST,
            self.broken(),
        );
        let st = r.wait();
        check(
            "NdkInitializeFastRegisterMr completion",
            st,
            status::REQUEST,
            self.broken(),
        );
        if st == STATUS_SUCCESS {
            assert!(
                self.mrs[m].obj.fast,
                "NdkInitializeFastRegisterMr accepted on a registration MR"
            );
            self.mrs[m].obj.fast_ready = true;
        }
    }

    // ------------------------------------------------------------------------ wiring

    /// RTR/RTS through the hardware layer with each other's QPN, GID and MAC, then both
    /// marked connected (the kit's `connect`, refusing to wire a QP twice).
    fn connect(&mut self, a: u8, b: u8) {
        let Some(qa) = pick(&self.qps, a, |q| q.host == 0 && q.obj.fresh) else {
            return;
        };
        let Some(qb) = pick(&self.qps, b, |q| q.host == 1 && q.obj.fresh) else {
            return;
        };
        let qpn = |s: &Session, q: usize| {
            let h = s.qps[q].obj.qp.handle();
            s.c.host(s.qps[q].host)
                .model
                .with_core(|core| core.qp_info(h))
                .map(|i| i.qpn)
        };
        let (Some(na), Some(nb)) = (qpn(self, qa), qpn(self, qb)) else {
            assert!(self.broken(), "a live QP is not in the model");
            return;
        };
        for q in [qa, qb] {
            self.qps[q].obj.fresh = false;
        }
        for (me, peer, peer_qpn, sq, rq) in
            [(qa, qb, nb, PSN_AB, PSN_BA), (qb, qa, na, PSN_BA, PSN_AB)]
        {
            let ph = self.c.host(self.qps[peer].host);
            let mut at = rts_attrs(peer_qpn);
            at.sq_psn = sq;
            at.rq_psn = rq;
            at.ah_attr.dgid = ph.gid;
            at.ah_attr.dmac = ph.mac;
            at.ah_attr.sgid_index = 0;
            let h = self.c.host(self.qps[me].host);
            if let Err(e) = rc_rtr_rts(&h.dev, self.qps[me].obj.qp.handle(), at) {
                // A QP whose CQ failed is in ERR in the model: the wiring fails there only.
                assert!(self.broken(), "RTR/RTS of a fresh QP failed: {e:?}");
                return;
            }
        }
        for q in [qa, qb] {
            // SAFETY: a live QP of this provider.
            unsafe { set_qp_connected(self.qps[q].obj.qp.ptr, true) };
            self.qps[q].obj.connected = true;
        }
    }

    // ------------------------------------------------------------------------ posts

    /// The SGE `sg` describes on `host`.
    fn sge(&self, host: usize, sg: &Sg) -> NDK_SGE {
        let mem = &self.mems[host];
        let mrs = live(&self.mrs, |m| m.host == host && m.obj.registered.is_some());
        let len = u32::from(sg.length) & 0x3FFF;
        let off = u64::from(sg.offset);
        match sg.source & 3 {
            0 | 2 if !mrs.is_empty() => {
                let m = &self.mrs[mrs[usize::from(sg.source >> 2) % mrs.len()]].obj;
                let (va, _) = m.registered.unwrap_or((0, 0));
                let token = if sg.source & 3 == 0 {
                    m.mr.local_token()
                } else {
                    m.mr.remote_token()
                };
                NDK_SGE {
                    Anonymous: NDK_SGE_0 {
                        VirtualAddress: (va + off) as PVOID,
                    },
                    Length: len,
                    MemoryRegionToken: token,
                }
            }
            1 => {
                let pds = live(&self.pds, |p| p.host == host);
                let token = pds
                    .first()
                    .map_or(0, |&p| self.pds[p].obj.privileged_token());
                let page = usize::from(sg.source >> 2) % MEM_PAGES;
                NDK_SGE {
                    Anonymous: NDK_SGE_0 {
                        LogicalAddress: (mem.bus(page) + off % 4096) as _,
                    },
                    Length: len,
                    MemoryRegionToken: token,
                }
            }
            _ => NDK_SGE {
                Anonymous: NDK_SGE_0 {
                    VirtualAddress: (mem.va + off) as PVOID,
                },
                Length: len,
                MemoryRegionToken: u32::from(sg.source) << 8 | u32::from(sg.offset),
            },
        }
    }

    fn sgl(&self, host: usize, count: u8, sges: &[Sg; 3]) -> ([NDK_SGE; MAX_SGES], usize, u64) {
        let n = usize::from(count) % (MAX_SGES + 1);
        let mut out = [zero_sge(); MAX_SGES];
        let mut total = 0u64;
        for (i, slot) in out.iter_mut().enumerate().take(n) {
            *slot = self.sge(host, &sges[i % 3]);
            total += u64::from(slot.Length);
        }
        (out, n, total)
    }

    fn flags_of(raw: u16) -> u32 {
        // Mostly defined bits; the top bit sets one undefined bit too.
        let f = u32::from(raw) & 0x3FF;
        if raw & 0x8000 != 0 { f | 0x1000 } else { f }
    }

    fn record(&mut self, r: Req) -> PVOID {
        self.reqs.push(r);
        ctx_of(self.reqs.len() - 1)
    }

    fn accepted(
        &mut self,
        what: &str,
        st: NTSTATUS,
        q: Option<usize>,
        initiator: bool,
        flags: u32,
    ) {
        status::trace(format_args!("{what} on QP {q:?}: {st:#010x}"));
        check(what, st, status::POST, self.broken());
        if st != STATUS_SUCCESS {
            // Refused: no completion may come (§5.3).
            let i = self.reqs.len() - 1;
            self.reqs[i].done = u32::MAX;
            if let (Some(q), true) = (q, initiator) {
                // A failure rings what a deferred chain owes (§5.5): the chain is closed.
                self.qps[q].obj.chain_open = false;
            }
        } else if let (Some(q), true) = (q, initiator) {
            self.qps[q].obj.chain_open = flags & NDK_OP_FLAG_DEFER != 0;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        qp: u8,
        verb: Verb,
        count: u8,
        sges: &[Sg; 3],
        flags: u16,
        remote: &Sg,
        token: u32,
    ) {
        let Some(q) = pick(&self.qps, qp, |_| true) else {
            return;
        };
        let host = self.qps[q].host;
        let (sgl, n, total) = self.sgl(host, count, sges);
        let flags = Self::flags_of(flags);
        let qpp = self.qps[q].obj.qp.ptr;
        // SAFETY: a live QP.
        let d = table(unsafe { (*qpp).Dispatch });
        let signaled = flags & NDK_OP_FLAG_SILENT_SUCCESS == 0;
        let op = match verb {
            Verb::Send | Verb::SendAndInvalidate => NdkOperationTypeSend,
            Verb::Read => NdkOperationTypeRead,
            Verb::Write => NdkOperationTypeWrite,
            Verb::Receive => NdkOperationTypeReceive,
        };
        let receive = verb == Verb::Receive;
        let ctx = self.record(Req {
            qp: Some(q),
            srq: None,
            receive,
            op,
            length: total,
            signaled: signaled || receive,
            done: 0,
        });
        // The peer's memory for READ/WRITE: one of its registered MRs, or made-up.
        let peer = 1 - host;
        let peer_mr = live(&self.mrs, |m| m.host == peer && m.obj.registered.is_some());
        let (rva, rtoken) = match peer_mr.get(usize::from(remote.source) % peer_mr.len().max(1)) {
            Some(&m) if remote.source & 1 == 0 => {
                let r = &self.mrs[m].obj;
                (
                    r.registered.map_or(0, |(va, _)| va) + u64::from(remote.offset),
                    r.mr.remote_token(),
                )
            }
            _ => (VA + u64::from(remote.offset), token),
        };
        let p = sgl.as_ptr();
        let n32 = n as u32;
        let st = match verb {
            // SAFETY: a live QP; `sgl` holds `n` SGEs.
            Verb::Send => unsafe { (d.NdkSend)(qpp, ctx, p, n32, flags) },
            // SAFETY: as above.
            Verb::SendAndInvalidate => unsafe {
                (d.NdkSendAndInvalidate)(qpp, ctx, p, n32, flags, token)
            },
            // SAFETY: as above.
            Verb::Read => unsafe { (d.NdkRead)(qpp, ctx, p, n32, rva, rtoken, flags) },
            // SAFETY: as above.
            Verb::Write => unsafe { (d.NdkWrite)(qpp, ctx, p, n32, rva, rtoken, flags) },
            // SAFETY: as above.
            Verb::Receive => unsafe { (d.NdkReceive)(qpp, ctx, p, n32) },
        };
        self.accepted("post", st, Some(q), !receive, flags);
    }

    fn srq_receive(&mut self, srq: u8, count: u8, sges: &[Sg; 3]) {
        let Some(s) = pick(&self.srqs, srq, |_| true) else {
            return;
        };
        let (sgl, n, total) = self.sgl(self.srqs[s].host, count, sges);
        let ctx = self.record(Req {
            qp: None,
            srq: Some(s),
            receive: true,
            op: NdkOperationTypeReceive,
            length: total,
            signaled: true,
            done: 0,
        });
        let sp = self.srqs[s].obj.srq.ptr;
        // SAFETY: a live SRQ.
        let d = table(unsafe { (*sp).Dispatch });
        // SAFETY: a live SRQ; `sgl` holds `n` SGEs.
        let st = unsafe { (d.NdkSrqReceive)(sp, ctx, sgl.as_ptr(), n as u32) };
        self.accepted("NdkSrqReceive", st, None, false, 0);
    }

    #[allow(clippy::too_many_arguments)]
    fn fast_register(
        &mut self,
        qp: u8,
        mr: u8,
        pages: u8,
        fbo: u16,
        length: u32,
        va_page: u8,
        flags: u16,
    ) {
        let Some(q) = pick(&self.qps, qp, |_| true) else {
            return;
        };
        let host = self.qps[q].host;
        let Some(m) = pick(&self.mrs, mr, |m| m.host == host) else {
            return;
        };
        let mem = &self.mems[host];
        let n = usize::from(pages) % 40;
        let list: Vec<u64> = (0..n).map(|i| mem.bus(i % MEM_PAGES)).collect();
        let fbo = u32::from(fbo) & if fbo & 0x8000 != 0 { 0x7FFF } else { 0xFFF };
        let va = if va_page & 0x80 != 0 {
            u64::from(va_page) << 20 | u64::from(fbo) ^ 1
        } else {
            0x10_0000_0000 + u64::from(va_page) * 4096 + u64::from(fbo)
        };
        let flags = Self::flags_of(flags);
        let ctx = self.record(Req {
            qp: Some(q),
            srq: None,
            receive: false,
            op: NdkOperationTypeFastRegister,
            length: 0,
            signaled: flags & NDK_OP_FLAG_SILENT_SUCCESS == 0,
            done: 0,
        });
        let qpp = self.qps[q].obj.qp.ptr;
        // SAFETY: a live QP.
        let d = table(unsafe { (*qpp).Dispatch });
        // SAFETY: a live QP and MR of this host; `list` holds `n` page addresses.
        let st = unsafe {
            (d.NdkFastRegister)(
                qpp,
                ctx,
                self.mrs[m].obj.mr.ptr,
                n as u32,
                list.as_ptr().cast(),
                fbo,
                length as usize,
                va as PVOID,
                flags,
            )
        };
        self.accepted("NdkFastRegister", st, Some(q), true, flags);
    }

    fn invalidate(&mut self, qp: u8, target: u8, window: bool, flags: u16) {
        let Some(q) = pick(&self.qps, qp, |_| true) else {
            return;
        };
        let host = self.qps[q].host;
        let obj: *mut NDK_OBJECT_HEADER = if window {
            match pick(&self.mws, target, |w| w.host == host) {
                Some(w) => self.mws[w].obj.ptr.cast(),
                None => return,
            }
        } else {
            match pick(&self.mrs, target, |m| m.host == host) {
                Some(m) => self.mrs[m].obj.mr.ptr.cast(),
                None => return,
            }
        };
        let flags = Self::flags_of(flags);
        let ctx = self.record(Req {
            qp: Some(q),
            srq: None,
            receive: false,
            op: NdkOperationTypeInvalidate,
            length: 0,
            signaled: flags & NDK_OP_FLAG_SILENT_SUCCESS == 0,
            done: 0,
        });
        let qpp = self.qps[q].obj.qp.ptr;
        // SAFETY: a live QP.
        let d = table(unsafe { (*qpp).Dispatch });
        // SAFETY: a live QP and a live MR or MW of this host.
        let st = unsafe { (d.NdkInvalidate)(qpp, ctx, obj, flags) };
        self.accepted("NdkInvalidate", st, Some(q), true, flags);
    }

    #[allow(clippy::too_many_arguments)]
    fn bind(&mut self, qp: u8, mr: u8, mw: u8, offset: u16, length: u32, flags: u16) {
        let Some(q) = pick(&self.qps, qp, |_| true) else {
            return;
        };
        let host = self.qps[q].host;
        let (Some(m), Some(w)) = (
            pick(&self.mrs, mr, |m| m.host == host),
            pick(&self.mws, mw, |w| w.host == host),
        ) else {
            return;
        };
        let va = self.mrs[m].obj.registered.map_or(VA, |(va, _)| va) + u64::from(offset);
        let flags = Self::flags_of(flags);
        let ctx = self.record(Req {
            qp: Some(q),
            srq: None,
            receive: false,
            op: NdkOperationTypeBind,
            length: 0,
            signaled: flags & NDK_OP_FLAG_SILENT_SUCCESS == 0,
            done: 0,
        });
        let qpp = self.qps[q].obj.qp.ptr;
        // SAFETY: a live QP.
        let d = table(unsafe { (*qpp).Dispatch });
        // SAFETY: a live QP, MR and MW of this host.
        let st = unsafe {
            (d.NdkBind)(
                qpp,
                ctx,
                self.mrs[m].obj.mr.ptr,
                self.mws[w].obj.ptr,
                va as PVOID,
                length as usize,
                flags,
            )
        };
        self.accepted("NdkBind", st, Some(q), true, flags);
    }

    // ------------------------------------------------------------------------ CQs

    fn poll(&mut self, cq: u8, n: u8, ex: bool) {
        let Some(c) = pick(&self.cqs, cq, |_| true) else {
            return;
        };
        self.poll_cq(c, usize::from(n % 9), ex);
    }

    /// Polls CQ `c` for at most `n` results and checks each; returns how many came.
    fn poll_cq(&mut self, c: usize, n: usize, ex: bool) -> usize {
        let cq = &self.cqs[c].obj.cq;
        let got: Vec<(NTSTATUS, u32, usize, usize, Option<NDK_OPERATION_TYPE>)> = if ex {
            cq.results_ex(n)
                .iter()
                .map(|r| {
                    (
                        r.Status,
                        r.BytesTransferred,
                        r.QPContext as usize,
                        r.RequestContext as usize,
                        Some(r.Type),
                    )
                })
                .collect()
        } else {
            cq.results(n)
                .iter()
                .map(|r| {
                    (
                        r.Status,
                        r.BytesTransferred,
                        r.QPContext as usize,
                        r.RequestContext as usize,
                        None,
                    )
                })
                .collect()
        };
        for &(st, bytes, qpc, rc, ty) in &got {
            status::trace(format_args!(
                "CQ {c}: result {st:#010x}, {bytes} bytes, QP {qpc:#x}, request {rc:#x}, type {ty:?}"
            ));
            self.check_result(c, st, bytes, qpc, rc as PVOID, ty);
        }
        got.len()
    }

    fn check_result(
        &mut self,
        c: usize,
        st: NTSTATUS,
        bytes: u32,
        qpc: usize,
        rc: PVOID,
        ty: Option<NDK_OPERATION_TYPE>,
    ) {
        let i = req_of(rc)
            .filter(|&i| i < self.reqs.len())
            .unwrap_or_else(|| panic!("a result with a RequestContext never posted: {rc:?}"));
        let r = self.reqs[i];
        assert_ne!(
            r.done,
            u32::MAX,
            "a refused request completed (request {i})"
        );
        assert_eq!(r.done, 0, "request {i} completed twice");
        self.reqs[i].done = 1;
        check("a completion", st, status::COMPLETION, self.broken());
        assert!(
            r.signaled || st != STATUS_SUCCESS,
            "a SILENT_SUCCESS request completed with success (request {i})"
        );
        // The QP whose context came back must be the one that holds the request, and this
        // CQ must be the one its queue completes to.
        let q = match (r.qp, r.srq) {
            (Some(q), _) => q,
            (None, Some(s)) => (0..self.qps.len())
                .find(|&q| qp_context(q) == qpc && self.qps[q].obj.srq == Some(s))
                .unwrap_or_else(|| {
                    panic!("SRQ receive {i} completed with QPContext {qpc:#x} of no QP on its SRQ")
                }),
            (None, None) => unreachable!("every request has a queue"),
        };
        assert_eq!(qpc, qp_context(q), "QPContext of request {i}");
        let want_cq = if r.receive {
            self.qps[q].obj.rcq
        } else {
            self.qps[q].obj.icq
        };
        assert_eq!(c, want_cq, "request {i} completed on another CQ");
        if st == STATUS_SUCCESS {
            assert!(
                u64::from(bytes) <= r.length,
                "request {i}: {bytes} bytes transferred of {} posted",
                r.length
            );
        }
        if let Some(ty) = ty {
            let ok = ty == r.op || (r.receive && ty == NdkOperationTypeReceiveAndInvalidate);
            assert!(
                ok,
                "request {i}: result type {ty:?} for operation {:?}",
                r.op
            );
        }
    }

    fn arm(&mut self, cq: u8, ty: u8) {
        let Some(c) = pick(&self.cqs, cq, |_| true) else {
            return;
        };
        let ty = match ty % 4 {
            0 => NDK_CQ_NOTIFY_ERRORS,
            1 => NDK_CQ_NOTIFY_ANY,
            2 => NDK_CQ_NOTIFY_SOLICITED,
            _ => u32::from(ty),
        };
        self.cqs[c].obj.arms += 1;
        self.cqs[c].obj.cq.arm(ty);
    }

    fn check_notifications(&self) {
        for (i, c) in self.cqs.iter().enumerate() {
            let notes = c.obj.cq.notifications();
            assert!(
                notes.len() <= c.obj.arms as usize,
                "CQ {i}: {} notifications for {} arms",
                notes.len(),
                c.obj.arms
            );
            for st in notes {
                check("CqNotification", st, status::CQ_NOTIFICATION, true);
            }
        }
        for s in &self.srqs {
            for st in s.obj.srq.notifications() {
                check("SrqNotification", st, status::SRQ_NOTIFICATION, true);
            }
        }
    }

    fn flush(&mut self, qp: u8) {
        let Some(q) = pick(&self.qps, qp, |_| true) else {
            return;
        };
        self.qps[q].obj.qp.flush();
        self.qps[q].obj.fresh = false;
    }

    fn modify_srq(&mut self, srq: u8, depth: u16, threshold: u8) {
        let Some(s) = pick(&self.srqs, srq, |_| true) else {
            return;
        };
        let r = self.srqs[s]
            .obj
            .srq
            .modify_raw(depth_of(depth), u32::from(threshold));
        check("NdkModifySrq", r.inline, status::REQUEST, self.broken());
        let st = r.wait();
        check(
            "NdkModifySrq completion",
            st,
            status::REQUEST,
            self.broken(),
        );
    }

    // ------------------------------------------------------------------------ closes

    fn close(&mut self, kind: Kind, index: u8) {
        let picked = match kind {
            Kind::Cq => pick(&self.cqs, index, |_| true).map(|i| {
                let p = self.cqs[i].obj.cq.ptr;
                // SAFETY: a live CQ.
                (i, p.cast(), table(unsafe { (*p).Dispatch }).NdkCloseCq)
            }),
            Kind::Pd => pick(&self.pds, index, |_| true).map(|i| {
                let p = self.pds[i].obj.ptr;
                // SAFETY: a live PD.
                (i, p.cast(), table(unsafe { (*p).Dispatch }).NdkClosePd)
            }),
            Kind::Mr => pick(&self.mrs, index, |_| true).map(|i| {
                let p = self.mrs[i].obj.mr.ptr;
                // SAFETY: a live MR.
                (i, p.cast(), table(unsafe { (*p).Dispatch }).NdkCloseMr)
            }),
            Kind::Mw => pick(&self.mws, index, |_| true).map(|i| {
                let p = self.mws[i].obj.ptr;
                // SAFETY: a live MW.
                (i, p.cast(), table(unsafe { (*p).Dispatch }).NdkCloseMw)
            }),
            Kind::Srq => pick(&self.srqs, index, |_| true).map(|i| {
                let p = self.srqs[i].obj.srq.ptr;
                // SAFETY: a live SRQ.
                (i, p.cast(), table(unsafe { (*p).Dispatch }).NdkCloseSrq)
            }),
            Kind::Qp => pick(&self.qps, index, |_| true).map(|i| {
                let p = self.qps[i].obj.qp.ptr;
                // SAFETY: a live QP.
                (i, p.cast(), table(unsafe { (*p).Dispatch }).NdkCloseQp)
            }),
        };
        let Some((i, ptr, slot)): Option<(usize, *mut NDK_OBJECT_HEADER, NDK_FN_CLOSE_OBJECT)> =
            picked
        else {
            return;
        };
        let ctx = Arc::new(CloseCtx::default());
        // SAFETY: a live object of the provider, closed once (its record leaves the live
        // set below); the context lives in the record until the end.
        let st = unsafe { slot(ptr, on_close, Arc::as_ptr(&ctx) as PVOID) };
        assert!(
            st == STATUS_SUCCESS || st == STATUS_PENDING,
            "{kind:?} close returned {st:#010x}: a close never fails (§5.1)"
        );
        let closing = Some(Closing {
            pended: st == STATUS_PENDING,
            ctx,
        });
        match kind {
            Kind::Cq => self.cqs[i].closing = closing,
            Kind::Pd => self.pds[i].closing = closing,
            Kind::Mr => self.mrs[i].closing = closing,
            Kind::Mw => self.mws[i].closing = closing,
            Kind::Srq => self.srqs[i].closing = closing,
            Kind::Qp => self.qps[i].closing = closing,
        }
    }

    /// A close that completed inline never calls back; a pending one at most once.
    fn check_closes(&self) {
        let all = self
            .cqs
            .iter()
            .map(|r| &r.closing)
            .chain(self.pds.iter().map(|r| &r.closing))
            .chain(self.mrs.iter().map(|r| &r.closing))
            .chain(self.mws.iter().map(|r| &r.closing))
            .chain(self.srqs.iter().map(|r| &r.closing))
            .chain(self.qps.iter().map(|r| &r.closing));
        for c in all.flatten() {
            let n = c.completions();
            assert!(
                n <= u32::from(c.pended),
                "CloseCompletion {n} times for a close that {}",
                if c.pended {
                    "pended"
                } else {
                    "returned SUCCESS"
                }
            );
        }
    }

    // ------------------------------------------------------------------------ device writes

    fn device_write(&mut self, w: &DeviceWrite) {
        self.taint.device = true;
        match *w {
            DeviceWrite::CqeBytes {
                cq,
                slot,
                offset,
                bytes,
            } => {
                let Some(r) = self.ring(cq) else { return };
                let (h, ring) = r;
                let slot = u64::from(slot) % u64::from(ring.n.max(1));
                let at = slot * 64 + u64::from(offset % 57);
                let Some(&page) = ring.pages.get((at / 4096) as usize) else {
                    return;
                };
                let _ = self.c.host(h).space.write(page + at % 4096, &bytes);
            }
            DeviceWrite::ForgeCqe {
                cq,
                qp,
                wr_id,
                tag,
                opcode,
                status,
                byte_len,
                wc_flags,
                publish,
            } => {
                let Some((h, ring)) = self.ring(cq) else {
                    return;
                };
                let qps = live(&self.qps, |q| q.host == h);
                let handle = qps
                    .get(usize::from(qp) % qps.len().max(1))
                    .map_or(u32::from(qp), |&q| self.qps[q].obj.qp.handle());
                let sp = &self.c.host(h).space;
                let Ok(tail) = sp.read_u32(ring.state + 8) else {
                    return;
                };
                let n = ring.n.max(1);
                let slot = u64::from(tail % n);
                let mut cqe = [0u8; 64];
                let wr_id = u64::from(tag % 4) << 32 | u64::from(wr_id);
                cqe[0..8].copy_from_slice(&wr_id.to_le_bytes());
                cqe[8..16].copy_from_slice(&u64::from(handle).to_le_bytes());
                let op = if opcode & 0x80 != 0 {
                    128 + u32::from(opcode & 1)
                } else {
                    u32::from(opcode & 0xF)
                };
                cqe[16..20].copy_from_slice(&op.to_le_bytes());
                cqe[20..24].copy_from_slice(&u32::from(status % 24).to_le_bytes());
                cqe[24..28].copy_from_slice(&byte_len.to_le_bytes());
                cqe[36..40].copy_from_slice(&u32::from(wc_flags & 0x7F).to_le_bytes());
                let at = slot * 64;
                let Some(&page) = ring.pages.get((at / 4096) as usize) else {
                    return;
                };
                let _ = sp.write(page + at % 4096, &cqe);
                if publish {
                    // `tail` is device memory the input may have written: any value.
                    let next = tail.wrapping_add(1) % n.saturating_mul(2);
                    let _ = sp.write_u32(ring.state + 8, next);
                }
            }
            DeviceWrite::CqTail { cq, delta, raw } => {
                let Some((h, ring)) = self.ring(cq) else {
                    return;
                };
                let sp = &self.c.host(h).space;
                let Ok(head) = sp.read_u32(ring.state + 12) else {
                    return;
                };
                let v = raw.unwrap_or(head.wrapping_add(u32::from(delta % 4)));
                let _ = sp.write_u32(ring.state + 8, v);
            }
            DeviceWrite::AsyncRing {
                host,
                offset,
                bytes,
                delta,
                raw,
            } => self.device_ring(host, 40, 1, offset, &bytes, delta, raw),
            DeviceWrite::CqNotificationRing {
                host,
                offset,
                bytes,
                delta,
                raw,
            } => self.device_ring(host, 56, 2, offset, &bytes, delta, raw),
            DeviceWrite::Interrupt { host, vector } => {
                let h = self.c.host(usize::from(host % 2));
                h.platform.raise_interrupt(u32::from(vector % 4));
            }
        }
        self.c.settle();
    }

    fn ring(&self, cq: u8) -> Option<(usize, CqRing)> {
        let c = pick(&self.cqs, cq, |c| c.obj.ring.is_some())?;
        Some((self.cqs[c].host, self.cqs[c].obj.ring.clone()?))
    }

    /// A device ring: page 1 on holds the elements, page 0 the state (`rx` @8).
    #[allow(clippy::too_many_arguments)]
    fn device_ring(
        &self,
        host: u8,
        pdir_at: u64,
        vector: u32,
        offset: u16,
        bytes: &[u8],
        delta: u8,
        raw: Option<u32>,
    ) {
        let h = self.c.host(usize::from(host % 2));
        let sp = &h.space;
        let Ok(pdir) = sp.read_u64(h.bar1.dsr_address() + pdir_at) else {
            return;
        };
        let Ok(table) = sp.read_u64(pdir) else { return };
        let Ok(state) = sp.read_u64(table) else {
            return;
        };
        // Three element pages (the driver's 4-page rings).
        let at = u64::from(offset) % (3 * 4096 - bytes.len() as u64);
        if let Ok(page) = sp.read_u64(table + 8 * (1 + at / 4096)) {
            let _ = sp.write(page + at % 4096, bytes);
        }
        if let Ok(head) = sp.read_u32(state + 12) {
            let v = raw.unwrap_or(head.wrapping_add(u32::from(delta % 3)));
            let _ = sp.write_u32(state + 8, v);
        }
        h.platform.raise_interrupt(vector);
    }

    // ------------------------------------------------------------------------ driving

    /// One consumer call, then the invariants.
    pub fn call(&mut self, call: &Call) {
        status::trace(format_args!("{call:?}"));
        match *call {
            Call::CreateCq { host, depth } => {
                self.create_cq(usize::from(host % 2), depth_of(depth))
            }
            Call::CreatePd { host } => self.create_pd(usize::from(host % 2)),
            Call::CreateMr { pd, fast } => self.create_mr(pd, fast),
            Call::CreateMw { pd } => self.create_mw(pd),
            Call::CreateSrq {
                pd,
                depth,
                sge,
                threshold,
            } => self.create_srq(
                pd,
                depth_of(depth),
                u32::from(sge % 40),
                u32::from(threshold),
            ),
            Call::CreateQp {
                pd,
                rcq,
                icq,
                srq,
                receive_depth,
                initiator_depth,
                receive_sge,
                initiator_sge,
                inline_data,
            } => self.create_qp(
                pd,
                rcq,
                icq,
                srq,
                QpSpec {
                    context: 0,
                    receive_depth: depth_of(receive_depth),
                    initiator_depth: depth_of(initiator_depth),
                    receive_sge: u32::from(receive_sge % 40),
                    initiator_sge: u32::from(initiator_sge % 40),
                    inline_data: u32::from(inline_data & 0x3FFF),
                },
            ),
            Call::Register {
                mr,
                offset,
                pages,
                length,
                flags,
            } => self.register(mr, offset, pages % 32, length, flags),
            Call::Deregister { mr } => self.deregister(mr),
            Call::InitializeFastRegister { mr, pages, remote } => {
                self.initialize_fast_register(mr, pages, remote)
            }
            Call::Connect { a, b } => self.connect(a, b),
            Call::Post {
                qp,
                verb,
                count,
                ref sges,
                flags,
                ref remote,
                token,
            } => self.post(qp, verb, count, sges, flags, remote, token),
            Call::SrqReceive {
                srq,
                count,
                ref sges,
            } => self.srq_receive(srq, count, sges),
            Call::FastRegister {
                qp,
                mr,
                pages,
                fbo,
                length,
                va_page,
                flags,
            } => self.fast_register(qp, mr, pages, fbo, length, va_page, flags),
            Call::Invalidate {
                qp,
                target,
                window,
                flags,
            } => self.invalidate(qp, target, window, flags),
            Call::Bind {
                qp,
                mr,
                mw,
                offset,
                length,
                flags,
            } => self.bind(qp, mr, mw, offset, length, flags),
            Call::Poll { cq, n, ex } => self.poll(cq, n, ex),
            Call::Arm { cq, ty } => self.arm(cq, ty),
            Call::Flush { qp } => self.flush(qp),
            Call::ModifySrq {
                srq,
                depth,
                threshold,
            } => self.modify_srq(srq, depth, threshold),
            Call::Close { kind, index } => self.close(kind, index),
            Call::Settle => self.c.settle(),
        }
        self.check_notifications();
        self.check_closes();
    }

    /// One step of target `device_memory`.
    pub fn step(&mut self, s: &Step) {
        match s {
            Step::Call(c) => self.call(c),
            Step::Device(w) => {
                status::trace(format_args!("{w:?}"));
                self.device_write(w);
                self.check_notifications();
                self.check_closes();
            }
        }
    }

    /// Flushes every QP, drains every CQ, checks that every request that could complete
    /// did, closes everything (children first), checks every close completed once, and
    /// runs the cluster's leak checks.
    pub fn finish(mut self) {
        self.c.settle();
        for q in live(&self.qps, |_| true) {
            self.qps[q].obj.qp.flush();
        }
        self.c.settle();
        // An arm reports a CQ that failed (overrun, device error) to its callback.
        for c in live(&self.cqs, |_| true) {
            self.cqs[c].obj.arms += 1;
            self.cqs[c].obj.cq.arm(NDK_CQ_NOTIFY_ERRORS);
        }
        // A full CQ holds the device's next CQEs back until a poll makes room: poll and
        // settle until a round finds nothing.
        loop {
            self.c.settle();
            let mut got = 0;
            for c in live(&self.cqs, |_| true) {
                got += self.poll_cq(c, 8, c % 2 == 0);
            }
            if got == 0 {
                break;
            }
        }
        if std::env::var_os("FUZZ_TRACE").is_some() {
            for (i, c) in self.cqs.iter().enumerate() {
                let r = c.obj.ring.as_ref();
                let sp = &self.c.host(c.host).space;
                let idx = r.map(|r| (r.n, sp.read_u32(r.state + 8), sp.read_u32(r.state + 12)));
                // SAFETY: a CQ of this provider, not yet closed.
                let o = unsafe {
                    pvrdma_ndk::ndk::object::ObjRef::<pvrdma_ndk::ndk::cq::Cq>::borrow(c.obj.cq.ptr)
                };
                let hd = o.map(|o| (o.handle(), o.depth()));
                eprintln!(
                    "CQ {i}: host {}, handle/depth {hd:?}, ring {idx:?}, notes {:?}, arms {}",
                    c.host,
                    c.obj.cq.notifications(),
                    c.obj.arms
                );
                if let Some(r) = r {
                    for slot in 0..r.n.min(4) {
                        let at = u64::from(slot) * 64;
                        let page = r.pages[(at / 4096) as usize];
                        let rd = |o: u64| sp.read_u32(page + at % 4096 + o).unwrap_or(0);
                        eprintln!(
                            "  CQE {slot}: wr_id {:#x}:{:#x} qp {:#x} opcode {} status {} byte_len {}",
                            rd(4),
                            rd(0),
                            rd(8),
                            rd(16),
                            rd(20),
                            rd(24)
                        );
                    }
                }
            }
            for h in 0..2 {
                eprintln!(
                    "host {h}: {:?} {:?}",
                    self.c.host(h).dev.stats(),
                    self.c.host(h).model.counters()
                );
            }
        }
        if !self.taint.device {
            self.check_all_completed();
        }
        for kind in [Kind::Qp, Kind::Mw, Kind::Mr, Kind::Srq, Kind::Pd, Kind::Cq] {
            loop {
                let n = match kind {
                    Kind::Qp => live_count(&self.qps),
                    Kind::Mw => live_count(&self.mws),
                    Kind::Mr => live_count(&self.mrs),
                    Kind::Srq => live_count(&self.srqs),
                    Kind::Pd => live_count(&self.pds),
                    Kind::Cq => live_count(&self.cqs),
                };
                if n == 0 {
                    break;
                }
                self.close(kind, 0);
            }
        }
        self.c.settle();
        let pending = || {
            self.cqs
                .iter()
                .map(|r| &r.closing)
                .chain(self.pds.iter().map(|r| &r.closing))
                .chain(self.mrs.iter().map(|r| &r.closing))
                .chain(self.mws.iter().map(|r| &r.closing))
                .chain(self.srqs.iter().map(|r| &r.closing))
                .chain(self.qps.iter().map(|r| &r.closing))
                .flatten()
                .filter(|c| c.pended && c.completions() == 0)
                .count()
        };
        self.c
            .wait_for("every pending close to complete", || pending() == 0);
        self.c.settle();
        self.check_closes();
        self.check_notifications();
        let Session {
            c,
            mems,
            before,
            mrs,
            taint,
            ..
        } = self;
        drop(mrs);
        let world = World { c, mems };
        // Device memory written: the driver and the model may disagree on any state, so the
        // world is not reused; its teardown checks run now, on this input.
        if taint.device {
            world.finish();
        } else {
            world.keep(&before);
        }
    }

    /// With nothing written into device memory: after the flush and the drain, a request
    /// accepted on a queue that still works completed exactly once (a silent success may
    /// have been retired without a result).
    fn check_all_completed(&self) {
        for (i, r) in self.reqs.iter().enumerate() {
            if r.done != 0 {
                continue;
            }
            let cq_failed = |c: usize| {
                self.cqs[c]
                    .obj
                    .cq
                    .notifications()
                    .iter()
                    .any(|&s| s != STATUS_SUCCESS)
            };
            let (q, open) = match r.qp {
                Some(q) => (Some(q), self.qps[q].obj.chain_open),
                None => (None, false),
            };
            let cq_of_queue = q.map(|q| {
                if r.receive {
                    self.qps[q].obj.rcq
                } else {
                    self.qps[q].obj.icq
                }
            });
            let excused = !r.signaled
                || open
                || q.is_some_and(|q| self.qps[q].closing.is_some())
                || cq_of_queue.is_some_and(cq_failed)
                || cq_of_queue.is_some_and(|c| self.cqs[c].closing.is_some())
                // An SRQ receive nobody consumed stays posted until the SRQ closes.
                || r.srq.is_some();
            assert!(excused, "request {i} ({r:?}) never completed");
        }
    }
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

/// Target `consumer_calls`.
pub fn run_calls(calls: &[Call]) {
    let mut s = Session::new();
    for c in calls.iter().take(64) {
        s.call(c);
    }
    s.finish();
}

/// A steps input of target `device_memory` ([`DeviceInput::Steps`]).
pub fn run_steps(steps: &[Step]) {
    let mut s = Session::new();
    for st in steps.iter().take(64) {
        s.step(st);
    }
    s.finish();
}

/// An input of target `device_memory`: one of two independent tests, each on its own rig
/// (once both ran on every input, doubling its cost for no interaction between them).
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum DeviceInput {
    /// Bring-up and command responses written by the device ([`crate::bringup`]), on a
    /// one-host rig of its own.
    Bringup(crate::bringup::Input),
    /// Consumer calls interleaved with device writes, on the kept [`World`].
    Steps(Vec<Step>),
}

/// Runs an input of target `device_memory`.
pub fn run_device(input: &DeviceInput) {
    match input {
        DeviceInput::Bringup(b) => {
            let kept = crate::bringup::run(b);
            // The kept world's final check (`Cluster::finish`) must expect what the
            // bring-up rig's driver kept for good.
            WORLD.with(|w| {
                if let Some(w) = w.0.borrow_mut().as_mut() {
                    w.c.expect_kept(kept);
                }
            });
        }
        DeviceInput::Steps(steps) => run_steps(steps),
    }
}
