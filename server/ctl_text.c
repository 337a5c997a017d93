/*
 * server/ctl_text.c - a status snapshot as text, in the manner of the
 * vendor's fio-status (GET /v1/status?format=text, &all=1: fio-status -a;
 * flashctl status prints it), and lat_quantile, which monitor.c uses too.
 * Called by ctl.c (ctl_answer) once the snapshot is complete; it reads the
 * snapshot and never changes it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>

#include "common/units.h"
#include "server/ctl_int.h"

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

void status_text(struct ctl_req *cr, struct evbuffer *b)
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
