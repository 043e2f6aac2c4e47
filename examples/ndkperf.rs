//! ndkperf: NdkPerfCmd/perftest-style tests of the NDK provider on the simulated fabric.
//!
//! Brings up simulated hosts (device model, the driver's hardware layer, the NDK layer, an
//! open NDK_ADAPTER each) on one `pvrdma_sim` world, connects QPs with the test wiring
//! (MODIFY_QP INIT→RTR→RTS with the peer's QPN until connection management lands), and runs
//! rping, then latency and bandwidth of RDMA READ, RDMA WRITE and SEND/RECEIVE per message
//! size, every call through the provider's dispatch tables.
//!
//! Times are wall-clock on this host and include the simulated device and fabric, which
//! run on the calling thread (deterministic mode): they measure the whole simulation, not a
//! NIC. The per-WR counters (doorbells, interrupts, DPCs) are exact.
//!
//! `cargo run --release --example ndkperf -- --help`

#[path = "../tests/common/mod.rs"]
mod common;
mod perfkit;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use perfkit::*;
use pvrdma_ndk::ndkpi::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Test {
    /// Connectivity: ping-pong SENDs with data checked.
    Rping,
    /// RDMA READ latency and bandwidth.
    Read,
    /// RDMA WRITE latency and bandwidth.
    Write,
    /// SEND/RECEIVE latency and bandwidth.
    Send,
}

/// NdkPerfCmd/perftest-style benchmark of the pvrdma-ndk provider on simulated hosts.
#[derive(Parser, Debug)]
#[command(
    name = "ndkperf",
    version,
    about = "NdkPerfCmd/perftest-style benchmark of the pvrdma-ndk NDK provider on simulated hosts (device model + driver + NDK layer)"
)]
struct Args {
    /// Tests to run (comma-separated).
    #[arg(short, long, value_enum, value_delimiter = ',', default_values_t = [Test::Rping, Test::Read, Test::Write, Test::Send])]
    test: Vec<Test>,
    /// Message sizes in bytes (comma-separated, each ≤ 1 MiB).
    #[arg(short, long, value_delimiter = ',', default_values_t = [64u32, 1024, 4096, 65536])]
    size: Vec<u32>,
    /// Iterations per size for bandwidth (fewer for large sizes, see --max-bytes).
    #[arg(short = 'n', long, default_value_t = 2000)]
    iters: u32,
    /// Iterations per size for latency (one request in flight).
    #[arg(long, default_value_t = 300)]
    lat_iters: u32,
    /// Byte budget per size and test: iterations are capped at max-bytes / size.
    #[arg(long, default_value_t = 32 << 20)]
    max_bytes: u64,
    /// Queue depth: requests in flight per QP in bandwidth runs.
    #[arg(short = 'd', long, default_value_t = 16)]
    depth: u32,
    /// Number of QPs (connections), spread over the peer hosts.
    #[arg(short, long, default_value_t = 1)]
    qps: u32,
    /// Simulated hosts (host 0 initiates; the others are peers).
    #[arg(long, default_value_t = 2)]
    hosts: u8,
    /// Post each window of requests as a DEFER chain (one doorbell per chain).
    #[arg(long)]
    defer: bool,
    /// Wait for CQ notifications (NdkArmCq + callback) instead of polling.
    #[arg(long)]
    notify: bool,
    /// Skip latency runs.
    #[arg(long)]
    no_latency: bool,
    /// Skip bandwidth runs.
    #[arg(long)]
    no_bandwidth: bool,
    /// Write every frame on the fabric to this pcap file (RoCEv2, Ethernet link type).
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
}

struct Conn {
    peer: usize,
    qa: *mut NDK_QP,
    qb: *mut NDK_QP,
    rbuf: Remote,
}

struct Bench {
    c: Cluster,
    args: Args,
    conns: Vec<Conn>,
    cqa: *mut NDK_CQ,
    cqb: Vec<*mut NDK_CQ>,
    notified: &'static AtomicU64,
    local: Buf,
    peer_bufs: Vec<Buf>,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    doorbells: u64,
    interrupts: u64,
    dpcs: u64,
}

impl Bench {
    fn counts(&self) -> Counts {
        let mut k = Counts::default();
        for n in &self.c.nodes {
            k.doorbells += n.doorbells.load(Ordering::Relaxed);
            k.interrupts += n.interrupts();
            k.dpcs += n.dpcs();
        }
        k
    }

    /// Runs the world and reaps `n` initiator completions on host 0 (polling or notified).
    fn reap(&self, n: usize) {
        let mut res = [empty_result(); 16];
        let mut got = 0;
        while got < n {
            if self.args.notify {
                let before = self.notified.load(Ordering::SeqCst);
                arm(self.cqa, NDK_CQ_NOTIFY_ANY);
                self.c.run();
                let t = Instant::now();
                while self.notified.load(Ordering::SeqCst) == before {
                    assert!(t.elapsed() < Duration::from_secs(10), "no CQ notification");
                    std::thread::yield_now();
                }
            } else {
                self.c.run();
            }
            loop {
                let k = get_results(self.cqa, &mut res[..16.min(n - got)]);
                for r in &res[..k] {
                    assert_eq!(r.Status, STATUS_SUCCESS, "completion status");
                }
                got += k;
                if k == 0 || got == n {
                    break;
                }
            }
        }
    }

    fn reap_peer(&self, peer: usize, n: usize) {
        let cq = self.cqb[peer - 1];
        let st = self.c.drain(cq, n);
        assert!(st.iter().all(|&s| s == STATUS_SUCCESS), "peer completions");
    }

    fn post(&self, t: Test, conn: &Conn, size: u32, flags: u32) {
        let sg = [sge(self.local.addr(), size, self.c.nodes[0].token)];
        let st = match t {
            Test::Read | Test::Write => rdma(
                conn.qa,
                t == Test::Read,
                &sg,
                conn.rbuf.va,
                conn.rbuf.rkey,
                flags,
            ),
            _ => send(conn.qa, &sg, flags),
        };
        assert_eq!(st, STATUS_SUCCESS, "post {t:?}");
    }

    fn pre_receive(&self, conn: &Conn, size: u32, n: u32) {
        let b = &self.peer_bufs[conn.peer - 1];
        let sg = [sge(b.addr(), size, self.c.nodes[conn.peer].token)];
        for _ in 0..n {
            assert_eq!(receive(conn.qb, &sg), STATUS_SUCCESS);
        }
    }

    fn latency(&self, t: Test, size: u32, iters: u32) -> Vec<f64> {
        let mut v = Vec::with_capacity(iters as usize);
        for i in 0..iters {
            let conn = &self.conns[i as usize % self.conns.len()];
            if t == Test::Send {
                self.pre_receive(conn, size, 1);
            }
            let t0 = Instant::now();
            self.post(t, conn, size, 0);
            self.reap(1);
            v.push(t0.elapsed().as_secs_f64() * 1e6);
            if t == Test::Send {
                self.reap_peer(conn.peer, 1);
            }
        }
        v.sort_by(f64::total_cmp);
        v
    }

    /// Returns (elapsed, peak bytes/s over tenths of the run).
    fn bandwidth(&self, t: Test, size: u32, iters: u32, progress: &mut Progress) -> (f64, f64) {
        let depth = self.args.depth.max(1);
        let mut done = 0u32;
        let mut peak = 0f64;
        let chunk = (iters / 10).max(depth);
        let (mut mark_n, mut mark_t) = (0u32, Instant::now());
        let start = Instant::now();
        while done < iters {
            let window = depth.min(iters - done);
            let mut per_conn = vec![0u32; self.conns.len()];
            for k in 0..window {
                per_conn[(done + k) as usize % self.conns.len()] += 1;
            }
            for (conn, &n) in self.conns.iter().zip(&per_conn) {
                if t == Test::Send && n > 0 {
                    self.pre_receive(conn, size, n);
                }
                for j in 0..n {
                    let last = j + 1 == n;
                    let flags = if self.args.defer && !last {
                        NDK_OP_FLAG_DEFER
                    } else {
                        0
                    };
                    self.post(t, conn, size, flags);
                }
            }
            self.reap(window as usize);
            if t == Test::Send {
                for (conn, &n) in self.conns.iter().zip(&per_conn) {
                    if n > 0 {
                        self.reap_peer(conn.peer, n as usize);
                    }
                }
            }
            done += window;
            if done - mark_n >= chunk || done == iters {
                let dt = mark_t.elapsed().as_secs_f64();
                if dt > 0.0 {
                    peak = peak.max(f64::from(done - mark_n) * f64::from(size) / dt);
                }
                mark_n = done;
                mark_t = Instant::now();
            }
            progress.tick(done, iters);
        }
        (start.elapsed().as_secs_f64(), peak)
    }
}

struct Progress {
    label: String,
    last: Instant,
    shown: bool,
}

impl Progress {
    fn tick(&mut self, done: u32, total: u32) {
        // Only on a terminal: a progress line in a redirected log is noise.
        if self.last.elapsed() > Duration::from_millis(500) && std::io::stderr().is_terminal() {
            eprint!("\r  {}: {done}/{total} ", self.label);
            let _ = std::io::stderr().flush();
            self.last = Instant::now();
            self.shown = true;
        }
    }
    fn clear(&mut self) {
        if self.shown {
            eprint!("\r{:60}\r", "");
            self.shown = false;
        }
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn main() {
    let args = Args::parse();
    assert!(args.hosts >= 2, "--hosts must be at least 2");
    let max = *args.size.iter().max().unwrap_or(&4096);
    assert!(max <= 1 << 20, "sizes above 1 MiB are not supported");
    let c = Cluster::new(args.hosts, true);
    if let Some(path) = &args.pcap {
        let f = std::fs::File::create(path).expect("create pcap file");
        let w: Box<dyn Write + Send> = Box::new(std::io::BufWriter::new(f));
        c.world.set_capture(Some(
            pvrdma_sim::pcap::PcapWriter::new(w, pvrdma_sim::pcap::TsResolution::Nano)
                .expect("pcap header"),
        ));
    }
    let notified: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let depth = args.depth.max(1) * 2;
    let cqa = c.cq(0, 4096, Some(notified));
    let cqb: Vec<_> = (1..args.hosts as usize)
        .map(|h| c.cq(h, 4096, None))
        .collect();
    let buf_len = (max as usize).next_multiple_of(4096);
    let local = c.buffer(0, buf_len);
    let peer_bufs: Vec<_> = (1..args.hosts as usize)
        .map(|h| c.buffer(h, buf_len))
        .collect();
    let mut conns = Vec::new();
    for i in 0..args.qps as usize {
        let peer = 1 + i % (args.hosts as usize - 1);
        let qa = c.qp(0, cqa, cqa, depth, 1);
        let qb = c.qp(peer, cqb[peer - 1], cqb[peer - 1], depth, 1);
        c.connect(0, qa, peer, qb);
        let rbuf = c.remote(peer, qb, cqb[peer - 1], &peer_bufs[peer - 1]);
        conns.push(Conn { peer, qa, qb, rbuf });
    }
    let b = Bench {
        c,
        args,
        conns,
        cqa,
        cqb,
        notified,
        local,
        peer_bufs,
    };
    let a = &b.args;
    println!(
        "ndkperf: {} hosts, {} QP(s), queue depth {}, {}, {}; NDKPI 2.1 over pvrdma-sim (deterministic)",
        a.hosts,
        a.qps,
        a.depth,
        if a.defer { "DEFER chains" } else { "no DEFER" },
        if a.notify {
            "CQ notifications"
        } else {
            "CQ polling"
        }
    );
    for &t in &a.test {
        if t == Test::Rping {
            rping(&b);
            continue;
        }
        let name = match t {
            Test::Read => "RDMA_Read",
            Test::Write => "RDMA_Write",
            _ => "Send",
        };
        println!("{}", "-".repeat(150));
        println!(
            " {name} BW and latency (latency: one request in flight; BW: {} in flight per QP)",
            a.depth
        );
        println!(
            " {:>8} {:>8} {:>12} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            "#bytes",
            "#iters",
            "BWpeak[Gb/s]",
            "BWavg[Gb/s]",
            "BWavg[MB/s]",
            "MsgRate",
            "t_min",
            "t_median",
            "t_p99",
            "t_max",
            "DB/WR",
            "IRQ/WR",
            "DPC/WR"
        );
        println!(
            " {:>8} {:>8} {:>12} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            "", "", "", "", "", "[Mpps]", "[us]", "[us]", "[us]", "[us]", "", "", ""
        );
        for &size in &a.size {
            let mut progress = Progress {
                label: format!("{name} {size} B"),
                last: Instant::now(),
                shown: false,
            };
            let cap = |n: u32| {
                u32::try_from((a.max_bytes / u64::from(size.max(1))).min(u64::from(n)))
                    .unwrap_or(n)
                    .max(1)
            };
            let lat = if a.no_latency {
                Vec::new()
            } else {
                b.latency(t, size, cap(a.lat_iters))
            };
            let iters = cap(a.iters);
            let k0 = b.counts();
            let (secs, peak) = if a.no_bandwidth {
                (0.0, 0.0)
            } else {
                b.bandwidth(t, size, iters, &mut progress)
            };
            let k1 = b.counts();
            progress.clear();
            let bytes = f64::from(iters) * f64::from(size);
            let avg = if secs > 0.0 { bytes / secs } else { 0.0 };
            let per = |x: u64, y: u64| (y - x) as f64 / f64::from(iters);
            println!(
                " {:>8} {:>8} {:>12.3} {:>12.3} {:>12.2} {:>10.4} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>7.3} {:>7.3} {:>7.3}",
                size,
                iters,
                peak * 8.0 / 1e9,
                avg * 8.0 / 1e9,
                avg / 1e6,
                if secs > 0.0 {
                    f64::from(iters) / secs / 1e6
                } else {
                    0.0
                },
                pct(&lat, 0.0),
                pct(&lat, 0.5),
                pct(&lat, 0.99),
                pct(&lat, 1.0),
                per(k0.doorbells, k1.doorbells),
                per(k0.interrupts, k1.interrupts),
                per(k0.dpcs, k1.dpcs),
            );
        }
    }
    println!("{}", "-".repeat(150));
    println!(
        " counters per WR over the bandwidth run, both hosts: DB = UAR doorbell stores (posts, receives, arms), IRQ = driver ISR calls, DPC = DPC routines run"
    );
    if let Some(path) = &a.pcap {
        if let Some(mut w) = b.c.world.set_capture(None) {
            let _ = w.flush();
        }
        println!(" capture written to {}", path.display());
    }
    leak(b.c);
    std::process::exit(0);
}

/// rping: 64-byte pings host 0 → peer with a counter pattern, echoed back by the peer; the
/// echo is compared byte for byte.
fn rping(b: &Bench) {
    let n = 10;
    let t0 = Instant::now();
    for conn in &b.conns {
        let mut local = b.c.buffer(0, 4096);
        let mut pbuf = b.c.buffer(conn.peer, 4096);
        let ptoken = b.c.nodes[conn.peer].token;
        for i in 0..n {
            let msg: Vec<u8> = (0..64u8)
                .map(|k| k.wrapping_mul(7).wrapping_add(i))
                .collect();
            local.bytes()[..64].copy_from_slice(&msg);
            assert_eq!(
                receive(conn.qb, &[sge(pbuf.addr(), 64, ptoken)]),
                STATUS_SUCCESS
            );
            assert_eq!(
                receive(conn.qa, &[sge(local.addr() + 2048, 64, b.c.nodes[0].token)]),
                STATUS_SUCCESS
            );
            assert_eq!(
                send(conn.qa, &[sge(local.addr(), 64, b.c.nodes[0].token)], 0),
                STATUS_SUCCESS
            );
            b.c.run();
            b.reap_peer(conn.peer, 1);
            assert_eq!(&pbuf.bytes()[..64], &msg[..], "ping payload at the peer");
            assert_eq!(
                send(conn.qb, &[sge(pbuf.addr(), 64, ptoken)], 0),
                STATUS_SUCCESS
            );
            b.c.run();
            assert_eq!(b.c.drain(b.cqa, 2).len(), 2);
            b.reap_peer(conn.peer, 1);
            assert_eq!(&local.bytes()[2048..2048 + 64], &msg[..], "pong payload");
        }
    }
    println!("{}", "-".repeat(150));
    println!(
        " rping: {} connection(s) x {n} ping-pongs of 64 B, payloads verified: OK ({:.1} us per round trip)",
        b.conns.len(),
        t0.elapsed().as_secs_f64() * 1e6 / (f64::from(n) * b.conns.len() as f64)
    );
}
