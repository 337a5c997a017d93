/*
 * ftl/checkpoint_int.h - what the checkpoint's files share (checkpoint.c,
 * checkpoint_load.c, checkpoint_layout.c): the sizes of its parts.
 * Included by those files only; the rest of ftl/ sees the checkpoint
 * through ftl_int.h.
 */
#ifndef FLASHD_FTL_CHECKPOINT_INT_H
#define FLASHD_FTL_CHECKPOINT_INT_H

#include "ftl/ftl_int.h"

/* blocks of the l2p pages */
uint32_t cp_l2p_blocks(const struct ftl *f);
/* words of the erase counts' map of blocks erased since (media.h) */
uint32_t cp_fresh_words(const struct ftl *f);
/* pages of the erase counts (media.h, ftl_cp_wear) with nexc pairs */
uint32_t cp_wear_pages(const struct ftl *f, uint32_t nexc);

/*
 * The header block's lists (media.h, struct ftl_cp_hdr): the u32 words
 * after the header, by word index.  blocks[nblocks] at 0, open[nopen] at
 * open, bad[nbad] at bad; at bitmap the bitmap of written l2p pages
 * (nbitmap words, 0 before sparse checkpoints); at par the mirror,
 * pblock[ngroups] and gend[ngroups] (npar words, 0 without parity); at
 * refresh nrefresh and band[nrefresh] (FTL_CP_REFRESH).  Computed by
 * cp_layout alone, for the header written and every header read.
 */
struct cp_layout {
	size_t open, bad, bitmap, par, refresh;
	uint32_t nbitmap, npar;
};
void cp_layout(const struct ftl *f, uint32_t nblocks, uint32_t nopen, uint32_t nbad, bool sparse,
	       bool parity, uint32_t ngroups, struct cp_layout *l);
/* the layout of header h's lists (its flags and counts as they are) */
void cp_layout_of(const struct ftl *f, const struct ftl_cp_hdr *h, struct cp_layout *l);
/* pages of the header and its lists, with nrefresh words (0, or 1 + the
 * bands) at l->refresh */
uint32_t cp_layout_pages(const struct ftl *f, const struct cp_layout *l, size_t nrefresh);
/* The fields the checkpoint header and the erase counts' header begin with:
 * magic, version, size, format_id and the checkpoint's cp_seq into hdr. */
void cp_stamp(const struct ftl *f, void *hdr, const char *magic, uint32_t size);

#endif
