//! Wireshark as an independent judge of a captured CM exchange (issue 11): `tshark` reads a
//! pcap the model's fabric wrote and this module asserts that every CM MAD decodes as
//! InfiniBand CM with no expert complaint, that each connection goes REQ, REP, RTU, DREQ,
//! DREP, and that the REQ's RDMA CM addressing (service ID and the IP CM private data
//! Wireshark decodes from the cma_hdr, cm.md §5) names the endpoints the caller expected.
//!
//! One line for a capture holding one connection:
//! `common::tshark::assert_cm_exchange(&pcap, active, passive)` (skips itself, returning
//! `None`, where tshark is not installed, except in CI: [`tshark_or_skip`]). Several
//! connections, private data or a lossy fabric: [`check_cm_capture`] with one [`CmExpect`]
//! per connection.
//!
//! Robust across tshark 3.x and 4.x: only `-T fields` output is read, byte fields are
//! accepted with or without the `:` separators 3.x prints, integers in decimal or `0x` hex,
//! and RoCEv2 decoding is asked for explicitly (`-d udp.port==4791,infiniband`) rather than
//! relying on the port being registered by default.
//!
//! The values this module expects (attribute IDs, the TCP port-space service ID) are
//! written out here from IBTA vol. 1 ch. 12 / Annex A11 and cm.md, not taken from the
//! driver, so a wrong constant in `src/cm/` cannot agree with itself.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;

/// RoCEv2's UDP destination port.
pub const ROCEV2_PORT: u16 = 4791;
/// The CM management class (IBTA 13.4.4).
pub const MGMT_CLASS_CM: u64 = 0x07;
/// CM attribute IDs (IBTA Table 102).
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
}
/// The order of a connection's lifetime on the wire.
pub const LIFETIME: [u16; 5] = [attr::REQ, attr::REP, attr::RTU, attr::DREQ, attr::DREP];
/// BTH opcode of a UD SEND Only (IBTA Table 38).
pub const UD_SEND_ONLY: u64 = 0x64;
/// The GSI's well-known Q_Key (IBTA 13.5.1).
pub const QP1_QKEY: u64 = 0x8001_0000;
/// RDMA CM's TCP port space (cm.md §5.1): prefix 0x0000000001, protocol 0x06, then the port.
pub const TCP_SERVICE_ID_BASE: u64 = 0x0000_0000_0106_0000;
/// REQ private data after the 36-byte cma_hdr (cm.md §5.2).
pub const REQ_CONSUMER_DATA: usize = 56;
/// REP private data (IBTA Table 110).
pub const REP_PRIVATE_DATA: usize = 196;

/// The service ID a REQ to `port` carries.
pub const fn tcp_service_id(port: u16) -> u64 {
    TCP_SERVICE_ID_BASE | port as u64
}

/// Name of a CM attribute, for messages.
pub fn attr_name(a: u16) -> &'static str {
    match a {
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        _ => "?",
    }
}

/// What the fabric did to the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Every MAD arrived once: exactly REQ, REP, RTU, DREQ, DREP per connection.
    Clean,
    /// Drops and duplicates: a message may repeat (a retransmission or a duplicate) and MRAs
    /// may answer duplicate REQs/REPs, but each message first appears in lifetime order.
    Lossy,
}

/// One connection the capture must hold.
#[derive(Clone, Copy, Debug)]
pub struct CmExpect<'a> {
    /// The active side: the REQ's source IP and the cma_hdr's source port. Port 0 stands for
    /// an ephemeral port the caller does not know: any source port but 0 matches.
    pub active: SocketAddr,
    /// The passive side: the REQ's destination IP and the port in the service ID.
    pub passive: SocketAddr,
    /// The consumer's REQ private data (after the cma_hdr), zero-padded to 56 on the wire;
    /// `None`: not checked.
    pub req_private_data: Option<&'a [u8]>,
    /// The REP private data, zero-padded to 196; `None`: not checked.
    pub rep_private_data: Option<&'a [u8]>,
    /// Clean or lossy fabric.
    pub delivery: Delivery,
}

impl CmExpect<'_> {
    /// A connection from `active` to `passive` on a clean fabric, private data unchecked.
    pub fn new(active: SocketAddr, passive: SocketAddr) -> CmExpect<'static> {
        CmExpect {
            active,
            passive,
            req_private_data: None,
            rep_private_data: None,
            delivery: Delivery::Clean,
        }
    }
}

/// One CM MAD as tshark decoded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmFrame {
    /// `frame.number`.
    pub number: u64,
    /// The attribute ID.
    pub attribute: u16,
    /// The MAD's transaction ID.
    pub tid: u64,
    /// Sender's and receiver's IP (from the IP header).
    pub ip_src: IpAddr,
    /// See `ip_src`.
    pub ip_dst: IpAddr,
    /// The message's Local and Remote Communication IDs (0 where the message has none).
    pub local_comm_id: u32,
    /// See `local_comm_id`.
    pub remote_comm_id: u32,
}

/// A decoded REQ's addressing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqFields {
    /// ServiceID.
    pub service_id: u64,
    /// ServiceID split by Wireshark (Annex A11): protocol byte and destination port.
    pub sid_protocol: u64,
    /// See `sid_protocol`.
    pub sid_dport: u16,
    /// IP CM header: version byte as Wireshark shows it, source port, addresses.
    pub ip_version: u64,
    /// See `ip_version`.
    pub src_port: u16,
    /// See `ip_version`.
    pub src_ip: IpAddr,
    /// See `ip_version`.
    pub dst_ip: IpAddr,
    /// IP CM Consumer PrivateData.
    pub private_data: Vec<u8>,
}

/// One connection found in the capture.
#[derive(Clone, Debug)]
pub struct CmConnection {
    /// The active side's communication ID.
    pub active_id: u32,
    /// The passive side's (from the REP).
    pub passive_id: Option<u32>,
    /// Its MADs in capture order.
    pub frames: Vec<CmFrame>,
    /// The first REQ's addressing.
    pub req: ReqFields,
    /// The first REP's private data.
    pub rep_private_data: Option<Vec<u8>>,
}

impl CmConnection {
    /// The attributes in capture order.
    pub fn attributes(&self) -> Vec<u16> {
        self.frames.iter().map(|f| f.attribute).collect()
    }
}

/// What a checked capture held.
#[derive(Clone, Debug)]
pub struct CmCapture {
    /// The tshark version line.
    pub version: String,
    /// Frames in the file.
    pub frames: usize,
    /// CM MADs among them.
    pub cm_mads: usize,
    /// The connections, in the order their REQs appear.
    pub connections: Vec<CmConnection>,
}

/// Whether this run is CI's: the `CI` environment variable set and not empty, `0` or
/// `false` (`.ci/run` sets `CI=true`, as CI services do).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// Whether a check that needs tshark can run. Without tshark it fails the test in CI
/// ([`in_ci`]: a check CI is meant to run must not pass by skipping itself) and elsewhere
/// prints a NOTICE naming `what` and returns false, and the caller skips the check.
pub fn tshark_or_skip(what: &str) -> bool {
    if tshark_available() {
        return true;
    }
    assert!(
        !in_ci(),
        "tshark is not installed, and CI (CI={:?}) must run {what}: install it (Debian: \
         apt-get install tshark; .ci/run does) or unset CI to let the check skip itself",
        std::env::var("CI").unwrap_or_default()
    );
    eprintln!("NOTICE: tshark not installed; skipping {what} (in CI this fails)");
    false
}

/// Whether tshark runs here.
pub fn tshark_available() -> bool {
    tshark_version().is_some()
}

/// tshark's first version line (`TShark (Wireshark) 4.0.17 ...`), asked once per test
/// process (each tshark start costs about half a second).
pub fn tshark_version() -> Option<String> {
    static VERSION: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            let o = Command::new("tshark").arg("--version").output().ok()?;
            o.status.success().then(|| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
        })
        .clone()
}

/// Fields read per frame; multi-valued fields (expert infos) are joined with [`AGGREGATOR`].
const FIELDS: [&str; 36] = [
    "frame.number",
    "frame.protocols",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.message",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "udp.dstport",
    "infiniband.bth.destqp",
    "infiniband.mad.baseversion",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.classversion",
    "infiniband.mad.method",
    "infiniband.mad.transactionid",
    "infiniband.mad.attributeid",
    "infiniband.cm.req",
    "infiniband.cm.req.serviceid",
    "infiniband.cm.req.serviceid.protocol",
    "infiniband.cm.req.serviceid.dport",
    "infiniband.cm.req.ip_cm.ipv",
    "infiniband.cm.req.ip_cm.sport",
    "infiniband.cm.req.ip_cm.sip4",
    "infiniband.cm.req.ip_cm.dip4",
    "infiniband.cm.req.ip_cm.sip6",
    "infiniband.cm.req.ip_cm.dip6",
    "infiniband.cm.req.ip_cm.private",
    "infiniband.cm.rep",
    "infiniband.cm.rep.remotecommid",
    "infiniband.cm.rep.private",
    "infiniband.cm.rtu.localcommid",
    "infiniband.cm.rtu.remotecommid",
    "infiniband.cm.dreq.localcommid",
    "infiniband.cm.dreq.remotecommid",
    "infiniband.cm.drsp.localcommid",
];
/// Fields appended after [`FIELDS`] (kept apart so the array above stays readable).
const MORE_FIELDS: [&str; 9] = [
    "infiniband.bth.opcode",
    "infiniband.bth.p_key",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.cm.drsp.remotecommid",
    "ip.checksum.status",
    "udp.checksum.status",
    "infiniband.cm.rej.localcommid",
    "infiniband.cm.rej.remotecommid",
];
/// Joins the occurrences of a repeated field; no value of the fields above contains it.
const AGGREGATOR: char = '|';
/// Expert severities (epan/proto.h PI_WARN, PI_ERROR): a warning or an error about a CM
/// MAD is a complaint about our bytes.
const PI_WARN: u64 = 0x0060_0000;

/// Wireshark verifies the IPv4 header and UDP checksums only when asked; a bad one is then
/// an expert error (and a RoCEv2 receiver would drop the frame).
const CHECKSUMS: [&str; 4] = [
    "-o",
    "ip.check_checksum:TRUE",
    "-o",
    "udp.check_checksum:TRUE",
];
/// `*.checksum.status` values (epan/proto.h): good, not present (IPv4 RoCEv2 sends UDP
/// checksum 0).
const CHECKSUM_GOOD: u64 = 1;
const CHECKSUM_NOT_PRESENT: u64 = 3;

/// A frame's fields by name.
#[derive(Clone)]
struct Row(BTreeMap<&'static str, String>);

impl Row {
    fn get(&self, f: &str) -> &str {
        self.0.get(f).map_or("", String::as_str)
    }
    fn has(&self, f: &str) -> bool {
        !self.get(f).is_empty()
    }
    fn num(&self, f: &str) -> Option<u64> {
        parse_uint(self.get(f))
    }
    fn need(&self, f: &str) -> u64 {
        self.num(f).unwrap_or_else(|| {
            panic!(
                "frame {}: field {f} missing or not a number: {:?}",
                self.get("frame.number"),
                self.get(f)
            )
        })
    }
    fn ip(&self, f: &str) -> Option<IpAddr> {
        self.get(f).parse().ok()
    }
    fn bytes(&self, f: &str) -> Option<Vec<u8>> {
        self.has(f).then(|| parse_bytes(self.get(f)))
    }
}

/// An integer as tshark prints it: decimal, or `0x` hex (a value string may follow a hex
/// field's number in some versions, separated by a space: only the number is read).
fn parse_uint(s: &str) -> Option<u64> {
    let s = s.split([' ', AGGREGATOR]).next()?.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Bytes as tshark prints them: hex, with `:` between bytes in 3.x, without in 4.x.
fn parse_bytes(s: &str) -> Vec<u8> {
    let hex: String = s.chars().filter(char::is_ascii_hexdigit).collect();
    assert!(
        hex.len().is_multiple_of(2) && hex.len() == s.chars().filter(|&c| c != ':').count(),
        "not a byte field: {s:?}"
    );
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Runs tshark over `pcap` and returns one row per frame; a capture already decoded (the same
/// bytes) is not decoded again.
fn read_rows(pcap: &Path) -> Vec<Row> {
    type Decoded = std::sync::Mutex<std::collections::HashMap<Vec<u8>, Vec<Row>>>;
    static DECODED: std::sync::OnceLock<Decoded> = std::sync::OnceLock::new();
    let bytes = std::fs::read(pcap).expect("read the capture");
    let decoded = DECODED.get_or_init(Default::default);
    if let Some(rows) = decoded.lock().unwrap().get(&bytes) {
        return rows.clone();
    }
    let rows = decode_rows(pcap);
    decoded.lock().unwrap().insert(bytes, rows.clone());
    rows
}

fn decode_rows(pcap: &Path) -> Vec<Row> {
    let names: Vec<&'static str> = FIELDS.iter().chain(&MORE_FIELDS).copied().collect();
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={ROCEV2_PORT},infiniband")])
        .args(CHECKSUMS)
        .args(["-T", "fields", "-E", "header=n", "-E", "separator=/t"])
        .args(["-E", "occurrence=a", "-E"])
        .arg(format!("aggregator={AGGREGATOR}"));
    for n in &names {
        cmd.args(["-e", n]);
    }
    let out = cmd.output().expect("run tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tshark failed on {}: {stderr}",
        pcap.display()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), names.len(), "one column per field: {line:?}");
            Row(names
                .iter()
                .zip(cols)
                .map(|(n, v)| (*n, v.to_owned()))
                .collect())
        })
        .collect()
}

/// The `-V` decode of frame `number`, for failure messages.
fn verbose(pcap: &Path, number: u64) -> String {
    Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={ROCEV2_PORT},infiniband")])
        .args(CHECKSUMS)
        .args(["-V", "-Y", &format!("frame.number=={number}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn comm_id(row: &Row, f: &str) -> u32 {
    u32::try_from(row.need(f)).expect("a 32-bit communication ID")
}

/// Checks `pcap` against `expect` (one entry per connection, any order) and returns what it
/// found; `None` (after printing why) where tshark is not installed. Panics, with the
/// offending frame's full decode where there is one, on:
/// - any frame tshark calls malformed, or any warning/error expert info on a CM MAD (IP and
///   UDP checksum verification on: a bad IPv4 header checksum or a bad UDP checksum fails);
/// - a MAD to QP1 that is not a UD SEND Only from QP1 with P_Key 0xFFFF and Q_Key
///   0x80010000, or not BaseVersion 1, class CM, ClassVersion 2, Method SEND, or whose
///   attribute is not one of REQ/MRA/REJ/REP/RTU/DREQ/DREP;
/// - a REJ at all (the caller expects connections to succeed);
/// - per connection (one side disconnects; a DREQ crossing a DREQ is not an expected
///   exchange): attributes other than exactly REQ, REP, RTU, DREQ, DREP (Clean) or, on
///   a Lossy fabric, first appearances out of that order, repeats of a message not yet due,
///   or a missing message;
/// - a REQ whose service ID is not `0x0000000001060000 | passive port` (also as Wireshark's
///   split: protocol 6, destination port), whose IP CM header does not name the active
///   IP/port and the passive IP with the endpoints' IP version, or whose private data
///   differs; a REP whose private data differs;
/// - a MAD whose IP source/destination are not the two endpoints;
/// - connections in the capture that were not expected, or expected ones missing.
pub fn check_cm_capture(pcap: &Path, expect: &[CmExpect<'_>]) -> Option<CmCapture> {
    if !tshark_or_skip(&format!("the Wireshark decode check of {}", pcap.display())) {
        return None;
    }
    let version = tshark_version().expect("tshark answered --version a moment ago");
    let rows = read_rows(pcap);
    let mut cm: Vec<(CmFrame, &Row)> = Vec::new();
    for row in &rows {
        let number = row.need("frame.number");
        assert!(
            !row.has("_ws.malformed"),
            "tshark: frame {number} is malformed:\n{}",
            verbose(pcap, number)
        );
        let to_qp1 = row.num("udp.dstport") == Some(u64::from(ROCEV2_PORT))
            && row.num("infiniband.bth.destqp") == Some(1);
        if !to_qp1 {
            continue;
        }
        let complaints: Vec<&str> = row
            .get("_ws.expert.severity")
            .split(AGGREGATOR)
            .zip(row.get("_ws.expert.message").split(AGGREGATOR))
            .filter(|(sev, _)| parse_uint(sev).is_some_and(|s| s >= PI_WARN))
            .map(|(_, msg)| msg)
            .collect();
        assert!(
            complaints.is_empty(),
            "tshark complains about CM MAD frame {number}: {complaints:?}\n{}",
            verbose(pcap, number)
        );
        assert!(
            row.get("frame.protocols").contains("infiniband"),
            "frame {number} not dissected as InfiniBand: {}",
            row.get("frame.protocols")
        );
        if row.has("ip.checksum.status") {
            assert_eq!(
                row.need("ip.checksum.status"),
                CHECKSUM_GOOD,
                "frame {number}: IPv4 header checksum"
            );
        }
        let udp = row.need("udp.checksum.status");
        assert!(
            udp == CHECKSUM_GOOD || udp == CHECKSUM_NOT_PRESENT,
            "frame {number}: UDP checksum status {udp}"
        );
        // cm.md §2.2: a UD SEND Only from QP1 to QP1, default P_Key, Q_Key 0x80010000.
        let transport = (
            row.need("infiniband.bth.opcode"),
            row.need("infiniband.bth.p_key"),
            row.need("infiniband.deth.q_key"),
            row.need("infiniband.deth.srcqp"),
        );
        assert_eq!(
            transport,
            (UD_SEND_ONLY, 0xFFFF, QP1_QKEY, 1),
            "frame {number}: (BTH opcode, P_Key, DETH Q_Key, source QP) of a CM MAD"
        );
        let header = (
            row.need("infiniband.mad.baseversion"),
            row.need("infiniband.mad.mgmtclass"),
            row.need("infiniband.mad.classversion"),
            row.need("infiniband.mad.method"),
        );
        assert_eq!(
            header,
            (1, MGMT_CLASS_CM, 2, 0x03),
            "frame {number}: (BaseVersion, MgmtClass, ClassVersion, Method) of a CM MAD"
        );
        let attribute = u16::try_from(row.need("infiniband.mad.attributeid")).unwrap();
        let (local, remote) = match attribute {
            attr::REQ => (comm_id(row, "infiniband.cm.req"), 0),
            attr::REP => (
                comm_id(row, "infiniband.cm.rep"),
                comm_id(row, "infiniband.cm.rep.remotecommid"),
            ),
            attr::RTU => (
                comm_id(row, "infiniband.cm.rtu.localcommid"),
                comm_id(row, "infiniband.cm.rtu.remotecommid"),
            ),
            attr::DREQ => (
                comm_id(row, "infiniband.cm.dreq.localcommid"),
                comm_id(row, "infiniband.cm.dreq.remotecommid"),
            ),
            attr::DREP => (
                comm_id(row, "infiniband.cm.drsp.localcommid"),
                comm_id(row, "infiniband.cm.drsp.remotecommid"),
            ),
            attr::REJ => panic!(
                "frame {number}: a REJ in an exchange expected to succeed:\n{}",
                verbose(pcap, number)
            ),
            // Wireshark 4.0 does not decode the MRA body; its IDs are not needed.
            attr::MRA => (0, 0),
            other => panic!("frame {number}: attribute {other:#06x} is not a CM message"),
        };
        let ip = |v4: &str, v6: &str| {
            row.ip(v4)
                .or_else(|| row.ip(v6))
                .unwrap_or_else(|| panic!("frame {number}: no IP address"))
        };
        cm.push((
            CmFrame {
                number,
                attribute,
                tid: row.need("infiniband.mad.transactionid"),
                ip_src: ip("ip.src", "ipv6.src"),
                ip_dst: ip("ip.dst", "ipv6.dst"),
                local_comm_id: local,
                remote_comm_id: remote,
            },
            row,
        ));
    }

    // Group by connection: the REQ names the active ID, the REP joins the passive one.
    let mut connections: Vec<CmConnection> = Vec::new();
    let mut mras: Vec<CmFrame> = Vec::new();
    for (f, row) in &cm {
        let find = |conns: &[CmConnection], id: u32| {
            conns
                .iter()
                .position(|c| c.active_id == id || c.passive_id == Some(id))
        };
        match f.attribute {
            attr::REQ => {
                if let Some(i) = find(&connections, f.local_comm_id) {
                    connections[i].frames.push(f.clone());
                    continue;
                }
                connections.push(CmConnection {
                    active_id: f.local_comm_id,
                    passive_id: None,
                    frames: vec![f.clone()],
                    req: req_fields(row, f.number),
                    rep_private_data: None,
                });
            }
            attr::MRA => mras.push(f.clone()),
            _ => {
                let i = find(&connections, f.remote_comm_id)
                    .or_else(|| find(&connections, f.local_comm_id))
                    .unwrap_or_else(|| {
                        panic!(
                            "frame {}: {} names communication IDs {:#x}/{:#x} of no REQ",
                            f.number,
                            attr_name(f.attribute),
                            f.local_comm_id,
                            f.remote_comm_id
                        )
                    });
                let c = &mut connections[i];
                if f.attribute == attr::REP {
                    assert_eq!(f.remote_comm_id, c.active_id, "frame {}", f.number);
                    assert!(
                        c.passive_id.is_none_or(|p| p == f.local_comm_id),
                        "frame {}: a second passive ID",
                        f.number
                    );
                    c.passive_id = Some(f.local_comm_id);
                    if c.rep_private_data.is_none() {
                        c.rep_private_data = row.bytes("infiniband.cm.rep.private");
                    }
                }
                c.frames.push(f.clone());
            }
        }
    }

    let lossy = expect.iter().any(|e| e.delivery == Delivery::Lossy);
    assert!(
        lossy || mras.is_empty(),
        "MRAs on a clean fabric: frames {:?}",
        mras.iter().map(|f| f.number).collect::<Vec<_>>()
    );
    assert_eq!(
        connections.len(),
        expect.len(),
        "connections in the capture (active IDs {:x?})",
        connections.iter().map(|c| c.active_id).collect::<Vec<_>>()
    );
    let mut matched = vec![false; connections.len()];
    for e in expect {
        let i = connections
            .iter()
            .enumerate()
            .position(|(i, c)| {
                !matched[i]
                    && c.req.src_ip == e.active.ip()
                    && (e.active.port() == 0 || c.req.src_port == e.active.port())
                    && c.req.dst_ip == e.passive.ip()
                    && c.req.sid_dport == e.passive.port()
            })
            .unwrap_or_else(|| {
                panic!(
                    "no REQ from {} to {}; REQs: {:?}",
                    e.active,
                    e.passive,
                    connections.iter().map(|c| &c.req).collect::<Vec<_>>()
                )
            });
        matched[i] = true;
        check_connection(&connections[i], e);
    }
    Some(CmCapture {
        version,
        frames: rows.len(),
        cm_mads: cm.len(),
        connections,
    })
}

/// The REQ's RDMA CM fields (frame `number`).
fn req_fields(row: &Row, number: u64) -> ReqFields {
    let ip_version = row.need("infiniband.cm.req.ip_cm.ipv");
    let addr = |v4: &str, v6: &str| {
        row.ip(v4).or_else(|| row.ip(v6)).unwrap_or_else(|| {
            panic!("frame {number}: Wireshark decoded no IP CM address ({v4} / {v6})")
        })
    };
    ReqFields {
        service_id: row.need("infiniband.cm.req.serviceid"),
        sid_protocol: row.need("infiniband.cm.req.serviceid.protocol"),
        sid_dport: u16::try_from(row.need("infiniband.cm.req.serviceid.dport")).unwrap(),
        ip_version,
        src_port: u16::try_from(row.need("infiniband.cm.req.ip_cm.sport")).unwrap(),
        src_ip: addr(
            "infiniband.cm.req.ip_cm.sip4",
            "infiniband.cm.req.ip_cm.sip6",
        ),
        dst_ip: addr(
            "infiniband.cm.req.ip_cm.dip4",
            "infiniband.cm.req.ip_cm.dip6",
        ),
        private_data: row
            .bytes("infiniband.cm.req.ip_cm.private")
            .unwrap_or_default(),
    }
}

/// `data` zero-padded to `len`.
fn padded(data: &[u8], len: usize) -> Vec<u8> {
    assert!(data.len() <= len, "expected private data longer than {len}");
    let mut v = data.to_vec();
    v.resize(len, 0);
    v
}

fn check_connection(c: &CmConnection, e: &CmExpect<'_>) {
    let who = format!("connection {} -> {}", e.active, e.passive);
    let r = &c.req;
    assert_eq!(
        r.service_id,
        tcp_service_id(e.passive.port()),
        "{who}: REQ service ID {:#018x}",
        r.service_id
    );
    assert_eq!(
        (r.sid_protocol, r.sid_dport),
        (0x06, e.passive.port()),
        "{who}: service ID protocol (TCP) and port as Wireshark splits it"
    );
    // Wireshark shows the cma_hdr's IP version byte as stored (0x40 / 0x60) in 4.0; older
    // versions mask the nibble. Either way its high nibble, or the value, is 4 or 6.
    let ipv = if r.ip_version > 0xF {
        r.ip_version >> 4
    } else {
        r.ip_version
    };
    let want_ipv = if e.active.is_ipv4() { 4 } else { 6 };
    assert_eq!(ipv, want_ipv, "{who}: IP CM IP version {:#x}", r.ip_version);
    let want_port = if e.active.port() == 0 {
        assert_ne!(r.src_port, 0, "{who}: IP CM source port");
        r.src_port
    } else {
        e.active.port()
    };
    assert_eq!(
        (r.src_ip, r.src_port, r.dst_ip),
        (e.active.ip(), want_port, e.passive.ip()),
        "{who}: IP CM source IP, source port, destination IP"
    );
    if let Some(d) = e.req_private_data {
        assert_eq!(
            r.private_data,
            padded(d, REQ_CONSUMER_DATA),
            "{who}: REQ consumer private data"
        );
    }
    if let Some(d) = e.rep_private_data {
        assert_eq!(
            c.rep_private_data.as_deref(),
            Some(&padded(d, REP_PRIVATE_DATA)[..]),
            "{who}: REP private data"
        );
    }
    let ends = [e.active.ip(), e.passive.ip()];
    for f in &c.frames {
        assert!(
            ends.contains(&f.ip_src) && ends.contains(&f.ip_dst) && f.ip_src != f.ip_dst,
            "{who}: frame {} travels {} -> {}",
            f.number,
            f.ip_src,
            f.ip_dst
        );
    }
    // Who sends what: the REQ and RTU come from the active side, the REP from the passive.
    for f in &c.frames {
        let from_active = f.ip_src == e.active.ip();
        match f.attribute {
            attr::REQ | attr::RTU => assert!(from_active, "{who}: frame {}", f.number),
            attr::REP => assert!(!from_active, "{who}: frame {}", f.number),
            _ => {}
        }
    }
    let attrs = c.attributes();
    let names: Vec<&str> = attrs.iter().map(|&a| attr_name(a)).collect();
    match e.delivery {
        Delivery::Clean => assert_eq!(
            attrs,
            LIFETIME.to_vec(),
            "{who}: messages {names:?}, frames {:?}",
            c.frames.iter().map(|f| f.number).collect::<Vec<_>>()
        ),
        Delivery::Lossy => {
            // Each message first appears in lifetime order; a later copy is a retransmission
            // or a duplicate of one already seen.
            let mut seen = 0;
            for &a in &attrs {
                let step = LIFETIME.iter().position(|&l| l == a).unwrap();
                assert!(
                    step <= seen,
                    "{who}: {} before its turn in {names:?}",
                    attr_name(a)
                );
                if step == seen {
                    seen += 1;
                }
            }
            assert_eq!(
                seen,
                LIFETIME.len(),
                "{who}: a message missing in {names:?}"
            );
        }
    }
    // A retransmission keeps its transaction ID (cm.md §6.5): every copy of one side's
    // message does.
    for a in LIFETIME {
        for sender in ends {
            let tids: Vec<u64> = c
                .frames
                .iter()
                .filter(|f| f.attribute == a && f.ip_src == sender)
                .map(|f| f.tid)
                .collect();
            assert!(
                tids.windows(2).all(|w| w[0] == w[1]),
                "{who}: {} copies from {sender} with different transaction IDs {tids:x?}",
                attr_name(a)
            );
        }
    }
}

/// The one-line check of a capture holding a single clean connection from `active` to
/// `passive` (see [`check_cm_capture`]). `None` where tshark is missing.
pub fn assert_cm_exchange(
    pcap: &Path,
    active: SocketAddr,
    passive: SocketAddr,
) -> Option<CmCapture> {
    check_cm_capture(pcap, &[CmExpect::new(active, passive)])
}

/// Runs tshark over `pcap` with RoCEv2 decoding, keeps the frames matching the display
/// `filter` and returns the `fields` of each, in capture order (a field absent from a frame
/// is an empty string; repeated occurrences are joined with `|`). `None` where tshark is
/// not installed (a failure in CI: [`tshark_or_skip`]).
pub fn frame_fields(pcap: &Path, filter: &str, fields: &[&str]) -> Option<Vec<Vec<String>>> {
    if !tshark_or_skip(&format!("the Wireshark fields of {}", pcap.display())) {
        return None;
    }
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==4791,infiniband", "-Y", filter])
        .args(["-T", "fields", "-E", "separator=/t", "-E", "aggregator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').map(str::to_owned).collect())
            .collect(),
    )
}

/// What one tshark run reads out of `pcap`: the Path Packet Payload MTU code (1 = 256 …
/// 5 = 4096) of every CM REQ, as Wireshark decodes it (`infiniband.cm.req.pppmtu`), and the
/// BTH opcodes of the RC SEND packets (First/Middle/Last/Only: 0, 1, 2, 4) sent from `src`, in
/// capture order. `None` without tshark.
pub fn req_path_mtus_and_rc_sends(pcap: &Path, src: &str) -> Option<(Vec<u64>, Vec<String>)> {
    let filter = format!("infiniband.cm.req || (infiniband.bth.opcode <= 4 && ip.src == {src})");
    let rows = frame_fields(
        pcap,
        &filter,
        &["infiniband.cm.req.pppmtu", "infiniband.bth.opcode"],
    )?;
    let (reqs, sends): (Vec<_>, Vec<_>) = rows.iter().partition(|r| !r[0].is_empty());
    Some((
        reqs.iter()
            .map(|r| parse_uint(&r[0]).expect("a decoded path MTU"))
            .collect(),
        sends.iter().map(|r| r[1].clone()).collect(),
    ))
}
