/*
 * server/config.c - flashd.conf (INI, parsed with inih) and the embedded
 * default: a simulated ioDrive Duo, two ioDimms exported as dimm0 and dimm1.
 *
 *   [server]   listen (repeatable), unix, control, state_dir, pidfile,
 *              max_connections, handshake_timeout, poll_us, timing, log, verbose
 *   [card NAME]  model, timing (default for its ioDimms)
 *   [dimm NAME]  card, preset, image, export, description, readonly,
 *              sector_size, capacity (BYTES or PCT% of stock), op, timing, sync
 * See conf/flashd.conf for the documented example.
 */
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/flashd.h"

struct card_cfg {
	char *name;
	int timing;
};

struct parse_ctx {
	struct server_cfg *cfg;
	struct card_cfg cards[16];
	int ncards;
	char err[512];
};

static char *xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");
	if (!p) {
		fprintf(stderr, "flashd: out of memory\n");
		exit(1);
	}
	return p;
}

uint64_t parse_bytes(const char *s, bool *ok)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	*ok = false;
	if (end == s || v < 0 || errno)
		return 0;
	uint64_t m = 1;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': m = 1ull << 10; end++; break;
	case 'm': case 'M': m = 1ull << 20; end++; break;
	case 'g': case 'G': m = 1ull << 30; end++; break;
	case 't': case 'T': m = 1ull << 40; end++; break;
	default: return 0;
	}
	if (*end && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
		return 0;
	*ok = true;
	return (uint64_t)(v * (double)m);
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

static struct dimm_cfg *dimm_add(struct server_cfg *cfg, const char *name)
{
	for (int i = 0; i < cfg->ndimms; i++)
		if (!strcmp(cfg->dimms[i].name, name))
			return &cfg->dimms[i];
	struct dimm_cfg *d = realloc(cfg->dimms, (size_t)(cfg->ndimms + 1) * sizeof *d);
	if (!d)
		return NULL;
	cfg->dimms = d;
	d = &cfg->dimms[cfg->ndimms++];
	memset(d, 0, sizeof *d);
	d->name = xstrdup(name);
	d->sector_size = 512;
	d->timing = -1;
	d->sync = -1;
	return d;
}

static int handler(void *user, const char *section, const char *key, const char *value)
{
	struct parse_ctx *x = user;
	struct server_cfg *cfg = x->cfg;
	bool b;

#define BAD(...)                                                                 \
	do {                                                                     \
		int n_ = snprintf(x->err, sizeof x->err, "[%s] %s: ", section, key); \
		snprintf(x->err + n_, sizeof x->err - (size_t)n_, __VA_ARGS__); \
		return 0;                                                        \
	} while (0)

	if (!strcmp(section, "server")) {
		if (!strcmp(key, "listen")) {
			char **l = realloc(cfg->listen, (size_t)(cfg->nlisten + 1) * sizeof *l);
			if (!l)
				BAD("out of memory");
			cfg->listen = l;
			cfg->listen[cfg->nlisten++] = xstrdup(value);
		} else if (!strcmp(key, "unix")) {
			free(cfg->unix_path);
			cfg->unix_path = xstrdup(value);
		} else if (!strcmp(key, "control")) {
			free(cfg->control_path);
			cfg->control_path = xstrdup(value);
		} else if (!strcmp(key, "state_dir")) {
			if (!cfg->state_dir)
				cfg->state_dir = xstrdup(value);
		} else if (!strcmp(key, "pidfile")) {
			if (!cfg->pidfile)
				cfg->pidfile = xstrdup(value);
		} else if (!strcmp(key, "max_connections")) {
			cfg->max_connections = atoi(value);
			if (cfg->max_connections < 1)
				BAD("max_connections must be at least 1");
		} else if (!strcmp(key, "handshake_timeout")) {
			cfg->handshake_timeout = atoi(value);
			if (cfg->handshake_timeout < 1)
				BAD("handshake_timeout must be at least 1 (seconds)");
		} else if (!strcmp(key, "poll_us")) {
			char *end;
			long v = strtol(value, &end, 10);
			if (*end || v < 0 || v > 10000)
				BAD("poll_us must be 0 to 10000 (microseconds)");
			if (cfg->poll_us < 0)
				cfg->poll_us = (int)v;
		} else if (!strcmp(key, "timing")) {
			if (parse_bool(value, &b))
				BAD("timing must be on or off");
			if (cfg->timing < 0)
				cfg->timing = b;
		} else if (!strcmp(key, "log")) {
			if (!strcmp(value, "syslog"))
				cfg->use_syslog = true;
			else if (strcmp(value, "stderr") != 0)
				BAD("log must be stderr or syslog");
		} else if (!strcmp(key, "verbose")) {
			if (parse_bool(value, &b))
				BAD("verbose must be yes or no");
			if (b && !cfg->verbose)
				cfg->verbose = 1;
		} else {
			BAD("unknown key '%s' in [server]", key);
		}
		return 1;
	}
	if (!strncmp(section, "card ", 5)) {
		const char *name = section + 5;
		struct card_cfg *c = NULL;
		for (int i = 0; i < x->ncards; i++)
			if (!strcmp(x->cards[i].name, name))
				c = &x->cards[i];
		if (!c) {
			if (x->ncards == 16)
				BAD("too many cards");
			c = &x->cards[x->ncards++];
			c->name = xstrdup(name);
			c->timing = -1;
		}
		if (!strcmp(key, "timing")) {
			if (parse_bool(value, &b))
				BAD("timing must be on or off");
			c->timing = b;
		} else if (strcmp(key, "model") != 0 && strcmp(key, "description") != 0) {
			BAD("unknown key '%s' in [%s]", key, section);
		}
		return 1;
	}
	if (!strncmp(section, "dimm ", 5)) {
		struct dimm_cfg *d = dimm_add(cfg, section + 5);
		if (!d)
			BAD("out of memory");
		if (!strcmp(key, "card")) {
			free(d->card);
			d->card = xstrdup(value);
		} else if (!strcmp(key, "preset")) {
			free(d->preset);
			d->preset = xstrdup(value);
			if (!nand_preset_find(value))
				BAD("unknown preset '%s' (see 'flashctl presets')", value);
		} else if (!strcmp(key, "image")) {
			free(d->image);
			d->image = xstrdup(value);
		} else if (!strcmp(key, "export")) {
			free(d->export_name);
			d->export_name = xstrdup(value);
		} else if (!strcmp(key, "description")) {
			free(d->description);
			d->description = xstrdup(value);
		} else if (!strcmp(key, "readonly")) {
			if (parse_bool(value, &d->readonly))
				BAD("readonly must be yes or no");
		} else if (!strcmp(key, "sector_size")) {
			d->sector_size = (uint32_t)atoi(value);
			if (d->sector_size != 512 && d->sector_size != 4096)
				BAD("sector_size must be 512 or 4096");
		} else if (!strcmp(key, "capacity")) {
			size_t n = strlen(value);
			if (n && value[n - 1] == '%') {
				d->capacity_pct = atof(value);
				if (d->capacity_pct <= 0)
					BAD("bad capacity '%s'", value);
			} else {
				bool ok;
				d->capacity = parse_bytes(value, &ok);
				if (!ok || !d->capacity)
					BAD("bad capacity '%s' (bytes with K/M/G/T, or PCT%%)", value);
			}
		} else if (!strcmp(key, "op")) {
			d->op_percent = atof(value);
			if (d->op_percent < FTL_MIN_OP_PERCENT || d->op_percent > FTL_MAX_OP_PERCENT)
				BAD("op must be %.0f to %.0f (percent of raw NAND)", FTL_MIN_OP_PERCENT,
				    FTL_MAX_OP_PERCENT);
		} else if (!strcmp(key, "timing")) {
			if (parse_bool(value, &b))
				BAD("timing must be on or off");
			d->timing = b;
		} else if (!strcmp(key, "sync")) {
			if (parse_bool(value, &b))
				BAD("sync must be on or off");
			d->sync = b;
		} else {
			BAD("unknown key '%s' in [%s]", key, section);
		}
		return 1;
	}
	BAD("unknown section [%s]", section);
#undef BAD
}

int config_load(struct server_cfg *cfg, const char *path, char *err, size_t errlen)
{
	struct parse_ctx x = { .cfg = cfg };
	FILE *fp = fopen(path, "r");
	if (!fp) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -errno;
	}
	int rc = ini_parse_file(fp, handler, &x);
	fclose(fp);
	if (rc != 0) {
		if (x.err[0])
			snprintf(err, errlen, "%s: %s", path, x.err);
		else
			snprintf(err, errlen, "%s: syntax error on line %d", path, rc);
		return -EINVAL;
	}
	/* card defaults flow into their ioDimms */
	for (int i = 0; i < cfg->ndimms; i++) {
		struct dimm_cfg *d = &cfg->dimms[i];
		for (int c = 0; c < x.ncards; c++)
			if (d->card && !strcmp(d->card, x.cards[c].name) && d->timing < 0)
				d->timing = x.cards[c].timing;
	}
	for (int c = 0; c < x.ncards; c++)
		free(x.cards[c].name);
	cfg->config_file = xstrdup(path);
	return 0;
}

void config_default_duo(struct server_cfg *cfg)
{
	const char *preset = cfg->default_preset ? cfg->default_preset : "iodimm-mlc-320";
	for (int i = 0; i < 2; i++) {
		char name[16];
		snprintf(name, sizeof name, "dimm%d", i);
		struct dimm_cfg *d = dimm_add(cfg, name);
		d->card = xstrdup("duo0");
		d->preset = xstrdup(preset);
	}
}

static char *join_path(const char *dir, const char *file)
{
	if (file[0] == '/')
		return xstrdup(file);
	size_t n = strlen(dir) + strlen(file) + 2;
	char *p = malloc(n);
	if (!p)
		return NULL;
	snprintf(p, n, "%s/%s", dir, file);
	return p;
}

/* Defaults and cross-checks after the config file and the command line. */
int config_finish(struct server_cfg *cfg, char *err, size_t errlen)
{
	if (!cfg->ndimms)
		config_default_duo(cfg);
	if (!cfg->nlisten && !cfg->unix_path) {
		cfg->listen = calloc(1, sizeof *cfg->listen);
		cfg->listen[0] = xstrdup("127.0.0.1:10809");
		cfg->nlisten = 1;
	}
	if (!cfg->control_path)
		cfg->control_path = join_path(cfg->state_dir, "flashd.ctl");
	if (!cfg->max_connections)
		cfg->max_connections = 1024;
	if (!cfg->handshake_timeout)
		cfg->handshake_timeout = 10;
	if (cfg->timing < 0)
		cfg->timing = 1;
	if (cfg->poll_us < 0)
		cfg->poll_us = 50;
	for (int i = 0; i < cfg->ndimms; i++) {
		struct dimm_cfg *d = &cfg->dimms[i];
		if (!d->preset)
			d->preset = xstrdup(cfg->default_preset ? cfg->default_preset : "iodimm-mlc-320");
		if (!d->export_name)
			d->export_name = xstrdup(d->name);
		if (!d->image) {
			char f[300];
			snprintf(f, sizeof f, "%s.img", d->name);
			d->image = join_path(cfg->state_dir, f);
		} else if (d->image[0] != '/') {
			char *p = join_path(cfg->state_dir, d->image);
			free(d->image);
			d->image = p;
		}
		if (d->timing < 0)
			d->timing = cfg->timing;
		if (d->sync < 0)
			d->sync = 1;
		if (strlen(d->export_name) > 4096) {
			snprintf(err, errlen, "export name of [dimm %s] is longer than 4096 bytes", d->name);
			return -EINVAL;
		}
		for (int j = 0; j < i; j++) {
			if (!strcmp(cfg->dimms[j].export_name, d->export_name)) {
				snprintf(err, errlen, "export name '%s' is used twice", d->export_name);
				return -EINVAL;
			}
			if (!strcmp(cfg->dimms[j].image, d->image)) {
				snprintf(err, errlen, "image %s is used by two ioDimms", d->image);
				return -EINVAL;
			}
		}
	}
	return 0;
}

void config_free(struct server_cfg *cfg)
{
	for (int i = 0; i < cfg->nlisten; i++)
		free(cfg->listen[i]);
	free(cfg->listen);
	for (int i = 0; i < cfg->ndimms; i++) {
		struct dimm_cfg *d = &cfg->dimms[i];
		free(d->name);
		free(d->card);
		free(d->export_name);
		free(d->description);
		free(d->preset);
		free(d->image);
	}
	free(cfg->dimms);
	free(cfg->unix_path);
	free(cfg->control_path);
	free(cfg->state_dir);
	free(cfg->pidfile);
	free(cfg->default_preset);
	free(cfg->config_file);
	memset(cfg, 0, sizeof *cfg);
}
