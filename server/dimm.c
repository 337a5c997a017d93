/*
 * server/dimm.c - one ioDimm: its simulated NAND, its FTL and the thread
 * and event loop that own both.
 *
 * Start: open (or create and format) the NAND image, open the FTL (crash
 * recovery happens here), report ready.  Run: adopt connections handed over
 * by the main thread, drive the FTL, and arm a timer for the medium's next
 * completion when its timing model is on.  Stop: stop reading requests,
 * finish and answer those in flight, close the connections, close the FTL
 * (checkpoint), close the image.  A client that stops taking its replies
 * cannot hold the stop up: shutdown_timeout seconds after it began, the
 * connections still open are force-closed (replies dropped).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/flashd.h"
#include "server/nbd_proto.h"

static void dimm_arm_timer(struct dimm *d)
{
	uint64_t due = ftl_next_deadline(d->ftl);
	if (due == UINT64_MAX) {
		evtimer_del(d->timer_ev);
		return;
	}
	uint64_t now = nand_now(d->dev);
	uint64_t delta = due > now ? due - now : 0;
	struct timeval tv = { (time_t)(delta / 1000000000u), (suseconds_t)(delta % 1000000000u / 1000u) };
	evtimer_add(d->timer_ev, &tv);
}

static void dimm_refresh_status(struct dimm *d)
{
	struct dimm_status st;
	memset(&st, 0, sizeof st);
	snprintf(st.name, sizeof st.name, "%s", d->cfg->name);
	snprintf(st.export_name, sizeof st.export_name, "%s", d->cfg->export_name);
	snprintf(st.preset, sizeof st.preset, "%s", d->cfg->preset);
	snprintf(st.image, sizeof st.image, "%s", d->cfg->image);
	st.readonly = d->cfg->readonly;
	st.attached = d->ftl != NULL;
	if (d->ftl) {
		ftl_get_info(d->ftl, &st.info);
		ftl_get_stats(d->ftl, &st.stats);
		snprintf(st.state, sizeof st.state, "%s", ftl_state_name(st.info.state));
	} else {
		snprintf(st.state, sizeof st.state, "detached");
	}
	st.timing = d->cfg->timing;
	pthread_mutex_lock(&d->lock);
	st.connections = d->nconns;
	st.total_connections = d->total_conns;
	d->status = st;
	d->status_gen++;
	d->status_wanted = false;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

/* Drive the FTL, send what is ready, re-arm the timer; leave when stopped. */
void dimm_kick(struct dimm *d)
{
	/* answer what completed inside ftl_submit first, then let the FTL
	 * program and collect; send what that completed */
	conn_flush_dirty(d);
	ftl_poll(d->ftl);
	conn_flush_dirty(d);
	pthread_mutex_lock(&d->lock);
	bool stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	if (stop && !d->conns && ftl_idle(d->ftl)) {
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
	int n = conn_abort_all(d);
	if (n)
		log_warn("%s: shutdown deadline (%d s) passed with %d connection(s) open: closed them, "
			 "unsent replies dropped", d->cfg->name, d->srv->cfg.shutdown_timeout, n);
	dimm_kick(d);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dimm *d = arg;
	pthread_mutex_lock(&d->lock);
	struct handoff *in = d->incoming;
	d->incoming = NULL;
	bool stop = d->stop, status = d->status_wanted;
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
	if (stop)
		conn_stop_all(d);
	if (status)
		dimm_refresh_status(d);
	dimm_kick(d);
}

/*
 * The event loop.  After activity it keeps polling without sleeping for
 * poll_us: a client that sends its next request within that window (queue
 * depth 1: the time to consume a reply) finds this thread awake, instead of
 * paying for a wake-up (a cross-CPU interrupt and a context switch, 20-70 us
 * on a virtual machine).  Cost: up to poll_us of CPU after the last request.
 */
static void dimm_loop(struct dimm *d)
{
	const uint64_t spin_ns = (uint64_t)d->srv->cfg.poll_us * 1000u;
	while (!event_base_got_break(d->base)) {
		event_base_loop(d->base, EVLOOP_ONCE);
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
				break;
			}
		}
	}
}

/* What the simulator noticed and repaired while opening the image. */
static void sim_notice(void *arg, const char *msg)
{
	struct dimm *d = arg;
	log_warn("%s: %s", d->cfg->name, msg);
}

/*
 * Open the image (creating it the first time) and the FTL.  Only a blank
 * image is formatted: one that holds anything without a valid superblock is
 * refused with the way out (flashctl recover), never reformatted.
 */
static int dimm_open_media(struct dimm *d, char *err, size_t errlen)
{
	struct dimm_cfg *c = d->cfg;
	struct stat st;
	bool exists = stat(c->image, &st) == 0;
	struct nand_sim_config nc = { .preset = c->preset, .path = c->image, .create = !exists,
				      .readonly = c->readonly && exists, .timing = c->timing,
				      .sync_on_flush = c->sync, .log = sim_notice, .log_arg = d };
	int rc = nand_sim_open(&nc, &d->dev, err, errlen);
	if (rc)
		return rc;
	struct ftl_info fi;
	char why[384];
	rc = ftl_probe(d->dev, &fi, why, sizeof why);
	if (rc == -EUCLEAN) {
		snprintf(err, errlen, "%s: %s; not formatting it: 'flashctl recover %s' reports what is "
				      "there and can rebuild the superblock ('flashctl format' erases it)",
			 c->image, why, c->image);
		return rc;
	}
	if (rc && rc != -ENODATA) {
		snprintf(err, errlen, "%s: %s", c->image, why[0] ? why : strerror(-rc));
		return rc;
	}
	if (rc == -ENODATA) {
		if (c->readonly) {
			snprintf(err, errlen, "%s is not formatted and the ioDimm is read-only", c->image);
			return -EINVAL;
		}
		struct ftl_format_params fp = { .sector_size = c->sector_size,
						.capacity_bytes = c->capacity,
						.op_percent = c->op_percent };
		if (c->capacity_pct > 0)
			fp.capacity_bytes = (uint64_t)((double)ftl_capacity_for_op(d->dev, FTL_STOCK_OP_PERCENT) *
						       c->capacity_pct / 100.0);
		log_info("%s: formatting %s (%s, %u-byte sectors)", c->name, c->image, c->preset,
			 c->sector_size);
		rc = ftl_format(d->dev, &fp, err, errlen);
		if (rc)
			return rc;
	}
	struct ftl_open_params op = { .readonly = c->readonly };
	rc = ftl_open(d->dev, &op, &d->ftl, err, errlen);
	if (rc)
		return rc;
	ftl_get_info(d->ftl, &d->info);
	d->size = d->info.capacity;
	char desc[256];
	dimm_describe(d, desc, sizeof desc);
	log_info("%s: %s; %s shutdown, opened in %.2f s (%llu pages replayed)", c->name, desc,
		 d->info.was_clean ? "clean" : "unclean", (double)d->info.open_ns / 1e9,
		 (unsigned long long)d->info.recovered_pages);
	return 0;
}

static void *dimm_main(void *arg)
{
	struct dimm *d = arg;
	char err[512] = "";
	struct event_config *ec = event_config_new();
	event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
	d->base = event_base_new_with_config(ec);
	event_config_free(ec);
	int rc = d->base ? dimm_open_media(d, err, sizeof err) : -ENOMEM;
	if (!rc) {
		d->wake_ev = event_new(d->base, -1, EV_PERSIST | EV_READ, wake_cb, d);
		d->timer_ev = evtimer_new(d->base, timer_cb, d);
		d->deadline_ev = evtimer_new(d->base, deadline_cb, d);
		if (!d->wake_ev || !d->timer_ev || !d->deadline_ev)
			rc = -ENOMEM;
		else
			event_add(d->wake_ev, NULL);
	}
	pthread_mutex_lock(&d->lock);
	d->ready = true;
	d->open_error = rc;
	snprintf(d->open_errmsg, sizeof d->open_errmsg, "%s", err[0] ? err : strerror(-rc));
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	if (rc)
		return NULL;

	dimm_loop(d);

	rc = ftl_close(d->ftl);
	if (rc)
		log_err("%s: closing the FTL failed: %s", d->cfg->name, strerror(-rc));
	else
		log_info("%s: closed cleanly (checkpoint written)", d->cfg->name);
	d->ftl = NULL;
	nand_close(d->dev);
	d->dev = NULL;
	pthread_mutex_lock(&d->lock);
	d->status_gen++;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

int dimm_start(struct dimm *d)
{
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	int rc = pthread_create(&d->thread, NULL, dimm_main, d);
	return -rc;
}

int dimm_wait_ready(struct dimm *d)
{
	pthread_mutex_lock(&d->lock);
	while (!d->ready)
		pthread_cond_wait(&d->cond, &d->lock);
	int rc = d->open_error;
	pthread_mutex_unlock(&d->lock);
	return rc;
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
	bool running = d->ready && !d->open_error;
	pthread_mutex_unlock(&d->lock);
	if (running)
		event_active(d->wake_ev, EV_READ, 0);
}

void dimm_join(struct dimm *d)
{
	if (!d->thread)
		return;
	pthread_join(d->thread, NULL);
	d->thread = 0;
	if (d->wake_ev)
		event_free(d->wake_ev);
	if (d->timer_ev)
		event_free(d->timer_ev);
	if (d->deadline_ev)
		event_free(d->deadline_ev);
	if (d->base)
		event_base_free(d->base);
	if (d->dev)
		nand_close(d->dev);
	d->wake_ev = d->timer_ev = d->deadline_ev = NULL;
	d->base = NULL;
}

int dimm_get_status(struct dimm *d, struct dimm_status *out)
{
	pthread_mutex_lock(&d->lock);
	if (!d->ready || d->open_error || d->stop) {
		memset(out, 0, sizeof *out);
		snprintf(out->name, sizeof out->name, "%s", d->cfg->name);
		snprintf(out->export_name, sizeof out->export_name, "%s", d->cfg->export_name);
		snprintf(out->preset, sizeof out->preset, "%s", d->cfg->preset);
		snprintf(out->image, sizeof out->image, "%s", d->cfg->image);
		snprintf(out->state, sizeof out->state, "%s",
			 d->open_error ? "failed" : d->stop ? "stopping" : "starting");
		pthread_mutex_unlock(&d->lock);
		return d->open_error;
	}
	uint64_t gen = d->status_gen;
	d->status_wanted = true;
	pthread_mutex_unlock(&d->lock);
	event_active(d->wake_ev, EV_READ, 0);
	pthread_mutex_lock(&d->lock);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	while (d->status_gen == gen)
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) == ETIMEDOUT)
			break;
	*out = d->status;
	pthread_mutex_unlock(&d->lock);
	return 0;
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
	snprintf(buf, len, "simulated ioDimm %s (%s): %.1f GiB, %u-byte sectors, %.0f%% over-provisioning%s",
		 d->cfg->name, d->cfg->preset, (double)d->info.capacity / (1 << 30),
		 d->info.sector_size, d->info.op_percent, d->cfg->readonly ? ", read-only" : "");
}
