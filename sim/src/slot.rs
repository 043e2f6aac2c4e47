//! A VMware vNIC as one PCI slot: the vmxnet3 model at function 0 and, optionally, a PVRDMA
//! model at function 1, sharing the vNIC's one MAC and one fabric port (vmxnet3.md §1.5,
//! §1.6; model rules P1–P5).
//!
//! - **P1** A PVRDMA model joins a slot only at function 1–7 beside the vmxnet3 at function 0
//!   ([`Slot::new`] refuses function 0 and numbers past 7; QEMU refuses a pvrdma whose
//!   function 0 is not vmxnet3).
//! - **P2** One MAC: the PVRDMA model is built with the vNIC's MAC (its `node_guid` is the
//!   EUI-64 of it, RoCE frames leave with it). When the guest writes a new MAC to vmxnet3
//!   MACL/MACH, the fabric delivers to the new MAC; RoCE frames follow it only with
//!   [`SlotOptions::rdma_mac_follows_guest`] (ESXi UNCONFIRMED); otherwise the port keeps
//!   answering to the RDMA function's MAC as well.
//! - **P3** [`SlotOptions::coupled_quiesce`]: while the vmxnet3 model is not active (before
//!   ACTIVATE_DEV, after QUIESCE_DEV or RESET_DEV), the PVRDMA model's frames are dropped both
//!   ways and its UNQUIESCE answers ERR = 1. Default off.
//! - **P4** A link change of the slot's port reaches vmxnet3 (ECR LINK, GET_LINK) and stops
//!   both functions' frames (the fabric drops them); the PVRDMA model hears of it (PORT_ERR /
//!   PORT_ACTIVE) only with [`SlotOptions::pvrdma_port_events`] (Linux synthesizes the event
//!   itself; ESXi UNCONFIRMED). Default off.
//! - **P5** Received frames are steered by protocol, as an RDMA NIC's steering rules do: RoCEv2
//!   (UDP destination port 4791 over untagged IPv4 or IPv6) and RoCEv1 (EtherType 0x8915) go
//!   to the PVRDMA function when there is one; everything else (ARP, ND, ICMP, other UDP, TCP,
//!   tagged frames) goes to vmxnet3, which applies its own Rx filter. Neither function sees
//!   the other's frames.
#![deny(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::device::Device;
use crate::dma::DmaSpace;
use crate::dsr::DeviceConfig;
use crate::fabric::{Fabric, FabricHandle, FabricPort, PortId};
use crate::transport::{self, DevicePort, PortLink};
use crate::vmxnet3::{Vmxnet3, Vmxnet3Config};
use crate::wire::ROCEV2_UDP_PORT;

/// The test options of model rules P2–P4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotOptions {
    /// P2: a guest-written vmxnet3 MAC becomes the RoCE source MAC too.
    pub rdma_mac_follows_guest: bool,
    /// P3: the PVRDMA function is held quiesced while vmxnet3 is not active.
    pub coupled_quiesce: bool,
    /// P4: fabric link changes reach the PVRDMA model (PORT_ACTIVE / PORT_ERR).
    pub pvrdma_port_events: bool,
}

/// How a slot is built.
#[derive(Clone, Debug, Default)]
pub struct SlotConfig {
    /// Function 0. Its `mac` is the vNIC's MAC.
    pub vmxnet3: Vmxnet3Config,
    /// P2–P4.
    pub options: SlotOptions,
}

/// A PVRDMA function to put in the slot.
#[derive(Clone, Debug)]
pub struct RdmaFunction {
    /// PCI function number, 1–7 (P1).
    pub function: u8,
    /// Its configuration; `mac` is overridden with the vNIC's (P2).
    pub config: DeviceConfig,
}

/// Why a slot could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// P1: function 0 is the vmxnet3's, and a PCI function number is at most 7.
    Function(u8),
}

/// State shared by the two functions of a slot (P3).
#[derive(Debug)]
pub struct Coupling {
    fn0_active: Arc<AtomicBool>,
    coupled: AtomicBool,
    held_drops: AtomicU64,
}

impl Coupling {
    /// Whether the RDMA function is held quiesced now.
    pub fn held(&self) -> bool {
        self.coupled.load(Ordering::SeqCst) && !self.fn0_active.load(Ordering::SeqCst)
    }

    /// Counts a RoCE frame dropped because the function was held.
    pub fn count_held(&self) {
        self.held_drops.fetch_add(1, Ordering::Relaxed);
    }

    /// RoCE frames dropped while held (both directions).
    pub fn held_drops(&self) -> u64 {
        self.held_drops.load(Ordering::Relaxed)
    }

    /// Turns P3 on or off.
    pub fn set_coupled(&self, on: bool) {
        self.coupled.store(on, Ordering::SeqCst);
    }
}

/// Whether `frame` is RoCE (P5): RoCEv1 by EtherType, RoCEv2 by UDP destination port.
pub fn is_roce(frame: &[u8]) -> bool {
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    match be16(12) {
        Some(0x8915) => true,
        Some(0x0800) => {
            let Some(&vihl) = frame.get(14) else {
                return false;
            };
            let ihl = usize::from(vihl & 0xF) * 4;
            let first_fragment = be16(20).is_some_and(|f| f & 0x1FFF == 0);
            frame.get(23) == Some(&17)
                && ihl >= 20
                && first_fragment
                && be16(14 + ihl + 2) == Some(ROCEV2_UDP_PORT)
        }
        Some(0x86DD) => frame.get(20) == Some(&17) && be16(14 + 40 + 2) == Some(ROCEV2_UDP_PORT),
        _ => false,
    }
}

/// The slot's one fabric port: P5's steering and P4's link fan-out.
struct SlotPort {
    mac: [u8; 6],
    vmx: Arc<Vmxnet3>,
    rdma: Option<Arc<DevicePort>>,
    coupling: Arc<Coupling>,
    options: SlotOptions,
}

impl FabricPort for SlotPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn receive(&self, frame: &[u8], now_ns: u64) {
        match &self.rdma {
            Some(r) if is_roce(frame) => {
                if self.coupling.held() {
                    self.coupling.count_held();
                } else {
                    r.receive(frame, now_ns);
                }
            }
            _ => {
                self.vmx.receive_frame(frame);
            }
        }
    }

    fn receive_owned(&self, frame: Vec<u8>, now_ns: u64, pool: &FabricHandle) {
        match &self.rdma {
            Some(r) if is_roce(&frame) => {
                if self.coupling.held() {
                    self.coupling.count_held();
                    pool.recycle(frame);
                } else {
                    r.receive_owned(frame, now_ns, pool);
                }
            }
            _ => {
                self.vmx.receive_frame(&frame);
                pool.recycle(frame);
            }
        }
    }

    fn on_timer(&self, token: u64, now_ns: u64) {
        // Only the RDMA transport schedules timers.
        if let Some(r) = &self.rdma {
            r.on_timer(token, now_ns);
        }
    }

    fn link_changed(&self, up: bool) {
        self.vmx.link_changed(up);
        if self.options.pvrdma_port_events
            && let Some(r) = &self.rdma
        {
            r.link_changed(up);
        }
    }
}

/// One vNIC slot on a fabric.
#[derive(Debug)]
pub struct Slot {
    vmx: Arc<Vmxnet3>,
    rdma: Option<(u8, Arc<Device>, Arc<PortLink>)>,
    port: PortId,
    coupling: Arc<Coupling>,
    dma: Arc<DmaSpace>,
}

impl Slot {
    /// Builds the slot's functions over host memory `dma` and attaches its port to `fabric`.
    ///
    /// # Errors
    ///
    /// [`SlotError::Function`] when `rdma` names function 0 or a number past 7 (P1).
    pub fn new(
        fabric: &Fabric,
        dma: Arc<DmaSpace>,
        cfg: SlotConfig,
        rdma: Option<RdmaFunction>,
    ) -> Result<Slot, SlotError> {
        if let Some(f) = &rdma
            && !(1..=7).contains(&f.function)
        {
            return Err(SlotError::Function(f.function));
        }
        let mac = cfg.vmxnet3.mac;
        let vmx = Vmxnet3::new(dma.clone(), cfg.vmxnet3.clone());
        let coupling = Arc::new(Coupling {
            fn0_active: vmx.active_flag(),
            coupled: AtomicBool::new(cfg.options.coupled_quiesce),
            held_drops: AtomicU64::new(0),
        });
        let rdma_dev = rdma.map(|f| {
            let mut c = f.config;
            c.mac = mac;
            (f.function, Device::new(dma.clone(), c))
        });
        let (port, slot_port) = fabric.attach_with(|id, handle| {
            let rdma_port = rdma_dev.as_ref().map(|(_, dev)| {
                let link = PortLink::new(mac, id, handle.clone());
                link.set_coupling(coupling.clone());
                dev.with_core(|c| c.set_coupling(Some(coupling.clone())));
                transport::port_behind(dev, link)
            });
            Arc::new(SlotPort {
                mac,
                vmx: vmx.clone(),
                rdma: rdma_port,
                coupling: coupling.clone(),
                options: cfg.options,
            })
        });
        vmx.attach_port(port, fabric.handle());
        let rdma = rdma_dev.map(|(function, dev)| {
            let link = slot_port
                .rdma
                .as_ref()
                .map(|p| p.link().clone())
                .unwrap_or_else(|| PortLink::new(mac, port, fabric.handle()));
            (function, dev, link)
        });
        // P2: the port answers to the vNIC's current MAC and to the RDMA function's.
        let handle = fabric.handle();
        let weak_dev: Option<Weak<Device>> = rdma.as_ref().map(|(_, d, _)| Arc::downgrade(d));
        let follows = cfg.options.rdma_mac_follows_guest;
        vmx.set_mac_listener(Arc::new(move |new| {
            let rdma_mac = weak_dev.as_ref().and_then(Weak::upgrade).map(|d| {
                d.with_core(|c| {
                    if follows {
                        c.set_mac(new);
                    }
                    c.mac()
                })
            });
            match rdma_mac {
                Some(m) => handle.set_port_macs(port, &[new, m]),
                None => handle.set_port_macs(port, &[new]),
            }
        }));
        Ok(Slot {
            vmx,
            rdma,
            port,
            coupling,
            dma,
        })
    }

    /// Function 0.
    pub fn vmxnet3(&self) -> &Arc<Vmxnet3> {
        &self.vmx
    }

    /// The PVRDMA function, if any.
    pub fn pvrdma(&self) -> Option<&Arc<Device>> {
        self.rdma.as_ref().map(|(_, d, _)| d)
    }

    /// The PVRDMA function's number.
    pub fn pvrdma_function(&self) -> Option<u8> {
        self.rdma.as_ref().map(|(f, _, _)| *f)
    }

    /// The PVRDMA function's fabric link (its transport counters).
    pub fn pvrdma_link(&self) -> Option<&Arc<PortLink>> {
        self.rdma.as_ref().map(|(_, _, l)| l)
    }

    /// The slot's fabric port.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// The host memory both functions reach.
    pub fn dma(&self) -> &Arc<DmaSpace> {
        &self.dma
    }

    /// P3's state.
    pub fn coupling(&self) -> &Arc<Coupling> {
        &self.coupling
    }
}
