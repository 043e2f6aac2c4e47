//! The Linux RDMA peer rig proves itself, without the driver (issue 20 item 3; docs/PEER.md):
//! two guests on one UDP wire (crossed ports) run Linux's own RDMA tools against each other,
//! both directions, over IPv4 and IPv6 — rping (`-V`, byte-checked), ucmatose (several
//! connections at once), perftest over rdma_cm (`ib_send_bw -R`, `ib_read_lat -R`; IPv4 only:
//! bookworm's perftest cannot address an rdma_cm peer over IPv6) and the
//! project's own program (tools/peer/progs/rc_echo.c) — and each tool's exit status, its
//! output and rxe's sequence-error counters (all 0 on a clean wire) are checked. Then the
//! harness's own contract: exit statuses, stdout and stderr byte for byte, a background job
//! killed, a deadline enforced, a guest that vanishes.
//!
//! Ignored by default: it needs the guest image and QEMU (`.ci/run` builds both and runs it):
//!
//! ```sh
//! tools/peer/qemu.sh && tools/peer/build-guest.sh
//! cargo test --test peer_rig -- --ignored --nocapture
//! ```
mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::guest::{self, COMMAND_TIMEOUT, Guest, Output, RXE_SEQUENCE_ERRORS};

/// rping's, ucmatose's and perftest's default rdma_cm ports.
const RPING_PORT: u16 = 7174;
const UCMATOSE_PORT: u16 = 7471;
const PERFTEST_PORT: u16 = 18515;
const RC_ECHO_PORT: u16 = 7472;

/// A guest's address of one family.
type AddrOf = fn(&Guest) -> IpAddr;

fn step(name: &str, t0: Instant) {
    eprintln!("[{:7.1} s] {name}", t0.elapsed().as_secs_f64());
}

fn check(out: &Output, what: &str) {
    assert!(out.success(), "{what} failed: {out}");
}

/// Both guests' counters must not have moved on any of [`RXE_SEQUENCE_ERRORS`] since
/// `before`; returns the new snapshot.
fn assert_clean_wire(
    guests: [&Guest; 2],
    before: [BTreeMap<String, u64>; 2],
    what: &str,
) -> [BTreeMap<String, u64>; 2] {
    let after = guests.map(|g| g.rdma_counters().expect("rdma statistic"));
    let deltas = [0, 1].map(|i| guest::counter_delta(&before[i], &after[i]));
    // A retry with no sequence error, duplicate or out-of-sequence request on either side is
    // rxe's retransmit timer (local ACK timeout 19, 2.1 s: docs/reference/cm.md §9.1) expiring
    // while a guest's vCPU waits for one of this machine's two cores: load, not the wire.
    // Seen once in about 15 runs at load 11-12, in ib_read_lat. It is reported, not failed.
    let sequence_evidence = deltas.iter().any(|d| {
        ["duplicate_request", "out_of_seq_request", "rcvd_seq_err"]
            .iter()
            .any(|n| d.get(*n).copied().unwrap_or(0) != 0)
    });
    for (i, g) in guests.iter().enumerate() {
        let delta = &deltas[i];
        for name in RXE_SEQUENCE_ERRORS {
            assert!(
                delta.contains_key(name),
                "rxe has no counter {name}: {:?}",
                after[i]
            );
            if name == "completer_retry_err" && !sequence_evidence && delta[name] != 0 {
                eprintln!(
                    "  ! {what}: {} retried {} time(s) on its timer with no sequence error on \
                     either side (a stalled vCPU)",
                    g.config().name,
                    delta[name]
                );
                continue;
            }
            assert_eq!(
                delta[name],
                0,
                "{what}: {} counted {name} on a clean wire: {delta:?}",
                g.config().name
            );
        }
        assert!(
            delta["sent_pkts"] > 0 && delta["rcvd_pkts"] > 0,
            "{what}: no traffic? {delta:?}"
        );
    }
    after
}

fn rping(server: &Guest, client: &Guest, addr: IpAddr, count: u32, size: u32) {
    let srv = server
        .spawn(&format!("rping -s -a {addr} -C {count} -S {size} -V"))
        .expect("rping -s");
    server
        .wait_listening(RPING_PORT, COMMAND_TIMEOUT)
        .expect("rping -s listens");
    let cli = client
        .run(
            &format!("rping -c -a {addr} -C {count} -S {size} -V -v"),
            COMMAND_TIMEOUT,
        )
        .expect("rping -c");
    let srv = srv
        .wait(COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\nthe client: {cli}"));
    let what = format!(
        "rping {} -> {} over {addr}",
        client.config().name,
        server.config().name
    );
    check(&cli, &what);
    check(&srv, &format!("{what} (server)"));
    // -v prints each ping; -V checked each one's bytes (a mismatch exits non-zero).
    for i in 0..count {
        assert!(
            cli.stdout.contains(&format!("ping data: rdma-ping-{i}: ")),
            "{what}: ping {i} missing: {cli}"
        );
    }
    assert_eq!(
        cli.stdout
            .lines()
            .filter(|l| l.starts_with("ping data: "))
            .count(),
        count as usize
    );
}

fn ucmatose(server: &Guest, client: &Guest, addr: IpAddr, connections: u32, messages: u32) {
    let srv = server
        .spawn(&format!(
            "ucmatose -b {addr} -c {connections} -C {messages}"
        ))
        .expect("ucmatose server");
    server
        .wait_listening(UCMATOSE_PORT, COMMAND_TIMEOUT)
        .expect("ucmatose listens");
    let cli = client
        .run(
            &format!("ucmatose -s {addr} -c {connections} -C {messages}"),
            COMMAND_TIMEOUT,
        )
        .expect("ucmatose client");
    let srv = srv
        .wait(COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\nthe client: {cli}"));
    let what = format!(
        "ucmatose {} -> {} over {addr}",
        client.config().name,
        server.config().name
    );
    for (out, side) in [(&cli, "client"), (&srv, "server")] {
        check(out, &format!("{what} ({side})"));
        assert!(
            out.stdout.contains("data transfers complete"),
            "{what} ({side}): {out}"
        );
        assert!(
            out.stdout.contains("return status 0"),
            "{what} ({side}): {out}"
        );
    }
}

/// A perftest result row: "<bytes> <iterations> ..." with every column a number.
fn perftest_row(out: &Output, size: u32, iterations: u32) -> Option<Vec<f64>> {
    out.stdout.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() >= 4 && cols[0] == size.to_string() && cols[1] == iterations.to_string() {
            cols.iter().map(|c| c.parse::<f64>().ok()).collect()
        } else {
            None
        }
    })
}

/// perftest over rdma_cm connects twice to the same port: a control connection for its
/// parameter exchange, whose listener the server destroys once it has accepted it, then the
/// test's QPs to a second listener the server creates after setting up its resources
/// (perftest_communication.c: rdma_server_connect, then rdma_cm_server_connection). A client
/// that gets there first is rejected (IB CM REJ reason 8, invalid service ID); perftest's
/// client means to retry but 4.5-0.17 crashes on that path (SIGSEGV after "Failed to connect
/// RDMA CM events"). Under TCG the window is wide, so a run rejected that way is run again.
const PERFTEST_ATTEMPTS: u32 = 6;

fn perftest(server: &Guest, client: &Guest, addr: IpAddr, tool: &str, size: u32, iterations: u32) {
    // A bandwidth test keeps at most 8 messages in flight: QEMU's UDP socket (the wire) holds
    // about 90 frames with Linux's default 208 KiB receive buffer and drops the rest of a
    // burst (rxe then counts out_of_seq_request and retransmits); 8 x 4 KiB is 32 frames.
    let depth = if tool.ends_with("_bw") { " -t 8" } else { "" };
    let args = format!("-R -d rxe0 -F -s {size} -n {iterations}{depth}");
    let what = format!(
        "{tool} {} -> {} over {addr}",
        client.config().name,
        server.config().name
    );
    for attempt in 1..=PERFTEST_ATTEMPTS {
        let srv = server
            .spawn(&format!("{tool} {args}"))
            .expect("perftest server");
        server
            .wait_listening(PERFTEST_PORT, COMMAND_TIMEOUT)
            .expect("perftest listens");
        let cli = client
            .run(&format!("{tool} {args} {addr}"), COMMAND_TIMEOUT)
            .expect("perftest client");
        if !cli.success() && cli.stderr.contains("RDMA_CM_EVENT_REJECTED; error: 8") {
            eprintln!("  ! {what}: attempt {attempt} lost perftest's re-listen race; again");
            drop(srv); // killed
            continue;
        }
        let srv = srv
            .wait(COMMAND_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}\nthe client: {cli}"));
        check(&cli, &what);
        check(&srv, &format!("{what} (server)"));
        let row = perftest_row(&cli, size, iterations)
            .unwrap_or_else(|| panic!("{what}: no result row for {size} B x {iterations}: {cli}"));
        assert!(
            row[2..].iter().all(|v| *v > 0.0),
            "{what}: a zero in {row:?}"
        );
        let line = cli
            .stdout
            .lines()
            .find(|l| l.contains(&format!(" {iterations} ")));
        eprintln!("  = {what}: {}", line.unwrap_or("").trim());
        return;
    }
    panic!("{what}: rejected {PERFTEST_ATTEMPTS} times");
}

/// Debian bookworm's perftest (4.5-0.17) resolves the rdma_cm peer as IPv4 only (upstream
/// added `--ipv6-addr` in 2023, perftest PR #218): pinned here, so an image with a newer
/// perftest shows up and the IPv6 runs can be switched on.
fn perftest_has_no_ipv6_rdma_cm(client: &Guest, addr: IpAddr) {
    let out = client
        .run(
            &format!("ib_send_bw -R -d rxe0 -F -s 64 -n 10 {addr}"),
            COMMAND_TIMEOUT,
        )
        .expect("ib_send_bw");
    assert!(
        !out.success()
            && out
                .stderr
                .contains("Address family for hostname not supported"),
        "bookworm's perftest now takes an IPv6 rdma_cm address? {out}"
    );
}

fn rc_echo(server: &Guest, client: &Guest, addr: IpAddr, count: u32, size: u32) {
    let srv = server
        .spawn(&format!(
            "rc_echo -s -b {addr} -p {RC_ECHO_PORT} -n {count} -z {size}"
        ))
        .expect("rc_echo -s");
    srv.wait_for_stdout("rc_echo: listening", COMMAND_TIMEOUT)
        .expect("rc_echo listens");
    let cli = client
        .run(
            &format!("rc_echo -c {addr} -p {RC_ECHO_PORT} -n {count} -z {size}"),
            COMMAND_TIMEOUT,
        )
        .expect("rc_echo -c");
    let srv = srv
        .wait(COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\nthe client: {cli}"));
    let what = format!(
        "rc_echo {} -> {} over {addr}",
        client.config().name,
        server.config().name
    );
    check(&cli, &what);
    check(&srv, &format!("{what} (server)"));
    assert_eq!(
        cli.stdout,
        format!("rc_echo: {count} messages of {size} bytes echoed and verified\n"),
        "{what}"
    );
    assert_eq!(
        srv.stdout,
        format!("rc_echo: listening\nrc_echo: echoed {count} messages of {size} bytes\n"),
        "{what}"
    );
}

/// The harness's contract, on a booted guest.
fn harness_contract(g: &Guest) {
    let out = g
        .run("printf 'out\\n'; printf 'err' >&2; exit 3", COMMAND_TIMEOUT)
        .unwrap();
    assert_eq!(
        out,
        Output {
            status: 3,
            stdout: "out\n".into(),
            stderr: "err".into()
        }
    );
    // Larger than one base64 line, quotes and shell syntax passed through intact.
    let out = g
        .run_ok("seq 1 3000; echo \"a'b\" '$HOME'", COMMAND_TIMEOUT)
        .unwrap();
    let expected: String = (1..=3000).map(|i| format!("{i}\n")).collect::<String>() + "a'b $HOME\n";
    assert_eq!(out.stdout, expected);
    assert!(g.run_ok("exit 1", COMMAND_TIMEOUT).is_err());
    // A background job: seen running, then killed (SIGKILL: 128 + 9).
    let job = g.spawn("echo started; exec sleep 1000").unwrap();
    job.wait_for_stdout("started", COMMAND_TIMEOUT).unwrap();
    assert!(!job.finished());
    job.signal("KILL").unwrap();
    assert_eq!(job.wait(COMMAND_TIMEOUT).unwrap().status, 137);
    // A deadline: the command is killed and the error says so.
    let e = g
        .run("echo partial; sleep 1000", Duration::from_secs(3))
        .unwrap_err();
    assert!(
        e.to_string().contains("still ran after") && e.to_string().contains("partial"),
        "{e}"
    );
    // Jobs run concurrently: a job blocked on a FIFO is released by a second one.
    let reader = g.spawn("mkfifo /tmp/f && cat /tmp/f").unwrap();
    g.run_ok(
        "until [ -p /tmp/f ]; do usleep 10000; done; echo through > /tmp/f",
        COMMAND_TIMEOUT,
    )
    .unwrap();
    assert_eq!(reader.wait(COMMAND_TIMEOUT).unwrap().stdout, "through\n");
    let counters = g.rdma_counters().unwrap();
    for name in RXE_SEQUENCE_ERRORS
        .iter()
        .chain(&["sent_pkts", "rcvd_pkts"])
    {
        assert!(counters.contains_key(*name), "no {name} in {counters:?}");
    }
    let cfg = g.config();
    let addrs = g
        .run_ok(
            "ip -o addr show dev eth0; cat /sys/class/net/eth0/address /sys/class/net/eth0/mtu",
            COMMAND_TIMEOUT,
        )
        .unwrap();
    assert!(
        addrs
            .stdout
            .contains(&format!("inet {}/{}", cfg.ipv4, cfg.ipv4_prefix)),
        "{addrs}"
    );
    assert!(
        addrs
            .stdout
            .contains(&format!("inet6 {}/{}", cfg.ipv6, cfg.ipv6_prefix)),
        "{addrs}"
    );
    assert!(
        addrs
            .stdout
            .contains(&format!("{}\n{}\n", cfg.mac_string(), cfg.mtu)),
        "{addrs}"
    );
}

#[test]
#[ignore = "needs the peer image and QEMU: tools/peer/build-guest.sh (see docs/PEER.md)"]
fn two_guests_run_linux_rdma_tools_both_ways_over_ipv4_and_ipv6() {
    let t0 = Instant::now();
    let (mut ca, cb) = guest::wire_pair(1, 2);
    let pcap = guest::target_dir().join(format!("tmp/peer-rig-{}.pcap", std::process::id()));
    ca.pcap = Some(pcap.clone());
    let mut guests = Guest::boot_all([ca, cb]).unwrap_or_else(|e| panic!("{e}"));
    let b = guests.pop().unwrap();
    let a = guests.pop().unwrap();
    step(
        &format!(
            "booted: {:.1} s and {:.1} s",
            a.boot_time().as_secs_f64(),
            b.boot_time().as_secs_f64()
        ),
        t0,
    );
    harness_contract(&a);
    step("harness contract", t0);

    let mut counters = [&a, &b].map(|g| g.rdma_counters().unwrap());
    let families: [(&str, AddrOf); 2] = [
        ("IPv4", |g| IpAddr::V4(g.config().ipv4)),
        ("IPv6", |g| IpAddr::V6(g.config().ipv6)),
    ];
    for (family, addr) in families {
        for (server, client) in [(&a, &b), (&b, &a)] {
            let dir = format!(
                "{family} {} -> {}",
                client.config().name,
                server.config().name
            );
            rping(server, client, addr(server), 10, 256);
            counters = assert_clean_wire([&a, &b], counters, &format!("rping {dir}"));
            step(&format!("rping {dir}"), t0);
            ucmatose(server, client, addr(server), 4, 10);
            counters = assert_clean_wire([&a, &b], counters, &format!("ucmatose {dir}"));
            step(&format!("ucmatose {dir}"), t0);
            rc_echo(server, client, addr(server), 20, 3000);
            counters = assert_clean_wire([&a, &b], counters, &format!("rc_echo {dir}"));
            step(&format!("rc_echo {dir}"), t0);
        }
        if family == "IPv6" {
            perftest_has_no_ipv6_rdma_cm(&b, addr(&a));
            step(
                "perftest -R refuses an IPv6 address (bookworm's perftest 4.5-0.17)",
                t0,
            );
            continue;
        }
        perftest(&a, &b, addr(&a), "ib_send_bw", 4096, 200);
        counters = assert_clean_wire([&a, &b], counters, &format!("ib_send_bw {family}"));
        step(&format!("ib_send_bw -R {family}"), t0);
        perftest(&b, &a, addr(&b), "ib_read_lat", 64, 200);
        counters = assert_clean_wire([&a, &b], counters, &format!("ib_read_lat {family}"));
        step(&format!("ib_read_lat -R {family}"), t0);
    }

    // QEMU's capture of a's NIC saw RoCEv2 both ways, in both families.
    let frames = std::fs::read(&pcap).expect("the pcap of a's NIC");
    let _ = std::fs::remove_file(&pcap);
    for (from, to) in [(&a, &b), (&b, &a)] {
        let (v4, v6) = rocev2_frames(&frames, from.config().mac, to.config().mac);
        assert!(
            v4 > 100 && v6 > 100,
            "RoCEv2 frames {} -> {}: {v4} IPv4, {v6} IPv6",
            from.config().name,
            to.config().name
        );
    }
    step(
        "the pcap of a's NIC holds RoCEv2 both ways over IPv4 and IPv6",
        t0,
    );

    // The peer that vanishes: b is killed; its QEMU is gone, a's frames reach no one.
    a.run_ok(
        &format!("ping -c 1 -W 5 {}", b.config().ipv4),
        COMMAND_TIMEOUT,
    )
    .unwrap();
    b.kill();
    assert!(!b.is_alive());
    assert!(b.run("true", COMMAND_TIMEOUT).is_err());
    let out = a
        .run(
            &format!("ping -c 1 -W 2 {}", b.config().ipv4),
            COMMAND_TIMEOUT,
        )
        .unwrap();
    assert!(!out.success(), "ping to a vanished peer answered: {out}");
    step("peer vanished", t0);
}

/// Frames from MAC `src` to `dst` in a pcap (LINKTYPE_ETHERNET) that carry UDP to RoCEv2's port
/// 4791: (over IPv4, over IPv6).
fn rocev2_frames(pcap: &[u8], src: [u8; 6], dst: [u8; 6]) -> (usize, usize) {
    assert_eq!(
        pcap.get(..4),
        Some(&[0xd4, 0xc3, 0xb2, 0xa1][..]),
        "a little-endian pcap"
    );
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let be16 = |f: &[u8], at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let (mut v4, mut v6, mut at) = (0, 0, 24);
    while at + 16 <= pcap.len() {
        let len = u32_at(pcap, at + 8) as usize;
        let f = &pcap[at + 16..(at + 16 + len).min(pcap.len())];
        at += 16 + len;
        if f.len() < 14 || f[0..6] != dst || f[6..12] != src {
            continue;
        }
        match be16(f, 12) {
            // IPv4 without options (IHL 5), UDP, destination port.
            Some(0x0800) if f.get(14) == Some(&0x45) && f.get(23) == Some(&17) => {
                v4 += usize::from(be16(f, 36) == Some(4791));
            }
            // IPv6, next header UDP, destination port.
            Some(0x86dd) if f.get(20) == Some(&17) => v6 += usize::from(be16(f, 56) == Some(4791)),
            _ => {}
        }
    }
    (v4, v6)
}

/// The harness's parsers, without a guest (these run in every `cargo test`).
#[test]
fn harness_decodes_the_guests_answers() {
    assert_eq!(guest::base64_text("aGVsbG8K"), "hello\n");
    assert_eq!(guest::base64_text("aGVs\nbG8K"), "hello\n"); // busybox wraps at 76 columns
    assert_eq!(guest::base64_text("YQ=="), "a");
    assert_eq!(guest::base64_text(""), "");
    assert_eq!(guest::shell_quote("it's"), "'it'\\''s'");
    let text = "link rxe0/1 sent_pkts 4 rcvd_pkts 5 duplicate_request 0 out_of_seq_request 7 \n";
    let c = guest::parse_rdma_statistic(text).unwrap();
    assert_eq!(
        (c["sent_pkts"], c["rcvd_pkts"], c["out_of_seq_request"]),
        (4, 5, 7)
    );
    assert_eq!(c.len(), 4);
    assert_eq!(guest::parse_rdma_statistic("link rxe0/1 sent_pkts"), None);
    assert_eq!(guest::parse_rdma_statistic("link rxe0/1 sent_pkts x"), None);
    let mut before = c.clone();
    before.insert("sent_pkts".into(), 1);
    assert_eq!(guest::counter_delta(&before, &c)["sent_pkts"], 3);
    let (a, b) = guest::wire_pair(1, 2);
    assert_eq!(
        (a.local_udp_port, a.peer_udp_port),
        (b.peer_udp_port, b.local_udp_port)
    );
    assert_eq!(a.mac_string(), "52:54:00:12:34:01");
    assert_eq!(b.ipv6.to_string(), "2001:2::2");
}
