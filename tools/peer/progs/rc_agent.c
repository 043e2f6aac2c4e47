/*
 * rc_agent: one RC connection of the peer guest that the NDK side drives over the connection
 * itself (tools/peer/progs, docs/PEER.md), for what rping and perftest cannot express: a SEND
 * with invalidate toward Linux (a type-2 memory window is what a Linux process can have
 * invalidated remotely), RDMA into the NDK side's fast-registered MR before and after its
 * invalidation, RNR both ways, messages up to the buffer size, disconnects from either side.
 *
 *   rc_agent -s [-b ADDR] [-p PORT] [options]    listen on ADDR:PORT, serve one connection
 *   rc_agent -c ADDR [-p PORT] [options]         connect to ADDR:PORT
 *
 *   -m serve       (default) take commands from the peer until it says BYE or DISCONNECT
 *   -m rnr-recv    post no receive; with -w FILE post one once FILE exists and check that the
 *                  peer's SEND of -n bytes of pattern -e lands in it; then wait for the
 *                  peer's disconnect
 *   -m rnr-send    SEND -n bytes of pattern -e at once; the send must end with work completion
 *                  status -x (default 0, success); then disconnect
 *   -z BYTES       data buffer, and each receive buffer (default 1 MiB)
 *   -r N           this side's own RNR retry count (the QP is moved through INIT, RTR and RTS
 *                  here, from rdma_init_qp_attr, with rnr_retry N); default: what the peer's
 *                  CM message asked (rdma_cm does the transitions)
 *   -R N           the RNR retry count this side's CM asks the peer to use (REQ/REP RNR Retry
 *                  Count; default 7, retry forever, as rping asks)
 *   -I N -O N      responder resources and initiator depth offered (default 4 and 4)
 *   -t SECONDS     bound on every wait (default 60)
 *
 * Commands and replies are 64-byte SENDs, fields big-endian (struct msg). At the start the
 * agent SENDs HELLO {its buffer's address, rkey and size}; the peer must have a receive posted
 * by then. Each command gets one reply with the same op; status 0 is success, ST_* a check
 * that failed here (the agent then exits 1 at the end). An RDMA of the agent's own that ends
 * in error breaks the QP, so no reply follows: the agent prints the status and exits 0 if the
 * command's `expect` named it, else 1.
 *
 * Every data byte is pattern(seed, j), the same function as the NDK side's
 * (tests/common/interop/agent.rs): no period, so a misplaced packet shows.
 *
 * Output: "rc_agent: listening" once rdma_listen returned, "rc_agent: connected", one line
 * per command, "rc_agent: done ..." at a clean end, "rc_agent: FAILED ..." on any failure.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

enum {
	OP_HELLO = 1,       /* agent -> peer: addr, rkey, len of the agent's buffer */
	OP_EXPECT_SEND = 2, /* the next message is a SEND of len bytes of pattern(seed);
			       flags & 1: with invalidate of rkey */
	OP_SEND_ME = 3,     /* SEND len bytes of pattern(seed), then reply; flags & 1: with
			       invalidate of rkey */
	OP_CHECK = 4,       /* buffer[offset..+len] holds pattern(seed) */
	OP_FILL = 5,        /* fill buffer[offset..+len] with pattern(seed) */
	OP_WRITE = 6,       /* RDMA WRITE pattern(seed) of len bytes to addr/rkey */
	OP_READ = 7,        /* RDMA READ len bytes at addr/rkey into buffer[offset], check */
	OP_BIND_MW = 8,     /* bind a type-2 MW over buffer[offset..+len], remote read+write;
			       the reply's addr/rkey name it */
	OP_DISCONNECT = 9,  /* reply, then rdma_disconnect */
	OP_BYE = 10,        /* reply, then wait for the peer's disconnect */
	OP_EXPECT_ERROR = 11, /* reply; the peer's next request breaks this QP (a remote
				 access error here): its receives are then flushed */
	OP_READ_MANY = 12,  /* post `value` RDMA READs at once (at most MAX_READS), READ i of
			       len bytes at addr + i * len into buffer[i * len], each checked
			       against pattern(seed + i) */
};

#define MAX_READS 8

enum {
	ST_MISMATCH = 0x100, /* value: first byte that differs */
	ST_LENGTH = 0x101,   /* value: the length that arrived */
	ST_OPCODE = 0x102,   /* value: wc opcode << 16 | wc flags */
	ST_INVALIDATE = 0x103, /* value: the rkey the completion reported (0: none) */
	ST_UNEXPECTED = 0x104, /* an expected failure did not happen */
	ST_BAD = 0x105,      /* malformed command */
	ST_VERBS = 0x106,    /* a verbs call failed; value: errno */
};

/* rxe writes the kernel's IB_WC_WITH_INVALIDATE (1 << 2, include/rdma/ib_verbs.h) into the
 * user CQE it shares with libibverbs, where bit 2 reads as IBV_WC_IP_CSUM_OK and
 * IBV_WC_WITH_INV is 1 << 3 (Linux 6.1 rxe_resp.c do_complete, rdma-core 44): a SEND with
 * invalidate arrives with bit 2 set and the rkey in invalidated_rkey. Either bit counts. */
#define RXE_WC_WITH_INVALIDATE (1u << 2)
#define WC_WITH_INV (IBV_WC_WITH_INV | RXE_WC_WITH_INVALIDATE)

#define MAGIC 0x52434147u /* "RCAG" */
#define MSG 64
#define NRECV 4

struct msg {
	uint32_t magic, op;
	uint64_t addr;
	uint32_t rkey, len, seed, status, value, offset, expect, flags;
	uint8_t pad[MSG - 48];
};

_Static_assert(sizeof(struct msg) == MSG, "msg is 64 bytes");

static unsigned timeout_s = 60;
static int failed;

static void die(const char *what, int err)
{
	printf("rc_agent: FAILED %s: %s\n", what, strerror(err));
	exit(1);
}

static uint8_t pattern(uint32_t seed, uint32_t j)
{
	uint32_t x = j * 0x9E3779B1u + seed * 0x85EBCA77u + 1u;

	x ^= x >> 15;
	x *= 0x2C1B3C6Du;
	x ^= x >> 13;
	return (uint8_t)x;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct agent {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id, *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint8_t *buf, *rx, *tx;
	struct ibv_mr *buf_mr, *rx_mr, *tx_mr;
	struct ibv_mw *mw;
	uint32_t mw_rkey;
	size_t size;
	int rnr_retry; /* -1: rdma_cm's */
	int posted;    /* receives outstanding */
	unsigned next_slot;
	int disconnected;
	int initiated; /* this side called rdma_disconnect */
	int prepost; /* receives posted before the connection is up */
	/* The CONNECT_REQUEST's offer from this side's view: the most it may use as IRD (the
	 * REQ's initiator depth) and as ORD (the REQ's responder resources). */
	int req_ird, req_ord;
};

/* Waits for the CM event `want` (also returns on DISCONNECTED when `want` is something else,
 * with 0, having noted it). */
static int cm_wait(struct agent *a, enum rdma_cm_event_type want, struct rdma_cm_id **idp)
{
	for (;;) {
		struct pollfd p = { .fd = a->ch->fd, .events = POLLIN };
		int n = poll(&p, 1, (int)timeout_s * 1000);

		if (n == 0) {
			printf("rc_agent: FAILED no %s in %u s\n", rdma_event_str(want), timeout_s);
			exit(1);
		}
		if (n < 0)
			die("poll", errno);
		struct rdma_cm_event *ev;

		if (rdma_get_cm_event(a->ch, &ev))
			die("rdma_get_cm_event", errno);
		enum rdma_cm_event_type got = ev->event;
		int status = ev->status;

		if (idp)
			*idp = ev->id;
		if (got == RDMA_CM_EVENT_CONNECT_REQUEST) {
			a->req_ird = ev->param.conn.responder_resources;
			a->req_ord = ev->param.conn.initiator_depth;
		}
		rdma_ack_cm_event(ev);
		if (got == want)
			return 1;
		if (got == RDMA_CM_EVENT_DISCONNECTED) {
			a->disconnected = 1;
			return 0;
		}
		if (got == RDMA_CM_EVENT_TIMEWAIT_EXIT)
			continue;
		printf("rc_agent: FAILED waiting for %s: got %s (status %d)\n", rdma_event_str(want),
		       rdma_event_str(got), status);
		exit(1);
	}
}

/* A completion on `cq`, bounded by the timeout. Returns 1 with *wc, or 0 if the peer
 * disconnected meanwhile (when `cm_too`), noted in a->disconnected. */
static int wc_wait(struct agent *a, struct ibv_cq *cq, struct ibv_wc *wc, int cm_too,
		   const char *what)
{
	double deadline = now_s() + timeout_s;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			die("ibv_poll_cq", EIO);
		if (n == 1)
			return 1;
		if (ibv_req_notify_cq(cq, 0))
			die("ibv_req_notify_cq", errno);
		n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 1;
		double left = deadline - now_s();

		if (left <= 0) {
			printf("rc_agent: FAILED no completion for %s in %u s\n", what, timeout_s);
			exit(1);
		}
		struct pollfd p[2] = { { .fd = a->cc->fd, .events = POLLIN },
				       { .fd = a->ch->fd, .events = POLLIN } };
		if (poll(p, cm_too ? 2 : 1, (int)(left * 1000) + 1) < 0)
			die("poll", errno);
		if (p[0].revents & POLLIN) {
			struct ibv_cq *ev_cq;
			void *ctx;

			if (ibv_get_cq_event(a->cc, &ev_cq, &ctx))
				die("ibv_get_cq_event", errno);
			ibv_ack_cq_events(ev_cq, 1);
		}
		if (cm_too && (p[1].revents & POLLIN)) {
			struct rdma_cm_event *ev;

			if (rdma_get_cm_event(a->ch, &ev))
				die("rdma_get_cm_event", errno);
			int got = ev->event;

			rdma_ack_cm_event(ev);
			if (got == RDMA_CM_EVENT_DISCONNECTED) {
				a->disconnected = 1;
				return 0;
			}
		}
	}
}

static void post_recv(struct agent *a)
{
	unsigned slot = (a->next_slot + (unsigned)a->posted) % NRECV;
	struct ibv_sge sge = { .addr = (uintptr_t)(a->rx + (size_t)slot * a->size),
			       .length = (uint32_t)a->size,
			       .lkey = a->rx_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(a->qp, &wr, &bad))
		die("ibv_post_recv", errno);
	a->posted++;
}

static const char *wc_str(int s)
{
	return ibv_wc_status_str((enum ibv_wc_status)s);
}

/* Posts one work request on the send queue and waits for its completion; returns its status. */
static int post_send_wait(struct agent *a, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(a->qp, wr, &bad))
		die(what, errno);
	wc_wait(a, a->scq, &wc, 0, what);
	return (int)wc.status;
}

static int send_bytes(struct agent *a, const void *p, size_t len, uint32_t inv_rkey, int inv)
{
	struct ibv_sge sge = { .addr = (uintptr_t)a->tx, .length = (uint32_t)len,
			       .lkey = a->tx_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = len ? 1 : 0,
				  .opcode = inv ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND };

	if (p != a->tx)
		memcpy(a->tx, p, len);
	if (inv)
		wr.invalidate_rkey = inv_rkey;
	return post_send_wait(a, &wr, "send");
}

static void reply(struct agent *a, const struct msg *cmd, uint32_t status, uint32_t value,
		  uint64_t addr, uint32_t rkey)
{
	struct msg m = { 0 };

	m.magic = htobe32(MAGIC);
	m.op = htobe32(cmd->op);
	m.addr = htobe64(addr);
	m.rkey = htobe32(rkey);
	m.len = htobe32(cmd->len);
	m.seed = htobe32(cmd->seed);
	m.status = htobe32(status);
	m.value = htobe32(value);
	if (status)
		failed = 1;
	int st = send_bytes(a, &m, sizeof(m), 0, 0);

	if (st) {
		printf("rc_agent: FAILED reply to op %u: %s (%d)\n", cmd->op, wc_str(st), st);
		exit(1);
	}
}

static uint32_t check_pattern(const uint8_t *p, uint32_t seed, uint32_t len)
{
	for (uint32_t j = 0; j < len; j++)
		if (p[j] != pattern(seed, j))
			return j;
	return UINT32_MAX;
}

static void fill_pattern(uint8_t *p, uint32_t seed, uint32_t len)
{
	for (uint32_t j = 0; j < len; j++)
		p[j] = pattern(seed, j);
}

/* Waits for the next receive; returns 0 if the peer disconnected first (or its receives were
 * flushed: the QP is in error). */
static int next_recv(struct agent *a, struct ibv_wc *wc, const char *what)
{
	if (!wc_wait(a, a->rcq, wc, 1, what))
		return 0;
	a->posted--;
	a->next_slot = (a->next_slot + 1) % NRECV;
	if (wc->status == IBV_WC_WR_FLUSH_ERR)
		return 0;
	if (wc->status != IBV_WC_SUCCESS) {
		printf("rc_agent: FAILED %s: receive status %s (%d)\n", what, wc_str(wc->status),
		       wc->status);
		exit(1);
	}
	return 1;
}

/* After the QP went to error or the peer disconnected: every receive posted must come back
 * flushed. Returns how many did. */
static int drain_flushed(struct agent *a)
{
	int flushed = 0;
	struct ibv_wc wc;

	while (a->posted > 0) {
		wc_wait(a, a->rcq, &wc, 0, "a flushed receive");
		a->posted--;
		if (wc.status != IBV_WC_WR_FLUSH_ERR) {
			printf("rc_agent: FAILED a receive ended %s (%d), not flushed\n",
			       wc_str(wc.status), wc.status);
			exit(1);
		}
		flushed++;
	}
	return flushed;
}

static void disconnect(struct agent *a)
{
	a->initiated = 1;
	if (rdma_disconnect(a->id))
		die("rdma_disconnect", errno);
}

/* The connection's end. A peer's DREQ is answered as rdma_cm's users do, with
 * rdma_disconnect: librdmacm then moves a QP it manages to error (flushing the receives) and
 * the CM sends the DREP; one of our own QPs (-r) is moved here. */
static void wait_disconnect(struct agent *a)
{
	if (!a->disconnected)
		cm_wait(a, RDMA_CM_EVENT_DISCONNECTED, NULL);
	a->disconnected = 1;
	if (!a->initiated)
		disconnect(a);
	if (a->rnr_retry >= 0) {
		struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

		if (ibv_modify_qp(a->qp, &attr, IBV_QP_STATE))
			die("ibv_modify_qp(ERR)", errno);
	}
}

static void setup_verbs(struct agent *a, struct rdma_cm_id *id)
{
	a->pd = ibv_alloc_pd(id->verbs);
	a->cc = ibv_create_comp_channel(id->verbs);
	if (!a->pd || !a->cc)
		die("ibv_alloc_pd/ibv_create_comp_channel", errno);
	a->scq = ibv_create_cq(id->verbs, 16, NULL, a->cc, 0);
	a->rcq = ibv_create_cq(id->verbs, 16, NULL, a->cc, 0);
	if (!a->scq || !a->rcq)
		die("ibv_create_cq", errno);
	a->buf = calloc(1, a->size);
	a->rx = calloc(NRECV, a->size);
	a->tx = calloc(1, a->size);
	if (!a->buf || !a->rx || !a->tx)
		die("calloc", ENOMEM);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

	a->buf_mr = ibv_reg_mr(a->pd, a->buf, a->size, rw | IBV_ACCESS_MW_BIND);
	a->rx_mr = ibv_reg_mr(a->pd, a->rx, NRECV * a->size, IBV_ACCESS_LOCAL_WRITE);
	a->tx_mr = ibv_reg_mr(a->pd, a->tx, a->size, 0);
	if (!a->buf_mr || !a->rx_mr || !a->tx_mr)
		die("ibv_reg_mr", errno);
	struct ibv_qp_init_attr attr = {
		.send_cq = a->scq,
		.recv_cq = a->rcq,
		.cap = { .max_send_wr = MAX_READS, .max_recv_wr = NRECV, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	if (a->rnr_retry < 0) {
		if (rdma_create_qp(id, a->pd, &attr))
			die("rdma_create_qp", errno);
		a->qp = id->qp;
	} else {
		a->qp = ibv_create_qp(a->pd, &attr);
		if (!a->qp)
			die("ibv_create_qp", errno);
	}
}

/* -r: the QP's transitions done here from rdma_cm's attributes, with our own RNR retry. */
static void own_transition(struct agent *a, enum ibv_qp_state state)
{
	struct ibv_qp_attr attr = { .qp_state = state };
	int mask;

	if (rdma_init_qp_attr(a->id, &attr, &mask))
		die("rdma_init_qp_attr", errno);
	if (state == IBV_QPS_RTS) {
		attr.rnr_retry = (uint8_t)a->rnr_retry;
		mask |= IBV_QP_RNR_RETRY;
	}
	if (ibv_modify_qp(a->qp, &attr, mask))
		die("ibv_modify_qp", errno);
}

static void connect_or_accept(struct agent *a, int server, const char *addr, const char *port,
			      int ird, int ord, int peer_rnr_retry)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;

	if (server)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(addr, port, &hints, &res))
		die("rdma_getaddrinfo", errno);
	a->ch = rdma_create_event_channel();
	if (!a->ch)
		die("rdma_create_event_channel", errno);
	struct rdma_conn_param param = { .responder_resources = (uint8_t)ird,
					 .initiator_depth = (uint8_t)ord,
					 .retry_count = 7,
					 .rnr_retry_count = (uint8_t)peer_rnr_retry };
	if (server) {
		if (rdma_create_id(a->ch, &a->listen_id, NULL, RDMA_PS_TCP))
			die("rdma_create_id", errno);
		if (rdma_bind_addr(a->listen_id, res->ai_src_addr))
			die("rdma_bind_addr", errno);
		if (rdma_listen(a->listen_id, 1))
			die("rdma_listen", errno);
		printf("rc_agent: listening\n");
		cm_wait(a, RDMA_CM_EVENT_CONNECT_REQUEST, &a->id);
		/* As a passive side should (rdma_cm leaves it to the application): no more
		 * responder resources than the peer's initiator depth, no deeper initiator than
		 * its responder resources. */
		printf("rc_agent: REQ allows ird %d ord %d\n", a->req_ird, a->req_ord);
		if (a->req_ird < ird)
			param.responder_resources = (uint8_t)a->req_ird;
		if (a->req_ord < ord)
			param.initiator_depth = (uint8_t)a->req_ord;
		setup_verbs(a, a->id);
		/* Receives only from INIT on (a QP of our own starts in RESET, where rxe
		 * refuses them). */
		if (a->rnr_retry >= 0)
			own_transition(a, IBV_QPS_INIT);
		for (int i = 0; i < a->prepost; i++)
			post_recv(a);
		if (a->rnr_retry >= 0) {
			own_transition(a, IBV_QPS_RTR);
			own_transition(a, IBV_QPS_RTS);
			param.qp_num = a->qp->qp_num;
		}
		if (rdma_accept(a->id, &param))
			die("rdma_accept", errno);
		cm_wait(a, RDMA_CM_EVENT_ESTABLISHED, NULL);
	} else {
		if (rdma_create_id(a->ch, &a->id, NULL, RDMA_PS_TCP))
			die("rdma_create_id", errno);
		if (rdma_resolve_addr(a->id, res->ai_src_addr, res->ai_dst_addr, 5000))
			die("rdma_resolve_addr", errno);
		cm_wait(a, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
		if (rdma_resolve_route(a->id, 5000))
			die("rdma_resolve_route", errno);
		cm_wait(a, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
		setup_verbs(a, a->id);
		if (a->rnr_retry >= 0) {
			own_transition(a, IBV_QPS_INIT);
			param.qp_num = a->qp->qp_num;
		}
		for (int i = 0; i < a->prepost; i++)
			post_recv(a);
		if (rdma_connect(a->id, &param))
			die("rdma_connect", errno);
		if (a->rnr_retry >= 0) {
			cm_wait(a, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL);
			own_transition(a, IBV_QPS_RTR);
			own_transition(a, IBV_QPS_RTS);
			if (rdma_establish(a->id))
				die("rdma_establish", errno);
		} else {
			cm_wait(a, RDMA_CM_EVENT_ESTABLISHED, NULL);
		}
	}
	rdma_freeaddrinfo(res);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;

	if (ibv_query_qp(a->qp, &qa, IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				 IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_QP_RD_ATOMIC |
				 IBV_QP_MAX_DEST_RD_ATOMIC, &qi))
		die("ibv_query_qp", errno);
	printf("rc_agent: connected: qpn %u path_mtu %d timeout %u retry_cnt %u rnr_retry %u "
	       "min_rnr_timer %u ord %u ird %u\n",
	       a->qp->qp_num, 128 << qa.path_mtu, qa.timeout, qa.retry_cnt, qa.rnr_retry,
	       qa.min_rnr_timer, qa.max_rd_atomic, qa.max_dest_rd_atomic);
}

static void teardown(struct agent *a)
{
	if (a->mw)
		ibv_dealloc_mw(a->mw);
	if (a->rnr_retry < 0)
		rdma_destroy_qp(a->id);
	else
		ibv_destroy_qp(a->qp);
	ibv_dereg_mr(a->buf_mr);
	ibv_dereg_mr(a->rx_mr);
	ibv_dereg_mr(a->tx_mr);
	ibv_destroy_cq(a->scq);
	ibv_destroy_cq(a->rcq);
	ibv_destroy_comp_channel(a->cc);
	ibv_dealloc_pd(a->pd);
	rdma_destroy_id(a->id);
	if (a->listen_id)
		rdma_destroy_id(a->listen_id);
	rdma_destroy_event_channel(a->ch);
	free(a->buf);
	free(a->rx);
	free(a->tx);
}

/* An RDMA of ours ended in `st`; `expect` is what the command said it should. No reply can
 * follow an error (the QP is broken): the agent ends here. */
static void rdma_result(struct agent *a, const char *what, int st, uint32_t expect)
{
	if (st == (int)expect && st == IBV_WC_SUCCESS)
		return;
	if (st == (int)expect) {
		printf("rc_agent: %s failed as expected: %s (%d)\n", what, wc_str(st), st);
		printf("rc_agent: %d receives flushed\n", drain_flushed(a));
		wait_disconnect(a);
		printf("rc_agent: done (disconnected by the peer)\n");
		teardown(a);
		exit(0);
	}
	printf("rc_agent: FAILED %s: status %s (%d), expected %s (%u)\n", what, wc_str(st), st,
	       wc_str((int)expect), expect);
	exit(1);
}

static void serve(struct agent *a)
{
	struct msg hello = { 0 };
	struct ibv_wc wc;

	hello.magic = htobe32(MAGIC);
	hello.op = htobe32(OP_HELLO);
	hello.addr = htobe64((uintptr_t)a->buf);
	hello.rkey = htobe32(a->buf_mr->rkey);
	hello.len = htobe32((uint32_t)a->size);
	if (send_bytes(a, &hello, sizeof(hello), 0, 0))
		die("HELLO", EIO);
	unsigned commands = 0;
	int expect_error = 0;

	for (;;) {
		if (!next_recv(a, &wc, "the next command")) {
			/* A flushed receive was consumed; a disconnect consumed none. */
			int flushed = a->disconnected ? 0 : 1;

			if (a->disconnected) {
				printf("rc_agent: FAILED the peer disconnected without BYE after "
				       "%u commands\n", commands);
				exit(1);
			}
			if (!expect_error) {
				printf("rc_agent: FAILED receives flushed after %u commands\n",
				       commands);
				exit(1);
			}
			flushed += drain_flushed(a);
			printf("rc_agent: the peer's request broke the QP as announced: %d "
			       "receives flushed\n", flushed);
			wait_disconnect(a);
			printf("rc_agent: done (disconnected by the peer)\n");
			return;
		}
		unsigned slot = (unsigned)wc.wr_id;
		struct msg m;

		memcpy(&m, a->rx + (size_t)slot * a->size, sizeof(m));
		if (wc.byte_len != MSG || be32toh(m.magic) != MAGIC) {
			printf("rc_agent: FAILED a command of %u bytes, magic %#x\n", wc.byte_len,
			       be32toh(m.magic));
			exit(1);
		}
		post_recv(a);
		commands++;
		m.op = be32toh(m.op);
		m.addr = be64toh(m.addr);
		m.rkey = be32toh(m.rkey);
		m.len = be32toh(m.len);
		m.seed = be32toh(m.seed);
		m.offset = be32toh(m.offset);
		m.expect = be32toh(m.expect);
		m.flags = be32toh(m.flags);
		m.value = be32toh(m.value);
		int in_buf = (uint64_t)m.offset + m.len <= a->size;

		switch (m.op) {
		case OP_EXPECT_SEND: {
			if (m.len > a->size) {
				reply(a, &m, ST_BAD, 0, 0, 0);
				break;
			}
			if (!next_recv(a, &wc, "the announced SEND")) {
				printf("rc_agent: FAILED no SEND after EXPECT_SEND\n");
				exit(1);
			}
			const uint8_t *p = a->rx + (size_t)wc.wr_id * a->size;
			int inv = (wc.wc_flags & WC_WITH_INV) != 0;
			uint32_t got_rkey = inv ? wc.invalidated_rkey : 0;
			uint32_t bad;

			post_recv(a);
			if (wc.opcode != IBV_WC_RECV || inv != (int)(m.flags & 1)) {
				printf("rc_agent: FAILED SEND: opcode %d flags %#x\n", wc.opcode,
				       wc.wc_flags);
				reply(a, &m, ST_OPCODE, (uint32_t)wc.opcode << 16 | wc.wc_flags, 0, 0);
			} else if (inv && got_rkey != m.rkey) {
				printf("rc_agent: FAILED SEND with invalidate of %#x, expected %#x\n",
				       got_rkey, m.rkey);
				reply(a, &m, ST_INVALIDATE, got_rkey, 0, 0);
			} else if (wc.byte_len != m.len) {
				printf("rc_agent: FAILED SEND of %u bytes, expected %u\n",
				       wc.byte_len, m.len);
				reply(a, &m, ST_LENGTH, wc.byte_len, 0, 0);
			} else if ((bad = check_pattern(p, m.seed, m.len)) != UINT32_MAX) {
				printf("rc_agent: FAILED SEND byte %u is %#x, expected %#x\n", bad,
				       p[bad], pattern(m.seed, bad));
				reply(a, &m, ST_MISMATCH, bad, 0, 0);
			} else {
				if (inv)
					printf("rc_agent: SEND with invalidate of rkey %#x, %u bytes "
					       "verified (wc_flags %#x)\n", got_rkey, m.len,
					       wc.wc_flags);
				else
					printf("rc_agent: SEND of %u bytes verified\n", m.len);
				reply(a, &m, 0, wc.byte_len, 0, got_rkey);
			}
			break;
		}
		case OP_SEND_ME: {
			if (m.len > a->size) {
				reply(a, &m, ST_BAD, 0, 0, 0);
				break;
			}
			fill_pattern(a->tx, m.seed, m.len);
			int st = send_bytes(a, a->tx, m.len, m.rkey, (int)(m.flags & 1));

			rdma_result(a, "SEND", st, m.expect);
			if (m.expect) {
				reply(a, &m, ST_UNEXPECTED, 0, 0, 0);
				break;
			}
			printf("rc_agent: sent %u bytes%s\n", m.len,
			       (m.flags & 1) ? " with invalidate" : "");
			reply(a, &m, 0, m.len, 0, 0);
			break;
		}
		case OP_CHECK: {
			uint32_t bad;

			if (!in_buf) {
				reply(a, &m, ST_BAD, 0, 0, 0);
			} else if ((bad = check_pattern(a->buf + m.offset, m.seed, m.len)) !=
				   UINT32_MAX) {
				printf("rc_agent: FAILED buffer byte %u is %#x, expected %#x\n",
				       m.offset + bad, a->buf[m.offset + bad], pattern(m.seed, bad));
				reply(a, &m, ST_MISMATCH, bad, 0, 0);
			} else {
				printf("rc_agent: %u bytes at %u verified\n", m.len, m.offset);
				reply(a, &m, 0, 0, 0, 0);
			}
			break;
		}
		case OP_FILL:
			if (!in_buf) {
				reply(a, &m, ST_BAD, 0, 0, 0);
				break;
			}
			fill_pattern(a->buf + m.offset, m.seed, m.len);
			reply(a, &m, 0, 0, 0, 0);
			break;
		case OP_WRITE:
		case OP_READ: {
			if (!in_buf) {
				reply(a, &m, ST_BAD, 0, 0, 0);
				break;
			}
			int write = m.op == OP_WRITE;
			struct ibv_sge sge = { .addr = (uintptr_t)(a->buf + m.offset),
					       .length = m.len, .lkey = a->buf_mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = 2, .sg_list = &sge, .num_sge = 1,
				.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
				.wr.rdma = { .remote_addr = m.addr, .rkey = m.rkey },
			};
			if (write)
				fill_pattern(a->buf + m.offset, m.seed, m.len);
			else
				memset(a->buf + m.offset, 0, m.len);
			int st = post_send_wait(a, &wr, write ? "RDMA WRITE" : "RDMA READ");

			rdma_result(a, write ? "RDMA WRITE" : "RDMA READ", st, m.expect);
			if (m.expect) {
				printf("rc_agent: FAILED %s of rkey %#x succeeded\n",
				       write ? "RDMA WRITE" : "RDMA READ", m.rkey);
				reply(a, &m, ST_UNEXPECTED, 0, 0, 0);
				break;
			}
			uint32_t bad = write ? UINT32_MAX
					     : check_pattern(a->buf + m.offset, m.seed, m.len);
			if (bad != UINT32_MAX) {
				printf("rc_agent: FAILED RDMA READ byte %u is %#x, expected %#x\n",
				       bad, a->buf[m.offset + bad], pattern(m.seed, bad));
				reply(a, &m, ST_MISMATCH, bad, 0, 0);
				break;
			}
			printf("rc_agent: %s of %u bytes at %#llx rkey %#x%s\n",
			       write ? "RDMA WRITE" : "RDMA READ", m.len,
			       (unsigned long long)m.addr, m.rkey, write ? "" : ", verified");
			reply(a, &m, 0, m.len, 0, 0);
			break;
		}
		case OP_BIND_MW: {
			if (!in_buf) {
				reply(a, &m, ST_BAD, 0, 0, 0);
				break;
			}
			if (!a->mw) {
				a->mw = ibv_alloc_mw(a->pd, IBV_MW_TYPE_2);
				if (!a->mw) {
					printf("rc_agent: FAILED ibv_alloc_mw: %s\n", strerror(errno));
					reply(a, &m, ST_VERBS, (uint32_t)errno, 0, 0);
					break;
				}
				a->mw_rkey = a->mw->rkey;
			}
			uint32_t rkey = ibv_inc_rkey(a->mw_rkey);
			struct ibv_send_wr wr = { .wr_id = 3, .opcode = IBV_WR_BIND_MW };

			wr.bind_mw.mw = a->mw;
			wr.bind_mw.rkey = rkey;
			wr.bind_mw.bind_info.mr = a->buf_mr;
			wr.bind_mw.bind_info.addr = (uintptr_t)(a->buf + m.offset);
			wr.bind_mw.bind_info.length = m.len;
			wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ |
							       IBV_ACCESS_REMOTE_WRITE;
			int st = post_send_wait(a, &wr, "BIND_MW");

			if (st) {
				printf("rc_agent: FAILED BIND_MW: %s (%d)\n", wc_str(st), st);
				exit(1);
			}
			a->mw_rkey = rkey;
			printf("rc_agent: type 2 MW bound: rkey %#x over %u bytes at %u\n", rkey,
			       m.len, m.offset);
			reply(a, &m, 0, m.len, (uintptr_t)(a->buf + m.offset), rkey);
			break;
		}
		case OP_READ_MANY: {
			uint32_t n = m.value;

			if (n == 0 || n > MAX_READS || (uint64_t)n * m.len > a->size) {
				reply(a, &m, ST_BAD, n, 0, 0);
				break;
			}
			struct ibv_sge sge[MAX_READS];
			struct ibv_send_wr wr[MAX_READS], *bad;

			memset(a->buf, 0, (size_t)n * m.len);
			memset(wr, 0, sizeof(wr));
			for (uint32_t i = 0; i < n; i++) {
				sge[i] = (struct ibv_sge){ .addr = (uintptr_t)(a->buf + (size_t)i * m.len),
							   .length = m.len, .lkey = a->buf_mr->lkey };
				wr[i].wr_id = 100 + i;
				wr[i].sg_list = &sge[i];
				wr[i].num_sge = 1;
				wr[i].opcode = IBV_WR_RDMA_READ;
				wr[i].send_flags = IBV_SEND_SIGNALED;
				wr[i].wr.rdma.remote_addr = m.addr + (uint64_t)i * m.len;
				wr[i].wr.rdma.rkey = m.rkey;
				wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
			}
			if (ibv_post_send(a->qp, wr, &bad))
				die("ibv_post_send(READs)", errno);
			uint32_t bad_at = UINT32_MAX, bad_read = 0;

			for (uint32_t i = 0; i < n; i++) {
				struct ibv_wc wc;

				wc_wait(a, a->scq, &wc, 0, "the READs");
				rdma_result(a, "RDMA READ", (int)wc.status, 0);
				if (wc.wr_id != 100 + i) {
					printf("rc_agent: FAILED READ %u completed as %llu\n", i,
					       (unsigned long long)wc.wr_id);
					exit(1);
				}
			}
			for (uint32_t i = 0; i < n && bad_at == UINT32_MAX; i++) {
				bad_at = check_pattern(a->buf + (size_t)i * m.len, m.seed + i, m.len);
				bad_read = i;
			}
			if (bad_at != UINT32_MAX) {
				printf("rc_agent: FAILED READ %u byte %u\n", bad_read, bad_at);
				reply(a, &m, ST_MISMATCH, bad_read << 24 | bad_at, 0, 0);
				break;
			}
			printf("rc_agent: %u RDMA READs of %u bytes posted at once, verified\n", n,
			       m.len);
			reply(a, &m, 0, n, 0, 0);
			break;
		}
		case OP_EXPECT_ERROR:
			expect_error = 1;
			reply(a, &m, 0, 0, 0, 0);
			break;
		case OP_DISCONNECT:
		case OP_BYE: {
			reply(a, &m, 0, 0, 0, 0);
			if (m.op == OP_DISCONNECT)
				disconnect(a);
			wait_disconnect(a);
			int flushed = drain_flushed(a);

			printf("rc_agent: done after %u commands (%s), %d receives flushed\n",
			       commands, m.op == OP_BYE ? "disconnected by the peer" : "disconnected",
			       flushed);
			return;
		}
		default:
			printf("rc_agent: FAILED unknown op %u\n", m.op);
			reply(a, &m, ST_BAD, m.op, 0, 0);
			break;
		}
	}
}

/* -m rnr-recv: nothing posted until FILE exists (never without -w). */
static void rnr_recv(struct agent *a, const char *file, uint32_t len, uint32_t seed)
{
	printf("rc_agent: connected, no receive posted\n");
	if (!file) {
		wait_disconnect(a);
		printf("rc_agent: done (disconnected by the peer; no receive was ever posted)\n");
		return;
	}
	double deadline = now_s() + timeout_s;
	struct stat st;

	while (stat(file, &st) != 0) {
		if (now_s() > deadline) {
			printf("rc_agent: FAILED %s did not appear in %u s\n", file, timeout_s);
			exit(1);
		}
		usleep(5000);
	}
	post_recv(a);
	printf("rc_agent: receive posted\n");
	struct ibv_wc wc;

	if (!next_recv(a, &wc, "the SEND after RNR")) {
		printf("rc_agent: FAILED the peer disconnected before its SEND arrived\n");
		exit(1);
	}
	const uint8_t *p = a->rx + (size_t)wc.wr_id * a->size;
	uint32_t bad;

	if (wc.byte_len != len) {
		printf("rc_agent: FAILED SEND of %u bytes, expected %u\n", wc.byte_len, len);
		exit(1);
	}
	if ((bad = check_pattern(p, seed, len)) != UINT32_MAX) {
		printf("rc_agent: FAILED SEND byte %u is %#x, expected %#x\n", bad, p[bad],
		       pattern(seed, bad));
		exit(1);
	}
	printf("rc_agent: SEND of %u bytes verified after RNR\n", len);
	wait_disconnect(a);
	printf("rc_agent: done (disconnected by the peer)\n");
}

/* -m rnr-send: SEND at once; its completion status must be `expect`. */
static void rnr_send(struct agent *a, uint32_t len, uint32_t seed, int expect)
{
	fill_pattern(a->tx, seed, len);
	double t0 = now_s();
	int st = send_bytes(a, a->tx, len, 0, 0);
	double dt = now_s() - t0;

	printf("rc_agent: send of %u bytes ended %s (%d) after %.3f s\n", len, wc_str(st), st, dt);
	if (st != expect) {
		printf("rc_agent: FAILED expected %s (%d)\n", wc_str(expect), expect);
		exit(1);
	}
	disconnect(a);
	wait_disconnect(a);
	printf("rc_agent: done (disconnected)\n");
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7480", *mode = "serve", *file = NULL;
	struct agent a = { .size = 1u << 20, .rnr_retry = -1 };
	uint32_t len = 64, seed = 1;
	int server = -1, opt, ird = 4, ord = 4, expect = 0, peer_rnr_retry = 7;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "sc:b:p:m:z:n:e:w:r:R:x:I:O:t:")) != -1) {
		switch (opt) {
		case 's': server = 1; break;
		case 'c': server = 0; addr = optarg; break;
		case 'b': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'm': mode = optarg; break;
		case 'z': a.size = strtoul(optarg, NULL, 0); break;
		case 'n': len = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'e': seed = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'w': file = optarg; break;
		case 'r': a.rnr_retry = atoi(optarg); break;
		case 'R': peer_rnr_retry = atoi(optarg); break;
		case 'x': expect = atoi(optarg); break;
		case 'I': ird = atoi(optarg); break;
		case 'O': ord = atoi(optarg); break;
		case 't': timeout_s = (unsigned)strtoul(optarg, NULL, 0); break;
		default: server = -1; optind = argc; break;
		}
	}
	int m_serve = !strcmp(mode, "serve"), m_rnr_recv = !strcmp(mode, "rnr-recv"),
	    m_rnr_send = !strcmp(mode, "rnr-send");

	if (server < 0 || a.size < MSG || !(m_serve || m_rnr_recv || m_rnr_send) ||
	    len > a.size || a.rnr_retry > 7 || peer_rnr_retry < 0 || peer_rnr_retry > 7) {
		fprintf(stderr, "usage: rc_agent -s [-b ADDR] | -c ADDR; [-p PORT] "
				"[-m serve|rnr-recv|rnr-send] [-z BYTES] [-n BYTES] [-e SEED] "
				"[-w FILE] [-r N] [-R N] [-x STATUS] [-I N] [-O N] [-t SECONDS]\n");
		return 2;
	}
	a.prepost = m_rnr_recv ? 0 : NRECV;
	connect_or_accept(&a, server, addr, port, ird, ord, peer_rnr_retry);
	if (m_serve)
		serve(&a);
	else if (m_rnr_recv)
		rnr_recv(&a, file, len, seed);
	else
		rnr_send(&a, len, seed, expect);
	teardown(&a);
	if (failed) {
		printf("rc_agent: FAILED (see above)\n");
		return 1;
	}
	return 0;
}
