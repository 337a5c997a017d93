/*
 * ftl/block.c - erase block and band states, the lists they live on,
 * allocation with wear levelling, cost-benefit victim choice, and erasing
 * dirty blocks.  Every change of a block's state is made in this file.
 *
 * Every block is on at most one list, threaded through blk[].next/prev:
 *   DIRTY    -> dirty                (stale; the eraser erases it)
 *   RETIRING -> retire               (GC collects it first, then retires it)
 * Bands (see struct band) are on the free list of their row or in the GC
 * bucket of their valid count, derived from their members' states by
 * band_sync after every block transition.
 * Costs: every transition is O(1); band_alloc looks at ALLOC_LOOK bands of
 * its row's free list; band_victim_pick at most VICTIM_LOOK candidates.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

#define REFRESH_ECC_NUM 5
#define REFRESH_ECC_DEN 8

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

/* ---- bands ----------------------------------------------------------- */

static void band_list_push(struct ftl *f, struct blist *l, uint32_t bi)
{
	struct band *bd = &f->band[bi];
	bd->next = FTL_NO_BLOCK;
	bd->prev = l->tail;
	if (l->tail != FTL_NO_BLOCK)
		f->band[l->tail].next = bi;
	else
		l->head = bi;
	l->tail = bi;
	l->count++;
}

static void band_list_remove(struct ftl *f, struct blist *l, uint32_t bi)
{
	struct band *bd = &f->band[bi];
	if (bd->prev != FTL_NO_BLOCK)
		f->band[bd->prev].next = bd->next;
	else
		l->head = bd->next;
	if (bd->next != FTL_NO_BLOCK)
		f->band[bd->next].prev = bd->prev;
	else
		l->tail = bd->prev;
	bd->next = bd->prev = FTL_NO_BLOCK;
	l->count--;
}

static struct blist *band_list_of(struct ftl *f, uint32_t bi)
{
	struct band *bd = &f->band[bi];
	if (bd->list == BAND_LIST_FREE)
		return &f->band_free[band_row(f, bi)];
	if (bd->list == BAND_LIST_BUCKET)
		return &f->band_bucket[bd->valid];
	return NULL;
}

/*
 * With parity, a band left with one member while its row has two or more
 * live dies (the others holes: bad blocks, or a superblock block, as in
 * band 0 of each row of test-64m, two dies wide) holds no data: a lone
 * member has no parity, so one bad page of it lost its units.  It is not
 * counted in nfree and band_alloc gives it to checkpoints only (their
 * pages have their own copy and fallbacks).  A row with a dead die and no
 * other live one has nothing better: its bands take data like any other.
 * O(row width) with dead dies, else O(1).
 */
static bool band_lone(const struct ftl *f, uint32_t bi)
{
	return f->parity && f->band[bi].members < 2 && row_live_width(f, band_row(f, bi)) >= 2;
}

/* Put band bi where its members' states say (see struct band). */
static void band_sync(struct ftl *f, uint32_t bi)
{
	struct band *bd = &f->band[bi];
	uint32_t idle = (uint32_t)bd->n_free + bd->n_dirty;
	uint16_t counted = bd->members && idle == bd->members && !band_lone(f, bi) ? bd->members : 0;
	f->nfree = f->nfree - bd->counted + counted;
	bd->counted = counted;
	uint8_t list = BAND_LIST_NONE;
	if (bd->members && bd->n_free == bd->members)
		list = BAND_LIST_FREE;
	else if (bd->n_closed && bd->n_closed + idle == bd->members)
		list = BAND_LIST_BUCKET;
	if (list == bd->list)
		return;
	struct blist *l = band_list_of(f, bi);
	if (l)
		band_list_remove(f, l, bi);
	if (bd->flags & BANDF_REFRESH) {
		if (bd->list == BAND_LIST_BUCKET)
			f->nrefresh_ready--;
		if (list == BAND_LIST_BUCKET)
			f->nrefresh_ready++;
		if (list == BAND_LIST_FREE)
			bd->flags &= (uint8_t)~BANDF_REFRESH; /* its data has moved on */
	}
	bd->list = list;
	if (list == BAND_LIST_BUCKET) {
		bd->closed_at = (uint32_t)f->write_clock;
		if (bd->valid < f->min_bucket)
			f->min_bucket = bd->valid;
	}
	l = band_list_of(f, bi);
	if (l)
		band_list_push(f, l, bi);
}

enum { CL_OTHER, CL_FREE, CL_DIRTY, CL_CLOSED };

static int blk_class(uint8_t st)
{
	switch (st) {
	case BLK_FREE:
		return CL_FREE;
	case BLK_DIRTY:
	case BLK_ERASING:
		return CL_DIRTY;
	case BLK_CLOSED:
		return CL_CLOSED;
	default:
		return CL_OTHER;
	}
}

static void band_count(struct band *bd, int cl, int delta)
{
	if (cl == CL_FREE)
		bd->n_free = (uint16_t)(bd->n_free + delta);
	else if (cl == CL_DIRTY)
		bd->n_dirty = (uint16_t)(bd->n_dirty + delta);
	else if (cl == CL_CLOSED)
		bd->n_closed = (uint16_t)(bd->n_closed + delta);
}

/* Take b off the block list its state puts it on. */
static void blk_leave(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	switch (k->state) {
	case BLK_DIRTY:
		blist_remove(f, &f->dirty, b);
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

/* valid of b's band changes by delta: a candidate changes bucket */
static void band_valid_add(struct ftl *f, uint32_t b, int delta)
{
	uint32_t bi = block_band(f, b);
	struct band *bd = &f->band[bi];
	if (bd->list == BAND_LIST_BUCKET) {
		band_list_remove(f, &f->band_bucket[bd->valid], bi);
		bd->valid = (uint32_t)((int64_t)bd->valid + delta);
		band_list_push(f, &f->band_bucket[bd->valid], bi);
		if (bd->valid < f->min_bucket)
			f->min_bucket = bd->valid;
	} else {
		bd->valid = (uint32_t)((int64_t)bd->valid + delta);
	}
}

/* The one place a block changes state once bands are kept. */
static void blk_move(struct ftl *f, uint32_t b, enum blk_state to)
{
	struct blk *k = &f->blk[b];
	uint8_t from = k->state;
	if ((to == BLK_BAD || to == BLK_DIRTY) && k->valid && f->bands_ready && !blk_is_sb(f, b) &&
	    from != BLK_BAD) {
		/* nothing stays mapped into it (a dropped checkpoint, a sweep) */
		band_valid_add(f, b, -(int)k->valid);
		k->valid = 0;
	}
	blk_leave(f, b);
	k->state = (uint8_t)to;
	if (to == BLK_META)
		f->nmeta++;
	if (!f->bands_ready || blk_is_sb(f, b) || from == BLK_BAD)
		return;
	uint32_t bi = block_band(f, b);
	struct band *bd = &f->band[bi];
	band_count(bd, blk_class(from), -1);
	if (to == BLK_BAD) {
		bd->members--;
	} else {
		band_count(bd, blk_class(to), +1);
	}
	band_sync(f, bi);
}

int blk_init(struct ftl *f)
{
	f->blk = ftl_alloc(f, (size_t)f->nblocks * sizeof *f->blk);
	f->erases = ftl_alloc(f, (size_t)f->nblocks * sizeof *f->erases);
	f->blk_max_seq = ftl_alloc(f, (size_t)f->nblocks * sizeof *f->blk_max_seq);
	f->blk_min_seq = ftl_alloc(f, (size_t)f->nblocks * sizeof *f->blk_min_seq);
	f->band = ftl_alloc(f, (size_t)f->nbands * sizeof *f->band);
	f->band_free = ftl_alloc(f, f->nrows * sizeof *f->band_free);
	f->nbuckets = f->row_width * f->data_pages + 1;
	f->band_bucket = ftl_alloc(f, (size_t)f->nbuckets * sizeof *f->band_bucket);
	if (!f->blk || !f->erases || !f->blk_max_seq || !f->blk_min_seq || !f->band ||
	    !f->band_free || !f->band_bucket)
		return -ENOMEM;
	for (uint32_t b = 0; b < f->nblocks; b++)
		f->blk[b].next = f->blk[b].prev = FTL_NO_BLOCK;
	for (uint32_t r = 0; r < f->nrows; r++)
		blist_init(&f->band_free[r]);
	for (uint32_t v = 0; v < f->nbuckets; v++)
		blist_init(&f->band_bucket[v]);
	blist_init(&f->dirty);
	blist_init(&f->retire);
	f->min_bucket = 0;
	/*
	 * Refresh when the worst codeword of a read needed REFRESH_ECC_NUM /
	 * REFRESH_ECC_DEN of what ECC corrects (25 of 40 bits per 1 KiB).
	 * Bit errors per codeword are about Poisson: a worst of 25 out of a
	 * page's 4 codewords means a mean near 15, where a codeword beyond 40
	 * is still ~1e-8 unlikely, but retention adds errors linearly with
	 * time, so by the time the mean has doubled reads start to fail.
	 * Earlier (half) would refresh healthy blocks under read disturb for
	 * nothing; later (7/8) leaves too little time for GC to get there.
	 * A device that does not say its ECC strength refreshes only after
	 * an uncorrectable read.
	 */
	uint32_t rb = f->dev->ecc_bits * REFRESH_ECC_NUM / REFRESH_ECC_DEN;
	f->refresh_bits = f->dev->ecc_bits && rb ? (uint16_t)rb : UINT16_MAX;
	return 0;
}

void blk_mark_initial(struct ftl *f, uint32_t b, enum blk_state st, bool grown)
{
	struct blk *k = &f->blk[b];
	if (k->state == BLK_META && st != BLK_META)
		f->nmeta--;
	if (k->state != BLK_META && st == BLK_META)
		f->nmeta++;
	k->state = (uint8_t)st;
	if (st == BLK_BAD) {
		if (grown)
			k->flags |= BLKF_GROWN_BAD;
		else
			k->flags &= (uint8_t)~BLKF_GROWN_BAD;
	}
}

/*
 * Members are the blocks neither bad nor superblock; every one counts as
 * "other" (its state is not classified yet, or META) until the blk_set_*
 * calls that follow classify it.
 */
void band_start(struct ftl *f)
{
	for (uint32_t bi = 0; bi < f->nbands; bi++) {
		struct band *bd = &f->band[bi];
		memset(bd, 0, sizeof *bd);
		bd->next = bd->prev = FTL_NO_BLOCK;
		for (uint32_t c = 0; c < f->row_width; c++) {
			uint32_t b = band_block(f, bi, c);
			if (f->blk[b].state != BLK_BAD && !blk_is_sb(f, b)) {
				bd->members++;
				bd->valid += f->blk[b].valid;
			}
		}
	}
	f->nfree = 0;
	f->nrefresh_ready = 0;
	f->bands_ready = true;
}

/* a doomed block that erased fine after all (its retirement was given up) */
static void blk_undoom(struct ftl *f, uint32_t b)
{
	if (f->blk[b].flags & BLKF_DOOMED) {
		f->blk[b].flags &= (uint8_t)~BLKF_DOOMED;
		f->ndoomed--;
	}
}

void blk_set_free(struct ftl *f, uint32_t b)
{
	blk_undoom(f, b);
	blk_move(f, b, BLK_FREE);
	f->blk[b].wp = 0;
	f->blk[b].valid = 0;
	f->blk_max_seq[b] = 0;
	f->blk_min_seq[b] = UINT64_MAX;
}

void blk_set_dirty(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	blk_move(f, b, BLK_DIRTY);
	k->wp = 0;
	blist_push(f, &f->dirty, b);
}

void blk_set_closed(struct ftl *f, uint32_t b)
{
	blk_move(f, b, BLK_CLOSED);
}

void blk_set_victim(struct ftl *f, uint32_t b)
{
	blk_move(f, b, BLK_VICTIM);
}

void blk_set_retiring(struct ftl *f, uint32_t b)
{
	blk_move(f, b, BLK_RETIRING);
	f->blk[b].next = f->blk[b].prev = FTL_NO_BLOCK;
	if (!(f->blk[b].flags & BLKF_DOOMED)) {
		/* the reserves count it as lost from now on */
		f->blk[b].flags |= BLKF_DOOMED;
		f->ndoomed++;
		health_update(f);
	}
}

void blk_doom(struct ftl *f, uint32_t b)
{
	if (f->blk[b].state == BLK_BAD || (f->blk[b].flags & BLKF_DOOMED))
		return;
	f->blk[b].flags |= BLKF_DOOMED;
	f->ndoomed++;
}

void blk_set_bad(struct ftl *f, uint32_t b, bool grown)
{
	struct blk *k = &f->blk[b];
	if (k->state == BLK_BAD)
		return;
	blk_undoom(f, b);
	blk_move(f, b, BLK_BAD);
	f->nbad++;
	f->nusable--;
	if (grown) {
		k->flags |= BLKF_GROWN_BAD;
		f->nbad_grown++;
	}
	health_update(f);
	if (f->min_usable && f->nusable < f->min_usable && !f->no_space) {
		f->no_space = true;
		ftl_log(FTL_LOG_ERR, "out of spare blocks (%u usable, %u needed): writes fail "
			"with ENOSPC from now on, reads go on; copy the data off and replace the "
			"card", f->nusable, f->min_usable);
	}
}

/* ---- erase counts ------------------------------------------------------- */

void blk_erase_counted(struct ftl *f, uint32_t b)
{
	if (f->erases[b] < UINT32_MAX)
		f->erases[b]++;
}

void blk_erases_set(struct ftl *f, uint32_t b, uint32_t count)
{
	f->erases[b] = count;
}

/*
 * The medium's count, where it keeps one, is a floor: it saw every erase,
 * those of a crash's last moments too (the FTL's figure can be behind by
 * the erases since the checkpoint it loaded) and those of a flashd that
 * kept no counts.  A medium without counts (raw NAND) has only the FTL's.
 * O(nblocks), once per open.
 */
void blk_erases_open(struct ftl *f)
{
	if (!(f->dev->caps & NAND_CAP_ERASE_COUNTS))
		return;
	uint32_t raised = 0;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		uint32_t ec = nand_erase_count(f->dev, b);
		if (ec > f->erases[b]) {
			raised += f->erases[b] != 0;
			f->erases[b] = ec;
		}
	}
	if (raised)
		ftl_log(FTL_LOG_INFO, "erase counts: %u blocks had more erases on the medium's counters than in "
			"the FTL's; the medium's taken", raised);
}

/* ---- endurance ---------------------------------------------------------- */

double reserve_percent(const struct ftl *f)
{
	/* spare blocks: usable beyond what the format needs; grown bad
	 * blocks eat into them */
	double spare0 = (double)f->nusable + (double)f->nbad_grown - (double)f->min_usable;
	double spare = (double)f->nusable - (double)f->ndoomed - (double)f->min_usable;
	return spare0 > 0 ? 100.0 * (spare > 0 ? spare : 0) / spare0 : 0;
}

static const char *health_name(uint8_t h)
{
	switch (h) {
	case HEALTH_LOW: return "online, reserves low";
	case HEALTH_REDUCED: return "write-reduced";
	case HEALTH_READONLY: return "read-only";
	default: return "online";
	}
}

/*
 * The state the reserves give (ftl.h, enum ftl_state): the thresholds are
 * crossed one way only while open (a bad block stays bad).  Each change is
 * logged with the figures and kept in health_msg for ftl_get_info.
 */
void health_update(struct ftl *f)
{
	if (!f->min_usable)
		return; /* open has not set the limits yet */
	double res = reserve_percent(f);
	uint8_t h = HEALTH_OK;
	uint32_t usable = f->nusable - f->ndoomed; /* doomed: bad, not yet retired */
	if (usable <= f->min_usable)
		h = HEALTH_READONLY;
	else if (res <= FTL_RESERVE_REDUCED_PERCENT)
		h = HEALTH_REDUCED;
	else if (res <= FTL_RESERVE_WARN_PERCENT)
		h = HEALTH_LOW;
	f->wear_ro = h == HEALTH_READONLY;
	f->health_throttle_ns = h == HEALTH_REDUCED ? FTL_REDUCED_WRITE_NS : 0;
	throttle_update(f);
	if (h == f->health)
		return;
	uint32_t spare = usable > f->min_usable ? usable - f->min_usable : 0;
	const char *what = h == HEALTH_READONLY ? "no spare block left: blocks can no longer be "
						  "placed safely, writes fail (read-only); "
						  "every unit stays readable: copy the data off"
			   : h == HEALTH_REDUCED ? "host writes throttled to about 10 MB/s: copy "
						   "the data off and replace the ioDimm"
			   : h == HEALTH_LOW     ? "warning: replace the ioDimm soon"
						 : "healthy";
	if (h == HEALTH_OK)
		f->health_msg[0] = 0;
	else
		snprintf(f->health_msg, sizeof f->health_msg,
			 "reserves %.1f%% (%u spare blocks left, %u grown bad): %s", res, spare,
			 f->nbad_grown + f->ndoomed, what);
	ftl_log(h == HEALTH_READONLY ? FTL_LOG_ERR : h == HEALTH_OK ? FTL_LOG_NOTICE : FTL_LOG_WARNING,
		"state %s -> %s: reserves %.1f%% (%u spare blocks left, %u grown bad, warn at "
		"%.0f%%, write-reduced at %.0f%%): %s",
		health_name(f->health), health_name(h), res, spare, f->nbad_grown + f->ndoomed,
		FTL_RESERVE_WARN_PERCENT, FTL_RESERVE_REDUCED_PERCENT, what);
	f->health = h;
}

void blk_invalidate(struct ftl *f, uint32_t ppa)
{
	uint32_t b = ppa_block(f, ppa);
	f->blk[b].valid--;
	if (f->bands_ready && !blk_is_sb(f, b))
		band_valid_add(f, b, -1);
}

void blk_validate(struct ftl *f, uint32_t ppa)
{
	uint32_t b = ppa_block(f, ppa);
	f->blk[b].valid++;
	if (f->bands_ready && !blk_is_sb(f, b))
		band_valid_add(f, b, +1);
}

/* Members a band of row takes: the row's width less its dead dies.  The
 * pool is counted in blocks; a band of a row with a dead die takes one
 * fewer, and a floor check with the full width would never open one (a
 * pool left with only such bands at the floor deadlocked GC: "no room"). */
uint32_t row_live_width(const struct ftl *f, uint32_t row)
{
	uint32_t w = f->row_width;
	if (!f->ndead)
		return w;
	for (uint32_t c = 0; c < f->row_width; c++)
		if (f->die_dead[block_die(f, band_block(f, row * f->blocks_per_die, c))])
			w--;
	return w ? w : 1;
}

uint32_t band_members_free(const struct ftl *f)
{
	uint32_t n = 0;
	for (uint32_t r = 0; r < f->nrows; r++)
		for (uint32_t bi = f->band_free[r].head; bi != FTL_NO_BLOCK; bi = f->band[bi].next)
			n += f->band[bi].members;
	return n;
}

uint32_t band_data_age(const struct ftl *f, uint32_t ppa)
{
	return (uint32_t)f->write_clock - f->band[block_band(f, ppa_block(f, ppa))].born;
}

void band_born_note(struct ftl *f, uint32_t ppa, uint32_t from)
{
	struct band *bd = &f->band[block_band(f, ppa_block(f, ppa))];
	uint32_t src = f->band[block_band(f, ppa_block(f, from))].born;
	bd->nborn++;
	int64_t d = (int32_t)(src - bd->born);
	bd->born += (uint32_t)(int32_t)(d / (int64_t)bd->nborn);
}

/* ---- refresh ----------------------------------------------------------- */

/*
 * A read of block b came back with its worst codeword at or past
 * refresh_bits corrected bits: the block's retention,
 * wear or read disturb is eating the ECC margin, and its neighbours were
 * written at the same time on blocks of the same age.  The whole band is
 * marked: GC collects it before any cost-benefit victim (gc.c,
 * victim_admit), unpaced, so its data moves while it still reads.  A band
 * that is still open is collected once it closes.  A band none of whose
 * members is closed or open (metadata, victims already being collected,
 * bad) is left alone; b itself may be retiring already (its program
 * failed: the parity block of a band whose stripes go on without parity).
 * Logged (rate-limited), counted in refresh_marked.  O(row_width).
 */
static bool band_refresh_set(struct ftl *f, uint32_t b)
{
	if (!f->bands_ready || blk_is_sb(f, b) || f->readonly)
		return false;
	uint32_t bi = block_band(f, b);
	bool live = false;
	for (uint32_t c = 0; c < f->row_width && !live; c++) {
		uint8_t state = f->blk[band_block(f, bi, c)].state;
		live = state == BLK_CLOSED || state == BLK_OPEN;
	}
	if (!live)
		return false;
	struct band *bd = &f->band[bi];
	if (bd->flags & BANDF_REFRESH)
		return false;
	bd->flags |= BANDF_REFRESH;
	if (bd->list == BAND_LIST_BUCKET)
		f->nrefresh_ready++;
	f->st.refresh_marked++;
	return true;
}

void band_flag_refresh(struct ftl *f, uint32_t b, const char *why)
{
	if (!band_refresh_set(f, b) || !why)
		return;
	uint64_t n = f->st.refresh_marked;
	if (n <= 10 || (n & (n - 1)) == 0)
		ftl_log(FTL_LOG_INFO, "band %u (block %u): %s; its data will be relocated (%llu bands marked for "
			"refresh so far)",
			block_band(f, b), b, why, (unsigned long long)n);
}

void blk_read_health(struct ftl *f, uint32_t b, enum nand_status st, uint16_t cmax)
{
	if (st == NAND_CORRECTED && cmax >= f->refresh_bits)
		band_mark_refresh(f, b, st, cmax);
}

void band_mark_refresh(struct ftl *f, uint32_t b, enum nand_status st, uint16_t cmax)
{
	(void)st;
	if (!band_refresh_set(f, b))
		return;
	uint32_t bi = block_band(f, b);
	uint64_t n = f->st.refresh_marked;
	if (n <= 10 || (n & (n - 1)) == 0)
		ftl_log(FTL_LOG_INFO, "band %u (block %u, %u erases): a read %s (%u bits in one codeword, ECC "
			"corrects %u); its data will be relocated (%llu bands marked for refresh "
			"so far)",
			bi, b, blk_erases(f, b),
			"neared the ECC limit", cmax, f->dev->ecc_bits, (unsigned long long)n);
}

uint32_t band_refresh_pick(struct ftl *f)
{
	if (!f->nrefresh_ready)
		return FTL_NO_BLOCK;
	for (uint32_t i = 0; i < f->nbands; i++) {
		uint32_t bi = f->refresh_cursor + i;
		if (bi >= f->nbands)
			bi -= f->nbands;
		const struct band *bd = &f->band[bi];
		if ((bd->flags & BANDF_REFRESH) && bd->list == BAND_LIST_BUCKET) {
			f->refresh_cursor = bi;
			return bi;
		}
	}
	return FTL_NO_BLOCK; /* not reached while nrefresh_ready is right */
}

/* ---- static wear levelling --------------------------------------------- */

/* A band's erase count: its first member that is neither bad nor a
 * superblock stands for all (they are erased together).  O(row_width). */
static uint32_t band_erase_count(struct ftl *f, uint32_t bi)
{
	for (uint32_t c = 0; c < f->row_width; c++) {
		uint32_t b = band_block(f, bi, c);
		if (f->blk[b].state != BLK_BAD && !blk_is_sb(f, b))
			return blk_erases(f, b);
	}
	return 0;
}

/*
 * Static wear levelling.  Dynamic levelling (band_alloc) spreads erases
 * over the bands that get free, but a band holding cold data (written once,
 * never rewritten) is never a cost-benefit victim while hot bands cycle
 * through the pool, so it keeps its few erases while the others wear out.
 * Every WL_INTERVAL bands' worth of erases, the bands are scanned: when
 * the most worn is more than wl_spread erases ahead of the least worn GC
 * candidate, that candidate is GC's next victim (gc.c, victim_admit): its
 * cold data moves to a worn band (GC's cold set allocates the most worn,
 * band_alloc) and the young band joins the pool for hot data.
 * wl_spread is rated P/E / WL_SPREAD_DIV (250 erases for MLC rated 5,000),
 * at least WL_SPREAD_MIN: a young device (the WA benchmarks: ~25 erases a
 * block) never pays for it, an old one keeps its spread under ~5 % of its
 * life.  Cost: at most one extra band relocation per WL_INTERVAL bands
 * erased (under 1/WL_INTERVAL of GC's work, and only while the spread is
 * over the threshold); the scan is O(nbands) per WL_INTERVAL bands.
 */
#define WL_SPREAD_DIV 20
#define WL_SPREAD_MIN 32
#define WL_INTERVAL 32
uint32_t band_wl_pick(struct ftl *f)
{
	if (f->wl_erases < WL_INTERVAL * f->row_width)
		return FTL_NO_BLOCK;
	f->wl_erases = 0;
	uint32_t spread = f->dev->rated_pe_cycles / WL_SPREAD_DIV;
	if (spread < WL_SPREAD_MIN)
		spread = WL_SPREAD_MIN;
	uint32_t emax = 0, cmin = UINT32_MAX, best = FTL_NO_BLOCK;
	for (uint32_t bi = 0; bi < f->nbands; bi++) {
		const struct band *bd = &f->band[bi];
		if (!bd->members)
			continue;
		uint32_t ec = band_erase_count(f, bi);
		if (ec > emax)
			emax = ec;
		if (bd->list == BAND_LIST_BUCKET && ec < cmin) {
			cmin = ec;
			best = bi;
		}
	}
	if (best == FTL_NO_BLOCK || emax - cmin <= spread)
		return FTL_NO_BLOCK;
	f->st.wl_collected++;
	uint64_t n = f->st.wl_collected;
	if (n <= 10 || (n & (n - 1)) == 0)
		ftl_log(FTL_LOG_INFO, "wear levelling: band %u (%u erases; the most worn has %u) is collected so "
			"its blocks take their share of erases (%llu such bands so far)",
			best, cmin, emax, (unsigned long long)n);
	return best;
}

/* Free band of this row with the fewest erases among the ALLOC_LOOK
 * longest free (dynamic wear levelling; bounded: a row of a full-size
 * ioDimm has thousands of free bands when it is young), or with the most
 * (worn: for data GC found cold, which will rest there).  A band's members
 * are erased together, so its first member stands for all.  A lone band
 * (band_lone) only for a checkpoint (st BLK_META). */
#define ALLOC_LOOK 64
uint32_t band_alloc(struct ftl *f, uint32_t row, enum blk_state st, bool worn)
{
	struct blist *l = &f->band_free[row];
	uint32_t best = FTL_NO_BLOCK, best_ec = UINT32_MAX, looked = 0;
	for (uint32_t bi = l->head; bi != FTL_NO_BLOCK && looked++ < ALLOC_LOOK; bi = f->band[bi].next) {
		if (st != BLK_META && band_lone(f, bi))
			continue; /* no parity for data there */
		uint32_t ec = UINT32_MAX;
		for (uint32_t c = 0; c < f->row_width && ec == UINT32_MAX; c++) {
			uint32_t b = band_block(f, bi, c);
			if (f->blk[b].state == BLK_FREE)
				ec = blk_erases(f, b);
		}
		if (worn && ec != UINT32_MAX)
			ec = UINT32_MAX - 1 - ec;
		if (ec < best_ec || best == FTL_NO_BLOCK) {
			best = bi;
			best_ec = ec;
		}
	}
	if (best == FTL_NO_BLOCK)
		return best;
	f->band[best].born = (uint32_t)f->write_clock;
	f->band[best].nborn = 0;
	for (uint32_t c = 0; c < f->row_width; c++) {
		uint32_t b = band_block(f, best, c);
		struct blk *k = &f->blk[b];
		if (k->state != BLK_FREE)
			continue; /* a hole */
		blk_move(f, b, st);
		k->wp = 0;
		k->valid = 0;
		k->inflight = 0;
	}
	return best;
}

/*
 * Cost-benefit (Rosenblum and Ousterhout): the candidate band that frees
 * the most space per page copied, weighted by age: (1 - u) / (1 + u) * age,
 * u its share of valid pages, age the user pages written since it became a
 * candidate.  Unlike greedy it also collects old bands that are fairly full
 * (cold data), which keeps their free pages from being locked away forever
 * under a skewed workload; under a uniform one it chooses like greedy.  A
 * row no victim is examining in is preferred (row_busy[row] == 0), so the
 * victims' reads run on different dies.
 * Every non-empty valid-count bucket is looked at: the first VICTIM_LOOK
 * candidates up to VICTIM_PER_BUCKET from each (from the emptiest bucket
 * up), past that the head of each, which is the band that has been in the
 * bucket longest, so the oldest of it in all but rare cases.  Stopping at
 * VICTIM_LOOK candidates would leave a full-size ioDimm (32,768 bands,
 * 6,376 buckets) choosing among the emptiest bands only: greedy, which
 * never collects the cold bands (80/20 hot/cold WA 2.85 at full size
 * against 2.45 on a 1,024-band scaled one).
 * Cost: one look per bucket (row_width * data_pages + 1 of them) and
 * VICTIM_LOOK candidates per pick; a pick frees a band.
 */
#define VICTIM_PER_BUCKET 4
#define VICTIM_LOOK 512
uint32_t band_victim_pick(struct ftl *f, const uint16_t *row_busy)
{
	uint32_t best = FTL_NO_BLOCK, looked = 0;
	double best_score = -1;
	bool first = true;
	for (uint32_t v = f->min_bucket; v < f->nbuckets; v++) {
		if (!f->band_bucket[v].count)
			continue;
		if (first) {
			f->min_bucket = v;
			first = false;
		}
		uint32_t per = looked < VICTIM_LOOK ? VICTIM_PER_BUCKET : 1, n = 0;
		for (uint32_t bi = f->band_bucket[v].head; bi != FTL_NO_BLOCK && n < per;
		     bi = f->band[bi].next, n++, looked++) {
			const struct band *bd = &f->band[bi];
			double cap = (double)bd->members * f->data_pages;
			if (v >= cap)
				continue; /* nothing to gain */
			double age = (double)(uint32_t)((uint32_t)f->write_clock - bd->closed_at) + 1;
			double score = (cap - v) / (cap + v) * age;
			if (row_busy && row_busy[band_row(f, bi)])
				score *= 0.5;
			if (score > best_score) {
				best_score = score;
				best = bi;
			}
		}
	}
	if (first)
		f->min_bucket = f->nbuckets;
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
	die_note(f, b, DIE_ERASE, op->status == NAND_OK);
	if (op->status == NAND_OK) {
		f->wl_erases++;
		blk_set_free(f, b);
	} else {
		f->st.erase_failures++;
		if (!die_is_dead(f, b)) /* a dead die's blocks: its failure said it */
			ftl_log(FTL_LOG_NOTICE, "block %u: erase failed (%s), retired (a grown bad "
				"block: the reserves take it)", b, nand_status_name(op->status));
		blk_set_bad(f, b, true);
	}
}

int eraser_kick(struct ftl *f)
{
	int n = 0;
	if (f->error || f->readonly || f->cp.wear_final)
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
		blk_erase_counted(f, b); /* when issued: the checkpoint's counts hold it */
		ftl_nand_submit(f, op);
		n++;
	}
	return n;
}

/*
 * Reserve thresholds, in free blocks (members of bands whose every member
 * is FREE, DIRTY or ERASING).  Blocks are taken a band (up to row_width
 * blocks) at a time, and a band is opened only if the pool stays at or
 * above the caller's floor afterwards:
 *   cp_reserve - one checkpoint: its blocks, rounded up to whole bands
 *   gc_min     - below it only checkpoints and trim records allocate: a
 *                checkpoint, and a band for records
 *   user_min   - below it host writes wait for GC: GC needs a band per row
 *   gc_start   - GC runs (paced by host writes) while the pool is below it
 */
void blk_limits(struct ftl *f)
{
	uint32_t w = f->row_width;
	f->cp_headroom = 0;
	f->cp_need = cp_blocks_needed(f);
	f->cp_reserve = f->cp_need + w - 1;
	f->gc_min = f->cp_reserve + (w > 2 ? w : 2);
	/* GC can open a band per row (a second per row for cold survivors
	 * comes out of the same margin: it fills what it has first) */
	f->user_min = f->gc_min + f->ndies + 1;
	f->gc_start = f->user_min + f->ndies + 2;
	/* every unit mapped, the reserves, both streams' open bands, superblocks */
	uint64_t data_blocks = (f->units + f->data_pages - 1) / f->data_pages;
	if (f->parity) /* a parity member per band */
		data_blocks = (data_blocks * w + (w - f->parity) - 1) / (w - f->parity);
	f->min_usable = (uint32_t)data_blocks + f->gc_start + 2 * f->ndies + 2 + f->cp_reserve;
	health_update(f);
	if (f->nusable < f->min_usable && !f->no_space) {
		f->no_space = true;
		ftl_log(FTL_LOG_ERR, "too few usable blocks (%u, %u needed): writes fail with "
			"ENOSPC, reads go on; copy the data off and replace the card", f->nusable,
			f->min_usable);
		return;
	}
	/*
	 * A checkpoint being written holds cp_reserve blocks until its commit
	 * frees those of the checkpoint before the previous.  Where the spare
	 * blocks allow, the pool is kept that much higher, so host writes and
	 * GC go on meanwhile instead of waiting for the commit.
	 */
	uint32_t spare = f->nusable - f->min_usable;
	uint32_t headroom = f->cp_reserve < spare / 4 ? f->cp_reserve : spare / 4;
	f->user_min += headroom;
	f->gc_start += headroom;
	f->cp_headroom = headroom;
}
