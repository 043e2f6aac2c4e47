//! Many connections at once between the hosts of a connection-managed cluster, driven the
//! way a server consumer drives them: every NdkConnect issued first, then one loop that
//! accepts each connector its listener's connect-event callback delivered and completes
//! each connect as soon as it completes, noting the virtual time each request completed at.
//! Then one SEND each way on every connection (bytes checked), a graceful disconnect of
//! every connection, and every object closed ([`Mesh::run`]).
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;

use pvrdma_ndk::ndkpi::*;
use pvrdma_sim::ObjectCounts;

use crate::common::ndk::{
    Cluster, Connector, Cq, Listener, Pd, Qp, QpSpec, Registered, Request, engine_live, fill, sa,
    verify,
};

/// Bytes each SEND carries.
pub const SEND_LEN: usize = 500;
/// Per-connection stride in each host's buffer: the SEND's source, then the receive buffer.
const STRIDE: usize = 1024;
/// The host buffer's pages (room for [`MAX_CONNECTIONS`]).
const PAGES: usize = MAX_CONNECTIONS * STRIDE / 4096;
/// Connections a mesh holds at most.
pub const MAX_CONNECTIONS: usize = 128;
/// QPContext of connection `i`'s active QP is `CLIENT_QPC + i`, its passive QP's
/// `SERVER_QPC + i`.
const CLIENT_QPC: usize = 0x10_0000;
const SERVER_QPC: usize = 0x20_0000;

/// What one host brings to every connection: PD, one CQ for every QP, registered memory
/// and, while it listens, a listener.
pub struct Side {
    pub pd: Pd,
    pub cq: Cq,
    pub mem: Registered,
    pub listener: Option<Listener>,
    /// Where the listener listens (its last one's, once it closed).
    pub at: Option<SocketAddr>,
}

impl Side {
    /// PD, CQ and MR of host `h`.
    pub fn new(c: &Cluster, h: usize) -> Side {
        let host = c.host(h);
        let pd = host.adapter.create_pd().expect("NdkCreatePd");
        let cq = host
            .adapter
            .create_cq(4 * MAX_CONNECTIONS as u32, None)
            .expect("NdkCreateCq");
        let va = 0x4000_0000 + ((h as u64) << 28);
        let mem = Registered::new(host, &pd, PAGES, va, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        Side {
            pd,
            cq,
            mem,
            listener: None,
            at: None,
        }
    }

    /// NdkCreateListener and NdkListen on an ephemeral port of host `h`.
    pub fn listen(&mut self, c: &Cluster, h: usize) {
        let host = c.host(h);
        let listener = host.adapter.create_listener().expect("NdkCreateListener");
        assert_eq!(listener.listen(sa(host.ip, 0)), STATUS_SUCCESS, "NdkListen");
        let at = listener.local_address().expect("the listener's address");
        assert_eq!(at.ip(), host.ip);
        assert!(at.port() >= 49152, "an ephemeral port: {at}");
        self.listener = Some(listener);
        self.at = Some(at);
    }

    /// NdkCloseListener.
    pub fn unlisten(&mut self) {
        if let Some(l) = self.listener.take() {
            assert_eq!(l.close(), STATUS_SUCCESS, "NdkCloseListener");
        }
    }

    fn connect_events(&self) -> u32 {
        self.listener.as_ref().map_or(0, |l| l.incoming.calls())
    }

    /// Closes the listener, the memory, the CQ and the PD.
    pub fn close(mut self) {
        self.unlisten();
        drop(self.mem.close());
        assert_eq!(self.cq.close(), STATUS_SUCCESS, "NdkCloseCq");
        assert_eq!(self.pd.close(), STATUS_SUCCESS, "NdkClosePd");
    }
}

/// One connection from host `from` to host `to`'s listener.
pub struct Link {
    pub index: usize,
    pub from: usize,
    pub to: usize,
    pub client: Connector,
    pub client_qp: Qp,
    pub server_qp: Qp,
    pub server: Option<Connector>,
    pub connect: Request,
    pub accept: Option<Request>,
    /// The client's local address (known once its REQ is out).
    pub client_at: Option<SocketAddr>,
    /// Virtual ns: NdkConnect issued, NdkConnect completed, NdkAccept completed.
    pub issued_ns: u64,
    pub connected_ns: Option<u64>,
    pub accepted_ns: Option<u64>,
}

/// Setup times of one connection, in virtual ns from NdkConnect's issue.
#[derive(Clone, Copy, Debug)]
pub struct SetupTime {
    /// To NdkConnect's completion.
    pub connect_ns: u64,
    /// To NdkAccept's completion (the RTU arrived).
    pub accept_ns: u64,
}

/// The connections of one run between hosts' [`Side`]s.
pub struct Mesh {
    pub sides: Vec<Side>,
    pub links: Vec<Link>,
    /// Model object counts of every host before any connection's QP existed.
    pub baseline: Vec<ObjectCounts>,
}

fn qp(side: &Side, context: usize) -> Qp {
    side.pd
        .create_qp(&side.cq, &side.cq, QpSpec::new(context))
        .expect("NdkCreateQp")
}

impl Mesh {
    /// A [`Side`] on each of `hosts` (not listening yet).
    pub fn new(c: &Cluster, hosts: usize) -> Mesh {
        let sides = (0..hosts).map(|h| Side::new(c, h)).collect();
        let baseline = (0..hosts).map(|h| c.host(h).model_objects()).collect();
        Mesh {
            sides,
            links: Vec::new(),
            baseline,
        }
    }

    /// Issues NdkConnect for a connection from host `from` to host `to`'s listener (QPs on
    /// both hosts made for it first). Nothing is waited for.
    pub fn connect(&mut self, c: &Cluster, from: usize, to: usize) {
        let index = self.links.len();
        assert!(index < MAX_CONNECTIONS);
        let client_qp = qp(&self.sides[from], CLIENT_QPC + index);
        let server_qp = qp(&self.sides[to], SERVER_QPC + index);
        let client = c
            .host(from)
            .adapter
            .create_connector()
            .expect("NdkCreateConnector");
        let issued_ns = c.pump().now_ns();
        let src = sa(c.host(from).ip, 0);
        let at = self.sides[to].at.expect("host `to` listens");
        let connect = client.connect_raw(&client_qp, src, at, 8, 8, &[]);
        assert_eq!(connect.inline, STATUS_PENDING, "NdkConnect pends");
        self.links.push(Link {
            index,
            from,
            to,
            client,
            client_qp,
            server_qp,
            server: None,
            connect,
            accept: None,
            client_at: None,
            issued_ns,
            connected_ns: None,
            accepted_ns: None,
        });
    }

    /// Every host listens.
    pub fn listen_all(&mut self, c: &Cluster) {
        for (h, s) in self.sides.iter_mut().enumerate() {
            s.listen(c, h);
        }
    }

    /// No NdkConnect has completed yet and no listener has delivered a connector.
    pub fn assert_all_outstanding(&self) {
        for l in &self.links {
            assert_eq!(
                l.connect.ctx.calls(),
                0,
                "connect {} completed early",
                l.index
            );
        }
        for s in &self.sides {
            assert_eq!(s.connect_events(), 0, "a connect event came early");
        }
    }

    /// The consumer loop: accepts every incoming connector on the QP made for its
    /// connection (matched by the client's address), completes every connect as soon as it
    /// completed, until every NdkConnect and NdkAccept has succeeded.
    pub fn establish(&mut self, c: &Cluster) {
        let pump = c.pump().clone();
        let (links, sides) = (&mut self.links, &self.sides);
        let events_before: Vec<u32> = sides.iter().map(Side::connect_events).collect();
        pump.wait_for("every connection established", || {
            let now = pump.now_ns();
            for l in links.iter_mut() {
                if l.client_at.is_none() {
                    l.client_at = l.client.local_address().ok();
                }
            }
            for (h, side) in sides.iter().enumerate() {
                let Some(listener) = &side.listener else {
                    continue;
                };
                while let Some(server) = listener.try_incoming() {
                    let peer = server.peer_address().expect("the incoming peer's address");
                    let l = links
                        .iter_mut()
                        .find(|l| l.to == h && l.client_at == Some(peer))
                        .unwrap_or_else(|| panic!("no connect from {peer}"));
                    assert!(l.server.is_none(), "a second connect event for {peer}");
                    let accept = server.accept_raw(&l.server_qp, 8, 8, &[]);
                    assert_eq!(accept.inline, STATUS_PENDING, "NdkAccept pends");
                    l.server = Some(server);
                    l.accept = Some(accept);
                }
            }
            for l in links.iter_mut() {
                if l.connected_ns.is_none() && l.connect.ctx.calls() != 0 {
                    assert_eq!(l.connect.wait(), STATUS_SUCCESS, "NdkConnect {}", l.index);
                    l.connected_ns = Some(now);
                    assert_eq!(
                        l.client.complete_connect(),
                        STATUS_SUCCESS,
                        "NdkCompleteConnect {}",
                        l.index
                    );
                }
                if let Some(a) = &l.accept
                    && l.accepted_ns.is_none()
                    && a.ctx.calls() != 0
                {
                    assert_eq!(a.wait(), STATUS_SUCCESS, "NdkAccept {}", l.index);
                    l.accepted_ns = Some(now);
                }
            }
            links
                .iter()
                .all(|l| l.accepted_ns.is_some() && l.connected_ns.is_some())
        });
        for (h, s) in sides.iter().enumerate() {
            assert_eq!(
                (s.connect_events() - events_before[h]) as usize,
                links.iter().filter(|l| l.to == h).count(),
                "host {h}: one connect event per connection"
            );
        }
    }

    /// Setup times, in connection order.
    pub fn setup_times(&self) -> Vec<SetupTime> {
        self.links
            .iter()
            .map(|l| SetupTime {
                connect_ns: l.connected_ns.unwrap() - l.issued_ns,
                accept_ns: l.accepted_ns.unwrap() - l.issued_ns,
            })
            .collect()
    }

    /// One SEND each way on every connection, every byte and every completion checked.
    pub fn transfer(&self, c: &Cluster) {
        let seed = |l: &Link, back: bool| (l.index as u8).wrapping_mul(2).wrapping_add(back as u8);
        let mut want: Vec<Vec<(NTSTATUS, u32, usize, usize)>> = vec![Vec::new(); self.sides.len()];
        let mut data = Vec::new();
        for l in &self.links {
            let (a, b) = (&self.sides[l.from], &self.sides[l.to]);
            let off = l.index * STRIDE;
            let recv = (off + STRIDE / 2) as u64;
            let ab = fill(&a.mem.mem, off, seed(l, false), SEND_LEN);
            let ba = fill(&b.mem.mem, off, seed(l, true), SEND_LEN);
            let (ca, cb) = (CLIENT_QPC + l.index, SERVER_QPC + l.index);
            let len = SEND_LEN as u32;
            assert_eq!(
                l.server_qp.receive(1, &[b.mem.sge(recv, 512)]),
                STATUS_SUCCESS
            );
            assert_eq!(
                l.client_qp.receive(2, &[a.mem.sge(recv, 512)]),
                STATUS_SUCCESS
            );
            assert_eq!(
                l.client_qp.send(3, &[a.mem.sge(off as u64, len)], 0),
                STATUS_SUCCESS
            );
            assert_eq!(
                l.server_qp.send(4, &[b.mem.sge(off as u64, len)], 0),
                STATUS_SUCCESS
            );
            want[l.from].push((STATUS_SUCCESS, len, ca, 2));
            want[l.from].push((STATUS_SUCCESS, 0, ca, 3));
            want[l.to].push((STATUS_SUCCESS, len, cb, 1));
            want[l.to].push((STATUS_SUCCESS, 0, cb, 4));
            data.push((l.to, recv as usize, ab));
            data.push((l.from, recv as usize, ba));
        }
        for (h, side) in self.sides.iter().enumerate() {
            let mut got: Vec<_> = side
                .cq
                .wait_results(want[h].len())
                .iter()
                .map(|r| {
                    (
                        r.Status,
                        r.BytesTransferred,
                        r.QPContext as usize,
                        r.RequestContext as usize,
                    )
                })
                .collect();
            got.sort_by_key(|r| (r.2, r.3));
            want[h].sort_by_key(|r| (r.2, r.3));
            assert_eq!(got, want[h], "host {h}'s completions");
        }
        for (h, off, bytes) in data {
            verify(&self.sides[h].mem.mem, off, &bytes);
        }
        let _ = c;
    }

    /// Graceful disconnect of every connection from its active side: each passive side sees
    /// its DisconnectEvent once and disconnects too; every NdkDisconnect succeeds.
    pub fn disconnect(&self, c: &Cluster) {
        let client: Vec<Request> = self
            .links
            .iter()
            .map(|l| l.client.disconnect_raw())
            .collect();
        for r in &client {
            assert_eq!(r.inline, STATUS_PENDING, "NdkDisconnect pends");
        }
        c.wait_for("every passive side's DisconnectEvent", || {
            self.links
                .iter()
                .all(|l| l.server.as_ref().unwrap().disconnects.count() == 1)
        });
        let server: Vec<Request> = self
            .links
            .iter()
            .map(|l| l.server.as_ref().unwrap().disconnect_raw())
            .collect();
        for (i, r) in client.iter().chain(&server).enumerate() {
            assert_eq!(r.wait(), STATUS_SUCCESS, "NdkDisconnect {i}");
        }
        c.settle();
        for l in &self.links {
            assert_eq!(
                l.client.disconnects.count(),
                0,
                "no DisconnectEvent on the side that left"
            );
            assert_eq!(l.server.as_ref().unwrap().disconnects.count(), 1);
        }
    }

    /// Closes every connector and QP, then checks no connection object, endpoint or device
    /// QP is left; the listeners and the rest of each [`Side`] stay.
    pub fn close_links(&mut self, c: &Cluster) {
        for l in self.links.drain(..) {
            assert_eq!(l.client.close(), STATUS_SUCCESS, "NdkCloseConnector");
            assert_eq!(
                l.server.unwrap().close(),
                STATUS_SUCCESS,
                "NdkCloseConnector"
            );
            assert_eq!(l.client_qp.close(), STATUS_SUCCESS, "NdkCloseQp");
            assert_eq!(l.server_qp.close(), STATUS_SUCCESS, "NdkCloseQp");
        }
        c.settle();
        for (h, base) in self.baseline.iter().enumerate() {
            let (_, conns, listeners, endpoints) = engine_live(c.host(h));
            let listening = usize::from(self.sides[h].listener.is_some());
            assert_eq!(
                (conns, listeners, endpoints),
                (0, listening, listening),
                "host {h}: only a listener and its endpoint are left"
            );
            assert_eq!(c.host(h).model_objects(), *base, "host {h}: device objects");
        }
    }

    /// Closes every side; with virtual time, runs through TIMEWAIT and checks the CM holds
    /// no connection.
    pub fn close(self, c: &Cluster) {
        assert!(self.links.is_empty(), "close_links first");
        for s in self.sides {
            s.close();
        }
        c.settle();
        for h in 0..c.hosts.len() {
            let live = engine_live(c.host(h));
            if c.pump().is_virtual_time() {
                assert_eq!(
                    live,
                    (0, 0, 0, 0),
                    "host {h}: CM connections after TIMEWAIT"
                );
            } else {
                assert_eq!((live.1, live.2, live.3), (0, 0, 0), "host {h}");
            }
        }
    }
}

/// Mean and max of `v`.
pub fn mean_max(v: impl IntoIterator<Item = u64>) -> (f64, u64) {
    let v: Vec<u64> = v.into_iter().collect();
    let sum: u64 = v.iter().sum();
    (
        sum as f64 / v.len().max(1) as f64,
        v.iter().copied().max().unwrap_or(0),
    )
}

/// Connections by client address (for messages).
pub fn by_client(links: &[Link]) -> HashMap<SocketAddr, usize> {
    links
        .iter()
        .filter_map(|l| l.client_at.map(|a| (a, l.index)))
        .collect()
}
