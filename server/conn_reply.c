/*
 * server/conn_reply.c - the output side of an NBD connection, on the
 * ioDimm's thread: laying out a request's reply (req_build_reply), queueing
 * it (req_finish: c->sendq, which this file alone changes besides the hand
 * over to the send thread, tx_take) and sending the queue inline, in one
 * sendmsg per loop turn (coalesced replies, up to MAX_IOV iovecs), or
 * through SSL_write (conn_flush).  It counts each answered request in
 * d->io.  Called by conn_request.c (req_finish), conn_tx.c (replies_iov,
 * io_account_sent), conn.c (conn_flush) and the event loop (conn_write_cb).
 *
 * Each answered request is
 * counted in d->io (io_account: its kind, bytes, service latency bucket;
 * no allocation), and once its reply is handed to the kernel its latency
 * as the client sees it (io_account_sent), from r->t_in: when the request
 * was complete in the socket (its header, or a WRITE's payload).  Over
 * TCP that is the kernel's receive timestamp of the newest bytes a recv
 * returned (SO_TIMESTAMPNS: the time a request waited in the socket while
 * this thread was busy counts too); on the unix socket and under TLS,
 * where no timestamp comes, the time of the read.  Cost: a clock read per
 * receive, per request dispatched and per send, one more per receive that
 * carries a timestamp.
 * TLS (c->ssl, negotiated by the handshake): replies are copied from the
 * send queue into c->tout (up to TOUT_SIZE, allocated on first use) and
 * written with SSL_write, retried with the same bytes after
 * SSL_ERROR_WANT_WRITE.  A request is retired once its reply is in
 * c->tout; a closing connection waits for c->tout to be written
 * (conn_maybe_free).  Renegotiation is off (tls.c); a TLS 1.3 key update
 * that makes SSL_read want to write is finished by conn_write_cb.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/queue.h"
#include "server/conn_int.h"

#define TOUT_SIZE (256u << 10)        /* TLS: replies staged for SSL_write */

/* ---- replies ------------------------------------------------------------ */

static const char *nbd_errname(int e)
{
	switch (e) {
	case NBD_EPERM: return "operation not permitted (read-only export)";
	case NBD_EIO: return "input/output error";
	case NBD_ENOMEM: return "out of memory";
	case NBD_EINVAL: return "invalid request";
	case NBD_ENOSPC: return "no space (beyond the end of the export, or the device is full)";
	case NBD_EOVERFLOW: return "too large for an unfragmented reply";
	case NBD_ENOTSUP: return "fast zeroing not possible";
	case NBD_ESHUTDOWN: return "server shutting down";
	}
	return "error";
}

static void chunk_hdr(uint8_t *p, uint16_t flags, uint16_t type, uint64_t handle, uint32_t len)
{
	put32(p, NBD_STRUCTURED_REPLY_MAGIC);
	put16(p + 4, flags);
	put16(p + 6, type);
	put64(p + 8, handle);
	put32(p + 16, len);
}

static void iov_add(struct req *r, void *base, size_t len)
{
	r->iov[r->niov].iov_base = base;
	r->iov[r->niov].iov_len = len;
	r->niov++;
	r->reply_bytes += len;
}

/* Lay out the reply of r in r->hdr and r->iov. */
static void req_build_reply(struct req *r)
{
	struct conn *c = r->c;
	r->niov = 0;
	r->reply_bytes = 0;
	uint8_t *h = r->hdr;

	if (r->error && c->structured) {
		const char *msg = nbd_errname(r->error);
		size_t ml = strlen(msg);
		chunk_hdr(h, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, r->handle, (uint32_t)(6 + ml));
		put32(h + 20, (uint32_t)r->error);
		put16(h + 24, (uint16_t)ml);
		iov_add(r, h, 26);
		iov_add(r, (void *)msg, ml);
		return;
	}
	if (!c->structured || r->type != NBD_CMD_READ || r->error) {
		if (r->type == NBD_CMD_BLOCK_STATUS && c->structured && !r->error) {
			/* handled below */
		} else {
			put32(h, NBD_SIMPLE_REPLY_MAGIC);
			put32(h + 4, (uint32_t)r->error);
			put64(h + 8, r->handle);
			iov_add(r, h, 16);
			if (r->type == NBD_CMD_READ && !r->error && r->length)
				iov_add(r, r->buf, r->length);
			return;
		}
	}
	if (r->type == NBD_CMD_BLOCK_STATUS) {
		chunk_hdr(h, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, r->handle, r->payload_len);
		iov_add(r, h, 20);
		iov_add(r, r->buf, r->payload_len);
		return;
	}
	/* structured READ */
	if (!r->length) {
		chunk_hdr(h, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, r->handle, 0);
		iov_add(r, h, 20);
		return;
	}
	for (int i = 0; i < r->nchunks; i++) {
		struct chunk *k = &r->chunks[i];
		uint16_t fl = i + 1 == r->nchunks ? NBD_REPLY_FLAG_DONE : 0;
		if (k->data) {
			chunk_hdr(h, fl, NBD_REPLY_TYPE_OFFSET_DATA, r->handle, k->len + 8);
			put64(h + 20, k->off);
			iov_add(r, h, 28);
			iov_add(r, r->buf + (k->off - r->offset), k->len);
			h += 28;
		} else {
			chunk_hdr(h, fl, NBD_REPLY_TYPE_OFFSET_HOLE, r->handle, 12);
			put64(h + 20, k->off);
			put32(h + 28, k->len);
			iov_add(r, h, 32);
			h += 32;
		}
	}
}

static enum lat_class req_lat_class(const struct req *r)
{
	switch (r->type) {
	case NBD_CMD_READ: return LAT_READ;
	case NBD_CMD_WRITE: return LAT_WRITE;
	case NBD_CMD_FLUSH: return LAT_FLUSH;
	default: return LAT_OTHER;
	}
}

/* Count r in the export's I/O counters (flashd.h, struct io_counters):
 * answered, its service latency. */
static void io_account(struct dimm *d, const struct req *r)
{
	int k;
	switch (r->type) {
	case NBD_CMD_READ: k = IOK_READ; break;
	case NBD_CMD_WRITE: k = IOK_WRITE; break;
	case NBD_CMD_FLUSH: k = IOK_FLUSH; break;
	case NBD_CMD_TRIM: k = IOK_TRIM; break;
	case NBD_CMD_WRITE_ZEROES: k = IOK_ZEROES; break;
	default: k = IOK_OTHER; break;
	}
	struct io_counters *io = &d->io;
	io->ops[k]++;
	if (r->error)
		io->errors[k]++;
	else if (k != IOK_FLUSH && k != IOK_OTHER)
		io->bytes[k] += r->length;
	int l = req_lat_class(r);
	uint64_t ns = nand_now_ns() - r->t0;
	io->svc[l][lat_bucket(ns)]++;
	io->svc_sum_ns[l] += ns;
}

/* r's reply was handed to the kernel at now: its latency as the client
 * sees it (replies dropped with their connection are not counted). */
void io_account_sent(struct dimm *d, const struct req *r, uint64_t now)
{
	int l = req_lat_class(r);
	uint64_t ns = now > r->t_in ? now - r->t_in : 0;
	d->io.lat[l][lat_bucket(ns)]++;
	d->io.lat_sum_ns[l] += ns;
}

/* r is answered: queue its reply (or drop it on a dead socket). */
void req_finish(struct req *r)
{
	struct conn *c = r->c;
	io_account(c->d, r);
	if (c->dead || r->no_reply) {
		req_put(c, r);
		conn_maybe_free(c);
		return;
	}
	req_build_reply(r);
	c->last_ns = nand_now_ns();
	QUEUE_APPEND(c->sendq, c->sendq_tail, r, next);
	conn_mark_dirty(c);
}

/* ---- sending ------------------------------------------------------------ */

void conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	if (c->read_wants_write) {
		/* SSL_read wanted to write (a key update): read on */
		c->read_wants_write = false;
		if (c->reading)
			event_active(c->rev, EV_READ, 0);
	}
	conn_flush(c);
	dimm_kick(c->d);
}

/* TLS: copy queued replies into c->tout (retiring those copied whole:
 * SSL_write takes them at once unless the socket is full). */
static void tout_fill(struct conn *c)
{
	size_t room = TOUT_SIZE;
	uint64_t now = nand_now_ns();
	c->tout_pos = c->tout_len = 0;
	while (c->sendq && room) {
		struct req *r = c->sendq;
		size_t skip = c->head_sent, took = 0;
		for (int i = 0; i < r->niov && room; i++) {
			size_t l = r->iov[i].iov_len;
			if (skip >= l) {
				skip -= l;
				continue;
			}
			size_t k = l - skip < room ? l - skip : room;
			memcpy(c->tout + c->tout_len, (uint8_t *)r->iov[i].iov_base + skip, k);
			c->tout_len += k;
			room -= k;
			took += k;
			skip = 0;
		}
		c->head_sent += took;
		if (c->head_sent < r->reply_bytes)
			break;
		c->head_sent = 0;
		c->sendq = r->next;
		if (!c->sendq)
			c->sendq_tail = NULL;
		io_account_sent(c->d, r, now);
		req_put(c, r);
	}
}

/* TLS: write what is queued; false when the socket is full (wev armed). */
static bool tls_flush(struct conn *c)
{
	if (!c->tout && !(c->tout = malloc(TOUT_SIZE))) {
		conn_close_now(c, "out of memory for the TLS output buffer");
		return true;
	}
	while (!c->dead) {
		if (c->tout_pos == c->tout_len) {
			if (!c->sendq)
				break;
			tout_fill(c);
			if (!c->tout_len)
				break;
		}
		ERR_clear_error();
		int n = SSL_write(c->ssl, c->tout + c->tout_pos, (int)(c->tout_len - c->tout_pos));
		if (n > 0) {
			c->tout_pos += (size_t)n;
			c->last_ns = nand_now_ns();
			c->d->activity++; /* as conn_flush's sends */
			continue;
		}
		int e = SSL_get_error(c->ssl, n);
		if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
			/* WANT_READ needs renegotiation, which is off: treated alike */
			event_add(c->wev, NULL);
			return false;
		}
		tls_last_error(c->ssl, n, c->tls_why, sizeof c->tls_why);
		conn_close_now(c, c->tls_why);
	}
	return true;
}

/* The iovecs of queued replies q (linked by next), the first skip bytes
 * left out (sent already), whole replies up to MAX_IOV entries; returns
 * how many. */
int replies_iov(const struct req *q, size_t skip, struct iovec *iov)
{
	int n = 0;
	for (const struct req *r = q; r && n + r->niov <= MAX_IOV; r = r->next) {
		for (int i = 0; i < r->niov; i++) {
			if (skip >= r->iov[i].iov_len) {
				skip -= r->iov[i].iov_len;
				continue;
			}
			iov[n].iov_base = (uint8_t *)r->iov[i].iov_base + skip;
			iov[n].iov_len = r->iov[i].iov_len - skip;
			skip = 0;
			n++;
		}
	}
	return n;
}

void conn_flush(struct conn *c)
{
	if (c->ssl) {
		if (!c->dead && !tls_flush(c))
			return;
		if (c->dead)
			c->tout_pos = c->tout_len = 0;
	}
	struct iovec iov[MAX_IOV];
	while (c->sendq && !c->dead && !tx_take(c)) {
		int n = replies_iov(c->sendq, c->head_sent, iov);
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (sent < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				event_add(c->wev, NULL);
				return;
			}
			if (errno == EINTR)
				continue;
			conn_close_now(c, strerror(errno));
			break;
		}
		if (sent > 0) {
			c->last_ns = nand_now_ns();
			/* the client's next request follows its reply:
			 * poll for it (dimm_loop) */
			c->d->activity++;
		}
		/* retire fully sent replies */
		size_t left = c->head_sent + (size_t)sent;
		while (c->sendq && left >= c->sendq->reply_bytes) {
			struct req *r = c->sendq;
			left -= r->reply_bytes;
			c->sendq = r->next;
			if (!c->sendq)
				c->sendq_tail = NULL;
			io_account_sent(c->d, r, c->last_ns);
			req_put(c, r);
		}
		c->head_sent = left;
	}
	if (c->dead) {
		/* drop whatever is queued */
		while (c->sendq) {
			struct req *r = c->sendq;
			c->sendq = r->next;
			req_put(c, r);
		}
		c->sendq_tail = NULL;
		c->head_sent = 0;
	}
	event_del(c->wev);
	if (c->read_wants_write) {
		c->read_wants_write = false;
		if (c->reading)
			event_active(c->rev, EV_READ, 0);
	}
	maybe_resume(c);
}
