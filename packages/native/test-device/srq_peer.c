/*
 * The C side of the shared receive queue device test (FeaturesSrq.test.ts): librpma on one side,
 * this library's TypeScript on the other, each role played by either.
 *
 * A message is 32 bytes: the sender's seed, then pattern(i, seed). The answer to it is 32 bytes of
 * pattern(i, seed + 100), sent on the connection the message came on, so a client that gets
 * another client's answer sees the wrong seed.
 *
 *   server: makes a shared receive queue (rpma_srq_new) and posts two receives on it
 *           (rpma_srq_recv), accepts two connections made with it (rpma_conn_cfg_set_srq), takes
 *           both messages from the queue's receive CQ (rpma_srq_get_rcq), finds each one's
 *           connection by qp_num (rpma_conn_get_qp_num) and answers there.
 *   client <seed>: connects, posts a receive, sends its message and checks the answer.
 *
 * Prints "ok <what>" for each check passed and "FAIL <what>" otherwise; exits 0 only if all pass.
 *
 *   cc -O2 -Wall -Wextra -o srq_peer srq_peer.c $(pkg-config --cflags --libs librpma)
 *   ./srq_peer server <address> <port> | ./srq_peer client <address> <port> <seed>
 */
#include <librpma.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer_common.h"

#define SIZE 4096
#define MSG 32
#define CLIENTS 2
#define ANSWERS 1024 /* where the server's answers are built */

static void established(struct rpma_conn *conn) {
	enum rpma_conn_event event;
	need("rpma_conn_next_event", rpma_conn_next_event(conn, &event));
	expect(event == RPMA_CONN_ESTABLISHED, "established");
}

static void close_conn(struct rpma_conn **conn) {
	enum rpma_conn_event event;
	rpma_conn_disconnect(*conn);
	rpma_conn_next_event(*conn, &event);
	rpma_conn_delete(conn);
}

static void serve(struct rpma_peer *peer, struct rpma_mr_local *mr, uint8_t *mem, const char *addr, const char *port) {
	struct rpma_srq *srq;
	need("rpma_srq_new", rpma_srq_new(peer, NULL, &srq));
	struct rpma_cq *rcq;
	need("rpma_srq_get_rcq", rpma_srq_get_rcq(srq, &rcq));
	/* The receive's context (wr_id) says which buffer it is. */
	for (uintptr_t i = 0; i < CLIENTS; i++)
		need("rpma_srq_recv", rpma_srq_recv(srq, mr, (size_t)i * 64, 64, (const void *)i));
	struct rpma_conn_cfg *cfg;
	need("rpma_conn_cfg_new", rpma_conn_cfg_new(&cfg));
	need("rpma_conn_cfg_set_srq", rpma_conn_cfg_set_srq(cfg, srq));
	struct rpma_ep *ep;
	need("rpma_ep_listen", rpma_ep_listen(peer, addr, port, &ep));
	printf("ready\n");

	struct rpma_conn *conns[CLIENTS];
	uint32_t qps[CLIENTS];
	for (int i = 0; i < CLIENTS; i++) {
		struct rpma_conn_req *req;
		need("rpma_ep_next_conn_req", rpma_ep_next_conn_req(ep, cfg, &req));
		need("rpma_conn_req_connect", rpma_conn_req_connect(&req, NULL, &conns[i]));
		established(conns[i]);
		need("rpma_conn_get_qp_num", rpma_conn_get_qp_num(conns[i], &qps[i]));
	}
	expect(qps[0] != qps[1], "two queue pair numbers");

	for (int got = 0; got < CLIENTS; got++) {
		struct ibv_wc wc = next_wc(rcq);
		int which = wc.qp_num == qps[0] ? 0 : wc.qp_num == qps[1] ? 1 : -1;
		char text[160];
		snprintf(text, sizeof text, "a message on the shared queue: status %d opcode %d length %u qp %u", wc.status,
			 wc.opcode, wc.byte_len, wc.qp_num);
		int known = which >= 0 && wc.wr_id < CLIENTS;
		expect(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == MSG && known, text);
		if (!known) continue;
		const uint8_t *msg = mem + wc.wr_id * 64;
		int seed = msg[0], whole = 1;
		for (int i = 1; i < MSG; i++)
			if (msg[i] != pattern(i, seed)) whole = 0;
		snprintf(text, sizeof text, "the bytes of seed %d", seed);
		expect(whole, text);
		uint8_t *answer = mem + ANSWERS + which * 64;
		for (int i = 0; i < MSG; i++) answer[i] = pattern(i, seed + 100);
		need("rpma_send", rpma_send(conns[which], mr, ANSWERS + (size_t)which * 64, MSG, RPMA_F_COMPLETION_ALWAYS, NULL));
		struct rpma_cq *cq;
		need("rpma_conn_get_cq", rpma_conn_get_cq(conns[which], &cq));
		expect(next_wc(cq).status == IBV_WC_SUCCESS, "the answer was sent");
	}
	for (int i = 0; i < CLIENTS; i++) close_conn(&conns[i]);
	rpma_ep_shutdown(&ep);
	rpma_conn_cfg_delete(&cfg);
	need("rpma_srq_delete", rpma_srq_delete(&srq));
}

static void ask(struct rpma_peer *peer, struct rpma_mr_local *mr, uint8_t *mem, const char *addr, const char *port,
		int seed) {
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	need("rpma_conn_req_new", rpma_conn_req_new(peer, addr, port, NULL, &req));
	need("rpma_conn_req_connect", rpma_conn_req_connect(&req, NULL, &conn));
	established(conn);
	struct rpma_cq *cq;
	need("rpma_conn_get_cq", rpma_conn_get_cq(conn, &cq));
	need("rpma_recv", rpma_recv(conn, mr, 64, 64, NULL));
	mem[0] = (uint8_t)seed;
	for (int i = 1; i < MSG; i++) mem[i] = pattern(i, seed);
	need("rpma_send", rpma_send(conn, mr, 0, MSG, RPMA_F_COMPLETION_ALWAYS, NULL));
	struct ibv_wc wc = next_wc(cq);
	expect(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "the message was sent");
	wc = next_wc(cq);
	expect(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == MSG, "an answer");
	int whole = 1;
	for (int i = 0; i < MSG; i++)
		if (mem[64 + i] != pattern(i, seed + 100)) whole = 0;
	expect(whole, "the answer is to this client's message");
	close_conn(&conn);
}

int main(int argc, char **argv) {
	int server = argc == 4 && strcmp(argv[1], "server") == 0;
	if (!server && !(argc == 5 && strcmp(argv[1], "client") == 0)) {
		fprintf(stderr, "usage: %s server <address> <port> | client <address> <port> <seed 1-150>\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	need("rpma_utils_get_ibv_context",
	     rpma_utils_get_ibv_context(argv[2], server ? RPMA_UTIL_IBV_CONTEXT_LOCAL : RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	need("rpma_peer_new", rpma_peer_new(ctx, &peer));
	uint8_t *mem;
	if (posix_memalign((void **)&mem, (size_t)sysconf(_SC_PAGESIZE), SIZE)) return 1;
	memset(mem, 0, SIZE);
	struct rpma_mr_local *mr;
	need("rpma_mr_reg", rpma_mr_reg(peer, mem, SIZE, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	if (server)
		serve(peer, mr, mem, argv[2], argv[3]);
	else
		ask(peer, mr, mem, argv[2], argv[3], atoi(argv[4]));
	rpma_mr_dereg(&mr);
	rpma_peer_delete(&peer);
	free(mem);
	printf("%s\n", failures ? "failed" : "passed");
	return failures ? 1 : 0;
}
