//! NDK functions this provider does not support answer through the real dispatch tables with
//! the exact status the reference fixes (ndkpi.md §5.0, §5.4, §5.13; pvrdma.md §1
//! "Unsupported NDK features"), and NdkQueryAdapterInfo says so: MaxWindowSize 0, neither
//! CQ_RESIZE nor CQ_INTERRUPT_MODERATION advertised. A device started without a connection
//! engine (no address resolver) answers the connector, listener and shared-endpoint creates
//! with STATUS_NOT_IMPLEMENTED, and every slot of their tables refuses a null object with
//! STATUS_INVALID_PARAMETER (tests/ndk_connect.rs drives them with an engine).

mod common;

use std::ptr::null_mut;
use std::sync::Arc;

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, CreateCtx, QpSpec, Registered, on_create, on_request};
use pvrdma_ndk::ndk::dispatch::{CONNECTOR_DISPATCH, LISTENER_DISPATCH, SHARED_ENDPOINT_DISPATCH};
use pvrdma_ndk::ndkpi::*;

const SOME_GUID: GUID = GUID {
    Data1: 0x1234_5678,
    Data2: 0x9ABC,
    Data3: 0xDEF0,
    Data4: [1, 2, 3, 4, 5, 6, 7, 8],
};

/// NdkQueryExtension through `slot` on `obj`; checks nothing was written to the out value.
fn query_extension(
    slot: NDK_FN_QUERY_EXTENSION_INTERFACE,
    obj: *mut NDK_OBJECT_HEADER,
) -> NTSTATUS {
    let sentinel = 0x5A5A_usize as *const std::ffi::c_void;
    let mut ext = NDK_EXTENSION_INTERFACE { Dispatch: sentinel };
    // SAFETY: `obj` is a live object of the table's type (or null for the tables of objects
    // that cannot be created; their slot dereferences nothing); `ext` outlives the call.
    let st = unsafe {
        slot(
            obj,
            &SOME_GUID,
            NDK_VERSION { Major: 2, Minor: 1 },
            &mut ext,
        )
    };
    assert_eq!(ext.Dispatch, sentinel, "no extension interface written");
    st
}

/// The dispatch table of a live object of this provider.
macro_rules! table {
    ($p:expr) => {{
        // SAFETY: a live object of this provider.
        let d = unsafe { (*$p).Dispatch };
        // SAFETY: the provider's dispatch tables are statics.
        unsafe { &*d }
    }};
}

unsafe extern "system" fn on_connect_event(_ctx: PVOID, _c: *mut NDK_CONNECTOR) {
    panic!("no connect event without a listener");
}

#[test]
fn adapter_info_advertises_no_windows_resize_or_moderation() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let info = c.adapter(0).query_info().expect("NdkQueryAdapterInfo");
    assert_eq!(info.MaxWindowSize, 0, "no memory windows");
    assert_eq!(info.AdapterFlags & NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED, 0);
    assert_eq!(
        info.AdapterFlags & NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED,
        0
    );
    assert_eq!(
        info.AdapterFlags & NDK_ADAPTER_FLAG_RDMA_READ_LOCAL_INVALIDATE_SUPPORTED,
        0,
        "Project decision (b)"
    );
    assert_eq!(
        info.AdapterFlags,
        NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED
    );
    assert_eq!(info.MaxInlineDataSize, 0, "no inline data");
    c.finish();
}

#[test]
fn create_mw_bind_resize_and_moderation_answer_not_supported() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let pd = c.adapter(0).create_pd().expect("PD");
    let cq = c.adapter(0).create_cq(16, None).expect("CQ");
    let pd_b = c.adapter(1).create_pd().expect("PD b");
    let cq_b = c.adapter(1).create_cq(16, None).expect("CQ b");

    // NdkCreateMw: inline NOT_SUPPORTED, no CreateCompletion, out pointer untouched.
    let pdd = table!(pd.ptr);
    let ctx = Arc::new(CreateCtx::default());
    let mut mw: *mut NDK_MW = 0x77 as *mut NDK_MW;
    // SAFETY: live PD; the context outlives the call (nothing may complete later: inline).
    let st = unsafe { (pdd.NdkCreateMw)(pd.ptr, on_create, Arc::as_ptr(&ctx) as PVOID, &mut mw) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    c.settle();
    assert_eq!(ctx.calls(), 0, "no CreateCompletion for an inline failure");
    assert_eq!(mw as usize, 0x77, "out pointer untouched");

    // NdkResizeCq and NdkControlCqInterruptModeration on a live CQ.
    let cqd = table!(cq.ptr);
    let req = Arc::new(common::ndk::RequestCtx::default());
    // SAFETY: live CQ; the context outlives the call.
    let st = unsafe { (cqd.NdkResizeCq)(cq.ptr, 32, on_request, Arc::as_ptr(&req) as PVOID) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: live CQ.
    let st = unsafe { (cqd.NdkControlCqInterruptModeration)(cq.ptr, 20, u32::MAX) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: live CQ.
    let st = unsafe { (cqd.NdkControlCqInterruptModeration)(cq.ptr, 0, 0) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    c.settle();
    assert_eq!(req.calls(), 0, "no RequestCompletion for an inline failure");

    // NdkBind, on an unconnected and on a connected QP, produces no completion.
    let qa = pd.create_qp(&cq, &cq, QpSpec::new(0xA)).expect("QP a");
    let qb = pd_b
        .create_qp(&cq_b, &cq_b, QpSpec::new(0xB))
        .expect("QP b");
    let mr = Registered::new(
        c.host(0),
        &pd,
        1,
        0x4000_0000,
        NDK_MR_FLAG_ALLOW_LOCAL_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_WRITE,
    );
    let qpd = table!(qa.ptr);
    let bind = |q: &common::ndk::Qp| {
        // SAFETY: live QP and MR; the MW pointer is never dereferenced (no MW can exist).
        unsafe {
            (qpd.NdkBind)(
                q.ptr,
                0xB1 as PVOID,
                mr.mr.ptr,
                null_mut(),
                mr.mem.va as PVOID,
                4096,
                NDK_OP_FLAG_ALLOW_REMOTE_WRITE,
            )
        }
    };
    assert_eq!(bind(&qa), STATUS_NOT_SUPPORTED, "unconnected");
    c.connect(&qa, &qb);
    assert_eq!(bind(&qa), STATUS_NOT_SUPPORTED, "connected");
    c.settle();
    assert!(
        cq.results(4).is_empty(),
        "an inline failure completes nothing"
    );

    let m = mr.close();
    qa.close();
    qb.close();
    cq.close();
    cq_b.close();
    pd.close();
    pd_b.close();
    drop(m);
    c.finish();
}

#[test]
fn query_extension_is_not_supported_on_every_object_type() {
    let c = Cluster::new(Mode::Deterministic, 1);
    let a = c.adapter(0);
    let pd = a.create_pd().expect("PD");
    let cq = a.create_cq(16, None).expect("CQ");
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(0xC)).expect("QP");
    let srq = pd.create_srq(8, 1, 0).expect("SRQ");
    let mr = pd.create_mr(false).expect("MR");

    let ad = table!(a.ptr);
    assert_eq!(
        query_extension(ad.NdkQueryExtension, a.ptr.cast()),
        STATUS_NOT_SUPPORTED
    );
    let pdd = table!(pd.ptr);
    assert_eq!(
        query_extension(pdd.NdkQueryExtension, pd.ptr.cast()),
        STATUS_NOT_SUPPORTED
    );
    let cqd = table!(cq.ptr);
    assert_eq!(
        query_extension(cqd.NdkQueryExtension, cq.ptr.cast()),
        STATUS_NOT_SUPPORTED
    );
    let qpd = table!(qp.ptr);
    assert_eq!(
        query_extension(qpd.NdkQueryExtension, qp.ptr.cast()),
        STATUS_NOT_SUPPORTED
    );
    let srqd = table!(srq.ptr);
    assert_eq!(
        query_extension(srqd.NdkQueryExtension, srq.ptr.cast()),
        STATUS_NOT_SUPPORTED
    );
    let mrd = table!(mr.ptr);
    assert_eq!(
        query_extension(mrd.NdkQueryExtension, mr.ptr.cast()),
        STATUS_NOT_SUPPORTED
    );
    // MW, connector, listener and shared endpoint cannot be created: their tables' slots
    // are reached directly (the slot dereferences nothing).
    let mwd = &pvrdma_ndk::ndk::dispatch::MW_DISPATCH;
    for slot in [
        mwd.NdkQueryExtension,
        CONNECTOR_DISPATCH.NdkQueryExtension,
        LISTENER_DISPATCH.NdkQueryExtension,
        SHARED_ENDPOINT_DISPATCH.NdkQueryExtension,
    ] {
        assert_eq!(query_extension(slot, null_mut()), STATUS_NOT_SUPPORTED);
    }

    mr.close();
    qp.close();
    srq.close();
    cq.close();
    pd.close();
    c.finish();
}

#[test]
fn connection_objects_are_not_implemented_yet() {
    // A device whose connection engine was never started (no address resolver) is what
    // answers STATUS_NOT_IMPLEMENTED.
    let c = Cluster::with(ClusterConfig::without_cm(Mode::Deterministic, 1));
    let a = c.adapter(0);
    let ad = table!(a.ptr);
    let ctx = Arc::new(CreateCtx::default());
    let cp = Arc::as_ptr(&ctx) as PVOID;
    let addr = SOCKADDR_IN {
        sin_family: 2,
        sin_port: 445u16.to_be(),
        sin_addr: IN_ADDR {
            S_un_b: [10, 0, 0, 1],
        },
        sin_zero: [0; 8],
    };
    let sa = (&raw const addr).cast::<SOCKADDR>();
    let len = size_of::<SOCKADDR_IN>() as u32;

    let mut conn: *mut NDK_CONNECTOR = null_mut();
    // SAFETY: live adapter; the context outlives the call; the out pointer is valid.
    let st = unsafe { (ad.NdkCreateConnector)(a.ptr, on_create, cp, &mut conn) };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    assert!(conn.is_null());
    let mut lis: *mut NDK_LISTENER = null_mut();
    // SAFETY: as above.
    let st =
        unsafe { (ad.NdkCreateListener)(a.ptr, on_connect_event, cp, on_create, cp, &mut lis) };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    assert!(lis.is_null());
    let mut se: *mut NDK_SHARED_ENDPOINT = null_mut();
    // SAFETY: as above; the address outlives the call.
    let st = unsafe { (ad.NdkCreateSharedEndpoint)(a.ptr, sa, len, on_create, cp, &mut se) };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    assert!(se.is_null());
    c.settle();
    assert_eq!(ctx.calls(), 0, "inline failures complete nothing");

    // Every connector, listener and shared-endpoint slot but close and QueryExtension with
    // a null object (no such object can exist here).
    let cd = &CONNECTOR_DISPATCH;
    let rp = ctx.as_ref() as *const CreateCtx as PVOID;
    let mut sz = 64u32;
    let mut buf = [0u8; 64];
    let out = buf.as_mut_ptr().cast::<SOCKADDR>();
    let (mut ird, mut ord) = (0u32, 0u32);
    // Every slot refuses a null object before it dereferences anything; every other pointer
    // is valid for its size.
    // SAFETY: see above.
    let st = unsafe {
        (cd.NdkConnect)(
            null_mut(),
            null_mut(),
            sa,
            len,
            sa,
            len,
            1,
            1,
            null_mut(),
            0,
            on_request,
            rp,
        )
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe {
        (cd.NdkConnectWithSharedEndpoint)(
            null_mut(),
            null_mut(),
            null_mut(),
            sa,
            len,
            1,
            1,
            null_mut(),
            0,
            on_request,
            rp,
        )
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (cd.NdkCompleteConnect)(null_mut(), None, rp, on_request, rp) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe {
        (cd.NdkAccept)(
            null_mut(),
            null_mut(),
            1,
            1,
            null_mut(),
            0,
            None,
            rp,
            on_request,
            rp,
        )
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (cd.NdkReject)(null_mut(), null_mut(), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st =
        unsafe { (cd.NdkGetConnectionData)(null_mut(), &mut ird, &mut ord, null_mut(), &mut sz) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (cd.NdkGetLocalAddress)(null_mut(), out, &mut sz) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (cd.NdkGetPeerAddress)(null_mut(), out, &mut sz) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (cd.NdkDisconnect)(null_mut(), on_request, rp) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (cd.NdkCompleteConnectEx)(null_mut(), None, rp, on_request, rp) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe {
        (cd.NdkAcceptEx)(
            null_mut(),
            null_mut(),
            1,
            1,
            null_mut(),
            0,
            None,
            rp,
            on_request,
            rp,
        )
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (LISTENER_DISPATCH.NdkListen)(null_mut(), sa, len, on_request, rp) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (LISTENER_DISPATCH.NdkGetLocalAddress)(null_mut(), out, &mut sz) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: see above.
    let st = unsafe { (SHARED_ENDPOINT_DISPATCH.NdkGetLocalAddress)(null_mut(), out, &mut sz) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    assert_eq!((sz, ird, ord), (64, 0, 0), "nothing written back");
    assert_eq!(buf, [0; 64]);
    assert_eq!(ctx.calls(), 0);
    c.finish();
}
