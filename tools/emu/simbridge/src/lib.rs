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

use pvrdma_sim::InterruptSink;
use pvrdma_sim::world::{NodeConfig, World as SimWorld};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

const PAGE: usize = 4096;

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

struct NodeState {
    vectors: Arc<VectorQueue>,
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
        self.node(i)?;
        Ok(self.world.device(i))
    }

    fn release(world: &SimWorld, node: usize, bus: u64, block: &Block) {
        world.dma(node).unregister(bus);
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
    /// `nodes` IPv4 nodes (MAC 00:50:56:00:00:<i+1>, GID ::ffff:10.0.0.<i+1>); fault rolls
    /// derive from `seed`; `port_mtu` is QUERY_PORT's active MTU code of every node (M41:
    /// 3 = 1024, or up to 5 = 4096).
    #[new]
    #[pyo3(signature = (nodes = 1, seed = 1, port_mtu = 3))]
    fn new(nodes: u8, seed: u64, port_mtu: u32) -> Self {
        let mut world = SimWorld::new(seed);
        let mut states = Vec::new();
        for i in 0..nodes {
            let mut cfg = NodeConfig::ipv4(i);
            cfg.device.port_mtu = port_mtu;
            let index = world.add_node(cfg);
            let vectors = Arc::new(VectorQueue::default());
            world.set_interrupt_sink(index, vectors.clone());
            states.push(NodeState {
                vectors,
                blocks: BTreeMap::new(),
            });
        }
        World {
            world,
            nodes: states,
        }
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
        let bus = unsafe { self.world.dma(node).register(host, len) };
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
        Self::release(&self.world, node, bus, &block);
        Ok(true)
    }

    /// Blocks `alloc_dma` handed out and not freed, and the regions the node's DMA space
    /// holds (equal unless something else registered memory).
    fn dma_blocks(&self, node: usize) -> PyResult<(usize, usize)> {
        let state = self.node(node)?;
        Ok((state.blocks.len(), self.world.dma(node).region_count()))
    }

    /// Reads `len` bytes at bus address `bus`, as the device would (None on a DMA fault).
    fn dma_read<'py>(
        &self,
        py: Python<'py>,
        node: usize,
        bus: u64,
        len: usize,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.node(node)?;
        let mut out = vec![0; len];
        Ok(self
            .world
            .dma(node)
            .read(bus, &mut out)
            .ok()
            .map(|()| PyBytes::new(py, &out)))
    }

    /// Writes `data` at bus address `bus`, as the device would; false on a DMA fault.
    fn dma_write(&self, node: usize, bus: u64, data: &[u8]) -> PyResult<bool> {
        self.node(node)?;
        Ok(self.world.dma(node).write(bus, data).is_ok())
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
    fn gids(&self, node: usize) -> PyResult<Vec<(u32, [u8; 16], u8, u32)>> {
        Ok(self
            .device(node)?
            .with_core(|c| c.gids())
            .into_iter()
            .map(|(i, e)| (i, e.gid, e.gid_type, e.mtu))
            .collect())
    }

    /// Takes the node's port link down or up (the device posts PORT_ERR / PORT_ACTIVE and
    /// QUERY_PORT answers DOWN / ACTIVE, M22, M41).
    fn set_link(&self, node: usize, up: bool) -> PyResult<()> {
        self.node(node)?;
        self.world.set_link(node, up);
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

    /// The node's MAC and the GID its host should bind.
    fn identity(&self, node: usize) -> PyResult<([u8; 6], [u8; 16])> {
        self.node(node)?;
        let n = self.world.node(node);
        Ok((n.mac(), n.gid()))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for (i, state) in self.nodes.iter_mut().enumerate() {
            for (bus, block) in std::mem::take(&mut state.blocks) {
                Self::release(&self.world, i, bus, &block);
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
