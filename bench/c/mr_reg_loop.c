/*
 * The baseline for the registration benchmark: rpma_mr_reg + rpma_mr_dereg of one buffer in a
 * loop, in C, on the device at argv[1]. Prints one line per size: "<bytes> <pairs/s>".
 *
 *   cc -O2 -o mr_reg_loop mr_reg_loop.c $(pkg-config --cflags --libs librpma)
 *   ./mr_reg_loop 192.168.77.1 4096:20000 65536:20000 1048576:2000 16777216:200
 */
#include <librpma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: %s <address> <bytes>:<iterations>...\n", argv[0]);
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
	long page = sysconf(_SC_PAGESIZE);
	for (int a = 2; a < argc; a++) {
		size_t size = strtoull(argv[a], NULL, 10);
		const char *colon = strchr(argv[a], ':');
		long iterations = colon ? strtol(colon + 1, NULL, 10) : 1000;
		void *ptr;
		if (posix_memalign(&ptr, page, size)) return 1;
		memset(ptr, 0, size);
		double best = 0;
		for (int round = 0; round < 3; round++) {
			double t0 = now();
			for (long i = 0; i < iterations; i++) {
				struct rpma_mr_local *mr;
				if ((ret = rpma_mr_reg(peer, ptr, size, RPMA_MR_USAGE_WRITE_DST, &mr)) ||
				    (ret = rpma_mr_dereg(&mr))) {
					fprintf(stderr, "rpma_mr_reg/dereg: %s\n", rpma_err_2str(ret));
					return 1;
				}
			}
			double rate = iterations / (now() - t0);
			if (rate > best) best = rate;
		}
		printf("%zu %.1f\n", size, best);
		free(ptr);
	}
	rpma_peer_delete(&peer);
	return 0;
}
