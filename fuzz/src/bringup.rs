//! Bring-up and the command channel with device-written memory the fuzzer chooses: the
//! VERSION register, bytes of the DSR caps (written right after the model fills them, at
//! DSRHIGH, M4) and bytes of command responses (written right after the model answers a
//! REQUEST, before the driver's vector-0 DPC reads the response, §8). Then a fixed consumer
//! script (CQ, PD, MR, SRQ, QP, their closes, the adapter's close) runs on whatever came up.
//!
//! Invariants: no panic, no hang (every wait is bounded); a probe or a create either fails
//! cleanly or yields a working object; every pending create or close completes exactly once
//! with a documented status; after the adapter's close and the device's drop (RESET)
//! nothing the driver allocated is left (DMA regions, pool allocations). The model's own
//! object counts are not checked: a corrupted response may hand the driver a handle the
//! model never made, and RESET clears the model anyway.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use pvrdma_host::{HostDevice, HostPlatform, HostTime, ManualClock};
use pvrdma_ndk::ndk::NdkDevice;
use pvrdma_ndk::ndk::dispatch::close_adapter;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_ndk::os::{Platform, RegisterIo};
use pvrdma_ndk::pvrdma::device::{Device as DrvDevice, DeviceConfig as DrvConfig};
use pvrdma_ndk::pvrdma::verbs::Verbs;
use pvrdma_sim::{DeviceConfig, DmaSpace};

use crate::common::memory::ConsumerMem;
use crate::common::{DEFAULT_UAR_PFN, PlatformSink, SimBar1, SimDma};
use crate::status::{self, check};

/// Bound on one wait: a hang, not a timing assertion.
const HANG: Duration = Duration::from_secs(5);

/// Bytes written into the DSR caps (208 bytes from DSR offset 72) once the model filled
/// them; off when `on` is false.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapsWrite {
    pub on: bool,
    pub offset: u8,
    pub value: u32,
}

/// Bytes written into the response slot after the `command`-th REQUEST (counting from the
/// first command of the probe); off when `on` is false.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseWrite {
    pub on: bool,
    pub command: u8,
    pub offset: u8,
    pub bytes: [u8; 4],
}

/// A bring-up input of target `device_memory` ([`crate::consumer::DeviceInput::Bringup`]).
#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The VERSION register (17 to 21), or the model's default (20).
    pub version: Option<u8>,
    pub caps: [CapsWrite; 3],
    pub responses: [ResponseWrite; 3],
}

/// BAR1 over the model that applies the input's writes at DSRHIGH and after REQUEST.
struct Bar1 {
    inner: Arc<SimBar1>,
    space: Arc<DmaSpace>,
    caps: [CapsWrite; 3],
    responses: [ResponseWrite; 3],
    commands: AtomicU32,
    applied: AtomicU64,
    dsr: Mutex<u64>,
}

impl RegisterIo for Bar1 {
    fn read32(&self, off: u32) -> u32 {
        self.inner.read32(off)
    }

    fn write32(&self, off: u32, val: u32) {
        self.inner.write32(off, val);
        match off {
            // DSRHIGH: the model has filled the caps.
            0x08 => {
                let dsr = self.inner.dsr_address();
                *self.dsr.lock().unwrap() = dsr;
                for c in self.caps.iter().filter(|c| c.on) {
                    let at = u64::from(c.offset) % (208 - 3);
                    if self
                        .space
                        .write(dsr + 72 + at, &c.value.to_le_bytes())
                        .is_ok()
                    {
                        self.applied.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            // REQUEST: the model has answered (synchronously, §8) and raised vector 0,
            // which the pump delivers later.
            0x10 => {
                let n = self.commands.fetch_add(1, Ordering::SeqCst);
                let dsr = *self.dsr.lock().unwrap();
                let Ok(resp) = self.space.read_u64(dsr + 24) else {
                    return;
                };
                if std::env::var_os("FUZZ_TRACE").is_some() {
                    let cmd = self
                        .space
                        .read_u64(dsr + 16)
                        .and_then(|slot| self.space.read_u32(slot + 8));
                    let ack = self.space.read_u32(resp + 8);
                    eprintln!("command {n}: {cmd:?}, ack {ack:x?}");
                }
                for r in self
                    .responses
                    .iter()
                    .filter(|r| r.on && u32::from(r.command) == n)
                {
                    let at = u64::from(r.offset) % (176 - 3);
                    if self.space.write(resp + at, &r.bytes).is_ok() {
                        self.applied.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A one-host rig like `tests/common`'s `Rig`, over [`Bar1`], thread-free
/// (`HostPlatform::without_threads`): waits run the model and the DPCs on this thread. In
/// virtual time: when neither the model nor a DPC has anything to do, the clock jumps to the
/// next timer ([`step`]), so a command the corrupted device never answers times out at once
/// instead of after `cmd_timeout_ns` of wall time.
struct Rig {
    model: Arc<pvrdma_sim::Device>,
    clock: Arc<ManualClock>,
    space: Arc<DmaSpace>,
    dma: Arc<SimDma>,
    bar1: Arc<Bar1>,
    platform: Arc<HostPlatform>,
}

impl Rig {
    fn new(input: &Input) -> Rig {
        let space = Arc::new(DmaSpace::new());
        let mut cfg = DeviceConfig::default();
        crate::fuzz_caps(&mut cfg.caps);
        if let Some(v) = input.version {
            cfg.version = 17 + u32::from(v % 5);
        }
        let model = pvrdma_sim::Device::new(space.clone(), cfg);
        let dma = SimDma::new(space.clone());
        let bar1 = Arc::new(Bar1 {
            inner: SimBar1::new(model.clone()),
            space: space.clone(),
            caps: input.caps,
            responses: input.responses,
            commands: AtomicU32::new(0),
            applied: AtomicU64::new(0),
            dsr: Mutex::new(0),
        });
        let clock = Arc::new(ManualClock::default());
        // The provider's own waits pump too (`Platform::wait_until` runs the DPCs first).
        let me: Arc<OnceLock<Weak<HostPlatform>>> = Arc::new(OnceLock::new());
        let (m, m2, c, me2) = (model.clone(), model.clone(), clock.clone(), me.clone());
        let platform = HostPlatform::without_threads(
            HostDevice {
                bar1: bar1.clone(),
                dma: dma.clone(),
                doorbell: Some(Arc::new(move |off, val| m2.uar_write32(off, val))),
                uar_pfn: DEFAULT_UAR_PFN,
                pump: Some(Arc::new(move || {
                    if let Some(p) = me2.get().and_then(Weak::upgrade) {
                        step(&m, &p, &c);
                    }
                })),
            },
            2,
            HostTime::Virtual(clock.clone()),
        );
        let _ = me.set(Arc::downgrade(&platform));
        model.set_interrupt_sink(Arc::new(PlatformSink(Arc::downgrade(&platform))));
        Rig {
            model,
            clock,
            space,
            dma,
            bar1,
            platform,
        }
    }

    fn pump(&self) {
        step(&self.model, &self.platform, &self.clock);
    }

    fn wait_for(&self, what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + HANG;
        while !cond() {
            assert!(Instant::now() < deadline, "hang: waiting for {what}");
            self.pump();
        }
        // Whatever the completion started (DPCs, the next command) settles too.
        let ex = self.platform.executor();
        loop {
            let n = self.model.process();
            let d = self.model.deliver_interrupts();
            let mut waited = false;
            while !ex.is_idle() {
                waited = true;
                assert!(Instant::now() < deadline + HANG, "hang: DPCs after {what}");
                if ex.run_queued() == 0 {
                    std::thread::yield_now();
                }
            }
            if n == 0 && d == 0 && !waited {
                break;
            }
        }
    }
}

/// One step of the rig: the model's work and interrupts, then the DPCs; if none of them had
/// anything to do, virtual time moves to the earliest timer and fires what is due (nothing
/// else can happen first: one thread runs everything). With no timer either, a yield: the
/// caller's wall-clock bound catches a hang.
fn step(model: &pvrdma_sim::Device, platform: &HostPlatform, clock: &ManualClock) {
    let n = model.process();
    let d = model.deliver_interrupts();
    let ex = platform.executor();
    if n != 0 || d != 0 || ex.run_queued() != 0 {
        return;
    }
    match ex.next_timer_ns() {
        Some(t) => {
            clock.set(t);
            ex.fire_due(t);
            ex.run_queued();
        }
        None => std::thread::yield_now(),
    }
}

// ---------------------------------------------------------------------------- callbacks

#[derive(Default)]
struct Done {
    calls: AtomicU32,
    status: AtomicU32,
    object: AtomicUsize,
}

impl Done {
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

unsafe extern "system" fn on_create(ctx: PVOID, st: NTSTATUS, obj: *mut NDK_OBJECT_HEADER) {
    // SAFETY: the context is a `Done` the script keeps alive to the end.
    let d = unsafe { &*(ctx as *const Done) };
    d.status.store(st as u32, Ordering::SeqCst);
    d.object.store(obj as usize, Ordering::SeqCst);
    d.calls.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "system" fn on_request(ctx: PVOID, st: NTSTATUS) {
    // SAFETY: as for `on_create`.
    let d = unsafe { &*(ctx as *const Done) };
    d.status.store(st as u32, Ordering::SeqCst);
    d.calls.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "system" fn on_close(ctx: PVOID) {
    // SAFETY: as for `on_create`.
    let d = unsafe { &*(ctx as *const Done) };
    d.calls.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "system" fn on_notify(_ctx: PVOID, st: NTSTATUS) {
    check("a notification", st, status::CQ_NOTIFICATION, true);
}

fn trace(what: &str, st: NTSTATUS) {
    status::trace(format_args!("{what}: {st:#010x}"));
}

fn table<'a, D>(d: *const D) -> &'a D {
    // SAFETY: the provider's dispatch tables are statics.
    unsafe { &*d }
}

/// The consumer script's state: every context it handed out (kept to the end, so a late
/// callback finds its context alive) and every close it must see complete.
struct Script<'r> {
    rig: &'r Rig,
    contexts: Vec<Arc<Done>>,
    pending: Vec<(Arc<Done>, &'static str)>,
}

impl Script<'_> {
    fn ctx(&mut self) -> (Arc<Done>, PVOID) {
        let d = Arc::new(Done::default());
        self.contexts.push(d.clone());
        let p = Arc::as_ptr(&d) as PVOID;
        (d, p)
    }

    /// The final status and object of a create that returned `st` inline.
    fn created(&self, what: &str, st: NTSTATUS, out: usize, d: &Done) -> Option<usize> {
        check(what, st, status::CREATE, true);
        let (st, obj) = if st == STATUS_PENDING {
            self.rig.wait_for(what, || d.calls() != 0);
            assert_eq!(d.calls(), 1, "{what}: one CreateCompletion");
            (
                d.status.load(Ordering::SeqCst) as NTSTATUS,
                d.object.load(Ordering::SeqCst),
            )
        } else {
            assert_eq!(
                d.calls(),
                0,
                "{what}: CreateCompletion after an inline return"
            );
            (st, out)
        };
        check(what, st, status::CREATE, true);
        trace(what, st);
        (st == STATUS_SUCCESS && obj != 0).then_some(obj)
    }

    /// The final status of a request that returned `st` inline.
    fn requested(&self, what: &str, st: NTSTATUS, d: &Done) -> NTSTATUS {
        check(what, st, status::REQUEST, true);
        if st != STATUS_PENDING {
            assert_eq!(
                d.calls(),
                0,
                "{what}: RequestCompletion after an inline return"
            );
            return st;
        }
        self.rig.wait_for(what, || d.calls() != 0);
        assert_eq!(d.calls(), 1, "{what}: one RequestCompletion");
        let st = d.status.load(Ordering::SeqCst) as NTSTATUS;
        check(what, st, status::REQUEST, true);
        trace(what, st);
        st
    }

    fn close(&mut self, what: &'static str, obj: usize, slot: NDK_FN_CLOSE_OBJECT) {
        let (d, p) = self.ctx();
        // SAFETY: a live object of the provider, closed once.
        let st = unsafe { slot(obj as *mut NDK_OBJECT_HEADER, on_close, p) };
        assert!(
            st == STATUS_SUCCESS || st == STATUS_PENDING,
            "{what}: a close never fails (§5.1), got {st:#010x}"
        );
        if st == STATUS_PENDING {
            self.pending.push((d, what));
        } else {
            self.rig.wait_for(what, || true);
            assert_eq!(d.calls(), 0, "{what}: CloseCompletion after SUCCESS");
        }
    }

    /// CQ, PD, MR (registered over two pages), SRQ and QP, then their closes, children
    /// first.
    fn run(&mut self, adapter: *mut NDK_ADAPTER, mem: &ConsumerMem) {
        // SAFETY: the adapter just opened.
        let ad = table(unsafe { (*adapter).Dispatch });
        let (d, p) = self.ctx();
        let mut out: *mut NDK_CQ = null_mut();
        // SAFETY: a live adapter; the contexts outlive the script.
        let st = unsafe {
            (ad.NdkCreateCq)(
                adapter,
                16,
                on_notify,
                null_mut(),
                null_mut(),
                on_create,
                p,
                &mut out,
            )
        };
        let Some(cq) = self.created("NdkCreateCq", st, out as usize, &d) else {
            return;
        };
        let cq = cq as *mut NDK_CQ;
        // SAFETY: a live CQ.
        let cqd = table(unsafe { (*cq).Dispatch });
        // SAFETY: a live CQ.
        unsafe { (cqd.NdkArmCq)(cq, NDK_CQ_NOTIFY_ANY) };
        let (d, p) = self.ctx();
        let mut out: *mut NDK_PD = null_mut();
        // SAFETY: a live adapter.
        let st = unsafe { (ad.NdkCreatePd)(adapter, on_create, p, &mut out) };
        if let Some(pd) = self.created("NdkCreatePd", st, out as usize, &d) {
            self.children(pd as *mut NDK_PD, cq, mem);
            // SAFETY: a live PD.
            let pdd = table(unsafe { (*(pd as *mut NDK_PD)).Dispatch });
            self.close("NdkClosePd", pd, pdd.NdkClosePd);
        }
        let mut results = [NDK_RESULT {
            Status: 0,
            BytesTransferred: 0,
            QPContext: null_mut(),
            RequestContext: null_mut(),
        }; 4];
        // SAFETY: a live CQ; 4 results.
        let n = unsafe { (cqd.NdkGetCqResults)(cq, results.as_mut_ptr(), 4) };
        assert_eq!(n, 0, "results on a CQ nothing was posted to");
        self.close("NdkCloseCq", cq as usize, cqd.NdkCloseCq);
    }

    fn children(&mut self, pd: *mut NDK_PD, cq: *mut NDK_CQ, mem: &ConsumerMem) {
        // SAFETY: a live PD.
        let pdd = table(unsafe { (*pd).Dispatch });
        let (d, p) = self.ctx();
        let mut out: *mut NDK_MR = null_mut();
        // SAFETY: a live PD.
        let st = unsafe { (pdd.NdkCreateMr)(pd, 0, on_create, p, &mut out) };
        let mr = self.created("NdkCreateMr", st, out as usize, &d);
        let mdl = mem.mdl(0, 8192);
        if let Some(mr) = mr {
            let mr = mr as *mut NDK_MR;
            // SAFETY: a live MR.
            let mrd = table(unsafe { (*mr).Dispatch });
            let (d, p) = self.ctx();
            // SAFETY: a live MR; the MDL outlives the registration (deregistered below).
            let st = unsafe {
                (mrd.NdkRegisterMr)(
                    mr,
                    mdl.as_ptr().cast_mut(),
                    8192,
                    NDK_MR_FLAG_ALLOW_LOCAL_WRITE,
                    on_request,
                    p,
                )
            };
            if self.requested("NdkRegisterMr", st, &d) == STATUS_SUCCESS {
                let (d, p) = self.ctx();
                // SAFETY: a live, registered MR.
                let st = unsafe { (mrd.NdkDeregisterMr)(mr, on_request, p) };
                self.requested("NdkDeregisterMr", st, &d);
            }
            self.close("NdkCloseMr", mr as usize, mrd.NdkCloseMr);
        }
        let (d, p) = self.ctx();
        let mut out: *mut NDK_SRQ = null_mut();
        // SAFETY: a live PD.
        let st = unsafe {
            (pdd.NdkCreateSrq)(
                pd,
                16,
                1,
                0,
                None,
                null_mut(),
                null_mut(),
                on_create,
                p,
                &mut out,
            )
        };
        let srq = self.created("NdkCreateSrq", st, out as usize, &d);
        let (d, p) = self.ctx();
        let mut out: *mut NDK_QP = null_mut();
        // SAFETY: a live PD and CQ.
        let st = unsafe {
            (pdd.NdkCreateQp)(
                pd,
                cq,
                cq,
                0x51 as PVOID,
                16,
                16,
                1,
                1,
                0,
                on_create,
                p,
                &mut out,
            )
        };
        if let Some(qp) = self.created("NdkCreateQp", st, out as usize, &d) {
            // SAFETY: a live QP.
            let qpd = table(unsafe { (*(qp as *mut NDK_QP)).Dispatch });
            self.close("NdkCloseQp", qp, qpd.NdkCloseQp);
        }
        if let Some(srq) = srq {
            // SAFETY: a live SRQ.
            let sd = table(unsafe { (*(srq as *mut NDK_SRQ)).Dispatch });
            self.close("NdkCloseSrq", srq, sd.NdkCloseSrq);
        }
        drop(mdl);
    }
}

/// A bring-up input of target `device_memory`. Returns what the driver kept for good (zero
/// unless it quarantined an object): the pool/DMA allocations still live after the teardown.
pub fn run(input: &Input) -> AllocStats {
    // No harness lock (`common::serial`): the fuzzer runs one input at a time on one thread,
    // and the consumer phase's world (which holds that lock while it lives) is untouched
    // while this runs, so the global counters move with this rig alone.
    let baseline = stats();
    let rig = Rig::new(input);
    let platform: Arc<dyn Platform> = rig.platform.clone();
    // Objects the device answered with a handle that cannot be filed: their memory is kept
    // for good (`Tables::file`, by design: the device may still write it), so the leak
    // checks below do not apply.
    let mut quarantined = 0;
    let probed = DrvDevice::probe(
        platform,
        &DrvConfig {
            cmd_timeout_ns: 100_000_000,
            ..DrvConfig::default()
        },
    );
    if let Ok(dev) = probed {
        let dev = Arc::new(dev);
        let mem = ConsumerMem::new(&rig.space, 2, 0x6000_0000_0000);
        if let Ok(hw) = Verbs::new(dev.clone()) {
            if let Ok(ndk) = NdkDevice::new(hw.clone()) {
                if let Ok(adapter) = ndk.open_adapter(NDK_VERSION { Major: 2, Minor: 1 }) {
                    let mut s = Script {
                        rig: &rig,
                        contexts: Vec::new(),
                        pending: Vec::new(),
                    };
                    s.run(adapter, &mem);
                    for (d, what) in &s.pending {
                        rig.wait_for(what, || d.calls() != 0);
                        assert_eq!(d.calls(), 1, "{what}: one CloseCompletion");
                    }
                    // SAFETY: opened above, closed once, not from a callback.
                    unsafe { close_adapter(adapter) };
                    rig.wait_for("the adapter's close", || true);
                    for (d, what) in &s.pending {
                        assert_eq!(d.calls(), 1, "{what}: one CloseCompletion");
                    }
                }
                drop(ndk);
            }
            quarantined = hw.quarantined();
            drop(hw);
        }
        drop(mem);
        let deadline = Instant::now() + HANG;
        while Arc::strong_count(&dev) > 1 {
            assert!(
                Instant::now() < deadline,
                "the driver device is still referenced"
            );
            rig.pump();
        }
        drop(dev);
    }
    // Teardown as `Rig::finish`: nothing the driver allocated is left.
    let ex = rig.platform.executor().clone();
    let deadline = Instant::now() + HANG;
    while !ex.is_idle() {
        assert!(Instant::now() < deadline, "DPCs did not drain at teardown");
        if ex.run_queued() == 0 {
            std::thread::yield_now();
        }
    }
    ex.shutdown();
    if quarantined != 0 {
        return kept_since(baseline);
    }
    assert_eq!(rig.dma.live(), 0, "DMA regions leaked");
    assert_eq!(rig.dma.allocs(), rig.dma.frees());
    assert_eq!(rig.space.region_count(), 0, "regions left in the DmaSpace");
    assert_eq!(
        stats(),
        baseline,
        "pool/DMA accounting not back at baseline"
    );
    let _ = rig.bar1.applied.load(Ordering::SeqCst);
    kept_since(baseline)
}

/// The pool/DMA allocations live now that were not at `baseline`.
fn kept_since(baseline: AllocStats) -> AllocStats {
    let now = stats();
    AllocStats {
        live_allocs: now.live_allocs - baseline.live_allocs,
        live_bytes: now.live_bytes - baseline.live_bytes,
        dma_buffers: now.dma_buffers - baseline.dma_buffers,
        dma_bytes: now.dma_bytes - baseline.dma_bytes,
    }
}
