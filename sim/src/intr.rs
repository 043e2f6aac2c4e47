//! Interrupt vectors, ICR/IMR and delivery (reference §13; M9, M19-M21).
//!
//! The device never calls into the host while a register access is in progress: causes are
//! latched here and handed to an [`InterruptSink`] by `Device::deliver_interrupts` (deterministic
//! mode) or by the device thread (threaded mode).
#![deny(unsafe_code)]

/// Vector 0: command response.
pub const VEC_CMD: u32 = 0;
/// Vector 1: async events.
pub const VEC_ASYNC: u32 = 1;
/// Vector 2: CQ notification.
pub const VEC_CQ: u32 = 2;

/// Receives MSI-X interrupts from the model.
pub trait InterruptSink: Send + Sync {
    /// Vector `vector` (0, 1 or 2) fired. Called without any device lock held, so the sink may
    /// access device registers.
    fn raise(&self, vector: u32);
}

/// ICR/IMR state and the vectors waiting for delivery.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntrState {
    /// Mask register (bit i masks vector i).
    pub imr: u32,
    /// Cause register (read-to-clear).
    pub icr: u32,
    /// Causes raised while masked, to fire once on unmask (M20).
    pub masked_pending: u32,
    /// Vectors to hand to the sink.
    pub to_deliver: u32,
}

impl IntrState {
    /// Latches a cause for `vector`.
    pub fn raise(&mut self, vector: u32) {
        let bit = 1 << vector;
        self.icr |= bit;
        if self.imr & bit != 0 {
            self.masked_pending |= bit;
        } else {
            self.to_deliver |= bit;
        }
    }

    /// IMR write: unmasked pending causes fire once.
    pub fn set_imr(&mut self, imr: u32) {
        self.imr = imr;
        let fire = self.masked_pending & !imr;
        self.masked_pending &= !fire;
        self.to_deliver |= fire;
    }

    /// ICR read (clears it).
    pub fn read_icr(&mut self) -> u32 {
        std::mem::take(&mut self.icr)
    }

    /// Takes the vectors to deliver, as a bit set.
    pub fn take(&mut self) -> u32 {
        std::mem::take(&mut self.to_deliver)
    }

    /// RESET: drop everything pending (M7); IMR keeps its value.
    pub fn reset(&mut self) {
        self.icr = 0;
        self.masked_pending = 0;
        self.to_deliver = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_cause_fires_once_on_unmask() {
        let mut s = IntrState::default();
        s.set_imr(!0);
        s.raise(VEC_CQ);
        s.raise(VEC_CQ);
        assert_eq!(s.take(), 0);
        s.set_imr(!(1 << VEC_CMD));
        assert_eq!(s.take(), 0);
        s.set_imr(0);
        assert_eq!(s.take(), 1 << VEC_CQ);
        s.set_imr(!0);
        s.set_imr(0);
        assert_eq!(s.take(), 0);
        assert_eq!(s.read_icr(), 1 << VEC_CQ);
        assert_eq!(s.read_icr(), 0);
    }
}
