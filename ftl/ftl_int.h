/*
 * ftl/ftl_int.h - state shared by the files of ftl/ (private).
 *
 * One file per concept: l2p and blocks (block.c), block footers (footer.c),
 * write buffer rings and the streams that program them (writer.c), host I/O
 * (io.c) and its write throttle (throttle.c), trim records (trim.c),
 * garbage collection (gc.c, gc_admit.c), superblock (superblock.c),
 * checkpoint (checkpoint.c, checkpoint_load.c, checkpoint_layout.c),
 * recovery (recovery.c), Flashback parity (parity.c, parity_ppl.c,
 * parity_rebuild.c, parity_recover.c), dead dies (die.c), formatting
 * (format.c), and the life cycle (ftl.c).  Everything runs on the thread
 * that owns the struct ftl.
 *
 * Invariants the files rely on:
 *  - l2p[u] is UNMAPPED, LOST, a write-buffer slot reference, or the PPA of
 *    a programmed page whose spare names u.  A slot reference is cleared
 *    (replaced by the PPA) when that slot's program completes, so a
 *    released slot is never referenced.
 *  - blk[b].valid is the number of l2p entries holding a PPA in block b.
 *  - Every unit's newest version (write, trim or loss record) stays on the
 *    media: GC relocates valid data, re-logs trim ranges newer than the
 *    older of the two checkpoints kept (cp.keep_seq) that are still
 *    unmapped, and erases a victim only after its relocations are
 *    programmed.  Recovery replays pages newer than the checkpoint it
 *    loaded (the current one, or the previous if the current is damaged)
 *    in sequence order, so it rebuilds the last durable state.
 *  - Sequence numbers are taken when a unit's new version becomes visible in
 *    the l2p (host write buffered, GC relocation validated, trim record
 *    closed), so log order equals the order the host observed.
 */
#ifndef FLASHD_FTL_INT_H
#define FLASHD_FTL_INT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "ftl/ftl.h"
#include "ftl/media.h"

/* ---- l2p entries -------------------------------------------------------- */

#define L2P_UNMAPPED 0xFFFFFFFFu
#define L2P_LOST 0xFFFFFFFEu      /* data lost to a media error: reads fail */
#define L2P_SLOT 0x80000000u      /* write buffer slot; low 30 bits: index */
#define L2P_SLOT_GC 0x40000000u   /* with L2P_SLOT: the GC ring */
#define L2P_SLOT_MASK 0x3FFFFFFFu
#define L2P_MAX_PPA 0x7FFFFFFFu

static inline bool l2p_is_ppa(uint32_t e)
{
	return !(e & L2P_SLOT);
}
static inline bool l2p_is_slot(uint32_t e)
{
	return (e & L2P_SLOT) && e != L2P_UNMAPPED && e != L2P_LOST;
}

/* ---- blocks ------------------------------------------------------------- */

enum blk_state {
	BLK_UNKNOWN,    /* not classified yet (open/recovery only) */
	BLK_FREE,       /* erased, on its die's free list */
	BLK_DIRTY,      /* stale content, on the dirty queue; erased before use */
	BLK_ERASING,    /* erase in flight */
	BLK_OPEN,       /* being programmed by a stream */
	BLK_CLOSED,     /* holds log pages; in the bucket of its valid count */
	BLK_VICTIM,     /* being collected by GC */
	BLK_RETIRING,   /* a program failed: collect it, then retire it */
	BLK_META,       /* superblock or checkpoint */
	BLK_BAD,        /* factory or grown bad: never used again */
};

struct blk {
	uint8_t state;      /* enum blk_state */
	uint8_t flags;      /* BLKF_* */
	uint16_t inflight;  /* pages handed out and not yet programmed: up to
	                     * pages_per_block (4096), so 16 bits */
	uint16_t valid;     /* mapped units in this block */
	uint16_t wp;        /* OPEN: pages handed out */
	uint32_t next, prev;/* links of the one list the block is on */
};
_Static_assert(sizeof(struct blk) == 16, "one blk per erase block: keep it small");
#define BLKF_GROWN_BAD 1   /* retired by the FTL (persisted in checkpoints) */
#define BLKF_CP_OPEN 2     /* was open at the loaded checkpoint */
#define BLKF_GC 4          /* written by the GC stream (holds survivors) */
#define BLKF_COLD 8        /* written by a set for cold data (SET_COLD) */
#define BLKF_DOOMED 16     /* a program failed: counted in ndoomed until it is
                            * retired (or erased fine after all) */

struct blist {
	uint32_t head, tail, count;
};

/* ---- bands -------------------------------------------------------------- */

/*
 * A band is the unit the FTL allocates, fills, collects and frees: block k
 * of every die of one row, a row being one die on each channel (row j: dies
 * c * dies_per_channel + j), so consecutive pages of a band go to different
 * channels.  Bad blocks and the superblock blocks are holes: a band has
 * `members` <= row_width blocks.  Blocks keep their own states; a band's
 * place follows from how many members are in each state class:
 *   band_free[row]   - every member FREE (allocatable)
 *   counted in nfree - every member FREE, DIRTY or ERASING, and not a
 *                      lone band with parity (block.c, band_lone)
 *   band_bucket[v]   - a GC candidate: some member CLOSED, every other
 *                      member FREE, DIRTY or ERASING; v = valid
 * GC collects the CLOSED members of a band together, so a band's blocks are
 * erased and reused together (parity stripes will rely on it).  A band is
 * on at most one list, threaded through band[].next/prev.
 */
struct band {
	uint32_t valid;          /* sum of the members' valid counts */
	uint32_t next, prev;
	uint32_t closed_at;      /* write clock when it became a GC candidate */
	uint32_t born;           /* write clock when its data was written by the
	                          * host: a user band's when it opened, a GC
	                          * band's the mean over its pages of their
	                          * source bands' (in memory only: after a
	                          * restart every band is born at 0) */
	uint32_t nborn;          /* GC band: pages in that mean */
	uint16_t members;        /* blocks neither bad nor superblock */
	uint16_t n_free, n_dirty, n_closed; /* members by state class */
	uint16_t counted;        /* members counted in nfree (0: not all free) */
	uint8_t list;            /* BAND_LIST_* */
	uint8_t flags;           /* BANDF_*: cleared when the band is free again */
	uint16_t par;            /* open band with parity: its parity context
	                          * (parity.c) + 1; 0: none */
	uint16_t gc_busy;        /* GC victims of the band not yet ready to be
	                          * erased: with parity, none is erased before
	                          * all are (a rebuild reads the others) */
};
enum { BAND_LIST_NONE, BAND_LIST_FREE, BAND_LIST_BUCKET };
/* a read of one of its pages came back with few ECC bits to spare (or none):
 * GC relocates it before the others (block.c, blk_read_health) */
#define BANDF_REFRESH 1

/* ---- write buffer ------------------------------------------------------- */

enum slot_state {
	SLOT_EMPTY,      /* free */
	SLOT_FILLED,     /* holds a page waiting to be programmed */
	SLOT_SUBMITTED,  /* program in flight */
	SLOT_DONE,       /* programmed; released when the done cursor passes */
	SLOT_SKIP,       /* nothing to program; released like DONE */
};

struct slot {
	struct nand_op op;   /* the program (GC: first the data read) */
	uint8_t *data;       /* its page buffer, held from fill to release
	                      * (NULL while empty); GC: the buffer its
	                      * relocation read landed in (no copy) */
	uint8_t state;       /* enum slot_state */
	uint8_t type;        /* FTL_PG_DATA, FTL_PG_TRIM or FTL_PG_PPL (its
	                      * data and spare made at submit: parity_ppl.c) */
	uint16_t victim;     /* GC: index of the victim it relocates from */
	bool crc_known;      /* data_crc is the crc32c of the data (GC: taken
	                      * from the source page's spare; a host write of
	                      * a whole unit: computed by its copy in, saving
	                      * a pass over the data either way) */
	bool cold;           /* GC: relocated out of a GC block: to SET_COLD */
	uint32_t data_crc;
	uint32_t lba;        /* DATA: unit; TRIM: number of ranges */
	uint32_t ppa;        /* where it is programmed */
	uint32_t from;       /* GC: the page it relocates */
	uint32_t prev;       /* DATA: the unit's durable mapping before this
	                      * write (a PPA, UNMAPPED or LOST, never a slot):
	                      * what a checkpoint records while it is buffered */
	uint64_t seq;
};

/*
 * A ring of slots with three cursors (positions only grow; slot = pos & mask):
 *   fill   - next slot the producer fills (host writes, GC reads, trims)
 *   submit - next slot handed to NAND; fill - submit slots wait for a page
 *   done   - oldest slot not yet released; everything before it is
 *            programmed, so "done >= p" means position p is durable
 * done <= submit <= fill <= done + nslots.
 */
struct ring {
	struct slot *slots;
	uint8_t *data;       /* nslots page buffers, mapped, untouched until used */
	uint8_t **buf_free;  /* stack of the free ones, last freed on top: the
	                      * memory touched is the peak of pages in flight
	                      * (GC: slots filled + relocation reads out, which
	                      * gc admission keeps below nslots), not nslots */
	uint32_t nbuf_free;
	uint8_t *spares;     /* nslots spare areas */
	uint32_t nslots, mask;
	uint64_t fill, submit, done;
	uint32_t *retry;     /* slots whose program failed, resubmitted first */
	uint32_t nretry;
};

/* The band a set is filling in one row, and where: stripe `page`, next
 * column `col` (page `page` of every member, then page + 1). */
struct open_row {
	uint32_t band;            /* FTL_NO_BLOCK if none */
	uint32_t page;
	uint32_t col;
	/* the cursor (band, page, col) right after the last partial-parity
	 * page handed out into it: the stripe needs no other until it moves */
	uint32_t ppl_band, ppl_page, ppl_col;
};

enum stream_id { STREAM_USER = 0, STREAM_GC = 1, NSTREAMS = 2 };

/*
 * A set of open bands, one per row, filled stripe by stripe with the rows
 * interleaved, so consecutive pages land on different dies.  The user
 * stream has one (host writes: hot and cold mixed); the GC stream has two,
 * for separation by age: data relocated out of user blocks (survived once),
 * and data relocated out of GC blocks (survived twice or more: cold).
 */
struct open_set {
	struct open_row *row;     /* [nrows] */
	uint32_t next_row;        /* round-robin cursor over the rows */
	uint8_t blkf;             /* BLKF_GC / BLKF_COLD: marks the blocks it opens */
};

enum { SET_FIRST = 0, SET_COLD = 1, NSETS = 2 };

struct stream {
	struct ftl *f;
	enum stream_id id;
	struct ring ring;
	struct open_set set[NSETS];
	uint32_t nsets;
	bool stalled;             /* waiting for a free block (GC runs unpaced) */
	/* What the stream's owner hears of its slots (gc_init sets both
	 * streams'; NULL: nothing), so writer.c never calls up into GC:
	 * submitted  - the slot's program was handed to NAND (retry: again,
	 *              after a failed program elsewhere)
	 * programmed - its program succeeded (before the ring releases it) */
	void (*submitted)(struct ftl *f, const struct slot *sl, bool retry);
	void (*programmed)(struct ftl *f, struct slot *sl);
};

/*
 * The footer (P2L) of a block a stream is writing: one entry per data page,
 * noted when the page's program is submitted; programmed into the block's
 * last footer_pages pages right after its last data page is submitted.
 * From a pool, attached when the block is opened, released when the footer
 * is programmed (or the block is given up).
 */
struct footer {
	struct ftl *f;
	uint32_t block;
	uint32_t pending;          /* footer programs in flight */
	uint8_t *buf;              /* footer_pages pages: header, entries */
	uint8_t *spares;           /* footer_pages spare areas */
	struct nand_op *ops;       /* [footer_pages] */
	struct footer *next_free;
};

/* ---- parity (parity_rebuild.c) ------------------------------------------ */

/*
 * A request to rebuild page ppa from the rest of its stripe, embedded in
 * the reader's own state (a host read, a GC relocation).  done runs from a
 * completion (never inside par_rebuild) with 0 and the page's data and
 * spare (its ftl_spare, checked by the caller like a read's), or -EIO.
 */
struct rb_req {
	uint32_t ppa;
	uint8_t *data;            /* page_size: out */
	uint8_t *spare;           /* spare_size: out */
	void (*done)(struct ftl *f, struct rb_req *rq, int status);
	struct rb_req *next;      /* waiting for a rebuild context */
};

struct band_par;
struct rb_ctx;

/* ---- reads -------------------------------------------------------------- */

struct rop {
	struct nand_op op;
	struct ftl *f;
	struct ftl_io *io;
	uint64_t unit;
	uint32_t expect;     /* l2p value when submitted */
	uint32_t copy_off;   /* partial unit: bytes of the unit to copy out */
	uint32_t copy_len;
	uint8_t *copy_dst;
	bool rmw;            /* read-modify-write pre-read */
	bool rebuilt;        /* a parity rebuild was tried */
	uint8_t retries;     /* reads again after an uncorrectable one (READ_RETRIES) */
	struct rb_req rb;
	uint8_t *bounce;     /* one page */
	uint8_t *spare;
	struct rop *next_free;
};

/* ---- garbage collection ------------------------------------------------ */

/*
 * Victims in flight.  Up to gc_examining_max examine pages at once, each
 * on a die no other examining victim is on when the choice allows, so their
 * spare scans and relocation reads queue on different dies and run in
 * parallel; as many more may be finishing (relocations being programmed,
 * re-logged trims becoming durable) before they are erased.
 */
enum victim_phase {
	VIC_FREE,
	VIC_EXAMINING,            /* scanning spares, reading valid pages */
	VIC_FINISHING,            /* every page examined; waits, then erased */
};

/*
 * A GC relocation read.  The page is read into a buffer of its own and
 * enters the GC ring only once it has landed and is still current, so the
 * ring holds only pages ready to program, in the order they became ready:
 * a read queued behind a busy die holds up nothing but itself.  A ring slot
 * is reserved for every read in flight (gc_reads_out).
 */
struct gc_read {
	struct nand_op op;
	struct ftl *f;
	uint8_t *buf;             /* one page */
	uint32_t lba, from, data_crc;
	uint16_t victim;
	uint16_t tries;           /* reads of the page that were uncorrectable */
	bool rebuilt;             /* a parity rebuild was tried */
	bool crc_from_rebuild;    /* the unit came from the dead die's reverse
	                           * map: its CRC from the rebuilt spare */
	uint8_t *spare;           /* one spare area (rebuilds) */
	struct rb_req rb;
	struct gc_read *next_free;
};

struct victim {
	uint32_t block;           /* FTL_NO_BLOCK: unused */
	uint64_t admitted;        /* admission number: oldest examined first */
	uint8_t phase;            /* enum victim_phase */
	bool retire;              /* retire as bad instead of erasing */
	bool urgent;              /* refresh or wear levelling: examined
	                           * unpaced, whether or not the host writes */
	bool need_trim_record;    /* re-logged trims must be closed into a record */
	bool log_closed;          /* finishing: trims closed, wait_user_pos set */
	bool aborted;             /* relocations given back: return it unerased */
	bool ready;               /* reached the erase point once (band.gc_busy) */
	bool swept;               /* parity: units still mapped into it after the
	                           * examination were looked up in the map and
	                           * examined again (foot_state 4) */
	uint32_t *rmap;           /* [ppb] the unit of each page, from the map
	                           * (foot_state 4), UINT32_MAX: none */
	uint32_t cursor;          /* next page to examine */
	uint32_t fpos;            /* finishing: its index in ftl.vfinish */
	uint32_t scans_done;      /* spare reads completed */
	uint32_t pending;         /* data reads + relocation programs in flight */
	uint64_t wait_user_pos;   /* re-logged trims durable once user done >= */
	uint64_t first_handout;   /* f->handouts at its first relocation's page
	                           * (UINT64_MAX: none yet) */
	uint64_t par_mark;        /* parity, at the erase point: GC stripes
	                           * begun by then (f->par_opens) that hold
	                           * pages handed out since first_handout must
	                           * have their parity programmed first (0: not
	                           * there yet) */
	bool gc_ppl;              /* or partial parity: par_gc_protect issued */
	uint64_t ppl_failures;    /* f->gc_ppl_failures then */
	uint64_t par_ticket;      /* then: stripes sealed so far (their parity
	                           * must be programmed before the erase) */
	uint64_t hold_seq;        /* erased only once cp.keep_seq >= this: it
	                           * held a trim record newer than a checkpoint
	                           * kept that could not be read (0: none) */
	struct nand_op *ops;      /* [ppb] spare reads */
	uint8_t *spares;          /* [ppb * spare_size] */
	uint8_t *scan_st;         /* [ppb] 0 pending, else enum nand_status + 1 */
	uint32_t *lost;           /* units lost while relocating, to record */
	uint32_t nlost;
	/* a trim record being re-logged */
	struct nand_op trim_op;
	uint8_t *trim_buf;
	uint8_t trim_state;       /* 0 none, 1 reading, 2 read, 3 unreadable */
	uint32_t trim_range, trim_unit; /* resume point */
	uint32_t trim_crc;        /* data CRC of the record being read */
	/* the block's footer, read first: with it, no spare is scanned */
	uint8_t foot_state;       /* 0 reading, 1 valid, 2 not there: scan,
	                           * 3 dead die: its reverse map, 4 rmap */
	uint32_t foot_done;       /* footer page reads completed */
	bool foot_failed;
	struct nand_op *foot_ops; /* [footer_pages] */
	uint8_t *foot_buf;        /* footer_pages pages */
	uint8_t *foot_spares;
	const struct ftl_footer_entry *foot_entries; /* valid: into foot_buf */
};

/* ---- checkpoint: ftl/checkpoint_state.h ---------------------------------- */

#include "ftl/checkpoint_state.h"

/* ---- the FTL ------------------------------------------------------------ */

struct ftl_io;
struct alloc_rec;

struct ioq {
	struct ftl_io *head, *tail;
};

struct ftl {
	struct nand_dev *dev;
	struct nand_geometry geo;
	uint32_t ndies, nblocks, ppb, page_size, spare_size;
	/* 4 KiB units per NAND page (1, 2 or 4): with more than one the FTL
	 * sees the device through ftl/upage.c, a unit per page, and hands a
	 * NAND page's units out in a row */
	uint32_t upp;
	uint32_t footer_pages;      /* the last pages of a log block: its footer */
	uint32_t data_pages;        /* ppb - footer_pages: pages for data */
	uint32_t blocks_per_die;
	uint32_t dies_per_channel;
	uint32_t nrows;             /* dies_per_channel */
	uint32_t row_width;         /* channels: dies (and blocks of a band) per row */
	uint32_t nbands;            /* nrows * blocks_per_die */
	bool readonly;
	bool timed;                 /* the medium may complete later */
	int error;                  /* sticky error */
	bool no_space;

	/* format */
	uint64_t format_id;
	uint32_t sector_size;
	uint64_t units;
	uint64_t format_time;
	bool was_clean;
	bool flush_ppl;             /* partial parity at flushes (parity_ppl.c) */
	bool opened;                /* every open step done: checkpoints may
	                             * start (one requested by recovery, e.g. a
	                             * band that lost its parity, waits, so it
	                             * cannot race the open's superblock write) */
	uint64_t open_count;

	/* map */
	uint32_t *l2p;
	size_t l2p_alloc;           /* bytes mapped for l2p (whole pages) */

	/* blocks */
	struct blk *blk;
	struct blist dirty;         /* to erase */
	struct blist retire;        /* RETIRING blocks waiting for GC */
	/* [nblocks]: erases of each block the FTL knows of (block.c owns
	 * them): its own, counted when issued, from the checkpoint at open,
	 * +1 for a block recovery finds erased or rewritten since it, and
	 * never below the medium's count where it keeps one
	 * (NAND_CAP_ERASE_COUNTS) */
	uint32_t *erases;
	uint64_t *blk_max_seq;      /* [nblocks]: newest log page programmed
	                             * into it since it was last erased (0 if
	                             * none since open) */
	/* [nblocks]: oldest log page in it since it was last erased, where
	 * every one is known (programmed since the open, or read whole by
	 * recovery): UINT64_MAX while there is none; 0 where unknown (blocks
	 * older than the checkpoint at open, or with a page recovery could not
	 * read).  A data page read from it with an older sequence number is an
	 * older copy the storage returned (ftl_check_data) */
	uint64_t *blk_min_seq;
	uint64_t stale_reads;       /* reads that found such a page (for the log) */
	uint64_t write_clock;       /* user pages programmed (band age) */
	double age_avg;             /* mean age (write clock) of the versions host
	                             * writes replace: the mean rewrite interval */
	uint32_t age_n;             /* samples in age_avg, up to AGE_WINDOW */
	uint32_t cp_headroom;       /* part of user_min kept for a checkpoint's
	                             * blocks (blk_limits) */
	uint32_t nfree;             /* members of bands whose every member is
	                             * FREE, DIRTY or ERASING */
	/* refresh (block.c): a read whose worst codeword corrected at least
	 * refresh_bits bits marks its band BANDF_REFRESH */
	uint16_t refresh_bits;
	uint32_t nrefresh_ready;    /* BANDF_REFRESH bands that are GC candidates */
	uint32_t refresh_cursor;    /* band_refresh_pick resumes here */
	/* endurance (block.c, health_update): the state the reserves give */
	uint8_t health;             /* HEALTH_* */
	bool wear_ro;               /* no spare block left: read-only */
	bool seq_ro;                /* sequence numbers near FTL_SEQ_LIMIT:
	                             * host writes refused (writer.c, seq_take) */
	uint32_t ndoomed;           /* BLKF_DOOMED blocks: bad, not yet retired */
	uint64_t throttle_ns;       /* write-reduced: device time per host
	                             * unit (0: not throttled) */
	uint64_t throttle_at;       /* the next host unit is buffered from then */
	bool throttle_wait;         /* a host write waits for throttle_at */
	uint64_t health_throttle_ns;/* throttle_ns is the larger of these two */
	uint64_t thermal_throttle_ns;
	/* thermal (ftl.c, thermal_check; ftl.h "Thermal protection") */
	uint8_t thermal;            /* enum ftl_thermal */
	bool thermal_sensor;        /* the medium has one */
	int32_t temp_mc, temp_max_mc;
	uint64_t thermal_at;        /* the sensor is read again from then */
	uint32_t thermal_calls;     /* thermal_check calls (clock read 1 in 64) */
	struct ioq wq_held;         /* host I/O held while STOPPED */
	char health_msg[192];
	uint32_t wl_erases;         /* blocks erased since the last wear
	                             * levelling check (band_wl_pick) */
	/* erase-count figures for ftl_get_stats, as of es_erased erases and
	 * es_bad bad blocks (es_known false: not counted yet) */
	bool es_known;
	uint64_t es_erased;
	uint32_t es_bad, es_min, es_max;
	double es_avg;

	/* bands */
	struct band *band;          /* [nbands] */
	struct blist *band_free;    /* [nrows] bands with every member FREE */
	struct blist *band_bucket;  /* [nbuckets] GC candidates by valid count */
	uint32_t nbuckets;          /* row_width * data_pages + 1 */
	uint32_t min_bucket;        /* no candidate has fewer valid pages */
	/* GC may open bands below gc_min, down to cp_reserve, for victims
	 * that free at least twice what they take (gc.c, victim_admit): a
	 * crash closes the blocks open at it, nearly empty, and the pool can
	 * sit at gc_min with no room for GC to collect them.  Off again once
	 * the pool is back above gc_min + row width. */
	bool gc_dip;
	bool bands_ready;           /* band counters are kept (from the end of
	                             * open's block classification on) */
	uint32_t nbad, nbad_grown, nmeta, nusable;
	uint32_t sb_block[2];
	uint32_t user_min;          /* user stream allocates only above this */
	uint32_t gc_min;            /* GC stream allocates only above this */
	uint32_t gc_start;          /* GC runs while nfree is below this */
	uint32_t cp_reserve;        /* blocks one checkpoint needs */
	uint32_t cp_need;           /* of those, members of whole free bands
	                             * (cp_blocks_needed; cp_reserve adds a
	                             * band's slack for free blocks of bands
	                             * not yet free whole) */
	uint32_t min_usable;        /* fewer usable blocks: no space (ENOSPC) */

	/* erases of dirty blocks */
	struct nand_op *erase_ops;  /* [ndies] */
	uint32_t *erase_free;       /* stack of free erase op indexes */
	uint32_t nerase_free;

	/* streams */
	struct stream stream[NSTREAMS];
	struct footer *footers;     /* pool */
	struct footer *footer_free;
	uint32_t *footer_of;        /* [nblocks]: pool index + 1, 0: none */
	uint64_t next_seq;

	/* host reads */
	struct rop *rops;
	struct rop *rop_free;
	uint32_t nrops;

	/* waiting I/O */
	struct ioq wq_write;        /* writes, trims, zeroes: head is active */
	struct ioq wq_read;         /* reads waiting for a read op */
	struct ioq wq_durable;      /* flush/FUA: waiting for user done >= wait_pos */
	struct ioq wq_syncing;      /* flush/FUA: programmed, waiting for the sync */
	uint64_t durable_ticket;    /* that sync (nand_sync_start) */
	uint32_t ios_in_flight;
	bool in_progress;
	bool need_poll;             /* ftl_submit left work for ftl_poll */
	struct nand_op *refused;    /* ops the backend refused: completed with
	                             * NAND_INVALID by the next progress turn */
	nand_read_now_t read_now;   /* the medium's synchronous read, or NULL */
	nand_read_soon_t read_soon; /* with read_now: its hint, or NULL */
	uint8_t *read_now_spare;

	/* trims not yet in a record */
	struct ftl_trim_range *trim_pend;
	uint32_t ntrim_pend, trim_cap;
	uint32_t trim_lo, trim_hi;  /* bounds of pending units, for a quick test */
	uint64_t trim_rec_end;      /* user ring position after the newest trim
	                             * record: it is durable once done >= this */

	/* GC */
	struct victim *victims;     /* [nvictims] */
	uint32_t nvictims;
	uint32_t gc_examining;      /* victims in VIC_EXAMINING */
	uint32_t gc_finishing;      /* victims in VIC_FINISHING: vfinish[0..) */
	uint32_t *vfinish;          /* [nvictims]: those victims' indices, any
	                             * order (gc_kick looks at these only) */
	uint32_t gc_examining_max;
	uint32_t gc_slots_wanted;   /* members of the last band turned down for
	                             * want of victim slots (0: none): no new
	                             * pick until that many are free */
	uint16_t *row_victims;      /* [nrows]: examining victims in each row */
	uint64_t gc_admitted;       /* victims admitted so far */
	struct vorder { uint32_t vi; uint64_t admitted; } *vorder;
	uint32_t nvorder;           /* [2 * nvictims]: examining victims in
	                             * admission order; stale entries (the slot
	                             * moved on) are dropped each round */
	struct gc_read *gc_reads;   /* [gc ring slots] */
	struct gc_read *gc_read_free;
	uint32_t gc_reads_out;      /* reads in flight = ring slots reserved */
	int64_t gc_credit;          /* victim pages GC may examine (x16) */
	uint64_t nand_completions;  /* NAND completions delivered (progress) */
	uint64_t finish_seen[8];    /* what the finishing victims waited on when
	                             * a scan of them finished none (gc_kick) */
	int64_t gc_ratio;           /* credit per user page (x16) */

	/* superblock */
	uint64_t sb_seq;
	uint32_t sb_next[2];        /* next page of each sb_block (ppb: full) */
	uint32_t sb_cur;            /* the copy this update is writing (0, 1) */
	uint32_t sb_copies;         /* copies this update programmed */
	struct nand_op sb_op;
	struct nand_op sb_fill[3];  /* copies filling the rest of the NAND page */
	uint8_t *sb_buf, *sb_spare;
	bool sb_busy;
	uint8_t sb_fail_run;        /* failed programs in a row of this copy */
	bool sb_warned[2];          /* a copy failed: logged once per block */
	void (*sb_done)(struct nand_op *); /* called when an update is on media */

	/* checkpoint */
	struct cp_state cp;
	uint64_t cp_interval;

	/* parity (parity.c): 0 or 1 parity die per band stripe */
	uint32_t parity;
	struct band_par *par_pool;  /* contexts of open bands with parity */
	struct band_par *par_free;
	uint32_t npar;
	struct rb_ctx *rb_pool;     /* rebuilds in flight */
	struct rb_ctx *rb_free;
	struct rb_req *rb_wait_head, *rb_wait_tail; /* waiting for a context */
	uint32_t nrb;
	/* idle padding (par_idle_pad): a stripe left partly handed out has no
	 * parity on the media; once no page was handed out for PAR_PAD_NS it
	 * is completed with pad pages, so its parity is programmed */
	uint64_t handouts;          /* pages the open sets handed out (counter) */
	bool par_partial;           /* a stripe may be partly handed out */
	uint64_t par_pad_at;        /* device time to look again (0: not armed) */
	uint64_t par_pad_mark;      /* handouts when armed */
	struct pad_op *pad_pool;    /* pad programs, free ones linked */
	struct pad_op *pad_free;
	/* partial parity for GC's open stripes before a victim's erase
	 * (par_gc_protect): programs with a page each, free ones linked */
	struct ppl_op *ppl_pool;
	struct ppl_op *ppl_free;
	uint32_t gc_seal_inflight;  /* those programs and their pads in flight */
	uint64_t gc_ppl_failures;   /* of those programs (victims issue again) */
	bool ppl_redo;              /* a user partial-parity program failed: the
	                             * flushes waiting issue another first */
	uint64_t par_opens;         /* stripes begun so far (par_stripe.opened) */
	struct par_stripe *gc_stripes; /* stripes of GC bands not yet FREE */
	uint8_t *pad_page;          /* the pad's data: an empty trim record */
	uint64_t par_ticket;        /* stripes sealed so far (par_stripe.ticket):
	                             * a flush waits for the parity of those
	                             * sealed before it */
	uint32_t pad_crc;
	/* failed dies: every operation on them fails (die.c, die_note) */
	uint8_t *die_bad_run;       /* [ndies] failures in a row, saturating */
	uint8_t *die_bad_kinds;     /* [ndies] 1 << enum die_op seen in that run */
	/* a run of program or erase failures with no read among them: one
	 * read of a written block on that die tells a dead die (every
	 * operation fails) from worn blocks (die_note) */
	struct nand_op probe_op;
	uint8_t *probe_spare;
	bool probe_busy;
	uint8_t *die_dead;          /* [ndies] declared failed */
	uint32_t ndead;
	uint32_t **dead_rmap;       /* [ndies] for a dead die (with parity): the
	                             * unit in each of its pages (ppa within the
	                             * die), as of when it failed (checked
	                             * against the l2p before use); NULL: none */
	uint32_t rebuild_total;     /* bands with data on dead dies, at failure */

	/* zero page for zero writes */
	uint8_t *zero_page;

	struct ftl_stats st;
	struct ftl_info info;
	bool cp_damaged;            /* open found the checkpoint damaged */
	uint64_t ram_bytes;
	bool quiet_fail;            /* do not log the sticky failure (tests) */
	struct alloc_rec *allocs;   /* everything to free at close */
	size_t nallocs, cap_allocs;
};

/* ---- shared helpers ----------------------------------------------------- */

/* b is one of the two superblock blocks: never a band member, always META
 * (or BAD), written by superblock.c only */
static inline bool blk_is_sb(const struct ftl *f, uint32_t b)
{
	return b == f->sb_block[0] || b == f->sb_block[1];
}

/* *op: a program of data and spare at page of block; done(op), op->priv =
 * priv, when it completes; every other field zero */
static inline void op_program(struct nand_op *op, uint32_t flags, uint32_t block, uint32_t page,
			      void *data, void *spare, void (*done)(struct nand_op *), void *priv)
{
	*op = (struct nand_op){ .type = NAND_OP_PROGRAM, .flags = flags, .block = block,
				.page = page, .data = data, .spare = spare, .done = done,
				.priv = priv };
}

static inline uint32_t ppa_block(const struct ftl *f, uint32_t ppa)
{
	return ppa / f->ppb;
}
static inline uint32_t ppa_page(const struct ftl *f, uint32_t ppa)
{
	return ppa % f->ppb;
}
static inline uint32_t ppa_make(const struct ftl *f, uint32_t block, uint32_t page)
{
	return block * f->ppb + page;
}
static inline uint32_t block_die(const struct ftl *f, uint32_t block)
{
	return block / f->blocks_per_die;
}
static inline uint32_t die_row(const struct ftl *f, uint32_t die)
{
	return die % f->dies_per_channel;
}
static inline uint32_t block_band(const struct ftl *f, uint32_t block)
{
	return die_row(f, block_die(f, block)) * f->blocks_per_die + block % f->blocks_per_die;
}
static inline uint32_t band_row(const struct ftl *f, uint32_t band)
{
	return band / f->blocks_per_die;
}
/* the block of band in column col (the die on channel col) */
static inline uint32_t band_block(const struct ftl *f, uint32_t band, uint32_t col)
{
	return (col * f->dies_per_channel + band_row(f, band)) * f->blocks_per_die +
	       band % f->blocks_per_die;
}

/*
 * The free pool host writes may not take below: user_min, less the
 * headroom kept for a checkpoint's blocks while a checkpoint holds them
 * (from its allocation to the commit that frees the one before the
 * previous).
 * Without that, taking them stalled host writes until GC had refilled the
 * pool: 3 s every checkpoint on a full-size ioDimm.
 */
static inline uint32_t user_floor(const struct ftl *f)
{
	bool held = f->cp.phase == CP_WRITE || f->cp.phase == CP_SYNC || f->cp.phase == CP_COMMIT ||
		    f->cp.phase == CP_RELEASE;
	return held ? f->user_min - f->cp_headroom : f->user_min;
}

/* format.c: the geometry and capacity of the device's format; after
 * sb_load found no superblock, -ENODATA if the medium is blank, else
 * -EUCLEAN; the superblock's format checked against the device (0,
 * -EINVAL or -ENOTSUP, with err) */
int ftl_geometry_init(struct ftl *f, struct nand_dev *dev, char *err, size_t errlen);
void ftl_geometry_fini(struct ftl *f);
int blank_or_damaged(struct ftl *f, char *err, size_t errlen);
int sb_format_check(const struct ftl *f, const struct ftl_sb *sb, char *err, size_t errlen);
void ftl_fail(struct ftl *f, int err, const char *why);
void ftl_failf(struct ftl *f, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/*
 * Submit an FTL operation to the medium.  A refused submit stops the FTL
 * (sticky -EIO) and the op completes with NAND_INVALID on the next progress
 * turn, so its owner's bookkeeping runs as for any failed op.
 */
void ftl_nand_submit(struct ftl *f, struct nand_op *op);
/*
 * For completion handlers: true when the FTL is stopped (now or by this
 * op: power loss, an error of the backend's own storage, a refused or
 * invalid op).  Then the handler only releases what it holds: it never
 * retires, retries, relocates or marks anything lost.
 */
bool ftl_op_stops(struct ftl *f, const struct nand_op *op);
/* Check a data page read from the medium against its spare: 0, or -EIO
 * (counted and logged) when the spare does not name unit or the data fails
 * its CRC32C.  data_crc: the CRC32C of the data as read, summed by the
 * medium in its copy (NAND_OPF_DATA_CRC) or by the caller, so the check
 * costs no pass over the page of its own. */
int ftl_check_data(struct ftl *f, uint32_t data_crc, const void *spare, uint64_t unit, uint32_t ppa);
/* Count and log (rate-limited) a page whose data failed its CRC32C. */
void ftl_crc_error(struct ftl *f, uint32_t ppa, const char *what);
void *ftl_alloc(struct ftl *f, size_t size);      /* zeroed, counted in ram_bytes */
void *ftl_alloc_pages(struct ftl *f, size_t size); /* page-aligned */
void *ftl_alloc_lazy(struct ftl *f, size_t size);  /* page-aligned, zero, resident only
						    * once touched (own mapping) */
void *ftl_map(struct ftl *f, size_t size);         /* the same, huge pages advised */
/* every allocation above, the checkpoint's buffers and f itself freed */
void ftl_free_all(struct ftl *f);
/* refused ops completed (their owners see NAND_INVALID): how many */
int ftl_deliver_refused(struct ftl *f);
void ftl_progress(struct ftl *f);
void ftl_debug_dump(struct ftl *f);
/* Run the medium until pred(f, arg) holds or the FTL fails (blocking). */
int ftl_run_until(struct ftl *f, bool (*pred)(struct ftl *, void *), void *arg);
/* A message at level (enum ftl_log_level) to the logger (ftl.h) */
void ftl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* spare */
void spare_build_crc(struct ftl *f, void *spare, uint8_t type, uint32_t lba, uint64_t seq,
		     uint32_t data_crc);
/* the same with the `reserved` field set (partial parity: its columns) */
void spare_build_full(struct ftl *f, void *spare, uint8_t type, uint32_t lba, uint64_t seq,
		      uint32_t data_crc, uint32_t reserved);
void spare_build(struct ftl *f, void *spare, uint8_t type, uint32_t lba, uint64_t seq,
		 const void *data, bool with_crc);
/* 0: valid FTL spare of this format and media version; -ENODATA: erased;
 * -EILSEQ: not ours, damaged, or of another media version */
int spare_parse(struct ftl *f, const void *spare, struct ftl_spare *out);

/* block.c: every change of a block's state is made here */
void blist_init(struct blist *l);
void blist_push(struct ftl *f, struct blist *l, uint32_t b);
void blist_remove(struct ftl *f, struct blist *l, uint32_t b);
uint32_t blist_pop(struct ftl *f, struct blist *l);
int blk_init(struct ftl *f);                       /* arrays and lists, at open */
/* open's classification, before bands_ready: factory or grown bad, or
 * metadata (superblock, the loaded checkpoint) */
void blk_mark_initial(struct ftl *f, uint32_t b, enum blk_state st, bool grown);
/* start keeping band counters: the remaining blocks are classified next
 * with the blk_set_* calls */
void band_start(struct ftl *f);
void blk_set_free(struct ftl *f, uint32_t b);      /* erased */
void blk_set_dirty(struct ftl *f, uint32_t b);     /* needs an erase */
void blk_set_closed(struct ftl *f, uint32_t b);
void blk_set_bad(struct ftl *f, uint32_t b, bool grown);
/* Block b's erase count (f->erases); an erase of it was issued (counted
 * whatever its outcome: the cells wore); a count loaded from a checkpoint */
static inline uint32_t blk_erases(const struct ftl *f, uint32_t b)
{
	return f->erases[b];
}
void blk_erase_counted(struct ftl *f, uint32_t b);
void blk_erases_set(struct ftl *f, uint32_t b, uint32_t count);
/* At open, after recovery: no count below the medium's (where it keeps
 * them). */
void blk_erases_open(struct ftl *f);
/* counted as lost by the reserves from now on, before it is retired (a
 * dead die's blocks still holding data); the caller updates health */
void blk_doom(struct ftl *f, uint32_t b);
void blk_set_victim(struct ftl *f, uint32_t b);    /* CLOSED or RETIRING -> VICTIM */
void blk_set_retiring(struct ftl *f, uint32_t b);  /* OPEN, a program failed */
void blk_invalidate(struct ftl *f, uint32_t ppa);  /* valid-- */
void blk_validate(struct ftl *f, uint32_t ppa);    /* valid++ */
/*
 * The health of a read of a page of block b (status st, worst codeword
 * cmax corrected bits): a read near the ECC limit marks the band for
 * refresh.  An uncorrectable read does not: it gives nothing to move (GC
 * would record the unit lost, where a later read may still succeed), and a
 * dead die would have every band of its row moved for nothing.  O(1).
 */
void band_mark_refresh(struct ftl *f, uint32_t b, enum nand_status st, uint16_t cmax);
void blk_read_health(struct ftl *f, uint32_t b, enum nand_status st, uint16_t cmax);
/* A BANDF_REFRESH band that is a GC candidate, or FTL_NO_BLOCK.  O(nbands)
 * at worst, and only while nrefresh_ready (then it is admitted at once). */
uint32_t band_refresh_pick(struct ftl *f);
/* Static wear levelling: a cold GC candidate band far less worn than the
 * most worn band, or FTL_NO_BLOCK; checks every WL_INTERVAL bands erased. */
uint32_t band_wl_pick(struct ftl *f);
/* A free band of row (the least worn of the longest free; the most worn
 * if worn), its members moved to st (BLK_OPEN or BLK_META); FTL_NO_BLOCK
 * if the row has none. */
uint32_t band_alloc(struct ftl *f, uint32_t row, enum blk_state st, bool worn);
/* The GC candidate band with the best cost-benefit, preferring rows with
 * row_busy[row] == 0; FTL_NO_BLOCK if none. */
uint32_t band_victim_pick(struct ftl *f, const uint16_t *row_busy);
enum { HEALTH_OK, HEALTH_LOW, HEALTH_REDUCED, HEALTH_READONLY };
/* Reserves (spare blocks left / at format, in %) and the health state
 * they give; a change is logged.  O(1); called whenever nusable changes. */
double reserve_percent(const struct ftl *f);
void health_update(struct ftl *f);
/* throttle.c: throttle_ns from its two causes; a host unit may be buffered
 * now (false: wait for throttle_at, throttle_wait set) */
void throttle_update(struct ftl *f);
bool throttle_pass(struct ftl *f);
void thermal_check(struct ftl *f, bool force);
/* io.c: ftl_submit's request checked and counted, then failed at once,
 * held (thermal stop) or dispatched: true if dispatched (the caller then
 * runs a foreground progress turn) */
bool io_start(struct ftl *f, struct ftl_io *io);
void io_dispatch(struct ftl *f, struct ftl_io *io);
void io_release_held(struct ftl *f);
int io_fail_held(struct ftl *f, int status);
uint32_t band_members_free(const struct ftl *f);    /* members of all free bands */
/* dipping, GC may take free bands as long as members of whole free bands
 * for a checkpoint are left (set_next_page and gc_room check those when
 * the floor is below cp_reserve) */
static inline uint32_t gc_floor(const struct ftl *f)
{
	return f->gc_dip ? f->cp_need : f->gc_min;
}
uint32_t row_live_width(const struct ftl *f, uint32_t row); /* members of its bands, dead dies left out */
/* user pages written since the data of ppa's band was written by the host */
uint32_t band_data_age(const struct ftl *f, uint32_t ppa);
/* GC relocated page from into page ppa: fold from's birth into ppa's band */
void band_born_note(struct ftl *f, uint32_t ppa, uint32_t from);
int eraser_kick(struct ftl *f);
void blk_limits(struct ftl *f);

/* parity.c: stripe parity (the Flashback files: parity.c, parity_ppl.c,
 * parity_rebuild.c, parity_recover.c; what they share: parity_int.h) */
int par_init(struct ftl *f);
void par_debug_dump(struct ftl *f); /* through ftl_log */
/* band bi was opened by a set: pick its parity column, attach a context;
 * false if none is free (the set tries again later) */
bool par_band_open(struct ftl *f, uint32_t bi, bool gc);
bool par_is_pcol(const struct ftl *f, uint32_t bi, uint32_t col);
/* data page `page` of band bi in column col is being handed out; last: no
 * later column of the stripe will be.  false: the stripe's context slot is
 * still busy with an older stripe (hand out nothing from this band now) */
bool par_handout(struct ftl *f, uint32_t bi, uint32_t page, uint32_t col, bool last);
bool par_handout_ok(struct ftl *f, uint32_t bi, uint32_t page);
/* the cursor left stripe `page` of band bi: nothing more is handed out */
void par_seal(struct ftl *f, uint32_t bi, uint32_t page);
/* closing: program the parity of the partial stripes (nothing more will be
 * handed out of the open bands: the next open closes them) */
void par_seal_all(struct ftl *f);
/* a data page's program failed: out of its stripe's parity (or, too late
 * for that, its band marked for refresh) */
void par_program_failed(struct ftl *f, uint32_t ppa, const uint8_t *data, const uint8_t *spare);
/* the stripes of GC bands begun by `mark` (par_opens then) that got a
 * member at or after handout number `first`: all have their parity on the
 * media (CLEAR), some still wait for its program (SEALING), or some are
 * still partly handed out (OPEN); O(stripes of GC bands not FREE: about
 * the open GC rows) */
enum par_gc_wait { PAR_GC_CLEAR, PAR_GC_SEALING, PAR_GC_OPEN };
enum par_gc_wait par_gc_waits(const struct ftl *f, uint64_t mark, uint64_t first);
/* every stripe sealed with a ticket <= t has its parity page programmed
 * (or is known to go without); O(open bands x PAR_STRIPES) */
bool par_sealed_done(const struct ftl *f, uint64_t t);
/* a data page's program was submitted: fold it into its stripe's parity */
void par_submitted(struct ftl *f, uint32_t ppa, const uint8_t *data, const uint8_t *spare);
/* core.c: dst ^= src, n bytes (parity pages, checkpoint parity) */
void xor_into(uint8_t *dst, const uint8_t *src, size_t n);

/* parity_ppl.c: pads and partial parity */
/* idle: pad the stripes left partly handed out (called by progress) */
int par_idle_pad(struct ftl *f);
/* when par_idle_pad wants to look next (UINT64_MAX: nothing armed) */
uint64_t par_pad_due(const struct ftl *f);
/* a flush or FUA write: a partial-parity slot into every stripe of the user
 * stream partly handed out (false: no ring slot now, call again) */
bool par_flush_ppl(struct ftl *f);
/* the partial-parity page ppa of stream `stream` failed its program: its
 * stripe, if still partly handed out, is served again (the user stream's
 * by the flushes waiting, f->ppl_redo; GC's by the victims waiting) */
void par_ppl_failed(struct ftl *f, enum stream_id stream, uint32_t ppa);
/* before a victim's erase: a partial-parity page (a pad on a stripe 0) now
 * into every stripe of the GC stream partly handed out, so relocated data
 * there is not left with its parity in memory only (false: no op free now,
 * call again; stripes served already are not served twice) */
bool par_gc_protect(struct ftl *f);
/* what par_gc_protect issued is programmed, and the parity of every stripe
 * sealed with a ticket <= t */
bool par_gc_protected(const struct ftl *f, uint64_t t);
/* at its submit: the partial-parity page's data and spare; its data CRC */
uint32_t par_ppl_build(struct ftl *f, uint32_t ppa, uint64_t seq, uint8_t *data, uint8_t *spare);

/* parity_rebuild.c: 0: rebuild started or queued (rq->done follows);
 * -ENOENT: no parity */
int par_rebuild(struct ftl *f, struct rb_req *rq);

/* parity_recover.c, at open */
/* recovery, with the blocks that were open at the crash (no footer): the
 * stripes they hold without a parity page get one (*done: bands made
 * whole; the others are marked for refresh).  0, or -EIO if the medium
 * stopped (a power cut during open). */
int par_recover(struct ftl *f, const uint32_t *blocks, uint32_t n, uint32_t *done);
/* page ppa rebuilt with synchronous reads */
int par_rebuild_sync(struct ftl *f, uint32_t ppa, uint8_t *data, uint8_t *spare);
/* the log pages of dead die `die` newer than the checkpoint, through add */
int par_recover_dead_spares(struct ftl *f, uint32_t die,
			    int (*add)(void *ctx, uint64_t seq, uint32_t ppa, uint8_t type, uint32_t lba),
			    void *ctx);

/* die.c: the failure runs per die (their arrays: die_init, with or
 * without parity).  An operation on block b completed ok or failed: a die
 * whose operations all fail is declared dead (logged, its bands rebuilt by
 * GC) */
int die_init(struct ftl *f);
enum die_op { DIE_READ, DIE_PROGRAM, DIE_ERASE };
void die_note(struct ftl *f, uint32_t b, enum die_op kind, bool ok);
static inline bool die_is_dead(const struct ftl *f, uint32_t b)
{
	return f->ndead && f->die_dead[b / f->blocks_per_die];
}
void die_declare_dead(struct ftl *f, uint32_t die, const char *why);
/* block b holds data of its band (or may: being written, collected,
 * retired) */
static inline bool band_has_data_on(const struct ftl *f, uint32_t b)
{
	uint8_t st = f->blk[b].state;
	return st == BLK_OPEN || st == BLK_CLOSED || st == BLK_VICTIM || st == BLK_RETIRING;
}
/* the unit the dead die's reverse map puts at ppa, or UINT32_MAX */
uint32_t dead_rmap_unit(struct ftl *f, uint32_t ppa);
uint32_t par_rebuild_left(struct ftl *f);  /* bands still holding data on dead dies */
/* block.c: mark band of b for refresh (GC moves its data first), why logged */
void band_flag_refresh(struct ftl *f, uint32_t b, const char *why);

/* writer.c */
int ring_init(struct ftl *f, struct ring *r, uint32_t nslots);
static inline struct slot *ring_slot(struct ring *r, uint64_t pos)
{
	return &r->slots[pos & r->mask];
}
static inline uint8_t *ring_data(struct ring *r, uint32_t idx)
{
	return r->slots[idx].data;
}
/* A page buffer off the ring's free stack; there is always one for a slot
 * being filled or a GC read admitted (see struct ring). */
static inline uint8_t *ring_buf_take(struct ring *r)
{
	return r->buf_free[--r->nbuf_free];
}
static inline void ring_buf_give(struct ring *r, uint8_t *p)
{
	r->buf_free[r->nbuf_free++] = p;
}
/* The buffer of the slot at the fill cursor, attached if it has none. */
static inline uint8_t *ring_fill_data(struct ring *r, uint32_t idx)
{
	struct slot *sl = &r->slots[idx];
	if (!sl->data)
		sl->data = ring_buf_take(r);
	return sl->data;
}
static inline uint32_t ring_free(const struct ring *r)
{
	return r->nslots - (uint32_t)(r->fill - r->done);
}
/*
 * The next log sequence number (next_seq is handed out here only, and set
 * at open by recovery).  Never FTL_SEQ_LIMIT or above, so every page the
 * FTL writes is taken at the next open: from FTL_SEQ_LIMIT -
 * FTL_SEQ_HEADROOM / 2 on, host writes are refused (seq_ro, -EROFS), and
 * taking the last number the media accept, FTL_SEQ_LIMIT - 1, fails the
 * FTL; that number is then handed out to every page still taking one
 * (pads, partial parity already on their way), none of which a flush
 * acknowledged.  O(1).
 */
uint64_t seq_take_slow(struct ftl *f);
static inline uint64_t seq_take(struct ftl *f)
{
	if (__builtin_expect(f->next_seq >= FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM / 2, 0))
		return seq_take_slow(f);
	return f->next_seq++;
}
int writer_kick(struct ftl *f, struct stream *s);
uint32_t stream_next_page(struct ftl *f, struct stream *s, uint32_t floor);
uint32_t set_next_page(struct ftl *f, struct open_set *set, uint32_t floor);
uint32_t set_pad_page(struct ftl *f, struct open_set *set, uint32_t row, bool *busy);
uint32_t set_page_fill(struct ftl *f, struct open_set *set, uint32_t row);
/* the user set for a host write of a unit whose mapping was prev (O(1)) */
uint32_t user_set(struct ftl *f, uint32_t prev);
/* the GC set for the relocation of page from */
uint32_t gc_set(struct ftl *f, uint32_t from);
void ring_release(struct ftl *f, struct ring *r); /* advance done over finished slots */
uint8_t *slot_data(struct ftl *f, uint32_t l2p_entry);
/* the durable mapping a slot-referenced unit had before (never a slot) */
uint32_t slot_prev(struct ftl *f, uint32_t l2p_entry);

/* footer.c */
int footer_init(struct ftl *f);
void footer_attach(struct ftl *f, uint32_t b); /* b opened: a footer from the pool */
/* a program of page ppa was submitted: note it in its block's footer */
void footer_note(struct ftl *f, uint32_t ppa, uint32_t lba, uint64_t seq, uint32_t crc);
/* a footer read back: 0 and the entries, or -EILSEQ if it is not valid
 * (buf: footer_pages pages, spares: their spare areas) */
int footer_parse(struct ftl *f, uint32_t block, const uint8_t *buf, const uint8_t *spares,
		 const struct ftl_footer_entry **entries);
/* b's programs all finished: close it, or queue it for GC to retire */
void blk_programs_settled(struct ftl *f, uint32_t b);
/* a program into b failed: stop using it; GC retires it */
void blk_program_failed(struct ftl *f, uint32_t b);

/* io.c */
void ioq_push(struct ioq *q, struct ftl_io *io);
struct ftl_io *ioq_pop(struct ioq *q);
void io_complete(struct ftl *f, struct ftl_io *io, int status);
int io_kick(struct ftl *f);
void io_fail_all(struct ftl *f);

/* trim.c */
bool trim_pending_overlaps(struct ftl *f, uint64_t unit);
/* add units to the pending record; false if the record is full */
bool trim_pending_add(struct ftl *f, uint32_t start, uint32_t count, bool lost);
/* close the pending record into a user slot; false if no slot is free */
bool trim_close_record(struct ftl *f);
/* the same, opening a block only while more than floor blocks are free */
bool trim_close_record_floor(struct ftl *f, uint32_t floor);
void trim_apply_record(struct ftl *f, const void *page, uint64_t seq);
uint32_t trim_record_capacity(struct ftl *f);

/* gc.c */
int gc_kick(struct ftl *f);
void gc_slot_read_done(struct ftl *f, struct slot *s, uint32_t idx);
int gc_init(struct ftl *f);
int gc_cancel_stalled(struct ftl *f);
bool gc_busy(struct ftl *f);

/* superblock.c */
void sb_locate(struct ftl *f);
int sb_load(struct ftl *f, struct ftl_sb *out, char *err, size_t errlen);
int sb_start_write(struct ftl *f, bool clean, void (*done)(struct nand_op *));
/* A first superblock (format, repair) with sb_seq f->sb_seq: erase the
 * first superblock block and program its page 0, then the same in the
 * second, so a cut at any point leaves one of them whole (the new
 * superblock, or what the second held).  Nothing else may be in flight.
 * 0 or -EIO with err set. */
int sb_write_initial(struct ftl *f, bool clean, char *err, size_t errlen);
void sb_fill(struct ftl *f, struct ftl_sb *sb, bool clean);

/* checkpoint_layout.c: sizes of a checkpoint's parts */
uint32_t cp_l2p_pages(const struct ftl *f);
uint32_t cp_blocks_needed(const struct ftl *f);

/* checkpoint.c: writing one */
/* A checkpoint has l2p pages left to look at and nothing in flight to wake
 * the owner: ftl_poll must be called again at once. */
bool cp_wants_poll(const struct ftl *f);
int cp_init(struct ftl *f);
int cp_kick(struct ftl *f);
/*
 * Where the j-th l2p page a checkpoint writes goes among its nb l2p blocks:
 * striped over them in the order written, a NAND page's units in a row
 * (several units per page: the page is programmed once they are all in).
 */
static inline uint32_t cp_l2p_block_index(const struct ftl *f, uint64_t j, uint32_t nb)
{
	return (uint32_t)(j / f->upp % nb);
}

static inline uint32_t cp_l2p_page(const struct ftl *f, uint64_t j, uint32_t nb)
{
	return (uint32_t)(j / ((uint64_t)f->upp * nb) * f->upp + j % f->upp);
}

/* A checkpoint asked for (clean: the close's, marking the media clean):
 * checkpoint.c's cp_kick starts it on its next turn.  The only change to
 * checkpoint state made outside checkpoint*.c: two flags it reads. */
static inline void cp_request(struct ftl *f, bool clean)
{
	f->cp.requested = true;
	if (clean)
		f->cp.clean = true;
}
void cp_open_room(struct ftl *f);
int cp_open_release(struct ftl *f);

/* checkpoint_load.c: the checkpoint the superblock names into the l2p (its
 * blocks META, its lists applied), the previous one kept: 0; the current
 * one damaged and the previous loaded instead: 1; neither loadable:
 * -EILSEQ (the map is empty: replay the whole log); err says why.  Other
 * -errno: failed. */
int cp_load(struct ftl *f, const struct ftl_sb *sb, char *err, size_t errlen);
/* Check the checkpoint whose header is in block without loading it (sets
 * f->units and f->format_id from its header): 0 and *h, or -EILSEQ and
 * *why. */
int cp_verify(struct ftl *f, uint32_t block, struct ftl_cp_hdr *h, const char **why);

/* recovery.c; dead_dies: the superblock's bitmap of dies declared dead
 * (struct ftl_sb), declared again whatever their reads say */
int recovery_run(struct ftl *f, const uint8_t *dead_dies, char *err, size_t errlen);

/* core.c: synchronous single-op helper for open/format paths (nothing else in flight) */
enum nand_status nand_op_sync(struct nand_dev *dev, struct nand_op *op);
/* the n programs (or erases) of ops submitted in order, all waited for: the
 * first status that is not NAND_OK, else NAND_OK (a NAND page's units,
 * programmed together by ftl/upage.c) */
enum nand_status nand_programs_sync(struct nand_dev *dev, struct nand_op *ops, uint32_t n);
/* ftl/upage.c: 4 KiB unit pages over NAND pages of 8 or 16 KiB */
struct nand_dev *upage_wrap(struct nand_dev *inner);
void upage_seal(struct nand_dev *d, uint32_t block);
void upage_seal_all(struct nand_dev *d);
/* pads completing the NAND pages partly handed out (parity_ppl.c) */
int upage_pad(struct ftl *f, bool now);

/*
 * Batched reads for open/recovery: count reads, at most window in flight.
 * setup(i, op) fills block, page, data and spare (op->data/op->spare come
 * preset to buffers of the batch); result(i, op) sees the status and data.
 * Returns 0 or -EIO if the medium lost power.
 */
int read_batch(struct ftl *f, uint64_t count, uint32_t window,
	       void (*setup)(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op),
	       void (*result)(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op),
	       void *ctx);

#endif
