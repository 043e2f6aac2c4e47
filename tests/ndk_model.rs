//! The NDK provider objects over the verbs layer (`pvrdma::verbs::Verbs`)
//! against the device model (`pvrdma-sim`), through the host harness: an asynchronous
//! NdkCreatePd, CQ and QP creation, pre-posted receives, an armed CQ, NdkFlush (MODIFY_QP →
//! ERR, M32) whose flush CQEs come back as STATUS_CANCELLED results with one notification,
//! and a teardown that leaves no object in the model and no memory leaked.

mod common;

use core::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use common::memory::ConsumerMem;
use common::objects::{rc_rtr_rts, rts_attrs};
use common::{Mode, Rig, RigConfig};
use pvrdma_ndk::ndk::NdkDevice;
use pvrdma_ndk::ndk::dispatch;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::pvrdma::cqe::wc_status as wc;
use pvrdma_ndk::pvrdma::device::DeviceConfig as DrvConfig;
use pvrdma_ndk::pvrdma::verbs::Verbs;
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
    let hw = Verbs::new(dev).expect("hw");
    let ndk = NdkDevice::new(hw.clone()).expect("ndk");
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
    CREATED.store(0, Ordering::SeqCst);
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
    assert_eq!(st, STATUS_PENDING);
    rig.wait_for("the CQ", || CREATED.load(Ordering::SeqCst) != 0);
    assert_eq!(CREATE_STATUS.load(Ordering::SeqCst), STATUS_SUCCESS as u32);
    let cq = CREATED.load(Ordering::SeqCst) as *mut NDK_CQ;
    let mut qp = null_mut();
    CREATED.store(0, Ordering::SeqCst);
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
    assert_eq!(st, STATUS_PENDING);
    rig.wait_for("the QP", || CREATED.load(Ordering::SeqCst) != 0);
    let qp = CREATED.load(Ordering::SeqCst) as *mut NDK_QP;
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

/// The GID `rts_attrs` addresses (fe80::250:56ff:fe00:2), bound at probe so RC QPs of one
/// device reach each other (loopback, M37/M38).
const GID: [u8; 16] = [
    0xFE, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x50, 0x56, 0xFF, 0xFE, 0, 0, 2,
];

static LB_CREATED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "system" fn lb_create_cb(_c: PVOID, st: NTSTATUS, o: *mut NDK_OBJECT_HEADER) {
    assert_eq!(st, STATUS_SUCCESS);
    LB_CREATED.store(o as usize, Ordering::SeqCst);
}
unsafe extern "system" fn lb_cq_cb(_c: PVOID, _st: NTSTATUS) {}
static LB_REQUESTS: AtomicU32 = AtomicU32::new(0);
static LB_WANT: AtomicU32 = AtomicU32::new(0);

unsafe extern "system" fn lb_request_cb(_c: PVOID, st: NTSTATUS) {
    assert_eq!(st, STATUS_SUCCESS);
    LB_REQUESTS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn loopback_send_receive_and_rdma_write_between_two_ndk_qps() {
    let rig = Rig::new(RigConfig::new(Mode::Threaded));
    // The model's RoCEv2 transport on a one-port fabric: frames to its own MAC loop back.
    let fabric = pvrdma_sim::fabric::Fabric::new(7);
    let _link = pvrdma_sim::transport::attach(&rig.model, &fabric);
    assert!(fabric.run_threaded(pvrdma_sim::fabric::ThreadMode::Virtual));
    let mac = rig.model.with_core(|c| c.mac());
    let gids = [GID];
    let dev = Arc::new(
        rig.probe(&DrvConfig {
            gids: &gids,
            ..DrvConfig::default()
        })
        .expect("probe"),
    );
    let hw = Verbs::new(dev.clone()).expect("hw");
    let ndk = NdkDevice::new(hw.clone()).expect("ndk");
    let a = ndk
        .open_adapter(NDK_VERSION { Major: 2, Minor: 1 })
        .expect("open");
    // SAFETY: the adapter just opened.
    let ad = unsafe { (*a).Dispatch };
    // SAFETY: the provider's tables are statics.
    let ad = unsafe { &*ad };
    let mut unused = null_mut();
    // SAFETY: live adapter, valid pointers.
    let st = unsafe { (ad.NdkCreatePd)(a, lb_create_cb, null_mut(), &mut unused) };
    assert_eq!(st, STATUS_PENDING);
    rig.wait_for("the PD", || LB_CREATED.load(Ordering::SeqCst) != 0);
    let pd = LB_CREATED.load(Ordering::SeqCst) as *mut NDK_PD;
    // SAFETY: the PD from CreateCompletion.
    let pdd = unsafe { (*pd).Dispatch };
    // SAFETY: statics.
    let pdd = unsafe { &*pdd };
    let mut cq = null_mut();
    LB_CREATED.store(0, Ordering::SeqCst);
    // SAFETY: live adapter, valid pointers.
    let st = unsafe {
        (ad.NdkCreateCq)(
            a,
            16,
            lb_cq_cb,
            null_mut(),
            null_mut(),
            lb_create_cb,
            null_mut(),
            &mut cq,
        )
    };
    assert_eq!(st, STATUS_PENDING);
    rig.wait_for("the CQ", || LB_CREATED.load(Ordering::SeqCst) != 0);
    let cq = LB_CREATED.load(Ordering::SeqCst) as *mut NDK_CQ;
    let mut qps = [null_mut(); 2];
    for (i, q) in qps.iter_mut().enumerate() {
        let mut out = null_mut();
        LB_CREATED.store(0, Ordering::SeqCst);
        // SAFETY: live objects, valid pointers.
        let st = unsafe {
            (pdd.NdkCreateQp)(
                pd,
                cq,
                cq,
                (0xA + i) as PVOID,
                4,
                4,
                1,
                1,
                0,
                lb_create_cb,
                null_mut(),
                &mut out,
            )
        };
        assert_eq!(st, STATUS_PENDING);
        rig.wait_for("a QP", || LB_CREATED.load(Ordering::SeqCst) != 0);
        *q = LB_CREATED.load(Ordering::SeqCst) as *mut NDK_QP;
    }
    let [qa, qb] = qps;
    // The connection manager is a later issue: connect the two device QPs by hand (handles
    // 1 and 2, QPNs 0x101 and 0x102 on VERSION 20, M10), then tell the NDK layer.
    for (h, peer) in [(1, 0x102), (2, 0x101)] {
        let mut at = rts_attrs(peer);
        at.sq_psn = at.rq_psn; // both directions use the same PSN
        at.ah_attr.dmac = mac;
        rc_rtr_rts(&dev, h, at).expect("RTR/RTS");
    }
    // SAFETY: live QPs.
    unsafe { pvrdma_ndk::ndk::set_qp_connected(qa, true) };
    // SAFETY: as above.
    unsafe { pvrdma_ndk::ndk::set_qp_connected(qb, true) };

    // Consumer memory registered through MDLs: src local, dst remote-writable.
    let src = ConsumerMem::new(&rig.space, 1, 0x1000_0000);
    let dst = ConsumerMem::new(&rig.space, 2, 0x2000_0000);
    let payload: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(7) ^ 0x5A).collect();
    src.buf.write(0, &payload);
    let mut mrs = [null_mut(); 2];
    for m in mrs.iter_mut() {
        // SAFETY: live PD, valid pointers.
        let st = unsafe { (pdd.NdkCreateMr)(pd, 0, lb_create_cb, null_mut(), m) };
        assert_eq!(st, STATUS_SUCCESS);
    }
    let [mr_src, mr_dst] = mrs;
    // SAFETY: live MR.
    let mrd = unsafe { (*mr_src).Dispatch };
    // SAFETY: statics.
    let mrd = unsafe { &*mrd };
    let src_mdl = src.mdl(0, 4096);
    let dst_mdl = dst.mdl(0, 8192);
    // SAFETY: live MRs, MDLs with PFN arrays.
    let st = unsafe {
        (mrd.NdkRegisterMr)(
            mr_src,
            src_mdl.as_ptr().cast_mut(),
            4096,
            0,
            lb_request_cb,
            null_mut(),
        )
    };
    assert_eq!(st, STATUS_PENDING);
    let n = LB_WANT.fetch_add(1, Ordering::SeqCst) + 1;
    rig.wait_for("RequestCompletion", || {
        LB_REQUESTS.load(Ordering::SeqCst) == n
    });
    let flags = NDK_MR_FLAG_ALLOW_REMOTE_WRITE;
    // SAFETY: as above.
    let st = unsafe {
        (mrd.NdkRegisterMr)(
            mr_dst,
            dst_mdl.as_ptr().cast_mut(),
            8192,
            flags,
            lb_request_cb,
            null_mut(),
        )
    };
    assert_eq!(st, STATUS_PENDING);
    let n = LB_WANT.fetch_add(1, Ordering::SeqCst) + 1;
    rig.wait_for("RequestCompletion", || {
        LB_REQUESTS.load(Ordering::SeqCst) == n
    });
    // SAFETY: live MR.
    let src_l = unsafe { (mrd.NdkGetLocalTokenFromMr)(mr_src) };
    // SAFETY: live MR.
    let dst_l = unsafe { (mrd.NdkGetLocalTokenFromMr)(mr_dst) };
    // SAFETY: live MR.
    let dst_r = unsafe { (mrd.NdkGetRemoteTokenFromMr)(mr_dst) };
    assert_ne!(dst_r, 0, "remote access gives an rkey");

    // B pre-posts a receive; A sends 48 bytes and RDMA-writes 32 more into B's second page.
    // SAFETY: live QPs.
    let qpd = unsafe { (*qa).Dispatch };
    // SAFETY: statics.
    let qpd = unsafe { &*qpd };
    let sge = |va: u64, len: u32, key: u32| NDK_SGE {
        Anonymous: NDK_SGE_0 {
            VirtualAddress: va as PVOID,
        },
        Length: len,
        MemoryRegionToken: key,
    };
    let rx = sge(dst.va, 64, dst_l);
    // SAFETY: live QP, one SGE.
    let st = unsafe { (qpd.NdkReceive)(qb, 0xB1 as PVOID, &rx, 1) };
    assert_eq!(st, STATUS_SUCCESS);
    let tx = sge(src.va, 48, src_l);
    // SAFETY: as above.
    let st = unsafe { (qpd.NdkSend)(qa, 0xA1 as PVOID, &tx, 1, 0) };
    assert_eq!(st, STATUS_SUCCESS);
    let wr = sge(src.va + 16, 32, src_l);
    // SAFETY: as above.
    let st = unsafe { (qpd.NdkWrite)(qa, 0xA2 as PVOID, &wr, 1, dst.va + 4096 + 8, dst_r, 0) };
    assert_eq!(st, STATUS_SUCCESS);

    // SAFETY: live CQ.
    let cqd = unsafe { (*cq).Dispatch };
    // SAFETY: statics.
    let cqd = unsafe { &*cqd };
    let results = std::sync::Mutex::new(Vec::new());
    rig.wait_for("three completions", || {
        // SAFETY: a zeroed result is a valid value.
        let mut out = [unsafe { core::mem::zeroed::<NDK_RESULT_EX>() }; 4];
        // SAFETY: live CQ, 4 entries; polls are serialized (this thread only).
        let n = unsafe { (cqd.NdkGetCqResultsEx)(cq, out.as_mut_ptr(), 4) };
        let mut r = results.lock().unwrap();
        r.extend(out[..n as usize].iter().map(|r| {
            (
                r.RequestContext as usize,
                r.Status,
                r.QPContext as usize,
                r.Type,
                r.BytesTransferred,
            )
        }));
        r.len() >= 3
    });
    let mut r = results.into_inner().unwrap();
    r.sort_by_key(|x| x.0);
    assert_eq!(r.len(), 3);
    assert_eq!(
        r.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(),
        [
            (0xA1, STATUS_SUCCESS),
            (0xA2, STATUS_SUCCESS),
            (0xB1, STATUS_SUCCESS)
        ]
    );
    assert_eq!((r[0].2, r[0].3), (0xA, NdkOperationTypeSend));
    assert_eq!((r[1].2, r[1].3), (0xA, NdkOperationTypeWrite));
    assert_eq!((r[2].2, r[2].3, r[2].4), (0xB, NdkOperationTypeReceive, 48));
    assert_eq!(
        dst.buf.read_vec(0, 48),
        payload,
        "sent bytes landed in the receive buffer"
    );
    assert_eq!(
        dst.buf.read_vec(4096 + 8, 32),
        payload[16..48],
        "written bytes landed at the remote VA"
    );

    for obj in [
        mr_src.cast::<NDK_OBJECT_HEADER>(),
        mr_dst.cast(),
        qa.cast(),
        qb.cast(),
        cq.cast(),
        pd.cast(),
    ] {
        assert_eq!(close(obj), STATUS_SUCCESS);
    }
    // SAFETY: opened above, closed once.
    unsafe { dispatch::close_adapter(a) };
    rig.wait_for("DESTROYs", || {
        rig.model_objects() == ObjectCounts::default()
    });
    rig.settle();
    drop(ndk);
    drop(hw);
    drop(dev);
    drop((src, dst));
    rig.finish();
}
