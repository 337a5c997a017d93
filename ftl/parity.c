/*
 * ftl/parity.c - Flashback: XOR parity per band stripe, accumulated as the
 * data pages are submitted and programmed into the band's parity column.
 * Owns the parity contexts of open bands and their stripes (parity_int.h;
 * f->par_pool, f->gc_stripes, f->par_ticket, f->par_opens): only this file
 * changes them.  Called by writer.c (band open, handouts, submits, failed
 * programs), gc.c (what a victim's erase waits for), ftl.c (init, close)
 * and the other parity files (parity_ppl.c's pages are members like data
 * pages).  Pads and partial parity: parity_ppl.c; rebuilding a page:
 * parity_rebuild.c; stripes cut short by a crash: parity_recover.c; dead
 * dies: die.c.
 *
 *
 * Writing (media.h, "parity").  A band opened by a set with parity on gets
 * a context (struct band_par) and a parity column: its first live member
 * from column band % row width on (par_pick_pcol: the parity rotates).
 * The set hands out the other members' pages stripe by stripe
 * (writer.c, set_next_page); each stripe in progress has a slot in the
 * context (stripe page % PAR_STRIPES) holding the XOR of the data pages
 * submitted so far.  A stripe is sealed when its last data page is handed
 * out; once sealed and every handed-out page submitted, its parity page is
 * programmed into the parity column, stripes strictly in page order (the
 * block's pages are programmed in order).  The slot is free again when
 * that program completes; a band whose next stripe would need a slot still
 * in use hands out nothing until it is free (bounded memory: PAR_STRIPES
 * pages per open band).  Cost per data page: one XOR of a page and of a
 * spare struct, on the ioDimm thread.
 */
#include <errno.h>

#include "ftl/parity_int.h"


/* f->gc_stripes: the stripes of GC bands not FREE, for victims to wait on
 * (par_gc_waits); O(1) each */
static void gc_stripe_link(struct ftl *f, struct par_stripe *s)
{
	s->gc_prev = NULL;
	s->gc_next = f->gc_stripes;
	if (s->gc_next)
		s->gc_next->gc_prev = s;
	f->gc_stripes = s;
	s->gc_linked = true;
}

static void gc_stripe_unlink(struct ftl *f, struct par_stripe *s)
{
	if (!s->gc_linked)
		return;
	if (s->gc_prev)
		s->gc_prev->gc_next = s->gc_next;
	else
		f->gc_stripes = s->gc_next;
	if (s->gc_next)
		s->gc_next->gc_prev = s->gc_prev;
	s->gc_linked = false;
}

static void stripe_free(struct ftl *f, struct par_stripe *s)
{
	s->state = PS_FREE;
	gc_stripe_unlink(f, s);
}

int par_init(struct ftl *f)
{
	if (!f->parity) /* pads complete NAND pages of several units (upage_pad) */
		return f->upp > 1 ? par_pad_init(f, NSTREAMS * NSETS * f->nrows * f->upp) : 0;
	/* open bands: two sets per stream, a band per row each, and as many
	 * again whose pages are all handed out but whose parity is not yet
	 * programmed */
	f->npar = 2 * NSTREAMS * NSETS * f->nrows + 4;
	f->par_pool = ftl_alloc(f, f->npar * sizeof *f->par_pool);
	if (!f->par_pool)
		return -ENOMEM;
	for (uint32_t i = f->npar; i-- > 0;) {
		struct band_par *bp = &f->par_pool[i];
		bp->f = f;
		bp->band = FTL_NO_BLOCK;
		uint8_t *pages = ftl_alloc_pages(f, (size_t)PAR_STRIPES * f->page_size);
		uint8_t *spares = ftl_alloc(f, (size_t)PAR_STRIPES * f->spare_size);
		if (!pages || !spares)
			return -ENOMEM;
		for (uint32_t k = 0; k < PAR_STRIPES; k++) {
			bp->st[k].acc = pages + (size_t)k * f->page_size;
			bp->st[k].spare = spares + (size_t)k * f->spare_size;
		}
		bp->next_free = f->par_free;
		f->par_free = bp;
	}
	int rc = par_ppl_init(f);
	if (!rc)
		rc = rb_init(f);
	return rc;
}

/* ---- writing --------------------------------------------------------------- */

/*
 * The parity column of band bi among the columns in mask: the first
 * counting from column bi % row_width, cyclically, so the parity rotates
 * over the dies band by band (RAID-5, not RAID-4).  A fixed parity die
 * would get no GC relocation reads (parity pages are never relocated) and
 * idle while the data dies carry them: 1.7 points of die utilisation lost
 * at 20 % OP.  UINT32_MAX: mask is empty.
 */
uint32_t par_pick_pcol(const struct ftl *f, uint32_t bi, uint32_t mask)
{
	uint32_t w = f->row_width;
	for (uint32_t k = 0; k < w; k++) {
		uint32_t c = (bi + k) % w;
		if (mask & (1u << c))
			return c;
	}
	return UINT32_MAX;
}

static void par_release(struct ftl *f, struct band_par *bp);

bool par_band_open(struct ftl *f, uint32_t bi, bool gc)
{
	if (!f->parity)
		return true;
	struct band_par *bp = f->par_free;
	if (!bp)
		return false;
	uint32_t live = 0;
	for (uint32_t c = 0; c < f->row_width; c++)
		if (f->blk[band_block(f, bi, c)].state == BLK_OPEN)
			live |= 1u << c;
	uint32_t pcol = par_pick_pcol(f, bi, live);
	struct band_par *old = band_par_of(f, bi);
	if (old) {
		/* its last life's context (its parity block failed: nothing
		 * released it; now par_try_submit does): not this life's */
		if (old->busy) {
			f->band[bi].par = 0; /* leaked, never seen again */
			for (uint32_t k = 0; k < PAR_STRIPES; k++)
				gc_stripe_unlink(f, &old->st[k]);
		}
		else
			par_release(f, old);
	}
	if (__builtin_popcount(live) < 2)
		return true; /* fewer than two live members: nothing to protect with */
	f->par_free = bp->next_free;
	bp->band = bi;
	bp->pcol = pcol;
	bp->next = 0;
	bp->busy = 0;
	bp->dead = false;
	bp->gc = gc;
	for (uint32_t k = 0; k < PAR_STRIPES; k++)
		bp->st[k].state = PS_FREE;
	f->band[bi].par = (uint16_t)(bp - f->par_pool + 1);
	return true;
}

static void par_release(struct ftl *f, struct band_par *bp)
{
	f->band[bp->band].par = 0;
	bp->band = FTL_NO_BLOCK;
	bp->next_free = f->par_free;
	f->par_free = bp;
}

static void par_maybe_release(struct ftl *f, struct band_par *bp)
{
	if (bp->band != FTL_NO_BLOCK && bp->next >= f->data_pages && !bp->busy)
		par_release(f, bp);
}

bool par_is_pcol(const struct ftl *f, uint32_t bi, uint32_t col)
{
	const struct band_par *bp = band_par_of(f, bi);
	return bp && bp->pcol == col;
}

bool par_handout_ok(struct ftl *f, uint32_t bi, uint32_t page)
{
	struct band_par *bp = band_par_of(f, bi);
	if (!bp)
		return true;
	struct par_stripe *s = &bp->st[page % PAR_STRIPES];
	return s->state == PS_FREE || s->page == page;
}

static void par_try_submit(struct ftl *f, struct band_par *bp);

bool par_handout(struct ftl *f, uint32_t bi, uint32_t page, uint32_t col, bool last)
{
	struct band_par *bp = band_par_of(f, bi);
	if (!bp)
		return true;
	struct par_stripe *s = &bp->st[page % PAR_STRIPES];
	if (s->state != PS_FREE && s->page != page)
		return false;
	if (s->state == PS_FREE) {
		s->state = PS_FILLING;
		s->page = page;
		s->opened = ++f->par_opens;
		if (bp->gc)
			gc_stripe_link(f, s);
		s->sealed = false;
		s->need = 0;
		s->sub_mask = 0;
		s->max_seq = 0;
		memset(s->acc, 0, f->page_size);
		memset(s->spare, 0, f->spare_size);
		bp->busy++;
	}
	(void)col;
	s->last_handout = f->handouts;
	s->need++;
	if (last) {
		s->sealed = true;
		s->ticket = ++f->par_ticket;
	}
	return true;
}

void par_seal(struct ftl *f, uint32_t bi, uint32_t page)
{
	struct band_par *bp = band_par_of(f, bi);
	if (!bp)
		return;
	struct par_stripe *s = &bp->st[page % PAR_STRIPES];
	if (s->state != PS_FILLING || s->page != page || s->sealed)
		return;
	s->sealed = true;
	s->ticket = ++f->par_ticket;
	par_try_submit(f, bp);
}

void par_submitted(struct ftl *f, uint32_t ppa, const uint8_t *data, const uint8_t *spare)
{
	uint32_t b = ppa_block(f, ppa), page = ppa_page(f, ppa);
	struct band_par *bp = band_par_of(f, block_band(f, b));
	if (!bp)
		return;
	struct par_stripe *s = &bp->st[page % PAR_STRIPES];
	if (s->state != PS_FILLING || s->page != page || !s->need)
		return; /* not handed out under this context (a retry into a band
			 * opened before parity began): unprotected */
	xor_into(s->acc, data, f->page_size);
	xor_into(s->spare + SPARE_SZ, spare, SPARE_SZ);
	struct ftl_spare sp;
	memcpy(&sp, spare, sizeof sp);
	if (sp.seq > s->max_seq)
		s->max_seq = sp.seq;
	s->sub_mask |= 1u << block_col(f, b);
	s->need--;
	par_try_submit(f, bp);
}

/*
 * Band of block b has stripes whose parity does not cover them: marked for
 * refresh, and a checkpoint requested so the mark outlives a restart
 * (FTL_CP_REFRESH; the band's data stays unprotected until GC has moved
 * it, and a die failing meanwhile loses what the stripes cannot rebuild).
 */
static void par_unprotected(struct ftl *f, uint32_t b, const char *why)
{
	band_flag_refresh(f, b, why);
	if (!f->readonly && !f->error)
		cp_request(f, false);
}

/*
 * The program of data page ppa failed (the page is consumed and reads as
 * garbage; its data is programmed again elsewhere).  Its stripe must not
 * count it: taken out of the XOR while the stripe is in memory; once the
 * stripe's parity is on its way, that parity covers a page that was never
 * written, so a read error of another member could not be rebuilt: the
 * band is marked for refresh (GC moves its data into whole stripes).
 */
void par_program_failed(struct ftl *f, uint32_t ppa, const uint8_t *data, const uint8_t *spare)
{
	uint32_t b = ppa_block(f, ppa), page = ppa_page(f, ppa), bi = block_band(f, b);
	uint32_t col = block_col(f, b);
	struct band_par *bp = band_par_of(f, bi);
	struct par_stripe *s = bp ? &bp->st[page % PAR_STRIPES] : NULL;
	if (s && s->state == PS_FILLING && s->page == page && (s->sub_mask & (1u << col))) {
		xor_into(s->acc, data, f->page_size);
		xor_into(s->spare + SPARE_SZ, spare, SPARE_SZ);
		s->sub_mask &= ~(1u << col);
		return;
	}
	for (uint32_t c = 0; c < f->row_width; c++)
		if (c != col && (f->blk[band_block(f, bi, c)].state == BLK_CLOSED ||
				 f->blk[band_block(f, bi, c)].state == BLK_OPEN)) {
			par_unprotected(f, band_block(f, bi, c),
					"a program in one of its stripes failed after the stripe's "
					"parity was computed");
			break;
		}
}

static void par_program_done(struct nand_op *op)
{
	struct band_par *bp = op->priv;
	struct ftl *f = bp->f;
	struct par_stripe *s = &bp->st[op->priv2];
	uint32_t b = op->block;
	f->blk[b].inflight--;
	stripe_free(f, s);
	bp->busy--;
	if (ftl_op_stops(f, op)) {
		par_maybe_release(f, bp);
		return;
	}
	die_note(f, b, DIE_PROGRAM, op->status == NAND_OK);
	if (op->status != NAND_OK) {
		f->st.program_failures++;
		f->st.parity_stripes_unprotected++;
		bp->dead = true;
		blk_program_failed(f, b);
		par_unprotected(f, b, "its parity block failed a program");
	} else {
		f->st.nand_pages_programmed++;
		f->st.parity_pages_programmed++;
		f->cp.pages_since++;
	}
	blk_programs_settled(f, b);
	par_try_submit(f, bp);
	par_maybe_release(f, bp);
}

/* Program the parity of every stripe that is complete, in page order. */
static void par_try_submit(struct ftl *f, struct band_par *bp)
{
	while (bp->band != FTL_NO_BLOCK && bp->next < f->data_pages) {
		uint32_t k = bp->next % PAR_STRIPES;
		struct par_stripe *s = &bp->st[k];
		if (s->state != PS_FILLING || s->page != bp->next || !s->sealed || s->need)
			break;
		uint32_t b = band_block(f, bp->band, bp->pcol);
		struct blk *m = &f->blk[b];
		bp->next++;
		if (bp->dead || f->error || m->state != BLK_OPEN || m->wp != s->page) {
			/* the parity block failed: this stripe stays unprotected */
			if (!bp->dead) {
				bp->dead = true;
				par_unprotected(f, b, "its parity block is gone");
			}
			f->st.parity_stripes_unprotected++;
			stripe_free(f, s);
			bp->busy--;
			continue;
		}
		uint32_t crc = crc32c(0, s->acc, f->page_size);
		struct ftl_spare sp = {
			.magic = FTL_SPARE_MAGIC,
			.type = FTL_PG_PARITY,
			.version = FTL_MEDIA_VERSION,
			.lba = s->page,
			.data_crc = crc,
			.seq = s->max_seq,
			.format_id = f->format_id,
			.reserved = s->sub_mask,
		};
		sp.crc = crc32c(0, &sp, offsetof(struct ftl_spare, crc));
		memcpy(s->spare, &sp, sizeof sp);
		if (f->spare_size > 2 * SPARE_SZ)
			memset(s->spare + 2 * SPARE_SZ, 0xFF, f->spare_size - 2 * SPARE_SZ);
		uint32_t ppa = ppa_make(f, b, m->wp);
		m->wp++;
		m->inflight++;
		if (m->wp == f->data_pages) {
			m->wp = (uint16_t)f->ppb;
			m->inflight = (uint16_t)(m->inflight + f->footer_pages);
		}
		s->state = PS_PROGRAMMING;
		struct nand_op *op = &s->op;
		op_program(op, 0, b, s->page, s->acc, s->spare, par_program_done, bp);
		op->priv2 = k;
		ftl_nand_submit(f, op);
		footer_note(f, ppa, FTL_FOOTER_PARITY, s->max_seq, crc);
	}
	/* the last stripes of a band whose parity block failed leave no
	 * program behind to release the context */
	par_maybe_release(f, bp);
}

void par_seal_all(struct ftl *f)
{
	for (uint32_t i = 0; i < f->npar; i++) {
		struct band_par *bp = &f->par_pool[i];
		if (bp->band == FTL_NO_BLOCK)
			continue;
		for (uint32_t k = 0; k < PAR_STRIPES; k++)
			if (bp->st[k].state == PS_FILLING && !bp->st[k].sealed) {
				bp->st[k].sealed = true;
				bp->st[k].ticket = ++f->par_ticket;
			}
		par_try_submit(f, bp);
	}
}

bool par_sealed_done(const struct ftl *f, uint64_t t)
{
	if (!f->parity)
		return true;
	for (uint32_t i = 0; i < f->npar; i++) {
		const struct band_par *bp = &f->par_pool[i];
		if (bp->band == FTL_NO_BLOCK || !bp->busy || band_par_of(f, bp->band) != bp)
			continue;
		for (uint32_t k = 0; k < PAR_STRIPES; k++) {
			const struct par_stripe *s = &bp->st[k];
			/* programming, or still to be (a stripe left behind
			 * next would never be: not waited for) */
			if (s->state != PS_FREE && s->sealed && s->ticket <= t &&
			    (s->state == PS_PROGRAMMING || s->page >= bp->next))
				return false;
		}
	}
	return true;
}

enum par_gc_wait par_gc_waits(const struct ftl *f, uint64_t mark, uint64_t first)
{
	enum par_gc_wait w = PAR_GC_CLEAR;
	for (const struct par_stripe *s = f->gc_stripes; s; s = s->gc_next)
		if (s->opened <= mark && s->last_handout >= first) {
			if (s->state == PS_FILLING && !s->sealed)
				return PAR_GC_OPEN;
			w = PAR_GC_SEALING;
		}
	return w;
}

void par_debug_dump(struct ftl *f)
{
	uint32_t nfree = 0;
	for (struct band_par *bp = f->par_free; bp; bp = bp->next_free)
		nfree++;
	ftl_log(FTL_LOG_INFO, "parity: %u of %u contexts free", nfree, f->npar);
	for (uint32_t i = 0; i < f->npar; i++) {
		struct band_par *bp = &f->par_pool[i];
		if (bp->band == FTL_NO_BLOCK)
			continue;
		char buf[160];
		int n = 0;
		for (uint32_t k = 0; k < PAR_STRIPES && n < (int)sizeof buf - 24; k++)
			if (bp->st[k].state != PS_FREE)
				n += snprintf(buf + n, sizeof buf - (size_t)n, " %u:%c%s%u", bp->st[k].page,
					      bp->st[k].state == PS_FILLING ? 'f' : 'p',
					      bp->st[k].sealed ? "s" : "", bp->st[k].need);
		buf[n] = 0;
		ftl_log(FTL_LOG_INFO, "  band %u pcol %u next %u busy %u dead %d:%s", bp->band, bp->pcol, bp->next,
			bp->busy, bp->dead, buf);
	}
}
