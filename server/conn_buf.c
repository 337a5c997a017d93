/*
 * server/conn_buf.c - the memory of NBD requests, on the ioDimm's thread:
 * request structs and their buffers (req_get, req_buf, req_put), what a
 * connection keeps for reuse (conn_trim), its in-flight count, and
 * buffer_limit, the budget of all connections' buffers together with its
 * queue of waiting connections (budget_take, budget_retry, conn_budget_cb;
 * srv->buf_bytes and srv->budget_* change only here).  Called by the other
 * conn_*.c files (conn_int.h) and the event loop (conn_budget_cb).
 *
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
 * trims what its connections keep, busy or not (conn_budget_cb), and buffers
 * are freed as their requests finish; each buffer freed wakes the head's
 * ioDimm (d->budget_ev, coalesced by srv->budget_kick), no polling.  The
 * tick retries waiters too (and notices clients that went away while not
 * read).  So the buffers of all connections stay under about buffer_limit
 * + connections * BUF_KEEP (check and add are not one atomic step: threads
 * racing may each overshoot by one buffer).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/conn_int.h"

#define BUDGET_LOG_S 10               /* "waits for buffer_limit": logged once per */

static void budget_freed(struct server *srv);

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
void conn_trim(struct conn *c)
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

int req_buf(struct req *r, size_t need)
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

void req_put(struct conn *c, struct req *r)
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
size_t buf_need(const struct conn *c, uint16_t type, uint32_t length, int err)
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
 * once until its ioDimm has looked (conn_budget_cb clears budget_kick). */
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

/* budget_dequeue: c leaves the queue; the next one may fit. */
void budget_leave_queue(struct conn *c)
{
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
bool budget_take(struct conn *c, size_t need)
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
void budget_retry(struct conn *c)
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
		if (!c->closing && !c->reading && !over_limits(c))
			start_reading(c, true);
	}
}

/* d->budget_ev: pressure started, buffers were given back, or a waiting
 * connection's requests finished.  Under pressure every connection gives
 * back what it keeps (busy or not); then the waiting ones are retried. */
void conn_budget_cb(evutil_socket_t fd, short what, void *arg)
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
