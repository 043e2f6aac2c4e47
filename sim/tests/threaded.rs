//! Threaded mode: the device thread runs the same code and delivers interrupts (no timing
//! assertions; waits are bounded by iteration counts).

use std::sync::Arc;

use pvrdma_sim::testutil::{Host, QpSpec, Req, SendWqe};

fn wait_for(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..200_000 {
        if f() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

#[test]
fn device_thread_delivers_the_command_interrupt() {
    let h = Host::default_up();
    h.irqs.take();
    h.dev.start_thread();
    // Command: vector 0 arrives from the device thread.
    h.cmd.write(0, &Req::new(2).0);
    h.dev.bar1_write32(0x10, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 0);
    assert!(wait_for(|| h.irqs.count(0) >= 1));
    assert_eq!(
        u32::from_le_bytes(h.resp.read_vec(8, 4).try_into().unwrap()),
        0x8000_0002
    );
    assert_eq!(
        u32::from_le_bytes(h.resp.read_vec(16, 4).try_into().unwrap()),
        1
    );
    h.dev.stop_thread();
    assert_eq!(h.dev.counters().interrupts[0], 1);
}

#[test]
fn threaded_sq_kick_completes_local_wqe_and_notifies() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let mut qp = h.create_qp(&QpSpec::rc(pd, cq.handle, cq.handle));
    h.rc_to_rts(qp.handle, 7);
    let key = h.create_frmr(pd, 1).lkey;
    h.irqs.take();
    h.dev.start_thread();
    h.dev.uar_write32(4, cq.handle | 1 << 30);
    qp.post_send(&SendWqe::new(42, 10, 2).at(24, &key.to_le_bytes()));
    h.dev.uar_write32(0, qp.handle | 1 << 30);
    assert!(wait_for(|| h.irqs.count(2) >= 1));
    h.dev.stop_thread();
    assert_eq!(
        cq.poll().iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![42]
    );
    assert_eq!(h.cqnes(), vec![cq.handle]);
}

#[test]
fn start_and_stop_are_idempotent_and_dev_outlives_thread() {
    let h = Host::default_up();
    h.dev.start_thread();
    h.dev.start_thread();
    h.dev.stop_thread();
    h.dev.stop_thread();
    assert!(Arc::strong_count(&h.dev) >= 1);
}
