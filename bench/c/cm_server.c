/*
 * The passive side of the interop modes (cm_common.h says what each does and the key's format):
 * rdma_getaddrinfo(RAI_PASSIVE) + rdma_create_ep + rdma_listen, one rdma_get_request, then the
 * mode's exchange with whoever connected (cm_client, or this library's endpoint).
 *
 *   cc -O2 -Wall -Wextra -o cm_server cm_server.c -lrdmacm -libverbs
 *   ./cm_server <address> <port> <msg|read|write|imm|reject> [bytes]
 */
#include "cm_common.h"

static void serve(struct rdma_cm_id *id, struct buffers *b, enum mode mode) {
	size_t n = b->size;
	if (mode == MODE_MSG) {
		struct ibv_wc wc = recv_completion(id, "the client's message");
		if (wc.byte_len != n || !matches(received(b, &wc), n, 1)) mismatch("msg: the client's message");
		fill(LOCAL_SLOT(b), n, 2);
		send_bytes(id, b, LOCAL_SLOT(b), n);
	} else if (mode == MODE_READ || mode == MODE_WRITE) {
		struct ibv_wc wc = recv_completion(id, "the client's done");
		if (wc.byte_len != DONE_SIZE || memcmp(received(b, &wc), DONE, DONE_SIZE) != 0) mismatch("the client's done");
		if (mode == MODE_WRITE && !matches(b->target, n, 4)) mismatch("write: the bytes the client wrote");
	} else if (mode == MODE_IMM) {
		struct ibv_wc first = recv_completion(id, "the send with immediate data");
		if (first.opcode != IBV_WC_RECV || !(first.wc_flags & IBV_WC_WITH_IMM) || ntohl(first.imm_data) != IMM_SEND) {
			mismatch("imm: the first receive is not a send with immediate data 0x01020304");
		}
		if (first.byte_len != n || !matches(received(b, &first), n, 5)) mismatch("imm: the bytes sent with it");
		struct ibv_wc second = recv_completion(id, "the write with immediate data");
		if (second.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(second.wc_flags & IBV_WC_WITH_IMM) ||
		    ntohl(second.imm_data) != IMM_WRITE) {
			mismatch("imm: the second receive is not a write with immediate data 0x05060708");
		}
		if (!matches(b->target, n, 6)) mismatch("imm: the bytes written with it");
	}
}

int main(int argc, char **argv) {
	program_name = "cm_server";
	if (argc < 4) {
		fprintf(stderr, "usage: %s <address> <port> <msg|read|write|imm|reject> [bytes]\n", argv[0]);
		return 2;
	}
	enum mode mode = parse_mode(argv[3]);
	size_t size = parse_size(argc, argv, 4);

	struct rdma_addrinfo *res = address_info(argv[1], argv[2], 1);
	struct ibv_qp_init_attr attr = queue_pair_attributes();
	struct rdma_cm_id *listener;
	check("rdma_create_ep (passive)", rdma_create_ep(&listener, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	check("rdma_listen", rdma_listen(listener, 1));
	printf("ready\n");
	fflush(stdout);

	struct rdma_cm_id *id;
	check("rdma_get_request", rdma_get_request(listener, &id));
	const struct rdma_conn_param *request = &id->event->param.conn;
	if (request->private_data_len < HELLO_SIZE || !matches(request->private_data, HELLO_SIZE, HELLO_SEED)) {
		mismatch("the request's private data");
	}

	if (mode == MODE_REJECT) {
		uint8_t why[HELLO_SIZE];
		fill(why, HELLO_SIZE, REJECT_SEED);
		check("rdma_reject", rdma_reject(id, why, HELLO_SIZE));
		rdma_destroy_ep(id);
	} else {
		struct buffers b;
		register_buffers(id, &b, size, mode);
		if (mode == MODE_READ) fill(b.target, size, 3);
		post_receives(id, &b); /* before the accept: the client may send at once */
		uint8_t key[KEY_SIZE];
		encode_key(key, b.target_mr, mode_access(mode));
		struct rdma_conn_param accept = connection_parameters(key, KEY_SIZE);
		check("rdma_accept", rdma_accept(id, &accept));
		serve(id, &b, mode);
		rdma_disconnect(id); /* the client may have disconnected first: nothing to check */
		release(id, &b);
	}
	rdma_destroy_ep(listener);
	printf("ok %s\n", mode_names[mode]);
	return 0;
}
