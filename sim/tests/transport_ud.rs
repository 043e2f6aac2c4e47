//! UD and GSI datagrams (reference §14 "UD and GSI", §11 receiver UD contents; M37): GRH area,
//! CQE fields, Q_Key rules and silent drops, over IPv4-mapped and IPv6 GIDs.

mod common;

use common::*;
use pvrdma_sim::testutil::{Host, QpSpec, SendWqe, TestCq, TestMr, TestQp};
use pvrdma_sim::world::{NodeConfig, World};

struct UdEnd {
    host: Host,
    cq: TestCq,
    qp: TestQp,
    mr: TestMr,
}

impl UdEnd {
    fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) {
        self.qp.post_recv(wr_id, &[(VA + off, len, self.mr.lkey)]);
        self.host.ring_rq(self.qp.handle);
    }
    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        self.mr
            .buf
            .as_ref()
            .unwrap()
            .data
            .read_vec(off as usize, len)
    }
    fn write(&self, off: u64, d: &[u8]) {
        self.mr.buf.as_ref().unwrap().data.write(off as usize, d);
    }
}

const QKEY: u32 = 0x1234_5678;

fn ud_end(world: &World, i: usize, qp_type: u8) -> UdEnd {
    let host = Host::on(world.device(i).clone());
    host.bind_gid(0, world.node(i).gid());
    let pd = host.create_pd();
    let cq = host.create_cq(64);
    let mut s = QpSpec::rc(pd, cq.handle, cq.handle);
    s.qp_type = qp_type;
    let qp = host.create_qp(&s);
    host.ud_to_rts(qp.handle, QKEY, qp_type == 1);
    let mr = host.create_mr(pd, VA, 16 * 4096, ACC_ALL);
    UdEnd { host, cq, qp, mr }
}

/// A UD SEND WQE (§10: remote_qpn @32, remote_qkey @36, AV @40: dgid @48, gid_index @65,
/// hop_limit @67, dmac @68).
fn ud_wqe(world: &World, from: &UdEnd, to: usize, remote_qpn: u32, qkey: u32, len: u32) -> SendWqe {
    SendWqe::new(7, wr::SEND, SIGNALED)
        .sge(VA, len, from.mr.lkey)
        .at(32, &remote_qpn.to_le_bytes())
        .at(36, &qkey.to_le_bytes())
        .at(44, &(3u32 << 20).to_le_bytes())
        .at(48, &world.node(to).gid())
        .at(64, &[0x80, 0, 0, 64])
        .at(68, &world.node(to).mac())
}

fn send(world: &World, from: &mut UdEnd, w: &SendWqe) {
    from.qp.post_send(w);
    from.host.ring_sq(from.qp.handle);
    world.run_until_idle();
}

#[test]
fn ud_send_over_ipv4_puts_the_ipv4_header_in_the_grh_area() {
    let world = World::with_nodes(40, 2);
    let mut a = ud_end(&world, 0, 4);
    let mut b = ud_end(&world, 1, 4);
    let data = pattern(40, 100);
    a.write(0, &data);
    b.post_recv(21, 0x100, 140);
    let w = ud_wqe(&world, &a, 1, b.qp.qpn, QKEY, 100);
    send(&world, &mut a, &w);
    let s = a.cq.poll();
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode, s[0].byte_len),
        (7, 0, 0, 100)
    );
    let r = b.cq.poll();
    assert_eq!(r.len(), 1);
    let c = r[0];
    assert_eq!((c.wr_id, c.status, c.opcode, c.byte_len), (21, 0, 128, 140));
    assert_eq!(c.wc_flags, 1 | 16 | 64);
    assert_eq!(
        (c.src_qp, c.network_hdr_type, c.smac),
        (a.qp.qpn, 1, world.node(0).mac())
    );
    let grh = b.read(0x100, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20], 0x45);
    assert_eq!(grh[21], 3, "TOS = traffic class");
    assert_eq!(grh[20 + 9], 17);
    assert_eq!(&grh[32..36], &[10, 0, 0, 1]);
    assert_eq!(&grh[36..40], &[10, 0, 0, 2]);
    assert_eq!(b.read(0x100 + 40, 100), data);
}

#[test]
fn ud_send_over_ipv6_puts_the_ipv6_header_in_the_grh_area_with_imm() {
    let mut world = World::new(41);
    world.add_node(NodeConfig::ipv6(0));
    world.add_node(NodeConfig::ipv6(1));
    let mut a = ud_end(&world, 0, 4);
    let mut b = ud_end(&world, 1, 4);
    a.write(0, b"ipv6 datagram");
    b.post_recv(22, 0, 100);
    let mut w = ud_wqe(&world, &a, 1, b.qp.qpn, QKEY, 13).at(24, &[5, 6, 7, 8]);
    w.0[16..20].copy_from_slice(&wr::SEND_WITH_IMM.to_le_bytes());
    send(&world, &mut a, &w);
    let c = b.cq.poll()[0];
    assert_eq!((c.status, c.byte_len, c.network_hdr_type), (0, 53, 2));
    assert_eq!(c.wc_flags, 1 | 2 | 16 | 64);
    assert_eq!(c.imm_data, [5, 6, 7, 8]);
    let grh = b.read(0, 40);
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(grh[6], 17);
    assert_eq!(&grh[8..24], &world.node(0).gid());
    assert_eq!(&grh[24..40], &world.node(1).gid());
    assert_eq!(b.read(40, 13), b"ipv6 datagram");
}

#[test]
fn qkey_mismatch_small_buffer_and_empty_rq_drop_silently() {
    let world = World::with_nodes(42, 2);
    let mut a = ud_end(&world, 0, 4);
    let mut b = ud_end(&world, 1, 4);
    // Empty RQ.
    let w = ud_wqe(&world, &a, 1, b.qp.qpn, QKEY, 10);
    send(&world, &mut a, &w);
    assert_eq!(
        a.cq.poll()[0].status,
        0,
        "UD sends complete when handed to the fabric"
    );
    // Q_Key mismatch and a buffer one byte too small: neither consumes the WQE.
    b.post_recv(30, 0, 40 + 10);
    let w = ud_wqe(&world, &a, 1, b.qp.qpn, QKEY ^ 1, 10);
    send(&world, &mut a, &w);
    let w = ud_wqe(&world, &a, 1, b.qp.qpn, QKEY, 11);
    send(&world, &mut a, &w);
    assert!(b.cq.poll().is_empty());
    assert_eq!(b.qp.rq_cons(), 0);
    assert_eq!(world.counters(1).transport.ud_dropped, 3);
    // remote_qkey bit 31: the sender's own Q_Key (= QKEY) is used, and it fits.
    let w = ud_wqe(&world, &a, 1, b.qp.qpn, 0x8000_0000, 10);
    send(&world, &mut a, &w);
    let r = b.cq.poll();
    assert_eq!((r[0].wr_id, r[0].status, r[0].byte_len), (30, 0, 50));
    assert_eq!(b.qp.rq_cons(), 1);
    assert_eq!(a.cq.poll().len(), 3);
}

#[test]
fn gsi_qp1_uses_qkey_0x80010000() {
    let world = World::with_nodes(43, 2);
    let mut a = ud_end(&world, 0, 1);
    let mut b = ud_end(&world, 1, 1);
    assert_eq!((a.qp.qpn, b.qp.qpn), (1, 1));
    a.write(0, &[0x01; 256]);
    b.post_recv(1, 0, 40 + 256);
    let w = ud_wqe(&world, &a, 1, 1, QKEY, 256);
    send(&world, &mut a, &w);
    assert!(b.cq.poll().is_empty(), "GSI accepts only Q_Key 0x80010000");
    let w = ud_wqe(&world, &a, 1, 1, 0x8001_0000, 256);
    send(&world, &mut a, &w);
    let c = b.cq.poll()[0];
    assert_eq!((c.wr_id, c.status, c.byte_len, c.src_qp), (1, 0, 296, 1));
    assert_eq!(b.read(40, 256), vec![0x01; 256]);
}
