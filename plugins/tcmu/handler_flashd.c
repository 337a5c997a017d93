/*
 * handler_flashd.c - tcmu-runner handler (subtype "flashd"): serves a LIO
 * "user:flashd" backstore from a flashd NBD export through libnbd.
 *
 *   targetcli /backstores/user:flashd create name=lun0 size=800M cfgstring=dimm1
 *
 * cfgstring (tcmu-runner hands it to us as "flashd/<cfgstring>"):
 *   <export>                   unix socket /run/flashd/flashd.sock (default)
 *   <export>@/path/to/sock     another unix socket
 *   <export>@host:port         TCP, so tcmu-runner may run on another node
 *   <export>@[v6addr]:port     TCP over IPv6
 *   <export>@host/port         the same as host:port: targetcli (rtslib)
 *                              refuses ':' in a cfgstring ("':' not allowed
 *                              in config string"), so use this form there;
 *                              an IPv6 server then needs a host name
 *   ...;grace=SECONDS          how long commands are held while flashd is
 *                              unreachable (default FLASHD_GRACE_DEFAULT_S,
 *                              0..FLASHD_GRACE_MAX_S; 0: fail them at once),
 *                              e.g. dimm1;grace=25 or dimm1@host/10809;grace=0
 *
 * Built by the Makefile as build/handler_flashd.so; install it as
 * handler_flashd.so in tcmu-runner's handler directory
 * (/usr/lib/x86_64-linux-gnu/tcmu-runner, or tcmu-runner --handler-path DIR).
 *
 * ABI.  Debian ships no tcmu-runner headers, so the 1.5.4 ABI (Debian
 * bookworm 1.5.4-4.1) is declared here; the _Static_asserts pin the layout.
 * tcmur_* symbols come from the tcmu-runner executable, tcmu_* from
 * libtcmu.so.2; both resolve when tcmu-runner dlopen()s us.
 *
 * Threads and completion.  nr_threads = 0 (asynchronous handler): the
 * read/write/flush/unmap/writesame callouts run on tcmu-runner's per-device
 * command thread; they only allocate a request, queue it for this device's
 * own I/O thread and return TCMU_STS_OK ("queued"), or return an error
 * status at once (tcmu-runner then completes the command itself), e.g.
 * while flashd is unreachable.  The I/O thread alone owns the libnbd handle:
 * it issues nbd_aio_pread/pwrite/flush/trim/zero, drives the connection with
 * poll() + nbd_aio_notify_read/write, and calls tcmur_cmd_complete() exactly
 * once per queued command, from libnbd's completion "free" hook, which
 * libnbd calls exactly once per request whatever happens (reply, failed
 * submission, dead connection, nbd_close).  So no command can be lost or
 * completed twice, and many commands are in flight at once.
 *
 * Connection loss (a flashd restart is one).  The connection is lost on
 * EOF, an error, no reply to an outstanding request for FLASHD_IO_TIMEOUT_MS,
 * or a reply "server shutting down" (ESHUTDOWN: flashd stops or detaches
 * the export; the handler then closes at once).  The I/O thread reconnects
 * with exponential backoff (100 ms .. 5 s) and, for the grace period (as
 * multipath's no_path_retry), holds commands instead of failing them: the
 * ones in flight whose NBD requests got no answer (or ESHUTDOWN), the FUA
 * writes whose follow-up flush was not yet sent, and every new one.  On
 * reconnection (the export must still be at least as large as the
 * backstore) the held commands are sent again whole, oldest first, then
 * the new ones.  Re-sending is safe: NBD reads, writes, trims and zeroes
 * are idempotent, and no held command has been completed to the
 * initiator, so no completed write or flush depends on one: a SYNCHRONIZE
 * CACHE covers what completed before it was sent, and those writes were
 * answered by the old server (which persists them when it stops cleanly;
 * a server killed loses what a crash loses, see doc/durability.md).  A command whose
 * request got a real error reply (EIO, EPERM ...) is not held: it fails as
 * it would have.  Once the connection has been down for the grace period,
 * the held commands fail (HARDWARE ERROR, INTERNAL TARGET FAILURE 44/00,
 * as before) and new ones fail at once until the handler reconnects.  The
 * grace must stay below the backstore's cmd_time_out (LIO, 30 s by
 * default) and the initiator's SCSI command timeout (30 s), or those fire
 * first.
 *
 * Errors -> SCSI sense: EIO -> MEDIUM ERROR (TCMU_STS_RD_ERR for reads,
 * TCMU_STS_WR_ERR for writes); EPERM/EROFS -> DATA PROTECT / WRITE
 * PROTECTED (27h/00h).  tcmu-runner 1.5.4 has no TCMU_STS_* for that (its
 * TCMU_STS_WR_ERR_INCOMPAT_FRMT is ILLEGAL REQUEST 30h/05h, "cannot write,
 * incompatible format"), so the handler writes the sense into the command
 * and returns TCMU_STS_PASSTHROUGH_ERR; ENOSPC/EINVAL/EOVERFLOW/ERANGE ->
 * TCMU_STS_RANGE; ENOMEM -> TCMU_STS_NO_RESOURCE (TASK SET FULL); anything
 * else (ENOTCONN, ESHUTDOWN, ...) -> TCMU_STS_HW_ERR.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <libnbd.h>

/* ------------------------------------------------------------------ ABI */
/* tcmu-runner 1.5.4, tcmu-runner.h / libtcmu_common.h / libtcmu_log.h */

struct tcmu_device;
struct tcmulib_cfg_info;

enum { /* libtcmu_common.h, in this order */
	TCMU_STS_ASYNC_HANDLED = -2,
	TCMU_STS_NOT_HANDLED = -1,
	TCMU_STS_OK = 0,
	TCMU_STS_NO_RESOURCE,		/* TASK SET FULL */
	TCMU_STS_PASSTHROUGH_ERR,	/* handler has set up the sense */
	TCMU_STS_BUSY,
	TCMU_STS_WR_ERR,		/* MEDIUM ERROR, WRITE ERROR 0C/00 */
	TCMU_STS_RD_ERR,		/* MEDIUM ERROR, UNRECOVERED READ 11/00 */
	TCMU_STS_MISCOMPARE,
	TCMU_STS_INVALID_CMD,
	TCMU_STS_INVALID_CDB,
	TCMU_STS_INVALID_PARAM_LIST,
	TCMU_STS_INVALID_PARAM_LIST_LEN,
	TCMU_STS_TIMEOUT,
	TCMU_STS_FENCED,
	TCMU_STS_HW_ERR,		/* HARDWARE ERROR, INTERNAL TARGET FAILURE 44/00 */
	TCMU_STS_RANGE,			/* ILLEGAL REQUEST, LBA OUT OF RANGE 21/00 */
	TCMU_STS_FRMT_IN_PROGRESS,
	TCMU_STS_CAPACITY_CHANGED,
	TCMU_STS_NOTSUPP_SAVE_PARAMS,
	TCMU_STS_WR_ERR_INCOMPAT_FRMT,	/* ILLEGAL REQUEST 30/05: not write protect */
};

#define SENSE_BUFFERSIZE 96
#define SENSE_DATA_PROTECT 0x07
#define ASC_WRITE_PROTECTED 0x2700

/* struct tcmulib_cmd (libtcmu_common.h); we read cdb and write sense_buf */
struct tcmulib_cmd {
	uint16_t cmd_id;
	uint8_t *cdb;
	struct iovec *iovec;
	size_t iov_cnt;
	uint8_t sense_buf[SENSE_BUFFERSIZE];
	void *hm_private;
};
_Static_assert(offsetof(struct tcmulib_cmd, cdb) == 8, "tcmulib_cmd.cdb");
_Static_assert(offsetof(struct tcmulib_cmd, sense_buf) == 32, "tcmulib_cmd.sense_buf");
_Static_assert(sizeof(struct tcmulib_cmd) == 136, "tcmulib_cmd size");

/*
 * struct tcmur_cmd (tcmu-runner.h, sizeof 96); only its first member is
 * used.  Commands the runner builds itself (split UNMAPs, write-same
 * emulation, xcopy) may carry lib_cmd == NULL.
 */
struct tcmur_cmd {
	struct tcmulib_cmd *lib_cmd;
};

struct tcmur_handler {
	const char *name;
	const char *subtype;
	const char *cfg_desc;
	void *opaque;
	bool (*check_config)(const char *cfgstring, char **reason);
	int (*reconfig)(struct tcmu_device *dev, struct tcmulib_cfg_info *cfg);
	int (*open)(struct tcmu_device *dev, bool reopen);
	void (*close)(struct tcmu_device *dev);
	int nr_threads;
	int (*handle_cmd)(struct tcmu_device *dev, struct tcmur_cmd *cmd);
	int (*read)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		    struct iovec *iovec, size_t iov_cnt, size_t len, off_t off);
	int (*write)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		     struct iovec *iovec, size_t iov_cnt, size_t len, off_t off);
	int (*flush)(struct tcmu_device *dev, struct tcmur_cmd *cmd);
	int (*unmap)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		     uint64_t off, uint64_t len);
	int (*writesame)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
			 uint64_t off, uint64_t len, struct iovec *iovec, size_t iov_cnt);
	int (*caw)(struct tcmu_device *dev, struct tcmur_cmd *cmd,
		   uint64_t off, uint64_t len, struct iovec *iovec, size_t iov_cnt);
	int (*report_event)(struct tcmu_device *dev);
	int (*lock)(struct tcmu_device *dev, uint16_t tag);
	int (*unlock)(struct tcmu_device *dev);
	int (*get_lock_tag)(struct tcmu_device *dev, uint16_t *tag);
	int (*get_lock_state)(struct tcmu_device *dev);
	bool _is_dbus_handler;
	bool (*update_logdir)(void);
	int (*init)(void);
	void (*destroy)(void);
};
_Static_assert(sizeof(struct tcmur_handler) == 200, "tcmur_handler size (1.5.4)");
_Static_assert(offsetof(struct tcmur_handler, open) == 48, "open");
_Static_assert(offsetof(struct tcmur_handler, nr_threads) == 64, "nr_threads");
_Static_assert(offsetof(struct tcmur_handler, handle_cmd) == 72, "handle_cmd");
_Static_assert(offsetof(struct tcmur_handler, read) == 80, "read");
_Static_assert(offsetof(struct tcmur_handler, flush) == 96, "flush");
_Static_assert(offsetof(struct tcmur_handler, unmap) == 104, "unmap");
_Static_assert(offsetof(struct tcmur_handler, writesame) == 112, "writesame");
_Static_assert(offsetof(struct tcmur_handler, caw) == 120, "caw");
_Static_assert(offsetof(struct tcmur_handler, get_lock_state) == 160, "get_lock_state");
_Static_assert(offsetof(struct tcmur_handler, _is_dbus_handler) == 168, "_is_dbus_handler");
_Static_assert(offsetof(struct tcmur_handler, update_logdir) == 176, "update_logdir");
_Static_assert(offsetof(struct tcmur_handler, destroy) == 192, "destroy");

/* exported by the tcmu-runner executable */
int tcmur_register_handler(struct tcmur_handler *handler);
void tcmur_cmd_complete(struct tcmu_device *dev, void *data, int rc);
void tcmur_dev_set_private(struct tcmu_device *dev, void *private);
void *tcmur_dev_get_private(struct tcmu_device *dev);
/* exported by libtcmu.so.2 */
char *tcmu_dev_get_cfgstring(struct tcmu_device *dev);
uint64_t tcmu_dev_get_num_lbas(struct tcmu_device *dev);
uint32_t tcmu_dev_get_block_size(struct tcmu_device *dev);
void tcmu_dev_set_write_cache_enabled(struct tcmu_device *dev, bool enabled);
void tcmu_dev_set_solid_state_media(struct tcmu_device *dev, bool solid_state);
void tcmu_dev_set_max_unmap_len(struct tcmu_device *dev, uint32_t len);
void tcmu_dev_set_opt_unmap_gran(struct tcmu_device *dev, uint32_t len, bool split);
void tcmu_dev_set_unmap_gran_align(struct tcmu_device *dev, uint32_t len);
int tcmu_sense_set_data(uint8_t *sense_buf, uint8_t key, uint16_t asc_ascq);
void tcmu_err_message(struct tcmu_device *dev, const char *funcname, int linenr,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void tcmu_warn_message(struct tcmu_device *dev, const char *funcname, int linenr,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void tcmu_info_message(struct tcmu_device *dev, const char *funcname, int linenr,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void tcmu_dbg_message(struct tcmu_device *dev, const char *funcname, int linenr,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define fl_err(dev, ...) tcmu_err_message(dev, __func__, __LINE__, __VA_ARGS__)
#define fl_warn(dev, ...) tcmu_warn_message(dev, __func__, __LINE__, __VA_ARGS__)
#define fl_info(dev, ...) tcmu_info_message(dev, __func__, __LINE__, __VA_ARGS__)
#define fl_dbg(dev, ...) tcmu_dbg_message(dev, __func__, __LINE__, __VA_ARGS__)

/* ------------------------------------------------------------------ tunables */

#define FLASHD_SUBTYPE "flashd"
#define FLASHD_DEFAULT_SOCKET "/run/flashd/flashd.sock"
#define FLASHD_CONNECT_TIMEOUT_MS 10000	/* one connection attempt */
#define FLASHD_OPEN_TIMEOUT_MS 15000	/* open(): keep trying this long */
#define FLASHD_IO_TIMEOUT_MS 20000	/* no reply while requests are out: dead */
#define FLASHD_BACKOFF_MIN_MS 100
#define FLASHD_BACKOFF_MAX_MS 5000
#define FLASHD_BACKOFF_HOLD_MS 1000	/* the longest backoff while commands are held */
#define FLASHD_GRACE_DEFAULT_S 20	/* hold commands while down (cfgstring grace=) */
#define FLASHD_GRACE_MAX_S 3600
#define FLASHD_MAX_REQ (32u << 20)	/* NBD's safe payload without advertised max */
#define FLASHD_MAX_TRIM (1u << 30)	/* per NBD trim/zero request (32-bit length) */
#define FLASHD_MAX_UNMAP_BYTES (1ull << 30) /* advertised MAXIMUM UNMAP LBA COUNT */
#define FLASHD_MAX_DIRECT_RUNS 4	/* more scattered iovecs: bounce buffer */
#define FLASHD_PATTERN_BUF (1u << 20)	/* write-same pattern buffer */

/* ------------------------------------------------------------------ types */

enum fl_op { OP_READ, OP_WRITE, OP_FLUSH, OP_TRIM, OP_ZERO, OP_PATTERN };
static const char *const op_name[] = { "read", "write", "flush", "trim", "write-zeroes", "write-same" };

enum fl_state { ST_DOWN, ST_CONNECTING, ST_READY };

struct fl_target {
	char *export;
	char *path;		/* unix socket, or NULL */
	char *host, *port;	/* TCP */
	unsigned grace_s;	/* hold commands this long while down */
	char desc[160];		/* for log messages (tcmu-runner cuts lines at ~256 bytes) */
};

struct fl_dev;

/* One SCSI-level command; split into one or more NBD requests. */
struct fl_cmd {
	struct fl_dev *d;
	struct tcmur_cmd *cmd;
	enum fl_op op;
	uint64_t off, len;
	struct iovec *iov;
	size_t iov_cnt;
	void *buf;		/* bounce or pattern buffer (owned) */
	size_t buf_len;
	bool bounce;
	bool fua;		/* FUA requested by the initiator */
	bool post_flush;	/* FUA without server FUA support: flush after */
	unsigned refs;		/* issuer + NBD requests not yet freed */
	unsigned issued, answered;
	int err;		/* first errno of a real error reply */
	bool lost;		/* a request lost with the connection (send again) */
	struct fl_cmd *next;
};

struct fl_stats {
	uint64_t ops[6], bytes[6], errors, reconnects, bounced;
	uint64_t rejected;	/* failed at once while disconnected (atomic) */
	uint64_t held, expired;	/* held while down; of those, failed after the grace */
	unsigned max_inflight;
};

struct fl_dev {
	struct tcmu_device *dev;
	struct fl_target t;
	uint64_t size;		/* backstore bytes */
	uint32_t block_size;

	pthread_t thread;
	int efd;		/* eventfd: wakes the I/O thread */

	pthread_mutex_t lock;	/* protects state, queue, stopping, grace_over */
	enum fl_state state;
	bool stopping;
	bool grace_over;	/* down longer than the grace: fail new commands at once */
	struct fl_cmd *q_head, *q_tail;

	/* I/O thread only (and open() before the thread starts) */
	struct nbd_handle *h;
	bool is_tcp;
	int64_t export_size;
	uint32_t min_block, max_req;
	bool ro, can_flush, can_fua, can_trim, can_zero;
	unsigned inflight;	/* NBD requests issued, not yet freed */
	int64_t last_progress, connect_deadline, next_attempt;
	unsigned backoff_ms, attempts;
	int64_t down_since;
	char last_err[1024];
	struct fl_cmd *deferred;	/* commands needing a follow-up flush */
	struct fl_cmd *held_head, *held_tail;	/* held while down, oldest first */
	bool holding;		/* lost commands go to held (not stopping, grace not over) */
	bool draining;		/* the server answered ESHUTDOWN: close, reconnect */
	struct fl_stats st;
};

/* ------------------------------------------------------------------ helpers */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void wake(struct fl_dev *d)
{
	uint64_t one = 1;
	ssize_t r;

	do
		r = write(d->efd, &one, sizeof(one));
	while (r < 0 && errno == EINTR);
}

static void free_target(struct fl_target *t)
{
	free(t->export);
	free(t->path);
	free(t->host);
	free(t->port);
	memset(t, 0, sizeof(*t));
}

/*
 * Parse p = "<export>[@<unix path>|@<host>:<port>|@[<v6>]:<port>]" of the
 * cfgstring cfg (named in messages) into t.  On error returns -1 and sets
 * *why (malloc'ed).
 */
static int parse_target(const char *cfg, const char *p, struct fl_target *t, char **why)
{
	const char *at;
	int n;

	at = strchr(p, '@');
	t->export = at ? strndup(p, at - p) : strdup(p);
	if (!t->export)
		goto nomem;
	if (!t->export[0] || strlen(t->export) > 4096) {
		n = asprintf(why, "bad cfgstring '%s': want <export>[@<unix socket>|@<host>/<port>|@<host>:<port>], e.g. dimm0 or dimm0@/run/flashd/flashd.sock",
			     cfg);
		goto fail;
	}
	if (!at || !at[1]) {
		t->path = strdup(FLASHD_DEFAULT_SOCKET);
		if (!t->path)
			goto nomem;
	} else if (at[1] == '/') {
		if (strlen(at + 1) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
			n = asprintf(why, "unix socket path too long in '%s'", cfg);
			goto fail;
		}
		t->path = strdup(at + 1);
		if (!t->path)
			goto nomem;
	} else {
		const char *hs = at + 1, *colon;
		char *end;
		long port;

		if (*hs == '[') {
			const char *rb = strchr(hs, ']');

			if (!rb || (rb[1] != ':' && rb[1] != '/')) {
				n = asprintf(why, "bad IPv6 address in '%s': want [addr]:port", cfg);
				goto fail;
			}
			t->host = strndup(hs + 1, rb - hs - 1);
			colon = rb + 1;
		} else {
			/* host/port (targetcli-safe) or host:port */
			colon = strchr(hs, '/');
			if (!colon) {
				colon = strrchr(hs, ':');
				if (colon && strchr(hs, ':') != colon)
					colon = NULL; /* a bare IPv6 address needs brackets */
			}
			if (!colon) {
				n = asprintf(why, "bad server '%s' in '%s': want /unix/socket, host/port, host:port or [v6addr]:port",
					     hs, cfg);
				goto fail;
			}
			t->host = strndup(hs, colon - hs);
		}
		if (!t->host)
			goto nomem;
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (!t->host[0] || errno || *end || end == colon + 1 || port < 1 || port > 65535) {
			n = asprintf(why, "bad host or port in '%s'", cfg);
			goto fail;
		}
		t->port = strdup(colon + 1);
		if (!t->port)
			goto nomem;
	}
	if (t->path)
		snprintf(t->desc, sizeof(t->desc), "'%.40s' on unix:%.100s", t->export, t->path);
	else
		snprintf(t->desc, sizeof(t->desc), "'%.40s' on %s%.80s%s:%s", t->export,
			 strchr(t->host, ':') ? "[" : "", t->host, strchr(t->host, ':') ? "]" : "", t->port);
	return 0;
nomem:
	n = asprintf(why, "out of memory");
fail:
	(void)n;
	free_target(t);
	return -1;
}

/*
 * Parse the cfgstring "[flashd/]<target>[;grace=SECONDS]" (parse_target).
 * On error returns -1 and sets *why (malloc'ed).
 */
static int parse_cfg(const char *cfg, struct fl_target *t, char **why)
{
	const char *p = cfg, *semi;
	char *head;
	int n, r;

	memset(t, 0, sizeof(*t));
	*why = NULL;
	if (!cfg) {
		n = asprintf(why, "no cfgstring");
		(void)n;
		return -1;
	}
	if (!strncmp(p, FLASHD_SUBTYPE "/", strlen(FLASHD_SUBTYPE) + 1))
		p += strlen(FLASHD_SUBTYPE) + 1;
	semi = strchr(p, ';');
	head = semi ? strndup(p, semi - p) : strdup(p);
	if (!head) {
		n = asprintf(why, "out of memory");
		(void)n;
		return -1;
	}
	r = parse_target(cfg, head, t, why);
	free(head);
	if (r < 0)
		return -1;
	t->grace_s = FLASHD_GRACE_DEFAULT_S;
	while (semi) {
		const char *opt = semi + 1;
		size_t len;
		char *end;
		unsigned long v;

		semi = strchr(opt, ';');
		len = semi ? (size_t)(semi - opt) : strlen(opt);
		if (len > 6 && !strncmp(opt, "grace=", 6)) {
			errno = 0;
			v = strtoul(opt + 6, &end, 10);
			if (!errno && end == opt + len && end != opt + 6 && opt[6] != '-' &&
			    v <= FLASHD_GRACE_MAX_S) {
				t->grace_s = (unsigned)v;
				continue;
			}
		}
		n = asprintf(why, "bad option '%.*s' in cfgstring '%s': want grace=SECONDS (0..%u)",
			     (int)(len > 100 ? 100 : len), opt, cfg, FLASHD_GRACE_MAX_S);
		(void)n;
		free_target(t);
		return -1;
	}
	return 0;
}

/* Copy between a flat buffer and an iovec without modifying the iovec. */
static void copy_to_iov(const struct iovec *iov, size_t cnt, const uint8_t *src, size_t len)
{
	for (size_t i = 0; i < cnt && len; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(iov[i].iov_base, src, n);
		src += n;
		len -= n;
	}
}

static void copy_from_iov(uint8_t *dst, const struct iovec *iov, size_t cnt, size_t len)
{
	for (size_t i = 0; i < cnt && len; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(dst, iov[i].iov_base, n);
		dst += n;
		len -= n;
	}
}

/* An errno that says the connection (not the request) failed: send again. */
static bool conn_errno(int e)
{
	return e == ENOTCONN || e == ESHUTDOWN || e == ECONNRESET || e == ECONNABORTED ||
	       e == EPIPE || e == ETIMEDOUT;
}

static bool is_write_op(enum fl_op op)
{
	return op != OP_READ;
}

/* Translate an errno from flashd/libnbd into a TCMU status (+ sense). */
static int errno_to_sts(struct fl_cmd *c, int err)
{
	struct tcmulib_cmd *lc = c->cmd ? c->cmd->lib_cmd : NULL;

	switch (err) {
	case 0:
		return TCMU_STS_OK;
	case EIO:
		return is_write_op(c->op) ? TCMU_STS_WR_ERR : TCMU_STS_RD_ERR;
	case EPERM:
	case EROFS:
		/* DATA PROTECT, WRITE PROTECTED: no TCMU_STS_* exists for it */
		if (lc)
			return tcmu_sense_set_data(lc->sense_buf, SENSE_DATA_PROTECT,
						   ASC_WRITE_PROTECTED);
		return TCMU_STS_WR_ERR;
	case ENOSPC:
	case EINVAL:
	case EOVERFLOW:
	case ERANGE:
		return TCMU_STS_RANGE;
	case ENOMEM:
		return TCMU_STS_NO_RESOURCE;
	default:
		return TCMU_STS_HW_ERR;
	}
}

/* ------------------------------------------------------------------ completion */

static void cmd_free(struct fl_cmd *c)
{
	free(c->buf);
	free(c);
}

/* Hold c until the connection is back (I/O thread): sent again whole. */
static void hold_cmd(struct fl_dev *d, struct fl_cmd *c)
{
	c->issued = c->answered = 0;
	c->lost = false;
	c->post_flush = false; /* issue_cmd decides again */
	c->refs = 0;
	c->next = NULL;
	if (d->held_tail)
		d->held_tail->next = c;
	else
		d->held_head = c;
	d->held_tail = c;
	d->st.held++;
}

/* Complete a command to tcmu-runner (I/O thread, or open()/close() paths). */
static void cmd_finish(struct fl_cmd *c)
{
	struct fl_dev *d = c->d;
	int err = c->err, st;

	/* a request lost with the connection (dropped, ENOTCONN, ESHUTDOWN) */
	if (!err && (c->lost || c->answered < c->issued)) {
		if (d->holding) {
			hold_cmd(d, c);
			return;
		}
		err = ENOTCONN;
	}
	if (!err && c->post_flush) {
		/* FUA write done; the flush is issued by the I/O thread loop */
		c->post_flush = false;
		c->refs = 1;
		c->next = d->deferred;
		d->deferred = c;
		return;
	}
	if (!err && c->op == OP_READ && c->bounce)
		copy_to_iov(c->iov, c->iov_cnt, c->buf, c->len);
	if (err) {
		d->st.errors++;
		fl_dbg(d->dev, "%s off=%" PRIu64 " len=%" PRIu64 " failed: %s\n",
		       op_name[c->op], c->off, c->len, strerror(err));
	} else {
		d->st.ops[c->op]++;
		d->st.bytes[c->op] += c->len;
	}
	st = errno_to_sts(c, err);
	tcmur_cmd_complete(d->dev, c->cmd, st);
	cmd_free(c);
}

static void cmd_put(struct fl_cmd *c)
{
	if (--c->refs == 0)
		cmd_finish(c);
}

/* libnbd completion callback: record the result (runs with libnbd's lock held) */
static int nbd_done_cb(void *user_data, int *error)
{
	struct fl_cmd *c = user_data;

	c->answered++;
	c->d->last_progress = now_ms();
	if (*error && conn_errno(*error)) {
		c->lost = true;
		if (*error == ESHUTDOWN) /* flashd stops, or detaches the export */
			c->d->draining = true;
	} else if (*error && !c->err) {
		c->err = *error;
	}
	return 1; /* retire the request */
}

/* libnbd free hook: called exactly once per request, whatever happened */
static void nbd_free_cb(void *user_data)
{
	struct fl_cmd *c = user_data;

	c->d->inflight--;
	cmd_put(c);
}

/* ------------------------------------------------------------------ issuing */

/*
 * Issue one NBD request for c.  Returns false (with c->err set) when libnbd
 * refused it; the free hook has run in either case.
 */
static bool issue_one(struct fl_dev *d, struct fl_cmd *c, enum fl_op op, void *buf,
		      uint64_t len, uint64_t off, uint32_t flags)
{
	nbd_completion_callback cb = { .callback = nbd_done_cb, .user_data = c, .free = nbd_free_cb };
	int64_t r = -1;

	c->refs++;
	c->issued++;
	if (d->inflight++ == 0)
		d->last_progress = now_ms();
	if (d->inflight > d->st.max_inflight)
		d->st.max_inflight = d->inflight;
	switch (op) {
	case OP_READ:
		r = nbd_aio_pread(d->h, buf, len, off, cb, 0);
		break;
	case OP_WRITE:
	case OP_PATTERN:
		r = nbd_aio_pwrite(d->h, buf, len, off, cb, flags);
		break;
	case OP_FLUSH:
		r = nbd_aio_flush(d->h, cb, 0);
		break;
	case OP_TRIM:
		r = nbd_aio_trim(d->h, len, off, cb, flags);
		break;
	case OP_ZERO:
		r = nbd_aio_zero(d->h, len, off, cb, flags);
		break;
	}
	if (r < 0) {
		int e = nbd_get_errno();

		if (conn_errno(e))
			c->lost = true;
		else if (!c->err)
			c->err = e ? e : EIO;
		fl_dbg(d->dev, "nbd %s refused: %s\n", op_name[op],
		       nbd_get_error() ? nbd_get_error() : strerror(c->err));
		return false;
	}
	return true;
}

/* Issue [buf, len) at off in chunks of at most max bytes. */
static bool issue_chunks(struct fl_dev *d, struct fl_cmd *c, enum fl_op op, uint8_t *buf,
			 uint64_t len, uint64_t off, uint64_t max, uint32_t flags)
{
	while (len) {
		uint64_t n = len < max ? len : max;

		if (!issue_one(d, c, op, buf, n, off, flags))
			return false;
		if (buf)
			buf += n;
		off += n;
		len -= n;
	}
	return true;
}

static void issue_cmd(struct fl_dev *d, struct fl_cmd *c)
{
	uint32_t wflags = 0;

	c->refs = 1; /* the issuer's reference */
	if (c->fua) {
		if (d->can_fua)
			wflags = LIBNBD_CMD_FLAG_FUA;
		else if (d->can_flush)
			c->post_flush = true;
	}
	switch (c->op) {
	case OP_READ:
	case OP_WRITE:
		if (c->bounce) {
			issue_chunks(d, c, c->op, c->buf, c->len, c->off, d->max_req, wflags);
		} else {
			/* one request per run of memory-contiguous iovecs */
			uint64_t off = c->off, left = c->len;

			for (size_t i = 0; i < c->iov_cnt && left;) {
				uint8_t *base = c->iov[i].iov_base;
				uint64_t n = c->iov[i].iov_len;

				for (i++; i < c->iov_cnt && (uint8_t *)c->iov[i].iov_base == base + n; i++)
					n += c->iov[i].iov_len;
				if (n > left)
					n = left;
				if (!issue_chunks(d, c, c->op, base, n, off, d->max_req, wflags))
					break;
				off += n;
				left -= n;
			}
		}
		break;
	case OP_FLUSH:
		if (d->can_flush)
			issue_one(d, c, OP_FLUSH, NULL, 0, 0, 0);
		break;
	case OP_TRIM:
		if (d->ro)
			c->err = EPERM;
		else if (d->can_trim)
			issue_chunks(d, c, OP_TRIM, NULL, c->len, c->off, FLASHD_MAX_TRIM, 0);
		else if (d->can_zero) /* keep "reads back as zeros" */
			issue_chunks(d, c, OP_ZERO, NULL, c->len, c->off, FLASHD_MAX_TRIM, 0);
		/* else: UNMAP is advisory; nothing to do */
		break;
	case OP_ZERO:
		if (d->can_zero) {
			issue_chunks(d, c, OP_ZERO, NULL, c->len, c->off, FLASHD_MAX_TRIM, wflags);
			break;
		}
		c->op = OP_PATTERN; /* the pattern buffer is all zeros */
		/* fall through */
	case OP_PATTERN: {
		uint64_t off = c->off, left = c->len;

		while (left) {
			uint64_t n = left < c->buf_len ? left : c->buf_len;

			if (!issue_one(d, c, OP_PATTERN, c->buf, n, off, wflags))
				break;
			off += n;
			left -= n;
		}
		break;
	}
	}
	cmd_put(c);
}

/* ------------------------------------------------------------------ connection */

static void set_state(struct fl_dev *d, enum fl_state s)
{
	pthread_mutex_lock(&d->lock);
	d->state = s;
	pthread_mutex_unlock(&d->lock);
}

/* Start a connection attempt (non-blocking).  0 or -1 with d->last_err set. */
static int start_connect(struct fl_dev *d)
{
	int r;

	d->last_err[0] = '\0';
	d->h = nbd_create();
	if (!d->h) {
		snprintf(d->last_err, sizeof(d->last_err), "nbd_create: %s", nbd_get_error());
		return -1;
	}
	if (nbd_set_export_name(d->h, d->t.export) < 0 ||
	    nbd_set_handle_name(d->h, "flashd-tcmu") < 0 ||
	    nbd_set_pread_initialize(d->h, false) < 0)
		goto fail;
	if (d->t.path)
		r = nbd_aio_connect_unix(d->h, d->t.path);
	else
		r = nbd_aio_connect_tcp(d->h, d->t.host, d->t.port);
	if (r < 0)
		goto fail;
	d->is_tcp = !d->t.path;
	d->connect_deadline = now_ms() + FLASHD_CONNECT_TIMEOUT_MS;
	return 0;
fail:
	snprintf(d->last_err, sizeof(d->last_err), "%s",
		 nbd_get_error() ? nbd_get_error() : "connect failed");
	nbd_close(d->h);
	d->h = NULL;
	return -1;
}

/*
 * The handshake finished: read the export's properties and check them
 * against the backstore.  0, or -1 with d->last_err set (handle kept).
 */
static int check_export(struct fl_dev *d)
{
	int64_t sz = nbd_get_size(d->h);
	int64_t minb = nbd_get_block_size(d->h, LIBNBD_SIZE_MINIMUM);
	int64_t maxb = nbd_get_block_size(d->h, LIBNBD_SIZE_MAXIMUM);

	if (sz < 0) {
		snprintf(d->last_err, sizeof(d->last_err), "cannot get export size: %s", nbd_get_error());
		return -1;
	}
	d->export_size = sz;
	d->min_block = minb > 0 ? (uint32_t)minb : 1;
	d->max_req = FLASHD_MAX_REQ;
	if (maxb > 0 && (uint64_t)maxb < d->max_req)
		d->max_req = (uint32_t)maxb;
	d->ro = nbd_is_read_only(d->h) == 1;
	d->can_flush = nbd_can_flush(d->h) == 1;
	d->can_fua = nbd_can_fua(d->h) == 1;
	d->can_trim = nbd_can_trim(d->h) == 1;
	d->can_zero = nbd_can_zero(d->h) == 1;
	if (d->size > (uint64_t)sz) {
		snprintf(d->last_err, sizeof(d->last_err),
			 "backstore of %" PRIu64 " bytes is larger than export %s (%" PRId64
			 " bytes); use size <= %" PRId64,
			 d->size, d->t.desc, sz, sz - sz % d->block_size);
		return -1;
	}
	if (d->block_size % d->min_block) {
		snprintf(d->last_err, sizeof(d->last_err),
			 "block size %u is not a multiple of the minimum block size %u of export %s",
			 d->block_size, d->min_block, d->t.desc);
		return -1;
	}
	if (d->max_req < d->block_size) {
		snprintf(d->last_err, sizeof(d->last_err), "export %s: maximum request %u < block size %u",
			 d->t.desc, d->max_req, d->block_size);
		return -1;
	}
	d->max_req -= d->max_req % d->block_size;
	if (d->is_tcp) { /* small requests: no Nagle delay; notice dead peers */
		int fd = nbd_aio_get_fd(d->h), one = 1;

		if (fd >= 0) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		}
	}
	return 0;
}

/*
 * Drive the handle's state machine once, waiting up to timeout_ms for its fd
 * (and d->efd when wake_fd).  Returns -1 when the connection failed.
 */
static int drive(struct fl_dev *d, int timeout_ms, bool wake_fd, bool *woken)
{
	struct pollfd pfd[2];
	unsigned dir;
	int n = 0, r;

	if (woken)
		*woken = false;
	if (wake_fd) {
		pfd[n].fd = d->efd;
		pfd[n].events = POLLIN;
		n++;
	}
	if (d->h) {
		pfd[n].fd = nbd_aio_get_fd(d->h);
		if (pfd[n].fd < 0)
			return -1;
		dir = nbd_aio_get_direction(d->h);
		pfd[n].events = 0;
		if (dir & LIBNBD_AIO_DIRECTION_READ)
			pfd[n].events |= POLLIN;
		if (dir & LIBNBD_AIO_DIRECTION_WRITE)
			pfd[n].events |= POLLOUT;
		n++;
	}
	r = poll(pfd, n, timeout_ms);
	if (r < 0)
		return errno == EINTR ? 0 : -1;
	if (wake_fd && (pfd[0].revents & POLLIN)) {
		uint64_t v;

		if (read(d->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -1;
		if (woken)
			*woken = true;
	}
	if (d->h) {
		struct pollfd *p = &pfd[n - 1];

		if ((p->revents & (POLLIN | POLLHUP | POLLERR)) && nbd_aio_notify_read(d->h) < 0)
			goto dead;
		if ((p->revents & POLLOUT) && nbd_aio_notify_write(d->h) < 0)
			goto dead;
		if (nbd_aio_is_dead(d->h) || nbd_aio_is_closed(d->h))
			goto dead;
	}
	return 0;
dead:
	snprintf(d->last_err, sizeof(d->last_err), "%s",
		 nbd_get_error() ? nbd_get_error() : "connection closed");
	return -1;
}

/* Blocking connect used by open(): retry until FLASHD_OPEN_TIMEOUT_MS. */
static int connect_sync(struct fl_dev *d)
{
	int64_t give_up = now_ms() + FLASHD_OPEN_TIMEOUT_MS;
	unsigned backoff = FLASHD_BACKOFF_MIN_MS;

	for (;;) {
		if (start_connect(d) == 0) {
			while (nbd_aio_is_connecting(d->h)) {
				int64_t left = d->connect_deadline - now_ms();

				if (left <= 0) {
					snprintf(d->last_err, sizeof(d->last_err), "handshake timed out");
					break;
				}
				if (drive(d, left > 1000 ? 1000 : (int)left, false, NULL) < 0)
					break;
			}
			if (d->h && nbd_aio_is_ready(d->h))
				return check_export(d) == 0 ? 0 : -2;
			if (!d->last_err[0])
				snprintf(d->last_err, sizeof(d->last_err), "%s",
					 nbd_get_error() ? nbd_get_error() : "connect failed");
			nbd_close(d->h);
			d->h = NULL;
		}
		if (now_ms() + backoff > give_up)
			return -1;
		usleep(backoff * 1000);
		backoff = backoff * 2 > FLASHD_BACKOFF_MAX_MS ? FLASHD_BACKOFF_MAX_MS : backoff * 2;
	}
}

/* Fail every queued (not yet issued) command with err. */
static void fail_queue(struct fl_dev *d, struct fl_cmd *q, int err)
{
	while (q) {
		struct fl_cmd *next = q->next;

		q->err = err;
		q->refs = 1;
		cmd_put(q);
		q = next;
	}
}

/* Fail every held command with err (I/O thread).  Returns how many. */
static unsigned fail_held(struct fl_dev *d, int err)
{
	struct fl_cmd *q = d->held_head;
	unsigned n = 0;

	d->held_head = d->held_tail = NULL;
	for (struct fl_cmd *c = q; c; c = c->next)
		n++;
	fail_queue(d, q, err);
	return n;
}

/*
 * The connection is gone: go DOWN, schedule a retry; hold what was in
 * flight and what is queued for the grace period (fail it with no grace).
 */
static void conn_lost(struct fl_dev *d, const char *why)
{
	struct fl_cmd *q;
	unsigned inflight = d->inflight;

	pthread_mutex_lock(&d->lock);
	d->state = ST_DOWN;
	d->grace_over = d->t.grace_s == 0;
	pthread_mutex_unlock(&d->lock);
	d->holding = d->t.grace_s > 0;
	d->draining = false;
	d->down_since = now_ms();
	if (d->holding)
		fl_warn(d->dev, "%s: connection lost (%.80s); holding %u in-flight request(s) and new commands for up to %u s; reconnecting\n",
			d->t.desc, why, inflight, d->t.grace_s);
	else
		fl_err(d->dev, "%s: connection lost (%.80s); failing %u in-flight request(s); reconnecting\n",
		       d->t.desc, why, inflight);
	nbd_close(d->h); /* runs every in-flight request's free hook (cmd_finish holds) */
	d->h = NULL;
	while (d->deferred) { /* FUA writes waiting for their flush: all again */
		struct fl_cmd *c = d->deferred;

		d->deferred = c->next;
		if (d->holding) {
			hold_cmd(d, c);
		} else {
			c->next = NULL;
			fail_queue(d, c, ENOTCONN);
		}
	}
	pthread_mutex_lock(&d->lock);
	q = d->q_head;
	d->q_head = d->q_tail = NULL;
	pthread_mutex_unlock(&d->lock);
	while (q) {
		struct fl_cmd *next = q->next;

		if (d->holding) {
			hold_cmd(d, q);
		} else {
			q->next = NULL;
			fail_queue(d, q, ENOTCONN);
		}
		q = next;
	}
	d->attempts = 0;
	d->backoff_ms = FLASHD_BACKOFF_MIN_MS;
	d->next_attempt = now_ms() + d->backoff_ms;
}

static void attempt_failed(struct fl_dev *d)
{
	d->attempts++;
	/* log the 1st, 2nd, 4th, 8th ... failure, not every one */
	if ((d->attempts & (d->attempts - 1)) == 0)
		fl_warn(d->dev, "%s: reconnect attempt %u failed: %.100s\n",
			d->t.desc, d->attempts, d->last_err);
	if (d->h) {
		nbd_close(d->h);
		d->h = NULL;
	}
	set_state(d, ST_DOWN);
	d->next_attempt = now_ms() + d->backoff_ms;
	{	/* commands wait: try more often than the usual backoff */
		unsigned max = d->held_head ? FLASHD_BACKOFF_HOLD_MS : FLASHD_BACKOFF_MAX_MS;

		d->backoff_ms = d->backoff_ms * 2 > max ? max : d->backoff_ms * 2;
	}
}

static void graceful_disconnect(struct fl_dev *d)
{
	int64_t until = now_ms() + 2000;

	if (!d->h)
		return;
	if (nbd_aio_is_ready(d->h) && d->inflight == 0 && nbd_aio_disconnect(d->h, 0) == 0) {
		while (!nbd_aio_is_closed(d->h) && !nbd_aio_is_dead(d->h) && now_ms() < until)
			if (drive(d, 200, false, NULL) < 0)
				break;
	}
	nbd_close(d->h);
	d->h = NULL;
}

/* ------------------------------------------------------------------ I/O thread */

static void *io_thread(void *arg)
{
	struct fl_dev *d = arg;

	for (;;) {
		struct fl_cmd *q;
		enum fl_state state;
		bool stopping;
		int64_t now = now_ms();
		int timeout = -1, grace_left = -1;

		pthread_mutex_lock(&d->lock);
		stopping = d->stopping;
		state = d->state;
		q = d->q_head;
		d->q_head = d->q_tail = NULL;
		pthread_mutex_unlock(&d->lock);

		if (stopping) {
			d->holding = false;
			fail_held(d, ESHUTDOWN);
			fail_queue(d, q, ESHUTDOWN);
			break;
		}
		if (state == ST_READY && !d->draining) {
			struct fl_cmd *h = d->held_head;

			/* held first, oldest first; a refused one may be held again */
			d->held_head = d->held_tail = NULL;
			while (h) {
				struct fl_cmd *next = h->next;

				issue_cmd(d, h);
				h = next;
			}
			while (q) {
				struct fl_cmd *next = q->next;

				issue_cmd(d, q);
				q = next;
			}
			while (d->deferred) { /* FUA emulation: flush after the write */
				struct fl_cmd *c = d->deferred;

				d->deferred = c->next;
				c->refs = 1;
				issue_one(d, c, OP_FLUSH, NULL, 0, 0, 0);
				cmd_put(c);
			}
		} else if (d->holding) {
			/* commands wait now: the next attempt within the hold backoff */
			if (q && state == ST_DOWN && d->next_attempt > now + FLASHD_BACKOFF_HOLD_MS) {
				d->next_attempt = now + FLASHD_BACKOFF_HOLD_MS;
				d->backoff_ms = FLASHD_BACKOFF_HOLD_MS;
			}
			while (q) {
				struct fl_cmd *next = q->next;

				hold_cmd(d, q);
				q = next;
			}
		} else {
			fail_queue(d, q, ENOTCONN);
		}

		/* timers */
		now = now_ms();
		if (state == ST_READY && d->draining) {
			conn_lost(d, "flashd is shutting down");
			continue;
		}
		if (state != ST_READY && d->holding) {
			int64_t left = d->down_since + (int64_t)d->t.grace_s * 1000 - now;

			if (left <= 0) {
				unsigned n;

				d->holding = false;
				pthread_mutex_lock(&d->lock);
				d->grace_over = true;
				pthread_mutex_unlock(&d->lock);
				n = fail_held(d, ENOTCONN);
				d->st.expired += n;
				fl_err(d->dev, "%s: down for %u s (grace): failing %u held command(s) and new ones until reconnected\n",
				       d->t.desc, d->t.grace_s, n);
				continue;
			}
			grace_left = (int)left;
		}
		if (state == ST_DOWN) {
			if (now >= d->next_attempt) {
				if (start_connect(d) == 0) {
					set_state(d, ST_CONNECTING);
					state = ST_CONNECTING;
				} else {
					attempt_failed(d);
				}
				continue;
			}
			timeout = (int)(d->next_attempt - now);
		} else if (state == ST_CONNECTING) {
			if (now >= d->connect_deadline) {
				snprintf(d->last_err, sizeof(d->last_err), "handshake timed out");
				attempt_failed(d);
				continue;
			}
			timeout = (int)(d->connect_deadline - now);
		} else if (d->inflight) {
			int64_t stall = now - d->last_progress;

			if (stall >= FLASHD_IO_TIMEOUT_MS) {
				char why[96];

				snprintf(why, sizeof(why), "no reply for %" PRId64 " ms", stall);
				conn_lost(d, why);
				continue;
			}
			timeout = (int)(FLASHD_IO_TIMEOUT_MS - stall);
		}

		if (grace_left >= 0 && (timeout < 0 || grace_left < timeout))
			timeout = grace_left;
		if (drive(d, timeout, true, NULL) < 0) {
			if (state == ST_READY) {
				conn_lost(d, d->last_err);
			} else if (state == ST_CONNECTING) {
				attempt_failed(d);
			} else {
				fl_err(d->dev, "poll failed: %s\n", strerror(errno));
				usleep(100000);
			}
			continue;
		}
		if (state == ST_CONNECTING && d->h && nbd_aio_is_ready(d->h)) {
			if (check_export(d) == 0) {
				unsigned n = 0;

				for (struct fl_cmd *c = d->held_head; c; c = c->next)
					n++;
				d->st.reconnects++;
				fl_info(d->dev, "%s: reconnected after %u failed attempt(s), %.1f s down; sending %u held command(s)\n",
					d->t.desc, d->attempts, (now_ms() - d->down_since) / 1000.0, n);
				d->backoff_ms = FLASHD_BACKOFF_MIN_MS;
				pthread_mutex_lock(&d->lock);
				d->state = ST_READY;
				d->grace_over = false;
				pthread_mutex_unlock(&d->lock);
				d->holding = d->t.grace_s > 0;
			} else {
				fl_err(d->dev, "reconnect refused: %.200s\n", d->last_err);
				attempt_failed(d);
			}
		}
	}

	/* stopping: fail what is left, then leave politely */
	{
		struct fl_cmd *q = d->deferred;

		d->deferred = NULL;
		fail_queue(d, q, ESHUTDOWN);
	}
	if (d->h && d->inflight) {
		int64_t until = now_ms() + 5000; /* let in-flight requests finish */

		while (d->inflight && now_ms() < until)
			if (drive(d, 200, false, NULL) < 0)
				break;
	}
	graceful_disconnect(d); /* nbd_close completes anything still out */
	return NULL;
}

/* ------------------------------------------------------------------ callouts */

/* Queue c for the I/O thread (which holds it while down); or fail it at
 * once while down past the grace. */
static int submit(struct fl_dev *d, struct fl_cmd *c)
{
	int st;

	pthread_mutex_lock(&d->lock);
	if (d->stopping || (d->state != ST_READY && d->grace_over)) {
		pthread_mutex_unlock(&d->lock);
		/* down past the grace: fail now; tcmu-runner completes it with st */
		__atomic_fetch_add(&d->st.rejected, 1, __ATOMIC_RELAXED);
		st = errno_to_sts(c, ENOTCONN);
		cmd_free(c);
		return st;
	}
	c->next = NULL;
	if (d->q_tail)
		d->q_tail->next = c;
	else
		d->q_head = c;
	d->q_tail = c;
	pthread_mutex_unlock(&d->lock);
	wake(d);
	return TCMU_STS_OK; /* queued: completed later by tcmur_cmd_complete */
}

static struct fl_cmd *new_cmd(struct fl_dev *d, struct tcmur_cmd *cmd, enum fl_op op,
			      uint64_t off, uint64_t len)
{
	struct fl_cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->d = d;
	c->cmd = cmd;
	c->op = op;
	c->off = off;
	c->len = len;
	return c;
}

static bool in_range(struct fl_dev *d, uint64_t off, uint64_t len)
{
	return off <= d->size && len <= d->size - off;
}

static int rw_callout(struct tcmu_device *dev, struct tcmur_cmd *cmd, enum fl_op op,
		      struct iovec *iov, size_t iov_cnt, size_t len, off_t off)
{
	struct fl_dev *d = tcmur_dev_get_private(dev);
	struct fl_cmd *c;
	size_t runs = 0, total = 0;
	bool misaligned = false;

	if (off < 0 || !in_range(d, off, len))
		return TCMU_STS_RANGE;
	c = new_cmd(d, cmd, op, off, len);
	if (!c)
		return TCMU_STS_NO_RESOURCE;
	c->iov = iov;
	c->iov_cnt = iov_cnt;
	for (size_t i = 0; i < iov_cnt; i++) {
		if (i == 0 || (uint8_t *)iov[i].iov_base !=
		    (uint8_t *)iov[i - 1].iov_base + iov[i - 1].iov_len)
			runs++;
		total += iov[i].iov_len;
		/* a piece that ends mid-block would break the export's alignment */
		if (iov[i].iov_len % d->block_size && i + 1 < iov_cnt)
			misaligned = true;
	}
	if (total < len) {
		cmd_free(c);
		return TCMU_STS_INVALID_CDB;
	}
	if (runs > FLASHD_MAX_DIRECT_RUNS || misaligned) {
		c->bounce = true;
		c->buf = malloc(len ? len : 1);
		if (!c->buf) {
			cmd_free(c);
			return TCMU_STS_NO_RESOURCE;
		}
		if (op == OP_WRITE)
			copy_from_iov(c->buf, iov, iov_cnt, len);
		d->st.bounced++;
	}
	if (op == OP_WRITE && cmd && cmd->lib_cmd && cmd->lib_cmd->cdb) {
		uint8_t opc = cmd->lib_cmd->cdb[0];

		/* WRITE(10)/(12)/(16) with FUA */
		if ((opc == 0x2a || opc == 0xaa || opc == 0x8a) && (cmd->lib_cmd->cdb[1] & 0x08))
			c->fua = true;
	}
	return submit(d, c);
}

static int fl_read(struct tcmu_device *dev, struct tcmur_cmd *cmd, struct iovec *iov,
		   size_t iov_cnt, size_t len, off_t off)
{
	return rw_callout(dev, cmd, OP_READ, iov, iov_cnt, len, off);
}

static int fl_write(struct tcmu_device *dev, struct tcmur_cmd *cmd, struct iovec *iov,
		    size_t iov_cnt, size_t len, off_t off)
{
	return rw_callout(dev, cmd, OP_WRITE, iov, iov_cnt, len, off);
}

static int fl_flush(struct tcmu_device *dev, struct tcmur_cmd *cmd)
{
	struct fl_dev *d = tcmur_dev_get_private(dev);
	struct fl_cmd *c = new_cmd(d, cmd, OP_FLUSH, 0, 0);

	if (!c)
		return TCMU_STS_NO_RESOURCE;
	return submit(d, c);
}

/*
 * off and len are BYTES (tcmu-runner converts the UNMAP descriptors).
 * tcmu-runner also routes WRITE SAME with the UNMAP bit here (the usual
 * way Linux zeroes a range when LBPRZ is set): that must read back as
 * zeros, which NBD trim does not promise, so it becomes write_zeroes
 * (which still lets the server deallocate).
 */
static int fl_unmap(struct tcmu_device *dev, struct tcmur_cmd *cmd, uint64_t off, uint64_t len)
{
	struct fl_dev *d = tcmur_dev_get_private(dev);
	struct fl_cmd *c;
	enum fl_op op = OP_TRIM;

	if (!in_range(d, off, len))
		return TCMU_STS_RANGE;
	if (cmd && cmd->lib_cmd && cmd->lib_cmd->cdb &&
	    (cmd->lib_cmd->cdb[0] == 0x41 || cmd->lib_cmd->cdb[0] == 0x93)) /* WRITE SAME(10)/(16) */
		op = OP_ZERO;
	c = new_cmd(d, cmd, op, off, len); /* len 0: completes OK, no request */
	if (!c)
		return TCMU_STS_NO_RESOURCE;
	return submit(d, c);
}

/*
 * WRITE SAME (without the UNMAP bit; with it tcmu-runner calls unmap):
 * an all-zero pattern becomes NBD write_zeroes, any other pattern is
 * written repeatedly from a buffer of up to FLASHD_PATTERN_BUF bytes.
 */
static int fl_writesame(struct tcmu_device *dev, struct tcmur_cmd *cmd, uint64_t off,
			uint64_t len, struct iovec *iov, size_t iov_cnt)
{
	struct fl_dev *d = tcmur_dev_get_private(dev);
	struct fl_cmd *c;
	size_t plen = 0;
	uint8_t *pat;
	bool zero = true;

	for (size_t i = 0; i < iov_cnt; i++)
		plen += iov[i].iov_len;
	if (!plen || plen % d->block_size || len % plen)
		return TCMU_STS_INVALID_CDB;
	if (!in_range(d, off, len))
		return TCMU_STS_RANGE;
	pat = malloc(plen);
	if (!pat)
		return TCMU_STS_NO_RESOURCE;
	copy_from_iov(pat, iov, iov_cnt, plen);
	for (size_t i = 0; i < plen && zero; i++)
		zero = pat[i] == 0;
	c = new_cmd(d, cmd, zero ? OP_ZERO : OP_PATTERN, off, len);
	if (!c) {
		free(pat);
		return TCMU_STS_NO_RESOURCE;
	}
	/* pattern buffer: whole patterns, at most FLASHD_PATTERN_BUF (or one pattern) */
	c->buf_len = len < FLASHD_PATTERN_BUF ? len : FLASHD_PATTERN_BUF;
	c->buf_len -= c->buf_len % plen;
	if (c->buf_len < plen)
		c->buf_len = plen;
	if (c->buf_len > d->max_req && plen <= d->max_req)
		c->buf_len = d->max_req - d->max_req % plen;
	c->buf = malloc(c->buf_len);
	if (!c->buf) {
		free(pat);
		cmd_free(c);
		return TCMU_STS_NO_RESOURCE;
	}
	for (size_t o = 0; o < c->buf_len; o += plen)
		memcpy((uint8_t *)c->buf + o, pat, plen);
	free(pat);
	return submit(d, c);
}

/* ------------------------------------------------------------------ open/close */

static bool fl_check_config(const char *cfgstring, char **reason)
{
	struct fl_target t;
	struct stat sb;

	if (parse_cfg(cfgstring, &t, reason) < 0)
		return false;
	if (t.path && (stat(t.path, &sb) < 0 || !S_ISSOCK(sb.st_mode))) {
		if (asprintf(reason, "%s is not a unix socket (is flashd running? start it with --unix %s)",
			     t.path, t.path) < 0)
			*reason = NULL;
		free_target(&t);
		return false;
	}
	free_target(&t);
	return true;
}

static void fl_dev_free(struct fl_dev *d)
{
	if (d->h)
		nbd_close(d->h);
	if (d->efd >= 0)
		close(d->efd);
	pthread_mutex_destroy(&d->lock);
	free_target(&d->t);
	free(d);
}

static int fl_open(struct tcmu_device *dev, bool reopen)
{
	struct fl_dev *d;
	char *why = NULL;
	uint64_t nlbas = tcmu_dev_get_num_lbas(dev);
	uint32_t gran, max_unmap;
	int r;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->dev = dev;
	d->efd = -1;
	pthread_mutex_init(&d->lock, NULL);
	if (parse_cfg(tcmu_dev_get_cfgstring(dev), &d->t, &why) < 0) {
		fl_err(dev, "%.200s\n", why ? why : "bad cfgstring");
		free(why);
		fl_dev_free(d);
		return -EINVAL;
	}
	d->block_size = tcmu_dev_get_block_size(dev);
	if (d->block_size < 512 || (d->block_size & (d->block_size - 1))) {
		fl_err(dev, "unsupported block size %u (want a power of two >= 512)\n", d->block_size);
		fl_dev_free(d);
		return -EINVAL;
	}
	d->size = nlbas * d->block_size;
	d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (d->efd < 0) {
		r = -errno;
		fl_err(dev, "eventfd: %s\n", strerror(errno));
		fl_dev_free(d);
		return r;
	}

	r = connect_sync(d);
	if (r == -2) { /* connected, but the export does not fit */
		fl_err(dev, "refusing to open: %.200s\n", d->last_err);
		fl_dev_free(d);
		return -EINVAL;
	}
	if (r < 0) {
		fl_err(dev, "cannot connect to %s within %d s: %.100s\n", d->t.desc,
		       FLASHD_OPEN_TIMEOUT_MS / 1000, d->last_err);
		fl_dev_free(d);
		return -ENOTCONN;
	}

	/*
	 * UNMAP: one request per descriptor, unsplit by tcmu-runner (the FTL
	 * trims any extent cheaply), up to 1 GiB per UNMAP; the optimal
	 * granularity is the export's preferred block size (4 KiB if none).
	 */
	{
		int64_t pref = nbd_get_block_size(d->h, LIBNBD_SIZE_PREFERRED);
		uint64_t g = pref > 0 ? (uint64_t)pref : 4096;

		if (g > (1u << 20))
			g = 1u << 20;
		gran = g > d->block_size ? (uint32_t)(g / d->block_size) : 1;
		max_unmap = (uint32_t)(FLASHD_MAX_UNMAP_BYTES / d->block_size);
		tcmu_dev_set_opt_unmap_gran(dev, gran, false);
		/*
		 * Must not stay 0 (tcmu-runner's default): 1.5.4 computes
		 * "lba % unmap_gran_align" for WRITE SAME with the UNMAP bit
		 * and its command thread dies of SIGFPE.  Unaligned requests
		 * fall back to plain WRITE SAME (write_zeroes here).
		 */
		tcmu_dev_set_unmap_gran_align(dev, gran);
		tcmu_dev_set_max_unmap_len(dev, max_unmap);
	}
	tcmu_dev_set_write_cache_enabled(dev, d->can_flush); /* => SYNCHRONIZE CACHE */
	tcmu_dev_set_solid_state_media(dev, true);

	d->state = ST_READY;
	d->holding = d->t.grace_s > 0;
	d->backoff_ms = FLASHD_BACKOFF_MIN_MS;
	tcmur_dev_set_private(dev, d);
	r = pthread_create(&d->thread, NULL, io_thread, d);
	if (r) {
		fl_err(dev, "pthread_create: %s\n", strerror(r));
		tcmur_dev_set_private(dev, NULL);
		fl_dev_free(d);
		return -r;
	}
	fl_info(dev, "%s: %sopened: export %" PRId64 " bytes, backstore %" PRIu64 " bytes (%" PRIu64 " x %u), grace %u s\n",
		d->t.desc, reopen ? "re" : "", d->export_size, d->size, nlbas, d->block_size, d->t.grace_s);
	fl_info(dev, "limits: export min block %u, max request %u; ro=%d flush=%d fua=%d trim=%d zero=%d; unmap gran %u, max unmap %u blocks\n",
		d->min_block, d->max_req, d->ro, d->can_flush, d->can_fua, d->can_trim, d->can_zero,
		gran, max_unmap);
	return 0;
}

static void fl_close(struct tcmu_device *dev)
{
	struct fl_dev *d = tcmur_dev_get_private(dev);
	struct fl_stats *s;

	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stopping = true;
	pthread_mutex_unlock(&d->lock);
	wake(d);
	pthread_join(d->thread, NULL);
	s = &d->st;
	/* two short lines: tcmu-runner cuts log lines at about 256 bytes */
	fl_info(dev, "%s: closed\n", d->t.desc);
	fl_info(dev, "stats ok: read %" PRIu64 " %" PRIu64 " write %" PRIu64 " %" PRIu64 " flush %" PRIu64
		" trim %" PRIu64 " %" PRIu64 " zero %" PRIu64 " %" PRIu64 " wsame %" PRIu64 " %" PRIu64 "\n",
		s->ops[OP_READ], s->bytes[OP_READ], s->ops[OP_WRITE], s->bytes[OP_WRITE], s->ops[OP_FLUSH],
		s->ops[OP_TRIM], s->bytes[OP_TRIM], s->ops[OP_ZERO], s->bytes[OP_ZERO],
		s->ops[OP_PATTERN], s->bytes[OP_PATTERN]);
	fl_info(dev, "stats: failed %" PRIu64 " rejected %" PRIu64 " reconnects %" PRIu64 " bounced %" PRIu64
		" max_inflight %u held %" PRIu64 " expired %" PRIu64 "\n", s->errors, s->rejected,
		s->reconnects, s->bounced, s->max_inflight, s->held, s->expired);
	tcmur_dev_set_private(dev, NULL);
	fl_dev_free(d);
}

static struct tcmur_handler flashd_handler = {
	.name = "flashd NBD bridge",
	.subtype = FLASHD_SUBTYPE,
	.cfg_desc = "<export>[@<unix socket>|@<host>/<port>|@<host>:<port>|@[<ipv6>]:<port>][;grace=SECONDS], "
		    "default socket " FLASHD_DEFAULT_SOCKET,
	.check_config = fl_check_config,
	.open = fl_open,
	.close = fl_close,
	.nr_threads = 0, /* asynchronous: we call tcmur_cmd_complete() */
	.read = fl_read,
	.write = fl_write,
	.flush = fl_flush,
	.unmap = fl_unmap,
	.writesame = fl_writesame,
};

int handler_init(void);
int handler_init(void)
{
	return tcmur_register_handler(&flashd_handler);
}
