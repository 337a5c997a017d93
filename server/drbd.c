/*
 * server/drbd.c - which ioDimm exports are DRBD lower devices on this node,
 * and their resources' state (flashd.h, "DRBD").  It alone sets d->drbd.
 *
 * The chain is read, never guessed (deploy/drbd/README.md's stack): an
 * /etc/nbdtab line "nbd0 /run/flashd/flashd.sock dimm0 unix,..." whose
 * socket is flashd's (compared after realpath) and whose export is an
 * ioDimm's; /sys/block/nbd0/pid (connected); /sys/block/nbd0/holders/drbdM
 * (DRBD's disk); /proc/drbd's line of M; the by-res link naming M's
 * resource.  A missing file means "not a lower device".  Nothing here
 * changes anything outside d->drbd.
 * Cost, on the main thread once a second (monitor.c's tick): one read of
 * /proc/drbd, which fails at once when DRBD is not loaded; only if it
 * exists one read of /etc/nbdtab per ioDimm and a few sysfs lookups.  No
 * child process (drbdsetup), no allocation.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/flashd.h"

/* /proc/drbd's size with a few minors and their progress lines; what does
 * not fit is read as absent */
#define PROC_DRBD_MAX 16384

static void copy(char *out, size_t len, const char *s, size_t n)
{
	if (n >= len)
		n = len - 1;
	memcpy(out, s, n);
	out[n] = 0;
}

/*
 * DRBD 8.4's lines of a minor:
 *    0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent C r-----
 *       ns:1234 nr:0 dw:0 dr:2345 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:95412
 *  	[=>..................] sync'ed: 12.5% (95412/102400)K
 *  	finish: 0:00:07 speed: 12,345 (12,345) K/sec
 * (an unconfigured minor: " 1: cs:Unconfigured").  Its lines end at the
 * next minor's.
 */
bool drbd_parse_proc(const char *text, int minor, struct drbd_lower *l)
{
	l->cstate[0] = l->role[0] = l->peer_role[0] = l->disk[0] = l->peer_disk[0] = 0;
	l->protocol[0] = l->sync_finish[0] = 0;
	l->sync_permille = -1;
	const char *p = text;
	bool found = false;
	while (p && *p) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char line[512];
		copy(line, sizeof line, p, n);
		p = eol ? eol + 1 : NULL;
		char *end;
		long m = strtol(line, &end, 10);
		bool minor_line = end != line && *end == ':' && strspn(line, " 0123456789") == (size_t)(end - line);
		if (minor_line) {
			if (found)
				break; /* the next minor's */
			if (m != minor)
				continue;
			found = true;
			char *save;
			for (char *tok = strtok_r(end + 1, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
				char *slash = strchr(tok, '/');
				if (!strncmp(tok, "cs:", 3)) {
					copy(l->cstate, sizeof l->cstate, tok + 3, strlen(tok + 3));
				} else if (!strncmp(tok, "ro:", 3) && slash) {
					copy(l->role, sizeof l->role, tok + 3, (size_t)(slash - tok - 3));
					copy(l->peer_role, sizeof l->peer_role, slash + 1, strlen(slash + 1));
				} else if (!strncmp(tok, "ds:", 3) && slash) {
					copy(l->disk, sizeof l->disk, tok + 3, (size_t)(slash - tok - 3));
					copy(l->peer_disk, sizeof l->peer_disk, slash + 1, strlen(slash + 1));
				} else if (strlen(tok) == 1 && strchr("ABC", tok[0])) {
					copy(l->protocol, sizeof l->protocol, tok, 1);
				}
			}
			continue;
		}
		if (!found)
			continue;
		const char *s = strstr(line, "sync'ed:");
		if (!s)
			s = strstr(line, "verified:"); /* online verify's progress */
		if (s) {
			s = strchr(s, ':') + 1;
			double pct = strtod(s, &end);
			if (end != s && *end == '%' && pct >= 0 && pct <= 100)
				l->sync_permille = (int)(pct * 10 + 0.5);
		}
		if ((s = strstr(line, "finish:"))) {
			s += strlen("finish:");
			s += strspn(s, " ");
			copy(l->sync_finish, sizeof l->sync_finish, s, strcspn(s, " "));
		}
	}
	return found;
}

void drbd_resource_name(const char *root, int minor, char *out, size_t len)
{
	char want[32], dir[PATH_MAX], path[PATH_MAX + 300], target[PATH_MAX];
	snprintf(want, sizeof want, "drbd%d", minor);
	out[0] = 0;
	snprintf(dir, sizeof dir, "%s/dev/drbd/by-res", root);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	/* a link RES -> ../../drbdM (one volume), or a directory RES of
	 * links VOL -> ../../../drbdM; compared by the target's last name */
	while (!out[0] && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n > 0) {
			target[n] = 0;
			const char *base = strrchr(target, '/');
			if (!strcmp(base ? base + 1 : target, want))
				snprintf(out, len, "%s", e->d_name);
			continue;
		}
		DIR *v = opendir(path);
		struct dirent *ve;
		while (v && !out[0] && (ve = readdir(v))) {
			char vp[PATH_MAX + 600];
			snprintf(vp, sizeof vp, "%s/%s", path, ve->d_name);
			if (ve->d_name[0] == '.' || (n = readlink(vp, target, sizeof target - 1)) <= 0)
				continue;
			target[n] = 0;
			const char *base = strrchr(target, '/');
			if (!strcmp(base ? base + 1 : target, want))
				snprintf(out, len, "%s", e->d_name);
		}
		if (v)
			closedir(v);
	}
	closedir(d);
}

/* The DRBD minor holding ROOT/sys/block/NBD as its disk while it is
 * connected, or -1. */
static int holder_minor(const char *root, const char *nbd)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/sys/block/%s/pid", root, nbd);
	if (access(path, F_OK))
		return -1; /* not connected */
	snprintf(path, sizeof path, "%s/sys/block/%s/holders", root, nbd);
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

static void real_or_same(const char *path, char *out)
{
	if (!realpath(path, out))
		snprintf(out, PATH_MAX, "%s", path);
}

bool drbd_lookup(const char *root, const char *text, const char *sock, const char *export,
		 struct drbd_lower *l)
{
	memset(l, 0, sizeof *l);
	l->sync_permille = -1;
	char path[PATH_MAX], sock_real[PATH_MAX];
	snprintf(path, sizeof path, "%s/etc/nbdtab", root);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	real_or_same(sock, sock_real);
	char line[1024];
	while (!l->lower && fgets(line, sizeof line, f)) {
		line[strcspn(line, "#\n")] = 0;
		char dev[16], host[PATH_MAX], exp[256], opts[256] = "", host_real[PATH_MAX];
		/* nbdtab: DEVICE HOST NAME [OPTIONS] */
		if (sscanf(line, "%15s %4095s %255s %255s", dev, host, exp, opts) < 3)
			continue;
		bool unix_sock = false;
		char *save;
		for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
			unix_sock |= !strcmp(o, "unix");
		if (!unix_sock || strncmp(dev, "nbd", 3) || strchr(dev, '/') || strcmp(exp, export))
			continue;
		real_or_same(host, host_real);
		if (strcmp(host_real, sock_real))
			continue;
		int minor = holder_minor(root, dev);
		if (minor < 0)
			continue;
		/* DRBD 9 has no minor lines: the chain, its states unknown ("") */
		drbd_parse_proc(text, minor, l);
		l->lower = true;
		l->minor = minor;
		snprintf(l->nbd, sizeof l->nbd, "%s", dev);
		drbd_resource_name(root, minor, l->resource, sizeof l->resource);
	}
	fclose(f);
	if (!l->lower)
		memset(l, 0, sizeof *l), l->sync_permille = -1;
	return l->lower;
}

void drbd_refresh(struct server *srv)
{
	static char text[PROC_DRBD_MAX];
	ssize_t n = -1;
	int fd = open("/proc/drbd", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		size_t got = 0;
		ssize_t r = 0;
		while (got < sizeof text - 1 && (r = read(fd, text + got, sizeof text - 1 - got)) > 0)
			got += (size_t)r;
		n = r < 0 || got == sizeof text - 1 ? -1 : (ssize_t)got;
		close(fd);
	}
	for (int i = 0; i < srv->ndimms; i++) {
		struct dimm *d = &srv->dimms[i];
		if (n < 0 || !srv->cfg.unix_path) {
			memset(&d->drbd, 0, sizeof d->drbd);
			d->drbd.sync_permille = -1;
			continue;
		}
		text[n] = 0;
		drbd_lookup("", text, srv->cfg.unix_path, d->cfg->export_name, &d->drbd);
	}
}
