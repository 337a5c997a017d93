/*
 * ftl/parity.c - Flashback: XOR parity per band stripe, the rebuild of a
 * page from the rest of its stripe, and dead dies.
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
 *
 * Rebuilding.  A page that reads uncorrectable (or fails its CRC) is
 * rebuilt from its stripe: the other members' pages at the same index are
 * read, all dies at once; the parity page (found by its spare type, which
 * lists the members) XOR the members gives the page and its spare, which
 * the caller checks like any read.  A stripe still in memory uses the
 * accumulated XOR instead of a parity page.  A second unreadable member
 * makes the rebuild fail: the unit is lost (EIO), never wrong data.  A
 * rebuilt page's band is marked for refresh, so GC rewrites it elsewhere.
 * Up to nrb rebuilds run at once; more wait in order.
 *
 * Dead dies (with or without parity).  DIE_DEAD_RUN operations in a row failing on one
 * die, reads and programs or erases among them, none succeeding, declare it
 * dead (logged at warning level): its free and dirty
 * blocks are retired, every band with data on it is marked for refresh,
 * and a reverse map of its pages (unit per page, from one pass over the
 * l2p) lets GC relocate pages whose footer and spares are gone.  GC then
 * moves those bands' data (rebuilt from parity) onto the other dies and
 * retires the dead die's blocks when their erase fails: the bands shrink by
 * a column, the reserves drop, the capacity stays.  Without parity the
 * data on the die is lost: reads fail with EIO, and GC turns the units the
 * reverse map names into lost units (counted, their range in the stats);
 * the rest of the ioDimm goes on.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

/*
 * Stripes of one band in progress at once.  With the parity rotating, a
 * stripe's parity program queues behind the data programs and GC reads of
 * a busy die; with 16 slots a GC band waiting for one made its relocations
 * fall back to the other temperature's band (writer.c), mixing hot and
 * cold data: 80/20 WA 2.766 with 16 slots, 2.516 with 64 (2.550 with the
 * parity fixed in the last column; bench, doc/ftl.md "Flashback parity").
 * Memory: PAR_STRIPES pages per parity context (36 contexts on the ioDimm:
 * 9 MiB).
 */
#define PAR_STRIPES 64
#define RB_CONTEXTS 8   /* rebuilds in flight at once */
#define DIE_DEAD_RUN 16 /* failures in a row that declare a die dead */
#define RB_READ_TRIES 3 /* reads of a member that came back uncorrectable */

enum { PS_FREE, PS_FILLING, PS_PROGRAMMING };

struct par_stripe {
	uint32_t page;            /* the stripe (page index) while not FREE */
	uint8_t state;            /* PS_* */
	bool sealed;              /* its last data page was handed out */
	uint64_t ticket;          /* sealed: f->par_ticket then (a flush
	                           * waits for its parity program) */
	uint64_t opened;          /* f->par_opens when it left FREE */
	uint64_t last_handout;    /* f->handouts at its newest member */
	bool gc_linked;           /* on f->gc_stripes (a GC band's, not FREE) */
	struct par_stripe *gc_prev, *gc_next;
	uint16_t need;            /* handed out, not yet submitted */
	uint32_t sub_mask;        /* columns submitted (XORed into acc) */
	uint64_t max_seq;         /* newest sequence number among them */
	struct nand_op op;        /* the parity program */
	uint8_t *acc;             /* one page: XOR of the submitted data */
	uint8_t *spare;           /* one spare area: the parity page's own
	                           * ftl_spare, then the XOR of the members' */
};

struct band_par {
	struct ftl *f;
	uint32_t band;            /* FTL_NO_BLOCK: free */
	uint32_t pcol;            /* the parity column */
	uint32_t next;            /* next stripe whose parity is due */
	uint32_t busy;            /* stripes not FREE */
	bool dead;                /* the parity block failed: no more parity */
	bool gc;                  /* a band of the GC stream (f->gc_stripes) */
	struct par_stripe st[PAR_STRIPES];
	struct band_par *next_free;
};

struct rb_ctx {
	struct ftl *f;
	struct rb_req *rq;
	uint32_t band, page, tcol;
	uint32_t pending;         /* reads in flight */
	uint32_t read_mask;       /* columns read */
	bool snap;                /* parity from the in-memory stripe */
	uint32_t snap_mask;       /* its members (target included) */
	uint8_t *bufs;            /* [row_width] pages; bufs[tcol]: snapshot */
	uint8_t *spares;          /* [row_width] spare areas */
	uint8_t *st;              /* [row_width] read status + 1 */
	uint8_t *tries;           /* [row_width] reads of the member so far */
	struct nand_op *ops;      /* [row_width] */
	struct rb_ctx *next_free;
};

#define SPARE_SZ ((uint32_t)sizeof(struct ftl_spare))

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

void xor_into(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t a, b;
		memcpy(&a, dst + i, 8);
		memcpy(&b, src + i, 8);
		a ^= b;
		memcpy(dst + i, &a, 8);
	}
	for (; i < n; i++)
		dst[i] ^= src[i];
}

static bool band_has_data_on(struct ftl *f, uint32_t b);

static inline uint32_t block_col(const struct ftl *f, uint32_t b)
{
	return block_die(f, b) / f->dies_per_channel;
}

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
	uint32_t w = f->row_width;
	f->die_bad_run = ftl_alloc(f, f->ndies);
	f->die_dead = ftl_alloc(f, f->ndies);
	f->die_bad_kinds = ftl_alloc(f, f->ndies);
	f->probe_spare = ftl_alloc(f, f->spare_size);
	if (!f->die_bad_kinds || !f->probe_spare)
		return -ENOMEM;
	f->dead_rmap = ftl_alloc(f, f->ndies * sizeof *f->dead_rmap);
	if (!f->die_bad_run || !f->die_dead || !f->dead_rmap)
		return -ENOMEM;
	if (!f->parity)
		return 0;
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
	/* pads: at most every open band's current stripe at once */
	uint32_t npad = NSTREAMS * NSETS * f->nrows * w;
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
	struct ftl_trim_hdr th = { FTL_TRIM_MAGIC, 0 };
	memcpy(f->pad_page, &th, sizeof th);
	f->pad_crc = crc32c(0, f->pad_page, f->page_size);
	f->nrb = RB_CONTEXTS;
	f->rb_pool = ftl_alloc(f, f->nrb * sizeof *f->rb_pool);
	if (!f->rb_pool)
		return -ENOMEM;
	for (uint32_t i = f->nrb; i-- > 0;) {
		struct rb_ctx *x = &f->rb_pool[i];
		x->f = f;
		x->bufs = ftl_alloc_pages(f, (size_t)w * f->page_size);
		x->spares = ftl_alloc(f, (size_t)w * f->spare_size);
		x->st = ftl_alloc(f, w);
		x->tries = ftl_alloc(f, w);
		x->ops = ftl_alloc(f, (size_t)w * sizeof *x->ops);
		if (!x->bufs || !x->spares || !x->st || !x->tries || !x->ops)
			return -ENOMEM;
		x->next_free = f->rb_free;
		f->rb_free = x;
	}
	return 0;
}

static struct band_par *band_par_of(const struct ftl *f, uint32_t bi)
{
	uint16_t i = f->band[bi].par;
	return i ? &f->par_pool[i - 1] : NULL;
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
static uint32_t par_pick_pcol(const struct ftl *f, uint32_t bi, uint32_t mask)
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
		memset(op, 0, sizeof *op);
		op->type = NAND_OP_PROGRAM;
		op->block = b;
		op->page = s->page;
		op->data = s->acc;
		op->spare = s->spare;
		op->done = par_program_done;
		op->priv = bp;
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
	memset(op, 0, sizeof *op);
	op->type = NAND_OP_PROGRAM;
	op->flags = NAND_OPF_META;
	op->block = ppa_block(f, ppa);
	op->page = ppa_page(f, ppa);
	op->data = f->pad_page;
	op->spare = po->spare;
	op->done = pad_done;
	op->priv = po;
	ftl_nand_submit(f, op);
	footer_note(f, ppa, FTL_FOOTER_TRIM, po->seq, f->pad_crc);
	par_submitted(f, ppa, f->pad_page, po->spare);
	f->st.parity_pad_pages++;
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
		if (r->submit != r->fill || r->nretry) {
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
					uint32_t ppa = set_pad_page(f, &f->stream[i].set[k], row, &busy);
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
	memset(op, 0, sizeof *op);
	op->type = NAND_OP_PROGRAM;
	op->flags = NAND_OPF_META;
	op->block = ppa_block(f, ppa);
	op->page = ppa_page(f, ppa);
	op->data = pp->data;
	op->spare = pp->spare;
	op->done = ppl_done;
	op->priv = pp;
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

/* ---- rebuilding ------------------------------------------------------------ */

static void rb_start(struct ftl *f, struct rb_ctx *x, struct rb_req *rq);

static void rb_put(struct ftl *f, struct rb_ctx *x)
{
	x->rq = NULL;
	struct rb_req *next = f->rb_wait_head;
	if (next) {
		f->rb_wait_head = next->next;
		if (!f->rb_wait_head)
			f->rb_wait_tail = NULL;
		rb_start(f, x, next);
		return;
	}
	x->next_free = f->rb_free;
	f->rb_free = x;
}

static bool member_page_ok(struct ftl *f, struct rb_ctx *x, uint32_t c, struct ftl_spare *sp)
{
	uint8_t st = x->st[c];
	if (st != NAND_OK + 1 && st != NAND_CORRECTED + 1)
		return false;
	if (spare_parse(f, x->spares + (size_t)c * f->spare_size, sp) != 0)
		return false;
	return sp->data_crc == crc32c(0, x->bufs + (size_t)c * f->page_size, f->page_size);
}

/* Every read landed: find the parity, XOR the stripe, hand the page over. */
static void rb_finish(struct ftl *f, struct rb_ctx *x)
{
	struct rb_req *rq = x->rq;
	uint32_t ps = f->page_size, ss = f->spare_size;
	int status = -EIO;
	uint32_t members = 0, pc = UINT32_MAX;
	struct ftl_spare sp;

	if (x->snap) {
		members = x->snap_mask & ~(1u << x->tcol);
		pc = x->tcol; /* bufs[tcol] and spares[tcol] hold the snapshot */
	} else {
		for (uint32_t c = 0; c < f->row_width; c++) {
			if (!(x->read_mask & (1u << c)) || !member_page_ok(f, x, c, &sp))
				continue;
			if (sp.type == FTL_PG_PARITY && sp.lba == x->page &&
			    (sp.reserved & (1u << x->tcol))) {
				pc = c;
				members = sp.reserved & ~(1u << x->tcol);
				break;
			}
		}
	}
	if (pc != UINT32_MAX && !(members & ~x->read_mask)) {
		uint8_t *out = rq->data, *osp = rq->spare;
		memcpy(out, x->bufs + (size_t)pc * ps, ps);
		memset(osp, 0xFF, ss);
		memcpy(osp, x->spares + (size_t)pc * ss + SPARE_SZ, SPARE_SZ);
		bool ok = true;
		for (uint32_t c = 0; c < f->row_width && ok; c++) {
			if (!(members & (1u << c)))
				continue;
			if (!member_page_ok(f, x, c, &sp) ||
			    (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM && sp.type != FTL_PG_PPL)) {
				ok = false;
				break;
			}
			xor_into(out, x->bufs + (size_t)c * ps, ps);
			xor_into(osp, x->spares + (size_t)c * ss, SPARE_SZ);
		}
		if (ok)
			status = 0;
	}
	uint32_t ppa = rq->ppa;
	if (status == 0) {
		f->st.parity_rebuilds++;
		band_flag_refresh(f, ppa_block(f, ppa), "a page of it was rebuilt from parity");
	} else {
		f->st.parity_rebuild_failures++;
		uint64_t n = f->st.parity_rebuild_failures;
		if (n <= 10 || (n & (n - 1)) == 0)
			ftl_log(FTL_LOG_NOTICE, "block %u page %u: not rebuilt from parity (another "
				"member of its stripe unreadable too, or no parity yet): this read "
				"fails, a later one may not (%llu so far)",
				ppa_block(f, ppa), ppa_page(f, ppa), (unsigned long long)n);
	}
	rb_put(f, x);
	rq->done(f, rq, status);
}

static void rb_read_done(struct nand_op *op)
{
	struct rb_ctx *x = op->priv;
	struct ftl *f = x->f;
	uint32_t c = (uint32_t)op->priv2;
	if (ftl_op_stops(f, op)) {
		x->st[c] = 0;
	} else if (op->status == NAND_UNCORRECTABLE && x->tries[c] < RB_READ_TRIES &&
		   !die_is_dead(f, op->block) && (x->read_mask & (1u << c))) {
		/* read again: a read's bit errors differ from try to try */
		x->tries[c]++;
		f->st.nand_pages_read++;
		ftl_nand_submit(f, op);
		return;
	} else {
		x->st[c] = (uint8_t)(op->status + 1);
	}
	if (!--x->pending)
		rb_finish(f, x);
}

static void rb_start(struct ftl *f, struct rb_ctx *x, struct rb_req *rq)
{
	uint32_t b = ppa_block(f, rq->ppa), page = ppa_page(f, rq->ppa);
	x->rq = rq;
	x->band = block_band(f, b);
	x->page = page;
	x->tcol = block_col(f, b);
	x->pending = 0;
	x->read_mask = 0;
	x->snap = false;
	memset(x->st, 0, f->row_width);
	memset(x->tries, 1, f->row_width);
	uint32_t want = 0;
	struct band_par *bp = band_par_of(f, x->band);
	struct par_stripe *s = bp ? &bp->st[page % PAR_STRIPES] : NULL;
	if (s && s->state != PS_FREE && s->page == page) {
		/* the stripe's parity is (still) in memory: the XOR so far
		 * stands for the parity page, over the pages submitted so far */
		x->snap = true;
		x->snap_mask = s->sub_mask;
		memcpy(x->bufs + (size_t)x->tcol * f->page_size, s->acc, f->page_size);
		memcpy(x->spares + (size_t)x->tcol * f->spare_size + SPARE_SZ, s->spare + SPARE_SZ,
		       SPARE_SZ);
		want = s->sub_mask & ~(1u << x->tcol);
		if (!(s->sub_mask & (1u << x->tcol)))
			want = 0; /* the page is not in it: cannot rebuild */
	} else if (page < f->data_pages) {
		for (uint32_t c = 0; c < f->row_width; c++) {
			if (c == x->tcol)
				continue;
			/* a block retired as grown bad (a program failed, its
			 * data relocated) still holds the pages it had: the
			 * parity page's member mask says which count (a block
			 * bad since before the band opened is in no mask) */
			uint8_t st = f->blk[band_block(f, x->band, c)].state;
			if (st == BLK_OPEN || st == BLK_CLOSED || st == BLK_VICTIM ||
			    st == BLK_RETIRING || st == BLK_BAD)
				want |= 1u << c;
		}
	}
	if (!want) {
		/* nothing to read: fails at once, from the next completion's
		 * point of view (done must not run inside par_rebuild) */
		x->pending = 1;
		x->st[x->tcol] = 0;
		struct nand_op *op = &x->ops[x->tcol];
		memset(op, 0, sizeof *op);
		op->type = NAND_OP_READ;
		op->block = b;
		op->page = page;
		op->data = NULL;
		op->spare = x->spares + (size_t)x->tcol * f->spare_size;
		if (x->snap) {
			/* keep the snapshot's spare half: read into a scratch */
			op->spare = x->spares + (size_t)((x->tcol + 1) % f->row_width) * f->spare_size;
		}
		x->snap = false;
		x->read_mask = 0;
		op->done = rb_read_done;
		op->priv = x;
		op->priv2 = x->tcol;
		f->st.nand_spare_reads++;
		ftl_nand_submit(f, op);
		return;
	}
	x->read_mask = want;
	for (uint32_t c = 0; c < f->row_width; c++)
		if (want & (1u << c))
			x->pending++;
	for (uint32_t c = 0; c < f->row_width; c++) {
		if (!(want & (1u << c)))
			continue;
		struct nand_op *op = &x->ops[c];
		memset(op, 0, sizeof *op);
		op->type = NAND_OP_READ;
		op->block = band_block(f, x->band, c);
		op->page = page;
		op->data = x->bufs + (size_t)c * f->page_size;
		op->spare = x->spares + (size_t)c * f->spare_size;
		op->done = rb_read_done;
		op->priv = x;
		op->priv2 = c;
		f->st.nand_pages_read++;
		ftl_nand_submit(f, op);
	}
}

int par_rebuild(struct ftl *f, struct rb_req *rq)
{
	if (!f->parity || f->error || ppa_page(f, rq->ppa) >= f->data_pages ||
	    !band_has_data_on(f, ppa_block(f, rq->ppa)))
		return -ENOENT;
	rq->next = NULL;
	struct rb_ctx *x = f->rb_free;
	if (!x) {
		if (f->rb_wait_tail)
			f->rb_wait_tail->next = rq;
		else
			f->rb_wait_head = rq;
		f->rb_wait_tail = rq;
		return 0;
	}
	f->rb_free = x->next_free;
	rb_start(f, x, rq);
	return 0;
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

/* ---- recovery: stripes cut short ---------------------------------------------- */

static bool stop_status(enum nand_status st)
{
	return st == NAND_POWER_LOSS || st == NAND_IO_ERROR || st == NAND_INVALID;
}

/* Read page of b (data may be NULL): its status; *sp parsed, *valid when
 * the spare is ours and (with data) the data matches its CRC, *erased. */
static enum nand_status rec_read(struct ftl *f, uint32_t b, uint32_t page, uint8_t *data,
				 uint8_t *spare, struct ftl_spare *sp, bool *valid, bool *erased)
{
	struct nand_op op = { .type = NAND_OP_READ, .block = b, .page = page, .data = data,
			      .spare = spare };
	enum nand_status st = nand_op_sync(f->dev, &op);
	if (data)
		f->st.nand_pages_read++;
	else
		f->st.nand_spare_reads++;
	bool readable = st == NAND_OK || st == NAND_CORRECTED;
	int rc = readable ? spare_parse(f, spare, sp) : -EILSEQ;
	*erased = rc == -ENODATA;
	*valid = rc == 0 && (!data || sp->data_crc == crc32c(0, data, f->page_size));
	return st;
}

/*
 * Column c of a stripe (page `page`) is unreadable; the members in `have`
 * were read into bufs and spares (row_width pages and spares, by column).
 * If one of them is a partial-parity page covering c (the newest such),
 * c's page and spare are rebuilt into bufs[c] and spares[c] from it and
 * the other members it covers, and checked like a read: true.  O(row
 * width) XORs of a page.
 */
static bool ppl_rebuild_member(struct ftl *f, uint8_t *bufs, uint8_t *spares, uint32_t have,
			       uint32_t c, uint32_t page)
{
	uint32_t ps = f->page_size, ss = f->spare_size, ppl = UINT32_MAX, covers = 0;
	uint64_t best = 0;
	struct ftl_spare sp;
	for (uint32_t k = 0; k < f->row_width; k++) {
		if (!(have & (1u << k)))
			continue;
		memcpy(&sp, spares + (size_t)k * ss, sizeof sp);
		if (sp.type == FTL_PG_PPL && sp.lba == page && (sp.reserved & (1u << c)) &&
		    !(sp.reserved & ~have & ~(1u << c)) && (ppl == UINT32_MAX || sp.seq > best)) {
			ppl = k;
			best = sp.seq;
			covers = sp.reserved & ~(1u << c);
		}
	}
	if (ppl == UINT32_MAX)
		return false;
	uint8_t *d = bufs + (size_t)c * ps, *sa = spares + (size_t)c * ss;
	memcpy(d, bufs + (size_t)ppl * ps, ps);
	memset(sa, 0xFF, ss);
	memcpy(sa, spares + (size_t)ppl * ss + SPARE_SZ, SPARE_SZ);
	for (uint32_t k = 0; k < f->row_width; k++) {
		if (!(covers & (1u << k)))
			continue;
		xor_into(d, bufs + (size_t)k * ps, ps);
		xor_into(sa, spares + (size_t)k * ss, SPARE_SZ);
	}
	return spare_parse(f, sa, &sp) == 0 && sp.data_crc == crc32c(0, d, ps) &&
	       (sp.type == FTL_PG_DATA || sp.type == FTL_PG_TRIM || sp.type == FTL_PG_PPL);
}

/*
 * One band that was open at a crash: program the parity of its stripes
 * that have data but no parity page yet, in page order, into its parity
 * column.  The parity column is the member whose page 0 is a parity page,
 * or, when none is, a member not bad whose page 0 is erased, chosen by
 * par_pick_pcol (the crash came before the first stripe's parity; any
 * erased member will do, as the parity page names its members).  2: parity
 * programmed, every stripe with data protected; 1: nothing was missing; 0: not protected (GC
 * refreshes the band); -EIO: the medium stopped.
 * Cost: a spare read per member, ~log2(pages) spare reads, and a page read
 * per member for each stripe without parity (at most PAR_STRIPES + 1 of
 * them: a band hands out no stripe further ahead), synchronous.
 */
static int par_recover_band(struct ftl *f, uint32_t bi, uint8_t *bufs, uint8_t *spares,
			    uint8_t *acc, uint8_t *pspare)
{
	uint32_t w = f->row_width, ps = f->page_size, ss = f->spare_size;
	uint32_t pcol = UINT32_MAX, live = 0, empty = 0;
	struct ftl_spare sp;
	bool valid, erased;
	for (uint32_t c = 0; c < w; c++) {
		uint32_t b = band_block(f, bi, c);
		uint8_t st = f->blk[b].state;
		if (st == BLK_BAD || st == BLK_META)
			continue;
		live |= 1u << c;
		enum nand_status ns = rec_read(f, b, 0, NULL, spares, &sp, &valid, &erased);
		if (stop_status(ns))
			return -EIO;
		if (valid && sp.type == FTL_PG_PARITY)
			pcol = c;
		if (erased)
			empty |= 1u << c;
	}
	if (pcol == UINT32_MAX) /* no parity page yet: any erased member will do */
		pcol = par_pick_pcol(f, bi, empty);
	if (pcol == UINT32_MAX || !(live & ~(1u << pcol)))
		return 0;
	uint32_t pb = band_block(f, bi, pcol);
	/* the first stripe without parity: the parity column's first erased
	 * page (its pages are programmed in order) */
	uint32_t lo = 0, hi = f->data_pages;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		enum nand_status ns = rec_read(f, pb, mid, NULL, spares, &sp, &valid, &erased);
		if (stop_status(ns))
			return -EIO;
		if (erased)
			hi = mid;
		else
			lo = mid + 1;
	}
	/* the stripe before: its parity program may have been cut (torn
	 * page): that stripe stays unprotected, GC moves the band's data */
	int whole = 1;
	if (lo > 0) {
		enum nand_status ns = rec_read(f, pb, lo - 1, NULL, spares, &sp, &valid, &erased);
		if (stop_status(ns))
			return -EIO;
		if (!valid || sp.type != FTL_PG_PARITY)
			whole = 0;
	}
	for (uint32_t page = lo; page < f->data_pages; page++) {
		uint32_t mask = 0, unread = 0;
		uint64_t max_seq = 0;
		memset(acc, 0, ps);
		memset(pspare, 0, ss);
		for (uint32_t c = 0; c < w; c++) {
			if (c == pcol || !(live & (1u << c)))
				continue;
			uint8_t *d = bufs + (size_t)c * ps, *sa = spares + (size_t)c * ss;
			enum nand_status ns = rec_read(f, band_block(f, bi, c), page, d, sa, &sp, &valid,
						       &erased);
			if (stop_status(ns))
				return -EIO;
			if (!valid || (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM &&
				       sp.type != FTL_PG_PPL)) {
				/* erased, or torn by the crash: never acknowledged;
				 * or unreadable (a dead die): maybe in a PPL page */
				if (!erased)
					unread |= 1u << c;
				continue;
			}
			mask |= 1u << c;
		}
		/* an unreadable member the stripe's newest partial-parity page
		 * covers: rebuilt from it, a member like the others */
		for (uint32_t c = 0; c < w && mask; c++)
			if ((unread & (1u << c)) && ppl_rebuild_member(f, bufs, spares, mask, c, page))
				mask |= 1u << c;
		for (uint32_t c = 0; c < w; c++) {
			if (!(mask & (1u << c)))
				continue;
			xor_into(acc, bufs + (size_t)c * ps, ps);
			xor_into(pspare + SPARE_SZ, spares + (size_t)c * ss, SPARE_SZ);
			memcpy(&sp, spares + (size_t)c * ss, sizeof sp);
			if (sp.seq > max_seq)
				max_seq = sp.seq;
		}
		if (!mask)
			return whole && page > lo ? 2 : whole; /* nothing written from here on */
		struct ftl_spare psp = {
			.magic = FTL_SPARE_MAGIC, .type = FTL_PG_PARITY, .version = FTL_MEDIA_VERSION,
			.lba = page, .data_crc = crc32c(0, acc, ps), .seq = max_seq,
			.format_id = f->format_id, .reserved = mask,
		};
		psp.crc = crc32c(0, &psp, offsetof(struct ftl_spare, crc));
		memcpy(pspare, &psp, sizeof psp);
		if (ss > 2 * SPARE_SZ)
			memset(pspare + 2 * SPARE_SZ, 0xFF, ss - 2 * SPARE_SZ);
		struct nand_op op = { .type = NAND_OP_PROGRAM, .block = pb, .page = page, .data = acc,
				      .spare = pspare };
		enum nand_status st = nand_op_sync(f->dev, &op);
		if (stop_status(st))
			return -EIO;
		if (st != NAND_OK)
			return 0; /* the parity block failed */
		f->st.nand_pages_programmed++;
		f->st.parity_pages_programmed++;
		if (f->blk[pb].state == BLK_FREE)
			blk_set_closed(f, pb); /* it holds pages now: erased before reuse */
	}
	return whole ? 2 : 0;
}

int par_recover(struct ftl *f, const uint32_t *blocks, uint32_t n, uint32_t *done)
{
	*done = 0;
	if (!f->parity || !n || f->readonly)
		return 0;
	uint32_t w = f->row_width;
	uint8_t *seen = calloc(f->nbands, 1);
	uint8_t *bufs = aligned_alloc(4096, (size_t)(w + 1) * f->page_size);
	uint8_t *spares = malloc((size_t)(w + 1) * f->spare_size);
	int rc = 0;
	if (!seen || !bufs || !spares)
		rc = -ENOMEM;
	for (uint32_t i = 0; !rc && i < n; i++) {
		uint32_t bi = block_band(f, blocks[i]);
		if (seen[bi])
			continue;
		seen[bi] = 1;
		int r = par_recover_band(f, bi, bufs, spares, bufs + (size_t)w * f->page_size,
					 spares + (size_t)w * f->spare_size);
		if (r < 0)
			rc = r;
		else if (r == 2)
			(*done)++;
		else if (r == 0)
			band_flag_refresh(f, blocks[i], NULL); /* GC moves its data instead */
	}
	free(seen);
	free(bufs);
	free(spares);
	return rc;
}

/*
 * Open (recovery): page ppa rebuilt from its stripe with synchronous reads,
 * into data and spare (its ftl_spare, for the caller to check).  0, -EIO
 * when it cannot be (no parity page naming it, a second member unreadable),
 * -ENOMEM.  Cost: a page read per member of the band.
 */
int par_rebuild_sync(struct ftl *f, uint32_t ppa, uint8_t *data, uint8_t *spare)
{
	uint32_t w = f->row_width, ps = f->page_size, ss = f->spare_size;
	uint32_t b = ppa_block(f, ppa), page = ppa_page(f, ppa), bi = block_band(f, b);
	uint32_t tcol = block_col(f, b);
	if (!f->parity || page >= f->data_pages)
		return -EIO;
	uint8_t *bufs = aligned_alloc(4096, (size_t)w * ps);
	uint8_t *spares = malloc((size_t)w * ss);
	uint8_t *ok = calloc(w, 1);
	int rc = -EIO;
	if (!bufs || !spares || !ok) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t pc = UINT32_MAX, members = 0;
	for (uint32_t c = 0; c < w; c++) {
		uint32_t mb = band_block(f, bi, c);
		/* grown-bad members too (rb_start): the parity's mask decides */
		if (c == tcol || f->blk[mb].state == BLK_META)
			continue;
		struct ftl_spare sp;
		bool valid, erased;
		rec_read(f, mb, page, bufs + (size_t)c * ps, spares + (size_t)c * ss, &sp, &valid, &erased);
		ok[c] = valid;
		if (valid && sp.type == FTL_PG_PARITY && sp.lba == page && (sp.reserved & (1u << tcol))) {
			pc = c;
			members = sp.reserved & ~(1u << tcol);
		}
	}
	if (pc == UINT32_MAX) {
		/* no parity page names it: a partial-parity page may */
		uint32_t have = 0;
		for (uint32_t c = 0; c < w; c++)
			if (ok[c])
				have |= 1u << c;
		if (!ppl_rebuild_member(f, bufs, spares, have, tcol, page))
			goto out;
		memcpy(data, bufs + (size_t)tcol * ps, ps);
		memcpy(spare, spares + (size_t)tcol * ss, ss);
		rc = 0;
		f->st.parity_rebuilds++;
		goto out;
	}
	memcpy(data, bufs + (size_t)pc * ps, ps);
	memset(spare, 0xFF, ss);
	memcpy(spare, spares + (size_t)pc * ss + SPARE_SZ, SPARE_SZ);
	for (uint32_t c = 0; c < w; c++) {
		if (!(members & (1u << c)))
			continue;
		if (!ok[c])
			goto out;
		xor_into(data, bufs + (size_t)c * ps, ps);
		xor_into(spare, spares + (size_t)c * ss, SPARE_SZ);
	}
	rc = 0;
	f->st.parity_rebuilds++;
out:
	free(bufs);
	free(spares);
	free(ok);
	return rc;
}

/*
 * Recovery, column dcol of band bi on a dead die, stripe `page` without a
 * parity page: the spare of dcol's page rebuilt into out from the
 * stripe's newest partial-parity page covering it and the spares of the
 * members that one covers (row_width + 1 spares of room in spares).
 * 2: rebuilt (out to be checked); 1: none covers it; 0: every other member
 * is erased there (no more stripes); -EIO: the medium stopped.  Cost: a
 * spare read per member.
 */
static int ppl_dead_spare(struct ftl *f, uint32_t bi, uint32_t dcol, uint32_t page,
			  uint8_t *spares, uint8_t *out)
{
	uint32_t w = f->row_width, ss = f->spare_size, have = 0, ppl = UINT32_MAX;
	uint64_t best = 0;
	bool any = false;
	struct ftl_spare sp;
	for (uint32_t c = 0; c < w; c++) {
		uint32_t b = band_block(f, bi, c);
		if (c == dcol || f->blk[b].state == BLK_BAD || f->blk[b].state == BLK_META)
			continue;
		bool valid, erased;
		enum nand_status ns = rec_read(f, b, page, NULL, spares + (size_t)c * ss, &sp, &valid,
					       &erased);
		if (stop_status(ns))
			return -EIO;
		any |= !erased;
		if (!valid)
			continue;
		have |= 1u << c;
		if (sp.type == FTL_PG_PPL && sp.lba == page && (sp.reserved & (1u << dcol)) &&
		    (ppl == UINT32_MAX || sp.seq > best)) {
			ppl = c;
			best = sp.seq;
		}
	}
	if (!any)
		return 0;
	if (ppl == UINT32_MAX)
		return 1;
	memcpy(&sp, spares + (size_t)ppl * ss, sizeof sp);
	uint32_t covers = sp.reserved & ~(1u << dcol);
	if (covers & ~have)
		return 1; /* a second member unreadable */
	memset(out, 0xFF, ss);
	memcpy(out, spares + (size_t)ppl * ss + SPARE_SZ, SPARE_SZ);
	for (uint32_t c = 0; c < w; c++)
		if (covers & (1u << c))
			xor_into(out, spares + (size_t)c * ss, SPARE_SZ);
	return 2;
}

/*
 * Recovery, die `die` dead: for every band with a block on it, the stripes
 * whose parity page says a member on the die holds a log page newer than
 * the checkpoint: that page's spare is rebuilt from the parity page's and
 * the other members' spares, and reported through add (as if read).
 * Cost: a spare read per page of the parity column of each such band, and
 * row_width - 2 more per stripe newer than the checkpoint; synchronous.
 */
int par_recover_dead_spares(struct ftl *f, uint32_t die,
			    int (*add)(void *ctx, uint64_t seq, uint32_t ppa, uint8_t type, uint32_t lba),
			    void *ctx)
{
	uint32_t w = f->row_width, ss = f->spare_size;
	uint32_t dcol = die / f->dies_per_channel;
	uint8_t *spares = malloc((size_t)(w + 1) * ss);
	uint8_t *out = spares ? spares + (size_t)w * ss : NULL;
	if (!spares)
		return -ENOMEM;
	int rc = 0;
	uint64_t found = 0;
	for (uint32_t i = 0; i < f->blocks_per_die && !rc; i++) {
		uint32_t db = die * f->blocks_per_die + i;
		if (f->blk[db].state == BLK_BAD || f->blk[db].state == BLK_META)
			continue;
		uint32_t bi = block_band(f, db);
		/* the parity column: page 0 of a member is a parity page */
		uint32_t pcol = UINT32_MAX;
		struct ftl_spare sp;
		bool valid, erased;
		for (uint32_t c = 0; c < w && pcol == UINT32_MAX; c++) {
			uint32_t b = band_block(f, bi, c);
			if (c == dcol || f->blk[b].state == BLK_BAD || f->blk[b].state == BLK_META)
				continue;
			enum nand_status ns = rec_read(f, b, 0, NULL, spares, &sp, &valid, &erased);
			if (stop_status(ns)) {
				rc = -EIO;
				break;
			}
			if (valid && sp.type == FTL_PG_PARITY)
				pcol = c;
		}
		if (rc)
			continue;
		/* stripes without a parity page from lo on (all of them
		 * without a parity column yet): partial parity, below */
		uint32_t lo = pcol == UINT32_MAX ? 0 : f->data_pages;
		uint32_t pb = pcol == UINT32_MAX ? FTL_NO_BLOCK : band_block(f, bi, pcol);
		for (uint32_t page = 0; pcol != UINT32_MAX && page < f->data_pages && !rc; page++) {
			enum nand_status ns = rec_read(f, pb, page, NULL, spares, &sp, &valid, &erased);
			if (stop_status(ns)) {
				rc = -EIO;
				break;
			}
			if (erased) {
				lo = page;
				break; /* no more stripes */
			}
			if (!valid || sp.type != FTL_PG_PARITY || sp.lba != page ||
			    !(sp.reserved & (1u << dcol)) || sp.seq <= f->cp.cur_seq)
				continue;
			uint32_t members = sp.reserved & ~(1u << dcol);
			memset(out, 0, ss);
			memcpy(out, spares + SPARE_SZ, SPARE_SZ);
			bool ok = true;
			for (uint32_t c = 0; c < w && ok; c++) {
				if (!(members & (1u << c)))
					continue;
				ns = rec_read(f, band_block(f, bi, c), page, NULL, spares + ss, &sp, &valid,
					      &erased);
				if (stop_status(ns)) {
					rc = -EIO;
					ok = false;
					break;
				}
				if (!valid) {
					ok = false;
					break;
				}
				xor_into(out, spares + ss, SPARE_SZ);
			}
			if (!ok)
				continue;
			struct ftl_spare rs;
			if (spare_parse(f, out, &rs) != 0 || rs.seq <= f->cp.cur_seq ||
			    (rs.type != FTL_PG_DATA && rs.type != FTL_PG_TRIM))
				continue;
			rc = add(ctx, rs.seq, ppa_make(f, db, page), rs.type, rs.lba);
			found++;
		}
		for (uint32_t page = lo; page < f->data_pages && !rc; page++) {
			int r = ppl_dead_spare(f, bi, dcol, page, spares, out);
			if (r < 0)
				rc = r;
			if (r <= 0)
				break; /* no more stripes (or the medium stopped) */
			struct ftl_spare rs;
			if (r == 2 && spare_parse(f, out, &rs) == 0 && rs.seq > f->cp.cur_seq &&
			    (rs.type == FTL_PG_DATA || rs.type == FTL_PG_TRIM)) {
				rc = add(ctx, rs.seq, ppa_make(f, db, page), rs.type, rs.lba);
				found++;
			}
		}
	}
	free(spares);
	if (found)
		ftl_log(FTL_LOG_WARNING, "die %u dead at open: %llu log pages on it newer than the checkpoint found "
			"through parity", die, (unsigned long long)found);
	return rc;
}

/* ---- dead dies --------------------------------------------------------------- */

uint32_t dead_rmap_unit(struct ftl *f, uint32_t ppa)
{
	uint32_t b = ppa_block(f, ppa);
	const uint32_t *m = f->dead_rmap[block_die(f, b)];
	if (!m)
		return UINT32_MAX;
	return m[(size_t)(b % f->blocks_per_die) * f->ppb + ppa_page(f, ppa)];
}

static bool band_has_data_on(struct ftl *f, uint32_t b)
{
	uint8_t st = f->blk[b].state;
	return st == BLK_OPEN || st == BLK_CLOSED || st == BLK_VICTIM || st == BLK_RETIRING;
}

uint32_t par_rebuild_left(struct ftl *f)
{
	uint32_t n = 0;
	for (uint32_t d = 0; d < f->ndies && f->ndead; d++) {
		if (!f->die_dead[d])
			continue;
		for (uint32_t i = 0; i < f->blocks_per_die; i++) {
			uint32_t b = d * f->blocks_per_die + i;
			n += band_has_data_on(f, b) && f->blk[b].valid;
		}
	}
	return n;
}

void die_declare_dead(struct ftl *f, uint32_t die, const char *why)
{
	f->die_dead[die] = 1;
	f->ndead++;
	f->st.dies_failed = f->ndead;
	uint32_t first = die * f->blocks_per_die, marked = 0, retired = 0;
	for (uint32_t i = 0; i < f->blocks_per_die; i++) {
		uint32_t b = first + i;
		uint8_t st = f->blk[b].state;
		if (st == BLK_FREE || st == BLK_DIRTY) {
			blk_set_bad(f, b, true);
			retired++;
			continue;
		}
		if (st == BLK_BAD || st == BLK_META)
			continue;
		if (st == BLK_OPEN) {
			blk_program_failed(f, b); /* no more pages into it */
			blk_programs_settled(f, b); /* to GC now if nothing is in flight */
		}
		if (band_has_data_on(f, b) && f->blk[b].valid) {
			band_flag_refresh(f, b, NULL);
			marked++;
		}
		blk_doom(f, b); /* retired when its erase fails */
	}
	f->rebuild_total += marked;
	f->st.rebuild_bands_total = f->rebuild_total;
	/* the units on the die, page by page, for pages whose footer and spare
	 * died with it: one pass over the l2p, 4 bytes per page of the die */
	{
		size_t n = (size_t)f->blocks_per_die * f->ppb;
		uint32_t *m = ftl_alloc(f, n * sizeof *m);
		if (m) {
			memset(m, 0xFF, n * sizeof *m);
			for (uint64_t u = 0; u < f->units; u++) {
				uint32_t e = f->l2p[u];
				if (!l2p_is_ppa(e))
					continue;
				uint32_t b = ppa_block(f, e);
				if (block_die(f, b) == die)
					m[(size_t)(b - first) * f->ppb + ppa_page(f, e)] = (uint32_t)u;
			}
			f->dead_rmap[die] = m;
		} else {
			ftl_log(FTL_LOG_ERR, "die %u: no memory for its reverse map: pages GC cannot identify "
				"are lost", die);
		}
	}
	ftl_log(f->parity || !marked ? FTL_LOG_WARNING : FTL_LOG_ERR,
		"die %u failed (%s): %s; %u bands hold data on it, %u of its blocks retired "
		"at once; replace the card",
		die, why,
		f->parity ? "rebuilding its data from parity onto the other dies (a second dead "
			    "die in its row would lose data)"
		: marked  ? "no parity: the data on it is lost (reads fail with EIO)"
			  : "no parity, and no data on it",
		marked, retired);
	health_update(f);
	/* the map as it is now, on other dies than this one, in a checkpoint:
	 * a crash from then on needs nothing the die held */
	if (!f->readonly && !f->error && f->bands_ready)
		cp_request(f, false);
}

static void die_probe_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	f->probe_busy = false;
	if (ftl_op_stops(f, op))
		return;
	die_note(f, op->block, DIE_READ, op->status == NAND_OK || op->status == NAND_CORRECTED);
}

/*
 * Read the spare of page 0 of a block on die (erased or not: a live die
 * reads it, a dead one fails).  Without it, a die that died while only programs went to it (a
 * checkpoint's bands take a block of it per attempt) was never declared
 * dead, and the checkpoint gave up after 64 attempts (t_ftl_model seed 15:
 * the FTL failed).  O(blocks per die), once per failure after the fourth.
 */
static void die_probe(struct ftl *f, uint32_t die)
{
	if (f->probe_busy || f->error)
		return;
	for (uint32_t i = 0; i < f->blocks_per_die; i++) {
		uint32_t b = die * f->blocks_per_die + i;
		uint8_t st = f->blk[b].state;
		if (st == BLK_BAD || st == BLK_ERASING || st == BLK_UNKNOWN)
			continue;
		struct nand_op *op = &f->probe_op;
		memset(op, 0, sizeof *op);
		op->type = NAND_OP_READ;
		op->block = b;
		op->page = 0;
		op->data = NULL;
		op->spare = f->probe_spare;
		op->done = die_probe_done;
		op->priv = f;
		f->probe_busy = true;
		f->st.nand_spare_reads++;
		ftl_nand_submit(f, op);
		return;
	}
}

void die_note(struct ftl *f, uint32_t b, enum die_op kind, bool ok)
{
	if (b >= f->nblocks)
		return;
	uint32_t die = block_die(f, b);
	if (ok) {
		f->die_bad_run[die] = 0;
		f->die_bad_kinds[die] = 0;
		return;
	}
	if (f->die_dead[die] || f->readonly)
		return;
	if (f->die_bad_run[die] < 255)
		f->die_bad_run[die]++;
	f->die_bad_kinds[die] |= (uint8_t)(1u << kind);
	/* worn blocks fail programs and erases one by one, and a page can
	 * read uncorrectable: only a run of failures of reads and of writes
	 * alike, nothing succeeding, is a dead die */
	if (f->die_bad_run[die] >= DIE_DEAD_RUN && (f->die_bad_kinds[die] & (1u << DIE_READ)) &&
	    (f->die_bad_kinds[die] & ~(1u << DIE_READ)))
		die_declare_dead(f, die, "16 operations in a row");
	else if (f->die_bad_run[die] >= 4 && !(f->die_bad_kinds[die] & (1u << DIE_READ)))
		die_probe(f, die);
}
