//! The inverse of `arbitrary`'s decoding for the input types, so seeds are written as Rust
//! values (`src/bin/make_seeds.rs`) rather than as guessed bytes. `make_seeds` decodes every
//! seed back and checks it equals the value it encoded.
//!
//! The format (arbitrary 1.x): integers little-endian in their width; `bool` one byte (bit
//! 0); an enum a `u32` tag `t` choosing variant `(t · count) >> 32`, then its fields; an
//! `Option` a `bool` then the value; a fixed array its elements; the last field of the
//! top-level value takes the rest, a `Vec` there being `true` + element, repeated.

use crate::bringup::{CapsWrite, Input, ResponseWrite};
use crate::consumer::{Call, DeviceInput, DeviceWrite, Kind, Sg, Step, Verb};

/// Bytes being built.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    fn tag(&mut self, index: u32, count: u32) {
        // The smallest t with (t · count) >> 32 == index.
        let t = ((u64::from(index) << 32).div_ceil(u64::from(count))) as u32;
        t.enc(self);
    }
}

/// A value `arbitrary` decodes back to itself.
pub trait Encode {
    fn enc(&self, e: &mut Enc);
}

impl Encode for u8 {
    fn enc(&self, e: &mut Enc) {
        e.0.push(*self);
    }
}
impl Encode for u16 {
    fn enc(&self, e: &mut Enc) {
        e.0.extend_from_slice(&self.to_le_bytes());
    }
}
impl Encode for u32 {
    fn enc(&self, e: &mut Enc) {
        e.0.extend_from_slice(&self.to_le_bytes());
    }
}
impl Encode for bool {
    fn enc(&self, e: &mut Enc) {
        e.0.push(u8::from(*self));
    }
}
impl<T: Encode> Encode for Option<T> {
    fn enc(&self, e: &mut Enc) {
        self.is_some().enc(e);
        if let Some(v) = self {
            v.enc(e);
        }
    }
}
impl<T: Encode, const N: usize> Encode for [T; N] {
    fn enc(&self, e: &mut Enc) {
        for v in self {
            v.enc(e);
        }
    }
}

/// A top-level `Vec`: each element after a `true`; the end of the data ends it.
pub fn encode_rest<T: Encode>(v: &[T], e: &mut Enc) {
    for x in v {
        true.enc(e);
        x.enc(e);
    }
}

macro_rules! fields {
    ($e:expr; $($f:expr),* $(,)?) => { $( $f.enc($e); )* };
}

impl Encode for Sg {
    fn enc(&self, e: &mut Enc) {
        fields!(e; self.source, self.offset, self.length);
    }
}

impl Encode for Verb {
    fn enc(&self, e: &mut Enc) {
        let i = match self {
            Verb::Send => 0,
            Verb::SendAndInvalidate => 1,
            Verb::Read => 2,
            Verb::Write => 3,
            Verb::Receive => 4,
        };
        e.tag(i, 5);
    }
}

impl Encode for Kind {
    fn enc(&self, e: &mut Enc) {
        let i = match self {
            Kind::Cq => 0,
            Kind::Pd => 1,
            Kind::Mr => 2,
            Kind::Mw => 3,
            Kind::Srq => 4,
            Kind::Qp => 5,
        };
        e.tag(i, 6);
    }
}

impl Encode for Call {
    fn enc(&self, e: &mut Enc) {
        const N: u32 = 21;
        match self {
            Call::CreateCq { host, depth } => {
                e.tag(0, N);
                fields!(e; host, depth);
            }
            Call::CreatePd { host } => {
                e.tag(1, N);
                fields!(e; host);
            }
            Call::CreateMr { pd, fast } => {
                e.tag(2, N);
                fields!(e; pd, fast);
            }
            Call::CreateMw { pd } => {
                e.tag(3, N);
                fields!(e; pd);
            }
            Call::CreateSrq {
                pd,
                depth,
                sge,
                threshold,
            } => {
                e.tag(4, N);
                fields!(e; pd, depth, sge, threshold);
            }
            Call::CreateQp {
                pd,
                rcq,
                icq,
                srq,
                receive_depth,
                initiator_depth,
                receive_sge,
                initiator_sge,
                inline_data,
            } => {
                e.tag(5, N);
                fields!(e; pd, rcq, icq, srq, receive_depth, initiator_depth, receive_sge,
                    initiator_sge, inline_data);
            }
            Call::Register {
                mr,
                offset,
                pages,
                length,
                flags,
            } => {
                e.tag(6, N);
                fields!(e; mr, offset, pages, length, flags);
            }
            Call::Deregister { mr } => {
                e.tag(7, N);
                fields!(e; mr);
            }
            Call::InitializeFastRegister { mr, pages, remote } => {
                e.tag(8, N);
                fields!(e; mr, pages, remote);
            }
            Call::Connect { a, b } => {
                e.tag(9, N);
                fields!(e; a, b);
            }
            Call::Post {
                qp,
                verb,
                count,
                sges,
                flags,
                remote,
                token,
            } => {
                e.tag(10, N);
                fields!(e; qp, verb, count, sges, flags, remote, token);
            }
            Call::SrqReceive { srq, count, sges } => {
                e.tag(11, N);
                fields!(e; srq, count, sges);
            }
            Call::FastRegister {
                qp,
                mr,
                pages,
                fbo,
                length,
                va_page,
                flags,
            } => {
                e.tag(12, N);
                fields!(e; qp, mr, pages, fbo, length, va_page, flags);
            }
            Call::Invalidate {
                qp,
                target,
                window,
                flags,
            } => {
                e.tag(13, N);
                fields!(e; qp, target, window, flags);
            }
            Call::Bind {
                qp,
                mr,
                mw,
                offset,
                length,
                flags,
            } => {
                e.tag(14, N);
                fields!(e; qp, mr, mw, offset, length, flags);
            }
            Call::Poll { cq, n, ex } => {
                e.tag(15, N);
                fields!(e; cq, n, ex);
            }
            Call::Arm { cq, ty } => {
                e.tag(16, N);
                fields!(e; cq, ty);
            }
            Call::Flush { qp } => {
                e.tag(17, N);
                fields!(e; qp);
            }
            Call::ModifySrq {
                srq,
                depth,
                threshold,
            } => {
                e.tag(18, N);
                fields!(e; srq, depth, threshold);
            }
            Call::Close { kind, index } => {
                e.tag(19, N);
                fields!(e; kind, index);
            }
            Call::Settle => e.tag(20, N),
        }
    }
}

impl Encode for DeviceWrite {
    fn enc(&self, e: &mut Enc) {
        const N: u32 = 6;
        match self {
            DeviceWrite::CqeBytes {
                cq,
                slot,
                offset,
                bytes,
            } => {
                e.tag(0, N);
                fields!(e; cq, slot, offset, bytes);
            }
            DeviceWrite::ForgeCqe {
                cq,
                qp,
                wr_id,
                tag,
                opcode,
                status,
                byte_len,
                wc_flags,
                publish,
            } => {
                e.tag(1, N);
                fields!(e; cq, qp, wr_id, tag, opcode, status, byte_len, wc_flags, publish);
            }
            DeviceWrite::CqTail { cq, delta, raw } => {
                e.tag(2, N);
                fields!(e; cq, delta, raw);
            }
            DeviceWrite::AsyncRing {
                host,
                offset,
                bytes,
                delta,
                raw,
            } => {
                e.tag(3, N);
                fields!(e; host, offset, bytes, delta, raw);
            }
            DeviceWrite::CqNotificationRing {
                host,
                offset,
                bytes,
                delta,
                raw,
            } => {
                e.tag(4, N);
                fields!(e; host, offset, bytes, delta, raw);
            }
            DeviceWrite::Interrupt { host, vector } => {
                e.tag(5, N);
                fields!(e; host, vector);
            }
        }
    }
}

impl Encode for Step {
    fn enc(&self, e: &mut Enc) {
        match self {
            Step::Call(c) => {
                e.tag(0, 2);
                c.enc(e);
            }
            Step::Device(w) => {
                e.tag(1, 2);
                w.enc(e);
            }
        }
    }
}

impl Encode for CapsWrite {
    fn enc(&self, e: &mut Enc) {
        fields!(e; self.on, self.offset, self.value);
    }
}

impl Encode for ResponseWrite {
    fn enc(&self, e: &mut Enc) {
        fields!(e; self.on, self.command, self.offset, self.bytes);
    }
}

impl Encode for Input {
    fn enc(&self, e: &mut Enc) {
        fields!(e; self.version, self.caps, self.responses);
    }
}

/// The bytes of a `consumer_calls` input.
pub fn calls(v: &[Call]) -> Vec<u8> {
    let mut e = Enc::default();
    encode_rest(v, &mut e);
    e.0
}

/// The bytes of a `device_memory` input.
pub fn device(d: &DeviceInput) -> Vec<u8> {
    let mut e = Enc::default();
    match d {
        DeviceInput::Bringup(b) => {
            e.tag(0, 2);
            b.enc(&mut e);
        }
        DeviceInput::Steps(steps) => {
            e.tag(1, 2);
            encode_rest(steps, &mut e);
        }
    }
    e.0
}
