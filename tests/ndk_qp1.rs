//! The per-adapter QP1 (`ndk::connect::qp1`) between two hosts of the model's fabric: MADs exchanged
//! both ways byte for byte with the source path from the GRH and the CQE, none lost on a
//! clean fabric, counts consistent with the fabric's under loss and duplication, a full SQ
//! refused, and a close that flushes and leaves nothing behind.

mod common;

use std::sync::{Arc, Mutex};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig};
use pvrdma_host::held_spin_locks;
use pvrdma_ndk::ndk::connect::qp1::{
    MAD_LEN, MadPath, MadSink, MadSource, Qp1, Qp1Config, Qp1Error,
};
use pvrdma_sim::fabric::FaultConfig;

/// Hosts without a connection engine: each test opens QP1 itself (one per device).
fn qp1_cluster(mode: Mode, hosts: u8) -> Cluster {
    Cluster::with(ClusterConfig::without_cm(mode, hosts))
}

#[derive(Default)]
struct Recorder(Mutex<Vec<(MadSource, Vec<u8>)>>);

impl MadSink for Recorder {
    fn mad(&self, from: &MadSource, mad: &[u8; MAD_LEN]) {
        assert_eq!(held_spin_locks(), 0, "no driver lock held in the sink");
        self.0.lock().unwrap().push((*from, mad.to_vec()));
    }
}

impl Recorder {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn take(&self) -> Vec<(MadSource, Vec<u8>)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// MAD `n` from host `h`: distinct bytes for every MAD of either host.
fn mad(h: usize, n: u32) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    for (i, b) in m.iter_mut().enumerate() {
        *b = (i as u32)
            .wrapping_mul(31)
            .wrapping_add(n.wrapping_mul(7))
            .wrapping_add(h as u32 * 101) as u8;
    }
    m[0..4].copy_from_slice(&n.to_be_bytes());
    m[4] = h as u8;
    m
}

struct Side {
    qp1: Qp1,
    sink: Arc<Recorder>,
}

fn open(c: &Cluster, h: usize, cfg: Qp1Config) -> Side {
    let sink = Arc::new(Recorder::default());
    let hw = c.host(h).hw.clone();
    let qp1 = Qp1::open(hw, cfg, sink.clone()).expect("QP1 opens");
    Side { qp1, sink }
}

fn path_to(c: &Cluster, h: usize) -> MadPath {
    MadPath {
        dgid: c.host(h).gid,
        dmac: c.host(h).mac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
    }
}

/// Sends `count` MADs from each side to the other in windows the receivers' queues hold,
/// settling between windows.
fn exchange(c: &Cluster, sides: &[Side; 2], count: u32, window: u32) {
    let mut n = 0;
    while n < count {
        let end = (n + window).min(count);
        for i in n..end {
            for (h, s) in sides.iter().enumerate() {
                assert_eq!(s.qp1.send(&path_to(c, 1 - h), &mad(h, i)), Ok(()));
            }
        }
        c.wait_for("the window's sends to complete", || {
            sides.iter().all(|s| s.qp1.sends_in_flight() == 0)
        });
        c.settle();
        n = end;
    }
}

#[test]
fn a_thousand_mads_each_way_arrive_intact_and_in_order() {
    let c = qp1_cluster(Mode::Deterministic, 2);
    let sides = [
        open(&c, 0, Qp1Config::default()),
        open(&c, 1, Qp1Config::default()),
    ];
    let gsi = |h: usize| {
        let qp = sides[h].qp1.qp_handle();
        c.host(h)
            .model
            .with_core(|core| core.qp_info(qp))
            .expect("the GSI QP")
    };
    for h in 0..2 {
        let i = gsi(h);
        assert_eq!(i.ty, pvrdma_sim::qp::QpType::Gsi);
        assert_eq!(i.qpn, 1);
        assert_eq!(i.state, pvrdma_sim::qp::QpState::Rts);
        assert_eq!(i.attr.qkey, 0x8001_0000);
    }

    exchange(&c, &sides, 1000, 32);
    for (h, s) in sides.iter().enumerate() {
        let peer = 1 - h;
        let got = s.sink.take();
        assert_eq!(got.len(), 1000, "host {h} received every MAD");
        for (n, (from, bytes)) in got.iter().enumerate() {
            assert_eq!(
                bytes.as_slice(),
                &mad(peer, n as u32)[..],
                "MAD {n} at host {h}"
            );
            assert_eq!(from.grh.sgid, c.host(peer).gid);
            assert_eq!(from.grh.dgid, c.host(h).gid);
            assert!(from.grh.ipv4);
            assert_eq!(from.smac, c.host(peer).mac);
            assert_eq!(from.src_qp, 1);
        }
        let st = s.qp1.stats();
        assert_eq!(
            (st.sent, st.send_completions, st.send_errors, st.received),
            (1000, 1000, 0, 1000)
        );
        assert_eq!(
            (st.bad_length, st.bad_grh, st.recv_errors, st.bad_cqes),
            (0, 0, 0, 0)
        );
    }
    for s in sides {
        assert_eq!(s.qp1.close(), Ok(()));
    }
    c.finish();
}

/// The same exchange with the model, the fabric and the DPCs on their own threads: the
/// CQ-notification DPC polls QP1 while the test thread sends.
#[test]
fn threaded_exchange_loses_nothing() {
    let c = qp1_cluster(Mode::Threaded, 2);
    let sides = [
        open(&c, 0, Qp1Config::default()),
        open(&c, 1, Qp1Config::default()),
    ];
    exchange(&c, &sides, 1000, 32);
    for (h, s) in sides.iter().enumerate() {
        let got = s.sink.take();
        assert_eq!(got.len(), 1000, "host {h}");
        for (n, (_, bytes)) in got.iter().enumerate() {
            assert_eq!(bytes.as_slice(), &mad(1 - h, n as u32)[..]);
        }
        let st = s.qp1.stats();
        assert_eq!((st.received, st.bad_cqes, st.bad_length), (1000, 0, 0));
    }
    for s in sides {
        assert_eq!(s.qp1.close(), Ok(()));
    }
    c.finish();
}

#[test]
fn ipv6_hosts_exchange_mads_with_ipv6_grhs() {
    let mut cfg = ClusterConfig::without_cm(Mode::Deterministic, 2);
    cfg.ipv6 = true;
    let c = Cluster::with(cfg);
    let sides = [
        open(&c, 0, Qp1Config::default()),
        open(&c, 1, Qp1Config::default()),
    ];
    exchange(&c, &sides, 10, 10);
    for (h, s) in sides.iter().enumerate() {
        let got = s.sink.take();
        assert_eq!(got.len(), 10);
        for (n, (from, bytes)) in got.iter().enumerate() {
            assert_eq!(bytes.as_slice(), &mad(1 - h, n as u32)[..]);
            assert!(!from.grh.ipv4);
            assert_eq!(from.grh.sgid, c.host(1 - h).gid);
            assert_eq!(from.grh.hop_limit, 64);
        }
    }
    for s in sides {
        assert_eq!(s.qp1.close(), Ok(()));
    }
    c.finish();
}

#[test]
fn loss_and_duplication_on_the_fabric_keep_the_counts_consistent() {
    let c = qp1_cluster(Mode::Deterministic, 2);
    let sides = [
        open(&c, 0, Qp1Config::default()),
        open(&c, 1, Qp1Config::default()),
    ];
    let faults = FaultConfig {
        drop: 0.2,
        duplicate: 0.1,
        ..FaultConfig::none()
    };
    c.world.set_pair_faults(0, 1, faults);
    c.world.set_pair_faults(1, 0, faults);
    // Windows of 16: with duplicates a receiver may get up to twice as many.
    exchange(&c, &sides, 400, 16);
    c.world.clear_faults();
    for (h, s) in sides.iter().enumerate() {
        let (from, to) = (c.world.node(1 - h).port(), c.world.node(h).port());
        let pair = c.world.fabric().pair_counters(from, to);
        let got = s.sink.take();
        assert_eq!(pair.sent, 400, "every MAD of host {} left", 1 - h);
        assert_eq!(
            pair.delivered + pair.dropped.fault,
            pair.sent + pair.duplicated
        );
        assert!(pair.dropped.fault > 0 && pair.duplicated > 0, "{pair:?}");
        assert_eq!(
            got.len() as u64,
            pair.delivered,
            "each delivered frame is one MAD"
        );
        // What arrives is some of the MADs sent, in order, each at most twice in a row.
        let mut last: Option<u32> = None;
        for (_, bytes) in &got {
            let n = u32::from_be_bytes(bytes[0..4].try_into().unwrap());
            assert_eq!(bytes.as_slice(), &mad(1 - h, n)[..]);
            assert!(last.is_none_or(|l| n >= l), "in order");
            last = Some(n);
        }
        let st = s.qp1.stats();
        assert_eq!(st.received, pair.delivered);
        assert_eq!((st.sent, st.send_completions), (400, 400));
        assert_eq!((st.bad_length, st.bad_grh, st.bad_cqes), (0, 0, 0));
    }
    for s in sides {
        assert_eq!(s.qp1.close(), Ok(()));
    }
    c.finish();
}

#[test]
fn a_full_send_queue_refuses_and_a_closed_qp1_sends_nothing() {
    let c = qp1_cluster(Mode::Deterministic, 2);
    let cfg = Qp1Config {
        recv_depth: 8,
        send_depth: 4,
    };
    let a = open(&c, 0, cfg);
    let b = open(&c, 1, Qp1Config::default());
    let p = path_to(&c, 1);
    for i in 0..4 {
        assert_eq!(a.qp1.send(&p, &mad(0, i)), Ok(()));
    }
    // The model has not run: all four are in flight.
    assert_eq!(a.qp1.send(&p, &mad(0, 4)), Err(Qp1Error::QueueFull));
    assert_eq!(a.qp1.stats().send_full, 1);
    c.wait_for("the sends to complete", || a.qp1.sends_in_flight() == 0);
    c.settle();
    assert_eq!(b.sink.len(), 4);
    assert_eq!(a.qp1.send(&p, &mad(0, 5)), Ok(()));
    c.wait_for("the send to complete", || a.qp1.sends_in_flight() == 0);
    c.settle();
    assert_eq!(b.sink.len(), 5);
    assert_eq!(
        Qp1::open(
            c.host(0).hw.clone(),
            Qp1Config {
                recv_depth: 6,
                send_depth: 4
            },
            Arc::new(Recorder::default())
        )
        .err(),
        Some(pvrdma_ndk::pvrdma::PvrdmaError::InvalidParameter),
        "depths are powers of two"
    );
    // Closing flushes the posted receives (counted as receive errors, never delivered).
    let a_stats = {
        let q = a.qp1;
        let before = q.stats();
        assert_eq!(before.recv_errors, 0);
        q.close().expect("close");
        before
    };
    assert_eq!(a_stats.received, 0);
    assert_eq!(b.qp1.close(), Ok(()));
    c.finish();
}

/// A raw GSI sender on host 0 built from the driver's typed commands: datagrams of any length
/// to host 1's QP1, which only ever accepts 256-byte MADs.
#[test]
fn short_and_oversized_datagrams_are_dropped_and_counted() {
    use common::objects::{self, QpSpec as RawSpec};
    use pvrdma_ndk::os::DmaBuffer;
    use pvrdma_ndk::pvrdma::cmd::{CreateMr, DestroyMr, QpType, mr_flags};
    use pvrdma_ndk::pvrdma::ud::UdAddress;
    use pvrdma_ndk::pvrdma::wqe::{AccessFlags, SendFlags, Sge, SqHeader, WrOpcode};

    let c = qp1_cluster(Mode::Deterministic, 2);
    let b = open(&c, 1, Qp1Config::default());
    let dev = &c.host(0).dev;
    let pd = objects::create_pd(dev);
    let cq = objects::create_cq(dev, 16).unwrap();
    let mut qp = objects::create_qp(
        dev,
        &RawSpec {
            // A GSI QP: a UD QP's Q_Key 0x80010000 (bit 31 set) would be replaced by its
            // own (§10), and QP1 accepts nothing else.
            ty: QpType::Gsi,
            rq: Some((4, 1)),
            ..RawSpec::rc(pd, cq.handle)
        },
    )
    .unwrap();
    objects::to_rts(dev, qp.handle(), QpType::Gsi, 0).unwrap();
    let mr = dev
        .cmd()
        .execute(&CreateMr {
            start: 0,
            length: 0,
            pdir_dma: 0,
            pd_handle: pd,
            access_flags: AccessFlags::LOCAL_WRITE,
            flags: mr_flags::DMA,
            nchunks: 0,
        })
        .unwrap();
    let mut buf = DmaBuffer::alloc(dev.platform().dma(), 4096).unwrap();
    for (i, x) in buf.as_mut_slice().iter_mut().enumerate() {
        *x = i as u8;
    }
    let to = UdAddress {
        remote_qpn: 1,
        remote_qkey: 0x8001_0000,
        pd,
        dgid: c.host(1).gid,
        dmac: c.host(1).mac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
    };
    let header = SqHeader {
        op_word: SqHeader::op_word(WrOpcode::Send, SendFlags::SIGNALED),
        ex: 0,
        body: to.body(),
    };
    let dropped = || c.world.counters(1).transport.ud_dropped;
    let before = dropped();
    for (i, len) in [100u32, 0, 256, 257, 300].into_iter().enumerate() {
        let sge = Sge {
            addr: buf.logical(),
            length: len,
            lkey: mr.lkey,
        };
        qp.post_send(i as u64, &header, &[sge]);
        c.settle();
    }
    let sent: Vec<u32> = cq.poll().iter().map(|e| e.status).collect();
    assert_eq!(sent, vec![0; 5], "every datagram left");
    let st = b.qp1.stats();
    // 140 and 40 bytes reach the CQ and are dropped for their length; 297 and 340 do not fit
    // the 296-byte buffers, which the device drops itself (M37).
    assert_eq!((st.received, st.bad_length, st.bad_grh), (1, 2, 0));
    assert_eq!(dropped() - before, 2);
    let got = b.sink.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.as_slice(), &buf.as_slice()[..256]);
    assert_eq!(got[0].0.src_qp, qp.resp.qpn);
    assert_eq!(got[0].0.grh.sgid, c.host(0).gid);

    objects::destroy_qp(dev, qp);
    dev.cmd()
        .execute(&DestroyMr {
            mr_handle: mr.mr_handle,
        })
        .unwrap();
    objects::destroy_cq(dev, cq);
    objects::destroy_pd(dev, pd);
    drop(buf);
    assert_eq!(b.qp1.close(), Ok(()));
    c.finish();
}

// ------------------------------------------------------------------ address resolution

mod resolution {
    use super::*;
    use pvrdma_ndk::cm::addr::ip_from_gid;
    use pvrdma_ndk::ndk::NdkError;
    use pvrdma_ndk::ndkpi::{STATUS_BAD_NETWORK_NAME, STATUS_HOST_UNREACHABLE};
    use pvrdma_ndk::os::Platform;
    use pvrdma_ndk::os::net::{
        AddressEvents, AddressResolver, Mac, Neighbours, ResolveError, resolve_done,
    };
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    type Outcome = Arc<Mutex<Option<(Result<Mac, ResolveError>, Instant)>>>;

    fn resolve(n: &Neighbours, local: IpAddr, remote: IpAddr) -> Outcome {
        let out: Outcome = Arc::new(Mutex::new(None));
        let o2 = out.clone();
        let done = resolve_done(move |r| {
            assert_eq!(held_spin_locks(), 0, "no resolver lock held in done");
            *o2.lock().unwrap() = Some((r, Instant::now()));
        })
        .unwrap();
        n.resolve(local, remote, done);
        out
    }

    fn result(o: &Outcome) -> Option<Result<Mac, ResolveError>> {
        o.lock().unwrap().as_ref().map(|(r, _)| *r)
    }

    /// Host 0's resolver over the simulated hosts' addresses: its own IP is local, every
    /// other host is a neighbour.
    fn resolver(c: &Cluster, bound: Duration) -> Arc<Neighbours> {
        let p: Arc<dyn Platform> = c.host(0).platform.clone();
        let n = Neighbours::new(p, 4, bound.as_nanos() as u64).unwrap();
        n.add_address(ip_from_gid(c.host(0).gid)).unwrap();
        for h in c.hosts.iter().skip(1) {
            n.set_neighbour(ip_from_gid(h.gid), h.mac).unwrap();
        }
        n
    }

    #[test]
    fn a_known_neighbour_resolves_at_once_and_its_mac_carries_a_mad() {
        let c = qp1_cluster(Mode::Deterministic, 3);
        let n = resolver(&c, Duration::from_millis(50));
        let local = ip_from_gid(c.host(0).gid);
        let o = resolve(&n, local, ip_from_gid(c.host(2).gid));
        assert_eq!(result(&o), Some(Ok(c.host(2).mac)), "inline");
        let mut addrs = [IpAddr::from([0, 0, 0, 0]); 2];
        assert_eq!(n.unicast_addresses(&mut addrs), 1);
        assert_eq!(addrs[0], local);

        // The resolved MAC is what a MAD's path needs.
        let a = open(&c, 0, Qp1Config::default());
        let b = open(&c, 2, Qp1Config::default());
        let path = MadPath {
            dgid: c.host(2).gid,
            dmac: result(&o).unwrap().unwrap(),
            ..MadPath::default()
        };
        assert_eq!(a.qp1.send(&path, &mad(0, 9)), Ok(()));
        c.wait_for("the MAD", || b.sink.len() == 1);
        assert_eq!(b.sink.take()[0].1.as_slice(), &mad(0, 9)[..]);
        drop(n);
        assert_eq!(a.qp1.close(), Ok(()));
        assert_eq!(b.qp1.close(), Ok(()));
        c.finish();
    }

    #[test]
    fn an_unknown_neighbour_fails_within_the_bound_and_maps_to_host_unreachable() {
        let c = qp1_cluster(Mode::Deterministic, 2);
        let bound = Duration::from_millis(50);
        let n = resolver(&c, bound);
        let local = ip_from_gid(c.host(0).gid);
        let start = Instant::now();
        let o = resolve(&n, local, "10.0.0.99".parse().unwrap());
        assert_eq!(result(&o), None, "pending");
        assert_eq!(n.outstanding(), 1);
        c.wait_for("the resolution to fail", || result(&o).is_some());
        let (r, at) = o.lock().unwrap().unwrap();
        assert_eq!(r, Err(ResolveError::Unreachable));
        assert_eq!(
            NdkError::from(ResolveError::Unreachable).to_ntstatus(),
            STATUS_HOST_UNREACHABLE
        );
        let took = at - start;
        assert!(took >= bound, "not before the bound: {took:?}");
        assert!(took < bound + Duration::from_secs(5), "bounded: {took:?}");
        assert_eq!(n.outstanding(), 0);

        // A source address that is not the interface's fails at once.
        let o = resolve(
            &n,
            "192.168.1.1".parse().unwrap(),
            ip_from_gid(c.host(1).gid),
        );
        assert_eq!(result(&o), Some(Err(ResolveError::NotLocal)));
        assert_eq!(
            NdkError::from(ResolveError::NotLocal).to_ntstatus(),
            STATUS_BAD_NETWORK_NAME
        );
        drop(n);
        c.finish();
    }

    #[test]
    fn a_pending_resolution_completes_when_the_neighbour_appears_and_slots_are_bounded() {
        let c = qp1_cluster(Mode::Deterministic, 2);
        let n = resolver(&c, Duration::from_secs(60));
        let local = ip_from_gid(c.host(0).gid);
        let late: IpAddr = "10.0.0.50".parse().unwrap();
        let first = resolve(&n, local, late);
        let others: Vec<Outcome> = (0..3).map(|_| resolve(&n, local, late)).collect();
        assert_eq!(n.outstanding(), 4);
        // Four slots (the capacity): a fifth is refused, not queued.
        let fifth = resolve(&n, local, late);
        assert_eq!(result(&fifth), Some(Err(ResolveError::NoResources)));
        n.set_neighbour(late, [2, 0, 0, 0, 0, 0x50]).unwrap();
        for o in std::iter::once(&first).chain(&others) {
            assert_eq!(result(o), Some(Ok([2, 0, 0, 0, 0, 0x50])));
        }
        assert_eq!(n.outstanding(), 0);
        // Dropped with one pending: it fails rather than vanish.
        let orphan = resolve(&n, local, "10.0.0.77".parse().unwrap());
        drop(n);
        assert_eq!(result(&orphan), Some(Err(ResolveError::Unreachable)));
        c.finish();
    }

    #[derive(Default)]
    struct Watcher(Mutex<Vec<(bool, IpAddr)>>);

    impl AddressEvents for Watcher {
        fn added(&self, ip: IpAddr) {
            assert_eq!(held_spin_locks(), 0);
            self.0.lock().unwrap().push((true, ip));
        }
        fn removed(&self, ip: IpAddr) {
            assert_eq!(held_spin_locks(), 0);
            self.0.lock().unwrap().push((false, ip));
        }
    }

    #[test]
    fn address_changes_reach_the_watcher() {
        let c = qp1_cluster(Mode::Deterministic, 1);
        let n = resolver(&c, Duration::from_secs(1));
        let w = Arc::new(Watcher::default());
        n.watch_addresses(Some(w.clone()));
        let v6: IpAddr = "fd00::1".parse().unwrap();
        n.add_address(v6).unwrap();
        n.add_address(v6).unwrap();
        n.remove_address(ip_from_gid(c.host(0).gid));
        n.remove_address("10.9.9.9".parse().unwrap());
        assert_eq!(
            *w.0.lock().unwrap(),
            vec![(true, v6), (false, ip_from_gid(c.host(0).gid))]
        );
        let mut addrs = [IpAddr::from([0, 0, 0, 0]); 4];
        assert_eq!(n.unicast_addresses(&mut addrs), 1);
        assert_eq!(addrs[0], v6);
        n.watch_addresses(None);
        n.add_address("10.1.1.1".parse().unwrap()).unwrap();
        assert_eq!(w.0.lock().unwrap().len(), 2, "no watcher, no event");
        drop(n);
        c.finish();
    }
}

/// A MAD sent from another bound GID index arrives with that GID as its GRH source, and a
/// reply addressed to it reaches the sender (the fabric routes by bound GIDs).
#[test]
fn a_mad_from_a_second_gid_carries_it_and_a_reply_to_it_arrives() {
    let c = qp1_cluster(Mode::Deterministic, 2);
    let a = open(&c, 0, Qp1Config::default());
    let b = open(&c, 1, Qp1Config::default());
    let second = pvrdma_ndk::cm::addr::gid_from_ip("10.0.0.77".parse().unwrap());
    let bound = Arc::new(Mutex::new(None));
    let b2 = bound.clone();
    c.host(0)
        .hw
        .bind_gid(5, second, Box::new(move |r| *b2.lock().unwrap() = Some(r)));
    c.wait_for("CREATE_BIND", || bound.lock().unwrap().is_some());
    assert_eq!(*bound.lock().unwrap(), Some(Ok(())));
    let from5 = MadPath {
        sgid_index: 5,
        ..path_to(&c, 1)
    };
    assert_eq!(a.qp1.send(&from5, &mad(0, 1)), Ok(()));
    c.wait_for("the MAD at b", || b.sink.len() == 1);
    let (src, _) = b.sink.take().remove(0);
    assert_eq!(src.grh.sgid, second);
    // b answers the way a CM does: to the GRH's source, the CQE's source MAC.
    let reply = MadPath {
        dgid: src.grh.sgid,
        dmac: src.smac,
        ..MadPath::default()
    };
    assert_eq!(b.qp1.send(&reply, &mad(1, 2)), Ok(()));
    c.wait_for("the reply at a", || a.sink.len() == 1);
    let (back, bytes) = a.sink.take().remove(0);
    assert_eq!(bytes.as_slice(), &mad(1, 2)[..]);
    assert_eq!(back.grh.dgid, second);
    assert_eq!(a.qp1.close(), Ok(()));
    assert_eq!(b.qp1.close(), Ok(()));
    c.finish();
}
