//! Frames per second through the vmxnet3 layer (`src/vmxnet3`) and the model on the host
//! build: host 0's driver sends (`Vmxnet3::send`, one SGE), the model moves the frame over the
//! fabric, host 1's driver receives it in its Rx DPC and hands it to a client that only counts
//! it; host 0's Tx DPC reaps the completion. Deterministic mode: the loop runs the world and
//! waits for the DPC threads after every burst (1 or 32 frames).
//!
//! Each figure is frames over the CPU time of every thread of the process (Linux
//! `/proc/self/task/*/schedstat`: the loop, the DPC threads, the yields while waiting; wall
//! clock elsewhere), best of several rounds. Never asserted anywhere.
//!
//! Run: `cargo bench --bench vmxnet3_fps` (`-- --quick` for a short run).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::vmx::{TxMem, eth, platform_for};
use pvrdma_ndk::os::NicPlatform;
use pvrdma_ndk::vmxnet3::{Config, Fault, LinkState, NicClient, RxBatch, TxStatus, Vmxnet3};
use pvrdma_sim::world::{VnicConfig, World};

fn cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let p = t.ok()?.path().join("schedstat");
        let s = std::fs::read_to_string(p).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

#[derive(Default)]
struct Counting {
    frames: AtomicU64,
    sent: AtomicU64,
}

impl NicClient for Counting {
    fn received(&self, batch: &RxBatch<'_>) {
        self.frames.fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
    fn sent(&self, tokens: &[u64], _status: TxStatus) {
        self.sent.fetch_add(tokens.len() as u64, Ordering::Relaxed);
    }
    fn link_changed(&self, _link: LinkState) {}
    fn device_error(&self, fault: Fault) {
        panic!("device error {fault:?}");
    }
}

/// Frames per second (CPU, wall) for `frames` frames of `len` bytes in bursts of `burst`.
fn round(len: usize, burst: usize, frames: usize) -> (f64, f64) {
    let mut world = World::new(5);
    for i in 0..2 {
        world.add_vnic(VnicConfig::ethernet(i)).unwrap();
    }
    let mut hosts = Vec::new();
    for v in 0..2 {
        let (platform, _dma) = platform_for(&world, v, 3, 1);
        let client = Arc::new(Counting::default());
        let p: Arc<dyn NicPlatform> = platform.clone();
        let nic = Vmxnet3::probe(p, &Config::default(), client.clone()).expect("probe");
        hosts.push((platform, client, nic));
    }
    let settle = || loop {
        let mut any = world.run_until_idle() != 0;
        any |= world.run_devices();
        for (p, _, _) in &hosts {
            while !p.executor().is_idle() {
                any = true;
                std::thread::yield_now();
            }
        }
        if !any {
            return;
        }
    };
    settle();
    let tx = TxMem::new(world.vnic(0).dma(), 1);
    let f = eth(world.vnic(1).mac(), world.vnic(0).mac(), 0x0800, len, 1);
    let sg = tx.sg(0, &f, &[]);
    let (c0, w0) = (cpu_ns(), Instant::now());
    let mut sent = 0;
    while sent < frames {
        let n = burst.min(frames - sent);
        for k in 0..n {
            hosts[0].2.send(&sg, sent as u64, k + 1 < n).expect("send");
            sent += 1;
        }
        settle();
    }
    let wall = w0.elapsed().as_nanos() as f64;
    let cpu = match (c0, cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64,
        _ => wall,
    };
    let got = hosts[1].1.frames.load(Ordering::Relaxed) as usize;
    assert_eq!(got, frames, "frames lost");
    for (p, _, nic) in hosts {
        drop(nic);
        p.executor().shutdown();
    }
    let s = |ns: f64| frames as f64 / (ns / 1e9);
    (s(cpu), s(wall))
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (frames, rounds) = if quick { (2_000, 2) } else { (20_000, 3) };
    let _serial = common::serial();
    println!(
        "vmxnet3 driver + model, frames per second (best of {rounds}; CPU time of all threads, wall clock):"
    );
    println!("{:<10} {:>22} {:>22}", "frame", "burst 1", "burst 32");
    for len in [64usize, 1514] {
        let best = |burst| {
            let r: Vec<(f64, f64)> = (0..rounds).map(|_| round(len, burst, frames)).collect();
            (
                r.iter().map(|x| x.0).fold(0.0, f64::max),
                r.iter().map(|x| x.1).fold(0.0, f64::max),
            )
        };
        let (a, b) = (best(1), best(32));
        println!(
            "{:<10} {:>10.0} / {:>9.0} {:>10.0} / {:>9.0}",
            format!("{len} B"),
            a.0,
            a.1,
            b.0,
            b.1
        );
    }
}
