//! The registry keywords InitializeEx reads (ndkpi.md §6.5, §6.7; smb-direct.md §1.1) and
//! what they become: whether NDK may be enabled, the RoCE path MTU, the Ethernet MTU.
//!
//! | keyword | allowed | absent or out of range |
//! |---|---|---|
//! | `*NetworkDirect` | 0 (NDK disabled, cannot be enabled), 1 | 1, the INF default |
//! | `*NetworkDirectTechnology` | 4 (RoCEv2); 1, 2, 3 name transports PVRDMA does not carry: refused, NDK off | 4 |
//! | `*NetworkDirectRoCEFrameSize` | 256, 512, 1024, 2048, 4096 | 1024 |
//! | `*JumboPacket` | 1514 ..= 9014 (the Ethernet frame, header included) | 1514 |
//!
//! A value out of range never fails InitializeEx: the INF default is used and a
//! [`ConfigEvent`] records why, which the FFI layer writes to the system event log
//! (NdisWriteErrorLogEntry) and the debugger. `*NetworkDirect` = 0 brings the adapter up
//! with NDK disabled (NDK attributes `Enabled` FALSE); as Learn's "Enabling and Disabling NDK
//! Functionality" says, NDK then "cannot be enabled", so OID_NDK_SET_STATE(TRUE) is refused
//! until the keyword changes (which restarts the adapter).
//!
//! The RoCE path MTU in use ([`operational_mtu`]) is the largest RoCE MTU no larger than the
//! keyword, the port's active MTU (QUERY_PORT) and the Ethernet MTU less the RoCEv2
//! overhead Linux reserves (`iboe_get_mtu`: 96 bytes, so 1500 carries 1024, cm.md §3.2). The
//! INF requirement: when it differs from the keyword, the operational value is logged.
#![deny(unsafe_code)]

/// The keywords, as the INF names them.
pub const KW_NETWORK_DIRECT: &str = "*NetworkDirect";
pub const KW_NETWORK_DIRECT_TECHNOLOGY: &str = "*NetworkDirectTechnology";
pub const KW_ROCE_FRAME_SIZE: &str = "*NetworkDirectRoCEFrameSize";
pub const KW_JUMBO_PACKET: &str = "*JumboPacket";
/// Not an NDK keyword: the INF sets it (1) on the PVRDMA function of a paired installation,
/// which then registers no NDK of its own and serves the vmxnet3 adapter's (`super::pair`).
pub const KW_PAIRED: &str = "Paired";

/// `NDK_RDMA_TECHNOLOGY`: the one transport this device carries.
pub const TECHNOLOGY_ROCEV2: u32 = 4;
/// The INF default of `*NetworkDirectRoCEFrameSize` (required by Learn).
pub const DEFAULT_ROCE_FRAME_SIZE: u32 = 1024;
/// `*JumboPacket` without jumbo frames: 1500 bytes of payload and the 14-byte header.
pub const DEFAULT_JUMBO_PACKET: u32 = 1514;
/// The largest `*JumboPacket` accepted (9000 bytes of payload).
pub const MAX_JUMBO_PACKET: u32 = 9014;
/// The Ethernet header `*JumboPacket` includes.
pub const ETH_HEADER: u32 = 14;
/// Bytes of an Ethernet payload a RoCE packet spends besides its path-MTU payload (Linux
/// `iboe_get_mtu`: GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4).
pub const ROCE_OVERHEAD: u32 = 96;
/// The RoCE MTUs (IB MTU codes 1 ..= 5).
pub const ROCE_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// A registry the keywords are read from: NdisReadConfiguration on Windows, a table in tests.
pub trait Registry {
    /// `keyword` as an integer (NdisParameterInteger), or `None` when it is absent or not an
    /// integer.
    fn integer(&self, keyword: &str) -> Option<u32>;
}

/// A registry with nothing in it: every keyword takes its INF default.
pub struct EmptyRegistry;

impl Registry for EmptyRegistry {
    fn integer(&self, _: &str) -> Option<u32> {
        None
    }
}

/// Which keyword an event is about (its number is the event's first value in the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keyword {
    NetworkDirect = 1,
    NetworkDirectTechnology = 2,
    RoceFrameSize = 3,
    JumboPacket = 4,
}

impl Keyword {
    /// The keyword's registry name.
    pub const fn name(self) -> &'static str {
        match self {
            Keyword::NetworkDirect => KW_NETWORK_DIRECT,
            Keyword::NetworkDirectTechnology => KW_NETWORK_DIRECT_TECHNOLOGY,
            Keyword::RoceFrameSize => KW_ROCE_FRAME_SIZE,
            Keyword::JumboPacket => KW_JUMBO_PACKET,
        }
    }
}

/// Something about the configuration an administrator must be told (event log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigEvent {
    /// `value` is not one the keyword allows: `used` (the INF default) is in effect.
    OutOfRange {
        keyword: Keyword,
        value: u32,
        used: u32,
    },
    /// `*NetworkDirectTechnology` names a transport this device does not carry: NDK is off.
    UnsupportedTechnology { value: u32 },
    /// The RoCE MTU in use differs from `*NetworkDirectRoCEFrameSize` (the port's active MTU
    /// or the Ethernet MTU is smaller).
    OperationalMtu { configured: u32, operational: u32 },
    /// QUERY_PORT failed at InitializeEx: the link is reported unknown and the RoCE MTU
    /// bounded by 1024 (the MTU every RoCE port carries, pvrdma.md M41).
    PortQueryFailed,
}

impl ConfigEvent {
    /// The event log entry: NDIS error code and its values (the keyword number first).
    pub fn log_values(&self) -> [u32; 3] {
        match *self {
            ConfigEvent::OutOfRange {
                keyword,
                value,
                used,
            } => [keyword as u32, value, used],
            ConfigEvent::UnsupportedTechnology { value } => {
                [Keyword::NetworkDirectTechnology as u32, value, 0]
            }
            ConfigEvent::OperationalMtu {
                configured,
                operational,
            } => [Keyword::RoceFrameSize as u32, configured, operational],
            ConfigEvent::PortQueryFailed => [0, 0, 0],
        }
    }
}

/// At most this many events are kept (one per keyword, the MTU and the port).
pub const MAX_EVENTS: usize = 6;

/// The events of one InitializeEx, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigEvents {
    events: [Option<ConfigEvent>; MAX_EVENTS],
}

impl ConfigEvents {
    /// Records `e` (a full list drops it: there is one slot per source).
    pub fn push(&mut self, e: ConfigEvent) {
        if let Some(slot) = self.events.iter_mut().find(|s| s.is_none()) {
            *slot = Some(e);
        }
    }

    /// The events, in order.
    pub fn iter(&self) -> impl Iterator<Item = &ConfigEvent> {
        self.events.iter().flatten()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the keywords say, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keywords {
    /// NDK may be enabled: `*NetworkDirect` ≠ 0 and the technology is RoCEv2.
    pub network_direct: bool,
    /// `*NetworkDirectRoCEFrameSize` (one of [`ROCE_MTUS`]).
    pub roce_frame_size: u32,
    /// `*JumboPacket` (the Ethernet frame, header included).
    pub jumbo_packet: u32,
}

impl Default for Keywords {
    fn default() -> Self {
        Keywords {
            network_direct: true,
            roce_frame_size: DEFAULT_ROCE_FRAME_SIZE,
            jumbo_packet: DEFAULT_JUMBO_PACKET,
        }
    }
}

impl Keywords {
    /// Reads and validates the keywords; what had to be overridden goes to `events`.
    pub fn read(reg: &dyn Registry, events: &mut ConfigEvents) -> Keywords {
        let out_of_range = |events: &mut ConfigEvents, keyword: Keyword, value: u32, used: u32| {
            events.push(ConfigEvent::OutOfRange {
                keyword,
                value,
                used,
            });
            used
        };
        let network_direct = match reg.integer(KW_NETWORK_DIRECT) {
            None | Some(1) => true,
            Some(0) => false,
            Some(v) => out_of_range(events, Keyword::NetworkDirect, v, 1) != 0,
        };
        let technology_ok = match reg.integer(KW_NETWORK_DIRECT_TECHNOLOGY) {
            None | Some(TECHNOLOGY_ROCEV2) => true,
            // iWARP, InfiniBand, RoCE (v1): real transports an administrator may have chosen
            // on purpose; NDK stays off rather than carrying RoCEv2 under their name.
            Some(v @ 1..=3) => {
                events.push(ConfigEvent::UnsupportedTechnology { value: v });
                false
            }
            Some(v) => {
                out_of_range(
                    events,
                    Keyword::NetworkDirectTechnology,
                    v,
                    TECHNOLOGY_ROCEV2,
                );
                true
            }
        };
        let roce_frame_size = match reg.integer(KW_ROCE_FRAME_SIZE) {
            None => DEFAULT_ROCE_FRAME_SIZE,
            Some(v) if ROCE_MTUS.contains(&v) => v,
            Some(v) => out_of_range(events, Keyword::RoceFrameSize, v, DEFAULT_ROCE_FRAME_SIZE),
        };
        let jumbo_packet = match reg.integer(KW_JUMBO_PACKET) {
            None => DEFAULT_JUMBO_PACKET,
            Some(v) if (DEFAULT_JUMBO_PACKET..=MAX_JUMBO_PACKET).contains(&v) => v,
            Some(v) => out_of_range(events, Keyword::JumboPacket, v, DEFAULT_JUMBO_PACKET),
        };
        Keywords {
            network_direct: network_direct && technology_ok,
            roce_frame_size,
            jumbo_packet,
        }
    }

    /// The Ethernet MTU (payload) the adapter reports: `*JumboPacket` less the header.
    pub const fn ethernet_mtu(&self) -> u32 {
        self.jumbo_packet.saturating_sub(ETH_HEADER)
    }
}

/// The IB MTU code (1 = 256 … 5 = 4096) of a RoCE MTU in bytes; `None` for any other size.
pub fn mtu_code(bytes: u32) -> Option<u8> {
    ROCE_MTUS
        .iter()
        .position(|&m| m == bytes)
        // CAST: position < 5.
        .map(|i| i as u8 + 1)
}

/// The RoCE MTU in bytes of an IB MTU code; `None` outside 1 ..= 5.
pub fn mtu_bytes(code: u32) -> Option<u32> {
    let i = usize::try_from(code.checked_sub(1)?).ok()?;
    ROCE_MTUS.get(i).copied()
}

/// The RoCE MTU in use: the largest of [`ROCE_MTUS`] no larger than the keyword, the port's
/// active MTU (`port_code`, QUERY_PORT's IB code) and `ethernet_mtu` − [`ROCE_OVERHEAD`];
/// 256 at least (the smallest RoCE MTU, which every port carries).
pub fn operational_mtu(requested: u32, port_code: u32, ethernet_mtu: u32) -> u32 {
    let port = mtu_bytes(port_code).unwrap_or(DEFAULT_ROCE_FRAME_SIZE);
    let bound = requested
        .min(port)
        .min(ethernet_mtu.saturating_sub(ROCE_OVERHEAD));
    ROCE_MTUS
        .iter()
        .rev()
        .copied()
        .find(|&m| m <= bound)
        .unwrap_or(ROCE_MTUS[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    struct Table(&'static [(&'static str, u32)]);

    impl Registry for Table {
        fn integer(&self, k: &str) -> Option<u32> {
            self.0.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
        }
    }

    fn read(t: &'static [(&'static str, u32)]) -> (Keywords, Vec<ConfigEvent>) {
        let mut ev = ConfigEvents::default();
        let k = Keywords::read(&Table(t), &mut ev);
        (k, ev.iter().copied().collect())
    }

    #[test]
    fn defaults_when_absent() {
        assert_eq!(read(&[]), (Keywords::default(), vec![]));
        assert_eq!(Keywords::default().ethernet_mtu(), 1500);
    }

    #[test]
    fn each_keyword_in_range() {
        let (k, ev) = read(&[
            (KW_NETWORK_DIRECT, 0),
            (KW_NETWORK_DIRECT_TECHNOLOGY, 4),
            (KW_ROCE_FRAME_SIZE, 4096),
            (KW_JUMBO_PACKET, 9014),
        ]);
        assert_eq!(
            (k.network_direct, k.roce_frame_size, k.jumbo_packet),
            (false, 4096, 9014)
        );
        assert!(ev.is_empty());
        for size in ROCE_MTUS {
            let mut ev = ConfigEvents::default();
            struct One(u32);
            impl Registry for One {
                fn integer(&self, k: &str) -> Option<u32> {
                    (k == KW_ROCE_FRAME_SIZE).then_some(self.0)
                }
            }
            assert_eq!(Keywords::read(&One(size), &mut ev).roce_frame_size, size);
            assert!(ev.is_empty());
        }
    }

    #[test]
    fn out_of_range_falls_back_with_an_event() {
        let (k, ev) = read(&[
            (KW_NETWORK_DIRECT, 2),
            (KW_NETWORK_DIRECT_TECHNOLOGY, 9),
            (KW_ROCE_FRAME_SIZE, 1500),
            (KW_JUMBO_PACKET, 100),
        ]);
        assert_eq!(k, Keywords::default());
        assert_eq!(
            ev,
            vec![
                ConfigEvent::OutOfRange {
                    keyword: Keyword::NetworkDirect,
                    value: 2,
                    used: 1
                },
                ConfigEvent::OutOfRange {
                    keyword: Keyword::NetworkDirectTechnology,
                    value: 9,
                    used: 4
                },
                ConfigEvent::OutOfRange {
                    keyword: Keyword::RoceFrameSize,
                    value: 1500,
                    used: 1024
                },
                ConfigEvent::OutOfRange {
                    keyword: Keyword::JumboPacket,
                    value: 100,
                    used: 1514
                },
            ]
        );
        assert_eq!(ev[2].log_values(), [3, 1500, 1024]);
    }

    #[test]
    fn another_transport_turns_ndk_off() {
        for t in 1..=3 {
            let mut ev = ConfigEvents::default();
            struct T(u32);
            impl Registry for T {
                fn integer(&self, k: &str) -> Option<u32> {
                    (k == KW_NETWORK_DIRECT_TECHNOLOGY).then_some(self.0)
                }
            }
            let k = Keywords::read(&T(t), &mut ev);
            assert!(!k.network_direct, "technology {t}");
            assert_eq!(
                ev.iter().copied().collect::<Vec<_>>(),
                vec![ConfigEvent::UnsupportedTechnology { value: t }]
            );
        }
    }

    #[test]
    fn operational_mtu_is_the_smallest_bound() {
        // Keyword alone (port 4096, jumbo Ethernet).
        for m in ROCE_MTUS {
            assert_eq!(operational_mtu(m, 5, 9000), m);
        }
        // The port's active MTU (M41: 1024 by default).
        assert_eq!(operational_mtu(4096, 3, 9000), 1024);
        assert_eq!(operational_mtu(512, 3, 9000), 512);
        // The Ethernet MTU: 1500 carries 1024, 4074 (JumboPacket 4088) 2048, 9000 4096.
        assert_eq!(operational_mtu(4096, 5, 1500), 1024);
        assert_eq!(operational_mtu(4096, 5, 4074), 2048);
        assert_eq!(operational_mtu(4096, 5, 4191), 2048);
        assert_eq!(operational_mtu(4096, 5, 4192), 4096);
        // A port code out of range counts as 1024; nothing goes below 256.
        assert_eq!(operational_mtu(4096, 0, 9000), 1024);
        assert_eq!(operational_mtu(4096, 5, 300), 256);
        assert_eq!(
            (mtu_code(256), mtu_code(4096), mtu_code(1500)),
            (Some(1), Some(5), None)
        );
        assert_eq!(
            (mtu_bytes(0), mtu_bytes(3), mtu_bytes(6)),
            (None, Some(1024), None)
        );
    }
}
