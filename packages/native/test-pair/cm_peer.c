/*
 * The far side of the two-host fault tests of librdmacm's endpoints (cmFaults.ts, vm/pair): a
 * program on librdmacm's verbs API that the test can kill, freeze or cut off, or that can be made
 * to behave badly on purpose. peer.c is its librpma sibling.
 *
 *   answer   listens on <address>:<port>; accepts every request (a thread each) with a 1 MiB
 *            target region readable and writable from the other side, its two keys (write, then
 *            read: 24 bytes each, cm_common.h's format) in the accept's private data; keeps 8
 *            receives of 4 KiB posted and sends every message back as it came; on DISCONNECTED
 *            it disconnects and destroys the endpoint (what a well-behaved peer does)
 *   silent   the same accept, then never looks at the endpoint again: no completion read, no
 *            event, no rdma_disconnect (a hung peer)
 *   client   connects to <address>:<port> (the test's listener) with no private data, prints
 *            "connected" or "connect failed <errno>", then waits to be killed
 *
 * Prints "ready" once listening (client: just before it connects), each line flushed.
 *
 *   cc -O2 -Wall -Wextra -pthread -o cm_peer cm_peer.c -lrdmacm -libverbs
 *   ./cm_peer 192.168.78.1 7700 answer
 */
#include "../../../bench/c/cm_common.h"
#include <poll.h>
#include <pthread.h>

#define SLOTS 8
#define SLOT 4096
#define TARGET (1 << 20)

static int silent;

static void post_slot(struct rdma_cm_id *id, uint8_t *messages, struct ibv_mr *mr, uint64_t slot) {
	check("rdma_post_recv", rdma_post_recv(id, (void *)(uintptr_t)slot, messages + slot * SLOT, SLOT, mr));
}

/* Echoes each message back from its own slot's bytes (the send waits for its completion). */
static int echo(struct rdma_cm_id *id, uint8_t *messages, struct ibv_mr *mr, struct ibv_wc *wc) {
	uint8_t *bytes = messages + wc->wr_id * SLOT;
	if (rdma_post_send(id, NULL, bytes, wc->byte_len, mr, IBV_SEND_SIGNALED)) return -1;
	struct ibv_wc sent;
	int n;
	while ((n = ibv_poll_cq(id->send_cq, 1, &sent)) == 0) {}
	if (n < 0 || sent.status != IBV_WC_SUCCESS) return -1;
	post_slot(id, messages, mr, wc->wr_id);
	return 0;
}

static void *serve(void *arg) {
	struct rdma_cm_id *id = arg;
	uint8_t *messages = page_aligned(SLOTS * SLOT);
	uint8_t *target = page_aligned(TARGET);
	struct ibv_mr *mr = rdma_reg_msgs(id, messages, SLOTS * SLOT);
	struct ibv_mr *target_mr = ibv_reg_mr(id->pd, target, TARGET,
					      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (mr == NULL || target_mr == NULL) fail("rdma_reg_msgs / ibv_reg_mr");
	for (uint64_t slot = 0; slot < SLOTS; slot++) post_slot(id, messages, mr, slot);
	uint8_t keys[2 * KEY_SIZE];
	encode_key(keys, target_mr, KEY_WRITE);
	encode_key(keys + KEY_SIZE, target_mr, KEY_READ);
	struct rdma_conn_param param = { .private_data = keys, .private_data_len = sizeof keys,
					 .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_accept(id, &param)) {
		printf("accept failed %d\n", errno);
		return NULL;
	}
	printf("established %u\n", id->qp->qp_num);
	if (silent) return NULL;
	check("ibv_req_notify_cq", ibv_req_notify_cq(id->recv_cq, 0));
	for (;;) {
		struct pollfd fds[2] = { { .fd = id->channel->fd, .events = POLLIN },
					 { .fd = id->recv_cq_channel->fd, .events = POLLIN } };
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR) continue;
			fail("poll");
		}
		if (fds[0].revents & POLLIN) {
			struct rdma_cm_event *event;
			if (rdma_get_cm_event(id->channel, &event)) fail("rdma_get_cm_event");
			enum rdma_cm_event_type type = event->event;
			rdma_ack_cm_event(event);
			printf("event %u %s\n", id->qp->qp_num, rdma_event_str(type));
			if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) break;
		}
		if (fds[1].revents & POLLIN) {
			struct ibv_cq *cq;
			void *context;
			if (ibv_get_cq_event(id->recv_cq_channel, &cq, &context)) fail("ibv_get_cq_event");
			ibv_ack_cq_events(cq, 1);
			check("ibv_req_notify_cq", ibv_req_notify_cq(cq, 0));
			struct ibv_wc wc;
			int n;
			while ((n = ibv_poll_cq(cq, 1, &wc)) > 0) {
				if (wc.status != IBV_WC_SUCCESS) continue; /* flushed: the disconnect event follows */
				if (echo(id, messages, mr, &wc)) printf("echo failed %u\n", id->qp->qp_num);
			}
		}
	}
	rdma_disconnect(id);
	rdma_dereg_mr(target_mr);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	free(target);
	free(messages);
	printf("closed\n");
	return NULL;
}

static struct ibv_qp_init_attr attributes(void) {
	struct ibv_qp_init_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	return attr;
}

int main(int argc, char **argv) {
	program_name = "cm_peer";
	if (argc != 4 || (strcmp(argv[3], "answer") && strcmp(argv[3], "silent") && strcmp(argv[3], "client"))) {
		fprintf(stderr, "usage: %s <address> <port> answer|silent|client\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	silent = strcmp(argv[3], "silent") == 0;
	struct ibv_qp_init_attr attr = attributes();

	if (strcmp(argv[3], "client") == 0) {
		struct rdma_addrinfo *res = address_info(argv[1], argv[2], 0);
		struct rdma_cm_id *id;
		check("rdma_create_ep", rdma_create_ep(&id, res, NULL, &attr));
		rdma_freeaddrinfo(res);
		printf("ready\n");
		if (rdma_connect(id, NULL)) printf("connect failed %d\n", errno);
		else printf("connected\n");
		for (;;) pause();
	}

	struct rdma_addrinfo *res = address_info(argv[1], argv[2], 1);
	struct rdma_cm_id *listener;
	check("rdma_create_ep (passive)", rdma_create_ep(&listener, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	check("rdma_listen", rdma_listen(listener, 16));
	printf("ready\n");
	for (;;) {
		struct rdma_cm_id *id;
		/* A request that failed before it was taken (its client gave up while this VM was
		 * frozen) comes as an event other than CONNECT_REQUEST: rdma_get_request says EINVAL. */
		if (rdma_get_request(listener, &id)) {
			printf("rdma_get_request failed %d\n", errno);
			continue;
		}
		pthread_t thread;
		if (pthread_create(&thread, NULL, serve, id)) fail("pthread_create");
		pthread_detach(thread);
	}
}
