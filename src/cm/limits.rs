//! IRD/ORD negotiation (cm.md §1.4; ndkpi.md §5.10 "Read limits"), as pure functions.
//!
//! IRD (InboundReadLimit) = the RDMA READs this side accepts = the CM's Responder Resources;
//! ORD (OutboundReadLimit) = the READs this side issues = the CM's Initiator Depth. On the wire
//! each side writes its own pair; nothing here swaps them (cm.md §9.3).
#![deny(unsafe_code)]

/// One side's pair of read limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadLimits {
    /// IRD: inbound RDMA READs (Responder Resources).
    pub inbound: u8,
    /// ORD: outbound RDMA READs (Initiator Depth).
    pub outbound: u8,
}

impl ReadLimits {
    /// IRD `inbound`, ORD `outbound`.
    pub const fn new(inbound: u8, outbound: u8) -> Self {
        Self { inbound, outbound }
    }
}

/// What the passive side writes into its REP: the consumer's Accept values capped by the
/// adapter's maxima and by the REQ (our IRD by the peer's ORD, our ORD by the peer's IRD).
/// The active side adopts these unchanged, so they are the connection's final values.
pub fn rep_limits(accept: ReadLimits, adapter_max: ReadLimits, req: ReadLimits) -> ReadLimits {
    ReadLimits {
        inbound: accept.inbound.min(adapter_max.inbound).min(req.outbound),
        outbound: accept.outbound.min(adapter_max.outbound).min(req.inbound),
    }
}

/// NdkGetConnectionData on the passive side before Accept: what the peer asked for, as this
/// side could grant it (our IRD serves the peer's ORD, our ORD uses the peer's IRD).
pub fn passive_offer(req: ReadLimits, adapter_max: ReadLimits) -> ReadLimits {
    ReadLimits {
        inbound: req.outbound.min(adapter_max.inbound),
        outbound: req.inbound.min(adapter_max.outbound),
    }
}

/// The active side's effective limits after the REP: our IRD serves the peer's ORD (REP
/// Initiator Depth), our ORD uses the peer's IRD (REP Responder Resources), each capped by
/// what we asked for in the REQ (a conforming peer never exceeds it; a bogus one is capped).
pub fn active_effective(requested: ReadLimits, rep: ReadLimits) -> ReadLimits {
    ReadLimits {
        inbound: rep.outbound.min(requested.inbound),
        outbound: rep.inbound.min(requested.outbound),
    }
}
