//! The NDK side of `rc_agent` (tools/peer/progs/rc_agent.c): one RC connection to the Linux
//! guest's agent, which the NDK side drives with 64-byte command SENDs over that same
//! connection, for the cases rping and perftest cannot express (SendAndInvalidate toward
//! Linux, RDMA into a fast-registered MR, RNR, sizes to 1 MiB, disconnects, a vanishing peer).
//! Everything goes through the dispatch tables, as a kernel consumer's would.
//!
//! The message layout and the data pattern are rc_agent.c's: [`Msg`] and [`pattern`] must
//! stay byte for byte what the C program builds and checks.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pvrdma_ndk::ndkpi::*;

use super::super::guest::Output;
use super::super::ndk::{Cluster, Connector, Cq, Listener, Pd, Qp, QpSpec, Registered, sa};

/// rc_agent's default port.
pub const AGENT_PORT: u16 = 7480;
/// Commands and replies.
pub const MSG: usize = 64;
/// rc_agent's buffer and receive size by default (`-z`), the largest message.
pub const AGENT_BUF: usize = 1 << 20;

const MAGIC: u32 = 0x5243_4147;

/// rc_agent's ops.
pub mod op {
    /// Agent → NDK at the start: its buffer's address, rkey, size.
    pub const HELLO: u32 = 1;
    /// The next message is a SEND of `len` bytes of pattern(`seed`); `flags & 1`: with
    /// invalidate of `rkey`.
    pub const EXPECT_SEND: u32 = 2;
    /// The agent SENDs `len` bytes of pattern(`seed`) (with invalidate of `rkey` if
    /// `flags & 1`), then replies.
    pub const SEND_ME: u32 = 3;
    /// The agent's buffer at `offset` holds pattern(`seed`) for `len` bytes.
    pub const CHECK: u32 = 4;
    /// The agent fills its buffer at `offset` with pattern(`seed`).
    pub const FILL: u32 = 5;
    /// The agent RDMA WRITEs pattern(`seed`) of `len` bytes to `addr`/`rkey`.
    pub const WRITE: u32 = 6;
    /// The agent RDMA READs `len` bytes at `addr`/`rkey` and checks pattern(`seed`).
    pub const READ: u32 = 7;
    /// The agent binds a type-2 MW over its buffer at `offset`, `len` bytes, remote read
    /// and write; the reply's `addr`/`rkey` name it.
    pub const BIND_MW: u32 = 8;
    /// The agent replies, then disconnects (rdma_disconnect).
    pub const DISCONNECT: u32 = 9;
    /// The agent replies, then waits for the NDK side's disconnect.
    pub const BYE: u32 = 10;
    /// The NDK side's next request breaks the agent's QP (a remote access error there).
    pub const EXPECT_ERROR: u32 = 11;
    /// The agent posts `value` RDMA READs at once, READ i of `len` bytes at `addr + i·len`,
    /// each checked against pattern(`seed + i`).
    pub const READ_MANY: u32 = 12;
}

/// ibv_wc_status values the agent reports (rdma-core libibverbs/verbs.h).
pub mod wc {
    /// IBV_WC_REM_ACCESS_ERR.
    pub const REM_ACCESS_ERR: u32 = 10;
    /// IBV_WC_RNR_RETRY_EXC_ERR.
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

/// Byte `j` of the data pattern `seed` (rc_agent.c `pattern`): no period, so a packet
/// placed at the wrong offset shows.
pub fn pattern_byte(seed: u32, j: u32) -> u8 {
    let mut x = j
        .wrapping_mul(0x9E37_79B1)
        .wrapping_add(seed.wrapping_mul(0x85EB_CA77))
        .wrapping_add(1);
    x ^= x >> 15;
    x = x.wrapping_mul(0x2C1B_3C6D);
    x ^= x >> 13;
    // CAST: the low byte, as the C program's uint8_t conversion.
    x as u8
}

/// `len` bytes of pattern `seed`.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    // CAST: len ≤ 4 GiB in every use.
    (0..len as u32).map(|j| pattern_byte(seed, j)).collect()
}

/// A command or reply (rc_agent.c `struct msg`, big-endian on the wire).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Msg {
    pub op: u32,
    pub addr: u64,
    pub rkey: u32,
    pub len: u32,
    pub seed: u32,
    pub status: u32,
    pub value: u32,
    pub offset: u32,
    pub expect: u32,
    pub flags: u32,
}

impl Msg {
    /// A command `op`.
    pub fn new(op: u32) -> Msg {
        Msg {
            op,
            ..Msg::default()
        }
    }

    /// The 64 bytes on the wire.
    pub fn encode(&self) -> [u8; MSG] {
        let mut b = [0u8; MSG];
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.op.to_be_bytes());
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
        for (at, v) in [
            (16, self.rkey),
            (20, self.len),
            (24, self.seed),
            (28, self.status),
            (32, self.value),
            (36, self.offset),
            (40, self.expect),
            (44, self.flags),
        ] {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        b
    }

    /// Parses 64 bytes; panics on a wrong magic (the agent never sends one).
    pub fn decode(b: &[u8]) -> Msg {
        let u = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        assert_eq!(u(0), MAGIC, "rc_agent message magic: {b:02x?}");
        Msg {
            op: u(4),
            addr: u64::from_be_bytes(b[8..16].try_into().unwrap()),
            rkey: u(16),
            len: u(20),
            seed: u(24),
            status: u(28),
            value: u(32),
            offset: u(36),
            expect: u(40),
            flags: u(44),
        }
    }
}

/// Sizes of one [`Link`].
#[derive(Clone, Copy, Debug)]
pub struct LinkSpec {
    /// Receives posted before connecting (each `recv_size` bytes): the agent's HELLO needs one.
    pub receives: usize,
    /// Bytes per receive buffer.
    pub recv_size: usize,
    /// Bytes of the data buffer (remote read and write) and of the send buffer.
    pub data_size: usize,
    /// IRD (inbound READs) asked for.
    pub ird: u32,
    /// ORD (outbound READs) asked for.
    pub ord: u32,
}

impl LinkSpec {
    /// 4 receives, everything sized for 1 MiB messages, 4 READs each way.
    pub fn full() -> LinkSpec {
        LinkSpec {
            receives: 4,
            recv_size: AGENT_BUF,
            data_size: AGENT_BUF,
            ird: 4,
            ord: 4,
        }
    }

    /// 4 small receives, 64 KiB of data.
    pub fn small() -> LinkSpec {
        LinkSpec {
            receives: 4,
            recv_size: 4096,
            data_size: 64 << 10,
            ird: 4,
            ord: 4,
        }
    }
}

/// Request contexts of the initiator queue (distinct from receive slots, 0x100 and up).
const CTX_SEND: usize = 0x1000;

/// The NDK end of an rc_agent connection.
pub struct Link {
    pub pd: Pd,
    /// Receive completions.
    pub rcq: Cq,
    /// Initiator completions.
    pub icq: Cq,
    pub qp: Qp,
    pub conn: Option<Connector>,
    /// Remote read and write: what the agent reads and writes.
    pub data: Registered,
    /// Receive buffers, `spec.receives` slots of `spec.recv_size`.
    pub rx: Registered,
    /// What this side sends.
    pub tx: Registered,
    pub spec: LinkSpec,
    /// Receive slots posted, in the order they complete.
    posted: VecDeque<usize>,
    next_ctx: usize,
    /// Receive results that arrived while waiting for something else (a flush, say).
    pub host: usize,
}

/// Consumer VAs of a link's memory (per host: one link at a time per case).
const VA_DATA: u64 = 0x4000_0000;
const VA_RX: u64 = 0x5000_0000;
const VA_TX: u64 = 0x6000_0000;

/// What an NDK result said, for messages.
pub fn status_name(s: NTSTATUS) -> String {
    let name = match s {
        STATUS_SUCCESS => "STATUS_SUCCESS",
        STATUS_PENDING => "STATUS_PENDING",
        STATUS_CANCELLED => "STATUS_CANCELLED",
        STATUS_IO_TIMEOUT => "STATUS_IO_TIMEOUT",
        STATUS_ACCESS_VIOLATION => "STATUS_ACCESS_VIOLATION",
        STATUS_REMOTE_RESOURCES => "STATUS_REMOTE_RESOURCES",
        STATUS_CONNECTION_INVALID => "STATUS_CONNECTION_INVALID",
        STATUS_CONNECTION_ABORTED => "STATUS_CONNECTION_ABORTED",
        STATUS_CONNECTION_REFUSED => "STATUS_CONNECTION_REFUSED",
        STATUS_INVALID_DEVICE_REQUEST => "STATUS_INVALID_DEVICE_REQUEST",
        STATUS_BUFFER_OVERFLOW => "STATUS_BUFFER_OVERFLOW",
        STATUS_INTERNAL_ERROR => "STATUS_INTERNAL_ERROR",
        _ => "",
    };
    format!("{name} ({s:#010x})")
}

impl Link {
    /// The objects of one end on host `host`, `spec.receives` receives posted.
    pub fn new(c: &Cluster, host: usize, spec: LinkSpec) -> Link {
        let a = c.adapter(host);
        let pd = a.create_pd().expect("NdkCreatePd");
        let rcq = a.create_cq(64, None).expect("NdkCreateCq");
        let icq = a.create_cq(64, None).expect("NdkCreateCq");
        let qp = pd
            .create_qp(
                &rcq,
                &icq,
                QpSpec {
                    receive_depth: 8,
                    initiator_depth: 16,
                    receive_sge: 1,
                    initiator_sge: 1,
                    ..QpSpec::new(0xA6E7)
                },
            )
            .expect("NdkCreateQp");
        let rw = NDK_MR_FLAG_ALLOW_LOCAL_WRITE
            | NDK_MR_FLAG_ALLOW_REMOTE_READ
            | NDK_MR_FLAG_ALLOW_REMOTE_WRITE;
        let h = c.host(host);
        let data = Registered::new(h, &pd, spec.data_size.div_ceil(4096), VA_DATA, rw);
        let rx = Registered::new(
            h,
            &pd,
            (spec.receives.max(1) * spec.recv_size).div_ceil(4096),
            VA_RX,
            NDK_MR_FLAG_ALLOW_LOCAL_WRITE,
        );
        let tx = Registered::new(h, &pd, spec.data_size.max(MSG).div_ceil(4096), VA_TX, 0);
        let mut l = Link {
            pd,
            rcq,
            icq,
            qp,
            conn: None,
            data,
            rx,
            tx,
            spec,
            posted: VecDeque::new(),
            next_ctx: CTX_SEND,
            host,
        };
        for _ in 0..spec.receives {
            l.post_receive();
        }
        l
    }

    /// Posts the next receive slot (slots are used round robin; at most `spec.receives`).
    pub fn post_receive(&mut self) {
        let n = self.spec.receives.max(1);
        let slot = (0..n)
            .map(|i| (self.posted.back().map_or(0, |&b| b + 1) + i) % n)
            .find(|s| !self.posted.contains(s))
            .expect("a free receive slot");
        let off = (slot * self.spec.recv_size) as u64;
        // CAST: a receive buffer is at most 1 MiB.
        let st = self
            .qp
            .receive(slot, &[self.rx.sge(off, self.spec.recv_size as u32)]);
        assert_eq!(st, STATUS_SUCCESS, "NdkReceive");
        self.posted.push_back(slot);
    }

    /// Receives outstanding.
    pub fn receives_posted(&self) -> usize {
        self.posted.len()
    }

    /// NdkConnect to the agent at `dst` and NdkCompleteConnect.
    pub fn connect(&mut self, c: &Cluster, dst: SocketAddr) {
        let conn = c.adapter(self.host).create_connector().expect("connector");
        let src = sa(c.host(self.host).ip_for(dst.ip()), 0);
        let (ird, ord) = (self.spec.ird, self.spec.ord);
        let st = conn.connect_raw(&self.qp, src, dst, ird, ord, b"").wait();
        assert_eq!(st, STATUS_SUCCESS, "NdkConnect to rc_agent at {dst}");
        assert_eq!(
            conn.complete_connect(),
            STATUS_SUCCESS,
            "NdkCompleteConnect"
        );
        self.conn = Some(conn);
    }

    /// Takes the listener's next connection and NdkAccepts it.
    pub fn accept(&mut self, listener: &Listener) {
        let conn = listener.next_incoming();
        let (ird, ord) = (self.spec.ird, self.spec.ord);
        let st = conn.accept_raw(&self.qp, ird, ord, b"").wait();
        assert_eq!(st, STATUS_SUCCESS, "NdkAccept of rc_agent's connection");
        self.conn = Some(conn);
    }

    /// The connector.
    pub fn conn(&self) -> &Connector {
        self.conn.as_ref().expect("connected")
    }

    /// Waits for the next receive completion (Ex: its type and invalidated token), which
    /// must be the oldest slot posted; `None` is never returned: a wait that ends in a
    /// deadline panics.
    pub fn next_receive(&mut self, c: &Cluster, what: &str) -> (usize, NDK_RESULT_EX) {
        let mut got = None;
        c.wait_for(what, || {
            got = self.rcq.results_ex(1).pop();
            got.is_some()
        });
        let r = got.unwrap();
        let slot = self.posted.pop_front().expect("a receive was posted");
        assert_eq!(
            r.RequestContext as usize, slot,
            "{what}: receives complete in the order posted"
        );
        (slot, r)
    }

    /// The bytes of a completed receive.
    pub fn received(&self, slot: usize, len: usize) -> Vec<u8> {
        super::super::ndk::read(&self.rx.mem, slot * self.spec.recv_size, len)
    }

    /// The next message from the agent: a successful 64-byte receive with `op`, reposted.
    pub fn reply(&mut self, c: &Cluster, want_op: u32) -> Msg {
        let (slot, r) = self.next_receive(c, &format!("rc_agent's reply to op {want_op}"));
        assert_eq!(
            (r.Status, r.BytesTransferred, r.Type),
            (STATUS_SUCCESS, MSG as u32, NdkOperationTypeReceive),
            "rc_agent's reply to op {want_op}: {}",
            status_name(r.Status)
        );
        let m = Msg::decode(&self.received(slot, MSG));
        self.post_receive();
        assert_eq!(m.op, want_op, "a reply to op {want_op}: {m:?}");
        m
    }

    /// The agent's HELLO (its buffer).
    pub fn hello(&mut self, c: &Cluster) -> Msg {
        let m = self.reply(c, op::HELLO);
        assert!(m.len as usize >= MSG && m.rkey != 0, "HELLO: {m:?}");
        m
    }

    fn ctx(&mut self) -> usize {
        self.next_ctx += 1;
        self.next_ctx
    }

    /// The next initiator completion, which must carry `ctx`.
    pub fn initiator_result(&self, c: &Cluster, ctx: usize, what: &str) -> NDK_RESULT_EX {
        let mut got = None;
        c.wait_for(what, || {
            got = self.icq.results_ex(1).pop();
            got.is_some()
        });
        let r = got.unwrap();
        assert_eq!(
            r.RequestContext as usize, ctx,
            "{what}: the completion's context"
        );
        r
    }

    /// Posts `post(ctx)` and waits for its completion; returns it (any status).
    pub fn initiate(
        &mut self,
        c: &Cluster,
        what: &str,
        post: impl FnOnce(&Qp, usize) -> NTSTATUS,
    ) -> NDK_RESULT_EX {
        let ctx = self.ctx();
        assert_eq!(post(&self.qp, ctx), STATUS_SUCCESS, "{what}: posting");
        self.initiator_result(c, ctx, what)
    }

    /// NdkSend of `bytes` (copied to the send buffer), waited for; must succeed.
    pub fn send(&mut self, c: &Cluster, bytes: &[u8]) {
        self.tx.mem.buf.write(0, bytes);
        // CAST: at most the send buffer.
        let sge = self.tx.sge(0, bytes.len() as u32);
        let r = self.initiate(c, "NdkSend", |q, ctx| q.send(ctx, &[sge], 0));
        assert_eq!(
            (r.Status, r.Type),
            (STATUS_SUCCESS, NdkOperationTypeSend),
            "NdkSend of {} bytes: {}",
            bytes.len(),
            status_name(r.Status)
        );
    }

    /// Sends a command and returns the agent's reply (status 0 required).
    pub fn command(&mut self, c: &Cluster, m: Msg) -> Msg {
        self.send(c, &m.encode());
        let r = self.reply(c, m.op);
        assert_eq!(r.status, 0, "rc_agent failed op {}: {r:?}", m.op);
        r
    }

    /// Sends a command whose reply comes later (the caller does more first).
    pub fn command_async(&mut self, c: &Cluster, m: Msg) {
        self.send(c, &m.encode());
    }

    // ------------------------------------------------------------------ transfers, checked

    /// NDK SEND → agent, `len` bytes of pattern `seed`, checked there (plain SEND, or
    /// NdkSendAndInvalidate of `invalidate` when given: the agent checks the completion
    /// carried IBV_WC_WITH_INV and that token).
    pub fn send_checked(&mut self, c: &Cluster, seed: u32, len: usize, invalidate: Option<u32>) {
        let mut m = Msg::new(op::EXPECT_SEND);
        // CAST: len ≤ 1 MiB.
        (m.seed, m.len) = (seed, len as u32);
        if let Some(t) = invalidate {
            (m.rkey, m.flags) = (t, 1);
        }
        self.command_async(c, m);
        let data = pattern(seed, len);
        self.tx.mem.buf.write(0, &data);
        // CAST: len ≤ 1 MiB.
        let sge = self.tx.sge(0, len as u32);
        let r = match invalidate {
            None => self.initiate(c, "NdkSend of data", |q, ctx| q.send(ctx, &[sge], 0)),
            Some(t) => self.initiate(c, "NdkSendAndInvalidate", |q, ctx| {
                q.send_and_invalidate(ctx, &[sge], 0, t)
            }),
        };
        // ndkpi.md §4.3: a SendAndInvalidate's own result is Type Send.
        assert_eq!(
            (r.Status, r.Type),
            (STATUS_SUCCESS, NdkOperationTypeSend),
            "send of {len} bytes: {}",
            status_name(r.Status)
        );
        let rep = self.reply(c, op::EXPECT_SEND);
        assert_eq!(rep.status, 0, "rc_agent's check of our SEND: {rep:?}");
        // CAST: len ≤ 1 MiB.
        assert_eq!(rep.value, len as u32, "bytes the agent received");
        assert_eq!(
            rep.rkey,
            invalidate.unwrap_or(0),
            "the invalidated rkey rxe reported"
        );
    }

    /// Agent SEND → NDK, `len` bytes of pattern `seed`, checked here; with `invalidate`
    /// the agent sends with invalidate of that token and the receive must report it
    /// (NdkOperationTypeReceiveAndInvalidate, TypeSpecificCompletionOutput).
    pub fn receive_checked(&mut self, c: &Cluster, seed: u32, len: usize, invalidate: Option<u32>) {
        assert!(len <= self.spec.recv_size);
        let mut m = Msg::new(op::SEND_ME);
        // CAST: len ≤ 1 MiB.
        (m.seed, m.len) = (seed, len as u32);
        if let Some(t) = invalidate {
            (m.rkey, m.flags) = (t, 1);
        }
        self.command_async(c, m);
        let (slot, r) = self.next_receive(c, "the agent's SEND");
        let ty = if invalidate.is_some() {
            NdkOperationTypeReceiveAndInvalidate
        } else {
            NdkOperationTypeReceive
        };
        // CAST: len ≤ 1 MiB.
        assert_eq!(
            (r.Status, r.BytesTransferred, r.Type),
            (STATUS_SUCCESS, len as u32, ty),
            "the agent's SEND of {len} bytes: {}",
            status_name(r.Status)
        );
        if let Some(t) = invalidate {
            assert_eq!(
                r.TypeSpecificCompletionOutput, t as usize,
                "the invalidated token"
            );
        }
        let got = self.received(slot, len);
        assert_bytes(&got, seed, "the agent's SEND");
        self.post_receive();
        let rep = self.reply(c, op::SEND_ME);
        assert_eq!(rep.status, 0, "{rep:?}");
    }

    /// NdkWrite of pattern `seed` (`len` bytes) to `remote`/`rkey`; must succeed.
    pub fn write_remote(&mut self, c: &Cluster, seed: u32, len: usize, remote: u64, rkey: u32) {
        let data = pattern(seed, len);
        self.data.mem.buf.write(0, &data);
        // CAST: len ≤ 1 MiB.
        let sge = self.data.sge(0, len as u32);
        let r = self.initiate(c, "NdkWrite", |q, ctx| {
            q.write(ctx, &[sge], remote, rkey, 0)
        });
        assert_eq!(
            (r.Status, r.Type),
            (STATUS_SUCCESS, NdkOperationTypeWrite),
            "NdkWrite of {len} bytes: {}",
            status_name(r.Status)
        );
    }

    /// NdkRead of `len` bytes at `remote`/`rkey` into the data buffer; returns the result.
    pub fn read_remote(
        &mut self,
        c: &Cluster,
        len: usize,
        remote: u64,
        rkey: u32,
    ) -> NDK_RESULT_EX {
        self.data.mem.buf.write(0, &vec![0u8; len]);
        // CAST: len ≤ 1 MiB.
        let sge = self.data.sge(0, len as u32);
        self.initiate(c, "NdkRead", |q, ctx| q.read(ctx, &[sge], remote, rkey, 0))
    }

    /// NDK WRITE into the agent's buffer, checked by the agent.
    pub fn write_checked(&mut self, c: &Cluster, hello: &Msg, seed: u32, len: usize) {
        self.write_remote(c, seed, len, hello.addr, hello.rkey);
        let mut m = Msg::new(op::CHECK);
        // CAST: len ≤ 1 MiB.
        (m.seed, m.len) = (seed, len as u32);
        self.command(c, m);
    }

    /// The agent fills its buffer; NDK READ of it, checked here.
    pub fn read_checked(&mut self, c: &Cluster, hello: &Msg, seed: u32, len: usize) {
        let mut m = Msg::new(op::FILL);
        // CAST: len ≤ 1 MiB.
        (m.seed, m.len) = (seed, len as u32);
        self.command(c, m);
        let r = self.read_remote(c, len, hello.addr, hello.rkey);
        assert_eq!(
            (r.Status, r.Type),
            (STATUS_SUCCESS, NdkOperationTypeRead),
            "NdkRead of {len} bytes: {}",
            status_name(r.Status)
        );
        // BytesTransferred is defined for receives only (ndkpi.md §4.2): the bytes say it.
        let got = super::super::ndk::read(&self.data.mem, 0, len);
        assert_bytes(&got, seed, "what NdkRead brought");
    }

    /// The agent RDMA WRITEs into `addr`/`rkey` (this side's memory); the reply comes after
    /// the data is placed (RC ordering).
    pub fn agent_writes(&mut self, c: &Cluster, seed: u32, len: usize, addr: u64, rkey: u32) {
        let mut m = Msg::new(op::WRITE);
        // CAST: len ≤ 1 MiB.
        (m.addr, m.rkey, m.seed, m.len) = (addr, rkey, seed, len as u32);
        self.command(c, m);
    }

    /// The agent RDMA READs `addr`/`rkey` and checks pattern `seed`.
    pub fn agent_reads(&mut self, c: &Cluster, seed: u32, len: usize, addr: u64, rkey: u32) {
        let mut m = Msg::new(op::READ);
        // CAST: len ≤ 1 MiB.
        (m.addr, m.rkey, m.seed, m.len) = (addr, rkey, seed, len as u32);
        self.command(c, m);
    }

    /// Every direction and operation at `len` bytes: SEND both ways, NDK WRITE and READ,
    /// agent WRITE and READ of this side's registered memory; every byte checked.
    pub fn exchange(&mut self, c: &Cluster, hello: &Msg, seed: u32, len: usize) {
        self.send_checked(c, seed, len, None);
        self.receive_checked(c, seed + 1, len, None);
        self.write_checked(c, hello, seed + 2, len);
        self.read_checked(c, hello, seed + 3, len);
        let (va, token) = (self.data.mem.va, self.data.mr.remote_token());
        self.agent_writes(c, seed + 4, len, va, token);
        let got = super::super::ndk::read(&self.data.mem, 0, len);
        assert_bytes(&got, seed + 4, "what the agent's RDMA WRITE placed");
        self.data.mem.buf.write(0, &pattern(seed + 5, len));
        self.agent_reads(c, seed + 5, len, va, token);
    }

    /// The link's own disconnect: NdkDisconnect must succeed, every receive still posted
    /// must come back STATUS_CANCELLED, and (when the peer did not disconnect first) no
    /// DisconnectEvent. Returns how many receives were flushed.
    pub fn disconnect_and_flush(&mut self, c: &Cluster) -> usize {
        let st = self.conn().disconnect();
        assert_eq!(st, STATUS_SUCCESS, "NdkDisconnect: {}", status_name(st));
        self.flush_receives(c)
    }

    /// Every receive still posted completes STATUS_CANCELLED (after a disconnect or a QP
    /// error); returns how many.
    pub fn flush_receives(&mut self, c: &Cluster) -> usize {
        let n = self.posted.len();
        for _ in 0..n {
            let (_, r) = self.next_receive(c, "a flushed receive");
            assert_eq!(
                r.Status,
                STATUS_CANCELLED,
                "a receive outstanding at the end: {}",
                status_name(r.Status)
            );
        }
        n
    }

    /// Closes the connector and every object; checks no completion is left behind.
    pub fn close(mut self, c: &Cluster) {
        c.settle();
        let left_r = self.rcq.results_ex(8);
        let left_i = self.icq.results_ex(8);
        assert!(
            left_r.is_empty() && left_i.is_empty(),
            "completions left: receive {:?}, initiator {:?}",
            left_r
                .iter()
                .map(|r| status_name(r.Status))
                .collect::<Vec<_>>(),
            left_i
                .iter()
                .map(|r| status_name(r.Status))
                .collect::<Vec<_>>()
        );
        if let Some(conn) = self.conn.take() {
            assert_eq!(conn.close(), STATUS_SUCCESS, "NdkCloseConnector");
        }
        let Link {
            pd,
            rcq,
            icq,
            qp,
            data,
            rx,
            tx,
            ..
        } = self;
        drop([data.close(), rx.close(), tx.close()]);
        qp.close();
        rcq.close();
        icq.close();
        pd.close();
    }
}

/// Asserts `got` is pattern `seed`, naming the first byte that differs.
pub fn assert_bytes(got: &[u8], seed: u32, what: &str) {
    // CAST: lengths ≤ 1 MiB.
    if let Some(j) = (0..got.len()).find(|&j| got[j] != pattern_byte(seed, j as u32)) {
        panic!(
            "{what}: byte {j} of {} is {:#04x}, expected {:#04x}",
            got.len(),
            got[j],
            // CAST: as above.
            pattern_byte(seed, j as u32)
        );
    }
}

/// The agent's "connected" line: its QP's attributes as ibv_query_qp gave them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentQp {
    pub qpn: u32,
    pub path_mtu: u32,
    pub timeout: u32,
    pub retry_cnt: u32,
    pub rnr_retry: u32,
    pub min_rnr_timer: u32,
    /// max_rd_atomic.
    pub ord: u32,
    /// max_dest_rd_atomic.
    pub ird: u32,
}

/// Parses rc_agent's "connected: ..." line from its output.
pub fn agent_qp(out: &Output) -> AgentQp {
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("rc_agent: connected: "))
        .unwrap_or_else(|| panic!("no connected line: {out}"));
    let field = |name: &str| -> u32 {
        let mut w = line.split_whitespace();
        w.find(|&x| x == name)
            .and_then(|_| w.next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
    };
    AgentQp {
        qpn: field("qpn"),
        path_mtu: field("path_mtu"),
        timeout: field("timeout"),
        retry_cnt: field("retry_cnt"),
        rnr_retry: field("rnr_retry"),
        min_rnr_timer: field("min_rnr_timer"),
        ord: field("ord"),
        ird: field("ird"),
    }
}

/// IB RNR NAK timer code → microseconds (IBTA table; rxe `rnrnak_usec`).
pub fn rnr_timer_us(code: u32) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    T[(code & 31) as usize]
}

/// The transport retry budget of a requester: (retry count + 1) transmissions, each waited
/// for 4.096 µs · 2^timeout.
pub fn retry_budget(timeout: u8, retry_cnt: u8) -> Duration {
    Duration::from_nanos((4096u64 << timeout) * (u64::from(retry_cnt) + 1))
}

/// Time since `t0`, in seconds, for messages.
pub fn secs(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}
