//! A minimal in-memory SMB2 server over the server role of [`Smbd`]: what smbdperf and the
//! two-host SMB2 tests put opposite the client of [`super::client`]. It answers NEGOTIATE
//! (3.0.2 or 3.1.1 with a SHA-512 preauth context), SESSION_SETUP (NTLMSSP CHALLENGE, then
//! the NTLMv2 proof checked against its one password), TREE_CONNECT, CREATE, CLOSE,
//! TREE_DISCONNECT, LOGOFF, and READ/WRITE inline or through the RDMA channel: it RDMA READs
//! a WRITE's buffers and RDMA WRITEs a READ's, and answers with Send-with-Invalidate of the
//! request's token when the channel is SMB2_CHANNEL_RDMA_V1_INVALIDATE (MS-SMB2 3.3.5.12,
//! 3.3.5.13). Files live in memory. Not a file server: no locking, no oplocks, no signing.

use std::collections::HashMap;

use super::smb2::{self, Header};
use super::transport::Smbd;
use super::wire::BufferDescriptor;
use super::{SmbdError, ntlm};

/// What the responder did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponderStats {
    pub requests: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub bytes_read_rdma: u64,
    pub bytes_written_rdma: u64,
    pub invalidating_responses: u64,
    pub logon_failures: u64,
}

/// See the module docs.
pub struct Responder<'c> {
    pub t: Smbd<'c>,
    password: String,
    challenge: [u8; 8],
    session_id: u64,
    authenticated: bool,
    files: HashMap<String, Vec<u8>>,
    open: HashMap<[u8; 16], String>,
    next_fid: u64,
    pub stats: ResponderStats,
}

impl<'c> Responder<'c> {
    /// A responder on a negotiated MS-SMBD server connection, accepting any user who knows
    /// `password`.
    pub fn new(t: Smbd<'c>, password: &str) -> Responder<'c> {
        Responder {
            t,
            password: password.to_string(),
            challenge: *b"\x01\x23\x45\x67\x89\xab\xcd\xef",
            session_id: 0,
            authenticated: false,
            files: HashMap::new(),
            open: HashMap::new(),
            next_fid: 1,
            stats: ResponderStats::default(),
        }
    }

    /// A file's bytes (after a WRITE).
    pub fn file(&self, name: &str) -> Option<&Vec<u8>> {
        self.files.get(name)
    }

    /// Puts a file in place (for READ workloads).
    pub fn put_file(&mut self, name: &str, data: Vec<u8>) {
        self.files.insert(name.to_string(), data);
    }

    /// Polls the transport and answers every request that arrived; returns how many.
    pub fn step(&mut self) -> Result<usize, SmbdError> {
        self.t.poll();
        let mut n = 0;
        while let Some(m) = self.t.try_receive() {
            self.handle(&m)?;
            n += 1;
        }
        if let Some(e) = self.t.error() {
            return Err(e.clone());
        }
        Ok(n)
    }

    fn respond(&mut self, req: &Header, status: u32, body: &[u8], invalidate: Option<u32>) {
        let h = Header {
            credit_charge: req.credit_charge,
            status,
            command: req.command,
            credits: req.credits.max(1),
            flags: smb2::FLAGS_SERVER_TO_REDIR,
            message_id: req.message_id,
            tree_id: req.tree_id,
            session_id: if req.command == smb2::SESSION_SETUP {
                self.session_id
            } else {
                req.session_id
            },
            ..Header::default()
        };
        let msg = smb2::request(h, body);
        if invalidate.is_some() {
            self.stats.invalidating_responses += 1;
        }
        // A send error ends the connection; the next step reports it.
        let _ = self.t.send_with(&msg, invalidate);
    }

    fn error(&mut self, h: &Header, status: u32) {
        self.respond(h, status, &smb2::error_body(), None);
    }

    fn handle(&mut self, m: &[u8]) -> Result<(), SmbdError> {
        let h = Header::decode(m)
            .ok_or_else(|| SmbdError::Protocol(format!("an SMB2 request of {} B", m.len())))?;
        self.stats.requests += 1;
        match h.command {
            smb2::NEGOTIATE => self.negotiate(&h, m),
            smb2::SESSION_SETUP => self.session_setup(&h, m),
            _ if !self.authenticated || h.session_id != self.session_id => {
                self.error(&h, smb2::STATUS_USER_SESSION_DELETED)
            }
            smb2::TREE_CONNECT => {
                let h = Header { tree_id: 1, ..h };
                self.respond(&h, 0, &smb2::tree_connect_response_body(0x001F_01FF), None)
            }
            smb2::TREE_DISCONNECT => self.respond(&h, 0, &smb2::empty_body(), None),
            smb2::LOGOFF => {
                self.authenticated = false;
                self.respond(&h, 0, &smb2::empty_body(), None)
            }
            smb2::CREATE => self.create(&h, m),
            smb2::CLOSE => {
                let fid: [u8; 16] = m[smb2::HEADER_LEN + 8..smb2::HEADER_LEN + 24]
                    .try_into()
                    .unwrap();
                match self.open.remove(&fid) {
                    Some(name) => {
                        let eof = self.files.get(&name).map_or(0, |f| f.len() as u64);
                        self.respond(&h, 0, &smb2::close_response_body(Some(eof)), None)
                    }
                    None => self.error(&h, smb2::STATUS_FILE_CLOSED),
                }
            }
            smb2::WRITE => return self.write(&h, m),
            smb2::READ => return self.read(&h, m),
            _ => self.error(&h, smb2::STATUS_INVALID_PARAMETER),
        }
        Ok(())
    }

    fn negotiate(&mut self, h: &Header, m: &[u8]) {
        let r = &m[smb2::HEADER_LEN..];
        let count = usize::from(u16::from_le_bytes([r[2], r[3]]));
        let offered: Vec<u16> = (0..count)
            .filter_map(|i| r.get(36 + 2 * i..38 + 2 * i))
            .map(|d| u16::from_le_bytes([d[0], d[1]]))
            .collect();
        let Some(dialect) = [smb2::SMB311, smb2::SMB302]
            .into_iter()
            .find(|d| offered.contains(d))
        else {
            return self.error(h, 0xC000_00BB); // STATUS_NOT_SUPPORTED
        };
        let mut b = vec![0u8; 64];
        b[0..2].copy_from_slice(&65u16.to_le_bytes());
        b[2..4].copy_from_slice(&smb2::SIGNING_ENABLED.to_le_bytes());
        b[4..6].copy_from_slice(&dialect.to_le_bytes());
        b[8..24].copy_from_slice(b"pvrdma-responder");
        b[24..28].copy_from_slice(&smb2::CAP_LARGE_MTU.to_le_bytes());
        let rw = self.t.cfg.max_read_write_size;
        b[28..32].copy_from_slice(&(1u32 << 20).to_le_bytes());
        b[32..36].copy_from_slice(&rw.to_le_bytes());
        b[36..40].copy_from_slice(&rw.to_le_bytes());
        // CAST: 128, the security buffer's offset (empty).
        b[56..58].copy_from_slice(&((smb2::HEADER_LEN + 64) as u16).to_le_bytes());
        if dialect == smb2::SMB311 {
            b[6..8].copy_from_slice(&1u16.to_le_bytes());
            // CAST: header + 64, 8-aligned.
            b[60..64].copy_from_slice(&((smb2::HEADER_LEN + 64) as u32).to_le_bytes());
            b.extend_from_slice(&smb2::PREAUTH_INTEGRITY_CAPABILITIES.to_le_bytes());
            b.extend_from_slice(&38u16.to_le_bytes());
            b.extend_from_slice(&[0u8; 4]);
            b.extend_from_slice(&1u16.to_le_bytes());
            b.extend_from_slice(&32u16.to_le_bytes());
            b.extend_from_slice(&smb2::SHA512.to_le_bytes());
            b.extend_from_slice(&[0x5au8; 32]);
        }
        self.respond(h, 0, &b, None);
    }

    fn session_setup(&mut self, h: &Header, m: &[u8]) {
        let token = smb2::security_buffer(m, false).unwrap_or(&[]).to_vec();
        match token.get(8) {
            Some(1) => {
                self.session_id = 0x1000_0000_0000_0001;
                let ch = ntlm::Challenge {
                    flags: ntlm::CLIENT_FLAGS,
                    server_challenge: self.challenge,
                    target_info: ntlm::EMPTY_TARGET_INFO.to_vec(),
                };
                let body = smb2::session_setup_response_body(0, &ch.encode());
                self.respond(h, smb2::STATUS_MORE_PROCESSING_REQUIRED, &body, None);
            }
            Some(3) if h.session_id == self.session_id => {
                match ntlm::verify(&token, self.challenge, &self.password) {
                    Some((_, true)) => {
                        self.authenticated = true;
                        let body = smb2::session_setup_response_body(0, &[]);
                        self.respond(h, 0, &body, None);
                    }
                    _ => {
                        self.stats.logon_failures += 1;
                        self.error(h, smb2::STATUS_LOGON_FAILURE);
                    }
                }
            }
            _ => self.error(h, smb2::STATUS_INVALID_PARAMETER),
        }
    }

    fn create(&mut self, h: &Header, m: &[u8]) {
        let Some(name) = smb2::create_name(m) else {
            return self.error(h, smb2::STATUS_INVALID_PARAMETER);
        };
        let disposition = u32::from_le_bytes(
            m[smb2::HEADER_LEN + 36..smb2::HEADER_LEN + 40]
                .try_into()
                .unwrap(),
        );
        let existed = self.files.contains_key(&name);
        match disposition {
            smb2::FILE_OPEN if !existed => {
                return self.error(h, 0xC000_0034); // STATUS_OBJECT_NAME_NOT_FOUND
            }
            smb2::FILE_OPEN => {}
            _ => {
                self.files.insert(name.clone(), Vec::new());
            }
        }
        let mut fid = [0u8; 16];
        fid[..8].copy_from_slice(&self.next_fid.to_le_bytes());
        fid[8..].copy_from_slice(&self.next_fid.to_le_bytes());
        self.next_fid += 1;
        let eof = self.files[&name].len() as u64;
        self.open.insert(fid, name);
        // FILE_OPENED 1, FILE_OVERWRITTEN 3, FILE_CREATED 2.
        let action = match (disposition, existed) {
            (smb2::FILE_OPEN, _) => 1,
            (_, true) => 3,
            _ => 2,
        };
        self.respond(h, 0, &smb2::create_response_body(fid, eof, action), None);
    }

    fn invalidate_token(rw: &smb2::ReadWrite) -> Option<u32> {
        (rw.channel == smb2::CHANNEL_RDMA_V1_INVALIDATE)
            .then(|| rw.descriptors.first().map(|d: &BufferDescriptor| d.token))
            .flatten()
    }

    fn write(&mut self, h: &Header, m: &[u8]) -> Result<(), SmbdError> {
        let Some(rw) = smb2::read_write_request(m, true) else {
            self.error(h, smb2::STATUS_INVALID_PARAMETER);
            return Ok(());
        };
        let Some(name) = self.open.get(&rw.file_id).cloned() else {
            self.error(h, smb2::STATUS_FILE_CLOSED);
            return Ok(());
        };
        let data = if rw.channel == smb2::CHANNEL_NONE {
            rw.data.clone()
        } else {
            let d = self.t.rdma_read(&rw.descriptors)?;
            self.stats.rdma_reads += rw.descriptors.len() as u64;
            self.stats.bytes_read_rdma += d.len() as u64;
            d
        };
        let f = self.files.get_mut(&name).unwrap();
        let end = rw.offset as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[rw.offset as usize..end].copy_from_slice(&data);
        // CAST: ≤ MaxReadWriteSize.
        let body = smb2::write_response_body(data.len() as u32);
        self.respond(h, 0, &body, Self::invalidate_token(&rw));
        Ok(())
    }

    fn read(&mut self, h: &Header, m: &[u8]) -> Result<(), SmbdError> {
        let Some(rw) = smb2::read_write_request(m, false) else {
            self.error(h, smb2::STATUS_INVALID_PARAMETER);
            return Ok(());
        };
        let Some(f) = self.open.get(&rw.file_id).and_then(|n| self.files.get(n)) else {
            self.error(h, smb2::STATUS_FILE_CLOSED);
            return Ok(());
        };
        let at = (rw.offset as usize).min(f.len());
        let end = (at + rw.length as usize).min(f.len());
        if end == at && rw.length != 0 {
            self.error(h, smb2::STATUS_END_OF_FILE);
            return Ok(());
        }
        let data = f[at..end].to_vec();
        if rw.channel == smb2::CHANNEL_NONE {
            self.respond(h, 0, &smb2::read_response_body(&data, 0), None);
        } else {
            self.t.rdma_write(&rw.descriptors, &data)?;
            self.stats.rdma_writes += rw.descriptors.len() as u64;
            self.stats.bytes_written_rdma += data.len() as u64;
            // CAST: ≤ MaxReadWriteSize.
            let body = smb2::read_response_body(&[], data.len() as u32);
            self.respond(h, 0, &body, Self::invalidate_token(&rw));
        }
        Ok(())
    }
}
