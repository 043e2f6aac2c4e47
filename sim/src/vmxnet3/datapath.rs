//! The data path of the vmxnet3 model: Tx rings to the fabric, the fabric to Rx rings
//! (vmxnet3.md §3.7; model rules V8, V9).
#![deny(unsafe_code)]

use super::layout::{self, MAX_TXD_PER_PKT, desc, qerr, rxm};
use super::{Core, DevRing};
use crate::dma::DmaSpace;

/// Where a frame was addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cast {
    Unicast,
    Multicast,
    Broadcast,
}

pub(super) fn cast_of(dst: &[u8]) -> Cast {
    if dst == [0xFF; 6] {
        Cast::Broadcast
    } else if dst.first().is_some_and(|b| b & 1 != 0) {
        Cast::Multicast
    } else {
        Cast::Unicast
    }
}

/// Reads the descriptor at `at`: its dword 2 first with acquire ordering (the generation bit
/// the driver flips last), then, if it carries `want`, all four dwords. `None`
/// when it is not the device's; `Err` when it is not in DMA memory.
fn read_desc(
    dma: &DmaSpace,
    at: u64,
    gen_field: (usize, u32, u32),
    want: u32,
) -> Result<Option<[u32; 4]>, ()> {
    let d2 = dma.read_u32(at + 8).map_err(|_| ())?;
    let mut probe = [0u32; 4];
    probe[2] = d2;
    if desc::get(&probe, gen_field) != want {
        return Ok(None);
    }
    let mut b = [0u8; 16];
    dma.read(at, &mut b).map_err(|_| ())?;
    Ok(Some(desc::dwords(&b)))
}

/// Writes a completion descriptor: dwords 0–2, then dword 3 (the generation) with release
/// ordering, so a driver that sees the generation sees the rest.
fn write_completion(dma: &DmaSpace, at: u64, d: &[u32; 4]) -> bool {
    let b = desc::bytes(d);
    dma.write(at, &b[..12]).is_ok() && dma.write_u32(at + 12, d[3]).is_ok()
}

/// One's-complement sum of `data` (RFC 1071), folded.
fn ones_sum(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in chunks.by_ref() {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(*b) << 8;
    }
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc
}

// One value at a time, on the stack of `kick_tx`: the size is not worth a box.
#[allow(clippy::large_enum_variant)]
enum TxTake {
    Empty,
    Error(u32),
    Packet {
        eop: u32,
        frags: [(u64, u32); MAX_TXD_PER_PKT],
        n: usize,
        sop: [u32; 4],
        ring: DevRing,
    },
}

impl Core {
    /// Takes the next packet of Tx queue `q` (V8): SOP to EOP, each descriptor the device's.
    fn take_tx_packet(&mut self, q: usize) -> TxTake {
        let Some(t) = self.conf.as_ref().and_then(|a| a.txq.get(q)) else {
            return TxTake::Empty;
        };
        if t.status.stopped {
            return TxTake::Empty;
        }
        let mut ring = t.ring;
        let mut frags = [(0u64, 0u32); MAX_TXD_PER_PKT];
        let mut sop = [0u32; 4];
        for i in 0..MAX_TXD_PER_PKT {
            let idx = ring.next;
            let d = match read_desc(&self.dma, ring.at(idx), desc::TX_GEN, ring.generation) {
                Err(()) => return TxTake::Error(qerr::INVALID),
                Ok(None) if i == 0 => return TxTake::Empty,
                // The SOP was handed over, so the whole packet must have been.
                Ok(None) => return TxTake::Error(qerr::NOEOP),
                Ok(Some(d)) => d,
            };
            if desc::get(&d, desc::TX_DTYPE) != 0 {
                return TxTake::Error(qerr::DESC_NOT_SPT);
            }
            if i == 0 {
                sop = d;
            }
            let addr = u64::from(d[0]) | (u64::from(d[1]) << 32);
            let len = match desc::get(&d, desc::TX_LEN) {
                0 => layout::MAX_TX_BUF,
                l => l,
            };
            frags[i] = (addr, len);
            ring.advance();
            if desc::get(&d, desc::TX_EOP) != 0 {
                return TxTake::Packet {
                    eop: idx,
                    frags,
                    n: i + 1,
                    sop,
                    ring,
                };
            }
        }
        TxTake::Error(qerr::BIG_PKT)
    }

    /// Serves a TXPROD doorbell of queue `q`: every packet the driver handed over.
    pub(super) fn kick_tx(&mut self, q: u8) {
        if !self.running {
            return;
        }
        let qi = usize::from(q);
        let limit = self
            .conf
            .as_ref()
            .and_then(|a| a.txq.get(qi))
            .map_or(0, |t| t.ring.size);
        for _ in 0..limit {
            match self.take_tx_packet(qi) {
                TxTake::Empty => return,
                TxTake::Error(code) => {
                    self.tx_queue_error(q, code);
                    return;
                }
                TxTake::Packet {
                    eop,
                    frags,
                    n,
                    sop,
                    ring,
                } => {
                    if let Some(t) = self.conf.as_mut().and_then(|a| a.txq.get_mut(qi)) {
                        t.ring = ring;
                    }
                    if !self.send_packet(qi, &frags[..n], &sop) {
                        self.tx_queue_error(q, qerr::INVALID);
                        return;
                    }
                    if !self.complete_tx(qi, eop) {
                        self.tx_queue_error(q, qerr::INVALID);
                        return;
                    }
                }
            }
        }
    }

    /// Gathers, checks and sends one packet; false on a DMA fault (the queue stops).
    fn send_packet(&mut self, q: usize, frags: &[(u64, u32)], sop: &[u32; 4]) -> bool {
        let Some(mtu) = self.conf.as_ref().map(|a| a.mtu) else {
            return true;
        };
        let total: u64 = frags.iter().map(|&(_, l)| u64::from(l)).sum();
        let om = desc::get(sop, desc::TX_OM);
        let insert_tag = desc::get(sop, desc::TX_TI) != 0;
        let stats = |c: &mut Core, f: &dyn Fn(&mut super::TxStats)| {
            if let Some(t) = c.conf.as_mut().and_then(|a| a.txq.get_mut(q)) {
                f(&mut t.stats);
            }
        };
        // V8: 14 bytes of Ethernet header at least, mtu + 18 at most (a tag the device
        // inserts comes on top); TSO and the v4 encapsulation mode are not modelled.
        let max = u64::from(mtu) + 18;
        if total < 14 || total > max || (om != desc::OM_NONE && om != desc::OM_CSUM) {
            self.counters.tx_errors += 1;
            stats(self, &|s| s.error += 1);
            return true;
        }
        let mut frame = match self.port.as_ref() {
            Some((_, h)) => h.frame_buffer(),
            None => Vec::new(),
        };
        frame.clear();
        // CAST: total ≤ mtu + 18 ≤ 9018.
        frame.resize(total as usize, 0);
        let mut at = 0usize;
        for &(addr, len) in frags {
            let end = at + len as usize;
            if self.dma.read(addr, &mut frame[at..end]).is_err() {
                self.fault();
                return false;
            }
            at = end;
        }
        if om == desc::OM_CSUM && !fill_checksum(&mut frame, sop) {
            self.counters.tx_errors += 1;
            stats(self, &|s| s.error += 1);
            return true;
        }
        if insert_tag {
            let tci = desc::get(sop, desc::TX_TCI) as u16;
            let mut tag = [0x81, 0x00, 0, 0];
            tag[2..4].copy_from_slice(&tci.to_be_bytes());
            frame.splice(12..12, tag);
        }
        let len = frame.len() as u64;
        if !self.link_up {
            self.counters.tx_discards += 1;
            stats(self, &|s| s.discard += 1);
            return true;
        }
        let cast = cast_of(&frame[0..6]);
        stats(self, &|s| match cast {
            Cast::Unicast => {
                s.ucast_pkts += 1;
                s.ucast_bytes += len;
            }
            Cast::Multicast => {
                s.mcast_pkts += 1;
                s.mcast_bytes += len;
            }
            Cast::Broadcast => {
                s.bcast_pkts += 1;
                s.bcast_bytes += len;
            }
        });
        self.counters.tx_frames += 1;
        self.counters.tx_bytes += len;
        match self.port.as_ref() {
            Some((port, h)) => h.transmit(*port, frame),
            None => {
                if self.outbox.len() < 4096 {
                    self.outbox.push_back(frame);
                }
            }
        }
        true
    }

    /// Writes the Tx completion of the packet ending at `eop` and raises the queue's vector.
    fn complete_tx(&mut self, q: usize, eop: u32) -> bool {
        let Some(t) = self.conf.as_mut().and_then(|a| a.txq.get_mut(q)) else {
            return true;
        };
        let mut d = [0u32; 4];
        desc::set(&mut d, desc::TCD_TXIDX, eop);
        desc::set(&mut d, desc::TCD_TYPE, desc::TYPE_TXCOMP);
        desc::set(&mut d, desc::TCD_GEN, t.comp.generation);
        let at = t.comp.at(t.comp.next);
        t.comp.advance();
        let intr = t.intr;
        if !write_completion(&self.dma, at, &d) {
            self.fault();
            return false;
        }
        self.raise(intr);
        true
    }

    /// Whether the Rx filter passes a frame (V9).
    fn filter_passes(&self, frame: &[u8]) -> bool {
        let Some(f) = self.conf.as_ref().map(|a| &a.filter) else {
            return false;
        };
        if f.mode & rxm::PROMISC != 0 {
            return true;
        }
        if frame.get(12..14) == Some(&[0x81, 0x00]) {
            let vid = frame
                .get(14..16)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]) & 0x0FFF);
            let bit = f
                .vlans
                .get(usize::from(vid / 32))
                .is_some_and(|w| w & (1 << (vid % 32)) != 0);
            if vid != 0 && !bit {
                return false;
            }
        }
        let dst = &frame[0..6];
        match cast_of(dst) {
            Cast::Unicast => f.mode & rxm::UCAST != 0 && dst == self.mac,
            Cast::Broadcast => f.mode & rxm::BCAST != 0,
            Cast::Multicast => {
                f.mode & rxm::ALL_MULTI != 0
                    || (f.mode & rxm::MCAST != 0 && f.multicast.iter().any(|m| m == dst))
            }
        }
    }

    /// A frame from the fabric into Rx queue 0 (V9); true if it reached the driver.
    pub(super) fn receive(&mut self, frame: &[u8]) -> bool {
        if !self.running {
            self.counters.rx_inactive += 1;
            return false;
        }
        // QEMU pads short frames before filtering them (an option, V9).
        let padded;
        let frame = if frame.len() < self.cfg.rx_min_frame {
            let mut p = frame.to_vec();
            p.resize(self.cfg.rx_min_frame, 0);
            padded = p;
            &padded[..]
        } else {
            frame
        };
        if frame.len() < 14 {
            self.counters.rx_errors += 1;
            return false;
        }
        if !self.filter_passes(frame) {
            self.counters.rx_filtered += 1;
            return false;
        }
        let Some(a) = self.conf.as_ref() else {
            return false;
        };
        let (features, mtu) = (a.features, a.mtu);
        let Some(rq) = a.rxq.first() else {
            return false;
        };
        if rq.status.stopped || frame.len() > mtu as usize + 18 {
            self.counters.rx_errors += 1;
            if let Some(r) = self.conf.as_mut().and_then(|a| a.rxq.first_mut()) {
                r.stats.error += 1;
            }
            return false;
        }
        // VLAN stripping (UPT1_F_RXVLAN): the tag goes to the completion.
        let mut tci = None;
        let stripped;
        let data: &[u8] = if features & layout::upt::RXVLAN != 0
            && frame.get(12..14) == Some(&[0x81, 0x00])
            && frame.len() >= 18
        {
            tci = Some(u16::from_be_bytes([frame[14], frame[15]]));
            let mut v = Vec::with_capacity(frame.len() - 4);
            v.extend_from_slice(&frame[..12]);
            v.extend_from_slice(&frame[16..]);
            stripped = v;
            &stripped
        } else {
            frame
        };
        match self.plan_rx(data.len()) {
            Err(code) => {
                self.rx_queue_error(0, code);
                false
            }
            Ok(false) => {
                self.counters.rx_out_of_buf += 1;
                if let Some(r) = self.conf.as_mut().and_then(|a| a.rxq.first_mut()) {
                    r.stats.out_of_buf += 1;
                }
                false
            }
            Ok(true) => self.commit_rx(data, tci),
        }
    }

    /// Picks the buffers a frame of `len` bytes needs into `self.rx_takes` without consuming
    /// anything: Ok(false) when there are not enough, Err(code) for a bad descriptor.
    fn plan_rx(&mut self, len: usize) -> Result<bool, u32> {
        self.rx_takes.clear();
        let Some(a) = self.conf.as_ref() else {
            return Ok(false);
        };
        let Some(rq) = a.rxq.first() else {
            return Ok(false);
        };
        let update_prod = self.cfg.update_rx_prod;
        let mut rings = rq.rings;
        let prod = rq.prod;
        let (windows, max_sg) = (a.windows, a.max_rx_sg as usize);
        let mut left = len;
        let mut first = true;
        while left > 0 {
            if self.rx_takes.len() >= max_sg {
                return Ok(false);
            }
            // Head buffers (and, for Windows guests, every buffer) come from ring 0, where
            // body descriptors are skipped; otherwise a body continues in ring 0 when one is
            // next there, else in ring 1 (QEMU's rules, V9).
            let mut taken = None;
            let try_ring0 = first || windows || rings[0].size > 0;
            if try_ring0 {
                let mut skips = 0;
                loop {
                    let r = &mut rings[0];
                    if update_prod && r.next == prod[0] {
                        break;
                    }
                    let Some(d) = read_desc(&self.dma, r.at(r.next), desc::RX_GEN, r.generation)
                        .map_err(|()| qerr::INVALID)?
                    else {
                        break;
                    };
                    if desc::get(&d, desc::RX_DTYPE) != 0 {
                        return Err(qerr::DESC_NOT_SPT);
                    }
                    let body = desc::get(&d, desc::RX_BTYPE) == desc::BTYPE_BODY;
                    if first || windows {
                        if body {
                            // Skipped: consumed without a completion ("device may skip").
                            r.advance();
                            skips += 1;
                            if skips >= r.size {
                                break;
                            }
                            continue;
                        }
                        let blen = desc::get(&d, desc::RX_LEN);
                        if blen < layout::MIN_HEAD_BUF {
                            return Err(qerr::SMALL_BUF);
                        }
                        taken = Some((0usize, r.next, d, blen));
                        r.advance();
                    } else if body {
                        let blen = desc::get(&d, desc::RX_LEN);
                        if blen == 0 {
                            return Err(qerr::SMALL_BUF);
                        }
                        taken = Some((0usize, r.next, d, blen));
                        r.advance();
                    }
                    break;
                }
            }
            if taken.is_none() && !first && !windows {
                let r = &mut rings[1];
                if r.size > 0
                    && !(update_prod && r.next == prod[1])
                    && let Some(d) = read_desc(&self.dma, r.at(r.next), desc::RX_GEN, r.generation)
                        .map_err(|()| qerr::INVALID)?
                {
                    if desc::get(&d, desc::RX_DTYPE) != 0
                        || desc::get(&d, desc::RX_BTYPE) != desc::BTYPE_BODY
                    {
                        return Err(qerr::DESC_NOT_SPT);
                    }
                    let blen = desc::get(&d, desc::RX_LEN);
                    if blen == 0 {
                        return Err(qerr::SMALL_BUF);
                    }
                    taken = Some((1usize, r.next, d, blen));
                    r.advance();
                }
            }
            let Some((ring, idx, d, blen)) = taken else {
                return Ok(false);
            };
            let chunk = left.min(blen as usize);
            self.rx_takes.push(RxTake {
                ring,
                idx,
                addr: u64::from(d[0]) | (u64::from(d[1]) << 32),
                len: chunk,
            });
            left -= chunk;
            first = false;
        }
        self.rx_rings_after = rings;
        Ok(true)
    }

    /// Writes the frame into the planned buffers, then the completions, then commits the
    /// rings and raises the queue's vector.
    fn commit_rx(&mut self, data: &[u8], tci: Option<u16>) -> bool {
        let takes = std::mem::take(&mut self.rx_takes);
        let mut at = 0;
        for t in &takes {
            if self.dma.write(t.addr, &data[at..at + t.len]).is_err() {
                self.fault();
                self.rx_takes = takes;
                self.rx_queue_error(0, qerr::INVALID);
                return false;
            }
            at += t.len;
        }
        let ctype = self.cfg.rx_completion_type & 0x7F;
        let Some(a) = self.conf.as_mut() else {
            self.rx_takes = takes;
            return false;
        };
        // CAST: at most 16 queues.
        let nrx = a.rxq.len() as u32;
        let Some(rq) = a.rxq.first_mut() else {
            self.rx_takes = takes;
            return false;
        };
        let mut comp = rq.comp;
        let mut ok = true;
        let last = takes.len().saturating_sub(1);
        for (k, t) in takes.iter().enumerate() {
            let mut d = [0u32; 4];
            desc::set(&mut d, desc::RCD_RXIDX, t.idx);
            desc::set(&mut d, desc::RCD_SOP, u32::from(k == 0));
            desc::set(&mut d, desc::RCD_EOP, u32::from(k == last));
            // CAST: ring is 0 or 1.
            desc::set(&mut d, desc::RCD_RQID, t.ring as u32 * nrx);
            desc::set(&mut d, desc::RCD_CNC, 1);
            // CAST: a chunk is at most a buffer, < 2^14.
            desc::set(&mut d, desc::RCD_LEN, t.len as u32);
            if k == last
                && let Some(tci) = tci
            {
                desc::set(&mut d, desc::RCD_TS, 1);
                desc::set(&mut d, desc::RCD_TCI, u32::from(tci));
            }
            desc::set(&mut d, desc::RCD_TYPE, ctype);
            desc::set(&mut d, desc::RCD_GEN, comp.generation);
            ok &= write_completion(&self.dma, comp.at(comp.next), &d);
            comp.advance();
        }
        rq.comp = comp;
        rq.rings = self.rx_rings_after;
        let len = data.len() as u64;
        match cast_of(&data[0..6]) {
            Cast::Unicast => {
                rq.stats.ucast_pkts += 1;
                rq.stats.ucast_bytes += len;
            }
            Cast::Multicast => {
                rq.stats.mcast_pkts += 1;
                rq.stats.mcast_bytes += len;
            }
            Cast::Broadcast => {
                rq.stats.bcast_pkts += 1;
                rq.stats.bcast_bytes += len;
            }
        }
        let intr = rq.intr;
        self.rx_takes = takes;
        if !ok {
            self.fault();
            self.rx_queue_error(0, qerr::INVALID);
            return false;
        }
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += len;
        self.raise(intr);
        true
    }
}

/// One Rx buffer a frame uses.
#[derive(Clone, Copy, Debug)]
pub(super) struct RxTake {
    ring: usize,
    idx: u32,
    addr: u64,
    len: usize,
}

/// Checksum offload (om = CSUM): `hlen` is where the L4 header starts and `msscof` where its
/// checksum field is; the field holds the pseudo-header sum (the partial-checksum
/// convention), and the device folds the rest in. False if the offsets lie outside the frame.
fn fill_checksum(frame: &mut [u8], sop: &[u32; 4]) -> bool {
    let start = desc::get(sop, desc::TX_HLEN) as usize;
    let field = desc::get(sop, desc::TX_MSSCOF) as usize;
    if start >= frame.len() || field < start || field + 2 > frame.len() {
        return false;
    }
    let sum = ones_sum(&frame[start..], 0);
    let mut c = !(sum as u16);
    if c == 0 {
        c = 0xFFFF;
    }
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}
