/*
 * The TCP floor of bench/rpc.ts (issue 31): one TCP connection from this process to itself on
 * argv[1] (the loopback), port argv[2], the same exchange as cm_bench.c's pingpong over the RDMA
 * device, so that an RPC's cost over each transport can be read against what C pays for the bare
 * round trip on it in the same boot.
 *
 * A server thread accepts one connection and echoes every message back (it knows a message's size
 * from its 4-byte length prefix). The client (main) measures:
 *
 *   pingpong <bytes>:<round trips>   one message there and its echo back, one at a time: the mean
 *                                    µs per round trip (best of 3 rounds after a warm-up)
 *
 * Blocking sockets with TCP_NODELAY on both ends (as Node's net sockets: noDelay is their default),
 * so each side sleeps in read until the other's message is in. Prints one line per argument, as
 * cm_bench.c: "pingpong <bytes> latency_us <µs> cpu_us <µs> sleeps <n>".
 *
 *   cc -O2 -Wall -Wextra -o tcp_bench tcp_bench.c -lpthread
 *   ./tcp_bench 127.0.0.1 7900 pingpong:64:2000 pingpong:65536:300
 */
#include "bench_usage.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_SIZE 65536
#define WARMUP 50

static void fail(const char *what) {
	perror(what);
	exit(1);
}


/* Reads exactly n bytes; 0 when the other side closed first. */
static int read_all(int fd, uint8_t *at, size_t n) {
	while (n > 0) {
		ssize_t r = read(fd, at, n);
		if (r == 0) return 0;
		if (r < 0) fail("read");
		at += r;
		n -= (size_t)r;
	}
	return 1;
}

static void write_all(int fd, const uint8_t *at, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, at, n);
		if (w < 0) fail("write");
		at += w;
		n -= (size_t)w;
	}
}

static void no_delay(int fd) {
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)) fail("setsockopt TCP_NODELAY");
}

static void *serve(void *arg) {
	int listener = *(int *)arg;
	int fd = accept(listener, NULL, NULL);
	if (fd < 0) fail("accept");
	no_delay(fd);
	static uint8_t message[4 + MAX_SIZE];
	for (;;) {
		if (!read_all(fd, message, 4)) break;
		uint32_t size;
		memcpy(&size, message, 4);
		if (size > MAX_SIZE) {
			fprintf(stderr, "tcp_bench: a message of %u bytes\n", size);
			exit(1);
		}
		if (!read_all(fd, message + 4, size)) break;
		write_all(fd, message, 4 + size);
	}
	close(fd);
	return NULL;
}

/* Mean seconds per round trip. */
static double pingpong(int fd, uint8_t *buffer, uint8_t *echo, uint32_t size, long trips) {
	memcpy(buffer, &size, 4);
	double t0 = now();
	for (long i = 0; i < trips; i++) {
		write_all(fd, buffer, 4 + size);
		if (!read_all(fd, echo, 4 + size)) {
			fprintf(stderr, "tcp_bench: the echo ended early\n");
			exit(1);
		}
	}
	return (now() - t0) / trips;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: %s <address> <port> pingpong:<bytes>:<count>...\n", argv[0]);
		return 2;
	}
	struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (inet_pton(AF_INET, argv[1], &address.sin_addr) != 1) {
		fprintf(stderr, "tcp_bench: not an IPv4 address: %s\n", argv[1]);
		return 2;
	}
	int listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0) fail("socket");
	int one = 1;
	setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(listener, (struct sockaddr *)&address, sizeof address)) fail("bind");
	if (listen(listener, 1)) fail("listen");
	pthread_t server_thread;
	if (pthread_create(&server_thread, NULL, serve, &listener)) fail("pthread_create");

	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0) fail("socket");
	if (connect(fd, (struct sockaddr *)&address, sizeof address)) fail("connect");
	no_delay(fd);
	static uint8_t buffer[4 + MAX_SIZE], echo[4 + MAX_SIZE];
	memset(buffer, 0xa5, sizeof buffer);

	for (int a = 3; a < argc; a++) {
		char what[16];
		size_t size;
		long count;
		int parsed = sscanf(argv[a], "%15[a-z]:%zu:%ld", what, &size, &count) == 3 && size > 0 && count > 0;
		if (!(parsed && strcmp(what, "pingpong") == 0 && size <= MAX_SIZE)) {
			fprintf(stderr, "tcp_bench: bad argument %s: pingpong:<bytes up to %d>:<trips>\n", argv[a], MAX_SIZE);
			return 2;
		}
		pingpong(fd, buffer, echo, (uint32_t)size, WARMUP);
		double best_latency = 1e9;
		struct usage best = { 0, 0 };
		for (int round = 0; round < 3; round++) {
			struct usage before = usage_now();
			double l = pingpong(fd, buffer, echo, (uint32_t)size, count);
			struct usage after = usage_now();
			if (l < best_latency) {
				best_latency = l;
				best = (struct usage){ after.cpu - before.cpu, after.sleeps - before.sleeps };
			}
		}
		printf("pingpong %zu latency_us %.2f cpu_us %.2f sleeps %.2f\n", size, best_latency * 1e6, best.cpu * 1e6 / count,
		       (double)best.sleeps / count);
		fflush(stdout);
	}
	close(fd);
	pthread_join(server_thread, NULL);
	close(listener);
	return 0;
}
