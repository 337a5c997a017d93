/*
 * server/conn.c - an NBD connection's life cycle in the transmission phase,
 * on the ioDimm's thread: adopted from the handshake (conn_adopt), closed
 * (conn_close_now), freed once nothing of it is left (conn_maybe_free); the
 * once-a-second tick (idle timeout, giving back idle buffers); shutdown,
 * detach (drain) and the deadline's abort.  Called by server/dimm.c through
 * flashd.h, and by the other conn_*.c files (conn_int.h) to close and free.
 * The input side is conn_request.c, the output side conn_reply.c and
 * conn_tx.c, request memory and buffer_limit conn_buf.c.
 *
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
 * conn_drain_step).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/ssl.h>

#include "server/conn_int.h"

#define TICK_MS 1000                  /* idle timeout and buffer trimming */
#define IDLE_TRIM_S 2                 /* idle this long: buffers given back */

static void conn_tick_arm(struct dimm *d);

/* Requests still being received can never complete: drop them. */
void drop_partial(struct conn *c)
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

/* A connection being closed takes in no more requests: it leaves the
 * buffer budget's queue, and those still being received are dropped. */
static void stop_taking_requests(struct conn *c)
{
	c->budget_wait = false;
	budget_dequeue(c);
	drop_partial(c);
}

void conn_close_now(struct conn *c, const char *why)
{
	if (!c->why)
		c->why = why;
	c->closing = true;
	c->dead = true;
	tx_drop(c);
	stop_reading(c);
	stop_taking_requests(c);
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

void conn_maybe_free(struct conn *c)
{
	if (!c->closing || c->inflight || c->sendq || c->dirty || tx_busy(c))
		return;
	if (c->ssl && !c->dead && c->tout_pos < c->tout_len)
		return; /* TLS output still being written (conn_write_cb) */
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
		/* a long reply may still be leaving through the send thread */
		uint64_t t = tx_sent_ns(c), last = c->last_ns > t ? c->last_ns : t;
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
		c->rev = event_new(d->base, h->fd, EV_READ | EV_PERSIST, conn_read_cb, c);
		c->wev = event_new(d->base, h->fd, EV_WRITE, conn_write_cb, c);
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
		struct event *ev = event_new(d->base, -1, EV_READ | EV_PERSIST, conn_budget_cb, d);
		pthread_mutex_lock(&d->srv->budget_lock);
		d->budget_ev = ev;  /* NULL (out of memory): the tick retries */
		pthread_mutex_unlock(&d->srv->budget_lock);
	}
	LIST_INSERT_HEAD(&d->conns, c, link);
	conn_tick_arm(d);
	start_reading(c, c->in_len || (c->ssl && SSL_pending(c->ssl) > 0));
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
		stop_taking_requests(c);
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
