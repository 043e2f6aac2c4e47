//! The vmxnet3 hardware layer (`src/vmxnet3`) against the vmxnet3 model, hosts on one
//! simulated fabric (issue 24 item 2's hardware half): bring-up and negotiation, frames both
//! ways from scatter-gather lists into preallocated buffers, link down/up, the Rx filter and
//! multicast, statistics, reset with traffic in flight, buffers lent to the consumer, device
//! faults and corrupt device-written state, threaded mode, and no leak on any path
//! (`VmxCluster::finish`).

mod common;

use common::Mode;
use common::vmx::{VmxCluster, VmxClusterConfig, eth};
use pvrdma_ndk::os::alloc::{inject_failure_at, injection_pending, stats};
use pvrdma_ndk::vmxnet3::device::FilterError;
use pvrdma_ndk::vmxnet3::{
    Config, Fault, LinkState, RxMode, SendError, Sge, TxStatus, Vmxnet3Error,
};

fn two(mode: Mode) -> VmxCluster {
    VmxCluster::new(VmxClusterConfig::new(mode, 2))
}

#[test]
fn bring_up_negotiates_revision_1_and_activates() {
    let c = two(Mode::Deterministic);
    for i in 0..2 {
        let nic = c.host(i).nic();
        assert_eq!(nic.mac(), c.mac(i));
        assert_eq!(nic.permanent_mac(), c.mac(i));
        assert_eq!(
            nic.link(),
            LinkState {
                up: true,
                speed_mbps: 10_000
            }
        );
        assert_eq!(nic.vectors(), 3);
        c.model(i).with_core(|m| {
            assert!(m.is_active());
            assert_eq!(m.revision(), Some(1));
            let a = m.active().unwrap();
            assert_eq!(
                (a.mtu, a.num_intrs, a.event_intr, a.auto_mask),
                (1500, 3, 2, true)
            );
            assert!(a.windows, "gosType Windows");
            assert_eq!((a.txq.len(), a.rxq.len()), (1, 1));
            assert_eq!((a.txq[0].intr, a.rxq[0].intr), (1, 0));
            assert_eq!(a.rxq[0].rings[1].size, 0, "ring 1 absent");
            assert_eq!(a.filter.mode, 0x05);
            for v in 0..3 {
                assert!(!m.vector_masked(v), "vector {v} unmasked");
            }
        });
    }
    c.finish();
}

#[test]
fn the_driver_picks_revision_1_from_what_the_device_offers_or_refuses() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 1);
    cfg.model.revisions = 0x7F;
    let c = VmxCluster::new(cfg);
    assert_eq!(c.model(0).with_core(|m| m.revision()), Some(1));
    c.finish();
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 1);
    cfg.model.revisions = 0x2;
    let Err((e, c)) = VmxCluster::try_new(cfg) else {
        panic!("a device without revision 1 was accepted");
    };
    assert_eq!(e, Vmxnet3Error::UnsupportedRevision(2));
    c.finish();
}

#[test]
fn probe_failures_leave_nothing_behind() {
    type Edit = fn(&mut VmxClusterConfig);
    let cases: [(Edit, Vmxnet3Error); 4] = [
        (|c| c.vectors = 0, Vmxnet3Error::NoInterrupts),
        (
            |c| c.model.conf_intr = 1,
            Vmxnet3Error::UnsupportedInterrupts(1),
        ),
        // The device accepts no Tx queue: ACTIVATE_DEV reads back 1 after DSAH was written.
        (
            |c| c.model.max_tx_queues = 0,
            Vmxnet3Error::ActivateFailed(1),
        ),
        (|c| c.driver.mtu = 2031, Vmxnet3Error::InvalidParameter),
    ];
    for (edit, want) in cases {
        let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 1);
        edit(&mut cfg);
        let Err((e, c)) = VmxCluster::try_new(cfg) else {
            panic!("expected {want:?}");
        };
        assert_eq!(e, want);
        assert!(!c.model(0).with_core(|m| m.is_active()));
        assert!(!c.host(0).platform.interrupt_connected());
        c.finish();
    }
}

#[test]
fn every_allocation_failure_during_bring_up_fails_cleanly() {
    let mut n = 1;
    loop {
        let _g = common::serial();
        drop(_g);
        inject_failure_at(n);
        let r = VmxCluster::try_new(VmxClusterConfig::new(Mode::Deterministic, 1));
        let pending = injection_pending();
        inject_failure_at(0);
        match r {
            Ok(c) => {
                assert!(pending, "allocation {n} failed yet the probe succeeded");
                c.finish();
                break;
            }
            Err((e, c)) => {
                assert_eq!(e, Vmxnet3Error::NoMemory, "allocation {n}");
                assert!(!c.model(0).with_core(|m| m.is_active()));
                c.finish();
            }
        }
        n += 1;
        assert!(n < 200);
    }
    assert!(n > 8, "bring-up makes several allocations ({n})");
    let _ = stats();
}

#[test]
fn two_hosts_exchange_frames_from_scatter_gather_lists() {
    let c = two(Mode::Deterministic);
    let (a, b) = (c.mac(0), c.mac(1));
    let sizes = [60usize, 64, 128, 1000, 1514];
    let mut want_b = Vec::new();
    let mut want_a = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        let f = eth(b, a, 0x0800, len, k as u8);
        c.send(0, 2048 * k, &f, &[14, len / 2], 100 + k as u64);
        want_b.push(f);
        let g = eth(a, b, 0x86DD, len, 50 + k as u8);
        c.send(1, 2048 * k, &g, &[], 200 + k as u64);
        want_a.push(g);
    }
    c.settle();
    let sa = c.host(0).take();
    let sb = c.host(1).take();
    assert_eq!(sb.frames, want_b);
    assert_eq!(sa.frames, want_a);
    assert_eq!(
        sa.sent,
        (100..105).map(|t| (t, TxStatus::Sent)).collect::<Vec<_>>()
    );
    assert_eq!(
        sb.sent,
        (200..205).map(|t| (t, TxStatus::Sent)).collect::<Vec<_>>()
    );
    let ca = c.host(0).nic().counters();
    assert_eq!((ca.tx_frames, ca.rx_frames), (5, 5));
    assert_eq!(ca.tx_bytes, sizes.iter().sum::<usize>() as u64);
    assert_eq!(c.model(1).counters().rx_frames, 5);
    c.finish();
}

#[test]
fn a_frame_spread_over_16_kib_pieces_and_many_fragments() {
    let c = two(Mode::Deterministic);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 1514, 9);
    // 16 fragments: the most a packet may use.
    let cuts: Vec<usize> = (1..16).map(|i| i * 90).collect();
    c.send(0, 0, &f, &cuts, 1);
    c.settle();
    assert_eq!(c.host(1).take().frames, vec![f.clone()]);
    // 17 are refused before anything is written.
    let h = c.host(0);
    let mut sg = h.tx.sg(0, &f, &cuts);
    let last = sg.pop().unwrap();
    sg.push(Sge {
        addr: last.addr,
        len: 10,
    });
    sg.push(Sge {
        addr: last.addr + 10,
        len: last.len - 10,
    });
    assert_eq!(sg.len(), 17);
    assert_eq!(
        h.nic().send(&sg, 2, false),
        Err(SendError::TooManyFragments)
    );
    // Lengths outside an Ethernet frame of the MTU.
    let s = |len| {
        [Sge {
            addr: last.addr,
            len,
        }]
    };
    assert_eq!(h.nic().send(&s(13), 3, false), Err(SendError::BadLength));
    assert_eq!(h.nic().send(&s(1519), 4, false), Err(SendError::BadLength));
    assert_eq!(h.nic().send(&[], 5, false), Err(SendError::BadLength));
    c.settle();
    assert_eq!(c.host(0).take().sent, vec![(1, TxStatus::Sent)]);
    c.finish();
}

#[test]
fn a_full_tx_ring_refuses_and_drains() {
    let c = two(Mode::Deterministic);
    let h = c.host(0);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 100, 3);
    let sg = h.tx.sg(0, &f, &[]);
    // 64 descriptors, one kept free; the device runs only when the test settles.
    for t in 0..63 {
        h.nic().send(&sg, t, true).unwrap();
    }
    assert_eq!(h.nic().send(&sg, 63, false), Err(SendError::Full));
    assert_eq!(h.nic().tx_outstanding(), 63);
    h.nic().flush_tx();
    c.settle();
    assert_eq!(h.nic().tx_outstanding(), 0);
    assert_eq!(c.host(1).take().frames.len(), 63);
    assert_eq!(h.nic().counters().tx_full, 1);
    h.nic().send(&sg, 64, false).unwrap();
    c.settle();
    assert_eq!(h.take().sent.len(), 64);
    c.finish();
}

#[test]
fn deferred_doorbells_follow_tx_threshold() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
    cfg.model.tx_threshold = 4;
    let c = VmxCluster::new(cfg);
    let h = c.host(0);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 60, 1);
    let sg = h.tx.sg(0, &f, &[]);
    let bells = || c.model(0).counters().tx_doorbells;
    for t in 0..3 {
        h.nic().send(&sg, t, true).unwrap();
    }
    assert_eq!(bells(), 0, "three deferred");
    h.nic().send(&sg, 3, true).unwrap();
    assert_eq!(bells(), 1, "the fourth reaches txThreshold");
    h.nic().send(&sg, 4, true).unwrap();
    h.nic().send(&sg, 5, false).unwrap();
    assert_eq!(bells(), 2, "the end of a batch rings");
    c.settle();
    assert_eq!(c.host(1).take().frames.len(), 6);
    c.finish();
}

#[test]
fn link_down_and_up_reach_the_client_and_stop_frames() {
    let c = two(Mode::Deterministic);
    c.world.set_vnic_link(1, false);
    c.settle();
    let down = LinkState {
        up: false,
        speed_mbps: 10_000,
    };
    assert_eq!(c.host(1).take().links, vec![down]);
    assert_eq!(c.host(1).nic().link(), down);
    // A frame sent meanwhile is completed but never arrives.
    c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 60, 0), &[], 9);
    c.settle();
    assert_eq!(c.host(0).take().sent, vec![(9, TxStatus::Sent)]);
    assert!(c.host(1).take().frames.is_empty());
    c.world.set_vnic_link(1, true);
    c.settle();
    assert!(c.host(1).take().links[0].up);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 60, 1);
    c.send(0, 0, &f, &[], 10);
    c.settle();
    assert_eq!(c.host(1).take().frames, vec![f]);
    assert_eq!(c.host(1).nic().counters().events, 2);
    c.finish();
}

#[test]
fn the_rx_filter_and_the_multicast_table() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 3);
    cfg.driver.rx_mode = RxMode::UNICAST;
    let c = VmxCluster::new(cfg);
    let (a, b) = (c.mac(0), c.mac(1));
    let group = [0x33, 0x33, 0xFF, 0x00, 0x00, 0x02];
    let other = [0x01, 0x00, 0x5E, 0x00, 0x00, 0x09];
    let send_all = |seed: u8| {
        let fs = [
            eth([0xFF; 6], a, 0x0806, 60, seed),
            eth(group, a, 0x86DD, 86, seed),
            eth(other, a, 0x0800, 64, seed),
            eth(c.mac(2), a, 0x0800, 60, seed),
        ];
        for (k, f) in fs.iter().enumerate() {
            c.send(0, 2048 * k, f, &[], u64::from(seed) * 10 + k as u64);
        }
        c.settle();
        fs
    };
    let fs = send_all(1);
    assert!(
        c.host(1).take().frames.is_empty(),
        "unicast to another host only"
    );
    let nic = c.host(1).nic();
    nic.set_rx_mode(RxMode::UNICAST | RxMode::BROADCAST)
        .unwrap();
    let fs2 = send_all(2);
    assert_eq!(c.host(1).take().frames, vec![fs2[0].clone()]);
    nic.set_multicast(&[group]).unwrap();
    nic.set_rx_mode(RxMode::UNICAST | RxMode::BROADCAST | RxMode::MULTICAST)
        .unwrap();
    let fs3 = send_all(3);
    assert_eq!(
        c.host(1).take().frames,
        vec![fs3[0].clone(), fs3[1].clone()]
    );
    nic.set_rx_mode(RxMode::UNICAST | RxMode::ALL_MULTICAST)
        .unwrap();
    let fs4 = send_all(4);
    assert_eq!(
        c.host(1).take().frames,
        vec![fs4[1].clone(), fs4[2].clone()]
    );
    nic.set_rx_mode(RxMode::PROMISCUOUS).unwrap();
    let fs5 = send_all(5);
    // Everything that reaches the port; the fabric, a switch, sends unicast for host 2 to
    // host 2 only.
    assert_eq!(c.host(1).take().frames, fs5[..3].to_vec());
    assert_eq!(nic.rx_mode(), RxMode::PROMISCUOUS);
    // The table holds 32 addresses.
    let many = [[0x01, 0, 0x5E, 0, 0, 1]; 33];
    assert_eq!(nic.set_multicast(&many), Err(FilterError::TooMany));
    assert_eq!(nic.set_multicast(&many[..32]), Ok(()));
    // Refused per round: UCAST 3, +BCAST 2, +MCAST table 1, ALL_MULTI without BCAST 1.
    assert_eq!(c.model(1).counters().rx_filtered, 3 + 2 + 1 + 1);
    let _ = (fs, b);
    c.finish();
}

#[test]
fn statistics_come_from_the_device_and_the_driver() {
    let c = two(Mode::Deterministic);
    c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 100, 0), &[], 1);
    c.send(0, 2048, &eth([0xFF; 6], c.mac(0), 0x0806, 60, 0), &[], 2);
    c.settle();
    let s = c.host(0).nic().stats();
    assert_eq!(s.tx, [0, 0, 1, 100, 0, 0, 1, 60, 0, 0]);
    let r = c.host(1).nic().stats();
    assert_eq!(r.rx, [0, 0, 1, 100, 0, 0, 1, 60, 0, 0]);
    let d = c.host(1).nic().counters();
    assert_eq!((d.rx_frames, d.rx_bytes), (2, 160));
    assert!(d.interrupts[0] >= 1, "Rx vector");
    c.finish();
}

#[test]
fn reset_with_traffic_in_flight_aborts_queued_frames_and_recovers() {
    let c = two(Mode::Deterministic);
    let h = c.host(0);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 200, 7);
    let sg = h.tx.sg(0, &f, &[]);
    // Queued, doorbell rung, the device has not run yet.
    for t in 0..10 {
        h.nic().send(&sg, t, t < 9).unwrap();
    }
    // Host 1 holds some received buffers across its reset.
    c.host(1)
        .client
        .keep
        .store(true, std::sync::atomic::Ordering::SeqCst);
    c.send(0, 4096, &eth(c.mac(1), c.mac(0), 0x0800, 90, 1), &[], 99);
    let link = h.nic().reset().unwrap();
    assert!(link.up);
    let seen = h.take();
    assert_eq!(
        seen.sent,
        (0..10)
            .chain([99])
            .map(|t| (t, TxStatus::Aborted))
            .collect::<Vec<_>>()
    );
    assert_eq!(h.nic().counters().tx_aborted, 11);
    assert_eq!(h.nic().tx_outstanding(), 0);
    c.settle();
    assert!(
        c.host(1).take().frames.is_empty(),
        "nothing left before the reset"
    );
    // Traffic resumes; host 1 keeps what it receives, resets, and returns the buffers after.
    c.send(0, 0, &f, &[], 20);
    c.settle();
    let kept = c.host(1).take();
    assert_eq!(kept.frames, vec![f.clone()]);
    assert_eq!(c.host(1).nic().rx_loaned(), 1);
    c.host(1).nic().reset().unwrap();
    assert_eq!(
        c.host(1).nic().rx_loaned(),
        1,
        "a lent buffer survives the reset"
    );
    let ids: Vec<u32> = kept.kept.iter().map(|k| k.0).collect();
    c.host(1).nic().return_rx(&ids);
    assert_eq!(c.host(1).nic().rx_loaned(), 0);
    c.host(1)
        .client
        .keep
        .store(false, std::sync::atomic::Ordering::SeqCst);
    for t in 0..5 {
        c.send(0, 0, &f, &[], 30 + t);
        c.send(1, 0, &eth(c.mac(0), c.mac(1), 0x0800, 70, 2), &[], 40 + t);
    }
    c.settle();
    assert_eq!(c.host(1).take().frames.len(), 5);
    assert_eq!(c.host(0).take().frames.len(), 5);
    assert_eq!(c.model(0).counters().activations, 2);
    c.finish();
}

#[test]
fn lent_buffers_run_the_ring_dry_until_returned() {
    let c = two(Mode::Deterministic);
    c.host(1)
        .client
        .keep
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // 128 buffers, 63 posted at a time: 128 frames can be held, the 129th finds none.
    let mut sent = 0;
    for t in 0..140u64 {
        c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 60, t as u8), &[], t);
        c.settle();
        sent += 1;
    }
    let seen = c.host(1).take();
    assert_eq!(seen.kept.len(), 128);
    assert_eq!(c.host(1).nic().rx_loaned(), 128);
    assert_eq!(c.model(1).counters().rx_out_of_buf, sent - 128);
    // Returning a buffer twice, or one never lent, is ignored and counted.
    let ids: Vec<u32> = seen.kept.iter().map(|k| k.0).collect();
    c.host(1).nic().return_rx(&ids);
    c.host(1).nic().return_rx(&ids[..2]);
    c.host(1).nic().return_rx(&[999_999]);
    assert_eq!(c.host(1).nic().counters().bad_returns, 3);
    assert_eq!(c.host(1).nic().rx_loaned(), 0);
    c.host(1)
        .client
        .keep
        .store(false, std::sync::atomic::Ordering::SeqCst);
    c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 60, 1), &[], 500);
    c.settle();
    assert_eq!(c.host(1).take().frames.len(), 1);
    c.finish();
}

#[test]
fn a_queue_the_device_stops_is_reported_and_reset_recovers() {
    let c = two(Mode::Deterministic);
    // The device stops the Tx queue (TXPROD out of range, written behind the driver's back).
    c.model(0).bar0_write32(0x600, 10_000);
    c.settle();
    let seen = c.host(0).take();
    assert_eq!(seen.faults, vec![Fault::TxQueueStopped(0x8000_0007)]);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 60, 0);
    let sg = c.host(0).tx.sg(0, &f, &[]);
    assert_eq!(c.host(0).nic().send(&sg, 1, false), Err(SendError::Stopped));
    c.host(0).nic().reset().unwrap();
    c.host(0).nic().send(&sg, 2, false).unwrap();
    c.settle();
    assert_eq!(c.host(1).take().frames, vec![f]);
    c.finish();
}

/// Writes a completion into host `h`'s ring memory behind the device's back.
fn forge(c: &VmxCluster, h: usize, ring: u64, d: [u32; 4]) {
    let space = c.world.vnic(h).dma();
    let mut b = [0u8; 16];
    for (i, w) in d.iter().enumerate() {
        b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    space.write(ring, &b).unwrap();
}

#[test]
fn a_corrupt_tx_completion_stops_the_queue_without_harm() {
    let c = two(Mode::Deterministic);
    let comp = c
        .model(0)
        .with_core(|m| m.active().unwrap().txq[0].comp.base);
    // A completion for a packet never sent (txdIdx 7, generation 1), then an interrupt.
    forge(&c, 0, comp, [7, 0, 0, 1 << 31]);
    c.host(0).platform.raise_interrupt(1);
    c.settle();
    assert_eq!(c.host(0).take().faults, vec![Fault::TxCorrupt]);
    let f = eth(c.mac(1), c.mac(0), 0x0800, 60, 0);
    let sg = c.host(0).tx.sg(0, &f, &[]);
    assert_eq!(c.host(0).nic().send(&sg, 1, false), Err(SendError::Stopped));
    c.host(0).nic().reset().unwrap();
    c.host(0).nic().send(&sg, 2, false).unwrap();
    c.settle();
    assert_eq!(c.host(0).take().sent, vec![(2, TxStatus::Sent)]);
    c.finish();
}

#[test]
fn corrupt_rx_completions_are_refused_field_by_field() {
    // Each forged completion fails one check: ring 1 (absent), an index never posted, a
    // length beyond the buffer, a type that is not RXCOMP, a piece without a start.
    let cases: [[u32; 4]; 5] = [
        [
            (1 << 16) | (1 << 15) | (1 << 14),
            0,
            60,
            (3 << 24) | (1 << 31),
        ],
        [63 | (1 << 15) | (1 << 14), 0, 60, (3 << 24) | (1 << 31)],
        [(1 << 15) | (1 << 14), 0, 2049, (3 << 24) | (1 << 31)],
        [(1 << 15) | (1 << 14), 0, 60, (4 << 24) | (1 << 31)],
        [1 << 14, 0, 60, (3 << 24) | (1 << 31)],
    ];
    for d in cases {
        let c = two(Mode::Deterministic);
        let comp = c
            .model(1)
            .with_core(|m| m.active().unwrap().rxq[0].comp.base);
        forge(&c, 1, comp, d);
        c.host(1).platform.raise_interrupt(0);
        c.settle();
        let seen = c.host(1).take();
        assert_eq!(seen.faults, vec![Fault::RxCorrupt], "{d:x?}");
        assert!(seen.frames.is_empty());
        c.host(1).nic().reset().unwrap();
        let f = eth(c.mac(1), c.mac(0), 0x0800, 60, 0);
        c.send(0, 0, &f, &[], 1);
        c.settle();
        assert_eq!(c.host(1).take().frames, vec![f]);
        c.finish();
    }
}

#[test]
fn device_flagged_and_runt_frames_are_dropped_and_their_buffers_reused() {
    let c = two(Mode::Deterministic);
    let comp = c
        .model(1)
        .with_core(|m| m.active().unwrap().rxq[0].comp.base);
    // Descriptor 0 completed with the error flag, descriptor 1 as a 10-byte runt.
    forge(
        &c,
        1,
        comp,
        [
            (1 << 15) | (1 << 14),
            0,
            60 | (1 << 14),
            (3 << 24) | (1 << 31),
        ],
    );
    forge(
        &c,
        1,
        comp + 16,
        [1 | (1 << 15) | (1 << 14), 0, 10, (3 << 24) | (1 << 31)],
    );
    c.host(1).platform.raise_interrupt(0);
    c.settle();
    let d = c.host(1).nic().counters();
    assert_eq!(d.rx_dropped, [1, 1, 0]);
    assert!(c.host(1).take().faults.is_empty());
    c.finish();
}

#[test]
fn every_vector_count_carries_traffic_and_events() {
    for vectors in [1, 2, 3, 8] {
        let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
        cfg.vectors = vectors;
        let c = VmxCluster::new(cfg);
        assert_eq!(c.host(0).nic().vectors(), vectors.min(3));
        let f = eth(c.mac(1), c.mac(0), 0x0800, 300, 4);
        c.send(0, 0, &f, &[], 1);
        c.world.set_vnic_link(0, false);
        c.world.set_vnic_link(0, true);
        c.settle();
        assert_eq!(c.host(1).take().frames, vec![f], "{vectors} vectors");
        let s0 = c.host(0).take();
        assert_eq!(s0.sent, vec![(1, TxStatus::Sent)]);
        assert!(!s0.links.is_empty(), "{vectors} vectors: link events");
        c.finish();
    }
}

#[test]
fn without_auto_mask_the_isr_masks_its_vector() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
    cfg.model.conf_intr = 3 | (1 << 2);
    let c = VmxCluster::new(cfg);
    assert!(!c.model(1).with_core(|m| m.active().unwrap().auto_mask));
    for t in 0..20 {
        c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 60, t as u8), &[], t);
        c.settle();
    }
    assert_eq!(c.host(1).take().frames.len(), 20);
    assert!(
        c.model(1).with_core(|m| !m.vector_masked(0)),
        "unmasked after the DPC"
    );
    c.finish();
}

#[test]
fn update_rx_prod_makes_the_driver_write_rxprod() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
    cfg.model.update_rx_prod = true;
    let c = VmxCluster::new(cfg);
    // Far more frames than the ring holds: only RXPROD writes after each refill keep it fed.
    for t in 0..200u64 {
        c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 60, t as u8), &[], t);
        c.settle();
    }
    assert_eq!(c.host(1).take().frames.len(), 200);
    assert_eq!(c.model(1).counters().rx_out_of_buf, 0);
    c.finish();
}

#[test]
fn surprise_removal_stops_register_access() {
    let mut c = two(Mode::Deterministic);
    let before = c.model(0).counters().commands;
    c.host(0).nic().mark_removed();
    let f = eth(c.mac(1), c.mac(0), 0x0800, 60, 0);
    let sg = c.host(0).tx.sg(0, &f, &[]);
    assert_eq!(c.host(0).nic().send(&sg, 1, false), Err(SendError::Stopped));
    assert_eq!(c.host(0).nic().stats().tx, [0; 10]);
    assert_eq!(c.host(0).nic().reset(), Err(Vmxnet3Error::DeviceGone));
    assert_eq!(
        c.model(0).counters().commands,
        before,
        "no command reached the device"
    );
    drop(c.hosts[0].nic.take());
    assert_eq!(
        c.model(0).counters().commands,
        before,
        "not even at the teardown"
    );
    // The function is gone: what the hot-unplug would do to the model.
    c.model(0).bar1_write32(0x20, 0xCAFE_0002);
    c.finish();
}

#[test]
fn threaded_hosts_exchange_thousands_of_frames() {
    let c = two(Mode::Threaded);
    let n = 2000u64;
    let fa = eth(c.mac(1), c.mac(0), 0x0800, 600, 1);
    let fb = eth(c.mac(0), c.mac(1), 0x0800, 900, 2);
    let sa = c.host(0).tx.sg(0, &fa, &[20]);
    let sb = c.host(1).tx.sg(0, &fb, &[]);
    let (mut ta, mut tb) = (0, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ta < n || tb < n {
        assert!(std::time::Instant::now() < deadline, "stuck at {ta}/{tb}");
        if ta < n && c.host(0).nic().send(&sa, ta, false).is_ok() {
            ta += 1;
        }
        if tb < n && c.host(1).nic().send(&sb, tb, false).is_ok() {
            tb += 1;
        }
        std::thread::yield_now();
    }
    // Wait on the facts: every send ended, and every frame reached a buffer or was dropped by
    // the receiving NIC for want of one (the fabric itself is lossless).
    let settled = |i: usize, peer: usize| {
        let s = c.host(i).client.seen.lock().unwrap();
        let arrived = s.frames.len() as u64 + c.model(i).counters().rx_out_of_buf;
        let _ = peer;
        (arrived, s.sent.len() as u64)
    };
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck: {:?} {:?}",
            settled(0, 1),
            settled(1, 0)
        );
        if settled(0, 1) == (n, n) && settled(1, 0) == (n, n) {
            break;
        }
        std::thread::yield_now();
    }
    c.settle();
    let s0 = c.host(0).take();
    let s1 = c.host(1).take();
    assert!(s1.frames.iter().all(|f| *f == fa));
    assert!(s0.frames.iter().all(|f| *f == fb));
    assert!(
        s0.sent
            .iter()
            .enumerate()
            .all(|(i, s)| *s == (i as u64, TxStatus::Sent))
    );
    assert!(
        s1.sent
            .iter()
            .enumerate()
            .all(|(i, s)| *s == (i as u64, TxStatus::Sent))
    );
    c.finish();
}

#[test]
fn a_paired_vnic_carries_ethernet_on_function_0() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
    cfg.paired = true;
    let c = VmxCluster::new(cfg);
    assert!(c.world.vnic(0).slot().pvrdma().is_some());
    let f = eth(c.mac(1), c.mac(0), 0x0800, 500, 3);
    c.send(0, 0, &f, &[], 1);
    c.settle();
    assert_eq!(c.host(1).take().frames, vec![f]);
    c.finish();
}

#[test]
fn config_values_are_checked_before_anything_is_touched() {
    for bad in [
        Config {
            tx_ring: 48,
            ..Config::default()
        },
        Config {
            rx_ring: 8192,
            ..Config::default()
        },
        Config {
            rx_buffers: 100,
            ..Config::default()
        },
        Config {
            mtu: 59,
            ..Config::default()
        },
    ] {
        let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 1);
        cfg.driver = bad;
        let Err((e, c)) = VmxCluster::try_new(cfg) else {
            panic!("{bad:?} accepted");
        };
        assert_eq!(e, Vmxnet3Error::InvalidParameter);
        assert_eq!(c.model(0).counters().commands, 0);
        c.finish();
    }
}

#[test]
fn quiesce_stops_the_data_path_and_restart_brings_it_back() {
    let c = two(Mode::Deterministic);
    let h = c.host(1);
    let f = eth(c.mac(0), c.mac(1), 0x0800, 80, 5);
    let sg = h.tx.sg(0, &f, &[]);
    h.nic().send(&sg, 1, false).unwrap();
    h.nic().quiesce();
    assert_eq!(h.take().sent, vec![(1, TxStatus::Aborted)]);
    assert_eq!(h.nic().send(&sg, 2, false), Err(SendError::Stopped));
    assert!(!c.model(1).with_core(|m| m.is_active()));
    // Frames to a quiesced function go nowhere.
    c.send(0, 0, &eth(c.mac(1), c.mac(0), 0x0800, 60, 1), &[], 3);
    c.settle();
    assert!(h.take().frames.is_empty());
    assert_eq!(c.model(1).counters().rx_inactive, 1);
    assert!(h.nic().restart().unwrap().up);
    h.nic().send(&sg, 4, false).unwrap();
    let g = eth(c.mac(1), c.mac(0), 0x0800, 60, 2);
    c.send(0, 0, &g, &[], 5);
    c.settle();
    assert_eq!(h.take().frames, vec![g]);
    assert_eq!(c.host(0).take().frames, vec![f]);
    c.finish();
}

#[test]
fn a_configured_mac_replaces_the_permanent_one() {
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
    cfg.mac_override = Some((1, [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]));
    let c = VmxCluster::new(cfg);
    let new = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    assert_eq!(c.host(1).nic().mac(), new);
    assert_eq!(c.host(1).nic().permanent_mac(), c.mac(1));
    assert_eq!(c.model(1).with_core(|m| m.mac()), new);
    // The fabric follows the vNIC's new MAC (as a learning switch would); the old one no
    // longer reaches the port.
    let f = eth(new, c.mac(0), 0x0800, 60, 1);
    c.send(0, 0, &f, &[], 1);
    c.send(0, 2048, &eth(c.mac(1), c.mac(0), 0x0800, 60, 2), &[], 2);
    c.settle();
    assert_eq!(c.host(1).take().frames, vec![f]);
    c.finish();
}

/// The layer on the model answering as QEMU's vmxnet3 does (`Vmxnet3Config::qemu`, found by
/// tests/vmx_qemu.rs): GET_CONF_INTR 0, 1000 Mbps, Rx completions of type 0, the permanent
/// MAC restored by ACTIVATE_DEV, short frames padded. A configured MAC survives activation
/// and reset; frames flow both ways.
#[test]
fn the_layer_runs_on_the_model_answering_as_qemu() {
    let custom = [0x02, 0x50, 0x56, 0x00, 0x00, 0x42];
    let mut cfg = VmxClusterConfig::new(Mode::Deterministic, 2);
    cfg.model = pvrdma_sim::vmxnet3::Vmxnet3Config::qemu();
    cfg.mac_override = Some((1, custom));
    let c = VmxCluster::new(cfg);
    for i in 0..2 {
        assert_eq!(
            c.host(i).nic().link(),
            LinkState {
                up: true,
                speed_mbps: 1000
            }
        );
    }
    assert_eq!(c.host(1).nic().mac(), custom);
    assert_eq!(c.host(1).nic().permanent_mac(), c.mac(1));
    assert_eq!(
        c.model(1).with_core(|m| m.mac()),
        custom,
        "MACL/MACH written again after ACTIVATE_DEV"
    );
    let short = eth(custom, c.mac(0), 0x0806, 42, 1);
    let long = eth(c.mac(0), custom, 0x0800, 1514, 2);
    for round in 0..2 {
        c.send(0, 0, &short, &[], 10 * round);
        c.send(1, 0, &long, &[100, 700], 10 * round + 1);
        c.settle();
        let mut padded = short.clone();
        padded.resize(60, 0);
        let (s0, s1) = (c.host(0).take(), c.host(1).take());
        assert_eq!(s1.frames, [padded], "round {round}");
        assert_eq!(s0.frames, std::slice::from_ref(&long), "round {round}");
        assert_eq!((s0.faults, s1.faults), (vec![], vec![]));
        // The reset's ACTIVATE_DEV restores the permanent MAC again; the driver rewrites it.
        c.host(1).nic().reset().unwrap();
        c.settle();
        assert_eq!(c.model(1).with_core(|m| m.mac()), custom);
    }
    c.finish();
}
