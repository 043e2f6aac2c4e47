//! The kit's real-peer mode without a guest: a UDP socket on loopback plays the guest's NIC
//! at the far end of the external wire. The host answers ARP and neighbour solicitation for
//! its addresses, learns the "guest" from them, and its connection engine then reaches the
//! guest over the wire in real time (the REQ arrives as a datagram, framed for the right
//! family, from the host's MAC to the guest's); the host also asks for a neighbour itself.

mod common;
mod ndk_dp;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use common::ndk::{Cluster, ClusterConfig, QpSpec, WireSpec, gid_of, sa};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_sim::wire::RocePacket;
use pvrdma_sim::wire::opcode::UD_SEND_ONLY;

const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x00, 0x00, 0xC8];
const GUEST_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 200);
const GUEST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0xC8);

struct Guest {
    sock: UdpSocket,
    wire: SocketAddr,
}

impl Guest {
    fn recv(&self, want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let mut buf = vec![0u8; 9100];
        loop {
            let (n, from) = self
                .sock
                .recv_from(&mut buf)
                .expect("a frame from the wire");
            assert_eq!(from, self.wire);
            if want(&buf[..n]) {
                return buf[..n].to_vec();
            }
        }
    }
}

fn arp_request(tpa: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0xFF; 6];
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&GUEST_V4.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa.octets());
    f.resize(60, 0);
    f
}

fn ethertype(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[12], f[13]])
}

/// The first REQ the host sends to the guest over the wire, with its frame's family checked.
fn expect_req(g: &Guest, host_gid: [u8; 16], guest: IpAddr) {
    let f = g.recv(|f| ethertype(f) == 0x0800 || ethertype(f) == 0x86DD);
    let p = RocePacket::parse(&f).expect("a RoCEv2 frame");
    assert_eq!(
        (p.dst_mac, p.bth.opcode, p.bth.dest_qp),
        (GUEST_MAC, UD_SEND_ONLY, 1)
    );
    assert_eq!(p.src_gid, host_gid);
    assert_eq!(p.dst_gid, gid_of(guest));
    assert_eq!(ethertype(&f), if guest.is_ipv4() { 0x0800 } else { 0x86DD });
    // CM REQ (attribute 0x0010), its primary remote GID the guest's (cm.md §3.2).
    assert_eq!(&p.payload[16..18], &[0x00, 0x10]);
    assert_eq!(&p.payload[24 + 72..24 + 88], &gid_of(guest));
}

fn connect_over_the_wire(ipv6: bool) {
    let c = Cluster::with(ClusterConfig {
        ipv6,
        ..ClusterConfig::real_peer(1)
    });
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let wire = c.attach_wire(
        0,
        WireSpec {
            local: "127.0.0.1:0".parse().unwrap(),
            peer: sock.local_addr().unwrap(),
            peer_mac: GUEST_MAC,
        },
    );
    let g = Guest {
        sock,
        wire: wire.local_addr().unwrap(),
    };
    let host = c.host(0);
    let (host_v4, guest_ip) = match host.addresses.iter().find(|a| a.is_ipv4()) {
        Some(IpAddr::V4(a)) => (
            *a,
            if ipv6 {
                IpAddr::V6(GUEST_V6)
            } else {
                IpAddr::V4(GUEST_V4)
            },
        ),
        _ => panic!("an IPv4 address on the wire"),
    };
    assert_eq!(host_v4, Ipv4Addr::new(198, 18, 0, 1));

    // The host asks for the guest first: a broadcast ARP request / a solicitation.
    wire.solicit(guest_ip);
    let ask = g.recv(|_| true);
    if ipv6 {
        assert_eq!(&ask[..3], &[0x33, 0x33, 0xFF], "solicited-node multicast");
        assert_eq!(ethertype(&ask), 0x86DD);
    } else {
        assert_eq!((&ask[..6], ethertype(&ask)), (&[0xFF; 6][..], 0x0806));
    }

    // The guest asks for the host: answered with the host's MAC, and the guest is learned.
    if ipv6 {
        let ns = solicitation(host.ip);
        g.sock.send_to(&ns, g.wire).unwrap();
        let na = g.recv(|f| ethertype(f) == 0x86DD && f[14 + 40] == 136);
        assert_eq!(&na[14 + 40 + 26..14 + 40 + 32], &host.mac);
    } else {
        g.sock.send_to(&arp_request(host_v4), g.wire).unwrap();
        let reply = g.recv(|f| ethertype(f) == 0x0806);
        assert_eq!(
            (&reply[..6], &reply[22..28]),
            (&GUEST_MAC[..], &host.mac[..])
        );
    }

    // The engine reaches the learned guest: its REQ leaves over the wire.
    let pd = c.adapter(0).create_pd().unwrap();
    let cq = c.adapter(0).create_cq(16, None).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(QPC_A)).unwrap();
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&qp, sa(host.ip, 0), sa(guest_ip, 9999), 1, 1, b"");
    assert_eq!(connect.inline, STATUS_PENDING);
    expect_req(&g, host.gid, guest_ip);
    // Nobody answers; closing cancels the connect.
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(connect.wait(), STATUS_CANCELLED);
    let counters = wire.counters();
    assert_eq!((counters.rx_bad, counters.answered), (0, 1));
    qp.close();
    cq.close();
    pd.close();
    c.finish();
}

/// The guest's neighbour solicitation for `target` (RFC 4861 §4.3), hop limit 255, with its
/// source link-layer address.
fn solicitation(target: IpAddr) -> Vec<u8> {
    let IpAddr::V6(t) = target else {
        panic!("IPv6 target")
    };
    let t = t.octets();
    let src = GUEST_V6.octets();
    let group: [u8; 16] = [
        0xFF, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xFF, t[13], t[14], t[15],
    ];
    let mut icmp = vec![135u8, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&t);
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(&GUEST_MAC);
    let mut acc: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&src);
    add(&group);
    add(&(icmp.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(&icmp);
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    icmp[2..4].copy_from_slice(&(!(acc as u16)).to_be_bytes());
    let mut f = vec![0x33, 0x33, group[12], group[13], group[14], group[15]];
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&[0x86, 0xDD, 0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&group);
    f.extend_from_slice(&icmp);
    f
}

#[test]
fn ipv4_guest_is_learned_from_arp_and_reached_over_the_wire() {
    connect_over_the_wire(false);
}

#[test]
fn ipv6_guest_is_learned_from_neighbour_discovery_and_reached_over_the_wire() {
    connect_over_the_wire(true);
}
