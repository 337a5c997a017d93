/*
 * server/ctl_access.c - who may ask what of the control socket: a request
 * for a host other than the loopback is refused, and an action (POST) too
 * when a web page sent it or the peer (SO_PEERCRED) is not root, flashd's
 * user or in the socket's group (ctl.c's first comment says the rules to
 * users).  Called by ctl.c's router before it serves a request; it only
 * reads the request (and logs and answers a refusal).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "server/ctl_int.h"

/* May the peer of req change things (POST)?  Root, flashd's user, or a
 * member of the control socket's group.  by: who it is ("uid=U pid=P",
 * SO_PEERCRED: the process that connected), for the action's log line;
 * if it may not, why says so. */
static bool peer_may_act(struct server *srv, struct evhttp_request *req, char *by, size_t bylen,
			 char *why, size_t len)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	int fd = bev ? (int)bufferevent_getfd(bev) : -1;
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0) {
		snprintf(why, len, "cannot tell who the peer is: %s", strerror(errno));
		return false;
	}
	snprintf(by, bylen, "uid=%u pid=%d", (unsigned)cr.uid, (int)cr.pid);
	gid_t g = srv->cfg.control_gid >= 0 ? (gid_t)srv->cfg.control_gid : getegid();
	if (cr.uid == 0 || cr.uid == geteuid() || cr.gid == g)
		return true;
	gid_t groups[256];
	sl = sizeof groups;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &sl) == 0)
		for (size_t i = 0; i < sl / sizeof *groups; i++)
			if (groups[i] == g)
				return true;
	snprintf(why, len, "uid %u (pid %d) is not root, not flashd's user and not in the control "
		 "socket's group %u: actions are refused, GET requests are allowed", (unsigned)cr.uid,
		 (int)cr.pid, (unsigned)g);
	return false;
}

/*
 * Did a web page send this request?  The control socket is a unix socket,
 * but a browser reaches it through a forwarder (doc/managing.md, "Dashboard"), and
 * then so does every page that browser shows.  Refused (true, why says
 * which), for every request: a Host, or an absolute request target's host,
 * that is not the loopback: a page of another site whose DNS name now
 * resolves to the forwarder (DNS rebinding) sends its own name.  For an
 * action (post) also: neither the header X-Flashd-Action nor a JSON
 * Content-Type (a page of another origin can send neither without a CORS
 * preflight, and OPTIONS is not served, so the preflight fails); an Origin
 * other than "http://" + Host (a page flashd did not serve); a
 * Sec-Fetch-Site other than same-origin or none.  Requests without Host
 * and Origin (HTTP/1.0) are not a browser's.  flashctl sends Host:
 * localhost; a flashctl of an older release sent Host: flashd and is
 * refused, so flashctl must be of flashd's release (doc/security.md, threat model).
 * The router checks the host of every request (cross_site_host), may_act
 * the rest for an action (cross_site_action).
 */
bool cross_site_host(struct evhttp_request *req, char *why, size_t len)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *host = evhttp_find_header(in, "Host");
	const char *target = u ? evhttp_uri_get_host(u) : NULL;
	const char *bad = host && !acl_loopback_host(host) ? host :
			  target && !acl_loopback_host(target) ? target : NULL;
	if (bad)
		snprintf(why, len, "Host '%.100s' is not localhost, 127.x.y.z or [::1]: the control "
			 "socket serves only requests for the loopback (curl --unix-socket SOCKET "
			 "http://localhost/...; a forwarder on 127.0.0.1)", bad);
	return bad;
}

static bool cross_site_action(struct evhttp_request *req, char *why, size_t len)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *host = evhttp_find_header(in, "Host");
	const char *action = evhttp_find_header(in, "X-Flashd-Action");
	const char *type = evhttp_find_header(in, "Content-Type");
	size_t jl = strlen("application/json");
	bool json = type && !strncasecmp(type, "application/json", jl) &&
		    (!type[jl] || type[jl] == ';' || type[jl] == ' ');
	if (!(action && action[0]) && !json) {
		snprintf(why, len, "an action needs the header X-Flashd-Action: 1 (or Content-Type: "
			 "application/json), which a web page of another site cannot send; flashctl "
			 "sends it");
		return true;
	}
	const char *origin = evhttp_find_header(in, "Origin");
	if (origin && (!host || strncasecmp(origin, "http://", 7) || strcasecmp(origin + 7, host))) {
		snprintf(why, len, "Origin '%.100s' is not the page's own (http://%.100s): a web page "
			 "of another site may not act", origin, host ? host : "(no Host)");
		return true;
	}
	const char *site = evhttp_find_header(in, "Sec-Fetch-Site");
	if (site && strcmp(site, "same-origin") && strcmp(site, "none")) {
		snprintf(why, len, "Sec-Fetch-Site '%.40s': a request from another site (not "
			 "same-origin or none) may not act", site);
		return true;
	}
	return false;
}

/* Answer a web page's request (cross_site_*) 403 with why, and log it
 * through srv->ctl_refusals (a page can send them in a loop).  Main thread. */
void refuse_web(struct server *srv, struct evhttp_request *req, const char *path, const char *why)
{
	char who[128];
	snprintf(who, sizeof who, "control socket: %.100s", path);
	refusal_log(srv, &srv->ctl_refusals, who, why);
	send_error(req, 403, "Forbidden", why);
}

/* May this POST act: not sent by a web page (cross_site_action; the
 * router checked the host), by a peer with
 * the right (peer_may_act)?  Else it is refused (403) and logged.  by:
 * who asks (peer_may_act), for the action's log line. */
bool may_act(struct server *srv, struct evhttp_request *req, const char *path, char *by,
	     size_t bylen)
{
	char why[400];
	if (cross_site_action(req, why, sizeof why)) {
		refuse_web(srv, req, path, why);
		return false;
	}
	if (!peer_may_act(srv, req, by, bylen, why, sizeof why)) {
		log_warn("control socket: %s refused: %s", path, why);
		send_error(req, 403, "Forbidden", why);
		return false;
	}
	return true;
}
