//! Wall-clock benchmarks of the provider's data path (criterion; never asserted anywhere):
//! the shapes of `benches/instructions.sh` — (a) NdkRead with its doorbell, (b) an
//! NdkGetCqResults reaping one completion, (c) a 16-NdkRead DEFER chain, (d) an
//! NdkGetCqResults reaping 16, an empty poll, NdkArmCq — on the two-host cluster, and the
//! scaling shapes (1/64/1024 QPs, shared or separate CQs, CQ depth 64 or 65,536); (e) and
//! (f) are NdkRead and a one-completion NdkGetCqResults in a round robin over the QPs with
//! 16 reads in flight, the shape of the cache-miss table (`instr rr`).
//!
//! Only the provider calls are timed (`iter_custom`): the device model and fabric run
//! between them, untimed. Doorbells are unhooked as in the instruction benchmark (a
//! doorbell is one store to the UAR page; the harness forwards it afterwards). The QPs
//! connect through the CM before the first timed call, with their QP1 traffic over, and part
//! with NdkDisconnect after the last.
//!
//! `cargo bench --bench datapath [-- <filter>]`

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../examples/perfkit/mod.rs"]
mod perfkit;

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use perfkit::*;
use pvrdma_ndk::ndkpi::*;

/// The four per-request shapes on `p`, named `<group>/<shape>/<label>`.
fn shapes(c: &mut Criterion, group: &str, label: &str, p: &Pair) {
    let mut g = c.benchmark_group(group);
    let mut res = [empty_result(); 16];
    let mut k = 0usize;
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("a_read", label), |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let (qa, _, cqa, _) = p.at(k);
                k += 1;
                let t0 = Instant::now();
                p.read(qa, 0);
                t += t0.elapsed();
                p.reap(cqa, 1);
            }
            t
        });
    });
    g.bench_function(BenchmarkId::new("b_poll1", label), |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let (qa, _, cqa, _) = p.at(k);
                k += 1;
                p.read(qa, 0);
                p.flush();
                let t0 = Instant::now();
                let n = get_results(cqa, &mut res[..1]);
                t += t0.elapsed();
                assert_eq!(n, 1);
            }
            t
        });
    });
    g.throughput(Throughput::Elements(16));
    g.bench_function(BenchmarkId::new("c_chain16", label), |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let (qa, _, cqa, _) = p.at(k);
                k += 1;
                let t0 = Instant::now();
                for _ in 0..15 {
                    p.read(qa, NDK_OP_FLAG_DEFER);
                }
                p.read(qa, 0);
                t += t0.elapsed();
                p.reap(cqa, 16);
            }
            t
        });
    });
    g.bench_function(BenchmarkId::new("d_poll16", label), |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let (qa, _, cqa, _) = p.at(k);
                k += 1;
                for _ in 0..15 {
                    p.read(qa, NDK_OP_FLAG_DEFER);
                }
                p.read(qa, 0);
                p.flush();
                let t0 = Instant::now();
                let n = get_results(cqa, &mut res[..16]);
                t += t0.elapsed();
                assert_eq!(n, 16);
            }
            t
        });
    });
    // The cache shape of `instr rr`: a consumer round-robining its QPs with INFLIGHT reads
    // in flight, the model run once per round instead of between every two calls (its run
    // evicts the provider's lines from the cache, which a device does not do).
    g.throughput(Throughput::Elements(1));
    for (name, poll) in [("e_rr_read", false), ("f_rr_poll1", true)] {
        g.bench_function(BenchmarkId::new(name, label), |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    let mut cqs = [std::ptr::null_mut(); INFLIGHT];
                    for cq in &mut cqs {
                        let (qa, _, cqa, _) = p.at(k);
                        k += 1;
                        let t0 = Instant::now();
                        p.read(qa, 0);
                        if !poll {
                            t += t0.elapsed();
                        }
                        p.c.kick(0, 0);
                        *cq = cqa;
                    }
                    p.c.run();
                    for &cq in &cqs {
                        let t0 = Instant::now();
                        let n = get_results(cq, &mut res[..1]);
                        if poll {
                            t += t0.elapsed();
                        }
                        assert_eq!(n, 1);
                    }
                    done += INFLIGHT as u64;
                }
                // Per request: `done` may exceed `iters` by less than a round.
                t.mul_f64(iters as f64 / done as f64)
            });
        });
    }
    g.finish();
}

/// Reads in flight in the round-robin shapes (as `examples/instr.rs`'s cache shape).
const INFLIGHT: usize = 16;

fn per_request(c: &mut Criterion) {
    let p = Pair::new(1, true, 64, false);
    let quiet = p.c.mads();
    shapes(c, "datapath", "1qp", &p);
    let mut g = c.benchmark_group("datapath");
    let mut res = [empty_result(); 1];
    let cq = p.cqa[0];
    g.bench_function("poll_empty", |b| b.iter(|| get_results(cq, &mut res)));
    g.bench_function("arm_any", |b| b.iter(|| arm(cq, NDK_CQ_NOTIFY_ANY)));
    g.finish();
    assert_eq!(p.c.mads(), quiet, "CM MADs while measuring");
    p.c.disconnect_all();
    leak(p.c);
}

fn scaling(c: &mut Criterion) {
    for (nqp, shared, depth) in [
        (1, false, 64),
        (64, true, 64),
        (64, false, 64),
        (1024, true, 64),
        (1024, false, 64),
        (1, true, 65536),
        (64, true, 65536),
        (1024, true, 65536),
    ] {
        let p = Pair::new(nqp, shared, depth, false);
        let label = format!(
            "{nqp}qp_{}_cq{depth}",
            if shared { "shared" } else { "separate" }
        );
        let quiet = p.c.mads();
        shapes(c, "scaling", &label, &p);
        assert_eq!(p.c.mads(), quiet, "CM MADs while measuring");
        p.c.disconnect_all();
        leak(p.c);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = per_request, scaling
}
criterion_main!(benches);
