/*
 * ftl/parity_rebuild.c - rebuilding a page that reads uncorrectable from
 * the rest of its stripe, while serving (par_rebuild).  Owns the rebuild
 * contexts (f->rb_pool, f->rb_free, f->rb_wait_*); reads the stripes in
 * memory (parity.c) for stripes whose parity is not yet programmed.
 * Called by io.c and gc.c (a read that failed); completes through the
 * request's done, never inside par_rebuild.
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
 */
#include <errno.h>

#include "ftl/parity_int.h"

#define RB_CONTEXTS 8   /* rebuilds in flight at once */
#define RB_READ_TRIES 3 /* reads of a member that came back uncorrectable */

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

int rb_init(struct ftl *f)
{
	uint32_t w = f->row_width;
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
