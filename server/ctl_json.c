/*
 * server/ctl_json.c - a status snapshot as JSON: GET /v1/status (the server
 * and every ioDimm) and /v1/dimms/NAME (one), and json_str for every JSON
 * answer of the control socket.  Called by ctl.c (ctl_answer) once the
 * snapshot is complete; it reads the snapshot (struct ctl_req) and never
 * changes it.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>

#include "server/ctl_int.h"

void json_str(struct evbuffer *b, const char *s)
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

/* , "key": "val" (val escaped) */
static void json_field(struct evbuffer *b, const char *key, const char *val)
{
	evbuffer_add_printf(b, ", \"%s\": ", key);
	json_str(b, val);
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
	U("page_pad_pages", s->page_pad_pages);
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
		json_field(b, "action", it->action);
		evbuffer_add_printf(b, "}");
	}
	evbuffer_add_printf(b, "]}");
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
	json_field(b, "lower", lower);
	const struct { const char *key, *val; } f[] = {
		{ "role", l->role }, { "peer_role", l->peer_role }, { "connection", l->cstate },
		{ "disk", l->disk }, { "peer_disk", l->peer_disk }, { "protocol", l->protocol },
		{ "sync_finish", l->sync_finish },
	};
	for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
		json_field(b, f[k].key, f[k].val);
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
	json_field(b, "export", st->export_name);
	json_field(b, "card", st->card);
	json_field(b, "backend", st->backend);
	json_field(b, "preset", st->preset);
	json_field(b, "model", st->model);
	json_field(b, "image", st->image);
	json_field(b, "state", st->state);
	if (st->error[0])
		json_field(b, "error", st->error);
	const char *n = snapshot_note(cr, st, note, sizeof note);
	if (n)
		json_field(b, "note", n);
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

/* Degraded: an ioDimm failed (to open, or its FTL stopped); one detached
 * on purpose is not a fault. */
static int failed_dimms(const struct ctl_req *cr)
{
	int n = 0;
	for (int i = 0; i < cr->srv->ndimms; i++)
		n += cr->srv->dimms[i].mstate == DM_FAILED || !strcmp(cr->st[i].state, "failed");
	return n;
}

void status_json(struct ctl_req *cr, struct evbuffer *b)
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
	json_field(b, "state_dir", srv->cfg.state_dir);
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
