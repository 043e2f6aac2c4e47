//! A real peer for the kit's hosts: an external wire ([`pvrdma_sim::external::UdpWire`]) joins
//! a QEMU guest's NIC to the fabric, and the host on the wire answers ARP and IPv6 neighbour
//! solicitation for its addresses and learns the guest's MAC from what the guest sends
//! ([`pvrdma_sim::external::NeighbourResponder`] feeding the host's resolver), as a host's IP
//! stack would until the vmxnet3 function gives it one.
//!
//! Clusters for a real peer are built with [`super::ClusterConfig::real_peer`]: real time,
//! addresses from the benchmarking ranges ([`benchmark_addresses`]). Everything stays on the
//! loopback interface.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use pvrdma_ndk::os::net::{AddressResolver, Mac, ResolveError, resolve_done};

use pvrdma_sim::external::{NeighbourResponder, UdpWire, UdpWireConfig};
use pvrdma_sim::wire::Gid;

use super::{Cluster, gid_from_ipv4};

/// Host `i`'s addresses on an external wire: 198.18.0.`i+1` and 2001:2::`i+1`.
pub fn benchmark_addresses(i: u8) -> [IpAddr; 2] {
    let n = i.wrapping_add(1);
    [
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, n)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, u16::from(n))),
    ]
}

/// The RoCEv2 GID of an address (IPv4-mapped for IPv4).
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(a) => gid_from_ipv4(a.octets()),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Where a real peer's NIC is.
#[derive(Clone, Copy, Debug)]
pub struct WireSpec {
    /// The wire's own socket (127.0.0.1, port 0 for any free port).
    pub local: SocketAddr,
    /// The guest's socket (its `-netdev socket,localaddr=`).
    pub peer: SocketAddr,
    /// The guest NIC's MAC.
    pub peer_mac: [u8; 6],
}

impl Cluster {
    /// Joins a real peer to the fabric through an external wire, host `host` answering for
    /// its addresses on it and learning neighbours into its resolver. Closed by
    /// [`Cluster::finish`] (or on drop) before the fabric stops.
    pub fn attach_wire(&self, host: usize, spec: WireSpec) -> Arc<UdpWire> {
        let h = &self.hosts[host];
        let resolver = h
            .resolver
            .clone()
            .expect("a connection-managed cluster: the wire feeds the host's resolver");
        let responder = NeighbourResponder::new(h.mac, h.addresses.clone(), move |ip, mac| {
            // A full table only costs a resolution; the engine reports it.
            let _ = resolver.set_neighbour(ip, mac);
        });
        let wire = UdpWire::attach(
            self.world.fabric(),
            UdpWireConfig {
                local: spec.local,
                peer: spec.peer,
                peer_mac: spec.peer_mac,
            },
            Some(responder),
        )
        .expect("the external wire binds its loopback socket");
        self.wires.lock().unwrap().push(wire.clone());
        wire
    }

    /// Asks the peer on `wire` for `ip`'s MAC on behalf of host `host` (an ARP request or a
    /// neighbour solicitation) and waits until the host's resolver holds the answer: what the
    /// host's IP stack would have done before its first packet to the peer.
    pub fn learn_neighbour(&self, host: usize, wire: &UdpWire, ip: IpAddr) -> Mac {
        let h = &self.hosts[host];
        let resolver = h.resolver.clone().expect("a connection-managed cluster");
        let local = h.ip_for(ip);
        wire.solicit(ip);
        let got: Arc<Mutex<Option<Result<Mac, ResolveError>>>> = Arc::default();
        let g = got.clone();
        let done = resolve_done(move |r| *g.lock().unwrap() = Some(r)).expect("resolution");
        resolver.resolve(local, ip, done);
        let mut out = None;
        self.wait_for(&format!("the peer's answer for {ip}"), || {
            out = got.lock().unwrap().take();
            out.is_some()
        });
        out.unwrap()
            .unwrap_or_else(|e| panic!("{ip} did not resolve: {e:?}"))
    }

    /// Closes every external wire (idempotent).
    pub(super) fn close_wires(&self) {
        let wires = std::mem::take(&mut *self.wires.lock().unwrap_or_else(|p| p.into_inner()));
        for w in wires {
            w.close(self.world.fabric());
        }
    }
}
