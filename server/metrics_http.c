/*
 * server/metrics_http.c - the read-only HTTP listener: [server]
 * metrics_listen = HOST:PORT (off by default), for Prometheus and the
 * dashboard without a forwarder to the control socket.
 *
 * It serves GET (and HEAD) of /metrics, /v1/status, /v1/history and the
 * dashboard (/, /dashboard, /dashboard/FILE) through ctl.c's handlers,
 * nothing else: no action, no other path, no other method (evhttp answers
 * those itself).  The dashboard's page works from it as from the control
 * socket, without its buttons ever acting: there are none, and POST is not
 * served here.  Who may use it:
 *   - metrics_allow (common/acl.h syntax: addresses, networks, all; no
 *     rules: everyone who can reach it), checked per request against the
 *     peer's address; refused: 403, logged (at most a line per 10 s for
 *     each of the two refusals);
 *   - the Host header, against DNS rebinding: a web page of another site
 *     whose name its DNS points at this listener would send its own name,
 *     and its script could read the status (image paths, configuration,
 *     listen addresses) through a browser inside metrics_allow.  So a Host,
 *     when sent, must be an IP address, localhost, this machine's name
 *     (gethostname) or one of metrics_host_names (what Prometheus' targets
 *     call it); else 403 saying which key to set.  Requests without a Host
 *     (HTTP/1.0 clients) are not a browser's.
 * The listener is bound before any image opens (main.c), so an address
 * that cannot be bound stops the start; like the NBD listeners it accepts
 * nothing before READY.
 * Requests are answered on the main thread like the control socket's, so
 * they never wait for an ioDimm's thread longer than a status does.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <event2/bufferevent.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "server/flashd.h"

#define METRICS_HTTP_TIMEOUT_S 10
#define METRICS_MAX_HEADERS_SIZE (16u << 10)
#define METRICS_MAX_LISTENERS 8

struct metrics_http {
	struct evhttp *http;
	struct listener *watch[METRICS_MAX_LISTENERS]; /* accept back-off (listen.c) */
	int nwatch;
	char hostname[256];         /* gethostname(), "" if none */
	/* refusals, per kind (REFUSED_PEER, REFUSED_HOST): one line per 10 s */
	uint64_t last_log_ns[2];
	unsigned long held[2];
};
enum { REFUSED_PEER, REFUSED_HOST };

static void refuse(struct metrics_http *mh, struct evhttp_request *req, int kind, const char *why)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (mh->last_log_ns[kind] && now - mh->last_log_ns[kind] < 10 * 1000000000ull) {
		mh->held[kind]++;
	} else {
		char more[96] = "";
		if (mh->held[kind])
			snprintf(more, sizeof more, " (and %lu more like it in the last %.0f s)",
				 mh->held[kind], (double)(now - mh->last_log_ns[kind]) / 1e9);
		log_warn("metrics listener: request refused: %s%s", why, more);
		mh->last_log_ns[kind] = now;
		mh->held[kind] = 0;
	}
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	evbuffer_add_printf(b, "%s\n", why);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; charset=utf-8");
	evhttp_send_reply(req, 403, "Forbidden", b);
	evbuffer_free(b);
}

/* The peer's address against metrics_allow; why says who was refused. */
static bool peer_allowed(struct server *srv, struct evhttp_request *req, char *why, size_t len)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	int fd = bev ? (int)bufferevent_getfd(bev) : -1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) < 0) {
		snprintf(why, len, "cannot tell the peer's address");
		return false;
	}
	struct acl_peer p = { 0 };
	acl_peer_from_sockaddr(&p, (struct sockaddr *)&ss);
	if (acl_check(&srv->cfg.metrics_allow, &p) != ACL_DENY)
		return true;
	char addr[INET6_ADDRSTRLEN] = "?";
	inet_ntop(p.family, p.addr, addr, sizeof addr);
	snprintf(why, len, "%s is not in [server] metrics_allow", addr);
	return false;
}

/* Is name (a Host without its port) one this listener answers to? */
static bool host_known(struct metrics_http *mh, struct server *srv, const char *name)
{
	struct in6_addr a6;
	struct in_addr a4;
	if (inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1)
		return true;
	if (!strcasecmp(name, "localhost") || (mh->hostname[0] && !strcasecmp(name, mh->hostname)))
		return true;
	const char *list = srv->cfg.metrics_host_names;
	size_t n = strlen(name);
	while (list && *list) {
		list += strspn(list, " ");
		size_t w = strcspn(list, " ");
		if (w == n && !strncasecmp(list, name, n))
			return true;
		list += w;
	}
	return false;
}

/* The Host header (if any) against DNS rebinding; why says what to do. */
static bool host_allowed(struct metrics_http *mh, struct server *srv, struct evhttp_request *req,
			 char *why, size_t len)
{
	const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
	if (!host)
		return true;
	char name[256];
	const char *end;
	if (host[0] == '[') {
		end = strchr(host, ']');
		if (!end)
			goto bad;
		snprintf(name, sizeof name, "%.*s", (int)(end - host - 1), host + 1);
		end++;
	} else {
		end = host + strcspn(host, ":");
		snprintf(name, sizeof name, "%.*s", (int)(end - host), host);
	}
	if (*end && (*end != ':' || strspn(end + 1, "0123456789") != strlen(end + 1)))
		goto bad;
	if (name[0] && host_known(mh, srv, name))
		return true;
bad:
	snprintf(why, len, "Host '%.100s' is not an IP address, localhost, this host's name (%s) or "
		 "one of [server] metrics_host_names (a name is checked against DNS rebinding: add "
		 "the name your scrapers and browsers use to metrics_host_names)", host,
		 mh->hostname[0] ? mh->hostname : "unknown");
	return false;
}

static void request_cb(struct evhttp_request *req, void *arg)
{
	struct server *srv = arg;
	struct metrics_http *mh = srv->metrics_http;
	char why[600];
	if (!peer_allowed(srv, req, why, sizeof why)) {
		refuse(mh, req, REFUSED_PEER, why);
		return;
	}
	if (!host_allowed(mh, srv, req, why, sizeof why)) {
		refuse(mh, req, REFUSED_HOST, why);
		return;
	}
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *rawpath = u ? evhttp_uri_get_path(u) : NULL;
	const char *query = u ? evhttp_uri_get_query(u) : NULL;
	char *path = rawpath ? evhttp_uridecode(rawpath, 0, NULL) : NULL;
	struct evkeyvalq q;
	TAILQ_INIT(&q);
	if (!path || (query && evhttp_parse_query_str(query, &q) < 0))
		evhttp_send_error(req, 400, "cannot parse the request's path or query");
	else
		ctl_serve_readonly(srv, req, path, &q);
	evhttp_clear_headers(&q);
	free(path);
}

/* Bind every address HOST:PORT resolves to and hand it to evhttp. */
static int bind_all(struct server *srv, struct metrics_http *mh, const char *spec, char *err,
		    size_t errlen)
{
	char host[256];
	const char *port;
	if (spec[0] == '[') {
		const char *e = strchr(spec, ']');
		snprintf(host, sizeof host, "%.*s", e ? (int)(e - spec - 1) : 0, spec + 1);
		port = e ? e + 2 : "";
	} else {
		const char *c = strrchr(spec, ':');
		snprintf(host, sizeof host, "%.*s", c ? (int)(c - spec) : 0, spec);
		port = c ? c + 1 : "";
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "metrics_listen '%s': %s", spec, gai_strerror(rc));
		return -EINVAL;
	}
	rc = 0;
	for (struct addrinfo *ai = res; ai && !rc; ai = ai->ai_next) {
		if (mh->nwatch == METRICS_MAX_LISTENERS)
			break;
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		int one = 1;
		if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
		    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
			rc = -errno;
			snprintf(err, errlen, "metrics_listen: cannot listen on %s: %s", spec, strerror(errno));
			if (fd >= 0)
				close(fd);
			break;
		}
		struct evhttp_bound_socket *bs = evhttp_accept_socket_with_handle(mh->http, fd);
		if (!bs) {
			close(fd);
			rc = -ENOMEM;
			snprintf(err, errlen, "metrics_listen %s: evhttp failed", spec);
			break;
		}
		char name[200];
		snprintf(name, sizeof name, "metrics listener %s", spec);
		mh->watch[mh->nwatch] = listener_watch(srv, evhttp_bound_socket_get_listener(bs), name, false);
		if (!mh->watch[mh->nwatch]) {
			rc = -ENOMEM;
			snprintf(err, errlen, "metrics_listen %s: out of memory", spec);
			break;
		}
		mh->nwatch++;
	}
	freeaddrinfo(res);
	return rc;
}

int metrics_http_start(struct server *srv, char *err, size_t errlen)
{
	const char *spec = srv->cfg.metrics_listen;
	if (!spec)
		return 0;
	struct metrics_http *mh = calloc(1, sizeof *mh);
	if (!mh || !(mh->http = evhttp_new(srv->base))) {
		free(mh);
		snprintf(err, errlen, "metrics_listen: out of memory");
		return -ENOMEM;
	}
	srv->metrics_http = mh;
	if (gethostname(mh->hostname, sizeof mh->hostname) < 0)
		mh->hostname[0] = 0;
	mh->hostname[sizeof mh->hostname - 1] = 0;
	int rc = bind_all(srv, mh, spec, err, errlen);
	if (rc) {
		metrics_http_stop(srv);
		return rc;
	}
	evhttp_set_allowed_methods(mh->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_gencb(mh->http, request_cb, srv);
	evhttp_set_timeout(mh->http, METRICS_HTTP_TIMEOUT_S);
	evhttp_set_max_headers_size(mh->http, METRICS_MAX_HEADERS_SIZE);
	evhttp_set_max_body_size(mh->http, 0);
	log_info("metrics listener on %s: GET /metrics, /v1/status, /v1/history, / (dashboard); %s",
		 spec, srv->cfg.metrics_allow.n ? "metrics_allow applies" : "no metrics_allow: any client");
	return 0;
}

void metrics_http_stop(struct server *srv)
{
	struct metrics_http *mh = srv->metrics_http;
	if (!mh)
		return;
	for (int i = 0; i < mh->nwatch; i++)
		listener_close(mh->watch[i]);
	if (mh->http)
		evhttp_free(mh->http);
	free(mh);
	srv->metrics_http = NULL;
}
