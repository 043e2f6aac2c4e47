//! The Windows kernel implementation of the OS seam, for the image linked without the WDK
//! (docs/BUILD.md): [`WindowsPlatform`] over NDIS and ntoskrnl, the kernel DPC/timer
//! scheduler, the global allocator and panic handler, and the C-runtime and CFG symbols the
//! sysroot expects.
//!
//! Which file serves which build:
//! - [`imports`], [`ke`], [`lock`], [`mailbox`], [`net`], [`nic`], [`platform`], [`dpc`]: every
//!   Windows build (the WDK build links the same imports through ndis.lib/ntoskrnl.lib
//!   instead of raw-dylib).
//! - [`heap`] and `rt`: only without `--features wdk`, where wdk-alloc, wdk-panic and wdk-sys
//!   would otherwise define the same allocator, panic handler and symbols twice.
//!
//! [`net`] is the address-resolution seam over netio.sys ([`WindowsResolver`]).

pub mod dpc;
#[cfg(not(feature = "wdk"))]
pub mod heap;
pub mod imports;
pub mod ke;
pub mod lock;
pub mod mailbox;
pub mod net;
pub mod nic;
pub mod platform;
#[cfg(all(not(feature = "wdk"), target_arch = "x86_64"))]
mod rt;

pub use self::dpc::WindowsScheduler;
pub use self::net::WindowsResolver;
pub use self::nic::WindowsNicPlatform;
pub use self::platform::{MappedBar, NdisSharedMemory, WindowsPlatform, WindowsServices};
