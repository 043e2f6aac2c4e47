//! Calls every slot of the ten NDKPI dispatch tables the way a C consumer compiled against
//! ndkpi.h does: it reads `Dispatch` from the object, loads the function pointer at the
//! slot's byte offset from ndkpi.md §2, and calls it with the reference signature. Each slot
//! holds a recorder written from the reference's parameter list; it stores what it received
//! and returns a distinct value. Distinct sentinels per parameter (pointers 0x1001.., ULONGs
//! 0xA1.., BOOLEAN 1, NDK_VERSION {7, 9}, SIZE_T/UINT64 above 32 bits) show that arity,
//! order, width and by-value passing agree between the typedefs and the reference, which
//! the offset asserts cannot show.

use core::ffi::c_void;
use std::cell::RefCell;

use pvrdma_ndk::ndkpi::*;

// ---------------------------------------------------------------- recording

#[derive(Debug, PartialEq, Eq)]
struct Call {
    name: &'static str,
    args: Vec<u64>,
}

thread_local! {
    static LOG: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
}

fn record(name: &'static str, args: &[u64]) {
    LOG.with(|l| {
        l.borrow_mut().push(Call {
            name,
            args: args.to_vec(),
        })
    });
}

fn take() -> Vec<Call> {
    LOG.with(|l| core::mem::take(&mut *l.borrow_mut()))
}

fn call(name: &'static str, args: &[u64]) -> Vec<Call> {
    vec![Call {
        name,
        args: args.to_vec(),
    }]
}

/// The value a parameter is recorded as.
trait Arg {
    fn v(self) -> u64;
}
impl<T> Arg for *mut T {
    fn v(self) -> u64 {
        self as usize as u64
    }
}
impl<T> Arg for *const T {
    fn v(self) -> u64 {
        self as usize as u64
    }
}
impl Arg for u8 {
    fn v(self) -> u64 {
        u64::from(self)
    }
}
impl Arg for u32 {
    fn v(self) -> u64 {
        u64::from(self)
    }
}
impl Arg for i32 {
    fn v(self) -> u64 {
        u64::from(self as u32)
    }
}
impl Arg for u64 {
    fn v(self) -> u64 {
        self
    }
}
impl Arg for usize {
    fn v(self) -> u64 {
        self as u64
    }
}
impl Arg for NDK_VERSION {
    fn v(self) -> u64 {
        (u64::from(self.Major) << 16) | u64::from(self.Minor)
    }
}
impl<A, R> Arg for unsafe extern "system" fn(A) -> R {
    fn v(self) -> u64 {
        self as usize as u64
    }
}
impl<A, B, R> Arg for unsafe extern "system" fn(A, B) -> R {
    fn v(self) -> u64 {
        self as usize as u64
    }
}
impl<A, B, C, R> Arg for unsafe extern "system" fn(A, B, C) -> R {
    fn v(self) -> u64 {
        self as usize as u64
    }
}
impl<T: Arg> Arg for Option<T> {
    fn v(self) -> u64 {
        self.map_or(0, Arg::v)
    }
}

macro_rules! rec {
    ($name:literal; $($a:expr),* $(,)?) => {
        record($name, &[$(Arg::v($a)),*])
    };
}

fn p<T>(addr: usize) -> *mut T {
    core::ptr::without_provenance_mut(addr)
}

fn cp<T>(addr: usize) -> *const T {
    core::ptr::without_provenance(addr)
}

const VERSION_7_9: NDK_VERSION = NDK_VERSION { Major: 7, Minor: 9 };
const BIG_SIZE: usize = 0x0000_0012_3456_789A;
const BIG_SIZE2: usize = 0x0000_0034_5678_9ABC;

/// Loads the function pointer at byte `offset` of a dispatch table, as compiled C does.
///
/// # Safety
/// `table` points to a live dispatch table whose slot at `offset` has type `F`.
unsafe fn slot<F: Copy>(table: *const c_void, offset: usize) -> F {
    assert_eq!(core::mem::size_of::<F>(), core::mem::size_of::<usize>());
    // SAFETY: the caller guarantees `offset` is inside the table.
    let at = unsafe { table.cast::<u8>().add(offset) };
    // SAFETY: the caller guarantees an `F` is stored there; tables are pointer-aligned.
    unsafe { at.cast::<F>().read() }
}

/// Calls slot `$off` of `$table` with fn type `$ty`.
macro_rules! call_slot {
    ($table:expr, $ty:ty, $off:expr, ($($arg:expr),* $(,)?)) => {{
        // SAFETY: every table in this file is a `static` of the matching NDK_*_DISPATCH type,
        // whose slot offsets are asserted in the crate.
        let f: $ty = unsafe { slot::<$ty>($table, $off) };
        // SAFETY: the slot holds a recorder of this file of type `$ty`; recorders only store
        // their arguments and never dereference them.
        unsafe { f($($arg),*) }
    }};
}

fn header(t: NDK_OBJECT_TYPE) -> NDK_OBJECT_HEADER {
    NDK_OBJECT_HEADER {
        Version: NDK_VERSION { Major: 2, Minor: 1 },
        ObjectType: t,
        NdkReserved: NDK_OBJECT_HEADER_RESERVED_BLOCK::ZERO,
    }
}

// ---------------------------------------------------------------- consumer callbacks

unsafe extern "system" fn cb_close(context: PVOID) {
    rec!("CloseCompletion"; context);
}
unsafe extern "system" fn cb_create(
    context: PVOID,
    status: NTSTATUS,
    object: *mut NDK_OBJECT_HEADER,
) {
    rec!("CreateCompletion"; context, status, object);
}
unsafe extern "system" fn cb_request(context: PVOID, status: NTSTATUS) {
    rec!("RequestCompletion"; context, status);
}
unsafe extern "system" fn cb_cq_notify(context: PVOID, status: NTSTATUS) {
    rec!("CqNotification"; context, status);
}
unsafe extern "system" fn cb_srq_notify(context: PVOID, status: NTSTATUS) {
    rec!("SrqNotification"; context, status);
}
unsafe extern "system" fn cb_connect_event(context: PVOID, connector: *mut NDK_CONNECTOR) {
    rec!("ConnectEvent"; context, connector);
}
unsafe extern "system" fn cb_disconnect(context: PVOID) {
    rec!("DisconnectEvent"; context);
}
unsafe extern "system" fn cb_disconnect_ex(context: PVOID, reason: ULONG) {
    rec!("DisconnectEventEx"; context, reason);
}

const CB_CLOSE: NDK_FN_CLOSE_COMPLETION = cb_close;
const CB_CREATE: NDK_FN_CREATE_COMPLETION = cb_create;
const CB_REQUEST: NDK_FN_REQUEST_COMPLETION = cb_request;
const CB_CQ_NOTIFY: NDK_FN_CQ_NOTIFICATION_CALLBACK = cb_cq_notify;
const CB_SRQ_NOTIFY: NDK_FN_SRQ_NOTIFICATION_CALLBACK = cb_srq_notify;
const CB_CONNECT_EVENT: NDK_FN_CONNECT_EVENT_CALLBACK = cb_connect_event;
const CB_DISCONNECT: NDK_FN_DISCONNECT_EVENT_CALLBACK = cb_disconnect;
const CB_DISCONNECT_EX: NDK_FN_DISCONNECT_EVENT_CALLBACK_EX = cb_disconnect_ex;

// ---------------------------------------------------------------- close / query extension

macro_rules! close_recorder {
    ($f:ident = $name:literal -> $ret:expr) => {
        unsafe extern "system" fn $f(
            object: *mut NDK_OBJECT_HEADER,
            close_completion: NDK_FN_CLOSE_COMPLETION,
            request_context: PVOID,
        ) -> NTSTATUS {
            rec!($name; object, close_completion, request_context);
            $ret
        }
    };
}

macro_rules! query_extension_recorder {
    ($f:ident = $name:literal -> $ret:expr) => {
        unsafe extern "system" fn $f(
            object: *mut NDK_OBJECT_HEADER,
            id: *const GUID,
            version: NDK_VERSION,
            out: *mut NDK_EXTENSION_INTERFACE,
        ) -> NTSTATUS {
            rec!($name; object, id, version, out);
            $ret
        }
    };
}

fn check_close(
    table: *const c_void,
    object: *mut NDK_OBJECT_HEADER,
    name: &'static str,
    ret: NTSTATUS,
) {
    let r = call_slot!(
        table,
        NDK_FN_CLOSE_OBJECT,
        0x00,
        (object, CB_CLOSE, p(0x1001))
    );
    assert_eq!(r, ret);
    assert_eq!(take(), call(name, &[object.v(), CB_CLOSE.v(), 0x1001]));
}

fn check_query_extension(
    table: *const c_void,
    offset: usize,
    object: *mut NDK_OBJECT_HEADER,
    name: &'static str,
    ret: NTSTATUS,
) {
    let guid = GUID {
        Data1: 0x1234_5678,
        Data2: 0x9ABC,
        Data3: 0xDEF0,
        Data4: *b"ndkguid!",
    };
    let r = call_slot!(
        table,
        NDK_FN_QUERY_EXTENSION_INTERFACE,
        offset,
        (object, &guid, VERSION_7_9, p(0x1002))
    );
    assert_eq!(r, ret);
    let guid_ptr: *const GUID = &guid;
    assert_eq!(
        take(),
        call(name, &[object.v(), guid_ptr.v(), 0x0007_0009, 0x1002])
    );
}

// ---------------------------------------------------------------- adapter

query_extension_recorder!(adapter_query_extension = "Adapter.NdkQueryExtension" -> STATUS_NOT_SUPPORTED);
unsafe extern "system" fn adapter_query_info(
    adapter: *mut NDK_ADAPTER,
    info: *mut NDK_ADAPTER_INFO,
    size: *mut ULONG,
) -> NTSTATUS {
    rec!("Adapter.NdkQueryAdapterInfo"; adapter, info, size);
    STATUS_BUFFER_TOO_SMALL
}
unsafe extern "system" fn adapter_create_cq(
    adapter: *mut NDK_ADAPTER,
    depth: ULONG,
    notification: NDK_FN_CQ_NOTIFICATION_CALLBACK,
    notification_context: PVOID,
    affinity: *mut GROUP_AFFINITY,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_CQ,
) -> NTSTATUS {
    rec!("Adapter.NdkCreateCq"; adapter, depth, notification, notification_context, affinity,
        create_completion, request_context, out);
    0x0103
}
unsafe extern "system" fn adapter_create_pd(
    adapter: *mut NDK_ADAPTER,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_PD,
) -> NTSTATUS {
    rec!("Adapter.NdkCreatePd"; adapter, create_completion, request_context, out);
    0x0104
}
unsafe extern "system" fn adapter_create_shared_endpoint(
    adapter: *mut NDK_ADAPTER,
    address: *const SOCKADDR,
    address_length: ULONG,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_SHARED_ENDPOINT,
) -> NTSTATUS {
    rec!("Adapter.NdkCreateSharedEndpoint"; adapter, address, address_length, create_completion,
        request_context, out);
    0x0105
}
unsafe extern "system" fn adapter_create_connector(
    adapter: *mut NDK_ADAPTER,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_CONNECTOR,
) -> NTSTATUS {
    rec!("Adapter.NdkCreateConnector"; adapter, create_completion, request_context, out);
    0x0106
}
unsafe extern "system" fn adapter_create_listener(
    adapter: *mut NDK_ADAPTER,
    connect_event: NDK_FN_CONNECT_EVENT_CALLBACK,
    connect_event_context: PVOID,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_LISTENER,
) -> NTSTATUS {
    rec!("Adapter.NdkCreateListener"; adapter, connect_event, connect_event_context,
        create_completion, request_context, out);
    0x0107
}
unsafe extern "system" fn adapter_build_lam(
    adapter: *mut NDK_ADAPTER,
    mdl: *mut MDL,
    length: SIZE_T,
    request_completion: Option<NDK_FN_REQUEST_COMPLETION>,
    request_context: PVOID,
    lam: *mut NDK_LOGICAL_ADDRESS_MAPPING,
    lam_size: *mut ULONG,
    fbo: *mut ULONG,
) -> NTSTATUS {
    rec!("Adapter.NdkBuildLAM"; adapter, mdl, length, request_completion, request_context, lam,
        lam_size, fbo);
    STATUS_PENDING
}
unsafe extern "system" fn adapter_release_lam(
    adapter: *mut NDK_ADAPTER,
    lam: *mut NDK_LOGICAL_ADDRESS_MAPPING,
) {
    rec!("Adapter.NdkReleaseLAM"; adapter, lam);
}

static ADAPTER_DISPATCH: NDK_ADAPTER_DISPATCH = NDK_ADAPTER_DISPATCH {
    NdkQueryExtension: adapter_query_extension,
    NdkQueryAdapterInfo: adapter_query_info,
    NdkCreateCq: adapter_create_cq,
    NdkCreatePd: adapter_create_pd,
    NdkCreateSharedEndpoint: adapter_create_shared_endpoint,
    NdkCreateConnector: adapter_create_connector,
    NdkCreateListener: adapter_create_listener,
    NdkBuildLAM: adapter_build_lam,
    NdkReleaseLAM: adapter_release_lam,
};

#[test]
fn adapter_dispatch_passes_every_argument_in_order() {
    let mut adapter = NDK_ADAPTER {
        Header: header(NdkObjectTypeAdapter),
        Dispatch: &ADAPTER_DISPATCH,
    };
    let obj: *mut NDK_ADAPTER = &mut adapter;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    // The adapter table has no close slot; NdkQueryExtension is slot 0.
    check_query_extension(
        t,
        0x00,
        obj.cast(),
        "Adapter.NdkQueryExtension",
        STATUS_NOT_SUPPORTED,
    );

    let r = call_slot!(
        t,
        NDK_FN_QUERY_ADAPTER_INFO,
        0x08,
        (obj, p(0x1101), p(0x1102))
    );
    assert_eq!(r, STATUS_BUFFER_TOO_SMALL);
    assert_eq!(
        take(),
        call("Adapter.NdkQueryAdapterInfo", &[obj.v(), 0x1101, 0x1102])
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_CQ,
        0x10,
        (
            obj,
            0xA1,
            CB_CQ_NOTIFY,
            p(0x1103),
            p(0x1104),
            CB_CREATE,
            p(0x1105),
            p(0x1106)
        )
    );
    assert_eq!(r, 0x0103);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkCreateCq",
            &[
                obj.v(),
                0xA1,
                CB_CQ_NOTIFY.v(),
                0x1103,
                0x1104,
                CB_CREATE.v(),
                0x1105,
                0x1106
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_PD,
        0x18,
        (obj, CB_CREATE, p(0x1107), p(0x1108))
    );
    assert_eq!(r, 0x0104);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkCreatePd",
            &[obj.v(), CB_CREATE.v(), 0x1107, 0x1108]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_SHARED_ENDPOINT,
        0x20,
        (obj, cp(0x1109), 0xA2, CB_CREATE, p(0x110A), p(0x110B))
    );
    assert_eq!(r, 0x0105);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkCreateSharedEndpoint",
            &[obj.v(), 0x1109, 0xA2, CB_CREATE.v(), 0x110A, 0x110B]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_CONNECTOR,
        0x28,
        (obj, CB_CREATE, p(0x110C), p(0x110D))
    );
    assert_eq!(r, 0x0106);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkCreateConnector",
            &[obj.v(), CB_CREATE.v(), 0x110C, 0x110D]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_LISTENER,
        0x30,
        (
            obj,
            CB_CONNECT_EVENT,
            p(0x110E),
            CB_CREATE,
            p(0x110F),
            p(0x1110)
        )
    );
    assert_eq!(r, 0x0107);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkCreateListener",
            &[
                obj.v(),
                CB_CONNECT_EVENT.v(),
                0x110E,
                CB_CREATE.v(),
                0x110F,
                0x1110
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_BUILD_LAM,
        0x38,
        (
            obj,
            p(0x1111),
            BIG_SIZE,
            Some(CB_REQUEST),
            p(0x1112),
            p(0x1113),
            p(0x1114),
            p(0x1115)
        )
    );
    assert_eq!(r, STATUS_PENDING);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkBuildLAM",
            &[
                obj.v(),
                0x1111,
                BIG_SIZE as u64,
                CB_REQUEST.v(),
                0x1112,
                0x1113,
                0x1114,
                0x1115
            ]
        )
    );
    // A null completion (the header's _In_opt_) arrives as None.
    let r = call_slot!(
        t,
        NDK_FN_BUILD_LAM,
        0x38,
        (
            obj,
            p(0x1111),
            BIG_SIZE,
            None,
            p(0x1112),
            p(0x1113),
            p(0x1114),
            p(0x1115)
        )
    );
    assert_eq!(r, STATUS_PENDING);
    assert_eq!(
        take(),
        call(
            "Adapter.NdkBuildLAM",
            &[
                obj.v(),
                0x1111,
                BIG_SIZE as u64,
                0,
                0x1112,
                0x1113,
                0x1114,
                0x1115
            ]
        )
    );

    call_slot!(t, NDK_FN_RELEASE_LAM, 0x40, (obj, p(0x1116)));
    assert_eq!(take(), call("Adapter.NdkReleaseLAM", &[obj.v(), 0x1116]));
}

// ---------------------------------------------------------------- PD

close_recorder!(pd_close = "Pd.NdkClosePd" -> 0x0201);
query_extension_recorder!(pd_query_extension = "Pd.NdkQueryExtension" -> 0x0202);
unsafe extern "system" fn pd_create_mr(
    pd: *mut NDK_PD,
    fast_register: BOOLEAN,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_MR,
) -> NTSTATUS {
    rec!("Pd.NdkCreateMr"; pd, fast_register, create_completion, request_context, out);
    0x0203
}
unsafe extern "system" fn pd_create_mw(
    pd: *mut NDK_PD,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_MW,
) -> NTSTATUS {
    rec!("Pd.NdkCreateMw"; pd, create_completion, request_context, out);
    0x0204
}
unsafe extern "system" fn pd_create_srq(
    pd: *mut NDK_PD,
    depth: ULONG,
    max_receive_request_sge: ULONG,
    notify_threshold: ULONG,
    notification: Option<NDK_FN_SRQ_NOTIFICATION_CALLBACK>,
    notification_context: PVOID,
    affinity: *mut GROUP_AFFINITY,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_SRQ,
) -> NTSTATUS {
    rec!("Pd.NdkCreateSrq"; pd, depth, max_receive_request_sge, notify_threshold, notification,
        notification_context, affinity, create_completion, request_context, out);
    0x0205
}
unsafe extern "system" fn pd_create_qp(
    pd: *mut NDK_PD,
    receive_cq: *mut NDK_CQ,
    initiator_cq: *mut NDK_CQ,
    qp_context: PVOID,
    receive_queue_depth: ULONG,
    initiator_queue_depth: ULONG,
    max_receive_request_sge: ULONG,
    max_initiator_request_sge: ULONG,
    inline_data_size: ULONG,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_QP,
) -> NTSTATUS {
    rec!("Pd.NdkCreateQp"; pd, receive_cq, initiator_cq, qp_context, receive_queue_depth,
        initiator_queue_depth, max_receive_request_sge, max_initiator_request_sge,
        inline_data_size, create_completion, request_context, out);
    0x0206
}
unsafe extern "system" fn pd_create_qp_with_srq(
    pd: *mut NDK_PD,
    receive_cq: *mut NDK_CQ,
    initiator_cq: *mut NDK_CQ,
    srq: *mut NDK_SRQ,
    qp_context: PVOID,
    initiator_queue_depth: ULONG,
    max_initiator_request_sge: ULONG,
    inline_data_size: ULONG,
    create_completion: NDK_FN_CREATE_COMPLETION,
    request_context: PVOID,
    out: *mut *mut NDK_QP,
) -> NTSTATUS {
    rec!("Pd.NdkCreateQpWithSrq"; pd, receive_cq, initiator_cq, srq, qp_context,
        initiator_queue_depth, max_initiator_request_sge, inline_data_size, create_completion,
        request_context, out);
    0x0207
}
unsafe extern "system" fn pd_get_privileged_token(pd: *mut NDK_PD, token: *mut UINT32) {
    rec!("Pd.NdkGetPrivilegedMemoryRegionToken"; pd, token);
}

static PD_DISPATCH: NDK_PD_DISPATCH = NDK_PD_DISPATCH {
    NdkClosePd: pd_close,
    NdkQueryExtension: pd_query_extension,
    NdkCreateMr: pd_create_mr,
    NdkCreateMw: pd_create_mw,
    NdkCreateSrq: pd_create_srq,
    NdkCreateQp: pd_create_qp,
    NdkCreateQpWithSrq: pd_create_qp_with_srq,
    NdkGetPrivilegedMemoryRegionToken: pd_get_privileged_token,
};

#[test]
fn pd_dispatch_passes_every_argument_in_order() {
    let mut pd = NDK_PD {
        Header: header(NdkObjectTypePd),
        Dispatch: &PD_DISPATCH,
    };
    let obj: *mut NDK_PD = &mut pd;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Pd.NdkClosePd", 0x0201);
    check_query_extension(t, 0x08, obj.cast(), "Pd.NdkQueryExtension", 0x0202);

    let r = call_slot!(
        t,
        NDK_FN_CREATE_MR,
        0x10,
        (obj, 1, CB_CREATE, p(0x1201), p(0x1202))
    );
    assert_eq!(r, 0x0203);
    assert_eq!(
        take(),
        call(
            "Pd.NdkCreateMr",
            &[obj.v(), 1, CB_CREATE.v(), 0x1201, 0x1202]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_MW,
        0x18,
        (obj, CB_CREATE, p(0x1203), p(0x1204))
    );
    assert_eq!(r, 0x0204);
    assert_eq!(
        take(),
        call("Pd.NdkCreateMw", &[obj.v(), CB_CREATE.v(), 0x1203, 0x1204])
    );

    for notification in [Some(CB_SRQ_NOTIFY), None] {
        let r = call_slot!(
            t,
            NDK_FN_CREATE_SRQ,
            0x20,
            (
                obj,
                0xA1,
                0xA2,
                0xA3,
                notification,
                p(0x1205),
                p(0x1206),
                CB_CREATE,
                p(0x1207),
                p(0x1208)
            )
        );
        assert_eq!(r, 0x0205);
        assert_eq!(
            take(),
            call(
                "Pd.NdkCreateSrq",
                &[
                    obj.v(),
                    0xA1,
                    0xA2,
                    0xA3,
                    notification.v(),
                    0x1205,
                    0x1206,
                    CB_CREATE.v(),
                    0x1207,
                    0x1208
                ]
            )
        );
    }

    let r = call_slot!(
        t,
        NDK_FN_CREATE_QP,
        0x28,
        (
            obj,
            p(0x1209),
            p(0x120A),
            p(0x120B),
            0xA4,
            0xA5,
            0xA6,
            0xA7,
            0xA8,
            CB_CREATE,
            p(0x120C),
            p(0x120D)
        )
    );
    assert_eq!(r, 0x0206);
    assert_eq!(
        take(),
        call(
            "Pd.NdkCreateQp",
            &[
                obj.v(),
                0x1209,
                0x120A,
                0x120B,
                0xA4,
                0xA5,
                0xA6,
                0xA7,
                0xA8,
                CB_CREATE.v(),
                0x120C,
                0x120D
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CREATE_QP_WITH_SRQ,
        0x30,
        (
            obj,
            p(0x120E),
            p(0x120F),
            p(0x1210),
            p(0x1211),
            0xA9,
            0xAA,
            0xAB,
            CB_CREATE,
            p(0x1212),
            p(0x1213)
        )
    );
    assert_eq!(r, 0x0207);
    assert_eq!(
        take(),
        call(
            "Pd.NdkCreateQpWithSrq",
            &[
                obj.v(),
                0x120E,
                0x120F,
                0x1210,
                0x1211,
                0xA9,
                0xAA,
                0xAB,
                CB_CREATE.v(),
                0x1212,
                0x1213
            ]
        )
    );

    call_slot!(
        t,
        NDK_FN_GET_PRIVILEGED_MEMORY_REGION_TOKEN,
        0x38,
        (obj, p(0x1214))
    );
    assert_eq!(
        take(),
        call("Pd.NdkGetPrivilegedMemoryRegionToken", &[obj.v(), 0x1214])
    );
}

// ---------------------------------------------------------------- CQ

close_recorder!(cq_close = "Cq.NdkCloseCq" -> 0x0301);
query_extension_recorder!(cq_query_extension = "Cq.NdkQueryExtension" -> 0x0302);
unsafe extern "system" fn cq_resize(
    cq: *mut NDK_CQ,
    depth: ULONG,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Cq.NdkResizeCq"; cq, depth, request_completion, request_context);
    STATUS_INVALID_PARAMETER
}
unsafe extern "system" fn cq_arm(cq: *mut NDK_CQ, notify_type: ULONG) {
    rec!("Cq.NdkArmCq"; cq, notify_type);
}
unsafe extern "system" fn cq_get_results(
    cq: *mut NDK_CQ,
    results: *mut NDK_RESULT,
    n_results: ULONG,
) -> ULONG {
    rec!("Cq.NdkGetCqResults"; cq, results, n_results);
    0xB1
}
unsafe extern "system" fn cq_control_moderation(
    cq: *mut NDK_CQ,
    interval: ULONG,
    count: ULONG,
) -> NTSTATUS {
    rec!("Cq.NdkControlCqInterruptModeration"; cq, interval, count);
    0x0305
}
unsafe extern "system" fn cq_get_results_ex(
    cq: *mut NDK_CQ,
    results: *mut NDK_RESULT_EX,
    n_results: ULONG,
) -> ULONG {
    rec!("Cq.NdkGetCqResultsEx"; cq, results, n_results);
    0xB2
}

static CQ_DISPATCH: NDK_CQ_DISPATCH = NDK_CQ_DISPATCH {
    NdkCloseCq: cq_close,
    NdkQueryExtension: cq_query_extension,
    NdkResizeCq: cq_resize,
    NdkArmCq: cq_arm,
    NdkGetCqResults: cq_get_results,
    NdkControlCqInterruptModeration: cq_control_moderation,
    NdkGetCqResultsEx: cq_get_results_ex,
};

#[test]
fn cq_dispatch_passes_every_argument_in_order() {
    let mut cq = NDK_CQ {
        Header: header(NdkObjectTypeCq),
        Dispatch: &CQ_DISPATCH,
    };
    let obj: *mut NDK_CQ = &mut cq;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Cq.NdkCloseCq", 0x0301);
    check_query_extension(t, 0x08, obj.cast(), "Cq.NdkQueryExtension", 0x0302);

    let r = call_slot!(
        t,
        NDK_FN_RESIZE_CQ,
        0x10,
        (obj, 0xA1, CB_REQUEST, p(0x1301))
    );
    assert_eq!(r, STATUS_INVALID_PARAMETER);
    assert_eq!(
        take(),
        call("Cq.NdkResizeCq", &[obj.v(), 0xA1, CB_REQUEST.v(), 0x1301])
    );

    call_slot!(t, NDK_FN_ARM_CQ, 0x18, (obj, NDK_CQ_NOTIFY_SOLICITED));
    assert_eq!(take(), call("Cq.NdkArmCq", &[obj.v(), 2]));

    let r = call_slot!(t, NDK_FN_GET_CQ_RESULTS, 0x20, (obj, p(0x1302), 0xA2));
    assert_eq!(r, 0xB1);
    assert_eq!(take(), call("Cq.NdkGetCqResults", &[obj.v(), 0x1302, 0xA2]));

    let r = call_slot!(
        t,
        NDK_FN_CONTROL_CQ_INTERRUPT_MODERATION,
        0x28,
        (obj, 0xA3, u32::MAX)
    );
    assert_eq!(r, 0x0305);
    assert_eq!(
        take(),
        call(
            "Cq.NdkControlCqInterruptModeration",
            &[obj.v(), 0xA3, 0xFFFF_FFFF]
        )
    );

    let r = call_slot!(t, NDK_FN_GET_CQ_RESULTS_EX, 0x30, (obj, p(0x1303), 0xA4));
    assert_eq!(r, 0xB2);
    assert_eq!(
        take(),
        call("Cq.NdkGetCqResultsEx", &[obj.v(), 0x1303, 0xA4])
    );
}

// ---------------------------------------------------------------- MR

close_recorder!(mr_close = "Mr.NdkCloseMr" -> 0x0401);
query_extension_recorder!(mr_query_extension = "Mr.NdkQueryExtension" -> 0x0402);
unsafe extern "system" fn mr_register(
    mr: *mut NDK_MR,
    mdl: *mut MDL,
    length: SIZE_T,
    flags: ULONG,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Mr.NdkRegisterMr"; mr, mdl, length, flags, request_completion, request_context);
    0x0403
}
unsafe extern "system" fn mr_deregister(
    mr: *mut NDK_MR,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Mr.NdkDeregisterMr"; mr, request_completion, request_context);
    STATUS_DEVICE_BUSY
}
unsafe extern "system" fn mr_initialize_fast_register(
    mr: *mut NDK_MR,
    adapter_page_count: ULONG,
    remote_access: BOOLEAN,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Mr.NdkInitializeFastRegisterMr"; mr, adapter_page_count, remote_access,
        request_completion, request_context);
    0x0405
}
unsafe extern "system" fn mr_get_remote_token(mr: *mut NDK_MR) -> UINT32 {
    rec!("Mr.NdkGetRemoteTokenFromMr"; mr);
    0xDEAD_BEEF
}
unsafe extern "system" fn mr_get_local_token(mr: *mut NDK_MR) -> UINT32 {
    rec!("Mr.NdkGetLocalTokenFromMr"; mr);
    0xFEED_F00D
}

static MR_DISPATCH: NDK_MR_DISPATCH = NDK_MR_DISPATCH {
    NdkCloseMr: mr_close,
    NdkQueryExtension: mr_query_extension,
    NdkRegisterMr: mr_register,
    NdkDeregisterMr: mr_deregister,
    NdkInitializeFastRegisterMr: mr_initialize_fast_register,
    NdkGetRemoteTokenFromMr: mr_get_remote_token,
    NdkGetLocalTokenFromMr: mr_get_local_token,
};

#[test]
fn mr_dispatch_passes_every_argument_in_order() {
    let mut mr = NDK_MR {
        Header: header(NdkObjectTypeMr),
        Dispatch: &MR_DISPATCH,
    };
    let obj: *mut NDK_MR = &mut mr;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Mr.NdkCloseMr", 0x0401);
    check_query_extension(t, 0x08, obj.cast(), "Mr.NdkQueryExtension", 0x0402);

    let r = call_slot!(
        t,
        NDK_FN_REGISTER_MR,
        0x10,
        (
            obj,
            p(0x1401),
            BIG_SIZE,
            NDK_MR_FLAG_ALLOW_REMOTE_WRITE,
            CB_REQUEST,
            p(0x1402)
        )
    );
    assert_eq!(r, 0x0403);
    assert_eq!(
        take(),
        call(
            "Mr.NdkRegisterMr",
            &[
                obj.v(),
                0x1401,
                BIG_SIZE as u64,
                0x5,
                CB_REQUEST.v(),
                0x1402
            ]
        )
    );

    let r = call_slot!(t, NDK_FN_DEREGISTER_MR, 0x18, (obj, CB_REQUEST, p(0x1403)));
    assert_eq!(r, STATUS_DEVICE_BUSY);
    assert_eq!(
        take(),
        call("Mr.NdkDeregisterMr", &[obj.v(), CB_REQUEST.v(), 0x1403])
    );

    let r = call_slot!(
        t,
        NDK_FN_INITIALIZE_FAST_REGISTER_MR,
        0x20,
        (obj, 0xA1, 1, CB_REQUEST, p(0x1404))
    );
    assert_eq!(r, 0x0405);
    assert_eq!(
        take(),
        call(
            "Mr.NdkInitializeFastRegisterMr",
            &[obj.v(), 0xA1, 1, CB_REQUEST.v(), 0x1404]
        )
    );

    let r = call_slot!(t, NDK_FN_GET_REMOTE_TOKEN_FROM_MR, 0x28, (obj));
    assert_eq!(r, 0xDEAD_BEEF);
    assert_eq!(take(), call("Mr.NdkGetRemoteTokenFromMr", &[obj.v()]));

    let r = call_slot!(t, NDK_FN_GET_LOCAL_TOKEN_FROM_MR, 0x30, (obj));
    assert_eq!(r, 0xFEED_F00D);
    assert_eq!(take(), call("Mr.NdkGetLocalTokenFromMr", &[obj.v()]));
}

// ---------------------------------------------------------------- MW

close_recorder!(mw_close = "Mw.NdkCloseMw" -> 0x0501);
query_extension_recorder!(mw_query_extension = "Mw.NdkQueryExtension" -> 0x0502);
unsafe extern "system" fn mw_get_remote_token(mw: *mut NDK_MW) -> UINT32 {
    rec!("Mw.NdkGetRemoteTokenFromMw"; mw);
    0xC0FF_EE01
}

static MW_DISPATCH: NDK_MW_DISPATCH = NDK_MW_DISPATCH {
    NdkCloseMw: mw_close,
    NdkQueryExtension: mw_query_extension,
    NdkGetRemoteTokenFromMw: mw_get_remote_token,
};

#[test]
fn mw_dispatch_passes_every_argument_in_order() {
    let mut mw = NDK_MW {
        Header: header(NdkObjectTypeMw),
        Dispatch: &MW_DISPATCH,
    };
    let obj: *mut NDK_MW = &mut mw;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Mw.NdkCloseMw", 0x0501);
    check_query_extension(t, 0x08, obj.cast(), "Mw.NdkQueryExtension", 0x0502);

    let r = call_slot!(t, NDK_FN_GET_REMOTE_TOKEN_FROM_MW, 0x10, (obj));
    assert_eq!(r, 0xC0FF_EE01);
    assert_eq!(take(), call("Mw.NdkGetRemoteTokenFromMw", &[obj.v()]));
}

// ---------------------------------------------------------------- QP

close_recorder!(qp_close = "Qp.NdkCloseQp" -> 0x0601);
query_extension_recorder!(qp_query_extension = "Qp.NdkQueryExtension" -> 0x0602);
unsafe extern "system" fn qp_flush(qp: *mut NDK_QP) {
    rec!("Qp.NdkFlush"; qp);
}
unsafe extern "system" fn qp_send(
    qp: *mut NDK_QP,
    request_context: PVOID,
    sgl: *const NDK_SGE,
    n_sge: ULONG,
    flags: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkSend"; qp, request_context, sgl, n_sge, flags);
    0x0604
}
unsafe extern "system" fn qp_receive(
    qp: *mut NDK_QP,
    request_context: PVOID,
    sgl: *const NDK_SGE,
    n_sge: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkReceive"; qp, request_context, sgl, n_sge);
    0x0605
}
unsafe extern "system" fn qp_bind(
    qp: *mut NDK_QP,
    request_context: PVOID,
    mr: *mut NDK_MR,
    mw: *mut NDK_MW,
    virtual_address: PVOID,
    length: SIZE_T,
    flags: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkBind"; qp, request_context, mr, mw, virtual_address, length, flags);
    STATUS_ACCESS_VIOLATION
}
unsafe extern "system" fn qp_fast_register(
    qp: *mut NDK_QP,
    request_context: PVOID,
    mr: *mut NDK_MR,
    adapter_page_count: ULONG,
    adapter_page_array: *const NDK_LOGICAL_ADDRESS,
    fbo: ULONG,
    length: SIZE_T,
    base_virtual_address: PVOID,
    flags: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkFastRegister"; qp, request_context, mr, adapter_page_count, adapter_page_array,
        fbo, length, base_virtual_address, flags);
    0x0607
}
unsafe extern "system" fn qp_invalidate(
    qp: *mut NDK_QP,
    request_context: PVOID,
    mr_or_mw: *mut NDK_OBJECT_HEADER,
    flags: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkInvalidate"; qp, request_context, mr_or_mw, flags);
    0x0608
}
unsafe extern "system" fn qp_read(
    qp: *mut NDK_QP,
    request_context: PVOID,
    sgl: *const NDK_SGE,
    n_sge: ULONG,
    remote_address: UINT64,
    remote_token: UINT32,
    flags: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkRead"; qp, request_context, sgl, n_sge, remote_address, remote_token, flags);
    STATUS_REMOTE_RESOURCES
}
unsafe extern "system" fn qp_write(
    qp: *mut NDK_QP,
    request_context: PVOID,
    sgl: *const NDK_SGE,
    n_sge: ULONG,
    remote_address: UINT64,
    remote_token: UINT32,
    flags: ULONG,
) -> NTSTATUS {
    rec!("Qp.NdkWrite"; qp, request_context, sgl, n_sge, remote_address, remote_token, flags);
    STATUS_CONNECTION_INVALID
}
unsafe extern "system" fn qp_send_and_invalidate(
    qp: *mut NDK_QP,
    request_context: PVOID,
    sgl: *const NDK_SGE,
    n_sge: ULONG,
    flags: ULONG,
    remote_token: UINT32,
) -> NTSTATUS {
    rec!("Qp.NdkSendAndInvalidate"; qp, request_context, sgl, n_sge, flags, remote_token);
    0x060B
}

static QP_DISPATCH: NDK_QP_DISPATCH = NDK_QP_DISPATCH {
    NdkCloseQp: qp_close,
    NdkQueryExtension: qp_query_extension,
    NdkFlush: qp_flush,
    NdkSend: qp_send,
    NdkReceive: qp_receive,
    NdkBind: qp_bind,
    NdkFastRegister: qp_fast_register,
    NdkInvalidate: qp_invalidate,
    NdkRead: qp_read,
    NdkWrite: qp_write,
    NdkSendAndInvalidate: qp_send_and_invalidate,
};

#[test]
fn qp_dispatch_passes_every_argument_in_order() {
    let mut qp = NDK_QP {
        Header: header(NdkObjectTypeQp),
        Dispatch: &QP_DISPATCH,
    };
    let obj: *mut NDK_QP = &mut qp;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Qp.NdkCloseQp", 0x0601);
    check_query_extension(t, 0x08, obj.cast(), "Qp.NdkQueryExtension", 0x0602);

    call_slot!(t, NDK_FN_FLUSH, 0x10, (obj));
    assert_eq!(take(), call("Qp.NdkFlush", &[obj.v()]));

    let flags = NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT | NDK_OP_FLAG_DEFER;
    let r = call_slot!(
        t,
        NDK_FN_SEND,
        0x18,
        (obj, p(0x1601), cp(0x1602), 0xA1, flags)
    );
    assert_eq!(r, 0x0604);
    assert_eq!(
        take(),
        call("Qp.NdkSend", &[obj.v(), 0x1601, 0x1602, 0xA1, 0x204])
    );

    let r = call_slot!(t, NDK_FN_RECEIVE, 0x20, (obj, p(0x1603), cp(0x1604), 0xA2));
    assert_eq!(r, 0x0605);
    assert_eq!(
        take(),
        call("Qp.NdkReceive", &[obj.v(), 0x1603, 0x1604, 0xA2])
    );

    let r = call_slot!(
        t,
        NDK_FN_BIND,
        0x28,
        (
            obj,
            p(0x1605),
            p(0x1606),
            p(0x1607),
            p(0x1608),
            BIG_SIZE,
            0xA3
        )
    );
    assert_eq!(r, STATUS_ACCESS_VIOLATION);
    assert_eq!(
        take(),
        call(
            "Qp.NdkBind",
            &[
                obj.v(),
                0x1605,
                0x1606,
                0x1607,
                0x1608,
                BIG_SIZE as u64,
                0xA3
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_FAST_REGISTER,
        0x30,
        (
            obj,
            p(0x1609),
            p(0x160A),
            0xA4,
            cp(0x160B),
            0xA5,
            BIG_SIZE2,
            p(0x160C),
            0xA6
        )
    );
    assert_eq!(r, 0x0607);
    assert_eq!(
        take(),
        call(
            "Qp.NdkFastRegister",
            &[
                obj.v(),
                0x1609,
                0x160A,
                0xA4,
                0x160B,
                0xA5,
                BIG_SIZE2 as u64,
                0x160C,
                0xA6
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_INVALIDATE,
        0x38,
        (obj, p(0x160D), p(0x160E), 0xA7)
    );
    assert_eq!(r, 0x0608);
    assert_eq!(
        take(),
        call("Qp.NdkInvalidate", &[obj.v(), 0x160D, 0x160E, 0xA7])
    );

    let r = call_slot!(
        t,
        NDK_FN_READ,
        0x40,
        (
            obj,
            p(0x160F),
            cp(0x1610),
            0xA8,
            0x1122_3344_5566_7788,
            0xA9,
            0xAA
        )
    );
    assert_eq!(r, STATUS_REMOTE_RESOURCES);
    assert_eq!(
        take(),
        call(
            "Qp.NdkRead",
            &[
                obj.v(),
                0x160F,
                0x1610,
                0xA8,
                0x1122_3344_5566_7788,
                0xA9,
                0xAA
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_WRITE,
        0x48,
        (
            obj,
            p(0x1611),
            cp(0x1612),
            0xAB,
            0x8877_6655_4433_2211,
            0xAC,
            0xAD
        )
    );
    assert_eq!(r, STATUS_CONNECTION_INVALID);
    assert_eq!(
        take(),
        call(
            "Qp.NdkWrite",
            &[
                obj.v(),
                0x1611,
                0x1612,
                0xAB,
                0x8877_6655_4433_2211,
                0xAC,
                0xAD
            ]
        )
    );

    // Flags before RemoteToken here, unlike Read/Write.
    let r = call_slot!(
        t,
        NDK_FN_SEND_AND_INVALIDATE,
        0x50,
        (obj, p(0x1613), cp(0x1614), 0xAE, 0xAF, 0xB0)
    );
    assert_eq!(r, 0x060B);
    assert_eq!(
        take(),
        call(
            "Qp.NdkSendAndInvalidate",
            &[obj.v(), 0x1613, 0x1614, 0xAE, 0xAF, 0xB0]
        )
    );
}

// ---------------------------------------------------------------- SRQ

close_recorder!(srq_close = "Srq.NdkCloseSrq" -> 0x0701);
query_extension_recorder!(srq_query_extension = "Srq.NdkQueryExtension" -> 0x0702);
unsafe extern "system" fn srq_modify(
    srq: *mut NDK_SRQ,
    depth: ULONG,
    notify_threshold: ULONG,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Srq.NdkModifySrq"; srq, depth, notify_threshold, request_completion, request_context);
    0x0703
}
unsafe extern "system" fn srq_receive(
    srq: *mut NDK_SRQ,
    request_context: PVOID,
    sgl: *const NDK_SGE,
    n_sge: ULONG,
) -> NTSTATUS {
    rec!("Srq.NdkSrqReceive"; srq, request_context, sgl, n_sge);
    0x0704
}

static SRQ_DISPATCH: NDK_SRQ_DISPATCH = NDK_SRQ_DISPATCH {
    NdkCloseSrq: srq_close,
    NdkQueryExtension: srq_query_extension,
    NdkModifySrq: srq_modify,
    NdkSrqReceive: srq_receive,
};

#[test]
fn srq_dispatch_passes_every_argument_in_order() {
    let mut srq = NDK_SRQ {
        Header: header(NdkObjectTypeSrq),
        Dispatch: &SRQ_DISPATCH,
    };
    let obj: *mut NDK_SRQ = &mut srq;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Srq.NdkCloseSrq", 0x0701);
    check_query_extension(t, 0x08, obj.cast(), "Srq.NdkQueryExtension", 0x0702);

    let r = call_slot!(
        t,
        NDK_FN_MODIFY_SRQ,
        0x10,
        (obj, 0xA1, 0xA2, CB_REQUEST, p(0x1701))
    );
    assert_eq!(r, 0x0703);
    assert_eq!(
        take(),
        call(
            "Srq.NdkModifySrq",
            &[obj.v(), 0xA1, 0xA2, CB_REQUEST.v(), 0x1701]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_SRQ_RECEIVE,
        0x18,
        (obj, p(0x1702), cp(0x1703), 0xA3)
    );
    assert_eq!(r, 0x0704);
    assert_eq!(
        take(),
        call("Srq.NdkSrqReceive", &[obj.v(), 0x1702, 0x1703, 0xA3])
    );
}

// ---------------------------------------------------------------- connector

close_recorder!(connector_close = "Connector.NdkCloseConnector" -> 0x0801);
query_extension_recorder!(connector_query_extension = "Connector.NdkQueryExtension" -> 0x0802);
unsafe extern "system" fn connector_connect(
    connector: *mut NDK_CONNECTOR,
    qp: *mut NDK_QP,
    src_address: *const SOCKADDR,
    src_address_length: ULONG,
    dest_address: *const SOCKADDR,
    dest_address_length: ULONG,
    inbound_read_limit: ULONG,
    outbound_read_limit: ULONG,
    private_data: *const c_void,
    private_data_length: ULONG,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkConnect"; connector, qp, src_address, src_address_length, dest_address,
        dest_address_length, inbound_read_limit, outbound_read_limit, private_data,
        private_data_length, request_completion, request_context);
    STATUS_CONNECTION_REFUSED
}
unsafe extern "system" fn connector_connect_with_shared_endpoint(
    connector: *mut NDK_CONNECTOR,
    qp: *mut NDK_QP,
    shared_endpoint: *mut NDK_SHARED_ENDPOINT,
    dest_address: *const SOCKADDR,
    dest_address_length: ULONG,
    inbound_read_limit: ULONG,
    outbound_read_limit: ULONG,
    private_data: *const c_void,
    private_data_length: ULONG,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkConnectWithSharedEndpoint"; connector, qp, shared_endpoint, dest_address,
        dest_address_length, inbound_read_limit, outbound_read_limit, private_data,
        private_data_length, request_completion, request_context);
    0x0804
}
unsafe extern "system" fn connector_complete_connect(
    connector: *mut NDK_CONNECTOR,
    disconnect_event: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    disconnect_event_context: PVOID,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkCompleteConnect"; connector, disconnect_event, disconnect_event_context,
        request_completion, request_context);
    0x0805
}
unsafe extern "system" fn connector_accept(
    connector: *mut NDK_CONNECTOR,
    qp: *mut NDK_QP,
    inbound_read_limit: ULONG,
    outbound_read_limit: ULONG,
    private_data: *const c_void,
    private_data_length: ULONG,
    disconnect_event: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    disconnect_event_context: PVOID,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkAccept"; connector, qp, inbound_read_limit, outbound_read_limit,
        private_data, private_data_length, disconnect_event, disconnect_event_context,
        request_completion, request_context);
    0x0806
}
unsafe extern "system" fn connector_reject(
    connector: *mut NDK_CONNECTOR,
    private_data: *const c_void,
    private_data_length: ULONG,
) -> NTSTATUS {
    rec!("Connector.NdkReject"; connector, private_data, private_data_length);
    STATUS_INVALID_BUFFER_SIZE
}
unsafe extern "system" fn connector_get_connection_data(
    connector: *mut NDK_CONNECTOR,
    inbound_read_limit: *mut ULONG,
    outbound_read_limit: *mut ULONG,
    private_data: PVOID,
    private_data_length: *mut ULONG,
) -> NTSTATUS {
    rec!("Connector.NdkGetConnectionData"; connector, inbound_read_limit, outbound_read_limit,
        private_data, private_data_length);
    0x0808
}
unsafe extern "system" fn connector_get_local_address(
    connector: *mut NDK_CONNECTOR,
    address: *mut SOCKADDR,
    address_length: *mut ULONG,
) -> NTSTATUS {
    rec!("Connector.NdkGetLocalAddress"; connector, address, address_length);
    0x0809
}
unsafe extern "system" fn connector_get_peer_address(
    connector: *mut NDK_CONNECTOR,
    address: *mut SOCKADDR,
    address_length: *mut ULONG,
) -> NTSTATUS {
    rec!("Connector.NdkGetPeerAddress"; connector, address, address_length);
    0x080A
}
unsafe extern "system" fn connector_disconnect(
    connector: *mut NDK_CONNECTOR,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkDisconnect"; connector, request_completion, request_context);
    STATUS_IO_TIMEOUT
}
unsafe extern "system" fn connector_complete_connect_ex(
    connector: *mut NDK_CONNECTOR,
    disconnect_event: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    disconnect_event_context: PVOID,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkCompleteConnectEx"; connector, disconnect_event, disconnect_event_context,
        request_completion, request_context);
    0x080C
}
unsafe extern "system" fn connector_accept_ex(
    connector: *mut NDK_CONNECTOR,
    qp: *mut NDK_QP,
    inbound_read_limit: ULONG,
    outbound_read_limit: ULONG,
    private_data: *const c_void,
    private_data_length: ULONG,
    disconnect_event: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    disconnect_event_context: PVOID,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Connector.NdkAcceptEx"; connector, qp, inbound_read_limit, outbound_read_limit,
        private_data, private_data_length, disconnect_event, disconnect_event_context,
        request_completion, request_context);
    0x080D
}

static CONNECTOR_DISPATCH: NDK_CONNECTOR_DISPATCH = NDK_CONNECTOR_DISPATCH {
    NdkCloseConnector: connector_close,
    NdkQueryExtension: connector_query_extension,
    NdkConnect: connector_connect,
    NdkConnectWithSharedEndpoint: connector_connect_with_shared_endpoint,
    NdkCompleteConnect: connector_complete_connect,
    NdkAccept: connector_accept,
    NdkReject: connector_reject,
    NdkGetConnectionData: connector_get_connection_data,
    NdkGetLocalAddress: connector_get_local_address,
    NdkGetPeerAddress: connector_get_peer_address,
    NdkDisconnect: connector_disconnect,
    NdkCompleteConnectEx: connector_complete_connect_ex,
    NdkAcceptEx: connector_accept_ex,
};

#[test]
fn connector_dispatch_passes_every_argument_in_order() {
    let mut connector = NDK_CONNECTOR {
        Header: header(NdkObjectTypeConnector),
        Dispatch: &CONNECTOR_DISPATCH,
    };
    let obj: *mut NDK_CONNECTOR = &mut connector;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Connector.NdkCloseConnector", 0x0801);
    check_query_extension(t, 0x08, obj.cast(), "Connector.NdkQueryExtension", 0x0802);

    let r = call_slot!(
        t,
        NDK_FN_CONNECT,
        0x10,
        (
            obj,
            p(0x1801),
            cp(0x1802),
            0xA1,
            cp(0x1803),
            0xA2,
            0xA3,
            0xA4,
            cp(0x1804),
            0xA5,
            CB_REQUEST,
            p(0x1805)
        )
    );
    assert_eq!(r, STATUS_CONNECTION_REFUSED);
    assert_eq!(
        take(),
        call(
            "Connector.NdkConnect",
            &[
                obj.v(),
                0x1801,
                0x1802,
                0xA1,
                0x1803,
                0xA2,
                0xA3,
                0xA4,
                0x1804,
                0xA5,
                CB_REQUEST.v(),
                0x1805
            ]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_CONNECT_WITH_SHARED_ENDPOINT,
        0x18,
        (
            obj,
            p(0x1806),
            p(0x1807),
            cp(0x1808),
            0xA6,
            0xA7,
            0xA8,
            cp(0x1809),
            0xA9,
            CB_REQUEST,
            p(0x180A)
        )
    );
    assert_eq!(r, 0x0804);
    assert_eq!(
        take(),
        call(
            "Connector.NdkConnectWithSharedEndpoint",
            &[
                obj.v(),
                0x1806,
                0x1807,
                0x1808,
                0xA6,
                0xA7,
                0xA8,
                0x1809,
                0xA9,
                CB_REQUEST.v(),
                0x180A
            ]
        )
    );

    for disconnect in [Some(CB_DISCONNECT), None] {
        let r = call_slot!(
            t,
            NDK_FN_COMPLETE_CONNECT,
            0x20,
            (obj, disconnect, p(0x180B), CB_REQUEST, p(0x180C))
        );
        assert_eq!(r, 0x0805);
        assert_eq!(
            take(),
            call(
                "Connector.NdkCompleteConnect",
                &[obj.v(), disconnect.v(), 0x180B, CB_REQUEST.v(), 0x180C]
            )
        );

        let r = call_slot!(
            t,
            NDK_FN_ACCEPT,
            0x28,
            (
                obj,
                p(0x180D),
                0xAA,
                0xAB,
                cp(0x180E),
                0xAC,
                disconnect,
                p(0x180F),
                CB_REQUEST,
                p(0x1810)
            )
        );
        assert_eq!(r, 0x0806);
        assert_eq!(
            take(),
            call(
                "Connector.NdkAccept",
                &[
                    obj.v(),
                    0x180D,
                    0xAA,
                    0xAB,
                    0x180E,
                    0xAC,
                    disconnect.v(),
                    0x180F,
                    CB_REQUEST.v(),
                    0x1810
                ]
            )
        );
    }

    let r = call_slot!(t, NDK_FN_REJECT, 0x30, (obj, cp(0x1811), 0xAD));
    assert_eq!(r, STATUS_INVALID_BUFFER_SIZE);
    assert_eq!(
        take(),
        call("Connector.NdkReject", &[obj.v(), 0x1811, 0xAD])
    );

    let r = call_slot!(
        t,
        NDK_FN_GET_CONNECTION_DATA,
        0x38,
        (obj, p(0x1812), p(0x1813), p(0x1814), p(0x1815))
    );
    assert_eq!(r, 0x0808);
    assert_eq!(
        take(),
        call(
            "Connector.NdkGetConnectionData",
            &[obj.v(), 0x1812, 0x1813, 0x1814, 0x1815]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_GET_LOCAL_ADDRESS,
        0x40,
        (obj, p(0x1816), p(0x1817))
    );
    assert_eq!(r, 0x0809);
    assert_eq!(
        take(),
        call("Connector.NdkGetLocalAddress", &[obj.v(), 0x1816, 0x1817])
    );

    let r = call_slot!(
        t,
        NDK_FN_GET_PEER_ADDRESS,
        0x48,
        (obj, p(0x1818), p(0x1819))
    );
    assert_eq!(r, 0x080A);
    assert_eq!(
        take(),
        call("Connector.NdkGetPeerAddress", &[obj.v(), 0x1818, 0x1819])
    );

    let r = call_slot!(t, NDK_FN_DISCONNECT, 0x50, (obj, CB_REQUEST, p(0x181A)));
    assert_eq!(r, STATUS_IO_TIMEOUT);
    assert_eq!(
        take(),
        call(
            "Connector.NdkDisconnect",
            &[obj.v(), CB_REQUEST.v(), 0x181A]
        )
    );

    for disconnect in [Some(CB_DISCONNECT_EX), None] {
        let r = call_slot!(
            t,
            NDK_FN_COMPLETE_CONNECT_EX,
            0x58,
            (obj, disconnect, p(0x181B), CB_REQUEST, p(0x181C))
        );
        assert_eq!(r, 0x080C);
        assert_eq!(
            take(),
            call(
                "Connector.NdkCompleteConnectEx",
                &[obj.v(), disconnect.v(), 0x181B, CB_REQUEST.v(), 0x181C]
            )
        );

        let r = call_slot!(
            t,
            NDK_FN_ACCEPT_EX,
            0x60,
            (
                obj,
                p(0x181D),
                0xAE,
                0xAF,
                cp(0x181E),
                0xB0,
                disconnect,
                p(0x181F),
                CB_REQUEST,
                p(0x1820)
            )
        );
        assert_eq!(r, 0x080D);
        assert_eq!(
            take(),
            call(
                "Connector.NdkAcceptEx",
                &[
                    obj.v(),
                    0x181D,
                    0xAE,
                    0xAF,
                    0x181E,
                    0xB0,
                    disconnect.v(),
                    0x181F,
                    CB_REQUEST.v(),
                    0x1820
                ]
            )
        );
    }
}

// ---------------------------------------------------------------- listener

close_recorder!(listener_close = "Listener.NdkCloseListener" -> 0x0901);
query_extension_recorder!(listener_query_extension = "Listener.NdkQueryExtension" -> 0x0902);
unsafe extern "system" fn listener_listen(
    listener: *mut NDK_LISTENER,
    address: *const SOCKADDR,
    address_length: ULONG,
    request_completion: NDK_FN_REQUEST_COMPLETION,
    request_context: PVOID,
) -> NTSTATUS {
    rec!("Listener.NdkListen"; listener, address, address_length, request_completion,
        request_context);
    STATUS_SHARING_VIOLATION
}
unsafe extern "system" fn listener_get_local_address(
    listener: *mut NDK_LISTENER,
    address: *mut SOCKADDR,
    address_length: *mut ULONG,
) -> NTSTATUS {
    rec!("Listener.NdkGetLocalAddress"; listener, address, address_length);
    0x0904
}
unsafe extern "system" fn listener_control_connect_events(
    listener: *mut NDK_LISTENER,
    pause: BOOLEAN,
) {
    rec!("Listener.NdkControlConnectEvents"; listener, pause);
}

static LISTENER_DISPATCH: NDK_LISTENER_DISPATCH = NDK_LISTENER_DISPATCH {
    NdkCloseListener: listener_close,
    NdkQueryExtension: listener_query_extension,
    NdkListen: listener_listen,
    NdkGetLocalAddress: listener_get_local_address,
    NdkControlConnectEvents: listener_control_connect_events,
};

#[test]
fn listener_dispatch_passes_every_argument_in_order() {
    let mut listener = NDK_LISTENER {
        Header: header(NdkObjectTypeListener),
        Dispatch: &LISTENER_DISPATCH,
    };
    let obj: *mut NDK_LISTENER = &mut listener;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(t, obj.cast(), "Listener.NdkCloseListener", 0x0901);
    check_query_extension(t, 0x08, obj.cast(), "Listener.NdkQueryExtension", 0x0902);

    let r = call_slot!(
        t,
        NDK_FN_LISTEN,
        0x10,
        (obj, cp(0x1901), 0xA1, CB_REQUEST, p(0x1902))
    );
    assert_eq!(r, STATUS_SHARING_VIOLATION);
    assert_eq!(
        take(),
        call(
            "Listener.NdkListen",
            &[obj.v(), 0x1901, 0xA1, CB_REQUEST.v(), 0x1902]
        )
    );

    let r = call_slot!(
        t,
        NDK_FN_GET_LISTENER_LOCAL_ADDRESS,
        0x18,
        (obj, p(0x1903), p(0x1904))
    );
    assert_eq!(r, 0x0904);
    assert_eq!(
        take(),
        call("Listener.NdkGetLocalAddress", &[obj.v(), 0x1903, 0x1904])
    );

    for pause in [1u8, 0] {
        call_slot!(t, NDK_FN_CONTROL_CONNECT_EVENTS, 0x20, (obj, pause));
        assert_eq!(
            take(),
            call(
                "Listener.NdkControlConnectEvents",
                &[obj.v(), u64::from(pause)]
            )
        );
    }
}

// ---------------------------------------------------------------- shared endpoint

close_recorder!(se_close = "SharedEndpoint.NdkCloseSharedEndpoint" -> 0x0A01);
query_extension_recorder!(se_query_extension = "SharedEndpoint.NdkQueryExtension" -> 0x0A02);
unsafe extern "system" fn se_get_local_address(
    shared_endpoint: *mut NDK_SHARED_ENDPOINT,
    address: *mut SOCKADDR,
    address_length: *mut ULONG,
) -> NTSTATUS {
    rec!("SharedEndpoint.NdkGetLocalAddress"; shared_endpoint, address, address_length);
    STATUS_BUFFER_TOO_SMALL
}

static SHARED_ENDPOINT_DISPATCH: NDK_SHARED_ENDPOINT_DISPATCH = NDK_SHARED_ENDPOINT_DISPATCH {
    NdkCloseSharedEndpoint: se_close,
    NdkQueryExtension: se_query_extension,
    NdkGetLocalAddress: se_get_local_address,
};

#[test]
fn shared_endpoint_dispatch_passes_every_argument_in_order() {
    let mut se = NDK_SHARED_ENDPOINT {
        Header: header(NdkObjectTypeSharedEndpoint),
        Dispatch: &SHARED_ENDPOINT_DISPATCH,
    };
    let obj: *mut NDK_SHARED_ENDPOINT = &mut se;
    // SAFETY: `obj` points to the live local object above.
    let t = unsafe { (*obj).Dispatch }.cast::<c_void>();
    check_close(
        t,
        obj.cast(),
        "SharedEndpoint.NdkCloseSharedEndpoint",
        0x0A01,
    );
    check_query_extension(
        t,
        0x08,
        obj.cast(),
        "SharedEndpoint.NdkQueryExtension",
        0x0A02,
    );

    let r = call_slot!(
        t,
        NDK_FN_GET_SHARED_ENDPOINT_LOCAL_ADDRESS,
        0x10,
        (obj, p(0x1A01), p(0x1A02))
    );
    assert_eq!(r, STATUS_BUFFER_TOO_SMALL);
    assert_eq!(
        take(),
        call(
            "SharedEndpoint.NdkGetLocalAddress",
            &[obj.v(), 0x1A01, 0x1A02]
        )
    );
}

// ---------------------------------------------------------------- consumer callbacks

/// Calls consumer callback `$f` the way a provider does.
macro_rules! call_callback {
    ($f:expr, ($($arg:expr),* $(,)?)) => {{
        // SAFETY: `$f` is a callback of this file that only records its arguments.
        unsafe { ($f)($($arg),*) }
    }};
}

#[test]
fn consumer_callbacks_pass_every_argument_in_order() {
    call_callback!(CB_CLOSE, (p(0x2001)));
    assert_eq!(take(), call("CloseCompletion", &[0x2001]));

    call_callback!(
        CB_CREATE,
        (p(0x2002), STATUS_INSUFFICIENT_RESOURCES, p(0x2003))
    );
    assert_eq!(
        take(),
        call("CreateCompletion", &[0x2002, 0xC000_009A, 0x2003])
    );

    call_callback!(CB_REQUEST, (p(0x2004), STATUS_CONNECTION_ABORTED));
    assert_eq!(take(), call("RequestCompletion", &[0x2004, 0xC000_0241]));

    call_callback!(CB_CQ_NOTIFY, (p(0x2005), STATUS_BUFFER_OVERFLOW));
    assert_eq!(take(), call("CqNotification", &[0x2005, 0x8000_0005]));

    call_callback!(CB_SRQ_NOTIFY, (p(0x2006), STATUS_INTERNAL_ERROR));
    assert_eq!(take(), call("SrqNotification", &[0x2006, 0xC000_00E5]));

    call_callback!(CB_CONNECT_EVENT, (p(0x2007), p(0x2008)));
    assert_eq!(take(), call("ConnectEvent", &[0x2007, 0x2008]));

    call_callback!(CB_DISCONNECT, (p(0x2009)));
    assert_eq!(take(), call("DisconnectEvent", &[0x2009]));

    call_callback!(CB_DISCONNECT_EX, (p(0x200A), 0xA1));
    assert_eq!(take(), call("DisconnectEventEx", &[0x200A, 0xA1]));
}
