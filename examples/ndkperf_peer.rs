//! ndkperf against a real peer: the provider's latency and bandwidth measured with perftest
//! on the other end. Boots the Linux guest of docs/PEER.md (Debian's rdma_rxe and perftest
//! 4.5, in QEMU) through the test harness, joins it to one simulated host running the driver
//! over the PVRDMA model in real time, and for every test and size runs the perftest program
//! (`ib_{send,read,write}_{lat,bw} -R`) in the guest opposite the NDK side's implementation of
//! perftest's exchange (tests/common/interop/perftest.rs), printing the NDK side's table and
//! perftest's own for the same run.
//!
//! **What the numbers are.** Both ends are software on this machine: the guest runs under
//! QEMU's TCG (no KVM here), its RDMA NIC is rdma_rxe, and the simulated host is the device
//! model and the driver in this process; the wire between them is a UDP socket on loopback
//! that pauses the model while QEMU's socket buffer is half full. They measure this whole
//! setup, not a NIC, and vary with the machine's load; they are no prediction of the driver on
//! VMware's PVRDMA. Each side times what it does: perftest with its cycle counter, the NDK
//! side with the wall clock around its posts and completions (latency: send and write half a
//! round trip, read one READ; bandwidth: MiB/s = 2^20 bytes/s over the data phase).
//!
//! One command builds QEMU and the guest image (cached under target/peer) and runs it:
//! `cargo run --release --example ndkperf_peer` (`-- --help` for the options).

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;

use clap::{Parser, ValueEnum};
use common::interop::perftest::{self, Kind, OUT_READS, Role, Test, Tool, Verb, table_row};
use common::interop::rig::Peer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Op {
    /// RDMA READ (ib_read_lat, ib_read_bw).
    Read,
    /// RDMA WRITE (ib_write_lat, ib_write_bw).
    Write,
    /// SEND/RECEIVE (ib_send_lat, ib_send_bw).
    Send,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Side {
    /// perftest in the guest is the server, the NDK side connects.
    Server,
    /// perftest in the guest connects to the NDK side.
    Client,
}

/// ndkperf's latency and bandwidth tests with perftest in a Linux guest as the peer.
#[derive(Parser, Debug)]
#[command(
    name = "ndkperf_peer",
    about = "the pvrdma-ndk provider (simulated host) against perftest in a Linux guest (rdma_rxe, QEMU/TCG); MiB = 2^20 bytes"
)]
struct Args {
    /// Operations (comma-separated).
    #[arg(short, long, value_enum, value_delimiter = ',', default_values_t = [Op::Read, Op::Write, Op::Send])]
    test: Vec<Op>,
    /// Message sizes in bytes (comma-separated, 1 to 1048576).
    #[arg(short, long, value_delimiter = ',', default_values_t = [64u32, 4096, 65536],
          value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    size: Vec<u32>,
    /// Iterations of the latency tests.
    #[arg(long, default_value_t = 100)]
    lat_iters: u32,
    /// Iterations of the bandwidth tests.
    #[arg(long, default_value_t = 200)]
    bw_iters: u32,
    /// Operations outstanding in the bandwidth tests (perftest's -t; READs also at most 16,
    /// the negotiated IRD/ORD).
    #[arg(long, default_value_t = 16)]
    tx_depth: u32,
    /// perftest's role in the guest.
    #[arg(long, value_enum, default_value_t = Side::Server)]
    perftest: Side,
}

/// Runs one of the repository's peer scripts, returning its last line of output.
fn script(name: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/peer/");
    let out = Command::new("bash")
        .arg(format!("{path}{name}"))
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        out.status.success(),
        "{name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().last().unwrap_or_default().trim().to_string()
}

fn main() {
    let args = Args::parse();
    if std::env::var_os("PVRDMA_QEMU").is_none() {
        eprintln!("ndkperf_peer: QEMU (tools/peer/qemu.sh, cached) ...");
        // SAFETY: single-threaded here, before any thread is started.
        unsafe { std::env::set_var("PVRDMA_QEMU", script("qemu.sh")) };
    }
    if std::env::var_os("PVRDMA_PEER_DIR").is_none() {
        eprintln!("ndkperf_peer: the guest image (tools/peer/build-guest.sh, cached) ...");
        let dir = script("build-guest.sh");
        // SAFETY: as above.
        unsafe { std::env::set_var("PVRDMA_PEER_DIR", dir) };
    }
    let peer = Peer::boot();
    let linux = match args.perftest {
        Side::Server => Role::Server,
        Side::Client => Role::Client,
    };
    println!(
        "ndkperf_peer: the NDK provider on a simulated host (device model + driver, this \
         process) against perftest 4.5 in a Linux guest (rdma_rxe under QEMU TCG), perftest \
         as {}, IPv4, path MTU 1024. Both ends are emulated: the numbers measure this setup, \
         not a NIC.",
        match linux {
            Role::Server => "server",
            Role::Client => "client",
        }
    );
    for op in &args.test {
        let verb = match op {
            Op::Read => Verb::Read,
            Op::Write => Verb::Write,
            Op::Send => Verb::Send,
        };
        for kind in [Kind::Lat, Kind::Bw] {
            let tool = Tool::new(verb, kind);
            println!(
                "\n=== {} -R (perftest {}) ===",
                tool.name(),
                side_name(linux)
            );
            for &size in &args.size {
                let iters = if kind == Kind::Lat {
                    args.lat_iters
                } else {
                    args.bw_iters
                };
                let mut t = Test::new(tool, size as usize, iters.max(5), OUT_READS);
                if kind == Kind::Bw {
                    t.tx_depth = args.tx_depth.max(1);
                }
                let rig = peer.rig(false);
                let (report, out) = perftest::run_against_linux(&rig, t, linux);
                rig.finish();
                if !out.success() {
                    println!("perftest failed: {out}");
                    std::process::exit(1);
                }
                println!("  ndkperf (NDK side, {}):", side_name(other(linux)));
                println!("  {}", report.table_header());
                println!("  {}", report.table_row());
                println!("  perftest ({}, its own table):", side_name(linux));
                match out
                    .stdout
                    .lines()
                    .find(|l| table_row(l, t.size, t.iters).is_some())
                {
                    Some(row) => {
                        if let Some(h) = out.stdout.lines().find(|l| l.contains("#bytes")) {
                            println!("  {}", h.trim_end());
                        }
                        println!("  {}", row.trim_end());
                    }
                    None => println!("   (none: perftest's read_lat server prints no table)"),
                }
            }
        }
    }
}

fn other(r: Role) -> Role {
    match r {
        Role::Server => Role::Client,
        Role::Client => Role::Server,
    }
}

fn side_name(r: Role) -> &'static str {
    match r {
        Role::Server => "server",
        Role::Client => "client",
    }
}
