//! Workload driver for the vmxnet3 layer's instruction counts (`benches/vmx_instructions.sh`
//! runs it under callgrind with `--toggle-collect` on one function of `src/vmxnet3` per
//! shape, so only instructions executed inside it, and what it calls, count).
//!
//! `vmx_instr <shape> [frames]`, shapes: `send` (one `Vmxnet3::send` of a 64-byte frame, with
//! its doorbell), `send16` (16 sends queued with `more`, one doorbell; the device's
//! `txThreshold` is 32 here), `txdone` (the DPC's Tx completion reap, one per run),
//! `recv1` / `recv16` (the DPC's Rx reap handing up 1 or 16 frames per run, to a client that
//! only counts them, the buffers back to the ring). Prints `requests=<frames>` on stderr.
//!
//! BAR0 writes (TXPROD, IMR) are not forwarded to the model during the call: the harness's
//! BAR0 records each word in an atomic slot, and the loop forwards them after the call
//! returns, as `examples/instr.rs` does with UAR doorbells. A register write inside a measured
//! call is therefore the trait call and two stores, where the Windows build does one store to
//! the mapped BAR.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use common::vmx::{TxMem, eth, platform_with_bar0};
use pvrdma_ndk::os::{NicPlatform, RegisterIo};
use pvrdma_ndk::vmxnet3::{Config, Fault, LinkState, NicClient, RxBatch, TxStatus, Vmxnet3};
use pvrdma_sim::vmxnet3::{Vmxnet3 as Model, Vmxnet3Config};
use pvrdma_sim::world::{VnicConfig, World};

/// BAR0 whose writes wait in atomic slots until [`DeferredBar0::forward`].
struct DeferredBar0 {
    model: Arc<Model>,
    words: Vec<AtomicU32>,
    dirty: Vec<AtomicBool>,
}

impl DeferredBar0 {
    fn new(model: Arc<Model>) -> Self {
        DeferredBar0 {
            model,
            words: (0..512).map(|_| AtomicU32::new(0)).collect(),
            dirty: (0..512).map(|_| AtomicBool::new(false)).collect(),
        }
    }
    /// Hands the stored words to the model, in offset order.
    fn forward(&self) -> bool {
        let mut any = false;
        for (i, d) in self.dirty.iter().enumerate() {
            if d.swap(false, Ordering::AcqRel) {
                any = true;
                let v = self.words[i].load(Ordering::Acquire);
                self.model.bar0_write32(i as u32 * 8, v);
            }
        }
        any
    }
}

impl RegisterIo for DeferredBar0 {
    fn read32(&self, off: u32) -> u32 {
        self.model.bar0_read32(off)
    }
    fn write32(&self, off: u32, val: u32) {
        let i = (off / 8) as usize & 511;
        self.words[i].store(val, Ordering::Release);
        self.dirty[i].store(true, Ordering::Release);
    }
}

#[derive(Default)]
struct Counting {
    frames: AtomicU64,
    sent: AtomicU64,
}

impl NicClient for Counting {
    fn received(&self, batch: &RxBatch<'_>) {
        self.frames.fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
    fn sent(&self, tokens: &[u64], _status: TxStatus) {
        self.sent.fetch_add(tokens.len() as u64, Ordering::Relaxed);
    }
    fn link_changed(&self, _link: LinkState) {}
    fn device_error(&self, fault: Fault) {
        panic!("device error {fault:?}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape = args.first().map_or("send", String::as_str).to_string();
    let frames: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let burst: u64 = if shape.ends_with("16") { 16 } else { 1 };
    let _serial = common::serial();
    let mut world = World::new(1);
    let model_cfg = Vmxnet3Config {
        tx_threshold: if shape == "send16" { 32 } else { 1 },
        ..Vmxnet3Config::default()
    };
    for i in 0..2 {
        world
            .add_vnic(VnicConfig::ethernet(i).with_vmxnet3(model_cfg.clone()))
            .unwrap();
    }
    let mut bars = Vec::new();
    let mut hosts = Vec::new();
    for v in 0..2 {
        let bar0 = Arc::new(DeferredBar0::new(world.vnic(v).vmxnet3().clone()));
        let (platform, _dma) = platform_with_bar0(&world, v, 3, 1, bar0.clone());
        let client = Arc::new(Counting::default());
        let p: Arc<dyn NicPlatform> = platform.clone();
        let nic = Vmxnet3::probe(p, &Config::default(), client.clone()).expect("probe");
        bars.push(bar0);
        hosts.push((platform, client, nic));
    }
    let pump = || {
        for _ in 0..100_000 {
            let mut any = false;
            for b in &bars {
                any |= b.forward();
            }
            any |= world.run_until_idle() != 0;
            any |= world.run_devices();
            for (p, _, _) in &hosts {
                while !p.executor().is_idle() {
                    any = true;
                    std::thread::yield_now();
                }
            }
            if !any && bars.iter().all(|b| !b.forward()) {
                return;
            }
        }
        panic!("the harness did not settle");
    };
    pump();
    let tx = TxMem::new(world.vnic(0).dma(), 1);
    let frame = eth(world.vnic(1).mac(), world.vnic(0).mac(), 0x0800, 64, 1);
    let sg = tx.sg(0, &frame, &[]);
    let nic = &hosts[0].2;
    let rounds = frames / burst;
    for r in 0..rounds {
        for k in 0..burst {
            nic.send(&sg, r * burst + k, k + 1 < burst).expect("send");
        }
        pump();
    }
    let got = hosts[1].1.frames.load(Ordering::Relaxed);
    let sent = hosts[0].1.sent.load(Ordering::Relaxed);
    assert_eq!((got, sent), (rounds * burst, rounds * burst), "frames lost");
    eprintln!("requests={}", rounds * burst);
    for (p, _, nic) in hosts {
        drop(nic);
        p.executor().shutdown();
    }
}
