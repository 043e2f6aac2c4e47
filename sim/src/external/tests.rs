use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::fabric::{Fabric, FabricPort};

const HOST_MAC: [u8; 6] = [0x00, 0x50, 0x56, 0, 0, 1];
const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const HOST_V4: [u8; 4] = [198, 18, 0, 1];
const GUEST_V4: [u8; 4] = [198, 18, 0, 2];

fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x00, 0x02]);
    a[15] = last;
    a
}

type Learned = Arc<Mutex<Vec<(IpAddr, [u8; 6])>>>;

fn responder() -> (Arc<NeighbourResponder>, Learned) {
    let learned: Learned = Arc::default();
    let l = learned.clone();
    let r = NeighbourResponder::new(
        HOST_MAC,
        vec![
            IpAddr::V4(Ipv4Addr::from(HOST_V4)),
            IpAddr::V6(Ipv6Addr::from(v6(1))),
        ],
        move |ip, mac| l.lock().unwrap().push((ip, mac)),
    );
    (r, learned)
}

/// The guest's side: an ARP request for `tpa`.
fn arp_request(tpa: [u8; 4]) -> Vec<u8> {
    arp_frame(1, GUEST_MAC, GUEST_V4, [0xFF; 6], tpa)
}

/// ICMPv6 checksum over the pseudo-header of an emitted frame: zero when correct.
fn icmpv6_residue(f: &[u8]) -> u16 {
    let ip = &f[14..];
    let len = u16::from_be_bytes([ip[4], ip[5]]);
    let mut acc = checksum::sum(0, &ip[8..40]);
    acc = checksum::sum(acc, &u32::from(len).to_be_bytes());
    acc = checksum::sum(acc, &[0, 0, 0, 58]);
    acc = checksum::sum(acc, &ip[40..40 + usize::from(len)]);
    checksum::finish(acc)
}

#[test]
fn arp_request_for_the_host_is_answered_with_its_mac_and_the_asker_is_learned() {
    let (r, learned) = responder();
    let reply = r.inbound(&arp_request(HOST_V4)).expect("a reply");
    assert_eq!(reply.len(), 60);
    assert_eq!(&reply[0..6], &GUEST_MAC, "unicast to the asker");
    assert_eq!(&reply[6..12], &HOST_MAC);
    assert_eq!(&reply[12..14], &[0x08, 0x06]);
    let a = &reply[14..];
    assert_eq!(
        &a[..8],
        &[0, 1, 8, 0, 6, 4, 0, 2],
        "Ethernet/IPv4 ARP reply"
    );
    assert_eq!(&a[8..14], &HOST_MAC, "sender hardware address");
    assert_eq!(&a[14..18], &HOST_V4);
    assert_eq!(&a[18..24], &GUEST_MAC);
    assert_eq!(&a[24..28], &GUEST_V4);
    assert_eq!(
        *learned.lock().unwrap(),
        [(IpAddr::V4(Ipv4Addr::from(GUEST_V4)), GUEST_MAC)]
    );
}

#[test]
fn arp_for_another_address_is_not_answered_but_teaches_the_sender() {
    let (r, learned) = responder();
    assert_eq!(r.inbound(&arp_request([198, 18, 0, 9])), None);
    assert_eq!(learned.lock().unwrap().len(), 1);
    // A probe (sender 0.0.0.0) teaches nothing.
    let mut probe = arp_request([198, 18, 0, 9]);
    probe[28..32].copy_from_slice(&[0; 4]);
    assert_eq!(r.inbound(&probe), None);
    assert_eq!(learned.lock().unwrap().len(), 1);
}

#[test]
fn neighbour_solicitation_for_the_host_gets_a_solicited_advertisement() {
    let (r, learned) = responder();
    // The guest's NS, built by the host-side builder with the roles swapped.
    let guest = NeighbourResponder::new(
        GUEST_MAC,
        vec![IpAddr::V6(Ipv6Addr::from(v6(2)))],
        |_, _| {},
    );
    let ns = guest
        .solicitation(IpAddr::V6(Ipv6Addr::from(v6(1))))
        .unwrap();
    assert_eq!(
        &ns[0..6],
        &[0x33, 0x33, 0xFF, 0, 0, 1],
        "solicited-node group"
    );
    assert_eq!(icmpv6_residue(&ns), 0, "NS checksum");
    let na = r.inbound(&ns).expect("an advertisement");
    assert_eq!(icmpv6_residue(&na), 0, "NA checksum");
    assert_eq!(&na[0..6], &GUEST_MAC);
    assert_eq!(&na[6..12], &HOST_MAC);
    let ip = &na[14..];
    assert_eq!((ip[6], ip[7]), (58, 255), "ICMPv6, hop limit 255");
    assert_eq!(&ip[8..24], &v6(1));
    assert_eq!(&ip[24..40], &v6(2));
    let icmp = &ip[40..];
    assert_eq!((icmp[0], icmp[4]), (136, 0x60), "NA, solicited + override");
    assert_eq!(&icmp[8..24], &v6(1));
    assert_eq!(&icmp[24..26], &[2, 1]);
    assert_eq!(&icmp[26..32], &HOST_MAC);
    assert_eq!(
        *learned.lock().unwrap(),
        [(IpAddr::V6(Ipv6Addr::from(v6(2))), GUEST_MAC)]
    );
    // The advertisement teaches whoever receives it the host's MAC.
    let g_learned: Learned = Arc::default();
    let gl = g_learned.clone();
    let g = NeighbourResponder::new(GUEST_MAC, vec![], move |ip, mac| {
        gl.lock().unwrap().push((ip, mac))
    });
    assert_eq!(g.inbound(&na), None);
    assert_eq!(
        *g_learned.lock().unwrap(),
        [(IpAddr::V6(Ipv6Addr::from(v6(1))), HOST_MAC)]
    );
}

#[test]
fn duplicate_address_detection_is_answered_to_all_nodes() {
    let (r, learned) = responder();
    let g = NeighbourResponder::new(
        GUEST_MAC,
        vec![IpAddr::V6(Ipv6Addr::from(v6(2)))],
        |_, _| {},
    );
    let mut ns = g.solicitation(IpAddr::V6(Ipv6Addr::from(v6(1)))).unwrap();
    // DAD: unspecified source, no source link-layer option.
    ns[14 + 8..14 + 24].copy_from_slice(&[0; 16]);
    ns.truncate(ns.len() - 8);
    ns[14 + 5] = 24;
    let na = r.inbound(&ns).expect("a DAD answer");
    assert_eq!(&na[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(na[14 + 40 + 4], 0x20, "override alone");
    assert!(learned.lock().unwrap().is_empty());
}

#[test]
fn malformed_frames_are_ignored() {
    let (r, learned) = responder();
    for f in [
        vec![],
        vec![0u8; 13],
        arp_request(HOST_V4)[..20].to_vec(),
        {
            let mut f = arp_request(HOST_V4);
            f[14 + 5] = 16; // plen 16
            f
        },
    ] {
        assert_eq!(r.inbound(&f), None);
    }
    // An NS with a hop limit other than 255 is not neighbour discovery.
    let g = NeighbourResponder::new(
        GUEST_MAC,
        vec![IpAddr::V6(Ipv6Addr::from(v6(2)))],
        |_, _| {},
    );
    let mut ns = g.solicitation(IpAddr::V6(Ipv6Addr::from(v6(1)))).unwrap();
    ns[14 + 7] = 64;
    assert_eq!(r.inbound(&ns), None);
    // An option claiming more bytes than there are.
    let mut ns = g.solicitation(IpAddr::V6(Ipv6Addr::from(v6(1)))).unwrap();
    let n = ns.len();
    ns[n - 7] = 9;
    assert_eq!(r.inbound(&ns), None, "no link-layer address to answer to");
    assert!(learned.lock().unwrap().is_empty());
}

/// A fabric port that records what it receives.
struct Recorder {
    mac: [u8; 6],
    got: Mutex<Vec<Vec<u8>>>,
}

impl FabricPort for Recorder {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn receive(&self, frame: &[u8], _now_ns: u64) {
        self.got.lock().unwrap().push(frame.to_vec());
    }
}

fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[test]
fn frames_cross_between_the_socket_and_the_fabric_and_arp_is_answered() {
    let fabric = Fabric::new(1);
    let host = Arc::new(Recorder {
        mac: HOST_MAC,
        got: Mutex::new(Vec::new()),
    });
    fabric.attach(host.clone());
    // The guest's socket.
    let guest = UdpSocket::bind(loopback()).unwrap();
    guest
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (r, learned) = responder();
    // Bind the wire on a free port first, then tell it the guest's address.
    let wire = UdpWire::attach(
        &fabric,
        UdpWireConfig {
            local: loopback(),
            peer: guest.local_addr().unwrap(),
            peer_mac: GUEST_MAC,
        },
        Some(r),
    )
    .unwrap();
    let wire_at = wire.local_addr().unwrap();

    // Guest → fabric: a unicast frame to the host's MAC arrives at the host's port.
    let mut frame = HOST_MAC.to_vec();
    frame.extend_from_slice(&GUEST_MAC);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&[0xAB; 50]);
    guest.send_to(&frame, wire_at).unwrap();
    wait("the frame on the fabric", || {
        fabric.run_until_idle();
        !host.got.lock().unwrap().is_empty()
    });
    assert_eq!(host.got.lock().unwrap()[0], frame);

    // Fabric → guest: a frame to the guest's MAC leaves as one datagram.
    let mut back = GUEST_MAC.to_vec();
    back.extend_from_slice(&HOST_MAC);
    back.extend_from_slice(&[0x08, 0x00]);
    back.extend_from_slice(&[0xCD; 70]);
    fabric.transmit(crate::fabric::PortId(0), back.clone());
    fabric.run_until_idle();
    let mut buf = [0u8; 2048];
    let (n, from) = guest.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&back[..], wire_at));

    // ARP from the guest is answered on the wire directly.
    guest.send_to(&arp_request(HOST_V4), wire_at).unwrap();
    let (n, _) = guest.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..6], &GUEST_MAC);
    assert_eq!(&buf[14 + 8..14 + 14], &HOST_MAC);
    assert_eq!(n, 60);
    assert_eq!(learned.lock().unwrap().len(), 1);

    // The host asks for the guest: an ARP request leaves as a broadcast.
    wire.solicit(IpAddr::V4(Ipv4Addr::from(GUEST_V4)));
    let (n, _) = guest.recv_from(&mut buf).unwrap();
    assert_eq!((n, &buf[..6]), (60, &[0xFF; 6][..]));
    assert_eq!(&buf[14 + 24..14 + 28], &GUEST_V4);

    // A runt datagram is counted and dropped.
    guest.send_to(&[1, 2, 3], wire_at).unwrap();
    wait("the runt counted", || wire.counters().rx_bad == 1);
    let c = wire.counters();
    assert_eq!((c.rx_frames, c.answered), (3, 1));
    assert_eq!(c.tx_frames, 3);
    wire.close(&fabric);
}

#[test]
fn the_wire_refuses_addresses_off_the_loopback_interface() {
    let fabric = Fabric::new(1);
    let err = UdpWire::attach(
        &fabric,
        UdpWireConfig {
            local: loopback(),
            peer: SocketAddr::from(([192, 0, 2, 1], 9)),
            peer_mac: GUEST_MAC,
        },
        None,
    )
    .err()
    .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}
