//! The NDK data path between two hosts over the model's RoCEv2 transport, driven through
//! the dispatch tables (ndkpi.md §5.3, §5.5, §5.7, §5.8): bytes checked byte for byte and
//! every result field the operation defines.

mod common;
mod ndk_dp;

use std::ptr::null_mut;

use common::Mode;
use common::memory::ConsumerMem;
use common::ndk::{Cluster, Qp, QpSpec, Registered, fill, read, sge, sge_logical, verify};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;

/// The bytes `sgl` (offset, length) covers in `mem`, in SGE order.
fn gather(mem: &ConsumerMem, sgl: &[(usize, usize)]) -> Vec<u8> {
    sgl.iter().flat_map(|&(o, l)| read(mem, o, l)).collect()
}

fn sges(r: &Registered, sgl: &[(usize, usize)]) -> Vec<NDK_SGE> {
    sgl.iter()
        .map(|&(o, l)| r.sge(o as u64, l as u32))
        .collect()
}

fn max_spec(ctx: usize, info: &NDK_ADAPTER_INFO) -> QpSpec {
    QpSpec {
        initiator_sge: info.MaxInitiatorRequestSge,
        receive_sge: info.MaxReceiveRequestSge,
        ..QpSpec::new(ctx)
    }
}

/// `n` SGEs of different lengths at scattered offsets of an 8-page buffer.
fn scattered(n: usize, base: usize) -> Vec<(usize, usize)> {
    (0..n)
        .map(|i| (base + i * 1024 + i % 5, 17 * (i + 1) + 3))
        .collect()
}

/// For every n in 1..=max (MaxInitiatorRequestSge on the sender, MaxReceiveRequestSge on the
/// receiver): a SEND gathered from n SGEs into a receive of n SGEs split differently; the
/// receive's BytesTransferred is the total, each receive SGE holds its slice, nothing else
/// of the receiver's memory changes.
#[test]
fn send_receive_with_one_to_max_sges_on_both_sides() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let info = c.adapter(0).query_info().unwrap();
    let (max_i, max_r) = (
        info.MaxInitiatorRequestSge as usize,
        info.MaxReceiveRequestSge as usize,
    );
    assert!(max_i >= 2 && max_r >= 2, "the device offers several SGEs");
    let p = Pair::with(&c, max_spec(QPC_A, &info), max_spec(QPC_B, &info), true);
    let ma = Registered::new(c.host(0), &p.pd_a, 8, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 8, 0x2000_0000, LOCAL);
    for n in 1..=max_i.max(max_r) {
        let (ns, nr) = (n.min(max_i), n.min(max_r));
        let send = scattered(ns, 0);
        fill(&ma.mem, 0, n as u8, 8 * 4096);
        let before = fill(&mb.mem, 0, 0xF0 ^ n as u8, 8 * 4096);
        let msg = gather(&ma.mem, &send);
        let total = msg.len();
        let chunk = total.div_ceil(nr);
        let recv: Vec<(usize, usize)> = (0..nr)
            .map(|j| {
                (
                    16_384 + j * 512 + 3,
                    if j + 1 == nr { chunk + 8 } else { chunk },
                )
            })
            .collect();
        assert_eq!(p.qb.receive(100 + n, &sges(&mb, &recv)), STATUS_SUCCESS);
        assert_eq!(p.qa.send(200 + n, &sges(&ma, &send), 0), STATUS_SUCCESS);
        let rb = p.cq_b.wait_results_ex(1);
        assert_eq!(
            res_ex(&rb[0]),
            (STATUS_SUCCESS, QPC_B, 100 + n, NdkOperationTypeReceive)
        );
        assert_eq!(rb[0].BytesTransferred as usize, total);
        let ra = p.cq_a.wait_results_ex(1);
        assert_eq!(
            res_ex(&ra[0]),
            (STATUS_SUCCESS, QPC_A, 200 + n, NdkOperationTypeSend)
        );
        let mut want = before;
        let mut at = 0;
        for &(o, l) in &recv {
            let take = l.min(total - at);
            want[o..o + take].copy_from_slice(&msg[at..at + take]);
            at += take;
        }
        assert_eq!(at, total);
        verify(&mb.mem, 0, &want);
    }
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// A WRITE gathered from MaxInitiatorRequestSge SGEs lands contiguously at the remote
/// address; the bytes around it stay; the target sees no completion.
#[test]
fn write_gathers_sges_into_contiguous_remote_memory() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let info = c.adapter(0).query_info().unwrap();
    let n = info.MaxInitiatorRequestSge as usize;
    let p = Pair::with(&c, max_spec(QPC_A, &info), max_spec(QPC_B, &info), true);
    let ma = Registered::new(c.host(0), &p.pd_a, 8, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 2, 0x2000_0000, REMOTE);
    fill(&ma.mem, 0, 0x21, 8 * 4096);
    let before = fill(&mb.mem, 0, 0x22, 8192);
    let sgl = scattered(n, 0);
    let msg = gather(&ma.mem, &sgl);
    let at = 4096 - 100;
    let st = p.qa.write(
        7,
        &sges(&ma, &sgl),
        mb.mem.va + at as u64,
        mb.mr.remote_token(),
        0,
    );
    assert_eq!(st, STATUS_SUCCESS);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A, 7, NdkOperationTypeWrite)
    );
    let mut want = before;
    want[at..at + msg.len()].copy_from_slice(&msg);
    verify(&mb.mem, 0, &want);
    assert!(p.cq_b.results(4).is_empty());
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// A READ scattered over MaxReadRequestSge SGEs.
#[test]
fn read_scatters_over_max_read_sges() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let info = c.adapter(0).query_info().unwrap();
    let n = info.MaxReadRequestSge.min(info.MaxInitiatorRequestSge) as usize;
    let p = Pair::with(&c, max_spec(QPC_A, &info), max_spec(QPC_B, &info), true);
    let ma = Registered::new(c.host(0), &p.pd_a, 8, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 2, 0x2000_0000, REMOTE);
    let before = fill(&ma.mem, 0, 0x31, 8 * 4096);
    let src = fill(&mb.mem, 0, 0x32, 8192);
    let sgl = scattered(n, 100);
    let total: usize = sgl.iter().map(|s| s.1).sum();
    let st =
        p.qa.read(8, &sges(&ma, &sgl), mb.mem.va + 50, mb.mr.remote_token(), 0);
    assert_eq!(st, STATUS_SUCCESS);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A, 8, NdkOperationTypeRead)
    );
    let mut want = before;
    let mut at = 50;
    for &(o, l) in &sgl {
        want[o..o + l].copy_from_slice(&src[at..at + l]);
        at += l;
    }
    assert_eq!(at, 50 + total);
    verify(&ma.mem, 0, &want);
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// b fast-registers an FRMR for remote write and hands its token to a; a's
/// SendAndInvalidate names it.
struct InvalidateSetup {
    mem: ConsumerMem,
    mr: common::ndk::Mr,
    token: u32,
}

fn remote_frmr(c: &Cluster, p: &Pair) -> InvalidateSetup {
    let mem = c.host(1).mem(1, 0x3000_0000);
    let mr = p.pd_b.create_mr(true).unwrap();
    assert_eq!(mr.initialize_fast_register(1, true), STATUS_SUCCESS);
    let flags = NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    assert_eq!(
        p.qb.fast_register(50, &mr, &[mem.bus(0)], 0, 4096, mem.va, flags),
        STATUS_SUCCESS
    );
    let r = p.cq_b.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 0, QPC_B, 50));
    let token = mr.remote_token();
    InvalidateSetup { mem, mr, token }
}

/// The token works before; the receiver's result is ReceiveAndInvalidate carrying the token
/// (GetCqResultsEx), the sender's is Send; afterwards a WRITE through the token fails with
/// STATUS_ACCESS_VIOLATION and changes nothing.
#[test]
fn send_and_invalidate_reports_the_token_and_kills_it() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    let s = remote_frmr(&c, &p);
    let w = fill(&ma.mem, 0, 0x41, 32);
    assert_eq!(
        p.qa.write(1, &[ma.sge(0, 32)], s.mem.va + 8, s.token, 0),
        STATUS_SUCCESS
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&s.mem, 8, &w);

    let msg = fill(&ma.mem, 1024, 0x42, 77);
    assert_eq!(p.qb.receive(2, &[mb.sge(0, 256)]), STATUS_SUCCESS);
    assert_eq!(
        p.qa.send_and_invalidate(3, &[ma.sge(1024, 77)], 0, s.token),
        STATUS_SUCCESS
    );
    let rb = p.cq_b.wait_results_ex(1);
    assert_eq!(
        res_ex(&rb[0]),
        (
            STATUS_SUCCESS,
            QPC_B,
            2,
            NdkOperationTypeReceiveAndInvalidate
        )
    );
    assert_eq!(rb[0].BytesTransferred, 77);
    assert_eq!(rb[0].TypeSpecificCompletionOutput, s.token as usize);
    verify(&mb.mem, 0, &msg);
    let ra = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&ra[0]),
        (STATUS_SUCCESS, QPC_A, 3, NdkOperationTypeSend)
    );

    let snapshot = read(&s.mem, 0, 4096);
    fill(&ma.mem, 0, 0x43, 32);
    assert_eq!(
        p.qa.write(4, &[ma.sge(0, 32)], s.mem.va + 8, s.token, 0),
        STATUS_SUCCESS
    );
    assert_eq!(
        res(&p.cq_a.wait_results(1)[0]),
        (STATUS_ACCESS_VIOLATION, 0, QPC_A, 4)
    );
    verify(&s.mem, 0, &snapshot);

    s.mr.close();
    drop([s.mem, ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// §5.4: a ReceiveAndInvalidate completion is still retrievable through NdkGetCqResults.
#[test]
fn send_and_invalidate_result_is_retrievable_without_ex() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    let s = remote_frmr(&c, &p);
    let msg = fill(&ma.mem, 0, 0x44, 40);
    assert_eq!(p.qb.receive(5, &[mb.sge(100, 64)]), STATUS_SUCCESS);
    assert_eq!(
        p.qa.send_and_invalidate(6, &[ma.sge(0, 40)], 0, s.token),
        STATUS_SUCCESS
    );
    assert_eq!(
        res(&p.cq_b.wait_results(1)[0]),
        (STATUS_SUCCESS, 40, QPC_B, 5)
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&mb.mem, 100, &msg);
    s.mr.close();
    drop([s.mem, ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// A fast-registered region used as local memory through its local token (send source on
/// a, receive sink on b); after NdkInvalidate the local token is dead: a send naming it
/// completes with STATUS_ACCESS_VIOLATION.
#[test]
fn fast_registered_memory_serves_local_sges_until_invalidated() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let frmr = |host: usize, q: &common::ndk::Qp, pd: &common::ndk::Pd, cq: &common::ndk::Cq| {
        let mem = c.host(host).mem(2, 0x4000_0000);
        let mr = pd.create_mr(true).unwrap();
        assert_eq!(mr.initialize_fast_register(2, false), STATUS_SUCCESS);
        let pages = [mem.bus(1), mem.bus(0)];
        let va = 0x7700_0000u64;
        let st = q.fast_register(60, &mr, &pages, 0, 8192, va, NDK_OP_FLAG_ALLOW_LOCAL_WRITE);
        assert_eq!(st, STATUS_SUCCESS);
        let r = cq.wait_results_ex(1);
        assert_eq!(r[0].Type, NdkOperationTypeFastRegister);
        assert_eq!(r[0].Status, STATUS_SUCCESS);
        (mem, mr, va)
    };
    let (mem_a, mr_a, va_a) = frmr(0, &p.qa, &p.pd_a, &p.cq_a);
    let (mem_b, mr_b, va_b) = frmr(1, &p.qb, &p.pd_b, &p.cq_b);
    // VA offset 4000..4200 is bus page 1 then bus page 0: out of physical order.
    let part1 = fill(&mem_a, 4096 + 4000, 0x51, 96);
    let part2 = fill(&mem_a, 0, 0x52, 104);
    let sink = sge(va_b + 4050, 300, mr_b.local_token());
    assert_eq!(p.qb.receive(1, &[sink]), STATUS_SUCCESS);
    let src = sge(va_a + 4000, 200, mr_a.local_token());
    assert_eq!(p.qa.send(2, &[src], 0), STATUS_SUCCESS);
    assert_eq!(
        res(&p.cq_b.wait_results(1)[0]),
        (STATUS_SUCCESS, 200, QPC_B, 1)
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    // VA 4050..4096 is b's bus page 1 from 4050, then b's page 0 from 0.
    let msg = [part1, part2].concat();
    verify(&mem_b, 4096 + 4050, &msg[..46]);
    verify(&mem_b, 0, &msg[46..]);

    assert_eq!(p.qa.invalidate(3, &mr_a, 0), STATUS_SUCCESS);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A, 3, NdkOperationTypeInvalidate)
    );
    assert_eq!(
        p.qb.receive(4, &[sge(va_b, 300, mr_b.local_token())]),
        STATUS_SUCCESS
    );
    assert_eq!(p.qa.send(5, &[src], 0), STATUS_SUCCESS);
    assert_eq!(
        res(&p.cq_a.wait_results(1)[0]),
        (STATUS_ACCESS_VIOLATION, 0, QPC_A, 5)
    );
    mr_a.close();
    mr_b.close();
    p.close();
    drop([mem_a, mem_b]);
    c.finish();
}

/// NdkBuildLam on each side, SGEs by logical address with the PD's privileged token as
/// send source and receive sink; a WRITE naming the privileged token as remote token is
/// refused by the peer (§5.7: never remote access). NdkReleaseLam afterwards.
#[test]
fn privileged_token_with_lam_addresses_carries_send_and_receive() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let (mem_a, mem_b) = (c.host(0).mem(3, 0x1000_0000), c.host(1).mem(3, 0x2000_0000));
    let (mdl_a, mdl_b) = (mem_a.mdl(100, 6000), mem_b.mdl(3000, 6000));
    let lam_a = c.adapter(0).build_lam(&mdl_a, 6000).expect("BuildLam a");
    let lam_b = c.adapter(1).build_lam(&mdl_b, 6000).expect("BuildLam b");
    assert_eq!((lam_a.fbo, lam_b.fbo), (100, 3000));
    assert_eq!(lam_a.pages(), vec![mem_a.bus(0), mem_a.bus(1)]);
    assert_eq!(
        lam_b.pages(),
        vec![mem_b.bus(0), mem_b.bus(1), mem_b.bus(2)]
    );
    assert_eq!(lam_b.size, ndk_lam_size(3).unwrap());
    let (pt_a, pt_b) = (p.pd_a.privileged_token(), p.pd_b.privileged_token());

    // a: 2 SGEs, one in each page of its LAM; b: one SGE crossing its LAM's page boundary.
    let pa = lam_a.pages();
    let pb = lam_b.pages();
    let one = fill(&mem_a, 200, 0x61, 300);
    let two = fill(&mem_a, 4096 + 10, 0x62, 500);
    let src = [
        sge_logical(pa[0] + 200, 300, pt_a),
        sge_logical(pa[1] + 10, 500, pt_a),
    ];
    let sink = [sge_logical(pb[0] + 4000, 900, pt_b)];
    assert_eq!(p.qb.receive(1, &sink), STATUS_SUCCESS);
    assert_eq!(p.qa.send(2, &src, 0), STATUS_SUCCESS);
    assert_eq!(
        res(&p.cq_b.wait_results(1)[0]),
        (STATUS_SUCCESS, 800, QPC_B, 1)
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    let msg = [one, two].concat();
    verify(&mem_b, 4000, &msg[..96]);
    verify(&mem_b, 4096, &msg[96..]);

    let snapshot = read(&mem_b, 0, 3 * 4096);
    let st = p.qa.write(3, &[src[0]], pb[0] + 4000, pt_b, 0);
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(
        res(&p.cq_a.wait_results(1)[0]),
        (STATUS_ACCESS_VIOLATION, 0, QPC_A, 3)
    );
    verify(&mem_b, 0, &snapshot);

    c.adapter(0).release_lam(lam_a);
    c.adapter(1).release_lam(lam_b);
    p.close();
    drop([mem_a, mem_b]);
    c.finish();
}

/// NdkBuildLam with a buffer below 0x10 + 8·pages: STATUS_BUFFER_TOO_SMALL with the required
/// size in `*pLAMSize`, nothing written; also with no buffer at all.
#[test]
fn build_lam_too_small_reports_the_required_size() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let mem = c.host(0).mem(4, 0x1000_0000);
    let mdl = mem.mdl(4000, 3 * 4096);
    let required = ndk_lam_size(4).unwrap();
    assert_eq!(required, 0x10 + 8 * 4);
    let a = c.adapter(0).ptr;
    // SAFETY: a live adapter.
    let d = unsafe { (*a).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let d = unsafe { &*d };
    for (buf_words, given) in [(2usize, 0x10u32), (5, required - 8), (0, 0)] {
        let mut words = vec![0xAAAA_AAAA_AAAA_AAAAu64; buf_words.max(1)];
        let lam = if buf_words == 0 {
            null_mut()
        } else {
            words.as_mut_ptr().cast::<NDK_LOGICAL_ADDRESS_MAPPING>()
        };
        let (mut size, mut fbo) = (given, 0x5555u32);
        // SAFETY: live adapter; the MDL outlives the call; `lam` holds `given` bytes (or
        // is null with size 0); no completion is given, none may be called.
        let st = unsafe {
            (d.NdkBuildLAM)(
                a,
                mdl.as_ptr().cast_mut(),
                3 * 4096,
                None,
                null_mut(),
                lam,
                &mut size,
                &mut fbo,
            )
        };
        assert_eq!(st, STATUS_BUFFER_TOO_SMALL, "buffer of {given} bytes");
        assert_eq!(size, required);
        assert_eq!(fbo, 0x5555, "FBO untouched");
        assert!(
            words.iter().all(|&w| w == 0xAAAA_AAAA_AAAA_AAAA),
            "nothing written"
        );
    }
    let lam = c.adapter(0).build_lam(&mdl, 3 * 4096).expect("right size");
    assert_eq!(lam.size, required);
    assert_eq!(lam.fbo, 4000);
    assert_eq!(lam.pages(), (0..4).map(|i| mem.bus(i)).collect::<Vec<_>>());
    c.adapter(0).release_lam(lam);
    drop(mem);
    c.finish();
}

/// NdkRegisterMr with a two-MDL chain: the region is the chain's span from the first MDL's
/// VA; a peer WRITE across the MDL boundary and a READ from the second MDL move the right
/// bytes; after NdkDeregisterMr the token is dead.
#[test]
fn register_mr_with_an_mdl_chain_spans_both_mdls() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mem = c.host(1).mem(3, 0x2000_0000);
    let mut first = mem.mdl(0x200, 4096 - 0x200);
    let second = mem.mdl(4096, 8192);
    first.set_next(Some(&second));
    let len = 4096 - 0x200 + 8192;
    let mr = p.pd_b.create_mr(false).unwrap();
    assert_eq!(mr.register(&first, len, REMOTE), STATUS_SUCCESS);
    let t = mr.remote_token();
    let base = mem.va + 0x200;

    let w = fill(&ma.mem, 0, 0x71, 300);
    let at = 4096 - 0x200 - 100; // 100 bytes before the MDL boundary
    assert_eq!(
        p.qa.write(1, &[ma.sge(0, 300)], base + at as u64, t, 0),
        STATUS_SUCCESS
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&mem, 4096 - 100, &w);
    let src = fill(&mem, 2 * 4096 + 7, 0x72, 400);
    let off = (2 * 4096 + 7 - 0x200) as u64;
    assert_eq!(
        p.qa.read(2, &[ma.sge(1000, 400)], base + off, t, 0),
        STATUS_SUCCESS
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&ma.mem, 1000, &src);

    assert_eq!(mr.deregister(), STATUS_SUCCESS);
    let snapshot = read(&mem, 0, 3 * 4096);
    assert_eq!(
        p.qa.write(3, &[ma.sge(0, 300)], base + at as u64, t, 0),
        STATUS_SUCCESS
    );
    assert_eq!(
        res(&p.cq_a.wait_results(1)[0]),
        (STATUS_ACCESS_VIOLATION, 0, QPC_A, 3)
    );
    verify(&mem, 0, &snapshot);
    mr.close();
    drop([mem, ma.close()]);
    drop((first, second));
    p.close();
    c.finish();
}

/// §5.7: an MDL chain that is not virtually contiguous is refused with
/// STATUS_INVALID_PARAMETER; the MR can then be registered properly.
#[test]
fn register_mr_with_a_discontiguous_mdl_chain_is_invalid_parameter() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let pd = c.adapter(0).create_pd().unwrap();
    let mem = c.host(0).mem(3, 0x2000_0000);
    let mut first = mem.mdl(0, 4096);
    let gap = mem.mdl(2 * 4096, 4096);
    first.set_next(Some(&gap));
    let mr = pd.create_mr(false).unwrap();
    assert_eq!(mr.register(&first, 8192, LOCAL), STATUS_INVALID_PARAMETER);
    assert_eq!(mr.local_token(), 0, "no registration");
    let whole = mem.mdl(0, 3 * 4096);
    assert_eq!(mr.register(&whole, 3 * 4096, LOCAL), STATUS_SUCCESS);
    assert_ne!(mr.local_token(), 0);
    assert_eq!(mr.deregister(), STATUS_SUCCESS);
    mr.close();
    pd.close();
    drop((first, gap, whole, mem));
    c.finish();
}

/// §5.5: a chain of DEFER requests (WRITE, SEND, SEND) ends with a READ without DEFER:
/// nothing reaches the device until the last one, which rings one doorbell; every request
/// then completes, in posting order, with its bytes.
#[test]
fn defer_chain_rings_one_doorbell_and_completes_every_request() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 2, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 2, 0x2000_0000, REMOTE);
    let t = mb.mr.remote_token();
    assert_eq!(p.qb.receive(20, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(p.qb.receive(21, &[mb.sge(64, 64)]), STATUS_SUCCESS);
    c.settle();
    let db = c.world.counters(0).device.db_qp_send;
    let w = fill(&ma.mem, 0, 0x81, 50);
    let s1 = fill(&ma.mem, 100, 0x82, 60);
    let s2 = fill(&ma.mem, 200, 0x83, 30);
    let r = fill(&mb.mem, 4096, 0x84, 90);
    let defer = NDK_OP_FLAG_DEFER;
    assert_eq!(
        p.qa.write(1, &[ma.sge(0, 50)], mb.mem.va + 2048, t, defer),
        STATUS_SUCCESS
    );
    assert_eq!(p.qa.send(2, &[ma.sge(100, 60)], defer), STATUS_SUCCESS);
    assert_eq!(p.qa.send(3, &[ma.sge(200, 30)], defer), STATUS_SUCCESS);
    c.settle();
    assert_eq!(
        c.world.counters(0).device.db_qp_send,
        db,
        "no doorbell for DEFER"
    );
    assert!(p.cq_a.results(4).is_empty());
    assert!(p.cq_b.results(4).is_empty());
    verify(&mb.mem, 2048, &[0; 50]);
    assert_eq!(
        p.qa.read(4, &[ma.sge(4096, 90)], mb.mem.va + 4096, t, 0),
        STATUS_SUCCESS
    );
    let ra = p.cq_a.wait_results_ex(4);
    assert_eq!(
        c.world.counters(0).device.db_qp_send,
        db + 1,
        "one doorbell"
    );
    let got: Vec<_> = ra.iter().map(res_ex).collect();
    assert_eq!(
        got,
        vec![
            (STATUS_SUCCESS, QPC_A, 1, NdkOperationTypeWrite),
            (STATUS_SUCCESS, QPC_A, 2, NdkOperationTypeSend),
            (STATUS_SUCCESS, QPC_A, 3, NdkOperationTypeSend),
            (STATUS_SUCCESS, QPC_A, 4, NdkOperationTypeRead),
        ]
    );
    let rb = p.cq_b.wait_results(2);
    assert_eq!(res(&rb[0]), (STATUS_SUCCESS, 60, QPC_B, 20));
    assert_eq!(res(&rb[1]), (STATUS_SUCCESS, 30, QPC_B, 21));
    verify(&mb.mem, 2048, &w);
    verify(&mb.mem, 0, &s1);
    verify(&mb.mem, 64, &s2);
    verify(&ma.mem, 4096, &r);
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// §5.5 example: FR(DEFER) succeeds, a second FR(DEFER) fails inline; the provider indicates
/// the first to the device before returning the failure (one doorbell), so it completes and
/// the failed one does not.
#[test]
fn defer_chain_cut_by_an_inline_failure_still_completes_what_was_posted() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let mem = c.host(1).mem(1, 0x3000_0000);
    let (m1, m2) = (
        p.pd_b.create_mr(true).unwrap(),
        p.pd_b.create_mr(true).unwrap(),
    );
    assert_eq!(m1.initialize_fast_register(1, true), STATUS_SUCCESS);
    assert_eq!(m2.initialize_fast_register(1, false), STATUS_SUCCESS);
    c.settle();
    let db = c.world.counters(1).device.db_qp_send;
    let f = NDK_OP_FLAG_DEFER | NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    let pages = [mem.bus(0)];
    assert_eq!(
        p.qb.fast_register(1, &m1, &pages, 0, 4096, mem.va, f),
        STATUS_SUCCESS
    );
    c.settle();
    assert_eq!(c.world.counters(1).device.db_qp_send, db);
    assert!(p.cq_b.results(4).is_empty(), "deferred: not indicated yet");
    // Remote access on an FRMR initialized without it: refused inline.
    assert_eq!(
        p.qb.fast_register(2, &m2, &pages, 0, 4096, mem.va, f),
        STATUS_ACCESS_VIOLATION
    );
    assert_eq!(c.world.counters(1).device.db_qp_send, db + 1);
    let r = p.cq_b.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_B, 1, NdkOperationTypeFastRegister)
    );
    // The registration is live: a peer WRITE through its token lands.
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let w = fill(&ma.mem, 0, 0x91, 64);
    let st =
        p.qa.write(3, &[ma.sge(0, 64)], mem.va + 32, m1.remote_token(), 0);
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    verify(&mem, 32, &w);
    m1.close();
    m2.close();
    drop([mem, ma.close()]);
    p.close();
    c.finish();
}

/// NdkRead and NdkWrite of one SGE with a null SGL: STATUS_INVALID_PARAMETER inline, and the
/// deferred request before them is indicated anyway (§5.5).
#[test]
fn single_sge_rdma_with_a_null_sgl_fails_and_rings_for_deferred_requests() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
    let t = mb.mr.remote_token();
    // SAFETY: a live QP.
    let d = unsafe { (*p.qa.ptr).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let d = unsafe { &*d };
    for (ctx, read) in [(1usize, true), (2, false)] {
        let w = fill(&ma.mem, 0, 0x70 + ctx as u8, 64);
        assert_eq!(
            p.qa.write(ctx, &[ma.sge(0, 64)], mb.mem.va, t, NDK_OP_FLAG_DEFER),
            STATUS_SUCCESS
        );
        c.settle();
        let db = c.world.counters(0).device.db_qp_send;
        let f = if read { d.NdkRead } else { d.NdkWrite };
        // SAFETY: a live QP; the null SGL is what is under test (one entry announced).
        let st = unsafe { f(p.qa.ptr, 9 as PVOID, null_mut(), 1, mb.mem.va, t, 0) };
        assert_eq!(st, STATUS_INVALID_PARAMETER, "read: {read}");
        assert_eq!(c.world.counters(0).device.db_qp_send, db + 1);
        let r = p.cq_a.wait_results(1);
        assert_eq!(res(&r[0]).0, STATUS_SUCCESS);
        verify(&mb.mem, 0, &w);
    }
    drop([ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// §5.4: after a peer's SendAndInvalidate, a local NdkInvalidate of that token fails
/// (inline, no result; the device itself would accept it, M27). A new fast register makes
/// the MR invalidatable again.
#[test]
fn invalidate_of_a_token_the_peer_invalidated_fails() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    let s = remote_frmr(&c, &p);
    assert_eq!(p.qb.receive(5, &[mb.sge(100, 64)]), STATUS_SUCCESS);
    assert_eq!(
        p.qa.send_and_invalidate(6, &[ma.sge(0, 40)], 0, s.token),
        STATUS_SUCCESS
    );
    assert_eq!(
        res(&p.cq_b.wait_results(1)[0]),
        (STATUS_SUCCESS, 40, QPC_B, 5)
    );
    assert_eq!(res(&p.cq_a.wait_results(1)[0]).0, STATUS_SUCCESS);
    assert_eq!(p.qb.invalidate(7, &s.mr, 0), STATUS_INVALID_DEVICE_REQUEST);
    c.settle();
    assert!(
        p.cq_b.results(4).is_empty(),
        "no result for an inline failure"
    );

    let flags = NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
    let st =
        p.qb.fast_register(8, &s.mr, &[s.mem.bus(0)], 0, 4096, s.mem.va, flags);
    assert_eq!(st, STATUS_SUCCESS);
    assert_ne!(s.mr.remote_token(), s.token);
    assert_eq!(
        res(&p.cq_b.wait_results(1)[0]),
        (STATUS_SUCCESS, 0, QPC_B, 8)
    );
    assert_eq!(p.qb.invalidate(9, &s.mr, 0), STATUS_SUCCESS);
    let r = p.cq_b.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_B, 9, NdkOperationTypeInvalidate)
    );
    s.mr.close();
    drop([s.mem, ma.close(), mb.close()]);
    p.close();
    c.finish();
}

/// A CQ's poller finds its QPs without taking counts, so a QP that closes while its CQ may
/// be polled stays allocated until the poller lets it go: its memory (DMA rings included)
/// survives the close, goes at the CQ's next NdkArmCq (never concurrent with a poll), the
/// CQ keeps completing the other QP's requests meanwhile, and a QP closed after the last
/// arm goes with the CQ's close (no leak at `finish`).
#[test]
fn closed_qp_of_a_polled_cq_is_released_at_the_next_arm_or_the_cq_close() {
    const QPC_A2: usize = 0xA2A2;
    let c = Cluster::new(Mode::Deterministic, 2);
    let p = Pair::new(&c);
    let qa2 = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A2))
        .expect("QP a2");
    let qb2 = p
        .pd_b
        .create_qp(&p.cq_b, &p.cq_b, QpSpec::new(0xB2B2))
        .expect("QP b2");
    c.connect(&qa2, &qb2);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, REMOTE);
    let src = fill(&mb.mem, 0, 0x41, 64);
    let read_into = |qp: &Qp, ctx: usize, at: usize| {
        let st = qp.read(
            ctx,
            &[ma.sge(at as u64, 16)],
            mb.mem.va,
            mb.mr.remote_token(),
            0,
        );
        assert_eq!(st, STATUS_SUCCESS);
    };

    read_into(&p.qa, 1, 0);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A, 1, NdkOperationTypeRead)
    );
    let dma = || c.host(0).dma.live();
    let before_close = dma();
    assert_eq!(p.qa.close(), STATUS_SUCCESS);
    assert_eq!(
        dma(),
        before_close,
        "the CQ may still be using the QP: its rings stay until the poller lets it go"
    );

    read_into(&qa2, 2, 16);
    let r = p.cq_a.wait_results_ex(1);
    assert_eq!(
        res_ex(&r[0]),
        (STATUS_SUCCESS, QPC_A2, 2, NdkOperationTypeRead)
    );
    verify(&ma.mem, 0, &[&src[..16], &src[..16]].concat());
    p.cq_a.arm(NDK_CQ_NOTIFY_ANY);
    assert!(
        dma() < before_close,
        "the closed QP's rings are freed at the arm ({} regions before, {} after)",
        before_close,
        dma()
    );

    // The CQ is never polled nor armed again: its close releases the QP.
    assert_eq!(qa2.close(), STATUS_SUCCESS);
    assert_eq!(qb2.close(), STATUS_SUCCESS);
    drop([ma.close(), mb.close()]);
    p.qb.close();
    p.cq_a.close();
    p.cq_b.close();
    p.pd_a.close();
    p.pd_b.close();
    c.finish();
}
