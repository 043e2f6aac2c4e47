//! RoCEv2 transport of the device model: RC requester and responder, UD/GSI, timers and the
//! fabric port (reference §14; M22, M23, M28, M30, M31, M34-M37, M42, M46; frames per cm.md §7).
//!
//! A [`RoceTransport`] is installed in a [`Device`] with `Device::set_transport` and a
//! [`DevicePort`] is attached to the [`crate::fabric::Fabric`] with the device's MAC. Both share
//! one [`PortLink`]: the port hands what the fabric delivers (frames, timer expiries, link
//! changes) to the device (`Device::transport_input`), which queues it in the transport and
//! runs a pass on the calling thread under one lock; the pass polls the transport, which
//! answers through the fabric handle. So frames are handled in fabric event order in both the
//! deterministic and the threaded mode.
//!
//! Addressing: RC frames go to the QP's `ah_attr.dmac` / `dgid`, from GID table entry
//! `sgid_index`; UD/GSI frames to the AV's `dmac` / `dgid` / `remote_qpn` from entry
//! `gid_index` (M37). IPv4-mapped GIDs select IPv4 framing, others IPv6. Received frames must
//! parse (ICRC included) and name one of the device's bound GIDs (M38), else they are dropped.
#![deny(unsafe_code)]

mod requester;
mod responder;
mod ud;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use crate::device::{Core, Device, Transport, TransportInput};
use crate::fabric::{FabricHandle, FabricPort, PortId, TimerId};
use crate::qp::{QpState, QpType};
use crate::wire::opcode as op;
use crate::wire::roce::{Gid, RocePacket};
use crate::wire::{BthRepr, ExtRepr, Psn};

use requester::Requester;
use responder::Responder;

/// Transport statistics of one device (all counts since creation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportCounters {
    /// Frames handed to the fabric.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames received and parsed.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames that did not parse (bad ICRC, truncated, unknown opcode).
    pub rx_malformed: u64,
    /// Frames for an unbound GID, unknown QP, wrong QP type or a QP not accepting packets (M34).
    pub rx_dropped: u64,
    /// Request packets sent again (timeouts, sequence NAKs, RNR retries).
    pub retransmits: u64,
    /// Retries consumed from `retry_cnt` (timeouts + sequence NAKs).
    pub retries: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// RNR retries (after the RNR timer).
    pub rnr_retries: u64,
    /// ACKs sent (responder).
    pub acks_sent: u64,
    /// ACKs received (requester).
    pub acks_received: u64,
    /// NAKs sent other than RNR (responder), sequence NAKs included.
    pub naks_sent: u64,
    /// Of those, PSN sequence error NAKs.
    pub seq_naks_sent: u64,
    /// NAKs received other than RNR (requester).
    pub naks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Duplicate requests seen by the responder (re-ACKed or READs re-executed).
    pub duplicates: u64,
    /// UD/GSI messages dropped silently (empty RQ, small buffer, Q_Key mismatch).
    pub ud_dropped: u64,
    /// Frames that could not be built (no GID at the source index, mixed address families).
    pub tx_errors: u64,
}

/// State shared between a device's [`RoceTransport`] and its [`DevicePort`].
pub struct PortLink {
    mac: [u8; 6],
    fabric: FabricHandle,
    port: PortId,
    /// The transport's counts as last published ([`PortLink::counters`] asks for them).
    published: Mutex<TransportCounters>,
    /// Set once by [`attach`]; [`PortLink::counters`] asks the device to publish through it.
    device: OnceLock<Weak<Device>>,
    read_delay_ns: AtomicU64,
    /// Set when the device is function 1 of a slot (vmxnet3.md P3): frames are dropped
    /// while the slot holds the RDMA function quiesced.
    coupling: OnceLock<Arc<crate::slot::Coupling>>,
}

impl std::fmt::Debug for PortLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortLink")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PortLink {
    /// A link for the port `port` of the fabric behind `fabric`, with the device's MAC.
    pub fn new(mac: [u8; 6], port: PortId, fabric: FabricHandle) -> Arc<Self> {
        Arc::new(Self {
            mac,
            fabric,
            port,
            published: Mutex::new(TransportCounters::default()),
            device: OnceLock::new(),
            read_delay_ns: AtomicU64::new(0),
            coupling: OnceLock::new(),
        })
    }

    /// Joins the link to its slot's coupling (vmxnet3.md P3); later calls are ignored.
    pub fn set_coupling(&self, c: Arc<crate::slot::Coupling>) {
        let _ = self.coupling.set(c);
    }

    /// Whether the slot holds the RDMA function quiesced: its frames go nowhere.
    fn held(&self) -> bool {
        self.coupling.get().is_some_and(|c| c.held())
    }

    /// The fabric port id.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Snapshot of the transport counters. The transport counts privately and publishes on
    /// request, under the device lock, so a packet costs no lock for its counts.
    pub fn counters(&self) -> TransportCounters {
        if let Some(d) = self.device.get().and_then(Weak::upgrade) {
            d.publish_transport();
        }
        *relock(&self.published)
    }

    /// Test option (M36): hold every READ response this device sends for `ns` virtual
    /// nanoseconds, so later ACKs overtake it and a missing FENCE shows. 0 = off.
    pub fn set_read_response_delay(&self, ns: u64) {
        self.read_delay_ns.store(ns, Ordering::Relaxed);
    }

    fn read_delay(&self) -> u64 {
        self.read_delay_ns.load(Ordering::Relaxed)
    }

    fn transmit(&self, frame: Vec<u8>) {
        if self.held() {
            if let Some(c) = self.coupling.get() {
                c.count_held();
            }
            self.fabric.recycle(frame);
            return;
        }
        self.fabric.transmit(self.port, frame);
    }

    fn now(&self) -> u64 {
        self.fabric.now_ns()
    }

    fn schedule(&self, at_ns: u64, token: u64) -> TimerId {
        self.fabric.schedule_timer(self.port, at_ns, token)
    }

    fn rearm(&self, old: Option<TimerId>, delay_ns: u64, token: u64) -> TimerId {
        self.fabric.rearm_timer(old, self.port, delay_ns, token)
    }

    fn cancel(&self, id: TimerId) {
        self.fabric.cancel_timer(id);
    }
}

/// The device's Ethernet port on the fabric.
#[derive(Debug)]
pub struct DevicePort {
    link: Arc<PortLink>,
    /// Held strongly, not through the link's `Weak`: upgrading one per input cost two atomic
    /// read-modify-writes. No cycle: the device reaches the fabric only through a `Weak`
    /// handle, so dropping the fabric (or detaching the port) releases the device.
    dev: Arc<Device>,
}

impl DevicePort {
    fn push(&self, i: TransportInput) {
        self.dev.transport_input(i);
        self.dev.wake();
    }
}

impl FabricPort for DevicePort {
    fn mac(&self) -> [u8; 6] {
        self.link.mac
    }
    fn receive(&self, frame: &[u8], _now_ns: u64) {
        let mut copy = self.link.fabric.frame_buffer();
        copy.clear();
        copy.extend_from_slice(frame);
        self.push(TransportInput::Frame(copy));
    }
    fn receive_owned(&self, frame: Vec<u8>, _now_ns: u64, _pool: &FabricHandle) {
        // The transport recycles it after handling (`RoceTransport::poll`).
        self.push(TransportInput::Frame(frame));
    }
    fn on_timer(&self, token: u64, _now_ns: u64) {
        self.push(TransportInput::Timer(token));
    }
    fn link_changed(&self, up: bool) {
        self.push(TransportInput::Link(up));
    }
}

/// Attaches `dev` to `fabric`: installs a [`RoceTransport`] in the device and a [`DevicePort`]
/// with the device's configured MAC on the fabric. Returns the shared link (port id, counters).
pub fn attach(dev: &Arc<Device>, fabric: &crate::fabric::Fabric) -> Arc<PortLink> {
    let mac = dev.with_core(|c| c.mac());
    let (_, port) =
        fabric.attach_with(|id, handle| port_behind(dev, PortLink::new(mac, id, handle)));
    port.link.clone()
}

/// Installs a [`RoceTransport`] over `link` in `dev` and returns the device's port, for a
/// caller that attaches it to the fabric itself or, like a PCI slot's shared port
/// ([`crate::slot`]), hands it the frames that are its own.
pub fn port_behind(dev: &Arc<Device>, link: Arc<PortLink>) -> Arc<DevicePort> {
    let _ = link.device.set(Arc::downgrade(dev));
    dev.set_transport(Box::new(RoceTransport::new(link.clone())));
    Arc::new(DevicePort {
        link,
        dev: dev.clone(),
    })
}

impl DevicePort {
    /// The link (port id, counters).
    pub fn link(&self) -> &Arc<PortLink> {
        &self.link
    }
}

/// Timer token: QP handle in bits 63:32, kind in 31:30, generation in 29:0.
const TIMER_RETRY: u64 = 0;
const TIMER_RNR: u64 = 1;
/// Delayed READ responses (M36 test option); QP bits unused.
const TIMER_DELAYED: u64 = 2;

fn timer_token(qp: u32, kind: u64, generation: u64) -> u64 {
    (u64::from(qp) << 32) | (kind << 30) | (generation & 0x3FFF_FFFF)
}

/// Per-QP transport state.
#[derive(Debug, Default)]
struct QpTransport {
    req: Option<Requester>,
    resp: Option<Responder>,
}

/// The RoCEv2 transport of one device (see the module docs).
#[derive(Debug)]
pub struct RoceTransport {
    link: Arc<PortLink>,
    qps: BTreeMap<u32, QpTransport>,
    pump: BTreeSet<u32>,
    generation: u64,
    /// Frames held by the READ response delay, by timer generation.
    delayed: BTreeMap<u64, Vec<Vec<u8>>>,
    /// The counters as this transport keeps them, published to [`PortLink::counters`] when it
    /// asks ([`Transport::publish`]), not under a lock per packet. Only this transport counts,
    /// always with the device locked, so the published copy is a plain overwrite.
    counts: Cell<TransportCounters>,
    /// `counts` changed since the last publication.
    counts_dirty: Cell<bool>,
    /// Inputs from the fabric, handled by the next poll in arrival order. They are queued
    /// under the device lock ([`Device::transport_input`]), like everything else here.
    inbox: VecDeque<TransportInput>,
    /// A READ's response frames, built before any is transmitted (see `read_respond`).
    responses: Vec<Vec<u8>>,
}

/// A QP's state without copying its whole `QpInfo` (attributes included): the transport asks
/// several times per packet.
fn qp_state(core: &Core, qp: u32) -> Option<QpState> {
    core.qps.get(qp).map(|q| q.state)
}

/// Path MTU enum (1..5) in bytes; out-of-range values clamp.
fn mtu_bytes(path_mtu: u32) -> usize {
    256usize << (path_mtu.clamp(1, 5) - 1)
}

/// Addressing of outgoing frames.
#[derive(Clone, Copy, Debug)]
struct Route {
    dmac: [u8; 6],
    sgid: Gid,
    dgid: Gid,
    traffic_class: u8,
    hop_limit: u8,
    udp_src: u16,
}

impl RoceTransport {
    /// A transport using `link` (see [`attach`]).
    pub fn new(link: Arc<PortLink>) -> Self {
        Self {
            link,
            qps: BTreeMap::new(),
            pump: BTreeSet::new(),
            generation: 0,
            delayed: BTreeMap::new(),
            counts: Cell::new(TransportCounters::default()),
            counts_dirty: Cell::new(false),
            inbox: VecDeque::new(),
            responses: Vec::new(),
        }
    }

    fn count(&self, f: impl FnOnce(&mut TransportCounters)) {
        let mut c = self.counts.get();
        f(&mut c);
        self.counts.set(c);
        self.counts_dirty.set(true);
    }

    /// Makes the counts visible to [`PortLink::counters`].
    fn publish_counts(&self) {
        if self.counts_dirty.replace(false) {
            *relock(&self.link.published) = self.counts.get();
        }
    }

    fn transmit(&self, frame: Vec<u8>) {
        self.count_tx(&frame);
        self.link.transmit(frame);
    }

    fn count_tx(&self, frame: &[u8]) {
        self.count(|c| {
            c.tx_packets += 1;
            c.tx_bytes += frame.len() as u64;
        });
    }

    /// Transmits `frames` in order, as many [`transmit`](Self::transmit)s would, under one
    /// fabric lock; leaves `frames` empty (its capacity is kept for the next batch).
    fn transmit_all(&self, frames: &mut Vec<Vec<u8>>) {
        for f in frames.iter() {
            self.count_tx(f);
        }
        if self.link.held() {
            for f in frames.drain(..) {
                if let Some(c) = self.link.coupling.get() {
                    c.count_held();
                }
                self.link.fabric.recycle(f);
            }
            return;
        }
        self.link
            .fabric
            .transmit_all(self.link.port, frames.drain(..));
    }

    fn next_gen(&mut self) -> u64 {
        self.generation = self.generation.wrapping_add(1) & 0x3FFF_FFFF;
        self.generation
    }

    /// Builds and transmits one frame; counts a build failure.
    fn send_frame(&self, core: &Core, route: &Route, bth: BthRepr, ext: ExtRepr, payload: &[u8]) {
        if let Some(f) = self.build_frame(core, route, bth, ext, payload) {
            self.transmit(f);
        }
    }

    /// Emits a frame; `None` (counted) if it cannot be built.
    fn build_frame(
        &self,
        core: &Core,
        route: &Route,
        bth: BthRepr,
        ext: ExtRepr,
        payload: &[u8],
    ) -> Option<Vec<u8>> {
        let p = Self::packet(core, route, bth, ext, payload);
        // A pooled buffer keeps its old bytes: `emit_into` writes every byte of the frame, so
        // only growth needs filling.
        let mut frame = self.link.fabric.frame_buffer();
        frame.resize(p.buffer_len(), 0);
        let emitted = p.emit_into(&mut frame);
        self.finish_frame(frame, emitted)
    }

    /// As [`build_frame`](Self::build_frame) with a payload of `len` bytes that `fill` writes
    /// straight into the frame (a READ response's memory read: no staging buffer, no copy).
    /// `Err` if `fill` fails; `Ok(None)` (counted) if the frame cannot be built.
    fn build_frame_filled(
        &self,
        core: &mut Core,
        route: &Route,
        bth: BthRepr,
        ext: ExtRepr,
        len: usize,
        fill: impl FnOnce(&mut Core, &mut [u8]) -> bool,
    ) -> Result<Option<Vec<u8>>, ()> {
        /// Stands in for the payload in the length computations; never copied.
        static PLACEHOLDER: [u8; 4096] = [0; 4096];
        let Some(placeholder) = PLACEHOLDER.get(..len) else {
            // Longer than any MTU: stage it as before.
            let mut staged = vec![0; len];
            if !fill(core, &mut staged) {
                return Err(());
            }
            return Ok(self.build_frame(core, route, bth, ext, &staged));
        };
        let p = Self::packet(core, route, bth, ext, placeholder);
        let mut frame = self.link.fabric.frame_buffer();
        frame.resize(p.buffer_len(), 0);
        let at = p.payload_offset();
        let filled = frame
            .get_mut(at..at + len)
            .is_some_and(|payload| fill(core, payload));
        if !filled {
            self.link.fabric.recycle(frame);
            return Err(());
        }
        let emitted = p.emit_around_payload(&mut frame);
        Ok(self.finish_frame(frame, emitted))
    }

    fn packet<'a>(
        core: &Core,
        route: &Route,
        bth: BthRepr,
        ext: ExtRepr,
        payload: &'a [u8],
    ) -> RocePacket<'a> {
        RocePacket {
            src_mac: core.mac(),
            dst_mac: route.dmac,
            vlan: None,
            src_gid: route.sgid,
            dst_gid: route.dgid,
            traffic_class: route.traffic_class,
            hop_limit: route.hop_limit,
            flow_label: 0,
            ip_ident: 0,
            udp_src_port: route.udp_src,
            bth,
            ext,
            payload,
        }
    }

    fn finish_frame(
        &self,
        mut frame: Vec<u8>,
        emitted: crate::wire::Result<usize>,
    ) -> Option<Vec<u8>> {
        match emitted {
            Ok(n) => {
                frame.truncate(n);
                Some(frame)
            }
            Err(_) => {
                self.link.fabric.recycle(frame);
                self.count(|c| c.tx_errors += 1);
                None
            }
        }
    }

    /// The RC route of a QP from its `ah_attr`; `None` if the source GID is not bound.
    fn rc_route(core: &Core, qp: u32) -> Option<Route> {
        let i = core.qp_info(qp)?;
        let ah = i.attr.ah_attr;
        let sgid = core.gid(u32::from(ah.sgid_index))?.gid;
        Some(Route {
            dmac: ah.dmac,
            sgid,
            dgid: ah.dgid,
            traffic_class: ah.traffic_class,
            hop_limit: if ah.hop_limit == 0 { 64 } else { ah.hop_limit },
            udp_src: 0xC000 | (i.qpn & 0x3FFF) as u16,
        })
    }

    fn bth(opcode: u8, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Drops transport state of QPs that left the states the transport serves.
    fn sync_qp(&mut self, core: &mut Core, qp: u32) {
        let st = qp_state(core, qp);
        let keep_req = st == Some(QpState::Rts);
        let keep_resp = matches!(st, Some(QpState::Rtr | QpState::Rts));
        if let Some(t) = self.qps.get_mut(&qp) {
            if !keep_req && let Some(r) = t.req.take() {
                r.cancel_timers(&self.link);
            }
            if !keep_resp {
                t.resp = None;
            }
            if t.req.is_none() && t.resp.is_none() && st.is_none_or(|s| s != QpState::Rtr) {
                self.qps.remove(&qp);
            }
        }
    }

    fn sync_all(&mut self, core: &mut Core) {
        // Walks the keys without collecting them (this runs once per frame): `sync_qp` may
        // remove the current key, so the next one is looked up after it.
        let mut next = self.qps.keys().next().copied();
        while let Some(h) = next {
            self.sync_qp(core, h);
            next = h
                .checked_add(1)
                .and_then(|after| self.qps.range(after..).next().map(|(&k, _)| k));
        }
    }

    fn handle_frame(&mut self, core: &mut Core, frame: &[u8]) {
        let pkt = match RocePacket::parse(frame) {
            Ok(p) => p,
            Err(_) => {
                self.count(|c| c.rx_malformed += 1);
                return;
            }
        };
        self.count(|c| {
            c.rx_packets += 1;
            c.rx_bytes += frame.len() as u64;
        });
        if !core.gids.iter().flatten().any(|g| g.gid == pkt.dst_gid) {
            self.count(|c| c.rx_dropped += 1);
            return;
        }
        let opcode = pkt.bth.opcode;
        let Some(qp) = core.qp_by_qpn(pkt.bth.dest_qp) else {
            self.count(|c| c.rx_dropped += 1);
            return;
        };
        let Some(info) = core.qp_info(qp) else {
            return;
        };
        let is_ud = matches!(info.ty, QpType::Ud | QpType::Gsi);
        let ud_opcode = matches!(opcode, op::UD_SEND_ONLY | op::UD_SEND_ONLY_WITH_IMMEDIATE);
        // M34: RESET, INIT and ERR drop everything.
        if is_ud != ud_opcode || !matches!(info.state, QpState::Rtr | QpState::Rts) {
            self.count(|c| c.rx_dropped += 1);
            return;
        }
        if is_ud {
            self.ud_receive(core, qp, &pkt, frame);
            return;
        }
        let is_response = matches!(
            opcode,
            op::RC_ACKNOWLEDGE
                | op::RC_RDMA_READ_RESPONSE_FIRST
                | op::RC_RDMA_READ_RESPONSE_MIDDLE
                | op::RC_RDMA_READ_RESPONSE_LAST
                | op::RC_RDMA_READ_RESPONSE_ONLY
        );
        if is_response {
            if info.state != QpState::Rts {
                self.count(|c| c.rx_dropped += 1);
                return;
            }
            self.req_response(core, qp, &pkt);
        } else {
            self.resp_request(core, qp, &pkt);
        }
        self.sync_qp(core, qp);
    }

    fn handle_timer(&mut self, core: &mut Core, token: u64) {
        let qp = (token >> 32) as u32;
        let kind = (token >> 30) & 3;
        let generation = token & 0x3FFF_FFFF;
        match kind {
            TIMER_RETRY => self.req_timeout(core, qp, generation),
            TIMER_RNR => self.req_rnr_expired(core, qp, generation),
            TIMER_DELAYED => {
                for f in self.delayed.remove(&generation).unwrap_or_default() {
                    self.transmit(f);
                }
            }
            _ => {}
        }
        self.sync_qp(core, qp);
    }
}

impl Transport for RoceTransport {
    fn poll(&mut self, core: &mut Core) -> bool {
        let mut progress = false;
        while let Some(input) = self.inbox.pop_front() {
            progress = true;
            match input {
                TransportInput::Frame(f) => {
                    self.handle_frame(core, &f);
                    self.link.fabric.recycle(f);
                }
                TransportInput::Timer(t) => self.handle_timer(core, t),
                TransportInput::Link(up) => core.set_link(up),
            }
        }
        while let Some(qp) = self.pump.pop_first() {
            if self.req_pump(core, qp) {
                progress = true;
            }
            self.sync_qp(core, qp);
        }
        if progress {
            self.sync_all(core);
        }
        progress
    }

    fn input(&mut self, input: TransportInput) {
        self.inbox.push_back(input);
    }

    fn publish(&self) {
        self.publish_counts();
    }

    fn sq_kick(&mut self, core: &mut Core, qp: u32) {
        let _ = core;
        self.pump.insert(qp);
    }

    fn qp_state_changed(&mut self, core: &mut Core, qp: u32, state: QpState) {
        match state {
            QpState::Rts => {
                self.pump.insert(qp);
            }
            QpState::Reset => {
                if let Some(t) = self.qps.remove(&qp)
                    && let Some(r) = t.req
                {
                    r.cancel_timers(&self.link);
                }
            }
            _ => self.sync_qp(core, qp),
        }
    }

    fn qp_destroyed(&mut self, core: &mut Core, qp: u32) {
        let _ = core;
        if let Some(t) = self.qps.remove(&qp)
            && let Some(r) = t.req
        {
            r.cancel_timers(&self.link);
        }
        self.pump.remove(&qp);
    }

    fn reset(&mut self, core: &mut Core) {
        let _ = core;
        for (_, t) in std::mem::take(&mut self.qps) {
            if let Some(r) = t.req {
                r.cancel_timers(&self.link);
            }
        }
        self.pump.clear();
        self.delayed.clear();
        self.inbox.retain(|i| matches!(i, TransportInput::Link(_)));
    }
}
