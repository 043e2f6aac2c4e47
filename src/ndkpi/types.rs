//! Scalar typedefs and the small Windows structures NDKPI signatures use
//! (ndkpi.md §2.11 types, §3.9 GROUP_AFFINITY, Appendix A.2 type mapping;
//! windows-build.md §6 GROUP_AFFINITY, PHYSICAL_ADDRESS, status types).
//!
//! Fixed-width types only: Windows is LLP64, so `LONG`/`ULONG` are 32 bits on x64 and are
//! spelled `i32`/`u32` here, never the `core::ffi` long aliases (64 bits on the Linux host).

use core::ffi::c_void;

/// `NTSTATUS` (`LONG`).
pub type NTSTATUS = i32;
/// `NDIS_STATUS` (`int` carrying NTSTATUS values).
pub type NDIS_STATUS = i32;
/// `BOOLEAN` (`UCHAR`): never Rust `bool` across the ABI, C may hand over any byte.
pub type BOOLEAN = u8;
/// `UCHAR`.
pub type UCHAR = u8;
/// `CHAR`.
pub type CHAR = i8;
/// `CSHORT`.
pub type CSHORT = i16;
/// `USHORT`.
pub type USHORT = u16;
/// `ULONG` (32 bits on LLP64).
pub type ULONG = u32;
/// `LONG` (32 bits on LLP64).
pub type LONG = i32;
/// `UINT32`.
pub type UINT32 = u32;
/// `UINT64`.
pub type UINT64 = u64;
/// `ULONG64`.
pub type ULONG64 = u64;
/// `ULONGLONG`.
pub type ULONGLONG = u64;
/// `SIZE_T`.
pub type SIZE_T = usize;
/// `ULONG_PTR`.
pub type ULONG_PTR = usize;
/// `KAFFINITY` (`ULONG_PTR`).
pub type KAFFINITY = usize;
/// `PFN_NUMBER` (`ULONG_PTR`), declared with the MDL in the OS seam.
pub use crate::os::mdl::PFN_NUMBER;
/// `PVOID`.
pub type PVOID = *mut c_void;
/// `PHYSICAL_ADDRESS` (`LARGE_INTEGER`: LowPart u32 @0, HighPart i32 @4, as one `i64`).
pub type PHYSICAL_ADDRESS = i64;
/// `NDK_LOGICAL_ADDRESS` (= `PHYSICAL_ADDRESS`, ndkpi.md §3.5): an adapter logical (DMA)
/// address, not a CPU physical address.
pub type NDK_LOGICAL_ADDRESS = PHYSICAL_ADDRESS;
/// `ADDRESS_FAMILY` (`USHORT`).
pub type ADDRESS_FAMILY = u16;

/// `GROUP_AFFINITY` (ndkpi.md §3.9): processor-group affinity for CQ/SRQ notifications.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GROUP_AFFINITY {
    pub Mask: KAFFINITY,
    pub Group: USHORT,
    pub Reserved: [USHORT; 3],
}

/// `GUID`: identifies an NDK extension interface (`NdkQueryExtension`) or a WMI GUID.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GUID {
    pub Data1: u32,
    pub Data2: u16,
    pub Data3: u16,
    pub Data4: [u8; 8],
}

/// `AF_INET` on Windows.
pub const AF_INET: ADDRESS_FAMILY = 2;
/// `AF_INET6` on Windows (not Linux's 10).
pub const AF_INET6: ADDRESS_FAMILY = 23;

/// `SOCKADDR`: the generic address NDKPI passes as `PSOCKADDR` (really an IN or IN6).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SOCKADDR {
    pub sa_family: ADDRESS_FAMILY,
    pub sa_data: [CHAR; 14],
}

/// `IN_ADDR`. The C type is the union `S_un` {bytes, words, `ULONG S_addr`}; only its byte
/// view (network order) is kept, so reading it needs no `unsafe`. `align(4)` keeps the C
/// alignment the `ULONG` member gives the union.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IN_ADDR {
    pub S_un_b: [UCHAR; 4],
}

/// `IN6_ADDR`. The C type is the union `u` {`UCHAR Byte[16]`, `USHORT Word[8]`}; only the
/// byte view is kept, `align(2)` keeps the C alignment.
#[repr(C, align(2))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IN6_ADDR {
    pub Byte: [UCHAR; 16],
}

/// `SOCKADDR_IN` (16 bytes). `sin_port` is in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SOCKADDR_IN {
    pub sin_family: ADDRESS_FAMILY,
    pub sin_port: USHORT,
    pub sin_addr: IN_ADDR,
    pub sin_zero: [CHAR; 8],
}

/// `SOCKADDR_IN6` (28 bytes). The trailing C union {`ULONG sin6_scope_id`,
/// `SCOPE_ID sin6_scope_struct`} is one `ULONG` either way and is kept as `sin6_scope_id`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SOCKADDR_IN6 {
    pub sin6_family: ADDRESS_FAMILY,
    pub sin6_port: USHORT,
    pub sin6_flowinfo: ULONG,
    pub sin6_addr: IN6_ADDR,
    pub sin6_scope_id: ULONG,
}

/// `SOCKADDR_INET` (0x1C, align 4): IPv4 or IPv6 address, discriminated by `si_family`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union SOCKADDR_INET {
    pub Ipv4: SOCKADDR_IN,
    pub Ipv6: SOCKADDR_IN6,
    pub si_family: ADDRESS_FAMILY,
}
