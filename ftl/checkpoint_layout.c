/*
 * ftl/checkpoint_layout.c - the sizes of a checkpoint's parts (media.h,
 * struct ftl_cp_hdr and struct ftl_cp_wear): l2p pages and blocks, the
 * header's pages, the bitmap of written l2p pages, the erase counts'
 * pages, and the blocks a checkpoint needs (block.c's reserves).  Pure
 * functions of the geometry and the counts given; called by
 * checkpoint.c, checkpoint_load.c and block.c.
 */
#include "ftl/checkpoint_int.h"

uint32_t cp_l2p_pages(const struct ftl *f)
{
	return (uint32_t)((f->units * sizeof(uint32_t) + f->page_size - 1) / f->page_size);
}

uint32_t cp_l2p_blocks(const struct ftl *f)
{
	return (cp_l2p_pages(f) + f->ppb - 1) / f->ppb;
}

/* words of the sparse checkpoint's bitmap of written l2p pages */
uint32_t cp_bitmap_words(const struct ftl *f)
{
	return (cp_l2p_pages(f) + 31) / 32;
}

uint32_t cp_hdr_pages(const struct ftl *f, uint32_t nblocks, uint32_t nopen, uint32_t nbad,
		      uint32_t nbitmap)
{
	size_t bytes = sizeof(struct ftl_cp_hdr) +
		       sizeof(uint32_t) * ((size_t)nblocks + nopen + nbad + nbitmap);
	return (uint32_t)((bytes + f->page_size - 1) / f->page_size);
}

/* words of the erase counts' map of blocks erased since (media.h) */
uint32_t cp_fresh_words(const struct ftl *f)
{
	return (f->nblocks + 31) / 32;
}

/* pages of the erase counts (media.h, ftl_cp_wear) with nexc pairs */
uint32_t cp_wear_pages(const struct ftl *f, uint32_t nexc)
{
	size_t bytes = sizeof(struct ftl_cp_wear) +
		       sizeof(uint32_t) * ((size_t)f->nbands + cp_fresh_words(f) + 2 * nexc);
	return (uint32_t)((bytes + f->page_size - 1) / f->page_size);
}

/* header and l2p blocks; in rows of two or more dies (cp_state.with_parity)
 * also the header's copy and a parity block per group (a band's l2p blocks:
 * at least one per band) */
uint32_t cp_blocks_needed(const struct ftl *f)
{
	uint32_t l = cp_l2p_blocks(f), w = f->row_width;
	if (w > 1)
		return 2 + l + (l + w - 2) / (w - 1) + 1;
	return 1 + l;
}
