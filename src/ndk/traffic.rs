//! RDMA traffic counters for OID_NDK_STATISTICS (ndkpi.md §6.6): what each QP moved, kept
//! where it is already known and summed only when NDIS asks.
//!
//! - Initiator requests (send, write, read) count when the post hands them to the device,
//!   in the post path that already has their total length: one add per counter, by the
//!   queue's single poster. A read's bytes come in; every other request's go out.
//! - Receives count at their completion (the CQE's `byte_len`), in the receive CQ's poller:
//!   only a completion says how many bytes arrived.
//! - A frame is one message (one work request). The device does not report how it split a
//!   message into packets, nor its L2 overhead, so octets are payload bytes.
//! - The responder side of an RDMA read or write completes nothing on the responder, so a
//!   host does not see the reads and writes its peers aim at it: the peer counts them.
//!
//! Each counter has one writer, so none is contended; readers (the OID, at most
//! DISPATCH_LEVEL) see a value at most one request old.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicU64, Ordering};

/// Which way an initiator request's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Send, write: from this host.
    Out,
    /// Read: to this host.
    In,
}

/// One QP's counters. `#[repr(C)]`: the post's four first, in the QP's post run
/// (`super::qp::Qp`), the receive poller's two after them.
#[derive(Debug, Default)]
#[repr(C)]
pub struct QpTraffic {
    out_octets: AtomicU64,
    out_frames: AtomicU64,
    read_octets: AtomicU64,
    read_frames: AtomicU64,
    recv_octets: AtomicU64,
    recv_frames: AtomicU64,
}

/// Single-writer add: a relaxed load and store, no locked instruction. Every counter has
/// one writer (a QP's initiator counters its queue's poster, whom the consumer serializes,
/// ndkpi.md §5.3; its receive counters the receive CQ's poller, §5.4), so no add is lost;
/// readers see each counter whole. x86 compiles it to one `add` to memory, the same count
/// as the `lock add` it replaced on the post path but without draining the store buffer.
#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// [`bump`] undone, by the same single writer.
fn unbump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
}

impl QpTraffic {
    /// An initiator request of `bytes` is being handed to the device (the send queue's
    /// poster): a send or write's bytes go out, a read's come in; `None` moves no data.
    #[inline(always)]
    pub(crate) fn posted(&self, dir: Option<Direction>, bytes: u64) {
        match dir {
            Some(Direction::Out) => {
                bump(&self.out_octets, bytes);
                bump(&self.out_frames, 1);
            }
            Some(Direction::In) => {
                bump(&self.read_octets, bytes);
                bump(&self.read_frames, 1);
            }
            None => {}
        }
    }

    /// [`Self::posted`] undone: the post refused the request after counting it.
    pub(crate) fn withdrawn(&self, dir: Option<Direction>, bytes: u64) {
        let (octets, frames) = match dir {
            Some(Direction::Out) => (&self.out_octets, &self.out_frames),
            Some(Direction::In) => (&self.read_octets, &self.read_frames),
            None => return,
        };
        unbump(octets, bytes);
        unbump(frames, 1);
    }

    /// A receive completed with `bytes` (the receive CQ's poller).
    #[inline(always)]
    pub(crate) fn received(&self, bytes: u64) {
        bump(&self.recv_octets, bytes);
        bump(&self.recv_frames, 1);
    }

    /// `frames` receives completed with `bytes` in all (a run of the poll's fast path).
    #[inline(always)]
    pub(crate) fn received_many(&self, bytes: u64, frames: u64) {
        bump(&self.recv_octets, bytes);
        bump(&self.recv_frames, frames);
    }

    /// The counters as they stand.
    pub fn snapshot(&self) -> Traffic {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Traffic {
            in_octets: l(&self.read_octets).wrapping_add(l(&self.recv_octets)),
            in_frames: l(&self.read_frames).wrapping_add(l(&self.recv_frames)),
            out_octets: l(&self.out_octets),
            out_frames: l(&self.out_frames),
        }
    }
}

/// Traffic totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Payload bytes in: completed receives, reads posted.
    pub in_octets: u64,
    /// Messages in.
    pub in_frames: u64,
    /// Payload bytes out: sends and writes posted.
    pub out_octets: u64,
    /// Messages out.
    pub out_frames: u64,
}

impl Traffic {
    /// `self + other`, wrapping as the NDIS counters do.
    pub fn plus(self, other: Traffic) -> Traffic {
        Traffic {
            in_octets: self.in_octets.wrapping_add(other.in_octets),
            in_frames: self.in_frames.wrapping_add(other.in_frames),
            out_octets: self.out_octets.wrapping_add(other.out_octets),
            out_frames: self.out_frames.wrapping_add(other.out_frames),
        }
    }
}

/// What closed QPs moved (fetch_add: any QP's teardown adds here).
#[derive(Debug, Default)]
pub(crate) struct ClosedTraffic {
    in_octets: AtomicU64,
    in_frames: AtomicU64,
    out_octets: AtomicU64,
    out_frames: AtomicU64,
}

impl ClosedTraffic {
    pub(crate) fn add(&self, t: Traffic) {
        self.in_octets.fetch_add(t.in_octets, Ordering::Relaxed);
        self.in_frames.fetch_add(t.in_frames, Ordering::Relaxed);
        self.out_octets.fetch_add(t.out_octets, Ordering::Relaxed);
        self.out_frames.fetch_add(t.out_frames, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Traffic {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Traffic {
            in_octets: l(&self.in_octets),
            in_frames: l(&self.in_frames),
            out_octets: l(&self.out_octets),
            out_frames: l(&self.out_frames),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_direction() {
        let t = QpTraffic::default();
        t.posted(Some(Direction::Out), 100);
        t.posted(Some(Direction::Out), 28);
        t.posted(Some(Direction::In), 4096);
        t.posted(None, 1 << 20);
        t.posted(Some(Direction::In), 9);
        t.withdrawn(Some(Direction::In), 9);
        t.received(7);
        assert_eq!(
            t.snapshot(),
            Traffic {
                in_octets: 4103,
                in_frames: 2,
                out_octets: 128,
                out_frames: 2,
            }
        );
        let c = ClosedTraffic::default();
        c.add(t.snapshot());
        c.add(t.snapshot());
        assert_eq!(c.get(), t.snapshot().plus(t.snapshot()));
    }
}
