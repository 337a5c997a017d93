/*
 * ftl/parity_recover.c - parity at open (recovery.c, ftl.c): the stripes a
 * crash cut short get their parity page (par_recover), a page unreadable
 * at open is rebuilt with synchronous reads (par_rebuild_sync), and the
 * log pages on a die found dead at open are found through the parity and
 * partial-parity pages (par_recover_dead_spares).  Synchronous, before the
 * ioDimm serves; owns no state of its own (its buffers live for one call).
 */
#include <errno.h>

#include "ftl/parity_int.h"

/* ---- recovery: stripes cut short ---------------------------------------------- */

static bool stop_status(enum nand_status st)
{
	return st == NAND_POWER_LOSS || st == NAND_IO_ERROR || st == NAND_INVALID;
}

/* Read page of b (data may be NULL): its status; *sp parsed, *valid when
 * the spare is ours and (with data) the data matches its CRC, *erased. */
static enum nand_status rec_read(struct ftl *f, uint32_t b, uint32_t page, uint8_t *data,
				 uint8_t *spare, struct ftl_spare *sp, bool *valid, bool *erased)
{
	struct nand_op op = { .type = NAND_OP_READ, .block = b, .page = page, .data = data,
			      .spare = spare };
	enum nand_status st = nand_op_sync(f->dev, &op);
	if (data)
		f->st.nand_pages_read++;
	else
		f->st.nand_spare_reads++;
	bool readable = st == NAND_OK || st == NAND_CORRECTED;
	int rc = readable ? spare_parse(f, spare, sp) : -EILSEQ;
	*erased = rc == -ENODATA;
	*valid = rc == 0 && (!data || sp->data_crc == crc32c(0, data, f->page_size));
	return st;
}

/*
 * Column c of a stripe (page `page`) is unreadable; the members in `have`
 * were read into bufs and spares (row_width pages and spares, by column).
 * If one of them is a partial-parity page covering c (the newest such),
 * c's page and spare are rebuilt into bufs[c] and spares[c] from it and
 * the other members it covers, and checked like a read: true.  O(row
 * width) XORs of a page.
 */
static bool ppl_rebuild_member(struct ftl *f, uint8_t *bufs, uint8_t *spares, uint32_t have,
			       uint32_t c, uint32_t page)
{
	uint32_t ps = f->page_size, ss = f->spare_size, ppl = UINT32_MAX, covers = 0;
	uint64_t best = 0;
	struct ftl_spare sp;
	for (uint32_t k = 0; k < f->row_width; k++) {
		if (!(have & (1u << k)))
			continue;
		memcpy(&sp, spares + (size_t)k * ss, sizeof sp);
		if (sp.type == FTL_PG_PPL && sp.lba == page && (sp.reserved & (1u << c)) &&
		    !(sp.reserved & ~have & ~(1u << c)) && (ppl == UINT32_MAX || sp.seq > best)) {
			ppl = k;
			best = sp.seq;
			covers = sp.reserved & ~(1u << c);
		}
	}
	if (ppl == UINT32_MAX)
		return false;
	uint8_t *d = bufs + (size_t)c * ps, *sa = spares + (size_t)c * ss;
	memcpy(d, bufs + (size_t)ppl * ps, ps);
	memset(sa, 0xFF, ss);
	memcpy(sa, spares + (size_t)ppl * ss + SPARE_SZ, SPARE_SZ);
	for (uint32_t k = 0; k < f->row_width; k++) {
		if (!(covers & (1u << k)))
			continue;
		xor_into(d, bufs + (size_t)k * ps, ps);
		xor_into(sa, spares + (size_t)k * ss, SPARE_SZ);
	}
	return spare_parse(f, sa, &sp) == 0 && sp.data_crc == crc32c(0, d, ps) &&
	       (sp.type == FTL_PG_DATA || sp.type == FTL_PG_TRIM || sp.type == FTL_PG_PPL);
}

/*
 * One band that was open at a crash: program the parity of its stripes
 * that have data but no parity page yet, in page order, into its parity
 * column.  The parity column is the member whose page 0 is a parity page,
 * or, when none is, a member not bad whose page 0 is erased, chosen by
 * par_pick_pcol (the crash came before the first stripe's parity; any
 * erased member will do, as the parity page names its members).  2: parity
 * programmed, every stripe with data protected; 1: nothing was missing; 0: not protected (GC
 * refreshes the band); -EIO: the medium stopped.
 * Cost: a spare read per member, ~log2(pages) spare reads, and a page read
 * per member for each stripe without parity (at most PAR_STRIPES + 1 of
 * them: a band hands out no stripe further ahead), synchronous.
 */
static int par_recover_band(struct ftl *f, uint32_t bi, uint8_t *bufs, uint8_t *spares,
			    uint8_t *acc, uint8_t *pspare)
{
	uint32_t w = f->row_width, ps = f->page_size, ss = f->spare_size;
	uint32_t pcol = UINT32_MAX, live = 0, empty = 0;
	struct ftl_spare sp;
	bool valid, erased;
	for (uint32_t c = 0; c < w; c++) {
		uint32_t b = band_block(f, bi, c);
		uint8_t st = f->blk[b].state;
		if (st == BLK_BAD || st == BLK_META)
			continue;
		live |= 1u << c;
		enum nand_status ns = rec_read(f, b, 0, NULL, spares, &sp, &valid, &erased);
		if (stop_status(ns))
			return -EIO;
		if (valid && sp.type == FTL_PG_PARITY)
			pcol = c;
		if (erased)
			empty |= 1u << c;
	}
	if (pcol == UINT32_MAX) /* no parity page yet: any erased member will do */
		pcol = par_pick_pcol(f, bi, empty);
	if (pcol == UINT32_MAX || !(live & ~(1u << pcol)))
		return 0;
	uint32_t pb = band_block(f, bi, pcol);
	/* the first stripe without parity: the parity column's first erased
	 * page (its pages are programmed in order) */
	uint32_t lo = 0, hi = f->data_pages;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		enum nand_status ns = rec_read(f, pb, mid, NULL, spares, &sp, &valid, &erased);
		if (stop_status(ns))
			return -EIO;
		if (erased)
			hi = mid;
		else
			lo = mid + 1;
	}
	/* the stripe before: its parity program may have been cut (torn
	 * page): that stripe stays unprotected, GC moves the band's data */
	int whole = 1;
	if (lo > 0) {
		enum nand_status ns = rec_read(f, pb, lo - 1, NULL, spares, &sp, &valid, &erased);
		if (stop_status(ns))
			return -EIO;
		if (!valid || sp.type != FTL_PG_PARITY)
			whole = 0;
	}
	for (uint32_t page = lo; page < f->data_pages; page++) {
		uint32_t mask = 0, unread = 0;
		uint64_t max_seq = 0;
		memset(acc, 0, ps);
		memset(pspare, 0, ss);
		for (uint32_t c = 0; c < w; c++) {
			if (c == pcol || !(live & (1u << c)))
				continue;
			uint8_t *d = bufs + (size_t)c * ps, *sa = spares + (size_t)c * ss;
			enum nand_status ns = rec_read(f, band_block(f, bi, c), page, d, sa, &sp, &valid,
						       &erased);
			if (stop_status(ns))
				return -EIO;
			if (!valid || (sp.type != FTL_PG_DATA && sp.type != FTL_PG_TRIM &&
				       sp.type != FTL_PG_PPL)) {
				/* erased, or torn by the crash: never acknowledged;
				 * or unreadable (a dead die): maybe in a PPL page */
				if (!erased)
					unread |= 1u << c;
				continue;
			}
			mask |= 1u << c;
		}
		/* an unreadable member the stripe's newest partial-parity page
		 * covers: rebuilt from it, a member like the others */
		for (uint32_t c = 0; c < w && mask; c++)
			if ((unread & (1u << c)) && ppl_rebuild_member(f, bufs, spares, mask, c, page))
				mask |= 1u << c;
		for (uint32_t c = 0; c < w; c++) {
			if (!(mask & (1u << c)))
				continue;
			xor_into(acc, bufs + (size_t)c * ps, ps);
			xor_into(pspare + SPARE_SZ, spares + (size_t)c * ss, SPARE_SZ);
			memcpy(&sp, spares + (size_t)c * ss, sizeof sp);
			if (sp.seq > max_seq)
				max_seq = sp.seq;
		}
		if (!mask)
			return whole && page > lo ? 2 : whole; /* nothing written from here on */
		struct ftl_spare psp = {
			.magic = FTL_SPARE_MAGIC, .type = FTL_PG_PARITY, .version = FTL_MEDIA_VERSION,
			.lba = page, .data_crc = crc32c(0, acc, ps), .seq = max_seq,
			.format_id = f->format_id, .reserved = mask,
		};
		psp.crc = crc32c(0, &psp, offsetof(struct ftl_spare, crc));
		memcpy(pspare, &psp, sizeof psp);
		if (ss > 2 * SPARE_SZ)
			memset(pspare + 2 * SPARE_SZ, 0xFF, ss - 2 * SPARE_SZ);
		struct nand_op op = { .type = NAND_OP_PROGRAM, .block = pb, .page = page, .data = acc,
				      .spare = pspare };
		enum nand_status st = nand_op_sync(f->dev, &op);
		if (stop_status(st))
			return -EIO;
		if (st != NAND_OK)
			return 0; /* the parity block failed */
		f->st.nand_pages_programmed++;
		f->st.parity_pages_programmed++;
		if (f->blk[pb].state == BLK_FREE)
			blk_set_closed(f, pb); /* it holds pages now: erased before reuse */
	}
	return whole ? 2 : 0;
}

int par_recover(struct ftl *f, const uint32_t *blocks, uint32_t n, uint32_t *done)
{
	*done = 0;
	if (!f->parity || !n || f->readonly)
		return 0;
	uint32_t w = f->row_width;
	uint8_t *seen = calloc(f->nbands, 1);
	uint8_t *bufs = aligned_alloc(4096, (size_t)(w + 1) * f->page_size);
	uint8_t *spares = malloc((size_t)(w + 1) * f->spare_size);
	int rc = 0;
	if (!seen || !bufs || !spares)
		rc = -ENOMEM;
	for (uint32_t i = 0; !rc && i < n; i++) {
		uint32_t bi = block_band(f, blocks[i]);
		if (seen[bi])
			continue;
		seen[bi] = 1;
		int r = par_recover_band(f, bi, bufs, spares, bufs + (size_t)w * f->page_size,
					 spares + (size_t)w * f->spare_size);
		if (r < 0)
			rc = r;
		else if (r == 2)
			(*done)++;
		else if (r == 0)
			band_flag_refresh(f, blocks[i], NULL); /* GC moves its data instead */
	}
	free(seen);
	free(bufs);
	free(spares);
	return rc;
}

/*
 * Open (recovery): page ppa rebuilt from its stripe with synchronous reads,
 * into data and spare (its ftl_spare, for the caller to check).  0, -EIO
 * when it cannot be (no parity page naming it, a second member unreadable),
 * -ENOMEM.  Cost: a page read per member of the band.
 */
int par_rebuild_sync(struct ftl *f, uint32_t ppa, uint8_t *data, uint8_t *spare)
{
	uint32_t w = f->row_width, ps = f->page_size, ss = f->spare_size;
	uint32_t b = ppa_block(f, ppa), page = ppa_page(f, ppa), bi = block_band(f, b);
	uint32_t tcol = block_col(f, b);
	if (!f->parity || page >= f->data_pages)
		return -EIO;
	uint8_t *bufs = aligned_alloc(4096, (size_t)w * ps);
	uint8_t *spares = malloc((size_t)w * ss);
	uint8_t *ok = calloc(w, 1);
	int rc = -EIO;
	if (!bufs || !spares || !ok) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t pc = UINT32_MAX, members = 0;
	for (uint32_t c = 0; c < w; c++) {
		uint32_t mb = band_block(f, bi, c);
		/* grown-bad members too (rb_start): the parity's mask decides */
		if (c == tcol || f->blk[mb].state == BLK_META)
			continue;
		struct ftl_spare sp;
		bool valid, erased;
		rec_read(f, mb, page, bufs + (size_t)c * ps, spares + (size_t)c * ss, &sp, &valid, &erased);
		ok[c] = valid;
		if (valid && sp.type == FTL_PG_PARITY && sp.lba == page && (sp.reserved & (1u << tcol))) {
			pc = c;
			members = sp.reserved & ~(1u << tcol);
		}
	}
	if (pc == UINT32_MAX) {
		/* no parity page names it: a partial-parity page may */
		uint32_t have = 0;
		for (uint32_t c = 0; c < w; c++)
			if (ok[c])
				have |= 1u << c;
		if (!ppl_rebuild_member(f, bufs, spares, have, tcol, page))
			goto out;
		memcpy(data, bufs + (size_t)tcol * ps, ps);
		memcpy(spare, spares + (size_t)tcol * ss, ss);
		rc = 0;
		f->st.parity_rebuilds++;
		goto out;
	}
	memcpy(data, bufs + (size_t)pc * ps, ps);
	memset(spare, 0xFF, ss);
	memcpy(spare, spares + (size_t)pc * ss + SPARE_SZ, SPARE_SZ);
	for (uint32_t c = 0; c < w; c++) {
		if (!(members & (1u << c)))
			continue;
		if (!ok[c])
			goto out;
		xor_into(data, bufs + (size_t)c * ps, ps);
		xor_into(spare, spares + (size_t)c * ss, SPARE_SZ);
	}
	rc = 0;
	f->st.parity_rebuilds++;
out:
	free(bufs);
	free(spares);
	free(ok);
	return rc;
}

/*
 * Recovery, column dcol of band bi on a dead die, stripe `page` without a
 * parity page: the spare of dcol's page rebuilt into out from the
 * stripe's newest partial-parity page covering it and the spares of the
 * members that one covers (row_width + 1 spares of room in spares).
 * 2: rebuilt (out to be checked); 1: none covers it; 0: every other member
 * is erased there (no more stripes); -EIO: the medium stopped.  Cost: a
 * spare read per member.
 */
static int ppl_dead_spare(struct ftl *f, uint32_t bi, uint32_t dcol, uint32_t page,
			  uint8_t *spares, uint8_t *out)
{
	uint32_t w = f->row_width, ss = f->spare_size, have = 0, ppl = UINT32_MAX;
	uint64_t best = 0;
	bool any = false;
	struct ftl_spare sp;
	for (uint32_t c = 0; c < w; c++) {
		uint32_t b = band_block(f, bi, c);
		if (c == dcol || f->blk[b].state == BLK_BAD || f->blk[b].state == BLK_META)
			continue;
		bool valid, erased;
		enum nand_status ns = rec_read(f, b, page, NULL, spares + (size_t)c * ss, &sp, &valid,
					       &erased);
		if (stop_status(ns))
			return -EIO;
		any |= !erased;
		if (!valid)
			continue;
		have |= 1u << c;
		if (sp.type == FTL_PG_PPL && sp.lba == page && (sp.reserved & (1u << dcol)) &&
		    (ppl == UINT32_MAX || sp.seq > best)) {
			ppl = c;
			best = sp.seq;
		}
	}
	if (!any)
		return 0;
	if (ppl == UINT32_MAX)
		return 1;
	memcpy(&sp, spares + (size_t)ppl * ss, sizeof sp);
	uint32_t covers = sp.reserved & ~(1u << dcol);
	if (covers & ~have)
		return 1; /* a second member unreadable */
	memset(out, 0xFF, ss);
	memcpy(out, spares + (size_t)ppl * ss + SPARE_SZ, SPARE_SZ);
	for (uint32_t c = 0; c < w; c++)
		if (covers & (1u << c))
			xor_into(out, spares + (size_t)c * ss, SPARE_SZ);
	return 2;
}

/*
 * Recovery, die `die` dead: for every band with a block on it, the stripes
 * whose parity page says a member on the die holds a log page newer than
 * the checkpoint: that page's spare is rebuilt from the parity page's and
 * the other members' spares, and reported through add (as if read).
 * Cost: a spare read per page of the parity column of each such band, and
 * row_width - 2 more per stripe newer than the checkpoint; synchronous.
 */
int par_recover_dead_spares(struct ftl *f, uint32_t die,
			    int (*add)(void *ctx, uint64_t seq, uint32_t ppa, uint8_t type, uint32_t lba),
			    void *ctx)
{
	uint32_t w = f->row_width, ss = f->spare_size;
	uint32_t dcol = die / f->dies_per_channel;
	uint8_t *spares = malloc((size_t)(w + 1) * ss);
	uint8_t *out = spares ? spares + (size_t)w * ss : NULL;
	if (!spares)
		return -ENOMEM;
	int rc = 0;
	uint64_t found = 0;
	for (uint32_t i = 0; i < f->blocks_per_die && !rc; i++) {
		uint32_t db = die * f->blocks_per_die + i;
		if (f->blk[db].state == BLK_BAD || f->blk[db].state == BLK_META)
			continue;
		uint32_t bi = block_band(f, db);
		/* the parity column: page 0 of a member is a parity page */
		uint32_t pcol = UINT32_MAX;
		struct ftl_spare sp;
		bool valid, erased;
		for (uint32_t c = 0; c < w && pcol == UINT32_MAX; c++) {
			uint32_t b = band_block(f, bi, c);
			if (c == dcol || f->blk[b].state == BLK_BAD || f->blk[b].state == BLK_META)
				continue;
			enum nand_status ns = rec_read(f, b, 0, NULL, spares, &sp, &valid, &erased);
			if (stop_status(ns)) {
				rc = -EIO;
				break;
			}
			if (valid && sp.type == FTL_PG_PARITY)
				pcol = c;
		}
		if (rc)
			continue;
		/* stripes without a parity page from lo on (all of them
		 * without a parity column yet): partial parity, below */
		uint32_t lo = pcol == UINT32_MAX ? 0 : f->data_pages;
		uint32_t pb = pcol == UINT32_MAX ? FTL_NO_BLOCK : band_block(f, bi, pcol);
		for (uint32_t page = 0; pcol != UINT32_MAX && page < f->data_pages && !rc; page++) {
			enum nand_status ns = rec_read(f, pb, page, NULL, spares, &sp, &valid, &erased);
			if (stop_status(ns)) {
				rc = -EIO;
				break;
			}
			if (erased) {
				lo = page;
				break; /* no more stripes */
			}
			if (!valid || sp.type != FTL_PG_PARITY || sp.lba != page ||
			    !(sp.reserved & (1u << dcol)) || sp.seq <= f->cp.cur_seq)
				continue;
			uint32_t members = sp.reserved & ~(1u << dcol);
			memset(out, 0, ss);
			memcpy(out, spares + SPARE_SZ, SPARE_SZ);
			bool ok = true;
			for (uint32_t c = 0; c < w && ok; c++) {
				if (!(members & (1u << c)))
					continue;
				ns = rec_read(f, band_block(f, bi, c), page, NULL, spares + ss, &sp, &valid,
					      &erased);
				if (stop_status(ns)) {
					rc = -EIO;
					ok = false;
					break;
				}
				if (!valid) {
					ok = false;
					break;
				}
				xor_into(out, spares + ss, SPARE_SZ);
			}
			if (!ok)
				continue;
			struct ftl_spare rs;
			if (spare_parse(f, out, &rs) != 0 || rs.seq <= f->cp.cur_seq ||
			    (rs.type != FTL_PG_DATA && rs.type != FTL_PG_TRIM))
				continue;
			rc = add(ctx, rs.seq, ppa_make(f, db, page), rs.type, rs.lba);
			found++;
		}
		for (uint32_t page = lo; page < f->data_pages && !rc; page++) {
			int r = ppl_dead_spare(f, bi, dcol, page, spares, out);
			if (r < 0)
				rc = r;
			if (r <= 0)
				break; /* no more stripes (or the medium stopped) */
			struct ftl_spare rs;
			if (r == 2 && spare_parse(f, out, &rs) == 0 && rs.seq > f->cp.cur_seq &&
			    (rs.type == FTL_PG_DATA || rs.type == FTL_PG_TRIM)) {
				rc = add(ctx, rs.seq, ppa_make(f, db, page), rs.type, rs.lba);
				found++;
			}
		}
	}
	free(spares);
	if (found)
		ftl_log(FTL_LOG_WARNING, "die %u dead at open: %llu log pages on it newer than the checkpoint found "
			"through parity", die, (unsigned long long)found);
	return rc;
}
