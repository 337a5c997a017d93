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
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "common/parse.h"
#include "common/units.h"
#include "server/dashboard/dashboard.h"
#include "server/flashd.h"

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

enum ctl_kind { CK_STATUS, CK_METRICS, CK_ACTION };

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
	struct ctl_req *next, *prev;
};

static const char *action_name(enum dimm_cmd_type t)
{
	switch (t) {
	case DCMD_STATUS: return "status";
	case DCMD_ATTACH: return "attach";
	case DCMD_DETACH: return "detach";
	case DCMD_FORMAT: return "format";
	case DCMD_CHECKPOINT: return "checkpoint";
	case DCMD_STALL: return "test-stall";
	case DCMD_INJECT: return "inject";
	}
	return "?";
}

/* ---- JSON and text helpers ---------------------------------------------- */

static void json_str(struct evbuffer *b, const char *s)
{
	evbuffer_add(b, "\"", 1);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			evbuffer_add_printf(b, "\\%c", ch);
		else if (ch < 0x20)
			evbuffer_add_printf(b, "\\u%04x", ch);
		else
			evbuffer_add(b, s, 1);
	}
	evbuffer_add(b, "\"", 1);
}

#define U(name, v) evbuffer_add_printf(b, "%s\"" name "\": %llu", sep, (unsigned long long)(v)), sep = ", "
#define D(name, v) evbuffer_add_printf(b, "%s\"" name "\": %.4f", sep, (double)(v)), sep = ", "

static void json_stats(struct evbuffer *b, const struct ftl_stats *s)
{
	const char *sep = "";
	evbuffer_add_printf(b, "{");
	U("host_read_bytes", s->host_read_bytes);
	U("host_write_bytes", s->host_write_bytes);
	U("host_bytes_trimmed", s->host_trim_bytes);
	U("host_bytes_zeroed", s->host_zero_bytes);
	U("host_read_ops", s->host_read_ops);
	U("host_write_ops", s->host_write_ops);
	U("host_flush_ops", s->host_flush_ops);
	U("host_trim_ops", s->host_trim_ops);
	U("host_zero_ops", s->host_zero_ops);
	U("host_pages_written", s->host_pages_written);
	U("host_pages_read", s->host_pages_read);
	U("nand_pages_programmed", s->nand_pages_programmed);
	U("nand_pages_read", s->nand_pages_read);
	U("nand_spare_reads", s->nand_spare_reads);
	U("blocks_erased", s->blocks_erased);
	U("gc_pages_relocated", s->gc_pages_relocated);
	U("gc_blocks_collected", s->gc_blocks_collected);
	U("meta_pages_programmed", s->meta_pages_programmed);
	U("checkpoints", s->checkpoints);
	D("write_amplification", s->write_amplification);
	U("read_errors_corrected", s->read_errors_corrected);
	U("read_errors_uncorrectable", s->read_errors_uncorrectable);
	U("crc_errors", s->crc_errors);
	U("program_failures", s->program_failures);
	U("erase_failures", s->erase_failures);
	U("lost_units", s->lost_units);
	if (s->lost_units && s->lost_first <= s->lost_last) {
		U("lost_first_unit", s->lost_first);
		U("lost_last_unit", s->lost_last);
	}
	U("parity_pages_programmed", s->parity_pages_programmed);
	U("parity_rebuilds", s->parity_rebuilds);
	U("parity_rebuild_failures", s->parity_rebuild_failures);
	U("parity_stripes_unprotected", s->parity_stripes_unprotected);
	U("parity_pad_pages", s->parity_pad_pages);
	U("parity_ppl_pages", s->parity_ppl_pages);
	U("dies_failed", s->dies_failed);
	U("rebuild_bands_total", s->rebuild_bands_total);
	U("rebuild_bands_left", s->rebuild_bands_left);
	U("blocks_total", s->blocks_total);
	U("blocks_free", s->blocks_free);
	U("blocks_data", s->blocks_data);
	U("blocks_bad", s->blocks_bad);
	U("blocks_bad_grown", s->blocks_bad_grown);
	U("blocks_meta", s->blocks_meta);
	U("valid_pages", s->valid_pages);
	U("erase_count_min", s->erase_min);
	D("erase_count_avg", s->erase_avg);
	U("erase_count_max", s->erase_max);
	U("rated_pe_cycles", s->rated_pe_cycles);
	D("reserve_percent", s->reserve_percent);
	D("endurance_used_percent", s->endurance_used_percent);
	U("refresh_marked", s->refresh_marked);
	U("refresh_collected", s->refresh_collected);
	U("wl_collected", s->wl_collected);
	U("l2p_bytes", s->l2p_bytes);
	U("ram_bytes", s->ram_bytes);
	evbuffer_add_printf(b, "}");
}

static double endurance_used(const struct ftl_stats *s)
{
	return s->rated_pe_cycles ? 100.0 * s->erase_avg / s->rated_pe_cycles : 0;
}

/* A latency histogram of struct io_counters: bounds, then per class. */
static void json_hist(struct evbuffer *b, const uint64_t (*h)[LAT_NBOUNDS + 1],
		      const uint64_t *sum_ns)
{
	evbuffer_add_printf(b, "{\"bucket_bounds_ns\": [");
	for (int i = 0; i < LAT_NBOUNDS; i++)
		evbuffer_add_printf(b, "%s%llu", i ? ", " : "", (unsigned long long)lat_bounds_ns[i]);
	evbuffer_add_printf(b, "]");
	for (int l = 0; l < LAT_N; l++) {
		uint64_t n = 0;
		for (int i = 0; i <= LAT_NBOUNDS; i++)
			n += h[l][i];
		evbuffer_add_printf(b, ", \"%s\": {\"count\": %llu, \"sum_ns\": %llu, \"buckets\": [",
				    lat_class_names[l], (unsigned long long)n, (unsigned long long)sum_ns[l]);
		for (int i = 0; i <= LAT_NBOUNDS; i++)
			evbuffer_add_printf(b, "%s%llu", i ? ", " : "", (unsigned long long)h[l][i]);
		evbuffer_add_printf(b, "]}");
	}
	evbuffer_add_printf(b, "}");
}

static void json_io(struct evbuffer *b, const struct io_counters *io)
{
	const char *sep = "";
	evbuffer_add_printf(b, "{\"ops\": {");
	for (int k = 0; k < IOK_N; k++, sep = ", ")
		evbuffer_add_printf(b, "%s\"%s\": %llu", sep, io_kind_names[k], (unsigned long long)io->ops[k]);
	evbuffer_add_printf(b, "}, \"errors\": {");
	sep = "";
	for (int k = 0; k < IOK_N; k++, sep = ", ")
		evbuffer_add_printf(b, "%s\"%s\": %llu", sep, io_kind_names[k],
				    (unsigned long long)io->errors[k]);
	evbuffer_add_printf(b, "}, \"bytes\": {");
	sep = "";
	for (int k = 0; k < IOK_N; k++, sep = ", ")
		evbuffer_add_printf(b, "%s\"%s\": %llu", sep, io_kind_names[k], (unsigned long long)io->bytes[k]);
	evbuffer_add_printf(b, "}, \"latency\": ");
	json_hist(b, io->lat, io->lat_sum_ns);
	evbuffer_add_printf(b, ", \"service_latency\": ");
	json_hist(b, io->svc, io->svc_sum_ns);
	evbuffer_add_printf(b, ", \"ftl_turn\": {\"max_ns\": %llu, \"over_10ms\": %llu}}",
			    (unsigned long long)io->ftl_turn_max_ns,
			    (unsigned long long)io->ftl_turns_over_10ms);
}

/* Why a snapshot has no FTL figures, or NULL. */
static const char *snapshot_note(const struct ctl_req *cr, const struct dimm_status *st, char *buf,
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

/* "health": {"state", "reasons": [{"reason", "level", "message", "action"}...]} */
static void json_health(struct evbuffer *b, const struct health *h)
{
	evbuffer_add_printf(b, "{\"state\": \"%s\", \"reasons\": [", health_state_name(h->state));
	for (int i = 0; i < h->n; i++) {
		const struct health_item *it = &h->item[i];
		evbuffer_add_printf(b, "%s{\"reason\": \"%s\", \"level\": \"%s\", \"message\": ",
				    i ? ", " : "", health_reason_name(it->reason),
				    health_state_name(it->level));
		json_str(b, it->msg);
		evbuffer_add_printf(b, ", \"action\": ");
		json_str(b, it->action);
		evbuffer_add_printf(b, "}");
	}
	evbuffer_add_printf(b, "]}");
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
static enum health_state req_health(const struct ctl_req *cr)
{
	if (cr->only >= 0)
		return cr->h[cr->only].state;
	return health_worst(cr->h, cr->srv->ndimms);
}

/* "dimm0 degraded: <first reason>; dimm1 warning: ..." for the ioDimms
 * that are not ok ("" if all are). */
static void health_summary(const struct ctl_req *cr, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	for (int i = 0; i < cr->srv->ndimms && n < len; i++) {
		const struct health *h = &cr->h[i];
		if (h->state == HEALTH_OK)
			continue;
		n += (size_t)snprintf(buf + n, len - n, "%s%s %s: %s", n ? "; " : "", cr->st[i].name,
				      health_state_name(h->state), h->item[0].msg);
	}
}

/*
 * ", \"drbd\": {...}" of a DRBD lower device (drbd.c): {"device":
 * "/dev/drbd0", "minor": 0, "resource": "r0" ("" without udev's link),
 * "lower": "/dev/nbd0", "role", "peer_role", "connection", "disk",
 * "peer_disk", "protocol" (as DRBD spells them, "" when it does not say),
 * "sync_percent" (null without a resync), "sync_finish" ("" likewise)}
 */
static void json_drbd(struct evbuffer *b, const struct drbd_lower *l)
{
	evbuffer_add_printf(b, ", \"drbd\": {\"device\": \"/dev/drbd%d\", \"minor\": %d, \"resource\": ",
			    l->minor, l->minor);
	json_str(b, l->resource);
	char lower[32];
	snprintf(lower, sizeof lower, "/dev/%s", l->nbd);
	evbuffer_add_printf(b, ", \"lower\": ");
	json_str(b, lower);
	const struct { const char *key, *val; } f[] = {
		{ "role", l->role }, { "peer_role", l->peer_role }, { "connection", l->cstate },
		{ "disk", l->disk }, { "peer_disk", l->peer_disk }, { "protocol", l->protocol },
		{ "sync_finish", l->sync_finish },
	};
	for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
		evbuffer_add_printf(b, ", \"%s\": ", f[k].key);
		json_str(b, f[k].val);
	}
	if (l->sync_permille >= 0)
		evbuffer_add_printf(b, ", \"sync_percent\": %.1f}", l->sync_permille / 10.0);
	else
		evbuffer_add_printf(b, ", \"sync_percent\": null}");
}

static void json_dimm(struct ctl_req *cr, struct evbuffer *b, const struct dimm_status *st)
{
	char note[160];
	evbuffer_add_printf(b, "{\"name\": ");
	json_str(b, st->name);
	evbuffer_add_printf(b, ", \"export\": ");
	json_str(b, st->export_name);
	evbuffer_add_printf(b, ", \"card\": ");
	json_str(b, st->card);
	evbuffer_add_printf(b, ", \"backend\": ");
	json_str(b, st->backend);
	evbuffer_add_printf(b, ", \"preset\": ");
	json_str(b, st->preset);
	evbuffer_add_printf(b, ", \"model\": ");
	json_str(b, st->model);
	evbuffer_add_printf(b, ", \"image\": ");
	json_str(b, st->image);
	evbuffer_add_printf(b, ", \"state\": ");
	json_str(b, st->state);
	if (st->error[0]) {
		evbuffer_add_printf(b, ", \"error\": ");
		json_str(b, st->error);
	}
	const char *n = snapshot_note(cr, st, note, sizeof note);
	if (n) {
		evbuffer_add_printf(b, ", \"note\": ");
		json_str(b, n);
	}
	evbuffer_add_printf(b, ", \"health\": ");
	json_health(b, &cr->h[st - cr->st]);
	evbuffer_add_printf(b, ", \"beacon\": %s", st->beacon ? "true" : "false");
	if (st->drbd.lower)
		json_drbd(b, &st->drbd);
	if (st->answered && st->attached && st->info.temp_mc != FTL_TEMP_NONE)
		evbuffer_add_printf(b, ", \"temperature_celsius\": %.1f, \"temperature_max_celsius\": %.1f, "
				       "\"thermal\": \"%s\"",
				    st->info.temp_mc / 1000.0, st->info.temp_max_mc / 1000.0,
				    ftl_thermal_name(st->info.thermal));
	else
		evbuffer_add_printf(b, ", \"temperature_celsius\": null");
	evbuffer_add_printf(b, ", \"attached\": %s, \"readonly\": %s, \"timing\": %s, "
			       "\"connections\": %u, \"total_connections\": %llu",
			    st->attached ? "true" : "false", st->readonly ? "true" : "false",
			    st->timing ? "true" : "false", st->connections,
			    (unsigned long long)st->total_connections);
	if (st->answered && st->attached) {
		const struct ftl_info *fi = &st->info;
		const struct ftl_stats *s = &st->stats;
		evbuffer_add_printf(b, ", \"format\": {\"sector_size\": %u, \"sectors\": %llu, "
				       "\"capacity_bytes\": %llu, \"raw_bytes\": %llu, "
				       "\"op_percent\": %.2f, \"parity_width\": %u, \"format_id\": \"%016llx\", "
				       "\"format_time\": %llu, \"last_close_clean\": %s, "
				       "\"recovered_pages\": %llu, \"open_seconds\": %.3f}",
				    fi->sector_size, (unsigned long long)(fi->capacity / fi->sector_size),
				    (unsigned long long)fi->capacity, (unsigned long long)fi->raw_bytes,
				    fi->op_percent, fi->parity_width, (unsigned long long)fi->format_id,
				    (unsigned long long)fi->format_time, fi->was_clean ? "true" : "false",
				    (unsigned long long)fi->recovered_pages, (double)fi->open_ns / 1e9);
		evbuffer_add_printf(b, ", \"checkpoint_damaged\": %s, \"notes\": ",
				    fi->checkpoint_damaged ? "true" : "false");
		json_str(b, fi->notes);
		evbuffer_add_printf(b, ", \"lifetime\": {\"host_read_bytes\": %llu, \"host_write_bytes\": %llu, "
				       "\"nand_read_bytes\": %llu, \"nand_write_bytes\": %llu, "
				       "\"nand_page_size\": %u}",
				    (unsigned long long)s->host_read_bytes, (unsigned long long)s->host_write_bytes,
				    (unsigned long long)(s->nand_pages_read * st->page_size),
				    (unsigned long long)(s->nand_pages_programmed * st->page_size), st->page_size);
		evbuffer_add_printf(b, ", \"endurance_used_percent\": %.4f, \"reserve_percent\": %.4f, "
				       "\"ram_bytes\": %llu, \"ram_peak_bytes\": %llu",
				    endurance_used(s), s->reserve_percent, (unsigned long long)s->ram_bytes,
				    (unsigned long long)st->ram_peak);
		evbuffer_add_printf(b, ", \"stats\": ");
		json_stats(b, s);
	}
	if (st->answered) {
		evbuffer_add_printf(b, ", \"gc_since_start\": {\"pages_relocated\": %llu, "
				       "\"blocks_collected\": %llu}, \"io\": ",
				    (unsigned long long)st->gc_pages_relocated,
				    (unsigned long long)st->gc_blocks_collected);
		json_io(b, &st->io);
	}
	evbuffer_add_printf(b, "}");
}

static int server_connections(struct server *srv)
{
	pthread_mutex_lock(&srv->lock);
	int n = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

static int served(struct server *srv)
{
	int up = 0;
	for (int i = 0; i < srv->ndimms; i++)
		up += srv->dimms[i].exported;
	return up;
}

/* Degraded: an ioDimm failed (to open, or its FTL stopped); one detached
 * on purpose is not a fault. */
static int failed_dimms(const struct ctl_req *cr)
{
	int n = 0;
	for (int i = 0; i < cr->srv->ndimms; i++)
		n += cr->srv->dimms[i].mstate == DM_FAILED || !strcmp(cr->st[i].state, "failed");
	return n;
}

static void status_json(struct ctl_req *cr, struct evbuffer *b)
{
	struct server *srv = cr->srv;
	if (cr->only >= 0) {
		json_dimm(cr, b, &cr->st[cr->only]);
		evbuffer_add_printf(b, "\n");
		return;
	}
	int up = served(srv);
	evbuffer_add_printf(b, "{\"version\": \"%s\", \"pid\": %d, \"uptime_seconds\": %lld, ",
			    FLASHD_VERSION, (int)getpid(), (long long)(time(NULL) - srv->started));
	evbuffer_add_printf(b, "\"config\": ");
	json_str(b, srv->cfg.config_file ? srv->cfg.config_file : "(embedded default)");
	evbuffer_add_printf(b, ", \"state_dir\": ");
	json_str(b, srv->cfg.state_dir);
	evbuffer_add_printf(b, ", \"listen\": [");
	for (int i = 0; i < srv->cfg.nlisten; i++) {
		if (i)
			evbuffer_add_printf(b, ", ");
		json_str(b, srv->cfg.listen[i]);
	}
	evbuffer_add_printf(b, "], \"unix\": ");
	json_str(b, srv->cfg.unix_path ? srv->cfg.unix_path : "");
	evbuffer_add_printf(b, ", \"fault_injection\": %s", srv->cfg.fault_injection == 1 ? "true" : "false");
	enum health_state worst = req_health(cr);
	char summary[2048];
	health_summary(cr, summary, sizeof summary);
	evbuffer_add_printf(b, ", \"connections\": %d, \"served\": %d, \"failed\": %d, "
			       "\"degraded\": %s, \"health\": {\"state\": \"%s\", \"summary\": ",
			    server_connections(srv), up, failed_dimms(cr),
			    worst >= HEALTH_DEGRADED ? "true" : "false", health_state_name(worst));
	json_str(b, summary);
	evbuffer_add_printf(b, "}, ");
	evbuffer_add_printf(b, "\"buffers\": {\"bytes\": %llu, \"limit\": %llu, \"waiting\": %d}, "
			       "\"dimms\": [",
			    (unsigned long long)__atomic_load_n(&srv->buf_bytes, __ATOMIC_RELAXED),
			    (unsigned long long)__atomic_load_n(&srv->cfg.buffer_limit, __ATOMIC_RELAXED),
			    __atomic_load_n(&srv->budget_waiters, __ATOMIC_RELAXED));
	for (int i = 0; i < srv->ndimms; i++) {
		if (i)
			evbuffer_add_printf(b, ", ");
		json_dimm(cr, b, &cr->st[i]);
	}
	evbuffer_add_printf(b, "]}\n");
}

/* Latency at quantile q (0..1) of one class, interpolated in its bucket
 * (geometrically: the buckets are log-spaced); 0 if nothing was counted. */
double lat_quantile(const uint64_t *cnt, double q)
{
	uint64_t n = 0;
	for (int i = 0; i <= LAT_NBOUNDS; i++)
		n += cnt[i];
	if (!n)
		return 0;
	double want = q * (double)n, seen = 0;
	for (int i = 0; i <= LAT_NBOUNDS; i++) {
		if (!cnt[i] || seen + (double)cnt[i] < want) {
			seen += (double)cnt[i];
			continue;
		}
		double lo = i ? (double)lat_bounds_ns[i - 1] : (double)lat_bounds_ns[0] / 2;
		double hi = i < LAT_NBOUNDS ? (double)lat_bounds_ns[i] : lo * 2;
		double f = ((want - seen) / (double)cnt[i]);
		return lo * pow(hi / lo, f);
	}
	return (double)lat_bounds_ns[LAT_NBOUNDS - 1];
}

static void text_lat(struct evbuffer *b, const char *what, const uint64_t (*h)[LAT_NBOUNDS + 1])
{
	evbuffer_add_printf(b, "    %s, p50/p99:", what);
	const char *sep = " ";
	for (int l = 0; l < LAT_N; l++) {
		double p50 = lat_quantile(h[l], 0.5), p99 = lat_quantile(h[l], 0.99);
		if (p50 == 0)
			continue;
		evbuffer_add_printf(b, "%s%s %.0f/%.0f us", sep, lat_class_names[l], p50 / 1e3, p99 / 1e3);
		sep = ", ";
	}
	evbuffer_add_printf(b, "%s\n", *sep == ' ' ? " no requests yet" : "");
}

static void text_io(struct evbuffer *b, const struct dimm_status *st)
{
	const struct io_counters *io = &st->io;
	char r[32], w[32];
	uint64_t errors = 0;
	for (int k = 0; k < IOK_N; k++)
		errors += io->errors[k];
	size_text(r, sizeof r, (double)io->bytes[IOK_READ]);
	size_text(w, sizeof w, (double)io->bytes[IOK_WRITE]);
	evbuffer_add_printf(b, "    Requests since flashd started: %llu reads (%s), %llu writes (%s), "
			       "%llu flushes, %llu trims, %llu write-zeroes, %llu other; %llu failed\n",
			    (unsigned long long)io->ops[IOK_READ], r, (unsigned long long)io->ops[IOK_WRITE], w,
			    (unsigned long long)io->ops[IOK_FLUSH], (unsigned long long)io->ops[IOK_TRIM],
			    (unsigned long long)io->ops[IOK_ZEROES], (unsigned long long)io->ops[IOK_OTHER],
			    (unsigned long long)errors);
	text_lat(b, "Latency as clients see it (arrived to reply sent)", io->lat);
	text_lat(b, "Service latency (parsed to answered)", io->svc);
	evbuffer_add_printf(b, "    Longest FTL turn (programs, GC, checkpoints; no socket served): "
			       "%.1f ms, %llu over 10 ms\n",
			    (double)io->ftl_turn_max_ns / 1e6, (unsigned long long)io->ftl_turns_over_10ms);
	evbuffer_add_printf(b, "    Garbage collection since flashd started: %llu pages relocated, "
			       "%llu blocks collected\n",
			    (unsigned long long)st->gc_pages_relocated,
			    (unsigned long long)st->gc_blocks_collected);
}

/* A health state for the text views: upper case unless ok, in its colour
 * (green, yellow, red, bold red) when the client asked for colours. */
static void text_state(struct evbuffer *b, const struct ctl_req *cr, enum health_state s)
{
	static const char *const colour[HEALTH_NSTATES] = { "32", "33", "31", "1;31" };
	char up[16];
	const char *name = health_state_name(s);
	size_t i = 0;
	for (; name[i] && i + 1 < sizeof up; i++)
		up[i] = (char)(s == HEALTH_OK ? name[i] : name[i] - 'a' + 'A');
	up[i] = 0;
	if (cr->color)
		evbuffer_add_printf(b, "\033[%sm%s\033[0m", colour[s], up);
	else
		evbuffer_add_printf(b, "%s", up);
}

/* "    Health: STATE" and each reason with its action. */
static void text_health(struct evbuffer *b, const struct ctl_req *cr, const struct health *h)
{
	evbuffer_add_printf(b, "    Health: ");
	text_state(b, cr, h->state);
	evbuffer_add_printf(b, "\n");
	for (int i = 0; i < h->n; i++) {
		const struct health_item *it = &h->item[i];
		evbuffer_add_printf(b, "      %s\n", it->msg);
		if (it->action[0])
			evbuffer_add_printf(b, "        action: %s\n", it->action);
	}
}

static const char *or_unknown(const char *s)
{
	return s[0] ? s : "unknown";
}

/* "    DRBD: /dev/nbd0 -> /dev/drbd0 (resource r0): Primary, disk UpToDate;
 * peer Secondary, disk UpToDate; Connected, protocol C[; resync 42.0 %
 * done, finish 0:00:12]" (its health reasons are above it) */
static void text_drbd(struct evbuffer *b, const struct drbd_lower *l)
{
	evbuffer_add_printf(b, "    DRBD: /dev/%s -> /dev/drbd%d%s%s%s: %s, disk %s; peer %s, disk %s; "
			       "%s, protocol %s",
			    l->nbd, l->minor, l->resource[0] ? " (resource " : "", l->resource,
			    l->resource[0] ? ")" : "", or_unknown(l->role), or_unknown(l->disk),
			    or_unknown(l->peer_role), or_unknown(l->peer_disk), or_unknown(l->cstate),
			    or_unknown(l->protocol));
	if (l->sync_permille >= 0)
		evbuffer_add_printf(b, "; %s %.1f %% done%s%s",
				    !strncmp(l->cstate, "Verify", 6) ? "online verify" : "resync",
				    l->sync_permille / 10.0,
				    l->sync_finish[0] ? ", finish " : "", l->sync_finish);
	evbuffer_add_printf(b, "\n");
}

/* One ioDimm in the manner of the vendor's fio-status (-a: all). */
static void text_dimm(struct ctl_req *cr, struct evbuffer *b, const struct dimm_status *st, bool all)
{
	char note[160];
	bool mtd = !strcmp(st->backend, "mtd");
	evbuffer_add_printf(b, "  %s: %s %s, export '%s'\n", st->name,
			    mtd ? "raw NAND (MTD), device" : "simulated ioDimm, preset",
			    mtd ? st->image : st->preset, st->export_name);
	if (st->model[0])
		evbuffer_add_printf(b, "    Model: %s\n", st->model);
	text_health(b, cr, &cr->h[st - cr->st]);
	if (all && !mtd)
		evbuffer_add_printf(b, "    Image: %s\n", st->image);
	if (st->beacon)
		evbuffer_add_printf(b, "    Beacon: on (flashctl beacon %s off)\n", st->name);
	else if (all)
		evbuffer_add_printf(b, "    Beacon: off\n");
	if (st->drbd.lower)
		text_drbd(b, &st->drbd);
	if (!st->answered || !st->attached) {
		evbuffer_add_printf(b, "    State: %s%s%s; %u connection(s)\n", st->state,
				    st->error[0] ? ": " : "", st->error, st->connections);
		const char *n = snapshot_note(cr, st, note, sizeof note);
		if (n)
			evbuffer_add_printf(b, "    Note: %s\n", n);
		if (all && st->answered)
			text_io(b, st);
		return;
	}
	const struct ftl_info *fi = &st->info;
	const struct ftl_stats *s = &st->stats;
	char cap[32], hr[32], hw[32], nr[32], nw[32];
	size_text(cap, sizeof cap, (double)fi->capacity);
	evbuffer_add_printf(b, "    State: %s%s%s, attached%s%s; %u connection(s)\n", st->state,
			    st->error[0] ? ": " : "", st->error, st->readonly ? ", read-only" : "",
			    st->timing ? ", NAND timing model on" : "", st->connections);
	if (fi->notes[0])
		evbuffer_add_printf(b, "    Warning: %s\n", fi->notes);
	evbuffer_add_printf(b, "    Format: %llu sectors of %u bytes (%s), %.1f%% over-provisioning, %s\n",
			    (unsigned long long)(fi->capacity / fi->sector_size), fi->sector_size, cap,
			    fi->op_percent, fi->parity_width ? "Flashback parity (1 die per stripe)" :
							       "no parity");
	if (fi->temp_mc != FTL_TEMP_NONE)
		evbuffer_add_printf(b, "    Internal temperature: %.1f degC, max %.1f degC%s\n",
				    fi->temp_mc / 1000.0, fi->temp_max_mc / 1000.0,
				    fi->thermal == FTL_THERMAL_STOPPED ? "; STOPPED: too hot, host I/O held "
									 "until below 75 degC"
				    : fi->thermal == FTL_THERMAL_THROTTLED ? "; writes throttled (at 78 degC)"
									   : "");
	if (s->dies_failed && fi->parity_width)
		evbuffer_add_printf(b, "    Flashback: %u die(s) failed; rebuild %s (%u of %u bands left)\n",
				    s->dies_failed, s->rebuild_bands_left ? "in progress" : "complete",
				    s->rebuild_bands_left, s->rebuild_bands_total);
	else if (s->dies_failed)
		evbuffer_add_printf(b, "    Dies failed: %u; no parity: the data on them is lost (reads of "
				       "it fail with EIO); bands with data on them: %u of %u still to "
				       "collect\n",
				    s->dies_failed, s->rebuild_bands_left, s->rebuild_bands_total);
	if (s->lost_units && s->lost_first <= s->lost_last)
		evbuffer_add_printf(b, "    Lost data: %llu units (4 KiB) unreadable, within bytes %llu to "
				       "%llu; reads of them fail with EIO\n",
				    (unsigned long long)s->lost_units,
				    (unsigned long long)(s->lost_first * 4096),
				    (unsigned long long)(s->lost_last * 4096 + 4095));
	evbuffer_add_printf(b, "    Reserve space status: %s; Reserves: %.2f%%, warn at 10.00%%\n",
			    s->reserve_percent >= 10 ? "Healthy" : "Low", s->reserve_percent);
	evbuffer_add_printf(b, "    Rated endurance: %u P/E cycles; used %.2f%% (erase counts min/avg/max "
			       "%u/%.1f/%u)\n",
			    s->rated_pe_cycles, endurance_used(s), s->erase_min, s->erase_avg, s->erase_max);
	size_text(hr, sizeof hr, (double)s->host_read_bytes);
	size_text(hw, sizeof hw, (double)s->host_write_bytes);
	size_text(nr, sizeof nr, (double)s->nand_pages_read * st->page_size);
	size_text(nw, sizeof nw, (double)s->nand_pages_programmed * st->page_size);
	evbuffer_add_printf(b, "    Lifetime: host read %s, written %s; NAND read %s, written %s "
			       "(write amplification %.2f)\n",
			    hr, hw, nr, nw, s->write_amplification);
	if (!all)
		return;
	evbuffer_add_printf(b, "    Last shutdown: %s; opened in %.2f s\n",
			    fi->was_clean ? "clean" : "unclean (recovered from the log)",
			    (double)fi->open_ns / 1e9);
	evbuffer_add_printf(b, "    Powerloss protection: protected (flush and FUA are durable)\n");
	evbuffer_add_printf(b, "    Blocks: %llu total, %llu free, %llu data, %llu metadata, %llu bad "
			       "(%llu grown); %llu erased in its lifetime\n",
			    (unsigned long long)s->blocks_total, (unsigned long long)s->blocks_free,
			    (unsigned long long)s->blocks_data, (unsigned long long)s->blocks_meta,
			    (unsigned long long)s->blocks_bad, (unsigned long long)s->blocks_bad_grown,
			    (unsigned long long)s->blocks_erased);
	evbuffer_add_printf(b, "    Media errors: %llu corrected, %llu uncorrectable (%llu failed the data "
			       "CRC), %llu units lost, %llu program and %llu erase failures\n",
			    (unsigned long long)s->read_errors_corrected,
			    (unsigned long long)s->read_errors_uncorrectable, (unsigned long long)s->crc_errors,
			    (unsigned long long)s->lost_units, (unsigned long long)s->program_failures,
			    (unsigned long long)s->erase_failures);
	evbuffer_add_printf(b, "    Refresh: %llu bands marked (a read neared the ECC limit), %llu "
			       "relocated; wear levelling: %llu cold bands collected\n",
			    (unsigned long long)s->refresh_marked, (unsigned long long)s->refresh_collected,
			    (unsigned long long)s->wl_collected);
	evbuffer_add_printf(b, "    RAM usage: current %.1f MiB, peak %.1f MiB (map %.1f MiB)\n",
			    (double)s->ram_bytes / (1 << 20), (double)st->ram_peak / (1 << 20),
			    (double)s->l2p_bytes / (1 << 20));
	evbuffer_add_printf(b, "    Connections: %u now, %llu since flashd started\n", st->connections,
			    (unsigned long long)st->total_connections);
	text_io(b, st);
}

static void status_text(struct ctl_req *cr, struct evbuffer *b)
{
	struct server *srv = cr->srv;
	if (cr->only >= 0) {
		text_dimm(cr, b, &cr->st[cr->only], cr->all);
		return;
	}
	int up = served(srv);
	enum health_state worst = req_health(cr);
	evbuffer_add_printf(b, "flashd %s, pid %d, up %lld s; %d connection(s); serving %d of %d "
			       "ioDimm(s); health: ",
			    FLASHD_VERSION, (int)getpid(), (long long)(time(NULL) - srv->started),
			    server_connections(srv), up, srv->ndimms);
	text_state(b, cr, worst);
	/* which ioDimms, worst first */
	const char *sep = " (";
	for (int lvl = HEALTH_FAILED; lvl > HEALTH_OK; lvl--)
		for (int i = 0; i < srv->ndimms; i++)
			if ((int)cr->h[i].state == lvl) {
				evbuffer_add_printf(b, "%s%s %s", sep, cr->st[i].name,
						    health_state_name(cr->h[i].state));
				sep = ", ";
			}
	evbuffer_add_printf(b, "%s\n", *sep == ',' ? ")" : "");
	if (srv->cfg.fault_injection == 1)
		evbuffer_add_printf(b, "Fault injection: on ([server] fault_injection = yes): whoever may use "
				       "the control socket can break the ioDimms (flashctl inject)\n");
	if (cr->all)
		evbuffer_add_printf(b, "Configuration: %s; state directory %s\n",
				    srv->cfg.config_file ? srv->cfg.config_file : "embedded default",
				    srv->cfg.state_dir);
	/* by card, in the order of the configuration */
	for (int i = 0; i < srv->ndimms; i++) {
		const char *card = cr->st[i].card;
		bool seen = false;
		for (int j = 0; j < i && !seen; j++)
			seen = !strcmp(cr->st[j].card, card);
		if (seen)
			continue;
		if (card[0])
			evbuffer_add_printf(b, "\nCard %s:\n", card);
		else
			evbuffer_add_printf(b, "\nioDimms without a card:\n");
		for (int j = i; j < srv->ndimms; j++)
			if (!strcmp(cr->st[j].card, card))
				text_dimm(cr, b, &cr->st[j], cr->all);
	}
}

/* ---- Prometheus text exposition ------------------------------------------ */

/*
 * Version 0.0.4 of the text format: for each family a HELP and a TYPE
 * line, then all its samples (every ioDimm), never interleaved with another
 * family.  Labels: dimm, export, plus what the family says.  Figures come
 * only for ioDimms whose thread answered (and FTL figures only while
 * attached).  Counter semantics (what Prometheus' rate() assumes):
 *   - a counter (_total) only grows while flashd runs and starts again at
 *     0 when flashd (for the FTL's "since open" counters: the FTL) starts;
 *     Prometheus takes the drop to 0 as the reset it is;
 *   - the FTL's lifetime figures (host and NAND bytes, erases) are kept in
 *     its checkpoints: after a crash they come back as of the last
 *     checkpoint, lower than the last scrape saw, which a counter may not
 *     do (rate() would count the whole lifetime again): they are gauges
 *     (flashd_dimm_lifetime_*), for totals and deriv(); rates come from the
 *     request counters;
 *   - states are one series per state, 1 for the current one (no numeric
 *     codes), and no family has a "total" beside its parts: sum() of a
 *     family by kind is the whole.
 */
static const char *const metric_states[] = {
	"online", "read-only", "write-reduced", "no-space", "failed", "detached",
	"starting", "attaching", "detaching", "formatting", "checkpointing", "unknown",
};

static void prom_family(struct evbuffer *b, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* a label value, escaped as the format wants (\\, \", \n) */
static void prom_value(struct evbuffer *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			evbuffer_add_printf(b, "\\%c", *s);
		else if (*s == '\n')
			evbuffer_add(b, "\\n", 2);
		else
			evbuffer_add(b, s, 1);
	}
}

/* name{dimm="..",export=".."[,extra]} value */
static void prom_sample(struct evbuffer *b, const char *name, const struct dimm_status *st,
			const char *extra, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void prom_sample(struct evbuffer *b, const char *name, const struct dimm_status *st,
			const char *extra, const char *fmt, ...)
{
	evbuffer_add_printf(b, "%s{dimm=\"", name);
	prom_value(b, st->name);
	evbuffer_add_printf(b, "\",export=\"");
	prom_value(b, st->export_name);
	evbuffer_add_printf(b, "\"%s%s} ", extra ? "," : "", extra ? extra : "");
	va_list ap;
	va_start(ap, fmt);
	evbuffer_add_vprintf(b, fmt, ap);
	va_end(ap);
	evbuffer_add(b, "\n", 1);
}

/* One latency histogram family of every answered snapshot: the client's
 * (io.lat) or the service latency (io.svc). */
static void prom_hist(struct evbuffer *b, const char *name, const char *help,
		      const struct dimm_status *S, int n, bool service)
{
	char fam[96], lab[96];
	prom_family(b, name, "histogram", help);
	for (int i = 0; i < n; i++) {
		const struct io_counters *io = &S[i].io;
		for (int l = 0; S[i].answered && l < LAT_N; l++) {
			const uint64_t *h = service ? io->svc[l] : io->lat[l];
			uint64_t cum = 0;
			snprintf(fam, sizeof fam, "%s_bucket", name);
			for (int j = 0; j <= LAT_NBOUNDS; j++) {
				cum += h[j];
				if (j < LAT_NBOUNDS)
					snprintf(lab, sizeof lab, "op=\"%s\",le=\"%g\"", lat_class_names[l],
						 (double)lat_bounds_ns[j] / 1e9);
				else
					snprintf(lab, sizeof lab, "op=\"%s\",le=\"+Inf\"", lat_class_names[l]);
				prom_sample(b, fam, &S[i], lab, "%llu", (unsigned long long)cum);
			}
			snprintf(lab, sizeof lab, "op=\"%s\"", lat_class_names[l]);
			snprintf(fam, sizeof fam, "%s_sum", name);
			prom_sample(b, fam, &S[i], lab, "%.9f",
				    (double)(service ? io->svc_sum_ns[l] : io->lat_sum_ns[l]) / 1e9);
			snprintf(fam, sizeof fam, "%s_count", name);
			prom_sample(b, fam, &S[i], lab, "%llu", (unsigned long long)cum);
		}
	}
}

#define FTL_OK(st) ((st)->answered && (st)->attached)

/*
 * The standard process_* metrics of Prometheus' client libraries, from
 * /proc/self (stat: CPU times, virtual and resident size, start time) and
 * the descriptor limit.  A file that cannot be read leaves its metrics out.
 * Cost: two small reads and a directory listing of /proc/self/fd.
 */
static void process_metrics(struct evbuffer *b)
{
	long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	char buf[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[got] = 0;
	/* the fields after the command name, which may hold spaces */
	const char *p = strrchr(buf, ')');
	unsigned long long utime, stime, start, vsize;
	long long rss;
	if (p && tick > 0 &&
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
		   "%*d %llu %llu %lld", &utime, &stime, &start, &vsize, &rss) == 5) {
		prom_family(b, "process_cpu_seconds_total", "counter", "user and system CPU time spent");
		evbuffer_add_printf(b, "process_cpu_seconds_total %.2f\n", (double)(utime + stime) / tick);
		prom_family(b, "process_virtual_memory_bytes", "gauge", "virtual memory size");
		evbuffer_add_printf(b, "process_virtual_memory_bytes %llu\n", vsize);
		prom_family(b, "process_resident_memory_bytes", "gauge", "resident memory size");
		evbuffer_add_printf(b, "process_resident_memory_bytes %lld\n", rss * page);
		/* start is in ticks since boot */
		struct timespec rt, bt;
		clock_gettime(CLOCK_REALTIME, &rt);
		clock_gettime(CLOCK_BOOTTIME, &bt);
		double boot = (double)rt.tv_sec + rt.tv_nsec / 1e9 - ((double)bt.tv_sec + bt.tv_nsec / 1e9);
		prom_family(b, "process_start_time_seconds", "gauge", "start time (unix seconds)");
		evbuffer_add_printf(b, "process_start_time_seconds %.2f\n", boot + (double)start / tick);
	}
	int fds = 0;
	DIR *dir = opendir("/proc/self/fd");
	if (dir) {
		for (struct dirent *e; (e = readdir(dir));)
			fds += e->d_name[0] != '.';
		closedir(dir);
		prom_family(b, "process_open_fds", "gauge", "open file descriptors");
		evbuffer_add_printf(b, "process_open_fds %d\n", fds - 1); /* less opendir's own */
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		prom_family(b, "process_max_fds", "gauge", "the limit of open file descriptors");
		evbuffer_add_printf(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
	}
}

/* The server's families: build, connections, buffers, health, process_*. */
static void metrics_server(struct ctl_req *cr, struct evbuffer *b)
{
	struct server *srv = cr->srv;
	int n = srv->ndimms;

	prom_family(b, "flashd_build_info", "gauge", "flashd version (always 1)");
	evbuffer_add_printf(b, "flashd_build_info{version=\"%s\"} 1\n", FLASHD_VERSION);
	prom_family(b, "flashd_start_time_seconds", "gauge", "when flashd started (unix time)");
	evbuffer_add_printf(b, "flashd_start_time_seconds %lld\n", (long long)srv->started);
	prom_family(b, "flashd_connections", "gauge", "NBD connections, negotiating or not");
	evbuffer_add_printf(b, "flashd_connections %d\n", server_connections(srv));
	prom_family(b, "flashd_buffer_bytes", "gauge",
		    "request buffers that exist, in flight or kept for reuse (counted against buffer_limit)");
	evbuffer_add_printf(b, "flashd_buffer_bytes %llu\n",
			    (unsigned long long)__atomic_load_n(&srv->buf_bytes, __ATOMIC_RELAXED));
	prom_family(b, "flashd_buffer_limit_bytes", "gauge", "[server] buffer_limit");
	evbuffer_add_printf(b, "flashd_buffer_limit_bytes %llu\n",
			    (unsigned long long)__atomic_load_n(&srv->cfg.buffer_limit, __ATOMIC_RELAXED));
	prom_family(b, "flashd_buffer_waiting_connections", "gauge",
		    "connections whose next request waits for buffer_limit");
	evbuffer_add_printf(b, "flashd_buffer_waiting_connections %d\n",
			    __atomic_load_n(&srv->budget_waiters, __ATOMIC_RELAXED));
	prom_family(b, "flashd_dimms_served", "gauge", "ioDimms exported now");
	evbuffer_add_printf(b, "flashd_dimms_served %d\n", served(srv));
	prom_family(b, "flashd_dimms_configured", "gauge", "ioDimms in the configuration");
	evbuffer_add_printf(b, "flashd_dimms_configured %d\n", n);
	prom_family(b, "flashd_health", "gauge",
		    "1 for the server's health (the worst of its ioDimms'), 0 for the other states");
	enum health_state worst = health_worst(cr->h, n);
	for (int k = 0; k < HEALTH_NSTATES; k++)
		evbuffer_add_printf(b, "flashd_health{state=\"%s\"} %d\n", health_state_name(k),
				    k == (int)worst);
	process_metrics(b);
}

/* Each ioDimm's state, health and its reasons, export, beacon, connections. */
static void metrics_dimm_states(struct ctl_req *cr, struct evbuffer *b)
{
	struct server *srv = cr->srv;
	int n = srv->ndimms;
	const struct dimm_status *S = cr->st;
	char lab[96];

	prom_family(b, "flashd_dimm_state", "gauge", "1 for the state the ioDimm is in, 0 for the others");
	for (int i = 0; i < n; i++) {
		const char *cur = "unknown";
		for (size_t k = 0; k < sizeof metric_states / sizeof *metric_states; k++)
			if (!strcmp(S[i].state, metric_states[k]))
				cur = metric_states[k];
		for (size_t k = 0; k < sizeof metric_states / sizeof *metric_states; k++) {
			snprintf(lab, sizeof lab, "state=\"%s\"", metric_states[k]);
			prom_sample(b, "flashd_dimm_state", &S[i], lab, "%d", !strcmp(cur, metric_states[k]));
		}
	}
	prom_family(b, "flashd_dimm_health", "gauge",
		    "1 for the ioDimm's health (ok, warning, degraded, failed), 0 for the others");
	for (int i = 0; i < n; i++)
		for (int k = 0; k < HEALTH_NSTATES; k++) {
			snprintf(lab, sizeof lab, "state=\"%s\"", health_state_name(k));
			prom_sample(b, "flashd_dimm_health", &S[i], lab, "%d", k == (int)cr->h[i].state);
		}
	prom_family(b, "flashd_dimm_health_reason", "gauge",
		    "1 for each reason of the ioDimm's health now (level: the state it makes it; "
		    "flashctl status says the action)");
	for (int i = 0; i < n; i++)
		for (int k = 0; k < cr->h[i].n; k++) {
			snprintf(lab, sizeof lab, "reason=\"%s\",level=\"%s\"",
				 health_reason_name(cr->h[i].item[k].reason),
				 health_state_name(cr->h[i].item[k].level));
			prom_sample(b, "flashd_dimm_health_reason", &S[i], lab, "1");
		}
	prom_family(b, "flashd_dimm_attached", "gauge", "1 if the ioDimm's FTL is open and exported");
	for (int i = 0; i < n; i++)
		prom_sample(b, "flashd_dimm_attached", &S[i], NULL, "%d", srv->dimms[i].exported);
	prom_family(b, "flashd_dimm_beacon", "gauge", "1 while the ioDimm's locate beacon is on");
	for (int i = 0; i < n; i++)
		prom_sample(b, "flashd_dimm_beacon", &S[i], NULL, "%d", srv->dimms[i].beacon);
	prom_family(b, "flashd_dimm_connections", "gauge", "NBD connections in transmission to the export");
	for (int i = 0; i < n; i++)
		prom_sample(b, "flashd_dimm_connections", &S[i], NULL, "%u", S[i].connections);
	prom_family(b, "flashd_dimm_connections_total", "counter",
		    "NBD connections handed to the export since flashd started");
	for (int i = 0; i < n; i++)
		prom_sample(b, "flashd_dimm_connections_total", &S[i], NULL, "%llu",
			    (unsigned long long)S[i].total_connections);
}

/* The server's I/O counters (since flashd started): requests, errors,
 * bytes, latency histograms, garbage collection. */
static void metrics_requests(struct evbuffer *b, const struct dimm_status *S, int n)
{
	char lab[96];

	prom_family(b, "flashd_dimm_requests_total", "counter", "NBD requests answered, by command");
	for (int i = 0; i < n; i++)
		for (int k = 0; S[i].answered && k < IOK_N; k++) {
			snprintf(lab, sizeof lab, "op=\"%s\"", io_kind_names[k]);
			prom_sample(b, "flashd_dimm_requests_total", &S[i], lab, "%llu",
				    (unsigned long long)S[i].io.ops[k]);
		}
	prom_family(b, "flashd_dimm_request_errors_total", "counter",
		    "NBD requests answered with an error, by command");
	for (int i = 0; i < n; i++)
		for (int k = 0; S[i].answered && k < IOK_N; k++) {
			snprintf(lab, sizeof lab, "op=\"%s\"", io_kind_names[k]);
			prom_sample(b, "flashd_dimm_request_errors_total", &S[i], lab, "%llu",
				    (unsigned long long)S[i].io.errors[k]);
		}
	prom_family(b, "flashd_dimm_request_bytes_total", "counter",
		    "bytes read, written, trimmed and zeroed by successful NBD requests");
	for (int i = 0; i < n; i++)
		for (int k = 0; S[i].answered && k < IOK_N; k++) {
			if (k == IOK_FLUSH || k == IOK_OTHER)
				continue;
			snprintf(lab, sizeof lab, "op=\"%s\"", io_kind_names[k]);
			prom_sample(b, "flashd_dimm_request_bytes_total", &S[i], lab, "%llu",
				    (unsigned long long)S[i].io.bytes[k]);
		}
	prom_hist(b, "flashd_dimm_request_duration_seconds",
		  "latency as the client sees it: from a request complete in the socket to its reply "
		  "handed to the kernel", S, n, false);
	prom_hist(b, "flashd_dimm_request_service_seconds",
		  "time in flashd from a request parsed to its reply queued", S, n, true);
	prom_family(b, "flashd_dimm_gc_pages_relocated_total", "counter",
		    "pages garbage collection moved since flashd started");
	for (int i = 0; i < n; i++)
		if (S[i].answered)
			prom_sample(b, "flashd_dimm_gc_pages_relocated_total", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].gc_pages_relocated);
	prom_family(b, "flashd_dimm_gc_blocks_collected_total", "counter",
		    "blocks garbage collection emptied since flashd started");
	for (int i = 0; i < n; i++)
		if (S[i].answered)
			prom_sample(b, "flashd_dimm_gc_blocks_collected_total", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].gc_blocks_collected);
}

/* The FTL's format, lifetime counters (kept in checkpoints) and wear. */
static void metrics_ftl_wear(struct evbuffer *b, const struct dimm_status *S, int n)
{
	char lab[96];

	prom_family(b, "flashd_dimm_capacity_bytes", "gauge", "user capacity of the format");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_capacity_bytes", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].info.capacity);
	prom_family(b, "flashd_dimm_sector_size_bytes", "gauge", "sector size of the format");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_sector_size_bytes", &S[i], NULL, "%u", S[i].info.sector_size);
	prom_family(b, "flashd_dimm_overprovisioning_ratio", "gauge", "share of the raw NAND kept as over-provisioning");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_overprovisioning_ratio", &S[i], NULL, "%.6f",
				    S[i].info.op_percent / 100);
	prom_family(b, "flashd_dimm_lifetime_host_bytes", "gauge",
		    "bytes the host read and wrote in the format's lifetime (kept in checkpoints: "
		    "after a crash as of the last one, so a gauge)");
	for (int i = 0; i < n; i++) {
		if (!FTL_OK(&S[i]))
			continue;
		prom_sample(b, "flashd_dimm_lifetime_host_bytes", &S[i], "dir=\"read\"", "%llu",
			    (unsigned long long)S[i].stats.host_read_bytes);
		prom_sample(b, "flashd_dimm_lifetime_host_bytes", &S[i], "dir=\"write\"", "%llu",
			    (unsigned long long)S[i].stats.host_write_bytes);
	}
	prom_family(b, "flashd_dimm_lifetime_nand_bytes", "gauge",
		    "NAND bytes read and programmed in the format's lifetime (kept in checkpoints: "
		    "after a crash as of the last one, so a gauge)");
	for (int i = 0; i < n; i++) {
		if (!FTL_OK(&S[i]))
			continue;
		prom_sample(b, "flashd_dimm_lifetime_nand_bytes", &S[i], "dir=\"read\"", "%llu",
			    (unsigned long long)(S[i].stats.nand_pages_read * S[i].page_size));
		prom_sample(b, "flashd_dimm_lifetime_nand_bytes", &S[i], "dir=\"write\"", "%llu",
			    (unsigned long long)(S[i].stats.nand_pages_programmed * S[i].page_size));
	}
	prom_family(b, "flashd_dimm_write_amplification", "gauge", "NAND pages programmed per host page written");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_write_amplification", &S[i], NULL, "%.6f",
				    S[i].stats.write_amplification);
	prom_family(b, "flashd_dimm_blocks", "gauge",
		    "erase blocks by kind (free, data, meta, bad_factory, bad_grown: the sum is all)");
	for (int i = 0; i < n; i++) {
		if (!FTL_OK(&S[i]))
			continue;
		const struct ftl_stats *s = &S[i].stats;
		/* a partition: their sum is every block */
		const struct { const char *k; uint64_t v; } kinds[] = {
			{ "free", s->blocks_free }, { "data", s->blocks_data }, { "meta", s->blocks_meta },
			{ "bad_factory", s->blocks_bad - s->blocks_bad_grown },
			{ "bad_grown", s->blocks_bad_grown },
		};
		for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
			snprintf(lab, sizeof lab, "kind=\"%s\"", kinds[k].k);
			prom_sample(b, "flashd_dimm_blocks", &S[i], lab, "%llu", (unsigned long long)kinds[k].v);
		}
	}
	prom_family(b, "flashd_dimm_block_erase_cycles", "gauge", "erase counts of the good blocks (min, avg, max)");
	for (int i = 0; i < n; i++) {
		if (!FTL_OK(&S[i]))
			continue;
		prom_sample(b, "flashd_dimm_block_erase_cycles", &S[i], "stat=\"min\"", "%u", S[i].stats.erase_min);
		prom_sample(b, "flashd_dimm_block_erase_cycles", &S[i], "stat=\"avg\"", "%.4f", S[i].stats.erase_avg);
		prom_sample(b, "flashd_dimm_block_erase_cycles", &S[i], "stat=\"max\"", "%u", S[i].stats.erase_max);
	}
	prom_family(b, "flashd_dimm_lifetime_blocks_erased", "gauge",
		    "block erases in the format's lifetime (kept in checkpoints, so a gauge)");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_lifetime_blocks_erased", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].stats.blocks_erased);
	prom_family(b, "flashd_dimm_rated_pe_cycles", "gauge", "rated program/erase cycles of a block");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_rated_pe_cycles", &S[i], NULL, "%u", S[i].stats.rated_pe_cycles);
	prom_family(b, "flashd_dimm_endurance_used_ratio", "gauge", "average erase count over the rated cycles");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_endurance_used_ratio", &S[i], NULL, "%.6f",
				    endurance_used(&S[i].stats) / 100);
}

/* The FTL's health: temperature, dead dies and parity, reserves, media
 * errors, lost data, memory. */
static void metrics_ftl_health(struct evbuffer *b, const struct dimm_status *S, int n)
{
	char lab[96];

	prom_family(b, "flashd_dimm_temperature_celsius", "gauge", "controller temperature (the simulator's sensor)");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]) && S[i].info.temp_mc != FTL_TEMP_NONE)
			prom_sample(b, "flashd_dimm_temperature_celsius", &S[i], NULL, "%.1f",
				    S[i].info.temp_mc / 1000.0);
	prom_family(b, "flashd_dimm_thermal_state", "gauge",
		    "1 for the thermal state: ok, throttled (writes paced, 78 C), stopped (host I/O "
		    "held, 85 C)");
	for (int i = 0; i < n; i++) {
		if (!FTL_OK(&S[i]) || S[i].info.temp_mc == FTL_TEMP_NONE)
			continue;
		for (int t = FTL_THERMAL_OK; t <= FTL_THERMAL_STOPPED; t++) {
			snprintf(lab, sizeof lab, "state=\"%s\"", ftl_thermal_name(t));
			prom_sample(b, "flashd_dimm_thermal_state", &S[i], lab, "%d",
				    t == (int)S[i].info.thermal);
		}
	}
	prom_family(b, "flashd_dimm_parity_rebuilds_total", "counter",
		    "pages rebuilt from their stripe's parity since the FTL was opened");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_parity_rebuilds_total", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].stats.parity_rebuilds);
	prom_family(b, "flashd_dimm_dies_failed", "gauge", "dies declared dead (kept across restarts)");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_dies_failed", &S[i], NULL, "%u", S[i].stats.dies_failed);
	prom_family(b, "flashd_dimm_rebuild_bands_left", "gauge", "bands still holding data on dead dies");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_rebuild_bands_left", &S[i], NULL, "%u",
				    S[i].stats.rebuild_bands_left);
	prom_family(b, "flashd_dimm_reserves_ratio", "gauge", "spare blocks left, of those at format (warn below 0.1)");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_reserves_ratio", &S[i], NULL, "%.6f",
				    S[i].stats.reserve_percent / 100);
	prom_family(b, "flashd_dimm_media_errors_total", "counter",
		    "media errors since the FTL was opened, by kind (read_corrected, "
		    "read_uncorrectable, program, erase)");
	for (int i = 0; i < n; i++) {
		if (!FTL_OK(&S[i]))
			continue;
		const struct ftl_stats *s = &S[i].stats;
		const struct { const char *k; uint64_t v; } kinds[] = {
			{ "read_corrected", s->read_errors_corrected },
			{ "read_uncorrectable", s->read_errors_uncorrectable },
			{ "program", s->program_failures }, { "erase", s->erase_failures },
		};
		for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
			snprintf(lab, sizeof lab, "kind=\"%s\"", kinds[k].k);
			prom_sample(b, "flashd_dimm_media_errors_total", &S[i], lab, "%llu",
				    (unsigned long long)kinds[k].v);
		}
	}
	/* not a kind of media_errors: most of them are also uncorrectable reads */
	prom_family(b, "flashd_dimm_crc_errors_total", "counter",
		    "data pages that failed their CRC32C since the FTL was opened (bit rot past ECC; "
		    "most also count as read_uncorrectable media errors)");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_crc_errors_total", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].stats.crc_errors);
	prom_family(b, "flashd_dimm_lost_units", "gauge",
		    "4 KiB units made unreadable by media errors (reads of them fail with EIO)");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_lost_units", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].stats.lost_units);
	prom_family(b, "flashd_dimm_ram_bytes", "gauge", "memory the FTL holds");
	for (int i = 0; i < n; i++)
		if (FTL_OK(&S[i]))
			prom_sample(b, "flashd_dimm_ram_bytes", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].stats.ram_bytes);
	prom_family(b, "flashd_dimm_ram_peak_bytes", "gauge",
		    "most memory the FTL was seen to hold since flashd started");
	for (int i = 0; i < n; i++)
		if (S[i].answered)
			prom_sample(b, "flashd_dimm_ram_peak_bytes", &S[i], NULL, "%llu",
				    (unsigned long long)S[i].ram_peak);
}

/* The whole exposition, family after family (the order is the output's). */
static void metrics_text(struct ctl_req *cr, struct evbuffer *b)
{
	int n = cr->srv->ndimms;
	metrics_server(cr, b);
	metrics_dimm_states(cr, b);
	metrics_requests(b, cr->st, n);
	metrics_ftl_wear(b, cr->st, n);
	metrics_ftl_health(b, cr->st, n);
}

/* ---- requests ------------------------------------------------------------ */

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
static void ctl_reply(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b)
{
	if (evhttp_request_get_connection(req)) {
		the_srv->ctl_sending++;
		evhttp_request_set_on_complete_cb(req, reply_complete, the_srv);
	}
	evhttp_send_reply(req, code, reason, b);
}

static void send_json(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
	ctl_reply(req, code, reason, b);
}

/* {"ok": false, "error": msg} with code */
static void send_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	evbuffer_add_printf(b, "{\"ok\": false, \"error\": ");
	json_str(b, msg);
	evbuffer_add_printf(b, "}\n");
	send_json(req, code, reason, b);
	evbuffer_free(b);
}

static void ctl_req_free(struct ctl_req *cr)
{
	struct server *srv = cr->srv;
	if (cr->prev)
		cr->prev->next = cr->next;
	else
		srv->ctl_reqs = cr->next;
	if (cr->next)
		cr->next->prev = cr->prev;
	if (cr->timeout)
		event_free(cr->timeout);
	free(cr->st);
	free(cr->h);
	free(cr);
}

static struct ctl_req *ctl_req_new(struct server *srv, struct evhttp_request *req, enum ctl_kind kind)
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
	cr->next = srv->ctl_reqs;
	if (cr->next)
		cr->next->prev = cr;
	srv->ctl_reqs = cr;
	return cr;
}

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

/* Answer cr's HTTP request from what it has gathered. */
static void ctl_answer(struct ctl_req *cr)
{
	struct evhttp_request *req = cr->req;
	if (!req)
		return;
	cr->req = NULL;
	if (cr->timeout)
		evtimer_del(cr->timeout);
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
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
	case CK_ACTION: {
		const char *reason;
		int code = http_code(cr->rc, &reason);
		struct dimm *d = cr->target;
		evbuffer_add_printf(b, "{\"ok\": %s, \"dimm\": ", cr->rc ? "false" : "true");
		json_str(b, d->cfg->name);
		evbuffer_add_printf(b, ", \"action\": \"%s\", \"state\": \"%s\", \"%s\": ",
				    action_name(cr->action), dimm_mstate_name(d->mstate),
				    cr->rc ? "error" : "message");
		json_str(b, cr->msg);
		evbuffer_add_printf(b, "}\n");
		send_json(req, code, reason, b);
		break;
	}
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

/* The main state an action's result leaves the ioDimm in. */
static void action_done(struct dimm *d, struct dimm_cmd *cmd, enum dimm_mstate before)
{
	switch (cmd->type) {
	case DCMD_ATTACH:
		if (cmd->rc == 0) {
			d->mstate = DM_ATTACHED;
			d->exported = true; /* d->info and d->size were set before the reply */
		} else {
			d->mstate = DM_FAILED;
		}
		break;
	case DCMD_DETACH:
		if (cmd->rc == -EBUSY) {
			/* refused: clients connected, no --force; nothing closed */
			d->mstate = before;
			d->exported = true;
		} else {
			d->mstate = DM_DETACHED;
		}
		break;
	case DCMD_FORMAT:
		d->mstate = cmd->rc == 0 ? DM_DETACHED : before;
		break;
	case DCMD_CHECKPOINT:
		if (cmd->st.attached) {
			d->mstate = DM_ATTACHED;
		} else {
			/* the FTL did not reopen: the thread closed its connections */
			d->exported = false;
			d->mstate = DM_FAILED;
		}
		break;
	default:
		return;
	}
	if (!d->srv->shutting_down) {
		if (cmd->rc && cmd->rc != -ESHUTDOWN)
			log_warn("%s: %s failed: %s", d->cfg->name, action_name(cmd->type), cmd->msg);
		server_update_status(d->srv);
	}
}

void ctl_cmd_done(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	pthread_mutex_lock(&srv->cmd_lock);
	struct dimm_cmd *cmd = srv->done;
	srv->done = srv->done_tail = NULL;
	pthread_mutex_unlock(&srv->cmd_lock);
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

/* ---- routes -------------------------------------------------------------- */

static bool query_flag(struct evkeyvalq *q, const char *key, const char *value)
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
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
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
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
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
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	evbuffer_add_reference(b, f->data, f->len, NULL, NULL);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", f->content_type);
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "Content-Security-Policy", "default-src 'self'; img-src 'self' data:");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	ctl_reply(req, 200, "OK", b);
	evbuffer_free(b);
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
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
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

/* The command of verb in *t; false if there is none (answered 404).
 * beacon is no command: do_action serves it before. */
static bool action_type(struct server *srv, struct evhttp_request *req, const char *verb,
			enum dimm_cmd_type *t)
{
	if (!strcmp(verb, "attach"))
		*t = DCMD_ATTACH;
	else if (!strcmp(verb, "detach"))
		*t = DCMD_DETACH;
	else if (!strcmp(verb, "format"))
		*t = DCMD_FORMAT;
	else if (!strcmp(verb, "checkpoint"))
		*t = DCMD_CHECKPOINT;
	else if (!strcmp(verb, "test-stall") && srv->test_hooks)
		*t = DCMD_STALL;
	else if (!strcmp(verb, "inject"))
		*t = DCMD_INJECT;
	else {
		char msg[1536];
		snprintf(msg, sizeof msg, "unknown action '%s' (attach, detach, format, checkpoint, beacon, "
			 "inject)", verb);
		send_error(req, 404, "Not Found", msg);
		return false;
	}
	return true;
}

/* The parameters of command t from the query into p; false if refused
 * (answered: 400 bad parameter, 403 fault injection off, 409 inject into
 * an ioDimm not attached). */
static bool action_params(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
			  struct dimm *d, enum dimm_cmd_type t, struct action_params *p)
{
	char msg[1536];
	if (t == DCMD_FORMAT && format_params(q, &p->fmt, msg, sizeof msg)) {
		send_error(req, 400, "Bad Request", msg);
		return false;
	}
	if (t == DCMD_STALL) {
		const char *v = evhttp_find_header(q, "ms");
		if (!v || parse_uint(v, 1, 60000, &p->stall_ms)) {
			send_error(req, 400, "Bad Request", "ms: 1 to 60000");
			return false;
		}
	}
	if (t != DCMD_INJECT)
		return true;
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

/*
 * The main state command t moves d into while it runs (*next), from an
 * idle state; or nothing to do (*done_already, msg says why: attach of an
 * attached ioDimm, detach of one not attached).  False if refused
 * (answered: 409 busy or not in a state for t, 400 format without
 * confirm=yes).
 */
static bool action_next_state(struct evhttp_request *req, struct evkeyvalq *q, struct dimm *d,
			      enum dimm_cmd_type t, enum dimm_mstate *next, bool *done_already,
			      char *msg, size_t len)
{
	const char *name = d->cfg->name;
	enum dimm_mstate st = d->mstate;
	*next = st;
	*done_already = false;
	if (st != DM_ATTACHED && st != DM_DETACHED && st != DM_FAILED) {
		snprintf(msg, len, "%s is busy: %s; try again when that is done", name,
			 dimm_mstate_name(st));
		send_error(req, 409, "Conflict", msg);
		return false;
	}
	switch (t) {
	case DCMD_ATTACH:
		if (st == DM_ATTACHED) {
			snprintf(msg, len, "%s is attached already", name);
			*done_already = true;
		}
		*next = DM_ATTACHING;
		break;
	case DCMD_DETACH:
		if (st != DM_ATTACHED) {
			snprintf(msg, len, "%s is not attached (%s)", name, dimm_mstate_name(st));
			*done_already = true;
		}
		*next = DM_DETACHING;
		break;
	case DCMD_FORMAT:
		if (st == DM_ATTACHED) {
			snprintf(msg, len, "%s is attached: detach it first (flashctl detach %s); "
				 "a format erases every sector", name, name);
			send_error(req, 409, "Conflict", msg);
			return false;
		}
		if (!query_flag(q, "confirm", "yes")) {
			snprintf(msg, len, "a format erases every sector of %s: add confirm=yes to "
				 "the request (flashctl format %s --yes)", name, name);
			send_error(req, 400, "Bad Request", msg);
			return false;
		}
		*next = DM_FORMATTING;
		break;
	case DCMD_CHECKPOINT:
		if (st != DM_ATTACHED) {
			snprintf(msg, len, "%s is not attached (%s): nothing to checkpoint", name,
				 dimm_mstate_name(st));
			send_error(req, 409, "Conflict", msg);
			return false;
		}
		*next = DM_CHECKPOINTING;
		break;
	default:
		break;
	}
	return true;
}

/* Post command t with p to cr's ioDimm, which enters next; the reply goes
 * out when the command is back (ctl_cmd_done).  by: who asks, logged. */
static void action_post(struct ctl_req *cr, struct evkeyvalq *q, const struct action_params *p,
			enum dimm_mstate next, const char *verb, const char *by)
{
	struct dimm *d = cr->target;
	enum dimm_cmd_type t = cr->action;
	struct dimm_cmd *cmd = calloc(1, sizeof *cmd);
	if (!cmd) {
		cr->rc = -ENOMEM;
		snprintf(cr->msg, sizeof cr->msg, "out of memory");
		ctl_answer(cr);
		ctl_req_free(cr);
		return;
	}
	cmd->type = t;
	cmd->owner = cr;
	cmd->fmt = p->fmt;
	cmd->stall_ms = (uint32_t)p->stall_ms;
	cmd->inject = p->inject;
	cmd->inject_value = p->inject_value;
	cmd->force = query_flag(q, "force", "yes");
	cmd->slot = d->index;
	if (t == DCMD_DETACH) {
		/* withdraw the export first: no handshake hands it a socket from
		 * now on (flashd.h, "Attach state") */
		d->exported = false;
	}
	d->mstate = next;
	if (t != DCMD_STALL)
		log_info("%s: %s%s requested over the control socket by %s", d->cfg->name, verb,
			 cmd->force && t == DCMD_DETACH ? " (force)" : "", by);
	if (t != DCMD_STALL && t != DCMD_INJECT)
		server_update_status(d->srv);
	cr->pending = 1;
	dimm_post(d, cmd);
}

/* POST /v1/dimms/NAME/ACTION; by: who asks (may_act), logged with it */
static void do_action(struct server *srv, struct evhttp_request *req, struct evkeyvalq *q,
		      struct dimm *d, const char *verb, const char *by)
{
	char msg[1536];
	enum dimm_cmd_type t;
	if (!strcmp(verb, "beacon")) {
		do_beacon(req, q, d, by);
		return;
	}
	if (!action_type(srv, req, verb, &t))
		return;
	if (srv->shutting_down) {
		send_error(req, 503, "Service Unavailable", "flashd is shutting down");
		return;
	}
	struct action_params p = { .fmt = { .parity_width = -1 }, .inject = INJ_DIE_FAIL };
	enum dimm_mstate before = d->mstate, next;
	bool done_already;
	if (!action_params(srv, req, q, d, t, &p) ||
	    !action_next_state(req, q, d, t, &next, &done_already, msg, sizeof msg))
		return;
	struct ctl_req *cr = ctl_req_new(srv, req, CK_ACTION);
	if (!cr)
		return;
	cr->target = d;
	cr->action = t;
	cr->before = before;
	if (done_already) {
		snprintf(cr->msg, sizeof cr->msg, "%s", msg);
		ctl_answer(cr);
		ctl_req_free(cr);
		return;
	}
	action_post(cr, q, &p, next, verb, by);
}

/* POST /v1/reload: what SIGHUP does (main.c, server_reload), with the
 * result; by: who asks (may_act), in its log lines. */
static void do_reload(struct server *srv, struct evhttp_request *req, const char *by)
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
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, 500, "out of memory");
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

static struct dimm *find_dimm(struct server *srv, const char *name)
{
	for (int i = 0; i < srv->ndimms; i++)
		if (!strcmp(srv->dimms[i].cfg->name, name))
			return &srv->dimms[i];
	return server_find_dimm_by_export(srv, name, strlen(name));
}

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
static bool cross_site_host(struct evhttp_request *req, char *why, size_t len)
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
static void refuse_web(struct server *srv, struct evhttp_request *req, const char *path, const char *why)
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
static bool may_act(struct server *srv, struct evhttp_request *req, const char *path, char *by,
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
	if (!strcmp(path, "/metrics") || !strcmp(path, "/v1/metrics")) {
		if (!get)
			goto only_get;
		do_metrics(srv, req);
	} else if (!strcmp(path, "/v1/status")) {
		if (!get)
			goto only_get;
		do_status(srv, req, &q, -1);
	} else if (!strcmp(path, "/v1/version")) {
		if (!get)
			goto only_get;
		do_version(srv, req);
	} else if (!strcmp(path, "/v1/history")) {
		if (!get)
			goto only_get;
		do_history(srv, req, &q);
	} else if (!strcmp(path, "/v1/reload")) {
		if (!post) {
			evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
			send_error(req, 405, "Method Not Allowed", "reload takes POST");
			goto out;
		}
		if (may_act(srv, req, path, by, sizeof by))
			do_reload(srv, req, by);
	} else if (!strcmp(path, "/") || !strcmp(path, "/dashboard") || !strncmp(path, "/dashboard/", 11)) {
		if (!get)
			goto only_get;
		do_dashboard(req, path);
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
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "control socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0) {
		int e = errno;
		snprintf(err, errlen, "control socket %s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	int prc = socket_perms(path, "control socket", srv->cfg.control_mode, srv->cfg.control_gid, err,
			       errlen);
	if (prc) {
		close(fd);
		return prc;
	}
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
	while (srv->ctl_reqs) {
		struct ctl_req *cr = srv->ctl_reqs;
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
