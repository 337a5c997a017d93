/*
 * ftl/die.c - dead dies (with or without parity): the run of failures per
 * die (die_note, from every operation's completion in writer.c, block.c,
 * gc.c, io.c, the parity files, checkpoint.c), declaring a die dead
 * (die_declare_dead, also at open by recovery.c) and the reverse map of
 * its pages for GC (dead_rmap_unit).  Owns f->die_bad_run,
 * f->die_bad_kinds, f->die_dead, f->ndead, f->dead_rmap and the probe read.
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

#define DIE_DEAD_RUN 16 /* failures in a row that declare a die dead */

int die_init(struct ftl *f)
{
	f->die_bad_run = ftl_alloc(f, f->ndies);
	f->die_dead = ftl_alloc(f, f->ndies);
	f->die_bad_kinds = ftl_alloc(f, f->ndies);
	f->probe_spare = ftl_alloc(f, f->spare_size);
	if (!f->die_bad_kinds || !f->probe_spare)
		return -ENOMEM;
	f->dead_rmap = ftl_alloc(f, f->ndies * sizeof *f->dead_rmap);
	if (!f->die_bad_run || !f->die_dead || !f->dead_rmap)
		return -ENOMEM;
	return 0;
}

uint32_t dead_rmap_unit(struct ftl *f, uint32_t ppa)
{
	uint32_t b = ppa_block(f, ppa);
	const uint32_t *m = f->dead_rmap[block_die(f, b)];
	if (!m)
		return UINT32_MAX;
	return m[(size_t)(b % f->blocks_per_die) * f->ppb + ppa_page(f, ppa)];
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
