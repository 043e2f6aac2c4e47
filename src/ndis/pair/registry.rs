//! The driver-global table where a slot's two adapters find each other (smb-direct.md §5.1
//! item 1: "paired through a driver-global table keyed by (bus, device)"; Linux pairs the
//! same way, `pci_get_slot(bus, PCI_DEVFN(slot, 0))`, vmxnet3.md §1.1).
//!
//! Each adapter registers at InitializeEx and unregisters at Halt, in any order. The table
//! then brings the pair towards what is registered, one step at a time: a slot with both
//! functions registered gets joined ([`PairedNic::joined`]); a joined pair with either gone
//! gets parted ([`PairedNic::parting`]). One thread at a time runs the steps of a slot (the
//! first that finds it idle; one arriving meanwhile leaves a note and the runner goes round
//! again), with no lock held while a step runs, so a step may wait for the device, and the
//! joins and partings of a slot never overlap or reorder. [`PairRegistry::leave_nic`] and
//! [`PairRegistry::leave_rdma`] return once the slot is idle: the leaver's partner has let go
//! of it.
#![deny(unsafe_code)]

use alloc::sync::Arc;

use super::function::RdmaFunction;
use crate::os::{Platform, SpinLock};

/// Where a PCI function is (DevicePropertyBusNumber, DevicePropertyAddress on Windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciLocation {
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

impl PciLocation {
    /// DevicePropertyAddress's encoding: device in the high word, function in the low.
    pub fn from_address(bus: u32, address: u32) -> Self {
        PciLocation {
            bus,
            device: address >> 16,
            function: address & 0xFFFF,
        }
    }

    fn slot(&self) -> (u32, u32) {
        (self.bus, self.device)
    }
}

/// The Ethernet side of a slot, as the table drives it. Both methods run at PASSIVE_LEVEL
/// with no lock held; they may wait.
pub trait PairedNic: Send + Sync {
    /// The slot's RDMA function is here: attach the interface to it and offer NDK, now or
    /// later on a thread of the Ethernet side's own ([`super::NicNdk`] defers it to its work
    /// item: this may run on an InitializeEx's stack). A later [`PairedNic::parting`] with
    /// the same function undoes or cancels it.
    fn joined(&self, rdma: Arc<dyn RdmaFunction>);
    /// `rdma` is leaving (it halts, or this adapter does): stop offering NDK and let go of
    /// it before returning (outstanding NDK objects failed, the interface detached).
    fn parting(&self, rdma: &Arc<dyn RdmaFunction>);
}

/// Slots the table holds at once (a VM has at most ten vNICs on vSphere).
pub const SLOTS: usize = 32;

/// How long a leaver waits for another thread's step on its slot.
pub const STEP_WAIT_NS: u64 = 30_000_000_000;

/// Why an adapter could not register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairError {
    /// The table is full.
    Full,
    /// The slot already has a function of this kind.
    Taken,
}

type Pair = (Arc<dyn PairedNic>, Arc<dyn RdmaFunction>);

struct Entry {
    slot: (u32, u32),
    nic: Option<Arc<dyn PairedNic>>,
    rdma: Option<Arc<dyn RdmaFunction>>,
    /// The pair as last joined (None: parted).
    joined: Option<Pair>,
    /// A thread is running this slot's steps.
    busy: bool,
}

fn same<T: ?Sized>(a: &Arc<T>, b: &Arc<T>) -> bool {
    core::ptr::eq(Arc::as_ptr(a).cast::<()>(), Arc::as_ptr(b).cast::<()>())
}

impl Entry {
    fn idle_and_empty(&self) -> bool {
        !self.busy && self.nic.is_none() && self.rdma.is_none() && self.joined.is_none()
    }
}

enum Step {
    Join(Pair),
    Part(Pair),
}

/// See the module docs. `const`-constructible: the driver's is a `static`.
pub struct PairRegistry {
    slots: SpinLock<[Option<Entry>; SLOTS]>,
}

impl Default for PairRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl PairRegistry {
    /// An empty table.
    pub const fn new() -> Self {
        PairRegistry {
            slots: SpinLock::new([const { None }; SLOTS]),
        }
    }

    /// Applies `f` to the slot's entry (created if absent and `create`), under the lock.
    fn with_entry<R>(
        &self,
        slot: (u32, u32),
        create: bool,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Result<R, PairError> {
        let mut t = self.slots.lock();
        if let Some(e) = t.iter_mut().flatten().find(|e| e.slot == slot) {
            return Ok(f(e));
        }
        if !create {
            return Err(PairError::Full);
        }
        let free = t.iter_mut().find(|e| e.is_none()).ok_or(PairError::Full)?;
        let e = free.insert(Entry {
            slot,
            nic: None,
            rdma: None,
            joined: None,
            busy: false,
        });
        Ok(f(e))
    }

    /// The Ethernet function at `at` registers (InitializeEx, PASSIVE_LEVEL); if the slot's
    /// RDMA function is here they are joined ([`PairedNic::joined`] called) before this
    /// returns, unless another thread is running the slot's steps (then it joins them).
    ///
    /// # Errors
    /// [`PairError::Full`], [`PairError::Taken`].
    pub fn join_nic(&self, at: PciLocation, nic: Arc<dyn PairedNic>) -> Result<(), PairError> {
        self.with_entry(at.slot(), true, |e| match e.nic {
            Some(_) => Err(PairError::Taken),
            None => {
                e.nic = Some(nic);
                Ok(())
            }
        })??;
        self.run(at.slot());
        Ok(())
    }

    /// The RDMA function at `at` registers (its function number is not checked: Linux
    /// pairs function 1, QEMU any function but 0, vmxnet3.md §1.5).
    ///
    /// # Errors
    /// [`PairError::Full`], [`PairError::Taken`].
    pub fn join_rdma(&self, at: PciLocation, rdma: Arc<dyn RdmaFunction>) -> Result<(), PairError> {
        self.with_entry(at.slot(), true, |e| match e.rdma {
            Some(_) => Err(PairError::Taken),
            None => {
                e.rdma = Some(rdma);
                Ok(())
            }
        })??;
        self.run(at.slot());
        Ok(())
    }

    /// The Ethernet function at `at` leaves (Halt): parted from its RDMA function before
    /// this returns (waiting up to [`STEP_WAIT_NS`] on `platform` for a step another thread
    /// runs). Returns whether the slot went idle in time.
    pub fn leave_nic(
        &self,
        at: PciLocation,
        nic: &Arc<dyn PairedNic>,
        platform: &dyn Platform,
    ) -> bool {
        let _ = self.with_entry(at.slot(), false, |e| {
            if e.nic.as_ref().is_some_and(|n| same(n, nic)) {
                e.nic = None;
            }
        });
        self.run(at.slot());
        self.wait_idle(at.slot(), platform)
    }

    /// The RDMA function at `at` leaves (Halt): its Ethernet partner lets go of it before
    /// this returns (as [`PairRegistry::leave_nic`]).
    pub fn leave_rdma(
        &self,
        at: PciLocation,
        rdma: &Arc<dyn RdmaFunction>,
        platform: &dyn Platform,
    ) -> bool {
        let _ = self.with_entry(at.slot(), false, |e| {
            if e.rdma.as_ref().is_some_and(|r| same(r, rdma)) {
                e.rdma = None;
            }
        });
        self.run(at.slot());
        self.wait_idle(at.slot(), platform)
    }

    /// Whether the slot's two functions are joined now.
    pub fn is_joined(&self, at: PciLocation) -> bool {
        self.with_entry(at.slot(), false, |e| e.joined.is_some())
            .unwrap_or(false)
    }

    /// Slots with a registered function.
    pub fn occupied(&self) -> usize {
        self.slots.lock().iter().flatten().count()
    }

    fn wait_idle(&self, slot: (u32, u32), platform: &dyn Platform) -> bool {
        let idle = || self.with_entry(slot, false, |e| !e.busy).unwrap_or(true);
        idle() || platform.wait_until(&idle, STEP_WAIT_NS)
    }

    /// Runs the slot's steps until it matches its registrations, unless another thread
    /// does (see the module docs).
    fn run(&self, slot: (u32, u32)) {
        let mine = self
            .with_entry(slot, false, |e| !core::mem::replace(&mut e.busy, true))
            .unwrap_or(false);
        if !mine {
            return;
        }
        loop {
            let step = {
                let mut t = self.slots.lock();
                let Some(cell) = t
                    .iter_mut()
                    .find(|c| c.as_ref().is_some_and(|e| e.slot == slot))
                else {
                    return;
                };
                let Some(e) = cell.as_mut() else { return };
                let want = match (&e.nic, &e.rdma) {
                    (Some(n), Some(r)) => Some((n.clone(), r.clone())),
                    _ => None,
                };
                let still = match (&e.joined, &want) {
                    (Some((n, r)), Some((wn, wr))) => same(n, wn) && same(r, wr),
                    (None, None) => true,
                    _ => false,
                };
                if still {
                    e.busy = false;
                    if e.idle_and_empty() {
                        *cell = None;
                    }
                    return;
                }
                match e.joined.take() {
                    Some(pair) => Step::Part(pair),
                    None => match want {
                        Some(pair) => {
                            e.joined = Some(pair.clone());
                            Step::Join(pair)
                        }
                        None => {
                            e.busy = false;
                            return;
                        }
                    },
                }
            };
            match step {
                Step::Join((nic, rdma)) => nic.joined(rdma),
                Step::Part((nic, rdma)) => nic.parting(&rdma),
            }
        }
    }
}
