/*
 * ftl/media.h - what the FTL stores on NAND (private to ftl/).
 *
 * All structures are packed and little-endian (the build refuses big-endian
 * hosts), carry a magic, a version and a CRC32C, and have static size
 * asserts.  Changing one of them means bumping FTL_MEDIA_VERSION.
 *
 * Layout on the device:
 *   superblock  block 0 of die 0 and block 0 of die 1 (block 1 of die 0 on
 *               a one-die device).  Each update programs the next page of
 *               the active block; when it is full the other block is erased
 *               and becomes active.  The valid page with the highest sb_seq
 *               wins.
 *   checkpoint  blocks taken from the free pool: a header block (struct
 *               ftl_cp_hdr followed by the block lists, in consecutive
 *               pages), then the L2P table, 1024 entries per page, striped
 *               over the remaining blocks (page i is in block 1 + i % n,
 *               page i / n).  The superblock points at the header block,
 *               and at the previous checkpoint's (FTL_SB_CP_PREV), whose
 *               blocks are released only once a newer one commits: a
 *               damaged current checkpoint falls back to it, replaying
 *               the log after it (GC keeps what that replay needs).
 *               In rows of two or more dies, each band's blocks carry a
 *               parity block and the header has a copy, as flags &
 *               FTL_CP_PARITY says (below).
 *   log         every other page: host data, GC relocations and trim
 *               records, each with struct ftl_spare in its spare area.
 *   footer      the last footer_pages pages of every log block a stream
 *               fills: struct ftl_footer_hdr, then one ftl_footer_entry per
 *               data page of the block (its P2L: unit, sequence number and
 *               data CRC), so GC and recovery read a page or two instead
 *               of every spare area.  A block without a valid footer
 *               (written before footers existed, cut short by a crash or
 *               a failure) is read spare by spare.
 *   parity      with parity width 1 (Flashback), one member of each band
 *               (the first live one from column band % row width on
 *               when the band opens: the parity rotates) holds parity: its
 *               page p is the XOR of page p of the stripe's data members
 *               (those whose bit is set in the parity page's spare field
 *               `reserved`), and its spare, after its own struct
 *               ftl_spare, holds the XOR of those members' ftl_spare
 *               structs, so a page rebuilt from the others carries its own
 *               unit, sequence number and CRC and is checked like a read.
 *               A stripe's parity is programmed once every data page of
 *               it has been submitted; until then the FTL keeps it in
 *               memory; when writes pause (100 ms), stripes left partly
 *               written are completed with pad pages (empty trim
 *               records) so their parity is programmed.  Stripes cut
 *               short by a crash have no parity page:
 *               recovery marks their bands for refresh, so GC moves that
 *               data into protected stripes first.  Footer pages are not
 *               covered (GC falls back to the map for a dead die's pages).
 *   partial parity  a flush (or FUA write) writes into
 *               every stripe of the user stream that is partly written
 *               its next member, a partial-parity page (FTL_PG_PPL): data
 *               the XOR of the stripe's members programmed before it
 *               (their columns in `reserved`), spare after its own
 *               ftl_spare the XOR of theirs, like a parity page; it is
 *               then a member of the stripe like any other (in the XOR of
 *               its parity page).  A die lost with a power cut before the
 *               stripe completes: recovery rebuilds the member on that die
 *               from the stripe's newest PPL page that covers it (its
 *               spare for the replay, its data into the stripe's parity
 *               page).  Never page 0 of a block (a flashd from before
 *               takes a block whose first page it does not know for
 *               empty), so a flush leaves a band's first stripe without.
 *               GC and replay skip PPL pages (footer entry: parity).
 */
#ifndef FLASHD_FTL_MEDIA_H
#define FLASHD_FTL_MEDIA_H

#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "FTL on-media structures are little-endian"
#endif

#define FTL_MEDIA_VERSION 1
#define FTL_SPARE_MAGIC 0x4C544653u   /* "SFTL" */
#define FTL_SB_MAGIC "FLASHFTL"
#define FTL_CP_MAGIC "FLASHCPT"
#define FTL_TRIM_MAGIC 0x4D495254u    /* "TRIM" */
#define FTL_NO_BLOCK 0xFFFFFFFFu
/* Sequence numbers (log pages, checkpoints, superblock updates) stay below
 * this: 2^62 at ten million pages a second takes 14,000 years.  A larger
 * one on the media was not written by the FTL, and is not taken: as the
 * log's newest it would wrap the numbering, and writes after it would
 * replay as older than the checkpoint (lost at the next crash). */
#define FTL_SEQ_LIMIT (1ull << 62)
/* Every number the FTL writes is below FTL_SEQ_LIMIT, so the next open
 * takes it: an open that finds one (log, checkpoint or superblock) at
 * FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM or above (only a crafted or damaged
 * image has one) serves read-only; a session refuses host writes from
 * FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM / 2 on (2^39 numbers left for what is
 * buffered, GC, pads and trim records), and fails rather than hand out
 * FTL_SEQ_LIMIT (ftl_int.h, seq_take); a format over a superblock
 * numbered past FTL_SEQ_LIMIT / 2 numbers its superblock from 1 again. */
#define FTL_SEQ_HEADROOM (1ull << 40)

enum ftl_page_type {
	FTL_PG_DATA = 1,    /* lba = mapping unit */
	FTL_PG_TRIM = 2,    /* lba = number of ranges in the record */
	FTL_PG_CKPT = 3,    /* lba = page index within the checkpoint */
	FTL_PG_SB = 4,      /* lba = 0 */
	FTL_PG_FOOTER = 5,  /* lba = page index within the footer */
	FTL_PG_PARITY = 6,  /* lba = stripe (page index); reserved = columns
	                     * of the stripe's data pages; seq = their newest */
	FTL_PG_PPL = 7,     /* partial parity (media.h, "parity"): lba = stripe;
	                     * reserved = the columns it covers */
};

/* Spare area of every page the FTL programs. */
struct __attribute__((packed)) ftl_spare {
	uint32_t magic;
	uint8_t type;       /* enum ftl_page_type */
	uint8_t version;
	uint16_t flags;
	uint32_t lba;
	uint32_t data_crc;  /* crc32c of the page data */
	uint64_t seq;       /* log order (data, trim); cp_seq (ckpt); sb_seq (sb) */
	uint64_t format_id;
	uint32_t reserved;
	uint32_t crc;       /* crc32c of the bytes before it */
};
_Static_assert(sizeof(struct ftl_spare) == 40, "ftl_spare is on media");

/* One superblock page. */
struct __attribute__((packed)) ftl_sb {
	char magic[8];
	uint32_t version;
	uint32_t size;           /* sizeof(struct ftl_sb) */
	uint64_t format_id;
	uint64_t sb_seq;
	uint32_t geo[7];         /* struct nand_geometry at format time */
	char preset[32];
	uint32_t sector_size;
	uint32_t unit_size;      /* 4096 */
	uint64_t units;          /* user capacity in units */
	uint64_t format_time;
	uint32_t cp_block;       /* header block of the checkpoint, or FTL_NO_BLOCK */
	uint32_t cp_nblocks;
	uint64_t cp_seq;
	uint32_t clean;          /* 1: written by a clean close after its checkpoint */
	uint32_t reserved0;
	uint64_t open_count;
	/* parity dies per band stripe (a band is block k of every die of a
	 * row: the row's width = channels).  0 in this version; Flashback
	 * parity (24 + 1 on iodimm-mlc-320) will set it, and a version that
	 * cannot serve the width it finds refuses the image.  Zero in images
	 * formatted before the field existed (it was reserved). */
	uint32_t parity_width;
	/* the checkpoint header's copy (flags & FTL_SB_CP_MIRROR; written in
	 * rows of two or more dies: the header block is on one die, the copy
	 * on another) */
	uint32_t cp_mirror_block;
	uint32_t flags;
	/* dies declared dead, die d in bit d % 8 of byte d / 8 (dies 0 to
	 * FTL_SB_DEAD_DIES - 1; zero in superblocks written before it
	 * existed, where a dead die is found again by its reads at open) */
	uint8_t dead_dies[64];
	/* the checkpoint before the current one (flags & FTL_SB_CP_PREV):
	 * kept on the media until the one after the current commits, loaded
	 * when the current one is damaged (zero in superblocks written before
	 * it existed: those name one checkpoint) */
	uint32_t prev_cp_block;
	uint32_t prev_cp_mirror_block;   /* FTL_NO_BLOCK: no header copy */
	uint64_t prev_cp_seq;
	uint8_t reserved[36];
	uint32_t crc;
};
#define FTL_SB_DEAD_DIES 512u
#define FTL_SB_CP_MIRROR 1u
#define FTL_SB_CP_PREV 2u
_Static_assert(sizeof(struct ftl_sb) == 280, "ftl_sb is on media");

/* Checkpoint header, first page(s) of the header block. */
struct __attribute__((packed)) ftl_cp_hdr {
	char magic[8];
	uint32_t version;
	uint32_t size;           /* sizeof(struct ftl_cp_hdr) */
	uint64_t format_id;
	uint64_t cp_seq;         /* every log page with seq <= cp_seq is reflected */
	uint64_t units;
	uint32_t l2p_pages;
	uint32_t hdr_pages;      /* pages of header + lists in the header block */
	uint32_t nblocks;        /* L2P blocks (the header block not included) */
	uint32_t nopen;          /* log blocks open at cp_seq: scanned at recovery */
	uint32_t nbad;           /* grown bad blocks */
	uint32_t clean;
	uint64_t stats_host_pages_written;
	uint64_t stats_nand_pages_programmed;
	uint64_t stats_blocks_erased;
	/* the format, so the superblock can be rebuilt from a checkpoint
	 * (zero in checkpoints written before these fields existed) */
	uint32_t sector_size;
	uint32_t ngroups;        /* flags & FTL_CP_PARITY: parity groups (else 0) */
	uint64_t format_time;
	/* lifetime counters (zero in checkpoints written before they existed) */
	uint64_t stats_host_read_bytes;
	uint64_t stats_host_write_bytes;
	uint64_t stats_nand_pages_read;
	uint64_t stats_host_read_ops;
	uint64_t stats_host_write_ops;
	/* sparse checkpoints (flags & FTL_CP_SPARSE; zero in checkpoints
	 * written before they existed, which hold every l2p page): only the
	 * l2p pages with a mapped unit are written, l2p_written of them, packed
	 * in map order; the bitmap after the lists says which */
	uint32_t l2p_written;
	uint32_t flags;
	uint32_t lists_crc;      /* crc32c of the u32 lists (and bitmap) that follow */
	uint32_t crc;            /* crc32c of the bytes before it */
	/* followed by: uint32_t blocks[nblocks], open[nopen], bad[nbad], and
	 * when sparse uint32_t present[(l2p_pages + 31) / 32] (bit i of word
	 * i / 32: l2p page i was written; a page left out has no mapped unit),
	 * and when flags & FTL_CP_PARITY: uint32_t mirror (the header block's
	 * copy), pblock[ngroups], gend[ngroups] (see FTL_CP_PARITY) */
};
#define FTL_CP_SPARSE 1u
/*
 * Checkpoint parity (written for every format whose rows have two or
 * more dies): the l2p blocks
 * come in groups, one per band the checkpoint took (blocks[gend[g-1]] ..
 * blocks[gend[g] - 1], all on different dies), and page p of pblock[g]
 * is the XOR of page p of the group's blocks, as far as they were written
 * (l2p page j is in block j % nblocks, page j / nblocks).  Its spare: type
 * FTL_PG_CKPT, lba FTL_CP_PARITY_LBA, seq cp_seq, data_crc the XOR of the
 * members' data CRCs, so a page rebuilt from the others is checked like
 * one read.  pblock[g] is FTL_NO_BLOCK for a group of one block (a band
 * with too few live members).  The header pages are written twice, to the
 * header block and to the mirror, named by the superblock too.  So one
 * dead die (or one unreadable page per stripe) leaves the checkpoint
 * loadable.
 */
#define FTL_CP_PARITY 2u
/* bad[] entries with bit 31 set (flags & FTL_CP_DOOMED, set only when
 * there is one, so a checkpoint without any stays readable by a version
 * that does not know the flag):
 * blocks whose program failed and that GC had not retired yet; retired
 * once recovery has classified them (their data relocated first) */
#define FTL_CP_DOOMED 4u
#define FTL_CP_BAD_DOOMED 0x80000000u
/* flags & FTL_CP_REFRESH (set only when a band is marked): after
 * everything above, uint32_t nrefresh, band[nrefresh]: the bands marked
 * for refresh (GC moves their data first), among them those
 * with stripes whose parity does not cover them (a program failed after
 * the stripe's parity was computed, or the parity block failed), so a
 * restart does not forget them */
#define FTL_CP_REFRESH 8u
#define FTL_CP_PARITY_LBA 0xFFFFFFFFu
_Static_assert(sizeof(struct ftl_cp_hdr) == 160, "ftl_cp_hdr is on media");

/*
 * Erase counts: the pages of the header block after the header's
 * hdr_pages (not in its copy; a version that does not know them ignores
 * them, so the header's format is the same either way) hold the FTL's
 * erase count of every block, which raw NAND does not keep: struct
 * ftl_cp_wear, then uint32_t band[nbands] (the count of the band's first
 * member that is neither bad nor a superblock block: its members are
 * erased together), then
 * uint32_t fresh[(blocks + 31) / 32] (bit b % 32 of word b / 32: block b
 * held nothing as old as cp_seq when the counts were taken, its last
 * erase counted: after a crash, a block erased or rewritten since that
 * does not have its bit was erased since, recovery.c), then nexc pairs
 * uint32_t block, count for the blocks (not bad) whose count differs from
 * their band's (superblock blocks, blocks erased apart).  The counts are
 * taken when the pages are submitted, every erase issued by then in.
 * Spare: type FTL_PG_CKPT, lba FTL_CP_WEAR_LBA, seq cp_seq.  Pairs that
 * do not fit in the block are left out (those blocks load their band's
 * count); a checkpoint without the region (older, or unreadable) loads
 * none, and the counts start from the medium's (NAND_CAP_ERASE_COUNTS)
 * or from 0.
 */
#define FTL_WEAR_MAGIC "FLASHWER"
#define FTL_CP_WEAR_LBA 0xFFFFFFFEu
struct __attribute__((packed)) ftl_cp_wear {
	char magic[8];
	uint32_t version;
	uint32_t size;           /* sizeof(struct ftl_cp_wear) */
	uint64_t format_id;
	uint64_t cp_seq;         /* the header's */
	uint32_t nbands;
	uint32_t nexc;
	uint32_t words_crc;      /* crc32c of the nbands + 2 * nexc words */
	uint32_t crc;            /* crc32c of the bytes before it */
};
_Static_assert(sizeof(struct ftl_cp_wear) == 48, "ftl_cp_wear is on media");

/* Trim record page: ranges of units that became unmapped (or lost). */
struct __attribute__((packed)) ftl_trim_range {
	uint32_t start;
	uint32_t count;          /* low 31 bits; bit 31: units were lost (EIO) */
};
#define FTL_TRIM_LOST 0x80000000u

struct __attribute__((packed)) ftl_trim_hdr {
	uint32_t magic;
	uint32_t nranges;
	/* followed by struct ftl_trim_range[nranges] */
};
_Static_assert(sizeof(struct ftl_trim_range) == 8, "on media");
_Static_assert(sizeof(struct ftl_trim_hdr) == 8, "on media");

/* Block footer: header, then entries for pages 0 .. data_pages - 1. */
#define FTL_FOOTER_MAGIC "FLASHFTR"
#define FTL_FOOTER_TRIM 0xFFFFFFFEu   /* entry lba: a trim record page */
#define FTL_FOOTER_NONE 0xFFFFFFFFu   /* entry lba: page not written */
#define FTL_FOOTER_PARITY 0xFFFFFFFDu /* entry lba: a parity page */

struct __attribute__((packed)) ftl_footer_hdr {
	char magic[8];
	uint32_t version;
	uint32_t block;
	uint64_t format_id;
	uint32_t data_pages;     /* entries that follow */
	uint32_t entries_crc;    /* crc32c of the entries */
	uint32_t reserved;
	uint32_t crc;            /* crc32c of the bytes before it */
};
_Static_assert(sizeof(struct ftl_footer_hdr) == 40, "ftl_footer_hdr is on media");

struct __attribute__((packed)) ftl_footer_entry {
	uint64_t seq;
	uint32_t lba;            /* unit, FTL_FOOTER_TRIM or FTL_FOOTER_NONE */
	uint32_t data_crc;
};
_Static_assert(sizeof(struct ftl_footer_entry) == 16, "ftl_footer_entry is on media");

#endif
