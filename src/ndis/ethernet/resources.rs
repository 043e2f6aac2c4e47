//! The PCI resources of a vmxnet3 function (vmxnet3.md §3.1): BAR0 "PT" and BAR1 "VD", 4 KiB
//! of registers each, BAR2 the MSI-X table and PBA (NDIS programs it; never mapped), and the
//! MSI-X messages granted. An I/O-port resource may be there (the access form no driver
//! uses): skipped, as are descriptor types that carry nothing for the driver.
#![deny(unsafe_code)]

use super::super::abi::*;
use super::super::resources::{MemRange, Resources, memory_length};

/// BAR0 and BAR1 hold 4 KiB of registers each (`VMXNET3_PT_REG_SIZE`, `VMXNET3_VD_REG_SIZE`).
pub const REG_BAR_MIN: u64 = 4096;

/// Parses the translated resource list of a 15AD:07B0 function into [`Resources`]: `bar0`
/// (PT), `bar1` (VD), `bar2` (the MSI-X BAR, empty when absent), `message_interrupts`.
///
/// # Errors
/// - NDIS_STATUS_RESOURCES: fewer than two memory BARs, or no MSI-X message (the system fell
///   back to a line interrupt, which the vmxnet3 layer does not drive).
/// - NDIS_STATUS_INVALID_DATA: a fourth memory BAR, an empty or wrapping range, a MemoryLarge
///   descriptor with no valid length unit, BAR0 or BAR1 under 4 KiB.
pub fn parse_eth_resources(
    list: &[CM_PARTIAL_RESOURCE_DESCRIPTOR],
) -> Result<Resources, NDIS_STATUS> {
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
            _ => {}
        }
    }
    let [bar0, bar1, bar2] = bars;
    if nbars < 2 || messages == 0 {
        return Err(NDIS_STATUS_RESOURCES);
    }
    if bar0.len < REG_BAR_MIN || bar1.len < REG_BAR_MIN {
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
    const BAR1: u64 = 0xFD00_1000;
    const BAR2: u64 = 0xFD00_2000;

    fn good() -> Vec<CM_PARTIAL_RESOURCE_DESCRIPTOR> {
        vec![
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR0, 0x1000),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR1, 0x1000),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR2, 0x2000),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x60),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x61),
            CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x62),
        ]
    }

    #[test]
    fn bars_and_messages_a_port_skipped() {
        let mut l = good();
        l.insert(
            2,
            CM_PARTIAL_RESOURCE_DESCRIPTOR {
                Type: CmResourceTypePort,
                ..Default::default()
            },
        );
        let r = parse_eth_resources(&l).unwrap();
        assert_eq!(
            r.bar0,
            MemRange {
                phys: BAR0,
                len: 0x1000
            }
        );
        assert_eq!(
            r.bar1,
            MemRange {
                phys: BAR1,
                len: 0x1000
            }
        );
        assert_eq!(
            r.bar2,
            MemRange {
                phys: BAR2,
                len: 0x2000
            }
        );
        assert_eq!(r.message_interrupts, 3);
    }

    #[test]
    fn one_message_is_enough_none_is_not() {
        let mut l = good();
        l.truncate(4);
        assert_eq!(parse_eth_resources(&l).unwrap().message_interrupts, 1);
        l.truncate(3);
        assert_eq!(parse_eth_resources(&l), Err(NDIS_STATUS_RESOURCES));
    }

    #[test]
    fn short_or_missing_register_bars() {
        let mut l = good();
        l.remove(1);
        l.remove(1);
        assert_eq!(parse_eth_resources(&l), Err(NDIS_STATUS_RESOURCES));
        let mut l = good();
        l[1] = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(BAR1, 0x800);
        assert_eq!(parse_eth_resources(&l), Err(NDIS_STATUS_INVALID_DATA));
        let mut l = good();
        l.insert(
            3,
            CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFE00_0000, 0x1000),
        );
        assert_eq!(parse_eth_resources(&l), Err(NDIS_STATUS_INVALID_DATA));
        let mut l = good();
        l[0] = CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(u64::MAX - 0x10, 0x1000);
        assert_eq!(parse_eth_resources(&l), Err(NDIS_STATUS_INVALID_DATA));
    }
}
