//! Cases the fuzz targets (`fuzz/`, `bash fuzz/run.sh`) found, replayed through the normal
//! test kit: each test is the minimised input, written as the consumer calls it made.

mod common;

use common::Mode;
use common::ndk::{Cluster, QpSpec, Registered, sge};
use pvrdma_ndk::ndkpi::*;

/// consumer_calls, crash-a7703f02: a send whose SGE lies outside its MR fails its gather
/// (LOC_PROT_ERR) while an older send of the same QP is still in flight. The model wrote the
/// failing WQE's error CQE first and the older WQE's flush CQE after it; the provider, which
/// retires a queue's CQEs in posting order (M36), could not take the error CQE before the
/// older slot and dropped it, so the failed send never completed (§5.3: a post that returned
/// success completes exactly once). Now both complete, in posting order.
#[test]
fn a_send_failing_behind_one_in_flight_completes_after_the_older_one_is_flushed() {
    let c = Cluster::new(Mode::Deterministic, 2);
    let (a, b) = (c.adapter(0), c.adapter(1));
    let (cq_a, cq_b) = (
        a.create_cq(16, None).unwrap(),
        b.create_cq(16, None).unwrap(),
    );
    let (pd_a, pd_b) = (a.create_pd().unwrap(), b.create_pd().unwrap());
    let flags = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;
    let mem_a = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, flags);
    let mem_b = Registered::new(c.host(1), &pd_b, 1, 0x2000_0000, flags);
    let qp_a = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(0xA)).unwrap();
    let qp_b = pd_b.create_qp(&cq_b, &cq_b, QpSpec::new(0xB)).unwrap();
    c.connect(&qp_a, &qp_b);
    assert_eq!(qp_b.receive(10, &[mem_b.sge(0, 256)]), STATUS_SUCCESS);
    assert_eq!(qp_a.send(1, &[mem_a.sge(0, 256)], 0), STATUS_SUCCESS);
    // One page registered: 8 KiB in is outside the MR.
    let outside = sge(mem_a.mem.va + 8192, 64, mem_a.mr.local_token());
    assert_eq!(qp_a.send(2, &[outside], 0), STATUS_SUCCESS);
    c.settle();
    let got: Vec<(usize, NTSTATUS)> = cq_a
        .results(4)
        .iter()
        .map(|r| (r.RequestContext as usize, r.Status))
        .collect();
    assert_eq!(
        got,
        [(1, STATUS_CANCELLED), (2, STATUS_ACCESS_VIOLATION)],
        "both sends, in posting order"
    );
    qp_b.flush();
    c.settle();
    // The receive took the first send (its packet left before the QP failed) or was
    // flushed: one result either way.
    assert_eq!(cq_b.results(4).len(), 1);
    assert_eq!(qp_a.close(), STATUS_SUCCESS);
    assert_eq!(qp_b.close(), STATUS_SUCCESS);
    drop(mem_a.close());
    drop(mem_b.close());
    for pd in [pd_a, pd_b] {
        assert_eq!(pd.close(), STATUS_SUCCESS);
    }
    for cq in [cq_a, cq_b] {
        assert_eq!(cq.close(), STATUS_SUCCESS);
    }
    c.finish();
}
