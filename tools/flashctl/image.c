/*
 * The verbs on image files flashd does not have open (a simulator image,
 * or raw NAND as its MTD character device, /dev/mtdN): format, info,
 * recover, locate.  Owns opening an image for them and the FTL's and the
 * NAND's log lines on stderr (log_to_stderr, for every verb).  format of
 * an ioDimm of a running flashd goes to online.c's format_daemon.
 */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <libgen.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/units.h"
#include "ftl/ftl.h"
#include "hw/nand.h"
#include "tools/flashctl/flashctl.h"

/* The image the offline commands opened (open_image), which their FTL and
 * NAND lines are about; NULL before one is open. */
static const char *log_subject;

_Static_assert((int)NAND_LOG_ERR == (int)FTL_LOG_ERR && (int)NAND_LOG_WARNING == (int)FTL_LOG_WARNING &&
	       (int)NAND_LOG_NOTICE == (int)FTL_LOG_NOTICE && (int)NAND_LOG_INFO == (int)FTL_LOG_INFO,
	       "nand.h's and ftl.h's levels are the same numbers");

/* An FTL or NAND line on stderr as Linux tools print theirs, its level
 * spelt out: "flashctl: IMAGE: warning: ..." (the simulator's lines that
 * begin with the image's path lose that repetition). */
static void print_log(int level, const char *msg)
{
	const char *lv = level <= FTL_LOG_ERR ? "error" : level == FTL_LOG_WARNING ? "warning"
						 : level == FTL_LOG_NOTICE ? "notice" : "info";
	size_t n = log_subject ? strlen(log_subject) : 0;
	if (n && !strncmp(msg, log_subject, n) && !strncmp(msg + n, ": ", 2))
		msg += n + 2;
	if (log_subject)
		fprintf(stderr, "%s: %s: %s: %s\n", prog, log_subject, lv, msg);
	else
		fprintf(stderr, "%s: %s: %s\n", prog, lv, msg);
}

static void nand_log_print(void *arg, int level, const char *msg)
{
	print_log(level, msg);
}

static void ftl_log_print(void *arg, int level, const char *msg)
{
	print_log(level, msg);
}

void log_to_stderr(void)
{
	ftl_set_logger(ftl_log_print, NULL);
}

/* Is path a character device (raw NAND through Linux MTD: /dev/mtdN), not
 * a simulator image? */
static bool is_mtd_device(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* A simulator image, or an MTD character device (as nanddump and
 * flash_erase take it). */
static struct nand_dev *open_image(const char *path, const char *preset, bool create, bool ro)
{
	bool mtd = is_mtd_device(path);
	if (mtd && preset)
		die("%s is a device (raw NAND through MTD): --preset is for simulator images", path);
	struct nand_spec spec = { .backend = mtd ? "mtd" : "sim", .path = path, .preset = preset,
				  .create = create, .readonly = ro, .sync_on_flush = true,
				  .log = nand_log_print };
	struct nand_dev *d;
	log_subject = path;
	char err[512];
	int rc = nand_open(&spec, &d, err, sizeof err);
	if (rc == -EBUSY)
		die("%s (a running flashd owns it: use 'flashctl status', or stop it first)", err);
	if (rc)
		die("%s", err);
	return d;
}

/* Is the target of `format` an image file (else an ioDimm of a running flashd)? */
static bool format_target_is_image(const char *arg, const char *preset)
{
	size_t n = strlen(arg);
	return preset || strchr(arg, '/') || access(arg, F_OK) == 0 || (n > 4 && !strcmp(arg + n - 4, ".img"));
}

/*
 * What the image holds, before a format erases it: "" if nothing (blank,
 * or a new file), else a description for the question.
 */
static void image_contents(struct nand_dev *d, char *buf, size_t len)
{
	struct ftl_info fi;
	char why[384] = "";
	int rc = ftl_probe(d, &fi, why, sizeof why);
	buf[0] = 0;
	if (rc == 0) {
		char when[64];
		time_t t = (time_t)fi.format_time;
		strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
		snprintf(buf, len, "it holds a format: %" PRIu64 " sectors of %u bytes (%s), "
			 "formatted %s", fi.capacity / fi.sector_size, fi.sector_size,
			 SIZE_TEXT((double)fi.capacity), when);
	} else if (rc == -EUCLEAN) {
		snprintf(buf, len, "it holds data without a valid superblock (%s; 'flashctl recover' "
			 "may get it back)", why);
	} else if (rc != -ENODATA) {
		snprintf(buf, len, "what it holds cannot be read (%s)", why[0] ? why : strerror(-rc));
	}
}

/* 'path' quoted for a shell (single quotes) into buf */
static void shell_quote(char *buf, size_t len, const char *path)
{
	size_t o = 0;
	if (strspn(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@,%") ==
	    strlen(path)) {
		snprintf(buf, len, "%s", path);
		return;
	}
	buf[o++] = '\'';
	for (const char *p = path; *p && o + 6 < len; p++) {
		if (*p == '\'') {
			memcpy(buf + o, "'\\''", 4);
			o += 4;
		} else {
			buf[o++] = *p;
		}
	}
	buf[o++] = '\'';
	buf[o] = 0;
}

/* NAME into BUF, or the number ID where the name is not known (NULL) */
static const char *name_or_id(const char *name, unsigned id, char *buf, size_t len)
{
	if (name)
		snprintf(buf, len, "%s", name);
	else
		snprintf(buf, len, "%u", id);
	return buf;
}

static const char *user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);
	return name_or_id(pw ? pw->pw_name : NULL, uid, buf, len);
}

static const char *group_name(gid_t gid, char *buf, size_t len)
{
	struct group *gr = getgrgid(gid);
	return name_or_id(gr ? gr->gr_name : NULL, gid, buf, len);
}

/*
 * After a format: an image in a directory that belongs to another user (the
 * service's state directory, /var/lib/flashd, owned by its user) is given to
 * the directory's owner and group when flashctl runs as root, so that the
 * service can open it; its mode stays.  If that cannot be done, the chown to
 * run is printed.
 */
static void give_to_dir_owner(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return;
	const char *dir = dirname(copy);
	struct stat ds, fs;
	if (stat(dir, &ds) < 0 || stat(path, &fs) < 0 || ds.st_uid == geteuid() ||
	    (fs.st_uid == ds.st_uid && fs.st_gid == ds.st_gid)) {
		free(copy);
		return;
	}
	char u[64], g[64], q[4400];
	user_name(ds.st_uid, u, sizeof u);
	group_name(ds.st_gid, g, sizeof g);
	char *abs = realpath(path, NULL);  /* the command works from any directory */
	shell_quote(q, sizeof q, abs ? abs : path);
	free(abs);
	int e = EPERM;
	if (geteuid() == 0) {
		if (chown(path, ds.st_uid, ds.st_gid) == 0) {
			printf("%s: owner set to %s:%s, the owner of %s (the service running as that user "
			       "can open it)\n", path, u, g, dir);
			free(copy);
			return;
		}
		e = errno;
	}
	char fu[64], fg[64];
	fprintf(stderr, "%s: warning: %s is owned by %s:%s but its directory %s by %s:%s, and flashctl "
		"could not change that (%s); if flashd runs as %s, it cannot open the image until you run:\n"
		"    chown %u:%u %s\n", prog, path, user_name(fs.st_uid, fu, sizeof fu),
		group_name(fs.st_gid, fg, sizeof fg), dir, u, g,
		geteuid() == 0 ? strerror(e) : "not running as root", u, (unsigned)ds.st_uid,
		(unsigned)ds.st_gid, q);
	free(copy);
}

/* format IMAGE: never erases what the image holds without asking (or --yes) */
static int format_image(const char *path, const char *preset, uint32_t sector, const char *cap,
			double op, uint32_t parity, bool yes)
{
	bool exists = access(path, F_OK) == 0;
	if (!exists && !preset)
		die("%s does not exist: --preset is needed to create it", path);
	struct nand_dev *d = open_image(path, preset, !exists, false);

	char holds[600];
	image_contents(d, holds, sizeof holds);
	if (holds[0] && !yes) {
		char question[900];
		snprintf(question, sizeof question, "%s: %s.\nFormatting erases all of it.", path, holds);
		if (!isatty(STDIN_FILENO)) {
			nand_close(d);
			die("%s: %s; formatting erases it: add --yes (no terminal to ask on)", path, holds);
		}
		if (!confirm(question)) {
			nand_close(d);
			die("not formatted");
		}
	}

	struct ftl_format_params fp = { .sector_size = sector, .parity_width = parity };
	if (cap) {
		bool pct;
		double pv;
		uint64_t bytes = opt_capacity(cap, &pct, &pv);
		if (pct) {
			uint64_t stock = ftl_capacity_for_op(d, ftl_stock_op_percent(d));
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
	printf("%s: formatted %s: %" PRIu64 " sectors of %u bytes (%s), %.1f%% over-provisioning\n",
	       path, d->preset, info.capacity / info.sector_size, info.sector_size,
	       SIZE_TEXT((double)info.capacity), info.op_percent);
	nand_close(d);
	if (!is_mtd_device(path))
		give_to_dir_owner(path);
	return 0;
}

/* flashctl format IMAGE|DIMM ...: an image here, an ioDimm through flashd */
int cmd_format(struct invocation *inv, int argc, char **argv)
{
	const char *preset = NULL, *cap = NULL;
	uint32_t sector = 0;
	double op = -1;
	bool yes = false;
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "capacity", required_argument, 0, 's' },
		{ "op", required_argument, 0, 'o' },
		{ "parity-width", required_argument, 0, 'P' },
		{ "yes", no_argument, 0, 'y' },
		{ 0, 0, 0, 0 },
	};
	int c;
	uint32_t parity = 0;
	bool parity_given = false;
	while ((c = verb_getopt(inv, argc, argv, "p:b:s:o:P:y", opts)) != -1) {
		switch (c) {
		case 'p': preset = optarg; break;
		case 'b': sector = opt_sector_size(optarg); break;
		case 's': cap = optarg; break;
		case 'o': op = opt_double("--op", optarg, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT); break;
		case 'P':
			parity = (uint32_t)opt_uint("--parity-width", optarg, 0, 1);
			parity_given = true;
			break;
		case 'y': yes = true; break;
		}
	}
	if (optind + 1 != argc)
		die("format needs exactly one IMAGE or DIMM");
	if (cap && op >= 0)
		die("give --capacity or --op, not both");
	const char *path = argv[optind];
	if (cap) {
		bool pct;
		double pv;
		opt_capacity(cap, &pct, &pv); /* checked here, applied where the device is known */
	}
	if (inv->control || !format_target_is_image(path, preset)) {
		if (preset)
			die("--preset is for an image file; a configured ioDimm's preset is in its [dimm] section");
		return format_daemon(ctl_path(inv->control), path, sector, cap, op,
				     parity_given ? (int)parity : -1, yes, inv->json);
	}
	if (inv->json)
		die("--json goes with formatting an ioDimm through flashd");
	return format_image(path, preset, sector ? sector : 512, cap, op, parity, yes);
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

int cmd_info(struct invocation *inv, int argc, char **argv)
{
	verb_flag(inv, argc, argv, NULL);
	bool json = inv->json;
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
		printf("{\n  \"image\": \"%s\",\n  \"backend\": \"%s\",\n  \"preset\": \"%s\",\n", path,
		       nand_backend_name(d), d->preset);
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
			       "\", \"format_time\": %" PRIu64 ", \"band_rows\": %u, \"band_width\": %u, "
			       "\"parity_width\": %u, \"last_close_clean\": %s, \"recovered_pages\": %" PRIu64
			       "},\n",
			       info.sector_size, info.capacity / info.sector_size, info.capacity,
			       info.op_percent, info.format_id, info.format_time,
			       info.band_rows, info.band_width, info.parity_width,
			       info.was_clean ? "true" : "false", info.recovered_pages);
			printf("  \"checkpoint_damaged\": %s,\n  \"notes\": \"%s\",\n",
			       info.checkpoint_damaged ? "true" : "false", info.notes);
			printf("  \"stats\": {\n");
			print_stats_json(stdout, &st, "    ");
			printf("  }\n}\n");
		}
	} else {
		if (d->caps & NAND_CAP_SIM)
			printf("%s: simulated ioDimm, preset %s\n", path, d->preset);
		else
			printf("%s: raw NAND (%s backend), %s\n", path, nand_backend_name(d), d->preset);
		printf("  geometry: %u channels x %u dies, %u blocks/die, %u pages/block, %u+%u byte pages, %s raw\n",
		       g->channels, g->dies_per_channel, g->blocks_per_die, g->pages_per_block,
		       g->page_size, g->spare_size, SIZE_TEXT((double)nand_raw_bytes(g)));
		if (rc) {
			printf("  %s: %s\n", unopened, err);
			if (rc == -EUCLEAN)
				printf("  'flashctl recover %s' reports what is on the media and can rebuild "
				       "the superblock\n", path);
		} else {
			char when[64];
			time_t t = (time_t)info.format_time;
			strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
			printf("  format: %" PRIu64 " sectors of %u bytes (%s), %.1f%% over-provisioning, formatted %s\n",
			       info.capacity / info.sector_size, info.sector_size,
			       SIZE_TEXT((double)info.capacity), info.op_percent, when);
			printf("  bands: %u rows of %u dies, %u parity %s per stripe\n", info.band_rows,
			       info.band_width, info.parity_width, info.parity_width == 1 ? "die" : "dies");
			printf("  last shutdown: %s%s\n", info.was_clean ? "clean" : "unclean",
			       info.was_clean ? "" : " (recovered from the log at this open)");
			if (info.notes[0])
				printf("  warning: %s\n", info.notes);
			if (st.crc_errors || st.read_errors_uncorrectable || st.lost_units)
				printf("  errors: %" PRIu64 " uncorrectable reads (%" PRIu64 " failed their data CRC), "
				       "%" PRIu64 " units lost\n",
				       st.read_errors_uncorrectable, st.crc_errors, st.lost_units);
			printf("  written: host %s, NAND %s (write amplification %.2f); read: host %s\n",
			       SIZE_TEXT((double)st.host_pages_written * 4096),
			       SIZE_TEXT((double)st.nand_pages_programmed * g->page_size),
			       st.write_amplification, SIZE_TEXT((double)st.host_read_bytes));
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

/* ---- locate ------------------------------------------------------------- */

/* Where the FTL keeps the 4 KiB unit of each byte offset: its die, block,
 * page and the page's linear NAND address ((block * pages per block + page)
 * * page size: the MTD address on raw NAND, for nanddump -s). */
int cmd_locate(struct invocation *inv, int argc, char **argv)
{
	if (argc < 3)
		die("locate needs an IMAGE and at least one OFFSET");
	const char *path = argv[1];
	struct nand_dev *d = open_image(path, NULL, false, true);
	struct ftl_open_params op = { .readonly = true };
	struct ftl *f;
	char err[512];
	if (ftl_open(d, &op, &f, err, sizeof err)) {
		nand_close(d);
		die("%s: %s", path, err);
	}
	struct ftl_info info;
	ftl_get_info(f, &info);
	int rc = 0;
	for (int i = 2; i < argc; i++) {
		uint64_t off = opt_uint("OFFSET", argv[i], 0, info.capacity ? info.capacity - 1 : 0);
		uint64_t unit = off / FTL_UNIT_SIZE;
		uint32_t die_, block, page;
		if (ftl_unit_location(f, unit, &die_, &block, &page)) {
			printf("%" PRIu64 ": unit %" PRIu64 " is not mapped (never written, trimmed or lost)\n",
			       off, unit);
			rc = 1;
			continue;
		}
		uint64_t addr = ((uint64_t)block * d->geo.pages_per_block + page) * d->geo.page_size;
		printf("%" PRIu64 ": unit %" PRIu64 ", die %u, block %u, page %u, NAND address %" PRIu64 "\n",
		       off, unit, die_, block, page, addr);
	}
	ftl_close(f);
	nand_close(d);
	return rc;
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
		printf("  superblock: valid (format %016" PRIx64 ", %u-byte sectors, %s); "
		       "%u valid and %u damaged pages\n",
		       r->sb_format_id, r->sb_sector_size, SIZE_TEXT((double)r->sb_units * 4096),
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
		printf("  checkpoint: block %u, sequence %" PRIu64 ", %s, %s (%u candidates, "
		       "%u damaged)\n",
		       r->cp_block, r->cp_seq, SIZE_TEXT((double)r->cp_units * 4096),
		       r->cp_sector_size ? (r->cp_sector_size == 512 ? "512-byte sectors"
								      : "4096-byte sectors")
					 : "sector size not recorded",
		       r->cp_candidates, r->cp_damaged);
	else
		printf("  checkpoint: none intact (%u candidates, %u damaged)\n", r->cp_candidates,
		       r->cp_damaged);
}

int cmd_recover(struct invocation *inv, int argc, char **argv)
{
	bool rebuild = false;
	struct ftl_rebuild_params rp = { 0 };
	static const struct option opts[] = {
		{ "rebuild-superblock", no_argument, 0, 'R' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "capacity", required_argument, 0, 's' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = verb_getopt(inv, argc, argv, "Rb:s:", opts)) != -1) {
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
		}
	}
	bool json = inv->json;
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
	printf("%s: superblock rebuilt: format %016" PRIx64 ", %u-byte sectors, %s; the log "
	       "replays (%" PRIu64 " pages)%s%s\n",
	       path, info.format_id, info.sector_size, SIZE_TEXT((double)info.capacity),
	       info.recovered_pages, info.notes[0] ? "; " : "", info.notes);
	ftl_close(f);
	nand_close(d);
	return 0;
}

