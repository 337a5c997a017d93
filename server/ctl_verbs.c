/*
 * server/ctl_verbs.c - the management verbs of the control socket: POST
 * /v1/dimms/NAME/{attach,detach,format,checkpoint,beacon,inject,test-stall}
 * and POST /v1/reload.  It owns what a verb may do (its entry in verbs[]):
 * its parameters, the main states it may start from and the one it moves
 * the ioDimm into (the main thread's d->mstate, flashd.h "Attach state"),
 * the command it posts to the ioDimm thread, the state its result leaves
 * (action_done) and its answer.  Called by ctl.c: the router (once
 * ctl_access.c allowed the request), ctl_cmd_done and ctl_answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "common/parse.h"
#include "server/ctl_int.h"

static int http_code(int rc, const char **reason)
{
	switch (-rc) {
	case 0: *reason = "OK"; return 200;
	case EINVAL: *reason = "Bad Request"; return 400;
	case EBUSY: case ENODEV: case EROFS: case EALREADY: *reason = "Conflict"; return 409;
	case ESHUTDOWN: *reason = "Service Unavailable"; return 503;
	case ETIMEDOUT: *reason = "Gateway Timeout"; return 504;
	default: *reason = "Internal Server Error"; return 500;
	}
}

/*
 * Injection parameters from the query: what=die-fail|bad-block|bit-errors|
 * temperature and value (die, block, reads per million, degrees C).  The
 * ranges that depend on the device (die, block) are checked on its thread.
 * 0, or -EINVAL with why.
 */
static int inject_params(struct evkeyvalq *q, enum inject_kind *k, int64_t *value, char *why,
			 size_t len)
{
	const char *w = evhttp_find_header(q, "what"), *v = evhttp_find_header(q, "value");
	uint64_t u;
	double f;
	if (!w || !v) {
		snprintf(why, len, "inject needs what (die-fail, bad-block, bit-errors, temperature) "
			 "and value");
		return -EINVAL;
	}
	if (!strcmp(w, "die-fail") || !strcmp(w, "bad-block")) {
		if (parse_uint(v, 0, UINT32_MAX, &u)) {
			snprintf(why, len, "%s '%s': a %s number", w, v, w[0] == 'd' ? "die" : "block");
			return -EINVAL;
		}
		*k = w[0] == 'd' ? INJ_DIE_FAIL : INJ_BAD_BLOCK;
		*value = (int64_t)u;
	} else if (!strcmp(w, "bit-errors")) {
		if (parse_uint(v, 0, 100000, &u)) {
			snprintf(why, len, "bit-errors '%s': uncorrectable reads per million, 0 to 100000", v);
			return -EINVAL;
		}
		*k = INJ_BIT_ERRORS;
		*value = (int64_t)u;
	} else if (!strcmp(w, "temperature")) {
		if (parse_double(v, -40, 150, &f)) {
			snprintf(why, len, "temperature '%s': degrees C, -40 to 150", v);
			return -EINVAL;
		}
		*k = INJ_TEMPERATURE;
		*value = (int64_t)(f * 1000);
	} else {
		snprintf(why, len, "unknown fault '%s' (die-fail, bad-block, bit-errors, temperature)", w);
		return -EINVAL;
	}
	return 0;
}

/* Format parameters from the query; 0, or -EINVAL with why. */
static int format_params(struct evkeyvalq *q, struct dimm_format_req *f, char *why, size_t len)
{
	const char *v;
	uint64_t u;
	if ((v = evhttp_find_header(q, "sector_size"))) {
		if (parse_byte_size(v, 0, UINT32_MAX, &u) || (u != 512 && u != 4096)) {
			snprintf(why, len, "sector_size '%s': 512 or 4096", v);
			return -EINVAL;
		}
		f->sector_size = (uint32_t)u;
	}
	const char *cap = evhttp_find_header(q, "capacity"), *op = evhttp_find_header(q, "op");
	if (cap && op) {
		snprintf(why, len, "give capacity or op, not both");
		return -EINVAL;
	}
	if (cap) {
		size_t n = strlen(cap);
		if (n && cap[n - 1] == '%') {
			if (parse_percent(cap, 0, 100, &f->capacity_pct) || f->capacity_pct <= 0) {
				snprintf(why, len, "capacity '%s': a share of the stock capacity is more than "
					 "0%% and at most 100%%", cap);
				return -EINVAL;
			}
		} else if (parse_byte_size(cap, 1u << 20, UINT64_MAX, &f->capacity)) {
			snprintf(why, len, "capacity '%s': bytes (at least 1M) with an optional K, M, G or T, "
				 "or PCT%% of the stock capacity", cap);
			return -EINVAL;
		}
	}
	if ((v = evhttp_find_header(q, "parity_width"))) {
		if (parse_byte_size(v, 0, 1, &u)) {
			snprintf(why, len, "parity_width '%s': 0 or 1", v);
			return -EINVAL;
		}
		f->parity_width = (int)u;
	}
	if (op) {
		size_t n = strlen(op);
		int rc = n && op[n - 1] == '%' ?
				 parse_percent(op, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT, &f->op_percent) :
				 parse_double(op, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT, &f->op_percent);
		if (rc) {
			snprintf(why, len, "op '%s': over-provisioning in percent of the raw NAND, %.0f to %.0f",
				 op, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * POST /v1/dimms/NAME/beacon[?state=on|off]: the locate LED of fio-beacon.
 * The simulated card has no LED: the state is kept by the main thread and
 * shown by status, /metrics and the log (any state of the ioDimm).
 */
static void do_beacon(struct evhttp_request *req, struct evkeyvalq *q, struct dimm *d, const char *by)
{
	const char *v = evhttp_find_header(q, "state");
	bool on;
	if (!v || !strcmp(v, "on") || !strcmp(v, "1"))
		on = true;
	else if (!strcmp(v, "off") || !strcmp(v, "0"))
		on = false;
	else {
		send_error(req, 400, "Bad Request", "state: on or off");
		return;
	}
	char msg[300];
	if (d->beacon != on)
		log_info("%s: beacon %s (locate LED), requested over the control socket by %s",
			 d->cfg->name, on ? "on" : "off", by);
	d->beacon = on;
	snprintf(msg, sizeof msg, "%s: beacon %s", d->cfg->name, on ? "on" : "off");
	struct evbuffer *b = reply_buffer(req);
	if (!b)
		return;
	evbuffer_add_printf(b, "{\"ok\": true, \"dimm\": ");
	json_str(b, d->cfg->name);
	evbuffer_add_printf(b, ", \"action\": \"beacon\", \"beacon\": %s, \"state\": \"%s\", \"message\": ",
			    on ? "true" : "false", dimm_mstate_name(d->mstate));
	json_str(b, msg);
	evbuffer_add_printf(b, "}\n");
	send_json(req, 200, "OK", b);
	evbuffer_free(b);
}

/* What an action's query asks for beside its verb (format, test-stall,
 * inject), for its command. */
struct action_params {
	struct dimm_format_req fmt;
	uint64_t stall_ms;
	enum inject_kind inject;
	int64_t inject_value;
};

/* ---- each verb's steps (verbs[] below) ----------------------------------- */

/* parse: the query's parameters into p; false if refused (answered). */
static bool format_parse(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
			 struct dimm *d, struct action_params *p)
{
	char msg[1536];
	if (format_params(q, &p->fmt, msg, sizeof msg)) {
		send_error(req, 400, "Bad Request", msg);
		return false;
	}
	return true;
}

static bool stall_parse(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
			struct dimm *d, struct action_params *p)
{
	const char *v = evhttp_find_header(q, "ms");
	if (!v || parse_uint(v, 1, 60000, &p->stall_ms)) {
		send_error(req, 400, "Bad Request", "ms: 1 to 60000");
		return false;
	}
	return true;
}

/* Refused too: with fault injection off (403), and in any state but
 * attached, busy ones included, with its own reason (409). */
static bool inject_parse(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
			 struct dimm *d, struct action_params *p)
{
	char msg[1536];
	if (srv->cfg.fault_injection != 1) {
		send_error(req, 403, "Forbidden",
			   "fault injection is off: it is for simulated ioDimms in tests; set "
			   "[server] fault_injection = yes in the configuration and restart flashd");
		return false;
	}
	if (inject_params(q, &p->inject, &p->inject_value, msg, sizeof msg)) {
		send_error(req, 400, "Bad Request", msg);
		return false;
	}
	if (d->mstate != DM_ATTACHED) {
		snprintf(msg, sizeof msg, "%s is not attached (%s): nothing to inject into", d->cfg->name,
			 dimm_mstate_name(d->mstate));
		send_error(req, 409, "Conflict", msg);
		return false;
	}
	return true;
}

/* other: d is idle but not in a state the verb starts from; true if there
 * is nothing to do (200), false if refused (409); msg says which. */
static bool attach_other(const struct dimm *d, char *msg, size_t len)
{
	snprintf(msg, len, "%s is attached already", d->cfg->name);
	return true;
}

static bool detach_other(const struct dimm *d, char *msg, size_t len)
{
	snprintf(msg, len, "%s is not attached (%s)", d->cfg->name, dimm_mstate_name(d->mstate));
	return true;
}

static bool format_other(const struct dimm *d, char *msg, size_t len)
{
	snprintf(msg, len, "%s is attached: detach it first (flashctl detach %s); a format erases "
		 "every sector", d->cfg->name, d->cfg->name);
	return false;
}

static bool checkpoint_other(const struct dimm *d, char *msg, size_t len)
{
	snprintf(msg, len, "%s is not attached (%s): nothing to checkpoint", d->cfg->name,
		 dimm_mstate_name(d->mstate));
	return false;
}

/* done: the main state the command's result leaves d in (before: the one
 * it started from). */
static void attach_done(struct dimm *d, const struct dimm_cmd *cmd, enum dimm_mstate before)
{
	if (cmd->rc == 0) {
		d->mstate = DM_ATTACHED;
		d->exported = true; /* d->info and d->size were set before the reply */
	} else {
		d->mstate = DM_FAILED;
	}
}

static void detach_done(struct dimm *d, const struct dimm_cmd *cmd, enum dimm_mstate before)
{
	if (cmd->rc == -EBUSY) {
		/* refused: clients connected, no --force; nothing closed */
		d->mstate = before;
		d->exported = true;
	} else {
		d->mstate = DM_DETACHED;
	}
}

static void format_done(struct dimm *d, const struct dimm_cmd *cmd, enum dimm_mstate before)
{
	d->mstate = cmd->rc == 0 ? DM_DETACHED : before;
}

static void checkpoint_done(struct dimm *d, const struct dimm_cmd *cmd, enum dimm_mstate before)
{
	if (cmd->st.attached) {
		d->mstate = DM_ATTACHED;
	} else {
		/* the FTL did not reopen: the thread closed its connections */
		d->exported = false;
		d->mstate = DM_FAILED;
	}
}

/* ---- the verbs ----------------------------------------------------------- */

#define MS(st) (1u << (st))  /* a set of main states */

/*
 * A verb of POST /v1/dimms/NAME/VERB.  One the main thread serves at once
 * in any state (serve: beacon) posts no command.  The others are checked
 * in this order, each refusal answered (do_action): flashd not shutting
 * down (503); parse (400, or the verb's own); the ioDimm idle (attached,
 * detached or failed; else 409 busy); a state in from, else other says
 * there is nothing to do (200) or refuses (409); confirm=yes if the verb
 * needs it (400).  Then the ioDimm goes into transient (unless
 * keeps_state), a detach withdraws the export first, and cmd is posted to
 * its thread; done sets the main state from the result (action_done).
 */
struct ctl_verb {
	const char *name;
	void (*serve)(struct evhttp_request *req, struct evkeyvalq *q, struct dimm *d,
		      const char *by);
	enum dimm_cmd_type cmd;
	bool test_hook;               /* only with FLASHD_TEST_HOOKS=1 (srv->test_hooks) */
	bool (*parse)(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
		      struct dimm *d, struct action_params *p);   /* NULL: no parameters */
	unsigned from;                /* the states it starts from (MS) */
	/* idle, not in from (NULL when from has every idle state parse lets by) */
	bool (*other)(const struct dimm *d, char *msg, size_t len);
	bool confirm;                 /* needs confirm=yes (it erases data) */
	enum dimm_mstate transient;   /* while the command runs */
	bool keeps_state;             /* no transient state: the command runs beside */
	bool withdraw_export;         /* no new connection from the request on */
	bool quiet;                   /* not logged (a test hook) */
	void (*done)(struct dimm *d, const struct dimm_cmd *cmd, enum dimm_mstate before);
};

static const struct ctl_verb verbs[] = {
	{ .name = "attach", .cmd = DCMD_ATTACH, .from = MS(DM_DETACHED) | MS(DM_FAILED),
	  .other = attach_other, .transient = DM_ATTACHING, .done = attach_done },
	{ .name = "detach", .cmd = DCMD_DETACH, .from = MS(DM_ATTACHED), .other = detach_other,
	  .transient = DM_DETACHING, .withdraw_export = true, .done = detach_done },
	{ .name = "format", .cmd = DCMD_FORMAT, .parse = format_parse,
	  .from = MS(DM_DETACHED) | MS(DM_FAILED), .other = format_other, .confirm = true,
	  .transient = DM_FORMATTING, .done = format_done },
	{ .name = "checkpoint", .cmd = DCMD_CHECKPOINT, .from = MS(DM_ATTACHED),
	  .other = checkpoint_other, .transient = DM_CHECKPOINTING, .done = checkpoint_done },
	{ .name = "test-stall", .cmd = DCMD_STALL, .test_hook = true, .parse = stall_parse,
	  .from = MS(DM_ATTACHED) | MS(DM_DETACHED) | MS(DM_FAILED), .keeps_state = true,
	  .quiet = true },
	{ .name = "inject", .cmd = DCMD_INJECT, .parse = inject_parse, .from = MS(DM_ATTACHED),
	  .keeps_state = true },
	{ .name = "beacon", .serve = do_beacon },
};
#define NVERBS (sizeof verbs / sizeof *verbs)

/* The verb of a command (a command of none: NULL). */
static const struct ctl_verb *verb_of_cmd(enum dimm_cmd_type t)
{
	for (size_t i = 0; i < NVERBS; i++)
		if (!verbs[i].serve && verbs[i].cmd == t)
			return &verbs[i];
	return NULL;
}

/* The verb named name; NULL if there is none (answered 404). */
static const struct ctl_verb *verb_named(struct server *srv, struct evhttp_request *req,
					 const char *name)
{
	for (size_t i = 0; i < NVERBS; i++)
		if (!strcmp(verbs[i].name, name) && (!verbs[i].test_hook || srv->test_hooks))
			return &verbs[i];
	char msg[1536];
	snprintf(msg, sizeof msg, "unknown action '%s' (attach, detach, format, checkpoint, beacon, "
		 "inject)", name);
	send_error(req, 404, "Not Found", msg);
	return NULL;
}

/* The answer to an action (ctl_answer): {"ok", "dimm", "action", "state",
 * "message" or "error"}, with the HTTP code of cr->rc. */
void action_answer(struct ctl_req *cr, struct evhttp_request *req, struct evbuffer *b)
{
	const char *reason;
	int code = http_code(cr->rc, &reason);
	struct dimm *d = cr->target;
	evbuffer_add_printf(b, "{\"ok\": %s, \"dimm\": ", cr->rc ? "false" : "true");
	json_str(b, d->cfg->name);
	evbuffer_add_printf(b, ", \"action\": \"%s\", \"state\": \"%s\", \"%s\": ",
			    verb_of_cmd(cr->action)->name, dimm_mstate_name(d->mstate),
			    cr->rc ? "error" : "message");
	json_str(b, cr->msg);
	evbuffer_add_printf(b, "}\n");
	send_json(req, code, reason, b);
}

/* The main state an action's result leaves the ioDimm in (the verb's
 * done); a failure is logged. */
void action_done(struct dimm *d, struct dimm_cmd *cmd, enum dimm_mstate before)
{
	const struct ctl_verb *v = verb_of_cmd(cmd->type);
	if (!v || !v->done)
		return;
	v->done(d, cmd, before);
	if (!d->srv->shutting_down) {
		if (cmd->rc && cmd->rc != -ESHUTDOWN)
			log_warn("%s: %s failed: %s", d->cfg->name, v->name, cmd->msg);
		server_update_status(d->srv);
	}
}

/*
 * do_action's checks of d's state for v: true if v may start.  Else false,
 * answered: 409 (busy, or v->other refuses), 200 (v->other says there is
 * nothing to do) or 400 (no confirm=yes where v needs it).
 */
static bool action_may_start(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
			     struct dimm *d, const struct ctl_verb *v)
{
	char msg[1536];
	const char *name = d->cfg->name;
	enum dimm_mstate st = d->mstate;
	if (st != DM_ATTACHED && st != DM_DETACHED && st != DM_FAILED) {
		snprintf(msg, sizeof msg, "%s is busy: %s; try again when that is done", name,
			 dimm_mstate_name(st));
		send_error(req, 409, "Conflict", msg);
		return false;
	}
	if (!(v->from & MS(st))) {
		if (!v->other(d, msg, sizeof msg)) {
			send_error(req, 409, "Conflict", msg);
			return false;
		}
		/* nothing to do: a success */
		struct ctl_req *cr = ctl_req_new(srv, req, CK_ACTION);
		if (!cr)
			return false;
		cr->target = d;
		cr->action = v->cmd;
		cr->before = st;
		snprintf(cr->msg, sizeof cr->msg, "%s", msg);
		ctl_answer(cr);
		ctl_req_free(cr);
		return false;
	}
	if (v->confirm && !query_flag(q, "confirm", "yes")) {
		snprintf(msg, sizeof msg, "a %s erases every sector of %s: add confirm=yes to the "
			 "request (flashctl %s %s --yes)", v->name, name, v->name, name);
		send_error(req, 400, "Bad Request", msg);
		return false;
	}
	return true;
}

/* Post v's command with p to cr's ioDimm, which enters v->transient; the
 * reply goes out when the command is back (ctl_cmd_done).  by: who asks,
 * logged. */
static void action_post(struct ctl_req *cr, struct evkeyvalq *q, const struct ctl_verb *v,
			const struct action_params *p, const char *by)
{
	struct dimm *d = cr->target;
	struct dimm_cmd *cmd = calloc(1, sizeof *cmd);
	if (!cmd) {
		cr->rc = -ENOMEM;
		snprintf(cr->msg, sizeof cr->msg, "out of memory");
		ctl_answer(cr);
		ctl_req_free(cr);
		return;
	}
	cmd->type = v->cmd;
	cmd->owner = cr;
	cmd->fmt = p->fmt;
	cmd->stall_ms = (uint32_t)p->stall_ms;
	cmd->inject = p->inject;
	cmd->inject_value = p->inject_value;
	cmd->force = query_flag(q, "force", "yes");
	cmd->slot = d->index;
	if (v->withdraw_export) {
		/* withdraw the export first: no handshake hands it a socket from
		 * now on (flashd.h, "Attach state") */
		d->exported = false;
	}
	if (!v->keeps_state)
		d->mstate = v->transient;
	if (!v->quiet)
		log_info("%s: %s%s requested over the control socket by %s", d->cfg->name, v->name,
			 cmd->force && v->cmd == DCMD_DETACH ? " (force)" : "", by);
	if (!v->keeps_state)
		server_update_status(d->srv);
	cr->pending = 1;
	dimm_post(d, cmd);
}

/* POST /v1/dimms/NAME/VERB (struct ctl_verb says the steps); by: who asks
 * (may_act), logged with it */
void do_action(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
	       struct dimm *d, const char *verb, const char *by)
{
	const struct ctl_verb *v = verb_named(srv, req, verb);
	if (!v)
		return;
	if (v->serve) {
		v->serve(req, q, d, by);
		return;
	}
	if (srv->shutting_down) {
		send_error(req, 503, "Service Unavailable", "flashd is shutting down");
		return;
	}
	struct action_params p = { .fmt = { .parity_width = -1 }, .inject = INJ_DIE_FAIL };
	if ((v->parse && !v->parse(srv, req, q, d, &p)) || !action_may_start(srv, req, q, d, v))
		return;
	struct ctl_req *cr = ctl_req_new(srv, req, CK_ACTION);
	if (!cr)
		return;
	cr->target = d;
	cr->action = v->cmd;
	cr->before = d->mstate;
	action_post(cr, q, v, &p, by);
}

/* POST /v1/reload: what SIGHUP does (reload.c, server_reload), with the
 * result; by: who asks (may_act), in its log lines. */
void do_reload(struct server *srv, struct evhttp_request *req, const char *by)
{
	struct reload_result r;
	char source[100];
	snprintf(source, sizeof source, "control socket (%s)", by);
	server_reload(srv, source, &r);
	if (r.rc) {
		send_error(req, r.rc == -ENOENT ? 409 : 400, r.rc == -ENOENT ? "Conflict" : "Bad Request",
			   r.error);
		reload_result_free(&r);
		return;
	}
	struct evbuffer *b = reply_buffer(req);
	if (!b) {
		reload_result_free(&r);
		return;
	}
	char msg[1400];
	snprintf(msg, sizeof msg, "reloaded %s: %d change(s) applied, %d not applied%s", r.config,
		 r.napplied, r.nnot_applied, r.nnot_applied ? " (they need a restart)" : "");
	evbuffer_add_printf(b, "{\"ok\": true, \"config\": ");
	json_str(b, r.config);
	evbuffer_add_printf(b, ", \"message\": ");
	json_str(b, msg);
	for (int list = 0; list < 2; list++) {
		const struct reload_item *it = list ? r.not_applied : r.applied;
		int n = list ? r.nnot_applied : r.napplied;
		evbuffer_add_printf(b, ", \"%s\": [", list ? "not_applied" : "applied");
		for (int i = 0; i < n; i++) {
			evbuffer_add_printf(b, "%s{\"key\": ", i ? ", " : "");
			json_str(b, it[i].key);
			evbuffer_add_printf(b, ", \"message\": ");
			json_str(b, it[i].msg);
			evbuffer_add_printf(b, "}");
		}
		evbuffer_add_printf(b, "]");
	}
	evbuffer_add_printf(b, "}\n");
	send_json(req, 200, "OK", b);
	evbuffer_free(b);
	reload_result_free(&r);
}
