/*
 * server/listen.c - the NBD listening sockets, on the main thread: binding
 * them (TCP, dual-stack, unix), accepting (accept_cb hands each client to
 * admit.c), and the accept back-off of every listener of the server, the
 * metrics listener's too (listener_watch).  Called by main.c at start-up
 * and shutdown, metrics_http.c (listener_watch, listener_close) and the
 * event loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "server/flashd.h"
#include "server/main_int.h"

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
	admit_connection(fd, peer, (int)(intptr_t)arg, &slot);
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

/* Accept on every listener (start-up: once every ioDimm's open is known),
 * or on none. */
void listeners_enable(struct server *s, bool on)
{
	for (struct listener *l = s->listeners; l; l = l->next)
		(on ? evconnlistener_enable : evconnlistener_disable)(l->evl);
}

/* Shutdown: the NBD listeners (the others' owners close theirs). */
void listeners_close_owned(struct server *s)
{
	for (struct listener *l = s->listeners, *next; l; l = next) {
		next = l->next;
		if (l->owned)
			listener_close(l);
	}
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

/* the listening socket FD served with TLS MODE, watched under NAME; 0, or
 * -1 out of memory (FD closed) */
static int serve_fd(int fd, int mode, const char *name)
{
	struct evconnlistener *l = evconnlistener_new(srv.base, accept_cb, (void *)(intptr_t)mode,
						      LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!l)
		close(fd);
	return add_listener(l, name);
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

int listen_tcp(const char *fullspec, char *err, size_t errlen)
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
		if (serve_fd(fd, mode, spec) < 0) {
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

int listen_unix(const char *path, char *err, size_t errlen)
{
	struct unix_socket us = { .what = "unix socket", .failed = "cannot listen on", .backlog = 128,
				  .mode = srv.cfg.unix_mode, .gid = srv.cfg.unix_gid, .refuse_file = true };
	int fd = unix_socket_listen(path, &us, err, errlen);
	if (fd < 0)
		return fd;
	if (serve_fd(fd, srv.cfg.unix_tls, path) < 0) {
		snprintf(err, errlen, "cannot listen on %s", path);
		return -ENOMEM;
	}
	log_info("listening on %s%s%s", path, srv.cfg.unix_tls != TLS_OFF ? ", TLS " : "",
		 srv.cfg.unix_tls != TLS_OFF ? tls_mode_name(srv.cfg.unix_tls) : "");
	return 0;
}

int unix_socket_listen(const char *path, const struct unix_socket *us, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "%s path too long: %s", us->what, path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (S_ISSOCK(st.st_mode)) {
			unlink(path);
		} else if (us->refuse_file) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			return -EEXIST;
		}
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, us->backlog) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s %s: %s", us->failed, path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	int prc = socket_perms(path, us->what, us->mode, us->gid, err, errlen);
	if (prc) {
		close(fd);
		return prc;
	}
	return fd;
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
