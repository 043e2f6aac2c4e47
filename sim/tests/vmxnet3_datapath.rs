//! The vmxnet3 model's registers, data path, interrupts, events, commands and statistics
//! (vmxnet3.md §5, V2 and V8–V13), driven by the mock driver: each validation of a
//! driver-written index, length, type or address has its own test and ends in a device error
//! state (a stopped queue, a counted access), never a panic or a stray memory access.

use pvrdma_sim::MmioError;
use pvrdma_sim::vmxnet3::Vmxnet3Config;
use pvrdma_sim::vmxnet3::mock::{
    GET_LINK, MockConfig, MockNic, QUIESCE, RESET, RX_BUF, RXQ_DESC, TxSpec, UPDATE_MAC_FILTERS,
    UPDATE_RX_MODE, UPDATE_VLAN_FILTERS, frame,
};

const OWN: [u8; 6] = [0x00, 0x50, 0x56, 0x00, 0x00, 0x01];
const PEER: [u8; 6] = [0x00, 0x50, 0x56, 0x00, 0x00, 0x02];
const MCAST: [u8; 6] = [0x01, 0x00, 0x5E, 0x00, 0x00, 0x07];
const NOEOP: u32 = 0x8000_0000;
const BIG_PKT: u32 = 0x8000_0002;
const DESC_NOT_SPT: u32 = 0x8000_0003;
const SMALL_BUF: u32 = 0x8000_0004;
const INVALID: u32 = 0x8000_0007;

fn up_with(mc: MockConfig) -> MockNic {
    MockNic::up(Vmxnet3Config::default(), mc)
}

fn tx_stopped(n: &MockNic, code: u32) {
    assert_eq!(n.queue_status(false), (1, code));
    assert_eq!(n.ecr() & 2, 2, "TQERR");
    assert_eq!(n.dev.counters().tx_queue_errors, 1);
}

fn rx_stopped(n: &MockNic, code: u32) {
    assert_eq!(n.queue_status(true), (1, code));
    assert_eq!(n.ecr() & 1, 1, "RQERR");
    assert_eq!(n.dev.counters().rx_queue_errors, 1);
}

// ------------------------------------------------------------------------------ registers

#[test]
fn register_accesses_other_than_aligned_32_bit_inside_the_bar_are_counted() {
    let n = MockNic::default_up();
    assert_eq!(n.dev.bar1_read(0x20, 2), Err(MmioError::BadAccess));
    assert_eq!(n.dev.bar1_write(0x22, 4, 0), Err(MmioError::BadAccess));
    assert_eq!(n.dev.bar0_write(4096, 4, 0), Err(MmioError::OutOfRange));
    assert_eq!(n.dev.bar0_read(0x1000, 4), Err(MmioError::OutOfRange));
    assert_eq!(n.dev.bar1_read32(0x1002), u32::MAX);
    assert_eq!(n.dev.counters().bad_mmio, 5);
}

#[test]
fn icr_is_read_only() {
    let n = MockNic::default_up();
    assert_eq!(n.dev.bar1_write(0x38, 4, 1), Err(MmioError::ReadOnly));
    assert_eq!(n.dev.counters().bad_mmio, 1);
}

#[test]
fn imr_of_a_vector_beyond_num_intrs_is_counted() {
    let n = MockNic::default_up();
    n.bar0_w(8 * 3, 0);
    assert_eq!(n.dev.counters().bad_mmio, 1);
    assert!(n.dev.with_core(|c| c.vector_masked(3)));
}

#[test]
fn txprod_of_a_queue_beyond_num_tx_queues_is_counted() {
    let n = MockNic::default_up();
    n.bar0_w(0x608, 0);
    assert_eq!(n.dev.counters().bad_mmio, 1);
    assert_eq!(n.queue_status(false), (0, 0));
}

#[test]
fn txprod_beyond_the_ring_stops_the_tx_queue() {
    let n = MockNic::default_up();
    n.bar0_w(0x600, 64);
    tx_stopped(&n, INVALID);
}

#[test]
fn rxprod_beyond_the_ring_stops_the_rx_queue() {
    let n = MockNic::default_up();
    n.bar0_w(0xA00, 32);
    rx_stopped(&n, INVALID);
}

#[test]
fn rxprod_of_a_queue_beyond_num_rx_queues_is_counted() {
    let n = MockNic::default_up();
    n.bar0_w(0x808, 0);
    assert_eq!(n.dev.counters().bad_mmio, 1);
    assert_eq!(n.queue_status(true), (0, 0));
}

#[test]
fn bar0_writes_are_ignored_after_quiesce() {
    let n = MockNic::default_up();
    assert_eq!(n.cmd(QUIESCE), 0);
    n.send(&[&frame(PEER, OWN, 0x0800, 60)]);
    n.run();
    assert!(n.sent().is_empty());
    assert_eq!(n.dev.counters().bar0_inactive, 1);
}

#[test]
fn mac_registers_hold_the_current_mac_and_mach_commits_it() {
    let n = MockNic::default_up();
    assert_eq!(n.bar1_r(0x28), 0x0056_5000);
    assert_eq!(n.bar1_r(0x30), 0x0100);
    n.bar1_w(0x28, 0x4433_2202);
    assert_eq!(
        n.dev.with_core(|c| c.mac()),
        OWN,
        "MACL alone changes nothing"
    );
    n.bar1_w(0x30, 0x6655);
    assert_eq!(
        n.dev.with_core(|c| c.mac()),
        [0x02, 0x22, 0x33, 0x44, 0x55, 0x66]
    );
    // RESET_DEV keeps it; the permanent MAC is still the configured one.
    assert_eq!(n.cmd(RESET), 0);
    assert_eq!(n.bar1_r(0x28), 0x4433_2202);
    assert_eq!(n.cmd(0xF00D_0003), 0x0056_5000);
    assert_eq!(n.cmd(0xF00D_0004), 0x0100);
}

#[test]
fn get_commands_answer_per_the_reference() {
    let n = MockNic::default_up();
    assert_eq!(n.cmd(GET_LINK), (10_000 << 16) | 1);
    assert_eq!(n.cmd(0xF00D_0005), 0x07B0, "GET_DID_LO");
    assert_eq!(n.cmd(0xF00D_0006), 1, "GET_DID_HI");
    assert_eq!(n.cmd(0xF00D_0008), 3, "GET_CONF_INTR: MSI-X, auto mask");
    assert_eq!(n.cmd(0xF00D_0009), 1, "adaptive ring disabled");
}

#[test]
fn unsupported_commands_read_back_all_ones() {
    let n = MockNic::default_up();
    assert_eq!(
        n.cmd(0xF00D_000A),
        u32::MAX,
        "GET_TXDATA_DESC_SIZE is revision 3"
    );
    assert_eq!(n.cmd(0xCAFE_000E), u32::MAX, "SET_COALESCE is revision 3");
    assert_eq!(n.cmd(0x1234_5678), u32::MAX);
    assert_eq!(n.dev.counters().unsupported_commands, 3);
    assert_eq!(
        n.cmd(0xCAFE_0007),
        0,
        "UPDATE_IML: accepted, moderation not modelled"
    );
}

// ------------------------------------------------------------------------------ Tx

#[test]
fn a_packet_is_sent_completed_and_interrupts_its_vector() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x0800, 100);
    let eop = n.send(&[&f]);
    n.run();
    assert_eq!(n.sent(), vec![f]);
    assert_eq!(n.tx_completions(), vec![eop]);
    assert_eq!(n.irq.take(), vec![1], "the Tx queue's vector");
    let c = n.dev.counters();
    assert_eq!((c.tx_frames, c.tx_bytes), (1, 100));
}

#[test]
fn a_packet_of_several_descriptors_is_gathered_in_order() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x86DD, 300);
    let eop = n.send(&[&f[..14], &f[14..100], &f[100..]]);
    assert_eq!(eop, 2);
    n.run();
    assert_eq!(n.sent(), vec![f]);
    assert_eq!(
        n.tx_completions(),
        vec![2],
        "one completion, the EOP's index"
    );
}

#[test]
fn the_tx_ring_wraps_with_its_generation() {
    let n = MockNic::default_up();
    let mut idx = Vec::new();
    for i in 0..150usize {
        let f = frame(PEER, OWN, 0x0800, 60 + i);
        let e = n.send(&[&f[..20], &f[20..]]);
        n.run();
        assert_eq!(n.sent(), vec![f]);
        idx.extend(n.tx_completions());
        assert_eq!(idx.last(), Some(&e));
    }
    assert_eq!(idx.len(), 150);
    assert_eq!(n.dev.counters().tx_queue_errors, 0);
}

#[test]
fn a_descriptor_not_handed_over_is_not_taken() {
    let n = MockNic::default_up();
    // Written with the ring's generation on every descriptor but the SOP's never flipped:
    // write the SOP with the inverted generation and ring the doorbell.
    let f = frame(PEER, OWN, 0x0800, 60);
    let addr = n.stage(&f);
    n.tx_ring.write_u64(0, addr);
    n.tx_ring.write_u32(8, 60); // gen 0: not the device's (ring gen is 1)
    n.tx_ring.write_u32(12, 1 << 12);
    n.bar0_w(0x600, 1);
    n.run();
    assert!(n.sent().is_empty());
    assert!(n.tx_completions().is_empty());
    assert_eq!(n.queue_status(false), (0, 0));
}

#[test]
fn a_packet_whose_middle_descriptor_is_not_handed_over_stops_the_queue() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x0800, 60);
    let a = n.stage(&f);
    // SOP with gen 1, no EOP; the next descriptor still carries gen 0.
    n.tx_ring.write_u64(0, a);
    n.tx_ring.write_u32(8, 30 | (1 << 14));
    n.tx_ring.write_u32(12, 0);
    n.bar0_w(0x600, 2);
    n.run();
    tx_stopped(&n, NOEOP);
    assert!(n.sent().is_empty());
}

#[test]
fn more_than_16_descriptors_stop_the_queue() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x0800, 17 * 4);
    let specs: Vec<TxSpec> = (0..17)
        .map(|k| TxSpec {
            addr: n.stage(&f[4 * k..4 * k + 4]),
            len: 4,
            eop: k == 16,
            ..TxSpec::default()
        })
        .collect();
    n.post(&specs);
    n.run();
    tx_stopped(&n, BIG_PKT);
}

#[test]
fn a_nonzero_dtype_stops_the_tx_queue() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x0800, 60);
    n.post(&[TxSpec {
        addr: n.stage(&f),
        len: 60,
        eop: true,
        dtype: 1,
        ..TxSpec::default()
    }]);
    n.run();
    tx_stopped(&n, DESC_NOT_SPT);
}

#[test]
fn a_tx_buffer_outside_dma_stops_the_queue() {
    let n = MockNic::default_up();
    n.post(&[TxSpec {
        addr: 0x10_0000,
        len: 60,
        eop: true,
        ..TxSpec::default()
    }]);
    n.run();
    tx_stopped(&n, INVALID);
    assert!(n.sent().is_empty());
    assert!(n.tx_completions().is_empty());
}

#[test]
fn runt_and_oversize_packets_are_completed_unsent() {
    let n = MockNic::default_up();
    let runt = frame(PEER, OWN, 0x0800, 60);
    let e1 = n.send(&[&runt[..13]]);
    let big = frame(PEER, OWN, 0x0800, 1519);
    let e2 = n.send(&[&big]);
    // Zero length means 16 KiB: far above the MTU.
    let e3 = n.post(&[TxSpec {
        addr: n.stage(&[0; 64]),
        len: 0,
        eop: true,
        ..TxSpec::default()
    }]);
    n.run();
    assert!(n.sent().is_empty());
    assert_eq!(n.tx_completions(), vec![e1, e2, e3]);
    assert_eq!(n.dev.counters().tx_errors, 3);
    assert_eq!(n.stats(false)[8], 3, "pktsTxError");
    // A frame of exactly mtu + 18 goes.
    let max = frame(PEER, OWN, 0x0800, 1518);
    n.send(&[&max]);
    n.run();
    assert_eq!(n.sent(), vec![max]);
}

#[test]
fn tso_is_completed_unsent_and_counted() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x0800, 100);
    let e = n.post(&[TxSpec {
        addr: n.stage(&f),
        len: 100,
        eop: true,
        om: 3,
        hlen: 54,
        msscof: 1460,
        ..TxSpec::default()
    }]);
    n.run();
    assert!(n.sent().is_empty());
    assert_eq!(n.tx_completions(), vec![e]);
    assert_eq!(n.dev.counters().tx_errors, 1);
}

#[test]
fn checksum_offload_fills_the_l4_checksum() {
    let n = MockNic::default_up();
    // Ethernet + a 20-byte IPv4 header + UDP header + 4 bytes; the UDP checksum field holds
    // the pseudo-header sum (here 0) and the device folds in the rest.
    let mut f = frame(PEER, OWN, 0x0800, 14 + 20 + 12);
    for b in &mut f[14..] {
        *b = 0;
    }
    f[34..46].copy_from_slice(&[0x12, 0x34, 0x00, 0x35, 0x00, 0x0C, 0, 0, 1, 2, 3, 4]);
    n.post(&[TxSpec {
        addr: n.stage(&f),
        len: f.len() as u32,
        eop: true,
        om: 2,
        hlen: 34,
        msscof: 34 + 6,
        ..TxSpec::default()
    }]);
    n.run();
    let sent = n.sent();
    let l4 = &sent[0][34..];
    // One's-complement sum over the L4 bytes, the checksum included, is 0xFFFF.
    let mut sum: u32 = l4
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    assert_eq!(sum, 0xFFFF);
    assert_ne!(&l4[6..8], &[0, 0]);
}

#[test]
fn vlan_insertion_adds_the_tag() {
    let n = MockNic::default_up();
    let f = frame(PEER, OWN, 0x0800, 60);
    n.post(&[TxSpec {
        addr: n.stage(&f),
        len: 60,
        eop: true,
        ti: true,
        tci: 0x2064,
        ..TxSpec::default()
    }]);
    n.run();
    let sent = n.sent();
    assert_eq!(sent[0].len(), 64);
    assert_eq!(&sent[0][12..16], &[0x81, 0x00, 0x20, 0x64]);
    assert_eq!(&sent[0][16..], &f[12..]);
}

#[test]
fn link_down_discards_and_completes() {
    let n = MockNic::default_up();
    n.dev.link_changed(false);
    let e = n.send(&[&frame(PEER, OWN, 0x0800, 60)]);
    n.run();
    assert!(n.sent().is_empty());
    assert_eq!(n.tx_completions(), vec![e]);
    assert_eq!(n.dev.counters().tx_discards, 1);
    assert_eq!(n.stats(false)[9], 1, "pktsTxDiscard");
}

#[test]
fn a_stopped_queue_takes_nothing_until_reset_and_activate() {
    let n = MockNic::default_up();
    n.bar0_w(0x600, 1000);
    tx_stopped(&n, INVALID);
    n.send(&[&frame(PEER, OWN, 0x0800, 60)]);
    n.run();
    assert!(n.sent().is_empty());
    // The driver resets and starts over: a fresh mock on the same device.
    assert_eq!(n.cmd(QUIESCE), 0);
    assert_eq!(n.cmd(RESET), 0);
    let m = MockNic::on(n.dev.clone(), n.dma.clone(), MockConfig::default());
    m.select();
    assert_eq!(m.activate(), 0);
    let f = frame(PEER, OWN, 0x0800, 60);
    m.send(&[&f]);
    m.run();
    assert_eq!(m.sent(), vec![f]);
    assert_eq!(m.queue_status(false), (0, 0));
}

// ------------------------------------------------------------------------------ Rx

fn one_frame(n: &MockNic) -> (Vec<u8>, Vec<pvrdma_sim::vmxnet3::mock::RxComp>) {
    let comps = n.rx_completions();
    (n.rx_frame(&comps), comps)
}

#[test]
fn unicast_to_the_current_mac_is_received_into_a_head_buffer() {
    let n = MockNic::default_up();
    let f = frame(OWN, PEER, 0x0800, 200);
    assert!(n.dev.receive_frame(&f));
    n.run();
    let (got, comps) = one_frame(&n);
    assert_eq!(got, f);
    assert_eq!(comps.len(), 1);
    let c = comps[0];
    assert!(c.sop && c.eop && !c.err && c.cnc);
    assert_eq!((c.idx, c.rqid, c.len, c.kind), (0, 0, 200, 3));
    assert_eq!(n.irq.take(), vec![0], "the Rx queue's vector");
}

#[test]
fn unicast_to_another_mac_is_filtered() {
    let n = MockNic::default_up();
    assert!(!n.dev.receive_frame(&frame(PEER, PEER, 0x0800, 60)));
    assert_eq!(n.dev.counters().rx_filtered, 1);
    assert!(n.rx_completions().is_empty());
}

#[test]
fn broadcast_needs_bcast() {
    let n = up_with(MockConfig {
        rx_mode: 0x01,
        ..MockConfig::default()
    });
    let b = frame([0xFF; 6], PEER, 0x0806, 60);
    assert!(!n.dev.receive_frame(&b));
    n.shared.write_u32(120, 0x05);
    assert_eq!(n.cmd(UPDATE_RX_MODE), 0);
    assert!(n.dev.receive_frame(&b));
}

#[test]
fn multicast_needs_the_table_or_all_multi() {
    let n = MockNic::default_up();
    let m = frame(MCAST, PEER, 0x0800, 60);
    assert!(!n.dev.receive_frame(&m), "MCAST mode off");
    n.shared.write_u32(120, 0x07);
    assert_eq!(n.cmd(UPDATE_RX_MODE), 0);
    assert!(!n.dev.receive_frame(&m), "not in the table");
    n.set_multicast(&[[1, 0, 0x5E, 0, 0, 1], MCAST]);
    assert_eq!(n.cmd(UPDATE_MAC_FILTERS), 0);
    assert!(n.dev.receive_frame(&m));
    assert!(
        !n.dev
            .receive_frame(&frame([1, 0, 0x5E, 0, 0, 9], PEER, 0x0800, 60))
    );
    n.shared.write_u32(120, 0x01 | 0x08);
    assert_eq!(n.cmd(UPDATE_RX_MODE), 0);
    assert!(
        n.dev
            .receive_frame(&frame([0x33, 0x33, 0, 0, 0, 1], PEER, 0x86DD, 60))
    );
    assert_eq!(n.dev.counters().rx_filtered, 3);
}

#[test]
fn promiscuous_passes_everything() {
    let n = up_with(MockConfig {
        rx_mode: 0x10,
        ..MockConfig::default()
    });
    assert!(n.dev.receive_frame(&frame(PEER, PEER, 0x0800, 60)));
    assert!(n.dev.receive_frame(&frame(MCAST, PEER, 0x0800, 60)));
}

#[test]
fn vlan_tagged_frames_pass_only_registered_vlans() {
    let n = MockNic::default_up();
    let mut tagged = frame(OWN, PEER, 0x8100, 64);
    tagged[14..18].copy_from_slice(&[0x00, 0x64, 0x08, 0x00]);
    assert!(!n.dev.receive_frame(&tagged), "VLAN 100 not registered");
    n.shared.write_u32(136 + 4 * (100 / 32), 1 << (100 % 32));
    assert_eq!(n.cmd(UPDATE_VLAN_FILTERS), 0);
    assert!(n.dev.receive_frame(&tagged));
    // Priority-tagged (VLAN 0) frames always pass.
    tagged[14..16].copy_from_slice(&[0xE0, 0x00]);
    assert!(n.dev.receive_frame(&tagged));
    let (got, _) = one_frame(&n);
    assert_eq!(got.len(), 128, "two tagged frames, kept whole");
}

#[test]
fn a_frame_larger_than_the_head_buffer_continues_in_ring_1() {
    let n = up_with(MockConfig {
        mtu: 9000,
        ..MockConfig::default()
    });
    let f = frame(OWN, PEER, 0x0800, 5000);
    assert!(n.dev.receive_frame(&f));
    let comps = n.rx_completions();
    assert_eq!(
        comps
            .iter()
            .map(|c| (c.idx, c.rqid, c.len, c.sop, c.eop))
            .collect::<Vec<_>>(),
        vec![
            (0, 0, RX_BUF, true, false),
            (0, 1, RX_BUF, false, false),
            (1, 1, 5000 - 2 * RX_BUF, false, true)
        ]
    );
    assert_eq!(n.rx_frame(&comps), f);
}

#[test]
fn windows_guests_continue_in_ring_0() {
    let n = up_with(MockConfig {
        mtu: 9000,
        gos_type: 2,
        ..MockConfig::default()
    });
    let f = frame(OWN, PEER, 0x0800, 3000);
    assert!(n.dev.receive_frame(&f));
    let comps = n.rx_completions();
    assert_eq!(
        comps
            .iter()
            .map(|c| (c.idx, c.rqid, c.sop, c.eop))
            .collect::<Vec<_>>(),
        vec![(0, 0, true, false), (1, 0, false, true)]
    );
    assert_eq!(n.rx_frame(&comps), f);
}

#[test]
fn body_descriptors_in_ring_0_are_skipped_for_a_head() {
    let mc = MockConfig::default();
    let n = MockNic::new(Vmxnet3Config::default(), mc);
    n.select();
    assert_eq!(n.activate(), 0);
    // Ring 0: body, body, head.
    n.fill_rx_with(0, 3, |r, i| {
        (n.rx_buf_bus(r, i), RX_BUF, u32::from(i < 2), 0)
    });
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 100)));
    let comps = n.rx_completions();
    assert_eq!(comps.len(), 1);
    assert_eq!((comps[0].idx, comps[0].rqid), (2, 0));
}

#[test]
fn a_frame_that_does_not_fit_is_dropped_whole() {
    let n = MockNic::new(Vmxnet3Config::default(), MockConfig::default());
    n.select();
    assert_eq!(n.activate(), 0);
    n.fill_rx(0, 1, 1024, 0);
    // 1500 bytes need a second buffer and ring 1 is empty: nothing is consumed.
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 1500)));
    assert_eq!(n.dev.counters().rx_out_of_buf, 1);
    assert!(n.rx_completions().is_empty());
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 1000)));
    let comps = n.rx_completions();
    assert_eq!(
        (comps[0].idx, comps.len()),
        (0, 1),
        "the head buffer was still there"
    );
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    assert_eq!(n.stats(true)[8], 2, "pktsRxOutOfBuf");
}

#[test]
fn max_num_rx_sg_bounds_the_buffers_of_a_frame() {
    let n = up_with(MockConfig {
        mtu: 9000,
        max_rx_sg: 2,
        ..MockConfig::default()
    });
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 5000)));
    assert_eq!(n.dev.counters().rx_out_of_buf, 1);
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 4000)));
}

fn rx_ring0(n: &MockNic, f: impl Fn(usize, u32) -> (u64, u32, u32, u32)) {
    n.fill_rx_with(0, 1, f);
}

fn activated(mc: MockConfig) -> MockNic {
    let n = MockNic::new(Vmxnet3Config::default(), mc);
    n.select();
    assert_eq!(n.activate(), 0);
    n
}

#[test]
fn an_rx_descriptor_with_nonzero_dtype_stops_the_rx_queue() {
    let n = activated(MockConfig::default());
    rx_ring0(&n, |r, i| (n.rx_buf_bus(r, i), RX_BUF, 0, 1));
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    rx_stopped(&n, DESC_NOT_SPT);
    // Stopped: later frames are refused, nothing written.
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    assert!(n.rx_completions().is_empty());
}

#[test]
fn a_head_buffer_in_ring_1_stops_the_rx_queue() {
    let n = activated(MockConfig {
        mtu: 9000,
        ..MockConfig::default()
    });
    n.fill_rx(0, 1, RX_BUF, 0);
    n.fill_rx(1, 1, RX_BUF, 0);
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 3000)));
    rx_stopped(&n, DESC_NOT_SPT);
}

#[test]
fn a_head_buffer_below_128_bytes_stops_the_rx_queue() {
    let n = activated(MockConfig::default());
    n.fill_rx(0, 1, 127, 0);
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    rx_stopped(&n, SMALL_BUF);
}

#[test]
fn a_zero_length_body_buffer_stops_the_rx_queue() {
    let n = activated(MockConfig {
        mtu: 9000,
        ..MockConfig::default()
    });
    n.fill_rx(0, 1, RX_BUF, 0);
    n.fill_rx(1, 1, 0, 1);
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 3000)));
    rx_stopped(&n, SMALL_BUF);
}

#[test]
fn an_rx_buffer_outside_dma_stops_the_rx_queue() {
    let n = activated(MockConfig::default());
    rx_ring0(&n, |_, _| (0x20_0000, RX_BUF, 0, 0));
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    rx_stopped(&n, INVALID);
    assert!(n.rx_completions().is_empty());
}

#[test]
fn frames_longer_than_the_mtu_are_dropped() {
    let n = MockNic::default_up();
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 1519)));
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 1518)));
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)[..13]));
    assert_eq!(n.dev.counters().rx_errors, 2);
}

#[test]
fn vlan_stripping_moves_the_tag_to_the_completion() {
    let n = up_with(MockConfig {
        features: 0x4,
        ..MockConfig::default()
    });
    let mut tagged = frame(OWN, PEER, 0x8100, 64);
    tagged[14..18].copy_from_slice(&[0x00, 0x00, 0x08, 0x00]);
    assert!(n.dev.receive_frame(&tagged));
    let (got, comps) = one_frame(&n);
    assert!(comps[0].ts);
    assert_eq!(comps[0].tci, 0);
    assert_eq!(got.len(), 60);
    assert_eq!(&got[..12], &tagged[..12]);
    assert_eq!(&got[12..], &tagged[16..]);
}

#[test]
fn update_rx_prod_bounds_the_buffers_by_rxprod() {
    let cfg = Vmxnet3Config {
        update_rx_prod: true,
        ..Vmxnet3Config::default()
    };
    let n = MockNic::new(cfg, MockConfig::default());
    n.select();
    assert_eq!(n.activate(), 0);
    // Buffers with the right generation but RXPROD not moved past them: not usable.
    n.fill_rx(0, 2, RX_BUF, 0);
    n.bar0_w(0x800, 0);
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    n.bar0_w(0x800, 1);
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    assert_eq!(n.dev.counters().rx_out_of_buf, 2);
}

#[test]
fn the_rx_completion_ring_wraps_with_its_generation() {
    let n = up_with(MockConfig {
        rx_sizes: [32, 0],
        rx_comp_size: 32,
        ..MockConfig::default()
    });
    let mut got = 0;
    for i in 0..100usize {
        let f = frame(OWN, PEER, 0x0800, 60 + i);
        assert!(n.dev.receive_frame(&f), "frame {i}: {:?}", n.dev.counters());
        let (data, comps) = one_frame(&n);
        assert_eq!(data, f);
        got += comps.len();
        n.fill_rx(0, 1, RX_BUF, 0);
    }
    assert_eq!(got, 100);
}

// ------------------------------------------------------------------------------ interrupts

#[test]
fn vectors_stay_masked_until_the_driver_unmasks_them() {
    let n = MockNic::new(Vmxnet3Config::default(), MockConfig::default());
    n.select();
    assert_eq!(n.activate(), 0);
    n.shared.write_u32(108, 0);
    n.fill_rx(0, 4, RX_BUF, 0);
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    n.run();
    assert!(n.irq.take().is_empty());
    assert_eq!(n.bar0_read(0), 1);
    n.bar0_w(0, 0);
    n.run();
    assert_eq!(n.irq.take(), vec![0], "the held cause fires on unmask");
}

trait Bar0Read {
    fn bar0_read(&self, off: u32) -> u32;
}
impl Bar0Read for MockNic {
    fn bar0_read(&self, off: u32) -> u32 {
        self.dev.bar0_read32(off)
    }
}

#[test]
fn auto_mask_masks_the_vector_that_fired() {
    let n = MockNic::default_up();
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    n.run();
    assert_eq!(n.irq.take(), vec![0], "one interrupt, then masked");
    assert_eq!(n.bar0_read(0), 1);
    n.bar0_w(0, 0);
    n.run();
    assert_eq!(n.irq.take(), vec![0], "the second frame's cause");
}

#[test]
fn without_auto_mask_every_cause_fires() {
    let n = up_with(MockConfig {
        auto_mask: 0,
        ..MockConfig::default()
    });
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    n.run();
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    n.run();
    assert_eq!(n.irq.take(), vec![0, 0]);
}

#[test]
fn disable_all_holds_interrupts_until_cleared() {
    let n = MockNic::default_up();
    n.shared.write_u32(108, 1);
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    n.run();
    assert!(n.irq.take().is_empty());
    n.shared.write_u32(108, 0);
    n.bar0_w(0, 0);
    n.run();
    assert_eq!(n.irq.take(), vec![0]);
}

// ------------------------------------------------------------------------------ events

#[test]
fn link_changes_post_link_in_ecr_and_raise_the_event_vector() {
    let n = MockNic::default_up();
    n.dev.link_changed(false);
    n.run();
    assert_eq!(n.ecr(), 4);
    assert_eq!(n.irq.take(), vec![2]);
    assert_eq!(n.cmd(GET_LINK), 10_000 << 16);
    // Acknowledged by writing the bits to ECR.
    n.bar1_w(0x40, 4);
    assert_eq!(n.ecr(), 0);
    n.bar0_w(16, 0);
    n.dev.link_changed(true);
    n.run();
    assert_eq!(n.ecr(), 4);
    assert_eq!(n.cmd(GET_LINK), (10_000 << 16) | 1);
    assert_eq!(n.bar1_r(0x40), 4, "ECR reads the pending events");
    assert_eq!(n.dev.counters().events, 2);
}

#[test]
fn ecr_write_clears_only_the_written_bits() {
    let n = MockNic::default_up();
    n.dev.link_changed(false);
    n.bar0_w(0x600, 999);
    assert_eq!(n.ecr(), 4 | 2);
    n.bar1_w(0x40, 2);
    assert_eq!(n.ecr(), 4);
}

// ------------------------------------------------------------------------------ commands

#[test]
fn quiesce_stops_traffic_and_reset_forgets_the_configuration() {
    let n = MockNic::default_up();
    assert_eq!(n.cmd(QUIESCE), 0);
    assert!(!n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)));
    assert_eq!(n.dev.counters().rx_inactive, 1);
    assert!(
        n.dev.with_core(|c| c.active().is_some()),
        "kept until RESET"
    );
    assert_eq!(n.cmd(RESET), 0);
    assert!(n.dev.with_core(|c| c.active().is_none()));
    assert_eq!(n.bar1_r(0x10), 0, "the DriverShared address is forgotten");
    assert!(
        n.dev.with_core(|c| c.vector_masked(0)),
        "vectors masked again"
    );
    assert_eq!(
        n.dev.with_core(|c| c.revision()),
        Some(1),
        "the revision stays"
    );
    assert_eq!(n.cmd(UPDATE_RX_MODE), 1, "no DriverShared to read");
}

#[test]
fn update_rx_mode_refuses_undefined_bits_and_keeps_the_old_mode() {
    let n = MockNic::default_up();
    n.shared.write_u32(120, 0x40);
    assert_eq!(n.cmd(UPDATE_RX_MODE), 1);
    assert_eq!(n.dev.counters().update_failures, 1);
    assert!(
        n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 60)),
        "UCAST still on"
    );
}

#[test]
fn update_mac_filters_refuses_a_ragged_table_and_keeps_the_old_one() {
    let n = MockNic::default_up();
    n.shared.write_u32(120, 0x07);
    assert_eq!(n.cmd(UPDATE_RX_MODE), 0);
    n.set_multicast(&[MCAST]);
    assert_eq!(n.cmd(UPDATE_MAC_FILTERS), 0);
    n.shared.write(124, &5u16.to_le_bytes());
    assert_eq!(n.cmd(UPDATE_MAC_FILTERS), 1);
    assert!(n.dev.receive_frame(&frame(MCAST, PEER, 0x0800, 60)));
}

// ------------------------------------------------------------------------------ statistics

#[test]
fn get_stats_writes_upt1_counters() {
    let n = up_with(MockConfig {
        rx_mode: 0x1F & !0x10,
        ..MockConfig::default()
    });
    n.send(&[&frame(PEER, OWN, 0x0800, 100)]);
    n.send(&[&frame([0xFF; 6], OWN, 0x0806, 60)]);
    n.send(&[&frame(MCAST, OWN, 0x0800, 70)]);
    n.run();
    assert_eq!(
        n.stats(false),
        [0, 0, 1, 100, 1, 70, 1, 60, 0, 0],
        "TSO, ucast, mcast, bcast, error, discard"
    );
    assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 80)));
    assert!(n.dev.receive_frame(&frame([0xFF; 6], PEER, 0x0806, 60)));
    assert_eq!(n.stats(true), [0, 0, 1, 80, 0, 0, 1, 60, 0, 0]);
    // The queue descriptors are read by offset: status lies before the stats.
    let _ = RXQ_DESC;
}

#[test]
fn rx_completions_carry_the_configured_type() {
    for (ty, cfg) in [(3, Vmxnet3Config::default()), (0, Vmxnet3Config::qemu())] {
        let n = MockNic::up(cfg, MockConfig::default());
        assert!(n.dev.receive_frame(&frame(OWN, PEER, 0x0800, 200)));
        n.run();
        let (_, comps) = one_frame(&n);
        assert_eq!(comps.len(), 1);
        assert_eq!(comps[0].kind, ty);
    }
}

#[test]
fn short_frames_are_padded_to_the_configured_minimum() {
    let short = frame(OWN, PEER, 0x0806, 42);
    let mut runt = frame(OWN, PEER, 0x0806, 14);
    runt.truncate(13);
    // Default: a frame arrives as it was sent; a runt is dropped.
    let n = MockNic::default_up();
    assert!(n.dev.receive_frame(&short));
    n.run();
    assert_eq!(one_frame(&n).0, short);
    assert!(!n.dev.receive_frame(&runt));
    assert_eq!(n.dev.counters().rx_errors, 1);
    // Padded to 60 bytes (QEMU): both arrive, zero-filled.
    let n = MockNic::up(
        Vmxnet3Config {
            rx_min_frame: 60,
            ..Vmxnet3Config::default()
        },
        MockConfig::default(),
    );
    for f in [&short, &runt] {
        assert!(n.dev.receive_frame(f));
        n.run();
        let (got, comps) = one_frame(&n);
        assert_eq!(comps[0].len, 60);
        assert_eq!(&got[..f.len()], &f[..]);
        assert!(got[f.len()..].iter().all(|&b| b == 0));
    }
    let s = n.stats(true);
    assert_eq!((s[2], s[3]), (2, 120), "counted at their padded length");
    // A frame of 60 bytes or more is untouched.
    let full = frame(OWN, PEER, 0x0800, 61);
    assert!(n.dev.receive_frame(&full));
    n.run();
    assert_eq!(one_frame(&n).0, full);
}
