//! The MS-SMBD messages (2.2.1 negotiate request, 2.2.2 negotiate response, 2.2.3 data
//! transfer) and the buffer descriptor of 2.2.3.1, as bytes. Every field is little-endian.

/// Negotiate request: 20 bytes.
pub const NEGOTIATE_REQUEST_LEN: usize = 20;
/// Negotiate response: 32 bytes.
pub const NEGOTIATE_RESPONSE_LEN: usize = 32;
/// Data transfer header through Padding; the data starts at [`DATA_OFFSET`].
pub const DATA_HEADER_LEN: usize = 20;
/// DataOffset of every data-bearing message this side sends (8-aligned, after 4 bytes of
/// padding: what Windows and Linux send).
pub const DATA_OFFSET: usize = 24;
/// SMB_DIRECT_RESPONSE_REQUESTED (Flags).
pub const RESPONSE_REQUESTED: u16 = 0x0001;
/// SMB_DIRECT_BUFFER_DESCRIPTOR_V1: Offset (8), Token (4), Length (4).
pub const BUFFER_DESCRIPTOR_LEN: usize = 16;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// 2.2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NegotiateRequest {
    pub min_version: u16,
    pub max_version: u16,
    pub credits_requested: u16,
    pub preferred_send_size: u32,
    pub max_receive_size: u32,
    pub max_fragmented_size: u32,
}

impl NegotiateRequest {
    pub fn encode(&self) -> [u8; NEGOTIATE_REQUEST_LEN] {
        let mut b = [0u8; NEGOTIATE_REQUEST_LEN];
        b[0..2].copy_from_slice(&self.min_version.to_le_bytes());
        b[2..4].copy_from_slice(&self.max_version.to_le_bytes());
        // 4..6 Reserved.
        b[6..8].copy_from_slice(&self.credits_requested.to_le_bytes());
        b[8..12].copy_from_slice(&self.preferred_send_size.to_le_bytes());
        b[12..16].copy_from_slice(&self.max_receive_size.to_le_bytes());
        b[16..20].copy_from_slice(&self.max_fragmented_size.to_le_bytes());
        b
    }

    /// `None` unless `b` is at least 20 bytes.
    pub fn decode(b: &[u8]) -> Option<NegotiateRequest> {
        (b.len() >= NEGOTIATE_REQUEST_LEN).then(|| NegotiateRequest {
            min_version: u16_at(b, 0),
            max_version: u16_at(b, 2),
            credits_requested: u16_at(b, 6),
            preferred_send_size: u32_at(b, 8),
            max_receive_size: u32_at(b, 12),
            max_fragmented_size: u32_at(b, 16),
        })
    }
}

/// 2.2.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NegotiateResponse {
    pub min_version: u16,
    pub max_version: u16,
    pub negotiated_version: u16,
    pub credits_requested: u16,
    pub credits_granted: u16,
    pub status: u32,
    pub max_read_write_size: u32,
    pub preferred_send_size: u32,
    pub max_receive_size: u32,
    pub max_fragmented_size: u32,
}

impl NegotiateResponse {
    pub fn encode(&self) -> [u8; NEGOTIATE_RESPONSE_LEN] {
        let mut b = [0u8; NEGOTIATE_RESPONSE_LEN];
        b[0..2].copy_from_slice(&self.min_version.to_le_bytes());
        b[2..4].copy_from_slice(&self.max_version.to_le_bytes());
        b[4..6].copy_from_slice(&self.negotiated_version.to_le_bytes());
        // 6..8 Reserved.
        b[8..10].copy_from_slice(&self.credits_requested.to_le_bytes());
        b[10..12].copy_from_slice(&self.credits_granted.to_le_bytes());
        b[12..16].copy_from_slice(&self.status.to_le_bytes());
        b[16..20].copy_from_slice(&self.max_read_write_size.to_le_bytes());
        b[20..24].copy_from_slice(&self.preferred_send_size.to_le_bytes());
        b[24..28].copy_from_slice(&self.max_receive_size.to_le_bytes());
        b[28..32].copy_from_slice(&self.max_fragmented_size.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<NegotiateResponse> {
        (b.len() >= NEGOTIATE_RESPONSE_LEN).then(|| NegotiateResponse {
            min_version: u16_at(b, 0),
            max_version: u16_at(b, 2),
            negotiated_version: u16_at(b, 4),
            credits_requested: u16_at(b, 8),
            credits_granted: u16_at(b, 10),
            status: u32_at(b, 12),
            max_read_write_size: u32_at(b, 16),
            preferred_send_size: u32_at(b, 20),
            max_receive_size: u32_at(b, 24),
            max_fragmented_size: u32_at(b, 28),
        })
    }
}

/// 2.2.3: the header of a data transfer message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    pub credits_requested: u16,
    pub credits_granted: u16,
    pub flags: u16,
    pub remaining_data_length: u32,
    pub data_offset: u32,
    pub data_length: u32,
}

impl DataHeader {
    /// The header and its padding ([`DATA_OFFSET`] bytes); DataOffset 0 for a message
    /// without data (keepalives and credit grants), as 2.2.3 asks.
    pub fn encode(&self) -> [u8; DATA_OFFSET] {
        let mut b = [0u8; DATA_OFFSET];
        b[0..2].copy_from_slice(&self.credits_requested.to_le_bytes());
        b[2..4].copy_from_slice(&self.credits_granted.to_le_bytes());
        b[4..6].copy_from_slice(&self.flags.to_le_bytes());
        // 6..8 Reserved.
        b[8..12].copy_from_slice(&self.remaining_data_length.to_le_bytes());
        b[12..16].copy_from_slice(&self.data_offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.data_length.to_le_bytes());
        b
    }

    /// The header of a received message of `len` bytes, checked against 3.1.5.7: at least
    /// 20 bytes; data, when present, inside the message at an 8-aligned offset.
    pub fn decode(b: &[u8]) -> Result<DataHeader, String> {
        if b.len() < DATA_HEADER_LEN {
            return Err(format!("a data transfer message of {} B", b.len()));
        }
        let h = DataHeader {
            credits_requested: u16_at(b, 0),
            credits_granted: u16_at(b, 2),
            flags: u16_at(b, 4),
            remaining_data_length: u32_at(b, 8),
            data_offset: u32_at(b, 12),
            data_length: u32_at(b, 16),
        };
        if h.data_length > 0 {
            let end = u64::from(h.data_offset) + u64::from(h.data_length);
            if !h.data_offset.is_multiple_of(8)
                || (h.data_offset as usize) < DATA_HEADER_LEN
                || end > b.len() as u64
            {
                return Err(format!(
                    "data at {}+{} in a message of {} B",
                    h.data_offset,
                    h.data_length,
                    b.len()
                ));
            }
        }
        Ok(h)
    }
}

/// 2.2.3.1 SMB_DIRECT_BUFFER_DESCRIPTOR_V1: a registered buffer of the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferDescriptor {
    /// The buffer's address as the token's registration names it.
    pub offset: u64,
    pub token: u32,
    pub length: u32,
}

impl BufferDescriptor {
    pub fn encode(&self) -> [u8; BUFFER_DESCRIPTOR_LEN] {
        let mut b = [0u8; BUFFER_DESCRIPTOR_LEN];
        b[0..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.token.to_le_bytes());
        b[12..16].copy_from_slice(&self.length.to_le_bytes());
        b
    }

    /// Every descriptor in `b` (a multiple of 16 bytes).
    pub fn decode_all(b: &[u8]) -> Option<Vec<BufferDescriptor>> {
        if !b.len().is_multiple_of(BUFFER_DESCRIPTOR_LEN) {
            return None;
        }
        Some(
            b.chunks(BUFFER_DESCRIPTOR_LEN)
                .map(|d| BufferDescriptor {
                    offset: u64::from_le_bytes(d[0..8].try_into().unwrap()),
                    token: u32_at(d, 8),
                    length: u32_at(d, 12),
                })
                .collect(),
        )
    }
}
