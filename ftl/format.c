/*
 * ftl/format.c - what a medium holds before an open: the geometry and
 * capacity of a format (ftl_geometry_init, shared with the open), writing
 * a new format (ftl_format), and telling a blank medium from a damaged
 * one and reading its format without opening it (ftl_probe,
 * ftl_peek_format).  Owns no state of a running FTL: its struct ftl, if
 * any, lives for one call.  Called by the server and flashctl through
 * ftl.h, and by ftl.c's open.
 */
#include <errno.h>
#include <sys/random.h>
#include <time.h>

#include "ftl/ftl_int.h"

/* ---- geometry and capacity --------------------------------------------- */

int ftl_geometry_init(struct ftl *f, struct nand_dev *dev, char *err, size_t errlen)
{
	/* NAND pages of 8 or 16 KiB: the FTL sees 4 KiB unit pages through
	 * ftl/upage.c (ftl_geometry_fini closes that view) */
	f->upp = 1;
	if (dev->geo.page_size == 2 * FTL_UNIT_SIZE || dev->geo.page_size == 4 * FTL_UNIT_SIZE) {
		struct nand_dev *view = upage_wrap(dev);
		if (!view) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		f->upp = dev->geo.page_size / FTL_UNIT_SIZE;
		dev = view;
	}
	f->dev = dev;
	f->geo = dev->geo;
	f->ndies = nand_dies(&dev->geo);
	f->nblocks = nand_blocks(&dev->geo);
	f->ppb = dev->geo.pages_per_block;
	f->page_size = dev->geo.page_size;
	f->spare_size = dev->geo.spare_size;
	f->blocks_per_die = dev->geo.blocks_per_die;
	f->dies_per_channel = dev->geo.dies_per_channel;
	f->nrows = dev->geo.dies_per_channel;
	f->row_width = dev->geo.channels;
	f->nbands = f->nrows * f->blocks_per_die;
	f->cp.cur_hdr_block = FTL_NO_BLOCK;
	f->cp.cur_mirror = FTL_NO_BLOCK;
	f->cp.prev_hdr_block = FTL_NO_BLOCK;
	f->cp.prev_mirror = FTL_NO_BLOCK;
	f->cp.hdr_mirror = FTL_NO_BLOCK;
	if (f->page_size != FTL_UNIT_SIZE) {
		snprintf(err, errlen, "page size %u is not supported (pages of 4, 8 or 16 KiB: "
			 "one, two or four of the FTL's %u-byte units)", f->page_size, FTL_UNIT_SIZE);
		return -EINVAL;
	}
	/* every page the FTL programs carries its struct ftl_spare in the
	 * spare (OOB) bytes the backend offers it (on MTD: the free OOB bytes
	 * the ECC leaves, 78 on nandsim's 4 KiB Hamming chip) */
	if (f->spare_size < sizeof(struct ftl_spare)) {
		snprintf(err, errlen, "%u spare bytes per page: the FTL needs %zu (its metadata "
			 "in every page it programs)", f->spare_size, sizeof(struct ftl_spare));
		return -EINVAL;
	}
	if (f->ppb < 8 || f->ppb > 4096 ||
	    nand_pages(&dev->geo) > L2P_MAX_PPA || f->nblocks < 16) {
		snprintf(err, errlen, "unsupported NAND geometry");
		return -EINVAL;
	}
	/* a footer entry per page, whole pages of them */
	f->footer_pages = (uint32_t)((sizeof(struct ftl_footer_hdr) +
				      (size_t)f->ppb * sizeof(struct ftl_footer_entry) + f->page_size - 1) /
				     f->page_size);
	/* ... filling whole NAND pages (they are programmed whole) */
	f->footer_pages = (f->footer_pages + f->upp - 1) / f->upp * f->upp;
	f->data_pages = f->ppb - f->footer_pages;
	return 0;
}


static uint32_t good_blocks(struct nand_dev *dev)
{
	uint32_t n = 0, total = nand_blocks(&dev->geo);
	for (uint32_t b = 0; b < total; b++)
		n += !nand_factory_bad(dev, b);
	return n;
}

uint64_t ftl_capacity_for_op(const struct nand_dev *dev, double op_percent)
{
	double raw = (double)nand_raw_bytes(&dev->geo);
	uint64_t cap = (uint64_t)(raw * (1.0 - op_percent / 100.0));
	return cap / FTL_UNIT_SIZE * FTL_UNIT_SIZE;
}

uint64_t ftl_capacity_for_format(const struct nand_dev *dev, double op_percent,
				 uint32_t parity_width)
{
	uint64_t cap = ftl_capacity_for_op(dev, op_percent);
	uint32_t w = dev->geo.channels;
	if (parity_width && w > parity_width)
		cap = cap / w * (w - parity_width) / FTL_UNIT_SIZE * FTL_UNIT_SIZE;
	return cap;
}

uint64_t ftl_max_capacity(const struct nand_dev *dev)
{
	struct nand_dev *d = (struct nand_dev *)dev;
	uint64_t cap = ftl_capacity_for_op(dev, FTL_MIN_OP_PERCENT);
	/* in units: one to four per NAND page */
	uint32_t ndies = nand_dies(&dev->geo),
		 ppb = dev->geo.pages_per_block * (dev->geo.page_size / FTL_UNIT_SIZE);
	uint64_t l2p_pages = (cap / FTL_UNIT_SIZE * 4 + FTL_UNIT_SIZE - 1) / FTL_UNIT_SIZE;
	uint64_t cp_blocks = 1 + (l2p_pages + ppb - 1) / ppb;
	/* superblocks, two checkpoints, open blocks of both streams, reserves */
	uint64_t reserve = 2 + 2 * cp_blocks + 4 * (uint64_t)ndies + 8;
	uint64_t good = good_blocks(d);
	uint64_t by_blocks = good > reserve ? (good - reserve) * ppb * 97 / 100 * FTL_UNIT_SIZE : 0;
	return cap < by_blocks ? cap : by_blocks;
}

/* The FTL's own blocks (superblocks, two checkpoints, both streams' open
 * bands, GC's floor: ftl_max_capacity) are a count of blocks whatever the
 * device's size: 18 of test-128m-512p's 64 blocks of 512 pages, more than
 * the stock 20 % leaves. */
double ftl_stock_op_percent(const struct nand_dev *dev)
{
	uint64_t max = ftl_max_capacity(dev);
	double op = FTL_STOCK_OP_PERCENT;
	while (op < FTL_MAX_OP_PERCENT && ftl_capacity_for_op(dev, op) > max)
		op += 1.0;
	return op;
}

/* ---- format ------------------------------------------------------------- */

int ftl_format(struct nand_dev *dev, const struct ftl_format_params *p, char *err, size_t errlen)
{
	struct ftl *f = calloc(1, sizeof *f);
	int rc;
	char dummy[8];

	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = 0;
	if (!f)
		return -ENOMEM;
	rc = ftl_geometry_init(f, dev, err, errlen);
	if (rc)
		goto out;
	if (p->sector_size != 512 && p->sector_size != 4096) {
		snprintf(err, errlen, "sector size must be 512 or 4096, not %u", p->sector_size);
		rc = -EINVAL;
		goto out;
	}
	if (p->parity_width > 1 || (p->parity_width && (f->row_width < 2 || f->row_width > 32))) {
		snprintf(err, errlen, "parity width %u: flashd writes 0 or 1 parity die per band "
			 "stripe, and parity needs 2 to 32 dies per row (this geometry has %u)",
			 p->parity_width, f->row_width);
		rc = -ENOTSUP;
		goto out;
	}
	if (p->parity_width && f->upp > 1) {
		snprintf(err, errlen, "parity is not supported with %u-byte NAND pages (4 KiB "
			 "pages only); format with parity width 0", f->geo.page_size * f->upp);
		rc = -ENOTSUP;
		goto out;
	}
	if (p->parity_width && f->spare_size < 2 * sizeof(struct ftl_spare)) {
		snprintf(err, errlen, "parity needs %zu spare bytes per page; this geometry has %u",
			 2 * sizeof(struct ftl_spare), f->spare_size);
		rc = -ENOTSUP;
		goto out;
	}
	f->parity = p->parity_width;
	uint64_t cap;
	if (p->capacity_bytes) {
		cap = p->capacity_bytes / FTL_UNIT_SIZE * FTL_UNIT_SIZE;
	} else {
		double op = p->op_percent > 0 ? p->op_percent : ftl_stock_op_percent(dev);
		if (op < FTL_MIN_OP_PERCENT || op > FTL_MAX_OP_PERCENT) {
			snprintf(err, errlen, "over-provisioning must be %.0f%% to %.0f%% of raw, not %g%%",
				 FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT, op);
			rc = -EINVAL;
			goto out;
		}
		/* over-provisioning is the share of the data dies' space the
		 * host does not see: parity comes off the top, so GC has the
		 * same room as without it */
		cap = ftl_capacity_for_format(dev, op, f->parity);
	}
	uint64_t max = ftl_max_capacity(dev);
	if (f->parity)
		max = max / f->row_width * (f->row_width - f->parity) / FTL_UNIT_SIZE * FTL_UNIT_SIZE;
	if (cap < (1u << 20) || cap > max) {
		snprintf(err, errlen, "capacity %llu bytes is out of range (1 MiB to %llu bytes)",
			 (unsigned long long)cap, (unsigned long long)max);
		rc = -EINVAL;
		goto out;
	}

	/* a re-format is safe against a cut at any point: the new superblock
	 * goes above the newest one there (it loads as soon as one copy is
	 * written; numbered from 1 instead, below), and sb_write_initial keeps
	 * one whole copy of the old or the new on the media throughout: the
	 * device holds the old format or the new, never no superblock */
	sb_locate(f);
	struct ftl_sb old;
	f->sb_seq = sb_load(f, &old, err, errlen) == 0 ? old.sb_seq + 1 : 1;
	/* a superblock numbered near FTL_SEQ_LIMIT (crafted: no format lives
	 * that long) would leave the new format no room: number it from 1.
	 * Old or new still holds: until the second copy is written the old
	 * one loads (it is the higher), then only the new one is left */
	if (f->sb_seq > FTL_SEQ_LIMIT / 2)
		f->sb_seq = 1;
	err[0] = 0;
	f->sector_size = p->sector_size;
	f->units = cap / FTL_UNIT_SIZE;
	f->format_time = (uint64_t)time(NULL);
	while (!f->format_id) {
		if (getrandom(&f->format_id, sizeof f->format_id, 0) != sizeof f->format_id)
			f->format_id = (uint64_t)nand_now_ns() * 0x9E3779B97F4A7C15ull;
	}
	f->cp.cur_hdr_block = FTL_NO_BLOCK;
	f->cp.cur_mirror = FTL_NO_BLOCK;
	rc = sb_write_initial(f, true, err, errlen);
	if (rc)
		goto out;
	rc = nand_sync(dev);
out:
	ftl_geometry_fini(f);
	free(f);
	return rc;
}

/* ---- blank or damaged ---------------------------------------------------- */

struct blank_ctx {
	uint64_t written;          /* blocks whose first page is not erased */
	uint32_t first;            /* the first of them */
	char what[128];
};

/* Blocks in die-interleaved order, so the reads in flight spread over all
 * dies instead of queueing on one. */
static uint32_t interleaved_block(const struct ftl *f, uint64_t i)
{
	return (uint32_t)(i % f->ndies) * f->blocks_per_die + (uint32_t)(i / f->ndies);
}

static void blank_setup(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	op->block = interleaved_block(f, i);
	op->page = 0;
	op->data = NULL;
}

static void blank_result(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct blank_ctx *x = ctx;
	const uint8_t *sp = op->spare;
	if (op->status == NAND_BLOCK_BAD)
		return;
	bool erased = op->status == NAND_OK || op->status == NAND_CORRECTED;
	for (uint32_t k = 0; erased && k < f->spare_size; k++)
		erased = sp[k] == 0xFF;
	if (erased)
		return;
	if (!x->written++) {
		struct ftl_spare s;
		x->first = op->block;
		memcpy(&s, sp, sizeof s);
		if (op->status != NAND_OK && op->status != NAND_CORRECTED)
			snprintf(x->what, sizeof x->what, "its first page is unreadable (%s)",
				 nand_status_name(op->status));
		else if (s.magic == FTL_SPARE_MAGIC &&
			 s.crc == crc32c(0, &s, offsetof(struct ftl_spare, crc)))
			snprintf(x->what, sizeof x->what,
				 "its first page is an FTL page of type %u, format %016llx, sequence %llu",
				 s.type, (unsigned long long)s.format_id, (unsigned long long)s.seq);
		else
			snprintf(x->what, sizeof x->what, "its first page holds data of unknown origin");
	}
}

/* After sb_load found no valid superblock: -ENODATA if blank, else -EUCLEAN. */
int blank_or_damaged(struct ftl *f, char *err, size_t errlen)
{
	struct blank_ctx x = { 0 };
	int rc = read_batch(f, f->nblocks, 256, blank_setup, blank_result, &x);
	if (rc) {
		snprintf(err, errlen, "reading the media failed: %s", strerror(-rc));
		return rc;
	}
	if (!x.written) {
		snprintf(err, errlen, "no FTL superblock: the device is blank (not formatted)");
		return -ENODATA;
	}
	snprintf(err, errlen,
		 "no valid FTL superblock, but the media is not blank: %llu of %u blocks hold "
		 "something (block %u: %s); refusing to treat it as unformatted",
		 (unsigned long long)x.written, f->nblocks, x.first, x.what);
	return -EUCLEAN;
}

/*
 * The format a superblock holds, checked against the device: 0, -EINVAL
 * (impossible: the superblock was crafted or damaged past its CRC) or
 * -ENOTSUP, with err.  Sizes are compared by division: units * 4096 wraps
 * for units >= 2^52 (2^62 + 1 units passed as 4096 bytes, and the open
 * wrote the map out of bounds).
 */
int sb_format_check(const struct ftl *f, const struct ftl_sb *sb, char *err, size_t errlen)
{
	if (memcmp(sb->geo, &f->geo, sizeof sb->geo) != 0) {
		snprintf(err, errlen, "the superblock was written for another geometry");
		return -EINVAL;
	}
	if ((sb->sector_size != 512 && sb->sector_size != 4096) || sb->unit_size != FTL_UNIT_SIZE ||
	    !sb->units || sb->units > nand_raw_bytes(&f->geo) / FTL_UNIT_SIZE) {
		snprintf(err, errlen, "the superblock holds an impossible format (%u-byte sectors, "
			 "%llu units of %u bytes)", sb->sector_size, (unsigned long long)sb->units,
			 sb->unit_size);
		return -EINVAL;
	}
	if (sb->parity_width > 1 || (sb->parity_width && (f->row_width < 2 || f->row_width > 32))) {
		snprintf(err, errlen, "formatted with %u parity dies per band stripe, which this "
			 "version of flashd cannot serve", sb->parity_width);
		return -ENOTSUP;
	}
	return 0;
}

/* The superblock's format into info: 0, -ENODATA (none), or an error of
 * sb_format_check. */
static int peek_format(struct nand_dev *dev, struct ftl_info *info, char *err, size_t errlen)
{
	struct ftl *f = calloc(1, sizeof *f);
	struct ftl_sb sb;
	if (!f)
		return -ENOMEM;
	int rc = ftl_geometry_init(f, dev, err, errlen);
	if (!rc) {
		sb_locate(f);
		rc = sb_load(f, &sb, err, errlen);
	}
	if (!rc)
		rc = sb_format_check(f, &sb, err, errlen);
	if (!rc) {
		memset(info, 0, sizeof *info);
		info->format_id = sb.format_id;
		info->sector_size = sb.sector_size;
		info->units = sb.units;
		info->capacity = sb.units * FTL_UNIT_SIZE;
		info->raw_bytes = nand_raw_bytes(&dev->geo);
		info->op_percent = 100.0 * (1.0 - (double)info->capacity / (double)info->raw_bytes);
		info->format_time = sb.format_time;
		info->band_rows = f->nrows;
		info->band_width = f->row_width;
		info->parity_width = sb.parity_width;
		info->was_clean = sb.clean;
	}
	ftl_geometry_fini(f);
	free(f);
	return rc;
}

int ftl_probe(struct nand_dev *dev, struct ftl_info *info, char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = 0;
	int rc = peek_format(dev, info, err, errlen);
	if (rc != -ENODATA)
		return rc;
	err[0] = 0;
	struct ftl *f = calloc(1, sizeof *f);
	if (!f)
		return -ENOMEM;
	rc = ftl_geometry_init(f, dev, err, errlen);
	if (!rc)
		rc = blank_or_damaged(f, err, errlen);
	ftl_geometry_fini(f);
	free(f);
	return rc;
}

int ftl_peek_format(struct nand_dev *dev, struct ftl_info *info)
{
	char err[256];
	return peek_format(dev, info, err, sizeof err);
}
