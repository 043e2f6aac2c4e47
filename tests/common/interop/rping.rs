//! rping's protocol (rdma-core librdmacm/examples/rping.c, v44) on the NDK side, through the
//! dispatch tables, so a Linux `rping` can be either end.
//!
//! Per ping the client SENDs {start buffer address, rkey, size} (16 bytes, big-endian:
//! `struct rping_rdma_info`); the server RDMA READs the client's start buffer, SENDs 16 bytes
//! ("go ahead"); the client SENDs {sink buffer address, rkey, size}; the server RDMA WRITEs
//! what it read (`strlen + 1` bytes) into the sink and SENDs 16 bytes ("done"); the client
//! compares the sink with the start buffer (`-V`). Every received message must be exactly
//! 16 bytes. rping asks for one READ each way (responder resources and initiator depth 1).

use std::net::SocketAddr;

use pvrdma_ndk::ndkpi::*;

use super::super::ndk::{Cluster, Connector, Cq, Listener, Pd, Qp, QpSpec, Registered, read, sa};
use super::next_result;

/// rping's default port.
pub const RPING_PORT: u16 = 7174;
/// rping's largest `-S` (RPING_BUFSIZE − 1).
pub const RPING_MAX_SIZE: usize = 64 * 1024 - 1;
/// rping's smallest `-S`: sizeof("2147483647") + sizeof("rdma-ping-%d: ").
pub const RPING_MIN_SIZE: usize = 11 + 15;

const QPC: usize = 0x4E50;
const INFO: usize = 16;

/// The start buffer of ping `ping`, as rping's client fills it: "rdma-ping-N: " then
/// letters cycling from `'A' + ping % 58` through 'z', NUL at the end.
pub fn ping_data(ping: u32, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    let text = format!("rdma-ping-{ping}: ");
    // snprintf writes at most size − 1 characters; `cc` is the untruncated length.
    let n = text.len().min(size.saturating_sub(1));
    b[..n].copy_from_slice(&text.as_bytes()[..n]);
    // CAST: ping % 58 < 58.
    let mut c = 65 + (ping % 58) as u8;
    for x in b.iter_mut().take(size).skip(text.len()) {
        *x = c;
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

fn info(addr: u64, rkey: u32, size: u32) -> [u8; INFO] {
    let mut m = [0u8; INFO];
    m[..8].copy_from_slice(&addr.to_be_bytes());
    m[8..12].copy_from_slice(&rkey.to_be_bytes());
    m[12..].copy_from_slice(&size.to_be_bytes());
    m
}

fn parse_info(m: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(m[..8].try_into().unwrap()),
        u32::from_be_bytes(m[8..12].try_into().unwrap()),
        u32::from_be_bytes(m[12..16].try_into().unwrap()),
    )
}

/// The NDK objects of one rping endpoint.
struct Endpoint {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    /// Start buffer (client: read by the server) or the server's rdma buffer.
    data: Registered,
    /// Sink (client: written by the server).
    sink: Registered,
    /// 16-byte send and receive buffers, at offsets 0 and 64 of one page.
    msg: Registered,
}

const SEND_OFF: u64 = 0;
const RECV_OFF: u64 = 64;

impl Endpoint {
    fn new(c: &Cluster, host: usize, size: usize) -> Endpoint {
        let a = c.adapter(host);
        let pd = a.create_pd().expect("PD");
        let cq = a.create_cq(64, None).expect("CQ");
        let qp = pd.create_qp(&cq, &cq, QpSpec::new(QPC)).expect("QP");
        let pages = size.div_ceil(4096);
        let rw = NDK_MR_FLAG_ALLOW_LOCAL_WRITE
            | NDK_MR_FLAG_ALLOW_REMOTE_READ
            | NDK_MR_FLAG_ALLOW_REMOTE_WRITE;
        let h = c.host(host);
        let data = Registered::new(h, &pd, pages, 0x7100_0000, rw);
        let sink = Registered::new(h, &pd, pages, 0x7200_0000, rw);
        let msg = Registered::new(h, &pd, 1, 0x7300_0000, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        Endpoint {
            pd,
            cq,
            qp,
            data,
            sink,
            msg,
        }
    }

    fn post_receive(&self) {
        assert_eq!(
            self.qp
                .receive(RECV_OFF as usize, &[self.msg.sge(RECV_OFF, 64)]),
            STATUS_SUCCESS
        );
    }

    /// Waits for the next completion, which must be `what` with `ctx` and succeed.
    fn expect(&self, c: &Cluster, what: &str, ctx: usize) -> NDK_RESULT {
        let r = next_result(c, &self.cq, what);
        assert_eq!(
            (r.Status, r.RequestContext as usize),
            (STATUS_SUCCESS, ctx),
            "{what}"
        );
        r
    }

    /// A received rping message: exactly 16 bytes (rping's `byte_len` check).
    fn receive_info(&self, c: &Cluster, what: &str) -> [u8; INFO] {
        let r = self.expect(c, what, RECV_OFF as usize);
        assert_eq!(
            r.BytesTransferred, INFO as u32,
            "{what}: rping messages are 16 bytes"
        );
        let m = read(&self.msg.mem, RECV_OFF as usize, INFO);
        self.post_receive();
        m.try_into().unwrap()
    }

    fn send_info(&self, c: &Cluster, m: [u8; INFO]) {
        self.msg.mem.buf.write(SEND_OFF as usize, &m);
        assert_eq!(
            self.qp.send(1, &[self.msg.sge(SEND_OFF, INFO as u32)], 0),
            STATUS_SUCCESS
        );
        self.expect(c, "our SEND", 1);
    }

    fn close(self) {
        self.msg.close();
        self.sink.close();
        self.data.close();
        self.qp.close();
        self.cq.close();
        self.pd.close();
    }
}

/// What an NDK rping run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RpingReport {
    /// Pings completed and verified.
    pub pings: u32,
}

/// The NDK side as rping's client (`rping -c -V -C count -S size`) against `server`.
pub fn client(
    c: &Cluster,
    host: usize,
    server: SocketAddr,
    count: u32,
    size: usize,
) -> RpingReport {
    assert!((RPING_MIN_SIZE..=RPING_MAX_SIZE).contains(&size));
    let e = Endpoint::new(c, host, size);
    e.post_receive();
    let conn = c.adapter(host).create_connector().expect("connector");
    let src = sa(c.host(host).ip_for(server.ip()), 0);
    let st = conn.connect_raw(&e.qp, src, server, 1, 1, b"").wait();
    assert_eq!(st, STATUS_SUCCESS, "NdkConnect to rping's server");
    assert_eq!(conn.complete_connect(), STATUS_SUCCESS);
    // CAST: size ≤ 65535.
    let size32 = size as u32;
    for ping in 0..count {
        let want = ping_data(ping, size);
        e.data.mem.buf.write(0, &want);
        e.send_info(c, info(e.data.mem.va, e.data.mr.remote_token(), size32));
        e.receive_info(c, "the server's go-ahead (its READ is done)");
        e.send_info(c, info(e.sink.mem.va, e.sink.mr.remote_token(), size32));
        e.receive_info(c, "the server's done (its WRITE is done)");
        assert_eq!(
            read(&e.sink.mem, 0, size),
            want,
            "ping {ping}: what the server wrote back differs from what it read"
        );
    }
    assert_eq!(conn.disconnect(), STATUS_SUCCESS);
    let r = next_result(c, &e.cq, "the posted receive, flushed");
    assert_eq!(
        (r.Status, r.RequestContext as usize),
        (STATUS_CANCELLED, RECV_OFF as usize)
    );
    assert_eq!(conn.close(), STATUS_SUCCESS);
    e.close();
    RpingReport { pings: count }
}

/// The NDK side as rping's server (`rping -s`), listening before the Linux client starts.
pub struct Server {
    listener: Listener,
    host: usize,
    size: usize,
}

impl Server {
    /// Listens on `addr` (port [`RPING_PORT`] unless given).
    pub fn listen(c: &Cluster, host: usize, addr: SocketAddr, size: usize) -> Server {
        let listener = c.adapter(host).create_listener().expect("listener");
        assert_eq!(listener.listen(addr), STATUS_SUCCESS);
        Server {
            listener,
            host,
            size,
        }
    }

    /// Serves one client until it disconnects: every ping's READ is checked against rping's
    /// pattern for that ping (the client's buffer size must be this server's `size`).
    pub fn serve(self, c: &Cluster) -> RpingReport {
        let e = Endpoint::new(c, self.host, self.size);
        e.post_receive();
        let conn = self.listener.next_incoming();
        assert_eq!(conn.accept_raw(&e.qp, 1, 1, b"").wait(), STATUS_SUCCESS);
        let mut pings = 0;
        while let Some(start) = self.receive_or_disconnect(c, &e, &conn) {
            let (addr, rkey, len) = parse_info(&start);
            assert_eq!(len as usize, self.size, "the client's buffer size");
            assert_eq!(
                e.qp.read(2, &[e.data.sge(0, len)], addr, rkey, 0),
                STATUS_SUCCESS
            );
            e.expect(c, "our RDMA READ of the client's start buffer", 2);
            let got = read(&e.data.mem, 0, len as usize);
            assert_eq!(got, ping_data(pings, self.size), "ping {pings}'s data");
            e.send_info(c, [0; INFO]);
            let sink = e.receive_info(c, "the client's sink advertisement");
            let (addr, rkey, _) = parse_info(&sink);
            // strlen(rdma_buf) + 1, as rping's server writes.
            let n = got
                .iter()
                .position(|&b| b == 0)
                .map_or(got.len(), |z| z + 1);
            // CAST: n ≤ 65535.
            assert_eq!(
                e.qp.write(3, &[e.data.sge(0, n as u32)], addr, rkey, 0),
                STATUS_SUCCESS
            );
            e.expect(c, "our RDMA WRITE into the client's sink", 3);
            e.send_info(c, [0; INFO]);
            pings += 1;
        }
        assert_eq!(conn.disconnect(), STATUS_SUCCESS);
        let r = next_result(c, &e.cq, "the posted receive, flushed");
        assert_eq!(
            (r.Status, r.RequestContext as usize),
            (STATUS_CANCELLED, RECV_OFF as usize)
        );
        assert_eq!(conn.close(), STATUS_SUCCESS);
        assert_eq!(self.listener.close(), STATUS_SUCCESS);
        e.close();
        RpingReport { pings }
    }

    /// The next start advertisement, or `None` once the client disconnected (NDK tells of it
    /// with the DisconnectEvent; the posted receive is flushed when this side disconnects).
    fn receive_or_disconnect(
        &self,
        c: &Cluster,
        e: &Endpoint,
        conn: &Connector,
    ) -> Option<[u8; INFO]> {
        let mut got = None;
        c.wait_for(
            "the client's next start advertisement or its disconnect",
            || {
                got = e.cq.results(1).pop();
                got.is_some() || conn.disconnects.count() == 1
            },
        );
        let r = got?;
        assert_eq!(
            (r.Status, r.RequestContext as usize, r.BytesTransferred),
            (STATUS_SUCCESS, RECV_OFF as usize, INFO as u32),
            "a 16-byte start advertisement"
        );
        let m = read(&e.msg.mem, RECV_OFF as usize, INFO);
        e.post_receive();
        Some(m.try_into().unwrap())
    }
}
