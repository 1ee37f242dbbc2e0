/*
 * The far side of the two-host fault tests (vm/pair): a librpma server in C that the test can
 * kill, freeze or cut off, and that can be made to behave badly on purpose.
 *
 * It registers a 1 MiB region (WRITE_DST | READ_SRC | FLUSH_TYPE_VISIBILITY), listens on
 * <address>:<port> and accepts every connection request, sending the region's descriptor as the
 * accept's private data: one byte holding its length, then the descriptor (rdma_cm pads private
 * data, so the length travels with it). It never posts anything: the client writes into it.
 *
 *   answer   each connection's events are read; on CLOSED or LOST it disconnects and deletes it
 *            (what a well-behaved peer does)
 *   silent   connections are accepted, then never looked at again: it never reads their events
 *            and never calls rpma_conn_disconnect, so a disconnect from the other side is never
 *            answered (a hung or misbehaving peer)
 *
 * Prints "ready" once listening and "established <n>" / "closed <n> <event>" as things happen,
 * each line flushed, so that the program that started it can follow.
 *
 *   cc -O2 -Wall -Wextra -o peer peer.c $(pkg-config --cflags --libs librpma)
 *   ./peer 192.168.78.1 7700 answer
 */
#include <errno.h>
#include <librpma.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CONNS 64
#define REGION (1 << 20)

static void check(const char *what, int ret) {
	if (ret) {
		fprintf(stderr, "peer: %s: %s\n", what, rpma_err_2str(ret));
		exit(1);
	}
}

int main(int argc, char **argv) {
	if (argc != 4 || (strcmp(argv[3], "answer") && strcmp(argv[3], "silent"))) {
		fprintf(stderr, "usage: %s <address> <port> answer|silent\n", argv[0]);
		return 2;
	}
	int silent = strcmp(argv[3], "silent") == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);

	struct ibv_context *ctx;
	struct rpma_peer *peer;
	check("rpma_utils_get_ibv_context",
	      rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	check("rpma_peer_new", rpma_peer_new(ctx, &peer));

	void *memory;
	if (posix_memalign(&memory, (size_t)sysconf(_SC_PAGESIZE), REGION)) return 1;
	memset(memory, 0, REGION);
	struct rpma_mr_local *mr;
	check("rpma_mr_reg", rpma_mr_reg(peer, memory, REGION,
					 RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
						 RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
					 &mr));
	size_t desc_size;
	check("rpma_mr_get_descriptor_size", rpma_mr_get_descriptor_size(mr, &desc_size));
	unsigned char offer[64];
	offer[0] = (unsigned char)desc_size;
	check("rpma_mr_get_descriptor", rpma_mr_get_descriptor(mr, offer + 1));
	struct rpma_conn_private_data pdata = {offer, desc_size + 1};

	struct rpma_ep *ep;
	check("rpma_ep_listen", rpma_ep_listen(peer, argv[1], argv[2], &ep));
	int ep_fd;
	check("rpma_ep_get_fd", rpma_ep_get_fd(ep, &ep_fd));
	printf("ready\n");

	struct rpma_conn *conns[MAX_CONNS] = {0};
	int numbers[MAX_CONNS] = {0};
	int established = 0;
	for (;;) {
		struct pollfd fds[MAX_CONNS + 1];
		int slot[MAX_CONNS + 1];
		nfds_t n = 0;
		fds[n] = (struct pollfd){.fd = ep_fd, .events = POLLIN};
		slot[n++] = -1;
		for (int i = 0; !silent && i < MAX_CONNS; i++) {
			if (!conns[i]) continue;
			int fd;
			check("rpma_conn_get_event_fd", rpma_conn_get_event_fd(conns[i], &fd));
			fds[n] = (struct pollfd){.fd = fd, .events = POLLIN};
			slot[n++] = i;
		}
		if (poll(fds, n, -1) < 0) {
			if (errno == EINTR) continue;
			perror("peer: poll");
			return 1;
		}
		for (nfds_t k = 0; k < n; k++) {
			if (!(fds[k].revents & POLLIN)) continue;
			if (slot[k] == -1) {
				struct rpma_conn_req *req;
				int ret = rpma_ep_next_conn_req(ep, NULL, &req);
				if (ret == RPMA_E_NO_EVENT) continue;
				check("rpma_ep_next_conn_req", ret);
				int i = 0;
				while (i < MAX_CONNS && conns[i]) i++;
				if (i == MAX_CONNS) {
					rpma_conn_req_delete(&req);
					continue;
				}
				struct rpma_conn *conn;
				if (rpma_conn_req_connect(&req, &pdata, &conn)) continue;
				/* ESTABLISHED comes as the connection's first event (or not at all: then it
				 * is closed on the next event, which the answer mode reads). */
				enum rpma_conn_event event;
				if (rpma_conn_next_event(conn, &event) || event != RPMA_CONN_ESTABLISHED) {
					printf("failed to establish (event %s)\n", rpma_utils_conn_event_2str(event));
					rpma_conn_delete(&conn);
					continue;
				}
				conns[i] = conn;
				numbers[i] = ++established;
				printf("established %d\n", established);
			} else {
				int i = slot[k];
				enum rpma_conn_event event;
				int ret = rpma_conn_next_event(conns[i], &event);
				if (ret == RPMA_E_NO_EVENT) continue;
				if (ret == 0 && event == RPMA_CONN_ESTABLISHED) continue;
				printf("closed %d %s\n", numbers[i],
				       ret ? rpma_err_2str(ret) : rpma_utils_conn_event_2str(event));
				rpma_conn_disconnect(conns[i]);
				rpma_conn_delete(&conns[i]);
				conns[i] = NULL;
			}
		}
	}
}
