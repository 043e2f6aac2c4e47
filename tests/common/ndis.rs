//! The host NDIS harness (issue 12 item 6, extended for issue 23): the portable miniport core
//! driven in-process against the device model, the test playing NDIS. Each host's
//! InitializeEx gets a translated resource list (parsed by `parse_resources`) for a platform
//! over its model node and a registry ([`Keys`]); with connection engines the hosts resolve
//! each other's addresses and connect through NdkListen/NdkConnect/NdkAccept; a host can be
//! restarted (Halt, then InitializeEx on the same device) with another registry; link
//! indications are recorded ([`Indications`]). [`NdisRig::finish`] checks that nothing is
//! left: no model object, no DMA region, pool accounting at its baseline.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pvrdma_host::{HostDevice, HostPlatform};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::Platform;
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_ndk::os::net::Neighbours;
use pvrdma_sim::ObjectCounts;
use pvrdma_sim::pcap::{PcapWriter, TsResolution};
use pvrdma_sim::world::{NodeConfig, World};

use super::memory::{BuiltMdl, ConsumerMem};
use super::ndk::{Adapter, Cq, Mr, Pd, Pump, Qp, QpSpec, sge};
use super::{DEFAULT_UAR_PFN, Mode, PlatformSink, SimBar1, SimDma, serial};

pub const HANG: Duration = Duration::from_secs(20);

/// Where the harness says the BARs are: BAR2 page 0 is the platform's UAR PFN.
const BAR0: u64 = 0xFD00_0000;
const BAR1: u64 = 0xFD10_0000;

/// The translated resource list of a PVRDMA function as NDIS passes it to InitializeEx.
pub fn resource_list() -> Vec<CM_PARTIAL_RESOURCE_DESCRIPTOR> {
    vec![
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR0, 0x4000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR1, 0x100),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(DEFAULT_UAR_PFN << 12, 0x1000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x60),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x61),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x62),
    ]
}

pub fn v(major: u16, minor: u16) -> NDK_VERSION {
    NDK_VERSION {
        Major: major,
        Minor: minor,
    }
}

/// An adapter's registry: keyword and value pairs (a keyword left out is absent).
#[derive(Clone, Debug, Default)]
pub struct Keys(pub Vec<(&'static str, u32)>);

impl Registry for Keys {
    fn integer(&self, keyword: &str) -> Option<u32> {
        self.0.iter().find(|(k, _)| *k == keyword).map(|(_, v)| *v)
    }
}

/// The link indications a host's "NDIS" received, in order.
#[derive(Default)]
pub struct Indications(Mutex<Vec<LinkState>>);

impl StatusSink for Indications {
    fn link_state(&self, state: &LinkState) {
        self.0.lock().unwrap().push(*state);
    }
}

impl Indications {
    /// Takes what arrived so far.
    pub fn take(&self) -> Vec<LinkState> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// One simulated machine with the miniport "NDIS" initialized on it.
pub struct NdisHost {
    pub platform: Arc<HostPlatform>,
    pub dma: Arc<SimDma>,
    pub space: Arc<pvrdma_sim::DmaSpace>,
    pub model: Arc<pvrdma_sim::Device>,
    pub miniport: Option<Arc<Miniport>>,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
    /// The address the host's interface owns (the node's GID's IPv4 address).
    pub ip: IpAddr,
    /// Its resolver (rigs with connection engines).
    pub resolver: Option<Arc<Neighbours>>,
    pub indications: Arc<Indications>,
}

impl NdisHost {
    pub fn mp(&self) -> &Miniport {
        self.miniport.as_ref().expect("miniport not torn down")
    }

    pub fn arc(&self) -> Arc<Miniport> {
        self.miniport.clone().expect("miniport not torn down")
    }

    pub fn model_objects(&self) -> ObjectCounts {
        self.model.with_core(|c| c.object_counts())
    }
}

/// How a rig is built.
#[derive(Clone)]
pub struct RigOptions {
    pub mode: Mode,
    pub hosts: u8,
    /// Each host's configuration (the last one repeats for the hosts past the list).
    pub configs: Vec<MiniportConfig>,
    /// QUERY_PORT's active MTU code of every node (M41: 3 = 1024 … 5 = 4096).
    pub port_mtu: u32,
    /// Connection engines (the hosts resolve each other); otherwise GID 0 is bound by hand
    /// and QPs are wired raw.
    pub engines: bool,
    /// How long a resolution of an unknown neighbour waits before failing.
    pub resolve_bound_ns: u64,
}

impl RigOptions {
    pub fn new(mode: Mode, hosts: u8, cfg: &MiniportConfig) -> RigOptions {
        RigOptions {
            mode,
            hosts,
            configs: vec![*cfg],
            port_mtu: 3,
            engines: false,
            resolve_bound_ns: 3_000_000_000,
        }
    }

    /// With connection engines.
    pub fn engines(mut self) -> RigOptions {
        self.engines = true;
        self
    }
}

/// Hosts on one fabric, each brought up through `Miniport::initialize_with`.
pub struct NdisRig {
    pub world: Arc<World>,
    pub hosts: Vec<NdisHost>,
    pub pump: Arc<Pump>,
    pub opts: RigOptions,
    baseline: AllocStats,
    _serial: MutexGuard<'static, ()>,
}

impl NdisRig {
    pub fn new(mode: Mode, n: u8, cfg: &MiniportConfig) -> NdisRig {
        NdisRig::with(RigOptions::new(mode, n, cfg))
    }

    pub fn with(opts: RigOptions) -> NdisRig {
        let guard = serial();
        let baseline = stats();
        let mut w = World::new(0x5EED);
        for i in 0..opts.hosts {
            let mut node = NodeConfig::ipv4(i);
            node.device.port_mtu = opts.port_mtu;
            w.add_node(node);
        }
        if opts.mode == Mode::Threaded {
            w.start_threads();
        }
        let world = Arc::new(w);
        let pump = Pump::new(world.clone(), opts.mode);
        let mut rig = NdisRig {
            world,
            hosts: Vec::new(),
            pump,
            opts,
            baseline,
            _serial: guard,
        };
        for i in 0..usize::from(rig.opts.hosts) {
            let node = rig.world.node(i);
            let model = node.device().clone();
            let space = node.dma().clone();
            let dma = SimDma::new(space.clone());
            let m = model.clone();
            let platform = HostPlatform::new(
                HostDevice {
                    bar1: SimBar1::new(model.clone()),
                    dma: dma.clone(),
                    doorbell: Some(Arc::new(move |off, val| m.uar_write32(off, val))),
                    uar_pfn: DEFAULT_UAR_PFN,
                    pump: Some(rig.pump.platform_pump()),
                },
                2,
            );
            rig.world
                .set_interrupt_sink(i, Arc::new(PlatformSink(Arc::downgrade(&platform))));
            rig.pump.add_platform(platform.clone());
            let g = node.gid();
            rig.hosts.push(NdisHost {
                platform,
                dma,
                space,
                model,
                miniport: None,
                gid: g,
                mac: node.mac(),
                ip: IpAddr::V4(Ipv4Addr::new(g[12], g[13], g[14], g[15])),
                resolver: None,
                indications: Arc::new(Indications::default()),
            });
        }
        for i in 0..rig.hosts.len() {
            let cfg = rig.config(i);
            rig.initialize(i, &cfg).expect("InitializeEx");
        }
        rig
    }

    fn config(&self, i: usize) -> MiniportConfig {
        let c = &self.opts.configs;
        c.get(i).or(c.last()).copied().unwrap_or_default()
    }

    /// InitializeEx on host `i` (the first, or after a Halt): the resource list, bring-up,
    /// then the address the host owns (through its engine's resolver, or bound by hand), and
    /// the status sink once the attributes are "set".
    pub fn initialize(&mut self, i: usize, cfg: &MiniportConfig) -> Result<(), NDIS_STATUS> {
        let res = parse_resources(&resource_list()).expect("resources");
        let p: Arc<dyn Platform> = self.hosts[i].platform.clone();
        let miniport = Miniport::initialize_with(p.clone(), &res, cfg)?;
        if self.opts.engines {
            let all: Vec<(IpAddr, [u8; 6])> = self.hosts.iter().map(|h| (h.ip, h.mac)).collect();
            let n = Neighbours::new(p, 64, self.opts.resolve_bound_ns).expect("resolver");
            for &(ip, mac) in &all {
                if ip != self.hosts[i].ip {
                    n.set_neighbour(ip, mac).expect("neighbour");
                }
            }
            n.add_address(self.hosts[i].ip).expect("address");
            miniport
                .start_connections(n.clone())
                .expect("the connection engine starts");
            self.hosts[i].resolver = Some(n);
        } else {
            miniport.add_gid(0, self.hosts[i].gid).expect("CREATE_BIND");
        }
        let reported = miniport.link();
        miniport.set_status_sink(self.hosts[i].indications.clone(), reported);
        self.hosts[i].miniport = Some(miniport);
        Ok(())
    }

    /// Halt, then InitializeEx again on the same device with `cfg` (what Windows does when
    /// an advanced property changes: the adapter restarts and reads its keywords again).
    pub fn restart(&mut self, i: usize, cfg: &MiniportConfig) -> Result<(), NDIS_STATUS> {
        self.halt_and_release(i);
        self.initialize(i, cfg)
    }

    /// Halt host `i` and let go of its miniport (the last reference).
    pub fn halt_and_release(&mut self, i: usize) {
        let m = self.hosts[i].miniport.take().expect("a miniport");
        m.halt();
        self.pump.settle();
        assert!(m.device().is_none(), "Halt let go of the device");
        assert_eq!(Arc::strong_count(&m), 1, "miniport still referenced");
        drop(m);
        if let Some(r) = self.hosts[i].resolver.take() {
            assert_eq!(r.outstanding(), 0, "resolutions outstanding at Halt");
        }
        self.pump.settle();
        assert!(
            !self.hosts[i].model.with_core(|c| c.is_active()),
            "RESET once released"
        );
    }

    pub fn mp(&self, i: usize) -> &Miniport {
        self.hosts[i].mp()
    }

    /// OpenNDKAdapterHandler, wrapped for consumer calls.
    pub fn open(&self, host: usize, version: NDK_VERSION) -> Adapter {
        let p = self
            .mp(host)
            .open_ndk_adapter(version)
            .expect("open adapter");
        Adapter::from_raw(p, self.pump.clone(), host)
    }

    pub fn query(&self, host: usize, oid: NDIS_OID, buf: &mut [u8]) -> OidResult {
        self.mp(host).query_oid(oid, buf)
    }

    pub fn statistics(&self, host: usize) -> NDIS_NDK_PERFORMANCE_COUNTERS {
        let mut b = statistics_buffer();
        let r = self.query(host, OID_NDK_STATISTICS, &mut b);
        assert_eq!(r, OidResult::done(0xF8));
        decode_counters(&b)
    }

    /// Starts a pcap capture of every frame the fabric delivers.
    pub fn capture(&self, path: &Path) {
        let file = std::fs::File::create(path).expect("create the capture");
        let w: Box<dyn Write + Send> = Box::new(std::io::BufWriter::new(file));
        drop(
            self.world
                .set_capture(Some(PcapWriter::new(w, TsResolution::Nano).unwrap())),
        );
    }

    /// Ends the capture (flushing it).
    pub fn end_capture(&self) {
        if let Some(mut w) = self.world.set_capture(None) {
            w.flush().expect("flush the capture");
        }
    }

    /// Halt (if the test did not), then: the models hold no object, the miniports were the
    /// last holders of their devices (RESET), and everything the driver allocated is back.
    pub fn finish(mut self) {
        self.pump.settle();
        for h in &self.hosts {
            if let Some(m) = &h.miniport {
                m.halt();
            }
        }
        let pump = self.pump.clone();
        let hosts = std::mem::take(&mut self.hosts);
        pump.wait_for("the models to hold no object", || {
            hosts
                .iter()
                .all(|h| h.model_objects() == ObjectCounts::default())
        });
        pump.settle();
        let mut keep = Vec::new();
        for mut h in hosts {
            let m = h.miniport.take().expect("miniport");
            assert!(m.device().is_none(), "Halt let go of the device");
            assert_eq!(Arc::strong_count(&m), 1, "miniport still referenced");
            drop(m);
            if let Some(r) = h.resolver.take() {
                assert_eq!(r.outstanding(), 0, "resolutions outstanding");
            }
            assert!(!h.model.with_core(|c| c.is_active()), "RESET once released");
            keep.push((h.platform, h.dma, h.space));
        }
        for n in 0..self.world.len() {
            self.world.device(n).stop_thread();
        }
        self.world.fabric().stop();
        for (platform, dma, space) in &keep {
            let ex = platform.executor().clone();
            let deadline = Instant::now() + HANG;
            while !ex.is_idle() {
                assert!(Instant::now() < deadline, "DPCs did not drain at teardown");
                std::thread::yield_now();
            }
            ex.shutdown();
            assert_eq!(dma.live(), 0, "DMA regions leaked");
            assert_eq!(dma.allocs(), dma.frees());
            assert_eq!(space.region_count(), 0, "regions left in the DmaSpace");
            assert_eq!(space.bytes_registered(), 0);
        }
        pump.clear_platforms();
        drop(keep);
        assert_eq!(
            stats(),
            self.baseline,
            "pool/DMA accounting not back at baseline"
        );
    }
}

impl Drop for NdisRig {
    fn drop(&mut self) {
        for h in &self.hosts {
            h.platform.executor().shutdown();
        }
    }
}

/// An NDIS_NDK_STATISTICS_INFO buffer as NDIS hands it over: header filled, 0xF8 bytes.
pub fn statistics_buffer() -> Vec<u8> {
    let mut b = vec![0u8; 0xF8];
    b[..4].copy_from_slice(&[0x80, 1, 0xF8, 0]);
    b
}

pub fn decode_counters(b: &[u8]) -> NDIS_NDK_PERFORMANCE_COUNTERS {
    assert_eq!(&b[..8], &[0x80, 1, 0xF8, 0, 0, 0, 0, 0], "header and Flags");
    let f = |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap());
    for i in 5..25 {
        assert_eq!(f(i), 0, "Reserved{:02} must be 0", i - 4);
    }
    NDIS_NDK_PERFORMANCE_COUNTERS {
        Connect: f(0),
        Accept: f(1),
        ConnectFailure: f(2),
        ConnectionError: f(3),
        ActiveConnection: f(4),
        CQError: f(25),
        RDMAInOctets: f(26),
        RDMAOutOctets: f(27),
        RDMAInFrames: f(28),
        RDMAOutFrames: f(29),
        ..Default::default()
    }
}

/// Consumer memory registered through an MR of `pd`.
pub struct Region {
    pub mem: ConsumerMem,
    _mdl: BuiltMdl,
    pub mr: Mr,
}

impl Region {
    pub fn new(rig: &NdisRig, host: usize, pd: &Pd, pages: usize, va: u64, flags: u32) -> Region {
        let mem = ConsumerMem::new(&rig.hosts[host].space, pages, va);
        let len = pages * 4096;
        let mdl = mem.mdl(0, len as u32);
        let mr = pd.create_mr(false).expect("NdkCreateMr");
        assert_eq!(mr.register(&mdl, len, flags), STATUS_SUCCESS);
        Region { mem, _mdl: mdl, mr }
    }

    pub fn sge(&self, off: u64, len: u32) -> NDK_SGE {
        sge(self.mem.va + off, len, self.mr.local_token())
    }

    pub fn close(self) {
        assert_eq!(self.mr.deregister(), STATUS_SUCCESS);
        assert_eq!(self.mr.close(), STATUS_SUCCESS);
        drop(self.mem);
    }
}

/// One side's objects.
pub struct Side {
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
}

impl Side {
    pub fn new(a: &Adapter, ctx: usize) -> Side {
        let pd = a.create_pd().expect("PD");
        let cq = a.create_cq(64, None).expect("CQ");
        let qp = pd.create_qp(&cq, &cq, QpSpec::new(ctx)).expect("QP");
        Side { pd, cq, qp }
    }

    pub fn close(self) {
        self.qp.close();
        self.cq.close();
        self.pd.close();
    }
}

/// A socket address on `ip`.
pub fn at(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

/// Where a test's capture goes (kept with `PVRDMA_KEEP_PCAP=1`).
pub fn pcap_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pvrdma-ndis-{name}-{}.pcap", std::process::id()))
}

/// What a message puts on the wire, packet by packet (IBTA 9.2–9.4; the test's own
/// arithmetic, independent of `ndk::traffic`): each packet is an Ethernet frame of
/// Ethernet 14, IPv4 20 / IPv6 40, UDP 8, BTH 12, its extension headers, its payload padded
/// to 4, ICRC 4 and FCS 4 bytes.
#[derive(Clone, Copy, Debug)]
pub struct WireModel {
    pub mtu: u64,
    pub ipv6: bool,
}

impl WireModel {
    pub fn ipv4(mtu: u64) -> WireModel {
        WireModel { mtu, ipv6: false }
    }

    fn frame(&self, ext: u64, payload: u64) -> u64 {
        let ip = if self.ipv6 { 40 } else { 20 };
        14 + ip + 8 + 12 + ext + payload.div_ceil(4) * 4 + 4 + 4
    }

    /// The payload of each packet of a `len`-byte message.
    fn payloads(&self, len: u64) -> Vec<u64> {
        if len == 0 {
            return vec![0];
        }
        let mut out = Vec::new();
        let mut left = len;
        while left > 0 {
            let p = left.min(self.mtu);
            out.push(p);
            left -= p;
        }
        out
    }

    /// (frames, octets) of a SEND (and of the receive that completes it).
    pub fn send(&self, len: u64) -> (u64, u64) {
        let p = self.payloads(len);
        (p.len() as u64, p.iter().map(|&b| self.frame(0, b)).sum())
    }

    /// A SEND with invalidate: IETH on the last (or only) packet.
    pub fn send_invalidate(&self, len: u64) -> (u64, u64) {
        let (f, o) = self.send(len);
        (f, o + 4)
    }

    /// An RDMA WRITE: RETH on the first (or only) packet.
    pub fn write(&self, len: u64) -> (u64, u64) {
        let (f, o) = self.send(len);
        (f, o + 16)
    }

    /// An RDMA READ request: one packet with a RETH and no payload.
    pub fn read_request(&self) -> (u64, u64) {
        (1, self.frame(16, 0))
    }

    /// An RDMA READ response: AETH on the first and last packets (Only: one).
    pub fn read_response(&self, len: u64) -> (u64, u64) {
        let p = self.payloads(len);
        let n = p.len();
        let octets = p
            .iter()
            .enumerate()
            .map(|(i, &b)| self.frame(if i == 0 || i == n - 1 { 4 } else { 0 }, b))
            .sum();
        (n as u64, octets)
    }
}

/// Sums (frames, octets) pairs.
pub fn total(parts: &[(u64, u64)]) -> (u64, u64) {
    parts
        .iter()
        .fold((0, 0), |(f, o), &(pf, po)| (f + pf, o + po))
}

/// An OID_NDK_CONNECTIONS answer decoded (after checking its head against its size):
/// (local, remote) per entry, each kernel-owned (UserModeOwner FALSE, OwnerPid 0).
pub fn decode_connections(b: &[u8]) -> Vec<(SocketAddr, SocketAddr)> {
    let count = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    let size = 0x10 + 0x40 * count;
    assert_eq!(&b[..2], &[0x80, 1], "NDIS_NDK_CONNECTIONS header");
    assert_eq!(
        usize::from(u16::from_le_bytes([b[2], b[3]])),
        size.min(0xFFFF),
        "Size = NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(Count)"
    );
    assert_eq!(&b[4..8], &[0; 4], "Flags");
    assert_eq!(b[12], 0, "not mapped to TCP connections (RoCEv2)");
    (0..count)
        .map(|i| {
            let e = &b[0x10 + 0x40 * i..0x10 + 0x40 * (i + 1)];
            assert_eq!(e[0x38], 0, "UserModeOwner FALSE");
            assert_eq!(&e[0x3C..0x40], &[0; 4], "OwnerPid 0");
            (sockaddr_of(&e[..28]), sockaddr_of(&e[0x1C..0x1C + 28]))
        })
        .collect()
}

/// An OID_NDK_LOCAL_ENDPOINTS answer decoded: (local, listener) per entry.
pub fn decode_endpoints(b: &[u8]) -> Vec<(SocketAddr, bool)> {
    let count = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    let size = 0x10 + 0x24 * count;
    assert_eq!(&b[..2], &[0x80, 1], "NDIS_NDK_LOCAL_ENDPOINTS header");
    assert_eq!(
        usize::from(u16::from_le_bytes([b[2], b[3]])),
        size.min(0xFFFF)
    );
    assert_eq!(b[12], 0, "not mapped to TCP endpoints (RoCEv2)");
    (0..count)
        .map(|i| {
            let e = &b[0x10 + 0x24 * i..0x10 + 0x24 * (i + 1)];
            assert_eq!(e[0x1C], 0, "UserModeOwner FALSE");
            assert!(e[0x1D] <= 1, "Listener is a BOOLEAN");
            assert_eq!(&e[0x20..0x24], &[0; 4], "OwnerPid 0");
            (sockaddr_of(&e[..28]), e[0x1D] == 1)
        })
        .collect()
}

/// A SOCKADDR_INET (ws2ipdef.h: AF_INET 2 / AF_INET6 23, port in network order).
pub fn sockaddr_of(b: &[u8]) -> SocketAddr {
    let family = u16::from_le_bytes([b[0], b[1]]);
    let port = u16::from_be_bytes([b[2], b[3]]);
    match family {
        2 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])), port),
        23 => {
            let a: [u8; 16] = b[8..24].try_into().unwrap();
            SocketAddr::new(IpAddr::V6(a.into()), port)
        }
        f => panic!("SOCKADDR_INET family {f}"),
    }
}

/// Queries a list OID into a buffer of `len` bytes (header filled as NDIS does); the answer
/// or the status and BytesNeeded.
pub fn query_list(m: &Miniport, oid: NDIS_OID, len: usize) -> (OidResult, Vec<u8>) {
    let mut b = vec![0xEEu8; len];
    if len >= 4 {
        let s = (len.min(0xFFFF) as u16).to_le_bytes();
        b[..4].copy_from_slice(&[0x80, 1, s[0], s[1]]);
    }
    let r = m.query_oid(oid, &mut b);
    b.truncate(r.bytes_done as usize);
    (r, b)
}

/// One frame of a pcap file: (IPv4 source, IPv4 destination, BTH opcode, frame length) for
/// RoCEv2 (UDP 4791) frames over IPv4; the model writes classic pcap, native byte order.
pub fn roce_frames(pcap: &Path) -> Vec<([u8; 4], [u8; 4], u8, usize)> {
    let data = std::fs::read(pcap).expect("read the capture");
    assert!(data.len() >= 24, "a pcap header");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let incl = u32::from_ne_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &data[at + 16..at + 16 + incl];
        at += 16 + incl;
        // Ethernet, IPv4 (EtherType 0x0800, IHL 5), UDP to 4791.
        if f.len() < 42 + 12 || f[12..14] != [0x08, 0x00] {
            continue;
        }
        if u16::from_be_bytes([f[36], f[37]]) != 4791 {
            continue;
        }
        out.push((
            f[26..30].try_into().unwrap(),
            f[30..34].try_into().unwrap(),
            f[42],
            f.len(),
        ));
    }
    out
}
