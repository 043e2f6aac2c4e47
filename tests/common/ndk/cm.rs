//! Connection management for the consumer kit: the resolvers and engines of a
//! [`ClusterConfig::cm`] cluster, and consumer wrappers for connectors, listeners and shared
//! endpoints that call only through their dispatch tables, with `extern "system"` callbacks
//! recording into per-object contexts. [`cm_connect`] is the whole NdkListen / NdkConnect /
//! NdkAccept / NdkCompleteConnect exchange between two QPs.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::net::{IpAddr, SocketAddr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use pvrdma_host::held_spin_locks;
use pvrdma_ndk::ndk::connect::EngineConfig;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::Platform;
use pvrdma_ndk::os::net::Neighbours;

use super::{
    Adapter, CloseCtx, Cluster, ClusterConfig, Host, Pump, Qp, Request, RequestCtx, close_object,
    on_close, on_request, ptr_of, table,
};

/// A close whose completion the test waits for itself (to do things while it pends).
pub struct PendingClose {
    /// The close's inline status.
    pub inline: NTSTATUS,
    ctx: Arc<CloseCtx>,
    pump: Arc<Pump>,
}

impl PendingClose {
    /// CloseCompletions so far.
    pub fn completions(&self) -> u32 {
        self.ctx.0.load(Ordering::SeqCst)
    }

    /// Waits for the one CloseCompletion of a pended close.
    pub fn wait(self) {
        assert_eq!(self.inline, STATUS_PENDING);
        self.pump
            .wait_for("CloseCompletion", || self.completions() != 0);
        self.pump.settle();
        assert_eq!(self.completions(), 1, "one CloseCompletion");
    }
}

fn close_raw(
    pump: &Arc<Pump>,
    obj: *mut NDK_OBJECT_HEADER,
    slot: NDK_FN_CLOSE_OBJECT,
) -> PendingClose {
    let ctx = Arc::new(CloseCtx::default());
    // SAFETY: a live object of the provider, closed once; the context outlives the
    // completion (kept by the returned value, which the test waits on).
    let inline = unsafe { slot(obj, on_close, ptr_of(&ctx)) };
    PendingClose {
        inline,
        ctx,
        pump: pump.clone(),
    }
}

/// EUI-64 node GUID from a MAC (as Linux derives RoCE node GUIDs).
pub fn guid_from_mac(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]])
}

/// Gives every host a resolver knowing every host and starts its connection engine.
pub(super) fn start_engines(hosts: &mut [Host], cfg: &ClusterConfig) {
    let all: Vec<(IpAddr, [u8; 6])> = hosts
        .iter()
        .flat_map(|h| h.addresses.iter().map(|&ip| (ip, h.mac)))
        .collect();
    for h in hosts.iter_mut() {
        let p: Arc<dyn Platform> = h.platform.clone();
        let n = Neighbours::new(p.clone(), 64, cfg.resolve_bound_ns).expect("resolver");
        for &(ip, mac) in &all {
            if !h.addresses.contains(&ip) {
                n.set_neighbour(ip, mac).expect("neighbour");
            }
        }
        for &ip in &h.addresses {
            n.add_address(ip).expect("address");
        }
        let seed = (cfg.seed as u32) ^ (h.index as u32).wrapping_mul(0x9E37_79B9);
        pvrdma_ndk::ndk::connect::start(
            &h.ndk,
            p,
            n.clone(),
            EngineConfig {
                path_mtu: cfg.path_mtu,
                cm_response_timeout: cfg.cm_timing.0,
                max_cm_retries: cfg.cm_timing.1,
                capacity: cfg.cm_capacity,
                ..EngineConfig::new(guid_from_mac(h.mac), seed)
            },
        )
        .expect("connection engine starts");
        h.resolver = Some(n);
    }
}

/// Checks that no connection object is left in any engine.
pub(super) fn check_engines_idle(hosts: &[Host]) {
    for h in hosts {
        let Some(e) = pvrdma_ndk::ndk::connect::engine(&h.ndk) else {
            continue;
        };
        let (_held, conns, listeners, endpoints) = e.live();
        assert_eq!(
            (conns, listeners, endpoints),
            (0, 0, 0),
            "host {}: connectors, listeners or endpoints left",
            h.index
        );
    }
}

/// Checks that no connection object is left, stops every engine and checks the GID table
/// is empty (a paired host's engine stopped when its interface was detached).
pub(super) fn stop_engines(hosts: &[Host]) {
    for h in hosts {
        let Some(e) = pvrdma_ndk::ndk::connect::engine(&h.ndk) else {
            assert_eq!(
                h.resolver.as_ref().map_or(0, |r| r.outstanding()),
                0,
                "resolutions outstanding"
            );
            continue;
        };
        let (_held, conns, listeners, endpoints) = e.live();
        assert_eq!(
            (conns, listeners, endpoints),
            (0, 0, 0),
            "host {}: connectors, listeners or endpoints left",
            h.index
        );
        h.ndk.stop_connections();
        let gids = h.model.with_core(|c| c.gids());
        assert!(
            gids.is_empty(),
            "host {}: GID bindings left: {gids:?}",
            h.index
        );
        assert_eq!(
            h.resolver.as_ref().map_or(0, |r| r.outstanding()),
            0,
            "resolutions outstanding"
        );
    }
}

// ------------------------------------------------------------------------------- addresses

/// A SOCKADDR_IN / SOCKADDR_IN6 buffer.
#[repr(C, align(4))]
#[derive(Clone, Copy)]
pub struct SockBuf(pub [u8; 28]);

impl SockBuf {
    /// `a` as Windows lays it out.
    pub fn from(a: SocketAddr) -> (SockBuf, u32) {
        let mut b = [0u8; 28];
        match a {
            SocketAddr::V4(v4) => {
                b[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
                b[2..4].copy_from_slice(&v4.port().to_be_bytes());
                b[4..8].copy_from_slice(&v4.ip().octets());
                (SockBuf(b), 16)
            }
            SocketAddr::V6(v6) => {
                b[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
                b[2..4].copy_from_slice(&v6.port().to_be_bytes());
                b[8..24].copy_from_slice(&v6.ip().octets());
                (SockBuf(b), 28)
            }
        }
    }

    /// The address in the buffer.
    pub fn addr(&self) -> Option<SocketAddr> {
        let b = &self.0;
        let family = u16::from_ne_bytes([b[0], b[1]]);
        let port = u16::from_be_bytes([b[2], b[3]]);
        if family == AF_INET {
            let ip: [u8; 4] = b[4..8].try_into().unwrap();
            Some(SocketAddr::new(IpAddr::from(ip), port))
        } else if family == AF_INET6 {
            let ip: [u8; 16] = b[8..24].try_into().unwrap();
            Some(SocketAddr::new(IpAddr::from(ip), port))
        } else {
            None
        }
    }

    fn ptr(&self) -> *const SOCKADDR {
        self.0.as_ptr().cast()
    }

    fn mut_ptr(&mut self) -> *mut SOCKADDR {
        self.0.as_mut_ptr().cast()
    }
}

/// `ip:port`.
pub fn sa(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

/// Reads an address through a Get*LocalAddress-style slot.
fn get_address(
    f: impl FnOnce(*mut SOCKADDR, *mut ULONG) -> NTSTATUS,
) -> Result<SocketAddr, NTSTATUS> {
    let mut b = SockBuf([0; 28]);
    let mut len: ULONG = 28;
    let st = f(b.mut_ptr(), &mut len);
    if st != STATUS_SUCCESS {
        return Err(st);
    }
    let a = b.addr().expect("a family");
    assert_eq!(len, if a.is_ipv4() { 16 } else { 28 }, "address length");
    Ok(a)
}

// ------------------------------------------------------------------------------- callbacks

/// What a connector's disconnect-event callbacks recorded.
#[derive(Default)]
pub struct DisconnectNotes {
    plain: AtomicU32,
    ex: Mutex<Vec<u32>>,
}

impl DisconnectNotes {
    /// Callbacks so far (plain and Ex).
    pub fn count(&self) -> u32 {
        self.plain.load(Ordering::SeqCst) + self.ex.lock().unwrap().len() as u32
    }
    /// The Ex callbacks' ProviderDisconnectReasons.
    pub fn reasons(&self) -> Vec<u32> {
        self.ex.lock().unwrap().clone()
    }
}

unsafe extern "system" fn on_disconnect(ctx: PVOID) {
    assert_eq!(
        held_spin_locks(),
        0,
        "no driver lock held in DisconnectEvent"
    );
    // SAFETY: an `Arc<DisconnectNotes>` its connector wrapper keeps alive past close.
    let n = unsafe { &*(ctx as *const DisconnectNotes) };
    n.plain.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "system" fn on_disconnect_ex(ctx: PVOID, reason: ULONG) {
    assert_eq!(
        held_spin_locks(),
        0,
        "no driver lock held in DisconnectEventEx"
    );
    // SAFETY: as above.
    let n = unsafe { &*(ctx as *const DisconnectNotes) };
    n.ex.lock().unwrap().push(reason);
}

/// Connectors a listener's NdkConnectEventCallback delivered, in order.
#[derive(Default)]
pub struct Incoming(Mutex<VecDeque<usize>>, AtomicU32);

impl Incoming {
    /// Callbacks so far.
    pub fn calls(&self) -> u32 {
        self.1.load(Ordering::SeqCst)
    }
}

unsafe extern "system" fn on_connect_event(ctx: PVOID, c: *mut NDK_CONNECTOR) {
    assert_eq!(held_spin_locks(), 0, "no driver lock held in ConnectEvent");
    // SAFETY: an `Arc<Incoming>` its listener wrapper keeps alive past close.
    let n = unsafe { &*(ctx as *const Incoming) };
    n.0.lock().unwrap().push_back(c as usize);
    n.1.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "system" fn on_create_unused(_ctx: PVOID, _st: NTSTATUS, _o: *mut NDK_OBJECT_HEADER) {
    panic!("connection objects are created inline");
}

// ------------------------------------------------------------------------------- adapter

impl Adapter {
    /// NdkCreateConnector.
    pub fn create_connector(&self) -> Result<Connector, NTSTATUS> {
        let mut c: *mut NDK_CONNECTOR = null_mut();
        let d = self.d();
        // SAFETY: a live adapter; the out pointer is valid.
        let st = unsafe { (d.NdkCreateConnector)(self.ptr, on_create_unused, null_mut(), &mut c) };
        if st != STATUS_SUCCESS {
            assert!(c.is_null());
            return Err(st);
        }
        Ok(Connector::wrap(c, self.pump.clone(), self.host))
    }

    /// NdkCreateListener.
    pub fn create_listener(&self) -> Result<Listener, NTSTATUS> {
        let incoming = Arc::new(Incoming::default());
        let mut l: *mut NDK_LISTENER = null_mut();
        let d = self.d();
        // SAFETY: a live adapter; the context outlives the listener (kept by the wrapper).
        let st = unsafe {
            (d.NdkCreateListener)(
                self.ptr,
                on_connect_event,
                ptr_of(&incoming),
                on_create_unused,
                null_mut(),
                &mut l,
            )
        };
        if st != STATUS_SUCCESS {
            assert!(l.is_null());
            return Err(st);
        }
        Ok(Listener {
            ptr: l,
            incoming,
            pump: self.pump.clone(),
            host: self.host,
        })
    }

    /// NdkCreateSharedEndpoint on `addr`.
    pub fn create_shared_endpoint(&self, addr: SocketAddr) -> Result<SharedEndpoint, NTSTATUS> {
        let (b, len) = SockBuf::from(addr);
        let mut s: *mut NDK_SHARED_ENDPOINT = null_mut();
        let d = self.d();
        // SAFETY: a live adapter; the address outlives the call.
        let st = unsafe {
            (d.NdkCreateSharedEndpoint)(
                self.ptr,
                b.ptr(),
                len,
                on_create_unused,
                null_mut(),
                &mut s,
            )
        };
        if st != STATUS_SUCCESS {
            assert!(s.is_null());
            return Err(st);
        }
        Ok(SharedEndpoint {
            ptr: s,
            pump: self.pump.clone(),
        })
    }
}

// ------------------------------------------------------------------------------- connector

/// A connector (closed explicitly).
pub struct Connector {
    /// The connector.
    pub ptr: *mut NDK_CONNECTOR,
    /// Its disconnect events.
    pub disconnects: Arc<DisconnectNotes>,
    pump: Arc<Pump>,
    host: usize,
}

/// NdkGetConnectionData's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionData {
    /// Status.
    pub status: NTSTATUS,
    /// InboundReadLimit.
    pub ird: u32,
    /// OutboundReadLimit.
    pub ord: u32,
    /// The bytes copied.
    pub data: Vec<u8>,
    /// `*pPrivateDataLength` afterwards (RDS).
    pub rds: u32,
}

impl Connector {
    fn wrap(ptr: *mut NDK_CONNECTOR, pump: Arc<Pump>, host: usize) -> Connector {
        Connector {
            ptr,
            disconnects: Arc::new(DisconnectNotes::default()),
            pump,
            host,
        }
    }

    fn d(&self) -> &'static NDK_CONNECTOR_DISPATCH {
        // SAFETY: a live connector.
        table(unsafe { (*self.ptr).Dispatch })
    }

    fn request(&self, issue: impl FnOnce(NDK_FN_REQUEST_COMPLETION, PVOID) -> NTSTATUS) -> Request {
        let ctx = Arc::new(RequestCtx::default());
        let inline = issue(on_request, ptr_of(&ctx));
        Request {
            inline,
            ctx,
            pump: self.pump.clone(),
        }
    }

    /// Host index.
    pub fn host(&self) -> usize {
        self.host
    }

    /// NdkConnect (inline status and pending context).
    pub fn connect_raw(
        &self,
        qp: &Qp,
        src: SocketAddr,
        dst: SocketAddr,
        ird: u32,
        ord: u32,
        private: &[u8],
    ) -> Request {
        let (s, sl) = SockBuf::from(src);
        let (d, dl) = SockBuf::from(dst);
        self.request(|rc, ctx| {
            // SAFETY: live connector and QP; the buffers outlive the call.
            unsafe {
                (self.d().NdkConnect)(
                    self.ptr,
                    qp.ptr,
                    s.ptr(),
                    sl,
                    d.ptr(),
                    dl,
                    ird,
                    ord,
                    private.as_ptr().cast::<c_void>(),
                    private.len() as u32,
                    rc,
                    ctx,
                )
            }
        })
    }

    /// NdkConnect, waited for.
    pub fn connect(
        &self,
        qp: &Qp,
        src: SocketAddr,
        dst: SocketAddr,
        ird: u32,
        ord: u32,
        private: &[u8],
    ) -> NTSTATUS {
        self.connect_raw(qp, src, dst, ird, ord, private).wait()
    }

    /// NdkConnectWithSharedEndpoint (inline status and pending context).
    pub fn connect_shared_raw(
        &self,
        qp: &Qp,
        se: &SharedEndpoint,
        dst: SocketAddr,
        ird: u32,
        ord: u32,
        private: &[u8],
    ) -> Request {
        let (d, dl) = SockBuf::from(dst);
        self.request(|rc, ctx| {
            // SAFETY: live objects; the buffers outlive the call.
            unsafe {
                (self.d().NdkConnectWithSharedEndpoint)(
                    self.ptr,
                    qp.ptr,
                    se.ptr,
                    d.ptr(),
                    dl,
                    ird,
                    ord,
                    private.as_ptr().cast::<c_void>(),
                    private.len() as u32,
                    rc,
                    ctx,
                )
            }
        })
    }

    /// NdkCompleteConnect with this wrapper's disconnect callback.
    pub fn complete_connect(&self) -> NTSTATUS {
        let notes = ptr_of(&self.disconnects);
        self.request(|rc, ctx| {
            // SAFETY: live connector; the notes outlive it.
            unsafe { (self.d().NdkCompleteConnect)(self.ptr, Some(on_disconnect), notes, rc, ctx) }
        })
        .wait()
    }

    /// NdkCompleteConnectEx with this wrapper's disconnect callback.
    pub fn complete_connect_ex(&self) -> NTSTATUS {
        let notes = ptr_of(&self.disconnects);
        self.request(|rc, ctx| {
            // SAFETY: as above.
            unsafe {
                (self.d().NdkCompleteConnectEx)(self.ptr, Some(on_disconnect_ex), notes, rc, ctx)
            }
        })
        .wait()
    }

    /// NdkAccept (inline status and pending context).
    pub fn accept_raw(&self, qp: &Qp, ird: u32, ord: u32, private: &[u8]) -> Request {
        let notes = ptr_of(&self.disconnects);
        self.request(|rc, ctx| {
            // SAFETY: live connector and QP; the notes outlive the connector.
            unsafe {
                (self.d().NdkAccept)(
                    self.ptr,
                    qp.ptr,
                    ird,
                    ord,
                    private.as_ptr().cast::<c_void>(),
                    private.len() as u32,
                    Some(on_disconnect),
                    notes,
                    rc,
                    ctx,
                )
            }
        })
    }

    /// NdkAcceptEx (inline status and pending context).
    pub fn accept_ex_raw(&self, qp: &Qp, ird: u32, ord: u32, private: &[u8]) -> Request {
        let notes = ptr_of(&self.disconnects);
        self.request(|rc, ctx| {
            // SAFETY: as above.
            unsafe {
                (self.d().NdkAcceptEx)(
                    self.ptr,
                    qp.ptr,
                    ird,
                    ord,
                    private.as_ptr().cast::<c_void>(),
                    private.len() as u32,
                    Some(on_disconnect_ex),
                    notes,
                    rc,
                    ctx,
                )
            }
        })
    }

    /// NdkReject.
    pub fn reject(&self, private: &[u8]) -> NTSTATUS {
        // SAFETY: live connector; the data outlives the call.
        unsafe {
            (self.d().NdkReject)(
                self.ptr,
                private.as_ptr().cast::<c_void>(),
                private.len() as u32,
            )
        }
    }

    /// NdkGetConnectionData with a buffer of `len` bytes (`None`: a null buffer, length 0).
    pub fn connection_data(&self, len: Option<usize>) -> ConnectionData {
        let (mut ird, mut ord) = (0xDEAD, 0xBEEF);
        let mut buf = vec![0xA5u8; len.unwrap_or(0)];
        let mut n = len.unwrap_or(0) as u32;
        let p = if len.is_some() {
            buf.as_mut_ptr().cast::<c_void>()
        } else {
            null_mut()
        };
        // SAFETY: live connector; the buffer holds `n` bytes.
        let status =
            unsafe { (self.d().NdkGetConnectionData)(self.ptr, &mut ird, &mut ord, p, &mut n) };
        let copied = (n as usize).min(buf.len());
        buf.truncate(copied);
        ConnectionData {
            status,
            ird,
            ord,
            data: buf,
            rds: n,
        }
    }

    /// NdkGetLocalAddress.
    pub fn local_address(&self) -> Result<SocketAddr, NTSTATUS> {
        // SAFETY: live connector; the buffers are valid.
        get_address(|a, l| unsafe { (self.d().NdkGetLocalAddress)(self.ptr, a, l) })
    }

    /// NdkGetPeerAddress.
    pub fn peer_address(&self) -> Result<SocketAddr, NTSTATUS> {
        // SAFETY: as above.
        get_address(|a, l| unsafe { (self.d().NdkGetPeerAddress)(self.ptr, a, l) })
    }

    /// NdkDisconnect (inline status and pending context).
    pub fn disconnect_raw(&self) -> Request {
        // SAFETY: live connector.
        self.request(|rc, ctx| unsafe { (self.d().NdkDisconnect)(self.ptr, rc, ctx) })
    }

    /// NdkDisconnect, waited for.
    pub fn disconnect(&self) -> NTSTATUS {
        self.disconnect_raw().wait()
    }

    /// NdkCloseConnector; see the module docs of [`super`].
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseConnector)
    }
}

// ------------------------------------------------------------------------------- listener

/// A listener (closed explicitly).
pub struct Listener {
    /// The listener.
    pub ptr: *mut NDK_LISTENER,
    /// What its connect-event callback delivered.
    pub incoming: Arc<Incoming>,
    pump: Arc<Pump>,
    host: usize,
}

impl Listener {
    fn d(&self) -> &'static NDK_LISTENER_DISPATCH {
        // SAFETY: a live listener.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// NdkListen, waited for.
    pub fn listen(&self, addr: SocketAddr) -> NTSTATUS {
        let (b, len) = SockBuf::from(addr);
        let ctx = Arc::new(RequestCtx::default());
        // SAFETY: live listener; the buffer and context outlive the call and completion.
        let inline =
            unsafe { (self.d().NdkListen)(self.ptr, b.ptr(), len, on_request, ptr_of(&ctx)) };
        Request {
            inline,
            ctx,
            pump: self.pump.clone(),
        }
        .wait()
    }

    /// NdkGetListenerLocalAddress.
    pub fn local_address(&self) -> Result<SocketAddr, NTSTATUS> {
        // SAFETY: live listener; the buffers are valid.
        get_address(|a, l| unsafe { (self.d().NdkGetLocalAddress)(self.ptr, a, l) })
    }

    /// NdkControlConnectEvents.
    pub fn pause(&self, pause: bool) {
        // SAFETY: live listener.
        unsafe { (self.d().NdkControlConnectEvents)(self.ptr, u8::from(pause)) };
    }

    /// The next connector the connect-event callback delivered, waited for.
    pub fn next_incoming(&self) -> Connector {
        let mut got = None;
        self.pump.wait_for("NdkConnectEventCallback", || {
            got = self.incoming.0.lock().unwrap().pop_front();
            got.is_some()
        });
        Connector::wrap(
            got.unwrap() as *mut NDK_CONNECTOR,
            self.pump.clone(),
            self.host,
        )
    }

    /// NdkCloseListener.
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseListener)
    }

    /// NdkCloseListener, not waited for.
    pub fn close_raw(self) -> PendingClose {
        close_raw(&self.pump, self.ptr.cast(), self.d().NdkCloseListener)
    }
}

// ------------------------------------------------------------------------------- shared endpoint

/// A shared endpoint (closed explicitly).
pub struct SharedEndpoint {
    /// The shared endpoint.
    pub ptr: *mut NDK_SHARED_ENDPOINT,
    pump: Arc<Pump>,
}

impl SharedEndpoint {
    fn d(&self) -> &'static NDK_SHARED_ENDPOINT_DISPATCH {
        // SAFETY: a live shared endpoint.
        table(unsafe { (*self.ptr).Dispatch })
    }

    /// NdkGetSharedEndpointLocalAddress.
    pub fn local_address(&self) -> Result<SocketAddr, NTSTATUS> {
        // SAFETY: live shared endpoint; the buffers are valid.
        get_address(|a, l| unsafe { (self.d().NdkGetLocalAddress)(self.ptr, a, l) })
    }

    /// NdkCloseSharedEndpoint.
    pub fn close(self) -> NTSTATUS {
        close_object(&self.pump, self.ptr.cast(), self.d().NdkCloseSharedEndpoint)
    }

    /// NdkCloseSharedEndpoint, not waited for.
    pub fn close_raw(self) -> PendingClose {
        close_raw(&self.pump, self.ptr.cast(), self.d().NdkCloseSharedEndpoint)
    }
}

// ------------------------------------------------------------------------------- cm_connect

/// Both ends of a connection made by [`cm_connect`], and the listener that took it.
pub struct CmPair {
    /// The active side (on `a`'s host).
    pub client: Connector,
    /// The passive side (on `b`'s host).
    pub server: Connector,
    /// The listener on `b`'s host.
    pub listener: Listener,
}

impl CmPair {
    /// Graceful disconnect from the client (the server sees its DisconnectEvent and
    /// disconnects too), then every connection object closes.
    pub fn disconnect_and_close(self) {
        let d = self.client.disconnect_raw();
        assert_eq!(d.inline, STATUS_PENDING);
        let server = &self.server;
        self.server
            .pump
            .wait_for("the server's DisconnectEvent", || {
                server.disconnects.count() == 1
            });
        assert_eq!(self.server.disconnect(), STATUS_SUCCESS);
        assert_eq!(d.wait(), STATUS_SUCCESS, "the client's NdkDisconnect");
        assert_eq!(self.client.disconnects.count(), 0);
        assert_eq!(self.client.close(), STATUS_SUCCESS);
        assert_eq!(self.server.close(), STATUS_SUCCESS);
        assert_eq!(self.listener.close(), STATUS_SUCCESS);
    }
}

/// NdkListen (port 0) on `b`'s host, NdkConnect from `a`, NdkAccept of `b` from the
/// connect-event callback's connector, NdkCompleteConnect: `a` and `b` connected, both at
/// RTS, with IRD/ORD 8 each way and no private data.
pub fn cm_connect(c: &Cluster, a: &Qp, b: &Qp) -> CmPair {
    let (ha, hb) = (c.host(a.host()), c.host(b.host()));
    let listener = hb.adapter.create_listener().expect("NdkCreateListener");
    assert_eq!(listener.listen(sa(hb.ip, 0)), STATUS_SUCCESS, "NdkListen");
    let at = listener.local_address().expect("listener address");
    let client = ha.adapter.create_connector().expect("NdkCreateConnector");
    let connect = client.connect_raw(a, sa(ha.ip, 0), at, 8, 8, &[]);
    let server = listener.next_incoming();
    let accept = server.accept_raw(b, 8, 8, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS, "NdkConnect");
    assert_eq!(
        client.complete_connect(),
        STATUS_SUCCESS,
        "NdkCompleteConnect"
    );
    assert_eq!(accept.wait(), STATUS_SUCCESS, "NdkAccept");
    CmPair {
        client,
        server,
        listener,
    }
}

// ------------------------------------------------------------------------------- event loops

impl Listener {
    /// The next connector the connect-event callback delivered, if one came (for consumers
    /// that serve many connections from one loop).
    pub fn try_incoming(&self) -> Option<Connector> {
        let got = self.incoming.0.lock().unwrap().pop_front()?;
        Some(Connector::wrap(
            got as *mut NDK_CONNECTOR,
            self.pump.clone(),
            self.host,
        ))
    }
}

/// Host `h`'s connection engine's live counts: (CM connections, TIMEWAIT included;
/// connectors registered; listeners; local endpoints).
pub fn engine_live(h: &Host) -> (usize, usize, usize, usize) {
    pvrdma_ndk::ndk::connect::engine(&h.ndk)
        .expect("a connection engine")
        .live()
}

/// Host `h`'s connection engine's MAD counters.
pub fn engine_stats(h: &Host) -> pvrdma_ndk::ndk::connect::EngineStats {
    pvrdma_ndk::ndk::connect::engine(&h.ndk)
        .expect("a connection engine")
        .stats()
}
