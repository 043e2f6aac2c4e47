//! One MS-SMBD connection over the provider ([`Smbd`]), driven through the NDK dispatch
//! tables the way Windows' SMB Direct drives NDK (smb-direct.md §1.4): NdkConnect/NdkAccept on
//! port 445 with IRD/ORD, NdkReceive of MaxReceiveSize buffers (as many as the credits it may
//! grant), NdkSend of MaxSendSize fragments, NdkRead/NdkWrite of the peer's registered buffers,
//! NdkFastRegister of its own with remote invalidation (NdkSendAndInvalidate on the server,
//! ReceiveAndInvalidate with the token in NDK_RESULT_EX on the client) or NdkInvalidate.
//!
//! The endpoint is polled, never threaded: [`Smbd::poll`] takes every completion from its CQ,
//! reposts each consumed receive, reassembles fragments, answers RESPONSE_REQUESTED, and posts
//! queued fragments while it holds send credits. Blocking calls wait on a fact with the
//! cluster's pump (a real peer keeps its own side going); two simulated endpoints in one
//! thread are driven together with [`drive`].
//!
//! Credits (MS-SMBD 3.1.1.1, 3.1.5): a message is posted only with a send credit (one per
//! message); every message grants the peer what the receives posted allow beyond what it
//! holds, up to the CreditsRequested it last asked; a message spending the last credit asks
//! for a response (RESPONSE_REQUESTED) so the peer grants more; an otherwise idle side grants
//! in an empty message when the peer runs low. [`Stats`] records every count a test checks.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use pvrdma_ndk::ndkpi::*;

use super::super::memory::ConsumerMem;
use super::super::ndk::{Cluster, Connector, Cq, Listener, Mr, Pd, Qp, QpSpec, Registered, sa};
use super::wire::*;
use super::{SMBD_VERSION, SmbdConfig, SmbdError};

/// The two roles of MS-SMBD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What a connection did, for the tests' checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Upper-layer messages sent and received (reassembled).
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Data transfer messages posted and received (fragments, keepalives and grants included).
    pub fragments_sent: u64,
    pub fragments_received: u64,
    /// Messages without data: sent to grant credits or answer a request, and keepalives.
    pub empty_sent: u64,
    pub empty_received: u64,
    pub keepalives_sent: u64,
    /// Messages posted with RESPONSE_REQUESTED (keepalives and last-credit messages).
    pub responses_requested: u64,
    /// Credits this side granted and was granted in total (negotiate included).
    pub credits_granted: u64,
    pub credits_received: u64,
    /// The most credits the peer held at once, and the fewest receives posted while it held
    /// them: `peer_credits_max ≤ receives` always (a grant never exceeds the posted
    /// receives: [`Smbd::check_invariants`]).
    pub peer_credits_max: u32,
    /// Times a queued fragment waited because this side had no send credit.
    pub credit_stalls: u64,
    /// The fewest send credits held right after a post (0 means the last one was spent).
    pub send_credits_min: u32,
    /// Receives posted in total (initial and reposts).
    pub receives_posted: u64,
    /// Failed receive and send completions (status), in order.
    pub receive_errors: Vec<NTSTATUS>,
    pub send_errors: Vec<NTSTATUS>,
    /// The receive slots of the failed receives.
    pub receive_slots_failed: Vec<usize>,
    /// Tokens the peer invalidated with Send-with-Invalidate (ReceiveAndInvalidate).
    pub invalidated: Vec<u32>,
}

/// What the negotiate settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's message (request or response).
    pub peer_credits_requested: u16,
    /// The largest message this side sends: min(own MaxSendSize, peer's MaxReceiveSize).
    pub max_send_size: u32,
    /// The peer's MaxFragmentedSize: the largest message this side may send.
    pub peer_max_fragmented_size: u32,
    /// The server's MaxReadWriteSize (a server: its own).
    pub max_read_write_size: u32,
    /// Credits granted in the negotiate response.
    pub initial_credits: u16,
    /// The response as received (client) or sent (server).
    pub response: NegotiateResponse,
}

/// A fragment waiting for a credit.
struct Out {
    flags: u16,
    remaining: u32,
    data: Vec<u8>,
    /// NdkSendAndInvalidate of this token (the last fragment of a response).
    invalidate: Option<u32>,
}

const KIND_SHIFT: u32 = 48;
const RECV: usize = 1;
const SEND: usize = 2;
const OP: usize = 3;

fn tag(kind: usize, n: usize) -> usize {
    (kind << KIND_SHIFT) | n
}

fn untag(ctx: usize) -> (usize, usize) {
    (ctx >> KIND_SHIFT, ctx & ((1 << KIND_SHIFT) - 1))
}

/// Send slots: fragments in flight at once (each MaxSendSize bytes, 2 KiB apart).
const SEND_SLOTS: usize = 64;
const SEND_SLOT: usize = 2048;
/// Consumer VAs of one endpoint's regions (per host; MRs differ, so two endpoints on one
/// host may reuse them).
const RECV_VA: u64 = 0x5_0000_0000;
const SEND_VA: u64 = 0x5_4000_0000;
const RW_VA: u64 = 0x5_8000_0000;
/// First consumer VA of client buffers ([`Smbd::buffer`]).
const BUF_VA: u64 = 0x6_0000_0000;

/// A client buffer for an RDMA channel: memory and an FRMR (NdkCreateMr with fast
/// registration, NdkInitializeFastRegisterMr for its pages); each use registers it with
/// NdkFastRegister and hands out the descriptor.
pub struct RdmaBuffer {
    pub mem: ConsumerMem,
    pub mr: Mr,
    pub len: usize,
    /// The descriptor of the current registration, until invalidated.
    pub registered: Option<BufferDescriptor>,
}

/// One MS-SMBD connection; see the module docs.
pub struct Smbd<'c> {
    c: &'c Cluster,
    host: usize,
    pub role: Role,
    pub cfg: SmbdConfig,
    pd: Pd,
    cq: Cq,
    pub qp: Qp,
    pub conn: Option<Connector>,
    recv: Registered,
    send_buf: Registered,
    /// The server's RDMA source/sink (MaxReadWriteSize), registered for local writes.
    rw: Option<Registered>,
    free_send: Vec<usize>,
    pub negotiated: Option<Negotiated>,
    send_credits: u32,
    /// Credits the peer holds (granted, not yet used by a message it sent).
    peer_credits: u32,
    /// Receives posted now.
    receives: u32,
    peer_credit_target: u32,
    outq: VecDeque<Out>,
    reassembly: Vec<u8>,
    reassembling: bool,
    inbox: VecDeque<Vec<u8>>,
    /// Raw first message (negotiate phase).
    negotiate_msg: Option<Vec<u8>>,
    respond: bool,
    last_receive: Instant,
    keepalive_sent: Option<Instant>,
    ops_done: Vec<(usize, NTSTATUS)>,
    next_op: usize,
    next_buf_va: u64,
    error: Option<SmbdError>,
    pub stats: Stats,
    /// Interrupt-driven completion, as Windows' SMB Direct runs: after a poll drains the CQ,
    /// NdkArmCq(NDK_CQ_NOTIFY_ANY) and poll once more (a completion that raced the arm);
    /// armed again only after the notification came. Off: the CQ is polled only.
    pub interrupt_driven: bool,
    /// Notifications seen when the CQ was last armed (`None`: not armed).
    armed_at: Option<usize>,
}

/// Polls both endpoints until `cond` holds (two simulated hosts in one thread).
pub fn drive(a: &mut Smbd<'_>, b: &mut Smbd<'_>, what: &str, cond: impl Fn(&Smbd, &Smbd) -> bool) {
    let c = a.c;
    c.wait_for(what, || {
        a.poll();
        b.poll();
        cond(a, b)
    });
}

impl<'c> Smbd<'c> {
    /// The NDK objects and receive buffers of one endpoint (nothing posted yet).
    fn new(c: &'c Cluster, host: usize, role: Role, cfg: SmbdConfig) -> Smbd<'c> {
        let a = c.adapter(host);
        let pd = a.create_pd().expect("NdkCreatePd");
        let credits = u32::from(cfg.receive_credit_max);
        let depth = credits + SEND_SLOTS as u32 + 64;
        let cq = a.create_cq(depth, None).expect("NdkCreateCq");
        let spec = QpSpec {
            receive_depth: credits,
            initiator_depth: SEND_SLOTS as u32 + 32,
            receive_sge: 1,
            initiator_sge: 2,
            ..QpSpec::new(0x534D_4244)
        };
        let qp = pd.create_qp(&cq, &cq, spec).expect("NdkCreateQp");
        let h = c.host(host);
        let slot = cfg.max_receive_size as usize;
        let recv_pages = (slot * credits as usize).div_ceil(4096).max(1);
        let recv = Registered::new(h, &pd, recv_pages, RECV_VA, NDK_MR_FLAG_ALLOW_LOCAL_WRITE);
        assert!(
            cfg.max_send_size as usize <= SEND_SLOT,
            "MaxSendSize above a send slot"
        );
        let send_buf = Registered::new(h, &pd, SEND_SLOTS * SEND_SLOT / 4096, SEND_VA, 0);
        let rw = (role == Role::Server).then(|| {
            let pages = (cfg.max_read_write_size as usize).div_ceil(4096);
            Registered::new(h, &pd, pages, RW_VA, NDK_MR_FLAG_ALLOW_LOCAL_WRITE)
        });
        Smbd {
            c,
            host,
            role,
            cfg,
            pd,
            cq,
            qp,
            conn: None,
            recv,
            send_buf,
            rw,
            free_send: (0..SEND_SLOTS).rev().collect(),
            negotiated: None,
            send_credits: 0,
            peer_credits: 0,
            receives: 0,
            peer_credit_target: 0,
            outq: VecDeque::new(),
            reassembly: Vec::new(),
            reassembling: false,
            inbox: VecDeque::new(),
            negotiate_msg: None,
            respond: false,
            last_receive: Instant::now(),
            keepalive_sent: None,
            ops_done: Vec::new(),
            next_op: 0,
            next_buf_va: BUF_VA,
            error: None,
            interrupt_driven: false,
            armed_at: None,
            stats: Stats {
                send_credits_min: u32::MAX,
                ..Stats::default()
            },
        }
    }

    fn post_receive(&mut self, slot: usize) {
        let size = self.cfg.max_receive_size;
        let sge = self.recv.sge(slot as u64 * u64::from(size), size);
        let st = self.qp.receive(tag(RECV, slot), &[sge]);
        assert_eq!(st, STATUS_SUCCESS, "NdkReceive");
        self.receives += 1;
        self.stats.receives_posted += 1;
    }

    fn post_all_receives(&mut self) {
        for slot in 0..usize::from(self.cfg.receive_credit_max) {
            self.post_receive(slot);
        }
    }

    /// The client: receives posted, NdkConnect to `server` (port 445 for SMB Direct) with
    /// the configured IRD/ORD, NdkCompleteConnect; the negotiate request not yet sent.
    pub fn connect_start(
        c: &'c Cluster,
        host: usize,
        server: SocketAddr,
        cfg: SmbdConfig,
    ) -> Result<Smbd<'c>, SmbdError> {
        let mut s = Smbd::new(c, host, Role::Client, cfg);
        s.post_all_receives();
        let conn = c
            .adapter(host)
            .create_connector()
            .map_err(|st| SmbdError::Ndk("NdkCreateConnector", st))?;
        let src = sa(c.host(host).ip_for(server.ip()), 0);
        let st = conn.connect(&s.qp, src, server, cfg.ird, cfg.ord, &[]);
        if st != STATUS_SUCCESS {
            conn.close();
            s.close_objects();
            return Err(SmbdError::Ndk("NdkConnect", st));
        }
        let st = conn.complete_connect();
        s.conn = Some(conn);
        if st != STATUS_SUCCESS {
            return Err(SmbdError::Ndk("NdkCompleteConnect", st));
        }
        Ok(s)
    }

    /// The client's whole set-up against a peer that runs by itself (a real server):
    /// connect, negotiate request, the response awaited and checked.
    pub fn connect(
        c: &'c Cluster,
        host: usize,
        server: SocketAddr,
        cfg: SmbdConfig,
    ) -> Result<Smbd<'c>, SmbdError> {
        let mut s = Smbd::connect_start(c, host, server, cfg)?;
        s.send_negotiate_request(&s.negotiate_request());
        s.wait_negotiate_response()?;
        Ok(s)
    }

    /// The negotiate request this side's configuration makes (2.2.1).
    pub fn negotiate_request(&self) -> NegotiateRequest {
        NegotiateRequest {
            min_version: SMBD_VERSION,
            max_version: SMBD_VERSION,
            credits_requested: self.cfg.send_credit_target,
            preferred_send_size: self.cfg.max_send_size,
            max_receive_size: self.cfg.max_receive_size,
            max_fragmented_size: self.cfg.max_fragmented_size,
        }
    }

    /// Sends a negotiate request (the first message; it needs no credit).
    pub fn send_negotiate_request(&mut self, req: &NegotiateRequest) {
        self.post_raw(&req.encode(), None);
    }

    /// Waits for the negotiate response and applies it (3.1.5.3 client side): status 0,
    /// version 1.0, at least one credit, the server's sizes within the spec's minimums.
    pub fn wait_negotiate_response(&mut self) -> Result<NegotiateResponse, SmbdError> {
        let m = self.wait_negotiate_message("the MS-SMBD negotiate response")?;
        self.apply_negotiate_response(&m)
    }

    fn wait_negotiate_message(&mut self, what: &str) -> Result<Vec<u8>, SmbdError> {
        let c = self.c;
        c.wait_for(what, || {
            self.poll();
            self.negotiate_msg.is_some() || self.error.is_some()
        });
        match self.negotiate_msg.take() {
            Some(m) => Ok(m),
            None => Err(self.error.clone().unwrap()),
        }
    }

    /// Applies a negotiate response the client received ([`Smbd::drive`] users call it
    /// after [`Smbd::take_negotiate_message`]).
    pub fn apply_negotiate_response(&mut self, m: &[u8]) -> Result<NegotiateResponse, SmbdError> {
        let r = NegotiateResponse::decode(m).ok_or_else(|| {
            self.fail(SmbdError::Protocol(format!(
                "a negotiate response of {} B",
                m.len()
            )))
        })?;
        if r.status != 0 {
            return Err(self.fail(SmbdError::Refused(r.status as NTSTATUS)));
        }
        if r.negotiated_version != SMBD_VERSION
            || r.credits_granted == 0
            || r.max_receive_size < 128
            || r.preferred_send_size > self.cfg.max_receive_size
        {
            return Err(self.fail(SmbdError::Protocol(format!("negotiate response {r:?}"))));
        }
        self.send_credits = u32::from(r.credits_granted);
        self.stats.credits_received += u64::from(r.credits_granted);
        self.peer_credit_target = u32::from(r.credits_requested.min(self.cfg.receive_credit_max));
        self.negotiated = Some(Negotiated {
            peer_credits_requested: r.credits_requested,
            max_send_size: self.cfg.max_send_size.min(r.max_receive_size),
            peer_max_fragmented_size: r.max_fragmented_size,
            max_read_write_size: r.max_read_write_size,
            initial_credits: r.credits_granted,
            response: r,
        });
        self.last_receive = Instant::now();
        Ok(r)
    }

    /// The negotiate-phase message received, if one came.
    pub fn take_negotiate_message(&mut self) -> Option<Vec<u8>> {
        self.negotiate_msg.take()
    }

    /// The server: receives posted, NdkAccept of the next connector `listener` delivered
    /// (its connect waited for), with the configured IRD/ORD; nothing negotiated yet.
    pub fn accept_start(
        c: &'c Cluster,
        host: usize,
        listener: &Listener,
        cfg: SmbdConfig,
    ) -> (Smbd<'c>, super::super::ndk::Request) {
        let mut s = Smbd::new(c, host, Role::Server, cfg);
        s.post_all_receives();
        let conn = listener.next_incoming();
        let accept = conn.accept_raw(&s.qp, cfg.ird, cfg.ord, &[]);
        s.conn = Some(conn);
        (s, accept)
    }

    /// The server's answer to a negotiate request (3.1.5.2 / 3.1.5.6 server side): a
    /// response granting min(CreditsRequested, receives posted) credits, or a refusal with
    /// STATUS_NOT_SUPPORTED (no common version) or STATUS_INVALID_PARAMETER (CreditsRequested
    /// 0, MaxReceiveSize < 128, MaxFragmentedSize < 128 KiB), after which the server ends the
    /// connection. Returns the response sent.
    pub fn answer_negotiate(&mut self, m: &[u8]) -> Result<NegotiateResponse, SmbdError> {
        let req = NegotiateRequest::decode(m).ok_or_else(|| {
            self.fail(SmbdError::Protocol(format!(
                "a negotiate request of {} B",
                m.len()
            )))
        })?;
        let status = if req.min_version > SMBD_VERSION || req.max_version < SMBD_VERSION {
            STATUS_NOT_SUPPORTED
        } else if req.credits_requested == 0
            || req.max_receive_size < 128
            || req.max_fragmented_size < 128 * 1024
        {
            STATUS_INVALID_PARAMETER
        } else {
            STATUS_SUCCESS
        };
        let granted = if status == STATUS_SUCCESS {
            u32::from(req.credits_requested)
                .min(self.receives)
                .min(u32::from(self.cfg.receive_credit_max))
        } else {
            0
        };
        let resp = NegotiateResponse {
            min_version: SMBD_VERSION,
            max_version: SMBD_VERSION,
            negotiated_version: if status == STATUS_NOT_SUPPORTED {
                0
            } else {
                SMBD_VERSION
            },
            credits_requested: self.cfg.send_credit_target,
            // CAST: ≤ receive_credit_max, a u16.
            credits_granted: granted as u16,
            status: status as u32,
            max_read_write_size: self.cfg.max_read_write_size,
            preferred_send_size: self.cfg.max_send_size.min(req.max_receive_size),
            max_receive_size: self.cfg.max_receive_size,
            max_fragmented_size: self.cfg.max_fragmented_size,
        };
        self.peer_credits = granted;
        self.stats.credits_granted += u64::from(granted);
        self.stats.peer_credits_max = self.stats.peer_credits_max.max(granted);
        self.post_raw(&resp.encode(), None);
        if status != STATUS_SUCCESS {
            return Err(self.fail(SmbdError::Refused(status)));
        }
        self.peer_credit_target = u32::from(req.credits_requested.min(self.cfg.receive_credit_max));
        self.negotiated = Some(Negotiated {
            peer_credits_requested: req.credits_requested,
            max_send_size: resp.preferred_send_size,
            peer_max_fragmented_size: req.max_fragmented_size,
            max_read_write_size: self.cfg.max_read_write_size,
            initial_credits: resp.credits_granted,
            response: resp,
        });
        self.last_receive = Instant::now();
        Ok(resp)
    }

    /// Posts `bytes` as one message from a send slot, outside the credit accounting (the
    /// negotiate messages; tests that break the rules on purpose).
    pub fn post_raw(&mut self, bytes: &[u8], invalidate: Option<u32>) {
        self.c.wait_for("a free send slot", || {
            self.poll_completions();
            !self.free_send.is_empty()
        });
        let slot = self.free_send.pop().unwrap();
        let off = (slot * SEND_SLOT) as u64;
        assert!(bytes.len() <= SEND_SLOT, "a raw message above a send slot");
        self.send_buf.mem.buf.write(off as usize, bytes);
        // CAST: ≤ SEND_SLOT.
        let sge = self.send_buf.sge(off, bytes.len() as u32);
        let st = match invalidate {
            Some(token) => self
                .qp
                .send_and_invalidate(tag(SEND, slot), &[sge], 0, token),
            None => self.qp.send(tag(SEND, slot), &[sge], 0),
        };
        assert_eq!(st, STATUS_SUCCESS, "NdkSend");
    }

    /// Queues `msg` (an upper-layer message) in fragments of the negotiated send size and
    /// posts what the credits allow; the rest goes out from later polls.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), SmbdError> {
        self.send_with(msg, None)
    }

    /// [`Smbd::send`] whose last fragment is an NdkSendAndInvalidate of `token` (the
    /// server's response to an RDMA-channel request with SMB2_CHANNEL_RDMA_V1_INVALIDATE).
    pub fn send_with(&mut self, msg: &[u8], invalidate: Option<u32>) -> Result<(), SmbdError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let n = self.negotiated.expect("send before the negotiate");
        if msg.len() > n.peer_max_fragmented_size as usize {
            return Err(SmbdError::TooLarge {
                len: msg.len(),
                max: n.peer_max_fragmented_size,
            });
        }
        let per = n.max_send_size as usize - DATA_OFFSET;
        let mut at = 0;
        loop {
            let take = per.min(msg.len() - at);
            let last = at + take == msg.len();
            self.outq.push_back(Out {
                flags: 0,
                // CAST: ≤ MaxFragmentedSize, a u32.
                remaining: (msg.len() - at - take) as u32,
                data: msg[at..at + take].to_vec(),
                invalidate: if last { invalidate } else { None },
            });
            at += take;
            if last {
                break;
            }
        }
        self.stats.messages_sent += 1;
        self.flush();
        Ok(())
    }

    /// Queues an empty message asking the peer to respond (a keepalive, 3.1.6.2).
    pub fn send_keepalive(&mut self) {
        self.outq.push_back(Out {
            flags: RESPONSE_REQUESTED,
            remaining: 0,
            data: Vec::new(),
            invalidate: None,
        });
        self.stats.keepalives_sent += 1;
        self.flush();
    }

    /// Credits the peer may be granted now: up to its target, within the receives posted.
    fn grantable(&self) -> u32 {
        let cap = self.peer_credit_target.min(self.receives);
        cap.saturating_sub(self.peer_credits)
    }

    /// Posts queued fragments while a credit and a send slot allow; grants credits in an
    /// empty message when the peer asked for a response or runs low and nothing else goes.
    fn flush(&mut self) {
        if self.negotiated.is_none() || self.error.is_some() {
            return;
        }
        let low = self.peer_credit_target / 4;
        if self.outq.is_empty()
            && (self.respond || (self.peer_credits <= low && self.grantable() > low.max(1)))
        {
            self.outq.push_back(Out {
                flags: 0,
                remaining: 0,
                data: Vec::new(),
                invalidate: None,
            });
        }
        while !self.outq.is_empty() {
            if self.send_credits == 0 {
                self.stats.credit_stalls += 1;
                return;
            }
            if self.free_send.is_empty() {
                return;
            }
            let mut out = self.outq.pop_front().unwrap();
            if self.send_credits == 1 {
                // The last credit: ask the peer to answer, so it grants more (3.1.5.1).
                out.flags |= RESPONSE_REQUESTED;
            }
            let granted = self.grantable();
            let h = DataHeader {
                credits_requested: self.cfg.send_credit_target,
                // CAST: ≤ receive_credit_max, a u16.
                credits_granted: granted as u16,
                flags: out.flags,
                remaining_data_length: out.remaining,
                data_offset: if out.data.is_empty() {
                    0
                } else {
                    DATA_OFFSET as u32
                },
                // CAST: ≤ MaxSendSize.
                data_length: out.data.len() as u32,
            };
            let slot = self.free_send.pop().unwrap();
            let off = slot * SEND_SLOT;
            let hdr = h.encode();
            let len = if out.data.is_empty() {
                DATA_HEADER_LEN
            } else {
                DATA_OFFSET + out.data.len()
            };
            self.send_buf
                .mem
                .buf
                .write(off, &hdr[..len.min(DATA_OFFSET)]);
            if !out.data.is_empty() {
                self.send_buf.mem.buf.write(off + DATA_OFFSET, &out.data);
            }
            // CAST: ≤ MaxSendSize.
            let sge = self.send_buf.sge(off as u64, len as u32);
            let st = match out.invalidate {
                Some(token) => self
                    .qp
                    .send_and_invalidate(tag(SEND, slot), &[sge], 0, token),
                None => self.qp.send(tag(SEND, slot), &[sge], 0),
            };
            if st != STATUS_SUCCESS {
                self.free_send.push(slot);
                self.fail(SmbdError::Ndk("NdkSend", st));
                return;
            }
            self.send_credits -= 1;
            self.peer_credits += granted;
            self.stats.credits_granted += u64::from(granted);
            self.stats.peer_credits_max = self.stats.peer_credits_max.max(self.peer_credits);
            self.stats.send_credits_min = self.stats.send_credits_min.min(self.send_credits);
            self.stats.fragments_sent += 1;
            if out.data.is_empty() {
                self.stats.empty_sent += 1;
            }
            if out.flags & RESPONSE_REQUESTED != 0 {
                self.stats.responses_requested += 1;
            }
            self.respond = false;
            self.check_invariants();
        }
    }

    /// The credit rules this side keeps: the peer never holds more credits than receives
    /// are posted (so none of its messages can meet an empty receive queue).
    /// (A connection that failed has its receives flushed: nothing to check.)
    pub fn check_invariants(&self) {
        assert!(
            self.error.is_some() || self.peer_credits <= self.receives,
            "granted {} credits with {} receives posted",
            self.peer_credits,
            self.receives
        );
    }

    fn fail(&mut self, e: SmbdError) -> SmbdError {
        if self.error.is_none() {
            self.error = Some(e.clone());
        }
        e
    }

    /// The error that ended the connection, if one did.
    pub fn error(&self) -> Option<&SmbdError> {
        self.error.as_ref()
    }

    /// Every byte of the receive buffers.
    pub fn receive_region(&self) -> Vec<u8> {
        let len = self.recv.mem.buf.pages() * 4096;
        self.recv.mem.buf.read_vec(0, len)
    }

    /// Send credits held.
    pub fn send_credits(&self) -> u32 {
        self.send_credits
    }

    /// Credits the peer holds.
    pub fn peer_credits(&self) -> u32 {
        self.peer_credits
    }

    /// Receives posted.
    pub fn receives(&self) -> u32 {
        self.receives
    }

    /// Fragments queued for lack of credits.
    pub fn queued(&self) -> usize {
        self.outq.len()
    }

    /// Sends posted and not completed.
    pub fn sends_in_flight(&self) -> usize {
        SEND_SLOTS - self.free_send.len()
    }

    /// Takes every completion, then flushes; keepalive by the wall clock.
    pub fn poll(&mut self) {
        self.poll_at(Instant::now());
    }

    /// [`Smbd::poll`] at time `now` (keepalive: after KeepaliveInterval without a message
    /// from the peer a keepalive goes out; after another, the connection ends).
    pub fn poll_at(&mut self, now: Instant) {
        self.poll_completions();
        if self.negotiated.is_some() && self.error.is_none() {
            let idle = now.saturating_duration_since(self.last_receive);
            match self.keepalive_sent {
                None if idle >= self.cfg.keepalive_interval => {
                    self.keepalive_sent = Some(now);
                    self.send_keepalive();
                }
                Some(at) if now.saturating_duration_since(at) >= self.cfg.keepalive_interval => {
                    self.fail(SmbdError::Disconnected("keepalive unanswered"));
                }
                _ => {}
            }
        }
        self.flush();
    }

    fn poll_completions(&mut self) {
        loop {
            let rs = self.cq.results_ex(32);
            if rs.is_empty() {
                break;
            }
            for r in rs {
                self.complete(&r);
            }
        }
        if !self.interrupt_driven {
            return;
        }
        let notified = self.cq.notifications().len();
        if self.armed_at.is_some_and(|at| notified == at) {
            return;
        }
        self.cq.arm(NDK_CQ_NOTIFY_ANY);
        self.armed_at = Some(notified);
        for r in self.cq.results_ex(32) {
            self.complete(&r);
        }
    }

    fn complete(&mut self, r: &NDK_RESULT_EX) {
        let (kind, n) = untag(r.RequestContext as usize);
        match kind {
            RECV => {
                self.receives -= 1;
                if r.Status != STATUS_SUCCESS {
                    self.stats.receive_errors.push(r.Status);
                    self.stats.receive_slots_failed.push(n);
                    if r.Status != STATUS_CANCELLED {
                        self.fail(SmbdError::Ndk("a receive", r.Status));
                    }
                    return;
                }
                if r.Type == NdkOperationTypeReceiveAndInvalidate {
                    // CAST: a 32-bit token in a ULONG_PTR.
                    self.stats
                        .invalidated
                        .push(r.TypeSpecificCompletionOutput as u32);
                }
                let size = self.cfg.max_receive_size as usize;
                let bytes = self
                    .recv
                    .mem
                    .buf
                    .read_vec(n * size, r.BytesTransferred as usize);
                if self.error.is_none() {
                    self.post_receive(n);
                }
                self.last_receive = Instant::now();
                self.keepalive_sent = None;
                if self.negotiated.is_none() {
                    self.negotiate_msg = Some(bytes);
                } else {
                    self.data_message(&bytes);
                }
            }
            SEND => {
                self.free_send.push(n);
                if r.Status != STATUS_SUCCESS {
                    self.stats.send_errors.push(r.Status);
                    if r.Status != STATUS_CANCELLED {
                        self.fail(SmbdError::Ndk("a send", r.Status));
                    }
                }
            }
            OP => self.ops_done.push((n, r.Status)),
            _ => panic!(
                "a completion of unknown context {:#x}",
                r.RequestContext as usize
            ),
        }
    }

    fn data_message(&mut self, bytes: &[u8]) {
        let h = match DataHeader::decode(bytes) {
            Ok(h) => h,
            Err(e) => {
                self.fail(SmbdError::Protocol(e));
                return;
            }
        };
        if self.peer_credits == 0 {
            self.fail(SmbdError::Protocol(
                "a message from a peer without credits".into(),
            ));
            return;
        }
        self.peer_credits -= 1;
        self.send_credits += u32::from(h.credits_granted);
        self.stats.credits_received += u64::from(h.credits_granted);
        self.stats.fragments_received += 1;
        self.peer_credit_target = u32::from(h.credits_requested.min(self.cfg.receive_credit_max));
        if h.flags & RESPONSE_REQUESTED != 0 {
            self.respond = true;
        }
        if h.data_length == 0 {
            self.stats.empty_received += 1;
            if h.remaining_data_length != 0 {
                self.fail(SmbdError::Protocol(
                    "RemainingDataLength without data".into(),
                ));
            }
            return;
        }
        let data = &bytes[h.data_offset as usize..(h.data_offset + h.data_length) as usize];
        if !self.reassembling {
            let total = u64::from(h.data_length) + u64::from(h.remaining_data_length);
            if total > u64::from(self.cfg.max_fragmented_size) {
                self.fail(SmbdError::Protocol(format!(
                    "a message of {total} B above MaxFragmentedSize {}",
                    self.cfg.max_fragmented_size
                )));
                return;
            }
            self.reassembly.clear();
            self.reassembly.reserve(total as usize);
        } else if self.reassembly.len() as u64
            + u64::from(h.data_length)
            + u64::from(h.remaining_data_length)
            > u64::from(self.cfg.max_fragmented_size)
        {
            self.fail(SmbdError::Protocol(
                "a fragment beyond the announced length".into(),
            ));
            return;
        }
        self.reassembly.extend_from_slice(data);
        self.reassembling = h.remaining_data_length != 0;
        if !self.reassembling {
            self.inbox.push_back(std::mem::take(&mut self.reassembly));
            self.stats.messages_received += 1;
        }
    }

    /// The next reassembled message, if one arrived (after [`Smbd::poll`]).
    pub fn try_receive(&mut self) -> Option<Vec<u8>> {
        self.inbox.pop_front()
    }

    /// Messages waiting.
    pub fn inbox_len(&self) -> usize {
        self.inbox.len()
    }

    /// Waits for the next message (the peer runs by itself).
    pub fn receive(&mut self) -> Result<Vec<u8>, SmbdError> {
        let c = self.c;
        c.wait_for("an MS-SMBD message", || {
            self.poll();
            !self.inbox.is_empty() || self.error.is_some()
        });
        self.inbox
            .pop_front()
            .ok_or_else(|| self.error.clone().unwrap())
    }

    /// The cluster the endpoint lives on.
    pub fn cluster(&self) -> &'c Cluster {
        self.c
    }

    /// Waits until a message is in the inbox (the peer runs by itself).
    pub fn wait_inbox(&mut self) -> Result<(), SmbdError> {
        let c = self.c;
        c.wait_for("an MS-SMBD message", || {
            self.poll();
            !self.inbox.is_empty() || self.error.is_some()
        });
        match (&self.error, self.inbox.is_empty()) {
            (Some(e), true) => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// Waits until every queued fragment is posted and completed.
    pub fn flush_wait(&mut self) -> Result<(), SmbdError> {
        let c = self.c;
        c.wait_for("the queued MS-SMBD fragments", || {
            self.poll();
            (self.outq.is_empty() && self.free_send.len() == SEND_SLOTS) || self.error.is_some()
        });
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    // ------------------------------------------------------------------ RDMA (server side)

    fn wait_ops(&mut self, ids: &[usize], what: &str) -> Result<(), SmbdError> {
        let c = self.c;
        c.wait_for(what, || {
            self.poll();
            ids.iter()
                .all(|i| self.ops_done.iter().any(|(d, _)| d == i))
                || self.error.is_some()
        });
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        for id in ids {
            let at = self.ops_done.iter().position(|(d, _)| d == id).unwrap();
            let (_, st) = self.ops_done.swap_remove(at);
            if st != STATUS_SUCCESS {
                return Err(self.fail(SmbdError::Ndk("an RDMA operation", st)));
            }
        }
        Ok(())
    }

    fn rw(&self) -> &Registered {
        self.rw.as_ref().expect("RDMA transfers are the server's")
    }

    /// Server: NdkRead of every descriptor (an SMB2 WRITE's buffers) into its sink, at most
    /// ORD at once; returns the bytes read, in descriptor order.
    pub fn rdma_read(&mut self, descs: &[BufferDescriptor]) -> Result<Vec<u8>, SmbdError> {
        let total: u64 = descs.iter().map(|d| u64::from(d.length)).sum();
        if total > u64::from(self.cfg.max_read_write_size) {
            return Err(self.fail(SmbdError::Protocol(format!(
                "{total} B above MaxReadWriteSize"
            ))));
        }
        let mut at = 0u64;
        for chunk in descs.chunks(self.cfg.ord.max(1) as usize) {
            let mut ids = Vec::new();
            for d in chunk {
                let id = self.next_op;
                self.next_op += 1;
                let sge = self.rw().sge(at, d.length);
                let st = self.qp.read(tag(OP, id), &[sge], d.offset, d.token, 0);
                if st != STATUS_SUCCESS {
                    return Err(self.fail(SmbdError::Ndk("NdkRead", st)));
                }
                ids.push(id);
                at += u64::from(d.length);
            }
            self.wait_ops(&ids, "the RDMA READs of the client's buffers")?;
        }
        Ok(self.rw().mem.buf.read_vec(0, total as usize))
    }

    /// Server: NdkWrite of `data` into the descriptors' buffers (an SMB2 READ's), in order.
    pub fn rdma_write(&mut self, descs: &[BufferDescriptor], data: &[u8]) -> Result<(), SmbdError> {
        let room: u64 = descs.iter().map(|d| u64::from(d.length)).sum();
        if data.len() as u64 > room || data.len() as u64 > u64::from(self.cfg.max_read_write_size) {
            return Err(self.fail(SmbdError::Protocol(format!(
                "{} B for buffers of {room} B",
                data.len()
            ))));
        }
        self.rw().mem.buf.write(0, data);
        let mut ids = Vec::new();
        let mut at = 0usize;
        for d in descs {
            if at == data.len() {
                break;
            }
            let n = (d.length as usize).min(data.len() - at);
            let id = self.next_op;
            self.next_op += 1;
            // CAST: n ≤ d.length.
            let sge = self.rw().sge(at as u64, n as u32);
            let st = self.qp.write(tag(OP, id), &[sge], d.offset, d.token, 0);
            if st != STATUS_SUCCESS {
                return Err(self.fail(SmbdError::Ndk("NdkWrite", st)));
            }
            ids.push(id);
            at += n;
        }
        self.wait_ops(&ids, "the RDMA WRITEs into the client's buffers")
    }

    // ------------------------------------------------------------------ buffers (client)

    /// A client buffer of `len` bytes: memory, an FRMR initialized for its pages (remote
    /// access), not registered yet.
    pub fn buffer(&mut self, len: usize) -> RdmaBuffer {
        let pages = len.div_ceil(4096);
        let mem = self.c.host(self.host).mem(pages, self.next_buf_va);
        self.next_buf_va += (pages as u64 + 1) * 4096;
        let mr = self
            .pd
            .create_mr(true)
            .expect("NdkCreateMr (fast register)");
        // CAST: pages ≤ FRMRPageCount.
        assert_eq!(
            mr.initialize_fast_register(pages as u32, true),
            STATUS_SUCCESS,
            "NdkInitializeFastRegisterMr"
        );
        RdmaBuffer {
            mem,
            mr,
            len,
            registered: None,
        }
    }

    /// NdkFastRegister of `len` bytes of `buf` for the peer (remote read for an SMB2 WRITE,
    /// remote write for an SMB2 READ); returns the buffer descriptor to send.
    pub fn register(
        &mut self,
        buf: &mut RdmaBuffer,
        len: usize,
        remote_write: bool,
    ) -> Result<BufferDescriptor, SmbdError> {
        assert!(len <= buf.len && buf.registered.is_none());
        let pages: Vec<u64> = (0..len.div_ceil(4096)).map(|i| buf.mem.bus(i)).collect();
        let flags = if remote_write {
            NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_ALLOW_LOCAL_WRITE
        } else {
            NDK_OP_FLAG_ALLOW_REMOTE_READ
        };
        let id = self.next_op;
        self.next_op += 1;
        let st = self
            .qp
            .fast_register(tag(OP, id), &buf.mr, &pages, 0, len, buf.mem.va, flags);
        if st != STATUS_SUCCESS {
            return Err(self.fail(SmbdError::Ndk("NdkFastRegister", st)));
        }
        self.wait_ops(&[id], "NdkFastRegister")?;
        let d = BufferDescriptor {
            offset: buf.mem.va,
            token: buf.mr.remote_token(),
            // CAST: ≤ MaxReadWriteSize.
            length: len as u32,
        };
        buf.registered = Some(d);
        Ok(d)
    }

    /// Whether the peer invalidated `buf`'s registration (ReceiveAndInvalidate named its
    /// token); if so the buffer is free to register again.
    pub fn remotely_invalidated(&mut self, buf: &mut RdmaBuffer) -> bool {
        let Some(d) = buf.registered else {
            return false;
        };
        match self.stats.invalidated.iter().position(|&t| t == d.token) {
            Some(_) => {
                buf.registered = None;
                true
            }
            None => false,
        }
    }

    /// NdkInvalidate of `buf`'s registration (dialect 3.0, where the server does not).
    pub fn invalidate(&mut self, buf: &mut RdmaBuffer) -> Result<(), SmbdError> {
        let id = self.next_op;
        self.next_op += 1;
        let st = self.qp.invalidate(tag(OP, id), &buf.mr, 0);
        if st != STATUS_SUCCESS {
            return Err(self.fail(SmbdError::Ndk("NdkInvalidate", st)));
        }
        self.wait_ops(&[id], "NdkInvalidate")?;
        buf.registered = None;
        Ok(())
    }

    /// Closes a buffer's FRMR.
    pub fn free_buffer(&mut self, buf: RdmaBuffer) {
        assert_eq!(buf.mr.close(), STATUS_SUCCESS, "NdkCloseMr");
    }

    // ------------------------------------------------------------------ teardown

    /// NdkDisconnect against a peer that answers by itself (a real one), then every object
    /// closes; the flushed receives are drained first.
    pub fn close(mut self) {
        if let Some(conn) = self.conn.take() {
            let st = conn.disconnect();
            assert!(
                st == STATUS_SUCCESS || st == STATUS_CONNECTION_INVALID,
                "NdkDisconnect: {st:?}"
            );
            self.drain();
            assert_eq!(conn.close(), STATUS_SUCCESS, "NdkCloseConnector");
        }
        self.close_objects();
    }

    /// Waits until every posted receive and send completed (flushed after a disconnect).
    pub fn drain(&mut self) {
        let c = self.c;
        c.wait_for("the flushed MS-SMBD receives", || {
            self.poll_completions();
            self.receives == 0 && self.free_send.len() == SEND_SLOTS
        });
    }

    /// Closes the QP, CQ, MRs and PD (connector already gone).
    pub fn close_objects(self) {
        self.qp.close();
        self.cq.close();
        self.recv.close();
        self.send_buf.close();
        if let Some(rw) = self.rw {
            rw.close();
        }
        self.pd.close();
    }
}

/// Graceful end of a connection between two simulated endpoints: `a` disconnects, `b`
/// sees the DisconnectEvent and disconnects too, both drain their flushed receives, every
/// object closes.
pub fn shutdown(mut a: Smbd<'_>, mut b: Smbd<'_>) {
    let ca = a.conn.take().expect("a connected endpoint");
    let cb = b.conn.take().expect("a connected endpoint");
    let d = ca.disconnect_raw();
    let c = a.c;
    c.wait_for("the peer's DisconnectEvent", || cb.disconnects.count() == 1);
    assert_eq!(cb.disconnect(), STATUS_SUCCESS);
    assert_eq!(d.wait(), STATUS_SUCCESS);
    a.drain();
    b.drain();
    assert_eq!(ca.close(), STATUS_SUCCESS);
    assert_eq!(cb.close(), STATUS_SUCCESS);
    a.close_objects();
    b.close_objects();
}

/// A connected, negotiated pair on a cluster of two simulated hosts: host 0 the client,
/// host 1 the server listening on port 445, each with its configuration. Returns the
/// listener too (closed by the caller after [`shutdown`]).
pub fn pair<'c>(
    c: &'c Cluster,
    client: SmbdConfig,
    server: SmbdConfig,
) -> Result<(Smbd<'c>, Smbd<'c>, Listener), SmbdError> {
    pair_with(c, client, server, None)
}

/// [`pair`] with the client's negotiate request replaced by `req` (negative cases).
pub fn pair_with<'c>(
    c: &'c Cluster,
    client: SmbdConfig,
    server: SmbdConfig,
    req: Option<NegotiateRequest>,
) -> Result<(Smbd<'c>, Smbd<'c>, Listener), SmbdError> {
    let listener = c.adapter(1).create_listener().expect("NdkCreateListener");
    let at = sa(c.host(1).ip, super::SMBD_PORT);
    assert_eq!(listener.listen(at), STATUS_SUCCESS, "NdkListen on 445");
    // The client's connect pends until the server accepts: interleave as two hosts would.
    let mut cl = Smbd::new(c, 0, Role::Client, client);
    cl.post_all_receives();
    let conn = c.adapter(0).create_connector().expect("NdkCreateConnector");
    let connect = conn.connect_raw(&cl.qp, sa(c.host(0).ip, 0), at, client.ird, client.ord, &[]);
    let (mut sv, accept) = Smbd::accept_start(c, 1, &listener, server);
    assert_eq!(connect.wait(), STATUS_SUCCESS, "NdkConnect");
    assert_eq!(
        conn.complete_connect(),
        STATUS_SUCCESS,
        "NdkCompleteConnect"
    );
    assert_eq!(accept.wait(), STATUS_SUCCESS, "NdkAccept");
    cl.conn = Some(conn);
    let req = req.unwrap_or_else(|| cl.negotiate_request());
    cl.send_negotiate_request(&req);
    let m = sv.wait_negotiate_message("the negotiate request")?;
    let answered = sv.answer_negotiate(&m);
    let m = cl.wait_negotiate_message("the negotiate response")?;
    let applied = cl.apply_negotiate_response(&m);
    match (answered, applied) {
        (Ok(_), Ok(_)) => Ok((cl, sv, listener)),
        (Err(e), _) | (_, Err(e)) => {
            shutdown(cl, sv);
            assert_eq!(listener.close(), STATUS_SUCCESS);
            Err(e)
        }
    }
}
