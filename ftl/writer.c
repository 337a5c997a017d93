/*
 * ftl/writer.c - write buffer rings and the two streams that program them.
 *
 * The user stream carries host data and trim records; the GC stream carries
 * relocated data and re-logged trims, into blocks of its own so that data
 * GC found still valid (cold) is not mixed with fresh host writes.  Each
 * open set keeps one open band per row and hands out pages stripe by
 * stripe, rows interleaved, so consecutive pages are programmed in
 * parallel on different dies and channels.
 *
 * A slot's program completion maps its unit (if the l2p still references
 * the slot: a newer write or a trim may have replaced it), and releases
 * slots in ring order, which moves the ring's done cursor: everything before
 * it is on the media.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

int ring_init(struct ftl *f, struct ring *r, uint32_t nslots)
{
	uint32_t n = 1;
	while (n < nslots)
		n <<= 1;
	r->nslots = n;
	r->mask = n - 1;
	r->slots = ftl_alloc(f, (size_t)n * sizeof *r->slots);
	r->data = ftl_alloc_lazy(f, (size_t)n * f->page_size);
	r->buf_free = ftl_alloc(f, (size_t)n * sizeof *r->buf_free);
	r->spares = ftl_alloc(f, (size_t)n * f->spare_size);
	r->retry = ftl_alloc(f, (size_t)n * sizeof *r->retry);
	if (!r->slots || !r->data || !r->buf_free || !r->spares || !r->retry)
		return -ENOMEM;
	/* the lowest addresses on top: a light load keeps reusing a few */
	for (uint32_t i = 0; i < n; i++)
		r->buf_free[i] = r->data + (size_t)(n - 1 - i) * f->page_size;
	r->nbuf_free = n;
	r->fill = r->submit = r->done = 0;
	r->nretry = 0;
	return 0;
}

uint32_t slot_prev(struct ftl *f, uint32_t e)
{
	struct ring *r = &f->stream[(e & L2P_SLOT_GC) ? STREAM_GC : STREAM_USER].ring;
	return r->slots[e & L2P_SLOT_MASK].prev;
}

uint8_t *slot_data(struct ftl *f, uint32_t e)
{
	struct ring *r = &f->stream[(e & L2P_SLOT_GC) ? STREAM_GC : STREAM_USER].ring;
	return ring_data(r, e & L2P_SLOT_MASK);
}

void ring_release(struct ftl *f, struct ring *r)
{
	while (r->done < r->submit) {
		struct slot *s = ring_slot(r, r->done);
		if (s->state != SLOT_DONE && s->state != SLOT_SKIP)
			break;
		s->state = SLOT_EMPTY;
		if (s->data) {
			ring_buf_give(r, s->data);
			s->data = NULL;
		}
		r->done++;
	}
}

/*
 * Next page of an open set: the next member of the current stripe of the
 * row the cursor is on, rows interleaved, so consecutive pages go to
 * different dies; NO_BLOCK if none now.  A new band is opened only if at
 * least `floor` free blocks remain afterwards.
 * Cost: O(nrows + row_width) at worst, O(1) typically.
 */
/* Column c of the band orow fills takes the stripe's next data page. */
static bool member_takes(struct ftl *f, const struct open_row *orow, uint32_t c)
{
	uint32_t b = band_block(f, orow->band, c);
	const struct blk *k = &f->blk[b];
	return k->state == BLK_OPEN && k->wp == orow->page && f->footer_of[b] &&
	       !(f->parity && par_is_pcol(f, orow->band, c));
}

/*
 * The next live member of orow's stripe (a member whose program failed is
 * retiring: the band goes on without it; the parity column is programmed by
 * parity.c), moving to the next stripe when this one is handed out; NO_BLOCK
 * if the band is full (orow->band is then NO_BLOCK) or, with *busy set, if
 * the stripe's parity slot is still held by an older stripe.
 */
static uint32_t row_next_page(struct ftl *f, struct open_row *orow, bool *busy)
{
	uint32_t w = f->row_width, upp = f->upp;
	for (;;) {
		if (orow->col == w) {
			par_seal(f, orow->band, orow->page);
			orow->col = 0;
			orow->page += upp;
			if (orow->page >= f->data_pages) {
				orow->band = FTL_NO_BLOCK;
				return FTL_NO_BLOCK;
			}
		}
		uint32_t c = orow->col;
		uint32_t b = band_block(f, orow->band, c);
		struct blk *k = &f->blk[b];
		/* several units per NAND page: a member takes its page's units
		 * in a row (they are programmed together, ftl/upage.c) */
		bool mid = upp > 1 && k->state == BLK_OPEN && f->footer_of[b] &&
			   k->wp > orow->page && k->wp < orow->page + upp;
		if (!mid && !member_takes(f, orow, c)) {
			orow->col++;
			continue;
		}
		if (f->parity && !par_handout_ok(f, orow->band, orow->page)) {
			*busy = true; /* an older stripe still holds its slot */
			return FTL_NO_BLOCK;
		}
		if ((uint32_t)k->wp + 1 == orow->page + upp)
			orow->col++;
		f->handouts++; /* this page's number (par_handout, gc_slot_submitted) */
		if (f->parity) {
			uint32_t later = orow->col;
			while (later < w && !member_takes(f, orow, later))
				later++;
			par_handout(f, orow->band, orow->page, c, later == w);
			if (later < w)
				f->par_partial = true; /* a stripe left open: par_idle_pad */
		}
		uint32_t ppa = ppa_make(f, b, k->wp);
		k->wp++;
		k->inflight++;
		if (k->wp % upp)
			f->par_partial = true; /* a NAND page left open: par_idle_pad */
		if (k->wp == f->data_pages) {
			/* the footer pages follow: full, closes when all are programmed */
			k->wp = (uint16_t)f->ppb;
			k->inflight = (uint16_t)(k->inflight + f->footer_pages);
		}
		return ppa;
	}
}

/*
 * The next page of the stripe set->row[row] has partly handed out, for a
 * pad page (parity_ppl.c, par_idle_pad); NO_BLOCK if that stripe is not partly
 * handed out (none open, none begun, or sealed) or, with *busy set, its
 * parity slot is still held by an older stripe.
 */
uint32_t set_pad_page(struct ftl *f, struct open_set *set, uint32_t row, bool *busy)
{
	struct open_row *orow = &set->row[row];
	uint32_t w = f->row_width;
	if (orow->band == FTL_NO_BLOCK || orow->col == 0 || orow->col == w)
		return FTL_NO_BLOCK;
	uint32_t c = orow->col;
	while (c < w && !member_takes(f, orow, c))
		c++;
	if (c == w)
		return FTL_NO_BLOCK; /* its last data page is handed out: sealed */
	return row_next_page(f, orow, busy);
}

/*
 * The next unit of the NAND page the current member of set->row[row] has
 * partly handed out (several units per NAND page), for a pad that completes
 * it (parity_ppl.c, upage_pad); NO_BLOCK if no NAND page there is partly
 * handed out.
 */
uint32_t set_page_fill(struct ftl *f, struct open_set *set, uint32_t row)
{
	struct open_row *orow = &set->row[row];
	if (f->upp < 2 || orow->band == FTL_NO_BLOCK || orow->col == f->row_width)
		return FTL_NO_BLOCK;
	uint32_t b = band_block(f, orow->band, orow->col);
	const struct blk *k = &f->blk[b];
	if (k->state != BLK_OPEN || k->wp <= orow->page || k->wp >= orow->page + f->upp)
		return FTL_NO_BLOCK;
	bool busy = false;
	return row_next_page(f, orow, &busy);
}

uint32_t set_next_page(struct ftl *f, struct open_set *set, uint32_t floor)
{
	uint32_t w = f->row_width;
	/* nearly out of blocks: fill the bands already open before opening
	 * more.  Not sooner: above the GC floor every row keeps an open band,
	 * so pages stay spread over all dies (filling only the open ones
	 * piles the writes onto a few dies) */
	bool frugal = f->nfree < f->gc_min + 2 * w;
	for (uint32_t i = 0; i < 2 * f->nrows; i++) {
		if (i == f->nrows)
			frugal = false;
		uint32_t row = set->next_row;
		set->next_row = row + 1 == f->nrows ? 0 : row + 1;
		struct open_row *orow = &set->row[row];
		if (orow->band == FTL_NO_BLOCK) {
			if (frugal || f->nfree < floor + row_live_width(f, row) ||
			    !f->band_free[row].count)
				continue;
			/* below the checkpoint's reserve (GC dipping): whole free
			 * bands must keep what a checkpoint takes (O(free bands)) */
			if (floor < f->cp_reserve &&
			    band_members_free(f) < floor + row_live_width(f, row))
				continue;
			/* a footer for every member */
			uint32_t nfoot = 0;
			for (struct footer *fo = f->footer_free; fo && nfoot < w; fo = fo->next_free)
				nfoot++;
			if (nfoot < w)
				continue;
			if (f->parity && !f->par_free)
				continue; /* no parity context for another band yet */
			/* data GC found cold rests on a worn band */
			bool worn = set->blkf == (BLKF_GC | BLKF_COLD);
			uint32_t bi = band_alloc(f, row, BLK_OPEN, worn);
			if (bi == FTL_NO_BLOCK)
				continue;
			par_band_open(f, bi, set->blkf & BLKF_GC);
			for (uint32_t c = 0; c < w; c++) {
				uint32_t b = band_block(f, bi, c);
				struct blk *k = &f->blk[b];
				if (k->state != BLK_OPEN || f->footer_of[b])
					continue;
				k->flags = (uint8_t)((k->flags & ~(BLKF_GC | BLKF_COLD)) | set->blkf);
				footer_attach(f, b);
			}
			orow->band = bi;
			orow->page = 0;
			orow->col = 0;
		}
		bool busy = false;
		uint32_t ppa = row_next_page(f, orow, &busy);
		if (ppa != FTL_NO_BLOCK)
			return ppa;
		if (busy)
			continue;
		if (orow->band == FTL_NO_BLOCK)
			i--; /* the band is full: this row may open another */
	}
	return FTL_NO_BLOCK;
}

uint32_t stream_next_page(struct ftl *f, struct stream *s, uint32_t floor)
{
	return set_next_page(f, &s->set[SET_FIRST], floor);
}

/* ---- temperature ---------------------------------------------------------- */

/*
 * Hot and cold data are told apart by the age of the version a host write
 * replaces: the user pages written since that version's band was written by
 * the host (band_data_age; a GC band's birth is the mean of its pages'
 * source bands', so relocation does not make old data look young).  The
 * threshold is the running mean of those ages over the recent host writes,
 * i.e. the mean rewrite interval: a unit rewritten sooner than that is hot
 * and goes to the user stream's SET_FIRST, one rewritten later is cold and
 * goes to SET_COLD.  Under 80/20 hot/cold writes the mean is about the
 * number of units; a hot unit's interval is a quarter of it, a cold one's
 * four times it, so ~95 % of each set is of its temperature.  Under uniform
 * writes both sets get statistically the same data: nothing is gained and
 * nothing lost but one more open band per row.
 *
 * GC survivors go to the GC stream's SET_COLD when they come from a cold
 * set's band (they were cold and survived once more) or are older than the
 * mean; younger survivors of hot bands go to SET_FIRST.
 *
 * test-4g, 80/20 at 20 % OP, 10 passes: WA 2.54 -> 2.34 (last pass 2.60 ->
 * 2.37); by source band alone (cold: from GC or cold bands) only 2.51.
 * Memory: two words per band.  Not persisted: after a restart every band is
 * born at 0 and the mean is learnt again.
 */
#define AGE_WINDOW 65536 /* age_avg: a plain mean, then a running mean over
			  * about this many host writes */

uint32_t user_set(struct ftl *f, uint32_t prev)
{
	if (!l2p_is_ppa(prev))
		return SET_FIRST; /* new, trimmed, lost, or rewritten while still
				   * buffered (hot) */
	double age = (double)band_data_age(f, prev);
	if (f->age_n < AGE_WINDOW)
		f->age_n++;
	f->age_avg += (age - f->age_avg) / f->age_n;
	return age > f->age_avg ? SET_COLD : SET_FIRST;
}

uint32_t gc_set(struct ftl *f, uint32_t from)
{
	if (f->blk[ppa_block(f, from)].flags & BLKF_COLD)
		return SET_COLD;
	return band_data_age(f, from) > f->age_avg ? SET_COLD : SET_FIRST;
}

static void slot_program_done(struct nand_op *op)
{
	struct stream *s = op->priv;
	struct ftl *f = s->f;
	struct ring *r = &s->ring;
	uint32_t idx = (uint32_t)op->priv2;
	struct slot *sl = &r->slots[idx];
	uint32_t b = op->block;

	f->blk[b].inflight--;
	if (ftl_op_stops(f, op))
		return; /* stopped: the slot stays unreleased, nothing is retired */
	die_note(f, b, DIE_PROGRAM, op->status == NAND_OK);
	if (op->status != NAND_OK) {
		f->st.program_failures++;
		if (f->parity)
			par_program_failed(f, sl->ppa, op->data, op->spare);
		blk_program_failed(f, b);
		blk_programs_settled(f, b);
		if (sl->type == FTL_PG_PPL) {
			/* its content is for that stripe only: not again, but
			 * the stripe gets another (par_ppl_failed) */
			par_ppl_failed(f, s->id, sl->ppa);
			sl->state = SLOT_DONE;
			ring_release(f, r);
			return;
		}
		/* program the same content elsewhere */
		sl->state = SLOT_FILLED;
		r->retry[r->nretry++] = idx;
		return;
	}
	f->st.nand_pages_programmed++;
	f->cp.pages_since++;
	if (sl->seq > f->blk_max_seq[b])
		f->blk_max_seq[b] = sl->seq;
	if (sl->seq < f->blk_min_seq[b])
		f->blk_min_seq[b] = sl->seq;
	sl->state = SLOT_DONE;
	if (sl->type == FTL_PG_DATA) {
		uint32_t ref = L2P_SLOT | (s->id == STREAM_GC ? L2P_SLOT_GC : 0) | idx;
		if (f->l2p[sl->lba] == ref) {
			f->l2p[sl->lba] = sl->ppa;
			blk_validate(f, sl->ppa);
		}
	}
	if (s->programmed)
		s->programmed(f, sl);
	blk_programs_settled(f, b);
	ring_release(f, r);
}

static void slot_submit(struct ftl *f, struct stream *s, uint32_t idx, uint32_t ppa, bool retry)
{
	struct ring *r = &s->ring;
	struct slot *sl = &r->slots[idx];
	uint8_t *data = ring_data(r, idx);
	uint8_t *spare = r->spares + (size_t)idx * f->spare_size;

	sl->ppa = ppa;
	sl->state = SLOT_SUBMITTED;
	if (s->id == STREAM_GC && sl->type == FTL_PG_DATA)
		band_born_note(f, ppa, sl->from);
	uint32_t crc;
	if (sl->type == FTL_PG_PPL) {
		crc = par_ppl_build(f, ppa, sl->seq, data, spare);
	} else {
		crc = sl->crc_known ? sl->data_crc : crc32c(0, data, f->page_size);
		spare_build_crc(f, spare, sl->type, sl->lba, sl->seq, crc);
	}
	struct nand_op *op = &sl->op;
	op->type = NAND_OP_PROGRAM;
	op->flags = sl->type != FTL_PG_DATA ? NAND_OPF_META : 0;
	op->block = ppa_block(f, ppa);
	op->page = ppa_page(f, ppa);
	op->data = data;
	op->spare = spare;
	op->done = slot_program_done;
	op->priv = s;
	op->priv2 = idx;
	ftl_nand_submit(f, op);
	footer_note(f, ppa,
		    sl->type == FTL_PG_TRIM ? FTL_FOOTER_TRIM :
		    sl->type == FTL_PG_PPL  ? FTL_FOOTER_PARITY : sl->lba,
		    sl->seq, crc);
	if (f->parity)
		par_submitted(f, ppa, data, spare);
	if (s->submitted)
		s->submitted(f, sl, retry);
}

/*
 * Hand filled slots to NAND, retries first.  User slots got their page when
 * they were filled (so whatever the user ring holds can always be
 * programmed without waiting for GC); GC slots get one here.
 */
int writer_kick(struct ftl *f, struct stream *s)
{
	struct ring *r = &s->ring;
	int n = 0;

	if (f->error)
		return 0;
	/*
	 * A failed program: anything but the checkpoint's blocks.  A user
	 * slot that finds no page there takes one in a band GC has open: GC
	 * victims wait for the user ring to drain before they are erased
	 * (gc.c, victim_finish), so a retry without a page would hold every
	 * block they would free (seen when worn blocks fail programs by the
	 * dozen: the pool sat at the floor with the ring unable to drain).
	 * A page in a GC band serves as well (the page's spare and the
	 * block's footer name its unit); GC admission's room may come up a
	 * page short, which GC handles as when it runs out of blocks.
	 */
	while (r->nretry) {
		/* a user retry leaves GC room to open a band: GC frees blocks */
		uint32_t floor = s->id == STREAM_USER ? f->gc_min + f->row_width : f->cp_reserve;
		uint32_t ppa = stream_next_page(f, s, floor);
		if (ppa == FTL_NO_BLOCK && s->id == STREAM_USER) {
			struct stream *g = &f->stream[STREAM_GC];
			for (uint32_t k = 0; k < g->nsets && ppa == FTL_NO_BLOCK; k++)
				ppa = set_next_page(f, &g->set[k], UINT32_MAX / 2); /* open bands only */
		}
		if (ppa == FTL_NO_BLOCK)
			return n;
		slot_submit(f, s, r->retry[--r->nretry], ppa, true);
		n++;
	}
	while (r->submit < r->fill) {
		struct slot *sl = ring_slot(r, r->submit);
		if (sl->state == SLOT_SKIP) {
			r->submit++;
			n++;
			continue;
		}
		if (sl->state != SLOT_FILLED)
			break;
		uint32_t ppa = sl->ppa;
		if (s->id == STREAM_GC) {
			/* the other temperature's open band rather than none: room
			 * GC admission counted may be in either (gc_room) */
			uint32_t set = sl->cold ? SET_COLD : SET_FIRST;
			ppa = set_next_page(f, &s->set[set], gc_floor(f));
			if (ppa == FTL_NO_BLOCK)
				ppa = set_next_page(f, &s->set[set ^ 1], gc_floor(f));
			if (ppa == FTL_NO_BLOCK) {
				s->stalled = true;
				break;
			}
			s->stalled = false;
		}
		slot_submit(f, s, (uint32_t)(r->submit & r->mask), ppa, false);
		r->submit++;
		n++;
	}
	if (n)
		ring_release(f, r);
	return n;
}
