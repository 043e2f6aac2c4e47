//! Frames a test puts on the simulated fabric itself, playing a peer the provider talks to.

use pvrdma_sim::wire::bth::BthRepr;
use pvrdma_sim::wire::ext::DethRepr;
use pvrdma_sim::wire::psn::Psn;
use pvrdma_sim::wire::roce::{ExtRepr, RocePacket};

/// The GSI's well-known Q_Key (IBTA 15.4.1), which every CM MAD carries in its DETH.
const QP1_QKEY: u32 = 0x8001_0000;

/// A CM MAD as the peer's QP1 sends it to the host's: a RoCEv2 UD SEND Only (opcode 0x64)
/// from QP1 to QP1, PSN 0, the default P_Key, as Linux's ib_mad posts it.
pub fn qp1_mad_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_gid: [u8; 16],
    dst_gid: [u8; 16],
    mad: &[u8],
) -> Vec<u8> {
    RocePacket {
        src_mac,
        dst_mac,
        vlan: None,
        src_gid,
        dst_gid,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        ip_ident: 0,
        udp_src_port: 0xC000,
        bth: BthRepr {
            opcode: 0x64,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: false,
            psn: Psn::new(0),
        },
        ext: ExtRepr {
            deth: Some(DethRepr {
                qkey: QP1_QKEY,
                src_qp: 1,
            }),
            ..ExtRepr::default()
        },
        payload: mad,
    }
    .emit()
    .expect("a QP1 MAD frame")
}
