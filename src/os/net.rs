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

struct Pending {
    remote: IpAddr,
    deadline_ns: u64,
    done: ResolveDone,
}

struct Table {
    neighbours: KVec<(IpAddr, Mac)>,
    local: KVec<IpAddr>,
    /// Fixed slots, allocated at construction: a resolution waits here without allocating.
    pending: KVec<Option<Pending>>,
    events: Option<Arc<dyn AddressEvents>>,
}

/// A neighbour table its owner fills ([`Neighbours::set_neighbour`],
/// [`Neighbours::add_address`]); see the module docs.
pub struct Neighbours {
    platform: Arc<dyn Platform>,
    bound_ns: u64,
    table: SpinLock<Table>,
    timer: SpinLock<Option<Timer>>,
}

struct Expiry(Weak<Neighbours>);

impl DpcHandler for Expiry {
    fn run(&self) {
        if let Some(n) = self.0.upgrade() {
            n.expire();
        }
    }
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
        let mut pending = KVec::try_with_capacity(capacity).map_err(nr)?;
        for _ in 0..capacity {
            pending
                .push_within_capacity(None)
                .map_err(|_| ResolveError::NoResources)?;
        }
        let table = Table {
            neighbours: KVec::try_with_capacity(capacity).map_err(nr)?,
            local: KVec::try_with_capacity(capacity).map_err(nr)?,
            pending,
            events: None,
        };
        let n = try_arc(Neighbours {
            platform,
            bound_ns,
            table: SpinLock::new(table),
            timer: SpinLock::new(None),
        })
        .map_err(nr)?;
        let hook: Arc<dyn DpcHandler> = try_arc(Expiry(Arc::downgrade(&n))).map_err(nr)?;
        let timer = Timer::new(n.platform.scheduler(), hook).map_err(nr)?;
        *n.timer.lock() = Some(timer);
        Ok(n)
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
        while let Some(p) = self.take_pending(|p| p.remote == ip) {
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
        self.table.lock().pending.iter().flatten().count()
    }

    fn take_pending(&self, which: impl Fn(&Pending) -> bool) -> Option<Pending> {
        let mut t = self.table.lock();
        t.pending
            .iter_mut()
            .find(|p| p.as_ref().is_some_and(&which))
            .and_then(Option::take)
    }

    /// Timer DPC: fails every resolution past its deadline, one at a time with no lock held
    /// while its `done` runs, then re-arms for the earliest left.
    fn expire(&self) {
        let now = self.platform.now_ns();
        while let Some(p) = self.take_pending(|p| p.deadline_ns <= now) {
            (p.done)(Err(ResolveError::Unreachable));
        }
        self.arm();
    }

    fn arm(&self) {
        let next = {
            let t = self.table.lock();
            t.pending.iter().flatten().map(|p| p.deadline_ns).min()
        };
        // The timer is set with no lock held: its DPC takes the table's lock.
        let timer = self.timer.lock().clone();
        if let (Some(at), Some(timer)) = (next, timer) {
            timer.schedule_in(at.saturating_sub(self.platform.now_ns()));
        }
    }
}

impl Drop for Neighbours {
    /// Every `done` runs exactly once: a resolution still waiting fails as unanswered.
    fn drop(&mut self) {
        if let Some(t) = self.timer.get_mut().take() {
            t.cancel();
        }
        for slot in self.table.get_mut().pending.iter_mut() {
            if let Some(p) = slot.take() {
                (p.done)(Err(ResolveError::Unreachable));
            }
        }
    }
}

impl AddressResolver for Neighbours {
    fn resolve(&self, local: IpAddr, remote: IpAddr, done: ResolveDone) {
        let deadline_ns = self.platform.now_ns().saturating_add(self.bound_ns);
        let refused = {
            let mut t = self.table.lock();
            if !t.local.contains(&local) {
                Some((done, Err(ResolveError::NotLocal)))
            } else if let Some(&(_, mac)) = t.neighbours.iter().find(|(i, _)| *i == remote) {
                Some((done, Ok(mac)))
            } else {
                match t.pending.iter_mut().find(|p| p.is_none()) {
                    Some(slot) => {
                        *slot = Some(Pending {
                            remote,
                            deadline_ns,
                            done,
                        });
                        None
                    }
                    None => Some((done, Err(ResolveError::NoResources))),
                }
            }
        };
        match refused {
            Some((done, r)) => done(r),
            None => self.arm(),
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
