/*
 * hw/nand_sim_timing.c - the simulator's device clock (virtual or the
 * monotonic clock), its timing model and the thermal model the die work
 * drives.  Owns the dies' and channels' queues, the event heap, the
 * completions of timed operations, die time and the temperature.  Called
 * by the op engine (hw/nand_sim.c): timed_submit at submission,
 * timing_advance at submission and poll.
 *
 * With the timing model on, an operation (executed on the media at
 * submission) completes when the card's controller would have finished
 * it, simulated event by event: each die serves its queue in submission
 * order (a read senses for tR, then moves the page out over its channel; a
 * program moves the page in, then programs for tPROG; an erase takes
 * tBERS), and each channel moves one page at a time, granted to the dies
 * waiting for it in the order they asked.  The channel is held only while
 * a page moves, so a die busy sensing or programming never holds up the
 * other dies on its channel.  Events are processed up to "now" whenever
 * the device is submitted to or polled; a completion is due when its last
 * phase ends.
 *
 * The thermal model integrates die work (the timing model's die time, or,
 * with timing off, each operation's nominal time) into a first-order
 * temperature, stepped at most every SIM_TH_WINDOW_NS on poll and at every
 * query.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "common/queue.h"
#include "hw/nand_sim_int.h"

/* ---- the device clock ---------------------------------------------------- */

uint64_t sim_now(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	return s->virtual_time ? s->vclock : nand_now_ns();
}

void sim_wait_until(struct nand_dev *d, uint64_t t)
{
	struct sim *s = to_sim(d);
	if (s->virtual_time) {
		if (t > s->vclock)
			s->vclock = t;
		return;
	}
	uint64_t now = nand_now_ns();
	if (t <= now)
		return;
	struct timespec ts = { (time_t)((t - now) / 1000000000u), (long)((t - now) % 1000000000u) };
	nanosleep(&ts, NULL);
}

static uint64_t xfer_ns(struct sim *s, uint32_t bytes)
{
	if (!s->tm.xfer_mbps)
		return 0;
	return (uint64_t)bytes * 1000ull / s->tm.xfer_mbps; /* MB/s = bytes/us */
}

/* ---- the event loop of the timing model ---------------------------------- */

static bool ev_less(const struct sim *s, uint32_t a, uint32_t b)
{
	return s->dies[a].until < s->dies[b].until || (s->dies[a].until == s->dies[b].until && a < b);
}

static void ev_set(struct sim *s, uint32_t i, uint32_t d)
{
	s->events[i] = d;
	s->dies[d].hpos = i;
}

/* Die d's phase ends at dies[d].until: add it to the heap (it is in it at
 * most once: a die has one phase at a time). */
static void ev_push(struct sim *s, uint32_t d)
{
	uint32_t i = s->nevents++;
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (!ev_less(s, d, s->events[parent]))
			break;
		ev_set(s, i, s->events[parent]);
		i = parent;
	}
	ev_set(s, i, d);
}

static uint32_t ev_pop(struct sim *s)
{
	uint32_t top = s->events[0], last = s->events[--s->nevents], i = 0, n = s->nevents;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && ev_less(s, s->events[c + 1], s->events[c]))
			c++;
		if (!ev_less(s, s->events[c], last))
			break;
		ev_set(s, i, s->events[c]);
		i = c;
	}
	if (n)
		ev_set(s, i, last);
	s->dies[top].hpos = NO_DIE;
	return top;
}

static uint32_t xfer_bytes(struct sim *s, const struct nand_op *op)
{
	const struct nand_geometry *g = &s->dev.geo;
	if (op->type == NAND_OP_PROGRAM)
		return g->page_size + g->spare_size;
	return (op->data ? g->page_size : 0) + (op->spare ? g->spare_size : 0);
}

static void phase(struct sim *s, uint32_t d, enum die_phase ph, uint64_t until)
{
	s->dies[d].phase = (uint8_t)ph;
	s->dies[d].until = until;
	ev_push(s, d);
}

static void xfer_start(struct sim *s, uint32_t d, uint64_t t)
{
	s->chans[d / s->dev.geo.dies_per_channel].busy = true;
	phase(s, d, DP_XFER, t + xfer_ns(s, xfer_bytes(s, s->dies[d].cur)));
}

/* Die d needs its channel at t: now if free, else after those waiting. */
static void chan_request(struct sim *s, uint32_t d, uint64_t t)
{
	struct schan *c = &s->chans[d / s->dev.geo.dies_per_channel];
	if (!c->busy) {
		xfer_start(s, d, t);
		return;
	}
	s->dies[d].phase = DP_WAIT_CHAN;
	s->dies[d].next_wait = NO_DIE;
	if (c->wtail == NO_DIE)
		c->whead = d;
	else
		s->dies[c->wtail].next_wait = d;
	c->wtail = d;
}

static void chan_release(struct sim *s, uint32_t d, uint64_t t)
{
	struct schan *c = &s->chans[d / s->dev.geo.dies_per_channel];
	c->busy = false;
	uint32_t w = c->whead;
	if (w == NO_DIE)
		return;
	c->whead = s->dies[w].next_wait;
	if (c->whead == NO_DIE)
		c->wtail = NO_DIE;
	xfer_start(s, w, t);
}

static void die_start(struct sim *s, uint32_t d, uint64_t t)
{
	struct sdie *e = &s->dies[d];
	struct nand_op *op = e->qhead;
	e->phase = DP_IDLE;
	if (!op)
		return;
	e->qhead = op->next;
	if (!e->qhead)
		e->qtail = NULL;
	op->next = NULL;
	e->cur = op;
	e->started = t;
	switch (op->type) {
	case NAND_OP_READ:
		phase(s, d, DP_WORK, t + s->tm.read_us * 1000ull); /* sense */
		break;
	case NAND_OP_PROGRAM:
		chan_request(s, d, t); /* the page goes in first */
		break;
	default:
		phase(s, d, DP_WORK, t + s->tm.erase_us * 1000ull);
		break;
	}
}

static void die_complete(struct sim *s, uint32_t d, uint64_t t)
{
	struct sdie *e = &s->dies[d];
	struct nand_op *op = e->cur;
	e->cur = NULL;
	s->busy_ns += t - e->started;
	op->due_ns = t;
	QUEUE_APPEND(s->done_head, s->done_tail, op, next);
	die_start(s, d, t);
}

/* Run the model up to now: every phase that ends by then, in time order. */
void timing_advance(struct sim *s, uint64_t now)
{
	while (s->nevents && s->dies[s->events[0]].until <= now) {
		uint32_t d = ev_pop(s);
		struct sdie *e = &s->dies[d];
		uint64_t t = e->until;
		enum nand_op_type type = e->cur->type;
		if (e->phase == DP_WORK) {
			if (type == NAND_OP_READ)
				chan_request(s, d, t); /* sensed: the page goes out */
			else
				die_complete(s, d, t); /* programmed or erased */
		} else { /* DP_XFER */
			chan_release(s, d, t);
			if (type == NAND_OP_READ)
				die_complete(s, d, t);
			else
				phase(s, d, DP_WORK, t + s->tm.program_us * 1000ull);
		}
	}
}

/* Queue a timed op on its die (the model has run up to now). */
void timed_submit(struct sim *s, struct nand_op *op, uint64_t now)
{
	uint32_t d = nand_block_die(&s->dev.geo, op->block);
	struct sdie *e = &s->dies[d];
	QUEUE_APPEND(e->qhead, e->qtail, op, next);
	if (!e->cur)
		die_start(s, d, now);
}

void timing_reset(struct sim *s)
{
	uint32_t ndies = nand_dies(&s->dev.geo);
	for (uint32_t d = 0; d < ndies; d++)
		s->dies[d] = (struct sdie){ .hpos = NO_DIE, .next_wait = NO_DIE };
	for (uint32_t c = 0; c < s->dev.geo.channels; c++)
		s->chans[c] = (struct schan){ .whead = NO_DIE, .wtail = NO_DIE };
	s->nevents = 0;
	s->done_head = s->done_tail = NULL;
}

/* ---- thermal model ------------------------------------------------------- */

/* Step the temperature to now (device clock): the die busy fraction since
 * the last step drives the target; first-order lag towards it. */
void th_step(struct sim *s, uint64_t now)
{
	if (now <= s->th_t)
		return;
	double dt = (double)(now - s->th_t);
	uint64_t work = s->busy_ns + s->th_untimed_ns;
	double busy = (double)(work - s->th_work) / (dt * nand_dies(&s->dev.geo));
	if (busy > 1)
		busy = 1;
	double target = s->th_ambient + s->th.idle_rise_mc + s->th.busy_rise_mc * busy;
	double tau = s->th.tau_ms ? s->th.tau_ms * 1e6 : 1;
	s->th_temp = target + (s->th_temp - target) * exp(-dt / tau);
	s->th_t = now;
	s->th_work = work;
}

int sim_temperature_mc(struct nand_dev *d, int32_t *mc)
{
	struct sim *s = (struct sim *)d;
	th_step(s, sim_now(d));
	*mc = (int32_t)lround(s->th_temp);
	return 0;
}

int timing_init(struct sim *s, const struct nand_sim_config *cfg, const struct nand_thermal *th)
{
	const struct nand_geometry *g = &s->dev.geo;
	s->tm = s->hdr->timing;
	s->dies = calloc(nand_dies(g), sizeof *s->dies);
	s->chans = calloc(g->channels, sizeof *s->chans);
	s->events = calloc(nand_dies(g), sizeof *s->events);
	if (!s->dies || !s->chans || !s->events)
		return -ENOMEM;
	timing_reset(s);
	s->th = *th;
	uint64_t x = xfer_ns(s, g->page_size + g->spare_size);
	s->th_cost[NAND_OP_READ] = s->tm.read_us * 1000ull + x;
	s->th_cost[NAND_OP_PROGRAM] = s->tm.program_us * 1000ull + x;
	s->th_cost[NAND_OP_ERASE] = s->tm.erase_us * 1000ull;
	s->th_ambient = cfg->ambient_mc ? cfg->ambient_mc : SIM_TH_AMBIENT_MC;
	s->th_temp = s->th_ambient + s->th.idle_rise_mc; /* idle, settled */
	s->th_t = sim_now(&s->dev);
	return 0;
}

/* ---- controls ------------------------------------------------------------ */

void nand_sim_set_timing(struct nand_dev *d, bool on)
{
	to_sim(d)->timing = on;
}

uint64_t nand_sim_die_busy_ns(const struct nand_dev *d)
{
	return nand_is_sim(d) ? ((const struct sim *)d)->busy_ns : 0;
}

void nand_sim_set_ambient_mc(struct nand_dev *d, int32_t mc)
{
	if (!nand_is_sim(d))
		return;
	struct sim *s = to_sim(d);
	th_step(s, sim_now(d)); /* the past at the old ambient */
	s->th_ambient = mc;
}

void nand_sim_set_temperature_mc(struct nand_dev *d, int32_t mc)
{
	if (!nand_is_sim(d))
		return;
	struct sim *s = to_sim(d);
	th_step(s, sim_now(d));
	s->th_temp = mc;
}
