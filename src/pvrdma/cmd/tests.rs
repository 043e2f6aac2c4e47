use super::*;
use crate::os::host::HostPlatform;
use crate::os::{Dpc, DpcHandler, InterruptHandler, Processor, RegisterIo};
use crate::pvrdma::testdev::{FakeDevice, Mode};
use std::sync::Mutex;
use std::vec::Vec;

fn req<C: Command>(c: &C) -> Vec<u8> {
    request_bytes(c)[..C::REQ_LEN].to_vec()
}

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// Builds the expected request: header code at 8, then (offset, bytes) patches.
fn want(len: usize, code: u32, patches: &[(usize, &[u8])]) -> Vec<u8> {
    let mut w = std::vec![0u8; len];
    w[8..12].copy_from_slice(&code.to_le_bytes());
    for (o, b) in patches {
        w[*o..*o + b.len()].copy_from_slice(b);
    }
    w
}

#[test]
fn request_layouts() {
    assert_eq!(req(&QueryPort { port_num: 1 }), want(24, 0, &[(16, &[1])]));
    assert_eq!(
        req(&QueryPkey {
            port_num: 1,
            index: 3
        }),
        want(24, 1, &[(16, &[1, 3])])
    );
    assert_eq!(
        req(&CreatePd { ctx_handle: 0x1234 }),
        want(24, 2, &[(16, &le32(0x1234))])
    );
    assert_eq!(req(&DestroyPd { pd_handle: 7 }), want(24, 3, &[(16, &[7])]));
    assert_eq!(
        req(&CreateMr {
            start: 0x1122_3344_5566_7788,
            length: 0x2000,
            pdir_dma: 0xABC000,
            pd_handle: 5,
            access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            flags: mr_flags::FRMR,
            nchunks: 9,
        }),
        want(
            56,
            4,
            &[
                (16, &0x1122_3344_5566_7788u64.to_le_bytes()),
                (24, &0x2000u64.to_le_bytes()),
                (32, &0xABC000u64.to_le_bytes()),
                (40, &[5]),
                (44, &[3]),
                (48, &[2]),
                (52, &[9]),
            ]
        )
    );
    assert_eq!(req(&DestroyMr { mr_handle: 8 }), want(24, 5, &[(16, &[8])]));
    assert_eq!(
        req(&CreateCq {
            pdir_dma: 0x5000,
            ctx_handle: 0,
            cqe: 256,
            nchunks: 5
        }),
        want(
            40,
            6,
            &[(16, &0x5000u64.to_le_bytes()), (28, &le32(256)), (32, &[5])]
        )
    );
    assert_eq!(req(&DestroyCq { cq_handle: 4 }), want(24, 8, &[(16, &[4])]));
    assert_eq!(
        req(&CreateQp {
            pdir_dma: 0x9_0000_1000,
            pd_handle: 1,
            send_cq_handle: 2,
            recv_cq_handle: 3,
            srq_handle: 4,
            max_send_wr: 64,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
            lkey: 0,
            access_flags: AccessFlags::LOCAL_WRITE,
            total_chunks: 0x0104,
            send_chunks: 3,
            max_atomic_arg: 0,
            sq_sig_all: 1,
            qp_type: QpType::Rc,
            is_srq: 1,
        }),
        want(
            80,
            9,
            &[
                (16, &0x9_0000_1000u64.to_le_bytes()),
                (24, &[1]),
                (28, &[2]),
                (32, &[3]),
                (36, &[4]),
                (40, &[64]),
                (44, &[32]),
                (48, &[2]),
                (52, &[1]),
                (64, &[1]),
                (68, &[4, 1]),
                (70, &[3]),
                (74, &[1, 2, 1]),
            ]
        )
    );
    assert_eq!(
        req(&DestroyQp { qp_handle: 0x0102 }),
        want(24, 12, &[(16, &[2, 1])])
    );
    assert_eq!(
        req(&QueryQp {
            qp_handle: 6,
            attr_mask: QpAttrMask::STATE | QpAttrMask::CAP
        }),
        want(24, 11, &[(16, &[6]), (20, &le32(0x8_0001))])
    );
    let gid: [u8; 16] = core::array::from_fn(|i| 0xF0 + i as u8);
    assert_eq!(
        req(&CreateBind {
            mtu: 1024,
            vlan: 0xFFF,
            index: 2,
            new_gid: gid,
            gid_type: 2
        }),
        want(
            48,
            15,
            &[
                (16, &le32(1024)),
                (20, &le32(0xFFF)),
                (24, &[2]),
                (28, &gid),
                (44, &[2])
            ]
        )
    );
    assert_eq!(
        req(&DestroyBind {
            index: 3,
            dest_gid: gid
        }),
        want(40, 16, &[(16, &[3]), (20, &gid)])
    );
    assert_eq!(
        req(&CreateSrq {
            pdir_dma: 0x7000,
            pd_handle: 2,
            nchunks: 3,
            attr: SrqAttr {
                max_wr: 64,
                max_sge: 2,
                srq_limit: 8
            },
            srq_type: 0,
        }),
        want(
            56,
            17,
            &[
                (16, &0x7000u64.to_le_bytes()),
                (24, &[2]),
                (28, &[3]),
                (32, &[64]),
                (36, &[2]),
                (40, &[8]),
            ]
        )
    );
    assert_eq!(
        req(&ModifySrq {
            srq_handle: 5,
            attr_mask: srq_attr_mask::LIMIT,
            attr: SrqAttr {
                max_wr: 0,
                max_sge: 0,
                srq_limit: 9
            },
        }),
        want(40, 18, &[(16, &[5]), (20, &[2]), (32, &[9])])
    );
    assert_eq!(
        req(&QuerySrq { srq_handle: 5 }),
        want(24, 19, &[(16, &[5])])
    );
    assert_eq!(
        req(&DestroySrq { srq_handle: 5 }),
        want(24, 20, &[(16, &[5])])
    );
}

#[test]
fn modify_qp_layout() {
    let mut dgid = [0u8; 16];
    dgid[15] = 9;
    let attr = QpAttr {
        qp_state: QpState::Rtr as u32,
        path_mtu: 3,
        qkey: 0x1111_1111,
        rq_psn: 0x22,
        sq_psn: 0x33,
        dest_qp_num: 0x102,
        qp_access_flags: 7,
        pkey_index: 0x0A0B,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 5,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 6,
        cap: QpCap {
            max_send_wr: 64,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ah_attr: AhAttr {
            dgid,
            flow_label: 0xABCDE,
            sgid_index: 1,
            hop_limit: 64,
            traffic_class: 3,
            dlid: 0,
            vlan_id: 0x0123,
            sl: 2,
            src_path_bits: 0,
            static_rate: 0,
            ah_flags: 1,
            port_num: 1,
            dmac: [1, 2, 3, 4, 5, 6],
        },
        ..QpAttr::default()
    };
    let m = ModifyQp {
        qp_handle: 3,
        attr_mask: QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::DEST_QPN,
        attr,
    };
    let b = req(&m);
    assert_eq!(b.len(), 184);
    let a = 24;
    let w = want(
        184,
        10,
        &[
            (16, &[3]),
            (20, &le32(0x10_0081)),
            (a, &[2]),
            (a + 8, &[3]),
            (a + 16, &le32(0x1111_1111)),
            (a + 20, &[0x22]),
            (a + 24, &[0x33]),
            (a + 28, &[2, 1]),
            (a + 32, &[7]),
            (a + 36, &[0x0B, 0x0A]),
            (a + 42, &[4, 5, 12, 1, 14, 7, 6]),
            (a + 56, &[64, 0, 0, 0, 32, 0, 0, 0, 2, 0, 0, 0, 1]),
            (a + 80, &dgid),
            (a + 96, &le32(0xABCDE)),
            (a + 100, &[1, 64, 3]),
            (a + 106, &[0x23, 0x01, 2, 0, 0, 1, 1, 1, 2, 3, 4, 5, 6]),
        ],
    );
    assert_eq!(b, w);
    // QUERY_QP decodes the same layout at 16.
    let mut r = [0u8; RESP_MAX];
    r[8..12].copy_from_slice(&(11 | RESP_BIT).to_le_bytes());
    r[16..176].copy_from_slice(&b[24..184]);
    assert_eq!(decode_response::<QueryQp>(&r, 20), Ok(attr));
}

fn resp(code: u32, body: &[(usize, &[u8])]) -> [u8; RESP_MAX] {
    let mut r = [0u8; RESP_MAX];
    r[8..12].copy_from_slice(&(code | RESP_BIT).to_le_bytes());
    for (o, b) in body {
        r[*o..*o + b.len()].copy_from_slice(b);
    }
    r
}

#[test]
fn response_decoding() {
    let r = resp(
        9,
        &[
            (16, &le32(0x105)),
            (20, &le32(5)),
            (24, &le32(64)),
            (28, &le32(32)),
            (32, &le32(2)),
            (36, &le32(1)),
            (40, &le32(0)),
        ],
    );
    let v20 = decode_response::<CreateQp>(&r, 20).unwrap();
    assert_eq!(
        (
            v20.qpn,
            v20.qp_handle,
            v20.max_send_wr,
            v20.max_recv_wr,
            v20.max_send_sge,
            v20.max_recv_sge
        ),
        (0x105, 5, 64, 32, 2, 1)
    );
    let r19 = resp(
        9,
        &[
            (16, &le32(5)),
            (20, &le32(64)),
            (24, &le32(32)),
            (28, &le32(2)),
            (32, &le32(1)),
            (36, &le32(0)),
        ],
    );
    let v19 = decode_response::<CreateQp>(&r19, 19).unwrap();
    assert_eq!(
        (
            v19.qpn,
            v19.qp_handle,
            v19.max_send_wr,
            v19.max_recv_wr,
            v19.max_send_sge,
            v19.max_recv_sge
        ),
        (5, 5, 64, 32, 2, 1)
    );
    let r = resp(4, &[(16, &[3]), (20, &[0x05, 3]), (24, &[0x05, 3])]);
    assert_eq!(
        decode_response::<CreateMr>(&r, 20),
        Ok(CreateMrResp {
            mr_handle: 3,
            lkey: 0x305,
            rkey: 0x305
        })
    );
    let r = resp(6, &[(16, &[2]), (20, &le32(256))]);
    assert_eq!(
        decode_response::<CreateCq>(&r, 20),
        Ok(CreateCqResp {
            cq_handle: 2,
            cqe: 256
        })
    );
    assert_eq!(
        decode_response::<CreatePd>(&resp(2, &[(16, &[9])]), 20),
        Ok(9)
    );
    assert_eq!(
        decode_response::<CreateSrq>(&resp(17, &[(16, &[4])]), 20),
        Ok(4)
    );
    assert_eq!(
        decode_response::<QueryPkey>(&resp(1, &[(16, &[0xFF, 0xFF])]), 20),
        Ok(0xFFFF)
    );
    assert_eq!(
        decode_response::<DestroyQp>(&resp(12, &[(16, &[2])]), 20),
        Ok(2)
    );
    assert_eq!(
        decode_response::<QuerySrq>(&resp(19, &[(16, &[64]), (20, &[2]), (24, &[0])]), 20),
        Ok(SrqAttr {
            max_wr: 64,
            max_sge: 2,
            srq_limit: 0
        })
    );
    let p = decode_response::<QueryPort>(
        &resp(
            0,
            &[
                (16, &[4]),
                (20, &[3]),
                (24, &[3]),
                (28, &[16]),
                (32, &le32(1 << 26)),
                (36, &le32(0x8000_0000)),
                (48, &[1, 0]),
                (59, &[1, 32, 5]),
            ],
        ),
        20,
    )
    .unwrap();
    assert_eq!(
        (p.state, p.max_mtu, p.active_mtu, p.gid_tbl_len),
        (4, 3, 3, 16)
    );
    assert_eq!(
        (p.port_cap_flags, p.max_msg_sz, p.pkey_tbl_len),
        (1 << 26, 0x8000_0000, 1)
    );
    assert_eq!((p.active_width, p.active_speed, p.phys_state), (1, 32, 5));
    // Header checks.
    let mut bad = resp(2, &[]);
    bad[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(
        decode_response::<CreatePd>(&bad, 20),
        Err(PvrdmaError::BadAck { code: 2, ack: 2 })
    );
    let other = resp(3, &[]);
    assert_eq!(
        decode_response::<CreatePd>(&other, 20),
        Err(PvrdmaError::BadAck {
            code: 2,
            ack: 0x8000_0003
        })
    );
    let mut e = resp(10, &[]);
    e[12] = 22;
    assert_eq!(
        decode_response::<ModifyQp>(&e, 20),
        Err(PvrdmaError::CommandFailed { code: 10, err: 22 })
    );
    let mut e = resp(3, &[]);
    e[12] = 16;
    assert_eq!(
        decode_response::<DestroyPd>(&e, 20),
        Err(PvrdmaError::CommandFailed { code: 3, err: 16 })
    );
}

// ---- channel tests against the fake device ----

struct Vec0 {
    ch: Mutex<Option<std::sync::Weak<CmdChannel>>>,
}
impl DpcHandler for Vec0 {
    fn run(&self) {
        let ch = self.ch.lock().unwrap().as_ref().and_then(|w| w.upgrade());
        if let Some(ch) = ch {
            ch.on_vector0();
        }
    }
}
struct TestIsr(Dpc);
impl InterruptHandler for TestIsr {
    fn isr(&self, _: u32) -> bool {
        self.0.queue(Processor::Current);
        true
    }
}

struct Rig {
    fake: Arc<FakeDevice>,
    platform: Arc<HostPlatform>,
    ch: Arc<CmdChannel>,
    _dsr: crate::os::SharedDma,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.ch.shutdown();
        self.platform.executor().shutdown();
    }
}

fn rig(timeout_ns: u64) -> Rig {
    let fake = FakeDevice::new(20);
    let dma: Arc<dyn crate::os::DmaAllocator> = fake.dma.clone();
    let platform = fake.platform(dma.clone(), 0);
    let pl: Arc<dyn Platform> = platform.clone();
    let ch = CmdChannel::new(pl.clone(), 20, timeout_ns).unwrap();
    let v0 = Arc::new(Vec0 {
        ch: Mutex::new(Some(Arc::downgrade(&ch))),
    });
    let dpc = Dpc::new(pl.scheduler(), v0).unwrap();
    pl.connect_interrupt(Arc::new(TestIsr(dpc))).unwrap();
    // A minimal DSR so the fake finds the slots.
    let mut d = DmaBuffer::alloc(&dma, 4096).unwrap();
    d.as_mut_slice()[16..24].copy_from_slice(&ch.cmd_slot_dma().to_le_bytes());
    d.as_mut_slice()[24..32].copy_from_slice(&ch.resp_slot_dma().to_le_bytes());
    let d = d.share();
    fake.write32(0x04, d.logical() as u32);
    fake.write32(0x08, (d.logical() >> 32) as u32);
    Rig {
        fake,
        platform,
        ch,
        _dsr: d,
    }
}

fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..20_000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    panic!("condition not reached");
}

type Log = Arc<Mutex<Vec<(u32, Result<u32, PvrdmaError>)>>>;

fn submit_pd(r: &Rig, tag: u32, log: &Log) {
    let l = log.clone();
    r.ch.submit(&CreatePd { ctx_handle: tag }, move |res| {
        l.lock().unwrap().push((tag, res));
    })
    .unwrap();
}

#[test]
fn execute_roundtrip_checks_key_and_body() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    r.fake.st.lock().unwrap().resp_body[0] = 42;
    assert_eq!(r.ch.execute(&CreatePd { ctx_handle: 0 }), Ok(42));
    let reqs = r.fake.st.lock().unwrap().requests.clone();
    assert_eq!(reqs.len(), 1);
    assert_eq!(&reqs[0][8..12], &2u32.to_le_bytes());
    let key = u64::from_le_bytes(reqs[0][0..8].try_into().unwrap());
    assert_ne!(key, 0);
    assert_eq!(r.ch.execute(&DestroyPd { pd_handle: 42 }), Ok(()));
    let key2 = u64::from_le_bytes(
        r.fake.st.lock().unwrap().requests[1][0..8]
            .try_into()
            .unwrap(),
    );
    assert_ne!(key, key2, "each command gets its own response key");
    let s = r.ch.stats();
    assert_eq!((s.submitted, s.responses, s.timeouts), (2, 2, 0));
    // REQUEST then ERR, once per command.
    let log = r.fake.st.lock().unwrap().log.clone();
    let reqs_then_err = log
        .windows(2)
        .filter(|w| {
            w[0] == crate::pvrdma::testdev::Access::W(0x10, 0)
                && w[1] == crate::pvrdma::testdev::Access::R(0x14, 0)
        })
        .count();
    assert_eq!(reqs_then_err, 2);
}

#[test]
fn one_outstanding_fifo_order() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    r.fake
        .st
        .lock()
        .unwrap()
        .modes
        .extend([Mode::Defer, Mode::Defer, Mode::Defer]);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    for tag in 1..=3 {
        submit_pd(&r, tag, &log);
    }
    assert_eq!(
        r.fake.st.lock().unwrap().requests.len(),
        1,
        "only one command in flight"
    );
    assert!(r.ch.busy());
    assert_eq!(r.ch.waiting(), 2);
    r.fake.release();
    wait_for(|| log.lock().unwrap().len() == 1);
    wait_for(|| r.fake.st.lock().unwrap().requests.len() == 2);
    assert_eq!(&r.fake.st.lock().unwrap().requests[1][16..20], &le32(2));
    r.fake.release();
    wait_for(|| r.fake.st.lock().unwrap().requests.len() == 3);
    r.fake.release();
    wait_for(|| log.lock().unwrap().len() == 3);
    let tags: Vec<u32> = log.lock().unwrap().iter().map(|e| e.0).collect();
    assert_eq!(tags, [1, 2, 3]);
    assert!(log.lock().unwrap().iter().all(|e| e.1 == Ok(0)));
    assert!(!r.ch.busy());
}

#[test]
fn stale_vector0_is_ignored() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    // Nothing outstanding.
    assert!(r.platform.raise_interrupt(0));
    wait_for(|| r.ch.stats().stale_interrupts == 1);
    // First command completes; then one deferred: a vector 0 now sees the old response.
    assert_eq!(r.ch.execute(&CreatePd { ctx_handle: 0 }), Ok(0));
    r.fake.st.lock().unwrap().modes.push_back(Mode::Defer);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    submit_pd(&r, 7, &log);
    assert!(r.platform.raise_interrupt(0));
    wait_for(|| r.ch.stats().stale_interrupts == 2);
    assert!(
        log.lock().unwrap().is_empty(),
        "old response not taken for the new command"
    );
    assert!(r.ch.busy());
    r.fake.release();
    wait_for(|| log.lock().unwrap().len() == 1);
    assert_eq!(log.lock().unwrap()[0], (7, Ok(0)));
}

#[test]
fn err_register_rejection_and_header_errors() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    r.fake.st.lock().unwrap().modes.extend([
        Mode::RejectErr(95),
        Mode::HdrErr(22),
        Mode::BadAck,
        Mode::Respond,
    ]);
    assert_eq!(
        r.ch.execute(&CreatePd { ctx_handle: 0 }),
        Err(PvrdmaError::CommandRejected { code: 2, err: 95 })
    );
    assert_eq!(
        r.ch.execute(&ModifyQp {
            qp_handle: 1,
            attr_mask: QpAttrMask::STATE,
            attr: QpAttr::default()
        }),
        Err(PvrdmaError::CommandFailed { code: 10, err: 22 })
    );
    assert_eq!(
        r.ch.execute(&DestroyCq { cq_handle: 1 }),
        Err(PvrdmaError::BadAck { code: 8, ack: 8 })
    );
    assert_eq!(r.ch.execute(&DestroyCq { cq_handle: 1 }), Ok(()));
    let s = r.ch.stats();
    assert_eq!(s.rejected, 1);
    assert_eq!(s.responses, 3);
}

#[test]
fn timeout_fails_command_and_channel_moves_on() {
    let r = rig(20_000_000); // 20 ms
    r.fake.st.lock().unwrap().modes.push_back(Mode::Silent);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    submit_pd(&r, 1, &log);
    submit_pd(&r, 2, &log);
    wait_for(|| log.lock().unwrap().len() == 2);
    assert_eq!(
        *log.lock().unwrap(),
        [(1, Err(PvrdmaError::Timeout)), (2, Ok(0))]
    );
    assert_eq!(r.ch.stats().timeouts, 1);
}

#[test]
fn shutdown_fails_pending_and_refuses_new() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    r.fake.st.lock().unwrap().modes.extend([Mode::Defer]);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    submit_pd(&r, 1, &log);
    submit_pd(&r, 2, &log);
    r.ch.shutdown();
    assert_eq!(
        *log.lock().unwrap(),
        [
            (1, Err(PvrdmaError::Shutdown)),
            (2, Err(PvrdmaError::Shutdown))
        ]
    );
    assert_eq!(
        r.ch.submit(&CreatePd { ctx_handle: 0 }, |_| {}),
        Err(PvrdmaError::Shutdown)
    );
}

fn reserve_logged<C: Command<Resp = ()>>(r: &Rig, tag: u32, log: &Log) -> Reserved<C> {
    let l = log.clone();
    r.ch.reserve::<C>(move |res| l.lock().unwrap().push((tag, res.map(|()| 0))))
        .unwrap()
}

#[test]
fn reserved_commands_queue_in_fifo_order_without_allocating() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    r.fake.st.lock().unwrap().modes.extend([Mode::Defer]);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    submit_pd(&r, 1, &log);
    let cq = reserve_logged::<DestroyCq>(&r, 10, &log);
    let pd = reserve_logged::<DestroyPd>(&r, 11, &log);
    // Submitting a reservation takes no allocation: one armed to fail is never consumed.
    crate::os::alloc::inject_failure_at(1);
    r.ch.submit_reserved(cq, &DestroyCq { cq_handle: 5 });
    r.ch.submit_reserved(pd, &DestroyPd { pd_handle: 6 });
    let untouched = crate::os::alloc::injection_pending();
    crate::os::alloc::inject_failure_at(0);
    assert!(untouched, "submit_reserved allocated");
    assert_eq!(r.fake.st.lock().unwrap().requests.len(), 1, "one in flight");
    assert_eq!(r.ch.waiting(), 2);
    r.fake.release();
    wait_for(|| log.lock().unwrap().len() == 3);
    assert_eq!(*log.lock().unwrap(), [(1, Ok(0)), (10, Ok(0)), (11, Ok(0))]);
    let reqs = r.fake.st.lock().unwrap().requests.clone();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        (&reqs[1][8..12], &reqs[1][16..20]),
        (&le32(code::DESTROY_CQ)[..], &le32(5)[..])
    );
    assert_eq!(
        (&reqs[2][8..12], &reqs[2][16..20]),
        (&le32(code::DESTROY_PD)[..], &le32(6)[..])
    );
    let key = |i: usize| u64::from_le_bytes(reqs[i][0..8].try_into().unwrap());
    assert!(key(1) != 0 && key(1) != key(0) && key(2) != key(1));
    assert_eq!(r.ch.stats().submitted, 3);
}

#[test]
fn reservation_after_shutdown_completes_and_unused_one_drops_uncalled() {
    let r = rig(DEFAULT_TIMEOUT_NS);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let late = reserve_logged::<DestroyMr>(&r, 1, &log);
    let token = Arc::new(());
    let t = token.clone();
    let unused = r.ch.reserve::<DestroyMr>(move |_| drop(t)).unwrap();
    assert_eq!(Arc::strong_count(&token), 2);
    drop(unused);
    assert_eq!(Arc::strong_count(&token), 1, "completion dropped with it");
    r.ch.shutdown();
    r.ch.submit_reserved(late, &DestroyMr { mr_handle: 3 });
    assert_eq!(*log.lock().unwrap(), [(1, Err(PvrdmaError::Shutdown))]);
    assert!(r.fake.st.lock().unwrap().requests.is_empty());
}

#[test]
fn every_qp_type_round_trips_and_no_other_is_one() {
    for v in [1, 2, 4] {
        assert_eq!(QpType::try_from(v).map(QpType::as_raw), Ok(v));
    }
    assert_eq!(
        [QpType::Gsi, QpType::Rc, QpType::Ud].map(QpType::as_raw),
        [1, 2, 4]
    );
    for v in [0, 3, 5, u8::MAX] {
        assert_eq!(QpType::try_from(v), Err(UnknownQpType(v)));
    }
}

#[test]
fn every_qp_state_round_trips_and_no_other_is_one() {
    for v in 0..=6 {
        assert_eq!(QpState::try_from(v).map(QpState::as_raw), Ok(v));
    }
    assert_eq!(QpState::Err.as_raw(), 6);
    assert_eq!(QpState::try_from(7), Err(UnknownQpState(7)));
    assert_eq!(QpState::try_from(u32::MAX), Err(UnknownQpState(u32::MAX)));
}
