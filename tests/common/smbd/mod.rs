//! SMB Direct ([MS-SMBD]) as a consumer of the provider: the transport Windows' SMB client and
//! server run over NDK (docs/reference/smb-direct.md §1.4), driven only through the NDK
//! dispatch tables (tests/common/ndk), both roles, so two simulated hosts can run it against
//! each other and one of them can meet Linux's ksmbd in the guest (docs/PEER.md).
//!
//! - [`wire`]: the three MS-SMBD messages (negotiate request and response, data transfer) and
//!   the buffer descriptor, little-endian as the spec lays them out.
//! - [`transport`]: [`transport::Smbd`], one connection: negotiate, credits, fragmentation and
//!   reassembly, keepalive, RDMA READ/WRITE of a peer's buffers (server) and buffers registered
//!   with NdkFastRegister and invalidated remotely or locally (client).
//!
//! Windows' defaults (MS-SMBD Appendix B <2>) are [`SmbdConfig::windows`].
#![allow(dead_code)]

pub mod client;
pub mod ntlm;
pub mod responder;
pub mod smb2;
pub mod transport;
pub mod wire;

use std::time::Duration;

use pvrdma_ndk::ndkpi::NTSTATUS;

/// MS-SMBD's one version, 1.0.
pub const SMBD_VERSION: u16 = 0x0100;
/// SMB Direct's port on InfiniBand and RoCE (5445 only on iWARP; smb-direct.md §1.4).
pub const SMBD_PORT: u16 = 445;

/// One side's MS-SMBD parameters (the spec's ADM, 3.1.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmbdConfig {
    /// ReceiveCreditMax: receives posted, the most credits the peer may hold.
    pub receive_credit_max: u16,
    /// SendCreditTarget: credits asked of the peer (CreditsRequested).
    pub send_credit_target: u16,
    /// MaxSendSize: the largest message this side sends (header included).
    pub max_send_size: u32,
    /// MaxReceiveSize: the size of each posted receive.
    pub max_receive_size: u32,
    /// MaxFragmentedSize: the largest reassembled upper-layer message accepted.
    pub max_fragmented_size: u32,
    /// MaxReadWriteSize: the largest RDMA transfer per request (a server's, in its response).
    pub max_read_write_size: u32,
    /// KeepaliveInterval: idle time after which a keepalive asks the peer for a response; a
    /// second interval without any message from the peer ends the connection.
    pub keepalive_interval: Duration,
    /// Inbound and outbound RDMA READ limits asked at connect (IRD, ORD).
    pub ird: u32,
    pub ord: u32,
}

impl SmbdConfig {
    /// Windows' defaults (MS-SMBD Appendix B <2>): 255 credits each way, MaxSendSize 1364,
    /// MaxReceiveSize 8192, MaxFragmentedRecvSize 1 MiB, MaxReadWriteSize 1 MiB, keepalive
    /// every 120 s; IRD/ORD 16 (this provider's maximum; Linux's ksmbd asks 8).
    pub fn windows() -> SmbdConfig {
        SmbdConfig {
            receive_credit_max: 255,
            send_credit_target: 255,
            max_send_size: 1364,
            max_receive_size: 8192,
            max_fragmented_size: 1 << 20,
            max_read_write_size: 1 << 20,
            keepalive_interval: Duration::from_secs(120),
            ird: 16,
            ord: 16,
        }
    }
}

/// Why a transport operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmbdError {
    /// An NDK call or completion failed: what, and its status.
    Ndk(&'static str, NTSTATUS),
    /// The peer broke a rule of MS-SMBD (the connection is terminated).
    Protocol(String),
    /// The negotiate response carried this status.
    Refused(NTSTATUS),
    /// A message larger than the peer's MaxFragmentedSize (nothing was sent).
    TooLarge { len: usize, max: u32 },
    /// The connection is gone (disconnected, or a keepalive went unanswered).
    Disconnected(&'static str),
}

impl std::fmt::Display for SmbdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SmbdError::Ndk(what, st) => write!(f, "{what}: NTSTATUS {:#010x}", *st as u32),
            SmbdError::Protocol(s) => write!(f, "MS-SMBD protocol error: {s}"),
            SmbdError::Refused(st) => write!(f, "negotiate refused: {:#010x}", *st as u32),
            SmbdError::TooLarge { len, max } => {
                write!(
                    f,
                    "message of {len} B exceeds the peer's MaxFragmentedSize {max}"
                )
            }
            SmbdError::Disconnected(why) => write!(f, "disconnected: {why}"),
        }
    }
}
