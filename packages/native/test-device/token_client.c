/*
 * A librpma client that asks to be admitted with a token (Token.test.ts): it sends, as its
 * connection request's private data, one byte with the token's length and then the token, as
 * Admission.privateData encodes it (README, "Security"), then prints how the request ended:
 * "established" (and it disconnects) or "refused <event>".
 *
 *   cc -O2 -Wall -Wextra -o token_client token_client.c $(pkg-config --cflags --libs librpma)
 *   ./token_client <address> <port> <token, hex>
 */
#include <librpma.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "peer_common.h"

int main(int argc, char *argv[]) {
	if (argc != 4 || strlen(argv[3]) % 2 != 0 || strlen(argv[3]) / 2 > 55) {
		fprintf(stderr, "usage: %s <address> <port> <token: 1 to 55 bytes in hex>\n", argv[0]);
		return 2;
	}
	uint8_t wire[56];
	size_t length = strlen(argv[3]) / 2;
	wire[0] = (uint8_t)length;
	for (size_t i = 0; i < length; i++) {
		unsigned byte;
		if (sscanf(argv[3] + 2 * i, "%2x", &byte) != 1) {
			fprintf(stderr, "the token is not hex: %s\n", argv[3]);
			return 2;
		}
		wire[1 + i] = (uint8_t)byte;
	}
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	enum rpma_conn_event event;
	need("rpma_utils_get_ibv_context", rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	need("rpma_peer_new", rpma_peer_new(ctx, &peer));
	need("rpma_conn_req_new", rpma_conn_req_new(peer, argv[1], argv[2], NULL, &req));
	struct rpma_conn_private_data pdata = {wire, (uint8_t)(length + 1)};
	need("rpma_conn_req_connect", rpma_conn_req_connect(&req, &pdata, &conn));
	int ret = rpma_conn_next_event(conn, &event);
	if (ret == 0 && event == RPMA_CONN_ESTABLISHED) {
		printf("established\n");
		rpma_conn_disconnect(conn);
		rpma_conn_next_event(conn, &event);
	} else {
		printf("refused %s\n", ret ? rpma_err_2str(ret) : rpma_utils_conn_event_2str(event));
	}
	fflush(stdout);
	need("rpma_conn_delete", rpma_conn_delete(&conn));
	need("rpma_peer_delete", rpma_peer_delete(&peer));
	return 0;
}
