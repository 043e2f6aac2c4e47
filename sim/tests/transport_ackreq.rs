//! The responder answers AckReq on any packet of a multi-packet request, not only on its
//! last: Linux's rxe asks for an acknowledgement every 64 packets and stops at 128
//! unacknowledged PSNs, so a responder that waits for the last packet leaves it waiting for
//! its retransmission timeout on every message longer than 128 packets (found against the
//! Linux peer: `ib_send_lat -s 1048576` took 8 s per message).

mod common;

use common::*;
use pvrdma_sim::wire::bth::BthRepr;
use pvrdma_sim::wire::opcode as op;
use pvrdma_sim::wire::psn::Psn;
use pvrdma_sim::wire::roce::{ExtRepr, RocePacket};

/// A hand-built request packet from node 0's QP `a` to node 1's QP `b` (the model's own
/// requester asks only on last packets, so the asking packet cannot come from it).
fn frame(
    world: &pvrdma_sim::world::World,
    b: &End,
    opcode: u8,
    psn: u32,
    ack_req: bool,
    payload: &[u8],
) -> Vec<u8> {
    let (n0, n1) = (world.node(0), world.node(1));
    RocePacket {
        src_mac: n0.mac(),
        dst_mac: n1.mac(),
        vlan: None,
        src_gid: n0.gid(),
        dst_gid: n1.gid(),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        ip_ident: 0,
        udp_src_port: 0xC000,
        bth: BthRepr {
            opcode,
            pkey: 0xFFFF,
            dest_qp: b.qp.qpn,
            ack_req,
            psn: Psn::new(psn),
            ..Default::default()
        },
        ext: ExtRepr::default(),
        payload,
    }
    .emit()
    .expect("a valid frame")
}

#[test]
fn a_middle_packet_with_ackreq_is_acknowledged() {
    let (world, _a, mut b) = rc_pair(60, |_| {});
    b.recv_at(7, 0, 4096);
    // RcPath::new: PSNs start at 0xFF_FFF0, MTU 1024.
    let p = 0xFF_FFF0;
    let body = pattern(9, 3 * 1024);
    let frames = [
        frame(&world, &b, op::RC_SEND_FIRST, p, false, &body[..1024]),
        frame(
            &world,
            &b,
            op::RC_SEND_MIDDLE,
            p + 1,
            true,
            &body[1024..2048],
        ),
        frame(&world, &b, op::RC_SEND_LAST, p + 2, true, &body[2048..]),
    ];
    let port = world.node(0).port();
    for f in frames {
        world.fabric().transmit(port, f);
    }
    world.run_until_idle();
    let c = world.counters(1).transport;
    assert_eq!(c.acks_sent, 2, "the asking middle packet and the last one");
    let r = b.recv_cqes();
    assert_eq!(
        (r.len(), r[0].wr_id, r[0].status, r[0].byte_len),
        (1, 7, st::SUCCESS, 3 * 1024)
    );
    assert_eq!(b.read(0, 3 * 1024), body);
}
