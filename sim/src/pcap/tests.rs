use super::*;
use crate::wire::bth::BthRepr;
use crate::wire::ext::{AethRepr, AethSyndrome, DethRepr, RethRepr};
use crate::wire::opcode;
use crate::wire::psn::Psn;
use crate::wire::roce::{ExtRepr, Gid, RocePacket, gid_from_ipv4};

#[test]
fn global_and_record_headers() {
    let mut w = PcapWriter::new(Vec::new(), TsResolution::Micro).unwrap();
    w.write_frame(3_000_123_456, &[1, 2, 3]).unwrap();
    assert_eq!(w.frames(), 1);
    let b = w.into_inner();
    assert_eq!(b.len(), 24 + 16 + 3);
    let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    assert_eq!(u32_at(0), 0xA1B2_C3D4);
    assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 2);
    assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 4);
    assert_eq!(u32_at(8), 0);
    assert_eq!(u32_at(12), 0);
    assert_eq!(u32_at(16), 65_535);
    assert_eq!(u32_at(20), 1);
    assert_eq!(u32_at(24), 3);
    assert_eq!(u32_at(28), 123, "microseconds");
    assert_eq!(u32_at(32), 3);
    assert_eq!(u32_at(36), 3);
    assert_eq!(&b[40..], &[1, 2, 3]);

    let mut w = PcapWriter::new(Vec::new(), TsResolution::Nano).unwrap();
    w.write_frame(3_000_123_456, &[]).unwrap();
    let b = w.into_inner();
    assert_eq!(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), 0xA1B2_3C4D);
    assert_eq!(u32::from_ne_bytes([b[28], b[29], b[30], b[31]]), 123_456);
}

fn gids(v4: bool) -> (Gid, Gid) {
    if v4 {
        (
            gid_from_ipv4([192, 168, 10, 1]),
            gid_from_ipv4([192, 168, 10, 2]),
        )
    } else {
        let a: Gid = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut b = a;
        b[15] = 2;
        (a, b)
    }
}

/// (opcode, IBTA name as Wireshark prints it) pairs written by [`sample_frames`].
const CASES: [(u8, &str); 6] = [
    (
        opcode::RC_SEND_ONLY,
        "Reliable Connection (RC) - SEND Only (4)",
    ),
    (
        opcode::RC_RDMA_WRITE_FIRST,
        "Reliable Connection (RC) - RDMA WRITE First (6)",
    ),
    (
        opcode::RC_ACKNOWLEDGE,
        "Reliable Connection (RC) - Acknowledge (17)",
    ),
    (
        opcode::RC_RDMA_READ_RESPONSE_ONLY,
        "Reliable Connection (RC) - RDMA READ response Only (16)",
    ),
    (
        opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        "Reliable Connection (RC) - RDMA READ response Middle (14)",
    ),
    (
        opcode::UD_SEND_ONLY,
        "Unreliable Datagram (UD) - SEND only (100)",
    ),
];

/// Every case over IPv4 then IPv6.
fn sample_frames() -> Vec<(u8, Vec<u8>)> {
    let payload: Vec<u8> = (0..37u8).collect();
    let mut out = Vec::new();
    for v4 in [true, false] {
        for (i, (op, _)) in CASES.iter().enumerate() {
            let (s, d) = gids(v4);
            let w = crate::wire::ext_headers(*op).unwrap();
            let p = RocePacket {
                src_mac: [0x02, 0, 0, 0, 0, 1],
                dst_mac: [0x02, 0, 0, 0, 0, 2],
                vlan: None,
                src_gid: s,
                dst_gid: d,
                traffic_class: 0,
                hop_limit: 64,
                flow_label: 0,
                ip_ident: 0,
                udp_src_port: 0xC000,
                bth: BthRepr {
                    opcode: *op,
                    pkey: 0xFFFF,
                    dest_qp: if *op == opcode::UD_SEND_ONLY { 1 } else { 0x11 },
                    psn: Psn::new(100 + i as u32),
                    ack_req: w.reth,
                    ..BthRepr::default()
                },
                ext: ExtRepr {
                    reth: w.reth.then_some(RethRepr {
                        va: 0x7f00_0000_1000,
                        rkey: 0x105,
                        dma_len: 4096,
                    }),
                    aeth: w.aeth.then_some(AethRepr {
                        syndrome: AethSyndrome::Ack { credits: 0x1F },
                        msn: 3,
                    }),
                    deth: w.deth.then_some(DethRepr {
                        qkey: 0x8001_0000,
                        src_qp: 1,
                    }),
                    ..ExtRepr::default()
                },
                payload: if w.payload { &payload } else { &[] },
            };
            out.push((*op, p.emit().unwrap()));
        }
    }
    out
}

fn tshark_available() -> bool {
    std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this run is CI's (`CI` set and not empty, `0` or `false`; `.ci/run` sets
/// `CI=true`), where a check that needs tshark fails instead of skipping itself (the
/// workspace's tests do the same through `tests/common/tshark.rs`'s `tshark_or_skip`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

#[test]
fn tshark_decodes_written_rocev2_frames() {
    let frames = sample_frames();
    let path = std::env::temp_dir().join(format!("pvrdma-sim-pcap-{}.pcap", std::process::id()));
    {
        let f = std::fs::File::create(&path).unwrap();
        let mut w = PcapWriter::new(std::io::BufWriter::new(f), TsResolution::Nano).unwrap();
        for (i, (_, fr)) in frames.iter().enumerate() {
            w.write_frame(1_000 * i as u64, fr).unwrap();
        }
        w.flush().unwrap();
    }
    if !tshark_available() {
        let _ = std::fs::remove_file(&path);
        assert!(
            !in_ci(),
            "tshark is not installed, and CI must run the Wireshark decode check: install \
             it (Debian: apt-get install tshark; .ci/run does) or unset CI to skip it"
        );
        eprintln!(
            "NOTICE: tshark not installed; skipping the Wireshark decode check (in CI this fails)"
        );
        return;
    }
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args(["-o", "udp.check_checksum:TRUE", "-T", "fields"])
        .args([
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "udp.dstport",
            "-e",
            "frame.protocols",
        ])
        .args([
            "-e",
            "infiniband.invariant.crc",
            "-e",
            "udp.checksum.status",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len(), "{text}");
    for (i, ((op, fr), line)) in frames.iter().zip(&lines).enumerate() {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 5, "{line}");
        assert_eq!(cols[0], op.to_string(), "{line}");
        assert_eq!(cols[1], "4791", "{line}");
        assert!(cols[2].contains("infiniband"), "{line}");
        // Wireshark shows (does not verify, cm.md §7.6) the ICRC as the big-endian reading of
        // the last 4 bytes; it skips the field for UD, whose trailer it leaves in the payload.
        let n = fr.len();
        let shown = u32::from_be_bytes([fr[n - 4], fr[n - 3], fr[n - 2], fr[n - 1]]);
        if *op != opcode::UD_SEND_ONLY {
            assert_eq!(cols[3], format!("{shown:#010x}"), "{line}");
        }
        // UDP checksum status: 3 = not present (IPv4, checksum 0), 1 = good (IPv6).
        let v4 = i < CASES.len();
        assert_eq!(cols[4], if v4 { "3" } else { "1" }, "{line}");
    }
    let verbose = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args([
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "ip.check_checksum:TRUE",
            "-V",
        ])
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&verbose.stdout);
    if std::env::var_os("PVRDMA_SIM_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    } else {
        eprintln!("kept {}", path.display());
    }
    for bad in [
        "Malformed",
        "Expert Info (Warning",
        "Expert Info (Error",
        "[Bad",
        "incorrect",
    ] {
        assert!(!v.contains(bad), "tshark reports {bad:?}:\n{v}");
    }
    let opcode_lines: Vec<&str> = v
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Opcode: "))
        .collect();
    let expected: Vec<String> = CASES
        .iter()
        .chain(CASES.iter())
        .map(|(_, n)| format!("Opcode: {n}"))
        .collect();
    assert_eq!(opcode_lines, expected);
    assert!(v.matches("\nInfiniBand\n").count() == frames.len(), "{v}");
    assert_eq!(
        v.matches("RETH - RDMA Extended Transport Header").count(),
        2
    );
    assert_eq!(v.matches("AETH - ACK Extended Transport Header").count(), 4);
    assert_eq!(
        v.matches("DETH - Datagram Extended Transport Header")
            .count(),
        2
    );
    assert!(v.contains("Internet Protocol Version 4") && v.contains("Internet Protocol Version 6"));
}
