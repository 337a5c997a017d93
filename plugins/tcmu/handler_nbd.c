/*
 * plugins/tcmu/handler_nbd.c - the NBD side of the flashd tcmu-runner
 * handler: each device's I/O thread, which alone owns its libnbd handle
 * and the fields of struct fl_dev marked "I/O thread only".  It takes the
 * commands the callouts (handler_flashd.c) queue under d->lock, issues
 * them as NBD requests, completes each to tcmu-runner exactly once (from
 * libnbd's free hook), and keeps the connection: connect, reconnect,
 * hold commands for the grace period.  Called by handler_flashd.c alone:
 * connect_sync from open(), io_thread as the device's thread.
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
 * as with no grace) and new ones fail at once until the handler reconnects.  The
 * grace must stay below the backstore's cmd_time_out (LIO, 30 s by
 * default) and the initiator's SCSI command timeout (30 s), or those fire
 * first.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "common/queue.h"
#include "plugins/tcmu/handler_int.h"

static const char *const op_name[] = { "read", "write", "flush", "trim", "write-zeroes", "write-same" };

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copy len bytes of src into the iovec (the iovec itself unchanged). */
static void copy_to_iov(const struct iovec *iov, size_t cnt, const uint8_t *src, size_t len)
{
	for (size_t i = 0; i < cnt && len; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(iov[i].iov_base, src, n);
		src += n;
		len -= n;
	}
}

/* An errno that says the connection (not the request) failed: send again. */
static bool conn_errno(int e)
{
	return e == ENOTCONN || e == ESHUTDOWN || e == ECONNRESET || e == ECONNABORTED ||
	       e == EPIPE || e == ETIMEDOUT;
}

/* ------------------------------------------------------------------ completion */

void cmd_free(struct fl_cmd *c)
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
	QUEUE_APPEND(d->held_head, d->held_tail, c, next);
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

int connect_sync(struct fl_dev *d)
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

/* The commands q just taken from the queue, and the held and deferred
 * ones: issued while connected (held first, oldest first; a refused one
 * may be held again), held while down within the grace, else failed. */
static void io_dispatch(struct fl_dev *d, enum fl_state state, struct fl_cmd *q, int64_t now)
{
	if (state == ST_READY && !d->draining) {
		struct fl_cmd *h = d->held_head;

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
}

/*
 * The timers of state: the server draining, the grace running out, the
 * next connection attempt, a handshake or a reply overdue.  Returns false
 * when one fired (the state changed: look again), else true with
 * *timeout the wait until the next one (-1: none).
 */
static bool io_timers(struct fl_dev *d, enum fl_state state, int *timeout)
{
	int64_t now = now_ms();
	int grace_left = -1;

	*timeout = -1;
	if (state == ST_READY && d->draining) {
		conn_lost(d, "flashd is shutting down");
		return false;
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
			return false;
		}
		grace_left = (int)left;
	}
	if (state == ST_DOWN) {
		if (now >= d->next_attempt) {
			if (start_connect(d) == 0)
				set_state(d, ST_CONNECTING);
			else
				attempt_failed(d);
			return false;
		}
		*timeout = (int)(d->next_attempt - now);
	} else if (state == ST_CONNECTING) {
		if (now >= d->connect_deadline) {
			snprintf(d->last_err, sizeof(d->last_err), "handshake timed out");
			attempt_failed(d);
			return false;
		}
		*timeout = (int)(d->connect_deadline - now);
	} else if (d->inflight) {
		int64_t stall = now - d->last_progress;

		if (stall >= FLASHD_IO_TIMEOUT_MS) {
			char why[96];

			snprintf(why, sizeof(why), "no reply for %" PRId64 " ms", stall);
			conn_lost(d, why);
			return false;
		}
		*timeout = (int)(FLASHD_IO_TIMEOUT_MS - stall);
	}
	if (grace_left >= 0 && (*timeout < 0 || grace_left < *timeout))
		*timeout = grace_left;
	return true;
}

/* The handshake of a reconnection is done: READY if the export still
 * fits (the held commands go out next), else another attempt. */
static void io_reconnected(struct fl_dev *d)
{
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

/* Stopping: fail what is left, then leave politely. */
static void io_stop(struct fl_dev *d, struct fl_cmd *q)
{
	struct fl_cmd *deferred = d->deferred;

	d->holding = false;
	fail_held(d, ESHUTDOWN);
	fail_queue(d, q, ESHUTDOWN);
	d->deferred = NULL;
	fail_queue(d, deferred, ESHUTDOWN);
	if (d->h && d->inflight) {
		int64_t until = now_ms() + 5000; /* let in-flight requests finish */

		while (d->inflight && now_ms() < until)
			if (drive(d, 200, false, NULL) < 0)
				break;
	}
	graceful_disconnect(d); /* nbd_close completes anything still out */
}

void *io_thread(void *arg)
{
	struct fl_dev *d = arg;

	for (;;) {
		struct fl_cmd *q;
		enum fl_state state;
		bool stopping;
		int64_t now = now_ms();
		int timeout;

		pthread_mutex_lock(&d->lock);
		stopping = d->stopping;
		state = d->state;
		q = d->q_head;
		d->q_head = d->q_tail = NULL;
		pthread_mutex_unlock(&d->lock);

		if (stopping) {
			io_stop(d, q);
			return NULL;
		}
		io_dispatch(d, state, q, now);
		if (!io_timers(d, state, &timeout))
			continue;
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
		if (state == ST_CONNECTING && d->h && nbd_aio_is_ready(d->h))
			io_reconnected(d);
	}
}
