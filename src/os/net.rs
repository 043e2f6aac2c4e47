//! The address-resolution seam: what the connection manager needs from the host's IP stack
//! (cm.md §2.3: on RoCEv2 a GID is an IP address, and a frame's destination MAC is the IP
//! neighbour's): the interface's unicast addresses with notice of their changes, and the
//! MAC of a destination IP, resolved asynchronously within a bounded time.
//!
//! Implementations:
//! - Windows (`os::windows::net::WindowsResolver`): `ResolveIpNetEntry2` at PASSIVE_LEVEL
//!   from a work item (it blocks), after `GetIpNetEntry2` answers a cached neighbour at once;
//!   the unicast list from `GetUnicastIpAddressTable` filtered by the adapter's
//!   `InterfaceLuid`, with `NotifyUnicastIpAddressChange` for changes; all from netio.sys.
//! - [`Neighbours`]: a table its owner fills (the host tests fill it from the simulated
//!   hosts' IPs and MACs); a destination it does not hold fails after the resolution bound,
//!   as an unanswered ARP or neighbour solicitation does.
#![deny(unsafe_code)]

use ::alloc::boxed::Box;
use ::alloc::sync::{Arc, Weak};
use core::net::IpAddr;

use super::alloc::{KVec, try_arc, try_box};
use super::{DpcHandler, Platform, SpinLock, Timer};

/// An Ethernet MAC address.
pub type Mac = [u8; 6];

/// Why a destination could not be resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The source address is not one of the interface's: nothing can be sent from it (the
    /// NDK layer reports STATUS_BAD_NETWORK_NAME).
    NotLocal,
    /// No neighbour answered within the resolution bound (STATUS_HOST_UNREACHABLE).
    Unreachable,
    /// No memory, or too many resolutions outstanding (STATUS_INSUFFICIENT_RESOURCES).
    NoResources,
}

/// A resolution's outcome: runs exactly once, at IRQL ≤ DISPATCH_LEVEL with no lock of the
/// resolver held; possibly before `resolve` returns.
pub type ResolveDone = Box<dyn FnOnce(Result<Mac, ResolveError>) + Send>;

/// A change of the interface's unicast addresses (DISPATCH_LEVEL or below, no resolver lock
/// held).
pub trait AddressEvents: Send + Sync {
    /// `ip` was added to the interface.
    fn added(&self, ip: IpAddr);
    /// `ip` was removed from the interface.
    fn removed(&self, ip: IpAddr);
}

/// The host IP stack as the connection manager uses it.
pub trait AddressResolver: Send + Sync {
    /// Resolves `remote`'s MAC for frames sent from `local` (IRQL ≤ DISPATCH_LEVEL); `done`
    /// gets it, or the error, within [`AddressResolver::bound_ns`].
    fn resolve(&self, local: IpAddr, remote: IpAddr, done: ResolveDone);
    /// How long a resolution may take at most before it fails [`ResolveError::Unreachable`].
    fn bound_ns(&self) -> u64;
    /// Copies the interface's unicast addresses into `out`; returns how many it has (more
    /// than `out.len()` means `out` was too short).
    fn unicast_addresses(&self, out: &mut [IpAddr]) -> usize;
    /// Where address changes go from now on (`None`: nowhere).
    fn watch_addresses(&self, events: Option<Arc<dyn AddressEvents>>);
}

/// Linux's default ARP / neighbour-discovery give-up time: 3 solicitations 1 s apart.
pub const DEFAULT_RESOLVE_BOUND_NS: u64 = 3_000_000_000;

/// One resolution waiting for its answer in a [`PendingResolutions`] slot.
pub struct Pending {
    /// The source address it was asked for.
    pub local: IpAddr,
    /// The destination to resolve.
    pub remote: IpAddr,
    /// When it fails [`ResolveError::Unreachable`].
    pub deadline_ns: u64,
    /// Tells an answer for this request from one for a later request in the same slot.
    pub generation: u64,
    /// A resolver's worker has taken it ([`PendingResolutions::start_next`]).
    pub started: bool,
    /// Its outcome.
    pub done: ResolveDone,
}

struct Slots {
    /// Fixed, allocated at construction: a resolution waits here without allocating.
    slots: KVec<Option<Pending>>,
    next_generation: u64,
}

/// Where every resolver parks its resolutions: fixed slots and the timer that fails each one
/// at its deadline. A `done` runs with no lock of this type held, exactly once (answered,
/// expired, or failed when the queue is dropped).
pub struct PendingResolutions {
    platform: Arc<dyn Platform>,
    slots: SpinLock<Slots>,
    timer: SpinLock<Option<Timer>>,
}

struct Expiry(Weak<PendingResolutions>);

impl DpcHandler for Expiry {
    fn run(&self) {
        if let Some(q) = self.0.upgrade() {
            q.expire();
        }
    }
}

impl PendingResolutions {
    /// `capacity` slots and the expiry timer. PASSIVE_LEVEL (allocates).
    ///
    /// # Errors
    /// [`ResolveError::NoResources`].
    pub fn new(
        platform: Arc<dyn Platform>,
        capacity: usize,
    ) -> Result<Arc<PendingResolutions>, ResolveError> {
        let nr = |_| ResolveError::NoResources;
        let mut slots = KVec::try_with_capacity(capacity).map_err(nr)?;
        for _ in 0..capacity {
            slots
                .push_within_capacity(None)
                .map_err(|_| ResolveError::NoResources)?;
        }
        let q = try_arc(PendingResolutions {
            platform,
            slots: SpinLock::new(Slots {
                slots,
                next_generation: 0,
            }),
            timer: SpinLock::new(None),
        })
        .map_err(nr)?;
        let hook: Arc<dyn DpcHandler> = try_arc(Expiry(Arc::downgrade(&q))).map_err(nr)?;
        let timer = Timer::new(q.platform.scheduler(), hook).map_err(nr)?;
        *q.timer.lock() = Some(timer);
        Ok(q)
    }

    /// Parks a resolution of `remote` from `local` failing `bound_ns` from now; returns its
    /// generation, or gives `done` back when every slot is taken. The caller then calls
    /// [`PendingResolutions::arm`] with no lock held (a caller may park under its own lock,
    /// so that a check it makes and the park are one step).
    ///
    /// # Errors
    /// `done`, unrun, when the queue is full.
    pub fn park(
        &self,
        local: IpAddr,
        remote: IpAddr,
        bound_ns: u64,
        done: ResolveDone,
    ) -> Result<u64, ResolveDone> {
        let deadline_ns = self.platform.now_ns().saturating_add(bound_ns);
        let mut s = self.slots.lock();
        let generation = s.next_generation;
        match s.slots.iter_mut().find(|p| p.is_none()) {
            Some(slot) => {
                *slot = Some(Pending {
                    local,
                    remote,
                    deadline_ns,
                    generation,
                    started: false,
                    done,
                });
                s.next_generation = generation.wrapping_add(1);
                Ok(generation)
            }
            None => Err(done),
        }
    }

    /// Removes the first waiting resolution `which` selects (its caller runs its `done`).
    pub fn take(&self, which: impl Fn(&Pending) -> bool) -> Option<Pending> {
        let mut s = self.slots.lock();
        s.slots
            .iter_mut()
            .find(|p| p.as_ref().is_some_and(&which))
            .and_then(Option::take)
    }

    /// Marks the oldest-slotted resolution no worker has taken as started and returns its
    /// addresses and generation (answer it with `take(|p| p.generation == g)`).
    pub fn start_next(&self) -> Option<(IpAddr, IpAddr, u64)> {
        let mut s = self.slots.lock();
        s.slots.iter_mut().flatten().find(|p| !p.started).map(|p| {
            p.started = true;
            (p.local, p.remote, p.generation)
        })
    }

    /// Fails every waiting resolution [`ResolveError::Unreachable`], one at a time with no
    /// lock held while its `done` runs.
    pub fn fail_all(&self) {
        while let Some(p) = self.take(|_| true) {
            (p.done)(Err(ResolveError::Unreachable));
        }
    }

    /// Resolutions waiting.
    pub fn outstanding(&self) -> usize {
        self.slots.lock().slots.iter().flatten().count()
    }

    /// Stops the expiry timer for good (a resolver shutting down; what is left fails in
    /// [`PendingResolutions::fail_all`] or at drop).
    pub fn stop_timer(&self) {
        if let Some(t) = self.timer.lock().take() {
            t.cancel();
        }
    }

    /// Timer DPC: fails every resolution past its deadline, then re-arms for the earliest left.
    fn expire(&self) {
        let now = self.platform.now_ns();
        while let Some(p) = self.take(|p| p.deadline_ns <= now) {
            (p.done)(Err(ResolveError::Unreachable));
        }
        self.arm();
    }

    /// Sets the timer for the earliest deadline waiting (no lock of the caller's that the
    /// timer DPC's `done`s take may be held).
    pub fn arm(&self) {
        let next = {
            let s = self.slots.lock();
            s.slots.iter().flatten().map(|p| p.deadline_ns).min()
        };
        // The timer is set with no slot lock held: its DPC takes that lock.
        let timer = self.timer.lock().clone();
        if let (Some(at), Some(timer)) = (next, timer) {
            timer.schedule_in(at.saturating_sub(self.platform.now_ns()));
        }
    }
}

impl Drop for PendingResolutions {
    /// Every `done` runs exactly once: a resolution still waiting fails as unanswered.
    fn drop(&mut self) {
        if let Some(t) = self.timer.get_mut().take() {
            t.cancel();
        }
        for slot in self.slots.get_mut().slots.iter_mut() {
            if let Some(p) = slot.take() {
                (p.done)(Err(ResolveError::Unreachable));
            }
        }
    }
}

struct Table {
    neighbours: KVec<(IpAddr, Mac)>,
    local: KVec<IpAddr>,
    events: Option<Arc<dyn AddressEvents>>,
}

/// A neighbour table its owner fills ([`Neighbours::set_neighbour`],
/// [`Neighbours::add_address`]); see the module docs.
pub struct Neighbours {
    bound_ns: u64,
    table: SpinLock<Table>,
    pending: Arc<PendingResolutions>,
}

impl Neighbours {
    /// An empty table holding up to `capacity` neighbours, `capacity` addresses and
    /// `capacity` outstanding resolutions; an unknown neighbour fails after `bound_ns`.
    /// PASSIVE_LEVEL (allocates).
    ///
    /// # Errors
    /// [`ResolveError::NoResources`].
    pub fn new(
        platform: Arc<dyn Platform>,
        capacity: usize,
        bound_ns: u64,
    ) -> Result<Arc<Neighbours>, ResolveError> {
        let nr = |_| ResolveError::NoResources;
        let table = Table {
            neighbours: KVec::try_with_capacity(capacity).map_err(nr)?,
            local: KVec::try_with_capacity(capacity).map_err(nr)?,
            events: None,
        };
        try_arc(Neighbours {
            bound_ns,
            table: SpinLock::new(table),
            pending: PendingResolutions::new(platform, capacity)?,
        })
        .map_err(nr)
    }

    /// `ip` is reachable at `mac` (replacing an earlier entry); resolutions waiting for it
    /// complete now.
    ///
    /// # Errors
    /// [`ResolveError::NoResources`] when the table is full.
    pub fn set_neighbour(&self, ip: IpAddr, mac: Mac) -> Result<(), ResolveError> {
        {
            let mut t = self.table.lock();
            match t.neighbours.iter_mut().find(|(i, _)| *i == ip) {
                Some(e) => e.1 = mac,
                None => t
                    .neighbours
                    .push_within_capacity((ip, mac))
                    .map_err(|_| ResolveError::NoResources)?,
            }
        }
        while let Some(p) = self.pending.take(|p| p.remote == ip) {
            (p.done)(Ok(mac));
        }
        Ok(())
    }

    /// Forgets `ip`'s neighbour entry.
    pub fn remove_neighbour(&self, ip: IpAddr) {
        let mut t = self.table.lock();
        if let Some(i) = t.neighbours.iter().position(|(n, _)| *n == ip) {
            let last = t.neighbours.len().saturating_sub(1);
            t.neighbours.swap(i, last);
            t.neighbours.pop();
        }
    }

    /// `ip` is now one of the interface's addresses; the watcher hears of it.
    ///
    /// # Errors
    /// [`ResolveError::NoResources`] when the list is full.
    pub fn add_address(&self, ip: IpAddr) -> Result<(), ResolveError> {
        let events = {
            let mut t = self.table.lock();
            if t.local.contains(&ip) {
                return Ok(());
            }
            t.local
                .push_within_capacity(ip)
                .map_err(|_| ResolveError::NoResources)?;
            t.events.clone()
        };
        if let Some(e) = events {
            e.added(ip);
        }
        Ok(())
    }

    /// `ip` is no longer the interface's; the watcher hears of it.
    pub fn remove_address(&self, ip: IpAddr) {
        let events = {
            let mut t = self.table.lock();
            let Some(i) = t.local.iter().position(|a| *a == ip) else {
                return;
            };
            let last = t.local.len().saturating_sub(1);
            t.local.swap(i, last);
            t.local.pop();
            t.events.clone()
        };
        if let Some(e) = events {
            e.removed(ip);
        }
    }

    /// Resolutions waiting for a neighbour.
    pub fn outstanding(&self) -> usize {
        self.pending.outstanding()
    }
}

impl AddressResolver for Neighbours {
    fn resolve(&self, local: IpAddr, remote: IpAddr, done: ResolveDone) {
        let refused = {
            let t = self.table.lock();
            if !t.local.contains(&local) {
                Some((done, Err(ResolveError::NotLocal)))
            } else if let Some(&(_, mac)) = t.neighbours.iter().find(|(i, _)| *i == remote) {
                Some((done, Ok(mac)))
            } else {
                // Parked under the table's lock: `set_neighbour` either is seen above or
                // answers this resolution after adding the entry.
                match self.pending.park(local, remote, self.bound_ns, done) {
                    Ok(_) => None,
                    Err(done) => Some((done, Err(ResolveError::NoResources))),
                }
            }
        };
        match refused {
            Some((done, r)) => done(r),
            None => self.pending.arm(),
        }
    }

    fn bound_ns(&self) -> u64 {
        self.bound_ns
    }

    fn unicast_addresses(&self, out: &mut [IpAddr]) -> usize {
        let t = self.table.lock();
        for (o, a) in out.iter_mut().zip(t.local.iter()) {
            *o = *a;
        }
        t.local.len()
    }

    fn watch_addresses(&self, events: Option<Arc<dyn AddressEvents>>) {
        let old = core::mem::replace(&mut self.table.lock().events, events);
        drop(old);
    }
}

/// Allocates a [`ResolveDone`] (callers at DISPATCH_LEVEL: non-paged pool).
///
/// # Errors
/// [`ResolveError::NoResources`].
pub fn resolve_done(
    f: impl FnOnce(Result<Mac, ResolveError>) + Send + 'static,
) -> Result<ResolveDone, ResolveError> {
    try_box(f)
        .map(|b| b.map_box(|b| b as Box<dyn FnOnce(Result<Mac, ResolveError>) + Send>))
        .map(super::alloc::KBox::into_inner)
        .map_err(|_| ResolveError::NoResources)
}
