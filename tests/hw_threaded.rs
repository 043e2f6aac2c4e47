//! Threaded mode: the model's own thread, DPCs on executor threads, a posting thread and a
//! polling thread that arms the CQ and sleeps on its notifications (pvrdma.md §7, §12, §13,
//! M15, M18, M19). Every completion must be seen exactly once, in order.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::objects::*;
use common::{Harness, Mode};
use pvrdma_ndk::pvrdma::cmd::{CreateMr, DestroyMr, QpType, mr_flags};
use pvrdma_ndk::pvrdma::cqe::{wc_opcode, wc_status};
use pvrdma_ndk::pvrdma::device::CqEvents;
use pvrdma_ndk::pvrdma::pdir::PageDir;
use pvrdma_ndk::pvrdma::wqe::{AccessFlags, SendFlags, SqHeader, WrOpcode};
use pvrdma_sim::DeviceConfig;

const N: u64 = 10_000;
/// Completions allowed in flight: below the CQ size, so the CQ never overflows.
const WINDOW: u64 = 200;

#[derive(Default)]
struct Notify {
    count: Mutex<u64>,
    cv: Condvar,
}

impl CqEvents for Notify {
    fn completion(&self) {
        *self.count.lock().unwrap() += 1;
        self.cv.notify_all();
    }
    fn error(&self) {
        panic!("CQ error in the stress loop");
    }
}

#[test]
fn ten_thousand_local_wqes_with_notifications() {
    let h = Harness::new(Mode::Threaded, 2, DeviceConfig::default());
    let dev = h.dev();
    let pd = create_pd(dev);
    let mut cq = create_cq(dev, 256).unwrap();
    let mut qp = create_qp(
        dev,
        &QpSpec {
            sq: (64, 1),
            ..QpSpec::rc(pd, cq.handle)
        },
    )
    .unwrap();
    to_rts(dev, qp.handle(), QpType::Rc, 0x99).unwrap();
    let frmr = dev
        .cmd()
        .execute(&CreateMr {
            start: 0,
            length: 0,
            pdir_dma: 0,
            pd_handle: pd,
            access_flags: AccessFlags::empty(),
            flags: mr_flags::FRMR,
            nchunks: 1,
        })
        .unwrap()
        .mr_handle;
    let page = common::memory::ConsumerMem::new(&h.rig.space, 1, 0x4000_0000);
    let pl = PageDir::new(dev.platform().dma(), 1).unwrap();
    pl.set_page(0, page.bus(0)).unwrap();
    let notify = Arc::new(Notify::default());
    dev.register_cq(cq.handle, notify.clone()).unwrap();

    let polled = AtomicU64::new(0);
    let mut seen = vec![0u32; N as usize];
    let mut arms = 0u64;
    std::thread::scope(|sc| {
        // Poster: FAST_REG(key) / LOCAL_INV(key) pairs, all signalled.
        sc.spawn(|| {
            for i in 0..N {
                while i - polled.load(Ordering::Acquire) >= WINDOW {
                    std::thread::yield_now();
                }
                let key = (frmr << 8) | ((i / 2) as u32 & 0xFF);
                let h = if i % 2 == 0 {
                    SqHeader {
                        op_word: SqHeader::op_word(WrOpcode::FastRegMr, SendFlags::SIGNALED),
                        ex: 0,
                        body: SqHeader::fast_reg_body(
                            page.va,
                            pl.dma(),
                            1,
                            4096,
                            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                            key,
                        ),
                    }
                } else {
                    SqHeader {
                        op_word: SqHeader::op_word(WrOpcode::LocalInv, SendFlags::SIGNALED),
                        ex: key,
                        body: [0; 6],
                    }
                };
                // The SQ holds 64 WQEs: wait for the device to consume one (its validated
                // `cons_head`).
                loop {
                    match qp.q.sq.outstanding() {
                        Ok(n) if n < 64 => break,
                        Ok(_) => std::thread::yield_now(),
                        Err(e) => panic!("post {i}: {e:?}"),
                    }
                }
                qp.post_send(i, &h, &[]);
            }
        });
        // Poller: drain, arm, drain again (CQEs present at arm time never notify, M18), then
        // sleep until the handler runs.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next = 0u64;
        let mut drain = |cq: &mut Cq| -> usize {
            let out = cq.poll();
            let n = out.len();
            for c in out {
                assert_eq!(c.wr_id, next, "completions in SQ order");
                assert_eq!(c.status, wc_status::SUCCESS);
                let want = if c.wr_id % 2 == 0 {
                    wc_opcode::FAST_REG_MR
                } else {
                    wc_opcode::LOCAL_INV
                };
                assert_eq!(c.opcode, want);
                seen[c.wr_id as usize] += 1;
                next += 1;
            }
            polled.fetch_add(n as u64, Ordering::Release);
            n
        };
        while polled.load(Ordering::Acquire) < N {
            assert!(Instant::now() < deadline, "stress loop hung");
            if drain(&mut cq) != 0 {
                continue;
            }
            let before = *notify.count.lock().unwrap();
            cq.reader.arm(false);
            arms += 1;
            if drain(&mut cq) != 0 {
                continue;
            }
            let g = notify.count.lock().unwrap();
            let _ = notify
                .cv
                .wait_timeout_while(g, Duration::from_millis(200), |c| *c == before)
                .unwrap();
        }
    });
    h.settle();
    assert!(
        seen.iter().all(|&n| n == 1),
        "every completion exactly once"
    );
    let notes = *notify.count.lock().unwrap();
    let st = dev.stats();
    let mc = h.rig.model.counters();
    assert!(notes >= 1, "the poller slept on notifications");
    assert!(
        notes <= arms,
        "at most one notification per arm ({notes} > {arms})"
    );
    assert_eq!(st.cq_notifications, mc.cqnes);
    assert_eq!(notes, mc.cqnes);
    assert_eq!(mc.cqes, N);
    assert_eq!((mc.cqes_dropped, mc.bad_indices, mc.dma_faults), (0, 0, 0));
    assert_eq!(st.dropped_notifications, 0);
    dev.unregister_cq(cq.handle);
    destroy_qp(dev, qp);
    dev.cmd().execute(&DestroyMr { mr_handle: frmr }).unwrap();
    destroy_cq(dev, cq);
    destroy_pd(dev, pd);
    drop((pl, page));
    h.finish();
}

/// Four threads issuing commands at once: the channel keeps one outstanding, the model
/// answers each synchronously and coalesces vector 0 (M8, M9); every command gets its own
/// response and the handles stay consistent.
#[test]
fn concurrent_commands_through_one_channel() {
    for mode in [Mode::Threaded, Mode::Deterministic] {
        let h = Harness::new(mode, 2, DeviceConfig::default());
        let dev = h.dev();
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..50 {
                        let pd = create_pd(dev);
                        assert!((1..=4).contains(&pd), "at most 4 PDs live at once: {pd}");
                        destroy_pd(dev, pd);
                    }
                });
            }
        });
        h.settle();
        let st = dev.cmd().stats();
        assert_eq!((st.submitted, st.responses), (400, 400), "{mode:?}");
        assert_eq!((st.rejected, st.timeouts), (0, 0));
        assert_eq!(h.rig.model.counters().commands, 400);
        assert_eq!(h.rig.model.counters().command_errors, 0);
        h.finish();
    }
}
