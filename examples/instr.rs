//! Workload driver for the instruction-count benchmark (`benches/instructions.sh` runs it
//! under callgrind with `--toggle-collect` on one provider entry point per shape, so only
//! instructions executed inside that `extern "system"` thunk, and what it calls, count).
//!
//! `instr <shape> [iterations] [qps] [shared|separate] [cq-depth]`; prints
//! `requests=<n>` (how many work requests or completions the measured calls handled) on
//! stderr. Doorbells are not hooked (the script builds this example with the feature
//! `bare-doorbell`, which compiles the hook out): a doorbell is one volatile store to the UAR
//! page, and the harness forwards the stored word to the model after the measured call
//! returns. The QPs connect through the CM (NdkListen / NdkConnect / NdkAccept /
//! NdkCompleteConnect) before the measured calls and part with NdkDisconnect after them;
//! their QP1 traffic is over before the first measured call and none happens until the last
//! one returned (checked: no MAD and no interrupt on either host in between).
//! `instr mem [qps] [cq-depth]` prints host memory per QP and per CQ from the OS seam's
//! accounting (no valgrind needed).
//!
//! `instr rr [requests] [qps] [shared|separate] [cq-depth]` is the cache shape: a consumer
//! round-robining its QPs with [`INFLIGHT`] reads in flight. It posts one NdkRead on each of
//! the next `INFLIGHT` QPs, lets the model run once, then reaps the `INFLIGHT` completions
//! one NdkGetCqResults at a time, so both thunks (measure `read` or `get_cq_results`) handle
//! `requests` requests. The per-request shapes above run the model (and the whole
//! simulated fabric) between every two provider calls: in the cache simulation that run
//! evicts the provider's lines, which no hardware device does to the CPU's cache, and at
//! 1024 QPs it was most of the misses counted (see benches/instructions.sh).

#[path = "../tests/common/mod.rs"]
mod common;
mod perfkit;

use perfkit::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::stats;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape = args.first().map_or("read", String::as_str).to_string();
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    if shape == "mem" {
        return mem(arg(1, 64), arg(2, 64) as u32);
    }
    if shape == "rr" {
        let shared = args.get(3).is_none_or(|s| s != "separate");
        return round_robin(arg(1, 4096), arg(2, 1), shared, arg(4, 64) as u32);
    }
    let iters = arg(1, 2000);
    let nqp = arg(2, 1);
    let shared = args.get(3).is_none_or(|s| s != "separate");
    let depth = arg(4, 64) as u32;
    let s = Pair::new(nqp, shared, depth, false);
    let c = &s.c;
    let sg = [sge(s.local.addr(), 64, c.nodes[0].token)];
    let mut res = [empty_result(); 16];
    let mut requests = 0u64;
    let read = |q, flags| s.read(q, flags);
    let reap = |cq, n| s.reap(cq, n);
    // FRMRs for the fast-register shapes, on host 0.
    let fr: Vec<_> = [1u32, 16].iter().map(|&p| c.frmr(0, p)).collect();
    let pages = s.local.pages();
    let quiet = (c.mads(), interrupts(c));
    for it in 0..iters {
        let (qa, qb, cqa, cqb) = s.at(it);
        match shape.as_str() {
            // (a) one NdkRead, 1 SGE, not deferred (its doorbell included).
            "read" => {
                read(qa, 0);
                requests += 1;
                reap(cqa, 1);
            }
            // (b) NdkGetCqResults reaping one completion.
            "poll1" => {
                read(qa, 0);
                s.flush();
                assert_eq!(get_results(cqa, &mut res[..1]), 1);
                assert_eq!(res[0].Status, STATUS_SUCCESS);
                requests += 1;
            }
            // (c) 15 NdkRead with DEFER and a 16th without, per request.
            "chain16" => {
                for _ in 0..15 {
                    read(qa, NDK_OP_FLAG_DEFER);
                }
                read(qa, 0);
                requests += 16;
                reap(cqa, 16);
            }
            // (d) NdkGetCqResults reaping 16 completions, per completion.
            "poll16" => {
                for _ in 0..15 {
                    read(qa, NDK_OP_FLAG_DEFER);
                }
                read(qa, 0);
                s.flush();
                assert_eq!(get_results(cqa, &mut res[..16]), 16);
                requests += 16;
            }
            // (e) NdkGetCqResults reaping one receive completion (64 bytes, no immediate
            // data), and (f) 16 of them: the sends' completions are drained through
            // NdkGetCqResultsEx, which the measurement does not count.
            "recv1" | "recv16" => {
                let k = if shape == "recv1" { 1 } else { 16 };
                let rs = [sge(s.local.addr(), 64, c.nodes[1].token)];
                for _ in 0..k {
                    assert_eq!(receive(qb, &rs), STATUS_SUCCESS);
                }
                c.kick(1, 0);
                for i in 0..k {
                    let flags = if i + 1 < k { NDK_OP_FLAG_DEFER } else { 0 };
                    assert_eq!(send(qa, &sg, flags), STATUS_SUCCESS);
                }
                s.flush();
                drain_ex(&s, cqa, k);
                assert_eq!(get_results(cqb, &mut res[..k]), k);
                assert!(
                    res[..k]
                        .iter()
                        .all(|r| r.Status == STATUS_SUCCESS && r.BytesTransferred == 64)
                );
                requests += k as u64;
            }
            "poll_empty" => {
                assert_eq!(get_results(cqa, &mut res[..1]), 0);
                requests += 1;
            }
            "arm" => {
                arm(cqa, NDK_CQ_NOTIFY_ANY);
                requests += 1;
            }
            "fastreg1" | "fastreg16" => {
                let (mr, n) = if shape == "fastreg1" {
                    (fr[0], 1)
                } else {
                    (fr[1], 16)
                };
                let st = fast_register(qa, mr, &pages[..n], s.local.addr(), 0);
                assert_eq!(st, STATUS_SUCCESS);
                requests += 1;
                reap(cqa, 1);
                assert_eq!(invalidate(qa, mr, 0), STATUS_SUCCESS);
                reap(cqa, 1);
            }
            "send" | "receive" => {
                let rs = [sge(s.local.addr(), 64, c.nodes[1].token)];
                if shape == "receive" {
                    assert_eq!(receive(qb, &rs), STATUS_SUCCESS);
                    requests += 1;
                    c.kick(1, 0);
                    assert_eq!(send(qa, &sg, 0), STATUS_SUCCESS);
                } else {
                    assert_eq!(receive(qb, &rs), STATUS_SUCCESS);
                    c.kick(1, 0);
                    assert_eq!(send(qa, &sg, 0), STATUS_SUCCESS);
                    requests += 1;
                }
                reap(cqa, 1);
                assert_eq!(c.drain(cqb, 1), vec![STATUS_SUCCESS]);
            }
            other => panic!("unknown shape {other}"),
        }
    }
    assert_eq!(
        (c.mads(), interrupts(c)),
        quiet,
        "CM MADs or interrupts while measuring"
    );
    let dropped: u64 = c.nodes.iter().map(|n| n.ndk.bad_cqes()).sum();
    assert_eq!(dropped, 0, "CQEs naming no outstanding request");
    eprintln!("requests={requests}");
    c.disconnect_all();
    leak(s.c);
    std::process::exit(0);
}

/// Interrupts taken by every host's ISR.
fn interrupts(c: &Cluster) -> u64 {
    c.nodes.iter().map(Node::interrupts).sum()
}

/// Reaps `n` successful completions from `cq` through NdkGetCqResultsEx (a thunk the
/// receive shapes do not measure), running the world while it waits.
fn drain_ex(s: &Pair, cq: *mut NDK_CQ, n: usize) {
    let f = disp(unsafe_dispatch_cq(cq)).NdkGetCqResultsEx;
    let mut res = [NDK_RESULT_EX {
        Status: 0,
        BytesTransferred: 0,
        QPContext: std::ptr::null_mut(),
        RequestContext: std::ptr::null_mut(),
        Type: NdkOperationTypeSend,
        ProviderErrorCode: 0,
        TypeSpecificCompletionOutput: 0,
    }; 16];
    let mut got = 0;
    let mut idle = 0;
    while got < n {
        let want = (n - got).min(16);
        // SAFETY: a live CQ; `res` is writable for `want` entries.
        let k = unsafe { f(cq, res.as_mut_ptr(), want as u32) } as usize;
        assert!(res[..k].iter().all(|r| r.Status == STATUS_SUCCESS));
        got += k;
        if k == 0 {
            idle += 1;
            assert!(idle < 1000, "completions missing: {got} of {n}");
            s.c.run();
        }
    }
}

/// Reads in flight in the cache shape: at most a quarter of the default CQ depth (64) and
/// half of a QP's queue (32, `Pair::new`), so one QP takes a whole round.
const INFLIGHT: usize = 16;

/// The cache shape (`instr rr`, module docs).
fn round_robin(requests: usize, nqp: usize, shared: bool, depth: u32) {
    let s = Pair::new(nqp, shared, depth, false);
    let mut res = [empty_result(); 1];
    let mut done = 0;
    let quiet = (s.c.mads(), interrupts(&s.c));
    while done < requests {
        // Stack arrays: the harness adds nothing to the heap lines between the calls.
        let mut cqs = [std::ptr::null_mut(); INFLIGHT];
        for (j, cq) in cqs.iter_mut().enumerate() {
            let (qa, _, cqa, _) = s.at(done + j);
            s.read(qa, 0);
            s.c.kick(0, 0);
            *cq = cqa;
        }
        s.c.run();
        for &cq in &cqs {
            assert_eq!(get_results(cq, &mut res), 1, "a read's completion");
            assert_eq!(res[0].Status, STATUS_SUCCESS);
        }
        done += INFLIGHT;
    }
    assert_eq!(
        (s.c.mads(), interrupts(&s.c)),
        quiet,
        "CM MADs or interrupts while measuring"
    );
    let dropped: u64 = s.c.nodes.iter().map(|n| n.ndk.bad_cqes()).sum();
    assert_eq!(dropped, 0, "CQEs naming no outstanding request");
    eprintln!("requests={done}");
    s.c.disconnect_all();
    leak(s.c);
    std::process::exit(0);
}

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

/// Host memory per QP and per CQ: the OS seam's pool and DMA accounting, and every heap
/// byte the provider keeps (NDK objects and their request records included; counted by
/// `perfkit::heap` inside the create calls and on the DPC threads that complete them).
fn mem(nqp: usize, depth: u32) {
    heap::main_thread();
    let c = Cluster::new(2, false);
    let bytes = || {
        let s = stats();
        (s.live_bytes, s.dma_bytes, heap::live())
    };
    let (p0, d0, h0) = bytes();
    let cqs: Vec<_> = (0..nqp)
        .map(|_| heap::measure(|| c.cq(0, depth, None)))
        .collect();
    c.run();
    let (p1, d1, h1) = bytes();
    let qdepth = depth.min(4096);
    for &cq in &cqs {
        heap::measure(|| c.qp(0, cq, cq, qdepth, 1));
    }
    c.run();
    let (p2, d2, h2) = bytes();
    let n = nqp as f64;
    println!(
        "CQ depth {depth}: {:.0} B heap ({:.0} B seam pool) + {:.0} B DMA per CQ; QP depth {qdepth}x{qdepth}: {:.0} B heap ({:.0} B seam pool) + {:.0} B DMA per QP (1 SGE)",
        (h1 - h0) as f64 / n,
        (p1 - p0) as f64 / n,
        (d1 - d0) as f64 / n,
        (h2 - h1) as f64 / n,
        (p2 - p1) as f64 / n,
        (d2 - d1) as f64 / n
    );
    leak(c);
    std::process::exit(0);
}
