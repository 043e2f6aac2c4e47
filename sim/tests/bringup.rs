//! Bring-up, registers, DSR/caps, interrupts masking and RESET, driven by raw register writes.

use pvrdma_sim::testutil::{Host, Req};
use pvrdma_sim::{DeviceConfig, DmaBuffer, MmioError};

#[test]
fn version_register_defaults_to_20_and_is_configurable() {
    let h = Host::default_up();
    assert_eq!(h.dev.bar1_read32(0x00), 20);
    for v in [18, 19] {
        let h = Host::new(DeviceConfig {
            version: v,
            ..Default::default()
        });
        assert_eq!(h.dev.bar1_read32(0x00), v);
    }
    assert_eq!(h.dev.msix_vectors(), 3);
}

#[test]
fn dsrhigh_fills_caps_at_exact_dsr_offsets() {
    let h = Host::load(DeviceConfig::default());
    let d = &h.dsr;
    let caps = 72;
    assert_eq!(d.read_u64(caps), 1 << 32); // fw_ver
    assert_eq!(
        d.read_vec(caps + 8, 8),
        vec![0x02, 0x50, 0x56, 0xFF, 0xFE, 0x00, 0x00, 0x01]
    );
    assert_eq!(d.read_vec(caps + 16, 8), d.read_vec(caps + 8, 8));
    assert_eq!(d.read_u64(caps + 24), 1 << 30);
    assert_eq!(d.read_u64(caps + 32), 0x1000);
    assert_eq!(d.read_u32(caps + 64), 0x15AD);
    assert_eq!(d.read_u32(caps + 68), 0x0820);
    assert_eq!(d.read_u32(caps + 72), 1);
    assert_eq!(d.read_u32(caps + 76), 1024);
    assert_eq!(d.read_u32(caps + 80), 4096);
    assert_eq!(d.read_u32(caps + 88), 16);
    assert_eq!(d.read_u32(caps + 96), 1024);
    assert_eq!(d.read_u32(caps + 100), 65536);
    assert_eq!(d.read_u32(caps + 104), 16384);
    assert_eq!(d.read_u32(caps + 108), 1024);
    assert_eq!(d.read_u32(caps + 164), 1024);
    assert_eq!(d.read_u32(caps + 176), 1024);
    assert_eq!(d.read_u32(caps + 180), 4096);
    assert_eq!(d.read_u32(caps + 184), 16);
    assert_eq!(d.read_u32(caps + 188), 16);
    assert_eq!(d.read_u32(caps + 192), 16);
    let tail = d.read_vec(caps + 196, 12);
    assert_eq!(tail, vec![1, 0, 15, 1, 0, 0, 7, 2, 0, 2, 0, 0]);
    h.dev.bar1_write32(0x0C, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 0);
}

#[test]
fn configured_caps_are_reported() {
    let mut cfg = DeviceConfig::default();
    cfg.caps.max_srq = 0;
    cfg.caps.gid_tbl_len = 4;
    let h = Host::load(cfg);
    assert_eq!(h.dsr.read_u32(72 + 176), 0);
    assert_eq!(h.dsr.read_u32(72 + 192), 4);
}

fn assert_invalid_dsr(h: &Host) {
    assert_eq!(h.dsr.read_vec(72, 208), vec![0u8; 208]);
    h.dev.bar1_write32(0x0C, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 1);
}

#[test]
fn invalid_dsr_gives_zero_caps_and_activate_fails() {
    // Unaligned command slot.
    let h = Host::load(DeviceConfig::default());
    h.dsr.write_u64(16, h.cmd.bus() + 8);
    h.dsr.write(72, &[0xAA; 208]);
    h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
    assert_invalid_dsr(&h);

    // Zero response slot.
    let h = Host::load(DeviceConfig::default());
    h.dsr.write_u64(24, 0);
    h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
    assert_invalid_dsr(&h);

    // Async ring with 1 page and CQ ring with 513 pages.
    for (off, pages) in [(32, 1u32), (48, 513)] {
        let h = Host::load(DeviceConfig::default());
        h.dsr.write_u32(off, pages);
        h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
        assert_invalid_dsr(&h);
    }

    // Ring directory unregistered.
    let h = Host::load(DeviceConfig::default());
    h.dsr.write_u64(40, 0x1000);
    h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
    assert_invalid_dsr(&h);
}

#[test]
fn dsr_at_unregistered_address_is_a_fault_not_a_panic() {
    let h = Host::load(DeviceConfig::default());
    let before = h.dev.counters().dma_faults;
    h.dev.bar1_write32(0x04, 0x1234_5000);
    h.dev.bar1_write32(0x08, 0x42);
    assert_eq!(h.dev.counters().dma_faults, before + 1);
    h.dev.bar1_write32(0x0C, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 1);
}

#[test]
fn mac_registers_follow_m3_and_are_writable() {
    let h = Host::default_up();
    assert_eq!(h.dev.bar1_read32(0x20), 0x0056_5000);
    assert_eq!(h.dev.bar1_read32(0x24), 0x0100);
    h.dev.bar1_write32(0x20, 0x4433_2211);
    h.dev.bar1_write32(0x24, 0x6655);
    assert_eq!(h.dev.bar1_read32(0x20), 0x4433_2211);
    assert_eq!(h.dev.bar1_read32(0x24), 0x6655);
    assert_eq!(
        h.dev.with_core(|c| c.mac()),
        [0x11, 0x22, 0x33, 0x44, 0x55, 0x66]
    );
}

#[test]
fn illegal_mmio_accesses_error_and_are_counted() {
    let h = Host::default_up();
    assert_eq!(h.dev.bar1_read(0x02, 4), Err(MmioError::BadAccess));
    assert_eq!(h.dev.bar1_read(0x00, 2), Err(MmioError::BadAccess));
    assert_eq!(h.dev.bar1_read(0x100, 4), Err(MmioError::OutOfRange));
    assert_eq!(h.dev.bar1_write(0x00, 4, 5), Err(MmioError::ReadOnly));
    assert_eq!(h.dev.bar1_write(0x10, 4, 1), Err(MmioError::ReadOnly));
    assert_eq!(h.dev.uar_write(0x2, 4, 1), Err(MmioError::BadAccess));
    assert_eq!(h.dev.uar_write(0x0, 8, 1), Err(MmioError::BadAccess));
    assert_eq!(h.dev.uar_write(16 * 4096, 4, 1), Err(MmioError::OutOfRange));
    assert_eq!(h.dev.bar1_read32(0x03), u32::MAX);
    assert_eq!(h.dev.counters().bad_mmio, 9);
    // Undefined but in-range registers read 0; UAR reads all ones.
    assert_eq!(h.dev.bar1_read32(0x40), 0);
    assert_eq!(h.dev.uar_read32(0), u32::MAX);
    assert_eq!(h.dev.counters().bad_mmio, 9);
}

#[test]
fn command_raises_vector_0_after_request_write_and_icr_reads_to_clear() {
    let h = Host::default_up();
    h.irqs.take();
    h.cmd.write(0, &Req::new(2).0);
    h.dev.bar1_write32(0x10, 0);
    // Nothing is delivered from inside the register write.
    assert!(h.irqs.take().is_empty());
    assert_eq!(h.dev.deliver_interrupts(), 1);
    assert_eq!(h.irqs.take(), vec![0]);
    assert_eq!(h.dev.bar1_read32(0x18), 1);
    assert_eq!(h.dev.bar1_read32(0x18), 0);
    assert_eq!(h.dev.counters().interrupts, [1, 0, 0]);
}

#[test]
fn masked_vector_fires_once_when_unmasked() {
    let h = Host::default_up();
    h.irqs.take();
    h.dev.bar1_write32(0x1C, !0);
    assert_eq!(h.dev.bar1_read32(0x1C), !0);
    h.cmd_ok(&Req::new(2));
    h.cmd_ok(&Req::new(2));
    assert!(h.irqs.take().is_empty());
    assert_eq!(h.dev.bar1_read32(0x18), 1);
    h.dev.bar1_write32(0x1C, 0);
    h.dev.run_until_idle();
    assert_eq!(h.irqs.take(), vec![0]);
    h.dev.bar1_write32(0x1C, !0);
    h.dev.bar1_write32(0x1C, 0);
    h.dev.run_until_idle();
    assert!(h.irqs.take().is_empty());
}

#[test]
fn unquiesce_sets_err_zero() {
    let h = Host::default_up();
    h.dev.bar1_write32(0x0C, 1);
    assert_eq!(h.dev.bar1_read32(0x14), 0);
}

#[test]
fn reset_destroys_objects_forgets_dsr_and_drops_interrupts() {
    let h = Host::default_up();
    let pd = h.create_pd();
    let _cq = h.create_cq(8);
    h.dev.bar1_write32(0x1C, !0);
    h.cmd_ok(&Req::new(2));
    h.irqs.take();
    h.dev.bar1_write32(0x0C, 2);
    assert_eq!(h.dev.bar1_read32(0x14), 0);
    assert_eq!(h.dev.bar1_read32(0x18), 0);
    h.dev.bar1_write32(0x1C, 0);
    h.dev.run_until_idle();
    assert!(h.irqs.take().is_empty());
    // DSR forgotten: ACTIVATE fails, REQUEST fails without touching memory.
    h.dev.bar1_write32(0x0C, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 1);
    h.resp.write(0, &[0xEE; 16]);
    h.cmd.write(0, &Req::new(3).u32(16, pd).0);
    h.dev.bar1_write32(0x10, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 22);
    assert_eq!(h.resp.read_vec(0, 16), vec![0xEE; 16]);
    // Reload the DSR: objects are gone, handles restart at 1.
    h.dev.bar1_write32(0x04, h.dsr.bus() as u32);
    h.dev.bar1_write32(0x08, (h.dsr.bus() >> 32) as u32);
    h.dev.bar1_write32(0x0C, 0);
    assert_eq!(h.dev.bar1_read32(0x14), 0);
    assert_eq!(h.cmd(&Req::new(3).u32(16, pd)).err(), 2);
    assert_eq!(h.create_pd(), 1);
}

#[test]
fn reset_stops_dma_so_memory_can_be_freed() {
    let h = Host::default_up();
    let regions = h.dma.region_count();
    let extra = DmaBuffer::new(&h.dma, 1);
    assert_eq!(h.dma.region_count(), regions + 1);
    drop(extra);
    h.dev.bar1_write32(0x0C, 2);
    assert_eq!(h.dma.region_count(), regions);
    // Doorbells after RESET touch nothing.
    let faults = h.dev.counters().dma_faults;
    h.dev.uar_write32(0, 1 | 1 << 30);
    h.dev.uar_write32(4, 1 | 1 << 30);
    h.dev.run_until_idle();
    assert_eq!(h.dev.counters().dma_faults, faults);
}
