/*
 * server/admit.c - admission of NBD connections, on the main thread: the
 * connection slots (max_connections, per address; flashd.h, "connection
 * slots"), the handshake budget, the waiting room of those that wait for a
 * handshake slot, and the rate-limited log of refusals.  It alone changes
 * srv.nconns, the handshake counts and the per-address table (under
 * srv.lock).  Called by listen.c (admit_connection, for each accepted
 * client), by handshake.c and the ioDimm threads (server_conn_admitted,
 * server_conn_closed, server_conns_of, server_conns_top: flashd.h), by
 * ctl.c and handshake.c (refusal_log) and by main.c at shutdown.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "server/flashd.h"
#include "server/main_int.h"

/*
 * Per-address connection counts (flashd.h, "connection slots"): a chained
 * hash of the addresses with at least one connection, under s->lock.  A
 * node is made at an address's first connection and freed at its last, so
 * the table holds at most max_connections nodes; accept is not the I/O
 * path.
 */
#define ADDR_BUCKETS 1024
struct addr_count {
	uint8_t addr[16];
	int n;                      /* connections */
	int hs;                     /* of them, those still in handshake */
	int waiting;                /* of them, those in the waiting room */
	struct addr_count *next;
};

static unsigned addr_hash(const uint8_t *a)
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 16; i++)
		h = (h ^ a[i]) * 16777619u;
	return h % ADDR_BUCKETS;
}

/* s->lock held: the count of addr's node, creating it (with 0) if make. */
static struct addr_count *addr_find(struct server *s, const uint8_t *addr, bool make)
{
	if (!s->addr_tab) {
		if (!make)
			return NULL;
		s->addr_tab = calloc(ADDR_BUCKETS, sizeof *s->addr_tab);
		if (!s->addr_tab)
			return NULL;
	}
	struct addr_count **pp = &s->addr_tab[addr_hash(addr)];
	for (struct addr_count *a = *pp; a; a = a->next)
		if (!memcmp(a->addr, addr, 16))
			return a;
	if (!make)
		return NULL;
	struct addr_count *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	memcpy(a->addr, addr, 16);
	a->next = *pp;
	*pp = a;
	return a;
}

/* s->lock held: one connection of addr fewer; the node goes at 0. */
static void addr_put(struct server *s, const uint8_t *addr)
{
	if (!s->addr_tab)
		return;
	struct addr_count **pp = &s->addr_tab[addr_hash(addr)];
	for (struct addr_count *a; (a = *pp); pp = &a->next) {
		if (memcmp(a->addr, addr, 16))
			continue;
		if (--a->n <= 0) {
			*pp = a->next;
			free(a);
		}
		return;
	}
}

void addr_tab_free(struct server *s)
{
	if (!s->addr_tab)
		return;
	for (int i = 0; i < ADDR_BUCKETS; i++)
		while (s->addr_tab[i]) {
			struct addr_count *a = s->addr_tab[i];
			s->addr_tab[i] = a->next;
			free(a);
		}
	free(s->addr_tab);
	s->addr_tab = NULL;
}

static void waiting_wake(bool unix_sock);

/* s->lock held: slot's handshake slot back, if it holds one. */
static void handshake_slot_put(struct server *s, const struct conn_slot *slot)
{
	if (!slot->handshaking)
		return;
	if (!slot->per_addr) {
		s->nhandshakes_unix--;
		return;
	}
	s->nhandshakes--;
	struct addr_count *a = addr_find(s, slot->addr, false);
	if (a)
		a->hs--;
}

/* Handshake slots are taken and given back on the main thread only (the
 * handshake runs there), so a freed one can wake the waiting room. */
void server_conn_admitted(struct server *s, struct conn_slot *slot)
{
	pthread_mutex_lock(&s->lock);
	handshake_slot_put(s, slot);
	pthread_mutex_unlock(&s->lock);
	slot->handshaking = false;
	waiting_wake(!slot->per_addr);
}

int server_conns_of(struct server *s, const struct conn_slot *slot)
{
	pthread_mutex_lock(&s->lock);
	struct addr_count *a = slot->per_addr ? addr_find(s, slot->addr, false) : NULL;
	int n = slot->per_addr ? (a ? a->n : 0) : s->nconns_unix;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* A walk of the address table (ADDR_BUCKETS chains; once a second per
 * ioDimm, and only while over 3/4 of max_connections are open). */
int server_conns_top(struct server *s)
{
	pthread_mutex_lock(&s->lock);
	int top = s->nconns_unix;
	for (int i = 0; s->addr_tab && i < ADDR_BUCKETS; i++)
		for (struct addr_count *a = s->addr_tab[i]; a; a = a->next)
			top = a->n > top ? a->n : top;
	pthread_mutex_unlock(&s->lock);
	return top;
}

void server_conn_closed(struct server *s, const struct conn_slot *slot)
{
	pthread_mutex_lock(&s->lock);
	s->nconns--;
	if (slot) {
		handshake_slot_put(s, slot);
		if (slot->per_addr)
			addr_put(s, slot->addr);
		else
			s->nconns_unix--;
	}
	pthread_mutex_unlock(&s->lock);
	if (slot && slot->handshaking)
		waiting_wake(!slot->per_addr);
}

/*
 * Refusals (struct refusal_log) are logged at most once per REFUSAL_LOG_S:
 * the first in a period in full, the others counted and summed up in one
 * line when the period ends (r->ev; a client that retries in a loop must
 * not fill the log or the disk, and the count is not held back until the
 * next refusal).
 */
#define REFUSAL_LOG_S 10

static void refusal_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct refusal_log *r = arg;
	if (!r->held)
		return;
	uint64_t now = mono_ns();
	log_warn("%lu more %s refused in the last %.0f s, not logged one by one (the last: %s%s%s)",
		 r->held, r->what, (double)(now - r->last_ns) / 1e9, r->who, r->refused, r->why);
	r->last_ns = now;
	r->held = 0;
}

void refusal_log(struct server *s, struct refusal_log *r, const char *who, const char *why)
{
	uint64_t now = mono_ns();
	uint64_t last_ns = r->last_ns;
	if (last_ns && now - last_ns < (uint64_t)REFUSAL_LOG_S * 1000000000u) {
		snprintf(r->who, sizeof r->who, "%s", who);
		snprintf(r->why, sizeof r->why, "%s", why);
		if (!r->held++) {
			if (!r->ev)
				r->ev = evtimer_new(s->base, refusal_flush_cb, r);
			uint64_t left = (uint64_t)REFUSAL_LOG_S * 1000000000u - (now - last_ns);
			struct timeval tv = { (time_t)(left / 1000000000u), (suseconds_t)(left % 1000000000u / 1000) };
			if (r->ev)
				evtimer_add(r->ev, &tv);
		}
		return;
	}
	if (r->held) /* the timer had no event (out of memory) */
		log_warn("%s%s%s (and %lu more %s refused in the last %.0f s, not logged one by one)",
			 who, r->refused, why, r->held, r->what, (double)(now - last_ns) / 1e9);
	else
		log_warn("%s%s%s", who, r->refused, why);
	r->last_ns = now;
	r->held = 0;
}

static void nbd_refused(const char *peer, const char *why)
{
	refusal_log(&srv, &srv.nbd_refusals, peer, why);
}

/*
 * The waiting room (flashd.h, "connection slots"): a newcomer whose
 * handshake budget is full, while no handshake in it may be evicted yet,
 * waits here unanswered: it holds its connection slot, but no handshake
 * slot and no buffer (it gets no greeting yet).  One room per budget (TCP,
 * unix) of max_handshakes places.  A handshake slot that frees goes to the
 * one waiting whose address holds the fewest handshakes (then to the one
 * waiting longest), so a burst or a flood from one host delays the others
 * little; a full room turns the newcomer away if its address has the most
 * waiting, else closes the longest waiting one of the address that has.
 * wait_ev retries when a handshake slot is given back (waiting_wake) or
 * the first handshake passes its grace.
 */
enum { POOL_TCP, POOL_UNIX, NPOOLS };
struct waiting {
	int fd, tls_mode;
	char peer[96];
	struct conn_slot slot;
	struct waiting *next;
};
static struct waiting *waiting[NPOOLS];   /* in order of arrival */
static int nwaiting[NPOOLS];
static struct event *wait_ev[NPOOLS];

static int pool_of(const struct conn_slot *slot)
{
	return slot->per_addr ? POOL_TCP : POOL_UNIX;
}

/* A connection slot for slot (max_connections, its address's), or why not. */
static const char *conn_take(const struct conn_slot *slot)
{
	const char *why = NULL;
	pthread_mutex_lock(&srv.lock);
	int per_addr = srv.cfg.max_conn_per_addr;
	struct addr_count *a = NULL;
	if (srv.shutting_down)
		why = "shutting down";
	else if (srv.nconns >= srv.cfg.max_connections)
		why = "connection limit reached (max_connections)";
	else if (slot->per_addr && !(a = addr_find(&srv, slot->addr, true)))
		why = "out of memory";
	else if (a && per_addr > 0 && a->n >= per_addr)
		why = "connection limit of this address reached (max_connections_per_address)";
	if (!why) {
		srv.nconns++;
		if (a)
			a->n++;
		else
			srv.nconns_unix++;
	} else if (a && !a->n) {
		addr_put(&srv, slot->addr);  /* made just now: drop it again */
	}
	pthread_mutex_unlock(&srv.lock);
	return why;
}

enum hs_take { HS_TAKEN, HS_FULL, HS_FULL_ADDR };

/* A handshake slot for slot, which holds a connection slot. */
static enum hs_take hs_take(struct conn_slot *slot)
{
	enum hs_take r = HS_TAKEN;
	pthread_mutex_lock(&srv.lock);
	int *nhs = slot->per_addr ? &srv.nhandshakes : &srv.nhandshakes_unix;
	struct addr_count *a = slot->per_addr ? addr_find(&srv, slot->addr, false) : NULL;
	if (*nhs >= srv.cfg.max_handshakes)
		r = HS_FULL;
	else if (a && srv.cfg.max_hs_per_addr > 0 && a->hs >= srv.cfg.max_hs_per_addr)
		r = HS_FULL_ADDR;
	if (r == HS_TAKEN) {
		(*nhs)++;
		if (a)
			a->hs++;
		slot->handshaking = true;
	}
	pthread_mutex_unlock(&srv.lock);
	return r;
}

/* Start slot's handshake, evicting an old one if its budget is full;
 * false if none may go yet (*wait_ns: until one may; 0: until a handshake
 * ends).  Evicts at most one per handshake started. */
static bool hs_admit(int fd, const char *peer, int tls_mode, struct conn_slot *slot, uint64_t *wait_ns)
{
	for (;;) {
		enum hs_take r = hs_take(slot);
		if (r == HS_TAKEN) {
			handshake_start(&srv, fd, peer, tls_mode, slot);
			return true;
		}
		char victim[96];
		if (!handshake_evict(&srv, !slot->per_addr, r == HS_FULL_ADDR ? slot->addr : NULL, wait_ns,
				     victim, sizeof victim))
			return false;
		nbd_refused(victim, r == HS_FULL ?
			    "closed to make room: in handshake for over " HS_GRACE_TEXT " while the "
			    "handshake budget was full (max_handshakes)" :
			    "closed to make room: in handshake for over " HS_GRACE_TEXT " while its "
			    "address's handshake budget was full (max_handshakes_per_address)");
	}
}

/* srv.lock held: handshakes and waiting ones of slot's address (unix: 0). */
static struct addr_count *slot_addr(const struct conn_slot *slot)
{
	return slot->per_addr ? addr_find(&srv, slot->addr, false) : NULL;
}

/* Take *pp out of its room and close it (why: logged, unless NULL). */
static void waiting_close(int pool, struct waiting **pp, const char *why)
{
	struct waiting *w = *pp;
	*pp = w->next;
	nwaiting[pool]--;
	pthread_mutex_lock(&srv.lock);
	struct addr_count *a = slot_addr(&w->slot);
	if (a)
		a->waiting--;
	pthread_mutex_unlock(&srv.lock);
	if (why)
		nbd_refused(w->peer, why);
	close(w->fd);
	server_conn_closed(&srv, &w->slot);
	free(w);
}

/* Give freed handshake slots to the waiting ones, fairest first. */
static void waiting_run(int pool)
{
	while (waiting[pool]) {
		struct waiting **best = NULL;
		int fewest = INT_MAX;
		pthread_mutex_lock(&srv.lock);
		for (struct waiting **pp = &waiting[pool]; *pp && fewest; pp = &(*pp)->next) {
			struct addr_count *a = slot_addr(&(*pp)->slot);
			int hs = a ? a->hs : 0;
			if (hs < fewest) {
				fewest = hs;
				best = pp;
			}
		}
		struct waiting *w = *best;
		struct addr_count *a = slot_addr(&w->slot);
		if (a)
			a->waiting--;   /* the node lives on: w holds a connection */
		pthread_mutex_unlock(&srv.lock);
		uint64_t wait_ns;
		/* (evicting touches no waiting one: best stays valid) */
		if (!hs_admit(w->fd, w->peer, w->tls_mode, &w->slot, &wait_ns)) {
			pthread_mutex_lock(&srv.lock);
			if (a)
				a->waiting++;
			pthread_mutex_unlock(&srv.lock);
			if (wait_ns) {
				struct timeval tv = { (time_t)(wait_ns / 1000000000u),
						      (suseconds_t)(wait_ns % 1000000000u / 1000 + 1) };
				evtimer_add(wait_ev[pool], &tv);
			}
			return;
		}
		*best = w->next;
		nwaiting[pool]--;
		free(w);
	}
}

static void wait_cb(evutil_socket_t unused, short what, void *arg)
{
	waiting_run((int)(intptr_t)arg);
}

static void waiting_wake(bool unix_sock)
{
	int pool = unix_sock ? POOL_UNIX : POOL_TCP;
	if (waiting[pool])
		event_active(wait_ev[pool], EV_TIMEOUT, 0);
}

/* A newcomer with its connection slot: into its room, then its turn. */
static void waiting_add(int fd, const char *peer, int tls_mode, const struct conn_slot *slot)
{
	int pool = pool_of(slot);
	const char *why = NULL;
	if (!wait_ev[pool] && !(wait_ev[pool] = evtimer_new(srv.base, wait_cb, (void *)(intptr_t)pool)))
		why = "out of memory";
	if (!why && nwaiting[pool] >= srv.cfg.max_handshakes) {
		/* full: the longest waiting one of the address with the most
		 * waiting goes, unless that is the newcomer's */
		struct waiting **victim = NULL;
		pthread_mutex_lock(&srv.lock);
		struct addr_count *mine = slot_addr(slot);
		int most = (mine ? mine->waiting : nwaiting[pool]) + 1;
		for (struct waiting **pp = &waiting[pool]; *pp; pp = &(*pp)->next) {
			struct addr_count *a = slot_addr(&(*pp)->slot);
			if (a && a->waiting > most) {
				most = a->waiting;
				victim = pp;
			}
		}
		pthread_mutex_unlock(&srv.lock);
		if (victim)
			waiting_close(pool, victim, "closed to make room: its address had the most clients "
				      "waiting for a handshake slot");
		else
			why = "too many clients waiting for a handshake slot, this address's the most";
	}
	struct waiting *w = why ? NULL : calloc(1, sizeof *w);
	if (!w) {
		nbd_refused(peer, why ? why : "out of memory");
		close(fd);
		server_conn_closed(&srv, slot);
		return;
	}
	*w = (struct waiting){ .fd = fd, .tls_mode = tls_mode, .slot = *slot };
	snprintf(w->peer, sizeof w->peer, "%s", peer);
	struct waiting **pp = &waiting[pool];
	while (*pp)
		pp = &(*pp)->next;
	*pp = w;
	nwaiting[pool]++;
	pthread_mutex_lock(&srv.lock);
	struct addr_count *a = slot_addr(slot);
	if (a)
		a->waiting++;
	pthread_mutex_unlock(&srv.lock);
	waiting_run(pool);
}

/* Shutdown: the waiting ones are closed. */
void waiting_drop_all(void)
{
	for (int pool = 0; pool < NPOOLS; pool++) {
		while (waiting[pool])
			waiting_close(pool, &waiting[pool], NULL);
		if (wait_ev[pool])
			event_free(wait_ev[pool]);
		wait_ev[pool] = NULL;
	}
}

/* A client accepted (listen.c): a connection slot first, then a handshake
 * slot, at once or in the waiting room (flashd.h, "connection slots"). */
void admit_connection(int fd, const char *peer, int tls_mode, const struct conn_slot *slot)
{
	const char *why = conn_take(slot);
	if (why) {
		nbd_refused(peer, why);
		close(fd);
		return;
	}
	waiting_add(fd, peer, tls_mode, slot);
}
