/*
 * flashctl simulate and presets: the FTL alone on a simulated device, no
 * flashd.  simulate formats a fresh device (a temporary image, --image
 * FILE, or memory), fills it, overwrites it with random 4 KiB writes and
 * reports write amplification (against the greedy model) and speed;
 * presets lists the simulator's devices.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/units.h"
#include "ftl/ftl.h"
#include "hw/nand.h"
#include "tools/flashctl/flashctl.h"

struct sim_opts {
	const char *preset, *workload, *image;
	double op, passes;      /* op 0: the device's stock (ftl_stock_op_percent) */
	uint32_t sector, parity;
	uint64_t seed, reads, flush_every;
	bool json, ram, timing, no_flush_parity;
	double hot_w, hot_s;    /* hotcold:W/S as shares; hot_w 0: uniform */
};

/* what a run measured: the stats before the overwrite (s0), before its
 * last pass (sl) and at its end (s1); seconds of the clock (virtual with
 * --timing) */
struct sim_result {
	struct ftl_info info;
	struct ftl_stats s0, sl, s1;
	uint64_t nwrites, last_from;
	double t_fill, t_write, t_read, steady_ops;
};

static double now_s(void)
{
	return (double)nand_now_ns() / 1e9;
}

static void check(int rc, const char *what)
{
	if (rc)
		die("%s failed: %s", what, strerror(-rc));
}

static void sim_parse(struct invocation *inv, int argc, char **argv, struct sim_opts *o)
{
	*o = (struct sim_opts){ .workload = "uniform", .passes = 1, .sector = 4096, .seed = 1 };
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "parity-width", required_argument, 0, 'P' },
		{ "flush-every", required_argument, 0, 'F' },
		{ "no-flush-parity", no_argument, 0, 'N' },
		{ "op", required_argument, 0, 'o' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "workload", required_argument, 0, 'w' },
		{ "passes", required_argument, 0, 'k' },
		{ "reads", required_argument, 0, 'r' },
		{ "seed", required_argument, 0, 's' },
		{ "image", required_argument, 0, 'i' },
		{ "ram", no_argument, 0, 'm' },
		{ "timing", no_argument, 0, 't' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = verb_getopt(inv, argc, argv, "p:o:b:w:k:r:s:i:mtP:F:N", opts)) != -1) {
		switch (c) {
		case 'p': o->preset = optarg; break;
		case 'P': o->parity = (uint32_t)opt_uint("--parity-width", optarg, 0, 1); break;
		case 'F': o->flush_every = opt_uint("--flush-every", optarg, 0, UINT64_MAX); break;
		case 'N': o->no_flush_parity = true; break;
		case 'o': o->op = opt_double("--op", optarg, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT); break;
		case 'b': o->sector = opt_sector_size(optarg); break;
		case 'w': o->workload = optarg; break;
		case 'k': o->passes = opt_double("--passes", optarg, 0, 1000); break;
		case 'r': o->reads = opt_uint("--reads", optarg, 0, UINT64_MAX); break;
		case 's': o->seed = opt_uint("--seed", optarg, 0, UINT64_MAX); break;
		case 'i': o->image = optarg; break;
		case 'm': o->ram = true; break;
		case 't': o->timing = true; break;
		}
	}
	o->json = inv->json;
	if (!o->preset)
		die("simulate needs --preset");
	if (optind != argc)
		die("unexpected argument '%s'", argv[optind]);
	if (strcmp(o->workload, "uniform") == 0) {
		o->hot_w = 0;
	} else if (sscanf(o->workload, "hotcold:%lf/%lf", &o->hot_w, &o->hot_s) == 2 && o->hot_w > 0 &&
		   o->hot_w < 100 && o->hot_s > 0 && o->hot_s < 100) {
		o->hot_w /= 100;
		o->hot_s /= 100;
	} else {
		die("workload must be uniform or hotcold:W/S (W%% of writes to S%% of the sectors)");
	}
	if (!o->seed)
		o->seed = 1;
}

/* A freshly formatted device and its FTL: in memory (--ram), in --image,
 * or in a temporary image unlinked once open. */
static struct ftl *sim_open(const struct sim_opts *o, struct nand_dev **dp)
{
	char tmp[] = "/tmp/flashctl-sim-XXXXXX";
	const char *path = NULL;
	if (!o->ram) {
		if (o->image) {
			path = o->image;
		} else {
			int fd = mkstemp(tmp);
			if (fd < 0)
				die("cannot create a temporary image: %s", strerror(errno));
			close(fd);
			path = tmp;
		}
	}
	struct nand_spec spec = { .backend = "sim", .preset = o->preset, .path = path, .create = true,
				  .timing = o->timing, .seed = o->seed };
	struct nand_dev *d;
	char err[512];
	if (nand_open(&spec, &d, err, sizeof err))
		die("%s", err);
	if (path && !o->image)
		unlink(path);
	struct ftl_format_params fp = { .sector_size = o->sector, .op_percent = o->op,
					.parity_width = o->parity };
	if (ftl_format(d, &fp, err, sizeof err))
		die("format: %s", err);
	struct ftl *f;
	struct ftl_open_params opp = { .no_flush_parity = o->no_flush_parity };
	if (ftl_open(d, &opp, &f, err, sizeof err))
		die("open: %s", err);
	*dp = d;
	return f;
}

/* Fill, overwrite passes x capacity, then the random reads; buf: 256 KiB. */
static void sim_run(struct ftl *f, const struct sim_opts *o, uint8_t *buf, struct sim_result *res)
{
	uint64_t seed = o->seed;
	ftl_get_info(f, &res->info);
	uint64_t units = res->info.units;

	/* fill: sequential 256 KiB writes */
	size_t chunk = 256 * 1024;
	for (size_t i = 0; i < chunk; i += 8) {
		uint64_t v = xorshift64s(&seed);
		memcpy(buf + i, &v, 8);
	}
	double t0 = now_s();
	for (uint64_t off = 0; off < res->info.capacity; off += chunk) {
		uint64_t len = res->info.capacity - off < chunk ? res->info.capacity - off : chunk;
		check(ftl_write_sync(f, buf, off, len, 0), "fill write");
	}
	check(ftl_flush_sync(f), "flush");
	res->t_fill = now_s() - t0;

	/* overwrite: random 4 KiB writes, passes x capacity */
	ftl_get_stats(f, &res->s0);
	res->sl = res->s0;
	uint64_t nwrites = (uint64_t)(o->passes * (double)units);
	uint64_t hot_units = (uint64_t)(o->hot_s * (double)units);
	if (o->hot_w > 0 && !hot_units)
		hot_units = 1;
	t0 = now_s();
	/* the last pass (at most one capacity's worth of writes) alone: the
	 * steady state, after GC has settled and the media is all touched */
	uint64_t last_from = nwrites > units ? nwrites - units : 0;
	double t_last = t0;
	for (uint64_t i = 0; i < nwrites; i++) {
		if (i == last_from) {
			t_last = now_s();
			ftl_get_stats(f, &res->sl);
		}
		uint64_t r = xorshift64s(&seed), u;
		if (o->hot_w > 0) {
			bool hot = (double)(r >> 11) / (double)(1ull << 53) < o->hot_w;
			uint64_t r2 = xorshift64s(&seed);
			u = hot ? r2 % hot_units : hot_units + r2 % (units - hot_units);
		} else {
			u = r % units;
		}
		memcpy(buf, &i, sizeof i);
		check(ftl_write_sync(f, buf, u * 4096, 4096, 0), "write");
		if (o->flush_every && (i + 1) % o->flush_every == 0)
			check(ftl_flush_sync(f), "flush");
	}
	check(ftl_flush_sync(f), "flush");
	double t_end = now_s();
	res->t_write = t_end - t0;
	res->steady_ops = t_end > t_last ? (double)(nwrites - last_from) / (t_end - t_last) : 0;
	res->nwrites = nwrites;
	res->last_from = last_from;
	ftl_get_stats(f, &res->s1);

	/* reads: random 4 KiB */
	res->t_read = 0;
	if (o->reads) {
		struct ftl_io io = { .type = FTL_IO_READ, .length = 4096, .buf = buf };
		t0 = now_s();
		for (uint64_t i = 0; i < o->reads; i++) {
			io.offset = (xorshift64s(&seed) % units) * 4096;
			check(ftl_io_sync(f, &io), "read");
		}
		res->t_read = now_s() - t0;
	}
}

/* greedy analytic WA at op_percent (Hu et al.; Desnoyers): A = a / (a + W0(-a e^-a)) */
static double wa_greedy_model(double op_percent)
{
	double a = 100.0 / (100.0 - op_percent);
	double x = -a * exp(-a), w = -0.5;
	for (int it = 0; it < 100; it++) {
		double ew = exp(w);
		w -= (w * ew - x) / (ew * (w + 1));
	}
	return a / (a + w);
}

static void sim_report(const struct sim_opts *o, const struct sim_result *res)
{
	const struct ftl_stats *s0 = &res->s0, *s1 = &res->s1, *sl = &res->sl;
	const struct ftl_info *info = &res->info;
	uint64_t nwrites = res->nwrites, reads = o->reads;
	uint64_t host = s1->host_pages_written - s0->host_pages_written;
	uint64_t nand = s1->nand_pages_programmed - s0->nand_pages_programmed;
	double wa = host ? (double)nand / (double)host : 0;
	uint64_t host_l = s1->host_pages_written - sl->host_pages_written;
	double wa_last = host_l ? (double)(s1->nand_pages_programmed - sl->nand_pages_programmed) / (double)host_l : 0;
	double wa_model = wa_greedy_model(info->op_percent);
	if (!o->json) {
		printf("%s, %u-byte sectors, %.1f%% OP, %s, %g passes of %s\n", o->preset, o->sector,
		       info->op_percent, o->workload, o->passes, SIZE_TEXT((double)info->capacity));
		printf("  write amplification %.3f, last pass %.3f (greedy model %.3f)\n", wa, wa_last,
		       wa_model);
		printf("  %" PRIu64 " host pages, %" PRIu64 " NAND pages, %" PRIu64 " erases\n", host, nand,
		       s1->blocks_erased - s0->blocks_erased);
		if (o->parity || o->flush_every)
			printf("  parity width %u, a flush every %" PRIu64 " writes: %" PRIu64
			       " partial-parity pages, %" PRIu64 " pad pages\n", o->parity, o->flush_every,
			       s1->parity_ppl_pages - s0->parity_ppl_pages,
			       s1->parity_pad_pages - s0->parity_pad_pages);
		printf("  random 4 KiB writes: %.0f/s (last pass %.0f/s)",
		       res->t_write > 0 ? (double)nwrites / res->t_write : 0, res->steady_ops);
		if (reads)
			printf(", reads: %.0f/s", (double)reads / res->t_read);
		printf("\n  erase counts min/avg/max %u/%.1f/%u; map %.1f MiB\n", s1->erase_min,
		       s1->erase_avg, s1->erase_max, (double)s1->l2p_bytes / (1 << 20));
		return;
	}
	printf("{\n  \"preset\": \"%s\",\n  \"sector_size\": %u,\n  \"op_percent\": %.2f,\n"
	       "  \"capacity_bytes\": %" PRIu64 ",\n  \"workload\": \"%s\",\n  \"passes\": %g,\n"
	       "  \"seed\": %" PRIu64 ",\n  \"media\": \"%s\",\n  \"timing\": %s,\n",
	       o->preset, o->sector, info->op_percent, info->capacity, o->workload, o->passes, o->seed,
	       o->ram ? "ram" : "file", o->timing ? "true" : "false");
	printf("  \"write_amplification\": %.4f,\n  \"write_amplification_last_pass\": %.4f,\n"
	       "  \"write_amplification_greedy_model\": %.4f,\n",
	       wa, wa_last, wa_model);
	printf("  \"host_pages_written\": %" PRIu64 ",\n  \"nand_pages_programmed\": %" PRIu64 ",\n",
	       host, nand);
	printf("  \"gc_pages_relocated\": %" PRIu64 ",\n  \"blocks_erased\": %" PRIu64 ",\n",
	       s1->gc_pages_relocated - s0->gc_pages_relocated, s1->blocks_erased - s0->blocks_erased);
	printf("  \"checkpoints\": %" PRIu64 ",\n", s1->checkpoints - s0->checkpoints);
	printf("  \"parity_width\": %u,\n  \"flush_every\": %" PRIu64 ",\n"
	       "  \"parity_ppl_pages\": %" PRIu64 ",\n  \"parity_pad_pages\": %" PRIu64 ",\n",
	       o->parity, o->flush_every, s1->parity_ppl_pages - s0->parity_ppl_pages,
	       s1->parity_pad_pages - s0->parity_pad_pages);
	printf("  \"fill_seconds\": %.3f,\n  \"write_seconds\": %.3f,\n", res->t_fill, res->t_write);
	printf("  \"ops_per_sec\": %.0f,\n", res->t_write > 0 ? (double)nwrites / res->t_write : 0);
	printf("  \"last_pass_ops_per_sec\": %.0f,\n", res->steady_ops);
	if (reads)
		printf("  \"reads\": %" PRIu64 ",\n  \"reads_per_sec\": %.0f,\n", reads,
		       res->t_read > 0 ? (double)reads / res->t_read : 0);
	printf("  \"erase_count_min\": %u,\n  \"erase_count_avg\": %.2f,\n  \"erase_count_max\": %u,\n",
	       s1->erase_min, s1->erase_avg, s1->erase_max);
	printf("  \"l2p_bytes\": %" PRIu64 ",\n  \"l2p_bytes_per_tib\": %.0f,\n  \"ram_bytes\": %" PRIu64 "\n}\n",
	       s1->l2p_bytes, (double)s1->l2p_bytes * (double)(1ull << 40) / (double)info->capacity,
	       s1->ram_bytes);
}

int cmd_simulate(struct invocation *inv, int argc, char **argv)
{
	struct sim_opts o;
	sim_parse(inv, argc, argv, &o);
	struct nand_dev *d;
	struct ftl *f = sim_open(&o, &d);
	uint8_t *buf = aligned_alloc(4096, 256 * 1024);
	static struct sim_result res; /* three ftl_stats: off the stack */
	sim_run(f, &o, buf, &res);
	sim_report(&o, &res);
	check(ftl_close(f), "close");
	nand_close(d);
	free(buf);
	return 0;
}

int cmd_presets(struct invocation *inv, int argc, char **argv)
{
	if (argc > 1)
		die("presets takes no arguments");
	const char *name;
	for (size_t i = 0; (name = nand_preset_name(i)); i++)
		printf("%-16s %s\n", name, nand_preset_description(name));
	return 0;
}
