/*
 * ftl/checkpoint_layout.c - the sizes of a checkpoint's parts (media.h,
 * struct ftl_cp_hdr and struct ftl_cp_wear): l2p pages and blocks, the
 * header's pages, the bitmap of written l2p pages, the erase counts'
 * pages, the blocks a checkpoint needs (block.c's reserves); where the
 * header block's lists lie (struct cp_layout) and the fields both headers
 * begin with (cp_stamp).  Pure functions of the geometry and the counts
 * given; called by checkpoint.c, checkpoint_load.c and block.c.
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
static uint32_t cp_bitmap_words(const struct ftl *f)
{
	return (cp_l2p_pages(f) + 31) / 32;
}

void cp_layout(const struct ftl *f, uint32_t nblocks, uint32_t nopen, uint32_t nbad, bool sparse,
	       bool parity, uint32_t ngroups, struct cp_layout *l)
{
	l->open = nblocks;
	l->bad = l->open + nopen;
	l->bitmap = l->bad + nbad;
	l->nbitmap = sparse ? cp_bitmap_words(f) : 0;
	l->par = l->bitmap + l->nbitmap;
	l->npar = parity ? 1 + 2 * ngroups : 0;
	l->refresh = l->par + l->npar;
}

void cp_layout_of(const struct ftl *f, const struct ftl_cp_hdr *h, struct cp_layout *l)
{
	cp_layout(f, h->nblocks, h->nopen, h->nbad, h->flags & FTL_CP_SPARSE, h->flags & FTL_CP_PARITY,
		  h->ngroups, l);
}

uint32_t cp_layout_pages(const struct ftl *f, const struct cp_layout *l, size_t nrefresh)
{
	size_t bytes = sizeof(struct ftl_cp_hdr) + sizeof(uint32_t) * (l->refresh + nrefresh);
	return (uint32_t)((bytes + f->page_size - 1) / f->page_size);
}

/* the fields both headers begin with (media.h) */
struct __attribute__((packed)) cp_stamp_fields {
	char magic[8];
	uint32_t version;
	uint32_t size;
	uint64_t format_id;
	uint64_t cp_seq;
};
_Static_assert(offsetof(struct ftl_cp_hdr, version) == 8 && offsetof(struct ftl_cp_hdr, size) == 12 &&
		       offsetof(struct ftl_cp_hdr, format_id) == 16 &&
		       offsetof(struct ftl_cp_hdr, cp_seq) == 24,
	       "ftl_cp_hdr begins with the stamp");
_Static_assert(offsetof(struct ftl_cp_wear, version) == 8 && offsetof(struct ftl_cp_wear, size) == 12 &&
		       offsetof(struct ftl_cp_wear, format_id) == 16 &&
		       offsetof(struct ftl_cp_wear, cp_seq) == 24,
	       "ftl_cp_wear begins with the stamp");

void cp_stamp(const struct ftl *f, void *hdr, const char *magic, uint32_t size)
{
	struct cp_stamp_fields s;
	memcpy(s.magic, magic, 8);
	s.version = FTL_MEDIA_VERSION;
	s.size = size;
	s.format_id = f->format_id;
	s.cp_seq = f->cp.cp_seq;
	memcpy(hdr, &s, sizeof s);
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
