/*
 * server/ctl.c - the control socket: HTTP (libevent's evhttp) on a unix
 * socket, for flashctl, monitoring and scripts.  JSON unless said.
 *
 *   GET  /v1/version                     {"version", "pid"}
 *   GET  /v1/status[?format=text[&all=1]] the server and every ioDimm: state,
 *                                        format, FTL statistics (lifetime
 *                                        counters persisted in checkpoints),
 *                                        server I/O counters and latency
 *                                        histograms; text: like fio-status
 *                                        (all=1: like fio-status -a)
 *   GET  /v1/dimms/NAME                  the same for one ioDimm
 *   POST /v1/dimms/NAME/attach           open the image and FTL, export it
 *   POST /v1/dimms/NAME/detach[?force=yes] withdraw the export, drain and
 *                                        close its connections, close the FTL
 *                                        (checkpoint) and the image; with
 *                                        clients connected: 409 naming them,
 *                                        unless force=yes
 *   POST /v1/dimms/NAME/format?confirm=yes[&sector_size=N][&capacity=BYTES|PCT%][&op=PCT]
 *        [&parity_width=0|1]             low-level format, detached only;
 *                                        unset: the [dimm] keys
 *   POST /v1/dimms/NAME/checkpoint       write a checkpoint now
 *   POST /v1/reload                      read the configuration file again (as
 *                                        SIGHUP): {"ok", "config", "applied":
 *                                        [{"key", "message"}...], "not_applied":
 *                                        [...]}; a file with an error: 400 and
 *                                        nothing changes
 *   GET  /metrics                        Prometheus text exposition (0.0.4)
 *   GET  /, /dashboard, /dashboard/NAME  the live dashboard (server/dashboard/,
 *                                        embedded at build time): a static
 *                                        page that polls /v1/status
 * NAME is the [dimm] name (or its export name).  An action answers 200 with
 * {"ok": true, ...}, or 400 (bad parameter), 404 (no such ioDimm), 409 (not
 * in a state that allows it), 503 (shutting down), 500 (it failed), each
 * with {"ok": false, "error": "..."}.  A format needs confirm=yes.
 * The socket's mode and group are control_mode (default 0660) and
 * control_group (default: flashd's group).  Whoever can open it may GET;
 * actions (every POST: reload too) need a peer (SO_PEERCRED) that is root,
 * flashd's user or in the socket's group (primary or supplementary), else
 * 403; each action is logged with that peer's uid and pid.  A browser reaches the socket through a forwarder (doc/managing.md,
 * "Dashboard"), and with it every web page it shows, so (cross_site):
 * a Host header must name the loopback (localhost, 127.0.0.0/8, [::1]),
 * and an action needs the header X-Flashd-Action (or a JSON Content-Type),
 * an Origin, if sent, of "http://" + Host and a Sec-Fetch-Site, if sent, of
 * same-origin or none; else 403.
 *
 * Nothing here waits for an ioDimm thread (flashd.h, "Command channel"):
 * each request is a struct ctl_req; snapshots and actions go to the ioDimm
 * threads as commands and the reply is sent when the last one is back (a
 * snapshot request gives up on a thread after CTL_SNAPSHOT_TIMEOUT_S and
 * says so).  An ioDimm in the middle of an attach, detach, format or
 * checkpoint is described by the main thread without asking its thread.
 * A ctl_req lives until it is answered and every command it posted is back
 * (a late command finds it answered and is dropped); all live on
 * srv->ctl_reqs, so shutdown answers what is left.
 *
 * This file owns the socket, the requests and their replies, the snapshots
 * and the router; the other files of the control socket (ctl_int.h) own
 * the verbs (ctl_verbs.c), who may ask (ctl_access.c) and the views of a
 * snapshot (ctl_json.c, ctl_text.c, ctl_metrics.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "common/parse.h"
#include "server/ctl_int.h"
#include "server/dashboard/dashboard.h"

#define CTL_SNAPSHOT_TIMEOUT_S 5
/* How long evhttp gives a control client to send its request and take the
 * reply.  Not how long an action may take: libevent 2.1 does not time a
 * connection while its request waits for our reply (a detach drains for up
 * to shutdown_timeout; tests/test-manage.sh holds a reply 6 s past this). */
#define CTL_HTTP_TIMEOUT_S 10
/* Request limits: no request of the API has a body, and its request line
 * and headers are short.  Beyond these evhttp answers 413 (body) or 400
 * and closes, having held at most that much: a client can neither make
 * flashd buffer (and keep, in the heap) gigabytes of headers or body, nor
 * make evhttp rescan an endless header line on the main thread, which
 * serves the NBD handshakes too. */
#define CTL_MAX_HEADERS_SIZE (16u << 10)   /* request line and headers */
#define CTL_MAX_BODY_SIZE (4u << 10)

/* Why a snapshot has no FTL figures, or NULL. */
const char *snapshot_note(const struct ctl_req *cr, const struct dimm_status *st, char *buf,
			  size_t len)
{
	if (st->answered)
		return NULL;
	if (!strcmp(st->state, "attached") || !strcmp(st->state, "detached") ||
	    !strcmp(st->state, "failed") || !strcmp(st->state, "checkpointing")) {
		if (!cr->timed_out)
			return NULL;
		snprintf(buf, len, "the ioDimm thread did not answer within %d s (busy): no figures",
			 CTL_SNAPSHOT_TIMEOUT_S);
		return buf;
	}
	snprintf(buf, len, "%s: figures are shown once that is done", st->state);
	return buf;
}

/* Each ioDimm's health from its snapshot (the one model: health.c). */
static void eval_health(struct ctl_req *cr)
{
	struct server *srv = cr->srv;
	for (int i = 0; i < srv->ndimms; i++) {
		if (cr->only >= 0 && i != cr->only)
			continue;
		struct health_limits lim;
		health_limits_of(&srv->cfg, srv->dimms[i].cfg, &lim);
		health_eval(&cr->st[i], &lim, &cr->h[i]);
	}
}

/* The server's health: the worst of its ioDimms' (or the one asked for). */
enum health_state req_health(const struct ctl_req *cr)
{
	if (cr->only >= 0)
		return cr->h[cr->only].state;
	return health_worst(cr->h, cr->srv->ndimms);
}

int server_connections(struct server *srv)
{
	pthread_mutex_lock(&srv->lock);
	int n = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

int served(struct server *srv)
{
	int up = 0;
	for (int i = 0; i < srv->ndimms; i++)
		up += srv->dimms[i].exported;
	return up;
}

static struct server *the_srv; /* for the reply-complete callback */

/* A reply has been written (or its connection is gone): at shutdown, the
 * loop ends once the last one is out (ctl_shutdown). */
static void reply_complete(struct evhttp_request *req, void *arg)
{
	struct server *srv = arg;
	if (--srv->ctl_sending == 0 && srv->ctl_closing)
		event_base_loopexit(srv->base, NULL);
}

/* Every reply goes through here, so shutdown knows what is still being sent. */
void ctl_reply(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b)
{
	if (evhttp_request_get_connection(req)) {
		the_srv->ctl_sending++;
		evhttp_request_set_on_complete_cb(req, reply_complete, the_srv);
	}
	evhttp_send_reply(req, code, reason, b);
}

void send_json(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
	ctl_reply(req, code, reason, b);
}

struct evbuffer *reply_buffer(struct evhttp_request *req)
{
	struct evbuffer *b = evbuffer_new();
	if (!b)
		evhttp_send_error(req, 500, "out of memory");
	return b;
}

/* {"ok": false, "error": msg} with code */
void send_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
	struct evbuffer *b = reply_buffer(req);
	if (!b)
		return;
	evbuffer_add_printf(b, "{\"ok\": false, \"error\": ");
	json_str(b, msg);
	evbuffer_add_printf(b, "}\n");
	send_json(req, code, reason, b);
	evbuffer_free(b);
}

void ctl_req_free(struct ctl_req *cr)
{
	LIST_REMOVE(cr, link);
	if (cr->timeout)
		event_free(cr->timeout);
	free(cr->st);
	free(cr->h);
	free(cr);
}

struct ctl_req *ctl_req_new(struct server *srv, struct evhttp_request *req, enum ctl_kind kind)
{
	struct ctl_req *cr = calloc(1, sizeof *cr);
	size_t n = (size_t)(srv->ndimms ? srv->ndimms : 1);
	if (cr) {
		cr->st = calloc(n, sizeof *cr->st);
		cr->h = calloc(n, sizeof *cr->h);
	}
	if (!cr || !cr->st || !cr->h) {
		if (cr) {
			free(cr->st);
			free(cr->h);
		}
		free(cr);
		evhttp_send_error(req, 500, "out of memory");
		return NULL;
	}
	cr->srv = srv;
	cr->req = req;
	cr->kind = kind;
	cr->only = -1;
	LIST_INSERT_HEAD(&srv->ctl_reqs, cr, link);
	return cr;
}

/* Answer cr's HTTP request from what it has gathered. */
void ctl_answer(struct ctl_req *cr)
{
	struct evhttp_request *req = cr->req;
	if (!req)
		return;
	cr->req = NULL;
	if (cr->timeout)
		evtimer_del(cr->timeout);
	struct evbuffer *b = reply_buffer(req);
	if (!b)
		return;
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	if (cr->kind != CK_ACTION)
		eval_health(cr);
	switch (cr->kind) {
	case CK_STATUS:
		if (cr->text)
			status_text(cr, b);
		else
			status_json(cr, b);
		evhttp_add_header(h, "Content-Type",
				  cr->text ? "text/plain; charset=utf-8" : "application/json");
		/* the state the answer shows, for flashctl status's exit status */
		evhttp_add_header(h, "X-Flashd-Health", health_state_name(req_health(cr)));
		ctl_reply(req, 200, "OK", b);
		break;
	case CK_METRICS:
		metrics_text(cr, b);
		evhttp_add_header(h, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
		ctl_reply(req, 200, "OK", b);
		break;
	case CK_ACTION:
		action_answer(cr, req, b);
		break;
	}
	evbuffer_free(b);
}

static void snapshot_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ctl_req *cr = arg;
	cr->timed_out = true;
	for (int i = 0; i < cr->srv->ndimms; i++)
		if (!cr->st[i].answered)
			log_warn("%s: no answer to a status request within %d s (the ioDimm thread is busy)",
				 cr->srv->dimms[i].cfg->name, CTL_SNAPSHOT_TIMEOUT_S);
	ctl_answer(cr);
}

/* Ask every ioDimm (or cr->only) for a snapshot; answer when all are back. */
static void start_snapshots(struct ctl_req *cr)
{
	struct server *srv = cr->srv;
	for (int i = 0; i < srv->ndimms; i++) {
		if (cr->only >= 0 && i != cr->only)
			continue;
		struct dimm *d = &srv->dimms[i];
		dimm_status_main(d, &cr->st[i]);
		/* in the middle of an operation the thread may be busy with it for
		 * long (opening, formatting): say so instead of asking; a
		 * checkpoint is written beside the requests, its thread answers */
		if (d->mstate != DM_ATTACHED && d->mstate != DM_DETACHED && d->mstate != DM_FAILED &&
		    d->mstate != DM_CHECKPOINTING)
			continue;
		struct dimm_cmd *cmd = calloc(1, sizeof *cmd);
		if (!cmd)
			continue;
		cmd->type = DCMD_STATUS;
		cmd->owner = cr;
		cmd->slot = i;
		cr->pending++;
		dimm_post(d, cmd);
	}
	if (!cr->pending) {
		ctl_answer(cr);
		ctl_req_free(cr);
		return;
	}
	cr->timeout = evtimer_new(srv->base, snapshot_timeout_cb, cr);
	struct timeval tv = { CTL_SNAPSHOT_TIMEOUT_S, 0 };
	if (cr->timeout)
		evtimer_add(cr->timeout, &tv);
}

void ctl_cmd_done(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	struct dimm_cmd *cmd = dimm_cmds_done(srv);
	while (cmd) {
		struct dimm_cmd *next = cmd->next;
		struct ctl_req *cr = cmd->owner;
		if (cmd->sample) {
			/* the monitor's: it owns the command */
			monitor_sample_done(cmd);
			cmd = next;
			continue;
		}
		if (cmd->type != DCMD_STATUS && cmd->type != DCMD_STALL && cmd->type != DCMD_INJECT)
			action_done(cmd->d, cmd, cr ? cr->before : DM_DETACHED);
		if (cr) {
			if (cr->req) {
				/* a command refused unrun (shutting down) has no snapshot:
				 * keep what the main thread filled in */
				if (cmd->type == DCMD_STATUS && cmd->st.answered) {
					cr->st[cmd->slot] = cmd->st;
					cr->st[cmd->slot].beacon = cmd->d->beacon;
					cr->st[cmd->slot].drbd = cmd->d->drbd;
				}
				cr->rc = cmd->rc;
				snprintf(cr->msg, sizeof cr->msg, "%s", cmd->msg);
			}
			if (--cr->pending == 0) {
				ctl_answer(cr);
				ctl_req_free(cr);
			}
		}
		free(cmd);
		cmd = next;
	}
}

bool query_flag(struct evkeyvalq *q, const char *key, const char *value)
{
	const char *v = evhttp_find_header(q, key);
	return v && !strcmp(v, value);
}

static void do_status(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q, int only)
{
	struct ctl_req *cr = ctl_req_new(srv, req, CK_STATUS);
	if (!cr)
		return;
	cr->text = query_flag(q, "format", "text");
	cr->all = query_flag(q, "all", "1") || query_flag(q, "all", "yes") || query_flag(q, "all", "true");
	cr->color = query_flag(q, "color", "1");
	cr->only = only;
	start_snapshots(cr);
}

static void do_metrics(struct server *srv, struct evhttp_request *req)
{
	struct ctl_req *cr = ctl_req_new(srv, req, CK_METRICS);
	if (cr)
		start_snapshots(cr);
}

static void do_version(struct server *srv, struct evhttp_request *req)
{
	struct evbuffer *b = reply_buffer(req);
	if (!b)
		return;
	evbuffer_add_printf(b, "{\"version\": \"%s\", \"pid\": %d, \"uptime_seconds\": %lld}\n",
			    FLASHD_VERSION, (int)getpid(), (long long)(time(NULL) - srv->started));
	send_json(req, 200, "OK", b);
	evbuffer_free(b);
}

/* GET /v1/history[?since=MS]: monitor.c's samples taken after since. */
static void do_history(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q)
{
	const char *v = evhttp_find_header(q, "since");
	uint64_t since = 0;
	if (v && parse_uint(v, 0, INT64_MAX, &since)) {
		send_error(req, 400, "Bad Request", "since: unix milliseconds");
		return;
	}
	struct evbuffer *b = reply_buffer(req);
	if (!b)
		return;
	monitor_history_json(srv, b, (int64_t)since);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
	send_json(req, 200, "OK", b);
	evbuffer_free(b);
}

/* The dashboard's files, embedded (server/dashboard/): / and /dashboard are
 * index.html, /dashboard/NAME the file NAME.  Only from this origin: a
 * Content-Security-Policy that allows nothing from elsewhere. */
static void do_dashboard(struct evhttp_request *req, const char *path)
{
	const char *name = "index.html";
	if (!strncmp(path, "/dashboard/", 11) && path[11])
		name = path + 11;
	const struct dashboard_file *f = dashboard_files;
	while (f->name && strcmp(f->name, name))
		f++;
	if (!f->name) {
		send_error(req, 404, "Not Found", "no such dashboard file");
		return;
	}
	struct evbuffer *b = reply_buffer(req);
	if (!b)
		return;
	evbuffer_add_reference(b, f->data, f->len, NULL, NULL);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", f->content_type);
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "Content-Security-Policy", "default-src 'self'; img-src 'self' data:");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	ctl_reply(req, 200, "OK", b);
	evbuffer_free(b);
}

static struct dimm *find_dimm(struct server *srv, const char *name)
{
	for (int i = 0; i < srv->ndimms; i++)
		if (!strcmp(srv->dimms[i].cfg->name, name))
			return &srv->dimms[i];
	return server_find_dimm_by_export(srv, name, strlen(name));
}

/* The control socket's paths that take GET (and HEAD) and nothing else;
 * GET_NONE: another path. */
enum get_path { GET_NONE, GET_METRICS, GET_STATUS, GET_VERSION, GET_HISTORY, GET_DASHBOARD };

static enum get_path get_path_of(const char *path)
{
	if (!strcmp(path, "/metrics") || !strcmp(path, "/v1/metrics"))
		return GET_METRICS;
	if (!strcmp(path, "/v1/status"))
		return GET_STATUS;
	if (!strcmp(path, "/v1/version"))
		return GET_VERSION;
	if (!strcmp(path, "/v1/history"))
		return GET_HISTORY;
	if (!strcmp(path, "/") || !strcmp(path, "/dashboard") || !strncmp(path, "/dashboard/", 11))
		return GET_DASHBOARD;
	return GET_NONE;
}

static void router(struct evhttp_request *req, void *arg)
{
	struct server *srv = arg;
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *rawpath = u ? evhttp_uri_get_path(u) : NULL;
	char *path = rawpath ? evhttp_uridecode(rawpath, 0, NULL) : NULL;
	struct evkeyvalq q;
	TAILQ_INIT(&q);
	const char *query = u ? evhttp_uri_get_query(u) : NULL;
	if (!path || (query && evhttp_parse_query_str(query, &q) < 0)) {
		send_error(req, 400, "Bad Request", "cannot parse the request's path or query");
		goto out;
	}
	bool get = method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD;
	bool post = method == EVHTTP_REQ_POST;
	if (srv->shutting_down) {
		/* between the ioDimms' end and the loop's (ctl_shutdown) */
		send_error(req, 503, "Service Unavailable", "flashd is shutting down");
		goto out;
	}
	char why[400], by[64];
	if (cross_site_host(req, why, sizeof why)) {
		refuse_web(srv, req, path, why);
		goto out;
	}
	enum get_path gp = get_path_of(path);
	if (gp != GET_NONE && !get)
		goto only_get;
	switch (gp) {
	case GET_METRICS: do_metrics(srv, req); goto out;
	case GET_STATUS: do_status(srv, req, &q, -1); goto out;
	case GET_VERSION: do_version(srv, req); goto out;
	case GET_HISTORY: do_history(srv, req, &q); goto out;
	case GET_DASHBOARD: do_dashboard(req, path); goto out;
	case GET_NONE: break;
	}
	if (!strcmp(path, "/v1/reload")) {
		if (!post) {
			evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
			send_error(req, 405, "Method Not Allowed", "reload takes POST");
			goto out;
		}
		if (may_act(srv, req, path, by, sizeof by))
			do_reload(srv, req, by);
	} else if (!strncmp(path, "/v1/dimms/", 10)) {
		char name[256];
		const char *p = path + 10, *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
		struct dimm *d = n && n < sizeof name ? find_dimm(srv, name) : NULL;
		if (!d) {
			char msg[400];
			snprintf(msg, sizeof msg, "no ioDimm '%s' (flashctl status lists them)", name);
			send_error(req, 404, "Not Found", msg);
		} else if (!slash || !slash[1]) {
			if (!get)
				goto only_get;
			do_status(srv, req, &q, d->index);
		} else if (!post) {
			evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
			send_error(req, 405, "Method Not Allowed", "actions take POST");
		} else if (may_act(srv, req, path, by, sizeof by)) {
			do_action(srv, req, &q, d, slash + 1, by);
		}
	} else {
		send_error(req, 404, "Not Found", "unknown path (GET /v1/status, /v1/version, /v1/history, "
			   "/metrics, /v1/dimms/NAME, / (dashboard); POST /v1/reload, "
			   "/v1/dimms/NAME/{attach,detach,format,checkpoint,beacon})");
	}
	goto out;
only_get:
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
	send_error(req, 405, "Method Not Allowed", "this path takes GET");
out:
	evhttp_clear_headers(&q);
	free(path);
}

void ctl_serve_readonly(struct server *srv, struct evhttp_request *req, const char *path,
			struct evkeyvalq *q)
{
	if (srv->shutting_down)
		send_error(req, 503, "Service Unavailable", "flashd is shutting down");
	else if (!strcmp(path, "/metrics"))
		do_metrics(srv, req);
	else if (!strcmp(path, "/v1/status"))
		do_status(srv, req, q, -1);
	else if (!strcmp(path, "/v1/history"))
		do_history(srv, req, q);
	else if (!strcmp(path, "/") || !strcmp(path, "/dashboard") || !strncmp(path, "/dashboard/", 11))
		do_dashboard(req, path);
	else
		send_error(req, 404, "Not Found", "the metrics listener serves GET /metrics, /v1/status, "
			   "/v1/history and the dashboard (/) only; actions are on the control socket");
}

int ctl_start(struct server *srv, char *err, size_t errlen)
{
	const char *path = srv->cfg.control_path;
	struct unix_socket us = { .what = "control socket", .failed = "control socket", .backlog = 16,
				  .mode = srv->cfg.control_mode, .gid = srv->cfg.control_gid };
	int fd = unix_socket_listen(path, &us, err, errlen);
	if (fd < 0)
		return fd;
	the_srv = srv;
	srv->ctl = evhttp_new(srv->base);
	struct evhttp_bound_socket *bs = srv->ctl ? evhttp_accept_socket_with_handle(srv->ctl, fd) : NULL;
	srv->ctl_bound = bs;
	if (!bs) {
		snprintf(err, errlen, "control socket: evhttp failed");
		close(fd);
		return -ENOMEM;
	}
	/* out of descriptors, evhttp's listener would retry accept at once,
	 * forever: give it the NBD listeners' back-off */
	char name[300];
	snprintf(name, sizeof name, "control socket %s", path);
	srv->ctl_listener = listener_watch(srv, evhttp_bound_socket_get_listener(bs), name, false);
	if (!srv->ctl_listener) {
		snprintf(err, errlen, "control socket: out of memory");
		return -ENOMEM;
	}
	evhttp_set_allowed_methods(srv->ctl, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
	evhttp_set_gencb(srv->ctl, router, srv);
	evhttp_set_timeout(srv->ctl, CTL_HTTP_TIMEOUT_S);
	evhttp_set_max_headers_size(srv->ctl, CTL_MAX_HEADERS_SIZE);
	evhttp_set_max_body_size(srv->ctl, CTL_MAX_BODY_SIZE);
	return 0;
}

/* Answer what is still waiting (every ioDimm thread has ended, so every
 * command posted is on the done queue). */
static void answer_leftovers(struct server *srv)
{
	if (srv->cmd_ev)
		ctl_cmd_done(-1, 0, srv);
	while (!LIST_EMPTY(&srv->ctl_reqs)) {
		struct ctl_req *cr = LIST_FIRST(&srv->ctl_reqs);
		if (cr->req) {
			send_error(cr->req, 503, "Service Unavailable", "flashd is shutting down");
			cr->req = NULL;
		}
		ctl_req_free(cr);
	}
}

void ctl_shutdown(struct server *srv)
{
	if (srv->ctl_listener) {
		listener_close(srv->ctl_listener);
		srv->ctl_listener = NULL;
	}
	if (srv->ctl && srv->ctl_bound) {
		evhttp_del_accept_socket(srv->ctl, srv->ctl_bound);
		srv->ctl_bound = NULL;
		unlink(srv->cfg.control_path);
	}
	answer_leftovers(srv);
	srv->ctl_closing = true;
	if (srv->ctl_sending <= 0) {
		event_base_loopexit(srv->base, NULL);
	} else {
		/* a client that does not take its reply does not hold the exit */
		struct timeval tv = { 1, 0 };
		event_base_loopexit(srv->base, &tv);
	}
}

void ctl_stop(struct server *srv)
{
	answer_leftovers(srv);
	if (srv->ctl_listener) {
		listener_close(srv->ctl_listener);
		srv->ctl_listener = NULL;
	}
	if (srv->ctl) {
		evhttp_free(srv->ctl);
		srv->ctl = NULL;
		srv->ctl_bound = NULL;
		unlink(srv->cfg.control_path);
	}
}
