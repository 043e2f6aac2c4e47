//! Simulated Ethernet fabric carrying RoCEv2 frames between device models (pvrdma.md M23, M42;
//! frames as cm.md §7.1 builds them, see [`crate::wire::roce`]).
//!
//! * **Ports** implement [`FabricPort`] and are attached with [`Fabric::attach`] (or
//!   [`Fabric::attach_with`], which hands the port its [`PortId`] and a [`FabricHandle`] before it
//!   is stored). Ports transmit through [`FabricHandle::transmit`]; frames are routed by
//!   destination MAC (the port's MAC, or one of the addresses [`FabricHandle::set_port_macs`]
//!   gave it, as a learning switch would), and broadcast and multicast (group bit set) go to
//!   every other port: the receiving NIC filters them, as on a switch without IGMP/MLD
//!   snooping.
//! * **Time** is virtual, in nanoseconds. Every delivery, timer and link notification is an
//!   event in one queue ordered by `(time, sequence number)`, so runs are deterministic:
//!   [`Fabric::step`] handles the next event, [`Fabric::run_until_idle`] drains the queue,
//!   [`Fabric::advance_to`] handles everything due up to an instant.
//! * **Callbacks** (`receive`, `on_timer`, `link_changed`) run with the fabric unlocked, so a
//!   port may transmit or schedule timers from inside them.
//! * **Lossless and ordered by default** (M23): every frame takes the same latency, so frames of
//!   one ordered pair arrive in sending order. Faults are opt-in per ordered pair and per port
//!   egress/ingress ([`FaultConfig`]); the random rolls come from one seeded [`Rng`], so the same
//!   seed and the same inputs replay the same run exactly. Jitter and `reorder` may reorder.
//! * **Link state** per port: frames from or to a port whose link is down are dropped, also
//!   those already in flight when it goes down; the port hears of changes via
//!   [`FabricPort::link_changed`] (the device turns them into PORT_ACTIVE / PORT_ERR, M22).
//! * **Capture**: every frame *delivered* to a port (after faults: duplicates twice, corrupted
//!   frames as corrupted) is written to the optional [`PcapWriter`] at its delivery time.
//! * **Threaded mode** ([`Fabric::run_threaded`]) runs the same queue on a delivery thread, in
//!   virtual time (events handled as soon as they are queued) or in scaled real time.
#![deny(unsafe_code)]

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::pcap::PcapWriter;
use crate::rng::Rng;
use crate::wire::ethernet::EthernetFrame;
use crate::wire::roce::RocePacket;

/// Default one-way latency of every frame, in virtual nanoseconds.
pub const DEFAULT_LATENCY_NS: u64 = 1_000;

/// Index of an attached port, in attachment order from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId(pub u32);

impl PortId {
    fn idx(self) -> usize {
        // CAST: u32 → usize is lossless on every supported host.
        self.0 as usize
    }
}

/// A timer scheduled with [`FabricHandle::schedule_timer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(u64);

/// Something attached to the fabric (a device model's Ethernet port).
pub trait FabricPort: Send + Sync {
    /// The port's unicast MAC; read once, at attach time.
    fn mac(&self) -> [u8; 6];
    /// A frame arrives at virtual time `now_ns`.
    fn receive(&self, frame: &[u8], now_ns: u64);
    /// A frame arrives and the port may keep its buffer (hand it back with
    /// [`FabricHandle::recycle`] when done): a port that queues frames saves a copy.
    fn receive_owned(&self, frame: Vec<u8>, now_ns: u64, pool: &FabricHandle) {
        self.receive(&frame, now_ns);
        pool.recycle(frame);
    }
    /// A timer scheduled with [`FabricHandle::schedule_timer`] fires.
    fn on_timer(&self, token: u64, now_ns: u64) {
        let _ = (token, now_ns);
    }
    /// The port's link went up or down ([`Fabric::set_link`]).
    fn link_changed(&self, up: bool) {
        let _ = up;
    }
}

/// Fault injection for one direction. Probabilities are per frame copy, in `[0, 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Probability that a frame is lost.
    pub drop: f64,
    /// Probability that a frame is delivered twice (the copy right after the original).
    pub duplicate: f64,
    /// Probability that a frame is held back by `reorder_hold_ns`, letting later frames pass.
    pub reorder: f64,
    /// How long a reordered frame is held back.
    pub reorder_hold_ns: u64,
    /// Probability that one byte of the frame is altered. The byte is chosen in the part the
    /// ICRC protects (BTH to ICRC, minus the masked BTH byte 4) when the frame parses as RoCEv2,
    /// so the receiver's ICRC check always rejects it; otherwise anywhere after the MACs.
    pub corrupt: f64,
    /// Extra fixed delay.
    pub delay_ns: u64,
    /// Extra uniform delay in `[0, jitter_ns]` (can reorder frames).
    pub jitter_ns: u64,
}

impl FaultConfig {
    /// No faults.
    pub const fn none() -> Self {
        Self {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_hold_ns: 0,
            corrupt: 0.0,
            delay_ns: 0,
            jitter_ns: 0,
        }
    }
    /// Sets the drop probability.
    pub const fn with_drop(self, p: f64) -> Self {
        Self { drop: p, ..self }
    }
    /// Sets the duplicate probability.
    pub const fn with_duplicate(self, p: f64) -> Self {
        Self {
            duplicate: p,
            ..self
        }
    }
    /// Sets the reorder probability and hold time.
    pub const fn with_reorder(self, p: f64, hold_ns: u64) -> Self {
        Self {
            reorder: p,
            reorder_hold_ns: hold_ns,
            ..self
        }
    }
    /// Sets the corruption probability.
    pub const fn with_corrupt(self, p: f64) -> Self {
        Self { corrupt: p, ..self }
    }
    /// Sets the fixed delay and jitter.
    pub const fn with_delay(self, fixed_ns: u64, jitter_ns: u64) -> Self {
        Self {
            delay_ns: fixed_ns,
            jitter_ns,
            ..self
        }
    }

    /// Stages applied one after the other: independent probabilities, added delays.
    fn then(&self, o: &Self) -> Self {
        let or = |a: f64, b: f64| 1.0 - (1.0 - a) * (1.0 - b);
        Self {
            drop: or(self.drop, o.drop),
            duplicate: or(self.duplicate, o.duplicate),
            reorder: or(self.reorder, o.reorder),
            reorder_hold_ns: self.reorder_hold_ns.max(o.reorder_hold_ns),
            corrupt: or(self.corrupt, o.corrupt),
            delay_ns: self.delay_ns.saturating_add(o.delay_ns),
            jitter_ns: self.jitter_ns.saturating_add(o.jitter_ns),
        }
    }
}

/// Frames dropped, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Lost to an injected `drop` fault.
    pub fault: u64,
    /// Sender's or receiver's link down (at transmit or at delivery).
    pub link_down: u64,
    /// No attached port has the destination MAC (or the destination was detached).
    pub no_route: u64,
}

impl DropCounts {
    /// All drops.
    pub const fn total(&self) -> u64 {
        self.fault + self.link_down + self.no_route
    }
}

/// Counters of one direction of a port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirCounters {
    /// Transmit side: frames the port handed to the fabric. Receive side: frames delivered to
    /// the port (duplicates included).
    pub frames: u64,
    /// Bytes of those frames.
    pub bytes: u64,
    /// Frame copies from (transmit side) or to (receive side) this port that were dropped.
    pub dropped: DropCounts,
    /// Copies duplicated by a fault.
    pub duplicated: u64,
    /// Copies corrupted by a fault.
    pub corrupted: u64,
    /// Copies held back by a reorder fault.
    pub reordered: u64,
}

/// Counters of one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames this port sent.
    pub tx: DirCounters,
    /// Frames addressed to this port.
    pub rx: DirCounters,
}

/// Counters of one ordered pair of ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairCounters {
    /// Copies routed from the first port to the second.
    pub sent: u64,
    /// Copies delivered (duplicates included).
    pub delivered: u64,
    /// Copies dropped.
    pub dropped: DropCounts,
    /// Copies duplicated.
    pub duplicated: u64,
    /// Copies corrupted.
    pub corrupted: u64,
    /// Copies reordered.
    pub reordered: u64,
}

/// How [`Fabric::run_threaded`] maps virtual time to the delivery thread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThreadMode {
    /// Handle events as soon as they are queued; virtual time jumps to each event's time.
    Virtual,
    /// Virtual time advances with the host clock: `scale` virtual ns per real ns (1.0 = real
    /// time; pvrdma.md M42 scales transport timers the same way).
    ScaledReal {
        /// Virtual nanoseconds per real nanosecond (> 0).
        scale: f64,
    },
}

enum EventKind {
    Deliver {
        from: PortId,
        to: PortId,
        frame: Vec<u8>,
    },
    Timer {
        port: PortId,
        token: u64,
        id: u64,
    },
    Link {
        port: PortId,
        up: bool,
    },
}

struct Event {
    at: u64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap and the earliest (time, seq) must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

struct PortEntry {
    port: Option<Arc<dyn FabricPort>>,
    mac: [u8; 6],
    /// Further unicast addresses the port answers to (see [`FabricHandle::set_port_macs`]).
    aliases: Vec<[u8; 6]>,
    up: bool,
    egress: FaultConfig,
    ingress: FaultConfig,
    counters: PortCounters,
}

struct RealClock {
    start: Instant,
    base_ns: u64,
    scale: f64,
}

/// Timer ids are distinct sequence numbers, so one multiply is hash enough: sequential ids keep
/// distinct low bits (hashbrown's bucket index) and the odd constant spreads them over the top
/// seven (its tag). SipHash cost more than the rest of a timer's bookkeeping, and the retry
/// timer is re-armed on every ACK. The sets are only probed, never iterated, so the hash cannot
/// change any result.
#[derive(Default)]
struct TimerIdHasher(u64);

impl Hasher for TimerIdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

type TimerIds = BuildHasherDefault<TimerIdHasher>;

/// A pending timer's queue entry: its own, or, once re-armed, that of the timer it replaced.
#[derive(Clone, Copy)]
struct Live {
    /// Id (= sequence number) of the entry.
    entry: u64,
    /// The entry's due time.
    entry_at: u64,
}

/// A re-armed timer riding on an earlier timer's queue entry (see `State::rearm_timer`).
#[derive(Clone, Copy)]
struct Carried {
    at: u64,
    id: u64,
    port: PortId,
    token: u64,
}

/// A value per ordered pair of port ids, indexed directly: the counters are touched twice per
/// frame, where a B-tree keyed by the pair cost a search each time. Rows and columns grow on
/// first use, so any id works (faults may be set before a port is attached).
struct PairTable<T> {
    rows: Vec<Vec<T>>,
}

impl<T> Default for PairTable<T> {
    fn default() -> Self {
        Self { rows: Vec::new() }
    }
}

impl<T: Default> PairTable<T> {
    fn get(&self, from: PortId, to: PortId) -> Option<&T> {
        self.rows.get(from.idx())?.get(to.idx())
    }

    fn entry(&mut self, from: PortId, to: PortId) -> &mut T {
        if self.rows.len() <= from.idx() {
            self.rows.resize_with(from.idx() + 1, Vec::new);
        }
        let row = &mut self.rows[from.idx()];
        if row.len() <= to.idx() {
            row.resize_with(to.idx() + 1, T::default);
        }
        &mut row[to.idx()]
    }
}

struct State {
    now: u64,
    seq: u64,
    queue: BinaryHeap<Event>,
    ports: Vec<PortEntry>,
    pair_faults: PairTable<Option<FaultConfig>>,
    pairs: PairTable<PairCounters>,
    rng: Rng,
    latency_ns: u64,
    /// Timers scheduled and not yet fired or cancelled, by id, with the queue entry that
    /// stands for each (see [`Carried`]).
    pending_timers: HashMap<u64, Live, TimerIds>,
    /// Queue entries of cancelled timers, discarded when they come out.
    cancelled_timers: HashSet<u64, TimerIds>,
    /// Queue entries whose timer was re-armed: by entry id, the timer that takes its place.
    carried: HashMap<u64, Carried, TimerIds>,
    capture: Option<PcapWriter<Box<dyn Write + Send>>>,
    capture_errors: u64,
    clock: Option<RealClock>,
    stop: bool,
    /// Callbacks the delivery thread is running (see [`Fabric::is_idle`]).
    in_callback: u32,
    /// Threads waiting on `Shared::cv`. A notify is a futex system call even with nobody
    /// waiting, and ports call in several times per packet: they notify only when this is
    /// non-zero. It is read and written under the state lock, so a waiter that counted itself
    /// before its wait released the lock is always seen by a later state change.
    sleepers: u32,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// Buffers the pool keeps; more are freed. Enough for every frame in flight of a busy run
/// (a 64 KiB READ at MTU 256 is 256 responses).
const POOL_BUFFERS: usize = 512;

thread_local! {
    /// Frame buffers returned after delivery, reused by [`FabricHandle::frame_buffer`]: every
    /// packet used to cost two allocations (the transmitted frame, the receiver's copy). One
    /// pool per thread, not per fabric: a buffer's identity never shows (its user overwrites
    /// or clears it), and taking one costs no lock and no `Weak` upgrade, of which a packet
    /// had four. In threaded mode buffers built on one thread and freed on another simply
    /// move between pools, each bounded by [`POOL_BUFFERS`].
    static FRAME_POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn take_buffer() -> Vec<u8> {
    FRAME_POOL
        .try_with(|p| p.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn recycle_buffer(frame: Vec<u8>) {
    if frame.capacity() == 0 {
        return;
    }
    // During thread teardown the pool may be gone: the buffer is then just freed.
    let _ = FRAME_POOL.try_with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < POOL_BUFFERS {
            pool.push(frame);
        }
    });
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A port callback that panicked poisons nothing we hold (callbacks run unlocked), but a
        // panic inside the fabric would; keep going with the data as it is.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What to do once the lock is released.
enum Action {
    Receive(Arc<dyn FabricPort>, Vec<u8>, u64),
    Timer(Arc<dyn FabricPort>, u64, u64),
    Link(Arc<dyn FabricPort>, bool),
    /// An event was consumed without a callback (a dropped in-flight frame, a detached port).
    Nothing,
}

impl Action {
    /// `handle` is the caller's, made once: a fresh one per frame cost two reference-count
    /// updates.
    fn run(self, handle: &FabricHandle) {
        match self {
            Self::Receive(p, f, now) => p.receive_owned(f, now, handle),
            Self::Timer(p, token, now) => p.on_timer(token, now),
            Self::Link(p, up) => p.link_changed(up),
            Self::Nothing => {}
        }
    }
}

impl State {
    fn sync_clock(&mut self) -> u64 {
        if let Some(c) = &self.clock {
            // CAST: f64 → u64 saturates; virtual time never moves backwards (max below).
            let v = c
                .base_ns
                .saturating_add((c.start.elapsed().as_nanos() as f64 * c.scale) as u64);
            self.now = self.now.max(v);
        }
        self.now
    }

    fn push(&mut self, at: u64, kind: EventKind) {
        let seq = self.seq;
        self.seq += 1;
        self.queue.push(Event { at, seq, kind });
    }

    fn entry(&self, p: PortId) -> Option<&PortEntry> {
        self.ports.get(p.idx())
    }

    fn pair(&mut self, from: PortId, to: PortId) -> &mut PairCounters {
        self.pairs.entry(from, to)
    }

    fn count_drop(&mut self, from: PortId, to: Option<PortId>, f: fn(&mut DropCounts)) {
        if let Some(e) = self.ports.get_mut(from.idx()) {
            f(&mut e.counters.tx.dropped);
        }
        if let Some(to) = to {
            if let Some(e) = self.ports.get_mut(to.idx()) {
                f(&mut e.counters.rx.dropped);
            }
            f(&mut self.pair(from, to).dropped);
        }
    }

    fn transmit(&mut self, from: PortId, frame: Vec<u8>) {
        let now = self.sync_clock();
        let Some(src) = self.ports.get_mut(from.idx()) else {
            return;
        };
        src.counters.tx.frames += 1;
        src.counters.tx.bytes += frame.len() as u64;
        let dst_mac = EthernetFrame::new_checked(&frame[..]).ok().map(|f| f.dst());
        match dst_mac {
            // Broadcast and multicast (the group bit, which broadcast has too) flood.
            Some(m) if m[0] & 1 != 0 => {
                let targets: Vec<PortId> = (0..self.ports.len())
                    .filter(|&i| i != from.idx() && self.ports[i].port.is_some())
                    // CAST: port indices come from PortId(u32).
                    .map(|i| PortId(i as u32))
                    .collect();
                let Some((&last, others)) = targets.split_last() else {
                    self.count_drop(from, None, |d| d.no_route += 1);
                    return;
                };
                for &to in others {
                    self.route_copy(now, from, to, frame.clone());
                }
                self.route_copy(now, from, last, frame);
            }
            // Unicast, once per packet: no list of targets to allocate.
            Some(mac) => match self
                .ports
                .iter()
                .position(|e| e.port.is_some() && (e.mac == mac || e.aliases.contains(&mac)))
            {
                // CAST: port indices come from PortId(u32).
                Some(i) => self.route_copy(now, from, PortId(i as u32), frame),
                None => self.count_drop(from, None, |d| d.no_route += 1),
            },
            None => self.count_drop(from, None, |d| d.no_route += 1),
        }
    }

    fn route_copy(&mut self, now: u64, from: PortId, to: PortId, mut frame: Vec<u8>) {
        self.pair(from, to).sent += 1;
        let (Some(s), Some(d)) = (self.entry(from), self.entry(to)) else {
            return;
        };
        if !s.up || !d.up {
            self.count_drop(from, Some(to), |d| d.link_down += 1);
            return;
        }
        let pair = self
            .pair_faults
            .get(from, to)
            .copied()
            .flatten()
            .unwrap_or_default();
        let cfg = s.egress.then(&pair).then(&d.ingress);
        // Rolls only for configured faults, in a fixed order, so an unfaulted run draws nothing.
        if cfg.drop > 0.0 && self.rng.chance(cfg.drop) {
            self.count_drop(from, Some(to), |d| d.fault += 1);
            return;
        }
        let mut at = now
            .saturating_add(self.latency_ns)
            .saturating_add(cfg.delay_ns);
        if cfg.jitter_ns > 0 {
            at = at.saturating_add(self.rng.below(cfg.jitter_ns.saturating_add(1)));
        }
        let corrupt = cfg.corrupt > 0.0 && self.rng.chance(cfg.corrupt);
        let duplicate = cfg.duplicate > 0.0 && self.rng.chance(cfg.duplicate);
        let reorder = cfg.reorder > 0.0 && self.rng.chance(cfg.reorder);
        if corrupt {
            corrupt_frame(&mut self.rng, &mut frame);
            self.ports[from.idx()].counters.tx.corrupted += 1;
            self.ports[to.idx()].counters.rx.corrupted += 1;
            self.pair(from, to).corrupted += 1;
        }
        if reorder {
            at = at.saturating_add(cfg.reorder_hold_ns);
            self.ports[from.idx()].counters.tx.reordered += 1;
            self.ports[to.idx()].counters.rx.reordered += 1;
            self.pair(from, to).reordered += 1;
        }
        if duplicate {
            self.ports[from.idx()].counters.tx.duplicated += 1;
            self.ports[to.idx()].counters.rx.duplicated += 1;
            self.pair(from, to).duplicated += 1;
            self.push(
                at,
                EventKind::Deliver {
                    from,
                    to,
                    frame: frame.clone(),
                },
            );
        }
        self.push(at, EventKind::Deliver { from, to, frame });
    }

    /// Pops the next event due at or before `limit` and does its bookkeeping.
    fn pop_ready(&mut self, limit: Option<u64>) -> Option<Action> {
        loop {
            let top = self.queue.peek()?;
            if limit.is_some_and(|l| top.at > l) {
                return None;
            }
            let ev = self.queue.pop()?;
            if let EventKind::Timer { id, .. } = ev.kind {
                if self.release_carried(id) || self.cancelled_timers.remove(&id) {
                    continue;
                }
                self.pending_timers.remove(&id);
            }
            self.now = self.now.max(ev.at);
            return Some(self.handle(ev.kind));
        }
    }

    fn handle(&mut self, kind: EventKind) -> Action {
        let now = self.now;
        match kind {
            EventKind::Deliver { from, to, frame } => {
                let ok = self.entry(from).is_some_and(|e| e.up);
                let (port, up) = match self.entry(to) {
                    Some(e) => (e.port.clone(), e.up),
                    None => (None, false),
                };
                let Some(port) = port else {
                    self.count_drop(from, Some(to), |d| d.no_route += 1);
                    return Action::Nothing;
                };
                if !ok || !up {
                    self.count_drop(from, Some(to), |d| d.link_down += 1);
                    return Action::Nothing;
                }
                let rx = &mut self.ports[to.idx()].counters.rx;
                rx.frames += 1;
                rx.bytes += frame.len() as u64;
                self.pair(from, to).delivered += 1;
                if let Some(w) = self.capture.as_mut()
                    && w.write_frame(now, &frame).is_err()
                {
                    self.capture_errors += 1;
                }
                Action::Receive(port, frame, now)
            }
            EventKind::Timer { port, token, .. } => {
                match self.entry(port).and_then(|e| e.port.clone()) {
                    Some(p) => Action::Timer(p, token, now),
                    None => Action::Nothing,
                }
            }
            EventKind::Link { port, up } => match self.entry(port).and_then(|e| e.port.clone()) {
                Some(p) => Action::Link(p, up),
                None => Action::Nothing,
            },
        }
    }

    fn schedule_timer(&mut self, port: PortId, at_ns: u64, token: u64) -> TimerId {
        let now = self.sync_clock();
        let id = self.seq;
        let at = at_ns.max(now);
        self.pending_timers.insert(
            id,
            Live {
                entry: id,
                entry_at: at,
            },
        );
        self.push(at, EventKind::Timer { port, token, id });
        TimerId(id)
    }

    fn cancel_timer(&mut self, id: TimerId) -> bool {
        let Some(live) = self.pending_timers.remove(&id.0) else {
            return false;
        };
        if live.entry != id.0 {
            self.carried.remove(&live.entry);
        }
        self.cancelled_timers.insert(live.entry);
        self.compact_cancelled();
        true
    }

    /// Cancels `old` and schedules `port`'s timer `token` at `at_ns`, with the same outcome
    /// as [`cancel_timer`](Self::cancel_timer) then [`schedule_timer`](Self::schedule_timer):
    /// the new timer gets the next sequence number and fires at `(at_ns, id)` in the queue's
    /// order. A requester re-arms on every response packet, so when `old`'s queue entry is due
    /// no later than the new time, the new timer rides on that entry instead of entering the
    /// queue (and the cancelled entry staying there): when the entry comes out, the timer is
    /// queued under its own `(time, id)`. Nothing can come out between the entry and that key
    /// that would not have come out first anyway (the entry's key is the smaller: its time is
    /// not later and its id is older), so every event is handled in the same order.
    fn rearm_timer(
        &mut self,
        old: Option<TimerId>,
        port: PortId,
        at_ns: u64,
        token: u64,
    ) -> TimerId {
        let now = self.sync_clock();
        let at = at_ns.max(now);
        let live = old.and_then(|o| Some((o, *self.pending_timers.get(&o.0)?)));
        let Some((old, live)) = live.filter(|(_, l)| l.entry_at <= at) else {
            if let Some(old) = old {
                self.cancel_timer(old);
            }
            return self.schedule_timer(port, at, token);
        };
        self.pending_timers.remove(&old.0);
        let id = self.seq;
        self.seq += 1;
        self.pending_timers.insert(id, live);
        self.carried.insert(
            live.entry,
            Carried {
                at,
                id,
                port,
                token,
            },
        );
        TimerId(id)
    }

    /// If queue entry `entry` carries a re-armed timer, queues that timer under its own key
    /// and returns true (the entry itself is spent).
    fn release_carried(&mut self, entry: u64) -> bool {
        let Some(c) = self.carried.remove(&entry) else {
            return false;
        };
        if let Some(live) = self.pending_timers.get_mut(&c.id) {
            *live = Live {
                entry: c.id,
                entry_at: c.at,
            };
        }
        // Not `push`: the sequence number was taken when the timer was re-armed.
        self.queue.push(Event {
            at: c.at,
            seq: c.id,
            kind: EventKind::Timer {
                port: c.port,
                token: c.token,
                id: c.id,
            },
        });
        true
    }

    /// Drops cancelled timers from the queue once they are most of it. A requester re-arms
    /// its retry timer on every response, and a cancelled timer used to stay queued until its
    /// (distant) deadline: with a window kept full and the clock barely moving, the queue grew
    /// with every request ever sent. Events come out in (time, sequence) order, a total order,
    /// so rebuilding the heap cannot change what is delivered when.
    fn compact_cancelled(&mut self) {
        let cancelled = self.cancelled_timers.len();
        if cancelled < 64 || cancelled * 2 < self.queue.len() {
            return;
        }
        let gone = &self.cancelled_timers;
        self.queue.retain(|e| match e.kind {
            EventKind::Timer { id, .. } => !gone.contains(&id),
            _ => true,
        });
        // Cleared, not replaced: the set keeps its capacity instead of regrowing (rehashing
        // and allocating) from empty after every compaction.
        self.cancelled_timers.clear();
    }

    fn next_event_time(&mut self) -> Option<u64> {
        // Cancelled timers stay in the heap until they reach the top; discard them here.
        while let Some(top) = self.queue.peek() {
            match top.kind {
                EventKind::Timer { id, .. } if self.cancelled_timers.contains(&id) => {
                    self.queue.pop();
                    self.cancelled_timers.remove(&id);
                }
                EventKind::Timer { id, .. } if self.carried.contains_key(&id) => {
                    self.queue.pop();
                    self.release_carried(id);
                }
                _ => return Some(top.at),
            }
        }
        None
    }
}

/// Flips one byte (see [`FaultConfig::corrupt`]).
fn corrupt_frame(rng: &mut Rng, frame: &mut [u8]) {
    let region = match RocePacket::parse_with_layout(frame) {
        Ok((_, l)) => Some((l.transport.start, l.icrc.end, Some(l.transport.start + 4))),
        Err(_) if frame.len() > 12 => Some((12, frame.len(), None)),
        Err(_) if !frame.is_empty() => Some((0, frame.len(), None)),
        Err(_) => None,
    };
    let Some((start, end, skip)) = region else {
        return;
    };
    let span = (end - start) as u64 - u64::from(skip.is_some());
    // CAST: below(span) < span <= frame.len().
    let mut i = start + rng.below(span) as usize;
    if skip.is_some_and(|s| i >= s) {
        i += 1;
    }
    // CAST: 1..=255.
    let x = 1 + rng.below(255) as u8;
    if let Some(b) = frame.get_mut(i) {
        *b ^= x;
    }
}

/// A cheap, clonable reference to a fabric for ports: transmit, time, timers. It does not keep
/// the fabric alive; once the [`Fabric`] is dropped every call is a no-op.
#[derive(Clone)]
pub struct FabricHandle {
    shared: Weak<Shared>,
}

impl core::fmt::Debug for FabricHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FabricHandle").finish_non_exhaustive()
    }
}

impl FabricHandle {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        let s = self.shared.upgrade()?;
        let (r, sleeping) = {
            let mut state = s.lock();
            let r = f(&mut state);
            (r, state.sleepers > 0)
        };
        if sleeping {
            s.cv.notify_all();
        }
        Some(r)
    }

    /// Sends `frame` (a complete Ethernet frame) from port `from`; routed by destination MAC
    /// and delivered after the latency and faults. Unroutable frames are counted as dropped.
    pub fn transmit(&self, from: PortId, frame: Vec<u8>) {
        self.with(|s| s.transmit(from, frame));
    }

    /// [`transmit`](Self::transmit)s each of `frames` in order under one lock (a READ's
    /// responses: one lock round trip per READ instead of per packet).
    pub fn transmit_all(&self, from: PortId, frames: impl Iterator<Item = Vec<u8>>) {
        self.with(|s| {
            for f in frames {
                s.transmit(from, f);
            }
        });
    }

    /// Current virtual time (0 if the fabric is gone).
    pub fn now_ns(&self) -> u64 {
        self.with(State::sync_clock).unwrap_or(0)
    }

    /// A buffer for a frame, from the pool of delivered frames' buffers when it has one: it
    /// keeps its capacity and its old contents (clear it, or overwrite every byte). Build the
    /// frame in it and [`transmit`](Self::transmit) it.
    pub fn frame_buffer(&self) -> Vec<u8> {
        take_buffer()
    }

    /// Returns a frame buffer the port is done with (a received frame's copy) to the pool.
    pub fn recycle(&self, frame: Vec<u8>) {
        recycle_buffer(frame);
    }

    /// Calls `port`'s [`FabricPort::on_timer`] with `token` at `at_ns` (now, if in the past).
    pub fn schedule_timer(&self, port: PortId, at_ns: u64, token: u64) -> TimerId {
        self.with(|s| s.schedule_timer(port, at_ns, token))
            .unwrap_or(TimerId(u64::MAX))
    }

    /// Cancels `old` (if any) and schedules `port`'s timer `token` `delay_ns` from now, in one
    /// call: a requester re-arms its retry timer on every response packet, and three calls
    /// (cancel, now, schedule) cost three lock round trips.
    pub fn rearm_timer(
        &self,
        old: Option<TimerId>,
        port: PortId,
        delay_ns: u64,
        token: u64,
    ) -> TimerId {
        self.with(|s| {
            let at = s.sync_clock().saturating_add(delay_ns);
            s.rearm_timer(old, port, at, token)
        })
        .unwrap_or(TimerId(u64::MAX))
    }

    /// Cancels a pending timer; false if it already fired or was cancelled.
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        self.with(|s| s.cancel_timer(id)).unwrap_or(false)
    }

    /// Whether `port`'s link is up.
    pub fn link_up(&self, port: PortId) -> bool {
        self.with(|s| s.entry(port).is_some_and(|e| e.up))
            .unwrap_or(false)
    }

    /// The unicast addresses frames reach `port` by: `macs[0]` replaces the MAC read at
    /// attach time, the rest are aliases (a vNIC whose guest changed its MAC while its RDMA
    /// function keeps the old one, vmxnet3.md P2). An empty list changes nothing.
    pub fn set_port_macs(&self, port: PortId, macs: &[[u8; 6]]) {
        let Some((&first, rest)) = macs.split_first() else {
            return;
        };
        self.with(|s| {
            if let Some(e) = s.ports.get_mut(port.idx()) {
                e.mac = first;
                e.aliases = rest.iter().copied().filter(|m| *m != first).collect();
            }
        });
    }
}

/// The fabric. See the module documentation.
pub struct Fabric {
    shared: Arc<Shared>,
    /// Handed to the callbacks `step` and `advance_to` run.
    handle: FabricHandle,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl core::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fabric")
            .field("now_ns", &self.now_ns())
            .finish_non_exhaustive()
    }
}

impl Fabric {
    /// An empty fabric at time 0 whose fault rolls derive from `seed`.
    pub fn new(seed: u64) -> Self {
        let state = State {
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            ports: Vec::new(),
            pair_faults: PairTable::default(),
            pairs: PairTable::default(),
            rng: Rng::new(seed),
            latency_ns: DEFAULT_LATENCY_NS,
            pending_timers: HashMap::default(),
            cancelled_timers: HashSet::default(),
            carried: HashMap::default(),
            capture: None,
            capture_errors: 0,
            clock: None,
            stop: false,
            in_callback: 0,
            sleepers: 0,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cv: Condvar::new(),
        });
        Self {
            handle: FabricHandle {
                shared: Arc::downgrade(&shared),
            },
            shared,
            thread: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// A handle for ports.
    pub fn handle(&self) -> FabricHandle {
        FabricHandle {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Attaches a port (link up) and returns its id.
    pub fn attach(&self, port: Arc<dyn FabricPort>) -> PortId {
        let mac = port.mac();
        let mut s = self.lock();
        // CAST: more than 2^32 ports is not a simulation this crate supports.
        let id = PortId(s.ports.len() as u32);
        s.ports.push(PortEntry {
            port: Some(port),
            mac,
            aliases: Vec::new(),
            up: true,
            egress: FaultConfig::none(),
            ingress: FaultConfig::none(),
            counters: PortCounters::default(),
        });
        id
    }

    /// Builds a port that knows its id and a handle, then attaches it.
    pub fn attach_with<P: FabricPort + 'static>(
        &self,
        build: impl FnOnce(PortId, FabricHandle) -> Arc<P>,
    ) -> (PortId, Arc<P>) {
        let expected = PortId(self.lock().ports.len() as u32);
        let p = build(expected, self.handle());
        let id = self.attach(p.clone());
        debug_assert_eq!(id, expected, "attach_with raced with another attach");
        (id, p)
    }

    /// Detaches a port: later frames to it are dropped (`no_route`), its timers are discarded,
    /// and the fabric releases its `Arc`.
    pub fn detach(&self, port: PortId) {
        if let Some(e) = self.lock().ports.get_mut(port.idx()) {
            e.port = None;
        }
    }

    /// Sets the one-way latency every frame takes (default [`DEFAULT_LATENCY_NS`]).
    pub fn set_latency_ns(&self, ns: u64) {
        self.lock().latency_ns = ns;
    }

    /// See [`FabricHandle::transmit`].
    pub fn transmit(&self, from: PortId, frame: Vec<u8>) {
        self.handle().transmit(from, frame);
    }

    /// See [`FabricHandle::schedule_timer`].
    pub fn schedule_timer(&self, port: PortId, at_ns: u64, token: u64) -> TimerId {
        self.handle().schedule_timer(port, at_ns, token)
    }

    /// See [`FabricHandle::cancel_timer`].
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        self.handle().cancel_timer(id)
    }

    /// Current virtual time.
    pub fn now_ns(&self) -> u64 {
        self.lock().sync_clock()
    }

    /// Handles the next event (advancing time to it); false if the queue is empty.
    pub fn step(&self) -> bool {
        let action = self.lock().pop_ready(None);
        match action {
            Some(a) => {
                a.run(&self.handle);
                true
            }
            None => false,
        }
    }

    /// Steps until no event is left; returns how many were handled. A port that re-arms a
    /// timer on every expiry never lets this return: use [`advance_to`](Self::advance_to).
    pub fn run_until_idle(&self) -> usize {
        let mut n = 0;
        while self.step() {
            n += 1;
        }
        n
    }

    /// Handles every event due at or before `t_ns` (including those the callbacks queue for
    /// that window), then sets the time to `t_ns` if it is later. Returns the events handled.
    pub fn advance_to(&self, t_ns: u64) -> usize {
        let mut n = 0;
        loop {
            let action = self.lock().pop_ready(Some(t_ns));
            match action {
                Some(a) => {
                    a.run(&self.handle);
                    n += 1;
                }
                None => break,
            }
        }
        let mut s = self.lock();
        s.now = s.now.max(t_ns);
        n
    }

    /// Time of the next pending event.
    pub fn next_event_time(&self) -> Option<u64> {
        self.lock().next_event_time()
    }

    /// True when no event is queued (cancelled timers aside) and the delivery thread is not
    /// inside a port callback: nothing is in flight. A harness waits for this, together with
    /// the devices' [`crate::Device::is_idle`], instead of sleeping.
    pub fn is_idle(&self) -> bool {
        let s = self.lock();
        // Cancelled timers are a subset of the queued ones until they are discarded.
        s.queue.len() == s.cancelled_timers.len() && s.in_callback == 0
    }

    /// Number of pending events (cancelled timers not yet discarded included).
    pub fn pending_events(&self) -> usize {
        self.lock().queue.len()
    }

    /// Brings `port`'s link up or down. On a change the port is notified through
    /// [`FabricPort::link_changed`] as an event at the current time; while down, frames from
    /// or to it (in flight included) are dropped.
    pub fn set_link(&self, port: PortId, up: bool) {
        let mut s = self.lock();
        let now = s.sync_clock();
        let Some(e) = s.ports.get_mut(port.idx()) else {
            return;
        };
        if e.up != up {
            e.up = up;
            s.push(now, EventKind::Link { port, up });
            self.shared.cv.notify_all();
        }
    }

    /// Whether `port`'s link is up.
    pub fn link_up(&self, port: PortId) -> bool {
        self.lock().entry(port).is_some_and(|e| e.up)
    }

    /// Faults for frames from `from` to `to` (not the reverse direction).
    pub fn set_pair_faults(&self, from: PortId, to: PortId, cfg: FaultConfig) {
        *self.lock().pair_faults.entry(from, to) = Some(cfg);
    }

    /// Faults for every frame `port` sends.
    pub fn set_egress_faults(&self, port: PortId, cfg: FaultConfig) {
        if let Some(e) = self.lock().ports.get_mut(port.idx()) {
            e.egress = cfg;
        }
    }

    /// Faults for every frame sent to `port`.
    pub fn set_ingress_faults(&self, port: PortId, cfg: FaultConfig) {
        if let Some(e) = self.lock().ports.get_mut(port.idx()) {
            e.ingress = cfg;
        }
    }

    /// Removes every fault configuration.
    pub fn clear_faults(&self) {
        let mut s = self.lock();
        s.pair_faults = PairTable::default();
        for e in &mut s.ports {
            e.egress = FaultConfig::none();
            e.ingress = FaultConfig::none();
        }
    }

    /// Counters of `port` (zero for an unknown id).
    pub fn counters(&self, port: PortId) -> PortCounters {
        self.lock()
            .entry(port)
            .map(|e| e.counters)
            .unwrap_or_default()
    }

    /// Counters of the ordered pair `from → to`.
    pub fn pair_counters(&self, from: PortId, to: PortId) -> PairCounters {
        self.lock().pairs.get(from, to).copied().unwrap_or_default()
    }

    /// Starts capturing delivered frames; returns the previous writer.
    pub fn set_capture(
        &self,
        w: Option<PcapWriter<Box<dyn Write + Send>>>,
    ) -> Option<PcapWriter<Box<dyn Write + Send>>> {
        core::mem::replace(&mut self.lock().capture, w)
    }

    /// Capture writes that failed (the frames are still delivered).
    pub fn capture_errors(&self) -> u64 {
        self.lock().capture_errors
    }

    /// Starts the delivery thread; false if one is already running. Do not call
    /// [`step`](Self::step) / [`advance_to`](Self::advance_to) while it runs: callbacks would
    /// then run on two threads at once.
    pub fn run_threaded(&self, mode: ThreadMode) -> bool {
        let mut t = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if t.is_some() {
            return false;
        }
        {
            let mut s = self.lock();
            s.stop = false;
            if let ThreadMode::ScaledReal { scale } = mode {
                let base_ns = s.now;
                s.clock = Some(RealClock {
                    start: Instant::now(),
                    base_ns,
                    scale: scale.max(1e-9),
                });
            }
        }
        let shared = self.shared.clone();
        *t = Some(std::thread::spawn(move || delivery_thread(&shared)));
        true
    }

    /// Stops and joins the delivery thread (events not yet due stay queued); virtual time
    /// stays where it is. No-op if none is running.
    pub fn stop(&self) {
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            self.lock().stop = true;
            self.shared.cv.notify_all();
            let _ = h.join();
            let mut s = self.lock();
            s.sync_clock();
            s.clock = None;
            s.stop = false;
        }
    }

    /// Whether the delivery thread runs.
    pub fn is_threaded(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Longest single wait of the scaled-real thread, so a clock or scale oddity cannot stall it.
const MAX_WAIT: Duration = Duration::from_millis(50);

fn delivery_thread(shared: &Arc<Shared>) {
    let handle = FabricHandle {
        shared: Arc::downgrade(shared),
    };
    let mut s = shared.lock();
    loop {
        if s.stop {
            return;
        }
        let now = s.sync_clock();
        let limit = if s.clock.is_some() { Some(now) } else { None };
        if let Some(action) = s.pop_ready(limit) {
            s.in_callback += 1;
            drop(s);
            action.run(&handle);
            s = shared.lock();
            s.in_callback -= 1;
            continue;
        }
        let wait = match (s.next_event_time(), &s.clock) {
            (Some(t), Some(c)) => {
                // CAST: f64 ns → u64 saturates; rounded up so the event is due on wake-up.
                let real = ((t.saturating_sub(now)) as f64 / c.scale).ceil() as u64;
                Duration::from_nanos(real.max(1)).min(MAX_WAIT)
            }
            _ => MAX_WAIT,
        };
        s.sleepers += 1;
        s = shared
            .cv
            .wait_timeout(s, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
        s.sleepers -= 1;
    }
}

#[cfg(test)]
mod tests;
