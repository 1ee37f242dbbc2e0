/*
 * The baseline for the write benchmark: rpma_write latency and bandwidth in C, over a connection
 * from this process to itself on the device at argv[1], port argv[2].
 *
 * A server thread registers a region (WRITE_DST | READ_SRC | FLUSH_TYPE_VISIBILITY), listens,
 * accepts one connection, sends the region's descriptor as the accept's private data, and waits
 * for the connection to close. The client (main) connects, registers its source region
 * (WRITE_SRC) and, for each "<bytes>:<latency writes>:<bandwidth writes>" argument:
 *
 *   latency    one rpma_write at a time, each waited for: the mean µs per write (best of 3 rounds);
 *   bandwidth  a window of W writes in flight (W = the send queue size; a completion frees a slot
 *              that is refilled at once) over consecutive slots of the remote region: MB/s
 *              (10^6 bytes per second, best of 3 rounds).
 *
 * Completions are waited for the way the library waits: through the queue's completion channel
 * (rpma_cq_wait, which reads the channel's event, acknowledges it and re-arms the queue, then
 * rpma_cq_get_wc until the queue is empty). Busy-polling rpma_cq_get_wc would be faster still,
 * but the library never spins (it sleeps in libuv's epoll on the channel's descriptor), so that
 * would measure a different mechanism. The connection has the library's default configuration
 * with the send queue set to W: sq W, rq 64, cq W + 64, no receive CQ, no shared channel,
 * timeout 5 s. Every write asks for a completion (RPMA_F_COMPLETION_ALWAYS), as the library's do.
 *
 * Prints one line per size: "write <bytes> latency_us <µs> bandwidth_MBps <MB/s>".
 *
 *   cc -O2 -Wall -Wextra -o write_bench write_bench.c $(pkg-config --cflags --libs librpma) -lpthread
 *   ./write_bench 192.168.77.1 7480 64:2000:20000 4096:2000:20000 65536:1000:4000
 */
#include <infiniband/verbs.h>
#include <librpma.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WINDOW 16
#define RQ_SIZE 64
#define MAX_SIZE 65536
#define WARMUP 50

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The process's CPU time (user + system, every thread). */
static double cpu_seconds(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, int ret) {
	fprintf(stderr, "write_bench: %s: %s\n", what, rpma_err_2str(ret));
	exit(1);
}

static void check(const char *what, int ret) {
	if (ret) die(what, ret);
}

static struct rpma_conn_cfg *config(void) {
	struct rpma_conn_cfg *cfg;
	check("rpma_conn_cfg_new", rpma_conn_cfg_new(&cfg));
	check("rpma_conn_cfg_set_timeout", rpma_conn_cfg_set_timeout(cfg, 5000));
	check("rpma_conn_cfg_set_sq_size", rpma_conn_cfg_set_sq_size(cfg, WINDOW));
	check("rpma_conn_cfg_set_rq_size", rpma_conn_cfg_set_rq_size(cfg, RQ_SIZE));
	check("rpma_conn_cfg_set_cq_size", rpma_conn_cfg_set_cq_size(cfg, WINDOW + RQ_SIZE));
	check("rpma_conn_cfg_set_rcq_size", rpma_conn_cfg_set_rcq_size(cfg, 0));
	check("rpma_conn_cfg_set_compl_channel", rpma_conn_cfg_set_compl_channel(cfg, false));
	return cfg;
}

static void *page_aligned(size_t size) {
	void *ptr;
	if (posix_memalign(&ptr, (size_t)sysconf(_SC_PAGESIZE), size)) {
		fprintf(stderr, "write_bench: posix_memalign failed\n");
		exit(1);
	}
	memset(ptr, 0xa5, size);
	return ptr;
}

static void expect_event(struct rpma_conn *conn, enum rpma_conn_event expected, const char *who) {
	enum rpma_conn_event event;
	check("rpma_conn_next_event", rpma_conn_next_event(conn, &event));
	if (event != expected) {
		fprintf(stderr, "write_bench: %s: unexpected connection event %s\n", who, rpma_utils_conn_event_2str(event));
		exit(1);
	}
}

/* ---- the server thread ---- */

struct server {
	struct rpma_peer *peer;
	const char *address;
	const char *port;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int listening;
};

static void *serve(void *arg) {
	struct server *s = arg;
	size_t size = (size_t)WINDOW * MAX_SIZE;
	void *memory = page_aligned(size);
	struct rpma_mr_local *mr;
	check("rpma_mr_reg (server)",
	      rpma_mr_reg(s->peer, memory, size,
			  RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr));
	size_t descriptor_size;
	check("rpma_mr_get_descriptor_size", rpma_mr_get_descriptor_size(mr, &descriptor_size));
	char descriptor[256];
	if (descriptor_size > sizeof descriptor) die("rpma_mr_get_descriptor_size", RPMA_E_NOSUPP);
	check("rpma_mr_get_descriptor", rpma_mr_get_descriptor(mr, descriptor));

	struct rpma_ep *ep;
	check("rpma_ep_listen", rpma_ep_listen(s->peer, s->address, s->port, &ep));
	pthread_mutex_lock(&s->lock);
	s->listening = 1;
	pthread_cond_signal(&s->changed);
	pthread_mutex_unlock(&s->lock);

	struct rpma_conn_cfg *cfg = config();
	struct rpma_conn_req *req;
	check("rpma_ep_next_conn_req", rpma_ep_next_conn_req(ep, cfg, &req));
	struct rpma_conn_private_data pdata = { descriptor, (uint8_t)descriptor_size };
	struct rpma_conn *conn;
	check("rpma_conn_req_connect (accept)", rpma_conn_req_connect(&req, &pdata, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED, "server");
	/* Nothing to do while the client writes: one-sided writes need no CPU here. */
	expect_event(conn, RPMA_CONN_CLOSED, "server");
	check("rpma_conn_disconnect (server)", rpma_conn_disconnect(conn));
	check("rpma_conn_delete (server)", rpma_conn_delete(&conn));
	check("rpma_ep_shutdown", rpma_ep_shutdown(&ep));
	check("rpma_conn_cfg_delete", rpma_conn_cfg_delete(&cfg));
	check("rpma_mr_dereg (server)", rpma_mr_dereg(&mr));
	free(memory);
	return NULL;
}

/* ---- the client ---- */

/*
 * Waits on the completion channel until at least one completion is collected; collects every
 * completion in the queue. Returns how many.
 */
static int reap(struct rpma_cq *cq) {
	int completed = 0;
	while (completed == 0) {
		int ret = rpma_cq_wait(cq);
		if (ret == RPMA_E_NO_COMPLETION) continue;
		check("rpma_cq_wait", ret);
		for (;;) {
			struct ibv_wc wc[32];
			int got = 0;
			ret = rpma_cq_get_wc(cq, 32, wc, &got);
			if (ret == RPMA_E_NO_COMPLETION) break;
			check("rpma_cq_get_wc", ret);
			for (int i = 0; i < got; i++) {
				if (wc[i].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "write_bench: completion status %s\n", ibv_wc_status_str(wc[i].status));
					exit(1);
				}
			}
			completed += got;
			if (got < 32) break;
		}
	}
	return completed;
}

static void post(struct rpma_conn *conn, struct rpma_mr_remote *dst, struct rpma_mr_local *src, size_t slot,
		 size_t size) {
	check("rpma_write", rpma_write(conn, dst, slot * size, src, slot * size, size, RPMA_F_COMPLETION_ALWAYS, NULL));
}

/* Mean seconds per write, one write in flight at a time. */
static double latency(struct rpma_conn *conn, struct rpma_cq *cq, struct rpma_mr_remote *dst,
		      struct rpma_mr_local *src, size_t size, long writes) {
	double t0 = now();
	for (long i = 0; i < writes; i++) {
		post(conn, dst, src, 0, size);
		reap(cq);
	}
	return (now() - t0) / writes;
}

/* Bytes per second, WINDOW writes in flight. */
static double bandwidth(struct rpma_conn *conn, struct rpma_cq *cq, struct rpma_mr_remote *dst,
			struct rpma_mr_local *src, size_t size, long writes) {
	double t0 = now();
	long posted = 0, completed = 0;
	while (posted < writes && posted < WINDOW) {
		post(conn, dst, src, (size_t)(posted % WINDOW), size);
		posted++;
	}
	while (completed < writes) {
		completed += reap(cq);
		while (posted < writes && posted - completed < WINDOW) {
			post(conn, dst, src, (size_t)(posted % WINDOW), size);
			posted++;
		}
	}
	return (double)writes * size / (now() - t0);
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: %s <address> <port> <bytes>:<latency writes>:<bandwidth writes>...\n", argv[0]);
		return 2;
	}
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	int ret = rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx);
	if (ret == 0) ret = rpma_peer_new(ctx, &peer);
	if (ret) {
		fprintf(stderr, "no peer at %s: %s\n", argv[1], rpma_err_2str(ret));
		return 1;
	}

	struct server s = { peer, argv[1], argv[2], PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	pthread_t server_thread;
	if (pthread_create(&server_thread, NULL, serve, &s)) {
		fprintf(stderr, "write_bench: pthread_create failed\n");
		return 1;
	}
	pthread_mutex_lock(&s.lock);
	while (!s.listening) pthread_cond_wait(&s.changed, &s.lock);
	pthread_mutex_unlock(&s.lock);

	struct rpma_conn_cfg *cfg = config();
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	check("rpma_conn_req_new", rpma_conn_req_new(peer, argv[1], argv[2], cfg, &req));
	check("rpma_conn_req_connect", rpma_conn_req_connect(&req, NULL, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED, "client");
	struct rpma_conn_private_data pdata;
	check("rpma_conn_get_private_data", rpma_conn_get_private_data(conn, &pdata));
	struct rpma_mr_remote *dst;
	check("rpma_mr_remote_from_descriptor", rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &dst));
	struct rpma_cq *cq;
	check("rpma_conn_get_cq", rpma_conn_get_cq(conn, &cq));

	size_t src_size = (size_t)WINDOW * MAX_SIZE;
	void *src_memory = page_aligned(src_size);
	struct rpma_mr_local *src;
	check("rpma_mr_reg (client)", rpma_mr_reg(peer, src_memory, src_size, RPMA_MR_USAGE_WRITE_SRC, &src));

	for (int a = 3; a < argc; a++) {
		char *end;
		size_t size = strtoull(argv[a], &end, 10);
		long latency_writes = *end == ':' ? strtol(end + 1, &end, 10) : 1000;
		long bandwidth_writes = *end == ':' ? strtol(end + 1, &end, 10) : 10000;
		if (size == 0 || size > MAX_SIZE || latency_writes <= 0 || bandwidth_writes <= 0) {
			fprintf(stderr, "write_bench: bad argument %s (sizes up to %d)\n", argv[a], MAX_SIZE);
			return 2;
		}
		latency(conn, cq, dst, src, size, WARMUP);
		double best_latency = 1e9, best_bandwidth = 0, latency_cpu = 0, bandwidth_cpu = 0;
		for (int round = 0; round < 3; round++) {
			double cpu = cpu_seconds();
			double l = latency(conn, cq, dst, src, size, latency_writes);
			cpu = (cpu_seconds() - cpu) / latency_writes;
			if (l < best_latency) best_latency = l, latency_cpu = cpu;
		}
		bandwidth(conn, cq, dst, src, size, WARMUP);
		for (int round = 0; round < 3; round++) {
			double cpu = cpu_seconds();
			double b = bandwidth(conn, cq, dst, src, size, bandwidth_writes);
			cpu = (cpu_seconds() - cpu) / bandwidth_writes;
			if (b > best_bandwidth) best_bandwidth = b, bandwidth_cpu = cpu;
		}
		/* The process's CPU per write in the best round (both threads; the server's waits for its end). */
		printf("write %zu latency_us %.2f bandwidth_MBps %.2f latency_cpu_us %.2f bandwidth_cpu_us %.2f\n", size,
		       best_latency * 1e6, best_bandwidth / 1e6, latency_cpu * 1e6, bandwidth_cpu * 1e6);
		fflush(stdout);
	}

	check("rpma_mr_dereg (client)", rpma_mr_dereg(&src));
	check("rpma_mr_remote_delete", rpma_mr_remote_delete(&dst));
	check("rpma_conn_disconnect", rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED, "client");
	check("rpma_conn_delete", rpma_conn_delete(&conn));
	check("rpma_conn_cfg_delete", rpma_conn_cfg_delete(&cfg));
	pthread_join(server_thread, NULL);
	free(src_memory);
	check("rpma_peer_delete", rpma_peer_delete(&peer));
	return 0;
}
