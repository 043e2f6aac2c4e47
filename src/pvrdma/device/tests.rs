// The fake DMA allocator implements an unsafe trait.
#![allow(unsafe_code)]

use super::*;
use crate::os::host::HostPlatform;
use crate::os::{DmaAllocator, DmaRegion};
use crate::pvrdma::testdev::{Access, FakeDevice, Mode};
use std::sync::Mutex;
use std::vec::Vec;

/// DMA allocator over the fake's memory that can fail its n-th allocation (per instance, so
/// parallel tests do not interfere).
struct FailingDma {
    fake: Arc<FakeDevice>,
    fail_at: Mutex<u32>,
    /// Regions freed while the device held a DSR (no objects exist in these tests, so every
    /// such free is memory the device may still DMA to).
    freed_while_live: Mutex<u32>,
}

// SAFETY: forwards to TestDma, which upholds the contract.
unsafe impl DmaAllocator for FailingDma {
    fn alloc(&self, len: usize) -> Option<DmaRegion> {
        let mut f = self.fail_at.lock().unwrap();
        if *f == 1 {
            *f = 0;
            return None;
        }
        *f = f.saturating_sub(1);
        self.fake.dma.alloc(len)
    }
    fn free(&self, region: DmaRegion) {
        if self.fake.st.lock().unwrap().dsr != 0 {
            *self.freed_while_live.lock().unwrap() += 1;
        }
        self.fake.dma.free(region)
    }
}

struct Rig {
    fake: Arc<FakeDevice>,
    platform: Arc<HostPlatform>,
    dma: Arc<FailingDma>,
}

fn rig(version: u32) -> Rig {
    let fake = FakeDevice::new(version);
    let dma = Arc::new(FailingDma {
        fake: fake.clone(),
        fail_at: Mutex::new(0),
        freed_while_live: Mutex::new(0),
    });
    let platform = fake.platform(dma.clone(), 0x1_2345);
    Rig {
        fake,
        platform,
        dma,
    }
}

impl Rig {
    fn probe(&self, gids: &[[u8; 16]]) -> Result<Device, PvrdmaError> {
        let p: Arc<dyn Platform> = self.platform.clone();
        Device::probe(
            p,
            &DeviceConfig {
                gids,
                cmd_timeout_ns: 2_000_000_000,
                gos_info: GosInfo::DRIVER,
            },
        )
    }
    fn finish(self) -> usize {
        self.platform.executor().shutdown();
        assert_eq!(
            *self.dma.freed_while_live.lock().unwrap(),
            0,
            "DMA memory freed before RESET"
        );
        self.fake.dma.live_count()
    }
}

fn wait_for(cond: impl Fn() -> bool) {
    // A deadline, not an iteration count: on a loaded 2-core machine each short sleep can cost
    // a scheduler tick, and DPC threads may not run for a while.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::yield_now();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    panic!("condition not reached within 30 s");
}

const VERSION_R: u32 = 0x00;
const DSRLOW: u32 = 0x04;
const DSRHIGH: u32 = 0x08;
const CTL: u32 = 0x0C;
const REQUEST: u32 = 0x10;
const ERR: u32 = 0x14;
const IMR: u32 = 0x1C;

#[test]
fn bring_up_order_dsr_contents_and_teardown() {
    let r = rig(20);
    let gids = [[0xA0; 16], [0xB0; 16]];
    let dev = r.probe(&gids).unwrap();
    assert_eq!(dev.version(), 20);
    assert_eq!(dev.caps().max_qp, 1024);
    let (log, dsr) = {
        let st = r.fake.st.lock().unwrap();
        (st.log.clone(), st.dsr)
    };
    assert_eq!(log[0], Access::R(VERSION_R, 20));
    let expect = [
        Access::W(DSRLOW, dsr as u32),
        Access::W(DSRHIGH, (dsr >> 32) as u32),
        Access::W(IMR, 0),
        Access::W(CTL, 0),
        Access::R(ERR, 0),
        Access::W(REQUEST, 0),
        Access::R(ERR, 0),
        Access::W(REQUEST, 0),
        Access::R(ERR, 0),
    ];
    assert_eq!(&log[1..], &expect);
    // DSR contents as the device sees them.
    assert_eq!(r.fake.read_u32(dsr), 20);
    assert_eq!(r.fake.read_u32(dsr + 8), 2);
    assert_ne!(r.fake.read_u64(dsr + 16), 0);
    assert_ne!(r.fake.read_u64(dsr + 24), 0);
    assert_eq!(r.fake.read_u32(dsr + 32), 4);
    assert_eq!(r.fake.read_u32(dsr + 48), 4);
    assert_eq!(r.fake.read_u64(dsr + 64), 0x1_2345, "uar_pfn64 for v20");
    // Page 0 of the async ring: the ring state, zero.
    let pdir = r.fake.read_u64(dsr + 40);
    let table = r.fake.read_u64(pdir);
    let page0 = r.fake.read_u64(table);
    assert_eq!(r.fake.read_u64(page0 + 8), 0);
    assert_ne!(r.fake.read_u64(table + 3 * 8), 0);
    assert_eq!(r.fake.read_u64(table + 4 * 8), 0, "exactly 4 pages");
    // CREATE_BIND per GID.
    let reqs = r.fake.st.lock().unwrap().requests.clone();
    assert_eq!(reqs.len(), 2);
    for (i, q) in reqs.iter().enumerate() {
        assert_eq!(&q[8..12], &15u32.to_le_bytes());
        assert_eq!(&q[16..20], &1024u32.to_le_bytes());
        assert_eq!(&q[20..24], &0xFFFu32.to_le_bytes());
        assert_eq!(&q[24..28], &(i as u32).to_le_bytes());
        assert_eq!(&q[28..44], &gids[i]);
        assert_eq!(q[44], 2);
    }
    drop(dev);
    let tail: Vec<(u32, u32)> = r.fake.writes().into_iter().rev().take(2).collect();
    assert_eq!(tail, [(CTL, 2), (IMR, 0xFFFF_FFFF)]);
    assert_eq!(r.finish(), 0, "all DMA memory freed");
}

#[test]
fn v18_writes_32_bit_pfn() {
    let r = rig(18);
    let dev = r.probe(&[]).unwrap();
    let dsr = r.fake.st.lock().unwrap().dsr;
    assert_eq!(r.fake.read_u64(dsr + 64), 0x1_2345);
    assert_eq!(dev.caps().max_fast_reg_pages(18), 512);
    drop(dev);
    assert_eq!(r.finish(), 0);
}

#[test]
fn unsupported_version_touches_nothing() {
    for v in [17, 21, 0] {
        let r = rig(v);
        assert_eq!(r.probe(&[]).err(), Some(PvrdmaError::UnsupportedVersion(v)));
        assert_eq!(r.fake.st.lock().unwrap().log, [Access::R(VERSION_R, v)]);
        assert_eq!(r.finish(), 0);
    }
}

#[test]
fn activate_failure_resets_then_frees() {
    let r = rig(20);
    r.fake.st.lock().unwrap().activate_err = 1;
    assert_eq!(r.probe(&[]).err(), Some(PvrdmaError::ActivateFailed(1)));
    let w = r.fake.writes();
    let n = w.len();
    assert_eq!(
        &w[n - 4..],
        &[(IMR, 0), (CTL, 0), (IMR, 0xFFFF_FFFF), (CTL, 2)]
    );
    assert!(!r.platform.raise_interrupt(0), "interrupt disconnected");
    assert_eq!(r.finish(), 0);
}

#[test]
fn caps_rejection_resets_before_imr() {
    let r = rig(20);
    r.fake.st.lock().unwrap().caps.gid_types = 3;
    assert_eq!(r.probe(&[]).err(), Some(PvrdmaError::UnsupportedDevice));
    let w = r.fake.writes();
    assert_eq!(w.len(), 4);
    assert_eq!((w[0].0, w[1].0), (DSRLOW, DSRHIGH));
    assert_eq!(&w[2..], &[(IMR, 0xFFFF_FFFF), (CTL, 2)]);
    assert_eq!(r.finish(), 0);
}

#[test]
fn bind_failure_fails_probe() {
    let r = rig(20);
    r.fake.st.lock().unwrap().modes.push_back(Mode::HdrErr(22));
    assert_eq!(
        r.probe(&[[1; 16]]).err(),
        Some(PvrdmaError::CommandFailed { code: 15, err: 22 })
    );
    assert_eq!(r.fake.writes().last(), Some(&(CTL, 2)));
    assert_eq!(r.finish(), 0);
}

#[test]
fn dma_failure_at_every_step_unwinds() {
    let mut n = 1;
    loop {
        let r = rig(20);
        *r.dma.fail_at.lock().unwrap() = n;
        match r.probe(&[]) {
            Err(e) => {
                assert_eq!(e, PvrdmaError::NoMemory, "allocation {n}");
                let w = r.fake.writes();
                assert!(
                    w.is_empty(),
                    "DMA is allocated before the device learns any address"
                );
                assert_eq!(r.finish(), 0, "allocation {n} leaked");
            }
            Ok(dev) => {
                drop(dev);
                assert_eq!(r.finish(), 0);
                // DSR + 2 slots + 2 × (dir + table + 4 pages) = 15 allocations.
                assert_eq!(n, 16);
                break;
            }
        }
        n += 1;
    }
}

/// Records each event, and counts the handler calls that found a driver spin lock held
/// (handlers run after the ring's and the table's locks are released).
#[derive(Default)]
struct Rec(Mutex<Vec<std::string::String>>, AtomicU64);

impl Rec {
    fn note(&self, what: std::string::String) {
        if crate::os::sync::held_spin_locks() != 0 {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
        self.0.lock().unwrap().push(what);
    }
    fn locked_calls(&self) -> u64 {
        self.1.load(Ordering::SeqCst)
    }
}

impl CqEvents for Rec {
    fn completion(&self) {
        self.note("cq".into());
    }
    fn error(&self) {
        self.note("cq_err".into());
    }
}
impl QpEvents for Rec {
    fn event(&self, kind: EqeType) {
        self.note(std::format!("qp {kind:?}"));
    }
}
impl SrqEvents for Rec {
    fn event(&self, kind: EqeType) {
        self.note(std::format!("srq {kind:?}"));
    }
}
impl DeviceEvents for Rec {
    fn port_event(&self, kind: EqeType, port: u32) {
        self.note(std::format!("port {kind:?} {port}"));
    }
    fn device_fatal(&self) {
        self.note("fatal".into());
    }
}

/// A CQ handler that logs its handle into a shared record.
struct Tagged(u32, Arc<Rec>);

impl CqEvents for Tagged {
    fn completion(&self) {
        self.1.note(std::format!("cq{}", self.0));
    }
    fn error(&self) {
        self.1.note(std::format!("cq_err{}", self.0));
    }
}

#[test]
fn async_events_and_cq_notifications_dispatch() {
    let r = rig(20);
    let dev = r.probe(&[]).unwrap();
    let rec = Arc::new(Rec::default());
    dev.register_cq(3, rec.clone()).unwrap();
    dev.register_qp(5, rec.clone()).unwrap();
    dev.register_srq(2, rec.clone()).unwrap();
    dev.set_device_events(Some(rec.clone()));
    assert_eq!(
        dev.register_cq(1024, rec.clone()).err(),
        Some(PvrdmaError::InvalidParameter)
    );
    for (kind, info) in [
        (0, 3),       // CQ_ERR
        (1, 5),       // QP_FATAL
        (15, 2),      // SRQ_LIMIT_REACHED
        (9, 1),       // PORT_ACTIVE
        (8, 0),       // DEVICE_FATAL
        (40, 3),      // unknown type
        (1, 6),       // unregistered QP
        (2, 0x10005), // handle out of range
        (14, 2),      // SRQ_ERR
    ] {
        r.fake.post_eqe(kind, info);
    }
    wait_for(|| {
        let s = dev.stats();
        s.events + s.dropped_events == 9
    });
    let s = dev.stats();
    assert_eq!((s.events, s.dropped_events), (6, 3));
    assert_eq!(
        *rec.0.lock().unwrap(),
        [
            "cq_err",
            "qp QpFatal",
            "srq SrqLimitReached",
            "port PortActive 1",
            "fatal",
            "srq SrqErr"
        ]
    );
    rec.0.lock().unwrap().clear();
    r.fake.post_cqne(3);
    r.fake.post_cqne(999_999);
    r.fake.post_cqne(3);
    wait_for(|| {
        let s = dev.stats();
        s.cq_notifications + s.dropped_notifications == 3
    });
    assert_eq!(dev.stats().cq_notifications, 2);
    assert_eq!(*rec.0.lock().unwrap(), ["cq", "cq"]);
    assert!(dev.unregister_cq(3).is_some());
    r.fake.post_cqne(3);
    wait_for(|| dev.stats().dropped_notifications == 2);
    assert!(dev.stats().interrupts[1] >= 1 && dev.stats().interrupts[2] >= 1);
    // A device-written index that fails validation abandons the ring.
    r.fake.corrupt_async_tail(5000);
    wait_for(|| dev.stats().async_ring_broken);
    // Once its interrupt has been taken and the DPC it queued has run, the event is known to
    // have been ignored (the fake raises the vector inline, so the DPC is queued on return).
    let async_irqs = dev.stats().interrupts[1];
    r.fake.post_eqe(1, 5);
    wait_for(|| dev.stats().interrupts[1] > async_irqs && r.platform.executor().is_idle());
    assert_eq!(dev.stats().events, 6);
    assert_eq!(rec.locked_calls(), 0);
    drop(dev);
    assert_eq!(r.finish(), 0);
}

/// More CQNEs than one drain batch takes: every one is delivered, in ring order, to the CQ it
/// names, each after the ring's and the table's locks were released.
#[test]
fn cq_notifications_span_several_batches_in_order() {
    let r = rig(20);
    let dev = r.probe(&[]).unwrap();
    let rec = Arc::new(Rec::default());
    for h in [1, 2] {
        dev.register_cq(h, Arc::new(Tagged(h, rec.clone())))
            .unwrap();
    }
    let n = 3 * DRAIN_BATCH as u64 + 5;
    let mut want = Vec::new();
    for i in 0..n {
        let h = 1 + (i % 3 == 0) as u32;
        r.fake.post_cqne(h);
        want.push(std::format!("cq{h}"));
    }
    r.fake.post_cqne(7);
    wait_for(|| {
        let s = dev.stats();
        s.cq_notifications + s.dropped_notifications == n + 1
    });
    let s = dev.stats();
    assert_eq!((s.cq_notifications, s.dropped_notifications), (n, 1));
    assert_eq!(*rec.0.lock().unwrap(), want);
    assert_eq!(rec.locked_calls(), 0);
    assert!(!s.cq_ring_broken);
    drop(dev);
    assert_eq!(r.finish(), 0);
}

/// The CQ-notification ring is drained with no lock: its DPC is its one drainer, and
/// `Dpc::run` never overlaps two runs of it. Here its interrupt is raised from two
/// processors at once (the test thread's, which queues to processor 0, and a DPC on
/// processor 1 raising it over and over), so the drain DPC is queued to both while it runs:
/// every CQNE is still delivered exactly once, in ring order.
#[test]
fn cq_notifications_queued_from_two_processors_are_each_delivered_once_in_order() {
    struct Raiser {
        platform: Arc<HostPlatform>,
        stop: core::sync::atomic::AtomicBool,
        raised: AtomicU64,
        me: Mutex<Option<Dpc>>,
    }
    impl DpcHandler for Raiser {
        fn run(&self) {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            self.platform.raise_interrupt(VECTOR_CQ);
            self.raised.fetch_add(1, Ordering::SeqCst);
            if let Some(d) = self.me.lock().unwrap().as_ref() {
                d.queue(Processor::Index(1));
            }
        }
    }
    /// A handler that takes a while, so drains are long and raises land inside them.
    struct Slow(Tagged);
    impl CqEvents for Slow {
        fn completion(&self) {
            for _ in 0..200 {
                core::hint::spin_loop();
            }
            self.0.completion();
        }
        fn error(&self) {
            self.0.error();
        }
    }
    let r = rig(20);
    let dev = r.probe(&[]).unwrap();
    let rec = Arc::new(Rec::default());
    for h in 1..=5 {
        dev.register_cq(h, Arc::new(Slow(Tagged(h, rec.clone()))))
            .unwrap();
    }
    let raiser = Arc::new(Raiser {
        platform: r.platform.clone(),
        stop: false.into(),
        raised: AtomicU64::new(0),
        me: Mutex::new(None),
    });
    let sched = r.platform.scheduler().clone();
    let dpc = Dpc::new(&sched, raiser.clone()).unwrap();
    *raiser.me.lock().unwrap() = Some(dpc.clone());
    dpc.queue(Processor::Index(1));
    let n: u64 = if cfg!(miri) { 40 } else { 2000 };
    let mut want = Vec::new();
    for i in 0..n {
        let h = 1 + (i % 5) as u32;
        r.fake.post_cqne(h);
        want.push(std::format!("cq{h}"));
        if i % 64 == 0 {
            // Let the other processor's raises interleave with these.
            std::thread::yield_now();
        }
    }
    wait_for(|| dev.stats().cq_notifications == n);
    raiser.stop.store(true, Ordering::SeqCst);
    wait_for(|| r.platform.executor().is_idle());
    *raiser.me.lock().unwrap() = None;
    assert!(
        raiser.raised.load(Ordering::SeqCst) > 0,
        "processor 1 raised"
    );
    let s = dev.stats();
    assert_eq!((s.cq_notifications, s.dropped_notifications), (n, 0));
    assert_eq!(
        *rec.0.lock().unwrap(),
        want,
        "each CQNE once, in ring order"
    );
    assert!(!s.cq_ring_broken);
    drop(dev);
    assert_eq!(r.finish(), 0);
}

#[test]
fn async_ring_wraps_past_its_512_slots() {
    let r = rig(20);
    let dev = r.probe(&[]).unwrap();
    let rec = Arc::new(Rec::default());
    dev.register_qp(1, rec.clone()).unwrap();
    // 1100 events in batches below the ring's capacity of 512: indices wrap at 1024.
    let mut posted = 0u64;
    while posted < 1100 {
        for _ in 0..100 {
            r.fake.post_eqe(4, 1);
            posted += 1;
        }
        wait_for(|| dev.stats().events == posted);
    }
    assert!(!dev.stats().async_ring_broken);
    assert_eq!(rec.0.lock().unwrap().len(), 1100);
    drop(dev);
    assert_eq!(r.finish(), 0);
}

#[test]
fn doorbell_goes_to_uar_page() {
    let r = rig(20);
    let dev = r.probe(&[]).unwrap();
    dev.bell(crate::pvrdma::uar::CqDoorbell::arm(7)).ring();
    assert_eq!(r.platform.uar_word(4), 0x4000_0007);
    dev.bell(crate::pvrdma::uar::QpDoorbell::send(2)).ring();
    assert_eq!(r.platform.uar_word(0), 0x4000_0002);
    assert_eq!(dev.unquiesce(), Ok(()));
    assert_eq!(r.fake.writes().last(), Some(&(CTL, 1)));
    drop(dev);
    assert_eq!(r.finish(), 0);
}
