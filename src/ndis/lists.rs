//! OID_NDK_CONNECTIONS and OID_NDK_LOCAL_ENDPOINTS (ndkpi.md §6.6): the connection engine's
//! connections (established or disconnecting), and its listeners and shared endpoints, in
//! the layouts of ntddndis.h (`netstat -xan` shows them; smb-direct.md §1.1).
//!
//! - One snapshot per query: the engine calls back under its own locks
//!   (`ndk::connect::CmEngine::connections` / `local_endpoints`), the entries go into a
//!   list allocated before the locks are taken (no allocation under a spin lock), so the
//!   count and the entries always belong together, whatever connects or closes meanwhile.
//! - The buffer-too-short protocol: a buffer smaller than the answer gets
//!   NDIS_STATUS_BUFFER_TOO_SHORT with BytesNeeded = the answer's size and nothing written;
//!   an NDIS header that is not {DEFAULT, revision ≥ 1, Size ≥ 0x10 and ≤ the buffer} gets
//!   NDIS_STATUS_INVALID_PARAMETER.
//! - RoCEv2 maps no ND connection to a TCP one: the mapped-to-TCP flag is FALSE and there
//!   is one entry per connection or endpoint. This provider is kernel-only: UserModeOwner
//!   FALSE, OwnerPid 0.
#![deny(unsafe_code)]

use alloc::vec::Vec;
use core::net::SocketAddr;

use super::abi::*;
use super::counters::put_header;
use super::oid::OidResult;
use crate::ndk::connect::CmEngine;

/// `SOCKADDR_INET` bytes of `a` (ws2ipdef.h; AF_INET 2 / AF_INET6 23, port in network
/// order, 28 bytes either way).
pub fn sockaddr_inet(a: SocketAddr) -> [u8; 28] {
    let mut b = [0u8; 28];
    let (family, port): (u16, u16) = match a {
        SocketAddr::V4(_) => (2, a.port()),
        SocketAddr::V6(_) => (23, a.port()),
    };
    b[0..2].copy_from_slice(&family.to_le_bytes());
    b[2..4].copy_from_slice(&port.to_be_bytes());
    match a {
        SocketAddr::V4(v4) => b[4..8].copy_from_slice(&v4.ip().octets()),
        // sin6_flowinfo (4..8) and sin6_scope_id (24..28) stay 0.
        SocketAddr::V6(v6) => b[8..24].copy_from_slice(&v6.ip().octets()),
    }
    b
}

/// The size of an NDIS_NDK_CONNECTION_ENTRY / NDIS_NDK_LOCAL_ENDPOINT_ENTRY.
const CONNECTION_ENTRY: usize = 0x40;
const ENDPOINT_ENTRY: usize = 0x24;
/// Entries start after the 0x10-byte head (header, Flags, Count, mapped-to-TCP).
const ENTRIES_AT: usize = 0x10;

/// Answers a list query with `entries` of `entry` bytes each, written by `put`.
fn answer<T>(
    buf: &mut [u8],
    entries: &[T],
    entry: usize,
    size_of: fn(u32) -> usize,
    put: impl Fn(&mut [u8], &T),
) -> OidResult {
    // CAST: the engine's tables are far below u32::MAX entries.
    let count = entries.len() as u32;
    let needed = size_of(count);
    if buf.len() < needed {
        return OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed);
    }
    let Some(&[ty, rev, s0, s1]) = buf.first_chunk::<4>() else {
        return OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed);
    };
    let size = usize::from(u16::from_le_bytes([s0, s1]));
    if ty != NDIS_OBJECT_TYPE_DEFAULT || rev < 1 || size < ENTRIES_AT || size > buf.len() {
        return OidResult::fail(NDIS_STATUS_INVALID_PARAMETER);
    }
    let Some(out) = buf.get_mut(..needed) else {
        return OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed);
    };
    out.fill(0);
    put_header(out, 1, ndis_header_size(needed));
    if let Some(c) = out.get_mut(8..12) {
        c.copy_from_slice(&count.to_le_bytes());
    }
    for (chunk, e) in out
        .get_mut(ENTRIES_AT..)
        .unwrap_or_default()
        .chunks_exact_mut(entry)
        .zip(entries)
    {
        put(chunk, e);
    }
    OidResult::done(needed)
}

/// OID_NDK_CONNECTIONS over `engine` (none: no connection engine, so none listed).
pub fn connections(engine: Option<&CmEngine>, buf: &mut [u8]) -> OidResult {
    let mut list: Vec<(SocketAddr, SocketAddr)> = Vec::new();
    if let Some(e) = engine {
        if list.try_reserve_exact(e.config().capacity).is_err() {
            return OidResult::fail(NDIS_STATUS_RESOURCES);
        }
        e.connections(|local, remote| {
            // Within the reservation: at most `capacity` connections exist.
            if list.len() < list.capacity() {
                list.push((local, remote));
            }
        });
    }
    answer(
        buf,
        &list,
        CONNECTION_ENTRY,
        NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1,
        |out, &(local, remote)| {
            // Local @0, Remote @0x1C; UserModeOwner @0x38 and OwnerPid @0x3C stay 0.
            if let Some(d) = out.get_mut(0..28) {
                d.copy_from_slice(&sockaddr_inet(local));
            }
            if let Some(d) = out.get_mut(0x1C..0x1C + 28) {
                d.copy_from_slice(&sockaddr_inet(remote));
            }
        },
    )
}

/// OID_NDK_LOCAL_ENDPOINTS over `engine`.
pub fn local_endpoints(engine: Option<&CmEngine>, buf: &mut [u8]) -> OidResult {
    let mut list: Vec<(SocketAddr, bool)> = Vec::new();
    if let Some(e) = engine {
        if list
            .try_reserve_exact(crate::ndk::connect::engine::ENDPOINTS)
            .is_err()
        {
            return OidResult::fail(NDIS_STATUS_RESOURCES);
        }
        e.local_endpoints(|local, listener| {
            if list.len() < list.capacity() {
                list.push((local, listener));
            }
        });
    }
    answer(
        buf,
        &list,
        ENDPOINT_ENTRY,
        NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1,
        |out, &(local, listener)| {
            // Local @0, UserModeOwner @0x1C (0), Listener @0x1D, OwnerPid @0x20 (0).
            if let Some(d) = out.get_mut(0..28) {
                d.copy_from_slice(&sockaddr_inet(local));
            }
            if let Some(l) = out.get_mut(0x1D) {
                *l = u8::from(listener);
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_layouts() {
        let v4 = sockaddr_inet("10.0.0.1:445".parse().unwrap());
        assert_eq!(&v4[..8], &[2, 0, 0x01, 0xBD, 10, 0, 0, 1]);
        assert!(v4[8..].iter().all(|&b| b == 0));
        let v6 = sockaddr_inet("[fd00::2]:49152".parse().unwrap());
        assert_eq!(&v6[..4], &[23, 0, 0xC0, 0x00]);
        assert_eq!(&v6[8..10], &[0xFD, 0]);
        assert_eq!(v6[23], 2);
    }

    #[test]
    fn answers_and_refusals() {
        let e: [(SocketAddr, bool); 2] = [
            ("10.0.0.1:445".parse().unwrap(), true),
            ("10.0.0.1:5000".parse().unwrap(), false),
        ];
        let put = |out: &mut [u8], &(a, l): &(SocketAddr, bool)| {
            out[..28].copy_from_slice(&sockaddr_inet(a));
            out[0x1D] = u8::from(l);
        };
        let size = NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1;
        let mut b = [0xEEu8; 0x60];
        b[..4].copy_from_slice(&[0x80, 1, 0x60, 0]);
        assert_eq!(answer(&mut b, &e, 0x24, size, put), OidResult::done(0x58));
        assert_eq!(
            &b[..16],
            &[0x80, 1, 0x58, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!((b[0x10 + 0x1D], b[0x34 + 0x1D]), (1, 0));
        assert_eq!(&b[0x58..], &[0xEE; 8]);
        // One entry short: BUFFER_TOO_SHORT, the size needed, nothing written.
        let mut short = [0xEEu8; 0x57];
        short[..4].copy_from_slice(&[0x80, 1, 0x57, 0]);
        let before = short;
        assert_eq!(
            answer(&mut short, &e, 0x24, size, put),
            OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 0x58)
        );
        assert_eq!(short, before);
        let mut bad = [0u8; 0x60];
        bad[..4].copy_from_slice(&[0x80, 0, 0x60, 0]);
        assert_eq!(
            answer(&mut bad, &e, 0x24, size, put),
            OidResult::fail(NDIS_STATUS_INVALID_PARAMETER)
        );
        assert_eq!(bad[4..], [0u8; 0x5C]);
    }
}
