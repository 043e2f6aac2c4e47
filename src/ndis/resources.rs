//! The PCI resources MiniportInitializeEx receives (the translated CM_PARTIAL_RESOURCE_LIST):
//! the three memory BARs in BAR order and the MSI-X messages (pvrdma.md §2, M2, M21).
//!
//! The list holds one CmResourceTypeMemory (or MemoryLarge) descriptor per memory BAR, in
//! BAR order, and one CmResourceTypeInterrupt descriptor with CM_RESOURCE_INTERRUPT_MESSAGE
//! per granted MSI-X message. PVRDMA has no I/O BAR, so a port resource means the list does
//! not describe this device. Descriptors of other types (DevicePrivate, ...) carry nothing
//! for the driver and are skipped.
#![deny(unsafe_code)]

use super::abi::*;

/// A physical memory range (one BAR).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemRange {
    pub phys: u64,
    pub len: u64,
}

/// What InitializeEx found in the PCI resource list (already translated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// BAR0: the MSI-X table and PBA (NDIS programs it; the driver does not map it).
    pub bar0: MemRange,
    /// BAR1: the registers.
    pub bar1: MemRange,
    /// BAR2: the UAR pages (the driver maps UAR 0).
    pub bar2: MemRange,
    /// Message-signalled interrupts granted.
    pub message_interrupts: u32,
}

/// The registers span 64 × u32 (M2); anything shorter cannot be this device.
pub const BAR1_MIN: u64 = 256;
/// One UAR page (the driver uses UAR 0).
pub const BAR2_MIN: u64 = 4096;
/// The driver needs all three MSI-X vectors (M21).
pub const MESSAGES_NEEDED: u32 = crate::pvrdma::device::VECTORS;

/// The length a memory descriptor describes, in bytes; `None` for a MemoryLarge descriptor
/// whose flags name no (or more than one) length unit.
pub(crate) fn memory_length(d: &CM_PARTIAL_RESOURCE_DESCRIPTOR) -> Option<u64> {
    let field = u64::from(d.memory_length_field());
    if d.Type == CmResourceTypeMemory {
        return Some(field);
    }
    let large = d.Flags
        & (CM_RESOURCE_MEMORY_LARGE_40 | CM_RESOURCE_MEMORY_LARGE_48 | CM_RESOURCE_MEMORY_LARGE_64);
    let shift = match large {
        CM_RESOURCE_MEMORY_LARGE_40 => 8,
        CM_RESOURCE_MEMORY_LARGE_48 => 16,
        CM_RESOURCE_MEMORY_LARGE_64 => 32,
        _ => return None,
    };
    Some(field << shift)
}

/// Parses the descriptors of a translated CM_PARTIAL_RESOURCE_LIST.
///
/// # Errors
/// - NDIS_STATUS_RESOURCES: fewer than three memory BARs, or fewer than three MSI-X
///   messages (none at all when the system fell back to a line interrupt): the device
///   cannot run with what it was given.
/// - NDIS_STATUS_INVALID_DATA: the list does not describe a PVRDMA function: a port
///   resource, a fourth memory BAR, an empty or wrapping range, a MemoryLarge descriptor
///   with no valid length unit, BAR1 under 256 bytes or BAR2 under one 4 KiB page.
pub fn parse_resources(list: &[CM_PARTIAL_RESOURCE_DESCRIPTOR]) -> Result<Resources, NDIS_STATUS> {
    let mut bars = [MemRange::default(); 3];
    let mut nbars = 0usize;
    let mut messages = 0u32;
    for d in list {
        match d.Type {
            CmResourceTypeMemory | CmResourceTypeMemoryLarge => {
                let len = memory_length(d).ok_or(NDIS_STATUS_INVALID_DATA)?;
                let phys = d.memory_start();
                if len == 0 || phys.checked_add(len).is_none() {
                    return Err(NDIS_STATUS_INVALID_DATA);
                }
                let slot = bars.get_mut(nbars).ok_or(NDIS_STATUS_INVALID_DATA)?;
                *slot = MemRange { phys, len };
                nbars += 1;
            }
            CmResourceTypeInterrupt if d.Flags & CM_RESOURCE_INTERRUPT_MESSAGE != 0 => {
                messages = messages.saturating_add(1);
            }
            CmResourceTypePort => return Err(NDIS_STATUS_INVALID_DATA),
            _ => {}
        }
    }
    let [bar0, bar1, bar2] = bars;
    if nbars < bars.len() || messages < MESSAGES_NEEDED {
        return Err(NDIS_STATUS_RESOURCES);
    }
    if bar1.len < BAR1_MIN || bar2.len < BAR2_MIN {
        return Err(NDIS_STATUS_INVALID_DATA);
    }
    Ok(Resources {
        bar0,
        bar1,
        bar2,
        message_interrupts: messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const BAR0: u64 = 0xFD00_0000;
    const BAR1: u64 = 0xFD10_0000;
    const BAR2: u64 = 0xFE00_0000;

    fn good() -> Vec<CM_PARTIAL_RESOURCE_DESCRIPTOR> {
        vec![
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR0, 0x4000),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR1, 0x100),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR2, 0x1000),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x50),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x51),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x52),
        ]
    }

    #[test]
    fn bars_in_order_and_messages() {
        let mut l = good();
        // Other types in between are skipped.
        l.insert(
            1,
            CM_PARTIAL_RESOURCE_DESCRIPTOR {
                Type: CmResourceTypeDevicePrivate,
                ..Default::default()
            },
        );
        let r = parse_resources(&l).unwrap();
        assert_eq!(
            r,
            Resources {
                bar0: MemRange {
                    phys: BAR0,
                    len: 0x4000
                },
                bar1: MemRange {
                    phys: BAR1,
                    len: 0x100
                },
                bar2: MemRange {
                    phys: BAR2,
                    len: 0x1000
                },
                message_interrupts: 3,
            }
        );
    }

    #[test]
    fn memory_large_units() {
        let mut l = good();
        let mut d = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0x80_0000_0000, 0x10);
        d.Type = CmResourceTypeMemoryLarge;
        d.Flags = CM_RESOURCE_MEMORY_LARGE_40;
        l[2] = d;
        assert_eq!(
            parse_resources(&l).unwrap().bar2,
            MemRange {
                phys: 0x80_0000_0000,
                len: 0x1000
            }
        );
        d.Flags = CM_RESOURCE_MEMORY_LARGE_48;
        l[2] = d;
        assert_eq!(parse_resources(&l).unwrap().bar2.len, 0x10_0000);
        d.Flags = CM_RESOURCE_MEMORY_LARGE_64;
        l[2] = d;
        assert_eq!(parse_resources(&l).unwrap().bar2.len, 0x10 << 32);
        for bad in [0, CM_RESOURCE_MEMORY_LARGE_40 | CM_RESOURCE_MEMORY_LARGE_64] {
            d.Flags = bad;
            l[2] = d;
            assert_eq!(
                parse_resources(&l),
                Err(NDIS_STATUS_INVALID_DATA),
                "{bad:#x}"
            );
        }
    }

    #[test]
    fn missing_resources() {
        assert_eq!(parse_resources(&[]), Err(NDIS_STATUS_RESOURCES));
        // Two BARs.
        let mut l = good();
        l.remove(2);
        assert_eq!(parse_resources(&l), Err(NDIS_STATUS_RESOURCES));
        // Two messages.
        let mut l = good();
        l.pop();
        assert_eq!(parse_resources(&l), Err(NDIS_STATUS_RESOURCES));
        // A line interrupt instead of messages.
        let mut l = good();
        l.truncate(3);
        let mut line = CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x10);
        line.Flags = 0;
        l.push(line);
        assert_eq!(parse_resources(&l), Err(NDIS_STATUS_RESOURCES));
    }

    #[test]
    fn wrong_or_too_small() {
        type Mutation = fn(&mut Vec<CM_PARTIAL_RESOURCE_DESCRIPTOR>);
        let cases: [(&str, Mutation); 6] = [
            ("BAR1 of 252 bytes", |l| {
                l[1] = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR1, 252)
            }),
            ("BAR2 under a page", |l| {
                l[2] = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR2, 0xFFF)
            }),
            ("empty BAR0", |l| {
                l[0] = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR0, 0)
            }),
            ("wrapping range", |l| {
                l[1] = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(u64::MAX - 0x10, 0x100)
            }),
            ("a port BAR", |l| {
                l.insert(
                    0,
                    CM_PARTIAL_RESOURCE_DESCRIPTOR {
                        Type: CmResourceTypePort,
                        ..CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0x1000, 0x10)
                    },
                )
            }),
            ("a fourth memory BAR", |l| {
                l.push(CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFF00_0000, 0x1000))
            }),
        ];
        for (what, mutate) in cases {
            let mut l = good();
            mutate(&mut l);
            assert_eq!(parse_resources(&l), Err(NDIS_STATUS_INVALID_DATA), "{what}");
        }
    }

    #[test]
    fn descriptor_accessors_read_the_union_layout() {
        let d = CM_PARTIAL_RESOURCE_DESCRIPTOR {
            u: [0x0003_0000, 0x0000_0051, 0, 0],
            ..CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0x1_2345_6000, 0x2000)
        };
        // Raw MessageInterrupt: Group (USHORT) then MessageCount (USHORT) at u + 0.
        assert_eq!(d.message_count(), 3);
        let m = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0x1_2345_6000, 0x2000);
        assert_eq!(
            (m.memory_start(), m.memory_length_field()),
            (0x1_2345_6000, 0x2000)
        );
    }
}
