/*
 * ftl/gc_admit.c - when garbage collection runs and which victim it takes:
 * the pacing of GC against host writes (gc_needed, gc_unpaced, the credit
 * gc_user_page earns), the room the GC stream has for relocations
 * (gc_room, gc_owed, gc_fits, the dip into the checkpoint's reserve) and
 * the admission of a victim (victim_admit: a block to retire, a band to
 * refresh or wear-level, or the cost-benefit choice of block.c).  Owns
 * f->gc_dip and f->gc_credit's earning; the victims themselves are gc.c's
 * (victim_start).  Called by gc.c (gc_kick, victim_examine) and, through
 * the user stream's submitted hook, writer.c (gc_user_page).
 */
#include "ftl/gc_int.h"

bool gc_needed(struct ftl *f)
{
	/* with parity a band more: a victim's erase waits for the parity of
	 * the stripes its data went to (victim_finish), and the pool must
	 * not run down to the host writes' floor meanwhile (timing bench,
	 * three seeds: 1.4-3.2 % fewer IOPS without it, 0-1.1 % with) */
	uint32_t start = f->gc_start + (f->parity ? f->row_width : 0);
	return f->nfree < start || f->retire.count || f->nrefresh_ready;
}

/* GC runs without pacing when writes are stuck or blocks must be retired. */
bool gc_unpaced(struct ftl *f)
{
	/* below user_min + ndies / 2 the user stream can no longer keep an
	 * open block on every die: its writes would pile onto a few */
	return f->stream[STREAM_USER].stalled || f->nfree <= user_floor(f) + f->ndies / 2 ||
	       f->retire.count;
}

void gc_user_page(struct ftl *f, const struct slot *sl, bool retry)
{
	if (retry)
		return; /* counted when first submitted */
	f->write_clock++;
	if (f->gc_examining || gc_needed(f)) {
		f->gc_credit += f->gc_ratio;
		/* credit left unused (GC waiting for reads or slots) must not
		 * turn into a long burst later */
		if (f->gc_credit > (int64_t)CREDIT_ONE * f->ppb)
			f->gc_credit = (int64_t)CREDIT_ONE * f->ppb;
	}
}

/* Pages the GC stream can still program without the pool going below
 * floor (gc_min; cp_reserve for a victim admitted into gc_dip). */
static uint64_t gc_room(struct ftl *f, uint32_t floor)
{
	struct stream *g = &f->stream[STREAM_GC];
	uint64_t room = 0;
	for (uint32_t k = 0; k < g->nsets; k++)
		for (uint32_t r = 0; r < f->nrows; r++) {
			uint32_t bi = g->set[k].row[r].band;
			if (bi == FTL_NO_BLOCK)
				continue;
			for (uint32_t c = 0; c < f->row_width; c++) {
				const struct blk *m = &f->blk[band_block(f, bi, c)];
				if (m->state == BLK_OPEN && m->wp < f->data_pages &&
				    !(f->parity && par_is_pcol(f, bi, c)))
					room += f->data_pages - m->wp;
			}
		}
	uint32_t avail = f->nfree > floor ? f->nfree - floor : 0;
	if (avail && floor < f->cp_reserve) {
		/* dipping: counted in whole free bands (set_next_page) */
		uint32_t bm = band_members_free(f);
		avail = bm > floor ? (bm - floor < avail ? bm - floor : avail) : 0;
	}
	if (avail) {
		/* bands open whole, and only while nfree >= gc_min + the band's
		 * live width (set_next_page): a remainder under it is no room.
		 * The narrowest row's width: with a dead die the pool may hold
		 * only its bands */
		uint32_t w = f->row_width;
		for (uint32_t r = 0; f->ndead && r < f->nrows; r++)
			if (f->band_free[r].count && row_live_width(f, r) < w)
				w = row_live_width(f, r);
		uint64_t blocks = avail / w * w;
		uint64_t pages = blocks * f->data_pages;
		if (f->parity && w > f->parity) /* a member of each band holds parity */
			pages = pages * (w - f->parity) / w;
		room += pages;
	}
	return room;
}

/* Pages the victims in flight may still need: valid pages not yet
 * relocated, and relocations waiting for a page. */
static uint64_t gc_owed(struct ftl *f)
{
	struct ring *r = &f->stream[STREAM_GC].ring;
	uint64_t owed = r->fill - r->submit;
	for (uint32_t i = 0; i < f->nvictims; i++)
		if (f->victims[i].phase != VIC_FREE)
			owed += f->blk[f->victims[i].block].valid;
	return owed;
}

/*
 * Room for a victim with valid pages to relocate: above gc_min, or, with
 * may_dip, when nothing is in flight to make room (or GC is dipping
 * already) and the victim frees at least a quarter of a band, down to
 * the members of whole free bands a checkpoint takes (cp_need; gc_dip,
 * and no block is retired meanwhile: a crash closes the blocks open at it
 * nearly empty, and the pool can sit at gc_min with no room to collect
 * them).  A device whose bands are all full of valid data gets no dip: its
 * spare capacity is gone and it turns ENOSPC.
 */
static bool gc_fits(struct ftl *f, uint32_t valid, bool may_dip)
{
	uint64_t owed = gc_owed(f);
	if (gc_room(f, f->gc_min) >= owed + valid)
		return true;
	if (!may_dip || (!f->gc_dip && gc_busy(f)) ||
	    4 * (uint64_t)valid > 3 * (uint64_t)(f->row_width - f->parity) * f->data_pages ||
	    gc_room(f, f->cp_need) < owed + valid)
		return false;
	f->gc_dip = true;
	return true;
}

/*
 * Start a victim if GC is needed, victim slots are free and the GC stream
 * has room for its valid pages: a block to retire, or the CLOSED members
 * of the best candidate band (collected together, so the band's blocks are
 * erased and reused together).  Returns 1 if one started, 0 if not, -1 if
 * none can start now (stop trying this round).
 */
int victim_admit(struct ftl *f)
{
	if (f->gc_dip && f->nfree >= f->gc_min + f->row_width)
		f->gc_dip = false;
	if (!gc_needed(f))
		return -1;
	uint32_t nfree_v = f->nvictims - f->gc_examining - f->gc_finishing;
	if (!nfree_v)
		return -1;
	uint32_t b = FTL_NO_BLOCK, bi = FTL_NO_BLOCK, valid = 0, nmem = 1;
	bool retire = false, urgent = false;
	/* a block to retire frees nothing: not while GC dips into the
	 * checkpoint's reserve, where each page it moves is room an ordinary
	 * victim needs to make room (t_ftl_model -c 7 -s 38: the dead die's
	 * blocks retired the pool down to the checkpoint's bands, ENOSPC) */
	if (f->retire.count && !f->gc_dip) {
		b = blist_pop(f, &f->retire);
		retire = true;
		valid = f->blk[b].valid;
	} else {
		/* bands marked for refresh first: their data is at risk */
		bi = band_refresh_pick(f);
		urgent = bi != FTL_NO_BLOCK;
		/* the band turned down last time still would be: no new
		 * pick (a scan over every valid-count bucket) until the
		 * victims in flight free as many slots.  Without this, 99.99 %
		 * of picks were turned down so, and they took 46 % of the
		 * CPU of a steady-state bench. */
		uint32_t want = f->gc_slots_wanted;
		if (!urgent && want &&
		    (want > nfree_v || (f->gc_examining && f->gc_examining + want > f->gc_examining_max)))
			return -1;
		/* now and then a cold band, for static wear levelling */
		if (!urgent)
			bi = band_wl_pick(f);
		if (bi == FTL_NO_BLOCK)
			bi = band_victim_pick(f, f->row_victims);
		f->gc_slots_wanted = 0;
		if (bi != FTL_NO_BLOCK) {
			valid = f->band[bi].valid;
			nmem = f->band[bi].n_closed;
			/* a band at a time: one with more members than slots
			 * left waits for the victims in flight */
			if (nmem > nfree_v ||
			    (f->gc_examining && f->gc_examining + nmem > f->gc_examining_max)) {
				if (!urgent)
					f->gc_slots_wanted = nmem;
				return -1;
			}
		}
	}
	bool found = b != FTL_NO_BLOCK || bi != FTL_NO_BLOCK;
	bool room = found && gc_fits(f, valid, !retire);
	if (!room && (urgent || retire) && !gc_busy(f)) {
		/*
		 * A block to retire or a refresh band that does not fit, and
		 * nothing in flight to make room: the best ordinary victim
		 * first, which frees space.  Both can take more than they give
		 * back (a retired block is not reused; after a die died its
		 * bands are refreshed whole, and a band of a row with a dead
		 * die holds fewer data pages), and GC waited for nothing: the
		 * ioDimm turned ENOSPC with a fifth of its space spare (die
		 * dead at open), or at 98 % reserves (program failures early
		 * in t_ftl_wear, seeds 29 and 47).
		 */
		uint32_t alt = band_victim_pick(f, f->row_victims);
		if (alt != FTL_NO_BLOCK && alt != bi && f->band[alt].n_closed <= nfree_v &&
		    gc_fits(f, f->band[alt].valid, true)) {
			if (retire)
				blist_push(f, &f->retire, b);
			retire = false;
			b = FTL_NO_BLOCK;
			bi = alt;
			urgent = false;
			valid = f->band[alt].valid;
			room = true;
		}
	}
	if (!room) {
		/* not enough room to relocate it yet: let the victims in
		 * flight finish and free their blocks first */
		if (retire)
			blist_push(f, &f->retire, b);
		if (!gc_busy(f) && f->stream[STREAM_USER].stalled && !f->dirty.count &&
		    !f->no_space && f->cp.phase == CP_IDLE && !f->dev->inflight) {
			/* nothing in flight will ever free a block: the spare
			 * capacity is gone (bad blocks ate it) */
			f->no_space = true;
			ftl_log(FTL_LOG_ERR, "no room left to collect garbage: writes fail with "
				"ENOSPC from now on, reads go on; copy the data off and replace the "
				"card");
		}
		return -1;
	}
	if (retire) {
		victim_start(f, victim_free_slot(f), b, true, true);
		return 1;
	}
	if (urgent)
		f->st.refresh_collected++;
	for (uint32_t c = 0; c < f->row_width; c++) {
		uint32_t m = band_block(f, bi, c);
		if (f->blk[m].state == BLK_CLOSED)
			victim_start(f, victim_free_slot(f), m, false, urgent);
	}
	return 1;
}
