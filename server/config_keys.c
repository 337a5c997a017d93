/*
 * server/config_keys.c - the keys of flashd.conf: one row per key of
 * [server] and [dimm NAME] in cfg_keys (section, name, type, where it is
 * stored, range, default, the words of its error), the parsers of the keys
 * that are more than a type, the [card NAME] keys, and the value syntaxes
 * they share (listen addresses, modes, groups, health thresholds).  It owns
 * what a key's value means, how it lands in struct server_cfg or struct
 * dimm_cfg and what it is when not given; server/config.c (reading the
 * file: lines, sections, a key at most once; the defaults made of other
 * keys) calls config_key for each key and config_key_defaults from
 * config_finish, which also uses check_listen_spec for the command line's
 * addresses.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include "common/parse.h"
#include "hw/nand.h"
#include "server/config_int.h"

/* Limits of the [server] numbers. */
#define MAX_CONNECTIONS_LIMIT 1000000
#define HANDSHAKE_TIMEOUT_LIMIT 86400   /* seconds */
#define POLL_US_LIMIT 10000
#define IDLE_TIMEOUT_LIMIT 604800       /* seconds (a week) */
#define BUFFER_LIMIT_MIN (64ull << 20)  /* one largest request must fit (conn_buf.c) */
/* Defaults of the [server] numbers (rows with DEFAULT). */
#define DEFAULT_BUFFER_LIMIT (1ull << 30)
#define DEFAULT_CONN_PER_ADDR 256
#define DEFAULT_HANDSHAKES_PER_ADDR 16
#define DEFAULT_IDLE_TIMEOUT_BUSY 600   /* seconds */
/* Smallest capacity ftl_format accepts (ftl/ftl.c). */
#define MIN_CAPACITY (1ull << 20)

/* Kept for callers of the old API: any size parse_byte_size accepts. */
uint64_t parse_bytes(const char *s, bool *ok)
{
	uint64_t v = 0;
	*ok = parse_byte_size(s, 0, UINT64_MAX, &v) == 0;
	return *ok ? v : 0;
}

static int parse_bool(const char *v, bool *out)
{
	if (!strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcasecmp(v, "on")) {
		*out = true;
		return 0;
	}
	if (!strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcasecmp(v, "off")) {
		*out = false;
		return 0;
	}
	return -1;
}

/*
 * Checks a listen address: HOST:PORT or [IPV6]:PORT, PORT 1..65535.  HOST
 * is a numeric IPv4 address or a host name (resolved later, by getaddrinfo
 * in server/listen.c); inside brackets only a numeric IPv6 address (with an
 * optional %scope).  0, or -EINVAL with the reason in err.
 * An empty HOST (":PORT") is every address, IPv6 and IPv4: server/listen.c
 * binds one IPv6 socket with IPV6_V6ONLY off (whatever
 * net.ipv6.bindv6only says), or 0.0.0.0 where there is no IPv6.
 */
static int check_listen(const char *spec, char *err, size_t errlen)
{
	char host[256];
	const char *port;
	size_t hlen;
	if (spec[0] == '[') {
		const char *e = strchr(spec, ']');
		if (!e || e[1] != ':') {
			snprintf(err, errlen, "expected [IPV6]:PORT");
			return -EINVAL;
		}
		hlen = (size_t)(e - spec - 1);
		port = e + 2;
		if (hlen >= sizeof host) {
			snprintf(err, errlen, "the address is too long");
			return -EINVAL;
		}
		memcpy(host, spec + 1, hlen);
		host[hlen] = 0;
		struct addrinfo hints = { .ai_family = AF_INET6, .ai_flags = AI_NUMERICHOST }, *res;
		if (getaddrinfo(host, NULL, &hints, &res) != 0) {
			snprintf(err, errlen, "'%s' is not an IPv6 address (brackets are for IPv6 only)", host);
			return -EINVAL;
		}
		freeaddrinfo(res);
	} else {
		const char *c = strrchr(spec, ':');
		if (!c) {
			snprintf(err, errlen, "no port: expected HOST:PORT, or [IPV6]:PORT");
			return -EINVAL;
		}
		hlen = (size_t)(c - spec);
		port = c + 1;
		if (memchr(spec, ':', hlen)) {
			snprintf(err, errlen, "an IPv6 address needs brackets: [ADDR]:PORT");
			return -EINVAL;
		}
		if (hlen > 253) {
			snprintf(err, errlen, "the host name is longer than 253 characters");
			return -EINVAL;
		}
		memcpy(host, spec, hlen);
		host[hlen] = 0;
		if (!hlen) {
			/* every address (dual-stack) */
		} else if (strspn(host, "0123456789.") == hlen) {
			struct in_addr a;
			if (inet_pton(AF_INET, host, &a) != 1) {
				snprintf(err, errlen, "'%s' is not an IPv4 address (dotted quad, e.g. 127.0.0.1)",
					 host);
				return -EINVAL;
			}
		} else if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  "0123456789.-_") != hlen) {
			snprintf(err, errlen, "'%s' is not a host name or IPv4 address", host);
			return -EINVAL;
		}
	}
	uint64_t p;
	int rc = parse_uint(port, 1, 65535, &p);
	if (rc == -ERANGE) {
		snprintf(err, errlen, "port %s is out of range (1 to 65535)", port);
		return -EINVAL;
	}
	if (rc) {
		snprintf(err, errlen, "port '%s' is not a number (1 to 65535)", port);
		return -EINVAL;
	}
	return 0;
}

/*
 * "ADDR" or "ADDR tls=MODE" (spaces or tabs between): the address into addr,
 * the mode into *mode (-1 when not given).
 */
int listen_split(const char *spec, char *addr, size_t addrlen, int *mode, char *err, size_t errlen)
{
	size_t n = strcspn(spec, " \t");
	*mode = -1;
	if (n >= addrlen) {
		snprintf(err, errlen, "the address is too long");
		return -EINVAL;
	}
	memcpy(addr, spec, n);
	addr[n] = 0;
	const char *rest = spec + n;
	rest += strspn(rest, " \t");
	if (!*rest)
		return 0;
	if (strncmp(rest, "tls=", 4) != 0) {
		snprintf(err, errlen, "after the address only tls=off|allowed|required may follow, not '%s'",
			 rest);
		return -EINVAL;
	}
	char m[32];
	size_t ml = strcspn(rest + 4, " \t");
	snprintf(m, sizeof m, "%.*s", (int)(ml < sizeof m ? ml : sizeof m - 1), rest + 4);
	if (rest[4 + ml + strspn(rest + 4 + ml, " \t")] || (*mode = tls_mode_parse(m)) < 0) {
		snprintf(err, errlen, "tls= takes off, allowed or required, not '%s'", rest + 4);
		*mode = -1;
		return -EINVAL;
	}
	return 0;
}

/* check_listen, on the address part of "ADDR[ tls=MODE]" */
int check_listen_spec(const char *spec, char *err, size_t errlen)
{
	char addr[300];
	int mode;
	if (listen_split(spec, addr, sizeof addr, &mode, err, errlen))
		return -EINVAL;
	return check_listen(addr, err, errlen);
}

static struct card_cfg *card_find(struct parse_ctx *x, const char *name)
{
	for (int i = 0; i < x->ncards; i++)
		if (!strcmp(x->cards[i].name, name))
			return &x->cards[i];
	return NULL;
}

/* An octal mode of at most 0777 (three or four octal digits). */
static int parse_mode(const char *v, int *out)
{
	size_t n = strlen(v);
	if (n < 3 || n > 4 || strspn(v, "01234567") != n)
		return -EINVAL;
	long m = strtol(v, NULL, 8);
	if (m > 0777)
		return -ERANGE;
	*out = (int)m;
	return 0;
}

/* A group name or a numeric gid that exists. */
static int parse_group(const char *v, long *gid, char *why, size_t len)
{
	struct group *g = getgrnam(v);
	uint64_t u;
	if (g) {
		*gid = (long)g->gr_gid;
		return 0;
	}
	if (!parse_uint(v, 0, UINT32_MAX - 1, &u)) {
		*gid = (long)u;
		return 0;
	}
	snprintf(why, len, "no such group");
	return -EINVAL;
}

/* A whole number of UNIT in [min, max]; on error, why says so. */
static int get_uint(const char *value, uint64_t min, uint64_t max, const char *unit, uint64_t *out,
		    char *why, size_t len)
{
	int rc = parse_uint(value, min, max, out);
	if (rc)
		snprintf(why, len, "%s: must be a whole number of %s from %llu to %llu",
			 rc == -ERANGE ? "out of range" : "not a number", unit, (unsigned long long)min,
			 (unsigned long long)max);
	return rc;
}

/* A path given in the configuration file at cfg_path: relative to that
 * file's directory (made absolute: flashd may change its directory). */
static char *path_from_file(const char *cfg_path, const char *value)
{
	if (value[0] == '/')
		return xstrdup(value);
	char *copy = xstrdup(cfg_path);
	char *slash = strrchr(copy, '/');
	const char *dir = ".";
	if (slash) {
		*slash = 0;
		dir = slash == copy ? "/" : copy;
	}
	char *real = realpath(dir, NULL);
	const char *base = real ? real : dir;
	size_t n = strlen(base) + strlen(value) + 2;
	char *p = xrealloc(NULL, n);
	snprintf(p, n, "%s%s%s", base, strcmp(base, "/") ? "/" : "", value);
	free(real);
	free(copy);
	return p;
}

/*
 * A health threshold key (reserves_warn, endurance_warn, temperature_warn)
 * of [server] or a [dimm] into lim: 1 if key is one, 0 if not, -1 with why
 * if its value is bad.  Percentages may carry a %.
 */
static int health_key(struct health_limits *lim, const char *key, const char *value, char *why,
		      size_t len)
{
	double f;
	size_t n = strlen(value);
	bool pct = n && value[n - 1] == '%';
	if (!strcmp(key, "reserves_warn") || !strcmp(key, "endurance_warn")) {
		bool res = key[0] == 'r';
		double max = res ? 100 : 1000;
		if (pct ? parse_percent(value, 0, max, &f) : parse_double(value, 0, max, &f)) {
			snprintf(why, len, "%s, from 0 to %.0f (a warning %s)",
				 res ? "percent of the reserves left" : "percent of the rated P/E cycles used",
				 max, res ? "below it" : "from it on");
			return -1;
		}
		*(res ? &lim->reserves_warn : &lim->endurance_warn) = f;
		lim->set |= res ? HL_RESERVES : HL_ENDURANCE;
		return 1;
	}
	if (!strcmp(key, "temperature_warn")) {
		if (parse_double(value, -40, 150, &f)) {
			snprintf(why, len, "degrees C, from -40 to 150 (a warning from it on; writes are "
				 "throttled at 78)");
			return -1;
		}
		lim->temperature_warn = f;
		lim->set |= HL_TEMPERATURE;
		return 1;
	}
	return 0;
}

/* ---- the key table: one row per key of [server] and [dimm NAME] ---------- */

/* What a key's parser works on: the section's object and where it is read. */
struct key_ctx {
	struct parse_ctx *x;
	struct server_cfg *cfg;
	struct dimm_cfg *d;  /* [dimm NAME]; NULL in [server] */
	const char *key;
};

enum key_type {
	KT_COUNT,   /* a whole number of text (the unit) from min to max, into an int */
	KT_SIZE,    /* a size (K, M, G, T) from min to max, into a uint64_t */
	KT_BOOL,    /* yes/no, on/off, ... into an int (a bool with KF_BOOL) */
	KT_STRING,  /* a copy, into a char * */
	KT_TLS,     /* off, allowed or required (enum tls_mode), into an int */
	KT_MODE,    /* an octal mode up to 0777, into an int */
	KT_GROUP,   /* a group name or gid that exists, into a long */
	KT_CUSTOM,  /* parse checks and stores it */
};

#define KF_REPEAT 1u    /* may be given more than once in its section */
#define KF_UNSET 2u     /* the command line wins: kept if set (an int >= 0, a string) */
#define KF_ZERO 4u      /* the command line wins: an int kept unless 0 */
#define KF_BOOL 8u      /* KT_BOOL into a bool */
#define KF_NONEMPTY 16u /* KT_STRING: an empty value is refused, text says why */

struct cfg_key {
	char section;      /* 's': [server], 'd': [dimm NAME] */
	const char *name;
	enum key_type type;
	unsigned flags;
	size_t off;        /* in struct server_cfg or struct dimm_cfg */
	uint64_t min, max; /* KT_COUNT, KT_SIZE */
	/* KT_COUNT: the unit; KT_BOOL, KT_TLS: the values taken; KT_STRING,
	 * KT_SIZE: why the value is refused */
	const char *text;
	const char *note;  /* KT_COUNT: follows the range error */
	/* KT_CUSTOM: 0, or -1 with why (the part after "KEY = 'VALUE': ") */
	int (*parse)(struct key_ctx *k, const char *value, char *why, size_t len);
	/* has_dflt: dflt is the value when neither the file nor the command
	 * line set one, i.e. while the int or size is below min (ints: -1, or
	 * 0 where min is 1; sizes: 0); config_key_defaults sets it */
	bool has_dflt;
	long long dflt;
};

/* printf into why; -1, a parser's refusal */
static int __attribute__((format(printf, 3, 4))) refuse(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -1;
}

static int parse_health(struct key_ctx *k, const char *value, char *why, size_t len)
{
	return health_key(k->d ? &k->d->health : &k->cfg->health, k->key, value, why, len) < 0 ? -1 : 0;
}

/* ---- [server] keys that are more than a type ---- */

static int parse_listen(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct server_cfg *cfg = k->cfg;
	if (check_listen_spec(value, why, len))
		return -1;
	cfg->listen = xrealloc(cfg->listen, (size_t)(cfg->nlisten + 1) * sizeof *cfg->listen);
	cfg->listen[cfg->nlisten++] = xstrdup(value);
	return 0;
}

static int parse_default_export(struct key_ctx *k, const char *value, char *why, size_t len)
{
	if (!value[0])
		return refuse(why, len, "the export name is empty (leave the key out for no default export)");
	/* that it names an export is checked once every [dimm] is known */
	free(k->cfg->default_export);
	k->cfg->default_export = xstrdup(value);
	k->cfg->default_export_line = k->x->lineno;
	return 0;
}

static int parse_log(struct key_ctx *k, const char *value, char *why, size_t len)
{
	if (!strcmp(value, "syslog"))
		k->cfg->use_syslog = true;
	else if (strcmp(value, "stderr") != 0)
		return refuse(why, len, "log must be stderr or syslog");
	return 0;
}

static int parse_verbose(struct key_ctx *k, const char *value, char *why, size_t len)
{
	bool b;
	if (parse_bool(value, &b))
		return refuse(why, len, "verbose must be yes or no");
	if (b && !k->cfg->verbose)
		k->cfg->verbose = 1;
	return 0;
}

/* tls_certificates, tls_psk: relative to the file; the command line wins */
static int parse_tls_path(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct server_cfg *cfg = k->cfg;
	if (!value[0])
		return refuse(why, len, "the path is empty");
	bool certs = !strcmp(k->key, "tls_certificates");
	char **path = certs ? &cfg->tls_certificates : &cfg->tls_psk;
	char **where = certs ? &cfg->tls_certificates_where : &cfg->tls_psk_where;
	if (!*path) {
		char w[1200];
		snprintf(w, sizeof w, "%s:%d: [server] %s = '%s'", k->x->path, k->x->lineno, k->key, value);
		*path = path_from_file(k->x->path, value);
		*where = xstrdup(w);
	}
	return 0;
}

static int parse_metrics_listen(struct key_ctx *k, const char *value, char *why, size_t len)
{
	/* an explicit host: [::]:PORT for every address */
	if (!value[0] || value[0] == ':' || strchr(value, ' '))
		return refuse(why, len, "HOST:PORT (IPv6: [ADDR]:PORT; [::]:PORT for every address)");
	if (check_listen(value, why, len))
		return -1;
	free(k->cfg->metrics_listen);
	k->cfg->metrics_listen = xstrdup(value);
	return 0;
}

static int parse_metrics_allow(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct acl add = { 0 };
	if (acl_parse(&add, value, false, why, len)) {
		acl_free(&add);
		return -1;
	}
	for (int i = 0; i < add.n; i++) {
		if (add.e[i].kind != ACL_ALL && add.e[i].kind != ACL_NET4 && add.e[i].kind != ACL_NET6) {
			char ent[640];
			acl_entry_format(&add.e[i], ent, sizeof ent);
			acl_free(&add);
			return refuse(why, len, "'%s': the metrics listener takes addresses, networks and "
				      "all (it has no TLS and no unix socket)", ent);
		}
	}
	acl_free(&add);
	return acl_parse(&k->cfg->metrics_allow, value, false, why, len) ? -1 : 0;
}

static int parse_metrics_host_names(struct key_ctx *k, const char *value, char *why, size_t len)
{
	for (const char *p = value; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr(".- ", *p))
			return refuse(why, len, "host names (letters, digits, '.' and '-'), separated by spaces");
	free(k->cfg->metrics_host_names);
	k->cfg->metrics_host_names = xstrdup(value);
	return 0;
}

/* ---- [dimm NAME] keys that are more than a type ---- */

static bool is_mtd(const struct dimm_cfg *d)
{
	return d->backend && !strcmp(d->backend, "mtd");
}

static int parse_backend(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct dimm_cfg *d = k->d;
	bool mtd = !strcmp(value, "mtd");
	if (!mtd && strcmp(value, "sim") != 0)
		return refuse(why, len, "backend must be sim (the simulated ioDimm) or mtd (raw NAND "
			      "through /dev/mtdN)");
	if (mtd && d->image && !d->device_set)
		return refuse(why, len, "backend = mtd takes device = /dev/mtdN, not image");
	if (mtd && d->preset)
		return refuse(why, len, "backend = mtd takes no preset (the device says what it is)");
	if (!mtd && d->device_set)
		return refuse(why, len, "device is for backend = mtd; the simulator's file is image");
	free(d->backend);
	d->backend = xstrdup(value);
	return 0;
}

static int parse_preset(struct key_ctx *k, const char *value, char *why, size_t len)
{
	if (is_mtd(k->d))
		return refuse(why, len, "backend = mtd takes no preset (the device says what it is)");
	free(k->d->preset);
	k->d->preset = xstrdup(value);
	if (!nand_preset_description(value))
		return refuse(why, len, "unknown preset (see 'flashctl presets')");
	return 0;
}

static int parse_image(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct dimm_cfg *d = k->d;
	if (!value[0])
		return refuse(why, len, "the image path is empty");
	if (d->device_set)
		return refuse(why, len, "give image (backend = sim) or device (backend = mtd), not both");
	if (is_mtd(d))
		return refuse(why, len, "backend = mtd takes device = /dev/mtdN, not image");
	free(d->image);
	d->image = xstrdup(value);
	return 0;
}

static int parse_device(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct dimm_cfg *d = k->d;
	if (value[0] != '/')
		return refuse(why, len, "device must be the absolute path of an MTD character device "
			      "(/dev/mtdN)");
	if (d->image && !d->device_set)
		return refuse(why, len, "give image (backend = sim) or device (backend = mtd), not both");
	if (d->backend && strcmp(d->backend, "mtd") != 0)
		return refuse(why, len, "device is for backend = mtd; the simulator's file is image");
	free(d->image);
	d->image = xstrdup(value);
	d->device_set = true;
	return 0;
}

static int parse_sector_size(struct key_ctx *k, const char *value, char *why, size_t len)
{
	uint64_t u;
	if (parse_byte_size(value, 0, UINT32_MAX, &u) || (u != 512 && u != 4096))
		return refuse(why, len, "sector_size must be 512 or 4096");
	k->d->sector_size = (uint32_t)u;
	k->d->sector_size_set = true;
	return 0;
}

static int parse_capacity(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct dimm_cfg *d = k->d;
	size_t n = strlen(value);
	double f;
	uint64_t u;
	if (d->op_percent > 0)
		return refuse(why, len, "give capacity or op, not both");
	if (n && value[n - 1] == '%') {
		int rc = parse_percent(value, 0, 100, &f);
		if (rc == -EINVAL)
			return refuse(why, len, "not a percentage (a number, then %%: e.g. 80%%)");
		if (rc || f <= 0)
			return refuse(why, len, "a percentage of the stock capacity must be more than 0%% "
				      "and at most 100%% (for less over-provisioning than stock, use op = "
				      "%.0f to %.0f)", FTL_MIN_OP_PERCENT, FTL_STOCK_OP_PERCENT);
		d->capacity_pct = f;
		d->capacity_set = true;
		return 0;
	}
	int rc = parse_byte_size(value, 0, UINT64_MAX, &u);
	if (rc == -ERANGE)
		return refuse(why, len, "too large");
	if (rc)
		return refuse(why, len, "not a capacity: give a whole number of bytes with an optional K, "
			      "M, G or T suffix (512M, 1.5G), or a share of the stock capacity (80%%)");
	if (u < MIN_CAPACITY) {
		if (strspn(value, "0123456789") == n && u <= 100)
			return refuse(why, len, "%llu bytes is less than the minimum, 1M; did you mean %s%%?",
				      (unsigned long long)u, value);
		return refuse(why, len, "%llu bytes is less than the minimum, 1M", (unsigned long long)u);
	}
	d->capacity = u;
	d->capacity_set = true;
	return 0;
}

static int parse_op(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct dimm_cfg *d = k->d;
	size_t n = strlen(value);
	double f;
	if (d->capacity || d->capacity_pct > 0)
		return refuse(why, len, "give capacity or op, not both");
	int rc = n && value[n - 1] == '%' ?
			 parse_percent(value, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT, &f) :
			 parse_double(value, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT, &f);
	if (rc == -ERANGE)
		return refuse(why, len, "out of range: over-provisioning is %.0f to %.0f (percent of the "
			      "raw NAND)", FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT);
	if (rc)
		return refuse(why, len, "not a number: over-provisioning in percent of the raw NAND, %.0f "
			      "to %.0f (e.g. op = 20)", FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT);
	d->op_percent = f;
	d->capacity_set = true;
	return 0;
}

static int parse_parity_width(struct key_ctx *k, const char *value, char *why, size_t len)
{
	uint64_t u;
	if (parse_byte_size(value, 0, 1, &u))
		return refuse(why, len, "parity_width must be 0 (no parity) or 1 (Flashback: one parity "
			      "die per band stripe)");
	k->d->parity_width = (uint32_t)u;
	k->d->parity_set = true;
	return 0;
}

static int parse_flush_parity(struct key_ctx *k, const char *value, char *why, size_t len)
{
	bool b;
	if (parse_bool(value, &b))
		return refuse(why, len, "flush_parity must be on or off");
	k->d->no_flush_parity = !b;
	return 0;
}

static int parse_checkpoint_interval(struct key_ctx *k, const char *value, char *why, size_t len)
{
	uint64_t u;
	if (!strcmp(value, "auto"))
		u = 0;
	else if (parse_byte_size(value, 64ull << 20, 1ull << 40, &u))
		return refuse(why, len, "checkpoint_interval must be auto or a size from 64M to 1T (log "
			      "written between checkpoints, e.g. 16G)");
	k->d->cp_interval = u;
	return 0;
}

/* allow, allow_ro: appended to the ioDimm's rules */
static int parse_allow(struct key_ctx *k, const char *value, char *why, size_t len)
{
	struct dimm_cfg *d = k->d;
	int before = d->acl.n;
	if (acl_parse(&d->acl, value, k->key[5] == '_', why, len))
		return -1;
	struct acl added = { d->acl.e + before, d->acl.n - before };
	if (!d->acl_cert_line && acl_has_cert_rules(&added))
		d->acl_cert_line = k->x->lineno;
	if (!d->acl_psk_line && acl_has_psk_rules(&added))
		d->acl_psk_line = k->x->lineno;
	if (!d->acl_tls_line && acl_has_tls_rules(&added))
		d->acl_tls_line = k->x->lineno;
	return 0;
}

#define SRV(f) offsetof(struct server_cfg, f)
#define DIM(f) offsetof(struct dimm_cfg, f)
#define ROW(sect, nm, ty, fl, field, ...) \
	{ .section = sect, .name = nm, .type = ty, .flags = fl, .off = field, __VA_ARGS__ }
#define COUNT(sect, nm, fl, field, lo, hi, unit, nt, ...) \
	ROW(sect, nm, KT_COUNT, fl, field, .min = lo, .max = hi, .text = unit, .note = nt, __VA_ARGS__)
#define CUSTOM(sect, nm, fl, fn) ROW(sect, nm, KT_CUSTOM, fl, 0, .parse = fn)
#define DEFAULT(v) .has_dflt = true, .dflt = (v)
#define CONN MAX_CONNECTIONS_LIMIT

/* One row per key, each starting its own line with ROW, COUNT or CUSTOM:
 * tests/test-install.sh reads the names there to check that flashd.conf(5)
 * documents every key. */
static const struct cfg_key cfg_keys[] = {
	CUSTOM('s', "listen", KF_REPEAT, parse_listen),
	ROW('s', "unix", KT_STRING, KF_UNSET, SRV(unix_path)),
	ROW('s', "control", KT_STRING, KF_UNSET | KF_NONEMPTY, SRV(control_path),
	    .text = "the control socket path is empty"),
	ROW('s', "state_dir", KT_STRING, KF_UNSET, SRV(state_dir)),
	ROW('s', "pidfile", KT_STRING, KF_UNSET, SRV(pidfile)),
	CUSTOM('s', "default_export", 0, parse_default_export),
	COUNT('s', "max_connections", 0, SRV(max_connections), 1, CONN, "connections", NULL,
	      DEFAULT(1024)),
	COUNT('s', "max_connections_per_address", 0, SRV(max_conn_per_addr), 0, CONN, "connections",
	      "(0: no cap per address)", DEFAULT(DEFAULT_CONN_PER_ADDR)),
	COUNT('s', "max_handshakes", 0, SRV(max_handshakes), 1, CONN, "connections", NULL),
	COUNT('s', "max_handshakes_per_address", 0, SRV(max_hs_per_addr), 0, CONN, "connections",
	      "(0: no cap per address)", DEFAULT(DEFAULT_HANDSHAKES_PER_ADDR)),
	COUNT('s', "idle_timeout", 0, SRV(idle_timeout), 0, IDLE_TIMEOUT_LIMIT, "seconds", "(0: off)"),
	COUNT('s', "idle_timeout_busy", 0, SRV(idle_timeout_busy), 0, IDLE_TIMEOUT_LIMIT, "seconds",
	      "(0: off)", DEFAULT(DEFAULT_IDLE_TIMEOUT_BUSY)),
	ROW('s', "buffer_limit", KT_SIZE, 0, SRV(buffer_limit), .min = BUFFER_LIMIT_MIN, .max = 1ull << 40,
	    .text = "must be a size from 64M to 1T (e.g. 1G)", DEFAULT(DEFAULT_BUFFER_LIMIT)),
	COUNT('s', "handshake_timeout", 0, SRV(handshake_timeout), 1, HANDSHAKE_TIMEOUT_LIMIT, "seconds",
	      NULL, DEFAULT(10)),
	COUNT('s', "poll_us", KF_UNSET, SRV(poll_us), 0, POLL_US_LIMIT, "microseconds", NULL,
	      DEFAULT(50)),
	COUNT('s', "shutdown_timeout", KF_ZERO, SRV(shutdown_timeout), 1, 3600, "seconds", NULL,
	      DEFAULT(10)),
	ROW('s', "timing", KT_BOOL, KF_UNSET, SRV(timing), .text = "on or off", DEFAULT(1)),
	ROW('s', "fault_injection", KT_BOOL, 0, SRV(fault_injection), .text = "yes or no"),
	CUSTOM('s', "log", 0, parse_log),
	CUSTOM('s', "verbose", 0, parse_verbose),
	ROW('s', "allow_degraded", KT_BOOL, KF_UNSET, SRV(allow_degraded), .text = "yes or no",
	    DEFAULT(0)),
	ROW('s', "tls", KT_TLS, KF_UNSET, SRV(tls), .text = "off, allowed or required",
	    DEFAULT(TLS_OFF)),
	ROW('s', "unix_tls", KT_TLS, KF_UNSET, SRV(unix_tls), .text = "off, allowed or required"),
	CUSTOM('s', "tls_certificates", 0, parse_tls_path),
	CUSTOM('s', "tls_psk", 0, parse_tls_path),
	ROW('s', "tls_verify_peer", KT_BOOL, KF_UNSET, SRV(tls_verify_peer), .text = "yes or no",
	    DEFAULT(0)),
	ROW('s', "unix_mode", KT_MODE, 0, SRV(unix_mode), DEFAULT(0660)),
	ROW('s', "control_mode", KT_MODE, 0, SRV(control_mode), DEFAULT(0660)),
	ROW('s', "umask", KT_MODE, 0, SRV(umask), DEFAULT(077)),
	ROW('s', "unix_group", KT_GROUP, 0, SRV(unix_gid)),
	ROW('s', "control_group", KT_GROUP, 0, SRV(control_gid)),
	CUSTOM('s', "reserves_warn", 0, parse_health),
	CUSTOM('s', "endurance_warn", 0, parse_health),
	CUSTOM('s', "temperature_warn", 0, parse_health),
	CUSTOM('s', "metrics_listen", 0, parse_metrics_listen),
	CUSTOM('s', "metrics_allow", KF_REPEAT, parse_metrics_allow),
	CUSTOM('s', "metrics_host_names", 0, parse_metrics_host_names),

	ROW('d', "card", KT_STRING, 0, DIM(card)),
	CUSTOM('d', "backend", 0, parse_backend),
	CUSTOM('d', "preset", 0, parse_preset),
	CUSTOM('d', "image", 0, parse_image),
	CUSTOM('d', "device", 0, parse_device),
	ROW('d', "export", KT_STRING, KF_NONEMPTY, DIM(export_name),
	    .text = "the export name is empty (leave the key out to use the section name)"),
	ROW('d', "description", KT_STRING, 0, DIM(description)),
	ROW('d', "readonly", KT_BOOL, KF_BOOL, DIM(readonly), .text = "yes or no"),
	CUSTOM('d', "sector_size", 0, parse_sector_size),
	CUSTOM('d', "capacity", 0, parse_capacity),
	CUSTOM('d', "op", 0, parse_op),
	CUSTOM('d', "parity_width", 0, parse_parity_width),
	ROW('d', "timing", KT_BOOL, 0, DIM(timing), .text = "on or off"),
	ROW('d', "sync", KT_BOOL, 0, DIM(sync), .text = "on or off", DEFAULT(1)),
	CUSTOM('d', "flush_parity", 0, parse_flush_parity),
	CUSTOM('d', "checkpoint_interval", 0, parse_checkpoint_interval),
	ROW('d', "tls", KT_TLS, 0, DIM(tls),
	    .text = "off (plaintext sessions only), allowed (both) or required (TLS sessions only)"),
	CUSTOM('d', "allow", KF_REPEAT, parse_allow),
	CUSTOM('d', "allow_ro", KF_REPEAT, parse_allow),
	ROW('d', "list_denied", KT_BOOL, KF_BOOL, DIM(list_denied), .text = "yes or no"),
	CUSTOM('d', "reserves_warn", 0, parse_health),
	CUSTOM('d', "endurance_warn", 0, parse_health),
	CUSTOM('d', "temperature_warn", 0, parse_health),
};

#undef SRV
#undef DIM
#undef ROW
#undef COUNT
#undef CUSTOM
#undef DEFAULT
#undef CONN

/* The row of key in section ('s' or 'd'; 0: any section), or NULL. */
static const struct cfg_key *key_find(char section, const char *key)
{
	for (size_t i = 0; i < sizeof cfg_keys / sizeof cfg_keys[0]; i++)
		if ((!section || cfg_keys[i].section == section) && !strcmp(cfg_keys[i].name, key))
			return &cfg_keys[i];
	return NULL;
}

/* An int key's value, unless the command line set it (KF_UNSET, KF_ZERO). */
static void store_int(const struct cfg_key *r, int *slot, int v)
{
	if (((r->flags & KF_UNSET) && *slot >= 0) || ((r->flags & KF_ZERO) && *slot))
		return;
	*slot = v;
}

/* value of row r into the section's object: 0, or -1 with why. */
static int key_apply(const struct cfg_key *r, struct key_ctx *k, const char *value, char *why,
		     size_t len)
{
	char *slot = (k->d ? (char *)k->d : (char *)k->cfg) + r->off;
	uint64_t u;
	bool b;
	int m;
	switch (r->type) {
	case KT_COUNT:
		if (get_uint(value, r->min, r->max, r->text, &u, why, len)) {
			size_t n = strlen(why);
			if (r->note)
				snprintf(why + n, len - n, " %s", r->note);
			return -1;
		}
		store_int(r, (int *)slot, (int)u);
		return 0;
	case KT_SIZE:
		if (parse_byte_size(value, r->min, r->max, &u))
			return refuse(why, len, "%s", r->text);
		*(uint64_t *)slot = u;
		return 0;
	case KT_BOOL:
		if (parse_bool(value, &b))
			return refuse(why, len, "%s must be %s", r->name, r->text);
		if (r->flags & KF_BOOL)
			*(bool *)slot = b;
		else
			store_int(r, (int *)slot, b);
		return 0;
	case KT_STRING:
		if ((r->flags & KF_NONEMPTY) && !value[0])
			return refuse(why, len, "%s", r->text);
		if (!(r->flags & KF_UNSET) || !*(char **)slot) {
			free(*(char **)slot);
			*(char **)slot = xstrdup(value);
		}
		return 0;
	case KT_TLS:
		if ((m = tls_mode_parse(value)) < 0)
			return refuse(why, len, "%s must be %s", r->name, r->text);
		store_int(r, (int *)slot, m);
		return 0;
	case KT_MODE:
		if (parse_mode(value, &m))
			return refuse(why, len, "%s must be an octal mode from 000 to 0777 (e.g. 0660)",
				      r->name);
		*(int *)slot = m;
		return 0;
	case KT_GROUP:
		return parse_group(value, (long *)slot, why, len) ? -1 : 0;
	case KT_CUSTOM:
		return r->parse(k, value, why, len);
	}
	return refuse(why, len, "internal error: bad key type");
}

/* A [card NAME] key: timing (its ioDimms' default), model, description. */
static int card_key(struct parse_ctx *x, const char *card_name, const char *key, const char *value,
		    char *why, size_t len)
{
	struct card_cfg *c = card_find(x, card_name);
	bool b;
	if (!c)
		return refuse(why, len, "internal error: card not registered");
	if (!strcmp(key, "timing")) {
		if (parse_bool(value, &b))
			return refuse(why, len, "timing must be on or off");
		c->timing = b;
	} else if (strcmp(key, "model") != 0 && strcmp(key, "description") != 0) {
		return refuse(why, len, "unknown key in a [card] section");
	}
	return 0;
}


int config_key(struct parse_ctx *x, const char *card, struct dimm_cfg *d, const char *key,
	       const char *value, char *why, size_t len)
{
	if (card)
		return card_key(x, card, key, value, why, len);
	struct key_ctx k = { x, x->cfg, d, key };
	const struct cfg_key *r = key_find(d ? 'd' : 's', key);
	if (!r)
		return refuse(why, len, d ? "unknown key in a [dimm] section" : "unknown key in [server]");
	return key_apply(r, &k, value, why, len);
}

bool config_key_repeatable(const char *key)
{
	const struct cfg_key *r = key_find(0, key);
	return r && (r->flags & KF_REPEAT);
}

void config_key_defaults(struct server_cfg *cfg, struct dimm_cfg *d)
{
	char *base = d ? (char *)d : (char *)cfg;
	for (size_t i = 0; i < sizeof cfg_keys / sizeof cfg_keys[0]; i++) {
		const struct cfg_key *r = &cfg_keys[i];
		if (!r->has_dflt || r->section != (d ? 'd' : 's'))
			continue;
		if (r->type == KT_SIZE) {
			uint64_t *v = (uint64_t *)(base + r->off);
			if (*v < r->min)
				*v = (uint64_t)r->dflt;
		} else {
			int *v = (int *)(base + r->off);
			if (*v < (long long)r->min)
				*v = (int)r->dflt;
		}
	}
}
