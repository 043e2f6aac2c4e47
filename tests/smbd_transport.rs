//! MS-SMBD between two simulated hosts (tests/common/smbd): the transport Windows' SMB Direct
//! runs over NDK, as a consumer of the provider through the dispatch tables, client on host 0
//! and server on host 1 listening on port 445. One test per rule: the negotiate with Windows'
//! defaults and its refusals, credits (granted within the receives posted, exhausted and
//! replenished, a message without a credit), fragmentation and reassembly up to
//! MaxFragmentedSize, keepalive, the RDMA channel (NdkFastRegister'd buffers, RDMA READ and
//! WRITE by the server, Send-with-Invalidate and the token in the client's ReceiveAndInvalidate,
//! NdkInvalidate for dialect 3.0, a dead token failing), and a message larger than the
//! receive buffers giving error completions, not memory corruption.

mod common;

use std::time::{Duration, Instant};

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, pattern};
use common::smbd::transport::{Smbd, drive, pair, pair_with, shutdown};
use common::smbd::wire::*;
use common::smbd::{SMBD_PORT, SMBD_VERSION, SmbdConfig, SmbdError};
use pvrdma_ndk::ndkpi::*;

fn cluster() -> Cluster {
    Cluster::with(ClusterConfig::cm(Mode::Deterministic, 2))
}

fn win() -> SmbdConfig {
    SmbdConfig::windows()
}

/// Sends `msg` from `a` and returns what `b` reassembled.
fn transfer(a: &mut Smbd<'_>, b: &mut Smbd<'_>, msg: &[u8]) -> Vec<u8> {
    a.send(msg).expect("send");
    drive(a, b, "the message reassembled", |_, b| b.inbox_len() > 0);
    b.try_receive().unwrap()
}

fn end(a: Smbd<'_>, b: Smbd<'_>, l: common::ndk::Listener) {
    a.check_invariants();
    b.check_invariants();
    shutdown(a, b);
    assert_eq!(l.close(), STATUS_SUCCESS);
}

/// 2.2.1/2.2.2 with Windows' defaults: version 1.0 on port 445, 255 credits asked and
/// granted (all the server's posted receives), the sizes echoed as 3.1.5.6 says.
#[test]
fn negotiate_with_windows_defaults() {
    let c = cluster();
    let (cl, sv, l) = pair(&c, win(), win()).expect("negotiate");
    assert_eq!(
        cl.conn.as_ref().unwrap().peer_address().unwrap().port(),
        SMBD_PORT
    );
    let n = cl.negotiated.unwrap();
    assert_eq!(
        n.response,
        NegotiateResponse {
            min_version: SMBD_VERSION,
            max_version: SMBD_VERSION,
            negotiated_version: SMBD_VERSION,
            credits_requested: 255,
            credits_granted: 255,
            status: 0,
            max_read_write_size: 1 << 20,
            preferred_send_size: 1364,
            max_receive_size: 8192,
            max_fragmented_size: 1 << 20,
        }
    );
    assert_eq!(n.max_send_size, 1364);
    assert_eq!(cl.send_credits(), 255);
    assert_eq!(sv.peer_credits(), 255);
    assert_eq!(sv.receives(), 255);
    let s = sv.negotiated.unwrap();
    assert_eq!(s.peer_credits_requested, 255);
    assert_eq!(s.peer_max_fragmented_size, 1 << 20);
    // The server holds no credit until the client grants in its first message.
    assert_eq!(sv.send_credits(), 0);
    end(cl, sv, l);
    c.finish();
}

fn refused(req: NegotiateRequest) -> SmbdError {
    let c = cluster();
    let e = pair_with(&c, win(), win(), Some(req))
        .err()
        .expect("the server refuses");
    c.finish();
    e
}

/// The server's refusals (3.1.5.6; the MS-SMBD test suite's negative negotiate cases): no
/// common version → STATUS_NOT_SUPPORTED; CreditsRequested 0, MaxReceiveSize < 128,
/// MaxFragmentedSize < 128 KiB → STATUS_INVALID_PARAMETER; the client sees the status.
#[test]
fn negotiate_refusals() {
    let good = NegotiateRequest {
        min_version: SMBD_VERSION,
        max_version: SMBD_VERSION,
        credits_requested: 255,
        preferred_send_size: 1364,
        max_receive_size: 8192,
        max_fragmented_size: 1 << 20,
    };
    assert_eq!(
        refused(NegotiateRequest {
            min_version: 0x0200,
            max_version: 0x0200,
            ..good
        }),
        SmbdError::Refused(STATUS_NOT_SUPPORTED)
    );
    for bad in [
        NegotiateRequest {
            credits_requested: 0,
            ..good
        },
        NegotiateRequest {
            max_receive_size: 127,
            ..good
        },
        NegotiateRequest {
            max_fragmented_size: 128 * 1024 - 1,
            ..good
        },
    ] {
        assert_eq!(
            refused(bad),
            SmbdError::Refused(STATUS_INVALID_PARAMETER),
            "{bad:?}"
        );
    }
}

/// A server granting fewer credits than asked: the response carries min(asked, receives
/// posted), and the client's receive queue matches what it grants back.
#[test]
fn credits_granted_never_exceed_receives_posted() {
    let c = cluster();
    let server = SmbdConfig {
        receive_credit_max: 16,
        ..win()
    };
    let (mut cl, mut sv, l) = pair(&c, win(), server).expect("negotiate");
    assert_eq!(cl.negotiated.unwrap().initial_credits, 16);
    assert_eq!(cl.send_credits(), 16);
    let got = transfer(&mut cl, &mut sv, b"hello");
    assert_eq!(got, b"hello");
    // The client's first message granted the server what it asked (255), all posted.
    assert_eq!(sv.send_credits(), 255);
    assert_eq!(cl.peer_credits(), 255);
    assert_eq!(cl.stats.credits_granted, 255);
    // 40 messages back: the server never holds more than the client's receives.
    for i in 0..40u8 {
        let m = vec![i; 100 + usize::from(i)];
        assert_eq!(transfer(&mut sv, &mut cl, &m), m);
        assert!(cl.peer_credits() <= cl.receives());
    }
    assert!(sv.stats.peer_credits_max <= 16);
    assert!(cl.stats.peer_credits_max <= 255);
    end(cl, sv, l);
    c.finish();
}

/// Credit exhaustion: a server with 8 receives and a client with 20 messages. Polling only
/// the client posts exactly 8 (the last asks for a response), keeps 12 queued and records
/// stalls; the server's receives all succeed (no message met an empty queue); once the
/// server runs, its grants release the rest, in order.
#[test]
fn credit_exhaustion_queues_until_the_peer_grants() {
    let c = cluster();
    let server = SmbdConfig {
        receive_credit_max: 8,
        ..win()
    };
    let (mut cl, mut sv, l) = pair(&c, win(), server).expect("negotiate");
    let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 64]).collect();
    for m in &msgs {
        cl.send(m).unwrap();
    }
    // Only the client: the server's transport does not run, so it grants nothing.
    c.wait_for("the client's 8 sends", || {
        cl.poll();
        cl.sends_in_flight() == 0 && cl.stats.fragments_sent == 8
    });
    c.settle();
    cl.poll();
    assert_eq!(cl.stats.fragments_sent, 8);
    assert_eq!(cl.send_credits(), 0);
    assert_eq!(cl.queued(), 12);
    assert!(cl.stats.credit_stalls > 0);
    assert_eq!(cl.stats.responses_requested, 1, "the last credit asks");
    assert_eq!(cl.stats.send_credits_min, 0);
    let mut got = Vec::new();
    drive(&mut cl, &mut sv, "all 20 messages", |_, s| {
        s.stats.messages_received == 20
    });
    while let Some(m) = sv.try_receive() {
        got.push(m);
    }
    assert_eq!(got, msgs);
    assert!(sv.stats.receive_errors.is_empty());
    assert!(cl.stats.send_errors.is_empty());
    assert!(sv.stats.peer_credits_max <= 8);
    end(cl, sv, l);
    c.finish();
}

/// A message sent without a credit (the server before the client's first grant) ends the
/// connection on the receiving side with a protocol error.
#[test]
fn a_message_without_a_credit_is_a_protocol_error() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    assert_eq!(sv.send_credits(), 0);
    let h = DataHeader {
        credits_requested: 255,
        credits_granted: 0,
        flags: 0,
        remaining_data_length: 0,
        data_offset: DATA_OFFSET as u32,
        data_length: 8,
    };
    let mut m = h.encode().to_vec();
    m.extend_from_slice(b"no-credit");
    m.truncate(DATA_OFFSET + 8);
    sv.post_raw(&m, None);
    // Delivered before the client's transport runs again (it would grant first).
    c.settle();
    cl.poll();
    assert_eq!(
        cl.error(),
        Some(&SmbdError::Protocol(
            "a message from a peer without credits".into()
        ))
    );
    assert_eq!(cl.inbox_len(), 0);
    end(cl, sv, l);
    c.finish();
}

/// Fragmentation (3.1.4.1) and reassembly (3.1.5.7): a message of exactly MaxFragmentedSize
/// (1 MiB) goes as ⌈1 MiB / 1340⌉ = 783 fragments of at most MaxSendSize, RemainingDataLength
/// counting down, and arrives whole; 64 KiB back the other way.
#[test]
fn fragmentation_and_reassembly_up_to_max_fragmented_size() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    let big = pattern(0x31, 1 << 20);
    assert_eq!(transfer(&mut cl, &mut sv, &big), big);
    assert_eq!(cl.stats.fragments_sent, 783);
    assert_eq!(sv.stats.fragments_received, 783);
    let back = pattern(0x32, 64 * 1024);
    assert_eq!(transfer(&mut sv, &mut cl, &back), back);
    assert_eq!(sv.stats.fragments_sent - sv.stats.empty_sent, 49);
    assert!(sv.stats.receive_errors.is_empty() && cl.stats.receive_errors.is_empty());
    end(cl, sv, l);
    c.finish();
}

/// A message above the peer's MaxFragmentedSize is refused before anything is posted.
#[test]
fn a_message_above_max_fragmented_size_is_refused() {
    let c = cluster();
    let (mut cl, sv, l) = pair(&c, win(), win()).expect("negotiate");
    let e = cl.send(&vec![0; (1 << 20) + 1]).unwrap_err();
    assert_eq!(
        e,
        SmbdError::TooLarge {
            len: (1 << 20) + 1,
            max: 1 << 20
        }
    );
    assert_eq!(cl.stats.fragments_sent, 0);
    assert_eq!(cl.queued(), 0);
    end(cl, sv, l);
    c.finish();
}

/// A fragment announcing more than MaxFragmentedSize in all ends the receiver's connection.
#[test]
fn an_announced_length_above_max_fragmented_size_is_a_protocol_error() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    let h = DataHeader {
        credits_requested: 255,
        credits_granted: 0,
        flags: 0,
        remaining_data_length: 1 << 20,
        data_offset: DATA_OFFSET as u32,
        data_length: 16,
    };
    let mut m = h.encode().to_vec();
    m.extend_from_slice(&[7; 16]);
    cl.post_raw(&m, None);
    drive(&mut cl, &mut sv, "the server's verdict", |_, s| {
        s.error().is_some()
    });
    assert_eq!(
        sv.error(),
        Some(&SmbdError::Protocol(format!(
            "a message of {} B above MaxFragmentedSize {}",
            (1 << 20) + 16,
            1 << 20
        )))
    );
    end(cl, sv, l);
    c.finish();
}

/// Keepalive (3.1.6.2): after KeepaliveInterval without a message the client sends an empty
/// message with RESPONSE_REQUESTED; the server answers with an empty message at once; a
/// keepalive left unanswered for another interval ends the connection.
#[test]
fn keepalive_is_answered_and_an_unanswered_one_ends_the_connection() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    // Grant the server credits to answer with.
    assert_eq!(transfer(&mut cl, &mut sv, b"x"), b"x");
    let t0 = Instant::now();
    cl.poll_at(t0 + Duration::from_secs(119));
    assert_eq!(cl.stats.keepalives_sent, 0);
    cl.poll_at(t0 + Duration::from_secs(121));
    assert_eq!(cl.stats.keepalives_sent, 1);
    drive(&mut cl, &mut sv, "the keepalive's answer", |cl, _| {
        cl.stats.empty_received == 1
    });
    assert_eq!(sv.stats.empty_received, 1);
    assert_eq!(sv.stats.empty_sent, 1);
    assert_eq!(cl.error(), None);
    // Unanswered: the server's transport does not run.
    let t1 = Instant::now() + Duration::from_secs(121);
    cl.poll_at(t1);
    assert_eq!(cl.stats.keepalives_sent, 2);
    cl.poll_at(t1 + Duration::from_secs(60));
    assert_eq!(cl.error(), None);
    cl.poll_at(t1 + Duration::from_secs(121));
    assert_eq!(
        cl.error(),
        Some(&SmbdError::Disconnected("keepalive unanswered"))
    );
    end(cl, sv, l);
    c.finish();
}

/// A message larger than the receive buffer (a peer ignoring MaxReceiveSize): the receive
/// and the send complete with errors, and no byte outside the failed receive's own buffer
/// changes.
#[test]
fn an_oversized_message_gives_error_completions_not_corruption() {
    let c = cluster();
    let server = SmbdConfig {
        max_receive_size: 1024,
        receive_credit_max: 8,
        ..win()
    };
    let (mut cl, mut sv, l) = pair(&c, win(), server).expect("negotiate");
    assert_eq!(cl.negotiated.unwrap().max_send_size, 1024);
    let before = sv.receive_region();
    let h = DataHeader {
        credits_requested: 255,
        credits_granted: 0,
        flags: 0,
        remaining_data_length: 0,
        data_offset: DATA_OFFSET as u32,
        data_length: 2000 - DATA_OFFSET as u32,
    };
    let mut m = h.encode().to_vec();
    m.extend_from_slice(&pattern(0x77, 2000 - DATA_OFFSET));
    cl.post_raw(&m, None);
    drive(&mut cl, &mut sv, "both error completions", |cl, sv| {
        !cl.stats.send_errors.is_empty() && !sv.stats.receive_errors.is_empty()
    });
    let (rerr, serr) = (sv.stats.receive_errors[0], cl.stats.send_errors[0]);
    assert_eq!(rerr, STATUS_BUFFER_OVERFLOW, "the receiver's completion");
    assert_eq!(serr, STATUS_REMOTE_RESOURCES, "the sender's completion");
    let after = sv.receive_region();
    let slot = sv.stats.receive_slots_failed[0];
    for (i, (a, b)) in before.iter().zip(&after).enumerate() {
        if i / 1024 != slot {
            assert_eq!(a, b, "byte {i} outside the failed receive (slot {slot})");
        }
    }
    end(cl, sv, l);
    c.finish();
}

/// The request of an RDMA-channel I/O as this test shapes it: the buffer descriptors.
fn descriptors_of(msg: &[u8]) -> Vec<BufferDescriptor> {
    BufferDescriptor::decode_all(msg).expect("whole descriptors")
}

/// An SMB2 READ with SMB2_CHANNEL_RDMA_V1_INVALIDATE, four times through one buffer: the
/// client fast-registers 1 MiB for remote write and sends its descriptor; the server RDMA
/// WRITEs the data and answers with Send-with-Invalidate of the token; the client's receive
/// is a ReceiveAndInvalidate naming that token, and the buffer registers again (a new token)
/// for the next I/O.
#[test]
fn rdma_write_channel_with_remote_invalidation() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    let mut buf = cl.buffer(1 << 20);
    let mut tokens = Vec::new();
    for io in 0..4u8 {
        let d = cl.register(&mut buf, 1 << 20, true).unwrap();
        tokens.push(d.token);
        let req = transfer(&mut cl, &mut sv, &d.encode());
        let descs = descriptors_of(&req);
        assert_eq!(descs, vec![d]);
        let data = pattern(0x40 + io, 1 << 20);
        sv.rdma_write(&descs, &data).expect("RDMA WRITE");
        sv.send_with(b"read response", Some(descs[0].token))
            .unwrap();
        drive(&mut cl, &mut sv, "the response", |cl, _| cl.inbox_len() > 0);
        assert_eq!(cl.try_receive().unwrap(), b"read response");
        assert_eq!(cl.stats.invalidated, tokens, "ReceiveAndInvalidate tokens");
        assert!(cl.remotely_invalidated(&mut buf));
        assert_eq!(buf.mem.buf.read_vec(0, 1 << 20), data, "I/O {io}");
    }
    let mut distinct = tokens.clone();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        4,
        "each registration has its own token: {tokens:x?}"
    );
    cl.free_buffer(buf);
    end(cl, sv, l);
    c.finish();
}

/// An SMB2 WRITE with SMB2_CHANNEL_RDMA_V1_INVALIDATE: the server RDMA READs the client's
/// 1 MiB (at most ORD READs at once) and answers with Send-with-Invalidate; a second READ
/// through the invalidated token fails (the MS-SMBD test suite's "second use of the same token
/// must fail"): a remote access error, which NdkRead reports as STATUS_REMOTE_RESOURCES
/// (src/ndk/completion.rs: the status NDK names for a READ the responder refused).
#[test]
fn rdma_read_channel_with_remote_invalidation_and_a_dead_token() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    let mut buf = cl.buffer(1 << 20);
    let data = pattern(0x55, 1 << 20);
    buf.mem.buf.write(0, &data);
    // Two descriptors of 512 KiB each over one registration.
    let d = cl.register(&mut buf, 1 << 20, false).unwrap();
    let halves = [
        BufferDescriptor {
            length: 512 * 1024,
            ..d
        },
        BufferDescriptor {
            offset: d.offset + 512 * 1024,
            length: 512 * 1024,
            ..d
        },
    ];
    let mut msg = halves[0].encode().to_vec();
    msg.extend_from_slice(&halves[1].encode());
    let req = transfer(&mut cl, &mut sv, &msg);
    let descs = descriptors_of(&req);
    assert_eq!(descs, halves);
    assert_eq!(sv.rdma_read(&descs).expect("RDMA READ"), data);
    sv.send_with(b"write response", Some(d.token)).unwrap();
    drive(&mut cl, &mut sv, "the response", |cl, _| cl.inbox_len() > 0);
    assert_eq!(cl.try_receive().unwrap(), b"write response");
    assert_eq!(cl.stats.invalidated, vec![d.token]);
    assert!(cl.remotely_invalidated(&mut buf));
    assert_eq!(
        sv.rdma_read(&descs[..1]),
        Err(SmbdError::Ndk("an RDMA operation", STATUS_REMOTE_RESOURCES))
    );
    cl.free_buffer(buf);
    end(cl, sv, l);
    c.finish();
}

/// Dialect 3.0 (no remote invalidation): the server answers with a plain Send, the client
/// sees a plain Receive and invalidates its registration itself (NdkInvalidate); the server's
/// READ through the old token then fails (STATUS_REMOTE_RESOURCES, as above).
#[test]
fn dialect_3_0_client_invalidates_its_own_registration() {
    let c = cluster();
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    let mut buf = cl.buffer(64 * 1024);
    let data = pattern(0x66, 64 * 1024);
    buf.mem.buf.write(0, &data);
    let d = cl.register(&mut buf, 64 * 1024, false).unwrap();
    let req = transfer(&mut cl, &mut sv, &d.encode());
    let descs = descriptors_of(&req);
    assert_eq!(sv.rdma_read(&descs).unwrap(), data);
    assert_eq!(
        transfer(&mut sv, &mut cl, b"write response"),
        b"write response"
    );
    assert!(cl.stats.invalidated.is_empty());
    assert!(!cl.remotely_invalidated(&mut buf));
    cl.invalidate(&mut buf).expect("NdkInvalidate");
    assert_eq!(
        sv.rdma_read(&descs),
        Err(SmbdError::Ndk("an RDMA operation", STATUS_REMOTE_RESOURCES))
    );
    cl.free_buffer(buf);
    end(cl, sv, l);
    c.finish();
}

/// Many messages both ways at once with Windows' defaults, sizes from empty-ish to several
/// fragments: every message arrives in order, no receive meets an empty queue, the credits
/// held never exceed the receives posted on either side.
#[test]
fn many_messages_both_ways_keep_the_credit_rules() {
    let c = Cluster::with(ClusterConfig::cm(Mode::Threaded, 2));
    let (mut cl, mut sv, l) = pair(&c, win(), win()).expect("negotiate");
    let sizes = |i: usize| [1usize, 100, 1340, 1341, 5000, 30_000][i % 6];
    let n = 300;
    for i in 0..n {
        cl.send(&pattern(i as u8, sizes(i))).unwrap();
        sv.send(&pattern(i as u8 ^ 0x80, sizes(i + 3))).unwrap();
    }
    drive(&mut cl, &mut sv, "every message both ways", |a, b| {
        a.stats.messages_received == n as u64 && b.stats.messages_received == n as u64
    });
    for i in 0..n {
        assert_eq!(sv.try_receive().unwrap(), pattern(i as u8, sizes(i)));
        assert_eq!(
            cl.try_receive().unwrap(),
            pattern(i as u8 ^ 0x80, sizes(i + 3))
        );
    }
    for s in [&cl, &sv] {
        assert!(s.stats.receive_errors.is_empty() && s.stats.send_errors.is_empty());
        assert!(s.stats.peer_credits_max <= 255);
    }
    end(cl, sv, l);
    c.finish();
}
