//! The host-facing "world": a fabric and N PVRDMA device models joined by the RoCEv2
//! transport (reference §14, §15 M23, M42; frames per cm.md §7), and vNICs: vmxnet3 models,
//! each optionally with a PVRDMA model at function 1 of its slot ([`World::add_vnic`];
//! vmxnet3.md P1–P5). A standalone PVRDMA node ([`World::add_node`]) is the PVRDMA-alone
//! configuration the tests written before the pairing use.
//!
//! Each node has its own host memory ([`DmaSpace`]), a [`Device`] (BAR1/UAR accessors for the
//! driver under test), a MAC and a suggested GID (IPv4-mapped `::ffff:10.0.0.<n>` by default;
//! the driver binds it with CREATE_BIND, M38). The device's transport is attached to the fabric
//! port with the node's MAC.
//!
//! Two modes:
//! - **Deterministic** (default): nothing runs on its own. [`World::step`],
//!   [`World::run_until_idle`] and [`World::advance_time`] interleave, on the calling thread,
//!   each device's doorbell work (`Device::process`) and interrupt delivery
//!   (`Device::deliver_interrupts`, in node order) with the fabric's events in virtual time.
//!   Frames and timers run the receiving device inline. The same seed and the same host
//!   actions replay the same run: identical frames, counters and capture.
//! - **Threaded** ([`World::start_threads`]): every device runs its own thread (doorbells,
//!   interrupts) and the fabric a delivery thread that hands frames and timers to the devices.
//!   Meant for stress tests; ordering between hosts is then up to the scheduler. Call
//!   [`World::stop_threads`] before going back to the deterministic calls.
#![deny(unsafe_code)]

use std::io::Write;
use std::sync::Arc;

use crate::counters::Counters;
use crate::device::Device;
use crate::dma::DmaSpace;
use crate::dsr::DeviceConfig;
use crate::fabric::{Fabric, FaultConfig, PortCounters, PortId, ThreadMode};
use crate::intr::InterruptSink;
use crate::pcap::PcapWriter;
use crate::slot::{RdmaFunction, Slot, SlotConfig, SlotError};
use crate::transport::{self, PortLink, TransportCounters};
use crate::vmxnet3::{Vmxnet3, Vmxnet3Config};
use crate::wire::roce::{Gid, gid_from_ipv4};

/// How one node is built.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Device configuration; its `mac` is the port's MAC.
    pub device: DeviceConfig,
    /// The GID the node's host is expected to bind (its IP address).
    pub gid: Gid,
}

impl NodeConfig {
    /// Node `i` (0-based) with MAC `00:50:56:00:00:<i+1>` and GID `::ffff:10.0.0.<i+1>`.
    pub fn ipv4(i: u8) -> Self {
        let mut device = DeviceConfig::default();
        device.mac[5] = i.wrapping_add(1);
        Self {
            device,
            gid: gid_from_ipv4([10, 0, 0, i.wrapping_add(1)]),
        }
    }

    /// Node `i` with an IPv6 GID `fd00::<i+1>`.
    pub fn ipv6(i: u8) -> Self {
        let mut n = Self::ipv4(i);
        let mut g = [0u8; 16];
        g[0] = 0xFD;
        g[15] = i.wrapping_add(1);
        n.gid = g;
        n
    }
}

/// How one vNIC is built: a vmxnet3 at function 0 and, optionally, a PVRDMA function beside
/// it ([`crate::slot`], model rules P1–P5 of vmxnet3.md).
#[derive(Clone, Debug)]
pub struct VnicConfig {
    /// The slot (vmxnet3 configuration and P2–P4 options); its MAC is the vNIC's.
    pub slot: SlotConfig,
    /// The PVRDMA function: its number (1–7) and node configuration (its MAC is replaced by
    /// the vNIC's).
    pub rdma: Option<(u8, NodeConfig)>,
}

impl VnicConfig {
    /// vNIC `i` (0-based), Ethernet only, MAC `00:50:56:00:00:<i+1>`.
    pub fn ethernet(i: u8) -> Self {
        let mut slot = SlotConfig::default();
        slot.vmxnet3.mac[5] = i.wrapping_add(1);
        Self { slot, rdma: None }
    }

    /// vNIC `i` with a PVRDMA function at function 1 ([`NodeConfig::ipv4`]`(i)`).
    pub fn paired(i: u8) -> Self {
        Self {
            rdma: Some((1, NodeConfig::ipv4(i))),
            ..Self::ethernet(i)
        }
    }

    /// This configuration with a different vmxnet3 configuration (its MAC is kept).
    pub fn with_vmxnet3(mut self, cfg: Vmxnet3Config) -> Self {
        let mac = self.slot.vmxnet3.mac;
        self.slot.vmxnet3 = Vmxnet3Config { mac, ..cfg };
        self
    }
}

/// One vNIC on the fabric.
#[derive(Debug)]
pub struct Vnic {
    slot: Slot,
    node: Option<usize>,
}

impl Vnic {
    /// The slot (both functions, the port, the coupling).
    pub fn slot(&self) -> &Slot {
        &self.slot
    }
    /// The vmxnet3 function.
    pub fn vmxnet3(&self) -> &Arc<Vmxnet3> {
        self.slot.vmxnet3()
    }
    /// The host memory of both functions.
    pub fn dma(&self) -> &Arc<DmaSpace> {
        self.slot.dma()
    }
    /// The vNIC's MAC as configured.
    pub fn mac(&self) -> [u8; 6] {
        self.slot.vmxnet3().with_core(|c| c.config().mac)
    }
    /// The PVRDMA function's node index in the world, if it has one.
    pub fn node(&self) -> Option<usize> {
        self.node
    }
}

/// One device on the fabric.
#[derive(Debug)]
pub struct Node {
    dev: Arc<Device>,
    dma: Arc<DmaSpace>,
    link: Arc<PortLink>,
    gid: Gid,
    mac: [u8; 6],
}

impl Node {
    /// The device (BAR1/UAR accessors, `with_core`).
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }
    /// The node's host memory.
    pub fn dma(&self) -> &Arc<DmaSpace> {
        &self.dma
    }
    /// The fabric port.
    pub fn port(&self) -> PortId {
        self.link.port()
    }
    /// The GID its host should bind.
    pub fn gid(&self) -> Gid {
        self.gid
    }
    /// The port MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }
}

/// Statistics of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Device counters (doorbells, commands, CQEs, events, interrupts per vector).
    pub device: Counters,
    /// Transport counters (packets, bytes, retries, NAKs, RNR NAKs, timeouts).
    pub transport: TransportCounters,
    /// Fabric port counters (frames/bytes per direction, drops by reason).
    pub port: PortCounters,
}

/// A fabric and its devices (see the module docs).
#[derive(Debug)]
pub struct World {
    fabric: Fabric,
    nodes: Vec<Node>,
    vnics: Vec<Vnic>,
    threaded: bool,
}

/// Upper bound of events [`World::run_until_idle`] handles, so an infinite RNR retry loop
/// cannot hang a test.
pub const MAX_IDLE_EVENTS: usize = 5_000_000;

impl World {
    /// An empty world whose fault rolls derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            fabric: Fabric::new(seed),
            nodes: Vec::new(),
            vnics: Vec::new(),
            threaded: false,
        }
    }

    /// `n` IPv4 nodes ([`NodeConfig::ipv4`]).
    pub fn with_nodes(seed: u64, n: u8) -> Self {
        let mut w = Self::new(seed);
        for i in 0..n {
            w.add_node(NodeConfig::ipv4(i));
        }
        w
    }

    /// Adds a device with fresh host memory; returns its index.
    pub fn add_node(&mut self, cfg: NodeConfig) -> usize {
        let dma = Arc::new(DmaSpace::new());
        let mac = cfg.device.mac;
        let dev = Device::new(dma.clone(), cfg.device);
        let link = transport::attach(&dev, &self.fabric);
        self.nodes.push(Node {
            dev,
            dma,
            link,
            gid: cfg.gid,
            mac,
        });
        self.nodes.len() - 1
    }

    /// Adds a vNIC with fresh host memory; returns its index among the vNICs. A PVRDMA
    /// function is also a node (its index is [`Vnic::node`]).
    ///
    /// # Errors
    ///
    /// [`SlotError`] when the PVRDMA function number breaks P1.
    pub fn add_vnic(&mut self, cfg: VnicConfig) -> Result<usize, SlotError> {
        let dma = Arc::new(DmaSpace::new());
        let gid = cfg.rdma.as_ref().map(|(_, n)| n.gid);
        let rdma = cfg.rdma.map(|(function, n)| RdmaFunction {
            function,
            config: n.device,
        });
        let slot = Slot::new(&self.fabric, dma.clone(), cfg.slot, rdma)?;
        if self.threaded {
            slot.vmxnet3().start_thread();
        }
        let node = match (slot.pvrdma(), slot.pvrdma_link(), gid) {
            (Some(dev), Some(link), Some(gid)) => {
                let mac = dev.with_core(|c| c.mac());
                if self.threaded {
                    dev.start_thread();
                }
                self.nodes.push(Node {
                    dev: dev.clone(),
                    dma,
                    link: link.clone(),
                    gid,
                    mac,
                });
                Some(self.nodes.len() - 1)
            }
            _ => None,
        };
        self.vnics.push(Vnic { slot, node });
        Ok(self.vnics.len() - 1)
    }

    /// vNIC `i`. Panics on a bad index (a test bug).
    pub fn vnic(&self, i: usize) -> &Vnic {
        &self.vnics[i]
    }

    /// Number of vNICs.
    pub fn vnic_count(&self) -> usize {
        self.vnics.len()
    }

    /// Link of vNIC `i`'s port up or down (both functions, P4).
    pub fn set_vnic_link(&self, i: usize, up: bool) {
        self.fabric.set_link(self.vnics[i].slot.port(), up);
    }

    /// Node `i`. Panics on a bad index (a test bug).
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True without nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Device of node `i`.
    pub fn device(&self, i: usize) -> &Arc<Device> {
        &self.nodes[i].dev
    }

    /// Host memory of node `i`.
    pub fn dma(&self, i: usize) -> &Arc<DmaSpace> {
        &self.nodes[i].dma
    }

    /// Installs the interrupt sink of node `i`.
    pub fn set_interrupt_sink(&self, i: usize, sink: Arc<dyn InterruptSink>) {
        self.nodes[i].dev.set_interrupt_sink(sink);
    }

    /// The fabric (faults, capture, counters, links).
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// Runs every device's queued work and interrupts until all are idle. Returns true if
    /// anything ran. A device whose latest pass left it settled, untouched since
    /// ([`Device::needs_pass`]), is skipped: the pass would find nothing.
    pub fn run_devices(&self) -> bool {
        let mut any = false;
        for _ in 0..10_000 {
            let mut round = false;
            for n in &self.nodes {
                if !n.dev.needs_pass() {
                    continue;
                }
                let w = n.dev.process();
                let d = n.dev.deliver_interrupts();
                round |= w != 0 || d != 0;
            }
            for v in &self.vnics {
                let vmx = v.slot.vmxnet3();
                if !vmx.needs_pass() {
                    continue;
                }
                let w = vmx.process();
                let d = vmx.deliver_interrupts();
                round |= w != 0 || d != 0;
            }
            if !round {
                break;
            }
            any = true;
        }
        any
    }

    /// Devices until idle, then one fabric event. False if nothing was left to do.
    pub fn step(&self) -> bool {
        let ran = self.run_devices();
        let ev = self.fabric.step();
        if ev {
            self.run_devices();
        }
        ran || ev
    }

    /// Steps until no device work and no fabric event is left (at most [`MAX_IDLE_EVENTS`]
    /// events); returns the fabric events handled. Virtual time runs through every timer, so
    /// retransmission timeouts expire here.
    pub fn run_until_idle(&self) -> usize {
        let mut n = 0;
        self.run_devices();
        while n < MAX_IDLE_EVENTS && self.fabric.step() {
            n += 1;
            self.run_devices();
        }
        n
    }

    /// Handles everything due in the next `ns` virtual nanoseconds, then sets the clock to
    /// the end of the window. Returns the fabric events handled.
    pub fn advance_time(&self, ns: u64) -> usize {
        let end = self.fabric.now_ns().saturating_add(ns);
        let mut n = 0;
        self.run_devices();
        while self.fabric.next_event_time().is_some_and(|t| t <= end) {
            self.fabric.step();
            n += 1;
            self.run_devices();
        }
        self.fabric.advance_to(end);
        self.run_devices();
        n
    }

    /// Current virtual time.
    pub fn now_ns(&self) -> u64 {
        self.fabric.now_ns()
    }

    /// Virtual time of the next fabric event (a frame in flight, a transport timer, a held
    /// READ response, a link notification), None when nothing is queued. A harness that also
    /// keeps its own timers in virtual time advances to the earlier of the two.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.fabric.next_event_time()
    }

    /// Link of node `i` up or down (the device posts PORT_ACTIVE / PORT_ERR, M22).
    pub fn set_link(&self, i: usize, up: bool) {
        self.fabric.set_link(self.nodes[i].port(), up);
    }

    /// Faults for frames from node `from` to node `to`.
    pub fn set_pair_faults(&self, from: usize, to: usize, cfg: FaultConfig) {
        self.fabric
            .set_pair_faults(self.nodes[from].port(), self.nodes[to].port(), cfg);
    }

    /// Faults for every frame node `i` sends.
    pub fn set_egress_faults(&self, i: usize, cfg: FaultConfig) {
        self.fabric.set_egress_faults(self.nodes[i].port(), cfg);
    }

    /// Faults for every frame node `i` receives.
    pub fn set_ingress_faults(&self, i: usize, cfg: FaultConfig) {
        self.fabric.set_ingress_faults(self.nodes[i].port(), cfg);
    }

    /// Removes all faults.
    pub fn clear_faults(&self) {
        self.fabric.clear_faults();
    }

    /// Test option (M36): node `i` holds its READ responses for `ns` virtual nanoseconds.
    pub fn set_read_response_delay(&self, i: usize, ns: u64) {
        self.nodes[i].link.set_read_response_delay(ns);
    }

    /// Counters of node `i`.
    pub fn counters(&self, i: usize) -> NodeCounters {
        let n = &self.nodes[i];
        NodeCounters {
            device: n.dev.counters(),
            transport: n.link.counters(),
            port: self.fabric.counters(n.port()),
        }
    }

    /// Starts a pcap capture of every delivered frame; returns the previous writer.
    pub fn set_capture(
        &self,
        w: Option<PcapWriter<Box<dyn Write + Send>>>,
    ) -> Option<PcapWriter<Box<dyn Write + Send>>> {
        self.fabric.set_capture(w)
    }

    /// Threaded mode: device threads plus the fabric delivery thread (virtual time).
    pub fn start_threads(&mut self) {
        self.start_threads_with(ThreadMode::Virtual);
    }

    /// As [`start_threads`](Self::start_threads), with the fabric's delivery thread in `mode`:
    /// [`ThreadMode::ScaledReal`] at scale 1.0 when a real peer joins the fabric (an external
    /// wire), whose answers take real time.
    pub fn start_threads_with(&mut self, mode: ThreadMode) {
        if self.threaded {
            return;
        }
        self.threaded = true;
        for n in &self.nodes {
            n.dev.start_thread();
        }
        for v in &self.vnics {
            v.slot.vmxnet3().start_thread();
        }
        self.fabric.run_threaded(mode);
    }

    /// Stops the threads started by [`start_threads`](Self::start_threads).
    pub fn stop_threads(&mut self) {
        if !self.threaded {
            return;
        }
        self.fabric.stop();
        for n in &self.nodes {
            n.dev.stop_thread();
        }
        for v in &self.vnics {
            v.slot.vmxnet3().stop_thread();
        }
        self.threaded = false;
    }

    /// True when no frame or timer is in flight on the fabric and every device is idle
    /// ([`Device::is_idle`]); meant for threaded mode, where it can change at any moment.
    pub fn is_idle(&self) -> bool {
        self.fabric.is_idle()
            && self.nodes.iter().all(|n| n.dev.is_idle())
            && self.vnics.iter().all(|v| v.slot.vmxnet3().is_idle())
    }

    /// Whether threaded mode runs.
    pub fn is_threaded(&self) -> bool {
        self.threaded
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_threads();
    }
}
