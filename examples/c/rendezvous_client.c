/*
 * A client written in C on librpma for an effect-rdma server that isolates its clients (the
 * default of Listener.serve, Listener.acceptClient and RdmaRpc's "rpma" server): it follows the server's
 * rendezvous, then talks to README's first `Listener.serve` example, whose handler echoes each
 * message back to its client.
 *
 * The rendezvous (README, "Security"): the first connection is established, and the server's
 * private data in it is an answer, not a session:
 *
 *   "RDV" 0x01 | port (2 bytes, big endian) | token length (1 byte) | token (1-55 bytes)
 *
 * The client closes that connection and connects again to the same address on that port, with
 * private data that is the token's length byte and the token (as Admission.privateData encodes a
 * token). That listener lives on a protection domain of the client's own and answers one request.
 * Private data that does not start with the marker is an ordinary accept: the server shares its
 * protection domain among its clients (`isolation: "shared"`), and the connection is the session.
 *
 *   cc -O2 -Wall -Wextra -o rendezvous_client rendezvous_client.c $(pkg-config --cflags --libs librpma)
 *   ./rendezvous_client <address> <port> [<admission token, hex>]
 *
 * It prints "redirected <port>" when it followed an answer, then "echo <n>" for each message that
 * came back whole and "done"; on a failure, "FAIL <what>: <why>" and exit status 1.
 */
#include <librpma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN 55
#define BUFFER 4096

static const uint8_t MARKER[4] = {'R', 'D', 'V', 0x01};

static void need(const char *what, int ret) {
	if (ret) {
		printf("FAIL %s: %s\n", what, rpma_err_2str(ret));
		exit(1);
	}
}

static void fail(const char *what) {
	printf("FAIL %s\n", what);
	exit(1);
}

/* Connects with `pdata` (may be NULL) and waits for the connection to be established. */
static struct rpma_conn *connect_to(struct rpma_peer *peer, const char *address, const char *port,
				    struct rpma_conn_private_data *pdata) {
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	enum rpma_conn_event event;
	need("rpma_conn_req_new", rpma_conn_req_new(peer, address, port, NULL, &req));
	need("rpma_conn_req_connect", rpma_conn_req_connect(&req, pdata, &conn));
	int ret = rpma_conn_next_event(conn, &event);
	if (ret != 0 || event != RPMA_CONN_ESTABLISHED) {
		/* A refused token: rejected (RPMA_CONN_REJECTED, or an error from the CM's event). */
		printf("FAIL connect to port %s: %s\n", port, ret ? rpma_err_2str(ret) : rpma_utils_conn_event_2str(event));
		exit(1);
	}
	return conn;
}

/* Disconnects (the server may have done so already) and waits for the connection to close. */
static void close_conn(struct rpma_conn **conn) {
	enum rpma_conn_event event = RPMA_CONN_UNDEFINED;
	(void)rpma_conn_disconnect(*conn);
	while (event != RPMA_CONN_CLOSED && rpma_conn_next_event(*conn, &event) == 0) {}
	need("rpma_conn_delete", rpma_conn_delete(conn));
}

/* The next completion on the connection's CQ (receives and sends share it), waiting for it. */
static struct ibv_wc next_wc(struct rpma_conn *conn) {
	struct rpma_cq *cq;
	struct ibv_wc wc;
	int n = 0;
	need("rpma_conn_get_cq", rpma_conn_get_cq(conn, &cq));
	for (;;) {
		int ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == 0 && n == 1) break;
		if (ret != RPMA_E_NO_COMPLETION) need("rpma_cq_get_wc", ret);
		need("rpma_cq_wait", rpma_cq_wait(cq));
	}
	if (wc.status != IBV_WC_SUCCESS) {
		printf("FAIL completion: %s\n", ibv_wc_status_str(wc.status));
		exit(1);
	}
	return wc;
}

int main(int argc, char *argv[]) {
	if (argc < 3 || argc > 4 || (argc == 4 && (strlen(argv[3]) % 2 != 0 || strlen(argv[3]) / 2 > MAX_TOKEN))) {
		fprintf(stderr, "usage: %s <address> <port> [<admission token: 1 to 55 bytes in hex>]\n", argv[0]);
		return 2;
	}
	const char *address = argv[1];
	uint8_t wire[1 + MAX_TOKEN];
	struct rpma_conn_private_data token = {wire, 0};
	if (argc == 4) {
		size_t length = strlen(argv[3]) / 2;
		wire[0] = (uint8_t)length;
		for (size_t i = 0; i < length; i++) {
			unsigned byte;
			if (sscanf(argv[3] + 2 * i, "%2x", &byte) != 1) fail("the token is not hex");
			wire[1 + i] = (uint8_t)byte;
		}
		token.len = (uint8_t)(length + 1);
	}

	struct ibv_context *ctx;
	struct rpma_peer *peer;
	need("rpma_utils_get_ibv_context", rpma_utils_get_ibv_context(address, RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	need("rpma_peer_new", rpma_peer_new(ctx, &peer));

	struct rpma_conn *conn = connect_to(peer, address, argv[2], token.len > 0 ? &token : NULL);
	struct rpma_conn_private_data answer;
	need("rpma_conn_get_private_data", rpma_conn_get_private_data(conn, &answer));
	const uint8_t *bytes = answer.ptr;
	if (answer.len >= sizeof MARKER + 3 && memcmp(bytes, MARKER, sizeof MARKER) == 0) {
		/* A rendezvous: copy it out before the connection (and its private data) goes. */
		unsigned port = (unsigned)bytes[4] << 8 | bytes[5];
		uint8_t length = bytes[6];
		if (port == 0 || length == 0 || length > MAX_TOKEN || answer.len < 7 + length) fail("a malformed rendezvous answer");
		uint8_t again[1 + MAX_TOKEN];
		memcpy(again, bytes + 6, 1 + (size_t)length);
		close_conn(&conn);
		char port_text[8];
		snprintf(port_text, sizeof port_text, "%u", port);
		struct rpma_conn_private_data follow = {again, (uint8_t)(length + 1)};
		conn = connect_to(peer, address, port_text, &follow);
		printf("redirected %u\n", port);
	}

	/* README's example server echoes each message: sent from the first half, received in the second. */
	void *memory;
	struct rpma_mr_local *mr;
	if (posix_memalign(&memory, 4096, 2 * BUFFER) != 0) fail("posix_memalign");
	need("rpma_mr_reg", rpma_mr_reg(peer, memory, 2 * BUFFER, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	const size_t lengths[] = {5, 64, 300};
	for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
		memset(memory, 'a' + (int)i, lengths[i]);
		uint8_t *in = (uint8_t *)memory + BUFFER;
		memset(in, 0, BUFFER);
		need("rpma_recv", rpma_recv(conn, mr, BUFFER, BUFFER, NULL));
		need("rpma_send", rpma_send(conn, mr, 0, lengths[i], RPMA_F_COMPLETION_ALWAYS, NULL));
		uint32_t got = 0;
		for (int completions = 0; completions < 2; completions++) {
			struct ibv_wc wc = next_wc(conn);
			if (wc.opcode == IBV_WC_RECV) got = wc.byte_len;
		}
		if (got != lengths[i] || memcmp(in, memory, lengths[i]) != 0) {
			printf("FAIL echo of %zu bytes: %u bytes came back, or other bytes\n", lengths[i], got);
			exit(1);
		}
		printf("echo %u\n", got);
	}
	printf("done\n");
	fflush(stdout);
	close_conn(&conn);
	need("rpma_mr_dereg", rpma_mr_dereg(&mr));
	free(memory);
	need("rpma_peer_delete", rpma_peer_delete(&peer));
	return 0;
}
