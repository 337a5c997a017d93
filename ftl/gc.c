/*
 * ftl/gc.c - garbage collection's victims: relocation into the GC
 * stream, trim re-logging, erase or retirement.  Owns the victims
 * (f->victims) and GC's reads; gc_kick runs a round from the ioDimm's
 * progress (ftl.c).  When GC runs, its room and which victim it takes
 * (the cost-benefit choice of bands): gc_admit.c.
 *
 * The unit of choice is a band (block k of every die of a row, block.c):
 * its CLOSED members become victims together, so the band's blocks are
 * erased and reused together.  A block whose program failed (RETIRING) is
 * a victim on its own.  Each victim (one block) goes through:
 *   1. scan     - its footer (P2L) is read: unit, sequence number and data
 *                 CRC of every page; without a valid footer, the spare area
 *                 of every page is read instead (cheap, no data, but ppb
 *                 reads on one die)
 *   2. examine  - page by page, in order: a data page the l2p still points
 *                 at is read (struct gc_read); when it lands and is still
 *                 current, it takes the next GC ring slot, the l2p moves to
 *                 the slot and the slot gets a new sequence number (the
 *                 unit's current version, re-logged).
 *                 A trim record newer than the older of the two checkpoints
 *                 kept (cp.keep_seq: a damaged current one falls back to
 *                 the previous, whose replay needs it) is re-logged: its
 *                 ranges that are still unmapped go into the pending trim
 *                 record, which is closed before the victim may be erased.
 *                 One that cannot be read (or a page of a user block whose
 *                 spare cannot) sets v->hold_seq instead.
 *   3. finish   - once every relocation is programmed and re-logged trims
 *                 are durable (and cp.keep_seq covers hold_seq), the block
 *                 is erased (or retired, if a program on it failed).
 * Parallelism: up to gc_examining_max victims (about one per die, so
 * several bands, on different rows when the choice allows) examine pages
 * at once, so scans and relocation reads keep every die busy.  The oldest
 * victims are examined first: a band frees nothing until all its members
 * are done, and sharing evenly would finish every band in flight at once,
 * late, while host writes wait (measured: stalls of 1.4 s at 20 % OP).
 * Pacing: while the free pool is below gc_start, each page the user stream
 * programs earns the examination of ppb / (ppb - valid) victim pages, so GC
 * frees space as fast as writes consume it, a little at a time.  When host
 * writes cannot get a block at all, GC runs unpaced.
 */
#include <errno.h>
#include <inttypes.h>

#include "ftl/gc_int.h"

#define GC_READ_TRIES 3 /* reads of a relocation before its unit is lost */

static void gc_slot_submitted(struct ftl *f, const struct slot *sl, bool retry);
static void gc_slot_programmed(struct ftl *f, struct slot *sl);

int gc_init(struct ftl *f)
{
	/* enough victims examining to keep the dies busy: about one per two
	 * dies (each holds ppb spare reads and its relocation reads) */
	f->gc_examining_max = f->ndies;
	if (f->gc_examining_max > 128)
		f->gc_examining_max = 128;
	if (f->gc_examining_max < f->row_width)
		f->gc_examining_max = f->row_width; /* one band at least */
	f->nvictims = 2 * f->gc_examining_max + (f->row_width > 1 ? f->row_width : 0) + 2;
	f->victims = ftl_alloc(f, f->nvictims * sizeof *f->victims);
	f->row_victims = ftl_alloc(f, f->nrows * sizeof *f->row_victims);
	f->vorder = ftl_alloc(f, 2 * f->nvictims * sizeof *f->vorder);
	f->vfinish = ftl_alloc(f, f->nvictims * sizeof *f->vfinish);
	if (!f->victims || !f->row_victims || !f->vorder || !f->vfinish)
		return -ENOMEM;
	/* the writer tells GC of its slots, and of host pages (pacing) */
	f->stream[STREAM_GC].submitted = gc_slot_submitted;
	f->stream[STREAM_GC].programmed = gc_slot_programmed;
	f->stream[STREAM_USER].submitted = gc_user_page;
	struct ring *r = &f->stream[STREAM_GC].ring;
	/* a read takes its buffer from the GC ring's free stack when issued,
	 * and hands it to the slot it lands in */
	f->gc_reads = ftl_alloc(f, r->nslots * sizeof *f->gc_reads);
	if (!f->gc_reads)
		return -ENOMEM;
	uint8_t *rspares = ftl_alloc(f, (size_t)r->nslots * f->spare_size);
	if (!rspares)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->nslots; i++) {
		struct gc_read *rd = &f->gc_reads[i];
		rd->f = f;
		rd->spare = rspares + (size_t)i * f->spare_size;
		rd->next_free = f->gc_read_free;
		f->gc_read_free = rd;
	}
	/* Each victim's page arrays and buffers: one page-aligned piece of a
	 * mapping touched only when the victim is used (the lowest free
	 * victim is taken first, so a light load keeps to a few). */
	size_t ppb = f->ppb, fp = f->footer_pages, ps = f->page_size, ss = f->spare_size;
	size_t each = 0;
#define VCARVE(field, bytes, align)                                                   \
	do {                                                                           \
		each = (each + (align)-1) & ~(size_t)((align)-1);                      \
		if (base)                                                              \
			v->field = (void *)(base + (size_t)i * stride + each);         \
		each += (bytes);                                                       \
	} while (0)
	uint8_t *base = NULL;
	size_t stride = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < (pass ? f->nvictims : 1); i++) {
			struct victim *v = &f->victims[i];
			each = 0;
			VCARVE(trim_buf, ps, 4096);
			VCARVE(foot_buf, fp * ps, 4096);
			VCARVE(ops, ppb * sizeof *v->ops, 64);
			VCARVE(foot_ops, fp * sizeof *v->foot_ops, 64);
			VCARVE(spares, ppb * ss, 64);
			VCARVE(foot_spares, fp * ss, 64);
			VCARVE(rmap, ppb * sizeof *v->rmap, 64);
			VCARVE(lost, ppb * sizeof *v->lost, 64);
			VCARVE(scan_st, ppb, 64);
			if (pass) {
				v->block = FTL_NO_BLOCK;
				v->phase = VIC_FREE;
			}
		}
		if (!pass) {
			stride = (each + 4095) & ~(size_t)4095;
			base = ftl_alloc_lazy(f, stride * f->nvictims);
			if (!base)
				return -ENOMEM;
		}
	}
#undef VCARVE
	return 0;
}

bool gc_busy(struct ftl *f)
{
	return f->gc_examining || f->gc_finishing;
}

static void scan_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	struct victim *v = &f->victims[(op->priv2 >> 16) & 0xFFFFFFFF];
	uint32_t page = (uint32_t)(op->priv2 & 0xFFFF), tries = (uint32_t)(op->priv2 >> 56);
	if (op->status != NAND_OK && op->status != NAND_CORRECTED && !ftl_op_stops(f, op) &&
	    op->status == NAND_UNCORRECTABLE && tries + 1 < GC_READ_TRIES &&
	    !die_is_dead(f, op->block)) {
		/*
		 * Read it again: a spare GC cannot read is a page it skips, and
		 * a trim record skipped is dropped when the block is erased: a
		 * crash then replays older writes of its units (t_ftl_model -c
		 * 5 -s 14: a trimmed unit read its old data after a power cut,
		 * after one random uncorrectable read).  A page unreadable
		 * every time is skipped, and its block kept until a checkpoint
		 * covers it (unread_hold).
		 */
		op->priv2 += 1ull << 56;
		f->st.nand_spare_reads++;
		ftl_nand_submit(f, op);
		return;
	}
	v->scan_st[page] = (uint8_t)(op->status + 1);
	v->scans_done++;
}

/* No valid footer: read the spare area of every page. */
static void victim_scan(struct ftl *f, int vi)
{
	struct victim *v = &f->victims[vi];
	for (uint32_t p = 0; p < f->ppb; p++) {
		struct nand_op *op = &v->ops[p];
		op->type = NAND_OP_READ;
		op->block = v->block;
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

static void foot_read_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	int vi = (int)op->priv2;
	struct victim *v = &f->victims[vi];
	if (ftl_op_stops(f, op)) {
		v->foot_failed = true;
	} else if (op->status != NAND_OK && op->status != NAND_CORRECTED) {
		v->foot_failed = true;
	}
	if (++v->foot_done < f->footer_pages)
		return;
	if (!v->foot_failed && !f->error &&
	    footer_parse(f, v->block, v->foot_buf, v->foot_spares, &v->foot_entries) == 0) {
		v->foot_state = 1;
		v->scans_done = f->ppb; /* nothing to scan */
		return;
	}
	if (f->dead_rmap[block_die(f, v->block)]) {
		/* a dead die: its spares are gone too; the units come from the
		 * reverse map made when it died, their data from parity */
		v->foot_state = 3;
		v->scans_done = f->ppb;
		return;
	}
	v->foot_state = 2;
	if (!f->error)
		victim_scan(f, vi);
	else
		v->scans_done = f->ppb;
}

int victim_free_slot(struct ftl *f)
{
	for (uint32_t i = 0; i < f->nvictims; i++)
		if (f->victims[i].phase == VIC_FREE)
			return (int)i;
	return -1;
}

void victim_start(struct ftl *f, int vi, uint32_t b, bool retire, bool urgent)
{
	struct victim *v = &f->victims[vi];
	struct blk *k = &f->blk[b];

	blk_set_victim(f, b);
	v->block = b;
	v->phase = VIC_EXAMINING;
	v->ready = false;
	v->swept = false;
	f->band[block_band(f, b)].gc_busy++;
	v->admitted = ++f->gc_admitted;
	f->vorder[f->nvorder++] = (struct vorder){ .vi = (uint32_t)vi, .admitted = v->admitted };
	f->gc_examining++;
	f->row_victims[die_row(f, block_die(f, b))]++;
	v->retire = retire;
	v->urgent = urgent;
	v->need_trim_record = false;
	v->log_closed = false;
	v->aborted = false;
	v->cursor = 0;
	v->scans_done = 0;
	v->pending = 0;
	v->nlost = 0;
	v->wait_user_pos = 0;
	v->hold_seq = 0;
	v->par_mark = 0;
	v->first_handout = UINT64_MAX;
	v->gc_ppl = false;
	v->trim_state = 0;
	memset(v->scan_st, 0, f->ppb);
	/* credit per user page: for the fullest victim examining */
	uint32_t valid = k->valid < f->data_pages ? k->valid : f->data_pages - 1;
	int64_t ratio = (int64_t)CREDIT_ONE * f->ppb / (f->data_pages - valid);
	if (f->gc_examining == 1 || ratio > f->gc_ratio)
		f->gc_ratio = ratio;
	/* the footer first: one or two pages instead of ppb spare reads */
	v->foot_state = 0;
	v->foot_done = 0;
	v->foot_failed = false;
	v->foot_entries = NULL;
	for (uint32_t i = 0; i < f->footer_pages; i++) {
		struct nand_op *op = &v->foot_ops[i];
		memset(op, 0, sizeof *op);
		op->type = NAND_OP_READ;
		op->block = b;
		op->page = f->data_pages + i;
		op->data = v->foot_buf + (size_t)i * f->page_size;
		op->spare = v->foot_spares + (size_t)i * f->spare_size;
		op->done = foot_read_done;
		op->priv = f;
		op->priv2 = (uint64_t)vi;
		f->st.nand_pages_read++;
		ftl_nand_submit(f, op);
	}
}

/* Relocation read landed (GC ring slot in READING). */
static void gc_read_put(struct ftl *f, struct gc_read *rd)
{
	if (rd->buf) { /* not handed to a slot */
		ring_buf_give(&f->stream[STREAM_GC].ring, rd->buf);
		rd->buf = NULL;
	}
	f->gc_reads_out--;
	rd->next_free = f->gc_read_free;
	f->gc_read_free = rd;
}

static void unit_lost(struct ftl *f, uint32_t u)
{
	f->st.lost_units++;
	if (u < f->st.lost_first)
		f->st.lost_first = u;
	if (u > f->st.lost_last)
		f->st.lost_last = u;
}

static void gc_read_landed(struct ftl *f, struct gc_read *rd, bool readable, bool corrected);

/* The page could not be read: rebuilt from its stripe (or not). */
static void gc_rebuilt(struct ftl *f, struct rb_req *rq, int status)
{
	struct gc_read *rd = (struct gc_read *)((char *)rq - offsetof(struct gc_read, rb));
	struct victim *v = &f->victims[rd->victim];
	v->pending--;
	if (f->error || f->l2p[rd->lba] != rd->from) {
		gc_read_put(f, rd);
		return;
	}
	bool readable = status == 0;
	if (readable) {
		struct ftl_spare sp;
		readable = spare_parse(f, rd->spare, &sp) == 0 && sp.type == FTL_PG_DATA &&
			   sp.lba == rd->lba && (rd->crc_from_rebuild || sp.data_crc == rd->data_crc);
		if (readable)
			rd->data_crc = sp.data_crc;
		if (readable && crc32c(0, rd->buf, f->page_size) != rd->data_crc)
			readable = false;
	}
	gc_read_landed(f, rd, readable, false);
}

/* A relocation read landed: if the unit still lives there, its data takes
 * the next GC ring slot (reserved when the read was issued). */
static void gc_read_done(struct nand_op *op)
{
	struct gc_read *rd = op->priv;
	struct ftl *f = rd->f;
	struct victim *v = &f->victims[rd->victim];

	v->pending--;
	if (ftl_op_stops(f, op) || f->l2p[rd->lba] != rd->from) {
		gc_read_put(f, rd); /* stopped, or rewritten or trimmed meanwhile */
		return;
	}
	die_note(f, op->block, DIE_READ, op->status == NAND_OK || op->status == NAND_CORRECTED);
	if (op->status == NAND_UNCORRECTABLE && rd->tries < GC_READ_TRIES - 1 &&
	    !die_is_dead(f, op->block)) {
		/*
		 * Read it again before giving the unit up: bit errors differ
		 * from read to read (NAND controllers retry with shifted read
		 * levels), and GC, unlike a host read, makes a failure final.
		 * Costs a read per try, only on a failing page.
		 */
		rd->tries++;
		v->pending++;
		f->st.nand_pages_read++;
		ftl_nand_submit(f, op);
		return;
	}
	bool readable = op->status == NAND_OK || op->status == NAND_CORRECTED;
	if (readable && rd->crc_from_rebuild) {
		/* the unit came from the reverse map: the spare says the rest */
		struct ftl_spare sp;
		readable = spare_parse(f, rd->spare, &sp) == 0 && sp.type == FTL_PG_DATA &&
			   sp.lba == rd->lba;
		if (readable)
			rd->data_crc = sp.data_crc;
	}
	if (readable && op->data_crc != rd->data_crc) {
		/* bit rot beyond ECC: relocating it would make it look good */
		ftl_crc_error(f, rd->from, "data page being relocated by GC");
		readable = false;
	}
	if (!readable && f->parity && !rd->rebuilt) {
		rd->rebuilt = true;
		rd->rb.ppa = rd->from;
		rd->rb.data = rd->buf;
		rd->rb.spare = rd->spare;
		rd->rb.done = gc_rebuilt;
		if (par_rebuild(f, &rd->rb) == 0) {
			v->pending++; /* until the rebuild is back */
			return;
		}
	}
	gc_read_landed(f, rd, readable, op->status == NAND_CORRECTED);
}

static void gc_read_landed(struct ftl *f, struct gc_read *rd, bool readable, bool corrected)
{
	struct victim *v = &f->victims[rd->victim];
	if (!readable) {
		/* the unit's only current copy is unreadable */
		f->st.read_errors_uncorrectable++;
		unit_lost(f, rd->lba);
		f->l2p[rd->lba] = L2P_LOST;
		blk_invalidate(f, rd->from);
		v->lost[v->nlost++] = rd->lba;
		/* a dead die without parity loses thousands: name the first
		 * ones, then count (the range is in the stats) */
		if (f->st.lost_units <= 16)
			ftl_log(FTL_LOG_ERR, "unit %u lost: page %u unreadable during GC (it reads "
				"EIO until rewritten: restore it from a copy)", rd->lba, rd->from);
		else if (f->st.lost_units % 4096 == 0)
			ftl_log(FTL_LOG_ERR, "%" PRIu64 " units lost so far (units %" PRIu64 " to %" PRIu64 ")",
				f->st.lost_units, f->st.lost_first, f->st.lost_last);
		gc_read_put(f, rd);
		return;
	}
	if (corrected)
		f->st.read_errors_corrected++;
	struct ring *r = &f->stream[STREAM_GC].ring;
	uint32_t idx = (uint32_t)(r->fill & r->mask);
	struct slot *sl = &r->slots[idx];
	/* the slot takes the read's buffer (an empty GC slot holds none) */
	sl->data = rd->buf;
	rd->buf = NULL;
	sl->state = SLOT_FILLED;
	sl->type = FTL_PG_DATA;
	sl->lba = rd->lba;
	sl->crc_known = true;
	sl->data_crc = rd->data_crc;
	sl->ppa = rd->from;
	sl->from = rd->from;
	sl->prev = rd->from;
	sl->cold = gc_set(f, rd->from) == SET_COLD;
	sl->victim = rd->victim;
	sl->seq = seq_take(f);
	r->fill++;
	f->l2p[rd->lba] = L2P_SLOT | L2P_SLOT_GC | idx;
	blk_invalidate(f, rd->from);
	v->pending++; /* until the relocation is programmed */
	f->st.gc_pages_relocated++;
	gc_read_put(f, rd);
}

/* The GC stream's submitted hook: the first of a victim's relocations
 * handed to NAND dates it (f->handouts counts the pages handed out). */
static void gc_slot_submitted(struct ftl *f, const struct slot *sl, bool retry)
{
	if (sl->type != FTL_PG_DATA)
		return;
	struct victim *v = &f->victims[sl->victim];
	if (v->first_handout == UINT64_MAX)
		v->first_handout = f->handouts;
}

/* The GC stream's programmed hook: one relocation of the victim fewer
 * pending. */
static void gc_slot_programmed(struct ftl *f, struct slot *sl)
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
		/* the data CRC came from the footer or the page's spare */
		if (crc32c(0, op->data, f->page_size) != v->trim_crc) {
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

/* v may hold a trim record with sequence number seq that no checkpoint
 * covers yet: its block is erased only after one does (victim_finish);
 * one is requested now. */
static void victim_hold(struct ftl *f, struct victim *v, uint64_t seq)
{
	if (seq > v->hold_seq)
		v->hold_seq = seq;
	cp_request(f, false);
}

/*
 * The spare of page p of v (no footer) is unreadable every time: what it
 * holds is unknown, maybe a trim record newer than the checkpoint, which
 * erasing the block would drop (then a crash replays older writes of its
 * units).  A user block (only the user stream writes trim records) is
 * kept until a checkpoint covers the page: its sequence number is below
 * that of the next readable page of the block (the user ring numbers its
 * pages in block order); if none follows, below the next number.
 */
static void unread_hold(struct ftl *f, struct victim *v, uint32_t p)
{
	if (f->blk[v->block].flags & BLKF_GC)
		return;
	uint64_t bound = f->next_seq - 1;
	for (uint32_t q = p + 1; q < f->data_pages && v->scan_st[q]; q++) {
		enum nand_status st = (enum nand_status)(v->scan_st[q] - 1);
		struct ftl_spare sq;
		if ((st == NAND_OK || st == NAND_CORRECTED) &&
		    spare_parse(f, v->spares + (size_t)q * f->spare_size, &sq) == 0) {
			bound = sq.seq - 1;
			break;
		}
	}
	if (bound <= f->cp.keep_seq || bound <= v->hold_seq)
		return;
	ftl_log(FTL_LOG_WARNING, "block %u page %u: spare unreadable during GC: the block is erased only after a "
		"checkpoint newer than it", v->block, p);
	victim_hold(f, v, bound);
}

/* Examine pages of the active victim, as far as credit and slots allow. */
static int victim_examine(struct ftl *f, int vi)
{
	struct victim *v = &f->victims[vi];
	struct stream *gs = &f->stream[STREAM_GC];
	struct ring *r = &gs->ring;
	/* a refresh must not wait for host writes to pay for it: a device
	 * that is only read must still move data off a failing band */
	bool unpaced = v->urgent || gc_unpaced(f);
	int n = 0;

	while (v->cursor < f->ppb) {
		if (!unpaced && f->gc_credit < CREDIT_ONE)
			break;
		uint32_t p = v->cursor;
		uint32_t ppa = ppa_make(f, v->block, p);
		struct ftl_spare sp;
		int rc;
		if (v->foot_state == 0) {
			break; /* footer not back yet */
		} else if (v->foot_state == 1) {
			/* the footer says what the page holds */
			if (p >= f->data_pages) {
				v->cursor = f->ppb; /* the footer itself */
				n++;
				break;
			}
			const struct ftl_footer_entry *e = &v->foot_entries[p];
			rc = e->lba == FTL_FOOTER_NONE ? -EILSEQ : 0;
			sp.type = e->lba == FTL_FOOTER_TRIM ? FTL_PG_TRIM : FTL_PG_DATA;
			sp.lba = e->lba;
			sp.seq = e->seq;
			sp.data_crc = e->data_crc;
		} else if (v->foot_state >= 3) {
			if (p >= f->data_pages) {
				v->cursor = f->ppb;
				n++;
				break;
			}
			uint32_t u = v->foot_state == 3 ? dead_rmap_unit(f, ppa) : v->rmap[p];
			rc = u == UINT32_MAX ? -EILSEQ : 0;
			sp.type = FTL_PG_DATA;
			sp.lba = u;
			sp.seq = 0;
			sp.data_crc = 0;
		} else {
			if (!v->scan_st[p])
				break; /* spare read not back yet */
			enum nand_status st = (enum nand_status)(v->scan_st[p] - 1);
			rc = (st == NAND_OK || st == NAND_CORRECTED) ?
				     spare_parse(f, v->spares + (size_t)p * f->spare_size, &sp) :
				     -EILSEQ;
			if (st == NAND_UNCORRECTABLE)
				unread_hold(f, v, p);
		}
		if (rc == -ENODATA) {
			v->cursor = f->ppb; /* pages are programmed in order: the rest is erased */
			n++;
			break;
		}
		if (rc == 0 && sp.type == FTL_PG_DATA && sp.lba < f->units && f->l2p[sp.lba] == ppa) {
			/* a ring slot for every read in flight */
			if (ring_free(r) <= f->gc_reads_out || !f->gc_read_free)
				break;
			struct gc_read *rd = f->gc_read_free;
			f->gc_read_free = rd->next_free;
			f->gc_reads_out++;
			rd->buf = ring_buf_take(r);
			rd->lba = sp.lba;
			rd->from = ppa;
			rd->data_crc = sp.data_crc;
			rd->victim = (uint16_t)vi;
			rd->tries = 0;
			rd->rebuilt = false;
			rd->crc_from_rebuild = v->foot_state >= 3;
			struct nand_op *op = &rd->op;
			op->type = NAND_OP_READ;
			op->block = v->block;
			op->page = p;
			op->data = rd->buf;
			op->spare = rd->crc_from_rebuild ? rd->spare : NULL;
			op->flags = NAND_OPF_DATA_CRC; /* summed in the medium's copy */
			op->done = gc_read_done;
			op->priv = rd;
			v->pending++;
			f->st.nand_pages_read++;
			ftl_nand_submit(f, op);
		} else if (rc == 0 && sp.type == FTL_PG_TRIM &&
			   (sp.seq > f->cp.keep_seq || v->trim_state != 0)) {
			/* a read of this record started (trim_state: of the
			 * page at the cursor) is seen through even if a commit
			 * moved keep_seq past it meanwhile: left in trim_buf,
			 * it was re-logged at the next record instead of that
			 * one's ranges, which were lost (a fallback to the
			 * previous checkpoint then mapped their units again) */
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
				v->trim_crc = sp.data_crc;
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
				/* its trims cannot be re-logged: the block stays until
				 * a checkpoint holds them (victim_finish), else a crash
				 * would replay older writes of those units */
				ftl_log(FTL_LOG_WARNING, "block %u page %u: trim record (seq %llu) unreadable during GC: "
					"the block is erased only after a checkpoint that holds it",
					v->block, p, (unsigned long long)sp.seq);
				victim_hold(f, v, sp.seq);
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
			unit_lost(f, (uint32_t)u);
			if (v->nlost < f->ppb)
				v->lost[v->nlost++] = (uint32_t)u;
			ftl_log(FTL_LOG_ERR, "unit %llu lost: its page in block %u is unreadable (it "
				"reads EIO until rewritten: restore it from a copy)",
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
	if (n) /* victims aborted: the finishing ones must be looked at */
		memset(f->finish_seen, 0xFF, sizeof f->finish_seen);
	if (r->submit < r->fill)
		r->submit = r->fill; /* everything left is SKIP now */
	ring_release(f, r);
	if (n)
		ftl_log(FTL_LOG_WARNING, "GC out of blocks: %d relocations given back to their victims", n);
	return n;
}

/* A finishing victim is done: its slot is free again. */
static void victim_finished(struct ftl *f, struct victim *v)
{
	if (!v->ready)
		f->band[block_band(f, v->block)].gc_busy--;
	uint32_t last = f->vfinish[--f->gc_finishing];
	f->vfinish[v->fpos] = last;
	f->victims[last].fpos = v->fpos;
	v->block = FTL_NO_BLOCK;
	v->phase = VIC_FREE;
}

/* The units the map puts into v's block, page by page: one pass over the
 * l2p (as victim_sweep_lost), then v is examined again from them. */
static void victim_map_units(struct ftl *f, struct victim *v)
{
	uint32_t lo = ppa_make(f, v->block, 0), hi = lo + f->ppb;
	for (uint32_t p = 0; p < f->ppb; p++)
		v->rmap[p] = UINT32_MAX;
	for (uint64_t u = 0; u < f->units; u++) {
		uint32_t e = f->l2p[u];
		if (e >= lo && e < hi && l2p_is_ppa(e))
			v->rmap[e - lo] = (uint32_t)u;
	}
	v->swept = true;
	v->urgent = true; /* not paced by host writes: it holds its band */
	v->foot_state = 4;
	v->cursor = 0;
}

/* Try to finish victim vi; returns 1 if it did. */
static bool ring_spares_victim(struct ftl *f, const struct victim *v);

static int victim_finish(struct ftl *f, int vi)
{
	struct victim *v = &f->victims[vi];
	struct ring *ur = &f->stream[STREAM_USER].ring;

	if (v->swept && v->cursor < f->ppb) {
		victim_examine(f, vi);
		if (v->cursor < f->ppb)
			return 0;
	}
	if (v->cursor < f->ppb || v->pending || v->scans_done < f->ppb)
		return 0;
	if (f->parity && !v->swept && !v->aborted && f->blk[v->block].valid && !f->error) {
		/* units still mapped into it whose pages said nothing readable
		 * (footer and spares gone): found through the map, relocated
		 * with their data rebuilt from parity */
		victim_map_units(f, v);
		victim_examine(f, vi);
		return 0;
	}
	if (v->aborted) {
		/* some relocations were given back: the block keeps them */
		uint32_t b = v->block;
		victim_finished(f, v);
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
		/* a victim that needs only this record to be erased may take the
		 * last free block for it: the erase gives one back */
		if (!trim_close_record_floor(f, 0))
			return 0;
		v->need_trim_record = false;
		v->log_closed = true;
		v->wait_user_pos = ur->fill;
	}
	if (ur->done < v->wait_user_pos && !ring_spares_victim(f, v))
		return 0;
	/* with parity, an unreadable page is rebuilt from the other members:
	 * none is erased before all are relocated.  This costs no free space:
	 * a band is allocated again only once every member is erased */
	struct band *bd = &f->band[block_band(f, v->block)];
	if (!v->ready) {
		v->ready = true;
		bd->gc_busy--;
	}
	if (bd->gc_busy && f->parity)
		return 0;
	if (v->hold_seq > f->cp.keep_seq) {
		/* an unreadable trim record (victim_examine), until both
		 * checkpoints kept hold it; the checkpoint needs no free block
		 * from this one (cp_reserve) */
		if (!f->cp.requested && !f->readonly)
			cp_request(f, false);
		return 0;
	}
	/* its relocations in GC's open stripes: their parity on the media
	 * first, or partial parity (parity_ppl.c, par_gc_protect) */
	if (f->parity && !f->error && v->first_handout != UINT64_MAX && !v->gc_ppl) {
		if (!v->par_mark)
			v->par_mark = f->par_opens;
		enum par_gc_wait w = par_gc_waits(f, v->par_mark, v->first_handout);
		if (w == PAR_GC_SEALING)
			return 0; /* their parity programs follow */
		if (w == PAR_GC_OPEN) {
			/* partial parity at once: waiting for GC's next
			 * relocations to complete them held bands longer
			 * (timing bench -1.4 % more; they may not come at all:
			 * the end of a burst, GC stalled) */
			if (!par_gc_protect(f))
				return 0;
			v->gc_ppl = true;
			v->par_ticket = f->par_ticket;
			v->ppl_failures = f->gc_ppl_failures;
		}
	}
	if (v->gc_ppl && v->ppl_failures != f->gc_ppl_failures && !f->gc_seal_inflight) {
		/* one failed its program: its stripe gets another */
		if (!par_gc_protect(f))
			return 0;
		v->par_ticket = f->par_ticket;
		v->ppl_failures = f->gc_ppl_failures;
	}
	if (v->gc_ppl && !par_gc_protected(f, v->par_ticket))
		return 0;

	uint32_t b = v->block;
	victim_finished(f, v);
	f->st.gc_blocks_collected++;
	if (v->retire) {
		ftl_log(FTL_LOG_NOTICE, "block %u retired after relocating its data", b);
		blk_set_bad(f, b, true);
	} else {
		blk_set_dirty(f, b);
	}
	return 1;
}

/*
 * The user ring is not drained up to v's wait position because a program
 * failed and its retry waits for a page, which may take v's erase (worn
 * blocks failing by the dozen with the pool at its floor: the ring, the
 * victims and GC waiting for each other, seen in t_ftl_wear wear_out).
 * v may be erased anyway if nothing pending before that position needs
 * its pages: no trim record, and no write replacing a unit whose durable
 * version is in v (slot->prev).  O(ring), only while retries wait.
 */
static bool ring_spares_victim(struct ftl *f, const struct victim *v)
{
	struct ring *ur = &f->stream[STREAM_USER].ring;
	if (!ur->nretry)
		return false;
	for (uint64_t pos = ur->done; pos < v->wait_user_pos; pos++) {
		const struct slot *sl = ring_slot(ur, pos);
		if (sl->state == SLOT_DONE || sl->state == SLOT_SKIP)
			continue;
		if (sl->type != FTL_PG_DATA)
			return false;
		if (l2p_is_ppa(sl->prev) && ppa_block(f, sl->prev) == v->block)
			return false;
	}
	return true;
}

/*
 * Nothing moved this round (n == 0) and nothing will: relocations wait for
 * GC pages that no erase will free (bad blocks ate the spare room), host
 * writes wait for blocks, nothing is in flight.  Give the relocations back:
 * their victims return unerased, and the next admission finds no room and
 * declares no space, so writes fail with ENOSPC instead of hanging.
 */
static int gc_unstick(struct ftl *f, int n)
{
	/* a checkpoint's commit frees blocks, and so may anything in flight */
	if (n || !f->stream[STREAM_GC].stalled || !f->stream[STREAM_USER].stalled ||
	    f->dirty.count || f->nerase_free != f->ndies || f->gc_reads_out ||
	    f->cp.phase != CP_IDLE || f->dev->inflight)
		return 0;
	return gc_cancel_stalled(f);
}

/* Every page of an examining victim examined: it moves on to finishing. */
static void victim_examined(struct ftl *f, struct victim *v)
{
	v->phase = VIC_FINISHING;
	v->fpos = f->gc_finishing;
	f->vfinish[f->gc_finishing++] = (uint32_t)(v - f->victims);
	f->gc_examining--;
	f->row_victims[die_row(f, block_die(f, v->block))]--;
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
	/*
	 * Finishing victims wait for NAND completions (their relocations, the
	 * user ring's programs, erases that free blocks), for ring slots or
	 * for a trim record: if none of that moved since a scan that finished
	 * none, none can finish now.  progress() calls this after every
	 * completion; scanning them each time was 14 % of a bench's CPU.
	 */
	struct ring *ur = &f->stream[STREAM_USER].ring, *gr = &f->stream[STREAM_GC].ring;
	uint64_t seen[8] = { f->nand_completions, ur->fill, ur->done, gr->fill, gr->done,
			     f->nfree, f->ntrim_pend, (uint64_t)f->cp.phase };
	if (f->gc_finishing && memcmp(seen, f->finish_seen, sizeof seen)) {
		int m = 0;
		/* downwards: a victim that finishes takes the last entry's place */
		for (uint32_t k = f->gc_finishing; k-- > 0;)
			m += victim_finish(f, (int)f->vfinish[k]);
		if (m)
			memset(f->finish_seen, 0xFF, sizeof f->finish_seen); /* look again */
		else
			memcpy(f->finish_seen, seen, sizeof seen);
		n += m;
	}

	while (f->gc_examining < f->gc_examining_max) {
		int r = victim_admit(f);
		if (r < 0)
			break;
		n += r;
	}
	if (!f->gc_examining) {
		f->nvorder = 0; /* every entry is stale */
		if (!gc_needed(f))
			f->gc_credit = 0;
		return n + gc_unstick(f, n);
	}
	/*
	 * Examine the oldest victims first: a band is free only once all its
	 * members are, so spreading reads and credit evenly over every victim
	 * would finish them all at once, late, and stall host writes meanwhile.
	 * The younger ones take what the older ones leave (slots, idle dies).
	 */
	uint32_t keep = 0;
	for (uint32_t k = 0; k < f->nvorder; k++) {
		struct vorder o = f->vorder[k];
		struct victim *v = &f->victims[o.vi];
		if (v->phase != VIC_EXAMINING || v->admitted != o.admitted)
			continue;
		n += victim_examine(f, (int)o.vi);
		if (v->cursor >= f->ppb) {
			victim_examined(f, v);
			n += victim_finish(f, (int)o.vi);
		} else {
			f->vorder[keep++] = o;
		}
	}
	f->nvorder = keep;
	return n + gc_unstick(f, n);
}
