/*
 * ftl/checkpoint_load.c - reading checkpoints: at open, the current one the
 * superblock names (or its header's copy, or the previous one when it is
 * damaged) loaded into the l2p with its lists, counters and erase counts
 * applied, and the previous one kept (cp_load, called by ftl.c's open
 * steps); checking one without loading it (cp_verify, repair.c).  Sets
 * f->cp's current and previous checkpoint at open, before checkpoint.c
 * runs; synchronous reads.
 */
#include <errno.h>
#include <inttypes.h>

#include "ftl/checkpoint_int.h"

struct cp_load_ctx {
	const struct ftl_cp_hdr *h;
	const uint32_t *blocks;
	const uint32_t *index;  /* sparse: map index of the j-th written page */
	int error;
	uint32_t per_page;
	bool load;           /* copy into the l2p (else only check) */
	/* FTL_CP_PARITY: the groups, and the pages to rebuild from them */
	const uint32_t *pblocks, *gend;
	uint64_t nread;
	uint64_t *failed;
	uint64_t nfailed;
};

/* j: the j-th l2p page written, striped over the l2p blocks */
static void cp_load_setup(struct ftl *f, void *ctx, uint64_t j, struct nand_op *op)
{
	struct cp_load_ctx *x = ctx;
	op->block = x->blocks[cp_l2p_block_index(f, j, x->h->nblocks)];
	op->page = cp_l2p_page(f, j, x->h->nblocks);
}

/* 0 if op read checkpoint page lba of this checkpoint intact, with
 * *crc its data CRC; -EIO if unreadable, -EILSEQ if it is another page */
static int cp_page_check(struct ftl *f, const struct cp_load_ctx *x, const struct nand_op *op,
			 uint32_t lba, uint32_t *crc)
{
	struct ftl_spare sp;
	if (op->status != NAND_OK && op->status != NAND_CORRECTED)
		return -EIO;
	if (spare_parse(f, op->spare, &sp) != 0 || sp.type != FTL_PG_CKPT || sp.lba != lba ||
	    sp.seq != x->h->cp_seq)
		return -EILSEQ;
	if (lba != FTL_CP_PARITY_LBA && sp.data_crc != crc32c(0, op->data, f->page_size))
		return -EILSEQ;
	*crc = sp.data_crc;
	return 0;
}

static void cp_load_apply(struct ftl *f, struct cp_load_ctx *x, uint64_t j, const void *data)
{
	uint64_t i = x->index ? x->index[j] : j;
	if (!x->load)
		return;
	uint64_t first = i * x->per_page;
	uint64_t n = f->units - first < x->per_page ? f->units - first : x->per_page;
	memcpy(&f->l2p[first], data, n * sizeof(uint32_t));
}

static void cp_load_result(struct ftl *f, void *ctx, uint64_t j, struct nand_op *op)
{
	struct cp_load_ctx *x = ctx;
	uint64_t i = x->index ? x->index[j] : j;
	uint32_t crc;
	int rc = cp_page_check(f, x, op, x->h->hdr_pages + (uint32_t)i, &crc);
	if (rc && x->pblocks) {
		/* rebuilt from its stripe after the batch */
		if (!x->failed && !(x->failed = malloc(x->nread * sizeof *x->failed))) {
			x->error = -ENOMEM;
			return;
		}
		x->failed[x->nfailed++] = j;
		return;
	}
	if (rc) {
		x->error = rc;
		return;
	}
	cp_load_apply(f, x, j, op->data);
}

/*
 * Rebuild the j-th l2p page written from the other pages of its stripe and
 * their parity page (media.h, FTL_CP_PARITY) into out; 0 if the result
 * has the CRC the page was written with.  Reads one page at a time: only
 * for pages that could not be read (a dead die: one in row width).
 */
static int cp_rebuild_page(struct ftl *f, struct cp_load_ctx *x, uint64_t j, uint8_t *out,
			   uint8_t *tmp, uint8_t *spare)
{
	uint32_t nb = x->h->nblocks, col = (uint32_t)(j % nb), row = (uint32_t)(j / nb), g = 0;
	while (col >= x->gend[g])
		g++;
	if (x->pblocks[g] == FTL_NO_BLOCK)
		return -EIO;
	uint32_t want, crc;
	struct nand_op op = { .type = NAND_OP_READ, .block = x->pblocks[g], .page = row,
			      .data = out, .spare = spare };
	op.status = nand_op_sync(f->dev, &op);
	if (op.status == NAND_POWER_LOSS)
		return -ENODEV;
	if (cp_page_check(f, x, &op, FTL_CP_PARITY_LBA, &want))
		return -EIO;
	for (uint32_t c = g ? x->gend[g - 1] : 0; c < x->gend[g]; c++) {
		uint64_t jj = (uint64_t)row * nb + c;
		if (c == col || jj >= x->nread)
			continue; /* the lost page, or one never written */
		uint64_t i = x->index ? x->index[jj] : jj;
		struct nand_op m = { .type = NAND_OP_READ, .block = x->blocks[c], .page = row,
				     .data = tmp, .spare = spare };
		m.status = nand_op_sync(f->dev, &m);
		if (m.status == NAND_POWER_LOSS)
			return -ENODEV;
		if (cp_page_check(f, x, &m, x->h->hdr_pages + (uint32_t)i, &crc))
			return -EIO;
		xor_into(out, tmp, f->page_size);
		want ^= crc;
	}
	return crc32c(0, out, f->page_size) == want ? 0 : -EIO;
}

enum cp_read_mode {
	CP_READ_LISTS,  /* the header and its lists only */
	CP_READ_CHECK,  /* and every l2p page */
	CP_READ_LOAD,   /* and the l2p pages into f->l2p */
};

/*
 * cp_read's last step: the l2p pages of the checkpoint in block (header h
 * and its lists checked, laid out as l says) read and checked
 * (none for CP_READ_LISTS), those unreadable rebuilt from parity, and for
 * CP_READ_LOAD copied into f->l2p.  0, -EILSEQ with *why, -ENOMEM, or
 * -EIO (no power).
 */
static int cp_read_l2p(struct ftl *f, uint32_t block, const struct ftl_cp_hdr *hp,
		       const uint32_t *lists, const struct cp_layout *l, enum cp_read_mode mode,
		       uint8_t *spare, const char **why)
{
	const struct ftl_cp_hdr h = *hp;
	bool sparse = h.flags & FTL_CP_SPARSE, par = h.flags & FTL_CP_PARITY;
	const uint32_t *extra = lists + l->par;
	uint32_t *index = NULL;
	int rc = -EILSEQ;

	uint32_t nread = h.l2p_pages;
	if (mode == CP_READ_LISTS)
		nread = 0;
	else if (sparse) {
		/* the written pages' map indexes, in the order written */
		const uint32_t *bm = lists + l->bitmap;
		index = malloc(((size_t)h.l2p_written + 1) * sizeof *index);
		if (!index) {
			rc = -ENOMEM;
			goto out;
		}
		nread = 0;
		for (uint32_t i = 0; i < l->nbitmap * 32; i++) {
			if (!(bm[i / 32] & (1u << (i % 32))))
				continue;
			if (i >= h.l2p_pages || nread == h.l2p_written) {
				nread = UINT32_MAX;
				break;
			}
			index[nread++] = i;
		}
		if (nread != h.l2p_written) {
			*why = "bitmap of written l2p pages does not match the header";
			goto out;
		}
	}
	struct cp_load_ctx x = { .h = &h, .blocks = lists, .index = index,
				 .per_page = f->page_size / 4, .load = mode == CP_READ_LOAD,
				 .nread = nread };
	if (par) {
		x.pblocks = extra + 1;
		x.gend = extra + 1 + h.ngroups;
	}
	rc = read_batch(f, nread, 256, cp_load_setup, cp_load_result, &x);
	if (!rc && !x.error && x.nfailed) {
		uint8_t *pg = aligned_alloc(4096, 2 * (size_t)f->page_size);
		if (!pg)
			x.error = -ENOMEM;
		for (uint64_t k = 0; pg && k < x.nfailed && !x.error; k++) {
			int r = cp_rebuild_page(f, &x, x.failed[k], pg, pg + f->page_size, spare);
			if (r == -ENODEV)
				rc = -EIO; /* no power */
			else if (r)
				x.error = -EIO;
			else
				cp_load_apply(f, &x, x.failed[k], pg);
			if (rc)
				break;
		}
		free(pg);
		if (!rc && !x.error)
			ftl_log(FTL_LOG_WARNING, "checkpoint at block %u: %" PRIu64 " l2p pages unreadable, rebuilt "
				"from parity", block, x.nfailed);
	}
	free(x.failed);
	if (rc)
		goto out;
	if (x.error == -ENOMEM) {
		rc = -ENOMEM;
		goto out;
	}
	if (x.error) {
		rc = -EILSEQ;
		*why = x.error == -EIO ? "l2p page unreadable" : "l2p page damaged";
		goto out;
	}
	rc = 0;
out:
	free(index);
	return rc;
}

/*
 * Read and check the checkpoint whose header is in block: header, block
 * lists, and (but for CP_READ_LISTS) every l2p page (spare and data CRC),
 * which CP_READ_LOAD copies into f->l2p.  want_seq: the cp_seq the
 * superblock names, or NULL for any (then f->units and f->format_id are
 * taken from the header: scanning).  Returns 0 with *h and *hbuf (header
 * pages; caller frees), -EILSEQ with *why when something does not check
 * out, -ENOMEM, or -EIO (no power).
 */
static int cp_read(struct ftl *f, uint32_t block, const uint64_t *want_seq,
		   enum cp_read_mode mode, struct ftl_cp_hdr *hp, uint8_t **hbuf_out,
		   const char **why)
{
	uint8_t *hbuf = NULL, *spare = malloc(f->spare_size);
	struct ftl_cp_hdr h;
	int rc = -EILSEQ;

	*hbuf_out = NULL;
	if (!spare)
		return -ENOMEM;
	if (block >= f->nblocks) {
		*why = "bad header block number";
		goto out;
	}
	/* header page 0 first: it says how many pages the header has */
	hbuf = aligned_alloc(4096, f->page_size);
	if (!hbuf) {
		rc = -ENOMEM;
		goto out;
	}
	struct nand_op op = { .type = NAND_OP_READ, .block = block, .page = 0, .data = hbuf,
			      .spare = spare };
	enum nand_status st = nand_op_sync(f->dev, &op);
	if (st == NAND_POWER_LOSS) {
		rc = -EIO;
		goto out;
	}
	if (st != NAND_OK && st != NAND_CORRECTED) {
		*why = "header page unreadable";
		goto out;
	}
	memcpy(&h, hbuf, sizeof h);
	if (memcmp(h.magic, FTL_CP_MAGIC, 8) != 0 || h.version != FTL_MEDIA_VERSION ||
	    h.size != sizeof h || h.crc != crc32c(0, &h, offsetof(struct ftl_cp_hdr, crc))) {
		*why = "header magic, version or checksum";
		goto out;
	}
	if (!want_seq && h.units && h.units <= nand_raw_bytes(&f->geo) / FTL_UNIT_SIZE) {
		f->units = h.units;
		f->format_id = h.format_id;
	}
	/* before sparse checkpoints: every l2p page, and no bitmap */
	bool sparse = h.flags & FTL_CP_SPARSE, par = h.flags & FTL_CP_PARITY;
	/* with parity: the mirror, then pblock[] and gend[] (counted only
	 * for a number of groups in bounds: refused below otherwise) */
	struct cp_layout l;
	cp_layout(f, h.nblocks, h.nopen, h.nbad, sparse, par && h.ngroups && h.ngroups <= h.nblocks,
		  h.ngroups, &l);
	/* then the bands marked for refresh: a count and the list, whose
	 * length is known once the pages are read (bounded here) */
	bool refl = h.flags & FTL_CP_REFRESH;
	uint32_t hdr_min = cp_layout_pages(f, &l, refl);
	uint32_t hdr_max = refl ? cp_layout_pages(f, &l, 1 + (size_t)f->nbands) : hdr_min;
	if (h.format_id != f->format_id || (want_seq && h.cp_seq != *want_seq) ||
	    h.cp_seq >= FTL_SEQ_LIMIT ||
	    h.units != f->units || h.l2p_pages != cp_l2p_pages(f) ||
	    (h.flags & ~(FTL_CP_SPARSE | FTL_CP_PARITY | FTL_CP_DOOMED | FTL_CP_REFRESH)) ||
	    (par && (!l.npar || !sparse)) ||
	    (!par && h.ngroups) || (!sparse && h.l2p_written) ||
	    (sparse && h.l2p_written > h.l2p_pages) ||
	    h.nblocks < cp_l2p_blocks(f) || h.nblocks >= cp_l2p_blocks(f) + f->row_width ||
	    h.hdr_pages == 0 || h.hdr_pages > f->ppb ||
	    h.hdr_pages < hdr_min || h.hdr_pages > hdr_max) {
		*why = "header fields do not match the format";
		goto out;
	}
	free(hbuf);
	hbuf = aligned_alloc(4096, (size_t)h.hdr_pages * f->page_size);
	if (!hbuf) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t p = 0; p < h.hdr_pages; p++) {
		struct nand_op hop = { .type = NAND_OP_READ, .block = block, .page = p,
				       .data = hbuf + (size_t)p * f->page_size, .spare = spare };
		st = nand_op_sync(f->dev, &hop);
		if (st == NAND_POWER_LOSS) {
			rc = -EIO;
			goto out;
		}
		if (st != NAND_OK && st != NAND_CORRECTED) {
			*why = "header page unreadable";
			goto out;
		}
	}
	const uint32_t *lists = (const uint32_t *)(hbuf + sizeof h);
	size_t nlist = l.bitmap, nwords = l.refresh;
	const uint32_t *reflist = NULL;
	uint32_t nref = 0;
	if (refl) {
		nref = lists[l.refresh];
		reflist = lists + l.refresh + 1;
		if (!nref || nref > f->nbands || h.hdr_pages != cp_layout_pages(f, &l, 1 + (size_t)nref)) {
			*why = "refresh list does not match the header";
			goto out;
		}
		nwords += 1 + nref;
	}
	if (h.lists_crc != crc32c(0, lists, nwords * sizeof(uint32_t))) {
		*why = "block lists checksum";
		goto out;
	}
	const uint32_t *extra = lists + l.par;
	for (uint32_t g = 0; par && g < h.ngroups; g++) {
		uint32_t pb = extra[1 + g], end = extra[1 + h.ngroups + g];
		if ((pb != FTL_NO_BLOCK && pb >= f->nblocks) || end <= (g ? extra[h.ngroups + g] : 0) ||
		    end > h.nblocks || (g + 1 == h.ngroups && end != h.nblocks) ||
		    (extra[0] != FTL_NO_BLOCK && extra[0] >= f->nblocks)) {
			*why = "parity groups do not match the header";
			goto out;
		}
	}
	for (uint32_t i = 0; i < nref; i++)
		if (reflist[i] >= f->nbands) {
			*why = "refresh list does not match the header";
			goto out;
		}
	uint32_t bad_mask = h.flags & FTL_CP_DOOMED ? ~FTL_CP_BAD_DOOMED : UINT32_MAX;
	for (size_t i = 0; i < nlist; i++)
		if ((i < (size_t)h.nblocks + h.nopen ? lists[i] : lists[i] & bad_mask) >= f->nblocks) {
			*why = "block number out of range";
			goto out;
		}
	/* its own blocks (l2p, the header's copy, parity) are erased when a
	 * newer checkpoint commits: none may be a superblock's */
	bool own_sb = blk_is_sb(f, block);
	for (uint32_t i = 0; i < h.nblocks; i++)
		own_sb |= blk_is_sb(f, lists[i]);
	for (uint32_t i = 0; par && i <= h.ngroups; i++)
		own_sb |= extra[i] != FTL_NO_BLOCK && blk_is_sb(f, extra[i]);
	if (own_sb) {
		*why = "a superblock block listed as its own";
		goto out;
	}
	rc = cp_read_l2p(f, block, &h, lists, &l, mode, spare, why);
	if (rc)
		goto out;
	*hp = h;
	*hbuf_out = hbuf;
	hbuf = NULL;
	rc = 0;
out:
	free(hbuf);
	free(spare);
	return rc;
}

int cp_verify(struct ftl *f, uint32_t block, struct ftl_cp_hdr *h, const char **why)
{
	uint8_t *hbuf;
	int rc = cp_read(f, block, NULL, CP_READ_CHECK, h, &hbuf, why);
	free(hbuf);
	return rc;
}

/* The blocks of the checkpoint whose header h (lists after it) was read,
 * but its header block: the l2p blocks, and with parity the parity blocks
 * and the header's copy (*mirror, else FTL_NO_BLOCK).  Returns how many
 * (at most 2 * (l2p blocks + row width) + 1: cp_read bounds the counts). */
static uint32_t cp_list_blocks(const struct ftl *f, const struct ftl_cp_hdr *h,
			       const uint32_t *lists, uint32_t *out, uint32_t *mirror)
{
	uint32_t n = 0;
	*mirror = FTL_NO_BLOCK;
	for (uint32_t i = 0; i < h->nblocks; i++)
		out[n++] = lists[i];
	if (h->flags & FTL_CP_PARITY) {
		struct cp_layout l;
		cp_layout_of(f, h, &l);
		const uint32_t *extra = lists + l.par;
		*mirror = extra[0];
		for (uint32_t i = 0; i <= h->ngroups; i++)
			if (extra[i] != FTL_NO_BLOCK)
				out[n++] = extra[i];
	}
	return n;
}

/* Read (mode) the checkpoint a superblock names: its header block, or the
 * header's copy (mirror, FTL_NO_BLOCK: none) if that fails.  As cp_read. */
static int cp_read_named(struct ftl *f, uint32_t block, uint32_t mirror, uint64_t seq,
			 enum cp_read_mode mode, struct ftl_cp_hdr *h, uint8_t **hbuf,
			 const char **why)
{
	if (block >= f->nblocks) {
		/* not a block: no copy makes it one (cp_apply marks it) */
		*why = "bad header block number";
		return -EILSEQ;
	}
	int rc = cp_read(f, block, &seq, mode, h, hbuf, why);
	if (rc == -EILSEQ && mirror < f->nblocks) {
		/* the header's copy, on another die */
		const char *why2 = "";
		int rc2 = cp_read(f, mirror, &seq, mode, h, hbuf, &why2);
		if (rc2 == 0)
			ftl_log(FTL_LOG_WARNING, "checkpoint header at block %u is damaged (%s); read from its copy at "
				"block %u", block, *why, mirror);
		else if (rc2 == -EILSEQ)
			*why = why2;
		rc = rc2;
	}
	return rc;
}

/*
 * The erase counts after the header pages of the checkpoint in block (h):
 * applied if they are there and check out, else every count stays 0 (a
 * checkpoint of a version before them, or their pages unreadable) and
 * blk_erases_open takes the medium's where it keeps them.  Cost: their
 * pages' reads (a count per band) and O(nblocks).
 */
static void cp_wear_load(struct ftl *f, uint32_t block, const struct ftl_cp_hdr *h)
{
	struct cp_state *c = &f->cp;
	const char *why = NULL;
	uint32_t room = f->ppb - h->hdr_pages;
	uint8_t *buf = room ? aligned_alloc(4096, (size_t)room * f->page_size) : NULL;
	uint8_t *spare = malloc(f->spare_size);
	struct ftl_cp_wear w = { .nbands = 0 };
	uint32_t npages = 1;
	for (uint32_t p = 0; buf && spare && p < npages; p++) {
		struct nand_op op = { .type = NAND_OP_READ, .block = block, .page = h->hdr_pages + p,
				      .data = buf + (size_t)p * f->page_size, .spare = spare };
		enum nand_status st = nand_op_sync(f->dev, &op);
		struct ftl_spare sp;
		if (st != NAND_OK && st != NAND_CORRECTED) {
			why = "a page of them unreadable";
			break;
		}
		if (spare_parse(f, spare, &sp) || sp.type != FTL_PG_CKPT ||
		    sp.lba != FTL_CP_WEAR_LBA || sp.seq != h->cp_seq) {
			why = p ? "a page of them missing" : "none in the checkpoint";
			break;
		}
		if (p)
			continue;
		memcpy(&w, buf, sizeof w);
		if (memcmp(w.magic, FTL_WEAR_MAGIC, 8) || w.version != FTL_MEDIA_VERSION ||
		    w.size != sizeof w || w.crc != crc32c(0, &w, offsetof(struct ftl_cp_wear, crc)) ||
		    w.format_id != f->format_id || w.cp_seq != h->cp_seq || w.nbands != f->nbands ||
		    w.nexc > f->nblocks || cp_wear_pages(f, w.nexc) > room) {
			why = "their header does not check out";
			break;
		}
		npages = cp_wear_pages(f, w.nexc);
	}
	const uint32_t *band = buf ? (const uint32_t *)(buf + sizeof w) : NULL;
	uint32_t nfresh = cp_fresh_words(f);
	const uint32_t *exc = band ? band + w.nbands + nfresh : NULL;
	if (!buf || !spare)
		why = "no memory to read them";
	else if (!why && w.words_crc != crc32c(0, band, ((size_t)w.nbands + nfresh + 2 * w.nexc) * 4))
		why = "their checksum does not match";
	for (uint32_t i = 0; !why && i < w.nexc; i++)
		if (exc[2 * i] >= f->nblocks)
			why = "a block number out of range";
	free(c->load_fresh);
	c->load_fresh = NULL;
	if (!why) {
		for (uint32_t b = 0; b < f->nblocks; b++)
			blk_erases_set(f, b, band[block_band(f, b)]);
		for (uint32_t i = 0; i < w.nexc; i++)
			blk_erases_set(f, exc[2 * i], exc[2 * i + 1]);
		/* for recovery (without: it counts less closely) */
		if ((c->load_fresh = malloc(nfresh * sizeof(uint32_t))))
			memcpy(c->load_fresh, band + w.nbands, nfresh * sizeof(uint32_t));
	} else {
		ftl_log(FTL_LOG_NOTICE, "checkpoint at block %u: no erase counts (%s); they start from %s", block,
			why, f->dev->caps & NAND_CAP_ERASE_COUNTS ? "the medium's" : "0");
	}
	free(buf);
	free(spare);
}

/* The checkpoint whose header is in block (h, hbuf: read and loaded into
 * the l2p) is current: its blocks META, the blocks open at its cp_seq
 * flagged, its bad, doomed and refresh lists and counters applied. */
static void cp_apply(struct ftl *f, uint32_t block, const struct ftl_cp_hdr *hp,
		     const uint8_t *hbuf)
{
	struct cp_state *c = &f->cp;
	const struct ftl_cp_hdr h = *hp;
	const uint32_t *lists = (const uint32_t *)(hbuf + sizeof h);
	c->cur_hdr_block = block;
	c->cur_nblocks = cp_list_blocks(f, &h, lists, c->cur_blocks, &c->cur_mirror);
	c->cur_seq = h.cp_seq;
	blk_mark_initial(f, block, BLK_META, false);
	for (uint32_t i = 0; i < c->cur_nblocks; i++)
		blk_mark_initial(f, c->cur_blocks[i], BLK_META, false);
	for (uint32_t i = 0; i < h.nopen; i++)
		f->blk[lists[h.nblocks + i]].flags |= BLKF_CP_OPEN;
	free(c->load_doomed);
	c->load_doomed = NULL;
	c->nload_doomed = 0;
	for (uint32_t i = 0; i < h.nbad; i++) {
		uint32_t e = lists[h.nblocks + h.nopen + i];
		uint32_t b = e & ~FTL_CP_BAD_DOOMED;
		if (f->blk[b].state == BLK_META)
			continue;
		if (!(e & FTL_CP_BAD_DOOMED) || !(h.flags & FTL_CP_DOOMED)) {
			blk_mark_initial(f, b, BLK_BAD, true);
			continue;
		}
		/* doomed: retired once recovery has classified it */
		if (!c->load_doomed && !(c->load_doomed = malloc(h.nbad * sizeof(uint32_t))))
			continue; /* found again when its program fails again */
		c->load_doomed[c->nload_doomed++] = b;
	}
	/* bands marked for refresh at the checkpoint: marked again once
	 * recovery has classified their blocks */
	free(c->load_refresh);
	c->load_refresh = NULL;
	c->nload_refresh = 0;
	if (h.flags & FTL_CP_REFRESH) {
		struct cp_layout l;
		cp_layout_of(f, &h, &l);
		const uint32_t *extra = lists + l.refresh;
		uint32_t nref = extra[0];
		c->load_refresh = malloc(nref * sizeof(uint32_t));
		if (c->load_refresh) { /* else refreshed when the fault is found again */
			memcpy(c->load_refresh, extra + 1, nref * sizeof(uint32_t));
			c->nload_refresh = nref;
		}
	}
	f->st.host_pages_written = h.stats_host_pages_written;
	f->st.nand_pages_programmed = h.stats_nand_pages_programmed;
	f->st.blocks_erased = h.stats_blocks_erased;
	f->st.host_read_bytes = h.stats_host_read_bytes;
	f->st.host_write_bytes = h.stats_host_write_bytes;
	f->st.nand_pages_read = h.stats_nand_pages_read;
	f->st.host_read_ops = h.stats_host_read_ops;
	f->st.host_write_ops = h.stats_host_write_ops;
	cp_wear_load(f, block, &h);
}

struct own_ctx {
	const uint32_t *blocks;
	uint64_t seq;
	bool ok;
};

static void own_setup(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct own_ctx *x = ctx;
	op->block = x->blocks[i];
	op->page = 0;
	op->data = NULL;
}

/* page 0 of a block of the checkpoint: erased (a sparse checkpoint's l2p
 * block it did not reach) or one of its pages; anything else (log, another
 * checkpoint, unreadable) and the block is not its own any more */
static void own_result(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op)
{
	struct own_ctx *x = ctx;
	struct ftl_spare sp;
	if (op->status != NAND_OK && op->status != NAND_CORRECTED) {
		x->ok = false;
		return;
	}
	int rc = spare_parse(f, op->spare, &sp);
	if (rc != -ENODATA && (rc || sp.type != FTL_PG_CKPT || sp.seq != x->seq))
		x->ok = false;
}

/*
 * Keep the previous checkpoint the superblock names (cp_load, once the
 * current one is loaded): its header's lists name its blocks, which stay
 * META until a newer checkpoint commits.  Only if every one is still its
 * own: not the current one's, not listed bad, and page 0 erased or a page
 * of it (a superblock older than the newest, whose newest pages were
 * unreadable, may name one released since, whose blocks hold log now).
 * Cost: its header pages and a spare read per block.  0 (kept or not:
 * why is logged), or -EIO/-ENOMEM.
 */
static int cp_keep_prev(struct ftl *f, const struct ftl_sb *sb)
{
	struct cp_state *c = &f->cp;
	struct ftl_cp_hdr h;
	uint8_t *hbuf = NULL;
	const char *why = "";
	int rc = cp_read_named(f, sb->prev_cp_block, sb->prev_cp_mirror_block, sb->prev_cp_seq,
			       CP_READ_LISTS, &h, &hbuf, &why);
	if (rc && rc != -EILSEQ)
		return rc;
	uint32_t n = 0, mirror = FTL_NO_BLOCK;
	if (!rc) {
		const uint32_t *lists = (const uint32_t *)(hbuf + sizeof h);
		c->prev_blocks[0] = sb->prev_cp_block;
		n = 1 + cp_list_blocks(f, &h, lists, c->prev_blocks + 1, &mirror);
		for (uint32_t i = 0; i < n && !rc; i++) {
			uint32_t b = c->prev_blocks[i];
			if (f->blk[b].state != BLK_UNKNOWN || blk_is_sb(f, b) ||
			    nand_factory_bad(f->dev, b)) {
				why = "a block of it is the current checkpoint's, bad or a superblock's";
				rc = -EILSEQ;
			}
		}
	}
	free(hbuf);
	if (!rc) {
		struct own_ctx x = { .blocks = c->prev_blocks, .seq = sb->prev_cp_seq, .ok = true };
		rc = read_batch(f, n, 64, own_setup, own_result, &x);
		if (rc)
			return rc;
		if (!x.ok) {
			why = "a block of it holds other pages now";
			rc = -EILSEQ;
		}
	}
	if (rc) {
		ftl_log(FTL_LOG_WARNING, "the previous checkpoint (block %u) is not kept (%s): until the next "
			"checkpoint commits there is none to fall back on", sb->prev_cp_block, why);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++)
		blk_mark_initial(f, c->prev_blocks[i], BLK_META, false);
	c->prev_hdr_block = sb->prev_cp_block;
	c->prev_mirror = mirror;
	c->prev_nblocks = n - 1;
	memmove(c->prev_blocks, c->prev_blocks + 1, (n - 1) * sizeof *c->prev_blocks);
	c->prev_seq = sb->prev_cp_seq;
	return 0;
}

static void l2p_clear(struct ftl *f)
{
	for (uint64_t u = 0; u < f->units; u++)
		f->l2p[u] = L2P_UNMAPPED;
}

/*
 * Load the checkpoint the superblock names, and keep the previous one
 * (cp_keep_prev).  A damaged current checkpoint is replaced by the
 * previous one, whose log after it GC keeps (cp.keep_seq): recovery then
 * replays from its cp_seq, which rebuilds the same state.  Returns 0, 1
 * (the previous one loaded) or -EILSEQ (neither: the l2p is empty and
 * the whole log is replayed), err saying why; -EIO (no power), -ENOMEM.
 */
int cp_load(struct ftl *f, const struct ftl_sb *sb, char *err, size_t errlen)
{
	struct cp_state *c = &f->cp;
	uint8_t *hbuf = NULL;
	struct ftl_cp_hdr h;
	const char *why = "", *why_prev = "";
	int rc;

	c->cur_seq = 0;
	c->cur_hdr_block = FTL_NO_BLOCK;
	c->cur_mirror = FTL_NO_BLOCK;
	c->cur_nblocks = 0;
	c->prev_hdr_block = FTL_NO_BLOCK;
	c->prev_mirror = FTL_NO_BLOCK;
	c->prev_nblocks = 0;
	c->prev_seq = 0;
	c->keep_seq = 0;
	if (sb->cp_block == FTL_NO_BLOCK)
		return 0;
	/* (two checkpoints with nothing logged between them share a cp_seq) */
	bool has_prev = (sb->flags & FTL_SB_CP_PREV) && sb->prev_cp_seq <= sb->cp_seq;
	uint32_t mirror = sb->flags & FTL_SB_CP_MIRROR ? sb->cp_mirror_block : FTL_NO_BLOCK;
	rc = cp_read_named(f, sb->cp_block, mirror, sb->cp_seq, CP_READ_LOAD, &h, &hbuf, &why);
	if (rc == 0) {
		cp_apply(f, sb->cp_block, &h, hbuf);
		free(hbuf);
		rc = has_prev ? cp_keep_prev(f, sb) : 0;
		c->keep_seq = c->prev_hdr_block != FTL_NO_BLOCK ? c->prev_seq : c->cur_seq;
		return rc;
	}
	if (rc != -EILSEQ)
		return rc;
	l2p_clear(f);
	if (has_prev) {
		rc = cp_read_named(f, sb->prev_cp_block, sb->prev_cp_mirror_block, sb->prev_cp_seq,
				   CP_READ_LOAD, &h, &hbuf, &why_prev);
		if (rc == 0) {
			cp_apply(f, sb->prev_cp_block, &h, hbuf);
			free(hbuf);
			c->keep_seq = c->cur_seq;
			snprintf(err, errlen, "checkpoint at block %u is damaged (%s); loaded the "
				 "previous one (block %u)", sb->cp_block, why, sb->prev_cp_block);
			return 1;
		}
		if (rc != -EILSEQ)
			return rc;
		l2p_clear(f);
		snprintf(err, errlen, "checkpoint at block %u is damaged (%s), and the previous one "
			 "(block %u) too (%s)", sb->cp_block, why, sb->prev_cp_block, why_prev);
		return -EILSEQ;
	}
	snprintf(err, errlen, "checkpoint at block %u is damaged (%s)", sb->cp_block, why);
	return -EILSEQ;
}
