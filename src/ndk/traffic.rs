//! RDMA traffic counters for OID_NDK_STATISTICS (ndkpi.md §6.6) on the wire's terms:
//! frames are RoCEv2 packets at the connection's path MTU, octets are whole Ethernet frames
//! ("including L2 protocol overhead"), both directions as far as this host sees them. Kept
//! where each message is already known and summed only when NDIS asks.
//!
//! One message of `len` bytes at path MTU `m` is `max(1, ⌈len / m⌉)` packets. Each packet
//! carries the Ethernet header (14), the IPv4 (20) or IPv6 (40) header, UDP (8), BTH (12),
//! the ICRC (4) and the FCS (4): 62 or 82 bytes, added per frame when the counters are read
//! ([`QpTraffic::snapshot`]). Per message, counted at its post or completion: the payload
//! padded to 4 bytes (the BTH pad count), and the extension headers (IBTA 9.2–9.4):
//!
//! | message | frames out | octets out | frames in | octets in |
//! |---|---|---|---|---|
//! | SEND | packets | payload | | |
//! | SEND with invalidate | packets | payload + IETH 4 | | |
//! | RDMA WRITE | packets | payload + RETH 16 | | |
//! | RDMA READ | 1 (request) | RETH 16 | response packets | payload + AETH 4 on the first and last (one if Only) |
//! | receive completed | | | packets | payload (+ IETH 4 if invalidated) |
//!
//! What a host cannot see is not counted: ACKs (the device generates and consumes them), and
//! the responder side of an RDMA READ or WRITE a peer aims at this host, which the device
//! serves without a work request or a completion (the peer counts it; pvrdma.md §8 has no
//! traffic counter to ask). Connection-management MADs on QP1 are not NDK traffic.
//!
//! - Initiator requests count when the post hands them to the device, in the post path that
//!   already has their total length: one add per counter, by the queue's single poster.
//! - Receives count at their completion (the CQE's `byte_len`), in the receive CQ's poller.
//!
//! Each counter has one writer, so none is contended; readers (the OID, at most
//! DISPATCH_LEVEL) see a value at most one request old.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// What an initiator request is, for its counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// NdkSend.
    Send,
    /// NdkSendAndInvalidate (IETH on its last packet).
    SendInvalidate,
    /// NdkWrite (RETH on its first packet).
    Write,
    /// NdkRead: a one-packet request out (RETH), the response in.
    Read,
}

/// Per-packet bytes besides the payload: Ethernet 14, UDP 8, BTH 12, ICRC 4, FCS 4, and
/// the IP header.
pub const FRAME_OVERHEAD_IPV4: u64 = 14 + 20 + 8 + 12 + 4 + 4;
/// See [`FRAME_OVERHEAD_IPV4`].
pub const FRAME_OVERHEAD_IPV6: u64 = 14 + 40 + 8 + 12 + 4 + 4;
/// Extension headers (IBTA 9.3): RETH, AETH, IETH.
const RETH: u64 = 16;
const AETH: u64 = 4;
const IETH: u64 = 4;
/// Path MTU until a connection sets one (1024, the CM's default).
const DEFAULT_MTU_SHIFT: u32 = 10;

/// Packets of a message of `len` bytes at an MTU of `mask + 1 == 1 << shift` (a message of
/// 0 bytes is one packet).
#[inline(always)]
fn packets(len: u64, mask: u64, shift: u32) -> u64 {
    ((len + mask) >> shift).max(1)
}

/// The payload as the packets carry it, padded to 4 bytes (only the last packet can be
/// short, and every MTU is a multiple of 4), plus `ext` bytes of extension headers (a
/// multiple of 4): one add and one mask.
#[inline(always)]
fn padded_plus(len: u64, ext: u64) -> u64 {
    (len + 3 + ext) & !3
}

#[cfg(test)]
fn padded(len: u64) -> u64 {
    padded_plus(len, 0)
}

/// One QP's counters. `#[repr(C)]`: the post's first, in the QP's post run
/// (`super::qp::Qp`), the receive poller's after them.
#[derive(Debug)]
#[repr(C)]
pub struct QpTraffic {
    /// The path MTU − 1 and its log2 (set when the connection reaches RTR).
    mtu_mask: AtomicU64,
    mtu_shift: AtomicU32,
    out_octets: AtomicU64,
    out_frames: AtomicU64,
    /// READs posted: each is one request frame out with a RETH, added at snapshot time.
    reads: AtomicU64,
    read_octets: AtomicU64,
    read_frames: AtomicU64,
    recv_octets: AtomicU64,
    recv_frames: AtomicU64,
    /// The path is IPv6 (the per-frame overhead, read at snapshot time).
    ipv6: AtomicBool,
}

impl Default for QpTraffic {
    fn default() -> Self {
        QpTraffic {
            mtu_mask: AtomicU64::new((1 << DEFAULT_MTU_SHIFT) - 1),
            mtu_shift: AtomicU32::new(DEFAULT_MTU_SHIFT),
            out_octets: AtomicU64::new(0),
            out_frames: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            read_octets: AtomicU64::new(0),
            read_frames: AtomicU64::new(0),
            recv_octets: AtomicU64::new(0),
            recv_frames: AtomicU64::new(0),
            ipv6: AtomicBool::new(false),
        }
    }
}

/// Single-writer add: a relaxed load and store, no locked instruction. Every counter has
/// one writer (a QP's initiator counters its queue's poster, whom the consumer serializes,
/// ndkpi.md §5.3; its receive counters the receive CQ's poller, §5.4), so no add is lost;
/// readers see each counter whole. x86 compiles it to one `add` to memory.
#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// [`bump`] undone, by the same single writer.
fn unbump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
}

impl QpTraffic {
    /// The connection's path: IB MTU code (1 = 256 … 5 = 4096; anything else is ignored)
    /// and IP version. Set before the QP can post (RTR precedes RTS).
    pub(crate) fn set_path(&self, mtu_code: u8, ipv6: bool) {
        if (1..=5).contains(&mtu_code) {
            let shift = 7 + u32::from(mtu_code);
            self.mtu_mask.store((1 << shift) - 1, Ordering::Relaxed);
            self.mtu_shift.store(shift, Ordering::Relaxed);
        }
        self.ipv6.store(ipv6, Ordering::Relaxed);
    }

    /// The path MTU in bytes the counts use.
    pub fn path_mtu(&self) -> u32 {
        1 << self.mtu_shift.load(Ordering::Relaxed)
    }

    /// Packets of a `bytes` message on this QP's path.
    #[inline(always)]
    fn packets(&self, bytes: u64) -> u64 {
        packets(
            bytes,
            self.mtu_mask.load(Ordering::Relaxed),
            self.mtu_shift.load(Ordering::Relaxed),
        )
    }

    /// An initiator request of `bytes` is being handed to the device (the send queue's
    /// poster); `None` moves no data. A READ's request frame is counted by `reads` (its
    /// octets and frame are added at snapshot time), its response by `read_*`.
    #[inline(always)]
    pub(crate) fn posted(&self, dir: Option<Direction>, bytes: u64) {
        let Some(dir) = dir else { return };
        let pkts = self.packets(bytes);
        match dir {
            Direction::Send => bump(&self.out_octets, padded_plus(bytes, 0)),
            Direction::SendInvalidate => bump(&self.out_octets, padded_plus(bytes, IETH)),
            Direction::Write => bump(&self.out_octets, padded_plus(bytes, RETH)),
            Direction::Read => {
                bump(&self.reads, 1);
                let aeths = if pkts > 1 { 2 * AETH } else { AETH };
                bump(&self.read_octets, padded_plus(bytes, aeths));
                bump(&self.read_frames, pkts);
                return;
            }
        }
        bump(&self.out_frames, pkts);
    }

    /// [`Self::posted`] undone: the post refused the request after counting it.
    pub(crate) fn withdrawn(&self, dir: Option<Direction>, bytes: u64) {
        let Some(dir) = dir else { return };
        let pkts = self.packets(bytes);
        let (octets, frames, n) = match dir {
            Direction::Send => (&self.out_octets, &self.out_frames, padded_plus(bytes, 0)),
            Direction::SendInvalidate => {
                (&self.out_octets, &self.out_frames, padded_plus(bytes, IETH))
            }
            Direction::Write => (&self.out_octets, &self.out_frames, padded_plus(bytes, RETH)),
            Direction::Read => {
                unbump(&self.reads, 1);
                let aeths = if pkts > 1 { 2 * AETH } else { AETH };
                (
                    &self.read_octets,
                    &self.read_frames,
                    padded_plus(bytes, aeths),
                )
            }
        };
        unbump(octets, n);
        unbump(frames, pkts);
    }

    /// A receive completed with `bytes` (the receive CQ's poller); `invalidated`: it carried
    /// an IETH.
    #[inline(always)]
    pub(crate) fn received(&self, bytes: u64, invalidated: bool) {
        let ieth = if invalidated { IETH } else { 0 };
        bump(&self.recv_octets, padded_plus(bytes, ieth));
        bump(&self.recv_frames, self.packets(bytes));
    }

    /// A run of receives of the poll's fast path (no invalidation among them): the sums of
    /// [`ReceiveRun::add`].
    #[inline(always)]
    pub(crate) fn received_run(&self, run: &ReceiveRun) {
        bump(&self.recv_octets, run.octets);
        bump(&self.recv_frames, run.frames);
    }

    /// A run's accumulator for this QP's receives.
    #[inline(always)]
    pub(crate) fn receive_run(&self) -> ReceiveRun {
        ReceiveRun {
            mask: self.mtu_mask.load(Ordering::Relaxed),
            shift: self.mtu_shift.load(Ordering::Relaxed),
            octets: 0,
            frames: 0,
        }
    }

    /// The counters as they stand, per-frame overhead included.
    pub fn snapshot(&self) -> Traffic {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let per_frame = if self.ipv6.load(Ordering::Relaxed) {
            FRAME_OVERHEAD_IPV6
        } else {
            FRAME_OVERHEAD_IPV4
        };
        let reads = l(&self.reads);
        let in_frames = l(&self.read_frames).wrapping_add(l(&self.recv_frames));
        let out_frames = l(&self.out_frames).wrapping_add(reads);
        Traffic {
            in_octets: l(&self.read_octets)
                .wrapping_add(l(&self.recv_octets))
                .wrapping_add(in_frames.wrapping_mul(per_frame)),
            in_frames,
            out_octets: l(&self.out_octets)
                .wrapping_add(reads.wrapping_mul(RETH))
                .wrapping_add(out_frames.wrapping_mul(per_frame)),
            out_frames,
        }
    }
}

/// Receives of one poll run, summed in registers and counted once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReceiveRun {
    mask: u64,
    shift: u32,
    octets: u64,
    frames: u64,
}

impl ReceiveRun {
    /// One more receive of `bytes` (no invalidation).
    #[inline(always)]
    pub(crate) fn add(&mut self, bytes: u64) {
        self.octets += padded_plus(bytes, 0);
        self.frames += packets(bytes, self.mask, self.shift);
    }
}

/// Traffic totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Ethernet-frame bytes in: completed receives, read responses.
    pub in_octets: u64,
    /// RoCEv2 packets in.
    pub in_frames: u64,
    /// Ethernet-frame bytes out: sends, writes, read requests.
    pub out_octets: u64,
    /// RoCEv2 packets out.
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
    fn packets_and_padding() {
        assert_eq!(
            [0, 1, 1024, 1025, 4096, 4097].map(|l| packets(l, 1023, 10)),
            [1, 1, 1, 2, 4, 5]
        );
        assert_eq!([0, 1, 3, 4, 5].map(padded), [0, 4, 4, 4, 8]);
    }

    #[test]
    fn counts_on_the_wires_terms() {
        let t = QpTraffic::default();
        // MTU 1024, IPv4.
        t.posted(Some(Direction::Send), 100); // 1 frame, 100
        t.posted(Some(Direction::Write), 3000); // 3 frames, 3000 + 16
        t.posted(Some(Direction::Read), 4096); // out 1, 16; in 4 frames, 4096 + 8
        t.posted(None, 1 << 20);
        t.posted(Some(Direction::Read), 9);
        t.withdrawn(Some(Direction::Read), 9);
        t.posted(Some(Direction::SendInvalidate), 0); // 1 frame, 0 + 4
        t.received(7, false); // 1 frame, 8
        t.received(2048, true); // 2 frames, 2048 + 4
        let mut run = t.receive_run();
        run.add(1);
        run.add(1025);
        t.received_run(&run); // 1 + 2 frames, 4 + 1028
        let s = t.snapshot();
        let out_frames = 1 + 3 + 1 + 1;
        let in_frames = 4 + 1 + 2 + 3;
        assert_eq!(
            s,
            Traffic {
                out_frames,
                out_octets: 100 + 3016 + 16 + 4 + out_frames * 62,
                in_frames,
                in_octets: 4104 + 8 + 2052 + 4 + 1028 + in_frames * 62,
            }
        );
        // IPv6 at MTU 4096: the same message is one frame of 82 bytes' overhead.
        let u = QpTraffic::default();
        u.set_path(5, true);
        assert_eq!(u.path_mtu(), 4096);
        u.posted(Some(Direction::Send), 4096);
        assert_eq!(u.snapshot().out_octets, 4096 + 82);
        u.set_path(9, true);
        assert_eq!(u.path_mtu(), 4096, "a code out of range changes nothing");
        let c = ClosedTraffic::default();
        c.add(s);
        c.add(s);
        assert_eq!(c.get(), s.plus(s));
    }
}
