//! The CM state machine (cm.md §6), sans-IO: inputs are calls with the time as an argument,
//! outputs are queued [`Action`]s and a timer deadline. See the module docs of `cm` for how
//! the NDK layer drives it.
//!
//! Memory: every table is allocated once by [`Cm::new`] (connections, listeners, the action
//! queue); no input allocates, so a flood of bogus MADs costs nothing that outlives it.
#![deny(unsafe_code)]

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};

use super::addr::{CmaAddrs, CmaHdr, Gid, roce_flow_label, tcp_port, tcp_service_id};
use super::limits::{ReadLimits, active_effective, passive_offer, rep_limits};
use super::msg::{
    Drep, Dreq, Message, Mra, REP_PRIVATE_DATA, Rej, Rep, Req, Rtu, msg_code, parse_any,
};
use super::timing::{ack_timeout, timeout_ns};
use super::wire::{BODY, MAD_LEN, attr, be32, new_cm_mad};
use super::{CmError, Dropped, reject_reason};

/// Most private data a connect may carry: the REQ's 92 bytes less the cma_hdr (cm.md §1.3).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Most private data an accept may carry (the REP field; the NDK limit of 148 is stricter).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = REP_PRIVATE_DATA;
/// Most private data a reject may carry.
pub const MAX_REJECT_PRIVATE_DATA: usize = super::msg::REJ_PRIVATE_DATA;
/// Largest connection table: the slot index takes the low bits of a communication ID.
pub const MAX_CAPACITY: usize = 1 << 16;
/// No input queues more actions than this; each input first checks there is room for them.
pub const MAX_ACTIONS_PER_INPUT: usize = 4;

/// The CM's fixed parameters, per adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// Connection table size (every state, TIMEWAIT included). 1 ..= [`MAX_CAPACITY`].
    pub capacity: usize,
    /// Listener table size.
    pub listeners: usize,
    /// Action queue size; at least [`MAX_ACTIONS_PER_INPUT`].
    pub actions: usize,
    /// The adapter's node GUID (REQ/REP Local CA GUID, REJ 4's ARI).
    pub ca_guid: u64,
    /// A random value chosen when the adapter starts: communication IDs are XORed with it
    /// (cm.md §6.4), so they neither start at 1 nor repeat across adapter restarts.
    pub id_seed: u32,
    /// High 32 bits of every transaction ID this CM starts (cm.md §6.5).
    pub tid_high: u32,
    /// The device's local CA ACK delay (REP Target ACK Delay; ACK timeout computations).
    pub ca_ack_delay: u8,
    /// The adapter's IRD/ORD maxima (MaxInboundReadLimit, MaxOutboundReadLimit).
    pub adapter_max: ReadLimits,
    /// REQ Local and Remote CM Response Timeout (rdma_cm: 20).
    pub cm_response_timeout: u8,
    /// REQ Max CM Retries (rdma_cm: 15): a REQ goes out 1 + this many times.
    pub max_cm_retries: u8,
    /// Path packet lifetime exponent (rdma_cm on RoCE: 18).
    pub packet_life_time: u8,
    /// Service Timeout of the MRAs this CM sends (rdma_cm: 24, ≈ 68.7 s).
    pub mra_service_timeout: u8,
    /// The largest path MTU code (1 = 256 … 5 = 4096) this side runs connections at: a REQ
    /// asking more is refused with REJ 26 (Invalid MTU), since the peer's packets would
    /// exceed what this port carries (Linux rdma_cm accepts the REQ's value unchecked). 5 by
    /// default; the miniport sets its operational `*NetworkDirectRoCEFrameSize`.
    pub max_path_mtu: u8,
}

impl CmConfig {
    /// rdma_cm's RoCE values (cm.md §6.3) for a table of `capacity` connections.
    pub const fn rdma_cm_defaults(capacity: usize, ca_guid: u64, id_seed: u32) -> Self {
        Self {
            capacity,
            listeners: 16,
            actions: 64,
            ca_guid,
            id_seed,
            tid_high: id_seed.rotate_left(16),
            ca_ack_delay: 15,
            adapter_max: ReadLimits::new(16, 16),
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 18,
            mra_service_timeout: 24,
            max_path_mtu: 5,
        }
    }
}

/// The address a CM MAD travels: this side's GID and the peer's (RoCEv2: IP addresses,
/// cm.md §2.3), with the IP fields of the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Path {
    /// This side's GID (the source of what we send).
    pub local_gid: Gid,
    /// The peer's GID.
    pub remote_gid: Gid,
    /// IP hop limit / TTL.
    pub hop_limit: u8,
    /// IP traffic class / TOS.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits): the connection's, from the REQ (cm.md §3.2); 0 for a MAD.
    pub flow_label: u32,
}

/// A connection: its local communication ID, which is unique among live connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// A listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId {
    index: u32,
    generation: u32,
}

/// The CM states (cm.md §6.1, Linux `enum ib_cm_state`; LISTEN is the listener table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No exchange in progress (before connect, or after a failure).
    Idle,
    /// Active: REQ sent, waiting for REP or REJ.
    ReqSent,
    /// Passive: REQ received. Never held here: like rdma_cm, this CM moves on to
    /// MRA_REQ_SENT as it hands the request to the consumer.
    ReqRcvd,
    /// Passive: the consumer has the request; a duplicate REQ is answered with an MRA.
    MraReqSent,
    /// Active: the peer MRAed our REQ.
    MraReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received. Never held here: this CM moves on to MRA_REP_SENT as it hands
    /// the REP to the consumer.
    RepRcvd,
    /// Active: the consumer has the REP; a duplicate REP is answered with an MRA.
    MraRepSent,
    /// Passive: the peer MRAed our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, waiting for the consumer's disconnect.
    DreqRcvd,
    /// Closed; the communication ID is held and stale REQs get REJ 10.
    Timewait,
}

impl State {
    /// REQ_SENT, MRA_REQ_RCVD, REQ_RCVD, MRA_REQ_SENT (cm.md §6.1).
    pub const fn is_req_phase(self) -> bool {
        matches!(
            self,
            Self::ReqSent | Self::MraReqRcvd | Self::ReqRcvd | Self::MraReqSent
        )
    }
}

/// What the caller does to the connection's QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTransition {
    /// INIT → RTR.
    Rtr(RtrParams),
    /// RTR → RTS.
    Rts(RtsParams),
    /// Any state → ERR (flushes outstanding requests).
    Error,
}

/// The RTR attributes, from the peer's REQ or REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrParams {
    /// The peer's QPN.
    pub remote_qpn: u32,
    /// The PSN we expect first: the Starting PSN of the CM message we sent (REQ or REP).
    pub rq_psn: u32,
    /// Path MTU code (1 = 256 … 5 = 4096), from the REQ.
    pub path_mtu: u8,
    /// Inbound RDMA READs accepted (our final IRD).
    pub max_dest_rd_atomic: u8,
    /// Where the peer is.
    pub path: Path,
}

/// The RTS attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsParams {
    /// The PSN we send first: the Starting PSN of the CM message the peer sent.
    pub sq_psn: u32,
    /// Outbound RDMA READs (our final ORD).
    pub max_rd_atomic: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
}

/// What the consumer of a connection learns (the NDK layer turns these into completions and
/// callbacks; see the status table in the `cm` module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Passive: a REQ for `listener` passed every check (NdkConnectEventCallback).
    ConnectRequest {
        /// The listener whose address it matched.
        listener: ListenerId,
    },
    /// Active: the peer accepted (REP); NdkConnect completes. The QP has been moved to RTS.
    Accepted,
    /// Passive: RTU (or first data) received; NdkAccept completes.
    Established,
    /// The peer rejected (REJ); its private data is in [`Cm::peer_private_data`].
    Rejected {
        /// `ib_cm_rej_reason` (cm.md §4).
        reason: u16,
    },
    /// REQ or REP retries exhausted.
    TimedOut,
    /// The peer sent a DREQ (NdkDisconnectEventCallback).
    DisconnectRequested,
    /// The local disconnect finished (DREP, crossing DREQ, or `timed_out`).
    Disconnected {
        /// DREQ retries exhausted.
        timed_out: bool,
    },
}

/// One thing for the caller to do, in queue order.
// The MAD is inline on purpose: the queue is allocated once, and a boxed MAD would be an
// allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `mad` on QP1 to `path` (Q_Key 0x80010000, P_Key 0xFFFF).
    Send {
        /// The connection the MAD belongs to (its local communication ID is this one), so
        /// it goes out behind that connection's MODIFY_QPs in flight; `None` for a
        /// connectionless reply (a REJ to a REQ we hold nothing for, the DREP to a DREQ of
        /// a connection we do not have).
        conn: Option<ConnId>,
        /// Where.
        path: Path,
        /// The 256-byte MAD.
        mad: [u8; MAD_LEN],
    },
    /// Modify the QP `qpn` of `conn`. A `Send` queued after it for the same connection goes
    /// out only once the modify has completed.
    ModifyQp {
        /// The connection.
        conn: ConnId,
        /// Its local QPN.
        qpn: u32,
        /// The transition.
        transition: QpTransition,
    },
    /// Tell the consumer of `conn`.
    Deliver {
        /// The connection.
        conn: ConnId,
        /// What happened.
        event: Event,
    },
}

/// Active-side request (NdkConnect).
#[derive(Debug, Clone, Copy)]
pub struct ConnectParams<'a> {
    /// Local IP and port (the port goes into the cma_hdr).
    pub src: SocketAddr,
    /// The peer's IP and port (the port selects the service ID).
    pub dst: SocketAddr,
    /// The path to the peer (GIDs = `src`/`dst` IPs, cm.md §9.1).
    pub path: Path,
    /// Our QPN.
    pub local_qpn: u32,
    /// Our starting PSN.
    pub starting_psn: u32,
    /// The consumer's IRD/ORD (capped by the adapter maxima here).
    pub limits: ReadLimits,
    /// Path MTU code.
    pub path_mtu: u8,
    /// Transport retry count (≤ 7).
    pub retry_count: u8,
    /// RNR retry count (≤ 7).
    pub rnr_retry_count: u8,
    /// ≤ [`MAX_CONNECT_PRIVATE_DATA`] bytes.
    pub private_data: &'a [u8],
}

/// Passive-side acceptance (NdkAccept).
#[derive(Debug, Clone, Copy)]
pub struct AcceptParams<'a> {
    /// Our QPN.
    pub local_qpn: u32,
    /// Our starting PSN.
    pub starting_psn: u32,
    /// The consumer's IRD/ORD (capped here, cm.md §1.4).
    pub limits: ReadLimits,
    /// RNR retry count the peer should use towards us (≤ 7).
    pub rnr_retry_count: u8,
    /// ≤ [`MAX_ACCEPT_PRIVATE_DATA`] bytes.
    pub private_data: &'a [u8],
}

#[derive(Clone, Copy)]
struct Listener {
    generation: u32,
    live: bool,
    port: u16,
    bound: IpAddr,
    paused: bool,
}

#[derive(Clone)]
struct Conn {
    id: u32,
    generation: u32,
    state: State,
    owned: bool,
    passive: bool,
    listener: Option<ListenerId>,
    path: Path,
    remote_id: u32,
    remote_guid: u64,
    req_tid: u64,
    dreq_tid: u64,
    local_qpn: u32,
    local_psn: u32,
    remote_qpn: u32,
    remote_psn: u32,
    path_mtu: u8,
    retry_count: u8,
    rnr_retry: u8,
    ack_timeout: u8,
    requested: ReadLimits,
    negotiated: Option<ReadLimits>,
    local_addr: Option<SocketAddr>,
    peer_addr: Option<SocketAddr>,
    per_try_ns: u64,
    max_retries: u8,
    retries_left: u8,
    deadline: Option<u64>,
    timewait_ns: u64,
    reject_reason: Option<u16>,
    retx: [u8; MAD_LEN],
    peer_data: [u8; REP_PRIVATE_DATA],
    peer_data_len: usize,
}

impl Conn {
    /// The RTR and RTS attributes of this connection's QP, with `limits` the negotiated
    /// IRD/ORD. A CM message's Starting PSN is the PSN its *sender* will receive (cm.md §1.5):
    /// Linux's `ib_send_cm_req` and `ib_send_cm_rep` set the sender's `rq_psn` from the
    /// Starting PSN they send, and `cm_req_handler` and `cm_rep_handler` set the receiver's
    /// `sq_psn` from the one they receive (drivers/infiniband/core/cm.c). So our receive
    /// queue starts at the PSN we sent and our send queue at the peer's.
    fn transitions(&self, limits: ReadLimits) -> (RtrParams, RtsParams) {
        let rtr = RtrParams {
            remote_qpn: self.remote_qpn,
            rq_psn: self.local_psn,
            path_mtu: self.path_mtu,
            max_dest_rd_atomic: limits.inbound,
            path: self.path,
        };
        let rts = RtsParams {
            sq_psn: self.remote_psn,
            max_rd_atomic: limits.outbound,
            timeout: self.ack_timeout,
            retry_count: self.retry_count,
            rnr_retry: self.rnr_retry,
        };
        (rtr, rts)
    }

    const fn empty() -> Self {
        Self {
            id: 0,
            generation: 0,
            state: State::Idle,
            owned: false,
            passive: false,
            listener: None,
            path: Path {
                local_gid: [0; 16],
                remote_gid: [0; 16],
                hop_limit: 0,
                traffic_class: 0,
                flow_label: 0,
            },
            remote_id: 0,
            remote_guid: 0,
            req_tid: 0,
            dreq_tid: 0,
            local_qpn: 0,
            local_psn: 0,
            remote_qpn: 0,
            remote_psn: 0,
            path_mtu: 0,
            retry_count: 0,
            rnr_retry: 0,
            ack_timeout: 0,
            requested: ReadLimits::new(0, 0),
            negotiated: None,
            local_addr: None,
            peer_addr: None,
            per_try_ns: 0,
            max_retries: 0,
            retries_left: 0,
            deadline: None,
            timewait_ns: 0,
            reject_reason: None,
            retx: [0; MAD_LEN],
            peer_data: [0; REP_PRIVATE_DATA],
            peer_data_len: 0,
        }
    }

    fn reset(&mut self) {
        let generation = self.generation;
        *self = Self::empty();
        self.generation = generation;
    }

    fn set_peer_data(&mut self, data: &[u8]) {
        let len = data.len().min(self.peer_data.len());
        self.peer_data.fill(0);
        if let (Some(dst), Some(src)) = (self.peer_data.get_mut(..len), data.get(..len)) {
            dst.copy_from_slice(src);
        }
        self.peer_data_len = len;
    }

    fn arm(&mut self, now: u64, per_try_ns: u64, retries: u8) {
        self.per_try_ns = per_try_ns;
        self.retries_left = retries;
        self.deadline = Some(now.saturating_add(per_try_ns));
    }
}

/// The connection manager of one adapter. Not thread-safe by itself: the NDK layer holds it
/// under one lock and performs the queued actions after dropping that lock.
pub struct Cm {
    cfg: CmConfig,
    conns: Vec<Conn>,
    free: Vec<u32>,
    slot_bits: u32,
    listeners: Vec<Listener>,
    actions: VecDeque<Action>,
}

impl core::fmt::Debug for Cm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cm")
            .field("capacity", &self.cfg.capacity)
            .field("live", &self.live_connections())
            .field("actions", &self.actions.len())
            .finish()
    }
}

impl Cm {
    /// A CM with every table allocated.
    ///
    /// # Errors
    /// [`CmError::InvalidParameter`] for a capacity of 0 or above [`MAX_CAPACITY`] or an
    /// action queue below [`MAX_ACTIONS_PER_INPUT`]; [`CmError::NoMemory`] if an allocation
    /// fails.
    pub fn new(cfg: CmConfig) -> Result<Self, CmError> {
        if cfg.capacity == 0 || cfg.capacity > MAX_CAPACITY || cfg.actions < MAX_ACTIONS_PER_INPUT {
            return Err(CmError::InvalidParameter);
        }
        let mut conns = Vec::new();
        conns
            .try_reserve_exact(cfg.capacity)
            .map_err(|_| CmError::NoMemory)?;
        let mut free = Vec::new();
        free.try_reserve_exact(cfg.capacity)
            .map_err(|_| CmError::NoMemory)?;
        for slot in 0..cfg.capacity {
            let mut conn = Conn::empty();
            // Seeded generations: the first IDs of two adapters differ even with equal seeds
            // in their low bits.
            conn.generation = cfg.id_seed.rotate_right(7) ^ (slot as u32).wrapping_mul(0x9E37);
            conns.push(conn);
        }
        // Slots are taken from the end of `free`: the lowest slot first.
        for slot in (0..cfg.capacity).rev() {
            free.push(slot as u32);
        }
        let mut listeners = Vec::new();
        listeners
            .try_reserve_exact(cfg.listeners)
            .map_err(|_| CmError::NoMemory)?;
        for _ in 0..cfg.listeners {
            listeners.push(Listener {
                generation: 0,
                live: false,
                port: 0,
                bound: IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED),
                paused: false,
            });
        }
        let mut actions = VecDeque::new();
        actions
            .try_reserve_exact(cfg.actions)
            .map_err(|_| CmError::NoMemory)?;
        let slot_bits = usize::BITS - (cfg.capacity - 1).leading_zeros();
        Ok(Self {
            cfg,
            conns,
            free,
            slot_bits,
            listeners,
            actions,
        })
    }

    /// The configuration.
    pub const fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// Connections holding a slot (any state, TIMEWAIT included).
    pub fn live_connections(&self) -> usize {
        self.cfg.capacity - self.free.len()
    }

    /// Live listeners.
    pub fn live_listeners(&self) -> usize {
        self.listeners.iter().filter(|l| l.live).count()
    }

    /// The next queued action.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Queued actions.
    pub fn pending_actions(&self) -> usize {
        self.actions.len()
    }

    /// The earliest deadline of any connection: call [`Cm::on_timer`] then (a deadline in
    /// the past means now, e.g. after `on_timer` stopped for a full action queue).
    pub fn next_timer(&self) -> Option<u64> {
        self.conns
            .iter()
            .filter(|c| c.id != 0)
            .filter_map(|c| c.deadline)
            .min()
    }

    // ----- consumer requests -----

    /// Starts listening on TCP-space `port` at `bound` (an unspecified IPv4 address accepts
    /// IPv4 only; an unspecified IPv6 address accepts both families, as Linux with
    /// bindv6only = 0).
    ///
    /// # Errors
    /// [`CmError::AddressInUse`] when a listener on `port` overlaps `bound`;
    /// [`CmError::TableFull`] when the listener table is full.
    pub fn listen(&mut self, port: u16, bound: IpAddr) -> Result<ListenerId, CmError> {
        let overlaps = |l: &Listener| {
            l.live
                && l.port == port
                && (l.bound == bound || l.bound.is_unspecified() || bound.is_unspecified())
        };
        if self.listeners.iter().any(overlaps) {
            return Err(CmError::AddressInUse);
        }
        let (index, slot) = self
            .listeners
            .iter_mut()
            .enumerate()
            .find(|(_, l)| !l.live)
            .ok_or(CmError::TableFull)?;
        slot.generation = slot.generation.wrapping_add(1);
        slot.live = true;
        slot.port = port;
        slot.bound = bound;
        slot.paused = false;
        Ok(ListenerId {
            index: index as u32,
            generation: slot.generation,
        })
    }

    /// Stops `listener`: new REQs for it are rejected at once (ndkpi.md §5.11); connections
    /// it already delivered are unaffected.
    ///
    /// # Errors
    /// [`CmError::UnknownListener`].
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), CmError> {
        let l = self.listener_mut(listener)?;
        l.live = false;
        Ok(())
    }

    /// NdkControlConnectEvents: a paused listener is treated as absent (REJ 8).
    ///
    /// # Errors
    /// [`CmError::UnknownListener`].
    pub fn pause(&mut self, listener: ListenerId, paused: bool) -> Result<(), CmError> {
        self.listener_mut(listener)?.paused = paused;
        Ok(())
    }

    /// NdkConnect: sends the REQ (cma_hdr + `private_data`) and arms its retransmission.
    ///
    /// # Errors
    /// [`CmError::PrivateDataTooLong`], [`CmError::AddressFamily`] (`src`/`dst` differ),
    /// [`CmError::QueueFull`], [`CmError::TableFull`].
    pub fn connect(&mut self, now: u64, p: &ConnectParams<'_>) -> Result<ConnId, CmError> {
        if p.private_data.len() > MAX_CONNECT_PRIVATE_DATA {
            return Err(CmError::PrivateDataTooLong);
        }
        let addrs = CmaAddrs {
            src: p.src,
            dst: p.dst.ip(),
        };
        let mut hdr = [0u8; super::addr::CMA_HDR_LEN];
        CmaHdr::new_unchecked(&mut hdr[..])
            .emit(&addrs)
            .map_err(|_| CmError::AddressFamily)?;
        self.check_room()?;
        let slot = self.alloc()?;
        let cfg = self.cfg;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(CmError::TableFull);
        };
        c.owned = true;
        c.path = p.path;
        c.path.flow_label = roce_flow_label(p.src.port(), p.dst.port());
        c.local_qpn = p.local_qpn & 0xFF_FFFF;
        c.local_psn = p.starting_psn & 0xFF_FFFF;
        c.path_mtu = p.path_mtu;
        c.retry_count = p.retry_count & 7;
        c.requested = ReadLimits::new(
            p.limits.inbound.min(cfg.adapter_max.inbound),
            p.limits.outbound.min(cfg.adapter_max.outbound),
        );
        c.ack_timeout = ack_timeout(cfg.ca_ack_delay, cfg.packet_life_time);
        c.local_addr = Some(p.src);
        c.peer_addr = Some(p.dst);
        c.req_tid = (u64::from(cfg.tid_high) << 32) | u64::from(c.id);
        c.timewait_ns = timeout_ns(cfg.packet_life_time.saturating_add(1));

        let mut mad = new_cm_mad(attr::REQ, c.req_tid);
        let mut req = Req::new_unchecked(&mut mad[..]);
        req.set_local_comm_id(c.id);
        req.set_service_id(tcp_service_id(p.dst.port()));
        req.set_local_ca_guid(cfg.ca_guid);
        req.set_local_qpn(c.local_qpn);
        req.set_responder_resources(c.requested.inbound);
        req.set_initiator_depth(c.requested.outbound);
        req.set_remote_cm_response_timeout(cfg.cm_response_timeout);
        req.set_starting_psn(c.local_psn);
        req.set_local_cm_response_timeout(cfg.cm_response_timeout);
        req.set_retry_count(c.retry_count);
        req.set_pkey(0xFFFF);
        req.set_path_mtu(p.path_mtu);
        req.set_rnr_retry_count(p.rnr_retry_count);
        req.set_max_cm_retries(cfg.max_cm_retries);
        req.set_primary_local_lid(0xFFFF);
        req.set_primary_remote_lid(0xFFFF);
        req.set_primary_local_gid(p.path.local_gid);
        req.set_primary_remote_gid(p.path.remote_gid);
        req.set_primary_flow_label(c.path.flow_label);
        req.set_primary_traffic_class(p.path.traffic_class);
        req.set_primary_hop_limit(p.path.hop_limit);
        req.set_primary_local_ack_timeout(c.ack_timeout);
        let pd = req.private_data_mut();
        if let Some(dst) = pd.get_mut(..hdr.len()) {
            dst.copy_from_slice(&hdr);
        }
        if let Some(dst) = pd
            .get_mut(hdr.len()..)
            .and_then(|rest| rest.get_mut(..p.private_data.len()))
        {
            dst.copy_from_slice(p.private_data);
        }
        c.retx = mad;
        c.state = State::ReqSent;
        let per_try = timeout_ns(cfg.packet_life_time)
            .saturating_mul(2)
            .saturating_add(timeout_ns(cfg.cm_response_timeout));
        c.max_retries = cfg.max_cm_retries;
        c.arm(now, per_try, cfg.max_cm_retries);
        let (id, path) = (c.id, c.path);
        self.push(Action::Send {
            conn: Some(ConnId(id)),
            path,
            mad,
        });
        Ok(ConnId(id))
    }

    /// NdkAccept: moves the QP to RTR and RTS with the negotiated values (cm.md §1.4),
    /// then sends the REP and arms its retransmission.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`], [`CmError::InvalidState`] (not a pending request),
    /// [`CmError::PrivateDataTooLong`], [`CmError::QueueFull`].
    pub fn accept(&mut self, now: u64, conn: ConnId, p: &AcceptParams<'_>) -> Result<(), CmError> {
        if p.private_data.len() > MAX_ACCEPT_PRIVATE_DATA {
            return Err(CmError::PrivateDataTooLong);
        }
        self.check_room()?;
        let cfg = self.cfg;
        let c = self.owned_mut(conn)?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::InvalidState);
        }
        let limits = rep_limits(p.limits, cfg.adapter_max, c.requested);
        c.negotiated = Some(limits);
        c.local_qpn = p.local_qpn & 0xFF_FFFF;
        c.local_psn = p.starting_psn & 0xFF_FFFF;
        let mut mad = new_cm_mad(attr::REP, c.req_tid);
        let mut rep = Rep::new_unchecked(&mut mad[..]);
        rep.set_local_comm_id(c.id);
        rep.set_remote_comm_id(c.remote_id);
        rep.set_local_qpn(c.local_qpn);
        rep.set_starting_psn(c.local_psn);
        rep.set_responder_resources(limits.inbound);
        rep.set_initiator_depth(limits.outbound);
        rep.set_target_ack_delay(cfg.ca_ack_delay);
        rep.set_rnr_retry_count(p.rnr_retry_count);
        rep.set_local_ca_guid(cfg.ca_guid);
        rep.set_private_data(p.private_data)
            .map_err(|_| CmError::PrivateDataTooLong)?;
        c.retx = mad;
        c.state = State::RepSent;
        let (per_try, retries) = (c.per_try_ns, c.max_retries);
        c.arm(now, per_try, retries);
        let (rtr, rts) = c.transitions(limits);
        let (qpn, path) = (c.local_qpn, c.path);
        self.push(Action::ModifyQp {
            conn,
            qpn,
            transition: QpTransition::Rtr(rtr),
        });
        self.push(Action::ModifyQp {
            conn,
            qpn,
            transition: QpTransition::Rts(rts),
        });
        self.push(Action::Send {
            conn: Some(conn),
            path,
            mad,
        });
        Ok(())
    }

    /// NdkReject: a pending request (passive, REJ for the REQ) or an accepted connect not yet
    /// completed (active, REJ for the REP; the QP goes to ERR). Reason 28, consumer reject.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`], [`CmError::InvalidState`],
    /// [`CmError::PrivateDataTooLong`], [`CmError::QueueFull`].
    pub fn reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(CmError::PrivateDataTooLong);
        }
        self.check_room()?;
        let c = self.owned_mut(conn)?;
        let rejected = match c.state {
            State::ReqRcvd | State::MraReqSent => msg_code::REQ,
            State::RepRcvd | State::MraRepSent => msg_code::REP,
            _ => return Err(CmError::InvalidState),
        };
        let mad = conn_rej(
            c,
            rejected,
            reject_reason::CONSUMER_REJECT,
            &[],
            private_data,
        );
        let (qpn, path, active) = (c.local_qpn, c.path, rejected == msg_code::REP);
        c.state = State::Idle;
        c.deadline = None;
        if active {
            self.push(Action::ModifyQp {
                conn,
                qpn,
                transition: QpTransition::Error,
            });
        }
        self.push(Action::Send {
            conn: Some(conn),
            path,
            mad,
        });
        Ok(())
    }

    /// NdkCompleteConnect: sends the RTU; the connection is established.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`], [`CmError::InvalidState`] (no REP received),
    /// [`CmError::QueueFull`].
    pub fn complete_connect(&mut self, conn: ConnId) -> Result<(), CmError> {
        self.check_room()?;
        let c = self.owned_mut(conn)?;
        if !matches!(c.state, State::RepRcvd | State::MraRepSent) {
            return Err(CmError::InvalidState);
        }
        c.state = State::Established;
        let (mad, path) = (conn_rtu(c), c.path);
        self.push(Action::Send {
            conn: Some(conn),
            path,
            mad,
        });
        Ok(())
    }

    /// The first data packet arrived on a passive QP whose RTU was lost (the device's
    /// COMM_EST event): the connection is established as if the RTU had come.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`]; [`CmError::InvalidState`] outside REP_SENT.
    pub fn established(&mut self, conn: ConnId) -> Result<(), CmError> {
        self.check_room()?;
        let c = self.owned_mut(conn)?;
        if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
            return Err(CmError::InvalidState);
        }
        c.state = State::Established;
        c.deadline = None;
        self.push(Action::Deliver {
            conn,
            event: Event::Established,
        });
        Ok(())
    }

    /// NdkDisconnect: from ESTABLISHED, QP to ERR and DREQ (retransmitted; `Disconnected`
    /// when answered or exhausted); after the peer's DREQ, QP to ERR, DREP and
    /// `Disconnected` at once.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`], [`CmError::InvalidState`], [`CmError::QueueFull`].
    pub fn disconnect(&mut self, now: u64, conn: ConnId) -> Result<(), CmError> {
        self.check_room()?;
        let tid_high = self.cfg.tid_high;
        let c = self.owned_mut(conn)?;
        match c.state {
            State::Established => {
                let (qpn, path, mad) = start_dreq(now, c, tid_high);
                self.push(Action::ModifyQp {
                    conn,
                    qpn,
                    transition: QpTransition::Error,
                });
                self.push(Action::Send {
                    conn: Some(conn),
                    path,
                    mad,
                });
            }
            State::DreqRcvd => {
                let mad = conn_drep(c, c.dreq_tid);
                enter_timewait(now, c);
                let (qpn, path) = (c.local_qpn, c.path);
                self.push(Action::ModifyQp {
                    conn,
                    qpn,
                    transition: QpTransition::Error,
                });
                self.push(Action::Send {
                    conn: Some(conn),
                    path,
                    mad,
                });
                self.push(Action::Deliver {
                    conn,
                    event: Event::Disconnected { timed_out: false },
                });
            }
            _ => return Err(CmError::InvalidState),
        }
        Ok(())
    }

    /// The consumer is done with `conn` (its connector closed): no more events for it. The
    /// wire learns as Linux `cm_destroy_id` tells it (REJ 4 from REQ_SENT, REJ 28 from a
    /// pending request or an unfinished accept, DREQ or DREP from a live connection), and
    /// the slot is freed once the connection has been through TIMEWAIT, if it needs to.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`]; [`CmError::QueueFull`] (nothing changed: retry).
    pub fn release(&mut self, now: u64, conn: ConnId) -> Result<(), CmError> {
        self.check_room()?;
        let (guid, tid_high) = (self.cfg.ca_guid, self.cfg.tid_high);
        let slot = self.owned_slot(conn)?;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(CmError::UnknownConnection);
        };
        let (qpn, path) = (c.local_qpn, c.path);
        let mut qp_error = false;
        let mut send = None;
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                send = Some(conn_rej(
                    c,
                    msg_code::OTHER,
                    reject_reason::TIMEOUT,
                    &guid.to_be_bytes(),
                    &[],
                ));
                c.state = State::Idle;
            }
            State::ReqRcvd | State::MraReqSent => {
                send = Some(conn_rej(
                    c,
                    msg_code::REQ,
                    reject_reason::CONSUMER_REJECT,
                    &[],
                    &[],
                ));
                c.state = State::Idle;
            }
            State::RepRcvd | State::MraRepSent => {
                send = Some(conn_rej(
                    c,
                    msg_code::REP,
                    reject_reason::CONSUMER_REJECT,
                    &[],
                    &[],
                ));
                c.state = State::Idle;
                qp_error = true;
            }
            State::RepSent | State::MraRepRcvd => {
                send = Some(conn_rej(
                    c,
                    msg_code::OTHER,
                    reject_reason::CONSUMER_REJECT,
                    &[],
                    &[],
                ));
                enter_timewait(now, c);
                qp_error = true;
            }
            State::Established => {
                let (_, _, mad) = start_dreq(now, c, tid_high);
                send = Some(mad);
                qp_error = true;
            }
            State::DreqRcvd => {
                send = Some(conn_drep(c, c.dreq_tid));
                enter_timewait(now, c);
                qp_error = true;
            }
            State::DreqSent | State::Timewait | State::Idle => {}
        }
        c.owned = false;
        if qp_error {
            self.push(Action::ModifyQp {
                conn,
                qpn,
                transition: QpTransition::Error,
            });
        }
        if let Some(mad) = send {
            self.push(Action::Send {
                conn: Some(conn),
                path,
                mad,
            });
        }
        self.settle(slot);
        Ok(())
    }

    // ----- queries (NdkGetConnectionData and friends) -----

    /// The state of `conn`.
    pub fn state(&self, conn: ConnId) -> Option<State> {
        self.held(conn).map(|c| c.state)
    }

    /// The peer's private data: the REQ's 56 bytes after the cma_hdr (passive), the REP's
    /// 196 (active), or the REJ's 148 after a rejection; zero-padded, fixed size (cm.md §9.4).
    pub fn peer_private_data(&self, conn: ConnId) -> Option<&[u8]> {
        let c = self.held(conn)?;
        c.peer_data.get(..c.peer_data_len)
    }

    /// The REJ reason, once rejected.
    pub fn reject_reason(&self, conn: ConnId) -> Option<u16> {
        self.held(conn)?.reject_reason
    }

    /// The read limits NdkGetConnectionData reports: passive before accept, what the peer
    /// asked for as this adapter can grant it; after accept or REP, the negotiated values.
    pub fn read_limits(&self, conn: ConnId) -> Option<ReadLimits> {
        let c = self.held(conn)?;
        match c.negotiated {
            Some(l) => Some(l),
            None if c.passive => Some(passive_offer(c.requested, self.cfg.adapter_max)),
            None => None,
        }
    }

    /// (local, peer) socket addresses: from the connect, or from the REQ's cma_hdr and
    /// service ID (passive).
    pub fn addresses(&self, conn: ConnId) -> Option<(SocketAddr, SocketAddr)> {
        let c = self.held(conn)?;
        Some((c.local_addr?, c.peer_addr?))
    }

    /// The peer's QPN (after REQ or REP).
    pub fn remote_qpn(&self, conn: ConnId) -> Option<u32> {
        self.held(conn).map(|c| c.remote_qpn)
    }

    // ----- inputs from the wire and the clock -----

    /// One MAD received on QP1 from `path` (as seen from this side: `local_gid` = the
    /// packet's destination). Replies go back to `path`.
    ///
    /// # Errors
    /// Why the MAD was dropped with no effect at all (nothing queued, no state changed).
    pub fn on_mad(&mut self, now: u64, path: &Path, bytes: &[u8]) -> Result<(), Dropped> {
        let msg = parse_any(bytes).map_err(Dropped::Malformed)?;
        if self.actions.len() + MAX_ACTIONS_PER_INPUT > self.cfg.actions {
            return Err(Dropped::QueueFull);
        }
        let tid = msg.transaction_id();
        match msg {
            Message::Req(m) => self.on_req(path, tid, &m),
            Message::Rep(m) => self.on_rep(&m),
            Message::Rtu(m) => self.on_rtu(&m),
            Message::Rej(m) => self.on_rej(now, &m),
            Message::Mra(m) => self.on_mra(now, &m),
            Message::Dreq(m) => self.on_dreq(now, path, tid, &m),
            Message::Drep(m) => self.on_drep(now, &m),
        }
    }

    /// Retransmissions, exhausted retry budgets and TIMEWAIT ends due at `now`. Stops early
    /// when the action queue is nearly full; `next_timer` then stays at or before `now`.
    pub fn on_timer(&mut self, now: u64) {
        for slot in 0..self.conns.len() {
            if self.actions.len() + MAX_ACTIONS_PER_INPUT > self.cfg.actions {
                return;
            }
            let Some(c) = self.conns.get_mut(slot) else {
                return;
            };
            match c.deadline {
                Some(d) if c.id != 0 && d <= now => {}
                _ => continue,
            }
            let conn = ConnId(c.id);
            let (qpn, path) = (c.local_qpn, c.path);
            let resend = c.retries_left > 0;
            match c.state {
                State::ReqSent
                | State::MraReqRcvd
                | State::RepSent
                | State::MraRepRcvd
                | State::DreqSent
                    if resend =>
                {
                    c.retries_left -= 1;
                    c.deadline = Some(now.saturating_add(c.per_try_ns));
                    let mad = c.retx;
                    self.push(Action::Send {
                        conn: Some(conn),
                        path,
                        mad,
                    });
                }
                State::ReqSent | State::MraReqRcvd => {
                    c.state = State::Idle;
                    c.deadline = None;
                    self.push_event(slot, Event::TimedOut);
                }
                State::RepSent | State::MraRepRcvd => {
                    c.state = State::Idle;
                    c.deadline = None;
                    self.push_modify(slot, conn, qpn, QpTransition::Error);
                    self.push_event(slot, Event::TimedOut);
                }
                State::DreqSent => {
                    enter_timewait(now, c);
                    self.push_event(slot, Event::Disconnected { timed_out: true });
                }
                State::Timewait => {
                    c.state = State::Idle;
                    c.deadline = None;
                }
                _ => c.deadline = None,
            }
            self.settle(slot);
        }
    }

    // ----- message handlers -----

    fn on_req(&mut self, path: &Path, tid: u64, req: &Req<&[u8]>) -> Result<(), Dropped> {
        let (peer_id, peer_guid) = (req.local_comm_id(), req.local_ca_guid());
        // A REQ we already hold (cm_dup_req_handler): MRA while the consumer decides, REJ 10
        // in TIMEWAIT, silence otherwise (our REP retransmits on its own).
        if let Some(slot) =
            self.find(|c| c.passive && c.remote_id == peer_id && c.remote_guid == peer_guid)
        {
            let c = self.conn(slot);
            let mad = match c.state {
                State::MraReqSent => conn_mra(c, msg_code::REQ, self.cfg.mra_service_timeout),
                // cm_format_rej outside the REQ/REP states: MsgREJected 2 (other).
                State::Timewait => conn_rej(
                    c,
                    msg_code::OTHER,
                    reject_reason::STALE_CONNECTION,
                    &[],
                    &[],
                ),
                _ => return Err(Dropped::Duplicate),
            };
            let (conn, path) = (Some(ConnId(c.id)), c.path);
            self.push(Action::Send { conn, path, mad });
            return Ok(());
        }
        // A new REQ from a (QPN, CA GUID) a live connection here already names is stale
        // (cm_insert_remote_qpn). Linux takes a connection out of that table when it enters
        // TIMEWAIT (cm_enter_timewait → cm_cleanup_timewait / cm_remove_remote), so a QP the
        // peer's device handed out again right after a disconnect connects at once; cm.md
        // §4's "(QPN, CA GUID) still in timewait" is stricter than the Linux source.
        let peer_qpn = req.local_qpn();
        if self
            .find(|c| {
                knows_remote_qpn(c.state, c.passive)
                    && c.remote_qpn == peer_qpn
                    && c.remote_guid == peer_guid
            })
            .is_some()
        {
            self.reply_rej(path, tid, req, reject_reason::STALE_CONNECTION);
            return Ok(());
        }
        let Some(port) = tcp_port(req.service_id()) else {
            self.reply_rej(path, tid, req, reject_reason::INVALID_SERVICE_ID);
            return Ok(());
        };
        if !self
            .listeners
            .iter()
            .any(|l| l.live && !l.paused && l.port == port)
        {
            self.reply_rej(path, tid, req, reject_reason::INVALID_SERVICE_ID);
            return Ok(());
        }
        // Listener exists: anything wrong from here on is rdma_cm's REJ 28 (cm.md §5.2).
        let Ok(addrs) = CmaHdr::new_unchecked(req.private_data()).addrs() else {
            self.reply_rej(path, tid, req, reject_reason::CONSUMER_REJECT);
            return Ok(());
        };
        let Some(listener) = self.match_listener(port, addrs.dst) else {
            self.reply_rej(path, tid, req, reject_reason::CONSUMER_REJECT);
            return Ok(());
        };
        if req.transport_service_type() != 0 {
            self.reply_rej(path, tid, req, reject_reason::CONSUMER_REJECT);
            return Ok(());
        }
        if !(1..=self.cfg.max_path_mtu).contains(&req.path_mtu()) {
            self.reply_rej(path, tid, req, reject_reason::INVALID_MTU);
            return Ok(());
        }
        let Ok(slot) = self.alloc() else {
            // Linux drops a REQ it cannot allocate for; the peer's retries may find room.
            return Err(Dropped::TableFull);
        };
        let cfg = self.cfg;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::TableFull);
        };
        c.owned = true;
        c.passive = true;
        c.listener = Some(listener);
        c.path = *path;
        // The connection's flow label is the active side's (Linux `cm_format_path_from_req`).
        c.path.flow_label = req.primary_flow_label();
        c.remote_id = peer_id;
        c.remote_guid = peer_guid;
        c.req_tid = tid;
        c.remote_qpn = peer_qpn;
        c.remote_psn = req.starting_psn();
        c.path_mtu = req.path_mtu();
        c.retry_count = req.retry_count();
        c.rnr_retry = req.rnr_retry_count();
        c.ack_timeout = req.primary_local_ack_timeout();
        c.requested = ReadLimits::new(req.responder_resources(), req.initiator_depth());
        c.peer_addr = Some(addrs.src);
        c.local_addr = Some(SocketAddr::new(addrs.dst, port));
        c.set_peer_data(CmaHdr::new_unchecked(req.private_data()).payload());
        c.per_try_ns = timeout_ns(req.local_cm_response_timeout());
        c.max_retries = req.max_cm_retries();
        c.timewait_ns = timeout_ns(ack_timeout(
            cfg.ca_ack_delay,
            c.ack_timeout.saturating_sub(1),
        ));
        // rdma_cm enters MRA_REQ_SENT silently after its connect callback (cm.md §4.1): the
        // MRA goes out only when a duplicate REQ shows the peer is waiting.
        c.state = State::MraReqSent;
        self.push_event(slot, Event::ConnectRequest { listener });
        Ok(())
    }

    fn on_rep(&mut self, rep: &Rep<&[u8]>) -> Result<(), Dropped> {
        let slot = self
            .lookup(rep.remote_comm_id())
            .ok_or(Dropped::UnknownConnection)?;
        let cfg = self.cfg;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::UnknownConnection);
        };
        if c.passive {
            return Err(Dropped::UnknownConnection);
        }
        if !matches!(c.state, State::ReqSent | State::MraReqRcvd) {
            // cm_dup_rep_handler: the same REP again.
            if c.remote_id != rep.local_comm_id() {
                return Err(Dropped::UnknownConnection);
            }
            let mad = match c.state {
                State::Established => conn_rtu(c),
                State::MraRepSent => conn_mra(c, msg_code::REP, cfg.mra_service_timeout),
                _ => return Err(Dropped::Duplicate),
            };
            let (conn, path) = (Some(ConnId(c.id)), c.path);
            self.push(Action::Send { conn, path, mad });
            return Ok(());
        }
        let conn = ConnId(c.id);
        c.remote_id = rep.local_comm_id();
        c.remote_guid = rep.local_ca_guid();
        c.remote_qpn = rep.local_qpn();
        c.remote_psn = rep.starting_psn();
        c.rnr_retry = rep.rnr_retry_count();
        let limits = active_effective(
            c.requested,
            ReadLimits::new(rep.responder_resources(), rep.initiator_depth()),
        );
        c.negotiated = Some(limits);
        c.ack_timeout = ack_timeout(rep.target_ack_delay(), cfg.packet_life_time);
        c.timewait_ns = timeout_ns(c.ack_timeout);
        c.set_peer_data(rep.private_data());
        c.deadline = None;
        // Lazy MRA, as on the passive side: a duplicate REP while the consumer decides
        // gets an MRA, which stretches the peer's REP timer (cm.md §6.3).
        c.state = State::MraRepSent;
        let (rtr, rts) = c.transitions(limits);
        let qpn = c.local_qpn;
        self.push_modify(slot, conn, qpn, QpTransition::Rtr(rtr));
        self.push_modify(slot, conn, qpn, QpTransition::Rts(rts));
        self.push_event(slot, Event::Accepted);
        Ok(())
    }

    fn on_rtu(&mut self, rtu: &Rtu<&[u8]>) -> Result<(), Dropped> {
        let slot = self
            .lookup(rtu.remote_comm_id())
            .ok_or(Dropped::UnknownConnection)?;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::UnknownConnection);
        };
        if c.remote_id != rtu.local_comm_id() {
            return Err(Dropped::UnknownConnection);
        }
        if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
            return Err(Dropped::WrongState);
        }
        c.state = State::Established;
        c.deadline = None;
        self.push_event(slot, Event::Established);
        Ok(())
    }

    fn on_mra(&mut self, now: u64, mra: &Mra<&[u8]>) -> Result<(), Dropped> {
        let slot = self
            .lookup(mra.remote_comm_id())
            .ok_or(Dropped::UnknownConnection)?;
        let cfg = self.cfg;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::UnknownConnection);
        };
        // cm_acquire_mraed_id: an MRA for our REQ comes before we know the peer's ID.
        let mraed = mra.message_mraed();
        if mraed != msg_code::REQ && c.remote_id != mra.local_comm_id() {
            return Err(Dropped::UnknownConnection);
        }
        let next = match (c.state, mraed) {
            (State::ReqSent, msg_code::REQ) => State::MraReqRcvd,
            (State::RepSent, msg_code::REP) => State::MraRepRcvd,
            (State::MraReqRcvd | State::MraRepRcvd, _) => return Err(Dropped::Duplicate),
            _ => return Err(Dropped::WrongState),
        };
        c.state = next;
        // The peer will answer within its service time plus a round trip; later tries wait
        // as long (Linux `ib_modify_mad` changes the send's timeout for good).
        c.per_try_ns = timeout_ns(mra.service_timeout())
            .saturating_add(timeout_ns(cfg.packet_life_time.saturating_add(1)));
        c.deadline = Some(now.saturating_add(c.per_try_ns));
        Ok(())
    }

    fn on_rej(&mut self, now: u64, rej: &Rej<&[u8]>) -> Result<(), Dropped> {
        let slot = if rej.reason() == reject_reason::TIMEOUT {
            // A REJ 4 from an active side that gave up in REQ_SENT never learnt our ID: it
            // names itself and its CA GUID (in the ARI), as cm_acquire_rejected_id matches.
            let guid = rej
                .ari()
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes);
            let peer = rej.local_comm_id();
            match guid {
                Some(g) => self
                    .find(|c| c.passive && c.remote_id == peer && c.remote_guid == g)
                    .or_else(|| self.lookup(rej.remote_comm_id())),
                None => self.lookup(rej.remote_comm_id()),
            }
        } else {
            self.lookup(rej.remote_comm_id())
        }
        .ok_or(Dropped::UnknownConnection)?;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::UnknownConnection);
        };
        // A REJ's local ID may be 0 (cm.md §4.1); a non-zero one must be the peer we know.
        let from = rej.local_comm_id();
        if from != 0 && c.remote_id != 0 && from != c.remote_id {
            return Err(Dropped::UnknownConnection);
        }
        let reason = rej.reason();
        let conn = ConnId(c.id);
        let qpn = c.local_qpn;
        let stale = reason == reject_reason::STALE_CONNECTION;
        let qp_error = match c.state {
            State::ReqSent | State::MraReqRcvd | State::ReqRcvd | State::MraReqSent => {
                if stale {
                    enter_timewait(now, c);
                } else {
                    c.state = State::Idle;
                    c.deadline = None;
                }
                false
            }
            State::RepSent | State::MraRepRcvd => {
                if stale {
                    enter_timewait(now, c);
                } else {
                    c.state = State::Idle;
                    c.deadline = None;
                }
                true
            }
            State::RepRcvd | State::MraRepSent | State::Established | State::DreqSent => {
                enter_timewait(now, c);
                true
            }
            _ => return Err(Dropped::WrongState),
        };
        c.reject_reason = Some(reason);
        c.set_peer_data(rej.private_data());
        if qp_error {
            self.push_modify(slot, conn, qpn, QpTransition::Error);
        }
        self.push_event(slot, Event::Rejected { reason });
        self.settle(slot);
        Ok(())
    }

    fn on_dreq(
        &mut self,
        now: u64,
        path: &Path,
        tid: u64,
        dreq: &Dreq<&[u8]>,
    ) -> Result<(), Dropped> {
        let known = self
            .lookup(dreq.remote_comm_id())
            .filter(|&s| self.conn(s).remote_id == dreq.local_comm_id());
        let Some(slot) = known else {
            // cm_issue_drep: a DREQ for a connection we do not have still gets its DREP.
            let mut mad = new_cm_mad(attr::DREP, tid);
            let mut drep = Drep::new_unchecked(&mut mad[..]);
            drep.set_local_comm_id(dreq.remote_comm_id());
            drep.set_remote_comm_id(dreq.local_comm_id());
            self.push(Action::Send {
                conn: None,
                path: *path,
                mad,
            });
            return Ok(());
        };
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::UnknownConnection);
        };
        if dreq.remote_qpn() != c.local_qpn {
            return Err(Dropped::QpnMismatch);
        }
        match c.state {
            State::Established | State::RepSent | State::MraRepRcvd => {
                let was_accepting = c.state != State::Established;
                c.state = State::DreqRcvd;
                c.deadline = None;
                c.dreq_tid = tid;
                if was_accepting {
                    self.push_event(slot, Event::Established);
                }
                self.push_event(slot, Event::DisconnectRequested);
            }
            State::DreqSent => {
                let mad = conn_drep(c, tid);
                enter_timewait(now, c);
                let (conn, path) = (Some(ConnId(c.id)), c.path);
                self.push(Action::Send { conn, path, mad });
                self.push_event(slot, Event::Disconnected { timed_out: false });
            }
            // IDLE: TIMEWAIT (≈ 2 s on the passive side) ended before the peer's DREQ came
            // again (6.144 s), with the consumer's connector still open; our DREP was lost.
            State::Timewait | State::Idle => {
                let mad = conn_drep(c, tid);
                let (conn, path) = (Some(ConnId(c.id)), c.path);
                self.push(Action::Send { conn, path, mad });
            }
            State::DreqRcvd => return Err(Dropped::Duplicate),
            _ => return Err(Dropped::WrongState),
        }
        Ok(())
    }

    fn on_drep(&mut self, now: u64, drep: &Drep<&[u8]>) -> Result<(), Dropped> {
        let slot = self
            .lookup(drep.remote_comm_id())
            .ok_or(Dropped::UnknownConnection)?;
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(Dropped::UnknownConnection);
        };
        if c.remote_id != drep.local_comm_id() {
            return Err(Dropped::UnknownConnection);
        }
        if c.state != State::DreqSent {
            return Err(Dropped::WrongState);
        }
        enter_timewait(now, c);
        self.push_event(slot, Event::Disconnected { timed_out: false });
        self.settle(slot);
        Ok(())
    }

    // ----- helpers -----

    /// A connectionless REJ to `req` (cm_issue_rej): its TID, the IDs swapped. Our "local
    /// ID" is therefore the REQ's bytes 4–7, as Linux sends it: 0 from a conforming peer.
    fn reply_rej(&mut self, path: &Path, tid: u64, req: &Req<&[u8]>, reason: u16) {
        let mut mad = new_cm_mad(attr::REJ, tid);
        let mut rej = Rej::new_unchecked(&mut mad[..]);
        rej.set_local_comm_id(be32(req.as_bytes(), BODY + 4));
        rej.set_remote_comm_id(req.local_comm_id());
        rej.set_message_rejected(msg_code::REQ);
        rej.set_reason(reason);
        self.push(Action::Send {
            conn: None,
            path: *path,
            mad,
        });
    }

    fn match_listener(&self, port: u16, dst: IpAddr) -> Option<ListenerId> {
        let usable = |l: &&Listener| l.live && !l.paused && l.port == port;
        let id = |(i, l): (usize, &Listener)| ListenerId {
            index: i as u32,
            generation: l.generation,
        };
        // A listener bound to the very address wins over a wildcard.
        if let Some(hit) = self
            .listeners
            .iter()
            .enumerate()
            .find(|(_, l)| usable(l) && l.bound == dst)
        {
            return Some(id(hit));
        }
        self.listeners
            .iter()
            .enumerate()
            .find(|(_, l)| {
                usable(l)
                    && match l.bound {
                        IpAddr::V4(b) => b.is_unspecified() && dst.is_ipv4(),
                        IpAddr::V6(b) => b.is_unspecified(),
                    }
            })
            .map(id)
    }

    fn listener_mut(&mut self, id: ListenerId) -> Result<&mut Listener, CmError> {
        self.listeners
            .get_mut(id.index as usize)
            .filter(|l| l.live && l.generation == id.generation)
            .ok_or(CmError::UnknownListener)
    }

    fn check_room(&self) -> Result<(), CmError> {
        if self.actions.len() + MAX_ACTIONS_PER_INPUT > self.cfg.actions {
            return Err(CmError::QueueFull);
        }
        Ok(())
    }

    /// Queues `a`; every caller checked the room first, so the queue never grows past the
    /// capacity it was created with (and so never reallocates).
    fn push(&mut self, a: Action) {
        if self.actions.len() < self.cfg.actions {
            self.actions.push_back(a);
        }
    }

    /// Events and QP changes go only to a connection's consumer while it holds it.
    fn push_event(&mut self, slot: usize, event: Event) {
        let c = self.conn(slot);
        if c.owned {
            let conn = ConnId(c.id);
            self.push(Action::Deliver { conn, event });
        }
    }

    fn push_modify(&mut self, slot: usize, conn: ConnId, qpn: u32, transition: QpTransition) {
        if self.conn(slot).owned {
            self.push(Action::ModifyQp {
                conn,
                qpn,
                transition,
            });
        }
    }

    fn conn(&self, slot: usize) -> &Conn {
        static EMPTY: Conn = Conn::empty();
        self.conns.get(slot).unwrap_or(&EMPTY)
    }

    fn find(&self, pred: impl Fn(&Conn) -> bool) -> Option<usize> {
        self.conns.iter().position(|c| c.id != 0 && pred(c))
    }

    fn slot_mask(&self) -> u32 {
        (1u32 << self.slot_bits).wrapping_sub(1)
    }

    /// The slot of live local communication ID `id`: the ID carries its slot in its low bits
    /// (under the seed), so a lookup is one load and one compare, whatever the peer sends.
    fn lookup(&self, id: u32) -> Option<usize> {
        if id == 0 {
            return None;
        }
        let slot = ((id ^ self.cfg.id_seed) & self.slot_mask()) as usize;
        self.conns.get(slot).filter(|c| c.id == id).map(|_| slot)
    }

    /// The connection while its consumer holds it (a released one answers nothing).
    fn held(&self, conn: ConnId) -> Option<&Conn> {
        self.lookup(conn.0)
            .map(|s| self.conn(s))
            .filter(|c| c.owned)
    }

    fn owned_slot(&self, conn: ConnId) -> Result<usize, CmError> {
        self.lookup(conn.0)
            .filter(|&s| self.conn(s).owned)
            .ok_or(CmError::UnknownConnection)
    }

    fn owned_mut(&mut self, conn: ConnId) -> Result<&mut Conn, CmError> {
        let slot = self.owned_slot(conn)?;
        self.conns.get_mut(slot).ok_or(CmError::UnknownConnection)
    }

    /// Takes a free slot and gives it a fresh, non-zero communication ID: the slot's
    /// generation in the high bits, the slot in the low bits, all XOR the seed. A slot is
    /// free only after TIMEWAIT, so no ID in TIMEWAIT is reissued (cm.md §6.4).
    fn alloc(&mut self) -> Result<usize, CmError> {
        let slot = *self.free.last().ok_or(CmError::TableFull)? as usize;
        let (seed, bits) = (self.cfg.id_seed, self.slot_bits);
        let Some(c) = self.conns.get_mut(slot) else {
            return Err(CmError::TableFull);
        };
        let mut id = 0;
        while id == 0 {
            c.generation = c.generation.wrapping_add(1);
            let raw = if bits >= 32 {
                slot as u32
            } else {
                (c.generation << bits) | slot as u32
            };
            id = raw ^ seed;
        }
        c.reset();
        c.id = id;
        self.free.pop();
        Ok(slot)
    }

    /// Frees `slot` once nothing needs it: no consumer and no exchange left (IDLE).
    fn settle(&mut self, slot: usize) {
        let Some(c) = self.conns.get_mut(slot) else {
            return;
        };
        if c.id != 0 && !c.owned && c.state == State::Idle {
            c.reset();
            self.free.push(slot as u32);
        }
    }
}

fn enter_timewait(now: u64, c: &mut Conn) {
    c.state = State::Timewait;
    c.deadline = Some(now.saturating_add(c.timewait_ns));
}

/// DREQ with the peer's QPN (cm.md §9.6), retransmitted like the REQ/REP of the connection.
/// Its TID is ours on either side (cm.md §6.5), never the peer's REQ TID.
fn start_dreq(now: u64, c: &mut Conn, tid_high: u32) -> (u32, Path, [u8; MAD_LEN]) {
    let tid = (u64::from(tid_high) << 32) | u64::from(c.id);
    let mut mad = new_cm_mad(attr::DREQ, tid);
    let mut dreq = Dreq::new_unchecked(&mut mad[..]);
    dreq.set_local_comm_id(c.id);
    dreq.set_remote_comm_id(c.remote_id);
    dreq.set_remote_qpn(c.remote_qpn);
    c.retx = mad;
    c.state = State::DreqSent;
    let (per_try, retries) = (c.per_try_ns, c.max_retries);
    c.arm(now, per_try, retries);
    (c.local_qpn, c.path, mad)
}

fn conn_rej(c: &Conn, rejected: u8, reason: u16, ari: &[u8], private: &[u8]) -> [u8; MAD_LEN] {
    let mut mad = new_cm_mad(attr::REJ, c.req_tid);
    let mut rej = Rej::new_unchecked(&mut mad[..]);
    rej.set_local_comm_id(c.id);
    rej.set_remote_comm_id(c.remote_id);
    rej.set_message_rejected(rejected);
    rej.set_reason(reason);
    // Both fit: callers pass at most 8 bytes of ARI and checked the private data.
    let _ = rej.set_ari(ari);
    let _ = rej.set_private_data(private);
    mad
}

fn conn_rtu(c: &Conn) -> [u8; MAD_LEN] {
    let mut mad = new_cm_mad(attr::RTU, c.req_tid);
    let mut rtu = Rtu::new_unchecked(&mut mad[..]);
    rtu.set_local_comm_id(c.id);
    rtu.set_remote_comm_id(c.remote_id);
    mad
}

fn conn_mra(c: &Conn, mraed: u8, service_timeout: u8) -> [u8; MAD_LEN] {
    let mut mad = new_cm_mad(attr::MRA, c.req_tid);
    let mut mra = Mra::new_unchecked(&mut mad[..]);
    mra.set_local_comm_id(c.id);
    mra.set_remote_comm_id(c.remote_id);
    mra.set_message_mraed(mraed);
    mra.set_service_timeout(service_timeout);
    mad
}

fn conn_drep(c: &Conn, tid: u64) -> [u8; MAD_LEN] {
    let mut mad = new_cm_mad(attr::DREP, tid);
    let mut drep = Drep::new_unchecked(&mut mad[..]);
    drep.set_local_comm_id(c.id);
    drep.set_remote_comm_id(c.remote_id);
    mad
}

/// Whether a connection in `state` holds its peer's QPN in Linux's remote-QPN table: from
/// the REQ (passive) or the REP (active) until it enters TIMEWAIT or goes idle.
const fn knows_remote_qpn(state: State, passive: bool) -> bool {
    match state {
        State::Idle | State::Timewait => false,
        State::ReqSent | State::MraReqRcvd => passive,
        _ => true,
    }
}
