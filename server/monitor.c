/*
 * server/monitor.c - health and history (flashd.h, "monitor.c"), on the
 * main thread.
 *
 * Once a second (HISTORY_PERIOD_MS) each ioDimm whose thread can answer
 * (attached, checkpointing, detached, failed) is asked for a snapshot with
 * its own command (struct dimm_monitor.cmd, at most one out at a time: a
 * busy thread skips samples instead of piling them up); the others are
 * described from their main state.  Every snapshot goes through
 * health_eval (health.c), so the health kept here is the one the views
 * compute, at most a second old:
 *   - a change is logged: "dimm0: health ok -> degraded: <first reason>;
 *     action: ..." at err level when it became failed (nothing is
 *     served: act now), warning when it got worse otherwise, notice when
 *     better, and a reason that appears without changing the state at
 *     warning;
 *   - systemd hears it (server_update_status: STATUS= names the state and
 *     each ioDimm that is not ok or not served, with its first reason);
 *   - the figures go into the ioDimm's ring of HISTORY_SAMPLES (five
 *     minutes), served as GET /v1/history: request counters, latency sums
 *     and the p99 of the interval (from the histograms' difference),
 *     garbage collection, media errors, reserves, temperature, health.
 * The tick also reads DRBD's state of the exports that are its lower
 * devices here (drbd.c), which the snapshots carry into health_eval.
 * Timestamps are the server's (unix ms when the snapshot came back), so a
 * client computes rates from them, not from when it happened to poll.
 * Memory: a ring and a command per ioDimm, allocated at start; nothing per
 * sample.  Cost per second and ioDimm: one snapshot on its thread
 * (ftl_get_stats, microseconds; the erase counts are recounted only after
 * 1/256 of the blocks' worth of erases); per second, drbd_refresh (a
 * failed open of /proc/drbd where DRBD is not loaded).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <systemd/sd-daemon.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "server/flashd.h"

enum { RD, WR };

/* One sample of one ioDimm.  io: the request figures are known (its thread
 * answered); ftl: the FTL figures are too (attached). */
struct hist_sample {
	int64_t t_ms;                  /* unix ms */
	uint8_t health;                /* enum health_state */
	uint8_t thermal;               /* enum ftl_thermal (ftl) */
	bool io, ftl, temp;
	uint32_t connections;
	uint64_t ops[2], bytes[2], other_ops;  /* since flashd started */
	uint64_t lat_n[2], lat_sum_ns[2];
	uint64_t p99_ns[2];            /* of the interval since the previous sample; 0: none */
	uint64_t gc_pages, gc_blocks;  /* since flashd started */
	uint64_t err_corrected, err_uncorrectable, err_program, err_erase; /* since the FTL opened */
	uint64_t lost_units;
	float reserves_pct, endurance_pct, temp_c, wa;
	uint32_t dies_failed, rebuild_left;
};

struct dimm_monitor {
	struct dimm_cmd cmd;           /* the sample command (cmd.sample) */
	bool posted;                   /* cmd is on the ioDimm's queue */
	bool known;                    /* health is from a sample */
	bool sampled_attached;         /* ... of an attached ioDimm */
	struct health health;          /* at the last sample */
	struct health now;             /* monitor_health's answer when not attached */
	uint64_t prev_lat[2][LAT_NBOUNDS + 1]; /* histograms at the previous sample */
	bool have_prev;
	struct hist_sample ring[HISTORY_SAMPLES];
	int head, count;               /* next slot; samples held */
};

struct monitor {
	struct event *timer;
	char status[2048];             /* the last STATUS= told to systemd */
};

static void status_if_changed(struct server *s);

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool attached_state(enum dimm_mstate st)
{
	return st == DM_ATTACHED || st == DM_CHECKPOINTING;
}

const struct health *monitor_health(const struct dimm *d)
{
	struct dimm_monitor *m = d->mon;
	if (!m)
		return NULL;
	if (attached_state(d->mstate)) {
		if (m->known && m->sampled_attached)
			return &m->health;
		/* just attached: not sampled yet, nothing known against it */
		m->now.state = HEALTH_OK;
		m->now.n = 0;
		return &m->now;
	}
	/* detached, failed, or in the middle of an action: the main thread
	 * knows all there is, now */
	struct dimm_status st;
	struct health_limits lim;
	dimm_status_main((struct dimm *)d, &st);
	health_limits_of(&d->srv->cfg, d->cfg, &lim);
	health_eval(&st, &lim, &m->now);
	return &m->now;
}

/* ---- the log ------------------------------------------------------------- */

static bool has_reason(const struct health *h, enum health_reason r)
{
	for (int i = 0; i < h->n; i++)
		if (h->item[i].reason == r)
			return true;
	return false;
}

/* Log what changed from was to now: the state, or a new reason. */
static void log_change(const struct dimm *d, const struct health *was, const struct health *now)
{
	const char *name = d->cfg->name;
	if (now->state != was->state) {
		if (now->state == HEALTH_OK) {
			log_msg(LOG_NOTICE, "%s: health %s -> ok", name, health_state_name(was->state));
			return;
		}
		const struct health_item *it = &now->item[0];
		int prio = now->state == HEALTH_FAILED ? LOG_ERR
			   : now->state > was->state  ? LOG_WARNING
						      : LOG_NOTICE;
		log_msg(prio, "%s: health %s -> %s: %s%s%s",
			name, health_state_name(was->state), health_state_name(now->state), it->msg,
			it->action[0] ? "; action: " : "", it->action);
		return;
	}
	for (int i = 0; i < now->n; i++) {
		const struct health_item *it = &now->item[i];
		if (it->level == HEALTH_OK || has_reason(was, it->reason))
			continue;
		log_warn("%s: health %s, also: %s%s%s", name, health_state_name(now->state), it->msg,
			 it->action[0] ? "; action: " : "", it->action);
	}
}

/* ---- samples ------------------------------------------------------------- */

static void record(struct dimm *d, const struct dimm_status *st)
{
	struct dimm_monitor *m = d->mon;
	struct server *srv = d->srv;
	struct health_limits lim;
	struct health h;
	health_limits_of(&srv->cfg, d->cfg, &lim);
	health_eval(st, &lim, &h);
	/* before the first sample an ioDimm counts as ok (monitor_start) */
	static const struct health none = { HEALTH_OK, 0, { { 0 } } };
	log_change(d, m->known ? &m->health : &none, &h);
	m->health = h;
	m->known = true;
	m->sampled_attached = st->answered && st->attached;

	struct hist_sample *s = &m->ring[m->head];
	memset(s, 0, sizeof *s);
	s->t_ms = now_ms();
	s->health = (uint8_t)h.state;
	s->connections = st->connections;
	s->io = st->answered;
	if (s->io) {
		const struct io_counters *io = &st->io;
		s->ops[RD] = io->ops[IOK_READ];
		s->ops[WR] = io->ops[IOK_WRITE];
		s->bytes[RD] = io->bytes[IOK_READ];
		s->bytes[WR] = io->bytes[IOK_WRITE];
		for (int k = 0; k < IOK_N; k++)
			if (k != IOK_READ && k != IOK_WRITE)
				s->other_ops += io->ops[k];
		const int cls[2] = { LAT_READ, LAT_WRITE };
		for (int c = 0; c < 2; c++) {
			uint64_t delta[LAT_NBOUNDS + 1];
			for (int i = 0; i <= LAT_NBOUNDS; i++) {
				uint64_t v = io->lat[cls[c]][i];
				s->lat_n[c] += v;
				/* counters since start never go back; a restart of
				 * flashd is a new ring */
				delta[i] = m->have_prev && v >= m->prev_lat[c][i] ? v - m->prev_lat[c][i] : v;
				m->prev_lat[c][i] = v;
			}
			s->lat_sum_ns[c] = io->lat_sum_ns[cls[c]];
			s->p99_ns[c] = (uint64_t)lat_quantile(delta, 0.99);
		}
		m->have_prev = true;
		s->gc_pages = st->gc_pages_relocated;
		s->gc_blocks = st->gc_blocks_collected;
	}
	s->ftl = st->answered && st->attached;
	if (s->ftl) {
		const struct ftl_stats *fs = &st->stats;
		s->err_corrected = fs->read_errors_corrected;
		s->err_uncorrectable = fs->read_errors_uncorrectable;
		s->err_program = fs->program_failures;
		s->err_erase = fs->erase_failures;
		s->lost_units = fs->lost_units;
		s->reserves_pct = (float)fs->reserve_percent;
		s->endurance_pct = (float)fs->endurance_used_percent;
		s->wa = (float)fs->write_amplification;
		s->dies_failed = fs->dies_failed;
		s->rebuild_left = fs->rebuild_bands_left;
		s->thermal = (uint8_t)st->info.thermal;
		s->temp = st->info.temp_mc != FTL_TEMP_NONE;
		s->temp_c = s->temp ? (float)(st->info.temp_mc / 1000.0) : 0;
	}
	m->head = (m->head + 1) % HISTORY_SAMPLES;
	if (m->count < HISTORY_SAMPLES)
		m->count++;
}

void monitor_sample_done(struct dimm_cmd *cmd)
{
	struct dimm *d = cmd->d;
	struct dimm_monitor *m = d->mon;
	m->posted = false;
	if (d->srv->shutting_down)
		return;
	if (cmd->st.answered) {
		cmd->st.drbd = d->drbd; /* main thread's, like the beacon */
		record(d, &cmd->st);
	} else {
		struct dimm_status st;
		dimm_status_main(d, &st);
		record(d, &st);
	}
	status_if_changed(d->srv);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	if (srv->shutting_down)
		return;
	drbd_refresh(srv);
	bool changed = false;
	for (int i = 0; i < srv->ndimms; i++) {
		struct dimm *d = &srv->dimms[i];
		struct dimm_monitor *m = d->mon;
		if (m->posted)
			continue; /* the thread has not answered the last one yet */
		enum dimm_mstate ms = d->mstate;
		if (ms == DM_ATTACHED || ms == DM_CHECKPOINTING || ms == DM_DETACHED || ms == DM_FAILED) {
			struct dimm_cmd *c = &m->cmd;
			c->type = DCMD_STATUS;
			c->owner = NULL;
			c->sample = true;
			c->st.answered = false;
			m->posted = true;
			dimm_post(d, c);
		} else {
			struct dimm_status st;
			dimm_status_main(d, &st);
			record(d, &st);
			changed = true;
		}
	}
	if (changed)
		status_if_changed(srv);
}

int monitor_start(struct server *srv)
{
	struct monitor *mon = calloc(1, sizeof *mon);
	if (!mon)
		return -ENOMEM;
	for (int i = 0; i < srv->ndimms; i++) {
		srv->dimms[i].mon = calloc(1, sizeof *srv->dimms[i].mon);
		if (!srv->dimms[i].mon) {
			srv->monitor = mon;
			monitor_stop(srv);
			return -ENOMEM;
		}
	}
	mon->timer = event_new(srv->base, -1, EV_PERSIST, tick, srv);
	struct timeval tv = { HISTORY_PERIOD_MS / 1000, (HISTORY_PERIOD_MS % 1000) * 1000 };
	srv->monitor = mon;
	if (!mon->timer || event_add(mon->timer, &tv)) {
		monitor_stop(srv);
		return -ENOMEM;
	}
	/* the first sample at once: STATUS= and the log from the start */
	event_active(mon->timer, EV_TIMEOUT, 0);
	return 0;
}

/* After the ioDimm threads have ended and their commands came back
 * (ctl_stop): no sample command is out any more. */
void monitor_stop(struct server *srv)
{
	struct monitor *mon = srv->monitor;
	if (!mon)
		return;
	if (mon->timer)
		event_free(mon->timer);
	for (int i = 0; i < srv->ndimms; i++) {
		free(srv->dimms[i].mon);
		srv->dimms[i].mon = NULL;
	}
	free(mon);
	srv->monitor = NULL;
}

/* ---- systemd ------------------------------------------------------------- */

/*
 * STATUS= for systemd: the server's health when it is not ok, what is
 * served, and each ioDimm that is not served or not ok, with its first
 * reason: "STATUS=degraded: serving 2 of 2 ioDimm(s); dimm0 degraded: too
 * hot: ..." (an ioDimm that did not open: "dimm1 failed: <why>").
 */
static void status_line(struct server *s, char *buf, size_t len)
{
	char *p = buf, *end = buf + len;
	int up = 0;
	enum health_state worst = HEALTH_OK;
	for (int i = 0; i < s->ndimms; i++) {
		struct dimm *d = &s->dimms[i];
		up += d->exported;
		const struct health *h = monitor_health(d);
		enum health_state hs = h ? h->state : d->mstate == DM_FAILED ? HEALTH_FAILED : HEALTH_OK;
		if (hs > worst)
			worst = hs;
	}
	p += snprintf(p, (size_t)(end - p), "STATUS=%s%sserving %d of %d ioDimm(s)",
		      worst != HEALTH_OK ? health_state_name(worst) : "", worst != HEALTH_OK ? ": " : "",
		      up, s->ndimms);
	for (int i = 0; i < s->ndimms && p < end - 1; i++) {
		struct dimm *d = &s->dimms[i];
		const struct health *h = monitor_health(d);
		if (d->mstate == DM_FAILED) {
			pthread_mutex_lock(&d->lock);
			p += snprintf(p, (size_t)(end - p), "; %s failed: %s", d->cfg->name, d->open_errmsg);
			pthread_mutex_unlock(&d->lock);
		} else if (h && h->state != HEALTH_OK) {
			p += snprintf(p, (size_t)(end - p), "; %s %s: %s", d->cfg->name,
				      health_state_name(h->state), h->item[0].msg);
		} else if (!d->exported) {
			p += snprintf(p, (size_t)(end - p), "; %s %s", d->cfg->name,
				      dimm_mstate_name(d->mstate));
		}
	}
	/* one line: an error message could hold a newline */
	for (char *q = buf; *q; q++)
		if (*q == '\n')
			*q = ' ';
}

/* Main thread: after an attach, a detach, a reload, the start. */
void server_update_status(struct server *s)
{
	char buf[2048];
	status_line(s, buf, sizeof buf);
	if (s->monitor)
		snprintf(s->monitor->status, sizeof s->monitor->status, "%s", buf);
	sd_notify(0, buf);
}

/* After a sample: tell systemd only what changed. */
static void status_if_changed(struct server *s)
{
	char buf[2048];
	status_line(s, buf, sizeof buf);
	if (s->monitor && !strcmp(s->monitor->status, buf))
		return;
	if (s->monitor)
		snprintf(s->monitor->status, sizeof s->monitor->status, "%s", buf);
	sd_notify(0, buf);
}

/* ---- /v1/history --------------------------------------------------------- */

static const char *const hist_fields =
	"\"t_ms\", \"health\", \"connections\", \"read_ops\", \"write_ops\", \"other_ops\", "
	"\"read_bytes\", \"write_bytes\", \"read_lat_n\", \"read_lat_sum_ns\", \"write_lat_n\", "
	"\"write_lat_sum_ns\", \"read_p99_ns\", \"write_p99_ns\", \"gc_pages\", \"gc_blocks\", "
	"\"errors_corrected\", \"errors_uncorrectable\", \"program_failures\", \"erase_failures\", "
	"\"lost_units\", \"reserves_percent\", \"endurance_percent\", \"write_amplification\", "
	"\"dies_failed\", \"rebuild_bands_left\", \"thermal\", \"temperature_c\"";

static void num(struct evbuffer *b, bool known, uint64_t v)
{
	if (known)
		evbuffer_add_printf(b, ", %llu", (unsigned long long)v);
	else
		evbuffer_add_printf(b, ", null");
}

static void real(struct evbuffer *b, bool known, double v, int digits)
{
	if (known)
		evbuffer_add_printf(b, ", %.*f", digits, v);
	else
		evbuffer_add_printf(b, ", null");
}

void monitor_history_json(struct server *srv, struct evbuffer *b, int64_t since_ms)
{
	evbuffer_add_printf(b, "{\"period_ms\": %d, \"now_ms\": %lld, \"fields\": [%s], \"dimms\": [",
			    HISTORY_PERIOD_MS, (long long)now_ms(), hist_fields);
	for (int i = 0; i < srv->ndimms; i++) {
		struct dimm *d = &srv->dimms[i];
		struct dimm_monitor *m = d->mon;
		evbuffer_add_printf(b, "%s{\"name\": \"", i ? ", " : "");
		/* [dimm] names come from the file: no quotes or control bytes
		 * (config.c); escape anyway */
		for (const char *c = d->cfg->name; *c; c++) {
			if (*c == '"' || *c == '\\')
				evbuffer_add_printf(b, "\\%c", *c);
			else if ((unsigned char)*c >= 0x20)
				evbuffer_add(b, c, 1);
		}
		evbuffer_add_printf(b, "\", \"samples\": [");
		int first = 1;
		for (int k = 0; m && k < m->count; k++) {
			int at = (m->head - m->count + k + HISTORY_SAMPLES) % HISTORY_SAMPLES;
			const struct hist_sample *s = &m->ring[at];
			if (s->t_ms <= since_ms)
				continue;
			evbuffer_add_printf(b, "%s[%lld, \"%s\", %u", first ? "" : ", ", (long long)s->t_ms,
					    health_state_name(s->health), s->connections);
			first = 0;
			num(b, s->io, s->ops[RD]);
			num(b, s->io, s->ops[WR]);
			num(b, s->io, s->other_ops);
			num(b, s->io, s->bytes[RD]);
			num(b, s->io, s->bytes[WR]);
			num(b, s->io, s->lat_n[RD]);
			num(b, s->io, s->lat_sum_ns[RD]);
			num(b, s->io, s->lat_n[WR]);
			num(b, s->io, s->lat_sum_ns[WR]);
			num(b, s->io && s->p99_ns[RD], s->p99_ns[RD]);
			num(b, s->io && s->p99_ns[WR], s->p99_ns[WR]);
			num(b, s->io, s->gc_pages);
			num(b, s->io, s->gc_blocks);
			num(b, s->ftl, s->err_corrected);
			num(b, s->ftl, s->err_uncorrectable);
			num(b, s->ftl, s->err_program);
			num(b, s->ftl, s->err_erase);
			num(b, s->ftl, s->lost_units);
			real(b, s->ftl, s->reserves_pct, 3);
			real(b, s->ftl, s->endurance_pct, 4);
			real(b, s->ftl, s->wa, 4);
			num(b, s->ftl, s->dies_failed);
			num(b, s->ftl, s->rebuild_left);
			if (s->ftl && s->temp)
				evbuffer_add_printf(b, ", \"%s\"", ftl_thermal_name(s->thermal));
			else
				evbuffer_add_printf(b, ", null");
			real(b, s->ftl && s->temp, s->temp_c, 1);
			evbuffer_add_printf(b, "]");
		}
		evbuffer_add_printf(b, "]}");
	}
	evbuffer_add_printf(b, "]}\n");
}

/* ---- reload -------------------------------------------------------------- */

static void limits_text(const struct health_limits *l, char *buf, size_t len)
{
	snprintf(buf, len, "reserves_warn %g %%, endurance_warn %g %%, temperature_warn %g C",
		 l->reserves_warn, l->endurance_warn, l->temperature_warn);
}

void monitor_reload(struct server *srv, struct server_cfg *n, struct reload_result *r)
{
	struct server_cfg *o = &srv->cfg;
	char a[200], b[200], key[160];
	/* thresholds: the main thread alone reads them (health_eval here and
	 * in ctl.c), so they are simply replaced; the next sample judges by
	 * them */
	struct health_limits lo, ln;
	health_limits_of(o, NULL, &lo);
	health_limits_of(n, NULL, &ln);
	limits_text(&lo, a, sizeof a);
	limits_text(&ln, b, sizeof b);
	if (strcmp(a, b))
		reload_item(r, true, "[server] health thresholds", "%s -> %s", a, b);
	o->health = n->health;
	for (int i = 0; i < o->ndimms; i++) {
		for (int j = 0; j < n->ndimms; j++) {
			if (strcmp(o->dimms[i].name, n->dimms[j].name))
				continue;
			health_limits_of(o, &o->dimms[i], &lo);
			health_limits_of(n, &n->dimms[j], &ln);
			o->dimms[i].health = n->dimms[j].health;
			limits_text(&lo, a, sizeof a);
			limits_text(&ln, b, sizeof b);
			snprintf(key, sizeof key, "[dimm %s] health thresholds", o->dimms[i].name);
			if (strcmp(a, b))
				reload_item(r, true, key, "%s -> %s", a, b);
		}
	}
	if (!acl_equal(&o->metrics_allow, &n->metrics_allow)) {
		/* read by the listener's requests, on this thread */
		reload_item(r, true, "[server] metrics_allow", "rules changed (new requests)");
		acl_free(&o->metrics_allow);
		o->metrics_allow = n->metrics_allow;
		n->metrics_allow = (struct acl){ 0 };
	}
	const char *ol = o->metrics_listen, *nl = n->metrics_listen;
	if ((ol || nl) && (!ol || !nl || strcmp(ol, nl)))
		reload_item(r, false, "[server] metrics_listen", "'%s' -> '%s': needs a restart (the "
			    "running value is kept)", ol ? ol : "(off)", nl ? nl : "(off)");
	const char *oh = o->metrics_host_names, *nh = n->metrics_host_names;
	if ((oh || nh) && (!oh || !nh || strcmp(oh, nh))) {
		/* read by the listener's requests, on this thread */
		reload_item(r, true, "[server] metrics_host_names", "'%s' -> '%s' (new requests)",
			    oh ? oh : "(none)", nh ? nh : "(none)");
		free(o->metrics_host_names);
		o->metrics_host_names = n->metrics_host_names;
		n->metrics_host_names = NULL;
	}
	if (srv->monitor)
		event_active(srv->monitor->timer, EV_TIMEOUT, 0);
}
