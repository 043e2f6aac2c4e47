//! ndkperf: perftest-style tests of the NDK provider on the simulated fabric.
//!
//! Brings up simulated hosts (device model, the driver's hardware layer, the NDK layer, an
//! open NDK_ADAPTER and a connection engine each) on one `pvrdma_sim` world, connects QPs
//! through the CM (NdkListen / NdkConnect / NdkAccept / NdkCompleteConnect), runs rping,
//! then latency and bandwidth of RDMA READ, RDMA WRITE and SEND/RECEIVE per message size,
//! and parts every connection with NdkDisconnect; every call goes through the provider's
//! dispatch tables. `--pcap` captures all of it, from the first REQ to the last DREP.
//!
//! perftest's conventions: MB = 2^20 bytes; latency as ib_read_lat (one READ round trip) and
//! ib_write_lat / ib_send_lat (half a ping-pong round trip); bandwidth as ib_*_bw with the
//! send queue kept full (a request is posted for every completion reaped).
//!
//! Times are wall-clock on this host and include the simulated device and fabric, which
//! run on the calling thread (deterministic mode): they measure the whole simulation, not a
//! NIC. The per-WR counters (doorbells, interrupts, DPCs) are exact, and the provider column
//! is the time spent inside provider calls only.
//!
//! `cargo run --release --example ndkperf -- --help`

#[path = "../tests/common/mod.rs"]
mod common;
mod perfkit;
#[path = "perfkit/report.rs"]
mod report;

use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, ValueEnum};
use perfkit::*;
use pvrdma_ndk::ndkpi::*;
use report::{BwRow, LatRow, LatStats, MB, TestResult};

/// Largest message: the buffers are sized for it.
const MAX_SIZE: u32 = 1 << 20;
/// Deepest send queue: the QP is created with twice the depth (room for a DEFER chain being
/// refilled), and the device takes at most 4096 work requests per queue.
const MAX_DEPTH: u32 = 2048;
/// Every QP's requests complete on host 0's one CQ (and, for SEND, its receives on the
/// peer's): queue pairs × depth must fit in it with room to spare.
const MAX_IN_FLIGHT: u32 = 16384;
/// READs a QP keeps outstanding: the OutboundReadLimit every connection asks for, which the
/// model's adapter (MaxOutboundReadLimit 16) grants; checked once connected.
const OUTSTANDING_READS: u32 = READ_LIMIT;
/// RequestContext tag of receives (the rest is the connection index).
const RECV_TAG: usize = 1 << 40;

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

/// perftest-style benchmark of the pvrdma-ndk provider on simulated hosts.
#[derive(Parser, Debug)]
#[command(
    name = "ndkperf",
    version,
    about = "perftest-style benchmark of the pvrdma-ndk NDK provider on simulated hosts (device model + driver + NDK layer); MB = 2^20 bytes"
)]
struct Args {
    /// Tests to run (comma-separated).
    #[arg(short, long, value_enum, value_delimiter = ',', default_values_t = [Test::Rping, Test::Read, Test::Write, Test::Send])]
    test: Vec<Test>,
    /// Message sizes in bytes (comma-separated, 1 to 1048576).
    #[arg(short, long, value_delimiter = ',', default_values_t = [64u32, 1024, 4096, 65536],
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SIZE)))]
    size: Vec<u32>,
    /// Iterations per size for bandwidth (fewer for large sizes, see --max-bytes).
    #[arg(short = 'n', long, default_value_t = 2000,
          value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    iters: u32,
    /// Iterations per size for latency (one request, or one ping-pong, in flight).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    lat_iters: u32,
    /// Byte budget per size and test: iterations are capped at max-bytes / size.
    #[arg(long, default_value_t = 32 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    max_bytes: u64,
    /// TX depth: requests kept outstanding per QP in bandwidth runs (1 to 2048).
    #[arg(short = 'd', long, default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DEPTH)))]
    depth: u32,
    /// Number of QPs (connections), spread over the peer hosts (1 to 1024).
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    qps: u32,
    /// Simulated hosts, 2 to 8 (host 0 initiates; the others are peers).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=8))]
    hosts: u8,
    /// Post each refill of the window as a DEFER chain (one doorbell per chain).
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
    /// Print the results as CSV instead of tables.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Draw bandwidth vs message size and the latency distributions into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Write every frame on the fabric to this pcap file (RoCEv2, Ethernet link type).
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
}

struct Conn {
    peer: usize,
    qa: *mut NDK_QP,
    qb: *mut NDK_QP,
    /// The peer's buffer, as host 0 reaches it.
    rbuf: Remote,
    /// Host 0's buffer, as the peer reaches it (WRITE ping-pong).
    lbuf: Remote,
}

/// Wall-clock time spent inside provider calls, one sample per call: the figure reported is
/// the median call times the calls per request, so a preemption landing inside one call (the
/// machine is shared) does not count as provider work.
#[derive(Default)]
struct ProviderClock {
    posts: RefCell<Vec<f64>>,
    polls: RefCell<Vec<f64>>,
    /// What one `Instant::now()` pair costs, subtracted from every timed call.
    overhead_ns: f64,
}

impl ProviderClock {
    fn calibrated() -> Self {
        let n = 2000;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(Instant::now().elapsed());
        }
        Self {
            overhead_ns: t.elapsed().as_nanos() as f64 / f64::from(n),
            ..Self::default()
        }
    }

    /// Times `f`, leaving out what the doorbell hook of host `node` spent inside it (the
    /// model's work, with the hook's own clock reads): the provider's cost alone.
    fn time<R>(&self, node: &Node, f: impl FnOnce() -> R) -> (R, f64) {
        let hook_calls =
            || node.doorbells.load(Ordering::Relaxed) + node.poll_doorbells.load(Ordering::Relaxed);
        let (hook_ns0, calls0) = (node.hook_ns.load(Ordering::Relaxed), hook_calls());
        let t = Instant::now();
        let r = f();
        let total = t.elapsed().as_nanos() as f64;
        let hook = (node.hook_ns.load(Ordering::Relaxed) - hook_ns0) as f64;
        let calls = (hook_calls() - calls0) as f64;
        // A hook call costs what it measured plus one clock read outside its window (half a
        // `now()`/`elapsed()` pair).
        let ns = (total - self.overhead_ns - hook - calls * self.overhead_ns / 2.0).max(0.0);
        (r, ns)
    }

    fn clear(&self) {
        self.posts.borrow_mut().clear();
        self.polls.borrow_mut().clear();
    }

    /// Median post × posts + median poll × polls that returned completions, per request.
    fn per_request(&self, requests: u32) -> f64 {
        let part = |v: &RefCell<Vec<f64>>| {
            let v = v.borrow();
            LatStats::of(&v).typical * v.len() as f64
        };
        (part(&self.posts) + part(&self.polls)) / f64::from(requests.max(1))
    }
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
    clock: ProviderClock,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    doorbells: u64,
    poll_doorbells: u64,
    interrupts: u64,
    dpcs: u64,
}

fn post_rdma(conn: &Conn, k: usize, read: bool, sg: &NDK_SGE, flags: u32) -> NTSTATUS {
    let d = disp(unsafe_dispatch_qp(conn.qa));
    let f = if read { d.NdkRead } else { d.NdkWrite };
    // SAFETY: a live QP; one SGE; the request context is an integer tag, never dereferenced.
    unsafe {
        f(
            conn.qa,
            k as PVOID,
            sg,
            1,
            conn.rbuf.va,
            conn.rbuf.rkey,
            flags,
        )
    }
}

fn post_send(qp: *mut NDK_QP, k: usize, sg: &NDK_SGE, flags: u32) -> NTSTATUS {
    let f = disp(unsafe_dispatch_qp(qp)).NdkSend;
    // SAFETY: a live QP; one SGE; the context is an integer tag.
    unsafe { f(qp, k as PVOID, sg, 1, flags) }
}

fn post_receive(qp: *mut NDK_QP, k: usize, sg: &NDK_SGE) -> NTSTATUS {
    let f = disp(unsafe_dispatch_qp(qp)).NdkReceive;
    // SAFETY: a live QP; one SGE; the context is an integer tag.
    unsafe { f(qp, (RECV_TAG | k) as PVOID, sg, 1) }
}

impl Bench {
    fn counts(&self) -> Counts {
        let mut k = Counts::default();
        for n in &self.c.nodes {
            k.doorbells += n.doorbells.load(Ordering::Relaxed);
            k.poll_doorbells += n.poll_doorbells.load(Ordering::Relaxed);
            k.interrupts += n.interrupts();
            k.dpcs += n.dpcs();
        }
        k
    }

    fn local_sge(&self, size: u32) -> NDK_SGE {
        sge(self.local.addr(), size, self.c.nodes[0].token)
    }

    fn peer_sge(&self, conn: &Conn, size: u32) -> NDK_SGE {
        let b = &self.peer_bufs[conn.peer - 1];
        sge(b.addr(), size, self.c.nodes[conn.peer].token)
    }

    /// Posts one initiator request of `t` on connection `k` (timed as provider work).
    fn post(&self, t: Test, k: usize, size: u32, flags: u32) {
        let conn = &self.conns[k];
        let sg = self.local_sge(size);
        let (st, ns) = self.clock.time(&self.c.nodes[0], || match t {
            Test::Read | Test::Write => post_rdma(conn, k, t == Test::Read, &sg, flags),
            _ => post_send(conn.qa, k, &sg, flags),
        });
        self.clock.posts.borrow_mut().push(ns);
        assert_eq!(st, STATUS_SUCCESS, "post {t:?}");
    }

    fn pre_receive(&self, k: usize, size: u32) {
        let conn = &self.conns[k];
        let sg = self.peer_sge(conn, size);
        assert_eq!(post_receive(conn.qb, k, &sg), STATUS_SUCCESS, "NdkReceive");
    }

    /// Polls host 0's CQ once (timed when it returns completions); checks every status.
    fn poll(&self, out: &mut [NDK_RESULT]) -> usize {
        let (k, ns) = self
            .clock
            .time(&self.c.nodes[0], || get_results(self.cqa, out));
        if k > 0 {
            self.clock.polls.borrow_mut().push(ns);
        }
        for r in &out[..k] {
            assert_eq!(r.Status, STATUS_SUCCESS, "completion status");
        }
        k
    }

    /// Runs the world until host 0 has reaped `n` completions (polling, or notified).
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
                let k = self.poll(&mut res[..16.min(n - got)]);
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

    /// RDMA READ: one READ round trip (ib_read_lat).
    fn read_latency(&self, size: u32, iters: u32) -> Vec<f64> {
        (0..iters as usize)
            .map(|i| {
                let k = i % self.conns.len();
                let t0 = Instant::now();
                self.post(Test::Read, k, size, 0);
                self.reap(1);
                t0.elapsed().as_secs_f64() * 1e6
            })
            .collect()
    }

    /// RDMA WRITE ping-pong (ib_write_lat): host 0 writes the peer's buffer, the peer sees the
    /// message's last byte change and writes back; half the round trip.
    fn write_latency(&mut self, size: u32, iters: u32) -> Vec<f64> {
        let last = size as usize - 1;
        let mut v = Vec::with_capacity(iters as usize);
        for i in 0..iters as usize {
            let k = i % self.conns.len();
            let (peer, qb, lrkey, lva) = {
                let c = &self.conns[k];
                (c.peer, c.qb, c.lbuf.rkey, c.lbuf.va)
            };
            // CAST: a sequence byte, wrapping.
            let seq = (i as u8).wrapping_add(1);
            self.local.bytes()[last] = seq;
            let t0 = Instant::now();
            self.post(Test::Write, k, size, 0);
            self.c.run();
            assert_eq!(
                self.peer_bufs[peer - 1].bytes()[last],
                seq,
                "ping at the peer"
            );
            // The pong carries the same bytes back: the sequence byte shows it landed.
            self.local.bytes()[last] = 0;
            let psg = self.peer_sge(&self.conns[k], size);
            let f = disp(unsafe_dispatch_qp(qb)).NdkWrite;
            // SAFETY: a live QP; one SGE; host 0's buffer is registered for remote write.
            let st = unsafe { f(qb, null_mut(), &psg, 1, lva, lrkey, 0) };
            assert_eq!(st, STATUS_SUCCESS, "pong NdkWrite");
            self.c.run();
            assert_eq!(self.local.bytes()[last], seq, "pong at host 0");
            self.reap(1);
            v.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            self.reap_peer(peer, 1);
        }
        v
    }

    /// SEND ping-pong (ib_send_lat): each side answers a received message with its own;
    /// half the round trip.
    fn send_latency(&self, size: u32, iters: u32) -> Vec<f64> {
        let mut v = Vec::with_capacity(iters as usize);
        for i in 0..iters as usize {
            let k = i % self.conns.len();
            let conn = &self.conns[k];
            self.pre_receive(k, size);
            let lsg = self.local_sge(size);
            assert_eq!(post_receive(conn.qa, k, &lsg), STATUS_SUCCESS);
            let t0 = Instant::now();
            self.post(Test::Send, k, size, 0);
            self.c.run();
            self.reap_peer(conn.peer, 1);
            let psg = self.peer_sge(conn, size);
            assert_eq!(post_send(conn.qb, k, &psg, 0), STATUS_SUCCESS, "pong");
            // Host 0 reaps its send's completion and the pong's receive.
            self.reap(2);
            v.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            self.reap_peer(conn.peer, 1);
        }
        v
    }

    /// Bandwidth with the window kept full: `depth` requests outstanding per QP, and one
    /// posted for every completion reaped, the world advanced one fabric event at a time.
    /// Returns (elapsed s, peak bytes/s over tenths of the run, provider ns).
    fn bandwidth(
        &self,
        t: Test,
        size: u32,
        iters: u32,
        progress: &mut Progress,
    ) -> (f64, f64, f64) {
        let depth = self.args.depth;
        let nconn = self.conns.len();
        let mut todo = vec![0u32; nconn];
        for i in 0..iters as usize {
            todo[i % nconn] += 1;
        }
        let mut recv_todo = todo.clone();
        let mut peer_res = [empty_result(); 16];
        let mut res = [empty_result(); 16];
        let mut done = 0u32;
        let mut peak = 0f64;
        let chunk = (iters / 10).max(1);
        let (mut mark_n, mut mark_t) = (0u32, Instant::now());
        self.clock.clear();
        let start = Instant::now();
        // Fills connection `k`'s window up to `room` requests (receives first, for SEND).
        let refill = |k: usize, room: u32, todo: &mut [u32], recv_todo: &mut [u32]| {
            let n = room.min(todo[k]);
            if t == Test::Send {
                let r = n.min(recv_todo[k]);
                for _ in 0..r {
                    self.pre_receive(k, size);
                }
                recv_todo[k] -= r;
            }
            for j in 0..n {
                let flags = if self.args.defer && j + 1 < n {
                    NDK_OP_FLAG_DEFER
                } else {
                    0
                };
                self.post(t, k, size, flags);
            }
            todo[k] -= n;
        };
        for k in 0..nconn {
            refill(k, depth, &mut todo, &mut recv_todo);
        }
        let mut freed = vec![0u32; nconn];
        let (mut idle, mut mark_idle) = (0u32, 0u32);
        while done < iters {
            if self.args.notify {
                arm(self.cqa, NDK_CQ_NOTIFY_ANY);
            }
            let stepped = self.c.world.step();
            loop {
                let n = self.poll(&mut res);
                for r in &res[..n] {
                    // CAST: the context is the connection index this program posted.
                    let k = r.RequestContext as usize;
                    if let Some(f) = freed.get_mut(k) {
                        *f += 1;
                    }
                }
                // CAST: at most 16.
                done += n as u32;
                if n < res.len() {
                    break;
                }
            }
            if t == Test::Send {
                for &cq in &self.cqb {
                    while get_results(cq, &mut peer_res) > 0 {}
                }
            }
            for (k, f) in freed.iter_mut().enumerate() {
                if *f > 0 {
                    let room = std::mem::take(f);
                    refill(k, room, &mut todo, &mut recv_todo);
                }
            }
            if stepped || done > mark_idle {
                (idle, mark_idle) = (0, done);
            } else {
                // Nothing left to run and nothing reaped: a completion is missing.
                idle += 1;
                assert!(idle < 1000, "bandwidth run stalled at {done} of {iters}");
                self.c.run();
            }
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
        let secs = start.elapsed().as_secs_f64();
        if t == Test::Send {
            self.c.run();
            for &cq in &self.cqb {
                while get_results(cq, &mut peer_res) > 0 {}
            }
        }
        (secs, peak, self.clock.per_request(iters))
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

/// Checks what clap cannot check alone; a failure exits with clap's one-line error and
/// status 2.
fn validate(a: &Args) {
    let in_flight = u64::from(a.qps) * u64::from(a.depth);
    if in_flight > u64::from(MAX_IN_FLIGHT) {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "--qps {} x --depth {} = {in_flight} requests in flight; at most {MAX_IN_FLIGHT} fit in host 0's CQ",
                    a.qps, a.depth
                ),
            )
            .exit();
    }
}

fn config_lines(a: &Args, t: Option<&str>) -> Vec<(&'static str, String)> {
    let path_mtu = pvrdma_ndk::ndk::connect::EngineConfig::new(0, 0).path_mtu;
    let mtu = 256u32 << (path_mtu.clamp(1, 5) - 1);
    let mut v = vec![
        (
            "Device",
            "pvrdma-sim (VMware PVRDMA model), NDKPI 2.1".to_string(),
        ),
        ("Hosts", a.hosts.to_string()),
        ("Number of qps", a.qps.to_string()),
        ("Connection type", "RC".to_string()),
        (
            "Transport type",
            "RoCEv2, deterministic simulation".to_string(),
        ),
        ("TX depth", a.depth.to_string()),
        ("Mtu", format!("{mtu}[B]")),
        ("Outstand reads", OUTSTANDING_READS.to_string()),
        (
            "DEFER chains",
            if a.defer { "ON" } else { "OFF" }.to_string(),
        ),
        (
            "Completions",
            if a.notify { "notifications" } else { "polling" }.to_string(),
        ),
    ];
    if let Some(t) = t {
        v.insert(0, ("Test", t.to_string()));
    }
    v
}

fn print_config(a: &Args) {
    println!("{}", report::RULE);
    println!(" ndkperf: perftest conventions, MB = 2^20 bytes, us = microseconds");
    for (k, v) in config_lines(a, None) {
        println!(" {k:<16}: {v}");
    }
    println!(
        " Times are wall clock of the whole simulation (driver + device model on one thread);"
    );
    println!(
        " DB/IRQ/DPC per WR are exact (both hosts); the provider's own cost: benches/instructions.sh."
    );
}

fn main() {
    let args = Args::parse();
    validate(&args);
    let max = args.size.iter().copied().max().unwrap_or(4096);
    let c = Cluster::new(args.hosts, true);
    if let Some(path) = &args.pcap {
        let f = match std::fs::File::create(path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("ndkperf: cannot create {}: {e}", path.display());
                std::process::exit(1);
            }
        };
        let w: Box<dyn Write + Send> = Box::new(std::io::BufWriter::new(f));
        c.world.set_capture(Some(
            pvrdma_sim::pcap::PcapWriter::new(w, pvrdma_sim::pcap::TsResolution::Nano)
                .expect("pcap header"),
        ));
    }
    let notified: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let sq_depth = args.depth * 2;
    let cq_depth = (args.qps * args.depth * 2).next_power_of_two().max(256);
    let cqa = c.cq(0, cq_depth, Some(notified));
    let cqb: Vec<_> = (1..args.hosts as usize)
        .map(|h| c.cq(h, cq_depth, None))
        .collect();
    let buf_len = (max as usize).next_multiple_of(4096);
    let local = c.buffer(0, buf_len);
    let peer_bufs: Vec<_> = (1..args.hosts as usize)
        .map(|h| c.buffer(h, buf_len))
        .collect();
    let mut conns = Vec::new();
    for i in 0..args.qps as usize {
        let peer = 1 + i % (args.hosts as usize - 1);
        let qa = c.qp(0, cqa, cqa, sq_depth, 1);
        let qb = c.qp(peer, cqb[peer - 1], cqb[peer - 1], sq_depth, 1);
        c.connect(0, qa, peer, qb);
        let rbuf = c.remote(peer, qb, cqb[peer - 1], &peer_bufs[peer - 1]);
        let lbuf = c.remote(0, qa, cqa, &local);
        conns.push(Conn {
            peer,
            qa,
            qb,
            rbuf,
            lbuf,
        });
    }
    assert_eq!(
        c.outbound_read_limit(),
        Some(OUTSTANDING_READS),
        "the OutboundReadLimit the CM negotiated"
    );
    let mut b = Bench {
        c,
        args,
        conns,
        cqa,
        cqb,
        notified,
        local,
        peer_bufs,
        clock: ProviderClock::calibrated(),
    };
    let tables = !b.args.csv && !b.args.json;
    if tables {
        print_config(&b.args);
    }
    let tests = b.args.test.clone();
    let sizes = b.args.size.clone();
    let mut results = Vec::new();
    for t in tests {
        if t == Test::Rping {
            rping(&mut b, tables);
            continue;
        }
        let (name, lat_method) = match t {
            Test::Read => ("RDMA_Read", "one READ round trip, as ib_read_lat"),
            Test::Write => ("RDMA_Write", "half a WRITE ping-pong, as ib_write_lat"),
            _ => ("Send", "half a SEND ping-pong, as ib_send_lat"),
        };
        let mut r = TestResult {
            name,
            lat_method,
            ..TestResult::default()
        };
        for &size in &sizes {
            let a = &b.args;
            let cap = |n: u32| {
                u32::try_from((a.max_bytes / u64::from(size)).min(u64::from(n)))
                    .unwrap_or(n)
                    .max(1)
            };
            let (lat_iters, iters) = (cap(a.lat_iters), cap(a.iters));
            let (no_latency, no_bandwidth) = (a.no_latency, a.no_bandwidth);
            if !no_latency {
                let mut samples = match t {
                    Test::Read => b.read_latency(size, lat_iters),
                    Test::Write => b.write_latency(size, lat_iters),
                    _ => b.send_latency(size, lat_iters),
                };
                let stats = LatStats::of(&samples);
                samples.sort_by(f64::total_cmp);
                r.lat.push(LatRow {
                    bytes: size,
                    iters: lat_iters,
                    stats,
                    samples,
                });
            }
            if !no_bandwidth {
                let mut progress = Progress {
                    label: format!("{name} {size} B"),
                    last: Instant::now(),
                    shown: false,
                };
                let k0 = b.counts();
                let (secs, peak, provider_ns) = b.bandwidth(t, size, iters, &mut progress);
                let k1 = b.counts();
                progress.clear();
                let n = f64::from(iters);
                let per = |x: u64, y: u64| (y - x) as f64 / n;
                let avg = if secs > 0.0 {
                    n * f64::from(size) / secs
                } else {
                    0.0
                };
                r.bw.push(BwRow {
                    bytes: size,
                    iters,
                    peak: peak.max(avg) / MB,
                    avg: avg / MB,
                    mpps: if secs > 0.0 { n / secs / 1e6 } else { 0.0 },
                    doorbells: per(k0.doorbells, k1.doorbells),
                    poll_doorbells: per(k0.poll_doorbells, k1.poll_doorbells),
                    interrupts: per(k0.interrupts, k1.interrupts),
                    dpcs: per(k0.dpcs, k1.dpcs),
                    provider_ns,
                });
            }
        }
        if tables {
            report::print_lat(&r);
            report::print_bw(&r);
        }
        results.push(r);
    }
    if tables {
        println!("{}", report::RULE);
    }
    if b.args.csv {
        print!("{}", report::csv(&results));
    }
    if b.args.json {
        let config: Vec<(&str, String)> = config_lines(&b.args, None)
            .into_iter()
            .map(|(k, v)| (k, report::json_str(&v)))
            .collect();
        print!("{}", report::json(&config, &results));
    }
    let mut status = 0;
    if let Some(path) = &b.args.plot {
        match report::plot(path, &results) {
            Ok(()) if tables => println!(" plot written to {}", path.display()),
            Ok(()) => {}
            Err(e) => {
                eprintln!("ndkperf: {e}");
                status = 1;
            }
        }
    }
    // Inside the capture: it ends after the last DREP.
    b.c.disconnect_all();
    if let Some(path) = &b.args.pcap {
        if let Some(mut w) = b.c.world.set_capture(None) {
            let _ = w.flush();
        }
        if tables {
            println!(" capture written to {}", path.display());
        }
    }
    let _ = std::io::stdout().flush();
    leak(b.c);
    std::process::exit(status);
}

/// rping: 64-byte pings host 0 → peer with a counter pattern, echoed back by the peer; the
/// echo is compared byte for byte.
fn rping(b: &mut Bench, print: bool) {
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
    if print {
        println!("{}", report::RULE);
        println!(
            " rping: {} connection(s) x {n} ping-pongs of 64 B, payloads verified: OK ({:.1} us per round trip)",
            b.conns.len(),
            t0.elapsed().as_secs_f64() * 1e6 / (f64::from(n) * b.conns.len() as f64)
        );
    }
}
