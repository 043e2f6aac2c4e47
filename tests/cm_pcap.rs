//! A real CM exchange on the model's fabric, captured and judged by Wireshark (issue 11),
//! without the NDK connector: two hosts, each with its adapter's QP1 (`ndk::connect::qp1`) and a
//! sans-IO `Cm`, and a small pump in between that feeds QP1's receives to `Cm::on_mad` and
//! performs `Action::Send` through `Qp1::send`. The consumers connect with 56 bytes of
//! private data, accept with 148, complete, and the active side disconnects; the fabric
//! captures every delivered frame and `common::tshark` checks the capture: REQ, REP, RTU,
//! DREQ, DREP decoded as InfiniBand CM with no complaint, the service ID naming the port,
//! the IP CM header naming the endpoints. IPv4 and IPv6, clean and lossy.
//!
//! `Action::ModifyQp` is acknowledged without a data QP: the CM only asks for the
//! transition and orders a later Send after it, which performing actions in queue order
//! honours; the QPNs in the REQ and REP are therefore numbers no device QP carries. What
//! the device does with a CM-driven MODIFY_QP is the connector's tests' business.

mod common;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig};
use common::tshark::{self, CmExpect, Delivery, attr};
use pvrdma_ndk::cm::addr::ip_from_gid;
use pvrdma_ndk::cm::limits::ReadLimits;
use pvrdma_ndk::cm::{
    AcceptParams, Action, Cm, CmConfig, ConnId, ConnectParams, Event, ListenerId, Path,
    QpTransition,
};
use pvrdma_ndk::ndk::connect::qp1::{MAD_LEN, MadPath, MadSink, MadSource, Qp1, Qp1Config};
use pvrdma_sim::fabric::FaultConfig;
use pvrdma_sim::pcap::{PcapWriter, TsResolution};

const PORT: u16 = 445;
const ACTIVE_PORT: u16 = 49_731;
const MS: u64 = 1_000_000;
/// Bounds the pump: a hang, not a timing assertion (a clean exchange takes 5 rounds).
const MAX_ROUNDS: usize = 10_000;

#[derive(Default)]
struct Inbox(Mutex<Vec<(MadSource, [u8; MAD_LEN])>>);

impl MadSink for Inbox {
    fn mad(&self, from: &MadSource, mad: &[u8; MAD_LEN]) {
        self.0.lock().unwrap().push((*from, *mad));
    }
}

/// What a host's consumer saw and what its CM asked of the QP.
#[derive(Default)]
struct Log {
    events: Vec<(ConnId, Event)>,
    transitions: Vec<(ConnId, u32, QpTransition)>,
}

struct Endpoint {
    cm: Cm,
    qp1: Qp1,
    inbox: Arc<Inbox>,
    ip: IpAddr,
    gid: [u8; 16],
    log: Log,
    accept_data: Vec<u8>,
    connection: Option<ConnId>,
}

/// Two hosts with their QP1 and CM; the fabric captures into a file.
struct Exchange {
    // Before the cluster: on a failing test the CMs and QP1s go first, while the cluster
    // still holds the harness lock whose allocation counters they touch.
    ends: [Endpoint; 2],
    c: Cluster,
    macs: [([u8; 16], [u8; 6]); 2],
    /// The CMs' clock: virtual ns, advanced only to a CM's next timer when nothing else
    /// is left to happen.
    now: u64,
    pcap: PathBuf,
    sends_refused: u64,
    listener: Option<ListenerId>,
}

/// Where the test's capture goes; kept with `PVRDMA_KEEP_PCAP=1` for a look in Wireshark.
fn pcap_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pvrdma-cm-{name}-{}.pcap", std::process::id()))
}

impl Exchange {
    fn new(ipv6: bool, name: &str) -> Exchange {
        // No connection engine: the test opens each host's QP1 itself.
        let mut cfg = ClusterConfig::without_cm(Mode::Deterministic, 2);
        cfg.ipv6 = ipv6;
        let c = Cluster::with(cfg);
        let pcap = pcap_path(name);
        let file = std::fs::File::create(&pcap).expect("create the capture");
        let w: Box<dyn Write + Send> = Box::new(std::io::BufWriter::new(file));
        assert!(
            c.world
                .set_capture(Some(PcapWriter::new(w, TsResolution::Nano).unwrap()))
                .is_none()
        );
        let end = |h: usize, seed: u32| {
            let host = c.host(h);
            let inbox = Arc::new(Inbox::default());
            let hw = host.hw.clone();
            let qp1 = Qp1::open(hw, Qp1Config::default(), inbox.clone()).expect("QP1 opens");
            let guid = 0x0050_5600_00AB_0000 | u64::from(seed);
            Endpoint {
                cm: Cm::new(CmConfig::rdma_cm_defaults(8, guid, seed)).expect("CM"),
                qp1,
                inbox,
                ip: ip_from_gid(host.gid),
                gid: host.gid,
                log: Log::default(),
                accept_data: Vec::new(),
                connection: None,
            }
        };
        let ends = [end(0, 0x1357_9BDF), end(1, 0x2468_ACE0)];
        let macs = [
            (c.host(0).gid, c.host(0).mac),
            (c.host(1).gid, c.host(1).mac),
        ];
        Exchange {
            c,
            ends,
            macs,
            now: 1_000 * MS,
            pcap,
            sends_refused: 0,
            listener: None,
        }
    }

    fn addr(&self, h: usize, port: u16) -> SocketAddr {
        SocketAddr::new(self.ends[h].ip, port)
    }

    /// Host 0 connects to host 1's listener on [`PORT`].
    fn connect(&mut self, connect_data: &[u8], accept_data: &[u8]) {
        let ip1 = self.ends[1].ip;
        self.listener = Some(self.ends[1].cm.listen(PORT, ip1).expect("listen"));
        self.ends[1].accept_data = accept_data.to_vec();
        let p = ConnectParams {
            src: self.addr(0, ACTIVE_PORT),
            dst: self.addr(1, PORT),
            path: Path {
                local_gid: self.ends[0].gid,
                remote_gid: self.ends[1].gid,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            local_qpn: 0x11,
            starting_psn: 0x00AB_CDEF,
            limits: ReadLimits::new(8, 8),
            path_mtu: 5,
            retry_count: 7,
            rnr_retry_count: 7,
            private_data: connect_data,
        };
        let now = self.now;
        let id = self.ends[0].cm.connect(now, &p).expect("connect");
        self.ends[0].connection = Some(id);
    }

    fn established(&self) -> bool {
        self.ends[0]
            .log
            .events
            .iter()
            .any(|e| e.1 == Event::Accepted)
            && self.ends[1]
                .log
                .events
                .iter()
                .any(|e| e.1 == Event::Established)
    }

    fn disconnected(&self) -> bool {
        self.ends[0]
            .log
            .events
            .iter()
            .any(|e| matches!(e.1, Event::Disconnected { .. }))
    }

    fn disconnect(&mut self) {
        let now = self.now;
        let id = self.ends[0].connection.expect("connected");
        self.ends[0].cm.disconnect(now, id).expect("disconnect");
    }

    /// Performs `h`'s queued actions in order; true if there were any.
    fn perform(&mut self, h: usize) -> bool {
        let mut any = false;
        while let Some(a) = self.ends[h].cm.poll_action() {
            any = true;
            let now = self.now;
            let e = &mut self.ends[h];
            match a {
                Action::Send { path, mad, .. } => {
                    assert_eq!(path.local_gid, e.gid, "sent from our GID");
                    let dmac = self
                        .macs
                        .iter()
                        .find(|(g, _)| *g == path.remote_gid)
                        .map(|(_, m)| *m)
                        .expect("a host of the fabric");
                    let to = MadPath {
                        dgid: path.remote_gid,
                        dmac,
                        sgid_index: 0,
                        hop_limit: path.hop_limit,
                        traffic_class: path.traffic_class,
                    };
                    // A refused send is a lost MAD to the CM, which retransmits it.
                    if e.qp1.send(&to, &mad).is_err() {
                        self.sends_refused += 1;
                    }
                }
                Action::ModifyQp {
                    conn,
                    qpn,
                    transition,
                } => e.log.transitions.push((conn, qpn, transition)),
                Action::Deliver { conn, event } => {
                    e.log.events.push((conn, event));
                    match event {
                        Event::ConnectRequest { .. } => {
                            let p = AcceptParams {
                                local_qpn: 0x22,
                                starting_psn: 0x0012_3456,
                                limits: ReadLimits::new(4, 4),
                                rnr_retry_count: 7,
                                private_data: &e.accept_data,
                            };
                            e.cm.accept(now, conn, &p).expect("accept");
                            e.connection = Some(conn);
                        }
                        Event::Accepted => e.cm.complete_connect(conn).expect("complete"),
                        Event::DisconnectRequested => {
                            e.cm.disconnect(now, conn).expect("answer the DREQ")
                        }
                        _ => {}
                    }
                }
            }
        }
        any
    }

    /// Runs the exchange until `done`: actions performed, sends completed and the fabric
    /// settled, receives fed to the CMs; when nothing is left to happen, the CMs' clock
    /// jumps to the earliest timer.
    fn run_until(&mut self, what: &str, done: impl Fn(&Exchange) -> bool) {
        for _ in 0..MAX_ROUNDS {
            if done(self) {
                return;
            }
            let acted = self.perform(0) | self.perform(1);
            let ends = &self.ends;
            self.c.wait_for("QP1 sends to complete", || {
                ends.iter().all(|e| e.qp1.sends_in_flight() == 0)
            });
            self.c.settle();
            let mut received = false;
            for h in 0..2 {
                let mads = std::mem::take(&mut *self.ends[h].inbox.0.lock().unwrap());
                for (from, mad) in mads {
                    received = true;
                    assert_eq!(from.src_qp, 1, "CM MADs come from QP1");
                    let path = Path {
                        local_gid: from.grh.dgid,
                        remote_gid: from.grh.sgid,
                        hop_limit: from.grh.hop_limit,
                        traffic_class: from.grh.traffic_class,
                        flow_label: 0,
                    };
                    let now = self.now;
                    // A drop (a duplicate, say) is the CM's business; the capture shows it.
                    let _ = self.ends[h].cm.on_mad(now, &path, &mad);
                    self.perform(h);
                }
            }
            if acted || received {
                continue;
            }
            let next = self.ends.iter().filter_map(|e| e.cm.next_timer()).min();
            let Some(t) = next else {
                panic!("nothing left to happen before {what}");
            };
            self.now = self.now.max(t);
            for e in &mut self.ends {
                if e.cm.next_timer().is_some_and(|t| t <= self.now) {
                    e.cm.on_timer(self.now);
                }
            }
        }
        panic!("no {what} within {MAX_ROUNDS} rounds");
    }

    /// Closes QP1s and the capture (flushed), checks the cluster left nothing behind, and
    /// returns the capture's path.
    fn finish(self) -> PathBuf {
        let Exchange { c, ends, pcap, .. } = self;
        for e in ends {
            assert_eq!(e.qp1.close(), Ok(()));
        }
        let mut w = c.world.set_capture(None).expect("the capture");
        w.flush().expect("flush the capture");
        assert_eq!(c.world.fabric().capture_errors(), 0);
        drop(w);
        c.finish();
        pcap
    }
}

/// 56 bytes from the connector (the most a REQ carries after the cma_hdr), 148 from the
/// acceptor (NDK's MaxCalleeData).
fn private_data() -> (Vec<u8>, Vec<u8>) {
    let req: Vec<u8> = (0..56u8).map(|i| 0xA0 ^ i).collect();
    let rep: Vec<u8> = (0..148u8).map(|i| i.wrapping_mul(7) | 1).collect();
    (req, rep)
}

/// A finished exchange's capture and what the checker is to find in it.
struct Captured {
    pcap: PathBuf,
    active: SocketAddr,
    passive: SocketAddr,
    active_id: ConnId,
    passive_id: ConnId,
    req_data: Vec<u8>,
    rep_data: Vec<u8>,
}

impl Captured {
    fn expect(&self) -> CmExpect<'_> {
        CmExpect {
            req_private_data: Some(&self.req_data),
            rep_private_data: Some(&self.rep_data),
            ..CmExpect::new(self.active, self.passive)
        }
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        if std::env::var_os("PVRDMA_KEEP_PCAP").is_some() {
            eprintln!("kept {}", self.pcap.display());
        } else {
            let _ = std::fs::remove_file(&self.pcap);
        }
    }
}

/// A full clean exchange with the driver-side facts asserted; returns the capture.
fn clean_exchange(ipv6: bool, name: &str) -> Captured {
    let mut x = Exchange::new(ipv6, name);
    let (req_data, rep_data) = private_data();
    x.connect(&req_data, &rep_data);
    x.run_until("establishment", Exchange::established);
    x.disconnect();
    x.run_until("the DREP", Exchange::disconnected);

    let active = x.addr(0, ACTIVE_PORT);
    let passive = x.addr(1, PORT);
    assert_eq!(active.is_ipv6(), ipv6);
    assert_eq!(x.sends_refused, 0);
    let (a, p) = (x.ends[0].connection.unwrap(), x.ends[1].connection.unwrap());
    assert_eq!(
        x.ends[0].log.events,
        vec![
            (a, Event::Accepted),
            (a, Event::Disconnected { timed_out: false })
        ]
    );
    let listener = x.listener.expect("listening");
    assert_eq!(
        x.ends[1].log.events,
        vec![
            (p, Event::ConnectRequest { listener }),
            (p, Event::Established),
            (p, Event::DisconnectRequested),
            (p, Event::Disconnected { timed_out: false })
        ]
    );
    assert_eq!(x.ends[1].cm.peer_private_data(p), Some(&req_data[..]));
    assert_eq!(x.ends[1].cm.addresses(p), Some((passive, active)));
    // The REP carries no length: the active side reads all 196 bytes, zero after the 148.
    let mut rep_field = rep_data.clone();
    rep_field.resize(tshark::REP_PRIVATE_DATA, 0);
    assert_eq!(x.ends[0].cm.peer_private_data(a), Some(&rep_field[..]));
    for (h, who) in [(0, "active"), (1, "passive")] {
        let kinds: Vec<&str> = x.ends[h]
            .log
            .transitions
            .iter()
            .map(|t| match t.2 {
                QpTransition::Rtr(_) => "RTR",
                QpTransition::Rts(_) => "RTS",
                QpTransition::Error => "ERR",
            })
            .collect();
        assert_eq!(kinds, ["RTR", "RTS", "ERR"], "{who} QP transitions");
    }
    // Active sends REQ, RTU, DREQ; passive sends REP, DREP; nothing else on QP1.
    let st = [x.ends[0].qp1.stats(), x.ends[1].qp1.stats()];
    assert_eq!((st[0].sent, st[0].received), (3, 2));
    assert_eq!((st[1].sent, st[1].received), (2, 3));
    for s in st {
        assert_eq!(
            (s.bad_length, s.bad_grh, s.bad_cqes, s.send_errors),
            (0, 0, 0, 0)
        );
    }
    Captured {
        pcap: x.finish(),
        active,
        passive,
        active_id: a,
        passive_id: p,
        req_data,
        rep_data,
    }
}

fn check_clean(ipv6: bool) {
    let cap = clean_exchange(ipv6, if ipv6 { "v6" } else { "v4" });
    let Some(found) = tshark::check_cm_capture(&cap.pcap, &[cap.expect()]) else {
        return;
    };
    eprintln!(
        "{}: {} frames, {} CM MADs",
        found.version, found.frames, found.cm_mads
    );
    assert_eq!(
        (found.frames, found.cm_mads),
        (5, 5),
        "only CM traffic, once each"
    );
    let conn = &found.connections[0];
    assert_eq!(conn.active_id, cap.active_id.0);
    assert_eq!(conn.passive_id, Some(cap.passive_id.0));
    assert_eq!(
        conn.attributes(),
        [attr::REQ, attr::REP, attr::RTU, attr::DREQ, attr::DREP]
    );
    assert_eq!(conn.req.service_id, 0x0000_0000_0106_01BD, "port 445");
    assert_eq!(
        (conn.req.src_ip, conn.req.src_port),
        (cap.active.ip(), ACTIVE_PORT)
    );
    assert_eq!(conn.req.dst_ip, cap.passive.ip());
    assert_eq!(conn.req.private_data, cap.req_data);
    // The one-line form the ndkperf test uses, also with the ephemeral port unknown.
    assert!(tshark::assert_cm_exchange(&cap.pcap, cap.active, cap.passive).is_some());
    let any_port = SocketAddr::new(cap.active.ip(), 0);
    assert!(tshark::assert_cm_exchange(&cap.pcap, any_port, cap.passive).is_some());
}

#[test]
fn ipv4_exchange_decodes_as_ib_cm_with_the_endpoints_ip_cm_fields() {
    check_clean(false);
}

#[test]
fn ipv6_exchange_decodes_as_ib_cm_with_the_endpoints_ip_cm_fields() {
    check_clean(true);
}

/// The checker's panic message, or `None` if it accepted.
fn rejection(pcap: &std::path::Path, expect: &[CmExpect<'_>]) -> Option<String> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tshark::check_cm_capture(pcap, expect)
    }));
    match r {
        Ok(_) => None,
        Err(p) => Some(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default(),
        ),
    }
}

/// Where the MAD starts in an IPv4 RoCEv2 frame: Ethernet (14) + IPv4 (20) + UDP (8) +
/// BTH (12) + DETH (8).
const MAD_IN_FRAME: usize = 14 + 20 + 8 + 12 + 8;

/// A copy of the capture (beside it, replaced on every call) with each `(offset, bytes)`
/// written over frame 1 (the REQ) at that offset from its Ethernet header.
/// Bytes written over a frame at an offset.
type Patch<'a> = (usize, &'a [u8]);

fn doctor(pcap: &std::path::Path, name: &str, patches: &[Patch<'_>]) -> PathBuf {
    // The pcap global header (24) and frame 1's record header (16).
    const FRAME_IN_FILE: usize = 24 + 16;
    let mut file = std::fs::read(pcap).unwrap();
    for (offset, bytes) in patches {
        let at = FRAME_IN_FILE + offset;
        file[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let out = pcap.with_extension(format!("{name}.pcap"));
    std::fs::write(&out, file).unwrap();
    out
}

/// The checker is a judge, not a rubber stamp: wrong expectations and doctored bytes in an
/// otherwise good capture fail, each for its own reason.
#[test]
fn the_checker_rejects_wrong_endpoints_and_doctored_mads() {
    let cap = clean_exchange(false, "negative");
    if !tshark::tshark_or_skip("the checker's own test") {
        return;
    }
    let wrong_port = CmExpect::new(cap.active, SocketAddr::new(cap.passive.ip(), 446));
    let why = rejection(&cap.pcap, &[wrong_port]).expect("a wrong destination port");
    assert!(
        why.starts_with("no REQ from 10.0.0.1:49731 to 10.0.0.2:446"),
        "{why}"
    );
    let wrong_source = CmExpect::new(SocketAddr::new(cap.active.ip(), 1), cap.passive);
    assert!(rejection(&cap.pcap, &[wrong_source]).is_some());
    let wrong_data = CmExpect {
        req_private_data: Some(b"not what was sent"),
        ..CmExpect::new(cap.active, cap.passive)
    };
    let why = rejection(&cap.pcap, &[wrong_data]).expect("other private data");
    assert!(why.contains("REQ consumer private data"), "{why}");
    let two = [cap.expect(), cap.expect()];
    let why = rejection(&cap.pcap, &two).expect("a connection the capture lacks");
    assert!(why.contains("connections in the capture"), "{why}");

    // Doctored copies of the capture, each decoded by its own tshark, in parallel.
    let cases: [(&str, &[Patch<'_>]); 4] = [
        // The REQ's ClassVersion (MAD byte 2) 1 instead of 2: Linux drops such a MAD.
        ("class-version", &[(MAD_IN_FRAME + 2, &[1])]),
        // The service ID's protocol byte (MAD 24 + 8 + 5) UDP's 0x11: not the TCP port space.
        ("service-id", &[(MAD_IN_FRAME + 24 + 13, &[0x11])]),
        // The cma_hdr's source port (REQ private data at MAD 24 + 140, port at + 2).
        ("cma-port", &[(MAD_IN_FRAME + 24 + 140 + 2, &[0x12, 0x34])]),
        // The IPv4 TTL (Ethernet 14 + 8) changed under its header checksum: Wireshark's own
        // complaint (an expert error) is what fails.
        ("ttl", &[(14 + 8, &[63])]),
    ];
    let moved = CmExpect {
        active: SocketAddr::new(cap.active.ip(), 0x1234),
        ..cap.expect()
    };
    let verdicts: Vec<(Option<String>, Option<String>)> = std::thread::scope(|s| {
        let runs: Vec<_> = cases
            .iter()
            .map(|(name, patches)| {
                let (cap, moved) = (&cap, &moved);
                s.spawn(move || {
                    let doctored = doctor(&cap.pcap, name, patches);
                    let why = rejection(&doctored, &[cap.expect()]);
                    let as_moved = rejection(&doctored, &[*moved]);
                    let _ = std::fs::remove_file(doctored);
                    (why, as_moved)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let why = verdicts[0].0.clone().expect("ClassVersion 1");
    assert!(why.contains("ClassVersion"), "{why}");
    let why = verdicts[1].0.clone().expect("a UDP service ID");
    assert!(why.contains("service ID"), "{why}");
    let why = verdicts[2].0.clone().expect("another source port");
    assert!(why.contains("no REQ from"), "{why}");
    assert_eq!(verdicts[2].1, None, "only the port changed");
    let why = verdicts[3].0.clone().expect("a bad IPv4 checksum");
    assert!(
        why.starts_with("tshark complains about CM MAD frame 1"),
        "{why}"
    );
    assert!(why.to_lowercase().contains("checksum"), "{why}");
}

/// Drops and duplicates on both directions: the CMs retransmit on their timers, the capture
/// shows repeats, and the checker, told the fabric was lossy, still finds one connection
/// whose messages first appear in lifetime order.
#[test]
fn lossy_exchange_still_decodes_in_lifetime_order() {
    let mut x = Exchange::new(false, "lossy");
    let faults = FaultConfig {
        drop: 0.3,
        duplicate: 0.3,
        ..FaultConfig::none()
    };
    x.c.world.set_pair_faults(0, 1, faults);
    x.c.world.set_pair_faults(1, 0, faults);
    let (req_data, rep_data) = private_data();
    x.connect(&req_data, &rep_data);
    x.run_until("establishment", Exchange::established);
    x.disconnect();
    x.run_until("the DREP", Exchange::disconnected);
    x.c.world.clear_faults();
    let (active, passive) = (x.addr(0, ACTIVE_PORT), x.addr(1, PORT));
    let pair = |from: usize, to: usize| {
        let w = &x.c.world;
        w.fabric()
            .pair_counters(w.node(from).port(), w.node(to).port())
    };
    let (there, back) = (pair(0, 1), pair(1, 0));
    eprintln!("0->1 {there:?}\n1->0 {back:?}");
    let faults_seen = there.dropped.fault + back.dropped.fault + there.duplicated + back.duplicated;
    assert!(faults_seen > 0, "the fabric was lossy");
    let (a, p) = (x.ends[0].connection.unwrap(), x.ends[1].connection.unwrap());
    let cap = Captured {
        pcap: x.finish(),
        active,
        passive,
        active_id: a,
        passive_id: p,
        req_data,
        rep_data,
    };
    let lossy = CmExpect {
        delivery: Delivery::Lossy,
        ..cap.expect()
    };
    let Some(found) = tshark::check_cm_capture(&cap.pcap, &[lossy]) else {
        return;
    };
    assert_eq!(
        found.cm_mads as u64,
        there.delivered + back.delivered,
        "every delivered frame is a CM MAD in the capture"
    );
    assert!(found.cm_mads > 5, "repeats in the capture");
    let why = rejection(&cap.pcap, &[cap.expect()]).expect("repeats on a 'clean' fabric");
    assert!(why.contains("messages [\"REQ\""), "{why}");
}
