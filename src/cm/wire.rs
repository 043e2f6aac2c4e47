//! Big-endian field access over MAD buffers and the 24-byte common MAD header (cm.md §2.1).
//!
//! Every accessor is total: a read outside the buffer returns 0 and a write outside it is
//! dropped, so a view that skipped `new_checked` still cannot panic. The checked constructors
//! make those cases unreachable for well-formed input; they are not what keeps the code safe.
#![deny(unsafe_code)]

use super::WireError;

/// A CM MAD is exactly this long on the wire (cm.md §2.1).
pub const MAD_LEN: usize = 256;
/// Offset of the CM message body inside the MAD: every table offset of cm.md §3 is from here.
pub const BODY: usize = 24;

/// BaseVersion of every MAD (Linux mad.c drops others).
pub const BASE_VERSION: u8 = 1;
/// MgmtClass of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// ClassVersion the Linux CM agent registers for; any other is silently dropped.
pub const CM_CLASS_VERSION: u8 = 2;
/// Method SEND: the only method CM messages use.
pub const METHOD_SEND: u8 = 0x03;
/// The response bit of the Method byte.
pub const METHOD_RESPONSE: u8 = 0x80;

/// CM attribute IDs (cm.md §3.1, ib_cm.h).
pub mod attr {
    /// Connect request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a REQ.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request (not supported: connectionless).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path (out of scope, cm.md §3.1).
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001A;
}

pub(crate) fn get_u8(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

fn get_n<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = off.checked_add(N).and_then(|end| b.get(off..end)) {
        out.copy_from_slice(src);
    }
    out
}

pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes(get_n(b, off))
}

pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(get_n(b, off))
}

pub(crate) fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(get_n(b, off))
}

/// The 24-bit field in the top three bytes of the dword at `off` (a QPN, PSN or EECN).
pub(crate) fn be24(b: &[u8], off: usize) -> u32 {
    be32(b, off) >> 8
}

/// The bits under `mask` of the byte at `off`, shifted down (cm.md "43/0xF8").
pub(crate) fn bits(b: &[u8], off: usize, mask: u8) -> u8 {
    (get_u8(b, off) & mask) >> mask.trailing_zeros()
}

pub(crate) fn put(b: &mut [u8], off: usize, data: &[u8]) {
    if let Some(dst) = off
        .checked_add(data.len())
        .and_then(|end| b.get_mut(off..end))
    {
        dst.copy_from_slice(data);
    }
}

pub(crate) fn set_u8(b: &mut [u8], off: usize, v: u8) {
    put(b, off, &[v]);
}

pub(crate) fn set_be16(b: &mut [u8], off: usize, v: u16) {
    put(b, off, &v.to_be_bytes());
}

pub(crate) fn set_be32(b: &mut [u8], off: usize, v: u32) {
    put(b, off, &v.to_be_bytes());
}

pub(crate) fn set_be64(b: &mut [u8], off: usize, v: u64) {
    put(b, off, &v.to_be_bytes());
}

/// Writes the low 24 bits of `v` into bytes `off..off + 3`; byte `off + 3` (another field)
/// is left alone.
pub(crate) fn set_be24(b: &mut [u8], off: usize, v: u32) {
    let [_, hi, mid, lo] = v.to_be_bytes();
    put(b, off, &[hi, mid, lo]);
}

/// Replaces the bits under `mask` of the byte at `off` with `v` (excess bits of `v` dropped).
pub(crate) fn set_bits(b: &mut [u8], off: usize, mask: u8, v: u8) {
    let shift = mask.trailing_zeros();
    let old = get_u8(b, off);
    set_u8(b, off, (old & !mask) | ((v << shift) & mask));
}

pub(crate) fn slice(b: &[u8], off: usize, len: usize) -> &[u8] {
    off.checked_add(len)
        .and_then(|end| b.get(off..end))
        .unwrap_or(&[])
}

pub(crate) fn slice_mut(b: &mut [u8], off: usize, len: usize) -> &mut [u8] {
    off.checked_add(len)
        .and_then(|end| b.get_mut(off..end))
        .unwrap_or_default()
}

/// Length rule shared by every CM view: exactly one MAD.
pub(crate) fn check_mad_len(len: usize) -> Result<(), WireError> {
    match len {
        MAD_LEN => Ok(()),
        n if n < MAD_LEN => Err(WireError::Truncated),
        _ => Err(WireError::Oversized),
    }
}

/// A view of the common MAD header (ib_mad.h `struct ib_mad_hdr`) over a whole MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mad<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> Mad<T> {
    /// Wraps `buf` without checking it: the accessors still never panic.
    pub const fn new_unchecked(buf: T) -> Self {
        Self(buf)
    }

    /// Wraps `buf` after `check_len` and `check_header`.
    ///
    /// # Errors
    /// The first rule `buf` breaks.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let mad = Self(buf);
        mad.check_len()?;
        mad.check_header()?;
        Ok(mad)
    }

    /// A CM MAD is exactly 256 bytes: shorter is truncated, longer is not a MAD.
    ///
    /// # Errors
    /// [`WireError::Truncated`] or [`WireError::Oversized`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_mad_len(self.0.as_ref().len())
    }

    /// What Linux mad.c and the CM agent accept: BaseVersion 1, class 0x07, ClassVersion 2,
    /// Method SEND (cm.md §2.1).
    ///
    /// # Errors
    /// The first field that differs.
    pub fn check_header(&self) -> Result<(), WireError> {
        if self.base_version() != BASE_VERSION {
            return Err(WireError::BaseVersion(self.base_version()));
        }
        if self.mgmt_class() != MGMT_CLASS_CM {
            return Err(WireError::NotCmClass(self.mgmt_class()));
        }
        if self.class_version() != CM_CLASS_VERSION {
            return Err(WireError::ClassVersion(self.class_version()));
        }
        if self.method() != METHOD_SEND {
            return Err(WireError::Method(self.method()));
        }
        Ok(())
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.0
    }

    fn b(&self) -> &[u8] {
        self.0.as_ref()
    }

    /// BaseVersion (byte 0).
    pub fn base_version(&self) -> u8 {
        get_u8(self.b(), 0)
    }
    /// MgmtClass (byte 1).
    pub fn mgmt_class(&self) -> u8 {
        get_u8(self.b(), 1)
    }
    /// ClassVersion (byte 2).
    pub fn class_version(&self) -> u8 {
        get_u8(self.b(), 2)
    }
    /// Method with the response bit (byte 3).
    pub fn method(&self) -> u8 {
        get_u8(self.b(), 3)
    }
    /// Status (bytes 4–5).
    pub fn status(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// ClassSpecific (bytes 6–7).
    pub fn class_specific(&self) -> u16 {
        be16(self.b(), 6)
    }
    /// TransactionID (bytes 8–15).
    pub fn transaction_id(&self) -> u64 {
        be64(self.b(), 8)
    }
    /// AttributeID (bytes 16–17).
    pub fn attribute_id(&self) -> u16 {
        be16(self.b(), 16)
    }
    /// AttributeModifier (bytes 20–23).
    pub fn attribute_modifier(&self) -> u32 {
        be32(self.b(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    fn m(&mut self) -> &mut [u8] {
        self.0.as_mut()
    }
    /// Sets BaseVersion.
    pub fn set_base_version(&mut self, v: u8) {
        set_u8(self.m(), 0, v);
    }
    /// Sets MgmtClass.
    pub fn set_mgmt_class(&mut self, v: u8) {
        set_u8(self.m(), 1, v);
    }
    /// Sets ClassVersion.
    pub fn set_class_version(&mut self, v: u8) {
        set_u8(self.m(), 2, v);
    }
    /// Sets Method (with the response bit).
    pub fn set_method(&mut self, v: u8) {
        set_u8(self.m(), 3, v);
    }
    /// Sets Status.
    pub fn set_status(&mut self, v: u16) {
        set_be16(self.m(), 4, v);
    }
    /// Sets ClassSpecific.
    pub fn set_class_specific(&mut self, v: u16) {
        set_be16(self.m(), 6, v);
    }
    /// Sets TransactionID.
    pub fn set_transaction_id(&mut self, v: u64) {
        set_be64(self.m(), 8, v);
    }
    /// Sets AttributeID.
    pub fn set_attribute_id(&mut self, v: u16) {
        set_be16(self.m(), 16, v);
    }
    /// Sets AttributeModifier.
    pub fn set_attribute_modifier(&mut self, v: u32) {
        set_be32(self.m(), 20, v);
    }
}

/// A zero-filled CM MAD with the header every CM message carries (cm.md §2.1): BaseVersion 1,
/// class 0x07, ClassVersion 2, Method SEND, `attribute`, `tid`.
pub fn new_cm_mad(attribute: u16, tid: u64) -> [u8; MAD_LEN] {
    let mut buf = [0u8; MAD_LEN];
    let mut mad = Mad::new_unchecked(&mut buf[..]);
    mad.set_base_version(BASE_VERSION);
    mad.set_mgmt_class(MGMT_CLASS_CM);
    mad.set_class_version(CM_CLASS_VERSION);
    mad.set_method(METHOD_SEND);
    mad.set_transaction_id(tid);
    mad.set_attribute_id(attribute);
    buf
}
