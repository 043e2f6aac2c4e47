//! The rig of the real-peer suites: one Linux guest (tests/common/guest.rs) on an external
//! wire that each case's cluster binds again, and [`Suite`], which runs cases in order against
//! it and reports them as a table.
//!
//! A case passes when the NDK side saw every byte it expected, the Linux tool exited 0 with its
//! own checks on, and the guest's rxe counters moved no sequence error, duplicate or
//! retransmission counter, except those the case names ([`Counters`]: a case that makes
//! them move asserts what moved itself, through [`Rig::rxe_delta`]). `PVRDMA_INTEROP_CASES=TEXT` runs only
//! the cases whose name contains TEXT; `PVRDMA_INTEROP_PCAP=DIR` captures each case's frames
//! (both directions, as delivered on the fabric) to DIR/caseNN.pcap.

use std::net::{IpAddr, SocketAddr};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pvrdma_sim::external::UdpWire;
use pvrdma_sim::pcap::{PcapWriter, TsResolution};

use std::collections::BTreeMap;

#[cfg(doc)]
use super::super::guest::smbd_image_dir;
use super::super::guest::{
    COMMAND_TIMEOUT, Guest, GuestConfig, Output, RXE_SEQUENCE_ERRORS, counter_delta, free_udp_port,
};
use super::super::ndk::{Cluster, ClusterConfig, WireSpec};

/// Captures so far (`PVRDMA_INTEROP_PCAP=DIR` writes each case's frames to DIR/caseNN.pcap).
static CAPTURES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Rigs made so far: each fresh cluster is a restarted host and gets its own seed, so its
/// CM comm IDs and PSNs differ from the last one's as a rebooted Windows host's would
/// (the driver seeds from the clock). With one fixed seed, a case that fails before it
/// disconnects leaves Linux an ESTABLISHED connection whose (comm ID, CA GUID) the next
/// case's first REQ repeats, and ib_cm drops that REQ as a duplicate (cm.c
/// cm_dup_req_handler): every later case then fails with STATUS_IO_TIMEOUT.
static RIGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The guest is 198.18.0.100 and 2001:2::64; the simulated host 198.18.0.1 and 2001:2::1.
pub const GUEST: u8 = 100;

/// One Linux guest on an external wire that each case's cluster binds again.
pub struct Peer {
    /// The guest.
    pub guest: Guest,
    /// The wire's UDP port (QEMU sends there).
    pub wire_port: u16,
    /// Applied to every case's cluster config (a path MTU, say).
    pub cluster: fn(&mut ClusterConfig),
}

/// A case's cluster, joined to the guest.
pub struct Rig<'p> {
    /// The simulated host (host 0) and its fabric.
    pub c: Cluster,
    /// The external wire to the guest.
    pub wire: Arc<UdpWire>,
    /// The guest.
    pub peer: &'p Peer,
    /// Whether the case speaks IPv6 to the guest.
    pub ipv6: bool,
    /// The guest's rxe counters when the rig was made.
    pub rxe_before: BTreeMap<String, u64>,
}

impl Peer {
    /// Boots the guest (numbered [`GUEST`]).
    pub fn boot() -> Peer {
        Self::boot_with(|_| {}, |_| {})
    }

    /// Boots the guest from `image` (the SMB Direct image: [`smbd_image_dir`]), or the
    /// default image.
    pub fn boot_image(image: Option<std::path::PathBuf>) -> Peer {
        Self::boot_with(|cfg| cfg.image = image, |_| {})
    }

    /// Boots the guest with `guest` applied to its config; `cluster` is applied to every
    /// case's cluster config.
    pub fn boot_with(
        guest: impl FnOnce(&mut GuestConfig),
        cluster: fn(&mut ClusterConfig),
    ) -> Peer {
        let (guest_port, wire_port) = (free_udp_port(), free_udp_port());
        let mut cfg = GuestConfig::numbered(GUEST, guest_port, wire_port);
        guest(&mut cfg);
        let guest = Guest::boot(cfg).unwrap_or_else(|e| panic!("the Linux guest boots: {e}"));
        eprintln!("guest booted in {:?}", guest.boot_time());
        Peer {
            guest,
            wire_port,
            cluster,
        }
    }

    /// A fresh cluster joined to the guest, the guest's address of the family learned.
    pub fn rig(&self, ipv6: bool) -> Rig<'_> {
        self.rig_with(ipv6, |_| {})
    }

    /// The same with `case` applied to the cluster config after the suite's own.
    pub fn rig_with(&self, ipv6: bool, case: fn(&mut ClusterConfig)) -> Rig<'_> {
        // Nothing left of an earlier case's tools.
        let _ = self.guest.run(
            "pkill -x rping; pkill -x ucmatose; pkill -x rc_agent; pkill -f '^ib_'; true",
            COMMAND_TIMEOUT,
        );
        let rxe_before = self.guest.rdma_counters().expect("rxe counters");
        let base = ClusterConfig::real_peer(1);
        let rig = RIGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut cfg = ClusterConfig {
            ipv6,
            seed: base.seed ^ rig.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ..base
        };
        (self.cluster)(&mut cfg);
        case(&mut cfg);
        let c = Cluster::with(cfg);
        let cfg = self.guest.config();
        let wire = c.attach_wire(
            0,
            WireSpec {
                local: SocketAddr::from(([127, 0, 0, 1], self.wire_port)),
                peer: SocketAddr::from(([127, 0, 0, 1], cfg.local_udp_port)),
                peer_mac: cfg.mac,
            },
        );
        if let Some(dir) = std::env::var_os("PVRDMA_INTEROP_PCAP") {
            let n = CAPTURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::path::Path::new(&dir).join(format!("case{n:02}.pcap"));
            let f = std::fs::File::create(&path).expect("capture file");
            let w: Box<dyn std::io::Write + Send> = Box::new(std::io::BufWriter::new(f));
            let pcap = PcapWriter::new(w, TsResolution::Nano).expect("pcap header");
            c.world.fabric().set_capture(Some(pcap));
            eprintln!("capturing to {}", path.display());
        }
        let rig = Rig {
            c,
            wire,
            peer: self,
            ipv6,
            rxe_before,
        };
        rig.c.learn_neighbour(0, &rig.wire, rig.guest_ip());
        rig
    }
}

impl Rig<'_> {
    /// The guest.
    pub fn guest(&self) -> &Guest {
        &self.peer.guest
    }

    /// The guest's address of the case's family.
    pub fn guest_ip(&self) -> IpAddr {
        let cfg = self.guest().config();
        if self.ipv6 {
            IpAddr::V6(cfg.ipv6)
        } else {
            IpAddr::V4(cfg.ipv4)
        }
    }

    /// The simulated host's address of the case's family.
    pub fn host_ip(&self) -> IpAddr {
        self.c.host(0).ip_for(self.guest_ip())
    }

    /// How far the guest's rxe counters moved since the rig was made.
    pub fn rxe_delta(&self) -> BTreeMap<String, u64> {
        let now = self.guest().rdma_counters().expect("rxe counters");
        counter_delta(&self.rxe_before, &now)
    }

    /// Parts with the cluster (leak checks included).
    pub fn finish(self) {
        // The capture's writer flushes when dropped.
        drop(self.c.world.fabric().set_capture(None));
        self.c.finish();
    }
}

/// One row of a suite's table.
struct Row {
    case: String,
    outcome: Result<Duration, String>,
}

/// What a case lets the guest's sequence-error counters ([`RXE_SEQUENCE_ERRORS`]) do.
#[derive(Clone, Copy, Debug)]
pub enum Counters<'a> {
    /// None moves (a clean wire).
    Clean,
    /// These may move (the case checks them itself); the others may not.
    Moving(&'a [&'a str]),
    /// The case kills the guest: nothing is read afterwards, and the suite ends with it.
    PeerKilled,
}

/// Runs cases against one guest and reports them as a table.
pub struct Suite {
    name: &'static str,
    peer: Peer,
    rows: Vec<Row>,
}

impl Suite {
    /// Boots a guest for the suite `name`.
    pub fn new(name: &'static str) -> Suite {
        Suite::with_peer(name, Peer::boot())
    }

    /// A suite against an already booted guest.
    pub fn with_peer(name: &'static str, peer: Peer) -> Suite {
        Suite {
            name,
            peer,
            rows: Vec::new(),
        }
    }

    /// The guest.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The same with a guest and clusters of its own ([`Peer::boot_with`]).
    pub fn with(
        name: &'static str,
        guest: impl FnOnce(&mut GuestConfig),
        cluster: fn(&mut ClusterConfig),
    ) -> Suite {
        Suite {
            name,
            peer: Peer::boot_with(guest, cluster),
            rows: Vec::new(),
        }
    }

    /// The suite's guest.
    pub fn guest(&self) -> &Guest {
        &self.peer.guest
    }

    /// Whether `case` is selected (`PVRDMA_INTEROP_CASES`).
    pub fn selected(case: &str) -> bool {
        !std::env::var("PVRDMA_INTEROP_CASES").is_ok_and(|only| !case.contains(&only))
    }

    /// Runs `case` on a fresh rig and checks the guest's rxe counters moved no sequence
    /// error, duplicate or retransmission counter while it ran.
    pub fn case(&mut self, case: &str, ipv6: bool, f: impl FnOnce(&Rig<'_>)) {
        self.case_with(case, ipv6, Counters::Clean, f);
    }

    /// Runs `case` on a fresh rig; the guest's counters must do what `counters` says.
    pub fn case_with(
        &mut self,
        case: &str,
        ipv6: bool,
        counters: Counters<'_>,
        f: impl FnOnce(&Rig<'_>),
    ) {
        self.case_in(case, ipv6, counters, |_| {}, f);
    }

    /// The same on a cluster config changed by `cluster` (after the suite's own change).
    pub fn case_in(
        &mut self,
        case: &str,
        ipv6: bool,
        counters: Counters<'_>,
        cluster: fn(&mut ClusterConfig),
        f: impl FnOnce(&Rig<'_>),
    ) {
        if !Self::selected(case) {
            return;
        }
        eprintln!("--- {case}");
        let start = Instant::now();
        let peer = &self.peer;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let rig = peer.rig_with(ipv6, cluster);
            let before = rig.rxe_before.clone();
            f(&rig);
            let model = rig.c.world.counters(0).transport;
            rig.finish();
            let may_move: &[&str] = match counters {
                Counters::Clean => &[],
                Counters::Moving(names) => names,
                Counters::PeerKilled => return,
            };
            let after = peer.guest.rdma_counters().expect("rxe counters");
            let delta = counter_delta(&before, &after);
            let moved = |name: &str| delta.get(name).copied().unwrap_or(0);
            // A retransmission timer that expires because a side waited for one of this
            // machine's two cores (the guest's vCPU or the model's threads, in real time) is
            // load, not the wire: with no sequence error on either side, a duplicate that our
            // model's timeouts account for, and a retry of rxe's own timer, are reported and
            // pass. Any sequence NAK, out-of-sequence request or retry exhausted still fails.
            // One timeout resends every request outstanding from the oldest unacknowledged
            // (go-back-N, IBTA 9.7.5.1.5: 1 MiB READs at depth 5 resend up to 5), so the
            // duplicates rxe may count are the request packets our model sent again, once a
            // timer of ours expired.
            let no_sequence_error = moved("out_of_seq_request") == 0
                && moved("rcvd_seq_err") == 0
                && model.seq_naks_sent == 0;
            let timer_only = |name: &str| {
                no_sequence_error
                    && match name {
                        "duplicate_request" => {
                            model.timeouts > 0 && moved(name) <= model.retransmits
                        }
                        "completer_retry_err" => true,
                        _ => false,
                    }
            };
            for name in RXE_SEQUENCE_ERRORS {
                if may_move.contains(&name) {
                    continue;
                }
                if moved(name) != 0 && timer_only(name) {
                    eprintln!(
                        "  ! {name} {} on a retransmission timer (model timeouts {}, \
                         request packets resent {}), no sequence error on either side: load, \
                         not the wire",
                        moved(name),
                        model.timeouts,
                        model.retransmits
                    );
                    continue;
                }
                assert_eq!(
                    delta.get(name).copied().unwrap_or(0),
                    0,
                    "rxe counter {name} moved on a clean wire: {delta:?}; the model's \
                     transport: {model:?}"
                );
            }
        }))
        .map(|()| start.elapsed())
        .map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_else(|| "panicked".into())
        });
        self.rows.push(Row {
            case: case.to_string(),
            outcome,
        });
    }

    /// Prints the table and fails if any case did.
    pub fn finish(self) {
        eprintln!("\n{} against Linux (rdma_rxe, QEMU/TCG):", self.name);
        eprintln!("| case | result | wall time |\n|---|---|---|");
        let mut failed = Vec::new();
        for r in &self.rows {
            match &r.outcome {
                Ok(t) => eprintln!("| {} | pass | {:.1} s |", r.case, t.as_secs_f64()),
                Err(e) => {
                    eprintln!("| {} | FAIL | |", r.case);
                    failed.push(format!("{}: {e}", r.case));
                }
            }
        }
        assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n\n"));
    }
}

/// "IPv4" or "IPv6".
pub fn family(ipv6: bool) -> &'static str {
    if ipv6 { "IPv6" } else { "IPv4" }
}

/// Checks a Linux tool's own verdict: exit status 0.
pub fn linux_ok(tool: &str, out: &Output) {
    assert!(out.success(), "{tool} failed: {out}");
}
