//! The host test infrastructure itself (`pvrdma-host`): the DPC executor's processors and
//! serialisation, wall-clock and virtual timers, and the platform's UAR page, hook and waits.
// The harness's mutexes: a poisoned one is a test failure.
#![allow(clippy::unwrap_used)]
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvrdma_host::{
    HostDevice, HostExecutor, HostPlatform, HostTime, ManualClock, SPIN_LOCKS_COUNTED,
    current_processor,
};
use pvrdma_ndk::os::clock::Clock;
use pvrdma_ndk::os::dma::{DmaAllocator, DmaRegion};
use pvrdma_ndk::os::{Bell, Dpc, DpcHandler, DpcScheduler, Platform, Processor, RegisterIo, Timer};

/// No DMA memory: the platform tests map the UAR page and wait, nothing else.
struct NoDma;
// SAFETY: hands out no region.
unsafe impl DmaAllocator for NoDma {
    fn alloc(&self, _: usize) -> Option<DmaRegion> {
        None
    }
    fn free(&self, _: DmaRegion) {}
}

struct Rec {
    hits: Mutex<Vec<Option<u32>>>,
    n: AtomicU32,
}
impl DpcHandler for Rec {
    fn run(&self) {
        self.hits.lock().unwrap().push(current_processor());
        self.n.fetch_add(1, Ordering::SeqCst);
    }
}

fn wait(cond: impl Fn() -> bool) -> bool {
    for _ in 0..20_000 {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    false
}

#[test]
fn executor_honours_target_processor_and_timers() {
    let ex = HostExecutor::new(3);
    let sched: Arc<dyn DpcScheduler> = ex.clone();
    let rec = Arc::new(Rec {
        hits: Mutex::new(Vec::new()),
        n: 0.into(),
    });
    let dpc = Dpc::new(&sched, rec.clone()).unwrap();
    assert!(dpc.queue(Processor::Index(2)));
    assert!(wait(|| rec.n.load(Ordering::SeqCst) == 1));
    assert!(dpc.queue(Processor::Current)); // from a non-executor thread: processor 0
    assert!(wait(|| rec.n.load(Ordering::SeqCst) == 2));
    assert_eq!(*rec.hits.lock().unwrap(), [Some(2), Some(0)]);
    let t = Timer::new(&sched, rec.clone()).unwrap();
    t.schedule_in(1_000_000);
    assert!(wait(|| rec.n.load(Ordering::SeqCst) == 3));
    // Idle only once the routine has returned; a pending timer does not count.
    assert!(wait(|| ex.is_idle()));
    t.schedule_in(3_600 * 1_000_000_000);
    assert_eq!(ex.inflight(), 0);
    t.cancel();
    assert_eq!(ex.processor_count(), 3);
    ex.shutdown();
    assert_eq!(rec.n.load(Ordering::SeqCst), 3);
}

struct Overlap {
    in_flight: AtomicU32,
    max_seen: AtomicU32,
    runs: AtomicU32,
}
impl DpcHandler for Overlap {
    fn run(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_seen.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_micros(200));
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
    }
}

/// Queues another DPC from inside its routine (first run only) and records whether a
/// nested `run_queued` ran anything.
struct Requeue {
    ex: Arc<HostExecutor>,
    other: Mutex<Option<Dpc>>,
    nested: AtomicU32,
}
impl DpcHandler for Requeue {
    fn run(&self) {
        if let Some(d) = self.other.lock().unwrap().take() {
            assert!(d.queue(Processor::Current));
            let n = self.ex.run_queued() as u32;
            self.nested.fetch_add(n, Ordering::SeqCst);
        }
    }
}

#[test]
fn thread_free_executor_runs_dpcs_and_due_timers_only_in_run_queued() {
    let ex = HostExecutor::without_threads(3, HostTime::Wall);
    assert!(ex.is_thread_free() && !HostExecutor::new(1).is_thread_free());
    let sched: Arc<dyn DpcScheduler> = ex.clone();
    let rec = Arc::new(Rec {
        hits: Mutex::new(Vec::new()),
        n: 0.into(),
    });
    let dpc = Dpc::new(&sched, rec.clone()).unwrap();
    assert!(dpc.queue(Processor::Index(2)));
    std::thread::sleep(Duration::from_millis(2));
    assert_eq!(rec.n.load(Ordering::SeqCst), 0, "no thread ran it");
    assert!(!ex.is_idle());
    assert_eq!(ex.run_queued(), 1);
    assert!(ex.is_idle());
    assert_eq!(ex.runs_on(2), 1);
    // A DPC queued from a routine to `Current` goes to the routine's processor and runs
    // after it, not nested inside it.
    let chained = Arc::new(Requeue {
        ex: ex.clone(),
        other: Mutex::new(Some(dpc.clone())),
        nested: 0.into(),
    });
    let first = Dpc::new(&sched, chained.clone()).unwrap();
    assert!(first.queue(Processor::Index(1)));
    assert_eq!(ex.run_queued(), 2);
    assert_eq!(chained.nested.load(Ordering::SeqCst), 0);
    assert_eq!(ex.runs_on(1), 2);
    // A wall-clock timer fires once due, from the next `run_queued`. Half a second: under
    // Miri a millisecond passed between the arming and the first look.
    let t = Timer::new(&sched, rec.clone()).unwrap();
    t.schedule_in(500_000_000);
    assert_eq!(ex.run_queued(), 0, "not due yet");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(ex.run_queued(), 1);
    assert_eq!(*rec.hits.lock().unwrap(), [Some(2), Some(1), Some(0)]);
    // Spin locks held: the thread is at DISPATCH_LEVEL, nothing preempts it.
    if SPIN_LOCKS_COUNTED {
        assert!(dpc.queue(Processor::Index(0)));
        let lock = pvrdma_ndk::os::sync::SpinLock::new(());
        let g = lock.lock();
        assert_eq!(ex.run_queued(), 0);
        drop(g);
        assert_eq!(ex.run_queued(), 1);
    }
    ex.shutdown();
}

#[test]
fn one_dpc_object_never_runs_twice_at_once() {
    let ex = HostExecutor::new(4);
    let sched: Arc<dyn DpcScheduler> = ex.clone();
    let h = Arc::new(Overlap {
        in_flight: 0.into(),
        max_seen: 0.into(),
        runs: 0.into(),
    });
    let dpc = Dpc::new(&sched, h.clone()).unwrap();
    let mut queued = 0;
    for i in 0..200u32 {
        if dpc.queue(Processor::Index(i % 4)) {
            queued += 1;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    assert!(wait(|| h.runs.load(Ordering::SeqCst) == queued));
    assert_eq!(h.max_seen.load(Ordering::SeqCst), 1);
    assert!(wait(|| ex.is_idle()));
    // A queued, not yet finished DPC keeps the executor busy.
    struct Gate(std::sync::atomic::AtomicBool);
    impl DpcHandler for Gate {
        fn run(&self) {
            while !self.0.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
    }
    let gate = Arc::new(Gate(false.into()));
    let held = Dpc::new(&sched, gate.clone()).unwrap();
    assert!(held.queue(Processor::Index(1)));
    assert_eq!(ex.inflight(), 1);
    assert!(!ex.is_idle());
    gate.0.store(true, Ordering::SeqCst);
    assert!(wait(|| ex.is_idle()));
    ex.shutdown();
}

/// Logs which timer fired and the virtual time its DPC read.
struct Stamp {
    id: u32,
    clock: Arc<ManualClock>,
    log: Arc<Mutex<Vec<(u32, u64)>>>,
}
impl DpcHandler for Stamp {
    fn run(&self) {
        self.log
            .lock()
            .unwrap()
            .push((self.id, self.clock.now_ns()));
    }
}

#[test]
fn virtual_timers_fire_at_their_deadline_in_order_and_honour_generations() {
    const S: u64 = 1_000_000_000;
    let clock = Arc::new(ManualClock::default());
    let ex = HostExecutor::with_time(2, HostTime::Virtual(clock.clone()));
    assert!(ex.is_virtual());
    let sched: Arc<dyn DpcScheduler> = ex.clone();
    let log = Arc::new(Mutex::new(Vec::new()));
    let timer = |id| {
        let h = Arc::new(Stamp {
            id,
            clock: clock.clone(),
            log: log.clone(),
        });
        Timer::new(&sched, h).unwrap()
    };
    let fire_at = |t: u64| {
        clock.set(t);
        let n = ex.fire_due(t);
        assert!(wait(|| ex.is_idle()));
        n
    };
    let (a, b, c) = (timer(1), timer(2), timer(3));
    a.schedule_in(10 * S);
    assert_eq!(ex.next_timer_ns(), Some(10 * S));
    assert_eq!(fire_at(10 * S - 1), 0);
    assert_eq!(fire_at(10 * S), 1);
    assert_eq!(*log.lock().unwrap(), [(1, 10 * S)]);
    assert_eq!(ex.next_timer_ns(), None);
    // Re-arm replaces, cancel disarms: neither old setting moves time or fires.
    a.schedule_in(S);
    a.schedule_in(3 * S);
    b.schedule_in(2 * S);
    b.cancel();
    assert_eq!(ex.next_timer_ns(), Some(13 * S));
    // Due together: deadline order, then arming order.
    c.schedule_in(3 * S);
    b.schedule_in(2 * S + 500);
    assert_eq!(ex.next_timer_ns(), Some(12 * S + 500));
    assert_eq!(fire_at(20 * S), 3);
    assert_eq!(
        log.lock().unwrap()[1..],
        [(2, 20 * S), (1, 20 * S), (3, 20 * S)]
    );
    assert_eq!(ex.next_timer_ns(), None);
    assert_eq!(fire_at(u64::MAX), 0);
    ex.shutdown();
    // The wall clock has no virtual timers.
    let wall = HostExecutor::new(1);
    assert!(!wall.is_virtual());
    assert_eq!(wall.next_timer_ns(), None);
    wall.shutdown();
}

struct NoRegs;
impl RegisterIo for NoRegs {
    fn read32(&self, _: u32) -> u32 {
        0
    }
    fn write32(&self, _: u32, _: u32) {}
}

#[test]
fn platform_uar_store_is_visible_and_hooked() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let p = HostPlatform::new(
        HostDevice {
            bar1: Arc::new(NoRegs),
            dma: Arc::new(NoDma),
            doorbell: Some(Arc::new(move |o, v| s2.lock().unwrap().push((o, v)))),
            uar_pfn: 0x1234,
            pump: None,
        },
        1,
    );
    let uar = Arc::new(p.map_uar().unwrap());
    Bell::new(uar.clone(), 0x4, 0x4000_0007).ring();
    Bell::new(uar, 0x1008, 5).ring(); // masked into the page
    assert_eq!(p.uar_word(4), 0x4000_0007);
    assert_eq!(p.uar_word(8), 5);
    assert_eq!(*seen.lock().unwrap(), [(4, 0x4000_0007), (8, 5)]);
    assert!(p.wait_until(&|| true, 0));
    assert!(!p.wait_until(&|| false, 1_000));
    p.executor().shutdown();
}

#[test]
fn virtual_platform_reads_the_harness_clock_and_bounds_its_waits() {
    let clock = Arc::new(ManualClock::default());
    clock.set(42_000);
    let p = HostPlatform::with_time(
        HostDevice {
            bar1: Arc::new(NoRegs),
            dma: Arc::new(NoDma),
            doorbell: None,
            uar_pfn: 0,
            pump: None,
        },
        1,
        HostTime::Virtual(clock.clone()),
    );
    assert!(p.is_virtual_time());
    assert_eq!(p.now_ns(), 42_000);
    clock.set(7);
    assert_eq!(p.now_ns(), 42_000, "monotonic");
    // Nothing moves the clock: the wait ends at its wall-clock timeout.
    assert!(!p.wait_until(&|| false, 1_000_000));
    assert_eq!(p.now_ns(), 42_000);
    p.executor().shutdown();
}
