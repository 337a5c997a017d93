/*
 * server/dimm.c - one ioDimm: its simulated NAND, its FTL and the thread
 * and event loop that own both, and the command channel's queues (the
 * ioDimm's, and the server's done queue at both ends: dimm_cmd_reply
 * appends, dimm_cmds_done takes for the main thread).
 *
 * Start: open (or create and format) the NAND image, open the FTL (crash
 * recovery happens here), report the result (the main thread decides
 * whether flashd starts).  Whatever the result, the thread then runs its
 * loop until flashd stops: it adopts connections handed over by the main
 * thread, drives the FTL, arms a timer for the medium's next completion when
 * its timing model is on, and runs the commands the main thread posts
 * (flashd.h, "Command channel"):
 *   STATUS      a snapshot: FTL info and statistics, server I/O counters
 *   ATTACH      open the image and the FTL (as at start; a format that
 *               differs from the [dimm] keys is a warning here, not an error)
 *   DETACH      answer what is in flight, and what arrives after with
 *               NBD_ESHUTDOWN; close each connection once it is idle
 *               (force-closed after shutdown_timeout), close the FTL with a
 *               checkpoint, close the image (unlocking it)
 *   FORMAT      low-level format of the image (only while detached)
 *   CHECKPOINT  hold new requests, wait until the FTL has nothing in flight,
 *               close it (the checkpoint) and open it again, let requests go
 *               on; the connections stay open (ftl.h has no checkpoint call)
 * Stop: stop reading requests, finish and answer those in flight, close the
 * connections, close the FTL (checkpoint), close the image.  A client that
 * stops taking its replies cannot hold the stop (or a detach) up:
 * shutdown_timeout seconds after it began, the connections still open are
 * force-closed (replies dropped).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/queue.h"
#include "common/units.h"
#include "hw/nand_sim.h" /* fault injection (NAND_CAP_SIM) */
#include "server/flashd.h"
#include "server/nbd_proto.h"

/* ---- latency buckets ---------------------------------------------------- */

/* Upper bounds: 1-2-3-5-7 per decade from 1 us (1-1.5-2-3-5-7 from 10 us),
 * to 10 s.  Prometheus buckets (le) and flashctl's percentiles use them. */
#define US 1000ull
const uint64_t lat_bounds_ns[LAT_NBOUNDS] = {
	1 * US, 2 * US, 3 * US, 5 * US, 7 * US,
	10 * US, 15 * US, 20 * US, 30 * US, 50 * US, 70 * US,
	100 * US, 150 * US, 200 * US, 300 * US, 500 * US, 700 * US,
	1000 * US, 1500 * US, 2000 * US, 3000 * US, 5000 * US, 7000 * US,
	10000 * US, 15000 * US, 20000 * US, 30000 * US, 50000 * US, 70000 * US,
	100000 * US, 200000 * US, 500000 * US,
	1000000 * US, 2000000 * US, 5000000 * US, 10000000 * US,
};
#undef US
const char *const io_kind_names[IOK_N] = { "read", "write", "flush", "trim", "write_zeroes", "other" };
const char *const lat_class_names[LAT_N] = { "read", "write", "flush", "other" };

int lat_bucket(uint64_t ns)
{
	int lo = 0, hi = LAT_NBOUNDS; /* the answer is in [lo, hi] */
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (ns <= lat_bounds_ns[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

const char *dimm_mstate_name(enum dimm_mstate st)
{
	switch (st) {
	case DM_STARTING: return "starting";
	case DM_ATTACHED: return "attached";
	case DM_DETACHED: return "detached";
	case DM_FAILED: return "failed";
	case DM_ATTACHING: return "attaching";
	case DM_DETACHING: return "detaching";
	case DM_FORMATTING: return "formatting";
	case DM_CHECKPOINTING: return "checkpointing";
	}
	return "?";
}

/* ---- the FTL's messages -------------------------------------------------- */

/* The ioDimm whose thread this is (dimm_main), NULL on other threads. */
static __thread const struct dimm *thread_dimm;

void dimm_ftl_log(void *arg, int level, const char *msg)
{
	log_msg(level, "%s: %s", thread_dimm ? thread_dimm->cfg->name : "ftl", msg);
}

/* ---- helpers ------------------------------------------------------------ */

static void dimm_arm_timer(struct dimm *d)
{
	uint64_t due = d->ftl ? ftl_next_deadline(d->ftl) : UINT64_MAX;
	if (due == UINT64_MAX) {
		evtimer_del(d->timer_ev);
		return;
	}
	uint64_t now = nand_now(d->dev);
	uint64_t delta = due > now ? due - now : 0;
	struct timeval tv = { (time_t)(delta / 1000000000u), (suseconds_t)(delta % 1000000000u / 1000u) };
	evtimer_add(d->timer_ev, &tv);
}

static void cmd_msg(struct dimm_cmd *cmd, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void cmd_msg(struct dimm_cmd *cmd, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd->msg, sizeof cmd->msg, fmt, ap);
	va_end(ap);
	cmd->rc = rc;
}

/* What both threads can say about an ioDimm: names and counts. */
static void status_names(struct dimm *d, struct dimm_status *st)
{
	memset(st, 0, sizeof *st);
	snprintf(st->name, sizeof st->name, "%s", d->cfg->name);
	snprintf(st->export_name, sizeof st->export_name, "%s", d->cfg->export_name);
	snprintf(st->card, sizeof st->card, "%s", d->cfg->card ? d->cfg->card : "");
	snprintf(st->backend, sizeof st->backend, "%s", d->cfg->backend);
	snprintf(st->preset, sizeof st->preset, "%s", d->cfg->preset);
	/* a preset describes a simulated card; raw NAND has no preset */
	const char *model = strcmp(d->cfg->backend, "sim") ? NULL
			    : nand_preset_description(d->cfg->preset);
	snprintf(st->model, sizeof st->model, "%s", model ? model : "");
	snprintf(st->image, sizeof st->image, "%s", d->cfg->image);
	st->readonly = d->cfg->readonly;
	st->timing = d->cfg->timing;
}

void dimm_status_main(struct dimm *d, struct dimm_status *st)
{
	status_names(d, st);
	snprintf(st->state, sizeof st->state, "%s", dimm_mstate_name(d->mstate));
	st->attached = d->mstate == DM_ATTACHED || d->mstate == DM_CHECKPOINTING;
	st->beacon = d->beacon;
	st->drbd = d->drbd;
	pthread_mutex_lock(&d->lock);
	st->connections = d->nconns;
	st->total_connections = d->total_conns;
	if (d->mstate == DM_FAILED)
		snprintf(st->error, sizeof st->error, "%s", d->open_errmsg);
	pthread_mutex_unlock(&d->lock);
}

/* ioDimm thread: a full snapshot. */
static void dimm_snapshot(struct dimm *d, struct dimm_status *st)
{
	status_names(d, st);
	st->answered = true;
	st->attached = d->ftl != NULL;
	if (d->ftl) {
		ftl_get_info(d->ftl, &st->info);
		ftl_get_stats(d->ftl, &st->stats);
		if (st->stats.ram_bytes > d->ram_peak)
			d->ram_peak = st->stats.ram_bytes;
		snprintf(st->state, sizeof st->state, "%s", ftl_state_name(st->info.state));
		if (st->info.error)
			snprintf(st->error, sizeof st->error, "%s", strerror(-st->info.error));
		st->page_size = d->dev->geo.page_size;
		st->gc_pages_relocated = d->gc_base_pages + st->stats.gc_pages_relocated;
		st->gc_blocks_collected = d->gc_base_blocks + st->stats.gc_blocks_collected;
	} else {
		st->gc_pages_relocated = d->gc_base_pages;
		st->gc_blocks_collected = d->gc_base_blocks;
	}
	st->ram_peak = d->ram_peak;
	st->io = d->io;
	pthread_mutex_lock(&d->lock);
	if (!d->ftl) {
		snprintf(st->state, sizeof st->state, "%s", d->open_error ? "failed" : "detached");
		if (d->open_error)
			snprintf(st->error, sizeof st->error, "%s", d->open_errmsg);
	}
	st->connections = d->nconns;
	st->total_connections = d->total_conns;
	pthread_mutex_unlock(&d->lock);
}

/* Record the result of an open (start-up or attach) for the main thread. */
static void set_open_result(struct dimm *d, int rc, const char *msg)
{
	pthread_mutex_lock(&d->lock);
	d->open_error = rc;
	snprintf(d->open_errmsg, sizeof d->open_errmsg, "%s", rc ? msg : "");
	pthread_mutex_unlock(&d->lock);
}

/* ---- the command channel ------------------------------------------------ */

/* Every command on the queue HEAD .. TAIL, taken under LOCK (the caller
 * owns the chain); NULL if it was empty. */
static struct dimm_cmd *cmds_take(pthread_mutex_t *lock, struct dimm_cmd **head,
				  struct dimm_cmd **tail)
{
	pthread_mutex_lock(lock);
	struct dimm_cmd *cmds = *head;
	*head = *tail = NULL;
	pthread_mutex_unlock(lock);
	return cmds;
}

struct dimm_cmd *dimm_cmds_done(struct server *srv)
{
	return cmds_take(&srv->cmd_lock, &srv->done, &srv->done_tail);
}

void dimm_cmd_reply(struct dimm_cmd *cmd)
{
	struct server *srv = cmd->d->srv;
	pthread_mutex_lock(&srv->cmd_lock);
	QUEUE_APPEND(srv->done, srv->done_tail, cmd, next);
	pthread_mutex_unlock(&srv->cmd_lock);
	event_active(srv->cmd_ev, EV_READ, 0);
}

void dimm_post(struct dimm *d, struct dimm_cmd *cmd)
{
	cmd->d = d;
	cmd->next = NULL;
	pthread_mutex_lock(&d->lock);
	bool stopped = d->stop || !d->wake_ev;
	if (!stopped)
		QUEUE_SPLICE(d->cmds, d->cmds_tail, cmd, cmd, next);
	pthread_mutex_unlock(&d->lock);
	if (stopped) {
		cmd_msg(cmd, -ESHUTDOWN, "%s: flashd is shutting down", d->cfg->name);
		dimm_cmd_reply(cmd);
		return;
	}
	event_active(d->wake_ev, EV_READ, 0);
}

/* Close the FTL (a checkpoint unless it failed or writes nothing); the
 * device stays open.  Counters that start again at each open are carried
 * over.  *what (if not NULL): what a successful close wrote, for the log. */
static int dimm_close_ftl(struct dimm *d, const char **what)
{
	struct ftl_stats s;
	struct ftl_info fi;
	ftl_get_info(d->ftl, &fi);
	if (what) /* not the configuration's readonly: the FTL may have made itself read-only */
		*what = fi.writes_nothing ? "read-only: nothing written" : "checkpoint written";
	ftl_get_stats(d->ftl, &s);
	d->gc_base_pages += s.gc_pages_relocated;
	d->gc_base_blocks += s.gc_blocks_collected;
	if (s.ram_bytes > d->ram_peak)
		d->ram_peak = s.ram_bytes;
	int rc = ftl_close(d->ftl);
	d->ftl = NULL;
	return rc;
}

/* Close the NAND device (after the FTL), and stop watching it. */
static void dimm_close_dev(struct dimm *d)
{
	if (d->nand_ev) {
		event_free(d->nand_ev);
		d->nand_ev = NULL;
	}
	nand_close(d->dev);
	d->dev = NULL;
}

/* The backend has completions ready (its event fd): the FTL collects them. */
static void nand_event_cb(evutil_socket_t fd, short what, void *arg)
{
	dimm_kick(arg);
}

/* ---- opening ------------------------------------------------------------ */

/* What the backend noticed and repaired while opening the medium. */
/* The NAND backend's lines, at their priority (nand.h: syslog's numbers),
 * named by the ioDimm. */
_Static_assert(NAND_LOG_ERR == LOG_ERR && NAND_LOG_WARNING == LOG_WARNING &&
	       NAND_LOG_NOTICE == LOG_NOTICE && NAND_LOG_INFO == LOG_INFO, "nand.h's levels are syslog's");
static void dimm_nand_log(void *arg, int level, const char *msg)
{
	struct dimm *d = arg;
	log_msg(level, "%s: %s", d->cfg->name, msg);
}

static void describe_format(const struct ftl_info *fi, char *buf, size_t len)
{
	snprintf(buf, len, "%llu sectors of %u bytes (%s), %.1f%% over-provisioning",
		 (unsigned long long)(fi->capacity / fi->sector_size), fi->sector_size,
		 SIZE_TEXT((double)fi->capacity), fi->op_percent);
}

/* The capacity the [dimm] keys ask for on dev (as ftl_format computes it),
 * or 0 if they leave it to the default. */
static uint64_t cfg_capacity(const struct dimm_cfg *c, struct nand_dev *dev, uint32_t parity)
{
	if (c->capacity)
		return c->capacity / FTL_UNIT_SIZE * FTL_UNIT_SIZE;
	if (c->capacity_pct > 0)
		return (uint64_t)((double)ftl_capacity_for_format(dev, ftl_stock_op_percent(dev), parity) *
				  c->capacity_pct / 100.0) / FTL_UNIT_SIZE * FTL_UNIT_SIZE;
	if (c->op_percent > 0)
		return ftl_capacity_for_format(dev, c->op_percent, parity);
	return ftl_capacity_for_format(dev, ftl_stock_op_percent(dev), parity);
}

static void cfg_capacity_text(const struct dimm_cfg *c, char *buf, size_t len)
{
	if (c->capacity)
		snprintf(buf, len, "capacity = %llu bytes", (unsigned long long)c->capacity);
	else if (c->capacity_pct > 0)
		snprintf(buf, len, "capacity = %g%%", c->capacity_pct);
	else if (c->op_percent > 0)
		snprintf(buf, len, "op = %g", c->op_percent);
	else
		snprintf(buf, len, "the stock capacity");
}

/*
 * Does the image's format (fi) differ from what the file's [dimm] keys ask
 * for?  Only keys given in the file count (the embedded default and keys
 * left out accept any format).  If so, why says what differs and the way
 * out, and the result is true.
 */
static bool format_mismatch(struct dimm *d, const struct ftl_info *fi, char *why, size_t len)
{
	const struct dimm_cfg *c = d->cfg;
	char want[160] = "", have[160], cap[64];
	/* the parity the keys ask for, or (not given) the image's */
	uint64_t wcap = cfg_capacity(c, d->dev, c->parity_set ? c->parity_width : fi->parity_width);
	bool sec = c->sector_size_set && c->sector_size != fi->sector_size;
	bool capm = c->capacity_set && wcap != fi->capacity;
	bool par = c->parity_set && c->parity_width != fi->parity_width;
	if (!sec && !capm && !par)
		return false;
	if (par && !sec && !capm) {
		describe_format(fi, have, sizeof have);
		snprintf(why, len,
			 "image %s is formatted with %u parity dies per stripe (%s), but [dimm %s] in "
			 "%s asks for parity_width = %u; flashd never reformats: erase it with "
			 "'flashctl format %s --parity-width %u --yes' (%s detached), or make [dimm %s] "
			 "match the image",
			 c->image, fi->parity_width, have, c->name,
			 d->srv->cfg.config_file ? d->srv->cfg.config_file : "the configuration",
			 c->parity_width, c->name, c->parity_width, c->name, c->name);
		return true;
	}
	cfg_capacity_text(c, cap, sizeof cap);
	if (sec && capm)
		snprintf(want, sizeof want, "sector_size = %u and %s (%s)", c->sector_size, cap,
			 SIZE_TEXT((double)wcap));
	else if (sec)
		snprintf(want, sizeof want, "sector_size = %u", c->sector_size);
	else
		snprintf(want, sizeof want, "%s (%s)", cap, SIZE_TEXT((double)wcap));
	describe_format(fi, have, sizeof have);
	snprintf(why, len,
		 "image %s is formatted with %s, but [dimm %s] in %s asks for %s; flashd never "
		 "reformats: erase it with the new format by 'flashctl format %s --yes' (%s detached) "
		 "or, flashd stopped, 'flashctl format IMAGE', or make [dimm %s] match the image",
		 c->image, have, c->name, d->srv->cfg.config_file ? d->srv->cfg.config_file : "the configuration",
		 want, c->name, c->name, c->name);
	return true;
}

/* Has flashd been asked to stop (before this ioDimm finished opening)? */
static bool stop_asked(struct dimm *d)
{
	pthread_mutex_lock(&d->lock);
	bool stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	return stop;
}

/*
 * Open the image (creating it the first time) and the FTL.  Only a blank
 * image is formatted: one that holds anything without a valid superblock is
 * refused with the way out (flashctl recover), never reformatted.  An image
 * whose format differs from the file's [dimm] keys is refused at start-up
 * (strict) and opened with a warning on attach.  On failure nothing stays
 * open (the image is unlocked, so flashctl can work on it).  A stop asked
 * for meanwhile (a signal while flashd starts) ends it before the next
 * step with -ECANCELED: creating and formatting an image are never left
 * half-done (hw/nand.h, ftl/ftl.h), so any step is a place to stop.
 */
static int dimm_open_media(struct dimm *d, bool strict, char *err, size_t errlen)
{
	struct dimm_cfg *c = d->cfg;
	struct stat st;
	if (stop_asked(d)) {
		snprintf(err, errlen, "not opened: flashd is stopping");
		return -ECANCELED;
	}
	bool exists = stat(c->image, &st) == 0;
	struct nand_spec ns = { .backend = c->backend, .path = c->image, .preset = c->preset,
				.create = !exists, .readonly = c->readonly && exists,
				.timing = c->timing, .sync_on_flush = c->sync, .log = dimm_nand_log,
				.log_arg = d };
	int rc = nand_open(&ns, &d->dev, err, errlen);
	if (rc) {
		d->dev = NULL;
		return rc;
	}
	struct ftl_info fi;
	char why[1024];
	why[0] = 0;
	rc = ftl_probe(d->dev, &fi, why, sizeof why);
	if (rc == -EUCLEAN) {
		snprintf(err, errlen, "%s: %s; not formatting it: 'flashctl recover %s' reports what is "
				      "there and can rebuild the superblock ('flashctl format' erases it)",
			 c->image, why, c->image);
		goto fail;
	}
	if (rc && rc != -ENODATA) {
		snprintf(err, errlen, "%s: %s", c->image, why[0] ? why : strerror(-rc));
		goto fail;
	}
	if (rc == 0 && format_mismatch(d, &fi, why, sizeof why)) {
		if (strict) {
			snprintf(err, errlen, "%s", why);
			rc = -EINVAL;
			goto fail;
		}
		log_warn("%s: %s", c->name, why);
	}
	if (rc == -ENODATA) {
		if (c->readonly) {
			snprintf(err, errlen, "%s is not formatted and the ioDimm is read-only", c->image);
			rc = -EINVAL;
			goto fail;
		}
		struct ftl_format_params fp = { .sector_size = c->sector_size,
						.capacity_bytes = c->capacity,
						.op_percent = c->op_percent,
						.parity_width = c->parity_width };
		if (c->capacity_pct > 0)
			fp.capacity_bytes = cfg_capacity(c, d->dev, c->parity_width);
		if (stop_asked(d)) {
			snprintf(err, errlen, "not formatted: flashd is stopping");
			rc = -ECANCELED;
			goto fail;
		}
		log_info("%s: formatting %s (%s, %u-byte sectors)", c->name, c->image, c->preset,
			 c->sector_size);
		rc = ftl_format(d->dev, &fp, err, errlen);
		if (rc)
			goto fail;
	}
	if (stop_asked(d)) {
		snprintf(err, errlen, "not opened: flashd is stopping");
		rc = -ECANCELED;
		goto fail;
	}
	struct ftl_open_params op = { .readonly = c->readonly,
				      .checkpoint_interval = c->cp_interval / FTL_UNIT_SIZE,
				      .no_flush_parity = c->no_flush_parity };
	rc = ftl_open(d->dev, &op, &d->ftl, err, errlen);
	if (rc)
		goto fail;
	if (nand_event_fd(d->dev) >= 0) {
		/* a backend that completes on its own threads wakes this loop */
		d->nand_ev = event_new(d->base, nand_event_fd(d->dev), EV_READ | EV_PERSIST,
				       nand_event_cb, d);
		if (!d->nand_ev || event_add(d->nand_ev, NULL) < 0) {
			snprintf(err, errlen, "cannot watch the NAND backend's completions");
			dimm_close_ftl(d, NULL);
			rc = -ENOMEM;
			goto fail;
		}
	}
	ftl_get_info(d->ftl, &d->info);
	d->size = d->info.capacity;
	char desc[256];
	dimm_describe(d, desc, sizeof desc);
	/* a slow open says where the time went (the target is a few seconds) */
	char steps[256] = "";
	if (d->info.open_ns >= 1000000000ull) {
		size_t n = 0;
		for (int i = 0; i < FTL_OPEN_STEPS && n < sizeof steps; i++)
			n += (size_t)snprintf(steps + n, sizeof steps - n, "%s %s %.2f s",
					      i ? "," : "; steps:", ftl_open_step_name(i),
					      (double)d->info.open_step_ns[i] / 1e9);
	}
	/* a crash recovery is worth a notice: the admin may not know of the crash */
	log_msg(d->info.was_clean ? LOG_INFO : LOG_NOTICE,
		"%s: %s; %s shutdown, opened in %.2f s (%llu pages replayed%s)", c->name, desc,
		d->info.was_clean ? "clean" : "unclean", (double)d->info.open_ns / 1e9,
		(unsigned long long)d->info.recovered_pages, steps);
	return 0;
fail:
	d->ftl = NULL;
	dimm_close_dev(d);
	return rc ? rc : -EIO;
}

/* ---- commands ----------------------------------------------------------- */

static void cmd_attach(struct dimm *d, struct dimm_cmd *cmd)
{
	if (d->ftl) {
		cmd_msg(cmd, 0, "%s is attached already", d->cfg->name);
		return;
	}
	char err[1024] = "";
	int rc = dimm_open_media(d, false, err, sizeof err);
	if (!rc) {
		char f[160];
		describe_format(&d->info, f, sizeof f);
		cmd_msg(cmd, 0, "%s attached: %s, export '%s'", d->cfg->name, f, d->cfg->export_name);
	} else {
		if (!err[0])
			snprintf(err, sizeof err, "%s", strerror(-rc));
		cmd_msg(cmd, rc, "%s: %s", d->cfg->name, err);
	}
	set_open_result(d, rc, err);
}

static void cmd_format(struct dimm *d, struct dimm_cmd *cmd)
{
	struct dimm_cfg *c = d->cfg;
	const struct dimm_format_req *r = &cmd->fmt;
	if (d->ftl) {
		cmd_msg(cmd, -EBUSY, "%s is attached: detach it first (flashctl detach %s)", c->name,
			c->name);
		return;
	}
	if (c->readonly) {
		cmd_msg(cmd, -EROFS, "%s is a read-only ioDimm ([dimm %s] readonly = yes)", c->name,
			c->name);
		return;
	}
	struct stat st;
	bool exists = stat(c->image, &st) == 0;
	struct nand_spec ns = { .backend = c->backend, .path = c->image, .preset = c->preset,
				.create = !exists, .timing = c->timing, .sync_on_flush = true,
				.log = dimm_nand_log, .log_arg = d };
	struct nand_dev *dev;
	char err[512] = "";
	int rc = nand_open(&ns, &dev, err, sizeof err);
	if (rc) {
		cmd_msg(cmd, rc, "%s: %s", c->name, err[0] ? err : strerror(-rc));
		return;
	}
	struct ftl_format_params fp = { .sector_size = r->sector_size ? r->sector_size : c->sector_size,
					.parity_width = r->parity_width >= 0 ? (uint32_t)r->parity_width
									     : c->parity_width };
	/* the request's size if it gives one, else the [dimm] keys' */
	if (r->capacity)
		fp.capacity_bytes = r->capacity;
	else if (r->capacity_pct > 0)
		fp.capacity_bytes = (uint64_t)((double)ftl_capacity_for_format(dev, ftl_stock_op_percent(dev),
									       fp.parity_width) *
					       r->capacity_pct / 100.0);
	else if (r->op_percent > 0)
		fp.op_percent = r->op_percent;
	else if (c->capacity || c->capacity_pct > 0)
		fp.capacity_bytes = c->capacity ? c->capacity : cfg_capacity(c, dev, fp.parity_width);
	else
		fp.op_percent = c->op_percent;
	log_info("%s: formatting %s on request (%u-byte sectors)", c->name, c->image, fp.sector_size);
	rc = ftl_format(dev, &fp, err, sizeof err);
	struct ftl_info fi;
	if (!rc)
		rc = ftl_peek_format(dev, &fi);
	if (rc) {
		nand_close(dev);
		cmd_msg(cmd, rc, "%s: format failed: %s", c->name, err[0] ? err : strerror(-rc));
		log_err("%s: format failed: %s", c->name, err[0] ? err : strerror(-rc));
		return;
	}
	char f[160], why[1024] = "";
	describe_format(&fi, f, sizeof f);
	d->dev = dev; /* format_mismatch reads the geometry */
	bool differs = format_mismatch(d, &fi, why, sizeof why);
	d->dev = NULL;
	nand_close(dev);
	set_open_result(d, 0, "");
	log_info("%s: formatted %s: %s", c->name, c->image, f);
	cmd_msg(cmd, 0, "%s formatted: %s; 'flashctl attach %s' serves it%s%s", c->name, f, c->name,
		differs ? ".  Warning: " : "", differs ? why : "");
	if (differs)
		log_warn("%s: the new format differs from the configuration: the next start of flashd "
			 "refuses %s until [dimm %s] is updated", c->name, c->name, c->name);
}

/* A checkpoint on request: the longest a client waits for it (a full map of
 * a 320 GiB ioDimm is 82k pages: a few seconds idle, longer under load) */
#define CP_REQUEST_TIMEOUT_S 120

/*
 * A stop or detach at its deadline, its connections closed: requests the
 * FTL holds while the device is too hot are given up (their connections
 * are gone: nobody gets a reply), so it closes now instead of once the
 * device has cooled (a minute from 150 C, never with a sensor stuck hot).
 * Unacknowledged, they are lost as in a power cut; flushed data is on the
 * media already.
 */
static void give_up_held(struct dimm *d, const char *what)
{
	if (!d->ftl)
		return;
	int n = ftl_give_up_held(d->ftl, -ESHUTDOWN);
	if (n)
		log_warn("%s: %s: %d request(s) held until the device cools given up (never started, "
			 "never answered); closing it hot", d->cfg->name, what, n);
}

/* Detach and checkpoint end here, from dimm_kick: a detach once the drain
 * allows, a checkpoint once the FTL has made one current. */
static void op_progress(struct dimm *d)
{
	struct dimm_cmd *cmd = d->op;
	if (cmd->type == DCMD_DETACH) {
		if (conn_drain_step(d) || !LIST_EMPTY(&d->conns) || !ftl_idle(d->ftl))
			return;
		d->op = NULL;
		evtimer_del(d->op_ev);
		const char *what;
		int rc = dimm_close_ftl(d, &what);
		dimm_close_dev(d);
		if (rc) {
			log_err("%s: detached; closing the FTL failed: %s", d->cfg->name, strerror(-rc));
			cmd_msg(cmd, 0, "%s detached; closing the FTL failed: %s (the next attach "
				"recovers from the media)", d->cfg->name, strerror(-rc));
		} else {
			log_info("%s: detached (%s, image closed)", d->cfg->name, what);
			cmd_msg(cmd, 0, "%s detached: connections closed, %s, image %s closed",
				d->cfg->name, what, d->cfg->image);
		}
		set_open_result(d, 0, "");
		dimm_snapshot(d, &cmd->st);
		dimm_cmd_reply(cmd);
		return;
	}
	/* checkpoint: the FTL writes one beside the requests (fuzzy, like its
	 * automatic ones); done once it is synced and current */
	int r = ftl_checkpoint_poll(d->ftl, cmd->cp_ticket);
	if (!r)
		return;
	d->op = NULL;
	evtimer_del(d->op_ev);
	if (r < 0) {
		cmd_msg(cmd, r, "%s: no checkpoint: the FTL failed (%s)", d->cfg->name, strerror(-r));
	} else {
		double ms = (double)(nand_now_ns() - cmd->cp_t0) / 1e6;
		log_info("%s: checkpoint written on request in %.0f ms (requests served meanwhile)",
			 d->cfg->name, ms);
		cmd_msg(cmd, 0, "%s: checkpoint written in %.0f ms (requests served meanwhile)",
			d->cfg->name, ms);
	}
	dimm_snapshot(d, &cmd->st);
	dimm_cmd_reply(cmd);
}

static void op_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dimm *d = arg;
	struct dimm_cmd *cmd = d->op;
	if (!cmd)
		return;
	if (cmd->type == DCMD_DETACH) {
		int n = conn_abort_all(d, "force-closed: the export was detached");
		if (n)
			log_warn("%s: detach: %d connection(s) still open after %d s: closed them, unsent "
				 "replies dropped", d->cfg->name, n, d->srv->cfg.shutdown_timeout);
		give_up_held(d, "detach");
	} else {
		/* the checkpoint goes on; the client stops waiting for it */
		d->op = NULL;
		cmd_msg(cmd, -ETIMEDOUT, "%s: the checkpoint was not written within %d s (it goes on "
			"in the background)", d->cfg->name, CP_REQUEST_TIMEOUT_S);
		dimm_snapshot(d, &cmd->st);
		dimm_cmd_reply(cmd);
	}
	dimm_kick(d);
}

/* A fault into the simulated NAND, on the thread that owns it; logged at
 * warning level.  The FTL finds out as it would on a real card. */
static void cmd_inject(struct dimm *d, struct dimm_cmd *cmd)
{
	const char *name = d->cfg->name;
	if (!d->ftl || !d->dev) {
		cmd_msg(cmd, -ENODEV, "%s is detached: nothing to inject into", name);
		return;
	}
	if (!(d->dev->caps & NAND_CAP_SIM)) {
		cmd_msg(cmd, -EOPNOTSUPP, "%s is not a simulated ioDimm: faults are injected into the "
			"simulator only", name);
		return;
	}
	const struct nand_geometry *g = &d->dev->geo;
	int64_t v = cmd->inject_value;
	int rc = 0;
	char what[160];
	switch (cmd->inject) {
	case INJ_DIE_FAIL:
		if ((uint64_t)v >= nand_dies(g)) {
			cmd_msg(cmd, -EINVAL, "%s: die %lld: the ioDimm has dies 0 to %u", name, (long long)v,
				nand_dies(g) - 1);
			return;
		}
		rc = nand_sim_fail_die(d->dev, (uint32_t)v);
		snprintf(what, sizeof what, "die %lld failed: every operation on it fails from now on",
			 (long long)v);
		break;
	case INJ_BAD_BLOCK:
		if ((uint64_t)v >= nand_blocks(g)) {
			cmd_msg(cmd, -EINVAL, "%s: block %lld: the ioDimm has blocks 0 to %u", name,
				(long long)v, nand_blocks(g) - 1);
			return;
		}
		rc = nand_sim_fail_block(d->dev, (uint32_t)v, true, true);
		snprintf(what, sizeof what, "block %lld gone bad: its programs and erases fail from now on",
			 (long long)v);
		break;
	case INJ_BIT_ERRORS: {
		/* the rates only, not the simulator's other fault settings */
		uint32_t corrected = (uint32_t)(v * 10 > 1000000 ? 1000000 : v * 10);
		rc = nand_sim_set_error_rates(d->dev, corrected, (uint32_t)v);
		if (v)
			snprintf(what, sizeof what, "bit errors: %lld reads per million uncorrectable, %lld "
				 "corrected", (long long)v, (long long)corrected);
		else
			snprintf(what, sizeof what, "bit errors off");
		break;
	}
	case INJ_TEMPERATURE:
		nand_sim_set_temperature_mc(d->dev, (int32_t)v);
		ftl_sensors_changed(d->ftl);
		snprintf(what, sizeof what, "controller temperature set to %.1f C (it relaxes towards "
			 "ambient from there)", v / 1000.0);
		break;
	}
	if (rc) {
		cmd_msg(cmd, rc, "%s: injection failed: %s", name, strerror(-rc));
		return;
	}
	log_warn("%s: fault injected: %s", name, what);
	cmd_msg(cmd, 0, "%s: fault injected: %s", name, what);
	dimm_kick(d); /* the FTL looks at the sensor and the media on its next turn */
}

/* Run one command; long ones (detach, checkpoint) become d->op. */
static void cmd_run(struct dimm *d, struct dimm_cmd *cmd, bool stop)
{
	cmd->rc = 0;
	cmd->msg[0] = 0;
	if (stop && cmd->type != DCMD_STATUS) {
		cmd_msg(cmd, -ESHUTDOWN, "%s: flashd is shutting down", d->cfg->name);
		dimm_snapshot(d, &cmd->st);
		dimm_cmd_reply(cmd);
		return;
	}
	if (d->op && cmd->type != DCMD_STATUS) {
		/* the main thread posts one operation at a time; be safe anyway */
		cmd_msg(cmd, -EBUSY, "%s is busy (%s in progress)", d->cfg->name,
			d->op->type == DCMD_DETACH ? "detach" : "checkpoint");
		dimm_snapshot(d, &cmd->st);
		dimm_cmd_reply(cmd);
		return;
	}
	struct timeval tv = { d->srv->cfg.shutdown_timeout, 0 };
	switch (cmd->type) {
	case DCMD_STATUS:
		/* the FTL reads the sensor while it works; an idle one now, so
		 * status shows the temperature of the moment (and a device that
		 * cooled down while idle leaves its thermal stop) */
		if (d->ftl)
			ftl_sensors_changed(d->ftl);
		break;
	case DCMD_ATTACH:
		cmd_attach(d, cmd);
		break;
	case DCMD_FORMAT:
		cmd_format(d, cmd);
		break;
	case DCMD_STALL: {
		struct timespec ts = { cmd->stall_ms / 1000, (long)(cmd->stall_ms % 1000) * 1000000 };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		cmd_msg(cmd, 0, "%s: stalled %u ms", d->cfg->name, cmd->stall_ms);
		break;
	}
	case DCMD_INJECT:
		cmd_inject(d, cmd);
		break;
	case DCMD_DETACH: {
		if (!d->ftl) {
			cmd_msg(cmd, 0, "%s is detached already", d->cfg->name);
			break;
		}
		/* as fio-detach refuses a device in use: a client connected
		 * loses its device (ctl_verbs.c puts the export back) */
		char who[1024];
		int n = cmd->force ? 0 : conn_describe_all(d, who, sizeof who);
		if (n) {
			cmd_msg(cmd, -EBUSY, "%s is in use: %d client(s) connected: %s; stop them first, "
				"or detach --force (their requests in flight are answered, then they are "
				"disconnected)", d->cfg->name, n, who);
			break;
		}
		log_info("%s: detaching: closing its connections once their requests are answered",
			 d->cfg->name);
		d->op = cmd;
		conn_drain_all(d, "the export was detached");
		evtimer_add(d->op_ev, &tv);
		return; /* op_progress replies */
	}
	case DCMD_CHECKPOINT:
		if (!d->ftl) {
			cmd_msg(cmd, -ENODEV, "%s is detached: nothing to checkpoint", d->cfg->name);
			break;
		}
		if (d->cfg->readonly) {
			cmd_msg(cmd, -EROFS, "%s is read-only: nothing to checkpoint", d->cfg->name);
			break;
		}
		cmd->cp_ticket = ftl_checkpoint_request(d->ftl);
		if (!cmd->cp_ticket) {
			cmd_msg(cmd, -EIO, "%s: no checkpoint: the FTL has failed or is read-only (worn "
				"out: see status)", d->cfg->name);
			break;
		}
		cmd->cp_t0 = nand_now_ns();
		d->op = cmd;
		struct timeval cp_tv = { CP_REQUEST_TIMEOUT_S, 0 };
		evtimer_add(d->op_ev, &cp_tv);
		return; /* op_progress replies */
	}
	dimm_snapshot(d, &cmd->st);
	dimm_cmd_reply(cmd);
}

/* ---- the loop ----------------------------------------------------------- */

/* Drive the FTL, send what is ready, re-arm the timer; leave when stopped. */
void dimm_kick(struct dimm *d)
{
	/* answer what completed inside ftl_submit first, then let the FTL
	 * program and collect; send what that completed */
	conn_flush_dirty(d);
	if (d->ftl) {
		uint64_t t0 = nand_now_ns();
		ftl_poll(d->ftl);
		uint64_t turn = nand_now_ns() - t0;
		if (turn > d->io.ftl_turn_max_ns)
			d->io.ftl_turn_max_ns = turn;
		d->io.ftl_turns_over_10ms += turn > 10000000u;
		conn_flush_dirty(d);
	}
	if (d->op)
		op_progress(d);
	pthread_mutex_lock(&d->lock);
	bool stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	if (stop && LIST_EMPTY(&d->conns) && !d->op && (!d->ftl || ftl_idle(d->ftl))) {
		event_base_loopbreak(d->base);
		return;
	}
	dimm_arm_timer(d);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	dimm_kick(arg);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dimm *d = arg;
	int n = conn_abort_all(d, "force-closed at the shutdown deadline");
	if (n)
		log_warn("%s: shutdown deadline (%d s) passed with %d connection(s) open: closed them, "
			 "unsent replies dropped", d->cfg->name, d->srv->cfg.shutdown_timeout, n);
	give_up_held(d, "stop");
	dimm_kick(d);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dimm *d = arg;
	pthread_mutex_lock(&d->lock);
	struct handoff *in = d->incoming;
	d->incoming = NULL;
	struct dimm_cmd *cmds = d->cmds;
	d->cmds = d->cmds_tail = NULL;
	bool stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	while (in) {
		struct handoff *next = in->next;
		conn_adopt(d, in);
		in = next;
	}
	if (stop && !d->stopping) {
		d->stopping = true;
		struct timeval tv = { d->srv->cfg.shutdown_timeout, 0 };
		evtimer_add(d->deadline_ev, &tv);
	}
	if (stop) {
		conn_stop_all(d, "server shutting down");
		if (d->op && d->op->type == DCMD_CHECKPOINT) {
			/* the closing checkpoint will do */
			struct dimm_cmd *op = d->op;
			d->op = NULL;
			evtimer_del(d->op_ev);
			cmd_msg(op, -ESHUTDOWN, "%s: flashd is shutting down (its close writes the "
				"checkpoint)", d->cfg->name);
			dimm_snapshot(d, &op->st);
			dimm_cmd_reply(op);
		}
	}
	while (cmds) {
		struct dimm_cmd *next = cmds->next;
		cmd_run(d, cmds, stop);
		cmds = next;
	}
	dimm_kick(d);
}

/* A client's READ waits inside the FTL and the next NAND operation is due
 * this soon: poll until it completes rather than sleep on the timer (a
 * wake-up costs 20-70 us on a virtual machine, against a 4 KiB read's
 * 166 us on the iodimm presets).  A page read with its transfer, and room.
 * Writes wait on the write buffer, not on an operation: no polling for
 * them. */
#define DUE_SPIN_NS 250000u

/* The FTL's next deadline is near and a client's READ waits inside it:
 * poll until then (on nand_now_ns()'s clock; at most now: sleep).  The deadline is on
 * the device's clock (nand_now()), which need not be the host's. */
static uint64_t due_spin_until(struct dimm *d)
{
	if (!d->ftl)
		return 0;
	uint64_t due = ftl_next_deadline(d->ftl), now = nand_now(d->dev);
	if (!d->reads_in_ftl || due == UINT64_MAX || due > now + DUE_SPIN_NS)
		return 0;
	return nand_now_ns() + (due > now ? due - now : 0);
}

/*
 * The event loop.  After activity (a receive, or a reply sent) it keeps
 * polling without sleeping for poll_us: a client that sends its next request
 * within that window (queue depth 1: the time to consume a reply) finds this
 * thread awake, instead of
 * paying for a wake-up (a cross-CPU interrupt and a context switch, 20-70 us
 * on a virtual machine).  Past that window it still polls while a client
 * waits on an operation due within DUE_SPIN_NS.  Cost: up to poll_us of CPU
 * after the last request, and the wait for such operations; poll_us 0: no
 * polling at all.
 */
static void dimm_loop(struct dimm *d)
{
	while (!event_base_got_break(d->base)) {
		event_base_loop(d->base, EVLOOP_ONCE);
		/* read each time: a reload changes it live */
		const uint64_t spin_ns =
			(uint64_t)__atomic_load_n(&d->srv->cfg.poll_us, __ATOMIC_RELAXED) * 1000u;
		if (!spin_ns)
			continue;
		uint64_t seen = d->activity, until = nand_now_ns() + spin_ns;
		while (!event_base_got_break(d->base)) {
			event_base_loop(d->base, EVLOOP_NONBLOCK);
			uint64_t now = nand_now_ns();
			if (d->activity != seen) {
				seen = d->activity;
				until = now + spin_ns;
			} else if (now >= until) {
				uint64_t due = due_spin_until(d);
				if (due <= now)
					break;
				until = due;
			}
		}
	}
}

static void *dimm_main(void *arg)
{
	struct dimm *d = arg;
	thread_dimm = d;
	char err[1024] = "";
	int rc = 0;
	struct event_config *ec = event_config_new();
	if (ec)
		event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
	d->base = ec ? event_base_new_with_config(ec) : NULL;
	if (ec)
		event_config_free(ec);
	struct event *wake = NULL;
	if (d->base) {
		wake = event_new(d->base, -1, EV_PERSIST | EV_READ, wake_cb, d);
		d->timer_ev = evtimer_new(d->base, timer_cb, d);
		d->deadline_ev = evtimer_new(d->base, deadline_cb, d);
		d->op_ev = evtimer_new(d->base, op_deadline_cb, d);
	}
	if (!wake || !d->timer_ev || !d->deadline_ev || !d->op_ev) {
		rc = -ENOMEM;
		snprintf(err, sizeof err, "cannot set up its event loop");
		if (wake)
			event_free(wake);
		wake = NULL;
	} else {
		event_add(wake, NULL);
		rc = dimm_open_media(d, true, err, sizeof err);
	}
	pthread_mutex_lock(&d->lock);
	d->wake_ev = wake;          /* dimm_post and dimm_stop use it from now on */
	if (!wake)
		d->stop = true;     /* no loop: commands are refused */
	d->ready = true;
	d->open_error = rc;
	snprintf(d->open_errmsg, sizeof d->open_errmsg, "%s", rc ? (err[0] ? err : strerror(-rc)) : "");
	/* under the lock: once the main thread sees ready, this is done */
	event_active(d->srv->start_ev, EV_READ, 0);
	pthread_mutex_unlock(&d->lock);
	if (!wake)
		return NULL;

	dimm_loop(d);

	if (d->op) {
		cmd_msg(d->op, -ESHUTDOWN, "%s: flashd is shutting down", d->cfg->name);
		dimm_cmd_reply(d->op);
		d->op = NULL;
	}
	if (d->ftl) {
		const char *what;
		rc = dimm_close_ftl(d, &what);
		if (rc)
			log_err("%s: closing the FTL failed: %s", d->cfg->name, strerror(-rc));
		else
			log_info("%s: closed cleanly (%s)", d->cfg->name, what);
	}
	dimm_close_dev(d);
	/* commands posted before the stop but not run: every one comes back */
	struct dimm_cmd *cmds = cmds_take(&d->lock, &d->cmds, &d->cmds_tail);
	while (cmds) {
		struct dimm_cmd *next = cmds->next;
		cmd_msg(cmds, -ESHUTDOWN, "%s: flashd is shutting down", d->cfg->name);
		dimm_cmd_reply(cmds);
		cmds = next;
	}
	return NULL;
}

int dimm_start(struct dimm *d)
{
	pthread_mutex_init(&d->lock, NULL);
	d->mstate = DM_STARTING;
	/* the thread and those it starts leave the stop and reload signals
	 * to the main thread's loop (main.c, "signals") */
	sigset_t sigs, old;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	int rc = pthread_create(&d->thread, NULL, dimm_main, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	d->thread_started = rc == 0;
	if (rc == 0) { /* "top -H" and perf name it: fd:NAME, 15 bytes at most */
		char tn[16];
		snprintf(tn, sizeof(tn), "fd:%s", d->cfg->name);
		pthread_setname_np(d->thread, tn);
	}
	return -rc;
}

bool dimm_ready(struct dimm *d, int *rc)
{
	pthread_mutex_lock(&d->lock);
	bool ready = d->ready;
	if (rc)
		*rc = d->open_error;
	pthread_mutex_unlock(&d->lock);
	return ready;
}

void dimm_adopt(struct dimm *d, struct handoff *h)
{
	pthread_mutex_lock(&d->lock);
	h->next = d->incoming;
	d->incoming = h;
	d->nconns++;
	d->total_conns++;
	pthread_mutex_unlock(&d->lock);
	event_active(d->wake_ev, EV_READ, 0);
}

void dimm_stop(struct dimm *d)
{
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	struct event *wake = d->wake_ev;
	pthread_mutex_unlock(&d->lock);
	if (wake)
		event_active(wake, EV_READ, 0);
}

void dimm_join(struct dimm *d)
{
	if (!d->thread_started)
		return;
	pthread_join(d->thread, NULL);
	d->thread_started = false;
	if (d->wake_ev)
		event_free(d->wake_ev);
	if (d->timer_ev)
		event_free(d->timer_ev);
	if (d->deadline_ev)
		event_free(d->deadline_ev);
	if (d->op_ev)
		event_free(d->op_ev);
	if (d->base)
		event_base_free(d->base);
	d->wake_ev = d->timer_ev = d->deadline_ev = d->op_ev = NULL;
	d->base = NULL;
}

uint16_t dimm_tflags(struct dimm *d, bool structured)
{
	uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
		     NBD_FLAG_CAN_MULTI_CONN | NBD_FLAG_SEND_CACHE;
	if (d->cfg->readonly)
		f |= NBD_FLAG_READ_ONLY;
	else
		f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
	if (structured)
		f |= NBD_FLAG_SEND_DF;
	return f;
}

void dimm_describe(struct dimm *d, char *buf, size_t len)
{
	if (d->cfg->description) {
		snprintf(buf, len, "%s", d->cfg->description);
		return;
	}
	bool mtd = !strcmp(d->cfg->backend, "mtd");
	snprintf(buf, len, "%s %s (%s): %s, %u-byte sectors, %.0f%% over-provisioning%s",
		 mtd ? "raw NAND" : "simulated ioDimm", d->cfg->name, mtd ? d->cfg->image : d->cfg->preset,
		 SIZE_TEXT((double)d->info.capacity),
		 d->info.sector_size, d->info.op_percent, d->cfg->readonly ? ", read-only" : "");
}
