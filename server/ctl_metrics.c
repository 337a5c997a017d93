/*
 * server/ctl_metrics.c - a status snapshot as Prometheus text exposition
 * (GET /metrics, on the control socket and on metrics_listen), with the
 * process_* metrics.  Called by ctl.c (ctl_answer) once the snapshot is
 * complete; it reads the snapshot and never changes it.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>

#include "server/ctl_int.h"

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
void metrics_text(struct ctl_req *cr, struct evbuffer *b)
{
	int n = cr->srv->ndimms;
	metrics_server(cr, b);
	metrics_dimm_states(cr, b);
	metrics_requests(b, cr->st, n);
	metrics_ftl_wear(b, cr->st, n);
	metrics_ftl_health(b, cr->st, n);
}
