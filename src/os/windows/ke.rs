//! Kernel object storage the driver allocates and the kernel initializes (wdm.h, x64). The
//! driver never reads these fields: only their size and alignment matter, asserted below
//! (KDPC 0x40, KTIMER 0x40, KSPIN_LOCK = ULONG_PTR, PROCESSOR_NUMBER 4).
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::c_void;
use core::mem::{align_of, size_of};

/// `KSPIN_LOCK` (ULONG_PTR).
pub type KSPIN_LOCK = usize;

/// `KDPC`: opaque, initialized by `KeInitializeDpc`.
#[repr(C, align(8))]
pub struct KDPC {
    opaque: [u8; 0x40],
}

/// `KTIMER`: opaque, initialized by `KeInitializeTimer`.
#[repr(C, align(8))]
pub struct KTIMER {
    opaque: [u8; 0x40],
}

impl KDPC {
    /// Zeroed storage for `KeInitializeDpc`.
    pub const fn zeroed() -> Self {
        KDPC { opaque: [0; 0x40] }
    }
}

impl KTIMER {
    /// Zeroed storage for `KeInitializeTimer`.
    pub const fn zeroed() -> Self {
        KTIMER { opaque: [0; 0x40] }
    }
}

/// `PROCESSOR_NUMBER` (ntdef.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PROCESSOR_NUMBER {
    pub Group: u16,
    pub Number: u8,
    pub Reserved: u8,
}

/// `KDEFERRED_ROUTINE`: `void (PKDPC Dpc, PVOID DeferredContext, PVOID SystemArgument1,
/// PVOID SystemArgument2)`, run at DISPATCH_LEVEL.
pub type KDEFERRED_ROUTINE = unsafe extern "system" fn(
    Dpc: *mut KDPC,
    Context: *mut c_void,
    A1: *mut c_void,
    A2: *mut c_void,
);

/// `POOL_FLAG_NON_PAGED` (wdm.h).
pub const POOL_FLAG_NON_PAGED: u64 = 0x0000_0000_0000_0040;
/// `ALL_PROCESSOR_GROUPS`.
pub const ALL_PROCESSOR_GROUPS: u16 = 0xFFFF;
/// `KernelMode` (KPROCESSOR_MODE).
pub const KERNEL_MODE: i8 = 0;

const _: () = assert!(size_of::<KDPC>() == 0x40 && align_of::<KDPC>() == 8);
const _: () = assert!(size_of::<KTIMER>() == 0x40 && align_of::<KTIMER>() == 8);
const _: () = assert!(size_of::<PROCESSOR_NUMBER>() == 4);
