//! The NDKPI ABI: ndkpi.h / ndkinfo.h mirrored under their C names
//! (docs/reference/ndkpi.md §1–4 and Appendix A), plus the few Windows kernel types the
//! interface passes around (GROUP_AFFINITY, GUID, SOCKADDR*, MDL; windows-build.md §6).
//!
//! Layout only: `#[repr(C)]` declarations, constants and trivial `const` helpers. Every size,
//! alignment and field offset is asserted for x64 in `layout.rs` at compile time, so a
//! drifting declaration fails the build instead of corrupting a consumer's memory.
//!
//! Files by topic: [`types`] scalar typedefs and OS structures, [`mdl`] the MDL (declared in
//! [`crate::os::mdl`], where the kernel's types live), [`object`]
//! the object header and the ten object structs, [`dispatch`] the ten dispatch tables,
//! [`callbacks`] every `NDK_FN_*` function-pointer type, [`structs`] SGE/results/adapter info/
//! LAM/extension interface, [`consts`] enums and flag values, [`status`] NTSTATUS and
//! NDIS_STATUS codes, [`flags`] `bitflags` views of the flag words for the provider's own use;
//! [`upcall`], the one place a consumer callback is called.
//! Everything is re-exported here, so `pvrdma_ndk::ndkpi::NDK_CQ` is the path to use.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![deny(unsafe_code)]

pub mod callbacks;
pub mod consts;
pub mod dispatch;
pub mod flags;
pub mod mdl;
pub mod object;
pub mod status;
pub mod structs;
pub mod types;
pub mod upcall;

#[cfg(target_pointer_width = "64")]
mod layout;

pub use callbacks::*;
pub use consts::*;
pub use dispatch::*;
pub use flags::*;
pub use mdl::*;
pub use object::*;
pub use status::*;
pub use structs::*;
pub use types::*;

/// Compile-time layout assertions: size, alignment and the offset of each listed field.
/// `assert_layout!(T, size N, align A, Field @ OFF, ..)` states each offset;
/// `assert_layout!(T, size N, align A, every S: [F0, F1, ..])` says the fields follow one
/// another every S bytes from offset 0 (a dispatch table's slots), and
/// `assert_layout!(T, every S from OFF: [..])` the same for a run inside a structure.
/// Expands to `const _: () = assert!(..);` items; shared with `crate::ndis`.
#[cfg(target_pointer_width = "64")]
macro_rules! assert_layout {
    (@run $t:ty, $stride:expr, $off:expr $(,)?) => {};
    (@run $t:ty, $stride:expr, $off:expr, $field:ident $(, $rest:ident)* $(,)?) => {
        const _: () = assert!(core::mem::offset_of!($t, $field) == $off);
        $crate::ndkpi::assert_layout!(@run $t, $stride, $off + $stride $(, $rest)*);
    };
    ($t:ty, every $stride:literal from $from:literal: [$($field:ident),+ $(,)?]) => {
        $crate::ndkpi::assert_layout!(@run $t, $stride, $from, $($field),+);
    };
    ($t:ty, size $size:expr, align $align:expr, every $stride:literal: [$($field:ident),+ $(,)?]) => {
        $crate::ndkpi::assert_layout!($t, size $size, align $align);
        $crate::ndkpi::assert_layout!(@run $t, $stride, 0, $($field),+);
    };
    ($t:ty, size $size:expr, align $align:expr $(, $field:ident @ $off:expr)* $(,)?) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $size);
        const _: () = assert!(core::mem::align_of::<$t>() == $align);
        $(const _: () = assert!(core::mem::offset_of!($t, $field) == $off);)*
    };
}
#[cfg(target_pointer_width = "64")]
pub(crate) use assert_layout;
