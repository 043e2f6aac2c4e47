//! MSI-X vectors of the vmxnet3 model: per-vector IMR, auto-mask, held causes (vmxnet3.md
//! §3.8; model rule V10).
#![deny(unsafe_code)]

use super::layout::MAX_INTRS;

/// One vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Vector {
    masked: bool,
    /// A cause arrived while masked (or while DISABLE_ALL was set): fires at the next unmask.
    held: bool,
}

/// The vectors and what waits for delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vectors {
    v: [Vector; MAX_INTRS as usize],
    /// Vectors to hand to the sink (bit i = vector i).
    pub to_deliver: u32,
    /// INTx stand-in: bit 0 latched by any cause on vector 0, cleared by reading ICR.
    pub icr: u32,
}

impl Default for Vectors {
    fn default() -> Self {
        Self {
            v: [Vector {
                masked: true,
                held: false,
            }; MAX_INTRS as usize],
            to_deliver: 0,
            icr: 0,
        }
    }
}

impl Vectors {
    /// A cause for vector `i`. `auto_mask` masks it as it fires; `disable_all` holds it.
    pub fn raise(&mut self, i: u8, auto_mask: bool, disable_all: bool) {
        let Some(v) = self.v.get_mut(usize::from(i)) else {
            return;
        };
        if i == 0 {
            self.icr |= 1;
        }
        if v.masked || disable_all {
            v.held = true;
            return;
        }
        self.to_deliver |= 1 << i;
        if auto_mask {
            v.masked = true;
        }
    }

    /// IMR[i] written: bit 0 masks; an unmask fires a held cause once.
    pub fn set_mask(&mut self, i: u8, masked: bool, auto_mask: bool, disable_all: bool) {
        let Some(v) = self.v.get_mut(usize::from(i)) else {
            return;
        };
        v.masked = masked;
        if !masked && v.held && !disable_all {
            v.held = false;
            self.to_deliver |= 1 << i;
            if auto_mask {
                v.masked = true;
            }
        }
    }

    /// IMR[i] read: 1 while masked.
    pub fn masked(&self, i: u8) -> bool {
        self.v.get(usize::from(i)).is_none_or(|v| v.masked)
    }

    /// Whether vector `i` holds a cause.
    pub fn held(&self, i: u8) -> bool {
        self.v.get(usize::from(i)).is_some_and(|v| v.held)
    }

    /// Takes the vectors to deliver.
    pub fn take(&mut self) -> u32 {
        std::mem::take(&mut self.to_deliver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_on_vectors_are_masked_and_hold_their_cause_until_unmasked() {
        let mut v = Vectors::default();
        assert!(v.masked(3));
        v.raise(3, false, false);
        assert_eq!(v.take(), 0);
        assert!(v.held(3));
        v.set_mask(3, false, false, false);
        assert_eq!(v.take(), 1 << 3);
        assert!(!v.held(3));
        v.set_mask(3, false, false, false);
        assert_eq!(v.take(), 0, "a held cause fires once");
    }

    #[test]
    fn auto_mask_masks_a_vector_as_it_fires() {
        let mut v = Vectors::default();
        v.set_mask(1, false, true, false);
        v.raise(1, true, false);
        assert_eq!(v.take(), 1 << 1);
        assert!(v.masked(1));
        v.raise(1, true, false);
        assert_eq!(v.take(), 0);
        v.set_mask(1, false, true, false);
        assert_eq!(
            v.take(),
            1 << 1,
            "the cause raised while auto-masked fires on unmask"
        );
        assert!(v.masked(1));
    }

    #[test]
    fn disable_all_holds_causes_of_unmasked_vectors() {
        let mut v = Vectors::default();
        v.set_mask(0, false, false, false);
        v.raise(0, false, true);
        assert_eq!(v.take(), 0);
        v.set_mask(0, false, false, true);
        assert_eq!(v.take(), 0, "still disabled");
        v.set_mask(0, false, false, false);
        assert_eq!(v.take(), 1);
        assert_eq!(v.icr, 1);
    }

    #[test]
    fn vectors_beyond_the_table_are_ignored() {
        let mut v = Vectors::default();
        v.raise(200, false, false);
        v.set_mask(200, false, false, false);
        assert_eq!(v.take(), 0);
        assert!(v.masked(200));
    }
}
