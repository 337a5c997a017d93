/*
 * server/conn.c - NBD transmission phase, on the ioDimm's thread.
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
 * Memory: request structs and buffers up to BUF_KEEP bytes are recycled
 * (no allocation per request in steady state); at most MAX_INFLIGHT
 * requests and MAX_INFLIGHT_BYTES of payload (struct req charge: a READ's
 * or WRITE's length, a block status reply; FLUSH, TRIM and the like
 * nothing) per connection, beyond which no new request header is parsed
 * until replies drain (below half of either).  A request whose payload
 * does not fit under MAX_INFLIGHT_BYTES beside what is in flight is parsed
 * only once it does, or when nothing else is in flight (c->want_bytes).
 * So a client that sends requests and never reads the replies is paused
 * (its socket is not read) once its replies hold that much, and resumed
 * when they drain; its buffers then hold at most about twice that
 * (buffers are powers of two) plus a BUF_KEEP buffer per small request,
 * all of it under buffer_limit below.  On top of that it keeps at most
 * BIG_CACHE_BYTES of big buffers and its recycled BUF_KEEP buffers for
 * reuse, and the input buffer; a connection idle for IDLE_TRIM_S gives all
 * of those back (the tick, conn_tick).  The limits gate new requests only:
 * a WRITE payload already announced keeps being received (its buffer
 * exists) or discarded, so a client that reads its replies never
 * deadlocks, whatever the mix of requests up to its limit.
 * Memory in total (srv->buf_bytes, [server] buffer_limit): every request
 * buffer that exists (in flight or kept for reuse) is counted, on all
 * ioDimm threads together.  A request is first checked (req_check: a
 * refused one takes no buffer and never waits); then the buffer it may
 * need (buf_need: a READ's data, a WRITE's payload - also a small one,
 * for the copy it gets if the FTL makes it wait - block status
 * descriptors), if not at hand among the kept ones, must fit under
 * buffer_limit (budget_take).  A connection with nothing in flight may
 * always take a BUF_KEEP buffer, so every client can make progress with
 * requests up to BUF_KEEP at queue depth 1.  Any other request that does
 * not fit waits (c->budget_wait: its connection is not read) in a queue
 * of all waiting connections, first come first served: while it is not
 * empty only its head may allocate, once its buffer fits.  While any
 * connection waits (pressure) nothing is kept for reuse: every ioDimm
 * trims what its connections keep, busy or not (budget_cb), and buffers
 * are freed as their requests finish; each buffer freed wakes the head's
 * ioDimm (d->budget_ev, coalesced by srv->budget_kick), no polling.  The
 * tick retries waiters too (and notices clients that went away while not
 * read).  So the buffers of all connections stay under about buffer_limit
 * + connections * BUF_KEEP (check and add are not one atomic step: threads
 * racing may each overshoot by one buffer).
 * Idle timeout ([server] idle_timeout, 0: off; idle_timeout_busy, the same
 * only while over 3/4 of max_connections are open, default 600 s, and only
 * for connections of an address that holds more than half as many as the
 * address holding the most, server_conns_of: an idle client, a mounted
 * disk say, is not cut off while its slot is not wanted, nor because
 * another host holds the slots and keeps its own busy): a connection that has
 * received no byte, sent no byte and had no reply finish for that long,
 * with nothing inside the FTL, no checkpoint holding it and not waiting
 * for buffer_limit (the server's own limit), is closed (its
 * unsent replies dropped, with a reset); checked by the tick.
 * Every request whose header was parsed is answered (or dropped with its
 * connection); a connection is freed once it is closing and nothing of it
 * is in flight, queued or on d->dirty (conn_maybe_free), and that is the
 * only place that gives back its slot (d->nconns, server nconns).
 * Management (server/dimm.c): a checkpoint on request runs beside the
 * requests (the FTL's own, fuzzy).  A detach drains (conn_drain_all,
 * conn_drain_step).  Each answered request is
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
 * TLS (c->ssl, negotiated by the handshake): reads go through SSL_read
 * (conn_recv); replies are copied from the send queue into c->tout (up to
 * TOUT_SIZE, allocated on first use) and written with SSL_write, retried
 * with the same bytes after SSL_ERROR_WANT_WRITE.  A request is retired
 * once its reply is in c->tout; a closing connection waits for c->tout to
 * be written (conn_maybe_free).  Plaintext OpenSSL holds beyond what was
 * read (SSL_pending) does not wake the socket's read event, so read_cb
 * activates itself while some is left.  Renegotiation is off (tls.c); a
 * TLS 1.3 key update that makes SSL_read want to write is finished by
 * write_cb.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "server/flashd.h"
#include "server/nbd_proto.h"

#define INBUF_SIZE (256u << 10)
#define MAX_INFLIGHT 512
#define MAX_INFLIGHT_BYTES (16u << 20)
#define BUF_KEEP (128u << 10)
#define MAX_CHUNKS 8
#define MAX_IOV 1024
#define META_ALLOCATION_ID 1
#define MAX_EXTENTS 2048
#define BIG_CACHE 16                  /* big buffers kept per connection */
#define BIG_CACHE_BYTES (64u << 20)   /* keeps one MAX_PAYLOAD_ANY buffer */
#define TOUT_SIZE (256u << 10)        /* TLS: replies staged for SSL_write */
#define TICK_MS 1000                  /* idle timeout and buffer trimming */
#define IDLE_TRIM_S 2                 /* idle this long: buffers given back */
#define TX_MIN_BYTES (256u << 10)     /* a reply batch this large starts the send thread */
#define TX_POLL_MS 100                /* send thread: recheck for a drop this often */
#define BUDGET_LOG_S 10               /* "waits for buffer_limit": logged once per */
_Static_assert(MAX_PAYLOAD_ANY <= BIG_CACHE_BYTES, "the largest buffer can be kept");
_Static_assert(MAX_PAYLOAD <= MAX_PAYLOAD_ANY && MAX_PAYLOAD_ANY <= MAX_WRITE_DISCARD, "limits");

struct chunk {
	uint64_t off;      /* absolute export offset */
	uint32_t len;
	bool data;         /* OFFSET_DATA, else OFFSET_HOLE */
};

struct req {
	struct ftl_io io;
	struct conn *c;
	uint64_t handle;
	uint64_t offset;
	uint32_t length;
	uint16_t type, flags;
	int error;                 /* NBD error to send, 0 for success */
	uint8_t *buf;              /* data, block status payload */
	size_t buf_cap;
	bool buf_big;              /* not recycled with the request */
	uint32_t charge;           /* its bytes in c->inflight_bytes (payload) */
	bool io_pending;           /* submitted to the FTL, not completed */
	bool no_reply;             /* NBD_CMD_DISC */
	struct chunk chunks[MAX_CHUNKS];
	int nchunks;
	uint32_t payload_len;      /* block status payload bytes in buf */
	uint8_t hdr[MAX_CHUNKS * 32];
	struct iovec iov[2 * MAX_CHUNKS + 1];
	int niov;
	size_t reply_bytes;
	uint64_t t_in;             /* arrived: header (a WRITE: payload) in the socket */
	uint64_t t0;               /* dispatched (nand_now_ns), for the service latency */
	uint64_t t_out;            /* the send thread handed its reply to the kernel */
	struct req *next;
};

/*
 * The send thread of a plaintext connection (c->tx), started by the first
 * reply batch of TX_MIN_BYTES or more.  The copy into the socket and the
 * receiver's wake-up (half of the ioDimm thread's time at 1 MiB reads)
 * then run beside the FTL instead of on its thread.  Requests handed over
 * (in) belong to the send thread until it hands them back (out), sent or
 * dropped; the ioDimm thread retires them there (req_put: buffers and
 * counts stay on the ioDimm thread), woken by done_ev.  While the thread
 * has anything (busy), every reply of the connection goes through it, so
 * replies keep their order; when it is idle, small batches are sent
 * inline as before.  Lock order: tx.lock, then the event base's (event_active).
 */
struct tx {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct event *done_ev;     /* on the ioDimm's base: out or err to collect */
	/* under lock: */
	struct req *in, *in_tail;  /* handed over, not yet taken by the thread */
	size_t in_skip;            /* bytes of in's head sent inline before */
	struct req *out, *out_tail;/* sent or dropped, to retire */
	bool sending;              /* a batch taken from in is being sent */
	bool sleeping;             /* in cond_wait: signal cv */
	bool pending;              /* in is not empty (also read without the lock) */
	bool stop;                 /* exit (nothing is busy; also read without the lock) */
	int err;                   /* errno of a failed send, once */
	uint64_t sent_ns;          /* last byte sent (atomic: the idle check) */
	bool drop;                 /* the connection is dead: send nothing more
	                            * (also read without the lock) */
};

struct conn {
	struct dimm *d;
	int fd;
	char peer[96 + 72];        /* for the log: "dimm0: 127.0.0.1:5000" */
	char who[256];             /* peer and identities (handoff.who) */
	bool structured, meta_allocation;
	bool strict;               /* bound by NBD_INFO_BLOCK_SIZE (its GO asked) */
	bool readonly;             /* read-only for this client (allow_ro) */
	struct conn_slot slot;
	uint64_t last_ns;          /* last byte received or sent, or reply finished */
	uint64_t in_ns;            /* the newest bytes received arrived (req.t_in) */
	uint64_t rx_age_ns;        /* conn_recv: their age by the kernel's timestamp */
	uint32_t in_ftl;           /* requests of this connection inside the FTL */
	bool budget_wait;          /* a request waits for buffer_limit (not read) */
	bool budget_queued;        /* in the server's budget queue (server.budget_lock) */
	size_t budget_need;        /* what the request waiting at in_pos needs */
	TAILQ_ENTRY(conn) budget_link;  /* in server.budget_q (server.budget_lock) */
	uint32_t max_payload;      /* READ/WRITE limit: MAX_PAYLOAD or MAX_PAYLOAD_ANY */
	uint16_t tflags;
	struct event *rev, *wev;
	bool reading;              /* rev armed */

	uint8_t *in;
	size_t in_len, in_pos;

	/* a WRITE whose payload is still arriving, or one being discarded */
	struct req *cur;
	uint32_t cur_got;
	uint64_t discard_left;
	struct req *discard_req;   /* its error reply goes out after the discard */

	struct req *free_reqs;
	struct { uint8_t *p; size_t cap; } big[BIG_CACHE];
	int nbig;
	size_t big_bytes;
	uint32_t inflight;         /* requests parsed and not yet fully answered */
	uint64_t inflight_bytes;   /* payload bytes of those (struct req charge) */
	size_t want_bytes;         /* charge of the request waiting at in_pos, 0: none */

	struct req *sendq, *sendq_tail;
	size_t head_sent;          /* bytes of sendq's head already sent */
	struct tx *tx;             /* send thread, NULL: none started */

	bool dirty;                /* on d->dirty */
	bool closing;              /* DISC, shutdown or a protocol error: no more reads */
	bool draining;             /* detach: new requests get ESHUTDOWN; closes once idle */
	bool dead;                 /* socket unusable: drop replies */
	bool reset;                /* close with a TCP reset (replies were dropped) */
	const char *why;
	uint64_t nrequests;
	/* TLS */
	SSL *ssl;
	uint8_t *tout;             /* reply bytes taken from sendq, not yet written */
	size_t tout_len, tout_pos;
	bool read_wants_write;     /* SSL_read returned WANT_WRITE */
	char tls_why[256];
	LIST_ENTRY(conn) link;     /* in dimm.conns */
	struct conn *dirty_next;
};

static void conn_maybe_free(struct conn *c);
static void drop_partial(struct conn *c);
static void conn_flush(struct conn *c);
static void maybe_resume(struct conn *c);
static void read_cb(evutil_socket_t fd, short what, void *arg);
static void conn_tick_arm(struct dimm *d);
static void conn_trim(struct conn *c);
static void conn_close_now(struct conn *c, const char *why);
static void tx_drop(struct conn *c);
static bool tx_busy(struct conn *c);
static void budget_freed(struct server *srv);
static void budget_dequeue(struct conn *c);

/* ---- requests ----------------------------------------------------------- */

/* Request buffers that exist, all connections (see "Memory in total"). */
static void buf_account(struct conn *c, int64_t delta)
{
	if (delta)
		__atomic_add_fetch(&c->d->srv->buf_bytes, (uint64_t)delta, __ATOMIC_RELAXED);
}

static void buf_free(struct conn *c, void *p, size_t cap)
{
	free(p);
	if (p) {
		buf_account(c, -(int64_t)cap);
		budget_freed(c->d->srv);
	}
}

/* Some connection waits for buffer_limit: nothing is kept for reuse. */
static bool budget_pressure(struct server *srv)
{
	return __atomic_load_n(&srv->budget_waiters, __ATOMIC_RELAXED) > 0;
}

static struct req *req_get(struct conn *c)
{
	struct req *r = c->free_reqs;
	if (r) {
		c->free_reqs = r->next;
	} else {
		r = calloc(1, sizeof *r);
		if (!r)
			return NULL;
		r->c = c;
	}
	r->next = NULL;
	r->charge = 0;
	r->error = 0;
	r->t_out = 0;
	r->io_pending = false;
	r->no_reply = false;
	r->nchunks = 0;
	r->payload_len = 0;
	c->inflight++;
	return r;
}

/* The capacity big_get gives for need bytes: a power of two >= BUF_KEEP. */
static size_t big_cap(size_t need)
{
	size_t n = BUF_KEEP;
	while (n < need)
		n <<= 1;
	return n;
}

/* Big buffers are kept per connection for reuse (first touch of fresh
 * memory costs a page fault per 4 KiB): take the smallest that fits. */
static uint8_t *big_get(struct conn *c, size_t need, size_t *cap)
{
	int best = -1;
	for (int i = 0; i < c->nbig; i++)
		if (c->big[i].cap >= need && (best < 0 || c->big[i].cap < c->big[best].cap))
			best = i;
	if (best >= 0) {
		uint8_t *p = c->big[best].p;
		*cap = c->big[best].cap;
		c->big_bytes -= *cap;
		c->big[best] = c->big[--c->nbig];
		return p;
	}
	size_t n = big_cap(need);
	*cap = n;
	uint8_t *p = aligned_alloc(4096, n);
	if (p)
		buf_account(c, (int64_t)n);
	return p;
}

static void big_put(struct conn *c, uint8_t *p, size_t cap)
{
	if (c->nbig < BIG_CACHE && c->big_bytes + cap <= BIG_CACHE_BYTES &&
	    !budget_pressure(c->d->srv)) {
		c->big[c->nbig].p = p;
		c->big[c->nbig].cap = cap;
		c->nbig++;
		c->big_bytes += cap;
	} else {
		buf_free(c, p, cap);
	}
}

/* Give back every buffer kept for reuse (idle, or short of buffer_limit). */
static void conn_trim(struct conn *c)
{
	for (int i = 0; i < c->nbig; i++)
		buf_free(c, c->big[i].p, c->big[i].cap);
	c->nbig = 0;
	c->big_bytes = 0;
	for (struct req *r = c->free_reqs; r; r = r->next) {
		buf_free(c, r->buf, r->buf_cap);
		r->buf = NULL;
		r->buf_cap = 0;
		r->buf_big = false;
	}
}

static int req_buf(struct req *r, size_t need)
{
	if (r->buf_cap >= need)
		return 0;
	struct conn *c = r->c;
	if (r->buf_big || need > BUF_KEEP) {
		if (r->buf_big)
			big_put(c, r->buf, r->buf_cap);
		else
			buf_free(c, r->buf, r->buf_cap);
		size_t cap;
		r->buf = big_get(c, need, &cap);
		r->buf_cap = r->buf ? cap : 0;
		r->buf_big = true;
	} else {
		buf_free(c, r->buf, r->buf_cap);
		r->buf = aligned_alloc(4096, BUF_KEEP);
		r->buf_cap = r->buf ? BUF_KEEP : 0;
		r->buf_big = false;
		buf_account(c, (int64_t)r->buf_cap);
	}
	if (!r->buf)
		return -ENOMEM;
	return 0;
}

static void req_put(struct conn *c, struct req *r)
{
	c->inflight_bytes -= r->charge;
	r->charge = 0;
	if (r->buf_big) {
		big_put(c, r->buf, r->buf_cap);
		r->buf = NULL;
		r->buf_cap = 0;
		r->buf_big = false;
	} else if (r->buf && budget_pressure(c->d->srv)) {
		buf_free(c, r->buf, r->buf_cap);
		r->buf = NULL;
		r->buf_cap = 0;
	}
	c->inflight--;
	r->next = c->free_reqs;
	c->free_reqs = r;
	/* waiting for buffer_limit with nothing in flight now: a request of
	 * up to BUF_KEEP may go (budget_take) */
	if (c->budget_wait && !c->inflight && c->d->budget_ev)
		event_active(c->d->budget_ev, EV_READ, 0);
}

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

/* ---- replies ------------------------------------------------------------ */

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

static void conn_mark_dirty(struct conn *c)
{
	if (c->dirty)
		return;
	c->dirty = true;
	c->dirty_next = c->d->dirty;
	c->d->dirty = c;
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
static void io_account_sent(struct dimm *d, const struct req *r, uint64_t now)
{
	int l = req_lat_class(r);
	uint64_t ns = now > r->t_in ? now - r->t_in : 0;
	d->io.lat[l][lat_bucket(ns)]++;
	d->io.lat_sum_ns[l] += ns;
}

/* r is answered: queue its reply (or drop it on a dead socket). */
static void req_finish(struct req *r)
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
	r->next = NULL;
	if (c->sendq_tail)
		c->sendq_tail->next = r;
	else
		c->sendq = r;
	c->sendq_tail = r;
	conn_mark_dirty(c);
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
 * Too much in flight to parse another request header, or the header
 * waiting at in_pos would charge c->want_bytes (its payload) that do not
 * fit under MAX_INFLIGHT_BYTES beside what is in flight (alone it always
 * may: want_bytes <= MAX_PAYLOAD_ANY).
 */
static bool over_limits(const struct conn *c)
{
	if (c->inflight >= MAX_INFLIGHT || c->inflight_bytes >= MAX_INFLIGHT_BYTES)
		return true;
	return c->want_bytes && c->inflight && c->inflight_bytes + c->want_bytes > MAX_INFLIGHT_BYTES;
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

static void stop_reading(struct conn *c)
{
	if (c->reading) {
		event_del(c->rev);
		c->reading = false;
	}
}

static void proto_error(struct conn *c, const char *why)
{
	log_warn("%s: protocol error: %s; disconnecting", c->peer, why);
	c->why = why;
	c->closing = true;
	c->dead = true;
	tx_drop(c);
	c->budget_wait = false;
	budget_dequeue(c);
	stop_reading(c);
	drop_partial(c);
}

/*
 * The bytes of request buffer a request parsed now may have to allocate
 * (not counting buffers it finds kept for reuse): what the buffer_limit
 * check asks for.  A READ's data; a WRITE's payload, received into its
 * own buffer when large, else the copy it is given if the FTL makes it
 * wait (req_dispatch); block status descriptors.  Refused requests
 * (answered with an error, a WRITE's payload discarded) take none; an
 * all-hole structured READ or a small WRITE that does not wait takes none
 * either, but that is known only later.
 */
static size_t buf_need(const struct conn *c, uint16_t type, uint32_t length, int err)
{
	size_t want = 0;
	if (err)
		return 0;
	if (type == NBD_CMD_READ || type == NBD_CMD_WRITE)
		want = length;
	else if (type == NBD_CMD_BLOCK_STATUS)
		want = 4 + 8 * (size_t)MAX_EXTENTS;
	if (!want)
		return 0;
	if (want <= BUF_KEEP)
		return c->free_reqs && c->free_reqs->buf_cap >= want ? 0 : BUF_KEEP;
	for (int i = 0; i < c->nbig; i++)
		if (c->big[i].cap >= want)
			return 0;
	return big_cap(want);
}

/* ---- buffer_limit: the queue of waiting connections --------------------- */

/* budget_lock held: wake the ioDimm of the queue's head (it may fit now). */
static void budget_kick_head(struct server *srv)
{
	struct conn *h = TAILQ_FIRST(&srv->budget_q);
	if (h && h->d->budget_ev)
		event_active(h->d->budget_ev, EV_READ, 0);
	else
		__atomic_store_n(&srv->budget_kick, 0, __ATOMIC_RELAXED);
}

/* Buffers were given back (buf_free): if connections wait, wake the head,
 * once until its ioDimm has looked (budget_cb clears budget_kick). */
static void budget_freed(struct server *srv)
{
	if (!budget_pressure(srv))
		return;
	if (__atomic_exchange_n(&srv->budget_kick, 1, __ATOMIC_ACQ_REL))
		return;
	pthread_mutex_lock(&srv->budget_lock);
	budget_kick_head(srv);
	pthread_mutex_unlock(&srv->budget_lock);
}

/* Leave the queue (granted, refused, closing); the next one may fit. */
static void budget_dequeue(struct conn *c)
{
	if (!c->budget_queued)
		return;
	struct server *srv = c->d->srv;
	pthread_mutex_lock(&srv->budget_lock);
	TAILQ_REMOVE(&srv->budget_q, c, budget_link);
	c->budget_queued = false;
	__atomic_sub_fetch(&srv->budget_waiters, 1, __ATOMIC_RELAXED);
	budget_kick_head(srv);
	pthread_mutex_unlock(&srv->budget_lock);
}

/* budget_lock held: c starts waiting.  The first waiter starts the
 * pressure: every ioDimm gives back what its connections keep. */
static void budget_enqueue(struct conn *c, size_t need)
{
	struct server *srv = c->d->srv;
	c->budget_need = need;
	c->budget_queued = true;
	TAILQ_INSERT_TAIL(&srv->budget_q, c, budget_link);
	if (__atomic_fetch_add(&srv->budget_waiters, 1, __ATOMIC_RELAXED) == 0) {
		__atomic_store_n(&srv->budget_kick, 0, __ATOMIC_RELAXED);
		for (int i = 0; i < srv->ndimms; i++)
			if (srv->dimms[i].budget_ev)
				event_active(srv->dimms[i].budget_ev, EV_READ, 0);
	}
	/* rate-limited: a busy server under pressure must not fill the log */
	uint64_t now = nand_now_ns();
	if (srv->budget_log_ns && now - srv->budget_log_ns < (uint64_t)BUDGET_LOG_S * 1000000000u) {
		srv->budget_log_held++;
		return;
	}
	uint64_t used = __atomic_load_n(&srv->buf_bytes, __ATOMIC_RELAXED);
	uint64_t limit = __atomic_load_n(&srv->cfg.buffer_limit, __ATOMIC_RELAXED);
	char more[96] = "";
	if (srv->budget_log_held)
		snprintf(more, sizeof more, " (and %lu more wait(s) in the last %d s, not logged)",
			 srv->budget_log_held, BUDGET_LOG_S);
	log_info("%s: a request waits for buffer_limit: %llu KiB in use of %llu KiB, %zu KiB needed, "
		 "%d connection(s) waiting%s", c->peer, (unsigned long long)(used >> 10),
		 (unsigned long long)(limit >> 10), need >> 10,
		 __atomic_load_n(&srv->budget_waiters, __ATOMIC_RELAXED), more);
	srv->budget_log_ns = now;
	srv->budget_log_held = 0;
}

/*
 * May a request allocate need more bytes of buffer (buffer_limit)?  A
 * connection with nothing in flight always may take a BUF_KEEP one.  Any
 * other takes its turn: while connections wait, only the first of the
 * queue may allocate, once its buffer fits; one that does not fit joins
 * the queue (and stays in it until budget_dequeue).
 */
static bool budget_take(struct conn *c, size_t need)
{
	struct server *srv = c->d->srv;
	if (!need || (need <= BUF_KEEP && !c->inflight))
		return true;
	uint64_t limit = __atomic_load_n(&srv->cfg.buffer_limit, __ATOMIC_RELAXED);
	if (!c->budget_queued && !budget_pressure(srv) &&
	    __atomic_load_n(&srv->buf_bytes, __ATOMIC_RELAXED) + need <= limit)
		return true;
	pthread_mutex_lock(&srv->budget_lock);
	bool first = c->budget_queued ? TAILQ_FIRST(&srv->budget_q) == c : TAILQ_EMPTY(&srv->budget_q);
	bool ok = first && __atomic_load_n(&srv->buf_bytes, __ATOMIC_RELAXED) + need <= limit;
	if (!ok && !c->budget_queued)
		budget_enqueue(c, need);
	else if (!ok)
		c->budget_need = need;
	pthread_mutex_unlock(&srv->budget_lock);
	return ok;
}

/* A waiting connection might go on now (budget_take would say yes): read
 * it again, parse_input asks budget_take for real. */
static void budget_retry(struct conn *c)
{
	struct server *srv = c->d->srv;
	bool go = c->budget_need <= BUF_KEEP && !c->inflight;
	if (!go) {
		uint64_t limit = __atomic_load_n(&srv->cfg.buffer_limit, __ATOMIC_RELAXED);
		pthread_mutex_lock(&srv->budget_lock);
		go = (!c->budget_queued || TAILQ_FIRST(&srv->budget_q) == c) &&
		     __atomic_load_n(&srv->buf_bytes, __ATOMIC_RELAXED) + c->budget_need <= limit;
		pthread_mutex_unlock(&srv->budget_lock);
	}
	if (go) {
		c->budget_wait = false;
		/* not maybe_resume: its hysteresis (below half of the
		 * in-flight limits) is for clients that stopped reading; this
		 * one passed over_limits already, and as the queue's head it
		 * must go on or it holds up every connection behind it */
		if (!c->closing && !c->reading && !over_limits(c)) {
			event_add(c->rev, NULL);
			c->reading = true;
			event_active(c->rev, EV_READ, 0);
		}
	}
}

/* d->budget_ev: pressure started, buffers were given back, or a waiting
 * connection's requests finished.  Under pressure every connection gives
 * back what it keeps (busy or not); then the waiting ones are retried. */
static void budget_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dimm *d = arg;
	struct server *srv = d->srv;
	__atomic_store_n(&srv->budget_kick, 0, __ATOMIC_RELAXED);
	struct conn *c;
	if (budget_pressure(srv))
		LIST_FOREACH(c, &d->conns, link)
			conn_trim(c);
	LIST_FOREACH(c, &d->conns, link)
		if (c->budget_wait && !c->closing)
			budget_retry(c);
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

/* Requests still being received can never complete: drop them. */
static void drop_partial(struct conn *c)
{
	if (c->cur) {
		req_put(c, c->cur);
		c->cur = NULL;
	}
	if (c->discard_req) {
		req_put(c, c->discard_req);
		c->discard_req = NULL;
	}
	c->discard_left = 0;
}

static void conn_close_now(struct conn *c, const char *why)
{
	if (!c->why)
		c->why = why;
	c->closing = true;
	c->dead = true;
	tx_drop(c);
	c->budget_wait = false;
	budget_dequeue(c);
	stop_reading(c);
	drop_partial(c);
}

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

static void read_cb(evutil_socket_t fd, short what, void *arg)
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

/* ---- sending ------------------------------------------------------------ */

static void write_cb(evutil_socket_t fd, short what, void *arg)
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
static int replies_iov(const struct req *q, size_t skip, struct iovec *iov)
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

/* ---- send thread (struct tx) ---------------------------------------------- */

static void tx_done_cb(evutil_socket_t fd, short what, void *arg);

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* The send thread: takes what was handed over, sends it, hands each reply
 * back once sent (or dropped), and wakes the ioDimm thread. */
static void *tx_main(void *arg)
{
	struct conn *c = arg; /* only c->fd and c->tx are used: fixed while it runs */
	struct tx *t = c->tx;
	int fd = c->fd;
	struct iovec iov[MAX_IOV];
	pthread_mutex_lock(&t->lock);
	for (;;) {
		/* read each time: a reload changes it live */
		const uint64_t spin_ns =
			(uint64_t)__atomic_load_n(&c->d->srv->cfg.poll_us, __ATOMIC_RELAXED) * 1000u;
		if (!t->in && !t->stop && spin_ns) {
			/* like the ioDimm thread (dimm_loop): the next batch
			 * usually follows within poll_us; a sleeping thread's
			 * wake-up costs more than the spin */
			pthread_mutex_unlock(&t->lock);
			uint64_t until = nand_now_ns() + spin_ns;
			while (!__atomic_load_n(&t->pending, __ATOMIC_ACQUIRE) &&
			       !__atomic_load_n(&t->stop, __ATOMIC_RELAXED) && nand_now_ns() < until)
				cpu_relax();
			pthread_mutex_lock(&t->lock);
		}
		while (!t->in && !t->stop) {
			t->sleeping = true;
			pthread_cond_wait(&t->cv, &t->lock);
			t->sleeping = false;
		}
		if (!t->in)
			break;
		__atomic_store_n(&t->pending, false, __ATOMIC_RELAXED);
		struct req *q = t->in, *q_tail = t->in_tail;
		size_t skip = t->in_skip;
		t->in = t->in_tail = NULL;
		t->in_skip = 0;
		t->sending = true;
		pthread_mutex_unlock(&t->lock);
		int err = 0;
		while (q && !err && !__atomic_load_n(&t->drop, __ATOMIC_RELAXED)) {
			int n = replies_iov(q, skip, iov);
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
			ssize_t sent = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (sent < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK) {
					struct pollfd pf = { .fd = fd, .events = POLLOUT };
					poll(&pf, 1, TX_POLL_MS);
				} else if (errno != EINTR) {
					err = errno;
				}
				continue;
			}
			uint64_t now = nand_now_ns();
			if (sent > 0)
				__atomic_store_n(&t->sent_ns, now, __ATOMIC_RELAXED);
			/* hand back the replies sent whole */
			size_t left = skip + (size_t)sent;
			struct req *done = q, *done_tail = NULL;
			while (q && left >= q->reply_bytes) {
				left -= q->reply_bytes;
				q->t_out = now;
				done_tail = q;
				q = q->next;
			}
			skip = left;
			if (done_tail) {
				done_tail->next = NULL;
				pthread_mutex_lock(&t->lock);
				if (t->out_tail)
					t->out_tail->next = done;
				else
					t->out = done;
				t->out_tail = done_tail;
				event_active(t->done_ev, EV_READ, 0);
				pthread_mutex_unlock(&t->lock);
			}
		}
		pthread_mutex_lock(&t->lock);
		if (q) {
			/* dropped (the connection died) or the socket failed */
			if (t->out_tail)
				t->out_tail->next = q;
			else
				t->out = q;
			t->out_tail = q_tail;
		}
		if (err && !t->err)
			t->err = err;
		t->sending = false;
		event_active(t->done_ev, EV_READ, 0);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static struct tx *tx_start(struct conn *c)
{
	struct tx *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->done_ev = event_new(c->d->base, -1, EV_READ, tx_done_cb, c);
	if (!t->done_ev) {
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cv, NULL);
	c->tx = t;
	if (pthread_create(&t->th, NULL, tx_main, c) != 0) {
		event_free(t->done_ev);
		pthread_mutex_destroy(&t->lock);
		pthread_cond_destroy(&t->cv);
		free(t);
		c->tx = NULL;
		return NULL;
	}
	pthread_setname_np(t->th, "flashd-tx");
	return t;
}

/* Connection freed: nothing is busy any more (its requests are all
 * retired): the thread exits. */
static void tx_stop(struct conn *c)
{
	struct tx *t = c->tx;
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->stop, true, __ATOMIC_RELAXED); /* also ends a spin */
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->th, NULL);
	event_free(t->done_ev);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cv);
	free(t);
	c->tx = NULL;
}

/* The connection died: the thread sends nothing more. */
static void tx_drop(struct conn *c)
{
	if (!c->tx)
		return;
	pthread_mutex_lock(&c->tx->lock);
	__atomic_store_n(&c->tx->drop, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&c->tx->lock);
}

/* Hand the send queue to the send thread if it is busy (order) or the
 * batch is large (starting the thread on first use); false: send inline. */
static bool tx_take(struct conn *c)
{
	if (c->ssl || c->dead || !c->sendq)
		return false;
	/* one connection: its sends pipeline with the client's receives
	 * already, and a hand-over's wake-ups cost more than they save (1 MiB
	 * reads: -13 % on the 2-core bench); several: this thread would send
	 * for all of them in turn */
	int open = 0;
	struct conn *o;
	LIST_FOREACH(o, &c->d->conns, link) {
		if (!o->closing && ++open == 2)
			break;
	}
	if (open < 2 && !c->tx)
		return false; /* the common case: no walk of the queue */
	size_t bytes = 0;
	for (struct req *r = c->sendq; r && bytes < TX_MIN_BYTES + c->head_sent; r = r->next)
		bytes += r->reply_bytes;
	bytes -= bytes > c->head_sent ? c->head_sent : bytes; /* still to send */
	bool big = bytes >= TX_MIN_BYTES && open >= 2;
	struct tx *t = c->tx;
	if (!t) {
		if (!big || !(t = tx_start(c)))
			return false;
	}
	pthread_mutex_lock(&t->lock);
	bool busy = t->in || t->out || t->sending;
	if (!busy && !big) {
		pthread_mutex_unlock(&t->lock);
		return false;
	}
	if (t->in) {
		t->in_tail->next = c->sendq;
	} else {
		t->in = c->sendq;
		t->in_skip = c->head_sent; /* 0 unless the thread is idle */
	}
	t->in_tail = c->sendq_tail;
	__atomic_store_n(&t->pending, true, __ATOMIC_RELEASE);
	if (t->sleeping)
		pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->lock);
	c->sendq = c->sendq_tail = NULL;
	c->head_sent = 0;
	event_del(c->wev); /* an inline send's wait for room, if any */
	return true;
}

/* The send thread handed replies back: retire them (ioDimm thread). */
static void tx_done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct tx *t = c->tx;
	pthread_mutex_lock(&t->lock);
	struct req *q = t->out;
	t->out = t->out_tail = NULL;
	int err = t->err;
	t->err = 0;
	pthread_mutex_unlock(&t->lock);
	if (q && !c->dead)
		c->last_ns = nand_now_ns();
	c->d->activity++; /* keeps the ioDimm thread polling (dimm_loop) */
	while (q) {
		struct req *r = q;
		q = r->next;
		if (r->t_out) /* sent, not dropped */
			io_account_sent(c->d, r, r->t_out);
		req_put(c, r);
	}
	if (err && !c->dead)
		conn_close_now(c, strerror(err));
	conn_mark_dirty(c); /* send what queued meanwhile; resume reading; free */
	dimm_kick(c->d);
}

static bool tx_busy(struct conn *c)
{
	struct tx *t = c->tx;
	if (!t)
		return false;
	pthread_mutex_lock(&t->lock);
	bool busy = t->in || t->out || t->sending;
	pthread_mutex_unlock(&t->lock);
	return busy;
}

static void conn_flush(struct conn *c)
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

/* Room again (the waiting request's buffer fits, too), and no checkpoint
 * holding requests: resume reading. */
static void maybe_resume(struct conn *c)
{
	if (!c->closing && !c->reading && !c->budget_wait &&
	    c->inflight < MAX_INFLIGHT / 2 &&
	    c->inflight_bytes < MAX_INFLIGHT_BYTES / 2 && !over_limits(c)) {
		event_add(c->rev, NULL);
		c->reading = true;
		/* requests may be waiting in the input buffer already */
		if (c->in_pos < c->in_len || (c->ssl && SSL_pending(c->ssl) > 0))
			event_active(c->rev, EV_READ, 0);
	}
}

void conn_flush_dirty(struct dimm *d)
{
	while (d->dirty) {
		struct conn *c = d->dirty;
		d->dirty = c->dirty_next;
		c->dirty = false;
		conn_flush(c);
		conn_maybe_free(c);
	}
	/* closing connections with nothing left: free them */
	struct conn *c, *next;
	LIST_FOREACH_SAFE(c, &d->conns, link, next) {
		conn_maybe_free(c);
	}
}

/* ---- life cycle --------------------------------------------------------- */

static void conn_maybe_free(struct conn *c)
{
	if (!c->closing || c->inflight || c->sendq || c->dirty || tx_busy(c))
		return;
	if (c->ssl && !c->dead && c->tout_pos < c->tout_len)
		return; /* TLS output still being written (write_cb) */
	struct dimm *d = c->d;
	tx_stop(c);
	budget_dequeue(c);
	LIST_REMOVE(c, link);
	event_free(c->rev);
	event_free(c->wev);
	if (c->reset) {
		/* RST, not FIN: a FIN queued behind replies the client does not
		 * read never reaches it, and the kernel would keep the socket */
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	}
	/* close_notify unless the session broke (or replies were dropped) */
	tls_close(c->ssl, !c->reset && !(c->dead && c->tls_why[0]));
	free(c->tout);
	close(c->fd);
	conn_trim(c);
	while (c->free_reqs) {
		struct req *r = c->free_reqs;
		c->free_reqs = r->next;
		free(r);
	}
	log_info("%s: closed (%s; %llu requests)", c->peer, c->why ? c->why : "closed",
		 (unsigned long long)c->nrequests);
	free(c->in);
	struct conn_slot slot = c->slot;
	free(c);
	if (LIST_EMPTY(&d->conns) && d->budget_ev) {
		/* no connection left to trim or retry: other threads stop
		 * using the event under budget_lock */
		pthread_mutex_lock(&d->srv->budget_lock);
		event_free(d->budget_ev);
		d->budget_ev = NULL;
		pthread_mutex_unlock(&d->srv->budget_lock);
	}
	pthread_mutex_lock(&d->lock);
	d->nconns--;
	pthread_mutex_unlock(&d->lock);
	server_conn_closed(d->srv, &slot);
}

/*
 * Once a second while the ioDimm has connections: close those idle for
 * idle_timeout (see "Idle timeout"), and give back the buffers of those
 * idle for IDLE_TRIM_S (kept request buffers, the input buffer, the TLS
 * output buffer; reading allocates the input buffer again).
 */
static void conn_tick(evutil_socket_t fd, short what, void *arg)
{
	struct dimm *d = arg;
	d->tick_armed = false;
	uint64_t now = nand_now_ns();
	int idle_s = __atomic_load_n(&d->srv->cfg.idle_timeout, __ATOMIC_RELAXED);
	int busy_s = __atomic_load_n(&d->srv->cfg.idle_timeout_busy, __ATOMIC_RELAXED);
	int top = 0;   /* busy: connections of the address that holds the most */
	if (busy_s > 0 && (idle_s <= 0 || busy_s < idle_s)) {
		/* the slots are wanted: over 3/4 of max_connections are open */
		struct server *srv = d->srv;
		pthread_mutex_lock(&srv->lock);
		bool busy = (int64_t)srv->nconns * 4 > (int64_t)srv->cfg.max_connections * 3;
		pthread_mutex_unlock(&srv->lock);
		if (busy)
			top = server_conns_top(srv);
	}
	bool closed = false;
	struct conn *c;
	LIST_FOREACH(c, &d->conns, link) {
		if (c->closing)
			continue;
		if (c->budget_wait) {
			/* its socket is not read while it waits: notice a client
			 * that went away (the request it waits with needs no
			 * answer); and retry, should a wake have been missed */
			uint8_t b;
			ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
				conn_close_now(c, n == 0 ? "client disconnected" : strerror(errno));
				conn_mark_dirty(c);
				closed = true;
				continue;
			}
			budget_retry(c);
		}
		uint64_t last = c->last_ns;
		if (c->tx) {
			/* a long reply still leaving through the send thread */
			uint64_t t = __atomic_load_n(&c->tx->sent_ns, __ATOMIC_RELAXED);
			last = t > last ? t : last;
		}
		uint64_t quiet = now > last ? now - last : 0;
		/* not while it waits for the server's own buffer_limit, nor
		 * with requests in the FTL */
		const char *idle_why = NULL;
		if (idle_s > 0 && quiet >= (uint64_t)idle_s * 1000000000u)
			idle_why = "idle for idle_timeout seconds";
		else if (top && quiet >= (uint64_t)busy_s * 1000000000u &&
			 server_conns_of(d->srv, &c->slot) * 2 > top)
			idle_why = "idle for idle_timeout_busy seconds while over 3/4 of max_connections "
				   "are open, its address among those holding the most";
		if (idle_why && !c->in_ftl && !c->budget_wait && !c->budget_queued) {
			/* replies it did not take are dropped: reset, not FIN */
			c->reset = c->inflight || c->sendq || tx_busy(c) || c->cur || c->discard_left ||
				   c->tout_pos < c->tout_len;
			conn_close_now(c, idle_why);
			conn_mark_dirty(c);
			closed = true;
			continue;
		}
		if (quiet >= (uint64_t)IDLE_TRIM_S * 1000000000u && !c->inflight && !c->cur) {
			conn_trim(c);
			if (c->in && c->in_pos == c->in_len) {
				free(c->in);
				c->in = NULL;
				c->in_pos = c->in_len = 0;
			}
			if (c->tout && c->tout_pos == c->tout_len) {
				free(c->tout);
				c->tout = NULL;
				c->tout_pos = c->tout_len = 0;
			}
		}
	}
	if (closed)
		dimm_kick(d);
	conn_tick_arm(d);
}

static void conn_tick_arm(struct dimm *d)
{
	if (d->tick_armed || LIST_EMPTY(&d->conns))
		return;
	struct timeval tv = { TICK_MS / 1000, (TICK_MS % 1000) * 1000 };
	if (event_base_once(d->base, -1, EV_TIMEOUT, conn_tick, d, &tv) == 0)
		d->tick_armed = true;
}

void conn_adopt(struct dimm *d, struct handoff *h)
{
	struct conn *c = calloc(1, sizeof *c);
	if (c) {
		c->in = malloc(INBUF_SIZE);
		c->rev = event_new(d->base, h->fd, EV_READ | EV_PERSIST, read_cb, c);
		c->wev = event_new(d->base, h->fd, EV_WRITE, write_cb, c);
	}
	if (!c || !c->in || !c->rev || !c->wev) {
		log_err("%s: %s: out of memory", d->cfg->name, h->peer);
		tls_close(h->ssl, false);
		close(h->fd);
		if (c) {
			if (c->rev)
				event_free(c->rev);
			if (c->wev)
				event_free(c->wev);
			free(c->in);
			free(c);
		}
		struct conn_slot slot = h->slot;
		free(h->leftover);
		free(h);
		pthread_mutex_lock(&d->lock);
		d->nconns--;
		pthread_mutex_unlock(&d->lock);
		server_conn_closed(d->srv, &slot);
		return;
	}
	c->d = d;
	c->fd = h->fd;
	c->ssl = h->ssl;
	c->structured = h->structured;
	c->meta_allocation = h->meta_allocation;
	c->strict = h->block_size;
	c->readonly = h->readonly;
	c->slot = h->slot;
	c->last_ns = c->in_ns = nand_now_ns();
	c->max_payload = c->strict ? MAX_PAYLOAD : MAX_PAYLOAD_ANY;
	/* receive timestamps (TCP gives them; conn_recv, "latency") */
	int on = 1;
	if (!c->ssl)
		setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
	c->tflags = h->tflags;
	snprintf(c->peer, sizeof c->peer, "%s: %s", d->cfg->name, h->peer);
	snprintf(c->who, sizeof c->who, "%s", h->who);
	/* the handshake reads in small steps and stops at GO, so this is far
	 * below INBUF_SIZE; were it not, cutting requests off would desync */
	size_t nleft = h->nleftover;
	if (nleft && nleft <= INBUF_SIZE) {
		memcpy(c->in, h->leftover, nleft);
		c->in_len = nleft;
	}
	free(h->leftover);
	free(h);
	if (!d->budget_ev) {
		struct event *ev = event_new(d->base, -1, EV_READ | EV_PERSIST, budget_cb, d);
		pthread_mutex_lock(&d->srv->budget_lock);
		d->budget_ev = ev;  /* NULL (out of memory): the tick retries */
		pthread_mutex_unlock(&d->srv->budget_lock);
	}
	LIST_INSERT_HEAD(&d->conns, c, link);
	conn_tick_arm(d);
	event_add(c->rev, NULL);
	c->reading = true;
	if (c->in_len || (c->ssl && SSL_pending(c->ssl) > 0))
		event_active(c->rev, EV_READ, 0);
	pthread_mutex_lock(&d->lock);
	bool stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	if (nleft > INBUF_SIZE) {
		log_err("%s: %zu bytes read past the handshake, more than the input buffer", c->peer, nleft);
		conn_close_now(c, "handshake leftover too large");
	} else if (stop) {
		conn_close_now(c, "server shutting down");
	} else if (!d->ftl || (d->op && d->op->type == DCMD_DETACH)) {
		/* handed over just before the export was withdrawn */
		conn_close_now(c, "the export was detached");
	}
}

/* Shutdown: read nothing more; answer what is in flight, then close. */
void conn_stop_all(struct dimm *d, const char *why)
{
	struct conn *c;
	LIST_FOREACH(c, &d->conns, link) {
		if (!c->closing) {
			c->why = why;
			c->closing = true;
			stop_reading(c);
		}
		c->budget_wait = false;
		budget_dequeue(c);
		drop_partial(c);
	}
}

/*
 * Detach: every connection keeps reading, so that each request the client
 * sent is answered: those in flight as usual, those that arrive from now on
 * with NBD_ESHUTDOWN (a WRITE's payload is read and dropped), which tells
 * the client to disconnect.  conn_drain_step closes a connection once
 * nothing of it is in flight and nothing more waits in its socket: closed
 * with nothing unread, the client gets a FIN after its last reply, not a
 * reset.  A client that keeps sending is force-closed at the detach
 * deadline (conn_abort_all).
 */
void conn_drain_all(struct dimm *d, const char *why)
{
	struct conn *c;
	LIST_FOREACH(c, &d->conns, link) {
		if (c->closing || c->draining)
			continue;
		c->draining = true;
		c->why = why;
		if (c->budget_wait) {
			/* the request it waits with is refused now: no buffer */
			c->budget_wait = false;
			budget_dequeue(c);
			maybe_resume(c);
		}
	}
}

int conn_describe_all(struct dimm *d, char *buf, size_t len)
{
	struct conn *c;
	int n = 0;
	size_t used = 0;
	buf[0] = 0;
	LIST_FOREACH(c, &d->conns, link) {
		if (c->closing)
			continue;
		if (used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%s", n ? ", " : "", c->who);
		n++;
	}
	return n;
}

int conn_drain_step(struct dimm *d)
{
	int open = 0;
	struct conn *c, *next;
	LIST_FOREACH_SAFE(c, &d->conns, link, next) {
		if (c->draining && !c->closing && !c->inflight && !c->cur && !c->discard_left &&
		    c->in_pos == c->in_len && !(c->ssl && (SSL_pending(c->ssl) > 0 ||
							     c->tout_pos < c->tout_len))) {
			uint8_t b;
			ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
			if (n <= 0 && (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK)) {
				c->closing = true;
				stop_reading(c);
				conn_maybe_free(c);
				continue;
			}
		}
		open++;
	}
	return open;
}

/*
 * The shutdown (or detach) deadline passed: close every connection still open now,
 * dropping the replies it has not taken (a client that stopped reading must
 * not keep flashd from exiting), with a reset.  Requests still inside the
 * FTL complete unanswered; their connections go once they have.  Returns
 * how many connections it closed.
 */
int conn_abort_all(struct dimm *d, const char *why)
{
	int n = 0;
	struct conn *c;
	LIST_FOREACH(c, &d->conns, link) {
		if (c->dead)
			continue; /* already closed: waits for the FTL only */
		n++;
		size_t unsent = 0;
		for (struct req *r = c->sendq; r; r = r->next)
			unsent += r->reply_bytes;
		unsent -= c->head_sent;
		unsent += c->tout_len - c->tout_pos; /* TLS: staged, not yet written */
		log_warn("%s: %s: %u request(s) unanswered, %zu reply bytes unsent%s", c->peer, why,
			 c->inflight, unsent,
			 tx_busy(c) ? " (and the replies its send thread holds)" : "");
		c->why = why;
		c->reset = true;
		conn_close_now(c, c->why);
		conn_mark_dirty(c); /* conn_flush drops the queued replies */
	}
	return n;
}
