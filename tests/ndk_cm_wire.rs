//! The connection engine against a hand-encoded peer on the simulated fabric (issue 22,
//! items 1–3): a test port plays a Linux peer, sends the REQs, RTUs and DREPs ib_cm would
//! send, and checks what the host puts on the wire byte by byte, at the offsets of
//! docs/reference/cm.md §3 (read here from the raw MAD, not with the driver's codec), against
//! what Linux's ib_cm sends in the same place:
//! - a REQ from a (QPN, CA GUID) a live connection names: REJ 10 and a DREQ on the old
//!   connection (`cm_match_req`), whose consumer is told; the peer's next REQ is accepted once
//!   the old connection is gone;
//! - an NdkAccept whose MODIFY_QP fails: REJ (MsgREJected REQ, reason 28) and never a REP
//!   (`__rdma_accept`), the QP flushed, nothing left;
//! - a REQ whose GIDs form no address vector here: REJ 12 with the port's GID 0 as the ARI
//!   (`cm_req_handler`), and the listener never hears of it.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, Connector, Cq, Listener, Pd, QpSpec, engine_live, sa};
use common::wire::qp1_mad_frame;
use pvrdma_ndk::cm::addr::{CMA_HDR_LEN, CmaAddrs, CmaHdr, Gid, gid_from_ip};
use pvrdma_ndk::cm::msg::{Drep, Req, Rtu};
use pvrdma_ndk::cm::wire::{attr, new_cm_mad};
use pvrdma_ndk::ndkpi::*;
use pvrdma_sim::fabric::{FabricPort, PortId};
use pvrdma_sim::wire::roce::RocePacket;

const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x63];
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);
const PEER_GUID: u64 = 0x0250_56FF_FE00_0063;
const PEER_QPN: u32 = 0x0000_0345;
const PORT: u16 = 445;
/// The CM message body in a MAD (cm.md §3).
const BODY: usize = 24;

/// The test port: every frame the fabric delivers to it, as the MAD it carries (a UD SEND
/// to QP1 from the host), in order.
#[derive(Default)]
struct PeerPort(Mutex<Vec<Vec<u8>>>);

impl FabricPort for PeerPort {
    fn mac(&self) -> [u8; 6] {
        PEER_MAC
    }
    fn receive(&self, frame: &[u8], _now_ns: u64) {
        let p = RocePacket::parse(frame).expect("a RoCEv2 frame from the host");
        assert_eq!(
            (p.bth.opcode, p.bth.dest_qp),
            (0x64, 1),
            "UD SEND Only to QP1"
        );
        self.0.lock().unwrap().push(p.payload.to_vec());
    }
}

/// A one-host cluster in virtual time with a listener on 445 and the peer port attached.
struct Rig {
    c: Cluster,
    peer: Arc<PeerPort>,
    port: PortId,
    listener: Listener,
}

impl Rig {
    fn new() -> Rig {
        let c = Cluster::with(ClusterConfig::virtual_time(Mode::Deterministic, 1));
        let peer = Arc::new(PeerPort::default());
        let port = c.world.fabric().attach(peer.clone());
        let listener = c.host(0).adapter.create_listener().unwrap();
        assert_eq!(listener.listen(sa(c.host(0).ip, PORT)), STATUS_SUCCESS);
        Rig {
            c,
            peer,
            port,
            listener,
        }
    }

    fn host_gid(&self) -> Gid {
        self.c.host(0).gid
    }

    /// Puts `mad` on the wire from the peer (`src_gid`) to the host, and lets it be handled.
    fn send_from(&self, src_gid: Gid, mad: &[u8; 256]) {
        let h = self.c.host(0);
        let frame = qp1_mad_frame(PEER_MAC, h.mac, src_gid, h.gid, mad);
        self.c.world.fabric().transmit(self.port, frame);
    }

    fn send(&self, mad: &[u8; 256]) {
        self.send_from(gid_from_ip(IpAddr::V4(PEER_IP)), mad);
    }

    /// The MADs the host sent the peer so far.
    fn received(&self) -> Vec<Vec<u8>> {
        self.peer.0.lock().unwrap().clone()
    }

    /// Waits for the host's `n`-th MAD to the peer and returns it.
    fn wait_mad(&self, n: usize) -> Vec<u8> {
        self.c
            .wait_for("a MAD from the host", || self.received().len() >= n);
        self.received()[n - 1].clone()
    }
}

/// A REQ as Linux's rdma_cm sends it (cm.md §3.2): from `comm_id` at `PEER_QPN` on the peer,
/// to the host's 445, with primary local / remote GIDs `local` / `remote`.
fn req(comm_id: u32, tid: u64, local: Gid, remote: Gid, host: IpAddr) -> [u8; 256] {
    let mut mad = new_cm_mad(attr::REQ, tid);
    let mut r = Req::new_unchecked(&mut mad[..]);
    r.set_local_comm_id(comm_id);
    r.set_service_id(0x0000_0000_0106_0000 | u64::from(PORT));
    r.set_local_ca_guid(PEER_GUID);
    r.set_local_qpn(PEER_QPN);
    r.set_responder_resources(4);
    r.set_initiator_depth(4);
    r.set_remote_cm_response_timeout(20);
    r.set_starting_psn(0x0012_3456);
    r.set_local_cm_response_timeout(20);
    r.set_retry_count(7);
    r.set_pkey(0xFFFF);
    r.set_path_mtu(3);
    r.set_rnr_retry_count(7);
    r.set_max_cm_retries(15);
    r.set_primary_local_lid(0xFFFF);
    r.set_primary_remote_lid(0xFFFF);
    r.set_primary_local_gid(local);
    r.set_primary_remote_gid(remote);
    r.set_primary_hop_limit(64);
    r.set_primary_local_ack_timeout(19);
    let mut hdr = [0u8; CMA_HDR_LEN];
    let peer = SocketAddr::new(IpAddr::V4(PEER_IP), 50_000);
    CmaHdr::new_unchecked(&mut hdr[..])
        .emit(&CmaAddrs {
            src: peer,
            dst: host,
        })
        .unwrap();
    r.private_data_mut()[..CMA_HDR_LEN].copy_from_slice(&hdr);
    mad
}

fn be32(m: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(m[at..at + 4].try_into().unwrap())
}

fn attr_of(m: &[u8]) -> u16 {
    u16::from_be_bytes([m[16], m[17]])
}

fn tid_of(m: &[u8]) -> u64 {
    u64::from_be_bytes(m[8..16].try_into().unwrap())
}

/// A REJ, field by field at its raw offsets (cm.md §3.4, Table 108): the MAD header as
/// ib_cm's `cm_format_mad_hdr` writes it (BaseVersion 1, class 7, version 2, SEND, status 0),
/// then (TID, Local ID, Remote ID, MsgREJected, ARI length, reason, ARI, private data).
struct RejFields {
    tid: u64,
    local: u32,
    remote: u32,
    rejected: u8,
    reason: u16,
    ari: Vec<u8>,
}

fn rej_fields(m: &[u8]) -> RejFields {
    assert_eq!(m.len(), 256);
    assert_eq!(&m[..4], &[1, 7, 2, 3], "MAD header: v1, CM class, v2, SEND");
    assert_eq!(&m[4..8], &[0; 4], "status, class-specific");
    assert_eq!(attr_of(m), attr::REJ);
    assert_eq!(&m[18..24], &[0; 6], "reserved, attribute modifier 0");
    let ari_len = usize::from(m[BODY + 9] >> 1);
    assert_eq!(m[BODY + 8] & 0x3F, 0, "REJ byte 8 reserved bits");
    assert_eq!(m[BODY + 9] & 1, 0, "REJ byte 9 reserved bit");
    assert!(
        m[BODY + 12 + ari_len..BODY + 84].iter().all(|&b| b == 0),
        "the ARI past its length is zero"
    );
    assert!(
        m[BODY + 84..].iter().all(|&b| b == 0),
        "no private data (Linux sends none here)"
    );
    RejFields {
        tid: tid_of(m),
        local: be32(m, BODY),
        remote: be32(m, BODY + 4),
        rejected: m[BODY + 8] >> 6,
        reason: u16::from_be_bytes([m[BODY + 10], m[BODY + 11]]),
        ari: m[BODY + 12..BODY + 12 + ari_len].to_vec(),
    }
}

/// Item 3. Linux's `cm_req_handler`: `cm_init_av_by_path` fails for a REQ whose primary
/// path names a GID not bound on the receiving port, or GIDs of two families
/// (`roce_resolve_route_from_path`), and `ib_send_cm_rej(IB_CM_REJ_INVALID_GID)` answers from
/// the new ID still in REQ_RCVD: Local ID 0, MsgREJected REQ, the port's GID index 0 as a
/// 16-byte ARI; the listener is never called. A good REQ afterwards still reaches it.
#[test]
fn a_req_whose_gids_form_no_address_vector_gets_rej_12_and_never_reaches_the_listener() {
    let rig = Rig::new();
    let host = rig.c.host(0).ip;
    let before = engine_live(rig.c.host(0));
    let peer_gid = gid_from_ip(IpAddr::V4(PEER_IP));
    let unbound = gid_from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 77)));
    let v6_peer = gid_from_ip(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x63)));
    let cases = [
        (
            "a destination GID this port does not hold",
            peer_gid,
            unbound,
        ),
        (
            "an IPv6 source to an IPv4 destination",
            v6_peer,
            rig.host_gid(),
        ),
    ];
    for (i, (what, local, remote)) in cases.into_iter().enumerate() {
        let tid = 0x0000_0063_0000_1000 + i as u64;
        let comm = 0x6300_0010 + i as u32;
        rig.send(&req(comm, tid, local, remote, host));
        let rej = rej_fields(&rig.wait_mad(i + 1));
        assert_eq!(rej.tid, tid, "{what}: the REQ's TID");
        assert_eq!(
            (rej.local, rej.remote, rej.rejected, rej.reason),
            (0, comm, 0, 12),
            "{what}: Local ID 0 (REQ_RCVD), Remote ID the REQ's, MsgREJected REQ, reason 12"
        );
        assert_eq!(
            rej.ari,
            rig.host_gid().to_vec(),
            "{what}: ARI = GID index 0"
        );
        rig.c.settle();
        assert_eq!(rig.received().len(), i + 1, "{what}: the REJ alone");
        assert_eq!(rig.listener.incoming.calls(), 0, "{what}: no connect event");
        assert_eq!(engine_live(rig.c.host(0)), before, "{what}: nothing held");
    }
    // The same peer with its GIDs right: a connect event.
    rig.send(&req(
        0x6300_0020,
        0x63_0000_2000,
        peer_gid,
        rig.host_gid(),
        host,
    ));
    rig.c
        .wait_for("a connect event", || rig.listener.incoming.calls() == 1);
    let server = rig.listener.next_incoming();
    assert_eq!(server.reject(&[]), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(rig.listener.close(), STATUS_SUCCESS);
    rig.c.finish();
}

/// Accepts the peer's REQ `comm` on `qp`: the REP's Local ID (the host's connection),
/// with the RTU sent back. The accept's status is returned when it completes.
fn establish(rig: &Rig, comm: u32, tid: u64, qp: &common::ndk::Qp) -> (Connector, u32) {
    let host = rig.c.host(0).ip;
    let peer_gid = gid_from_ip(IpAddr::V4(PEER_IP));
    let seen = rig.received().len();
    rig.send(&req(comm, tid, peer_gid, rig.host_gid(), host));
    let server = rig.listener.next_incoming();
    let accept = server.accept_raw(qp, 4, 4, &[]);
    assert_eq!(accept.inline, STATUS_PENDING);
    let rep = rig.wait_mad(seen + 1);
    assert_eq!(attr_of(&rep), attr::REP);
    assert_eq!(be32(&rep, BODY + 4), comm, "the REP's Remote ID");
    let passive = be32(&rep, BODY);
    let mut rtu = new_cm_mad(attr::RTU, tid);
    {
        let mut r = Rtu::new_unchecked(&mut rtu[..]);
        r.set_local_comm_id(comm);
        r.set_remote_comm_id(passive);
    }
    rig.send(&rtu);
    assert_eq!(accept.wait(), STATUS_SUCCESS, "NdkAccept");
    (server, passive)
}

/// Item 1. Linux's `cm_match_req` ("Check for stale connections"): a new REQ from a
/// (remote QPN, CA GUID) an established connection names gets `cm_issue_rej(REJ 10,
/// MsgREJected REQ)` — Local ID the REQ's bytes 4–7 (0), the REQ's TID — and the old
/// connection `ib_send_cm_dreq`: Local ID ours, Remote ID the peer's old one, Remote QPN the
/// peer's QPN, a TID of our own. The old connection's consumer gets its DisconnectEvent and
/// NdkDisconnect completes; once the peer's DREP put the old connection in TIMEWAIT, the
/// restarted peer's next REQ from that QPN reaches the listener.
#[test]
fn a_stale_req_gets_rej_10_and_the_old_connection_a_dreq() {
    let rig = Rig::new();
    let h = rig.c.host(0);
    let pd = h.adapter.create_pd().unwrap();
    let cq = h.adapter.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(0xA1)).unwrap();
    let (server, passive) = establish(&rig, 0x6300_0001, 0x63_0000_0001, &qp);
    assert_eq!(server.disconnects.count(), 0);

    // The peer restarts and asks again from the same QPN with a new communication ID.
    let (stale_tid, stale_comm) = (0x63_0000_0002, 0x6300_0002);
    let seen = rig.received().len();
    rig.send(&req(
        stale_comm,
        stale_tid,
        gid_from_ip(IpAddr::V4(PEER_IP)),
        rig.host_gid(),
        h.ip,
    ));
    let rej = rej_fields(&rig.wait_mad(seen + 1));
    assert_eq!(rej.tid, stale_tid, "REJ 10: the REQ's TID");
    assert_eq!(
        (
            rej.local,
            rej.remote,
            rej.rejected,
            rej.reason,
            rej.ari.len()
        ),
        (0, stale_comm, 0, 10, 0),
        "cm_issue_rej(IB_CM_REJ_STALE_CONN, CM_MSG_RESPONSE_REQ)"
    );
    let dreq = rig.wait_mad(seen + 2);
    assert_eq!(&dreq[..4], &[1, 7, 2, 3]);
    assert_eq!(attr_of(&dreq), attr::DREQ);
    assert_eq!(
        (be32(&dreq, BODY), be32(&dreq, BODY + 4)),
        (passive, 0x6300_0001),
        "DREQ Local ID ours, Remote ID the peer's old connection"
    );
    assert_eq!(
        be32(&dreq, BODY + 8) >> 8,
        PEER_QPN,
        "DREQ Remote QPN (24 bits)"
    );
    assert_eq!(dreq[BODY + 11], 0, "DREQ byte 11 reserved");
    assert!(dreq[BODY + 12..].iter().all(|&b| b == 0), "no private data");
    assert_eq!(
        tid_of(&dreq) as u32,
        passive,
        "the DREQ's TID is ours (cm_form_tid), never the REQ's"
    );
    rig.c.wait_for("the old connection's DisconnectEvent", || {
        server.disconnects.count() == 1
    });
    assert_eq!(
        rig.listener.incoming.calls(),
        1,
        "the stale REQ reached no one"
    );
    assert_eq!(server.disconnect(), STATUS_SUCCESS, "NdkDisconnect");

    // The restarted peer answers the DREQ it has no connection for (cm_issue_drep).
    let mut drep = new_cm_mad(attr::DREP, tid_of(&dreq));
    {
        let mut d = Drep::new_unchecked(&mut drep[..]);
        d.set_local_comm_id(0x6300_0001);
        d.set_remote_comm_id(passive);
    }
    rig.send(&drep);
    // Its next REQ from the same QPN is a new connection.
    let seen = rig.received().len();
    rig.send(&req(
        0x6300_0003,
        0x63_0000_0003,
        gid_from_ip(IpAddr::V4(PEER_IP)),
        rig.host_gid(),
        h.ip,
    ));
    rig.c.wait_for("the new REQ's connect event", || {
        rig.listener.incoming.calls() == 2
    });
    assert_eq!(rig.received().len(), seen, "no REJ this time");
    assert_eq!(server.disconnects.count(), 1, "one DisconnectEvent");
    let fresh = rig.listener.next_incoming();
    assert_eq!(fresh.reject(&[]), STATUS_SUCCESS);
    assert_eq!(fresh.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(qp.close(), STATUS_SUCCESS);
    assert_eq!(cq.close(), STATUS_SUCCESS);
    assert_eq!(pd.close(), STATUS_SUCCESS);
    assert_eq!(rig.listener.close(), STATUS_SUCCESS);
    rig.c.settle();
    assert_eq!(engine_live(rig.c.host(0)), (0, 0, 0, 0), "nothing held");
    rig.c.finish();
}

/// The setup of items 2 and 6: a QP holding one receive (0x77), the peer's REQ (`tid`,
/// `comm`) handed to the listener as `server`, and the device set to refuse the `nth`
/// MODIFY_QP from here on (the accept's: 1 is its RTR, 2 its RTS).
struct RefusedAccept {
    pd: Pd,
    cq: Cq,
    qp: common::ndk::Qp,
    server: Connector,
    tid: u64,
    comm: u32,
}

impl RefusedAccept {
    fn new(rig: &Rig, tid: u64, comm: u32, nth: u64) -> RefusedAccept {
        let h = rig.c.host(0);
        let pd = h.adapter.create_pd().unwrap();
        let cq = h.adapter.create_cq(16, None).unwrap();
        let qp = pd.create_qp(&cq, &cq, QpSpec::new(0xA2)).unwrap();
        assert_eq!(qp.receive(0x77, &[]), STATUS_SUCCESS);
        rig.send(&req(
            comm,
            tid,
            gid_from_ip(IpAddr::V4(PEER_IP)),
            rig.host_gid(),
            h.ip,
        ));
        let server = rig.listener.next_incoming();
        const MODIFY_QP: u32 = 10;
        h.model
            .with_core(|core| core.fail_nth_command(nth, 22, 1 << MODIFY_QP));
        RefusedAccept {
            pd,
            cq,
            qp,
            server,
            tid,
            comm,
        }
    }

    /// The QP went to ERR (`cma_modify_qp_err`): its receive came back flushed.
    fn assert_flushed(&self) {
        let flushed = self.cq.wait_results(1);
        assert_eq!(
            (flushed[0].Status, flushed[0].RequestContext as usize),
            (STATUS_CANCELLED, 0x77),
            "the QP went to ERR"
        );
    }

    /// Closes everything; closing sends nothing after the `sent` MADs and nothing is held.
    fn close(self, rig: Rig, sent: usize) {
        assert_eq!(self.server.close(), STATUS_SUCCESS);
        assert_eq!(self.qp.close(), STATUS_SUCCESS);
        assert_eq!(self.cq.close(), STATUS_SUCCESS);
        assert_eq!(self.pd.close(), STATUS_SUCCESS);
        assert_eq!(rig.listener.close(), STATUS_SUCCESS);
        rig.c.settle();
        assert_eq!(
            rig.peer.0.lock().unwrap().len(),
            sent,
            "closing sent nothing more"
        );
        assert_eq!(engine_live(rig.c.host(0)), (0, 0, 0, 0), "nothing held");
        rig.c.finish();
    }
}

/// Item 2, for the `nth` MODIFY_QP of the accept failing in the device (1: RTR; the RTS
/// comes after the REP since item 6, below).
/// Linux's `__rdma_accept`: when `cma_accept_ib` fails (it sends the REP only after both
/// modifies), `cma_modify_qp_err` and `rdma_reject(.., IB_CM_REJ_CONSUMER_DEFINED)`, from
/// MRA_REQ_SENT: Local ID ours, MsgREJected REQ, reason 28, the REQ's TID. No REP ever
/// leaves (virtual time runs through every retransmission timer), NdkAccept completes with
/// STATUS_INTERNAL_ERROR (a modify the device refuses), the receive posted on the QP is
/// flushed (STATUS_CANCELLED), the QP serves no other connection, and closing leaves
/// nothing behind.
fn failed_accept(nth: u64) {
    let rig = Rig::new();
    let a = RefusedAccept::new(&rig, 0x63_0000_0100, 0x6300_0100, nth);
    // Inline when the device answered before NdkAccept returned (the RTR, in this
    // deterministic cluster), else through the RequestCompletion.
    let accept = a.server.accept_raw(&a.qp, 4, 4, &[]);
    assert_eq!(accept.wait(), STATUS_INTERNAL_ERROR, "NdkAccept");
    rig.c.settle();
    let got = rig.received();
    let attrs: Vec<u16> = got.iter().map(|m| attr_of(m)).collect();
    assert_eq!(
        attrs,
        [attr::REJ],
        "MODIFY_QP {nth} failed: one REJ, no REP"
    );
    let rej = rej_fields(&got[0]);
    assert_eq!(rej.tid, a.tid);
    assert_ne!(rej.local, 0, "Local ID: the connection's (MRA_REQ_SENT)");
    assert_eq!(
        (rej.remote, rej.rejected, rej.reason, rej.ari.len()),
        (a.comm, 0, 28, 0),
        "MsgREJected REQ, IB_CM_REJ_CONSUMER_DEFINED"
    );
    a.assert_flushed();
    assert_eq!(
        a.server.accept_raw(&a.qp, 4, 4, &[]).inline,
        STATUS_CONNECTION_INVALID,
        "the connector is done"
    );
    assert_eq!(a.server.disconnects.count(), 0);
    a.close(rig, 1);
}

#[test]
fn an_accept_whose_rtr_fails_rejects_the_req_and_never_sends_a_rep() {
    failed_accept(1);
}

/// Items 2 and 6 together. The passive side sends its REP with the QP in RTR and moves it to
/// RTS on the RTU or COMM_EST (cm.md §6.1), so the RTS the device refuses comes after the REP,
/// when the peer has sent its RTU and holds the connection established: the REQ can no
/// longer be rejected. NdkAccept completes with STATUS_INTERNAL_ERROR, the connection is
/// released with a DREQ (Local ID ours, Remote ID the peer's), the QP goes to ERR (its
/// receive flushed), and after the peer's DREP nothing more leaves and nothing is held.
#[test]
fn an_accept_whose_rts_fails_after_the_rtu_fails_the_accept_and_sends_a_dreq() {
    let rig = Rig::new();
    let a = RefusedAccept::new(&rig, 0x63_0000_0200, 0x6300_0200, 2);
    let (tid, comm) = (a.tid, a.comm);
    let accept = a.server.accept_raw(&a.qp, 4, 4, &[]);
    let rep = rig.wait_mad(1);
    assert_eq!(attr_of(&rep), attr::REP, "the REP leaves at RTR");
    let passive = be32(&rep, BODY);
    let mut rtu = new_cm_mad(attr::RTU, tid);
    {
        let mut r = Rtu::new_unchecked(&mut rtu[..]);
        r.set_local_comm_id(comm);
        r.set_remote_comm_id(passive);
    }
    rig.send(&rtu);
    assert_eq!(accept.wait(), STATUS_INTERNAL_ERROR, "NdkAccept");
    let dreq = rig.wait_mad(2);
    assert_eq!(attr_of(&dreq), attr::DREQ);
    assert_eq!(
        (be32(&dreq, BODY), be32(&dreq, BODY + 4)),
        (passive, comm),
        "DREQ Local ID ours, Remote ID the peer's"
    );
    let mut drep = new_cm_mad(attr::DREP, tid_of(&dreq));
    {
        let mut d = Drep::new_unchecked(&mut drep[..]);
        d.set_local_comm_id(comm);
        d.set_remote_comm_id(passive);
    }
    rig.send(&drep);
    rig.c.settle();
    let attrs: Vec<u16> = rig.received().iter().map(|m| attr_of(m)).collect();
    assert_eq!(attrs, [attr::REP, attr::DREQ], "a REP, one DREQ, no REJ");
    a.assert_flushed();
    a.close(rig, 2);
}
