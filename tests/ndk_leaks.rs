//! Leak freedom of the provider (issue "NDK provider over PVRDMA", Done-when 4): after a
//! full consumer scenario (PD, CQ, SRQ, QPs with and without the SRQ, a registered MR
//! deregistered before its close, one closed while registered, an initialized fast-register MR, posted receives, SRQ threshold, teardown) every pool
//! allocation, DMA buffer and device object is released ([`Cluster::finish`]), also when
//!
//! - the n-th allocation fails, for every n until the scenario makes fewer than n, the
//!   closes included: every call succeeds or fails with STATUS_INSUFFICIENT_RESOURCES,
//!   inline or through its completion (ndkpi.md §4.5), every close succeeds and the device
//!   holds no object afterwards (a DESTROY_* is reserved at create, so a close allocates
//!   nothing, §5.1);
//! - the n-th create/modify command is answered with device error 12 or 22 (test hook of the
//!   model): the call reports STATUS_INSUFFICIENT_RESOURCES or STATUS_INVALID_PARAMETER
//!   (pvrdma.md §8 error codes, the provider's `hw_error` mapping);
//! - objects are closed antecedent first: an adapter close blocks until its children are
//!   closed from another thread, a CQ closed before its QP pends until the QP is closed
//!   (ndkpi.md §5.2).
//!
//! Injection runs in deterministic mode, under the cluster's harness lock (the allocation
//! countdown is process-global).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use common::Mode;
use common::ndk::{Cluster, Qp, QpSpec, sge};
use pvrdma_ndk::ndk::dispatch::close_adapter;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::{inject_failure_at, injection_pending};

/// Bound on the injection loops (a scenario makes a few hundred allocations).
const MAX_STEPS: u64 = 3000;

/// What one scenario run observed: the calls that failed, with their status.
type Failures = Vec<(&'static str, NTSTATUS)>;

/// Records `st` of `step`: SUCCESS, or `fail` (recorded). Anything else fails the test.
fn check(failures: &mut Failures, step: &'static str, st: NTSTATUS, fail: NTSTATUS) -> bool {
    assert!(
        st == STATUS_SUCCESS || st == fail,
        "{step}: status {st:#010x}, expected SUCCESS or {fail:#010x}"
    );
    if st != STATUS_SUCCESS {
        failures.push((step, st));
    }
    st == STATUS_SUCCESS
}

fn created<T>(
    failures: &mut Failures,
    step: &'static str,
    r: Result<T, NTSTATUS>,
    fail: NTSTATUS,
) -> Option<T> {
    match r {
        Ok(o) => Some(o),
        Err(st) => {
            check(failures, step, st, fail);
            None
        }
    }
}

/// The full scenario on host 0 of `c`; every call succeeds or fails with `fail`. Closes
/// everything it created (closes must succeed: the kit asserts SUCCESS or PENDING with one
/// CloseCompletion).
fn scenario(c: &Cluster, fail: NTSTATUS, before_closes: &mut dyn FnMut()) -> Failures {
    let mut f = Failures::new();
    let a = c.adapter(0);
    let h = c.host(0);
    let Some(pd) = created(&mut f, "NdkCreatePd", a.create_pd(), fail) else {
        return f;
    };
    let cq = created(&mut f, "NdkCreateCq", a.create_cq(64, None), fail);
    let srq = created(&mut f, "NdkCreateSrq", pd.create_srq(16, 1, 0), fail);
    let (mut qp, mut qp_srq) = (None, None);
    if let Some(cq) = &cq {
        qp = created(
            &mut f,
            "NdkCreateQp",
            pd.create_qp(cq, cq, QpSpec::new(0x51)),
            fail,
        );
        if let Some(srq) = &srq {
            let r = pd.create_qp_with_srq(cq, cq, srq, QpSpec::new(0x52));
            qp_srq = created(&mut f, "NdkCreateQpWithSrq", r, fail);
        }
    }
    let mem = h.mem(2, 0x2000_0000);
    let mdl = mem.mdl(0, 8192);
    let mr = created(&mut f, "NdkCreateMr", pd.create_mr(false), fail);
    let mut registered = false;
    if let Some(mr) = &mr {
        let st = mr.register(&mdl, 8192, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        registered = check(&mut f, "NdkRegisterMr", st, fail);
    }
    // Closed while registered: the close destroys the device MR.
    let mr_open = created(&mut f, "NdkCreateMr", pd.create_mr(false), fail);
    if let Some(m) = &mr_open {
        let st = m.register(&mdl, 4096, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        check(&mut f, "NdkRegisterMr", st, fail);
    }
    let frmr = created(&mut f, "NdkCreateMr(fast)", pd.create_mr(true), fail);
    if let Some(m) = &frmr {
        let st = m.initialize_fast_register(2, true);
        check(&mut f, "NdkInitializeFastRegisterMr", st, fail);
    }
    if let (true, Some(mr)) = (registered, &mr) {
        let token = mr.local_token();
        if let Some(q) = &qp {
            let st = q.receive(0x100, &[sge(mem.va, 64, token)]);
            check(&mut f, "NdkReceive", st, fail);
        }
        if let Some(s) = &srq {
            let st = s.receive(0x200, &[sge(mem.va + 4096, 64, token)]);
            check(&mut f, "NdkSrqReceive", st, fail);
        }
    }
    if let Some(s) = &srq {
        check(&mut f, "NdkModifySrq", s.modify(16, 4), fail);
    }
    if let Some(q) = &qp {
        // Flushes the receive (STATUS_CANCELLED result) so the CQ holds a result at close.
        q.flush();
        c.settle();
    }

    if let (true, Some(mr)) = (registered, &mr) {
        // Its DESTROY_MR was reserved at registration: deregistration needs no memory.
        assert_eq!(mr.deregister(), STATUS_SUCCESS, "NdkDeregisterMr");
    }
    before_closes();
    if let Some(mr) = mr {
        mr.close();
    }
    for m in [mr_open, frmr].into_iter().flatten() {
        m.close();
    }
    for q in [qp_srq, qp].into_iter().flatten() {
        q.close();
    }
    if let Some(s) = srq {
        s.close();
    }
    if let Some(cq) = cq {
        cq.close();
    }
    pd.close();
    drop(mdl);
    drop(mem);
    f
}

#[test]
fn scenario_without_faults_fails_nothing_and_leaks_nothing() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let f = scenario(&c, STATUS_SUCCESS, &mut || {});
    assert!(f.is_empty());
    c.finish();
}

/// The closes (and the DESTROY responses they wait for) make no allocation at all: one armed
/// to fail at the first allocation after the scenario's last call is never consumed.
#[test]
fn closes_allocate_nothing() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let f = scenario(&c, STATUS_SUCCESS, &mut || {
        c.settle();
        inject_failure_at(1);
    });
    c.settle();
    let untouched = injection_pending();
    inject_failure_at(0);
    assert!(f.is_empty());
    assert!(untouched, "a close allocated");
    assert_eq!(c.host(0).consumer_objects(), Default::default());
    c.finish();
}

/// Every allocation of the scenario fails once, the closes' included. The closes succeed
/// (the kit asserts SUCCESS or PENDING) and leave no device object behind: a destroy
/// allocates nothing, its command is reserved when the object is created (ndkpi.md §5.1 "A
/// close request can never fail").
#[test]
fn allocation_failure_at_every_step_reports_insufficient_resources_and_leaks_nothing() {
    let mut n = 1;
    let mut failing_runs = 0;
    let mut in_closes = 0;
    loop {
        let c = Cluster::new(Mode::Deterministic, 1);
        inject_failure_at(n);
        let mut pending_at_closes = false;
        let f = scenario(&c, STATUS_INSUFFICIENT_RESOURCES, &mut || {
            pending_at_closes = injection_pending();
        });
        let never_fired = injection_pending();
        inject_failure_at(0);
        c.settle();
        if std::env::var_os("NDK_LEAKS_TRACE").is_some() {
            eprintln!("allocation {n}: {f:?} {:?}", c.host(0).consumer_objects());
        }
        assert_eq!(
            c.host(0).consumer_objects(),
            Default::default(),
            "allocation {n}: device objects left after the closes ({f:?})"
        );
        c.finish();
        if never_fired {
            assert!(f.is_empty(), "no failure injected, yet {f:?}");
            break;
        }
        failing_runs += usize::from(!f.is_empty());
        in_closes += usize::from(pending_at_closes);
        n += 1;
        assert!(n < MAX_STEPS, "the scenario never ran without a failure");
    }
    eprintln!(
        "{} allocation points, {failing_runs} with a failed call, {in_closes} during the closes",
        n - 1
    );
    assert!(n > 20, "the scenario allocates");
    assert!(failing_runs > 0);
}

/// Commands the driver can fail cleanly: creates and modifies (a failed destroy leaves the
/// object in the device by definition).
const FAILABLE: u64 = 1 << 2 | 1 << 4 | 1 << 6 | 1 << 9 | 1 << 10 | 1 << 17 | 1 << 18;

fn command_errors(code: u32, want: NTSTATUS) {
    let mut n = 1;
    let mut seen = Vec::new();
    loop {
        let c = Cluster::new(Mode::Deterministic, 1);
        let model = c.host(0).model.clone();
        model.with_core(|core| core.fail_nth_command(n, code, FAILABLE));
        let f = scenario(&c, want, &mut || {});
        let never_fired = model.with_core(|core| core.command_fault_pending());
        model.with_core(|core| core.fail_nth_command(0, 0, 0));
        if std::env::var_os("NDK_LEAKS_TRACE").is_some() {
            eprintln!("command {n}: {f:?}");
        }
        c.finish();
        if never_fired {
            assert!(f.is_empty(), "no command failed, yet {f:?}");
            break;
        }
        // A command of a call without a status (NdkFlush's MODIFY_QP) fails silently.
        assert!(
            f.len() <= 1,
            "command {n} failed with {code}: one call fails, {f:?}"
        );
        if let Some((step, _)) = f.first() {
            seen.push(*step);
        }
        n += 1;
        assert!(n < 100, "the scenario never ran without a command error");
    }
    eprintln!(
        "command error {code}: {} commands, failed calls {seen:?}",
        n - 1
    );
    for step in [
        "NdkCreatePd",
        "NdkCreateCq",
        "NdkCreateSrq",
        "NdkCreateQp",
        "NdkRegisterMr",
    ] {
        assert!(seen.contains(&step), "{step} reached by a command error");
    }
}

#[test]
fn device_no_resources_at_each_command_reports_insufficient_resources_and_leaks_nothing() {
    command_errors(12, STATUS_INSUFFICIENT_RESOURCES);
}

#[test]
fn device_invalid_at_each_command_reports_invalid_parameter_and_leaks_nothing() {
    command_errors(22, STATUS_INVALID_PARAMETER);
}

// ------------------------------------------------------------------------------- ordering

#[derive(Clone, Copy)]
struct Raw<T>(*mut T);
// SAFETY: the adapter pointer is used by one thread (the closer) while the main thread
// only closes its children, which the provider supports concurrently (§5.2).
unsafe impl<T> Send for Raw<T> {}

#[test]
fn adapter_close_blocks_until_children_closed_from_another_thread() {
    let mut c = Cluster::new(Mode::Deterministic, 1);
    let pd = c.adapter(0).create_pd().expect("PD");
    let cq = c.adapter(0).create_cq(16, None).expect("CQ");
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(7)).expect("QP");
    let done = Arc::new(AtomicBool::new(false));
    // NDIS's close: the vmxnet3 adapter's CloseNDKAdapterHandler on a paired host.
    let nic = c.hosts[0].vnic.as_ref().map(|v| v.nic().clone());
    let raw = Raw(c.take_adapter(0));
    let d = done.clone();
    let closer = std::thread::spawn(move || {
        let r = raw;
        match nic {
            Some(n) => n.close_ndk_adapter(r.0),
            // SAFETY: opened by the kit, closed only here (the kit skips it: taken above).
            None => unsafe { close_adapter(r.0) },
        }
        d.store(true, Ordering::SeqCst);
    });
    // The test thread makes no provider call until the QP close below, so every provider
    // poll from here on is the closer's wait finding the children still open (each after the
    // world ran to idle): the close has reached its wait and keeps waiting.
    let polls = c.pump().provider_polls();
    c.wait_for("the adapter close to wait for its children", || {
        done.load(Ordering::SeqCst) || c.pump().provider_polls() >= polls + 20
    });
    c.settle();
    assert!(
        !done.load(Ordering::SeqCst),
        "adapter close returned with children open"
    );
    qp.close();
    assert!(
        !done.load(Ordering::SeqCst),
        "returned with a CQ and PD open"
    );
    cq.close();
    c.settle();
    assert!(!done.load(Ordering::SeqCst), "returned with a PD open");
    pd.close();
    c.wait_for("adapter close to return", || done.load(Ordering::SeqCst));
    closer.join().unwrap();
    c.finish();
}

unsafe extern "system" fn on_close(ctx: PVOID) {
    // SAFETY: the context is an `Arc<AtomicU32>` the test keeps alive.
    let n = unsafe { &*(ctx as *const AtomicU32) };
    n.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn cq_closed_before_its_qp_pends_until_the_qp_is_closed() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let pd = c.adapter(0).create_pd().expect("PD");
    let cq = c.adapter(0).create_cq(16, None).expect("CQ");
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(7)).expect("QP");
    let closed = Arc::new(AtomicU32::new(0));
    // SAFETY: a live CQ.
    let d = unsafe { (*cq.ptr).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let d = unsafe { &*d };
    // SAFETY: a live CQ closed once; the context outlives the completion (waited for).
    let st = unsafe { (d.NdkCloseCq)(cq.ptr.cast(), on_close, Arc::as_ptr(&closed) as PVOID) };
    assert_eq!(st, STATUS_PENDING, "the QP still references the CQ");
    c.settle();
    assert_eq!(
        closed.load(Ordering::SeqCst),
        0,
        "no CloseCompletion while the QP is open"
    );
    assert_ne!(
        c.host(0).consumer_objects().cqs,
        0,
        "the device CQ is still there"
    );
    qp.close();
    c.wait_for("the CQ's CloseCompletion", || {
        closed.load(Ordering::SeqCst) != 0
    });
    c.settle();
    assert_eq!(closed.load(Ordering::SeqCst), 1, "one CloseCompletion");
    assert_eq!(c.host(0).consumer_objects().cqs, 0);
    pd.close();
    c.finish();
}

/// Receives posted on a fresh QP, on `cq`, each with request context `0x700 + i`.
fn flush_rig(c: &Cluster, n: usize, body: impl FnOnce(&Qp, &dyn Fn(usize)) -> Vec<usize>) {
    let a = c.adapter(0);
    let h = c.host(0);
    let pd = a.create_pd().expect("pd");
    let cq = a.create_cq(64, None).expect("cq");
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(0x61)).expect("qp");
    let mem = h.mem(1, 0x3000_0000);
    let mdl = mem.mdl(0, 4096);
    let mr = pd.create_mr(false).expect("mr");
    assert_eq!(
        mr.register(&mdl, 4096, NDK_MR_FLAG_ALLOW_LOCAL_WRITE),
        STATUS_SUCCESS
    );
    let token = mr.local_token();
    let post = |i: usize| {
        let st = qp.receive(0x700 + i, &[sge(mem.va + 64 * i as u64, 64, token)]);
        assert_eq!(st, STATUS_SUCCESS, "NdkReceive {i}");
    };
    for i in 0..n {
        post(i);
    }
    c.settle();
    assert!(
        cq.results(4).is_empty(),
        "nothing completes before the flush"
    );
    let want = body(&qp, &post);
    let got = cq.wait_results(want.len());
    let statuses: Vec<NTSTATUS> = got.iter().map(|r| r.Status).collect();
    let contexts: Vec<usize> = got.iter().map(|r| r.RequestContext as usize).collect();
    let want_contexts: Vec<usize> = want.iter().map(|i| 0x700 + i).collect();
    assert_eq!(statuses, vec![STATUS_CANCELLED; want.len()]);
    assert_eq!(
        contexts, want_contexts,
        "each request cancelled once, in order"
    );
    assert!(got.iter().all(|r| r.QPContext as usize == 0x61));
    assert_eq!(mr.deregister(), STATUS_SUCCESS);
    mr.close();
    qp.close();
    cq.close();
    pd.close();
    drop(mdl);
    drop(mem);
}

/// NdkFlush cannot report failure (ndkpi.md §5.6), so it allocates nothing: its MODIFY_QP
/// was reserved when the QP was created. With the next allocation armed to fail, every
/// posted receive still completes STATUS_CANCELLED and the armed failure is never consumed.
#[test]
fn flush_allocates_nothing_and_cancels_every_request() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let mut untouched = false;
    flush_rig(&c, 3, |qp, _| {
        inject_failure_at(1);
        qp.flush();
        c.settle();
        untouched = injection_pending();
        inject_failure_at(0);
        vec![0, 1, 2]
    });
    assert!(untouched, "NdkFlush allocated");
    c.settle();
    assert_eq!(c.host(0).consumer_objects(), Default::default());
    c.finish();
}

/// A second NdkFlush while the first is in flight, and a third after the QP reached ERR,
/// cancel nothing twice; a receive posted after the flush is flushed at its doorbell
/// (pvrdma.md M17), once. None of them allocates.
#[test]
fn repeated_flushes_cancel_each_request_exactly_once() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let mut untouched = false;
    flush_rig(&c, 2, |qp, post| {
        inject_failure_at(1);
        qp.flush();
        qp.flush();
        c.settle();
        qp.flush();
        c.settle();
        untouched = injection_pending();
        inject_failure_at(0);
        post(2);
        c.settle();
        qp.flush();
        c.settle();
        vec![0, 1, 2]
    });
    assert!(untouched, "NdkFlush allocated");
    c.settle();
    assert_eq!(c.host(0).consumer_objects(), Default::default());
    c.finish();
}
