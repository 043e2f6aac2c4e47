//! ndkperf's command line (issue 14 item 4): bad arguments are clap errors (one line, exit
//! status 2, no panic), and a tiny valid run prints perftest's tables, CSV, JSON and a plot;
//! `--pcap` captures every connection's CM exchange, which tshark decodes (issue 11 item 5).
//! Runs the example binary cargo builds next to this test (building it if it is missing).

#[path = "common/tshark.rs"]
mod tshark;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Output};

use tshark::{CmExpect, LIFETIME, check_cm_capture};

fn ndkperf() -> PathBuf {
    // target/<profile>/deps/ndkperf_cli-<hash> -> target/<profile>/examples/ndkperf
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let bin = profile_dir
        .join("examples")
        .join(format!("ndkperf{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        // `cargo test --test ndkperf_cli` alone does not build examples.
        let st = Command::new(env!("CARGO"))
            .args(["build", "--example", "ndkperf"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build --example ndkperf");
        assert!(st.success(), "cargo build --example ndkperf failed");
    }
    bin
}

fn run(args: &[&str]) -> Output {
    Command::new(ndkperf())
        .args(args)
        .output()
        .expect("run ndkperf")
}

/// A clap usage error: status 2, one `error:` line naming the problem, no panic, no output.
fn assert_usage_error(args: &[&str], names: &str) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed results");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
    assert!(errors[0].contains(names), "{args:?}: {}", errors[0]);
}

#[test]
fn message_size_above_1_mib_is_a_usage_error() {
    assert_usage_error(&["-s", "2000000"], "--size");
}

#[test]
fn zero_qps_is_a_usage_error() {
    assert_usage_error(&["--qps", "0"], "--qps");
}

#[test]
fn one_host_is_a_usage_error() {
    assert_usage_error(&["--hosts", "1"], "--hosts");
}

#[test]
fn depth_beyond_the_send_queue_is_a_usage_error() {
    assert_usage_error(&["-d", "100000"], "--depth");
}

#[test]
fn qps_times_depth_beyond_the_cq_is_a_usage_error() {
    assert_usage_error(
        &["--qps", "1024", "-d", "2048"],
        "--qps 1024 x --depth 2048",
    );
}

#[test]
fn a_tiny_run_prints_perftest_tables() {
    let out = run(&[
        "-t",
        "rping,read,write,send",
        "-s",
        "64,4096",
        "-n",
        "40",
        "--lat-iters",
        "5",
        "-d",
        "4",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "MB = 2^20 bytes",
        " Number of qps   : 1",
        " TX depth        : 4",
        " Mtu             : 1024[B]",
        " Outstand reads  : 16",
        "payloads verified: OK",
        "RDMA_Read Latency Test (one READ round trip, as ib_read_lat)",
        "RDMA_Write Latency Test (half a WRITE ping-pong, as ib_write_lat)",
        "Send Latency Test (half a SEND ping-pong, as ib_send_lat)",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]",
        " #bytes     #iterations    BW average[MB/sec]   MsgRate[Mpps]   DB/WR    IRQ/WR   DPC/WR",
        "the provider's own cost: benches/instructions.sh",
        "RDMA_Read BW Test",
        "RDMA_Write BW Test",
        "Send BW Test",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    // One row per size and table: 3 tests x (latency + bandwidth) x 2 sizes.
    let rows = stdout
        .lines()
        .filter(|l| l.starts_with(" 64 ") || l.starts_with(" 4096 "))
        .count();
    assert_eq!(rows, 12, "{stdout}");
    // Bandwidth rows: 40 iterations, one doorbell per READ/WRITE, two per SEND (its receive).
    let bw_64: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with(" 64         40 "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(bw_64.len(), 3, "{stdout}");
    let doorbells: Vec<&str> = bw_64.iter().map(|r| r[4]).collect();
    assert_eq!(doorbells, ["1.000", "1.000", "2.000"]);
    // What a newcomer would misread stays out of the table: no peak of one window, no CQ
    // POLL kicks of a spinning poller, no wall time inside provider calls.
    for gone in ["BW peak", "POLL/WR", "provider[ns/WR]"] {
        assert!(!stdout.contains(gone), "{gone} printed:\n{stdout}");
    }
}

#[test]
fn csv_json_and_plot_outputs() {
    let dir = std::env::temp_dir().join(format!("ndkperf_cli_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("plot.svg");
    let common = ["-t", "read", "-s", "64", "-n", "10", "--lat-iters", "3"];
    let mut args = common.to_vec();
    args.push("--csv");
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0));
    let csv = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(
        lines[0].starts_with("kind,test,bytes,iters,t_min_us,"),
        "{csv}"
    );
    assert!(lines[1].starts_with("lat,RDMA_Read,64,3,"), "{csv}");
    assert!(lines[2].starts_with("bw,RDMA_Read,64,10,"), "{csv}");
    // The CSV keeps the CQ POLL kicks (a poll that ran the ring dry rings one, as Linux's
    // pvrdma_poll_one; a spinning poller rings them at its own rate).
    let col = lines[0]
        .split(',')
        .position(|c| c == "poll_doorbells_per_wr")
        .expect("a POLL column");
    let polls: f64 = lines[2].split(',').nth(col).unwrap().parse().unwrap();
    assert!(
        polls > 0.0,
        "the poller found the CQ empty at least once: {csv}"
    );

    let mut args = common.to_vec();
    args.extend(["--json", "--plot", svg.to_str().unwrap()]);
    let out = run(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = String::from_utf8_lossy(&out.stdout);
    for want in [
        "\"bandwidth\": \"MiB/s (MB = 2^20 bytes)\"",
        "\"TX depth\": \"16\"",
        "\"test\": \"RDMA_Read\"",
        "\"bytes\": 64, \"iters\": 3, \"t_min\": ",
        "\"bytes\": 64, \"iters\": 10, \"bw_peak\": ",
    ] {
        assert!(json.contains(want), "missing {want:?} in:\n{json}");
    }
    let plot = std::fs::read_to_string(&svg).expect("plot written");
    assert!(plot.starts_with("<svg"), "{}", &plot[..plot.len().min(200)]);
    assert!(plot.contains("Bandwidth vs message size"));
    assert!(plot.contains("Latency distribution"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// ndkperf's listening port (perftest's default, examples/perfkit).
const LISTEN_PORT: u16 = 18515;

/// Host `i`'s address (`NodeConfig::ipv4`).
fn host_ip(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i + 1))
}

/// Two connections from host 0, one to each peer: the capture holds both whole exchanges
/// (REQ, REP, RTU before any data; DREQ, DREP after the last), each REQ naming host 0 with
/// an ephemeral port and its peer's listener in the service ID and the IP CM header.
#[test]
fn pcap_holds_every_connections_cm_exchange() {
    let dir = std::env::temp_dir().join(format!("ndkperf_pcap_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cm.pcap");
    let out = run(&[
        "-t",
        "rping,read",
        "-s",
        "64",
        "-n",
        "10",
        "--lat-iters",
        "3",
        "--qps",
        "2",
        "--hosts",
        "3",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let active = SocketAddr::new(host_ip(0), 0);
    let expect: Vec<CmExpect<'_>> = (1..=2)
        .map(|peer| CmExpect::new(active, SocketAddr::new(host_ip(peer), LISTEN_PORT)))
        .collect();
    if let Some(capture) = check_cm_capture(&pcap, &expect) {
        assert_eq!(capture.connections.len(), 2);
        for c in &capture.connections {
            assert_eq!(c.attributes(), LIFETIME, "one clean exchange each");
            assert_eq!(c.req.src_ip, host_ip(0));
            assert_ne!(c.req.src_port, 0, "an ephemeral source port");
            assert_eq!(c.req.sid_dport, LISTEN_PORT);
        }
        assert_eq!(
            capture.cm_mads, 10,
            "five MADs per connection, nothing else"
        );
        assert!(
            capture.frames > capture.cm_mads,
            "the data path is captured too"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
