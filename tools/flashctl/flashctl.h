/*
 * flashctl's internal header: what its files share.  Not installed and not
 * included outside tools/flashctl/; flashctl reaches the FTL and the NAND
 * through their public headers and a running flashd only through its
 * control socket (ctl_client.c).
 *
 * Files, one concept each:
 *   flashctl.c    main: the verb table, usage, the common options, option
 *                 value parsers, die and confirm
 *   ctl_client.c  the control socket client (HTTP/1.0 over the unix socket)
 *   online.c      verbs on a running flashd's ioDimms: status, attach,
 *                 detach, checkpoint, beacon, inject, reload, version and
 *                 format of an ioDimm
 *   stats.c       stats: flashd's /metrics, since start or per interval
 *   image.c       verbs on image files and /dev/mtdN: format, info,
 *                 recover, locate
 *   simulate.c    simulate and presets: the FTL alone on a simulated device
 *   bench.c       bench: the reviewers' protocol on the virtual clock
 *   steady.c      the SNIA PTS-E steady-state rule (bench's rounds)
 * Errors end the process (die): flashctl runs one verb and exits.
 */
#ifndef FLASHCTL_H
#define FLASHCTL_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/xorshift.h"

extern const char *const prog; /* "flashctl": the prefix of every error line */

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void usage(FILE *out);
/* Ask on the terminal; true for "yes".  No terminal: false. */
bool confirm(const char *question);

/* ---- verbs and the common options (flashctl.c) -------------------------- */

/* The common options a verb takes (struct verb's common). */
#define COMMON_CONTROL 1u /* --control SOCKET, -c: flashd's control socket */
#define COMMON_JSON    2u /* --json, -j: JSON instead of text */

struct invocation;

struct verb {
	const char *name;
	bool online;            /* talks to a running flashd (usage's first section) */
	unsigned common;        /* COMMON_*: the common options it takes */
	const char *usage;      /* its lines in usage(), after "  flashctl "; NULL: in another row's */
	const char *help;       /* what --help prints if not the whole usage */
	int (*run)(struct invocation *inv, int argc, char **argv);
};

/* One run of flashctl: the verb and the common options given (before or
 * after the verb). */
struct invocation {
	const struct verb *verb;
	const char *control;    /* NULL: not given (ctl_path finds the default) */
	bool json;
};

/*
 * getopt_long over the verb's own options and the common ones it takes:
 * the common ones fill inv; --help prints the verb's help and exits 0, an
 * unknown option usage (a verb with its own help: nothing more) and exits
 * 2.  Returns the verb's next option as getopt_long does, -1 at the end.
 * The verb's short options must not use c, j or h for anything else
 * unless it does not take that common option (bench's -c is --csv).
 */
int verb_getopt(struct invocation *inv, int argc, char **argv, const char *shortopts,
		const struct option *longopts);
/*
 * All of verb_getopt for a verb whose only own option is the flag --FLAG
 * (short: FLAG's first letter), or that has none (flag NULL); true if
 * --FLAG was given.
 */
bool verb_flag(struct invocation *inv, int argc, char **argv, const char *flag);

/* ---- option values: each dies with the option's name on a bad value ------ */

/* --capacity: BYTES (K/M/G/T) or PCT% of the stock capacity (0 < PCT <= 100);
 * *pct says which, *pctval is the percentage */
uint64_t opt_capacity(const char *s, bool *pct, double *pctval);
uint32_t opt_sector_size(const char *s);
double opt_double(const char *name, const char *s, double min, double max);
uint64_t opt_uint(const char *name, const char *s, uint64_t min, uint64_t max);

/* ---- the control socket client (ctl_client.c) ---------------------------- */

struct http_resp {
	int code;
	char *body;      /* NUL-terminated; the caller frees it */
	char health[16]; /* X-Flashd-Health of a status answer, "" if none */
};

/* The socket given, else $FLASHD_CONTROL, var/flashd.ctl beside the
 * checkout's build/, /run/flashd/flashd.ctl, /var/lib/flashd/flashd.ctl. */
const char *ctl_path(const char *given);
/* s with every byte outside [A-Za-z0-9._~-] as %XX (a path or query part) */
void url_escape(char *out, size_t len, const char *s);
/* One request; 0 with *r filled, or -errno if flashd could not be reached
 * (err says why); dies on a garbled answer. */
int ctl_call(const char *control, const char *method, const char *path, struct http_resp *r,
	     char *err, size_t errlen);
/* ctl_call, dying if flashd cannot be reached */
void ctl_call_or_die(const char *control, const char *method, const char *path, struct http_resp *r);
/* The string value of "key" in flashd's (flat, well-formed) JSON, unescaped;
 * false if there is none. */
bool json_string(const char *json, const char *key, char *out, size_t len);
/* The JSON string at *p (its opening quote) into out, unescaped; *p moves
 * past it.  false if *p is not at a string. */
bool json_read_str(const char **p, char *out, size_t len);

/* ---- steady state (steady.c): the SNIA PTS-E rule -------------------------- */

#define STEADY_ROUNDS        5  /* the measurement window, in rounds */
#define STEADY_EXCURSION_PCT 20 /* max - min within this share of the mean */
#define STEADY_SLOPE_PCT     10 /* |slope| x (rounds - 1) within this share of it */

struct steady {
	double mean;          /* of the window's values */
	double excursion_pct; /* (max - min) / mean, in percent */
	double slope_pct;     /* least-squares slope x (STEADY_ROUNDS - 1) / mean, in
			       * percent, signed: negative when falling */
	bool reached;         /* both within their limits (a mean of 0: never) */
};
/* The rule over y[0 .. STEADY_ROUNDS - 1], the window's values oldest first. */
struct steady steady_rule(const double y[STEADY_ROUNDS]);

/* ---- the verbs ------------------------------------------------------------ */

int cmd_status(struct invocation *inv, int argc, char **argv);    /* online.c */
int cmd_action(struct invocation *inv, int argc, char **argv);    /* online.c */
int cmd_reload(struct invocation *inv, int argc, char **argv);    /* online.c */
int cmd_version(struct invocation *inv, int argc, char **argv);   /* online.c */
/* format DIMM through flashd (detached ioDimms only); sector 0, cap NULL,
 * op < 0, parity < 0: unset (its [dimm] keys) */
int format_daemon(const char *control, const char *dimm, uint32_t sector, const char *cap,
		  double op, int parity, bool yes, bool json);                     /* online.c */
int cmd_stats(struct invocation *inv, int argc, char **argv);     /* stats.c */
/* the FTL's lines on stderr as "flashctl: [IMAGE: ]LEVEL: ..." (image.c) */
void log_to_stderr(void);
int cmd_format(struct invocation *inv, int argc, char **argv);    /* image.c */
int cmd_info(struct invocation *inv, int argc, char **argv);      /* image.c */
int cmd_recover(struct invocation *inv, int argc, char **argv);   /* image.c */
int cmd_locate(struct invocation *inv, int argc, char **argv);    /* image.c */
int cmd_simulate(struct invocation *inv, int argc, char **argv);  /* simulate.c */
int cmd_presets(struct invocation *inv, int argc, char **argv);   /* simulate.c */
int cmd_bench(struct invocation *inv, int argc, char **argv);     /* bench.c */
extern const char bench_help[];                                   /* bench.c: its --help */

#endif
