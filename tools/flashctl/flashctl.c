/*
 * flashctl - manage ioDimms and their images and study the FTL, like the
 * vendor's fio-status / fio-format / fio-attach / fio-detach tools.
 *
 * A running flashd (its control socket, server/ctl.c):
 *   flashctl status [-a] [--json] [DIMM]
 *   flashctl attach DIMM | detach DIMM | checkpoint DIMM
 *   flashctl beacon DIMM [on|off]
 *   flashctl format DIMM [--sector-size N] [--capacity X] [--op X] --yes
 *   flashctl stats [--live [--interval S] [--count N]] [--json] [DIMM...]
 *   flashctl reload
 *   flashctl inject DIMM die-fail N | bad-block B | bit-errors PPM | temperature C
 *   flashctl version
 * (all take --control SOCKET; it and --json may come before the command
 * too).  Image files flashd does not have open:
 *   flashctl format IMAGE --preset P [--sector-size 512|4096]
 *                         [--capacity BYTES|PCT%] [--op PCT] [--parity-width 0|1] [--yes]
 *   flashctl info IMAGE [--json]
 *   flashctl recover IMAGE [--rebuild-superblock [--sector-size N] [--capacity BYTES]]
 *   flashctl locate IMAGE OFFSET...
 * (IMAGE: a simulator image, or raw NAND as its MTD character device,
 * /dev/mtdN.)
 * The FTL alone:
 *   flashctl simulate --preset P [--op PCT] [--sector-size N]
 *                     [--workload uniform|hotcold:H/C] [--passes K]
 *                     [--reads N] [--ram] [--timing] [--seed S] [--json]
 *                     [--parity-width 0|1] [--flush-every N] [--no-flush-parity]
 *   flashctl bench ...
 *   flashctl presets
 * A format never erases what an image holds without asking on the
 * terminal, or --yes (without a terminal it refuses).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <libgen.h>
#include <pwd.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/parse.h"
#include "common/units.h"
#include "ftl/ftl.h"
#include "hw/nand.h"
#include "server/version.h"

static const char *prog = "flashctl";

int cmd_bench(int argc, char **argv); /* bench.c */

static void usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"A running flashd (--control SOCKET: its control socket; default var/flashd.ctl in the\n"
		"checkout, /run/flashd/flashd.ctl or /var/lib/flashd/flashd.ctl, or $FLASHD_CONTROL;\n"
		"--control and --json may also come before the command):\n"
		"  %s status [-a|--all] [--json] [DIMM]\n"
		"      health, state, format, lifetime traffic of every ioDimm (-a: everything);\n"
		"      exit status 0: health ok, 1: warning, 2: degraded or failed, 3: no answer\n"
		"  %s attach DIMM | detach [--force] DIMM\n"
		"      open the ioDimm's image and export it again | drain and close its connections,\n"
		"      close its FTL (checkpoint) and image; new clients are refused meanwhile;\n"
		"      refused while clients are connected (named) unless --force\n"
		"  %s format DIMM [--sector-size 512|4096] [--capacity BYTES|PCT%%] [--op PCT] --yes\n"
		"      low-level format of a detached ioDimm (unset: its [dimm] keys)\n"
		"  %s checkpoint DIMM\n"
		"      write a checkpoint now and wait until it is on the media; requests go on\n"
		"      being served meanwhile\n"
		"  %s beacon DIMM [on|off]\n"
		"      the ioDimm's locate beacon (shown by status and /metrics)\n"
		"  %s inject DIMM die-fail N | bad-block B | bit-errors PPM | temperature C\n"
		"      a fault into a simulated ioDimm while it serves (needs [server]\n"
		"      fault_injection = yes): a die whose every operation fails, a block whose\n"
		"      programs and erases fail, PPM reads per million uncorrectable (0: off), or the\n"
		"      controller's temperature now (it relaxes towards ambient)\n"
		"  %s stats [--live [--interval S] [--count N]] [--json] [DIMM...]\n"
		"      requests, bandwidth, latency percentiles, GC: since start, or per interval\n"
		"  %s reload [--json]\n"
		"      read flashd's configuration file again (as SIGHUP): apply what can change\n"
		"      while serving, list what needs a restart; a file with an error changes nothing\n"
		"  %s version | --version\n"
		"Image files, or raw NAND as /dev/mtdN (not in use):\n"
		"  %s format IMAGE --preset P [--sector-size 512|4096] [--capacity BYTES|PCT%%] [--op PCT]\n"
		"         [--parity-width 0|1] [--yes]\n"
		"      low-level format (creates IMAGE if missing).  --capacity PCT%% is a share of the\n"
		"      stock capacity (100%% = stock = 20%% over-provisioning, more where the FTL's own\n"
		"      blocks need it: test-128m-512p 31%%; 80%% = high performance);\n"
		"      --op is the over-provisioning as a share of raw NAND (20 = stock, 36 = high perf);\n"
		"      --parity-width 1: Flashback parity, one die per band stripe (24 + 1 on the ioDimm;\n"
		"      the capacity shrinks by that share); 0: none (the default).\n"
		"      An image that holds data is formatted only after 'yes' on the terminal, or --yes\n"
		"  %s info IMAGE [--json]\n"
		"      geometry, format and statistics of an image that is not in use\n"
		"  %s recover IMAGE [--json]\n"
		"      scan an image whose FTL does not open: superblock, checkpoints, log\n"
		"  %s recover IMAGE --rebuild-superblock [--sector-size 512|4096] [--capacity BYTES]\n"
		"      write a new superblock for the log and newest intact checkpoint found;\n"
		"      sector size and capacity are needed only if no checkpoint records them\n"
		"  %s locate IMAGE OFFSET...\n"
		"      where the FTL keeps the 4 KiB unit of each byte offset: die, block, page and\n"
		"      the page's NAND address (on /dev/mtdN the address nanddump -s takes)\n"
		"  %s simulate --preset P [--op PCT] [--sector-size N] [--workload uniform|hotcold:80/20]\n"
		"           [--passes K] [--reads N] [--ram] [--timing] [--seed S] [--json]\n"
		"           [--parity-width 0|1] [--flush-every N] [--no-flush-parity]\n"
		"      format a fresh device, fill it, overwrite it K times with random 4 KiB writes\n"
		"      (a flush after every N of them), report write amplification and speed\n"
		"  %s bench --preset P [--op PCT] [--workload randwrite|randread|rw70|seqwrite|seqread]\n"
		"           [--qd N] [--precondition PASSES] [--duration S] [--csv FILE] [--json] ...\n"
		"      the reviewers' protocol on the simulator's virtual clock (full-size devices\n"
		"      fit: only page metadata is kept); prints IOPS, latency, WA and the physical bound\n"
		"  %s presets\n",
		prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog,
		prog);
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

static const char *opt_control(const char *c);
static bool confirm(const char *question);
static int format_daemon(const char *control, const char *dimm, uint32_t sector, const char *cap,
			 double op, int parity, bool yes, bool json);

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

static const char *user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);
	if (pw)
		snprintf(buf, len, "%s", pw->pw_name);
	else
		snprintf(buf, len, "%u", (unsigned)uid);
	return buf;
}

static const char *group_name(gid_t gid, char *buf, size_t len)
{
	struct group *gr = getgrgid(gid);
	if (gr)
		snprintf(buf, len, "%s", gr->gr_name);
	else
		snprintf(buf, len, "%u", (unsigned)gid);
	return buf;
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

static int cmd_format(int argc, char **argv)
{
	const char *preset = NULL, *cap = NULL, *control = NULL;
	uint32_t sector = 0;
	double op = -1;
	bool yes = false, json = false;
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "sector-size", required_argument, 0, 'b' },
		{ "capacity", required_argument, 0, 's' },
		{ "op", required_argument, 0, 'o' },
		{ "parity-width", required_argument, 0, 'P' },
		{ "yes", no_argument, 0, 'y' },
		{ "control", required_argument, 0, 'c' },
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	uint32_t parity = 0;
	bool parity_given = false;
	while ((c = getopt_long(argc, argv, "p:b:s:o:P:yc:jh", opts, NULL)) != -1) {
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
		case 'c': control = optarg; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
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
	if (control || !format_target_is_image(path, preset)) {
		if (preset)
			die("--preset is for an image file; a configured ioDimm's preset is in its [dimm] section");
		return format_daemon(opt_control(control), path, sector, cap, op, parity_given ? (int)parity : -1,
				     yes, json);
	}
	if (json)
		die("--json goes with formatting an ioDimm through flashd");
	if (!sector)
		sector = 512;
	bool exists = access(path, F_OK) == 0;
	if (!exists && !preset)
		die("%s does not exist: --preset is needed to create it", path);
	struct nand_dev *d = open_image(path, preset, !exists, false);

	/* never erase what is there without asking (or --yes) */
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
static int cmd_locate(int argc, char **argv)
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
	printf("%s: superblock rebuilt: format %016" PRIx64 ", %u-byte sectors, %s; the log "
	       "replays (%" PRIu64 " pages)%s%s\n",
	       path, info.format_id, info.sector_size, SIZE_TEXT((double)info.capacity),
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
	double op = 0, passes = 1; /* op 0: the device's stock (ftl_stock_op_percent) */
	uint32_t sector = 4096;
	uint64_t seed = 1, reads = 0, flush_every = 0;
	uint32_t parity = 0;
	bool json = false, ram = false, timing = false, no_flush_parity = false;
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
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "p:o:b:w:k:r:s:i:mtjhP:F:N", opts, NULL)) != -1) {
		switch (c) {
		case 'p': preset = optarg; break;
		case 'P': parity = (uint32_t)opt_uint("--parity-width", optarg, 0, 1); break;
		case 'F': flush_every = opt_uint("--flush-every", optarg, 0, UINT64_MAX); break;
		case 'N': no_flush_parity = true; break;
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
	struct nand_spec spec = { .backend = "sim", .preset = preset, .path = path, .create = true,
				  .timing = timing, .seed = seed };
	struct nand_dev *d;
	char err[512];
	if (nand_open(&spec, &d, err, sizeof err))
		die("%s", err);
	if (path && !image)
		unlink(path);
	struct ftl_format_params fp = { .sector_size = sector, .op_percent = op,
					.parity_width = parity };
	if (ftl_format(d, &fp, err, sizeof err))
		die("format: %s", err);
	struct ftl *f;
	struct ftl_open_params opp = { .no_flush_parity = no_flush_parity };
	if (ftl_open(d, &opp, &f, err, sizeof err))
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
		if (flush_every && (i + 1) % flush_every == 0)
			check(ftl_flush_sync(f), "flush");
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
		printf("  \"parity_width\": %u,\n  \"flush_every\": %" PRIu64 ",\n"
		       "  \"parity_ppl_pages\": %" PRIu64 ",\n  \"parity_pad_pages\": %" PRIu64 ",\n",
		       parity, flush_every, s1.parity_ppl_pages - s0.parity_ppl_pages,
		       s1.parity_pad_pages - s0.parity_pad_pages);
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
		printf("%s, %u-byte sectors, %.1f%% OP, %s, %g passes of %s\n", preset, sector,
		       info.op_percent, workload, passes, SIZE_TEXT((double)info.capacity));
		printf("  write amplification %.3f, last pass %.3f (greedy model %.3f)\n", wa, wa_last,
		       wa_model);
		printf("  %" PRIu64 " host pages, %" PRIu64 " NAND pages, %" PRIu64 " erases\n", host, nand,
		       s1.blocks_erased - s0.blocks_erased);
		if (parity || flush_every)
			printf("  parity width %u, a flush every %" PRIu64 " writes: %" PRIu64
			       " partial-parity pages, %" PRIu64 " pad pages\n", parity, flush_every,
			       s1.parity_ppl_pages - s0.parity_ppl_pages,
			       s1.parity_pad_pages - s0.parity_pad_pages);
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

/* ---- talking to a running flashd (its control socket) -------------------- */

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

struct http_resp {
	int code;
	char *body;     /* NUL-terminated */
	char health[16]; /* X-Flashd-Health of a status answer, "" if none */
};

/* path with every byte outside [A-Za-z0-9._~-] as %XX */
static void url_escape(char *out, size_t len, const char *s)
{
	size_t o = 0;
	for (; *s && o + 4 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    strchr("._~-", c))
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, len - o, "%%%02X", c);
	}
	out[o] = 0;
}

/*
 * One HTTP/1.0 request over the control socket; flashd answers and closes.
 * Returns 0 with *r filled (free r->body), or -errno if flashd could not be
 * reached (err says why); dies on a garbled answer.
 */
static int ctl_call(const char *control, const char *method, const char *path, struct http_resp *r,
		    char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(control) >= sizeof sa.sun_path)
		die("control socket path too long: %s", control);
	strcpy(sa.sun_path, control);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot reach flashd at %s: %s (is it running? --control PATH)",
			 control, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	/* Host: the loopback, X-Flashd-Action on an action: what flashd asks
	 * of a request that is not a web page's (server/ctl.c, cross_site) */
	char req[1024];
	int n = snprintf(req, sizeof req,
			 "%s %s HTTP/1.0\r\nHost: localhost\r\n%sContent-Length: 0\r\n\r\n", method, path,
			 strcmp(method, "POST") ? "" : "X-Flashd-Action: 1\r\n");
	if (n >= (int)sizeof req)
		die("request path too long");
	for (int off = 0; off < n;) {
		ssize_t w = write(fd, req + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die("writing to %s: %s", control, strerror(errno));
		off += (int)w;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			die("out of memory");
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		if (!buf)
			die("out of memory");
		ssize_t got = read(fd, buf + len, cap - len - 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			die("reading from %s: %s", control, strerror(errno));
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	buf[len] = 0;
	char *body = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.", 7) != 0 || !body || len < 12)
		die("unexpected answer from %s%s", control, len ? "" : " (connection closed without one)");
	r->code = atoi(buf + 9);
	r->health[0] = 0;
	*body = 0;  /* the headers end here */
	for (const char *h = strstr(buf, "\r\n"); h && *h; h = strstr(h + 2, "\r\n")) {
		static const char name[] = "\r\nX-Flashd-Health: ";
		if (!strncasecmp(h, name, sizeof name - 1)) {
			snprintf(r->health, sizeof r->health, "%.*s", (int)strcspn(h + sizeof name - 1, "\r"),
				 h + sizeof name - 1);
			break;
		}
	}
	body += 4;
	r->body = strdup(body);
	free(buf);
	if (!r->body)
		die("out of memory");
	return 0;
}

/* ctl_call, dying if flashd cannot be reached */
static void ctl_call_or_die(const char *control, const char *method, const char *path, struct http_resp *r)
{
	char err[600];
	if (ctl_call(control, method, path, r, err, sizeof err))
		die("%s", err);
}

/* The string value of "key" in flashd's (flat, well-formed) JSON, unescaped;
 * false if there is none. */
static bool json_string(const char *json, const char *key, char *out, size_t len)
{
	char pat[80];
	snprintf(pat, sizeof pat, "\"%s\": \"", key);
	const char *p = strstr(json, pat);
	if (!p || !len)
		return false;
	p += strlen(pat);
	size_t o = 0;
	for (; *p && *p != '"' && o + 1 < len; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			if (*p == 'u' && strlen(p) >= 5) {
				unsigned v = (unsigned)strtoul((char[]){ p[1], p[2], p[3], p[4], 0 }, NULL, 16);
				out[o++] = v < 0x80 ? (char)v : '?';
				p += 4;
				continue;
			}
			out[o++] = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
			continue;
		}
		out[o++] = *p;
	}
	out[o] = 0;
	return true;
}

static const char *opt_control(const char *c)
{
	return c ? c : default_control();
}

/* Ask on the terminal; true for "yes".  No terminal: false. */
static bool confirm(const char *question)
{
	if (!isatty(STDIN_FILENO))
		return false;
	fprintf(stderr, "%s\nType 'yes' to go on: ", question);
	fflush(stderr);
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return false;
	line[strcspn(line, "\r\n")] = 0;
	return !strcmp(line, "yes");
}

/*
 * flashctl status [-a] [--json] [--control SOCKET] [DIMM]
 *
 * Exit status, for monitoring scripts (as Nagios plugins count): 0 the
 * health shown is ok, 1 warning, 2 degraded or failed, 3 flashd could not
 * be asked (not running, no such ioDimm, a bad answer).  The text is
 * coloured (green, yellow, red) when stdout is a terminal, unless NO_COLOR
 * is set or TERM is dumb.
 */
#define STATUS_UNKNOWN 3

static int cmd_status(int argc, char **argv)
{
	const char *control = NULL;
	bool json = false, all = false;
	static const struct option opts[] = {
		{ "control", required_argument, 0, 'c' },
		{ "json", no_argument, 0, 'j' },
		{ "all", no_argument, 0, 'a' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:jah", opts, NULL)) != -1) {
		switch (c) {
		case 'c': control = optarg; break;
		case 'j': json = true; break;
		case 'a': all = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 < argc)
		die("status takes at most one DIMM");
	char path[600], name[400];
	if (optind < argc) {
		url_escape(name, sizeof name, argv[optind]);
		snprintf(path, sizeof path, "/v1/dimms/%s", name);
	} else {
		snprintf(path, sizeof path, "/v1/status");
	}
	const char *term = getenv("TERM");
	bool color = !json && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && !(term && !strcmp(term, "dumb"));
	if (!json)
		strcat(path, all ? "?format=text&all=1" : "?format=text");
	if (color)
		strcat(path, "&color=1");
	struct http_resp r;
	char err[600];
	if (ctl_call(opt_control(control), "GET", path, &r, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return STATUS_UNKNOWN;
	}
	char msg[1024];
	if (r.code != 200 && json_string(r.body, "error", msg, sizeof msg)) {
		fprintf(stderr, "%s: %s\n", prog, msg);
		free(r.body);
		return STATUS_UNKNOWN;
	}
	fputs(r.body, stdout);
	free(r.body);
	if (r.code != 200)
		return STATUS_UNKNOWN;
	if (!strcmp(r.health, "ok"))
		return 0;
	if (!strcmp(r.health, "warning"))
		return 1;
	if (!strcmp(r.health, "degraded") || !strcmp(r.health, "failed"))
		return 2;
	fprintf(stderr, "%s: flashd did not say the health (X-Flashd-Health: '%s')\n", prog, r.health);
	return STATUS_UNKNOWN;
}

/* POST /v1/dimms/DIMM/VERB[?query]: print the message; 0 if it went well. */
static int post_action(const char *control, const char *dimm, const char *verb, const char *query,
		       bool json)
{
	char name[400], path[1200];
	url_escape(name, sizeof name, dimm);
	snprintf(path, sizeof path, "/v1/dimms/%s/%s%s%s", name, verb, query && query[0] ? "?" : "",
		 query ? query : "");
	struct http_resp r;
	ctl_call_or_die(control, "POST", path, &r);
	char msg[1024];
	if (json)
		fputs(r.body, stdout);
	else if (json_string(r.body, r.code == 200 ? "message" : "error", msg, sizeof msg))
		fprintf(r.code == 200 ? stdout : stderr, "%s%s\n", r.code == 200 ? "" : "flashctl: ", msg);
	else
		fprintf(stderr, "%s: HTTP %d: %s", prog, r.code, r.body);
	free(r.body);
	return r.code == 200 ? 0 : 1;
}

/* flashctl attach|detach|checkpoint DIMM [--control SOCKET] [--json];
 * detach [--force] */
static int cmd_action(const char *verb, int argc, char **argv)
{
	const char *control = NULL;
	bool json = false, force = false;
	static const struct option opts[] = {
		{ "control", required_argument, 0, 'c' },
		{ "json", no_argument, 0, 'j' },
		{ "force", no_argument, 0, 'f' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:jfh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': control = optarg; break;
		case 'j': json = true; break;
		case 'f': force = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!strcmp(verb, "beacon")) {
		/* flashctl beacon DIMM [on|off] */
		if (optind + 1 != argc && optind + 2 != argc)
			die("beacon needs a DIMM, then on (the default) or off");
		const char *st = optind + 2 == argc ? argv[optind + 1] : "on";
		if (strcmp(st, "on") && strcmp(st, "off"))
			die("beacon %s: '%s' is neither on nor off", argv[optind], st);
		char q[16];
		snprintf(q, sizeof q, "state=%s", st);
		return post_action(opt_control(control), argv[optind], verb, q, json);
	}
	if (!strcmp(verb, "inject")) {
		/* flashctl inject DIMM die-fail N | bad-block B | bit-errors PPM | temperature C */
		if (optind + 3 != argc)
			die("inject needs a DIMM, a fault (die-fail, bad-block, bit-errors, temperature) "
			    "and its value");
		const char *w = argv[optind + 1];
		if (strcmp(w, "die-fail") && strcmp(w, "bad-block") && strcmp(w, "bit-errors") &&
		    strcmp(w, "temperature"))
			die("inject: unknown fault '%s' (die-fail N, bad-block B, bit-errors PPM, "
			    "temperature C)", w);
		char q[300], v[200];
		url_escape(v, sizeof v, argv[optind + 2]);
		snprintf(q, sizeof q, "what=%s&value=%s", w, v);
		return post_action(opt_control(control), argv[optind], verb, q, json);
	}
	if (optind + 1 != argc)
		die("%s needs exactly one DIMM (flashctl status lists them)", verb);
	if (force && strcmp(verb, "detach"))
		die("--force is for detach only");
	return post_action(opt_control(control), argv[optind], verb, force ? "force=yes" : NULL, json);
}

/* flashctl format DIMM ...: through the daemon (detached ioDimms only). */
static int format_daemon(const char *control, const char *dimm, uint32_t sector, const char *cap,
			 double op, int parity, bool yes, bool json)
{
	char q[400] = "", v[200];
	if (sector)
		snprintf(q + strlen(q), sizeof q - strlen(q), "sector_size=%u", sector);
	if (parity >= 0)
		snprintf(q + strlen(q), sizeof q - strlen(q), "%sparity_width=%d", q[0] ? "&" : "",
			 parity);
	if (cap) {
		url_escape(v, sizeof v, cap);
		snprintf(q + strlen(q), sizeof q - strlen(q), "%scapacity=%s", q[0] ? "&" : "", v);
	}
	if (op >= 0)
		snprintf(q + strlen(q), sizeof q - strlen(q), "%sop=%g", q[0] ? "&" : "", op);
	/* flashd formats only with this: the request says it means it */
	snprintf(q + strlen(q), sizeof q - strlen(q), "%sconfirm=yes", q[0] ? "&" : "");
	if (!yes) {
		char question[600];
		snprintf(question, sizeof question,
			 "Formatting ioDimm %s (through flashd at %s) erases every sector on it.", dimm,
			 control);
		if (!isatty(STDIN_FILENO))
			die("formatting %s erases every sector on it: add --yes (no terminal to ask on)", dimm);
		if (!confirm(question))
			die("not formatted");
	}
	return post_action(control, dimm, "format", q, json);
}

/* ---- stats: the control socket's /metrics, per interval ----------------- */

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

/*
 * flashctl stats [--live] [--interval S] [--count N] [--json] [DIMM...]
 * Without --live: the counters since flashd started.  With it: per interval,
 * the requests, bandwidth, latency percentiles and GC work of that interval.
 */
static int cmd_stats(int argc, char **argv)
{
	const char *control = NULL;
	bool live = false, json = false;
	double interval = 1;
	uint64_t count = 0;
	static const struct option opts[] = {
		{ "control", required_argument, 0, 'c' },
		{ "live", no_argument, 0, 'l' },
		{ "interval", required_argument, 0, 'i' },
		{ "count", required_argument, 0, 'n' },
		{ "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:li:n:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': control = optarg; break;
		case 'l': live = true; break;
		case 'i': interval = opt_double("--interval", optarg, 0.1, 3600); break;
		case 'n': count = opt_uint("--count", optarg, 1, UINT64_MAX); break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!live && (count || interval != 1))
		die("--interval and --count go with --live");
	control = opt_control(control);
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
		for (int i = 0; i < a.n; i++) {
			struct live_dimm *d = &a.d[i];
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
			struct live_dimm *d = &b.d[i], *p = NULL;
			if (!live_wanted(d, names, nnames))
				continue;
			for (int j = 0; j < a.n; j++)
				if (!strcmp(a.d[j].name, d->name))
					p = &a.d[j];
			static struct live_dimm empty;
			if (!p)
				p = &empty;
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
			if (json) {
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
			} else {
				char l[4][16];
				fmt_lat(l[0], sizeof l[0], q[0][0]);
				fmt_lat(l[1], sizeof l[1], q[0][1]);
				fmt_lat(l[2], sizeof l[2], q[1][0]);
				fmt_lat(l[3], sizeof l[3], q[1][1]);
				printf("%-8s %-10s %-13s %8.0f %8.0f %8.2f %8.2f %7s %7s %7s %7s %7.0f %8.0f %7.1f %5.0f\n",
				       when, d->name, d->state, rs, ws, rb / 1e6, wb / 1e6, l[0], l[1], l[2], l[3],
				       fs, gc, er, d->conns);
				lines++;
			}
		}
		a = b;
		done++;
	}
	return 0;
}

/* A JSON string at *p (at its opening quote) into out, unescaped; *p moves
 * past it.  false if *p is not at a string. */
static bool json_read_str(const char **p, char *out, size_t len)
{
	const char *s = *p;
	size_t o = 0;
	if (*s != '"')
		return false;
	for (s++; *s && *s != '"'; s++) {
		char ch = *s;
		if (ch == '\\' && s[1]) {
			s++;
			if (*s == 'u' && strlen(s) >= 5) {
				unsigned v = (unsigned)strtoul((char[]){ s[1], s[2], s[3], s[4], 0 }, NULL, 16);
				ch = v < 0x80 ? (char)v : '?';
				s += 4;
			} else {
				ch = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
			}
		}
		if (o + 1 < len)
			out[o++] = ch;
	}
	if (len)
		out[o] = 0;
	if (*s != '"')
		return false;
	*p = s + 1;
	return true;
}

/* Print the {"key", "message"} items of flashd's list "name" as
 * "  PREFIX KEY: MESSAGE" lines; how many there were. */
static int print_reload_items(const char *json, const char *name, const char *prefix)
{
	char pat[64], key[256], msg[1200];
	snprintf(pat, sizeof pat, "\"%s\": [", name);
	const char *p = strstr(json, pat);
	int n = 0;
	if (!p)
		return 0;
	p += strlen(pat);
	for (;;) {
		while (*p == ' ' || *p == ',')
			p++;
		if (strncmp(p, "{\"key\": ", 8) != 0)
			break;
		p += 8;
		if (!json_read_str(&p, key, sizeof key) || strncmp(p, ", \"message\": ", 13) != 0)
			break;
		p += 13;
		if (!json_read_str(&p, msg, sizeof msg))
			break;
		printf("  %s %s: %s\n", prefix, key, msg);
		n++;
		if (*p == '}')
			p++;
	}
	return n;
}

/* flashctl reload [--control SOCKET] [--json]: what SIGHUP does, with the result */
static int cmd_reload(int argc, char **argv)
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
	if (optind != argc)
		die("reload takes no arguments");
	struct http_resp r;
	ctl_call_or_die(opt_control(control), "POST", "/v1/reload", &r);
	char msg[1400];
	if (json) {
		fputs(r.body, stdout);
	} else if (r.code != 200) {
		if (json_string(r.body, "error", msg, sizeof msg))
			fprintf(stderr, "%s: reload refused, nothing changed: %s\n", prog, msg);
		else
			fprintf(stderr, "%s: HTTP %d: %s", prog, r.code, r.body);
	} else {
		if (json_string(r.body, "message", msg, sizeof msg))
			printf("%s\n", msg);
		print_reload_items(r.body, "applied", "applied:");
		print_reload_items(r.body, "not_applied", "not applied:");
	}
	free(r.body);
	return r.code == 200 ? 0 : 1;
}

/* flashctl version [--control SOCKET]: this tool's and the running flashd's */
static int cmd_version(int argc, char **argv)
{
	const char *control = NULL;
	static const struct option opts[] = {
		{ "control", required_argument, 0, 'c' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': control = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	printf("flashctl %s\n", FLASHD_VERSION);
	control = opt_control(control);
	struct http_resp r;
	char err[600], v[64];
	if (ctl_call(control, "GET", "/v1/version", &r, err, sizeof err)) {
		printf("flashd: %s\n", err);
		return 0;
	}
	if (r.code == 200 && json_string(r.body, "version", v, sizeof v)) {
		const char *pid = strstr(r.body, "\"pid\": ");
		printf("flashd %s (pid %d, control socket %s)\n", v, pid ? atoi(pid + 7) : 0, control);
	} else {
		printf("flashd: unexpected answer from %s (HTTP %d)\n", control, r.code);
	}
	free(r.body);
	return 0;
}

static int cmd_presets(void)
{
	const char *name;
	for (size_t i = 0; (name = nand_preset_name(i)); i++)
		printf("%-16s %s\n", name, nand_preset_description(name));
	return 0;
}

/*
 * The common options may come before the command too ("flashctl --control
 * PATH status", as doc/managing.md writes them): --control PATH (-c PATH,
 * --control=PATH) and --json (-j) are moved behind it, where the command's
 * own parsing takes them as if they had been written there.  Returns the
 * command's argv: the command, those options, the rest; NULL if there is
 * no command after them.
 */
static char **command_first(int argc, char **argv)
{
	int i = 1;
	while (i < argc) {
		const char *a = argv[i];
		if (!strcmp(a, "--control") || !strcmp(a, "-c"))
			i += 2;
		else if (!strncmp(a, "--control=", 10) || (!strncmp(a, "-c", 2) && a[2]) ||
			 !strcmp(a, "--json") || !strcmp(a, "-j"))
			i++;
		else
			break;
	}
	if (i >= argc)
		return NULL;
	char **v = calloc((size_t)argc + 1, sizeof *v); /* for the process's life */
	if (!v)
		die("out of memory");
	int n = 0;
	v[n++] = argv[i];
	for (int k = 1; k < i; k++)
		v[n++] = argv[k];
	for (int k = i + 1; k < argc; k++)
		v[n++] = argv[k];
	v[n] = NULL;
	return v;
}

int main(int argc, char **argv)
{
	argv = argc < 2 ? NULL : command_first(argc, argv);
	if (!argv) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[0];
	argc--;
	ftl_set_logger(ftl_log_print, NULL);
	if (strcmp(cmd, "format") == 0)
		return cmd_format(argc, argv);
	if (strcmp(cmd, "info") == 0)
		return cmd_info(argc, argv);
	if (strcmp(cmd, "recover") == 0)
		return cmd_recover(argc, argv);
	if (strcmp(cmd, "locate") == 0)
		return cmd_locate(argc, argv);
	if (strcmp(cmd, "bench") == 0)
		return cmd_bench(argc, argv);
	if (strcmp(cmd, "simulate") == 0)
		return cmd_simulate(argc, argv);
	if (strcmp(cmd, "presets") == 0) {
		if (argc > 1)
			die("presets takes no arguments");
		return cmd_presets();
	}
	if (strcmp(cmd, "status") == 0)
		return cmd_status(argc, argv);
	if (strcmp(cmd, "attach") == 0 || strcmp(cmd, "detach") == 0 || strcmp(cmd, "checkpoint") == 0 ||
	    strcmp(cmd, "beacon") == 0 || strcmp(cmd, "inject") == 0)
		return cmd_action(cmd, argc, argv);
	if (strcmp(cmd, "stats") == 0)
		return cmd_stats(argc, argv);
	if (strcmp(cmd, "version") == 0)
		return cmd_version(argc, argv);
	if (strcmp(cmd, "reload") == 0)
		return cmd_reload(argc, argv);
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
		printf("flashctl %s\n", FLASHD_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
	usage(stderr);
	return 2;
}
