//! OID requests, portable (ndkpi.md §6.6; the NDIS mandatory-OID list): the FFI layer hands
//! the NDIS_OID_REQUEST's InformationBuffer over as a slice and copies [`OidResult`] back
//! into BytesWritten/BytesRead and BytesNeeded.
//!
//! Conventions, for every OID:
//! - nothing is written before the request is known to be good, and never past the slice;
//! - a query buffer too short for the answer: NDIS_STATUS_BUFFER_TOO_SHORT, BytesNeeded the
//!   full answer; a set buffer too short (or, for OID_NDK_SET_STATE, not one BOOLEAN):
//!   NDIS_STATUS_INVALID_LENGTH, BytesNeeded the size it must have;
//! - an NDIS object whose header is not {NDIS_OBJECT_TYPE_DEFAULT, revision ≥ 1, Size
//!   within the buffer and at least the revision-1 size}: NDIS_STATUS_INVALID_PARAMETER;
//! - a value out of range: NDIS_STATUS_INVALID_DATA;
//! - an OID this miniport does not list in [`SUPPORTED_OIDS`] (or a query of a set-only
//!   one, a set of a query-only one, any method): NDIS_STATUS_NOT_SUPPORTED.
#![deny(unsafe_code)]

use super::abi::*;
use super::attributes::*;
use super::counters::{
    GEN_STATISTICS_LEN, STATISTICS_INFO_LEN, gen_statistics_bytes, performance_counters,
    put_header, statistics_info_bytes,
};
use super::miniport::Miniport;

/// Status, bytes written (query) or read (set), and the bytes the request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OidResult {
    pub status: NDIS_STATUS,
    pub bytes_done: u32,
    pub bytes_needed: u32,
}

impl OidResult {
    /// Success after `done` bytes (needed: the same).
    pub const fn done(done: usize) -> Self {
        OidResult {
            status: NDIS_STATUS_SUCCESS,
            bytes_done: done as u32,
            bytes_needed: done as u32,
        }
    }

    /// Failure with nothing written or read.
    pub const fn fail(status: NDIS_STATUS) -> Self {
        OidResult {
            status,
            bytes_done: 0,
            bytes_needed: 0,
        }
    }

    /// Failure that names the buffer size the request needs.
    pub const fn needs(status: NDIS_STATUS, needed: usize) -> Self {
        OidResult {
            status,
            bytes_done: 0,
            bytes_needed: needed as u32,
        }
    }
}

/// What this miniport answers (NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES.SupportedOidList):
/// the NDK OIDs (§6.6: all four, mandatory) and the general OIDs mandatory for a miniport.
pub const SUPPORTED_OIDS: &[NDIS_OID] = &[
    OID_GEN_SUPPORTED_LIST,
    OID_GEN_HARDWARE_STATUS,
    OID_GEN_MEDIA_SUPPORTED,
    OID_GEN_MEDIA_IN_USE,
    OID_GEN_MAXIMUM_LOOKAHEAD,
    OID_GEN_MAXIMUM_FRAME_SIZE,
    OID_GEN_TRANSMIT_BUFFER_SPACE,
    OID_GEN_RECEIVE_BUFFER_SPACE,
    OID_GEN_TRANSMIT_BLOCK_SIZE,
    OID_GEN_RECEIVE_BLOCK_SIZE,
    OID_GEN_VENDOR_ID,
    OID_GEN_VENDOR_DESCRIPTION,
    OID_GEN_CURRENT_PACKET_FILTER,
    OID_GEN_CURRENT_LOOKAHEAD,
    OID_GEN_MAXIMUM_TOTAL_SIZE,
    OID_GEN_VENDOR_DRIVER_VERSION,
    OID_GEN_LINK_PARAMETERS,
    OID_GEN_INTERRUPT_MODERATION,
    OID_GEN_XMIT_OK,
    OID_GEN_RCV_OK,
    OID_GEN_STATISTICS,
    OID_NDK_SET_STATE,
    OID_NDK_STATISTICS,
    OID_NDK_CONNECTIONS,
    OID_NDK_LOCAL_ENDPOINTS,
    OID_PVRDMA_ROCE_MTU,
];

/// A private OID (NDIS: the high byte of a vendor's OID is 0xFF) answering the RoCE path MTU
/// in use, in bytes, as a ULONG: `*NetworkDirectRoCEFrameSize` after the port and Ethernet
/// bounds (the INF requirement that the operational value be observable; it is also in the
/// event log when it differs). Query only.
pub const OID_PVRDMA_ROCE_MTU: NDIS_OID = 0xFF50_5601;

/// Writes `bytes` at the start of `buf`, or says how many are needed.
pub(super) fn answer(buf: &mut [u8], bytes: &[u8]) -> OidResult {
    match buf.get_mut(..bytes.len()) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            OidResult::done(bytes.len())
        }
        None => OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, bytes.len()),
    }
}

pub(super) fn answer_u32(buf: &mut [u8], v: u32) -> OidResult {
    answer(buf, &v.to_le_bytes())
}

/// A statistics counter: 64 bits, or its low 32 bits into a 4-byte buffer (the NDIS rule
/// for statistics OIDs), BytesNeeded 8 either way.
pub(super) fn answer_counter(buf: &mut [u8], v: u64) -> OidResult {
    if buf.len() >= 8 {
        return answer(buf, &v.to_le_bytes());
    }
    // CAST: the low half, as NDIS asks of a 4-byte buffer.
    let r = answer(buf, &(v as u32).to_le_bytes());
    OidResult {
        bytes_needed: 8,
        ..if r.status == NDIS_STATUS_SUCCESS {
            r
        } else {
            OidResult::fail(NDIS_STATUS_BUFFER_TOO_SHORT)
        }
    }
}

/// The NDIS_OBJECT_HEADER at the start of a buffer already known to hold `min_size` bytes.
///
/// # Errors
/// NDIS_STATUS_INVALID_PARAMETER unless {NDIS_OBJECT_TYPE_DEFAULT, revision ≥ 1,
/// `min_size` ≤ Size ≤ the buffer}.
pub(super) fn check_header(buf: &[u8], min_size: usize) -> Result<(), NDIS_STATUS> {
    let Some(&[ty, rev, s0, s1]) = buf.first_chunk::<4>() else {
        return Err(NDIS_STATUS_INVALID_PARAMETER);
    };
    let size = usize::from(u16::from_le_bytes([s0, s1]));
    if ty != NDIS_OBJECT_TYPE_DEFAULT || rev < 1 || size < min_size || size > buf.len() {
        return Err(NDIS_STATUS_INVALID_PARAMETER);
    }
    Ok(())
}

pub(super) fn read_u32(buf: &[u8]) -> Option<u32> {
    buf.first_chunk::<4>().map(|b| u32::from_le_bytes(*b))
}

/// A query of a variable-length NDIS object: too short for `needed` first, then the header.
pub(super) fn object_query(
    buf: &mut [u8],
    needed: usize,
    fill: impl FnOnce(&mut [u8]),
) -> OidResult {
    if buf.len() < needed {
        return OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed);
    }
    if let Err(st) = check_header(buf, needed) {
        return OidResult::fail(st);
    }
    match buf.get_mut(..needed) {
        Some(out) => {
            fill(out);
            OidResult::done(needed)
        }
        None => OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed),
    }
}

impl Miniport {
    /// A query OID request.
    pub fn query_oid(&self, oid: NDIS_OID, buf: &mut [u8]) -> OidResult {
        let mtu = self.ethernet_mtu();
        let frame = mtu + ETH_HEADER;
        match oid {
            OID_NDK_STATISTICS => {
                let info = statistics_info_bytes(&performance_counters(&self.counter_source()));
                object_query(buf, STATISTICS_INFO_LEN, |out| out.copy_from_slice(&info))
            }
            OID_NDK_CONNECTIONS => {
                super::lists::connections(self.connection_engine().as_deref(), buf)
            }
            OID_NDK_LOCAL_ENDPOINTS => {
                super::lists::local_endpoints(self.connection_engine().as_deref(), buf)
            }
            OID_GEN_STATISTICS => {
                let s = gen_statistics_bytes(&self.counter_source().traffic);
                object_query(buf, GEN_STATISTICS_LEN, |out| out.copy_from_slice(&s))
            }
            OID_GEN_INTERRUPT_MODERATION => {
                let mut b = [0u8; NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1 as usize];
                put_header(
                    &mut b,
                    NDIS_INTERRUPT_MODERATION_PARAMETERS_REVISION_1,
                    NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1,
                );
                if let Some(m) = b.get_mut(8..12) {
                    m.copy_from_slice(&NdisInterruptModerationNotSupported.to_le_bytes());
                }
                object_query(buf, b.len(), |out| out.copy_from_slice(&b))
            }
            OID_GEN_SUPPORTED_LIST => {
                let needed = SUPPORTED_OIDS.len() * 4;
                match buf.get_mut(..needed) {
                    Some(out) => {
                        for (c, o) in out.chunks_exact_mut(4).zip(SUPPORTED_OIDS) {
                            c.copy_from_slice(&o.to_le_bytes());
                        }
                        OidResult::done(needed)
                    }
                    None => OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed),
                }
            }
            OID_GEN_HARDWARE_STATUS => answer_u32(buf, NdisHardwareStatusReady),
            OID_GEN_MEDIA_SUPPORTED | OID_GEN_MEDIA_IN_USE => answer_u32(buf, NdisMedium802_3),
            OID_GEN_MAXIMUM_LOOKAHEAD => answer_u32(buf, mtu),
            OID_GEN_CURRENT_LOOKAHEAD => answer_u32(buf, self.lookahead()),
            OID_GEN_CURRENT_PACKET_FILTER => answer_u32(buf, self.packet_filter()),
            OID_GEN_MAXIMUM_FRAME_SIZE => answer_u32(buf, mtu),
            OID_PVRDMA_ROCE_MTU => answer_u32(buf, self.roce_mtu()),
            OID_GEN_MAXIMUM_TOTAL_SIZE
            | OID_GEN_TRANSMIT_BLOCK_SIZE
            | OID_GEN_RECEIVE_BLOCK_SIZE => answer_u32(buf, frame),
            // No NDIS send or receive path: no frame buffers.
            OID_GEN_TRANSMIT_BUFFER_SPACE | OID_GEN_RECEIVE_BUFFER_SPACE => answer_u32(buf, 0),
            OID_GEN_VENDOR_ID => answer_u32(buf, VENDOR_ID),
            OID_GEN_VENDOR_DESCRIPTION => answer(buf, VENDOR_DESCRIPTION),
            OID_GEN_VENDOR_DRIVER_VERSION => answer_u32(buf, VENDOR_DRIVER_VERSION),
            OID_GEN_XMIT_OK => answer_counter(buf, self.counter_source().traffic.out_frames),
            OID_GEN_RCV_OK => answer_counter(buf, self.counter_source().traffic.in_frames),
            _ => OidResult::fail(NDIS_STATUS_NOT_SUPPORTED),
        }
    }

    /// A set OID request.
    pub fn set_oid(&self, oid: NDIS_OID, buf: &[u8]) -> OidResult {
        match oid {
            // §6.6: exactly one BOOLEAN; never pends.
            OID_NDK_SET_STATE => {
                let [b] = buf else {
                    return OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 1);
                };
                let enable = match b {
                    0 => false,
                    1 => true,
                    _ => return OidResult::needs(NDIS_STATUS_INVALID_DATA, 1),
                };
                match self.state().set(enable) {
                    Ok(()) => OidResult::done(1),
                    Err(st) => OidResult::needs(st, 1),
                }
            }
            OID_GEN_CURRENT_PACKET_FILTER => match read_u32(buf) {
                None => OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 4),
                Some(f) if f & !SUPPORTED_PACKET_FILTERS != 0 => {
                    OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 4)
                }
                Some(f) => {
                    self.set_packet_filter(f);
                    OidResult::done(4)
                }
            },
            OID_GEN_CURRENT_LOOKAHEAD => match read_u32(buf) {
                None => OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 4),
                Some(l) if l > self.ethernet_mtu() => OidResult::needs(NDIS_STATUS_INVALID_DATA, 4),
                Some(l) => {
                    self.set_lookahead(l);
                    OidResult::done(4)
                }
            },
            // The link is the host's virtual one: nothing to negotiate.
            OID_GEN_LINK_PARAMETERS => {
                set_object(buf, NDIS_SIZEOF_LINK_PARAMETERS_REVISION_1, |_| {
                    NDIS_STATUS_NOT_SUPPORTED
                })
            }
            // The device has no interrupt moderation control (pvrdma.md §1): only
            // "not supported" is a valid setting.
            OID_GEN_INTERRUPT_MODERATION => set_object(
                buf,
                NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1,
                |b| match b.get(8..12).and_then(read_u32) {
                    Some(NdisInterruptModerationNotSupported) => NDIS_STATUS_SUCCESS,
                    _ => NDIS_STATUS_INVALID_DATA,
                },
            ),
            _ => OidResult::fail(NDIS_STATUS_NOT_SUPPORTED),
        }
    }

    /// A method OID request: this miniport has none.
    pub fn method_oid(&self, _oid: NDIS_OID, _buf: &mut [u8], _input_len: usize) -> OidResult {
        OidResult::fail(NDIS_STATUS_NOT_SUPPORTED)
    }
}

/// A set of an NDIS object of at least `size` bytes: length, then header, then `apply`.
pub(super) fn set_object(
    buf: &[u8],
    size: u16,
    apply: impl FnOnce(&[u8]) -> NDIS_STATUS,
) -> OidResult {
    let size = usize::from(size);
    if buf.len() < size {
        return OidResult::needs(NDIS_STATUS_INVALID_LENGTH, size);
    }
    if let Err(st) = check_header(buf, size) {
        return OidResult::needs(st, size);
    }
    match apply(buf) {
        NDIS_STATUS_SUCCESS => OidResult::done(size),
        st => OidResult::needs(st, size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let mut b = [0x80, 1, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(check_header(&b, 0x10), Ok(()));
        b[1] = 2;
        assert_eq!(
            check_header(&b, 0x10),
            Ok(()),
            "a later revision is a superset"
        );
        for (i, v) in [(0, 0x81u8), (1, 0), (2, 0x0F), (2, 0x11)] {
            let mut m = b;
            m[i] = v;
            assert_eq!(check_header(&m, 0x10), Err(NDIS_STATUS_INVALID_PARAMETER));
        }
        assert_eq!(check_header(&b[..3], 0), Err(NDIS_STATUS_INVALID_PARAMETER));
    }

    #[test]
    fn counters_into_short_buffers() {
        let mut b = [0xEEu8; 9];
        assert_eq!(answer_counter(&mut b, 0x1_0000_0002), OidResult::done(8));
        assert_eq!(b[..8], 0x1_0000_0002u64.to_le_bytes());
        assert_eq!(b[8], 0xEE);
        let mut b = [0xEEu8; 5];
        assert_eq!(
            answer_counter(&mut b, 0x1_0000_0002),
            OidResult {
                status: NDIS_STATUS_SUCCESS,
                bytes_done: 4,
                bytes_needed: 8
            }
        );
        assert_eq!(b, [2, 0, 0, 0, 0xEE]);
        let mut b = [0xEEu8; 3];
        assert_eq!(
            answer_counter(&mut b, 7),
            OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 8)
        );
        assert_eq!(b, [0xEE; 3]);
    }

    #[test]
    fn supported_list_has_no_duplicates() {
        for (i, o) in SUPPORTED_OIDS.iter().enumerate() {
            assert!(!SUPPORTED_OIDS[i + 1..].contains(o), "{o:#x}");
        }
    }
}
