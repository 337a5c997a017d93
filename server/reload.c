/*
 * server/reload.c - the configuration while flashd runs: its first build
 * at start-up (config_build_first, which keeps the command line's settings)
 * and its rebuild on SIGHUP or POST /v1/reload (server_reload: what can
 * change while serving is applied, the rest logged as needing a restart).
 * Main thread.  Called by main.c and ctl.c (flashd.h: server_reload,
 * reload_item, reload_result_free).
 */
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "server/flashd.h"
#include "server/main_int.h"

/* what the command line set, and the state directory used when neither it
 * nor the file sets one: a reload builds the configuration from them again */
static struct server_cfg cli_cfg;
static char *fallback_state_dir;

static char *default_state_dir(void)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *dir = dirname(exe);          /* .../build */
		char probe[4200];
		snprintf(probe, sizeof probe, "%s/../server/main.c", dir);
		if (access(probe, F_OK) == 0) {
			char path[4200];
			snprintf(path, sizeof path, "%s/../var", dir);
			char *real = realpath(dir, NULL);
			if (real) {
				snprintf(path, sizeof path, "%s/var", dirname(real));
				char *p = strdup(path);
				free(real);
				return p;
			}
			return strdup(path);
		}
	}
	return strdup("/var/lib/flashd");
}

/* Start-up: the configuration from the command line's settings cli (kept
 * for reloads) and the file config (NULL: the embedded default); the
 * command line wins (config.c keeps a key it set).  Nonzero: failed, err says why. */
int config_build_first(const struct server_cfg *cli, const char *config, struct server_cfg *out,
		       char *err, size_t errlen)
{
	fallback_state_dir = default_state_dir();
	cli_cfg = *cli;
	return config_build(&cli_cfg, config, fallback_state_dir, out, err, errlen);
}

/*
 * Descriptions replaced by a reload.  An ioDimm thread may be reading the
 * old one (dimm_describe, while it opens), so they are freed only at exit.
 */
static char **retired;
static int nretired;

static void retire(char *p)
{
	if (!p)
		return;
	char **n = realloc(retired, (size_t)(nretired + 1) * sizeof *retired);
	if (!n)
		return; /* leaked: better than freed under a reader */
	retired = n;
	retired[nretired++] = p;
}

void reload_item(struct reload_result *r, bool applied, const char *key, const char *fmt, ...)
{
	struct reload_item **list = applied ? &r->applied : &r->not_applied;
	int *n = applied ? &r->napplied : &r->nnot_applied;
	struct reload_item *l = realloc(*list, (size_t)(*n + 1) * sizeof **list);
	if (!l)
		return;
	*list = l;
	struct reload_item *it = &l[(*n)++];
	va_list ap;
	va_start(ap, fmt);
	snprintf(it->key, sizeof it->key, "%s", key);
	vsnprintf(it->msg, sizeof it->msg, fmt, ap);
	va_end(ap);
	if (applied)
		log_info("reload: %s: %s", it->key, it->msg);
	else
		log_warn("reload: %s: %s", it->key, it->msg);
}

void reload_result_free(struct reload_result *r)
{
	free(r->applied);
	free(r->not_applied);
	r->applied = r->not_applied = NULL;
	r->napplied = r->nnot_applied = 0;
}

static const char *show(const char *s)
{
	return s ? s : "(unset)";
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static const char *show_tri(int v)
{
	return v < 0 ? "(unset)" : v ? "yes" : "no";
}

static void join_listen(const struct server_cfg *c, char *buf, size_t len)
{
	buf[0] = 0;
	for (int i = 0; i < c->nlisten; i++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? ", " : "", c->listen[i]);
	if (!c->nlisten)
		snprintf(buf, len, "(none)");
}

#define RESTART "needs a restart (the running value is kept)"

/* A string key that cannot change while running. */
static void cmp_str(struct reload_result *r, const char *key, const char *was, const char *now)
{
	if (!same_str(was, now))
		reload_item(r, false, key, "'%s' -> '%s': " RESTART, show(was), show(now));
}

static void cmp_int(struct reload_result *r, const char *key, long was, long now)
{
	if (was != now)
		reload_item(r, false, key, "%ld -> %ld: " RESTART, was, now);
}

/* Count of entries of acl, as "N rule(s)" or "none (open)". */
static void show_acl(const struct acl *acl, char *buf, size_t len)
{
	if (acl->n)
		snprintf(buf, len, "%d rule(s)", acl->n);
	else
		snprintf(buf, len, "none (no restriction)");
}

/*
 * What differs between ioDimm a (running) and b (the file now).  Access
 * rules (allow, allow_ro, list_denied) are applied: b's rules move into a
 * and a's old ones into b, which the caller frees.  Only the main thread
 * reads them (handshake.c decides each option against d->cfg->acl when it
 * arrives), so the next option of any handshake uses the new rules;
 * connections already handed to their ioDimm keep the access they got.
 */
static void reload_dimm(struct reload_result *r, struct dimm_cfg *a, struct dimm_cfg *b)
{
	char key[160];
#define K(k_) (snprintf(key, sizeof key, "[dimm %s] %s", a->name, k_), key)
	if (!same_str(a->description, b->description)) {
		/* read by the main thread's handshakes and an opening ioDimm
		 * thread (dimm_describe): the old string is kept (retire) */
		char *old = a->description;
		char *nd = b->description ? strdup(b->description) : NULL;
		if (b->description && !nd) {
			reload_item(r, false, K("description"), "out of memory");
		} else {
			__atomic_store_n(&a->description, nd, __ATOMIC_RELEASE);
			reload_item(r, true, K("description"), "'%s' -> '%s' (new handshakes and export lists)",
				    show(old), show(nd));
			retire(old);
		}
	}
	cmp_str(r, K("card"), a->card, b->card);
	cmp_str(r, K("export"), a->export_name, b->export_name);
	cmp_str(r, K("backend"), a->backend, b->backend);
	cmp_str(r, K("preset"), a->preset, b->preset);
	cmp_str(r, K("image"), a->image, b->image);
	if (a->readonly != b->readonly)
		reload_item(r, false, K("readonly"), "%s -> %s: " RESTART, a->readonly ? "yes" : "no",
			    b->readonly ? "yes" : "no");
	if (a->sector_size != b->sector_size || a->sector_size_set != b->sector_size_set)
		reload_item(r, false, K("sector_size"), "%s%u -> %s%u: " RESTART " (a different format "
			    "also needs flashctl format)", a->sector_size_set ? "" : "unset, ", a->sector_size,
			    b->sector_size_set ? "" : "unset, ", b->sector_size);
	if (a->capacity != b->capacity || a->capacity_pct != b->capacity_pct ||
	    a->op_percent != b->op_percent || a->capacity_set != b->capacity_set)
		reload_item(r, false, K("capacity/op"), "changed: " RESTART " (a different format also "
			    "needs flashctl format)");
	if (a->parity_width != b->parity_width || a->parity_set != b->parity_set)
		reload_item(r, false, K("parity_width"), "%u -> %u: " RESTART " (a different format "
			    "also needs flashctl format)", a->parity_width, b->parity_width);
	cmp_int(r, K("timing"), a->timing, b->timing);
	cmp_int(r, K("sync"), a->sync, b->sync);
	cmp_int(r, K("checkpoint_interval"), (long)a->cp_interval, (long)b->cp_interval);
	cmp_int(r, K("flush_parity"), !a->no_flush_parity, !b->no_flush_parity);
	if (a->tls != b->tls)
		reload_item(r, false, K("tls"), "%s -> %s: " RESTART, tls_mode_name(a->tls),
			    tls_mode_name(b->tls));
	if (!acl_equal(&a->acl, &b->acl)) {
		char was[40], now[40];
		struct acl old = a->acl;

		show_acl(&a->acl, was, sizeof was);
		show_acl(&b->acl, now, sizeof now);
		a->acl = b->acl;
		b->acl = old;
		a->acl_cert_line = b->acl_cert_line;
		a->acl_psk_line = b->acl_psk_line;
		a->acl_tls_line = b->acl_tls_line;
		reload_item(r, true, K("allow/allow_ro"), "%s -> %s (new handshakes; open connections "
			    "keep their access)", was, now);
	}
	if (a->list_denied != b->list_denied) {
		reload_item(r, true, K("list_denied"), "%s -> %s (new export lists)",
			    a->list_denied ? "yes" : "no", b->list_denied ? "yes" : "no");
		a->list_denied = b->list_denied;
	}
#undef K
}

/* swap *a and *b (a string moves into the running configuration, the old
 * one into the file's, which the caller frees) */
static void swap_str(char **a, char **b)
{
	char *t = *a;
	*a = *b;
	*b = t;
}

/*
 * TLS key files (tls_certificates, tls_psk): read again when their names
 * or contents changed (tls_reload); new handshakes use them, open sessions
 * keep theirs.  Files that do not load leave the running keys in force.
 */
static void reload_tls(struct reload_result *r, struct server_cfg *o, struct server_cfg *n)
{
	char err[1200];
	int rc = tls_reload(n, o->tls_verify_peer, err, sizeof err);
	if (rc < 0) {
		log_err("reload: TLS keys: %s; the running keys stay in force", err);
		reload_item(r, false, "[server] tls keys", "%s: the running keys stay in force", err);
		return;
	}
	if (rc == 0)
		return;
	reload_item(r, true, "[server] tls keys", "%s%s%s%s read again (new handshakes use them; open "
		    "sessions keep theirs)", n->tls_certificates ? "certificates " : "",
		    n->tls_certificates ? n->tls_certificates : "",
		    n->tls_psk ? (n->tls_certificates ? ", PSK file " : "PSK file ") : "",
		    n->tls_psk ? n->tls_psk : "");
	swap_str(&o->tls_certificates, &n->tls_certificates);
	swap_str(&o->tls_certificates_where, &n->tls_certificates_where);
	swap_str(&o->tls_psk, &n->tls_psk);
	swap_str(&o->tls_psk_where, &n->tls_psk_where);
}

/* The [server] keys that need a restart: logged, not applied. */
static void reload_restart_keys(struct reload_result *r, struct server_cfg *o, struct server_cfg *n)
{
	char a[2048], b[2048];
	join_listen(o, a, sizeof a);
	join_listen(n, b, sizeof b);
	if (strcmp(a, b))
		reload_item(r, false, "[server] listen", "%s -> %s: " RESTART, a, b);
	cmp_str(r, "[server] unix", o->unix_path, n->unix_path);
	cmp_str(r, "[server] control", o->control_path, n->control_path);
	cmp_str(r, "[server] state_dir", o->state_dir, n->state_dir);
	cmp_str(r, "[server] pidfile", o->pidfile, n->pidfile);
	if (o->use_syslog != n->use_syslog)
		reload_item(r, false, "[server] log", "%s -> %s: " RESTART, o->use_syslog ? "syslog" : "stderr",
			    n->use_syslog ? "syslog" : "stderr");
	cmp_int(r, "[server] timing", o->timing, n->timing);
	cmp_int(r, "[server] fault_injection", o->fault_injection, n->fault_injection);
	if (o->allow_degraded != n->allow_degraded)
		reload_item(r, false, "[server] allow_degraded", "%s -> %s: used at start-up only, "
			    "takes effect at the next start", show_tri(o->allow_degraded),
			    show_tri(n->allow_degraded));
	if (o->tls != n->tls)
		reload_item(r, false, "[server] tls", "%s -> %s: " RESTART, tls_mode_name(o->tls),
			    tls_mode_name(n->tls));
	if (o->unix_tls != n->unix_tls)
		reload_item(r, false, "[server] unix_tls", "%s -> %s: " RESTART, tls_mode_name(o->unix_tls),
			    tls_mode_name(n->unix_tls));
	reload_tls(r, o, n);
	cmp_int(r, "[server] unix_mode", o->unix_mode, n->unix_mode);
	cmp_int(r, "[server] unix_group", o->unix_gid, n->unix_gid);
	cmp_int(r, "[server] control_mode", o->control_mode, n->control_mode);
	cmp_int(r, "[server] control_group", o->control_gid, n->control_gid);
	cmp_int(r, "[server] umask", o->umask, n->umask);
	if (o->tls_verify_peer != n->tls_verify_peer)
		reload_item(r, false, "[server] tls_verify_peer", "%s -> %s: " RESTART,
			    show_tri(o->tls_verify_peer), show_tri(n->tls_verify_peer));
}

/* The ioDimms, by [dimm] name: changed ones (reload_dimm), removed, new. */
static void reload_dimms(struct reload_result *r, struct server_cfg *o, struct server_cfg *n)
{
	for (int i = 0; i < o->ndimms; i++) {
		struct dimm_cfg *m = NULL;
		for (int j = 0; j < n->ndimms && !m; j++)
			if (!strcmp(n->dimms[j].name, o->dimms[i].name))
				m = &n->dimms[j];
		char key[160];
		snprintf(key, sizeof key, "[dimm %s]", o->dimms[i].name);
		if (!m)
			reload_item(r, false, key, "removed from the file: removing an ioDimm needs a restart "
				    "(it is still served; flashctl detach stops serving it now)");
		else
			reload_dimm(r, &o->dimms[i], m);
	}
	for (int j = 0; j < n->ndimms; j++) {
		bool known = false;
		for (int i = 0; i < o->ndimms && !known; i++)
			known = !strcmp(n->dimms[j].name, o->dimms[i].name);
		char key[160];
		snprintf(key, sizeof key, "[dimm %s]", n->dimms[j].name);
		if (!known)
			reload_item(r, false, key, "new in the file: adding an ioDimm needs a restart");
	}
}

/* What changes live: the limits and the log level (o is s->cfg; a key an
 * other thread reads is stored atomically or under s->lock). */
static void reload_live(struct server *s, struct reload_result *r, struct server_cfg *n)
{
	struct server_cfg *o = &s->cfg;
	if (o->verbose != n->verbose) {
		reload_item(r, true, "[server] verbose", "%s -> %s", o->verbose ? "yes" : "no",
			    n->verbose ? "yes" : "no");
		o->verbose = n->verbose;
		__atomic_store_n(&log_verbose, n->verbose, __ATOMIC_RELAXED);
	}
	if (o->max_connections != n->max_connections) {
		reload_item(r, true, "[server] max_connections", "%d -> %d (open connections stay; new "
			    "ones are refused while that many are open)", o->max_connections, n->max_connections);
		pthread_mutex_lock(&s->lock);
		o->max_connections = n->max_connections;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->max_conn_per_addr != n->max_conn_per_addr) {
		reload_item(r, true, "[server] max_connections_per_address", "%d -> %d (open connections "
			    "stay; new ones from an address are refused while it has that many open)",
			    o->max_conn_per_addr, n->max_conn_per_addr);
		pthread_mutex_lock(&s->lock);
		o->max_conn_per_addr = n->max_conn_per_addr;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->max_handshakes != n->max_handshakes) {
		reload_item(r, true, "[server] max_handshakes", "%d -> %d (connections in handshake "
			    "stay; newcomers wait or make room while that many are)", o->max_handshakes,
			    n->max_handshakes);
		pthread_mutex_lock(&s->lock);
		o->max_handshakes = n->max_handshakes;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->max_hs_per_addr != n->max_hs_per_addr) {
		reload_item(r, true, "[server] max_handshakes_per_address", "%d -> %d (new connections)",
			    o->max_hs_per_addr, n->max_hs_per_addr);
		pthread_mutex_lock(&s->lock);
		o->max_hs_per_addr = n->max_hs_per_addr;
		pthread_mutex_unlock(&s->lock);
	}
	if (o->idle_timeout != n->idle_timeout) {
		reload_item(r, true, "[server] idle_timeout", "%d s -> %d s (0: off)", o->idle_timeout,
			    n->idle_timeout);
		__atomic_store_n(&o->idle_timeout, n->idle_timeout, __ATOMIC_RELAXED);
	}
	if (o->idle_timeout_busy != n->idle_timeout_busy) {
		reload_item(r, true, "[server] idle_timeout_busy", "%d s -> %d s (0: off)",
			    o->idle_timeout_busy, n->idle_timeout_busy);
		__atomic_store_n(&o->idle_timeout_busy, n->idle_timeout_busy, __ATOMIC_RELAXED);
	}
	if (o->buffer_limit != n->buffer_limit) {
		reload_item(r, true, "[server] buffer_limit", "%llu MiB -> %llu MiB (buffers over the new "
			    "limit are given back as their requests finish)",
			    (unsigned long long)(o->buffer_limit >> 20), (unsigned long long)(n->buffer_limit >> 20));
		__atomic_store_n(&o->buffer_limit, n->buffer_limit, __ATOMIC_RELAXED);
	}
	if (!same_str(o->default_export, n->default_export)) {
		/* read by handshakes only, on this thread */
		reload_item(r, true, "[server] default_export", "%s -> %s (new handshakes; the empty "
			    "export name %s)", show(o->default_export), show(n->default_export),
			    n->default_export ? "picks it" : "is refused");
		free(o->default_export);
		o->default_export = n->default_export;
		o->default_export_line = n->default_export_line;
		n->default_export = NULL;
	}
	if (o->handshake_timeout != n->handshake_timeout) {
		reload_item(r, true, "[server] handshake_timeout", "%d s -> %d s (new connections)",
			    o->handshake_timeout, n->handshake_timeout);
		o->handshake_timeout = n->handshake_timeout;
	}
	if (o->shutdown_timeout != n->shutdown_timeout) {
		reload_item(r, true, "[server] shutdown_timeout", "%d s -> %d s", o->shutdown_timeout,
			    n->shutdown_timeout);
		__atomic_store_n(&o->shutdown_timeout, n->shutdown_timeout, __ATOMIC_RELAXED);
	}
	if (o->poll_us != n->poll_us) {
		reload_item(r, true, "[server] poll_us", "%d us -> %d us", o->poll_us, n->poll_us);
		__atomic_store_n(&o->poll_us, n->poll_us, __ATOMIC_RELAXED);
	}
}

/*
 * Main thread.  See flashd.h, "Reload".  Applied live: per-ioDimm
 * description, verbose, max_connections, max_connections_per_address,
 * max_handshakes, max_handshakes_per_address, idle_timeout,
 * idle_timeout_busy, buffer_limit, default_export, handshake_timeout (new
 * handshakes), shutdown_timeout and poll_us (read by the ioDimm threads:
 * atomic stores of ints), per-ioDimm allow, allow_ro and list_denied
 * (reload_dimm), the TLS key files (reload_tls).  Everything else that
 * differs is reported.
 */
void server_reload(struct server *s, const char *why, struct reload_result *r)
{
	memset(r, 0, sizeof *r);
	struct server_cfg *o = &s->cfg, n;
	char err[1100];
	if (!o->config_file) {
		r->rc = -ENOENT;
		snprintf(r->error, sizeof r->error, "flashd runs without a configuration file "
			 "(the embedded default): nothing to reload");
		log_warn("%s: reload: %s", why, r->error);
		return;
	}
	snprintf(r->config, sizeof r->config, "%s", o->config_file);
	sd_notifyf(0, "RELOADING=1\nSTATUS=reloading %s\nMONOTONIC_USEC=%llu", o->config_file,
		   (unsigned long long)(mono_ns() / 1000));
	log_info("%s: reloading %s", why, o->config_file);
	if (config_build(&cli_cfg, o->config_file, fallback_state_dir, &n, err, sizeof err)) {
		r->rc = -EINVAL;
		snprintf(r->error, sizeof r->error, "%s", err);
		log_err("reload: %s; nothing changed, the running configuration is kept", err);
		goto out;
	}
	reload_restart_keys(r, o, &n);
	reload_dimms(r, o, &n);
	reload_live(s, r, &n);
	monitor_reload(s, &n, r);
	log_info("reload of %s done: %d change(s) applied, %d not applied%s", o->config_file,
		 r->napplied, r->nnot_applied, r->nnot_applied ? " (they need a restart)" : "");
	config_free(&n);
out:
	server_update_status(s);
	sd_notify(0, "READY=1");
}

/* Exit: what reloads kept. */
void reload_exit(void)
{
	config_free(&cli_cfg);
	free(fallback_state_dir);
	for (int i = 0; i < nretired; i++)
		free(retired[i]);
	free(retired);
}
