//! NDK_CONNECTOR over the connection engine (ndkpi.md §5.10–5.12; cm.md §1.2, §1.4).
//!
//! An active connector is made by NdkCreateConnector (a successor of its adapter); a passive
//! one by the engine for an incoming REQ (a successor of its listener) and handed to the
//! listener's NdkConnectEventCallback, after which the consumer owns and closes it.
//!
//! Each connector performs its connection's CM actions in order, one at a time, behind its
//! MODIFY_QPs: a `Send` or `Deliver` queued after a `ModifyQp` waits in the connector's own
//! fixed queue (allocated with the connector, never per packet) until the device has
//! answered, so the REP leaves only once the QP is at RTS, and NdkConnect completes only
//! once it is. Consumer requests that complete later (NdkConnect, NdkAccept,
//! NdkDisconnect) keep their [`RequestHandoff`]; the event that ends them completes it with
//! the status of the `cm` module table, with no driver lock held. Closing the connector in
//! any state completes a request still pending with STATUS_CANCELLED, releases the CM
//! connection (the wire learns as Linux's `cm_destroy_id` tells it), takes the QP to ERR
//! if the connection took it out of INIT, and gives the local endpoint back.
//!
//! A QP serves one connection, once (ndkpi.md §5.12: "a disconnected QP or connector cannot
//! be reused"). NdkConnect, NdkConnectWithSharedEndpoint and NdkAccept naming a QP that
//! another open connector holds, or that a connection (or NdkFlush) already took out of
//! INIT, fail inline with STATUS_INVALID_DEVICE_STATE (ndkpi.md names no status for it; ND's
//! ND_INVALID_DEVICE_STATE, "the QP is not in a state for this"), before anything is sent
//! and with the other connection untouched. A connect that fails before its REQ, or an
//! accept the CM refuses inline, leaves the QP as it found it. Connects through one shared
//! endpoint to a destination it already connects to fail inline with
//! STATUS_ADDRESS_ALREADY_EXISTS (the same 4-tuple, ndkpi.md §4.5, §5.10).
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::net::{IpAddr, SocketAddr};

use super::engine::{CmEngine, MIN_RNR_TIMER, RETRY_COUNT, RNR_RETRY_COUNT, hw_done};
use super::listener::Listener;
use super::qp1::MAD_LEN;
use super::shared_endpoint::SharedEndpoint;
use crate::cm::addr::{gid_from_ip, ip_from_gid};
use crate::cm::limits::ReadLimits;
use crate::cm::machine::{MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};
use crate::cm::{AcceptParams, CmError, ConnId, ConnectParams, Event, Path, QpTransition, State};
use crate::ndk::adapter::Adapter;
use crate::ndk::error::{NdkError, NdkResult};
use crate::ndk::object::{Dispatched, Lifetime, NdkObject, ObjRef, RequestHandoff, header};
use crate::ndk::qp::Qp;
use crate::ndkpi::upcall::DisconnectCallback;
use crate::ndkpi::*;
use crate::os::SpinLock;
use crate::os::net::{Mac, ResolveError, resolve_done};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::verbs::{QpModify, QpPath, QpState};

/// NDK_ADAPTER_INFO.MaxCallerData.
pub const MAX_CALLER_DATA: usize = MAX_CONNECT_PRIVATE_DATA;
/// NDK_ADAPTER_INFO.MaxCalleeData (REP and REJ alike, cm.md §1.3).
pub const MAX_CALLEE_DATA: usize = MAX_REJECT_PRIVATE_DATA;
/// The largest private data a peer's message carries (the REP's 196 bytes).
pub const MAX_PEER_DATA: usize = crate::cm::msg::REP_PRIVATE_DATA;
/// Actions one connector holds back behind a MODIFY_QP in flight: an accept queues RTS,
/// REP and a possible MRA behind its RTR; a connect RTS and `Accepted` behind its RTR.
const WIRE_SLOTS: usize = 8;

/// Where the connection is, as the NDK calls see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Fresh (active), or a connect that failed before the REQ (it may be retried).
    Idle,
    /// NdkConnect: the destination's MAC is being resolved.
    Resolving,
    /// NdkConnect: REQ sent.
    Connecting,
    /// NdkConnect completed (REP received): NdkCompleteConnect or NdkReject next.
    Replied,
    /// Passive: delivered to the listener's consumer; NdkAccept or NdkReject next.
    Incoming,
    /// NdkAccept: REP sent, waiting for the RTU.
    Accepting,
    /// Connected.
    Established,
    /// The peer disconnected or aborted; NdkDisconnect next.
    PeerClosed,
    /// NdkDisconnect in progress.
    Disconnecting,
    /// Over (disconnected, rejected, failed or closing): never used again.
    Done,
}

/// Claims `qp` for one connector (the QP rule of the module docs).
fn bind_qp(qp: &Qp) -> NdkResult<()> {
    if qp.hold_for_connection() {
        Ok(())
    } else {
        Err(NdkError::InvalidDeviceState)
    }
}

#[allow(clippy::large_enum_variant)]
enum Deferred {
    Send(Path, [u8; MAD_LEN]),
    Modify(QpTransition),
    Deliver(Event),
}

/// The connector's serial executor of CM actions (see the module docs).
struct Wire {
    /// An action is being performed or a MODIFY_QP is in flight: later ones queue.
    busy: bool,
    queue: [Option<Deferred>; WIRE_SLOTS],
    head: usize,
    len: usize,
    /// Actions dropped for a full queue (a `Send` only: the CM retransmits).
    dropped: u32,
}

impl Wire {
    fn push(&mut self, d: Deferred) {
        if self.len >= WIRE_SLOTS {
            self.dropped = self.dropped.wrapping_add(1);
            return;
        }
        let at = (self.head + self.len) % WIRE_SLOTS;
        if let Some(slot) = self.queue.get_mut(at) {
            *slot = Some(d);
            self.len += 1;
        }
    }

    fn pop(&mut self) -> Option<Deferred> {
        if self.len == 0 {
            return None;
        }
        let d = self.queue.get_mut(self.head).and_then(Option::take);
        self.head = (self.head + 1) % WIRE_SLOTS;
        self.len -= 1;
        d
    }

    fn clear(&mut self) {
        while self.pop().is_some() {}
    }
}

struct Link {
    phase: Phase,
    conn: Option<ConnId>,
    qp: Option<ObjRef<Qp>>,
    request: Option<Arc<RequestHandoff>>,
    disconnect: Option<DisconnectCallback>,
    /// The disconnect event was delivered, or the consumer disconnected first.
    notified: bool,
    /// The peer rejected or abandoned the connection (NdkAccept, NdkReject and
    /// NdkCompleteConnect then answer STATUS_CONNECTION_ABORTED).
    aborted: bool,
    /// The local endpoint this connector reserved (NdkConnect with its own address).
    endpoint: Option<(IpAddr, u16)>,
    /// The shared endpoint it connected through (a successor count on it).
    shared: Option<ObjRef<SharedEndpoint>>,
    /// The (local, remote) pair claimed on the shared endpoint.
    tuple: Option<(SocketAddr, SocketAddr)>,
    /// A connection attempt is under way and not yet counted (Connect, Accept or
    /// ConnectFailure, [`super::conn_stats`]).
    attempt: bool,
}

impl Link {
    /// Ends the attempt under way, if any: whether there was one to count.
    fn end_attempt(&mut self) -> bool {
        core::mem::take(&mut self.attempt)
    }
}

/// Who the connector is a successor of.
enum Antecedent {
    Adapter,
    Listener(ObjRef<Listener>),
}

/// A connector.
pub struct Connector {
    life: Lifetime,
    adapter: ObjRef<Adapter>,
    engine: Arc<CmEngine>,
    antecedent: Antecedent,
    link: SpinLock<Link>,
    wire: SpinLock<Wire>,
}

impl NdkObject for Connector {
    type Ndk = NDK_CONNECTOR;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        let (conn, qp, request, endpoint, attempt) = {
            let mut l = self.link.lock();
            l.phase = Phase::Done;
            (
                l.conn.take(),
                l.qp.take(),
                l.request.take(),
                l.endpoint.take(),
                l.end_attempt(),
            )
        };
        // Closed before the attempt ended: it failed.
        if attempt {
            self.engine.conn_stats().attempt_failed();
        }
        if let Some(r) = request {
            r.complete(Err(NdkError::Cancelled));
        }
        if let Some(conn) = conn {
            self.engine.release(conn);
            self.engine.unregister_conn(conn);
        }
        if let Some(qp) = qp {
            qp.set_connected(false);
            // A QP this connection never took out of INIT is left there for another one.
            let used = qp.was_used();
            if used && qp.is_live() {
                // ERR flushes its requests (STATUS_CANCELLED); reserved, so it cannot fail.
                self.engine.hw().flush_qp(qp.handle());
            }
            qp.release_from_connection();
        }
        if let Some((ip, port)) = endpoint {
            self.engine.release_endpoint(ip, port);
        }
        self.wire.lock().clear();
    }
    fn release_antecedents(&self) {
        let (shared, tuple) = {
            let mut l = self.link.lock();
            (l.shared.take(), l.tuple.take())
        };
        if let Some((local, remote)) = tuple {
            self.engine.release_tuple(local, remote);
        }
        if let Some(s) = shared {
            s.put();
        }
        match &self.antecedent {
            Antecedent::Adapter => self.adapter.put(),
            Antecedent::Listener(l) => l.put(),
        }
    }
}

/// NdkConnect's parameters past the checks of the dispatch thunk.
#[derive(Clone, Copy)]
pub struct ConnectRequest<'a> {
    /// Local address (port 0: ephemeral; an unspecified IP: the interface's first address of
    /// the destination's family).
    pub src: SocketAddr,
    /// The peer.
    pub dst: SocketAddr,
    /// InboundReadLimit.
    pub ird: u32,
    /// OutboundReadLimit.
    pub ord: u32,
    /// Private data (≤ MaxCallerData).
    pub private_data: &'a [u8],
}

/// What the resolution hands on to the CM connect.
struct Pending {
    src: SocketAddr,
    dst: SocketAddr,
    limits: ReadLimits,
    data: [u8; MAX_CALLER_DATA],
    data_len: usize,
}

/// NdkGetConnectionData's answer.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionData {
    /// Effective InboundReadLimit.
    pub ird: u32,
    /// Effective OutboundReadLimit.
    pub ord: u32,
    /// The peer's private data, zero-padded.
    pub data: [u8; MAX_PEER_DATA],
    /// The required private-data size (RDS): what the peer's message carries.
    pub rds: usize,
}

fn limit(v: u32) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

impl Connector {
    fn new_object(
        adapter: &ObjRef<Adapter>,
        engine: Arc<CmEngine>,
        antecedent: Antecedent,
        phase: Phase,
        conn: Option<ConnId>,
    ) -> Option<ObjRef<Connector>> {
        let ndk = NDK_CONNECTOR {
            Header: header(adapter.version(), NdkObjectTypeConnector),
            Dispatch: Connector::TABLE,
        };
        ObjRef::try_new(
            ndk,
            Connector {
                life: Lifetime::new(),
                adapter: adapter.clone(),
                engine,
                antecedent,
                link: SpinLock::new(Link {
                    phase,
                    conn,
                    qp: None,
                    request: None,
                    disconnect: None,
                    notified: false,
                    aborted: false,
                    endpoint: None,
                    shared: None,
                    tuple: None,
                    // A passive connector is an inbound attempt from the start.
                    attempt: phase == Phase::Incoming,
                }),
                wire: SpinLock::new(Wire {
                    busy: false,
                    queue: Default::default(),
                    head: 0,
                    len: 0,
                    dropped: 0,
                }),
            },
        )
        .ok()
    }

    /// NdkCreateConnector.
    ///
    /// # Errors
    /// STATUS_NOT_IMPLEMENTED when the device runs without a connection engine (no address
    /// resolver was given at start); STATUS_INVALID_DEVICE_REQUEST for a closing adapter;
    /// STATUS_INSUFFICIENT_RESOURCES.
    pub fn create(adapter: &ObjRef<Adapter>) -> NdkResult<ObjRef<Connector>> {
        let engine = super::engine(adapter.device()).ok_or(NdkError::NotImplemented)?;
        if !adapter.lifetime().try_get() {
            return Err(NdkError::InvalidDeviceRequest);
        }
        Self::new_object(adapter, engine, Antecedent::Adapter, Phase::Idle, None).ok_or_else(|| {
            adapter.put();
            NdkError::InsufficientResources
        })
    }

    /// The passive connector of `conn` for `listener` (registered with the engine), or
    /// `None` when the listener is closing or memory is short.
    pub(crate) fn incoming(
        engine: &CmEngine,
        listener: &ObjRef<Listener>,
        conn: ConnId,
    ) -> Option<ObjRef<Connector>> {
        let handle = engine.handle()?;
        if !listener.lifetime().try_get() {
            return None;
        }
        let made = Self::new_object(
            listener.adapter(),
            handle,
            Antecedent::Listener(listener.clone()),
            Phase::Incoming,
            Some(conn),
        );
        let Some(c) = made else {
            listener.put();
            return None;
        };
        if !engine.register_conn(conn, &c) {
            // Dropped unpublished: its close count and the listener's are released here.
            c.link.lock().conn = None;
            c.close_unpublished();
            return None;
        }
        Some(c)
    }

    /// Where the connection is.
    pub fn phase(&self) -> Phase {
        self.link.lock().phase
    }

    /// The connection's communication ID, once the CM has one.
    pub fn conn_id(&self) -> Option<ConnId> {
        self.link.lock().conn
    }

    fn check_qp(&self, qp: &ObjRef<Qp>) -> NdkResult<()> {
        if !core::ptr::eq(&**qp.adapter().device(), &**self.adapter.device()) {
            return Err(NdkError::InvalidParameter);
        }
        Ok(())
    }
}

impl ObjRef<Connector> {
    /// Closes a connector the consumer never received, with the teardown a consumer's close
    /// would run (the close reclaims the published count; this handle keeps its own).
    pub(crate) fn close_unpublished(self) {
        let keep = self.clone();
        let _ = self.publish();
        let _ = keep.close(None);
    }

    // ----- consumer requests -----

    /// NdkConnect / NdkConnectWithSharedEndpoint: resolves the destination's MAC, then sends
    /// the REQ; `request` completes on REP (STATUS_SUCCESS), REJ (STATUS_CONNECTION_REFUSED),
    /// retries exhausted (STATUS_IO_TIMEOUT) or a failed resolution (its status).
    ///
    /// # Errors
    /// Inline: STATUS_INVALID_BUFFER_SIZE (private data above MaxCallerData),
    /// STATUS_CONNECTION_ACTIVE (the connector is connecting or connected),
    /// STATUS_INVALID_DEVICE_STATE (the QP is another connector's, or connected once),
    /// STATUS_ADDRESS_ALREADY_EXISTS (the shared endpoint connects to `dst` already),
    /// STATUS_INVALID_ADDRESS (families differ), STATUS_NETWORK_UNREACHABLE (no local
    /// address of the destination's family), the endpoint's statuses, STATUS_INVALID_PARAMETER.
    pub fn connect(
        &self,
        qp: &ObjRef<Qp>,
        shared: Option<&ObjRef<SharedEndpoint>>,
        p: &ConnectRequest<'_>,
        request: Arc<RequestHandoff>,
    ) -> NdkResult<()> {
        if p.private_data.len() > MAX_CALLER_DATA {
            return Err(NdkError::InvalidBufferSize);
        }
        self.check_qp(qp)?;
        if p.src.is_ipv4() != p.dst.is_ipv4() {
            return Err(NdkError::InvalidAddress);
        }
        let engine = &self.engine;
        let src_ip = if p.src.ip().is_unspecified() {
            engine
                .local_address_like(p.dst.ip())
                .ok_or(NdkError::NetworkUnreachable)?
        } else {
            p.src.ip()
        };
        {
            let mut l = self.link.lock();
            if l.phase != Phase::Idle || l.qp.is_some() {
                return Err(NdkError::ConnectionActive);
            }
            bind_qp(qp)?;
            // Claimed before anything can fail later, so a second connect sees it.
            l.phase = Phase::Resolving;
        }
        let undo = |this: &Self| {
            let mut l = this.link.lock();
            l.phase = Phase::Idle;
            qp.release_from_connection();
        };
        let (port, endpoint) = match shared {
            Some(se) => {
                if !se.lifetime().try_get() {
                    undo(self);
                    return Err(NdkError::InvalidParameter);
                }
                let tuple = (se.local_address(), p.dst);
                if let Err(e) = engine.claim_tuple(tuple.0, tuple.1) {
                    se.put();
                    undo(self);
                    return Err(e);
                }
                self.link.lock().tuple = Some(tuple);
                (se.port(), None)
            }
            None => match engine.reserve_endpoint(src_ip, p.src.port()) {
                Ok(port) => (port, Some((src_ip, port))),
                Err(e) => {
                    undo(self);
                    return Err(e);
                }
            },
        };
        let mut pending = Pending {
            src: SocketAddr::new(src_ip, port),
            dst: p.dst,
            limits: ReadLimits::new(limit(p.ird), limit(p.ord)),
            data: [0; MAX_CALLER_DATA],
            data_len: p.private_data.len(),
        };
        if let Some(d) = pending.data.get_mut(..p.private_data.len()) {
            d.copy_from_slice(p.private_data);
        }
        {
            let mut l = self.link.lock();
            l.qp = Some(qp.clone());
            l.request = Some(request);
            l.endpoint = endpoint;
            l.shared = shared.cloned();
            // NdkConnect pends from here on: an attempt (the resolution may end it inline).
            l.attempt = true;
        }
        let this = self.clone();
        let done = resolve_done(move |r| this.resolved(r, &pending));
        match done {
            Ok(d) => {
                engine.resolver().resolve(src_ip, p.dst.ip(), d);
                Ok(())
            }
            Err(_) => {
                {
                    let mut l = self.link.lock();
                    l.request = None;
                    l.attempt = false;
                }
                self.unwind_connect();
                Err(NdkError::InsufficientResources)
            }
        }
    }

    /// The resolution of NdkConnect's destination finished: the REQ goes out, or the
    /// request fails with the resolution's status.
    fn resolved(&self, r: Result<Mac, ResolveError>, p: &Pending) {
        let engine = &self.engine;
        let mac = match r {
            Ok(mac) => mac,
            Err(e) => return self.connect_failed(NdkError::from(e)),
        };
        engine.learn(p.dst.ip(), mac);
        let qp = {
            let l = self.link.lock();
            if l.phase != Phase::Resolving {
                // Closed meanwhile: the close completed the request.
                return;
            }
            l.qp.clone()
        };
        let Some(qp) = qp else { return };
        let params = ConnectParams {
            src: p.src,
            dst: p.dst,
            path: Path {
                local_gid: gid_from_ip(p.src.ip()),
                remote_gid: gid_from_ip(p.dst.ip()),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
            local_qpn: qp.qpn(),
            starting_psn: engine.next_psn(),
            limits: p.limits,
            path_mtu: engine.config().path_mtu,
            retry_count: RETRY_COUNT,
            rnr_retry_count: RNR_RETRY_COUNT,
            private_data: p.data.get(..p.data_len).unwrap_or(&[]),
        };
        // Registered under the CM's lock, before any answer to the REQ can be performed.
        {
            let mut l = self.link.lock();
            l.phase = Phase::Connecting;
        }
        let started = engine.input(|cm, now| {
            let id = cm.connect(now, &params)?;
            if !engine.register_conn(id, self) {
                let _ = cm.release(now, id);
                return Err(CmError::TableFull);
            }
            Ok(id)
        });
        match started {
            Ok(id) => {
                let closed = {
                    let mut l = self.link.lock();
                    let closed = l.phase == Phase::Done;
                    if !closed {
                        l.conn = Some(id);
                    }
                    closed
                };
                // Closed while the REQ was being made: the close found no connection to
                // release, so it is released here.
                if closed {
                    engine.release(id);
                    engine.unregister_conn(id);
                }
            }
            Err(e) => self.connect_failed(NdkError::from(e)),
        }
    }

    fn connect_failed(&self, e: NdkError) {
        let (request, attempt) = {
            let mut l = self.link.lock();
            if !matches!(l.phase, Phase::Resolving | Phase::Connecting) {
                return;
            }
            (l.request.take(), l.end_attempt())
        };
        if attempt {
            self.engine.conn_stats().attempt_failed();
        }
        self.unwind_connect();
        if let Some(r) = request {
            r.complete(Err(e));
        }
    }

    /// A connect that never sent its REQ gives back what it claimed: the connector may
    /// connect again and the QP serve another one.
    fn unwind_connect(&self) {
        let (qp, endpoint, shared, tuple) = {
            let mut l = self.link.lock();
            l.phase = Phase::Idle;
            (
                l.qp.take(),
                l.endpoint.take(),
                l.shared.take(),
                l.tuple.take(),
            )
        };
        if let Some(qp) = qp {
            qp.release_from_connection();
        }
        if let Some((ip, port)) = endpoint {
            self.engine.release_endpoint(ip, port);
        }
        if let Some((local, remote)) = tuple {
            self.engine.release_tuple(local, remote);
        }
        if let Some(s) = shared {
            s.put();
        }
    }

    /// NdkCompleteConnect(Ex): sends the RTU; the connection is established.
    ///
    /// # Errors
    /// STATUS_CONNECTION_ABORTED (the peer gave up after its REP), STATUS_CONNECTION_INVALID
    /// (no connect completed).
    pub fn complete_connect(&self, disconnect: Option<DisconnectCallback>) -> NdkResult<()> {
        let conn = {
            let mut l = self.link.lock();
            if l.aborted {
                return Err(NdkError::ConnectionAborted);
            }
            if l.phase != Phase::Replied {
                return Err(NdkError::ConnectionInvalid);
            }
            l.phase = Phase::Established;
            l.disconnect = disconnect;
            l.conn
        };
        let Some(conn) = conn else {
            return Err(NdkError::ConnectionInvalid);
        };
        match self.engine.input(|cm, _| cm.complete_connect(conn)) {
            Ok(()) => {
                // Counted here unless an event of the established connection came first.
                if self.link.lock().end_attempt() {
                    self.engine.conn_stats().established(false);
                }
                Ok(())
            }
            Err(e) => {
                let mut l = self.link.lock();
                let aborted = l.aborted;
                l.phase = if aborted { Phase::Done } else { Phase::Replied };
                l.disconnect = None;
                Err(if aborted {
                    NdkError::ConnectionAborted
                } else {
                    NdkError::from(e)
                })
            }
        }
    }

    /// NdkAccept(Ex): the QP goes to RTR and RTS and the REP out; `request` completes on the
    /// RTU (STATUS_SUCCESS), REJ (STATUS_CONNECTION_ABORTED) or REP retries exhausted
    /// (STATUS_IO_TIMEOUT).
    ///
    /// # Errors
    /// Inline: STATUS_INVALID_BUFFER_SIZE (private data above MaxCalleeData),
    /// STATUS_CONNECTION_ABORTED (the peer gave up), STATUS_CONNECTION_INVALID (not an
    /// incoming connection, or accepted already), STATUS_INVALID_DEVICE_STATE (the QP is
    /// another connector's, or connected once), STATUS_INVALID_PARAMETER.
    pub fn accept(
        &self,
        qp: &ObjRef<Qp>,
        ird: u32,
        ord: u32,
        private_data: &[u8],
        disconnect: Option<DisconnectCallback>,
        request: Arc<RequestHandoff>,
    ) -> NdkResult<()> {
        if private_data.len() > MAX_CALLEE_DATA {
            return Err(NdkError::InvalidBufferSize);
        }
        self.check_qp(qp)?;
        let conn = {
            let mut l = self.link.lock();
            if l.aborted {
                return Err(NdkError::ConnectionAborted);
            }
            if l.phase != Phase::Incoming {
                return Err(NdkError::ConnectionInvalid);
            }
            let Some(conn) = l.conn else {
                return Err(NdkError::ConnectionInvalid);
            };
            bind_qp(qp)?;
            l.phase = Phase::Accepting;
            l.qp = Some(qp.clone());
            l.request = Some(request);
            l.disconnect = disconnect;
            conn
        };
        let params = AcceptParams {
            local_qpn: qp.qpn(),
            starting_psn: self.engine.next_psn(),
            limits: ReadLimits::new(limit(ird), limit(ord)),
            rnr_retry_count: RNR_RETRY_COUNT,
            private_data,
        };
        match self.engine.input(|cm, now| cm.accept(now, conn, &params)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let mut l = self.link.lock();
                let aborted = l.aborted;
                l.phase = if aborted {
                    Phase::Done
                } else {
                    Phase::Incoming
                };
                if let Some(q) = l.qp.take() {
                    q.release_from_connection();
                }
                l.request = None;
                l.disconnect = None;
                Err(if aborted {
                    NdkError::ConnectionAborted
                } else {
                    NdkError::from(e)
                })
            }
        }
    }

    /// NdkReject: refuses an incoming connection, or a connect that completed (REJ 28 with
    /// `private_data`).
    ///
    /// # Errors
    /// STATUS_INVALID_BUFFER_SIZE, STATUS_CONNECTION_ABORTED (the peer gave up),
    /// STATUS_CONNECTION_INVALID.
    pub fn reject(&self, private_data: &[u8]) -> NdkResult<()> {
        if private_data.len() > MAX_CALLEE_DATA {
            return Err(NdkError::InvalidBufferSize);
        }
        let (conn, before) = {
            let mut l = self.link.lock();
            if l.aborted {
                return Err(NdkError::ConnectionAborted);
            }
            let before = l.phase;
            if !matches!(before, Phase::Incoming | Phase::Replied) {
                return Err(NdkError::ConnectionInvalid);
            }
            let Some(conn) = l.conn else {
                return Err(NdkError::ConnectionInvalid);
            };
            l.phase = Phase::Done;
            (conn, before)
        };
        match self.engine.input(|cm, _| cm.reject(conn, private_data)) {
            Ok(()) => {
                if self.link.lock().end_attempt() {
                    self.engine.conn_stats().attempt_failed();
                }
                Ok(())
            }
            Err(e) => {
                let mut l = self.link.lock();
                if l.aborted {
                    return Err(NdkError::ConnectionAborted);
                }
                l.phase = before;
                Err(NdkError::from(e))
            }
        }
    }

    /// NdkDisconnect: graceful (DREQ, or DREP after the peer's DREQ); `request` completes
    /// once the QP is in ERR (its requests flushed) and the peer answered (STATUS_SUCCESS)
    /// or DREQ retries ran out (STATUS_IO_TIMEOUT).
    ///
    /// # Errors
    /// STATUS_CONNECTION_INVALID when not connected (or disconnecting already);
    /// STATUS_DEVICE_BUSY when the CM's action queue stays full (the DREQ or DREP could not
    /// be queued; nothing changed, the consumer may retry).
    pub fn disconnect(&self, request: Arc<RequestHandoff>) -> NdkResult<()> {
        let (conn, before, notified) = {
            let mut l = self.link.lock();
            let before = l.phase;
            if !matches!(before, Phase::Established | Phase::PeerClosed) {
                return Err(NdkError::ConnectionInvalid);
            }
            let Some(conn) = l.conn else {
                return Err(NdkError::ConnectionInvalid);
            };
            l.phase = Phase::Disconnecting;
            l.request = Some(request);
            let notified = l.notified;
            l.notified = true;
            (conn, before, notified)
        };
        match self
            .engine
            .input_when_room(|cm, now| cm.disconnect(now, conn))
        {
            Ok(()) => Ok(()),
            Err(CmError::QueueFull) => {
                // Not "the CM is done": the peer's DREQ still waits for its DREP.
                let mut l = self.link.lock();
                l.phase = before;
                l.request = None;
                l.notified = notified;
                Err(NdkError::DeviceBusy)
            }
            Err(_) if before == Phase::PeerClosed => {
                // The CM is done with the connection already (the peer aborted it): only
                // the QP's flush is left, then the request completes.
                self.in_order(Deferred::Modify(QpTransition::Error));
                self.in_order(Deferred::Deliver(Event::Disconnected { timed_out: false }));
                Ok(())
            }
            Err(e) => {
                let mut l = self.link.lock();
                l.phase = before;
                l.request = None;
                Err(NdkError::from(e))
            }
        }
    }

    // ----- queries -----

    /// NdkGetConnectionData: effective IRD/ORD and the peer's private data.
    ///
    /// # Errors
    /// STATUS_CONNECTION_INVALID before a connection exists.
    pub fn connection_data(&self) -> NdkResult<ConnectionData> {
        let conn = self.link.lock().conn.ok_or(NdkError::ConnectionInvalid)?;
        self.engine.query(|cm| {
            let limits = cm.read_limits(conn).unwrap_or_default();
            let peer = cm.peer_private_data(conn).unwrap_or(&[]);
            let mut data = [0u8; MAX_PEER_DATA];
            let rds = peer.len().min(MAX_PEER_DATA);
            if let (Some(d), Some(s)) = (data.get_mut(..rds), peer.get(..rds)) {
                d.copy_from_slice(s);
            }
            Ok(ConnectionData {
                ird: u32::from(limits.inbound),
                ord: u32::from(limits.outbound),
                data,
                rds,
            })
        })
    }

    /// (local, peer) addresses of the connection.
    ///
    /// # Errors
    /// STATUS_CONNECTION_INVALID before a connection exists.
    pub fn addresses(&self) -> NdkResult<(SocketAddr, SocketAddr)> {
        let conn = self.link.lock().conn.ok_or(NdkError::ConnectionInvalid)?;
        self.engine
            .query(|cm| cm.addresses(conn))
            .ok_or(NdkError::ConnectionInvalid)
    }

    /// The CM state of the connection (tests and diagnostics).
    pub fn cm_state(&self) -> Option<State> {
        let conn = self.link.lock().conn?;
        self.engine.query(|cm| cm.state(conn))
    }

    // ----- the CM's actions, in order -----

    pub(crate) fn send_in_order(&self, path: Path, mad: [u8; MAD_LEN]) {
        self.in_order(Deferred::Send(path, mad));
    }

    pub(crate) fn modify_in_order(&self, t: QpTransition) {
        self.in_order(Deferred::Modify(t));
    }

    pub(crate) fn deliver_in_order(&self, e: Event) {
        self.in_order(Deferred::Deliver(e));
    }

    fn in_order(&self, d: Deferred) {
        {
            let mut w = self.wire.lock();
            if w.busy {
                w.push(d);
                return;
            }
            w.busy = true;
        }
        self.run_from(Some(d));
    }

    /// Performs `first`, then what queued behind it, until the queue is empty or a
    /// MODIFY_QP is in flight (whose completion goes on from here).
    fn run_from(&self, mut first: Option<Deferred>) {
        loop {
            let d = match first.take() {
                Some(d) => d,
                None => {
                    let mut w = self.wire.lock();
                    match w.pop() {
                        Some(d) => d,
                        None => {
                            w.busy = false;
                            return;
                        }
                    }
                }
            };
            match d {
                Deferred::Send(path, mad) => self.engine.send_mad(&path, &mad),
                Deferred::Deliver(e) => self.on_event(e),
                Deferred::Modify(t) => {
                    if self.issue_modify(t) {
                        return;
                    }
                }
            }
        }
    }

    /// Issues the MODIFY_QP of `t`; true if it is in flight (its completion resumes the
    /// queue).
    fn issue_modify(&self, t: QpTransition) -> bool {
        let qp = self.link.lock().qp.clone();
        let Some(qp) = qp.filter(|q| q.is_live()) else {
            return false;
        };
        let m = match self.qp_modify(&t) {
            Some(m) => m,
            None => {
                self.fail(NdkError::HostUnreachable);
                return false;
            }
        };
        if matches!(t, QpTransition::Error) {
            qp.set_connected(false);
        }
        if let QpTransition::Rtr(p) = &t {
            // The traffic counters' packets and per-frame overhead (ndk::traffic).
            qp.traffic()
                .set_path(p.path_mtu, ip_from_gid(p.path.remote_gid).is_ipv6());
        }
        qp.mark_used();
        let this = self.clone();
        let q2 = qp.clone();
        let done = hw_done(move |r: Result<(), PvrdmaError>| {
            this.modified(&q2, &t, r);
            this.run_from(None);
        });
        match done {
            Some(d) => {
                self.engine.hw().modify_qp(qp.handle(), &m, d);
                true
            }
            None => {
                self.fail(NdkError::InsufficientResources);
                false
            }
        }
    }

    fn qp_modify(&self, t: &QpTransition) -> Option<QpModify> {
        Some(match t {
            QpTransition::Rtr(p) => {
                let peer = ip_from_gid(p.path.remote_gid);
                QpModify {
                    state: Some(QpState::Rtr),
                    path_mtu: Some(p.path_mtu),
                    dest_qpn: Some(p.remote_qpn),
                    rq_psn: Some(p.rq_psn),
                    max_dest_rd_atomic: Some(p.max_dest_rd_atomic),
                    min_rnr_timer: Some(MIN_RNR_TIMER),
                    path: Some(QpPath {
                        dgid: p.path.remote_gid,
                        dmac: self.engine.neighbour(peer)?,
                        sgid_index: self.engine.gid_index(&p.path.local_gid)?,
                        hop_limit: p.path.hop_limit,
                        traffic_class: p.path.traffic_class,
                        flow_label: p.path.flow_label,
                    }),
                    ..QpModify::default()
                }
            }
            QpTransition::Rts(p) => QpModify {
                state: Some(QpState::Rts),
                sq_psn: Some(p.sq_psn),
                max_rd_atomic: Some(p.max_rd_atomic),
                timeout: Some(p.timeout),
                retry_cnt: Some(p.retry_count),
                rnr_retry: Some(p.rnr_retry),
                ..QpModify::default()
            },
            QpTransition::Error => QpModify {
                state: Some(QpState::Err),
                ..QpModify::default()
            },
        })
    }

    fn modified(&self, qp: &ObjRef<Qp>, t: &QpTransition, r: Result<(), PvrdmaError>) {
        match (t, r) {
            (QpTransition::Rts(_), Ok(())) => qp.set_connected(true),
            (QpTransition::Error, _) => qp.set_connected(false),
            (_, Ok(())) => {}
            (_, Err(_)) => self.fail(NdkError::Device),
        }
    }

    /// The QP could not be taken where the CM needs it: the connection ends here (its
    /// queued actions are dropped, the CM connection released) and the pending request, if
    /// any, fails with `e`.
    fn fail(&self, e: NdkError) {
        self.wire.lock().clear();
        let (conn, request, attempt, established) = {
            let mut l = self.link.lock();
            let established = l.phase == Phase::Established;
            l.phase = Phase::Done;
            (l.conn, l.request.take(), l.end_attempt(), established)
        };
        if attempt {
            self.engine.conn_stats().attempt_failed();
        } else if established {
            self.engine.conn_stats().connection_error();
        }
        if let Some(conn) = conn {
            self.engine.release(conn);
        }
        if let Some(r) = request {
            r.complete(Err(e));
        }
    }

    /// A CM event for this connection (with no lock held).
    fn on_event(&self, e: Event) {
        let mut complete: Option<(Arc<RequestHandoff>, NdkResult<()>)> = None;
        let mut notify = None;
        // What the event does to the counters (ndk::conn_stats), applied with no lock held.
        let (mut established, mut failed, mut broken) = (None, false, false);
        {
            let mut l = self.link.lock();
            let take = |l: &mut Link, r: NdkResult<()>| l.request.take().map(|q| (q, r));
            match (l.phase, e) {
                (Phase::Connecting, Event::Accepted) => {
                    l.phase = Phase::Replied;
                    complete = take(&mut l, Ok(()));
                }
                (Phase::Connecting, Event::Rejected { .. }) => {
                    l.phase = Phase::Done;
                    failed = l.end_attempt();
                    complete = take(&mut l, Err(NdkError::ConnectionRefused));
                }
                (Phase::Connecting, Event::TimedOut) => {
                    l.phase = Phase::Done;
                    failed = l.end_attempt();
                    complete = take(&mut l, Err(NdkError::IoTimeout));
                }
                (Phase::Replied | Phase::Incoming, Event::Rejected { .. }) => {
                    l.aborted = true;
                    failed = l.end_attempt();
                }
                (Phase::Accepting, Event::Established) => {
                    l.phase = Phase::Established;
                    if l.end_attempt() {
                        established = Some(true);
                    }
                    complete = take(&mut l, Ok(()));
                }
                (Phase::Accepting, Event::Rejected { .. }) => {
                    l.phase = Phase::Done;
                    l.aborted = true;
                    failed = l.end_attempt();
                    complete = take(&mut l, Err(NdkError::ConnectionAborted));
                }
                (Phase::Accepting, Event::TimedOut) => {
                    l.phase = Phase::Done;
                    failed = l.end_attempt();
                    complete = take(&mut l, Err(NdkError::IoTimeout));
                }
                (
                    Phase::Established,
                    Event::DisconnectRequested | Event::Rejected { .. } | Event::TimedOut,
                ) => {
                    // NdkCompleteConnect's own count may not have run yet: the connection
                    // was established before it ended.
                    if l.end_attempt() {
                        established = Some(false);
                    }
                    broken = !matches!(e, Event::DisconnectRequested);
                    l.phase = Phase::PeerClosed;
                    if !l.notified {
                        l.notified = true;
                        notify = l.disconnect;
                    }
                }
                (Phase::Disconnecting, Event::Disconnected { timed_out }) => {
                    l.phase = Phase::Done;
                    let r = if timed_out {
                        Err(NdkError::IoTimeout)
                    } else {
                        Ok(())
                    };
                    complete = take(&mut l, r);
                }
                (Phase::Disconnecting, Event::Rejected { .. } | Event::DisconnectRequested) => {
                    // A crossing DREQ or an abort also ends our disconnect (the CM then
                    // reports `Disconnected` for the DREQ; an abort has nothing more).
                    if matches!(e, Event::Rejected { .. }) {
                        l.phase = Phase::Done;
                        complete = take(&mut l, Ok(()));
                    }
                }
                _ => {}
            }
        }
        let stats = self.engine.conn_stats();
        if let Some(passive) = established {
            stats.established(passive);
        }
        if failed {
            stats.attempt_failed();
        }
        if broken {
            stats.connection_error();
        }
        if let Some((r, st)) = complete {
            r.complete(st);
        }
        if let Some(cb) = notify {
            // A count for the callback: the consumer may close the connector from it.
            if self.life.try_get() {
                upcall::disconnect_event(cb);
                self.put();
            }
        }
    }
}
