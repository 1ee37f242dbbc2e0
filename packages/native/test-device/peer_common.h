/*
 * What the C peers of the device tests (feat_peer.c, srq_peer.c) share: fail-fast calls, checks
 * that print "ok <what>" or "FAIL <what>", the byte pattern both sides write, and a blocking wait
 * for the next completion of a CQ.
 */
#ifndef PEER_COMMON_H
#define PEER_COMMON_H

#include <librpma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;

static inline void need(const char *what, int ret) {
	if (ret) {
		printf("FAIL %s: %s\n", what, rpma_err_2str(ret));
		exit(1);
	}
}

static inline void expect(int ok, const char *what) {
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	if (!ok) failures++;
}

static inline uint8_t pattern(int i, int seed) { return (uint8_t)((i * seed + seed) % 251); }

/* The next completion of a CQ, waiting for it. */
static inline struct ibv_wc next_wc(struct rpma_cq *cq) {
	struct ibv_wc wc;
	int n = 0;
	for (;;) {
		int ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == 0 && n == 1) return wc;
		if (ret != RPMA_E_NO_COMPLETION) need("rpma_cq_get_wc", ret);
		need("rpma_cq_wait", rpma_cq_wait(cq));
	}
}

#endif
