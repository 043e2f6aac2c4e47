//! ucmatose's protocol (rdma-core librdmacm/examples/cmatose.c, v44) on the NDK side: several
//! connections to one listener at once, then `count` messages of `size` bytes from the
//! server on every connection, as many replies from the client, and the server disconnects.
//!
//! Each side posts `count` receives on a connection before it connects or accepts, so no
//! message meets an empty receive queue. ucmatose asks for one READ each way and never looks
//! at message contents (its buffers are uninitialised); the NDK side checks every completion's
//! status and length, and fills what it sends with a pattern.

use std::net::SocketAddr;

use pvrdma_ndk::ndkpi::*;

use super::super::ndk::{Cluster, Connector, Cq, Listener, Pd, Qp, QpSpec, Registered, fill, sa};
use super::next_result;

/// ucmatose's default port.
pub const CMATOSE_PORT: u16 = 7471;

const RECV: usize = 0x5200;
const SEND: usize = 0x5300;

/// One connection's objects.
struct Node {
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    qp: Qp,
    mem: Registered,
}

impl Node {
    fn new(c: &Cluster, host: usize, i: usize, count: u32, size: usize) -> Node {
        let a = c.adapter(host);
        let pd = a.create_pd().expect("PD");
        let depth = count.max(1);
        let send_cq = a.create_cq(depth, None).expect("send CQ");
        let recv_cq = a.create_cq(depth, None).expect("receive CQ");
        let spec = QpSpec {
            receive_depth: depth,
            initiator_depth: depth,
            ..QpSpec::new(0xC0 + i)
        };
        let qp = pd.create_qp(&recv_cq, &send_cq, spec).expect("QP");
        // Receive buffers first (one per message), then one send buffer.
        let pages = (size * (count as usize + 1)).div_ceil(4096).max(1);
        // CAST: i < 64.
        let va = 0x6000_0000 + (i as u64) * 0x0100_0000;
        let mem = Registered::new(c.host(host), &pd, pages, va, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        let node = Node {
            pd,
            send_cq,
            recv_cq,
            qp,
            mem,
        };
        for m in 0..count as usize {
            let off = (m * size) as u64;
            // CAST: size ≤ a page run.
            let st = node.qp.receive(RECV + m, &[node.mem.sge(off, size as u32)]);
            assert_eq!(st, STATUS_SUCCESS, "receive {m}");
        }
        node
    }

    fn send_all(&self, c: &Cluster, count: u32, size: usize) {
        let off = count as usize * size;
        fill(&self.mem.mem, off, 0xC3, size);
        for m in 0..count as usize {
            let st = self
                .qp
                .send(SEND + m, &[self.mem.sge(off as u64, size as u32)], 0);
            assert_eq!(st, STATUS_SUCCESS, "send {m}");
        }
        for m in 0..count as usize {
            let r = next_result(c, &self.send_cq, "a send completion");
            assert_eq!(
                (r.Status, r.RequestContext as usize),
                (STATUS_SUCCESS, SEND + m),
                "send {m}"
            );
        }
    }

    fn receive_all(&self, c: &Cluster, count: u32, size: usize) {
        for m in 0..count as usize {
            let r = next_result(c, &self.recv_cq, "a message");
            assert_eq!(
                (
                    r.Status,
                    r.RequestContext as usize,
                    r.BytesTransferred as usize
                ),
                (STATUS_SUCCESS, RECV + m, size),
                "message {m}"
            );
        }
    }

    fn close(self) {
        self.mem.close();
        self.qp.close();
        self.send_cq.close();
        self.recv_cq.close();
        self.pd.close();
    }
}

/// What one NDK ucmatose run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CmatoseReport {
    /// Connections established.
    pub connections: usize,
    /// Messages received, over all connections.
    pub received: u64,
    /// Messages sent, over all connections.
    pub sent: u64,
}

/// The NDK side as ucmatose's client (`ucmatose -s server -c connections -C count -S size`).
pub fn client(
    c: &Cluster,
    host: usize,
    server: SocketAddr,
    connections: usize,
    count: u32,
    size: usize,
) -> CmatoseReport {
    let nodes: Vec<Node> = (0..connections)
        .map(|i| Node::new(c, host, i, count, size))
        .collect();
    let src = sa(c.host(host).ip_for(server.ip()), 0);
    let conns: Vec<Connector> = nodes
        .iter()
        .map(|_| c.adapter(host).create_connector().expect("connector"))
        .collect();
    // Every REQ leaves before the first answer is waited for, as ucmatose resolves all first.
    let pending: Vec<_> = conns
        .iter()
        .zip(&nodes)
        .map(|(conn, n)| conn.connect_raw(&n.qp, src, server, 1, 1, b""))
        .collect();
    for (i, (p, conn)) in pending.iter().zip(&conns).enumerate() {
        assert_eq!(p.wait(), STATUS_SUCCESS, "connection {i}");
        assert_eq!(conn.complete_connect(), STATUS_SUCCESS, "connection {i}");
    }
    for n in &nodes {
        n.receive_all(c, count, size);
    }
    for n in &nodes {
        n.send_all(c, count, size);
    }
    // The server disconnects each connection; answer as ucmatose's disconnect handler does.
    for (i, conn) in conns.iter().enumerate() {
        c.wait_for("the server's disconnect", || conn.disconnects.count() == 1);
        assert_eq!(conn.disconnect(), STATUS_SUCCESS, "connection {i}");
    }
    finish(conns, nodes, connections, count)
}

/// The NDK side as ucmatose's server (`ucmatose` without `-s`), listening before the Linux
/// client starts.
pub struct Server {
    listener: Listener,
    host: usize,
}

impl Server {
    /// Listens on `addr`.
    pub fn listen(c: &Cluster, host: usize, addr: SocketAddr) -> Server {
        let listener = c.adapter(host).create_listener().expect("listener");
        assert_eq!(listener.listen(addr), STATUS_SUCCESS);
        Server { listener, host }
    }

    /// Accepts `connections`, sends `count` messages of `size` bytes on each, receives as many
    /// replies, and disconnects them all.
    pub fn serve(self, c: &Cluster, connections: usize, count: u32, size: usize) -> CmatoseReport {
        let mut conns = Vec::new();
        let mut nodes = Vec::new();
        let mut pending = Vec::new();
        for i in 0..connections {
            let conn = self.listener.next_incoming();
            let n = Node::new(c, self.host, i, count, size);
            pending.push(conn.accept_raw(&n.qp, 1, 1, b""));
            conns.push(conn);
            nodes.push(n);
        }
        for (i, p) in pending.iter().enumerate() {
            assert_eq!(p.wait(), STATUS_SUCCESS, "accept {i}");
        }
        for n in &nodes {
            n.send_all(c, count, size);
        }
        for n in &nodes {
            n.receive_all(c, count, size);
        }
        let parts: Vec<_> = conns.iter().map(Connector::disconnect_raw).collect();
        for (i, p) in parts.iter().enumerate() {
            assert_eq!(p.wait(), STATUS_SUCCESS, "disconnect {i}");
        }
        let report = finish(conns, nodes, connections, count);
        // Last: a listener's close pends until the connectors it delivered are closed.
        assert_eq!(self.listener.close(), STATUS_SUCCESS);
        report
    }
}

fn finish(
    conns: Vec<Connector>,
    nodes: Vec<Node>,
    connections: usize,
    count: u32,
) -> CmatoseReport {
    for conn in conns {
        assert_eq!(conn.close(), STATUS_SUCCESS);
    }
    for n in nodes {
        n.close();
    }
    let msgs = connections as u64 * u64::from(count);
    CmatoseReport {
        connections,
        received: msgs,
        sent: msgs,
    }
}
