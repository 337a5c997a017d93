/*
 * tests/bench/sendpath.c - what a large read reply costs the sender, by
 * the way it goes into the socket: a plain send (the kernel copies the
 * data into socket buffers), send with MSG_ZEROCOPY (the pages are pinned
 * and referenced; a completion on the error queue says when they may
 * change again), and vmsplice + splice (the pages are referenced through a
 * pipe).  Issue 14 asks to measure these before deciding how flashd sends
 * 1 MiB replies.
 *
 * One thread sends `--mb` MiB as messages of `--msg` bytes taken from
 * random 4 KiB-aligned offsets of a `--src` MiB buffer (like pages of a
 * mapped NAND image, mostly not in the CPU cache); another thread receives
 * them (like fio) over TCP on 127.0.0.1 or a unix socket.  Printed per
 * mode: throughput and each thread's CPU time per GiB (the sender's is
 * what the ioDimm thread would pay), the median of `--reps` runs; for
 * MSG_ZEROCOPY also how many sends the kernel reported as copied after
 * all (SO_EE_CODE_ZEROCOPY_COPIED: on loopback the receiving socket gets
 * a copy, so the pages are copied anyway, once).
 *
 * Built by make (build/sendpath); make bench runs it: build/sendpath [--unix]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

enum mode { M_COPY, M_ZEROCOPY, M_SPLICE, NMODES };
static const char *mode_name[] = { "send (copy)", "send MSG_ZEROCOPY", "vmsplice + splice" };

struct run {
	int fd;
	uint64_t bytes;
	double cpu_s;
};

static double now_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void *receiver(void *arg)
{
	struct run *r = arg;
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	uint64_t got = 0;
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	while (got < r->bytes) {
		ssize_t n = recv(r->fd, buf, cap, 0);
		if (n <= 0)
			die("recv");
		got += (uint64_t)n;
	}
	r->cpu_s = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	free(buf);
	return NULL;
}

static void connected_pair(bool unix_sock, int *tx, int *rx)
{
	if (unix_sock) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			die("socketpair");
		*tx = sv[0];
		*rx = sv[1];
		return;
	}
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &al))
		die("listen");
	*tx = socket(AF_INET, SOCK_STREAM, 0);
	if (*tx < 0 || connect(*tx, (struct sockaddr *)&a, sizeof a))
		die("connect");
	*rx = accept(l, NULL, NULL);
	if (*rx < 0)
		die("accept");
	close(l);
	int one = 1;
	setsockopt(*tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Reap MSG_ZEROCOPY completions; returns how many sends they cover. */
static uint64_t zc_reap(int fd, bool wait, uint64_t *copied)
{
	uint64_t n = 0;
	for (;;) {
		char cbuf[128];
		struct msghdr m = { .msg_control = cbuf, .msg_controllen = sizeof cbuf };
		if (recvmsg(fd, &m, MSG_ERRQUEUE | (wait ? 0 : MSG_DONTWAIT)) < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return n;
			if (errno == EINTR)
				continue;
			die("recvmsg errqueue");
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			struct sock_extended_err e;
			memcpy(&e, CMSG_DATA(c), sizeof e);
			if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			uint64_t k = (uint64_t)(e.ee_data - e.ee_info) + 1;
			n += k;
			if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
				*copied += k;
		}
		wait = false;
	}
}

static double run_once(enum mode mode, bool unix_sock, const char *src, size_t src_len,
		       size_t msg, uint64_t total, double *tx_cpu, double *rx_cpu, uint64_t *zc_copied,
		       uint64_t *zc_sends)
{
	int tx, rx;
	connected_pair(unix_sock, &tx, &rx);
	if (mode == M_ZEROCOPY) {
		int one = 1;
		if (setsockopt(tx, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)) {
			close(tx);
			close(rx);
			return -1; /* not offered on this socket type */
		}
	}
	int pfd[2] = { -1, -1 };
	if (mode == M_SPLICE) {
		if (pipe(pfd))
			die("pipe");
		if (fcntl(pfd[1], F_SETPIPE_SZ, (int)(msg > 65536 ? msg : 65536)) < 0)
			die("F_SETPIPE_SZ (raise /proc/sys/fs/pipe-max-size?)");
	}
	struct run r = { .fd = rx, .bytes = total };
	pthread_t th;
	pthread_create(&th, NULL, receiver, &r);

	uint64_t rng = 0x9E3779B97F4A7C15ull, sent = 0, zc_out = 0, copied = 0, sends = 0;
	size_t slots = (src_len - msg) / 4096;
	double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	while (sent < total) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		const char *p = src + (rng % slots) * 4096;
		size_t left = msg;
		while (left) {
			ssize_t n;
			if (mode == M_SPLICE) {
				struct iovec iov = { .iov_base = (void *)p, .iov_len = left };
				n = vmsplice(pfd[1], &iov, 1, 0);
				if (n <= 0)
					die("vmsplice");
				ssize_t m = 0;
				while (m < n) {
					ssize_t k = splice(pfd[0], NULL, tx, NULL, (size_t)(n - m),
							   SPLICE_F_MOVE | SPLICE_F_MORE);
					if (k <= 0)
						die("splice");
					m += k;
				}
			} else {
				n = send(tx, p, left, mode == M_ZEROCOPY ? MSG_ZEROCOPY : 0);
				if (n < 0 && errno == ENOBUFS && mode == M_ZEROCOPY) {
					zc_out -= zc_reap(tx, true, &copied); /* optmem full */
					continue;
				}
				if (n <= 0)
					die("send");
				if (mode == M_ZEROCOPY) {
					zc_out++;
					sends++;
					zc_out -= zc_reap(tx, false, &copied);
				}
			}
			p += n;
			left -= (size_t)n;
		}
		sent += msg;
	}
	while (zc_out)
		zc_out -= zc_reap(tx, true, &copied);
	*tx_cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	pthread_join(th, NULL);
	double secs = now_s(CLOCK_MONOTONIC) - t0;
	*rx_cpu = r.cpu_s;
	*zc_copied = copied;
	*zc_sends = sends;
	close(tx);
	close(rx);
	if (pfd[0] >= 0) {
		close(pfd[0]);
		close(pfd[1]);
	}
	return (double)total / secs / (1 << 20);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	size_t msg = 1 << 20, src_mb = 512;
	uint64_t mb = 4096;
	int reps = 3;
	bool unix_sock = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--unix"))
			unix_sock = true;
		else if (!strcmp(argv[i], "--msg") && i + 1 < argc)
			msg = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--mb") && i + 1 < argc)
			mb = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--src") && i + 1 < argc)
			src_mb = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--unix] [--msg BYTES] [--mb TOTAL_MIB] [--src MIB] [--reps N]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 99 || msg < 4096 || src_mb * (1 << 20) < 2 * msg) {
		fprintf(stderr, "%s: bad arguments\n", argv[0]);
		return 2;
	}
	size_t src_len = src_mb << 20;
	char *src = mmap(NULL, src_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (src == MAP_FAILED)
		die("mmap");
	for (size_t i = 0; i < src_len; i += 8)
		*(uint64_t *)(src + i) = i * 0x9E3779B97F4A7C15ull;
	uint64_t total = mb << 20;
	total -= total % msg;

	printf("%s, %zu-byte messages, %llu MiB from random offsets of %zu MiB, median of %d\n",
	       unix_sock ? "unix socket" : "TCP 127.0.0.1", msg, (unsigned long long)(total >> 20), src_mb,
	       reps);
	printf("%-20s %10s %16s %16s %s\n", "mode", "MiB/s", "sender CPU s/GiB", "receiver s/GiB",
	       "zerocopy sends copied");
	for (int m = 0; m < NMODES; m++) {
		double bw[99], tx[99], rx[99];
		uint64_t copied = 0, sends = 0;
		bool offered = true;
		for (int k = 0; k < reps; k++) {
			uint64_t c, s;
			bw[k] = run_once((enum mode)m, unix_sock, src, src_len, msg, total, &tx[k], &rx[k], &c, &s);
			if (bw[k] < 0) {
				offered = false;
				break;
			}
			tx[k] /= (double)total / (1 << 30);
			rx[k] /= (double)total / (1 << 30);
			copied += c;
			sends += s;
		}
		if (!offered) {
			printf("%-20s not offered on this socket\n", mode_name[m]);
			continue;
		}
		qsort(bw, (size_t)reps, sizeof *bw, cmp_d);
		qsort(tx, (size_t)reps, sizeof *tx, cmp_d);
		qsort(rx, (size_t)reps, sizeof *rx, cmp_d);
		printf("%-20s %10.0f %16.3f %16.3f", mode_name[m], bw[reps / 2], tx[reps / 2], rx[reps / 2]);
		if (m == M_ZEROCOPY)
			printf(" %llu of %llu", (unsigned long long)copied, (unsigned long long)sends);
		printf("\n");
	}
	return 0;
}
