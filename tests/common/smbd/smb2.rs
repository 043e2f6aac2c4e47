//! The SMB2 messages a minimal client and server exchange over MS-SMBD ([MS-SMB2] 2.2): the
//! header, NEGOTIATE (3.0.2, and 3.1.1 with its preauth integrity context), SESSION_SETUP,
//! LOGOFF, TREE_CONNECT, CREATE, CLOSE, READ and WRITE (inline, or with Channel
//! SMB2_CHANNEL_RDMA_V1_INVALIDATE and buffer descriptors). Over SMB Direct an SMB2 message
//! travels without the 4-byte transport header of TCP (MS-SMB2 2.1), one MS-SMBD message each.
//!
//! Written here rather than taken from a crate: the `smb2` crate's transport is a byte
//! stream under an async client whose READ/WRITE carry the data inline, and `smb` (smb-rs)
//! has the Channel field but its client registers no buffers and its RDMA transport is
//! libibverbs, not NDK; neither lets the caller put its own FRMR descriptors in a request.

/// The header's ProtocolId: 0xFE 'S' 'M' 'B'.
pub const PROTOCOL_ID: [u8; 4] = [0xFE, b'S', b'M', b'B'];
pub const HEADER_LEN: usize = 64;
pub const NEGOTIATE: u16 = 0x0000;
pub const SESSION_SETUP: u16 = 0x0001;
pub const LOGOFF: u16 = 0x0002;
pub const TREE_CONNECT: u16 = 0x0003;
pub const TREE_DISCONNECT: u16 = 0x0004;
pub const CREATE: u16 = 0x0005;
pub const CLOSE: u16 = 0x0006;
pub const READ: u16 = 0x0008;
pub const WRITE: u16 = 0x0009;
/// Dialects.
pub const SMB302: u16 = 0x0302;
pub const SMB311: u16 = 0x0311;
/// NTSTATUS values a response carries (as the header's u32).
pub const STATUS_SUCCESS: u32 = 0;
pub const STATUS_PENDING: u32 = 0x0000_0103;
pub const STATUS_MORE_PROCESSING_REQUIRED: u32 = 0xC000_0016;
pub const STATUS_INVALID_PARAMETER: u32 = 0xC000_000D;
pub const STATUS_END_OF_FILE: u32 = 0xC000_0011;
pub const STATUS_USER_SESSION_DELETED: u32 = 0xC000_0203;
pub const STATUS_NETWORK_NAME_DELETED: u32 = 0xC000_00C9;
pub const STATUS_FILE_CLOSED: u32 = 0xC000_0128;
pub const STATUS_LOGON_FAILURE: u32 = 0xC000_006D;
/// SMB2_FLAGS_ASYNC_COMMAND.
pub const FLAGS_ASYNC: u32 = 0x0000_0002;
/// Channel of READ/WRITE (2.2.19, 2.2.21).
pub const CHANNEL_NONE: u32 = 0;
pub const CHANNEL_RDMA_V1: u32 = 1;
pub const CHANNEL_RDMA_V1_INVALIDATE: u32 = 2;
/// The offset of a READ/WRITE request's Buffer (header 64 + fixed body 48).
pub const RW_BUFFER_OFFSET: usize = 112;
/// SMB2_PREAUTH_INTEGRITY_CAPABILITIES, SHA-512.
pub const PREAUTH_INTEGRITY_CAPABILITIES: u16 = 0x0001;
pub const SHA512: u16 = 0x0001;
/// The credit unit of LARGE_MTU: one credit per 64 KiB (3.1.5.2).
pub const CREDIT_UNIT: usize = 65536;
/// SMB2_FLAGS_SERVER_TO_REDIR.
pub const FLAGS_SERVER_TO_REDIR: u32 = 0x0000_0001;
/// SMB2_GLOBAL_CAP_* of NEGOTIATE.
pub const CAP_LARGE_MTU: u32 = 0x0000_0004;
pub const CAP_MULTI_CHANNEL: u32 = 0x0000_0008;
/// SMB2_NEGOTIATE_SIGNING_ENABLED.
pub const SIGNING_ENABLED: u16 = 0x0001;

use super::wire::{BUFFER_DESCRIPTOR_LEN, BufferDescriptor};

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

/// 2.2.3 NEGOTIATE request of `dialects`; with 3.1.1 among them, one negotiate context:
/// SMB2_PREAUTH_INTEGRITY_CAPABILITIES with SHA-512 and a 32-byte salt (2.2.3.1.1), the one
/// context a 3.1.1 request must carry. No encryption, signing or compression context.
pub fn negotiate_request(message_id: u64, dialects: &[u16], client_guid: [u8; 16]) -> Vec<u8> {
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
    // NegotiateContextOffset/Count/Reserved2 (3.1.1) or ClientStartTime: patched below.
    b.extend_from_slice(&0u64.to_le_bytes());
    for d in dialects {
        b.extend_from_slice(&d.to_le_bytes());
    }
    if dialects.contains(&SMB311) {
        while !b.len().is_multiple_of(8) {
            b.push(0);
        }
        let at = b.len();
        // CAST: a small offset.
        b[HEADER_LEN + 28..HEADER_LEN + 32].copy_from_slice(&(at as u32).to_le_bytes());
        b[HEADER_LEN + 32..HEADER_LEN + 34].copy_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&PREAUTH_INTEGRITY_CAPABILITIES.to_le_bytes());
        b.extend_from_slice(&38u16.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&32u16.to_le_bytes());
        b.extend_from_slice(&SHA512.to_le_bytes());
        b.extend((0..32u8).map(|i| i.wrapping_mul(37) ^ client_guid[usize::from(i) % 16]));
    }
    b
}

/// The negotiate contexts of a 3.1.1 NEGOTIATE response: (type, data) in order.
pub fn negotiate_contexts(b: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    let r = b.get(HEADER_LEN..)?;
    let count = u16_at(r, 6);
    let mut at = u32_at(r, 60) as usize;
    let mut out = Vec::new();
    for _ in 0..count {
        at = at.next_multiple_of(8);
        let ty = u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?);
        let len = usize::from(u16::from_le_bytes(b.get(at + 2..at + 4)?.try_into().ok()?));
        out.push((ty, b.get(at + 8..at + 8 + len)?.to_vec()));
        at += 8 + len;
    }
    Some(out)
}

/// A request: `body` after a header of `command` (the caller sets the other fields).
pub fn request(h: Header, body: &[u8]) -> Vec<u8> {
    let mut b = h.encode().to_vec();
    b.extend_from_slice(body);
    b
}

/// The body of a response (after the header), `None` if the header is not SMB2's.
pub fn body(b: &[u8]) -> Option<(Header, &[u8])> {
    Some((Header::decode(b)?, &b[HEADER_LEN..]))
}

/// 2.2.5 SESSION_SETUP request body with `token` (a raw NTLMSSP message).
pub fn session_setup_body(token: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 24];
    b[0..2].copy_from_slice(&25u16.to_le_bytes());
    b[3] = SIGNING_ENABLED as u8;
    // CAST: the buffer follows the fixed part, a small NTLMSSP token.
    b[12..14].copy_from_slice(&((HEADER_LEN + 24) as u16).to_le_bytes());
    b[14..16].copy_from_slice(&(token.len() as u16).to_le_bytes());
    b.extend_from_slice(token);
    b
}

/// The security buffer of a SESSION_SETUP request or response (its offsets are from the
/// header's start). Request: offset at body 12, response: at body 4.
pub fn security_buffer(msg: &[u8], response: bool) -> Option<&[u8]> {
    let o = HEADER_LEN + if response { 4 } else { 12 };
    let off = usize::from(u16_at(msg, o));
    let len = usize::from(u16_at(msg, o + 2));
    msg.get(off..off + len)
}

/// 2.2.6 SESSION_SETUP response body: SessionFlags, the token.
pub fn session_setup_response_body(flags: u16, token: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8];
    b[0..2].copy_from_slice(&9u16.to_le_bytes());
    b[2..4].copy_from_slice(&flags.to_le_bytes());
    // CAST: a small token after the 8-byte fixed part.
    b[4..6].copy_from_slice(&((HEADER_LEN + 8) as u16).to_le_bytes());
    b[6..8].copy_from_slice(&(token.len() as u16).to_le_bytes());
    b.extend_from_slice(token);
    b
}

/// 2.2.7 LOGOFF / 2.2.11 TREE_DISCONNECT request (and their responses): StructureSize 4.
pub fn empty_body() -> Vec<u8> {
    let mut b = vec![0u8; 4];
    b[0..2].copy_from_slice(&4u16.to_le_bytes());
    b
}

/// 2.2.9 TREE_CONNECT request body for `path` (`\\server\share`).
pub fn tree_connect_body(path: &str) -> Vec<u8> {
    let p = super::ntlm::utf16le(path);
    let mut b = vec![0u8; 8];
    b[0..2].copy_from_slice(&9u16.to_le_bytes());
    // CAST: header + 8, a short path.
    b[4..6].copy_from_slice(&((HEADER_LEN + 8) as u16).to_le_bytes());
    b[6..8].copy_from_slice(&(p.len() as u16).to_le_bytes());
    b.extend(p);
    b
}

/// 2.2.10 TREE_CONNECT response body: ShareType (1 disk), ShareFlags, Capabilities,
/// MaximalAccess.
pub fn tree_connect_response_body(maximal_access: u32) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[0..2].copy_from_slice(&16u16.to_le_bytes());
    b[2] = 1;
    b[12..16].copy_from_slice(&maximal_access.to_le_bytes());
    b
}

/// FILE_OVERWRITE_IF (2.2.13 CreateDisposition) and FILE_OPEN.
pub const FILE_OPEN: u32 = 1;
pub const FILE_OVERWRITE_IF: u32 = 5;
/// FILE_READ_DATA | FILE_WRITE_DATA | FILE_READ_ATTRIBUTES | SYNCHRONIZE...: GENERIC_READ |
/// GENERIC_WRITE.
pub const GENERIC_READ_WRITE: u32 = 0x8000_0000 | 0x4000_0000;
/// FILE_NON_DIRECTORY_FILE.
pub const NON_DIRECTORY_FILE: u32 = 0x0000_0040;

/// 2.2.13 CREATE request body: `name` relative to the share, no create contexts, no oplock,
/// impersonation level Impersonation, share read|write.
pub fn create_body(name: &str, access: u32, disposition: u32) -> Vec<u8> {
    let n = super::ntlm::utf16le(name);
    let mut b = vec![0u8; 56];
    b[0..2].copy_from_slice(&57u16.to_le_bytes());
    b[4..8].copy_from_slice(&2u32.to_le_bytes());
    b[24..28].copy_from_slice(&access.to_le_bytes());
    b[28..32].copy_from_slice(&0x80u32.to_le_bytes()); // FILE_ATTRIBUTE_NORMAL
    b[32..36].copy_from_slice(&3u32.to_le_bytes()); // FILE_SHARE_READ | FILE_SHARE_WRITE
    b[36..40].copy_from_slice(&disposition.to_le_bytes());
    b[40..44].copy_from_slice(&NON_DIRECTORY_FILE.to_le_bytes());
    // CAST: header + 56, a short name.
    b[44..46].copy_from_slice(&((HEADER_LEN + 56) as u16).to_le_bytes());
    b[46..48].copy_from_slice(&(n.len() as u16).to_le_bytes());
    if n.is_empty() {
        b.push(0);
    }
    b.extend(n);
    b
}

/// The file name of a CREATE request (the responder's reading).
pub fn create_name(msg: &[u8]) -> Option<String> {
    let off = usize::from(u16_at(msg, HEADER_LEN + 44));
    let len = usize::from(u16_at(msg, HEADER_LEN + 46));
    let n = msg.get(off..off + len)?;
    let units: Vec<u16> = n
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16(&units).ok()
}

/// 2.2.14 CREATE response: the FileId (persistent ‖ volatile) and EndOfFile.
pub fn create_response_file(body: &[u8]) -> Option<([u8; 16], u64)> {
    if body.len() < 88 || u16_at(body, 0) != 89 {
        return None;
    }
    Some((
        body[64..80].try_into().ok()?,
        u64::from_le_bytes(body[48..56].try_into().ok()?),
    ))
}

/// 2.2.14 CREATE response body (the responder's): CreateAction, EndOfFile, FileId.
pub fn create_response_body(file_id: [u8; 16], end_of_file: u64, action: u32) -> Vec<u8> {
    let mut b = vec![0u8; 88];
    b[0..2].copy_from_slice(&89u16.to_le_bytes());
    b[4..8].copy_from_slice(&action.to_le_bytes());
    b[48..56].copy_from_slice(&end_of_file.to_le_bytes());
    b[56..60].copy_from_slice(&0x80u32.to_le_bytes());
    b[64..80].copy_from_slice(&file_id);
    b
}

/// SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB: the response carries the attributes (EndOfFile).
pub const CLOSE_POSTQUERY_ATTRIB: u16 = 0x0001;

/// 2.2.15 CLOSE request body.
pub fn close_body(file_id: [u8; 16], flags: u16) -> Vec<u8> {
    let mut b = vec![0u8; 24];
    b[0..2].copy_from_slice(&24u16.to_le_bytes());
    b[2..4].copy_from_slice(&flags.to_le_bytes());
    b[8..24].copy_from_slice(&file_id);
    b
}

/// 2.2.16 CLOSE response: EndOfFile (with POSTQUERY_ATTRIB).
pub fn close_response_end_of_file(body: &[u8]) -> Option<u64> {
    if body.len() < 60 || u16_at(body, 0) != 60 {
        return None;
    }
    Some(u64::from_le_bytes(body[48..56].try_into().ok()?))
}

/// 2.2.16 CLOSE response body (the responder's).
pub fn close_response_body(end_of_file: Option<u64>) -> Vec<u8> {
    let mut b = vec![0u8; 60];
    b[0..2].copy_from_slice(&60u16.to_le_bytes());
    if let Some(eof) = end_of_file {
        b[2..4].copy_from_slice(&CLOSE_POSTQUERY_ATTRIB.to_le_bytes());
        b[48..56].copy_from_slice(&eof.to_le_bytes());
    }
    b
}

/// The credit charge of a `len`-byte READ or WRITE with LARGE_MTU (3.1.5.2).
pub fn credit_charge(len: usize) -> u16 {
    // CAST: ≤ 8 MiB / 64 KiB.
    len.div_ceil(CREDIT_UNIT).max(1) as u16
}

/// 2.2.21 WRITE request body: inline `data` (Channel NONE), or none with `channel` and the
/// descriptors of `len` bytes (RemainingBytes = len, Length = DataOffset = 0, as MS-SMB2
/// 3.2.4.7 says and ksmbd checks).
pub fn write_body(
    file_id: [u8; 16],
    offset: u64,
    data: &[u8],
    rdma: Option<(u32, &[BufferDescriptor], u32)>,
) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    b[0..2].copy_from_slice(&49u16.to_le_bytes());
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..32].copy_from_slice(&file_id);
    match rdma {
        None => {
            // CAST: ≤ MaxFragmentedSize.
            b[2..4].copy_from_slice(&(RW_BUFFER_OFFSET as u16).to_le_bytes());
            b[4..8].copy_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(data);
        }
        Some((channel, descs, len)) => {
            b[32..36].copy_from_slice(&channel.to_le_bytes());
            b[36..40].copy_from_slice(&len.to_le_bytes());
            put_channel_info(&mut b, 40, descs);
        }
    }
    if b.len() == 48 {
        b.push(0);
    }
    b
}

fn put_channel_info(b: &mut Vec<u8>, at: usize, descs: &[BufferDescriptor]) {
    // CAST: a few descriptors after the fixed part.
    b[at..at + 2].copy_from_slice(&(RW_BUFFER_OFFSET as u16).to_le_bytes());
    b[at + 2..at + 4]
        .copy_from_slice(&((descs.len() * BUFFER_DESCRIPTOR_LEN) as u16).to_le_bytes());
    for d in descs {
        b.extend_from_slice(&d.encode());
    }
}

/// 2.2.19 READ request body: `len` bytes at `offset`, inline or through `channel` into the
/// descriptors' buffers.
pub fn read_body(
    file_id: [u8; 16],
    offset: u64,
    len: u32,
    rdma: Option<(u32, &[BufferDescriptor])>,
) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    b[0..2].copy_from_slice(&49u16.to_le_bytes());
    b[4..8].copy_from_slice(&len.to_le_bytes());
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..32].copy_from_slice(&file_id);
    b[32..36].copy_from_slice(&1u32.to_le_bytes()); // MinimumCount
    if let Some((channel, descs)) = rdma {
        b[36..40].copy_from_slice(&channel.to_le_bytes());
        put_channel_info(&mut b, 44, descs);
    }
    if b.len() == 48 {
        b.push(0);
    }
    b
}

/// A READ or WRITE request as a server reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadWrite {
    pub file_id: [u8; 16],
    pub offset: u64,
    /// Bytes asked (READ Length; WRITE Length or, over RDMA, RemainingBytes).
    pub length: u32,
    pub channel: u32,
    pub descriptors: Vec<BufferDescriptor>,
    /// A WRITE's inline data.
    pub data: Vec<u8>,
}

/// Decodes a READ (`write` false) or WRITE request.
pub fn read_write_request(msg: &[u8], write: bool) -> Option<ReadWrite> {
    let r = msg.get(HEADER_LEN..HEADER_LEN + 48)?;
    let channel = u32_at(r, if write { 32 } else { 36 });
    let info = if write { 40 } else { 44 };
    let (off, len) = (
        usize::from(u16_at(r, info)),
        usize::from(u16_at(r, info + 2)),
    );
    let descriptors = if channel == CHANNEL_NONE {
        Vec::new()
    } else {
        BufferDescriptor::decode_all(msg.get(off..off + len)?)?
    };
    let (length, data) = if write && channel == CHANNEL_NONE {
        let (o, n) = (usize::from(u16_at(r, 2)), u32_at(r, 4) as usize);
        (u32_at(r, 4), msg.get(o..o + n)?.to_vec())
    } else if write {
        (u32_at(r, 36), Vec::new())
    } else {
        (u32_at(r, 4), Vec::new())
    };
    Some(ReadWrite {
        file_id: r[16..32].try_into().ok()?,
        offset: u64::from_le_bytes(r[8..16].try_into().ok()?),
        length,
        channel,
        descriptors,
        data,
    })
}

/// 2.2.20 READ response body: `data` inline at DataOffset 80, or (RDMA channel) none with
/// DataRemaining = the bytes written into the client's buffers.
pub fn read_response_body(data: &[u8], rdma_len: u32) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[0..2].copy_from_slice(&17u16.to_le_bytes());
    b[2] = 80;
    // CAST: ≤ MaxFragmentedSize.
    b[4..8].copy_from_slice(&(data.len() as u32).to_le_bytes());
    b[8..12].copy_from_slice(&rdma_len.to_le_bytes());
    b.extend_from_slice(data);
    if b.len() == 16 {
        b.push(0);
    }
    b
}

/// A READ response: (inline data, DataRemaining).
pub fn read_response(msg: &[u8]) -> Option<(&[u8], u32)> {
    let r = msg.get(HEADER_LEN..HEADER_LEN + 16)?;
    if u16_at(r, 0) != 17 {
        return None;
    }
    let (off, len) = (usize::from(r[2]), u32_at(r, 4) as usize);
    let data = if len == 0 {
        &[][..]
    } else {
        msg.get(off..off + len)?
    };
    Some((data, u32_at(r, 8)))
}

/// 2.2.22 WRITE response body: Count.
pub fn write_response_body(count: u32) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[0..2].copy_from_slice(&17u16.to_le_bytes());
    b[4..8].copy_from_slice(&count.to_le_bytes());
    b.push(0);
    b
}

/// A WRITE response's Count.
pub fn write_response_count(msg: &[u8]) -> Option<u32> {
    let r = msg.get(HEADER_LEN..HEADER_LEN + 16)?;
    (u16_at(r, 0) == 17).then(|| u32_at(r, 4))
}

/// 2.2.2 ERROR response body.
pub fn error_body() -> Vec<u8> {
    let mut b = vec![0u8; 9];
    b[0..2].copy_from_slice(&9u16.to_le_bytes());
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
