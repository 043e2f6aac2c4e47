//! Drives the NDK provider object layer through its real dispatch tables, as a kernel
//! consumer does (read `Dispatch`, call the slot), against the device model in its
//! deterministic mode. Asserts exact NTSTATUS values, callback counts and callback order
//! (ndkpi.md §5), the commands, WQEs and doorbells the calls produce (§5.5, pvrdma.md §1
//! mapping), and the results built from CQEs (§3.3, Project decision (c)).
//!
//! The test plays the device's completions itself: its QPs stay in INIT in the model (they
//! are marked connected on the NDK side only, `set_qp_connected`), so the model runs none of
//! their WQEs, and the CQEs, notifications and events the tests need are put on the device's
//! rings through the model's harness knobs (`inject_cqe`, `inject_cqne`, `post_event`),
//! untrusted ones included. The commands the driver issues are read out of the command slot
//! at each REQUEST write, the doorbells off the UAR page, the WQEs out of the rings.

mod common;

use core::ptr::null_mut;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{PlatformSink, SimBar1, SimDma};
use pvrdma_host::{HostDevice, HostPlatform};
use pvrdma_ndk::ndk::completion::{tag, wr_id};
use pvrdma_ndk::ndk::object::ObjRef;
use pvrdma_ndk::ndk::{NdkDevice, dispatch, set_qp_connected};
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::{Platform, RegisterIo};
use pvrdma_ndk::pvrdma::cqe::wc_status as wc;
use pvrdma_ndk::pvrdma::device::{Device, DeviceConfig};
use pvrdma_ndk::pvrdma::verbs::Verbs;
use pvrdma_ndk::pvrdma::wq::{RecvWqe, SendWqe, WqKind, WqWriter};
use pvrdma_ndk::pvrdma::wqe::WrOpcode;
use pvrdma_sim::DmaSpace;

// ---------------------------------------------------------------- the device model

#[derive(Clone, Debug, PartialEq, Eq)]
struct Wqe {
    qp: u32,
    index: u32,
    wr_id: u64,
    opcode: WrOpcode,
    send_flags: u32,
    nsge: usize,
    remote_addr: u64,
    rkey: u32,
    invalidate_rkey: u32,
    /// (iova, pages, length, access, key, page-list directory)
    fast_reg: Option<(u64, usize, u32, u32, u32, u64)>,
}

/// What the driver did to the device, in order: doorbells (pvrdma.md §12) and the commands
/// the tests look for (§8).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Hw {
    Destroy(&'static str, u32),
    RingSend(u32),
    RingRecv(u32),
    RingSrq(u32),
    Arm(u32, bool),
    /// CQ POLL: a poll (or an arm's re-check) found the CQ empty.
    Poll(u32),
    /// MODIFY_QP to ERR.
    Flush(u32),
    SrqLimit(u32, u32),
    /// A UAR store that is none of the doorbells above: (offset, value).
    Doorbell(u32, u32),
}

/// A command the driver issued: its code and request bytes (§8).
#[derive(Clone, Debug)]
struct Cmd {
    code: u32,
    req: Vec<u8>,
}

impl Cmd {
    fn u32(&self, off: usize) -> u32 {
        le32(&self.req, off)
    }
    fn u64(&self, off: usize) -> u64 {
        le64(&self.req, off)
    }
}

/// Command codes (§8).
mod code {
    pub const DESTROY_PD: u32 = 3;
    pub const CREATE_MR: u32 = 4;
    pub const DESTROY_MR: u32 = 5;
    pub const DESTROY_CQ: u32 = 8;
    pub const CREATE_QP: u32 = 9;
    pub const MODIFY_QP: u32 = 10;
    pub const DESTROY_QP: u32 = 12;
    pub const CREATE_SRQ: u32 = 17;
    pub const MODIFY_SRQ: u32 = 18;
    pub const DESTROY_SRQ: u32 = 20;
}
/// CREATE_MR `flags` of the PD's DMA MR.
const MR_FLAG_DMA: u32 = 1;
/// `pvrdma_qp_state` ERR and the STATE bit of the attribute mask.
const QPS_ERR: u32 = 6;
const QP_ATTR_STATE: u32 = 1;

/// A CQE the test puts on a CQ ring (encoded into a 64-byte CQE by the model, §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HwCqe {
    wr_id: u64,
    qp: u32,
    status: u32,
    byte_len: u32,
    invalidated_rkey: Option<u32>,
    /// `wc_flags` over the ones the fields above imply.
    extra_flags: u32,
}

/// `wc_flags` WITH_INVALIDATE (pvrdma.md §11).
const WC_WITH_INVALIDATE: u32 = 1 << 2;
/// CQE `opcode` of a receive completion (`PVRDMA_WC_RECV`).
const WC_RECV: u32 = 128;

impl HwCqe {
    fn to_model(self) -> pvrdma_sim::wqe::Cqe {
        let receive = matches!((self.wr_id >> 32) as u32, tag::RQ | tag::SRQ);
        let (flags, key) = match self.invalidated_rkey {
            Some(k) => (WC_WITH_INVALIDATE, k),
            None => (0, 0),
        };
        pvrdma_sim::wqe::Cqe {
            wr_id: self.wr_id,
            qp: u64::from(self.qp),
            opcode: if receive { WC_RECV } else { 0 },
            status: self.status,
            byte_len: self.byte_len,
            imm_data: key.to_le_bytes(),
            wc_flags: flags | self.extra_flags,
            ..Default::default()
        }
    }
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// What the tests read back of the driver's calls.
#[derive(Default)]
struct Record {
    log: Vec<Hw>,
    cmds: Vec<Cmd>,
}

/// BAR1 of the model, reading each command out of the command slot as the driver posts it
/// (the REQUEST write, §8 step 2).
struct Bar1 {
    inner: Arc<SimBar1>,
    space: Arc<DmaSpace>,
    record: Arc<Mutex<Record>>,
}

/// The REQUEST register.
const REQUEST: u32 = 0x10;
/// The DSR's command-slot address.
const DSR_CMD_SLOT: u64 = 16;

impl RegisterIo for Bar1 {
    fn read32(&self, off: u32) -> u32 {
        self.inner.read32(off)
    }
    fn write32(&self, off: u32, val: u32) {
        if off == REQUEST {
            let mut slot = [0u8; 8];
            self.space
                .read(self.inner.dsr_address() + DSR_CMD_SLOT, &mut slot)
                .expect("DSR");
            let mut req = vec![0u8; 184];
            self.space
                .read(u64::from_le_bytes(slot), &mut req)
                .expect("command slot");
            let cmd = Cmd {
                code: le32(&req, 8),
                req,
            };
            let h = cmd.u32(16);
            let logged = match cmd.code {
                code::DESTROY_PD => Some(Hw::Destroy("pd", h)),
                code::DESTROY_MR => Some(Hw::Destroy("mr", h)),
                code::DESTROY_CQ => Some(Hw::Destroy("cq", h)),
                code::DESTROY_QP => Some(Hw::Destroy("qp", h)),
                code::DESTROY_SRQ => Some(Hw::Destroy("srq", h)),
                code::MODIFY_QP if cmd.u32(20) == QP_ATTR_STATE && cmd.u32(24) == QPS_ERR => {
                    Some(Hw::Flush(h))
                }
                code::MODIFY_SRQ => Some(Hw::SrqLimit(h, cmd.u32(32))),
                _ => None,
            };
            let mut r = self.record.lock().unwrap();
            r.log.extend(logged);
            r.cmds.push(cmd);
        }
        self.inner.write32(off, val);
    }
}

/// A doorbell store, decoded (pvrdma.md §12).
fn doorbell(off: u32, val: u32) -> Hw {
    let h = val & 0x00FF_FFFF;
    match (off, val & !0x00FF_FFFF) {
        (0, v) if v == 1 << 30 => Hw::RingSend(h),
        (0, v) if v == 1 << 31 => Hw::RingRecv(h),
        (4, v) if v == 1 << 30 => Hw::Arm(h, false),
        (4, v) if v == 1 << 29 => Hw::Arm(h, true),
        (4, v) if v == 1 << 31 => Hw::Poll(h),
        (8, v) if v == 1 << 30 => Hw::RingSrq(h),
        _ => Hw::Doorbell(off, val),
    }
}

/// The test's own view of a driver-produced ring (a second writer over the same memory,
/// from the seam): which WQEs it has read so far.
struct Reader<K> {
    writer: WqWriter<K>,
    /// Free-running index of the next WQE to read.
    seen: u32,
    /// Bytes of a WQE worth reading (header and SGEs).
    bytes: usize,
}

impl<K: WqKind> Reader<K> {
    fn new(writer: WqWriter<K>) -> Reader<K> {
        let bytes = K::HEADER + 16 * writer.max_sge() as usize;
        Reader {
            writer,
            seen: 0,
            bytes,
        }
    }

    /// The WQEs published since the last call, by free-running index.
    fn take_new(&mut self) -> Vec<(u32, Vec<u8>)> {
        let wrap = 2 * self.writer.entries();
        let ahead = self.writer.published().wrapping_sub(self.seen) & (wrap - 1);
        (0..ahead)
            .map(|_| {
                let index = self.seen;
                let mut buf = vec![0u8; self.bytes];
                self.writer.read_element(index, &mut buf);
                self.seen = index.wrapping_add(1);
                (index, buf)
            })
            .collect()
    }
}

/// The rings of one QP or SRQ as the test reads them.
struct Rings {
    sq: Option<Reader<SendWqe>>,
    rq: Option<Reader<RecvWqe>>,
}

/// Every WQE read so far, in the order the test read them.
#[derive(Default)]
struct Posted {
    /// Send WQEs: (qp, free-running index, bytes).
    sq: Vec<(u32, u32, Vec<u8>)>,
    /// QP receive WQEs: (qp, index, wr_id, SGEs).
    rq: Vec<(u32, u32, u64, usize)>,
    /// SRQ WQEs: (srq, index, wr_id).
    srq: Vec<(u32, u32, u64)>,
}

fn opcode(v: u32) -> WrOpcode {
    match v {
        0 => WrOpcode::RdmaWrite,
        2 => WrOpcode::Send,
        4 => WrOpcode::RdmaRead,
        8 => WrOpcode::SendWithInv,
        10 => WrOpcode::LocalInv,
        11 => WrOpcode::FastRegMr,
        _ => panic!("unexpected WQE opcode {v}"),
    }
}

/// Decodes a send WQE (pvrdma.md §10).
fn decode_send(qp: u32, index: u32, b: &[u8]) -> Wqe {
    let op = opcode(le32(b, 16));
    let fast = op == WrOpcode::FastRegMr;
    let fast_reg = fast.then(|| {
        assert_eq!(le32(b, 48), 12, "page_shift");
        (
            le64(b, 32),
            le32(b, 52) as usize,
            le32(b, 56),
            le32(b, 60),
            le32(b, 64),
            le64(b, 40),
        )
    });
    Wqe {
        qp,
        index,
        wr_id: le64(b, 0),
        opcode: op,
        send_flags: le32(b, 20),
        nsge: le32(b, 8) as usize,
        remote_addr: if fast { 0 } else { le64(b, 32) },
        rkey: if fast { 0 } else { le32(b, 40) },
        invalidate_rkey: le32(b, 24),
        fast_reg,
    }
}

/// The device model in deterministic mode, the driver probed against it and the hardware
/// seam over it; and what the driver did to it.
struct Model {
    sim: Arc<pvrdma_sim::Device>,
    space: Arc<DmaSpace>,
    platform: Arc<HostPlatform>,
    hw: Arc<Verbs>,
    record: Arc<Mutex<Record>>,
    rings: Mutex<BTreeMap<(bool, u32), Rings>>,
    posted: Mutex<Posted>,
    /// Rounds of the driver's PASSIVE_LEVEL waits (`Platform::wait_until` pumps once a
    /// round) since the probe.
    pumps: Arc<AtomicU64>,
}

/// Bound on a settle: a hang, not a timing assertion.
const HANG: Duration = Duration::from_secs(30);

impl Model {
    fn new(cfg: pvrdma_sim::DeviceConfig) -> Arc<Model> {
        let space = Arc::new(DmaSpace::new());
        let sim = pvrdma_sim::Device::new(space.clone(), cfg);
        let record = Arc::new(Mutex::new(Record::default()));
        let bar1 = Arc::new(Bar1 {
            inner: SimBar1::new(sim.clone()),
            space: space.clone(),
            record: record.clone(),
        });
        let (m, r) = (sim.clone(), record.clone());
        let pump_sim = sim.clone();
        let pumps = Arc::new(AtomicU64::new(0));
        let counted = pumps.clone();
        let platform = HostPlatform::new(
            HostDevice {
                bar1,
                dma: SimDma::new(space.clone()),
                doorbell: Some(Arc::new(move |off, val| {
                    r.lock().unwrap().log.push(doorbell(off, val));
                    m.uar_write32(off, val);
                })),
                uar_pfn: common::DEFAULT_UAR_PFN,
                pump: Some(Arc::new(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    pump_sim.process();
                    pump_sim.deliver_interrupts();
                    std::thread::yield_now();
                })),
            },
            1,
        );
        sim.set_interrupt_sink(Arc::new(PlatformSink(Arc::downgrade(&platform))));
        let p: Arc<dyn Platform> = platform.clone();
        let dev = Device::probe(p, &DeviceConfig::default()).expect("probe the model");
        let hw = Verbs::new(Arc::new(dev)).expect("hardware");
        pumps.store(0, Ordering::SeqCst);
        Arc::new(Model {
            sim,
            space,
            platform,
            hw,
            record,
            rings: Mutex::new(BTreeMap::new()),
            posted: Mutex::new(Posted::default()),
            pumps,
        })
    }

    /// Rounds of the driver's PASSIVE_LEVEL waits since the probe.
    fn waits(&self) -> u64 {
        self.pumps.load(Ordering::SeqCst)
    }

    /// Runs the model and its interrupts, and waits for the driver's DPCs, until neither has
    /// anything left to do.
    fn settle(&self) {
        common::settle_model(&self.sim, self.platform.executor());
    }

    fn log(&self) -> Vec<Hw> {
        self.settle();
        self.record.lock().unwrap().log.clone()
    }
    fn clear_log(&self) {
        self.settle();
        self.record.lock().unwrap().log.clear();
    }
    fn count(&self, h: &Hw) -> usize {
        self.log().iter().filter(|x| *x == h).count()
    }
    /// Every command issued so far with code `code`.
    fn cmds(&self, code: u32) -> Vec<Cmd> {
        self.settle();
        let r = self.record.lock().unwrap();
        r.cmds.iter().filter(|c| c.code == code).cloned().collect()
    }
    /// Every CREATE_MR issued so far, but the PDs' DMA MRs.
    fn mr_cmds(&self) -> Vec<Cmd> {
        let mut v = self.cmds(code::CREATE_MR);
        v.retain(|c| c.u32(48) != MR_FLAG_DMA);
        v
    }
    /// The last CREATE_MR of a registration: (start, length, access, pages) (§8: `start`
    /// @16, `length` @24, `access_flags` @44).
    fn last_mr(&self) -> (u64, u64, u32, Vec<u64>) {
        let c = self.mr_cmds().pop().expect("a CREATE_MR");
        (c.u64(16), c.u64(24), c.u32(44), self.mr_pages(&c))
    }

    /// The page addresses a CREATE_MR's page directory lists.
    fn mr_pages(&self, c: &Cmd) -> Vec<u64> {
        self.dir_pages(c.u64(32), c.u32(52) as usize)
    }
    /// The first `n` page addresses of the page directory at `pdir` (§6).
    fn dir_pages(&self, pdir: u64, n: usize) -> Vec<u64> {
        (0..n as u64)
            .map(|i| {
                let table = self.read_u64(pdir + (i >> 9) * 8);
                self.read_u64(table + (i & 0x1FF) * 8)
            })
            .collect()
    }
    fn read_u64(&self, addr: u64) -> u64 {
        let mut b = [0u8; 8];
        self.space.read(addr, &mut b).expect("guest memory");
        u64::from_le_bytes(b)
    }

    /// Starts reading QP `qp`'s rings (before its first post).
    fn watch_qp(&self, qp: u32) {
        let (sq, rq) = self.hw.qp_writers(qp).expect("a QP of the model");
        self.rings.lock().unwrap().insert(
            (false, qp),
            Rings {
                sq: Some(Reader::new(sq)),
                rq: rq.map(Reader::new),
            },
        );
    }
    /// Starts reading SRQ `srq`'s ring.
    fn watch_srq(&self, srq: u32) {
        let w = self.hw.srq_writer(srq).expect("an SRQ of the model");
        self.rings.lock().unwrap().insert(
            (true, srq),
            Rings {
                sq: None,
                rq: Some(Reader::new(w)),
            },
        );
    }
    /// Reads every WQE published since the last look, queue by queue.
    fn sync(&self) {
        let mut rings = self.rings.lock().unwrap();
        let mut p = self.posted.lock().unwrap();
        for (&(srq, h), r) in rings.iter_mut() {
            if let Some(sq) = &mut r.sq {
                for (index, b) in sq.take_new() {
                    p.sq.push((h, index, b));
                }
            }
            if let Some(rq) = &mut r.rq {
                for (index, b) in rq.take_new() {
                    if srq {
                        p.srq.push((h, index, le64(&b, 0)));
                    } else {
                        p.rq.push((h, index, le64(&b, 0), le32(&b, 8) as usize));
                    }
                }
            }
        }
    }
    /// Every send WQE posted, in posting order.
    fn wqes(&self) -> Vec<Wqe> {
        self.sync();
        let p = self.posted.lock().unwrap();
        p.sq.iter()
            .map(|(qp, index, b)| decode_send(*qp, *index, b))
            .collect()
    }
    /// Every QP receive WQE: (qp, index, wr_id, SGEs).
    fn recvs(&self) -> Vec<(u32, u32, u64, usize)> {
        self.sync();
        self.posted.lock().unwrap().rq.clone()
    }
    /// Every SRQ WQE: (srq, index, wr_id).
    fn srq_wqes(&self) -> Vec<(u32, u32, u64)> {
        self.sync();
        self.posted.lock().unwrap().srq.clone()
    }
    /// The device writes `cqe` into CQ `cq` (no notification: the test plays those).
    fn push_cqe(&self, cq: u32, cqe: HwCqe) {
        let c = cqe.to_model();
        assert!(
            self.sim.with_core(|core| core.inject_cqe(cq, &c)),
            "the CQE fits the ring of CQ {cq}"
        );
    }
    /// The device writes a CQNE for `cq`, arm or not, and raises its interrupt; then the
    /// model settles.
    fn cq_notification(&self, cq: u32) {
        self.cq_notification_nowait(cq);
        self.settle();
    }
    /// [`Self::cq_notification`] without waiting for it to be delivered.
    fn cq_notification_nowait(&self, cq: u32) {
        self.sim.with_core(|core| core.inject_cqne(cq));
        self.sim.deliver_interrupts();
    }
    /// [`Self::count`] of what is logged already, without settling the model.
    fn count_now(&self, h: &Hw) -> usize {
        let r = self.record.lock().unwrap();
        r.log.iter().filter(|x| *x == h).count()
    }
    /// CQ_ERR for `cq` on the async ring.
    fn cq_error(&self, cq: u32) {
        self.event(EVENT_CQ_ERR, cq);
    }
    /// An async event (§13) of type `ty` for `info`.
    fn event(&self, ty: u32, info: u32) {
        self.sim.with_core(|core| core.post_event(ty, info));
        self.settle();
    }
}

/// Async event types (§13).
const EVENT_CQ_ERR: u32 = 0;
const EVENT_SRQ_ERR: u32 = 14;
const EVENT_SRQ_LIMIT_REACHED: u32 = 15;

// ---------------------------------------------------------------- consumer side

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Close(usize),
    Create(usize),
    Request(usize),
    Cq(usize, NTSTATUS),
    Srq(usize, NTSTATUS),
}

/// The callbacks' context carries its test environment in its high half (the callbacks run
/// on the test's thread or on a DPC's): each environment's events apart, whatever runs in
/// parallel.
const ENV_SHIFT: u32 = 40;

/// Everything the consumer callbacks saw, per environment.
#[derive(Default)]
struct Seen {
    events: Vec<Ev>,
    /// The status and object of each CreateCompletion, by context.
    created: BTreeMap<usize, (NTSTATUS, usize)>,
    /// The status of each RequestCompletion, by context.
    requests: BTreeMap<usize, NTSTATUS>,
    /// A CQ the notification callback closes from inside the callback.
    close_in_cq_cb: usize,
}

static SEEN: Mutex<BTreeMap<u64, Seen>> = Mutex::new(BTreeMap::new());
static NEXT_ENV: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The environment of the test running on this thread.
    static CURRENT: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

fn split(ctx: PVOID) -> (u64, usize) {
    let v = ctx as usize;
    ((v >> ENV_SHIFT) as u64, v & ((1 << ENV_SHIFT) - 1))
}

fn with_seen<R>(env: u64, f: impl FnOnce(&mut Seen) -> R) -> R {
    f(SEEN.lock().unwrap().entry(env).or_default())
}

/// The current environment's events so far (the model settled first).
fn events() -> Vec<Ev> {
    let env = CURRENT.with(|c| c.get());
    if let Some(m) = MODELS.lock().unwrap().get(&env).cloned() {
        m.settle();
    }
    with_seen(env, |s| core::mem::take(&mut s.events))
}

/// Each environment's model, for `events` to settle.
static MODELS: Mutex<BTreeMap<u64, Arc<Model>>> = Mutex::new(BTreeMap::new());

unsafe extern "system" fn close_cb(ctx: PVOID) {
    let (env, v) = split(ctx);
    with_seen(env, |s| s.events.push(Ev::Close(v)));
}
unsafe extern "system" fn create_cb(ctx: PVOID, st: NTSTATUS, o: *mut NDK_OBJECT_HEADER) {
    let (env, v) = split(ctx);
    with_seen(env, |s| {
        s.events.push(Ev::Create(v));
        s.created.insert(v, (st, o as usize));
    });
}
unsafe extern "system" fn request_cb(ctx: PVOID, st: NTSTATUS) {
    let (env, v) = split(ctx);
    with_seen(env, |s| {
        s.events.push(Ev::Request(v));
        s.requests.insert(v, st);
    });
}
unsafe extern "system" fn cq_cb(ctx: PVOID, st: NTSTATUS) {
    let (env, v) = split(ctx);
    let cq = with_seen(env, |s| {
        s.events.push(Ev::Cq(v, st));
        core::mem::take(&mut s.close_in_cq_cb)
    });
    if cq != 0 {
        let r = close_in(env, cq as *mut NDK_CQ, 77);
        with_seen(env, |s| s.events.push(Ev::Request(r as u32 as usize)));
    }
}
unsafe extern "system" fn srq_cb(ctx: PVOID, st: NTSTATUS) {
    let (env, v) = split(ctx);
    with_seen(env, |s| s.events.push(Ev::Srq(v, st)));
}

/// A callback context of the current environment.
fn ctx(v: usize) -> PVOID {
    let env = CURRENT.with(|c| c.get());
    ((env as usize) << ENV_SHIFT | v) as PVOID
}

/// Contexts the helpers use for their own creates and requests, apart from the tests' own.
static HELPER_CTX: AtomicUsize = AtomicUsize::new(0x1_0000_0000);

/// The dispatch table an object carries, read the way a consumer reads it.
trait Obj {
    type D: 'static;
    fn disp(p: *mut Self) -> &'static Self::D;
}
macro_rules! obj {
    ($n:ty, $d:ty) => {
        impl Obj for $n {
            type D = $d;
            fn disp(p: *mut Self) -> &'static $d {
                // SAFETY: `p` is a live object this provider returned.
                let d = unsafe { (*p).Dispatch };
                // SAFETY: the provider's dispatch tables are statics.
                unsafe { &*d }
            }
        }
    };
}
obj!(NDK_ADAPTER, NDK_ADAPTER_DISPATCH);
obj!(NDK_PD, NDK_PD_DISPATCH);
obj!(NDK_CQ, NDK_CQ_DISPATCH);
obj!(NDK_MR, NDK_MR_DISPATCH);
obj!(NDK_QP, NDK_QP_DISPATCH);
obj!(NDK_SRQ, NDK_SRQ_DISPATCH);

fn hdr<T>(p: *mut T) -> *mut NDK_OBJECT_HEADER {
    p.cast()
}

fn header<T>(p: *mut T) -> NDK_OBJECT_HEADER {
    // SAFETY: every NDK object starts with its header.
    unsafe { p.cast::<NDK_OBJECT_HEADER>().read() }
}

/// NDK_FN_CLOSE_OBJECT through the object's own table slot 0.
fn close<T>(p: *mut T, c: usize) -> NTSTATUS {
    close_in(CURRENT.with(|e| e.get()), p, c)
}

fn close_in<T>(env: u64, p: *mut T, c: usize) -> NTSTATUS {
    // SAFETY: slot 0 of every non-adapter table is the close function; `p` is live.
    let d = unsafe { p.cast::<NDK_PD>().read().Dispatch };
    // SAFETY: the first member of every table is an NDK_FN_CLOSE_OBJECT.
    let f = unsafe { d.cast::<NDK_FN_CLOSE_OBJECT>().read() };
    let ctx = ((env as usize) << ENV_SHIFT | c) as PVOID;
    // SAFETY: live object, valid callback.
    unsafe { f(hdr(p), close_cb, ctx) }
}

/// The device handle of a provider object.
fn handle_of<T: pvrdma_ndk::ndk::object::NdkObject>(p: *mut T::Ndk, h: impl Fn(&T) -> u32) -> u32 {
    // SAFETY: a live object of this provider, of type `T`.
    let o = unsafe { ObjRef::<T>::peek(p) }.expect("an object");
    h(o)
}

struct Env {
    model: Arc<Model>,
    dev: Arc<NdkDevice>,
    a: *mut NDK_ADAPTER,
    id: u64,
    /// Whether this environment built the model (another adapter's does not).
    owner: bool,
    /// (kind, handle) of every PD, CQ, QP and SRQ the helpers created, in order.
    created: std::cell::RefCell<Vec<(&'static str, u32)>>,
}

fn env_with(cfg: pvrdma_sim::DeviceConfig) -> Env {
    let model = Model::new(cfg);
    let dev = NdkDevice::new(model.hw.clone()).expect("device");
    let a = dev
        .open_adapter(NDK_VERSION { Major: 2, Minor: 0 })
        .expect("open");
    let id = NEXT_ENV.fetch_add(1, Ordering::Relaxed);
    CURRENT.with(|c| c.set(id));
    MODELS.lock().unwrap().insert(id, model.clone());
    Env {
        model,
        dev,
        a,
        id,
        owner: true,
        created: Default::default(),
    }
}

fn env() -> Env {
    env_with(pvrdma_sim::DeviceConfig::default())
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        MODELS.lock().unwrap().remove(&self.id);
        SEEN.lock().unwrap().remove(&self.id);
        self.model.platform.executor().shutdown();
    }
}

impl Env {
    /// Another adapter of the same device (the version negotiated from `v`).
    fn another_adapter(&self, v: NDK_VERSION) -> Env {
        self.on(self.dev.open_adapter(v).expect("open"))
    }

    /// The environment with adapter `a` (of the same device).
    fn on(&self, a: *mut NDK_ADAPTER) -> Env {
        Env {
            model: self.model.clone(),
            dev: self.dev.clone(),
            a,
            id: self.id,
            owner: false,
            created: Default::default(),
        }
    }

    /// The handle of the last object of `kind` ("pd", "cq", "qp", "srq") the helpers made.
    fn last(&self, kind: &str) -> u32 {
        self.created
            .borrow()
            .iter()
            .rev()
            .find(|(k, _)| *k == kind)
            .map(|(_, h)| *h)
            .unwrap_or_else(|| panic!("no {kind} created"))
    }

    fn note(&self, kind: &'static str, h: u32) {
        self.created.borrow_mut().push((kind, h));
    }

    /// A create through `call` (which gets the CreateCompletion context): the status and the
    /// object, from the call or, when it pended, from its CreateCompletion, which is then not
    /// among the test's events.
    fn create<T>(&self, call: impl FnOnce(PVOID, &mut *mut T) -> NTSTATUS) -> (NTSTATUS, *mut T) {
        let c = HELPER_CTX.fetch_add(1, Ordering::Relaxed);
        let mut out = null_mut();
        let st = call(ctx(c), &mut out);
        if st != STATUS_PENDING {
            return (st, out);
        }
        let deadline = Instant::now() + HANG;
        loop {
            self.model.settle();
            let done = with_seen(self.id, |s| {
                let r = s.created.remove(&c);
                if r.is_some() {
                    s.events.retain(|e| *e != Ev::Create(c));
                }
                r
            });
            if let Some((st, o)) = done {
                return (st, o as *mut T);
            }
            assert!(Instant::now() < deadline, "no CreateCompletion");
        }
    }

    /// A request `call` made with context `c`: its inline status, or, when it pended, the
    /// status its RequestCompletion reported, which is then not among the test's events.
    fn finish(&self, c: usize, st: NTSTATUS) -> NTSTATUS {
        if st != STATUS_PENDING {
            return st;
        }
        let deadline = Instant::now() + HANG;
        loop {
            self.model.settle();
            let done = with_seen(self.id, |s| {
                let r = s.requests.remove(&c);
                if r.is_some() {
                    let i = s.events.iter().position(|e| *e == Ev::Request(c));
                    if let Some(i) = i {
                        s.events.remove(i);
                    }
                }
                r
            });
            if let Some(st) = done {
                return st;
            }
            assert!(Instant::now() < deadline, "no RequestCompletion");
        }
    }

    fn info(&self) -> NDK_ADAPTER_INFO {
        // SAFETY: a zeroed NDK_ADAPTER_INFO is a valid value (integers only).
        let mut info: NDK_ADAPTER_INFO = unsafe { core::mem::zeroed() };
        let mut size = 0x68;
        // SAFETY: live adapter, buffer of `size` bytes.
        let st = unsafe {
            (NDK_ADAPTER::disp(self.a).NdkQueryAdapterInfo)(self.a, &mut info, &mut size)
        };
        assert_eq!(st, STATUS_SUCCESS);
        info
    }
    fn pd_status(&self, a: *mut NDK_ADAPTER) -> (NTSTATUS, *mut NDK_PD) {
        // SAFETY: live adapter, valid out pointer.
        self.create(|c, out| unsafe { (NDK_ADAPTER::disp(a).NdkCreatePd)(a, create_cb, c, out) })
    }
    fn pd(&self) -> *mut NDK_PD {
        self.pd_on(self.a)
    }
    fn pd_on(&self, a: *mut NDK_ADAPTER) -> *mut NDK_PD {
        let (st, pd) = self.pd_status(a);
        assert_eq!(st, STATUS_SUCCESS);
        self.note("pd", pd_handle(pd));
        pd
    }
    fn cq_status(&self, depth: u32, c: usize) -> (NTSTATUS, *mut NDK_CQ) {
        self.cq_status_on(self.a, depth, c)
    }
    fn cq_status_on(&self, a: *mut NDK_ADAPTER, depth: u32, c: usize) -> (NTSTATUS, *mut NDK_CQ) {
        let notify = ctx(c);
        let (st, cq) = self.create(|cc, out| {
            // SAFETY: live adapter, valid out pointer.
            unsafe {
                (NDK_ADAPTER::disp(a).NdkCreateCq)(
                    a,
                    depth,
                    cq_cb,
                    notify,
                    null_mut(),
                    create_cb,
                    cc,
                    out,
                )
            }
        });
        if st == STATUS_SUCCESS {
            self.note("cq", cq_handle(cq));
        }
        (st, cq)
    }
    fn cq(&self, c: usize) -> *mut NDK_CQ {
        let (st, cq) = self.cq_status(64, c);
        assert_eq!(st, STATUS_SUCCESS);
        cq
    }
    #[allow(clippy::too_many_arguments)]
    fn qp_status(
        &self,
        pd: *mut NDK_PD,
        rcq: *mut NDK_CQ,
        icq: *mut NDK_CQ,
        rq: u32,
        iq: u32,
        rsge: u32,
        isge: u32,
        inline: u32,
    ) -> (NTSTATUS, *mut NDK_QP) {
        let (st, qp) = self.create(|c, out| {
            // SAFETY: live objects, valid out pointer.
            unsafe {
                (NDK_PD::disp(pd).NdkCreateQp)(
                    pd,
                    rcq,
                    icq,
                    ctx(0x9C),
                    rq,
                    iq,
                    rsge,
                    isge,
                    inline,
                    create_cb,
                    c,
                    out,
                )
            }
        });
        if st == STATUS_SUCCESS {
            self.note("qp", qp_handle(qp));
            self.model.watch_qp(qp_handle(qp));
        }
        (st, qp)
    }
    fn qp(&self, pd: *mut NDK_PD, rcq: *mut NDK_CQ, icq: *mut NDK_CQ) -> *mut NDK_QP {
        let (st, qp) = self.qp_status(pd, rcq, icq, 8, 8, 4, 4, 0);
        assert_eq!(st, STATUS_SUCCESS);
        qp
    }
    fn mr(&self, pd: *mut NDK_PD, fast: bool) -> *mut NDK_MR {
        let (st, mr) = self.create(|c, out| {
            // SAFETY: live PD, valid out pointer.
            unsafe { (NDK_PD::disp(pd).NdkCreateMr)(pd, u8::from(fast), create_cb, c, out) }
        });
        assert_eq!(st, STATUS_SUCCESS);
        mr
    }
    fn close_adapter(&self) {
        // SAFETY: opened by `env`, closed once.
        unsafe { dispatch::close_adapter(self.a) };
    }
}

fn pd_handle(p: *mut NDK_PD) -> u32 {
    handle_of::<pvrdma_ndk::ndk::pd::Pd>(p, |o| o.handle())
}
fn cq_handle(p: *mut NDK_CQ) -> u32 {
    handle_of::<pvrdma_ndk::ndk::cq::Cq>(p, |o| o.handle())
}
fn qp_handle(p: *mut NDK_QP) -> u32 {
    handle_of::<pvrdma_ndk::ndk::Qp>(p, |o| o.handle())
}
fn srq_handle(p: *mut NDK_SRQ) -> u32 {
    handle_of::<pvrdma_ndk::ndk::srq::Srq>(p, |o| o.handle())
}
/// The MR handle behind a token: the model's keys are the handle shifted by 8 (and a key
/// byte an FRMR's fast registers advance).
fn mr_handle_of_token(token: u32) -> u32 {
    token >> 8
}

fn sge(va: u64, len: u32, token: u32) -> NDK_SGE {
    NDK_SGE {
        Anonymous: NDK_SGE_0 {
            LogicalAddress: va as i64,
        },
        Length: len,
        MemoryRegionToken: token,
    }
}

fn send(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE], flags: u32) -> NTSTATUS {
    // SAFETY: live QP; `sges` holds `len` entries.
    unsafe { (NDK_QP::disp(qp).NdkSend)(qp, ctx(c), sges.as_ptr(), sges.len() as u32, flags) }
}
fn write(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE], flags: u32) -> NTSTATUS {
    // SAFETY: as for `send`.
    unsafe {
        (NDK_QP::disp(qp).NdkWrite)(
            qp,
            ctx(c),
            sges.as_ptr(),
            sges.len() as u32,
            0x1000,
            0xAB00,
            flags,
        )
    }
}
fn read(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE], flags: u32) -> NTSTATUS {
    // SAFETY: as for `send`.
    unsafe {
        (NDK_QP::disp(qp).NdkRead)(
            qp,
            ctx(c),
            sges.as_ptr(),
            sges.len() as u32,
            0x2000,
            0xCD00,
            flags,
        )
    }
}
fn receive(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE]) -> NTSTATUS {
    // SAFETY: as for `send`.
    unsafe { (NDK_QP::disp(qp).NdkReceive)(qp, ctx(c), sges.as_ptr(), sges.len() as u32) }
}
#[allow(clippy::too_many_arguments)]
fn fast_register(
    qp: *mut NDK_QP,
    c: usize,
    mr: *mut NDK_MR,
    pages: &[NDK_LOGICAL_ADDRESS],
    fbo: u32,
    len: usize,
    bva: usize,
    flags: u32,
) -> NTSTATUS {
    // SAFETY: live objects; `pages` holds `len` entries.
    unsafe {
        (NDK_QP::disp(qp).NdkFastRegister)(
            qp,
            ctx(c),
            mr,
            pages.len() as u32,
            pages.as_ptr(),
            fbo,
            len,
            bva as PVOID,
            flags,
        )
    }
}
fn connect(qp: *mut NDK_QP) {
    // SAFETY: live QP.
    unsafe { set_qp_connected(qp, true) };
}
fn results_ex(cq: *mut NDK_CQ, n: usize) -> Vec<NDK_RESULT_EX> {
    // SAFETY: a zeroed result is a valid value (integers and null pointers).
    let mut out = vec![unsafe { core::mem::zeroed::<NDK_RESULT_EX>() }; n];
    // SAFETY: live CQ, `out` holds `n` entries.
    let got = unsafe { (NDK_CQ::disp(cq).NdkGetCqResultsEx)(cq, out.as_mut_ptr(), n as u32) };
    out.truncate(got as usize);
    for r in &mut out {
        r.RequestContext = split(r.RequestContext).1 as PVOID;
        r.QPContext = split(r.QPContext).1 as PVOID;
    }
    out
}
fn arm(cq: *mut NDK_CQ, t: u32) {
    // SAFETY: live CQ.
    unsafe { (NDK_CQ::disp(cq).NdkArmCq)(cq, t) };
}
fn cqe(qp: u32, wr_id: u64, status: u32) -> HwCqe {
    HwCqe {
        wr_id,
        qp,
        status,
        byte_len: 0,
        invalidated_rkey: None,
        extra_flags: 0,
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn open_negotiates_version_and_stamps_every_header() {
    let base = env();
    let dev = base.dev.clone();
    for (req, want) in [
        ((1, 0), (1, 2)),
        ((1, 2), (1, 2)),
        ((2, 0), (2, 1)),
        ((2, 1), (2, 1)),
    ] {
        let a = dev
            .open_adapter(NDK_VERSION {
                Major: req.0,
                Minor: req.1,
            })
            .expect("open");
        let h = header(a);
        assert_eq!((h.Version.Major, h.Version.Minor), want);
        assert_eq!(h.ObjectType, NdkObjectTypeAdapter);
        assert!(h.NdkReserved.rf.iter().all(|p| p.is_null()));
        // SAFETY: live adapter.
        let d = unsafe { (*a).Dispatch };
        assert!(core::ptr::eq(d, &dispatch::ADAPTER_DISPATCH));
        // Objects under it carry the negotiated version.
        let e = base.on(a);
        let pd = e.pd();
        let cq = e.cq(1);
        for (h, ty) in [(header(pd), NdkObjectTypePd), (header(cq), NdkObjectTypeCq)] {
            assert_eq!((h.Version.Major, h.Version.Minor), want);
            assert_eq!(h.ObjectType, ty);
        }
        assert_eq!(
            e.info().Version,
            NDK_VERSION {
                Major: want.0,
                Minor: want.1
            }
        );
        assert_eq!(close(cq, 1), STATUS_SUCCESS);
        assert_eq!(close(pd, 2), STATUS_SUCCESS);
        e.close_adapter();
    }
    for bad in [(1, 3), (2, 2), (3, 0), (0, 1)] {
        assert_eq!(
            dev.open_adapter(NDK_VERSION {
                Major: bad.0,
                Minor: bad.1
            })
            .err(),
            Some(NDIS_STATUS_BAD_VERSION)
        );
    }
    // The helpers took their creates' completions; the closes completed inline: no
    // callback at all.
    assert_eq!(events(), vec![]);
    base.close_adapter();
}

#[test]
fn several_adapters_per_device_are_independent() {
    let e1 = env();
    let e2 = e1.another_adapter(NDK_VERSION { Major: 1, Minor: 1 });
    let pd1 = e1.pd();
    let pd2 = e2.pd();
    assert_eq!(header(pd2).Version, NDK_VERSION { Major: 1, Minor: 2 });
    assert_eq!(header(pd1).Version, NDK_VERSION { Major: 2, Minor: 1 });
    assert_eq!(close(pd2, 2), STATUS_SUCCESS);
    e2.close_adapter();
    assert_eq!(close(pd1, 1), STATUS_SUCCESS);
    e1.close_adapter();
    assert_eq!(e1.model.waits(), 0, "no close had to wait");
}

#[test]
fn query_adapter_info_sizes_and_values() {
    let e = env();
    let mut buf = [0xEEu8; 0x70];
    let info_ptr = buf.as_mut_ptr().cast::<NDK_ADAPTER_INFO>();
    let q = |p: *mut NDK_ADAPTER_INFO, size: u32| -> (NTSTATUS, u32) {
        let mut s = size;
        // SAFETY: live adapter; `p` is null or has 0x70 bytes.
        let st = unsafe { (NDK_ADAPTER::disp(e.a).NdkQueryAdapterInfo)(e.a, p, &mut s) };
        (st, s)
    };
    assert_eq!(q(null_mut(), 0), (STATUS_BUFFER_TOO_SMALL, 0x68));
    assert_eq!(q(info_ptr, 0x5F), (STATUS_BUFFER_TOO_SMALL, 0x68));
    assert_eq!(q(info_ptr, 0x60), (STATUS_SUCCESS, 0x60));
    assert_eq!(
        &buf[0x60..0x64],
        &[0xEE; 4],
        "RdmaTechnology not written for a 0x60 buffer"
    );
    assert_eq!(q(info_ptr, 0x70), (STATUS_SUCCESS, 0x68));
    assert_eq!(&buf[0x68..0x70], &[0xEE; 8], "nothing beyond 0x68");
    let i = e.info();
    assert_eq!(i.Version, NDK_VERSION { Major: 2, Minor: 1 });
    assert_eq!(i.RdmaTechnology, NdkRoCEv2);
    assert_eq!(i.MaxCqDepth, 65536);
    assert_eq!(i.MaxSrqDepth, 4096);
    assert_eq!(i.FRMRPageCount, 512);
    assert_eq!(i.MaxWindowSize, 0);
    assert_eq!(i.MaxInlineDataSize, 0);
    assert_eq!(i.AdapterFlags, NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED);
    assert_eq!(i.AdapterFlags & NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED, 0);
    assert_eq!(
        i.AdapterFlags & NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED,
        0
    );
    e.close_adapter();
}

#[test]
fn unsupported_and_unimplemented_functions() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let guid = GUID::default();
    let mut ext = NDK_EXTENSION_INTERFACE {
        Dispatch: core::ptr::null(),
    };
    // SAFETY: live objects, valid pointers (as for every call below).
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkQueryExtension)(
            hdr(e.a),
            &guid,
            NDK_VERSION::default(),
            &mut ext,
        )
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: as above.
    let st = unsafe {
        (NDK_PD::disp(pd).NdkQueryExtension)(hdr(pd), &guid, NDK_VERSION::default(), &mut ext)
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: as above.
    let st = unsafe {
        (NDK_CQ::disp(cq).NdkQueryExtension)(
            hdr(cq),
            &guid,
            NDK_VERSION { Major: 1, Minor: 0 },
            &mut ext,
        )
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    let mut mw = null_mut();
    // SAFETY: as above.
    let st = unsafe { (NDK_PD::disp(pd).NdkCreateMw)(pd, create_cb, ctx(9), &mut mw) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    assert!(mw.is_null());
    // SAFETY: as above.
    let st = unsafe { (NDK_CQ::disp(cq).NdkResizeCq)(cq, 128, request_cb, ctx(9)) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: as above.
    let st = unsafe { (NDK_CQ::disp(cq).NdkControlCqInterruptModeration)(cq, 20, u32::MAX) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    let mut conn = null_mut();
    // SAFETY: as above.
    let st =
        unsafe { (NDK_ADAPTER::disp(e.a).NdkCreateConnector)(e.a, create_cb, ctx(9), &mut conn) };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    let mut lis = null_mut();
    // SAFETY: as above.
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkCreateListener)(
            e.a,
            connect_event_cb,
            null_mut(),
            create_cb,
            ctx(9),
            &mut lis,
        )
    };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    let addr = SOCKADDR::default();
    let mut se = null_mut();
    // SAFETY: as above.
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkCreateSharedEndpoint)(e.a, &addr, 16, create_cb, ctx(9), &mut se)
    };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    // Without a connection engine no connection object exists; the tables' functions refuse
    // a null object.
    let c = &dispatch::CONNECTOR_DISPATCH;
    // SAFETY: a null object is refused before anything is dereferenced.
    let st = unsafe { (c.NdkReject)(null_mut(), core::ptr::null(), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let st = unsafe { (c.NdkDisconnect)(null_mut(), request_cb, null_mut()) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let st = unsafe {
        (dispatch::LISTENER_DISPATCH.NdkListen)(null_mut(), &addr, 16, request_cb, null_mut())
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    assert!(conn.is_null() && lis.is_null() && se.is_null());
    assert_eq!(
        events(),
        vec![],
        "no create or request completion for inline failures"
    );
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 2), STATUS_SUCCESS);
    e.close_adapter();
}

unsafe extern "system" fn connect_event_cb(_c: PVOID, _conn: *mut NDK_CONNECTOR) {}

#[test]
fn create_cq_depth_limits() {
    let e = env();
    assert_eq!(e.cq_status(0, 1).0, STATUS_INVALID_PARAMETER);
    assert_eq!(e.cq_status(65537, 1).0, STATUS_INVALID_PARAMETER);
    let (st, cq) = e.cq_status(65536, 1);
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(events(), vec![]);
    e.close_adapter();
}

#[test]
fn antecedent_close_pends_until_the_last_successor_closes() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    assert_eq!(close(pd, 10), STATUS_PENDING);
    assert_eq!(close(cq, 11), STATUS_PENDING);
    assert_eq!(events(), vec![]);
    assert_eq!(close(mr, 12), STATUS_SUCCESS);
    assert_eq!(events(), vec![], "the QP still holds the PD");
    let pd_h = e.last("pd");
    assert_eq!(e.model.count(&Hw::Destroy("pd", pd_h)), 0);
    assert_eq!(close(qp, 13), STATUS_SUCCESS);
    // QP's successor counts drop after its close: CQ first, then PD (release order), each
    // CloseCompletion exactly once.
    assert_eq!(events(), vec![Ev::Close(11), Ev::Close(10)]);
    assert_eq!(e.model.count(&Hw::Destroy("pd", pd_h)), 1);
    e.close_adapter();
    assert_eq!(events(), vec![]);
}

#[test]
fn cq_close_inside_its_notification_callback_completes_after_it_returns() {
    let e = env();
    let cq = e.cq(5);
    let cq_h = e.last("cq");
    e.model.push_cqe(cq_h, cqe(99, 1, 0));
    with_seen(e.id, |s| s.close_in_cq_cb = cq as usize);
    arm(cq, NDK_CQ_NOTIFY_ANY);
    // Callback, the close inside it returned PENDING (0x103), then CloseCompletion.
    assert_eq!(
        events(),
        vec![
            Ev::Cq(5, STATUS_SUCCESS),
            Ev::Request(STATUS_PENDING as u32 as usize),
            Ev::Close(77)
        ]
    );
    assert_eq!(e.model.count(&Hw::Destroy("cq", cq_h)), 1);
    e.close_adapter();
}

#[test]
fn adapter_close_blocks_until_descendants_are_closed() {
    let e = env();
    let pd = e.pd();
    let (pd_addr, env_id, model) = (pd as usize, e.id, e.model.clone());
    // Another thread of the consumer finishes its closes while the adapter close waits.
    let closer = std::thread::spawn(move || {
        let deadline = Instant::now() + HANG;
        while model.waits() == 0 {
            assert!(Instant::now() < deadline, "the adapter close never waited");
            std::thread::yield_now();
        }
        close_in(env_id, pd_addr as *mut NDK_PD, 3)
    });
    e.close_adapter();
    assert_eq!(closer.join().unwrap(), STATUS_SUCCESS);
    assert!(e.model.waits() > 0, "waited, not drained before");
    assert_eq!(e.model.count(&Hw::Destroy("pd", e.last("pd"))), 1);
    assert_eq!(events(), vec![]);
}

#[test]
fn create_qp_limits_and_cq_ownership() {
    let mut cfg = pvrdma_sim::DeviceConfig::default();
    cfg.caps.max_qp_wr = 16;
    cfg.caps.max_sge = 4;
    let e = env_with(cfg);
    let pd = e.pd();
    let cq = e.cq(1);
    for (rq, iq, rs, is, inl) in [
        (17, 8, 1, 1, 0),
        (8, 17, 1, 1, 0),
        (8, 8, 5, 1, 0),
        (8, 8, 1, 5, 0),
        (8, 8, 1, 1, 1),
    ] {
        assert_eq!(
            e.qp_status(pd, cq, cq, rq, iq, rs, is, inl).0,
            STATUS_INVALID_PARAMETER,
            "{rq} {iq} {rs} {is} {inl}"
        );
    }
    let (st, qp) = e.qp_status(pd, cq, cq, 16, 5, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let spec = e.model.cmds(code::CREATE_QP);
    assert_eq!(spec.len(), 1, "the refused QPs reached no device");
    // CREATE_QP max_send_wr @40, max_recv_wr @44, max_send_sge @48, max_recv_sge @52,
    // is_srq @76 (§8).
    assert_eq!(
        (
            spec[0].u32(40),
            spec[0].u32(44),
            spec[0].u32(48),
            spec[0].u32(52)
        ),
        (8, 16, 4, 4)
    );
    assert_eq!(spec[0].req[76], 0, "no SRQ");
    // A CQ of another adapter is refused.
    let e2 = e.another_adapter(NDK_VERSION { Major: 2, Minor: 1 });
    let cq2 = e2.cq(2);
    assert_eq!(
        e.qp_status(pd, cq2, cq, 4, 4, 1, 1, 0).0,
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(close(cq2, 1), STATUS_SUCCESS);
    e2.close_adapter();
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn initiator_requests_need_a_connection_receives_do_not() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    let mr = e.mr(pd, true);
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, 0), STATUS_CONNECTION_INVALID);
    assert_eq!(write(qp, 1, &s, 0), STATUS_CONNECTION_INVALID);
    assert_eq!(read(qp, 1, &s, 0), STATUS_CONNECTION_INVALID);
    assert_eq!(
        fast_register(qp, 1, mr, &[0x1000], 0, 8, 0x1000, 0),
        STATUS_CONNECTION_INVALID
    );
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(1), hdr(mr), 0) };
    assert_eq!(st, STATUS_CONNECTION_INVALID);
    // SAFETY: live QP.
    let st = unsafe { (NDK_QP::disp(qp).NdkSendAndInvalidate)(qp, ctx(1), s.as_ptr(), 1, 0, 0x55) };
    assert_eq!(st, STATUS_CONNECTION_INVALID);
    assert_eq!(e.model.wqes(), vec![]);
    assert_eq!(receive(qp, 7, &s), STATUS_SUCCESS);
    let qp_h = e.last("qp");
    assert_eq!(e.model.recvs(), vec![(qp_h, 0, wr_id(tag::RQ, 0), 1)]);
    assert_eq!(e.model.count(&Hw::RingRecv(qp_h)), 1);
    for p in [hdr(mr), hdr(qp)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn deferred_requests_share_one_doorbell_and_an_inline_failure_rings_first() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    e.model.clear_log();
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
    assert_eq!(
        write(qp, 2, &s, NDK_OP_FLAG_DEFER | NDK_OP_FLAG_SILENT_SUCCESS),
        STATUS_SUCCESS
    );
    assert_eq!(
        e.model.count(&Hw::RingSend(qp_h)),
        0,
        "deferred: no doorbell yet"
    );
    assert_eq!(read(qp, 3, &s, 0), STATUS_SUCCESS);
    assert_eq!(
        e.model.log(),
        vec![Hw::RingSend(qp_h)],
        "one doorbell for three WQEs"
    );
    let w = e.model.wqes();
    assert_eq!(w.len(), 3);
    assert_eq!(
        w.iter()
            .map(|w| (w.index, w.opcode, w.send_flags, w.wr_id))
            .collect::<Vec<_>>(),
        vec![
            (0, WrOpcode::Send, 2, wr_id(tag::SQ, 0)),
            (1, WrOpcode::RdmaWrite, 0, wr_id(tag::SQ, 1)),
            (2, WrOpcode::RdmaRead, 2, wr_id(tag::SQ, 2)),
        ]
    );
    assert_eq!(
        (w[1].remote_addr, w[1].rkey, w[2].remote_addr, w[2].rkey),
        (0x1000, 0xAB00, 0x2000, 0xCD00)
    );
    // FR(defer) → SUCCESS; then a failing request: the deferred WQE is indicated first.
    e.model.clear_log();
    assert_eq!(
        send(qp, 4, &s, NDK_OP_FLAG_DEFER | NDK_OP_FLAG_READ_FENCE),
        STATUS_SUCCESS
    );
    assert_eq!(send(qp, 5, &s, 0x400), STATUS_INVALID_PARAMETER);
    assert_eq!(e.model.log(), vec![Hw::RingSend(qp_h)]);
    assert_eq!(e.model.wqes().len(), 4, "the failed request wrote nothing");
    assert_eq!(e.model.wqes()[3].send_flags, 2 | 1, "SIGNALED | FENCE");
    // A full initiator queue is an inline failure too: deferred WQEs are rung first, and
    // the slot is not consumed. (The device ring itself cannot refuse a WQE: queue space is
    // tracked from completions.) Indexes 4..=7 fill the queue of depth 8.
    e.model.clear_log();
    for c in 70..74 {
        assert_eq!(send(qp, c, &s, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
    }
    assert_eq!(send(qp, 8, &s, 0), STATUS_INSUFFICIENT_RESOURCES);
    assert_eq!(e.model.log(), vec![Hw::RingSend(qp_h)]);
    assert_eq!(e.model.wqes().len(), 8, "the refused request wrote nothing");
    // Completing index 0 frees one slot.
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    let r = results_ex(cq, 8);
    assert_eq!(
        r.iter()
            .map(|r| r.RequestContext as usize)
            .collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(send(qp, 9, &s, 0), STATUS_SUCCESS);
    assert_eq!(
        e.model.wqes().last().map(|w| (w.index, w.wr_id)),
        Some((8, wr_id(tag::SQ, 8))),
        "the refused index 8 is used by the next post"
    );
    // A failure with nothing deferred rings nothing.
    e.model.clear_log();
    assert_eq!(send(qp, 6, &s, NDK_OP_FLAG_INLINE), STATUS_NOT_SUPPORTED);
    assert_eq!(e.model.log(), vec![]);
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

/// The per-QP admission words (connected, and the SGE limit, in one compare) follow every
/// connect and disconnect, and each refused condition keeps its own status, in the order
/// connection, flags, SGE count; a refusal rings for the deferred requests before it.
#[test]
fn admission_follows_the_connection_and_refusals_keep_their_status() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq); // MaxInitiatorRequestSge 4
    let qp_h = e.last("qp");
    let s1 = [sge(0x1000, 8, 0x100)];
    let s4 = [sge(0x1000, 1, 1); 4];
    let s5 = [sge(0x1000, 1, 1); 5];
    let mut posted = 0;
    for round in 0..3 {
        // SAFETY: live QP.
        unsafe { set_qp_connected(qp, false) };
        assert_eq!(read(qp, 1, &s1, 0), STATUS_CONNECTION_INVALID, "{round}");
        assert_eq!(write(qp, 1, &s1, 0), STATUS_CONNECTION_INVALID);
        assert_eq!(send(qp, 1, &[], 0), STATUS_CONNECTION_INVALID, "no SGE");
        // The connection is reported before bad flags or too many SGEs.
        assert_eq!(
            write(qp, 1, &s5, NDK_OP_FLAG_INLINE),
            STATUS_CONNECTION_INVALID
        );
        assert_eq!(read(qp, 1, &s5, 0x1000), STATUS_CONNECTION_INVALID);
        assert_eq!(
            e.model.wqes().len(),
            posted,
            "nothing posted while disconnected"
        );
        connect(qp);
        let rings = e.model.count(&Hw::RingSend(qp_h));
        assert_eq!(read(qp, 1, &s1, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
        assert_eq!(e.model.count(&Hw::RingSend(qp_h)), rings, "deferred");
        // Flags before the SGE count; each refusal rings for the deferred read once.
        assert_eq!(write(qp, 1, &s5, NDK_OP_FLAG_INLINE), STATUS_NOT_SUPPORTED);
        assert_eq!(e.model.count(&Hw::RingSend(qp_h)), rings + 1);
        assert_eq!(send(qp, 1, &s5, 0x1000), STATUS_INVALID_PARAMETER);
        assert_eq!(read(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
        assert_eq!(write(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
        assert_eq!(e.model.count(&Hw::RingSend(qp_h)), rings + 1, "rung once");
        // At the limit, and with none.
        assert_eq!(write(qp, 1, &s4, 0), STATUS_SUCCESS);
        assert_eq!(send(qp, 1, &[], NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
        assert_eq!(e.model.count(&Hw::RingSend(qp_h)), rings + 3);
        posted += 3;
        assert_eq!(e.model.wqes().len(), posted);
        // Retire the round, so the 4-deep queue has room in the next round: the two
        // signalled requests report, the silent one does not.
        let cq_h = e.last("cq");
        for back in (1..=3).rev() {
            e.model.push_cqe(
                cq_h,
                cqe(qp_h, wr_id(tag::SQ, (posted - back) as u32), wc::SUCCESS),
            );
        }
        assert_eq!(
            results_ex(cq, 8).len(),
            2,
            "a silent success reports nothing"
        );
    }
    // Receives never needed the connection.
    assert_eq!(receive(qp, 7, &s1), STATUS_SUCCESS);
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn work_request_flag_and_sge_validation() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq); // MaxInitiatorRequestSge 4, MaxReceiveRequestSge 4
    connect(qp);
    let s5 = [sge(0x1000, 1, 1); 5];
    let s4 = [sge(0x1000, 1, 1); 4];
    assert_eq!(send(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(write(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(read(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(receive(qp, 1, &s5), STATUS_INVALID_PARAMETER);
    assert_eq!(send(qp, 1, &s4, 0), STATUS_SUCCESS);
    // SAFETY: live QP; null SGL with a count.
    let st = unsafe { (NDK_QP::disp(qp).NdkSend)(qp, ctx(1), core::ptr::null(), 2, 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // Zero SGEs is a zero-length send.
    assert_eq!(send(qp, 1, &[], 0), STATUS_SUCCESS);
    // Unknown bits and bits the request does not take.
    assert_eq!(send(qp, 1, &s4, 0x1000), STATUS_INVALID_PARAMETER);
    assert_eq!(
        send(qp, 1, &s4, NDK_OP_FLAG_ALLOW_REMOTE_READ),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        write(qp, 1, &s4, NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        read(qp, 1, &s4, NDK_OP_FLAG_INLINE),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(write(qp, 1, &s4, NDK_OP_FLAG_INLINE), STATUS_NOT_SUPPORTED);
    // READ_LOCAL_INVALIDATE is accepted and ignored (Project decision (b)).
    assert_eq!(
        read(qp, 1, &s4, NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE),
        STATUS_SUCCESS
    );
    // Total length above MaxTransferLength.
    let big = [sge(0, 0x8000_0000, 1), sge(0, 1, 1)];
    assert_eq!(write(qp, 1, &big, 0), STATUS_INVALID_PARAMETER);
    // Bind: memory windows are not supported.
    // SAFETY: live QP; the other pointers are not used.
    let st =
        unsafe { (NDK_QP::disp(qp).NdkBind)(qp, ctx(1), null_mut(), null_mut(), null_mut(), 0, 0) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    assert_eq!(e.model.wqes().len(), 3);
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn fast_register_rules_and_tokens() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let mr = e.mr(pd, true);
    let init = |pages: u32, remote: bool| -> NTSTATUS {
        // SAFETY: live MR.
        unsafe {
            (NDK_MR::disp(mr).NdkInitializeFastRegisterMr)(
                mr,
                pages,
                u8::from(remote),
                request_cb,
                ctx(8),
            )
        }
    };
    assert_eq!(init(0, false), STATUS_INVALID_PARAMETER);
    assert_eq!(init(513, false), STATUS_IMPLEMENTATION_LIMIT);
    assert_eq!(e.finish(8, init(4, false)), STATUS_SUCCESS);
    // SAFETY: live MR.
    let mr_h = mr_handle_of_token(unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) });
    let frmrs = || e.model.mr_cmds().len();
    assert_eq!(frmrs(), 1);
    let pages = [0x10_0000, 0x23_0000, 0x7_7000];
    let rr = NDK_OP_FLAG_ALLOW_REMOTE_READ;
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 100, 0x5000_0010, rr),
        STATUS_ACCESS_VIOLATION
    );
    assert_eq!(
        fast_register(
            qp,
            1,
            mr,
            &pages,
            0x10,
            100,
            0x5000_0010,
            NDK_OP_FLAG_ALLOW_REMOTE_WRITE
        ),
        STATUS_ACCESS_VIOLATION
    );
    assert_eq!(e.finish(8, init(4, true)), STATUS_SUCCESS);
    // SAFETY: live MR.
    let mr_h2 = mr_handle_of_token(unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) });
    assert_eq!(frmrs(), 2, "re-initialization makes a new FRMR");
    assert_eq!(
        e.model.count(&Hw::Destroy("mr", mr_h)),
        1,
        "and destroys the old"
    );
    let five = [0x1000; 5];
    assert_eq!(
        fast_register(qp, 1, mr, &five, 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &[], 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &[0x1008], 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 3 * 4096 - 0xF, 0x5000_0010, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x1000, 1, 0x5000_1000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 100, 0x5000_0020, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0, 100, 0, rr),
        STATUS_INVALID_PARAMETER,
        "zero-based"
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 100, 0x5000_0010, 0x20),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(
            qp,
            1,
            mr,
            &pages,
            0x10,
            100,
            0x5000_0010,
            NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT
        ),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(e.model.wqes(), vec![]);
    // SAFETY: live MR.
    let key0 = unsafe { (NDK_MR::disp(mr).NdkGetRemoteTokenFromMr)(mr) };
    assert_eq!(key0, mr_h2 << 8);
    let flags = NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_RDMA_READ_SINK;
    assert_eq!(
        fast_register(qp, 9, mr, &pages, 0x10, 3 * 4096 - 0x10, 0x5000_0010, flags),
        STATUS_SUCCESS
    );
    // SAFETY: live MR.
    let key1 = unsafe { (NDK_MR::disp(mr).NdkGetRemoteTokenFromMr)(mr) };
    // SAFETY: live MR.
    let lkey1 = unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) };
    assert_eq!((key1, lkey1), (key0 + 1, key0 + 1), "the key byte advances");
    let w = e.model.wqes();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].opcode, WrOpcode::FastRegMr);
    // LOCAL_WRITE | REMOTE_WRITE (IB bits 0 and 1).
    let (iova, n, len, access, key, pl) = w[0].fast_reg.expect("a fast register");
    assert_eq!(
        (iova, n, len, access, key),
        (0x5000_0010, 3, 3 * 4096 - 0x10, 0b011, key1)
    );
    assert_eq!(mr_handle_of_token(key), mr_h2);
    // The page list went to the FRMR's directory, which the WQE names; the refused
    // requests wrote none of it (the five-page one would have filled its fourth entry).
    assert_eq!(
        e.model.dir_pages(pl, 4),
        vec![0x10_0000, 0x23_0000, 0x7_7000, 0]
    );
    // Invalidate names the current key; a registered (non-fast) MR is no target.
    // SAFETY: live objects.
    let st = unsafe {
        (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(10), hdr(mr), NDK_OP_FLAG_SILENT_SUCCESS)
    };
    assert_eq!(st, STATUS_SUCCESS);
    let w = e.model.wqes();
    assert_eq!(
        (w[1].opcode, w[1].invalidate_rkey, w[1].send_flags),
        (WrOpcode::LocalInv, key1, 0)
    );
    let plain = e.mr(pd, false);
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(11), hdr(plain), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: live objects; a PD header is no MR.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(11), hdr(pd), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // Register on a fast MR / initialize a normal one.
    let mdl = MDL {
        Next: null_mut(),
        Size: 0,
        MdlFlags: 0,
        AllocationProcessorNumber: 0,
        Reserved: 0,
        Process: null_mut(),
        MappedSystemVa: null_mut(),
        StartVa: 0x7000_0000 as PVOID,
        ByteCount: 0x2000,
        ByteOffset: 0,
    };
    let mut mdl = mdl;
    // SAFETY: live MR, valid MDL.
    let st =
        unsafe { (NDK_MR::disp(mr).NdkRegisterMr)(mr, &mut mdl, 0x100, 0, request_cb, ctx(1)) };
    assert_eq!(st, STATUS_INVALID_DEVICE_REQUEST);
    // SAFETY: live MR.
    let st = unsafe {
        (NDK_MR::disp(plain).NdkInitializeFastRegisterMr)(plain, 4, 0, request_cb, ctx(1))
    };
    assert_eq!(st, STATUS_INVALID_DEVICE_REQUEST);
    assert_eq!(events(), vec![]);
    for p in [hdr(mr), hdr(plain), hdr(qp)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

/// An MDL followed by its PFN array, as the memory manager lays it out.
#[repr(C)]
struct MdlPfn<const N: usize> {
    mdl: MDL,
    pfn: [usize; N],
}

impl<const N: usize> MdlPfn<N> {
    fn new(start_va: usize, offset: u32, count: u32, pfn: [usize; N]) -> Self {
        MdlPfn {
            mdl: MDL {
                Next: null_mut(),
                Size: core::mem::size_of::<Self>() as i16,
                MdlFlags: MDL_PAGES_LOCKED,
                AllocationProcessorNumber: 0,
                Reserved: 0,
                Process: null_mut(),
                MappedSystemVa: null_mut(),
                StartVa: start_va as PVOID,
                ByteCount: count,
                ByteOffset: offset,
            },
            pfn,
        }
    }
    /// The MDL pointer, with provenance over the PFN array too.
    fn ptr(&mut self) -> *mut MDL {
        (self as *mut Self).cast()
    }
}

#[test]
fn register_mr_checks_the_mdl_chain_and_flags() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let mut second = MdlPfn::new(0x7000_2000, 0, 0x1000, [0x777]);
    let mut first = MdlPfn::new(0x7000_0000, 0x800, 0x1800, [0x100, 0x2A5]);
    first.mdl.Next = second.ptr();
    let reg = |mdl: *mut MDL, len: usize, flags: u32| -> NTSTATUS {
        // SAFETY: live MR, valid MDL chain with PFN arrays.
        unsafe { (NDK_MR::disp(mr).NdkRegisterMr)(mr, mdl, len, flags, request_cb, ctx(1)) }
    };
    let f = first.ptr();
    assert_eq!(
        reg(f, 0x2800, 0x10),
        STATUS_INVALID_PARAMETER,
        "unknown flag"
    );
    assert_eq!(
        reg(f, 0x2800, 0x4),
        STATUS_INVALID_PARAMETER,
        "0x4 without local write"
    );
    assert_eq!(reg(f, 0, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(
        reg(f, 0x2801, 0),
        STATUS_INVALID_PARAMETER,
        "beyond the chain"
    );
    let mut gap = MdlPfn::new(0x7000_3000, 0, 0x1000, [0x778]);
    let mut broken = MdlPfn::new(0x7000_0000, 0x800, 0x1800, [0x100, 0x2A5]);
    broken.mdl.Next = gap.ptr();
    assert_eq!(
        reg(broken.ptr(), 0x1801, 0),
        STATUS_INVALID_PARAMETER,
        "not contiguous"
    );
    let flags = NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ;
    assert_eq!(e.finish(1, reg(f, 0x2800, flags)), STATUS_SUCCESS);
    assert_eq!(
        e.model.last_mr(),
        (
            0x7000_0800,
            0x2800,
            0b111,
            vec![0x10_0000, 0x2A_5000, 0x77_7000]
        )
    );
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) };
    let h = mr_handle_of_token(got);
    assert_eq!(
        reg(f, 0x100, 0),
        STATUS_INVALID_DEVICE_REQUEST,
        "already registered"
    );
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkDeregisterMr)(mr, request_cb, ctx(2)) };
    assert_eq!(e.finish(2, got), STATUS_SUCCESS);
    assert_eq!(e.model.count(&Hw::Destroy("mr", h)), 1);
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkDeregisterMr)(mr, request_cb, ctx(2)) };
    assert_eq!(got, STATUS_INVALID_DEVICE_REQUEST);
    // A shorter registration takes only the pages it spans (local read only: no rkey, and
    // no LOCAL_WRITE either: the device may not write it).
    assert_eq!(e.finish(1, reg(f, 0x800, 0)), STATUS_SUCCESS);
    assert_eq!(
        e.model.last_mr(),
        (0x7000_0800, 0x800, 0b000, vec![0x10_0000])
    );
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkGetRemoteTokenFromMr)(mr) };
    // SAFETY: live MR.
    let local = unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) };
    // The remote token is the device's rkey (the model's equals the lkey); the device lets
    // no peer use it: the registration granted no remote access (access 0 above).
    assert_eq!(got, local);
    // Privileged token: the PD's DMA MR lkey (the MR the PD's close destroys with it).
    let mut tok = 0;
    // SAFETY: live PD.
    unsafe { (NDK_PD::disp(pd).NdkGetPrivilegedMemoryRegionToken)(pd, &mut tok) };
    let dma = mr_handle_of_token(tok);
    assert_eq!(tok, dma << 8);
    assert_eq!(events(), vec![]);
    assert_eq!(close(mr, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    assert_eq!(e.model.count(&Hw::Destroy("mr", dma)), 1);
    e.close_adapter();
}

/// §5.7: whatever is wrong with the MDL chain (os::mdl's checks), NdkRegisterMr and
/// NdkBuildLam fail inline with STATUS_INVALID_PARAMETER and no device MR is made; only the
/// MDLs that hold the `Length` bytes are read, so a chain that breaks after them is fine.
#[test]
fn malformed_mdl_chains_are_invalid_parameter() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let reg = |mdl: *mut MDL, len: usize| -> NTSTATUS {
        // SAFETY: live MR; `mdl` heads a chain of live MDLs with their PFN arrays.
        unsafe { (NDK_MR::disp(mr).NdkRegisterMr)(mr, mdl, len, 0, request_cb, ctx(1)) }
    };
    let lam = |mdl: *mut MDL, len: usize| -> (NTSTATUS, u32, u64) {
        let mut buf = [0u64; 8];
        let (mut size, mut fbo) = (64u32, 0u32);
        let p = buf.as_mut_ptr().cast::<NDK_LOGICAL_ADDRESS_MAPPING>();
        // SAFETY: live adapter, MDLs as above, a 64-byte LAM buffer.
        let st = unsafe {
            (NDK_ADAPTER::disp(e.a).NdkBuildLAM)(
                e.a,
                mdl,
                len,
                Some(request_cb),
                ctx(2),
                p,
                &mut size,
                &mut fbo,
            )
        };
        (st, buf[1] as u32, buf[2])
    };
    let mrs = || e.model.mr_cmds().len();
    let before = mrs();
    let mut misaligned = MdlPfn::new(0x7000_0010, 0, 0x100, [0x1]);
    let mut big_offset = MdlPfn::new(0x7000_0000, 0x1000, 0x100, [0x1]);
    let mut empty = MdlPfn::new(0x7000_0000, 0, 0, [0x1]);
    let mut short_array = MdlPfn::new(0x7000_0000, 0, 0x2000, [0x1, 0x2]);
    short_array.mdl.Size = 0x30 + 8;
    let mut huge_pfn = MdlPfn::new(0x7000_0000, 0, 0x100, [1 << 60]);
    // The page both MDLs share names two different frames.
    let mut shared = MdlPfn::new(0x7000_0000, 0, 0x800, [0x5]);
    let mut disagrees = MdlPfn::new(0x7000_0000, 0x800, 0x800, [0x6]);
    shared.mdl.Next = disagrees.ptr();
    // A good first MDL, then one too small for its PFN array.
    let mut good = MdlPfn::new(0x7000_0000, 0, 0x1000, [0x7]);
    let mut bad_second = MdlPfn::new(0x7000_1000, 0, 0x1000, [0x8]);
    bad_second.mdl.Size = 0x30;
    good.mdl.Next = bad_second.ptr();
    for (mdl, len, what) in [
        (misaligned.ptr(), 0x100, "StartVa not page aligned"),
        (big_offset.ptr(), 0x100, "ByteOffset = PAGE_SIZE"),
        (empty.ptr(), 1, "ByteCount 0"),
        (
            short_array.ptr(),
            0x2000,
            "Size without room for the PFN array",
        ),
        (huge_pfn.ptr(), 0x100, "PFN beyond 52 bits"),
        (shared.ptr(), 0x1000, "boundary page with two PFNs"),
        (good.ptr(), 0x1001, "bad second MDL"),
    ] {
        assert_eq!(
            reg(mdl, len),
            STATUS_INVALID_PARAMETER,
            "NdkRegisterMr: {what}"
        );
        assert_eq!(
            lam(mdl, len).0,
            STATUS_INVALID_PARAMETER,
            "NdkBuildLAM: {what}"
        );
    }
    assert_eq!(mrs(), before, "no CREATE_MR for a bad chain");
    // The same chains for fewer bytes stop before the bad part.
    assert_eq!(lam(good.ptr(), 0x1000), (STATUS_SUCCESS, 1, 0x7000));
    assert_eq!(lam(shared.ptr(), 0x800), (STATUS_SUCCESS, 1, 0x5000));
    assert_eq!(e.finish(1, reg(good.ptr(), 0x1000)), STATUS_SUCCESS);
    // Flags 0 (local read only): no LOCAL_WRITE.
    assert_eq!(
        e.model.last_mr(),
        (0x7000_0000, 0x1000, 0b000, vec![0x7000])
    );
    assert_eq!(
        events(),
        vec![],
        "the failures inline: no RequestCompletion"
    );
    assert_eq!(close(mr, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn build_lam_maps_pages_and_reports_the_size_it_needs() {
    let e = env();
    let mut mdl = MdlPfn::new(0x7000_0000, 0x10, 0x3000, [0x11, 0x2F, 0x13, 0x99]);
    let m = mdl.ptr();
    let lam = |buf: *mut NDK_LOGICAL_ADDRESS_MAPPING, len: usize, size: &mut u32, fbo: &mut u32| {
        // SAFETY: live adapter, valid MDL with PFNs, `buf` null or of `*size` bytes.
        unsafe {
            (NDK_ADAPTER::disp(e.a).NdkBuildLAM)(
                e.a,
                m,
                len,
                Some(request_cb),
                ctx(1),
                buf,
                size,
                fbo,
            )
        }
    };
    let (mut size, mut fbo) = (0u32, 0u32);
    assert_eq!(
        lam(null_mut(), 0x3000, &mut size, &mut fbo),
        STATUS_BUFFER_TOO_SMALL
    );
    assert_eq!(size, 0x10 + 8 * 4, "4 pages: 0x10 into the first");
    let mut buf = [0xEEEE_EEEE_EEEE_EEEEu64; 8];
    let p = buf.as_mut_ptr().cast::<NDK_LOGICAL_ADDRESS_MAPPING>();
    let mut size = 40u32;
    assert_eq!(lam(p, 0x3000, &mut size, &mut fbo), STATUS_BUFFER_TOO_SMALL);
    assert_eq!(size, 48);
    let mut size = 64u32;
    assert_eq!(lam(p, 0x3000, &mut size, &mut fbo), STATUS_SUCCESS);
    assert_eq!((size, fbo), (48, 0x10));
    assert_eq!(buf[0], 0, "AdapterContext");
    assert_eq!(buf[1] as u32, 4, "AdapterPageCount");
    assert_eq!(&buf[2..6], &[0x1_1000, 0x2_F000, 0x1_3000, 0x9_9000]);
    assert_eq!(buf[6], 0xEEEE_EEEE_EEEE_EEEE, "nothing past the mapping");
    // SAFETY: live adapter; the LAM built above.
    unsafe { (NDK_ADAPTER::disp(e.a).NdkReleaseLAM)(e.a, p) };
    // A shorter mapping takes fewer pages.
    let mut size = 64u32;
    assert_eq!(lam(p, 0xFF0, &mut size, &mut fbo), STATUS_SUCCESS);
    assert_eq!((size, buf[1] as u32, buf[2]), (0x18, 1, 0x1_1000));
    assert_eq!(
        lam(p, 0x3001, &mut size, &mut fbo),
        STATUS_INVALID_PARAMETER,
        "MDL shorter than Length"
    );
    assert_eq!(lam(p, 0, &mut size, &mut fbo), STATUS_INVALID_PARAMETER);
    assert_eq!(events(), vec![], "completed inline: no RequestCompletion");
    e.close_adapter();
}

#[test]
fn completions_become_results_in_order_with_silent_successes_skipped() {
    let e = env();
    let pd = e.pd();
    let scq = e.cq(1);
    let rcq = e.cq(2);
    let qp = e.qp(pd, rcq, scq);
    connect(qp);
    let (qp_h, scq_h, rcq_h) = (e.last("qp"), e.last("cq") - 1, e.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(write(qp, 2, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(read(qp, 3, &s, 0), STATUS_SUCCESS);
    // SAFETY: live QP.
    let got =
        unsafe { (NDK_QP::disp(qp).NdkSendAndInvalidate)(qp, ctx(4), s.as_ptr(), 1, 0, 0x4242) };
    assert_eq!(got, STATUS_SUCCESS);
    assert_eq!(e.model.wqes()[3].opcode, WrOpcode::SendWithInv);
    assert_eq!(e.model.wqes()[3].invalidate_rkey, 0x4242);
    assert_eq!(receive(qp, 10, &[sge(0x1000, 100, 0x100)]), STATUS_SUCCESS);
    assert_eq!(receive(qp, 11, &s), STATUS_SUCCESS);
    e.model
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    e.model
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::SUCCESS));
    e.model
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 7), wc::SUCCESS)); // never posted
    e.model
        .push_cqe(scq_h, cqe(qp_h + 50, wr_id(tag::SQ, 3), wc::SUCCESS)); // no such QP
    e.model
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 3), wc::SUCCESS));
    let r = results_ex(scq, 8);
    assert_eq!(r.len(), 3);
    let view: Vec<_> = r
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.QPContext as usize,
                r.Type,
                r.ProviderErrorCode,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (STATUS_SUCCESS, 1, 0x9C, NdkOperationTypeSend, 0),
            (STATUS_SUCCESS, 3, 0x9C, NdkOperationTypeRead, 0),
            (STATUS_SUCCESS, 4, 0x9C, NdkOperationTypeSend, 0),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 1);
    // A live QP found by its handle, but on a CQ it does not complete on: not trusted.
    let other = e.cq(3);
    let other_h = e.last("cq");
    e.model
        .push_cqe(other_h, cqe(qp_h, wr_id(tag::SQ, 3), wc::SUCCESS));
    assert_eq!(results_ex(other, 8).len(), 0);
    assert_eq!(e.dev.bad_cqes(), 2);
    let mut inv = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    inv.byte_len = 100;
    inv.invalidated_rkey = Some(0x7707);
    e.model.push_cqe(rcq_h, inv);
    let mut plain = cqe(qp_h, wr_id(tag::RQ, 1), wc::LOC_LEN_ERR);
    plain.byte_len = 5;
    e.model.push_cqe(rcq_h, plain);
    // The non-Ex form still retrieves ReceiveAndInvalidate completions.
    // SAFETY: a zeroed result is a valid value.
    let mut out = [unsafe { core::mem::zeroed::<NDK_RESULT>() }; 1];
    // SAFETY: live CQ, one entry.
    let got = unsafe { (NDK_CQ::disp(rcq).NdkGetCqResults)(rcq, out.as_mut_ptr(), 1) };
    assert_eq!(got, 1);
    assert_eq!(
        (
            out[0].Status,
            out[0].BytesTransferred,
            split(out[0].RequestContext).1
        ),
        (STATUS_SUCCESS, 100, 10)
    );
    let r = results_ex(rcq, 4);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].Status,
            r[0].Type,
            r[0].ProviderErrorCode,
            r[0].RequestContext as usize
        ),
        (
            STATUS_BUFFER_OVERFLOW,
            NdkOperationTypeReceive,
            wc::LOC_LEN_ERR,
            11
        )
    );
    assert_eq!(results_ex(rcq, 4).len(), 0);
    for p in [hdr(qp), hdr(scq), hdr(rcq), hdr(other), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn receive_and_invalidate_type_and_token_in_ex_results() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    assert_eq!(receive(qp, 10, &[sge(0x1000, 64, 1)]), STATUS_SUCCESS);
    let mut c = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    c.byte_len = 64;
    c.invalidated_rkey = Some(0x1234_5601);
    e.model.push_cqe(cq_h, c);
    let r = results_ex(cq, 2);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].Type,
            r[0].TypeSpecificCompletionOutput,
            r[0].BytesTransferred
        ),
        (NdkOperationTypeReceiveAndInvalidate, 0x1234_5601, 64)
    );
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn failed_requests_map_wc_status_and_flush_cancels() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(write(qp, 1, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(read(qp, 2, &s, 0), STATUS_SUCCESS);
    assert_eq!(send(qp, 3, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(send(qp, 4, &s, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
    assert_eq!(receive(qp, 5, &s), STATUS_SUCCESS);
    // The first three fail on the wire, each as its CQE says.
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::REM_ACCESS_ERR));
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 1), wc::REM_ACCESS_ERR));
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::RNR_RETRY_EXC_ERR));
    e.model.clear_log();
    // SAFETY: live QP.
    unsafe { (NDK_QP::disp(qp).NdkFlush)(qp) };
    assert_eq!(
        e.model.log(),
        vec![Hw::RingSend(qp_h), Hw::Flush(qp_h)],
        "deferred WQE indicated, then ERR"
    );
    // The model flushes what it never ran: all four sends (the three that already
    // completed name retired slots: dropped and counted) and the receive (M32).
    let r = results_ex(cq, 16);
    let view: Vec<_> = r
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.Type,
                r.ProviderErrorCode,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (
                STATUS_ACCESS_VIOLATION,
                1,
                NdkOperationTypeWrite,
                wc::REM_ACCESS_ERR
            ),
            (
                STATUS_REMOTE_RESOURCES,
                2,
                NdkOperationTypeRead,
                wc::REM_ACCESS_ERR
            ),
            (
                STATUS_IO_TIMEOUT,
                3,
                NdkOperationTypeSend,
                wc::RNR_RETRY_EXC_ERR
            ),
            (STATUS_CANCELLED, 4, NdkOperationTypeSend, wc::WR_FLUSH_ERR),
            (
                STATUS_CANCELLED,
                5,
                NdkOperationTypeReceive,
                wc::WR_FLUSH_ERR
            ),
        ]
    );
    // SAFETY: a live QP of this provider.
    let bad = unsafe { ObjRef::<pvrdma_ndk::ndk::Qp>::peek(qp) }
        .expect("live QP")
        .bad_cqes();
    assert_eq!(bad, 3, "the flushes of the three completed sends");
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn cq_notifications_one_per_arm_and_errors() {
    let e = env();
    let cq = e.cq(7);
    let cq_h = e.last("cq");
    e.model.clear_log();
    e.model.cq_notification(cq_h);
    assert_eq!(events(), vec![], "never without an arm");
    arm(cq, NDK_CQ_NOTIFY_ANY);
    assert_eq!(
        e.model.log(),
        vec![Hw::Arm(cq_h, false), Hw::Poll(cq_h)],
        "the re-check after the arm found the CQ empty: POLL, then a second look"
    );
    assert_eq!(events(), vec![], "empty CQ: waits");
    e.model.cq_notification(cq_h);
    e.model.cq_notification(cq_h);
    assert_eq!(
        events(),
        vec![Ev::Cq(7, STATUS_SUCCESS)],
        "one callback per arm"
    );
    e.model.clear_log();
    arm(cq, NDK_CQ_NOTIFY_SOLICITED);
    arm(cq, NDK_CQ_NOTIFY_ERRORS);
    assert_eq!(
        e.model.log(),
        vec![
            Hw::Arm(cq_h, true),
            Hw::Poll(cq_h),
            Hw::Arm(cq_h, true),
            Hw::Poll(cq_h)
        ],
        "ERRORS after SOLICITED stays SOLICITED"
    );
    e.model.cq_error(cq_h);
    assert_eq!(events(), vec![Ev::Cq(7, STATUS_BUFFER_OVERFLOW)]);
    e.model.cq_error(cq_h);
    arm(cq, NDK_CQ_NOTIFY_ANY);
    assert_eq!(events(), vec![], "the error is reported once");
    // An unknown handle is ignored.
    e.model.cq_notification(cq_h + 100);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    e.model.cq_notification(cq_h);
    assert_eq!(events(), vec![], "no callback after close");
    e.close_adapter();
}

#[test]
fn srq_limits_notifications_and_completions() {
    let e = env();
    let pd = e.pd();
    let create = |depth: u32, sge: u32, thr: u32| -> (NTSTATUS, *mut NDK_SRQ) {
        let notify = ctx(6);
        e.create(|c, out| {
            // SAFETY: live PD, valid out pointer.
            unsafe {
                (NDK_PD::disp(pd).NdkCreateSrq)(
                    pd,
                    depth,
                    sge,
                    thr,
                    Some(srq_cb),
                    notify,
                    null_mut(),
                    create_cb,
                    c,
                    out,
                )
            }
        })
    };
    assert_eq!(create(0, 1, 0).0, STATUS_INVALID_PARAMETER);
    assert_eq!(create(4097, 1, 0).0, STATUS_INVALID_PARAMETER);
    assert_eq!(create(16, 17, 0).0, STATUS_INVALID_PARAMETER);
    let (st, srq) = create(10, 2, 3);
    assert_eq!(st, STATUS_SUCCESS);
    let srq_h = srq_handle(srq);
    e.model.watch_srq(srq_h);
    let pd_h = e.last("pd");
    let spec0 = e.model.cmds(code::CREATE_SRQ);
    // CREATE_SRQ pd @24, attr {max_wr, max_sge, srq_limit} @32 (§8).
    assert_eq!(spec0.len(), 1);
    assert_eq!(
        (
            spec0[0].u32(24),
            spec0[0].u32(32),
            spec0[0].u32(36),
            spec0[0].u32(40)
        ),
        (pd_h, 16, 2, 3)
    );
    e.model.event(EVENT_SRQ_LIMIT_REACHED, srq_h);
    e.model.event(EVENT_SRQ_LIMIT_REACHED, srq_h);
    assert_eq!(events(), vec![Ev::Srq(6, STATUS_SUCCESS)], "once per arm");
    let modify = |depth: u32, thr: u32| -> NTSTATUS {
        // SAFETY: live SRQ.
        unsafe { (NDK_SRQ::disp(srq).NdkModifySrq)(srq, depth, thr, request_cb, ctx(2)) }
    };
    assert_eq!(modify(4097, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(modify(17, 0), STATUS_NOT_SUPPORTED, "the ring cannot grow");
    let srq_recv = |c: usize, s: &[NDK_SGE]| -> NTSTATUS {
        // SAFETY: live SRQ (its close is pending at the end: calls still allowed here).
        unsafe { (NDK_SRQ::disp(srq).NdkSrqReceive)(srq, ctx(c), s.as_ptr(), s.len() as u32) }
    };
    let s = [sge(0x1000, 8, 1)];
    // One receive queued (no QP takes it).
    assert_eq!(srq_recv(30, &s), STATUS_SUCCESS);
    e.model.clear_log();
    assert_eq!(e.finish(2, modify(0, 2)), STATUS_SUCCESS);
    assert_eq!(e.model.log(), vec![Hw::SrqLimit(srq_h, 2)]);
    assert_eq!(
        events(),
        vec![Ev::Srq(6, STATUS_SUCCESS)],
        "already below: notified at once"
    );
    // Five queued.
    for c in 31..35 {
        assert_eq!(srq_recv(c, &s), STATUS_SUCCESS);
    }
    assert_eq!(e.finish(2, modify(0, 2)), STATUS_SUCCESS);
    assert_eq!(events(), vec![]);
    assert_eq!(e.finish(2, modify(0, 0)), STATUS_SUCCESS, "0 keeps the arm");
    e.model.event(EVENT_SRQ_LIMIT_REACHED, srq_h);
    assert_eq!(events(), vec![Ev::Srq(6, STATUS_SUCCESS)]);
    // Posting, the depth cap, and a QP drawing from the SRQ.
    let cq = e.cq(1);
    let qp_context = ctx(0x51);
    let (st, qp) = e.create(|c, out| {
        // SAFETY: live objects, valid out pointer.
        unsafe {
            (NDK_PD::disp(pd).NdkCreateQpWithSrq)(
                pd, cq, cq, srq, qp_context, 4, 1, 0, create_cb, c, out,
            )
        }
    });
    assert_eq!(st, STATUS_SUCCESS);
    e.note("qp", qp_handle(qp));
    let spec = e.model.cmds(code::CREATE_QP).pop().expect("qp");
    // CREATE_QP srq_handle @36, max_recv_wr @44, max_recv_sge @52, is_srq @76 (§8).
    assert_eq!(
        (spec.u32(36), spec.req[76], spec.u32(44), spec.u32(52)),
        (srq_h, 1, 0, 0)
    );
    assert_eq!(
        receive(qp, 1, &[sge(0, 1, 1)]),
        STATUS_INVALID_DEVICE_REQUEST
    );
    e.model.event(EVENT_SRQ_ERR, srq_h);
    e.model.event(EVENT_SRQ_ERR, srq_h);
    assert_eq!(
        events(),
        vec![Ev::Srq(6, STATUS_INTERNAL_ERROR)],
        "reported once"
    );
    assert_eq!(e.finish(2, modify(0, 1)), STATUS_SUCCESS);
    assert_eq!(events(), vec![], "queued 5 is not below 1");
    assert_eq!(close(srq, 9), STATUS_PENDING, "the QP holds the SRQ");
    assert_eq!(srq_recv(20, &[sge(0, 1, 1); 3]), STATUS_INVALID_PARAMETER);
    assert_eq!(srq_recv(20, &s), STATUS_SUCCESS);
    assert_eq!(srq_recv(21, &s), STATUS_SUCCESS);
    let wqes = e.model.srq_wqes();
    assert_eq!(
        wqes[5..],
        [
            (srq_h, 5, wr_id(tag::SRQ, 5)),
            (srq_h, 6, wr_id(tag::SRQ, 6))
        ]
    );
    // Completed out of order on the QP's receive CQ, with the QP's context (M46).
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SRQ, 6), wc::SUCCESS));
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SRQ, 6), wc::SUCCESS)); // duplicate
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SRQ, 5), wc::WR_FLUSH_ERR));
    let r = results_ex(cq, 4);
    let view: Vec<_> = r
        .iter()
        .map(|r| (r.Status, r.RequestContext as usize, r.QPContext as usize))
        .collect();
    assert_eq!(
        view,
        vec![(STATUS_SUCCESS, 21, 0x51), (STATUS_CANCELLED, 20, 0x51)]
    );
    e.model.event(EVENT_SRQ_LIMIT_REACHED, srq_h);
    e.model.event(EVENT_SRQ_ERR, srq_h);
    assert_eq!(
        events(),
        vec![],
        "no event callback once the close has started"
    );
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(
        events(),
        vec![Ev::Close(9)],
        "SRQ close completes when its QP closes"
    );
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn srq_unsupported_without_device_srqs() {
    let mut cfg = pvrdma_sim::DeviceConfig::default();
    cfg.caps.max_srq = 0;
    let e = env_with(cfg);
    let pd = e.pd();
    let cq = e.cq(1);
    let mut srq = null_mut();
    // SAFETY: live PD, valid out pointer.
    let st = unsafe {
        (NDK_PD::disp(pd).NdkCreateSrq)(
            pd,
            16,
            1,
            0,
            None,
            null_mut(),
            null_mut(),
            create_cb,
            ctx(1),
            &mut srq,
        )
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    assert_eq!(e.info().MaxSrqDepth, 0);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn device_fatal_fails_every_cq_and_srq_once() {
    let e = env();
    let pd = e.pd();
    let cq1 = e.cq(1);
    let cq2 = e.cq(2);
    let notify = ctx(3);
    let (st, srq) = e.create(|c, out| {
        // SAFETY: live PD, valid out pointer.
        unsafe {
            (NDK_PD::disp(pd).NdkCreateSrq)(
                pd,
                16,
                1,
                0,
                Some(srq_cb),
                notify,
                null_mut(),
                create_cb,
                c,
                out,
            )
        }
    });
    assert_eq!(st, STATUS_SUCCESS);
    arm(cq1, NDK_CQ_NOTIFY_ERRORS);
    e.dev.device_fatal();
    // The armed CQ and the SRQ at once; the unarmed CQ at its next arm.
    assert_eq!(
        events(),
        vec![
            Ev::Cq(1, STATUS_INTERNAL_ERROR),
            Ev::Srq(3, STATUS_INTERNAL_ERROR)
        ]
    );
    arm(cq2, NDK_CQ_NOTIFY_SOLICITED);
    assert_eq!(events(), vec![Ev::Cq(2, STATUS_INTERNAL_ERROR)]);
    e.dev.device_fatal();
    arm(cq1, NDK_CQ_NOTIFY_ANY);
    assert_eq!(events(), vec![], "reported once");
    for p in [hdr(srq), hdr(cq1), hdr(cq2), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn failed_qp_create_releases_its_antecedents() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    // The next CREATE_QP fails with "no resources" (12).
    e.model
        .sim
        .with_core(|c| c.fail_nth_command(1, 12, 1 << code::CREATE_QP));
    let (st, qp) = e.qp_status(pd, cq, cq, 4, 4, 1, 1, 0);
    assert_eq!(st, STATUS_INSUFFICIENT_RESOURCES);
    assert!(qp.is_null());
    // No successor count is left behind: both close inline.
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 2), STATUS_SUCCESS);
    assert_eq!(events(), vec![], "its CreateCompletion aside, no callback");
    e.close_adapter();
    assert_eq!(e.model.waits(), 0);
}

/// Events of the racing test, in one global order (callbacks run on another thread).
static RACE: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

unsafe extern "system" fn race_cq_cb(_ctx: PVOID, _st: NTSTATUS) {
    RACE.lock().unwrap().push("notify");
    // Long enough for the close to land while the callback runs.
    std::thread::yield_now();
    RACE.lock().unwrap().push("notify-returned");
}

unsafe extern "system" fn race_close_cb(_ctx: PVOID) {
    RACE.lock().unwrap().push("close-completion");
}

#[test]
fn cq_close_racing_device_notifications_ends_with_one_close_completion() {
    let e = env();
    for round in 0..200 {
        RACE.lock().unwrap().clear();
        let (st, cq) = e.create(|c, out| {
            // SAFETY: live adapter, valid pointers.
            unsafe {
                (NDK_ADAPTER::disp(e.a).NdkCreateCq)(
                    e.a,
                    16,
                    race_cq_cb,
                    null_mut(),
                    null_mut(),
                    create_cb,
                    c,
                    out,
                )
            }
        });
        assert_eq!(st, STATUS_SUCCESS);
        let h = cq_handle(cq);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dev = e.model.clone();
        let s2 = stop.clone();
        // The device side: CQNEs keep arriving from a DPC on another processor.
        let notifier = std::thread::spawn(move || {
            while !s2.load(std::sync::atomic::Ordering::SeqCst) {
                dev.cq_notification(h);
            }
        });
        // The consumer: a few arms, then the close (never concurrent with its own calls).
        for _ in 0..(round % 7) {
            arm(cq, NDK_CQ_NOTIFY_ANY);
        }
        // SAFETY: live CQ; slot 0 is the close.
        let st = unsafe { (NDK_CQ::disp(cq).NdkCloseCq)(hdr(cq), race_close_cb, null_mut()) };
        if st == STATUS_SUCCESS {
            RACE.lock().unwrap().push("closed-inline");
        } else {
            assert_eq!(st, STATUS_PENDING);
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        notifier.join().expect("notifier");
        // The close is final on this thread: a pending close has completed by now (the
        // callback in flight has returned), an inline one had nothing in flight.
        let ev = RACE.lock().unwrap().clone();
        let ends = ev
            .iter()
            .filter(|x| **x == "close-completion" || **x == "closed-inline")
            .count();
        assert_eq!(ends, 1, "round {round}: {ev:?}");
        let last = ev.last().copied();
        assert!(
            last == Some("close-completion") || last == Some("closed-inline"),
            "round {round}: the close is the last event: {ev:?}"
        );
        let notifies = ev.iter().filter(|x| **x == "notify").count();
        let arms = round % 7;
        assert!(notifies <= arms, "at most one callback per arm: {ev:?}");
        let returned = ev.iter().filter(|x| **x == "notify-returned").count();
        assert_eq!(
            notifies, returned,
            "every callback returned before the close ended"
        );
    }
    e.close_adapter();
}

static IN_CB: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RELEASE_CB: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static XLOG: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

unsafe extern "system" fn held_cq_cb(_ctx: PVOID, _st: NTSTATUS) {
    XLOG.lock().unwrap().push("notify");
    IN_CB.store(true, std::sync::atomic::Ordering::SeqCst);
    while !RELEASE_CB.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    XLOG.lock().unwrap().push("notify-returned");
}

unsafe extern "system" fn held_close_cb(_ctx: PVOID) {
    XLOG.lock().unwrap().push("close-completion");
}

#[test]
fn cq_close_from_another_thread_waits_for_the_running_callback() {
    let e = env();
    let (st, cq) = e.create(|c, out| {
        // SAFETY: live adapter, valid pointers.
        unsafe {
            (NDK_ADAPTER::disp(e.a).NdkCreateCq)(
                e.a,
                16,
                held_cq_cb,
                null_mut(),
                null_mut(),
                create_cb,
                c,
                out,
            )
        }
    });
    assert_eq!(st, STATUS_SUCCESS);
    let h = cq_handle(cq);
    arm(cq, NDK_CQ_NOTIFY_ANY);
    let dev = e.model.clone();
    // The CQNE DPC runs the callback on another processor and is held inside it.
    let dpc = std::thread::spawn(move || dev.cq_notification(h));
    while !IN_CB.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // SAFETY: live CQ; slot 0 is the close.
    let st = unsafe { (NDK_CQ::disp(cq).NdkCloseCq)(hdr(cq), held_close_cb, null_mut()) };
    assert_eq!(st, STATUS_PENDING, "a callback is in progress");
    assert_eq!(*XLOG.lock().unwrap(), ["notify"]);
    assert_eq!(
        e.model.count_now(&Hw::Destroy("cq", h)),
        0,
        "not torn down under the callback"
    );
    // Later CQNEs deliver nothing: the close has started.
    e.model.cq_notification_nowait(h);
    RELEASE_CB.store(true, std::sync::atomic::Ordering::SeqCst);
    dpc.join().expect("dpc");
    assert_eq!(
        *XLOG.lock().unwrap(),
        ["notify", "notify-returned", "close-completion"]
    );
    assert_eq!(e.model.count(&Hw::Destroy("cq", h)), 1);
    e.close_adapter();
}

#[test]
fn small_result_arrays_lose_no_completion() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    for c in 1..=3 {
        assert_eq!(send(qp, c, &s, 0), STATUS_SUCCESS);
        e.model
            .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, c as u32 - 1), wc::SUCCESS));
    }
    // One result at a time: the poll never takes more CQEs than results wanted.
    for c in 1..=3 {
        let r = results_ex(cq, 1);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].RequestContext as usize, c);
    }
    assert_eq!(results_ex(cq, 1).len(), 0);
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn untrusted_cqes_fail_their_request_and_a_full_queue_is_reported_first() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    // Initiator queue depth 1.
    let (st, qp) = e.qp_status(pd, cq, cq, 8, 1, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    connect(qp);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    let max = e.info().MaxTransferLength;
    let s = [sge(0x1000, 8, 0x100)];
    // A success longer than MaxTransferLength, or claiming both immediate data and an
    // invalidation, fails its request (STATUS_INTERNAL_ERROR, GENERAL_ERR) and is counted.
    for c in 10..12 {
        assert_eq!(receive(qp, c, &s), STATUS_SUCCESS);
    }
    assert_eq!(receive(qp, 12, &[sge(0x1000, max, 0x100)]), STATUS_SUCCESS);
    let mut long = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    long.byte_len = max + 1;
    e.model.push_cqe(cq_h, long);
    let mut both = cqe(qp_h, wr_id(tag::RQ, 1), wc::SUCCESS);
    both.byte_len = 8;
    both.invalidated_rkey = Some(0x4401);
    // WITH_IMM too (wc_flags bit 1).
    both.extra_flags = 1 << 1;
    e.model.push_cqe(cq_h, both);
    let mut full = cqe(qp_h, wr_id(tag::RQ, 2), wc::SUCCESS);
    full.byte_len = max;
    e.model.push_cqe(cq_h, full);
    let r = results_ex(cq, 8);
    let view: Vec<_> = r
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.Type,
                r.ProviderErrorCode,
                r.BytesTransferred,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (
                STATUS_INTERNAL_ERROR,
                10,
                NdkOperationTypeReceive,
                wc::GENERAL_ERR,
                0
            ),
            (
                STATUS_INTERNAL_ERROR,
                11,
                NdkOperationTypeReceive,
                wc::GENERAL_ERR,
                0
            ),
            (STATUS_SUCCESS, 12, NdkOperationTypeReceive, 0, max),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 2);
    // A full initiator queue is reported before the request's own checks.
    let plain = e.mr(pd, false);
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    let rr = NDK_OP_FLAG_ALLOW_REMOTE_READ;
    assert_eq!(
        fast_register(qp, 2, plain, &[0x1000], 0, 100, 0x5000_0000, rr),
        STATUS_INSUFFICIENT_RESOURCES
    );
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(3), hdr(plain), 0) };
    assert_eq!(st, STATUS_INSUFFICIENT_RESOURCES);
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    assert_eq!(results_ex(cq, 8).len(), 1);
    // With room, the same requests fail their own checks.
    assert_eq!(
        fast_register(qp, 2, plain, &[0x1000], 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(3), hdr(plain), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    assert_eq!(
        e.model.wqes().len(),
        1,
        "none of the refused requests wrote a WQE"
    );
    assert_eq!(events(), vec![]);
    for p in [hdr(plain), hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

/// The poll's fast path (successful send-queue completions of the QP of the previous CQE)
/// hands every other CQE to the general path without consuming it: a failure, a receive,
/// a silent success and another QP's completion interleaved with fast ones each yield
/// exactly their result, in CQE order, across polls of one result at a time too.
#[test]
fn fast_and_general_completions_interleave_in_order() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let (st, qp) = e.qp_status(pd, cq, cq, 8, 8, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let qp_h = e.last("qp");
    let (st, qp2) = e.qp_status(pd, cq, cq, 8, 8, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let qp2_h = e.last("qp");
    let cq_h = e.last("cq");
    connect(qp);
    connect(qp2);
    let s = [sge(0x1000, 8, 0x100)];
    for c in 1..=4 {
        let flags = if c == 3 {
            NDK_OP_FLAG_SILENT_SUCCESS
        } else {
            0
        };
        assert_eq!(send(qp, c, &s, flags), STATUS_SUCCESS);
    }
    assert_eq!(send(qp2, 20, &s, 0), STATUS_SUCCESS);
    assert_eq!(receive(qp, 30, &s), STATUS_SUCCESS);
    // Fills the cache with `qp`, then: a failure on `qp`, a receive, `qp2`, a silent
    // success retired by the next CQE, and a success.
    for c in [
        cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        cqe(qp_h, wr_id(tag::SQ, 1), wc::REM_ACCESS_ERR),
        cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS),
        cqe(qp2_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        cqe(qp_h, wr_id(tag::SQ, 3), wc::SUCCESS),
    ] {
        e.model.push_cqe(cq_h, c);
    }
    let mut got = Vec::new();
    for _ in 0..8 {
        got.extend(
            results_ex(cq, 1)
                .iter()
                .map(|r| (r.Status, r.RequestContext as usize, r.Type)),
        );
    }
    let want_types = [
        (STATUS_SUCCESS, 1, NdkOperationTypeSend),
        (STATUS_ACCESS_VIOLATION, 2, NdkOperationTypeSend),
        (STATUS_SUCCESS, 30, NdkOperationTypeReceive),
        (STATUS_SUCCESS, 20, NdkOperationTypeSend),
        (STATUS_SUCCESS, 4, NdkOperationTypeSend),
    ];
    assert_eq!(got, want_types);
    assert_eq!(e.dev.bad_cqes(), 0);
}

/// A CQ finds its QPs by handle residue in a table of its own: two QPs whose handles
/// collide take the two residues, a third goes through the device's table. Every
/// completion still reaches its own QP in CQE order, with one-CQE and many-CQE polls, and
/// after the QP at the first residue closes, the others are still found.
#[test]
fn qps_whose_handles_collide_on_a_cq_each_get_their_completions() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let cq_h = e.last("cq");
    let spacer = e.cq(1);
    // Four QPs on `cq` whose handles are equal modulo 8 (its table has 8 entries with 3 or
    // 4 QPs bound), QPs on `spacer` in between.
    let mut qps = Vec::new();
    while qps.len() < 4 {
        let q = e.qp(pd, spacer, spacer);
        let h = e.last("qp");
        if qps.first().is_none_or(|&(_, h0)| (h + 1) % 8 == h0 % 8) {
            let q = e.qp(pd, cq, cq);
            qps.push((q, e.last("qp")));
        }
        let _ = q;
    }
    let hs: Vec<u32> = qps.iter().map(|&(_, h)| h).collect();
    assert!(
        hs.iter().all(|h| h % 8 == hs[0] % 8),
        "handles {hs:?} collide"
    );
    let s = [sge(0x1000, 8, 0x100)];
    for (i, &(q, _)) in qps.iter().enumerate() {
        connect(q);
        for k in 0..2 {
            assert_eq!(send(q, 10 * i + k, &s, 0), STATUS_SUCCESS);
        }
    }
    let order = [
        (3, 0),
        (0, 0),
        (2, 0),
        (1, 0),
        (1, 1),
        (3, 1),
        (0, 1),
        (2, 1),
    ];
    for &(i, k) in &order {
        e.model
            .push_cqe(cq_h, cqe(hs[i], wr_id(tag::SQ, k as u32), wc::SUCCESS));
    }
    let mut got: Vec<usize> = Vec::new();
    for _ in 0..4 {
        got.extend(results_ex(cq, 1).iter().map(|r| r.RequestContext as usize));
    }
    got.extend(results_ex(cq, 8).iter().map(|r| r.RequestContext as usize));
    let want: Vec<usize> = order.iter().map(|&(i, k)| 10 * i + k).collect();
    assert_eq!(got, want);
    assert_eq!(e.dev.bad_cqes(), 0);

    assert_eq!(close(qps[0].0, 0), STATUS_SUCCESS);
    for (i, &(q, _)) in qps.iter().enumerate().skip(1) {
        assert_eq!(send(q, 100 + i, &s, 0), STATUS_SUCCESS);
    }
    for i in [2, 1, 3] {
        e.model
            .push_cqe(cq_h, cqe(hs[i], wr_id(tag::SQ, 2), wc::SUCCESS));
    }
    // A CQE naming the closed QP is not trusted.
    e.model
        .push_cqe(cq_h, cqe(hs[0], wr_id(tag::SQ, 2), wc::SUCCESS));
    let got: Vec<usize> = results_ex(cq, 8)
        .iter()
        .map(|r| r.RequestContext as usize)
        .collect();
    assert_eq!(got, vec![102, 101, 103]);
    assert_eq!(e.dev.bad_cqes(), 1);
}

/// (Status, RequestContext, Type, ProviderErrorCode, BytesTransferred) of each result.
fn outcome(r: &[NDK_RESULT_EX]) -> Vec<(NTSTATUS, usize, NDK_OPERATION_TYPE, u32, u32)> {
    r.iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.Type,
                r.ProviderErrorCode,
                r.BytesTransferred,
            )
        })
        .collect()
}

#[test]
fn a_cqe_is_accepted_only_on_the_cq_its_queue_completes_to() {
    // Send and receive CQs polled by their own threads must never see one request twice:
    // a CQE naming the QP on its other CQ is device garbage, dropped and counted, and the
    // request it names stays outstanding for its own CQ.
    let e = env();
    let pd = e.pd();
    let scq = e.cq(1);
    let rcq = e.cq(2);
    let qp = e.qp(pd, rcq, scq);
    connect(qp);
    let (qp_h, scq_h, rcq_h) = (e.last("qp"), e.last("cq") - 1, e.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(receive(qp, 10, &s), STATUS_SUCCESS);
    // The send's CQE on the receive CQ (the fast path's shape: a successful SQ CQE).
    e.model
        .push_cqe(rcq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    assert_eq!(outcome(&results_ex(rcq, 4)), vec![]);
    assert_eq!(e.dev.bad_cqes(), 1);
    // The receive's CQE on the send CQ.
    let mut rc = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    rc.byte_len = 8;
    e.model.push_cqe(scq_h, rc);
    assert_eq!(outcome(&results_ex(scq, 4)), vec![]);
    assert_eq!(e.dev.bad_cqes(), 2);
    // Each on its own CQ completes exactly once.
    e.model
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    e.model.push_cqe(rcq_h, rc);
    assert_eq!(
        outcome(&results_ex(scq, 4)),
        vec![(STATUS_SUCCESS, 1, NdkOperationTypeSend, 0, 0)]
    );
    assert_eq!(
        outcome(&results_ex(rcq, 4)),
        vec![(STATUS_SUCCESS, 10, NdkOperationTypeReceive, 0, 8)]
    );
    assert_eq!(e.dev.bad_cqes(), 2);
    for p in [hdr(qp), hdr(rcq), hdr(scq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn a_receive_reports_no_more_bytes_than_it_posted() {
    // 64 bytes posted, 4096 claimed (well within MaxTransferLength): the device wrote
    // past the consumer's buffers, so the request fails (STATUS_INTERNAL_ERROR,
    // GENERAL_ERR) instead of reporting bytes it cannot have placed.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    assert!(e.info().MaxTransferLength >= 4096);
    let one = [sge(0x1000, 64, 0x100)];
    let two = [sge(0x1000, 40, 0x100), sge(0x2000, 24, 0x100)];
    for (c, s) in [
        (10, &one[..]),
        (11, &two[..]),
        (12, &one[..]),
        (13, &two[..]),
    ] {
        assert_eq!(receive(qp, c, s), STATUS_SUCCESS);
    }
    for (index, len) in [(0, 4096), (1, 65), (2, 64), (3, 64)] {
        let mut c = cqe(qp_h, wr_id(tag::RQ, index), wc::SUCCESS);
        c.byte_len = len;
        e.model.push_cqe(cq_h, c);
    }
    let bad = (
        STATUS_INTERNAL_ERROR,
        0,
        NdkOperationTypeReceive,
        wc::GENERAL_ERR,
        0,
    );
    assert_eq!(
        outcome(&results_ex(cq, 8)),
        vec![
            (bad.0, 10, bad.2, bad.3, bad.4),
            (bad.0, 11, bad.2, bad.3, bad.4),
            (STATUS_SUCCESS, 12, NdkOperationTypeReceive, 0, 64),
            (STATUS_SUCCESS, 13, NdkOperationTypeReceive, 0, 64),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 2);
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn a_cqe_past_an_outstanding_signalled_slot_retires_nothing() {
    // CQEs of a queue appear in posting order (pvrdma.md §14 "Ordering"): one for slot k
    // while an earlier signalled slot is outstanding breaks that rule, so it is a corrupt
    // CQE, counted and dropped, and the earlier request still completes. Only unsignalled
    // successes retire silently ahead of a CQE.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.last("qp"), e.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(receive(qp, 10, &s), STATUS_SUCCESS);
    assert_eq!(receive(qp, 11, &s), STATUS_SUCCESS);
    let rc = |index| {
        let mut c = cqe(qp_h, wr_id(tag::RQ, index), wc::SUCCESS);
        c.byte_len = 8;
        c
    };
    let bad_cqes = || {
        // SAFETY: a live QP of this provider, not closed before the last use below.
        unsafe { ObjRef::<pvrdma_ndk::ndk::Qp>::borrow(qp) }
            .expect("live QP")
            .bad_cqes()
    };
    // Receive #1's CQE before receive #0's.
    e.model.push_cqe(cq_h, rc(1));
    assert_eq!(outcome(&results_ex(cq, 4)), vec![]);
    assert_eq!(bad_cqes(), 1);
    e.model.push_cqe(cq_h, rc(0));
    e.model.push_cqe(cq_h, rc(1));
    assert_eq!(
        outcome(&results_ex(cq, 4)),
        vec![
            (STATUS_SUCCESS, 10, NdkOperationTypeReceive, 0, 8),
            (STATUS_SUCCESS, 11, NdkOperationTypeReceive, 0, 8),
        ]
    );
    // The send queue: signalled #0, silent #1, signalled #2. #2's CQE first is corrupt
    // (#0 is signalled); after #0's, #2's retires the silent #1 with it.
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(write(qp, 2, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(send(qp, 3, &s, 0), STATUS_SUCCESS);
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::SUCCESS));
    assert_eq!(outcome(&results_ex(cq, 4)), vec![]);
    assert_eq!(bad_cqes(), 2);
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    e.model
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::SUCCESS));
    assert_eq!(
        outcome(&results_ex(cq, 4)),
        vec![
            (STATUS_SUCCESS, 1, NdkOperationTypeSend, 0, 0),
            (STATUS_SUCCESS, 3, NdkOperationTypeSend, 0, 0),
        ]
    );
    assert_eq!(bad_cqes(), 2);
    assert_eq!(e.dev.bad_cqes(), 0, "each named its QP");
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn a_declared_count_above_its_limit_fails_before_any_entry_is_read() {
    // A careless consumer declares more entries than it passes: nSge above the QP's or SRQ's
    // SGE limit, AdapterPageCount above the MR's capacity, each over a one-entry array. Each
    // call fails with STATUS_INVALID_PARAMETER and the provider forms no slice of the declared
    // length: before, NdkReceive summed the lengths of all 1000 "SGEs" (reading far past the
    // array) and every post formed a 1000-entry slice over it, which Miri (tests/miri.sh runs
    // this test) reports as undefined behaviour.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let one = [sge(0x1000, 8, 0x100)];
    let declared = 1000;
    // SAFETY: live QP; the declared count is above every limit, so only the count is read.
    let send = unsafe { (NDK_QP::disp(qp).NdkSend)(qp, ctx(1), one.as_ptr(), declared, 0) };
    assert_eq!(send, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let write =
        unsafe { (NDK_QP::disp(qp).NdkWrite)(qp, ctx(2), one.as_ptr(), declared, 0x1000, 0x77, 0) };
    assert_eq!(write, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let read =
        unsafe { (NDK_QP::disp(qp).NdkRead)(qp, ctx(3), one.as_ptr(), declared, 0x1000, 0x77, 0) };
    assert_eq!(read, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let recv = unsafe { (NDK_QP::disp(qp).NdkReceive)(qp, ctx(4), one.as_ptr(), declared) };
    assert_eq!(recv, STATUS_INVALID_PARAMETER);
    let mr = e.mr(pd, true);
    // SAFETY: live MR.
    let init =
        unsafe { (NDK_MR::disp(mr).NdkInitializeFastRegisterMr)(mr, 4, 0, request_cb, ctx(8)) };
    assert_eq!(e.finish(8, init), STATUS_SUCCESS);
    let page = [0x10_0000 as NDK_LOGICAL_ADDRESS];
    // SAFETY: live objects; 1000 is above the MR's capacity of 4, so only the count is read.
    let st = unsafe {
        (NDK_QP::disp(qp).NdkFastRegister)(
            qp,
            ctx(5),
            mr,
            declared,
            page.as_ptr(),
            0,
            100,
            0x5000_0000 as PVOID,
            NDK_OP_FLAG_ALLOW_LOCAL_WRITE,
        )
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // Nothing reached the device and nothing completes.
    assert_eq!(results_ex(cq, 4).len(), 0);
    for p in [hdr(mr), hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn one_poll_takes_runs_of_two_qps_sends_and_receives_and_stops_at_a_bad_length() {
    // The poll's fast loop takes runs of one QP's queue; a run ends at another QP, the other
    // queue, or a CQE it does not take, which the general path then judges. Receive #11
    // claims more bytes than it posted: it fails (GENERAL_ERR) and is counted, and the CQEs
    // after it still complete.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let a = e.qp(pd, cq, cq);
    let a_h = e.last("qp");
    let b = e.qp(pd, cq, cq);
    let b_h = e.last("qp");
    let cq_h = e.last("cq");
    connect(a);
    connect(b);
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(a, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(read(a, 2, &s, 0), STATUS_SUCCESS);
    assert_eq!(send(b, 5, &s, 0), STATUS_SUCCESS);
    for c in [10, 11, 12] {
        assert_eq!(receive(a, c, &s), STATUS_SUCCESS);
    }
    let rc = |index, len| {
        let mut c = cqe(a_h, wr_id(tag::RQ, index), wc::SUCCESS);
        c.byte_len = len;
        c
    };
    for c in [
        cqe(a_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        cqe(a_h, wr_id(tag::SQ, 1), wc::SUCCESS),
        cqe(b_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        rc(0, 8),
        rc(1, 9),
        rc(2, 7),
    ] {
        e.model.push_cqe(cq_h, c);
    }
    assert_eq!(
        outcome(&results_ex(cq, 16)),
        vec![
            (STATUS_SUCCESS, 1, NdkOperationTypeSend, 0, 0),
            (STATUS_SUCCESS, 2, NdkOperationTypeRead, 0, 0),
            (STATUS_SUCCESS, 5, NdkOperationTypeSend, 0, 0),
            (STATUS_SUCCESS, 10, NdkOperationTypeReceive, 0, 8),
            (
                STATUS_INTERNAL_ERROR,
                11,
                NdkOperationTypeReceive,
                wc::GENERAL_ERR,
                0
            ),
            (STATUS_SUCCESS, 12, NdkOperationTypeReceive, 0, 7),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 1);
    // One result at a time (the peel): a receive, then a send of the other QP.
    assert_eq!(receive(a, 13, &s), STATUS_SUCCESS);
    assert_eq!(send(b, 6, &s, 0), STATUS_SUCCESS);
    e.model.push_cqe(cq_h, rc(3, 8));
    e.model
        .push_cqe(cq_h, cqe(b_h, wr_id(tag::SQ, 1), wc::SUCCESS));
    assert_eq!(
        outcome(&results_ex(cq, 1)),
        vec![(STATUS_SUCCESS, 13, NdkOperationTypeReceive, 0, 8)]
    );
    assert_eq!(
        outcome(&results_ex(cq, 1)),
        vec![(STATUS_SUCCESS, 6, NdkOperationTypeSend, 0, 0)]
    );
    assert_eq!(outcome(&results_ex(cq, 1)), vec![]);
    for p in [hdr(a), hdr(b), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

/// A create whose second command fails (the PD's DMA MR, refused "no resources"): the PD the
/// device made is destroyed, and CreateCompletion reports STATUS_INSUFFICIENT_RESOURCES with
/// no object (§5.1).
#[test]
fn a_pd_whose_dma_mr_fails_is_destroyed_and_reported() {
    let e = env();
    e.model
        .sim
        .with_core(|c| c.fail_nth_command(1, 12, 1 << code::CREATE_MR));
    let mut pd = null_mut();
    // SAFETY: live adapter, valid out pointer.
    let st = unsafe { (NDK_ADAPTER::disp(e.a).NdkCreatePd)(e.a, create_cb, ctx(5), &mut pd) };
    assert_eq!(
        st, STATUS_PENDING,
        "the commands complete in the command DPC"
    );
    assert!(
        pd.is_null(),
        "the out pointer is not touched after STATUS_PENDING"
    );
    assert_eq!(events(), vec![Ev::Create(5)]);
    let (st, obj) = with_seen(e.id, |s| s.created[&5]);
    assert_eq!((st, obj), (STATUS_INSUFFICIENT_RESOURCES, 0));
    assert_eq!(e.model.cmds(code::DESTROY_PD).len(), 1, "the PD destroyed");
    assert_eq!(e.model.sim.with_core(|c| c.object_counts().pds), 0);
    e.close_adapter();
}

/// A close while a request is in flight pends: its RequestCompletion comes first, the
/// CloseCompletion last (§5.1, §5.2).
#[test]
fn a_close_while_a_registration_is_in_flight_completes_after_it() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let mut m = MdlPfn::new(0x4000_0000, 0x100, 0x1800, [0x51, 0x73]);
    // SAFETY: live MR; the MDL is followed by its PFN array.
    let st = unsafe {
        (NDK_MR::disp(mr).NdkRegisterMr)(
            mr,
            m.ptr(),
            0x1800,
            NDK_MR_FLAG_ALLOW_REMOTE_READ,
            request_cb,
            ctx(0x51),
        )
    };
    assert_eq!(st, STATUS_PENDING, "CREATE_MR completes in the command DPC");
    // Posted, not answered: the model has not run yet.
    let c = e
        .model
        .record
        .lock()
        .unwrap()
        .cmds
        .last()
        .cloned()
        .expect("CREATE_MR");
    assert_eq!(c.code, code::CREATE_MR);
    assert_eq!((c.u64(16), c.u64(24)), (0x4000_0100, 0x1800));
    assert_eq!(e.model.mr_pages(&c), vec![0x5_1000, 0x7_3000]);
    // The registration is in flight.
    assert_eq!(close(mr, 0x52), STATUS_PENDING);
    assert_eq!(events(), vec![Ev::Request(0x51), Ev::Close(0x52)]);
    // The MR the registration made goes with the close.
    assert_eq!(e.model.cmds(code::DESTROY_MR).len(), 1);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}
