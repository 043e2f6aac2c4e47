//! Views of the seven connected-mode CM messages (cm.md §3; IBTA Vol 1 ch. 12 Tables 106–113,
//! Linux include/rdma/ibta_vol1_c12.h), smoltcp style: `X<T: AsRef<[u8]>>(T)` over a whole
//! 256-byte MAD, `new_checked` = `check_len` + `check_header` (the MAD header rules and the
//! attribute), getters and setters at the IBTA offsets (relative to the body, MAD byte 24).
//!
//! Sub-byte fields take the mask cm.md writes ("43/0xF8"); 24-bit fields are the top three
//! bytes of their dword, leaving the fourth byte to its own field. Private data and the REJ
//! ARI are fixed-size windows: no length on the wire is ever used to index (the REJ's
//! Rejected Info Length is clamped to the 72-byte ARI).
#![deny(unsafe_code)]

use super::WireError;
use super::wire::{
    BODY, Mad, attr, be16, be24, be32, be64, bits, check_mad_len, get_u8, put, set_be16, set_be24,
    set_be32, set_be64, set_bits, set_u8, slice, slice_mut,
};

macro_rules! view {
    ($(#[$m:meta])* $name:ident, $attr:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>>(T);

        impl<T: AsRef<[u8]>> $name<T> {
            /// The MAD AttributeID of this message.
            pub const ATTRIBUTE: u16 = $attr;

            /// Wraps `buf` without checking it: the accessors still never panic.
            pub const fn new_unchecked(buf: T) -> Self {
                Self(buf)
            }

            /// Wraps `buf` after `check_len` and `check_header`.
            ///
            /// # Errors
            /// The first rule `buf` breaks.
            pub fn new_checked(buf: T) -> Result<Self, WireError> {
                let view = Self(buf);
                view.check_len()?;
                view.check_header()?;
                Ok(view)
            }

            /// Exactly one 256-byte MAD.
            ///
            /// # Errors
            /// [`WireError::Truncated`] or [`WireError::Oversized`].
            pub fn check_len(&self) -> Result<(), WireError> {
                check_mad_len(self.0.as_ref().len())
            }

            /// The MAD header rules (`Mad::check_header`) and this message's AttributeID.
            ///
            /// # Errors
            /// The first field that differs.
            pub fn check_header(&self) -> Result<(), WireError> {
                let mad = self.mad();
                mad.check_header()?;
                if mad.attribute_id() != $attr {
                    return Err(WireError::Attribute(mad.attribute_id()));
                }
                Ok(())
            }

            /// The common MAD header.
            pub fn mad(&self) -> Mad<&[u8]> {
                Mad::new_unchecked(self.0.as_ref())
            }

            /// The whole MAD.
            pub fn as_bytes(&self) -> &[u8] {
                self.0.as_ref()
            }

            /// The buffer back.
            pub fn into_inner(self) -> T {
                self.0
            }

            /// Mutable common MAD header.
            pub fn mad_mut(&mut self) -> Mad<&mut [u8]>
            where
                T: AsMut<[u8]>,
            {
                Mad::new_unchecked(self.0.as_mut())
            }
        }
    };
}

macro_rules! field {
    ($(#[$m:meta])* $get:ident, $set:ident: u8 @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> u8 {
            get_u8(self.0.as_ref(), BODY + $off)
        }
        $(#[$m])*
        pub fn $set(&mut self, v: u8)
        where
            T: AsMut<[u8]>,
        {
            set_u8(self.0.as_mut(), BODY + $off, v)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident: u16 @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> u16 {
            be16(self.0.as_ref(), BODY + $off)
        }
        $(#[$m])*
        pub fn $set(&mut self, v: u16)
        where
            T: AsMut<[u8]>,
        {
            set_be16(self.0.as_mut(), BODY + $off, v)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident: u24 @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> u32 {
            be24(self.0.as_ref(), BODY + $off)
        }
        $(#[$m])* /// (Only the low 24 bits of `v` are written.)
        pub fn $set(&mut self, v: u32)
        where
            T: AsMut<[u8]>,
        {
            set_be24(self.0.as_mut(), BODY + $off, v)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident: u32 @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> u32 {
            be32(self.0.as_ref(), BODY + $off)
        }
        $(#[$m])*
        pub fn $set(&mut self, v: u32)
        where
            T: AsMut<[u8]>,
        {
            set_be32(self.0.as_mut(), BODY + $off, v)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident: u64 @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> u64 {
            be64(self.0.as_ref(), BODY + $off)
        }
        $(#[$m])*
        pub fn $set(&mut self, v: u64)
        where
            T: AsMut<[u8]>,
        {
            set_be64(self.0.as_mut(), BODY + $off, v)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident: bits($mask:expr) @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> u8 {
            bits(self.0.as_ref(), BODY + $off, $mask)
        }
        $(#[$m])* /// (Bits of `v` beyond the field are dropped.)
        pub fn $set(&mut self, v: u8)
        where
            T: AsMut<[u8]>,
        {
            set_bits(self.0.as_mut(), BODY + $off, $mask, v)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident: gid @ $off:expr) => {
        $(#[$m])*
        pub fn $get(&self) -> [u8; 16] {
            let mut gid = [0u8; 16];
            gid.copy_from_slice(slice(self.0.as_ref(), BODY + $off, 16).get(..16).unwrap_or(&[0; 16]));
            gid
        }
        $(#[$m])*
        pub fn $set(&mut self, gid: [u8; 16])
        where
            T: AsMut<[u8]>,
        {
            put(self.0.as_mut(), BODY + $off, &gid)
        }
    };
    ($(#[$m:meta])* $get:ident, $set:ident, $get_mut:ident: bytes($len:expr) @ $off:expr) => {
        $(#[$m])* /// (A fixed window: the whole field, zero-padded by the sender.)
        pub fn $get(&self) -> &[u8] {
            slice(self.0.as_ref(), BODY + $off, $len)
        }
        $(#[$m])* /// (Mutable.)
        pub fn $get_mut(&mut self) -> &mut [u8]
        where
            T: AsMut<[u8]>,
        {
            slice_mut(self.0.as_mut(), BODY + $off, $len)
        }
        $(#[$m])* /// Copies `data` to the start of the field and zero-fills the rest.
        ///
        /// # Errors
        /// [`WireError::TooLong`] when `data` exceeds the field; nothing is written.
        pub fn $set(&mut self, data: &[u8]) -> Result<(), WireError>
        where
            T: AsMut<[u8]>,
        {
            if data.len() > $len {
                return Err(WireError::TooLong);
            }
            let field = slice_mut(self.0.as_mut(), BODY + $off, $len);
            field.fill(0);
            if let Some(dst) = field.get_mut(..data.len()) {
                dst.copy_from_slice(data);
            }
            Ok(())
        }
    };
}

/// REQ private data (Table 106): 92 bytes.
pub const REQ_PRIVATE_DATA: usize = 92;
/// REP private data (Table 110): 196 bytes.
pub const REP_PRIVATE_DATA: usize = 196;
/// RTU private data (Table 111): 224 bytes.
pub const RTU_PRIVATE_DATA: usize = 224;
/// REJ private data (Table 108): 148 bytes.
pub const REJ_PRIVATE_DATA: usize = 148;
/// REJ Additional Rejection Information (Table 108): 72 bytes.
pub const REJ_ARI: usize = 72;
/// MRA private data (Table 107): 222 bytes.
pub const MRA_PRIVATE_DATA: usize = 222;
/// DREQ private data (Table 112): 220 bytes.
pub const DREQ_PRIVATE_DATA: usize = 220;
/// DREP private data (Table 113): 224 bytes.
pub const DREP_PRIVATE_DATA: usize = 224;

/// "Message MRAed" / "Message REJected" values (Tables 107, 108).
pub mod msg_code {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (LAP for an MRA).
    pub const OTHER: u8 = 2;
}

view!(
    /// REQ, connect request (Table 106).
    Req,
    attr::REQ
);

impl<T: AsRef<[u8]>> Req<T> {
    field!(/// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Vendor ID (ECE; byte 4 is reserved).
        vendor_id, set_vendor_id: u24 @ 4);
    field!(/// Service ID.
        service_id, set_service_id: u64 @ 8);
    field!(/// Local CA GUID.
        local_ca_guid, set_local_ca_guid: u64 @ 16);
    field!(/// Local Q_Key (0 for RC).
        local_qkey, set_local_qkey: u32 @ 28);
    field!(/// Local QPN.
        local_qpn, set_local_qpn: u24 @ 32);
    field!(/// Responder Resources: the sender's IRD.
        responder_resources, set_responder_resources: u8 @ 35);
    field!(/// Local EECN.
        local_eecn, set_local_eecn: u24 @ 36);
    field!(/// Initiator Depth: the sender's ORD.
        initiator_depth, set_initiator_depth: u8 @ 39);
    field!(/// Remote EECN.
        remote_eecn, set_remote_eecn: u24 @ 40);
    field!(/// Remote CM Response Timeout (4.096 µs × 2^x).
        remote_cm_response_timeout, set_remote_cm_response_timeout: bits(0xF8) @ 43);
    field!(/// Transport Service Type (0 = RC).
        transport_service_type, set_transport_service_type: bits(0x06) @ 43);
    field!(/// End-to-End Flow Control.
        end_to_end_flow_control, set_end_to_end_flow_control: bits(0x01) @ 43);
    field!(/// Starting PSN.
        starting_psn, set_starting_psn: u24 @ 44);
    field!(/// Local CM Response Timeout.
        local_cm_response_timeout, set_local_cm_response_timeout: bits(0xF8) @ 47);
    field!(/// Retry Count.
        retry_count, set_retry_count: bits(0x07) @ 47);
    field!(/// Partition Key.
        pkey, set_pkey: u16 @ 48);
    field!(/// Path Packet Payload MTU (1 = 256 … 5 = 4096).
        path_mtu, set_path_mtu: bits(0xF0) @ 50);
    field!(/// RDC Exists.
        rdc_exists, set_rdc_exists: bits(0x08) @ 50);
    field!(/// RNR Retry Count.
        rnr_retry_count, set_rnr_retry_count: bits(0x07) @ 50);
    field!(/// Max CM Retries.
        max_cm_retries, set_max_cm_retries: bits(0xF0) @ 51);
    field!(/// SRQ.
        srq, set_srq: bits(0x08) @ 51);
    field!(/// Extended Transport Type.
        extended_transport_type, set_extended_transport_type: bits(0x07) @ 51);
    field!(/// Primary Local Port LID (0xFFFF on RoCE).
        primary_local_lid, set_primary_local_lid: u16 @ 52);
    field!(/// Primary Remote Port LID (0xFFFF on RoCE).
        primary_remote_lid, set_primary_remote_lid: u16 @ 54);
    field!(/// Primary Local Port GID: the sender's IP as a GID.
        primary_local_gid, set_primary_local_gid: gid @ 56);
    field!(/// Primary Remote Port GID: the receiver's IP as a GID.
        primary_remote_gid, set_primary_remote_gid: gid @ 72);
    /// Primary Flow Label (the top 20 bits of the dword at 88).
    pub fn primary_flow_label(&self) -> u32 {
        be32(self.0.as_ref(), BODY + 88) >> 12
    }
    /// Sets the Primary Flow Label (20 bits; the packet rate below it is kept).
    pub fn set_primary_flow_label(&mut self, v: u32)
    where
        T: AsMut<[u8]>,
    {
        let keep = be32(self.0.as_ref(), BODY + 88) & 0xFFF;
        set_be32(self.0.as_mut(), BODY + 88, ((v & 0xF_FFFF) << 12) | keep);
    }
    field!(/// Primary Packet Rate (`enum ib_rate`).
        primary_packet_rate, set_primary_packet_rate: bits(0x3F) @ 91);
    field!(/// Primary Traffic Class.
        primary_traffic_class, set_primary_traffic_class: u8 @ 92);
    field!(/// Primary Hop Limit.
        primary_hop_limit, set_primary_hop_limit: u8 @ 93);
    field!(/// Primary SL.
        primary_sl, set_primary_sl: bits(0xF0) @ 94);
    field!(/// Primary Subnet Local.
        primary_subnet_local, set_primary_subnet_local: bits(0x08) @ 94);
    field!(/// Primary Local ACK Timeout.
        primary_local_ack_timeout, set_primary_local_ack_timeout: bits(0xF8) @ 95);
    field!(/// Alternate Local Port LID (Linux assumes an alternate path when it is not 0).
        alternate_local_lid, set_alternate_local_lid: u16 @ 96);
    field!(/// SAP Supported.
        sap_supported, set_sap_supported: bits(0x04) @ 139);
    field!(/// Private Data (92 bytes; rdma_cm puts its 36-byte cma_hdr first).
        private_data, set_private_data, private_data_mut: bytes(REQ_PRIVATE_DATA) @ 140);
}

view!(
    /// MRA, message receipt acknowledgement (Table 107).
    Mra,
    attr::MRA
);

impl<T: AsRef<[u8]>> Mra<T> {
    field!(/// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 @ 4);
    field!(/// Message MRAed (`msg_code`).
        message_mraed, set_message_mraed: bits(0xC0) @ 8);
    field!(/// Service Timeout.
        service_timeout, set_service_timeout: bits(0xF8) @ 9);
    field!(/// Private Data (222 bytes).
        private_data, set_private_data, private_data_mut: bytes(MRA_PRIVATE_DATA) @ 10);
}

view!(
    /// REJ, reject (Table 108).
    Rej,
    attr::REJ
);

impl<T: AsRef<[u8]>> Rej<T> {
    field!(/// Local Communication ID (0 when the rejecter never assigned one, cm.md §4.1).
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Remote Communication ID: what a REJ is matched by.
        remote_comm_id, set_remote_comm_id: u32 @ 4);
    field!(/// Message REJected (`msg_code`).
        message_rejected, set_message_rejected: bits(0xC0) @ 8);
    field!(/// Rejected Info Length as sent (7 bits; `ari` clamps it).
        rejected_info_length, set_rejected_info_length: bits(0xFE) @ 9);
    field!(/// Reason (`ib_cm_rej_reason`, cm.md §4).
        reason, set_reason: u16 @ 10);
    /// The ARI the sender declared: at most the 72-byte field, whatever the length says.
    pub fn ari(&self) -> &[u8] {
        let len = usize::from(self.rejected_info_length()).min(REJ_ARI);
        slice(self.0.as_ref(), BODY + 12, len)
    }
    /// Sets the ARI and its length.
    ///
    /// # Errors
    /// [`WireError::TooLong`] for more than 72 bytes; nothing is written.
    pub fn set_ari(&mut self, ari: &[u8]) -> Result<(), WireError>
    where
        T: AsMut<[u8]>,
    {
        let len = u8::try_from(ari.len()).map_err(|_| WireError::TooLong)?;
        if ari.len() > REJ_ARI {
            return Err(WireError::TooLong);
        }
        let field = slice_mut(self.0.as_mut(), BODY + 12, REJ_ARI);
        field.fill(0);
        if let Some(dst) = field.get_mut(..ari.len()) {
            dst.copy_from_slice(ari);
        }
        self.set_rejected_info_length(len);
        Ok(())
    }
    field!(/// Private Data (148 bytes).
        private_data, set_private_data, private_data_mut: bytes(REJ_PRIVATE_DATA) @ 84);
}

view!(
    /// REP, reply to a REQ (Table 110).
    Rep,
    attr::REP
);

impl<T: AsRef<[u8]>> Rep<T> {
    field!(/// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Remote Communication ID (the REQ's local ID).
        remote_comm_id, set_remote_comm_id: u32 @ 4);
    field!(/// Local Q_Key.
        local_qkey, set_local_qkey: u32 @ 8);
    field!(/// Local QPN.
        local_qpn, set_local_qpn: u24 @ 12);
    field!(/// Local EECN.
        local_eecn, set_local_eecn: u24 @ 16);
    field!(/// Starting PSN.
        starting_psn, set_starting_psn: u24 @ 20);
    field!(/// Responder Resources: the sender's final IRD.
        responder_resources, set_responder_resources: u8 @ 24);
    field!(/// Initiator Depth: the sender's final ORD.
        initiator_depth, set_initiator_depth: u8 @ 25);
    field!(/// Target ACK Delay.
        target_ack_delay, set_target_ack_delay: bits(0xF8) @ 26);
    field!(/// Failover Accepted.
        failover_accepted, set_failover_accepted: bits(0x06) @ 26);
    field!(/// End-to-End Flow Control.
        end_to_end_flow_control, set_end_to_end_flow_control: bits(0x01) @ 26);
    field!(/// RNR Retry Count.
        rnr_retry_count, set_rnr_retry_count: bits(0xE0) @ 27);
    field!(/// SRQ.
        srq, set_srq: bits(0x10) @ 27);
    field!(/// Local CA GUID.
        local_ca_guid, set_local_ca_guid: u64 @ 28);
    field!(/// Private Data (196 bytes).
        private_data, set_private_data, private_data_mut: bytes(REP_PRIVATE_DATA) @ 36);
}

view!(
    /// RTU, ready to use (Table 111).
    Rtu,
    attr::RTU
);

impl<T: AsRef<[u8]>> Rtu<T> {
    field!(/// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 @ 4);
    field!(/// Private Data (224 bytes; rdma_cm sends none).
        private_data, set_private_data, private_data_mut: bytes(RTU_PRIVATE_DATA) @ 8);
}

view!(
    /// DREQ, disconnect request (Table 112).
    Dreq,
    attr::DREQ
);

impl<T: AsRef<[u8]>> Dreq<T> {
    field!(/// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 @ 4);
    field!(/// Remote QPN/EECN: must be the receiver's QPN, or Linux ignores the DREQ.
        remote_qpn, set_remote_qpn: u24 @ 8);
    field!(/// Private Data (220 bytes).
        private_data, set_private_data, private_data_mut: bytes(DREQ_PRIVATE_DATA) @ 12);
}

view!(
    /// DREP, disconnect reply (Table 113).
    Drep,
    attr::DREP
);

impl<T: AsRef<[u8]>> Drep<T> {
    field!(/// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 @ 0);
    field!(/// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 @ 4);
    field!(/// Private Data (224 bytes).
        private_data, set_private_data, private_data_mut: bytes(DREP_PRIVATE_DATA) @ 8);
}

/// One parsed CM message (`parse_any`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// Connect request.
    Req(Req<&'a [u8]>),
    /// Message receipt acknowledgement.
    Mra(Mra<&'a [u8]>),
    /// Reject.
    Rej(Rej<&'a [u8]>),
    /// Reply.
    Rep(Rep<&'a [u8]>),
    /// Ready to use.
    Rtu(Rtu<&'a [u8]>),
    /// Disconnect request.
    Dreq(Dreq<&'a [u8]>),
    /// Disconnect reply.
    Drep(Drep<&'a [u8]>),
}

impl<'a> Message<'a> {
    /// The TransactionID of the MAD.
    pub fn transaction_id(&self) -> u64 {
        self.mad().transaction_id()
    }

    /// The common MAD header.
    pub fn mad(&self) -> Mad<&'a [u8]> {
        Mad::new_unchecked(match self {
            Self::Req(m) => m.into_inner(),
            Self::Mra(m) => m.into_inner(),
            Self::Rej(m) => m.into_inner(),
            Self::Rep(m) => m.into_inner(),
            Self::Rtu(m) => m.into_inner(),
            Self::Dreq(m) => m.into_inner(),
            Self::Drep(m) => m.into_inner(),
        })
    }
}

/// Classifies and checks one received MAD: the entry point of the CM (and of a fuzz target).
/// Never panics and never allocates, whatever `bytes` holds.
///
/// # Errors
/// The length and header rules (`Mad::check_len`, `Mad::check_header`); an attribute outside
/// the seven messages is [`WireError::Unsupported`] (SIDR, LAP, APR, ClassPortInfo...).
pub fn parse_any(bytes: &[u8]) -> Result<Message<'_>, WireError> {
    let mad = Mad::new_checked(bytes)?;
    Ok(match mad.attribute_id() {
        attr::REQ => Message::Req(Req::new_unchecked(bytes)),
        attr::MRA => Message::Mra(Mra::new_unchecked(bytes)),
        attr::REJ => Message::Rej(Rej::new_unchecked(bytes)),
        attr::REP => Message::Rep(Rep::new_unchecked(bytes)),
        attr::RTU => Message::Rtu(Rtu::new_unchecked(bytes)),
        attr::DREQ => Message::Dreq(Dreq::new_unchecked(bytes)),
        attr::DREP => Message::Drep(Drep::new_unchecked(bytes)),
        other => return Err(WireError::Unsupported(other)),
    })
}
