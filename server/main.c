/*
 * server/main.c - flashd: serve every ioDimm over NBD.
 *
 * With no options: the embedded default, a simulated ioDrive Duo (two
 * ioDimms of preset iodimm-mlc-320, stock format) exported as dimm0 and
 * dimm1 on 127.0.0.1:10809, state under ./var/ when run from the checkout
 * (else /var/lib/flashd).
 *
 * Configuration: --config FILE, else /etc/flashd/flashd.conf if it exists,
 * else the embedded default; the command line wins over the file for every
 * key.  --check-config checks it (everything but the images) and exits: 0
 * if it is good, 2 with the error otherwise.
 *
 * Start-up steps (undone in reverse on failure, and on SIGTERM or SIGINT
 * meanwhile, then exit 0: "signals" below): configuration, state directory,
 * TCP listeners, ioDimms (each opens its image and FTL on its own thread;
 * every result is known before READY), unix socket, control socket,
 * pidfile, READY.
 * Health policy: flashd starts only if every configured ioDimm opens (else
 * it logs why and exits 1); with --allow-degraded (allow_degraded = yes) it
 * serves those that open, logs a warning per ioDimm that did not and tells
 * systemd "STATUS=degraded: ..." (the others stay attachable: flashctl
 * attach retries the open).  Without --foreground the command returns once
 * that is decided, as systemd's start job does ("daemon" below).  Shutdown on SIGTERM/SIGINT:
 * stop accepting, drop connections still negotiating, let every ioDimm
 * answer what is in flight (for at most shutdown_timeout seconds, then the
 * connections left are force-closed) and close its FTL with a checkpoint.
 * SIGHUP (and POST /v1/reload): server_reload reads the configuration file
 * again through config_build, as at start-up, applies what can change while
 * serving and logs, one warning per key, what needs a restart.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include "common/parse.h"
#include "hw/nand.h"
#include "server/flashd.h"

#define DEFAULT_CONFIG "/etc/flashd/flashd.conf"

static struct server srv;
static int pidfile_fd = -1;
/* what the command line set, and the state directory used when neither it
 * nor the file sets one: a reload builds the configuration from them again */
static struct server_cfg cli_cfg;
static char *fallback_state_dir;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashd [options]\n"
		"  -c, --config FILE       configuration (see conf/flashd.conf); default:\n"
		"                          " DEFAULT_CONFIG " if it exists, else an\n"
		"                          embedded simulated ioDrive Duo (dimm0, dimm1)\n"
		"      --no-config         the embedded default even if " DEFAULT_CONFIG "\n"
		"                          exists\n"
		"      --check-config      check the configuration (without opening images or\n"
		"                          sockets) and exit: 0 if good, 2 if not\n"
		"      --allow-degraded    serve the ioDimms that open when some do not (default:\n"
		"                          refuse to start unless every one opens)\n"
		"  -s, --state-dir DIR     NAND images and sockets (default ./var in the checkout,\n"
		"                          else /var/lib/flashd)\n"
		"  -l, --listen HOST:PORT  NBD on TCP; repeatable; IPv6 as [ADDR]:PORT; :PORT for\n"
		"                          every address, IPv6 and IPv4 (default 127.0.0.1:10809)\n"
		"                          HOST:PORT' tls=MODE': that listener's TLS mode\n"
		"  -u, --unix PATH         NBD on a unix socket too (default STATE_DIR/flashd.sock)\n"
		"      --tls off|allowed|required\n"
		"                          STARTTLS on every listener: off (default), allowed\n"
		"                          (the client chooses), required (nothing without TLS)\n"
		"      --unix-tls MODE     the unix socket's TLS mode (default: --tls)\n"
		"      --tls-certificates DIR\n"
		"                          server-cert.pem, server-key.pem, ca-cert.pem [ca-crl.pem]\n"
		"      --tls-psk FILE      pre-shared keys, identity:hexkey per line (psktool)\n"
		"      --tls-verify-peer   require a client certificate signed by ca-cert.pem\n"
		"      --control PATH      control socket (default STATE_DIR/flashd.ctl)\n"
		"  -p, --preset NAME       preset of the default card's ioDimms (iodimm-mlc-320)\n"
		"      --timing on|off     NAND timing model of the simulated media (default on)\n"
		"      --poll-us N         after a request, poll N us before sleeping (default 50;\n"
		"                          0: always sleep; saves a wake-up per request at low depth)\n"
		"      --shutdown-timeout N\n"
		"                          on SIGTERM, close the connections still open after\n"
		"                          N s, dropping their replies (default 10)\n"
		"  -f, --foreground        do not fork; log to stderr\n"
		"  -P, --pidfile FILE      write the pid there\n"
		"      --syslog            log to syslog\n"
		"  -v, --verbose           more logging (per-option negotiation detail)\n"
		"  -V, --version\n"
		"Command-line options win over the file.  Management: flashctl (status, attach,\n"
		"detach, format, checkpoint, stats --live) over the control socket.\n");
}

/* ---- helpers ------------------------------------------------------------ */

struct dimm *server_find_dimm_by_export(struct server *s, const char *name, size_t len)
{
	for (int i = 0; i < s->ndimms; i++) {
		struct dimm *d = &s->dimms[i];
		if (strlen(d->cfg->export_name) == len && !memcmp(d->cfg->export_name, name, len))
			return d;
	}
	return NULL;
}

struct dimm *server_find_export(struct server *s, const char *name, size_t len)
{
	if (len == 0) {
		const char *def = s->cfg.default_export;
		return def ? server_find_dimm_by_export(s, def, strlen(def)) : NULL;
	}
	return server_find_dimm_by_export(s, name, len);
}

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

static void addr_tab_free(struct server *s)
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

static char *default_state_dir(void)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *dir = dirname(exe);          /* .../build */
		char probe[4200];
		snprintf(probe, sizeof probe, "%s/../server/main.c", dir);
		if (access(probe, F_OK) == 0) {
			char path[4200];
			snprintf(path, sizeof path, "%s/../var", dir);
			char *real = realpath(dir, NULL);
			if (real) {
				snprintf(path, sizeof path, "%s/var", dirname(real));
				char *p = strdup(path);
				free(real);
				return p;
			}
			return strdup(path);
		}
	}
	return strdup("/var/lib/flashd");
}

static int mkdir_p(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	}
	if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* ---- listeners ---------------------------------------------------------- */

/*
 * Accept back-off.  When accept fails (out of descriptors: EMFILE, ENFILE;
 * out of memory: ENOBUFS, ENOMEM; or anything else) the listening socket
 * stays readable, so retrying at once would spin: the listener is disabled
 * and its timer enables it again after BACKOFF_FIRST_MS, doubling up to
 * BACKOFF_MAX_MS while accept keeps failing.  Clients meanwhile wait in the
 * kernel's backlog.  An episode ends once accepting has gone BACKOFF_MAX_MS
 * without a failure (the same timer checks): one warning when it begins
 * (and a reminder every BACKOFF_REMIND_S), one line when it ends, nothing
 * per attempt.
 */
#define BACKOFF_FIRST_MS 50
#define BACKOFF_MAX_MS 1000
#define BACKOFF_REMIND_S 60

struct listener {
	struct server *srv;
	struct evconnlistener *evl;
	struct event *retry;        /* re-enables evl, then ends the episode */
	bool owned;                 /* listener_close frees evl too */
	char name[128];
	unsigned backoff_ms;        /* 0: accepting normally */
	bool probing;               /* enabled again, no failure since */
	unsigned long retries;      /* failed attempts in this episode */
	uint64_t since_ns, last_log_ns;
	struct listener *next;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;
	if (l->probing) {
		/* BACKOFF_MAX_MS accepting without a failure: over */
		log_info("%s: accepting again after %.1f s (%lu retries)", l->name,
			 (double)(mono_ns() - l->since_ns) / 1e9, l->retries);
		l->backoff_ms = 0;
		l->probing = false;
		return;
	}
	l->probing = true;
	evconnlistener_enable(l->evl);
	struct timeval tv = { BACKOFF_MAX_MS / 1000, BACKOFF_MAX_MS % 1000 * 1000 };
	evtimer_add(l->retry, &tv);
}

static void accept_error_cb(struct evconnlistener *evl, void *arg)
{
	int e = EVUTIL_SOCKET_ERROR();
	struct listener *l = srv.listeners;
	while (l && l->evl != evl)
		l = l->next;
	if (!l) {
		log_err("accept: %s", evutil_socket_error_to_string(e));
		return;
	}
	uint64_t now = mono_ns();
	if (!l->backoff_ms) {
		char extra[160] = "";
		if (e == EMFILE || e == ENFILE) {
			struct rlimit rl;
			getrlimit(RLIMIT_NOFILE, &rl);
			pthread_mutex_lock(&srv.lock);
			int n = srv.nconns;
			pthread_mutex_unlock(&srv.lock);
			snprintf(extra, sizeof extra, " (%d connections open, descriptor limit %llu)", n,
				 (unsigned long long)rl.rlim_cur);
		}
		log_warn("%s: accept failed: %s%s; pausing accepts, retrying every %d ms to %d ms "
			 "while it lasts", l->name, evutil_socket_error_to_string(e), extra,
			 BACKOFF_FIRST_MS, BACKOFF_MAX_MS);
		l->backoff_ms = BACKOFF_FIRST_MS;
		l->retries = 0;
		l->since_ns = l->last_log_ns = now;
	} else {
		l->retries++;
		l->backoff_ms = l->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : l->backoff_ms * 2;
		if (now - l->last_log_ns >= BACKOFF_REMIND_S * 1000000000ull) {
			log_warn("%s: accept still failing after %.0f s (%lu retries): %s", l->name,
				 (double)(now - l->since_ns) / 1e9, l->retries,
				 evutil_socket_error_to_string(e));
			l->last_log_ns = now;
		}
	}
	l->probing = false;
	evconnlistener_disable(evl);
	struct timeval tv = { 0, (suseconds_t)l->backoff_ms * 1000 };
	evtimer_add(l->retry, &tv);
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
static void waiting_drop_all(void)
{
	for (int pool = 0; pool < NPOOLS; pool++) {
		while (waiting[pool])
			waiting_close(pool, &waiting[pool], NULL);
		if (wait_ev[pool])
			event_free(wait_ev[pool]);
		wait_ev[pool] = NULL;
	}
}

static void accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *arg)
{
	char peer[96] = "unix";
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
		snprintf(peer, sizeof peer, "%s:%u", a, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *in = (struct sockaddr_in6 *)sa;
		char a[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof a);
		snprintf(peer, sizeof peer, "[%s]:%u", a, ntohs(in->sin6_port));
	} else {
		static unsigned long unix_seq;
		snprintf(peer, sizeof peer, "unix#%lu", ++unix_seq);
	}
	if (sa->sa_family != AF_UNIX) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	struct conn_slot slot = { .per_addr = false };
	if (sa->sa_family == AF_INET) {
		/* as IPv4-mapped IPv6: one count whatever the listener */
		slot.addr[10] = slot.addr[11] = 0xff;
		memcpy(slot.addr + 12, &((struct sockaddr_in *)sa)->sin_addr, 4);
		slot.per_addr = true;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 = &((struct sockaddr_in6 *)sa)->sin6_addr;
		memcpy(slot.addr, a6, 16);
		/* IPv6 per /64: a host usually has a whole /64 to pick from */
		if (!IN6_IS_ADDR_V4MAPPED(a6))
			memset(slot.addr + 8, 0, 8);
		slot.per_addr = true;
	}
	/* a connection slot first, then a handshake slot, at once or in the
	 * waiting room (flashd.h, "connection slots") */
	const char *why = conn_take(&slot);
	if (why) {
		nbd_refused(peer, why);
		close(fd);
		return;
	}
	waiting_add(fd, peer, (int)(intptr_t)arg, &slot);
}

struct listener *listener_watch(struct server *s, struct evconnlistener *evl, const char *name,
				bool owned)
{
	struct listener *l = calloc(1, sizeof *l);
	if (l)
		l->retry = evtimer_new(s->base, retry_cb, l);
	if (!l || !l->retry) {
		free(l);
		return NULL;
	}
	l->srv = s;
	l->evl = evl;
	l->owned = owned;
	snprintf(l->name, sizeof l->name, "%s", name);
	evconnlistener_set_error_cb(evl, accept_error_cb);
	l->next = s->listeners;
	s->listeners = l;
	return l;
}

void listener_close(struct listener *l)
{
	struct listener **pp = &l->srv->listeners;
	while (*pp != l)
		pp = &(*pp)->next;
	*pp = l->next;
	event_free(l->retry);
	if (l->owned)
		evconnlistener_free(l->evl);
	free(l);
}

static int add_listener(struct evconnlistener *evl, const char *name)
{
	if (!evl)
		return -1;
	if (!listener_watch(&srv, evl, name, true)) {
		evconnlistener_free(evl);
		return -1;
	}
	return 0;
}

/*
 * ":PORT": every address, IPv6 and IPv4, on one socket (IPV6_V6ONLY off,
 * whatever net.ipv6.bindv6only says; IPv4 clients come as ::ffff:a.b.c.d
 * and count as IPv4 everywhere), or 0.0.0.0 where the host has no IPv6.
 * The listening socket, or -errno.
 */
static int bind_dual_stack(uint16_t port, const char **what)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(port),
				   .sin6_addr = IN6ADDR_ANY_INIT };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, zero = 0, e;
	*what = "every address, IPv6 and IPv4";
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0 && (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0 ||
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
			bind(fd, (struct sockaddr *)&a6, sizeof a6) < 0)) {
		e = errno;
		close(fd);
		if (e != EADDRNOTAVAIL && e != EAFNOSUPPORT)
			return -e;
		fd = -1;
	} else if (fd < 0 && errno != EAFNOSUPPORT) {
		return -errno;
	}
	if (fd < 0) {
		/* no IPv6 on this host */
		*what = "every IPv4 address (no IPv6 here)";
		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
		    bind(fd, (struct sockaddr *)&a4, sizeof a4) < 0) {
			e = errno;
			close(fd);
			return -e;
		}
	}
	if (listen(fd, 128) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static int listen_tcp(const char *fullspec, char *err, size_t errlen)
{
	char host[256], spec[300];
	const char *port;
	int mode;
	if (listen_split(fullspec, spec, sizeof spec, &mode, err, errlen))
		return -EINVAL;
	if (mode < 0)
		mode = srv.cfg.tls;
	if (spec[0] == '[') {
		const char *e = strchr(spec, ']');
		if (!e || e[1] != ':') {
			snprintf(err, errlen, "bad listen address '%s' (IPv6: [ADDR]:PORT)", spec);
			return -EINVAL;
		}
		snprintf(host, sizeof host, "%.*s", (int)(e - spec - 1), spec + 1);
		port = e + 2;
	} else {
		const char *c = strrchr(spec, ':');
		if (!c) {
			snprintf(err, errlen, "bad listen address '%s' (HOST:PORT)", spec);
			return -EINVAL;
		}
		snprintf(host, sizeof host, "%.*s", (int)(c - spec), spec);
		port = c + 1;
	}
	if (!host[0]) {
		/* config.c checked the port */
		const char *what;
		int fd = bind_dual_stack((uint16_t)atoi(port), &what);
		if (fd < 0) {
			snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(-fd));
			return fd;
		}
		struct evconnlistener *l = evconnlistener_new(srv.base, accept_cb, (void *)(intptr_t)mode,
							      LEV_OPT_CLOSE_ON_FREE, -1, fd);
		if (!l)
			close(fd);
		if (add_listener(l, spec) < 0) {
			snprintf(err, errlen, "cannot listen on %s: out of memory", spec);
			return -ENOMEM;
		}
		log_info("listening on %s (%s)%s%s", spec, what, mode != TLS_OFF ? ", TLS " : "",
			 mode != TLS_OFF ? tls_mode_name(mode) : "");
		return 0;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "listen address '%s': %s", spec, gai_strerror(rc));
		return -EINVAL;
	}
	int made = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		struct evconnlistener *l = evconnlistener_new_bind(
			srv.base, accept_cb, (void *)(intptr_t)mode,
			LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
			ai->ai_addr, (int)ai->ai_addrlen);
		if (!l) {
			int e = errno ? errno : EADDRINUSE;
			snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(e));
			freeaddrinfo(res);
			return -e;
		}
		if (add_listener(l, spec) < 0) {
			snprintf(err, errlen, "cannot listen on %s: out of memory", spec);
			freeaddrinfo(res);
			return -ENOMEM;
		}
		made++;
	}
	freeaddrinfo(res);
	log_info("listening on %s%s%s", spec, mode != TLS_OFF ? ", TLS " : "",
		 mode != TLS_OFF ? tls_mode_name(mode) : "");
	return made ? 0 : -EINVAL;
}

static int listen_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "unix socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			return -EEXIST;
		}
		unlink(path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	int prc = socket_perms(path, "unix socket", srv.cfg.unix_mode, srv.cfg.unix_gid, err, errlen);
	if (prc) {
		close(fd);
		return prc;
	}
	struct evconnlistener *l = evconnlistener_new(srv.base, accept_cb, (void *)(intptr_t)srv.cfg.unix_tls,
						      LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!l)
		close(fd);
	if (add_listener(l, path) < 0) {
		snprintf(err, errlen, "cannot listen on %s", path);
		return -ENOMEM;
	}
	log_info("listening on %s%s%s", path, srv.cfg.unix_tls != TLS_OFF ? ", TLS " : "",
		 srv.cfg.unix_tls != TLS_OFF ? tls_mode_name(srv.cfg.unix_tls) : "");
	return 0;
}

/* The unix and control sockets: group first, then the mode (bind made the
 * file under the umask, 077 by default: nobody else could use it before). */
int socket_perms(const char *path, const char *what, int mode, long gid, char *err, size_t errlen)
{
	if (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s %s: cannot give it group %ld: %s%s", what, path, gid, strerror(e),
			 e == EPERM ? " (flashd's user must be a member of that group, or root)" : "");
		return -e;
	}
	if (chmod(path, (mode_t)mode) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s %s: cannot set mode %04o: %s", what, path, mode, strerror(e));
		return -e;
	}
	return 0;
}

/* ---- descriptor limit --------------------------------------------------- */

/* Every connection holds a descriptor: lift the soft limit to the hard one
 * (flashd uses no select(), so any number is fine). */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the descriptor limit to %llu: %s",
				 (unsigned long long)rl.rlim_max, strerror(errno));
	}
}

static int open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	if (!dir)
		return 64; /* a guess on the safe side */
	int n = 0;
	for (struct dirent *e; (e = readdir(dir));)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* the directory's own */
}

/* Once everything is open: can max_connections be met?  If not, accepting
 * will fail with EMFILE at some point (and back off: accept_error_cb). */
static void check_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return;
	/* a descriptor per connection, a few for control clients */
	uint64_t used = (uint64_t)open_fds(), need = used + (uint64_t)srv.cfg.max_connections + 8;
	if (rl.rlim_cur >= need)
		return;
	log_warn("the descriptor limit (%llu, hard %llu) is below what max_connections = %d needs "
		 "(about %llu): beyond about %llu connections, new clients wait until others leave; "
		 "raise the limit (ulimit -n, LimitNOFILE=) or lower max_connections",
		 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
		 srv.cfg.max_connections, (unsigned long long)need,
		 (unsigned long long)(rl.rlim_cur > used ? rl.rlim_cur - used : 0));
}

/* ---- shutdown ----------------------------------------------------------- */

static void shutdown_server(void)
{
	if (srv.shutting_down)
		return;
	srv.shutting_down = true;
	log_info("shutting down: finishing requests in flight (for at most %d s), writing checkpoints",
		 srv.cfg.shutdown_timeout);
	sd_notify(0, "STOPPING=1");
	/* the NBD listeners; the control socket's goes with ctl_stop */
	for (struct listener *l = srv.listeners, *next; l; l = next) {
		next = l->next;
		if (l->owned)
			listener_close(l);
	}
	if (srv.cfg.unix_path)
		unlink(srv.cfg.unix_path);
	waiting_drop_all();
	handshake_shutdown_all(&srv);
	for (int i = 0; i < srv.ndimms; i++)
		dimm_stop(&srv.dimms[i]);
	/* bounded: each ioDimm force-closes its connections after
	 * shutdown_timeout, then closes its FTL (checkpoint) */
	for (int i = 0; i < srv.ndimms; i++)
		dimm_join(&srv.dimms[i]);
	/* answers what waited for the ioDimms, then ends the loop once the
	 * replies are out */
	ctl_shutdown(&srv);
}

/* ---- reload ------------------------------------------------------------- */

/*
 * Descriptions replaced by a reload.  An ioDimm thread may be reading the
 * old one (dimm_describe, while it opens), so they are freed only at exit.
 */
static char **retired;
static int nretired;

static void retire(char *p)
{
	if (!p)
		return;
	char **n = realloc(retired, (size_t)(nretired + 1) * sizeof *retired);
	if (!n)
		return; /* leaked: better than freed under a reader */
	retired = n;
	retired[nretired++] = p;
}

void reload_item(struct reload_result *r, bool applied, const char *key, const char *fmt, ...)
{
	struct reload_item **list = applied ? &r->applied : &r->not_applied;
	int *n = applied ? &r->napplied : &r->nnot_applied;
	struct reload_item *l = realloc(*list, (size_t)(*n + 1) * sizeof **list);
	if (!l)
		return;
	*list = l;
	struct reload_item *it = &l[(*n)++];
	va_list ap;
	va_start(ap, fmt);
	snprintf(it->key, sizeof it->key, "%s", key);
	vsnprintf(it->msg, sizeof it->msg, fmt, ap);
	va_end(ap);
	if (applied)
		log_info("reload: %s: %s", it->key, it->msg);
	else
		log_warn("reload: %s: %s", it->key, it->msg);
}

void reload_result_free(struct reload_result *r)
{
	free(r->applied);
	free(r->not_applied);
	r->applied = r->not_applied = NULL;
	r->napplied = r->nnot_applied = 0;
}

static const char *show(const char *s)
{
	return s ? s : "(unset)";
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static const char *show_tri(int v)
{
	return v < 0 ? "(unset)" : v ? "yes" : "no";
}

static void join_listen(const struct server_cfg *c, char *buf, size_t len)
{
	buf[0] = 0;
	for (int i = 0; i < c->nlisten; i++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? ", " : "", c->listen[i]);
	if (!c->nlisten)
		snprintf(buf, len, "(none)");
}

#define RESTART "needs a restart (the running value is kept)"

/* A string key that cannot change while running. */
static void cmp_str(struct reload_result *r, const char *key, const char *was, const char *now)
{
	if (!same_str(was, now))
		reload_item(r, false, key, "'%s' -> '%s': " RESTART, show(was), show(now));
}

static void cmp_int(struct reload_result *r, const char *key, long was, long now)
{
	if (was != now)
		reload_item(r, false, key, "%ld -> %ld: " RESTART, was, now);
}

/* Count of entries of acl, as "N rule(s)" or "none (open)". */
static void show_acl(const struct acl *acl, char *buf, size_t len)
{
	if (acl->n)
		snprintf(buf, len, "%d rule(s)", acl->n);
	else
		snprintf(buf, len, "none (no restriction)");
}

/*
 * What differs between ioDimm a (running) and b (the file now).  Access
 * rules (allow, allow_ro, list_denied) are applied: b's rules move into a
 * and a's old ones into b, which the caller frees.  Only the main thread
 * reads them (handshake.c decides each option against d->cfg->acl when it
 * arrives), so the next option of any handshake uses the new rules;
 * connections already handed to their ioDimm keep the access they got.
 */
static void reload_dimm(struct reload_result *r, struct dimm_cfg *a, struct dimm_cfg *b)
{
	char key[160];
#define K(k_) (snprintf(key, sizeof key, "[dimm %s] %s", a->name, k_), key)
	if (!same_str(a->description, b->description)) {
		/* read by the main thread's handshakes and an opening ioDimm
		 * thread (dimm_describe): the old string is kept (retire) */
		char *old = a->description;
		char *nd = b->description ? strdup(b->description) : NULL;
		if (b->description && !nd) {
			reload_item(r, false, K("description"), "out of memory");
		} else {
			__atomic_store_n(&a->description, nd, __ATOMIC_RELEASE);
			reload_item(r, true, K("description"), "'%s' -> '%s' (new handshakes and export lists)",
				    show(old), show(nd));
			retire(old);
		}
	}
	cmp_str(r, K("card"), a->card, b->card);
	cmp_str(r, K("export"), a->export_name, b->export_name);
	cmp_str(r, K("backend"), a->backend, b->backend);
	cmp_str(r, K("preset"), a->preset, b->preset);
	cmp_str(r, K("image"), a->image, b->image);
	if (a->readonly != b->readonly)
		reload_item(r, false, K("readonly"), "%s -> %s: " RESTART, a->readonly ? "yes" : "no",
			    b->readonly ? "yes" : "no");
	if (a->sector_size != b->sector_size || a->sector_size_set != b->sector_size_set)
		reload_item(r, false, K("sector_size"), "%s%u -> %s%u: " RESTART " (a different format "
			    "also needs flashctl format)", a->sector_size_set ? "" : "unset, ", a->sector_size,
			    b->sector_size_set ? "" : "unset, ", b->sector_size);
	if (a->capacity != b->capacity || a->capacity_pct != b->capacity_pct ||
	    a->op_percent != b->op_percent || a->capacity_set != b->capacity_set)
		reload_item(r, false, K("capacity/op"), "changed: " RESTART " (a different format also "
			    "needs flashctl format)");
	if (a->parity_width != b->parity_width || a->parity_set != b->parity_set)
		reload_item(r, false, K("parity_width"), "%u -> %u: " RESTART " (a different format "
			    "also needs flashctl format)", a->parity_width, b->parity_width);
	cmp_int(r, K("timing"), a->timing, b->timing);
	cmp_int(r, K("sync"), a->sync, b->sync);
	cmp_int(r, K("checkpoint_interval"), (long)a->cp_interval, (long)b->cp_interval);
	cmp_int(r, K("flush_parity"), !a->no_flush_parity, !b->no_flush_parity);
	if (a->tls != b->tls)
		reload_item(r, false, K("tls"), "%s -> %s: " RESTART, tls_mode_name(a->tls),
			    tls_mode_name(b->tls));
	if (!acl_equal(&a->acl, &b->acl)) {
		char was[40], now[40];
		struct acl old = a->acl;

		show_acl(&a->acl, was, sizeof was);
		show_acl(&b->acl, now, sizeof now);
		a->acl = b->acl;
		b->acl = old;
		a->acl_cert_line = b->acl_cert_line;
		a->acl_psk_line = b->acl_psk_line;
		a->acl_tls_line = b->acl_tls_line;
		reload_item(r, true, K("allow/allow_ro"), "%s -> %s (new handshakes; open connections "
			    "keep their access)", was, now);
	}
	if (a->list_denied != b->list_denied) {
		reload_item(r, true, K("list_denied"), "%s -> %s (new export lists)",
			    a->list_denied ? "yes" : "no", b->list_denied ? "yes" : "no");
		a->list_denied = b->list_denied;
	}
#undef K
}

/* swap *a and *b (a string moves into the running configuration, the old
 * one into the file's, which the caller frees) */
static void swap_str(char **a, char **b)
{
	char *t = *a;
	*a = *b;
	*b = t;
}

/*
 * TLS key files (tls_certificates, tls_psk): read again when their names
 * or contents changed (tls_reload); new handshakes use them, open sessions
 * keep theirs.  Files that do not load leave the running keys in force.
 */
static void reload_tls(struct reload_result *r, struct server_cfg *o, struct server_cfg *n)
{
	char err[1200];
	int rc = tls_reload(n, o->tls_verify_peer, err, sizeof err);
	if (rc < 0) {
		log_err("reload: TLS keys: %s; the running keys stay in force", err);
		reload_item(r, false, "[server] tls keys", "%s: the running keys stay in force", err);
		return;
	}
	if (rc == 0)
		return;
	reload_item(r, true, "[server] tls keys", "%s%s%s%s read again (new handshakes use them; open "
		    "sessions keep theirs)", n->tls_certificates ? "certificates " : "",
		    n->tls_certificates ? n->tls_certificates : "",
		    n->tls_psk ? (n->tls_certificates ? ", PSK file " : "PSK file ") : "",
		    n->tls_psk ? n->tls_psk : "");
	swap_str(&o->tls_certificates, &n->tls_certificates);
	swap_str(&o->tls_certificates_where, &n->tls_certificates_where);
	swap_str(&o->tls_psk, &n->tls_psk);
	swap_str(&o->tls_psk_where, &n->tls_psk_where);
}

/*
 * Main thread.  See flashd.h, "Reload".  Applied live: per-ioDimm
 * description, verbose, max_connections, max_connections_per_address,
 * max_handshakes, max_handshakes_per_address, idle_timeout,
 * idle_timeout_busy, buffer_limit, default_export, handshake_timeout (new
 * handshakes), shutdown_timeout and poll_us (read by the ioDimm threads:
 * atomic stores of ints), per-ioDimm allow, allow_ro and list_denied
 * (reload_dimm), the TLS key files (reload_tls).  Everything else that
 * differs is reported.
 */
void server_reload(struct server *s, const char *why, struct reload_result *r)
{
	memset(r, 0, sizeof *r);
	struct server_cfg *o = &s->cfg, n;
	char err[1100];
	if (!o->config_file) {
		r->rc = -ENOENT;
		snprintf(r->error, sizeof r->error, "flashd runs without a configuration file "
			 "(the embedded default): nothing to reload");
		log_warn("%s: reload: %s", why, r->error);
		return;
	}
	snprintf(r->config, sizeof r->config, "%s", o->config_file);
	sd_notifyf(0, "RELOADING=1\nSTATUS=reloading %s\nMONOTONIC_USEC=%llu", o->config_file,
		   (unsigned long long)(mono_ns() / 1000));
	log_info("%s: reloading %s", why, o->config_file);
	if (config_build(&cli_cfg, o->config_file, fallback_state_dir, &n, err, sizeof err)) {
		r->rc = -EINVAL;
		snprintf(r->error, sizeof r->error, "%s", err);
		log_err("reload: %s; nothing changed, the running configuration is kept", err);
		goto out;
	}
	char a[2048], b[2048];
	join_listen(o, a, sizeof a);
	join_listen(&n, b, sizeof b);
	if (strcmp(a, b))
		reload_item(r, false, "[server] listen", "%s -> %s: " RESTART, a, b);
	cmp_str(r, "[server] unix", o->unix_path, n.unix_path);
	cmp_str(r, "[server] control", o->control_path, n.control_path);
	cmp_str(r, "[server] state_dir", o->state_dir, n.state_dir);
	cmp_str(r, "[server] pidfile", o->pidfile, n.pidfile);
	if (o->use_syslog != n.use_syslog)
		reload_item(r, false, "[server] log", "%s -> %s: " RESTART, o->use_syslog ? "syslog" : "stderr",
			    n.use_syslog ? "syslog" : "stderr");
	cmp_int(r, "[server] timing", o->timing, n.timing);
	cmp_int(r, "[server] fault_injection", o->fault_injection, n.fault_injection);
	if (o->allow_degraded != n.allow_degraded)
		reload_item(r, false, "[server] allow_degraded", "%s -> %s: used at start-up only, "
			    "takes effect at the next start", show_tri(o->allow_degraded),
			    show_tri(n.allow_degraded));
	if (o->tls != n.tls)
		reload_item(r, false, "[server] tls", "%s -> %s: " RESTART, tls_mode_name(o->tls),
			    tls_mode_name(n.tls));
	if (o->unix_tls != n.unix_tls)
		reload_item(r, false, "[server] unix_tls", "%s -> %s: " RESTART, tls_mode_name(o->unix_tls),
			    tls_mode_name(n.unix_tls));
	reload_tls(r, o, &n);
	cmp_int(r, "[server] unix_mode", o->unix_mode, n.unix_mode);
	cmp_int(r, "[server] unix_group", o->unix_gid, n.unix_gid);
	cmp_int(r, "[server] control_mode", o->control_mode, n.control_mode);
	cmp_int(r, "[server] control_group", o->control_gid, n.control_gid);
	cmp_int(r, "[server] umask", o->umask, n.umask);
	if (o->tls_verify_peer != n.tls_verify_peer)
		reload_item(r, false, "[server] tls_verify_peer", "%s -> %s: " RESTART,
			    show_tri(o->tls_verify_peer), show_tri(n.tls_verify_peer));
	/* ioDimms by [dimm] name */
	for (int i = 0; i < o->ndimms; i++) {
		struct dimm_cfg *m = NULL;
		for (int j = 0; j < n.ndimms && !m; j++)
			if (!strcmp(n.dimms[j].name, o->dimms[i].name))
				m = &n.dimms[j];
		char key[160];
		snprintf(key, sizeof key, "[dimm %s]", o->dimms[i].name);
		if (!m)
			reload_item(r, false, key, "removed from the file: removing an ioDimm needs a restart "
				    "(it is still served; flashctl detach stops serving it now)");
		else
			reload_dimm(r, &o->dimms[i], m);
	}
	for (int j = 0; j < n.ndimms; j++) {
		bool known = false;
		for (int i = 0; i < o->ndimms && !known; i++)
			known = !strcmp(n.dimms[j].name, o->dimms[i].name);
		char key[160];
		snprintf(key, sizeof key, "[dimm %s]", n.dimms[j].name);
		if (!known)
			reload_item(r, false, key, "new in the file: adding an ioDimm needs a restart");
	}
	/* live limits and the log level */
	if (o->verbose != n.verbose) {
		reload_item(r, true, "[server] verbose", "%s -> %s", o->verbose ? "yes" : "no",
			    n.verbose ? "yes" : "no");
		o->verbose = n.verbose;
		__atomic_store_n(&log_verbose, n.verbose, __ATOMIC_RELAXED);
	}
	if (o->max_connections != n.max_connections) {
		reload_item(r, true, "[server] max_connections", "%d -> %d (open connections stay; new "
			    "ones are refused while that many are open)", o->max_connections, n.max_connections);
		pthread_mutex_lock(&s->lock);
		o->max_connections = n.max_connections;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->max_conn_per_addr != n.max_conn_per_addr) {
		reload_item(r, true, "[server] max_connections_per_address", "%d -> %d (open connections "
			    "stay; new ones from an address are refused while it has that many open)",
			    o->max_conn_per_addr, n.max_conn_per_addr);
		pthread_mutex_lock(&s->lock);
		o->max_conn_per_addr = n.max_conn_per_addr;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->max_handshakes != n.max_handshakes) {
		reload_item(r, true, "[server] max_handshakes", "%d -> %d (connections in handshake "
			    "stay; newcomers wait or make room while that many are)", o->max_handshakes,
			    n.max_handshakes);
		pthread_mutex_lock(&s->lock);
		o->max_handshakes = n.max_handshakes;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->max_hs_per_addr != n.max_hs_per_addr) {
		reload_item(r, true, "[server] max_handshakes_per_address", "%d -> %d (new connections)",
			    o->max_hs_per_addr, n.max_hs_per_addr);
		pthread_mutex_lock(&s->lock);
		o->max_hs_per_addr = n.max_hs_per_addr;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->idle_timeout != n.idle_timeout) {
		reload_item(r, true, "[server] idle_timeout", "%d s -> %d s (0: off)", o->idle_timeout,
			    n.idle_timeout);
		__atomic_store_n(&o->idle_timeout, n.idle_timeout, __ATOMIC_RELAXED);
	}
	if (o->idle_timeout_busy != n.idle_timeout_busy) {
		reload_item(r, true, "[server] idle_timeout_busy", "%d s -> %d s (0: off)",
			    o->idle_timeout_busy, n.idle_timeout_busy);
		__atomic_store_n(&o->idle_timeout_busy, n.idle_timeout_busy, __ATOMIC_RELAXED);
	}
	if (o->buffer_limit != n.buffer_limit) {
		reload_item(r, true, "[server] buffer_limit", "%llu MiB -> %llu MiB (buffers over the new "
			    "limit are given back as their requests finish)",
			    (unsigned long long)(o->buffer_limit >> 20), (unsigned long long)(n.buffer_limit >> 20));
		__atomic_store_n(&o->buffer_limit, n.buffer_limit, __ATOMIC_RELAXED);
	}
	if (!same_str(o->default_export, n.default_export)) {
		/* read by handshakes only, on this thread */
		reload_item(r, true, "[server] default_export", "%s -> %s (new handshakes; the empty "
			    "export name %s)", show(o->default_export), show(n.default_export),
			    n.default_export ? "picks it" : "is refused");
		free(o->default_export);
		o->default_export = n.default_export;
		o->default_export_line = n.default_export_line;
		n.default_export = NULL;
	}
	if (o->handshake_timeout != n.handshake_timeout) {
		reload_item(r, true, "[server] handshake_timeout", "%d s -> %d s (new connections)",
			    o->handshake_timeout, n.handshake_timeout);
		o->handshake_timeout = n.handshake_timeout;
	}
	if (o->shutdown_timeout != n.shutdown_timeout) {
		reload_item(r, true, "[server] shutdown_timeout", "%d s -> %d s", o->shutdown_timeout,
			    n.shutdown_timeout);
		__atomic_store_n(&o->shutdown_timeout, n.shutdown_timeout, __ATOMIC_RELAXED);
	}
	if (o->poll_us != n.poll_us) {
		reload_item(r, true, "[server] poll_us", "%d us -> %d us", o->poll_us, n.poll_us);
		__atomic_store_n(&o->poll_us, n.poll_us, __ATOMIC_RELAXED);
	}
	monitor_reload(s, &n, r);
	log_info("reload of %s done: %d change(s) applied, %d not applied%s", o->config_file,
		 r->napplied, r->nnot_applied, r->nnot_applied ? " (they need a restart)" : "");
	config_free(&n);
out:
	server_update_status(s);
	sd_notify(0, "READY=1");
}

/* ---- signals ------------------------------------------------------------ */

/*
 * SIGTERM, SIGINT and SIGHUP are blocked from the first line of main until
 * their events are on the loop, before the pidfile, a socket or an image is
 * opened; the ioDimm threads keep them blocked (dimm_start), so the main
 * thread's loop takes them.  While starting (until every ioDimm's open
 * result is known) the main thread waits in that loop, so a signal then is
 * taken at once:
 *   SIGTERM, SIGINT  the start stops: an ioDimm whose open has not begun
 *                    is not opened, one that is opening is closed cleanly
 *                    (checkpoint) once open, and flashd exits 0.  An open
 *                    is not cut short (an image being created or formatted
 *                    is never left half-made anyway: nand_open,
 *                    ftl_format).
 *   SIGHUP           remembered: the configuration file is read again
 *                    once flashd is ready (what the file says by then is
 *                    what runs).
 * Main thread only.
 */
static bool starting = true;    /* until the open results are known */
static int stop_signal;         /* the signal that stopped the start */
static bool reload_deferred;    /* SIGHUP while starting */

static const char *signal_name(int sig)
{
	return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	if (starting) {
		if (sig == SIGHUP) {
			if (!reload_deferred && !stop_signal)
				log_info("received SIGHUP while starting: the configuration file is read "
					 "again once flashd is ready");
			reload_deferred = true;
		} else if (!stop_signal) {
			stop_signal = (int)sig;
			log_info("received %s while starting: stopping (ioDimms being opened are closed "
				 "cleanly once open, the others are not opened)", signal_name((int)sig));
			sd_notify(0, "STOPPING=1");
			for (int i = 0; i < srv.ndimms; i++)
				dimm_stop(&srv.dimms[i]);
		}
		return;
	}
	if (sig == SIGHUP) {
		if (srv.shutting_down)
			return;
		struct reload_result r;
		server_reload(&srv, "SIGHUP", &r);
		reload_result_free(&r);
		return;
	}
	log_info("received %s", signal_name((int)sig));
	shutdown_server();
}

/* Is every ioDimm's start-up open result known? */
static bool opens_known(void)
{
	for (int i = 0; i < srv.ndimms; i++)
		if (!dimm_ready(&srv.dimms[i], NULL))
			return false;
	return true;
}

/* An ioDimm thread has its open result (it activates srv.start_ev): once
 * all have, the start-up loop ends.  (An activation that comes after the
 * main thread saw every result is run by the serving loop: nothing to do.) */
static void open_result_cb(evutil_socket_t fd, short what, void *arg)
{
	if (starting && opens_known())
		event_base_loopbreak(srv.base);
}

/* ---- daemon ------------------------------------------------------------- */

/*
 * Without --foreground flashd forks; the parent (the command the admin or
 * an init script ran) exits only once the start's result is known, with
 * the same meaning as READY=1 for systemd (Type=notify): 0 once flashd is
 * ready (every ioDimm open, or with --allow-degraded those that opened:
 * the warnings for the others were on stderr), else the child's exit
 * status (1: the start failed, its reasons on stderr; 0: a signal stopped
 * it), or 1 if it died.  ready_fd: the child's end of the pipe, -1 once
 * ready (or in the foreground).
 */
static int ready_fd = -1;

static int daemon_wait(pid_t pid, int fd)
{
	char c;
	ssize_t n;
	while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n == 1)
		return 0; /* ready: the child serves on */
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			fprintf(stderr, "flashd: waiting for the daemon: %s\n", strerror(errno));
			return 1;
		}
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	fprintf(stderr, "flashd: the daemon was killed by signal %d before it was ready\n",
		WTERMSIG(st));
	return 1;
}

/* The child is ready: let the parent exit 0; its stderr to /dev/null. */
static void daemon_ready(void)
{
	if (ready_fd < 0)
		return;
	if (write(ready_fd, "r", 1) != 1)
		log_warn("cannot tell the parent process that flashd is ready: %s", strerror(errno));
	close(ready_fd);
	ready_fd = -1;
	log_also_stderr(false);
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 2);
		close(nul);
	}
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, 0, 'c' },
		{ "state-dir", required_argument, 0, 's' },
		{ "listen", required_argument, 0, 'l' },
		{ "unix", required_argument, 0, 'u' },
		{ "control", required_argument, 0, 'C' },
		{ "preset", required_argument, 0, 'p' },
		{ "timing", required_argument, 0, 'T' },
		{ "poll-us", required_argument, 0, 'O' },
		{ "shutdown-timeout", required_argument, 0, 'D' },
		{ "foreground", no_argument, 0, 'f' },
		{ "pidfile", required_argument, 0, 'P' },
		{ "syslog", no_argument, 0, 'S' },
		{ "verbose", no_argument, 0, 'v' },
		{ "version", no_argument, 0, 'V' },
		{ "help", no_argument, 0, 'h' },
		{ "allow-degraded", no_argument, 0, 'A' },
		{ "check-config", no_argument, 0, 'K' },
		{ "no-config", no_argument, 0, 'N' },
		{ "tls", required_argument, 0, 1001 },
		{ "unix-tls", required_argument, 0, 1002 },
		{ "tls-certificates", required_argument, 0, 1003 },
		{ "tls-psk", required_argument, 0, 1004 },
		{ "tls-verify-peer", no_argument, 0, 1005 },
		{ 0, 0, 0, 0 },
	};
	struct server_cfg cli = { .timing = -1, .fault_injection = -1, .poll_us = -1,
				  .allow_degraded = -1, .tls = -1,
				  .unix_tls = -1, .tls_verify_peer = -1,
				  .unix_mode = -1, .control_mode = -1, .umask = -1, .unix_gid = -1,
				  .control_gid = -1, .max_conn_per_addr = -1, .max_hs_per_addr = -1,
				  .idle_timeout_busy = -1 };
	/* A fixed mmap threshold (which also stops glibc from raising it after
	 * the first large free): every block of 128 KiB or more - request
	 * buffers, input buffers, a control request's large evbuffer chains -
	 * is its own mapping and goes back to the kernel when freed, instead
	 * of staying in the heap after a burst (hostile or not). */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	/* the stop and reload signals wait until their events are on the loop
	 * ("signals" above): none kills a start that has begun */
	sigset_t stop_sigs;
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &stop_sigs, NULL);
	const char *config = NULL;
	bool check_only = false, no_config = false;
	int exit_status = 1; /* of a start undone: failed, or 0 if stopped by a signal */
	char err[1024] = "";
	int c;

	while ((c = getopt_long(argc, argv, "c:s:l:u:p:fP:vVh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 's': cli.state_dir = strdup(optarg); break;
		case 'l':
			cli.listen = realloc(cli.listen, (size_t)(cli.nlisten + 1) * sizeof *cli.listen);
			cli.listen[cli.nlisten++] = strdup(optarg);
			break;
		case 'u': cli.unix_path = strdup(optarg); break;
		case 'C': cli.control_path = strdup(optarg); break;
		case 'p':
			if (!nand_preset_description(optarg)) {
				fprintf(stderr, "flashd: unknown preset '%s'; known presets:\n", optarg);
				for (size_t i = 0; nand_preset_name(i); i++)
					fprintf(stderr, "  %s\n", nand_preset_name(i));
				return 2;
			}
			cli.default_preset = strdup(optarg);
			break;
		case 'T':
			if (!strcmp(optarg, "on"))
				cli.timing = 1;
			else if (!strcmp(optarg, "off"))
				cli.timing = 0;
			else {
				fprintf(stderr, "flashd: --timing takes on or off\n");
				return 2;
			}
			break;
		case 'O': {
			uint64_t v;
			if (parse_uint(optarg, 0, 10000, &v)) {
				fprintf(stderr, "flashd: --poll-us takes 0 to 10000 (microseconds), not '%s'\n",
					optarg);
				return 2;
			}
			cli.poll_us = (int)v;
			break;
		}
		case 'D': {
			uint64_t v;
			if (parse_uint(optarg, 1, 3600, &v)) {
				fprintf(stderr, "flashd: --shutdown-timeout takes 1 to 3600 (seconds), not '%s'\n",
					optarg);
				return 2;
			}
			cli.shutdown_timeout = (int)v;
			break;
		}
		case 'f': cli.foreground = true; break;
		case 'P': cli.pidfile = strdup(optarg); break;
		case 'S': cli.use_syslog = true; break;
		case 'v': cli.verbose++; break;
		case 'V': printf("flashd %s\n", FLASHD_VERSION); return 0;
		case 'A': cli.allow_degraded = 1; break;
		case 'K': check_only = true; break;
		case 'N': no_config = true; break;
		case 1001:
		case 1002: {
			int m = tls_mode_parse(optarg);
			if (m < 0) {
				fprintf(stderr, "flashd: --%s takes off, allowed or required, not '%s'\n",
					c == 1001 ? "tls" : "unix-tls", optarg);
				return 2;
			}
			*(c == 1001 ? &cli.tls : &cli.unix_tls) = m;
			break;
		}
		case 1003:
		case 1004: {
			char w[4200];
			snprintf(w, sizeof w, "--%s '%s'", c == 1003 ? "tls-certificates" : "tls-psk", optarg);
			if (c == 1003) {
				cli.tls_certificates = strdup(optarg);
				cli.tls_certificates_where = strdup(w);
			} else {
				cli.tls_psk = strdup(optarg);
				cli.tls_psk_where = strdup(w);
			}
			break;
		}
		case 1005: cli.tls_verify_peer = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "flashd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}

	if (config && no_config) {
		fprintf(stderr, "flashd: --config and --no-config exclude each other\n");
		return 2;
	}
	if (!config && !no_config && access(DEFAULT_CONFIG, F_OK) == 0)
		config = DEFAULT_CONFIG;

	/* command line first, so it wins over the file (config.c keeps a key
	 * the command line set); cli is kept for SIGHUP's reload */
	fallback_state_dir = default_state_dir();
	cli_cfg = cli;
	if (config_build(&cli_cfg, config, fallback_state_dir, &srv.cfg, err, sizeof err)) {
		fprintf(stderr, "flashd: %s\n", err);
		return 2;
	}
	/* TLS keys are read now: a missing or bad file stops flashd before any
	 * image opens (and --check-config reports it) */
	if (tls_init(&srv.cfg, err, sizeof err)) {
		fprintf(stderr, "flashd: %s\n", err);
		config_free(&srv.cfg);
		return 2;
	}
	handshake_acl_warnings(&srv.cfg);
	if (check_only) {
		printf("flashd: configuration %s is good: %d ioDimm(s)%s\n",
		       srv.cfg.config_file ? srv.cfg.config_file : "(embedded default)", srv.cfg.ndimms,
		       srv.cfg.allow_degraded ? ", degraded start allowed" : "");
		for (int i = 0; i < srv.cfg.ndimms; i++) {
			struct dimm_cfg *d = &srv.cfg.dimms[i];
			if (!strcmp(d->backend, "mtd"))
				printf("  [dimm %s] export '%s', raw NAND device %s%s\n", d->name,
				       d->export_name, d->image, d->readonly ? ", read-only" : "");
			else
				printf("  [dimm %s] export '%s', preset %s, image %s%s\n", d->name,
				       d->export_name, d->preset, d->image, d->readonly ? ", read-only" : "");
		}
		for (int i = 0; i < srv.cfg.nlisten; i++)
			printf("  listen %s\n", srv.cfg.listen[i]);
		if (srv.cfg.unix_path && srv.cfg.unix_path[0])
			printf("  unix socket %s\n", srv.cfg.unix_path);
		printf("  control socket %s\n", srv.cfg.control_path);
		if (tls_available())
			printf("  TLS: %s%s%s%s, default mode %s, unix socket %s\n",
			       srv.cfg.tls_certificates ? "certificates " : "",
			       srv.cfg.tls_certificates ? srv.cfg.tls_certificates : "",
			       srv.cfg.tls_psk ? (srv.cfg.tls_certificates ? ", PSK file " : "PSK file ") : "",
			       srv.cfg.tls_psk ? srv.cfg.tls_psk : "", tls_mode_name(srv.cfg.tls),
			       tls_mode_name(srv.cfg.unix_tls));
		tls_exit();
		config_free(&srv.cfg);
		return 0;
	}
	srv.test_hooks = getenv("FLASHD_TEST_HOOKS") && !strcmp(getenv("FLASHD_TEST_HOOKS"), "1");
	log_init(srv.cfg.use_syslog, srv.cfg.verbose);
	ftl_set_logger(dimm_ftl_log, NULL);

	/* images, the state directory and everything else flashd makes:
	 * 0600 / 0700 by default (umask = in [server]) */
	umask((mode_t)srv.cfg.umask);
	int rc = mkdir_p(srv.cfg.state_dir);
	if (rc) {
		log_err("cannot create state directory %s: %s", srv.cfg.state_dir, strerror(-rc));
		return 1;
	}
	if (!srv.cfg.foreground) {
		/* classic daemon: fork, new session, stdin and stdout to
		 * /dev/null; the parent exits once the start's result is known
		 * (daemon_wait), and till then the child's warnings and errors
		 * also go to the caller's stderr (daemon_ready ends that) */
		int pfd[2];
		if (pipe2(pfd, O_CLOEXEC) < 0) {
			log_err("pipe: %s", strerror(errno));
			return 1;
		}
		pid_t pid = fork();
		if (pid < 0) {
			log_err("fork: %s", strerror(errno));
			return 1;
		}
		if (pid > 0) {
			close(pfd[1]);
			return daemon_wait(pid, pfd[0]);
		}
		close(pfd[0]);
		ready_fd = pfd[1];
		setsid();
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			close(nul);
		}
		if (!srv.cfg.use_syslog)
			log_init(true, srv.cfg.verbose);
		log_also_stderr(true);
	}
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	evthread_use_pthreads();
	pthread_mutex_init(&srv.lock, NULL);
	pthread_mutex_init(&srv.cmd_lock, NULL);
	pthread_mutex_init(&srv.budget_lock, NULL);
	TAILQ_INIT(&srv.budget_q);
	srv.base = event_base_new();
	srv.nbd_refusals = (struct refusal_log){ .what = "connection(s)", .refused = ": refused: " };
	srv.ctl_refusals = (struct refusal_log){ .what = "control request(s)", .refused = " refused: " };
	srv.name_refusals = (struct refusal_log){ .what = "request(s) for an unknown export", .refused = ": " };
	srv.denied_refusals = (struct refusal_log){ .what = "request(s) for an export its access rules deny", .refused = ": " };
	srv.started = time(NULL);
	if (srv.base) {
		srv.cmd_ev = event_new(srv.base, -1, EV_READ, ctl_cmd_done, &srv);
		srv.start_ev = event_new(srv.base, -1, EV_READ, open_result_cb, NULL);
		srv.sig_term = evsignal_new(srv.base, SIGTERM, signal_cb, NULL);
		srv.sig_int = evsignal_new(srv.base, SIGINT, signal_cb, NULL);
		srv.sig_hup = evsignal_new(srv.base, SIGHUP, signal_cb, NULL);
	}
	if (!srv.base || !srv.cmd_ev || !srv.start_ev || !srv.sig_term || !srv.sig_int ||
	    !srv.sig_hup || event_add(srv.sig_term, NULL) || event_add(srv.sig_int, NULL) ||
	    event_add(srv.sig_hup, NULL)) {
		log_err("cannot create the event loop");
		return 1;
	}
	sigprocmask(SIG_UNBLOCK, &stop_sigs, NULL);

	if (srv.cfg.pidfile) {
		pidfile_fd = open(srv.cfg.pidfile, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (pidfile_fd >= 0)
			fchmod(pidfile_fd, 0644); /* readable by all whatever the umask */
		if (pidfile_fd < 0 || flock(pidfile_fd, LOCK_EX | LOCK_NB) < 0) {
			log_err("pidfile %s: %s", srv.cfg.pidfile,
				errno == EWOULDBLOCK ? "another flashd holds it" : strerror(errno));
			return 1;
		}
	}

	/* TCP listeners first: an address that cannot be bound (in use, not on
	 * this host) is reported before any image is opened.  Nothing is
	 * accepted before READY (disabled while the loop waits for the opens
	 * below; clients wait in the backlog).  The unix and control
	 * sockets come after the images: binding them replaces a socket file,
	 * which must not happen to another flashd using the same state
	 * directory (its image locks stop this one first). */
	for (int i = 0; i < srv.cfg.nlisten; i++) {
		if (listen_tcp(srv.cfg.listen[i], err, sizeof err)) {
			log_err("%s", err);
			goto fail_early;
		}
	}
	if (metrics_http_start(&srv, err, sizeof err)) {
		log_err("%s", err);
		goto fail_early;
	}
	for (struct listener *l = srv.listeners; l; l = l->next)
		evconnlistener_disable(l->evl);
	event_base_loop(srv.base, EVLOOP_NONBLOCK); /* a signal that came so far */
	if (stop_signal) {
		exit_status = 0;
		goto fail_early;
	}

	/* ioDimms: each opens its image and FTL on its own thread, in parallel */
	srv.ndimms = srv.cfg.ndimms;
	srv.dimms = calloc((size_t)srv.ndimms, sizeof *srv.dimms);
	for (int i = 0; i < srv.ndimms; i++) {
		struct dimm *d = &srv.dimms[i];
		d->srv = &srv;
		d->cfg = &srv.cfg.dimms[i];
		d->index = i;
		rc = dimm_start(d);
		if (rc) {
			log_err("%s: cannot start its thread: %s", d->cfg->name, strerror(-rc));
			return 1;
		}
	}
	/* every open result is known before READY (flashd.h, "Attach state":
	 * the ready handshake orders d->info and d->size before their use);
	 * meanwhile the loop takes signals ("signals" above) */
	while (!opens_known())
		event_base_dispatch(srv.base);
	starting = false;
	int up = 0;
	for (int i = 0; i < srv.ndimms; i++) {
		struct dimm *d = &srv.dimms[i];
		int orc;
		dimm_ready(d, &orc);
		if (orc == -ECANCELED && stop_signal) {
			log_info("%s: not opened (flashd is stopping)", d->cfg->name);
			d->mstate = DM_FAILED;
		} else if (orc) {
			d->mstate = DM_FAILED;
			if (srv.cfg.allow_degraded)
				log_warn("%s: %s; it is not exported (degraded start allowed; after fixing "
					 "it, 'flashctl attach %s')", d->cfg->name, d->open_errmsg, d->cfg->name);
			else
				log_err("%s: %s", d->cfg->name, d->open_errmsg);
		} else {
			d->mstate = DM_ATTACHED;
			d->exported = true;
			up++;
		}
	}
	if (stop_signal) {
		exit_status = 0;
		goto fail;
	}
	for (struct listener *l = srv.listeners; l; l = l->next)
		evconnlistener_enable(l->evl); /* the TCP ones; accepting once the loop runs */
	if (!up || (up < srv.ndimms && !srv.cfg.allow_degraded)) {
		if (!up)
			log_err("no ioDimm could be opened; exiting");
		else
			log_err("refusing to start: %d of %d ioDimm(s) did not open (--allow-degraded, or "
				"allow_degraded = yes in [server], serves the others)", srv.ndimms - up,
				srv.ndimms);
		goto fail;
	}

	if (srv.cfg.unix_path && srv.cfg.unix_path[0] && listen_unix(srv.cfg.unix_path, err, sizeof err)) {
		log_err("%s", err);
		goto fail;
	}
	if (ctl_start(&srv, err, sizeof err)) {
		log_err("%s", err);
		goto fail;
	}
	if (monitor_start(&srv)) {
		log_err("cannot start the health monitor: out of memory");
		goto fail;
	}

	if (pidfile_fd >= 0) {
		char buf[32];
		int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
		if (ftruncate(pidfile_fd, 0) < 0 || pwrite(pidfile_fd, buf, (size_t)n, 0) != n)
			log_warn("cannot write pidfile %s", srv.cfg.pidfile);
	}
	check_fd_limit();
	if (srv.cfg.fault_injection == 1)
		log_warn("[server] fault_injection = yes: whoever may use the control socket %s can break "
			 "the ioDimms (flashctl inject: dead dies, bad blocks, lost data); set it to no unless "
			 "this is a test", srv.cfg.control_path);
	if (up < srv.ndimms)
		log_warn("flashd %s ready, degraded: serving %d of %d ioDimm(s), control socket %s",
			 FLASHD_VERSION, up, srv.ndimms, srv.cfg.control_path);
	else
		log_info("flashd %s ready: %d ioDimm(s), control socket %s", FLASHD_VERSION, up,
			 srv.cfg.control_path);
	server_update_status(&srv);
	sd_notifyf(0, "READY=1\nMAINPID=%d", (int)getpid());
	daemon_ready();
	if (reload_deferred) {
		struct reload_result r;
		server_reload(&srv, "SIGHUP (received while starting)", &r);
		reload_result_free(&r);
	}

	event_base_dispatch(srv.base);

	if (!srv.shutting_down)
		shutdown_server();
	ctl_stop(&srv);
	monitor_stop(&srv);
	metrics_http_stop(&srv);
	if (srv.cfg.pidfile)
		unlink(srv.cfg.pidfile);
	event_free(srv.sig_term);
	event_free(srv.sig_int);
	event_free(srv.sig_hup);
	event_free(srv.cmd_ev);
	event_free(srv.start_ev);
	if (srv.nbd_refusals.ev)
		event_free(srv.nbd_refusals.ev);
	if (srv.ctl_refusals.ev)
		event_free(srv.ctl_refusals.ev);
	if (srv.name_refusals.ev)
		event_free(srv.name_refusals.ev);
	if (srv.denied_refusals.ev)
		event_free(srv.denied_refusals.ev);
	event_base_free(srv.base);
	free(srv.dimms);
	addr_tab_free(&srv);
	config_free(&srv.cfg);
	config_free(&cli_cfg);
	free(fallback_state_dir);
	for (int i = 0; i < nretired; i++)
		free(retired[i]);
	free(retired);
	tls_exit();
	log_info("stopped");
	return 0;

fail:
	/* the start failed (exit 1) or a signal stopped it (exit 0); nothing
	 * was posted on the command channel yet: no reply to wait for.  Each
	 * ioDimm that opened closes cleanly (checkpoint). */
	for (int i = 0; i < srv.ndimms; i++)
		dimm_stop(&srv.dimms[i]);
	for (int i = 0; i < srv.ndimms; i++)
		dimm_join(&srv.dimms[i]);
fail_early:
	ctl_stop(&srv);
	monitor_stop(&srv);
	metrics_http_stop(&srv);
	if (srv.cfg.pidfile)
		unlink(srv.cfg.pidfile);
	if (!exit_status)
		log_info("stopped by %s before it was ready", signal_name(stop_signal));
	return exit_status;
}
