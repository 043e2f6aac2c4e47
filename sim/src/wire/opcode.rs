//! BTH opcodes with their IBTA names, and which extension headers each carries
//! (cm.md §7.2–7.3; rxe_opcode.c header order; pvrdma.md §14 "Wire").

/// RC SEND First.
pub const RC_SEND_FIRST: u8 = 0x00;
/// RC SEND Middle.
pub const RC_SEND_MIDDLE: u8 = 0x01;
/// RC SEND Last.
pub const RC_SEND_LAST: u8 = 0x02;
/// RC SEND Last with Immediate.
pub const RC_SEND_LAST_WITH_IMMEDIATE: u8 = 0x03;
/// RC SEND Only.
pub const RC_SEND_ONLY: u8 = 0x04;
/// RC SEND Only with Immediate.
pub const RC_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x05;
/// RC RDMA WRITE First.
pub const RC_RDMA_WRITE_FIRST: u8 = 0x06;
/// RC RDMA WRITE Middle.
pub const RC_RDMA_WRITE_MIDDLE: u8 = 0x07;
/// RC RDMA WRITE Last.
pub const RC_RDMA_WRITE_LAST: u8 = 0x08;
/// RC RDMA WRITE Last with Immediate.
pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x09;
/// RC RDMA WRITE Only.
pub const RC_RDMA_WRITE_ONLY: u8 = 0x0A;
/// RC RDMA WRITE Only with Immediate.
pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0B;
/// RC RDMA READ Request.
pub const RC_RDMA_READ_REQUEST: u8 = 0x0C;
/// RC RDMA READ Response First.
pub const RC_RDMA_READ_RESPONSE_FIRST: u8 = 0x0D;
/// RC RDMA READ Response Middle.
pub const RC_RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0E;
/// RC RDMA READ Response Last.
pub const RC_RDMA_READ_RESPONSE_LAST: u8 = 0x0F;
/// RC RDMA READ Response Only.
pub const RC_RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
/// RC Acknowledge.
pub const RC_ACKNOWLEDGE: u8 = 0x11;
/// RC ATOMIC Acknowledge.
pub const RC_ATOMIC_ACKNOWLEDGE: u8 = 0x12;
/// RC CmpSwap.
pub const RC_COMPARE_SWAP: u8 = 0x13;
/// RC FetchAdd.
pub const RC_FETCH_ADD: u8 = 0x14;
/// RC SEND Last with Invalidate.
pub const RC_SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
/// RC SEND Only with Invalidate.
pub const RC_SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
/// UD SEND Only.
pub const UD_SEND_ONLY: u8 = 0x64;
/// UD SEND Only with Immediate.
pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x65;

/// Every opcode [`ext_headers`] knows, in numeric order.
pub const ALL: [u8; 25] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x64, 0x65,
];

/// Which headers follow the BTH for an opcode, in wire order
/// RETH/AtomicETH, DETH, ImmDt/IETH, AETH, AtomicAckETH; then payload (rxe_opcode.c).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtHeaders {
    /// RDMA extended transport header (16 B).
    pub reth: bool,
    /// Atomic extended transport header (28 B).
    pub atomic_eth: bool,
    /// Datagram extended transport header (8 B).
    pub deth: bool,
    /// Immediate data (4 B).
    pub immdt: bool,
    /// Invalidate extended transport header (4 B).
    pub ieth: bool,
    /// ACK extended transport header (4 B).
    pub aeth: bool,
    /// Atomic ACK extended transport header (8 B).
    pub atomic_ack_eth: bool,
    /// Whether the packet may carry a payload.
    pub payload: bool,
}

impl ExtHeaders {
    /// Total length of the extension headers.
    pub const fn len(&self) -> usize {
        let mut n = 0;
        if self.reth {
            n += 16;
        }
        if self.atomic_eth {
            n += 28;
        }
        if self.deth {
            n += 8;
        }
        if self.immdt {
            n += 4;
        }
        if self.ieth {
            n += 4;
        }
        if self.aeth {
            n += 4;
        }
        if self.atomic_ack_eth {
            n += 8;
        }
        n
    }

    /// True when no extension header follows the BTH.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const NONE: ExtHeaders = ExtHeaders {
    reth: false,
    atomic_eth: false,
    deth: false,
    immdt: false,
    ieth: false,
    aeth: false,
    atomic_ack_eth: false,
    payload: false,
};

/// The extension headers of `opcode`, or `None` for opcodes this model does not implement
/// (UC, RD, XRC, CNP, reserved codes). RC 0x00–0x14, 0x16, 0x17 and UD 0x64, 0x65 are known.
pub const fn ext_headers(opcode: u8) -> Option<ExtHeaders> {
    let data = ExtHeaders {
        payload: true,
        ..NONE
    };
    Some(match opcode {
        RC_SEND_FIRST
        | RC_SEND_MIDDLE
        | RC_SEND_LAST
        | RC_SEND_ONLY
        | RC_RDMA_WRITE_MIDDLE
        | RC_RDMA_WRITE_LAST
        | RC_RDMA_READ_RESPONSE_MIDDLE => data,
        RC_SEND_LAST_WITH_IMMEDIATE
        | RC_SEND_ONLY_WITH_IMMEDIATE
        | RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => ExtHeaders {
            immdt: true,
            ..data
        },
        RC_SEND_LAST_WITH_INVALIDATE | RC_SEND_ONLY_WITH_INVALIDATE => {
            ExtHeaders { ieth: true, ..data }
        }
        RC_RDMA_WRITE_FIRST | RC_RDMA_WRITE_ONLY => ExtHeaders { reth: true, ..data },
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => ExtHeaders {
            reth: true,
            immdt: true,
            ..data
        },
        RC_RDMA_READ_REQUEST => ExtHeaders { reth: true, ..NONE },
        RC_RDMA_READ_RESPONSE_FIRST | RC_RDMA_READ_RESPONSE_LAST | RC_RDMA_READ_RESPONSE_ONLY => {
            ExtHeaders { aeth: true, ..data }
        }
        RC_ACKNOWLEDGE => ExtHeaders { aeth: true, ..NONE },
        RC_ATOMIC_ACKNOWLEDGE => ExtHeaders {
            aeth: true,
            atomic_ack_eth: true,
            ..NONE
        },
        RC_COMPARE_SWAP | RC_FETCH_ADD => ExtHeaders {
            atomic_eth: true,
            ..NONE
        },
        UD_SEND_ONLY => ExtHeaders { deth: true, ..data },
        UD_SEND_ONLY_WITH_IMMEDIATE => ExtHeaders {
            deth: true,
            immdt: true,
            ..data
        },
        _ => return None,
    })
}

/// IBTA name of an opcode, for traces.
pub const fn name(opcode: u8) -> &'static str {
    match opcode {
        RC_SEND_FIRST => "RC SEND First",
        RC_SEND_MIDDLE => "RC SEND Middle",
        RC_SEND_LAST => "RC SEND Last",
        RC_SEND_LAST_WITH_IMMEDIATE => "RC SEND Last with Immediate",
        RC_SEND_ONLY => "RC SEND Only",
        RC_SEND_ONLY_WITH_IMMEDIATE => "RC SEND Only with Immediate",
        RC_RDMA_WRITE_FIRST => "RC RDMA WRITE First",
        RC_RDMA_WRITE_MIDDLE => "RC RDMA WRITE Middle",
        RC_RDMA_WRITE_LAST => "RC RDMA WRITE Last",
        RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => "RC RDMA WRITE Last with Immediate",
        RC_RDMA_WRITE_ONLY => "RC RDMA WRITE Only",
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => "RC RDMA WRITE Only with Immediate",
        RC_RDMA_READ_REQUEST => "RC RDMA READ Request",
        RC_RDMA_READ_RESPONSE_FIRST => "RC RDMA READ Response First",
        RC_RDMA_READ_RESPONSE_MIDDLE => "RC RDMA READ Response Middle",
        RC_RDMA_READ_RESPONSE_LAST => "RC RDMA READ Response Last",
        RC_RDMA_READ_RESPONSE_ONLY => "RC RDMA READ Response Only",
        RC_ACKNOWLEDGE => "RC Acknowledge",
        RC_ATOMIC_ACKNOWLEDGE => "RC ATOMIC Acknowledge",
        RC_COMPARE_SWAP => "RC CmpSwap",
        RC_FETCH_ADD => "RC FetchAdd",
        RC_SEND_LAST_WITH_INVALIDATE => "RC SEND Last with Invalidate",
        RC_SEND_ONLY_WITH_INVALIDATE => "RC SEND Only with Invalidate",
        UD_SEND_ONLY => "UD SEND Only",
        UD_SEND_ONLY_WITH_IMMEDIATE => "UD SEND Only with Immediate",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_reference() {
        // cm.md §7.3 header order, one assertion per class.
        let e = |o| ext_headers(o).unwrap();
        assert_eq!(e(RC_SEND_ONLY).len(), 0);
        assert!(e(RC_SEND_ONLY).payload);
        assert!(e(RC_SEND_ONLY_WITH_IMMEDIATE).immdt);
        assert!(e(RC_SEND_ONLY_WITH_INVALIDATE).ieth);
        assert_eq!(e(RC_RDMA_WRITE_FIRST).len(), 16);
        assert_eq!(e(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).len(), 20);
        assert_eq!(e(RC_RDMA_WRITE_MIDDLE).len(), 0);
        assert_eq!(e(RC_RDMA_WRITE_LAST_WITH_IMMEDIATE).len(), 4);
        let rr = e(RC_RDMA_READ_REQUEST);
        assert!(rr.reth && !rr.payload);
        assert!(e(RC_RDMA_READ_RESPONSE_FIRST).aeth);
        assert!(!e(RC_RDMA_READ_RESPONSE_MIDDLE).aeth);
        assert!(e(RC_RDMA_READ_RESPONSE_ONLY).aeth);
        let ack = e(RC_ACKNOWLEDGE);
        assert!(ack.aeth && !ack.payload && ack.len() == 4);
        assert_eq!(e(RC_ATOMIC_ACKNOWLEDGE).len(), 12);
        assert_eq!(e(RC_COMPARE_SWAP).len(), 28);
        assert_eq!(e(UD_SEND_ONLY).len(), 8);
        assert_eq!(e(UD_SEND_ONLY_WITH_IMMEDIATE).len(), 12);
        for o in [0x15, 0x18, 0x1F, 0x24, 0x44, 0x60, 0x66, 0x81, 0xA4, 0xFF] {
            assert_eq!(ext_headers(o), None, "{o:#x}");
        }
        for o in ALL {
            assert!(ext_headers(o).is_some(), "{o:#x}");
            assert_ne!(name(o), "unknown");
        }
    }
}
