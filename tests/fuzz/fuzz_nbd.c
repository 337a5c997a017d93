/*
 * tests/fuzz/fuzz_nbd.c - libFuzzer target: the NBD server as a hostile
 * client sees it.
 *
 * The real flashd (every server/ object, its main() compiled as
 * flashd_main) runs in this process on a thread, on a unix socket in a
 * fresh directory under /dev/shm, with STARTTLS allowed (a PSK file) and
 * three ioDimms of the small preset test-16m (timing off): dimm0 (512-byte
 * sectors, read-write), dimm1 (read-only for unix clients: allow_ro) and
 * dimm2 (TLS required, allowed only to 10.0.0.0/8 and the PSK identity
 * "fuzz": refused, but listed).  Each input
 * is one client's byte stream: the driver connects, sends the input while
 * reading whatever the server answers (so a server that waits for its
 * replies to be read is never blocked by the driver), then shuts its
 * sending side and reads until the server closes.  Handshake, option
 * parsing and the transmission phase (requests, payloads, the FTL behind
 * them) all run as in production.
 *
 * Findings: ASan/UBSan reports and leaks (LSan, per input) in server code;
 * a server that has not closed the connection FUZZ_NBD_HANG_S seconds (20)
 * after the input ended is reported as a hang (abort, so libFuzzer keeps
 * the input); a server that stopped (flashd_main returned) or stopped
 * accepting is reported the same way, and so is a libevent warning or
 * error (e.g. "Epoll MOD on fd N failed ... Bad file descriptor": an event
 * still registered for a descriptor already closed, which a new connection
 * may have been given), and so is an error-level line in flashd's log
 * (log_err: flashd failing, e.g. out of memory; a client's misbehaviour
 * is logged at info or warning level).  FUZZ_NBD_LOG=1 prints flashd's log.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tests/fuzz/tmpdir.h"

#include <event2/event.h>

int flashd_main(int argc, char **argv);

static char dir[64];
static char sock_path[128];
static volatile int server_rc = -1000; /* flashd_main's return once it returned */
static int log_on;
static int hang_s = 20;

/* flashd's log (server/log.c) replaced at link time (-Wl,--wrap=log_msg):
 * thousands of connections a second would otherwise flood stderr */
void __wrap_log_msg(int prio, const char *fmt, ...)
{
	/* error level and above: flashd failing, not a client misbehaving
	 * (those get info and warning lines): a finding, unless
	 * FUZZ_NBD_ERR_OK=1 */
	bool finding = (prio & 7) <= 3 && !getenv("FUZZ_NBD_ERR_OK");
	if (!log_on && !finding)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%sflashd[%d]: ", finding ? "fuzz_nbd: error-level log line: " : "", prio);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	if (finding)
		abort();
}

static char *argv_srv[32];

/* libevent's own complaints are findings (flashd sets no log callback) */
static void event_log(int severity, const char *msg)
{
	if (severity == EVENT_LOG_DEBUG || severity == EVENT_LOG_MSG)
		return;
	/* known findings (tests/fuzz/known/libevent.txt via run.sh):
	 * substrings separated by '|' */
	const char *ign = getenv("FUZZ_NBD_EVENT_IGNORE");
	while (ign && *ign) {
		const char *bar = strchr(ign, '|');
		size_t n = bar ? (size_t)(bar - ign) : strlen(ign);
		if (n && memmem(msg, strlen(msg), ign, n))
			return;
		ign = bar ? bar + 1 : NULL;
	}
	fprintf(stderr, "fuzz_nbd: libevent %s: %s\n", severity == EVENT_LOG_WARN ? "warning" : "error", msg);
	abort();
}

static void *server_thread(void *arg)
{
	int argc = 0;
	while (argv_srv[argc])
		argc++;
	server_rc = flashd_main(argc, argv_srv);
	fprintf(stderr, "fuzz_nbd: flashd_main returned %d\n", server_rc);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (dir[0] && system(cmd) != 0)
		fprintf(stderr, "fuzz_nbd: could not remove %s\n", dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_on = getenv("FUZZ_NBD_LOG") && atoi(getenv("FUZZ_NBD_LOG"));
	if (getenv("FUZZ_NBD_HANG_S"))
		hang_s = atoi(getenv("FUZZ_NBD_HANG_S"));
	event_set_log_callback(event_log);
	fuzz_mkdtemp(dir, sizeof dir, "nbd");
	atexit(cleanup);
	char path[128];
	snprintf(path, sizeof path, "%s/psk", dir);
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fprintf(f, "fuzz:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
	fclose(f);
	char conf[128];
	snprintf(conf, sizeof conf, "%s/flashd.conf", dir);
	f = fopen(conf, "w");
	if (!f) {
		perror(conf);
		exit(1);
	}
	fprintf(f, "[server]\ntiming = off\npoll_us = 0\ntls = allowed\ntls_psk = %s\n"
		   "handshake_timeout = 5\ndefault_export = dimm0\n"
		   "[dimm dimm0]\npreset = test-16m\nsector_size = 512\n"
		   "[dimm dimm1]\npreset = test-16m\nallow_ro = unix\n"
		   "[dimm dimm2]\npreset = test-16m\ntls = required\nallow = 10.0.0.0/8 tls:psk=fuzz\n"
		   "list_denied = yes\n", path);
	fclose(f);
	snprintf(sock_path, sizeof sock_path, "%s/nbd.sock", dir);
	static char a_state[128], a_unix[160], a_conf[160], a_pid[160];
	snprintf(a_state, sizeof a_state, "--state-dir=%s", dir);
	snprintf(a_unix, sizeof a_unix, "--unix=%s", sock_path);
	snprintf(a_conf, sizeof a_conf, "--config=%s", conf);
	snprintf(a_pid, sizeof a_pid, "--pidfile=%s/flashd.pid", dir);
	char *args[] = { "flashd", "--foreground", a_conf, a_state, a_unix, a_pid,
			 "--shutdown-timeout=1", NULL };
	memcpy(argv_srv, args, sizeof args);

	pthread_t t;
	if (pthread_create(&t, NULL, server_thread, NULL)) {
		perror("pthread_create");
		exit(1);
	}
	pthread_detach(t);
	/* ready: the pidfile holds our pid (written once everything listens) */
	char pidpath[160], want[32], got[32];
	snprintf(pidpath, sizeof pidpath, "%s/flashd.pid", dir);
	snprintf(want, sizeof want, "%d\n", (int)getpid());
	for (int i = 0; i < 600; i++) {
		if (server_rc != -1000) {
			fprintf(stderr, "fuzz_nbd: flashd did not start (set FUZZ_NBD_LOG=1 for its log)\n");
			exit(1);
		}
		int fd = open(pidpath, O_RDONLY);
		if (fd >= 0) {
			ssize_t n = read(fd, got, sizeof got - 1);
			close(fd);
			if (n > 0) {
				got[n] = 0;
				if (!strcmp(got, want))
					return 0;
			}
		}
		usleep(100000);
	}
	fprintf(stderr, "fuzz_nbd: flashd not ready after 60 s\n");
	exit(1);
}

static int connect_server(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
	for (int tries = 0; tries < 2000; tries++) {
		if (server_rc != -1000) {
			fprintf(stderr, "fuzz_nbd: flashd is gone (flashd_main returned %d)\n", server_rc);
			abort();
		}
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			perror("socket");
			abort();
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			return fd;
		}
		int e = errno;
		close(fd);
		if (e != EAGAIN && e != ECONNREFUSED && e != EINTR) {
			fprintf(stderr, "fuzz_nbd: connect: %s\n", strerror(e));
			abort();
		}
		usleep(5000);
	}
	fprintf(stderr, "fuzz_nbd: HANG: flashd stopped accepting connections (10 s)\n");
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t sink[1 << 16];
	int fd = connect_server();
	size_t off = 0;
	bool wr_shut = false;
	double deadline = 0;
	for (;;) {
		if (off == size && !wr_shut) {
			shutdown(fd, SHUT_WR);
			wr_shut = true;
			deadline = now_s() + hang_s;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN | (off < size ? POLLOUT : 0) };
		int n = poll(&p, 1, 1000);
		if (n < 0 && errno != EINTR) {
			perror("poll");
			abort();
		}
		if (wr_shut && now_s() > deadline) {
			fprintf(stderr, "fuzz_nbd: HANG: flashd kept the connection open %d s after the "
				"client's input ended (%zu bytes)\n", hang_s, size);
			abort();
		}
		if (n <= 0)
			continue;
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = read(fd, sink, sizeof sink);
			if (r == 0)
				break; /* the server closed: done */
			if (r < 0 && errno != EAGAIN && errno != EINTR)
				break; /* ECONNRESET: closed with our bytes unread */
		}
		if (off < size && (p.revents & POLLOUT)) {
			ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
			if (w > 0)
				off += (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				off = size; /* the server closed its side: stop sending */
		}
	}
	close(fd);
	return 0;
}
