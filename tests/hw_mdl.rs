//! MDLs describing consumer memory in the model's DMA space, walked by the driver
//! (`os::mdl`, windows-build.md §6), turned into a page directory and a normal MR (§6, §8),
//! and read back by the model through that MR: the path NdkRegisterMr will take.

mod common;

use common::Harness;
use common::memory::ConsumerMem;
use common::objects::*;
use pvrdma_ndk::os::mdl::{MdlChain, MdlError, MdlPage};
use pvrdma_ndk::pvrdma::cmd::{CreateMr, DestroyMr, mr_flags};
use pvrdma_ndk::pvrdma::pdir::PageDir;
use pvrdma_ndk::pvrdma::wqe::AccessFlags;

#[test]
fn mdl_chain_to_mr_reads_the_right_bytes() {
    let h = Harness::deterministic();
    let dev = h.dev();
    let mem = ConsumerMem::new(&h.rig.space, 3, 0x6000_0000);
    let pattern: Vec<u8> = (0..3 * 4096).map(|i| (i * 7 % 251) as u8).collect();
    mem.buf.write(0, &pattern);
    // Two MDLs, virtually contiguous, the boundary inside page 1.
    let mut a = mem.mdl(0x123, 0x1000);
    let b = mem.mdl(0x1123, 0x1700);
    a.set_next(Some(&b));
    // SAFETY: `a` and `b` are live MDLs with their PFN arrays, unchanged during the walk.
    let chain = unsafe { MdlChain::from_ptr(a.as_ptr()) }.unwrap();
    let pages: Vec<MdlPage> = chain.pages().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        pages,
        (0..3)
            .map(|i| MdlPage {
                va: mem.va + 4096 * i as u64,
                pfn: mem.bus(i) >> 12,
            })
            .collect::<Vec<_>>()
    );
    let (start, len) = chain.span().unwrap();
    assert_eq!((start, len), (mem.va + 0x123, 0x2700));

    let pd = create_pd(dev);
    let qp_cq = create_cq(dev, 16).unwrap();
    let qp = create_qp(dev, &QpSpec::rc(pd, qp_cq.handle)).unwrap();
    let dir = PageDir::new(dev.platform().dma(), pages.len() as u32).unwrap();
    for (i, p) in pages.iter().enumerate() {
        dir.set_page(i as u32, p.pfn << 12).unwrap();
    }
    let mr = dev
        .cmd()
        .execute(&CreateMr {
            start,
            length: len,
            pdir_dma: dir.dma(),
            pd_handle: pd,
            access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            flags: mr_flags::NORMAL,
            nchunks: pages.len() as u32,
        })
        .unwrap();
    // Read 64 bytes straddling the page 0/1 boundary, and the last 16 bytes of the region.
    for (va, n) in [(mem.va + 0xFE0, 64usize), (start + len - 16, 16)] {
        let mut got = vec![0u8; n];
        let ok = h
            .rig
            .model
            .with_core(|c| c.remote_read(qp.handle(), mr.rkey, va, &mut got));
        assert!(ok, "read at {va:#x}");
        let off = (va - mem.va) as usize;
        assert_eq!(got, pattern[off..off + n]);
    }
    // One byte past the region is refused.
    let mut one = [0u8; 1];
    assert!(
        !h.rig
            .model
            .with_core(|c| c.remote_read(qp.handle(), mr.rkey, start + len, &mut one))
    );
    dev.cmd()
        .execute(&DestroyMr {
            mr_handle: mr.mr_handle,
        })
        .unwrap();
    destroy_qp(dev, qp);
    destroy_cq(dev, qp_cq);
    destroy_pd(dev, pd);
    drop((dir, a, b, mem));
    h.finish();
}

#[test]
fn non_contiguous_chain_is_refused() {
    let h = Harness::deterministic();
    let mem = ConsumerMem::new(&h.rig.space, 3, 0x6000_0000);
    let mut a = mem.mdl(0, 0x1000);
    let b = mem.mdl(0x2000, 0x1000); // skips page 1
    a.set_next(Some(&b));
    // SAFETY: live MDLs with their PFN arrays.
    let chain = unsafe { MdlChain::from_ptr(a.as_ptr()) }.unwrap();
    assert_eq!(chain.span(), Err(MdlError::NotContiguous));
    assert_eq!(chain.region(0x1000).map(|r| r.page_count()), Ok(1));
    assert_eq!(chain.region(0x1001).unwrap_err(), MdlError::NotContiguous);
    drop((a, b, mem));
    h.finish();
}
