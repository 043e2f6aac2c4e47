//! NdkCqNotificationCallback calling back into the provider (ndkpi.md §5.2, §5.4), in the
//! threaded model: the callback runs in the driver's DPC with no driver spin lock held
//! (counted per thread by the debug host build, `os::sync::held_spin_locks`), so it may poll,
//! re-arm and close its own CQ or another CQ of the same adapter through the dispatch
//! tables without deadlocking. Every wait is bounded and waits on a fact; counts are exact
//! because each round produces one completion and waits for its callback.

mod common;
mod ndk_dp;

use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

use common::Mode;
use common::ndk::{Cluster, QpSpec, Registered};
use ndk_dp::*;
use pvrdma_host::{SPIN_LOCKS_COUNTED, held_spin_locks};
use pvrdma_ndk::ndkpi::*;

/// Rounds of one receive and one send each.
const ROUNDS: u32 = 8;

/// What one CQ's callback does and saw.
#[derive(Default)]
struct Reenter {
    /// The CQ this context belongs to.
    own: AtomicPtr<NDK_CQ>,
    /// Another CQ of the same adapter, polled and armed from this CQ's callback.
    other: AtomicPtr<NDK_CQ>,
    /// A CQ of the same adapter to close from the callback numbered `close_victim_at`.
    victim: AtomicPtr<NDK_CQ>,
    close_victim_at: AtomicU32,
    victim_close: Mutex<Option<NTSTATUS>>,
    /// Statuses of the calls, in order.
    statuses: Mutex<Vec<NTSTATUS>>,
    own_results: AtomicU32,
    other_results: AtomicU32,
    /// Calls that found a driver spin lock held, or that started inside another call of
    /// the same CQ (the provider must serialize them, §5.4).
    violations: AtomicU32,
    inside: AtomicBool,
    /// Status of the close of `own` from its own callback, and the close completions.
    self_close: Mutex<Option<NTSTATUS>>,
    close_completions: AtomicU32,
    completions_seen_in_callback: AtomicU32,
    /// Bumped last in each call: a waiter that sees it sees everything above.
    calls: AtomicU32,
}

impl Reenter {
    fn enter(&self) {
        if held_spin_locks() != 0 || self.inside.swap(true, Ordering::SeqCst) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

fn dispatch(cq: *mut NDK_CQ) -> &'static NDK_CQ_DISPATCH {
    // SAFETY: a live CQ of the provider.
    let table = unsafe { (*cq).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    unsafe { &*table }
}

/// NdkGetCqResults until empty; the number of results.
fn drain(cq: *mut NDK_CQ) -> u32 {
    let mut total = 0;
    loop {
        let mut out = [NDK_RESULT {
            Status: 0,
            BytesTransferred: 0,
            QPContext: null_mut(),
            RequestContext: null_mut(),
        }; 4];
        // SAFETY: a live CQ; `out` holds 4 results; no other call on this CQ runs now.
        let n = unsafe { (dispatch(cq).NdkGetCqResults)(cq, out.as_mut_ptr(), 4) };
        assert!(n <= 4);
        if n == 0 {
            return total;
        }
        total += n;
    }
}

fn arm(cq: *mut NDK_CQ) {
    // SAFETY: a live CQ; no other call on it runs now.
    unsafe { (dispatch(cq).NdkArmCq)(cq, NDK_CQ_NOTIFY_ANY) };
}

unsafe extern "system" fn on_close(ctx: PVOID) {
    // SAFETY: the context is a `Reenter` the test keeps alive past the close.
    let r = unsafe { &*(ctx as *const Reenter) };
    if held_spin_locks() != 0 {
        r.violations.fetch_add(1, Ordering::SeqCst);
    }
    r.close_completions.fetch_add(1, Ordering::SeqCst);
}

fn close(cq: *mut NDK_CQ, ctx: &Reenter) -> NTSTATUS {
    // SAFETY: a live CQ, closed once; the context outlives its CloseCompletion.
    unsafe { (dispatch(cq).NdkCloseCq)(cq.cast(), on_close, ctx as *const Reenter as PVOID) }
}

/// Polls its own CQ dry and re-arms it, then polls and arms the other CQ, and closes the
/// victim CQ on the call it was told to.
unsafe extern "system" fn poll_and_rearm(ctx: PVOID, st: NTSTATUS) {
    // SAFETY: the context is a `Reenter` the test keeps alive past the CQ's close.
    let r = unsafe { &*(ctx as *const Reenter) };
    r.enter();
    r.statuses.lock().unwrap().push(st);
    let own = r.own.load(Ordering::SeqCst);
    r.own_results.fetch_add(drain(own), Ordering::SeqCst);
    arm(own);
    let other = r.other.load(Ordering::SeqCst);
    if !other.is_null() {
        r.other_results.fetch_add(drain(other), Ordering::SeqCst);
        arm(other);
    }
    let this_call = r.calls.load(Ordering::SeqCst) + 1;
    if r.close_victim_at.load(Ordering::SeqCst) == this_call {
        let victim = r.victim.load(Ordering::SeqCst);
        *r.victim_close.lock().unwrap() = Some(close(victim, r));
    }
    r.leave();
}

/// Re-arms its own CQ without polling it (the completion is still there, so a callback
/// becomes due at once and is deferred until this one returns), then closes the CQ.
unsafe extern "system" fn arm_then_close_self(ctx: PVOID, st: NTSTATUS) {
    // SAFETY: as for `poll_and_rearm`.
    let r = unsafe { &*(ctx as *const Reenter) };
    r.enter();
    r.statuses.lock().unwrap().push(st);
    let own = r.own.load(Ordering::SeqCst);
    arm(own);
    *r.self_close.lock().unwrap() = Some(close(own, r));
    r.completions_seen_in_callback
        .store(r.close_completions.load(Ordering::SeqCst), Ordering::SeqCst);
    r.leave();
}

/// A callback context that outlives the test even when an assertion fails while a DPC may
/// still call back.
fn leaked() -> &'static Reenter {
    Box::leak(Box::default())
}

fn ctx_ptr(r: &Reenter) -> PVOID {
    r as *const Reenter as PVOID
}

#[test]
fn the_host_build_counts_held_spin_locks() {
    // The other tests' assertions are only as good as the counter (which a release build
    // leaves out).
    let l = pvrdma_ndk::os::SpinLock::new(());
    assert_eq!(held_spin_locks(), 0);
    let g = l.lock();
    assert_eq!(held_spin_locks(), u32::from(SPIN_LOCKS_COUNTED));
    drop(g);
    assert_eq!(held_spin_locks(), 0);
}

/// Host b's receive CQ and initiator CQ each poll and re-arm themselves and each other from
/// their callbacks; the last receive callback closes a third CQ of the adapter.
#[test]
fn callbacks_poll_rearm_and_close_cqs_of_their_adapter() {
    let c = Cluster::new(Mode::Threaded, 2);
    let pd_a = c.adapter(0).create_pd().unwrap();
    let pd_b = c.adapter(1).create_pd().unwrap();
    let cq_a = c.adapter(0).create_cq(64, None).unwrap();
    let (recv, send) = (leaked(), leaked());
    let rcq = c
        .adapter(1)
        .create_cq_with_callback(64, poll_and_rearm, ctx_ptr(recv))
        .unwrap();
    let icq = c
        .adapter(1)
        .create_cq_with_callback(64, poll_and_rearm, ctx_ptr(send))
        .unwrap();
    let victim = c.adapter(1).create_cq(16, None).unwrap();
    recv.own.store(rcq.ptr, Ordering::SeqCst);
    recv.other.store(icq.ptr, Ordering::SeqCst);
    recv.victim.store(victim.ptr, Ordering::SeqCst);
    recv.close_victim_at.store(ROUNDS, Ordering::SeqCst);
    send.own.store(icq.ptr, Ordering::SeqCst);
    send.other.store(rcq.ptr, Ordering::SeqCst);

    let qa = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A)).unwrap();
    let qb = pd_b.create_qp(&rcq, &icq, QpSpec::new(QPC_B)).unwrap();
    c.connect(&qa, &qb);
    let ma = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &pd_b, 1, 0x2000_0000, LOCAL);
    rcq.arm(NDK_CQ_NOTIFY_ANY);
    icq.arm(NDK_CQ_NOTIFY_ANY);

    for i in 1..=ROUNDS {
        let ctx = i as usize;
        assert_eq!(qb.receive(ctx, &[mb.sge(0, 64)]), STATUS_SUCCESS);
        assert_eq!(qa.send(ctx, &[ma.sge(0, 64)], 0), STATUS_SUCCESS);
        c.wait_for("receive callback", || {
            recv.calls.load(Ordering::SeqCst) == i
        });
        assert_eq!(qa.receive(ctx, &[ma.sge(0, 64)]), STATUS_SUCCESS);
        assert_eq!(qb.send(ctx, &[mb.sge(0, 32)], 0), STATUS_SUCCESS);
        c.wait_for("send callback", || send.calls.load(Ordering::SeqCst) == i);
    }
    c.settle();

    for (what, r) in [("receive CQ", &recv), ("initiator CQ", &send)] {
        assert_eq!(
            r.calls.load(Ordering::SeqCst),
            ROUNDS,
            "{what}: one call per arm"
        );
        assert_eq!(
            *r.statuses.lock().unwrap(),
            vec![STATUS_SUCCESS; ROUNDS as usize],
            "{what}"
        );
        assert_eq!(r.own_results.load(Ordering::SeqCst), ROUNDS, "{what}");
        assert_eq!(
            r.other_results.load(Ordering::SeqCst),
            0,
            "{what}: the other CQ was empty each time"
        );
        assert_eq!(r.violations.load(Ordering::SeqCst), 0, "{what}");
    }
    // Nothing outstanding on the victim: the close completed inline, without a callback.
    assert_eq!(*recv.victim_close.lock().unwrap(), Some(STATUS_SUCCESS));
    assert_eq!(recv.close_completions.load(Ordering::SeqCst), 0);
    assert_eq!(
        cq_a.wait_results(2 * ROUNDS as usize).len(),
        2 * ROUNDS as usize
    );

    drop([ma.close(), mb.close()]);
    qa.close();
    qb.close();
    // Both CQs are armed: their closes start no callback.
    for q in [cq_a, rcq, icq] {
        assert_eq!(q.close(), STATUS_SUCCESS);
    }
    assert_eq!(recv.calls.load(Ordering::SeqCst), ROUNDS);
    assert_eq!(send.calls.load(Ordering::SeqCst), ROUNDS);
    drop(victim);
    pd_a.close();
    pd_b.close();
    c.finish();
}

/// A callback closes its own CQ (§5.2, §5.4): the close pends while the callback runs and
/// while the CQ's QP lives, the callback that became due meanwhile never starts, nor does
/// any later one, and CloseCompletion comes exactly once, when the QP's close releases the
/// CQ.
#[test]
fn callback_closes_its_own_cq() {
    let c = Cluster::new(Mode::Threaded, 2);
    let pd_a = c.adapter(0).create_pd().unwrap();
    let pd_b = c.adapter(1).create_pd().unwrap();
    let cq_a = c.adapter(0).create_cq(64, None).unwrap();
    let r = leaked();
    let rcq = c
        .adapter(1)
        .create_cq_with_callback(64, arm_then_close_self, ctx_ptr(r))
        .unwrap();
    let icq = c.adapter(1).create_cq(64, None).unwrap();
    r.own.store(rcq.ptr, Ordering::SeqCst);
    let qa = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A)).unwrap();
    let qb = pd_b.create_qp(&rcq, &icq, QpSpec::new(QPC_B)).unwrap();
    c.connect(&qa, &qb);
    let ma = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &pd_b, 1, 0x2000_0000, LOCAL);
    rcq.arm(NDK_CQ_NOTIFY_ANY);

    assert_eq!(qb.receive(1, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(qa.send(1, &[ma.sge(0, 64)], 0), STATUS_SUCCESS);
    c.wait_for("the callback", || r.calls.load(Ordering::SeqCst) == 1);
    // A completion on the closed CQ (its QP still posts) starts no callback either.
    assert_eq!(qb.receive(2, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(qa.send(2, &[ma.sge(0, 64)], 0), STATUS_SUCCESS);
    assert_eq!(cq_a.wait_results(2).len(), 2);
    c.settle();

    assert_eq!(
        r.calls.load(Ordering::SeqCst),
        1,
        "no callback after the close"
    );
    assert_eq!(*r.statuses.lock().unwrap(), vec![STATUS_SUCCESS]);
    assert_eq!(*r.self_close.lock().unwrap(), Some(STATUS_PENDING));
    assert_eq!(r.completions_seen_in_callback.load(Ordering::SeqCst), 0);
    assert_eq!(
        r.close_completions.load(Ordering::SeqCst),
        0,
        "the CQ's QP still holds it"
    );

    drop([ma.close(), mb.close()]);
    qa.close();
    qb.close();
    c.wait_for("CloseCompletion of the CQ", || {
        r.close_completions.load(Ordering::SeqCst) == 1
    });
    c.settle();
    assert_eq!(r.close_completions.load(Ordering::SeqCst), 1);
    assert_eq!(r.calls.load(Ordering::SeqCst), 1);
    assert_eq!(r.violations.load(Ordering::SeqCst), 0);
    drop(rcq);
    for q in [cq_a, icq] {
        assert_eq!(q.close(), STATUS_SUCCESS);
    }
    pd_a.close();
    pd_b.close();
    c.finish();
}
