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
 *
 * This file: main, the verb table (which also writes usage), the common
 * options (verb_getopt) and what every verb's parsing uses.  The verbs are
 * in the files flashctl.h lists.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/parse.h"
#include "server/version.h"
#include "tools/flashctl/flashctl.h"

const char *const prog = "flashctl";

/*
 * Every verb, in usage's order; main runs the first row of the name.
 * format has a row in each section: the one command formats an ioDimm of
 * a running flashd or an image file (cmd_format tells which).
 */
static const struct verb verbs[] = {
	{ "status", true, COMMON_CONTROL | COMMON_JSON,
	  "status [-a|--all] [--json] [DIMM]\n"
	  "      health, state, format, lifetime traffic of every ioDimm (-a: everything);\n"
	  "      exit status 0: health ok, 1: warning, 2: degraded or failed, 3: no answer\n",
	  NULL, cmd_status },
	{ "attach", true, COMMON_CONTROL | COMMON_JSON,
	  "attach DIMM | detach [--force] DIMM\n"
	  "      open the ioDimm's image and export it again | drain and close its connections,\n"
	  "      close its FTL (checkpoint) and image; new clients are refused meanwhile;\n"
	  "      refused while clients are connected (named) unless --force\n",
	  NULL, cmd_action },
	{ "detach", true, COMMON_CONTROL | COMMON_JSON, NULL, NULL, cmd_action },
	{ "format", true, COMMON_CONTROL | COMMON_JSON,
	  "format DIMM [--sector-size 512|4096] [--capacity BYTES|PCT%] [--op PCT] --yes\n"
	  "      low-level format of a detached ioDimm (unset: its [dimm] keys)\n",
	  NULL, cmd_format },
	{ "checkpoint", true, COMMON_CONTROL | COMMON_JSON,
	  "checkpoint DIMM\n"
	  "      write a checkpoint now and wait until it is on the media; requests go on\n"
	  "      being served meanwhile\n",
	  NULL, cmd_action },
	{ "beacon", true, COMMON_CONTROL | COMMON_JSON,
	  "beacon DIMM [on|off]\n"
	  "      the ioDimm's locate beacon (shown by status and /metrics)\n",
	  NULL, cmd_action },
	{ "inject", true, COMMON_CONTROL | COMMON_JSON,
	  "inject DIMM die-fail N | bad-block B | bit-errors PPM | temperature C\n"
	  "      a fault into a simulated ioDimm while it serves (needs [server]\n"
	  "      fault_injection = yes): a die whose every operation fails, a block whose\n"
	  "      programs and erases fail, PPM reads per million uncorrectable (0: off), or the\n"
	  "      controller's temperature now (it relaxes towards ambient)\n",
	  NULL, cmd_action },
	{ "stats", true, COMMON_CONTROL | COMMON_JSON,
	  "stats [--live [--interval S] [--count N]] [--json] [DIMM...]\n"
	  "      requests, bandwidth, latency percentiles, GC: since start, or per interval\n",
	  NULL, cmd_stats },
	{ "reload", true, COMMON_CONTROL | COMMON_JSON,
	  "reload [--json]\n"
	  "      read flashd's configuration file again (as SIGHUP): apply what can change\n"
	  "      while serving, list what needs a restart; a file with an error changes nothing\n",
	  NULL, cmd_reload },
	{ "version", true, COMMON_CONTROL, "version | --version\n", NULL, cmd_version },
	{ "format", false, COMMON_CONTROL | COMMON_JSON,
	  "format IMAGE --preset P [--sector-size 512|4096] [--capacity BYTES|PCT%] [--op PCT]\n"
	  "         [--parity-width 0|1] [--yes]\n"
	  "      low-level format (creates IMAGE if missing).  --capacity PCT% is a share of the\n"
	  "      stock capacity (100% = stock = 20% over-provisioning, more where the FTL's own\n"
	  "      blocks need it: test-128m-512p 31%; 80% = high performance);\n"
	  "      --op is the over-provisioning as a share of raw NAND (20 = stock, 36 = high perf);\n"
	  "      --parity-width 1: Flashback parity, one die per band stripe (24 + 1 on the ioDimm;\n"
	  "      the capacity shrinks by that share); 0: none (the default).\n"
	  "      An image that holds data is formatted only after 'yes' on the terminal, or --yes\n",
	  NULL, cmd_format },
	{ "info", false, COMMON_JSON,
	  "info IMAGE [--json]\n"
	  "      geometry, format and statistics of an image that is not in use\n",
	  NULL, cmd_info },
	{ "recover", false, COMMON_JSON,
	  "recover IMAGE [--json]\n"
	  "      scan an image whose FTL does not open: superblock, checkpoints, log\n"
	  "  flashctl recover IMAGE --rebuild-superblock [--sector-size 512|4096] [--capacity BYTES]\n"
	  "      write a new superblock for the log and newest intact checkpoint found;\n"
	  "      sector size and capacity are needed only if no checkpoint records them\n",
	  NULL, cmd_recover },
	{ "locate", false, 0,
	  "locate IMAGE OFFSET...\n"
	  "      where the FTL keeps the 4 KiB unit of each byte offset: die, block, page and\n"
	  "      the page's NAND address (on /dev/mtdN the address nanddump -s takes)\n",
	  NULL, cmd_locate },
	{ "simulate", false, COMMON_JSON,
	  "simulate --preset P [--op PCT] [--sector-size N] [--workload uniform|hotcold:80/20]\n"
	  "           [--passes K] [--reads N] [--ram] [--timing] [--seed S] [--json]\n"
	  "           [--parity-width 0|1] [--flush-every N] [--no-flush-parity]\n"
	  "      format a fresh device, fill it, overwrite it K times with random 4 KiB writes\n"
	  "      (a flush after every N of them), report write amplification and speed\n",
	  NULL, cmd_simulate },
	{ "bench", false, COMMON_JSON,
	  "bench --preset P [--op PCT] [--workload randwrite|randread|rw70|seqwrite|seqread]\n"
	  "           [--qd N] [--precondition PASSES|steady] [--duration S] [--csv FILE] [--json] ...\n"
	  "      the reviewers' protocol on the simulator's virtual clock (full-size devices\n"
	  "      fit: only page metadata is kept); prints IOPS, latency, WA and the physical bound\n",
	  bench_help, cmd_bench },
	{ "presets", false, 0, "presets\n", NULL, cmd_presets },
};

void usage(FILE *out)
{
	fputs("usage:\n"
	      "A running flashd (--control SOCKET: its control socket; default var/flashd.ctl in the\n"
	      "checkout, /run/flashd/flashd.ctl or /var/lib/flashd/flashd.ctl, or $FLASHD_CONTROL;\n"
	      "--control and --json may also come before the command):\n", out);
	for (int online = 1; online >= 0; online--) {
		if (!online)
			fputs("Image files, or raw NAND as /dev/mtdN (not in use):\n", out);
		for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
			if (verbs[i].online == online && verbs[i].usage)
				fprintf(out, "  %s %s", prog, verbs[i].usage);
	}
}

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

bool confirm(const char *question)
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

/* ---- option values --------------------------------------------------------- */

uint64_t opt_capacity(const char *s, bool *pct, double *pctval)
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

uint32_t opt_sector_size(const char *s)
{
	uint64_t v;
	if (parse_byte_size(s, 512, 4096, &v) || (v != 512 && v != 4096))
		die("bad --sector-size '%s': 512 or 4096", s);
	return (uint32_t)v;
}

double opt_double(const char *name, const char *s, double min, double max)
{
	double v;
	if (parse_double(s, min, max, &v))
		die("bad %s '%s': a number from %g to %g", name, s, min, max);
	return v;
}

uint64_t opt_uint(const char *name, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;
	if (parse_uint(s, min, max, &v))
		die("bad %s '%s': a whole number from %" PRIu64 " to %" PRIu64, name, s, min, max);
	return v;
}

/* ---- the common options ---------------------------------------------------- */

int verb_getopt(struct invocation *inv, int argc, char **argv, const char *shortopts,
		const struct option *longopts)
{
	/* the verb's options and the common ones it takes, built at the first
	 * call: a run has one verb */
	static char shorts[64];
	static struct option longs[32];
	unsigned common = inv->verb->common;
	if (!shorts[0]) {
		size_t n = 0;
		while (longopts[n].name && n < 28) {
			longs[n] = longopts[n];
			n++;
		}
		if (common & COMMON_CONTROL)
			longs[n++] = (struct option){ "control", required_argument, 0, 'c' };
		if (common & COMMON_JSON)
			longs[n++] = (struct option){ "json", no_argument, 0, 'j' };
		longs[n++] = (struct option){ "help", no_argument, 0, 'h' };
		longs[n] = (struct option){ 0, 0, 0, 0 };
		snprintf(shorts, sizeof shorts, "%s%s%sh", shortopts, common & COMMON_CONTROL ? "c:" : "",
			 common & COMMON_JSON ? "j" : "");
	}
	int c;
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		if (c == 'c' && (common & COMMON_CONTROL)) {
			inv->control = optarg;
		} else if (c == 'j' && (common & COMMON_JSON)) {
			inv->json = true;
		} else if (c == 'h') {
			if (inv->verb->help)
				fputs(inv->verb->help, stdout);
			else
				usage(stdout);
			exit(0);
		} else if (c == '?' || c == ':') {
			if (!inv->verb->help)
				usage(stderr);
			exit(2);
		} else {
			return c;
		}
	}
	return -1;
}

bool verb_flag(struct invocation *inv, int argc, char **argv, const char *flag)
{
	struct option longs[2] = { { 0, 0, 0, 0 }, { 0, 0, 0, 0 } };
	char shorts[2] = "";
	if (flag) {
		longs[0] = (struct option){ flag, no_argument, 0, flag[0] };
		shorts[0] = flag[0];
	}
	bool given = false;
	while (verb_getopt(inv, argc, argv, shorts, longs) != -1)
		given = true;
	return given;
}

/*
 * The common options may come before the command too ("flashctl --control
 * PATH status", as doc/managing.md writes them): --control PATH (-c PATH,
 * --control=PATH) and --json (-j) are moved behind it, where the command's
 * verb_getopt takes them as if they had been written there.  Returns the
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
	log_to_stderr();
	for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
		if (!strcmp(cmd, verbs[i].name)) {
			struct invocation inv = { .verb = &verbs[i] };
			return verbs[i].run(&inv, argc, argv);
		}
	}
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
