//! What the provider puts on the wire, checked against Linux's rules by a peer written here by
//! hand. Whose Starting PSN is whose (cm.md §1.5), read off the wire: the peer —
//! CM MADs built byte by byte from the IBTA tables of cm.md §3, RoCEv2 frames from the model's
//! wire codec, never the driver's CM codec — connects to the provider in each direction with
//! Starting PSNs it chose, and the first data packet each way is checked against Linux's rule:
//! a CM message's Starting PSN is the PSN its sender receives, so the provider's first SEND
//! carries the peer's Starting PSN and the peer's first SEND, carrying the provider's, is
//! acknowledged (not NAKed). The REQ's Primary Flow Label is rdma_cm's (cma.c
//! `cma_get_roce_udp_flow_label`) and the passive side's QP path takes the REQ's.
//!
//! The clusters run in virtual time: the peer answers only when a wait looks at what it
//! received, and virtual time moves one event at a time between looks, so its ACK comes
//! before the model's retransmission timer would fire.

mod common;
mod ndk_dp;

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, Connector, Registered, fill, sa, verify};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_sim::fabric::{FabricPort, PortId};
use pvrdma_sim::wire::ext::{AethRepr, AethSyndrome, DethRepr};
use pvrdma_sim::wire::opcode::{RC_ACKNOWLEDGE, RC_SEND_ONLY, UD_SEND_ONLY};
use pvrdma_sim::wire::roce::gid_from_ipv4;
use pvrdma_sim::wire::{BthRepr, ExtRepr, Gid, Psn, RocePacket};

const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
const PEER_IP: [u8; 4] = [10, 0, 0, 99];
const PEER_QPN: u32 = 0x00_0123;
const PEER_COMM_ID: u32 = 0x5151_0001;
const PEER_GUID: u64 = 0x0250_56FF_FE00_0099;
const PORT: u16 = 7471;
/// The peer's REQ flow label (any 20-bit value the provider must adopt).
const PEER_FLOW_LABEL: u32 = 0xA_BCDE;
/// The peer's Starting PSN in its REQ or REP: what it will receive first.
const PEER_PSN: u32 = 0x00AB_CDEF;

// CM attribute IDs (cm.md §3.1).
const REQ: u16 = 0x0010;
const REP: u16 = 0x0013;
const RTU: u16 = 0x0014;
const DREQ: u16 = 0x0015;
const DREP: u16 = 0x0016;
/// The CM body starts after the 24-byte MAD header (cm.md §2.1).
const BODY: usize = 24;

fn put(m: &mut [u8], off: usize, bytes: &[u8]) {
    m[BODY + off..BODY + off + bytes.len()].copy_from_slice(bytes);
}

fn be24(v: u32) -> [u8; 3] {
    let b = v.to_be_bytes();
    [b[1], b[2], b[3]]
}

fn get32(m: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(m[BODY + off..BODY + off + 4].try_into().unwrap())
}

fn get24(m: &[u8], off: usize) -> u32 {
    get32(m, off) >> 8
}

fn attr(m: &[u8]) -> u16 {
    u16::from_be_bytes([m[16], m[17]])
}

fn tid(m: &[u8]) -> [u8; 8] {
    m[8..16].try_into().unwrap()
}

/// A zeroed CM MAD with its header (cm.md §2.1): BaseVersion 1, class 0x07, ClassVersion 2,
/// SEND, `tid`, `attr`.
fn mad(attr: u16, tid: [u8; 8]) -> [u8; 256] {
    let mut m = [0u8; 256];
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    m[8..16].copy_from_slice(&tid);
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m
}

/// The peer's REQ to `host_gid`:`PORT` (cm.md §3.2, §5.2), Starting PSN [`PEER_PSN`].
fn build_req(host_gid: &Gid) -> [u8; 256] {
    let mut m = mad(REQ, [0, 0, 0, 7, 0x51, 0x51, 0, 1]);
    put(&mut m, 0, &PEER_COMM_ID.to_be_bytes());
    put(
        &mut m,
        8,
        &(0x0000_0000_0106_0000u64 | u64::from(PORT)).to_be_bytes(),
    );
    put(&mut m, 16, &PEER_GUID.to_be_bytes());
    put(&mut m, 32, &be24(PEER_QPN));
    m[BODY + 35] = 4; // responder resources (IRD)
    m[BODY + 39] = 4; // initiator depth (ORD)
    m[BODY + 43] = 20 << 3; // remote CM response timeout 20, RC, no E2E flow control
    put(&mut m, 44, &be24(PEER_PSN));
    m[BODY + 47] = (20 << 3) | 7; // local CM response timeout 20, retry count 7
    put(&mut m, 48, &0xFFFFu16.to_be_bytes());
    m[BODY + 50] = (3 << 4) | 7; // path MTU 1024, RNR retry 7
    m[BODY + 51] = 15 << 4; // max CM retries
    put(&mut m, 52, &[0xFF, 0xFF, 0xFF, 0xFF]); // LIDs
    put(&mut m, 56, &gid_from_ipv4(PEER_IP));
    put(&mut m, 72, host_gid);
    put(&mut m, 88, &(PEER_FLOW_LABEL << 12).to_be_bytes());
    m[BODY + 93] = 64; // hop limit
    m[BODY + 95] = 18 << 3; // local ACK timeout
    // cma_hdr: version 0, IPv4, the active side's port, source and destination IPs (12 zero
    // bytes then the address).
    let mut hdr = [0u8; 36];
    hdr[1] = 0x40;
    hdr[2..4].copy_from_slice(&50_000u16.to_be_bytes());
    hdr[16..20].copy_from_slice(&PEER_IP);
    hdr[32..36].copy_from_slice(&host_gid[12..16]);
    put(&mut m, 140, &hdr);
    m
}

/// The peer's REP to the provider's REQ (cm.md §3.3), Starting PSN [`PEER_PSN`].
fn build_rep(req: &[u8]) -> [u8; 256] {
    let mut m = mad(REP, tid(req));
    put(&mut m, 0, &PEER_COMM_ID.to_be_bytes());
    put(&mut m, 4, &get32(req, 0).to_be_bytes());
    put(&mut m, 12, &be24(PEER_QPN));
    put(&mut m, 20, &be24(PEER_PSN));
    m[BODY + 24] = 4;
    m[BODY + 25] = 4;
    m[BODY + 26] = 15 << 3; // target ACK delay
    m[BODY + 27] = 7 << 5; // RNR retry count
    put(&mut m, 28, &PEER_GUID.to_be_bytes());
    m
}

/// The RTU or DREP answering `msg` (local ID the peer's, remote ID the provider's).
fn build_reply(attr: u16, msg: &[u8]) -> [u8; 256] {
    let mut m = mad(attr, tid(msg));
    put(&mut m, 0, &PEER_COMM_ID.to_be_bytes());
    put(&mut m, 4, &get32(msg, 0).to_be_bytes());
    m
}

/// What the hand-written peer received, and how it sends.
struct Peer {
    rx: Mutex<VecDeque<Vec<u8>>>,
}

impl FabricPort for Peer {
    fn mac(&self) -> [u8; 6] {
        PEER_MAC
    }
    fn receive(&self, frame: &[u8], _now_ns: u64) {
        self.rx.lock().unwrap().push_back(frame.to_vec());
    }
}

struct Wire<'a> {
    c: &'a Cluster,
    peer: Arc<Peer>,
    port: PortId,
    host_gid: Gid,
    host_mac: [u8; 6],
}

/// One received RoCE packet, owned.
struct Packet {
    bth: BthRepr,
    ext: ExtRepr,
    payload: Vec<u8>,
}

impl<'a> Wire<'a> {
    fn new(c: &'a Cluster) -> Wire<'a> {
        let peer = Arc::new(Peer {
            rx: Mutex::new(VecDeque::new()),
        });
        let port = c.world.fabric().attach(peer.clone());
        let h = c.host(0);
        h.resolver
            .as_ref()
            .unwrap()
            .set_neighbour(IpAddr::V4(Ipv4Addr::from(PEER_IP)), PEER_MAC)
            .unwrap();
        Wire {
            c,
            peer,
            port,
            host_gid: h.gid,
            host_mac: h.mac,
        }
    }

    fn frame(&self, bth: BthRepr, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
        RocePacket {
            src_mac: PEER_MAC,
            dst_mac: self.host_mac,
            vlan: None,
            src_gid: gid_from_ipv4(PEER_IP),
            dst_gid: self.host_gid,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            ip_ident: 1,
            udp_src_port: 0xC000,
            bth,
            ext,
            payload,
        }
        .emit()
        .unwrap()
    }

    /// A CM MAD as a UD SEND Only from QP1 to QP1 (cm.md §2.2).
    fn send_mad(&self, m: &[u8; 256]) {
        let bth = BthRepr {
            opcode: UD_SEND_ONLY,
            pkey: 0xFFFF,
            dest_qp: 1,
            ..BthRepr::default()
        };
        let ext = ExtRepr {
            deth: Some(DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1,
            }),
            ..ExtRepr::default()
        };
        let f = self.frame(bth, ext, m);
        self.c.world.fabric().transmit(self.port, f);
    }

    /// An RC packet to the provider's QP `qpn`.
    fn send_rc(&self, opcode: u8, qpn: u32, psn: u32, ext: ExtRepr, payload: &[u8]) {
        let bth = BthRepr {
            opcode,
            pkey: 0xFFFF,
            dest_qp: qpn,
            ack_req: opcode != RC_ACKNOWLEDGE,
            psn: Psn::new(psn),
            ..BthRepr::default()
        };
        let f = self.frame(bth, ext, payload);
        self.c.world.fabric().transmit(self.port, f);
    }

    /// Waits for the first received packet `want` accepts, dropping the others before it.
    fn next(&self, what: &str, want: impl Fn(&Packet) -> bool) -> Packet {
        let mut got = None;
        self.c.wait_for(what, || {
            let mut rx = self.peer.rx.lock().unwrap();
            while let Some(f) = rx.pop_front() {
                let Ok(p) = RocePacket::parse(&f) else {
                    continue;
                };
                let p = Packet {
                    bth: p.bth,
                    ext: p.ext,
                    payload: p.payload.to_vec(),
                };
                if want(&p) {
                    got = Some(p);
                    return true;
                }
            }
            false
        });
        got.unwrap()
    }

    /// The next CM MAD of attribute `id`.
    fn next_mad(&self, id: u16) -> Vec<u8> {
        let p = self.next(&format!("CM attribute {id:#06x}"), |p| {
            p.bth.opcode == UD_SEND_ONLY && p.payload.len() == 256 && attr(&p.payload) == id
        });
        p.payload
    }

    /// The provider's first RC packet to the peer's QP.
    fn next_rc(&self) -> Packet {
        self.next("an RC packet to the peer's QP", |p| {
            p.bth.dest_qp == PEER_QPN && p.bth.opcode != UD_SEND_ONLY
        })
    }
}

/// An AETH acknowledging `msn` messages.
fn ack(msn: u32) -> ExtRepr {
    ExtRepr {
        aeth: Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 0x1F },
            msn,
        }),
        ..ExtRepr::default()
    }
}

/// With the connection up (`host_qpn` the provider's QP, `host_psn` the Starting PSN the
/// provider sent): one SEND each way, each PSN read off the wire.
fn data_both_ways(w: &Wire<'_>, p: &Pair, host_qpn: u32, host_psn: u32) {
    let c = w.c;
    let m = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let out = fill(&m.mem, 0, 0x5A, 64);
    assert_eq!(p.qa.receive(1, &[m.sge(2048, 1024)]), STATUS_SUCCESS);
    assert_eq!(p.qa.send(2, &[m.sge(0, 64)], 0), STATUS_SUCCESS);

    // The provider's first SEND carries the Starting PSN the peer sent.
    let send = w.next_rc();
    assert_eq!(send.bth.opcode, RC_SEND_ONLY);
    assert_eq!(
        send.bth.psn.value(),
        PEER_PSN,
        "the provider's first PSN must be the peer's Starting PSN (cm.md §1.5)"
    );
    assert_eq!(send.payload, out);
    w.send_rc(RC_ACKNOWLEDGE, host_qpn, PEER_PSN, ack(1), &[]);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 0, QPC_A, 2));

    // The peer's first SEND carries the provider's Starting PSN: acknowledged, delivered.
    let inbound: Vec<u8> = (0..100u8).map(|i| i ^ 0xC3).collect();
    w.send_rc(
        RC_SEND_ONLY,
        host_qpn,
        host_psn,
        ExtRepr::default(),
        &inbound,
    );
    let a = w.next_rc();
    assert_eq!(a.bth.opcode, RC_ACKNOWLEDGE);
    assert!(
        matches!(
            a.ext.aeth.map(|x| x.syndrome),
            Some(AethSyndrome::Ack { .. })
        ),
        "the peer's first SEND, at the provider's Starting PSN, is acknowledged, not NAKed: {:?}",
        a.ext.aeth
    );
    assert_eq!(a.bth.psn.value(), host_psn);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 100, QPC_A, 1));
    verify(&m.mem, 2048, &inbound);
    m.close();
}

/// The peer answers the provider's DREQ with a DREP, so the connection parts cleanly.
fn part(w: &Wire<'_>, client: &Connector) {
    let d = client.disconnect_raw();
    let dreq = w.next_mad(DREQ);
    assert_eq!(get24(&dreq, 8), PEER_QPN, "DREQ names the peer's QPN");
    w.send_mad(&build_reply(DREP, &dreq));
    assert_eq!(d.wait(), STATUS_SUCCESS);
}

/// The peer connects (Linux's active side): REQ with its PSN, the provider's REP with its own.
#[test]
fn provider_as_passive_side_uses_each_starting_psn_as_linux_does() {
    let c = Cluster::with(ClusterConfig::virtual_time(Mode::Deterministic, 1));
    let w = Wire::new(&c);
    let p = one_side(&c);
    let host_ip = c.host(0).ip;
    let l = c.adapter(0).create_listener().unwrap();
    assert_eq!(l.listen(sa(host_ip, PORT)), STATUS_SUCCESS);
    w.send_mad(&build_req(&w.host_gid));
    let server = l.next_incoming();
    let accept = server.accept_raw(&p.qa, 4, 4, b"");
    let rep = w.next_mad(REP);
    assert_eq!(get32(&rep, 4), PEER_COMM_ID);
    let (host_qpn, host_psn) = (get24(&rep, 12), get24(&rep, 20));
    assert_ne!(
        host_psn, PEER_PSN,
        "distinct PSNs, or the test proves nothing"
    );
    w.send_mad(&build_reply(RTU, &rep));
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    let h = p.qa.handle();
    let attr = c.host(0).model.with_core(|m| m.qp_info(h)).unwrap().attr;
    assert_eq!(
        attr.ah_attr.flow_label, PEER_FLOW_LABEL,
        "the passive QP's path takes the REQ's flow label (Linux cm_format_path_from_req)"
    );
    data_both_ways(&w, &p, host_qpn, host_psn);
    part(&w, &server);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    p.close();
    c.finish();
}

/// The provider connects: its REQ with its PSN, the peer's REP with the peer's.
#[test]
fn provider_as_active_side_uses_each_starting_psn_as_linux_does() {
    let c = Cluster::with(ClusterConfig::virtual_time(Mode::Deterministic, 1));
    let w = Wire::new(&c);
    let p = one_side(&c);
    let host_ip = c.host(0).ip;
    let client = c.adapter(0).create_connector().unwrap();
    let peer = IpAddr::V4(Ipv4Addr::from(PEER_IP));
    let connect = client.connect_raw(&p.qa, sa(host_ip, 0), sa(peer, PORT), 4, 4, b"");
    assert_eq!(connect.inline, STATUS_PENDING);
    let req = w.next_mad(REQ);
    let (host_qpn, host_psn) = (get24(&req, 32), get24(&req, 44));
    // rdma_cm's flow label: source port * 31 + destination port, 20 bits; the source port is
    // the cma_hdr's (private data bytes 2..4).
    let sport = u16::from_be_bytes([req[BODY + 142], req[BODY + 143]]);
    assert!(sport >= 49152, "an ephemeral source port: {sport}");
    let want = (u32::from(sport) * 31 + u32::from(PORT)) & 0xF_FFFF;
    assert_eq!(get32(&req, 88) >> 12, want, "REQ Primary Flow Label");
    assert_ne!(
        host_psn, PEER_PSN,
        "distinct PSNs, or the test proves nothing"
    );
    w.send_mad(&build_rep(&req));
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    let h = p.qa.handle();
    let attr = c.host(0).model.with_core(|m| m.qp_info(h)).unwrap().attr;
    assert_eq!(
        attr.ah_attr.flow_label, want,
        "the active QP's path has it too"
    );
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    let rtu = w.next_mad(RTU);
    assert_eq!(get32(&rtu, 4), PEER_COMM_ID);
    data_both_ways(&w, &p, host_qpn, host_psn);
    part(&w, &client);
    assert_eq!(client.close(), STATUS_SUCCESS);
    p.close();
    c.finish();
}

/// PD, CQ and QP on host 0 only (the peer is the other side).
struct Pair {
    pd_a: common::ndk::Pd,
    cq_a: common::ndk::Cq,
    qa: common::ndk::Qp,
}

impl Pair {
    fn close(self) {
        self.qa.close();
        self.cq_a.close();
        self.pd_a.close();
    }
}

fn one_side(c: &Cluster) -> Pair {
    let pd_a = c.adapter(0).create_pd().unwrap();
    let cq_a = c.adapter(0).create_cq(64, None).unwrap();
    let qa = pd_a
        .create_qp(&cq_a, &cq_a, common::ndk::QpSpec::new(QPC_A))
        .unwrap();
    Pair { pd_a, cq_a, qa }
}
