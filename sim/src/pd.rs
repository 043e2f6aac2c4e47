//! Protection domains (reference §8 CREATE_PD/DESTROY_PD).
#![deny(unsafe_code)]

/// A protection domain; it only counts its users so DESTROY_PD can answer busy (M11).
#[derive(Clone, Debug, Default)]
pub struct Pd {
    /// MRs, QPs and SRQs created in this PD and not yet destroyed.
    pub refs: u32,
}
