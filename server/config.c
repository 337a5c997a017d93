/*
 * server/config.c - flashd.conf (INI, parsed with inih) and the embedded
 * default: a simulated ioDrive Duo, two ioDimms exported as dimm0 and dimm1.
 *
 *   [server]   listen (repeatable), unix, control, state_dir, pidfile,
 *              default_export, max_connections, max_connections_per_address,
 *              max_handshakes, max_handshakes_per_address,
 *              handshake_timeout, idle_timeout, idle_timeout_busy,
 *              buffer_limit, shutdown_timeout, poll_us, timing,
 *              fault_injection, log, verbose, allow_degraded, tls, unix_tls,
 *              tls_certificates, tls_psk, tls_verify_peer, unix_mode,
 *              unix_group, control_mode, control_group, umask,
 *              reserves_warn, endurance_warn, temperature_warn (health
 *              thresholds), metrics_listen, metrics_allow (repeatable),
 *              metrics_host_names
 *              (listen = ADDR tls=MODE: that listener's TLS mode)
 *   [card NAME]  model, timing (default for its ioDimms)
 *   [dimm NAME]  card, backend, preset, image, device, export, description, readonly,
 *              sector_size, capacity (BYTES or PCT% of stock), op, parity_width,
 *              timing, sync,
 *              tls, allow and allow_ro (repeatable; common/acl.h), list_denied,
 *              reserves_warn, endurance_warn, temperature_warn (else [server]'s)
 * See conf/flashd.conf for the documented example; what each key's value
 * means and where it is stored: the table cfg_keys in server/config_keys.c.
 *
 * Strictness (every error names the file, line, section, key and value):
 *   - numbers go through common/parse.h: the whole value, finite, in range,
 *     units only where the key is a size;
 *   - a section may appear once, a key once per section (except listen,
 *     which is repeatable); a [dimm NAME] section defines that ioDimm even
 *     when it has no keys;
 *   - every listen address is checked here (config_finish also checks those
 *     from the command line), before any ioDimm is opened;
 *   - backend = sim (the default) takes preset and image, backend = mtd
 *     takes device (the MTD character device) and neither of those;
 *   - two ioDimms may not use the same image file (or device), however it
 *     is named.
 * The command line wins over the file for every key: config_build loads the file
 * into the configuration the command line made, and a key the command line
 * set is kept (listen: config_build keeps only the command line's addresses).
 * Relative paths: tls_certificates and tls_psk given in the file are taken
 * relative to the file's directory (as the file's author sees them), those
 * of the command line relative to the working directory; image paths are
 * relative to state_dir.
 * sector_size and capacity/op given in a [dimm] section are remembered
 * (sector_size_set, capacity_set): an existing image must then have that
 * format (server/dimm.c), as the configuration never reformats one.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "common/parse.h"
#include "hw/nand.h"
#include "server/config_int.h"

#define DEFAULT_HANDSHAKES 128          /* at most max_connections / 8 */
/* inih keeps at most this many characters of a section name (its
 * MAX_SECTION - 1) and cuts the rest silently: longer ones are refused. */
#define INI_SECTION_NAME_MAX 49

char *xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");
	if (!p) {
		fprintf(stderr, "flashd: out of memory\n");
		exit(1);
	}
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "flashd: out of memory\n");
		exit(1);
	}
	return p;
}

/* printf into err, if it is still empty (the first error wins). */
static void __attribute__((format(printf, 2, 3))) set_err(struct parse_ctx *x, const char *fmt, ...)
{
	if (x->err[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->err, sizeof x->err, fmt, ap);
	va_end(ap);
}

static struct dimm_cfg *dimm_add(struct server_cfg *cfg, const char *name)
{
	for (int i = 0; i < cfg->ndimms; i++)
		if (!strcmp(cfg->dimms[i].name, name))
			return &cfg->dimms[i];
	struct dimm_cfg *d = xrealloc(cfg->dimms, (size_t)(cfg->ndimms + 1) * sizeof *d);
	cfg->dimms = d;
	d = &cfg->dimms[cfg->ndimms++];
	memset(d, 0, sizeof *d);
	d->name = xstrdup(name);
	d->sector_size = 512;
	d->timing = -1;
	d->sync = -1;
	d->tls = -1;
	return d;
}

/* The NAME of a "KIND NAME" section ([card NAME], [dimm NAME]), possibly
 * empty; NULL if the section is not of that kind. */
static const char *section_kind(const char *section, const char *kind)
{
	size_t n = strlen(kind);
	return !strncmp(section, kind, n) && section[n] == ' ' ? section + n + 1 : NULL;
}

/*
 * A section header goes by (from the reader, before inih sees the line):
 * refuse a repeated or unknown section and bad names, and create the card
 * or ioDimm, so that a section without keys still defines it.  0 or -1
 * with x->err set.
 */
static int section_begin(struct parse_ctx *x, const char *name)
{
	if (strlen(name) > INI_SECTION_NAME_MAX) {
		set_err(x, "%s:%d: section name [%s] is longer than %d characters", x->path, x->lineno,
			name, INI_SECTION_NAME_MAX);
		return -1;
	}
	for (int i = 0; i < x->nsections; i++) {
		if (!strcmp(x->sections[i].name, name)) {
			set_err(x, "%s:%d: section [%s] appears a second time (first on line %d); "
				"put all its keys in one section", x->path, x->lineno, name,
				x->sections[i].line);
			return -1;
		}
	}
	x->sections = xrealloc(x->sections, (size_t)(x->nsections + 1) * sizeof *x->sections);
	x->sections[x->nsections++] = (struct seen){ xstrdup(name), x->lineno };
	for (int i = 0; i < x->nkeys; i++)
		free(x->keys[i].name);
	x->nkeys = 0;

	if (!strcmp(name, "server"))
		return 0;
	const char *card = section_kind(name, "card"), *dimm = section_kind(name, "dimm");
	const char *obj = card ? card : dimm;
	if (!obj) {
		set_err(x, "%s:%d: unknown section [%s] (known: [server], [card NAME], [dimm NAME])",
			x->path, x->lineno, name);
		return -1;
	}
	if (!obj[0] || isspace((unsigned char)obj[0]) || isspace((unsigned char)obj[strlen(obj) - 1]) ||
	    strchr(obj, '/')) {
		set_err(x, "%s:%d: bad section name [%s]: one space after '%s', then a name without "
			"'/' or surrounding spaces", x->path, x->lineno, name, card ? "card" : "dimm");
		return -1;
	}
	if (card) {
		if (x->ncards == (int)(sizeof x->cards / sizeof x->cards[0])) {
			set_err(x, "%s:%d: [%s]: too many cards (at most %d)", x->path, x->lineno, name,
				(int)(sizeof x->cards / sizeof x->cards[0]));
			return -1;
		}
		x->cards[x->ncards++] = (struct card_cfg){ xstrdup(card), -1 };
	} else {
		dimm_add(x->cfg, dimm);
	}
	return 0;
}

/*
 * inih's line reader.  One physical line per call, so x->lineno is inih's
 * line number; leading whitespace is removed, so that no line continues the
 * previous value (inih's multi-line values: "image = a.img" followed by an
 * indented "readonly = yes" would make the image "readonly = yes") and an
 * indented key or section means what it looks like.  Section headers are
 * checked here (inih only reports keys).  Returns NULL (inih's end of file)
 * after an error: x->err says why.
 */
static char *read_line(char *buf, int size, void *stream)
{
	struct parse_ctx *x = stream;
	if (x->err[0] || !fgets(buf, size, x->fp))
		return NULL;
	x->lineno++;
	size_t n = strlen(buf);
	if (n == (size_t)size - 1 && buf[n - 1] != '\n') {
		int c = fgetc(x->fp);
		if (c != EOF && c != '\n') {
			set_err(x, "%s:%d: line is too long (at most %d characters)", x->path, x->lineno,
				size - 2);
			return NULL;
		}
	}
	char *s = buf;
	if (x->lineno == 1 && !strncmp(s, "\xEF\xBB\xBF", 3))
		s += 3;  /* UTF-8 byte order mark */
	while (isspace((unsigned char)*s))
		s++;
	memmove(buf, s, strlen(s) + 1);
	if (buf[0] == '[') {
		/* inih's rule: up to the first ']', unless an inline comment
		 * (';' after whitespace) comes first (then inih reports an error) */
		char *e = buf + 1;
		while (*e && *e != ']' && !(*e == ';' && isspace((unsigned char)e[-1])))
			e++;
		if (*e == ']') {
			char *name = strndup(buf + 1, (size_t)(e - buf - 1));
			if (!name) {
				set_err(x, "out of memory");
				return NULL;
			}
			int rc = section_begin(x, name);
			free(name);
			if (rc)
				return NULL;
		}
	}
	return buf;
}


/* A key not given before in this section (unless repeatable): 0, or -1 with why. */
static int key_once(struct parse_ctx *x, const char *section, const char *key, char *why, size_t len)
{
	if (config_key_repeatable(key))
		return 0;
	for (int i = 0; i < x->nkeys; i++) {
		if (!strcmp(x->keys[i].name, key)) {
			snprintf(why, len, "%s is given a second time in [%s] (first on line %d)", key,
				 section, x->keys[i].line);
			return -1;
		}
	}
	x->keys = xrealloc(x->keys, (size_t)(x->nkeys + 1) * sizeof *x->keys);
	x->keys[x->nkeys++] = (struct seen){ xstrdup(key), x->lineno };
	return 0;
}

/* inih's key handler: the key through config_key (config_keys.c); every
 * error names the file, line, section, key and value.  1, or 0 with x->err. */
static int handler(void *user, const char *section, const char *key, const char *value)
{
	struct parse_ctx *x = user;
	char why[1024];
	if (!section[0]) {
		set_err(x, "%s:%d: key '%s' before any [section]", x->path, x->lineno, key);
		return 0;
	}
	const char *card = section_kind(section, "card"), *dimm = section_kind(section, "dimm");
	int rc = key_once(x, section, key, why, sizeof why);
	if (!rc && (card || dimm || !strcmp(section, "server"))) {
		rc = config_key(x, card, dimm ? dimm_add(x->cfg, dimm) : NULL, key, value, why,
				sizeof why);
	} else if (!rc) {
		/* section_begin refused every other section */
		snprintf(why, sizeof why, "internal error: unknown section");
		rc = -1;
	}
	if (rc)
		set_err(x, "%s:%d: [%s] %s = '%s': %s", x->path, x->lineno, section, key, value, why);
	return !rc;
}

int config_load(struct server_cfg *cfg, const char *path, char *err, size_t errlen)
{
	struct parse_ctx x = { .cfg = cfg, .path = path };
	int ndimms_before = cfg->ndimms;
	x.fp = fopen(path, "r");
	if (!x.fp) {
		int e = errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
		return -e;
	}
	int rc = ini_parse_stream(read_line, &x, handler, &x);
	fclose(x.fp);
	if (!x.err[0] && rc > 0)
		snprintf(x.err, sizeof x.err, "%s:%d: syntax error (expected [SECTION] or KEY = VALUE)",
			 path, rc);
	else if (!x.err[0] && rc < 0)
		snprintf(x.err, sizeof x.err, "%s: out of memory", path);
	if (!x.err[0] && cfg->ndimms == ndimms_before)
		/* the embedded pair is for running without a file, never a
		 * silent stand-in for a file that forgot its ioDimms */
		snprintf(x.err, sizeof x.err, "%s: no [dimm NAME] section: the file must name the ioDimms "
			 "to serve (e.g. [dimm dimm0] with preset = iodimm-mlc-320; see conf/flashd.conf)",
			 path);
	if (!x.err[0]) {
		/* card defaults flow into their ioDimms; a card named must exist */
		for (int i = 0; i < cfg->ndimms && !x.err[0]; i++) {
			struct dimm_cfg *d = &cfg->dimms[i];
			bool found = !d->card;
			for (int c = 0; c < x.ncards; c++)
				if (d->card && !strcmp(d->card, x.cards[c].name)) {
					found = true;
					if (d->timing < 0)
						d->timing = x.cards[c].timing;
				}
			if (!found)
				snprintf(x.err, sizeof x.err, "%s: [dimm %s] card = '%s': there is no [card %s] section",
					 path, d->name, d->card, d->card);
		}
	}
	for (int c = 0; c < x.ncards; c++)
		free(x.cards[c].name);
	for (int i = 0; i < x.nsections; i++)
		free(x.sections[i].name);
	free(x.sections);
	for (int i = 0; i < x.nkeys; i++)
		free(x.keys[i].name);
	free(x.keys);
	if (x.err[0]) {
		snprintf(err, errlen, "%s", x.err);
		return -EINVAL;
	}
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
	/* nbd://127.0.0.1:10809 keeps working for a first try; a file says
	 * what it wants (conf/flashd.conf: dimm0 too) */
	if (!cfg->default_export)
		cfg->default_export = xstrdup("dimm0");
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

/*
 * Canonical absolute form of path, which need not exist (yet): symbolic
 * links followed, dangling ones too, "." and ".." and repeated slashes
 * resolved.  Two paths get the same result exactly when they name the same
 * file, existing or to be created (hard links aside: compare st_dev and
 * st_ino for those).  The part that does not exist is resolved by its
 * text, which is right because it contains no links.  NULL if that cannot
 * be worked out (a loop of links, out of memory); caller frees.
 */
static char *canon_path(const char *path, int hops)
{
	if (hops > 40 || !path[0])
		return NULL;
	char *r = realpath(path, NULL);
	if (r || !strcmp(path, "."))
		return r;  /* "." fails only if the working directory is gone */
	/* the last component, and where it lives */
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	size_t b = len;
	while (b > 0 && path[b - 1] != '/')
		b--;
	size_t plen = b;
	while (plen > 1 && path[plen - 1] == '/')
		plen--;
	char *parent = plen ? strndup(path, plen) : xstrdup(".");
	char *base = strndup(path + b, len - b);
	struct stat st;
	if (!parent || !base || !base[0]) {
		r = NULL;
	} else if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		/* a dangling link: where it points, relative to its directory */
		char target[PATH_MAX];
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n > 0) {
			target[n] = 0;
			char *next = target[0] == '/' ? xstrdup(target) : join_path(parent, target);
			r = next ? canon_path(next, hops + 1) : NULL;
			free(next);
		}
	} else {
		char *p = canon_path(parent, hops);
		if (p && !strcmp(base, ".")) {
			r = p;
			p = NULL;
		} else if (p && !strcmp(base, "..")) {
			char *slash = strrchr(p, '/');
			if (slash)
				slash[slash == p] = 0;  /* "/a/b" -> "/a", "/a" -> "/" */
			r = p;
			p = NULL;
		} else if (p) {
			r = join_path(strcmp(p, "/") ? p : "", base);
		}
		free(p);
	}
	free(parent);
	free(base);
	return r;
}

/*
 * 0 if no two ioDimms use the same image file: by (st_dev, st_ino) when
 * both exist, else by canonical path (see canon_path).
 */
static int check_images(struct server_cfg *cfg, char *err, size_t errlen)
{
	if (cfg->ndimms < 2)
		return 0;
	struct img {
		bool exists;
		struct stat st;
		char *canon;
	} *im = calloc((size_t)cfg->ndimms, sizeof *im);
	if (!im) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int rc = 0;
	for (int i = 0; i < cfg->ndimms && !rc; i++) {
		struct dimm_cfg *d = &cfg->dimms[i];
		im[i].exists = stat(d->image, &im[i].st) == 0;
		im[i].canon = canon_path(d->image, 0);
		if (!im[i].canon)
			im[i].canon = xstrdup(d->image);
		for (int j = 0; j < i; j++) {
			bool same = !strcmp(im[i].canon, im[j].canon) ||
				    (im[i].exists && im[j].exists && im[i].st.st_dev == im[j].st.st_dev &&
				     im[i].st.st_ino == im[j].st.st_ino);
			if (same) {
				snprintf(err, errlen, "%s %s of [dimm %s] and %s %s of [dimm %s] are the "
					 "same file", cfg->dimms[j].device_set ? "device" : "image",
					 cfg->dimms[j].image, cfg->dimms[j].name,
					 d->device_set ? "device" : "image", d->image, d->name);
				rc = -EINVAL;
				break;
			}
		}
	}
	for (int i = 0; i < cfg->ndimms; i++)
		free(im[i].canon);
	free(im);
	return rc;
}

/* Listen addresses and the sockets' paths: defaults, then checks. */
static int finish_sockets(struct server_cfg *cfg, char *err, size_t errlen)
{
	char why[640];
	struct sockaddr_un sa;
	/* neither --listen nor --unix (nor the file's keys): both defaults;
	 * only a unix socket given: that alone */
	if (!cfg->nlisten && (!cfg->unix_path || !cfg->unix_path[0])) {
		cfg->listen = calloc(1, sizeof *cfg->listen);
		cfg->listen[0] = xstrdup("127.0.0.1:10809");
		cfg->nlisten = 1;
	}
	if (!cfg->unix_path)
		cfg->unix_path = join_path(cfg->state_dir, "flashd.sock");
	/* those of the file were checked as they were read: these may come
	 * from the command line */
	for (int i = 0; i < cfg->nlisten; i++) {
		if (check_listen_spec(cfg->listen[i], why, sizeof why)) {
			snprintf(err, errlen, "listen address '%s': %s", cfg->listen[i], why);
			return -EINVAL;
		}
	}
	if (!cfg->control_path)
		cfg->control_path = join_path(cfg->state_dir, "flashd.ctl");
	const char *socks[2][2] = { { "unix socket", cfg->unix_path },
				    { "control socket", cfg->control_path } };
	for (int i = 0; i < 2; i++) {
		if (socks[i][1] && strlen(socks[i][1]) >= sizeof sa.sun_path) {
			snprintf(err, errlen, "%s path '%s' is longer than %zu bytes", socks[i][0], socks[i][1],
				 sizeof sa.sun_path - 1);
			return -EINVAL;
		}
	}
	return 0;
}

/* The defaults of the [server] keys neither the file nor the command line
 * set: the key table's (config_keys.c), then those made of other keys. */
static void finish_server_defaults(struct server_cfg *cfg)
{
	config_key_defaults(cfg, NULL);
	/* well below max_connections: TCP and unix socket each hold that many
	 * in handshake and as many waiting (admit.c, "waiting room"), so by
	 * default at least half is left to clients that negotiate; a value
	 * set is taken as it is */
	if (!cfg->max_handshakes)
		cfg->max_handshakes = cfg->max_connections / 8 < DEFAULT_HANDSHAKES ?
					      (cfg->max_connections >= 8 ? cfg->max_connections / 8 : 1) :
					      DEFAULT_HANDSHAKES;
	if (cfg->unix_tls < 0)
		cfg->unix_tls = cfg->tls;
}

/* A tls: entry of an ioDimm's rules needs a way to prove that identity. */
static int check_tls_rules(const struct server_cfg *cfg, char *err, size_t errlen)
{
	for (int i = 0; i < cfg->ndimms; i++) {
		struct dimm_cfg *d = &cfg->dimms[i];
		const char *f = cfg->config_file ? cfg->config_file : "(config)";
		bool psk = cfg->tls_psk != NULL, certs = cfg->tls_verify_peer > 0;
		if (d->acl_tls_line && !psk && !certs) {
			snprintf(err, errlen, "%s:%d: [dimm %s]: a tls: entry, but no TLS identity can be "
				 "proven: set tls_psk (PSK identities) or tls_certificates with "
				 "tls_verify_peer = yes (client certificates)", f, d->acl_tls_line, d->name);
			return -EINVAL;
		}
		for (int k = 0; k < d->acl.n; k++) {
			enum acl_kind kind = d->acl.e[k].kind;
			char ent[300];
			acl_entry_format(&d->acl.e[k], ent, sizeof ent);
			if ((kind == ACL_TLS_CN || kind == ACL_TLS_SAN) && !certs) {
				snprintf(err, errlen, "%s:%d: [dimm %s]: '%s' needs tls_verify_peer = yes (an "
					 "unverified client certificate proves nothing)", f, d->acl_cert_line,
					 d->name, ent);
				return -EINVAL;
			}
			if (kind == ACL_TLS_PSK && !psk) {
				snprintf(err, errlen, "%s:%d: [dimm %s]: '%s' needs tls_psk = FILE", f,
					 d->acl_psk_line, d->name, ent);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* Each ioDimm's defaults (backend, preset, export name, image path, timing,
 * the key table's), and its export name: at most 4096 bytes, used by no other. */
static int finish_dimms(struct server_cfg *cfg, char *err, size_t errlen)
{
	for (int i = 0; i < cfg->ndimms; i++) {
		struct dimm_cfg *d = &cfg->dimms[i];
		if (!d->backend)
			d->backend = xstrdup(d->device_set ? "mtd" : "sim");
		if (!strcmp(d->backend, "mtd") && !d->device_set) {
			snprintf(err, errlen, "[dimm %s]: backend = mtd needs device = /dev/mtdN (the raw "
				 "NAND's MTD character device)", d->name);
			return -EINVAL;
		}
		if (!d->preset) /* mtd: none (the device says what it is) */
			d->preset = xstrdup(d->device_set ? "" : cfg->default_preset ? cfg->default_preset
										 : "iodimm-mlc-320");
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
		config_key_defaults(cfg, d);
		if (strlen(d->export_name) > 4096) {
			snprintf(err, errlen, "export name of [dimm %s] is longer than 4096 bytes", d->name);
			return -EINVAL;
		}
		for (int j = 0; j < i; j++) {
			if (!strcmp(cfg->dimms[j].export_name, d->export_name)) {
				snprintf(err, errlen, "export name '%s' is used by [dimm %s] and [dimm %s]",
					 d->export_name, cfg->dimms[j].name, d->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* default_export names an export. */
static int check_default_export(const struct server_cfg *cfg, char *err, size_t errlen)
{
	if (!cfg->default_export)
		return 0;
	bool found = false;
	char names[512] = "";
	size_t used = 0;
	for (int i = 0; i < cfg->ndimms; i++) {
		found |= !strcmp(cfg->dimms[i].export_name, cfg->default_export);
		if (used < sizeof names)
			used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
						 cfg->dimms[i].export_name);
	}
	if (!found) {
		snprintf(err, errlen, "%s:%d: [server] default_export = '%s': no export has that name "
			 "(the exports: %s)", cfg->config_file ? cfg->config_file : "(config)",
			 cfg->default_export_line, cfg->default_export, names);
		return -EINVAL;
	}
	return 0;
}

/* Defaults and cross-checks after the config file and the command line. */
int config_finish(struct server_cfg *cfg, char *err, size_t errlen)
{
	int rc;
	if (!cfg->ndimms)
		config_default_duo(cfg);
	if ((rc = finish_sockets(cfg, err, errlen)))
		return rc;
	finish_server_defaults(cfg);
	if ((rc = check_tls_rules(cfg, err, errlen)) || (rc = finish_dimms(cfg, err, errlen)) ||
	    (rc = check_default_export(cfg, err, errlen)))
		return rc;
	return check_images(cfg, err, errlen);
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
		free(d->backend);
		free(d->preset);
		free(d->image);
		acl_free(&d->acl);
	}
	free(cfg->dimms);
	free(cfg->unix_path);
	free(cfg->control_path);
	free(cfg->state_dir);
	free(cfg->pidfile);
	free(cfg->default_export);
	free(cfg->default_preset);
	free(cfg->config_file);
	free(cfg->tls_certificates);
	free(cfg->tls_certificates_where);
	free(cfg->tls_psk);
	free(cfg->tls_psk_where);
	free(cfg->metrics_listen);
	acl_free(&cfg->metrics_allow);
	free(cfg->metrics_host_names);
	memset(cfg, 0, sizeof *cfg);
}

/* ---- reload (SIGHUP, POST /v1/reload) ------------------------------------ */

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/* A deep copy of the command line's configuration (it has no ioDimms). */
static void cli_copy(struct server_cfg *out, const struct server_cfg *cli)
{
	*out = *cli;
	out->listen = cli->nlisten ? xrealloc(NULL, (size_t)cli->nlisten * sizeof *out->listen) : NULL;
	for (int i = 0; i < cli->nlisten; i++)
		out->listen[i] = xstrdup(cli->listen[i]);
	out->unix_path = dup_or_null(cli->unix_path);
	out->control_path = dup_or_null(cli->control_path);
	out->state_dir = dup_or_null(cli->state_dir);
	out->pidfile = dup_or_null(cli->pidfile);
	out->default_export = dup_or_null(cli->default_export);
	out->default_preset = dup_or_null(cli->default_preset);
	out->config_file = NULL;
	out->tls_certificates = dup_or_null(cli->tls_certificates);
	out->tls_certificates_where = dup_or_null(cli->tls_certificates_where);
	out->tls_psk = dup_or_null(cli->tls_psk);
	out->tls_psk_where = dup_or_null(cli->tls_psk_where);
	/* no command-line options: the file's alone */
	out->metrics_listen = NULL;
	out->metrics_allow = (struct acl){ 0 };
	out->metrics_host_names = NULL;
	out->dimms = NULL;
	out->ndimms = 0;
}

/*
 * The whole configuration as at start-up: the command line (cli, left as it
 * is), then the file (path; NULL: none) through config_load, the command
 * line's overrides of --timing and --listen, fallback_state_dir when neither
 * sets state_dir, config_finish.  Start-up and reload both come here, so a
 * reload checks the file exactly as a start does.  0 with *out made (free it
 * with config_free), or -errno with err (FILE:LINE: ... for the file's
 * mistakes) and *out zeroed.
 */
int config_build(const struct server_cfg *cli, const char *path, const char *fallback_state_dir,
		 struct server_cfg *out, char *err, size_t errlen)
{
	int rc = 0;
	cli_copy(out, cli);
	if (path && (rc = config_load(out, path, err, errlen)))
		goto fail;
	/* --timing wins over every timing key of the file, [card] and [dimm] too */
	if (cli->timing >= 0)
		for (int i = 0; i < out->ndimms; i++)
			out->dimms[i].timing = cli->timing;
	if (cli->nlisten && path) {
		/* --listen replaces the file's addresses: keep only the first cli->nlisten */
		for (int i = cli->nlisten; i < out->nlisten; i++)
			free(out->listen[i]);
		out->nlisten = cli->nlisten;
	}
	if (!out->state_dir)
		out->state_dir = xstrdup(fallback_state_dir);
	if ((rc = config_finish(out, err, errlen)))
		goto fail;
	return 0;
fail:
	config_free(out);
	return rc;
}
