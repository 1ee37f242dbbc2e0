/*
 * What the C benchmarks (cm_bench.c, tcp_bench.c) share to say where a round's time went: the
 * monotonic clock, and the process's CPU seconds (user + system, all threads) and voluntary context
 * switches (its threads' sleeps) so far.
 */
#ifndef BENCH_USAGE_H
#define BENCH_USAGE_H
#include <sys/resource.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct usage {
	double cpu;
	long sleeps;
};

static struct usage usage_now(void) {
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	struct usage u = { r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6,
			   r.ru_nvcsw };
	return u;
}
#endif
