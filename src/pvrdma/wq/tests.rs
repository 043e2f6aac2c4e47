//! The writer's WQE bytes against the §10 layout spelled out byte by byte, its bounds, and
//! its records. (The device model's own reading of the same bytes is `tests/hw_codecs.rs`.)

use super::*;
use crate::os::dma::test_alloc::TestDma;
use crate::pvrdma::queue::{QpLayout, QpQueues};
use crate::pvrdma::uar::recording::uar;
use crate::pvrdma::uar::{QpDoorbell, bell};
use crate::pvrdma::wqe::{AccessFlags, SendFlags, WrOpcode};
use std::vec;
use std::vec::Vec;

fn sge(i: u64) -> Sge {
    Sge {
        addr: 0x1000_0000_0000 + i * 0x111,
        length: 100 + i as u32,
        lkey: 0x500 + i as u32,
    }
}

/// A send and a receive writer on a 3-page buffer (rings in pages 1 and 2, N = 8), every
/// WQE byte pre-set to `fill` so that what a write leaves alone shows.
struct Rings {
    buf: Arc<PagedBuffer>,
    sq: SendWriter,
    rq: RecvWriter,
}

fn rings(sq_stride: u32, sq_sge: u32, rq_stride: u32, rq_sge: u32, fill: u8) -> Rings {
    let dma = TestDma::new_dyn();
    let (u, _log) = uar();
    let buf = Arc::new(PagedBuffer::alloc(&dma, 3).unwrap());
    for p in 1..3 {
        buf.view(p * 4096, 4096)
            .unwrap()
            .write_bytes(0, &[fill; 4096]);
    }
    let g = |first_page, stride, max_sge, state| WqGeometry {
        first_page,
        n: 8,
        stride,
        max_sge,
        state,
    };
    let sq = SendWriter::new(
        buf.clone(),
        g(1, sq_stride, sq_sge, 0),
        bell(u.clone(), QpDoorbell::send(7)),
    )
    .unwrap();
    let rq = RecvWriter::new(
        buf.clone(),
        g(2, rq_stride, rq_sge, 8),
        bell(u, QpDoorbell::recv(7)),
    )
    .unwrap();
    Rings { buf, sq, rq }
}

fn le64(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

#[test]
fn rdma_write_bytes() {
    let r = rings(128, 1, 32, 1, 0xEE);
    let sges = [Sge {
        addr: 0x1122_3344_5566_7788,
        length: 0x100,
        lkey: 0x0000_0305,
    }];
    let h = SqHeader {
        op_word: SqHeader::op_word(
            WrOpcode::RdmaWriteWithImm,
            SendFlags::SIGNALED | SendFlags::FENCE,
        ),
        ex: u32::from_le_bytes([0xDE, 0xAD, 0xBE, 0xEF]),
        body: SqHeader::rdma_body(0x7000_1000, 0x0000_0A01),
    };
    assert!(r.sq.slot(9).write_send(0xAABB_CCDD_0011_2233, &h, &sges));
    let mut b = [0u8; 128];
    r.sq.read_element(9, &mut b);
    let mut want = [0u8; 96];
    want[0..8].copy_from_slice(&le64(0xAABB_CCDD_0011_2233));
    want[8] = 1;
    want[16] = 1;
    want[20] = 3;
    want[24..28].copy_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
    want[32..40].copy_from_slice(&le64(0x7000_1000));
    want[40..44].copy_from_slice(&[0x01, 0x0A, 0, 0]);
    want[80..88].copy_from_slice(&le64(0x1122_3344_5566_7788));
    want[88..92].copy_from_slice(&[0, 1, 0, 0]);
    want[92..96].copy_from_slice(&[5, 3, 0, 0]);
    assert_eq!(&b[..96], &want);
    assert!(
        b[96..].iter().all(|&x| x == 0xEE),
        "nothing written past the WQE"
    );
    // Slot 9 of 8 is element 1, at byte 128 of the ring's first page.
    let mut at = [0u8; 8];
    r.buf.view(4096 + 128, 8).unwrap().read_bytes(0, &mut at);
    assert_eq!(at, le64(0xAABB_CCDD_0011_2233));
}

#[test]
fn fast_reg_and_send_with_inv_bytes() {
    let r = rings(128, 1, 32, 1, 0xFF);
    let h = SqHeader {
        op_word: SqHeader::op_word(WrOpcode::FastRegMr, SendFlags::empty()),
        ex: 0,
        body: SqHeader::fast_reg_body(
            0x1_0000_0010,
            0x9000,
            3,
            0x2000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            0x0000_0207,
        ),
    };
    assert!(r.sq.slot(0).write_send(1, &h, &[]));
    let mut b = [0u8; 80];
    r.sq.read_element(0, &mut b);
    let mut want = [0u8; 80];
    want[0] = 1;
    want[16] = 11;
    want[32..40].copy_from_slice(&le64(0x1_0000_0010));
    want[40..48].copy_from_slice(&le64(0x9000));
    want[48] = 12;
    want[52] = 3;
    want[56..60].copy_from_slice(&[0, 0x20, 0, 0]);
    want[60] = 5;
    want[64..68].copy_from_slice(&[7, 2, 0, 0]);
    assert_eq!(b, want);

    // The same slot again, a shorter union: every header byte is rewritten.
    let h = SqHeader {
        op_word: SqHeader::op_word(WrOpcode::SendWithInv, SendFlags::SOLICITED),
        ex: 0x1234_5678,
        body: [0; 6],
    };
    assert!(r.sq.slot(8).write_send(2, &h, &[]));
    r.sq.read_element(0, &mut b);
    assert_eq!(b[0], 2);
    assert_eq!(
        &b[16..32],
        &[8, 0, 0, 0, 4, 0, 0, 0, 0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0]
    );
    assert!(b[32..80].iter().all(|&x| x == 0), "union zeroed on reuse");
}

#[test]
fn recv_bytes_and_sge_bounds() {
    let r = rings(128, 3, 64, 3, 0);
    let sges = [
        Sge {
            addr: 0x10,
            length: 1,
            lkey: 2,
        },
        Sge {
            addr: 0x20,
            length: 3,
            lkey: 4,
        },
    ];
    assert!(r.rq.slot(6).write_recv(0x55, &sges));
    let mut b = [0u8; 64];
    r.rq.read_element(6, &mut b);
    let mut want = [0u8; 64];
    want[0] = 0x55;
    want[8] = 2;
    want[16] = 0x10;
    want[24] = 1;
    want[28] = 2;
    want[32] = 0x20;
    want[40] = 3;
    want[44] = 4;
    assert_eq!(b, want);
    // More SGEs than the ring holds: refused, nothing written.
    let four: Vec<Sge> = (0..4).map(sge).collect();
    assert!(!r.rq.slot(6).write_recv(1, &four));
    r.rq.read_element(6, &mut b);
    assert_eq!(b, want);
    let h = SqHeader::default();
    let mut before = [0u8; 128];
    r.sq.read_element(2, &mut before);
    assert!(!r.sq.slot(2).write_send(1, &h, &four));
    let mut after = [0u8; 128];
    r.sq.read_element(2, &mut after);
    assert_eq!(before, after);
    // At the limit: three SGEs, the last ending at byte 128 of the send element.
    let three: Vec<Sge> = (0..3).map(sge).collect();
    assert!(r.sq.slot(2).write_send(1, &h, &three));
    r.sq.read_element(2, &mut after);
    assert_eq!(after[112..120], le64(three[2].addr));
    assert_eq!(after[8], 3);
}

#[test]
fn publish_wraps_at_2n_and_the_doorbell_is_one_store() {
    let dma = TestDma::new_dyn();
    let (u, log) = uar();
    let layout = QpLayout::new(8, 4, Some((4, 3))).unwrap();
    let q = QpQueues::alloc(&dma, &layout).unwrap();
    let sq = q.sq.writer(bell(u.clone(), QpDoorbell::send(7))).unwrap();
    let rq =
        q.rq.as_ref()
            .unwrap()
            .writer(bell(u, QpDoorbell::recv(7)))
            .unwrap();
    assert_eq!((sq.entries(), sq.max_sge(), rq.entries()), (8, 4, 4));
    sq.publish(17);
    assert_eq!(sq.published(), 1);
    rq.publish(8);
    assert_eq!(rq.published(), 0);
    log.after(0, || sq.ring_doorbell());
    log.after(0, || rq.ring_doorbell());
    assert_eq!(log.rung(), [(0, 0x4000_0007), (0, 0x8000_0007)]);
    assert_eq!(sq.device_cons_head(), 0);
}

#[test]
fn each_writer_checks_its_elements_hold_its_header_and_sges() {
    let dma = TestDma::new_dyn();
    let (u, _log) = uar();
    let buf = Arc::new(PagedBuffer::alloc(&dma, 3).unwrap());
    let g = |stride, max_sge| WqGeometry {
        first_page: 1,
        n: 8,
        stride,
        max_sge,
        state: 0,
    };
    let send = |g| SendWriter::new(buf.clone(), g, bell(u.clone(), QpDoorbell::send(1)));
    let recv = |g| RecvWriter::new(buf.clone(), g, bell(u.clone(), QpDoorbell::recv(1)));
    // A receive ring's 64-byte elements hold 16 + 3·16 bytes; a send WQE's 80-byte header
    // alone does not fit, so the same geometry gives no send writer.
    assert!(recv(g(64, 3)).is_ok());
    assert_eq!(send(g(64, 3)).err(), Some(PvrdmaError::InvalidParameter));
    assert_eq!(send(g(64, 1)).err(), Some(PvrdmaError::InvalidParameter));
    // At the limit and one SGE over it.
    assert!(send(g(128, 3)).is_ok());
    assert_eq!(send(g(128, 4)).err(), Some(PvrdmaError::InvalidParameter));
    assert!(recv(g(32, 1)).is_ok());
    assert_eq!(recv(g(64, 4)).err(), Some(PvrdmaError::InvalidParameter));
    // No SGE at all, or a count whose bytes overflow.
    assert_eq!(send(g(128, 0)).err(), Some(PvrdmaError::InvalidParameter));
    assert_eq!(recv(g(64, 0)).err(), Some(PvrdmaError::InvalidParameter));
    assert_eq!(
        recv(g(4096, u32::MAX)).err(),
        Some(PvrdmaError::InvalidParameter)
    );
    // The geometry checks every writer makes: a power-of-two stride within a page, a
    // power-of-two N, elements and ring state inside the buffer.
    for bad in [
        WqGeometry {
            stride: 96,
            ..g(128, 1)
        },
        WqGeometry {
            stride: 8192,
            ..g(128, 1)
        },
        WqGeometry { n: 6, ..g(128, 1) },
        WqGeometry {
            n: 128,
            ..g(128, 1)
        },
        WqGeometry {
            first_page: 3,
            ..g(128, 1)
        },
        WqGeometry {
            state: 4092,
            ..g(128, 1)
        },
    ] {
        assert_eq!(
            send(bad).err(),
            Some(PvrdmaError::InvalidParameter),
            "{bad:?}"
        );
        assert_eq!(
            recv(bad).err(),
            Some(PvrdmaError::InvalidParameter),
            "{bad:?}"
        );
    }
    // A writer keeps its format through `with_records`; its bounds are the ones checked.
    let sq = send(g(128, 3)).unwrap().with_records(|| 0u8).unwrap();
    assert_eq!((sq.entries(), sq.max_sge()), (8, 3));
    let h = SqHeader::default();
    let three: Vec<Sge> = (0..3).map(sge).collect();
    assert!(sq.slot(7).write_send(1, &h, &three));
    let four: Vec<Sge> = (0..4).map(sge).collect();
    assert!(!sq.slot(7).write_send(1, &h, &four));
    let rq = recv(g(64, 3)).unwrap();
    assert!(rq.slot(7).write_recv(1, &three));
    assert!(!rq.slot(7).write_recv(1, &four));
}

#[test]
fn records_and_wqes_share_one_index_across_the_wrap() {
    let dma = TestDma::new_dyn();
    let (u, _log) = uar();
    let layout = QpLayout::new(8, 1, None).unwrap();
    let q = QpQueues::alloc(&dma, &layout).unwrap();
    let plain = q.sq.writer(bell(u.clone(), QpDoorbell::send(7))).unwrap();
    let mut k = 0u32;
    let sq =
        q.sq.writer(bell(u, QpDoorbell::send(7)))
            .unwrap()
            .with_records(|| {
                k += 1;
                AtomicU32::new(k)
            })
            .unwrap();
    assert_eq!((sq.entries(), sq.max_sge()), (8, 1));
    let h = SqHeader {
        op_word: SqHeader::op_word(WrOpcode::RdmaWrite, SendFlags::SIGNALED),
        ex: 0,
        body: SqHeader::rdma_body(0x1234, 5),
    };
    // Free-running indices around the wrap of the ring and of u32.
    for i in (u32::MAX - 9..=u32::MAX).chain(0..20) {
        let slot = sq.slot(i);
        assert!(core::ptr::eq(slot.record(), sq.record(i)));
        assert!(core::ptr::eq(sq.record(i), sq.record(i.wrapping_add(8))));
        assert_eq!(sq.record(i).load(Ordering::Relaxed), (i & 7) + 1, "{i}");
        let wr_id = 0x1_0000_0000 | u64::from(i);
        assert!(slot.write_send(wr_id, &h, &[sge(1)]));
        // The element the record sits beside is the one the writer without records sees.
        let mut got = vec![0u8; 96];
        plain.read_element(i & 7, &mut got);
        assert_eq!(got[0..8], wr_id.to_le_bytes(), "{i}");
        assert_eq!(got[8], 1);
        // Too many SGEs: refused, nothing written.
        assert!(!slot.write_send(0, &h, &[sge(1), sge(2)]));
        plain.read_element(i, &mut got);
        assert_eq!(got[0..8], wr_id.to_le_bytes());
    }
}
