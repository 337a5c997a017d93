/*
 * flashctl stats: the requests, bandwidth, latency percentiles and GC work
 * of a running flashd's ioDimms, from its Prometheus text (/metrics on the
 * control socket, through ctl_client.c): since flashd started, or per
 * interval (--live).  Owns reading that text back into numbers.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/units.h"
#include "tools/flashctl/flashctl.h"

#define LIVE_MAX_DIMMS 64
#define LIVE_MAX_BUCKETS 64
enum { LK_READ, LK_WRITE, LK_FLUSH, LK_TRIM, LK_ZEROES, LK_OTHER, LK_N };
static const char *const live_ops[LK_N] = { "read", "write", "flush", "trim", "write_zeroes", "other" };

struct live_hist {
	int n;
	double le[LIVE_MAX_BUCKETS], cum[LIVE_MAX_BUCKETS];
};

struct live_dimm {
	char name[64], state[32];
	double conns, ops[LK_N], errors[LK_N], bytes[LK_N];
	struct live_hist lat[3];      /* read, write, flush: as clients see it */
	double lat_sum[3], lat_count[3];
	double gc_pages, gc_blocks, erased, wa, free_blocks;
	bool ftl;
};

struct live_sample {
	double t;                      /* monotonic seconds */
	int n;
	struct live_dimm d[LIVE_MAX_DIMMS];
};

/* label value of key in a "{a="x",b="y"}" text (escapes undone); false if absent */
static bool label(const char *labels, const char *key, char *out, size_t len)
{
	char pat[40];
	snprintf(pat, sizeof pat, "%s=\"", key);
	for (const char *p = labels; (p = strstr(p, pat)); p++) {
		if (p != labels && p[-1] != '{' && p[-1] != ',')
			continue;
		p += strlen(pat);
		size_t o = 0;
		for (; *p && *p != '"' && o + 1 < len; p++) {
			if (*p == '\\' && p[1])
				p++;
			out[o++] = *p == 'n' && p[-1] == '\\' ? '\n' : *p;
		}
		out[o] = 0;
		return true;
	}
	return false;
}

static struct live_dimm *live_find(struct live_sample *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->d[i].name, name))
			return &s->d[i];
	if (s->n == LIVE_MAX_DIMMS)
		return NULL;
	struct live_dimm *d = &s->d[s->n++];
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	return d;
}

static int op_index(const char *op)
{
	for (int k = 0; k < LK_N; k++)
		if (!strcmp(op, live_ops[k]))
			return k;
	return -1;
}

static void live_fetch(const char *control, struct live_sample *s)
{
	struct http_resp r;
	ctl_call_or_die(control, "GET", "/metrics", &r);
	if (r.code != 200)
		die("GET /metrics from %s: HTTP %d", control, r.code);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	s->n = 0;
	for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
		if (line[0] == '#' || strncmp(line, "flashd_dimm_", 12))
			continue;
		char *brace = strchr(line, '{'), *close = brace ? strrchr(line, '}') : NULL;
		if (!brace || !close)
			continue;
		*brace = 0;
		const char *metric = line + 12;
		char labels[512], dimm[64], op[32], v[32];
		snprintf(labels, sizeof labels, "{%.*s", (int)(close - brace), brace + 1);
		double val = strtod(close + 1, NULL);
		if (!label(labels, "dimm", dimm, sizeof dimm))
			continue;
		struct live_dimm *d = live_find(s, dimm);
		if (!d)
			continue;
		bool has_op = label(labels, "op", op, sizeof op);
		int k = has_op ? op_index(op) : -1;
		if (!strcmp(metric, "state") && val == 1 && label(labels, "state", v, sizeof v))
			snprintf(d->state, sizeof d->state, "%s", v);
		else if (!strcmp(metric, "connections"))
			d->conns = val;
		else if (!strcmp(metric, "requests_total") && k >= 0)
			d->ops[k] = val;
		else if (!strcmp(metric, "request_errors_total") && k >= 0)
			d->errors[k] = val;
		else if (!strcmp(metric, "request_bytes_total") && k >= 0)
			d->bytes[k] = val;
		else if (!strcmp(metric, "request_duration_seconds_bucket") && k >= 0 && k <= LK_FLUSH &&
			 label(labels, "le", v, sizeof v)) {
			struct live_hist *h = &d->lat[k];
			if (h->n < LIVE_MAX_BUCKETS) {
				h->le[h->n] = strcmp(v, "+Inf") ? strtod(v, NULL) : INFINITY;
				h->cum[h->n++] = val;
			}
		} else if (!strcmp(metric, "request_duration_seconds_sum") && k >= 0 && k <= LK_FLUSH) {
			d->lat_sum[k] = val;
		} else if (!strcmp(metric, "request_duration_seconds_count") && k >= 0 && k <= LK_FLUSH) {
			d->lat_count[k] = val;
		} else if (!strcmp(metric, "gc_pages_relocated_total"))
			d->gc_pages = val;
		else if (!strcmp(metric, "gc_blocks_collected_total"))
			d->gc_blocks = val;
		else if (!strcmp(metric, "blocks_erased_total")) {
			d->erased = val;
			d->ftl = true;
		} else if (!strcmp(metric, "write_amplification"))
			d->wa = val;
		else if (!strcmp(metric, "blocks") && label(labels, "kind", v, sizeof v) && !strcmp(v, "free"))
			d->free_blocks = val;
	}
	free(r.body);
}

/* Quantile q of the requests between two cumulative histograms (seconds,
 * interpolated geometrically inside the bucket; NAN if there were none). */
static double live_quantile(const struct live_hist *a, const struct live_hist *b, double q)
{
	if (a->n != b->n || !b->n)
		return NAN;
	double total = b->cum[b->n - 1] - a->cum[a->n - 1];
	if (total <= 0)
		return NAN;
	double want = q * total, prev = 0;
	for (int i = 0; i < b->n; i++) {
		double c = b->cum[i] - a->cum[i];
		if (c >= want && c > prev) {
			double hi = b->le[i], lo = i ? b->le[i - 1] : b->le[0] / 2;
			if (isinf(hi))
				return lo;
			return lo * pow(hi / lo, (want - prev) / (c - prev));
		}
		prev = c;
	}
	return NAN;
}

static void fmt_lat(char *buf, size_t len, double s)
{
	if (isnan(s))
		snprintf(buf, len, "-");
	else if (s < 1e-3)
		snprintf(buf, len, "%.0fus", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.1fms", s * 1e3);
	else
		snprintf(buf, len, "%.2fs", s);
}

static bool live_wanted(const struct live_dimm *d, char **names, int nnames)
{
	if (!nnames)
		return true;
	for (int i = 0; i < nnames; i++)
		if (!strcmp(names[i], d->name))
			return true;
	return false;
}

/* Without --live: one line per ioDimm, its counters since flashd started. */
static void stats_since_start(const struct live_sample *a, char **names, int nnames, bool json)
{
	for (int i = 0; i < a->n; i++) {
		const struct live_dimm *d = &a->d[i];
		if (!live_wanted(d, names, nnames))
			continue;
		struct live_hist none[3];
		for (int l = 0; l < 3; l++) {
			none[l] = d->lat[l];
			for (int j = 0; j < none[l].n; j++)
				none[l].cum[j] = 0;
		}
		char r50[16], r99[16], w50[16], w99[16];
		fmt_lat(r50, sizeof r50, live_quantile(&none[0], &d->lat[0], 0.5));
		fmt_lat(r99, sizeof r99, live_quantile(&none[0], &d->lat[0], 0.99));
		fmt_lat(w50, sizeof w50, live_quantile(&none[1], &d->lat[1], 0.5));
		fmt_lat(w99, sizeof w99, live_quantile(&none[1], &d->lat[1], 0.99));
		if (json)
			printf("{\"dimm\": \"%s\", \"state\": \"%s\", \"reads\": %.0f, \"writes\": %.0f, "
			       "\"flushes\": %.0f, \"read_bytes\": %.0f, \"write_bytes\": %.0f, "
			       "\"errors\": %.0f, \"gc_pages_relocated\": %.0f}\n",
			       d->name, d->state, d->ops[LK_READ], d->ops[LK_WRITE], d->ops[LK_FLUSH],
			       d->bytes[LK_READ], d->bytes[LK_WRITE],
			       d->errors[LK_READ] + d->errors[LK_WRITE] + d->errors[LK_FLUSH] +
				       d->errors[LK_TRIM] + d->errors[LK_ZEROES] + d->errors[LK_OTHER],
			       d->gc_pages);
		else
			printf("%s (%s): since flashd started: %.0f reads (%s, p50 %s, p99 %s), "
			       "%.0f writes (%s, p50 %s, p99 %s), %.0f flushes, %.0f trims; "
			       "GC relocated %.0f pages\n",
			       d->name, d->state, d->ops[LK_READ], SIZE_TEXT(d->bytes[LK_READ]), r50, r99,
			       d->ops[LK_WRITE], SIZE_TEXT(d->bytes[LK_WRITE]), w50, w99, d->ops[LK_FLUSH],
			       d->ops[LK_TRIM], d->gc_pages);
	}
}

/* One --live line (or JSON object): ioDimm d over the dt seconds since p. */
static void stats_interval(const struct live_dimm *d, const struct live_dimm *p, double dt, time_t now,
			   const char *when, bool json)
{
	double rs = (d->ops[LK_READ] - p->ops[LK_READ]) / dt;
	double ws = (d->ops[LK_WRITE] - p->ops[LK_WRITE]) / dt;
	double fs = (d->ops[LK_FLUSH] - p->ops[LK_FLUSH]) / dt;
	double rb = (d->bytes[LK_READ] - p->bytes[LK_READ]) / dt;
	double wb = (d->bytes[LK_WRITE] - p->bytes[LK_WRITE]) / dt;
	double gc = (d->gc_pages - p->gc_pages) / dt;
	double er = d->ftl && p->ftl ? (d->erased - p->erased) / dt : 0;
	double q[2][2] = {
		{ live_quantile(&p->lat[0], &d->lat[0], 0.5), live_quantile(&p->lat[0], &d->lat[0], 0.99) },
		{ live_quantile(&p->lat[1], &d->lat[1], 0.5), live_quantile(&p->lat[1], &d->lat[1], 0.99) },
	};
	if (!json) {
		char l[4][16];
		fmt_lat(l[0], sizeof l[0], q[0][0]);
		fmt_lat(l[1], sizeof l[1], q[0][1]);
		fmt_lat(l[2], sizeof l[2], q[1][0]);
		fmt_lat(l[3], sizeof l[3], q[1][1]);
		printf("%-8s %-10s %-13s %8.0f %8.0f %8.2f %8.2f %7s %7s %7s %7s %7.0f %8.0f %7.1f %5.0f\n",
		       when, d->name, d->state, rs, ws, rb / 1e6, wb / 1e6, l[0], l[1], l[2], l[3],
		       fs, gc, er, d->conns);
		return;
	}
	printf("{\"time\": %lld, \"interval\": %.3f, \"dimm\": \"%s\", \"state\": \"%s\", "
	       "\"reads_per_s\": %.2f, \"writes_per_s\": %.2f, \"flushes_per_s\": %.2f, "
	       "\"read_bytes_per_s\": %.0f, \"write_bytes_per_s\": %.0f, "
	       "\"reads\": %.0f, \"writes\": %.0f, \"read_bytes\": %.0f, \"write_bytes\": %.0f",
	       (long long)now, dt, d->name, d->state, rs, ws, fs, rb, wb,
	       d->ops[LK_READ] - p->ops[LK_READ], d->ops[LK_WRITE] - p->ops[LK_WRITE],
	       d->bytes[LK_READ] - p->bytes[LK_READ], d->bytes[LK_WRITE] - p->bytes[LK_WRITE]);
	const char *qn[2][2] = { { "read_p50_s", "read_p99_s" }, { "write_p50_s", "write_p99_s" } };
	for (int x = 0; x < 2; x++)
		for (int y = 0; y < 2; y++) {
			if (isnan(q[x][y]))
				printf(", \"%s\": null", qn[x][y]);
			else
				printf(", \"%s\": %.9f", qn[x][y], q[x][y]);
		}
	/* the mean latency of the interval, as the client sees it */
	const char *mn[2] = { "read_mean_s", "write_mean_s" };
	for (int x = 0; x < 2; x++) {
		double n = d->lat_count[x] - p->lat_count[x];
		if (n > 0)
			printf(", \"%s\": %.9f", mn[x], (d->lat_sum[x] - p->lat_sum[x]) / n);
		else
			printf(", \"%s\": null", mn[x]);
	}
	printf(", \"gc_pages_per_s\": %.2f, \"erases_per_s\": %.2f, \"connections\": %.0f}\n",
	       gc, er, d->conns);
}

/*
 * flashctl stats [--live] [--interval S] [--count N] [--json] [DIMM...]
 * Without --live: the counters since flashd started.  With it: per interval,
 * the requests, bandwidth, latency percentiles and GC work of that interval.
 */
int cmd_stats(struct invocation *inv, int argc, char **argv)
{
	bool live = false;
	double interval = 1;
	uint64_t count = 0;
	static const struct option opts[] = {
		{ "live", no_argument, 0, 'l' },
		{ "interval", required_argument, 0, 'i' },
		{ "count", required_argument, 0, 'n' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = verb_getopt(inv, argc, argv, "li:n:", opts)) != -1) {
		switch (c) {
		case 'l': live = true; break;
		case 'i': interval = opt_double("--interval", optarg, 0.1, 3600); break;
		case 'n': count = opt_uint("--count", optarg, 1, UINT64_MAX); break;
		}
	}
	if (!live && (count || interval != 1))
		die("--interval and --count go with --live");
	const char *control = ctl_path(inv->control);
	bool json = inv->json;
	char **names = argv + optind;
	int nnames = argc - optind;
	static struct live_sample a, b;
	live_fetch(control, &a);
	for (int i = 0; i < nnames; i++) {
		bool found = false;
		for (int j = 0; j < a.n; j++)
			found |= !strcmp(a.d[j].name, names[i]);
		if (!found)
			die("flashd at %s has no ioDimm '%s'", control, names[i]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!live) {
		stats_since_start(&a, names, nnames, json);
		return 0;
	}
	uint64_t done = 0;
	int lines = 0;
	while (!count || done < count) {
		struct timespec ts = { (time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		live_fetch(control, &b);
		double dt = b.t - a.t;
		char when[16];
		time_t now = time(NULL);
		strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
		if (!json && lines % 20 == 0)
			printf("%-8s %-10s %-13s %8s %8s %8s %8s %7s %7s %7s %7s %7s %8s %7s %5s\n", "time",
			       "dimm", "state", "r/s", "w/s", "rMB/s", "wMB/s", "r p50", "r p99", "w p50",
			       "w p99", "f/s", "gcpg/s", "erase/s", "conns");
		for (int i = 0; i < b.n; i++) {
			const struct live_dimm *d = &b.d[i], *p = NULL;
			if (!live_wanted(d, names, nnames))
				continue;
			for (int j = 0; j < a.n; j++)
				if (!strcmp(a.d[j].name, d->name))
					p = &a.d[j];
			static const struct live_dimm empty;
			stats_interval(d, p ? p : &empty, dt, now, when, json);
			if (!json)
				lines++;
		}
		a = b;
		done++;
	}
	return 0;
}
