//! What the connection engine reports to NDIS (ndkpi.md §6.6): the connection counters of
//! NDIS_NDK_PERFORMANCE_COUNTERS, and the endpoint roles OID_NDK_LOCAL_ENDPOINTS lists.
//!
//! Every connection attempt a connector makes or receives ends exactly once:
//! - **Connect**: an active connector reached Established (NdkCompleteConnect succeeded);
//! - **Accept**: a passive connector reached Established (NdkAccept completed SUCCESS);
//! - **ConnectFailure**: it ended any other way: NdkConnect completed with an error (REJ,
//!   timeout, an unreachable destination), the peer gave up after its REP, NdkAccept failed,
//!   the consumer rejected it (NdkReject) or closed the connector before it was established,
//!   or a MODIFY_QP failed on the way.
//!
//! So at any time Connect + Accept + ConnectFailure + attempts in progress = attempts made.
//! **ConnectionError** counts established connections that ended for a reason other than a
//! disconnect (the consumer's NdkDisconnect or the peer's DREQ): the peer aborted (REJ), the
//! CM timed out, or the QP could not be moved. **ActiveConnection** is not counted here: it is
//! the number of connections the engine lists (established or disconnecting,
//! [`super::engine::CmEngine::connections`]), so it and OID_NDK_CONNECTIONS agree.
//! Work-request failures on a connected QP (retries exhausted, a remote access error) reach
//! the consumer as CQE statuses; the driver registers no QP event handler, so they do not
//! count as a ConnectionError.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicU64, Ordering};

/// The counters (relaxed adds: each is a count of events, read as a whole by the OID).
#[derive(Debug, Default)]
pub struct ConnStats {
    connect: AtomicU64,
    accept: AtomicU64,
    connect_failure: AtomicU64,
    connection_error: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl ConnStats {
    /// An attempt reached Established (`passive`: an accepted one).
    pub(crate) fn established(&self, passive: bool) {
        bump(if passive { &self.accept } else { &self.connect });
    }

    /// An attempt ended without being established.
    pub(crate) fn attempt_failed(&self) {
        bump(&self.connect_failure);
    }

    /// An established connection ended with an error.
    pub(crate) fn connection_error(&self) {
        bump(&self.connection_error);
    }

    /// The counts now, with `active` connections.
    pub fn snapshot(&self, active: u64) -> ConnCounters {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConnCounters {
            connect: l(&self.connect),
            accept: l(&self.accept),
            connect_failure: l(&self.connect_failure),
            connection_error: l(&self.connection_error),
            active,
        }
    }
}

/// The connection counters of NDIS_NDK_PERFORMANCE_COUNTERS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounters {
    pub connect: u64,
    pub accept: u64,
    pub connect_failure: u64,
    pub connection_error: u64,
    pub active: u64,
}

/// Who holds a local endpoint (address:port) of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointRole {
    /// A connector's own (NdkConnect without a shared endpoint).
    Connector,
    /// A listener's (NdkListen).
    Listener,
    /// A shared endpoint's (NdkCreateSharedEndpoint).
    Shared,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        let s = ConnStats::default();
        s.established(false);
        s.established(true);
        s.established(true);
        s.attempt_failed();
        s.connection_error();
        assert_eq!(
            s.snapshot(7),
            ConnCounters {
                connect: 1,
                accept: 2,
                connect_failure: 1,
                connection_error: 1,
                active: 7
            }
        );
    }
}
