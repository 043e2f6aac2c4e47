//! The SMB2 messages this project sends over MS-SMBD so far ([MS-SMB2] 2.2.1 header, 2.2.3/2.2.4
//! NEGOTIATE), written here: over SMB Direct an SMB2 message travels without the 4-byte
//! transport header of TCP (MS-SMB2 2.1), one MS-SMBD message each. The rest of the client
//! (SESSION_SETUP with NTLMv2, TREE_CONNECT, CREATE, READ/WRITE with the RDMA channel, CLOSE,
//! LOGOFF) is not written yet.

/// The header's ProtocolId: 0xFE 'S' 'M' 'B'.
pub const PROTOCOL_ID: [u8; 4] = [0xFE, b'S', b'M', b'B'];
pub const HEADER_LEN: usize = 64;
pub const NEGOTIATE: u16 = 0x0000;
/// SMB2_FLAGS_SERVER_TO_REDIR.
pub const FLAGS_SERVER_TO_REDIR: u32 = 0x0000_0001;
/// SMB2_GLOBAL_CAP_* of NEGOTIATE.
pub const CAP_LARGE_MTU: u32 = 0x0000_0004;
pub const CAP_MULTI_CHANNEL: u32 = 0x0000_0008;
/// SMB2_NEGOTIATE_SIGNING_ENABLED.
pub const SIGNING_ENABLED: u16 = 0x0001;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// 2.2.1.2, the synchronous header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub credit_charge: u16,
    pub status: u32,
    pub command: u16,
    pub credits: u16,
    pub flags: u32,
    pub next_command: u32,
    pub message_id: u64,
    pub tree_id: u32,
    pub session_id: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&PROTOCOL_ID);
        b[4..6].copy_from_slice(&64u16.to_le_bytes());
        b[6..8].copy_from_slice(&self.credit_charge.to_le_bytes());
        b[8..12].copy_from_slice(&self.status.to_le_bytes());
        b[12..14].copy_from_slice(&self.command.to_le_bytes());
        b[14..16].copy_from_slice(&self.credits.to_le_bytes());
        b[16..20].copy_from_slice(&self.flags.to_le_bytes());
        b[20..24].copy_from_slice(&self.next_command.to_le_bytes());
        b[24..32].copy_from_slice(&self.message_id.to_le_bytes());
        b[36..40].copy_from_slice(&self.tree_id.to_le_bytes());
        b[40..48].copy_from_slice(&self.session_id.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN || b[0..4] != PROTOCOL_ID || u16_at(b, 4) != 64 {
            return None;
        }
        Some(Header {
            credit_charge: u16_at(b, 6),
            status: u32_at(b, 8),
            command: u16_at(b, 12),
            credits: u16_at(b, 14),
            flags: u32_at(b, 16),
            next_command: u32_at(b, 20),
            message_id: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            tree_id: u32_at(b, 36),
            session_id: u64::from_le_bytes(b[40..48].try_into().unwrap()),
        })
    }
}

/// 2.2.3 NEGOTIATE request of `dialects` (3.0.2 and below: no negotiate contexts).
pub fn negotiate_request(message_id: u64, dialects: &[u16], client_guid: [u8; 16]) -> Vec<u8> {
    assert!(
        !dialects.contains(&0x0311),
        "3.1.1 needs negotiate contexts, not written yet"
    );
    let h = Header {
        command: NEGOTIATE,
        credits: 1,
        message_id,
        ..Header::default()
    };
    let mut b = h.encode().to_vec();
    b.extend_from_slice(&36u16.to_le_bytes());
    // CAST: a handful of dialects.
    b.extend_from_slice(&(dialects.len() as u16).to_le_bytes());
    b.extend_from_slice(&SIGNING_ENABLED.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(CAP_LARGE_MTU | CAP_MULTI_CHANNEL).to_le_bytes());
    b.extend_from_slice(&client_guid);
    b.extend_from_slice(&0u64.to_le_bytes());
    for d in dialects {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b
}

/// 2.2.4 NEGOTIATE response: the fields the client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NegotiateResponse {
    pub header: Header,
    pub security_mode: u16,
    pub dialect: u16,
    pub capabilities: u32,
    pub max_transact_size: u32,
    pub max_read_size: u32,
    pub max_write_size: u32,
    pub security_buffer_len: u16,
}

impl NegotiateResponse {
    pub fn decode(b: &[u8]) -> Option<NegotiateResponse> {
        let header = Header::decode(b)?;
        let r = &b[HEADER_LEN..];
        if r.len() < 64 || u16_at(r, 0) != 65 {
            return None;
        }
        Some(NegotiateResponse {
            header,
            security_mode: u16_at(r, 2),
            dialect: u16_at(r, 4),
            capabilities: u32_at(r, 24),
            max_transact_size: u32_at(r, 28),
            max_read_size: u32_at(r, 32),
            max_write_size: u32_at(r, 36),
            security_buffer_len: u16_at(r, 58),
        })
    }
}
