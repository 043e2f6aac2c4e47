//! [`device_enum!`]: how every C enum of the device interface (event types, WR opcodes, QP
//! states and types, CTL values) is declared, so that each is decoded the same way: through
//! `TryFrom` with an explicit unknown arm, never by `as` (style.md: a value read from the
//! device or the wire is not trusted to be one the driver knows).

/// Declares a device enum: the `#[repr($raw)]` enum under the reference's names, values and
/// docs; `$unknown`, the error that carries a raw value the enum does not define;
/// `TryFrom<$raw>`, which returns it for every other value; and `as_raw()`, the value the
/// device is given.
macro_rules! device_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $raw:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $value:literal,)+
        }
        $(#[$unknown_meta:meta])*
        unknown $unknown:ident;
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr($raw)]
        $vis enum $name {
            $($(#[$variant_meta])* $variant = $value,)+
        }

        $(#[$unknown_meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis struct $unknown(pub $raw);

        impl TryFrom<$raw> for $name {
            type Error = $unknown;
            fn try_from(raw: $raw) -> Result<Self, $unknown> {
                match raw {
                    $($value => Ok(Self::$variant),)+
                    unknown => Err($unknown(unknown)),
                }
            }
        }

        impl $name {
            /// The value as the device encodes it.
            pub const fn as_raw(self) -> $raw {
                self as $raw
            }
        }
    };
}
pub(super) use device_enum;
