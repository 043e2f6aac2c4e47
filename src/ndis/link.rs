//! The interface's link: state and speed from the device's port (smb-direct.md §1.3: SMB
//! ranks interfaces by speed, Get-NetAdapter shows it).
//!
//! - InitializeEx asks QUERY_PORT once: `state` ACTIVE (4) or ACTIVE_DEFER (5) is connected,
//!   anything else disconnected; the speed is `active_width` lanes at `active_speed`'s lane
//!   rate (pvrdma_verbs.h `pvrdma_port_width` / `pvrdma_port_speed`, the IB encodings,
//!   docs/reference/pvrdma.md §8 `pvrdma_port_attr`). The general attributes report it.
//! - PORT_ERR and PORT_ACTIVE async events (pvrdma.md §13) arrive in the device's async DPC:
//!   PORT_ERR indicates the link down at once (NDIS_STATUS_LINK_STATE); PORT_ACTIVE indicates
//!   it up at the last known speed and asks QUERY_PORT again, whose answer (in the command
//!   DPC) indicates a changed speed. An answer overtaken by a later event is dropped (a
//!   generation count), so the last event always wins.
//! - Nothing is indicated twice in a row with the same state and speed.
#![deny(unsafe_code)]

use alloc::sync::Weak;

use super::abi::*;
use super::miniport::Miniport;
use crate::ndk::NdkDevice;
use crate::pvrdma::cmd::PortAttr;
use crate::pvrdma::device::DeviceEvents;
use crate::pvrdma::eqe::EqeType;

/// What NDIS is told of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkState {
    /// MediaConnectStateConnected, else MediaConnectStateDisconnected.
    pub connected: bool,
    /// Bits per second, both directions; [`NDIS_LINK_SPEED_UNKNOWN`] when disconnected or
    /// unknown.
    pub speed_bps: u64,
}

impl LinkState {
    /// Before any answer from the device: unknown.
    pub const UNKNOWN: LinkState = LinkState {
        connected: false,
        speed_bps: NDIS_LINK_SPEED_UNKNOWN,
    };

    /// The state QUERY_PORT reported.
    pub fn from_port(p: &PortAttr) -> LinkState {
        let connected = matches!(p.state, PORT_ACTIVE | PORT_ACTIVE_DEFER);
        LinkState {
            connected,
            speed_bps: if connected {
                port_speed_bps(p.active_width, p.active_speed).unwrap_or(NDIS_LINK_SPEED_UNKNOWN)
            } else {
                NDIS_LINK_SPEED_UNKNOWN
            },
        }
    }

    /// `NDIS_MEDIA_CONNECT_STATE`.
    pub const fn media_connect_state(&self) -> u32 {
        if self.connected {
            MediaConnectStateConnected
        } else {
            MediaConnectStateDisconnected
        }
    }

    /// The NDIS_STATUS_LINK_STATE buffer (full duplex, no pause frames, nothing negotiated).
    pub fn ndis_link_state(&self) -> NDIS_LINK_STATE {
        NDIS_LINK_STATE {
            Header: NDIS_OBJECT_HEADER {
                Type: NDIS_OBJECT_TYPE_DEFAULT,
                Revision: NDIS_LINK_STATE_REVISION_1,
                Size: NDIS_SIZEOF_LINK_STATE_REVISION_1,
            },
            MediaConnectState: self.media_connect_state(),
            MediaDuplexState: MediaDuplexStateFull,
            XmitLinkSpeed: self.speed_bps,
            RcvLinkSpeed: self.speed_bps,
            PauseFunctions: 0,
            AutoNegotiationFlags: 0,
        }
    }
}

/// `pvrdma_port_state`: ACTIVE and ACTIVE_DEFER.
pub const PORT_ACTIVE: u32 = 4;
pub const PORT_ACTIVE_DEFER: u32 = 5;

/// The port's speed in bits per second: lanes (`pvrdma_port_width` 1, 2, 4, 8 = 1X, 4X, 8X,
/// 12X) times the lane rate (`pvrdma_port_speed` SDR 1, DDR 2, QDR 4, FDR10 8, FDR 16,
/// EDR 32 = 2.5, 5, 10, 10, 14, 25 Gb/s, as Linux's `ib_port_speed` reports them).
/// `None` for an encoding outside those.
pub fn port_speed_bps(width: u8, speed: u8) -> Option<u64> {
    let lanes: u64 = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        _ => return None,
    };
    let lane_mbps: u64 = match speed {
        1 => 2_500,
        2 => 5_000,
        4 | 8 => 10_000,
        16 => 14_000,
        32 => 25_000,
        _ => return None,
    };
    Some(lanes * lane_mbps * 1_000_000)
}

/// Where link changes go: the FFI layer's NdisMIndicateStatusEx (a recording in tests).
/// Called at IRQL <= DISPATCH_LEVEL with no driver lock held.
pub trait StatusSink: Send + Sync {
    /// NDIS_STATUS_LINK_STATE with `state`.
    fn link_state(&self, state: &LinkState);
}

/// The device's handler of device-wide events once the miniport runs: port events to the
/// miniport's link, DEVICE_FATAL to the NDK device (what the hardware seam's own handler
/// did before; the miniport installs this one after it, [`Miniport::initialize_with`]).
pub(super) struct LinkHook {
    pub(super) miniport: Weak<Miniport>,
    pub(super) ndk: Weak<NdkDevice>,
}

impl DeviceEvents for LinkHook {
    fn port_event(&self, kind: EqeType, _port: u32) {
        if let Some(m) = self.miniport.upgrade() {
            m.port_event(kind);
        }
    }

    fn device_fatal(&self) {
        if let Some(d) = self.ndk.upgrade() {
            d.device_fatal();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_and_states() {
        assert_eq!(port_speed_bps(1, 32), Some(25_000_000_000));
        assert_eq!(port_speed_bps(2, 4), Some(40_000_000_000));
        assert_eq!(port_speed_bps(8, 16), Some(168_000_000_000));
        assert_eq!(port_speed_bps(1, 1), Some(2_500_000_000));
        assert_eq!(port_speed_bps(3, 32), None);
        assert_eq!(port_speed_bps(1, 64), None);
        let mut p = PortAttr {
            state: 4,
            active_width: 1,
            active_speed: 32,
            ..PortAttr::default()
        };
        assert_eq!(
            LinkState::from_port(&p),
            LinkState {
                connected: true,
                speed_bps: 25_000_000_000
            }
        );
        p.state = 1;
        assert_eq!(
            LinkState::from_port(&p),
            LinkState {
                connected: false,
                speed_bps: NDIS_LINK_SPEED_UNKNOWN
            }
        );
        p.state = 5;
        p.active_speed = 0;
        let s = LinkState::from_port(&p);
        assert!(s.connected);
        assert_eq!(s.speed_bps, NDIS_LINK_SPEED_UNKNOWN);
        let n = s.ndis_link_state();
        assert_eq!(
            (n.Header.Type, n.Header.Revision, n.Header.Size),
            (0x80, 1, 0x28)
        );
        assert_eq!((n.MediaConnectState, n.MediaDuplexState), (1, 2));
    }
}
