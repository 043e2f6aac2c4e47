//! smbdperf: the workload SMB Direct puts on an NDK provider, between two simulated hosts.
//!
//! Host 0 runs the SMB2 client of tests/common/smbd/client.rs, host 1 the in-memory SMB2
//! responder of tests/common/smbd/responder.rs, both over the MS-SMBD transport of
//! tests/common/smbd/transport.rs with Windows' defaults (255 credits, 1364-byte sends,
//! 8192-byte receives), every call through the provider's NDK dispatch tables onto the
//! PVRDMA device model. After NEGOTIATE 3.1.1, SESSION_SETUP (NTLMv2), TREE_CONNECT and
//! CREATE, it keeps N requests outstanding of:
//!
//! - RDMA-channel WRITE: the client fast-registers its buffer (NdkFastRegister) and sends
//!   the descriptor with SMB2_CHANNEL_RDMA_V1_INVALIDATE; the server RDMA READs it and
//!   answers with Send-with-Invalidate, the client's receive reporting the token;
//! - RDMA-channel READ: the same with the server's RDMA WRITE into the client's buffer;
//! - inline WRITE and READ: the data in the SMB2 message, fragmented into 1364-byte sends.
//!
//! For each I/O size (4 KiB, 64 KiB, 1 MiB by default) it prints perftest-style rows
//! (MB = 2^20 bytes, IOPS, latency percentiles from submit to response) and the provider's
//! cost per I/O on each host from the device model's counters: doorbells (SQ/RQ posts; CQ
//! arm and poll), interrupts and DPCs. Each side arms its CQ once drained and takes
//! completions after the notification (interrupt-driven, as Windows' SMB Direct runs;
//! `--poll` polls only). Times are wall clock on this host and include the
//! simulated device and fabric running on the same thread (deterministic mode): they
//! measure the whole simulation, not a NIC; the counts are exact.
//!
//! `cargo run --release --example smbdperf -- --help`

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use clap::Parser;
use common::Mode;
use common::ndk::{Cluster, ClusterConfig, pattern};
use common::smbd::client::Client;
use common::smbd::responder::Responder;
use common::smbd::transport::{RdmaBuffer, pair, shutdown};
use common::smbd::{SmbdConfig, smb2};

const MB: f64 = 1_048_576.0;

/// SMB Direct workload (SMB2 over MS-SMBD over the NDK provider) between two simulated hosts.
#[derive(Parser, Debug)]
#[command(
    name = "smbdperf",
    about = "SMB2 READ/WRITE through the RDMA channel and inline over MS-SMBD over the pvrdma-ndk provider, two simulated hosts; MB = 2^20 bytes"
)]
struct Args {
    /// I/O sizes in bytes (comma-separated, 512 to 1048576).
    #[arg(short, long, value_delimiter = ',', default_values_t = [4096u32, 65536, 1 << 20],
          value_parser = clap::value_parser!(u32).range(512..=1 << 20))]
    size: Vec<u32>,
    /// Requests kept outstanding (1 to 16).
    #[arg(short, long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=16))]
    depth: u32,
    /// I/Os per test (capped by --max-bytes / size, at least --depth).
    #[arg(short = 'n', long, default_value_t = 2000)]
    iters: u64,
    /// Byte budget per test.
    #[arg(long, default_value_t = 256 << 20)]
    max_bytes: u64,
    /// Skip the inline tests.
    #[arg(long)]
    no_inline: bool,
    /// Poll the CQs only (no NdkArmCq, so no interrupts): the default arms each CQ once
    /// drained and takes completions after the notification, as Windows' SMB Direct does.
    #[arg(long)]
    poll: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    RdmaWrite,
    RdmaRead,
    InlineWrite,
    InlineRead,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::RdmaWrite => "WRITE rdma",
            Kind::RdmaRead => "READ rdma",
            Kind::InlineWrite => "WRITE inline",
            Kind::InlineRead => "READ inline",
        }
    }
    fn write(self) -> bool {
        matches!(self, Kind::RdmaWrite | Kind::InlineWrite)
    }
    fn rdma(self) -> bool {
        matches!(self, Kind::RdmaWrite | Kind::RdmaRead)
    }
}

/// One host's provider activity: doorbells (QP/SRQ posts; CQ arm and poll), interrupts,
/// DPCs.
#[derive(Clone, Copy, Default)]
struct Cost {
    post_doorbells: u64,
    cq_doorbells: u64,
    interrupts: u64,
    dpcs: u64,
}

fn cost(c: &Cluster, host: usize) -> Cost {
    let h = c.host(host);
    let k = h.model.counters();
    let ex: &[&pvrdma_host::HostExecutor] = &[h.platform.executor()];
    Cost {
        post_doorbells: k.db_qp_send + k.db_qp_recv + k.db_srq,
        cq_doorbells: k.db_cq_arm + k.db_cq_arm_sol + k.db_cq_poll,
        interrupts: k.interrupts.iter().sum(),
        dpcs: common::dpc_runs(ex),
    }
}

struct Row {
    kind: Kind,
    size: u32,
    iters: u64,
    secs: f64,
    lat_us: Vec<f64>,
    client: [f64; 4],
    server: [f64; 4],
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Keeps `depth` requests of `kind` outstanding until `iters` completed.
fn run(
    c: &Cluster,
    cl: &mut Client<'_>,
    bufs: &mut [RdmaBuffer],
    fid: [u8; 16],
    kind: Kind,
    size: u32,
    iters: u64,
) -> Row {
    let depth = bufs.len();
    let size_us = size as usize;
    let data = pattern(size as u8 ^ 0x5a, size_us);
    let mut slots: Vec<Option<(u64, Instant)>> = vec![None; depth];
    let (mut issued, mut done) = (0u64, 0u64);
    let mut lat_us = Vec::with_capacity(iters as usize);
    let (c0, s0) = (cost(c, 0), cost(c, 1));
    let start = Instant::now();
    while done < iters {
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.is_some() || issued == iters {
                continue;
            }
            let charge = smb2::credit_charge(size_us);
            if cl.credits < u32::from(charge) {
                break;
            }
            let offset = (i * size_us) as u64;
            let id = match kind {
                Kind::RdmaWrite | Kind::RdmaRead => cl
                    .start_rdma(kind.write(), fid, offset, &mut bufs[i], size_us)
                    .expect("RDMA-channel request"),
                Kind::InlineWrite => {
                    let body = smb2::write_body(fid, offset, &data, None);
                    cl.submit(smb2::WRITE, charge, &body).expect("WRITE")
                }
                Kind::InlineRead => {
                    let body = smb2::read_body(fid, offset, size, None);
                    cl.submit(smb2::READ, charge, &body).expect("READ")
                }
            };
            *slot = Some((id, Instant::now()));
            issued += 1;
        }
        cl.t.poll();
        cl.local_peer
            .as_mut()
            .unwrap()
            .step()
            .expect("the responder");
        c.world.run_until_idle();
        cl.t.poll();
        cl.collect().expect("responses");
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some((id, t)) = *slot else { continue };
            let Some(m) = cl.take(id) else { continue };
            if kind.rdma() {
                cl.finish_rdma(kind.write(), &m, &mut bufs[i], size_us)
                    .expect("RDMA-channel response");
            } else {
                let h = smb2::Header::decode(&m).unwrap();
                assert_eq!(h.status, 0, "{} status", kind.name());
                if kind.write() {
                    assert_eq!(smb2::write_response_count(&m), Some(size));
                } else {
                    assert_eq!(smb2::read_response(&m).unwrap().0.len(), size_us);
                }
            }
            lat_us.push(t.elapsed().as_secs_f64() * 1e6);
            *slot = None;
            done += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (c1, s1) = (cost(c, 0), cost(c, 1));
    let per = |a: Cost, b: Cost| {
        [
            (b.post_doorbells - a.post_doorbells) as f64 / iters as f64,
            (b.cq_doorbells - a.cq_doorbells) as f64 / iters as f64,
            (b.interrupts - a.interrupts) as f64 / iters as f64,
            (b.dpcs - a.dpcs) as f64 / iters as f64,
        ]
    };
    lat_us.sort_by(f64::total_cmp);
    Row {
        kind,
        size,
        iters,
        secs,
        lat_us,
        client: per(c0, c1),
        server: per(s0, s1),
    }
}

fn main() {
    let args = Args::parse();
    let wall = Instant::now();
    let c = Cluster::with(ClusterConfig::cm(Mode::Deterministic, 2));
    let win = SmbdConfig::windows();
    let (t, sv, listener) = pair(&c, win, win).expect("MS-SMBD negotiate");
    let mut cl = Client::new(t);
    cl.t.interrupt_driven = !args.poll;
    let mut sv = Responder::new(sv, "smbdperf");
    sv.t.interrupt_driven = !args.poll;
    cl.local_peer = Some(sv);
    cl.negotiate(&[smb2::SMB302, smb2::SMB311])
        .expect("NEGOTIATE");
    cl.session_setup("smbdperf", "smbdperf", "WORKGROUP")
        .expect("SESSION_SETUP");
    cl.tree_connect("\\\\198.18.0.2\\share")
        .expect("TREE_CONNECT");
    let (fid, _) = cl
        .create("perf.bin", smb2::FILE_OVERWRITE_IF)
        .expect("CREATE");
    let depth = args.depth as usize;
    let max = *args.size.iter().max().unwrap() as usize;
    let mut bufs: Vec<RdmaBuffer> = (0..depth).map(|_| cl.t.buffer(max)).collect();
    println!(
        "smbdperf: SMB2 3.1.1 over MS-SMBD over pvrdma-ndk, two simulated hosts (device model + driver + NDK), {} outstanding, MB = 2^20 B",
        depth
    );
    println!(
        "cost columns, per I/O on the client (host 0) and the server (host 1): post doorbells (SQ, RQ) / CQ doorbells (arm, poll) / interrupts / DPCs; CQs {}\n",
        if args.poll {
            "polled only"
        } else {
            "armed once drained (interrupt-driven, as Windows' SMB Direct)"
        }
    );
    println!(
        "{:<13} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>23} | {:>23}",
        "test",
        "bytes",
        "iters",
        "MB/s",
        "IOPS",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "client post/cq/int/dpc",
        "server post/cq/int/dpc"
    );
    let mut kinds = vec![Kind::RdmaWrite, Kind::RdmaRead];
    if !args.no_inline {
        kinds.extend([Kind::InlineWrite, Kind::InlineRead]);
    }
    for &size in &args.size {
        let iters = args
            .iters
            .min(args.max_bytes / u64::from(size))
            .max(args.depth.into());
        for &kind in &kinds {
            // Inline messages must fit the peer's MaxFragmentedSize (1 MiB with the WRITE
            // header): the largest size goes through the RDMA channel only.
            if !kind.rdma() && size as usize + smb2::RW_BUFFER_OFFSET > 1 << 20 {
                continue;
            }
            let r = run(&c, &mut cl, &mut bufs, fid, kind, size, iters);
            let mbps = f64::from(r.size) * r.iters as f64 / MB / r.secs;
            let f = |v: [f64; 4]| format!("{:.2}/{:.2}/{:.2}/{:.2}", v[0], v[1], v[2], v[3]);
            println!(
                "{:<13} {:>8} {:>7} {:>9.1} {:>9.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>23} | {:>23}",
                r.kind.name(),
                r.size,
                r.iters,
                mbps,
                r.iters as f64 / r.secs,
                pct(&r.lat_us, 0.5),
                pct(&r.lat_us, 0.99),
                pct(&r.lat_us, 0.999),
                r.lat_us.last().copied().unwrap_or(0.0),
                f(r.client),
                f(r.server)
            );
        }
    }
    let sv = cl.local_peer.as_ref().unwrap();
    println!(
        "\nresponder: {} requests, {} RDMA READs ({:.0} MB), {} RDMA WRITEs ({:.0} MB), {} Send-with-Invalidate; client transport: {} fragments sent, {} received, {} tokens invalidated by the server",
        sv.stats.requests,
        sv.stats.rdma_reads,
        sv.stats.bytes_read_rdma as f64 / MB,
        sv.stats.rdma_writes,
        sv.stats.bytes_written_rdma as f64 / MB,
        sv.stats.invalidating_responses,
        cl.t.stats.fragments_sent,
        cl.t.stats.fragments_received,
        cl.t.stats.invalidated.len()
    );
    cl.close_file(fid).expect("CLOSE");
    cl.logoff().expect("LOGOFF");
    for b in bufs {
        cl.t.free_buffer(b);
    }
    let sv = cl.local_peer.take().unwrap();
    shutdown(cl.t, sv.t);
    listener.close();
    c.finish();
    println!("total {:.1} s", wall.elapsed().as_secs_f64());
}
