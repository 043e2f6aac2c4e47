//! MADs from the wire into the connection manager (issue 13 item 4c): two `Cm` instances
//! connect over a fuzzer-driven wire that drops, duplicates, reorders and corrupts MADs and
//! injects raw bytes, while each consumer accepts, rejects, disconnects and releases at random.
//!
//! Invariants, checked after every step: nothing panics; no table holds more than its capacity;
//! `on_mad` refuses bytes that are not a CM MAD without changing any state. At the end every
//! connection is released and virtual time runs on until every timer has fired (TIMEWAIT
//! included): both tables must be empty — nothing a peer sent keeps a slot forever.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pvrdma_ndk::cm::addr::gid_from_ip;
use pvrdma_ndk::cm::limits::ReadLimits;
use pvrdma_ndk::cm::wire::MAD_LEN;
use pvrdma_ndk::cm::{
    AcceptParams, Action, Cm, CmConfig, ConnId, ConnectParams, Event, ListenerId, Path,
};

const CAPACITY: usize = 8;
const PORT: u16 = 445;
const MS: u64 = 1_000_000;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Node `from & 1` connects to the other node's port (445 or another).
    Connect {
        from: u8,
        other_port: bool,
        data_len: u8,
    },
    Listen {
        node: u8,
    },
    Unlisten {
        node: u8,
    },
    /// Delivers queued MAD `k` (mod the queue length) to its destination.
    Deliver {
        k: u8,
    },
    Drop {
        k: u8,
    },
    Duplicate {
        k: u8,
    },
    /// XORs byte `at` of queued MAD `k` with `xor` before it is delivered.
    Corrupt {
        k: u8,
        at: u8,
        xor: u8,
    },
    /// Raw bytes from the wire to a node.
    Inject {
        node: u8,
        bytes: Vec<u8>,
    },
    /// Virtual time moves on by `ms` milliseconds (timers fire).
    Advance {
        ms: u16,
    },
    /// A consumer acts on one of its connections.
    Accept {
        node: u8,
        conn: u8,
        data_len: u8,
    },
    Reject {
        node: u8,
        conn: u8,
        data_len: u8,
    },
    Complete {
        node: u8,
        conn: u8,
    },
    Disconnect {
        node: u8,
        conn: u8,
    },
    Release {
        node: u8,
        conn: u8,
    },
}

struct Node {
    cm: Cm,
    ip: IpAddr,
    conns: Vec<ConnId>,
    listener: Option<ListenerId>,
    next_qpn: u32,
}

struct Packet {
    to: usize,
    path: Path,
    mad: [u8; MAD_LEN],
}

struct World {
    nodes: [Node; 2],
    now: u64,
    wire: Vec<Packet>,
}

impl World {
    fn new() -> Self {
        let node = |last: u8, seed: u32| {
            let mut cfg =
                CmConfig::rdma_cm_defaults(CAPACITY, 0x0050_5600_0000_0000 | u64::from(last), seed);
            cfg.adapter_max = ReadLimits::new(16, 8);
            Node {
                cm: Cm::new(cfg).expect("a valid configuration"),
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
                conns: Vec::new(),
                listener: None,
                next_qpn: 0x100 * u32::from(last),
            }
        };
        World {
            nodes: [node(1, 0x1234_5678), node(2, 0x9abc_def0)],
            now: 1_000 * MS,
            wire: Vec::new(),
        }
    }

    fn path(&self, from: usize) -> Path {
        Path {
            local_gid: gid_from_ip(self.nodes[from].ip),
            remote_gid: gid_from_ip(self.nodes[1 - from].ip),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Performs every queued action: sends go on the wire, events teach the consumer its
    /// connections, QP modifications always succeed.
    fn pump(&mut self) {
        for i in 0..2 {
            while let Some(a) = self.nodes[i].cm.poll_action() {
                match a {
                    Action::Send { path, mad, .. } => {
                        let to = 1 - i;
                        // The wire is bounded like any real queue: a full wire loses the MAD.
                        if self.wire.len() < 256 {
                            let path = Path {
                                local_gid: path.remote_gid,
                                remote_gid: path.local_gid,
                                ..path
                            };
                            self.wire.push(Packet { to, path, mad });
                        }
                    }
                    Action::Deliver { conn, event } => {
                        if matches!(event, Event::ConnectRequest { .. })
                            && !self.nodes[i].conns.contains(&conn)
                        {
                            self.nodes[i].conns.push(conn);
                        }
                    }
                    Action::ModifyQp { .. } => {}
                }
            }
            assert!(
                self.nodes[i].cm.live_connections() <= CAPACITY,
                "table over capacity"
            );
        }
    }

    fn conn(&self, node: usize, k: u8) -> Option<ConnId> {
        let c = &self.nodes[node].conns;
        (!c.is_empty()).then(|| c[usize::from(k) % c.len()])
    }

    fn advance(&mut self, ns: u64) {
        self.now += ns;
        for n in &mut self.nodes {
            n.cm.on_timer(self.now);
        }
    }

    fn step(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Connect {
                from,
                other_port,
                data_len,
            } => {
                let from = usize::from(from & 1);
                let qpn = self.nodes[from].next_qpn;
                self.nodes[from].next_qpn += 1;
                let data = [0x5a; 64];
                let port = if other_port { PORT + 1 } else { PORT };
                let params = ConnectParams {
                    src: SocketAddr::new(self.nodes[from].ip, 49152 + (qpn as u16 & 0x3fff)),
                    dst: SocketAddr::new(self.nodes[1 - from].ip, port),
                    path: self.path(from),
                    local_qpn: qpn,
                    starting_psn: qpn.wrapping_mul(0x1111) & 0xff_ffff,
                    limits: ReadLimits::new(12, 6),
                    path_mtu: 3,
                    retry_count: 7,
                    rnr_retry_count: 6,
                    private_data: &data[..usize::from(data_len) % data.len()],
                };
                if let Ok(id) = self.nodes[from].cm.connect(now, &params) {
                    self.nodes[from].conns.push(id);
                }
            }
            Op::Listen { node } => {
                let n = &mut self.nodes[usize::from(node & 1)];
                if n.listener.is_none() {
                    n.listener = n.cm.listen(PORT, n.ip).ok();
                }
            }
            Op::Unlisten { node } => {
                let n = &mut self.nodes[usize::from(node & 1)];
                if let Some(l) = n.listener.take() {
                    let _ = n.cm.unlisten(l);
                }
            }
            Op::Deliver { k } | Op::Duplicate { k } if !self.wire.is_empty() => {
                let i = usize::from(k) % self.wire.len();
                let p = if matches!(op, Op::Duplicate { .. }) {
                    Packet {
                        to: self.wire[i].to,
                        path: self.wire[i].path,
                        mad: self.wire[i].mad,
                    }
                } else {
                    self.wire.remove(i)
                };
                let _ = self.nodes[p.to].cm.on_mad(now, &p.path, &p.mad);
            }
            Op::Drop { k } if !self.wire.is_empty() => {
                let i = usize::from(k) % self.wire.len();
                self.wire.remove(i);
            }
            Op::Corrupt { k, at, xor } if !self.wire.is_empty() => {
                let i = usize::from(k) % self.wire.len();
                self.wire[i].mad[usize::from(at)] ^= xor;
            }
            Op::Inject { node, ref bytes } => {
                let to = usize::from(node & 1);
                let path = self.path(1 - to);
                let before = self.nodes[to].cm.live_connections();
                if self.nodes[to].cm.on_mad(now, &path, bytes).is_err() {
                    assert_eq!(
                        self.nodes[to].cm.live_connections(),
                        before,
                        "a dropped MAD changed the table"
                    );
                }
            }
            Op::Advance { ms } => self.advance(u64::from(ms) * MS),
            Op::Accept {
                node,
                conn,
                data_len,
            } => {
                let n = usize::from(node & 1);
                if let Some(c) = self.conn(n, conn) {
                    let qpn = self.nodes[n].next_qpn;
                    self.nodes[n].next_qpn += 1;
                    let data = [0xa5; 200];
                    let p = AcceptParams {
                        local_qpn: qpn,
                        starting_psn: 0x42,
                        limits: ReadLimits::new(8, 8),
                        rnr_retry_count: 7,
                        private_data: &data[..usize::from(data_len) % data.len()],
                    };
                    let _ = self.nodes[n].cm.accept(now, c, &p);
                }
            }
            Op::Reject {
                node,
                conn,
                data_len,
            } => {
                let n = usize::from(node & 1);
                if let Some(c) = self.conn(n, conn) {
                    let data = [0x33; 200];
                    let _ = self.nodes[n]
                        .cm
                        .reject(c, &data[..usize::from(data_len) % data.len()]);
                }
            }
            Op::Complete { node, conn } => {
                let n = usize::from(node & 1);
                if let Some(c) = self.conn(n, conn) {
                    let _ = self.nodes[n].cm.complete_connect(c);
                }
            }
            Op::Disconnect { node, conn } => {
                let n = usize::from(node & 1);
                if let Some(c) = self.conn(n, conn) {
                    let _ = self.nodes[n].cm.disconnect(now, c);
                }
            }
            Op::Release { node, conn } => {
                let n = usize::from(node & 1);
                if let Some(c) = self.conn(n, conn) {
                    let _ = self.nodes[n].cm.release(now, c);
                    self.nodes[n].conns.retain(|&x| x != c);
                }
            }
            _ => {}
        }
        self.pump();
    }

    /// Every consumer lets go of everything; the wire goes dead; time runs until no timer is
    /// left. Then nothing may remain.
    fn finish(mut self) {
        for n in &mut self.nodes {
            for c in core::mem::take(&mut n.conns) {
                let _ = n.cm.release(self.now, c);
            }
            if let Some(l) = n.listener.take() {
                let _ = n.cm.unlisten(l);
            }
        }
        for _ in 0..100_000 {
            self.pump();
            self.wire.clear();
            let next = self.nodes.iter().filter_map(|n| n.cm.next_timer()).min();
            let Some(at) = next else { break };
            self.now = self.now.max(at);
            for n in &mut self.nodes {
                n.cm.on_timer(self.now);
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            assert_eq!(
                n.cm.live_connections(),
                0,
                "node {i}: connections left after every release and timer"
            );
            assert_eq!(n.cm.live_listeners(), 0, "node {i}: listeners left");
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut w = World::new();
    for op in ops.iter().take(256) {
        w.step(op);
    }
    w.finish();
});
