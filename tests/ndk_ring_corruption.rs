//! A producer index the device wrote out of range (M14), through the dispatch tables against
//! the model: in a CQ ring the CQ fails with STATUS_INTERNAL_ERROR, reported once through its
//! notification callback, and its ring is never read again (ndkpi.md §5.4: a CQ that reported
//! an error returns no completions); in the async-event or CQ-notification ring the device is
//! lost, so every CQ and SRQ hears STATUS_INTERNAL_ERROR as at DEVICE_FATAL.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use common::Mode;
use common::ndk::{Cluster, Host};
use pvrdma_ndk::ndk::object::ObjRef;
use pvrdma_ndk::ndkpi::*;

/// Callbacks the re-arming consumer serves before it stops re-arming: far above the two it
/// must get, so the unfixed storm shows as a count rather than a hang.
const CALLBACK_CAP: u32 = 64;

/// A consumer that polls and re-arms (ANY) from its notification callback.
#[derive(Default)]
struct Rearming {
    cq: AtomicPtr<NDK_CQ>,
    statuses: Mutex<Vec<NTSTATUS>>,
    polled: Mutex<Vec<u32>>,
    calls: AtomicU32,
}

fn dispatch(cq: *mut NDK_CQ) -> &'static NDK_CQ_DISPATCH {
    // SAFETY: a live CQ of this provider.
    let table = unsafe { (*cq).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    unsafe { &*table }
}

fn poll(cq: *mut NDK_CQ) -> u32 {
    let mut out = [NDK_RESULT {
        Status: 0,
        BytesTransferred: 0,
        QPContext: std::ptr::null_mut(),
        RequestContext: std::ptr::null_mut(),
    }; 4];
    // SAFETY: a live CQ; `out` holds 4 results.
    unsafe { (dispatch(cq).NdkGetCqResults)(cq, out.as_mut_ptr(), 4) }
}

unsafe extern "system" fn rearm_cb(ctx: PVOID, status: NTSTATUS) {
    // SAFETY: the context is a `Rearming` the test keeps alive past the CQ's close.
    let r = unsafe { &*(ctx as *const Rearming) };
    r.statuses.lock().unwrap().push(status);
    let cq = r.cq.load(Ordering::SeqCst);
    if r.calls.fetch_add(1, Ordering::SeqCst) < CALLBACK_CAP {
        r.polled.lock().unwrap().push(poll(cq));
        // SAFETY: a live CQ (the test closes it after the callbacks).
        unsafe { (dispatch(cq).NdkArmCq)(cq, NDK_CQ_NOTIFY_ANY) };
    }
}

/// Page 0 (the ring state) of the buffer whose page directory is at `pdir` (§6, §9).
fn page0(h: &Host, pdir: u64) -> u64 {
    let table = h.space.read_u64(pdir).unwrap();
    h.space.read_u64(table).unwrap()
}

/// The DSR's field at `off`.
fn dsr_u64(h: &Host, off: u64) -> u64 {
    h.space.read_u64(h.bar1.dsr_address() + off).unwrap()
}

/// Page 0 and N of the CQ created last: its CREATE_CQ is still in the command slot
/// (`pdir_dma` @16, `cqe` @28; the response grants what was asked, M19).
fn last_cq_ring(h: &Host) -> (u64, u32) {
    let slot = dsr_u64(h, 16);
    let pdir = h.space.read_u64(slot + 16).unwrap();
    (page0(h, pdir), h.space.read_u32(slot + 28).unwrap())
}

/// `prod_tail` @8 of a ring state page; `cons_head` @12.
const PROD_TAIL: u64 = 8;
const CONS_HEAD: u64 = 12;

/// The out-of-range producer indices of a ring of N (head 0): beyond 2N, all ones, one past
/// full, and in range but more than N ahead.
fn bad_indices(n: u32) -> [u32; 4] {
    [2 * n + 5, u32::MAX, n + 1, 2 * n - 1]
}

#[test]
fn corrupt_cq_index_reports_one_internal_error_and_the_ring_is_not_read_again() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let h = c.host(0);
    let mut probes = Vec::new();
    for bad in bad_indices(16) {
        let r = Box::new(Rearming::default());
        let cq = c
            .adapter(0)
            .create_cq_with_callback(16, rearm_cb, (&*r as *const Rearming).cast_mut().cast())
            .unwrap();
        r.cq.store(cq.ptr, Ordering::SeqCst);
        let (state, n) = last_cq_ring(h);
        assert_eq!(n, 16);
        assert_eq!(bad_indices(n)[probes.len()], bad);
        h.space.write_u32(state + PROD_TAIL, bad).unwrap();
        cq.arm(NDK_CQ_NOTIFY_ANY);
        c.settle();
        // The arm finds the ring non-empty (as with completions waiting); the poll in that
        // callback finds the index bad, and the re-arm reports the error, once.
        assert_eq!(
            *r.statuses.lock().unwrap(),
            [STATUS_SUCCESS, STATUS_INTERNAL_ERROR],
            "index {bad:#x}"
        );
        assert_eq!(*r.polled.lock().unwrap(), [0, 0], "index {bad:#x}");
        assert_eq!(poll(cq.ptr), 0, "index {bad:#x}");
        // The device's index now looks sane and names a CQE: the failed CQ stays failed,
        // consumes nothing and notifies nothing more.
        h.space.write_u32(state + PROD_TAIL, 1).unwrap();
        assert_eq!(poll(cq.ptr), 0, "index {bad:#x}");
        assert_eq!(h.space.read_u32(state + CONS_HEAD).unwrap(), 0);
        cq.arm(NDK_CQ_NOTIFY_ANY);
        c.settle();
        assert_eq!(
            r.statuses.lock().unwrap().len(),
            2,
            "index {bad:#x}: reported once"
        );
        assert_eq!(cq.close(), STATUS_SUCCESS);
        probes.push(r);
    }
    c.finish();
}

/// A consumer that polls while its CQ is armed (for ERRORS, SOLICITED or ANY) and never arms
/// again: the poll that finds the device's index corrupt starts no callback itself (the
/// consumer may poll under a lock of its own), but the CQ's fault DPC that poll queued calls
/// the consumer at once with STATUS_INTERNAL_ERROR (ndkpi.md §5.4), once. Before, the error
/// waited for an NdkArmCq that a consumer armed for ERRORS never makes.
#[test]
fn corrupt_cq_index_found_by_a_poll_calls_the_armed_consumer_back_from_a_dpc() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let h = c.host(0);
    for arm in [
        NDK_CQ_NOTIFY_ERRORS,
        NDK_CQ_NOTIFY_SOLICITED,
        NDK_CQ_NOTIFY_ANY,
    ] {
        let cq = c.adapter(0).create_cq(16, None).unwrap();
        let (state, _) = last_cq_ring(h);
        cq.arm(arm);
        c.settle();
        assert_eq!(
            cq.notifications(),
            Vec::<NTSTATUS>::new(),
            "arm {arm}: an empty CQ"
        );
        h.space.write_u32(state + PROD_TAIL, u32::MAX).unwrap();
        assert_eq!(cq.results(4).len(), 0, "arm {arm}");
        c.settle();
        assert_eq!(
            cq.notifications(),
            [STATUS_INTERNAL_ERROR],
            "arm {arm}: told at once, with no further NdkArmCq"
        );
        // More polls, a sane-looking index, more arms of every type: nothing more.
        h.space.write_u32(state + PROD_TAIL, 1).unwrap();
        assert_eq!(cq.results(4).len(), 0);
        for again in [
            NDK_CQ_NOTIFY_ERRORS,
            NDK_CQ_NOTIFY_SOLICITED,
            NDK_CQ_NOTIFY_ANY,
        ] {
            cq.arm(again);
            c.settle();
            assert_eq!(cq.results(4).len(), 0);
        }
        c.settle();
        assert_eq!(
            cq.notifications(),
            [STATUS_INTERNAL_ERROR],
            "arm {arm}: reported once"
        );
        assert_eq!(h.space.read_u32(state + CONS_HEAD).unwrap(), 0);
        assert_eq!(cq.close(), STATUS_SUCCESS);
    }
    c.finish();
}

/// Unarmed when its poll finds the index corrupt, the consumer hears the error at its next
/// NdkArmCq (of any type), once; the fault DPC that ran meanwhile found nobody to tell.
#[test]
fn corrupt_cq_index_found_by_an_unarmed_poll_is_reported_by_the_next_arm() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let h = c.host(0);
    let cq = c.adapter(0).create_cq(16, None).unwrap();
    let (state, _) = last_cq_ring(h);
    h.space.write_u32(state + PROD_TAIL, u32::MAX).unwrap();
    assert_eq!(cq.results(4).len(), 0);
    c.settle();
    assert_eq!(cq.notifications(), Vec::<NTSTATUS>::new());
    h.space.write_u32(state + PROD_TAIL, 1).unwrap();
    assert_eq!(cq.results(4).len(), 0);
    cq.arm(NDK_CQ_NOTIFY_ERRORS);
    c.settle();
    assert_eq!(cq.notifications(), [STATUS_INTERNAL_ERROR]);
    assert_eq!(cq.results(4).len(), 0);
    assert_eq!(h.space.read_u32(state + CONS_HEAD).unwrap(), 0);
    cq.arm(NDK_CQ_NOTIFY_ANY);
    c.settle();
    assert_eq!(cq.notifications(), [STATUS_INTERNAL_ERROR], "reported once");
    assert_eq!(cq.close(), STATUS_SUCCESS);
    c.finish();
}

/// The device's CQ_ERR for a `cons_head` it found out of range (M14, M22: the ring state page
/// is shared memory a hostile device or a stray write can change) is a corrupt queue, not an
/// overrun: the consumer armed for ERRORS hears STATUS_INTERNAL_ERROR from the async DPC,
/// once, however many CQ_ERRs follow. Before, every CQ_ERR was reported as
/// STATUS_BUFFER_OVERFLOW (an overrun, which tests/ndk_defect9.rs still pins).
#[test]
fn cq_err_for_a_corrupt_cons_head_reports_internal_error_once() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let h = c.host(0);
    let cq = c.adapter(0).create_cq(16, None).unwrap();
    let (state, _) = last_cq_ring(h);
    // SAFETY: a live CQ of this provider.
    let handle = unsafe { ObjRef::<pvrdma_ndk::ndk::cq::Cq>::borrow(cq.ptr) }
        .expect("live CQ")
        .handle();
    cq.arm(NDK_CQ_NOTIFY_ERRORS);
    h.space.write_u32(state + CONS_HEAD, 40).unwrap();
    let cqe = pvrdma_sim::wqe::Cqe::default();
    assert!(
        !h.model.with_core(|m| m.inject_cqe(handle, &cqe)),
        "dropped"
    );
    c.settle();
    assert_eq!(cq.notifications(), [STATUS_INTERNAL_ERROR]);
    // The model stopped the CQ; a second CQ_ERR (a device that repeats itself) adds nothing.
    h.model.with_core(|m| m.post_event(0, handle));
    c.settle();
    cq.arm(NDK_CQ_NOTIFY_ANY);
    c.settle();
    assert_eq!(cq.notifications(), [STATUS_INTERNAL_ERROR], "once");
    assert_eq!(cq.results(4).len(), 0);
    assert_eq!(cq.close(), STATUS_SUCCESS);
    c.finish();
}

/// DSR: `pdir_dma` of the async-event ring (@32 + 8) and of the CQ-notification ring (@48 + 8).
const ASYNC_RING_PDIR: u64 = 40;
const CQ_RING_PDIR: u64 = 56;

/// Corrupts the device ring at `ring_pdir` with `bad` and raises its vector: every CQ and SRQ
/// hears STATUS_INTERNAL_ERROR, the armed ones at once, the others at their next arm.
fn device_ring_corruption_is_device_fatal(ring_pdir: u64, vector: u32, bad: u32) {
    let c = Cluster::new(Mode::Deterministic, 1);
    let h = c.host(0);
    let a = c.adapter(0);
    let armed = a.create_cq(16, None).unwrap();
    let idle = a.create_cq(16, None).unwrap();
    let pd = a.create_pd().unwrap();
    let srq = pd.create_srq(16, 1, 0).unwrap();
    armed.arm(NDK_CQ_NOTIFY_ANY);
    let state = page0(h, dsr_u64(h, ring_pdir));
    h.space.write_u32(state + PROD_TAIL, bad).unwrap();
    assert!(h.platform.raise_interrupt(vector));
    c.settle();
    let what = format!("vector {vector}, index {bad:#x}");
    assert_eq!(armed.notifications(), [STATUS_INTERNAL_ERROR], "{what}");
    assert_eq!(srq.notifications(), [STATUS_INTERNAL_ERROR], "{what}");
    assert_eq!(idle.notifications(), Vec::<NTSTATUS>::new(), "{what}");
    idle.arm(NDK_CQ_NOTIFY_SOLICITED);
    c.settle();
    assert_eq!(idle.notifications(), [STATUS_INTERNAL_ERROR], "{what}");
    // The broken ring is not read again: another interrupt changes nothing.
    assert!(h.platform.raise_interrupt(vector));
    c.settle();
    armed.arm(NDK_CQ_NOTIFY_ANY);
    c.settle();
    assert_eq!(
        armed.notifications(),
        [STATUS_INTERNAL_ERROR],
        "{what}: once"
    );
    assert_eq!(srq.notifications(), [STATUS_INTERNAL_ERROR], "{what}: once");
    let stats = h.dev.stats();
    assert_eq!(
        (stats.async_ring_broken, stats.cq_ring_broken),
        (vector == 1, vector == 2),
        "{what}"
    );
    assert_eq!(srq.close(), STATUS_SUCCESS);
    assert_eq!(pd.close(), STATUS_SUCCESS);
    assert_eq!(idle.close(), STATUS_SUCCESS);
    assert_eq!(armed.close(), STATUS_SUCCESS);
    c.finish();
}

#[test]
fn corrupt_async_event_ring_index_is_device_fatal() {
    // 3 pages of 8-byte EQEs.
    for bad in bad_indices(1536) {
        device_ring_corruption_is_device_fatal(ASYNC_RING_PDIR, 1, bad);
    }
}

#[test]
fn corrupt_cq_notification_ring_index_is_device_fatal() {
    // 3 pages of 4-byte CQNEs.
    for bad in bad_indices(3072) {
        device_ring_corruption_is_device_fatal(CQ_RING_PDIR, 2, bad);
    }
}
