//! Two (or more) brought-up hosts on a `World`, RC-connected, with hand-encoded WQEs
//! (reference §10 offsets) and a registered buffer each.
#![allow(dead_code)]

use pvrdma_sim::testutil::{Host, QpSpec, RcPath, SendWqe, TestCq, TestMr, TestQp};
use pvrdma_sim::world::World;
use pvrdma_sim::wqe::Cqe;

/// Virtual address of each host's registered buffer.
pub const VA: u64 = 0x1_0000_0000;
/// Its length (64 pages).
pub const MR_LEN: u64 = 64 * 4096;
/// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ.
pub const ACC_ALL: u32 = 7;
pub const SIGNALED: u32 = 1 << 1;
pub const SOLICITED: u32 = 1 << 2;
pub const FENCE: u32 = 1 << 0;

pub mod wr {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const SEND_WITH_INV: u32 = 8;
    pub const LOCAL_INV: u32 = 10;
    pub const FAST_REG_MR: u32 = 11;
}

pub mod st {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

pub mod ev {
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
}

/// One side of a connection.
pub struct End {
    pub host: Host,
    pub pd: u32,
    pub scq: TestCq,
    pub rcq: TestCq,
    pub qp: TestQp,
    pub mr: TestMr,
}

impl End {
    /// Writes `data` into the registered buffer at byte `off`.
    pub fn write(&self, off: u64, data: &[u8]) {
        self.mr.buf.as_ref().unwrap().data.write(off as usize, data);
    }
    /// Reads the registered buffer.
    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        self.mr
            .buf
            .as_ref()
            .unwrap()
            .data
            .read_vec(off as usize, len)
    }
    pub fn va(&self, off: u64) -> u64 {
        VA + off
    }
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }
    /// Posts a send WQE and rings the SQ doorbell.
    pub fn post_send(&mut self, w: &SendWqe) {
        self.qp.post_send(w);
        self.host.ring_sq(self.qp.handle);
    }
    /// Posts a receive WQE and rings the RQ doorbell.
    pub fn post_recv(&mut self, wr_id: u64, sges: &[(u64, u32, u32)]) {
        self.qp.post_recv(wr_id, sges);
        self.host.ring_rq(self.qp.handle);
    }
    /// A receive of `len` bytes at `off` of the registered buffer.
    pub fn recv_at(&mut self, wr_id: u64, off: u64, len: u32) {
        let s = [(self.va(off), len, self.lkey())];
        self.post_recv(wr_id, &s);
    }
    pub fn qp_state(&self) -> u32 {
        let r = self.host.cmd_ok(
            &pvrdma_sim::testutil::Req::new(11)
                .u32(16, self.qp.handle)
                .u32(20, 1),
        );
        r.u32(16)
    }
    pub fn send_cqes(&self) -> Vec<Cqe> {
        self.scq.poll()
    }
    pub fn recv_cqes(&self) -> Vec<Cqe> {
        self.rcq.poll()
    }
}

/// A SEND-family WQE with one SGE from the registered buffer.
pub fn send_wqe(end: &End, wr_id: u64, opcode: u32, flags: u32, off: u64, len: u32) -> SendWqe {
    SendWqe::new(wr_id, opcode, flags).sge(end.va(off), len, end.lkey())
}

/// Sets the RDMA fields (remote_addr @32, rkey @40).
pub fn rdma(w: SendWqe, raddr: u64, rkey: u32) -> SendWqe {
    w.at(32, &raddr.to_le_bytes()).at(40, &rkey.to_le_bytes())
}

/// Deterministic test pattern.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Builds a host on node `i` of `world` with GID index 0 bound, PD, CQs, a QP and an MR.
pub fn end_on(world: &World, i: usize, spec: impl Fn(&mut QpSpec)) -> End {
    let host = Host::on(world.device(i).clone());
    host.bind_gid(0, world.node(i).gid());
    let pd = host.create_pd();
    let scq = host.create_cq(256);
    let rcq = host.create_cq(256);
    let mut s = QpSpec::rc(pd, scq.handle, rcq.handle);
    s.send_wr = 32;
    s.recv_wr = 32;
    s.send_sge = 16;
    s.recv_sge = 16;
    spec(&mut s);
    let qp = host.create_qp(&s);
    let mr = host.create_mr(pd, VA, MR_LEN, ACC_ALL);
    End {
        host,
        pd,
        scq,
        rcq,
        qp,
        mr,
    }
}

/// Connects `a` and `b` (nodes ia, ib) with `tweak` applied to both paths.
pub fn connect(world: &World, a: &End, ia: usize, b: &End, ib: usize, tweak: impl Fn(&mut RcPath)) {
    let mut pa = RcPath::new(b.qp.qpn, world.node(ib).gid(), world.node(ib).mac());
    let mut pb = RcPath::new(a.qp.qpn, world.node(ia).gid(), world.node(ia).mac());
    tweak(&mut pa);
    tweak(&mut pb);
    a.host.rc_connect(a.qp.handle, &pa);
    b.host.rc_connect(b.qp.handle, &pb);
    world.run_until_idle();
}

/// A world of two IPv4 nodes with a connected RC pair.
pub fn rc_pair(seed: u64, tweak: impl Fn(&mut RcPath)) -> (World, End, End) {
    rc_pair_with(seed, tweak, |_| {})
}

pub fn rc_pair_with(
    seed: u64,
    tweak: impl Fn(&mut RcPath),
    spec: impl Fn(&mut QpSpec) + Copy,
) -> (World, End, End) {
    let world = World::with_nodes(seed, 2);
    let a = end_on(&world, 0, spec);
    let b = end_on(&world, 1, spec);
    connect(&world, &a, 0, &b, 1, tweak);
    (world, a, b)
}
