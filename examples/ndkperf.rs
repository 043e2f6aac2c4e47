#[path = "../tests/common/mod.rs"]
mod common;
mod perfkit;
use perfkit::*;
use pvrdma_ndk::ndkpi::*;
fn main() {
    let c = Cluster::new(2, true);
    let cqa = c.cq(0, 64, None);
    let cqb = c.cq(1, 64, None);
    let qa = c.qp(0, cqa, cqa, 16, 2);
    let qb = c.qp(1, cqb, cqb, 16, 2);
    c.connect(0, qa, 1, qb);
    let mut ba = c.buffer(0, 8192);
    let mut bb = c.buffer(1, 8192);
    bb.bytes()[..4].copy_from_slice(b"ping");
    let rb = c.remote(1, qb, cqb, &bb);
    eprintln!("rkey {:x} va {:x}", rb.rkey, rb.va);
    let s = [sge(ba.addr(), 4096, c.nodes[0].token)];
    assert_eq!(rdma(qa, true, &s, rb.va, rb.rkey, 0), STATUS_SUCCESS);
    c.run();
    eprintln!("{:?} {:?}", c.drain(cqa, 1), &ba.bytes()[..4]);
    eprintln!(
        "doorbells {} intr {} dpcs {}",
        c.nodes[0]
            .doorbells
            .load(std::sync::atomic::Ordering::Relaxed),
        c.nodes[0].interrupts(),
        c.nodes[0].dpcs()
    );
    leak(c);
}
