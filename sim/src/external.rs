//! The fabric's external wire: a port that carries Ethernet frames to and from a UDP socket on
//! the loopback interface, one frame per datagram — the format of QEMU's
//! `-netdev socket,udp=127.0.0.1:<peer>,localaddr=127.0.0.1:<local>` — so a QEMU guest's NIC
//! joins the simulated fabric as one more port.
//!
//! * [`UdpWire`] is a [`FabricPort`] whose MAC is the guest's: frames the fabric routes to that
//!   MAC (and broadcasts) leave as datagrams; each datagram received is a frame the wire
//!   transmits into the fabric. Both sockets must be on the loopback interface.
//! * A simulated host has no IP stack, so the wire can carry a [`NeighbourResponder`] for the
//!   host side: it answers ARP requests and IPv6 neighbour solicitations for the host's own
//!   addresses with the host's MAC, tells its owner of every neighbour it sees (ARP and ND
//!   senders), and builds the solicitations with which the host asks for a neighbour.
//!
//! Meant for [`crate::fabric::ThreadMode::ScaledReal`] at scale 1.0: the guest runs in real
//! time, so the fabric must too, or the model's transport timers expire before it can answer.
//!
//! **A lossless wire.** RoCE expects a lossless fabric (PFC pauses a sender before a queue
//! overflows); a UDP socket drops what does not fit in its receive buffer. QEMU reads its
//! socket only while the guest's NIC has buffers, and the socket holds Linux's default
//! `net.core.rmem_default` (208 KiB, about 90 frames of 1 KiB payload), so a burst from the
//! device model (a 1 MiB message is 1024 frames sent at once) would lose most of its frames
//! and the guest's RC transport would retransmit. So frames for the peer go through a queue
//! whose sender pauses while the peer's socket is half full: it reads the socket's receive
//! queue from the kernel's UDP table (`/proc/net/udp`, the peer is on this host's loopback)
//! and sends only what fits in half of its buffer, then looks again. A peer not in the table
//! (not started, or gone) is sent to without pausing.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::fabric::{Fabric, FabricHandle, FabricPort, PortId};
use crate::wire::checksum;
use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};

/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Largest frame a datagram may carry (a 9000-byte jumbo frame with its Ethernet header).
const MAX_FRAME: usize = 9018;
/// How often the reader looks at its stop flag while no datagram arrives.
const READ_TIMEOUT: Duration = Duration::from_millis(20);

/// Counters of one [`UdpWire`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireCounters {
    /// Frames sent to the peer as datagrams.
    pub tx_frames: u64,
    /// Datagrams received from the peer.
    pub rx_frames: u64,
    /// Received datagrams that were not Ethernet frames (shorter than 14 bytes, or larger
    /// than a jumbo frame), dropped.
    pub rx_bad: u64,
    /// Frames the responder answered (ARP replies, neighbour advertisements).
    pub answered: u64,
    /// Datagrams that could not be sent.
    pub tx_errors: u64,
    /// Times the sender paused for the peer's socket to drain (see the module docs).
    pub paused: u64,
}

#[derive(Default)]
struct Counters {
    tx_frames: AtomicU64,
    rx_frames: AtomicU64,
    rx_bad: AtomicU64,
    answered: AtomicU64,
    tx_errors: AtomicU64,
    paused: AtomicU64,
}

/// Frames the fabric routed to the peer, waiting for room in its socket.
#[derive(Default)]
struct Egress {
    queue: Mutex<VecDeque<Vec<u8>>>,
    ready: Condvar,
}

/// A fabric port joined to a UDP socket (see the module docs).
pub struct UdpWire {
    mac: [u8; 6],
    socket: UdpSocket,
    peer: SocketAddr,
    /// Dropped at [`UdpWire::close`]: what it reports to may not outlive the host.
    responder: Mutex<Option<Arc<NeighbourResponder>>>,
    attached: OnceLock<(PortId, FabricHandle)>,
    stop: AtomicBool,
    reader: Mutex<Option<JoinHandle<()>>>,
    egress: Egress,
    sender: Mutex<Option<JoinHandle<()>>>,
    peer_socket: PeerSocket,
    counters: Counters,
}

/// Where the wire's datagrams go, and whose frames it carries.
#[derive(Clone, Copy, Debug)]
pub struct UdpWireConfig {
    /// The local socket (QEMU's `udp=`): must be a loopback address.
    pub local: SocketAddr,
    /// The peer's socket (QEMU's `localaddr=`): must be a loopback address.
    pub peer: SocketAddr,
    /// The MAC of the NIC at the other end; the fabric routes frames for it to this port.
    pub peer_mac: [u8; 6],
}

impl UdpWire {
    /// Binds `cfg.local`, attaches the wire to `fabric` and starts the thread that moves
    /// received datagrams into it. `responder` answers for the simulated host (see
    /// [`NeighbourResponder`]).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if either address is not loopback; the socket's own.
    pub fn attach(
        fabric: &Fabric,
        cfg: UdpWireConfig,
        responder: Option<Arc<NeighbourResponder>>,
    ) -> io::Result<Arc<UdpWire>> {
        if !cfg.local.ip().is_loopback() || !cfg.peer.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the external wire stays on the loopback interface",
            ));
        }
        let socket = bind(cfg.local)?;
        socket.set_read_timeout(Some(READ_TIMEOUT))?;
        let wire = Arc::new(UdpWire {
            mac: cfg.peer_mac,
            socket,
            peer: cfg.peer,
            responder: Mutex::new(responder),
            attached: OnceLock::new(),
            stop: AtomicBool::new(false),
            reader: Mutex::new(None),
            egress: Egress::default(),
            sender: Mutex::new(None),
            peer_socket: PeerSocket::new(cfg.peer),
            counters: Counters::default(),
        });
        let me = wire.clone();
        let sender = std::thread::Builder::new()
            .name("udp-wire-tx".into())
            .spawn(move || me.send_loop())?;
        *wire.sender.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
        let id = fabric.attach(wire.clone());
        let _ = wire.attached.set((id, fabric.handle()));
        let me = wire.clone();
        let reader = std::thread::Builder::new()
            .name("udp-wire".into())
            .spawn(move || me.read_loop())?;
        *wire.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(reader);
        Ok(wire)
    }

    /// Datagrams the peer's socket has dropped since it was opened (its receive buffer was
    /// full), from the kernel's UDP table; `None` when the peer's socket is not in it.
    pub fn peer_drops(&self) -> Option<u64> {
        self.peer_socket.read().map(|q| q.drops)
    }

    /// The local socket's address.
    ///
    /// # Errors
    /// The socket's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The wire's port on the fabric.
    pub fn port(&self) -> Option<PortId> {
        self.attached.get().map(|(id, _)| *id)
    }

    /// Counters so far.
    pub fn counters(&self) -> WireCounters {
        let c = &self.counters;
        WireCounters {
            tx_frames: c.tx_frames.load(Ordering::Relaxed),
            rx_frames: c.rx_frames.load(Ordering::Relaxed),
            rx_bad: c.rx_bad.load(Ordering::Relaxed),
            answered: c.answered.load(Ordering::Relaxed),
            tx_errors: c.tx_errors.load(Ordering::Relaxed),
            paused: c.paused.load(Ordering::Relaxed),
        }
    }

    /// Sends `frame` to the peer directly, not through the fabric (the responder's answers
    /// and solicitations).
    pub fn send_direct(&self, frame: &[u8]) {
        match self.socket.send_to(frame, self.peer) {
            Ok(_) => self.counters.tx_frames.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.counters.tx_errors.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Asks the peer for `target`'s MAC (ARP request or neighbour solicitation) on behalf of
    /// the responder's host; the answer reaches the responder's owner through its callback.
    pub fn solicit(&self, target: IpAddr) {
        if let Some(f) = self.responder().and_then(|r| r.solicitation(target)) {
            self.send_direct(&f);
        }
    }

    fn responder(&self) -> Option<Arc<NeighbourResponder>> {
        self.responder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops the reader, drops the responder and detaches from the fabric. Idempotent.
    pub fn close(&self, fabric: &Fabric) {
        self.stop.store(true, Ordering::SeqCst);
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(r) = reader {
            let _ = r.join();
        }
        self.egress.ready.notify_all();
        let sender = self.sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(s) = sender {
            let _ = s.join();
        }
        if let Some(id) = self.port() {
            fabric.detach(id);
        }
        self.responder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    fn read_loop(&self) {
        let mut buf = vec![0u8; MAX_FRAME + 1];
        while !self.stop.load(Ordering::SeqCst) {
            let n = match self.socket.recv_from(&mut buf) {
                Ok((n, from)) if from == self.peer => n,
                // Only the peer's datagrams are frames of this wire.
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                // ECONNREFUSED from an earlier send while the peer was not yet listening.
                Err(_) => continue,
            };
            self.counters.rx_frames.fetch_add(1, Ordering::Relaxed);
            let Some(frame) = buf.get(..n).filter(|f| (14..=MAX_FRAME).contains(&f.len())) else {
                self.counters.rx_bad.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if let Some(answer) = self.responder().and_then(|r| r.inbound(frame)) {
                self.counters.answered.fetch_add(1, Ordering::Relaxed);
                self.send_direct(&answer);
            }
            if let Some((id, handle)) = self.attached.get() {
                let mut f = handle.frame_buffer();
                f.clear();
                f.extend_from_slice(frame);
                handle.transmit(*id, f);
            }
        }
    }
}

impl UdpWire {
    /// Sends the queued frames in order, each once half the peer's socket buffer has room
    /// for it (the module docs); ends at [`UdpWire::close`], dropping what is still queued.
    fn send_loop(&self) {
        // Bytes the peer's socket can take before the sender looks again.
        let mut room = 0u64;
        loop {
            let frame = {
                let mut q = self.egress.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(f) = q.pop_front() {
                        break f;
                    }
                    q = self
                        .egress
                        .ready
                        .wait_timeout(q, READ_TIMEOUT)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            };
            let cost = truesize(frame.len());
            let mut paused = false;
            while room < cost {
                room = match self.peer_socket.read() {
                    Some(q) => (self.peer_socket.capacity / 2).saturating_sub(q.queued),
                    None => u64::MAX,
                };
                if room < cost {
                    if !paused {
                        paused = true;
                        self.counters.paused.fetch_add(1, Ordering::Relaxed);
                    }
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(PAUSE);
                }
            }
            room -= cost;
            self.send_direct(&frame);
        }
    }
}

impl FabricPort for UdpWire {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn receive(&self, frame: &[u8], _now_ns: u64) {
        let mut q = self.egress.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(frame.to_vec());
        drop(q);
        self.egress.ready.notify_one();
    }
}

/// How long the sender waits before it looks at a full peer socket again.
const PAUSE: Duration = Duration::from_micros(200);

/// What a datagram of `len` bytes costs in a receiving socket's buffer (its skb's truesize:
/// the data rounded up to a kmalloc size, plus the skb's own bookkeeping), overestimated.
fn truesize(len: usize) -> u64 {
    (len as u64 + 512).next_power_of_two() + 512
}

/// The peer's UDP socket in the kernel's table (Linux; elsewhere never found).
struct PeerSocket {
    /// `ADDR:PORT` as `/proc/net/udp` writes a local address (hex, the address in host
    /// order of the 32-bit word).
    local: String,
    /// Its receive buffer: `net.core.rmem_default` (QEMU does not set SO_RCVBUF).
    capacity: u64,
}

/// One reading of [`PeerSocket`].
#[derive(Clone, Copy, Debug)]
struct PeerQueue {
    /// Bytes in its receive queue.
    queued: u64,
    /// Datagrams dropped (buffer full).
    drops: u64,
}

impl PeerSocket {
    fn new(peer: SocketAddr) -> PeerSocket {
        let local = match peer.ip() {
            IpAddr::V4(a) => format!("{:08X}:{:04X}", u32::from_ne_bytes(a.octets()), peer.port()),
            // Only IPv4 loopback peers are looked up.
            IpAddr::V6(_) => String::new(),
        };
        let capacity = std::fs::read_to_string("/proc/sys/net/core/rmem_default")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(212_992);
        PeerSocket { local, capacity }
    }

    /// The socket's line of `/proc/net/udp`: `sl local rem st tx_queue:rx_queue ... drops`.
    fn read(&self) -> Option<PeerQueue> {
        if self.local.is_empty() {
            return None;
        }
        let table = std::fs::read_to_string("/proc/net/udp").ok()?;
        table.lines().skip(1).find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(1) != Some(&self.local.as_str()) {
                return None;
            }
            let (_, rx) = f.get(4)?.split_once(':')?;
            Some(PeerQueue {
                queued: u64::from_str_radix(rx, 16).ok()?,
                drops: f.last()?.parse().ok()?,
            })
        })
    }
}

/// A UDP socket on `at` with room for a burst: a real peer sends a window of frames at once,
/// and the default 208 KiB receive buffer overflows (a lost datagram is a lost frame, which the
/// transport then retransmits). The kernel caps the request at `net.core.rmem_max`.
fn bind(at: SocketAddr) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(at),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_recv_buffer_size(SOCKET_BUFFER)?;
    s.set_send_buffer_size(SOCKET_BUFFER)?;
    s.bind(&at.into())?;
    Ok(s.into())
}

/// Requested socket buffer size (each direction).
const SOCKET_BUFFER: usize = 4 << 20;

/// Answers ARP and IPv6 neighbour solicitation for a simulated host's addresses (see the
/// module docs), and reports every neighbour it hears of.
pub struct NeighbourResponder {
    mac: [u8; 6],
    addrs: Vec<IpAddr>,
    learn: Box<dyn Fn(IpAddr, [u8; 6]) + Send + Sync>,
}

impl NeighbourResponder {
    /// A responder for a host at `mac` owning `addrs`; `learn` hears of each neighbour (IP,
    /// MAC) seen in an ARP packet or a neighbour solicitation or advertisement.
    pub fn new(
        mac: [u8; 6],
        addrs: Vec<IpAddr>,
        learn: impl Fn(IpAddr, [u8; 6]) + Send + Sync + 'static,
    ) -> Arc<NeighbourResponder> {
        Arc::new(NeighbourResponder {
            mac,
            addrs,
            learn: Box::new(learn),
        })
    }

    fn owns(&self, ip: IpAddr) -> bool {
        self.addrs.contains(&ip)
    }

    /// Looks at a frame from the peer: learns its sender, and returns the answer if it asks
    /// for one of this host's addresses.
    pub fn inbound(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
        let body = frame.get(14..)?;
        match ethertype {
            ETHERTYPE_ARP => self.arp(body),
            ETHERTYPE_IPV6 => self.ndp(body),
            ETHERTYPE_IPV4 => None,
            _ => None,
        }
    }

    /// RFC 826 over Ethernet/IPv4: learn the sender; answer a request for our address.
    fn arp(&self, a: &[u8]) -> Option<Vec<u8>> {
        // htype 1, ptype IPv4, hlen 6, plen 4.
        let a = a.get(..28)?;
        if a[..6] != [0, 1, 8, 0, 6, 4] {
            return None;
        }
        let op = u16::from_be_bytes([a[6], a[7]]);
        let sha: [u8; 6] = a.get(8..14)?.try_into().ok()?;
        let spa: [u8; 4] = a.get(14..18)?.try_into().ok()?;
        let tpa: [u8; 4] = a.get(24..28)?.try_into().ok()?;
        let sender = IpAddr::V4(Ipv4Addr::from(spa));
        if spa != [0; 4] {
            (self.learn)(sender, sha);
        }
        if op != 1 || !self.owns(IpAddr::V4(Ipv4Addr::from(tpa))) {
            return None;
        }
        Some(arp_frame(2, self.mac, tpa, sha, spa))
    }

    /// RFC 4861: learn from NS (source link-layer option) and NA (target link-layer option);
    /// answer an NS for our address with a solicited NA.
    fn ndp(&self, ip6: &[u8]) -> Option<Vec<u8>> {
        // Next header ICMPv6, hop limit 255 (RFC 4861 §7.1.1).
        if ip6.len() < 40 || ip6[6] != 58 || ip6[7] != 255 {
            return None;
        }
        let src: [u8; 16] = ip6[8..24].try_into().ok()?;
        let len = usize::from(u16::from_be_bytes([ip6[4], ip6[5]]));
        let icmp = ip6.get(40..40 + len)?;
        let kind = *icmp.first()?;
        if !(kind == 135 || kind == 136) || icmp.len() < 24 {
            return None;
        }
        let target: [u8; 16] = icmp[8..24].try_into().ok()?;
        let option = |want: u8| -> Option<[u8; 6]> {
            let mut opts = icmp.get(24..)?;
            while opts.len() >= 8 {
                let (t, l) = (opts[0], usize::from(opts[1]) * 8);
                if l == 0 || l > opts.len() {
                    return None;
                }
                if t == want && l == 8 {
                    return opts[2..8].try_into().ok();
                }
                opts = &opts[l..];
            }
            None
        };
        if kind == 136 {
            if let Some(mac) = option(2) {
                (self.learn)(IpAddr::V6(Ipv6Addr::from(target)), mac);
            }
            return None;
        }
        let source_mac = option(1);
        if let (false, Some(mac)) = (src == [0; 16], source_mac) {
            (self.learn)(IpAddr::V6(Ipv6Addr::from(src)), mac);
        }
        if !self.owns(IpAddr::V6(Ipv6Addr::from(target))) {
            return None;
        }
        // DAD (unspecified source) is answered to all-nodes, anything else to the asker.
        let (dst_ip, dst_mac, solicited) = match (src == [0; 16], source_mac) {
            (true, _) => (all_nodes(), multicast_mac(&all_nodes()), false),
            (false, Some(mac)) => (src, mac, true),
            (false, None) => return None,
        };
        let mut na = vec![0u8; 32];
        na[0] = 136;
        na[4] = if solicited { 0x60 } else { 0x20 }; // S and O flags (O alone for DAD)
        na[8..24].copy_from_slice(&target);
        na[24] = 2; // target link-layer address
        na[25] = 1;
        na[26..32].copy_from_slice(&self.mac);
        Some(icmpv6_frame(self.mac, dst_mac, target, dst_ip, &mut na))
    }

    /// An ARP request or a neighbour solicitation for `target` from this host (an address of
    /// the same family as `target` is the source); `None` if the host has none.
    pub fn solicitation(&self, target: IpAddr) -> Option<Vec<u8>> {
        match target {
            IpAddr::V4(t) => {
                let src = self.addrs.iter().find_map(|a| match a {
                    IpAddr::V4(a) => Some(a.octets()),
                    IpAddr::V6(_) => None,
                })?;
                Some(arp_frame(1, self.mac, src, [0xFF; 6], t.octets()))
            }
            IpAddr::V6(t) => {
                let src = self.addrs.iter().find_map(|a| match a {
                    IpAddr::V6(a) => Some(a.octets()),
                    IpAddr::V4(_) => None,
                })?;
                let t = t.octets();
                let group = solicited_node(&t);
                let mut ns = vec![0u8; 32];
                ns[0] = 135;
                ns[8..24].copy_from_slice(&t);
                ns[24] = 1; // source link-layer address
                ns[25] = 1;
                ns[26..32].copy_from_slice(&self.mac);
                Some(icmpv6_frame(
                    self.mac,
                    multicast_mac(&group),
                    src,
                    group,
                    &mut ns,
                ))
            }
        }
    }
}

/// An Ethernet ARP frame; a request (op 1) goes to `tha` = broadcast.
fn arp_frame(op: u16, sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&tha);
    f.extend_from_slice(&sha);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa);
    f.extend_from_slice(if op == 1 { &[0; 6] } else { &tha });
    f.extend_from_slice(&tpa);
    // Pad to the 60-byte Ethernet minimum.
    f.resize(60, 0);
    f
}

/// An Ethernet IPv6 frame carrying the ICMPv6 message `icmp` (checksum filled in), hop limit
/// 255 as neighbour discovery requires.
fn icmpv6_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 16],
    dst: [u8; 16],
    icmp: &mut [u8],
) -> Vec<u8> {
    // CAST: ND messages are tens of bytes.
    let len = icmp.len() as u16;
    icmp[2..4].copy_from_slice(&[0, 0]);
    let mut acc = checksum::sum(0, &src);
    acc = checksum::sum(acc, &dst);
    acc = checksum::sum(acc, &u32::from(len).to_be_bytes());
    acc = checksum::sum(acc, &[0, 0, 0, 58]);
    acc = checksum::sum(acc, icmp);
    let ck = checksum::finish(acc);
    icmp[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut f = Vec::with_capacity(14 + 40 + icmp.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(icmp);
    f
}

fn all_nodes() -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xFF;
    a[1] = 0x02;
    a[15] = 1;
    a
}

/// ff02::1:ffXX:XXXX for `ip` (RFC 4291 §2.7.1).
fn solicited_node(ip: &[u8; 16]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xFF, 0x02]);
    g[11] = 1;
    g[12] = 0xFF;
    g[13..].copy_from_slice(&ip[13..]);
    g
}

/// 33:33 followed by the group's low 32 bits (RFC 2464 §7).
fn multicast_mac(group: &[u8; 16]) -> [u8; 6] {
    [0x33, 0x33, group[12], group[13], group[14], group[15]]
}

#[cfg(test)]
mod tests;
