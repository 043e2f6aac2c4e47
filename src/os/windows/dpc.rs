//! [`WindowsScheduler`]: `crate::os::DpcScheduler` over kernel DPCs and one kernel timer.
//!
//! `enqueue` is called from ISRs at DIRQL, so it neither locks nor allocates: each processor
//! has a mailbox, a bounded lock-free queue of `Dpc` handles (`os::windows::mailbox`),
//! drained by one `KDPC` targeted at that processor (`KeSetTargetProcessorDpcEx`).
//! A `Dpc` is in at most one mailbox at a time (its queued flag coalesces), so a mailbox of
//! [`MAILBOX_SLOTS`] holds every DPC object of an adapter; an overflow is reported with
//! DbgPrintEx and drops that one run.
//!
//! The mailboxes (4 KiB each) are allocated zeroed and used in place, never built on the
//! stack (a debug build would copy them several times over the 24 KiB kernel stack).
//!
//! Timers share one `KTIMER`: a table of [`TIMER_SLOTS`] pending expiries under a spin lock,
//! the timer set to the earliest. The device layer uses one timer per command channel.

use alloc::sync::Arc;
use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr::NonNull;

use super::imports::{
    DbgPrintEx, KeCancelTimer, KeFlushQueuedDpcs, KeGetCurrentProcessorNumberEx,
    KeGetProcessorNumberFromIndex, KeInitializeDpc, KeInitializeTimer, KeInsertQueueDpc,
    KeQueryActiveProcessorCountEx, KeQueryInterruptTimePrecise, KeRemoveQueueDpc,
    KeSetTargetProcessorDpcEx, KeSetTimer,
};
use super::ke::{ALL_PROCESSOR_GROUPS, KDPC, KTIMER, PROCESSOR_NUMBER};
use super::mailbox::Mailbox;
use crate::os::alloc::try_arc;
use crate::os::{Dpc, DpcScheduler, OsError, Processor, SpinLock, Timer};

/// DPC handles one processor's mailbox can hold.
pub const MAILBOX_SLOTS: usize = 256;
/// Timers pending at once.
pub const TIMER_SLOTS: usize = 16;
/// Processors the scheduler serves (more are folded onto these).
pub const MAX_PROCESSORS: u32 = 256;

/// One processor's queue and the kernel DPC that drains it; all-zero is a valid empty one.
struct ProcessorMailbox {
    kdpc: UnsafeCell<KDPC>,
    queue: Mailbox<Dpc, MAILBOX_SLOTS>,
}

struct TimerEntry {
    timer: Timer,
    generation: u64,
    due_ns: u64,
}

/// Zero-initialized mailboxes, one per processor, in one pool block.
struct Mailboxes {
    // INVARIANT: `len` mailboxes at `ptr`, allocated by `alloc_zeroed` with `layout`.
    ptr: NonNull<ProcessorMailbox>,
    len: usize,
    layout: Layout,
}

impl Mailboxes {
    fn new(len: usize) -> Result<Self, OsError> {
        let layout =
            Layout::array::<ProcessorMailbox>(len.max(1)).map_err(|_| OsError::NoMemory)?;
        // SAFETY: the layout is non-zero-sized (at least one mailbox).
        let raw = unsafe { alloc::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<ProcessorMailbox>()).ok_or(OsError::NoMemory)?;
        Ok(Mailboxes { ptr, len, layout })
    }

    fn as_slice(&self) -> &[ProcessorMailbox] {
        // SAFETY: `len` mailboxes at `ptr` (type invariant); all-zero bytes are a valid empty
        // mailbox (KDPC storage, and an empty `Mailbox`: see os::windows::mailbox).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mailboxes {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; a mailbox needs no drop (its values are
        // MaybeUninit, and `shutdown` has taken every queued handle out).
        unsafe { alloc::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) }
    }
}

/// DPCs and timers of one adapter.
pub struct WindowsScheduler {
    mailboxes: Mailboxes,
    ktimer: UnsafeCell<KTIMER>,
    timer_dpc: UnsafeCell<KDPC>,
    timers: SpinLock<[Option<TimerEntry>; TIMER_SLOTS]>,
}

// SAFETY: the KDPC/KTIMER storage is only handed to the kernel, which synchronizes its own
// objects; mailboxes are lock-free queues and the timer table is under a spin lock.
unsafe impl Send for WindowsScheduler {}
// SAFETY: as above.
unsafe impl Sync for WindowsScheduler {}

fn now_ns() -> u64 {
    // SAFETY: the QPC out-parameter may be NULL; any IRQL.
    unsafe { KeQueryInterruptTimePrecise(core::ptr::null_mut()) }.saturating_mul(100)
}

impl WindowsScheduler {
    /// A scheduler with one mailbox per active processor. PASSIVE_LEVEL.
    pub fn new() -> Result<Arc<Self>, OsError> {
        // SAFETY: no preconditions.
        let count =
            unsafe { KeQueryActiveProcessorCountEx(ALL_PROCESSOR_GROUPS) }.clamp(1, MAX_PROCESSORS);
        let mailboxes = Mailboxes::new(count as usize)?;
        let sched = try_arc(WindowsScheduler {
            mailboxes,
            ktimer: UnsafeCell::new(KTIMER::zeroed()),
            timer_dpc: UnsafeCell::new(KDPC::zeroed()),
            timers: SpinLock::new(core::array::from_fn(|_| None)),
        })?;
        for (index, mailbox) in (0u32..).zip(sched.mailboxes.as_slice().iter()) {
            let context = core::ptr::from_ref(mailbox).cast_mut().cast::<c_void>();
            // SAFETY: the KDPC lives inside the Arc'd scheduler, at a stable address, until
            // `shutdown` has removed and flushed it.
            unsafe { KeInitializeDpc(mailbox.kdpc.get(), mailbox_routine, context) };
            let mut number = PROCESSOR_NUMBER::default();
            // SAFETY: `number` is a valid out-parameter.
            if unsafe { KeGetProcessorNumberFromIndex(index, &mut number) } >= 0 {
                // SAFETY: the DPC was just initialized and is not queued.
                unsafe { KeSetTargetProcessorDpcEx(mailbox.kdpc.get(), &mut number) };
            }
        }
        let context = Arc::as_ptr(&sched).cast_mut().cast::<c_void>();
        // SAFETY: as for the mailboxes; the timer object is initialized once, before use.
        unsafe { KeInitializeDpc(sched.timer_dpc.get(), timer_routine, context) };
        // SAFETY: as above.
        unsafe { KeInitializeTimer(sched.ktimer.get()) };
        Ok(sched)
    }

    /// Cancels the timer and waits until no DPC of this scheduler runs. PASSIVE_LEVEL; the
    /// last step before the scheduler is dropped (halt).
    pub fn shutdown(&self) {
        // SAFETY: the timer was initialized in `new`.
        unsafe { KeCancelTimer(self.ktimer.get()) };
        // SAFETY: initialized in `new`.
        unsafe { KeRemoveQueueDpc(self.timer_dpc.get()) };
        for m in self.mailboxes.as_slice().iter() {
            // SAFETY: initialized in `new`.
            unsafe { KeRemoveQueueDpc(m.kdpc.get()) };
        }
        // SAFETY: PASSIVE_LEVEL (this method's contract).
        unsafe { KeFlushQueuedDpcs() };
        for m in self.mailboxes.as_slice().iter() {
            while m.queue.pop().is_some() {}
        }
        *self.timers.lock() = core::array::from_fn(|_| None);
    }

    fn mailbox_index(&self, target: Processor) -> usize {
        let index = match target {
            // SAFETY: NULL is allowed for the out-parameter.
            Processor::Current => unsafe { KeGetCurrentProcessorNumberEx(core::ptr::null_mut()) },
            Processor::Index(i) => i,
        };
        (index as usize) % self.mailboxes.len.max(1)
    }

    /// Sets the kernel timer to the earliest pending expiry (under the table lock).
    fn arm(&self, table: &[Option<TimerEntry>; TIMER_SLOTS]) {
        let Some(due) = table.iter().flatten().map(|e| e.due_ns).min() else {
            return;
        };
        let wait_100ns = due.saturating_sub(now_ns()).div_ceil(100).max(1);
        let relative = -(i64::try_from(wait_100ns).unwrap_or(i64::MAX));
        // SAFETY: timer and DPC initialized in `new`; IRQL <= DISPATCH_LEVEL (spin lock held).
        unsafe { KeSetTimer(self.ktimer.get(), relative, self.timer_dpc.get()) };
    }

    fn expire_due(&self) {
        let mut fired: [Option<TimerEntry>; TIMER_SLOTS] = core::array::from_fn(|_| None);
        {
            let mut table = self.timers.lock();
            let now = now_ns();
            for (slot, out) in table.iter_mut().zip(fired.iter_mut()) {
                if slot.as_ref().is_some_and(|e| e.due_ns <= now) {
                    *out = slot.take();
                }
            }
            self.arm(&table);
        }
        // Outside the lock: expiring queues a DPC, and dropping the last handle of a timer
        // may run arbitrary destructors.
        for e in fired.into_iter().flatten() {
            e.timer.expire(e.generation, Processor::Current);
        }
    }
}

impl DpcScheduler for WindowsScheduler {
    fn enqueue(&self, dpc: Dpc, target: Processor) {
        let Some(mailbox) = self.mailboxes.as_slice().get(self.mailbox_index(target)) else {
            return;
        };
        if mailbox.queue.push(dpc).is_err() {
            // SAFETY: a NUL-terminated format without conversions; any IRQL.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: DPC mailbox full, one run dropped\n"
                        .as_ptr()
                        .cast(),
                )
            };
            return;
        }
        // SAFETY: initialized in `new`; any IRQL. Already queued = the drain will see it.
        unsafe {
            KeInsertQueueDpc(
                mailbox.kdpc.get(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        };
    }

    fn start_timer(&self, timer: Timer, generation: u64, delay_ns: u64) {
        let due_ns = now_ns().saturating_add(delay_ns);
        let mut table = self.timers.lock();
        // A newer setting of the same timer replaces its pending one; otherwise a free slot.
        let slot = table
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.timer.same(&timer)))
            .or_else(|| table.iter().position(Option::is_none));
        let Some(entry) = slot.and_then(|i| table.get_mut(i)) else {
            drop(table);
            // SAFETY: as in `enqueue`.
            unsafe { DbgPrintEx(77, 0, c"pvrdma: timer table full\n".as_ptr().cast()) };
            return;
        };
        let old = entry.replace(TimerEntry {
            timer,
            generation,
            due_ns,
        });
        self.arm(&table);
        drop(table);
        drop(old);
    }

    fn processor_count(&self) -> u32 {
        u32::try_from(self.mailboxes.len).unwrap_or(u32::MAX)
    }
}

/// `KDEFERRED_ROUTINE` of a mailbox: runs every queued DPC, on its processor.
unsafe extern "system" fn mailbox_routine(
    _dpc: *mut KDPC,
    context: *mut c_void,
    _a1: *mut c_void,
    _a2: *mut c_void,
) {
    // SAFETY: the context is the mailbox given to KeInitializeDpc, alive until `shutdown`
    // has flushed every DPC.
    let mailbox = unsafe { &*context.cast::<ProcessorMailbox>() };
    while let Some(dpc) = mailbox.queue.pop() {
        dpc.run();
    }
}

/// `KDEFERRED_ROUTINE` of the shared timer.
unsafe extern "system" fn timer_routine(
    _dpc: *mut KDPC,
    context: *mut c_void,
    _a1: *mut c_void,
    _a2: *mut c_void,
) {
    // SAFETY: the context is the scheduler, alive until `shutdown` has cancelled the timer
    // and flushed its DPC.
    let sched = unsafe { &*context.cast::<WindowsScheduler>() };
    sched.expire_due();
}
