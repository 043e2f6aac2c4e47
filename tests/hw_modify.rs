//! `Verbs::modify_qp` and the GID binding against the device model: two RC QPs
//! taken INIT → RTR → RTS by the verbs alone (no test utility) move data; ERR flushes what is
//! outstanding as STATUS_CANCELLED (ndkpi.md §5.6); out-of-range values never reach the
//! device; CREATE_BIND / DESTROY_BIND fill and clear the model's GID table, and frames sent
//! from a bound index carry that source address.

mod common;
mod ndk_dp;

use std::sync::{Arc, Mutex};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, Qp, QpSpec, Registered};
use ndk_dp::*;
use pvrdma_ndk::cm::addr::gid_from_ip;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::pvrdma::PvrdmaError;
use pvrdma_ndk::pvrdma::verbs::{QpModify, QpPath, QpState, Verbs};
use pvrdma_sim::pcap::{PcapWriter, TsResolution};
use pvrdma_sim::qp::QpState as ModelState;

/// The bytes of a pcap capture, shared with the fabric's writer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    /// The captured frames: after the 24-byte global header, records of a 16-byte header
    /// (`incl_len` at byte 8) and the frame.
    fn frames(&self) -> Vec<Vec<u8>> {
        let b = self.0.lock().unwrap();
        let mut at = 24;
        let mut out = Vec::new();
        while at + 16 <= b.len() {
            let len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
            out.push(b[at + 16..at + 16 + len].to_vec());
            at += 16 + len;
        }
        out
    }
}

/// Runs one seam command on host `h` and waits for its completion.
fn run<T: Send + 'static>(
    c: &Cluster,
    h: usize,
    issue: impl FnOnce(&Verbs, Box<dyn FnOnce(Result<T, PvrdmaError>) + Send>),
) -> Result<T, PvrdmaError> {
    let cell: Arc<Mutex<Option<Result<T, PvrdmaError>>>> = Arc::new(Mutex::new(None));
    let c2 = cell.clone();
    issue(
        &c.host(h).hw,
        Box::new(move |r| *c2.lock().unwrap() = Some(r)),
    );
    c.wait_for("the command's completion", || {
        cell.lock().unwrap().is_some()
    });
    cell.lock().unwrap().take().unwrap()
}

fn modify(c: &Cluster, q: &Qp, m: QpModify) -> Result<(), PvrdmaError> {
    let h = q.handle();
    run(c, q.host(), |hw, done| hw.modify_qp(h, &m, done))
}

fn model_qp(c: &Cluster, q: &Qp) -> pvrdma_sim::device::QpInfo {
    let h = q.handle();
    c.host(q.host())
        .model
        .with_core(|core| core.qp_info(h))
        .expect("QP in the model")
}

/// What the connection manager will ask for at REP/RTU time: RTR with the peer's QPN, PSN,
/// path and our IRD, then RTS with our PSN, ORD and the retry budget.
fn rtr(peer_qpn: u32, rq_psn: u32, path: QpPath) -> QpModify {
    QpModify {
        state: Some(QpState::Rtr),
        path_mtu: Some(3),
        dest_qpn: Some(peer_qpn),
        rq_psn: Some(rq_psn),
        path: Some(path),
        max_dest_rd_atomic: Some(16),
        min_rnr_timer: Some(12),
        ..QpModify::default()
    }
}

fn rts(sq_psn: u32) -> QpModify {
    QpModify {
        state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        max_rd_atomic: Some(8),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        ..QpModify::default()
    }
}

fn path_to(c: &Cluster, host: usize) -> QpPath {
    QpPath {
        dgid: c.host(host).gid,
        dmac: c.host(host).mac,
        sgid_index: 0,
        hop_limit: 64,
        ..QpPath::default()
    }
}

/// Both QPs of `p` to RTS through the seam; marks them connected for the NDK layer.
fn connect_through_seam(c: &Cluster, p: &Pair) {
    let (qa, qb) = (model_qp(c, &p.qa).qpn, model_qp(c, &p.qb).qpn);
    assert_eq!(
        modify(c, &p.qa, rtr(qb, 0x20, path_to(c, 1))),
        Ok(()),
        "a RTR"
    );
    assert_eq!(
        modify(c, &p.qb, rtr(qa, 0x10, path_to(c, 0))),
        Ok(()),
        "b RTR"
    );
    assert_eq!(modify(c, &p.qa, rts(0x10)), Ok(()), "a RTS");
    assert_eq!(modify(c, &p.qb, rts(0x20)), Ok(()), "b RTS");
    for q in [&p.qa, &p.qb] {
        // SAFETY: a live QP of this provider.
        unsafe { pvrdma_ndk::ndk::set_qp_connected(q.ptr, true) };
    }
}

#[test]
fn rc_qps_reach_rts_through_the_seam_and_move_data() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::with(&c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false);
    assert_eq!(model_qp(&c, &p.qa).state, ModelState::Init);
    connect_through_seam(&c, &p);
    let (ia, ib) = (model_qp(&c, &p.qa), model_qp(&c, &p.qb));
    assert_eq!((ia.state, ib.state), (ModelState::Rts, ModelState::Rts));
    assert_eq!(ia.attr.dest_qp_num, ib.qpn);
    assert_eq!(ia.attr.sq_psn, 0x10);
    assert_eq!(ia.attr.rq_psn, 0x20);
    assert_eq!(ia.attr.max_rd_atomic, 8);
    assert_eq!(ia.attr.max_dest_rd_atomic, 16);
    assert_eq!(ia.attr.path_mtu, 3);
    assert_eq!(ia.attr.ah_attr.dgid, c.host(1).gid);
    assert_eq!(ia.attr.ah_attr.dmac, c.host(1).mac);

    let ma = Registered::new(c.host(0), &p.pd_a, 2, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 2, 0x2000_0000, LOCAL);
    let msg = common::ndk::fill(&ma.mem, 0, 0x5A, 3000);
    assert_eq!(p.qb.receive(7, &[mb.sge(0, 4096)]), STATUS_SUCCESS);
    assert_eq!(p.qa.send(8, &[ma.sge(0, 3000)], 0), STATUS_SUCCESS);
    let rb = p.cq_b.wait_results(1);
    assert_eq!(res(&rb[0]), (STATUS_SUCCESS, 3000, QPC_B, 7));
    let ra = p.cq_a.wait_results(1);
    assert_eq!(res(&ra[0]), (STATUS_SUCCESS, 0, QPC_A, 8));
    common::ndk::verify(&mb.mem, 0, &msg);
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

#[test]
fn err_flushes_outstanding_requests_as_cancelled() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::with(&c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false);
    connect_through_seam(&c, &p);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    for i in 0..3 {
        assert_eq!(p.qa.receive(10 + i, &[ma.sge(0, 256)]), STATUS_SUCCESS);
    }
    // The peer's link is down, so the SEND is unacknowledged; the ERR is issued before the
    // model runs at all, so it finds the SEND outstanding (its retry timer could only expire
    // in a later fabric step, after the device has taken the command).
    c.world.set_link(1, false);
    assert_eq!(p.qa.send(20, &[ma.sge(256, 64)], 0), STATUS_SUCCESS);
    let err = QpModify {
        state: Some(QpState::Err),
        ..QpModify::default()
    };
    assert_eq!(modify(&c, &p.qa, err), Ok(()));
    assert_eq!(model_qp(&c, &p.qa).state, ModelState::Err);
    let got: Vec<_> = p.cq_a.wait_results(4).iter().map(res).collect();
    // M32: the SQ first, then the RQ, each in posting order.
    assert_eq!(
        got,
        vec![
            (STATUS_CANCELLED, 0, QPC_A, 20),
            (STATUS_CANCELLED, 0, QPC_A, 10),
            (STATUS_CANCELLED, 0, QPC_A, 11),
            (STATUS_CANCELLED, 0, QPC_A, 12),
        ]
    );
    c.world.set_link(1, true);
    drop(ma.close());
    p.close();
    c.finish();
}

#[test]
fn bad_values_and_bad_transitions_are_refused() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::with(&c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false);
    let commands = || c.host(0).dev.cmd().stats().submitted;
    let before = commands();
    let mut m = rts(1 << 24);
    assert_eq!(modify(&c, &p.qa, m), Err(PvrdmaError::InvalidParameter));
    m = rtr(0x101, 0, path_to(&c, 1));
    m.path_mtu = Some(6);
    assert_eq!(modify(&c, &p.qa, m), Err(PvrdmaError::InvalidParameter));
    assert_eq!(commands(), before, "refused before the device");
    // INIT → RTS skips RTR: the device refuses (M39, error 22) and the QP stays in INIT.
    let refused = Err(PvrdmaError::CommandRejected { code: 10, err: 22 });
    assert_eq!(
        modify(&c, &p.qa, rts(1)),
        refused,
        "MODIFY_QP refused: EINVAL"
    );
    assert_eq!(commands(), before + 1);
    assert_eq!(model_qp(&c, &p.qa).state, ModelState::Init);
    // RC RTR without the attributes §8 requires (no path): refused likewise.
    let mut no_path = rtr(0x101, 0, path_to(&c, 1));
    no_path.path = None;
    assert_eq!(modify(&c, &p.qa, no_path), refused);
    assert_eq!(model_qp(&c, &p.qa).state, ModelState::Init);
    p.close();
    c.finish();
}

#[test]
fn gids_bind_and_unbind_and_frames_carry_the_bound_source() {
    let c = Cluster::with(ClusterConfig::new(Mode::Deterministic, 2));
    let v4 = gid_from_ip("10.0.0.1".parse().unwrap());
    assert_eq!(v4, c.host(0).gid, "the node's GID is ::ffff:10.0.0.1");
    let extra_v4 = gid_from_ip("192.168.7.9".parse().unwrap());
    let mut want = [0u8; 16];
    want[10..12].copy_from_slice(&[0xFF, 0xFF]);
    want[12..].copy_from_slice(&[192, 168, 7, 9]);
    assert_eq!(extra_v4, want);
    let v6 = gid_from_ip("fd00::1:2".parse().unwrap());
    assert_eq!(v6[0], 0xFD);
    assert_eq!(&v6[12..], &[0, 1, 0, 2]);

    let gid = |i: u32| c.host(0).model.with_core(|core| core.gid(i));
    for (i, g) in [(3u32, extra_v4), (4, v6)] {
        assert_eq!(run(&c, 0, |hw, d| hw.bind_gid(i, g, d)), Ok(()));
        let e = gid(i).expect("bound");
        assert_eq!(e.gid, g);
    }
    // An index beyond the table (gid_tbl_len = 16) fails in the device.
    assert_eq!(
        run(&c, 0, |hw, d| hw.bind_gid(16, extra_v4, d)),
        Err(PvrdmaError::CommandRejected { code: 15, err: 22 }),
        "CREATE_BIND refused: EINVAL"
    );

    // A SEND from sgid index 3 leaves as 192.168.7.9: the peer's QP learns it from the GRH
    // of the frame only through routing, so look at the model's transmitted frames.
    let p = Pair::with(&c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false);
    let (qa, qb) = (model_qp(&c, &p.qa).qpn, model_qp(&c, &p.qb).qpn);
    let mut from3 = path_to(&c, 1);
    from3.sgid_index = 3;
    assert_eq!(modify(&c, &p.qa, rtr(qb, 0x20, from3)), Ok(()));
    assert_eq!(model_qp(&c, &p.qa).attr.ah_attr.sgid_index, 3);
    // b answers to a's extra address, which a now owns: the fabric routes by bound GIDs.
    let mut to_extra = path_to(&c, 0);
    to_extra.dgid = extra_v4;
    assert_eq!(modify(&c, &p.qb, rtr(qa, 0x10, to_extra)), Ok(()));
    assert_eq!(modify(&c, &p.qa, rts(0x10)), Ok(()));
    assert_eq!(modify(&c, &p.qb, rts(0x20)), Ok(()));
    for q in [&p.qa, &p.qb] {
        // SAFETY: a live QP of this provider.
        unsafe { pvrdma_ndk::ndk::set_qp_connected(q.ptr, true) };
    }
    let pcap = Capture::default();
    let writer = PcapWriter::new(
        Box::new(pcap.clone()) as Box<dyn std::io::Write + Send>,
        TsResolution::Micro,
    )
    .unwrap();
    c.world.set_capture(Some(writer));
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    assert_eq!(p.qb.receive(1, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(p.qa.send(2, &[ma.sge(0, 16)], 0), STATUS_SUCCESS);
    assert_eq!(res(&p.cq_b.wait_results(1)[0]).0, STATUS_SUCCESS);
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    drop(c.world.set_capture(None));
    let frames = pcap.frames();
    // Ethernet (14 bytes), then the IPv4 header with its source address at byte 12.
    let ipv4_src = |f: &Vec<u8>| f.get(26..30).map(|s| s.to_vec());
    assert!(!frames.is_empty());
    assert!(
        frames
            .iter()
            .any(|f| ipv4_src(f) == Some(vec![192, 168, 7, 9])),
        "a frame from 192.168.7.9"
    );
    assert!(
        !frames
            .iter()
            .any(|f| ipv4_src(f) == Some(vec![10, 0, 0, 1])),
        "none from 10.0.0.1"
    );

    assert_eq!(run(&c, 0, |hw, d| hw.unbind_gid(3, extra_v4, d)), Ok(()));
    assert_eq!(gid(3), None);
    assert_eq!(run(&c, 0, |hw, d| hw.unbind_gid(4, v6, d)), Ok(()));
    assert_eq!(gid(4), None);
    assert!(gid(0).is_some(), "index 0 untouched");
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}
