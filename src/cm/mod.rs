//! The connection manager: InfiniBand CM over RoCEv2 with RDMA CM IP addressing, byte-exact
//! with Linux `ib_cm`/`rdma_cm` (docs/reference/cm.md). Sans-IO: no OS call, no clock, no
//! lock; time is an argument and every effect is a queued [`Action`].
//!
//! - [`wire`]: the 24-byte MAD header, BE field access that never panics.
//! - [`msg`]: REQ, MRA, REJ, REP, RTU, DREQ, DREP views (cm.md §3) and [`parse_any`].
//! - [`addr`]: service IDs of the TCP port space, GIDs from IPs, the 36-byte cma_hdr (§5).
//! - [`limits`]: IRD/ORD negotiation (§1.4).
//! - [`timing`]: timeout exponents as Linux converts them (§6.3).
//! - [`machine`]: the state machine [`Cm`] (§6).
//!
//! # How the NDK layer drives it (`ndk::connect`: `engine`, `connector`, `listener`)
//!
//! One [`Cm`] per device, created when the device's connection engine starts with the node
//! GUID, a random seed and the adapter's read-limit maxima, behind one spin lock; `now` is
//! nanoseconds of the platform clock. Every entry is
//! `lock; cm.<input>(now, ...); drain poll_action() into a stack batch; unlock; perform`:
//! the CM never calls out, so no consumer callback can run under the lock, and a batch is
//! bounded ([`MAX_ACTIONS_PER_INPUT`] per input).
//!
//! | NDK | CM |
//! |---|---|
//! | NdkListen / listener close / NdkControlConnectEvents | [`Cm::listen`] / [`Cm::unlisten`] / [`Cm::pause`] |
//! | NdkConnect | [`Cm::connect`] (the connector keeps the [`ConnId`]) |
//! | NdkAccept / NdkReject / NdkCompleteConnect | [`Cm::accept`] / [`Cm::reject`] / [`Cm::complete_connect`] |
//! | NdkDisconnect | [`Cm::disconnect`] |
//! | connector close | [`Cm::release`] (wire clean-up and TIMEWAIT continue inside the CM) |
//! | NdkGetConnectionData, NdkGetLocal/PeerAddress | [`Cm::peer_private_data`], [`Cm::read_limits`], [`Cm::addresses`] |
//! | QP1 receive completion (GRH stripped, 256 bytes) | [`Cm::on_mad`] with the packet's [`Path`] |
//! | a timer DPC set to [`Cm::next_timer`] | [`Cm::on_timer`] |
//! | QP async event COMM_EST (first data before the RTU) | [`Cm::established`] |
//!
//! Actions: [`Action::Send`] posts the 256-byte MAD on QP1 to the path's GID (Q_Key
//! 0x80010000); [`Action::ModifyQp`] issues MODIFY_QP (RTR/RTS with the peer's QPN, PSN,
//! MTU and the negotiated IRD/ORD; ERR on disconnect or failure), and a `Send` queued after
//! it for the same connection waits for the modify's completion; [`Action::Deliver`]
//! completes the pending request or calls the consumer's callback, as below.
//!
//! # Errors and NTSTATUS (the mapping the NDK layer implements)
//!
//! Request errors ([`CmError`]):
//!
//! | CmError | NTSTATUS |
//! |---|---|
//! | `PrivateDataTooLong` | STATUS_INVALID_BUFFER_SIZE (the NDK layer checks 56/148 first) |
//! | `InvalidState` | STATUS_CONNECTION_INVALID (CompleteConnect, Accept, Reject, Disconnect out of turn) |
//! | `UnknownConnection` | STATUS_CONNECTION_INVALID |
//! | `AddressInUse` | STATUS_SHARING_VIOLATION |
//! | `AddressFamily` | STATUS_INVALID_ADDRESS |
//! | `TableFull`, `NoMemory` | STATUS_INSUFFICIENT_RESOURCES |
//! | `QueueFull` | STATUS_DEVICE_BUSY (drain and retry; never seen if the NDK layer drains every time) |
//! | `UnknownListener`, `InvalidParameter` | STATUS_INVALID_PARAMETER |
//!
//! Outcomes ([`Event`], cm.md §1.2):
//!
//! | event, in state of the NDK request | NTSTATUS |
//! |---|---|
//! | `Accepted` for NdkConnect | STATUS_SUCCESS |
//! | `Rejected { reason }` for NdkConnect (28 consumer, 8 no listener, any other) | STATUS_CONNECTION_REFUSED; REJ private data via NdkGetConnectionData |
//! | `TimedOut` for NdkConnect | STATUS_IO_TIMEOUT |
//! | `Rejected` after `Accepted`, before or during NdkCompleteConnect | STATUS_CONNECTION_ABORTED |
//! | `Established` for NdkAccept | STATUS_SUCCESS |
//! | `Rejected` for NdkAccept | STATUS_CONNECTION_ABORTED |
//! | `TimedOut` for NdkAccept | STATUS_IO_TIMEOUT |
//! | `Rejected` before NdkAccept (peer gave up, REJ 4) | the later NdkAccept/NdkReject: STATUS_CONNECTION_ABORTED |
//! | `Disconnected { timed_out: false / true }` for NdkDisconnect | STATUS_SUCCESS / STATUS_IO_TIMEOUT |
//! | `DisconnectRequested`, or `Rejected` when established | DisconnectEvent callback, once |
#![deny(unsafe_code)]

pub mod addr;
pub mod limits;
pub mod machine;
pub mod msg;
pub mod timing;
pub mod wire;

pub use machine::{
    AcceptParams, Action, Cm, CmConfig, ConnId, ConnectParams, Event, ListenerId,
    MAX_ACTIONS_PER_INPUT, Path, QpTransition, RtrParams, RtsParams, State,
};
pub use msg::{Message, parse_any};

/// Why a buffer is not a CM message this layer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the message.
    Truncated,
    /// Longer than a 256-byte MAD.
    Oversized,
    /// BaseVersion other than 1.
    BaseVersion(u8),
    /// Not the CM management class.
    NotCmClass(u8),
    /// ClassVersion other than 2 (Linux drops it silently).
    ClassVersion(u8),
    /// Method other than SEND.
    Method(u8),
    /// The view's AttributeID differs.
    Attribute(u16),
    /// A CM attribute this layer does not implement (SIDR, LAP, APR, ...).
    Unsupported(u16),
    /// cma_hdr version other than 0.
    CmaVersion(u8),
    /// cma_hdr IP version other than 4 or 6.
    CmaIpVersion(u8),
    /// Source and destination of different address families.
    AddressFamily,
    /// More bytes than the field holds.
    TooLong,
}

/// Why a consumer request failed (see the NTSTATUS table in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// Private data longer than the message carries.
    PrivateDataTooLong,
    /// The request does not fit the connection's state.
    InvalidState,
    /// No such connection, or released.
    UnknownConnection,
    /// A listener already covers this port and address.
    AddressInUse,
    /// Source and destination address families differ.
    AddressFamily,
    /// Every connection or listener slot is taken.
    TableFull,
    /// The action queue has no room: perform the queued actions first.
    QueueFull,
    /// No such listener.
    UnknownListener,
    /// A configuration value out of range.
    InvalidParameter,
    /// An allocation at creation failed.
    NoMemory,
}

/// Why `Cm::on_mad` took no action at all on a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not a CM MAD this layer takes.
    Malformed(WireError),
    /// Names a communication ID we do not have (or not with that peer).
    UnknownConnection,
    /// A duplicate whose answer, if any, is already on its way.
    Duplicate,
    /// Not expected in the connection's state.
    WrongState,
    /// A DREQ whose Remote QPN is not our QPN (Linux ignores it too).
    QpnMismatch,
    /// No slot for a new connection (Linux drops such a REQ; the peer retries).
    TableFull,
    /// The action queue has no room; the peer's retransmission will come again.
    QueueFull,
}

/// REJ reasons this layer sends or acts on (`enum ib_cm_rej_reason`, cm.md §4).
pub mod reject_reason {
    /// No QP.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// The active side gave up (ARI: the rejecter's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// No listener for the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection (a REQ meeting TIMEWAIT).
    pub const STALE_CONNECTION: u16 = 10;
    /// Invalid GID.
    pub const INVALID_GID: u16 = 12;
    /// A path MTU this side does not carry.
    pub const INVALID_MTU: u16 = 26;
    /// Consumer reject (and every rdma_cm-level refusal).
    pub const CONSUMER_REJECT: u16 = 28;
    /// Invalid class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}
