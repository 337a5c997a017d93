/*
 * server/conn_request.c - the input side of an NBD connection, on the
 * ioDimm's thread: reading the socket (conn_read_cb, conn_recv), parsing
 * request headers and payloads (parse_input), checking each request
 * (req_check) and handing it to the FTL (req_dispatch).  It alone starts
 * and stops reading (c->reading) and owns the input buffer (c->in) and the
 * WRITE being received or discarded (c->cur, c->discard_*).  Called by the
 * event loop and the other conn_*.c files (conn_int.h).
 *
 * Requests are parsed many per receive and handed to the FTL at once; the
 * FTL completes most of them inside ftl_submit (RAM-speed media), so their
 * replies pile up in the connection's send queue and leave in one sendmsg
 * per event-loop turn (coalesced replies, up to IOV_MAX iovecs).
 * Data paths:
 *   READ   the FTL reads into the request's buffer, which the reply iovec
 *          points at (one copy: media -> buffer -> socket).  With structured
 *          replies, runs of unmapped units become OFFSET_HOLE chunks and an
 *          all-unmapped read is answered without touching the FTL.
 *   WRITE  a payload that arrived whole in the input buffer goes to the FTL
 *          from there; only if the write has to wait (buffer full, GC) is it
 *          copied to the request's own buffer.  Larger payloads are received
 *          straight into the request's buffer.
 * Request limits (flashd.h, "Request sizes"): a client bound by
 *   NBD_INFO_BLOCK_SIZE (c->strict) keeps to the sector and MAX_PAYLOAD;
 *   any other gets any byte alignment (the FTL read-modify-writes partial
 *   units: FTL_IO_ANY_ALIGN) and READ/WRITE up to MAX_PAYLOAD_ANY.
 *   Payload-less commands take any length inside the export.
 * In-flight limits and request memory: conn_buf.c ("Memory").
 * TLS: reads go through SSL_read (conn_recv).  Plaintext OpenSSL holds
 * beyond what was read (SSL_pending) does not wake the socket's read
 * event, so conn_read_cb activates itself while some is left.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "server/conn_int.h"

#define META_ALLOCATION_ID 1

static int nbd_errno(int err)
{
	switch (-err) {
	case 0: return 0;
	case EPERM: case EROFS: return NBD_EPERM;
	case EIO: return NBD_EIO;
	case ENOMEM: return NBD_ENOMEM;
	case EINVAL: return NBD_EINVAL;
	case ENOSPC: case EDQUOT: case EFBIG: return NBD_ENOSPC;
	case EOVERFLOW: return NBD_EOVERFLOW;
	case ENOTSUP: return NBD_ENOTSUP;
	case ESHUTDOWN: return NBD_ESHUTDOWN;
	default: return NBD_EIO;
	}
}

static void req_io_done(struct ftl_io *io)
{
	struct req *r = (struct req *)io;
	r->io_pending = false;
	r->c->in_ftl--;
	if (io->type == FTL_IO_READ)
		r->c->d->reads_in_ftl--;
	if (io->status)
		r->error = nbd_errno(io->status);
	req_finish(r);
}

/* ---- request handling --------------------------------------------------- */

/* Plan the chunks of a structured READ from the allocation map. */
static void read_plan(struct conn *c, struct req *r)
{
	struct ftl *f = c->d->ftl;
	uint64_t off = r->offset, end = r->offset + r->length;
	bool df = r->flags & NBD_CMD_FLAG_DF;
	r->nchunks = 0;
	while (off < end) {
		bool mapped;
		uint64_t n = ftl_map_extent(f, off, end - off, &mapped);
		if (!n)
			break;
		if (r->nchunks == MAX_CHUNKS) {
			r->nchunks = 0;
			break;
		}
		r->chunks[r->nchunks++] = (struct chunk){ off, (uint32_t)n, mapped };
		off += n;
	}
	/* DF: one content chunk; a mix of data and holes goes as data */
	if (r->nchunks == 0 || (df && r->nchunks > 1)) {
		r->chunks[0] = (struct chunk){ r->offset, r->length, true };
		r->nchunks = 1;
	}
}

static void do_read(struct conn *c, struct req *r)
{
	if (c->structured) {
		read_plan(c, r);
		if (r->nchunks == 1 && !r->chunks[0].data) {
			req_finish(r); /* all holes: nothing to read */
			return;
		}
	}
	if (req_buf(r, r->length) < 0) {
		r->error = NBD_ENOMEM;
		req_finish(r);
		return;
	}
	r->io = (struct ftl_io){ .type = FTL_IO_READ, .flags = c->strict ? 0 : FTL_IO_ANY_ALIGN,
				 .offset = r->offset, .length = r->length, .buf = r->buf,
				 .done = req_io_done };
	r->io_pending = true;
	c->in_ftl++;
	c->d->reads_in_ftl++;
	ftl_submit(c->d->ftl, &r->io);
}

static void do_block_status(struct conn *c, struct req *r)
{
	struct ftl *f = c->d->ftl;
	uint32_t max = (r->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : MAX_EXTENTS;
	if (req_buf(r, 4 + 8 * (size_t)max) < 0) {
		r->error = NBD_ENOMEM;
		req_finish(r);
		return;
	}
	put32(r->buf, META_ALLOCATION_ID);
	uint32_t n = 0;
	uint64_t off = r->offset, end = r->offset + r->length;
	while (off < end && n < max) {
		bool mapped;
		uint64_t len = ftl_map_extent(f, off, end - off, &mapped);
		if (!len)
			break;
		/* descriptors end on unit boundaries (or the request's end), so
		 * for an aligned request they are multiples of the sector; an
		 * unaligned one (no constraints negotiated) may begin with a
		 * shorter descriptor */
		put32(r->buf + 4 + 8 * n, (uint32_t)len);
		put32(r->buf + 8 + 8 * n, mapped ? 0 : NBD_STATE_HOLE | NBD_STATE_ZERO);
		n++;
		off += len;
	}
	r->payload_len = 4 + 8 * n;
	req_finish(r);
}

static void do_ftl(struct conn *c, struct req *r, enum ftl_io_type type, uint32_t fl, void *buf)
{
	/* without negotiated constraints any byte range goes to the FTL, which
	 * read-modify-writes partial units (trims zero them) in its serialised
	 * write queue: concurrent writes to bytes of one unit never lose each
	 * other's bytes */
	if (!c->strict)
		fl |= FTL_IO_ANY_ALIGN;
	r->io = (struct ftl_io){ .type = type, .flags = fl, .offset = r->offset, .length = r->length,
				 .buf = buf, .done = req_io_done };
	r->io_pending = true;
	c->in_ftl++;
	ftl_submit(c->d->ftl, &r->io);
}

/* Validate a request header; returns the NBD error to answer with, or 0. */
static int req_check(struct conn *c, uint16_t type, uint16_t flags, uint64_t offset, uint32_t length)
{
	struct dimm *d = c->d;
	uint32_t allowed = NBD_CMD_FLAG_FUA;
	switch (type) {
	case NBD_CMD_READ:
		if (c->structured)
			allowed |= NBD_CMD_FLAG_DF;
		break;
	case NBD_CMD_WRITE:
	case NBD_CMD_FLUSH:
	case NBD_CMD_TRIM:
	case NBD_CMD_CACHE:
		break;
	case NBD_CMD_WRITE_ZEROES:
		allowed |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
		break;
	case NBD_CMD_BLOCK_STATUS:
		allowed |= NBD_CMD_FLAG_REQ_ONE;
		break;
	default:
		return NBD_EINVAL;
	}
	if (flags & ~allowed)
		return NBD_EINVAL;
	if (type == NBD_CMD_FLUSH)
		return 0;
	bool writes = type == NBD_CMD_WRITE || type == NBD_CMD_WRITE_ZEROES ||
		      type == NBD_CMD_TRIM;
	if (writes && (d->cfg->readonly || c->readonly))
		return NBD_EPERM;
	if (offset > d->size || length > d->size - offset)
		return type == NBD_CMD_WRITE || type == NBD_CMD_WRITE_ZEROES ? NBD_ENOSPC
										   : NBD_EINVAL;
	/* a client bound by NBD_INFO_BLOCK_SIZE keeps to the sector; any
	 * other may use any byte (the spec's default minimum block of 1) */
	uint32_t ss = d->info.sector_size;
	if (c->strict && (offset % ss || length % ss))
		return NBD_EINVAL;
	/* only READ and WRITE carry their length as payload and are limited;
	 * TRIM, WRITE_ZEROES, CACHE and BLOCK_STATUS take any length in range
	 * (the FTL unmaps or zeroes unit by unit through its write buffer) */
	if ((type == NBD_CMD_READ || type == NBD_CMD_WRITE) && length > c->max_payload)
		return NBD_EINVAL;
	if (type == NBD_CMD_BLOCK_STATUS && (!c->structured || !c->meta_allocation || !length))
		return NBD_EINVAL;
	if (type == NBD_CMD_WRITE_ZEROES && (flags & NBD_CMD_FLAG_FAST_ZERO) &&
	    (flags & NBD_CMD_FLAG_NO_HOLE))
		return NBD_ENOTSUP; /* writing zero pages is no faster than a write */
	return 0;
}

/* Run a request whose header (and WRITE payload, at data) is complete. */
static void req_dispatch(struct conn *c, struct req *r, uint8_t *data)
{
	c->nrequests++;
	r->t_in = c->in_ns;
	r->t0 = nand_now_ns();
	if (r->error) {
		req_finish(r);
		return;
	}
	uint32_t fua = (r->flags & NBD_CMD_FLAG_FUA) ? FTL_IO_FUA : 0;
	switch (r->type) {
	case NBD_CMD_READ:
		do_read(c, r);
		break;
	case NBD_CMD_WRITE:
		do_ftl(c, r, FTL_IO_WRITE, fua, data);
		/* still waiting inside the FTL: give it a copy of its own, the
		 * input buffer is about to be reused (the FTL reads io.buf only
		 * inside ftl_submit/ftl_poll); buffer_limit was asked for it
		 * before the request was parsed (buf_need) */
		if (r->io_pending && data != r->buf && r->length) {
			if (req_buf(r, r->length) == 0) {
				memcpy(r->buf, data, r->length);
				r->io.buf = r->buf;
			} else {
				log_err("%s: out of memory for a waiting write", c->peer);
				c->closing = true;
				c->dead = true;
				tx_drop(c);
			}
		}
		break;
	case NBD_CMD_FLUSH:
		do_ftl(c, r, FTL_IO_FLUSH, 0, NULL);
		break;
	case NBD_CMD_TRIM:
		do_ftl(c, r, FTL_IO_TRIM, fua, NULL);
		break;
	case NBD_CMD_WRITE_ZEROES:
		do_ftl(c, r, FTL_IO_WRITE_ZEROES,
		       fua | ((r->flags & NBD_CMD_FLAG_NO_HOLE) ? FTL_IO_NO_HOLE : 0), NULL);
		break;
	case NBD_CMD_CACHE:
		req_finish(r); /* the data is on NAND or in RAM already */
		break;
	case NBD_CMD_BLOCK_STATUS:
		do_block_status(c, r);
		break;
	}
}

/*
 * What a request parsed now charges to c->inflight_bytes: its payload (a
 * READ's data, a WRITE's, a BLOCK_STATUS reply).  0 for everything else,
 * and for requests that are refused (err: an error reply, a payload
 * discarded).
 */
static uint32_t req_charge(uint16_t type, uint16_t flags, uint32_t length, int err)
{
	if (err)
		return 0;
	if (type == NBD_CMD_READ || type == NBD_CMD_WRITE)
		return length;
	if (type == NBD_CMD_BLOCK_STATUS)
		return 4 + 8 * ((flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : MAX_EXTENTS);
	return 0;
}

/* Read again (arm c->rev); now: run conn_read_cb on this turn of the loop
 * too, for bytes the socket's readiness does not show (in c->in, or held
 * inside OpenSSL). */
void start_reading(struct conn *c, bool now)
{
	event_add(c->rev, NULL);
	c->reading = true;
	if (now)
		event_active(c->rev, EV_READ, 0);
}

void stop_reading(struct conn *c)
{
	if (c->reading) {
		event_del(c->rev);
		c->reading = false;
	}
}

/* Room again (the waiting request's buffer fits, too), and no checkpoint
 * holding requests: resume reading. */
void maybe_resume(struct conn *c)
{
	if (!c->closing && !c->reading && !c->budget_wait &&
	    c->inflight < MAX_INFLIGHT / 2 &&
	    c->inflight_bytes < MAX_INFLIGHT_BYTES / 2 && !over_limits(c)) {
		/* requests may be waiting in the input buffer already */
		start_reading(c, c->in_pos < c->in_len || (c->ssl && SSL_pending(c->ssl) > 0));
	}
}

static void proto_error(struct conn *c, const char *why)
{
	log_warn("%s: protocol error: %s; disconnecting", c->peer, why);
	c->why = why;
	conn_close_now(c, why);
}

/*
 * Parse what the input buffer holds.  Returns false when no more requests
 * should be parsed now (closing, or too much in flight); a payload being
 * discarded is consumed first, whatever is in flight.
 */
static bool parse_input(struct conn *c)
{
	while (!c->closing) {
		size_t avail = c->in_len - c->in_pos;
		if (c->discard_left) {
			size_t n = avail < c->discard_left ? avail : (size_t)c->discard_left;
			c->in_pos += n;
			c->discard_left -= n;
			if (c->discard_left)
				return true;
			struct req *r = c->discard_req;
			c->discard_req = NULL;
			req_dispatch(c, r, NULL);
			continue;
		}
		if (over_limits(c))
			return false;
		if (avail < NBD_REQUEST_SIZE)
			return true;
		const uint8_t *p = c->in + c->in_pos;
		if (get32(p) != NBD_REQUEST_MAGIC) {
			proto_error(c, "bad request magic");
			return false;
		}
		uint16_t flags = get16(p + 4), type = get16(p + 6);
		uint64_t handle = get64(p + 8), offset = get64(p + 16);
		uint32_t length = get32(p + 24);
		if (type == NBD_CMD_WRITE && length > MAX_WRITE_DISCARD) {
			/* reading it could take gigabytes: the spec allows a hard
			 * disconnect for payloads of 2^25 bytes and more.  Up to
			 * MAX_WRITE_DISCARD the payload is read, dropped and the
			 * WRITE answered EINVAL (req_check). */
			proto_error(c, "write payload larger than 128 MiB");
			return false;
		}
		if (type == NBD_CMD_DISC) {
			c->in_pos += NBD_REQUEST_SIZE;
			log_debug("%s: NBD_CMD_DISC", c->peer);
			c->why = "client disconnected (NBD_CMD_DISC)";
			c->closing = true;
			stop_reading(c);
			return false;
		}
		/* the verdict first: a refused request needs no buffer */
		int err = req_check(c, type, flags, offset, length);
		if (!err && c->draining)
			err = NBD_ESHUTDOWN; /* the export is being detached */
		/* its payload must fit beside what is in flight */
		c->want_bytes = req_charge(type, flags, length, err);
		if (over_limits(c))
			return false;
		c->want_bytes = 0;
		/* and its buffer under buffer_limit, all connections together */
		size_t need = buf_need(c, type, length, err);
		if (need && !budget_take(c, need)) {
			conn_trim(c); /* what this connection keeps goes first */
			need = buf_need(c, type, length, err);
			if (need && !budget_take(c, need)) {
				c->budget_wait = true;
				return false;
			}
		}
		budget_dequeue(c);
		struct req *r = req_get(c);
		if (!r) {
			proto_error(c, "out of memory");
			return false;
		}
		r->type = type;
		r->flags = flags;
		r->handle = handle;
		r->offset = offset;
		r->length = length;
		r->error = err;
		r->charge = req_charge(type, flags, length, err);
		c->inflight_bytes += r->charge;
		if (type != NBD_CMD_WRITE) {
			c->in_pos += NBD_REQUEST_SIZE;
			req_dispatch(c, r, NULL);
			continue;
		}
		/* WRITE: the payload follows, whatever the verdict; the error
		 * reply goes out once it is consumed (at once if empty) */
		if (r->error) {
			c->in_pos += NBD_REQUEST_SIZE;
			if (!length) {
				req_dispatch(c, r, NULL);
				continue;
			}
			c->discard_left = length;
			c->discard_req = r;
			continue;
		}
		if (avail - NBD_REQUEST_SIZE >= length) {
			c->in_pos += NBD_REQUEST_SIZE;
			uint8_t *data = c->in + c->in_pos;
			c->in_pos += length;
			req_dispatch(c, r, data);
			continue;
		}
		if (length + NBD_REQUEST_SIZE <= INBUF_SIZE) {
			/* fits the input buffer: wait for the rest there */
			req_put(c, r);
			return true;
		}
		/* large payload: receive it into the request's own buffer */
		if (req_buf(r, length) < 0) {
			proto_error(c, "out of memory");
			req_put(c, r);
			return false;
		}
		c->in_pos += NBD_REQUEST_SIZE;
		size_t have = avail - NBD_REQUEST_SIZE;
		memcpy(r->buf, c->in + c->in_pos, have);
		c->in_pos += have;
		c->cur = r;
		c->cur_got = (uint32_t)have;
		return true;
	}
	return false;
}

/* ---- receiving ---------------------------------------------------------- */

/* The age of the bytes a recvmsg returned, by the kernel's receive
 * timestamp of the newest of them (SCM_TIMESTAMPNS, CLOCK_REALTIME: TCP
 * sends one, unix sockets none); 0 without one, or if the clock was set
 * meanwhile. */
static uint64_t rx_age(struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS)
			continue;
		struct timespec ts, now;
		memcpy(&ts, CMSG_DATA(cm), sizeof ts);
		clock_gettime(CLOCK_REALTIME, &now);
		int64_t age = (int64_t)(now.tv_sec - ts.tv_sec) * 1000000000 + (now.tv_nsec - ts.tv_nsec);
		return age > 0 && age < 60 * 1000000000ll ? (uint64_t)age : 0;
	}
	return 0;
}

/* recv, or SSL_read under TLS: > 0 bytes, 0 at EOF, -1 with errno (EAGAIN:
 * nothing now; EPROTO: a TLS error, c->tls_why says which).  Sets
 * c->rx_age_ns (rx_age; 0 under TLS). */
static ssize_t conn_recv(struct conn *c, void *buf, size_t len)
{
	c->rx_age_ns = 0;
	if (!c->ssl) {
		union {
			char b[CMSG_SPACE(sizeof(struct timespec))];
			struct cmsghdr align;
		} cbuf;
		struct iovec iov = { buf, len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
				     .msg_controllen = sizeof cbuf.b };
		ssize_t n = recvmsg(c->fd, &mh, 0);
		if (n > 0 && mh.msg_controllen)
			c->rx_age_ns = rx_age(&mh);
		return n;
	}
	ERR_clear_error();
	int n = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, n)) {
	case SSL_ERROR_WANT_READ:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_WANT_WRITE:
		c->read_wants_write = true;
		event_add(c->wev, NULL);
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0; /* close_notify, or EOF (SSL_OP_IGNORE_UNEXPECTED_EOF) */
	default:
		tls_last_error(c->ssl, n, c->tls_why, sizeof c->tls_why);
		errno = EPROTO;
		return -1;
	}
}

void conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct dimm *d = c->d;

	/* requests left in the buffer when reading paused come first */
	bool more = true;
	if (!c->cur && c->in_pos < c->in_len)
		more = parse_input(c);
	for (int rounds = 0; more && rounds < 8 && !c->closing; rounds++) {
		ssize_t n;
		if (c->cur) {
			struct req *r = c->cur;
			n = conn_recv(c, r->buf + c->cur_got, r->length - c->cur_got);
			if (n > 0) {
				d->activity++;
				c->last_ns = nand_now_ns();
				c->in_ns = c->last_ns - c->rx_age_ns;
				c->cur_got += (uint32_t)n;
				if (c->cur_got == r->length) {
					c->cur = NULL;
					req_dispatch(c, r, r->buf);
				}
				continue;
			}
		} else {
			if (c->in_pos == c->in_len) {
				c->in_pos = c->in_len = 0;
			} else if (c->in_pos && INBUF_SIZE - c->in_len < 64 << 10) {
				memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
				c->in_len -= c->in_pos;
				c->in_pos = 0;
			}
			if (!c->in && !(c->in = malloc(INBUF_SIZE))) {
				/* given back while idle (conn_tick) */
				conn_close_now(c, "out of memory for the input buffer");
				break;
			}
			n = conn_recv(c, c->in + c->in_len, INBUF_SIZE - c->in_len);
			if (n > 0) {
				d->activity++;
				c->last_ns = nand_now_ns();
				c->in_ns = c->last_ns - c->rx_age_ns;
				c->in_len += (size_t)n;
				if (!parse_input(c))
					break;
				continue;
			}
		}
		if (n == 0) {
			conn_close_now(c, c->inflight ? "client disconnected with requests in flight"
						      : "client disconnected");
		} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			conn_close_now(c, errno == EPROTO && c->ssl ? c->tls_why : strerror(errno));
		}
		break;
	}
	/* keep parse position stable for writes that still point into c->in:
	 * none do (waiting writes were given copies in req_dispatch).
	 * Pause only between requests: a payload being received or discarded
	 * is read on, or its sender (blocked on it) could never read the
	 * replies that would let us resume. */
	if (!c->closing && !c->cur && !c->discard_left &&
	    (over_limits(c) || c->budget_wait))
		stop_reading(c);
	/* TLS: plaintext left inside OpenSSL does not make the socket readable */
	if (c->ssl && c->reading && !c->closing && SSL_pending(c->ssl) > 0)
		event_active(c->rev, EV_READ, 0);
	dimm_kick(d);
}
