/*
 * server/conn_int.h - what the files of the NBD transmission phase share
 * (server/conn*.c, on the ioDimm's thread; the rest of the server uses
 * flashd.h's conn_* functions only).
 *
 *   conn.c          a connection's life cycle: adopted after the handshake,
 *                   closed, freed; the tick (idle timeout, trimming);
 *                   shutdown, detach (drain), abort
 *   conn_request.c  the input side: reading the socket, parsing requests,
 *                   checking them and handing them to the FTL
 *   conn_reply.c    the output side: laying out replies, the send queue,
 *                   sending it inline (plaintext or TLS)
 *   conn_tx.c       the send thread (struct tx) of a busy connection
 *   conn_buf.c      request structs and buffers, and buffer_limit (the
 *                   budget of all connections together)
 *
 * The prototypes below name, per file, the fields of struct conn that
 * file looks after.  All of it runs on the connection's ioDimm thread but
 * the budget queue (under server.budget_lock, conn_buf.c) and the send
 * thread (conn_tx.c).
 */
#ifndef FLASHD_CONN_INT_H
#define FLASHD_CONN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <openssl/ssl.h>

#include "server/flashd.h"
#include "server/nbd_proto.h"

#define INBUF_SIZE (256u << 10)
#define MAX_INFLIGHT 512
#define MAX_INFLIGHT_BYTES (16u << 20)
#define BUF_KEEP (128u << 10)
#define MAX_CHUNKS 8
#define MAX_IOV 1024
#define MAX_EXTENTS 2048
#define BIG_CACHE 16                  /* big buffers kept per connection */
#define BIG_CACHE_BYTES (64u << 20)   /* keeps one MAX_PAYLOAD_ANY buffer */
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

struct tx;

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
	struct tx *tx;             /* send thread, NULL: none started (conn_tx.c) */

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

/* conn.c: life cycle */
void conn_close_now(struct conn *c, const char *why);
void conn_maybe_free(struct conn *c);
void drop_partial(struct conn *c);

/* A reply was queued or the connection changed: conn_flush_dirty looks at
 * it on this turn of the ioDimm's loop (d->dirty, a list without
 * allocation: once per request, so inline). */
static inline void conn_mark_dirty(struct conn *c)
{
	if (c->dirty)
		return;
	c->dirty = true;
	c->dirty_next = c->d->dirty;
	c->d->dirty = c;
}

/* conn_request.c: the input side (owns c->reading, c->in, c->cur) */
void conn_read_cb(evutil_socket_t fd, short what, void *arg);
void start_reading(struct conn *c, bool now);
void stop_reading(struct conn *c);
void maybe_resume(struct conn *c);

/* conn_reply.c: the output side (owns c->sendq, c->head_sent, c->tout) */
void req_finish(struct req *r);
void conn_write_cb(evutil_socket_t fd, short what, void *arg);
void conn_flush(struct conn *c);
int replies_iov(const struct req *q, size_t skip, struct iovec *iov);
void io_account_sent(struct dimm *d, const struct req *r, uint64_t now);

/* conn_tx.c: the send thread (owns struct tx) */
bool tx_take(struct conn *c);
bool tx_busy(struct conn *c);
void tx_drop(struct conn *c);
void tx_stop(struct conn *c);
uint64_t tx_sent_ns(const struct conn *c);

/* conn_buf.c: request structs and buffers, buffer_limit (owns c->free_reqs,
 * c->big, the budget fields; c->inflight counts what req_get gave out) */
void req_put(struct conn *c, struct req *r);
int req_buf(struct req *r, size_t need);
void conn_trim(struct conn *c);
size_t buf_need(const struct conn *c, uint16_t type, uint32_t length, int err);
bool budget_take(struct conn *c, size_t need);
void budget_leave_queue(struct conn *c);
void budget_retry(struct conn *c);
void conn_budget_cb(evutil_socket_t fd, short what, void *arg);

/* Inline below: run once or twice per request (as they were when all of
 * this was one file). */

/*
 * Too much in flight to parse another request header, or the header
 * waiting at in_pos would charge c->want_bytes (its payload) that do not
 * fit under MAX_INFLIGHT_BYTES beside what is in flight (alone it always
 * may: want_bytes <= MAX_PAYLOAD_ANY).
 */
static inline bool over_limits(const struct conn *c)
{
	if (c->inflight >= MAX_INFLIGHT || c->inflight_bytes >= MAX_INFLIGHT_BYTES)
		return true;
	return c->want_bytes && c->inflight && c->inflight_bytes + c->want_bytes > MAX_INFLIGHT_BYTES;
}

/* A request struct for a header being parsed (recycled: no allocation in
 * steady state); NULL if out of memory. */
static inline struct req *req_get(struct conn *c)
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

/* Leave buffer_limit's queue, if in it (granted, refused, closing). */
static inline void budget_dequeue(struct conn *c)
{
	if (c->budget_queued)
		budget_leave_queue(c);
}

#endif
