//! ACTIVATE_DEV validation of the vmxnet3 model (vmxnet3.md §5, V1 and V4–V7): every value the
//! driver wrote into DriverShared and the queue descriptors, each check with its own test.
//! A failed check answers 1 to the CMD read-back, leaves the device inactive and names the
//! check; the device then takes no descriptor and no frame.

use pvrdma_sim::dma::DmaBuffer;
use pvrdma_sim::vmxnet3::mock::{MockConfig, MockNic, RXQ_DESC, TXQ_DESC, frame};
use pvrdma_sim::vmxnet3::{ActivateError, Vmxnet3Config};

/// Builds a mock, lets `mutate` spoil one value, selects and activates; asserts the failure.
fn refused(mc: MockConfig, mutate: impl FnOnce(&MockNic), want: ActivateError) -> MockNic {
    let n = MockNic::new(Vmxnet3Config::default(), mc);
    mutate(&n);
    n.select();
    assert_eq!(n.activate(), 1, "ACTIVATE_DEV read-back");
    let c = n.dev.counters();
    assert_eq!(c.last_activate_error, Some(want));
    assert_eq!(c.activate_failures, 1);
    assert_eq!(c.activations, 0);
    assert!(!n.dev.with_core(|c| c.is_active()));
    // Inactive: a frame is not received, a doorbell is ignored.
    assert!(!n.dev.receive_frame(&frame([0xFF; 6], [2; 6], 0x0800, 60)));
    n.bar0_w(0x600, 1);
    assert_eq!(n.dev.counters().bar0_inactive, 1);
    n
}

macro_rules! refuses {
    ($name:ident, $mc:expr, $mutate:expr, $want:expr) => {
        #[test]
        fn $name() {
            refused($mc, $mutate, $want);
        }
    };
}

fn dflt() -> MockConfig {
    MockConfig::default()
}

#[test]
fn activate_needs_a_selected_revision() {
    let n = MockNic::new(Vmxnet3Config::default(), dflt());
    n.bar1_w(0x08, 1);
    assert_eq!(n.activate(), 1);
    assert_eq!(
        n.dev.counters().last_activate_error,
        Some(ActivateError::NoRevision)
    );
}

#[test]
fn activate_needs_a_selected_upt_version() {
    let n = MockNic::new(Vmxnet3Config::default(), dflt());
    n.bar1_w(0x00, 1);
    assert_eq!(n.activate(), 1);
    assert_eq!(
        n.dev.counters().last_activate_error,
        Some(ActivateError::NoUptVersion)
    );
}

#[test]
fn vrrs_reports_the_offered_revisions_and_refuses_other_selections() {
    let cfg = Vmxnet3Config {
        revisions: 0b101,
        ..Vmxnet3Config::default()
    };
    let n = MockNic::new(cfg, dflt());
    assert_eq!(n.bar1_r(0x00), 0b101);
    assert_eq!(n.bar1_r(0x08), 1);
    // Not offered, two bits, nothing: no selection.
    for bad in [0b010, 0b101, 0] {
        n.bar1_w(0x00, bad);
    }
    n.bar1_w(0x08, 2);
    assert_eq!(n.dev.counters().bad_selects, 4);
    assert_eq!(n.dev.with_core(|c| c.revision()), None);
    n.bar1_w(0x00, 0b100);
    assert_eq!(n.dev.with_core(|c| c.revision()), Some(3));
}

#[test]
fn activate_refuses_a_null_or_misaligned_shared_address() {
    let n = MockNic::new(Vmxnet3Config::default(), dflt());
    n.select();
    for addr in [0u64, n.shared.bus() + 4] {
        n.bar1_w(0x10, addr as u32);
        n.bar1_w(0x18, (addr >> 32) as u32);
        assert_eq!(n.cmd(0xCAFE_0000), 1);
        assert_eq!(
            n.dev.counters().last_activate_error,
            Some(ActivateError::SharedAddress)
        );
    }
}

#[test]
fn activate_refuses_shared_memory_outside_dma() {
    let n = MockNic::new(Vmxnet3Config::default(), dflt());
    n.select();
    // The last 8 bytes of the page: DriverShared would run past the registered region.
    let addr = n.shared.bus() + 4096 - 8;
    n.bar1_w(0x10, addr as u32);
    n.bar1_w(0x18, (addr >> 32) as u32);
    assert_eq!(n.cmd(0xCAFE_0000), 1);
    assert_eq!(
        n.dev.counters().last_activate_error,
        Some(ActivateError::SharedUnreadable)
    );
}

refuses!(
    activate_refuses_a_bad_magic,
    dflt(),
    |n: &MockNic| n.shared.write_u32(0, 0xBABE_FEE2),
    ActivateError::BadMagic
);
refuses!(
    activate_refuses_zero_tx_queues,
    dflt(),
    |n: &MockNic| n.shared.write(62, &[0]),
    ActivateError::QueueCount
);
refuses!(
    activate_refuses_more_rx_queues_than_offered,
    dflt(),
    |n: &MockNic| n.shared.write(63, &[17]),
    ActivateError::QueueCount
);
refuses!(
    activate_refuses_a_misaligned_queue_descriptor_table,
    dflt(),
    |n: &MockNic| n
        .shared
        .write_u64(40, n.shared.bus() + TXQ_DESC as u64 + 64),
    ActivateError::QueueDescAlign
);
refuses!(
    activate_refuses_a_short_queue_descriptor_length,
    dflt(),
    |n: &MockNic| n.shared.write_u32(52, 511),
    ActivateError::QueueDescLen
);
refuses!(
    activate_refuses_queue_descriptors_outside_dma,
    dflt(),
    |n: &MockNic| n.shared.write_u64(40, n.shared.bus() + 4096 - 256),
    ActivateError::QueueDescUnreadable
);
refuses!(
    activate_refuses_an_mtu_below_60,
    dflt(),
    |n: &MockNic| n.shared.write_u32(56, 59),
    ActivateError::Mtu
);
refuses!(
    activate_refuses_an_mtu_above_9000,
    dflt(),
    |n: &MockNic| n.shared.write_u32(56, 9001),
    ActivateError::Mtu
);
refuses!(
    activate_refuses_zero_interrupts,
    dflt(),
    |n: &MockNic| n.shared.write(81, &[0]),
    ActivateError::NumIntrs
);
refuses!(
    activate_refuses_more_interrupts_than_offered,
    dflt(),
    |n: &MockNic| n.shared.write(81, &[26]),
    ActivateError::NumIntrs
);
refuses!(
    activate_refuses_an_event_vector_out_of_range,
    dflt(),
    |n: &MockNic| n.shared.write(82, &[3]),
    ActivateError::EventIntrIdx
);
refuses!(
    activate_refuses_auto_mask_other_than_0_or_1,
    dflt(),
    |n: &MockNic| n.shared.write(80, &[2]),
    ActivateError::AutoMask
);
refuses!(
    activate_refuses_a_moderation_level_above_adaptive,
    dflt(),
    |n: &MockNic| n.shared.write(83 + 2, &[9]),
    ActivateError::ModLevel
);
refuses!(
    activate_refuses_undefined_intr_ctrl_bits,
    dflt(),
    |n: &MockNic| n.shared.write_u32(108, 0x3),
    ActivateError::IntrCtrl
);
refuses!(
    activate_refuses_undefined_rx_mode_bits,
    dflt(),
    |n: &MockNic| n.shared.write_u32(120, 0x20),
    ActivateError::RxMode
);
refuses!(
    activate_refuses_a_ragged_multicast_table,
    dflt(),
    |n: &MockNic| n.shared.write(124, &7u16.to_le_bytes()),
    ActivateError::MulticastTable
);
refuses!(
    activate_refuses_a_multicast_table_outside_dma,
    dflt(),
    |n: &MockNic| {
        n.shared.write(124, &12u16.to_le_bytes());
        n.shared.write_u64(128, n.shared.bus() + 4096 - 6);
    },
    ActivateError::MulticastTable
);
refuses!(
    activate_refuses_a_misaligned_tx_ring,
    dflt(),
    |n: &MockNic| n.shared.write_u64(TXQ_DESC + 16, n.tx_ring.bus() + 256),
    ActivateError::TxRingAlign(0)
);
refuses!(
    activate_refuses_a_tx_ring_size_not_a_multiple_of_32,
    dflt(),
    |n: &MockNic| n.shared.write_u32(TXQ_DESC + 56, 48),
    ActivateError::TxRingSize(0)
);
refuses!(
    activate_refuses_a_tx_ring_above_4096,
    dflt(),
    |n: &MockNic| n.shared.write_u32(TXQ_DESC + 56, 4128),
    ActivateError::TxRingSize(0)
);
refuses!(
    activate_refuses_an_empty_tx_ring,
    dflt(),
    |n: &MockNic| n.shared.write_u32(TXQ_DESC + 56, 0),
    ActivateError::TxRingSize(0)
);
refuses!(
    activate_refuses_a_misaligned_tx_completion_ring,
    dflt(),
    |n: &MockNic| n.shared.write_u64(TXQ_DESC + 32, n.tx_comp.bus() + 16),
    ActivateError::TxCompAlign(0)
);
refuses!(
    activate_refuses_a_tx_completion_ring_smaller_than_its_ring,
    MockConfig {
        tx_comp_size: 32,
        ..dflt()
    },
    |_: &MockNic| {},
    ActivateError::TxCompSize(0)
);
refuses!(
    activate_refuses_a_tx_vector_out_of_range,
    dflt(),
    |n: &MockNic| n.shared.write(TXQ_DESC + 72, &[3]),
    ActivateError::TxIntrIdx(0)
);
refuses!(
    activate_refuses_a_tx_ring_outside_dma,
    MockConfig {
        tx_size: 512,
        tx_comp_size: 512,
        ..dflt()
    },
    // 512 descriptors are two pages; point the ring at a one-page buffer.
    |n: &MockNic| n.shared.write_u64(TXQ_DESC + 16, n.shared.bus()),
    ActivateError::TxRingUnreachable(0)
);
refuses!(
    activate_refuses_a_misaligned_rx_ring_0,
    dflt(),
    |n: &MockNic| n.shared.write_u64(RXQ_DESC + 16, n.rx_rings[0].bus() + 8),
    ActivateError::RxRingAlign(0, 0)
);
refuses!(
    activate_refuses_a_misaligned_rx_ring_1,
    dflt(),
    |n: &MockNic| n.shared.write_u64(RXQ_DESC + 24, n.rx_rings[1].bus() + 8),
    ActivateError::RxRingAlign(0, 1)
);
refuses!(
    activate_refuses_an_empty_rx_ring_0,
    dflt(),
    |n: &MockNic| n.shared.write_u32(RXQ_DESC + 56, 0),
    ActivateError::RxRingSize(0, 0)
);
refuses!(
    activate_refuses_an_rx_ring_1_size_not_a_multiple_of_32,
    dflt(),
    |n: &MockNic| n.shared.write_u32(RXQ_DESC + 60, 33),
    ActivateError::RxRingSize(0, 1)
);
refuses!(
    activate_refuses_a_misaligned_rx_completion_ring,
    dflt(),
    |n: &MockNic| n.shared.write_u64(RXQ_DESC + 32, n.rx_comp.bus() + 32),
    ActivateError::RxCompAlign(0)
);
refuses!(
    activate_refuses_an_rx_completion_ring_smaller_than_both_rings,
    MockConfig {
        rx_comp_size: 64,
        ..dflt()
    },
    |_: &MockNic| {},
    ActivateError::RxCompSize(0)
);
refuses!(
    activate_refuses_an_rx_completion_ring_above_8192,
    dflt(),
    |n: &MockNic| n.shared.write_u32(RXQ_DESC + 64, 8224),
    ActivateError::RxCompSize(0)
);
refuses!(
    activate_refuses_an_rx_vector_out_of_range,
    dflt(),
    |n: &MockNic| n.shared.write(RXQ_DESC + 72, &[7]),
    ActivateError::RxIntrIdx(0)
);
refuses!(
    activate_refuses_an_rx_ring_outside_dma,
    dflt(),
    |n: &MockNic| n.shared.write_u64(RXQ_DESC + 24, 0x1000),
    ActivateError::RxRingUnreachable(0)
);

#[test]
fn activate_accepts_an_absent_rx_ring_1() {
    let mc = MockConfig {
        rx_sizes: [64, 0],
        rx_comp_size: 64,
        ..dflt()
    };
    let n = MockNic::new(Vmxnet3Config::default(), mc);
    n.shared.write_u64(RXQ_DESC + 24, 0);
    n.select();
    assert_eq!(n.activate(), 0);
}

#[test]
fn activate_zeroes_completion_rings_and_writes_the_device_fields() {
    let cfg = Vmxnet3Config {
        tx_threshold: 7,
        update_rx_prod: true,
        ..Vmxnet3Config::default()
    };
    let n = MockNic::new(cfg, dflt());
    n.tx_comp.write(0, &[0xAA; 1024]);
    n.rx_comp.write(0, &[0xAA; 1536]);
    n.select();
    assert_eq!(n.activate(), 0);
    assert_eq!(n.tx_comp.read_vec(0, 1024), vec![0; 1024]);
    assert_eq!(n.rx_comp.read_vec(0, 1536), vec![0; 1536]);
    assert_eq!(n.shared.read_u32(TXQ_DESC + 4), 7, "txThreshold");
    assert_eq!(n.shared.read_vec(RXQ_DESC, 1), vec![1], "updateRxProd");
    let c = n.dev.counters();
    assert_eq!((c.activations, c.activate_failures), (1, 0));
}

#[test]
fn activate_while_active_answers_0_and_reads_nothing() {
    let n = MockNic::default_up();
    // A broken DriverShared is not looked at: the device is already active.
    n.shared.write_u32(0, 0);
    assert_eq!(n.cmd(0xCAFE_0000), 0);
    assert_eq!(n.dev.counters().activations, 1);
}

#[test]
fn a_failed_activation_can_be_retried_after_the_driver_fixes_its_values() {
    let n = refused(dflt(), |n| n.shared.write_u32(56, 20), ActivateError::Mtu);
    n.shared.write_u32(56, 1500);
    assert_eq!(n.activate(), 0);
    assert!(n.dev.with_core(|c| c.is_active()));
    // Another buffer in the same space: still not the device's to touch.
    let _unused = DmaBuffer::new(&n.dma, 1);
}

#[test]
fn activate_restores_the_permanent_mac_only_when_configured_as_qemu() {
    let permanent = Vmxnet3Config::default().mac;
    let custom = [0x02, 0x22, 0x33, 0x44, 0x55, 0x66];
    for (restores, after_activate) in [(false, custom), (true, permanent)] {
        let cfg = Vmxnet3Config {
            activate_restores_mac: restores,
            ..Vmxnet3Config::default()
        };
        let n = MockNic::new(cfg, dflt());
        n.select();
        n.bar1_w(0x28, 0x4433_2202);
        n.bar1_w(0x30, 0x6655);
        assert_eq!(n.dev.with_core(|c| c.mac()), custom);
        assert_eq!(n.activate(), 0);
        assert_eq!(
            n.dev.with_core(|c| c.mac()),
            after_activate,
            "restores {restores}"
        );
        assert_eq!(
            n.bar1_r(0x28),
            u32::from_le_bytes(after_activate[..4].try_into().unwrap())
        );
        // Written again once active, it stays (what a driver does for QEMU).
        n.bar1_w(0x28, 0x4433_2202);
        n.bar1_w(0x30, 0x6655);
        assert_eq!(n.dev.with_core(|c| c.mac()), custom);
        // The permanent MAC is the configured one throughout.
        assert_eq!(n.cmd(0xF00D_0003), 0x0056_5000);
    }
}

#[test]
fn the_qemu_profile_answers_get_conf_intr_and_get_link_as_qemu() {
    let n = MockNic::up(Vmxnet3Config::qemu(), dflt());
    assert_eq!(n.cmd(0xF00D_0008), 0, "GET_CONF_INTR: AUTO type, AUTO mask");
    assert_eq!(
        n.cmd(0xF00D_0002),
        (1000 << 16) | 1,
        "GET_LINK: 1000 Mbps, up"
    );
}
