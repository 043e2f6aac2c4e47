//! Virtual time on the host platform (`HostTime::Virtual` through
//! `ClusterConfig::virtual_time`): every host reads the world's clock, timers fire when the
//! pump moves virtual time to their deadline, in deadline order, interleaved with the
//! world's own delayed events; a wait for a timeout of many virtual seconds costs no wall
//! time.

mod common;
mod ndk_dp;

use std::sync::{Arc, Mutex, Weak};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, Registered, fill, pattern, verify};
use ndk_dp::{LOCAL, Pair};
use pvrdma_host::HostPlatform;
use pvrdma_ndk::ndkpi::STATUS_SUCCESS;
use pvrdma_ndk::os::Platform;
use pvrdma_ndk::os::clock::NS_PER_SEC;
use pvrdma_ndk::os::dpc::{DpcHandler, Timer};
use pvrdma_sim::fabric::FabricPort;

/// What fired, in order, and the virtual time it read.
type Log = Arc<Mutex<Vec<(&'static str, u64)>>>;

/// A timer DPC that logs its label and its host's `now_ns()`.
struct Stamp {
    label: &'static str,
    platform: Weak<HostPlatform>,
    log: Log,
}

impl DpcHandler for Stamp {
    fn run(&self) {
        let now = self.platform.upgrade().map_or(u64::MAX, |p| p.now_ns());
        self.log.lock().unwrap().push((self.label, now));
    }
}

fn timer(c: &Cluster, host: usize, label: &'static str, log: &Log) -> Timer {
    let p = &c.host(host).platform;
    Timer::new(
        p.scheduler(),
        Arc::new(Stamp {
            label,
            platform: Arc::downgrade(p),
            log: log.clone(),
        }),
    )
    .unwrap()
}

fn virtual_cluster() -> Cluster {
    let c = Cluster::with(ClusterConfig::virtual_time(Mode::Deterministic, 2));
    assert!(c.pump().is_virtual_time());
    assert!(c.hosts.iter().all(|h| h.platform.is_virtual_time()));
    c
}

fn entries(log: &Log) -> Vec<(&'static str, u64)> {
    log.lock().unwrap().clone()
}

#[test]
fn a_ten_second_timer_fires_at_its_deadline_and_the_host_reads_it() {
    let c = virtual_cluster();
    c.settle();
    let t0 = c.pump().now_ns();
    assert_eq!(c.host(0).platform.now_ns(), t0);
    assert_eq!(c.host(1).platform.now_ns(), t0);
    let log = Log::default();
    let t = timer(&c, 0, "10s", &log);
    t.schedule_in(10 * NS_PER_SEC);
    assert_eq!(
        c.host(0).platform.executor().next_timer_ns(),
        Some(t0 + 10 * NS_PER_SEC)
    );
    c.wait_for("the 10 s timer", || !entries(&log).is_empty());
    assert_eq!(entries(&log), [("10s", t0 + 10 * NS_PER_SEC)]);
    assert_eq!(c.pump().now_ns(), t0 + 10 * NS_PER_SEC);
    assert_eq!(c.host(1).platform.now_ns(), t0 + 10 * NS_PER_SEC);
    assert_eq!(c.host(0).platform.executor().next_timer_ns(), None);
    drop(t);
    c.finish();
}

#[test]
fn rearm_replaces_and_cancel_disarms_in_virtual_time() {
    let c = virtual_cluster();
    c.settle();
    let t0 = c.pump().now_ns();
    let log = Log::default();
    let a = timer(&c, 0, "a", &log);
    let b = timer(&c, 1, "b", &log);
    a.schedule_in(5 * NS_PER_SEC);
    a.schedule_in(7 * NS_PER_SEC);
    b.schedule_in(6 * NS_PER_SEC);
    b.cancel();
    assert_eq!(c.host(1).platform.executor().next_timer_ns(), None);
    c.wait_for("the re-armed timer", || !entries(&log).is_empty());
    assert_eq!(entries(&log), [("a", t0 + 7 * NS_PER_SEC)]);
    // Nothing else is armed: settling fires nothing more and moves no time.
    c.settle();
    assert_eq!(entries(&log), [("a", t0 + 7 * NS_PER_SEC)]);
    assert_eq!(c.pump().now_ns(), t0 + 7 * NS_PER_SEC);
    // A timer re-armed from a fired state fires again, from the new now.
    a.schedule_in(NS_PER_SEC);
    c.settle();
    assert_eq!(
        entries(&log),
        [("a", t0 + 7 * NS_PER_SEC), ("a", t0 + 8 * NS_PER_SEC)]
    );
    drop([a, b]);
    c.finish();
}

#[test]
fn timers_of_every_host_fire_in_deadline_order_ties_in_arming_order() {
    let c = virtual_cluster();
    c.settle();
    let t0 = c.pump().now_ns();
    let log = Log::default();
    let late = timer(&c, 0, "3s", &log);
    let early = timer(&c, 1, "2s", &log);
    let tie_first = timer(&c, 1, "4s first", &log);
    let tie_second = timer(&c, 1, "4s second", &log);
    late.schedule_in(3 * NS_PER_SEC);
    early.schedule_in(2 * NS_PER_SEC);
    tie_first.schedule_in(4 * NS_PER_SEC);
    tie_second.schedule_in(4 * NS_PER_SEC);
    c.settle();
    assert_eq!(
        entries(&log),
        [
            ("2s", t0 + 2 * NS_PER_SEC),
            ("3s", t0 + 3 * NS_PER_SEC),
            ("4s first", t0 + 4 * NS_PER_SEC),
            ("4s second", t0 + 4 * NS_PER_SEC),
        ]
    );
    drop([late, early, tie_first, tie_second]);
    c.finish();
}

/// A fabric port that only logs its timers.
struct FabricStamp(Log);

impl FabricPort for FabricStamp {
    fn mac(&self) -> [u8; 6] {
        [0x02, 0, 0, 0, 0xEE, 0xEE]
    }
    fn receive(&self, _: &[u8], _: u64) {}
    fn on_timer(&self, token: u64, now_ns: u64) {
        let label = match token {
            1 => "world 1s",
            3 => "world 3s",
            4 => "world 4s",
            _ => "world ?",
        };
        self.0.lock().unwrap().push((label, now_ns));
    }
}

#[test]
fn world_events_and_host_timers_interleave_by_virtual_time() {
    let c = virtual_cluster();
    c.settle();
    let t0 = c.pump().now_ns();
    let log = Log::default();
    let port = c.world.fabric().attach(Arc::new(FabricStamp(log.clone())));
    let h2 = timer(&c, 0, "host 2s", &log);
    let h4 = timer(&c, 1, "host 4s", &log);
    h4.schedule_in(4 * NS_PER_SEC);
    c.world
        .fabric()
        .schedule_timer(port, t0 + 3 * NS_PER_SEC, 3);
    h2.schedule_in(2 * NS_PER_SEC);
    c.world.fabric().schedule_timer(port, t0 + NS_PER_SEC, 1);
    // Due at the same instant as a host timer: the world's event goes first.
    c.world
        .fabric()
        .schedule_timer(port, t0 + 4 * NS_PER_SEC, 4);
    c.wait_for("four events", || entries(&log).len() == 5);
    assert_eq!(
        entries(&log),
        [
            ("world 1s", t0 + NS_PER_SEC),
            ("host 2s", t0 + 2 * NS_PER_SEC),
            ("world 3s", t0 + 3 * NS_PER_SEC),
            ("world 4s", t0 + 4 * NS_PER_SEC),
            ("host 4s", t0 + 4 * NS_PER_SEC),
        ]
    );
    c.world.fabric().detach(port);
    drop([h2, h4]);
    c.finish();
}

/// The data path runs in virtual time too: the SEND's frames take the fabric latency, and
/// the hosts' clocks move with the world's.
#[test]
fn send_and_receive_complete_in_virtual_time() {
    let c = virtual_cluster();
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    fill(&ma.mem, 0, 7, 256);
    let t0 = c.pump().now_ns();
    assert_eq!(p.qb.receive(1, &[mb.sge(0, 256)]), STATUS_SUCCESS);
    assert_eq!(p.qa.send(2, &[ma.sge(0, 256)], 0), STATUS_SUCCESS);
    assert_eq!(p.cq_b.wait_results(1).len(), 1);
    assert_eq!(p.cq_a.wait_results(1).len(), 1);
    assert!(c.pump().now_ns() >= t0 + pvrdma_sim::fabric::DEFAULT_LATENCY_NS);
    assert_eq!(c.host(0).platform.now_ns(), c.pump().now_ns());
    verify(&mb.mem, 0, &pattern(7, 256));
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// A retry budget like the CM's: a timer DPC that re-arms itself every 4 s until its fourth
/// expiry. The wait for the last one ends with the clock at exactly 16 s on.
struct Retry {
    platform: Weak<HostPlatform>,
    timer: Mutex<Option<Timer>>,
    expiries: Mutex<Vec<u64>>,
}

impl DpcHandler for Retry {
    fn run(&self) {
        let now = self.platform.upgrade().map_or(u64::MAX, |p| p.now_ns());
        let mut e = self.expiries.lock().unwrap();
        e.push(now);
        if e.len() < 4
            && let Some(t) = &*self.timer.lock().unwrap()
        {
            t.schedule_in(4 * NS_PER_SEC);
        }
    }
}

#[test]
fn a_sixteen_second_retry_budget_runs_out_in_virtual_time() {
    let c = virtual_cluster();
    c.settle();
    let p = &c.host(1).platform;
    let retry = Arc::new(Retry {
        platform: Arc::downgrade(p),
        timer: Mutex::new(None),
        expiries: Mutex::new(Vec::new()),
    });
    let t = Timer::new(p.scheduler(), retry.clone()).unwrap();
    *retry.timer.lock().unwrap() = Some(t.clone());
    let t0 = c.pump().now_ns();
    t.schedule_in(4 * NS_PER_SEC);
    c.wait_for("the budget to run out", || {
        retry.expiries.lock().unwrap().len() == 4
    });
    let s = NS_PER_SEC;
    assert_eq!(
        *retry.expiries.lock().unwrap(),
        [t0 + 4 * s, t0 + 8 * s, t0 + 12 * s, t0 + 16 * s]
    );
    assert_eq!(p.now_ns(), t0 + 16 * s);
    c.settle();
    assert_eq!(retry.expiries.lock().unwrap().len(), 4, "not re-armed");
    // Break the handler → timer → handler cycle before the leak check.
    retry.timer.lock().unwrap().take();
    drop(t);
    c.finish();
}

/// The driver's own timers follow virtual time: an unanswered neighbour resolution
/// (`os::net::Neighbours`, bound 16 s) fails at exactly its bound.
#[test]
fn an_unanswered_resolution_fails_at_its_virtual_bound() {
    use pvrdma_ndk::cm::addr::ip_from_gid;
    use pvrdma_ndk::os::net::{AddressResolver, Mac, Neighbours, ResolveError, resolve_done};
    type Outcome = Arc<Mutex<Option<(Result<Mac, ResolveError>, u64)>>>;
    let c = virtual_cluster();
    c.settle();
    let p: Arc<dyn Platform> = c.host(0).platform.clone();
    let n = Neighbours::new(p, 4, 16 * NS_PER_SEC).unwrap();
    let local = ip_from_gid(c.host(0).gid);
    n.add_address(local).unwrap();
    let got = Outcome::default();
    let (g2, clock) = (got.clone(), Arc::downgrade(&c.host(0).platform));
    let done = resolve_done(move |r| {
        let now = clock.upgrade().map_or(u64::MAX, |p| p.now_ns());
        *g2.lock().unwrap() = Some((r, now));
    })
    .unwrap();
    let t0 = c.pump().now_ns();
    n.resolve(local, "10.0.0.99".parse().unwrap(), done);
    c.wait_for("the resolution to fail", || got.lock().unwrap().is_some());
    assert_eq!(
        *got.lock().unwrap(),
        Some((Err(ResolveError::Unreachable), t0 + 16 * NS_PER_SEC))
    );
    assert_eq!(n.outstanding(), 0);
    drop(n);
    c.finish();
}
