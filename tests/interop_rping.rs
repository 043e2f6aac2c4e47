//! rping between the provider and a real Linux peer (rdma_cm + rdma_rxe in a QEMU guest).

mod common;

use common::interop::rping::ping_data;

/// rping's client fills ping N's buffer with "rdma-ping-N: " and letters from 'A' + N % 58,
/// wrapping after 'z', NUL last (rping.c `rping_test_client`).
#[test]
fn ping_data_is_rpings_pattern() {
    assert_eq!(ping_data(0, 26), b"rdma-ping-0: ABCDEFGHIJKL\0");
    assert_eq!(ping_data(1, 26), b"rdma-ping-1: BCDEFGHIJKLM\0");
    let p = ping_data(57, 80);
    assert_eq!(&p[..14], b"rdma-ping-57: ");
    assert_eq!(&p[14..17], b"zAB", "ping 57 starts at 'z' and wraps");
    assert_eq!(p[79], 0);
}
