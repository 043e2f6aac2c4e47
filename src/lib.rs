//! pvrdma-ndk: a Windows kernel-mode NDK (Network Direct Kernel) provider for the VMware
//! PVRDMA paravirtual RDMA NIC, packaged as an NDIS miniport.
//!
//! Layers, one module each (the folder map is the architecture):
//! - [`cm`]: the connection manager (IB CM MADs, RDMA CM addressing, the sans-IO state
//!   machine), from docs/reference/cm.md.
//! - [`ndkpi`]: the NDKPI ABI mirror (ndkpi.h / ndkinfo.h names, `#[repr(C)]`, layout asserted).
//! - [`ndis`]: the NDIS side of an NDK provider (ndisndk.h / ntddndis.h structures and OIDs).
//! - [`ndk`]: the NDK provider objects (adapter, PD, CQ, MR, MW, QP, SRQ, connection objects)
//!   and their dispatch tables.
//! - [`os`]: the OS-services seam (allocation, DMA memory, MMIO, locks, DPCs, timers, clock)
//!   with its host implementation for Linux tests.
//! - [`pvrdma`]: the PVRDMA hardware layer (registers, DSR, rings, commands, WQE/CQE/EQE
//!   formats, doorbells, bring-up and interrupts), from docs/reference/pvrdma.md.
//!
//! Three builds share this file (docs/reference/windows-build.md §4, pattern B):
//! the Windows driver (`--features wdk`: wdk-alloc, wdk-panic), the Linux host build used by
//! `cargo test` (std is linked for its panic handler and allocator), and the Windows build
//! without the WDK (`os::windows`: ExAllocatePool2 allocator, KeBugCheckEx panic; the image
//! `tools/build-sys.sh` links, docs/BUILD.md).
#![no_std]
// Kernel discipline, enforced: a panic is a bugcheck, so the driver's own code may not index,
// unwrap or panic on any path a consumer or the device can reach. (Tests may.)
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

#[cfg(not(target_os = "windows"))]
extern crate std;

extern crate alloc;

#[cfg(all(feature = "wdk", not(test)))]
extern crate wdk_panic;

#[cfg(all(feature = "wdk", not(test)))]
#[global_allocator]
static GLOBAL_ALLOCATOR: wdk_alloc::WdkAllocator = wdk_alloc::WdkAllocator;

pub mod cm;
pub mod ndis;
pub mod ndk;
pub mod ndkpi;
pub mod os;
pub mod pvrdma;
pub mod vmxnet3;

/// The Windows build without the WDK (the image `tools/build-sys.sh` links, and the
/// Windows-target check): non-paged pool and a bug check on panic, from `os::windows`.
#[cfg(all(target_os = "windows", not(feature = "wdk"), not(test)))]
#[global_allocator]
static GLOBAL_ALLOCATOR: os::windows::heap::NonPagedPool = os::windows::heap::NonPagedPool;

#[cfg(all(target_os = "windows", not(feature = "wdk"), not(test)))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    os::windows::heap::bugcheck(info)
}
