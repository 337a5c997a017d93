/*
 * ftl/parity_ppl.c - the pages Flashback programs into open stripes so
 * that their data does not depend on parity held in memory: pads when
 * writes pause (par_idle_pad), partial-parity pages at a flush
 * (par_flush_ppl, built at submit by par_ppl_build) and before a GC
 * victim's erase (par_gc_protect); without parity, the pads that complete
 * a NAND page of several units (upage_pad).  Owns the pad and partial-parity
 * program pools (f->pad_pool, f->ppl_pool, f->par_pad_*, f->gc_seal_inflight)
 * and the open rows' ppl marks; its pages join their stripes through
 * par_submitted (parity.c).  Called by ftl.c (idle progress), io.c and
 * writer.c (flushes, the user ring's PPL slots), gc.c (victims).
 */
#include <errno.h>

#include "ftl/parity_int.h"

struct pad_op {
	struct nand_op op;
	struct ftl *f;
	uint8_t *spare;
	uint64_t seq;
	bool gc;                  /* issued by par_gc_protect (gc_seal_inflight) */
	struct pad_op *next_free;
};

/* a partial-parity page programmed at once (par_gc_protect) */
struct ppl_op {
	struct nand_op op;
	struct ftl *f;
	uint8_t *data;            /* [page_size] */
	uint8_t *spare;           /* [spare_size] */
	uint64_t seq;
	struct ppl_op *next_free;
};

/* npad pad programs, and the pad page they all program */
int par_pad_init(struct ftl *f, uint32_t npad)
{
	f->pad_pool = ftl_alloc(f, npad * sizeof *f->pad_pool);
	uint8_t *pspares = ftl_alloc(f, (size_t)npad * f->spare_size);
	f->pad_page = ftl_alloc_pages(f, f->page_size);
	if (!f->pad_pool || !pspares || !f->pad_page)
		return -ENOMEM;
	for (uint32_t i = npad; i-- > 0;) {
		struct pad_op *po = &f->pad_pool[i];
		po->f = f;
		po->spare = pspares + (size_t)i * f->spare_size;
		po->next_free = f->pad_free;
		f->pad_free = po;
	}
	struct ftl_trim_hdr th = { FTL_TRIM_MAGIC, 0 };
	memcpy(f->pad_page, &th, sizeof th);
	f->pad_crc = crc32c(0, f->pad_page, f->page_size);
	return 0;
}

int par_ppl_init(struct ftl *f)
{
	/* pads: at most every open band's current stripe at once */
	int rc = par_pad_init(f, NSTREAMS * NSETS * f->nrows * f->row_width);
	if (rc)
		return rc;
	/* GC's partial parity: each open GC row twice (a round may start
	 * while the last one's page is still being programmed) */
	uint32_t nppl = 2 * NSETS * f->nrows;
	f->ppl_pool = ftl_alloc(f, nppl * sizeof *f->ppl_pool);
	uint8_t *ppages = ftl_alloc_pages(f, (size_t)nppl * f->page_size);
	uint8_t *pspares2 = ftl_alloc(f, (size_t)nppl * f->spare_size);
	if (!f->ppl_pool || !ppages || !pspares2)
		return -ENOMEM;
	for (uint32_t i = nppl; i-- > 0;) {
		struct ppl_op *pp = &f->ppl_pool[i];
		pp->f = f;
		pp->data = ppages + (size_t)i * f->page_size;
		pp->spare = pspares2 + (size_t)i * f->spare_size;
		pp->next_free = f->ppl_free;
		f->ppl_free = pp;
	}
	return 0;
}

/* ---- idle padding ------------------------------------------------------------ */

/*
 * A stripe holding data but not yet all its members has its parity in
 * memory only: a die failing and a power cut before the stripe completes
 * would lose that stripe's data on the die (recovery finds no parity page
 * for it).  Under load stripes complete within milliseconds; when writes
 * pause, the stripes left open are completed with pad pages so that their
 * parity is programmed: once no page was handed out for PAR_PAD_NS (the
 * device's clock, virtual or real) and nothing handed out is still waiting
 * in a ring (a block's pages are programmed in order).  A pad is an empty
 * trim record, a log page with a sequence number like any other: recovery
 * replays it and GC re-logs it, both as nothing.  Cost: at most
 * row_width - 2 pages per open band per pause (16 open bands on the stock
 * geometry: 368 pages, 1.5 MB); a writer that pauses more often than every
 * PAR_PAD_NS is not padded (its stripes fill).
 */
#define PAR_PAD_NS 100000000ull /* 100 ms */
#define PAR_PAD_RETRY_NS 1000000ull /* a parity slot was busy: look again */

/*
 * The program of a page parity.c issued itself (a pad, a partial-parity
 * page) landed: the block's counts, or on failure the page out of its
 * stripe and the block retiring.  true: it failed (the medium did not
 * stop).
 */
static bool own_page_done(struct ftl *f, struct nand_op *op, uint64_t seq)
{
	uint32_t b = op->block;
	f->blk[b].inflight--;
	if (ftl_op_stops(f, op))
		return false;
	bool ok = op->status == NAND_OK;
	die_note(f, b, DIE_PROGRAM, ok);
	if (!ok) {
		f->st.program_failures++;
		par_program_failed(f, ppa_make(f, b, op->page), op->data, op->spare);
		blk_program_failed(f, b);
	} else {
		f->st.nand_pages_programmed++;
		f->cp.pages_since++;
		if (seq > f->blk_max_seq[b])
			f->blk_max_seq[b] = seq;
		if (seq < f->blk_min_seq[b])
			f->blk_min_seq[b] = seq;
	}
	blk_programs_settled(f, b);
	return !ok;
}

static void pad_done(struct nand_op *op)
{
	struct pad_op *po = op->priv;
	struct ftl *f = po->f;
	own_page_done(f, op, po->seq);
	if (po->gc)
		f->gc_seal_inflight--;
	po->next_free = f->pad_free;
	f->pad_free = po;
}

static void pad_submit(struct ftl *f, uint32_t ppa, bool gc)
{
	struct pad_op *po = f->pad_free;
	f->pad_free = po->next_free;
	po->gc = gc;
	if (gc)
		f->gc_seal_inflight++;
	po->seq = seq_take(f);
	spare_build_crc(f, po->spare, FTL_PG_TRIM, 0, po->seq, f->pad_crc);
	struct nand_op *op = &po->op;
	op_program(op, NAND_OPF_META, ppa_block(f, ppa), ppa_page(f, ppa), f->pad_page, po->spare,
		   pad_done, po);
	ftl_nand_submit(f, op);
	footer_note(f, ppa, FTL_FOOTER_TRIM, po->seq, f->pad_crc);
	par_submitted(f, ppa, f->pad_page, po->spare);
	if (f->parity)
		f->st.parity_pad_pages++;
	else
		f->st.page_pad_pages++; /* upage_pad: no stripes without parity */
}

uint64_t par_pad_due(const struct ftl *f)
{
	return f->par_partial && f->par_pad_at ? f->par_pad_at : UINT64_MAX;
}

int par_idle_pad(struct ftl *f)
{
	if (!f->par_partial)
		return 0;
	if (f->error || !f->pad_pool) {
		f->par_partial = false;
		return 0;
	}
	uint64_t now = nand_now(f->dev);
	if (!f->par_pad_at || f->handouts != f->par_pad_mark) {
		f->par_pad_at = now + PAR_PAD_NS;
		f->par_pad_mark = f->handouts;
		return 0;
	}
	if (now < f->par_pad_at)
		return 0;
	for (int i = 0; i < NSTREAMS; i++) {
		const struct ring *r = &f->stream[i].ring;
		if ((r->submit != r->fill || r->nretry) && !(f->upp > 1 && f->stream[i].stalled)) {
			f->par_pad_at = now + PAR_PAD_NS;
			return 0;
		}
	}
	int n = 0;
	bool left = false;
	for (int i = 0; i < NSTREAMS; i++)
		for (uint32_t k = 0; k < f->stream[i].nsets; k++)
			for (uint32_t row = 0; row < f->nrows; row++)
				for (;;) {
					bool busy = false;
					if (!f->pad_free) {
						left = true;
						break;
					}
					uint32_t ppa = f->parity ?
						set_pad_page(f, &f->stream[i].set[k], row, &busy) :
						set_page_fill(f, &f->stream[i].set[k], row);
					if (ppa == FTL_NO_BLOCK) {
						left |= busy;
						break;
					}
					pad_submit(f, ppa, false);
					n++;
				}
	f->par_partial = left;
	f->par_pad_at = left ? now + PAR_PAD_RETRY_NS : 0;
	f->par_pad_mark = f->handouts;
	return n;
}

/*
 * Pads for the page stream s's oldest slot waits in, once half its ring
 * was filled after that slot: no unit is coming to the page (it is in a
 * set or row the writes no longer go to, as the cold set under hot
 * writes), and the ring's done cursor, which releases slots and which a
 * GC victim waits on before its erase (gc.c), is stuck behind it.  A page
 * the writes still go to fills within a stripe's rows of hand-outs, far
 * below half a ring.  O(sets x rows) when it pads, O(1) otherwise.
 */
static int pad_stuck_page(struct ftl *f, struct stream *s)
{
	struct ring *r = &s->ring;
	if (r->fill - r->done < r->nslots / 2)
		return 0;
	const struct slot *sl = ring_slot(r, r->done);
	if (sl->state != SLOT_SUBMITTED)
		return 0;
	int n = 0;
	for (uint32_t k = 0; k < s->nsets; k++)
		for (uint32_t row = 0; row < f->nrows; row++) {
			const struct open_row *orow = &s->set[k].row[row];
			if (orow->band == FTL_NO_BLOCK || orow->col == f->row_width ||
			    band_block(f, orow->band, orow->col) != sl->op.block)
				continue;
			while (f->pad_free) {
				uint32_t ppa = set_page_fill(f, &s->set[k], row);
				if (ppa == FTL_NO_BLOCK)
					break;
				pad_submit(f, ppa, false);
				n++;
			}
		}
	return n;
}

/*
 * Several units per NAND page (f->upp > 1; no parity then): a NAND page is
 * programmed once all its units are submitted (ftl/upage.c), so a unit
 * handed out in a page nothing more is written to would wait for ever.
 * When a flush or a checkpoint waits, or now (a close), every open band's
 * member whose NAND page is partly handed out gets pads (empty trim
 * records) up to the page's end, unless its stream has more units coming;
 * GC's stream too once it has none coming and no relocation read in
 * flight (its victims wait for their relocations); a stream's oldest
 * unit's page once half its ring is behind it (pad_stuck_page); the user
 * stream's otherwise after a pause (par_idle_pad).  Cost: at most upp - 1
 * pads per open row and set each time.
 */
int upage_pad(struct ftl *f, bool now)
{
	if (f->upp < 2 || f->parity || f->error || !f->pad_pool)
		return 0;
	bool waited = f->wq_durable.head || f->cp.phase != CP_IDLE;
	int n = 0;
	for (int i = 0; i < NSTREAMS; i++) {
		const struct ring *r = &f->stream[i].ring;
		n += pad_stuck_page(f, &f->stream[i]);
		if ((r->submit != r->fill || r->nretry) && !f->stream[i].stalled && !now)
			continue; /* more units coming */
		if (!now && !waited && (i != STREAM_GC || f->gc_reads_out))
			continue; /* nobody waits: par_idle_pad, after a pause */
		for (uint32_t k = 0; k < f->stream[i].nsets; k++)
			for (uint32_t row = 0; row < f->nrows; row++)
				for (;;) {
					if (!f->pad_free)
						return n;
					uint32_t ppa = set_page_fill(f, &f->stream[i].set[k], row);
					if (ppa == FTL_NO_BLOCK)
						break;
					pad_submit(f, ppa, false);
					n++;
				}
	}
	return n;
}

/* ---- partial parity at a flush -------------------------------------------- */

/*
 * A flush or FUA write: a stripe of the user stream partly handed out has
 * its parity in memory only, and a die failing with a power cut before the
 * stripe completes would take its member there, flushed data, with it
 * (recovery could not even tell which units it held).  So every such
 * stripe gets its next member as a partial-parity page (media.h): a ring
 * slot behind the flushed data, of type FTL_PG_PPL, whose content
 * par_ppl_build makes at submit from the stripe's XOR so far.  The flush
 * completes when the ring has programmed it (ppl_serve, below).  Not for
 * the GC stream: its data is still in the victims, which give GC's open
 * stripes partial parity before they are erased (par_gc_protect).  Cost: a
 * page per open stripe per flush.
 */
/* A user ring slot for page ppa: a partial-parity page, or a pad (an
 * empty trim record). */
static void ring_fill_par(struct ftl *f, struct ring *r, uint32_t ppa, bool ppl)
{
	uint32_t idx = (uint32_t)(r->fill & r->mask);
	uint8_t *data = ring_fill_data(r, idx);
	struct slot *sl = &r->slots[idx];
	sl->state = SLOT_FILLED;
	sl->type = ppl ? FTL_PG_PPL : FTL_PG_TRIM;
	sl->crc_known = !ppl;
	if (!ppl) {
		memcpy(data, f->pad_page, f->page_size);
		sl->data_crc = f->pad_crc;
	}
	sl->ppa = ppa;
	sl->lba = ppl ? ppa_page(f, ppa) : 0;
	sl->prev = L2P_UNMAPPED;
	sl->seq = seq_take(f);
	r->fill++;
	if (ppl)
		f->st.parity_ppl_pages++;
	else
		f->st.parity_pad_pages++;
}

/* The open stripe of orow has members handed out since its last
 * partial-parity page (or pads), and a parity context: it needs one. */
static bool row_needs_ppl(const struct ftl *f, const struct open_row *orow)
{
	return orow->band != FTL_NO_BLOCK && orow->col != 0 && orow->col != f->row_width &&
	       band_par_of(f, orow->band) &&
	       !(orow->ppl_band == orow->band && orow->ppl_page == orow->page &&
		 orow->ppl_col == orow->col);
}

static void ppl_submit(struct ftl *f, uint32_t ppa);

/* How a partial-parity page (or a stripe 0's pads) is programmed: as a
 * user ring slot behind the flushed data (its content made at submit), or
 * at once (GC: every member handed out is submitted already). */
enum ppl_via { PPL_USER_RING, PPL_NOW };

/*
 * Every stripe of stream s that needs one (row_needs_ppl) gets its next
 * member as a partial-parity page; a stripe 0 gets pads instead until it
 * is sealed (media.h: no block starts with a page type older versions do
 * not know; its parity follows, and the callers wait for it:
 * par_sealed_done).  false: no room now (a ring slot, an op), call again;
 * stripes served already are not served twice.  O(sets x rows).
 */
static bool ppl_serve(struct ftl *f, struct stream *s, enum ppl_via via)
{
	struct ring *r = &s->ring;
	for (uint32_t k = 0; k < s->nsets; k++)
		for (uint32_t row = 0; row < f->nrows; row++) {
			struct open_row *orow = &s->set[k].row[row];
			if (!row_needs_ppl(f, orow))
				continue;
			bool pad = orow->page == 0;
			for (uint32_t band = orow->band;;) {
				/* user ring: one slot for it, one kept for a
				 * trim record */
				if (via == PPL_USER_RING ? ring_free(r) < 2
				    : pad ? !f->pad_free : !f->ppl_free)
					return false;
				bool busy = false;
				uint32_t ppa = set_pad_page(f, &s->set[k], row, &busy);
				if (ppa == FTL_NO_BLOCK)
					break; /* sealed (its parity follows), or not
						* begun (busy: the cursor only skipped
						* columns that take nothing, and the
						* stripe's slot still holds an older one) */
				if (via == PPL_USER_RING)
					ring_fill_par(f, r, ppa, !pad);
				else if (pad)
					pad_submit(f, ppa, true);
				else
					ppl_submit(f, ppa);
				if (!pad || orow->band != band || orow->page != 0)
					break;
			}
			orow->ppl_band = orow->band;
			orow->ppl_page = orow->page;
			orow->ppl_col = orow->col;
		}
	return true;
}

bool par_flush_ppl(struct ftl *f)
{
	if (!f->parity || !f->flush_ppl)
		return true;
	return ppl_serve(f, &f->stream[STREAM_USER], PPL_USER_RING);
}

void par_ppl_failed(struct ftl *f, enum stream_id stream, uint32_t ppa)
{
	uint32_t bi = block_band(f, ppa_block(f, ppa)), page = ppa_page(f, ppa);
	struct stream *s = &f->stream[stream];
	for (uint32_t k = 0; k < s->nsets; k++)
		for (uint32_t row = 0; row < f->nrows; row++) {
			struct open_row *orow = &s->set[k].row[row];
			if (orow->ppl_band == bi && orow->ppl_page == page)
				orow->ppl_band = FTL_NO_BLOCK;
		}
	if (stream == STREAM_USER)
		f->ppl_redo = true;
	else
		f->gc_ppl_failures++;
}

/*
 * The content of the partial-parity page ppa, at its submit: the XOR of
 * the members of its stripe submitted so far (every one handed out before
 * it: the user ring submits in order), their columns, and the XOR of their
 * spares.  Returns its data CRC.  Cost: a page copy and its CRC.
 */
uint32_t par_ppl_build(struct ftl *f, uint32_t ppa, uint64_t seq, uint8_t *data, uint8_t *spare)
{
	uint32_t b = ppa_block(f, ppa), page = ppa_page(f, ppa);
	struct band_par *bp = band_par_of(f, block_band(f, b));
	struct par_stripe *s = bp ? &bp->st[page % PAR_STRIPES] : NULL;
	bool in = s && s->state == PS_FILLING && s->page == page;
	if (in)
		memcpy(data, s->acc, f->page_size);
	else
		memset(data, 0, f->page_size); /* covers nothing */
	uint32_t crc = crc32c(0, data, f->page_size);
	spare_build_full(f, spare, FTL_PG_PPL, page, seq, crc, in ? s->sub_mask : 0);
	if (in)
		memcpy(spare + SPARE_SZ, s->spare + SPARE_SZ, SPARE_SZ);
	return crc;
}

/* ---- partial parity for GC's open stripes --------------------------------- */

/*
 * A victim's relocations land in the GC stream's open stripes, whose parity
 * is in memory until they complete.  Once the victim is erased, a relocated
 * page there is its unit's only copy, and a die lost with a power cut (or
 * found dead at the next open) takes it: recovery finds no parity page for
 * the stripe.  So a victim is erased (gc.c, victim_finish) only once the
 * GC stripes holding pages handed out since its first relocation
 * (par_gc_waits) are safe: those already complete once their parity page
 * is programmed; those still partly handed out get a partial-parity page
 * at once (every open GC stripe that moved since its last; stripe 0 pads
 * instead, media.h), and the erase waits until those are programmed and
 * the stripes sealed before have their parity (par_gc_protect,
 * par_gc_protected).  Programmed directly, not through the GC ring: GC
 * slots take their page at submit, so every member handed out is already
 * submitted and in the stripe's XOR; and a ring stalled for want of a free
 * block (which the erase gives) cannot hold them up.  Cost: at most a page
 * per open GC row per band collected, none for a row whose stripe has not
 * moved since its last; a band's erase waits a program or so, for which
 * GC starts a band earlier (gc_needed).
 */
static void ppl_done(struct nand_op *op)
{
	struct ppl_op *pp = op->priv;
	struct ftl *f = pp->f;
	/* as a user ring PPL: not again, but the stripe gets another */
	if (own_page_done(f, op, pp->seq))
		par_ppl_failed(f, STREAM_GC, ppa_make(f, op->block, op->page));
	f->gc_seal_inflight--;
	pp->next_free = f->ppl_free;
	f->ppl_free = pp;
}

static void ppl_submit(struct ftl *f, uint32_t ppa)
{
	struct ppl_op *pp = f->ppl_free;
	f->ppl_free = pp->next_free;
	f->gc_seal_inflight++;
	pp->seq = seq_take(f);
	uint32_t crc = par_ppl_build(f, ppa, pp->seq, pp->data, pp->spare);
	struct nand_op *op = &pp->op;
	op_program(op, NAND_OPF_META, ppa_block(f, ppa), ppa_page(f, ppa), pp->data, pp->spare,
		   ppl_done, pp);
	ftl_nand_submit(f, op);
	footer_note(f, ppa, FTL_FOOTER_PARITY, pp->seq, crc);
	par_submitted(f, ppa, pp->data, pp->spare);
	f->st.parity_ppl_pages++;
}

bool par_gc_protect(struct ftl *f)
{
	if (!f->parity || f->error)
		return true;
	return ppl_serve(f, &f->stream[STREAM_GC], PPL_NOW);
}

bool par_gc_protected(const struct ftl *f, uint64_t t)
{
	return !f->gc_seal_inflight && par_sealed_done(f, t);
}
