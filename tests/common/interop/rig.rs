//! The rig of the real-peer suites: one Linux guest (tests/common/guest.rs) on an external
//! wire that each case's cluster binds again, and [`Suite`], which runs cases in order against
//! it and reports them as a table.
//!
//! A case passes when the NDK side saw every byte it expected, the Linux tool exited 0 with its
//! own checks on, and (unless the case says otherwise) the guest's rxe counters moved no
//! sequence error, duplicate or retransmission counter. `PVRDMA_INTEROP_CASES=TEXT` runs only
//! the cases whose name contains TEXT; `PVRDMA_INTEROP_PCAP=DIR` captures each case's frames
//! (both directions, as delivered on the fabric) to DIR/caseNN.pcap.

use std::net::{IpAddr, SocketAddr};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pvrdma_sim::external::UdpWire;
use pvrdma_sim::pcap::{PcapWriter, TsResolution};

#[cfg(doc)]
use super::super::guest::smbd_image_dir;
use super::super::guest::{
    COMMAND_TIMEOUT, Guest, GuestConfig, Output, RXE_SEQUENCE_ERRORS, counter_delta, free_udp_port,
};
use super::super::ndk::{Cluster, ClusterConfig, WireSpec};

/// Captures so far (`PVRDMA_INTEROP_PCAP=DIR` writes each case's frames to DIR/caseNN.pcap).
static CAPTURES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The guest is 198.18.0.100 and 2001:2::64; the simulated host 198.18.0.1 and 2001:2::1.
pub const GUEST: u8 = 100;

/// One Linux guest on an external wire that each case's cluster binds again.
pub struct Peer {
    /// The guest.
    pub guest: Guest,
    /// The wire's UDP port (QEMU sends there).
    pub wire_port: u16,
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
}

impl Peer {
    /// Boots the guest (numbered [`GUEST`]).
    pub fn boot() -> Peer {
        Peer::boot_image(None)
    }

    /// Boots the guest from `image` (the SMB Direct image: [`smbd_image_dir`]), or the
    /// default image.
    pub fn boot_image(image: Option<std::path::PathBuf>) -> Peer {
        let (guest_port, wire_port) = (free_udp_port(), free_udp_port());
        let cfg = GuestConfig {
            image,
            ..GuestConfig::numbered(GUEST, guest_port, wire_port)
        };
        let guest = Guest::boot(cfg).unwrap_or_else(|e| panic!("the Linux guest boots: {e}"));
        eprintln!("guest booted in {:?}", guest.boot_time());
        Peer { guest, wire_port }
    }

    /// A fresh cluster joined to the guest, the guest's address of the family learned.
    pub fn rig(&self, ipv6: bool) -> Rig<'_> {
        // Nothing left of an earlier case's tools.
        let _ = self.guest.run(
            "pkill -x rping; pkill -x ucmatose; pkill -f '^ib_'; true",
            COMMAND_TIMEOUT,
        );
        let c = Cluster::with(ClusterConfig {
            ipv6,
            ..ClusterConfig::real_peer(1)
        });
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

    /// Runs `case` on a fresh rig and checks the guest's rxe counters moved no sequence
    /// error, duplicate or retransmission counter while it ran.
    pub fn case(&mut self, case: &str, ipv6: bool, f: impl FnOnce(&Rig<'_>)) {
        if std::env::var("PVRDMA_INTEROP_CASES").is_ok_and(|only| !case.contains(&only)) {
            return;
        }
        eprintln!("--- {case}");
        let start = Instant::now();
        let peer = &self.peer;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let before = peer.guest.rdma_counters().expect("rxe counters");
            let rig = peer.rig(ipv6);
            f(&rig);
            rig.finish();
            let after = peer.guest.rdma_counters().expect("rxe counters");
            let delta = counter_delta(&before, &after);
            for name in RXE_SEQUENCE_ERRORS {
                assert_eq!(
                    delta.get(name).copied().unwrap_or(0),
                    0,
                    "rxe counter {name} moved on a clean wire: {delta:?}"
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
