//! Async events (§13): `pvrdma_eqe { u32 type @0; u32 info @4 }`, type through `TryFrom`.
#![deny(unsafe_code)]

use super::bytes::get_u32;
use super::device_enum::device_enum;

/// Size of an EQE.
pub const EQE_SIZE: usize = 8;

device_enum! {
    /// `enum pvrdma_eqe_type`.
    #[allow(missing_docs)]
    pub enum EqeType: u32 {
        CqErr = 0,
        QpFatal = 1,
        QpReqErr = 2,
        QpAccessErr = 3,
        CommEst = 4,
        SqDrained = 5,
        PathMig = 6,
        PathMigErr = 7,
        DeviceFatal = 8,
        PortActive = 9,
        PortErr = 10,
        LidChange = 11,
        PkeyChange = 12,
        SmChange = 13,
        SrqErr = 14,
        SrqLimitReached = 15,
        QpLastWqeReached = 16,
        ClientReregister = 17,
        GidChange = 18,
    }
    /// An event type the driver does not know.
    unknown UnknownEvent;
}

/// What an event is about, by the meaning of its `info` (§13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventTarget {
    /// A CQ handle.
    Cq(u32),
    /// A QP handle.
    Qp(u32),
    /// An SRQ handle.
    Srq(u32),
    /// A port number.
    Port(u32),
    /// The device (info ignored).
    Device,
}

/// A decoded EQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eqe {
    /// Event type.
    pub kind: EqeType,
    /// Raw `info`.
    pub info: u32,
}

impl Eqe {
    /// Decodes an 8-byte EQE.
    ///
    /// # Errors
    ///
    /// [`UnknownEvent`] for a type outside 0–18.
    pub fn parse(b: &[u8; EQE_SIZE]) -> Result<Eqe, UnknownEvent> {
        Ok(Eqe {
            kind: EqeType::try_from(get_u32(b, 0))?,
            info: get_u32(b, 4),
        })
    }

    /// The object the event names.
    pub fn target(&self) -> EventTarget {
        use EqeType::*;
        match self.kind {
            CqErr => EventTarget::Cq(self.info),
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => EventTarget::Qp(self.info),
            DeviceFatal => EventTarget::Device,
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => EventTarget::Port(self.info),
            SrqErr | SrqLimitReached => EventTarget::Srq(self.info),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_and_targets() {
        let e = Eqe::parse(&[1, 0, 0, 0, 7, 0, 0, 0]).unwrap();
        assert_eq!(e.kind, EqeType::QpFatal);
        assert_eq!(e.target(), EventTarget::Qp(7));
        let e = Eqe::parse(&[15, 0, 0, 0, 0x34, 0x12, 0, 0]).unwrap();
        assert_eq!(e.target(), EventTarget::Srq(0x1234));
        assert_eq!(
            Eqe::parse(&[0, 0, 0, 0, 3, 0, 0, 0]).unwrap().target(),
            EventTarget::Cq(3)
        );
        assert_eq!(
            Eqe::parse(&[8, 0, 0, 0, 0, 0, 0, 0]).unwrap().target(),
            EventTarget::Device
        );
        assert_eq!(
            Eqe::parse(&[10, 0, 0, 0, 1, 0, 0, 0]).unwrap().target(),
            EventTarget::Port(1)
        );
        assert_eq!(
            Eqe::parse(&[19, 0, 0, 0, 1, 0, 0, 0]),
            Err(UnknownEvent(19))
        );
        assert_eq!(
            Eqe::parse(&[0, 0, 0, 0x80, 1, 0, 0, 0]),
            Err(UnknownEvent(0x8000_0000))
        );
    }

    #[test]
    fn every_event_type_round_trips_and_no_other_is_one() {
        for v in 0..=18 {
            assert_eq!(EqeType::try_from(v).map(EqeType::as_raw), Ok(v));
        }
        assert_eq!(EqeType::GidChange.as_raw(), 18);
        assert_eq!(EqeType::try_from(19), Err(UnknownEvent(19)));
        assert_eq!(EqeType::try_from(u32::MAX), Err(UnknownEvent(u32::MAX)));
    }
}
