/*
 * ftl/repair.c - offline scan of the media and rebuilding a damaged
 * superblock (flashctl recover).
 *
 * The superblock holds only the format (id, sector size, capacity) and a
 * pointer to the current checkpoint; everything else is in the log.  So a
 * lost superblock is rebuilt from what the media still says: the newest
 * checkpoint whose header and map pages all check out gives format id,
 * capacity and (in checkpoints written since the header kept them) sector
 * size and format time; without one the caller supplies sector size and
 * capacity and the next open replays the whole log.
 * Cost: one spare read per block (die-interleaved), plus every page of each
 * checkpoint candidate.  Nothing here runs while the FTL is open.
 */
#include <errno.h>
#include <time.h>

#include "ftl/ftl_int.h"

#define MAX_FORMATS 8
#define MAX_CP_CANDIDATES 64

struct scan_ctx {
	struct ftl_scan_report *rep;
	struct { uint64_t id, max_seq; uint32_t blocks; } fmt[MAX_FORMATS];
	uint32_t nfmt;
	uint32_t cand[MAX_CP_CANDIDATES];
	uint64_t cand_seq[MAX_CP_CANDIDATES];
	uint32_t ncand;
};

static uint32_t scan_block(const struct ftl *f, uint64_t i)
{
	return (uint32_t)(i % f->ndies) * f->blocks_per_die + (uint32_t)(i / f->ndies);
}

static void scan_setup(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	op->block = scan_block(f, i);
	op->page = 0;
	op->data = NULL;
}

/* A spare written by this FTL (any format): magic, CRC and version. */
static bool spare_ours(const void *spare, struct ftl_spare *sp)
{
	memcpy(sp, spare, sizeof *sp);
	return sp->magic == FTL_SPARE_MAGIC && sp->version == FTL_MEDIA_VERSION &&
	       sp->crc == crc32c(0, sp, offsetof(struct ftl_spare, crc));
}

static void scan_result(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct scan_ctx *x = ctx;
	struct ftl_scan_report *r = x->rep;
	uint32_t b = op->block;
	struct ftl_spare sp;

	if (op->status == NAND_BLOCK_BAD) {
		r->blocks_bad++;
		return;
	}
	if (b == f->sb_block[0] || b == f->sb_block[1]) {
		r->blocks_meta++;
		return;
	}
	if (op->status != NAND_OK && op->status != NAND_CORRECTED) {
		r->blocks_unreadable++;
		return;
	}
	const uint8_t *s = op->spare;
	bool erased = true;
	for (uint32_t k = 0; erased && k < f->spare_size; k++)
		erased = s[k] == 0xFF;
	if (erased) {
		r->blocks_blank++;
		return;
	}
	if (!spare_ours(op->spare, &sp)) {
		r->blocks_foreign++;
		return;
	}
	if (sp.type == FTL_PG_CKPT) {
		r->blocks_meta++;
		if (sp.lba == 0 && x->ncand < MAX_CP_CANDIDATES) {
			x->cand[x->ncand] = b;
			x->cand_seq[x->ncand] = sp.seq;
			x->ncand++;
		}
		return;
	}
	if (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM) {
		r->blocks_foreign++;
		return;
	}
	r->blocks_log++;
	uint32_t k;
	for (k = 0; k < x->nfmt && x->fmt[k].id != sp.format_id; k++)
		;
	if (k == x->nfmt) {
		if (x->nfmt == MAX_FORMATS)
			return;
		x->nfmt++;
		x->fmt[k].id = sp.format_id;
	}
	x->fmt[k].blocks++;
	if (sp.seq > x->fmt[k].max_seq)
		x->fmt[k].max_seq = sp.seq;
}

/* Count valid and damaged pages of both superblock blocks. */
static void scan_superblocks(struct ftl *f, struct ftl_scan_report *r)
{
	uint8_t *page = aligned_alloc(4096, f->page_size), *spare = malloc(f->spare_size);
	if (!page || !spare)
		goto out;
	for (int i = 0; i < 2; i++) {
		for (uint32_t p = 0; p < f->ppb; p++) {
			struct nand_op op = { .type = NAND_OP_READ, .block = f->sb_block[i], .page = p,
					      .data = page, .spare = spare };
			enum nand_status st = nand_op_sync(f->dev, &op);
			bool erased = st == NAND_OK;
			for (uint32_t k = 0; erased && k < f->spare_size; k++)
				erased = spare[k] == 0xFF;
			if (erased)
				break;
			struct ftl_sb sb;
			memcpy(&sb, page, sizeof sb);
			if ((st == NAND_OK || st == NAND_CORRECTED) &&
			    memcmp(sb.magic, FTL_SB_MAGIC, 8) == 0 && sb.version == FTL_MEDIA_VERSION &&
			    sb.size == sizeof sb && sb.crc == crc32c(0, &sb, offsetof(struct ftl_sb, crc)))
				r->sb_pages_valid++;
			else
				r->sb_pages_damaged++;
		}
	}
out:
	free(page);
	free(spare);
}

static int scan(struct ftl *f, struct ftl_scan_report *r, char *err, size_t errlen)
{
	struct scan_ctx x = { .rep = r };
	struct ftl_sb sb;
	char e[256];

	memset(r, 0, sizeof *r);
	r->blocks = f->nblocks;
	sb_locate(f);
	scan_superblocks(f, r);
	if (sb_load(f, &sb, e, sizeof e) == 0) {
		r->sb_valid = true;
		r->sb_format_id = sb.format_id;
		r->sb_seq = sb.sb_seq;
		r->sb_units = sb.units;
		r->sb_sector_size = sb.sector_size;
	}
	int rc = read_batch(f, f->nblocks, 256, scan_setup, scan_result, &x);
	if (rc) {
		snprintf(err, errlen, "reading the media failed: %s", strerror(-rc));
		return rc;
	}
	r->formats_seen = x.nfmt;
	/* the log's format: the superblock's, else the most common one */
	uint32_t best = 0;
	for (uint32_t k = 0; k < x.nfmt; k++) {
		if (r->sb_valid ? x.fmt[k].id == r->sb_format_id : x.fmt[k].blocks > x.fmt[best].blocks)
			best = k;
	}
	if (x.nfmt) {
		r->format_id = x.fmt[best].id;
		r->max_seq = x.fmt[best].max_seq;
	}
	/* the newest checkpoint that checks out, from the newest down */
	r->cp_candidates = x.ncand;
	for (;;) {
		int pick = -1;
		for (uint32_t k = 0; k < x.ncand; k++)
			if (x.cand[k] != FTL_NO_BLOCK && (pick < 0 || x.cand_seq[k] > x.cand_seq[pick]))
				pick = (int)k;
		if (pick < 0)
			break;
		struct ftl_cp_hdr h;
		const char *why = "";
		f->units = 0;
		f->format_id = 0;
		rc = cp_verify(f, x.cand[pick], &h, &why);
		if (rc == 0 && (!x.nfmt || h.format_id == r->format_id || !r->sb_valid)) {
			r->cp_found = true;
			r->cp_block = x.cand[pick];
			r->cp_nblocks = h.nblocks;
			r->cp_seq = h.cp_seq;
			r->cp_units = h.units;
			r->cp_sector_size = h.sector_size;
			r->cp_format_time = h.format_time;
			if (h.format_id != r->format_id) {
				/* the checkpoint names the format the log belongs to */
				r->format_id = h.format_id;
				for (uint32_t k = 0; k < x.nfmt; k++)
					if (x.fmt[k].id == h.format_id)
						r->max_seq = x.fmt[k].max_seq;
			}
			break;
		}
		if (rc && rc != -EILSEQ) {
			snprintf(err, errlen, "reading checkpoint block %u failed: %s", x.cand[pick],
				 strerror(-rc));
			return rc;
		}
		r->cp_damaged++;
		x.cand[pick] = FTL_NO_BLOCK;
	}
	return 0;
}

/* The superblock written again from what the scan of f's media found (r)
 * and the caller's format parameters (p). */
static int rebuild_from(struct ftl *f, const struct ftl_scan_report *r,
			const struct ftl_rebuild_params *p, char *err, size_t errlen)
{
	int rc = -EINVAL;
	if (r->sb_valid) {
		snprintf(err, errlen, "the superblock is valid (format %016llx); nothing to rebuild",
			 (unsigned long long)r->sb_format_id);
		rc = -EEXIST;
		goto out;
	}
	if (!r->format_id) {
		snprintf(err, errlen, "no FTL log and no checkpoint on the media: nothing to "
				      "rebuild from (format the device instead)");
		goto out;
	}
	uint64_t units = r->cp_found ? r->cp_units : 0;
	if (p && p->capacity_bytes) {
		uint64_t want = p->capacity_bytes / FTL_UNIT_SIZE;
		if (units && want != units) {
			snprintf(err, errlen, "the checkpoint records %llu bytes, not %llu",
				 (unsigned long long)(units * FTL_UNIT_SIZE),
				 (unsigned long long)p->capacity_bytes);
			goto out;
		}
		units = want;
	}
	uint32_t sector = r->cp_found ? r->cp_sector_size : 0;
	if (p && p->sector_size) {
		if (sector && sector != p->sector_size) {
			snprintf(err, errlen, "the checkpoint records %u-byte sectors, not %u", sector,
				 p->sector_size);
			goto out;
		}
		sector = p->sector_size;
	}
	if (!units || !sector) {
		snprintf(err, errlen, "%s: give the %s%s%s the device was formatted with",
			 r->cp_found ? "the checkpoint predates recording the format"
				    : "no intact checkpoint on the media",
			 units ? "" : "capacity", !units && !sector ? " and the " : "",
			 sector ? "" : "sector size");
		goto out;
	}
	if ((sector != 512 && sector != 4096) || units > nand_raw_bytes(&f->geo) / FTL_UNIT_SIZE) {
		snprintf(err, errlen, "impossible format: %u-byte sectors, %llu bytes", sector,
			 (unsigned long long)(units * FTL_UNIT_SIZE));
		goto out;
	}
	f->format_id = r->format_id;
	f->sector_size = sector;
	f->units = units;
	f->format_time = r->cp_found && r->cp_format_time ? r->cp_format_time : (uint64_t)time(NULL);
	f->sb_seq = 1;
	f->open_count = 0;
	f->cp.phase = CP_IDLE;
	f->cp.cur_hdr_block = r->cp_found ? r->cp_block : FTL_NO_BLOCK;
	f->cp.cur_nblocks = r->cp_found ? r->cp_nblocks : 0;
	f->cp.cur_seq = r->cp_found ? r->cp_seq : 0;
	rc = sb_write_initial(f, false, err, errlen);
	if (!rc)
		rc = nand_sync(f->dev);
	if (rc && !err[0])
		snprintf(err, errlen, "syncing the medium failed: %s", strerror(-rc));
out:
	return rc;
}

/* The scan of dev's media into rep through an FTL of its geometry, never
 * opened; with p, the superblock rebuilt from it.  err: NULL, or errlen
 * bytes that take the reason. */
static int scan_media(struct nand_dev *dev, struct ftl_scan_report *rep,
		      const struct ftl_rebuild_params *p, bool rebuild, char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = 0;
	struct ftl *f = calloc(1, sizeof *f);
	if (!f)
		return -ENOMEM;
	int rc = ftl_geometry_init(f, dev, err, errlen);
	if (!rc)
		rc = scan(f, rep, err, errlen);
	if (!rc && rebuild)
		rc = rebuild_from(f, rep, p, err, errlen);
	ftl_geometry_fini(f);
	free(f);
	return rc;
}

int ftl_scan(struct nand_dev *dev, struct ftl_scan_report *rep, char *err, size_t errlen)
{
	return scan_media(dev, rep, NULL, false, err, errlen);
}

int ftl_rebuild_superblock(struct nand_dev *dev, const struct ftl_rebuild_params *p, char *err,
			   size_t errlen)
{
	struct ftl_scan_report r;
	return scan_media(dev, &r, p, true, err, errlen);
}
