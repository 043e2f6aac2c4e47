//! Deferred procedure calls and timers (Windows: `KDPC` with `KeInsertQueueDpc`,
//! `KeSetTargetProcessorDpcEx`, and `KTIMER` + `KeSetTimer` with a DPC).
//!
//! A [`Dpc`] is created once, at object-creation time, with its routine and context (the
//! [`DpcHandler`]). [`Dpc::queue`] coalesces like `KeInsertQueueDpc`: queuing a DPC that is
//! already queued (not yet started) does nothing and returns false. The routine runs at
//! DISPATCH_LEVEL; the queued flag is cleared just before it runs, so the routine may be
//! queued again while running (it then runs once more afterwards). Two runs of the same DPC
//! object never overlap: [`Dpc::run`] serializes them, whatever processor they were queued to,
//! without a lock: a run that finds the routine running elsewhere hands its run to that
//! processor and returns, so the routine (and any consumer callback it makes) never runs
//! under a spin lock, and no processor spins waiting for another's routine.
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::OsError;

/// The routine and context of a DPC: `run` is called at DISPATCH_LEVEL.
pub trait DpcHandler: Send + Sync {
    /// The DPC routine.
    fn run(&self);
}

/// Where a DPC should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Processor {
    /// The processor that queues it (Windows default for a DPC queued from an ISR).
    Current,
    /// A processor by system-wide index (group × 64 + number).
    Index(u32),
}

impl Processor {
    /// The first processor of a `GROUP_AFFINITY`-like (group, mask); an empty mask means the
    /// current processor.
    pub fn from_affinity(group: u16, mask: u64) -> Self {
        if mask == 0 {
            return Processor::Current;
        }
        Processor::Index(u32::from(group) * 64 + mask.trailing_zeros())
    }
}

/// The OS side of DPCs and timers.
pub trait DpcScheduler: Send + Sync {
    /// Makes `dpc` run once on `target` (called only after the queued flag was set).
    /// Windows: `KeSetTargetProcessorDpcEx` + `KeInsertQueueDpc`.
    fn enqueue(&self, dpc: Dpc, target: Processor);
    /// After `delay_ns`, if `timer`'s generation is still `generation`, queue its DPC.
    /// Windows: `KeSetTimer(&timer, due, &dpc)`.
    fn start_timer(&self, timer: Timer, generation: u64, delay_ns: u64);
    /// Number of processors DPCs can target.
    fn processor_count(&self) -> u32;
}

struct DpcInner {
    handler: Arc<dyn DpcHandler>,
    queued: AtomicBool,
    /// Runs started and not yet finished: 0 idle, 1 running, more = runs handed to the
    /// running processor.
    runs: AtomicU32,
    scheduler: Arc<dyn DpcScheduler>,
}

/// A DPC object (cheap to clone: clones share the object).
#[derive(Clone)]
pub struct Dpc {
    inner: Arc<DpcInner>,
}

impl Dpc {
    /// Initializes a DPC with its routine and context. PASSIVE_LEVEL (allocates).
    pub fn new(
        scheduler: &Arc<dyn DpcScheduler>,
        handler: Arc<dyn DpcHandler>,
    ) -> Result<Self, OsError> {
        Ok(Dpc {
            inner: super::alloc::try_arc(DpcInner {
                handler,
                queued: AtomicBool::new(false),
                runs: AtomicU32::new(0),
                scheduler: scheduler.clone(),
            })?,
        })
    }

    /// Queues the DPC to `target`. Returns false (and does nothing) if it is already queued.
    /// Any IRQL (ISRs use it).
    pub fn queue(&self, target: Processor) -> bool {
        if self.inner.queued.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.inner.scheduler.enqueue(self.clone(), target);
        true
    }

    /// Whether the DPC is queued and has not started yet.
    pub fn is_queued(&self) -> bool {
        self.inner.queued.load(Ordering::Acquire)
    }

    /// Runs the routine: called by the scheduler's executor (Windows: the `KDEFERRED_ROUTINE`
    /// thunk), never by driver code.
    pub fn run(&self) {
        // A run is only ever started by a queue (the queued flag is set until one starts), so
        // at most one run per queue can be handed over: the count cannot overflow.
        if self.inner.runs.fetch_add(1, Ordering::AcqRel) != 0 {
            // The routine is running on another processor: it runs once more for this queue.
            return;
        }
        loop {
            self.inner.queued.store(false, Ordering::SeqCst);
            // StoreLoad: the routine's first reads (a ring's producer index) must not be
            // satisfied before the cleared flag is visible. Otherwise an ISR that publishes
            // new work in that window sees `queued` still set, coalesces, and the routine
            // misses the work: a lost interrupt (seen as a hung async-ring test under load
            // before this fence).
            core::sync::atomic::fence(Ordering::SeqCst);
            self.inner.handler.run();
            if self.inner.runs.fetch_sub(1, Ordering::AcqRel) == 1 {
                return;
            }
        }
    }

    /// Whether two handles name the same DPC object.
    pub fn same(&self, other: &Dpc) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

struct TimerInner {
    dpc: Dpc,
    generation: AtomicU64,
}

/// A one-shot timer that queues a DPC when it expires. Setting it again replaces the previous
/// due time; [`Timer::cancel`] stops it (like `KeSetTimer` / `KeCancelTimer`).
#[derive(Clone)]
pub struct Timer {
    inner: Arc<TimerInner>,
}

impl Timer {
    /// A timer whose expiry runs `handler` as a DPC. PASSIVE_LEVEL (allocates).
    pub fn new(
        scheduler: &Arc<dyn DpcScheduler>,
        handler: Arc<dyn DpcHandler>,
    ) -> Result<Self, OsError> {
        let dpc = Dpc::new(scheduler, handler)?;
        Ok(Timer {
            inner: super::alloc::try_arc(TimerInner {
                dpc,
                generation: AtomicU64::new(0),
            })?,
        })
    }

    /// Arms the timer to fire once, `delay_ns` from now, replacing any earlier setting.
    pub fn schedule_in(&self, delay_ns: u64) {
        let generation = self
            .inner
            .generation
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        self.inner
            .dpc
            .inner
            .scheduler
            .start_timer(self.clone(), generation, delay_ns);
    }

    /// Whether two handles name the same timer (a scheduler replaces its pending setting).
    pub fn same(&self, other: &Timer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the setting `generation` is still the current one (not re-armed or
    /// cancelled since): a scheduler that keeps settings in a list drops stale ones.
    pub fn is_current(&self, generation: u64) -> bool {
        self.inner.generation.load(Ordering::Acquire) == generation
    }

    /// Disarms the timer (a DPC already queued by an earlier expiry still runs).
    pub fn cancel(&self) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Called by the scheduler at the due time: queues the DPC if the setting is still current.
    /// Returns whether it fired.
    pub fn expire(&self, generation: u64, target: Processor) -> bool {
        if self.inner.generation.load(Ordering::Acquire) != generation {
            return false;
        }
        self.inner.dpc.queue(target);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::vec::Vec;

    #[derive(Default)]
    struct Recorder {
        queued: Mutex<Vec<(Dpc, Processor)>>,
        timers: Mutex<Vec<(Timer, u64, u64)>>,
    }
    impl DpcScheduler for Recorder {
        fn enqueue(&self, dpc: Dpc, target: Processor) {
            self.queued.lock().unwrap().push((dpc, target));
        }
        fn start_timer(&self, timer: Timer, generation: u64, delay_ns: u64) {
            self.timers
                .lock()
                .unwrap()
                .push((timer, generation, delay_ns));
        }
        fn processor_count(&self) -> u32 {
            2
        }
    }
    struct Count(std::sync::atomic::AtomicU32);
    impl DpcHandler for Count {
        fn run(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn affinity_picks_first_processor() {
        assert_eq!(Processor::from_affinity(0, 0), Processor::Current);
        assert_eq!(Processor::from_affinity(0, 0b1000), Processor::Index(3));
        assert_eq!(Processor::from_affinity(1, 0b110), Processor::Index(65));
    }

    #[test]
    fn queue_coalesces_until_run() {
        let rec = Arc::new(Recorder::default());
        let sched: Arc<dyn DpcScheduler> = rec.clone();
        let count = Arc::new(Count(0.into()));
        let dpc = Dpc::new(&sched, count.clone()).unwrap();
        assert!(dpc.queue(Processor::Index(1)));
        assert!(!dpc.queue(Processor::Current));
        assert_eq!(rec.queued.lock().unwrap().len(), 1);
        let (d, t) = rec.queued.lock().unwrap().pop().unwrap();
        assert_eq!(t, Processor::Index(1));
        d.run();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(!dpc.is_queued());
        assert!(dpc.queue(Processor::Current));
        // The recorder holds what it was given, which holds the recorder: break the cycle,
        // so the test leaks nothing (Miri checks).
        rec.queued.lock().unwrap().clear();
    }

    /// What lets a DPC's routine own its state without a lock (the device's ring drains):
    /// runs of one DPC never overlap, whichever threads start them, and a run started while
    /// the routine runs elsewhere is not lost: the routine runs again after it.
    #[test]
    fn runs_of_one_dpc_never_overlap_and_none_is_lost() {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        #[derive(Default)]
        struct Exclusive {
            inside: AtomicU32,
            overlapped: AtomicBool,
            requested: AtomicU64,
            served: AtomicU64,
            runs: AtomicU64,
        }
        impl DpcHandler for Exclusive {
            fn run(&self) {
                if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    self.overlapped.store(true, Ordering::SeqCst);
                }
                // Every request made before this run started is served by it.
                let r = self.requested.load(Ordering::SeqCst);
                self.served.fetch_max(r, Ordering::SeqCst);
                for _ in 0..50 {
                    core::hint::spin_loop();
                }
                self.runs.fetch_add(1, Ordering::SeqCst);
                self.inside.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let rec = Arc::new(Recorder::default());
        let sched: Arc<dyn DpcScheduler> = rec.clone();
        let ex = Arc::new(Exclusive::default());
        let dpc = Dpc::new(&sched, ex.clone()).unwrap();
        let (threads, per) = if cfg!(miri) { (3, 20) } else { (4, 2000) };
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..per {
                        // As an executor does: a queue, then the run it leads to.
                        ex.requested.fetch_add(1, Ordering::SeqCst);
                        dpc.inner.queued.store(true, Ordering::SeqCst);
                        dpc.run();
                    }
                });
            }
        });
        let total = (threads * per) as u64;
        assert!(!ex.overlapped.load(Ordering::SeqCst), "two runs overlapped");
        assert_eq!(
            ex.served.load(Ordering::SeqCst),
            total,
            "a request was lost"
        );
        let runs = ex.runs.load(Ordering::SeqCst);
        assert!(
            (1..=total).contains(&runs),
            "{runs} runs for {total} requests"
        );
        assert_eq!(dpc.inner.runs.load(Ordering::SeqCst), 0, "idle at the end");
    }

    #[test]
    fn timer_rearm_and_cancel_invalidate_old_settings() {
        let rec = Arc::new(Recorder::default());
        let sched: Arc<dyn DpcScheduler> = rec.clone();
        let count = Arc::new(Count(0.into()));
        let t = Timer::new(&sched, count).unwrap();
        t.schedule_in(100);
        t.schedule_in(200);
        let timers: Vec<_> = rec.timers.lock().unwrap().drain(..).collect();
        assert_eq!(timers.len(), 2);
        assert_eq!(timers[1].2, 200);
        assert!(!timers[0].0.expire(timers[0].1, Processor::Current));
        assert!(timers[1].0.expire(timers[1].1, Processor::Current));
        assert_eq!(rec.queued.lock().unwrap().len(), 1);
        t.schedule_in(5);
        t.cancel();
        let (tm, g, _) = rec.timers.lock().unwrap().pop().unwrap();
        assert!(!tm.expire(g, Processor::Current));
        rec.queued.lock().unwrap().clear();
    }
}
