/*
 * flashctl_drbd.c - which of flashd's ioDimms are DRBD lower devices on this
 * node, and the node's role in each resource, for `flashctl status`.
 *
 * The supported stack (deploy/drbd/README.md): flashd's export attached by
 * the kernel NBD client over flashd's unix socket, as an /etc/nbdtab line
 * ("nbd0 /run/flashd/flashd.sock dimm0 unix,..."), and that /dev/nbdN the
 * disk of a DRBD minor.  The chain is read, never guessed, from:
 *   /etc/nbdtab                     which export of which socket is nbdN
 *   /sys/block/nbdN/pid             nbdN is connected (the kernel has it only then)
 *   /sys/block/nbdN/holders/drbdM   DRBD minor M holds nbdN as its disk
 *   /proc/drbd                      M's connection, roles, disk states (DRBD 8.4)
 *   /dev/drbd/by-res/RES[/VOL]      M's resource name (drbd-utils' udev rules)
 * An nbdtab line counts only when its socket is the one the running flashd
 * listens on (the status JSON's "unix", compared after realpath) and its
 * export is one of its ioDimms'.  Nothing here changes anything; a missing
 * file means "not a lower device", and `flashctl status` prints as before.
 * Cost: a few small reads per status call, only when /proc/drbd exists.
 */
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DRBD_MAX 64

struct drbd_lower {
	char dimm[128];       /* [dimm] name, as flashd's JSON spells it */
	char nbd[64];         /* "nbd0" */
	int minor;            /* drbdM */
	char resource[256];   /* "" when udev gave no by-res link */
	char cstate[32], role[32], peer_role[32], disk[32], peer_disk[32], protocol[4];
};

/* The raw (still JSON-escaped) string at p, which points after its opening
 * quote; false if it does not end or does not fit. */
static bool raw_string(const char *p, char *out, size_t len)
{
	size_t o = 0;
	for (; *p && *p != '"'; p++) {
		if (*p == '\\' && p[1]) {
			if (o + 2 >= len)
				return false;
			out[o++] = *p++;
		}
		if (o + 1 >= len)
			return false;
		out[o++] = *p;
	}
	out[o] = 0;
	return *p == '"';
}

/* /proc/drbd's line for MINOR (8.4: " 0: cs:Connected ro:Primary/Secondary
 * ds:UpToDate/UpToDate C r-----") into l; false without one. */
static bool proc_drbd(int minor, struct drbd_lower *l)
{
	FILE *f = fopen("/proc/drbd", "r");
	if (!f)
		return false;
	char line[512];
	bool found = false;
	while (!found && fgets(line, sizeof line, f)) {
		char *end;
		long m = strtol(line, &end, 10);
		if (end == line || *end != ':' || m != minor)
			continue;
		found = true;
		for (char *tok = strtok(end + 1, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
			char *slash = strchr(tok, '/');
			if (!strncmp(tok, "cs:", 3)) {
				snprintf(l->cstate, sizeof l->cstate, "%s", tok + 3);
			} else if (!strncmp(tok, "ro:", 3) && slash) {
				*slash = 0;
				snprintf(l->role, sizeof l->role, "%s", tok + 3);
				snprintf(l->peer_role, sizeof l->peer_role, "%s", slash + 1);
			} else if (!strncmp(tok, "ds:", 3) && slash) {
				*slash = 0;
				snprintf(l->disk, sizeof l->disk, "%s", tok + 3);
				snprintf(l->peer_disk, sizeof l->peer_disk, "%s", slash + 1);
			} else if (strlen(tok) == 1 && strchr("ABC", tok[0])) {
				snprintf(l->protocol, sizeof l->protocol, "%s", tok);
			}
		}
	}
	fclose(f);
	return found;
}

/* the resource whose /dev/drbd/by-res link (RES, or RES/VOL) is /dev/drbdM */
static void resource_name(int minor, char *out, size_t len)
{
	char want[64], path[PATH_MAX + 300], real[PATH_MAX];
	snprintf(want, sizeof want, "/dev/drbd%d", minor);
	out[0] = 0;
	DIR *d = opendir("/dev/drbd/by-res");
	if (!d)
		return;
	struct dirent *e;
	while (!out[0] && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/dev/drbd/by-res/%s", e->d_name);
		if (realpath(path, real) && !strcmp(real, want)) {
			snprintf(out, len, "%s", e->d_name);
			break;
		}
		DIR *v = opendir(path);
		struct dirent *ve;
		while (v && (ve = readdir(v))) {
			char vp[PATH_MAX + 600];
			snprintf(vp, sizeof vp, "%s/%s", path, ve->d_name);
			if (ve->d_name[0] != '.' && realpath(vp, real) && !strcmp(real, want)) {
				snprintf(out, len, "%s", e->d_name);
				break;
			}
		}
		if (v)
			closedir(v);
	}
	closedir(d);
}

/* The DRBD minor holding /dev/NBD as its disk, or -1. */
static int holder_minor(const char *nbd)
{
	char path[128];
	snprintf(path, sizeof path, "/sys/block/%s/pid", nbd);
	if (access(path, F_OK))
		return -1; /* not connected */
	snprintf(path, sizeof path, "/sys/block/%s/holders", nbd);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int minor = -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, "drbd", 4))
			continue;
		long m = strtol(e->d_name + 4, &end, 10);
		if (end != e->d_name + 4 && !*end && m >= 0 && m < 1 << 20) {
			minor = (int)m;
			break;
		}
	}
	closedir(d);
	return minor;
}

/* The dimm (raw JSON name) exporting EXPORT in flashd's status JSON, or false. */
static bool dimm_of_export(const char *status, const char *export, char *dimm, size_t len)
{
	const char *p = strstr(status, "\"dimms\": [");
	char name[128], exp[128];
	while (p && (p = strstr(p, "{\"name\": \""))) {
		p += strlen("{\"name\": \"");
		if (!raw_string(p, name, sizeof name))
			return false;
		const char *q = p + strlen(name) + 1;
		if (strncmp(q, ", \"export\": \"", 13) || !raw_string(q + 13, exp, sizeof exp))
			continue;
		if (!strcmp(exp, export)) {
			snprintf(dimm, len, "%s", name);
			return true;
		}
	}
	return false;
}

/* Every ioDimm of the flashd whose status JSON is STATUS that is a DRBD
 * lower device here; returns how many went into out. */
static int drbd_lookup(const char *status, struct drbd_lower *out, int max)
{
	if (!status || access("/proc/drbd", R_OK))
		return 0;
	char sock[PATH_MAX], sock_real[PATH_MAX];
	const char *u = strstr(status, "\"unix\": \"");
	if (!u || !raw_string(u + 9, sock, sizeof sock) || !sock[0])
		return 0;
	if (!realpath(sock, sock_real))
		snprintf(sock_real, sizeof sock_real, "%s", sock);
	FILE *f = fopen("/etc/nbdtab", "r");
	if (!f)
		return 0;
	int n = 0;
	char line[1024];
	while (n < max && fgets(line, sizeof line, f)) {
		line[strcspn(line, "#\n")] = 0;
		char dev[64], host[PATH_MAX], export[256], opts[256] = "";
		if (sscanf(line, "%63s %4095s %255s %255s", dev, host, export, opts) < 3)
			continue;
		bool unix_sock = false;
		for (char *o = strtok(opts, ","); o; o = strtok(NULL, ","))
			unix_sock |= !strcmp(o, "unix");
		char host_real[PATH_MAX];
		if (!unix_sock || strncmp(dev, "nbd", 3) || strchr(dev, '/'))
			continue;
		if (!realpath(host, host_real))
			snprintf(host_real, sizeof host_real, "%s", host);
		struct drbd_lower *l = &out[n];
		memset(l, 0, sizeof *l);
		if (strcmp(host_real, sock_real) || !dimm_of_export(status, export, l->dimm, sizeof l->dimm))
			continue;
		l->minor = holder_minor(dev);
		if (l->minor < 0)
			continue;
		snprintf(l->nbd, sizeof l->nbd, "%s", dev);
		proc_drbd(l->minor, l);
		resource_name(l->minor, l->resource, sizeof l->resource);
		n++;
	}
	fclose(f);
	return n;
}

static const char *or_unknown(const char *s)
{
	return s[0] ? s : "unknown";
}

/*
 * After flashd's text status: one line per ioDimm that is a DRBD lower
 * device (only DIMM's when it is not NULL), e.g.
 *   DRBD on this node (/etc/nbdtab, /sys/block, /proc/drbd):
 *     dimm0 -> /dev/nbd0 -> /dev/drbd0 (resource r0): Primary, disk UpToDate;
 *       peer Secondary, disk UpToDate; Connected, protocol C
 */
void drbd_status_text(FILE *o, const char *status, const char *dimm)
{
	struct drbd_lower l[DRBD_MAX];
	int n = drbd_lookup(status, l, DRBD_MAX), shown = 0;
	for (int i = 0; i < n; i++) {
		if (dimm && strcmp(dimm, l[i].dimm))
			continue;
		if (!shown++)
			fprintf(o, "\nDRBD on this node (/etc/nbdtab, /sys/block, /proc/drbd):\n");
		fprintf(o, "  %s -> /dev/%s -> /dev/drbd%d%s%s%s: %s, disk %s; peer %s, disk %s; %s, protocol %s\n",
			l[i].dimm, l[i].nbd, l[i].minor, l[i].resource[0] ? " (resource " : "", l[i].resource,
			l[i].resource[0] ? ")" : "", or_unknown(l[i].role), or_unknown(l[i].disk),
			or_unknown(l[i].peer_role), or_unknown(l[i].peer_disk), or_unknown(l[i].cstate),
			or_unknown(l[i].protocol));
	}
}

/* s as a JSON string (quotes included) at the end of buf */
static void json_str(char *buf, size_t len, const char *s)
{
	size_t o = strlen(buf);
	if (o + 2 >= len)
		return;
	buf[o++] = '"';
	for (; *s && o + 8 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\%c", c);
		else if (c < 0x20)
			o += (size_t)snprintf(buf + o, len - o, "\\u%04x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o++] = '"';
	buf[o] = 0;
}

/*
 * BODY (flashd's status JSON, or one ioDimm's) with a "drbd" object added to
 * every ioDimm that is a DRBD lower device:
 *   "drbd": {"device": "/dev/drbd0", "minor": 0, "resource": "r0",
 *            "lower": "/dev/nbd0", "role": "Primary", "peer_role": "Secondary",
 *            "connection": "Connected", "disk": "UpToDate",
 *            "peer_disk": "UpToDate", "protocol": "C"}
 * (fields DRBD does not report are ""; resource "" without udev's link).
 * STATUS is flashd's whole status JSON (for its socket and exports).
 * Returns a malloc'd string, or NULL when nothing is added.
 */
char *drbd_status_json(const char *status, const char *body)
{
	struct drbd_lower l[DRBD_MAX];
	int n = drbd_lookup(status, l, DRBD_MAX);
	if (!n)
		return NULL;
	size_t cap = strlen(body) + (size_t)n * 2048 + 1;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	snprintf(out, cap, "%s", body);
	for (int i = 0; i < n; i++) {
		char key[200];
		snprintf(key, sizeof key, "{\"name\": \"%.127s\", ", l[i].dimm);
		char *at = strstr(out, key);
		if (!at)
			continue;
		char obj[2048] = "\"drbd\": {\"device\": ";
		char dev[32];
		snprintf(dev, sizeof dev, "/dev/drbd%d", l[i].minor);
		json_str(obj, sizeof obj, dev);
		snprintf(obj + strlen(obj), sizeof obj - strlen(obj), ", \"minor\": %d, \"resource\": ", l[i].minor);
		json_str(obj, sizeof obj, l[i].resource);
		snprintf(dev, sizeof dev, "/dev/%s", l[i].nbd);
		const struct { const char *key, *val; } f[] = {
			{ "lower", dev }, { "role", l[i].role }, { "peer_role", l[i].peer_role },
			{ "connection", l[i].cstate }, { "disk", l[i].disk }, { "peer_disk", l[i].peer_disk },
			{ "protocol", l[i].protocol },
		};
		for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
			snprintf(obj + strlen(obj), sizeof obj - strlen(obj), ", \"%s\": ", f[k].key);
			json_str(obj, sizeof obj, f[k].val);
		}
		strcat(obj, "}, ");
		/* insert after the object's name: {"name": "dimm0", "drbd": {...}, "export": ... */
		size_t pos = (size_t)(at - out) + strlen(key), olen = strlen(obj);
		memmove(out + pos + olen, out + pos, strlen(out + pos) + 1);
		memcpy(out + pos, obj, olen);
	}
	return out;
}
