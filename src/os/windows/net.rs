//! [`WindowsResolver`]: the address-resolution seam ([`crate::os::net`]) over netio.sys.
//!
//! Every netio routine used here runs at PASSIVE_LEVEL only, and `ResolveIpNetEntry2` blocks
//! for as long as the stack solicits a neighbour, while the seam's `resolve` may be called at
//! DISPATCH_LEVEL. So:
//! - `resolve` only parks the request in a fixed slot and queues an NDIS I/O work item, which
//!   asks `GetIpNetEntry2` for a cached neighbour first and `ResolveIpNetEntry2` otherwise;
//! - a timer fails a slot still waiting at its deadline, so `done` runs within
//!   [`AddressResolver::bound_ns`] even while the work item is blocked on an earlier request
//!   (a late answer from netio then finds its slot gone and is dropped);
//! - the interface's unicast addresses are a cache, listed once with
//!   `GetUnicastIpAddressTable` and kept current by `NotifyUnicastIpAddressChange` (whose
//!   callback runs at PASSIVE_LEVEL), filtered by the adapter's NET_LUID.
//!
//! Layouts: netioapi.h, ws2def.h, ws2ipdef.h, ifdef.h (Learn, mingw-w64), x64; sizes asserted
//! below.
#![allow(non_snake_case, non_camel_case_types, clippy::upper_case_acronyms)]

use ::alloc::sync::{Arc, Weak};
use core::ffi::c_void;
use core::mem::{align_of, offset_of, size_of};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering, fence};

use super::imports::{
    CancelMibChangeNotify2, DbgPrintEx, FreeMibTable, GetIpNetEntry2, GetUnicastIpAddressTable,
    NdisAllocateIoWorkItem, NdisFreeIoWorkItem, NdisQueueIoWorkItem, NotifyUnicastIpAddressChange,
    ResolveIpNetEntry2,
};
use crate::os::alloc::{KVec, try_arc};
use crate::os::net::{
    AddressEvents, AddressResolver, DEFAULT_RESOLVE_BOUND_NS, Mac, PendingResolutions, ResolveDone,
    ResolveError,
};
use crate::os::{Platform, SpinLock};

/// `ADDRESS_FAMILY` values (ws2def.h).
pub const AF_UNSPEC: u16 = 0;
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 23;

/// `MIB_NOTIFICATION_TYPE` (netioapi.h).
pub const MIB_PARAMETER_NOTIFICATION: i32 = 0;
pub const MIB_ADD_INSTANCE: i32 = 1;
pub const MIB_DELETE_INSTANCE: i32 = 2;
pub const MIB_INITIAL_NOTIFICATION: i32 = 3;

/// `NL_NEIGHBOR_STATE` values whose MAC is not usable (nldef.h): the entry is being, or
/// failed to be, resolved.
pub const NLNS_UNREACHABLE: i32 = 0;
pub const NLNS_INCOMPLETE: i32 = 1;

const STATUS_SUCCESS: i32 = 0;
const STATUS_INSUFFICIENT_RESOURCES: i32 = 0xC000_009A_u32 as i32;

/// `SOCKADDR_INET` (ws2ipdef.h): the union of `SOCKADDR_IN` (16 bytes) and `SOCKADDR_IN6`
/// (28 bytes) tagged by the family both start with. Kept as bytes after the common header:
/// `SOCKADDR_IN`'s `sin_addr` is `data[0..4]`; `SOCKADDR_IN6`'s `sin6_flowinfo` is
/// `data[0..4]`, `sin6_addr` `data[4..20]`, `sin6_scope_id` `data[20..24]`.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SOCKADDR_INET {
    pub si_family: u16,
    /// `sin_port` / `sin6_port`, network byte order.
    pub port: u16,
    pub data: [u8; 24],
}

impl SOCKADDR_INET {
    /// The address with port, flow and scope 0.
    pub fn from_ip(ip: IpAddr) -> Self {
        let mut s = SOCKADDR_INET {
            si_family: AF_UNSPEC,
            port: 0,
            data: [0; 24],
        };
        match ip {
            IpAddr::V4(v4) => {
                s.si_family = AF_INET;
                for (d, b) in s.data.iter_mut().zip(v4.octets()) {
                    *d = b;
                }
            }
            IpAddr::V6(v6) => {
                s.si_family = AF_INET6;
                for (d, b) in s.data.iter_mut().skip(4).zip(v6.octets()) {
                    *d = b;
                }
            }
        }
        s
    }

    /// The IP address, or None for a family other than IPv4/IPv6.
    pub fn ip(&self) -> Option<IpAddr> {
        match self.si_family {
            AF_INET => {
                let a: [u8; 4] = self.data.get(0..4)?.try_into().ok()?;
                Some(IpAddr::V4(Ipv4Addr::from(a)))
            }
            AF_INET6 => {
                let a: [u8; 16] = self.data.get(4..20)?.try_into().ok()?;
                Some(IpAddr::V6(Ipv6Addr::from(a)))
            }
            _ => None,
        }
    }
}

/// `MIB_IPNET_ROW2` (netioapi.h). `IF_MAX_PHYS_ADDRESS_LENGTH` = 32.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MIB_IPNET_ROW2 {
    pub Address: SOCKADDR_INET,
    pub InterfaceIndex: u32,
    /// `NET_LUID` (ifdef.h): a ULONG64 union.
    pub InterfaceLuid: u64,
    pub PhysicalAddress: [u8; 32],
    pub PhysicalAddressLength: u32,
    /// `NL_NEIGHBOR_STATE`.
    pub State: i32,
    /// `IsRouter:1`, `IsUnreachable:1` bit fields of a UCHAR.
    pub Flags: u8,
    /// `ReachabilityTime` union of two ULONGs.
    pub ReachabilityTime: u32,
}

/// `MIB_UNICASTIPADDRESS_ROW` (netioapi.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MIB_UNICASTIPADDRESS_ROW {
    pub Address: SOCKADDR_INET,
    pub InterfaceLuid: u64,
    pub InterfaceIndex: u32,
    /// `NL_PREFIX_ORIGIN`.
    pub PrefixOrigin: i32,
    /// `NL_SUFFIX_ORIGIN`.
    pub SuffixOrigin: i32,
    pub ValidLifetime: u32,
    pub PreferredLifetime: u32,
    pub OnLinkPrefixLength: u8,
    pub SkipAsSource: u8,
    /// `NL_DAD_STATE`.
    pub DadState: i32,
    /// `SCOPE_ID` (a ULONG union).
    pub ScopeId: u32,
    /// `LARGE_INTEGER`.
    pub CreationTimeStamp: i64,
}

/// `MIB_UNICASTIPADDRESS_TABLE` (netioapi.h): `NumEntries` rows follow the count (`Table`
/// is declared `[ANY_SIZE]`).
#[repr(C)]
pub struct MIB_UNICASTIPADDRESS_TABLE {
    pub NumEntries: u32,
    pub Table: [MIB_UNICASTIPADDRESS_ROW; 1],
}

/// `VOID (*PUNICAST_IPADDRESS_CHANGE_CALLBACK)(PVOID CallerContext,
/// PMIB_UNICASTIPADDRESS_ROW Row, MIB_NOTIFICATION_TYPE NotificationType)` (netioapi.h):
/// PASSIVE_LEVEL; `Row` is NULL for the initial notification.
pub type PUNICAST_IPADDRESS_CHANGE_CALLBACK = unsafe extern "system" fn(
    CallerContext: *mut c_void,
    Row: *mut MIB_UNICASTIPADDRESS_ROW,
    NotificationType: i32,
);

const _: () = {
    assert!(size_of::<SOCKADDR_INET>() == 28 && align_of::<SOCKADDR_INET>() == 4);
    assert!(size_of::<MIB_IPNET_ROW2>() == 88);
    assert!(offset_of!(MIB_IPNET_ROW2, InterfaceIndex) == 28);
    assert!(offset_of!(MIB_IPNET_ROW2, InterfaceLuid) == 32);
    assert!(offset_of!(MIB_IPNET_ROW2, PhysicalAddress) == 40);
    assert!(offset_of!(MIB_IPNET_ROW2, PhysicalAddressLength) == 72);
    assert!(offset_of!(MIB_IPNET_ROW2, State) == 76);
    assert!(offset_of!(MIB_IPNET_ROW2, Flags) == 80);
    assert!(offset_of!(MIB_IPNET_ROW2, ReachabilityTime) == 84);
    assert!(size_of::<MIB_UNICASTIPADDRESS_ROW>() == 80);
    assert!(offset_of!(MIB_UNICASTIPADDRESS_ROW, InterfaceLuid) == 32);
    assert!(offset_of!(MIB_UNICASTIPADDRESS_ROW, InterfaceIndex) == 40);
    assert!(offset_of!(MIB_UNICASTIPADDRESS_ROW, OnLinkPrefixLength) == 60);
    assert!(offset_of!(MIB_UNICASTIPADDRESS_ROW, DadState) == 64);
    assert!(offset_of!(MIB_UNICASTIPADDRESS_ROW, CreationTimeStamp) == 72);
    assert!(offset_of!(MIB_UNICASTIPADDRESS_TABLE, Table) == 8);
};

/// Addresses the cache holds at most (an RDMA interface has a handful: an IPv4, a
/// link-local and a few global IPv6).
pub const MAX_ADDRESSES: usize = 16;
/// Resolutions outstanding at most; one more fails [`ResolveError::NoResources`].
pub const MAX_PENDING: usize = 32;

struct State {
    addresses: KVec<IpAddr>,
    events: Option<Arc<dyn AddressEvents>>,
    /// Set by `stop`: a later request fails at once (no work item after Halt).
    stopped: bool,
}

/// The seam over netio.sys for one adapter; see the module docs. Created at InitializeEx
/// ([`WindowsResolver::start`]) and stopped at Halt ([`WindowsResolver::stop`]).
pub struct WindowsResolver {
    platform: Arc<dyn Platform>,
    luid: u64,
    if_index: u32,
    work_item: *mut c_void,
    state: SpinLock<State>,
    pending: Arc<PendingResolutions>,
    /// The `NotifyUnicastIpAddressChange` handle; null once cancelled.
    notification: AtomicPtr<c_void>,
    /// Set while a run is queued and has not started: the item is never queued twice.
    queued: AtomicBool,
    /// Runs queued or running.
    outstanding: AtomicU32,
    /// The resolver's own `Arc`, which each queued run holds (set once by `start`).
    this: SpinLock<Weak<WindowsResolver>>,
}

// SAFETY: the work-item and notification handles are the kernel's, usable from any thread
// at the IRQLs their routines allow; the rest is Sync.
unsafe impl Send for WindowsResolver {}
// SAFETY: as above.
unsafe impl Sync for WindowsResolver {}

impl WindowsResolver {
    /// Allocates the work item and the timer, registers for address changes and lists the
    /// adapter's addresses (`luid`, `if_index`: NDIS_MINIPORT_INIT_PARAMETERS' NetLuid and
    /// IfIndex). PASSIVE_LEVEL.
    ///
    /// # Errors
    /// [`ResolveError::NoResources`] when an allocation or the registration fails.
    ///
    /// # Safety
    /// `adapter_handle` must be the MiniportAdapterHandle of an adapter between its
    /// InitializeEx and its Halt, which calls [`WindowsResolver::stop`].
    pub unsafe fn start(
        platform: Arc<dyn Platform>,
        adapter_handle: *mut c_void,
        luid: u64,
        if_index: u32,
    ) -> Result<Arc<WindowsResolver>, ResolveError> {
        let nr = |_| ResolveError::NoResources;
        let pending = PendingResolutions::new(platform.clone(), MAX_PENDING)?;
        let state = State {
            addresses: KVec::try_with_capacity(MAX_ADDRESSES).map_err(nr)?,
            events: None,
            stopped: false,
        };
        // SAFETY: an adapter handle (the function's contract); PASSIVE_LEVEL.
        let work_item = unsafe { NdisAllocateIoWorkItem(adapter_handle) };
        if work_item.is_null() {
            return Err(ResolveError::NoResources);
        }
        // From here on Drop frees the work item (and cancels the notification).
        let r = try_arc(WindowsResolver {
            platform,
            luid,
            if_index,
            work_item,
            state: SpinLock::new(state),
            pending,
            notification: AtomicPtr::new(null_mut()),
            queued: AtomicBool::new(false),
            outstanding: AtomicU32::new(0),
            this: SpinLock::new(Weak::new()),
        });
        let r = match r {
            Ok(r) => r,
            Err(_) => {
                // SAFETY: just allocated, never queued.
                unsafe { NdisFreeIoWorkItem(work_item) };
                return Err(ResolveError::NoResources);
            }
        };
        *r.this.lock() = Arc::downgrade(&r);

        let mut handle: *mut c_void = null_mut();
        // Registered before the listing: an address added in between is reported twice at
        // worst (the cache ignores a duplicate), never missed. (One removed after the table
        // is taken but before it is read here is re-added: a stale entry until its next
        // change, accepted for a window of one call at InitializeEx.)
        // SAFETY: the callback matches PUNICAST_IPADDRESS_CHANGE_CALLBACK; its context is
        // the resolver, which cancels the registration (waiting out a running callback)
        // before it is freed; PASSIVE_LEVEL.
        let status = unsafe {
            NotifyUnicastIpAddressChange(
                AF_UNSPEC,
                address_changed,
                Arc::as_ptr(&r).cast_mut().cast(),
                0,
                &mut handle,
            )
        };
        if status != STATUS_SUCCESS {
            return Err(ResolveError::NoResources);
        }
        r.notification.store(handle, Ordering::Release);
        r.list_addresses()?;
        Ok(r)
    }

    /// The interface index NDIS gave the adapter.
    pub fn if_index(&self) -> u32 {
        self.if_index
    }

    /// Fills the cache from `GetUnicastIpAddressTable`. PASSIVE_LEVEL.
    fn list_addresses(&self) -> Result<(), ResolveError> {
        let mut table: *mut MIB_UNICASTIPADDRESS_TABLE = null_mut();
        // SAFETY: a valid out-pointer; PASSIVE_LEVEL.
        let status = unsafe { GetUnicastIpAddressTable(AF_UNSPEC, &mut table) };
        if status != STATUS_SUCCESS || table.is_null() {
            return Err(ResolveError::NoResources);
        }
        // SAFETY: netio returned a table of `NumEntries` rows, valid until FreeMibTable.
        let count = unsafe { (*table).NumEntries } as usize;
        // SAFETY: as above; the rows start at `Table`.
        let first = unsafe { (&raw const (*table).Table).cast::<MIB_UNICASTIPADDRESS_ROW>() };
        // SAFETY: `count` rows are there (netio's table).
        let rows = unsafe { core::slice::from_raw_parts(first, count) };
        for row in rows.iter().filter(|row| row.InterfaceLuid == self.luid) {
            if let Some(ip) = row.Address.ip() {
                self.add_address(ip);
            }
        }
        // SAFETY: the table GetUnicastIpAddressTable returned, freed once; `rows` is unused
        // from here on.
        unsafe { FreeMibTable(table.cast()) };
        Ok(())
    }

    fn add_address(&self, ip: IpAddr) {
        let events = {
            let mut s = self.state.lock();
            if s.addresses.contains(&ip) {
                return;
            }
            if s.addresses.push_within_capacity(ip).is_err() {
                drop(s);
                // SAFETY: a NUL-terminated format without arguments; PASSIVE_LEVEL.
                unsafe {
                    DbgPrintEx(
                        77,
                        0,
                        c"pvrdma: too many interface addresses, one ignored\n"
                            .as_ptr()
                            .cast(),
                    )
                };
                return;
            }
            s.events.clone()
        };
        if let Some(e) = events {
            e.added(ip);
        }
    }

    fn remove_address(&self, ip: IpAddr) {
        let events = {
            let mut s = self.state.lock();
            let Some(i) = s.addresses.iter().position(|a| *a == ip) else {
                return;
            };
            let last = s.addresses.len().saturating_sub(1);
            s.addresses.swap(i, last);
            s.addresses.pop();
            s.events.clone()
        };
        if let Some(e) = events {
            e.removed(ip);
        }
    }

    /// Stops the resolver at Halt: no address callback runs after this returns, every
    /// outstanding resolution has completed (failed [`ResolveError::Unreachable`] if netio
    /// did not answer) and the work item is freed once idle. PASSIVE_LEVEL.
    pub fn stop(&self) {
        self.cancel_notification();
        self.pending.stop_timer();
        let events = {
            let mut s = self.state.lock();
            s.stopped = true;
            s.events.take()
        };
        drop(events);
        self.pending.fail_all();
        // A run blocked in ResolveIpNetEntry2 returns within the stack's own solicitation
        // time; its answer then finds no slot.
        let idle = || self.outstanding.load(Ordering::Acquire) == 0;
        if !self
            .platform
            .wait_until(&idle, DEFAULT_RESOLVE_BOUND_NS.saturating_mul(2))
        {
            // SAFETY: a NUL-terminated format without arguments; PASSIVE_LEVEL.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: address resolution still running at halt\n"
                        .as_ptr()
                        .cast(),
                )
            };
        }
    }

    fn cancel_notification(&self) {
        let handle = self.notification.swap(null_mut(), Ordering::AcqRel);
        if !handle.is_null() {
            // SAFETY: the handle NotifyUnicastIpAddressChange returned, cancelled once (the
            // swap); PASSIVE_LEVEL, never from the callback. It returns once no callback runs.
            unsafe { CancelMibChangeNotify2(handle) };
        }
    }

    /// Queues a run unless one is queued and has not started. IRQL <= DISPATCH_LEVEL.
    fn kick(&self) {
        let Some(this) = self.this.lock().upgrade() else {
            return;
        };
        // Pairs with the routine's fence: either it sees the new slot, or this sees its
        // cleared flag.
        fence(Ordering::SeqCst);
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        // The run owns this count of the resolver; `resolve_work_item` takes it back.
        let context = Arc::into_raw(this).cast_mut().cast::<c_void>();
        // SAFETY: the item is allocated and not queued (`queued` was clear); the routine
        // matches NDIS_IO_WORKITEM_ROUTINE; the context stays valid until the routine
        // releases it.
        unsafe { NdisQueueIoWorkItem(self.work_item, resolve_work_item, context) };
    }

    /// The work item's body (PASSIVE_LEVEL): answers every request not yet started.
    fn run_pending(&self) {
        while let Some((local, remote, generation)) = self.pending.start_next() {
            let answer = self.lookup(local, remote);
            if let Some(p) = self.pending.take(|p| p.generation == generation) {
                (p.done)(answer);
            }
        }
    }

    /// The neighbour's MAC: the cached entry if it is usable, else a blocking resolution.
    /// PASSIVE_LEVEL.
    fn lookup(&self, local: IpAddr, remote: IpAddr) -> Result<Mac, ResolveError> {
        let mut row = MIB_IPNET_ROW2 {
            Address: SOCKADDR_INET::from_ip(remote),
            InterfaceIndex: self.if_index,
            InterfaceLuid: self.luid,
            PhysicalAddress: [0; 32],
            PhysicalAddressLength: 0,
            State: NLNS_UNREACHABLE,
            Flags: 0,
            ReachabilityTime: 0,
        };
        // SAFETY: a row keyed by address and LUID, valid for the call; PASSIVE_LEVEL.
        let status = unsafe { GetIpNetEntry2(&mut row) };
        if status == STATUS_SUCCESS
            && let Some(mac) = usable_mac(&row)
        {
            return Ok(mac);
        }
        let source = SOCKADDR_INET::from_ip(local);
        // SAFETY: the row and the source address are valid for the call; PASSIVE_LEVEL in a
        // work item (it blocks while the stack solicits the neighbour).
        let status = unsafe { ResolveIpNetEntry2(&mut row, &source) };
        match status {
            STATUS_SUCCESS => usable_mac(&row).ok_or(ResolveError::Unreachable),
            STATUS_INSUFFICIENT_RESOURCES => Err(ResolveError::NoResources),
            _ => Err(ResolveError::Unreachable),
        }
    }
}

impl AddressResolver for WindowsResolver {
    fn resolve(&self, local: IpAddr, remote: IpAddr, done: ResolveDone) {
        let refused = {
            let s = self.state.lock();
            if s.stopped {
                Some((done, ResolveError::Unreachable))
            } else if !s.addresses.contains(&local) {
                Some((done, ResolveError::NotLocal))
            } else {
                // Parked under the state's lock: `stop` either is seen above or fails this
                // resolution after setting `stopped` (no work item is queued after Halt).
                self.pending
                    .park(local, remote, DEFAULT_RESOLVE_BOUND_NS, done)
                    .err()
                    .map(|done| (done, ResolveError::NoResources))
            }
        };
        match refused {
            Some((done, e)) => done(Err(e)),
            None => {
                self.pending.arm();
                self.kick();
            }
        }
    }

    fn bound_ns(&self) -> u64 {
        DEFAULT_RESOLVE_BOUND_NS
    }

    fn unicast_addresses(&self, out: &mut [IpAddr]) -> usize {
        let s = self.state.lock();
        for (o, a) in out.iter_mut().zip(s.addresses.iter()) {
            *o = *a;
        }
        s.addresses.len()
    }

    fn watch_addresses(&self, events: Option<Arc<dyn AddressEvents>>) {
        let old = core::mem::replace(&mut self.state.lock().events, events);
        drop(old);
    }
}

/// The MAC of a neighbour entry the stack has resolved (any state but unreachable or
/// incomplete), if it is an Ethernet one.
fn usable_mac(row: &MIB_IPNET_ROW2) -> Option<Mac> {
    if row.State == NLNS_UNREACHABLE || row.State == NLNS_INCOMPLETE {
        return None;
    }
    if row.PhysicalAddressLength != 6 {
        return None;
    }
    row.PhysicalAddress.get(0..6)?.try_into().ok()
}

/// NDIS_IO_WORKITEM_ROUTINE (PASSIVE_LEVEL).
unsafe extern "system" fn resolve_work_item(context: *mut c_void, _item: *mut c_void) {
    // SAFETY: `kick` queued the item with a count of the resolver as its context.
    let r = unsafe { Arc::from_raw(context.cast_const().cast::<WindowsResolver>()) };
    // Cleared before draining: a request parked after this point queues a new run, one
    // before it is answered here.
    r.queued.store(false, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    r.run_pending();
    r.outstanding.fetch_sub(1, Ordering::AcqRel);
}

/// PUNICAST_IPADDRESS_CHANGE_CALLBACK (PASSIVE_LEVEL).
unsafe extern "system" fn address_changed(
    context: *mut c_void,
    row: *mut MIB_UNICASTIPADDRESS_ROW,
    kind: i32,
) {
    // SAFETY: the context is the resolver, alive until it cancels the registration, which
    // waits for this callback to return.
    let Some(r) = (unsafe { context.cast_const().cast::<WindowsResolver>().as_ref() }) else {
        return;
    };
    // SAFETY: netio passes a valid row, or NULL (initial notification).
    let Some(row) = (unsafe { row.as_ref() }) else {
        return;
    };
    if row.InterfaceLuid != r.luid {
        return;
    }
    let Some(ip) = row.Address.ip() else {
        return;
    };
    match kind {
        MIB_ADD_INSTANCE => r.add_address(ip),
        MIB_DELETE_INSTANCE => r.remove_address(ip),
        // A parameter change (lifetimes, DAD state) keeps the address.
        _ => {}
    }
}

impl Drop for WindowsResolver {
    /// The last reference is gone, so no work-item run is queued or running (each holds one):
    /// the item can be freed. PASSIVE_LEVEL (the owner calls `stop` at Halt first).
    fn drop(&mut self) {
        self.cancel_notification();
        self.pending.stop_timer();
        self.pending.fail_all();
        // SAFETY: allocated in `start`; no run is queued or running (see above).
        unsafe { NdisFreeIoWorkItem(self.work_item) };
    }
}
