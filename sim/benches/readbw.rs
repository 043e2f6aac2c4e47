//! The device model's RDMA READ bandwidth against memcpy, measured in the same run (issue 14
//! item 3): 64 KiB READs between two devices in deterministic mode (`World::run_until_idle`) at
//! path MTU 4096 and 1024, next to a 64 KiB `copy_from_slice` on the same machine. READs go
//! one at a time and, as ib_read_bw does with `-o 4`, four outstanding (the QP's
//! max_rd_atomic). Each figure is the best of several interleaved rounds, timed in this
//! thread's CPU time (Linux `/proc/thread-self/schedstat`; wall clock elsewhere), so other
//! processes on a shared machine neither slow one side nor the other.
//!
//! Run: `cargo bench -p pvrdma-sim --bench readbw` (add `-- --quick` for a short run).
//! `-- --profile N` runs only N windows of 4 READs at MTU 4096 (no timing), for
//! `valgrind --tool=callgrind --toggle-collect='readbw::profile'` to say where the model's
//! instructions go.

use std::hint::black_box;
use std::time::{Duration, Instant};

use pvrdma_sim::testutil::{Host, QpSpec, RcPath, SendWqe, TestCq, TestMr, TestQp};
use pvrdma_sim::world::World;

const VA: u64 = 0x1_0000_0000;
const LEN: u64 = 32 * 4096;
const MSG: u32 = 65536;
const RDMA_READ: u32 = 4;
const SIGNALED: u32 = 1 << 1;
const MIB: f64 = 1024.0 * 1024.0;

struct End {
    host: Host,
    cq: TestCq,
    qp: TestQp,
    mr: TestMr,
}

fn end(world: &World, i: usize) -> End {
    let host = Host::on(world.device(i).clone());
    host.bind_gid(0, world.node(i).gid());
    let pd = host.create_pd();
    let cq = host.create_cq(64);
    let qp = host.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    let mr = host.create_mr(pd, VA, LEN, 7);
    End { host, cq, qp, mr }
}

/// Two connected devices; `path_mtu` is the IB enum (3 = 1024, 5 = 4096).
fn pair(path_mtu: u32) -> (World, End, End) {
    let world = World::with_nodes(1, 2);
    let a = end(&world, 0);
    let b = end(&world, 1);
    let mut pa = RcPath::new(b.qp.qpn, world.node(1).gid(), world.node(1).mac());
    let mut pb = RcPath::new(a.qp.qpn, world.node(0).gid(), world.node(0).mac());
    pa.path_mtu = path_mtu;
    pb.path_mtu = path_mtu;
    a.host.rc_connect(a.qp.handle, &pa);
    b.host.rc_connect(b.qp.handle, &pb);
    world.run_until_idle();
    (world, a, b)
}

/// READs in flight in the windowed runs: `RcPath`'s max_rd_atomic.
const OUTSTANDING: u32 = 4;

/// Posts `window` READs with one doorbell and runs them to completion.
fn read_window(world: &World, a: &mut End, b: &End, window: u32) {
    for _ in 0..window {
        let w = SendWqe::new(1, RDMA_READ, SIGNALED)
            .sge(VA, MSG, a.mr.lkey)
            .at(32, &(VA + LEN / 2).to_le_bytes())
            .at(40, &b.mr.rkey.to_le_bytes());
        a.qp.post_send(&w);
    }
    a.host.ring_sq(a.qp.handle);
    world.run_until_idle();
    let c = a.cq.poll();
    assert_eq!(c.len(), window as usize);
    assert!(c.iter().all(|c| c.status == 0));
}

/// This thread's CPU time in seconds, or the wall clock where the kernel does not say.
fn cpu_seconds() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or_else(
            || START.get_or_init(Instant::now).elapsed().as_secs_f64(),
            |ns| ns as f64 / 1e9,
        )
}

/// Seconds per READ over `n` windows of `window` READs.
fn time_reads(e: &mut (World, End, End), window: u32, n: u32) -> f64 {
    let (world, a, b) = (&e.0, &mut e.1, &e.2);
    let t = cpu_seconds();
    for _ in 0..n {
        read_window(world, a, b, window);
    }
    (cpu_seconds() - t) / f64::from(n * window)
}

/// Seconds for `n` 64 KiB memcpys.
fn time_memcpy(src: &[u8], dst: &mut [u8], n: u32) -> f64 {
    let t = cpu_seconds();
    for _ in 0..n {
        black_box(&mut *dst).copy_from_slice(black_box(src));
    }
    cpu_seconds() - t
}

/// `n` windows of 4 READs at MTU 4096, untimed (see the module docs).
#[inline(never)]
fn profile(e: &mut (World, End, End), n: u32) {
    time_reads(e, OUTSTANDING, n);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(n) = args
        .iter()
        .position(|a| a == "--profile")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
    {
        let mut e = pair(5);
        time_reads(&mut e, OUTSTANDING, 2);
        profile(&mut e, n);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (rounds, budget) = if quick {
        (3, Duration::from_millis(40))
    } else {
        (5, Duration::from_millis(120))
    };
    let mut mtu4096 = pair(5);
    let mut mtu1024 = pair(3);
    let src = vec![0x5au8; MSG as usize];
    let mut dst = vec![0u8; MSG as usize];
    // Iterations per round sized from a first pass, so each round lasts about `budget`; the
    // pass doubles its count until it lasts 20 ms, as the CPU clock may tick coarsely.
    let per_round = |mut run: Box<dyn FnMut(u32) -> f64 + '_>| {
        let mut n = 1u32;
        loop {
            let secs = run(n);
            if secs >= 0.02 || n >= 1 << 24 {
                let one = secs.max(1e-9) / f64::from(n);
                return ((budget.as_secs_f64() / one) as u32).clamp(1, 1 << 24);
            }
            n *= 2;
        }
    };
    let n_copy = per_round(Box::new(|n| time_memcpy(&src, &mut dst, n)));
    let cases: [(&str, u32, u32); 4] = [
        ("MTU 4096, 1 outstanding", 5, 1),
        ("MTU 4096, 4 outstanding", 5, OUTSTANDING),
        ("MTU 1024, 1 outstanding", 3, 1),
        ("MTU 1024, 4 outstanding", 3, OUTSTANDING),
    ];
    let mut n_case = [0u32; 4];
    for (k, &(_, mtu, window)) in cases.iter().enumerate() {
        let e = if mtu == 5 { &mut mtu4096 } else { &mut mtu1024 };
        // time_reads gives seconds per READ: per window-run of n windows, times n × window.
        n_case[k] = per_round(Box::new(|n| {
            time_reads(e, window, n) * f64::from(n * window)
        }));
    }
    let mut best_copy = f64::MAX;
    let mut best = [f64::MAX; 4];
    for _ in 0..rounds {
        best_copy = best_copy.min(time_memcpy(&src, &mut dst, n_copy) / f64::from(n_copy));
        for (k, &(_, mtu, window)) in cases.iter().enumerate() {
            let e = if mtu == 5 { &mut mtu4096 } else { &mut mtu1024 };
            best[k] = best[k].min(time_reads(e, window, n_case[k]));
        }
    }
    let bw = |secs: f64| f64::from(MSG) / secs / MIB;
    let copy = bw(best_copy);
    println!("64 KiB transfers, best of {rounds} rounds of CPU time; MiB = 2^20 bytes");
    println!("{:<36} {:>10} {:>10}", "", "MiB/s", "of memcpy");
    println!(
        "{:<36} {:>10.0} {:>9.1}%",
        "memcpy (copy_from_slice)", copy, 100.0
    );
    for (k, &(name, _, _)) in cases.iter().enumerate() {
        let b = bw(best[k]);
        println!(
            "{:<36} {b:>10.1} {:>9.2}%",
            format!("RDMA READ, {name}"),
            100.0 * b / copy
        );
    }
}
