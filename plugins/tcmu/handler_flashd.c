/*
 * handler_flashd.c - tcmu-runner handler (subtype "flashd"): serves a LIO
 * "user:flashd" backstore from a flashd NBD export through libnbd.  This
 * file owns the SCSI side: the cfgstring, the callouts tcmu-runner calls
 * (read, write, flush, unmap, writesame, open, close) and the SCSI status
 * of a result; the NBD side (the I/O thread, connection, reconnection) is
 * plugins/tcmu/handler_nbd.c, the tcmu-runner ABI plugins/tcmu/tcmu_abi.h.
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
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "common/queue.h"
#include "plugins/tcmu/handler_int.h"

/* ------------------------------------------------------------------ helpers */

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

/* Copy the first len bytes of the iovec into dst (the iovec itself unchanged). */
static void copy_from_iov(uint8_t *dst, const struct iovec *iov, size_t cnt, size_t len)
{
	for (size_t i = 0; i < cnt && len; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(dst, iov[i].iov_base, n);
		dst += n;
		len -= n;
	}
}

static bool is_write_op(enum fl_op op)
{
	return op != OP_READ;
}

int errno_to_sts(struct fl_cmd *c, int err)
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
	QUEUE_APPEND(d->q_head, d->q_tail, c, next);
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
