/*
 * ftl/gc.c - garbage collection: greedy victims, relocation into the GC
 * stream, trim re-logging, erase or retirement of the victim.
 *
 * A victim goes through:
 *   1. scan     - the spare area of every page is read (cheap, no data)
 *   2. examine  - page by page, in order: a data page the l2p still points
 *                 at is read into a GC ring slot; when it lands and is still
 *                 current, the l2p moves to the slot and the slot gets a new
 *                 sequence number (the unit's current version, re-logged).
 *                 A trim record newer than the checkpoint is re-logged: its
 *                 ranges that are still unmapped go into the pending trim
 *                 record, which is closed before the victim may be erased.
 *   3. finish   - once every relocation is programmed and re-logged trims
 *                 are durable, the block is erased (or retired, if a program
 *                 on it failed).
 * Pacing: while the free pool is below gc_start, each page the user stream
 * programs earns the examination of ppb / (ppb - valid) victim pages, so GC
 * frees space as fast as writes consume it, a little at a time.  When host
 * writes cannot get a block at all, GC runs unpaced.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

#define CREDIT_ONE 16

int gc_init(struct ftl *f)
{
	for (int i = 0; i < GC_MAX_VICTIMS; i++) {
		struct victim *v = &f->victims[i];
		v->block = FTL_NO_BLOCK;
		v->ops = ftl_alloc(f, (size_t)f->ppb * sizeof *v->ops);
		v->spares = ftl_alloc(f, (size_t)f->ppb * f->spare_size);
		v->scan_st = ftl_alloc(f, f->ppb);
		v->lost = ftl_alloc(f, (size_t)f->ppb * sizeof *v->lost);
		v->trim_buf = ftl_alloc_pages(f, f->page_size);
		if (!v->ops || !v->spares || !v->scan_st || !v->lost || !v->trim_buf)
			return -ENOMEM;
	}
	f->active_victim = -1;
	return 0;
}

static bool gc_needed(struct ftl *f)
{
	return f->nfree < f->gc_start || f->retire.count;
}

/* GC runs without pacing when writes are stuck or blocks must be retired. */
static bool gc_unpaced(struct ftl *f)
{
	return f->stream[STREAM_USER].stalled || f->nfree <= f->user_min || f->retire.count;
}

void gc_user_page(struct ftl *f)
{
	if (f->active_victim >= 0 || gc_needed(f)) {
		f->gc_credit += f->gc_ratio;
		/* credit left unused (GC waiting for reads or slots) must not
		 * turn into a long burst later */
		if (f->gc_credit > (int64_t)CREDIT_ONE * f->ppb)
			f->gc_credit = (int64_t)CREDIT_ONE * f->ppb;
	}
}

bool gc_busy(struct ftl *f)
{
	for (int i = 0; i < GC_MAX_VICTIMS; i++)
		if (f->victims[i].block != FTL_NO_BLOCK)
			return true;
	return false;
}

static void scan_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	struct victim *v = &f->victims[op->priv2 >> 16];
	uint32_t page = (uint32_t)(op->priv2 & 0xFFFF);
	if (op->status != NAND_OK && op->status != NAND_CORRECTED)
		ftl_op_stops(f, op);
	v->scan_st[page] = (uint8_t)(op->status + 1);
	v->scans_done++;
}

static void victim_start(struct ftl *f, int vi, uint32_t b, bool retire)
{
	struct victim *v = &f->victims[vi];
	struct blk *k = &f->blk[b];

	blk_leave(f, b);
	k->state = BLK_VICTIM;
	v->block = b;
	v->retire = retire;
	v->need_trim_record = false;
	v->log_closed = false;
	v->aborted = false;
	v->cursor = 0;
	v->scans_done = 0;
	v->pending = 0;
	v->nlost = 0;
	v->wait_user_pos = 0;
	v->trim_state = 0;
	memset(v->scan_st, 0, f->ppb);
	uint32_t valid = k->valid < f->ppb ? k->valid : f->ppb - 1;
	f->gc_ratio = (int64_t)CREDIT_ONE * f->ppb / (f->ppb - valid);
	for (uint32_t p = 0; p < f->ppb; p++) {
		struct nand_op *op = &v->ops[p];
		op->type = NAND_OP_READ;
		op->block = b;
		op->page = p;
		op->data = NULL;
		op->spare = v->spares + (size_t)p * f->spare_size;
		op->done = scan_done;
		op->priv = f;
		op->priv2 = ((uint64_t)vi << 16) | p;
		ftl_nand_submit(f, op);
	}
	f->st.nand_spare_reads += f->ppb;
}

/* Relocation read landed (GC ring slot in READING). */
static void gc_read_done(struct nand_op *op)
{
	struct stream *s = op->priv;
	struct ftl *f = s->f;
	struct ring *r = &s->ring;
	uint32_t idx = (uint32_t)op->priv2;
	struct slot *sl = &r->slots[idx];
	struct victim *v = &f->victims[sl->victim];

	v->pending--;
	if (ftl_op_stops(f, op)) {
		sl->state = SLOT_SKIP;
		return;
	}
	if (f->l2p[sl->lba] != sl->from) {
		sl->state = SLOT_SKIP; /* rewritten or trimmed meanwhile */
		return;
	}
	bool readable = op->status == NAND_OK || op->status == NAND_CORRECTED;
	if (readable && crc32c(0, op->data, f->page_size) != sl->data_crc) {
		/* bit rot beyond ECC: relocating it would make it look good */
		ftl_crc_error(f, sl->from, "data page being relocated by GC");
		readable = false;
	}
	if (!readable) {
		/* the unit's only current copy is unreadable */
		f->st.read_errors_uncorrectable++;
		f->st.lost_units++;
		f->l2p[sl->lba] = L2P_LOST;
		blk_invalidate(f, sl->from);
		v->lost[v->nlost++] = sl->lba;
		sl->state = SLOT_SKIP;
		ftl_log("unit %u lost: page %u unreadable during GC", sl->lba, sl->from);
		return;
	}
	if (op->status == NAND_CORRECTED)
		f->st.read_errors_corrected++;
	f->l2p[sl->lba] = L2P_SLOT | L2P_SLOT_GC | idx;
	blk_invalidate(f, sl->from);
	sl->seq = f->next_seq++;
	sl->state = SLOT_FILLED;
	v->pending++; /* until the relocation is programmed */
	f->st.gc_pages_relocated++;
}

void gc_slot_programmed(struct ftl *f, struct slot *sl)
{
	f->victims[sl->victim].pending--;
}

static void trim_read_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	struct victim *v = &f->victims[op->priv2];
	v->pending--;
	if (ftl_op_stops(f, op)) {
		v->trim_state = 3;
		return;
	}
	bool readable = op->status == NAND_OK || op->status == NAND_CORRECTED;
	if (readable) {
		/* the data CRC is in the spare GC read when it scanned the victim */
		struct ftl_spare sp;
		const uint8_t *spare = v->spares + (size_t)op->page * f->spare_size;
		if (spare_parse(f, spare, &sp) != 0 || crc32c(0, op->data, f->page_size) != sp.data_crc) {
			ftl_crc_error(f, ppa_make(f, op->block, op->page), "trim record being re-logged by GC");
			readable = false;
		}
	}
	v->trim_state = readable ? 2 : 3;
}

/*
 * Re-log the still-relevant part of a trim record read into v->trim_buf:
 * runs of units that are still unmapped (or still lost).  Resumable: the
 * pending record may fill up and need a free user slot to close.
 */
static bool trim_relog(struct ftl *f, struct victim *v)
{
	struct ftl_trim_hdr h;
	memcpy(&h, v->trim_buf, sizeof h);
	if (h.magic != FTL_TRIM_MAGIC || h.nranges > trim_record_capacity(f))
		return true;
	while (v->trim_range < h.nranges) {
		struct ftl_trim_range t;
		memcpy(&t, v->trim_buf + sizeof h + v->trim_range * sizeof t, sizeof t);
		bool lost = t.count & FTL_TRIM_LOST;
		uint32_t want = lost ? L2P_LOST : L2P_UNMAPPED;
		uint64_t end = (uint64_t)t.start + (t.count & ~FTL_TRIM_LOST);
		if (end > f->units)
			end = f->units;
		uint64_t u = t.start + v->trim_unit;
		while (u < end) {
			if (f->l2p[u] != want) {
				u++;
				continue;
			}
			uint64_t e = u;
			while (e < end && f->l2p[e] == want)
				e++;
			if (!trim_pending_add(f, (uint32_t)u, (uint32_t)(e - u), lost)) {
				v->trim_unit = (uint32_t)(u - t.start);
				if (!trim_close_record(f))
					return false;
				continue;
			}
			v->need_trim_record = true;
			u = e;
		}
		v->trim_range++;
		v->trim_unit = 0;
	}
	return true;
}

/* Examine pages of the active victim, as far as credit and slots allow. */
static int victim_examine(struct ftl *f, int vi)
{
	struct victim *v = &f->victims[vi];
	struct stream *gs = &f->stream[STREAM_GC];
	struct ring *r = &gs->ring;
	bool unpaced = gc_unpaced(f);
	int n = 0;

	while (v->cursor < f->ppb) {
		if (!unpaced && f->gc_credit < CREDIT_ONE)
			break;
		uint32_t p = v->cursor;
		if (!v->scan_st[p])
			break; /* spare read not back yet */
		uint32_t ppa = ppa_make(f, v->block, p);
		enum nand_status st = (enum nand_status)(v->scan_st[p] - 1);
		struct ftl_spare sp;
		int rc = (st == NAND_OK || st == NAND_CORRECTED) ?
				 spare_parse(f, v->spares + (size_t)p * f->spare_size, &sp) :
				 -EILSEQ;
		if (rc == -ENODATA) {
			v->cursor = f->ppb; /* pages are programmed in order: the rest is erased */
			n++;
			break;
		}
		if (rc == 0 && sp.type == FTL_PG_DATA && sp.lba < f->units && f->l2p[sp.lba] == ppa) {
			if (ring_free(r) < 1)
				break;
			uint32_t idx = (uint32_t)(r->fill & r->mask);
			struct slot *sl = &r->slots[idx];
			sl->state = SLOT_READING;
			sl->type = FTL_PG_DATA;
			sl->lba = sp.lba;
			sl->crc_known = true;
			sl->data_crc = sp.data_crc;
			sl->ppa = ppa;
			sl->from = ppa;
			sl->victim = (uint16_t)vi;
			r->fill++;
			struct nand_op *op = &sl->op;
			op->type = NAND_OP_READ;
			op->block = v->block;
			op->page = p;
			op->data = ring_data(r, idx, f->page_size);
			op->spare = NULL;
			op->done = gc_read_done;
			op->priv = gs;
			op->priv2 = idx;
			v->pending++;
			f->st.nand_pages_read++;
			ftl_nand_submit(f, op);
		} else if (rc == 0 && sp.type == FTL_PG_TRIM && sp.seq > f->cp.cur_seq) {
			if (v->trim_state == 0) {
				struct nand_op *op = &v->trim_op;
				op->type = NAND_OP_READ;
				op->block = v->block;
				op->page = p;
				op->data = v->trim_buf;
				op->spare = NULL;
				op->done = trim_read_done;
				op->priv = f;
				op->priv2 = (uint64_t)vi;
				v->trim_state = 1;
				v->trim_range = v->trim_unit = 0;
				v->pending++;
				f->st.nand_pages_read++;
				ftl_nand_submit(f, op);
				n++;
				break;
			}
			if (v->trim_state == 1)
				break;
			if (v->trim_state == 3) {
				ftl_log("block %u page %u: trim record unreadable during GC", v->block, p);
			} else if (!trim_relog(f, v)) {
				break;
			}
			v->trim_state = 0;
		}
		v->cursor++;
		if (!unpaced)
			f->gc_credit -= CREDIT_ONE;
		n++;
	}
	return n;
}

/* Units still mapped into a finished victim have no readable page: lost. */
static void victim_sweep_lost(struct ftl *f, struct victim *v)
{
	uint32_t lo = ppa_make(f, v->block, 0), hi = lo + f->ppb;
	for (uint64_t u = 0; u < f->units && f->blk[v->block].valid; u++) {
		uint32_t e = f->l2p[u];
		if (e >= lo && e < hi && l2p_is_ppa(e)) {
			f->l2p[u] = L2P_LOST;
			blk_invalidate(f, e);
			f->st.lost_units++;
			if (v->nlost < f->ppb)
				v->lost[v->nlost++] = (uint32_t)u;
			ftl_log("unit %llu lost: its page in block %u is unreadable",
				(unsigned long long)u, v->block);
		}
	}
}

/*
 * Give back relocations that cannot get a page (the GC stream is out of
 * blocks, e.g. after blocks went bad): their units point at their old pages
 * again, which are still valid in the victim (it is erased only after its
 * relocations are programmed).  Their victims go back to CLOSED unerased.
 * Used when a checkpoint must quiesce the log.  Returns how many.
 */
int gc_cancel_stalled(struct ftl *f)
{
	struct stream *g = &f->stream[STREAM_GC];
	struct ring *r = &g->ring;
	int n = 0;
	if (!g->stalled && !r->nretry)
		return 0;
	for (uint64_t pos = r->done; pos < r->fill; pos++) {
		struct slot *sl = ring_slot(r, pos);
		if (sl->state != SLOT_FILLED)
			continue;
		uint32_t idx = (uint32_t)(pos & r->mask);
		uint32_t ref = L2P_SLOT | L2P_SLOT_GC | idx;
		struct victim *v = &f->victims[sl->victim];
		if (f->l2p[sl->lba] == ref) {
			f->l2p[sl->lba] = sl->from;
			blk_validate(f, sl->from);
		}
		sl->state = pos < r->submit ? SLOT_DONE : SLOT_SKIP;
		v->pending--;
		v->aborted = true;
		f->st.gc_pages_relocated--;
		n++;
	}
	r->nretry = 0;
	g->stalled = false;
	if (r->submit < r->fill)
		r->submit = r->fill; /* everything left is SKIP now */
	ring_release(f, r);
	if (n)
		ftl_log("GC out of blocks: %d relocations given back to their victims", n);
	return n;
}

/* Try to finish victim vi; returns 1 if it did. */
static int victim_finish(struct ftl *f, int vi)
{
	struct victim *v = &f->victims[vi];
	struct ring *ur = &f->stream[STREAM_USER].ring;

	if (v->cursor < f->ppb || v->pending || v->scans_done < f->ppb)
		return 0;
	if (v->aborted) {
		/* some relocations were given back: the block keeps them */
		uint32_t b = v->block;
		v->block = FTL_NO_BLOCK;
		blk_set_closed(f, b);
		return 1;
	}
	if (f->blk[v->block].valid)
		victim_sweep_lost(f, v);
	while (v->nlost) {
		uint32_t u = v->lost[v->nlost - 1];
		if (f->l2p[u] == L2P_LOST && !trim_pending_add(f, u, 1, true)) {
			if (!trim_close_record(f))
				return 0;
			continue;
		}
		v->nlost--;
		v->need_trim_record = true;
	}
	/*
	 * Pages of the victim that host writes or trims made stale may still
	 * hold the newest durable version of their unit, until those writes
	 * and trim records are programmed: wait for everything the user ring
	 * holds now (it can always drain: its slots have pages).
	 */
	if (!v->log_closed) {
		if (!trim_close_record(f))
			return 0;
		v->need_trim_record = false;
		v->log_closed = true;
		v->wait_user_pos = ur->fill;
	}
	if (ur->done < v->wait_user_pos)
		return 0;

	uint32_t b = v->block;
	v->block = FTL_NO_BLOCK;
	f->st.gc_blocks_collected++;
	if (v->retire) {
		ftl_log("block %u retired after relocating its data", b);
		blk_set_bad(f, b, true);
	} else {
		blk_set_dirty(f, b);
	}
	return 1;
}

/* Pages the GC stream can still program without going below gc_min. */
static uint64_t gc_room(struct ftl *f)
{
	struct stream *g = &f->stream[STREAM_GC];
	uint64_t room = 0;
	for (uint32_t d = 0; d < f->ndies; d++)
		if (g->die[d].block != FTL_NO_BLOCK)
			room += f->ppb - f->blk[g->die[d].block].wp;
	if (f->nfree > f->gc_min)
		room += (uint64_t)(f->nfree - f->gc_min) * f->ppb;
	return room;
}

/* Pages the victims in flight may still need: valid pages not yet
 * relocated, and relocations waiting for a page. */
static uint64_t gc_owed(struct ftl *f)
{
	struct ring *r = &f->stream[STREAM_GC].ring;
	uint64_t owed = r->fill - r->submit;
	for (int i = 0; i < GC_MAX_VICTIMS; i++)
		if (f->victims[i].block != FTL_NO_BLOCK)
			owed += f->blk[f->victims[i].block].valid;
	return owed;
}

/*
 * Admission: a victim starts only if the GC stream has room for its valid
 * pages on top of what the victims in flight still owe, so GC can always
 * finish what it started without dipping below gc_min.
 */
int gc_kick(struct ftl *f)
{
	int n = 0;

	if (f->error || f->readonly)
		return 0;
	/* while a checkpoint is written the l2p must not change; while it waits
	 * for the log to drain, GC only helps host writes that are stuck */
	if (f->cp.phase == CP_WRITE || f->cp.phase == CP_COMMIT)
		return 0;
	bool quiescing = f->cp.phase == CP_QUIESCE;
	for (int i = 0; i < GC_MAX_VICTIMS; i++)
		if (f->victims[i].block != FTL_NO_BLOCK && i != f->active_victim)
			n += victim_finish(f, i);

	if (quiescing && !f->stream[STREAM_USER].stalled)
		return n;
	if (f->active_victim < 0) {
		if (!gc_needed(f)) {
			f->gc_credit = 0;
			return n;
		}
		int vi = -1;
		for (int i = 0; i < GC_MAX_VICTIMS; i++)
			if (f->victims[i].block == FTL_NO_BLOCK) {
				vi = i;
				break;
			}
		if (vi < 0)
			return n;
		uint32_t b = FTL_NO_BLOCK;
		bool retire = false;
		if (f->retire.count) {
			b = blist_pop(f, &f->retire);
			retire = true;
		} else {
			b = blk_victim_pick(f);
		}
		bool room = b != FTL_NO_BLOCK && gc_room(f) >= gc_owed(f) + f->blk[b].valid;
		if (!room) {
			/* not enough room to relocate it yet: let the victims in
			 * flight finish and free their blocks first */
			if (retire && b != FTL_NO_BLOCK)
				blist_push(f, &f->retire, b);
			if (!gc_busy(f) && f->stream[STREAM_USER].stalled && !f->dirty.count &&
			    !f->no_space) {
				/* nothing in flight will ever free a block: the spare
				 * capacity is gone (bad blocks ate it) */
				f->no_space = true;
				ftl_log("no room left to collect garbage: writes now fail with ENOSPC");
			}
			return n;
		}
		victim_start(f, vi, b, retire);
		f->active_victim = vi;
		n++;
	}
	int vi = f->active_victim;
	n += victim_examine(f, vi);
	if (f->victims[vi].cursor >= f->ppb) {
		f->active_victim = -1;
		n += victim_finish(f, vi);
	}
	return n;
}
