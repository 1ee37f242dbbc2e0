/*
 * The active side of the interop modes (cm_common.h says what each does and the key's format):
 * rdma_getaddrinfo + rdma_create_ep, receives posted, rdma_connect with private data, then the
 * mode's exchange with the server (cm_server, or this library's listener).
 *
 *   cc -O2 -Wall -Wextra -o cm_client cm_client.c -lrdmacm -libverbs
 *   ./cm_client <address> <port> <msg|read|write|imm|reject> [bytes]
 */
#include "cm_common.h"

/* The server's key from the accept's private data, checked against what the mode needs. */
static struct remote_key server_key(struct rdma_cm_id *id, size_t size, enum mode mode) {
	const struct rdma_conn_param *accepted = &id->event->param.conn;
	if (accepted->private_data == NULL || accepted->private_data_len < KEY_SIZE) mismatch("the accept carries no key");
	struct remote_key key = decode_key(accepted->private_data);
	if (key.length != size) mismatch("the key's length is not the mode's size");
	if (key.access != mode_access(mode)) mismatch("the key's access is not the mode's");
	return key;
}

static void post_with_imm(struct rdma_cm_id *id, struct buffers *b, enum ibv_wr_opcode opcode, uint32_t imm,
			  const struct remote_key *key) {
	struct ibv_sge sge = { (uint64_t)(uintptr_t)LOCAL_SLOT(b), (uint32_t)b->size, b->messages_mr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm);
	if (key != NULL) {
		wr.wr.rdma.remote_addr = key->address;
		wr.wr.rdma.rkey = key->rkey;
	}
	errno = ibv_post_send(id->qp, &wr, &bad);
	if (errno) fail("ibv_post_send (with immediate data)");
	send_completion(id, "a request with immediate data");
}

static void exchange(struct rdma_cm_id *id, struct buffers *b, enum mode mode, const struct remote_key *key) {
	size_t n = b->size;
	if (mode == MODE_MSG) {
		fill(LOCAL_SLOT(b), n, 1);
		send_bytes(id, b, LOCAL_SLOT(b), n);
		struct ibv_wc wc = recv_completion(id, "the server's answer");
		if (wc.byte_len != n || !matches(received(b, &wc), n, 2)) mismatch("msg: the server's answer");
	} else if (mode == MODE_READ) {
		check("rdma_post_read", rdma_post_read(id, NULL, LOCAL_SLOT(b), n, b->messages_mr, IBV_SEND_SIGNALED,
						       key->address, key->rkey));
		send_completion(id, "the read");
		if (!matches(LOCAL_SLOT(b), n, 3)) mismatch("read: the bytes read");
		send_bytes(id, b, DONE, DONE_SIZE);
	} else if (mode == MODE_WRITE) {
		fill(LOCAL_SLOT(b), n, 4);
		check("rdma_post_write", rdma_post_write(id, NULL, LOCAL_SLOT(b), n, b->messages_mr, IBV_SEND_SIGNALED,
							 key->address, key->rkey));
		send_completion(id, "the write");
		send_bytes(id, b, DONE, DONE_SIZE);
	} else if (mode == MODE_IMM) {
		fill(LOCAL_SLOT(b), n, 5);
		post_with_imm(id, b, IBV_WR_SEND_WITH_IMM, IMM_SEND, NULL);
		fill(LOCAL_SLOT(b), n, 6);
		post_with_imm(id, b, IBV_WR_RDMA_WRITE_WITH_IMM, IMM_WRITE, key);
	}
}

int main(int argc, char **argv) {
	program_name = "cm_client";
	if (argc < 4) {
		fprintf(stderr, "usage: %s <address> <port> <msg|read|write|imm|reject> [bytes]\n", argv[0]);
		return 2;
	}
	enum mode mode = parse_mode(argv[3]);
	size_t size = parse_size(argc, argv, 4);

	struct rdma_addrinfo *res = address_info(argv[1], argv[2], 0);
	struct ibv_qp_init_attr attr = queue_pair_attributes();
	struct rdma_cm_id *id;
	check("rdma_create_ep", rdma_create_ep(&id, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	struct buffers b;
	register_buffers(id, &b, size, mode);
	post_receives(id, &b); /* before the connect: the server may answer at once */

	uint8_t hello[HELLO_SIZE];
	fill(hello, HELLO_SIZE, HELLO_SEED);
	struct rdma_conn_param conn = connection_parameters(hello, HELLO_SIZE);
	int ret = rdma_connect(id, &conn);
	if (mode == MODE_REJECT) {
		if (ret == 0 || errno != ECONNREFUSED) {
			if (ret == 0) errno = 0;
			fail("rdma_connect to be refused with ECONNREFUSED");
		}
		/* A synchronous identifier keeps the REJECTED event, and with it the rejection's private data. */
		const struct rdma_conn_param *why = &id->event->param.conn;
		if (why->private_data_len < HELLO_SIZE || !matches(why->private_data, HELLO_SIZE, REJECT_SEED)) {
			mismatch("reject: the rejection's private data");
		}
	} else {
		check("rdma_connect", ret);
		struct remote_key key = server_key(id, size, mode);
		exchange(id, &b, mode, &key);
		check("rdma_disconnect", rdma_disconnect(id));
	}
	release(id, &b);
	printf("ok %s\n", mode_names[mode]);
	return 0;
}
