//! Host (Linux, std) building blocks that need no device model: a DPC executor with one thread
//! per simulated processor, timers, a clock, an allocation report, and [`HostPlatform`], which
//! joins them to the device-specific parts supplied by a test harness (BAR1 accessor, DMA
//! allocator, doorbell hook, interrupt injection).
//!
//! Time is the wall clock by default ([`HostTime::Wall`]: [`StdClock`] and a timer thread).
//! With [`HostTime::Virtual`] the platform reads a clock the harness drives (the simulated
//! fabric's virtual time) and timers only record virtual deadlines: the harness asks for the
//! earliest ([`HostExecutor::next_timer_ns`]), moves its clock there and fires what is due
//! ([`HostExecutor::fire_due`]), so a 16 s protocol timeout costs no wall time and its
//! outcome does not depend on machine load.

use std::boxed::Box;
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::vec::Vec;

use crate::os::clock::{Clock, Deadline};
use crate::os::dma::DmaAllocator;
use crate::os::dpc::{Dpc, DpcScheduler, Processor, Timer};
use crate::os::mmio::{DoorbellHook, RegisterIo, Uar};
use crate::os::sync::held_spin_locks;
use crate::os::{InterruptHandler, NicPlatform, OsError, Platform};

/// `std::time::Instant`-based monotonic clock.
pub struct StdClock {
    origin: Instant,
}

impl Default for StdClock {
    fn default() -> Self {
        StdClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for StdClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

std::thread_local! {
    static CURRENT_PROCESSOR: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The simulated processor the calling thread is, if it is an executor thread.
pub fn current_processor() -> Option<u32> {
    CURRENT_PROCESSOR.with(|c| c.get())
}

/// Where a [`HostPlatform`] reads the time and how its executor runs timers.
#[derive(Clone)]
pub enum HostTime {
    /// [`StdClock`], and a timer thread that fires timers at their `Instant`.
    Wall,
    /// A clock the harness drives; timers wait for [`HostExecutor::fire_due`].
    Virtual(Arc<dyn Clock>),
}

/// A clock that moves only when told to (unit tests of virtual timers; a harness with no
/// world of its own).
#[derive(Default)]
pub struct ManualClock(std::sync::atomic::AtomicU64);

impl ManualClock {
    /// Moves the clock to `now_ns` (never backwards: a monotonic clock).
    pub fn set(&self, now_ns: u64) {
        self.0
            .fetch_max(now_ns, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A timer setting in virtual time.
struct VirtualTimer {
    deadline_ns: u64,
    /// Arming order: timers due at the same instant fire in the order they were set.
    seq: u64,
    timer: Timer,
    generation: u64,
}

#[derive(Default)]
struct VirtualTimers {
    pending: Vec<VirtualTimer>,
    next_seq: u64,
}

struct Shared {
    queues: Vec<Mutex<VecDeque<Dpc>>>,
    wake: Vec<Condvar>,
    timers: Mutex<Vec<(Instant, Timer, u64)>>,
    /// Virtual time only ([`HostTime::Virtual`]): the clock and the settings not yet fired.
    virtual_clock: Option<Arc<dyn Clock>>,
    virtual_timers: Mutex<VirtualTimers>,
    timer_wake: Condvar,
    stop: std::sync::atomic::AtomicBool,
    runs: Vec<std::sync::atomic::AtomicU64>,
    /// DPCs queued or running (a harness's "everything done" point needs it).
    inflight: std::sync::atomic::AtomicU64,
}

/// DPC executor: `n` processor threads plus a timer thread (wall-clock time) or a list of
/// virtual deadlines (virtual time). DPCs queued with [`Processor::Current`] from a
/// non-executor thread (a simulated ISR) go to processor 0; indices beyond `n` wrap modulo `n`.
pub struct HostExecutor {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// No threads ([`HostExecutor::without_threads`]): DPCs and due timers run only in
    /// [`HostExecutor::run_queued`].
    thread_free: bool,
}

impl HostExecutor {
    /// Starts `processors` (at least 1) DPC threads and a timer thread.
    pub fn new(processors: u32) -> Arc<Self> {
        Self::with_time(processors, HostTime::Wall)
    }

    /// Starts `processors` (at least 1) DPC threads, and the timer thread only for
    /// [`HostTime::Wall`].
    pub fn with_time(processors: u32, time: HostTime) -> Arc<Self> {
        Self::build(processors, time, false)
    }

    /// `processors` (at least 1) simulated processors and no thread at all: a queued DPC (or,
    /// in wall-clock time, a due timer) runs only when the harness calls
    /// [`HostExecutor::run_queued`], on the harness's thread. A harness that drives a
    /// deterministic model from one thread (the fuzz targets) then pays no thread hand-off
    /// per interrupt, and a run does not depend on how the machine schedules threads.
    pub fn without_threads(processors: u32, time: HostTime) -> Arc<Self> {
        Self::build(processors, time, true)
    }

    fn build(processors: u32, time: HostTime, thread_free: bool) -> Arc<Self> {
        let n = processors.max(1) as usize;
        let virtual_clock = match time {
            HostTime::Wall => None,
            HostTime::Virtual(c) => Some(c),
        };
        let shared = Arc::new(Shared {
            queues: (0..n).map(|_| Mutex::new(VecDeque::new())).collect(),
            wake: (0..n).map(|_| Condvar::new()).collect(),
            timers: Mutex::new(Vec::new()),
            virtual_clock,
            virtual_timers: Mutex::new(VirtualTimers::default()),
            timer_wake: Condvar::new(),
            stop: false.into(),
            runs: (0..n).map(|_| 0.into()).collect(),
            inflight: 0.into(),
        });
        let mut threads = Vec::new();
        for p in (0..n).filter(|_| !thread_free) {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(std::format!("dpc-cpu{p}"))
                    .spawn(move || processor_loop(&s, p))
                    .expect("spawn DPC thread"),
            );
        }
        if shared.virtual_clock.is_none() && !thread_free {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("dpc-timer".into())
                    .spawn(move || timer_loop(&s))
                    .expect("spawn timer thread"),
            );
        }
        Arc::new(HostExecutor {
            shared,
            threads: Mutex::new(threads),
            thread_free,
        })
    }

    /// Whether this executor has no threads ([`HostExecutor::without_threads`]).
    pub fn is_thread_free(&self) -> bool {
        self.thread_free
    }

    /// A thread-free executor: runs every queued DPC on the calling thread, each as the
    /// processor it was queued to (so `Processor::Current` inside it means that processor),
    /// until no queue holds one; in wall-clock time, timers due by now are queued first.
    /// Returns how many DPCs ran. Runs nothing (returns 0) on an executor with threads, inside
    /// a DPC (routines do not nest on a processor), or while the calling thread holds a spin
    /// lock (it is at DISPATCH_LEVEL: no DPC preempts it).
    pub fn run_queued(&self) -> usize {
        if !self.thread_free || current_processor().is_some() || held_spin_locks() != 0 {
            return 0;
        }
        let s = &self.shared;
        let mut ran = 0;
        loop {
            if s.virtual_clock.is_none() {
                let mut due = Vec::new();
                {
                    let mut g = s.timers.lock().unwrap();
                    let now = (!g.is_empty()).then(Instant::now);
                    // Settings no longer current (cancelled, re-armed) go too, unfired.
                    g.retain(|(at, t, gen_)| {
                        if !t.is_current(*gen_) {
                            return false;
                        }
                        let fire = now.is_some_and(|now| *at <= now);
                        if fire {
                            due.push((t.clone(), *gen_));
                        }
                        !fire
                    });
                }
                for (t, gen_) in due {
                    t.expire(gen_, Processor::Index(0));
                }
            }
            let mut any = false;
            for (p, q) in s.queues.iter().enumerate() {
                let Some(dpc) = q.lock().unwrap().pop_front() else {
                    continue;
                };
                any = true;
                CURRENT_PROCESSOR.with(|c| c.set(Some(p as u32)));
                dpc.run();
                CURRENT_PROCESSOR.with(|c| c.set(None));
                if let Some(r) = s.runs.get(p) {
                    r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                s.inflight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                ran += 1;
            }
            if !any {
                return ran;
            }
        }
    }

    /// DPC routines run so far on processor `p`.
    pub fn runs_on(&self, p: u32) -> u64 {
        self.shared
            .runs
            .get(p as usize)
            .map_or(0, |r| r.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// DPCs queued or running on any processor right now.
    pub fn inflight(&self) -> u64 {
        self.shared
            .inflight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// True when no DPC is queued or running (timers pending do not count).
    pub fn is_idle(&self) -> bool {
        self.inflight() == 0
    }

    /// Whether timers run in virtual time ([`HostTime::Virtual`]).
    pub fn is_virtual(&self) -> bool {
        self.shared.virtual_clock.is_some()
    }

    /// Virtual time: the earliest deadline of a setting still current (re-armed and
    /// cancelled settings are dropped here), None when no timer is armed. Always None in
    /// wall-clock time.
    pub fn next_timer_ns(&self) -> Option<u64> {
        let mut g = self.shared.virtual_timers.lock().unwrap();
        g.pending.retain(|t| t.timer.is_current(t.generation));
        g.pending.iter().map(|t| t.deadline_ns).min()
    }

    /// Virtual time: fires every current setting due at or before `now_ns`, in deadline
    /// order (ties in arming order), queuing each timer's DPC to processor 0 as the timer
    /// thread does. Returns how many fired. The caller moves the clock to `now_ns` first, so
    /// a timer DPC reads its deadline (or later) from `now_ns()`.
    pub fn fire_due(&self, now_ns: u64) -> usize {
        let mut due: Vec<VirtualTimer> = {
            let mut g = self.shared.virtual_timers.lock().unwrap();
            let (due, left): (Vec<_>, Vec<_>) =
                g.pending.drain(..).partition(|t| t.deadline_ns <= now_ns);
            g.pending = left;
            due
        };
        due.sort_by_key(|t| (t.deadline_ns, t.seq));
        // With no lock held: a DPC queued here may run at once and re-arm its timer.
        due.into_iter()
            .filter(|t| t.timer.expire(t.generation, Processor::Index(0)))
            .count()
    }

    /// Stops and joins the threads (queued DPCs that have not started are dropped).
    pub fn shutdown(&self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Dropping what is still queued also breaks the Timer → Dpc → executor cycles.
        for (q, w) in self.shared.queues.iter().zip(&self.shared.wake) {
            let mut g = q.lock().unwrap();
            self.shared
                .inflight
                .fetch_sub(g.len() as u64, std::sync::atomic::Ordering::SeqCst);
            g.clear();
            w.notify_all();
        }
        {
            self.shared.timers.lock().unwrap().clear();
            self.shared.timer_wake.notify_all();
        }
        self.shared.virtual_timers.lock().unwrap().pending.clear();
        let threads: Vec<_> = self.threads.lock().unwrap().drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for HostExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn processor_loop(s: &Shared, p: usize) {
    CURRENT_PROCESSOR.with(|c| c.set(Some(p as u32)));
    let (Some(q), Some(w)) = (s.queues.get(p), s.wake.get(p)) else {
        return;
    };
    loop {
        let dpc = {
            let mut g = q.lock().unwrap();
            loop {
                if s.stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                if let Some(d) = g.pop_front() {
                    break d;
                }
                g = w.wait(g).unwrap();
            }
        };
        dpc.run();
        if let Some(r) = s.runs.get(p) {
            r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        // After the routine (and anything it queued) so "idle" means really done.
        s.inflight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn timer_loop(s: &Shared) {
    let mut g = s.timers.lock().unwrap();
    loop {
        if s.stop.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        let mut due = Vec::new();
        g.retain(|(at, t, gen_)| {
            if *at <= now {
                due.push((t.clone(), *gen_));
                false
            } else {
                true
            }
        });
        if !due.is_empty() {
            drop(g);
            for (t, gen_) in due {
                t.expire(gen_, Processor::Index(0));
            }
            g = s.timers.lock().unwrap();
            continue;
        }
        let next = g.iter().map(|(at, _, _)| *at).min();
        g = match next {
            Some(at) => {
                s.timer_wake
                    .wait_timeout(g, at.saturating_duration_since(now))
                    .unwrap()
                    .0
            }
            None => s.timer_wake.wait(g).unwrap(),
        };
    }
}

impl DpcScheduler for HostExecutor {
    fn enqueue(&self, dpc: Dpc, target: Processor) {
        let n = self.shared.queues.len();
        let p = match target {
            Processor::Current => current_processor().unwrap_or(0) as usize,
            Processor::Index(i) => i as usize,
        } % n;
        if let (Some(q), Some(w)) = (self.shared.queues.get(p), self.shared.wake.get(p)) {
            self.shared
                .inflight
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            q.lock().unwrap().push_back(dpc);
            w.notify_one();
        }
    }

    fn start_timer(&self, timer: Timer, generation: u64, delay_ns: u64) {
        if let Some(clock) = &self.shared.virtual_clock {
            let deadline_ns = clock.now_ns().saturating_add(delay_ns);
            let mut g = self.shared.virtual_timers.lock().unwrap();
            // A new setting replaces the timer's earlier one (its generation is stale now).
            g.pending.retain(|t| !t.timer.same(&timer));
            let seq = g.next_seq;
            g.next_seq = g.next_seq.wrapping_add(1);
            g.pending.push(VirtualTimer {
                deadline_ns,
                seq,
                timer,
                generation,
            });
            return;
        }
        let at = Instant::now() + Duration::from_nanos(delay_ns);
        {
            let mut g = self.shared.timers.lock().unwrap();
            // As in virtual time: the new setting replaces the timer's earlier one, whose
            // expiry would be a no-op (stale generation). Without this a timer re-armed
            // before it falls due (a command timeout, armed per command) grows the list by
            // one entry per arming until the old deadlines pass.
            g.retain(|(_, t, _)| !t.same(&timer));
            g.push((at, timer, generation));
        }
        self.shared.timer_wake.notify_all();
    }

    fn processor_count(&self) -> u32 {
        self.shared.queues.len() as u32
    }
}

/// Pool and DMA allocations currently live (see [`crate::os::alloc::stats`]).
pub fn allocation_report() -> crate::os::alloc::AllocStats {
    crate::os::alloc::stats()
}

/// The device-specific parts a test harness supplies to [`HostPlatform`].
pub struct HostDevice {
    /// BAR1 accessor (the device model's register file).
    pub bar1: Arc<dyn RegisterIo>,
    /// DMA allocator (memory registered with the model; logical = the model's bus address).
    pub dma: Arc<dyn DmaAllocator>,
    /// Called after each doorbell store with `(offset, value)`; forwards to the model.
    pub doorbell: Option<DoorbellHook>,
    /// The DSR `uar_pfn` value (bus address of BAR2 page 0 >> 12).
    pub uar_pfn: u64,
    /// Optional pump called by `wait_until` between checks (runs the model, if it needs a
    /// thread to make progress).
    pub pump: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// A [`Platform`] for host tests: [`HostExecutor`] DPCs and timers, a clock ([`StdClock`] or
/// the harness's virtual one, see [`HostTime`]), a host memory page standing in for the UAR
/// mapping, and the harness's [`HostDevice`] parts. The harness delivers device interrupts
/// with [`HostPlatform::raise_interrupt`].
pub struct HostPlatform {
    dev: HostDevice,
    executor: Arc<HostExecutor>,
    scheduler: Arc<dyn DpcScheduler>,
    clock: Arc<dyn Clock>,
    virtual_time: bool,
    uar_page: Box<UarPage>,
    irq: Mutex<Option<Arc<dyn InterruptHandler>>>,
}

/// Atomics, because the page is written through a pointer made from `&self`: only interior
/// mutability lets a shared reference's pointer write (Stacked Borrows).
#[repr(C, align(4096))]
struct UarPage([core::sync::atomic::AtomicU32; 1024]);

impl HostPlatform {
    /// A platform with `processors` DPC processors, in wall-clock time.
    pub fn new(dev: HostDevice, processors: u32) -> Arc<Self> {
        Self::with_time(dev, processors, HostTime::Wall)
    }

    /// A platform with `processors` DPC processors whose `now_ns` and timers follow `time`.
    pub fn with_time(dev: HostDevice, processors: u32, time: HostTime) -> Arc<Self> {
        Self::build(dev, processors, time, false)
    }

    /// The same over a thread-free executor ([`HostExecutor::without_threads`]): DPCs run
    /// when the harness calls [`HostExecutor::run_queued`], and in [`Platform::wait_until`].
    pub fn without_threads(dev: HostDevice, processors: u32, time: HostTime) -> Arc<Self> {
        Self::build(dev, processors, time, true)
    }

    fn build(dev: HostDevice, processors: u32, time: HostTime, thread_free: bool) -> Arc<Self> {
        let (clock, virtual_time): (Arc<dyn Clock>, bool) = match &time {
            HostTime::Wall => (Arc::new(StdClock::default()), false),
            HostTime::Virtual(c) => (c.clone(), true),
        };
        let executor = HostExecutor::build(processors, time, thread_free);
        let scheduler: Arc<dyn DpcScheduler> = executor.clone();
        Arc::new(HostPlatform {
            dev,
            executor,
            scheduler,
            clock,
            virtual_time,
            uar_page: Box::new(UarPage(
                [const { core::sync::atomic::AtomicU32::new(0) }; 1024],
            )),
            irq: Mutex::new(None),
        })
    }

    /// The executor (for `runs_on` and shutdown).
    pub fn executor(&self) -> &Arc<HostExecutor> {
        &self.executor
    }

    /// Whether `now_ns` and the timers follow a harness clock ([`HostTime::Virtual`]).
    pub fn is_virtual_time(&self) -> bool {
        self.virtual_time
    }

    /// Delivers MSI-X `vector` to the connected handler (as the interrupt controller would).
    /// Returns the handler's claim, or false when none is connected.
    pub fn raise_interrupt(&self, vector: u32) -> bool {
        let h = self.irq.lock().unwrap().clone();
        h.is_some_and(|h| h.isr(vector))
    }

    /// The last value stored at `off` of the UAR stand-in page.
    pub fn uar_word(&self, off: u32) -> u32 {
        let p = self
            .uar_page
            .0
            .as_ptr()
            .cast::<u32>()
            .wrapping_add(((off & 0xFFC) >> 2) as usize);
        // SAFETY: `p` is inside the page (offset masked to < 4096); a volatile read races only
        // with volatile doorbell stores of the same width, which tests do not overlap.
        unsafe { core::ptr::read_volatile(p) }
    }
}

impl Platform for HostPlatform {
    fn dma(&self) -> &Arc<dyn DmaAllocator> {
        &self.dev.dma
    }
    fn bar1(&self) -> &dyn RegisterIo {
        &*self.dev.bar1
    }
    fn map_uar(&self) -> Result<Uar, OsError> {
        let base = core::ptr::NonNull::from(&self.uar_page.0).cast::<u32>();
        // SAFETY: the page is a 4 KiB, 4096-aligned heap allocation owned by `self`, which the
        // device keeps alive (it holds the platform `Arc`) for as long as it uses the Uar.
        let uar = unsafe { Uar::new(base) };
        match &self.dev.doorbell {
            // A `bare-doorbell` build has no hook to forward doorbells with: the mapping is
            // refused rather than leave the model deaf to them.
            Some(h) => uar.try_with_hook(h.clone()),
            None => Ok(uar),
        }
    }
    fn uar_pfn(&self) -> u64 {
        self.dev.uar_pfn
    }
    fn scheduler(&self) -> &Arc<dyn DpcScheduler> {
        &self.scheduler
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        let mut g = self.irq.lock().unwrap();
        if g.is_some() {
            return Err(OsError::Unavailable);
        }
        *g = Some(handler);
        Ok(())
    }
    fn disconnect_interrupt(&self) {
        *self.irq.lock().unwrap() = None;
    }
    fn wait_until(&self, cond: &dyn Fn() -> bool, timeout_ns: u64) -> bool {
        let deadline = Deadline::after(self.now_ns(), timeout_ns);
        let wall_start = Instant::now();
        // Virtual time moves only while something is pending (a timer, a fabric event): a
        // wait whose condition nothing pending can change also ends at its wall-clock
        // timeout, as it would without virtual time, instead of spinning for ever.
        let wall_deadline = Duration::from_nanos(timeout_ns);
        loop {
            if cond() {
                return true;
            }
            let wall = wall_start.elapsed();
            if deadline.expired(self.now_ns()) || (self.virtual_time && wall >= wall_deadline) {
                return cond();
            }
            // A thread-free executor's DPCs run on the waiting thread (a DPC preempting it).
            if self.executor.run_queued() != 0 {
                continue;
            }
            match &self.dev.pump {
                Some(p) => p(),
                // Commands complete within microseconds on the model's thread; a sleep costs a
                // whole scheduler tick (~4 ms here), so yield for the first millisecond and only
                // then back off to sleeping. Under Miri a yield is a millisecond of interpreted
                // spinning on its virtual clock, and a sleep lets the other threads run at once.
                None if !cfg!(miri) && wall < Duration::from_millis(1) => std::thread::yield_now(),
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
    }
}

/// The device-specific parts a test harness supplies to [`HostNicPlatform`].
pub struct HostNicDevice {
    /// Memory BARs by index (`None` for a BAR the function does not have).
    pub bars: Vec<Option<Arc<dyn RegisterIo>>>,
    /// DMA allocator (memory registered with the model; logical = the model's bus address).
    pub dma: Arc<dyn DmaAllocator>,
    /// MSI-X messages granted.
    pub vectors: u32,
}

/// A [`NicPlatform`] for host tests: [`HostExecutor`] DPCs and timers, a
/// clock ([`StdClock`] or the harness's virtual one), and the harness's [`HostNicDevice`]. The
/// harness delivers device interrupts with [`HostNicPlatform::raise_interrupt`].
pub struct HostNicPlatform {
    dev: HostNicDevice,
    executor: Arc<HostExecutor>,
    scheduler: Arc<dyn DpcScheduler>,
    clock: Arc<dyn Clock>,
    irq: Mutex<Option<Arc<dyn InterruptHandler>>>,
}

impl HostNicPlatform {
    /// A platform with `processors` DPC processors whose clock and timers follow `time`.
    pub fn with_time(dev: HostNicDevice, processors: u32, time: HostTime) -> Arc<Self> {
        let clock: Arc<dyn Clock> = match &time {
            HostTime::Wall => Arc::new(StdClock::default()),
            HostTime::Virtual(c) => c.clone(),
        };
        let executor = HostExecutor::with_time(processors, time);
        let scheduler: Arc<dyn DpcScheduler> = executor.clone();
        Arc::new(HostNicPlatform {
            dev,
            executor,
            scheduler,
            clock,
            irq: Mutex::new(None),
        })
    }

    /// The executor (idle checks, shutdown).
    pub fn executor(&self) -> &Arc<HostExecutor> {
        &self.executor
    }

    /// Delivers MSI-X `vector` to the connected handler; false when none is connected or the
    /// vector was not granted.
    pub fn raise_interrupt(&self, vector: u32) -> bool {
        if vector >= self.dev.vectors {
            return false;
        }
        let h = self.irq.lock().unwrap().clone();
        h.is_some_and(|h| h.isr(vector))
    }

    /// Whether an interrupt handler is connected.
    pub fn interrupt_connected(&self) -> bool {
        self.irq.lock().unwrap().is_some()
    }
}

impl NicPlatform for HostNicPlatform {
    fn dma(&self) -> &Arc<dyn DmaAllocator> {
        &self.dev.dma
    }
    fn bar(&self, index: u32) -> Option<Arc<dyn RegisterIo>> {
        self.dev.bars.get(index as usize).cloned().flatten()
    }
    fn scheduler(&self) -> &Arc<dyn DpcScheduler> {
        &self.scheduler
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn interrupt_vectors(&self) -> u32 {
        self.dev.vectors
    }
    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        let mut g = self.irq.lock().unwrap();
        if g.is_some() {
            return Err(OsError::Unavailable);
        }
        *g = Some(handler);
        Ok(())
    }
    fn disconnect_interrupt(&self) {
        *self.irq.lock().unwrap() = None;
    }
}
