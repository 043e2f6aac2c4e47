//! smbdperf (examples/smbdperf.rs) runs and its figures hold what the protocol fixes: a small
//! run prints a row per test and size, and every RDMA-channel I/O costs exactly three post
//! doorbells on each host (client: NdkFastRegister, the request's SEND, the receive reposted;
//! server: the RDMA READ or WRITE, the Send-with-Invalidate, the receive reposted), and an
//! inline 4 KiB I/O five on each (its fragments and their receives). Runs the example binary
//! cargo builds next to this test (building it if missing).

use std::path::PathBuf;
use std::process::Command;

fn smbdperf() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let bin = profile_dir
        .join("examples")
        .join(format!("smbdperf{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--example", "smbdperf"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build --example smbdperf");
        assert!(st.success(), "cargo build --example smbdperf failed");
    }
    bin
}

#[test]
fn a_small_run_prints_every_row_with_three_posts_per_rdma_io() {
    let out = Command::new(smbdperf())
        .args(["-n", "32", "-d", "4", "-s", "4096,1048576"])
        .output()
        .expect("run smbdperf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "smbdperf failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" rdma ") || l.contains(" inline "))
        .collect();
    // 4 KiB: four tests; 1 MiB: the RDMA channel only.
    assert_eq!(rows.len(), 6, "{text}");
    for r in &rows {
        let cols: Vec<&str> = r.split('|').collect();
        assert_eq!(cols.len(), 3, "{r}");
        let posts = |c: &str| c.trim().split('/').next().unwrap().parse::<f64>().unwrap();
        let (client, server) = (posts(cols[1]), posts(cols[2]));
        if r.contains(" rdma ") {
            assert_eq!((client, server), (3.0, 3.0), "{r}");
        } else {
            // 4096 B + the 112-byte WRITE header (or the 80-byte READ response header) in
            // 1340-byte fragments: 4 SENDs by the side that carries the data, 1 by the other,
            // and as many receives reposted: 5 posts on each host.
            assert_eq!((client, server), (5.0, 5.0), "{r}");
        }
    }
    assert!(text.contains("tokens invalidated by the server"), "{text}");
}
