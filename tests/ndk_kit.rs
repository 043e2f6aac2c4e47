//! The NDK-consumer kit (`common::ndk`) end to end: two hosts on one simulated RoCEv2
//! fabric, PD/CQ/QP on each, test wiring between the QPs, then SEND→RECEIVE, RDMA WRITE
//! and RDMA READ with the bytes and every NDK_RESULT field checked, in both model modes,
//! and a leak-free teardown.

mod common;

use common::Mode;
use common::ndk::{Cluster, QpSpec, Registered, fill, verify};
use pvrdma_ndk::ndkpi::*;

const QPC_A: usize = 0xA0A0;
const QPC_B: usize = 0xB0B0;

fn result(r: &NDK_RESULT) -> (NTSTATUS, u32, usize, usize) {
    (
        r.Status,
        r.BytesTransferred,
        r.QPContext as usize,
        r.RequestContext as usize,
    )
}

fn two_hosts_send_write_read(mode: Mode) {
    let c = Cluster::new(mode, 2);
    let (ha, hb) = (c.host(0), c.host(1));
    let info = c.adapter(0).query_info().expect("NdkQueryAdapterInfo");
    assert_eq!((info.Version.Major, info.Version.Minor), (2, 1));

    let pd_a = c.adapter(0).create_pd().expect("PD a");
    let pd_b = c.adapter(1).create_pd().expect("PD b");
    let cq_a = c.adapter(0).create_cq(64, None).expect("CQ a");
    let cq_b = c.adapter(1).create_cq(64, None).expect("CQ b");
    let qa = pd_a
        .create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A))
        .expect("QP a");
    let qb = pd_b
        .create_qp(&cq_b, &cq_b, QpSpec::new(QPC_B))
        .expect("QP b");
    c.connect(&qa, &qb);

    let rw = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;
    let remote = rw | NDK_MR_FLAG_ALLOW_REMOTE_READ | NDK_MR_FLAG_ALLOW_REMOTE_WRITE;
    let a_mem = Registered::new(ha, &pd_a, 2, 0x1000_0000, rw);
    let b_mem = Registered::new(hb, &pd_b, 2, 0x7000_0000, remote);
    let b_rkey = b_mem.mr.remote_token();
    assert_ne!(b_rkey, 0, "remote access gives a remote token");

    // SEND a → RECEIVE b: 100 bytes into a 256-byte receive at offset 8.
    let sent = fill(&a_mem.mem, 0, 0x11, 100);
    assert_eq!(qb.receive(0xB1, &[b_mem.sge(8, 256)]), STATUS_SUCCESS);
    assert_eq!(qa.send(0xA1, &[a_mem.sge(0, 100)], 0), STATUS_SUCCESS);
    let ra = cq_a.wait_results(1);
    assert_eq!(result(&ra[0]).0, STATUS_SUCCESS);
    assert_eq!((result(&ra[0]).2, result(&ra[0]).3), (QPC_A, 0xA1));
    let rb = cq_b.wait_results(1);
    assert_eq!(result(&rb[0]), (STATUS_SUCCESS, 100, QPC_B, 0xB1));
    verify(&b_mem.mem, 8, &sent);
    verify(&b_mem.mem, 108, &[0; 16]);

    // RDMA WRITE a → b's second page, 64 bytes from a's offset 512.
    let written = fill(&a_mem.mem, 512, 0x22, 64);
    let st = qa.write(
        0xA2,
        &[a_mem.sge(512, 64)],
        b_mem.mem.va + 4096 + 16,
        b_rkey,
        0,
    );
    assert_eq!(st, STATUS_SUCCESS);
    let ra = cq_a.wait_results(1);
    assert_eq!(
        (
            ra[0].Status,
            ra[0].QPContext as usize,
            ra[0].RequestContext as usize
        ),
        (STATUS_SUCCESS, QPC_A, 0xA2)
    );
    verify(&b_mem.mem, 4096 + 16, &written);
    assert!(
        cq_b.results(4).is_empty(),
        "a WRITE completes nothing at the target"
    );

    // RDMA READ b's bytes at 2048 into a's second page.
    let source = fill(&b_mem.mem, 2048, 0x33, 200);
    let st = qa.read(
        0xA3,
        &[a_mem.sge(4096, 200)],
        b_mem.mem.va + 2048,
        b_rkey,
        0,
    );
    assert_eq!(st, STATUS_SUCCESS);
    let ra = cq_a.wait_results_ex(1);
    assert_eq!(
        (
            ra[0].Status,
            ra[0].QPContext as usize,
            ra[0].RequestContext as usize,
            ra[0].Type
        ),
        (STATUS_SUCCESS, QPC_A, 0xA3, NdkOperationTypeRead)
    );
    verify(&a_mem.mem, 4096, &source);
    assert!(cq_a.notifications().is_empty(), "never armed");

    let mems = [a_mem.close(), b_mem.close()];
    for q in [qa, qb] {
        q.close();
    }
    cq_a.close();
    cq_b.close();
    pd_a.close();
    pd_b.close();
    drop(mems);
    c.finish();
}

#[test]
fn kit_two_hosts_deterministic() {
    two_hosts_send_write_read(Mode::Deterministic);
}

#[test]
fn kit_two_hosts_threaded() {
    two_hosts_send_write_read(Mode::Threaded);
}
