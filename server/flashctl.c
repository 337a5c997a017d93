/*
 * flashctl - manage ioDimm images and study the FTL, like the vendor's
 * fio-format / fio-status tools.
 *
 *   flashctl format IMAGE --preset P [--sector-size 512|4096]
 *                         [--capacity BYTES|PCT%] [--op PCT]
 *   flashctl info IMAGE [--json]
 *   flashctl recover IMAGE [--rebuild-superblock [--sector-size N] [--capacity BYTES]]
 *   flashctl simulate --preset P [--op PCT] [--sector-size N]
 *                     [--workload uniform|hotcold:H/C] [--passes K]
 *                     [--reads N] [--ram] [--timing] [--seed S] [--json]
 *   flashctl status [--control SOCKET] [--json]
 *   flashctl presets
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/parse.h"
#include "ftl/ftl.h"

static const char *prog = "flashctl";

int cmd_bench(int argc, char **argv); /* flashctl_bench.c */

static void usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"  %s format IMAGE --preset P [--sector-size 512|4096] [--capacity BYTES|PCT%%] [--op PCT]\n"
		"      low-level format (creates IMAGE if missing).  --capacity PCT%% is a share of the\n"
		"      stock capacity (100%% = stock = 20%% over-provisioning; 80%% = high performance);\n"
		"      --op is the over-provisioning as a share of raw NAND (20 = stock, 36 = high perf)\n"
		"  %s info IMAGE [--json]\n"
		"      geometry, format and statistics of an image that is not in use\n"
		"  %s recover IMAGE [--json]\n"
		"      scan an image whose FTL does not open: superblock, checkpoints, log\n"
		"  %s recover IMAGE --rebuild-superblock [--sector-size 512|4096] [--capacity BYTES]\n"
		"      write a new superblock for the log and newest intact checkpoint found;\n"
		"      sector size and capacity are needed only if no checkpoint records them\n"
		"  %s simulate --preset P [--op PCT] [--sector-size N] [--workload uniform|hotcold:80/20]\n"
		"           [--passes K] [--reads N] [--ram] [--timing] [--seed S] [--json]\n"
		"      format a fresh device, fill it, overwrite it K times with random 4 KiB writes,\n"
		"      report write amplification and speed\n"
		"  %s bench --preset P [--op PCT] [--workload randwrite|randread|rw70|seqwrite|seqread]\n"
		"           [--qd N] [--precondition PASSES] [--duration S] [--csv FILE] [--json] ...\n"
		"      the reviewers' protocol on the simulator's virtual clock (full-size devices\n"
		"      fit: only page metadata is kept); prints IOPS, latency, WA and the physical bound\n"
		"  %s status [--control SOCKET] [--json]\n"
		"      state and live statistics of every ioDimm a running flashd serves\n"
		"  %s presets\n",
		prog, prog, prog, prog, prog, prog, prog, prog);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* --capacity: BYTES (K/M/G/T) or PCT% of the stock capacity (0 < PCT <= 100). */
static uint64_t opt_capacity(const char *s, bool *pct, double *pctval)
{
	uint64_t v;
	*pct = strchr(s, '%') != NULL;
	if (*pct) {
		if (parse_percent(s, 0, 100, pctval) || *pctval <= 0)
			die("bad --capacity '%s': a share of the stock capacity is more than 0%% and at "
			    "most 100%%", s);
		return 0;
	}
	if (parse_byte_size(s, 1, UINT64_MAX, &v))
		die("bad --capacity '%s': bytes with an optional K, M, G or T, or PCT%%", s);
	if (v < (1u << 20))
		die("--capacity %s is below 1 MiB%s", s, v <= 100 ? " (did you mean a percentage?)" : "");
	return v;
}

static uint32_t opt_sector_size(const char *s)
{
	uint64_t v;
	if (parse_byte_size(s, 512, 4096, &v) || (v != 512 && v != 4096))
		die("bad --sector-size '%s': 512 or 4096", s);
	return (uint32_t)v;
}

static double opt_double(const char *name, const char *s, double min, double max)
{
	double v;
	if (parse_double(s, min, max, &v))
		die("bad %s '%s': a number from %g to %g", name, s, min, max);
	return v;
}

static uint64_t opt_uint(const char *name, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;
	if (parse_uint(s, min, max, &v))
		die("bad %s '%s': a whole number from %" PRIu64 " to %" PRIu64, name, s, min, max);
	return v;
}

static double now_s(void)
{
	return (double)nand_now_ns() / 1e9;
}

/* ---- format / info -------------------------------------------------------- */

static void sim_notice(void *arg, const char *msg)
{
	fprintf(stderr, "%s: warning: %s\n", prog, msg);
}

static struct nand_dev *open_image(const char *path, const char *preset, bool create, bool ro)
{
	struct nand_sim_config cfg = { .preset = preset, .path = path, .create = create,
				       .readonly = ro, .sync_on_flush = true, .log = sim_notice };
	struct nand_dev *d;
	char err[512];
	int rc = nand_sim_open(&cfg, &d, err, sizeof err);
	if (rc == -EBUSY)
		die("%s (a running flashd owns it: use 'flashctl status', or stop it first)", err);
	if (rc)
		die("%s", err);
	return d;
}

static int cmd_format(int argc, char **argv)
{
	const char *preset = NULL, *cap = NULL;
	uint32_t sector = 512;
	double op = -1;
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "capacity", required_argument, 0, 's' },
		{ "op", required_argument, 0, 'o' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "p:b:s:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': preset = optarg; break;
		case 'b': sector = opt_sector_size(optarg); break;
		case 's': cap = optarg; break;
		case 'o': op = opt_double("--op", optarg, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc)
		die("format needs exactly one IMAGE");
	if (cap && op >= 0)
		die("give --capacity or --op, not both");
	const char *path = argv[optind];
	bool exists = access(path, F_OK) == 0;
	if (!exists && !preset)
		die("%s does not exist: --preset is needed to create it", path);
	struct nand_dev *d = open_image(path, preset, !exists, false);

	struct ftl_format_params fp = { .sector_size = sector };
	if (cap) {
		bool pct;
		double pv;
		uint64_t bytes = opt_capacity(cap, &pct, &pv);
		if (pct) {
			uint64_t stock = ftl_capacity_for_op(d, FTL_STOCK_OP_PERCENT);
			bytes = (uint64_t)((double)stock * pv / 100.0);
		}
		fp.capacity_bytes = bytes;
		if (!bytes)
			die("capacity must not be zero");
	} else if (op >= 0) {
		fp.op_percent = op;
	}
	char err[512];
	int rc = ftl_format(d, &fp, err, sizeof err);
	if (rc) {
		nand_close(d);
		die("format failed: %s", err[0] ? err : strerror(-rc));
	}
	struct ftl_info info;
	ftl_peek_format(d, &info);
	printf("%s: formatted %s: %" PRIu64 " sectors of %u bytes (%.2f GiB), %.1f%% over-provisioning\n",
	       path, d->preset, info.capacity / info.sector_size, info.sector_size,
	       (double)info.capacity / (1 << 30), info.op_percent);
	nand_close(d);
	return 0;
}

static void print_stats_json(FILE *o, const struct ftl_stats *s, const char *indent)
{
	fprintf(o,
		"%s\"host_read_bytes\": %" PRIu64 ",\n%s\"host_write_bytes\": %" PRIu64 ",\n"
		"%s\"host_trim_bytes\": %" PRIu64 ",\n%s\"host_zero_bytes\": %" PRIu64 ",\n"
		"%s\"host_pages_written\": %" PRIu64 ",\n%s\"host_pages_read\": %" PRIu64 ",\n"
		"%s\"nand_pages_programmed\": %" PRIu64 ",\n%s\"nand_pages_read\": %" PRIu64 ",\n"
		"%s\"blocks_erased\": %" PRIu64 ",\n%s\"gc_pages_relocated\": %" PRIu64 ",\n"
		"%s\"checkpoints\": %" PRIu64 ",\n%s\"write_amplification\": %.4f,\n"
		"%s\"blocks_total\": %" PRIu64 ",\n%s\"blocks_free\": %" PRIu64 ",\n"
		"%s\"blocks_data\": %" PRIu64 ",\n%s\"blocks_bad\": %" PRIu64 ",\n"
		"%s\"blocks_bad_grown\": %" PRIu64 ",\n%s\"valid_pages\": %" PRIu64 ",\n"
		"%s\"erase_count_min\": %u,\n%s\"erase_count_avg\": %.2f,\n%s\"erase_count_max\": %u,\n"
		"%s\"rated_pe_cycles\": %u,\n%s\"read_errors_corrected\": %" PRIu64 ",\n"
		"%s\"read_errors_uncorrectable\": %" PRIu64 ",\n%s\"crc_errors\": %" PRIu64 ",\n"
		"%s\"program_failures\": %" PRIu64 ",\n"
		"%s\"erase_failures\": %" PRIu64 ",\n%s\"lost_units\": %" PRIu64 ",\n"
		"%s\"l2p_bytes\": %" PRIu64 ",\n%s\"ram_bytes\": %" PRIu64 "\n",
		indent, s->host_read_bytes, indent, s->host_write_bytes, indent, s->host_trim_bytes,
		indent, s->host_zero_bytes, indent, s->host_pages_written, indent, s->host_pages_read,
		indent, s->nand_pages_programmed, indent, s->nand_pages_read, indent, s->blocks_erased,
		indent, s->gc_pages_relocated, indent, s->checkpoints, indent, s->write_amplification,
		indent, s->blocks_total, indent, s->blocks_free, indent, s->blocks_data, indent,
		s->blocks_bad, indent, s->blocks_bad_grown, indent, s->valid_pages, indent, s->erase_min,
		indent, s->erase_avg, indent, s->erase_max, indent, s->rated_pe_cycles, indent,
		s->read_errors_corrected, indent, s->read_errors_uncorrectable, indent, s->crc_errors,
		indent, s->program_failures, indent, s->erase_failures, indent, s->lost_units, indent,
		s->l2p_bytes, indent, s->ram_bytes);
}

static int cmd_info(int argc, char **argv)
{
	bool json = false;
	static const struct option opts[] = {
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc)
		die("info needs exactly one IMAGE");
	const char *path = argv[optind];
	struct nand_dev *d = open_image(path, NULL, false, true);
	const struct nand_geometry *g = &d->geo;
	struct ftl_open_params op = { .readonly = true };
	struct ftl *f = NULL;
	char err[512];
	int rc = ftl_open(d, &op, &f, err, sizeof err);
	struct ftl_info info = { 0 };
	struct ftl_stats st = { 0 };
	if (rc == 0) {
		ftl_get_info(f, &info);
		ftl_get_stats(f, &st);
	}
	const char *unopened = rc == -ENODATA ? "not formatted" : "does not open";
	if (json) {
		printf("{\n  \"image\": \"%s\",\n  \"preset\": \"%s\",\n", path, d->preset);
		printf("  \"geometry\": {\"channels\": %u, \"dies_per_channel\": %u, \"planes_per_die\": %u, "
		       "\"blocks_per_die\": %u, \"pages_per_block\": %u, \"page_size\": %u, "
		       "\"spare_size\": %u, \"raw_bytes\": %" PRIu64 "},\n",
		       g->channels, g->dies_per_channel, g->planes_per_die, g->blocks_per_die,
		       g->pages_per_block, g->page_size, g->spare_size, nand_raw_bytes(g));
		if (rc) {
			printf("  \"formatted\": %s,\n  \"error\": \"%s\"\n}\n",
			       rc == -ENODATA ? "false" : "null", err);
		} else {
			printf("  \"formatted\": true,\n  \"format\": {\"sector_size\": %u, \"sectors\": %" PRIu64
			       ", \"capacity_bytes\": %" PRIu64 ", \"op_percent\": %.2f, \"format_id\": \"%016" PRIx64
			       "\", \"format_time\": %" PRIu64 ", \"last_close_clean\": %s, \"recovered_pages\": %" PRIu64
			       "},\n",
			       info.sector_size, info.capacity / info.sector_size, info.capacity,
			       info.op_percent, info.format_id, info.format_time,
			       info.was_clean ? "true" : "false", info.recovered_pages);
			printf("  \"checkpoint_damaged\": %s,\n  \"notes\": \"%s\",\n",
			       info.checkpoint_damaged ? "true" : "false", info.notes);
			printf("  \"stats\": {\n");
			print_stats_json(stdout, &st, "    ");
			printf("  }\n}\n");
		}
	} else {
		printf("%s: simulated ioDimm, preset %s\n", path, d->preset);
		printf("  geometry: %u channels x %u dies, %u blocks/die, %u pages/block, %u+%u byte pages, %.2f GiB raw\n",
		       g->channels, g->dies_per_channel, g->blocks_per_die, g->pages_per_block,
		       g->page_size, g->spare_size, (double)nand_raw_bytes(g) / (1 << 30));
		if (rc) {
			printf("  %s: %s\n", unopened, err);
			if (rc == -EUCLEAN)
				printf("  'flashctl recover %s' reports what is on the media and can rebuild "
				       "the superblock\n", path);
		} else {
			char when[64];
			time_t t = (time_t)info.format_time;
			strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
			printf("  format: %" PRIu64 " sectors of %u bytes (%.2f GiB), %.1f%% over-provisioning, formatted %s\n",
			       info.capacity / info.sector_size, info.sector_size,
			       (double)info.capacity / (1 << 30), info.op_percent, when);
			printf("  last shutdown: %s%s\n", info.was_clean ? "clean" : "unclean",
			       info.was_clean ? "" : " (recovered from the log at this open)");
			if (info.notes[0])
				printf("  warning: %s\n", info.notes);
			if (st.crc_errors || st.read_errors_uncorrectable || st.lost_units)
				printf("  errors: %" PRIu64 " uncorrectable reads (%" PRIu64 " failed their data CRC), "
				       "%" PRIu64 " units lost\n",
				       st.read_errors_uncorrectable, st.crc_errors, st.lost_units);
			printf("  written: host %.2f GiB, NAND %.2f GiB (write amplification %.2f); read: host %.2f GiB\n",
			       (double)st.host_pages_written * 4096 / (1 << 30),
			       (double)st.nand_pages_programmed * g->page_size / (1 << 30),
			       st.write_amplification, (double)st.host_read_bytes / (1 << 30));
			printf("  blocks: %" PRIu64 " total, %" PRIu64 " free, %" PRIu64 " data, %" PRIu64
			       " bad (%" PRIu64 " grown); erase count min/avg/max %u/%.1f/%u of %u rated\n",
			       st.blocks_total, st.blocks_free, st.blocks_data, st.blocks_bad,
			       st.blocks_bad_grown, st.erase_min, st.erase_avg, st.erase_max,
			       st.rated_pe_cycles);
			printf("  RAM for the map: %.1f MiB (%.2f MiB per GiB of capacity)\n",
			       (double)st.l2p_bytes / (1 << 20),
			       (double)st.l2p_bytes / (1 << 20) / ((double)info.capacity / (1 << 30)));
		}
	}
	if (f)
		ftl_close(f);
	nand_close(d);
	return rc ? 1 : 0;
}

/* ---- recover ------------------------------------------------------------ */

static void print_scan(const char *path, const struct ftl_scan_report *r, bool json)
{
	if (json) {
		printf("{\n  \"image\": \"%s\",\n  \"blocks\": %u,\n  \"blocks_bad\": %u,\n"
		       "  \"blocks_blank\": %u,\n  \"blocks_log\": %u,\n  \"blocks_meta\": %u,\n"
		       "  \"blocks_foreign\": %u,\n  \"blocks_unreadable\": %u,\n",
		       path, r->blocks, r->blocks_bad, r->blocks_blank, r->blocks_log, r->blocks_meta,
		       r->blocks_foreign, r->blocks_unreadable);
		printf("  \"superblock\": {\"valid\": %s, \"pages_valid\": %u, \"pages_damaged\": %u",
		       r->sb_valid ? "true" : "false", r->sb_pages_valid, r->sb_pages_damaged);
		if (r->sb_valid)
			printf(", \"format_id\": \"%016" PRIx64 "\", \"sector_size\": %u, \"units\": %" PRIu64,
			       r->sb_format_id, r->sb_sector_size, r->sb_units);
		printf("},\n  \"log\": {\"format_id\": \"%016" PRIx64 "\", \"formats_seen\": %u, "
		       "\"max_seq\": %" PRIu64 "},\n",
		       r->format_id, r->formats_seen, r->max_seq);
		printf("  \"checkpoint\": {\"found\": %s, \"candidates\": %u, \"damaged\": %u",
		       r->cp_found ? "true" : "false", r->cp_candidates, r->cp_damaged);
		if (r->cp_found)
			printf(", \"block\": %u, \"cp_seq\": %" PRIu64 ", \"capacity_bytes\": %" PRIu64
			       ", \"sector_size\": %u",
			       r->cp_block, r->cp_seq, r->cp_units * 4096, r->cp_sector_size);
		printf("}\n}\n");
		return;
	}
	printf("%s: %u blocks: %u log, %u metadata, %u blank, %u bad, %u unreadable, %u not ours\n",
	       path, r->blocks, r->blocks_log, r->blocks_meta, r->blocks_blank, r->blocks_bad,
	       r->blocks_unreadable, r->blocks_foreign);
	if (r->sb_valid)
		printf("  superblock: valid (format %016" PRIx64 ", %u-byte sectors, %.2f GiB); "
		       "%u valid and %u damaged pages\n",
		       r->sb_format_id, r->sb_sector_size, (double)r->sb_units * 4096 / (1 << 30),
		       r->sb_pages_valid, r->sb_pages_damaged);
	else
		printf("  superblock: NONE VALID (%u damaged pages)\n", r->sb_pages_damaged);
	if (r->format_id)
		printf("  log: format %016" PRIx64 ", newest sequence at a block start %" PRIu64
		       "%s\n", r->format_id, r->max_seq,
		       r->formats_seen > 1 ? " (older formats' blocks also present)" : "");
	else
		printf("  log: none\n");
	if (r->cp_found)
		printf("  checkpoint: block %u, sequence %" PRIu64 ", %.2f GiB, %s (%u candidates, "
		       "%u damaged)\n",
		       r->cp_block, r->cp_seq, (double)r->cp_units * 4096 / (1 << 30),
		       r->cp_sector_size ? (r->cp_sector_size == 512 ? "512-byte sectors"
								      : "4096-byte sectors")
					 : "sector size not recorded",
		       r->cp_candidates, r->cp_damaged);
	else
		printf("  checkpoint: none intact (%u candidates, %u damaged)\n", r->cp_candidates,
		       r->cp_damaged);
}

static int cmd_recover(int argc, char **argv)
{
	bool json = false, rebuild = false;
	struct ftl_rebuild_params rp = { 0 };
	static const struct option opts[] = {
		{ "rebuild-superblock", no_argument, 0, 'R' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "capacity", required_argument, 0, 's' },
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "Rb:s:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'R': rebuild = true; break;
		case 'b': rp.sector_size = opt_sector_size(optarg); break;
		case 's': {
			bool pct;
			double pv;
			rp.capacity_bytes = opt_capacity(optarg, &pct, &pv);
			if (pct)
				die("--capacity for a rebuild is the exact byte count the device was "
				    "formatted with, not a percentage");
			break;
		}
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc)
		die("recover needs exactly one IMAGE");
	if ((rp.sector_size || rp.capacity_bytes) && !rebuild)
		die("--sector-size and --capacity go with --rebuild-superblock");
	const char *path = argv[optind];
	struct nand_dev *d = open_image(path, NULL, false, !rebuild);
	struct ftl_scan_report r;
	char err[512];
	int rc = ftl_scan(d, &r, err, sizeof err);
	if (rc) {
		nand_close(d);
		die("scanning %s failed: %s", path, err);
	}
	print_scan(path, &r, json && !rebuild);
	if (!rebuild) {
		if (r.sb_valid)
			printf("%s", json ? "" : "  nothing to recover: flashd opens it (after a crash it "
						   "replays the log itself)\n");
		else if (r.format_id || r.cp_found)
			printf("%s", json ? "" : "  to rebuild the superblock from what is above: "
						   "flashctl recover IMAGE --rebuild-superblock\n");
		nand_close(d);
		return r.sb_valid ? 0 : 1;
	}
	rc = ftl_rebuild_superblock(d, &rp, err, sizeof err);
	if (rc) {
		nand_close(d);
		die("rebuilding the superblock of %s: %s", path, err);
	}
	/* prove it: open read-only, as flashd would (replaying the log) */
	struct ftl_open_params op = { .readonly = true };
	struct ftl *f;
	rc = ftl_open(d, &op, &f, err, sizeof err);
	if (rc) {
		nand_close(d);
		die("the rebuilt superblock does not open: %s", err);
	}
	struct ftl_info info;
	ftl_get_info(f, &info);
	printf("%s: superblock rebuilt: format %016" PRIx64 ", %u-byte sectors, %.2f GiB; the log "
	       "replays (%" PRIu64 " pages)%s%s\n",
	       path, info.format_id, info.sector_size, (double)info.capacity / (1 << 30),
	       info.recovered_pages, info.notes[0] ? "; " : "", info.notes);
	ftl_close(f);
	nand_close(d);
	return 0;
}

/* ---- simulate ----------------------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static void check(int rc, const char *what)
{
	if (rc)
		die("%s failed: %s", what, strerror(-rc));
}

static int cmd_simulate(int argc, char **argv)
{
	const char *preset = NULL, *workload = "uniform", *image = NULL;
	double op = FTL_STOCK_OP_PERCENT, passes = 1;
	uint32_t sector = 4096;
	uint64_t seed = 1, reads = 0;
	bool json = false, ram = false, timing = false;
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "op", required_argument, 0, 'o' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "workload", required_argument, 0, 'w' },
		{ "passes", required_argument, 0, 'k' },
		{ "reads", required_argument, 0, 'r' },
		{ "seed", required_argument, 0, 's' },
		{ "image", required_argument, 0, 'i' },
		{ "ram", no_argument, 0, 'm' },
		{ "timing", no_argument, 0, 't' },
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "p:o:b:w:k:r:s:i:mtjh", opts, NULL)) != -1) {
		switch (c) {
		case 'p': preset = optarg; break;
		case 'o': op = opt_double("--op", optarg, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT); break;
		case 'b': sector = opt_sector_size(optarg); break;
		case 'w': workload = optarg; break;
		case 'k': passes = opt_double("--passes", optarg, 0, 1000); break;
		case 'r': reads = opt_uint("--reads", optarg, 0, UINT64_MAX); break;
		case 's': seed = opt_uint("--seed", optarg, 0, UINT64_MAX); break;
		case 'i': image = optarg; break;
		case 'm': ram = true; break;
		case 't': timing = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!preset)
		die("simulate needs --preset");
	if (optind != argc)
		die("unexpected argument '%s'", argv[optind]);
	double hot_w = 0, hot_s = 0;
	if (strcmp(workload, "uniform") == 0) {
		hot_w = 0;
	} else if (sscanf(workload, "hotcold:%lf/%lf", &hot_w, &hot_s) == 2 && hot_w > 0 &&
		   hot_w < 100 && hot_s > 0 && hot_s < 100) {
		hot_w /= 100;
		hot_s /= 100;
	} else {
		die("workload must be uniform or hotcold:W/S (W%% of writes to S%% of the sectors)");
	}
	if (!seed)
		seed = 1;
	uint64_t seed0 = seed;

	char tmp[] = "/tmp/flashctl-sim-XXXXXX";
	const char *path = NULL;
	if (!ram) {
		if (image) {
			path = image;
		} else {
			int fd = mkstemp(tmp);
			if (fd < 0)
				die("cannot create a temporary image: %s", strerror(errno));
			close(fd);
			path = tmp;
		}
	}
	struct nand_sim_config cfg = { .preset = preset, .path = path, .create = true,
				       .timing = timing, .seed = seed };
	struct nand_dev *d;
	char err[512];
	if (nand_sim_open(&cfg, &d, err, sizeof err))
		die("%s", err);
	if (path && !image)
		unlink(path);
	struct ftl_format_params fp = { .sector_size = sector, .op_percent = op };
	if (ftl_format(d, &fp, err, sizeof err))
		die("format: %s", err);
	struct ftl *f;
	if (ftl_open(d, NULL, &f, err, sizeof err))
		die("open: %s", err);
	struct ftl_info info;
	ftl_get_info(f, &info);
	uint64_t units = info.units;

	/* fill: sequential 256 KiB writes */
	size_t chunk = 256 * 1024;
	uint8_t *buf = aligned_alloc(4096, chunk);
	for (size_t i = 0; i < chunk; i += 8) {
		uint64_t v = rnd(&seed);
		memcpy(buf + i, &v, 8);
	}
	double t0 = now_s();
	for (uint64_t off = 0; off < info.capacity; off += chunk) {
		uint64_t len = info.capacity - off < chunk ? info.capacity - off : chunk;
		check(ftl_write_sync(f, buf, off, len, 0), "fill write");
	}
	check(ftl_flush_sync(f), "flush");
	double t_fill = now_s() - t0;

	/* overwrite: random 4 KiB writes, passes x capacity */
	struct ftl_stats s0, s1, sl;
	ftl_get_stats(f, &s0);
	sl = s0;
	uint64_t nwrites = (uint64_t)(passes * (double)units);
	uint64_t hot_units = (uint64_t)(hot_s * (double)units);
	if (hot_w > 0 && !hot_units)
		hot_units = 1;
	t0 = now_s();
	/* the last pass (at most one capacity's worth of writes) alone: the
	 * steady state, after GC has settled and the media is all touched */
	uint64_t last_from = nwrites > units ? nwrites - units : 0;
	double t_last = t0;
	for (uint64_t i = 0; i < nwrites; i++) {
		if (i == last_from) {
			t_last = now_s();
			ftl_get_stats(f, &sl);
		}
		uint64_t r = rnd(&seed), u;
		if (hot_w > 0) {
			bool hot = (double)(r >> 11) / (double)(1ull << 53) < hot_w;
			uint64_t r2 = rnd(&seed);
			u = hot ? r2 % hot_units : hot_units + r2 % (units - hot_units);
		} else {
			u = r % units;
		}
		memcpy(buf, &i, sizeof i);
		check(ftl_write_sync(f, buf, u * 4096, 4096, 0), "write");
	}
	check(ftl_flush_sync(f), "flush");
	double t_end = now_s(), t_write = t_end - t0;
	double steady_ops = t_end > t_last ? (double)(nwrites - last_from) / (t_end - t_last) : 0;
	ftl_get_stats(f, &s1);

	/* reads: random 4 KiB */
	double t_read = 0;
	if (reads) {
		struct ftl_io io = { .type = FTL_IO_READ, .length = 4096, .buf = buf };
		t0 = now_s();
		for (uint64_t i = 0; i < reads; i++) {
			io.offset = (rnd(&seed) % units) * 4096;
			check(ftl_io_sync(f, &io), "read");
		}
		t_read = now_s() - t0;
	}

	uint64_t host = s1.host_pages_written - s0.host_pages_written;
	uint64_t nand = s1.nand_pages_programmed - s0.nand_pages_programmed;
	double wa = host ? (double)nand / (double)host : 0;
	uint64_t host_l = s1.host_pages_written - sl.host_pages_written;
	double wa_last = host_l ? (double)(s1.nand_pages_programmed - sl.nand_pages_programmed) / (double)host_l : 0;
	double a = 100.0 / (100.0 - info.op_percent);
	/* greedy analytic WA (Hu et al.; Desnoyers): A = a / (a + W0(-a e^-a)) */
	double x = -a * exp(-a), w = -0.5;
	for (int it = 0; it < 100; it++) {
		double ew = exp(w);
		w -= (w * ew - x) / (ew * (w + 1));
	}
	double wa_model = a / (a + w);
	if (json) {
		printf("{\n  \"preset\": \"%s\",\n  \"sector_size\": %u,\n  \"op_percent\": %.2f,\n"
		       "  \"capacity_bytes\": %" PRIu64 ",\n  \"workload\": \"%s\",\n  \"passes\": %g,\n"
		       "  \"seed\": %" PRIu64 ",\n  \"media\": \"%s\",\n  \"timing\": %s,\n",
		       preset, sector, info.op_percent, info.capacity, workload, passes, seed0,
		       ram ? "ram" : "file", timing ? "true" : "false");
		printf("  \"write_amplification\": %.4f,\n  \"write_amplification_last_pass\": %.4f,\n"
		       "  \"write_amplification_greedy_model\": %.4f,\n",
		       wa, wa_last, wa_model);
		printf("  \"host_pages_written\": %" PRIu64 ",\n  \"nand_pages_programmed\": %" PRIu64 ",\n",
		       host, nand);
		printf("  \"gc_pages_relocated\": %" PRIu64 ",\n  \"blocks_erased\": %" PRIu64 ",\n",
		       s1.gc_pages_relocated - s0.gc_pages_relocated, s1.blocks_erased - s0.blocks_erased);
		printf("  \"checkpoints\": %" PRIu64 ",\n", s1.checkpoints - s0.checkpoints);
		printf("  \"fill_seconds\": %.3f,\n  \"write_seconds\": %.3f,\n", t_fill, t_write);
		printf("  \"ops_per_sec\": %.0f,\n", t_write > 0 ? (double)nwrites / t_write : 0);
		printf("  \"last_pass_ops_per_sec\": %.0f,\n", steady_ops);
		if (reads)
			printf("  \"reads\": %" PRIu64 ",\n  \"reads_per_sec\": %.0f,\n", reads,
			       t_read > 0 ? (double)reads / t_read : 0);
		printf("  \"erase_count_min\": %u,\n  \"erase_count_avg\": %.2f,\n  \"erase_count_max\": %u,\n",
		       s1.erase_min, s1.erase_avg, s1.erase_max);
		printf("  \"l2p_bytes\": %" PRIu64 ",\n  \"l2p_bytes_per_tib\": %.0f,\n  \"ram_bytes\": %" PRIu64 "\n}\n",
		       s1.l2p_bytes, (double)s1.l2p_bytes * (double)(1ull << 40) / (double)info.capacity,
		       s1.ram_bytes);
	} else {
		printf("%s, %u-byte sectors, %.1f%% OP, %s, %g passes of %.2f GiB\n", preset, sector,
		       info.op_percent, workload, passes, (double)info.capacity / (1 << 30));
		printf("  write amplification %.3f, last pass %.3f (greedy model %.3f)\n", wa, wa_last,
		       wa_model);
		printf("  %" PRIu64 " host pages, %" PRIu64 " NAND pages, %" PRIu64 " erases\n", host, nand,
		       s1.blocks_erased - s0.blocks_erased);
		printf("  random 4 KiB writes: %.0f/s (last pass %.0f/s)",
		       t_write > 0 ? (double)nwrites / t_write : 0, steady_ops);
		if (reads)
			printf(", reads: %.0f/s", (double)reads / t_read);
		printf("\n  erase counts min/avg/max %u/%.1f/%u; map %.1f MiB\n", s1.erase_min,
		       s1.erase_avg, s1.erase_max, (double)s1.l2p_bytes / (1 << 20));
	}
	check(ftl_close(f), "close");
	nand_close(d);
	free(buf);
	return 0;
}

/* ---- status (talks to a running flashd) --------------------------------- */

static const char *default_control(void)
{
	static char path[4200];
	const char *env = getenv("FLASHD_CONTROL");
	if (env)
		return env;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(path, sizeof path, "%s/../var/flashd.ctl", exe);
			if (access(path, F_OK) == 0)
				return path;
		}
	}
	if (access("/run/flashd/flashd.ctl", F_OK) == 0)
		return "/run/flashd/flashd.ctl";
	return "/var/lib/flashd/flashd.ctl";
}

static int cmd_status(int argc, char **argv)
{
	const char *control = NULL;
	bool json = false;
	static const struct option opts[] = {
		{ "control", required_argument, 0, 'c' },
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': control = optarg; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!control)
		control = default_control();
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(control) >= sizeof sa.sun_path)
		die("control socket path too long: %s", control);
	strcpy(sa.sun_path, control);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("cannot reach flashd at %s: %s (is it running? --control PATH)", control,
		    strerror(errno));
	char req[256];
	int n = snprintf(req, sizeof req, "GET /v1/status%s HTTP/1.0\r\nHost: flashd\r\n\r\n",
			 json ? "" : "?format=text");
	if (write(fd, req, (size_t)n) != n)
		die("writing to %s: %s", control, strerror(errno));
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("reading from %s: %s", control, strerror(errno));
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = 0;
	char *body = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.", 7) != 0 || !body)
		die("unexpected answer from %s", control);
	int code = atoi(buf + 9);
	body += 4;
	fputs(body, stdout);
	free(buf);
	return code == 200 ? 0 : 1;
}

static int cmd_presets(void)
{
	for (size_t i = 0; nand_preset_at(i); i++) {
		const struct nand_preset *p = nand_preset_at(i);
		printf("%-16s %s\n", p->name, p->description);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	argv++;
	argc--;
	if (strcmp(cmd, "format") == 0)
		return cmd_format(argc, argv);
	if (strcmp(cmd, "info") == 0)
		return cmd_info(argc, argv);
	if (strcmp(cmd, "recover") == 0)
		return cmd_recover(argc, argv);
	if (strcmp(cmd, "bench") == 0)
		return cmd_bench(argc, argv);
	if (strcmp(cmd, "simulate") == 0)
		return cmd_simulate(argc, argv);
	if (strcmp(cmd, "presets") == 0)
		return cmd_presets();
	if (strcmp(cmd, "status") == 0)
		return cmd_status(argc, argv);
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
	usage(stderr);
	return 2;
}
