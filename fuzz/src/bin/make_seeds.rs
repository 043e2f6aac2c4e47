//! Writes the committed seed corpora: `cargo run --bin make_seeds -- <fuzz dir>` writes
//! `corpus/consumer_calls/*` and `corpus/device_memory/*`. Each seed is a Rust value
//! encoded with `pvrdma_ndk_fuzz::seed`, decoded back and compared, so a change of the input
//! types that breaks the encoding fails here instead of silently seeding garbage.

use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use pvrdma_ndk_fuzz::bringup::{CapsWrite, Input, ResponseWrite};
use pvrdma_ndk_fuzz::consumer::{Call, DeviceInput, DeviceWrite, Kind, Sg, Step, Verb};
use pvrdma_ndk_fuzz::seed;

const SG0: Sg = Sg {
    source: 0,
    offset: 0,
    length: 256,
};
const NO_SG: [Sg; 3] = [SG0, SG0, SG0];

fn post(qp: u8, verb: Verb, count: u8, flags: u16) -> Call {
    Call::Post {
        qp,
        verb,
        count,
        sges: [
            SG0,
            Sg {
                source: 1,
                offset: 512,
                length: 100,
            },
            Sg {
                source: 3,
                offset: 8,
                length: 64,
            },
        ],
        flags,
        remote: Sg {
            source: 0,
            offset: 4096,
            length: 0,
        },
        token: 0,
    }
}

fn qp(pd: u8, srq: Option<u8>) -> Call {
    Call::CreateQp {
        pd,
        rcq: 0,
        icq: 0,
        srq,
        receive_depth: 16,
        initiator_depth: 16,
        receive_sge: 2,
        initiator_sge: 2,
        inline_data: 0,
    }
}

/// Two hosts, each with a CQ, a PD, an MR over four pages and a QP; the QPs connected.
fn pair() -> Vec<Call> {
    let mut v = Vec::new();
    for host in 0..2 {
        v.push(Call::CreateCq { host, depth: 64 });
        v.push(Call::CreatePd { host });
    }
    for pd in 0..2 {
        v.push(Call::CreateMr { pd, fast: false });
    }
    for mr in 0..2 {
        v.push(Call::Register {
            mr,
            offset: 0,
            pages: 4,
            length: 0,
            flags: 0x7,
        });
    }
    v.push(qp(0, None));
    v.push(qp(1, None));
    v.push(Call::Connect { a: 0, b: 0 });
    v
}

fn closes() -> Vec<Call> {
    [Kind::Qp, Kind::Mw, Kind::Mr, Kind::Srq, Kind::Pd, Kind::Cq]
        .into_iter()
        .flat_map(|kind| (0..2).map(move |_| Call::Close { kind, index: 0 }))
        .collect()
}

fn consumer_seeds() -> Vec<(&'static str, Vec<Call>)> {
    let objects = vec![
        Call::CreateCq { host: 0, depth: 16 },
        Call::CreatePd { host: 0 },
        Call::CreateMr { pd: 0, fast: false },
        Call::Register {
            mr: 0,
            offset: 100,
            pages: 2,
            length: 10,
            flags: 1,
        },
        qp(0, None),
        Call::Close {
            kind: Kind::Qp,
            index: 0,
        },
        Call::Deregister { mr: 0 },
        Call::Close {
            kind: Kind::Mr,
            index: 0,
        },
        Call::Close {
            kind: Kind::Pd,
            index: 0,
        },
        Call::Close {
            kind: Kind::Cq,
            index: 0,
        },
    ];
    let mut send_receive = pair();
    send_receive.extend([
        post(1, Verb::Receive, 1, 0),
        post(0, Verb::Send, 1, 0),
        Call::Arm { cq: 1, ty: 1 },
        Call::Settle,
        Call::Poll {
            cq: 0,
            n: 4,
            ex: true,
        },
        Call::Poll {
            cq: 1,
            n: 4,
            ex: false,
        },
        post(0, Verb::Write, 2, 0x200),
        post(0, Verb::Read, 1, 0),
        Call::Settle,
        Call::Poll {
            cq: 0,
            n: 8,
            ex: true,
        },
    ]);
    send_receive.extend(closes());
    let srq = vec![
        Call::CreateCq { host: 1, depth: 32 },
        Call::CreatePd { host: 1 },
        Call::CreateSrq {
            pd: 0,
            depth: 16,
            sge: 2,
            threshold: 4,
        },
        qp(0, Some(0)),
        Call::SrqReceive {
            srq: 0,
            count: 2,
            sges: NO_SG,
        },
        Call::ModifySrq {
            srq: 0,
            depth: 0,
            threshold: 8,
        },
        Call::Flush { qp: 0 },
        Call::Settle,
        Call::Poll {
            cq: 0,
            n: 8,
            ex: true,
        },
        Call::Close {
            kind: Kind::Srq,
            index: 0,
        },
        Call::Close {
            kind: Kind::Qp,
            index: 0,
        },
    ];
    let mut fast = pair();
    fast.extend([
        Call::CreateMr { pd: 0, fast: true },
        Call::InitializeFastRegister {
            mr: 2,
            pages: 8,
            remote: true,
        },
        Call::FastRegister {
            qp: 0,
            mr: 2,
            pages: 4,
            fbo: 16,
            length: 8000,
            va_page: 3,
            flags: 0x38,
        },
        Call::Invalidate {
            qp: 0,
            target: 2,
            window: false,
            flags: 0,
        },
        Call::CreateMw { pd: 0 },
        Call::Bind {
            qp: 0,
            mr: 0,
            mw: 0,
            offset: 0,
            length: 4096,
            flags: 8,
        },
        Call::Settle,
        Call::Poll {
            cq: 0,
            n: 8,
            ex: true,
        },
    ]);
    let parents_first = vec![
        Call::CreateCq { host: 0, depth: 16 },
        Call::CreatePd { host: 0 },
        Call::CreateMr { pd: 0, fast: false },
        qp(0, None),
        Call::Close {
            kind: Kind::Pd,
            index: 0,
        },
        Call::Close {
            kind: Kind::Cq,
            index: 0,
        },
        post(0, Verb::Receive, 1, 0),
        Call::Close {
            kind: Kind::Qp,
            index: 0,
        },
        Call::Close {
            kind: Kind::Mr,
            index: 0,
        },
    ];
    let flush = {
        let mut v = pair();
        for _ in 0..3 {
            v.push(post(0, Verb::Receive, 2, 0));
        }
        v.extend([
            Call::Arm { cq: 0, ty: 1 },
            Call::Flush { qp: 0 },
            Call::Settle,
            Call::Poll {
                cq: 0,
                n: 2,
                ex: false,
            },
            Call::Poll {
                cq: 0,
                n: 2,
                ex: true,
            },
        ]);
        v
    };
    let limits = vec![
        Call::CreateCq {
            host: 0,
            depth: 0xFFFF,
        },
        Call::CreateCq { host: 0, depth: 0 },
        Call::CreateCq { host: 0, depth: 2 },
        Call::CreatePd { host: 0 },
        Call::CreateSrq {
            pd: 0,
            depth: 0xFFFF,
            sge: 39,
            threshold: 0,
        },
        Call::CreateQp {
            pd: 0,
            rcq: 0,
            icq: 0,
            srq: None,
            receive_depth: 1,
            initiator_depth: 1,
            receive_sge: 39,
            initiator_sge: 1,
            inline_data: 0x3FFF,
        },
        qp(0, None),
        post(0, Verb::Receive, 20, 0),
        post(0, Verb::Receive, 1, 0),
        post(0, Verb::Receive, 1, 0),
        post(0, Verb::Send, 1, 0x8000),
        Call::Arm { cq: 0, ty: 3 },
    ];
    vec![
        ("objects", objects),
        ("send_receive", send_receive),
        ("srq", srq),
        ("fast_register", fast),
        ("parents_first", parents_first),
        ("flush", flush),
        ("limits", limits),
    ]
}

fn quiet() -> Input {
    Input {
        version: None,
        caps: [CapsWrite {
            on: false,
            offset: 0,
            value: 0,
        }; 3],
        responses: [ResponseWrite {
            on: false,
            command: 0,
            offset: 0,
            bytes: [0; 4],
        }; 3],
    }
}

fn device_seeds() -> Vec<(&'static str, DeviceInput)> {
    let calls = |v: Vec<Call>| v.into_iter().map(Step::Call).collect::<Vec<_>>();
    let traffic = {
        let mut v = pair();
        v.extend([
            post(1, Verb::Receive, 1, 0),
            post(0, Verb::Send, 1, 0),
            post(0, Verb::Write, 1, 0),
            Call::Arm { cq: 0, ty: 1 },
        ]);
        calls(v)
    };
    let with = |extra: Vec<Step>| {
        let mut v = traffic.clone();
        v.extend(extra);
        v.push(Step::Call(Call::Settle));
        v.push(Step::Call(Call::Poll {
            cq: 0,
            n: 8,
            ex: true,
        }));
        v
    };
    let forge = with(vec![
        Step::Device(DeviceWrite::ForgeCqe {
            cq: 0,
            qp: 0,
            wr_id: 0,
            tag: 0,
            opcode: 0,
            status: 0,
            byte_len: 256,
            wc_flags: 0,
            publish: true,
        }),
        Step::Call(Call::Poll {
            cq: 0,
            n: 4,
            ex: true,
        }),
        Step::Device(DeviceWrite::ForgeCqe {
            cq: 1,
            qp: 0,
            wr_id: 0,
            tag: 2,
            opcode: 0x80,
            status: 5,
            byte_len: 0xFFFF_FFFF,
            wc_flags: 4,
            publish: true,
        }),
    ]);
    let tail = with(vec![Step::Device(DeviceWrite::CqTail {
        cq: 0,
        delta: 0,
        raw: Some(0xFFFF_FFFF),
    })]);
    // A CQE forged and published over a tail the device set to u32::MAX: the harness's own
    // arithmetic on device memory (it overflowed, found by run.sh 60 once the target ran at
    // about 700 executions a second).
    let forge_wild_tail = with(vec![
        Step::Device(DeviceWrite::CqTail {
            cq: 0,
            delta: 0,
            raw: Some(0xFFFF_FFFF),
        }),
        Step::Device(DeviceWrite::ForgeCqe {
            cq: 0,
            qp: 0,
            wr_id: 0,
            tag: 0,
            opcode: 0,
            status: 0,
            byte_len: 64,
            wc_flags: 0,
            publish: true,
        }),
    ]);
    let cqe_bytes = with(vec![
        Step::Call(Call::Settle),
        Step::Device(DeviceWrite::CqeBytes {
            cq: 0,
            slot: 0,
            offset: 8,
            bytes: [0xFF, 0xFF, 0, 0, 0, 0, 0, 0],
        }),
    ]);
    let async_ring = with(vec![Step::Device(DeviceWrite::AsyncRing {
        host: 0,
        offset: 0,
        bytes: [0, 0, 0, 0, 1, 0, 0, 0],
        delta: 1,
        raw: None,
    })]);
    let cq_ring = with(vec![Step::Device(DeviceWrite::CqNotificationRing {
        host: 0,
        offset: 0,
        bytes: [1, 0, 0, 0],
        delta: 1,
        raw: None,
    })]);
    let interrupt = with(vec![Step::Device(DeviceWrite::Interrupt {
        host: 1,
        vector: 3,
    })]);
    let mut caps = quiet();
    caps.version = Some(1);
    caps.caps[0] = CapsWrite {
        on: true,
        offset: 100,
        value: 3,
    };
    caps.caps[1] = CapsWrite {
        on: true,
        offset: 88,
        value: 0,
    };
    let mut response = quiet();
    // The sixth command (after the probe's QUERY_PORT, QUERY_PKEY, CREATE_BIND and the
    // adapter's first creates): the response's ack.
    response.responses[0] = ResponseWrite {
        on: true,
        command: 5,
        offset: 8,
        bytes: [6, 0, 0, 0x80],
    };
    response.responses[1] = ResponseWrite {
        on: true,
        command: 3,
        offset: 16,
        bytes: [0xFF, 0xFF, 0, 0],
    };
    vec![
        ("forged_cqes", DeviceInput::Steps(forge)),
        ("cq_tail", DeviceInput::Steps(tail)),
        ("forge_over_wild_tail", DeviceInput::Steps(forge_wild_tail)),
        ("cqe_bytes", DeviceInput::Steps(cqe_bytes)),
        ("async_ring", DeviceInput::Steps(async_ring)),
        ("cq_notification_ring", DeviceInput::Steps(cq_ring)),
        ("stray_interrupt", DeviceInput::Steps(interrupt)),
        ("bringup", DeviceInput::Bringup(quiet())),
        ("caps", DeviceInput::Bringup(caps)),
        ("responses", DeviceInput::Bringup(response)),
    ]
}

fn decode<'a, T: Arbitrary<'a>>(bytes: &'a [u8]) -> T {
    T::arbitrary_take_rest(Unstructured::new(bytes)).expect("decodes")
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let dir = Path::new(&dir).join("corpus");
    let cc = dir.join("consumer_calls");
    let dm = dir.join("device_memory");
    std::fs::create_dir_all(&cc).unwrap();
    std::fs::create_dir_all(&dm).unwrap();
    for (name, v) in consumer_seeds() {
        let bytes = seed::calls(&v);
        assert_eq!(decode::<Vec<Call>>(&bytes), v, "seed {name} round trip");
        std::fs::write(cc.join(name), &bytes).unwrap();
    }
    for (name, d) in device_seeds() {
        let bytes = seed::device(&d);
        assert_eq!(decode::<DeviceInput>(&bytes), d, "seed {name} round trip");
        std::fs::write(dm.join(name), &bytes).unwrap();
    }
}
