//! Every documented status path of the three seed functions, each its own test, driven
//! through the dispatch tables against the device model:
//! - NdkCreateCq (ndkpi.md §5.1, §5.4): depth limit, INSUFFICIENT_RESOURCES inline and
//!   through CreateCompletion, the PENDING path, notification affinity, arm discipline.
//! - NdkFastRegister (§5.7): page count, length, base VA rules, unconnected QP, remote access
//!   on a local-only FRMR, token lifetime across invalidate and re-register.
//! - NdkRead (§5.8, Project decision (c)): scatter SGL, READ_FENCE against a LOCAL_INV
//!   (pvrdma.md M36), SILENT_SUCCESS, unconnected QP, over-read.

mod common;
mod ndk_dp;

use common::Mode;
use common::ndk::{
    Cluster, ClusterConfig, Mr, QpSpec, Registered, fill, pattern, read, sge, verify,
};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::inject_failure_at;
use pvrdma_sim::world::NodeConfig;

// ------------------------------------------------------------------------------- NdkCreateCq

#[test]
fn create_cq_depth_above_max_cq_depth_is_invalid_parameter_inline() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let info = c.adapter(0).query_info().expect("info");
    let (st, out, ctx, _n) = create_cq_sentinel(&c, 0, info.MaxCqDepth + 1);
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    c.settle();
    assert_eq!(ctx.calls(), 0, "no CreateCompletion for an inline failure");
    assert_eq!(out, SENTINEL, "nothing stored on failure");
    // The limit itself is accepted.
    let cq = c
        .adapter(0)
        .create_cq(info.MaxCqDepth, None)
        .expect("CqDepth = MaxCqDepth");
    cq.close();
    c.finish();
}

#[test]
fn create_cq_insufficient_resources_inline_when_first_allocation_fails() {
    let c = Cluster::new(Mode::Deterministic, 2);
    // The cluster holds the harness lock: no other test allocates meanwhile.
    inject_failure_at(1);
    let (st, out, ctx, _n) = create_cq_sentinel(&c, 0, 64);
    inject_failure_at(0);
    assert_eq!(st, STATUS_INSUFFICIENT_RESOURCES);
    c.settle();
    assert_eq!(ctx.calls(), 0);
    assert_eq!(out, SENTINEL);
    // The adapter still works afterwards.
    let cq = c
        .adapter(0)
        .create_cq(64, None)
        .expect("CQ after the failure");
    cq.close();
    c.finish();
}

/// Fails every allocation of NdkCreateCq in turn: each failure is INSUFFICIENT_RESOURCES,
/// inline (no callback) before the command is issued and through exactly one
/// CreateCompletion (NULL object) after it; nothing leaks (`finish`).
#[test]
fn create_cq_every_allocation_failure_is_insufficient_resources_inline_or_async() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let (mut inline, mut pended) = (0, 0);
    let mut done = false;
    for n in 1..64 {
        inject_failure_at(n);
        let (st, out, ctx, _notes) = create_cq_sentinel(&c, 0, 64);
        let (fin, obj) = if st == STATUS_PENDING {
            c.wait_for("CreateCompletion", || ctx.calls() != 0);
            c.settle();
            assert_eq!(ctx.calls(), 1);
            assert_eq!(out, SENTINEL, "out pointer untouched after PENDING");
            ctx.result().unwrap()
        } else {
            c.settle();
            assert_eq!(ctx.calls(), 0);
            (st, out as *mut NDK_OBJECT_HEADER)
        };
        inject_failure_at(0);
        match fin {
            STATUS_SUCCESS => {
                close_cq_raw(&c, obj.cast());
                done = true;
                break;
            }
            STATUS_INSUFFICIENT_RESOURCES if st == STATUS_PENDING => {
                assert!(obj.is_null(), "NULL object on an async failure");
                pended += 1;
            }
            STATUS_INSUFFICIENT_RESOURCES => inline += 1,
            other => panic!("allocation failure {n} gave {other:#x}"),
        }
    }
    assert!(done, "a create with no failing allocation succeeds");
    assert!(inline >= 1, "some allocation fails inline");
    assert!(
        pended >= 1,
        "some allocation fails after the command was issued"
    );
    c.finish();
}

fn two_cqs(_: usize, n: &mut NodeConfig) {
    n.device.caps.max_cq = 2;
}

/// The model allows `max_cq` − 1 CQs (handles ≥ 1 and below `max_cq`, M10) and refuses
/// CREATE_CQ at REQUEST with ERR = 12 (M8). A create queued behind another command meets
/// the refusal in the command DPC: CreateCompletion(STATUS_INSUFFICIENT_RESOURCES, NULL)
/// exactly once, the out pointer untouched. Issued on an idle channel, the refusal is known
/// before the function returns: the same status inline, no callback.
#[test]
fn create_cq_device_out_of_cqs_is_insufficient_resources_async_and_inline() {
    // No connection engine: its QP1 would take CQ handles this test counts.
    let c = Cluster::with(ClusterConfig {
        tweak: Some(two_cqs),
        ..ClusterConfig::without_cm(Mode::Deterministic, 2)
    });
    let (st1, out1, ctx1, _n1) = create_cq_sentinel(&c, 0, 64);
    let (st2, out2, ctx2, _n2) = create_cq_sentinel(&c, 0, 64);
    assert_eq!((st1, st2), (STATUS_PENDING, STATUS_PENDING));
    c.wait_for("CreateCompletions", || ctx1.calls() + ctx2.calls() == 2);
    c.settle();
    assert_eq!((ctx1.calls(), ctx2.calls()), (1, 1));
    assert_eq!((out1, out2), (SENTINEL, SENTINEL), "out pointers untouched");
    let (f1, obj1) = ctx1.result().unwrap();
    assert_eq!(f1, STATUS_SUCCESS);
    let (f2, obj2) = ctx2.result().unwrap();
    assert_eq!(f2, STATUS_INSUFFICIENT_RESOURCES, "the device's refusal");
    assert!(obj2.is_null());

    let (st3, out3, ctx3, _n3) = create_cq_sentinel(&c, 0, 64);
    assert_eq!(st3, STATUS_INSUFFICIENT_RESOURCES);
    c.settle();
    assert_eq!(ctx3.calls(), 0);
    assert_eq!(out3, SENTINEL);
    assert_eq!(c.world.counters(0).device.command_errors, 2);

    close_cq_raw(&c, obj1.cast());
    c.finish();
}

#[test]
fn create_cq_pending_gives_one_create_completion_and_leaves_out_pointer() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let (st, out, ctx, _n) = create_cq_sentinel(&c, 0, 64);
    assert_eq!(st, STATUS_PENDING);
    assert_eq!(out, SENTINEL);
    c.wait_for("CreateCompletion", || ctx.calls() != 0);
    c.settle();
    assert_eq!(ctx.calls(), 1);
    let (fin, obj) = ctx.result().unwrap();
    assert_eq!(fin, STATUS_SUCCESS);
    assert!(!obj.is_null());
    assert_ne!(obj as usize, SENTINEL);
    // SAFETY: the CreateCompletion's object is a live NDK_CQ header.
    let ty = unsafe { (*obj).ObjectType };
    assert_eq!(ty, NdkObjectTypeCq);
    close_cq_raw(&c, obj.cast());
    c.finish();
}

fn affinity(processor: u32) -> GROUP_AFFINITY {
    GROUP_AFFINITY {
        Mask: 1 << processor,
        Group: 0,
        Reserved: [0; 3],
    }
}

/// Host b's receive CQ prefers processor 1, its initiator CQ processor 0: each CQ's
/// notification callback runs on its own processor.
#[test]
fn create_cq_affinity_places_the_notification_callback() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let pd_a = c.adapter(0).create_pd().unwrap();
    let pd_b = c.adapter(1).create_pd().unwrap();
    let cq_a = c.adapter(0).create_cq(64, None).unwrap();
    let rcq_b = c.adapter(1).create_cq(64, Some(&mut affinity(1))).unwrap();
    let icq_b = c.adapter(1).create_cq(64, Some(&mut affinity(0))).unwrap();
    let qa = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A)).unwrap();
    let qb = pd_b.create_qp(&rcq_b, &icq_b, QpSpec::new(QPC_B)).unwrap();
    c.connect(&qa, &qb);
    let ma = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &pd_b, 1, 0x2000_0000, LOCAL);

    rcq_b.arm(NDK_CQ_NOTIFY_ANY);
    icq_b.arm(NDK_CQ_NOTIFY_ANY);
    assert_eq!(qb.receive(1, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(qa.send(2, &[ma.sge(0, 64)], 0), STATUS_SUCCESS);
    c.wait_for("receive notification", || !rcq_b.notifications().is_empty());
    assert_eq!(qa.receive(4, &[ma.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(qb.send(3, &[mb.sge(0, 32)], 0), STATUS_SUCCESS);
    c.wait_for("send notification", || !icq_b.notifications().is_empty());
    c.settle();
    assert_eq!(rcq_b.notifications(), vec![STATUS_SUCCESS]);
    assert_eq!(rcq_b.notification_processors(), vec![Some(1)]);
    assert_eq!(icq_b.notifications(), vec![STATUS_SUCCESS]);
    assert_eq!(icq_b.notification_processors(), vec![Some(0)]);
    assert_eq!(
        res(&rcq_b.wait_results(1)[0]),
        (STATUS_SUCCESS, 64, QPC_B, 1)
    );
    assert_eq!(res(&icq_b.wait_results(1)[0]).3, 3);
    assert_eq!(cq_a.wait_results(2).len(), 2);

    drop([ma.close(), mb.close()]);
    qa.close();
    qb.close();
    for q in [cq_a, rcq_b, icq_b] {
        q.close();
    }
    pd_a.close();
    pd_b.close();
    c.finish();
}

#[test]
fn cq_notifies_only_after_arm_and_once_per_arm() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    for i in 0..4 {
        assert_eq!(p.qb.receive(10 + i, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    }
    let send = |ctx| assert_eq!(p.qa.send(ctx, &[ma.sge(0, 16)], 0), STATUS_SUCCESS);
    send(1);
    send(2);
    c.settle();
    assert!(
        p.cq_b.notifications().is_empty(),
        "completions on an unarmed CQ"
    );
    // Entries arrived since the last callback: the arm is satisfied at once.
    p.cq_b.arm(NDK_CQ_NOTIFY_ANY);
    c.settle();
    assert_eq!(p.cq_b.notifications(), vec![STATUS_SUCCESS]);
    let r = p.cq_b.wait_results(2);
    assert_eq!((res(&r[0]).3, res(&r[1]).3), (10, 11));
    // Not re-armed: a further completion does not call back.
    send(3);
    assert_eq!(res(&p.cq_b.wait_results(1)[0]).3, 12);
    assert_eq!(p.cq_b.notifications().len(), 1);
    // Armed on an empty CQ: the next completion calls back once.
    p.cq_b.arm(NDK_CQ_NOTIFY_ANY);
    c.settle();
    assert_eq!(p.cq_b.notifications().len(), 1);
    send(4);
    c.settle();
    assert_eq!(p.cq_b.notifications(), vec![STATUS_SUCCESS; 2]);
    assert_eq!(res(&p.cq_b.wait_results(1)[0]).3, 13);
    assert_eq!(p.cq_a.wait_results(4).len(), 4);
    assert!(p.cq_a.notifications().is_empty(), "never armed");

    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

// ------------------------------------------------------------------------------- NdkFastRegister

/// `pages` pages of host b memory at `va` and an FRMR initialized for `cap` pages.
fn frmr(
    c: &Cluster,
    p: &Pair,
    pages: usize,
    va: u64,
    cap: u32,
    remote: bool,
) -> (common::memory::ConsumerMem, Mr, Vec<u64>) {
    let mem = c.host(1).mem(pages, va);
    let mr = p.pd_b.create_mr(true).expect("NdkCreateMr(FastRegister)");
    assert_eq!(mr.initialize_fast_register(cap, remote), STATUS_SUCCESS);
    let list = (0..pages).map(|i| mem.bus(i)).collect();
    (mem, mr, list)
}

fn expect_fr_done(p: &Pair, ctx: usize) {
    let r = p.cq_b.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_B, ctx, NdkOperationTypeFastRegister)
    );
}

fn no_results(c: &Cluster, p: &Pair) {
    c.settle();
    assert!(p.cq_a.results(4).is_empty());
    assert!(p.cq_b.results(4).is_empty());
}

#[test]
fn fast_register_more_pages_than_initialized_is_invalid_parameter() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem, mr, pages) = frmr(&c, &p, 5, 0x3000_0000, 4, true);
    let rw = NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    let st = p.qb.fast_register(1, &mr, &pages, 0, 4096, mem.va, rw);
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    no_results(&c, &p);
    let st =
        p.qb.fast_register(2, &mr, &pages[..4], 0, 4 * 4096, mem.va, rw);
    assert_eq!(st, STATUS_SUCCESS, "the initialized capacity itself");
    expect_fr_done(&p, 2);
    mr.close();
    drop(mem);
    p.close();
    c.finish();
}

#[test]
fn fast_register_length_beyond_pages_minus_fbo_is_invalid_parameter() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem, mr, pages) = frmr(&c, &p, 2, 0x3000_0000, 2, true);
    let fbo = 0x300u32;
    let va = mem.va + u64::from(fbo);
    let max = 2 * 4096 - fbo as usize;
    let rw = NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    assert_eq!(
        p.qb.fast_register(1, &mr, &pages, fbo, max + 1, va, rw),
        STATUS_INVALID_PARAMETER
    );
    no_results(&c, &p);
    assert_eq!(
        p.qb.fast_register(2, &mr, &pages, fbo, max, va, rw),
        STATUS_SUCCESS
    );
    expect_fr_done(&p, 2);
    mr.close();
    drop(mem);
    p.close();
    c.finish();
}

#[test]
fn fast_register_base_va_not_fbo_plus_pages_is_invalid_parameter() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem, mr, pages) = frmr(&c, &p, 1, 0x3000_0000, 1, true);
    let fbo = 0x40u32;
    let rw = NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    for bad in [mem.va, mem.va + 0x41, mem.va + 0x1000] {
        assert_eq!(
            p.qb.fast_register(1, &mr, &pages, fbo, 256, bad, rw),
            STATUS_INVALID_PARAMETER,
            "BaseVirtualAddress {bad:#x} with FBO {fbo:#x}"
        );
    }
    no_results(&c, &p);
    // FBO + n·PAGE_SIZE for n = 0x30000 and n = 0x90007 both qualify (invalidated between:
    // a fast register needs a free MR).
    for (ctx, va) in [(2, mem.va + 0x40), (3, 0x9000_7040)] {
        assert_eq!(
            p.qb.fast_register(ctx, &mr, &pages, fbo, 256, va, rw),
            STATUS_SUCCESS
        );
        expect_fr_done(&p, ctx);
        assert_eq!(p.qb.invalidate(ctx + 10, &mr, 0), STATUS_SUCCESS);
        assert_eq!(
            res(&p.cq_b.wait_results(1)[0]),
            (STATUS_SUCCESS, 0, QPC_B, ctx + 10)
        );
    }
    mr.close();
    drop(mem);
    p.close();
    c.finish();
}

/// §5.7: "0 is allowed only if FBO = 0. Zero-based VAs are not supported." The provider
/// reads the second sentence as overriding: BaseVirtualAddress 0 is refused even with
/// FBO 0 (documented on `Qp::fast_register`).
#[test]
fn fast_register_zero_base_va_is_invalid_parameter() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem, mr, pages) = frmr(&c, &p, 1, 0x3000_0000, 1, true);
    assert_eq!(
        p.qb.fast_register(1, &mr, &pages, 0, 4096, 0, NDK_OP_FLAG_ALLOW_LOCAL_WRITE),
        STATUS_INVALID_PARAMETER
    );
    no_results(&c, &p);
    mr.close();
    drop(mem);
    p.close();
    c.finish();
}

#[test]
fn fast_register_on_unconnected_qp_is_connection_invalid() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::with(&c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false);
    let (mem, mr, pages) = frmr(&c, &p, 1, 0x3000_0000, 1, true);
    let token = mr.remote_token();
    let st = p.qb.fast_register(
        1,
        &mr,
        &pages,
        0,
        4096,
        mem.va,
        NDK_OP_FLAG_ALLOW_REMOTE_READ,
    );
    assert_eq!(st, STATUS_CONNECTION_INVALID);
    no_results(&c, &p);
    assert_eq!(
        mr.remote_token(),
        token,
        "a refused fast register keeps the token"
    );
    mr.close();
    drop(mem);
    p.close();
    c.finish();
}

#[test]
fn fast_register_remote_flags_on_local_only_frmr_is_access_violation() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem, mr, pages) = frmr(&c, &p, 1, 0x3000_0000, 1, false);
    for flags in [
        NDK_OP_FLAG_ALLOW_REMOTE_READ,
        NDK_OP_FLAG_ALLOW_REMOTE_WRITE,
        NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_ALLOW_LOCAL_WRITE,
    ] {
        assert_eq!(
            p.qb.fast_register(1, &mr, &pages, 0, 4096, mem.va, flags),
            STATUS_ACCESS_VIOLATION,
            "flags {flags:#x}"
        );
    }
    no_results(&c, &p);
    assert_eq!(
        p.qb.fast_register(
            2,
            &mr,
            &pages,
            0,
            4096,
            mem.va,
            NDK_OP_FLAG_ALLOW_LOCAL_WRITE
        ),
        STATUS_SUCCESS,
        "local access only"
    );
    expect_fr_done(&p, 2);
    mr.close();
    drop(mem);
    p.close();
    c.finish();
}

/// The remote token is usable once NdkFastRegister returned (a peer WRITE and READ through
/// it move the right bytes), every fast register changes it, and after NdkInvalidate and a
/// new NdkFastRegister the old token is dead: the peer's WRITE through it completes with
/// STATUS_ACCESS_VIOLATION (Project decision (c)) and changes nothing.
#[test]
fn fast_register_token_works_changes_and_dies_after_invalidate() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem, mr, pages) = frmr(&c, &p, 2, 0x3000_0000, 2, true);
    let ma = Registered::new(c.host(0), &p.pd_a, 2, 0x1000_0000, LOCAL);
    let flags = NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    let before = mr.remote_token();
    let fbo = 0x80u32;
    let va1 = 0x5500_0080u64;
    assert_eq!(
        p.qb.fast_register(1, &mr, &pages, fbo, 8000, va1, flags),
        STATUS_SUCCESS
    );
    let t1 = mr.remote_token();
    assert_ne!(t1, before, "a fast register changes the token");
    assert_eq!(mr.local_token(), t1);
    expect_fr_done(&p, 1);

    // WRITE through t1 across the page boundary: FBO + 4000 is in the second page.
    let w = fill(&ma.mem, 0, 0x41, 300);
    assert_eq!(
        p.qa.write(2, &[ma.sge(0, 300)], va1 + 3900, t1, 0),
        STATUS_SUCCESS
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&mem, fbo as usize + 3900, &w);
    // READ back through t1.
    let src = fill(&mem, fbo as usize + 10, 0x42, 128);
    assert_eq!(
        p.qa.read(3, &[ma.sge(4096, 128)], va1 + 10, t1, 0),
        STATUS_SUCCESS
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&ma.mem, 4096, &src);

    assert_eq!(p.qb.invalidate(4, &mr, 0), STATUS_SUCCESS);
    let r = p.cq_b.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_B, 4, NdkOperationTypeInvalidate)
    );
    let va2 = 0x6600_0000u64;
    assert_eq!(
        p.qb.fast_register(5, &mr, &pages, 0, 8192, va2, flags),
        STATUS_SUCCESS
    );
    let t2 = mr.remote_token();
    assert_ne!(t2, t1, "every fast register changes the token");
    expect_fr_done(&p, 5);
    let w2 = fill(&ma.mem, 0, 0x43, 64);
    assert_eq!(
        p.qa.write(6, &[ma.sge(0, 64)], va2 + 64, t2, 0),
        STATUS_SUCCESS
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&mem, 64, &w2);

    // The old token (and old VA) is dead.
    let snapshot = read(&mem, 0, 8192);
    fill(&ma.mem, 0, 0x44, 64);
    assert_eq!(p.qa.write(7, &[ma.sge(0, 64)], va1, t1, 0), STATUS_SUCCESS);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_ACCESS_VIOLATION, 0, QPC_A, 7));
    verify(&mem, 0, &snapshot);

    mr.close();
    drop([mem, ma.close()]);
    p.close();
    c.finish();
}

// ------------------------------------------------------------------------------- NdkRead

/// Three SGEs of different sizes at scattered local offsets receive consecutive remote
/// bytes in SGE order; the gaps between them stay untouched.
#[test]
fn read_scatters_remote_bytes_over_the_sgl_in_order() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let spec = |ctx| QpSpec {
        initiator_sge: 3,
        ..QpSpec::new(ctx)
    };
    let p = Pair::with(&c, spec(QPC_A), spec(QPC_B), true);
    let ma = Registered::new(c.host(0), &p.pd_a, 2, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 2, 0x2000_0000, REMOTE);
    let guard = fill(&ma.mem, 0, 0xEE, 8192);
    let src = fill(&mb.mem, 1000, 0x51, 700);
    let sgl = [ma.sge(5000, 100), ma.sge(16, 500), ma.sge(4000, 100)];
    let st =
        p.qa.read(9, &sgl, mb.mem.va + 1000, mb.mr.remote_token(), 0);
    assert_eq!(st, STATUS_SUCCESS);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A, 9, NdkOperationTypeRead)
    );
    let mut want = guard;
    want[5000..5100].copy_from_slice(&src[..100]);
    want[16..516].copy_from_slice(&src[100..600]);
    want[4000..4100].copy_from_slice(&src[600..]);
    verify(&ma.mem, 0, &want);
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// pvrdma.md M36: with b's READ responses delayed, a LOCAL_INV of the FRMR a READ writes
/// into starts before the READ data arrives unless it carries READ_FENCE. Unfenced: the
/// late data hits an invalidated MR and the READ fails (STATUS_ACCESS_VIOLATION); fenced:
/// the invalidate waits, the READ lands its bytes and both succeed.
#[test]
fn read_fence_holds_a_later_invalidate_until_the_read_completes() {
    for fenced in [false, true] {
        let c = Cluster::new(Mode::Deterministic, 2);
        c.world.set_read_response_delay(1, 50_000);
        let p = Pair::new(&c);
        // The sink is an FRMR on host a this time.
        let sink = c.host(0).mem(1, 0x3000_0000);
        let mr = p.pd_a.create_mr(true).unwrap();
        assert_eq!(mr.initialize_fast_register(1, false), STATUS_SUCCESS);
        let pages = [sink.bus(0)];
        let st = p.qa.fast_register(
            1,
            &mr,
            &pages,
            0,
            4096,
            sink.va,
            NDK_OP_FLAG_ALLOW_LOCAL_WRITE,
        );
        assert_eq!(st, STATUS_SUCCESS);
        assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
        let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
        let src = fill(&mb.mem, 0, 0x61, 512);

        let local = sge(sink.va + 128, 512, mr.local_token());
        assert_eq!(
            p.qa.read(2, &[local], mb.mem.va, mb.mr.remote_token(), 0),
            STATUS_SUCCESS
        );
        let f = if fenced { NDK_OP_FLAG_READ_FENCE } else { 0 };
        assert_eq!(p.qa.invalidate(3, &mr, f), STATUS_SUCCESS);
        let r = p.cq_a.wait_results_ex(2);
        assert_eq!((res_ex(&r[0]).2, res_ex(&r[1]).2), (2, 3), "posting order");
        if fenced {
            assert_eq!(r[0].Status, STATUS_SUCCESS, "fenced: the READ completes");
            assert_eq!(r[1].Status, STATUS_SUCCESS);
            verify(&sink, 128, &src);
        } else {
            assert_eq!(
                r[0].Status, STATUS_ACCESS_VIOLATION,
                "unfenced: READ data after the invalidate"
            );
            verify(&sink, 128, &[0; 512]);
        }
        mr.close();
        drop([sink, mb.close()]);
        p.close();
        c.finish();
    }
}

/// pvrdma.md M36 through data: with b's READ responses delayed, a SEND posted after a READ
/// reaches b (its receive completes) while the READ is still outstanding at a, unless the
/// SEND carries READ_FENCE, in which case the READ has completed by the time b receives.
#[test]
fn read_fence_holds_a_later_send_until_the_read_completes() {
    for fenced in [false, true] {
        let c = Cluster::new(Mode::Deterministic, 2);
        c.world.set_read_response_delay(1, 50_000);
        let p = Pair::new(&c);
        let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
        let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
        let src = fill(&mb.mem, 0, 0x65, 256);
        let msg = fill(&ma.mem, 1024, 0x66, 32);
        assert_eq!(p.qb.receive(1, &[mb.sge(2048, 64)]), STATUS_SUCCESS);
        c.settle();
        let tok = mb.mr.remote_token();
        assert_eq!(
            p.qa.read(2, &[ma.sge(0, 256)], mb.mem.va, tok, 0),
            STATUS_SUCCESS
        );
        let f = if fenced { NDK_OP_FLAG_READ_FENCE } else { 0 };
        assert_eq!(p.qa.send(3, &[ma.sge(1024, 32)], f), STATUS_SUCCESS);
        let mut at_receive = None;
        for _ in 0..100_000 {
            if !c.world.step() {
                break;
            }
            if !p.cq_b.results(1).is_empty() {
                at_receive = Some(p.cq_a.results(2));
                break;
            }
        }
        let seen = at_receive.expect("b's receive completes");
        let ops: Vec<usize> = seen.iter().map(|r| r.RequestContext as usize).collect();
        if fenced {
            assert_eq!(ops.first(), Some(&2), "fenced: the READ completed first");
        } else {
            assert!(
                ops.is_empty(),
                "unfenced: the SEND overtook the READ response"
            );
        }
        let rest = p.cq_a.wait_results(2 - seen.len());
        let all: Vec<usize> = seen
            .iter()
            .chain(rest.iter())
            .map(|r| {
                assert_eq!(r.Status, STATUS_SUCCESS);
                r.RequestContext as usize
            })
            .collect();
        assert_eq!(all, vec![2, 3], "results in posting order");
        verify(&ma.mem, 0, &src);
        verify(&mb.mem, 2048, &msg);
        drop([ma.close(), mb.close()]);
        p.close();
        c.finish();
    }
}

#[test]
fn read_silent_success_gives_no_result_but_a_silent_failure_does() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
    let src = fill(&mb.mem, 0, 0x71, 256);
    let silent = NDK_OP_FLAG_SILENT_SUCCESS;
    let tok = mb.mr.remote_token();
    assert_eq!(
        p.qa.read(1, &[ma.sge(0, 256)], mb.mem.va, tok, silent),
        STATUS_SUCCESS
    );
    // A signalled request after it: its result is the only one.
    assert_eq!(
        p.qa.read(2, &[ma.sge(512, 16)], mb.mem.va, tok, 0),
        STATUS_SUCCESS
    );
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]).3, 2, "only the signalled read reports");
    verify(&ma.mem, 0, &src);
    // A silent read that fails still reports (it reads past the remote region).
    assert_eq!(
        p.qa.read(3, &[ma.sge(0, 200)], mb.mem.va + 4000, tok, silent),
        STATUS_SUCCESS
    );
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_REMOTE_RESOURCES, 0, QPC_A, 3));
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

#[test]
fn read_on_unconnected_qp_is_connection_invalid_inline() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::with(&c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let st = p.qa.read(1, &[ma.sge(0, 16)], 0x2000_0000, 0x1234, 0);
    assert_eq!(st, STATUS_CONNECTION_INVALID);
    no_results(&c, &p);
    drop(ma.close());
    p.close();
    c.finish();
}

/// Project decision (c): reading past the end of the remote MR completes with
/// STATUS_REMOTE_RESOURCES; local memory outside the SGE and the remote memory (inside and
/// past the region) are unchanged.
#[test]
fn read_past_the_remote_region_is_remote_resources_and_touches_nothing_else() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    // b registers only the first of two pages.
    let mem_b = c.host(1).mem(2, 0x2000_0000);
    let mdl = mem_b.mdl(0, 4096);
    let mr = p.pd_b.create_mr(false).unwrap();
    assert_eq!(mr.register(&mdl, 4096, REMOTE), STATUS_SUCCESS);
    let remote = fill(&mem_b, 0, 0x81, 8192);
    let local = fill(&ma.mem, 0, 0x82, 4096);
    let st = p.qa.read(
        1,
        &[ma.sge(1000, 200)],
        mem_b.va + 4000,
        mr.remote_token(),
        0,
    );
    assert_eq!(st, STATUS_SUCCESS);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_REMOTE_RESOURCES, 0, QPC_A, 1));
    verify(&ma.mem, 0, &local[..1000]);
    verify(&ma.mem, 1200, &local[1200..]);
    verify(&mem_b, 0, &remote);
    assert_eq!(pattern(0x81, 8192), remote);
    assert_eq!(mr.deregister(), STATUS_SUCCESS);
    mr.close();
    drop([mem_b, ma.close()]);
    drop(mdl);
    p.close();
    c.finish();
}
