//! Throughput of the device model's RC transport between two devices in deterministic mode
//! (`World::run_until_idle`): RDMA WRITE and READ of 4 KiB and 64 KiB at path MTU 1024, and
//! the cost per packet (64 KiB WRITE at MTU 256 = 256 data packets + 1 ACK).
//!
//! Run: `cargo bench -p pvrdma-sim --bench transport -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pvrdma_sim::testutil::{Host, QpSpec, RcPath, SendWqe, TestCq, TestMr, TestQp};
use pvrdma_sim::world::World;

const VA: u64 = 0x1_0000_0000;
const LEN: u64 = 32 * 4096;
const RDMA_WRITE: u32 = 0;
const RDMA_READ: u32 = 4;
const SIGNALED: u32 = 1 << 1;

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

/// Posts one signalled RDMA op of `len` bytes from A to B and runs it to completion.
fn one_op(world: &World, a: &mut End, b: &End, opcode: u32, len: u32) {
    let w = SendWqe::new(1, opcode, SIGNALED)
        .sge(VA, len, a.mr.lkey)
        .at(32, &(VA + LEN / 2).to_le_bytes())
        .at(40, &b.mr.rkey.to_le_bytes());
    a.qp.post_send(&w);
    a.host.ring_sq(a.qp.handle);
    world.run_until_idle();
    let c = a.cq.poll();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, 0);
    black_box(c);
}

fn rdma(c: &mut Criterion) {
    let mut g = c.benchmark_group("rdma");
    for (name, opcode) in [("write", RDMA_WRITE), ("read", RDMA_READ)] {
        for len in [4096u32, 65536] {
            let (world, mut a, b) = pair(3);
            g.throughput(Throughput::Bytes(u64::from(len)));
            g.bench_function(format!("{name}/{len}"), |bn| {
                bn.iter(|| one_op(&world, &mut a, &b, opcode, len));
            });
        }
    }
    g.finish();
}

fn per_packet(c: &mut Criterion) {
    let mut g = c.benchmark_group("per_packet");
    let (world, mut a, b) = pair(1);
    // 65536 / 256 = 256 request packets + 1 ACK per operation.
    g.throughput(Throughput::Elements(257));
    g.bench_function("write_64k_mtu256", |bn| {
        bn.iter(|| one_op(&world, &mut a, &b, RDMA_WRITE, 65536));
    });
    g.finish();
}

criterion_group!(benches, rdma, per_packet);
criterion_main!(benches);
