/*
 * The C baseline of bench/cm.ts (issue 20): librdmacm's verbs API over one connection from this
 * process to itself on the device at argv[1], port argv[2].
 *
 * A server thread listens (rdma_create_ep RAI_PASSIVE + rdma_listen), takes one request, registers
 * an echo buffer (rdma_reg_msgs) and a write target of WINDOW x 64 KiB (rdma_reg_write), posts a
 * receive, accepts with the target's key in the private data (cm_common.h's format) and echoes
 * every message it receives until its receive is flushed by the disconnect. The client (main)
 * connects and measures:
 *
 *   pingpong <bytes>:<round trips>   one message there and its echo back, one at a time: the mean
 *                                    µs per round trip (best of 3 rounds after a warm-up)
 *   write <bytes>:<writes>           rdma_post_write of <bytes> with WINDOW in flight (a completion
 *                                    frees a slot, refilled at once) over consecutive slots of the
 *                                    target: MB/s (10^6 bytes per second, best of 3 rounds)
 *
 * Completions are waited for the way the library waits: on the completion channel
 * (rdma_get_send_comp / rdma_get_recv_comp poll once, then arm the queue and sleep on its channel),
 * never by spinning. Every request is signalled, and a message of at most INLINE bytes goes inline
 * (IBV_SEND_INLINE), as the library's defaults.
 *
 * Prints one line per argument: "pingpong <bytes> latency_us <µs> ..." or "write <bytes> bandwidth_MBps
 * <MB/s> ...", then, for the best round, "cpu_us <µs> sleeps <n>": the process's CPU time (user +
 * system, both threads) and voluntary context switches per round trip or per write.
 *
 * With `serve` in place of the measurements, the server alone: it prints "listening", echoes the
 * messages of one client in another program (bench/polling.ts's fast peer) and ends when that client
 * disconnects.
 *
 *   cc -O2 -Wall -Wextra -o cm_bench cm_bench.c -lrdmacm -libverbs -lpthread
 *   ./cm_bench 192.168.77.1 7700 pingpong:64:2000 write:65536:2000
 *   ./cm_bench 192.168.77.1 7701 serve
 */
#include "bench_usage.h"
#include "cm_common.h"
#include <pthread.h>

#define WINDOW 16
#define MAX_SIZE 65536
#define WARMUP 50
/* The inline size asked for (queue_pair_attributes), up to which the library sends inline by default. */
#define INLINE 64

/* ---- the server thread ---- */

static void completed(struct ibv_wc *wc, const char *what) {
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "cm_bench: %s completed with %s\n", what, ibv_wc_status_str(wc->status));
		exit(1);
	}
}

struct server {
	const char *address;
	const char *port;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int listening;
	/* Serving another program's client (the `serve` argument): its disconnect ends the echo. */
	int alone;
};

static void *serve(void *arg) {
	struct server *s = arg;
	struct rdma_addrinfo *res = address_info(s->address, s->port, 1);
	struct ibv_qp_init_attr attr = queue_pair_attributes();
	struct rdma_cm_id *listener, *id;
	check("rdma_create_ep (passive)", rdma_create_ep(&listener, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	check("rdma_listen", rdma_listen(listener, 1));
	pthread_mutex_lock(&s->lock);
	s->listening = 1;
	pthread_cond_signal(&s->changed);
	pthread_mutex_unlock(&s->lock);

	check("rdma_get_request", rdma_get_request(listener, &id));
	uint8_t *echo = page_aligned(2 * MAX_SIZE);
	struct ibv_mr *echo_mr = rdma_reg_msgs(id, echo, 2 * MAX_SIZE);
	if (echo_mr == NULL) fail("rdma_reg_msgs (server)");
	uint8_t *target = page_aligned((size_t)WINDOW * MAX_SIZE);
	struct ibv_mr *target_mr = rdma_reg_write(id, target, (size_t)WINDOW * MAX_SIZE);
	if (target_mr == NULL) fail("rdma_reg_write");
	/* Two receive slots in turn: the next message's receive is posted before this one is echoed. */
	uint8_t *slots[2] = { echo, echo + MAX_SIZE };
	int current = 0;
	check("rdma_post_recv (server)", rdma_post_recv(id, NULL, slots[0], MAX_SIZE, echo_mr));
	uint8_t key[KEY_SIZE];
	encode_key(key, target_mr, KEY_WRITE);
	struct rdma_conn_param accept = connection_parameters(key, KEY_SIZE);
	check("rdma_accept", rdma_accept(id, &accept));

	for (;;) {
		struct ibv_wc wc;
		if (rdma_get_recv_comp(id, &wc) <= 0) fail("rdma_get_recv_comp (server)");
		if (s->alone && wc.status == IBV_WC_WR_FLUSH_ERR) break; /* another program's client disconnected */
		completed(&wc, "a receive (server)");
		if (wc.byte_len == 0) break; /* the client's stop: it disconnects next */
		check("rdma_post_recv (server)", rdma_post_recv(id, NULL, slots[1 - current], MAX_SIZE, echo_mr));
		check("rdma_post_send (echo)", rdma_post_send(id, NULL, slots[current], wc.byte_len, echo_mr,
							     IBV_SEND_SIGNALED | (wc.byte_len <= INLINE ? IBV_SEND_INLINE : 0)));
		if (rdma_get_send_comp(id, &wc) <= 0) fail("rdma_get_send_comp (server)");
		current = 1 - current;
	}
	rdma_disconnect(id);
	check("rdma_dereg_mr (target)", rdma_dereg_mr(target_mr));
	check("rdma_dereg_mr (echo)", rdma_dereg_mr(echo_mr));
	rdma_destroy_ep(id);
	rdma_destroy_ep(listener);
	free(target);
	free(echo);
	return NULL;
}

/* ---- the client ---- */

/* Seconds the client spent in its posting calls (rdma_post_recv + rdma_post_send: on Soft-RoCE the
 * send's processing runs inside the call), for the breakdown. */
static double posting;

/* Mean seconds per round trip. */
static double pingpong(struct rdma_cm_id *id, uint8_t *buffer, struct ibv_mr *mr, size_t size, long trips) {
	double t0 = now();
	int flags = IBV_SEND_SIGNALED | (size <= INLINE ? IBV_SEND_INLINE : 0);
	for (long i = 0; i < trips; i++) {
		struct ibv_wc wc;
		double p0 = now();
		check("rdma_post_recv", rdma_post_recv(id, NULL, buffer + WINDOW * MAX_SIZE, MAX_SIZE, mr));
		check("rdma_post_send", rdma_post_send(id, NULL, buffer, size, mr, flags));
		posting += now() - p0;
		if (rdma_get_send_comp(id, &wc) <= 0) fail("rdma_get_send_comp");
		completed(&wc, "a send");
		if (rdma_get_recv_comp(id, &wc) <= 0) fail("rdma_get_recv_comp");
		completed(&wc, "a receive");
		if (wc.byte_len != size) mismatch("the echo's length");
	}
	return (now() - t0) / trips;
}

/* Bytes per second, WINDOW writes in flight. */
static double bandwidth(struct rdma_cm_id *id, uint8_t *buffer, struct ibv_mr *mr, const struct remote_key *key,
			size_t size, long writes) {
	double t0 = now();
	long posted = 0, done = 0;
	while (done < writes) {
		while (posted < writes && posted - done < WINDOW) {
			size_t slot = (size_t)(posted % WINDOW) * size;
			check("rdma_post_write", rdma_post_write(id, NULL, buffer + slot, size, mr, IBV_SEND_SIGNALED,
								 key->address + slot, key->rkey));
			posted++;
		}
		struct ibv_wc wc;
		if (rdma_get_send_comp(id, &wc) <= 0) fail("rdma_get_send_comp");
		completed(&wc, "a write");
		done++;
	}
	return (double)writes * size / (now() - t0);
}

int main(int argc, char **argv) {
	program_name = "cm_bench";
	if (argc < 4) {
		fprintf(stderr, "usage: %s <address> <port> (pingpong|write):<bytes>:<count>... | serve\n", argv[0]);
		return 2;
	}
	int alone = strcmp(argv[3], "serve") == 0;
	struct server s = { argv[1], argv[2], PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, alone };
	pthread_t server_thread;
	if (pthread_create(&server_thread, NULL, serve, &s)) fail("pthread_create");
	pthread_mutex_lock(&s.lock);
	while (!s.listening) pthread_cond_wait(&s.changed, &s.lock);
	pthread_mutex_unlock(&s.lock);
	if (alone) {
		/* The echo alone, for a client in another process (bench/polling.ts): until it disconnects. */
		printf("listening\n");
		fflush(stdout);
		pthread_join(server_thread, NULL);
		return 0;
	}

	struct rdma_addrinfo *res = address_info(argv[1], argv[2], 0);
	struct ibv_qp_init_attr attr = queue_pair_attributes();
	struct rdma_cm_id *id;
	check("rdma_create_ep", rdma_create_ep(&id, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	size_t buffer_size = (size_t)(WINDOW + 1) * MAX_SIZE; /* the writes' slots, then the echo's */
	uint8_t *buffer = page_aligned(buffer_size);
	memset(buffer, 0xa5, buffer_size);
	struct ibv_mr *mr = rdma_reg_msgs(id, buffer, buffer_size);
	if (mr == NULL) fail("rdma_reg_msgs");
	struct rdma_conn_param conn = connection_parameters(NULL, 0);
	check("rdma_connect", rdma_connect(id, &conn));
	const struct rdma_conn_param *accepted = &id->event->param.conn;
	if (accepted->private_data_len < KEY_SIZE) mismatch("the accept carries no key");
	struct remote_key key = decode_key(accepted->private_data);

	for (int a = 3; a < argc; a++) {
		char what[16];
		size_t size;
		long count;
		int parsed = sscanf(argv[a], "%15[a-z]:%zu:%ld", what, &size, &count) == 3 && size > 0 && count > 0;
		int is_pingpong = parsed && strcmp(what, "pingpong") == 0;
		int is_write = parsed && strcmp(what, "write") == 0;
		if (!(is_pingpong && size <= MAX_SIZE) && !(is_write && size <= MAX_SIZE)) {
			fprintf(stderr, "cm_bench: bad argument %s: pingpong:<bytes up to %d>:<trips> or write:<bytes up to %d>:<writes>\n",
				argv[a], MAX_SIZE, MAX_SIZE);
			return 2;
		}
		double best_latency = 1e9, best_bandwidth = 0;
		struct usage best = { 0, 0 };
		double best_posting = 0;
		if (is_pingpong) {
			pingpong(id, buffer, mr, size, WARMUP);
			for (int round = 0; round < 3; round++) {
				struct usage before = usage_now();
				posting = 0;
				double l = pingpong(id, buffer, mr, size, count);
				struct usage after = usage_now();
				if (l < best_latency) {
					best_latency = l;
					best = (struct usage){ after.cpu - before.cpu, after.sleeps - before.sleeps };
					best_posting = posting;
				}
			}
			printf("pingpong %zu latency_us %.2f cpu_us %.2f sleeps %.2f posting_us %.2f\n", size, best_latency * 1e6,
			       best.cpu * 1e6 / count, (double)best.sleeps / count, best_posting * 1e6 / count);
		} else {
			bandwidth(id, buffer, mr, &key, size, WARMUP);
			for (int round = 0; round < 3; round++) {
				struct usage before = usage_now();
				double b = bandwidth(id, buffer, mr, &key, size, count);
				struct usage after = usage_now();
				if (b > best_bandwidth) {
					best_bandwidth = b;
					best = (struct usage){ after.cpu - before.cpu, after.sleeps - before.sleeps };
				}
			}
			printf("write %zu bandwidth_MBps %.2f cpu_us %.2f sleeps %.2f\n", size, best_bandwidth / 1e6,
			       best.cpu * 1e6 / count, (double)best.sleeps / count);
		}
		fflush(stdout);
	}

	/* An empty message stops the echo: the server's receive would not be flushed by a disconnect
	 * until the server itself calls rdma_disconnect, and rdma_disconnect waits for the peer's. */
	check("rdma_post_send (stop)", rdma_post_send(id, NULL, buffer, 0, mr, IBV_SEND_SIGNALED));
	struct ibv_wc wc;
	if (rdma_get_send_comp(id, &wc) <= 0) fail("rdma_get_send_comp");
	completed(&wc, "the stop");
	check("rdma_disconnect", rdma_disconnect(id));
	pthread_join(server_thread, NULL);
	check("rdma_dereg_mr", rdma_dereg_mr(mr));
	rdma_destroy_ep(id);
	free(buffer);
	return 0;
}
