//! A minimal SMB2 client over one MS-SMBD connection ([`Smbd`]): message ids and SMB2 credits
//! (LARGE_MTU: one credit per 64 KiB, MS-SMB2 3.2.4.1.5), NEGOTIATE, SESSION_SETUP with raw
//! NTLMSSP/NTLMv2, TREE_CONNECT, CREATE, READ and WRITE inline or through the RDMA channel
//! (SMB2_CHANNEL_RDMA_V1_INVALIDATE: the buffer fast-registered, its descriptor in the
//! request, the server's Send-with-Invalidate checked on the response), CLOSE,
//! TREE_DISCONNECT, LOGOFF. Requests can be pipelined ([`Client::submit`] /
//! [`Client::collect`]); the blocking calls wait for a peer that runs by itself (ksmbd).
//!
//! Unsigned: the client offers signing (SIGNING_ENABLED) without requiring it, and neither
//! ksmbd's default (`server signing = auto`) nor the responder requires it, so no message is
//! signed and the 3.1.1 preauth hash is not needed (it only feeds key derivation).

use std::collections::HashMap;

use super::responder::Responder;
use super::smb2::{self, Header};
use super::transport::{RdmaBuffer, Smbd};
use super::{SmbdError, ntlm};

/// Credits the client tries to hold (asked for on top of each request's charge).
pub const CREDIT_TARGET: u32 = 512;

/// What the negotiate returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub response: smb2::NegotiateResponse,
    /// 3.1.1: the response's contexts (type, data).
    pub contexts: Vec<(u16, Vec<u8>)>,
}

/// A response that was not the one expected.
fn unexpected(what: &str, h: &Header) -> SmbdError {
    SmbdError::Protocol(format!(
        "{what}: status {:#010x}, command {:#x}",
        h.status, h.command
    ))
}

/// One SMB2 connection; see the module docs.
pub struct Client<'c> {
    pub t: Smbd<'c>,
    next_id: u64,
    /// SMB2 credits held (granted and not yet charged).
    pub credits: u32,
    pub session_id: u64,
    pub tree_id: u32,
    pub dialect: u16,
    done: HashMap<u64, Vec<u8>>,
    /// Interim (STATUS_PENDING) responses seen.
    pub interim: u64,
    /// The server on another simulated host of the same cluster, driven from this thread
    /// while the client waits (`None`: the peer runs by itself).
    pub local_peer: Option<Responder<'c>>,
}

impl<'c> Client<'c> {
    /// A client over a negotiated MS-SMBD connection (one credit: the NEGOTIATE's).
    pub fn new(t: Smbd<'c>) -> Client<'c> {
        Client {
            t,
            next_id: 0,
            credits: 1,
            session_id: 0,
            tree_id: 0,
            dialect: 0,
            done: HashMap::new(),
            interim: 0,
            local_peer: None,
        }
    }

    /// Sends `command` with `body`, charging `charge` credits; returns its message id.
    pub fn submit(&mut self, command: u16, charge: u16, body: &[u8]) -> Result<u64, SmbdError> {
        let charge = charge.max(1);
        if u32::from(charge) > self.credits {
            return Err(SmbdError::Protocol(format!(
                "an SMB2 request of {charge} credits with {} held",
                self.credits
            )));
        }
        let id = self.next_id;
        let ask = u32::from(charge) + CREDIT_TARGET.saturating_sub(self.credits).min(64);
        let h = Header {
            credit_charge: if command == smb2::NEGOTIATE {
                0
            } else {
                charge
            },
            command,
            // CAST: ≤ 64 + charge.
            credits: ask as u16,
            message_id: id,
            tree_id: self.tree_id,
            session_id: self.session_id,
            ..Header::default()
        };
        self.t.send(&smb2::request(h, body))?;
        self.next_id += u64::from(charge);
        self.credits -= u32::from(charge);
        Ok(id)
    }

    /// Takes every reassembled message (after the transport was polled): credits granted,
    /// interim responses counted, final responses kept by message id.
    pub fn collect(&mut self) -> Result<(), SmbdError> {
        while let Some(m) = self.t.try_receive() {
            let h = Header::decode(&m)
                .ok_or_else(|| SmbdError::Protocol(format!("an SMB2 response of {} B", m.len())))?;
            self.credits += u32::from(h.credits);
            if h.status == smb2::STATUS_PENDING && h.flags & smb2::FLAGS_ASYNC != 0 {
                self.interim += 1;
                continue;
            }
            self.done.insert(h.message_id, m);
        }
        Ok(())
    }

    /// The response to `id`, if it arrived.
    pub fn take(&mut self, id: u64) -> Option<Vec<u8>> {
        self.done.remove(&id)
    }

    /// Waits for the response to `id` (the peer runs by itself).
    pub fn wait(&mut self, id: u64) -> Result<Vec<u8>, SmbdError> {
        loop {
            self.collect()?;
            if let Some(m) = self.take(id) {
                return Ok(m);
            }
            self.pump()?;
        }
    }

    /// Waits for a message: polls the local peer too if there is one.
    pub fn pump(&mut self) -> Result<(), SmbdError> {
        let Some(p) = self.local_peer.as_mut() else {
            return self.t.wait_inbox();
        };
        let t = &mut self.t;
        let mut failed = None;
        t.cluster().wait_for("an SMB2 response", || {
            t.poll();
            if let Err(e) = p.step() {
                failed = Some(e);
            }
            t.inbox_len() > 0 || t.error().is_some() || failed.is_some()
        });
        match (failed, t.error()) {
            (Some(e), _) => Err(e),
            (None, Some(e)) if t.inbox_len() == 0 => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// [`Client::submit`] and [`Client::wait`].
    pub fn call(&mut self, command: u16, charge: u16, body: &[u8]) -> Result<Vec<u8>, SmbdError> {
        let id = self.submit(command, charge, body)?;
        self.wait(id)
    }

    /// NEGOTIATE of `dialects` (3.1.1 with its preauth integrity context); the response
    /// must name one of them with status 0.
    pub fn negotiate(&mut self, dialects: &[u16]) -> Result<Negotiated, SmbdError> {
        let guid = *b"pvrdma-ndk-smbd!";
        let req = smb2::negotiate_request(self.next_id, dialects, guid);
        let h = Header::decode(&req).unwrap();
        self.t.send(&req)?;
        self.next_id += 1;
        self.credits -= 1;
        let m = self.wait(h.message_id)?;
        let response = smb2::NegotiateResponse::decode(&m)
            .ok_or_else(|| SmbdError::Protocol(format!("a NEGOTIATE response: {m:02x?}")))?;
        if response.header.status != 0 || !dialects.contains(&response.dialect) {
            return Err(unexpected("NEGOTIATE", &response.header));
        }
        self.dialect = response.dialect;
        let contexts = if response.dialect == smb2::SMB311 {
            smb2::negotiate_contexts(&m)
                .ok_or_else(|| SmbdError::Protocol("the negotiate contexts".into()))?
        } else {
            Vec::new()
        };
        Ok(Negotiated { response, contexts })
    }

    /// SESSION_SETUP in two legs (NTLMSSP NEGOTIATE → CHALLENGE with
    /// STATUS_MORE_PROCESSING_REQUIRED, AUTHENTICATE → STATUS_SUCCESS); returns the
    /// SessionFlags, or the final status as a refusal.
    pub fn session_setup(
        &mut self,
        user: &str,
        password: &str,
        domain: &str,
    ) -> Result<u16, SmbdError> {
        let m = self.call(
            smb2::SESSION_SETUP,
            1,
            &smb2::session_setup_body(&ntlm::negotiate()),
        )?;
        let h = Header::decode(&m).unwrap();
        if h.status != smb2::STATUS_MORE_PROCESSING_REQUIRED {
            return Err(unexpected("SESSION_SETUP (NTLMSSP NEGOTIATE)", &h));
        }
        self.session_id = h.session_id;
        let ch = smb2::security_buffer(&m, true)
            .and_then(ntlm::Challenge::decode)
            .ok_or_else(|| SmbdError::Protocol(format!("an NTLMSSP CHALLENGE: {m:02x?}")))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // FILETIME: 100 ns units since 1601.
        let filetime = (now.as_secs() + 11_644_473_600) * 10_000_000;
        let cc: [u8; 8] = (now.as_nanos() as u64 ^ 0x5a5a_1234_9876_abcd).to_le_bytes();
        let auth = ntlm::authenticate(&ch, user, password, domain, cc, filetime);
        let m = self.call(smb2::SESSION_SETUP, 1, &smb2::session_setup_body(&auth))?;
        let h = Header::decode(&m).unwrap();
        if h.status != smb2::STATUS_SUCCESS {
            return Err(SmbdError::Refused(h.status as i32));
        }
        Ok(u16::from_le_bytes([
            m[smb2::HEADER_LEN + 2],
            m[smb2::HEADER_LEN + 3],
        ]))
    }

    /// TREE_CONNECT to `path`; the tree id is kept.
    pub fn tree_connect(&mut self, path: &str) -> Result<(), SmbdError> {
        let m = self.call(smb2::TREE_CONNECT, 1, &smb2::tree_connect_body(path))?;
        let h = Header::decode(&m).unwrap();
        if h.status != 0 {
            return Err(unexpected("TREE_CONNECT", &h));
        }
        self.tree_id = h.tree_id;
        Ok(())
    }

    /// CREATE of `name` for read and write; (FileId, EndOfFile).
    pub fn create(&mut self, name: &str, disposition: u32) -> Result<([u8; 16], u64), SmbdError> {
        let body = smb2::create_body(name, smb2::GENERIC_READ_WRITE, disposition);
        let m = self.call(smb2::CREATE, 1, &body)?;
        let (h, b) = smb2::body(&m).unwrap();
        if h.status != 0 {
            return Err(unexpected("CREATE", &h));
        }
        smb2::create_response_file(b)
            .ok_or_else(|| SmbdError::Protocol(format!("a CREATE response: {b:02x?}")))
    }

    /// CLOSE with POSTQUERY_ATTRIB: the file's EndOfFile.
    pub fn close_file(&mut self, file_id: [u8; 16]) -> Result<u64, SmbdError> {
        let body = smb2::close_body(file_id, smb2::CLOSE_POSTQUERY_ATTRIB);
        let m = self.call(smb2::CLOSE, 1, &body)?;
        let (h, b) = smb2::body(&m).unwrap();
        if h.status != 0 {
            return Err(unexpected("CLOSE", &h));
        }
        smb2::close_response_end_of_file(b)
            .ok_or_else(|| SmbdError::Protocol(format!("a CLOSE response: {b:02x?}")))
    }

    /// TREE_DISCONNECT, then LOGOFF.
    pub fn logoff(&mut self) -> Result<(), SmbdError> {
        for (cmd, what) in [
            (smb2::TREE_DISCONNECT, "TREE_DISCONNECT"),
            (smb2::LOGOFF, "LOGOFF"),
        ] {
            let m = self.call(cmd, 1, &smb2::empty_body())?;
            let h = Header::decode(&m).unwrap();
            if h.status != 0 {
                return Err(unexpected(what, &h));
            }
        }
        self.tree_id = 0;
        self.session_id = 0;
        Ok(())
    }

    /// An inline WRITE of `data` at `offset` (fragmented by the transport): its Count.
    pub fn write_inline(
        &mut self,
        file_id: [u8; 16],
        offset: u64,
        data: &[u8],
    ) -> Result<u32, SmbdError> {
        let body = smb2::write_body(file_id, offset, data, None);
        let m = self.call(smb2::WRITE, smb2::credit_charge(data.len()), &body)?;
        let h = Header::decode(&m).unwrap();
        if h.status != 0 {
            return Err(unexpected("WRITE", &h));
        }
        smb2::write_response_count(&m).ok_or_else(|| SmbdError::Protocol("WRITE Count".into()))
    }

    /// An inline READ of `len` bytes at `offset`: the data.
    pub fn read_inline(
        &mut self,
        file_id: [u8; 16],
        offset: u64,
        len: u32,
    ) -> Result<Vec<u8>, SmbdError> {
        let body = smb2::read_body(file_id, offset, len, None);
        let m = self.call(smb2::READ, smb2::credit_charge(len as usize), &body)?;
        let h = Header::decode(&m).unwrap();
        if h.status != 0 {
            return Err(unexpected("READ", &h));
        }
        smb2::read_response(&m)
            .map(|(d, _)| d.to_vec())
            .ok_or_else(|| SmbdError::Protocol("a READ response".into()))
    }

    /// Registers `len` bytes of `buf` (remote read for a WRITE, remote write for a READ) and
    /// submits the request with SMB2_CHANNEL_RDMA_V1_INVALIDATE and its one descriptor.
    pub fn start_rdma(
        &mut self,
        write: bool,
        file_id: [u8; 16],
        offset: u64,
        buf: &mut RdmaBuffer,
        len: usize,
    ) -> Result<u64, SmbdError> {
        let d = self.t.register(buf, len, !write)?;
        let ch = smb2::CHANNEL_RDMA_V1_INVALIDATE;
        // CAST: len ≤ MaxReadWriteSize.
        let (cmd, body) = if write {
            (
                smb2::WRITE,
                smb2::write_body(file_id, offset, &[], Some((ch, &[d], len as u32))),
            )
        } else {
            (
                smb2::READ,
                smb2::read_body(file_id, offset, len as u32, Some((ch, &[d]))),
            )
        };
        self.submit(cmd, smb2::credit_charge(len), &body)
    }

    /// Checks the response to an RDMA-channel request of `len` bytes: status 0, Count (WRITE)
    /// or DataRemaining (READ) equal to `len`, and the server's Send-with-Invalidate of the
    /// buffer's token reported by the receive (NDK_RESULT_EX ReceiveAndInvalidate); the buffer
    /// is free to register again.
    pub fn finish_rdma(
        &mut self,
        write: bool,
        m: &[u8],
        buf: &mut RdmaBuffer,
        len: usize,
    ) -> Result<(), SmbdError> {
        let h = Header::decode(m).unwrap();
        if h.status != 0 {
            return Err(unexpected(if write { "WRITE" } else { "READ" }, &h));
        }
        let moved = if write {
            smb2::write_response_count(m)
        } else {
            smb2::read_response(m).map(|(d, rem)| if d.is_empty() { rem } else { 0 })
        };
        if moved != Some(len as u32) {
            return Err(SmbdError::Protocol(format!(
                "an RDMA-channel {} of {len} B answered {moved:?}",
                if write { "WRITE" } else { "READ" }
            )));
        }
        if !self.t.remotely_invalidated(buf) {
            return Err(SmbdError::Protocol(format!(
                "the response did not invalidate token {:#x}",
                buf.registered.map_or(0, |d| d.token)
            )));
        }
        Ok(())
    }

    /// One RDMA-channel WRITE or READ, waited for.
    pub fn rdma(
        &mut self,
        write: bool,
        file_id: [u8; 16],
        offset: u64,
        buf: &mut RdmaBuffer,
        len: usize,
    ) -> Result<(), SmbdError> {
        let id = self.start_rdma(write, file_id, offset, buf, len)?;
        let m = self.wait(id)?;
        self.finish_rdma(write, &m, buf, len)
    }
}
