/*
 * ftl/recovery.c - rebuilding the map at open.
 *
 * Input: the l2p of the current checkpoint (or all unmapped), cp_seq, the
 * blocks that were open at cp_seq.  Steps:
 *   1. read the spare of page 0 of every block: erased -> free; another
 *      format, an old checkpoint or garbage -> dirty; a log block whose
 *      first page is newer than cp_seq (or that was open at cp_seq) -> scan;
 *      an older log block -> closed as it is
 *   2. for the blocks to scan: read the footer (P2L) of each; a block whose
 *      footer is valid contributes its entries, any other has every spare
 *      read; keep the log pages newer than cp_seq (torn and unreadable
 *      pages are skipped: they were never acknowledged)
 *   3. apply them in sequence order: data pages map their unit, trim
 *      records unmap (or mark lost) their ranges
 *   4. count valid pages per block from the l2p; a unit mapped into a block
 *      that holds no log is reported lost; lost units are counted
 *   5. final block states; the checkpoint's doomed and refresh lists
 *      applied; stripes a crash cut get their parity; dead dies declared
 * Memory: 16 bytes per replayed page (bounded by the checkpoint interval).
 * Time: one spare read per block, plus a footer read per block written
 * since cp_seq (ppb spare reads for the few without one: open at the
 * crash).  Blocks are visited die-interleaved, so the reads in flight
 * spread over all dies.
 */
#include <errno.h>
#include <time.h>

#include "ftl/ftl_int.h"

/* ---- classification ----------------------------------------------------- */

enum rclass {
	RC_NONE,        /* bad or metadata: not looked at */
	RC_FREE,
	RC_DIRTY,
	RC_DATA,        /* log block older than the checkpoint */
	RC_SCAN,        /* log block with pages newer than the checkpoint */
	RC_UNREADABLE,  /* first page unreadable: kept if the l2p uses it */
};

struct rentry {
	uint64_t seq;
	uint32_t ppa;   /* | FROM_FOOTER: listed by a footer, not read */
	uint32_t lba;   /* TRIM_LBA for trim records */
};
#define TRIM_LBA 0xFFFFFFFFu
#define FROM_FOOTER 0x80000000u

struct rctx {
	uint8_t *cls;
	uint32_t *list;       /* blocks to look at */
	uint32_t nlist;
	struct rentry *ent;
	size_t nent, cap;
	int error;
	/* footers being read: pages of one block arrive in a row */
	uint8_t *foot_buf, *foot_spares;
	uint8_t *no_footer;   /* [nblocks]: scan its spares */
	/* [nblocks]: oldest log page of a block looked at whole (blk_min_seq),
	 * 0 once a page of it could not be read */
	uint64_t *min_seq;
	/* page-0 reads per die, and how many failed: a die where all failed
	 * is dead */
	uint32_t *die_reads, *die_fails;
	uint8_t *dead;        /* [ndies] 1: every read failed, 2: the superblock
	                       * says so (declared dead before) */
	uint64_t units;
	/* parity: pages the spare scan could not read (not on a dead die),
	 * whose spares are rebuilt from their stripes afterwards */
	uint32_t *unread;
	size_t nunread, unread_cap;
};

static int rentry_add(struct rctx *x, uint64_t seq, uint32_t ppa, uint32_t lba)
{
	if (x->nent == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 4096;
		struct rentry *e = realloc(x->ent, cap * sizeof *e);
		if (!e) {
			x->error = -ENOMEM;
			return -ENOMEM;
		}
		x->ent = e;
		x->cap = cap;
	}
	x->ent[x->nent++] = (struct rentry){ seq, ppa, lba };
	return 0;
}

static void foot_setup(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct rctx *x = ctx;
	op->block = x->list[i / f->footer_pages];
	op->page = f->data_pages + (uint32_t)(i % f->footer_pages);
}

static void foot_result(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct rctx *x = ctx;
	uint32_t k = (uint32_t)(i % f->footer_pages), b = op->block;
	if (op->status != NAND_OK && op->status != NAND_CORRECTED)
		x->no_footer[b] = 1;
	memcpy(x->foot_buf + (size_t)k * f->page_size, op->data, f->page_size);
	memcpy(x->foot_spares + (size_t)k * f->spare_size, op->spare, f->spare_size);
	if (k + 1 < f->footer_pages)
		return;
	const struct ftl_footer_entry *e;
	if (x->no_footer[b] || footer_parse(f, b, x->foot_buf, x->foot_spares, &e) != 0) {
		x->no_footer[b] = 1;
		return;
	}
	for (uint32_t p = 0; p < f->data_pages; p++)
		if (e[p].lba != FTL_FOOTER_NONE && e[p].seq < x->min_seq[b])
			x->min_seq[b] = e[p].seq;
	for (uint32_t p = 0; p < f->data_pages; p++) {
		if (e[p].lba == FTL_FOOTER_NONE || e[p].seq <= f->cp.cur_seq)
			continue;
		if (e[p].lba != FTL_FOOTER_TRIM && e[p].lba >= f->units)
			continue;
		if (rentry_add(x, e[p].seq, ppa_make(f, b, p) | FROM_FOOTER,
			       e[p].lba == FTL_FOOTER_TRIM ? TRIM_LBA : e[p].lba))
			return;
	}
}

static int rentry_add_cb(void *ctx, uint64_t seq, uint32_t ppa, uint8_t type, uint32_t lba)
{
	struct rctx *x = ctx;
	if (type == FTL_PG_DATA && lba >= x->units)
		return 0;
	return rentry_add(x, seq, ppa, type == FTL_PG_TRIM ? TRIM_LBA : lba);
}

static void first_setup(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct rctx *x = ctx;
	op->block = x->list[i];
	op->page = 0;
	op->data = NULL;
}

static void first_result(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct rctx *x = ctx;
	uint32_t b = op->block;
	bool cp_open = f->blk[b].flags & BLKF_CP_OPEN;
	struct ftl_spare sp;

	x->die_reads[block_die(f, b)]++;
	if (op->status != NAND_OK && op->status != NAND_CORRECTED) {
		/* later pages may still be readable and newer than the checkpoint */
		x->cls[b] = RC_SCAN;
		x->die_fails[block_die(f, b)]++;
		return;
	}
	int rc = spare_parse(f, op->spare, &sp);
	bool fresh = false; /* erased, or written only since cp_seq */
	if (rc == -ENODATA) {
		x->cls[b] = RC_FREE;
		fresh = true;
	} else if (rc != 0 ||
		 (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM && sp.type != FTL_PG_PARITY &&
		  sp.type != FTL_PG_PPL)) {
		x->cls[b] = RC_DIRTY;
	} else if (sp.seq > f->cp.cur_seq || cp_open) {
		x->cls[b] = RC_SCAN;
		fresh = sp.seq > f->cp.cur_seq;
	} else {
		x->cls[b] = RC_DATA;
	}
	/*
	 * After a crash, the erase counts are the checkpoint's: a block fresh
	 * now that held older data when they were laid out (its bit clear in
	 * their map) was erased since, once at least.  Each block's count is
	 * then at most its erases since the checkpoint - 1 behind, never
	 * ahead.  Without the map (counts from a checkpoint without them),
	 * a block written since counts one erase (one too many if it was
	 * free at it).  A clean close issues no erase after its counts.
	 */
	const uint32_t *map = f->cp.load_fresh;
	if (fresh && !f->was_clean &&
	    (map ? !(map[b / 32] & (1u << (b % 32))) : x->cls[b] == RC_SCAN && !cp_open))
		blk_erase_counted(f, b);
}

/* page i / nlist of block i % nlist: consecutive reads on different dies */
static void scan_setup(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct rctx *x = ctx;
	op->block = x->list[i % x->nlist];
	op->page = (uint32_t)(i / x->nlist);
	op->data = NULL;
}

static void scan_result(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct rctx *x = ctx;
	struct ftl_spare sp;
	if (op->status != NAND_OK && op->status != NAND_CORRECTED) {
		x->min_seq[op->block] = 0;
		/* torn (never acknowledged) or unreadable: with parity, its
		 * stripe may still say what it held (unread_rebuild) */
		if (f->parity && !x->dead[block_die(f, op->block)] && op->page < f->data_pages) {
			if (x->nunread == x->unread_cap) {
				size_t cap = x->unread_cap ? 2 * x->unread_cap : 256;
				uint32_t *u = realloc(x->unread, cap * sizeof *u);
				if (!u) {
					x->error = -ENOMEM;
					return;
				}
				x->unread = u;
				x->unread_cap = cap;
			}
			x->unread[x->nunread++] = ppa_make(f, op->block, op->page);
		}
		return;
	}
	if (spare_parse(f, op->spare, &sp) != 0)
		return;
	if (sp.seq < x->min_seq[op->block])
		x->min_seq[op->block] = sp.seq;
	if (sp.seq <= f->cp.cur_seq)
		return;
	if (sp.type == FTL_PG_DATA && sp.lba >= f->units)
		return;
	if (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM)
		return;
	rentry_add(x, sp.seq, ppa_make(f, op->block, op->page),
		   sp.type == FTL_PG_TRIM ? TRIM_LBA : sp.lba);
}

/* Band bi is marked for refresh once recovery has classified the blocks
 * (with those the checkpoint lists).  0 or -ENOMEM. */
static int refresh_after_open(struct ftl *f, uint32_t bi)
{
	struct cp_state *c = &f->cp;
	for (uint32_t i = 0; i < c->nload_refresh; i++)
		if (c->load_refresh[i] == bi)
			return 0;
	uint32_t *l = realloc(c->load_refresh, (c->nload_refresh + 1) * sizeof *l);
	if (!l)
		return -ENOMEM;
	l[c->nload_refresh++] = bi;
	c->load_refresh = l;
	return 0;
}

/*
 * Pages newer than the checkpoint that read uncorrectable at the scan (a
 * page gone bad since it was written) would be left out of the replay, and
 * their units keep an older mapping, maybe into a block erased since (EIO,
 * t_ftl_model seed 6): their spares are rebuilt from their stripes' parity
 * and replayed like the rest.  A page whose program was cut, or failed,
 * after its stripe's parity was computed is rebuilt too (the parity holds
 * what it was to hold).  Either way the stripe has a member less on the
 * media than its parity counts: the band is marked for refresh (a crash
 * after a program failed, before the checkpoint that lists the band).  A
 * torn page no parity covers stays out.  Synchronous: row width reads per
 * page, only for the pages that failed.  0, or -ENOMEM.
 */
static int unread_rebuild(struct ftl *f, struct rctx *x)
{
	if (!x->nunread)
		return 0;
	uint8_t *page = aligned_alloc(4096, f->page_size);
	uint8_t *spare = malloc(f->spare_size);
	uint32_t found = 0;
	int rc = 0;
	if (!page || !spare) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < x->nunread; i++) {
		struct ftl_spare sp;
		uint32_t ppa = x->unread[i];
		if (par_rebuild_sync(f, ppa, page, spare) != 0)
			continue; /* (a power cut: open fails at its next write) */
		if (spare_parse(f, spare, &sp) != 0 || sp.seq <= f->cp.cur_seq ||
		    sp.data_crc != crc32c(0, page, f->page_size) ||
		    (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM) ||
		    (sp.type == FTL_PG_DATA && sp.lba >= f->units))
			continue;
		rc = rentry_add(x, sp.seq, ppa, sp.type == FTL_PG_TRIM ? TRIM_LBA : sp.lba);
		if (!rc)
			rc = refresh_after_open(f, block_band(f, ppa_block(f, ppa)));
		if (rc)
			goto out;
		found++;
	}
	if (found)
		ftl_log(FTL_LOG_NOTICE, "recovery: %u unreadable log pages newer than the checkpoint rebuilt from "
			"parity", found);
out:
	free(page);
	free(spare);
	return rc;
}

/* unit u is lost (L2P_LOST): counted, its range widened */
static void lost_note(struct ftl *f, uint64_t u)
{
	f->st.lost_units++;
	if (u < f->st.lost_first)
		f->st.lost_first = u;
	if (u > f->st.lost_last)
		f->st.lost_last = u;
}

static int rentry_cmp(const void *a, const void *b)
{
	const struct rentry *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * Die d found dead at open after a crash.  What it held since the
 * checkpoint is found only through parity pages; without parity, or in
 * stripes the crash cut (their parity was still in memory; the bands of
 * the blocks cut[], open at the crash, with a member on d: an upper
 * bound, as a dead die's pages cannot tell written from erased) when
 * flushes write no partial parity (flush_parity = off), nothing on the
 * other dies names those units, and they may read an older version
 * (doc/ftl.md, "the double fault").  Not repairable here: said where the
 * admin looks (log, status notes).  With partial parity only unflushed
 * writes are lost, which the durability contract allows: logged only.
 */
static void dead_after_crash(struct ftl *f, uint32_t d, const uint32_t *cut, uint32_t ncut)
{
	uint32_t nbands = 0;
	for (uint32_t i = 0; i < ncut; i++) {
		uint32_t bi = block_band(f, cut[i]);
		for (uint32_t c = 0; c < f->row_width; c++)
			if (block_die(f, band_block(f, bi, c)) == d) {
				nbands++;
				break;
			}
	}
	if (f->parity && !nbands)
		return;
	if (f->parity && f->flush_ppl) {
		/* every flush wrote partial parity into the stripes still
		 * open: what is lost on it was never flushed */
		ftl_log(FTL_LOG_WARNING, "die %u dead at open after an unclean shutdown: %u band(s) open at the "
			"crash with a member on it; flushed pages there rebuilt from partial parity",
			d, nbands);
		return;
	}
	char what[160];
	if (f->parity)
		snprintf(what, sizeof what, "%u block(s) open at the crash in bands with a member "
			 "on it, their last stripes without parity", nbands);
	else
		snprintf(what, sizeof what, "no parity");
	ftl_log(FTL_LOG_ERR, "die %u dead at open after an unclean shutdown (%s): units whose newest version "
		"it held since the last checkpoint may read an older version", d, what);
	size_t n = strlen(f->info.notes);
	snprintf(f->info.notes + n, sizeof f->info.notes - n,
		 "%sdie %u dead after a crash: writes since the last checkpoint may read older data",
		 n ? "; " : "", d);
}

/* The working memory of one recovery; released by rctx_free.  0 or
 * -ENOMEM (what was allocated is then released by rctx_free too). */
static int rctx_alloc(struct ftl *f, struct rctx *x)
{
	x->cls = calloc(f->nblocks, 1);
	x->list = malloc(sizeof(uint32_t) * f->nblocks);
	x->no_footer = calloc(f->nblocks, 1);
	x->foot_buf = aligned_alloc(4096, (size_t)f->footer_pages * f->page_size);
	x->foot_spares = malloc((size_t)f->footer_pages * f->spare_size);
	x->die_reads = calloc(f->ndies, sizeof *x->die_reads);
	x->die_fails = calloc(f->ndies, sizeof *x->die_fails);
	x->dead = calloc(f->ndies, 1);
	x->min_seq = malloc(f->nblocks * sizeof *x->min_seq);
	x->units = f->units;
	if (!x->cls || !x->list || !x->no_footer || !x->foot_buf || !x->foot_spares || !x->die_reads ||
	    !x->die_fails || !x->dead || !x->min_seq)
		return -ENOMEM;
	for (uint32_t b = 0; b < f->nblocks; b++)
		x->min_seq[b] = UINT64_MAX;
	return 0;
}

static void rctx_free(struct rctx *x)
{
	free(x->cls);
	free(x->list);
	free(x->ent);
	free(x->no_footer);
	free(x->foot_buf);
	free(x->foot_spares);
	free(x->die_reads);
	free(x->die_fails);
	free(x->dead);
	free(x->min_seq);
	free(x->unread);
}

/* Step 1: page 0 of every block that is neither bad nor a superblock
 * block, die-interleaved; first_result classifies each.  0 or -errno. */
static int read_first_pages(struct ftl *f, struct rctx *x)
{
	for (uint32_t i = 0; i < f->nblocks; i++) {
		uint32_t b = (i % f->ndies) * f->blocks_per_die + i / f->ndies;
		struct blk *k = &f->blk[b];
		if (nand_factory_bad(f->dev, b))
			blk_mark_initial(f, b, BLK_BAD, false);
		/* a superblock block the checkpoint lists as grown bad stays
		 * bad (the superblock goes on in the other; counting it as
		 * usable again raised the reserves at every restart) */
		if ((b == f->sb_block[0] || b == f->sb_block[1]) && k->state != BLK_BAD)
			blk_mark_initial(f, b, BLK_META, false);
		if (k->state == BLK_BAD || k->state == BLK_META)
			continue;
		x->list[x->nlist++] = b;
	}
	return read_batch(f, x->nlist, 1024, first_setup, first_result, x);
}

/* A die none of whose blocks could be read: dead.  Its blocks are not
 * scanned (every read fails).  With parity, the log pages on it newer
 * than the checkpoint are found through their stripes' parity, which
 * carries their spares; without, they are gone, and the units they
 * held read what the checkpoint and the other dies' log say (their
 * pages on the dead die fail with EIO, and become lost units at GC).
 * dead_dies: the superblock's bitmap.  0 or -errno. */
static int find_dead_dies(struct ftl *f, struct rctx *x, const uint8_t *dead_dies)
{
	for (uint32_t d = 0; d < f->ndies; d++) {
		/* declared dead before: the superblock keeps it */
		bool known = d < FTL_SB_DEAD_DIES && (dead_dies[d / 8] & (1u << (d % 8)));
		if (x->die_reads[d] < 2 || x->die_fails[d] != x->die_reads[d]) {
			/* dead still if known, even with nothing on it read
			 * (every block retired, or but a superblock block, which
			 * is not read here); without the superblock's word (one
			 * written before it kept dead dies), if every block of
			 * it is retired */
			uint32_t nbad = 0;
			for (uint32_t i = 0; !known && !x->die_reads[d] && i < f->blocks_per_die; i++)
				nbad += f->blk[d * f->blocks_per_die + i].state == BLK_BAD;
			if (known || nbad == f->blocks_per_die)
				x->dead[d] = 2;
			continue;
		}
		x->dead[d] = known ? 2 : 1;
		for (uint32_t i = 0; i < f->blocks_per_die; i++) {
			uint32_t b = d * f->blocks_per_die + i;
			if (x->cls[b] == RC_SCAN)
				x->cls[b] = RC_UNREADABLE;
		}
		if (!f->parity)
			continue;
		int rc = par_recover_dead_spares(f, d, rentry_add_cb, x);
		if (!rc)
			rc = x->error;
		if (rc)
			return rc;
	}
	return 0;
}

/* Step 2: the blocks written since the checkpoint: footers, then the
 * spares of those without one, then the unreadable pages from parity.
 * Leaves x->list holding the blocks without a footer.  0 or -errno. */
static int scan_since_checkpoint(struct ftl *f, struct rctx *x)
{
	uint32_t nscan = 0, nlist = x->nlist;
	for (uint32_t i = 0; i < nlist; i++)
		if (x->cls[x->list[i]] == RC_SCAN)
			x->list[nscan++] = x->list[i];
	x->nlist = nscan;
	int rc = read_batch(f, (uint64_t)nscan * f->footer_pages, 1024, foot_setup, foot_result, x);
	if (!rc)
		rc = x->error;
	if (rc)
		return rc;
	uint32_t nspare = 0;
	for (uint32_t i = 0; i < nscan; i++)
		if (x->no_footer[x->list[i]])
			x->list[nspare++] = x->list[i];
	x->nlist = nspare;
	if (nspare)
		rc = read_batch(f, (uint64_t)nspare * f->ppb, 1024, scan_setup, scan_result, x);
	if (!rc)
		rc = x->error;
	if (!rc)
		rc = unread_rebuild(f, x);
	return rc;
}

/* One version in two places, x->ent[i..j) (same seq): a program that
 * failed and was retried elsewhere, both listed by footers; the page that
 * reads back as that version wins.  page, spare: scratch buffers.  The
 * winner, or NULL. */
static struct rentry *dup_winner(struct ftl *f, struct rctx *x, size_t i, size_t j, uint8_t *page,
				 uint8_t *spare)
{
	uint64_t seq = x->ent[i].seq;
	struct rentry *win = NULL;
	for (size_t k = i; k < j && !win; k++) {
		uint32_t ppa = x->ent[k].ppa & ~FROM_FOOTER;
		struct nand_op op = { .type = NAND_OP_READ, .block = ppa_block(f, ppa),
				      .page = ppa_page(f, ppa), .data = page, .spare = spare };
		enum nand_status st = nand_op_sync(f->dev, &op);
		struct ftl_spare sp;
		if ((st == NAND_OK || st == NAND_CORRECTED) && spare_parse(f, spare, &sp) == 0 &&
		    sp.seq == seq && sp.data_crc == crc32c(0, page, f->page_size))
			win = &x->ent[k];
	}
	return win;
}

/* The trim record e: read (or rebuilt from parity) and applied, or logged
 * as unreadable and ignored.  page, spare: scratch buffers. */
static void replay_trim(struct ftl *f, const struct rentry *e, uint8_t *page, uint8_t *spare)
{
	struct nand_op op = { .type = NAND_OP_READ, .block = ppa_block(f, e->ppa),
			      .page = ppa_page(f, e->ppa), .data = page, .spare = spare };
	enum nand_status st = nand_op_sync(f->dev, &op);
	struct ftl_spare sp;
	bool good = (st == NAND_OK || st == NAND_CORRECTED) &&
		    spare_parse(f, spare, &sp) == 0 &&
		    sp.data_crc == crc32c(0, page, f->page_size);
	if (!good && f->parity && par_rebuild_sync(f, e->ppa, page, spare) == 0)
		good = spare_parse(f, spare, &sp) == 0 && sp.type == FTL_PG_TRIM &&
		       sp.seq == e->seq && sp.data_crc == crc32c(0, page, f->page_size);
	if (good)
		trim_apply_record(f, page, e->seq);
	else
		ftl_log(FTL_LOG_WARNING, "trim record at page %u unreadable; ignored", e->ppa);
}

/* Step 3: the log entries found, applied in log order; sets next_seq.
 * 0 or -ENOMEM. */
static int replay_log(struct ftl *f, struct rctx *x)
{
	uint64_t max_seq = f->cp.cur_seq;
	if (x->nent)
		qsort(x->ent, x->nent, sizeof *x->ent, rentry_cmp);
	uint8_t *page = aligned_alloc(4096, f->page_size);
	uint8_t *spare = malloc(f->spare_size);
	if (!page || !spare) {
		free(page);
		free(spare);
		return -ENOMEM;
	}
	for (size_t i = 0; i < x->nent; i++) {
		struct rentry *e = &x->ent[i];
		if (i + 1 < x->nent && x->ent[i + 1].seq == e->seq) {
			size_t j = i;
			while (j < x->nent && x->ent[j].seq == e->seq)
				j++;
			struct rentry *win = dup_winner(f, x, i, j, page, spare);
			if (win)
				*e = *win;
			i = j - 1;
			if (!win)
				continue;
		}
		e->ppa &= ~FROM_FOOTER;
		if (e->lba != TRIM_LBA)
			f->l2p[e->lba] = e->ppa;
		else
			replay_trim(f, e, page, spare);
		if (e->seq > max_seq)
			max_seq = e->seq;
	}
	free(page);
	free(spare);
	f->next_seq = max_seq + 1;
	f->info.recovered_pages = x->nent;
	return 0;
}

/* Step 4: valid counts; units mapped into blocks without log data are
 * lost.  Every lost unit is counted, with its range: the map keeps them
 * (checkpoints, loss records), and they read EIO after any restart, so
 * status says so too. */
static void count_valid(struct ftl *f, struct rctx *x)
{
	uint64_t lost = 0;
	for (uint64_t u = 0; u < f->units; u++) {
		uint32_t e = f->l2p[u];
		if (e == L2P_UNMAPPED)
			continue;
		if (e == L2P_LOST) {
			lost_note(f, u);
			continue;
		}
		/* no write buffer exists yet: an entry that looks like a slot
		 * (or a page past the data pages) came from a damaged map */
		uint32_t b = l2p_is_ppa(e) && e < f->nblocks * f->ppb ? ppa_block(f, e) : FTL_NO_BLOCK;
		if (b == FTL_NO_BLOCK || ppa_page(f, e) >= f->data_pages ||
		    (x->cls[b] != RC_DATA && x->cls[b] != RC_SCAN && x->cls[b] != RC_UNREADABLE) ||
		    f->blk[b].valid >= f->data_pages) {
			/* (more units than pages in one block: a damaged map
			 * maps some twice; the count indexes GC's buckets) */
			f->l2p[u] = L2P_LOST;
			lost_note(f, u);
			lost++;
			continue;
		}
		f->blk[b].valid++;
	}
	if (lost) {
		ftl_log(FTL_LOG_ERR, "%llu units point at blocks without data; they read as errors "
			"until rewritten (restore them from a copy)",
			(unsigned long long)lost);
		size_t n = strlen(f->info.notes);
		snprintf(f->info.notes + n, sizeof f->info.notes - n, "%s%llu units lost (read as errors)",
			 n ? "; " : "", (unsigned long long)lost);
	}
}

/* Step 5: final states of the blocks, from their class (bands follow
 * their members from here on). */
static void set_block_states(struct ftl *f, struct rctx *x)
{
	band_start(f);
	f->nusable = 0;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		struct blk *k = &f->blk[b];
		k->next = k->prev = FTL_NO_BLOCK;
		if (k->state == BLK_BAD) {
			f->nbad++;
			if (k->flags & BLKF_GROWN_BAD)
				f->nbad_grown++;
			continue;
		}
		f->nusable++;
		if (k->state == BLK_META)
			continue;
		switch (x->cls[b]) {
		case RC_FREE:
			blk_set_free(f, b);
			break;
		case RC_DATA:
		case RC_SCAN:
			blk_set_closed(f, b);
			/* read whole: the oldest page is known (an older block's
			 * page 0 is not its oldest when a program failed and was
			 * retried into it: unknown) */
			f->blk_min_seq[b] = x->cls[b] == RC_SCAN ? x->min_seq[b] : 0;
			break;
		case RC_UNREADABLE:
			f->blk_min_seq[b] = 0;
			if (k->valid)
				blk_set_closed(f, b);
			else
				blk_set_dirty(f, b);
			break;
		default:
			blk_set_dirty(f, b);
			break;
		}
		k->flags &= (uint8_t)~BLKF_CP_OPEN;
	}
}

/* The block lists the checkpoint carried, applied to the final states and
 * released: blocks listed as doomed (a program failed, not retired at the
 * close) are retired now, through GC when they hold data; bands listed as
 * marked for refresh are marked again (through a member that is not a
 * superblock block). */
static void apply_checkpoint_lists(struct ftl *f)
{
	for (uint32_t i = 0; i < f->cp.nload_doomed; i++) {
		uint32_t b = f->cp.load_doomed[i];
		uint8_t st = f->blk[b].state;
		if (st == BLK_CLOSED) {
			blk_set_retiring(f, b);
			blist_push(f, &f->retire, b);
		} else if (st == BLK_FREE || st == BLK_DIRTY) {
			blk_set_bad(f, b, true);
		}
	}
	free(f->cp.load_doomed);
	f->cp.load_doomed = NULL;
	f->cp.nload_doomed = 0;
	free(f->cp.load_fresh);
	f->cp.load_fresh = NULL;
	for (uint32_t i = 0; i < f->cp.nload_refresh; i++) {
		uint32_t bi = f->cp.load_refresh[i];
		for (uint32_t c = 0; c < f->row_width; c++) {
			uint32_t b = band_block(f, bi, c);
			if (f->blk[b].state == BLK_CLOSED || f->blk[b].state == BLK_OPEN) {
				band_flag_refresh(f, b, NULL);
				break;
			}
		}
	}
	free(f->cp.load_refresh);
	f->cp.load_refresh = NULL;
	f->cp.nload_refresh = 0;
}

/* Parity: stripes cut short by a crash have no parity page (a clean close
 * programs the parity of the last, partial ones): programmed now, from the
 * pages that made it (a band where that fails is refreshed: GC moves its
 * data into protected stripes first).  Then the dead dies are declared.
 * x->list is reused for the blocks cut by the crash.  0 or -errno. */
static int finish_cut_stripes_and_dead_dies(struct ftl *f, struct rctx *x)
{
	int rc = 0;
	uint32_t ncut = 0;
	if (f->parity) {
		uint32_t done = 0;
		for (uint32_t b = 0; b < f->nblocks; b++)
			if (x->cls[b] == RC_SCAN && x->no_footer[b] && f->blk[b].state == BLK_CLOSED)
				x->list[ncut++] = b;
		rc = par_recover(f, x->list, ncut, &done);
		if (done)
			ftl_log(FTL_LOG_NOTICE, "parity: %u bands open at the crash had stripes without parity: "
				"programmed it", done);
	}
	for (uint32_t d = 0; !rc && d < f->ndies; d++) {
		if (!x->dead[d])
			continue;
		if (!f->was_clean && x->dead[d] == 1)
			dead_after_crash(f, d, x->list, ncut);
		die_declare_dead(f, d, "every block on it unreadable at open");
	}
	return rc;
}

/* The steps of the file comment, in order; the first failure ends the
 * run.  0 or -errno, with err set if it was empty. */
int recovery_run(struct ftl *f, const uint8_t *dead_dies, char *err, size_t errlen)
{
	struct rctx x = { 0 };
	int rc = rctx_alloc(f, &x);
	if (!rc)
		rc = read_first_pages(f, &x);
	if (!rc)
		rc = find_dead_dies(f, &x, dead_dies);
	if (!rc)
		rc = scan_since_checkpoint(f, &x);
	if (!rc)
		rc = replay_log(f, &x);
	if (!rc) {
		count_valid(f, &x);
		set_block_states(f, &x);
		apply_checkpoint_lists(f);
		rc = finish_cut_stripes_and_dead_dies(f, &x);
	}
	if (rc && err && !err[0])
		snprintf(err, errlen, "recovery failed: %s", strerror(-rc));
	rctx_free(&x);
	return rc;
}
