/*
 * ftl/block.c - erase block states, the lists they live on, allocation with
 * wear levelling, greedy victim choice, and erasing dirty blocks.
 *
 * Every block is on at most one list, threaded through blk[].next/prev:
 *   FREE     -> free_die[die]        (erased, ready to program)
 *   DIRTY    -> dirty                (stale; the eraser erases it)
 *   CLOSED   -> bucket[valid]        (GC candidates, by valid count)
 *   RETIRING -> retire               (GC collects it first, then retires it)
 * OPEN, VICTIM, ERASING, META and BAD blocks are on no list.
 * Costs: every transition is O(1); blk_alloc scans its die's free list
 * (short in steady state: GC keeps only a few blocks free).
 */
#include <errno.h>

#include "ftl/ftl_int.h"

void blist_init(struct blist *l)
{
	l->head = l->tail = FTL_NO_BLOCK;
	l->count = 0;
}

void blist_push(struct ftl *f, struct blist *l, uint32_t b)
{
	struct blk *k = &f->blk[b];
	k->next = FTL_NO_BLOCK;
	k->prev = l->tail;
	if (l->tail != FTL_NO_BLOCK)
		f->blk[l->tail].next = b;
	else
		l->head = b;
	l->tail = b;
	l->count++;
}

void blist_remove(struct ftl *f, struct blist *l, uint32_t b)
{
	struct blk *k = &f->blk[b];
	if (k->prev != FTL_NO_BLOCK)
		f->blk[k->prev].next = k->next;
	else
		l->head = k->next;
	if (k->next != FTL_NO_BLOCK)
		f->blk[k->next].prev = k->prev;
	else
		l->tail = k->prev;
	k->next = k->prev = FTL_NO_BLOCK;
	l->count--;
}

uint32_t blist_pop(struct ftl *f, struct blist *l)
{
	uint32_t b = l->head;
	if (b != FTL_NO_BLOCK)
		blist_remove(f, l, b);
	return b;
}

/* Take b off the list its state puts it on; pool counters follow. */
void blk_leave(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	switch (k->state) {
	case BLK_FREE:
		blist_remove(f, &f->free_die[block_die(f, b)], b);
		f->nfree--;
		break;
	case BLK_DIRTY:
		blist_remove(f, &f->dirty, b);
		f->nfree--;
		break;
	case BLK_ERASING:
		f->nfree--;
		break;
	case BLK_CLOSED:
		blist_remove(f, &f->bucket[k->valid], b);
		break;
	case BLK_RETIRING:
		/* on the retire list only while waiting for GC */
		if (k->next != FTL_NO_BLOCK || k->prev != FTL_NO_BLOCK || f->retire.head == b)
			blist_remove(f, &f->retire, b);
		break;
	case BLK_META:
		f->nmeta--;
		break;
	default:
		break;
	}
}

void blk_set_free(struct ftl *f, uint32_t b)
{
	blk_leave(f, b);
	f->blk[b].state = BLK_FREE;
	f->blk[b].wp = 0;
	f->blk[b].valid = 0;
	f->blk_max_seq[b] = 0;
	blist_push(f, &f->free_die[block_die(f, b)], b);
	f->nfree++;
}

void blk_set_dirty(struct ftl *f, uint32_t b)
{
	blk_leave(f, b);
	f->blk[b].state = BLK_DIRTY;
	f->blk[b].wp = 0;
	blist_push(f, &f->dirty, b);
	f->nfree++;
}

void blk_set_closed(struct ftl *f, uint32_t b)
{
	blk_leave(f, b);
	struct blk *k = &f->blk[b];
	f->blk_closed_at[b] = (uint32_t)f->write_clock;
	k->state = BLK_CLOSED;
	blist_push(f, &f->bucket[k->valid], b);
	if (k->valid < f->min_bucket)
		f->min_bucket = k->valid;
}

void blk_set_bad(struct ftl *f, uint32_t b, bool grown)
{
	struct blk *k = &f->blk[b];
	if (k->state == BLK_BAD)
		return;
	blk_leave(f, b);
	k->state = BLK_BAD;
	f->nbad++;
	f->nusable--;
	if (grown) {
		k->flags |= BLKF_GROWN_BAD;
		f->nbad_grown++;
	}
	if (f->min_usable && f->nusable < f->min_usable && !f->no_space) {
		f->no_space = true;
		ftl_log("out of spare blocks (%u usable, %u needed): writes now fail with ENOSPC",
			f->nusable, f->min_usable);
	}
}

void blk_invalidate(struct ftl *f, uint32_t ppa)
{
	uint32_t b = ppa_block(f, ppa);
	struct blk *k = &f->blk[b];
	if (k->state == BLK_CLOSED) {
		blist_remove(f, &f->bucket[k->valid], b);
		k->valid--;
		blist_push(f, &f->bucket[k->valid], b);
		if (k->valid < f->min_bucket)
			f->min_bucket = k->valid;
	} else {
		k->valid--;
	}
}

void blk_validate(struct ftl *f, uint32_t ppa)
{
	uint32_t b = ppa_block(f, ppa);
	struct blk *k = &f->blk[b];
	if (k->state == BLK_CLOSED) {
		blist_remove(f, &f->bucket[k->valid], b);
		k->valid++;
		blist_push(f, &f->bucket[k->valid], b);
	} else {
		k->valid++;
	}
}

/* Erased block of this die with the fewest erases among the ALLOC_LOOK
 * longest free (dynamic wear levelling; bounded: a die of a full-size
 * ioDimm has thousands of free blocks when it is young). */
#define ALLOC_LOOK 64
uint32_t blk_alloc(struct ftl *f, uint32_t die)
{
	struct blist *l = &f->free_die[die];
	uint32_t best = FTL_NO_BLOCK, best_ec = UINT32_MAX, looked = 0;
	for (uint32_t b = l->head; b != FTL_NO_BLOCK && looked++ < ALLOC_LOOK; b = f->blk[b].next) {
		uint32_t ec = nand_erase_count(f->dev, b);
		if (ec < best_ec) {
			best = b;
			best_ec = ec;
		}
	}
	if (best == FTL_NO_BLOCK)
		return best;
	blk_leave(f, best);
	f->blk[best].state = BLK_OPEN;
	f->blk[best].wp = 0;
	f->blk[best].valid = 0;
	f->blk[best].inflight = 0;
	return best;
}

/*
 * Cost-benefit (Rosenblum and Ousterhout): the CLOSED block that frees the
 * most space per page copied, weighted by age: (1 - u) / (1 + u) * age, u
 * its share of valid pages, age the user pages written since it closed.
 * Unlike greedy it also collects old blocks that are fairly full (cold
 * data), which keeps their free pages from being locked away forever under
 * a skewed workload; under a uniform one it chooses like greedy.  A die no
 * victim is examining on is preferred (die_busy[die] == 0), so victims'
 * reads run on different dies.
 * Cost: up to VICTIM_PER_BUCKET candidates from each valid-count bucket,
 * at most VICTIM_LOOK in all.
 */
#define VICTIM_PER_BUCKET 4
#define VICTIM_LOOK 512
uint32_t blk_victim_pick(struct ftl *f, const uint8_t *die_busy)
{
	uint32_t best = FTL_NO_BLOCK, looked = 0;
	double best_score = -1;
	bool first = true;
	for (uint32_t v = f->min_bucket; v < f->data_pages && looked < VICTIM_LOOK; v++) {
		if (!f->bucket[v].count)
			continue;
		if (first) {
			f->min_bucket = v;
			first = false;
		}
		uint32_t n = 0;
		for (uint32_t b = f->bucket[v].head; b != FTL_NO_BLOCK && n < VICTIM_PER_BUCKET;
		     b = f->blk[b].next, n++, looked++) {
			double age = (double)(uint32_t)((uint32_t)f->write_clock - f->blk_closed_at[b]) + 1;
			double score = (double)(f->data_pages - v) / (double)(f->data_pages + v) * age;
			if (die_busy && die_busy[block_die(f, b)])
				score *= 0.5;
			if (score > best_score) {
				best_score = score;
				best = b;
			}
		}
	}
	if (first)
		f->min_bucket = f->ppb;
	return best;
}

/* ---- eraser: dirty -> free --------------------------------------------- */

static void erase_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	uint32_t b = op->block;
	f->erase_free[f->nerase_free++] = (uint32_t)op->priv2;
	if (ftl_op_stops(f, op))
		return; /* stopped: the block stays ERASING, nothing is retired */
	f->st.blocks_erased++;
	if (op->status == NAND_OK) {
		blk_set_free(f, b);
	} else {
		f->st.erase_failures++;
		ftl_log("block %u: erase failed (%s), retired", b, nand_status_name(op->status));
		blk_set_bad(f, b, true);
	}
}

int eraser_kick(struct ftl *f)
{
	int n = 0;
	if (f->error || f->readonly)
		return 0;
	while (f->dirty.count && f->nerase_free) {
		uint32_t b = blist_pop(f, &f->dirty);
		f->blk[b].state = BLK_ERASING; /* still counted in nfree */
		uint32_t i = f->erase_free[--f->nerase_free];
		struct nand_op *op = &f->erase_ops[i];
		memset(op, 0, sizeof *op);
		op->type = NAND_OP_ERASE;
		op->block = b;
		op->done = erase_done;
		op->priv = f;
		op->priv2 = i;
		ftl_nand_submit(f, op);
		n++;
	}
	return n;
}

/*
 * Reserve thresholds, in free blocks (FREE + DIRTY + ERASING):
 *   gc_min   - below it only checkpoints and trim records allocate: one
 *              checkpoint's blocks, and one block for records
 *   user_min - below it host writes wait for GC: GC needs a block per die
 *   gc_start - GC runs (paced by host writes) while the pool is below it
 */
void blk_limits(struct ftl *f)
{
	f->cp_reserve = cp_blocks_needed(f);
	f->gc_min = f->cp_reserve + 2;
	/* GC can open a block per die (a second per die for cold survivors
	 * comes out of the same margin: it fills what it has first) */
	f->user_min = f->gc_min + f->ndies + 1;
	f->gc_start = f->user_min + f->ndies + 2;
	/* every unit mapped, the reserves, both streams' open blocks, superblocks */
	f->min_usable = (uint32_t)((f->units + f->data_pages - 1) / f->data_pages) + f->gc_start +
			2 * f->ndies + 2 + f->cp_reserve;
	if (f->nusable < f->min_usable && !f->no_space) {
		f->no_space = true;
		ftl_log("too few usable blocks (%u, %u needed): writes fail with ENOSPC",
			f->nusable, f->min_usable);
		return;
	}
	/*
	 * A checkpoint being written holds cp_reserve blocks until its commit
	 * frees the previous one's.  Where the spare blocks allow, the pool is
	 * kept that much higher, so host writes and GC go on meanwhile instead
	 * of waiting for the commit.
	 */
	uint32_t spare = f->nusable - f->min_usable;
	uint32_t headroom = f->cp_reserve < spare / 4 ? f->cp_reserve : spare / 4;
	f->user_min += headroom;
	f->gc_start += headroom;
}
