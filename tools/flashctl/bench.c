/*
 * flashctl bench - the reviewers' protocol against the FTL and the
 * simulator on the simulator's virtual clock.
 *
 *   flashctl bench --preset P [--op PCT] [--sector-size N] [--blocks-per-die N]
 *                  [--workload randwrite|randread|rw70|seqwrite|seqread]
 *                  [--qd N] [--precondition PASSES|steady] [--max-rounds N]
 *                  [--duration SECONDS] [--interval SECONDS] [--seed S] [--hotcold W/S]
 *                  [--parity-width 0|1] [--span SIZE] [--fresh] [--csv FILE] [--json]
 *
 * The medium keeps only page metadata (hw/nand_sim.h: metadata_only): with
 * the FTL, about 74 bytes per NAND page (44 of kept spare and CRC, ~17 of
 * footer and ~7 of checkpoint pages kept whole, ~3 of the FTL's map), 7.3
 * GiB for the full iodimm-mlc-320 instead of 400 GiB, and its timing model
 * runs on a virtual clock that jumps to the next completion whenever
 * nothing can proceed: simulated seconds cost CPU only for the work the FTL
 * does, not for waiting.  The FTL has unlimited CPU in this model: what is
 * measured is how well it keeps the dies and channels busy.
 *
 * Protocol (brief.md section 3): a sequential fill of the whole capacity
 * (128 KiB writes), then PASSES x capacity of the workload's writes (4 KiB
 * random writes for read workloads), or with "steady" random 4 KiB writes in
 * rounds until the steady-state rule holds (at most --max-rounds), then DURATION
 * virtual seconds of the workload at queue depth QD, reported per INTERVAL
 * (CSV) and in total: IOPS, latency mean, std-dev, p99 and max, write
 * amplification, die utilisation, and the physical bound of the run, with
 * the WA measured in the window (x: a page's transfer over its channel,
 * during which the die is held too):
 *   dies / (WA (x + tPROG) + (WA - 1) (tR + x) + WA / ppb tBERS)  (die time)
 *   channels / ((2 WA - 1) x)                                      (channel time)
 * and the measured IOPS as a share of the lower.  The brief's formula,
 * which leaves the transfers out, is printed too.
 *
 * Steady state (SNIA PTS-E): the measurement is cut into rounds of host I/O
 * of a fifth of the span each (STEADY_ROUND_SHARE), so that the window of
 * the last five rounds is one pass over it; steady state is reached when
 * the rule of steady.c holds for the rounds' IOPS in that window.  A round
 * of one reporting interval would be too short: on a small device writes
 * complete in bursts (test-1g: 508 at one instant, about 4 bursts a second),
 * so one burst more or less moves a 1-second interval's IOPS by 25 %, and
 * five 1-second rounds see a twentieth of a pass, where the first
 * fifth of a pass after the fill writes into the OP's free space without
 * garbage collection at 4 times the rate of what follows.
 *
 * --span SIZE confines every phase (fill, preconditioning, workload) to the
 * first SIZE bytes, as fio's --size; --fresh skips the fill and the
 * preconditioning: the workload's first pass on a freshly formatted device
 * (write workloads only: reads of never-written sectors return zeros
 * without touching the NAND).  Together they give the same start as a
 * fresh flashd driven by fio (tests/bench/bench.py --timing).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/parse.h"
#include "common/units.h"
#include "ftl/ftl.h"
#include "hw/nand_sim.h" /* the simulator only: virtual clock, metadata-only media */
#include "tools/flashctl/flashctl.h"

static void bdie(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bdie(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "flashctl bench: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* ---- latency statistics --------------------------------------------------- */

/* log-linear histogram: 64 sub-buckets per power of two, in ns */
#define HIST_SUB 64
#define HIST_N (64 * HIST_SUB)

struct lat {
	uint64_t n;
	double sum, sumsq;
	uint64_t max;
	uint64_t hist[HIST_N];
};

static unsigned hist_bucket(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	unsigned e = 63 - (unsigned)__builtin_clzll(v); /* >= 6 */
	unsigned sub = (unsigned)((v >> (e - 6)) & (HIST_SUB - 1));
	return (e - 5) * HIST_SUB + sub;
}

static uint64_t hist_value(unsigned b)
{
	if (b < HIST_SUB)
		return b;
	unsigned e = b / HIST_SUB + 5, sub = b % HIST_SUB;
	return ((uint64_t)(HIST_SUB + sub)) << (e - 6);
}

static void lat_add(struct lat *l, uint64_t ns)
{
	l->n++;
	l->sum += (double)ns;
	l->sumsq += (double)ns * (double)ns;
	if (ns > l->max)
		l->max = ns;
	unsigned b = hist_bucket(ns);
	l->hist[b < HIST_N ? b : HIST_N - 1]++;
}

static double lat_mean(const struct lat *l)
{
	return l->n ? l->sum / (double)l->n : 0;
}

static double lat_sd(const struct lat *l)
{
	if (l->n < 2)
		return 0;
	double m = lat_mean(l), v = l->sumsq / (double)l->n - m * m;
	return v > 0 ? sqrt(v) : 0;
}

static uint64_t lat_pct(const struct lat *l, double p)
{
	uint64_t want = (uint64_t)ceil(p * (double)l->n), seen = 0;
	for (unsigned b = 0; b < HIST_N; b++) {
		seen += l->hist[b];
		if (seen >= want && l->hist[b])
			return hist_value(b);
	}
	return l->max;
}

/* ---- the load generator ------------------------------------------------------ */

enum wl { WL_RANDWRITE, WL_RANDREAD, WL_RW70, WL_SEQWRITE, WL_SEQREAD, WL_FILESERVER,
	  WL_WEBSERVER };

/* The reviews' mixed profiles (brief.md section 3): request size in bytes
 * and its share in percent; sizes below the sector size are rounded up. */
struct size_mix {
	uint32_t bytes, pct;
};
static const struct size_mix fileserver_mix[] = {
	{ 512, 10 }, { 1024, 5 }, { 2048, 5 }, { 4096, 60 }, { 8192, 2 }, { 16384, 4 },
	{ 32768, 4 }, { 65536, 10 }, { 0, 0 },
};
static const struct size_mix webserver_mix[] = {
	{ 512, 22 }, { 1024, 15 }, { 2048, 8 }, { 4096, 23 }, { 8192, 15 }, { 16384, 2 },
	{ 32768, 6 }, { 65536, 7 }, { 131072, 1 }, { 524288, 1 }, { 0, 0 },
};

static uint32_t mix_size(const struct size_mix *m, uint64_t r)
{
	uint32_t p = (uint32_t)(r % 100);
	for (; m->bytes; m++) {
		if (p < m->pct)
			return m->bytes;
		p -= m->pct;
	}
	return 4096;
}

static double mix_mean(const struct size_mix *m, uint32_t sector)
{
	double sum = 0;
	for (; m->bytes; m++)
		sum += (double)(m->bytes < sector ? sector : m->bytes) * m->pct / 100.0;
	return sum;
}

/* A round is host I/O of span / STEADY_ROUND_SHARE bytes: STEADY_ROUNDS of
 * them make a pass over the span. */
#define STEADY_ROUND_SHARE STEADY_ROUNDS

/* The rounds of a phase: a round closes at the completion that brings the
 * host I/O to its size, at a later virtual instant than its start (so its
 * IOPS is finite; one burst of completions closes at most one round). */
struct rounds {
	uint64_t bytes;                  /* host I/O per round */
	uint64_t end_bytes;              /* bench.bytes_done at which the open round closes */
	uint64_t t0, ops0;               /* the open round's start: time, bench.done_ops */
	unsigned n;                      /* rounds closed */
	double iops[STEADY_ROUNDS];      /* round i's IOPS in iops[i % STEADY_ROUNDS] */
	struct steady rule;              /* over the last STEADY_ROUNDS (n >= STEADY_ROUNDS) */
};

struct breq {
	struct ftl_io io;
	uint64_t t0;
	int idx;
	uint8_t *rbuf;           /* its own: reads are checked when they land */
};

struct bench {
	struct nand_dev *dev;
	struct ftl *f;
	struct ftl_info info;
	uint64_t units;          /* the units the workload addresses: --span */
	uint64_t seed;
	enum wl wl;
	uint32_t bs;             /* bytes per request */
	uint32_t qd;
	struct breq *reqs;
	int *free_idx, nfree;
	uint8_t *wbuf;           /* shared by writes: read only */
	uint64_t seq_pos;
	double hot_w;            /* --hotcold: share of random writes to the hot */
	uint64_t hot_units;      /* units at the start of the device (0: uniform) */
	uint32_t sector;
	uint64_t bytes_done;
	bool measuring;
	struct lat lat_all, lat_iv;
	uint64_t done_ops, done_iv;
	uint64_t failed;
	struct rounds *rounds;   /* the phase's rounds; NULL: not counted */
	unsigned halt_rounds;    /* > 0: halt at steady state or after this many rounds */
	bool halt;               /* run() stops submitting */
};

static void rounds_start(struct bench *b, struct rounds *r)
{
	*r = (struct rounds){ .bytes = b->units * 4096 / STEADY_ROUND_SHARE, .t0 = nand_now(b->dev),
			      .ops0 = b->done_ops };
	r->end_bytes = b->bytes_done + r->bytes;
	b->rounds = r;
}

/* the last STEADY_ROUNDS rounds' IOPS, oldest first (n >= STEADY_ROUNDS) */
static void rounds_window(const struct rounds *r, double y[STEADY_ROUNDS])
{
	for (unsigned k = 0; k < STEADY_ROUNDS; k++)
		y[k] = r->iops[(r->n - STEADY_ROUNDS + k) % STEADY_ROUNDS];
}

/* At each completion: close the open round if it is complete. */
static void rounds_account(struct bench *b)
{
	struct rounds *r = b->rounds;
	uint64_t now = nand_now(b->dev);
	if (b->halt || b->bytes_done < r->end_bytes || now <= r->t0)
		return; /* (halted: the requests still in flight close no round) */
	r->iops[r->n++ % STEADY_ROUNDS] = (double)(b->done_ops - r->ops0) / ((double)(now - r->t0) / 1e9);
	r->t0 = now;
	r->ops0 = b->done_ops;
	r->end_bytes = b->bytes_done + r->bytes;
	if (r->n >= STEADY_ROUNDS) {
		double y[STEADY_ROUNDS];
		rounds_window(r, y);
		r->rule = steady_rule(y);
	}
	if (b->halt_rounds && (r->rule.reached || r->n >= b->halt_rounds))
		b->halt = true;
}

static void breq_done(struct ftl_io *io)
{
	struct breq *r = (struct breq *)io;
	struct bench *b = io->priv;
	uint64_t ns = nand_now(b->dev) - r->t0;
	if (io->status && !b->failed++)
		fprintf(stderr, "bench: first failed request: %s at %llu+%llu: %s\n",
			io->type == FTL_IO_WRITE ? "write" : "read", (unsigned long long)io->offset,
			(unsigned long long)io->length, strerror(-io->status));
	if (b->measuring)
		lat_add(&b->lat_all, ns);
	lat_add(&b->lat_iv, ns);
	b->done_ops++;
	b->done_iv++;
	b->bytes_done += io->length;
	b->free_idx[b->nfree++] = r->idx;
	if (b->rounds)
		rounds_account(b);
}

static void submit_one(struct bench *b, enum wl wl)
{
	struct breq *r = &b->reqs[b->free_idx[--b->nfree]];
	uint64_t nunits = b->bs / 4096, off;
	bool write;
	switch (wl) {
	case WL_SEQWRITE:
	case WL_SEQREAD:
		if (b->seq_pos + nunits > b->units)
			b->seq_pos = 0;
		off = b->seq_pos * 4096;
		b->seq_pos += nunits;
		write = wl == WL_SEQWRITE;
		break;
	case WL_FILESERVER:
	case WL_WEBSERVER: {
		uint32_t len = mix_size(wl == WL_FILESERVER ? fileserver_mix : webserver_mix,
					xorshift64s(&b->seed));
		if (len < b->sector)
			len = b->sector;
		uint64_t slots = b->units * 4096 / len;
		off = (xorshift64s(&b->seed) % slots) * len;
		write = wl == WL_FILESERVER && xorshift64s(&b->seed) % 100 >= 80;
		r->io = (struct ftl_io){ .type = write ? FTL_IO_WRITE : FTL_IO_READ, .offset = off,
					 .length = len, .buf = write ? b->wbuf : r->rbuf,
					 .done = breq_done, .priv = b };
		r->t0 = nand_now(b->dev);
		ftl_submit(b->f, &r->io);
		return;
	}
	default:
		write = wl == WL_RANDWRITE || (wl == WL_RW70 && xorshift64s(&b->seed) % 100 >= 70);
		if (write && b->hot_units) {
			/* hot_w of the writes to the first hot_units units */
			uint64_t r = xorshift64s(&b->seed);
			bool hot = (double)(r >> 11) / (double)(1ull << 53) < b->hot_w;
			uint64_t lo = hot ? 0 : b->hot_units;
			uint64_t n = (hot ? b->hot_units : b->units - b->hot_units);
			n = n > nunits ? n - nunits + 1 : 1;
			off = (lo + xorshift64s(&b->seed) % n) * 4096;
			break;
		}
		off = (xorshift64s(&b->seed) % (b->units - nunits + 1)) * 4096;
		break;
	}
	r->io = (struct ftl_io){ .type = write ? FTL_IO_WRITE : FTL_IO_READ, .offset = off,
				 .length = b->bs, .buf = write ? b->wbuf : r->rbuf,
				 .done = breq_done, .priv = b };
	r->t0 = nand_now(b->dev);
	ftl_submit(b->f, &r->io);
}

/* Keep qd requests in flight until ops more have completed, the virtual
 * clock passes until_ns or the rounds halt (bench.halt); calls tick at each
 * interval boundary. */
static void run(struct bench *b, enum wl wl, uint64_t ops, uint64_t until_ns, uint64_t iv_ns,
		void (*tick)(struct bench *b, uint64_t now), uint64_t *next_tick)
{
	uint64_t target = b->done_ops + ops;
	for (;;) {
		bool stop = (ops && b->done_ops >= target) ||
			    (until_ns && nand_now(b->dev) >= until_ns) || b->halt;
		while (!stop && b->nfree)
			submit_one(b, wl);
		ftl_poll(b->f);
		if (tick && iv_ns) {
			uint64_t now = nand_now(b->dev);
			while (now >= *next_tick) {
				tick(b, *next_tick);
				*next_tick += iv_ns;
			}
		}
		if (stop && b->nfree == (int)b->qd)
			return;
		if (b->nfree && !stop)
			continue; /* requests completed: refill at this instant */
		uint64_t due = ftl_next_deadline(b->f);
		if (due == UINT64_MAX) {
			ftl_debug_dump_public(b->f);
			bdie("stuck: %d requests in flight, nothing due", (int)b->qd - b->nfree);
		}
		if (due > nand_now(b->dev))
			nand_wait_until(b->dev, due);
	}
}

/* ---- reporting ------------------------------------------------------------------ */

struct snap {
	uint64_t t, ops, host_pages, nand_pages, busy;
	uint64_t reads, spare_reads, erases, checkpoints;
};

static struct snap take(struct bench *b, uint64_t now)
{
	struct ftl_stats st;
	ftl_get_stats(b->f, &st);
	return (struct snap){ now, b->done_ops, st.host_pages_written, st.nand_pages_programmed,
			      nand_sim_die_busy_ns(b->dev), st.nand_pages_read, st.nand_spare_reads,
			      st.blocks_erased, st.checkpoints };
}

static FILE *csv;
static struct snap iv_prev;
static double iv_sd_max, iv_iops_min = 1e300, iv_iops_max;

static void tick(struct bench *b, uint64_t now)
{
	struct snap s = take(b, now);
	double secs = (double)(s.t - iv_prev.t) / 1e9;
	double iops = secs > 0 ? (double)(s.ops - iv_prev.ops) / secs : 0;
	uint64_t hp = s.host_pages - iv_prev.host_pages, np = s.nand_pages - iv_prev.nand_pages;
	double wa = hp ? (double)np / (double)hp : 0;
	double util = secs > 0 ? (double)(s.busy - iv_prev.busy) / 1e9 /
					 ((double)nand_dies(&b->dev->geo) * secs) : 0;
	if (csv)
		fprintf(csv, "%s,%.3f,%.0f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%llu\n",
			b->measuring ? "measure" : "precondition", (double)now / 1e9, iops,
			lat_mean(&b->lat_iv) / 1e6, lat_sd(&b->lat_iv) / 1e6,
			(double)lat_pct(&b->lat_iv, 0.99) / 1e6, (double)b->lat_iv.max / 1e6, wa,
			100 * util, (unsigned long long)(s.checkpoints - iv_prev.checkpoints));
	if (b->measuring) {
		if (lat_sd(&b->lat_iv) > iv_sd_max)
			iv_sd_max = lat_sd(&b->lat_iv);
		if (iops < iv_iops_min)
			iv_iops_min = iops;
		if (iops > iv_iops_max)
			iv_iops_max = iops;
	}
	memset(&b->lat_iv, 0, sizeof b->lat_iv);
	iv_prev = s;
	if (getenv("FLASHCTL_BENCH_DUMP"))
		ftl_debug_dump_public(b->f);
}

static const char *wl_name(enum wl w)
{
	switch (w) {
	case WL_RANDWRITE: return "randwrite";
	case WL_RANDREAD: return "randread";
	case WL_RW70: return "rw70";
	case WL_SEQWRITE: return "seqwrite";
	case WL_SEQREAD: return "seqread";
	case WL_FILESERVER: return "fileserver";
	case WL_WEBSERVER: return "webserver";
	}
	return "?";
}

const char bench_help[] =
	"usage: flashctl bench --preset P [--op PCT] [--sector-size 512|4096]\n"
	"         [--blocks-per-die N] [--workload randwrite|randread|rw70|seqwrite|seqread|\n"
	"          fileserver|webserver]\n"
	"         [--bs SIZE] [--qd N] [--precondition PASSES|steady] [--max-rounds N]\n"
	"         [--duration SECONDS] [--interval SECONDS] [--seed S] [--hotcold W/S]\n"
	"         [--parity-width 0|1] [--span SIZE] [--fresh] [--csv FILE] [--json]\n";

struct bench_opts {
	const char *preset, *csv_path;
	double op, passes, duration, interval; /* op 0: the device's stock */
	bool steady;                           /* --precondition steady */
	uint64_t max_rounds;                   /* its cap */
	uint64_t seed, qd, bpd, bs, span;      /* span 0: the capacity; bs 0: the workload's */
	uint64_t parity;
	uint32_t sector;
	enum wl wl;
	bool json, fresh, full_data;
	double hot_w, hot_s;                   /* --hotcold W/S in percent; 0: uniform */
};

static enum wl wl_parse(const char *s)
{
	static const enum wl all[] = { WL_RANDWRITE, WL_RANDREAD, WL_RW70, WL_SEQWRITE, WL_SEQREAD,
				       WL_FILESERVER, WL_WEBSERVER };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (!strcmp(s, wl_name(all[i])))
			return all[i];
	bdie("unknown --workload '%s'", s);
}

/* the value of option NAME (optarg), a number from MIN to MAX, or the
 * bench's "bad NAME 'VALUE'" error */
static double bench_double(const char *name, double min, double max)
{
	double v;
	if (parse_double(optarg, min, max, &v))
		bdie("bad %s '%s'", name, optarg);
	return v;
}

/* as bench_double, a whole number; HINT follows the error ("": none) */
static uint64_t bench_uint(const char *name, uint64_t min, uint64_t max, const char *hint)
{
	uint64_t v;
	if (parse_uint(optarg, min, max, &v))
		bdie("bad %s '%s'%s", name, optarg, hint);
	return v;
}

static void bench_parse(struct invocation *inv, int argc, char **argv, struct bench_opts *o)
{
	*o = (struct bench_opts){ .passes = 2, .max_rounds = 25, .duration = 30, .interval = 1,
				  .seed = 1, .qd = 128, .sector = 4096, .wl = WL_RANDWRITE };
	uint64_t v;
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "op", required_argument, 0, 'o' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "blocks-per-die", required_argument, 0, 'B' },
		{ "workload", required_argument, 0, 'w' },
		{ "bs", required_argument, 0, 'S' },
		{ "qd", required_argument, 0, 'q' },
		{ "precondition", required_argument, 0, 'k' },
		{ "max-rounds", required_argument, 0, 'R' },
		{ "duration", required_argument, 0, 'd' },
		{ "interval", required_argument, 0, 'i' },
		{ "seed", required_argument, 0, 's' },
		{ "csv", required_argument, 0, 'c' },
		{ "full-data", no_argument, 0, 'F' },
		{ "hotcold", required_argument, 0, 'H' },
		{ "parity-width", required_argument, 0, 'P' },
		{ "span", required_argument, 0, 'z' },
		{ "fresh", no_argument, 0, 'f' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = verb_getopt(inv, argc, argv, "p:o:b:B:w:S:q:k:R:d:i:s:c:FH:P:z:f", opts)) != -1) {
		switch (c) {
		case 'p': o->preset = optarg; break;
		case 'o': o->op = bench_double("--op", FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT); break;
		case 'b':
			if (parse_uint(optarg, 512, 4096, &v) || (v != 512 && v != 4096))
				bdie("bad --sector-size '%s': 512 or 4096", optarg);
			o->sector = (uint32_t)v;
			break;
		case 'B': o->bpd = bench_uint("--blocks-per-die", 16, 1u << 20, ""); break;
		case 'w': o->wl = wl_parse(optarg); break;
		case 'S':
			if (parse_byte_size(optarg, 4096, 32u << 20, &o->bs) || o->bs % 4096)
				bdie("bad --bs '%s': a multiple of 4K up to 32M", optarg);
			break;
		case 'q': o->qd = bench_uint("--qd", 1, 4096, ": 1 to 4096"); break;
		case 'k':
			o->steady = !strcmp(optarg, "steady");
			if (!o->steady)
				o->passes = bench_double("--precondition", 0, 100);
			break;
		case 'R': o->max_rounds = bench_uint("--max-rounds", STEADY_ROUNDS, 100000, ": 5 to 100000"); break;
		case 'd': o->duration = bench_double("--duration", 0.001, 1e6); break;
		case 'i': o->interval = bench_double("--interval", 0.001, 1e6); break;
		case 's': o->seed = bench_uint("--seed", 1, UINT64_MAX, ""); break;
		case 'c': o->csv_path = optarg; break;
		case 'F': o->full_data = true; break; /* keep page data (small devices) */
		case 'H':
			if (sscanf(optarg, "%lf/%lf", &o->hot_w, &o->hot_s) != 2 || !(o->hot_w > 0 && o->hot_w < 100) ||
			    !(o->hot_s > 0 && o->hot_s < 100))
				bdie("bad --hotcold '%s': W/S, W%% of the random writes to S%% of the "
				     "sectors (e.g. 80/20)", optarg);
			break;
		case 'P': o->parity = bench_uint("--parity-width", 0, 1, ": 0 or 1"); break;
		case 'z':
			if (parse_byte_size(optarg, 1u << 20, UINT64_MAX, &o->span) || o->span % (1u << 20))
				bdie("bad --span '%s': a multiple of 1M", optarg);
			break;
		case 'f': o->fresh = true; break;
		}
	}
	o->json = inv->json;
	if (!o->preset)
		bdie("--preset is needed");
	if (optind != argc)
		bdie("unexpected argument '%s'", argv[optind]);
	if (o->fresh && o->wl != WL_RANDWRITE && o->wl != WL_SEQWRITE)
		bdie("--fresh needs a write workload (randwrite, seqwrite): reads of never-written "
		     "sectors do not touch the NAND; for reads, --span SIZE fills only SIZE");
	if (o->steady && o->fresh)
		bdie("--precondition steady and --fresh: --fresh skips the preconditioning");
	if (o->steady && (o->wl == WL_SEQWRITE || o->wl == WL_SEQREAD))
		bdie("--precondition steady preconditions with random writes: the sequential "
		     "workloads are preconditioned by the fill alone");
	if (!o->bs)
		o->bs = (o->wl == WL_SEQWRITE || o->wl == WL_SEQREAD) ? 2u << 20 : 4096;
}

/* The simulated device, formatted and open, and the requests' buffers. */
static void bench_setup(struct bench *b, const struct bench_opts *o)
{
	*b = (struct bench){ .seed = o->seed, .wl = o->wl, .bs = (uint32_t)o->bs, .qd = (uint32_t)o->qd,
			     .sector = o->sector };
	struct nand_sim_config nc = { .preset = o->preset, .timing = true, .virtual_time = true,
				      .metadata_only = !o->full_data, .meta_spare_bytes = 40,
				      .meta_chunk_bytes = 4096, /* the FTL's units */
				      .blocks_per_die = (uint32_t)o->bpd, .seed = o->seed };
	char err[512];
	if (nand_sim_open(&nc, &b->dev, err, sizeof err))
		bdie("%s", err);
	struct ftl_format_params fp = { .sector_size = o->sector, .op_percent = o->op,
					.parity_width = (uint32_t)o->parity };
	if (ftl_format(b->dev, &fp, err, sizeof err))
		bdie("format: %s", err);
	if (ftl_open(b->dev, NULL, &b->f, err, sizeof err))
		bdie("open: %s", err);
	ftl_get_info(b->f, &b->info);
	b->units = b->info.units;
	if (o->span) {
		if (o->span / 4096 > b->info.units)
			bdie("--span %" PRIu64 " is larger than the capacity (%" PRIu64 " bytes)", o->span,
			     b->info.capacity);
		b->units = o->span / 4096;
	}
	if (o->bs / 4096 > b->units)
		bdie("--bs is larger than the span");
	if (o->hot_w > 0) {
		b->hot_w = o->hot_w / 100;
		b->hot_units = (uint64_t)(o->hot_s / 100 * (double)b->units);
		if (!b->hot_units)
			b->hot_units = 1;
	}
	b->reqs = calloc(o->qd, sizeof *b->reqs);
	b->free_idx = calloc(o->qd, sizeof *b->free_idx);
	/* the largest request: the fill's 128 KiB, bs, a profile's 512 KiB */
	size_t maxreq = o->bs > (512u << 10) ? o->bs : 512u << 10;
	b->wbuf = aligned_alloc(4096, maxreq);
	if (!b->reqs || !b->free_idx || !b->wbuf)
		bdie("out of memory");
	memset(b->wbuf, 0x5A, maxreq);
	for (uint32_t i = 0; i < o->qd; i++) {
		b->reqs[i].idx = (int)i;
		b->reqs[i].rbuf = aligned_alloc(4096, maxreq);
		if (!b->reqs[i].rbuf)
			bdie("out of memory");
		b->free_idx[b->nfree++] = (int)i;
	}
	const struct nand_geometry *g = &b->dev->geo;
	fprintf(stderr, "bench: %s, %u dies, %u blocks/die, %s user, %u-byte sectors, %.1f%% OP, "
			"parity %u, %s %" PRIu64 " B QD%" PRIu64 " over %s%s\n",
		o->preset, nand_dies(g), g->blocks_per_die, SIZE_TEXT((double)b->info.capacity), o->sector,
		b->info.op_percent, b->info.parity_width, wl_name(o->wl), o->bs, o->qd,
		SIZE_TEXT((double)b->units * 4096), o->fresh ? ", fresh" : "");
}

/* Fill sequentially, then random writes to steady state (unless --fresh):
 * PASSES x the span, or (--precondition steady) rounds until the rule holds
 * or max_rounds, counted in *pre_rounds.  Returns the passes of random writes. */
static double bench_precondition(struct bench *b, const struct bench_opts *o, uint64_t iv_ns,
				 struct rounds *pre_rounds)
{
	double t0 = (double)nand_now_ns();
	uint32_t save_bs = b->bs;
	b->bs = 128 << 10;
	if (!o->fresh)
		run(b, WL_SEQWRITE, b->units * 4096 / b->bs, 0, 0, NULL, NULL);
	b->bs = save_bs;
	enum wl pre = (o->wl == WL_SEQWRITE || o->wl == WL_SEQREAD) ? WL_SEQWRITE : WL_RANDWRITE;
	uint64_t bytes0 = b->bytes_done;
	/* (run() with no op count and no deadline would never stop: the
	 * rounds halt it, at max_rounds at the latest) */
	if (!o->fresh && pre == WL_RANDWRITE && (o->passes > 0 || o->steady)) {
		b->bs = 4096;
		iv_prev = take(b, nand_now(b->dev));
		memset(&b->lat_iv, 0, sizeof b->lat_iv);
		uint64_t pre_tick = nand_now(b->dev) + iv_ns;
		if (o->steady) {
			rounds_start(b, pre_rounds);
			b->halt_rounds = (unsigned)o->max_rounds;
		}
		run(b, WL_RANDWRITE, o->steady ? 0 : (uint64_t)(o->passes * (double)b->units), 0, iv_ns,
		    csv ? tick : NULL, &pre_tick);
		b->rounds = NULL;
		b->halt_rounds = 0;
		b->halt = false;
		b->bs = save_bs;
	}
	double passes = (double)(b->bytes_done - bytes0) / ((double)b->units * 4096);
	if (o->steady)
		fprintf(stderr, "bench: preconditioned to steady state: %u rounds, %.2f passes, %s\n",
			pre_rounds->n, passes, pre_rounds->rule.reached ? "reached" : "NOT reached");
	fprintf(stderr, "bench: preconditioned in %.0f s of CPU, %.1f s virtual\n",
		((double)nand_now_ns() - t0) / 1e9, (double)nand_now(b->dev) / 1e9);
	return passes;
}

/* What the rule says of the rounds r, the text after "steady state: ". */
static void steady_text(char *out, size_t len, const struct rounds *r)
{
	if (r->n < STEADY_ROUNDS) {
		snprintf(out, len, "NOT reached (%u round%s, the rule needs %d; a round is %s of host "
			 "I/O, a fifth of the span)", r->n, r->n == 1 ? "" : "s", STEADY_ROUNDS,
			 SIZE_TEXT((double)r->bytes));
		return;
	}
	const struct steady *st = &r->rule;
	unsigned first = r->n - STEADY_ROUNDS + 1;
	if (st->reached) {
		snprintf(out, len, "reached (rounds %u-%u: mean %.0f IOPS, excursion %.1f %%, slope %.1f %%)",
			 first, r->n, st->mean, st->excursion_pct, st->slope_pct);
		return;
	}
	double y[STEADY_ROUNDS];
	rounds_window(r, y);
	char ys[STEADY_ROUNDS * 24] = "";
	for (int k = 0; k < STEADY_ROUNDS; k++)
		snprintf(ys + strlen(ys), sizeof ys - strlen(ys), "%s%.0f", k ? " " : "", y[k]);
	bool exc = !(st->excursion_pct <= STEADY_EXCURSION_PCT);
	bool slope = !(fabs(st->slope_pct) <= STEADY_SLOPE_PCT);
	snprintf(out, len, "NOT reached (rounds %u-%u: %s IOPS, mean %.0f, excursion %.1f %%, slope "
		 "%.1f %%: %s%s%s)", first, r->n, ys, st->mean, st->excursion_pct, st->slope_pct,
		 exc ? "excursion above 20 %" : "", exc && slope ? ", " : "",
		 slope ? "slope beyond 10 %" : st->mean > 0 ? "" : "no requests");
}

/* The rounds r as JSON members "PREFIX_state" ... (no braces, no comma
 * after the last); r NULL: none counted, every member null */
static void steady_json(const char *prefix, const struct rounds *r)
{
	if (!r) {
		printf("\"%s_state\": null, \"%s_rounds\": null", prefix, prefix);
		printf(", \"%s_first_round\": null, \"%s_round_iops\": null, \"%s_mean_iops\": null, "
		       "\"%s_excursion_pct\": null, \"%s_slope_pct\": null", prefix, prefix, prefix,
		       prefix, prefix);
		return;
	}
	printf("\"%s_state\": %s, \"%s_rounds\": %u", prefix,
	       r->n >= STEADY_ROUNDS && r->rule.reached ? "true" : "false", prefix, r->n);
	if (r->n < STEADY_ROUNDS) {
		printf(", \"%s_first_round\": null, \"%s_round_iops\": null, \"%s_mean_iops\": null, "
		       "\"%s_excursion_pct\": null, \"%s_slope_pct\": null", prefix, prefix, prefix,
		       prefix, prefix);
		return;
	}
	double y[STEADY_ROUNDS];
	rounds_window(r, y);
	printf(", \"%s_first_round\": %u, \"%s_round_iops\": [", prefix, r->n - STEADY_ROUNDS + 1,
	       prefix);
	for (int k = 0; k < STEADY_ROUNDS; k++)
		printf("%s%.0f", k ? ", " : "", y[k]);
	printf("], \"%s_mean_iops\": %.0f, \"%s_excursion_pct\": %.2f, \"%s_slope_pct\": %.2f",
	       prefix, r->rule.mean, prefix, r->rule.excursion_pct, prefix, r->rule.slope_pct);
}

/* The measured window s0..s1 (bytes: what it transferred) against the
 * physical bound for its WA (the formulas at the top of this file), after
 * pre_passes of preconditioning (pre: its rounds, NULL if not counted). */
static void bench_report(const struct bench *b, const struct bench_opts *o, const struct snap *s0,
			 const struct snap *s1, uint64_t bytes, const struct rounds *measured,
			 double pre_passes, const struct rounds *pre)
{
	const struct nand_geometry *g = &b->dev->geo;
	const struct nand_preset *pr = nand_preset_find(o->preset);
	enum wl wl = o->wl;
	double secs = (double)(s1->t - s0->t) / 1e9;
	double iops = (double)(s1->ops - s0->ops) / secs;
	uint64_t hp = s1->host_pages - s0->host_pages, np = s1->nand_pages - s0->nand_pages;
	double wa = hp ? (double)np / (double)hp : 0;
	double util = (double)(s1->busy - s0->busy) / 1e9 / ((double)nand_dies(g) * secs);
	/* physical bounds for this WA (per host request of bs bytes) */
	double units_per_req = (double)b->bs / 4096;
	double rd = wl == WL_RANDREAD || wl == WL_SEQREAD || wl == WL_WEBSERVER ? 1 :
		    wl == WL_RW70 ? 0.7 : wl == WL_FILESERVER ? 0.8 : 0;
	if (wl == WL_FILESERVER || wl == WL_WEBSERVER) {
		/* pages touched per request, on average (at least one) */
		double mean = mix_mean(wl == WL_FILESERVER ? fileserver_mix : webserver_mix, o->sector);
		units_per_req = mean < 4096 ? 1 : mean / 4096;
	}
	double wr = 1 - rd;
	double tr = pr->timing.read_us * 1e-6, tp = pr->timing.program_us * 1e-6,
	       te = pr->timing.erase_us * 1e-6;
	double xfer = pr->timing.xfer_mbps ? (double)(g->page_size + g->spare_size) /
						     (pr->timing.xfer_mbps * 1e6) : 0;
	double wwa = wr > 0 ? (wa > 1 ? wa : 1) : 0;
	/* a NAND page of upp units: one program (and transfer) takes upp
	 * units, a read of one unit still reads and moves the whole page */
	double upp = g->page_size > 4096 ? (double)g->page_size / 4096 : 1, ppb = g->pages_per_block * upp;
	double die_time = units_per_req * (wr * (wwa * (xfer + tp) / upp + (wwa - 1) * (tr + xfer) +
						 wwa / ppb * te) +
					   rd * (tr + xfer));
	double brief_time = units_per_req * (wr * (wwa * tp / upp + (wwa - 1) * tr + wwa / ppb * te) +
					     rd * tr);
	double brief_bound = brief_time > 0 ? nand_dies(g) / brief_time : 0;
	double chan_time = units_per_req * (wr * (wwa / upp + (wwa - 1)) + rd) * xfer;
	double die_bound = die_time > 0 ? nand_dies(g) / die_time : 0;
	double chan_bound = chan_time > 0 ? g->channels / chan_time : INFINITY;
	double bound = die_bound < chan_bound ? die_bound : chan_bound;
	double mb_s = (double)bytes / secs / 1e6;
	if (o->json) {
		printf("{\"preset\": \"%s\", \"dies\": %u, \"blocks_per_die\": %u, \"capacity_bytes\": %" PRIu64
		       ", \"sector_size\": %u, \"op_percent\": %.2f, \"parity_width\": %u, "
		       "\"workload\": \"%s\", \"bs\": %u, "
		       "\"qd\": %" PRIu64 ", \"span_bytes\": %" PRIu64 ", \"fresh\": %s, "
		       "\"precondition_passes\": %g, \"duration_s\": %.3f, "
		       "\"iops\": %.0f, \"mb_per_s\": %.1f, \"lat_mean_ms\": %.3f, \"lat_sd_ms\": %.3f, "
		       "\"lat_p99_ms\": %.3f, \"lat_max_ms\": %.3f, \"interval_lat_sd_max_ms\": %.3f, "
		       "\"interval_iops_min\": %.0f, \"interval_iops_max\": %.0f, "
		       "\"write_amplification\": %.3f, \"die_util_pct\": %.1f, "
		       "\"bound_die_iops\": %.0f, \"bound_channel_iops\": %.0f, \"bound_iops\": %.0f, "
		       "\"share_of_bound\": %.3f, \"bound_brief_iops\": %.0f, \"failed\": %" PRIu64 ", "
		       "\"round_bytes\": %" PRIu64 ", ",
		       o->preset, nand_dies(g), g->blocks_per_die, b->info.capacity, o->sector,
		       b->info.op_percent, b->info.parity_width, wl_name(wl), b->bs, o->qd, b->units * 4096,
		       o->fresh ? "true" : "false", o->fresh ? 0 : o->steady ? pre_passes : o->passes, secs, iops,
		       mb_s,
		       lat_mean(&b->lat_all) / 1e6, lat_sd(&b->lat_all) / 1e6,
		       (double)lat_pct(&b->lat_all, 0.99) / 1e6, (double)b->lat_all.max / 1e6,
		       iv_sd_max / 1e6, iv_iops_min, iv_iops_max, wa, 100 * util, die_bound,
		       isinf(chan_bound) ? -1.0 : chan_bound, bound, bound > 0 ? iops / bound : 0,
		       brief_bound, b->failed, measured->bytes);
		steady_json("steady", measured);
		printf(", \"precondition_until_steady\": %s, ", o->steady ? "true" : "false");
		steady_json("precondition_steady", pre);
		printf("}\n");
		return;
	}
	printf("%s, %.1f%% OP, %u-byte sectors, %s %u B at QD%" PRIu64 " over %s%s, %.1f s "
	       "virtual:\n", o->preset, b->info.op_percent, o->sector, wl_name(wl), b->bs, o->qd,
	       SIZE_TEXT((double)b->units * 4096), o->fresh ? " (fresh)" : "", secs);
	printf("  %.0f IOPS (%.1f MB/s); latency mean %.3f ms, sd %.3f ms, p99 %.3f ms, max %.3f ms\n",
	       iops, mb_s, lat_mean(&b->lat_all) / 1e6, lat_sd(&b->lat_all) / 1e6,
	       (double)lat_pct(&b->lat_all, 0.99) / 1e6, (double)b->lat_all.max / 1e6);
	printf("  WA %.3f, dies %.1f%% busy; bound %.0f IOPS (dies %.0f, channels %.0f): "
	       "%.0f%% of it; the brief's formula (no transfers) %.0f\n",
	       wa, 100 * util, bound, die_bound, chan_bound, bound > 0 ? 100 * iops / bound : 0,
	       brief_bound);
	double ops = (double)(s1->ops - s0->ops);
	printf("  per request: %.2f programs, %.2f page reads, %.2f spare reads, %.4f erases; "
	       "die time %.0f us (bound's %.0f us)\n",
	       (double)np / ops, (double)(s1->reads - s0->reads) / ops,
	       (double)(s1->spare_reads - s0->spare_reads) / ops,
	       (double)(s1->erases - s0->erases) / ops,
	       (double)(s1->busy - s0->busy) / 1e3 / ops, die_time * 1e6);
	if (b->failed)
		printf("  %" PRIu64 " requests failed\n", b->failed);
	char line[512];
	if (pre) {
		steady_text(line, sizeof line, pre);
		printf("  preconditioning to steady state: %u rounds%s, %.2f passes: %s\n", pre->n,
		       !pre->rule.reached && pre->n >= o->max_rounds ? " (the cap)" : "", pre_passes, line);
	}
	steady_text(line, sizeof line, measured);
	printf("  steady state: %s\n", line);
}

int cmd_bench(struct invocation *inv, int argc, char **argv)
{
	struct bench_opts o;
	bench_parse(inv, argc, argv, &o);
	struct bench b;
	bench_setup(&b, &o);
	if (o.csv_path) {
		csv = fopen(o.csv_path, "w");
		if (!csv)
			bdie("cannot write %s", o.csv_path);
		fprintf(csv, "phase,t_s,iops,lat_mean_ms,lat_sd_ms,lat_p99_ms,lat_max_ms,wa,die_util_pct,checkpoints\n");
	}
	uint64_t iv_ns = (uint64_t)(o.interval * 1e9);
	struct rounds pre;
	double pre_passes = bench_precondition(&b, &o, iv_ns, &pre);

	/* measure */
	uint64_t start = nand_now(b.dev);
	struct snap s0 = take(&b, start);
	uint64_t s0_bytes = b.bytes_done;
	iv_prev = s0;
	memset(&b.lat_iv, 0, sizeof b.lat_iv);
	b.measuring = true;
	struct rounds measured;
	rounds_start(&b, &measured);
	uint64_t next_tick = start + iv_ns;
	run(&b, o.wl, 0, start + (uint64_t)(o.duration * 1e9), iv_ns, tick, &next_tick);
	b.measuring = false;
	b.rounds = NULL;
	struct snap s1 = take(&b, nand_now(b.dev));
	if (csv)
		fclose(csv);
	bench_report(&b, &o, &s0, &s1, b.bytes_done - s0_bytes, &measured, pre_passes,
		     o.steady ? &pre : NULL);
	ftl_close(b.f);
	nand_close(b.dev);
	return 0;
}
