/*
 * What bench/c/cm_server.c and cm_client.c share: the modes, the remote-key wire format, the
 * buffers and the checks. Both programs are written on librdmacm's verbs API alone
 * (<rdma/rdma_cma.h>, <rdma/rdma_verbs.h>; ibv_post_send only for immediate data, which
 * librdmacm's wrappers do not expose), so that this library's endpoints are proved against the
 * kind of program most RDMA code is.
 *
 * The remote key, 24 bytes, little-endian: the format of @effect-rdma/core's CmEndpoint
 * (encodeRemoteKey / decodeRemoteKey, packages/core/src/internal/cmRemoteKey.ts):
 *
 *   offset 0  u8   version, 1
 *   offset 1  u8   what it allows: 1 a remote read (rdma_reg_read), 2 a remote write (rdma_reg_write)
 *   offset 2  u16  reserved, 0
 *   offset 4  u32  rkey
 *   offset 8  u64  address of the region in its owner's process
 *   offset 16 u64  length in bytes
 *
 * It travels in the accept's private data (server to client), which rdma_cm pads to 196 bytes:
 * the receiver takes the first 24 and ignores the rest.
 *
 * The modes (N bytes, 4096 unless given; pattern(n, seed)[i] = (i * seed + seed) % 251):
 *
 *   every mode  the client connects with private data pattern(16, 7), which the server checks; the
 *               server accepts with the key of its target region T (N bytes), which the client
 *               checks (length N, the access of the mode). Both sides post two receives of N
 *               bytes before connect / accept, so that a message sent at once finds one.
 *   msg         client sends pattern(N, 1); server checks it, answers pattern(N, 2); client checks
 *               (T: rdma_reg_write, its key checked and not used)
 *   read        T is rdma_reg_read, filled with pattern(N, 3); the client rdma_post_reads it,
 *               checks it, then sends "done" (4 bytes) so that the server may tear down
 *   write       T is rdma_reg_write; the client rdma_post_writes pattern(N, 4) into it, then
 *               sends "done"; on that message the server checks T
 *   imm         T is rdma_reg_write; the client sends pattern(N, 5) with immediate data
 *               0x01020304, then RDMA-writes pattern(N, 6) into T with immediate data 0x05060708;
 *               the server checks the first receive (IBV_WC_RECV, IBV_WC_WITH_IMM, the value, the
 *               bytes) and the second (IBV_WC_RECV_RDMA_WITH_IMM, the value, T's bytes). Immediate
 *               values are numbers: sent htonl, read ntohl (imm_data is big-endian on the wire)
 *   reject      the server checks the request's private data and rejects it with pattern(16, 8);
 *               the client's rdma_connect fails with ECONNREFUSED and it checks that private data
 *
 * Each program prints "ok <mode>" when every check passed and exits 0; on a failed check or call it
 * prints what and why to stderr and exits 1. The server prints "ready" once it listens.
 */
#ifndef CM_COMMON_H
#define CM_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY_SIZE 24
#define KEY_VERSION 1
#define KEY_READ 1
#define KEY_WRITE 2
#define HELLO_SIZE 16
#define HELLO_SEED 7
#define REJECT_SEED 8
#define IMM_SEND 0x01020304u
#define IMM_WRITE 0x05060708u
#define DONE "done"
#define DONE_SIZE 4

enum mode { MODE_MSG, MODE_READ, MODE_WRITE, MODE_IMM, MODE_REJECT };

static const char *const mode_names[] = { "msg", "read", "write", "imm", "reject" };

static const char *program_name = "cm";

static inline void fail(const char *what) {
	fprintf(stderr, "%s: %s failed: %s\n", program_name, what, strerror(errno));
	exit(1);
}

static inline void check(const char *what, int ret) {
	if (ret) fail(what);
}

static inline void mismatch(const char *what) {
	fprintf(stderr, "%s: check failed: %s\n", program_name, what);
	exit(1);
}

static inline enum mode parse_mode(const char *name) {
	for (unsigned i = 0; i < sizeof mode_names / sizeof mode_names[0]; i++) {
		if (strcmp(name, mode_names[i]) == 0) return (enum mode)i;
	}
	fprintf(stderr, "%s: no mode %s: msg, read, write, imm or reject\n", program_name, name);
	exit(2);
}

static inline size_t parse_size(int argc, char **argv, int at) {
	if (argc <= at) return 4096;
	char *end;
	unsigned long size = strtoul(argv[at], &end, 10);
	if (*end != '\0' || size < DONE_SIZE || size > (1u << 24)) {
		fprintf(stderr, "%s: bad size %s: give 4 to 16777216 bytes\n", program_name, argv[at]);
		exit(2);
	}
	return size;
}

static inline void fill(uint8_t *bytes, size_t length, unsigned seed) {
	for (size_t i = 0; i < length; i++) bytes[i] = (uint8_t)((i * seed + seed) % 251);
}

static inline int matches(const uint8_t *bytes, size_t length, unsigned seed) {
	for (size_t i = 0; i < length; i++) {
		if (bytes[i] != (uint8_t)((i * seed + seed) % 251)) return 0;
	}
	return 1;
}

static inline void *page_aligned(size_t size) {
	void *ptr;
	if (posix_memalign(&ptr, (size_t)sysconf(_SC_PAGESIZE), size)) {
		errno = ENOMEM;
		fail("posix_memalign");
	}
	memset(ptr, 0, size);
	return ptr;
}

/* The access byte of a key for the target region of `mode`: only read's is readable. */
static inline uint8_t mode_access(enum mode mode) {
	return mode == MODE_READ ? KEY_READ : KEY_WRITE;
}

struct remote_key {
	uint64_t address;
	uint64_t length;
	uint32_t rkey;
	uint8_t access;
};

static inline void put_le(uint8_t *at, uint64_t value, int bytes) {
	for (int i = 0; i < bytes; i++) at[i] = (uint8_t)(value >> (8 * i));
}

static inline uint64_t get_le(const uint8_t *at, int bytes) {
	uint64_t value = 0;
	for (int i = bytes - 1; i >= 0; i--) value = value << 8 | at[i];
	return value;
}

static inline void encode_key(uint8_t out[KEY_SIZE], const struct ibv_mr *mr, uint8_t access) {
	memset(out, 0, KEY_SIZE);
	out[0] = KEY_VERSION;
	out[1] = access;
	put_le(out + 4, mr->rkey, 4);
	put_le(out + 8, (uint64_t)(uintptr_t)mr->addr, 8);
	put_le(out + 16, mr->length, 8);
}

/* The key in `in`, or exit naming what is wrong with it. */
static inline struct remote_key decode_key(const uint8_t in[KEY_SIZE]) {
	if (in[0] != KEY_VERSION) mismatch("the key's version is not 1");
	if (in[1] != KEY_READ && in[1] != KEY_WRITE) mismatch("the key's access is neither 1 (read) nor 2 (write)");
	if (in[2] != 0 || in[3] != 0) mismatch("the key's reserved bytes are not 0");
	struct remote_key key = { get_le(in + 8, 8), get_le(in + 16, 8), (uint32_t)get_le(in + 4, 4), in[1] };
	if (key.length == 0) mismatch("the key's length is 0");
	return key;
}

/*
 * The buffers of one side: `messages` (rdma_reg_msgs, 4 slots of N: two receives, one send, one
 * local side of a read or a write), and the target region T.
 */
struct buffers {
	size_t size;
	uint8_t *messages;
	struct ibv_mr *messages_mr;
	uint8_t *target;
	struct ibv_mr *target_mr;
};

#define RECV_SLOT(b, i) ((b)->messages + (size_t)(i) * (b)->size)
#define SEND_SLOT(b) ((b)->messages + 2 * (b)->size)
#define LOCAL_SLOT(b) ((b)->messages + 3 * (b)->size)

static inline void register_buffers(struct rdma_cm_id *id, struct buffers *b, size_t size, enum mode mode) {
	b->size = size;
	b->messages = page_aligned(4 * size);
	b->messages_mr = rdma_reg_msgs(id, b->messages, 4 * size);
	if (b->messages_mr == NULL) fail("rdma_reg_msgs");
	b->target = page_aligned(size);
	if (mode == MODE_READ) b->target_mr = rdma_reg_read(id, b->target, size);
	else b->target_mr = rdma_reg_write(id, b->target, size);
	if (b->target_mr == NULL) fail("rdma_reg_read / rdma_reg_write (the target region)");
}

/* Regions go before the endpoint (rdma_reg_msgs(3)). */
static inline void release(struct rdma_cm_id *id, struct buffers *b) {
	check("rdma_dereg_mr (target)", rdma_dereg_mr(b->target_mr));
	check("rdma_dereg_mr (messages)", rdma_dereg_mr(b->messages_mr));
	rdma_destroy_ep(id);
	free(b->target);
	free(b->messages);
}

static inline void post_receives(struct rdma_cm_id *id, struct buffers *b) {
	for (int i = 0; i < 2; i++) {
		check("rdma_post_recv", rdma_post_recv(id, (void *)(uintptr_t)(i + 1), RECV_SLOT(b, i), b->size, b->messages_mr));
	}
}

static inline void expect_ok(const struct ibv_wc *wc, const char *what) {
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: %s completed with %s\n", program_name, what, ibv_wc_status_str(wc->status));
		exit(1);
	}
}

static inline struct ibv_wc send_completion(struct rdma_cm_id *id, const char *what) {
	struct ibv_wc wc;
	if (rdma_get_send_comp(id, &wc) <= 0) fail("rdma_get_send_comp");
	expect_ok(&wc, what);
	return wc;
}

static inline struct ibv_wc recv_completion(struct rdma_cm_id *id, const char *what) {
	struct ibv_wc wc;
	if (rdma_get_recv_comp(id, &wc) <= 0) fail("rdma_get_recv_comp");
	expect_ok(&wc, what);
	return wc;
}

/* The receive slot a completion landed in (wr_id 1 or 2, as post_receives gave them). */
static inline uint8_t *received(struct buffers *b, const struct ibv_wc *wc) {
	if (wc->wr_id != 1 && wc->wr_id != 2) mismatch("a receive completion with an unknown wr_id");
	return RECV_SLOT(b, wc->wr_id - 1);
}

static inline void send_bytes(struct rdma_cm_id *id, struct buffers *b, const void *bytes, size_t length) {
	memcpy(SEND_SLOT(b), bytes, length);
	check("rdma_post_send", rdma_post_send(id, NULL, SEND_SLOT(b), length, b->messages_mr, IBV_SEND_SIGNALED));
	send_completion(id, "a send");
}

static inline struct rdma_addrinfo *address_info(const char *address, const char *port, int passive) {
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (passive) hints.ai_flags = RAI_PASSIVE;
	int ret = rdma_getaddrinfo(address, port, &hints, &res);
	if (ret) {
		/* rdma_getaddrinfo returns an EAI_ code or -1 with errno. */
		if (ret != -1) errno = EADDRNOTAVAIL;
		fail("rdma_getaddrinfo");
	}
	return res;
}

static inline struct ibv_qp_init_attr queue_pair_attributes(void) {
	struct ibv_qp_init_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = 16;
	attr.cap.max_recv_wr = 16;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 64;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 0;
	return attr;
}

/*
 * rdma_connect's / rdma_accept's parameters, with librpma's retry counts: with none (the zeroed
 * default), one packet lost under load (Soft-RoCE under emulation loses some) ends the connection
 * with IBV_WC_RETRY_EXC_ERR.
 */
static inline struct rdma_conn_param connection_parameters(const void *private_data, uint8_t length) {
	struct rdma_conn_param param;
	memset(&param, 0, sizeof param);
	param.private_data = private_data;
	param.private_data_len = length;
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	return param;
}

#endif
