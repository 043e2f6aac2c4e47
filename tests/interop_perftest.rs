//! perftest over rdma_cm (`ib_{send,read,write}_{lat,bw} -R`, Debian bookworm's perftest
//! 4.5+0.17) against the NDK side's implementation of its exchange
//! (tests/common/interop/perftest.rs), the Linux side as server and as client, sizes from one
//! byte across the path MTU (1024) to 1 MiB, READs with the negotiated IRD/ORD outstanding.
//!
//! A case passes when perftest exits 0 and its table holds a row for the size and iteration
//! count with every number positive (the read_lat server prints none; the read_bw and
//! write_bw servers print the client's report, which must be the NDK side's), perftest
//! printed the NDK side's record (QPN, PSN, outstanding reads, rkey, address) as it was
//! sent, the NDK side saw every completion succeed with the right length and count, and
//! the guest's rxe counters moved no sequence error (tests/common/interop/rig.rs).
//!
//! IPv6: bookworm's perftest resolves rdma_cm addresses as AF_INET only and binds its
//! listener AF_INET (rdma_cm's afonly: an IPv6 REQ finds no listener); both refusals are
//! pinned here, so a perftest that can shows up.
//!
//! Needs the guest image (tools/peer/build-guest.sh); `#[ignore]`d in the default run,
//! `.ci/run` runs it with `--ignored`.

mod common;

use common::guest::{COMMAND_TIMEOUT, Output};
use common::interop::perftest::{
    self, Kind, OUT_READS, PERFTEST_PORT, Report, Role, Test, Tool, Verb, expected_remote_lines,
    printed_remote, table_row,
};
use common::interop::rig::{Rig, Suite, family, linux_ok};
use common::ndk::sa;
use pvrdma_ndk::ndkpi::STATUS_CONNECTION_REFUSED;

/// Iterations: enough to exercise the window (bandwidth: 8 outstanding) and the ping-pong,
/// few enough for an emulated guest.
fn iterations(tool: Tool, size: usize) -> u32 {
    match (tool.kind, size >= 1 << 20) {
        (_, true) => 5,
        (Kind::Lat, false) => 20,
        (Kind::Bw, false) => 64,
    }
}

/// One case: the Linux program in `role` opposite the NDK side.
fn case(r: &Rig<'_>, tool: Tool, linux: Role, size: usize) {
    let t = Test::new(tool, size, iterations(tool, size), OUT_READS);
    let drops = r.wire.peer_drops();
    let start = std::time::Instant::now();
    let (report, out) = perftest::run_against_linux(r, t, linux);
    check(&t, linux, &report, &out);
    // The wire held what the guest's socket had no room for: nothing was dropped on the way.
    assert_eq!(
        r.wire.peer_drops(),
        drops,
        "datagrams QEMU's socket dropped"
    );
    eprintln!(
        "  {:.1} s, the wire paused {} times",
        start.elapsed().as_secs_f64(),
        r.wire.counters().paused
    );
}

/// perftest's verdict and table, and the NDK side's counts.
fn check(t: &Test, linux: Role, rep: &Report, out: &Output) {
    let name = t.tool.name();
    linux_ok(name, out);
    assert!(
        out.stdout.contains("Data ex. method : rdma_cm"),
        "{name}: the exchange over rdma_cm: {out}"
    );
    // perftest printed our record as we sent it.
    let lines =
        printed_remote(&out.stdout).unwrap_or_else(|| panic!("{name}: no remote record: {out}"));
    assert_eq!(lines, expected_remote_lines(&rep.ours), "{name}: {out}");
    assert_eq!(
        rep.peer_version,
        perftest::VERSION,
        "{name}: the peer's version"
    );
    // The test connection's read limits: what perftest asked (READ: -o) each way.
    let limits = if t.tool.verb == Verb::Read {
        OUT_READS
    } else {
        0
    };
    assert_eq!(rep.ird_ord, (limits, limits), "{name}: negotiated IRD/ORD");
    // The NDK side's data phase.
    let ndk_issues = match (t.tool.verb, t.tool.kind) {
        (Verb::Send, Kind::Lat) | (Verb::Write, Kind::Lat) => true,
        _ => linux == Role::Server,
    };
    assert_eq!(
        rep.issued,
        if ndk_issues { t.iters } else { 0 },
        "{name}: operations the NDK side issued"
    );
    let ndk_receives = match (t.tool.verb, t.tool.kind) {
        (Verb::Send, Kind::Lat) | (Verb::Write, Kind::Lat) => true,
        (Verb::Send, Kind::Bw) => linux == Role::Client,
        _ => false,
    };
    assert_eq!(
        rep.received,
        if ndk_receives { t.iters } else { 0 },
        "{name}: messages the NDK side received"
    );
    if t.tool.verb == Verb::Read && t.tool.kind == Kind::Bw && linux == Role::Server {
        assert_eq!(
            rep.max_outstanding,
            OUT_READS.min(t.tx_depth).min(t.iters),
            "{name}: READs outstanding"
        );
    }
    // perftest's table: none on the read_lat server.
    let prints_table = !(t.tool == Tool::new(Verb::Read, Kind::Lat) && linux == Role::Server);
    if prints_table {
        let row = table_row(&out.stdout, t.size, t.iters)
            .unwrap_or_else(|| panic!("{name}: no row for {} B x {}: {out}", t.size, t.iters));
        check_row(t, &row, out);
        // read_bw and write_bw servers print the client's report: the NDK side's.
        if let (Kind::Bw, Verb::Read | Verb::Write, Role::Server) =
            (t.tool.kind, t.tool.verb, linux)
        {
            let sent = rep.sent_report.expect("the report the NDK client sent");
            assert!(
                (row[3] - sent.bw_avg).abs() <= 0.006 && (row[4] - sent.msg_rate).abs() <= 1e-6,
                "{name}: perftest printed {row:?} for our report {sent:?}"
            );
        }
    } else {
        assert!(table_row(&out.stdout, t.size, t.iters).is_none());
    }
    if let (Kind::Bw, Verb::Read | Verb::Write, Role::Client) = (t.tool.kind, t.tool.verb, linux) {
        let theirs = rep.peer_report.expect("the Linux client's report");
        assert_eq!(
            (theirs.size, theirs.iters),
            (t.size as u64, u64::from(t.iters)),
            "{name}: the Linux client's report"
        );
        assert!(theirs.bw_avg > 0.0 && theirs.msg_rate > 0.0, "{theirs:?}");
    }
    let ours = rep.table_row();
    let theirs = out
        .stdout
        .lines()
        .find(|l| table_row(l, t.size, t.iters).is_some())
        .unwrap_or("(none)");
    eprintln!(
        "  {name} ({} attempt(s)): NDK {ours}\n  {:>w$} perftest {}",
        rep.connect_attempts,
        "",
        theirs.trim_start(),
        w = name.len()
    );
}

/// A row of perftest's table is sane. Latency (`#bytes #iterations t_min t_max t_typical
/// t_avg t_stdev 99% 99.9%`, µs): every time positive and ordered; the standard deviation
/// may print as `-nan` (perftest squares deviations in an `int`, which overflows beyond
/// 46 ms, as an emulated guest's 1 MiB round trips are). Bandwidth (`#bytes #iterations
/// peak avg MsgRate`, MiB/s and Mpps, two and six decimals): a positive message rate, and an
/// average that is the size times the rate (a 1-byte run rounds to 0.00 MiB/s).
fn check_row(t: &Test, row: &[f64], out: &Output) {
    let name = t.tool.name();
    match t.tool.kind {
        Kind::Lat => {
            let (min, max, typ, avg, stdev, p99, p999) =
                (row[2], row[3], row[4], row[5], row[6], row[7], row[8]);
            assert!(
                min > 0.0 && min <= typ && typ <= max && min <= avg && avg <= max,
                "{name}: latencies out of order in {row:?}: {out}"
            );
            assert!(
                p99 >= min && p999 >= p99 && p999 <= max,
                "{name}: percentiles in {row:?}"
            );
            assert!(stdev.is_nan() || stdev >= 0.0, "{name}: {row:?}");
        }
        Kind::Bw => {
            let (peak, avg, rate) = (row[2], row[3], row[4]);
            assert!(rate > 0.0 && peak >= 0.0, "{name}: {row:?}: {out}");
            let want = t.size as f64 * rate * 1e6 / f64::from(1u32 << 20);
            assert!(
                (avg - want).abs() <= 0.006 + want * 1e-3 + t.size as f64 * 1e-6 / 1.048_576,
                "{name}: {avg} MiB/s is not {} B x {rate} Mpps: {row:?}",
                t.size
            );
        }
    }
}

fn role_name(linux: Role) -> &'static str {
    match linux {
        Role::Server => "Linux server, NDK client",
        Role::Client => "NDK server, Linux client",
    }
}

/// Every program, both roles, 1 B, 1025 B (two packets at MTU 1024) and 1 MiB, IPv4.
#[test]
#[ignore = "needs the Linux guest image (tools/peer/build-guest.sh); .ci/run runs it"]
fn perftest_against_linux() {
    let mut s = Suite::new("perftest");
    for tool in Tool::ALL {
        for linux in [Role::Server, Role::Client] {
            for size in [1, 1025, 1 << 20] {
                s.case(
                    &format!(
                        "{}, {}, {}, {size} B",
                        tool.name(),
                        role_name(linux),
                        family(false)
                    ),
                    false,
                    |r| case(r, tool, linux, size),
                );
            }
        }
    }
    // IPv6: the refusals of bookworm's perftest, pinned.
    s.case(
        "ib_send_bw, Linux server, NDK client, IPv6: perftest's AF_INET listener refuses",
        true,
        |r| {
            let t = Test::new(Tool::new(Verb::Send, Kind::Bw), 64, 8, OUT_READS);
            let server = r
                .guest()
                .spawn(&format!("ib_send_bw {}", t.linux_args()))
                .unwrap();
            r.guest()
                .wait_listening(PERFTEST_PORT, COMMAND_TIMEOUT)
                .unwrap();
            // rdma_cm's AF_INET listener is AF-only: an IPv6 REQ finds no listener (REJ).
            let st = perftest::control_connect_status(&r.c, 0, sa(r.guest_ip(), PERFTEST_PORT));
            assert_eq!(
                st, STATUS_CONNECTION_REFUSED,
                "bookworm's perftest now listens on IPv6?"
            );
            assert!(
                !server.finished(),
                "the server still waits for an IPv4 client"
            );
            drop(server); // killed
        },
    );
    s.case(
        "ib_send_bw, NDK server, Linux client, IPv6: perftest refuses the address",
        true,
        |r| {
            let t = Test::new(Tool::new(Verb::Send, Kind::Bw), 64, 8, OUT_READS);
            let server = perftest::Server::listen(&r.c, 0, sa(r.host_ip(), PERFTEST_PORT), t);
            let out = r
                .guest()
                .run(
                    &format!("ib_send_bw {} {}", t.linux_args(), r.host_ip()),
                    COMMAND_TIMEOUT,
                )
                .unwrap();
            assert!(
                !out.success()
                    && out
                        .stderr
                        .contains("Address family for hostname not supported"),
                "bookworm's perftest now takes an IPv6 rdma_cm address? {out}"
            );
            server.close();
        },
    );
    s.finish();
}
