//! UAR doorbells (reference §12; M17).
#![deny(unsafe_code)]

/// UAR doorbell offsets and bits (§12).
pub mod bits {
    /// QP doorbell offset.
    pub const QP: u32 = 0x0;
    /// CQ doorbell offset.
    pub const CQ: u32 = 0x4;
    /// SRQ doorbell offset.
    pub const SRQ: u32 = 0x8;
    /// Handle field mask.
    pub const HANDLE_MASK: u32 = 0x00FF_FFFF;
    /// QP: new SQ WQEs.
    pub const QP_SEND: u32 = 1 << 30;
    /// QP: new RQ WQEs.
    pub const QP_RECV: u32 = 1 << 31;
    /// CQ: arm for the next completion.
    pub const CQ_ARM: u32 = 1 << 30;
    /// CQ: arm for the next solicited or error completion.
    pub const CQ_ARM_SOL: u32 = 1 << 29;
    /// CQ: poll (a no-op, M17, unless lazy completion holds CQEs back, M48).
    pub const CQ_POLL: u32 = 1 << 31;
    /// SRQ: new SRQ WQEs.
    pub const SRQ_RECV: u32 = 1 << 30;
}

/// A decoded UAR write (§12; the model decodes `offset & 0xFFF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doorbell {
    /// QP kick; `send`/`recv` may both be set.
    Qp {
        /// QP handle.
        handle: u32,
        /// SQ kick.
        send: bool,
        /// RQ kick.
        recv: bool,
    },
    /// CQ doorbell.
    Cq {
        /// CQ handle.
        handle: u32,
        /// ARM (wins over `arm_sol`).
        arm: bool,
        /// ARM_SOL.
        arm_sol: bool,
        /// POLL (M17, M48).
        poll: bool,
    },
    /// SRQ kick.
    Srq {
        /// SRQ handle.
        handle: u32,
        /// SRQ_RECV bit.
        recv: bool,
    },
    /// A write to an undefined UAR offset.
    Unknown {
        /// Offset within the page.
        offset: u32,
    },
}

impl Doorbell {
    /// Decodes a write of `value` at UAR byte offset `offset`.
    pub fn decode(offset: u32, value: u32) -> Self {
        let handle = value & bits::HANDLE_MASK;
        match offset & 0xFFF {
            bits::QP => Doorbell::Qp {
                handle,
                send: value & bits::QP_SEND != 0,
                recv: value & bits::QP_RECV != 0,
            },
            bits::CQ => Doorbell::Cq {
                handle,
                arm: value & bits::CQ_ARM != 0,
                arm_sol: value & bits::CQ_ARM_SOL != 0,
                poll: value & bits::CQ_POLL != 0,
            },
            bits::SRQ => Doorbell::Srq {
                handle,
                recv: value & bits::SRQ_RECV != 0,
            },
            o => Doorbell::Unknown { offset: o },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_decode_masks_handle_and_page() {
        assert_eq!(
            Doorbell::decode(0x1000, 0xC000_0005 | 0x0100_0000),
            Doorbell::Qp {
                handle: 5,
                send: true,
                recv: true
            }
        );
        assert_eq!(
            Doorbell::decode(0x4, 7 | bits::CQ_ARM_SOL),
            Doorbell::Cq {
                handle: 7,
                arm: false,
                arm_sol: true,
                poll: false
            }
        );
        assert_eq!(
            Doorbell::decode(0x8, 3 | bits::SRQ_RECV),
            Doorbell::Srq {
                handle: 3,
                recv: true
            }
        );
        assert_eq!(Doorbell::decode(0xC, 1), Doorbell::Unknown { offset: 0xC });
    }
}
