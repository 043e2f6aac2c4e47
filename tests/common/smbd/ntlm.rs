//! Raw NTLMSSP with NTLMv2 ([MS-NLMP] 2.2.1.1-2.2.1.3, 3.3.2), the client side SMB2
//! SESSION_SETUP carries without an SPNEGO wrapper (ksmbd takes a bare NTLMSSP token when the
//! SPNEGO decode fails: fs/smb/server/smb2pdu.c `decode_negotiation_token`), and the check a
//! server makes (the in-memory responder of smbdperf).
//!
//! No key exchange and no signing flags are asked: the session key is not used (the SMB2
//! session runs unsigned, which ksmbd's default `server signing = auto` allows when the
//! client does not require it).

use hmac::{Hmac, Mac};
use md4::{Digest, Md4};
use md5::Md5;

pub const SIGNATURE: &[u8; 8] = b"NTLMSSP\0";
pub const NEGOTIATE_UNICODE: u32 = 0x0000_0001;
pub const REQUEST_TARGET: u32 = 0x0000_0004;
pub const NEGOTIATE_NTLM: u32 = 0x0000_0200;
pub const ALWAYS_SIGN: u32 = 0x0000_8000;
pub const EXTENDED_SESSIONSECURITY: u32 = 0x0008_0000;
pub const TARGET_INFO: u32 = 0x0080_0000;
pub const NEGOTIATE_128: u32 = 0x2000_0000;
pub const NEGOTIATE_56: u32 = 0x8000_0000;
/// What the client asks: Unicode, NTLM with extended session security, target info.
pub const CLIENT_FLAGS: u32 = NEGOTIATE_UNICODE
    | REQUEST_TARGET
    | NEGOTIATE_NTLM
    | ALWAYS_SIGN
    | EXTENDED_SESSIONSECURITY
    | TARGET_INFO
    | NEGOTIATE_128
    | NEGOTIATE_56;

type HmacMd5 = Hmac<Md5>;

fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    let mut m = HmacMd5::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

pub fn utf16le(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// NTOWFv2 (MS-NLMP 3.3.2): HMAC-MD5 keyed by MD4(UTF-16LE(password)) of
/// UTF-16LE(UPPER(user) ‖ domain). ksmbd upper-cases the domain too (auth.c
/// `calc_ntlmv2_hash`): callers pass an upper-case domain so both readings agree.
pub fn ntowf_v2(user: &str, password: &str, domain: &str) -> [u8; 16] {
    let nt: [u8; 16] = Md4::digest(utf16le(password)).into();
    let mut who = utf16le(&user.to_uppercase());
    who.extend(utf16le(domain));
    hmac_md5(&nt, &[&who])
}

/// NEGOTIATE_MESSAGE: signature, type 1, flags, empty domain and workstation (32 bytes).
pub fn negotiate() -> Vec<u8> {
    let mut b = SIGNATURE.to_vec();
    b.extend(1u32.to_le_bytes());
    b.extend(CLIENT_FLAGS.to_le_bytes());
    b.extend([0u8; 16]);
    b
}

/// The parts of a CHALLENGE_MESSAGE the client uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub flags: u32,
    pub server_challenge: [u8; 8],
    pub target_info: Vec<u8>,
}

fn field(b: &[u8], at: usize) -> Option<&[u8]> {
    let len = usize::from(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?));
    let off = u32::from_le_bytes(b.get(at + 4..at + 8)?.try_into().ok()?) as usize;
    b.get(off..off.checked_add(len)?)
}

fn put_field(b: &mut [u8], at: usize, off: usize, len: usize) {
    // CAST: NTLMSSP fields are a few hundred bytes.
    b[at..at + 2].copy_from_slice(&(len as u16).to_le_bytes());
    b[at + 2..at + 4].copy_from_slice(&(len as u16).to_le_bytes());
    b[at + 4..at + 8].copy_from_slice(&(off as u32).to_le_bytes());
}

impl Challenge {
    pub fn decode(b: &[u8]) -> Option<Challenge> {
        if b.len() < 48 || &b[..8] != SIGNATURE || b[8..12] != 2u32.to_le_bytes() {
            return None;
        }
        Some(Challenge {
            flags: u32::from_le_bytes(b[20..24].try_into().ok()?),
            server_challenge: b[24..32].try_into().ok()?,
            target_info: field(b, 40)?.to_vec(),
        })
    }

    /// A CHALLENGE_MESSAGE (the responder's): no target name, `target_info` as AV pairs.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 56];
        b[..8].copy_from_slice(SIGNATURE);
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        put_field(&mut b, 12, 56, 0);
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..32].copy_from_slice(&self.server_challenge);
        put_field(&mut b, 40, 56, self.target_info.len());
        b.extend_from_slice(&self.target_info);
        b
    }
}

/// AV pairs holding only MsvAvEOL (what a minimal server sends as target info).
pub const EMPTY_TARGET_INFO: [u8; 4] = [0; 4];

/// AUTHENTICATE_MESSAGE with an NTLMv2 response to `ch` (MS-NLMP 3.3.2): the temp blob
/// (version 1, `timestamp` in FILETIME units, `client_challenge`, the server's AV pairs),
/// NTProofStr = HMAC-MD5(NTOWFv2, ServerChallenge ‖ temp) in front; LmChallengeResponse 24
/// zero bytes; no session key.
pub fn authenticate(
    ch: &Challenge,
    user: &str,
    password: &str,
    domain: &str,
    client_challenge: [u8; 8],
    timestamp: u64,
) -> Vec<u8> {
    let key = ntowf_v2(user, password, domain);
    let mut temp = vec![1u8, 1, 0, 0, 0, 0, 0, 0];
    temp.extend(timestamp.to_le_bytes());
    temp.extend(client_challenge);
    temp.extend([0u8; 4]);
    temp.extend(&ch.target_info);
    temp.extend([0u8; 4]);
    let proof = hmac_md5(&key, &[&ch.server_challenge, &temp]);
    let mut nt = proof.to_vec();
    nt.extend(temp);
    let (dom, usr, lm) = (utf16le(domain), utf16le(user), [0u8; 24]);
    let mut b = vec![0u8; 64];
    b[..8].copy_from_slice(SIGNATURE);
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    let mut at = 64;
    for (field_at, data) in [
        (12, &lm[..]),
        (20, &nt[..]),
        (28, &dom[..]),
        (36, &usr[..]),
        (44, &[][..]),
        (52, &[][..]),
    ] {
        put_field(&mut b, field_at, at, data.len());
        b.extend_from_slice(data);
        at += data.len();
    }
    b[60..64].copy_from_slice(&(CLIENT_FLAGS & ch.flags).to_le_bytes());
    b
}

/// The server's check of an AUTHENTICATE_MESSAGE: the user name it carries, and whether its
/// NTProofStr matches `password` for `server_challenge` (the domain as sent, upper-cased).
pub fn verify(b: &[u8], server_challenge: [u8; 8], password: &str) -> Option<(String, bool)> {
    if b.len() < 64 || &b[..8] != SIGNATURE || b[8..12] != 3u32.to_le_bytes() {
        return None;
    }
    let nt = field(b, 20)?;
    let dom = field(b, 28)?;
    let usr = field(b, 36)?;
    if nt.len() < 16 + 28 {
        return None;
    }
    let utf16 = |v: &[u8]| {
        String::from_utf16_lossy(
            &v.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect::<Vec<_>>(),
        )
    };
    let (user, domain) = (utf16(usr), utf16(dom).to_uppercase());
    let key = ntowf_v2(&user, password, &domain);
    let proof = hmac_md5(&key, &[&server_challenge, &nt[16..]]);
    Some((user, proof[..] == nt[..16]))
}
