/*
 * rc_echo: the smallest rdma_cm RC program of the peer guest (tools/peer/progs, docs/PEER.md).
 *
 *   rc_echo -s [-b ADDR] [-p PORT] [-n COUNT] [-z SIZE]   serve one connection: echo COUNT SENDs
 *   rc_echo -c ADDR [-p PORT] [-n COUNT] [-z SIZE]        send COUNT patterned messages, check
 *                                                         each echo byte for byte
 *
 * The server prints "rc_echo: listening" once rdma_listen has returned (a test polls for it
 * before starting the client). Both sides print a closing line and exit 0 on success; any
 * failure prints "rc_echo: FAILED ..." and exits 1. The echo of message i must equal the
 * pattern byte j = (i * 131 + j * 7 + 1) & 0xff.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static void die(const char *what, int err)
{
	printf("rc_echo: FAILED %s: %s\n", what, strerror(err));
	exit(1);
}

static uint8_t pattern(unsigned msg, size_t j)
{
	return (uint8_t)(msg * 131u + j * 7u + 1u);
}

/* Waits for one completion on the send (send != 0) or receive queue and checks its status. */
static void complete(struct rdma_cm_id *id, int send, const char *what)
{
	struct ibv_wc wc;
	int n = send ? rdma_get_send_comp(id, &wc) : rdma_get_recv_comp(id, &wc);

	if (n <= 0)
		die(what, errno);
	if (wc.status != IBV_WC_SUCCESS) {
		printf("rc_echo: FAILED %s: completion status %s (%d)\n", what,
		       ibv_wc_status_str(wc.status), wc.status);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7471";
	unsigned count = 10;
	size_t size = 1024;
	int server = -1, opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "sc:b:p:n:z:")) != -1) {
		switch (opt) {
		case 's':
			server = 1;
			break;
		case 'c':
			server = 0;
			addr = optarg;
			break;
		case 'b':
			addr = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 'n':
			count = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'z':
			size = strtoul(optarg, NULL, 0);
			break;
		default:
			server = -1;
			optind = argc;
			break;
		}
	}
	if (server < 0 || size == 0 || count == 0) {
		fprintf(stderr, "usage: rc_echo -s [-b ADDR] | -c ADDR; [-p PORT] [-n COUNT] [-z SIZE]\n");
		return 2;
	}

	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	if (server)
		hints.ai_flags = RAI_PASSIVE;
	int err = rdma_getaddrinfo(addr, port, &hints, &res);
	if (err)
		die("rdma_getaddrinfo", errno);

	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	struct rdma_cm_id *listen_id = NULL, *id;
	if (server) {
		if (rdma_create_ep(&listen_id, res, NULL, &attr))
			die("rdma_create_ep", errno);
		if (rdma_listen(listen_id, 1))
			die("rdma_listen", errno);
		printf("rc_echo: listening\n");
		if (rdma_get_request(listen_id, &id))
			die("rdma_get_request", errno);
	} else {
		if (rdma_create_ep(&id, res, NULL, &attr))
			die("rdma_create_ep", errno);
	}
	rdma_freeaddrinfo(res);

	uint8_t *rx = malloc(size), *tx = malloc(size);
	if (!rx || !tx)
		die("malloc", ENOMEM);
	struct ibv_mr *rx_mr = rdma_reg_msgs(id, rx, size), *tx_mr = rdma_reg_msgs(id, tx, size);
	if (!rx_mr || !tx_mr)
		die("rdma_reg_msgs", errno);
	if (rdma_post_recv(id, NULL, rx, size, rx_mr))
		die("rdma_post_recv", errno);
	if (server ? rdma_accept(id, NULL) : rdma_connect(id, NULL))
		die(server ? "rdma_accept" : "rdma_connect", errno);

	for (unsigned i = 0; i < count; i++) {
		if (server) {
			complete(id, 0, "receive");
			memcpy(tx, rx, size);
		} else {
			for (size_t j = 0; j < size; j++)
				tx[j] = pattern(i, j);
		}
		/* The receive for the next message is posted before this send leaves: the peer
		 * sends message i+1 only after this one (client) or its echo (server) arrived. */
		if (server && i + 1 < count && rdma_post_recv(id, NULL, rx, size, rx_mr))
			die("rdma_post_recv", errno);
		if (rdma_post_send(id, NULL, tx, size, tx_mr, 0))
			die("rdma_post_send", errno);
		complete(id, 1, "send");
		if (!server) {
			complete(id, 0, "receive");
			for (size_t j = 0; j < size; j++) {
				if (rx[j] != pattern(i, j)) {
					printf("rc_echo: FAILED message %u byte %zu is 0x%02x, sent 0x%02x\n",
					       i, j, rx[j], pattern(i, j));
					return 1;
				}
			}
			if (i + 1 < count && rdma_post_recv(id, NULL, rx, size, rx_mr))
				die("rdma_post_recv", errno);
		}
	}
	if (server)
		printf("rc_echo: echoed %u messages of %zu bytes\n", count, size);
	else
		printf("rc_echo: %u messages of %zu bytes echoed and verified\n", count, size);
	rdma_disconnect(id);
	rdma_dereg_mr(rx_mr);
	rdma_dereg_mr(tx_mr);
	free(rx);
	free(tx);
	rdma_destroy_ep(id);
	if (listen_id)
		rdma_destroy_ep(listen_id);
	return 0;
}
