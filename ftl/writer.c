/*
 * ftl/writer.c - write buffer rings and the two streams that program them.
 *
 * The user stream carries host data and trim records; the GC stream carries
 * relocated data and re-logged trims, into blocks of its own so that data
 * GC found still valid (cold) is not mixed with fresh host writes.  Each
 * stream keeps one open block per die and hands out pages round-robin over
 * the dies, so consecutive pages are programmed in parallel.
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
	r->data = ftl_alloc_pages(f, (size_t)n * f->page_size);
	r->spares = ftl_alloc(f, (size_t)n * f->spare_size);
	r->retry = ftl_alloc(f, (size_t)n * sizeof *r->retry);
	if (!r->slots || !r->data || !r->spares || !r->retry)
		return -ENOMEM;
	r->fill = r->submit = r->done = 0;
	r->nretry = 0;
	return 0;
}

uint8_t *slot_data(struct ftl *f, uint32_t e)
{
	struct ring *r = &f->stream[(e & L2P_SLOT_GC) ? STREAM_GC : STREAM_USER].ring;
	return ring_data(r, e & L2P_SLOT_MASK, f->page_size);
}

void ring_release(struct ftl *f, struct ring *r)
{
	while (r->done < r->submit) {
		struct slot *s = ring_slot(r, r->done);
		if (s->state != SLOT_DONE && s->state != SLOT_SKIP)
			break;
		s->state = SLOT_EMPTY;
		r->done++;
	}
}

/*
 * Next page of stream s, striped over the dies; NO_BLOCK if none now.  A new
 * block is opened only while more than `floor` blocks are free.
 */
uint32_t stream_next_page(struct ftl *f, struct stream *s, uint32_t floor)
{
	/* short of blocks: fill the blocks already open before opening more */
	bool frugal = f->nfree <= f->user_min;
	for (uint32_t i = 0; i < 2 * f->ndies; i++) {
		if (i == f->ndies)
			frugal = false;
		uint32_t die = s->next_die;
		s->next_die = die + 1 == f->ndies ? 0 : die + 1;
		struct stream_die *sd = &s->die[die];
		if (sd->block == FTL_NO_BLOCK) {
			if (frugal || f->nfree <= floor || !f->free_die[die].count)
				continue;
			sd->block = blk_alloc(f, die);
			if (sd->block == FTL_NO_BLOCK)
				continue;
		}
		uint32_t b = sd->block;
		struct blk *k = &f->blk[b];
		uint32_t ppa = ppa_make(f, b, k->wp);
		k->wp++;
		k->inflight++;
		if (k->wp == f->ppb)
			sd->block = FTL_NO_BLOCK; /* full: closes when its programs finish */
		return ppa;
	}
	return FTL_NO_BLOCK;
}

/* A block whose last program finished: close it, or hand it to GC to retire. */
static void blk_programs_settled(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	if (k->inflight)
		return;
	if (k->state == BLK_OPEN && k->wp == f->ppb)
		blk_set_closed(f, b);
	else if (k->state == BLK_RETIRING && k->next == FTL_NO_BLOCK && f->retire.head != b)
		blist_push(f, &f->retire, b);
}

/* The program of a block failed: stop using the block; GC retires it. */
static void blk_program_failed(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	if (k->state != BLK_OPEN)
		return;
	for (int i = 0; i < NSTREAMS; i++) {
		struct stream_die *sd = &f->stream[i].die[block_die(f, b)];
		if (sd->block == b)
			sd->block = FTL_NO_BLOCK;
	}
	k->state = BLK_RETIRING;
	k->next = k->prev = FTL_NO_BLOCK;
	ftl_log("block %u: program failed, retiring it", b);
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
	if (op->status != NAND_OK) {
		f->st.program_failures++;
		blk_program_failed(f, b);
		blk_programs_settled(f, b);
		/* program the same content elsewhere */
		sl->state = SLOT_FILLED;
		r->retry[r->nretry++] = idx;
		return;
	}
	f->st.nand_pages_programmed++;
	f->cp.pages_since++;
	sl->state = SLOT_DONE;
	if (sl->type == FTL_PG_DATA) {
		uint32_t ref = L2P_SLOT | (s->id == STREAM_GC ? L2P_SLOT_GC : 0) | idx;
		if (f->l2p[sl->lba] == ref) {
			f->l2p[sl->lba] = sl->ppa;
			blk_validate(f, sl->ppa);
		}
	}
	if (s->id == STREAM_GC)
		gc_slot_programmed(f, sl);
	blk_programs_settled(f, b);
	ring_release(f, r);
}

static void slot_submit(struct ftl *f, struct stream *s, uint32_t idx, uint32_t ppa)
{
	struct ring *r = &s->ring;
	struct slot *sl = &r->slots[idx];
	uint8_t *data = ring_data(r, idx, f->page_size);
	uint8_t *spare = r->spares + (size_t)idx * f->spare_size;

	sl->ppa = ppa;
	sl->state = SLOT_SUBMITTED;
	if (sl->crc_known)
		spare_build_crc(f, spare, sl->type, sl->lba, sl->seq, sl->data_crc);
	else
		spare_build(f, spare, sl->type, sl->lba, sl->seq, data, true);
	struct nand_op *op = &sl->op;
	op->type = NAND_OP_PROGRAM;
	op->flags = sl->type == FTL_PG_TRIM ? NAND_OPF_META : 0;
	op->block = ppa_block(f, ppa);
	op->page = ppa_page(f, ppa);
	op->data = data;
	op->spare = spare;
	op->done = slot_program_done;
	op->priv = s;
	op->priv2 = idx;
	ftl_nand_submit(f, op);
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
	while (r->nretry) {
		/* a failed program: anything but the checkpoint's blocks */
		uint32_t ppa = stream_next_page(f, s, f->cp_reserve);
		if (ppa == FTL_NO_BLOCK)
			return n;
		slot_submit(f, s, r->retry[--r->nretry], ppa);
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
			ppa = stream_next_page(f, s, f->gc_min);
			if (ppa == FTL_NO_BLOCK) {
				s->stalled = true;
				break;
			}
			s->stalled = false;
		}
		slot_submit(f, s, (uint32_t)(r->submit & r->mask), ppa);
		r->submit++;
		n++;
		if (s->id == STREAM_USER)
			gc_user_page(f);
	}
	if (n)
		ring_release(f, r);
	return n;
}
