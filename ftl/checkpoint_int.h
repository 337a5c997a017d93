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
/* words of the sparse checkpoint's bitmap of written l2p pages */
uint32_t cp_bitmap_words(const struct ftl *f);
/* words of the erase counts' map of blocks erased since (media.h) */
uint32_t cp_fresh_words(const struct ftl *f);
/* pages of the erase counts (media.h, ftl_cp_wear) with nexc pairs */
uint32_t cp_wear_pages(const struct ftl *f, uint32_t nexc);

#endif
