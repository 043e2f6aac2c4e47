//! The reader against CQEs written byte by byte where §11 puts each field, and its checks of
//! the device's index (M14). (The device model's own CQEs are `tests/hw_codecs.rs`.)

use super::*;
use crate::os::Uar;
use crate::os::dma::test_alloc::TestDma;
use crate::pvrdma::cqe::{WcFlags, wc_opcode, wc_status};
use crate::pvrdma::queue::CqRing;
use crate::pvrdma::uar::recording::uar;
use crate::pvrdma::uar::{CqDoorbell, bell};

/// A UD receive as the device writes it, every field distinct (§11 offsets).
fn ud_recv() -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
    b[8] = 5; // qp handle
    b[12] = 1; // high half of `qp`: kept, not masked away
    b[16] = 128; // RECV
    b[20] = 0; // SUCCESS
    b[24..28].copy_from_slice(&296u32.to_le_bytes());
    b[28..32].copy_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
    b[32] = 0x07; // src_qp
    b[36] = 0x53; // GRH | WITH_IMM | WITH_SMAC | WITH_NETWORK_HDR_TYPE
    b[40] = 0x99; // vendor_err: not read
    b[50] = 1;
    b[51..57].copy_from_slice(&[0x00, 0x50, 0x56, 1, 2, 3]);
    b[57] = 1;
    b
}

fn reader(ring: &CqRing) -> CqReader {
    let (u, _log) = uar();
    ring.reader(bells(&u)).unwrap()
}

fn bells(u: &Arc<Uar>) -> CqBells {
    CqBells {
        arm: bell(u.clone(), CqDoorbell::arm(3)),
        arm_solicited: bell(u.clone(), CqDoorbell::arm_solicited(3)),
        poll: bell(u.clone(), CqDoorbell::poll(3)),
    }
}

#[test]
fn load_reads_each_field_where_the_device_wrote_it() {
    let dma = TestDma::new_dyn();
    let ring = CqRing::alloc(&dma, 4).unwrap();
    let cq = reader(&ring);
    let dev = reader(&ring);
    dev.produce_for_test(&ud_recv());
    assert_eq!(cq.ready(0), CqState::Ready(1));
    let c = cq.load(0);
    assert_eq!(
        c,
        CqeView {
            wr_id: 0x0102_0304_0506_0708,
            qp: 0x1_0000_0005,
            opcode: wc_opcode::RECV,
            status: wc_status::SUCCESS,
            byte_len: 296,
            ex: 0xEFBE_ADDE,
            wc_flags: (WcFlags::GRH
                | WcFlags::WITH_IMM
                | WcFlags::WITH_SMAC
                | WcFlags::WITH_NETWORK_HDR_TYPE)
                .bits(),
        }
    );
    assert_eq!(
        c.ex.to_le_bytes(),
        [0xDE, 0xAD, 0xBE, 0xEF],
        "imm bytes as sent"
    );
    assert_eq!(
        cq.load_core(0),
        (0x0102_0304_0506_0708, 0x1_0000_0005, wc_status::SUCCESS)
    );
    // An error CQE: status @20 beside a garbage opcode, both raw.
    let mut e = [0xA5u8; 64];
    e[16..20].copy_from_slice(&999u32.to_le_bytes());
    e[20..24].copy_from_slice(&wc_status::WR_FLUSH_ERR.to_le_bytes());
    dev.produce_for_test(&e);
    let c = cq.load(1);
    assert_eq!((c.opcode, c.status), (999, wc_status::WR_FLUSH_ERR));
    assert_eq!(cq.load_core(1).2, wc_status::WR_FLUSH_ERR);
    // A UD receive's sender: `src_qp` @32 (24 bits of it), `smac` @51..57 across two words.
    assert_eq!(
        cq.load_ud(0),
        UdSource {
            src_qp: 7,
            smac: [0x00, 0x50, 0x56, 1, 2, 3]
        }
    );
    // 0xA5 everywhere: the QPN keeps its 24 bits only.
    assert_eq!(
        cq.load_ud(1),
        UdSource {
            src_qp: 0x00A5_A5A5,
            smac: [0xA5; 6]
        }
    );
}

#[test]
fn reader_validates_the_device_index_and_consumes() {
    let dma = TestDma::new_dyn();
    let (u, log) = uar();
    let ring = CqRing::alloc(&dma, 4).unwrap();
    let cq = ring.reader(bells(&u)).unwrap();
    // A second reader stands in for the device (its producer side).
    let dev = reader(&ring);
    assert_eq!(cq.ready(0), CqState::Empty);
    assert!(!cq.has_entries());
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&0x2_0000_0005u64.to_le_bytes());
    b[8] = 9;
    b[16] = 128;
    b[20] = 0;
    b[24..28].copy_from_slice(&4096u32.to_le_bytes());
    b[28..32].copy_from_slice(&0x77u32.to_le_bytes());
    b[36] = 4;
    for _ in 0..3 {
        dev.produce_for_test(&b);
    }
    assert_eq!(cq.ready(0), CqState::Ready(3));
    assert!(cq.has_entries());
    let c = cq.load(2);
    assert_eq!(
        c,
        CqeView {
            wr_id: 0x2_0000_0005,
            qp: 9,
            opcode: 128,
            status: 0,
            byte_len: 4096,
            ex: 0x77,
            wc_flags: 4,
        }
    );
    // Consume two: cons_head (@12) follows, the rest stays ready.
    cq.consume(cq.next(cq.next(0)));
    assert_eq!(cq.head(), 2);
    assert_eq!(ring_cons_head(&cq), 2);
    assert_eq!(cq.ready(2), CqState::Ready(1));
    // Indices wrap at 2N = 8.
    assert_eq!(cq.next(7), 0);
    // A device index outside [0, 2N), or more than N ahead, is corrupt (M14).
    let tail = cq.index(0);
    tail.store(8, Ordering::Relaxed);
    assert_eq!(cq.ready(2), CqState::Corrupt);
    tail.store(7, Ordering::Relaxed);
    assert_eq!(cq.ready(2), CqState::Corrupt, "5 ahead of a 4-entry ring");
    tail.store(6, Ordering::Relaxed);
    assert_eq!(cq.ready(2), CqState::Ready(4));
    cq.consume(6);
    assert_eq!(cq.ready(6), CqState::Empty);
    log.after(4, || cq.arm(false));
    log.after(4, || cq.arm(true));
    assert_eq!(log.rung(), [(4, 0x4000_0003), (4, 0x2000_0003)]);
}

/// Defect 8: `cons_head` was written through `prod_tail`'s pointer plus one word, but that
/// pointer came from a reference to `prod_tail` alone (Miri, in `consume`: "trying to retag
/// from <..> for SharedReadWrite permission at alloc..[0xc], but that tag does not exist in
/// the borrow stack for this location", the tag "created by a SharedReadWrite retag at
/// offsets [0x8..0xc]").
#[test]
fn cons_head_is_published_with_the_provenance_of_its_own_word() {
    let dma = TestDma::new_dyn();
    let ring = CqRing::alloc(&dma, 4).unwrap();
    let cq = reader(&ring);
    let dev = reader(&ring);
    dev.produce_for_test(&ud_recv());
    assert_eq!(cq.ready(0), CqState::Ready(1));
    cq.consume(cq.next(0));
    assert_eq!(
        ring_cons_head(&dev),
        1,
        "the same ring word, seen by the device"
    );
    assert_eq!(
        dev.index(0).load(Ordering::Relaxed),
        1,
        "prod_tail untouched"
    );
}

fn ring_cons_head(cq: &CqReader) -> u32 {
    cq.index(1).load(Ordering::Relaxed)
}

#[test]
fn a_look_at_an_empty_ring_rings_poll_then_looks_again() {
    let dma = TestDma::new_dyn();
    let (u, log) = uar();
    let ring = CqRing::alloc(&dma, 4).unwrap();
    let cq = ring.reader(bells(&u)).unwrap();
    let dev = reader(&ring);
    let mut found = CqState::Corrupt;
    log.after(4, || found = cq.poll_device(0));
    assert_eq!(found, CqState::Empty);
    let mut waiting = true;
    log.after(4, || waiting = cq.poll_has_entries());
    assert!(!waiting);
    // What the device wrote before the POLL store returned is seen by the second look.
    dev.produce_for_test(&[0u8; 64]);
    log.after(4, || found = cq.poll_device(0));
    assert_eq!(found, CqState::Ready(1));
    assert_eq!(
        log.rung(),
        [(4, 0x8000_0003); 3],
        "CQ_POLL | handle, once per look"
    );
}
