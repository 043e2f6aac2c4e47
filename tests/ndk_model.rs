//! The NDK provider objects over the real hardware layer (`ndk::pvrdma_hw::PvrdmaHardware`)
//! against the device model (`pvrdma-sim`), through the host harness: an asynchronous
//! NdkCreatePd, CQ and QP creation, pre-posted receives, an armed CQ, NdkFlush (MODIFY_QP →
//! ERR, M32) whose flush CQEs come back as STATUS_CANCELLED results with one notification,
//! and a teardown that leaves no object in the model and no memory leaked.

mod common;

use core::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use common::{Mode, Rig, RigConfig};
use pvrdma_ndk::ndk::NdkDevice;
use pvrdma_ndk::ndk::completion::wc;
use pvrdma_ndk::ndk::dispatch;
use pvrdma_ndk::ndk::pvrdma_hw::PvrdmaHardware;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::pvrdma::device::DeviceConfig as DrvConfig;
use pvrdma_sim::ObjectCounts;

static CREATED: AtomicUsize = AtomicUsize::new(0);
static CREATE_STATUS: AtomicU32 = AtomicU32::new(u32::MAX);
static NOTIFIED: AtomicU32 = AtomicU32::new(0);
static CLOSED: AtomicU32 = AtomicU32::new(0);

unsafe extern "system" fn create_cb(_c: PVOID, st: NTSTATUS, o: *mut NDK_OBJECT_HEADER) {
    CREATE_STATUS.store(st as u32, Ordering::SeqCst);
    CREATED.store(o as usize, Ordering::SeqCst);
}
unsafe extern "system" fn cq_cb(_c: PVOID, st: NTSTATUS) {
    assert_eq!(st, STATUS_SUCCESS);
    NOTIFIED.fetch_add(1, Ordering::SeqCst);
}
unsafe extern "system" fn close_cb(_c: PVOID) {
    CLOSED.fetch_add(1, Ordering::SeqCst);
}

fn close(obj: *mut NDK_OBJECT_HEADER) -> NTSTATUS {
    // SAFETY: a live object of this provider; every table starts with its close slot.
    let d = unsafe { (*obj.cast::<NDK_PD>()).Dispatch };
    // SAFETY: the provider's tables are statics.
    let f = unsafe { (*d).NdkClosePd };
    // SAFETY: live object, valid callback.
    unsafe { f(obj, close_cb, null_mut()) }
}

#[test]
fn flush_over_the_device_model_cancels_pre_posted_receives() {
    let rig = Rig::new(RigConfig::new(Mode::Threaded));
    let dev = Arc::new(rig.probe(&DrvConfig::default()).expect("probe"));
    let hw = PvrdmaHardware::new(dev).expect("hw");
    let ndk = NdkDevice::new(hw.clone()).expect("ndk");
    hw.attach(&ndk);
    let a = ndk
        .open_adapter(NDK_VERSION { Major: 1, Minor: 0 })
        .expect("open");
    // SAFETY: the adapter just opened.
    let ad = unsafe { (*a).Dispatch };
    // SAFETY: the provider's tables are statics.
    let ad = unsafe { &*ad };

    // NdkCreatePd: CREATE_PD + CREATE_MR(DMA) through the command DPC.
    let mut pd_out = null_mut();
    // SAFETY: live adapter, valid pointers.
    let st = unsafe { (ad.NdkCreatePd)(a, create_cb, null_mut(), &mut pd_out) };
    assert_eq!(st, STATUS_PENDING);
    rig.wait_for("CreateCompletion", || CREATED.load(Ordering::SeqCst) != 0);
    assert_eq!(CREATE_STATUS.load(Ordering::SeqCst), STATUS_SUCCESS as u32);
    assert!(pd_out.is_null());
    let pd = CREATED.load(Ordering::SeqCst) as *mut NDK_PD;
    // SAFETY: the PD from CreateCompletion.
    let pdd = unsafe { (*pd).Dispatch };
    // SAFETY: statics.
    let pdd = unsafe { &*pdd };
    let mut token = 0;
    // SAFETY: live PD.
    unsafe { (pdd.NdkGetPrivilegedMemoryRegionToken)(pd, &mut token) };
    assert_ne!(token, 0);

    let mut cq = null_mut();
    // SAFETY: live adapter, valid pointers.
    let st = unsafe {
        (ad.NdkCreateCq)(
            a,
            16,
            cq_cb,
            null_mut(),
            null_mut(),
            create_cb,
            null_mut(),
            &mut cq,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    let mut qp = null_mut();
    // SAFETY: live objects, valid pointers.
    let st = unsafe {
        (pdd.NdkCreateQp)(
            pd,
            cq,
            cq,
            0xABC as PVOID,
            4,
            4,
            1,
            1,
            0,
            create_cb,
            null_mut(),
            &mut qp,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(
        rig.model_objects(),
        ObjectCounts {
            pds: 1,
            mrs: 1,
            cqs: 1,
            qps: 1,
            ..ObjectCounts::default()
        }
    );

    // Two receives before any connection (allowed, §5.3), then arm and flush.
    // SAFETY: live QP.
    let qpd = unsafe { (*qp).Dispatch };
    // SAFETY: statics.
    let qpd = unsafe { &*qpd };
    let sge = NDK_SGE {
        Anonymous: NDK_SGE_0 { LogicalAddress: 0 },
        Length: 0,
        MemoryRegionToken: token,
    };
    for c in [0x51usize, 0x52] {
        // SAFETY: live QP, one SGE.
        let st = unsafe { (qpd.NdkReceive)(qp, c as PVOID, &sge, 1) };
        assert_eq!(st, STATUS_SUCCESS);
    }
    // SAFETY: live CQ.
    let cqd = unsafe { (*cq).Dispatch };
    // SAFETY: statics.
    let cqd = unsafe { &*cqd };
    // SAFETY: live CQ.
    unsafe { (cqd.NdkArmCq)(cq, NDK_CQ_NOTIFY_ANY) };
    assert_eq!(
        NOTIFIED.load(Ordering::SeqCst),
        0,
        "empty CQ: the arm waits"
    );
    // SAFETY: live QP.
    unsafe { (qpd.NdkFlush)(qp) };
    rig.wait_for("the notification", || NOTIFIED.load(Ordering::SeqCst) == 1);
    rig.settle();
    assert_eq!(NOTIFIED.load(Ordering::SeqCst), 1, "one callback per arm");
    // SAFETY: a zeroed result is a valid value.
    let mut out = [unsafe { core::mem::zeroed::<NDK_RESULT_EX>() }; 4];
    // SAFETY: live CQ, 4 entries.
    let n = unsafe { (cqd.NdkGetCqResultsEx)(cq, out.as_mut_ptr(), 4) };
    assert_eq!(n, 2);
    let got: Vec<_> = out[..2]
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.QPContext as usize,
                r.Type,
                r.ProviderErrorCode,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                STATUS_CANCELLED,
                0x51,
                0xABC,
                NdkOperationTypeReceive,
                wc::WR_FLUSH_ERR
            ),
            (
                STATUS_CANCELLED,
                0x52,
                0xABC,
                NdkOperationTypeReceive,
                wc::WR_FLUSH_ERR
            ),
        ]
    );
    // SAFETY: live CQ, 4 entries.
    let n = unsafe { (cqd.NdkGetCqResultsEx)(cq, out.as_mut_ptr(), 4) };
    assert_eq!(n, 0, "drained");

    // Teardown: closes complete inline; the DESTROYs reach the model.
    for obj in [qp.cast::<NDK_OBJECT_HEADER>(), cq.cast(), pd.cast()] {
        assert_eq!(close(obj), STATUS_SUCCESS);
    }
    // SAFETY: opened above, closed once.
    unsafe { dispatch::close_adapter(a) };
    assert_eq!(
        CLOSED.load(Ordering::SeqCst),
        0,
        "no CloseCompletion for inline closes"
    );
    rig.wait_for("DESTROYs", || {
        rig.model_objects() == ObjectCounts::default()
    });
    rig.settle();
    drop(ndk);
    drop(hw);
    rig.finish();
}
