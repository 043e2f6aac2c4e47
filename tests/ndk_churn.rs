//! QPs created and closed while their shared CQ is polled, in the threaded model. A CQ's
//! poller finds QPs without a lock or a count (`src/ndk/qp_table.rs`): each QP is bound to
//! the CQ's own table at creation, unbound at teardown, and its memory handed to the CQ's
//! poller, which releases it only where it holds no QP reference (NdkArmCq here). This
//! test runs that life cycle 100 times (3,000 in the `#[ignore]`d run `.ci/run` makes in
//! release) against a poller that never stops: every completion must reach its own QP exactly
//! once and in order, QPs enough to make the CQ's table grow are alive at once, and at the end
//! nothing leaks (`Cluster::finish`).
//!
//! ```sh
//! cargo test --release --test ndk_churn -- --include-ignored
//! ```

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, QpSpec, Registered, sge};
use pvrdma_ndk::ndkpi::*;

/// QP life cycles of the default run.
const ROUNDS: usize = 100;
/// QP life cycles of the long `#[ignore]`d run (`.ci/run`, release).
const LONG: usize = 3_000;
/// WRITEs per QP.
const PER_QP: u64 = 6;
/// QPs alive at once (the oldest closes when a new one completes).
const ALIVE: usize = 12;
/// QPContext of round `i` is `BASE + i`.
const BASE: usize = 0xC000;
/// Bound on every wait: a hang, not a timing assertion.
const HANG: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
struct Raw<T>(*mut T);
// SAFETY: the CQ outlives the poller thread (joined before the close), and only that thread
// polls or arms it (§5.4).
unsafe impl<T> Send for Raw<T> {}

unsafe extern "system" fn on_cq(_ctx: PVOID, _st: NTSTATUS) {}

#[test]
fn qps_created_and_closed_while_their_shared_cq_is_polled() {
    churn(ROUNDS);
}

#[test]
#[ignore = "3,000 QP life cycles: run with --ignored in release (.ci/run; see the module docs)"]
fn qps_created_and_closed_while_their_shared_cq_is_polled_long() {
    churn(LONG);
}

fn churn(rounds: usize) {
    // Raw wiring: this test is about the CQ's QP table, not connections, and 300 connections
    // made and parted in a few seconds of wall time would all sit in TIMEWAIT (about 2 s) at
    // once on a fast machine, more than the engine's 256 connection slots.
    let c = Cluster::with(ClusterConfig::without_cm(Mode::Threaded, 2));
    let pd_a = c.adapter(0).create_pd().expect("PD a");
    let pd_b = c.adapter(1).create_pd().expect("PD b");
    let cq_a = c
        .adapter(0)
        .create_cq_with_callback(1024, on_cq, std::ptr::null_mut())
        .expect("CQ a");
    let cq_b = c.adapter(1).create_cq(256, None).expect("CQ b");
    let rw = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;
    let a_mem = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, rw);
    let b_mem = Registered::new(
        c.host(1),
        &pd_b,
        1,
        0x7000_0000,
        rw | NDK_MR_FLAG_ALLOW_REMOTE_WRITE,
    );

    // The poller: polls without pause, arms when it finds the CQ empty (the moment the
    // provider releases closed QPs), records per round the next expected request.
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..rounds).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (cq, seen, stop) = (Raw(cq_a.ptr), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            let cq = cq;
            // SAFETY: a live CQ.
            let d = unsafe { (*cq.0).Dispatch };
            // SAFETY: the provider's dispatch tables are statics.
            let d = unsafe { &*d };
            let mut buf = vec![
                NDK_RESULT {
                    Status: 0,
                    BytesTransferred: 0,
                    QPContext: std::ptr::null_mut(),
                    RequestContext: std::ptr::null_mut(),
                };
                8
            ];
            let (mut results, mut arms) = (0u64, 0u64);
            while !stop.load(Ordering::SeqCst) {
                // SAFETY: polled by this thread only; `buf` holds 8 results.
                let n = unsafe { (d.NdkGetCqResults)(cq.0, buf.as_mut_ptr(), 8) } as usize;
                for r in &buf[..n] {
                    assert_eq!(r.Status, STATUS_SUCCESS);
                    let round = (r.QPContext as usize).wrapping_sub(BASE);
                    assert!(round < rounds, "QPContext {:#x}", r.QPContext as usize);
                    let want = seen[round].load(Ordering::SeqCst);
                    assert_eq!(r.RequestContext as u64, want, "round {round}: order");
                    seen[round].store(want + 1, Ordering::SeqCst);
                }
                results += n as u64;
                if n == 0 {
                    // SAFETY: as above; never concurrent with this thread's polls.
                    unsafe { (d.NdkArmCq)(cq.0, NDK_CQ_NOTIFY_ANY) };
                    arms += 1;
                    std::thread::yield_now();
                }
            }
            (results, arms)
        })
    };

    let src = sge(a_mem.mem.va, 8, a_mem.mr.local_token());
    let mut alive = std::collections::VecDeque::new();
    for round in 0..rounds {
        let mut spec = QpSpec::new(BASE + round);
        spec.initiator_depth = 8;
        let qa = pd_a.create_qp(&cq_a, &cq_a, spec).expect("QP a");
        let qb = pd_b
            .create_qp(&cq_b, &cq_b, QpSpec::new(0xD000))
            .expect("QP b");
        c.connect(&qa, &qb);
        for k in 0..PER_QP {
            let flags = if k % 3 == 2 { 0 } else { NDK_OP_FLAG_DEFER };
            let flags = if k + 1 == PER_QP { 0 } else { flags };
            let st = qa.write(
                k as usize,
                &[src],
                b_mem.mem.va + 8 * k,
                b_mem.mr.remote_token(),
                flags,
            );
            assert_eq!(st, STATUS_SUCCESS, "round {round} write {k}");
        }
        alive.push_back((round, qa, qb));
        if alive.len() > ALIVE {
            let (r, qa, qb) = alive.pop_front().expect("alive");
            let deadline = Instant::now() + HANG;
            while seen[r].load(Ordering::SeqCst) < PER_QP {
                assert!(Instant::now() < deadline, "round {r} never completed");
                std::thread::yield_now();
            }
            qa.close();
            qb.close();
        }
    }
    for (r, qa, qb) in alive {
        let deadline = Instant::now() + HANG;
        while seen[r].load(Ordering::SeqCst) < PER_QP {
            assert!(Instant::now() < deadline, "round {r} never completed");
            std::thread::yield_now();
        }
        qa.close();
        qb.close();
    }
    stop.store(true, Ordering::SeqCst);
    let (results, arms) = poller.join().expect("poller");
    assert_eq!(results, rounds as u64 * PER_QP, "every completion once");
    assert!(arms > 0);
    for (r, s) in seen.iter().enumerate() {
        assert_eq!(s.load(Ordering::SeqCst), PER_QP, "round {r}");
    }
    c.settle();
    assert!(
        cq_a.results(4).is_empty(),
        "no result beyond the posted ones"
    );
    let mems = [a_mem.close(), b_mem.close()];
    cq_a.close();
    cq_b.close();
    pd_a.close();
    pd_b.close();
    drop(mems);
    c.finish();
}
