/*
 * server/ctl_int.h - what the files of the control socket share; only they
 * include it (the rest of the server sees ctl.c's functions in flashd.h):
 *
 *   ctl.c          the socket, the requests (struct ctl_req) and their
 *                  replies, the snapshots, the router
 *   ctl_access.c   who may ask: a loopback Host, no web page's action, a
 *                  peer allowed to act
 *   ctl_verbs.c    the management verbs (attach, detach, format, checkpoint,
 *                  beacon, inject, test-stall, reload): their parameters,
 *                  the states they start from, their commands and answers
 *   ctl_json.c     a snapshot as JSON (/v1/status, /v1/dimms/NAME)
 *   ctl_text.c     a snapshot as text, like fio-status (?format=text)
 *   ctl_metrics.c  a snapshot as Prometheus text exposition (/metrics)
 *
 * All of it runs on the main thread.
 */
#ifndef FLASHD_CTL_INT_H
#define FLASHD_CTL_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "server/flashd.h"

struct evbuffer;
struct evhttp_request;
struct evkeyvalq;

enum ctl_kind { CK_STATUS, CK_METRICS, CK_ACTION };

/* A control request, from its HTTP request until it is answered and every
 * command it posted is back (ctl.c's first comment); owned by ctl.c. */
struct ctl_req {
	struct server *srv;
	struct evhttp_request *req;  /* NULL once answered */
	enum ctl_kind kind;
	bool text, all;              /* status: ?format=text, &all=1 */
	bool color;                  /* status text: &color=1, ANSI colours for a terminal */
	int only;                    /* one ioDimm's status (its index), or -1 */
	struct dimm_status *st;      /* per ioDimm */
	struct health *h;            /* per ioDimm, from st (health_eval at the answer) */
	bool timed_out;
	int pending;                 /* commands posted, not yet back */
	struct event *timeout;
	/* CK_ACTION */
	struct dimm *target;
	enum dimm_cmd_type action;
	enum dimm_mstate before;     /* the main state to go back to on failure */
	int rc;
	char msg[1536];
	LIST_ENTRY(ctl_req) link;    /* in srv->ctl_reqs */
};

/* ctl.c: replies (every one goes through ctl_reply, so shutdown knows what
 * is still being sent) */
void ctl_reply(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b);
void send_json(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b);
/* a buffer for REQ's reply; NULL when out of memory, REQ answered 500 */
struct evbuffer *reply_buffer(struct evhttp_request *req);
/* {"ok": false, "error": msg} with code */
void send_error(struct evhttp_request *req, int code, const char *reason, const char *msg);
/* ctl.c: a request on srv->ctl_reqs (NULL: answered 500, out of memory);
 * ctl_answer answers it from what it gathered, ctl_req_free ends it. */
struct ctl_req *ctl_req_new(struct server *srv, struct evhttp_request *req, enum ctl_kind kind);
void ctl_answer(struct ctl_req *cr);
void ctl_req_free(struct ctl_req *cr);
/* ctl.c: is the query's key value? */
bool query_flag(struct evkeyvalq *q, const char *key, const char *value);

/* ctl.c: what the views read of a snapshot (cr->st, cr->h) beside it */
/* Why a snapshot has no FTL figures (into buf), or NULL. */
const char *snapshot_note(const struct ctl_req *cr, const struct dimm_status *st, char *buf,
			  size_t len);
/* The server's health: the worst of its ioDimms' (or the one asked for). */
enum health_state req_health(const struct ctl_req *cr);
int server_connections(struct server *srv);  /* NBD connections, negotiating or not */
int served(struct server *srv);              /* ioDimms exported now */

/* Endurance used, in percent: the average erase count over the rated cycles. */
static inline double endurance_used(const struct ftl_stats *s)
{
	return s->rated_pe_cycles ? 100.0 * s->erase_avg / s->rated_pe_cycles : 0;
}

/* ctl_json.c */
void json_str(struct evbuffer *b, const char *s);     /* a JSON string, escaped */
void status_json(struct ctl_req *cr, struct evbuffer *b);
/* ctl_text.c */
void status_text(struct ctl_req *cr, struct evbuffer *b);
/* ctl_metrics.c */
void metrics_text(struct ctl_req *cr, struct evbuffer *b);

/* ctl_verbs.c: POST /v1/dimms/NAME/VERB and POST /v1/reload, once may_act
 * allowed them (by: who asks, for the log) */
void do_action(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
	       struct dimm *d, const char *verb, const char *by);
void do_reload(struct server *srv, struct evhttp_request *req, const char *by);
/* ctl_verbs.c: the main state an action's result leaves the ioDimm in
 * (ctl_cmd_done), and the action's answer (ctl_answer) */
void action_done(struct dimm *d, struct dimm_cmd *cmd, enum dimm_mstate before);
void action_answer(struct ctl_req *cr, struct evhttp_request *req, struct evbuffer *b);

/* ctl_access.c: the router's checks.  cross_site_host: is the request's
 * Host not the loopback (why says so)?  refuse_web: answer 403 with why and
 * log it (rate-limited).  may_act: may this POST act (else answered 403
 * and logged); by: who asks. */
bool cross_site_host(struct evhttp_request *req, char *why, size_t len);
void refuse_web(struct server *srv, struct evhttp_request *req, const char *path, const char *why);
bool may_act(struct server *srv, struct evhttp_request *req, const char *path, char *by,
	     size_t bylen);

#endif
