//! MODIFY_QP / QUERY_QP state machine (§8 transition table; M39, M33).

use pvrdma_sim::testutil::{Host, QpSpec, Req, TestQp};

const STATE: u32 = 1;
const ACCESS: u32 = 1 << 3;
const PKEY: u32 = 1 << 4;
const PORT: u32 = 1 << 5;
const QKEY: u32 = 1 << 6;
const AV: u32 = 1 << 7;
const MTU: u32 = 1 << 8;
const TIMEOUT: u32 = 1 << 9;
const RETRY: u32 = 1 << 10;
const RNR_RETRY: u32 = 1 << 11;
const RQ_PSN: u32 = 1 << 12;
const MAX_RD: u32 = 1 << 13;
const MIN_RNR: u32 = 1 << 15;
const SQ_PSN: u32 = 1 << 16;
const MAX_DEST_RD: u32 = 1 << 17;
const DEST_QPN: u32 = 1 << 20;
const A: usize = 24; // attr offset in the request

fn setup(qp_type: u8) -> (Host, TestQp) {
    let h = Host::default_up();
    let pd = h.create_pd();
    let cq = h.create_cq(16);
    let qp = h.create_qp(&QpSpec {
        qp_type,
        ..QpSpec::rc(pd, cq.handle, cq.handle)
    });
    (h, qp)
}

fn state(h: &Host, qp: u32) -> u32 {
    h.cmd_ok(&Req::new(11).u32(16, qp)).u32(16)
}

fn to_init_rc(h: &Host, qp: u32) {
    let r = h.modify_qp(qp, STATE | PKEY | PORT | ACCESS, |q| {
        q.u32(A, 1).u8(A + 45, 1).u32(A + 32, 7)
    });
    assert_eq!(r.err(), 0);
}

fn rtr_req(q: Req) -> Req {
    q.u32(A, 2)
        .u32(A + 8, 5)
        .u32(A + 20, 0x1234)
        .u32(A + 28, 0x105)
        .u8(A + 43, 3)
        .u8(A + 44, 12)
        .bytes(A + 80, &[0xFE; 16])
        .u8(A + 80 + 31, 1)
        .bytes(A + 80 + 33, &[1, 2, 3, 4, 5, 6])
}
const RTR_MASK: u32 = STATE | AV | MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD | MIN_RNR;

#[test]
fn rc_reaches_rts_and_query_returns_the_attributes() {
    let (h, qp) = setup(2);
    to_init_rc(&h, qp.handle);
    assert_eq!(state(&h, qp.handle), 1);
    assert_eq!(h.modify_qp(qp.handle, RTR_MASK, rtr_req).err(), 0);
    let m = STATE | TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | MAX_RD;
    let r = h.modify_qp(qp.handle, m, |q| {
        q.u32(A, 3)
            .u8(A + 46, 14)
            .u8(A + 47, 6)
            .u8(A + 48, 7)
            .u32(A + 24, 0x777)
            .u8(A + 42, 2)
    });
    assert_eq!(r.err(), 0);
    let q = h.cmd_ok(&Req::new(11).u32(16, qp.handle));
    let o = 16;
    assert_eq!(q.u32(o), 3);
    assert_eq!(q.u32(o + 8), 5); // path_mtu
    assert_eq!(q.u32(o + 20), 0x1234); // rq_psn
    assert_eq!(q.u32(o + 24), 0x777); // sq_psn
    assert_eq!(q.u32(o + 28), 0x105); // dest_qp_num
    assert_eq!(q.u32(o + 32), 7); // access
    assert_eq!(q.bytes[o + 42], 2); // max_rd_atomic
    assert_eq!(q.bytes[o + 43], 3); // max_dest_rd_atomic
    assert_eq!(q.bytes[o + 44], 12);
    assert_eq!(q.bytes[o + 45], 1);
    assert_eq!(q.bytes[o + 46], 14);
    assert_eq!(q.bytes[o + 47], 6);
    assert_eq!(q.bytes[o + 48], 7);
    assert_eq!(&q.bytes[o + 80..o + 96], &[0xFE; 16]);
    assert_eq!(q.bytes[o + 80 + 31], 1);
    assert_eq!(&q.bytes[o + 80 + 33..o + 80 + 39], &[1, 2, 3, 4, 5, 6]);
    let info = h.dev.with_core(|c| c.qp_info(qp.handle)).unwrap();
    assert_eq!(
        (info.attr.dest_qp_num, info.attr.retry_cnt, info.qpn),
        (0x105, 6, 0x101)
    );
}

#[test]
fn missing_required_attribute_is_rejected_and_state_unchanged() {
    let (h, qp) = setup(2);
    let r = h.modify_qp(qp.handle, STATE | PKEY | PORT, |q| {
        q.u32(A, 1).u8(A + 45, 1)
    });
    assert_eq!((r.err_reg, r.err()), (22, 22));
    assert_eq!(state(&h, qp.handle), 0);
    to_init_rc(&h, qp.handle);
    for drop in [AV, MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD, MIN_RNR] {
        assert_eq!(
            h.modify_qp(qp.handle, RTR_MASK & !drop, rtr_req).err(),
            22,
            "mask bit {drop:#x}"
        );
    }
    assert_eq!(state(&h, qp.handle), 1);
}

#[test]
fn attribute_not_allowed_for_the_transition_is_rejected() {
    let (h, qp) = setup(2);
    // QKEY is not an RC attribute.
    let r = h.modify_qp(qp.handle, STATE | PKEY | PORT | ACCESS | QKEY, |q| {
        q.u32(A, 1).u8(A + 45, 1)
    });
    assert_eq!(r.err(), 22);
    to_init_rc(&h, qp.handle);
    // SQ_PSN belongs to RTR→RTS.
    assert_eq!(h.modify_qp(qp.handle, RTR_MASK | SQ_PSN, rtr_req).err(), 22);
}

#[test]
fn rc_rtr_requires_grh() {
    let (h, qp) = setup(2);
    to_init_rc(&h, qp.handle);
    let r = h.modify_qp(qp.handle, RTR_MASK, |q| rtr_req(q).u8(A + 80 + 31, 0));
    assert_eq!(r.err(), 22);
    assert_eq!(state(&h, qp.handle), 1);
}

#[test]
fn illegal_transitions_and_out_of_scope_states_are_rejected() {
    let (h, qp) = setup(2);
    assert_eq!(h.modify_qp(qp.handle, RTR_MASK, rtr_req).err(), 22); // RESET→RTR
    h.rc_to_rts(qp.handle, 1);
    assert_eq!(
        h.modify_qp(qp.handle, STATE | PKEY | PORT | ACCESS, |q| q
            .u32(A, 1)
            .u8(A + 45, 1))
            .err(),
        22
    );
    assert_eq!(h.modify_qp(qp.handle, STATE, |q| q.u32(A, 4)).err(), 22); // SQD
    assert_eq!(h.modify_qp(qp.handle, STATE, |q| q.u32(A, 5)).err(), 22); // SQE
    assert_eq!(h.modify_qp(qp.handle, STATE, |q| q.u32(A, 9)).err(), 22);
    assert_eq!(state(&h, qp.handle), 3);
    // RTS→RTS with an optional attribute and no STATE bit.
    assert_eq!(
        h.modify_qp(qp.handle, MIN_RNR, |q| q.u8(A + 44, 20)).err(),
        0
    );
    assert_eq!(
        h.cmd_ok(&Req::new(11).u32(16, qp.handle)).bytes[16 + 44],
        20
    );
    // → ERR and ERR → RESET always allowed, with no attributes.
    assert_eq!(
        h.modify_qp(qp.handle, STATE | PKEY, |q| q.u32(A, 6)).err(),
        22
    );
    assert_eq!(h.modify_qp(qp.handle, STATE, |q| q.u32(A, 6)).err(), 0);
    assert_eq!(state(&h, qp.handle), 6);
    assert_eq!(h.modify_qp(qp.handle, STATE, |q| q.u32(A, 0)).err(), 0);
    assert_eq!(state(&h, qp.handle), 0);
    assert_eq!(h.modify_qp(99, STATE, |q| q.u32(A, 6)).err(), 2);
}

#[test]
fn attribute_values_are_range_checked() {
    let (h, qp) = setup(2);
    let init = STATE | PKEY | PORT | ACCESS;
    assert_eq!(
        h.modify_qp(qp.handle, init, |q| q.u32(A, 1).u8(A + 45, 2))
            .err(),
        22
    );
    assert_eq!(
        h.modify_qp(qp.handle, init, |q| q.u32(A, 1).u8(A + 45, 0))
            .err(),
        22
    );
    assert_eq!(
        h.modify_qp(qp.handle, init, |q| q
            .u32(A, 1)
            .u8(A + 45, 1)
            .u16(A + 36, 1))
            .err(),
        22
    );
    to_init_rc(&h, qp.handle);
    assert_eq!(
        h.modify_qp(qp.handle, RTR_MASK, |q| rtr_req(q).u8(A + 44, 32))
            .err(),
        22
    );
    assert_eq!(
        h.modify_qp(qp.handle, RTR_MASK, |q| rtr_req(q).u32(A + 8, 6))
            .err(),
        22
    );
}

#[test]
fn ud_and_gsi_use_their_own_required_attributes() {
    let (h, ud) = setup(4);
    assert_eq!(
        h.modify_qp(ud.handle, STATE | PKEY | PORT, |q| q
            .u32(A, 1)
            .u8(A + 45, 1))
            .err(),
        22
    );
    assert_eq!(
        h.modify_qp(ud.handle, STATE | PKEY | PORT | QKEY, |q| q
            .u32(A, 1)
            .u8(A + 45, 1)
            .u32(A + 16, 0x1111))
            .err(),
        0
    );
    assert_eq!(h.modify_qp(ud.handle, STATE, |q| q.u32(A, 2)).err(), 0);
    assert_eq!(h.modify_qp(ud.handle, STATE, |q| q.u32(A, 3)).err(), 22);
    assert_eq!(
        h.modify_qp(ud.handle, STATE | SQ_PSN, |q| q.u32(A, 3))
            .err(),
        0
    );
    assert_eq!(state(&h, ud.handle), 3);

    let (h, gsi) = setup(1);
    // GSI: PORT is neither required nor optional.
    assert_eq!(
        h.modify_qp(gsi.handle, STATE | PKEY | PORT | QKEY, |q| q
            .u32(A, 1)
            .u8(A + 45, 1))
            .err(),
        22
    );
    assert_eq!(
        h.modify_qp(gsi.handle, STATE | PKEY | QKEY, |q| q
            .u32(A, 1)
            .u32(A + 16, 0x8001_0000))
            .err(),
        0
    );
    assert_eq!(
        h.dev
            .with_core(|c| c.qp_info(gsi.handle))
            .unwrap()
            .attr
            .qkey,
        0x8001_0000
    );
}
