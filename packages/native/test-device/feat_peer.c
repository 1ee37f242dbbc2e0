/*
 * The C side of the connection-features device test (Features.test.ts): librpma on one side,
 * this library's TypeScript on the other, each role played by either.
 *
 *   server: posts a receive on the request before accepting (rpma_conn_req_recv) and accepts
 *           with private data [21, its region's descriptor, its peer cfg descriptor (direct
 *           write to pmem)].
 *   client: connects, applies the server's peer cfg, writes 256 bytes in four unsignalled
 *           writes and waits only on the persistent flush that follows, then sends 22 bytes
 *           with immediate data (its own region's descriptor, length first).
 *   server: checks the receive (RECV, imm, length) and the written bytes, then writes 256 bytes
 *           with immediate data into the client's region and sends 16 bytes with immediate data.
 *   client: checks both receives (RECV_RDMA_WITH_IMM with the length written, then RECV) and
 *           the bytes, and sends "done"; the server checks it.
 *
 * Prints "ok <what>" for each check passed and "FAIL <what>" otherwise; exits 0 only if all pass.
 *
 *   cc -O2 -Wall -Wextra -o feat_peer feat_peer.c $(pkg-config --cflags --libs librpma)
 *   ./feat_peer server|client <address> <port>
 */
#include <arpa/inet.h>
#include <librpma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer_common.h"

#define SIZE 4096
#define TARGET 0 /* [0, 256): what the other side writes */
#define RECV1 1024
#define RECV2 1088
#define SOURCE 2048
#define IMM_SEND_TO_SERVER 0x11223344u
#define IMM_WRITE_TO_CLIENT 0x55667788u
#define IMM_SEND_TO_CLIENT 0x99aabbccu

static int matches(const uint8_t *bytes, int length, int seed) {
	for (int i = 0; i < length; i++)
		if (bytes[i] != pattern(i, seed)) return 0;
	return 1;
}

static void expect_recv(struct rpma_cq *cq, int opcode, uint32_t imm, uint32_t length,
			const char *what) {
	struct ibv_wc wc = next_wc(cq);
	char text[160];
	snprintf(text, sizeof text, "%s: status %d opcode %d imm 0x%x (flags %d) length %u", what, wc.status,
		 wc.opcode, (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0, wc.wc_flags, wc.byte_len);
	expect(wc.status == IBV_WC_SUCCESS && (int)wc.opcode == opcode && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		       ntohl(wc.imm_data) == imm && wc.byte_len == length,
	       text);
}

static void expect_success(struct rpma_cq *cq, const char *what) {
	struct ibv_wc wc = next_wc(cq);
	expect(wc.status == IBV_WC_SUCCESS, what);
}

int main(int argc, char **argv) {
	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client <address> <port>\n", argv[0]);
		return 2;
	}
	int server = strcmp(argv[1], "server") == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);

	struct ibv_context *ctx;
	struct rpma_peer *peer;
	need("rpma_utils_get_ibv_context", rpma_utils_get_ibv_context(argv[2], server ? RPMA_UTIL_IBV_CONTEXT_LOCAL
										  : RPMA_UTIL_IBV_CONTEXT_REMOTE,
								      &ctx));
	need("rpma_peer_new", rpma_peer_new(ctx, &peer));
	uint8_t *mem;
	if (posix_memalign((void **)&mem, (size_t)sysconf(_SC_PAGESIZE), SIZE)) return 1;
	memset(mem, 0, SIZE);
	struct rpma_mr_local *mr;
	need("rpma_mr_reg",
	     rpma_mr_reg(peer, mem, SIZE,
			 RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
				 RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT | RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_SEND |
				 RPMA_MR_USAGE_RECV,
			 &mr));
	size_t desc_size;
	need("rpma_mr_get_descriptor_size", rpma_mr_get_descriptor_size(mr, &desc_size));

	struct rpma_conn *conn;
	struct rpma_conn_req *req;
	struct rpma_ep *ep = NULL;
	if (server) {
		uint8_t offer[32];
		offer[0] = (uint8_t)desc_size;
		need("rpma_mr_get_descriptor", rpma_mr_get_descriptor(mr, offer + 1));
		struct rpma_peer_cfg *pcfg;
		need("rpma_peer_cfg_new", rpma_peer_cfg_new(&pcfg));
		need("rpma_peer_cfg_set_direct_write_to_pmem", rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
		need("rpma_peer_cfg_get_descriptor", rpma_peer_cfg_get_descriptor(pcfg, offer + 1 + desc_size));
		rpma_peer_cfg_delete(&pcfg);
		need("rpma_ep_listen", rpma_ep_listen(peer, argv[2], argv[3], &ep));
		printf("ready\n");
		need("rpma_ep_next_conn_req", rpma_ep_next_conn_req(ep, NULL, &req));
		need("rpma_conn_req_recv", rpma_conn_req_recv(req, mr, RECV1, 64, NULL));
		struct rpma_conn_private_data pdata = {offer, (uint8_t)(desc_size + 2)};
		need("rpma_conn_req_connect", rpma_conn_req_connect(&req, &pdata, &conn));
	} else {
		need("rpma_conn_req_new", rpma_conn_req_new(peer, argv[2], argv[3], NULL, &req));
		need("rpma_conn_req_connect", rpma_conn_req_connect(&req, NULL, &conn));
	}
	enum rpma_conn_event event;
	need("rpma_conn_next_event", rpma_conn_next_event(conn, &event));
	expect(event == RPMA_CONN_ESTABLISHED, "established");
	struct rpma_cq *cq;
	need("rpma_conn_get_cq", rpma_conn_get_cq(conn, &cq));

	if (server) {
		expect_recv(cq, IBV_WC_RECV, IMM_SEND_TO_SERVER, 22, "the early receive: a send with imm");
		expect(matches(mem + TARGET, 256, 1), "the client's unsignalled writes arrived before its flush completed");
		expect(mem[RECV1] == desc_size, "the client's descriptor length");
		struct rpma_mr_remote *theirs;
		need("rpma_mr_remote_from_descriptor", rpma_mr_remote_from_descriptor(mem + RECV1 + 1, mem[RECV1], &theirs));
		need("rpma_recv", rpma_recv(conn, mr, RECV2, 64, NULL));
		for (int i = 0; i < 256; i++) mem[SOURCE + i] = pattern(i, 5);
		for (int i = 0; i < 16; i++) mem[SOURCE + 512 + i] = pattern(i, 3);
		need("rpma_write_with_imm", rpma_write_with_imm(conn, theirs, TARGET, mr, SOURCE, 256,
								RPMA_F_COMPLETION_ON_ERROR, IMM_WRITE_TO_CLIENT, NULL));
		need("rpma_send_with_imm", rpma_send_with_imm(conn, mr, SOURCE + 512, 16, RPMA_F_COMPLETION_ALWAYS,
							      IMM_SEND_TO_CLIENT, NULL));
		expect_success(cq, "the send (and the unsignalled write before it) completed");
		struct ibv_wc wc = next_wc(cq);
		expect(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 4 &&
			       memcmp(mem + RECV2, "done", 4) == 0,
		       "the client's last message");
		rpma_mr_remote_delete(&theirs);
	} else {
		struct rpma_conn_private_data pdata;
		need("rpma_conn_get_private_data", rpma_conn_get_private_data(conn, &pdata));
		const uint8_t *offer = pdata.ptr;
		expect(pdata.len >= 23 && offer[0] == desc_size, "the server's private data");
		struct rpma_mr_remote *theirs;
		need("rpma_mr_remote_from_descriptor", rpma_mr_remote_from_descriptor(offer + 1, offer[0], &theirs));
		struct rpma_peer_cfg *pcfg;
		need("rpma_peer_cfg_from_descriptor", rpma_peer_cfg_from_descriptor(offer + 1 + offer[0], 1, &pcfg));
		need("rpma_conn_apply_remote_peer_cfg", rpma_conn_apply_remote_peer_cfg(conn, pcfg));
		rpma_peer_cfg_delete(&pcfg);
		need("rpma_recv", rpma_recv(conn, mr, RECV1, 64, NULL));
		need("rpma_recv", rpma_recv(conn, mr, RECV2, 64, NULL));
		for (int i = 0; i < 256; i++) mem[SOURCE + i] = pattern(i, 1);
		for (int i = 0; i < 4; i++) {
			need("rpma_write", rpma_write(conn, theirs, TARGET + i * 64, mr, SOURCE + i * 64, 64,
						      RPMA_F_COMPLETION_ON_ERROR, NULL));
		}
		need("rpma_flush", rpma_flush(conn, theirs, TARGET, 256, RPMA_FLUSH_TYPE_PERSISTENT,
					      RPMA_F_COMPLETION_ALWAYS, NULL));
		expect_success(cq, "the persistent flush after four unsignalled writes");
		mem[SOURCE + 512] = (uint8_t)desc_size;
		need("rpma_mr_get_descriptor", rpma_mr_get_descriptor(mr, mem + SOURCE + 513));
		need("rpma_send_with_imm", rpma_send_with_imm(conn, mr, SOURCE + 512, 22, RPMA_F_COMPLETION_ALWAYS,
							      IMM_SEND_TO_SERVER, NULL));
		expect_success(cq, "the send with imm");
		expect_recv(cq, IBV_WC_RECV_RDMA_WITH_IMM, IMM_WRITE_TO_CLIENT, 256, "a write with imm");
		expect(matches(mem + TARGET, 256, 5), "the bytes written with imm");
		expect_recv(cq, IBV_WC_RECV, IMM_SEND_TO_CLIENT, 16, "a send with imm");
		expect(matches(mem + RECV2, 16, 3), "the bytes sent with imm");
		memcpy(mem + SOURCE + 1024, "done", 4);
		need("rpma_send", rpma_send(conn, mr, SOURCE + 1024, 4, RPMA_F_COMPLETION_ALWAYS, NULL));
		expect_success(cq, "the last send");
		rpma_mr_remote_delete(&theirs);
	}
	rpma_conn_disconnect(conn);
	rpma_conn_next_event(conn, &event);
	rpma_conn_delete(&conn);
	if (ep) rpma_ep_shutdown(&ep);
	rpma_mr_dereg(&mr);
	rpma_peer_delete(&peer);
	printf("%s\n", failures ? "failed" : "passed");
	return failures ? 1 : 0;
}
