/*
 * ftl/superblock.c - the two superblock blocks: format parameters, the
 * pointers to the current and the previous checkpoint, and the dies found
 * dead.
 *
 * Every update is written to both blocks, one after the other (mirrored,
 * so a die 0 or 1 that fails while flashd is down, or with a crash, takes
 * one copy only): each block is appended to, and erased first when it is
 * full, while the other holds the previous update.  An update is done once
 * both copies are programmed, or one is and the other's block failed
 * (logged once per block); only if both fail is the FTL failed.  So the
 * newest complete update survives a power cut at any point and the loss of
 * either block.  Loading reads every programmed page of both blocks and
 * keeps the one with the highest sb_seq (a copy cut short by a power cut
 * is older or torn).  Media written when updates went to one block at a
 * time load the same way.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

/* Block 0 of dies 0 and 1 (NAND vendors guarantee block 0 good). */
void sb_locate(struct ftl *f)
{
	f->sb_block[0] = 0;
	if (f->ndies > 1) {
		f->sb_block[1] = f->blocks_per_die;
	} else {
		uint32_t b = 1;
		while (b + 1 < f->nblocks && nand_factory_bad(f->dev, b))
			b++;
		f->sb_block[1] = b;
	}
}

static bool sb_page_valid(const struct ftl_sb *sb)
{
	return memcmp(sb->magic, FTL_SB_MAGIC, 8) == 0 && sb->version == FTL_MEDIA_VERSION &&
	       sb->size == sizeof *sb && sb->crc == crc32c(0, sb, offsetof(struct ftl_sb, crc)) &&
	       sb->sb_seq < FTL_SEQ_LIMIT;
}

void sb_fill(struct ftl *f, struct ftl_sb *sb, bool clean)
{
	memset(sb, 0, sizeof *sb);
	memcpy(sb->magic, FTL_SB_MAGIC, 8);
	sb->version = FTL_MEDIA_VERSION;
	sb->size = sizeof *sb;
	sb->format_id = f->format_id;
	sb->sb_seq = f->sb_seq;
	memcpy(sb->geo, &f->geo, sizeof sb->geo);
	snprintf(sb->preset, sizeof sb->preset, "%s", f->dev->preset);
	sb->sector_size = f->sector_size;
	sb->parity_width = f->parity;
	sb->unit_size = FTL_UNIT_SIZE;
	sb->units = f->units;
	sb->format_time = f->format_time;
	const struct cp_state *c = &f->cp;
	if (c->phase == CP_COMMIT) {
		/* committing: point at the checkpoint just written, and at the
		 * current one as the previous */
		sb->cp_block = c->hdr_block;
		sb->cp_nblocks = c->nblocks;
		sb->cp_seq = c->cp_seq;
		sb->cp_mirror_block = c->hdr_mirror;
		sb->prev_cp_block = c->prev_keep ? c->cur_hdr_block : FTL_NO_BLOCK;
		sb->prev_cp_mirror_block = c->cur_mirror;
		sb->prev_cp_seq = c->cur_seq;
	} else {
		sb->cp_block = c->cur_hdr_block;
		sb->cp_nblocks = c->cur_nblocks;
		sb->cp_seq = c->cur_seq;
		sb->cp_mirror_block = c->cur_mirror;
		sb->prev_cp_block = c->prev_hdr_block;
		sb->prev_cp_mirror_block = c->prev_mirror;
		sb->prev_cp_seq = c->prev_seq;
	}
	if (sb->cp_block != FTL_NO_BLOCK && sb->cp_mirror_block != FTL_NO_BLOCK)
		sb->flags |= FTL_SB_CP_MIRROR;
	else
		sb->cp_mirror_block = 0;
	if (sb->cp_block != FTL_NO_BLOCK && sb->prev_cp_block != FTL_NO_BLOCK) {
		sb->flags |= FTL_SB_CP_PREV;
	} else {
		sb->prev_cp_block = 0;
		sb->prev_cp_mirror_block = 0;
		sb->prev_cp_seq = 0;
	}
	/* dies found dead: counted after any restart, even once every block
	 * of one is retired or a superblock block (never read at open) */
	for (uint32_t d = 0; f->die_dead && d < f->ndies && d < FTL_SB_DEAD_DIES; d++)
		if (f->die_dead[d])
			sb->dead_dies[d / 8] |= (uint8_t)(1u << (d % 8));
	sb->clean = clean;
	sb->open_count = f->open_count;
	sb->crc = crc32c(0, sb, offsetof(struct ftl_sb, crc));
}

int sb_load(struct ftl *f, struct ftl_sb *out, char *err, size_t errlen)
{
	uint8_t *page = malloc(f->page_size);
	uint8_t *spare = malloc(f->spare_size);
	bool found = false;
	int first_erased[2] = { (int)f->ppb, (int)f->ppb };

	if (!page || !spare) {
		free(page);
		free(spare);
		return -ENOMEM;
	}
	for (int i = 0; i < 2; i++) {
		/* an update fills its NAND page with copies: its first unit
		 * stands for the page */
		for (uint32_t p = 0; p < f->ppb; p += f->upp) {
			struct nand_op op = { .type = NAND_OP_READ, .block = f->sb_block[i],
					      .page = p, .data = page, .spare = spare };
			enum nand_status st = nand_op_sync(f->dev, &op);
			if (st == NAND_POWER_LOSS) {
				free(page);
				free(spare);
				snprintf(err, errlen, "the medium has no power");
				return -EIO;
			}
			if (st != NAND_OK && st != NAND_CORRECTED)
				continue; /* a torn update: older pages still count */
			struct ftl_spare sp;
			memcpy(&sp, spare, sizeof sp);
			if (sp.magic == 0xFFFFFFFFu && sp.crc == 0xFFFFFFFFu) {
				first_erased[i] = (int)p;
				break;
			}
			struct ftl_sb sb;
			memcpy(&sb, page, sizeof sb);
			if (!sb_page_valid(&sb))
				continue;
			if (!found || sb.sb_seq > out->sb_seq) {
				*out = sb;
				found = true;
			}
		}
	}
	free(page);
	free(spare);
	if (!found) {
		snprintf(err, errlen, "no FTL superblock: the device is not formatted");
		return -ENODATA;
	}
	f->sb_seq = out->sb_seq;
	for (int i = 0; i < 2; i++)
		f->sb_next[i] = (uint32_t)first_erased[i];
	return 0;
}

static void sb_program_done(struct nand_op *op);
static void sb_erase_done(struct nand_op *op);

static void sb_fill_done(struct nand_op *op)
{
	(void)op;
}

static void sb_submit_program(struct ftl *f)
{
	struct nand_op *op = &f->sb_op;
	op_program(op, NAND_OPF_META, f->sb_block[f->sb_cur], f->sb_next[f->sb_cur], f->sb_buf,
		   f->sb_spare, sb_program_done, f);
	ftl_nand_submit(f, op);
	/* several units per NAND page: the update's copies fill the rest of
	 * its page (programmed with it, ftl/upage.c; the first's completion
	 * stands for all) */
	for (uint32_t i = 1; i < f->upp; i++) {
		struct nand_op *x = &f->sb_fill[i - 1];
		op_program(x, NAND_OPF_META, op->block, op->page + i, f->sb_buf, f->sb_spare,
			   sb_fill_done, f);
		ftl_nand_submit(f, x);
	}
}

/* Write the current copy: into its block's next page, or, if the block is
 * full, erase it first (the other block holds the previous update). */
static void sb_copy_start(struct ftl *f)
{
	f->sb_fail_run = 0;
	if (f->sb_next[f->sb_cur] < f->ppb) {
		sb_submit_program(f);
		return;
	}
	struct nand_op *op = &f->sb_op;
	memset(op, 0, sizeof *op);
	op->type = NAND_OP_ERASE;
	op->block = f->sb_block[f->sb_cur];
	op->done = sb_erase_done;
	op->priv = f;
	blk_erase_counted(f, op->block); /* when issued (cp_fill_wear counts on it) */
	ftl_nand_submit(f, op);
}

/* The current copy is programmed (ok) or its block failed: on to the next
 * copy, or the update is done. */
static void sb_copy_end(struct ftl *f, bool ok)
{
	uint32_t i = f->sb_cur;
	if (ok) {
		f->sb_copies++;
	} else if (!f->sb_warned[i]) {
		f->sb_warned[i] = true;
		ftl_log(FTL_LOG_WARNING, "superblock block %u failed: the superblock goes on in "
			"block %u only (one more failure there and the ioDimm cannot record its "
			"state: replace the card)",
			f->sb_block[i], f->sb_block[i ^ 1]);
	}
	if (++f->sb_cur < 2 && !f->error) {
		sb_copy_start(f);
		return;
	}
	f->sb_busy = false;
	if (!f->sb_copies && !f->error)
		ftl_fail(f, -EIO, "writing the superblock failed (both blocks)");
	f->sb_op.status = f->sb_copies && !f->error ? NAND_OK : NAND_PROGRAM_FAILED;
	f->sb_op.priv = f;
	if (f->sb_done)
		f->sb_done(&f->sb_op);
}

/* The FTL is stopping (ftl_op_stops): the update ends here, its owner
 * told.  true if so. */
static bool sb_op_stops(struct ftl *f, struct nand_op *op)
{
	if (!ftl_op_stops(f, op))
		return false;
	f->sb_busy = false;
	if (f->sb_done)
		f->sb_done(op);
	return true;
}

static void sb_erase_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	if (sb_op_stops(f, op))
		return;
	if (op->status != NAND_OK) {
		f->sb_next[f->sb_cur] = f->ppb; /* erased again next time */
		sb_copy_end(f, false);
		return;
	}
	f->st.blocks_erased++;
	f->sb_next[f->sb_cur] = 0;
	sb_submit_program(f);
}

static void sb_program_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	if (sb_op_stops(f, op))
		return;
	f->sb_next[f->sb_cur] += f->upp;
	if (op->status == NAND_OK) {
		f->st.nand_pages_programmed++;
		f->st.meta_pages_programmed++;
		sb_copy_end(f, true);
		return;
	}
	/* a failed page is skipped: try the next one; a second failure in a
	 * row (a worn block, a dead die) gives this copy up */
	if (++f->sb_fail_run < 2 && f->sb_next[f->sb_cur] < f->ppb) {
		sb_submit_program(f);
		return;
	}
	sb_copy_end(f, false);
}

/* Start writing a new superblock update; done(op) runs when it is on media
 * (op->status NAND_OK: at least one copy) or when it failed for good. */
int sb_start_write(struct ftl *f, bool clean, void (*done)(struct nand_op *))
{
	struct ftl_sb sb;
	if (f->sb_busy)
		return -EBUSY;
	f->sb_seq++;
	sb_fill(f, &sb, clean);
	memset(f->sb_buf, 0xFF, f->page_size);
	memcpy(f->sb_buf, &sb, sizeof sb);
	spare_build(f, f->sb_spare, FTL_PG_SB, 0, f->sb_seq, f->sb_buf, true);
	f->sb_busy = true;
	f->sb_done = done;
	f->sb_cur = 0;
	f->sb_copies = 0;
	sb_copy_start(f);
	return 0;
}

int sb_write_initial(struct ftl *f, bool clean, char *err, size_t errlen)
{
	uint8_t *page = aligned_alloc(4096, f->page_size), *spare = malloc(f->spare_size);
	if (!page || !spare) {
		free(page);
		free(spare);
		return -ENOMEM;
	}
	struct ftl_sb sb;
	sb_fill(f, &sb, clean);
	memset(page, 0xFF, f->page_size);
	memcpy(page, &sb, sizeof sb);
	spare_build(f, spare, FTL_PG_SB, 0, f->sb_seq, page, true);
	/* one block after the other: while block 0 is erased and programmed,
	 * block 1 still holds what was there (a re-format: the previous
	 * superblock), and once block 0 holds the new one, it is what loads
	 * (unless the format numbered it from 1: then the old one does until
	 * block 1 is erased, ftl_format) */
	int rc = 0;
	for (int i = 0; i < 2 && !rc; i++) {
		struct nand_op erase = { .type = NAND_OP_ERASE, .block = f->sb_block[i] };
		enum nand_status st = nand_op_sync(f->dev, &erase);
		if (st != NAND_OK) {
			snprintf(err, errlen, "erasing superblock block %u failed: %s", f->sb_block[i],
				 nand_status_name(st));
			rc = -EIO;
			break;
		}
		/* the superblock fills its NAND page with copies */
		struct nand_op op[4];
		for (uint32_t u = 0; u < f->upp; u++)
			op[u] = (struct nand_op){ .type = NAND_OP_PROGRAM, .block = f->sb_block[i],
						  .page = u, .flags = NAND_OPF_META, .data = page,
						  .spare = spare };
		st = nand_programs_sync(f->dev, op, f->upp);
		f->sb_next[i] = f->upp;
		if (st != NAND_OK) {
			snprintf(err, errlen, "writing the superblock failed: %s", nand_status_name(st));
			rc = -EIO;
		}
	}
	free(page);
	free(spare);
	return rc;
}
