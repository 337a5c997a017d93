/*
 * ftl/checkpoint_state.h - the checkpoint's state in struct ftl (f->cp,
 * struct cp_state) and its program ops.  checkpoint.c (writing) and
 * checkpoint_load.c (loading at open) own it; the other files only count
 * pages_since (whoever programs a page), take and free the load_* results
 * (recovery.c), set the starting values before it runs (ftl.c, repair.c),
 * and read the rest.  Included by ftl_int.h only.
 */
#ifndef FLASHD_FTL_CHECKPOINT_STATE_H
#define FLASHD_FTL_CHECKPOINT_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "hw/nand.h"

struct ftl;

enum cp_phase {
	CP_IDLE,
	CP_QUIESCE,     /* waiting for free blocks to write it to */
	CP_WRITE,       /* programming header and l2p pages */
	CP_SYNC,        /* the medium's sync of those pages (nand_sync_start) */
	CP_COMMIT,      /* programming the superblock page */
	CP_RELEASE,     /* the medium's sync of that page; then the blocks of
	                 * the checkpoint before the previous one are released
	                 * (the superblock on the medium may name them until it
	                 * is durable) */
	CP_FAILED,
};

struct cp_op {
	struct nand_op op;
	struct ftl *f;
	uint8_t *spare;
	uint8_t *buf;        /* a page of its own (header, last l2p page) */
};

struct cp_state {
	enum cp_phase phase;
	bool requested;
	bool clean;                 /* the closing checkpoint */
	bool urgent;                /* asked for by the owner: as many programs
	                             * in flight as the closing one */
	/* generations: a checkpoint takes the next when it takes its cp_seq
	 * (QUIESCE -> WRITE); gen_durable is the newest one committed, synced
	 * and its predecessor released (ftl_checkpoint_request's tickets) */
	uint64_t gen_taken, gen_writing, gen_durable;
	int attempts;               /* failed in a row, retiring nothing */
	int retired_attempts;       /* failed, retiring bad blocks */
	uint64_t cp_seq;
	uint32_t hdr_block;
	bool upage_sealed;          /* its blocks' last NAND pages programmed as they are */
	uint32_t *blocks;           /* l2p blocks of the checkpoint being written */
	uint32_t nblocks;
	/* parity formats (FTL_CP_PARITY in media.h): the header's copy, and
	 * per group (a band's l2p blocks) its parity block and end index */
	bool with_parity;
	uint32_t hdr_mirror;        /* FTL_NO_BLOCK: none */
	uint32_t *pblocks, *gend;   /* [ngroups] */
	uint32_t ngroups;
	/* the open stripe: XOR of the l2p pages written to page pacc_row of
	 * the group pacc_grp so far, and of their data CRCs; par_pending: the
	 * stripe is complete and its parity page not yet submitted (the next
	 * l2p page waits for it) */
	uint8_t *pacc;
	uint32_t pacc_crc, pacc_grp, pacc_row;
	bool pacc_open, par_pending;
	uint32_t hdr_pages, l2p_pages;
	uint32_t next_page;         /* next l2p page to look at (map order) */
	uint32_t written;           /* l2p pages submitted: the next one's place */
	uint32_t hdr_next;          /* next header page to submit, once sealed */
	bool sealed;                /* every l2p page looked at, header complete */
	uint32_t *present;          /* in hdr_buf: bitmap of written l2p pages */
	uint32_t nlist_words;       /* u32 words after the header (lists, bitmap) */
	uint32_t pages_done;
	uint64_t sync_ticket;       /* CP_SYNC, CP_RELEASE: the medium's sync to wait for */
	int error;
	uint8_t *hdr_buf;           /* hdr_cap pages, grown (never shrunk) when
	                             * the lists outgrow it; allocated at open */
	uint32_t hdr_cap;
	uint32_t *open_list;        /* [open_cap]: log blocks open at cp_seq */
	uint32_t open_cap;
	struct cp_op *ops;
	uint32_t nops;
	uint32_t *free_idx;         /* stack of unused op indexes */
	uint32_t nfree_idx;
	uint32_t ops_in_flight;
	/* the checkpoint on the media now */
	uint32_t cur_hdr_block;
	uint32_t cur_mirror;        /* FTL_NO_BLOCK: none */
	uint32_t *cur_blocks;       /* every block but the header block: l2p,
	                             * parity, the header's copy */
	uint32_t cur_nblocks;
	uint64_t cur_seq;
	/* the one before it, which the superblock names too: kept (META)
	 * until a newer one commits, so a damaged current one falls back to
	 * it (cp_load); kept while the spare blocks hold it (cp_commit_done) */
	uint32_t prev_hdr_block;    /* FTL_NO_BLOCK: none */
	uint32_t prev_mirror;
	uint32_t *prev_blocks;
	uint32_t prev_nblocks;
	uint64_t prev_seq;
	bool prev_keep;             /* CP_COMMIT: the current one becomes the
	                             * previous (else it goes too) */
	/*
	 * What a replay may start from: the cp_seq of the oldest checkpoint a
	 * superblock on the media may name (the previous one, or the current
	 * one if it is kept alone; 0: none, the whole log).  GC re-logs trim
	 * records newer than it and keeps blocks it cannot read until it
	 * passes them, so a replay from either checkpoint finds every trim.
	 * It moves on only once the superblock of a commit is synced
	 * (cp_release).
	 */
	uint64_t keep_seq;
	/* CP_RELEASE: the blocks of the checkpoints the new superblock no
	 * longer names (header blocks too), freed once it is durable */
	uint32_t *rel_blocks;       /* [2 * (cur_blocks' size + 1)] */
	uint32_t rel_nblocks;
	uint64_t pages_since;       /* log pages programmed since cur_seq */
	/* cp_load -> recovery: blocks the checkpoint lists as doomed */
	uint32_t *load_doomed;
	uint32_t nload_doomed;
	/* the erase counts (media.h, ftl_cp_wear): wear_pages pages (0: they
	 * do not fit), sized when the header is built, laid out in wear_buf
	 * (wear_cap pages, allocated at open) when the first is submitted,
	 * programmed after the header pages */
	uint8_t *wear_buf;
	uint32_t wear_cap, wear_pages;
	/* the closing checkpoint has laid its counts out: no erase is issued
	 * from then on (eraser_kick), so a clean reopen loads them exactly
	 * (the blocks left dirty are erased after it); cleared when another
	 * checkpoint starts (it was not the last) or the attempt fails */
	bool wear_final;
	/* cp_load -> recovery: the loaded counts' map of blocks erased since
	 * their data as old as cp_seq (media.h, ftl_cp_wear); NULL: none */
	uint32_t *load_fresh;
	/* cp_load -> recovery: bands marked for refresh (FTL_CP_REFRESH) */
	uint32_t *load_refresh;
	uint32_t nload_refresh;
};

#endif
