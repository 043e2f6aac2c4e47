//! perftest's rdma_cm exchange (linux-rdma/perftest 4.5-0.17, Debian bookworm's `perftest`
//! 4.5+0.17) on the NDK side, through the dispatch tables, so a Linux `ib_{send,read,write}_
//! {lat,bw} -R` can be either end.
//!
//! With `-R`, perftest connects twice to the same port, both times through rdma_cm
//! (perftest_parameters.c: `-R` sets `work_rdma_cm`, which forces `use_rdma_cm`; there is no
//! TCP side channel in this mode, and none in this implementation):
//!
//! 1. The *control connection* (perftest_communication.c `rdma_client_connect` /
//!    `rdma_server_connect`): one RC QP, no reads, RNR retry 7, one receive of
//!    `sizeof(struct pingpong_dest)` = 56 bytes always posted. The server destroys its
//!    listener once it accepted. Every exchange on it is a signaled SEND from the client then
//!    one from the server (`ctx_xchg_data`, `ctx_hand_shake`): the client writes first.
//! 2. On it: the versions (16 bytes, a C string; the peer's must read ≥ 5.70), the cycle
//!    buffer and the cache line size (4 bytes each, big-endian; each side takes the larger),
//!    the path MTU as `sprintf("%d", enum ibv_mtu)` in 2 bytes (`check_mtu`), then a
//!    handshake (the 56-byte record: lid, out_reads, qpn, psn, rkey, vaddr, gid, srqn,
//!    gid_index, every integer big-endian as `rdma_write_keys` sends it).
//! 3. The *test connection* (`create_rdma_cm_connection`): a second listener the server
//!    creates only now, on the same port (a client that is early is rejected, REJ reason 8:
//!    it retries, as perftest's client does every 100 ms), responder resources and initiator
//!    depth both `out_reads` for READ tests and 0 otherwise, then another handshake.
//! 4. Per tool (send_lat.c, read_lat.c, write_lat.c, send_bw.c, read_bw.c, write_bw.c): the
//!    handshakes that carry the real records (`set_up_connection`: the QP number, a random
//!    PSN, the rkey and address of the buffer the peer may READ or WRITE), a synchronising
//!    handshake where the tool has one, the data phase, for read_bw and write_bw the client's
//!    report (5 exchanges of 8 bytes: size, iterations, peak and average MiB/s, Mpps; the
//!    integers big-endian, the doubles byte-swapped: `xchg_bw_reports`), and the closing
//!    handshake (`ctx_close_connection`; write_lat has none). The data phases:
//!    - send_lat: ping-pong of SENDs, the client first; each side posts its receives before
//!      the synchronising handshake.
//!    - write_lat: ping-pong of RDMA WRITEs, the server first; each side writes `size` bytes
//!      whose last byte is the iteration number (mod 256) into the peer's buffer and polls
//!      the last byte of its own for the peer's.
//!    - read_lat: the client READs `size` bytes from the server's buffer, one at a time.
//!    - send_bw: the client SENDs `iters` messages, at most `tx_depth` outstanding; the server
//!      keeps receives posted.
//!    - read_bw / write_bw: the client READs / WRITEs `iters` times, at most `tx_depth`
//!      (READ: also at most the negotiated ORD) outstanding; the server only waits.
//! 5. The client disconnects the test connection; the server does too (perftest's
//!    `destroy_ctx`); the control connection goes when perftest exits.
//!
//! perftest fills its buffers with `rand()` (write_lat: zeros) and never checks what arrives,
//! so the checks here are the ones perftest's own exchange allows: every record and report
//! field, every completion's status, count and length, the ping-pong's iteration bytes.
//!
//! Limits of bookworm's perftest (docs/PEER.md): its rdma_cm client and server are AF_INET
//! only (no IPv6 before perftest PR #218, 2023).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pvrdma_ndk::ndkpi::*;

use super::super::guest::{COMMAND_TIMEOUT, Output};
use super::super::ndk::peer::gid_of;
use super::super::ndk::{
    Cluster, Connector, Cq, Listener, Pd, PendingClose, Qp, QpSpec, Registered, read, sa,
};
use super::rig::Rig;

/// perftest's default port (`DEF_PORT`).
pub const PERFTEST_PORT: u16 = 18515;
/// The perftest version this side announces: the protocol of 4.5-0.17 (its `VERSION`).
pub const VERSION: &str = "6.06";
/// The oldest peer perftest accepts (`check_version_compatibility`), and so do we.
const MIN_PEER_VERSION: f64 = 5.70;
/// READs outstanding: the provider's IRD/ORD maximum (MaxInboundReadLimit and
/// MaxOutboundReadLimit, the model's 16); perftest asks rdma_cm for `-o` each way.
pub const OUT_READS: u32 = 16;
/// `sizeof(struct pingpong_dest)` on x86-64: the control connection's message size.
pub const DEST_LEN: usize = 56;
/// `MAX_VERSION`.
const VERSION_LEN: usize = 16;
/// This side's page size and cache line (`cycle_buffer`, `cache_line_size`).
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// The path MTU this side announces: IBV_MTU_1024 (the wire's 1500-byte frames).
const MTU_ENUM: u32 = 3;
/// How long a data-phase wait may take (the guest is emulated).
const HANG: Duration = Duration::from_secs(120);
/// perftest's client retries a rejected test connection every 100 ms, 10 times; the NDK
/// client retries as long as a TCG guest may take to create its second listener.
const CONNECT_ATTEMPTS: u32 = 100;
const CONNECT_RETRY: Duration = Duration::from_millis(100);
/// Receives the NDK side keeps posted on the test QP (send tests).
const RECEIVE_DEPTH: u32 = 128;

const CTL_VA: u64 = 0x7400_0000;
const DATA_VA: u64 = 0x7800_0000;
const CTL_SEND: u64 = 0;
const CTL_RECV: u64 = 64;
/// Request contexts.
const CTX_CTL_SEND: usize = 0xC5;
const CTX_CTL_RECV: usize = 0xC7;
const CTX_DATA: usize = 0xD0;
const CTX_RECV: usize = 0x7000_0000;

/// perftest's verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// SEND/receive.
    Send,
    /// RDMA READ.
    Read,
    /// RDMA WRITE.
    Write,
}

/// Latency or bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `*_lat`: one operation at a time, per-iteration times.
    Lat,
    /// `*_bw`: a window of operations, throughput.
    Bw,
}

/// One perftest program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tool {
    /// Its verb.
    pub verb: Verb,
    /// Latency or bandwidth.
    pub kind: Kind,
}

impl Tool {
    /// The six programs over RC.
    pub const ALL: [Tool; 6] = [
        Tool::new(Verb::Send, Kind::Lat),
        Tool::new(Verb::Read, Kind::Lat),
        Tool::new(Verb::Write, Kind::Lat),
        Tool::new(Verb::Send, Kind::Bw),
        Tool::new(Verb::Read, Kind::Bw),
        Tool::new(Verb::Write, Kind::Bw),
    ];

    /// A program.
    pub const fn new(verb: Verb, kind: Kind) -> Tool {
        Tool { verb, kind }
    }

    /// Its name (`ib_send_lat`, ...).
    pub fn name(self) -> &'static str {
        match (self.verb, self.kind) {
            (Verb::Send, Kind::Lat) => "ib_send_lat",
            (Verb::Read, Kind::Lat) => "ib_read_lat",
            (Verb::Write, Kind::Lat) => "ib_write_lat",
            (Verb::Send, Kind::Bw) => "ib_send_bw",
            (Verb::Read, Kind::Bw) => "ib_read_bw",
            (Verb::Write, Kind::Bw) => "ib_write_bw",
        }
    }

    /// Handshakes after the test connection and before the data phase (each program's
    /// `main`; the synchronising one of the SEND programs not counted).
    fn handshakes_before_run(self) -> u32 {
        match (self.verb, self.kind) {
            (Verb::Send, _) | (_, Kind::Bw) => 3,
            (Verb::Read | Verb::Write, Kind::Lat) => 4,
        }
    }
}

/// One run's parameters (both sides must agree, as perftest's command lines do).
#[derive(Clone, Copy, Debug)]
pub struct Test {
    /// The program.
    pub tool: Tool,
    /// `-s`: bytes per operation.
    pub size: usize,
    /// `-n`: iterations.
    pub iters: u32,
    /// `-t`: operations outstanding (bandwidth programs; latency programs use 1).
    pub tx_depth: u32,
    /// `-o`: READs outstanding, also the connection's responder resources and initiator
    /// depth (READ programs).
    pub out_reads: u32,
    /// `-p`.
    pub port: u16,
}

impl Test {
    /// A run of `tool` with `size` bytes × `iters`, 8 outstanding (bandwidth programs) and
    /// `out_reads` READs outstanding.
    pub fn new(tool: Tool, size: usize, iters: u32, out_reads: u32) -> Test {
        Test {
            tool,
            size,
            iters,
            tx_depth: if tool.kind == Kind::Bw { 8 } else { 1 },
            out_reads,
            port: PERFTEST_PORT,
        }
    }

    /// The Linux side's arguments (before the server's address, for a client).
    pub fn linux_args(&self) -> String {
        let mut a = format!(
            "-R -d rxe0 -F -p {} -s {} -n {}",
            self.port, self.size, self.iters
        );
        if self.tool.kind == Kind::Bw {
            a += &format!(" -t {}", self.tx_depth);
        }
        if self.tool.verb == Verb::Read {
            a += &format!(" -o {}", self.out_reads);
        }
        a
    }

    /// READs outstanding at once (perftest posts up to `tx_depth`; the NDK side also keeps
    /// within the negotiated ORD).
    fn window(&self) -> u32 {
        match (self.tool.kind, self.tool.verb) {
            (Kind::Lat, _) => 1,
            (Kind::Bw, Verb::Read) => self.tx_depth.min(self.out_reads).max(1),
            (Kind::Bw, _) => self.tx_depth.max(1),
        }
    }

    /// The IRD/ORD asked for on the test connection.
    fn read_limits(&self) -> u32 {
        if self.tool.verb == Verb::Read {
            self.out_reads
        } else {
            0
        }
    }

    /// `BUFF_SIZE(size, cycle_buffer)`: one half of the data buffer.
    fn half(&self) -> usize {
        self.size.max(CYCLE_BUFFER as usize)
    }
}

/// `struct pingpong_dest` as it travels on the control connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u32,
    /// READs outstanding.
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// A random 24-bit PSN (unused over rdma_cm).
    pub psn: u32,
    /// The rkey of the buffer the peer may READ or WRITE.
    pub rkey: u32,
    /// Its address.
    pub vaddr: u64,
    /// The GID.
    pub gid: [u8; 16],
    /// SRQ number (XRC; 0).
    pub srqn: u32,
    /// GID index.
    pub gid_index: u32,
}

impl Dest {
    /// The 56 bytes `rdma_write_keys` sends: every integer big-endian, 4 bytes of padding
    /// before the 8-byte address, the GID raw.
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut m = [0u8; DEST_LEN];
        m[0..4].copy_from_slice(&self.lid.to_be_bytes());
        m[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        m[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        m[12..16].copy_from_slice(&self.psn.to_be_bytes());
        m[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        m[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        m[32..48].copy_from_slice(&self.gid);
        m[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        m[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        m
    }

    /// What `rdma_read_keys` takes from 56 bytes (it ignores srqn and gid_index; so do we).
    pub fn decode(m: &[u8]) -> Dest {
        let u32_at = |o: usize| u32::from_be_bytes(m[o..o + 4].try_into().unwrap());
        Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(m[24..32].try_into().unwrap()),
            gid: m[32..48].try_into().unwrap(),
            srqn: 0,
            gid_index: 0,
        }
    }
}

/// `struct bw_report_data` as `xchg_bw_reports` exchanges it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Bytes per operation.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak MiB/s.
    pub bw_peak: f64,
    /// Average MiB/s.
    pub bw_avg: f64,
    /// Million operations per second.
    pub msg_rate: f64,
}

/// Which end the NDK side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It connects (perftest run with the server's address).
    Client,
    /// It listens.
    Server,
}

/// What the NDK side did and measured in one run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The run.
    pub tool: Tool,
    /// The NDK side's role.
    pub role: Role,
    /// Bytes per operation.
    pub size: usize,
    /// Iterations.
    pub iters: u32,
    /// The peer's version string.
    pub peer_version: String,
    /// The peer's path MTU (enum ibv_mtu).
    pub peer_mtu: u32,
    /// The NDK side's record, as last sent.
    pub ours: Dest,
    /// The peer's record, as last received.
    pub theirs: Dest,
    /// Attempts the test connection took (client).
    pub connect_attempts: u32,
    /// The IRD and ORD the test connection negotiated (NdkGetConnectionData).
    pub ird_ord: (u32, u32),
    /// Operations this side issued in the data phase (SENDs, READs, WRITEs).
    pub issued: u32,
    /// Messages this side received in the data phase (SEND programs) or the peer's WRITEs it
    /// saw land (write_lat).
    pub received: u32,
    /// Most operations outstanding at once.
    pub max_outstanding: u32,
    /// Per-iteration times (latency programs; send_lat and write_lat: half the round trip,
    /// as perftest reports them).
    pub samples: Vec<Duration>,
    /// The data phase from its first post to its last completion.
    pub elapsed: Duration,
    /// The peer's bandwidth report (read_bw, write_bw with the peer as client).
    pub peer_report: Option<BwReport>,
    /// The report this side sent (read_bw, write_bw as client).
    pub sent_report: Option<BwReport>,
}

impl Report {
    /// MiB/s over the data phase.
    pub fn bw_avg(&self) -> f64 {
        let bytes = self.size as f64 * f64::from(self.iters);
        bytes / self.elapsed.as_secs_f64().max(1e-9) / f64::from(1u32 << 20)
    }

    /// Million operations per second.
    pub fn msg_rate(&self) -> f64 {
        f64::from(self.iters) / self.elapsed.as_secs_f64().max(1e-9) / 1e6
    }

    /// Latency percentiles in µs: (min, max, typical (median), average, stdev, 99 %, 99.9 %),
    /// as perftest's latency table.
    pub fn latency_us(&self) -> Option<[f64; 7]> {
        if self.samples.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let avg = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let pct = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some([
            v[0],
            v[n - 1],
            v[n / 2],
            avg,
            var.sqrt(),
            pct(0.99),
            pct(0.999),
        ])
    }

    /// The row this side would print in perftest's table.
    pub fn table_row(&self) -> String {
        if self.issued == 0 && self.received == 0 {
            // read_lat, read_bw and write_bw servers only wait.
            return format!(
                " {:<7} {:<10} (passive side: the peer's operations)",
                self.size, self.iters
            );
        }
        match self.latency_us() {
            Some(l) => format!(
                " {:<7} {:<10} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                self.size, self.iters, l[0], l[1], l[2], l[3], l[4], l[5], l[6]
            ),
            None => format!(
                " {:<7} {:<10} {:>12.2} {:>12.2} {:>12.6}",
                self.size,
                self.iters,
                self.sent_report.map_or(self.bw_avg(), |r| r.bw_peak),
                self.bw_avg(),
                self.msg_rate()
            ),
        }
    }

    /// perftest's table header for this program.
    pub fn table_header(&self) -> &'static str {
        if self.tool.kind == Kind::Lat {
            " #bytes  #iterations t_min[us]  t_max[us]  t_typ[us]  t_avg[us]  t_stdev    99%[us]    99.9%[us]"
        } else {
            " #bytes  #iterations  BW peak[MiB/s]  BW avg[MiB/s]  MsgRate[Mpps]"
        }
    }
}

/// Waits for `cond` without spinning the CPU the emulated guest needs; panics after
/// [`HANG`].
fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    let mut spins = 0u32;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// The next completion on `cq`.
fn next(cq: &Cq, what: &str) -> NDK_RESULT {
    let mut got = None;
    wait(what, || {
        got = cq.results(1).pop();
        got.is_some()
    });
    got.unwrap()
}

/// The control connection's objects.
struct Control {
    cq: Cq,
    qp: Qp,
    msg: Registered,
    conn: Connector,
    /// perftest's `servername`: the client writes first.
    writes_first: bool,
}

impl Control {
    fn objects(c: &Cluster, host: usize, pd: &Pd) -> (Cq, Qp, Registered) {
        let a = c.adapter(host);
        let cq = a.create_cq(8, None).expect("control CQ");
        let spec = QpSpec {
            receive_depth: 2,
            initiator_depth: 2,
            ..QpSpec::new(0xC0)
        };
        let qp = pd.create_qp(&cq, &cq, spec).expect("control QP");
        let msg = Registered::new(c.host(host), pd, 1, CTL_VA, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        (cq, qp, msg)
    }

    fn post_receive(qp: &Qp, msg: &Registered) {
        assert_eq!(
            qp.receive(CTX_CTL_RECV, &[msg.sge(CTL_RECV, DEST_LEN as u32)]),
            STATUS_SUCCESS,
            "control receive"
        );
    }

    fn send(&self, m: &[u8]) {
        assert!(m.len() <= DEST_LEN, "perftest receives at most 56 bytes");
        self.msg.mem.buf.write(CTL_SEND as usize, m);
        // CAST: ≤ 56.
        let sge = self.msg.sge(CTL_SEND, m.len() as u32);
        assert_eq!(self.qp.send(CTX_CTL_SEND, &[sge], 0), STATUS_SUCCESS);
        let r = next(&self.cq, "our control SEND");
        // NDK defines BytesTransferred for receives only.
        assert_eq!(
            (r.Status, r.RequestContext as usize),
            (STATUS_SUCCESS, CTX_CTL_SEND),
            "our control SEND"
        );
    }

    fn receive(&self, len: usize, what: &str) -> Vec<u8> {
        let r = next(&self.cq, what);
        assert_eq!(
            (r.Status, r.RequestContext as usize),
            (STATUS_SUCCESS, CTX_CTL_RECV),
            "{what}"
        );
        assert_eq!(r.BytesTransferred as usize, len, "{what}: its length");
        let m = read(&self.msg.mem, CTL_RECV as usize, len);
        Self::post_receive(&self.qp, &self.msg);
        m
    }

    /// `ctx_xchg_data`: the client sends, then receives; the server the other way round.
    fn xchg(&self, mine: &[u8], what: &str) -> Vec<u8> {
        if self.writes_first {
            self.send(mine);
            self.receive(mine.len(), what)
        } else {
            let theirs = self.receive(mine.len(), what);
            self.send(mine);
            theirs
        }
    }

    /// `ctx_hand_shake`.
    fn handshake(&self, mine: &Dest, what: &str) -> Dest {
        Dest::decode(&self.xchg(&mine.encode(), what))
    }

    /// Versions, system data and MTU (`exchange_versions`, `check_sys_data`, `check_mtu`).
    fn preamble(&self) -> (String, u32) {
        let mut v = [0u8; VERSION_LEN];
        v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.xchg(&v, "the peer's version");
        let end = theirs.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
        let version = String::from_utf8_lossy(&theirs[..end]).into_owned();
        let number: f64 = version
            .parse()
            .unwrap_or_else(|_| panic!("the peer's version {version:?} is a number"));
        assert!(
            number >= MIN_PEER_VERSION,
            "perftest {version} predates the protocol spoken here"
        );
        // Both ≥ 5.32: the cycle buffer and the cache line, big-endian ints.
        let cycle = self.xchg(&CYCLE_BUFFER.to_be_bytes(), "the peer's cycle buffer");
        let cycle = u32::from_be_bytes(cycle.try_into().unwrap());
        assert_eq!(cycle, CYCLE_BUFFER, "the peer's page size");
        let line = self.xchg(&CACHE_LINE.to_be_bytes(), "the peer's cache line");
        let line = u32::from_be_bytes(line.try_into().unwrap());
        assert!(
            line.is_power_of_two() && line <= 4096,
            "the peer's cache line {line}"
        );
        // ≥ 5.31: the MTU enum in decimal, 2 bytes (one digit and its NUL).
        let mtu = self.xchg(&[b'0' + MTU_ENUM as u8, 0], "the peer's MTU");
        assert_eq!(mtu[1], 0, "a NUL-terminated digit: {mtu:?}");
        let peer_mtu = u32::from(mtu[0].wrapping_sub(b'0'));
        assert_eq!(
            peer_mtu, MTU_ENUM,
            "the peer's path MTU is 1024 (IBV_MTU_1024)"
        );
        (version, peer_mtu)
    }

    /// `xchg_bw_reports` (peer ≥ 5.33: 8-byte iterations; no per-port report).
    fn reports(&self, mine: &BwReport) -> BwReport {
        let size = self.xchg(&mine.size.to_be_bytes(), "the report's size");
        let iters = self.xchg(&mine.iters.to_be_bytes(), "the report's iterations");
        let peak = self.xchg(&mine.bw_peak.to_bits().to_be_bytes(), "the report's peak");
        let avg = self.xchg(&mine.bw_avg.to_bits().to_be_bytes(), "the report's average");
        let rate = self.xchg(&mine.msg_rate.to_bits().to_be_bytes(), "the report's rate");
        let u = |b: Vec<u8>| u64::from_be_bytes(b.try_into().unwrap());
        BwReport {
            size: u(size),
            iters: u(iters),
            bw_peak: f64::from_bits(u(peak)),
            bw_avg: f64::from_bits(u(avg)),
            msg_rate: f64::from_bits(u(rate)),
        }
    }

    /// Disconnects (the peer may have disconnected already), then checks the one receive
    /// still posted comes back flushed.
    fn close(self) {
        let st = self.conn.disconnect();
        assert!(
            st == STATUS_SUCCESS || st == STATUS_CONNECTION_INVALID,
            "control disconnect: {st:#x}"
        );
        let r = next(&self.cq, "the control receive, flushed");
        assert_eq!(
            (r.Status, r.RequestContext as usize),
            (STATUS_CANCELLED, CTX_CTL_RECV),
            "the control receive, flushed"
        );
        assert_eq!(self.conn.close(), STATUS_SUCCESS);
        self.msg.close();
        self.qp.close();
        self.cq.close();
    }
}

/// The test connection's objects.
struct Data {
    cq: Cq,
    qp: Qp,
    /// `[0, half)`: what this side sends, READs into or WRITEs from; `[half, 2·half)`: what
    /// the peer may READ or WRITE (perftest's layout).
    buf: Registered,
    half: usize,
}

impl Data {
    fn new(c: &Cluster, host: usize, pd: &Pd, t: &Test) -> Data {
        let a = c.adapter(host);
        let depth = t.window().max(1) + 1;
        let receive_depth = if t.tool.verb == Verb::Send {
            RECEIVE_DEPTH
        } else {
            1
        };
        let cq = a
            .create_cq(depth + receive_depth + 4, None)
            .expect("test CQ");
        let spec = QpSpec {
            receive_depth,
            initiator_depth: depth,
            receive_sge: 1,
            initiator_sge: 1,
            ..QpSpec::new(0xD0)
        };
        let qp = pd.create_qp(&cq, &cq, spec).expect("test QP");
        let half = t.half();
        let flags = NDK_MR_FLAG_ALLOW_LOCAL_WRITE
            | NDK_MR_FLAG_ALLOW_REMOTE_READ
            | NDK_MR_FLAG_ALLOW_REMOTE_WRITE;
        let buf = Registered::new(c.host(host), pd, (2 * half).div_ceil(4096), DATA_VA, flags);
        // What the peer READs (read programs): a pattern, so a READ moves real bytes.
        let pattern: Vec<u8> = (0..half).map(|i| (i * 7 + 3) as u8).collect();
        buf.mem.buf.write(half, &pattern);
        Data { cq, qp, buf, half }
    }

    /// This side's record (`set_up_connection`).
    fn dest(&self, c: &Cluster, host: usize, peer: SocketAddr, t: &Test, psn: u32) -> Dest {
        let ip = c.host(host).ip_for(peer.ip());
        Dest {
            lid: 0,
            out_reads: if t.tool.verb == Verb::Read {
                t.out_reads
            } else {
                1
            },
            qpn: self.qp.handle(),
            psn,
            rkey: self.buf.mr.remote_token(),
            vaddr: self.buf.mem.va + self.half as u64,
            gid: gid_of(ip),
            srqn: 0,
            gid_index: 0,
        }
    }

    fn post_receive(&self, i: u32, size: usize) {
        // CAST: size ≤ 1 MiB.
        let sge = self.buf.sge(0, size.max(1) as u32);
        assert_eq!(
            self.qp.receive(CTX_RECV + i as usize, &[sge]),
            STATUS_SUCCESS,
            "receive {i}"
        );
    }

    fn close(self) {
        self.buf.close();
        self.qp.close();
        self.cq.close();
    }
}

/// One side's run: the objects, the control connection up.
struct Run<'c> {
    c: &'c Cluster,
    host: usize,
    t: Test,
    role: Role,
    peer: SocketAddr,
    pd: Pd,
    ctl: Control,
    data: Data,
    /// The test connection.
    conn: Option<Connector>,
    /// The server's listener, closing.
    listener_close: Option<PendingClose>,
    report: Report,
}

impl<'c> Run<'c> {
    fn new(
        c: &'c Cluster,
        host: usize,
        t: Test,
        role: Role,
        peer: SocketAddr,
        ctl: Control,
        pd: Pd,
    ) -> Self {
        let data = Data::new(c, host, &pd, &t);
        Run {
            c,
            host,
            t,
            role,
            peer,
            pd,
            ctl,
            data,
            conn: None,
            listener_close: None,
            report: Report {
                tool: t.tool,
                role,
                size: t.size,
                iters: t.iters,
                peer_version: String::new(),
                peer_mtu: 0,
                ours: Dest::default(),
                theirs: Dest::default(),
                connect_attempts: 0,
                ird_ord: (0, 0),
                issued: 0,
                received: 0,
                max_outstanding: 0,
                samples: Vec::new(),
                elapsed: Duration::ZERO,
                peer_report: None,
                sent_report: None,
            },
        }
    }

    fn hs(&mut self, mine: Dest, what: &str) -> Dest {
        let theirs = self.ctl.handshake(&mine, what);
        self.report.ours = mine;
        self.report.theirs = theirs;
        theirs
    }

    /// Everything after the control connection, for either role.
    fn exchange(mut self, listener: Option<Listener>) -> Report {
        let (version, mtu) = self.ctl.preamble();
        self.report.peer_version = version;
        self.report.peer_mtu = mtu;
        let t = self.t;
        // create_rdma_cm_connection: a handshake of zeroed records, the test connection, a
        // second one.
        let zero = Dest::default();
        match self.role {
            Role::Client => {
                self.hs(zero, "the handshake before the test connection");
                self.connect_test();
            }
            Role::Server => {
                // perftest's server creates a second listener on the port now; an NDK
                // listener cannot be re-created on an address:port while a connector it
                // delivered lives (ndkpi.md §5.11), so the first one, still open, takes the
                // test connection too: the client sees the same REQ, REP, RTU.
                self.hs(zero, "the handshake before the test connection");
                self.accept_test(listener.expect("the listener"));
            }
        }
        self.hs(zero, "the handshake after the test connection");
        let cd = self.conn.as_ref().unwrap().connection_data(Some(0));
        self.report.ird_ord = (cd.ird, cd.ord);
        // set_up_connection: this side's record; then the program's handshakes.
        let psn = (0x5EED00 ^ (t.size as u32).wrapping_mul(2654435761)) & 0xFF_FFFF | 1;
        let mine = self.data.dest(self.c, self.host, self.peer, &t, psn);
        let mut theirs = zero;
        for i in 0..t.tool.handshakes_before_run() {
            theirs = self.hs(mine, &format!("handshake {} of the records", i + 1));
        }
        check_peer_dest(&t, &theirs);
        match (t.tool.verb, t.tool.kind, self.role) {
            (Verb::Send, Kind::Lat, _) => {
                let n = t.iters.min(RECEIVE_DEPTH);
                for i in 0..n {
                    self.data.post_receive(i, t.size);
                }
                self.hs(mine, "the synchronising handshake");
                self.send_lat(n);
                self.hs(mine, "the closing handshake");
            }
            (Verb::Send, Kind::Bw, role) => {
                let posted = if role == Role::Server {
                    let n = t.iters.min(RECEIVE_DEPTH);
                    for i in 0..n {
                        self.data.post_receive(i, t.size);
                    }
                    n
                } else {
                    0
                };
                self.hs(mine, "the synchronising handshake");
                match role {
                    Role::Client => self.issue_window(Verb::Send, &theirs),
                    Role::Server => self.receive_all(posted),
                }
                self.hs(mine, "the closing handshake");
            }
            (Verb::Write, Kind::Lat, _) => self.write_lat(&theirs),
            (Verb::Read, Kind::Lat, Role::Client) => {
                self.issue_window(Verb::Read, &theirs);
                self.hs(mine, "the closing handshake");
            }
            (Verb::Read, Kind::Lat, Role::Server) => {
                self.hs(mine, "the closing handshake");
            }
            (verb @ (Verb::Read | Verb::Write), Kind::Bw, Role::Client) => {
                self.issue_window(verb, &theirs);
                self.hs(mine, "the handshake before the reports");
                let r = self.bw_report();
                self.report.sent_report = Some(r);
                let back = self.ctl.reports(&r);
                self.report.peer_report = Some(back);
                self.hs(mine, "the closing handshake");
            }
            (Verb::Read | Verb::Write, Kind::Bw, Role::Server) => {
                self.hs(mine, "the handshake before the reports");
                // The server's own report is uninitialised in perftest; ours is zero.
                let theirs = self.ctl.reports(&BwReport::default());
                self.report.peer_report = Some(theirs);
                self.hs(mine, "the closing handshake");
            }
        }
        self.finish()
    }

    fn connect_test(&mut self) {
        let a = self.c.adapter(self.host);
        let src = sa(self.c.host(self.host).ip_for(self.peer.ip()), 0);
        let ird = self.t.read_limits();
        for attempt in 1..=CONNECT_ATTEMPTS {
            let conn = a.create_connector().expect("connector");
            let st = conn.connect(&self.data.qp, src, self.peer, ird, ird, b"");
            if st == STATUS_CONNECTION_REFUSED && attempt < CONNECT_ATTEMPTS {
                // perftest's server creates the test listener after the first handshake.
                assert_eq!(conn.close(), STATUS_SUCCESS);
                std::thread::sleep(CONNECT_RETRY);
                continue;
            }
            assert_eq!(st, STATUS_SUCCESS, "NdkConnect of the test connection");
            assert_eq!(conn.complete_connect(), STATUS_SUCCESS);
            self.report.connect_attempts = attempt;
            self.conn = Some(conn);
            return;
        }
        unreachable!()
    }

    fn accept_test(&mut self, l: Listener) {
        let conn = l.next_incoming();
        let ird = self.t.read_limits();
        assert_eq!(
            conn.accept_raw(&self.data.qp, ird, ird, b"").wait(),
            STATUS_SUCCESS,
            "NdkAccept of the test connection"
        );
        // perftest's server destroys its listener once connected: from here a REQ to the
        // port is refused. NDK keeps the close pending until the connectors it delivered
        // have closed (ndkpi.md §5.11).
        let pending = l.close_raw();
        assert_eq!(pending.inline, STATUS_PENDING, "NdkCloseListener pends");
        self.listener_close = Some(pending);
        self.report.connect_attempts = 1;
        self.conn = Some(conn);
    }

    /// The next completion: an initiator request's (NDK defines no length for those).
    fn expect_done(&self, ctx: usize, what: &str) -> NDK_RESULT {
        let r = next(&self.data.cq, what);
        assert_eq!(
            (r.Status, r.RequestContext as usize),
            (STATUS_SUCCESS, ctx),
            "{what}"
        );
        r
    }

    /// send_lat: the client sends first; every received message is `size` bytes.
    fn send_lat(&mut self, mut posted: u32) {
        let t = self.t;
        let sge = self.data.buf.sge(0, t.size as u32);
        let mut received = 0u32;
        let start = Instant::now();
        let mut last = start;
        for i in 0..t.iters {
            if self.role == Role::Server || i > 0 {
                // The receive and our send's completion may come in either order: count both.
                self.receive_one(&mut received, &mut posted, "the peer's ping");
            }
            assert_eq!(self.data.qp.send(CTX_DATA, &[sge], 0), STATUS_SUCCESS);
            self.report.issued += 1;
            self.report.max_outstanding = 1;
            self.expect_send_or_receive(&mut received, &mut posted);
            let now = Instant::now();
            self.report.samples.push((now - last) / 2);
            last = now;
        }
        if self.role == Role::Client {
            while received < t.iters {
                self.receive_one(&mut received, &mut posted, "the peer's last pong");
            }
        }
        self.report.elapsed = start.elapsed();
        self.report.received = received;
        assert_eq!(received, t.iters, "every ping of the peer received");
    }

    /// Waits for our SEND's completion, taking any receive that comes first.
    fn expect_send_or_receive(&mut self, received: &mut u32, posted: &mut u32) {
        loop {
            let r = next(&self.data.cq, "our SEND");
            if r.RequestContext as usize == CTX_DATA {
                assert_eq!(r.Status, STATUS_SUCCESS, "our SEND");
                return;
            }
            self.took_receive(&r, received, posted);
        }
    }

    fn receive_one(&mut self, received: &mut u32, posted: &mut u32, what: &str) {
        let before = *received;
        while *received == before {
            let r = next(&self.data.cq, what);
            assert_ne!(
                r.RequestContext as usize, CTX_DATA,
                "{what}: no SEND outstanding"
            );
            self.took_receive(&r, received, posted);
        }
    }

    fn took_receive(&mut self, r: &NDK_RESULT, received: &mut u32, posted: &mut u32) {
        let ctx = r.RequestContext as usize;
        assert!(ctx >= CTX_RECV, "a receive's completion: {ctx:#x}");
        assert_eq!(
            (r.Status, r.BytesTransferred as usize),
            (STATUS_SUCCESS, self.t.size),
            "received message {}",
            *received + 1
        );
        *received += 1;
        if *posted < self.t.iters {
            self.data.post_receive(*posted, self.t.size);
            *posted += 1;
        }
    }

    /// send_bw (server): takes `iters` messages, reposting receives as they complete.
    fn receive_all(&mut self, mut posted: u32) {
        let mut received = 0u32;
        let mut start = None;
        while received < self.t.iters {
            let r = next(&self.data.cq, "the peer's SEND");
            start.get_or_insert_with(Instant::now);
            self.took_receive(&r, &mut received, &mut posted);
        }
        self.report.elapsed = start.map_or(Duration::ZERO, |s| s.elapsed());
        self.report.received = received;
    }

    /// The client's data phase of send_bw, read_lat, read_bw and write_bw: `iters`
    /// operations, at most the window outstanding; READs land in the first half.
    fn issue_window(&mut self, verb: Verb, theirs: &Dest) {
        let t = self.t;
        let window = t.window();
        let len = t.size as u32;
        let sge = self.data.buf.sge(0, len);
        // perftest's remote address walks the peer's cycle buffer in cache-line steps for
        // small messages (increase_rem_addr); one address is as good for the wire.
        let (mut issued, mut done, mut outstanding) = (0u32, 0u32, 0u32);
        let start = Instant::now();
        let mut posted_at = std::collections::VecDeque::new();
        while done < t.iters {
            while issued < t.iters && outstanding < window {
                let st = match verb {
                    Verb::Send => self.data.qp.send(CTX_DATA, &[sge], 0),
                    Verb::Read => self
                        .data
                        .qp
                        .read(CTX_DATA, &[sge], theirs.vaddr, theirs.rkey, 0),
                    Verb::Write => {
                        self.data
                            .qp
                            .write(CTX_DATA, &[sge], theirs.vaddr, theirs.rkey, 0)
                    }
                };
                assert_eq!(st, STATUS_SUCCESS, "posting {verb:?} {issued}");
                posted_at.push_back(Instant::now());
                issued += 1;
                outstanding += 1;
                self.report.max_outstanding = self.report.max_outstanding.max(outstanding);
            }
            self.expect_done(CTX_DATA, &format!("our {verb:?} {done}"));
            let at = posted_at.pop_front().unwrap();
            if t.tool.kind == Kind::Lat {
                self.report.samples.push(at.elapsed());
            }
            done += 1;
            outstanding -= 1;
        }
        self.report.elapsed = start.elapsed();
        self.report.issued = issued;
    }

    /// write_lat: the server writes first; each side waits for the peer's iteration number
    /// in the last byte of its own buffer, then writes its own.
    fn write_lat(&mut self, theirs: &Dest) {
        let t = self.t;
        let len = t.size as u32;
        let sge = self.data.buf.sge(0, len);
        let poll_at = self.data.half + t.size - 1;
        let start = Instant::now();
        let mut last = start;
        let mut seen = 0u32;
        for n in 1..=t.iters {
            if !(self.role == Role::Server && n == 1) {
                seen += 1;
                let want = seen as u8;
                let mem = &self.data.buf.mem;
                wait(&format!("the peer's write {seen}"), || {
                    read(mem, poll_at, 1)[0] == want
                });
            }
            self.data.buf.mem.buf.write(t.size - 1, &[n as u8]);
            assert_eq!(
                self.data
                    .qp
                    .write(CTX_DATA, &[sge], theirs.vaddr, theirs.rkey, 0),
                STATUS_SUCCESS
            );
            self.report.issued += 1;
            self.report.max_outstanding = 1;
            self.expect_done(CTX_DATA, &format!("our WRITE {n}"));
            let now = Instant::now();
            self.report.samples.push((now - last) / 2);
            last = now;
        }
        if seen < t.iters {
            seen += 1;
            let want = seen as u8;
            let mem = &self.data.buf.mem;
            wait("the peer's last write", || read(mem, poll_at, 1)[0] == want);
        }
        self.report.elapsed = start.elapsed();
        self.report.received = seen;
    }

    fn bw_report(&self) -> BwReport {
        let r = &self.report;
        BwReport {
            size: r.size as u64,
            iters: u64::from(r.iters),
            bw_peak: r.bw_avg(),
            bw_avg: r.bw_avg(),
            msg_rate: r.msg_rate(),
        }
    }

    /// Disconnects both connections (the client first, as perftest's destroy_ctx), checks
    /// the test QP has nothing left but flushed receives, closes everything.
    fn finish(mut self) -> Report {
        let conn = self.conn.take().expect("the test connection");
        let st = conn.disconnect();
        assert!(
            st == STATUS_SUCCESS || st == STATUS_CONNECTION_INVALID,
            "test disconnect: {st:#x}"
        );
        // Receives still posted come back flushed; nothing else may.
        let posted_left = if self.t.tool.verb == Verb::Send {
            // Posted = min(iters, depth) + reposts up to iters; all but `received` consumed.
            let posted = if self.t.tool.kind == Kind::Bw && self.role == Role::Client {
                0
            } else {
                self.t.iters
            };
            posted - self.report.received.min(posted)
        } else {
            0
        };
        for i in 0..posted_left {
            let r = next(&self.data.cq, "a receive, flushed");
            assert_eq!(r.Status, STATUS_CANCELLED, "flushed receive {i}");
        }
        assert!(
            self.data.cq.results(8).is_empty(),
            "nothing else on the test CQ"
        );
        assert_eq!(conn.close(), STATUS_SUCCESS);
        self.ctl.close();
        if let Some(pending) = self.listener_close.take() {
            pending.wait();
        }
        self.data.close();
        self.pd.close();
        self.report
    }
}

/// What the peer's record must hold for the tool.
fn check_peer_dest(t: &Test, d: &Dest) {
    assert_ne!(d.qpn, 0, "the peer's QP number: {d:?}");
    assert!(d.psn <= 0xFF_FFFF, "a 24-bit PSN: {d:?}");
    if t.tool.verb != Verb::Send {
        assert_ne!(d.rkey, 0, "the peer's rkey: {d:?}");
        assert_ne!(d.vaddr, 0, "the peer's buffer: {d:?}");
    }
    if t.tool.verb == Verb::Read {
        assert_eq!(
            d.out_reads, t.out_reads,
            "the peer's outstanding reads: {d:?}"
        );
    }
}

/// The NDK side as perftest's client (`ib_*_* -R ... <server>`) against `server`.
pub fn client(c: &Cluster, host: usize, server: SocketAddr, t: Test) -> Report {
    let a = c.adapter(host);
    let pd = a.create_pd().expect("PD");
    let (cq, qp, msg) = Control::objects(c, host, &pd);
    Control::post_receive(&qp, &msg);
    let conn = a.create_connector().expect("control connector");
    let src = sa(c.host(host).ip_for(server.ip()), 0);
    let st = conn.connect(&qp, src, server, 0, 0, b"");
    assert_eq!(st, STATUS_SUCCESS, "NdkConnect of the control connection");
    assert_eq!(conn.complete_connect(), STATUS_SUCCESS);
    let ctl = Control {
        cq,
        qp,
        msg,
        conn,
        writes_first: true,
    };
    Run::new(c, host, t, Role::Client, server, ctl, pd).exchange(None)
}

/// Only the control connection's NdkConnect (the objects closed again): its status.
pub fn control_connect_status(c: &Cluster, host: usize, server: SocketAddr) -> NTSTATUS {
    let a = c.adapter(host);
    let pd = a.create_pd().expect("PD");
    let (cq, qp, msg) = Control::objects(c, host, &pd);
    let conn = a.create_connector().expect("control connector");
    let src = sa(c.host(host).ip_for(server.ip()), 0);
    let st = conn.connect(&qp, src, server, 0, 0, b"");
    if st == STATUS_SUCCESS {
        assert_eq!(conn.complete_connect(), STATUS_SUCCESS);
        assert_eq!(conn.disconnect(), STATUS_SUCCESS);
    }
    assert_eq!(conn.close(), STATUS_SUCCESS);
    msg.close();
    qp.close();
    cq.close();
    pd.close();
    st
}

/// The NDK side as perftest's server, listening before the Linux client starts.
pub struct Server {
    listener: Listener,
    host: usize,
    addr: SocketAddr,
    t: Test,
}

impl Server {
    /// Listens on `addr` for the control connection.
    pub fn listen(c: &Cluster, host: usize, addr: SocketAddr, t: Test) -> Server {
        let listener = c.adapter(host).create_listener().expect("listener");
        assert_eq!(listener.listen(addr), STATUS_SUCCESS, "NdkListen");
        Server {
            listener,
            host,
            addr,
            t,
        }
    }

    /// Closes the listener without serving (no client came).
    pub fn close(self) {
        assert!(
            self.listener.incoming.calls() == 0,
            "no connection was offered"
        );
        assert_eq!(self.listener.close(), STATUS_SUCCESS);
    }

    /// Serves one client's run.
    pub fn serve(self, c: &Cluster) -> Report {
        let a = c.adapter(self.host);
        let pd = a.create_pd().expect("PD");
        let (cq, qp, msg) = Control::objects(c, self.host, &pd);
        Control::post_receive(&qp, &msg);
        let conn = self.listener.next_incoming();
        let peer = conn.peer_address().expect("the client's address");
        assert_eq!(
            conn.accept_raw(&qp, 0, 0, b"").wait(),
            STATUS_SUCCESS,
            "NdkAccept of the control connection"
        );
        let ctl = Control {
            cq,
            qp,
            msg,
            conn,
            writes_first: false,
        };
        Run::new(c, self.host, self.t, Role::Server, peer, ctl, pd).exchange(Some(self.listener))
    }
}

/// One run against the Linux guest of `r`: the Linux program in the `linux` role (started
/// first when it is the server, waited for until it listens), the NDK side opposite; the
/// NDK side's report and the program's output.
pub fn run_against_linux(r: &Rig<'_>, t: Test, linux: Role) -> (Report, Output) {
    let args = t.linux_args();
    let name = t.tool.name();
    match linux {
        Role::Server => {
            let server = r.guest().spawn(&format!("{name} {args}")).unwrap();
            r.guest()
                .wait_listening(t.port, COMMAND_TIMEOUT)
                .unwrap_or_else(|e| panic!("{name} listens: {e}"));
            let report = client(&r.c, 0, sa(r.guest_ip(), t.port), t);
            (report, server.wait(COMMAND_TIMEOUT).unwrap())
        }
        Role::Client => {
            let server = Server::listen(&r.c, 0, sa(r.host_ip(), t.port), t);
            let cmd = format!("{name} {args} {}", r.host_ip());
            let client = r.guest().spawn(&cmd).unwrap();
            let report = server.serve(&r.c);
            (report, client.wait(COMMAND_TIMEOUT).unwrap())
        }
    }
}

/// A row of perftest's result table (`#bytes #iterations ...`), every column a number.
pub fn table_row(stdout: &str, size: usize, iters: u32) -> Option<Vec<f64>> {
    stdout.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() >= 5 && cols[0] == size.to_string() && cols[1] == iters.to_string() {
            cols.iter().map(|c| c.parse::<f64>().ok()).collect()
        } else {
            None
        }
    })
}

/// The lines perftest prints for its peer's record over rdma_cm: `BASIC_ADDR_FMT` (its
/// control connection's verb is SEND, so no outstanding reads, rkey or address follow) and
/// the GID (`PERF_GID_FMT`, decimal bytes).
pub fn expected_remote_lines(d: &Dest) -> String {
    // C's `%#04x` prints 0 without its 0x; QPN and PSN are not 0 here.
    let lid = if d.lid == 0 {
        "0000".to_string()
    } else {
        format!("{:#04x}", d.lid)
    };
    let gid: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    format!(
        " remote address: LID {lid} QPN {:#06x} PSN {:#06x}\n GID: {}",
        d.qpn,
        d.psn,
        gid.join(":")
    )
}

/// The two lines perftest printed for its peer's record.
pub fn printed_remote(stdout: &str) -> Option<String> {
    let mut lines = stdout.lines();
    let first = lines.find(|l| l.trim_start().starts_with("remote address:"))?;
    let gid = lines.next()?;
    Some(format!("{first}\n{gid}"))
}
