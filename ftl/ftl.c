/*
 * ftl/ftl.c - life cycle of an FTL: open (as a table of steps that
 * unwind in reverse), the progress loop, thermal protection, close,
 * statistics.  Formatting and probing a medium: format.c; logging,
 * failure, submission, memory and the spare's codec: core.c.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

static void drain_device(struct ftl *f);

/* ---- open: a table of steps, undone in reverse on failure -------------- */

struct open_ctx {
	struct ftl *f;
	const struct ftl_open_params *p;
	struct ftl_sb sb;
	char *err;
	size_t errlen;
};

static int step_superblock(struct open_ctx *c)
{
	struct ftl *f = c->f;
	sb_locate(f);
	int rc = sb_load(f, &c->sb, c->err, c->errlen);
	if (rc == -ENODATA)
		return blank_or_damaged(f, c->err, c->errlen);
	if (rc)
		return rc;
	rc = sb_format_check(f, &c->sb, c->err, c->errlen);
	if (rc)
		return rc;
	f->parity = c->sb.parity_width;
	f->format_id = c->sb.format_id;
	f->sector_size = c->sb.sector_size;
	f->units = c->sb.units;
	f->format_time = c->sb.format_time;
	f->was_clean = c->sb.clean;
	f->open_count = c->sb.open_count + 1;
	return 0;
}

static int step_memory(struct open_ctx *c)
{
	struct ftl *f = c->f;
	const struct ftl_open_params *p = c->p;

	f->st.lost_first = UINT64_MAX;
	f->l2p = ftl_map(f, f->units * sizeof(uint32_t));
	int rc = blk_init(f);
	if (rc)
		return rc;
	f->zero_page = ftl_alloc_pages(f, f->page_size);
	f->sb_buf = ftl_alloc_pages(f, f->page_size);
	f->sb_spare = ftl_alloc(f, f->spare_size);
	f->trim_cap = trim_record_capacity(f);
	f->trim_pend = ftl_alloc(f, f->trim_cap * sizeof *f->trim_pend);
	if (!f->l2p || !f->zero_page || !f->sb_buf ||
	    !f->sb_spare || !f->trim_pend)
		return -ENOMEM;
	f->l2p_alloc = f->units * sizeof(uint32_t);
	memset(f->l2p, 0xFF, f->units * sizeof(uint32_t));
	f->trim_lo = UINT32_MAX;

	uint32_t uslots = p->write_buffer_slots ? p->write_buffer_slots : 1024;
	for (int i = 0; i < NSTREAMS; i++) {
		struct stream *s = &f->stream[i];
		s->f = f;
		s->id = (enum stream_id)i;
		s->nsets = NSETS;
		for (uint32_t k = 0; k < s->nsets; k++) {
			struct open_set *set = &s->set[k];
			set->blkf = (uint8_t)((i == STREAM_GC ? BLKF_GC : 0) |
					      (k == SET_COLD ? BLKF_COLD : 0));
			set->row = ftl_alloc(f, f->nrows * sizeof *set->row);
			if (!set->row)
				return -ENOMEM;
			for (uint32_t r = 0; r < f->nrows; r++)
				set->row[r].band = FTL_NO_BLOCK;
		}
		/* GC: relocations of all the victims in flight, a few dozen
		 * per die (their programs complete out of ring order); with
		 * pages of several units 4 x upp times more: a slot is held
		 * until its page's other units come and the done cursor
		 * passes it (mlc-16k's bench: 512 slots kept the dies 38 %
		 * busy, x8 74 %, x16 94 %) */
		uint32_t gslots = f->ndies * 32 < 256 ? 256 : f->ndies * 32 > 4096 ? 4096 : f->ndies * 32;
		if (f->upp > 1)
			gslots *= 4 * f->upp;
		rc = ring_init(f, &s->ring, i == STREAM_USER ? uslots : gslots);
		if (rc)
			return rc;
	}

	f->nrops = 256;
	f->rops = ftl_alloc(f, f->nrops * sizeof *f->rops);
	uint8_t *bounce = ftl_alloc_pages(f, (size_t)f->nrops * f->page_size);
	uint8_t *spares = ftl_alloc(f, (size_t)f->nrops * f->spare_size);
	f->read_now = nand_read_now_fn(f->dev);
	f->read_soon = f->read_now ? nand_read_soon_fn(f->dev) : NULL;
	f->read_now_spare = ftl_alloc(f, f->spare_size);
	if (!f->rops || !bounce || !spares || !f->read_now_spare)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->nrops; i++) {
		struct rop *ro = &f->rops[i];
		ro->f = f;
		ro->bounce = bounce + (size_t)i * f->page_size;
		ro->spare = spares + (size_t)i * f->spare_size;
		ro->next_free = f->rop_free;
		f->rop_free = ro;
	}

	f->erase_ops = ftl_alloc(f, f->ndies * sizeof *f->erase_ops);
	f->erase_free = ftl_alloc(f, f->ndies * sizeof *f->erase_free);
	if (!f->erase_ops || !f->erase_free)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->ndies; i++)
		f->erase_free[i] = i;
	f->nerase_free = f->ndies;

	rc = gc_init(f);
	if (!rc)
		rc = die_init(f);
	if (!rc)
		rc = par_init(f);
	if (!rc)
		rc = footer_init(f);
	if (!rc)
		rc = cp_init(f);
	return rc;
}

static int step_checkpoint(struct open_ctx *c)
{
	struct ftl *f = c->f;
	int rc = cp_load(f, &c->sb, c->err, c->errlen);
	if (rc == 1) {
		/* GC kept the log after the previous checkpoint: replaying it
		 * rebuilds what the damaged one held */
		ftl_log(FTL_LOG_WARNING, "%s: the log after it is replayed, so every write and trim is recovered; a "
			"new checkpoint follows at once", c->err);
		snprintf(f->info.notes, sizeof f->info.notes,
			 "%s: the log after it replayed, nothing lost", c->err);
		rc = 0;
	} else if (rc == -EILSEQ) {
		/* the last resort: the log alone rebuilds every unit's newest
		 * write; what it cannot restore are trims older than the
		 * checkpoints whose records GC has since dropped */
		ftl_log(FTL_LOG_WARNING, "%s; the map is rebuilt from the whole log instead (the last resort): every "
			"write is recovered, but sectors trimmed or zeroed before that checkpoint may "
			"read their old data again until rewritten; a new checkpoint follows at once",
			c->err);
		snprintf(f->info.notes, sizeof f->info.notes,
			 "%s: map rebuilt from the whole log; sectors trimmed before it may read "
			 "old data", c->err);
		f->cp.cur_seq = 0;
		rc = 0;
	} else {
		return rc;
	}
	f->info.checkpoint_damaged = true;
	c->err[0] = 0;
	if (!f->readonly)
		cp_request(f, false);
	return 0;
}

/*
 * Numbers near FTL_SEQ_LIMIT (media.h): only a crafted or damaged image has
 * them.  The media checks took them, so what the image holds is served, but
 * read-only: a session writing on would hand out numbers the next open
 * refuses.
 */
static void seq_limit_check(struct ftl *f)
{
	const uint64_t near = FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM;
	if (f->readonly || (f->next_seq < near && f->sb_seq < near))
		return;
	f->readonly = true;
	ftl_log(FTL_LOG_ERR, "sequence numbers near their limit (log %llu, superblock %llu, limit %llu): "
		"served read-only; copy the data off and re-format the ioDimm",
		(unsigned long long)f->next_seq, (unsigned long long)f->sb_seq,
		(unsigned long long)FTL_SEQ_LIMIT);
	size_t n = strlen(f->info.notes);
	snprintf(f->info.notes + n, sizeof f->info.notes - n, "%s%s", n ? "; " : "",
		 "sequence numbers near their limit: read-only; copy the data off and re-format");
}

static int step_recovery(struct open_ctx *c)
{
	int rc = recovery_run(c->f, c->sb.dead_dies, c->err, c->errlen);
	if (!rc) {
		seq_limit_check(c->f);
		blk_erases_open(c->f);
	}
	return rc;
}

static int step_limits(struct open_ctx *c)
{
	struct ftl *f = c->f;
	blk_limits(f);
	cp_open_room(f);
	if (c->p->checkpoint_interval) {
		f->cp_interval = c->p->checkpoint_interval;
	} else {
		/* about one device write, bounded so recovery stays small */
		uint64_t iv = f->units;
		if (iv < 64ull * f->ppb)
			iv = 64ull * f->ppb;
		if (iv > (4ull << 20))
			iv = 4ull << 20;
		f->cp_interval = iv;
	}
	return 0;
}

static bool sb_idle(struct ftl *f, void *arg)
{
	(void)arg;
	return !f->sb_busy;
}

/* A superblock update written and waited for (the FTL run until it is
 * on the media): 0 or the FTL's error. */
static int sb_write_sync(struct ftl *f, bool clean)
{
	int rc = sb_start_write(f, clean, NULL);
	if (rc)
		return rc;
	rc = ftl_run_until(f, sb_idle, NULL);
	if (rc)
		return rc;
	return f->error;
}

static int step_mark_open(struct open_ctx *c)
{
	struct ftl *f = c->f;
	if (f->readonly)
		return 0;
	int rc = sb_write_sync(f, false);
	if (!rc)
		rc = cp_open_release(f);
	if (rc)
		snprintf(c->err, c->errlen, "recording the open in the superblock failed");
	return rc;
}

static const struct open_step {
	const char *name;
	int (*run)(struct open_ctx *c);
} open_steps[] = {
	{ "superblock", step_superblock },
	{ "memory", step_memory },
	{ "checkpoint", step_checkpoint },
	{ "recovery", step_recovery },
	{ "limits", step_limits },
	{ "mark open", step_mark_open },
};

_Static_assert(sizeof open_steps / sizeof open_steps[0] == FTL_OPEN_STEPS, "ftl.h lists the steps");

const char *ftl_open_step_name(int step)
{
	return step >= 0 && step < FTL_OPEN_STEPS ? open_steps[step].name : "?";
}

int ftl_open(struct nand_dev *dev, const struct ftl_open_params *p, struct ftl **out, char *err,
	     size_t errlen)
{
	static const struct ftl_open_params defaults;
	char dummy[256];
	uint64_t t0 = nand_now(dev);
	struct open_ctx c = { .p = p ? p : &defaults, .err = err ? err : dummy,
			      .errlen = err ? errlen : sizeof dummy };
	c.err[0] = 0;

	struct ftl *f = calloc(1, sizeof *f);
	if (!f)
		return -ENOMEM;
	c.f = f;
	f->readonly = c.p->readonly;
	f->flush_ppl = !c.p->no_flush_parity;
	int rc = ftl_geometry_init(f, dev, c.err, c.errlen);
	for (size_t i = 0; !rc && i < sizeof open_steps / sizeof open_steps[0]; i++) {
		uint64_t t = nand_now(dev);
		rc = open_steps[i].run(&c);
		f->info.open_step_ns[i] = nand_now(dev) - t;
		if (rc && !c.err[0])
			snprintf(c.err, c.errlen, "open step '%s' failed: %s", open_steps[i].name,
				 strerror(-rc));
	}
	if (rc) {
		/* the steps allocate memory and read (and the progress loop of
		 * the last step may have started erases): undoing is taking
		 * every completion, then freeing */
		drain_device(f);
		ftl_free_all(f);
		return rc;
	}
	f->info.open_ns = nand_now(dev) - t0;
	f->opened = true;
	int32_t mc;
	f->temp_mc = f->temp_max_mc = FTL_TEMP_NONE;
	if (nand_temperature_mc(dev, &mc) == 0) {
		f->thermal_sensor = true;
		thermal_check(f, true);
	}
	*out = f;
	return 0;
}

/* ---- progress ----------------------------------------------------------- */

/*
 * Run the FTL until nothing moves.  Foreground (inside ftl_submit) does only
 * what a host request waits for: deliver completions, buffer writes,
 * complete what can complete.  Programming, GC, erases and checkpoints are
 * left for ftl_poll(), which the caller runs after it has answered the
 * requests (a write is acknowledged once it is in the write buffer, so its
 * programming need not delay the reply).
 */
/* Deliver the device's due completions, counted for gc_kick (a finishing
 * victim can only have moved on if something completed). */
static int poll_device(struct ftl *f, uint64_t now)
{
	int c = nand_poll(f->dev, now);
	f->nand_completions += (uint64_t)c;
	return c;
}

/* ---- thermal (ftl.h, "Thermal protection") ------------------------------ */

const char *ftl_thermal_name(enum ftl_thermal t)
{
	switch (t) {
	case FTL_THERMAL_OK: return "ok";
	case FTL_THERMAL_THROTTLED: return "throttled";
	case FTL_THERMAL_STOPPED: return "stopped";
	}
	return "?";
}

/*
 * Read the sensor (at most every FTL_THERMAL_PERIOD_NS unless forced) and
 * move between the thermal states.  Cost: one clock read per call, one
 * sensor read per period.
 */
void thermal_check(struct ftl *f, bool force)
{
	if (!f->thermal_sensor)
		return;
	/* a clock read every 64 calls (progress runs per request); every
	 * call while I/O is held, so it goes on as soon as it may */
	if (!force && !f->wq_held.head && (++f->thermal_calls & 63))
		return;
	uint64_t now = nand_now(f->dev);
	if (!force && now < f->thermal_at)
		return;
	f->thermal_at = now + FTL_THERMAL_PERIOD_NS;
	int32_t mc;
	if (nand_temperature_mc(f->dev, &mc) < 0)
		return; /* the reading failed: keep the last one */
	f->temp_mc = mc;
	if (mc > f->temp_max_mc)
		f->temp_max_mc = mc;
	uint8_t t = f->thermal;
	if (mc >= FTL_THERMAL_STOP_MC)
		t = FTL_THERMAL_STOPPED;
	else if (t == FTL_THERMAL_STOPPED && mc < FTL_THERMAL_RESUME_MC)
		t = FTL_THERMAL_OK;
	else if (t != FTL_THERMAL_STOPPED && mc >= FTL_THERMAL_THROTTLE_MC)
		t = FTL_THERMAL_THROTTLED;
	else if (t == FTL_THERMAL_THROTTLED && mc < FTL_THERMAL_THROTTLE_MC - FTL_THERMAL_HYST_MC)
		t = FTL_THERMAL_OK;
	if (t == FTL_THERMAL_OK && f->thermal == FTL_THERMAL_STOPPED &&
	    mc >= FTL_THERMAL_THROTTLE_MC - FTL_THERMAL_HYST_MC)
		t = FTL_THERMAL_THROTTLED; /* cannot happen with the defaults */
	if (t == f->thermal)
		return;
	/* held or paced I/O resumes by itself once it cools: degraded, handled */
	ftl_log(t == FTL_THERMAL_OK ? FTL_LOG_NOTICE : FTL_LOG_WARNING,
		"temperature %.1f C: thermal state %s -> %s%s", mc / 1000.0,
		ftl_thermal_name(f->thermal), ftl_thermal_name(t),
		t == FTL_THERMAL_STOPPED ? " (host I/O held, checkpoint written, until it "
					   "cools below 75 C: check the cooling)"
		: t == FTL_THERMAL_THROTTLED ? " (host writes paced to about 40 MB/s: check the "
					       "cooling)"
					     : "");
	uint8_t was = f->thermal;
	f->thermal = t;
	f->thermal_throttle_ns = t == FTL_THERMAL_THROTTLED ? FTL_THERMAL_WRITE_NS : 0;
	throttle_update(f);
	if (t == FTL_THERMAL_STOPPED && !f->readonly && !f->error)
		cp_request(f, false); /* the state on the media while it cools */
	if (was == FTL_THERMAL_STOPPED)
		io_release_held(f);
}

void ftl_sensors_changed(struct ftl *f)
{
	bool in = f->in_progress;
	f->in_progress = true; /* held I/O released here is started, not run */
	thermal_check(f, true);
	f->in_progress = in;
	if (!in)
		ftl_progress(f);
}

static void progress(struct ftl *f, bool foreground)
{
	if (f->in_progress)
		return;
	f->in_progress = true;
	thermal_check(f, false);
	for (;;) {
		int n = ftl_deliver_refused(f);
		uint64_t due = nand_next_due(f->dev);
		if (due != UINT64_MAX) {
			uint64_t now = due ? nand_now(f->dev) : 0;
			if (due <= now)
				n += poll_device(f, now);
		}
		if (f->error) {
			io_fail_all(f);
			if (!n)
				break;
			continue;
		}
		if (!foreground) {
			n += writer_kick(f, &f->stream[STREAM_USER]);
			n += writer_kick(f, &f->stream[STREAM_GC]);
			n += gc_kick(f);
			n += eraser_kick(f);
			n += cp_kick(f);
			/* NAND pages partly handed out that a flush or a
			 * checkpoint waits for (a checkpoint being written
			 * keeps this loop busy: not only once it ends) */
			n += upage_pad(f, false);
		}
		n += io_kick(f);
		if (!n)
			break;
	}
	if (!foreground)
		par_idle_pad(f);
	/* a checkpoint looking through an empty map yields to host I/O
	 * between passes and is called again at once */
	f->need_poll = foreground || cp_wants_poll(f);
	f->in_progress = false;
}

void ftl_submit(struct ftl *f, struct ftl_io *io)
{
	/* what the request waits for, at once (foreground: no GC, writer or
	 * checkpoint turn; ftl_poll does those) */
	if (io_start(f, io) && !f->in_progress)
		progress(f, true);
}

void ftl_progress(struct ftl *f)
{
	progress(f, false);
}

int ftl_poll(struct ftl *f)
{
	uint64_t before = f->dev->inflight + f->ios_in_flight;
	ftl_progress(f);
	return (int)(before != f->dev->inflight + f->ios_in_flight);
}

/* the period at which an outstanding medium sync is polled */
#define SYNC_POLL_NS 1000000ull

/*
 * The medium's next completion, the end of a write-reduced wait, or the
 * next look at an outstanding sync (a checkpoint's or flushes'): now if it
 * has finished (it may have finished since progress looked: without this
 * an owner with nothing else in flight would sleep for ever), else soon.
 */
static uint64_t next_due(struct ftl *f)
{
	uint64_t due = nand_next_due(f->dev);
	if (f->throttle_wait && !f->error && f->throttle_at < due)
		due = f->throttle_at;
	if (f->wq_held.head && f->thermal_at < due)
		due = f->thermal_at; /* held I/O: look at the sensor again */
	uint64_t pad = par_pad_due(f);
	if (pad < due)
		due = pad; /* stripes left open: pad them once idle */
	if (!f->error) {
		bool cp = f->cp.phase == CP_SYNC || f->cp.phase == CP_RELEASE;
		if (cp || f->wq_syncing.head) {
			if ((cp && nand_sync_poll(f->dev, f->cp.sync_ticket)) ||
			    (f->wq_syncing.head && nand_sync_poll(f->dev, f->durable_ticket)))
				return 0;
			uint64_t soon = nand_now(f->dev) + SYNC_POLL_NS;
			if (soon < due)
				due = soon;
		}
	}
	return due;
}

uint64_t ftl_next_deadline(struct ftl *f)
{
	return f->need_poll ? 0 : next_due(f);
}

bool ftl_idle(struct ftl *f)
{
	return f->ios_in_flight == 0 && f->dev->inflight == 0;
}

void ftl_debug_dump(struct ftl *f)
{
	struct ring *u = &f->stream[STREAM_USER].ring, *g = &f->stream[STREAM_GC].ring;
	ftl_log(FTL_LOG_INFO, "state: nfree %u (user_min %u gc_min %u gc_start %u) dirty %u retire %u meta %u bad %u",
		f->nfree, f->user_min, f->gc_min, f->gc_start, f->dirty.count, f->retire.count,
		f->nmeta, f->nbad);
	ftl_log(FTL_LOG_INFO, "user ring fill %llu submit %llu done %llu retry %u stalled %d; gc ring fill %llu submit %llu done %llu stalled %d",
		(unsigned long long)u->fill, (unsigned long long)u->submit, (unsigned long long)u->done,
		u->nretry, f->stream[0].stalled, (unsigned long long)g->fill,
		(unsigned long long)g->submit, (unsigned long long)g->done, f->stream[1].stalled);
	ftl_log(FTL_LOG_INFO, "gc: examining %u of %u, credit %lld ratio %lld min_bucket %u cp phase %d req %d; trims pending %u",
		f->gc_examining, f->gc_examining_max, (long long)f->gc_credit, (long long)f->gc_ratio,
		f->min_bucket, f->cp.phase, f->cp.requested, f->ntrim_pend);
	for (uint32_t i = 0; i < f->nvictims; i++) {
		struct victim *v = &f->victims[i];
		if (v->phase != VIC_FREE)
			ftl_log(FTL_LOG_INFO, "victim %u (%s): block %u cursor %u scans %u pending %u lost %u trim %d wait %llu",
				i, v->phase == VIC_EXAMINING ? "examining" : "finishing", v->block,
				v->cursor, v->scans_done, v->pending, v->nlost, v->trim_state,
				(unsigned long long)v->wait_user_pos);
	}
	for (uint32_t r = 0; r < f->nrows; r++)
		ftl_log(FTL_LOG_INFO, "row %u: free bands %u, open bands: user %u cold %u gc %u cold %u", r,
			f->band_free[r].count, f->stream[0].set[SET_FIRST].row[r].band,
			f->stream[0].set[SET_COLD].row[r].band,
			f->stream[1].set[SET_FIRST].row[r].band, f->stream[1].set[SET_COLD].row[r].band);
	ftl_log(FTL_LOG_INFO, "io: write head %p durable head %p read head %p in flight %u",
		(void *)f->wq_write.head, (void *)f->wq_durable.head, (void *)f->wq_read.head,
		f->ios_in_flight);
	if (f->parity)
		par_debug_dump(f);
}

void ftl_debug_dump_public(struct ftl *f)
{
	ftl_debug_dump(f);
}

int ftl_run_until(struct ftl *f, bool (*pred)(struct ftl *, void *), void *arg)
{
	for (;;) {
		ftl_progress(f);
		if (pred(f, arg))
			return 0;
		/* failed: wait only for what is in flight (a read waited on
		 * completes when its page lands; its caller's memory must not
		 * be let go before) */
		if (f->error && !f->dev->inflight && !f->refused)
			return f->error;
		if (f->need_poll && !f->error)
			continue;
		uint64_t due = next_due(f);
		/* a backend that signals completions (an event fd) knows no due
		 * time for what it runs: wait for its signal */
		bool signalled = f->dev->inflight && nand_event_fd(f->dev) >= 0;
		if (due == UINT64_MAX && f->error && !signalled)
			return f->error;
		if (due == UINT64_MAX && !signalled) {
			ftl_log(FTL_LOG_ERR, "stuck: nothing in flight and the awaited condition does not hold");
			ftl_debug_dump(f);
			return -EDEADLK;
		}
		nand_wait_until(f->dev, due);
	}
}

/* Deliver every outstanding NAND completion (also after a failure). */
static void drain_device(struct ftl *f)
{
	f->in_progress = true;
	ftl_deliver_refused(f);
	f->in_progress = false;
	/* nothing more is submitted: NAND pages partly handed out are
	 * programmed as they are, so what was submitted completes */
	if (f->upp > 1)
		upage_seal_all(f->dev);
	while (f->dev->inflight) {
		uint64_t due = nand_next_due(f->dev);
		if (due == UINT64_MAX && nand_event_fd(f->dev) < 0)
			break; /* nothing will come */
		nand_wait_until(f->dev, due);
		uint64_t now = nand_now(f->dev);
		f->in_progress = true; /* completions only; start nothing new */
		poll_device(f, now);
		f->in_progress = false;
	}
}

/* ---- synchronous helpers ------------------------------------------------ */

static void sync_done(struct ftl_io *io)
{
	*(bool *)io->priv = true;
}

static bool flag_set(struct ftl *f, void *arg)
{
	(void)f;
	return *(bool *)arg;
}

int ftl_io_sync(struct ftl *f, struct ftl_io *io)
{
	bool done = false;
	io->done = sync_done;
	io->priv = &done;
	ftl_submit(f, io);
	if (!done) {
		int rc = ftl_run_until(f, flag_set, &done);
		if (rc && !done)
			return rc;
	}
	return io->status;
}

int ftl_read_sync(struct ftl *f, void *buf, uint64_t off, uint64_t len)
{
	struct ftl_io io = { .type = FTL_IO_READ, .offset = off, .length = len, .buf = buf };
	return ftl_io_sync(f, &io);
}

int ftl_write_sync(struct ftl *f, const void *buf, uint64_t off, uint64_t len, uint32_t flags)
{
	struct ftl_io io = { .type = FTL_IO_WRITE, .flags = flags, .offset = off, .length = len,
			     .buf = (void *)buf };
	return ftl_io_sync(f, &io);
}

int ftl_flush_sync(struct ftl *f)
{
	struct ftl_io io = { .type = FTL_IO_FLUSH };
	return ftl_io_sync(f, &io);
}

int ftl_trim_sync(struct ftl *f, uint64_t off, uint64_t len, uint32_t flags)
{
	struct ftl_io io = { .type = FTL_IO_TRIM, .flags = flags, .offset = off, .length = len };
	return ftl_io_sync(f, &io);
}

int ftl_write_zeroes_sync(struct ftl *f, uint64_t off, uint64_t len, uint32_t flags)
{
	struct ftl_io io = { .type = FTL_IO_WRITE_ZEROES, .flags = flags, .offset = off,
			     .length = len };
	return ftl_io_sync(f, &io);
}

/* ---- close -------------------------------------------------------------- */

static bool no_host_io(struct ftl *f, void *arg)
{
	(void)arg;
	return f->ios_in_flight == 0;
}

static bool cp_finished(struct ftl *f, void *arg)
{
	(void)arg;
	return !f->cp.requested && f->cp.phase == CP_IDLE;
}

/* Closing: nothing is held for heat from now on (a stop must not wait for
 * the device to cool); the sensor is not read again. */
static void thermal_hold_end(struct ftl *f)
{
	if (f->thermal == FTL_THERMAL_STOPPED)
		f->thermal = FTL_THERMAL_THROTTLED;
	f->thermal_sensor = false;
}

int ftl_give_up_held(struct ftl *f, int status)
{
	bool in = f->in_progress;
	f->in_progress = true; /* completions run here, progress after */
	thermal_hold_end(f);
	int n = io_fail_held(f, status);
	f->in_progress = in;
	if (!in)
		ftl_progress(f);
	return n;
}

int ftl_close(struct ftl *f)
{
	int rc = 0;
	if (!f)
		return 0;
	/* closing: I/O held for heat goes on */
	if (f->thermal == FTL_THERMAL_STOPPED) {
		thermal_hold_end(f);
		io_release_held(f);
	}
	if (!f->error && !f->readonly) {
		rc = ftl_run_until(f, no_host_io, NULL);
		if (!rc) {
			cp_request(f, true);
			rc = ftl_run_until(f, cp_finished, NULL);
		}
		if (!rc && f->parity)
			par_seal_all(f); /* drain_device waits for the programs */
		if (!rc)
			upage_pad(f, true); /* and for the NAND pages partly handed out */
		if (!rc && f->cp.phase != CP_IDLE)
			rc = -EIO;
	}
	drain_device(f);
	if (f->error)
		rc = f->error;
	ftl_free_all(f);
	return rc;
}

void ftl_abandon(struct ftl *f)
{
	if (f)
		ftl_free_all(f);
}

/* ---- information -------------------------------------------------------- */

struct nand_dev *ftl_device(struct ftl *f)
{
	return f->dev;
}

void ftl_get_info(struct ftl *f, struct ftl_info *info)
{
	*info = f->info;
	info->format_id = f->format_id;
	info->sector_size = f->sector_size;
	info->units = f->units;
	info->capacity = f->units * FTL_UNIT_SIZE;
	info->raw_bytes = nand_raw_bytes(&f->geo);
	info->op_percent = 100.0 * (1.0 - (double)info->capacity / (double)info->raw_bytes);
	info->format_time = f->format_time;
	info->band_rows = f->nrows;
	info->band_width = f->row_width;
	info->parity_width = f->parity;
	info->was_clean = f->was_clean;
	info->writes_nothing = f->readonly;
	info->error = f->error;
	if (f->error)
		info->state = FTL_STATE_FAILED;
	else if (f->readonly || f->wear_ro || f->seq_ro)
		info->state = FTL_STATE_READONLY;
	else if (f->no_space)
		info->state = FTL_STATE_NO_SPACE;
	else if (f->health_throttle_ns)
		info->state = FTL_STATE_WRITE_REDUCED;
	else
		info->state = FTL_STATE_ONLINE;
	if (f->seq_ro) /* the state it gives: read-only, whatever the reserves say */
		snprintf(info->health, sizeof info->health, "sequence numbers near their "
			 "limit: read-only; copy the data off and re-format");
	else
		snprintf(info->health, sizeof info->health, "%s", f->health_msg);
	info->temp_mc = f->thermal_sensor || f->temp_mc != FTL_TEMP_NONE ? f->temp_mc : FTL_TEMP_NONE;
	info->temp_max_mc = f->temp_max_mc;
	info->thermal = (enum ftl_thermal)f->thermal;
}

int ftl_unit_location(struct ftl *f, uint64_t unit, uint32_t *die, uint32_t *block,
		      uint32_t *page)
{
	if (unit >= f->units)
		return -ENOENT;
	uint32_t e = f->l2p[unit];
	if (!l2p_is_ppa(e) || e == L2P_LOST || e == L2P_UNMAPPED)
		return -ENOENT;
	*block = ppa_block(f, e);
	*page = ppa_page(f, e);
	*die = block_die(f, *block);
	return 0;
}

bool ftl_unit_protected(struct ftl *f, uint64_t unit)
{
	uint32_t die, b, page, live = 0;
	if (!f->parity || ftl_unit_location(f, unit, &die, &b, &page))
		return false;
	uint32_t bi = block_band(f, b);
	if (f->band[bi].flags & BANDF_REFRESH)
		return false;
	for (uint32_t c = 0; c < f->row_width; c++) {
		uint8_t st = f->blk[band_block(f, bi, c)].state;
		if (st == BLK_RETIRING || (f->blk[band_block(f, bi, c)].flags & BLKF_DOOMED))
			return false;
		if (st == BLK_OPEN || st == BLK_CLOSED || st == BLK_VICTIM)
			live++;
	}
	return live >= 2;
}

void ftl_get_stats(struct ftl *f, struct ftl_stats *st)
{
	*st = f->st;
	st->blocks_total = f->nblocks;
	st->blocks_free = f->nfree;
	st->blocks_bad = f->nbad;
	st->blocks_bad_grown = f->nbad_grown;
	st->blocks_meta = f->nmeta;
	st->blocks_data = f->nusable - f->nfree - f->nmeta;
	st->blocks_needed = f->min_usable;
	st->reserve_percent = reserve_percent(f);
	/* a band's valid count is its members' sum, and only members hold
	 * data: 25x fewer than blocks on the ioDimm geometry */
	uint64_t valid = 0;
	for (uint32_t bi = 0; bi < f->nbands; bi++)
		valid += f->band[bi].valid;
	st->valid_pages = valid;
	/* the erase counts take a pass over every block (819,200 on a 320 GiB
	 * ioDimm: ~3 ms of the ioDimm thread per status request), so they are
	 * counted again only after 1/256 of the blocks' worth of erases, or a
	 * block gone bad, since the last count */
	if (!f->es_known || f->es_bad != f->nbad ||
	    st->blocks_erased - f->es_erased >= f->nblocks / 256) {
		uint32_t emin = UINT32_MAX, emax = 0, counted = 0;
		double esum = 0;
		for (uint32_t b = 0; b < f->nblocks; b++) {
			if (f->blk[b].state == BLK_BAD)
				continue;
			uint32_t ec = blk_erases(f, b);
			emin = ec < emin ? ec : emin;
			emax = ec > emax ? ec : emax;
			esum += ec;
			counted++;
		}
		f->es_known = true;
		f->es_erased = st->blocks_erased;
		f->es_bad = f->nbad;
		f->es_min = counted ? emin : 0;
		f->es_max = emax;
		f->es_avg = counted ? esum / counted : 0;
	}
	st->erase_min = f->es_min;
	st->erase_max = f->es_max;
	st->erase_avg = f->es_avg;
	st->rated_pe_cycles = f->dev->rated_pe_cycles;
	st->endurance_used_percent =
		st->rated_pe_cycles ? 100.0 * st->erase_avg / st->rated_pe_cycles : 0;
	st->dies_failed = f->ndead;
	st->rebuild_bands_left = f->ndead ? par_rebuild_left(f) : 0;
	st->l2p_bytes = f->units * sizeof(uint32_t);
	st->ram_bytes = f->ram_bytes;
	st->write_amplification = st->host_pages_written ?
					  (double)st->nand_pages_programmed / (double)st->host_pages_written :
					  0.0;
}
