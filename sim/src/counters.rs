//! Device statistics, readable with `Device::counters()`; tests assert on them.
#![deny(unsafe_code)]

/// Event and error counts since creation (RESET does not clear them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// QP doorbells with the SEND bit.
    pub db_qp_send: u64,
    /// QP doorbells with the RECV bit.
    pub db_qp_recv: u64,
    /// CQ ARM doorbells.
    pub db_cq_arm: u64,
    /// CQ ARM_SOL doorbells.
    pub db_cq_arm_sol: u64,
    /// CQ POLL doorbells.
    pub db_cq_poll: u64,
    /// SRQ doorbells.
    pub db_srq: u64,
    /// Doorbells ignored (unknown handle or offset, QP in RESET, ...).
    pub db_ignored: u64,
    /// Commands executed (by REQUEST writes).
    pub commands: u64,
    /// Commands that answered a non-zero error.
    pub command_errors: u64,
    /// CQEs written.
    pub cqes: u64,
    /// CQEs dropped (overflow or stopped CQ).
    pub cqes_dropped: u64,
    /// CQEs held back by lazy completion (M48), counted when held; `cqes` counts them again
    /// when they reach the ring.
    pub cqes_held: u64,
    /// CQNEs written.
    pub cqnes: u64,
    /// Async events written.
    pub events: u64,
    /// Interrupts delivered per vector.
    pub interrupts: [u64; 3],
    /// DMA faults seen by the device.
    pub dma_faults: u64,
    /// Illegal MMIO accesses (size, alignment, offset) (M2).
    pub bad_mmio: u64,
    /// Driver-written ring indices that failed validation (M14).
    pub bad_indices: u64,
    /// Async/CQNE rings abandoned after a bad index (M14).
    pub rings_abandoned: u64,
}
