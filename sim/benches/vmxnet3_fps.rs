//! Frames per second through the vmxnet3 model alone (no driver: the model's own mock driver
//! posts and reaps), two vNICs on one fabric in deterministic mode: the sender's mock writes
//! a Tx descriptor and TXPROD, the model gathers the frame, the fabric delivers it, the
//! receiver's model filters it into an Rx buffer and writes the completions, the mocks reap
//! and refill. Frames of 64 and 1514 bytes, one per `World::run_until_idle` or 32.
//!
//! Everything runs on this thread, so each figure is frames over this thread's CPU time (Linux
//! `/proc/thread-self/schedstat`; wall clock elsewhere), best of several rounds: other work on
//! a shared machine does not move it. Never asserted anywhere.
//!
//! Run: `cargo bench -p pvrdma-sim --bench vmxnet3_fps` (`-- --quick` for a short run).

use std::time::Instant;

use pvrdma_sim::vmxnet3::mock::{MockConfig, MockNic, RX_BUF, frame};
use pvrdma_sim::world::{VnicConfig, World};

fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Nanoseconds of this thread's CPU (or wall clock) spent in `f`.
fn timed(f: impl FnOnce()) -> u64 {
    let (c0, w0) = (cpu_ns(), Instant::now());
    f();
    match (c0, cpu_ns()) {
        (Some(a), Some(b)) => b - a,
        _ => w0.elapsed().as_nanos() as u64,
    }
}

fn round(len: usize, burst: usize, frames: usize) -> f64 {
    let mut world = World::new(3);
    world.add_vnic(VnicConfig::ethernet(0)).unwrap();
    world.add_vnic(VnicConfig::ethernet(1)).unwrap();
    let up = |v: usize| {
        let vnic = world.vnic(v);
        let n = MockNic::on(
            vnic.vmxnet3().clone(),
            vnic.dma().clone(),
            MockConfig::default(),
        );
        n.select();
        assert_eq!(n.activate(), 0);
        n.enable_interrupts();
        n.fill_rx(0, 63, RX_BUF, 0);
        n
    };
    let (a, b) = (up(0), up(1));
    let f = frame(world.vnic(1).mac(), world.vnic(0).mac(), 0x0800, len);
    let mut got = 0;
    let ns = timed(|| {
        let mut sent = 0;
        while sent < frames {
            for _ in 0..burst.min(frames - sent) {
                a.send(&[&f]);
                sent += 1;
            }
            world.run_until_idle();
            a.tx_completions();
            let c = b.rx_completions();
            got += c.len();
            b.fill_rx(0, c.len() as u32, RX_BUF, 0);
            a.bar0_w(8, 0);
            b.bar0_w(0, 0);
        }
    });
    assert_eq!(got, frames, "frames lost");
    frames as f64 / (ns as f64 / 1e9)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (frames, rounds) = if quick { (2_000, 2) } else { (20_000, 5) };
    println!(
        "vmxnet3 model alone, frames per second (CPU time of the one thread, best of {rounds}):"
    );
    println!("{:<10} {:>12} {:>12}", "frame", "burst 1", "burst 32");
    for len in [64usize, 1514] {
        let best = |burst| {
            (0..rounds)
                .map(|_| round(len, burst, frames))
                .fold(0.0f64, f64::max)
        };
        println!(
            "{:<10} {:>12.0} {:>12.0}",
            format!("{len} B"),
            best(1),
            best(32)
        );
    }
}
