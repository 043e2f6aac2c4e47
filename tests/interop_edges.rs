//! The provider against Linux's RDMA stack at the edges rping and perftest cannot reach
//! (issue 20 item 4): SendAndInvalidate toward Linux, a fast-registered MR read and written by
//! Linux and then invalidated, RNR both ways, sizes from 1 byte to 1 MiB across the path MTU
//! (1024, and 4096 on a guest with jumbo frames), retransmission with the fabric dropping,
//! duplicating and reordering frames between the host and the guest, disconnects from either
//! side, and a peer that vanishes.
//!
//! The Linux side is `rc_agent` (tools/peer/progs/rc_agent.c), driven by the NDK side over its
//! own connection (tests/common/interop/agent.rs); each case checks the agent's verdict (exit
//! status and its lines), every byte on the NDK side, the statuses the NDK side saw, and the
//! guest's rxe counters (tests/common/interop/rig.rs). `PVRDMA_INTEROP_CASES=TEXT` runs the
//! cases whose name contains TEXT.
//!
//! They need the guest image (`tools/peer/build-guest.sh`, QEMU from `tools/peer/qemu.sh`),
//! so they are `#[ignore]`d in the default run; `.ci/run` runs them with `--ignored`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pvrdma_ndk::ndkpi::*;

use common::guest::{COMMAND_TIMEOUT, Job, Output};
use common::interop::agent::{self, AGENT_PORT, Link, LinkSpec, Msg, op, status_name};
use common::interop::rig::{Counters, Rig, Suite, family, linux_ok};
use common::ndk::{Listener, sa};
use pvrdma_sim::fabric::{FaultConfig, PairCounters};

/// Which end the NDK side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    NdkClient,
    NdkServer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::NdkClient => "NDK client, Linux server",
            Role::NdkServer => "NDK server, Linux client",
        }
    }
}

/// An NDK link to a running rc_agent.
struct Ends<'g> {
    link: Link,
    agent: Job<'g>,
    listener: Option<Listener>,
}

impl Ends<'_> {
    /// Waits for the agent's end and checks its own verdict; closes the NDK objects.
    fn finish(self, r: &Rig<'_>) -> Output {
        let out = self.agent.wait(COMMAND_TIMEOUT).expect("rc_agent ends");
        eprintln!("{}", out.stdout.trim_end());
        linux_ok("rc_agent", &out);
        assert!(!out.stdout.contains("FAILED"), "{out}");
        self.link.close(&r.c);
        if let Some(l) = self.listener {
            assert_eq!(l.close(), STATUS_SUCCESS, "NdkCloseListener");
        }
        out
    }
}

/// Starts rc_agent (`args` after the role's) and connects the NDK side to it.
fn open<'r>(r: &'r Rig<'_>, role: Role, spec: LinkSpec, args: &str) -> Ends<'r> {
    let mut link = Link::new(&r.c, 0, spec);
    match role {
        Role::NdkClient => {
            let agent = r
                .guest()
                .spawn(&format!(
                    "rc_agent -s -b {} -p {AGENT_PORT} {args}",
                    r.guest_ip()
                ))
                .unwrap();
            agent
                .wait_for_stdout("rc_agent: listening", COMMAND_TIMEOUT)
                .unwrap();
            link.connect(&r.c, sa(r.guest_ip(), AGENT_PORT));
            Ends {
                link,
                agent,
                listener: None,
            }
        }
        Role::NdkServer => {
            let listener = r.c.adapter(0).create_listener().expect("listener");
            assert_eq!(listener.listen(sa(r.host_ip(), AGENT_PORT)), STATUS_SUCCESS);
            let agent = r
                .guest()
                .spawn(&format!(
                    "rc_agent -c {} -p {AGENT_PORT} {args}",
                    r.host_ip()
                ))
                .unwrap();
            let accepted =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| link.accept(&listener)));
            if let Err(e) = accepted {
                // What rc_agent said is the story of a connection that did not come.
                eprintln!("rc_agent so far: {:?}", agent.peek(COMMAND_TIMEOUT));
                std::panic::resume_unwind(e);
            }
            Ends {
                link,
                agent,
                listener: Some(listener),
            }
        }
    }
}

/// Message sizes across path MTU `mtu`: 1 byte, each side of one and two packets, 64 KiB + 1
/// and 1 MiB.
fn sizes(mtu: usize) -> Vec<usize> {
    vec![
        1,
        mtu - 1,
        mtu,
        mtu + 1,
        2 * mtu + 1,
        64 * 1024 + 1,
        agent::AGENT_BUF,
    ]
}

/// Every operation both ways at every size; then the NDK side disconnects.
fn sizes_case(r: &Rig<'_>, role: Role, mtu: usize) {
    let mut e = open(r, role, LinkSpec::full(), "");
    let hello = e.link.hello(&r.c);
    for (i, &len) in sizes(mtu).iter().enumerate() {
        let t = Instant::now();
        // CAST: a handful of sizes.
        e.link.exchange(&r.c, &hello, 16 * i as u32, len);
        eprintln!("  {len} B: 6 transfers in {:.2} s", agent::secs(t));
    }
    e.link.command(&r.c, Msg::new(op::BYE));
    assert_eq!(e.link.disconnect_and_flush(&r.c), LinkSpec::full().receives);
    assert_eq!(e.link.conn().disconnects.count(), 0, "no DisconnectEvent");
    let out = e.finish(r);
    assert_eq!(agent::agent_qp(&out).path_mtu as usize, mtu, "the path MTU");
}

/// NdkSendAndInvalidate toward Linux: the agent binds a type-2 memory window (what a Linux
/// process can have invalidated remotely), the NDK side writes and reads through it, then
/// SendAndInvalidates it: rxe reports IBV_WC_WITH_INV with that rkey, and a later RDMA
/// through it fails (WRITE: STATUS_ACCESS_VIOLATION; READ: STATUS_REMOTE_RESOURCES, ndkpi.md
/// decision (c)); the QP is then in error and every receive still posted is flushed.
fn send_and_invalidate_case(r: &Rig<'_>, role: Role, later_read: bool) {
    let mut e = open(r, role, LinkSpec::small(), "-z 65536");
    let _hello = e.link.hello(&r.c);
    let mut bind = Msg::new(op::BIND_MW);
    (bind.offset, bind.len) = (4096, 8192);
    let mw = e.link.command(&r.c, bind);
    eprintln!("  MW rkey {:#x} at {:#x}", mw.rkey, mw.addr);
    // The window works: WRITE through it (checked by the agent at its offset), READ back.
    e.link.write_remote(&r.c, 0x51, 8192, mw.addr, mw.rkey);
    let mut check = Msg::new(op::CHECK);
    (check.seed, check.len, check.offset) = (0x51, 8192, 4096);
    e.link.command(&r.c, check);
    let rd = e.link.read_remote(&r.c, 8192, mw.addr, mw.rkey);
    assert_eq!(rd.Status, STATUS_SUCCESS, "{}", status_name(rd.Status));
    agent::assert_bytes(
        &common::ndk::read(&e.link.data.mem, 0, 8192),
        0x51,
        "READ through the MW",
    );
    e.link.send_checked(&r.c, 0x52, 100, Some(mw.rkey));
    // Now an RDMA through the invalidated rkey fails; the agent expects its QP to break.
    e.link.command(&r.c, Msg::new(op::EXPECT_ERROR));
    let posted = e.link.receives_posted();
    let (res, want) = if later_read {
        let res = e.link.read_remote(&r.c, 64, mw.addr, mw.rkey);
        (res, STATUS_REMOTE_RESOURCES)
    } else {
        let ctx = 0xDEAD;
        let sge = e.link.data.sge(0, 64);
        assert_eq!(
            e.link.qp.write(ctx, &[sge], mw.addr, mw.rkey, 0),
            STATUS_SUCCESS
        );
        (
            e.link
                .initiator_result(&r.c, ctx, "NdkWrite through the invalidated rkey"),
            STATUS_ACCESS_VIOLATION,
        )
    };
    eprintln!(
        "  RDMA {} through the invalidated rkey: {}",
        if later_read { "READ" } else { "WRITE" },
        status_name(res.Status)
    );
    assert_eq!(res.Status, want, "{}", status_name(res.Status));
    assert_eq!(e.link.flush_receives(&r.c), posted, "receives flushed");
    new_request_after_error(r, &mut e.link);
    let st = e.link.conn().disconnect();
    eprintln!("  NdkDisconnect after the QP error: {}", status_name(st));
    assert_eq!(st, STATUS_SUCCESS);
    let out = e.finish(r);
    assert!(
        out.stdout.contains(&format!(
            "SEND with invalidate of rkey {:#x}, 100 bytes verified",
            mw.rkey
        )),
        "{out}"
    );
    assert!(out.stdout.contains("broke the QP as announced"), "{out}");
}

/// A request posted after the QP failed: NDK's "later requests complete with the CANCELLED
/// status" (ndkpi.md decision (c), first row).
fn new_request_after_error(r: &Rig<'_>, link: &mut Link) {
    let sge = link.tx.sge(0, 16);
    let ctx = 0xBAD;
    let st = link.qp.send(ctx, &[sge], 0);
    eprintln!("  NdkSend after the QP error: inline {}", status_name(st));
    assert_eq!(st, STATUS_SUCCESS, "{}", status_name(st));
    let res = link.initiator_result(&r.c, ctx, "NdkSend after the QP error");
    eprintln!("  ... completed {}", status_name(res.Status));
    assert_eq!(res.Status, STATUS_CANCELLED, "{}", status_name(res.Status));
}

/// The device model's transport counters of host 0.
fn model(r: &Rig<'_>) -> pvrdma_sim::transport::TransportCounters {
    r.c.world.counters(0).transport
}

/// The model's view of the link's QP: (timeout, retry_cnt, rnr_retry, min_rnr_timer,
/// path_mtu code).
fn qp_attr(r: &Rig<'_>, link: &Link) -> (u8, u8, u8, u8, u32) {
    let h = link.qp.handle();
    let a =
        r.c.host(0)
            .model
            .with_core(|c| c.qp_info(h))
            .expect("the QP in the model")
            .attr;
    (
        a.timeout,
        a.retry_cnt,
        a.rnr_retry,
        a.min_rnr_timer,
        a.path_mtu,
    )
}

/// NdkFastRegister of an MR over 5 pages of NDK memory (NdkBuildLAM's logical addresses,
/// first byte at offset 100, 17,384 bytes), remote read and write. Linux RDMA READs it (every
/// byte checked by rc_agent) and RDMA WRITEs it (every byte checked here, the bytes around the
/// range untouched); then the MR is invalidated — by NdkInvalidate (a successful Invalidate
/// result), or by Linux's SEND with invalidate of its token (NdkOperationTypeReceiveAndInvalidate
/// carrying the token) — and Linux's next access fails with IBV_WC_REM_ACCESS_ERR: the NDK
/// QP, its responder, goes to error and every receive still posted is flushed.
fn fast_register_case(r: &Rig<'_>, role: Role, remote_invalidate: bool, later: u32) {
    const FBO: usize = 100;
    const LEN: usize = 4 * 4096 + 1000;
    let mut e = open(r, role, LinkSpec::small(), "-z 65536");
    let _hello = e.link.hello(&r.c);
    let mem = r.c.host(0).mem(6, 0x7000_0000);
    let mdl = mem.mdl(FBO, LEN as u32);
    let a = r.c.adapter(0);
    let lam = a.build_lam(&mdl, LEN).expect("NdkBuildLAM");
    assert_eq!(lam.fbo as usize, FBO, "the LAM's first byte offset");
    let pages = lam.pages();
    assert_eq!(pages.len(), 5);
    let mr = e
        .link
        .pd
        .create_mr(true)
        .expect("NdkCreateMr (fast register)");
    assert_eq!(mr.initialize_fast_register(5, true), STATUS_SUCCESS);
    let va = mem.va + FBO as u64;
    let flags = NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    let fr = e.link.initiate(&r.c, "NdkFastRegister", |q, ctx| {
        q.fast_register(ctx, &mr, &pages, lam.fbo, LEN, va, flags)
    });
    assert_eq!(
        (fr.Status, fr.Type),
        (STATUS_SUCCESS, NdkOperationTypeFastRegister),
        "{}",
        status_name(fr.Status)
    );
    let token = mr.remote_token();
    eprintln!("  fast-registered token {token:#x} at {va:#x}, {LEN} bytes");
    // Linux reads what is there, then writes a new pattern over it.
    mem.buf.write(FBO, &agent::pattern(0x61, LEN));
    e.link.agent_reads(&r.c, 0x61, LEN, va, token);
    e.link.agent_writes(&r.c, 0x62, LEN, va, token);
    let all = common::ndk::read(&mem, 0, 6 * 4096);
    agent::assert_bytes(
        &all[FBO..FBO + LEN],
        0x62,
        "what Linux wrote into the FR MR",
    );
    assert!(
        all[..FBO].iter().chain(&all[FBO + LEN..]).all(|&b| b == 0),
        "Linux's WRITE stayed inside the registered range"
    );
    if remote_invalidate {
        e.link.receive_checked(&r.c, 0x63, 200, Some(token));
        eprintln!("  invalidated by Linux's SEND with invalidate (ReceiveAndInvalidate)");
    } else {
        let inv = e
            .link
            .initiate(&r.c, "NdkInvalidate", |q, ctx| q.invalidate(ctx, &mr, 0));
        assert_eq!(
            (inv.Status, inv.Type),
            (STATUS_SUCCESS, NdkOperationTypeInvalidate),
            "{}",
            status_name(inv.Status)
        );
        eprintln!("  invalidated by NdkInvalidate");
    }
    // Linux's access now fails at our responder; the agent ends there.
    let posted = e.link.receives_posted();
    let mut m = Msg::new(later);
    (m.addr, m.rkey, m.seed, m.len) = (va, token, 0x64, 64);
    m.expect = agent::wc::REM_ACCESS_ERR;
    let snapshot = common::ndk::read(&mem, 0, 6 * 4096);
    e.link.command_async(&r.c, m);
    assert_eq!(e.link.flush_receives(&r.c), posted, "receives flushed");
    assert_eq!(
        common::ndk::read(&mem, 0, 6 * 4096),
        snapshot,
        "nothing changed through the invalidated token"
    );
    assert_eq!(e.link.conn().disconnects.count(), 0, "no DisconnectEvent");
    let st = e.link.conn().disconnect();
    eprintln!("  NdkDisconnect after the QP error: {}", status_name(st));
    assert_eq!(st, STATUS_SUCCESS);
    // The MR before its PD (a PD's close waits for its MRs).
    assert_eq!(mr.close(), STATUS_SUCCESS, "NdkCloseMr");
    a.release_lam(lam);
    drop(mem);
    let out = e.finish(r);
    let what = if later == op::READ {
        "RDMA READ"
    } else {
        "RDMA WRITE"
    };
    assert!(
        out.stdout.contains(&format!(
            "{what} failed as expected: remote access error (10)"
        )),
        "{out}"
    );
}

/// RNR toward Linux: rc_agent posts no receive; the NDK SEND (3 packets) meets rxe's RNR
/// NAKs (timer rdma_cm's min_rnr_timer 0: 655.36 ms) and retries per the QP's RNR retry
/// count, which is what rc_agent's CM asked in its REQ/REP (Linux cm.c: each side's
/// rnr_retry is the peer's RNR Retry Count). `later`: rc_agent asks 7 (retry forever, as
/// rping does), a receive is posted once two NAKs came and the SEND then succeeds, every byte
/// checked by the agent; else it asks 3 and the SEND fails with STATUS_IO_TIMEOUT after the
/// RNR budget (rnr_retry × the NAK's timer), the QP is in error (receives flushed, a new
/// request CANCELLED) and NdkDisconnect still succeeds. rxe's `out_of_seq_request` moves once
/// per RNR round: the SEND's 2nd packet arrives behind the RNR-NAKed 1st, and rxe's
/// responder (rxe_resp.c `check_psn`) counts it and sends one sequence NAK per round.
fn rnr_toward_linux_case(r: &Rig<'_>, role: Role, later: bool) {
    const LEN: usize = 3000;
    let go = "/tmp/rc_agent.go";
    r.guest()
        .run_ok(&format!("rm -f {go}"), COMMAND_TIMEOUT)
        .unwrap();
    let (wait, asked) = if later {
        (format!("-w {go}"), 7)
    } else {
        (String::new(), 3)
    };
    let mut e = open(
        r,
        role,
        LinkSpec::small(),
        &format!("-m rnr-recv -n {LEN} -e 7 -R {asked} {wait}"),
    );
    let (_, _, rnr_retry, _, _) = qp_attr(r, &e.link);
    assert_eq!(
        rnr_retry, asked,
        "the NDK QP's RNR retry count is what Linux's CM asked"
    );
    let peek = e
        .agent
        .wait_for_stdout("no receive posted", COMMAND_TIMEOUT)
        .unwrap();
    let linux = agent::agent_qp(&peek);
    let before = model(r);
    e.link.tx.mem.buf.write(0, &agent::pattern(7, LEN));
    let sge = e.link.tx.sge(0, LEN as u32);
    let ctx = 0x5E4D;
    let t0 = Instant::now();
    assert_eq!(e.link.qp.send(ctx, &[sge], 0), STATUS_SUCCESS);
    if later {
        r.c.wait_for("two RNR NAKs from rxe", || {
            model(r).rnr_naks_received >= before.rnr_naks_received + 2
        });
        r.guest()
            .run_ok(&format!("touch {go}"), COMMAND_TIMEOUT)
            .unwrap();
    }
    let res = e.link.initiator_result(&r.c, ctx, "the SEND into RNR");
    let took = t0.elapsed();
    let m = model(r);
    let naks = m.rnr_naks_received - before.rnr_naks_received;
    let retries = m.rnr_retries - before.rnr_retries;
    eprintln!(
        "  NdkSend ended {} after {:.2} s: {naks} RNR NAKs, {retries} RNR retries \
         (rnr_retry {rnr_retry}, rxe min_rnr_timer {} = {} ms)",
        status_name(res.Status),
        took.as_secs_f64(),
        linux.min_rnr_timer,
        agent::rnr_timer_us(linux.min_rnr_timer) as f64 / 1000.0,
    );
    let rxe = r.rxe_delta();
    assert_eq!(
        rxe.get("send_rnr_err").copied(),
        Some(naks),
        "rxe's RNR NAKs sent = the model's received: {rxe:?}"
    );
    assert_eq!(
        rxe.get("out_of_seq_request").copied(),
        Some(naks),
        "one out-of-sequence 2nd packet per RNR round: {rxe:?}"
    );
    if later {
        assert_eq!(res.Status, STATUS_SUCCESS, "{}", status_name(res.Status));
        assert!(naks >= 2 && retries >= 2 && retries <= u64::from(rnr_retry));
        let st = e.link.disconnect_and_flush(&r.c);
        assert_eq!(st, LinkSpec::small().receives);
        let out = e.finish(r);
        assert!(
            out.stdout.contains("SEND of 3000 bytes verified after RNR"),
            "{out}"
        );
    } else {
        assert_eq!(res.Status, STATUS_IO_TIMEOUT, "{}", status_name(res.Status));
        assert_eq!(
            (naks, retries),
            (u64::from(rnr_retry) + 1, u64::from(rnr_retry)),
            "one NAK per transmission, rnr_retry retries"
        );
        // The budget: rnr_retry waits of the NAK's timer, plus the round trips.
        let budget = agent::rnr_timer_us(linux.min_rnr_timer) * u64::from(rnr_retry);
        let budget = std::time::Duration::from_micros(budget);
        eprintln!(
            "  RNR budget {:.2} s, measured {:.2} s",
            budget.as_secs_f64(),
            took.as_secs_f64()
        );
        assert!(
            took >= budget && took < budget + std::time::Duration::from_secs(3),
            "STATUS_IO_TIMEOUT after {took:?}, budget {budget:?}"
        );
        let posted = e.link.receives_posted();
        assert_eq!(e.link.flush_receives(&r.c), posted);
        new_request_after_error(r, &mut e.link);
        assert_eq!(e.link.conn().disconnects.count(), 0, "no DisconnectEvent");
        let st = e.link.conn().disconnect();
        eprintln!("  NdkDisconnect after the RNR failure: {}", status_name(st));
        assert_eq!(st, STATUS_SUCCESS);
        let out = e.finish(r);
        assert!(out.stdout.contains("no receive was ever posted"), "{out}");
    }
}

/// RNR toward the NDK side: no receive posted when rc_agent SENDs (-m rnr-send). `later`:
/// rc_agent moves its own QP to RTS with RNR retry 7 (retry forever, its right as the
/// sender) and the NDK side posts its receive once the model NAKed twice: the receive gets
/// every byte. Else rc_agent keeps what our CM asked in the REQ/REP (RNR retry 6): its SEND
/// fails with IBV_WC_RNR_RETRY_EXC_ERR after exactly 7 transmissions. Either way rc_agent
/// then disconnects: one DisconnectEvent, NdkDisconnect succeeds. The SEND is 3 packets: the
/// model, like rxe's responder, RNR-NAKs the 1st and sends one sequence NAK for the 2nd per
/// round; rxe's completer (rxe_comp.c `check_ack`, AETH_NAK_PSN_SEQ_ERROR → ERROR_RETRY)
/// counts the first of those as a transport retry (`completer_retry_err`) and ignores the
/// later ones while `started_retry` holds (reset only by an ACK): at most 1, as between two
/// rxe peers.
fn rnr_toward_ndk_case(r: &Rig<'_>, role: Role, later: bool) {
    const LEN: usize = 3000;
    let spec = LinkSpec {
        receives: 0,
        ..LinkSpec::small()
    };
    let args = if later {
        format!("-m rnr-send -n {LEN} -e 9 -r 7")
    } else {
        format!(
            "-m rnr-send -n {LEN} -e 9 -x {}",
            agent::wc::RNR_RETRY_EXC_ERR
        )
    };
    let before = model(r);
    let mut e = open(r, role, spec, &args);
    if later {
        r.c.wait_for("two RNR NAKs from the model", || {
            model(r).rnr_naks_sent >= before.rnr_naks_sent + 2
        });
        e.link.post_receive();
        let (slot, res) = e.link.next_receive(&r.c, "the SEND after RNR");
        assert_eq!(
            (res.Status, res.BytesTransferred),
            (STATUS_SUCCESS, LEN as u32),
            "{}",
            status_name(res.Status)
        );
        agent::assert_bytes(&e.link.received(slot, LEN), 9, "the SEND after RNR");
    }
    r.c.wait_for("rc_agent's disconnect (DisconnectEvent)", || {
        e.link.conn().disconnects.count() >= 1
    });
    let naks = model(r).rnr_naks_sent - before.rnr_naks_sent;
    let st = e.link.conn().disconnect();
    eprintln!(
        "  {naks} RNR NAKs sent; DisconnectEvent; NdkDisconnect {}",
        status_name(st)
    );
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(e.link.conn().disconnects.count(), 1, "one DisconnectEvent");
    let out = e.finish(r);
    let rxe = r.rxe_delta();
    assert_eq!(rxe.get("rcvd_rnr_err").copied(), Some(naks), "{rxe:?}");
    let seq_naks = model(r).seq_naks_sent - before.seq_naks_sent;
    assert_eq!(seq_naks, naks, "one sequence NAK per RNR round");
    assert!(
        rxe.get("completer_retry_err").copied().unwrap_or(0) <= 1
            && rxe.get("rcvd_seq_err").copied().unwrap_or(0) == 0,
        "{rxe:?}"
    );
    let q = agent::agent_qp(&out);
    if later {
        assert_eq!(q.rnr_retry, 7, "rc_agent's own RNR retry count");
        assert!(naks >= 2);
        assert!(out.stdout.contains("ended success (0)"), "{out}");
    } else {
        assert_eq!(q.rnr_retry, 6, "the RNR retry count our CM asked for");
        assert_eq!(
            naks, 7,
            "1 + 6 retries: rxe honoured our REQ/REP's RNR retry count"
        );
        assert_eq!(
            rxe.get("retry_rnr_exceeded_err").copied(),
            Some(1),
            "{rxe:?}"
        );
        assert!(
            out.stdout.contains("ended RNR retry counter exceeded (13)"),
            "{out}"
        );
    }
}

/// Disconnect from either side with receives outstanding. `linux_first`: rc_agent calls
/// rdma_disconnect; the NDK side gets exactly one DisconnectEvent and its receives stay
/// posted (ndkpi.md §5.12: a peer's disconnect does not flush) until its own NdkDisconnect,
/// which succeeds and flushes them (STATUS_CANCELLED). Else NdkDisconnect first: it succeeds,
/// the receives are flushed, no DisconnectEvent, and rc_agent sees DISCONNECTED and its own
/// receives flushed. After either, a request fails inline with STATUS_CONNECTION_INVALID.
fn disconnect_case(r: &Rig<'_>, role: Role, linux_first: bool) {
    let mut e = open(r, role, LinkSpec::small(), "-z 65536");
    let hello = e.link.hello(&r.c);
    e.link.exchange(&r.c, &hello, 0x70, 3000);
    let posted = e.link.receives_posted();
    if linux_first {
        e.link.command(&r.c, Msg::new(op::DISCONNECT));
        r.c.wait_for("the DisconnectEvent", || {
            e.link.conn().disconnects.count() >= 1
        });
        assert!(
            e.link.rcq.results_ex(4).is_empty(),
            "a peer's disconnect flushes nothing"
        );
        let st = e.link.conn().disconnect();
        eprintln!("  DisconnectEvent, then NdkDisconnect {}", status_name(st));
        assert_eq!(st, STATUS_SUCCESS);
        // One receive took the reply.
        assert_eq!(e.link.flush_receives(&r.c), posted);
        assert_eq!(
            e.link.conn().disconnects.count(),
            1,
            "exactly one DisconnectEvent"
        );
    } else {
        e.link.command(&r.c, Msg::new(op::BYE));
        assert_eq!(e.link.disconnect_and_flush(&r.c), posted);
        assert_eq!(e.link.conn().disconnects.count(), 0, "no DisconnectEvent");
    }
    let sge = e.link.tx.sge(0, 16);
    let st = e.link.qp.send(0xD15C, &[sge], 0);
    eprintln!("  NdkSend after the disconnect: {}", status_name(st));
    assert_eq!(st, STATUS_CONNECTION_INVALID, "{}", status_name(st));
    let out = e.finish(r);
    let want = if linux_first {
        "(disconnected), 4 receives flushed"
    } else {
        "(disconnected by the peer), 4 receives flushed"
    };
    assert!(out.stdout.contains(want), "{out}");
}

/// Retransmission between the host and Linux: the fabric drops, duplicates and reorders
/// (holding back 2 ms) 1% each of the frames between host 0's port and the wire's, both ways,
/// while rounds of every transfer at 1, 4096 and 16,385 bytes run, every byte checked, until
/// each fault hit at least 3 frames each way and both requesters retransmitted (the model's
/// `retransmits`, rxe's `completer_retry_err`); then the faults are cleared and the NDK side
/// disconnects. No message fails: rxe's retry_exceeded_err stays 0 (the suite checks).
fn faults_case(r: &Rig<'_>, role: Role) {
    let spec = LinkSpec {
        recv_size: 32 << 10,
        ..LinkSpec::small()
    };
    let mut e = open(r, role, spec, "-z 65536");
    let hello = e.link.hello(&r.c);
    let f = r.c.world.fabric();
    let host = r.c.world.node(0).port();
    let wire = r.wire.port().expect("the wire's fabric port");
    let faults = FaultConfig::none()
        .with_drop(0.01)
        .with_duplicate(0.01)
        .with_reorder(0.01, 2_000_000);
    f.set_pair_faults(host, wire, faults);
    f.set_pair_faults(wire, host, faults);
    let before = model(r);
    let t0 = Instant::now();
    let mut rounds = 0u32;
    let hit = |p: PairCounters| p.dropped.fault >= 3 && p.duplicated >= 3 && p.reordered >= 3;
    loop {
        for (i, len) in [1usize, 4096, 16_385].into_iter().enumerate() {
            // CAST: small.
            e.link
                .exchange(&r.c, &hello, 0x100 * rounds + 8 * i as u32, len);
        }
        rounds += 1;
        let rxe = r.rxe_delta();
        let done = hit(f.pair_counters(host, wire))
            && hit(f.pair_counters(wire, host))
            && model(r).retransmits > before.retransmits
            && rxe.get("completer_retry_err").is_some_and(|&n| n > 0);
        if done {
            break;
        }
        assert!(rounds < 40, "faults did not all show after {rounds} rounds");
    }
    f.clear_faults();
    let (to, from) = (f.pair_counters(host, wire), f.pair_counters(wire, host));
    let m = model(r);
    let rxe = r.rxe_delta();
    eprintln!(
        "  {rounds} rounds ({} transfers) in {:.1} s; host->guest dropped {} duplicated {} \
         reordered {}; guest->host dropped {} duplicated {} reordered {}",
        rounds * 18,
        agent::secs(t0),
        to.dropped.fault,
        to.duplicated,
        to.reordered,
        from.dropped.fault,
        from.duplicated,
        from.reordered
    );
    eprintln!(
        "  model: retransmits {} timeouts {} seq NAKs sent {} NAKs received {} duplicates {}; \
         rxe: {rxe:?}",
        m.retransmits - before.retransmits,
        m.timeouts - before.timeouts,
        m.seq_naks_sent - before.seq_naks_sent,
        m.naks_received - before.naks_received,
        m.duplicates - before.duplicates,
    );
    e.link.command(&r.c, Msg::new(op::BYE));
    assert_eq!(e.link.disconnect_and_flush(&r.c), spec.receives);
    e.finish(r);
}

/// Delivered frames, kept in memory as a pcap stream (the fabric's capture).
#[derive(Clone, Default)]
struct Tape(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Tape {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The RoCEv2 frames of a pcap stream (Ethernet, IPv4 or IPv6, UDP 4791): (source MAC,
/// destination MAC, BTH opcode), in delivery order.
fn roce_frames(pcap: &[u8]) -> Vec<([u8; 6], [u8; 6], u8)> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let incl = u32::from_ne_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &pcap[at + 16..(at + 16 + incl).min(pcap.len())];
        at += 16 + incl;
        if f.len() < 14 {
            continue;
        }
        let udp = match u16::from_be_bytes([f[12], f[13]]) {
            0x0800 if f.len() > 14 + 20 && f[14 + 9] == 17 => 14 + usize::from(f[14] & 0xF) * 4,
            0x86DD if f.len() > 14 + 40 && f[14 + 6] == 17 => 14 + 40,
            _ => continue,
        };
        if f.len() < udp + 8 + 12 || u16::from_be_bytes([f[udp + 2], f[udp + 3]]) != 4791 {
            continue;
        }
        let mac = |o: usize| -> [u8; 6] { f[o..o + 6].try_into().unwrap() };
        out.push((mac(6), mac(0), f[udp + 8]));
    }
    out
}

/// The most RDMA READs the requester at `mac` had outstanding at once on the wire (each READ
/// request from it +1, each READ response LAST or ONLY to it −1), and how many it sent.
fn reads_in_flight(frames: &[([u8; 6], [u8; 6], u8)], mac: [u8; 6]) -> (u32, u32) {
    use pvrdma_sim::wire::opcode as op;
    let (mut now, mut most, mut sent) = (0i64, 0i64, 0u32);
    for &(src, dst, opcode) in frames {
        if src == mac && opcode == op::RC_RDMA_READ_REQUEST {
            now += 1;
            sent += 1;
            most = most.max(now);
        } else if dst == mac
            && (opcode == op::RC_RDMA_READ_RESPONSE_LAST
                || opcode == op::RC_RDMA_READ_RESPONSE_ONLY)
        {
            now -= 1;
        }
    }
    // CAST: a count of a handful.
    (most as u32, sent)
}

/// READ with the negotiated IRD/ORD outstanding. The NDK side asks IRD 3 and ORD 8, rc_agent
/// offers IRD 5 and ORD 6 (and, when passive, no more than the REQ allows, as a Linux
/// application must: rdma_cm passes its values through). Either way round the negotiation
/// gives the NDK side ORD 5 (Linux's IRD) and IRD 3, Linux ORD 3 and IRD 5: the model's QP
/// and rxe's (ibv_query_qp) say so. Then each side posts 8 READs of 16 KiB at once (distinct
/// patterns, every byte checked) and the wire, captured on the fabric, shows each
/// requester's READs outstanding reaching its ORD and never passing it, except that rxe
/// rounds both limits up to a power of two when the QP is modified (rxe_qp.c
/// `rxe_qp_from_attr`: `roundup_pow_of_two(attr->max_rd_atomic)`, likewise
/// max_dest_rd_atomic; ibv_query_qp then reports the rounded values): its ORD 3 becomes 4,
/// one READ more than the IRD 3 our REQ/REP announced. The model's responder serves the 4th
/// (docs/reference/cm.md §9.1).
fn read_limits_case(r: &Rig<'_>, role: Role) {
    const N: usize = 8;
    // Long enough that the first response takes longer than posting the rest (TCG guest).
    const LEN: usize = 16 << 10;
    // The data buffer's first half is what the agent reads, its second what ours fill.
    const SINK: usize = N * LEN;
    let spec = LinkSpec {
        ird: 3,
        ord: 8,
        data_size: 2 * N * LEN,
        ..LinkSpec::small()
    };
    let mut e = open(r, role, spec, &format!("-z {} -I 5 -O 6", N * LEN));
    let hello = e.link.hello(&r.c);
    let h = e.link.qp.handle();
    let a =
        r.c.host(0)
            .model
            .with_core(|c| c.qp_info(h))
            .expect("the QP in the model")
            .attr;
    let cd = e.link.conn().connection_data(Some(0));
    eprintln!(
        "  NDK QP: max_rd_atomic {} max_dest_rd_atomic {}; NdkGetConnectionData IRD {} ORD {}",
        a.max_rd_atomic, a.max_dest_rd_atomic, cd.ird, cd.ord
    );
    assert_eq!(
        (a.max_rd_atomic, a.max_dest_rd_atomic),
        (5, 3),
        "the NDK QP's ORD and IRD"
    );
    // The agent's buffer: 8 patterns for the NDK side's READs.
    for i in 0..N {
        let mut m = Msg::new(op::FILL);
        // CAST: small.
        (m.seed, m.len, m.offset) = (0x90 + i as u32, LEN as u32, (i * LEN) as u32);
        e.link.command(&r.c, m);
    }
    // Ours: 8 patterns for the agent's.
    for i in 0..N {
        // CAST: small.
        let p = agent::pattern(0xA0 + i as u32, LEN);
        e.link.data.mem.buf.write(i * LEN, &p);
    }
    let tape = Tape::default();
    let f = r.c.world.fabric();
    let pcap = pvrdma_sim::pcap::PcapWriter::new(
        Box::new(tape.clone()) as Box<dyn std::io::Write + Send>,
        pvrdma_sim::pcap::TsResolution::Nano,
    )
    .unwrap();
    let earlier = f.set_capture(Some(pcap));
    // The NDK side's 8 READs, on the ring before one doorbell (DEFER on all but the last):
    // rung one by one, a READ answered while this thread waited for a core (load) would end
    // before the fifth was posted, and the wire would show fewer than the ORD outstanding.
    let rd_base = 0x7E00;
    for i in 0..N {
        // CAST: small.
        let sge = e.link.data.sge((SINK + i * LEN) as u64, LEN as u32);
        let remote = hello.addr + (i * LEN) as u64;
        let flags = if i + 1 < N { NDK_OP_FLAG_DEFER } else { 0 };
        assert_eq!(
            e.link
                .qp
                .read(rd_base + i, &[sge], remote, hello.rkey, flags),
            STATUS_SUCCESS,
            "NdkRead {i}"
        );
    }
    for i in 0..N {
        let res = e.link.initiator_result(&r.c, rd_base + i, "a READ of 8");
        assert_eq!(
            (res.Status, res.Type),
            (STATUS_SUCCESS, NdkOperationTypeRead),
            "READ {i}: {}",
            status_name(res.Status)
        );
    }
    for i in 0..N {
        let got = common::ndk::read(&e.link.data.mem, SINK + i * LEN, LEN);
        // CAST: small.
        agent::assert_bytes(&got, 0x90 + i as u32, &format!("NdkRead {i} of {N}"));
    }
    // The agent's 8 READs of our data buffer.
    let mut m = Msg::new(op::READ_MANY);
    // CAST: small.
    (m.addr, m.rkey, m.seed, m.len, m.value) = (
        e.link.data.mem.va,
        e.link.data.mr.remote_token(),
        0xA0,
        LEN as u32,
        N as u32,
    );
    let rep = e.link.command(&r.c, m);
    // CAST: small.
    assert_eq!(rep.value, N as u32);
    let tape = {
        // The writer flushes when dropped.
        drop(f.set_capture(earlier));
        tape.0.lock().unwrap().clone()
    };
    let frames = roce_frames(&tape);
    let guest_mac = r.guest().config().mac;
    let ndk = reads_in_flight(&frames, r.c.host(0).mac);
    let linux = reads_in_flight(&frames, guest_mac);
    eprintln!(
        "  on the wire ({} RoCE frames): NDK side {} READs, at most {} outstanding; Linux {} \
         READs, at most {} outstanding",
        frames.len(),
        ndk.1,
        ndk.0,
        linux.1,
        linux.0
    );
    // CAST: small.
    assert_eq!(
        ndk,
        (5, N as u32),
        "the NDK side's READs in flight: its ORD"
    );
    // rxe may have 4 outstanding (its ORD 3 rounded up; its QP reports 4) and never more. How
    // many it reaches is the guest's speed against our responder's: rc_agent posts the 8 as
    // one list, but under TCG rxe's requester sends them slower than the model answers, and
    // a completion frees its credit before the next READ leaves (seen 4 and 3 idle, 2 with
    // the host loaded). Our side's ORD, above, does not depend on it: its 8 are on the ring
    // before one doorbell.
    // CAST: small.
    assert!(
        (1..=4).contains(&linux.0) && linux.1 == N as u32,
        "Linux's READs in flight: {linux:?}, its ORD 3 rounded up to 4 by rxe at most"
    );
    e.link.command(&r.c, Msg::new(op::BYE));
    assert_eq!(e.link.disconnect_and_flush(&r.c), spec.receives);
    let out = e.finish(r);
    let q = agent::agent_qp(&out);
    assert_eq!(
        (q.ord, q.ird),
        (4, 8),
        "rxe's QP: ORD 3 and IRD 5, each rounded up to a power of two"
    );
    assert!(
        out.stdout.contains("REQ allows ird ") || role == Role::NdkServer,
        "{out}"
    );
}

/// The CM timing of the vanishing-peer case: CM Response Timeout 16 (256 ms) and 2 retries,
/// so that the DREQ to the vanished peer runs out in 3 × (2 × packet lifetime + 256 ms) =
/// 6.9 s instead of rdma_cm's 16 × 6.1 s (the engine's defaults, as Linux's: a DREQ to a
/// silent peer then ends after 98 s, on both stacks).
const VANISH_CM_TIMING: (u8, u8) = (16, 2);

/// An IB time exponent as the CM converts it: 2^(exp − 8) ms (Linux `cm_convert_to_ms`,
/// src/cm/timing.rs `timeout_ns`), for 4.096 µs · 2^exp.
fn cm_time(exp: u8) -> Duration {
    Duration::from_millis(1u64 << exp.saturating_sub(8))
}

/// A peer that vanishes (its QEMU killed: no DREQ, nothing more on the wire). The SEND
/// posted then fails with STATUS_IO_TIMEOUT once the transport retry budget is spent:
/// (retry_cnt + 1) transmissions, each waited for 4.096 µs · 2^timeout (the model's QP
/// attributes, which our CM set from the REQ/REP); the WRITE and READ queued behind it and
/// every receive are flushed (STATUS_CANCELLED) and a new request is CANCELLED. No
/// DisconnectEvent: nothing told the CM (as Linux: a QP's retry-exceeded error is a work
/// completion, not an rdma_cm event). NdkDisconnect then sends DREQs that nobody answers and
/// completes STATUS_IO_TIMEOUT (ndkpi.md §5.12) after (Max CM Retries + 1) × (2 × packet
/// lifetime + CM Response Timeout), still with no DisconnectEvent.
fn vanish_case(r: &Rig<'_>, role: Role) {
    let mut e = open(r, role, LinkSpec::small(), "-z 65536");
    let hello = e.link.hello(&r.c);
    e.link.exchange(&r.c, &hello, 0x80, 3000);
    let (timeout, retry_cnt, ..) = qp_attr(r, &e.link);
    let budget = agent::retry_budget(timeout, retry_cnt);
    let Ends {
        mut link,
        agent,
        listener,
    } = e;
    // QEMU first: killing rc_agent would let the guest's kernel send a DREQ.
    r.guest().kill();
    drop(agent);
    let t0 = Instant::now();
    link.tx.mem.buf.write(0, &agent::pattern(0x81, 3000));
    let send = link.tx.sge(0, 3000);
    let write = link.data.sge(0, 2048);
    let read = link.data.sge(4096, 4096);
    assert_eq!(link.qp.send(0x5E, &[send], 0), STATUS_SUCCESS);
    assert_eq!(
        link.qp.write(0x3E, &[write], hello.addr, hello.rkey, 0),
        STATUS_SUCCESS
    );
    assert_eq!(
        link.qp.read(0x4E, &[read], hello.addr, hello.rkey, 0),
        STATUS_SUCCESS
    );
    let res = link.initiator_result(&r.c, 0x5E, "the SEND to a vanished peer");
    let took = t0.elapsed();
    eprintln!(
        "  NdkSend to the vanished peer: {} after {:.2} s; budget (timeout {timeout}, \
         retry_cnt {retry_cnt}) {:.2} s",
        status_name(res.Status),
        took.as_secs_f64(),
        budget.as_secs_f64()
    );
    assert_eq!(res.Status, STATUS_IO_TIMEOUT, "{}", status_name(res.Status));
    assert!(
        took >= budget.mul_f64(0.95) && took < budget + Duration::from_secs(3),
        "STATUS_IO_TIMEOUT after {took:?}, budget {budget:?}"
    );
    for (ctx, what) in [(0x3E, "the WRITE behind it"), (0x4E, "the READ behind it")] {
        let res = link.initiator_result(&r.c, ctx, what);
        eprintln!("  {what}: {}", status_name(res.Status));
        assert_eq!(res.Status, STATUS_CANCELLED, "{what}");
    }
    let posted = link.receives_posted();
    assert_eq!(link.flush_receives(&r.c), posted);
    new_request_after_error(r, &mut link);
    assert_eq!(
        link.conn().disconnects.count(),
        0,
        "no DisconnectEvent for a transport failure"
    );
    let (cm_timeout, cm_retries) = VANISH_CM_TIMING;
    let per_try = cm_time(18) * 2 + cm_time(cm_timeout);
    let dreq_budget = per_try * (u32::from(cm_retries) + 1);
    let t1 = Instant::now();
    let st = link.conn().disconnect();
    let took = t1.elapsed();
    eprintln!(
        "  NdkDisconnect to the vanished peer: {} after {:.2} s; DREQ budget {:.2} s",
        status_name(st),
        took.as_secs_f64(),
        dreq_budget.as_secs_f64()
    );
    assert_eq!(st, STATUS_IO_TIMEOUT, "{}", status_name(st));
    assert!(
        took >= dreq_budget.mul_f64(0.95) && took < dreq_budget + Duration::from_secs(3),
        "NdkDisconnect's STATUS_IO_TIMEOUT after {took:?}, budget {dreq_budget:?}"
    );
    assert_eq!(link.conn().disconnects.count(), 0, "no DisconnectEvent");
    link.close(&r.c);
    if let Some(l) = listener {
        assert_eq!(l.close(), STATUS_SUCCESS);
    }
}

/// Everything at path MTU 1024 (the guest's MTU 1500) against one guest.
#[test]
#[ignore = "needs the Linux guest image (tools/peer/build-guest.sh); .ci/run runs it"]
fn edges_against_linux() {
    use Role::{NdkClient, NdkServer};
    let mut s = Suite::new("rc_agent edges");
    let name =
        |what: &str, role: Role, ipv6: bool| format!("{what}, {}, {}", role.name(), family(ipv6));
    for (role, ipv6) in [(NdkClient, false), (NdkServer, true)] {
        s.case(
            &name("sizes 1 B-1 MiB at MTU 1024", role, ipv6),
            ipv6,
            |r| sizes_case(r, role, 1024),
        );
    }
    for (role, ipv6, read) in [(NdkClient, false, false), (NdkServer, true, true)] {
        let later = if read {
            "later READ fails"
        } else {
            "later WRITE fails"
        };
        s.case(
            &name(
                &format!("SendAndInvalidate toward Linux, {later}"),
                role,
                ipv6,
            ),
            ipv6,
            |r| send_and_invalidate_case(r, role, read),
        );
    }
    for (role, ipv6, remote, later) in [
        (NdkServer, false, false, op::READ),
        (NdkClient, true, true, op::WRITE),
    ] {
        let how = if remote {
            "invalidated by Linux's SEND with invalidate, its WRITE fails"
        } else {
            "NdkInvalidate, Linux's READ fails"
        };
        s.case(
            &name(
                &format!("fast-registered MR read and written by Linux, {how}"),
                role,
                ipv6,
            ),
            ipv6,
            |r| fast_register_case(r, role, remote, later),
        );
    }
    for (role, ipv6) in [(NdkClient, true), (NdkServer, false)] {
        s.case(
            &name(
                "READs: 8 posted at once each way, the negotiated ORD outstanding",
                role,
                ipv6,
            ),
            ipv6,
            |r| read_limits_case(r, role),
        );
    }
    for (role, ipv6, later) in [(NdkClient, false, true), (NdkServer, true, false)] {
        let how = if later {
            "receive posted later"
        } else {
            "no receive ever"
        };
        s.case_with(
            &name(&format!("RNR toward Linux, {how}"), role, ipv6),
            ipv6,
            Counters::Moving(&["out_of_seq_request"]),
            |r| rnr_toward_linux_case(r, role, later),
        );
    }
    for (role, ipv6, later) in [(NdkServer, false, true), (NdkClient, true, false)] {
        let how = if later {
            "receive posted later"
        } else {
            "no receive ever"
        };
        s.case_with(
            &name(&format!("RNR toward the NDK side, {how}"), role, ipv6),
            ipv6,
            Counters::Moving(&["retry_rnr_exceeded_err", "completer_retry_err"]),
            |r| rnr_toward_ndk_case(r, role, later),
        );
    }
    for (role, ipv6, linux_first) in [
        (NdkClient, false, true),
        (NdkServer, true, true),
        (NdkClient, true, false),
        (NdkServer, false, false),
    ] {
        let who = if linux_first {
            "Linux disconnects"
        } else {
            "NDK disconnects"
        };
        s.case(&name(who, role, ipv6), ipv6, |r| {
            disconnect_case(r, role, linux_first)
        });
    }
    for (role, ipv6) in [(NdkClient, false), (NdkServer, true)] {
        s.case_with(
            &name(
                "retransmission: 1% drop, duplicate, reorder both ways",
                role,
                ipv6,
            ),
            ipv6,
            Counters::Moving(&[
                "duplicate_request",
                "out_of_seq_request",
                "rcvd_seq_err",
                "completer_retry_err",
            ]),
            |r| faults_case(r, role),
        );
    }
    s.finish();
}

/// Sizes across path MTU 4096 on a guest with 9000-byte frames (rxe's path MTU follows the
/// netdev's: 4096) and the hosts' engines at path MTU code 5; then that guest vanishes.
#[test]
#[ignore = "needs the Linux guest image (tools/peer/build-guest.sh); .ci/run runs it"]
fn mtu_4096_and_a_vanishing_peer() {
    use Role::{NdkClient, NdkServer};
    let mut s = Suite::with("rc_agent at MTU 4096", |g| g.mtu = 9000, |c| c.path_mtu = 5);
    for (role, ipv6) in [(NdkClient, false), (NdkServer, true)] {
        s.case(
            &format!(
                "sizes 1 B-1 MiB at MTU 4096, {}, {}",
                role.name(),
                family(ipv6)
            ),
            ipv6,
            |r| sizes_case(r, role, 4096),
        );
    }
    s.case_in(
        &format!("the peer vanishes, {}, IPv4", NdkClient.name()),
        false,
        Counters::PeerKilled,
        |c| c.cm_timing = VANISH_CM_TIMING,
        |r| vanish_case(r, NdkClient),
    );
    s.finish();
}
