//! The CM codecs against the reference, byte for byte: hand-assembled MADs from cm.md §2–§5
//! (IBTA Tables 106–113), every field location of Linux include/rdma/ibta_vol1_c12.h read
//! back through an independent `IBA_GET`, and every malformed buffer rejected without a
//! panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use pvrdma_ndk::cm::WireError;
use pvrdma_ndk::cm::addr::{
    CmaAddrs, CmaHdr, IB_CMA_SERVICE_ID, IB_CMA_SERVICE_ID_MASK, gid_from_ip, ip_from_gid,
    tcp_port, tcp_service_id,
};
use pvrdma_ndk::cm::limits::{ReadLimits, active_effective, passive_offer, rep_limits};
use pvrdma_ndk::cm::msg::{Drep, Dreq, Message, Mra, Rej, Rep, Req, Rtu, parse_any};
use pvrdma_ndk::cm::timing::{ack_timeout, timeout_ns};
use pvrdma_ndk::cm::wire::{MAD_LEN, Mad, attr, new_cm_mad};

const B: usize = 24;

/// xorshift64*: a seeded, reproducible byte source.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn header(attribute: u16, tid: u64) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[0] = 1;
    m[1] = 0x07;
    m[2] = 2;
    m[3] = 0x03;
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&attribute.to_be_bytes());
    m
}

#[test]
fn the_mad_header_is_byte_exact() {
    let mad = new_cm_mad(attr::REQ, 0x0102_0304_0506_0708);
    assert_eq!(
        mad[..24],
        [
            1, 0x07, 2, 0x03, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x10, 0, 0, 0, 0, 0, 0
        ]
    );
    assert!(mad[24..].iter().all(|&b| b == 0));
    let m = Mad::new_checked(&mad[..]).unwrap();
    assert_eq!(
        (
            m.base_version(),
            m.mgmt_class(),
            m.class_version(),
            m.method()
        ),
        (1, 7, 2, 3)
    );
    assert_eq!(m.transaction_id(), 0x0102_0304_0506_0708);
    assert_eq!(m.attribute_id(), 0x0010);
    assert_eq!(
        (m.status(), m.class_specific(), m.attribute_modifier()),
        (0, 0, 0)
    );
}

/// The REQ a Linux rdma_cm active side sends on RoCEv2 (cm.md §3.2's last column), with
/// distinct values in every field so that a misplaced bit shows.
fn hand_req() -> [u8; MAD_LEN] {
    let mut m = header(0x0010, 0x0000_0042_1122_3344);
    let b = &mut m[B..];
    b[0..4].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]); // Local Comm ID
    b[8..16].copy_from_slice(&[0, 0, 0, 0, 0x01, 0x06, 0x01, 0xBD]); // SID, port 445
    b[16..24].copy_from_slice(&[0x00, 0x02, 0xC9, 0x03, 0x00, 0xAA, 0xBB, 0xCC]); // CA GUID
    b[32..36].copy_from_slice(&[0x00, 0x01, 0x23, 0x10]); // QPN 0x123, responder res 16
    b[36..40].copy_from_slice(&[0x00, 0x00, 0x00, 0x08]); // EECN 0, initiator depth 8
    b[43] = (20 << 3) | 1; // remote CM response timeout 20, RC, E2E flow control
    b[44..48].copy_from_slice(&[0xAB, 0xCD, 0xEF, (20 << 3) | 7]); // PSN, local timeout 20, retry 7
    b[48..50].copy_from_slice(&[0xFF, 0xFF]); // P_Key
    b[50] = (3 << 4) | 6; // MTU 1024, no RDC, RNR retry 6
    b[51] = (15 << 4) | 0x08; // Max CM Retries 15, SRQ
    b[52..56].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]); // LIDs
    b[56..72].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 168, 1, 10]);
    b[72..88].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 168, 1, 20]);
    b[88..92].copy_from_slice(&[0x12, 0x34, 0x50, 0x10]); // flow label 0x12345, rate 16
    b[92] = 0x20; // traffic class
    b[93] = 64; // hop limit
    b[94] = (5 << 4) | 0x08; // SL 5, subnet local
    b[95] = 19 << 3; // local ACK timeout 19
    b[139] = 0x04; // SAP supported
    // cma_hdr: version 0, IPv4, source port 0xC001, 192.168.1.10 -> 192.168.1.20, then data
    b[140..144].copy_from_slice(&[0x00, 0x40, 0xC0, 0x01]);
    b[156..160].copy_from_slice(&[192, 168, 1, 10]);
    b[172..176].copy_from_slice(&[192, 168, 1, 20]);
    b[176..181].copy_from_slice(b"hello");
    m
}

#[test]
fn req_setters_assemble_the_hand_vector_and_getters_read_it_back() {
    let want = hand_req();
    let mut got = new_cm_mad(attr::REQ, 0x0000_0042_1122_3344);
    let mut r = Req::new_unchecked(&mut got[..]);
    r.set_local_comm_id(0x1122_3344);
    r.set_service_id(tcp_service_id(445));
    r.set_local_ca_guid(0x0002_C903_00AA_BBCC);
    r.set_local_qpn(0x123);
    r.set_responder_resources(16);
    r.set_initiator_depth(8);
    r.set_remote_cm_response_timeout(20);
    r.set_transport_service_type(0);
    r.set_end_to_end_flow_control(1);
    r.set_starting_psn(0xAB_CDEF);
    r.set_local_cm_response_timeout(20);
    r.set_retry_count(7);
    r.set_pkey(0xFFFF);
    r.set_path_mtu(3);
    r.set_rnr_retry_count(6);
    r.set_max_cm_retries(15);
    r.set_srq(1);
    r.set_primary_local_lid(0xFFFF);
    r.set_primary_remote_lid(0xFFFF);
    r.set_primary_local_gid(gid_from_ip(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10))));
    r.set_primary_remote_gid(gid_from_ip(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20))));
    r.set_primary_flow_label(0x12345);
    r.set_primary_packet_rate(16);
    r.set_primary_traffic_class(0x20);
    r.set_primary_hop_limit(64);
    r.set_primary_sl(5);
    r.set_primary_subnet_local(1);
    r.set_primary_local_ack_timeout(19);
    r.set_sap_supported(1);
    let addrs = CmaAddrs {
        src: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)), 0xC001),
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20)),
    };
    let mut pd = [0u8; 92];
    CmaHdr::new_unchecked(&mut pd[..]).emit(&addrs).unwrap();
    pd[36..41].copy_from_slice(b"hello");
    r.set_private_data(&pd).unwrap();
    assert_eq!(got[..], want[..], "REQ bytes");

    let r = Req::new_checked(&want[..]).unwrap();
    assert_eq!(r.mad().transaction_id(), 0x0000_0042_1122_3344);
    assert_eq!(r.local_comm_id(), 0x1122_3344);
    assert_eq!(r.vendor_id(), 0);
    assert_eq!(r.service_id(), 0x0000_0000_0106_01BD);
    assert_eq!(r.local_ca_guid(), 0x0002_C903_00AA_BBCC);
    assert_eq!(r.local_qkey(), 0);
    assert_eq!((r.local_qpn(), r.responder_resources()), (0x123, 16));
    assert_eq!((r.local_eecn(), r.initiator_depth()), (0, 8));
    assert_eq!(r.remote_eecn(), 0);
    assert_eq!(
        (
            r.remote_cm_response_timeout(),
            r.transport_service_type(),
            r.end_to_end_flow_control()
        ),
        (20, 0, 1)
    );
    assert_eq!(r.starting_psn(), 0xAB_CDEF);
    assert_eq!((r.local_cm_response_timeout(), r.retry_count()), (20, 7));
    assert_eq!(r.pkey(), 0xFFFF);
    assert_eq!(
        (r.path_mtu(), r.rdc_exists(), r.rnr_retry_count()),
        (3, 0, 6)
    );
    assert_eq!(
        (r.max_cm_retries(), r.srq(), r.extended_transport_type()),
        (15, 1, 0)
    );
    assert_eq!(
        (r.primary_local_lid(), r.primary_remote_lid()),
        (0xFFFF, 0xFFFF)
    );
    assert_eq!(
        ip_from_gid(r.primary_local_gid()),
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10))
    );
    assert_eq!(
        ip_from_gid(r.primary_remote_gid()),
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20))
    );
    assert_eq!(
        (r.primary_flow_label(), r.primary_packet_rate()),
        (0x12345, 16)
    );
    assert_eq!(
        (r.primary_traffic_class(), r.primary_hop_limit()),
        (0x20, 64)
    );
    assert_eq!((r.primary_sl(), r.primary_subnet_local()), (5, 1));
    assert_eq!(r.primary_local_ack_timeout(), 19);
    assert_eq!((r.alternate_local_lid(), r.sap_supported()), (0, 1));
    let hdr = CmaHdr::new_checked(r.private_data()).unwrap();
    assert_eq!(hdr.addrs().unwrap(), addrs);
    assert_eq!(hdr.payload().len(), 56);
    assert_eq!(&hdr.payload()[..6], b"hello\0");
}

#[test]
fn rep_setters_assemble_the_hand_vector() {
    let mut want = header(0x0013, 0x0000_0042_1122_3344);
    let b = &mut want[B..];
    b[0..4].copy_from_slice(&[0xA1, 0xB2, 0xC3, 0xD4]);
    b[4..8].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]);
    b[12..16].copy_from_slice(&[0x00, 0x04, 0x56, 0x00]); // QPN 0x456, vendor byte 0
    b[20..24].copy_from_slice(&[0x12, 0x34, 0x56, 0x00]); // PSN
    b[24] = 4; // responder resources
    b[25] = 2; // initiator depth
    b[26] = (17 << 3) | 1; // target ACK delay 17, failover 0, E2E 1
    b[27] = (7 << 5) | 0x10; // RNR retry 7, SRQ
    b[28..36].copy_from_slice(&0x0050_5600_0011_2233u64.to_be_bytes());
    b[36..39].copy_from_slice(b"rep");
    let mut got = new_cm_mad(attr::REP, 0x0000_0042_1122_3344);
    let mut r = Rep::new_unchecked(&mut got[..]);
    r.set_local_comm_id(0xA1B2_C3D4);
    r.set_remote_comm_id(0x1122_3344);
    r.set_local_qpn(0x456);
    r.set_starting_psn(0x12_3456);
    r.set_responder_resources(4);
    r.set_initiator_depth(2);
    r.set_target_ack_delay(17);
    r.set_end_to_end_flow_control(1);
    r.set_rnr_retry_count(7);
    r.set_srq(1);
    r.set_local_ca_guid(0x0050_5600_0011_2233);
    r.set_private_data(b"rep").unwrap();
    assert_eq!(got[..], want[..], "REP bytes");
    let r = Rep::new_checked(&want[..]).unwrap();
    assert_eq!(
        (r.local_comm_id(), r.remote_comm_id(), r.local_qkey()),
        (0xA1B2_C3D4, 0x1122_3344, 0)
    );
    assert_eq!(
        (r.local_qpn(), r.local_eecn(), r.starting_psn()),
        (0x456, 0, 0x12_3456)
    );
    assert_eq!((r.responder_resources(), r.initiator_depth()), (4, 2));
    assert_eq!(
        (
            r.target_ack_delay(),
            r.failover_accepted(),
            r.end_to_end_flow_control()
        ),
        (17, 0, 1)
    );
    assert_eq!((r.rnr_retry_count(), r.srq()), (7, 1));
    assert_eq!(r.local_ca_guid(), 0x0050_5600_0011_2233);
    assert_eq!(r.private_data().len(), 196);
    assert_eq!(&r.private_data()[..4], b"rep\0");
}

#[test]
fn the_short_messages_are_byte_exact() {
    // RTU (T111)
    let mut want = header(0x0014, 7);
    want[B..B + 8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let mut got = new_cm_mad(attr::RTU, 7);
    let mut m = Rtu::new_unchecked(&mut got[..]);
    m.set_local_comm_id(0x0102_0304);
    m.set_remote_comm_id(0x0506_0708);
    assert_eq!(got[..], want[..], "RTU");
    assert_eq!(
        Rtu::new_checked(&want[..]).unwrap().private_data().len(),
        224
    );

    // MRA (T107): MRAed 1 (REP) in the top 2 bits of byte 8, service timeout 24 in 9/0xF8
    let mut want = header(0x0011, 7);
    want[B..B + 10].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0x40, 24 << 3]);
    let mut got = new_cm_mad(attr::MRA, 7);
    let mut m = Mra::new_unchecked(&mut got[..]);
    m.set_local_comm_id(0x0102_0304);
    m.set_remote_comm_id(0x0506_0708);
    m.set_message_mraed(1);
    m.set_service_timeout(24);
    assert_eq!(got[..], want[..], "MRA");
    let m = Mra::new_checked(&want[..]).unwrap();
    assert_eq!((m.message_mraed(), m.service_timeout()), (1, 24));
    assert_eq!(m.private_data().len(), 222);

    // REJ (T108): MsgREJected 2 (other) in 8/0xC0, info length 8 in 9/0xFE, reason 4 @10,
    // ARI = CA GUID @12, private data @84
    let mut want = header(0x0012, 7);
    want[B..B + 12].copy_from_slice(&[0, 0, 0, 0, 5, 6, 7, 8, 0x80, 8 << 1, 0x00, 0x04]);
    want[B + 12..B + 20].copy_from_slice(&0x0002_C903_00AA_BBCCu64.to_be_bytes());
    want[B + 84..B + 86].copy_from_slice(b"no");
    let mut got = new_cm_mad(attr::REJ, 7);
    let mut m = Rej::new_unchecked(&mut got[..]);
    m.set_remote_comm_id(0x0506_0708);
    m.set_message_rejected(2);
    m.set_reason(4);
    m.set_ari(&0x0002_C903_00AA_BBCCu64.to_be_bytes()).unwrap();
    m.set_private_data(b"no").unwrap();
    assert_eq!(got[..], want[..], "REJ");
    let m = Rej::new_checked(&want[..]).unwrap();
    assert_eq!(
        (
            m.local_comm_id(),
            m.remote_comm_id(),
            m.message_rejected(),
            m.reason()
        ),
        (0, 0x0506_0708, 2, 4)
    );
    assert_eq!(m.ari(), &0x0002_C903_00AA_BBCCu64.to_be_bytes());
    assert_eq!(m.private_data().len(), 148);

    // DREQ (T112): Remote QPN in the top 24 bits of dword 8
    let mut want = header(0x0015, 7);
    want[B..B + 12].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x04, 0x56, 0x00]);
    let mut got = new_cm_mad(attr::DREQ, 7);
    let mut m = Dreq::new_unchecked(&mut got[..]);
    m.set_local_comm_id(0x0102_0304);
    m.set_remote_comm_id(0x0506_0708);
    m.set_remote_qpn(0x456);
    assert_eq!(got[..], want[..], "DREQ");
    let m = Dreq::new_checked(&want[..]).unwrap();
    assert_eq!(m.remote_qpn(), 0x456);
    assert_eq!(m.private_data().len(), 220);

    // DREP (T113)
    let mut want = header(0x0016, 7);
    want[B..B + 8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let mut got = new_cm_mad(attr::DREP, 7);
    let mut m = Drep::new_unchecked(&mut got[..]);
    m.set_local_comm_id(0x0102_0304);
    m.set_remote_comm_id(0x0506_0708);
    assert_eq!(got[..], want[..], "DREP");
    assert_eq!(
        Drep::new_checked(&want[..]).unwrap().private_data().len(),
        224
    );
}

/// Linux `IBA_GET` for a field `CM_FIELD_BLOC(struct, byte_offset, bits_offset, width)`
/// (iba.h): the big-endian dword at the body offset rounded down to 4, masked with
/// GENMASK(31 - (off % 4) * 8 - bits, 32 - (off % 4) * 8 - bits - width).
fn iba_get(mad: &[u8], byte_offset: usize, bits_offset: u32, width: u32) -> u64 {
    let off = B + byte_offset;
    if width == 64 {
        return u64::from_be_bytes(mad[off..off + 8].try_into().unwrap());
    }
    let dword = u32::from_be_bytes(mad[off & !3..(off & !3) + 4].try_into().unwrap());
    let high = 31 - (off as u32 % 4) * 8 - bits_offset;
    let low = high + 1 - width;
    let mask = if width == 32 {
        u32::MAX
    } else {
        ((1u32 << width) - 1) << low
    };
    u64::from((dword & mask) >> low)
}

/// Sets one field through the view and checks that Linux's location of the field reads the
/// value and that no other byte of the MAD changed.
fn check_field(
    name: &str,
    attribute: u16,
    loc: (usize, u32, u32),
    set: &dyn Fn(&mut [u8], u64),
    get: &dyn Fn(&[u8]) -> u64,
) {
    let (byte_offset, bits_offset, width) = loc;
    let value = if width == 64 {
        0x8123_4567_89AB_CDEF
    } else {
        // Both edge bits set, so a field one bit off shows.
        (1u64 << (width - 1)) | 1 | (0x5555_5555 & ((1u64 << width) - 1))
    };
    for background in [0x00u8, 0xFF] {
        let mut mad = new_cm_mad(attribute, 0);
        mad[B..].fill(background);
        let before = mad;
        set(&mut mad, value);
        assert_eq!(
            iba_get(&mad, byte_offset, bits_offset, width),
            value,
            "{name}"
        );
        assert_eq!(get(&mad), value, "{name}: getter");
        // Clearing it back restores the background outside the field.
        let mut cleared = mad;
        let bg = iba_get(&before, byte_offset, bits_offset, width);
        set(&mut cleared, bg);
        assert_eq!(cleared, before, "{name}: only its own bits move");
    }
}

macro_rules! linux_fields {
    ($view:ident, $attr:expr, $( $name:literal $get:ident $set:ident ($off:expr, $bits:expr, $w:expr) as $t:ty ),* $(,)?) => {
        $(
            check_field(
                $name,
                $attr,
                ($off, $bits, $w),
                &|b, v| $view::new_unchecked(b).$set(v as $t),
                &|b| $view::new_unchecked(b).$get() as u64,
            );
        )*
    };
}

#[test]
fn every_field_sits_where_linux_ibta_vol1_c12_puts_it() {
    linux_fields!(Req, attr::REQ,
        "CM_REQ_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_REQ_SERVICE_ID" service_id set_service_id (8, 0, 64) as u64,
        "CM_REQ_LOCAL_CA_GUID" local_ca_guid set_local_ca_guid (16, 0, 64) as u64,
        "CM_REQ_LOCAL_Q_KEY" local_qkey set_local_qkey (28, 0, 32) as u32,
        "CM_REQ_LOCAL_QPN" local_qpn set_local_qpn (32, 0, 24) as u32,
        "CM_REQ_RESPONDER_RESOURCES" responder_resources set_responder_resources (35, 0, 8) as u8,
        "CM_REQ_LOCAL_EECN" local_eecn set_local_eecn (36, 0, 24) as u32,
        "CM_REQ_INITIATOR_DEPTH" initiator_depth set_initiator_depth (39, 0, 8) as u8,
        "CM_REQ_REMOTE_EECN" remote_eecn set_remote_eecn (40, 0, 24) as u32,
        "CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT" remote_cm_response_timeout set_remote_cm_response_timeout (43, 0, 5) as u8,
        "CM_REQ_TRANSPORT_SERVICE_TYPE" transport_service_type set_transport_service_type (43, 5, 2) as u8,
        "CM_REQ_END_TO_END_FLOW_CONTROL" end_to_end_flow_control set_end_to_end_flow_control (43, 7, 1) as u8,
        "CM_REQ_STARTING_PSN" starting_psn set_starting_psn (44, 0, 24) as u32,
        "CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT" local_cm_response_timeout set_local_cm_response_timeout (47, 0, 5) as u8,
        "CM_REQ_RETRY_COUNT" retry_count set_retry_count (47, 5, 3) as u8,
        "CM_REQ_PARTITION_KEY" pkey set_pkey (48, 0, 16) as u16,
        "CM_REQ_PATH_PACKET_PAYLOAD_MTU" path_mtu set_path_mtu (50, 0, 4) as u8,
        "CM_REQ_RDC_EXISTS" rdc_exists set_rdc_exists (50, 4, 1) as u8,
        "CM_REQ_RNR_RETRY_COUNT" rnr_retry_count set_rnr_retry_count (50, 5, 3) as u8,
        "CM_REQ_MAX_CM_RETRIES" max_cm_retries set_max_cm_retries (51, 0, 4) as u8,
        "CM_REQ_SRQ" srq set_srq (51, 4, 1) as u8,
        "CM_REQ_EXTENDED_TRANSPORT_TYPE" extended_transport_type set_extended_transport_type (51, 5, 3) as u8,
        "CM_REQ_PRIMARY_LOCAL_PORT_LID" primary_local_lid set_primary_local_lid (52, 0, 16) as u16,
        "CM_REQ_PRIMARY_REMOTE_PORT_LID" primary_remote_lid set_primary_remote_lid (54, 0, 16) as u16,
        "CM_REQ_PRIMARY_FLOW_LABEL" primary_flow_label set_primary_flow_label (88, 0, 20) as u32,
        "CM_REQ_PRIMARY_PACKET_RATE" primary_packet_rate set_primary_packet_rate (91, 2, 6) as u8,
        "CM_REQ_PRIMARY_TRAFFIC_CLASS" primary_traffic_class set_primary_traffic_class (92, 0, 8) as u8,
        "CM_REQ_PRIMARY_HOP_LIMIT" primary_hop_limit set_primary_hop_limit (93, 0, 8) as u8,
        "CM_REQ_PRIMARY_SL" primary_sl set_primary_sl (94, 0, 4) as u8,
        "CM_REQ_PRIMARY_SUBNET_LOCAL" primary_subnet_local set_primary_subnet_local (94, 4, 1) as u8,
        "CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT" primary_local_ack_timeout set_primary_local_ack_timeout (95, 0, 5) as u8,
        "CM_REQ_ALTERNATE_LOCAL_PORT_LID" alternate_local_lid set_alternate_local_lid (96, 0, 16) as u16,
        "CM_REQ_SAP_SUPPORTED" sap_supported set_sap_supported (139, 5, 1) as u8,
    );
    linux_fields!(Mra, attr::MRA,
        "CM_MRA_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_MRA_REMOTE_COMM_ID" remote_comm_id set_remote_comm_id (4, 0, 32) as u32,
        "CM_MRA_MESSAGE_MRAED" message_mraed set_message_mraed (8, 0, 2) as u8,
        "CM_MRA_SERVICE_TIMEOUT" service_timeout set_service_timeout (9, 0, 5) as u8,
    );
    linux_fields!(Rej, attr::REJ,
        "CM_REJ_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_REJ_REMOTE_COMM_ID" remote_comm_id set_remote_comm_id (4, 0, 32) as u32,
        "CM_REJ_MESSAGE_REJECTED" message_rejected set_message_rejected (8, 0, 2) as u8,
        "CM_REJ_REJECTED_INFO_LENGTH" rejected_info_length set_rejected_info_length (9, 0, 7) as u8,
        "CM_REJ_REASON" reason set_reason (10, 0, 16) as u16,
    );
    linux_fields!(Rep, attr::REP,
        "CM_REP_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_REP_REMOTE_COMM_ID" remote_comm_id set_remote_comm_id (4, 0, 32) as u32,
        "CM_REP_LOCAL_Q_KEY" local_qkey set_local_qkey (8, 0, 32) as u32,
        "CM_REP_LOCAL_QPN" local_qpn set_local_qpn (12, 0, 24) as u32,
        "CM_REP_LOCAL_EE_CONTEXT_NUMBER" local_eecn set_local_eecn (16, 0, 24) as u32,
        "CM_REP_STARTING_PSN" starting_psn set_starting_psn (20, 0, 24) as u32,
        "CM_REP_RESPONDER_RESOURCES" responder_resources set_responder_resources (24, 0, 8) as u8,
        "CM_REP_INITIATOR_DEPTH" initiator_depth set_initiator_depth (25, 0, 8) as u8,
        "CM_REP_TARGET_ACK_DELAY" target_ack_delay set_target_ack_delay (26, 0, 5) as u8,
        "CM_REP_FAILOVER_ACCEPTED" failover_accepted set_failover_accepted (26, 5, 2) as u8,
        "CM_REP_END_TO_END_FLOW_CONTROL" end_to_end_flow_control set_end_to_end_flow_control (26, 7, 1) as u8,
        "CM_REP_RNR_RETRY_COUNT" rnr_retry_count set_rnr_retry_count (27, 0, 3) as u8,
        "CM_REP_SRQ" srq set_srq (27, 3, 1) as u8,
        "CM_REP_LOCAL_CA_GUID" local_ca_guid set_local_ca_guid (28, 0, 64) as u64,
    );
    linux_fields!(Rtu, attr::RTU,
        "CM_RTU_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_RTU_REMOTE_COMM_ID" remote_comm_id set_remote_comm_id (4, 0, 32) as u32,
    );
    linux_fields!(Dreq, attr::DREQ,
        "CM_DREQ_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_DREQ_REMOTE_COMM_ID" remote_comm_id set_remote_comm_id (4, 0, 32) as u32,
        "CM_DREQ_REMOTE_QPN_EECN" remote_qpn set_remote_qpn (8, 0, 24) as u32,
    );
    linux_fields!(Drep, attr::DREP,
        "CM_DREP_LOCAL_COMM_ID" local_comm_id set_local_comm_id (0, 0, 32) as u32,
        "CM_DREP_REMOTE_COMM_ID" remote_comm_id set_remote_comm_id (4, 0, 32) as u32,
    );
}

#[test]
fn the_gid_and_private_data_windows_sit_where_linux_puts_them() {
    // CM_FIELD_MLOC offsets and sizes: REQ GIDs @56/@72 (128 bits), private data @140
    // (736 bits); REP @36 (1568); REJ ARI @12 (576), data @84 (1184); MRA @10 (1776);
    // RTU/DREP @8 (1792); DREQ @12 (1760).
    let mut m = new_cm_mad(attr::REQ, 0);
    let gid = [0xA5u8; 16];
    Req::new_unchecked(&mut m[..]).set_primary_local_gid(gid);
    Req::new_unchecked(&mut m[..]).set_primary_remote_gid([0x5A; 16]);
    assert_eq!(m[B + 56..B + 72], gid);
    assert_eq!(m[B + 72..B + 88], [0x5A; 16]);
    let windows: [(u16, usize, usize); 7] = [
        (attr::REQ, 140, 736 / 8),
        (attr::REP, 36, 1568 / 8),
        (attr::REJ, 84, 1184 / 8),
        (attr::MRA, 10, 1776 / 8),
        (attr::RTU, 8, 1792 / 8),
        (attr::DREQ, 12, 1760 / 8),
        (attr::DREP, 8, 1792 / 8),
    ];
    for (attribute, off, len) in windows {
        let mut m = new_cm_mad(attribute, 0);
        let full = vec![0xEEu8; len];
        let set = |m: &mut [u8], d: &[u8]| match attribute {
            attr::REQ => Req::new_unchecked(m).set_private_data(d),
            attr::REP => Rep::new_unchecked(m).set_private_data(d),
            attr::REJ => Rej::new_unchecked(m).set_private_data(d),
            attr::MRA => Mra::new_unchecked(m).set_private_data(d),
            attr::RTU => Rtu::new_unchecked(m).set_private_data(d),
            attr::DREQ => Dreq::new_unchecked(m).set_private_data(d),
            _ => Drep::new_unchecked(m).set_private_data(d),
        };
        set(&mut m, &full).unwrap();
        assert!(
            m[B + off..B + off + len].iter().all(|&b| b == 0xEE),
            "{attribute:#x}"
        );
        assert!(
            m[B..B + off].iter().all(|&b| b == 0),
            "{attribute:#x} before"
        );
        assert!(
            m[B + off + len..].iter().all(|&b| b == 0),
            "{attribute:#x} after"
        );
        // One byte over: refused, nothing written.
        let before = m;
        assert_eq!(set(&mut m, &vec![1u8; len + 1]), Err(WireError::TooLong));
        assert_eq!(m, before);
        // Shorter data zero-fills the rest of the window.
        set(&mut m, &[7]).unwrap();
        assert_eq!(m[B + off], 7);
        assert!(m[B + off + 1..B + off + len].iter().all(|&b| b == 0));
    }
    // ARI: 72 bytes at 12, its length in 9/0xFE; a declared length over 72 is clamped.
    let mut m = new_cm_mad(attr::REJ, 0);
    let mut rej = Rej::new_unchecked(&mut m[..]);
    rej.set_ari(&[0xAB; 72]).unwrap();
    assert_eq!(rej.set_ari(&[0; 73]), Err(WireError::TooLong));
    assert_eq!(m[B + 9], 72 << 1);
    assert!(m[B + 12..B + 84].iter().all(|&b| b == 0xAB));
    m[B + 9] = 0xFE; // length 127
    assert_eq!(Rej::new_checked(&m[..]).unwrap().ari().len(), 72);
}

#[test]
fn malformed_mads_are_rejected_with_the_exact_reason() {
    let good = hand_req();
    assert!(matches!(parse_any(&good), Ok(Message::Req(_))));
    assert_eq!(parse_any(&[]), Err(WireError::Truncated));
    assert_eq!(parse_any(&good[..255]), Err(WireError::Truncated));
    assert_eq!(parse_any(&good[..24]), Err(WireError::Truncated));
    let mut long = good.to_vec();
    long.push(0);
    assert_eq!(parse_any(&long), Err(WireError::Oversized));
    assert_eq!(Req::new_checked(&long[..]), Err(WireError::Oversized));
    let with = |at: usize, v: u8| {
        let mut m = good;
        m[at] = v;
        m
    };
    assert_eq!(parse_any(&with(0, 2)), Err(WireError::BaseVersion(2)));
    assert_eq!(parse_any(&with(1, 0x81)), Err(WireError::NotCmClass(0x81)));
    assert_eq!(parse_any(&with(2, 1)), Err(WireError::ClassVersion(1)));
    assert_eq!(parse_any(&with(3, 0x83)), Err(WireError::Method(0x83)));
    assert_eq!(parse_any(&with(3, 0x01)), Err(WireError::Method(0x01)));
    // ClassPortInfo, SIDR, LAP, APR and unknown attributes are not taken.
    for a in [0x0001u16, 0x0017, 0x0018, 0x0019, 0x001A, 0x0020, 0xFFFF] {
        let mut m = good;
        m[16..18].copy_from_slice(&a.to_be_bytes());
        assert_eq!(parse_any(&m), Err(WireError::Unsupported(a)), "{a:#x}");
    }
    // A view refuses another message's MAD.
    assert_eq!(
        Rep::new_checked(&good[..]),
        Err(WireError::Attribute(0x0010))
    );
    assert_eq!(
        Rtu::new_checked(&good[..]),
        Err(WireError::Attribute(0x0010))
    );
    assert_eq!(Mra::new_checked(&good[..254]), Err(WireError::Truncated));
    // Every attribute classifies to its own view.
    let kinds = [
        (attr::REQ, "Req"),
        (attr::MRA, "Mra"),
        (attr::REJ, "Rej"),
        (attr::REP, "Rep"),
        (attr::RTU, "Rtu"),
        (attr::DREQ, "Dreq"),
        (attr::DREP, "Drep"),
    ];
    for (a, name) in kinds {
        let m = new_cm_mad(a, 9);
        let parsed = parse_any(&m).unwrap();
        assert!(format!("{parsed:?}").starts_with(name), "{name}");
        assert_eq!(parsed.transaction_id(), 9);
    }
}

#[test]
fn views_over_short_buffers_read_zero_and_drop_writes() {
    // Unchecked views never panic: reads past the end are 0, writes are dropped.
    let mut short = [0xFFu8; 30];
    let mut r = Req::new_unchecked(&mut short[..]);
    assert_eq!(r.service_id(), 0);
    assert_eq!(r.private_data(), &[] as &[u8]);
    r.set_service_id(1);
    r.set_primary_local_gid([1; 16]);
    assert_eq!(r.set_private_data(&[1]), Ok(()));
    assert_eq!(short, [0xFF; 30]);
    let empty: [u8; 0] = [];
    let rej = Rej::new_unchecked(&empty[..]);
    assert_eq!((rej.reason(), rej.ari().len()), (0, 0));
}

#[test]
fn random_buffers_never_panic() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let good = hand_req();
    let mut accepted = 0;
    for i in 0..20_000 {
        let len = match i % 4 {
            0 => (rng.next() % 300) as usize,
            _ => MAD_LEN,
        };
        let mut buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 2 == 0 && len == MAD_LEN {
            // A valid header over random content reaches every getter.
            buf[..24].copy_from_slice(&good[..24]);
            buf[16..18].copy_from_slice(&(0x10 + (i as u16 % 8)).to_be_bytes());
        }
        if let Ok(m) = parse_any(&buf) {
            accepted += 1;
            let _ = format!("{m:?}");
            if let Message::Req(r) = m {
                let _ = CmaHdr::new_checked(r.private_data()).map(|h| h.addrs());
            }
            if let Message::Rej(r) = m {
                assert!(r.ari().len() <= 72);
            }
        }
    }
    assert!(accepted > 4_000, "{accepted}");
}

#[test]
fn cma_hdr_is_byte_exact_for_both_families() {
    let v4 = CmaAddrs {
        src: "10.0.0.1:49152".parse().unwrap(),
        dst: "10.0.0.2".parse().unwrap(),
    };
    let mut b = [0xFFu8; 36];
    CmaHdr::new_unchecked(&mut b[..]).emit(&v4).unwrap();
    let mut want = [0u8; 36];
    want[..4].copy_from_slice(&[0x00, 0x40, 0xC0, 0x00]);
    want[16..20].copy_from_slice(&[10, 0, 0, 1]);
    want[32..36].copy_from_slice(&[10, 0, 0, 2]);
    assert_eq!(b, want, "IPv4: 12 zero bytes + address, not v4-mapped");
    assert_eq!(CmaHdr::new_checked(&b[..]).unwrap().addrs().unwrap(), v4);

    let v6 = CmaAddrs {
        src: "[fe80::1]:5445".parse().unwrap(),
        dst: "fe80::2".parse().unwrap(),
    };
    CmaHdr::new_unchecked(&mut b[..]).emit(&v6).unwrap();
    let mut want = [0u8; 36];
    want[..4].copy_from_slice(&[0x00, 0x60, 0x15, 0x45]);
    want[4..20].copy_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
    want[20..36].copy_from_slice(&"fe80::2".parse::<Ipv6Addr>().unwrap().octets());
    assert_eq!(b, want, "IPv6 native");
    assert_eq!(CmaHdr::new_checked(&b[..]).unwrap().addrs().unwrap(), v6);

    let mixed = CmaAddrs {
        src: "10.0.0.1:1".parse().unwrap(),
        dst: "fe80::2".parse().unwrap(),
    };
    let before = b;
    assert_eq!(
        CmaHdr::new_unchecked(&mut b[..]).emit(&mixed),
        Err(WireError::AddressFamily)
    );
    assert_eq!(b, before);
    assert_eq!(
        CmaHdr::new_checked(&b[..35]).map(|_| ()),
        Err(WireError::Truncated)
    );
    let mut bad = want;
    bad[0] = 1;
    assert_eq!(
        CmaHdr::new_unchecked(&bad[..]).addrs(),
        Err(WireError::CmaVersion(1))
    );
    let mut bad = want;
    bad[1] = 0x50;
    assert_eq!(
        CmaHdr::new_unchecked(&bad[..]).addrs(),
        Err(WireError::CmaIpVersion(5))
    );
    // Linux reads the IPv4 address from the last 4 bytes and ignores the padding.
    let mut padded = [0u8; 36];
    CmaHdr::new_unchecked(&mut padded[..]).emit(&v4).unwrap();
    padded[4..16].fill(0xFF);
    assert_eq!(CmaHdr::new_unchecked(&padded[..]).addrs().unwrap(), v4);
}

#[test]
fn service_ids_and_gids_follow_rdma_cm() {
    assert_eq!(tcp_service_id(445), 0x0000_0000_0106_01BD);
    assert_eq!(tcp_service_id(5445), 0x0000_0000_0106_1545);
    assert_eq!(tcp_port(0x0000_0000_0106_01BD), Some(445));
    assert_eq!(tcp_port(0x0000_0000_0111_01BD), None, "UDP space");
    assert_eq!(tcp_port(0x0000_0000_013F_01BD), None, "IB space");
    assert_eq!(tcp_port(0x0000_0001_0106_01BD), None);
    assert_eq!(
        tcp_service_id(445) & IB_CMA_SERVICE_ID_MASK,
        IB_CMA_SERVICE_ID
    );
    let v4: IpAddr = "192.0.2.7".parse().unwrap();
    assert_eq!(
        gid_from_ip(v4),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 0, 2, 7]
    );
    assert_eq!(ip_from_gid(gid_from_ip(v4)), v4);
    let v6: IpAddr = "2001:db8::7".parse().unwrap();
    assert_eq!(
        gid_from_ip(v6),
        "2001:db8::7".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(ip_from_gid(gid_from_ip(v6)), v6);
}

#[test]
fn ird_ord_negotiation_follows_the_reference_table() {
    let max = ReadLimits::new(16, 8);
    // REP.responder_resources = min(Accept IRD, MaxInbound, REQ.initiator_depth);
    // REP.initiator_depth = min(Accept ORD, MaxOutbound, REQ.responder_resources).
    let cases = [
        // (accept, req (IRD, ORD)) -> rep
        ((32, 32), (32, 32), (16, 8)), // adapter maxima cap
        ((4, 2), (32, 32), (4, 2)),    // consumer's values
        ((32, 32), (3, 5), (5, 3)),    // peer's ORD caps our IRD, peer's IRD our ORD
        ((0, 0), (8, 8), (0, 0)),
        ((16, 8), (0, 1), (1, 0)), // a peer offering IRD 0 gets no READs from us
        ((255, 255), (255, 255), (16, 8)),
    ];
    for (accept, req, rep) in cases {
        let got = rep_limits(
            ReadLimits::new(accept.0, accept.1),
            max,
            ReadLimits::new(req.0, req.1),
        );
        assert_eq!(got, ReadLimits::new(rep.0, rep.1), "{accept:?} {req:?}");
    }
    // Passive before accept: Inbound = min(REQ.initiator_depth, max); Outbound =
    // min(REQ.responder_resources, max).
    assert_eq!(
        passive_offer(ReadLimits::new(32, 4), max),
        ReadLimits::new(4, 8)
    );
    assert_eq!(
        passive_offer(ReadLimits::new(2, 32), max),
        ReadLimits::new(16, 2)
    );
    // Active after REP: Inbound = REP.initiator_depth; Outbound = REP.responder_resources;
    // each capped by what the REQ asked.
    assert_eq!(
        active_effective(ReadLimits::new(8, 4), ReadLimits::new(3, 2)),
        ReadLimits::new(2, 3)
    );
    assert_eq!(
        active_effective(ReadLimits::new(1, 1), ReadLimits::new(9, 9)),
        ReadLimits::new(1, 1),
        "a bogus REP cannot raise what we asked for"
    );
    // Both sides end up mirror images: our IRD = their ORD.
    let req = ReadLimits::new(12, 6);
    let rep = rep_limits(ReadLimits::new(10, 10), max, req);
    let active = active_effective(req, rep);
    assert_eq!(
        (active.inbound, active.outbound),
        (rep.outbound, rep.inbound)
    );
}

#[test]
fn timeouts_convert_as_linux_does() {
    const MS: u64 = 1_000_000;
    assert_eq!(timeout_ns(20), 4096 * MS);
    assert_eq!(timeout_ns(18), 1024 * MS);
    assert_eq!(timeout_ns(24), 65_536 * MS);
    assert_eq!(timeout_ns(0), MS);
    assert_eq!(timeout_ns(8), MS);
    assert_eq!(timeout_ns(9), 2 * MS);
    assert_eq!(timeout_ns(31), (1 << 23) * MS);
    assert_eq!(timeout_ns(255), (1 << 23) * MS);
    // rdma_cm's REQ per try: 2 x conv(18) + conv(20) = 6144 ms.
    assert_eq!(2 * timeout_ns(18) + timeout_ns(20), 6144 * MS);
    // cm_ack_timeout(d, plt)
    assert_eq!(ack_timeout(0, 18), 19);
    assert_eq!(ack_timeout(15, 18), 19);
    assert_eq!(ack_timeout(18, 18), 20);
    assert_eq!(ack_timeout(19, 18), 20);
    assert_eq!(ack_timeout(20, 18), 21);
    assert_eq!(ack_timeout(25, 18), 25);
    assert_eq!(ack_timeout(31, 31), 31);
    assert_eq!(ack_timeout(255, 255), 31);
}
