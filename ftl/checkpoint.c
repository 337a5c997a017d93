/*
 * ftl/checkpoint.c - writing the l2p checkpoint: its blocks, header, l2p
 * pages, parity and erase counts, the commit through the superblock and
 * the release of the checkpoint before the previous one.  Owns struct
 * cp_state (f->cp) while serving; cp_kick runs it from the ioDimm's
 * progress (ftl.c), cp_request is called by whoever wants a checkpoint
 * (gc.c, the parity files, die.c, ftl.c).  Loading at open:
 * checkpoint_load.c; the sizes of its parts: checkpoint_layout.c.
 *
 * A checkpoint is taken at clean close and every cp_interval log pages.
 * Nothing waits for it: host writes and GC go on while the header and l2p
 * pages are programmed into blocks from the free pool (striped over the
 * blocks so the dies work in parallel), the medium is synced, and a new
 * superblock page makes the checkpoint current and the one that was
 * current the previous (the superblock names both).  Only once that page
 * is synced too are the blocks of the checkpoint before released
 * (CP_RELEASE; on an image file a host crash may lose writes not synced).
 * A power cut at any point leaves either the old or the new checkpoint
 * current, never neither.  Two are kept so that a current checkpoint
 * found damaged at open (cp_load) is replaced by the previous one and the
 * log after it, which GC keeps (cp.keep_seq), not by a replay of the
 * whole log, which cannot undo the trims whose records GC dropped; a
 * device whose spare blocks cannot hold a second one keeps one
 * (cp_prev_room).
 * The checkpoint is fuzzy.  cp_seq is one below the oldest sequence number
 * still in a write buffer when it starts, so every log page newer than
 * cp_seq is on the media or will be, and recovery replays all of them in
 * order.  An l2p page is copied when it is programmed, so it may hold
 * mappings newer than cp_seq: each is either a programmed page (replayed
 * anyway: the newest wins) or, for a unit whose newer version is still
 * buffered, the slot's prev, the mapping it had before, on the media.  So
 * every entry is durable and replay from cp_seq rebuilds the last durable
 * state.  Unmappings are the exception: a trim not yet in a record has no
 * sequence number, and replay maps its units again if their pages are
 * newer than cp_seq.  That is allowed for a trim nobody flushed (contract
 * rule 2), but not after a clean close: the clean checkpoint closes the
 * pending trims into a record before it takes cp_seq (cp_kick).  Nor once
 * an open served a trim from the l2p copied: every checkpoint commits
 * only after a programmed record holds the trims its copy shows, so the
 * previous one and the log after it rebuild them too (CP_WRITE).
 * Cost: l2p_bytes of programming and a copy of each page; no host wait.
 */
#include <errno.h>

#include "ftl/checkpoint_int.h"

/*
 * Programs in flight: a checkpoint taken while serving shares the dies with
 * host writes, whose write buffer is released in order, so a few programs
 * at a time (a 320 GiB ioDimm's map of 82k pages then takes ~10 s of NAND
 * time); the clean one at close has the dies to itself.
 */
#define CP_OPS 64
#define CP_OPS_SERVING 8
#define CP_SKIP_MAX 64      /* empty l2p pages looked at per cp_kick */

/*
 * Lay out the erase counts in wear_buf's first `pages` pages (at least
 * cp_wear_pages(f, 0)): a count per band (its first member that is neither
 * bad nor a superblock block), the map of blocks that hold nothing as old
 * as cp_seq (erased: free, being erased, or written only since; the
 * erase before is in their count), then a pair for every other block
 * (not bad) whose count differs, as many as fit.  A superblock block is
 * counted with the erase the commit's update will start in it (sb_next at the end: the
 * update erases it first), so the counts a checkpoint loads include its
 * own commit's.  Returns the pairs laid out.  O(nblocks).
 */
static uint32_t cp_fill_wear(struct ftl *f, uint32_t pages)
{
	struct cp_state *c = &f->cp;
	uint32_t nfresh = cp_fresh_words(f);
	uint32_t max_exc = (uint32_t)(((size_t)pages * f->page_size - sizeof(struct ftl_cp_wear)) /
				      sizeof(uint32_t) - f->nbands - nfresh) / 2;
	uint32_t *band = (uint32_t *)(c->wear_buf + sizeof(struct ftl_cp_wear));
	for (uint32_t bi = 0; bi < f->nbands; bi++) {
		band[bi] = 0;
		for (uint32_t col = 0; col < f->row_width; col++) {
			uint32_t b = band_block(f, bi, col);
			if (f->blk[b].state != BLK_BAD && !blk_is_sb(f, b)) {
				band[bi] = blk_erases(f, b);
				break;
			}
		}
	}
	uint32_t *fresh = band + f->nbands;
	memset(fresh, 0, nfresh * sizeof(uint32_t));
	for (uint32_t b = 0; b < f->nblocks; b++) {
		uint8_t st = f->blk[b].state;
		uint64_t oldest = f->blk_min_seq[b];
		if (st == BLK_FREE || st == BLK_ERASING ||
		    ((st == BLK_OPEN || st == BLK_CLOSED || st == BLK_VICTIM) && oldest &&
		     oldest > c->cp_seq))
			fresh[b / 32] |= 1u << (b % 32);
	}
	uint32_t *exc = fresh + nfresh, nexc = 0;
	for (uint32_t b = 0; b < f->nblocks && nexc < max_exc; b++) {
		if (f->blk[b].state == BLK_BAD)
			continue; /* erased no more: its count matters no more */
		uint32_t ec = blk_erases(f, b);
		for (int i = 0; i < 2; i++)
			if (b == f->sb_block[i] && f->sb_next[i] >= f->ppb)
				ec++;
		if (ec == band[block_band(f, b)])
			continue;
		exc[2 * nexc] = b;
		exc[2 * nexc + 1] = ec;
		nexc++;
	}
	struct ftl_cp_wear w;
	memset(&w, 0, sizeof w);
	cp_stamp(f, &w, FTL_WEAR_MAGIC, sizeof w);
	w.nbands = f->nbands;
	w.nexc = nexc;
	w.words_crc = crc32c(0, band, ((size_t)f->nbands + nfresh + 2 * nexc) * sizeof(uint32_t));
	w.crc = crc32c(0, &w, offsetof(struct ftl_cp_wear, crc));
	memcpy(c->wear_buf, &w, sizeof w);
	size_t used = sizeof w + sizeof(uint32_t) * ((size_t)f->nbands + nfresh + 2 * nexc);
	memset(c->wear_buf + used, 0xFF, (size_t)pages * f->page_size - used);
	return nexc;
}

/*
 * How many pages the erase counts take in this checkpoint (wear_pages; 0
 * if not even the band counts fit in the `room` pages the header block has
 * left): those of the pairs now and as many more as the blocks erased
 * before the pages are laid out again at their submission (a band's erases
 * in flight: about one per die) may add.
 */
static void cp_size_wear(struct ftl *f, uint32_t room)
{
	struct cp_state *c = &f->cp;
	if (room > c->wear_cap)
		room = c->wear_cap;
	c->wear_pages = 0;
	if (!room || cp_wear_pages(f, 0) > room)
		return;
	uint32_t pages = cp_wear_pages(f, cp_fill_wear(f, room) + 2 * f->ndies + 16);
	c->wear_pages = pages < room ? pages : room;
}

/* One below the oldest sequence number not yet on the media: the slots of
 * both write buffers not yet programmed (reads GC has in flight take their
 * numbers when they land, later). */
static uint64_t cp_durable_seq(struct ftl *f)
{
	uint64_t min = f->next_seq;
	for (int i = 0; i < NSTREAMS; i++) {
		struct ring *r = &f->stream[i].ring;
		for (uint64_t pos = r->done; pos < r->fill; pos++) {
			struct slot *sl = ring_slot(r, pos);
			if ((sl->state == SLOT_FILLED || sl->state == SLOT_SUBMITTED) && sl->seq < min)
				min = sl->seq;
		}
	}
	return min - 1;
}

int cp_init(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	/* whole bands: up to row_width - 1 blocks more than needed */
	uint32_t nl = cp_l2p_blocks(f) + f->row_width;
	c->blocks = ftl_alloc(f, nl * sizeof *c->blocks);
	/* with parity: a parity block per group (at most one per l2p block)
	 * and the header's copy */
	c->pblocks = ftl_alloc(f, nl * sizeof *c->pblocks);
	c->gend = ftl_alloc(f, nl * sizeof *c->gend);
	c->cur_blocks = ftl_alloc(f, (2 * nl + 1) * sizeof *c->cur_blocks);
	c->prev_blocks = ftl_alloc(f, (2 * nl + 1) * sizeof *c->prev_blocks);
	c->rel_blocks = ftl_alloc(f, 2 * (2 * nl + 2) * sizeof *c->rel_blocks);
	/* whatever the data's format: a checkpoint that one dead die makes
	 * unloadable is replaced by a replay of the whole log, which brings
	 * back sectors trimmed before it (t_ftl_parity cp_dead_at_open_noparity) */
	c->with_parity = f->row_width > 1 && f->upp == 1; /* none over larger pages */
	c->hdr_mirror = FTL_NO_BLOCK;
	c->ngroups = 0;
	if (c->with_parity && !(c->pacc = ftl_alloc_pages(f, f->page_size)))
		return -ENOMEM;
	c->nops = CP_OPS;
	c->ops = ftl_alloc(f, c->nops * sizeof *c->ops);
	c->free_idx = ftl_alloc(f, c->nops * sizeof *c->free_idx);
	/* blocks being written: the open sets, and blocks whose pages are all
	 * handed out with programs still buffered (at most one per slot) */
	/* and blocks closed holding pages newer than cp_seq: at most one per
	 * page newer than the oldest page buffered (both rings' worth) */
	c->open_cap = 8 * f->ndies + 2 * (f->stream[STREAM_USER].ring.nslots +
					  f->stream[STREAM_GC].ring.nslots);
	c->open_list = ftl_alloc(f, (size_t)c->open_cap * sizeof *c->open_list);
	if (!c->blocks || !c->pblocks || !c->gend || !c->cur_blocks || !c->prev_blocks ||
	    !c->rel_blocks || !c->ops || !c->free_idx || !c->open_list)
		return -ENOMEM;
	/* the header buffer, sized for every open block, some grown bad
	 * blocks and a parity group per l2p block, so a checkpoint normally
	 * allocates nothing */
	struct cp_layout l;
	cp_layout(f, nl, 4 * f->ndies, f->nblocks / 64 + 16, true, true, nl, &l);
	c->hdr_cap = cp_layout_pages(f, &l, 0);
	if (c->hdr_cap < 1)
		c->hdr_cap = 1;
	if (c->hdr_cap > f->ppb)
		c->hdr_cap = f->ppb;
	c->hdr_buf = aligned_alloc(4096, (size_t)c->hdr_cap * f->page_size);
	if (!c->hdr_buf)
		return -ENOMEM;
	/* the erase counts: a count per band and room for a pair per 32
	 * blocks erased apart (superblock blocks, blocks that failed), at most
	 * the header block's pages after the header's first */
	c->wear_cap = cp_wear_pages(f, f->nblocks / 32 + 64);
	if (c->wear_cap > f->ppb - 1)
		c->wear_cap = f->ppb - 1;
	if (c->wear_cap && !(c->wear_buf = ftl_alloc_pages(f, (size_t)c->wear_cap * f->page_size)))
		return -ENOMEM;
	for (uint32_t i = 0; i < c->nops; i++)
		c->free_idx[i] = i;
	c->nfree_idx = c->nops;
	for (uint32_t i = 0; i < c->nops; i++) {
		c->ops[i].f = f;
		c->ops[i].spare = ftl_alloc(f, f->spare_size);
		c->ops[i].buf = ftl_alloc_pages(f, f->page_size);
		if (!c->ops[i].spare || !c->ops[i].buf)
			return -ENOMEM;
	}
	c->cur_hdr_block = FTL_NO_BLOCK;
	c->prev_hdr_block = FTL_NO_BLOCK;
	c->phase = CP_IDLE;
	return 0;
}

/*
 * Blocks of the checkpoint being written, by index 0 .. cp_nall - 1: the
 * header block, the l2p blocks, the parity blocks, the header's copy
 * (FTL_NO_BLOCK where a group has no parity block or there is no copy).
 */
static uint32_t cp_nall(const struct cp_state *c)
{
	return 2 + c->nblocks + c->ngroups;
}

static uint32_t cp_block_at(const struct cp_state *c, uint32_t i)
{
	if (i == 0)
		return c->hdr_block;
	i--;
	if (i < c->nblocks)
		return c->blocks[i];
	i -= c->nblocks;
	return i < c->ngroups ? c->pblocks[i] : c->hdr_mirror;
}

/* Give the blocks of an attempt back to the eraser. */
static void cp_give_back(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	for (uint32_t i = 0; i < cp_nall(c); i++) {
		uint32_t b = cp_block_at(c, i);
		if (b != FTL_NO_BLOCK)
			blk_set_dirty(f, b);
	}
}

/*
 * Allocate header and l2p blocks: whole free bands, rows in turn, so the
 * pages (striped over all the blocks) are programmed on many dies at once.
 * Every block of those bands belongs to the checkpoint, so bands stay whole.
 * With parity, each band's l2p blocks form a group whose last block holds
 * their parity, and the header gets a copy on another die (media.h).
 */
static bool cp_alloc_blocks(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	uint32_t need = cp_l2p_blocks(f), w = f->row_width;
	if (band_members_free(f) < cp_blocks_needed(f))
		return false;
	uint32_t row = 0, got = 0, tries = 0;
	c->hdr_block = FTL_NO_BLOCK;
	c->hdr_mirror = FTL_NO_BLOCK;
	c->nblocks = 0;
	c->ngroups = 0;
	while ((got < need || c->hdr_block == FTL_NO_BLOCK) && tries < 2 * f->nrows) {
		uint32_t bi = f->band_free[row].count ? band_alloc(f, row, BLK_META, false) : FTL_NO_BLOCK;
		row = row + 1 == f->nrows ? 0 : row + 1;
		if (bi == FTL_NO_BLOCK) {
			tries++;
			continue;
		}
		tries = 0;
		uint32_t gstart = got;
		for (uint32_t col = 0; col < w; col++) {
			uint32_t b = band_block(f, bi, col);
			/* the members band_alloc took; a superblock block in
			 * the band is META too, but a hole: taking it lost a
			 * superblock copy (its program fails, the attempt
			 * gave it to the eraser) */
			if (f->blk[b].state != BLK_META || blk_is_sb(f, b))
				continue;
			if (c->hdr_block == FTL_NO_BLOCK)
				c->hdr_block = b;
			else if (c->with_parity && c->hdr_mirror == FTL_NO_BLOCK &&
				 block_die(f, b) != block_die(f, c->hdr_block))
				c->hdr_mirror = b;
			else
				c->blocks[got++] = b;
		}
		if (c->with_parity && got > gstart) {
			/* the band's last l2p block holds the group's parity */
			c->pblocks[c->ngroups] = got - gstart >= 2 ? c->blocks[--got] : FTL_NO_BLOCK;
			c->gend[c->ngroups++] = got;
		}
		c->nblocks = got;
	}
	if (got < need || c->hdr_block == FTL_NO_BLOCK) {
		/* cannot happen (the free bands had the members): give back */
		cp_give_back(f);
		return false;
	}
	return true;
}

/* Block b goes into the bad list: retired (grown bad), or doomed (a program
 * failed; GC has not retired it yet), which the list marks so a clean
 * restart does not bring its reserves back (t_ftl_wear seed 46: read-only,
 * then write-reduced after the reopen). */
static bool cp_bad_listed(const struct ftl *f, uint32_t b)
{
	return (f->blk[b].flags & BLKF_GROWN_BAD) ||
	       ((f->blk[b].flags & BLKF_DOOMED) && f->blk[b].state != BLK_BAD &&
		f->blk[b].state != BLK_META);
}

/*
 * Lay out the header block: header, then the l2p blocks, the log blocks
 * recovery must scan (a checkpoint that leaves one out loses the writes
 * after it), and the grown bad blocks.  -ENOMEM if the buffer cannot grow,
 * -EAGAIN if the blocks to scan do not fit now: the checkpoint is then not
 * written at all (the buffer is never shrunk).
 */
static int cp_build_header(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	uint32_t nopen = 0, nbad = 0;
	uint32_t *open = c->open_list;
	/*
	 * Every block that holds, or may still receive, a log page newer than
	 * cp_seq: recovery replays the log after cp_seq in order, so it must
	 * see all of it.  That is every block being written (in an open set,
	 * or with programs buffered or in flight), and every closed block (or
	 * victim) that received such a page: programs complete out of order,
	 * so a block can fill and close while an older page is still buffered
	 * elsewhere.  Replaying a trim record without the write after it in
	 * such a block would unmap that write.
	 */
	for (uint32_t b = 0; b < f->nblocks; b++) {
		uint8_t st = f->blk[b].state;
		bool scan = st == BLK_OPEN || st == BLK_RETIRING ||
			    ((st == BLK_CLOSED || st == BLK_VICTIM) && f->blk_max_seq[b] > c->cp_seq);
		if (scan) {
			if (nopen == c->open_cap)
				return -EAGAIN;
			open[nopen++] = b;
		}
		if (cp_bad_listed(f, b))
			nbad++;
	}
	/* everything must fit in the header block; grown bad blocks beyond
	 * that are found again (their programs or erases fail again) */
	/* bands marked for refresh (FTL_CP_REFRESH): a band whose stripes
	 * lost their parity stays marked across a restart */
	uint32_t nref = 0;
	for (uint32_t bi = 0; bi < f->nbands; bi++)
		if (f->band[bi].flags & BANDF_REFRESH)
			nref++;
	size_t nrefresh = nref ? 1 + (size_t)nref : 0;
	struct cp_layout l;
	cp_layout(f, c->nblocks, nopen, 0, true, c->with_parity, c->ngroups, &l);
	uint32_t room = (uint32_t)((f->ppb * (size_t)f->page_size - sizeof(struct ftl_cp_hdr)) /
				   sizeof(uint32_t)) - (uint32_t)l.refresh - (uint32_t)nrefresh;
	if (nbad > room)
		nbad = room;
	cp_layout(f, c->nblocks, nopen, nbad, true, c->with_parity, c->ngroups, &l);
	c->hdr_pages = cp_layout_pages(f, &l, nrefresh);
	if (c->hdr_pages > c->hdr_cap) {
		uint8_t *b = aligned_alloc(4096, (size_t)c->hdr_pages * f->page_size);
		if (!b)
			return -ENOMEM;
		free(c->hdr_buf);
		c->hdr_buf = b;
		c->hdr_cap = c->hdr_pages;
	}
	memset(c->hdr_buf, 0xFF, (size_t)c->hdr_pages * f->page_size);
	cp_size_wear(f, f->ppb - c->hdr_pages);

	uint32_t *lists = (uint32_t *)(c->hdr_buf + sizeof(struct ftl_cp_hdr));
	for (uint32_t i = 0; i < c->nblocks; i++)
		lists[i] = c->blocks[i];
	for (uint32_t i = 0; i < nopen; i++)
		lists[l.open + i] = open[i];
	size_t k = l.bad;
	uint32_t listed = 0;
	bool doomed = false;
	for (uint32_t b = 0; b < f->nblocks && listed < nbad; b++)
		if (cp_bad_listed(f, b)) {
			lists[k++] = b | (f->blk[b].flags & BLKF_GROWN_BAD ? 0 : FTL_CP_BAD_DOOMED);
			doomed |= !(f->blk[b].flags & BLKF_GROWN_BAD);
			listed++;
		}
	/* the bitmap of written l2p pages: filled in as they are written */
	c->present = lists + l.bitmap;
	memset(c->present, 0, l.nbitmap * sizeof(uint32_t));
	if (c->with_parity) {
		uint32_t *par = lists + l.par;
		par[0] = c->hdr_mirror;
		for (uint32_t g = 0; g < c->ngroups; g++)
			par[1 + g] = c->pblocks[g];
		for (uint32_t g = 0; g < c->ngroups; g++)
			par[1 + c->ngroups + g] = c->gend[g];
	}
	k = l.refresh;
	if (nref) {
		lists[k++] = nref;
		for (uint32_t bi = 0; bi < f->nbands; bi++)
			if (f->band[bi].flags & BANDF_REFRESH)
				lists[k++] = bi;
	}
	c->nlist_words = (uint32_t)k;

	struct ftl_cp_hdr h;
	memset(&h, 0, sizeof h);
	cp_stamp(f, &h, FTL_CP_MAGIC, sizeof h);
	h.units = f->units;
	h.l2p_pages = c->l2p_pages;
	h.hdr_pages = c->hdr_pages;
	h.nblocks = c->nblocks;
	h.nopen = nopen;
	h.nbad = nbad;
	h.clean = c->clean;
	h.stats_host_pages_written = f->st.host_pages_written;
	h.stats_nand_pages_programmed = f->st.nand_pages_programmed;
	h.stats_blocks_erased = f->st.blocks_erased;
	h.stats_host_read_bytes = f->st.host_read_bytes;
	h.stats_host_write_bytes = f->st.host_write_bytes;
	h.stats_nand_pages_read = f->st.nand_pages_read;
	h.stats_host_read_ops = f->st.host_read_ops;
	h.stats_host_write_ops = f->st.host_write_ops;
	h.sector_size = f->sector_size;
	h.format_time = f->format_time;
	/* the flags an older flashd does not know only where needed: it
	 * takes such a checkpoint for damaged (and replays the whole log) */
	h.flags = FTL_CP_SPARSE | (doomed ? FTL_CP_DOOMED : 0) | (c->with_parity ? FTL_CP_PARITY : 0) |
		  (nref ? FTL_CP_REFRESH : 0);
	h.ngroups = c->ngroups;
	/* l2p_written and the checksums: cp_seal_header, once every l2p
	 * page has been looked at */
	memcpy(c->hdr_buf, &h, sizeof h);
	c->written = 0;
	c->hdr_next = 0;
	c->sealed = false;
	c->pacc_open = false;
	c->par_pending = false;
	return 0;
}

/* Every l2p page has been written or left out: complete the header. */
static void cp_seal_header(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	struct ftl_cp_hdr h;
	memcpy(&h, c->hdr_buf, sizeof h);
	h.l2p_written = c->written;
	h.lists_crc = crc32c(0, c->hdr_buf + sizeof h, (size_t)c->nlist_words * sizeof(uint32_t));
	h.crc = crc32c(0, &h, offsetof(struct ftl_cp_hdr, crc));
	memcpy(c->hdr_buf, &h, sizeof h);
	c->sealed = true;
}

/* True if no unit of the n entries is mapped (or lost, or buffered). */
static bool l2p_range_unmapped(const uint32_t *e, uint64_t n)
{
	uint64_t k = 0;
	for (; k + 8 <= n; k += 8) {
		uint64_t a, b, c, d;
		memcpy(&a, e + k, 8);
		memcpy(&b, e + k + 2, 8);
		memcpy(&c, e + k + 4, 8);
		memcpy(&d, e + k + 6, 8);
		if ((a & b & c & d) != UINT64_MAX)
			return false;
	}
	for (; k < n; k++)
		if (e[k] != L2P_UNMAPPED)
			return false;
	return true;
}

static void cp_page_done(struct nand_op *op)
{
	struct cp_op *co = op->priv;
	struct ftl *f = co->f;
	struct cp_state *c = &f->cp;
	c->ops_in_flight--;
	c->pages_done++;
	f->cp.free_idx[f->cp.nfree_idx++] = (uint32_t)op->priv2;
	if (op->status == NAND_OK) {
		f->st.nand_pages_programmed++;
		f->st.meta_pages_programmed++;
		return;
	}
	if (ftl_op_stops(f, op))
		return;
	f->st.program_failures++;
	f->blk[op->block].flags |= BLKF_GROWN_BAD; /* retired when the attempt is dropped */
	die_note(f, op->block, DIE_PROGRAM, false);
	c->error = -EIO;
}

/* Program one checkpoint page (spare: type checkpoint, lba, cp_seq, crc);
 * the caller has checked cp_may_submit.  data stays valid until done. */
static void cp_program(struct ftl *f, struct cp_op *co, uint32_t oi, uint32_t block, uint32_t page,
		       const void *data, uint32_t lba, uint32_t crc)
{
	struct cp_state *c = &f->cp;
	struct nand_op *op = &co->op;
	spare_build_crc(f, co->spare, FTL_PG_CKPT, lba, c->cp_seq, crc);
	op_program(op, NAND_OPF_META, block, page, (void *)data, co->spare, cp_page_done, co);
	op->priv2 = oi;
	c->ops_in_flight++;
	ftl_nand_submit(f, op);
}

static struct cp_op *cp_take_op(struct cp_state *c, uint32_t *oi)
{
	*oi = c->free_idx[--c->nfree_idx];
	return &c->ops[*oi];
}

/* Header page k of the header block (k < hdr_pages) or of its copy. */
static void cp_submit_hdr(struct ftl *f, uint32_t k)
{
	struct cp_state *c = &f->cp;
	uint32_t oi, p = k % c->hdr_pages;
	struct cp_op *co = cp_take_op(c, &oi);
	const uint8_t *data = c->hdr_buf + (size_t)p * f->page_size;
	cp_program(f, co, oi, k < c->hdr_pages ? c->hdr_block : c->hdr_mirror, p, data, p,
		   crc32c(0, data, f->page_size));
}

/* Erase-count page w: in the header block, after the header's pages. */
static void cp_submit_wear(struct ftl *f, uint32_t w)
{
	struct cp_state *c = &f->cp;
	uint32_t oi;
	struct cp_op *co = cp_take_op(c, &oi);
	const uint8_t *data = c->wear_buf + (size_t)w * f->page_size;
	cp_program(f, co, oi, c->hdr_block, c->hdr_pages + w, data, FTL_CP_WEAR_LBA,
		   crc32c(0, data, f->page_size));
}

/*
 * Parity: add the j-th l2p page written (data, its crc) to its stripe, the
 * pages at row j / nblocks of its group.  A group's columns are written in
 * order, so one stripe is open at a time; par_pending once it is complete.
 */
static void cp_par_add(struct cp_state *c, uint32_t j, const uint8_t *data, uint32_t crc,
		       uint32_t page_size)
{
	uint32_t col = j % c->nblocks, g = 0;
	while (col >= c->gend[g])
		g++;
	if (col == (g ? c->gend[g - 1] : 0)) {
		memcpy(c->pacc, data, page_size);
		c->pacc_crc = crc;
		c->pacc_grp = g;
		c->pacc_row = j / c->nblocks;
		c->pacc_open = true;
	} else {
		xor_into(c->pacc, data, page_size);
		c->pacc_crc ^= crc;
	}
	if (col + 1 == c->gend[g])
		c->par_pending = true;
}

/* Program the open stripe's parity page (none for a group without a
 * parity block). */
static void cp_submit_parity(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	c->par_pending = false;
	c->pacc_open = false;
	uint32_t pb = c->pblocks[c->pacc_grp];
	if (pb == FTL_NO_BLOCK)
		return;
	uint32_t oi;
	struct cp_op *co = cp_take_op(c, &oi);
	memcpy(co->buf, c->pacc, f->page_size);
	cp_program(f, co, oi, pb, c->pacc_row, co->buf, FTL_CP_PARITY_LBA, c->pacc_crc);
}

/*
 * Program l2p page i (the page's number in the spare is hdr_pages + i) as
 * the checkpoint's c->written-th l2p page: those are striped over the l2p
 * blocks in the order written.
 */
static void cp_submit_l2p(struct ftl *f, uint32_t i)
{
	struct cp_state *c = &f->cp;
	uint32_t oi, per_page = f->page_size / sizeof(uint32_t), j = c->written++;
	struct cp_op *co = cp_take_op(c, &oi);

	c->present[i / 32] |= 1u << (i % 32);
	uint64_t first = (uint64_t)i * per_page;
	uint64_t n = f->units - first < per_page ? f->units - first : per_page;
	/* a copy (the l2p moves on while the page is programmed), with
	 * buffered units recorded as their durable mapping before */
	uint32_t *dst = (uint32_t *)co->buf;
	memcpy(dst, &f->l2p[first], n * sizeof(uint32_t));
	for (uint64_t k = 0; k < n; k++)
		if (l2p_is_slot(dst[k]))
			dst[k] = slot_prev(f, dst[k]);
	if (n < per_page)
		memset(dst + n, 0xFF, (per_page - n) * sizeof(uint32_t));
	uint32_t crc = crc32c(0, co->buf, f->page_size);
	if (c->with_parity)
		cp_par_add(c, j, co->buf, crc, f->page_size);
	cp_program(f, co, oi, c->blocks[cp_l2p_block_index(f, j, c->nblocks)],
		   cp_l2p_page(f, j, c->nblocks), co->buf, c->hdr_pages + i, crc);
}

/* Drop a failed attempt: its blocks go back (or are retired), retry later. */
static void cp_abort(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	uint32_t retired = 0;
	for (uint32_t i = 0; i < cp_nall(c); i++) {
		uint32_t b = cp_block_at(c, i);
		if (b == FTL_NO_BLOCK)
			continue;
		if (f->blk[b].flags & BLKF_GROWN_BAD) {
			f->blk[b].flags &= (uint8_t)~BLKF_GROWN_BAD;
			blk_set_bad(f, b, true);
			retired++;
		} else {
			blk_set_dirty(f, b);
		}
	}
	c->phase = CP_IDLE;
	c->requested = true;
	c->wear_final = false;
	/* an attempt that found (and retired) bad blocks made progress: a
	 * dead die costs one attempt per band of its row that the pool hands
	 * out; three attempts in a row without one fail, as do 64 in all */
	if (retired)
		c->retired_attempts++;
	else
		c->attempts++;
	if (c->attempts > 3 || c->retired_attempts > 64)
		ftl_fail(f, -EIO, "writing a checkpoint failed three times");
}

/* The header block and the other blocks of a checkpoint the superblock
 * being committed no longer names: released by cp_release. */
static void cp_rel_add(struct cp_state *c, uint32_t hdr, const uint32_t *blocks, uint32_t n)
{
	c->rel_blocks[c->rel_nblocks++] = hdr;
	memcpy(c->rel_blocks + c->rel_nblocks, blocks, n * sizeof *blocks);
	c->rel_nblocks += n;
}

/*
 * Whether the commit of the checkpoint being written keeps the current
 * one as the previous: while the spare blocks (usable beyond what the
 * format needs, blk_limits) hold a checkpoint's.  A device with fewer (a
 * small one formatted near its limit, or its reserves eaten by bad
 * blocks) keeps one checkpoint, as before there were two: a damaged one
 * then means a replay of the whole log.  O(1).
 */
static bool cp_prev_room(const struct ftl *f)
{
	uint32_t usable = f->nusable - f->ndoomed;
	return f->cp.cur_hdr_block != FTL_NO_BLOCK && usable >= f->min_usable + f->cp_reserve;
}

static void cp_commit_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	struct cp_state *c = &f->cp;
	if (f->error || op->status != NAND_OK) {
		c->phase = CP_FAILED;
		return;
	}
	/*
	 * The new checkpoint is current, the current one the previous (the
	 * superblock names both: sb_fill).  The one before that goes, but
	 * only once the superblock naming the new one is durable: on an image
	 * file the page may still be in the host's cache, and a host crash
	 * would bring back the superblock before, naming erased blocks (a
	 * replay of more log than kept, and trims older than it undone).
	 */
	c->rel_nblocks = 0;
	if (c->prev_hdr_block != FTL_NO_BLOCK)
		cp_rel_add(c, c->prev_hdr_block, c->prev_blocks, c->prev_nblocks);
	if (c->prev_keep) {
		c->prev_hdr_block = c->cur_hdr_block;
		c->prev_mirror = c->cur_mirror;
		c->prev_nblocks = c->cur_nblocks;
		memcpy(c->prev_blocks, c->cur_blocks, c->cur_nblocks * sizeof *c->cur_blocks);
		c->prev_seq = c->cur_seq;
	} else {
		if (c->cur_hdr_block != FTL_NO_BLOCK)
			cp_rel_add(c, c->cur_hdr_block, c->cur_blocks, c->cur_nblocks);
		c->prev_hdr_block = FTL_NO_BLOCK;
		c->prev_mirror = FTL_NO_BLOCK;
		c->prev_nblocks = 0;
		c->prev_seq = 0;
	}
	c->cur_hdr_block = c->hdr_block;
	c->cur_mirror = c->hdr_mirror;
	c->cur_nblocks = 0;
	for (uint32_t i = 1; i < cp_nall(c); i++)
		if (cp_block_at(c, i) != FTL_NO_BLOCK)
			c->cur_blocks[c->cur_nblocks++] = cp_block_at(c, i);
	c->cur_seq = c->cp_seq;
	c->pages_since = 0;
	c->attempts = 0;
	c->retired_attempts = 0;
	f->st.checkpoints++;
	if (nand_sync_start(f->dev, &c->sync_ticket) < 0) {
		ftl_fail(f, -EIO, "syncing the medium failed");
		return;
	}
	c->phase = CP_RELEASE;
}

/* Has the sync begun at cp.sync_ticket ended?  1 yes, 0 not yet, -1 it
 * failed (and so has the FTL). */
static int cp_synced(struct ftl *f)
{
	int r = nand_sync_poll(f->dev, f->cp.sync_ticket);
	if (r < 0)
		ftl_fail(f, -EIO, "syncing the medium failed");
	return r < 0 ? -1 : r > 0;
}

/* CP_RELEASE: once the superblock is durable, the blocks of the checkpoint
 * before the previous go to the eraser.  Returns 1 if it did. */
static int cp_release(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	int r = cp_synced(f);
	if (r <= 0)
		return r < 0; /* not yet: next_due brings the owner back */
	for (uint32_t i = 0; i < c->rel_nblocks; i++)
		blk_set_dirty(f, c->rel_blocks[i]);
	c->rel_nblocks = 0;
	/* the superblock on the media names these two now: what replay from
	 * the older needs is kept from here on, no more (GC) */
	c->keep_seq = c->prev_hdr_block != FTL_NO_BLOCK ? c->prev_seq : c->cur_seq;
	c->gen_durable = c->gen_writing;
	if (c->gen_durable >= c->gen_taken && !c->requested)
		c->urgent = false;
	c->phase = CP_IDLE;
	return 1;
}

static bool cp_may_submit(const struct cp_state *c)
{
	return c->nfree_idx &&
	       c->ops_in_flight < (c->clean || c->urgent ? c->nops : CP_OPS_SERVING);
}

uint64_t ftl_checkpoint_request(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	if (f->error || f->readonly)
		return 0;
	c->urgent = true;
	/* one still in QUIESCE takes its snapshot after this call: it will do */
	if (c->phase != CP_QUIESCE)
		c->requested = true;
	return c->gen_taken + 1;
}

int ftl_checkpoint_poll(struct ftl *f, uint64_t ticket)
{
	if (f->cp.gen_durable >= ticket)
		return 1;
	if (f->error)
		return f->error;
	if (f->readonly)
		return -EROFS;
	return 0;
}

bool cp_wants_poll(const struct ftl *f)
{
	const struct cp_state *c = &f->cp;
	return !f->error && !f->readonly && c->phase == CP_WRITE && !c->error &&
	       c->next_page < c->l2p_pages && cp_may_submit(c);
}

/* CP_QUIESCE: waiting for free blocks to write it to, then its cp_seq
 * and header taken.  Returns as cp_kick. */
static int cp_quiesce(struct ftl *f)
{
	struct cp_state *c = &f->cp;

	/*
	 * Invariant: after the clean checkpoint (ftl_close: everything
	 * durable, no flush of its own) replay from cp_seq rebuilds
	 * every trim.  It is fuzzy like any other, and replay maps again
	 * every unit with a page newer than cp_seq; an unmapping
	 * survives that only as a trim record, whose sequence number
	 * orders it after the writes and GC relocations it supersedes.
	 * A trim still pending is only in the l2p copied below, so a
	 * page of its unit between cp_seq and the trim came back after
	 * a restart.  So the pending trims go into a record first: it
	 * is still buffered when cp_seq is taken, so it is newer, and
	 * like the buffered writes it is programmed before close ends.
	 */
	if (c->clean && f->ntrim_pend && !trim_close_record(f))
		return 0; /* no slot or page yet: as for blocks below */
	if (!cp_alloc_blocks(f))
		return 0; /* the eraser is making blocks free */
	c->cp_seq = cp_durable_seq(f);
	c->l2p_pages = cp_l2p_pages(f);
	int rc = cp_build_header(f);
	if (rc < 0) {
		/* give the blocks back; try again later */
		cp_give_back(f);
		c->phase = CP_IDLE;
		c->requested = true;
		if (rc == -EAGAIN)
			return 1; /* more blocks to scan than listed: after some drain */
		if (++c->attempts > 3)
			ftl_fail(f, -ENOMEM, "no memory for a checkpoint header, three times");
		else
			ftl_log(FTL_LOG_WARNING, "no memory for the checkpoint header; "
				"retrying later");
		return 1;
	}
	c->next_page = 0;
	c->pages_done = 0;
	c->error = 0;
	c->gen_writing = ++c->gen_taken;
	c->phase = CP_WRITE;
	c->upage_sealed = false;
	return 1;
}

/* CP_WRITE: its pages submitted, as many as may be now; once all are
 * programmed, the sync started.  Returns as cp_kick. */
static int cp_write(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	int n = 0;

	/*
	 * The l2p pages in map order, those with no mapped unit left
	 * out (a fresh or mostly empty ioDimm writes and loads little),
	 * then the header, which says which were written.  Looking
	 * at an empty page costs a pass over its entries (~0.1 us a
	 * KiB); at most CP_SKIP_MAX of them per call, so a nearly empty
	 * map does not hold up host I/O: cp_wants_poll asks the owner
	 * to call again at once.
	 */
	uint32_t per_page = f->page_size / sizeof(uint32_t), skipped = 0;
	uint32_t hdr_total = c->hdr_pages * (c->hdr_mirror != FTL_NO_BLOCK ? 2 : 1);
	uint32_t all_total = hdr_total + c->wear_pages;
	while (!c->error && cp_may_submit(c)) {
		if (c->par_pending) {
			/* a stripe is complete: its parity before the
			 * next page reuses the accumulator */
			cp_submit_parity(f);
			n++;
			continue;
		}
		if (c->next_page == c->l2p_pages || skipped == CP_SKIP_MAX)
			break;
		uint32_t i = c->next_page++;
		uint64_t first = (uint64_t)i * per_page;
		uint64_t cnt = f->units - first < per_page ? f->units - first : per_page;
		if (l2p_range_unmapped(&f->l2p[first], cnt)) {
			skipped++;
			continue;
		}
		cp_submit_l2p(f, i);
		n++;
	}
	if (!c->error && c->next_page == c->l2p_pages && !c->sealed) {
		if (c->pacc_open)
			c->par_pending = true; /* the last stripe, maybe partial */
		cp_seal_header(f);
	}
	if (!c->error && c->par_pending && cp_may_submit(c)) {
		cp_submit_parity(f);
		n++;
	}
	while (!c->error && c->sealed && !c->par_pending && c->hdr_next < all_total &&
	       cp_may_submit(c)) {
		uint32_t k = c->hdr_next++;
		if (k < hdr_total) {
			cp_submit_hdr(f, k);
		} else {
			/* the counts as of now, every erase issued so far
			 * in; the closing checkpoint's are final: no erase
			 * is issued after them (eraser_kick) */
			if (k == hdr_total) {
				cp_fill_wear(f, c->wear_pages);
				c->wear_final = c->clean;
			}
			cp_submit_wear(f, k - hdr_total);
		}
		n++;
	}
	bool submitted = c->sealed && !c->par_pending && c->hdr_next == all_total;
	if ((submitted || c->error) && c->ops_in_flight && f->upp > 1 && !c->upage_sealed) {
		/* nothing more goes into its blocks: their last NAND pages
		 * are programmed as they are */
		c->upage_sealed = true;
		upage_seal(f->dev, c->hdr_block);
		for (uint32_t k = 0; k < c->nblocks; k++)
			upage_seal(f->dev, c->blocks[k]);
	}
	if ((submitted || c->error) && !c->ops_in_flight) {
		if (c->error) {
			cp_abort(f);
			return 1;
		}
		/*
		 * Invariant: every unmapping in the l2p pages copied is
		 * in a durable trim record before the superblock names
		 * this checkpoint.  A trim still pending when its page
		 * was copied is in this checkpoint only; if the open
		 * finds it damaged, the previous one and the log after
		 * it are loaded, and without the record its units read
		 * their old data again, after an open had read them as
		 * trimmed (contract rule 6).  So the pending trims go
		 * into a record now and the commit waits for it (and
		 * any record before it) to be programmed; no wait
		 * while nothing was trimmed since the last one was.
		 * The record may take the last free block (floor 0,
		 * as for a GC victim's): the pool may be waiting for
		 * this commit to release the blocks of the checkpoint
		 * before the previous.
		 */
		if (f->ntrim_pend && !trim_close_record_floor(f, 0))
			return n; /* no slot or page yet: the ring drains */
		if (f->stream[STREAM_USER].ring.done < f->trim_rec_end)
			return n; /* its program completing calls again */
		/* the pages must be durable before the superblock names
		 * them; the sync runs beside host I/O (on an image file
		 * it can take seconds) */
		if (nand_sync_start(f->dev, &c->sync_ticket) < 0) {
			ftl_fail(f, -EIO, "syncing the medium failed");
			return 1;
		}
		c->phase = CP_SYNC;
		return n + 1;
	}
	return n;
}

/* CP_SYNC: once the pages are durable, the superblock update that
 * commits it.  Returns as cp_kick. */
static int cp_sync(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	int r = cp_synced(f);
	if (r <= 0)
		return r < 0; /* not yet: next_due brings the owner back */
	c->phase = CP_COMMIT;
	c->prev_keep = cp_prev_room(f);
	if (sb_start_write(f, c->clean, cp_commit_done) < 0)
		ftl_fail(f, -EIO, "superblock busy during a checkpoint");
	return 1;
}

int cp_kick(struct ftl *f)
{
	struct cp_state *c = &f->cp;

	if (f->readonly || f->error)
		return 0;
	switch (c->phase) {
	case CP_IDLE:
		if (!f->opened)
			return 0;
		if (!c->requested && f->cp_interval && c->pages_since >= f->cp_interval)
			c->requested = true;
		if (!c->requested)
			return 0;
		c->requested = false;
		/* the one before was not the last (a close that came while a
		 * periodic one was being written, or a request during the
		 * closing one): the eraser makes this one's blocks free */
		c->wear_final = false;
		c->phase = CP_QUIESCE;
		return 1;
	case CP_QUIESCE: /* waiting for free blocks to write it to */
		return cp_quiesce(f);
	case CP_WRITE:
		return cp_write(f);
	case CP_SYNC:
		return cp_sync(f);
	case CP_RELEASE:
		return cp_release(f);
	case CP_COMMIT:
	case CP_FAILED:
		return 0;
	}
	return 0;
}

/*
 * At open, once blk_limits knows the reserves: a previous checkpoint that
 * cp_keep_prev kept on a device whose spare blocks no longer hold one
 * (bad blocks found since the last commit, doomed blocks retired at open)
 * is given up, as that commit would have decided (cp_prev_room):
 * otherwise the first checkpoint of the session holds a third checkpoint's
 * blocks, cp_reserve below the floor blk_limits counts on.  Its blocks go
 * the way a commit's releases go: the open's superblock update (step
 * "mark open") no longer names it, and once that is durable cp_release
 * sends them to the eraser (cp_open_release).  O(its blocks).
 */
void cp_open_room(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	if (f->readonly || c->prev_hdr_block == FTL_NO_BLOCK || cp_prev_room(f))
		return;
	ftl_log(FTL_LOG_WARNING, "the previous checkpoint (block %u) is not kept: the spare blocks (%u usable, "
		"%u needed) no longer hold a second checkpoint; a damaged current one would "
		"mean a replay of the whole log", c->prev_hdr_block, f->nusable - f->ndoomed,
		f->min_usable + f->cp_reserve);
	c->rel_nblocks = 0;
	cp_rel_add(c, c->prev_hdr_block, c->prev_blocks, c->prev_nblocks);
	c->prev_hdr_block = FTL_NO_BLOCK;
	c->prev_mirror = FTL_NO_BLOCK;
	c->prev_nblocks = 0;
	c->prev_seq = 0;
}

/* After the open's superblock update: what cp_open_room gave up is
 * released once that update is durable (CP_RELEASE). */
int cp_open_release(struct ftl *f)
{
	struct cp_state *c = &f->cp;
	if (!c->rel_nblocks)
		return 0;
	if (nand_sync_start(f->dev, &c->sync_ticket) < 0)
		return -EIO;
	c->phase = CP_RELEASE;
	return 0;
}
