//! `NDK_CONNECTOR_DISPATCH`. No connector can be created yet (connection management is a
//! later issue); the slots exist and answer STATUS_NOT_IMPLEMENTED.

use core::ffi::c_void;

use super::{dispatch_table, not_implemented};
use crate::ndk::connector::Connector;
use crate::ndkpi::*;

not_implemented! {
    fn connect(_c: *mut NDK_CONNECTOR, _qp: *mut NDK_QP, _src: *const SOCKADDR, _srclen: ULONG,
        _dst: *const SOCKADDR, _dstlen: ULONG, _ird: ULONG, _ord: ULONG, _pd: *const c_void,
        _pdlen: ULONG, _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
    fn connect_with_shared_endpoint(_c: *mut NDK_CONNECTOR, _qp: *mut NDK_QP,
        _se: *mut NDK_SHARED_ENDPOINT, _dst: *const SOCKADDR, _dstlen: ULONG, _ird: ULONG,
        _ord: ULONG, _pd: *const c_void, _pdlen: ULONG, _rc: NDK_FN_REQUEST_COMPLETION,
        _ctx: PVOID);
    fn complete_connect(_c: *mut NDK_CONNECTOR, _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
        _dectx: PVOID, _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
    fn accept(_c: *mut NDK_CONNECTOR, _qp: *mut NDK_QP, _ird: ULONG, _ord: ULONG,
        _pd: *const c_void, _pdlen: ULONG, _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
        _dectx: PVOID, _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
    fn reject(_c: *mut NDK_CONNECTOR, _pd: *const c_void, _pdlen: ULONG);
    fn get_connection_data(_c: *mut NDK_CONNECTOR, _ird: *mut ULONG, _ord: *mut ULONG,
        _pd: PVOID, _pdlen: *mut ULONG);
    fn connector_address(_c: *mut NDK_CONNECTOR, _a: *mut SOCKADDR, _len: *mut ULONG);
    fn disconnect(_c: *mut NDK_CONNECTOR, _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
    fn complete_connect_ex(_c: *mut NDK_CONNECTOR,
        _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>, _dectx: PVOID,
        _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
    fn accept_ex(_c: *mut NDK_CONNECTOR, _qp: *mut NDK_QP, _ird: ULONG, _ord: ULONG,
        _pd: *const c_void, _pdlen: ULONG, _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
        _dectx: PVOID, _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
}

dispatch_table!(CONNECTOR_DISPATCH: NDK_CONNECTOR_DISPATCH, NdkCloseConnector: Connector {
    NdkConnect: connect,
    NdkConnectWithSharedEndpoint: connect_with_shared_endpoint,
    NdkCompleteConnect: complete_connect,
    NdkAccept: accept,
    NdkReject: reject,
    NdkGetConnectionData: get_connection_data,
    NdkGetLocalAddress: connector_address,
    NdkGetPeerAddress: connector_address,
    NdkDisconnect: disconnect,
    NdkCompleteConnectEx: complete_connect_ex,
    NdkAcceptEx: accept_ex,
});
