//! The device model as a Python extension, so the emulated .sys (tools/emu) drives the same
//! `pvrdma_sim::world::World` the host-built provider's tests drive.
//!
//! What the harness gets, per node: BAR1 reads and writes and UAR stores handed to the model's
//! register file and doorbells; DMA memory the harness maps into the emulator with
//! `mem_map_ptr` (page-aligned host memory this module owns and registers in the node's
//! `DmaSpace`: the model and the emulated driver share the pages, no copies); the MSI-X
//! vectors the model raised, queued until the harness drains them and runs the driver's ISR;
//! the deterministic world's clock (`run_devices`, `run_until_idle`, `advance_time`), and the
//! model's counters and live objects for the harness's exact checks.
//!
//! A node is a PCI slot of one of three kinds (`World(kind=...)`): "pvrdma" (a standalone
//! PVRDMA function, 15AD:0820, the configuration the NDK runs use), "vmxnet3" (a vNIC: the
//! vmxnet3 function 15AD:07B0 alone) or "paired" (a vNIC with a PVRDMA function at function 1
//! and the vNIC's one MAC, vmxnet3.md P1-P5). `functions(node)` says which PCI functions the
//! node has (what the harness's NdisMGetBusData answers); the PVRDMA accessors (`bar1_*`,
//! `uar_write`, `take_vectors`, ...) reach the PVRDMA function, the `vmx_*` ones the vmxnet3
//! function (BAR0, BAR1, its MSI-X vectors, counters, filter). Both functions of a paired node
//! share its host memory, as the functions of one slot do.
//!
//! Memory handed out stays valid until `free_dma` or the world is dropped: the harness must
//! unmap it from the emulator first (the emulator would otherwise keep a dangling mapping).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block
)]

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use pvrdma_sim::vmxnet3::Vmxnet3;
use pvrdma_sim::world::{NodeConfig, VnicConfig, World as SimWorld};
use pvrdma_sim::{DmaSpace, InterruptSink};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

const PAGE: usize = 4096;
/// VMware's PCI vendor ID and the two functions' device IDs.
const VMWARE: u16 = 0x15AD;
const PVRDMA_DEVICE: u16 = 0x0820;
const VMXNET3_DEVICE: u16 = 0x07B0;

/// Vectors the model raised for one node, in order, until the harness takes them.
#[derive(Default)]
struct VectorQueue(Mutex<Vec<u32>>);

impl InterruptSink for VectorQueue {
    fn raise(&self, vector: u32) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(vector);
    }
}

/// One block of host memory registered in a node's DMA space.
struct Block {
    host: usize,
    len: usize,
}

/// One GID table entry as `World::gids` returns it: (index, GID, gid_type, mtu).
type GidRow = (u32, [u8; 16], u8, u32);

/// What a node is (the `kind` argument of `World`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pvrdma,
    Vmxnet3,
    Paired,
}

impl Kind {
    fn parse(s: &str) -> PyResult<Self> {
        match s {
            "pvrdma" => Ok(Kind::Pvrdma),
            "vmxnet3" => Ok(Kind::Vmxnet3),
            "paired" => Ok(Kind::Paired),
            _ => Err(PyValueError::new_err(format!(
                "kind {s:?}: one of pvrdma, vmxnet3, paired"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Pvrdma => "pvrdma",
            Kind::Vmxnet3 => "vmxnet3",
            Kind::Paired => "paired",
        }
    }
}

struct NodeState {
    kind: Kind,
    /// The PVRDMA function's index among the simulated world's nodes.
    pvrdma: Option<usize>,
    /// The vNIC's index among the simulated world's vNICs (the vmxnet3 function).
    vnic: Option<usize>,
    /// The slot's host memory (both functions of a paired node reach it).
    dma: Arc<DmaSpace>,
    /// The PVRDMA function's vectors.
    vectors: Arc<VectorQueue>,
    /// The vmxnet3 function's vectors.
    vmx_vectors: Arc<VectorQueue>,
    /// Keyed by bus address.
    blocks: BTreeMap<u64, Block>,
}

/// N device models on one fabric, deterministic (nothing runs until the harness says so).
#[pyclass(unsendable)]
struct World {
    world: SimWorld,
    nodes: Vec<NodeState>,
}

impl World {
    fn node(&self, i: usize) -> PyResult<&NodeState> {
        self.nodes
            .get(i)
            .ok_or_else(|| PyIndexError::new_err(format!("no node {i}")))
    }

    fn device(&self, i: usize) -> PyResult<&Arc<pvrdma_sim::Device>> {
        let n = self
            .node(i)?
            .pvrdma
            .ok_or_else(|| PyValueError::new_err(format!("node {i} has no PVRDMA function")))?;
        Ok(self.world.device(n))
    }

    fn vmx(&self, i: usize) -> PyResult<&Arc<Vmxnet3>> {
        let v = self
            .node(i)?
            .vnic
            .ok_or_else(|| PyValueError::new_err(format!("node {i} has no vmxnet3 function")))?;
        Ok(self.world.vnic(v).vmxnet3())
    }

    fn release(dma: &DmaSpace, bus: u64, block: &Block) {
        dma.unregister(bus);
        if let Ok(layout) = Layout::from_size_align(block.len, PAGE) {
            // SAFETY: `host` came from `alloc_zeroed` with this layout in `alloc_dma` and is
            // no longer registered, so the model cannot reach it; the harness unmapped it from
            // the emulator before asking for the free (module docs).
            unsafe { std::alloc::dealloc(block.host as *mut u8, layout) };
        }
    }
}

#[pymethods]
impl World {
    /// `nodes` nodes of `kind` ("pvrdma", "vmxnet3" or "paired", module docs), node i with
    /// MAC 00:50:56:00:00:<i+1> and (PVRDMA) GID ::ffff:10.0.0.<i+1>; fault rolls derive from
    /// `seed`; `port_mtu` is QUERY_PORT's active MTU code of every PVRDMA function (M41: 3 =
    /// 1024, or up to 5 = 4096).
    #[new]
    #[pyo3(signature = (nodes = 1, seed = 1, port_mtu = 3, kind = "pvrdma"))]
    fn new(nodes: u8, seed: u64, port_mtu: u32, kind: &str) -> PyResult<Self> {
        let kind = Kind::parse(kind)?;
        let mut world = SimWorld::new(seed);
        let mut states = Vec::new();
        for i in 0..nodes {
            let mut cfg = NodeConfig::ipv4(i);
            cfg.device.port_mtu = port_mtu;
            let (pvrdma, vnic) = match kind {
                Kind::Pvrdma => (Some(world.add_node(cfg)), None),
                Kind::Vmxnet3 | Kind::Paired => {
                    let mut v = VnicConfig::ethernet(i);
                    if kind == Kind::Paired {
                        v.rdma = Some((1, cfg));
                    }
                    let index = world
                        .add_vnic(v)
                        .map_err(|e| PyValueError::new_err(format!("{e:?}")))?;
                    (world.vnic(index).node(), Some(index))
                }
            };
            let dma = match (vnic, pvrdma) {
                (Some(v), _) => world.vnic(v).dma().clone(),
                (None, Some(n)) => world.dma(n).clone(),
                (None, None) => return Err(PyValueError::new_err("a node without a function")),
            };
            let vectors = Arc::new(VectorQueue::default());
            if let Some(n) = pvrdma {
                world.set_interrupt_sink(n, vectors.clone());
            }
            let vmx_vectors = Arc::new(VectorQueue::default());
            if let Some(v) = vnic {
                world
                    .vnic(v)
                    .vmxnet3()
                    .set_interrupt_sink(vmx_vectors.clone());
            }
            states.push(NodeState {
                kind,
                pvrdma,
                vnic,
                dma,
                vectors,
                vmx_vectors,
                blocks: BTreeMap::new(),
            });
        }
        Ok(World {
            world,
            nodes: states,
        })
    }

    /// The node's kind: "pvrdma", "vmxnet3" or "paired".
    fn kind(&self, node: usize) -> PyResult<&'static str> {
        Ok(self.node(node)?.kind.name())
    }

    /// The node's PCI functions: (function number, vendor ID, device ID) each, function 0
    /// first (what configuration space offset 0 of each holds).
    fn functions(&self, node: usize) -> PyResult<Vec<(u8, u16, u16)>> {
        let n = self.node(node)?;
        let mut out = Vec::new();
        if let Some(v) = n.vnic {
            out.push((0, VMWARE, VMXNET3_DEVICE));
            if let Some(f) = self.world.vnic(v).slot().pvrdma_function() {
                out.push((f, VMWARE, PVRDMA_DEVICE));
            }
        } else {
            out.push((0, VMWARE, PVRDMA_DEVICE));
        }
        Ok(out)
    }

    /// Number of nodes.
    fn __len__(&self) -> usize {
        self.nodes.len()
    }

    /// A 32-bit BAR1 read (an illegal one reads all ones and is counted by the model).
    fn bar1_read(&self, node: usize, offset: u32) -> PyResult<u32> {
        Ok(self.device(node)?.bar1_read32(offset))
    }

    /// A BAR1 write of `width` bytes (only aligned 4-byte writes are legal: the model counts
    /// any other in `bad_mmio`).
    #[pyo3(signature = (node, offset, value, width = 4))]
    fn bar1_write(&self, node: usize, offset: u32, value: u32, width: u32) -> PyResult<()> {
        let _ = self.device(node)?.bar1_write(offset, width, value);
        Ok(())
    }

    /// A UAR (BAR2) store: a doorbell.
    #[pyo3(signature = (node, offset, value, width = 4))]
    fn uar_write(&self, node: usize, offset: u32, value: u32, width: u32) -> PyResult<()> {
        let _ = self.device(node)?.uar_write(offset, width, value);
        Ok(())
    }

    /// `len` bytes (rounded up to whole pages) of zeroed, page-aligned host memory registered
    /// in the node's DMA space: returns (host address, bus address). The harness maps the
    /// host address into the emulator (`mem_map_ptr`) and gives the driver the bus address.
    fn alloc_dma(&mut self, node: usize, len: usize) -> PyResult<(usize, u64)> {
        self.node(node)?;
        let len = len
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or_else(|| PyValueError::new_err("length overflows"))?;
        let layout =
            Layout::from_size_align(len, PAGE).map_err(|e| PyValueError::new_err(e.to_string()))?;
        // SAFETY: the layout has a non-zero size (at least one page).
        let host = unsafe { std::alloc::alloc_zeroed(layout) };
        if host.is_null() {
            return Err(PyValueError::new_err("out of memory"));
        }
        // SAFETY: `host..host + len` was just allocated and stays valid until `free_dma` or
        // `Drop` unregisters it before deallocating; the emulator's accesses are on the thread
        // that also runs the model (the deterministic world), never concurrent with it.
        let bus = unsafe { self.node(node)?.dma.register(host, len) };
        let state = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| PyIndexError::new_err("node"))?;
        state.blocks.insert(
            bus,
            Block {
                host: host as usize,
                len,
            },
        );
        Ok((host as usize, bus))
    }

    /// Frees a block `alloc_dma` returned (by its bus address); false if there is none.
    fn free_dma(&mut self, node: usize, bus: u64) -> PyResult<bool> {
        self.node(node)?;
        let Some(state) = self.nodes.get_mut(node) else {
            return Ok(false);
        };
        let Some(block) = state.blocks.remove(&bus) else {
            return Ok(false);
        };
        Self::release(&state.dma, bus, &block);
        Ok(true)
    }

    /// Blocks `alloc_dma` handed out and not freed, and the regions the node's DMA space
    /// holds (equal unless something else registered memory).
    fn dma_blocks(&self, node: usize) -> PyResult<(usize, usize)> {
        let state = self.node(node)?;
        Ok((state.blocks.len(), state.dma.region_count()))
    }

    /// Reads `len` bytes at bus address `bus`, as the device would (None on a DMA fault).
    fn dma_read<'py>(
        &self,
        py: Python<'py>,
        node: usize,
        bus: u64,
        len: usize,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let dma = &self.node(node)?.dma;
        let mut out = vec![0; len];
        Ok(dma
            .read(bus, &mut out)
            .ok()
            .map(|()| PyBytes::new(py, &out)))
    }

    /// Writes `data` at bus address `bus`, as the device would; false on a DMA fault.
    fn dma_write(&self, node: usize, bus: u64, data: &[u8]) -> PyResult<bool> {
        Ok(self.node(node)?.dma.write(bus, data).is_ok())
    }

    /// The vectors the node's model raised since the last call, in order.
    fn take_vectors(&self, node: usize) -> PyResult<Vec<u32>> {
        let state = self.node(node)?;
        let mut q = state
            .vectors
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(std::mem::take(&mut *q))
    }

    /// Every device's doorbell work and interrupt delivery until idle (no fabric event);
    /// true if anything ran.
    fn run_devices(&self) -> bool {
        self.world.run_devices()
    }

    /// Devices and fabric until nothing is left; returns the fabric events handled.
    fn run_until_idle(&self) -> usize {
        self.world.run_until_idle()
    }

    /// Everything due in the next `ns` virtual nanoseconds; returns the fabric events.
    fn advance_time(&self, ns: u64) -> usize {
        self.world.advance_time(ns)
    }

    /// Virtual time of the fabric.
    fn now_ns(&self) -> u64 {
        self.world.now_ns()
    }

    /// The node's device counters, as a dict (field names of `pvrdma_sim::Counters`).
    fn counters<'py>(&self, py: Python<'py>, node: usize) -> PyResult<Bound<'py, PyDict>> {
        let c = self.device(node)?.counters();
        let d = PyDict::new(py);
        for (k, v) in [
            ("db_qp_send", c.db_qp_send),
            ("db_qp_recv", c.db_qp_recv),
            ("db_cq_arm", c.db_cq_arm),
            ("db_cq_arm_sol", c.db_cq_arm_sol),
            ("db_cq_poll", c.db_cq_poll),
            ("db_srq", c.db_srq),
            ("db_ignored", c.db_ignored),
            ("commands", c.commands),
            ("command_errors", c.command_errors),
            ("cqes", c.cqes),
            ("cqes_dropped", c.cqes_dropped),
            ("cqes_held", c.cqes_held),
            ("cqnes", c.cqnes),
            ("events", c.events),
            ("dma_faults", c.dma_faults),
            ("bad_mmio", c.bad_mmio),
            ("bad_indices", c.bad_indices),
            ("rings_abandoned", c.rings_abandoned),
        ] {
            d.set_item(k, v)?;
        }
        d.set_item("interrupts", c.interrupts.to_vec())?;
        Ok(d)
    }

    /// Live device objects of the node: (pds, mrs, cqs, qps, srqs).
    fn object_counts(&self, node: usize) -> PyResult<(usize, usize, usize, usize, usize)> {
        let o = self.device(node)?.with_core(|c| c.object_counts());
        Ok((o.pds, o.mrs, o.cqs, o.qps, o.srqs))
    }

    /// The node's live QP handles (the device's own numbering).
    fn qp_handles(&self, node: usize) -> PyResult<Vec<u32>> {
        Ok(self.device(node)?.with_core(|c| c.qp_handles()))
    }

    /// What a peer's RDMA READ of `len` bytes at `va` under `rkey` would read through QP `qp`
    /// (the MR's key, PD, REMOTE_READ right, range and page translation): None if refused.
    fn remote_read<'py>(
        &self,
        py: Python<'py>,
        node: usize,
        qp: u32,
        rkey: u32,
        va: u64,
        len: usize,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut out = vec![0; len];
        let ok = self
            .device(node)?
            .with_core(|c| c.remote_read(qp, rkey, va, &mut out));
        Ok(ok.then(|| PyBytes::new(py, &out)))
    }

    /// What a peer's RDMA WRITE of `data` at `va` under `rkey` would do through QP `qp`;
    /// false if refused (key, PD, REMOTE_WRITE right, range).
    fn remote_write(
        &self,
        node: usize,
        qp: u32,
        rkey: u32,
        va: u64,
        data: &[u8],
    ) -> PyResult<bool> {
        Ok(self
            .device(node)?
            .with_core(|c| c.remote_write(qp, rkey, va, data)))
    }

    /// Whether the node's device is active (CTL ACTIVATE seen, no RESET since).
    fn is_active(&self, node: usize) -> PyResult<bool> {
        Ok(self.device(node)?.with_core(|c| c.is_active()))
    }

    /// The node's GID table as CREATE_BIND left it: (index, GID, gid_type, mtu).
    fn gids(&self, node: usize) -> PyResult<Vec<GidRow>> {
        Ok(self
            .device(node)?
            .with_core(|c| c.gids())
            .into_iter()
            .map(|(i, e)| (i, e.gid, e.gid_type, e.mtu))
            .collect())
    }

    /// Takes the node's port link down or up: a PVRDMA node's device posts PORT_ERR /
    /// PORT_ACTIVE and QUERY_PORT answers DOWN / ACTIVE (M22, M41); a vNIC's vmxnet3 posts
    /// LINK and GET_LINK follows (V11), its PVRDMA function as the slot's options say (P4).
    fn set_link(&self, node: usize, up: bool) -> PyResult<()> {
        let n = self.node(node)?;
        match (n.vnic, n.pvrdma) {
            (Some(v), _) => self.world.set_vnic_link(v, up),
            (None, Some(p)) => self.world.set_link(p, up),
            (None, None) => {}
        }
        Ok(())
    }

    /// Captures every frame the fabric delivers from now on into the pcap file `path`
    /// (nanosecond timestamps), or stops capturing with `None`.
    #[pyo3(signature = (path = None))]
    fn capture(&self, path: Option<String>) -> PyResult<()> {
        let writer = match path {
            Some(p) => {
                let f = std::fs::File::create(p)
                    .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
                let out: Box<dyn std::io::Write + Send> = Box::new(std::io::BufWriter::new(f));
                Some(
                    pvrdma_sim::pcap::PcapWriter::new(out, pvrdma_sim::pcap::TsResolution::Nano)
                        .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?,
                )
            }
            None => None,
        };
        // The previous writer (if any) flushes as it drops.
        drop(self.world.set_capture(writer));
        Ok(())
    }

    /// The node's MAC and the GID its host should bind (all zeros without a PVRDMA
    /// function).
    fn identity(&self, node: usize) -> PyResult<([u8; 6], [u8; 16])> {
        let n = self.node(node)?;
        let gid = n.pvrdma.map_or([0; 16], |p| self.world.node(p).gid());
        let mac = match (n.vnic, n.pvrdma) {
            (Some(v), _) => self.world.vnic(v).mac(),
            (None, Some(p)) => self.world.node(p).mac(),
            (None, None) => [0; 6],
        };
        Ok((mac, gid))
    }

    // ---- the vmxnet3 function ----

    /// A BAR0 read of the vmxnet3 function (IMR); an illegal one reads all ones and is
    /// counted (`bad_mmio`).
    #[pyo3(signature = (node, offset, width = 4))]
    fn vmx_bar0_read(&self, node: usize, offset: u32, width: u32) -> PyResult<u32> {
        Ok(self.vmx(node)?.bar0_read(offset, width).unwrap_or(u32::MAX))
    }

    /// A BAR0 write (IMR, TXPROD, RXPROD, RXPROD2); only aligned 4-byte ones are legal.
    #[pyo3(signature = (node, offset, value, width = 4))]
    fn vmx_bar0_write(&self, node: usize, offset: u32, value: u32, width: u32) -> PyResult<()> {
        let _ = self.vmx(node)?.bar0_write(offset, width, value);
        Ok(())
    }

    /// A BAR1 read (VRRS, UVRS, DSAL/DSAH, CMD's result, MACL/MACH, ICR read-to-clear, ECR).
    #[pyo3(signature = (node, offset, width = 4))]
    fn vmx_bar1_read(&self, node: usize, offset: u32, width: u32) -> PyResult<u32> {
        Ok(self.vmx(node)?.bar1_read(offset, width).unwrap_or(u32::MAX))
    }

    /// A BAR1 write (the commands, DriverShared's address, the MAC, ECR acknowledgements).
    #[pyo3(signature = (node, offset, value, width = 4))]
    fn vmx_bar1_write(&self, node: usize, offset: u32, value: u32, width: u32) -> PyResult<()> {
        let _ = self.vmx(node)?.bar1_write(offset, width, value);
        Ok(())
    }

    /// The MSI-X vectors the vmxnet3 function raised since the last call, in order.
    fn take_vmx_vectors(&self, node: usize) -> PyResult<Vec<u32>> {
        let state = self.node(node)?;
        let mut q = state
            .vmx_vectors
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(std::mem::take(&mut *q))
    }

    /// The vmxnet3 model's counters, as a dict (field names of
    /// `pvrdma_sim::vmxnet3::Vmxnet3Counters`; `interrupts` per vector).
    fn vmx_counters<'py>(&self, py: Python<'py>, node: usize) -> PyResult<Bound<'py, PyDict>> {
        let c = self.vmx(node)?.counters();
        let d = PyDict::new(py);
        for (k, v) in [
            ("bad_mmio", c.bad_mmio),
            ("bad_selects", c.bad_selects),
            ("bar0_inactive", c.bar0_inactive),
            ("dma_faults", c.dma_faults),
            ("commands", c.commands),
            ("unsupported_commands", c.unsupported_commands),
            ("activations", c.activations),
            ("activate_failures", c.activate_failures),
            ("update_failures", c.update_failures),
            ("tx_doorbells", c.tx_doorbells),
            ("tx_frames", c.tx_frames),
            ("tx_bytes", c.tx_bytes),
            ("tx_errors", c.tx_errors),
            ("tx_discards", c.tx_discards),
            ("tx_queue_errors", c.tx_queue_errors),
            ("rx_frames", c.rx_frames),
            ("rx_bytes", c.rx_bytes),
            ("rx_filtered", c.rx_filtered),
            ("rx_out_of_buf", c.rx_out_of_buf),
            ("rx_inactive", c.rx_inactive),
            ("rx_errors", c.rx_errors),
            ("rx_queue_errors", c.rx_queue_errors),
            ("events", c.events),
        ] {
            d.set_item(k, v)?;
        }
        d.set_item(
            "last_activate_error",
            c.last_activate_error.map(|e| format!("{e:?}")),
        )?;
        d.set_item("interrupts", c.interrupts.to_vec())?;
        Ok(d)
    }

    /// The vmxnet3 function's state: (active, link up, current MAC, revision selected or 0).
    fn vmx_state(&self, node: usize) -> PyResult<(bool, bool, [u8; 6], u32)> {
        Ok(self.vmx(node)?.with_core(|c| {
            (
                c.is_active(),
                c.link_up(),
                c.mac(),
                c.revision().unwrap_or(0),
            )
        }))
    }

    /// The Rx filter the latest activation or UPDATE_* left: (rxMode bits, the multicast
    /// table), None while the device is not activated.
    fn vmx_filter(&self, node: usize) -> PyResult<Option<(u32, Vec<[u8; 6]>)>> {
        Ok(self.vmx(node)?.with_core(|c| {
            c.active()
                .map(|a| (a.filter.mode, a.filter.multicast.clone()))
        }))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for state in &mut self.nodes {
            for (bus, block) in std::mem::take(&mut state.blocks) {
                Self::release(&state.dma, bus, &block);
            }
        }
    }
}

#[pymodule]
fn pvrdma_simbridge(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<World>()?;
    m.add("PAGE_SIZE", PAGE)?;
    Ok(())
}
