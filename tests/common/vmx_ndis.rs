//! The host NDIS harness of the vmxnet3 Ethernet miniport (`ndis::ethernet`, issue 24 items 2
//! and 3): each host is a vNIC of a simulated fabric whose "NDIS" is this file. It builds the
//! NET_BUFFER_LISTs a protocol sends (real NBL / NET_BUFFER / MDL layouts over memory the
//! model reaches, frames cut into several MDLs), hands out the receive NBLs the miniport
//! asks for, records every indication (send completions, receives, link states, pause
//! completions, reset requests) and returns received NBLs the way NDIS does: later, from
//! another call.
//!
//! Over it each host runs smoltcp ([`Stack`]), a real IPv4/IPv6 stack, whose frames go
//! through MiniportSendNetBufferLists and come from the receive indications: ARP, neighbour
//! discovery, ICMP echo and UDP move through the driver and the device model. The host's
//! address-resolution seam (`os::net::Neighbours`, what the connection engine resolves with)
//! is fed by what the stack resolved: an IP frame smoltcp sends to a unicast MAC names a
//! neighbour its cache holds ([`Stack`]'s snoop); [`StackResolver`] asks the stack to
//! resolve a destination it does not know, as `ResolveIpNetEntry2` asks Windows' TCP/IP.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::ptr::{NonNull, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pvrdma_host::{HostDevice, HostPlatform};
use pvrdma_ndk::ndis::NET_BUFFER_LIST;
use pvrdma_ndk::ndis::ethernet::abi::*;
use pvrdma_ndk::ndis::ethernet::{EthConfig, EthMiniport, EthSink, RxNblPool};
use pvrdma_ndk::ndis::pair::NdkEvents;
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::os::net::{AddressResolver, Neighbours, ResolveDone};
use pvrdma_ndk::os::{DmaAllocator, NicPlatform, Platform, RegisterIo};

use super::memory::BuiltMdl;
use super::vmx::{VmxCluster, VmxClusterConfig};
use super::{Mode, SimDma};

/// Where the harness says the BARs are (translated resources).
pub fn resource_list() -> Vec<CM_PARTIAL_RESOURCE_DESCRIPTOR> {
    vec![
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFE00_0000, 0x1000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFE01_0000, 0x1000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFE02_0000, 0x2000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x70),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x71),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x72),
    ]
}

/// A receive NBL and its NET_BUFFER, in one allocation (NdisAllocateNetBufferAndNetBufferList).
#[repr(C)]
struct RxBlock {
    nbl: NET_BUFFER_LIST,
    nb: NET_BUFFER,
    /// The NET_BUFFER's MDL (never moved while the block lives: pointers into it are lent).
    mdl: Option<BuiltMdl>,
}

// SAFETY: the NBL and NET_BUFFER hold raw pointers into this same block and its MDL; the
// harness hands them between threads as NDIS does, one owner at a time.
unsafe impl Send for RxBlock {}

/// A heap block the harness owns through a raw pointer, so that the pointers the miniport
/// holds into it stay valid while the owner moves (a `Box` moved is a new unique borrow,
/// under which pointers taken before the move are no longer valid: Stacked Borrows).
struct Owned<T>(NonNull<T>);

impl<T> Owned<T> {
    fn new(v: T) -> Owned<T> {
        Owned(NonNull::from(Box::leak(Box::new(v))))
    }
    fn ptr(&self) -> *mut T {
        self.0.as_ptr()
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: leaked by `new`, freed once here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

// SAFETY: as the `T` it owns; one owner at a time.
unsafe impl<T: Send> Send for Owned<T> {}

/// "NDIS"'s receive NBL pool.
#[derive(Default)]
pub struct HostPool {
    live: Mutex<HashMap<usize, Owned<RxBlock>>>,
    pub allocs: AtomicU64,
    pub frees: AtomicU64,
}

impl HostPool {
    pub fn live(&self) -> usize {
        self.live.lock().unwrap().len()
    }
}

fn zeroed_nbl() -> NET_BUFFER_LIST {
    // SAFETY: NET_BUFFER_LIST is plain data (pointers and integers); all zeroes is valid.
    unsafe { std::mem::zeroed() }
}

fn zeroed_nb() -> NET_BUFFER {
    // SAFETY: as above.
    unsafe { std::mem::zeroed() }
}

impl RxNblPool for HostPool {
    fn alloc(&self, va: NonNull<u8>, logical: u64, len: u32) -> Option<NonNull<NET_BUFFER_LIST>> {
        let v = va.as_ptr() as u64;
        let off = (v & 0xFFF) as u32;
        let pages = (off as usize + len as usize).div_ceil(4096);
        let pfns: Vec<u64> = (0..pages as u64)
            .map(|i| ((logical & !0xFFF) >> 12) + i)
            .collect();
        let mut mdl = BuiltMdl::new(v & !0xFFF, off, len, &pfns);
        mdl.set_system_va(va.as_ptr().cast());
        let b = Owned::new(RxBlock {
            nbl: zeroed_nbl(),
            nb: zeroed_nb(),
            mdl: Some(mdl),
        });
        // SAFETY: a fresh block only this function reaches yet; the pointers lent from it
        // below stay valid while it lives (it is never moved: `Owned`).
        let blk = unsafe { &mut *b.ptr() };
        let mdl = blk.mdl.as_ref().map_or(std::ptr::null(), BuiltMdl::as_ptr);
        blk.nb.MdlChain = mdl.cast_mut();
        blk.nb.CurrentMdl = mdl.cast_mut();
        blk.nb.DataLength = len as usize;
        blk.nbl.FirstNetBuffer = (&raw mut blk.nb).cast();
        let p = NonNull::from(&mut blk.nbl);
        self.live.lock().unwrap().insert(p.as_ptr() as usize, b);
        self.allocs.fetch_add(1, Ordering::SeqCst);
        Some(p)
    }

    fn free(&self, nbl: NonNull<NET_BUFFER_LIST>) {
        let gone = self.live.lock().unwrap().remove(&(nbl.as_ptr() as usize));
        assert!(gone.is_some(), "freed an NBL the pool did not allocate");
        self.frees.fetch_add(1, Ordering::SeqCst);
    }
}

/// A sent NBL: its NET_BUFFERs, their MDLs, and the Tx memory slots the frames are in.
struct TxRec {
    nbl: Owned<NET_BUFFER_LIST>,
    // Boxed: the driver holds their addresses (tokens), which a Vec's growth would move.
    #[allow(clippy::vec_box)]
    nbs: Vec<Box<NET_BUFFER>>,
    mdls: Vec<BuiltMdl>,
    slots: Vec<usize>,
    frames: usize,
}

// SAFETY: as `RxBlock`: owned memory a single owner at a time reaches through its pointers.
unsafe impl Send for TxRec {}

/// Tx memory: slots of two pages each, in the host's DMA space.
pub struct TxMemory {
    pub buf: pvrdma_sim::DmaBuffer,
    free: Mutex<Vec<usize>>,
}

pub const TX_SLOTS: usize = 128;

impl TxMemory {
    fn new(space: &Arc<pvrdma_sim::DmaSpace>) -> Self {
        TxMemory {
            buf: pvrdma_sim::DmaBuffer::new(space, TX_SLOTS * 2),
            free: Mutex::new((0..TX_SLOTS).rev().collect()),
        }
    }
}

/// What "NDIS" was told by one adapter.
#[derive(Default)]
pub struct Seen {
    /// Frames received, in order (copied from the MDLs' system addresses).
    pub frames: Vec<Vec<u8>>,
    /// Receive indications: (NBL count, flags).
    pub indications: Vec<(u32, u32)>,
    /// Send completions: (NBL id, status, frames in it).
    pub completed: Vec<(u64, NDIS_STATUS, usize)>,
    /// The flags of each NBL's completion: (NBL id, NdisMSendNetBufferListsComplete flags).
    pub completion_flags: Vec<(u64, u32)>,
    pub links: Vec<LinkState>,
}

/// One adapter's "NDIS": the [`EthSink`].
pub struct HostNdis {
    pub seen: Mutex<Seen>,
    /// Frames for the IP stack, not yet taken.
    pub inbox: Mutex<VecDeque<Vec<u8>>>,
    /// NBLs indicated without NDIS_RECEIVE_FLAGS_RESOURCES, not yet returned.
    held: Mutex<Vec<usize>>,
    /// Keep received NBLs until [`EthHost::return_held`] (else returned at the next pump).
    pub hold: AtomicBool,
    tx: Mutex<HashMap<usize, (u64, TxRec)>>,
    tx_mem: TxMemory,
    next_id: AtomicU64,
    pub pause_completes: AtomicU32,
    pub resets_needed: AtomicU32,
    /// Indications made while the calling thread held a driver spin lock (must stay 0).
    pub under_lock: AtomicU64,
    /// NDK state changes the adapter announced (a paired slot's `NicNdk`).
    pub ndk_changes: AtomicU32,
    /// Neighbours the stack resolved (each unicast IP frame it sent names one).
    pub learned: Mutex<HashSet<IpAddr>>,
}

impl HostNdis {
    /// The "NDIS" of an adapter whose Tx memory is in `space` (the vNIC's host memory).
    pub fn new(space: &Arc<pvrdma_sim::DmaSpace>) -> Arc<HostNdis> {
        Arc::new(HostNdis {
            seen: Mutex::default(),
            inbox: Mutex::default(),
            held: Mutex::default(),
            hold: AtomicBool::new(false),
            tx: Mutex::default(),
            tx_mem: TxMemory::new(space),
            next_id: AtomicU64::new(1),
            pause_completes: AtomicU32::new(0),
            resets_needed: AtomicU32::new(0),
            under_lock: AtomicU64::new(0),
            ndk_changes: AtomicU32::new(0),
            learned: Mutex::default(),
        })
    }

    fn check_locks(&self) {
        if pvrdma_host::held_spin_locks() != 0 {
            self.under_lock.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    pub fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    pub fn tx_outstanding(&self) -> usize {
        self.tx.lock().unwrap().len()
    }
}

/// The bytes a receive NET_BUFFER describes, read through its MDLs' system addresses.
fn nb_bytes(nb: &NET_BUFFER) -> Vec<u8> {
    let mut out = Vec::with_capacity(nb.DataLength);
    let mut mdl = nb.CurrentMdl;
    let mut off = nb.CurrentMdlOffset as usize;
    while out.len() < nb.DataLength && !mdl.is_null() {
        // SAFETY: MDLs the pool built, alive while the NBL is.
        let m = unsafe { &*mdl };
        let take = (m.ByteCount as usize - off).min(nb.DataLength - out.len());
        // SAFETY: inside the buffer the MDL describes (`off + take` ≤ ByteCount).
        let at = unsafe { m.MappedSystemVa.cast::<u8>().add(off) };
        // SAFETY: the system address of the buffer the MDL describes (the driver's receive
        // buffer, which the device finished writing before the indication).
        let s = unsafe { std::slice::from_raw_parts(at, take) };
        out.extend_from_slice(s);
        off = 0;
        mdl = m.Next;
    }
    out
}

impl EthSink for HostNdis {
    fn send_complete(&self, nbls: NonNull<NET_BUFFER_LIST>, flags: u32) {
        self.check_locks();
        let mut cur = nbls.as_ptr();
        let mut done = Vec::new();
        while !cur.is_null() {
            // SAFETY: an NBL this harness built and sent; completed to it now.
            let nbl = unsafe { &*cur };
            let (next, status) = (nbl.Next, nbl.Status);
            let rec = self.tx.lock().unwrap().remove(&(cur as usize));
            let (id, rec) = rec.expect("completion of an NBL not sent, or completed twice");
            done.push((id, status, rec.frames));
            self.tx_mem
                .free
                .lock()
                .unwrap()
                .extend(rec.slots.iter().copied());
            drop(rec);
            cur = next;
        }
        let mut seen = self.seen.lock().unwrap();
        seen.completion_flags
            .extend(done.iter().map(|&(id, _, _)| (id, flags)));
        seen.completed.extend(done);
    }

    fn indicate_receive(&self, nbls: NonNull<NET_BUFFER_LIST>, count: u32, flags: u32) {
        self.check_locks();
        let mut cur = nbls.as_ptr();
        let mut n = 0;
        let mut frames = Vec::new();
        let mut keep = Vec::new();
        while !cur.is_null() {
            // SAFETY: an indicated NBL with its NET_BUFFER, NDIS's until returned.
            let nbl = unsafe { &*cur };
            // SAFETY: as above.
            let nb = unsafe { &*nbl.FirstNetBuffer.cast::<NET_BUFFER>() };
            frames.push(nb_bytes(nb));
            if flags & NDIS_RECEIVE_FLAGS_RESOURCES == 0 {
                keep.push(cur as usize);
            }
            n += 1;
            cur = nbl.Next;
        }
        assert_eq!(n, count, "NumberOfNetBufferLists disagrees with the chain");
        assert!(flags & NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL != 0);
        self.inbox.lock().unwrap().extend(frames.iter().cloned());
        let mut s = self.seen.lock().unwrap();
        s.frames.extend(frames);
        s.indications.push((count, flags));
        drop(s);
        self.held.lock().unwrap().extend(keep);
    }

    fn link_state(&self, state: &LinkState) {
        self.check_locks();
        self.seen.lock().unwrap().links.push(*state);
    }

    fn pause_complete(&self) {
        self.check_locks();
        self.pause_completes.fetch_add(1, Ordering::SeqCst);
    }

    fn reset_needed(&self) {
        self.check_locks();
        self.resets_needed.fetch_add(1, Ordering::SeqCst);
    }
}

impl NdkEvents for HostNdis {
    fn ndk_state_changed(&self) {
        self.ndk_changes.fetch_add(1, Ordering::SeqCst);
    }
}

/// A dummy register file for the resolver's platform (it needs timers and a clock only).
pub struct NoBar;
impl RegisterIo for NoBar {
    fn read32(&self, _off: u32) -> u32 {
        0
    }
    fn write32(&self, _off: u32, _val: u32) {}
}

/// One simulated machine: its vmxnet3 adapter through the NDIS entry points.
pub struct EthHost {
    pub vnic: usize,
    pub mp: Option<Arc<EthMiniport>>,
    pub ndis: Arc<HostNdis>,
    pub pool: Arc<HostPool>,
    pub mac: [u8; 6],
    pub ipv4: std::net::Ipv4Addr,
    pub ipv6: std::net::Ipv6Addr,
    /// The address-resolution seam of the host (fed by its stack).
    pub neighbours: Arc<Neighbours>,
    /// The platform the resolver (and a paired slot's NDK surface) runs on.
    pub resolver_platform: Arc<HostPlatform>,
}

impl EthHost {
    pub fn mp(&self) -> &EthMiniport {
        self.mp.as_ref().expect("halted")
    }

    /// A set OID; returns the status.
    pub fn set(&self, oid: NDIS_OID, buf: &[u8]) -> NDIS_STATUS {
        self.mp().set_oid(oid, buf).status
    }

    /// A query OID into a buffer of `len` bytes.
    pub fn query(&self, oid: NDIS_OID, len: usize) -> (OidResult, Vec<u8>) {
        let mut b = vec![0u8; len];
        let r = self.mp().query_oid(oid, &mut b);
        b.truncate(r.bytes_done as usize);
        (r, b)
    }

    pub fn query_u64(&self, oid: NDIS_OID) -> u64 {
        let (r, b) = self.query(oid, 8);
        assert_eq!(r.status, NDIS_STATUS_SUCCESS, "query {oid:#x}");
        u64::from_le_bytes(b.try_into().unwrap())
    }

    /// The interface's addresses, as its resolver holds them.
    pub fn addresses(&self) -> Vec<IpAddr> {
        let mut b = [IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED); 32];
        let n = self.neighbours.unicast_addresses(&mut b);
        b[..n.min(b.len())].to_vec()
    }

    /// What tcpip.sys does at bind: the packet filter.
    pub fn set_filter(&self, f: u32) -> NDIS_STATUS {
        self.set(OID_GEN_CURRENT_PACKET_FILTER, &f.to_le_bytes())
    }

    /// OID_802_3_MULTICAST_LIST.
    pub fn set_multicast(&self, macs: &[[u8; 6]]) -> NDIS_STATUS {
        let b: Vec<u8> = macs.iter().flatten().copied().collect();
        self.set(OID_802_3_MULTICAST_LIST, &b)
    }

    /// Returns every held receive NBL (MiniportReturnNetBufferLists, one chain).
    pub fn return_held(&self) {
        let held = std::mem::take(&mut *self.ndis.held.lock().unwrap());
        if held.is_empty() {
            return;
        }
        for w in held.windows(2) {
            // SAFETY: NBLs indicated to this "NDIS" and not returned: it may link them.
            unsafe { (*(w[0] as *mut NET_BUFFER_LIST)).Next = w[1] as *mut _ };
        }
        // SAFETY: as above.
        unsafe { (*(*held.last().unwrap() as *mut NET_BUFFER_LIST)).Next = null_mut() };
        // SAFETY: a chain of NBLs the miniport indicated.
        unsafe {
            self.mp()
                .return_net_buffer_lists(held[0] as *mut NET_BUFFER_LIST)
        };
    }

    /// Builds one NBL holding `frames`, each cut into MDLs at `cuts` (offsets into the frame),
    /// and the second piece placed to straddle a page boundary. Returns its record, or None
    /// when the Tx memory is exhausted.
    fn build(
        &self,
        frames: &[&[u8]],
        cuts: &[usize],
    ) -> Option<(NonNull<NET_BUFFER_LIST>, u64, TxRec)> {
        let mem = &self.ndis.tx_mem;
        let mut slots = Vec::new();
        {
            let mut free = mem.free.lock().unwrap();
            if free.len() < frames.len() {
                return None;
            }
            for _ in frames {
                slots.push(free.pop().unwrap());
            }
        }
        let nbl = Owned::new(zeroed_nbl());
        #[allow(clippy::vec_box)]
        let mut nbs: Vec<Box<NET_BUFFER>> = Vec::new();
        let mut mdls: Vec<BuiltMdl> = Vec::new();
        for (f, &slot) in frames.iter().zip(&slots) {
            let base = slot * 8192;
            let mut pieces = Vec::new();
            let mut at = 0;
            for &c in cuts
                .iter()
                .filter(|&&c| c < f.len())
                .chain(std::iter::once(&f.len()))
            {
                if c > at {
                    pieces.push((at, c));
                    at = c;
                }
            }
            let first_mdl = mdls.len();
            for (k, &(a, b)) in pieces.iter().enumerate() {
                // Piece 0 at the slot's start; piece 1 ends 100 bytes into the second page
                // (so it crosses the boundary when it is longer than 100 bytes); others after.
                let off = match k {
                    0 => base,
                    1 => base + 4096 + 100 - (b - a).min(4096 + 100 - 2048),
                    _ => base + 4096 + 200 + (k - 2) * 512,
                };
                mem.buf.write(off, &f[a..b]);
                let first_page = off / 4096;
                let span = ((off % 4096) + (b - a)).div_ceil(4096);
                let pfns: Vec<u64> = (first_page..first_page + span)
                    .map(|p| mem.buf.page_bus(p) >> 12)
                    .collect();
                // A virtual address space of its own: never dereferenced by the driver.
                let va = 0x7000_0000_0000u64 + (first_page as u64) * 4096;
                mdls.push(BuiltMdl::new(
                    va,
                    (off % 4096) as u32,
                    (b - a) as u32,
                    &pfns,
                ));
            }
            for i in first_mdl..mdls.len().saturating_sub(1) {
                let (l, r) = mdls.split_at_mut(i + 1);
                l[i].set_next(Some(&r[0]));
            }
            let mut nb = Box::new(zeroed_nb());
            nb.MdlChain = mdls[first_mdl].as_ptr().cast_mut();
            nb.CurrentMdl = nb.MdlChain;
            nb.DataLength = f.len();
            nbs.push(nb);
        }
        for i in 0..nbs.len().saturating_sub(1) {
            let next: *mut NET_BUFFER = &mut *nbs[i + 1];
            nbs[i].Next = next;
        }
        // SAFETY: a fresh NBL only this function reaches yet.
        unsafe { (*nbl.ptr()).FirstNetBuffer = (&mut *nbs[0] as *mut NET_BUFFER).cast() };
        // SAFETY: a live block.
        let p = unsafe { NonNull::new_unchecked(nbl.ptr()) };
        let id = self.ndis.next_id.fetch_add(1, Ordering::SeqCst);
        Some((
            p,
            id,
            TxRec {
                nbl,
                nbs,
                mdls,
                slots,
                frames: frames.len(),
            },
        ))
    }

    /// MiniportSendNetBufferLists with one NBL of `frames` (cut into MDLs at `cuts`); returns
    /// the NBL's id, or None if the harness's Tx memory is full.
    pub fn send(&self, frames: &[&[u8]], cuts: &[usize]) -> Option<u64> {
        let (p, id, rec) = self.build(frames, cuts)?;
        self.ndis
            .tx
            .lock()
            .unwrap()
            .insert(p.as_ptr() as usize, (id, rec));
        // SAFETY: an NBL chain of one, valid (with its NET_BUFFERs and MDLs) until completed.
        unsafe { self.mp().send_net_buffer_lists(p.as_ptr(), 0) };
        Some(id)
    }

    /// Several NBLs (one frame each) in one MiniportSendNetBufferLists call.
    pub fn send_chain(&self, frames: &[&[u8]]) -> Vec<u64> {
        let mut built = Vec::new();
        for f in frames {
            built.push(self.build(&[f], &[14]).expect("Tx memory"));
        }
        for w in built.windows(2) {
            // SAFETY: NBLs this harness owns until it sends them.
            unsafe { (*w[0].0.as_ptr()).Next = w[1].0.as_ptr() };
        }
        let head = built[0].0;
        let ids: Vec<u64> = built.iter().map(|b| b.1).collect();
        {
            let mut tx = self.ndis.tx.lock().unwrap();
            for (p, id, rec) in built {
                tx.insert(p.as_ptr() as usize, (id, rec));
            }
        }
        // SAFETY: the chain just built.
        unsafe { self.mp().send_net_buffer_lists(head.as_ptr(), 0) };
        ids
    }
}

/// The rig: hosts on one fabric with their miniports initialized and restarted.
pub struct EthRig {
    // Dropped before the cluster, whose serial guard keeps other tests' baselines out.
    pub hosts: Vec<EthHost>,
    pub cluster: VmxCluster,
}

/// Host `i`'s addresses: 198.18.0.(i+1) and 2001:2::(i+1) (the benchmarking ranges).
pub fn addrs(i: usize) -> (std::net::Ipv4Addr, std::net::Ipv6Addr) {
    (
        std::net::Ipv4Addr::new(198, 18, 0, i as u8 + 1),
        std::net::Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, i as u16 + 1),
    )
}

impl EthRig {
    pub fn new(mode: Mode, hosts: u8, cfg: &EthConfig) -> EthRig {
        let mut vc = VmxClusterConfig::new(mode, hosts);
        vc.probe = false;
        let cluster = VmxCluster::new(vc);
        let mut out = Vec::new();
        for i in 0..usize::from(hosts) {
            let h = cluster.host(i);
            let platform: Arc<dyn NicPlatform> = h.platform.clone();
            let pool = Arc::new(HostPool::default());
            let res = parse_resources(&resource_list()).expect("resources");
            let mp = EthMiniport::initialize(platform, &res, cfg, pool.clone())
                .unwrap_or_else(|st| panic!("InitializeEx failed: {st:#x}"));
            let ndis = HostNdis::new(cluster.world.vnic(i).dma());
            let reported = mp.link();
            mp.set_sink(ndis.clone(), reported);
            let dma: Arc<dyn DmaAllocator> = SimDma::new(cluster.world.vnic(i).dma().clone());
            let rp = HostPlatform::new(
                HostDevice {
                    bar1: Arc::new(NoBar),
                    dma,
                    doorbell: None,
                    uar_pfn: 0,
                    pump: None,
                },
                1,
            );
            let p: Arc<dyn Platform> = rp.clone();
            let neighbours = Neighbours::new(p, 16, 2_000_000_000).expect("resolver");
            let (ipv4, ipv6) = addrs(i);
            neighbours.add_address(IpAddr::V4(ipv4)).unwrap();
            neighbours.add_address(IpAddr::V6(ipv6)).unwrap();
            assert_eq!(mp.restart(), NDIS_STATUS_SUCCESS, "MiniportRestart");
            out.push(EthHost {
                vnic: i,
                mac: mp.mac(),
                mp: Some(mp),
                ndis,
                pool,
                ipv4,
                ipv6,
                neighbours,
                resolver_platform: rp,
            });
        }
        let rig = EthRig {
            cluster,
            hosts: out,
        };
        rig.settle();
        rig
    }

    pub fn host(&self, i: usize) -> &EthHost {
        &self.hosts[i]
    }

    /// Runs model, fabric and DPCs to a fixed point, returning received NBLs ("NDIS"
    /// returns them from its own context) unless a host holds them.
    pub fn settle(&self) {
        loop {
            self.cluster.settle();
            let mut returned = false;
            for h in &self.hosts {
                if h.mp.is_some() && !h.ndis.hold.load(Ordering::SeqCst) && h.ndis.held() != 0 {
                    h.return_held();
                    returned = true;
                }
            }
            if !returned {
                return;
            }
        }
    }

    /// Halts every adapter (after pausing it, as NDIS does) and checks that nothing is left:
    /// every sent NBL completed once, every receive NBL returned and freed, no spin lock
    /// held across an indication; then the cluster's own leak checks (DMA regions, pool
    /// accounting, devices inactive).
    pub fn finish(mut self) {
        self.settle();
        for h in &self.hosts {
            if let Some(mp) = &h.mp {
                h.ndis.hold.store(false, Ordering::SeqCst);
                h.return_held();
                let st = mp.pause();
                assert_eq!(st, NDIS_STATUS_SUCCESS, "pause with nothing lent");
                mp.halt();
            }
        }
        self.settle();
        for (i, h) in self.hosts.iter_mut().enumerate() {
            assert_eq!(
                h.ndis.under_lock.load(Ordering::SeqCst),
                0,
                "host {i}: indication under a lock"
            );
            assert_eq!(
                h.ndis.tx_outstanding(),
                0,
                "host {i}: sent NBLs never completed"
            );
            assert_eq!(h.ndis.held(), 0, "host {i}: receive NBLs not returned");
            if let Some(mp) = h.mp.take() {
                assert_eq!(
                    Arc::strong_count(&mp),
                    1,
                    "host {i}: miniport still referenced"
                );
                drop(mp);
            }
            assert_eq!(h.pool.live(), 0, "host {i}: receive NBLs leaked");
            assert_eq!(
                h.pool.allocs.load(Ordering::SeqCst),
                h.pool.frees.load(Ordering::SeqCst)
            );
            h.resolver_platform.executor().shutdown();
        }
        let hosts = std::mem::take(&mut self.hosts);
        drop(hosts);
        let cluster = self.cluster;
        cluster.finish();
    }
}

// ---- the IP stack ---------------------------------------------------------------------------

use smoltcp::iface::{Config as IfConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::socket::{icmp, udp};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpAddress, IpCidr,
};

/// The smoltcp device over a host's miniport: transmit = MiniportSendNetBufferLists (the
/// frame cut into a header MDL and a payload MDL), receive = the frames NDIS was indicated.
pub struct NdisPhy<'a> {
    host: &'a EthHost,
}

pub struct PhyRx(Vec<u8>);
pub struct PhyTx<'a>(&'a EthHost);

impl phy::RxToken for PhyRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for PhyTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut b = vec![0u8; len];
        let r = f(&mut b);
        learn(self.0, &b);
        if self.0.send(&[&b], &[14]).is_none() {
            // The harness's Tx memory is full: the frame is lost, as on a full NIC queue.
            self.0
                .ndis
                .seen
                .lock()
                .unwrap()
                .completed
                .push((0, NDIS_STATUS_RESOURCES, 0));
        }
        r
    }
}

impl phy::Device for NdisPhy<'_> {
    type RxToken<'b>
        = PhyRx
    where
        Self: 'b;
    type TxToken<'b>
        = PhyTx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _t: Instant) -> Option<(PhyRx, PhyTx<'_>)> {
        let f = self.host.ndis.inbox.lock().unwrap().pop_front()?;
        Some((PhyRx(f), PhyTx(self.host)))
    }

    fn transmit(&mut self, _t: Instant) -> Option<PhyTx<'_>> {
        Some(PhyTx(self.host))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514;
        c
    }
}

/// What the stack's own resolution decided, fed to the host's resolver: an IPv4 or IPv6
/// frame smoltcp sends to a unicast MAC carries a destination its neighbour cache resolved.
fn learn(h: &EthHost, frame: &[u8]) {
    if frame.len() < 14 || frame[0] & 1 != 0 {
        return;
    }
    let mac: [u8; 6] = frame[0..6].try_into().unwrap();
    let ip = match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 if frame.len() >= 34 => IpAddr::from(<[u8; 4]>::try_from(&frame[30..34]).unwrap()),
        0x86DD if frame.len() >= 54 => IpAddr::from(<[u8; 16]>::try_from(&frame[38..54]).unwrap()),
        _ => return,
    };
    h.neighbours
        .set_neighbour(ip, mac)
        .expect("resolver table full");
    h.ndis.learned.lock().unwrap().insert(ip);
}

/// A host's smoltcp interface and sockets.
pub struct Stack {
    pub iface: Interface,
    pub sockets: SocketSet<'static>,
    pub icmp: SocketHandle,
    pub udp: SocketHandle,
    /// Destinations [`StackResolver`] was asked for, to be resolved by the stack.
    pub wanted: Arc<Mutex<Vec<IpAddr>>>,
}

pub const ICMP_IDENT: u16 = 0x2424;
pub const UDP_PORT: u16 = 7000;
pub const DISCARD_PORT: u16 = 9;

impl Stack {
    /// The stack of host `i` with its two addresses.
    pub fn new(h: &EthHost) -> Stack {
        Self::with_addresses(h, &[IpAddr::V4(h.ipv4), IpAddr::V6(h.ipv6)])
    }

    /// The stack of host `i` with `addresses` (IPv4 /24, IPv6 /64).
    pub fn with_addresses(h: &EthHost, addresses: &[IpAddr]) -> Stack {
        let mut phy = NdisPhy { host: h };
        let mut cfg = IfConfig::new(EthernetAddress(h.mac).into());
        cfg.random_seed = h.vnic as u64 + 1;
        let mut iface = Interface::new(cfg, &mut phy, Instant::from_millis(0));
        iface.update_ip_addrs(|a| {
            for &ip in addresses {
                let prefix = if ip.is_ipv4() { 24 } else { 64 };
                a.push(IpCidr::new(IpAddress::from(ip), prefix)).unwrap();
            }
        });
        let mut sockets = SocketSet::new(vec![]);
        let mut ic = icmp::Socket::new(
            icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 16], vec![0; 8192]),
            icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 16], vec![0; 8192]),
        );
        ic.bind(icmp::Endpoint::Ident(ICMP_IDENT)).unwrap();
        let icmp = sockets.add(ic);
        let mut us = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 256], vec![0; 256 * 1500]),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 256], vec![0; 256 * 1500]),
        );
        us.bind(UDP_PORT).unwrap();
        let udp = sockets.add(us);
        Stack {
            iface,
            sockets,
            icmp,
            udp,
            wanted: Arc::default(),
        }
    }

    /// The multicast MACs of the addresses this stack answers on (all-nodes and its
    /// solicited-node groups), what tcpip.sys gives OID_802_3_MULTICAST_LIST.
    pub fn multicast_macs(h: &EthHost) -> Vec<[u8; 6]> {
        Self::multicast_macs_of(&[IpAddr::V6(h.ipv6)])
    }

    /// The same for a stack holding `addresses`: all-nodes and the solicited-node group of
    /// each IPv6 address.
    pub fn multicast_macs_of(addresses: &[IpAddr]) -> Vec<[u8; 6]> {
        let mut v = vec![[0x33, 0x33, 0, 0, 0, 1]];
        for a in addresses {
            if let IpAddr::V6(a) = a {
                let s = a.octets();
                v.push([0x33, 0x33, 0xFF, s[13], s[14], s[15]]);
            }
        }
        v
    }

    /// One poll at `now_ms`; the resolutions asked for go out as a datagram to the discard
    /// port (the stack resolves the neighbour before it can send it).
    pub fn poll(&mut self, h: &EthHost, now_ms: i64) {
        let wanted = std::mem::take(&mut *self.wanted.lock().unwrap());
        for ip in wanted {
            let s = self.sockets.get_mut::<udp::Socket>(self.udp);
            s.send_slice(b"?", (IpAddress::from(ip), DISCARD_PORT))
                .unwrap();
        }
        let mut phy = NdisPhy { host: h };
        self.iface
            .poll(Instant::from_millis(now_ms), &mut phy, &mut self.sockets);
    }

    /// Queues an ICMP echo request to `to` with `payload`.
    pub fn ping(&mut self, to: IpAddr, seq: u16, payload: &[u8]) {
        let caps = ChecksumCapabilities::default();
        match to {
            IpAddr::V4(a) => {
                let repr = Icmpv4Repr::EchoRequest {
                    ident: ICMP_IDENT,
                    seq_no: seq,
                    data: payload,
                };
                let s = self.sockets.get_mut::<icmp::Socket>(self.icmp);
                let buf = s.send(repr.buffer_len(), IpAddress::Ipv4(a)).unwrap();
                repr.emit(&mut Icmpv4Packet::new_unchecked(buf), &caps);
            }
            IpAddr::V6(a) => {
                let repr = Icmpv6Repr::EchoRequest {
                    ident: ICMP_IDENT,
                    seq_no: seq,
                    data: payload,
                };
                let src = self.iface.get_source_address_ipv6(&a);
                let s = self.sockets.get_mut::<icmp::Socket>(self.icmp);
                let buf = s.send(repr.buffer_len(), IpAddress::Ipv6(a)).unwrap();
                repr.emit(&src, &a, &mut Icmpv6Packet::new_unchecked(buf), &caps);
            }
        }
    }

    /// Echo replies received: (from, seq, payload).
    pub fn pongs(&mut self) -> Vec<(IpAddr, u16, Vec<u8>)> {
        let caps = ChecksumCapabilities::default();
        let mut out = Vec::new();
        let s = self.sockets.get_mut::<icmp::Socket>(self.icmp);
        while let Ok((p, from)) = s.recv() {
            match from {
                IpAddress::Ipv4(a) => {
                    let pkt = Icmpv4Packet::new_checked(p).unwrap();
                    if let Ok(Icmpv4Repr::EchoReply { seq_no, data, .. }) =
                        Icmpv4Repr::parse(&pkt, &caps)
                    {
                        out.push((IpAddr::V4(a), seq_no, data.to_vec()));
                    }
                }
                IpAddress::Ipv6(a) => {
                    let pkt = Icmpv6Packet::new_checked(p).unwrap();
                    let me = self.iface.get_source_address_ipv6(&a);
                    if let Ok(Icmpv6Repr::EchoReply { seq_no, data, .. }) =
                        Icmpv6Repr::parse(&a, &me, &pkt, &caps)
                    {
                        out.push((IpAddr::V6(a), seq_no, data.to_vec()));
                    }
                }
            }
        }
        out
    }

    /// Datagrams received on [`UDP_PORT`]: (from, bytes).
    pub fn datagrams(&mut self) -> Vec<(IpAddr, u16, Vec<u8>)> {
        let s = self.sockets.get_mut::<udp::Socket>(self.udp);
        let mut out = Vec::new();
        while let Ok((p, meta)) = s.recv() {
            out.push((
                IpAddr::from(meta.endpoint.addr),
                meta.endpoint.port,
                p.to_vec(),
            ));
        }
        out
    }

    /// Sends a datagram from [`UDP_PORT`] to `to`:[`UDP_PORT`].
    pub fn send_udp(&mut self, to: IpAddr, data: &[u8]) {
        let s = self.sockets.get_mut::<udp::Socket>(self.udp);
        s.send_slice(data, (IpAddress::from(to), UDP_PORT)).unwrap();
    }
}

/// The connection engine's resolver over a host whose IP stack resolves: known neighbours
/// answer from the table the stack feeds; an unknown one is handed to the stack (a datagram
/// to it makes it send ARP or a neighbour solicitation) and answered when the stack learns
/// it, or fails after the bound.
pub struct StackResolver {
    pub table: Arc<Neighbours>,
    pub wanted: Arc<Mutex<Vec<IpAddr>>>,
}

impl AddressResolver for StackResolver {
    fn resolve(&self, local: IpAddr, remote: IpAddr, done: ResolveDone) {
        self.wanted.lock().unwrap().push(remote);
        self.table.resolve(local, remote, done);
    }
    fn bound_ns(&self) -> u64 {
        self.table.bound_ns()
    }
    fn unicast_addresses(&self, out: &mut [IpAddr]) -> usize {
        self.table.unicast_addresses(out)
    }
    fn watch_addresses(&self, events: Option<Arc<dyn pvrdma_ndk::os::net::AddressEvents>>) {
        self.table.watch_addresses(events);
    }
}

/// The rig plus one stack per host and a virtual clock for the stacks.
pub struct Net {
    pub rig: EthRig,
    pub stacks: Vec<Stack>,
    pub now_ms: i64,
}

impl Net {
    /// `hosts` hosts, each with the filter tcpip.sys sets (directed, multicast, broadcast)
    /// and its stack's multicast groups.
    pub fn new(mode: Mode, hosts: u8, cfg: &EthConfig) -> Net {
        let rig = EthRig::new(mode, hosts, cfg);
        let mut stacks = Vec::new();
        for h in &rig.hosts {
            assert_eq!(
                h.set_filter(
                    NDIS_PACKET_TYPE_DIRECTED
                        | NDIS_PACKET_TYPE_MULTICAST
                        | NDIS_PACKET_TYPE_BROADCAST
                ),
                NDIS_STATUS_SUCCESS
            );
            assert_eq!(
                h.set_multicast(&Stack::multicast_macs(h)),
                NDIS_STATUS_SUCCESS
            );
            stacks.push(Stack::new(h));
        }
        Net {
            rig,
            stacks,
            now_ms: 0,
        }
    }

    /// One round: every stack polls at the next millisecond, then the fabric settles.
    pub fn round(&mut self) {
        self.now_ms += 1;
        for (h, s) in self.rig.hosts.iter().zip(self.stacks.iter_mut()) {
            if h.mp.is_some() {
                s.poll(h, self.now_ms);
            }
        }
        self.rig.settle();
    }

    /// Rounds until `done` holds (at most `max`); returns whether it did.
    pub fn run_until(&mut self, max: usize, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        for _ in 0..max {
            self.round();
            if done(self) {
                return true;
            }
        }
        false
    }

    pub fn finish(self) {
        drop(self.stacks);
        self.rig.finish();
    }
}
