/*
 * hw/nand_sim.c - the simulated ioDimm's op engine: its struct nand_ops
 * (the "sim" backend of hw/nand.c), submission, the completion queues and
 * poll, sync of an image file, open and close.  Owns the completion
 * queues, the sync thread and the device's life.  Called through
 * hw/nand.h by the device's owner thread (the sync thread is its own); the
 * simulator's other parts are in hw/nand_sim_*.c (see hw/nand_sim_int.h).
 *
 * The simulator keeps NAND pages, spare bytes, erase blocks, wear, bad
 * blocks, faults and (optionally) timing.  An operation executes (changes
 * the media) when it is submitted; its completion is queued and delivered
 * by poll: an untimed one at once, a timed one when the timing model
 * (hw/nand_sim_timing.c) says it is due.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/queue.h"
#include "hw/nand_sim_int.h"

void sim_log(struct sim *s, int level, const char *fmt, ...)
{
	if (!s->log)
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	s->log(s->log_arg, level, buf);
}

/* Execute an operation on the media (sets op->status). */
static void sim_execute(struct sim *s, struct nand_op *op)
{
	const struct nand_geometry *g = &s->dev.geo;

	op->err = 0;
	op->corrected_bits = op->corrected_max = 0;
	if (op->block >= nand_blocks(g) || op->page >= g->pages_per_block) {
		op->status = NAND_INVALID;
	} else if (s->dead) {
		op->status = NAND_POWER_LOSS;
	} else if (s->readonly && op->type != NAND_OP_READ) {
		op->status = NAND_INVALID;
	} else {
		bool cut = fault_cut_now(s);
		if (!s->timing && op->type <= NAND_OP_ERASE)
			s->th_untimed_ns += s->th_cost[op->type]; /* thermal: nominal die time */
		switch (op->type) {
		case NAND_OP_READ:
			op->status = cut ? NAND_POWER_LOSS : media_read(s, op);
			s->dev.last_corrected_bits = op->corrected_bits;
			s->dev.last_corrected_max = op->corrected_max;
			break;
		case NAND_OP_PROGRAM:
			op->status = media_program(s, op, cut);
			break;
		case NAND_OP_ERASE:
			op->status = media_erase(s, op, cut);
			break;
		default:
			op->status = NAND_INVALID;
		}
	}
}

static int sim_submit(struct nand_dev *d, struct nand_op *op)
{
	struct sim *s = to_sim(d);

	if (fault_refuse_submit(s))
		return -ENODEV; /* injected: the backend cannot take it */
	sim_execute(s, op);
	op->next = NULL;
	op->ticket = s->ticket++;
	if (s->timing && op->status != NAND_INVALID && op->status != NAND_POWER_LOSS) {
		uint64_t now = sim_now(d);
		timing_advance(s, now);
		timed_submit(s, op, now);
		return 0;
	}
	op->due_ns = 0;
	QUEUE_SPLICE(s->fifo_head, s->fifo_tail, op, op, next);
	return 0;
}

/* the ops of the chain OP, each to its completion in turn; their number */
static int deliver_chain(struct nand_dev *d, struct nand_op *op)
{
	int n = 0;
	while (op) {
		struct nand_op *next = op->next;
		n++;
		nand_deliver(d, op);
		op = next;
	}
	return n;
}

static int sim_poll(struct nand_dev *d, uint64_t now_ns)
{
	struct sim *s = to_sim(d);
	/* only what is queued now: handlers may submit more */
	struct nand_op *op = s->fifo_head;
	s->fifo_head = s->fifo_tail = NULL;
	int n = deliver_chain(d, op);
	timing_advance(s, now_ns);
	if (now_ns >= s->th_t + SIM_TH_WINDOW_NS)
		th_step(s, sim_now(d)); /* the device clock: now_ns may be anything */
	/* only what is done now: handlers may submit (and complete) more */
	op = s->done_head;
	s->done_head = s->done_tail = NULL;
	return n + deliver_chain(d, op);
}

/* poll granularity while an asynchronous sync runs */
#define SIM_SYNC_POLL_NS 1000000ull

static uint64_t sim_next_due(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	if (s->fifo_head || s->done_head)
		return 0;
	uint64_t due = s->nevents ? s->dies[s->events[0]].until : UINT64_MAX;
	if (s->sync_thread_up &&
	    __atomic_load_n(&s->sync_done, __ATOMIC_ACQUIRE) < __atomic_load_n(&s->sync_req, __ATOMIC_ACQUIRE)) {
		uint64_t soon = sim_now(d) + SIM_SYNC_POLL_NS;
		if (soon < due)
			due = soon;
	}
	return due;
}

static int sim_sync(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	if (s->fd < 0 || !s->sync_on_flush || s->readonly)
		return 0;
	media_fence();
	if (fdatasync(s->fd) < 0)
		return -errno;
	return 0;
}

static void *sim_sync_main(void *arg)
{
	struct sim *s = arg;
	pthread_mutex_lock(&s->sync_mu);
	while (!s->sync_stop) {
		if (s->sync_done >= s->sync_req) {
			pthread_cond_wait(&s->sync_cv, &s->sync_mu);
			continue;
		}
		uint64_t upto = s->sync_req;
		pthread_mutex_unlock(&s->sync_mu);
		int rc = fdatasync(s->fd) < 0 ? -errno : 0;
		pthread_mutex_lock(&s->sync_mu);
		if (rc && !s->sync_err)
			s->sync_err = rc;
		__atomic_store_n(&s->sync_done, upto, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&s->sync_mu);
	return NULL;
}

/* fdatasync on a thread of its own: a checkpoint or a FLUSH waits for it
 * without stopping the owner's other I/O (it may take seconds when much
 * of the image is dirty in the page cache). */
static int sim_sync_start(struct nand_dev *d, uint64_t *ticket)
{
	struct sim *s = to_sim(d);
	*ticket = 0;
	if (s->fd < 0 || !s->sync_on_flush || s->readonly)
		return 0;
	if (s->virtual_time)
		return sim_sync(d); /* no wall clock to wait on: at once */
	media_fence();
	if (!s->sync_thread_up) {
		pthread_mutex_init(&s->sync_mu, NULL);
		pthread_cond_init(&s->sync_cv, NULL);
		if (pthread_create(&s->sync_thread, NULL, sim_sync_main, s) != 0) {
			pthread_cond_destroy(&s->sync_cv);
			pthread_mutex_destroy(&s->sync_mu);
			return sim_sync(d); /* no thread: at once */
		}
		pthread_setname_np(s->sync_thread, "flashd-sync");
		s->sync_thread_up = true;
	}
	pthread_mutex_lock(&s->sync_mu);
	*ticket = __atomic_add_fetch(&s->sync_req, 1, __ATOMIC_RELEASE);
	pthread_cond_signal(&s->sync_cv);
	pthread_mutex_unlock(&s->sync_mu);
	return 0;
}

static int sim_sync_poll(struct nand_dev *d, uint64_t ticket)
{
	struct sim *s = to_sim(d);
	pthread_mutex_lock(&s->sync_mu);
	int rc = s->sync_err ? s->sync_err : s->sync_done >= ticket;
	pthread_mutex_unlock(&s->sync_mu);
	return rc;
}

/* madvise(WILLNEED) on a written page's slot in the mapped image: the
 * kernel reads it ahead, so a batch of reads (a checkpoint, recovery) has
 * many disk reads in flight instead of one fault at a time.  Pages never
 * written (holes) and RAM media: nothing.  Cost: one syscall. */
static void sim_prefetch(struct nand_dev *d, uint32_t block, uint32_t page)
{
	struct sim *s = to_sim(d);
	const struct nand_geometry *g = &d->geo;
	if (s->fd < 0 || s->metadata_only || !s->ram || block >= nand_blocks(g) ||
	    page >= s->blocks[block].wp)
		return;
	uint64_t ppa = (uint64_t)block * g->pages_per_block + page;
	uintptr_t lo = (uintptr_t)ram_slot(s, ppa) & ~(uintptr_t)4095;
	uintptr_t hi = ((uintptr_t)ram_slot(s, ppa) + s->slot_size + 4095) & ~(uintptr_t)4095;
	(void)madvise((void *)lo, hi - lo, MADV_WILLNEED);
}

static void sim_sync_stop(struct sim *s)
{
	if (!s->sync_thread_up)
		return;
	pthread_mutex_lock(&s->sync_mu);
	s->sync_stop = true;
	pthread_cond_signal(&s->sync_cv);
	pthread_mutex_unlock(&s->sync_mu);
	pthread_join(s->sync_thread, NULL);
	pthread_cond_destroy(&s->sync_cv);
	pthread_mutex_destroy(&s->sync_mu);
	s->sync_thread_up = false;
}

static uint32_t sim_erase_count(struct nand_dev *d, uint32_t block)
{
	struct sim *s = to_sim(d);
	return block < nand_blocks(&d->geo) ? s->blocks[block].erase_count : 0;
}

static bool sim_factory_bad(struct nand_dev *d, uint32_t block)
{
	struct sim *s = to_sim(d);
	return block >= nand_blocks(&d->geo) || (s->blocks[block].flags & SB_FACTORY_BAD);
}

static void sim_close(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	/* deliver nothing: the caller has abandoned its operations */
	sim_sync_stop(s);
	media_fence();
	sim_free(s);
}

/* Untimed media only: operations execute at submission anyway. */
static void sim_read_soon(struct nand_dev *d, uint32_t block, uint32_t page)
{
	struct sim *s = to_sim(d);
	const struct nand_geometry *g = &d->geo;
	if (!s->ram || s->metadata_only || block >= nand_blocks(g) || page >= g->pages_per_block)
		return;
	__builtin_prefetch(ram_slot(s, (uint64_t)block * g->pages_per_block + page));
}

static enum nand_status sim_read_now(struct nand_dev *d, uint32_t block, uint32_t page,
				     void *data, void *spare, uint32_t *data_crc)
{
	struct nand_op op = { .type = NAND_OP_READ, .block = block, .page = page,
			      .data = data, .spare = spare,
			      .flags = data_crc ? NAND_OPF_DATA_CRC : 0 };
	sim_execute(to_sim(d), &op);
	if (data_crc)
		*data_crc = op.data_crc;
	return op.status;
}

#define SIM_OPS_COMMON                                   \
	.name = "sim",                                   \
	.submit = sim_submit,                            \
	.poll = sim_poll,                                \
	.next_due = sim_next_due,                        \
	.sync = sim_sync,                                \
	.erase_count = sim_erase_count,                  \
	.factory_bad = sim_factory_bad,                  \
	.now = sim_now,                                  \
	.wait_until = sim_wait_until,                    \
	.close = sim_close,                              \
	.temperature_mc = sim_temperature_mc,            \
	.sync_start = sim_sync_start,                    \
	.sync_poll = sim_sync_poll,                      \
	.prefetch = sim_prefetch

/* timing model on: every operation takes its time */
const struct nand_ops sim_ops = { SIM_OPS_COMMON };
/* timing model off: reads may also run at once */
const struct nand_ops sim_ops_untimed = { SIM_OPS_COMMON, .read_now = sim_read_now,
						 .read_soon = sim_read_soon };

bool nand_is_sim(const struct nand_dev *d)
{
	return d && (d->ops == &sim_ops || d->ops == &sim_ops_untimed);
}

/* What every device sets up once its store is open: its ops, clock and
 * models; those of preset p, or for an image of an unknown preset the
 * stock MLC card's. */
static int sim_setup(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset *p)
{
	s->dev.ops = s->timing ? &sim_ops : &sim_ops_untimed;
	s->dev.caps = NAND_CAP_SIM | NAND_CAP_TEMPERATURE | NAND_CAP_ERASE_COUNTS |
		      (s->timing ? 0 : NAND_CAP_READ_NOW);
	s->dev.event_fd = -1; /* completions are due at known times */
	s->dev.priv = s;
	snprintf(s->dev.preset, sizeof s->dev.preset, "%s", s->hdr->preset);
	s->dev.rated_pe_cycles = s->hdr->rated_pe_cycles;
	const struct nand_preset *rp = p ? p : nand_preset_find("iodimm-mlc-320");
	int rc = timing_init(s, cfg, &rp->thermal);
	return rc ? rc : em_init(s, cfg, &rp->rel);
}

int nand_sim_open(const struct nand_sim_config *cfg, struct nand_dev **out, char *err,
		  size_t errlen)
{
	const struct nand_preset *p = NULL;
	if (cfg->preset) {
		p = nand_preset_find(cfg->preset);
		if (!p) {
			if (err && errlen)
				snprintf(err, errlen, "unknown preset '%s'", cfg->preset);
			return -EINVAL;
		}
	}
	struct sim *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->fd = -1;
	s->timing = cfg->timing;
	s->sync_on_flush = cfg->sync_on_flush;
	s->virtual_time = cfg->virtual_time;
	s->discard_on_erase = cfg->discard_on_erase;
	s->readonly = cfg->readonly;
	s->rng = cfg->seed ? cfg->seed : 0x853c49e6748fea9bull;
	s->log = cfg->log;
	s->log_arg = cfg->log_arg;
	int rc = store_open(s, cfg, &p, err, errlen);
	if (!rc)
		rc = sim_setup(s, cfg, p);
	if (rc) {
		sim_free(s);
		return rc;
	}
	*out = &s->dev;
	return 0;
}

/* The backend table's entry (hw/nand.c): the simulator with the spec's
 * settings, the rest at their defaults. */
int nand_sim_open_spec(const struct nand_spec *spec, struct nand_dev **out, char *err,
		       size_t errlen)
{
	struct nand_sim_config cfg = { .preset = spec->preset, .path = spec->path,
				       .create = spec->create, .readonly = spec->readonly,
				       .timing = spec->timing, .sync_on_flush = spec->sync_on_flush,
				       .seed = spec->seed, .log = spec->log, .log_arg = spec->log_arg };
	return nand_sim_open(&cfg, out, err, errlen);
}
