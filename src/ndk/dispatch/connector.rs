//! `NDK_CONNECTOR_DISPATCH` (the 13-entry NDKPI 2.1 table), and the SOCKADDR marshalling the
//! listener and shared-endpoint tables share. Every thunk follows the shared `# Safety`
//! contract of [`super`] ("the module contract").

use core::ffi::c_void;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{dispatch_table, request, status};
use crate::ndk::connect::connector::{ConnectRequest, Connector};
use crate::ndk::connect::shared_endpoint::SharedEndpoint;
use crate::ndk::error::{NdkError, NdkResult};
use crate::ndk::object::ObjRef;
use crate::ndk::qp::Qp;
use crate::ndkpi::upcall::DisconnectCallback;
use crate::ndkpi::*;

/// Reads a consumer's SOCKADDR_IN or SOCKADDR_IN6 of `len` bytes.
///
/// # Safety
/// `p` is null or valid for reads of `len` bytes.
pub(super) unsafe fn read_sockaddr(p: *const SOCKADDR, len: ULONG) -> NdkResult<SocketAddr> {
    if p.is_null() {
        return Err(NdkError::InvalidParameter);
    }
    let len = len as usize;
    if len < core::mem::size_of::<ADDRESS_FAMILY>() {
        return Err(NdkError::InvalidAddress);
    }
    // SAFETY: at least the family is within the `len` readable bytes (caller contract); the
    // read is unaligned-safe.
    let family = unsafe { p.cast::<ADDRESS_FAMILY>().read_unaligned() };
    match family {
        AF_INET if len >= core::mem::size_of::<SOCKADDR_IN>() => {
            // SAFETY: `len` covers a SOCKADDR_IN (caller contract); unaligned read.
            let a = unsafe { p.cast::<SOCKADDR_IN>().read_unaligned() };
            let ip = Ipv4Addr::from(a.sin_addr.S_un_b);
            Ok(SocketAddr::new(IpAddr::V4(ip), u16::from_be(a.sin_port)))
        }
        AF_INET6 if len >= core::mem::size_of::<SOCKADDR_IN6>() => {
            // SAFETY: `len` covers a SOCKADDR_IN6 (caller contract); unaligned read.
            let a = unsafe { p.cast::<SOCKADDR_IN6>().read_unaligned() };
            let ip = Ipv6Addr::from(a.sin6_addr.Byte);
            Ok(SocketAddr::new(IpAddr::V6(ip), u16::from_be(a.sin6_port)))
        }
        _ => Err(NdkError::InvalidAddress),
    }
}

/// Writes `addr` to a consumer's buffer of `*len` bytes; `*len` gets the size needed
/// (STATUS_BUFFER_TOO_SMALL when the buffer is shorter, or missing).
///
/// # Safety
/// `len` is null or valid for a read and a write; `p` is null or valid for writes of `*len`
/// bytes.
pub(super) unsafe fn write_sockaddr(
    addr: SocketAddr,
    p: *mut SOCKADDR,
    len: *mut ULONG,
) -> NTSTATUS {
    if len.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: non-null, valid by contract.
    let have = unsafe { len.read() } as usize;
    let (need, write): (usize, &dyn Fn(*mut SOCKADDR)) = match addr {
        SocketAddr::V4(v4) => (core::mem::size_of::<SOCKADDR_IN>(), &move |dst| {
            let a = SOCKADDR_IN {
                sin_family: AF_INET,
                sin_port: v4.port().to_be(),
                sin_addr: IN_ADDR {
                    S_un_b: v4.ip().octets(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: the buffer holds `need` bytes (checked below before the call).
            unsafe { dst.cast::<SOCKADDR_IN>().write_unaligned(a) }
        }),
        SocketAddr::V6(v6) => (core::mem::size_of::<SOCKADDR_IN6>(), &move |dst| {
            let a = SOCKADDR_IN6 {
                sin6_family: AF_INET6,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: IN6_ADDR {
                    Byte: v6.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: as above.
            unsafe { dst.cast::<SOCKADDR_IN6>().write_unaligned(a) }
        }),
    };
    // CAST: 16 or 28.
    let need_ulong = need as ULONG;
    // SAFETY: non-null, valid by contract.
    unsafe { len.write(need_ulong) };
    if p.is_null() || have < need {
        return STATUS_BUFFER_TOO_SMALL;
    }
    write(p);
    STATUS_SUCCESS
}

/// The consumer's private data (`len` bytes at `p`).
///
/// # Safety
/// `p` is null only with `len` 0, else valid for reads of `len` bytes for the call.
unsafe fn private_data<'a>(p: *const c_void, len: ULONG) -> NdkResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(NdkError::InvalidParameter);
    }
    // A length above what any message carries fails before a slice of it is formed.
    if len as usize > crate::ndk::connect::connector::MAX_PEER_DATA {
        return Err(NdkError::InvalidBufferSize);
    }
    // SAFETY: caller contract.
    Ok(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len as usize) })
}

/// # Safety
/// See the module contract.
unsafe fn borrow_pair(
    c: *mut NDK_CONNECTOR,
    qp: *mut NDK_QP,
) -> NdkResult<(ObjRef<Connector>, ObjRef<Qp>)> {
    // SAFETY: module contract.
    let c = unsafe { ObjRef::<Connector>::borrow(c) }.ok_or(NdkError::InvalidParameter)?;
    // SAFETY: module contract.
    let q = unsafe { ObjRef::<Qp>::borrow(qp) }.ok_or(NdkError::InvalidParameter)?;
    Ok((c, q))
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn connect(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    pSrcAddress: *const SOCKADDR,
    SrcAddressLength: ULONG,
    pDestAddress: *const SOCKADDR,
    DestAddressLength: ULONG,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let (c, q) = match unsafe { borrow_pair(pNdkConnector, pNdkQp) } {
        Ok(p) => p,
        Err(e) => return e.to_ntstatus(),
    };
    // SAFETY: module contract: the addresses and private data are valid for their lengths.
    let src = unsafe { read_sockaddr(pSrcAddress, SrcAddressLength) };
    // SAFETY: as above.
    let dst = unsafe { read_sockaddr(pDestAddress, DestAddressLength) };
    // SAFETY: as above.
    let pd = unsafe { private_data(pPrivateData, PrivateDataLength) };
    let (src, dst, pd) = match (src, dst, pd) {
        (Ok(s), Ok(d), Ok(p)) => (s, d, p),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e.to_ntstatus(),
    };
    let p = ConnectRequest {
        src,
        dst,
        ird: InboundReadLimit,
        ord: OutboundReadLimit,
        private_data: pd,
    };
    request(RequestCompletion, RequestContext, |h| {
        c.connect(&q, None, &p, h)
    })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn connect_with_shared_endpoint(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    pSharedEndpoint: *mut NDK_SHARED_ENDPOINT,
    pDestAddress: *const SOCKADDR,
    DestAddressLength: ULONG,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let (c, q) = match unsafe { borrow_pair(pNdkConnector, pNdkQp) } {
        Ok(p) => p,
        Err(e) => return e.to_ntstatus(),
    };
    // SAFETY: module contract.
    let Some(se) = (unsafe { ObjRef::<SharedEndpoint>::borrow(pSharedEndpoint) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract: the address and private data are valid for their lengths.
    let dst = unsafe { read_sockaddr(pDestAddress, DestAddressLength) };
    // SAFETY: as above.
    let pd = unsafe { private_data(pPrivateData, PrivateDataLength) };
    let (dst, pd) = match (dst, pd) {
        (Ok(d), Ok(p)) => (d, p),
        (Err(e), _) | (_, Err(e)) => return e.to_ntstatus(),
    };
    let p = ConnectRequest {
        src: se.local_address(),
        dst,
        ird: InboundReadLimit,
        ord: OutboundReadLimit,
        private_data: pd,
    };
    request(RequestCompletion, RequestContext, |h| {
        c.connect(&q, Some(&se), &p, h)
    })
}

fn complete_connect_with(
    c: *mut NDK_CONNECTOR,
    cb: Option<DisconnectCallback>,
    rc: NDK_FN_REQUEST_COMPLETION,
    ctx: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract (the caller's).
    let Some(c) = (unsafe { ObjRef::<Connector>::borrow(c) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    request(rc, ctx, |h| {
        h.complete(c.complete_connect(cb));
        Ok(())
    })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn complete_connect(
    pNdkConnector: *mut NDK_CONNECTOR,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    let cb = DisconnectEvent.map(|f| DisconnectCallback::Plain(f, DisconnectEventContext as usize));
    complete_connect_with(pNdkConnector, cb, RequestCompletion, RequestContext)
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn complete_connect_ex(
    pNdkConnector: *mut NDK_CONNECTOR,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    let cb = DisconnectEvent.map(|f| DisconnectCallback::Ex(f, DisconnectEventContext as usize));
    complete_connect_with(pNdkConnector, cb, RequestCompletion, RequestContext)
}

/// # Safety
/// See the module contract.
#[allow(clippy::too_many_arguments)]
unsafe fn accept_with(
    c: *mut NDK_CONNECTOR,
    qp: *mut NDK_QP,
    ird: ULONG,
    ord: ULONG,
    pd: *const c_void,
    pdlen: ULONG,
    cb: Option<DisconnectCallback>,
    rc: NDK_FN_REQUEST_COMPLETION,
    ctx: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let (c, q) = match unsafe { borrow_pair(c, qp) } {
        Ok(p) => p,
        Err(e) => return e.to_ntstatus(),
    };
    // SAFETY: module contract.
    let data = match unsafe { private_data(pd, pdlen) } {
        Ok(d) => d,
        Err(e) => return e.to_ntstatus(),
    };
    request(rc, ctx, |h| c.accept(&q, ird, ord, data, cb, h))
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn accept(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    let cb = DisconnectEvent.map(|f| DisconnectCallback::Plain(f, DisconnectEventContext as usize));
    // SAFETY: module contract.
    unsafe {
        accept_with(
            pNdkConnector,
            pNdkQp,
            InboundReadLimit,
            OutboundReadLimit,
            pPrivateData,
            PrivateDataLength,
            cb,
            RequestCompletion,
            RequestContext,
        )
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn accept_ex(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    let cb = DisconnectEvent.map(|f| DisconnectCallback::Ex(f, DisconnectEventContext as usize));
    // SAFETY: module contract.
    unsafe {
        accept_with(
            pNdkConnector,
            pNdkQp,
            InboundReadLimit,
            OutboundReadLimit,
            pPrivateData,
            PrivateDataLength,
            cb,
            RequestCompletion,
            RequestContext,
        )
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn reject(
    pNdkConnector: *mut NDK_CONNECTOR,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(c) = (unsafe { ObjRef::<Connector>::borrow(pNdkConnector) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let data = match unsafe { private_data(pPrivateData, PrivateDataLength) } {
        Ok(d) => d,
        Err(e) => return e.to_ntstatus(),
    };
    status(c.reject(data))
}

/// NdkGetConnectionData (ndkpi.md §5.10): the effective read limits, and up to the
/// required size (RDS) of the peer's private data; `*pPrivateDataLength` always gets RDS.
///
/// # Safety
/// See the module contract.
unsafe extern "system" fn get_connection_data(
    pNdkConnector: *mut NDK_CONNECTOR,
    pInboundReadLimit: *mut ULONG,
    pOutboundReadLimit: *mut ULONG,
    pPrivateData: PVOID,
    pPrivateDataLength: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(c) = (unsafe { ObjRef::<Connector>::borrow(pNdkConnector) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if pPrivateDataLength.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: non-null, valid by contract.
    let have = unsafe { pPrivateDataLength.read() } as usize;
    if pPrivateData.is_null() && have != 0 {
        return STATUS_INVALID_PARAMETER;
    }
    let data = match c.connection_data() {
        Ok(d) => d,
        Err(e) => return e.to_ntstatus(),
    };
    if !pInboundReadLimit.is_null() {
        // SAFETY: non-null out parameter, valid by contract.
        unsafe { pInboundReadLimit.write(data.ird) };
    }
    if !pOutboundReadLimit.is_null() {
        // SAFETY: as above.
        unsafe { pOutboundReadLimit.write(data.ord) };
    }
    // A null buffer of length 0 asks for RDS alone.
    if pPrivateData.is_null() {
        // CAST: RDS ≤ 196.
        // SAFETY: non-null, valid by contract.
        unsafe { pPrivateDataLength.write(data.rds as ULONG) };
        return STATUS_SUCCESS;
    }
    let n = have.min(data.rds);
    if n != 0
        && let Some(src) = data.data.get(..n)
    {
        // SAFETY: the buffer is valid for `have` ≥ `n` bytes (contract); the source is a
        // local array of at least `n` bytes.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), pPrivateData.cast::<u8>(), n) };
    }
    // CAST: RDS ≤ 196.
    // SAFETY: non-null, valid by contract.
    unsafe { pPrivateDataLength.write(data.rds as ULONG) };
    if have >= data.rds {
        STATUS_SUCCESS
    } else {
        STATUS_BUFFER_TOO_SMALL
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn local_address(
    pNdkConnector: *mut NDK_CONNECTOR,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(c) = (unsafe { ObjRef::<Connector>::borrow(pNdkConnector) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    match c.addresses() {
        // SAFETY: module contract.
        Ok((local, _)) => unsafe { write_sockaddr(local, pAddress, pAddressLength) },
        Err(e) => e.to_ntstatus(),
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn peer_address(
    pNdkConnector: *mut NDK_CONNECTOR,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(c) = (unsafe { ObjRef::<Connector>::borrow(pNdkConnector) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    match c.addresses() {
        // SAFETY: module contract.
        Ok((_, peer)) => unsafe { write_sockaddr(peer, pAddress, pAddressLength) },
        Err(e) => e.to_ntstatus(),
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn disconnect(
    pNdkConnector: *mut NDK_CONNECTOR,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(c) = (unsafe { ObjRef::<Connector>::borrow(pNdkConnector) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    request(RequestCompletion, RequestContext, |h| c.disconnect(h))
}

dispatch_table!(CONNECTOR_DISPATCH: NDK_CONNECTOR_DISPATCH, NdkCloseConnector: Connector {
    NdkConnect: connect,
    NdkConnectWithSharedEndpoint: connect_with_shared_endpoint,
    NdkCompleteConnect: complete_connect,
    NdkAccept: accept,
    NdkReject: reject,
    NdkGetConnectionData: get_connection_data,
    NdkGetLocalAddress: local_address,
    NdkGetPeerAddress: peer_address,
    NdkDisconnect: disconnect,
    NdkCompleteConnectEx: complete_connect_ex,
    NdkAcceptEx: accept_ex,
});
