//! The provider against a real Linux RDMA stack: Debian's kernel (ib_cm, rdma_cm, rdma_rxe)
//! and rdma-core's tools in a QEMU guest (tools/peer, docs/PEER.md), whose NIC is joined to
//! the simulated fabric by an external wire. The simulated host runs the driver over the
//! PVRDMA model in real time; each Linux tool meets the NDK side's implementation of its
//! protocol (tests/common/interop), both roles, IPv4 and IPv6.
//!
//! Every test boots one guest and runs its cases in order, each on a fresh cluster
//! (tests/common/interop/rig.rs: what passing means, and the environment knobs); a case that
//! fails is reported and the next runs, and the test fails at the end with the table.
//!
//! They need the guest image (`tools/peer/build-guest.sh`, QEMU from `tools/peer/qemu.sh`),
//! so they are `#[ignore]`d in the default run; `.ci/run` runs them with `--ignored`.

mod common;

use common::guest::COMMAND_TIMEOUT;
use common::interop::rig::{Suite, family, linux_ok};
use common::interop::{cmatose, rping};
use common::ndk::sa;

/// rping, both roles, both families, sizes from rping's smallest through the path MTU to its
/// largest (64 KiB − 1, 64 packets at MTU 1024).
#[test]
#[ignore = "needs the Linux guest image (tools/peer/build-guest.sh); .ci/run runs it"]
fn rping_against_linux() {
    const PINGS: u32 = 10;
    let mut s = Suite::new("rping");
    for ipv6 in [false, true] {
        for size in [rping::RPING_MIN_SIZE, 1025, rping::RPING_MAX_SIZE] {
            s.case(
                &format!(
                    "rping, Linux server, NDK client, {}, {size} B",
                    family(ipv6)
                ),
                ipv6,
                |r| {
                    let server = r
                        .guest()
                        .spawn(&format!(
                            "rping -s -v -a {} -p {} -S {size}",
                            r.guest_ip(),
                            rping::RPING_PORT
                        ))
                        .unwrap();
                    r.guest()
                        .wait_listening(rping::RPING_PORT, COMMAND_TIMEOUT)
                        .unwrap();
                    let dst = sa(r.guest_ip(), rping::RPING_PORT);
                    let report = rping::client(&r.c, 0, dst, PINGS, size);
                    assert_eq!(report.pings, PINGS);
                    let out = server.wait(COMMAND_TIMEOUT).unwrap();
                    linux_ok("rping -s", &out);
                    // The server prints what it read each ping: our pattern, up to its NUL.
                    let lines: Vec<&str> = out
                        .stdout
                        .lines()
                        .filter(|l| l.starts_with("server ping data: "))
                        .collect();
                    assert_eq!(lines.len(), PINGS as usize, "{out}");
                    for (ping, line) in lines.iter().enumerate() {
                        // CAST: ping < PINGS.
                        let want = rping::ping_data(ping as u32, size);
                        let text = String::from_utf8_lossy(&want[..size - 1]);
                        assert_eq!(&line["server ping data: ".len()..], text, "ping {ping}");
                    }
                },
            );
            s.case(
                &format!(
                    "rping, NDK server, Linux client, {}, {size} B",
                    family(ipv6)
                ),
                ipv6,
                |r| {
                    let addr = sa(r.host_ip(), rping::RPING_PORT);
                    let server = rping::Server::listen(&r.c, 0, addr, size);
                    let client = r
                        .guest()
                        .spawn(&format!(
                            "rping -c -v -V -a {} -p {} -S {size} -C {PINGS}",
                            r.host_ip(),
                            rping::RPING_PORT
                        ))
                        .unwrap();
                    let report = server.serve(&r.c);
                    assert_eq!(report.pings, PINGS);
                    let out = client.wait(COMMAND_TIMEOUT).unwrap();
                    linux_ok("rping -c -V", &out);
                    let pings = out
                        .stdout
                        .lines()
                        .filter(|l| l.starts_with("ping data: rdma-ping-"))
                        .count();
                    assert_eq!(pings, PINGS as usize, "{out}");
                },
            );
        }
    }
    s.finish();
}

/// ucmatose: several connections to one listener at once, messages both ways, the server
/// disconnecting; both roles, both families.
#[test]
#[ignore = "needs the Linux guest image (tools/peer/build-guest.sh); .ci/run runs it"]
fn ucmatose_against_linux() {
    const CONNECTIONS: usize = 8;
    const COUNT: u32 = 10;
    const SIZE: usize = 1500;
    let mut s = Suite::new("ucmatose");
    for ipv6 in [false, true] {
        s.case(
            &format!(
                "ucmatose, Linux server, NDK client, {}, {CONNECTIONS} connections",
                family(ipv6)
            ),
            ipv6,
            |r| {
                let server = r
                    .guest()
                    .spawn(&format!(
                        "ucmatose -b {} -p {} -c {CONNECTIONS} -C {COUNT} -S {SIZE}",
                        r.guest_ip(),
                        cmatose::CMATOSE_PORT
                    ))
                    .unwrap();
                r.guest()
                    .wait_listening(cmatose::CMATOSE_PORT, COMMAND_TIMEOUT)
                    .unwrap();
                let dst = sa(r.guest_ip(), cmatose::CMATOSE_PORT);
                let rep = cmatose::client(&r.c, 0, dst, CONNECTIONS, COUNT, SIZE);
                assert_eq!(rep.connections, CONNECTIONS);
                let out = server.wait(COMMAND_TIMEOUT).unwrap();
                linux_ok("ucmatose (server)", &out);
                assert!(out.stdout.contains("return status 0"), "{out}");
            },
        );
        s.case(
            &format!(
                "ucmatose, NDK server, Linux client, {}, {CONNECTIONS} connections",
                family(ipv6)
            ),
            ipv6,
            |r| {
                let addr = sa(r.host_ip(), cmatose::CMATOSE_PORT);
                let server = cmatose::Server::listen(&r.c, 0, addr);
                let client = r
                    .guest()
                    .spawn(&format!(
                        "ucmatose -s {} -p {} -c {CONNECTIONS} -C {COUNT} -S {SIZE}",
                        r.host_ip(),
                        cmatose::CMATOSE_PORT
                    ))
                    .unwrap();
                let rep = server.serve(&r.c, CONNECTIONS, COUNT, SIZE);
                assert_eq!(rep.connections, CONNECTIONS);
                let out = client.wait(COMMAND_TIMEOUT).unwrap();
                linux_ok("ucmatose -s", &out);
                assert!(out.stdout.contains("return status 0"), "{out}");
            },
        );
    }
    s.finish();
}
