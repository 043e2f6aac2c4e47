//! The CM state machine (cm.md §6) between two `Cm` instances exchanging MADs over a test
//! fabric in virtual time: exact message sequences, the retry budget to the nanosecond,
//! Linux's answers to unknown, duplicate and stale messages, a lossy/duplicating/reordering
//! fabric, floods and churn with nothing left behind.

use std::net::{IpAddr, SocketAddr};

use pvrdma_ndk::cm::addr::{CmaAddrs, CmaHdr, Gid, gid_from_ip, tcp_service_id};
use pvrdma_ndk::cm::limits::ReadLimits;
use pvrdma_ndk::cm::msg::{Drep, Dreq, Message, Mra, Rej, Rep, Req, Rtu, parse_any};
use pvrdma_ndk::cm::wire::{MAD_LEN, Mad, attr, new_cm_mad};
use pvrdma_ndk::cm::{
    AcceptParams, Action, Cm, CmConfig, CmError, ConnId, ConnectParams, Dropped, Event, ListenerId,
    Path, QpTransition, State, WireError,
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
/// rdma_cm's REQ per try: 2 × conv(18) + conv(20).
const REQ_TRY: u64 = 6144 * MS;
/// The REP per try: conv(REQ Local CM Response Timeout = 20).
const REP_TRY: u64 = 4096 * MS;
const PORT: u16 = 445;

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// What a node's consumer does by itself when an event arrives.
#[derive(Clone, Copy)]
struct Auto {
    accept: bool,
    complete: bool,
    disconnect_on_request: bool,
    release_when_done: bool,
}

const AUTO: Auto = Auto {
    accept: true,
    complete: true,
    disconnect_on_request: true,
    release_when_done: false,
};

struct Node {
    cm: Cm,
    ip: IpAddr,
    gid: Gid,
    auto: Auto,
    next_qpn: u32,
    events: Vec<(u64, ConnId, Event)>,
    mods: Vec<(ConnId, u32, QpTransition)>,
    sent: Vec<(u64, [u8; MAD_LEN])>,
    dropped: Vec<Dropped>,
}

impl Node {
    fn new(ip: &str, capacity: usize, seed: u32) -> Self {
        let ip: IpAddr = ip.parse().unwrap();
        let mut cfg =
            CmConfig::rdma_cm_defaults(capacity, 0x0050_5600_0000_0000 | u64::from(seed), seed);
        cfg.actions = 256;
        cfg.adapter_max = ReadLimits::new(16, 8);
        Self {
            cm: Cm::new(cfg).unwrap(),
            ip,
            gid: gid_from_ip(ip),
            auto: AUTO,
            next_qpn: 0x100 + seed % 0x100,
            events: Vec::new(),
            mods: Vec::new(),
            sent: Vec::new(),
            dropped: Vec::new(),
        }
    }

    fn events_of(&self, conn: ConnId) -> Vec<Event> {
        self.events
            .iter()
            .filter(|(_, c, _)| *c == conn)
            .map(|(_, _, e)| *e)
            .collect()
    }

    fn sent_attrs(&self) -> Vec<u16> {
        self.sent
            .iter()
            .map(|(_, m)| Mad::new_unchecked(&m[..]).attribute_id())
            .collect()
    }

    fn count_sent(&self, attribute: u16) -> usize {
        self.sent_attrs()
            .iter()
            .filter(|&&a| a == attribute)
            .count()
    }

    fn last_sent(&self, attribute: u16) -> [u8; MAD_LEN] {
        self.sent
            .iter()
            .rev()
            .find(|(_, m)| Mad::new_unchecked(&m[..]).attribute_id() == attribute)
            .map(|(_, m)| *m)
            .unwrap_or_else(|| panic!("no {attribute:#x} sent"))
    }

    fn take_qpn(&mut self) -> u32 {
        self.next_qpn += 1;
        self.next_qpn
    }
}

struct Packet {
    at: u64,
    seq: u64,
    to: usize,
    path: Path,
    mad: [u8; MAD_LEN],
}

struct Fabric {
    nodes: Vec<Node>,
    now: u64,
    wire: Vec<Packet>,
    rng: Rng,
    loss: u64,
    dup: u64,
    latency: u64,
    jitter: u64,
    seq: u64,
    /// Everything sent to node i vanishes.
    deaf: [bool; 2],
    delivered: u64,
}

impl Fabric {
    fn new(capacity: usize) -> Self {
        Self::between("192.168.1.10", "192.168.1.20", capacity)
    }

    fn between(a: &str, b: &str, capacity: usize) -> Self {
        Self {
            nodes: vec![
                Node::new(a, capacity, 0x1357_9BDF),
                Node::new(b, capacity, 0x2468_ACE0),
            ],
            now: 1_000 * MS,
            wire: Vec::new(),
            rng: Rng(0x9E37_79B9_7F4A_7C15),
            loss: 0,
            dup: 0,
            latency: 10 * US,
            jitter: 0,
            seq: 0,
            deaf: [false; 2],
            delivered: 0,
        }
    }

    fn lossy(capacity: usize, seed: u64) -> Self {
        let mut f = Self::new(capacity);
        f.rng = Rng(seed | 1);
        f.loss = 200;
        f.dup = 100;
        f.jitter = 2 * MS;
        f
    }

    fn path(&self, from: usize) -> Path {
        Path {
            local_gid: self.nodes[from].gid,
            remote_gid: self.nodes[1 - from].gid,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    fn listen(&mut self, node: usize) -> ListenerId {
        let ip = self.nodes[node].ip;
        self.nodes[node].cm.listen(PORT, ip).unwrap()
    }

    fn connect(&mut self, from: usize, port: u16, data: &[u8]) -> ConnId {
        let qpn = self.nodes[from].take_qpn();
        let params = ConnectParams {
            src: SocketAddr::new(self.nodes[from].ip, 49152 + (qpn as u16 & 0x3FFF)),
            dst: SocketAddr::new(self.nodes[1 - from].ip, port),
            path: self.path(from),
            local_qpn: qpn,
            starting_psn: qpn * 0x1111,
            limits: ReadLimits::new(12, 6),
            path_mtu: 3,
            retry_count: 7,
            rnr_retry_count: 6,
            private_data: data,
        };
        let now = self.now;
        let id = self.nodes[from].cm.connect(now, &params).unwrap();
        self.pump();
        id
    }

    /// Performs every queued action of both nodes, including what the auto-consumers do.
    fn pump(&mut self) {
        loop {
            let mut progress = false;
            for i in 0..2 {
                while let Some(a) = self.nodes[i].cm.poll_action() {
                    progress = true;
                    self.perform(i, a);
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn perform(&mut self, i: usize, a: Action) {
        let now = self.now;
        match a {
            Action::Send { conn, path, mad } => {
                check_send_names_its_connection(conn, &mad);
                self.nodes[i].sent.push((now, mad));
                let Some(to) = self.nodes.iter().position(|n| n.gid == path.remote_gid) else {
                    return;
                };
                assert_eq!(path.local_gid, self.nodes[i].gid, "sent from our own GID");
                if self.deaf[to] || self.rng.chance(self.loss) {
                    return;
                }
                let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let jitter = if self.jitter > 0 {
                        self.rng.next() % self.jitter
                    } else {
                        0
                    };
                    self.seq += 1;
                    self.wire.push(Packet {
                        at: now + self.latency + jitter,
                        seq: self.seq,
                        to,
                        path: Path {
                            local_gid: path.remote_gid,
                            remote_gid: path.local_gid,
                            ..path
                        },
                        mad,
                    });
                }
            }
            Action::ModifyQp {
                conn,
                qpn,
                transition,
            } => self.nodes[i].mods.push((conn, qpn, transition)),
            Action::Deliver { conn, event } => {
                self.nodes[i].events.push((now, conn, event));
                let auto = self.nodes[i].auto;
                match event {
                    Event::ConnectRequest { .. } if auto.accept => {
                        let qpn = self.nodes[i].next_qpn + 1;
                        self.nodes[i].next_qpn = qpn;
                        let p = AcceptParams {
                            local_qpn: qpn,
                            starting_psn: qpn * 0x2222,
                            limits: ReadLimits::new(10, 10),
                            rnr_retry_count: 5,
                            private_data: b"accepted",
                        };
                        self.nodes[i].cm.accept(now, conn, &p).unwrap();
                    }
                    Event::Accepted if auto.complete => {
                        self.nodes[i].cm.complete_connect(conn).unwrap()
                    }
                    Event::DisconnectRequested if auto.disconnect_on_request => {
                        self.nodes[i].cm.disconnect(now, conn).unwrap()
                    }
                    Event::Disconnected { .. } | Event::TimedOut | Event::Rejected { .. }
                        if auto.release_when_done =>
                    {
                        self.nodes[i].cm.release(now, conn).unwrap()
                    }
                    _ => {}
                }
            }
        }
    }

    /// Delivers what is due, fires due timers, then advances to the next packet or timer.
    /// False when nothing is left to happen.
    fn step(&mut self) -> bool {
        let next_packet = self.wire.iter().map(|p| p.at).min();
        let next_timer = self.nodes.iter().filter_map(|n| n.cm.next_timer()).min();
        let Some(t) = [next_packet, next_timer].into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        let mut due: Vec<Packet> = Vec::new();
        let mut i = 0;
        while i < self.wire.len() {
            if self.wire[i].at <= now {
                due.push(self.wire.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|p| (p.at, p.seq));
        for p in due {
            self.delivered += 1;
            if let Err(d) = self.nodes[p.to].cm.on_mad(now, &p.path, &p.mad) {
                self.nodes[p.to].dropped.push(d);
            }
            self.pump();
        }
        for n in 0..2 {
            if self.nodes[n].cm.next_timer().is_some_and(|t| t <= now) {
                self.nodes[n].cm.on_timer(now);
            }
        }
        self.pump();
        true
    }

    fn run_until(&mut self, limit: u64, done: impl Fn(&Fabric) -> bool) -> bool {
        let end = self.now + limit;
        while !done(self) {
            if self.now > end || !self.step() {
                return done(self);
            }
        }
        true
    }

    fn run_idle(&mut self) {
        while self.step() {}
    }

    /// Delivers one MAD to `node` from the other node's GID.
    fn inject(&mut self, node: usize, mad: &[u8]) -> Result<(), Dropped> {
        let path = self.path(node);
        let now = self.now;
        let r = self.nodes[node].cm.on_mad(now, &path, mad);
        self.pump();
        r
    }
}

fn attr_of(mad: &[u8]) -> u16 {
    Mad::new_unchecked(mad).attribute_id()
}

fn tid_of(mad: &[u8]) -> u64 {
    Mad::new_unchecked(mad).transaction_id()
}

/// The passive connection the node delivered in its latest ConnectRequest.
fn last_request(n: &Node) -> ConnId {
    n.events
        .iter()
        .rev()
        .find(|(_, _, e)| matches!(e, Event::ConnectRequest { .. }))
        .map(|(_, c, _)| *c)
        .expect("a connect request")
}

#[test]
fn a_connection_goes_req_rep_rtu_dreq_drep_with_linux_fields() {
    let mut f = Fabric::new(8);
    let listener = f.listen(1);
    let data: Vec<u8> = (1..=56).collect();
    let active = f.connect(0, PORT, &data);
    assert!(f.run_until(100 * MS, |f| {
        f.nodes[1].events.iter().any(|e| e.2 == Event::Established)
    }));
    let passive = last_request(&f.nodes[1]);

    // The REQ, as cm.md §3.2's last column says Linux sends it.
    let req_mad = f.nodes[0].last_sent(attr::REQ);
    let req = Req::new_checked(&req_mad[..]).unwrap();
    assert_eq!(req.local_comm_id(), active.0);
    assert_ne!(active.0, 0);
    assert_eq!(req.service_id(), tcp_service_id(PORT));
    assert_eq!(req.service_id(), 0x0000_0000_0106_01BD);
    assert_eq!(req.local_ca_guid(), f.nodes[0].cm.config().ca_guid);
    assert_eq!(
        (req.local_qkey(), req.local_eecn(), req.remote_eecn()),
        (0, 0, 0)
    );
    assert_eq!((req.responder_resources(), req.initiator_depth()), (12, 6));
    assert_eq!(
        (
            req.remote_cm_response_timeout(),
            req.local_cm_response_timeout()
        ),
        (20, 20)
    );
    assert_eq!(
        (req.transport_service_type(), req.max_cm_retries()),
        (0, 15)
    );
    assert_eq!(
        (req.retry_count(), req.rnr_retry_count(), req.path_mtu()),
        (7, 6, 3)
    );
    assert_eq!(req.pkey(), 0xFFFF);
    assert_eq!(
        (req.primary_local_lid(), req.primary_remote_lid()),
        (0xFFFF, 0xFFFF)
    );
    assert_eq!(req.primary_local_gid(), f.nodes[0].gid);
    assert_eq!(req.primary_remote_gid(), f.nodes[1].gid);
    assert_eq!(
        (req.primary_hop_limit(), req.primary_subnet_local()),
        (64, 0)
    );
    // cm_ack_timeout(15, 18) = 19
    assert_eq!(req.primary_local_ack_timeout(), 19);
    assert_eq!(req.alternate_local_lid(), 0);
    assert_eq!(
        tid_of(&req_mad),
        (u64::from(f.nodes[0].cm.config().tid_high) << 32) | u64::from(active.0)
    );
    let hdr = CmaHdr::new_checked(req.private_data()).unwrap();
    let addrs = hdr.addrs().unwrap();
    assert_eq!(addrs.dst, f.nodes[1].ip);
    assert_eq!(addrs.src.ip(), f.nodes[0].ip);
    assert_eq!(&hdr.payload()[..56], &data[..]);

    // Passive: the request as NdkGetConnectionData sees it.
    assert_eq!(
        f.nodes[1].events_of(passive),
        [Event::ConnectRequest { listener }, Event::Established]
    );
    assert_eq!(f.nodes[1].cm.peer_private_data(passive).unwrap(), &data[..]);
    let (local, peer) = f.nodes[1].cm.addresses(passive).unwrap();
    assert_eq!(local, SocketAddr::new(f.nodes[1].ip, PORT));
    assert_eq!(peer, addrs.src);
    // Accept (10, 10) capped: IRD min(10, 16, REQ ORD 6) = 6; ORD min(10, 8, REQ IRD 12) = 8.
    assert_eq!(
        f.nodes[1].cm.read_limits(passive),
        Some(ReadLimits::new(6, 8))
    );

    // The REP and the RTU carry the REQ's TID.
    let rep_mad = f.nodes[1].last_sent(attr::REP);
    let rep = Rep::new_checked(&rep_mad[..]).unwrap();
    assert_eq!(tid_of(&rep_mad), tid_of(&req_mad));
    assert_eq!(
        (rep.local_comm_id(), rep.remote_comm_id()),
        (passive.0, active.0)
    );
    assert_eq!((rep.responder_resources(), rep.initiator_depth()), (6, 8));
    assert_eq!((rep.target_ack_delay(), rep.rnr_retry_count()), (15, 5));
    assert_eq!(&rep.private_data()[..8], b"accepted");
    let rtu_mad = f.nodes[0].last_sent(attr::RTU);
    let rtu = Rtu::new_checked(&rtu_mad[..]).unwrap();
    assert_eq!(tid_of(&rtu_mad), tid_of(&req_mad));
    assert_eq!(
        (rtu.local_comm_id(), rtu.remote_comm_id()),
        (active.0, passive.0)
    );

    // Active: REP data and the mirror-image limits.
    assert_eq!(f.nodes[0].events_of(active), [Event::Accepted]);
    assert_eq!(f.nodes[0].cm.peer_private_data(active).unwrap().len(), 196);
    assert_eq!(
        &f.nodes[0].cm.peer_private_data(active).unwrap()[..8],
        b"accepted"
    );
    assert_eq!(
        f.nodes[0].cm.read_limits(active),
        Some(ReadLimits::new(8, 6))
    );
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Established));
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Established));

    // QP transitions: each side RTR then RTS with the other's QPN. A message's Starting PSN is
    // the PSN its sender receives (cm.md §1.5, Linux cm.c): each side's rq_psn is the Starting
    // PSN it sent and its sq_psn the one it received.
    let (a_qpn, p_qpn) = (req.local_qpn(), rep.local_qpn());
    let a_mods: Vec<_> = f.nodes[0].mods.iter().map(|m| m.2).collect();
    let p_mods: Vec<_> = f.nodes[1].mods.iter().map(|m| m.2).collect();
    match (&a_mods[..], &p_mods[..]) {
        (
            [QpTransition::Rtr(ar), QpTransition::Rts(at)],
            [QpTransition::Rtr(pr), QpTransition::Rts(pt)],
        ) => {
            assert_eq!((ar.remote_qpn, ar.rq_psn), (p_qpn, req.starting_psn()));
            assert_eq!((ar.max_dest_rd_atomic, at.max_rd_atomic), (8, 6));
            assert_eq!(
                (at.sq_psn, at.retry_count, at.rnr_retry),
                (rep.starting_psn(), 7, 5)
            );
            assert_eq!(ar.path.remote_gid, f.nodes[1].gid);
            assert_eq!(
                (pr.remote_qpn, pr.rq_psn, pr.path_mtu),
                (a_qpn, rep.starting_psn(), 3)
            );
            assert_eq!((pr.max_dest_rd_atomic, pt.max_rd_atomic), (6, 8));
            assert_eq!(
                (pt.sq_psn, pt.timeout, pt.rnr_retry),
                (req.starting_psn(), 19, 6)
            );
            assert_eq!(pr.path.remote_gid, f.nodes[0].gid);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        f.nodes[0]
            .mods
            .iter()
            .all(|m| m.0 == active && m.1 == a_qpn)
    );
    assert!(
        f.nodes[1]
            .mods
            .iter()
            .all(|m| m.0 == passive && m.1 == p_qpn)
    );

    // Disconnect: DREQ naming the peer's QPN, DREP with the DREQ's TID.
    let now = f.now;
    f.nodes[0].cm.disconnect(now, active).unwrap();
    f.pump();
    assert_eq!(f.nodes[0].mods.last().unwrap().2, QpTransition::Error);
    assert!(f.run_until(100 * MS, |f| f.nodes[0].events_of(active).len() == 2));
    let dreq_mad = f.nodes[0].last_sent(attr::DREQ);
    let dreq = Dreq::new_checked(&dreq_mad[..]).unwrap();
    assert_eq!(dreq.remote_qpn(), p_qpn);
    assert_eq!(
        (dreq.local_comm_id(), dreq.remote_comm_id()),
        (active.0, passive.0)
    );
    let drep_mad = f.nodes[1].last_sent(attr::DREP);
    assert_eq!(tid_of(&drep_mad), tid_of(&dreq_mad));
    let drep = Drep::new_checked(&drep_mad[..]).unwrap();
    assert_eq!(
        (drep.local_comm_id(), drep.remote_comm_id()),
        (passive.0, active.0)
    );
    assert_eq!(
        f.nodes[0].events_of(active),
        [Event::Accepted, Event::Disconnected { timed_out: false }]
    );
    assert_eq!(
        f.nodes[1].events_of(passive),
        [
            Event::ConnectRequest { listener },
            Event::Established,
            Event::DisconnectRequested,
            Event::Disconnected { timed_out: false }
        ]
    );
    assert_eq!(f.nodes[1].mods.last().unwrap().2, QpTransition::Error);
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Timewait));
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Timewait));
    // The exact exchange, nothing more.
    assert_eq!(f.nodes[0].sent_attrs(), [attr::REQ, attr::RTU, attr::DREQ]);
    assert_eq!(f.nodes[1].sent_attrs(), [attr::REP, attr::DREP]);

    // TIMEWAIT ends (conv(cm_ack_timeout(15, 18)) = 2048 ms active), the consumers release,
    // nothing is left.
    f.run_idle();
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Idle));
    f.nodes[0].cm.release(f.now, active).unwrap();
    f.nodes[1].cm.release(f.now, passive).unwrap();
    f.pump();
    assert_eq!(
        f.nodes[0].cm.live_connections() + f.nodes[1].cm.live_connections(),
        0
    );
    assert_eq!(f.nodes[0].cm.state(active), None);
    assert_eq!(
        f.nodes[0].cm.release(f.now, active),
        Err(CmError::UnknownConnection)
    );
    assert_eq!(
        f.nodes[0].sent.len() + f.nodes[1].sent.len(),
        5,
        "release after TIMEWAIT is silent"
    );
}

#[test]
fn a_dead_peer_times_out_after_exactly_the_retry_budget() {
    let mut f = Fabric::new(4);
    f.deaf[1] = true;
    f.listen(1);
    let t0 = f.now;
    let active = f.connect(0, PORT, b"");
    assert!(f.run_until(200_000 * MS, |f| !f.nodes[0].events.is_empty()));
    assert_eq!(
        f.nodes[0].events,
        [(t0 + 16 * REQ_TRY, active, Event::TimedOut)]
    );
    // 1 + Max CM Retries (15) REQs, one per try, identical.
    assert_eq!(f.nodes[0].count_sent(attr::REQ), 16);
    let times: Vec<u64> = f.nodes[0].sent.iter().map(|s| s.0).collect();
    let want: Vec<u64> = (0..16).map(|i| t0 + i * REQ_TRY).collect();
    assert_eq!(times, want);
    assert!(f.nodes[0].sent.iter().all(|s| s.1 == f.nodes[0].sent[0].1));
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Idle));
    assert_eq!(f.nodes[0].cm.next_timer(), None);
    assert!(f.nodes[0].mods.is_empty(), "the QP was never touched");
    f.nodes[0].cm.release(f.now, active).unwrap();
    f.pump();
    assert_eq!(f.nodes[0].cm.live_connections(), 0);
    assert_eq!(f.nodes[0].sent.len(), 16, "release from IDLE sends nothing");
}

#[test]
fn an_accept_whose_rtu_never_comes_times_out_after_the_reps_budget() {
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[0].auto.complete = false;
    let active = f.connect(0, PORT, b"");
    assert!(f.run_until(100 * MS, |f| f.nodes[0].events_of(active)
        == [Event::Accepted]));
    let passive = last_request(&f.nodes[1]);
    let accepted_at = f.nodes[1].sent[0].0;
    f.deaf[0] = true; // the active side hears no more REPs
    assert!(f.run_until(200_000 * MS, |f| f.nodes[1].events_of(passive).len() == 2));
    let (at, _, e) = *f.nodes[1].events.last().unwrap();
    assert_eq!(e, Event::TimedOut);
    assert_eq!(at, accepted_at + 16 * REP_TRY);
    assert_eq!(f.nodes[1].count_sent(attr::REP), 16);
    assert_eq!(f.nodes[1].mods.last().unwrap().2, QpTransition::Error);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Idle));
    // The active consumer gives up later: REJ for the REP (MsgREJected 1, reason 28).
    f.nodes[0].cm.reject(active, b"late").unwrap();
    f.pump();
    let rej = f.nodes[0].last_sent(attr::REJ);
    let rej = Rej::new_checked(&rej[..]).unwrap();
    assert_eq!((rej.message_rejected(), rej.reason()), (1, 28));
    assert_eq!(&rej.private_data()[..4], b"late");
    assert_eq!(f.nodes[0].mods.last().unwrap().2, QpTransition::Error);
}

#[test]
fn a_req_for_a_port_nobody_listens_on_gets_rej_8_and_leaves_no_state() {
    let mut f = Fabric::new(4);
    f.listen(1);
    let active = f.connect(0, 5445, b"x");
    assert!(f.run_until(100 * MS, |f| !f.nodes[0].events.is_empty()));
    assert_eq!(
        f.nodes[0].events_of(active),
        [Event::Rejected { reason: 8 }]
    );
    assert_eq!(f.nodes[0].cm.reject_reason(active), Some(8));
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Idle));
    assert_eq!(f.nodes[1].cm.live_connections(), 0);
    assert!(f.nodes[1].events.is_empty());
    let rej_mad = f.nodes[1].last_sent(attr::REJ);
    let rej = Rej::new_checked(&rej_mad[..]).unwrap();
    assert_eq!(tid_of(&rej_mad), tid_of(&f.nodes[0].sent[0].1));
    assert_eq!((rej.local_comm_id(), rej.remote_comm_id()), (0, active.0));
    assert_eq!(
        (rej.message_rejected(), rej.reason(), rej.ari().len()),
        (0, 8, 0)
    );
    assert_eq!(f.nodes[1].sent.len(), 1);
    // The REJ's local ID is the REQ's bytes 4–7 (cm_issue_rej swaps the two ID dwords).
    let mut req = f.nodes[0].sent[0].1;
    req[28..32].copy_from_slice(&0x00C0_FFEEu32.to_be_bytes());
    Req::new_unchecked(&mut req[..]).set_local_comm_id(0x6161);
    f.inject(1, &req).unwrap();
    let rej = f.nodes[1].last_sent(attr::REJ);
    let rej = Rej::new_checked(&rej[..]).unwrap();
    assert_eq!(
        (rej.local_comm_id(), rej.remote_comm_id()),
        (0x00C0_FFEE, 0x6161)
    );
    assert_eq!(
        f.nodes[0].cm.next_timer(),
        None,
        "the REQ is answered: no retransmission"
    );
}

#[test]
fn paused_closed_and_mismatched_listeners_refuse_as_rdma_cm_does() {
    let mut f = Fabric::new(4);
    let listener = f.listen(1);
    // Paused (NdkControlConnectEvents): as if no listener, REJ 8.
    f.nodes[1].cm.pause(listener, true).unwrap();
    let c = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[0].events_of(c).is_empty());
    assert_eq!(f.nodes[0].events_of(c), [Event::Rejected { reason: 8 }]);
    f.nodes[1].cm.pause(listener, false).unwrap();
    let c = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[0].events_of(c).is_empty());
    assert_eq!(f.nodes[0].events_of(c), [Event::Accepted]);
    // Closed: REJ 8 at once; a second listen on the port works again afterwards.
    f.nodes[1].cm.unlisten(listener).unwrap();
    assert_eq!(
        f.nodes[1].cm.unlisten(listener),
        Err(CmError::UnknownListener)
    );
    let c = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[0].events_of(c).is_empty());
    assert_eq!(f.nodes[0].events_of(c), [Event::Rejected { reason: 8 }]);
    // Bound to another address on the port: REJ 28 (cma_match_private_data).
    let other: IpAddr = "192.168.1.99".parse().unwrap();
    let l2 = f.nodes[1].cm.listen(PORT, other).unwrap();
    assert_eq!(
        f.nodes[1].cm.listen(PORT, "0.0.0.0".parse().unwrap()),
        Err(CmError::AddressInUse)
    );
    assert_eq!(
        f.nodes[1].cm.listen(PORT, other),
        Err(CmError::AddressInUse)
    );
    let c = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[0].events_of(c).is_empty());
    assert_eq!(f.nodes[0].events_of(c), [Event::Rejected { reason: 28 }]);
    // An IPv4 wildcard refuses an IPv6 request with REJ 28; an IPv6 wildcard takes both.
    f.nodes[1].cm.unlisten(l2).unwrap();
    f.nodes[1]
        .cm
        .listen(PORT, "0.0.0.0".parse().unwrap())
        .unwrap();
    let mut req = f.nodes[0].last_sent(attr::REQ);
    let v6 = CmaAddrs {
        src: "[2001:db8::1]:40000".parse().unwrap(),
        dst: "2001:db8::2".parse().unwrap(),
    };
    let mut r = Req::new_unchecked(&mut req[..]);
    r.set_local_comm_id(0x7777);
    CmaHdr::new_unchecked(r.private_data_mut())
        .emit(&v6)
        .unwrap();
    let before = f.nodes[1].sent.len();
    f.inject(1, &req).unwrap();
    let rej = f.nodes[1].last_sent(attr::REJ);
    assert_eq!(f.nodes[1].sent.len(), before + 1);
    assert_eq!(Rej::new_unchecked(&rej[..]).reason(), 28);
    assert_eq!(Rej::new_unchecked(&rej[..]).remote_comm_id(), 0x7777);
    let mut f6 = Fabric::new(4);
    f6.nodes[1].cm.listen(PORT, "::".parse().unwrap()).unwrap();
    f6.nodes[1].auto.accept = false;
    f6.inject(1, &req).unwrap();
    let p = last_request(&f6.nodes[1]);
    assert_eq!(
        f6.nodes[1].cm.addresses(p).unwrap(),
        (SocketAddr::new(v6.dst, PORT), v6.src)
    );
    // A malformed cma_hdr behind a live listener: REJ 28, no state. (From another QP: the
    // first REQ's connection is live and names its QPN, which would make this one stale.)
    let mut bad = req;
    Req::new_unchecked(&mut bad[..]).private_data_mut()[0] = 1;
    Req::new_unchecked(&mut bad[..]).set_local_comm_id(0x8888);
    Req::new_unchecked(&mut bad[..]).set_local_qpn(0x4242);
    f6.inject(1, &bad).unwrap();
    let rej = f6.nodes[1].last_sent(attr::REJ);
    assert_eq!(
        (
            Rej::new_unchecked(&rej[..]).reason(),
            Rej::new_unchecked(&rej[..]).remote_comm_id()
        ),
        (28, 0x8888)
    );
    assert_eq!(f6.nodes[1].cm.live_connections(), 1);
}

#[test]
fn messages_for_unknown_communication_ids_are_dropped_or_answered_as_linux_does() {
    let mut f = Fabric::new(4);
    f.listen(1);
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    let passive = last_request(&f.nodes[1]);
    let sent_before = (f.nodes[0].sent.len(), f.nodes[1].sent.len());
    let bogus = passive.0 ^ 0x0100_0000; // right slot, wrong generation
    for (attribute, name) in [
        (attr::REP, "REP"),
        (attr::RTU, "RTU"),
        (attr::REJ, "REJ"),
        (attr::MRA, "MRA"),
        (attr::DREP, "DREP"),
    ] {
        for remote in [bogus, 0, 0xFFFF_FFFF, 12345] {
            let mut m = new_cm_mad(attribute, 99);
            // Remote Comm ID is at body offset 4 in all of these.
            m[28..32].copy_from_slice(&remote.to_be_bytes());
            m[24..28].copy_from_slice(&active.0.to_be_bytes());
            assert_eq!(
                f.inject(1, &m),
                Err(Dropped::UnknownConnection),
                "{name} {remote:#x}"
            );
        }
    }
    assert_eq!((f.nodes[0].sent.len(), f.nodes[1].sent.len()), sent_before);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Established));
    assert_eq!(
        f.nodes[1].events.len(),
        2,
        "no event for the bogus messages"
    );
    // A DREQ for a connection we do not have still gets a DREP (cm_issue_drep), IDs
    // swapped, TID echoed; nothing else changes.
    let mut m = new_cm_mad(attr::DREQ, 0xABCD);
    let mut d = Dreq::new_unchecked(&mut m[..]);
    d.set_local_comm_id(0x4242);
    d.set_remote_comm_id(bogus);
    assert_eq!(f.inject(1, &m), Ok(()));
    let drep_mad = f.nodes[1].last_sent(attr::DREP);
    let drep = Drep::new_checked(&drep_mad[..]).unwrap();
    assert_eq!(
        (drep.local_comm_id(), drep.remote_comm_id()),
        (bogus, 0x4242)
    );
    assert_eq!(tid_of(&drep_mad), 0xABCD);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Established));
    // A DREQ for the live connection but from another peer ID: the same DREP, no event.
    let mut m = new_cm_mad(attr::DREQ, 1);
    let mut d = Dreq::new_unchecked(&mut m[..]);
    d.set_local_comm_id(active.0 ^ 1);
    d.set_remote_comm_id(passive.0);
    assert_eq!(f.inject(1, &m), Ok(()));
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Established));
    // A DREQ naming another QPN is ignored (Linux: local_qpn check), no answer.
    let mut m = new_cm_mad(attr::DREQ, 1);
    let mut d = Dreq::new_unchecked(&mut m[..]);
    d.set_local_comm_id(active.0);
    d.set_remote_comm_id(passive.0);
    d.set_remote_qpn(0xFFFFFF);
    let n = f.nodes[1].sent.len();
    assert_eq!(f.inject(1, &m), Err(Dropped::QpnMismatch));
    assert_eq!(f.nodes[1].sent.len(), n);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Established));
    // Malformed MADs: dropped with the codec's reason, nothing changes.
    let good = f.nodes[0].last_sent(attr::RTU);
    assert_eq!(
        f.inject(1, &good[..100]),
        Err(Dropped::Malformed(WireError::Truncated))
    );
    let mut v1 = good;
    v1[2] = 1;
    assert_eq!(
        f.inject(1, &v1),
        Err(Dropped::Malformed(WireError::ClassVersion(1)))
    );
    // An RTU again: ignored (cm.md §6.1).
    assert_eq!(f.inject(1, &good), Err(Dropped::WrongState));
    assert_eq!(f.nodes[1].sent.len(), n);
}

#[test]
fn duplicates_get_the_answers_linux_gives() {
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.accept = false;
    f.nodes[0].auto.complete = false;
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[1].events.is_empty());
    let passive = last_request(&f.nodes[1]);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::MraReqSent));
    let req = f.nodes[0].last_sent(attr::REQ);

    // Duplicate REQ while the consumer decides: MRA for the REQ, service timeout 24.
    assert_eq!(f.inject(1, &req), Ok(()));
    let mra_mad = f.nodes[1].last_sent(attr::MRA);
    let mra = Mra::new_checked(&mra_mad[..]).unwrap();
    assert_eq!(
        (mra.local_comm_id(), mra.remote_comm_id()),
        (passive.0, active.0)
    );
    assert_eq!((mra.message_mraed(), mra.service_timeout()), (0, 24));
    assert_eq!(tid_of(&mra_mad), tid_of(&req));
    assert_eq!(f.nodes[1].cm.live_connections(), 1, "no second connection");
    // The MRA stretches the active side's wait to conv(24) + conv(19).
    let now = f.now;
    assert_eq!(f.inject(0, &mra_mad), Ok(()));
    assert_eq!(f.nodes[0].cm.state(active), Some(State::MraReqRcvd));
    assert_eq!(
        f.nodes[0].cm.next_timer(),
        Some(now + 65_536 * MS + 2048 * MS)
    );
    assert_eq!(f.inject(0, &mra_mad), Err(Dropped::Duplicate));

    // The consumer accepts: REP. A duplicate REQ now is dropped (the REP retransmits).
    let now = f.now;
    let p = AcceptParams {
        local_qpn: 0x999,
        starting_psn: 0x1234,
        limits: ReadLimits::new(4, 4),
        rnr_retry_count: 7,
        private_data: &[0xEE; 196],
    };
    assert_eq!(
        f.nodes[1].cm.accept(
            now,
            passive,
            &AcceptParams {
                private_data: &[0; 197],
                ..p
            }
        ),
        Err(CmError::PrivateDataTooLong)
    );
    f.nodes[1].cm.accept(now, passive, &p).unwrap();
    assert_eq!(
        f.nodes[1].cm.accept(now, passive, &p),
        Err(CmError::InvalidState)
    );
    f.pump();
    let n = f.nodes[1].sent.len();
    assert_eq!(f.inject(1, &req), Err(Dropped::Duplicate));
    assert_eq!(f.nodes[1].sent.len(), n);

    // The REP arrives; a duplicate REP before CompleteConnect gets an MRA for the REP.
    f.run_until(100 * MS, |f| !f.nodes[0].events.is_empty());
    assert_eq!(f.nodes[0].events_of(active), [Event::Accepted]);
    assert_eq!(
        f.nodes[0].cm.peer_private_data(active).unwrap(),
        &[0xEE; 196]
    );
    let rep = f.nodes[1].last_sent(attr::REP);
    assert_eq!(f.inject(0, &rep), Ok(()));
    let mra = f.nodes[0].last_sent(attr::MRA);
    let mra = Mra::new_checked(&mra[..]).unwrap();
    assert_eq!(
        (
            mra.message_mraed(),
            mra.local_comm_id(),
            mra.remote_comm_id()
        ),
        (1, active.0, passive.0)
    );
    // ... which the passive side takes as MRA_REP_RCVD.
    let now = f.now;
    assert_eq!(f.inject(1, mra.as_bytes()), Ok(()));
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::MraRepRcvd));
    assert_eq!(
        f.nodes[1].cm.next_timer(),
        Some(now + 65_536 * MS + 2048 * MS)
    );

    // CompleteConnect: RTU; a duplicate REP now gets the RTU again.
    f.nodes[0].cm.complete_connect(active).unwrap();
    assert_eq!(
        f.nodes[0].cm.complete_connect(active),
        Err(CmError::InvalidState)
    );
    f.pump();
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Established));
    let rtus = f.nodes[0].count_sent(attr::RTU);
    assert_eq!(f.inject(0, &rep), Ok(()));
    assert_eq!(f.nodes[0].count_sent(attr::RTU), rtus + 1);
    let first_rtu = f.nodes[0]
        .sent
        .iter()
        .find(|s| attr_of(&s.1) == attr::RTU)
        .unwrap()
        .1;
    assert_eq!(f.nodes[0].last_sent(attr::RTU), first_rtu);

    // Disconnect; a duplicate DREQ in TIMEWAIT gets the DREP again, with its own TID.
    f.nodes[0].cm.disconnect(f.now, active).unwrap();
    f.pump();
    f.run_until(100 * MS, |f| {
        f.nodes[0].cm.state(active) == Some(State::Timewait)
    });
    let mut dreq = f.nodes[0].last_sent(attr::DREQ);
    dreq[8..16].copy_from_slice(&77u64.to_be_bytes());
    let dreps = f.nodes[1].count_sent(attr::DREP);
    assert_eq!(f.inject(1, &dreq), Ok(()));
    assert_eq!(f.nodes[1].count_sent(attr::DREP), dreps + 1);
    assert_eq!(tid_of(&f.nodes[1].last_sent(attr::DREP)), 77);

    // The same REQ in TIMEWAIT: REJ 10, stale connection.
    assert_eq!(f.inject(1, &req), Ok(()));
    let rej = f.nodes[1].last_sent(attr::REJ);
    let rej = Rej::new_checked(&rej[..]).unwrap();
    assert_eq!(
        (
            rej.reason(),
            rej.message_rejected(),
            rej.remote_comm_id(),
            rej.local_comm_id()
        ),
        (10, 2, active.0, passive.0)
    );
    // A new REQ (new comm ID) from the QPN whose connection is in TIMEWAIT is not stale:
    // Linux forgets the remote QPN on entering TIMEWAIT (cm_enter_timewait), so a peer that
    // got the QPN again from its device connects at once: a new connection, no REJ.
    let rejs = f.nodes[1].count_sent(attr::REJ);
    let mut fresh = req;
    Req::new_unchecked(&mut fresh[..]).set_local_comm_id(0x5151);
    assert_eq!(f.inject(1, &fresh), Ok(()));
    assert_eq!(f.nodes[1].count_sent(attr::REJ), rejs);
    assert_eq!(f.nodes[1].cm.live_connections(), 2);
    assert_eq!(f.nodes[1].events_of(passive).len(), 4);
    // The same QPN while that new connection is live: stale, REJ 10, no state.
    let mut again = req;
    Req::new_unchecked(&mut again[..]).set_local_comm_id(0x6161);
    assert_eq!(f.inject(1, &again), Ok(()));
    let rej = f.nodes[1].last_sent(attr::REJ);
    assert_eq!(
        (
            Rej::new_unchecked(&rej[..]).reason(),
            Rej::new_unchecked(&rej[..]).remote_comm_id()
        ),
        (10, 0x6161)
    );
    assert_eq!(f.nodes[1].cm.live_connections(), 2);
}

#[test]
fn reject_carries_private_data_and_failures_reach_both_sides() {
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.accept = false;
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[1].events.is_empty());
    let passive = last_request(&f.nodes[1]);
    let data = [0x5Au8; 148];
    assert_eq!(
        f.nodes[1].cm.reject(passive, &[0; 149]),
        Err(CmError::PrivateDataTooLong)
    );
    f.nodes[1].cm.reject(passive, &data).unwrap();
    assert_eq!(
        f.nodes[1].cm.reject(passive, &data),
        Err(CmError::InvalidState)
    );
    f.pump();
    f.run_until(100 * MS, |f| !f.nodes[0].events.is_empty());
    assert_eq!(
        f.nodes[0].events_of(active),
        [Event::Rejected { reason: 28 }]
    );
    assert_eq!(f.nodes[0].cm.peer_private_data(active).unwrap(), &data);
    let rej = f.nodes[1].last_sent(attr::REJ);
    let rej = Rej::new_checked(&rej[..]).unwrap();
    assert_eq!(
        (
            rej.message_rejected(),
            rej.local_comm_id(),
            rej.remote_comm_id()
        ),
        (0, passive.0, active.0)
    );
    assert!(f.nodes[1].mods.is_empty() && f.nodes[0].mods.is_empty());

    // The active consumer refuses the REP: REJ for the REP; the accepting side's NdkAccept
    // fails (Rejected after REP_SENT) and its QP goes to ERR.
    f.nodes[1].auto.accept = true;
    f.nodes[0].auto.complete = false;
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| {
        f.nodes[0].events_of(active) == [Event::Accepted]
    });
    let passive = last_request(&f.nodes[1]);
    f.nodes[0].cm.reject(active, b"no").unwrap();
    f.pump();
    f.run_until(100 * MS, |f| f.nodes[1].events_of(passive).len() == 2);
    assert_eq!(
        f.nodes[1].events_of(passive)[1],
        Event::Rejected { reason: 28 }
    );
    assert_eq!(
        &f.nodes[1].cm.peer_private_data(passive).unwrap()[..3],
        b"no\0"
    );
    assert_eq!(
        f.nodes[1].mods.last().unwrap(),
        &(passive, f.nodes[1].mods[0].1, QpTransition::Error)
    );
    assert_eq!(f.nodes[0].mods.last().unwrap().2, QpTransition::Error);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Idle));
}

#[test]
fn releasing_mid_handshake_tells_the_peer_as_cm_destroy_id_does() {
    // Active releases in REQ_SENT: REJ 4 (timeout), MsgREJected 2, ARI = our CA GUID.
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.accept = false;
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[1].events.is_empty());
    let passive = last_request(&f.nodes[1]);
    f.nodes[0].cm.release(f.now, active).unwrap();
    f.pump();
    assert_eq!(f.nodes[0].cm.live_connections(), 0);
    let rej = f.nodes[0].last_sent(attr::REJ);
    let rej = Rej::new_checked(&rej[..]).unwrap();
    assert_eq!((rej.reason(), rej.message_rejected()), (4, 2));
    assert_eq!(rej.ari(), f.nodes[0].cm.config().ca_guid.to_be_bytes());
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    assert_eq!(
        f.nodes[1].events_of(passive)[1],
        Event::Rejected { reason: 4 }
    );
    // The passive consumer's Accept now fails: the connection is gone (STATUS_CONNECTION_ABORTED).
    let p = AcceptParams {
        local_qpn: 1,
        starting_psn: 1,
        limits: ReadLimits::default(),
        rnr_retry_count: 0,
        private_data: b"",
    };
    assert_eq!(
        f.nodes[1].cm.accept(f.now, passive, &p),
        Err(CmError::InvalidState)
    );
    f.nodes[1].cm.release(f.now, passive).unwrap();
    assert_eq!(f.nodes[1].cm.live_connections(), 0);
    assert!(f.nodes[0].events.is_empty(), "no event after release");

    // Established, then the active side releases: DREQ, TIMEWAIT, freed with no event.
    let mut f = Fabric::new(4);
    f.listen(1);
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    f.nodes[0].cm.release(f.now, active).unwrap();
    f.pump();
    assert_eq!(
        f.nodes[0].cm.state(active),
        None,
        "the consumer's handle is gone at once"
    );
    assert_eq!(
        f.nodes[0].cm.live_connections(),
        1,
        "the connection still disconnects"
    );
    f.run_idle();
    assert_eq!(f.nodes[0].cm.live_connections(), 0);
    assert_eq!(f.nodes[0].events_of(active), [Event::Accepted]);
    assert_eq!(f.nodes[0].sent_attrs(), [attr::REQ, attr::RTU, attr::DREQ]);
    let passive = last_request(&f.nodes[1]);
    assert_eq!(
        f.nodes[1].events_of(passive)[2..],
        [
            Event::DisconnectRequested,
            Event::Disconnected { timed_out: false }
        ]
    );
}

#[test]
fn crossing_dreqs_and_a_silent_peer_both_end_in_timewait() {
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.disconnect_on_request = false;
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    let passive = last_request(&f.nodes[1]);
    let now = f.now;
    f.nodes[0].cm.disconnect(now, active).unwrap();
    f.nodes[1].cm.disconnect(now, passive).unwrap();
    assert_eq!(
        f.nodes[1].cm.disconnect(now, passive),
        Err(CmError::InvalidState)
    );
    f.pump();
    f.run_until(100 * MS, |f| {
        f.nodes[0].cm.state(active) == Some(State::Timewait)
            && f.nodes[1].cm.state(passive) == Some(State::Timewait)
    });
    assert_eq!(
        f.nodes[0].events_of(active)[1..],
        [Event::Disconnected { timed_out: false }]
    );
    assert_eq!(
        f.nodes[1].events_of(passive)[2..],
        [Event::Disconnected { timed_out: false }]
    );
    assert_eq!(f.nodes[0].count_sent(attr::DREP), 1);
    assert_eq!(f.nodes[1].count_sent(attr::DREP), 1);

    // DREQ to a peer that went silent: 16 DREQs, then TIMEWAIT with timed_out.
    let mut f = Fabric::new(4);
    f.listen(1);
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    f.deaf[1] = true;
    let t0 = f.now;
    f.nodes[0].cm.disconnect(t0, active).unwrap();
    f.pump();
    assert!(f.run_until(200_000 * MS, |f| f.nodes[0].events_of(active).len() == 2));
    let (at, _, e) = *f.nodes[0].events.last().unwrap();
    assert_eq!(
        (at, e),
        (t0 + 16 * REQ_TRY, Event::Disconnected { timed_out: true })
    );
    assert_eq!(f.nodes[0].count_sent(attr::DREQ), 16);
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Timewait));
}

#[test]
fn a_lossy_duplicating_reordering_fabric_still_connects_every_connection() {
    for seed in [1u64, 0xDEAD_BEEF, 42, 0x1234_5678_9ABC] {
        let mut f = Fabric::lossy(64, seed);
        f.listen(1);
        f.listen(0);
        let mut conns = Vec::new();
        // 32 each way, all at once, both sides connecting to each other.
        for k in 0..64 {
            let from = k % 2;
            conns.push((from, f.connect(from, PORT, &[k as u8; 56])));
        }
        let all_up = |f: &Fabric| {
            conns
                .iter()
                .all(|&(from, c)| f.nodes[from].cm.state(c) == Some(State::Established))
                && f.nodes.iter().all(|n| {
                    n.events
                        .iter()
                        .filter(|e| e.2 == Event::Established)
                        .count()
                        == 32
                })
        };
        assert!(
            f.run_until(600_000 * MS, all_up),
            "seed {seed:#x}: not all connected"
        );
        for &(from, c) in &conns {
            assert_eq!(
                f.nodes[from].events_of(c),
                [Event::Accepted],
                "seed {seed:#x}"
            );
        }
        // Every passive side saw each request once, with its private data.
        for n in &f.nodes {
            let reqs: Vec<ConnId> = n
                .events
                .iter()
                .filter(|e| matches!(e.2, Event::ConnectRequest { .. }))
                .map(|e| e.1)
                .collect();
            assert_eq!(reqs.len(), 32, "seed {seed:#x}");
        }
        // Disconnect everything from the active sides; everything ends and is released.
        let now = f.now;
        for &(from, c) in &conns {
            f.nodes[from].cm.disconnect(now, c).unwrap();
        }
        f.pump();
        let all_down = |f: &Fabric| {
            conns
                .iter()
                .all(|&(from, c)| f.nodes[from].events_of(c).len() == 2)
        };
        assert!(
            f.run_until(600_000 * MS, all_down),
            "seed {seed:#x}: not all disconnected"
        );
        for n in &mut f.nodes {
            n.auto.release_when_done = true;
        }
        let now = f.now;
        for &(from, c) in &conns {
            f.nodes[from].cm.release(now, c).unwrap();
        }
        let passive: Vec<(usize, ConnId)> = (0..2)
            .flat_map(|i| {
                f.nodes[i]
                    .events
                    .iter()
                    .filter(|e| matches!(e.2, Event::ConnectRequest { .. }))
                    .map(move |e| (i, e.1))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (i, c) in passive {
            // Disconnected already, or about to be: release either way.
            let _ = f.nodes[i].cm.release(now, c);
        }
        f.pump();
        f.run_idle();
        assert_eq!(
            (
                f.nodes[0].cm.live_connections(),
                f.nodes[1].cm.live_connections()
            ),
            (0, 0),
            "seed {seed:#x}"
        );
        assert!(
            f.nodes
                .iter()
                .all(|n| !n.dropped.contains(&Dropped::QueueFull))
        );
        assert!(f.delivered > 64 * 5);
        // The fabric did its worst: retransmissions, and duplicates seen as such.
        let reqs: usize = f.nodes.iter().map(|n| n.count_sent(attr::REQ)).sum();
        let reps: usize = f.nodes.iter().map(|n| n.count_sent(attr::REP)).sum();
        let dreqs: usize = f.nodes.iter().map(|n| n.count_sent(attr::DREQ)).sum();
        assert!(
            reqs > 64 && reps > 64 && dreqs > 64,
            "seed {seed:#x}: {reqs} {reps} {dreqs}"
        );
        assert!(
            f.nodes
                .iter()
                .any(|n| n.dropped.contains(&Dropped::Duplicate))
        );
    }
}

#[test]
fn a_req_flood_never_exceeds_the_table_and_leaves_no_state_behind() {
    let mut f = Fabric::new(8);
    f.nodes[1].auto.accept = false;
    f.listen(1);
    let template = {
        let mut g = Fabric::new(8);
        g.listen(1);
        g.connect(0, PORT, b"");
        g.nodes[0].last_sent(attr::REQ)
    };
    let mut rng = Rng(77);
    let mut accepted = Vec::new();
    for k in 0..2_000u32 {
        let mut m = template;
        let mut r = Req::new_unchecked(&mut m[..]);
        r.set_local_comm_id(k + 1);
        r.set_local_qpn(k + 0x1000);
        r.set_local_ca_guid(rng.next());
        match f.inject(1, &m) {
            Ok(()) => accepted.push(k),
            Err(d) => assert_eq!(d, Dropped::TableFull, "REQ {k}"),
        }
        assert!(f.nodes[1].cm.live_connections() <= 8);
    }
    assert_eq!(accepted.len(), 8);
    assert_eq!(f.nodes[1].cm.live_connections(), 8);
    assert_eq!(f.nodes[1].events.len(), 8);
    assert!(
        f.nodes[1].sent.is_empty(),
        "a full table answers nothing (the peer retries)"
    );
    // The consumer rejects them all: the table empties.
    let ids: Vec<ConnId> = f.nodes[1].events.iter().map(|e| e.1).collect();
    for c in ids {
        f.nodes[1].cm.reject(c, b"").unwrap();
        f.nodes[1].cm.release(f.now, c).unwrap();
        f.pump();
    }
    assert_eq!(f.nodes[1].cm.live_connections(), 0);
    assert_eq!(f.nodes[1].cm.next_timer(), None);
    // A flood at a port nobody listens on: one REJ 8 each and never a slot.
    let mut m = template;
    Req::new_unchecked(&mut m[..]).set_service_id(tcp_service_id(9));
    for k in 0..1_000u32 {
        Req::new_unchecked(&mut m[..]).set_local_comm_id(k + 1);
        assert_eq!(f.inject(1, &m), Ok(()));
        assert_eq!(f.nodes[1].cm.live_connections(), 0);
    }
    assert_eq!(f.nodes[1].count_sent(attr::REJ), 8 + 1_000);
    // Mutated MADs of every kind: never a panic, never beyond the table.
    let mut rng = Rng(0xF00D);
    let seeds = [
        template,
        new_cm_mad(attr::REP, 1),
        new_cm_mad(attr::DREQ, 1),
        new_cm_mad(attr::REJ, 1),
    ];
    for i in 0..20_000usize {
        let mut m = seeds[i % seeds.len()];
        for _ in 0..1 + rng.next() % 8 {
            let at = (rng.next() % MAD_LEN as u64) as usize;
            if at >= 24 || rng.chance(100) {
                m[at] = rng.next() as u8;
            }
        }
        let _ = f.inject(1, &m);
        assert!(f.nodes[1].cm.live_connections() <= 8);
    }
}

#[test]
fn a_thousand_connect_disconnect_cycles_leave_no_id_or_slot_behind() {
    let mut f = Fabric::new(4);
    f.listen(1);
    for n in &mut f.nodes {
        n.auto.release_when_done = true;
    }
    let mut ids = std::collections::HashSet::new();
    for cycle in 0..1_000 {
        let active = f.connect(0, PORT, b"cycle");
        assert!(
            ids.insert(active.0),
            "cycle {cycle}: ID {:#x} reissued",
            active.0
        );
        assert_ne!(active.0, 0);
        let up = |f: &Fabric| {
            f.nodes[1]
                .events
                .last()
                .is_some_and(|e| e.2 == Event::Established)
                && f.nodes[1]
                    .events
                    .iter()
                    .filter(|e| e.2 == Event::Established)
                    .count()
                    == cycle + 1
        };
        assert!(f.run_until(100 * MS, up), "cycle {cycle}");
        let passive = last_request(&f.nodes[1]);
        let now = f.now;
        if cycle % 2 == 0 {
            f.nodes[0].cm.disconnect(now, active).unwrap();
        } else {
            f.nodes[1].cm.disconnect(now, passive).unwrap();
        }
        f.pump();
        f.run_idle();
        assert_eq!(
            (
                f.nodes[0].cm.live_connections(),
                f.nodes[1].cm.live_connections()
            ),
            (0, 0),
            "cycle {cycle}"
        );
        assert_eq!(f.nodes[0].cm.next_timer(), None);
        assert_eq!(
            f.nodes[0].cm.pending_actions() + f.nodes[1].cm.pending_actions(),
            0
        );
    }
    assert_eq!(f.nodes[0].count_sent(attr::REQ), 1_000);
    assert_eq!(f.nodes[1].count_sent(attr::REP), 1_000);
    // Each side's IDs: distinct over all 1,000 cycles, though the table has 4 slots.
    let passive_ids: std::collections::HashSet<u32> = f.nodes[1]
        .events
        .iter()
        .filter(|e| matches!(e.2, Event::ConnectRequest { .. }))
        .map(|e| e.1.0)
        .collect();
    assert_eq!(passive_ids.len(), 1_000);
}

/// A connect from 10.0.0.1:50000 to 10.0.0.2:445 on the default path, for the tests that
/// fill tables and queues without a peer.
fn table_params(qpn: u32) -> ConnectParams<'static> {
    ConnectParams {
        src: "10.0.0.1:50000".parse().unwrap(),
        dst: "10.0.0.2:445".parse().unwrap(),
        path: Path::default(),
        local_qpn: qpn,
        starting_psn: 0,
        limits: ReadLimits::default(),
        path_mtu: 3,
        retry_count: 7,
        rnr_retry_count: 7,
        private_data: b"",
    }
}

#[test]
fn communication_ids_are_nonzero_unique_seeded_and_held_through_timewait() {
    let cfg = |seed| {
        let mut c = CmConfig::rdma_cm_defaults(16, 1, seed);
        c.actions = 256;
        c
    };
    let mut a = Cm::new(cfg(0x1111_2222)).unwrap();
    let mut b = Cm::new(cfg(0x3333_4444)).unwrap();
    let ia: Vec<u32> = (0..16)
        .map(|q| a.connect(0, &table_params(q)).unwrap().0)
        .collect();
    let ib: Vec<u32> = (0..16)
        .map(|q| b.connect(0, &table_params(q)).unwrap().0)
        .collect();
    assert!(ia.iter().all(|&i| i != 0));
    let set: std::collections::HashSet<_> = ia.iter().collect();
    assert_eq!(set.len(), 16);
    assert_ne!(ia[0], ib[0], "seeded");
    assert!(
        ia.windows(2).any(|w| w[1] != w[0].wrapping_add(1)),
        "not sequential"
    );
    assert_eq!(a.connect(0, &table_params(99)), Err(CmError::TableFull));
    // Private data limits: 56 fits, 57 does not; mixed families refused.
    let mut c = Cm::new(cfg(5)).unwrap();
    assert!(
        c.connect(
            0,
            &ConnectParams {
                private_data: &[1; 56],
                ..table_params(1)
            }
        )
        .is_ok()
    );
    assert_eq!(
        c.connect(
            0,
            &ConnectParams {
                private_data: &[1; 57],
                ..table_params(1)
            }
        ),
        Err(CmError::PrivateDataTooLong)
    );
    assert_eq!(
        c.connect(
            0,
            &ConnectParams {
                dst: "[::1]:445".parse().unwrap(),
                ..table_params(1)
            }
        ),
        Err(CmError::AddressFamily)
    );
    // An ID in TIMEWAIT is not reissued: a one-slot table whose one connection is in
    // TIMEWAIT, still held by its consumer, stays full until TIMEWAIT ends (a held entry
    // is never reclaimed; a released one is, see
    // `a_full_table_reclaims_its_oldest_released_timewait_entry`).
    let mut f = Fabric::new(1);
    f.listen(1);
    let first = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2);
    f.nodes[0].cm.disconnect(f.now, first).unwrap();
    f.pump();
    f.run_until(100 * MS, |f| {
        f.nodes[0].cm.state(first) == Some(State::Timewait) && f.wire.is_empty()
    });
    let qpn = f.nodes[0].take_qpn();
    let p = ConnectParams {
        src: SocketAddr::new(f.nodes[0].ip, 1),
        dst: SocketAddr::new(f.nodes[1].ip, PORT),
        path: f.path(0),
        local_qpn: qpn,
        ..table_params(qpn)
    };
    assert_eq!(f.nodes[0].cm.connect(f.now, &p), Err(CmError::TableFull));
    f.nodes[0].cm.release(f.now, first).unwrap();
    f.pump();
    assert_eq!(f.nodes[0].cm.live_connections(), 1, "released, in TIMEWAIT");
    let second = f.nodes[0].cm.connect(f.now, &p).unwrap();
    assert_ne!(second, first);
    assert_eq!(f.nodes[0].cm.timewait_reclaimed(), 1);
    // Bad configurations are refused.
    assert_eq!(
        Cm::new(CmConfig {
            capacity: 0,
            ..cfg(1)
        })
        .err(),
        Some(CmError::InvalidParameter)
    );
    assert_eq!(
        Cm::new(CmConfig {
            capacity: (1 << 16) + 1,
            ..cfg(1)
        })
        .err(),
        Some(CmError::InvalidParameter)
    );
    assert_eq!(
        Cm::new(CmConfig {
            actions: 3,
            ..cfg(1)
        })
        .err(),
        Some(CmError::InvalidParameter)
    );
}

/// Connect/disconnect cycles faster than TIMEWAIT (issue 22 item 5): with every slot held
/// by a released connection in TIMEWAIT, a connect, and a REQ, reclaims the entry due to end
/// first, the oldest, instead of failing with TableFull (Linux's ib_cm has no bound; TCP
/// over tcp_max_tw_buckets skips TIMEWAIT: cm.md §6.4). Its slot takes a new generation, so
/// no ID is reissued; entries a consumer still holds are never taken.
#[test]
fn a_full_table_reclaims_its_oldest_released_timewait_entry() {
    const CAP: usize = 4;
    let mut f = Fabric::new(CAP);
    f.listen(1);
    for n in &mut f.nodes {
        n.auto.release_when_done = true;
    }
    let mut ids = Vec::new();
    let mut passive = Vec::new();
    for cycle in 0..3 * CAP {
        let held = f.nodes[0].cm.live_connections();
        let active = f.connect(0, PORT, b"");
        assert!(!ids.contains(&active), "cycle {cycle}: ID reissued");
        let done = |f: &Fabric| {
            f.nodes[1]
                .events
                .iter()
                .filter(|e| e.2 == Event::Established)
                .count()
                == cycle + 1
        };
        assert!(f.run_until(100 * MS, done), "cycle {cycle}");
        passive.push(last_request(&f.nodes[1]));
        f.nodes[0].cm.disconnect(f.now, active).unwrap();
        f.pump();
        assert!(
            f.run_until(100 * MS, |f| f.wire.is_empty()),
            "cycle {cycle}"
        );
        // Both sides in TIMEWAIT, released; the table never grows past its capacity.
        assert_eq!(f.nodes[0].cm.live_connections(), (held + 1).min(CAP));
        assert_eq!(f.nodes[1].cm.live_connections(), (held + 1).min(CAP));
        if cycle >= CAP {
            // The slot reused is the oldest entry's: IDs carry their slot in their low
            // bits under the seed, so the two IDs agree there.
            let oldest = ids[cycle - CAP];
            let mask = (CAP - 1) as u32;
            assert_eq!(
                (active.0 ^ oldest.0) & mask,
                0,
                "cycle {cycle}: the oldest entry's slot"
            );
            let (po, pn) = (passive[cycle - CAP], passive[cycle]);
            assert_eq!((po.0 ^ pn.0) & mask, 0, "cycle {cycle}: passive side too");
        }
        ids.push(active);
        f.now += 10 * MS;
    }
    assert!(f.now - 1_000 * MS < 2_000 * MS, "all within one TIMEWAIT");
    let reclaimed = (2 * CAP) as u64;
    assert_eq!(f.nodes[0].cm.timewait_reclaimed(), reclaimed);
    assert_eq!(f.nodes[1].cm.timewait_reclaimed(), reclaimed);
    // TIMEWAIT ends for the rest: nothing left.
    f.run_idle();
    assert_eq!(f.nodes[0].cm.live_connections(), 0);
    assert_eq!(f.nodes[1].cm.live_connections(), 0);
    // A table full of connections the consumer holds is still full.
    let mut a = Cm::new(CmConfig::rdma_cm_defaults(2, 1, 3)).unwrap();
    a.connect(0, &table_params(1)).unwrap();
    a.connect(0, &table_params(2)).unwrap();
    assert_eq!(a.connect(0, &table_params(3)), Err(CmError::TableFull));
    assert_eq!(a.timewait_reclaimed(), 0);
}

#[test]
fn a_full_action_queue_refuses_inputs_without_changing_state() {
    let mut cfg = CmConfig::rdma_cm_defaults(8, 1, 9);
    cfg.actions = 4;
    let mut cm = Cm::new(cfg).unwrap();
    let p = table_params(5);
    let c = cm.connect(0, &p).unwrap();
    assert_eq!(cm.pending_actions(), 1);
    assert_eq!(cm.connect(0, &p), Err(CmError::QueueFull));
    assert_eq!(cm.live_connections(), 1);
    let mut rej = new_cm_mad(attr::REJ, 0);
    Rej::new_unchecked(&mut rej[..]).set_remote_comm_id(c.0);
    assert_eq!(
        cm.on_mad(0, &Path::default(), &rej),
        Err(Dropped::QueueFull)
    );
    assert_eq!(cm.state(c), Some(State::ReqSent));
    // The timer holds its deadline until there is room.
    cm.on_timer(REQ_TRY);
    assert_eq!(cm.next_timer(), Some(REQ_TRY));
    assert!(matches!(cm.poll_action(), Some(Action::Send { .. })));
    cm.on_timer(REQ_TRY);
    assert_eq!(cm.next_timer(), Some(2 * REQ_TRY));
    assert!(matches!(cm.poll_action(), Some(Action::Send { .. })));
    assert_eq!(cm.on_mad(0, &Path::default(), &rej), Ok(()));
    assert_eq!(
        cm.poll_action(),
        Some(Action::Deliver {
            conn: c,
            event: Event::Rejected { reason: 0 }
        })
    );
    assert!(matches!(parse_any(&rej), Ok(Message::Rej(_))));
    // A release with the queue full is deferred, not refused (issue 22 item 7): the next
    // action taken with room performs it (here: the REJ 4 of a REQ_SENT connection).
    let d = cm.connect(0, &p).unwrap();
    assert_eq!(cm.pending_actions(), 1, "its REQ");
    assert_eq!(cm.release(0, d), Ok(()));
    assert_eq!(cm.live_connections(), 2, "not yet");
    assert!(
        matches!(cm.poll_action(), Some(Action::Send { .. })),
        "the REQ"
    );
    let rej4 = match cm.poll_action() {
        Some(Action::Send { mad, .. }) => mad,
        a => panic!("the deferred release's REJ: {a:?}"),
    };
    match parse_any(&rej4) {
        Ok(Message::Rej(r)) => assert_eq!(r.reason(), 4),
        m => panic!("{m:?}"),
    }
    assert_eq!(cm.poll_action(), None);
    assert_eq!(cm.live_connections(), 1, "released");
    assert_eq!(cm.release(0, d), Err(CmError::UnknownConnection));
}

#[test]
fn ipv6_connects_with_native_gids_and_cma_hdr() {
    let mut f = Fabric::between("2001:db8::10", "2001:db8::20", 4);
    f.listen(1);
    let active = f.connect(0, PORT, &[0xAB; 56]);
    assert!(f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2));
    let req = f.nodes[0].last_sent(attr::REQ);
    let req = Req::new_checked(&req[..]).unwrap();
    assert_eq!(
        req.primary_local_gid(),
        "2001:db8::10"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );
    assert_eq!(req.private_data()[1], 0x60);
    let passive = last_request(&f.nodes[1]);
    let (local, peer) = f.nodes[1].cm.addresses(passive).unwrap();
    assert_eq!(local, "[2001:db8::20]:445".parse().unwrap());
    assert_eq!(peer, f.nodes[0].cm.addresses(active).unwrap().0);
    assert_eq!(
        f.nodes[1].cm.peer_private_data(passive).unwrap(),
        &[0xAB; 56]
    );
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Established));
}

#[test]
fn an_mra_stretches_the_req_timer_but_not_the_retry_budget() {
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.accept = false;
    let t0 = f.now;
    let active = f.connect(0, PORT, b"");
    assert!(f.run_until(10_000_000 * MS, |f| !f.nodes[0].events.is_empty()));
    // The first retransmission (t0 + 6144 ms) meets a consumer still deciding: MRA, which
    // arrives one round trip later and sets every later try to conv(24) + conv(19).
    let t_mra = t0 + REQ_TRY + 2 * f.latency;
    let try_after_mra = 65_536 * MS + 2048 * MS;
    assert_eq!(
        f.nodes[0].events,
        [(t_mra + 15 * try_after_mra, active, Event::TimedOut)]
    );
    assert_eq!(f.nodes[0].count_sent(attr::REQ), 16);
    assert_eq!(f.nodes[1].count_sent(attr::MRA), 15);
    assert_eq!(
        f.nodes[1].cm.live_connections(),
        1,
        "the request waits for its consumer"
    );
}

#[test]
fn first_data_before_the_rtu_establishes_and_a_dreq_while_accepting_too() {
    // The RTU is lost; the QP's first receive (COMM_EST) stands in for it.
    let mut f = Fabric::new(4);
    f.listen(1);
    let active = f.connect(0, PORT, b"");
    // Deliver the REQ and let the REP out, then drop what reaches node 1.
    assert!(f.run_until(100 * MS, |f| f.nodes[1].count_sent(attr::REP) == 1));
    f.deaf[1] = true;
    assert!(f.run_until(100 * MS, |f| f.nodes[0].cm.state(active)
        == Some(State::Established)));
    let passive = last_request(&f.nodes[1]);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::RepSent));
    // The REP left with the QP in RTR; RTS waits for the RTU or the first data.
    let mods = |f: &Fabric| -> Vec<&'static str> {
        f.nodes[1]
            .mods
            .iter()
            .filter(|m| m.0 == passive)
            .map(|m| match m.2 {
                QpTransition::Rtr(_) => "RTR",
                QpTransition::Rts(_) => "RTS",
                QpTransition::Error => "ERR",
            })
            .collect()
    };
    assert_eq!(mods(&f), ["RTR"]);
    f.nodes[1].cm.established(passive).unwrap();
    f.pump();
    assert_eq!(mods(&f), ["RTR", "RTS"]);
    assert_eq!(f.nodes[1].events_of(passive)[1], Event::Established);
    assert_eq!(
        f.nodes[1].cm.next_timer(),
        None,
        "no more REP retransmissions"
    );
    assert_eq!(
        f.nodes[1].cm.established(passive),
        Err(CmError::InvalidState)
    );
    let rtu = f.nodes[0].last_sent(attr::RTU);
    assert_eq!(f.inject(1, &rtu), Err(Dropped::WrongState));

    // A DREQ while REP_SENT: the connection was up after all; accept completes, then the
    // disconnect indication.
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.disconnect_on_request = false;
    let active = f.connect(0, PORT, b"");
    assert!(f.run_until(100 * MS, |f| f.nodes[1].count_sent(attr::REP) == 1));
    f.deaf[1] = true;
    assert!(f.run_until(100 * MS, |f| f.nodes[0].cm.state(active)
        == Some(State::Established)));
    f.deaf[1] = false;
    f.nodes[0].cm.disconnect(f.now, active).unwrap();
    f.pump();
    let passive = last_request(&f.nodes[1]);
    assert!(f.run_until(100 * MS, |f| f.nodes[1].events_of(passive).len() == 3));
    assert_eq!(
        f.nodes[1].events_of(passive)[1..],
        [Event::Established, Event::DisconnectRequested]
    );
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::DreqRcvd));
    // Its QP is left alone until the consumer disconnects (ndkpi.md §5.12: no flush on
    // the peer's request).
    assert!(!f.nodes[1].mods.iter().any(|m| m.2 == QpTransition::Error));
    f.nodes[1].cm.disconnect(f.now, passive).unwrap();
    f.pump();
    assert_eq!(f.nodes[1].mods.last().unwrap().2, QpTransition::Error);
}

#[test]
fn a_rej_on_an_established_connection_aborts_it_into_timewait() {
    let mut f = Fabric::new(4);
    f.listen(1);
    let active = f.connect(0, PORT, b"");
    assert!(f.run_until(100 * MS, |f| f.nodes[1].events.len() == 2));
    let passive = last_request(&f.nodes[1]);
    let mut m = new_cm_mad(attr::REJ, 5);
    let mut rej = Rej::new_unchecked(&mut m[..]);
    rej.set_local_comm_id(passive.0);
    rej.set_remote_comm_id(active.0);
    rej.set_message_rejected(2);
    rej.set_reason(6);
    assert_eq!(f.inject(0, &m), Ok(()));
    assert_eq!(
        f.nodes[0].events_of(active)[1],
        Event::Rejected { reason: 6 }
    );
    assert_eq!(f.nodes[0].mods.last().unwrap().2, QpTransition::Error);
    assert_eq!(f.nodes[0].cm.state(active), Some(State::Timewait));
    // From a stranger's ID: dropped.
    let mut m2 = m;
    Rej::new_unchecked(&mut m2[..]).set_local_comm_id(passive.0 ^ 1);
    assert_eq!(f.inject(0, &m2), Err(Dropped::UnknownConnection));
    assert_eq!(f.inject(0, &m), Err(Dropped::WrongState), "REJ in TIMEWAIT");
}

/// An `Action::Send` names the connection whose local communication ID its MAD carries
/// (bytes 24–27 of every CM message, cm.md §3); `None` only for the connectionless replies:
/// a REJ (attribute 0x0012) or a DREP (0x0016).
fn check_send_names_its_connection(conn: Option<ConnId>, mad: &[u8; MAD_LEN]) {
    let local_id = u32::from_be_bytes(mad[24..28].try_into().unwrap());
    let id = u16::from_be_bytes(mad[16..18].try_into().unwrap());
    match conn {
        Some(c) => assert_eq!(c.0, local_id, "a Send's connection is its MAD's local ID"),
        None => assert!(
            id == attr::REJ || id == attr::DREP,
            "only a REJ or DREP goes out with no connection, not {id:#06x}"
        ),
    }
}

/// The passive side runs a connection at the REQ's path MTU when it carries it, and refuses a
/// larger one with REJ 26 (Invalid MTU) before any state exists: the peer learns at once,
/// instead of at its first full-size packet.
#[test]
fn a_req_above_the_passive_sides_mtu_gets_rej_26() {
    for (max, asked, accepted) in [
        (5u8, 5u8, true),
        (3, 3, true),
        (3, 2, true),
        (3, 4, false),
        (1, 5, false),
    ] {
        let mut f = Fabric::new(4);
        f.nodes[1].cm = {
            let mut cfg = *f.nodes[1].cm.config();
            cfg.max_path_mtu = max;
            Cm::new(cfg).unwrap()
        };
        f.listen(1);
        let qpn = f.nodes[0].take_qpn();
        let params = ConnectParams {
            src: SocketAddr::new(f.nodes[0].ip, 50000),
            dst: SocketAddr::new(f.nodes[1].ip, PORT),
            path: f.path(0),
            local_qpn: qpn,
            starting_psn: 0x1234,
            limits: ReadLimits::new(4, 4),
            path_mtu: asked,
            retry_count: 7,
            rnr_retry_count: 6,
            private_data: &[],
        };
        let now = f.now;
        let active = f.nodes[0].cm.connect(now, &params).unwrap();
        f.pump();
        assert!(f.run_until(100 * MS, |f| !f.nodes[0].events_of(active).is_empty()));
        let what = format!("passive max {max}, REQ {asked}");
        if accepted {
            assert_eq!(f.nodes[0].events_of(active), [Event::Accepted], "{what}");
            // Both sides' RTR carries the REQ's MTU.
            for n in 0..2 {
                let mtu = f.nodes[n]
                    .mods
                    .iter()
                    .find_map(|(_, _, t)| match t {
                        QpTransition::Rtr(p) => Some(p.path_mtu),
                        _ => None,
                    })
                    .expect("an RTR");
                assert_eq!(mtu, asked, "{what}: node {n}'s RTR");
            }
        } else {
            assert_eq!(
                f.nodes[0].events_of(active),
                [Event::Rejected { reason: 26 }],
                "{what}"
            );
            assert_eq!(
                f.nodes[1].cm.live_connections(),
                0,
                "{what}: no passive state"
            );
            assert!(
                f.nodes[1].events.is_empty(),
                "{what}: the listener heard nothing"
            );
            let rej = f.nodes[1].last_sent(attr::REJ);
            let rej = Rej::new_checked(&rej[..]).unwrap();
            assert_eq!((rej.message_rejected(), rej.reason()), (0, 26), "{what}");
        }
    }
}

/// Issue 22, the sans-IO half (the wire tests are tests/ndk_cm_wire.rs): `on_mad` takes the
/// packet's destination GID as the port's only one, so a REQ naming another gets REJ 12
/// (`cm_req_handler`: Local ID 0, ARI the port's GID 0) and no connection; and an accept whose
/// modify failed (`Cm::accept_failed`) is a REJ for the REQ, reason 28, sent around the
/// connection, which goes IDLE and is freed at its release.
#[test]
fn a_req_naming_a_gid_not_ours_gets_rej_12_and_a_failed_accept_rejects_the_req() {
    let mut f = Fabric::new(4);
    f.listen(1);
    f.nodes[1].auto.accept = false;
    let active = f.connect(0, PORT, b"");
    f.run_until(100 * MS, |f| !f.nodes[1].events.is_empty());
    let passive = last_request(&f.nodes[1]);
    let req = f.nodes[0].last_sent(attr::REQ);

    let mut other = req;
    {
        let mut r = Req::new_unchecked(&mut other[..]);
        r.set_local_comm_id(0x7777);
        r.set_local_qpn(0x999);
        r.set_primary_remote_gid(gid_from_ip("10.9.9.9".parse().unwrap()));
    }
    let live = f.nodes[1].cm.live_connections();
    assert_eq!(f.inject(1, &other), Ok(()));
    let rej = f.nodes[1].last_sent(attr::REJ);
    let r = Rej::new_checked(&rej[..]).unwrap();
    assert_eq!(
        (
            r.local_comm_id(),
            r.remote_comm_id(),
            r.message_rejected(),
            r.reason()
        ),
        (0, 0x7777, 0, 12)
    );
    assert_eq!(r.ari(), &f.nodes[1].gid[..]);
    assert_eq!(tid_of(&rej), tid_of(&req));
    assert_eq!(f.nodes[1].cm.live_connections(), live);
    assert_eq!(f.nodes[1].events.len(), 1, "no second connect request");

    assert_eq!(
        f.nodes[1].cm.accept_failed(passive),
        Err(CmError::InvalidState),
        "no accept under way"
    );
    let p = AcceptParams {
        local_qpn: 0x222,
        starting_psn: 1,
        limits: ReadLimits::new(4, 4),
        rnr_retry_count: 6,
        private_data: &[],
    };
    f.nodes[1].cm.accept(f.now, passive, &p).unwrap();
    // The caller performs the RTR, it fails: the REP queued behind it is dropped.
    let mut rep_dropped = false;
    while let Some(a) = f.nodes[1].cm.poll_action() {
        rep_dropped |= matches!(a, Action::Send { conn: Some(c), .. } if c == passive);
    }
    assert!(rep_dropped);
    f.nodes[1].cm.accept_failed(passive).unwrap();
    match f.nodes[1].cm.poll_action() {
        Some(Action::Send {
            conn: None, mad, ..
        }) => {
            let r = Rej::new_checked(&mad[..]).unwrap();
            assert_eq!(
                (
                    r.local_comm_id(),
                    r.remote_comm_id(),
                    r.message_rejected(),
                    r.reason()
                ),
                (passive.0, active.0, 0, 28)
            );
            assert_eq!(r.ari().len(), 0);
            assert_eq!(tid_of(&mad), tid_of(&req));
        }
        a => panic!("a REJ around the connection, got {a:?}"),
    }
    assert_eq!(f.nodes[1].cm.poll_action(), None);
    assert_eq!(f.nodes[1].cm.state(passive), Some(State::Idle));
    assert_eq!(f.nodes[1].cm.next_timer(), None, "no REP retransmission");
    f.nodes[1].cm.release(f.now, passive).unwrap();
    assert_eq!(
        f.nodes[1].cm.poll_action(),
        None,
        "the release sends nothing more"
    );
    assert_eq!(f.nodes[1].cm.live_connections(), 0);
}
