//! SMB Direct against Linux's ksmbd: the guest of docs/PEER.md booted from the SMB Direct
//! image (tools/peer/build-smbd.sh: ksmbd.ko with CONFIG_SMB_SERVER_SMBDIRECT, ksmbd-tools
//! 3.5.2), ksmbd started with one share (`ksmbd-start`), listening on rdma_cm port 445; the
//! simulated host runs the MS-SMBD transport of tests/common/smbd over the provider as the
//! client.
//!
//! What ksmbd answers is pinned where it differs from Windows' defaults (docs/PEER.md, "SMB
//! Direct against ksmbd"). Needs the images, so `#[ignore]`d in the default run; `.ci/run`
//! runs it with `--ignored`.

mod common;

use std::time::Duration;

use common::guest::{COMMAND_TIMEOUT, smbd_image_dir};
use common::interop::rig::{Peer, Suite};
use common::ndk::sa;
use common::smbd::transport::Smbd;
use common::smbd::wire::NegotiateResponse;
use common::smbd::{SMBD_PORT, SMBD_VERSION, SmbdConfig, smb2};

/// ksmbd's rdma_cm listener appears once ksmbd.mountd started the server.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
#[ignore = "needs the SMB Direct guest image (tools/peer/build-smbd.sh); .ci/run runs it"]
fn smb_direct_against_ksmbd() {
    let image = smbd_image_dir().unwrap_or_else(|e| panic!("{e}"));
    let peer = Peer::boot_image(Some(image));
    let start = peer.guest.run("ksmbd-start /srv/share", COMMAND_TIMEOUT);
    let start = start.unwrap_or_else(|e| panic!("ksmbd-start: {e}"));
    assert!(start.success(), "ksmbd-start: {start}");
    peer.guest
        .wait_listening(SMBD_PORT, LISTEN_TIMEOUT)
        .unwrap_or_else(|e| panic!("ksmbd listens for SMB Direct: {e}"));
    let mut s = Suite::with_peer("SMB Direct (ksmbd)", peer);
    s.case(
        "MS-SMBD negotiate with Windows' defaults, SMB2 NEGOTIATE 3.0.2",
        false,
        |r| {
            let dst = sa(r.guest_ip(), SMBD_PORT);
            let mut t = Smbd::connect(&r.c, 0, dst, SmbdConfig::windows())
                .unwrap_or_else(|e| panic!("MS-SMBD connect and negotiate: {e}"));
            let n = t.negotiated.unwrap();
            eprintln!("ksmbd's negotiate response: {:?}", n.response);
            let resp = n.response;
            assert_eq!(resp.negotiated_version, SMBD_VERSION);
            assert_eq!(resp.status, 0);
            // Where ksmbd differs from Windows' defaults (6.1 fs/smb/server/transport_rdma.c,
            // docs/PEER.md "SMB Direct against ksmbd"): it grants 254 credits for its 255
            // receives (the one the negotiate request used is not reposted before the
            // response, which grants `new_recv_credits`), receives 1364-byte
            // messages (smb_direct_max_receive_size), reassembles at most 255 × 1364 / 2 =
            // 173,910 bytes, and reads or writes 8 MiB per request.
            assert_eq!(
                resp,
                NegotiateResponse {
                    min_version: SMBD_VERSION,
                    max_version: SMBD_VERSION,
                    negotiated_version: SMBD_VERSION,
                    credits_requested: 255,
                    credits_granted: 254,
                    status: 0,
                    max_read_write_size: 8 << 20,
                    preferred_send_size: 1364,
                    max_receive_size: 1364,
                    max_fragmented_size: 255 * 1364 / 2,
                }
            );
            assert_eq!(n.max_send_size, 1364);
            assert_eq!(t.send_credits(), 254);
            let guid = *b"pvrdma-ndk-smbd!";
            t.send(&smb2::negotiate_request(0, &[0x0300, 0x0302], guid))
                .unwrap();
            let m = t
                .receive()
                .unwrap_or_else(|e| panic!("SMB2 NEGOTIATE response: {e}"));
            let nr = smb2::NegotiateResponse::decode(&m)
                .unwrap_or_else(|| panic!("an SMB2 NEGOTIATE response: {m:02x?}"));
            eprintln!(
                "ksmbd's SMB2 NEGOTIATE response: {nr:?}; transport {:?}",
                t.stats
            );
            assert_eq!(nr.header.status, 0);
            assert_eq!(nr.header.command, smb2::NEGOTIATE);
            assert_ne!(nr.header.flags & smb2::FLAGS_SERVER_TO_REDIR, 0);
            assert_eq!(nr.dialect, 0x0302);
            // ksmbd's SMB2 sizes (smb2ops.c smb30_server_values: 4 MiB reads and writes,
            // 1 MiB transactions); the capabilities it offers 3.0.2 over RDMA: LARGE_MTU.
            assert_eq!(
                (nr.max_transact_size, nr.max_read_size, nr.max_write_size),
                (1 << 20, 4 << 20, 4 << 20)
            );
            assert_eq!(nr.capabilities & smb2::CAP_LARGE_MTU, smb2::CAP_LARGE_MTU);
            // The request granted ksmbd every receive posted; it answered with one message.
            assert_eq!(t.stats.credits_granted, 255);
            assert_eq!(t.peer_credits(), 254);
            assert!(t.stats.receive_errors.is_empty() && t.stats.send_errors.is_empty());
            t.check_invariants();
            t.close();
        },
    );
    s.finish();
}
