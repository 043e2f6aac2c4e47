//! Command channel layouts (reference §8; M8-M11): typed request views and response images.
//!
//! Each request type names its code and field offsets (offsets include the 16-byte header, as
//! the reference lists them) and decodes from the command slot with [`Command::parse`]
//! (nova `CommandToGsp` style); responses are built with [`Response`].
#![deny(unsafe_code)]

use crate::le::Le;
use crate::qp::QpAttr;

/// Largest request (`union pvrdma_cmd_req`, MODIFY_QP).
pub const REQ_MAX: usize = 184;
/// Largest response (QUERY_QP).
pub const RESP_MAX: usize = 176;
/// Header size of requests and responses.
pub const HDR: usize = 16;
/// Response code flag.
pub const RESP_FLAG: u32 = 0x8000_0000;

/// Command codes.
pub mod code {
    #![allow(missing_docs)]
    pub const QUERY_PORT: u32 = 0;
    pub const QUERY_PKEY: u32 = 1;
    pub const CREATE_PD: u32 = 2;
    pub const DESTROY_PD: u32 = 3;
    pub const CREATE_MR: u32 = 4;
    pub const DESTROY_MR: u32 = 5;
    pub const CREATE_CQ: u32 = 6;
    pub const RESIZE_CQ: u32 = 7;
    pub const DESTROY_CQ: u32 = 8;
    pub const CREATE_QP: u32 = 9;
    pub const MODIFY_QP: u32 = 10;
    pub const QUERY_QP: u32 = 11;
    pub const DESTROY_QP: u32 = 12;
    pub const CREATE_UC: u32 = 13;
    pub const DESTROY_UC: u32 = 14;
    pub const CREATE_BIND: u32 = 15;
    pub const DESTROY_BIND: u32 = 16;
    pub const CREATE_SRQ: u32 = 17;
    pub const MODIFY_SRQ: u32 = 18;
    pub const QUERY_SRQ: u32 = 19;
    pub const DESTROY_SRQ: u32 = 20;
}

/// Error codes in ERR and `hdr.err` (M8).
pub mod err {
    /// Success.
    pub const OK: u32 = 0;
    /// Unknown handle.
    pub const UNKNOWN_HANDLE: u32 = 2;
    /// No resources.
    pub const NO_RESOURCES: u32 = 12;
    /// Busy (object still referenced).
    pub const BUSY: u32 = 16;
    /// Invalid argument.
    pub const INVALID: u32 = 22;
    /// Unsupported or unknown command.
    pub const UNSUPPORTED: u32 = 95;
}

/// Request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqHeader {
    /// Opaque key echoed in the response.
    pub response: u64,
    /// Command code.
    pub cmd: u32,
}

impl ReqHeader {
    /// Decodes the header of a request image.
    pub fn parse(b: &[u8]) -> Self {
        let v = Le(b);
        Self {
            response: v.u64(0),
            cmd: v.u32(8),
        }
    }
}

/// A request type bound to its command code.
pub trait Command: Sized {
    /// Command code.
    const CODE: u32;
    /// Request size in bytes (including the header).
    const REQ_LEN: usize;
    /// Response size in bytes (including the header).
    const RESP_LEN: usize;
    /// Decodes from a request image of at least [`REQ_MAX`] bytes.
    fn parse(v: &Le<&[u8]>) -> Self;
}

macro_rules! command {
    (
        $(#[$m:meta])* $name:ident = $code:expr, req $req:expr, resp $resp:expr,
        { $( $(#[$fm:meta])* $field:ident : $ty:ident @ $off:expr ),* $(,)? }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }
        impl Command for $name {
            const CODE: u32 = $code;
            const REQ_LEN: usize = $req;
            const RESP_LEN: usize = $resp;
            #[allow(unused_variables)]
            fn parse(v: &Le<&[u8]>) -> Self {
                Self { $( $field: v.$ty($off), )* }
            }
        }
    };
}

command!(
    /// QUERY_PORT.
    QueryPort = code::QUERY_PORT, req 24, resp 64, { port_num: u8 @ 16 }
);
command!(
    /// QUERY_PKEY.
    QueryPkey = code::QUERY_PKEY, req 24, resp 24, { port_num: u8 @ 16, index: u8 @ 17 }
);
command!(
    /// CREATE_PD.
    CreatePd = code::CREATE_PD, req 24, resp 24, { ctx_handle: u32 @ 16 }
);
command!(
    /// DESTROY_PD.
    DestroyPd = code::DESTROY_PD, req 24, resp 16, { pd_handle: u32 @ 16 }
);
command!(
    /// CREATE_MR.
    CreateMr = code::CREATE_MR, req 56, resp 32, {
        start: u64 @ 16, length: u64 @ 24, pdir_dma: u64 @ 32, pd_handle: u32 @ 40,
        access_flags: u32 @ 44, flags: u32 @ 48, nchunks: u32 @ 52,
    }
);
command!(
    /// DESTROY_MR.
    DestroyMr = code::DESTROY_MR, req 24, resp 16, { mr_handle: u32 @ 16 }
);
command!(
    /// CREATE_CQ.
    CreateCq = code::CREATE_CQ, req 40, resp 24, {
        pdir_dma: u64 @ 16, ctx_handle: u32 @ 24, cqe: u32 @ 28, nchunks: u32 @ 32,
    }
);
command!(
    /// DESTROY_CQ.
    DestroyCq = code::DESTROY_CQ, req 24, resp 16, { cq_handle: u32 @ 16 }
);
command!(
    /// CREATE_QP (response layout depends on VERSION, M1).
    CreateQp = code::CREATE_QP, req 80, resp 48, {
        pdir_dma: u64 @ 16, pd_handle: u32 @ 24, send_cq_handle: u32 @ 28,
        recv_cq_handle: u32 @ 32, srq_handle: u32 @ 36, max_send_wr: u32 @ 40,
        max_recv_wr: u32 @ 44, max_send_sge: u32 @ 48, max_recv_sge: u32 @ 52,
        max_inline_data: u32 @ 56, lkey: u32 @ 60, access_flags: u32 @ 64,
        total_chunks: u16 @ 68, send_chunks: u16 @ 70, max_atomic_arg: u16 @ 72,
        sq_sig_all: u8 @ 74, qp_type: u8 @ 75, is_srq: u8 @ 76,
    }
);
command!(
    /// QUERY_QP.
    QueryQp = code::QUERY_QP, req 24, resp 176, { qp_handle: u32 @ 16, attr_mask: u32 @ 20 }
);
command!(
    /// DESTROY_QP.
    DestroyQp = code::DESTROY_QP, req 24, resp 24, { qp_handle: u32 @ 16 }
);
command!(
    /// CREATE_BIND.
    CreateBind = code::CREATE_BIND, req 48, resp 16, {
        mtu: u32 @ 16, vlan: u32 @ 20, index: u32 @ 24, gid_type: u8 @ 44,
    }
);
command!(
    /// DESTROY_BIND.
    DestroyBind = code::DESTROY_BIND, req 40, resp 16, { index: u32 @ 16 }
);
command!(
    /// CREATE_SRQ.
    CreateSrq = code::CREATE_SRQ, req 56, resp 24, {
        pdir_dma: u64 @ 16, pd_handle: u32 @ 24, nchunks: u32 @ 28, max_wr: u32 @ 32,
        max_sge: u32 @ 36, srq_limit: u32 @ 40, srq_type: u8 @ 48,
    }
);
command!(
    /// MODIFY_SRQ.
    ModifySrq = code::MODIFY_SRQ, req 40, resp 16, {
        srq_handle: u32 @ 16, attr_mask: u32 @ 20, max_wr: u32 @ 24, max_sge: u32 @ 28,
        srq_limit: u32 @ 32,
    }
);
command!(
    /// QUERY_SRQ.
    QuerySrq = code::QUERY_SRQ, req 24, resp 32, { srq_handle: u32 @ 16 }
);
command!(
    /// DESTROY_SRQ.
    DestroySrq = code::DESTROY_SRQ, req 24, resp 16, { srq_handle: u32 @ 16 }
);

/// MODIFY_QP: handle, mask and the full attribute block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyQp {
    /// QP handle.
    pub qp_handle: u32,
    /// attr_mask.
    pub attr_mask: u32,
    /// Attributes @24.
    pub attr: QpAttr,
}

impl Command for ModifyQp {
    const CODE: u32 = code::MODIFY_QP;
    const REQ_LEN: usize = 184;
    const RESP_LEN: usize = 16;
    fn parse(v: &Le<&[u8]>) -> Self {
        Self {
            qp_handle: v.u32(16),
            attr_mask: v.u32(20),
            attr: QpAttr::parse(v, 24),
        }
    }
}

/// GID fields that do not fit the macro (byte arrays).
pub mod gid_field {
    /// CREATE_BIND new_gid.
    pub const CREATE_BIND_GID: usize = 28;
    /// DESTROY_BIND dest_gid.
    pub const DESTROY_BIND_GID: usize = 20;
}

/// A response image under construction.
#[derive(Clone, Debug)]
pub struct Response {
    /// Bytes; only the first `len` are written to the slot.
    pub buf: Le<[u8; RESP_MAX]>,
    /// Length to write.
    pub len: usize,
}

impl Response {
    /// A response of `len` bytes answering `hdr`.
    pub fn new(hdr: &ReqHeader, len: usize) -> Self {
        let mut buf = Le([0u8; RESP_MAX]);
        buf.set_u64(0, hdr.response);
        buf.set_u32(8, hdr.cmd | RESP_FLAG);
        Self {
            buf,
            len: len.clamp(HDR, RESP_MAX),
        }
    }

    /// Sets `hdr.err`.
    pub fn set_err(&mut self, e: u32) {
        self.buf.set_u8(12, e as u8);
    }

    /// Bytes to write.
    pub fn bytes(&self) -> &[u8] {
        &self.buf.0[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_qp_fields_at_reference_offsets() {
        let mut b = [0u8; REQ_MAX];
        b[16..24].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        b[36] = 9;
        b[68] = 5;
        b[70] = 3;
        b[74] = 1;
        b[75] = 2;
        b[76] = 1;
        let c = CreateQp::parse(&Le(&b[..]));
        assert_eq!(c.pdir_dma, 0x1122_3344_5566_7788);
        assert_eq!(c.srq_handle, 9);
        assert_eq!(
            (
                c.total_chunks,
                c.send_chunks,
                c.sq_sig_all,
                c.qp_type,
                c.is_srq
            ),
            (5, 3, 1, 2, 1)
        );
    }

    #[test]
    fn response_header_echoes_key_and_sets_ack() {
        let hdr = ReqHeader {
            response: 0xABCD,
            cmd: code::CREATE_PD,
        };
        let mut r = Response::new(&hdr, CreatePd::RESP_LEN);
        r.set_err(22);
        let b = r.bytes();
        assert_eq!(b.len(), 24);
        assert_eq!(&b[0..8], &0xABCDu64.to_le_bytes());
        assert_eq!(&b[8..12], &0x8000_0002u32.to_le_bytes());
        assert_eq!(b[12], 22);
    }
}
