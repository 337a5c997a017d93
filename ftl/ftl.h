/*
 * ftl/ftl.h - the log-structured flash translation layer of one ioDimm.
 *
 * This is the only header of the ftl/ layer; it sits on hw/nand.h and knows
 * nothing of NBD or SCSI.  Errors are negative errno values.
 *
 * Threading: one struct ftl belongs to one thread.  Nothing here takes a
 * lock; a caller that shares an ftl between threads serialises the calls.
 *
 * I/O model: the caller fills a struct ftl_io and calls ftl_submit(); the FTL
 * calls io->done exactly once, with io->status set, possibly before
 * ftl_submit() returns.  ftl_submit() does only what the request waits for
 * (a write is done once its data is in the write buffer); programming, GC,
 * erases and checkpoints run in ftl_poll().  So the caller calls ftl_poll()
 * after submitting (ideally after answering what completed) and again no
 * later than ftl_next_deadline(); the *_sync helpers do that.
 * A WRITE's io->buf is read only inside ftl_submit()/ftl_poll() calls; while
 * the io waits, the caller may point io->buf at a copy of the same data.
 *
 * Units: the mapping unit is 4 KiB.  A format has a sector size of 512 or
 * 4096 bytes; offsets and lengths of I/O are multiples of the sector size,
 * unless the io carries FTL_IO_ANY_ALIGN (then any byte offset and length).
 * A write that covers part of a 4 KiB unit is a read-modify-write of that
 * unit (512e, and any byte range with FTL_IO_ANY_ALIGN).
 *
 * DURABILITY CONTRACT
 *   1. Once a FLUSH completes, every write, trim and write-zeroes that
 *      completed before the flush was submitted survives a power cut at any
 *      later point, and so do the ones a FUA write covers once that write
 *      completes.
 *   2. A write that was never flushed (nor FUA) may be lost in a power cut;
 *      each 4 KiB unit it touched then reads as its content before that
 *      write or after it, never as garbage or as another unit's data.  The
 *      same holds for trims: a unit reads its old data or zeros.
 *   3. Reads of never-written, trimmed and zeroed sectors return zeros.
 *   4. Once a metadata write fails, or the medium loses power, the FTL goes
 *      into a sticky failed state: every later request fails with -EIO and
 *      nothing more is written; ftl_close() then releases memory only.  The
 *      next ftl_open() recovers from what is on the media.  An error of the
 *      backend's own storage (NAND_IO_ERROR: the simulator's image file hit
 *      ENOSPC or EIO) is the same sticky state with that errno (-ENOSPC or
 *      -EIO); it is not a NAND fault, so no block is retired for it.
 *   5. Data is never returned unchecked: every read of a data page (host
 *      reads, read-modify-write, GC) checks the CRC32C kept in its spare
 *      area; a page that fails it is treated as uncorrectable: the read
 *      fails with -EIO (never the wrong bytes), the page is counted in
 *      crc_errors and logged, and GC records the unit as lost.
 *   6. Damaged metadata is never silently replaced: ftl_open() of a device
 *      without a valid superblock fails (-ENODATA if the device is blank,
 *      -EUCLEAN if anything is written on it; ftl_probe() tells which), and
 *      only ftl_format() writes a new format.  A damaged checkpoint is
 *      reported (ftl_info.notes) and replaced by the previous one, which
 *      is kept until a newer one commits, and the log after it (kept for
 *      that), so nothing is lost; only if that one is damaged too is the
 *      map rebuilt from the whole log (the last resort, where sectors
 *      trimmed before them may read old data again).
 */
#ifndef FLASHD_FTL_H
#define FLASHD_FTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/nand.h"

#define FTL_UNIT_SIZE 4096u

struct ftl;

/* ---- format ------------------------------------------------------------ */

struct ftl_format_params {
	uint32_t sector_size;      /* 512 or 4096 */
	/* user capacity: capacity_bytes if non-zero, else op_percent of raw
	 * NAND kept as over-provisioning (0 means the stock 20 %) */
	uint64_t capacity_bytes;
	double op_percent;
	/* parity dies per band stripe (Flashback): 0 or 1.  With 1, one die
	 * of each band's row holds the XOR of the others' pages (24 + 1 on
	 * iodimm-mlc-320), and the capacity an op_percent gives shrinks by
	 * that share, so GC keeps the same room (ftl_format refuses other
	 * widths, or geometries with fewer than 2 or more than 32 dies per
	 * row, with -ENOTSUP) */
	uint32_t parity_width;
};

/* Stock format: 20 % of the raw NAND is over-provisioning (the vendor's;
 * a device too small for it has more: ftl_stock_op_percent). */
#define FTL_STOCK_OP_PERCENT 20.0
/* "High performance" format of the vendor tools. */
#define FTL_HIGH_PERF_OP_PERCENT 36.0
#define FTL_MIN_OP_PERCENT 5.0
#define FTL_MAX_OP_PERCENT 90.0

/* User capacity (bytes, a multiple of 4 KiB) for an over-provisioning share. */
uint64_t ftl_capacity_for_op(const struct nand_dev *dev, double op_percent);
/* What ftl_format gives for op_percent with parity_width parity dies per
 * stripe (the op's share of the data dies' space). */
uint64_t ftl_capacity_for_format(const struct nand_dev *dev, double op_percent,
				 uint32_t parity_width);
/* Largest user capacity a format of this device accepts. */
uint64_t ftl_max_capacity(const struct nand_dev *dev);
/* This device's stock over-provisioning, what a format without a size
 * gives: FTL_STOCK_OP_PERCENT, or the least whole percentage above it that
 * ftl_max_capacity allows where the FTL's own blocks leave less room
 * (test-128m-512p: 31 %).  Reads the factory bad block marks: O(blocks). */
double ftl_stock_op_percent(const struct nand_dev *dev);

/* Low-level format: a new, empty FTL (all sectors read as zeros). */
int ftl_format(struct nand_dev *dev, const struct ftl_format_params *p, char *err, size_t errlen);

/* ---- open / close ------------------------------------------------------ */

struct ftl_open_params {
	bool readonly;             /* never write the media */
	/* pages written between checkpoints (0: automatic); bounds the work
	 * and memory of a crash recovery */
	uint64_t checkpoint_interval;
	/* write buffer, in 4 KiB slots (0: automatic) */
	uint32_t write_buffer_slots;
	/* parity formats: no partial-parity pages at flushes (media.h): a die
	 * lost with a power cut may then take flushed writes of stripes still
	 * open with it (their units read an older version); saves a page per
	 * open stripe per flush */
	bool no_flush_parity;
};

/*
 * Open a formatted device: load the newest checkpoint, replay what was
 * written after it (crash recovery), then (unless read-only) record on the
 * media that the FTL is open.  The FTL does not own dev; close it after
 * ftl_close().
 */
int ftl_open(struct nand_dev *dev, const struct ftl_open_params *p, struct ftl **out, char *err,
	     size_t errlen);

/* Clean shutdown: finish everything, write a checkpoint, free.  Returns 0
 * or the sticky error (memory is freed either way).  Host I/O held for heat
 * (Thermal protection, below) runs first, whatever the temperature. */
int ftl_close(struct ftl *f);

/* The owner is about to close and will not wait for the device to cool (a
 * stop or detach past its deadline): host I/O held for heat completes now
 * with status (never started: what it would have written is as after a
 * power cut, never acknowledged), and from now on nothing is held, so the
 * FTL can go idle and ftl_close() at any temperature.  Returns how many
 * requests it completed. */
int ftl_give_up_held(struct ftl *f, int status);

/* Free the memory only: for power-cut tests, after the medium lost power
 * (a simulated power cut drops its queued operations). */
void ftl_abandon(struct ftl *f);

/* ---- I/O --------------------------------------------------------------- */

enum ftl_io_type {
	FTL_IO_READ,
	FTL_IO_WRITE,
	FTL_IO_FLUSH,
	FTL_IO_TRIM,
	FTL_IO_WRITE_ZEROES,
};

enum ftl_io_flags {
	FTL_IO_FUA = 1 << 0,      /* write/zeroes/trim: durable on completion */
	FTL_IO_NO_HOLE = 1 << 1,  /* write-zeroes: store zero pages, keep mapped */
	/*
	 * Any type: offset and length may be any byte values, not only
	 * multiples of the sector size (bounds are checked as always).  The
	 * FTL works in 4 KiB units anyway: a read copies the bytes asked for
	 * out of each unit; a write, and the part of a trim or write-zeroes
	 * that covers only part of a unit, is a read-modify-write of that unit
	 * (the unit's other bytes are kept; the covered bytes get the data, or
	 * zeros: a trim zeroes partial units rather than leaving them, so
	 * trimmed bytes read as zeros at any alignment, rule 3).  Whole units
	 * of a trim or plain write-zeroes are unmapped as always.  Cost: one
	 * page read (unless the unit is unmapped or buffered) and one page
	 * program per partial unit; at most two per io (its first and last
	 * unit).  Writes are serialised in the FTL, so concurrent byte-range
	 * writes to the same unit never lose each other's bytes.  Durability
	 * is per 4 KiB unit as for any write (rule 2).
	 */
	FTL_IO_ANY_ALIGN = 1 << 2,
};

struct ftl_io {
	/* set by the caller */
	enum ftl_io_type type;
	uint32_t flags;
	uint64_t offset;           /* bytes */
	uint64_t length;           /* bytes; 0 is a valid no-op */
	void *buf;                 /* READ: filled; WRITE: read (contiguous) */
	void (*done)(struct ftl_io *io);
	void *priv;
	/* result: 0 or negative errno */
	int status;

	/* ---- private to the FTL ---- */
	struct ftl_io *wait_next;
	uint64_t unit;             /* next unit to process */
	uint64_t end_unit;         /* one past the last unit */
	uint64_t wait_pos;         /* ring position that must be durable */
	uint64_t par_ticket;       /* and the parity of stripes sealed so far */
	uint32_t pending;          /* NAND reads in flight for this io */
	uint32_t state;
	uint32_t rmw_mask;         /* units whose old content is needed */
	void *rmw_op[2];           /* head / tail read-modify-write reads */
};

/* Submit; io->done is called once with io->status set. */
void ftl_submit(struct ftl *f, struct ftl_io *io);

/*
 * A checkpoint now, while serving (fuzzy like the automatic ones; host I/O
 * goes on, sharing the dies with up to 64 checkpoint programs).  Returns a
 * ticket for ftl_checkpoint_poll(), 0 if the FTL is failed or read-only.
 * Once the poll says 1, a checkpoint whose snapshot was taken after this
 * call is on the media, synced and current: a crash from then on replays
 * only what was written since that snapshot.
 */
uint64_t ftl_checkpoint_request(struct ftl *f);
/* 1: done; 0: not yet (keep calling ftl_poll); -errno: the FTL failed. */
int ftl_checkpoint_poll(struct ftl *f, uint64_t ticket);

/* Drive the media and background work; returns the number of events. */
int ftl_poll(struct ftl *f);
/* When ftl_poll() must be called next (nand_now_ns() time base); 0: now;
 * UINT64_MAX: only after the next submit. */
uint64_t ftl_next_deadline(struct ftl *f);
/* True when nothing is in flight or queued. */
bool ftl_idle(struct ftl *f);

/* Blocking helpers: submit and poll until done.  Return 0 or -errno. */
int ftl_read_sync(struct ftl *f, void *buf, uint64_t off, uint64_t len);
int ftl_write_sync(struct ftl *f, const void *buf, uint64_t off, uint64_t len, uint32_t flags);
int ftl_flush_sync(struct ftl *f);
int ftl_trim_sync(struct ftl *f, uint64_t off, uint64_t len, uint32_t flags);
int ftl_write_zeroes_sync(struct ftl *f, uint64_t off, uint64_t len, uint32_t flags);
int ftl_io_sync(struct ftl *f, struct ftl_io *io);

/*
 * Allocation map: the length of the run starting at off (up to len) whose
 * 4 KiB units are all mapped (*mapped = true) or all unmapped (trimmed,
 * zeroed or never written).  Granularity is the 4 KiB unit.
 */
uint64_t ftl_map_extent(struct ftl *f, uint64_t off, uint64_t len, bool *mapped);

/* ---- information ------------------------------------------------------- */

/*
 * States.  Endurance works like the vendor's: the reserves are the spare
 * blocks (usable beyond what the format needs) left, as a share of those
 * there were before any block went bad in use (ftl_stats.reserve_percent).
 * Grown bad blocks (program or erase failures, more and more past the
 * rated P/E) eat them; the state follows, and every change is logged
 * (warning level, through the logger) with the figures:
 *   reserves <= FTL_RESERVE_WARN_PERCENT     still ONLINE, a warning
 *   reserves <= FTL_RESERVE_REDUCED_PERCENT  WRITE_REDUCED: host writes are
 *                                            throttled to FTL_REDUCED_WRITE_NS
 *                                            of device time per 4 KiB unit
 *   no spare block left                      READONLY: blocks can no longer
 *                                            be placed safely; writes, trims
 *                                            and zeroes fail -EROFS, reads
 *                                            and flushes work, every unit
 *                                            keeps its data (GC still
 *                                            retires and refreshes)
 * Reserves never come back (bad blocks stay bad), so the order is fixed;
 * a reopen finds the same state from the bad blocks the checkpoint keeps.
 * NO_SPACE is the older, harder stop: GC has no room at all (or bad
 * blocks were found at open beyond what the format can live with).
 */
enum ftl_state {
	FTL_STATE_ONLINE,          /* reads and writes */
	FTL_STATE_READONLY,        /* opened read-only, or worn out */
	FTL_STATE_WRITE_REDUCED,   /* reserves low: writes throttled */
	FTL_STATE_NO_SPACE,        /* reserves exhausted: writes fail -ENOSPC */
	FTL_STATE_FAILED,          /* sticky error: everything fails -EIO */
};
#define FTL_RESERVE_WARN_PERCENT 10.0
#define FTL_RESERVE_REDUCED_PERCENT 5.0
/* write-reduced: 400 us per 4 KiB unit, about 10 MB/s (a tenth or less of
 * what a healthy ioDimm takes), so a worn device lasts while its data is
 * copied off */
#define FTL_REDUCED_WRITE_NS 400000ull
/* units a throttled FTL (write-reduced or thermal) takes at once after a
 * pause before the pace applies */
#define FTL_THROTTLE_BURST 32
const char *ftl_state_name(enum ftl_state st);

/*
 * Thermal protection, like the vendor's: the FTL reads the medium's
 * temperature sensor (nand_temperature_mc) every FTL_THERMAL_PERIOD_NS of
 * device time while it works (looking at the clock every 64th turn of its
 * progress loop), and at once after ftl_sensors_changed().
 *   >= FTL_THERMAL_THROTTLE_MC  THROTTLED: host writes are paced to
 *                               FTL_THERMAL_WRITE_NS per 4 KiB unit (less
 *                               NAND activity, less heat); reads run
 *   >= FTL_THERMAL_STOP_MC      STOPPED: new host I/O is held (queued, not
 *                               failed), what is in flight finishes, a
 *                               checkpoint is written; the FTL idles
 *   below FTL_THERMAL_RESUME_MC the held I/O goes on (from STOPPED), and
 *   below FTL_THERMAL_THROTTLE_MC - FTL_THERMAL_HYST_MC throttling ends.
 * Each change is logged at warning level with the temperature.  Without a
 * sensor the state stays OK.
 */
enum ftl_thermal {
	FTL_THERMAL_OK,
	FTL_THERMAL_THROTTLED,
	FTL_THERMAL_STOPPED,
};
#define FTL_TEMP_NONE INT32_MIN
#define FTL_THERMAL_THROTTLE_MC 78000
#define FTL_THERMAL_STOP_MC 85000
#define FTL_THERMAL_RESUME_MC 75000
#define FTL_THERMAL_HYST_MC 3000
#define FTL_THERMAL_PERIOD_NS 10000000ull    /* 10 ms */
#define FTL_THERMAL_WRITE_NS 100000ull       /* ~40 MB/s of 4 KiB units */
const char *ftl_thermal_name(enum ftl_thermal t);
/* The owner knows a sensor changed (a fault injected, an alarm): read the
 * temperature now instead of at the next period. */
void ftl_sensors_changed(struct ftl *f);

/* the steps of ftl_open, whose times ftl_info.open_step_ns gives: superblock,
 * memory, checkpoint (loading it), recovery (scan and replay after a crash),
 * limits, mark open (the superblock write and sync that records the open) */
#define FTL_OPEN_STEPS 6
const char *ftl_open_step_name(int step);

struct ftl_info {
	uint64_t format_id;
	uint32_t sector_size;
	uint64_t capacity;         /* user bytes */
	uint64_t units;            /* 4 KiB mapping units */
	uint64_t raw_bytes;        /* all NAND, data area */
	double op_percent;         /* over-provisioning share of raw */
	uint64_t format_time;      /* unix seconds */
	uint32_t band_rows;        /* bands: rows of dies ... */
	uint32_t band_width;       /* ... each this many dies wide */
	uint32_t parity_width;     /* parity dies per band stripe */
	bool was_clean;            /* the previous close was clean */
	uint64_t recovered_pages;  /* pages replayed at open */
	uint64_t open_ns;          /* how long open took */
	/* and each of its steps, in order (ftl_open_step_name) */
	uint64_t open_step_ns[FTL_OPEN_STEPS];
	enum ftl_state state;
	/* the FTL writes nothing to the media, so a close writes no
	 * checkpoint: opened read-only, or read-only since open found
	 * sequence numbers near their limit.  (Read-only for host writes
	 * only, worn out or numbers reaching the limit while serving, still
	 * writes checkpoints.) */
	bool writes_nothing;
	int error;                 /* sticky error, 0 if none */
	/* the current checkpoint was damaged: open loaded the previous one
	 * and replayed the log after it, or, neither loadable, rebuilt the
	 * map from the whole log (notes say which) */
	bool checkpoint_damaged;
	char notes[256];           /* what open found and repaired, or "" */
	/* endurance: why the state is what it is when the reserves are low
	 * (reserves, grown bad blocks, what writes do now), or "" */
	char health[192];
	/* thermal (below): the controller's temperature, now and the highest
	 * seen since open, in milli-degrees C (FTL_TEMP_NONE: no sensor) */
	int32_t temp_mc, temp_max_mc;
	enum ftl_thermal thermal;
};
void ftl_get_info(struct ftl *f, struct ftl_info *info);
/* Where unit lives on the NAND now: 0 and its die, block and page, or
 * -ENOENT (unmapped, lost, or still in the write buffer).  For tests and
 * tools; O(1). */
int ftl_unit_location(struct ftl *f, uint64_t unit, uint32_t *die, uint32_t *block,
		      uint32_t *page);
/* unit's page is in a band whose stripes have parity as far as the FTL
 * knows: a parity format, two or more live members, no stripe of it known
 * to lack its parity (not marked for refresh).  For tests that break pages
 * (a second fault in a stripe loses data).  O(row width). */
bool ftl_unit_protected(struct ftl *f, uint64_t unit);

/*
 * Counters since the format (lifetime): host bytes and ops read and
 * written, pages programmed and read, blocks erased are kept in every
 * checkpoint, so they are exact across a clean restart and, after a crash,
 * as of the last checkpoint.  The others count since this open, but for
 * what is lost and dead now (lost_units, dies_failed).
 */
struct ftl_stats {
	uint64_t host_read_bytes, host_write_bytes, host_trim_bytes, host_zero_bytes;
	uint64_t host_read_ops, host_write_ops, host_flush_ops, host_trim_ops, host_zero_ops;
	uint64_t host_pages_written;   /* 4 KiB units written by the host */
	uint64_t host_pages_read;
	uint64_t nand_pages_programmed; /* every program: host, GC, metadata */
	uint64_t nand_pages_read;       /* data reads, host and GC */
	uint64_t nand_spare_reads;      /* spare-only reads (GC scan, recovery) */
	uint64_t blocks_erased;
	uint64_t gc_pages_relocated, gc_blocks_collected;
	uint64_t meta_pages_programmed; /* checkpoint and superblock pages */
	uint64_t checkpoints;
	uint64_t read_errors_corrected, read_errors_uncorrectable;
	uint64_t crc_errors;            /* data pages that failed their CRC32C */
	uint64_t program_failures, erase_failures;
	/* units made unreadable by media errors (they read EIO until
	 * rewritten or trimmed): those the map held lost at open, and those
	 * lost since (a unit rewritten since stays counted until the next
	 * open); the range they fall in (lost_first > lost_last: none) */
	uint64_t lost_units;
	uint64_t lost_first, lost_last;
	/* parity (Flashback): parity pages programmed, pages rebuilt from
	 * their stripe (host reads and GC), rebuilds that failed (a second
	 * error in the stripe: the unit is lost), dead dies, and the bands
	 * with data on dead dies: at the failure and still to move */
	uint64_t parity_pages_programmed;
	uint64_t parity_rebuilds, parity_rebuild_failures;
	uint64_t parity_stripes_unprotected; /* closed without a parity page */
	uint64_t parity_pad_pages;  /* pads completing stripes left open while idle */
	uint64_t parity_ppl_pages;  /* partial-parity pages written at flushes */
	uint64_t page_pad_pages;    /* pads completing NAND pages of several
	                             * units (ftl/upage.c; no parity there) */
	uint32_t dies_failed;       /* dead dies: the superblock keeps them,
	                             * so every restart counts them again */
	uint32_t rebuild_bands_total, rebuild_bands_left;
	uint64_t blocks_total, blocks_free, blocks_bad, blocks_bad_grown, blocks_meta;
	uint64_t blocks_data;
	uint64_t blocks_needed;         /* fewer usable blocks than this: no space */
	double reserve_percent;         /* spare blocks left, of those at format */
	double endurance_used_percent;  /* erase_avg of rated_pe_cycles (may pass 100) */
	uint64_t valid_pages;           /* mapped units on NAND */
	uint32_t erase_min, erase_max;
	double erase_avg;
	uint32_t rated_pe_cycles;
	uint64_t l2p_bytes;
	uint64_t ram_bytes;             /* everything the FTL allocated */
	double write_amplification;     /* nand programmed / host units written */
	/* media health (since this open) */
	uint64_t refresh_marked;        /* bands marked for refresh: a read whose
	                                 * worst ECC codeword neared the limit */
	uint64_t refresh_collected;     /* of those, collected (data relocated) */
	uint64_t wl_collected;          /* bands collected by static wear levelling */
};
void ftl_get_stats(struct ftl *f, struct ftl_stats *st);

/*
 * Where FTL messages go (default: stderr), with their level, syslog's
 * numbers: ERR something is lost or stops working (the message says what
 * to do), WARNING something wants attention (redundancy or reserves
 * reduced, a repair), NOTICE a fault handled as designed (a grown bad block
 * retired), INFO routine media management.  Process-wide.  A message is
 * logged on the thread that called into the FTL, so an owner of several
 * FTLs, each on a thread of its own (ftl.h, "Threading"), tells by the
 * thread whose it is.
 */
enum ftl_log_level {
	FTL_LOG_ERR = 3,
	FTL_LOG_WARNING = 4,
	FTL_LOG_NOTICE = 5,
	FTL_LOG_INFO = 6,
};
void ftl_set_logger(void (*fn)(void *arg, int level, const char *msg), void *arg);

/* Log the internal state (queues, cursors, GC) for debugging a hang. */
void ftl_debug_dump_public(struct ftl *f);

/* The NAND device underneath. */
struct nand_dev *ftl_device(struct ftl *f);

/* Read the superblock of a device without opening the FTL (for `info` on
 * an image in use elsewhere, or unformatted): 0, or -ENODATA if there is no
 * valid superblock. */
int ftl_peek_format(struct nand_dev *dev, struct ftl_info *info);

/*
 * What a device holds, before deciding to format it:
 *   0          a valid superblock (*info filled as by ftl_peek_format)
 *   -ENODATA   blank: every good block's first page is erased; formatting
 *              loses nothing
 *   -EUCLEAN   something is written but there is no valid superblock
 *              (damaged, or another program's data): never format it
 *              without asking; err says what was found
 *   other      the medium failed (-EIO)
 * Cost: the superblock pages, plus (if there is no valid superblock) one
 * spare read per block, spread over the dies.
 */
int ftl_probe(struct nand_dev *dev, struct ftl_info *info, char *err, size_t errlen);

/* ---- offline repair (ftl/repair.c) ------------------------------------- */

struct ftl_scan_report {
	uint32_t blocks, blocks_bad, blocks_blank, blocks_log, blocks_meta;
	uint32_t blocks_foreign;     /* page 0 is not an FTL page of the format */
	uint32_t blocks_unreadable;  /* page 0 unreadable */
	uint32_t sb_pages_valid, sb_pages_damaged;
	bool sb_valid;               /* a valid superblock (fields below) */
	uint64_t sb_format_id, sb_seq, sb_units;
	uint32_t sb_sector_size;
	uint64_t format_id;          /* the format the log belongs to (0: none) */
	uint32_t formats_seen;       /* distinct format ids in page 0 spares */
	uint64_t max_seq;            /* newest log sequence number seen */
	/* the newest checkpoint whose header and map pages all check out */
	bool cp_found;
	uint32_t cp_block, cp_nblocks;
	uint64_t cp_seq, cp_units, cp_format_time;
	uint32_t cp_sector_size;     /* 0: written before the header kept it */
	uint32_t cp_candidates, cp_damaged;
};

/* Read the media (never write) and report what is there.  Cost: a spare
 * read per block, plus every page of each checkpoint candidate. */
int ftl_scan(struct nand_dev *dev, struct ftl_scan_report *rep, char *err, size_t errlen);

struct ftl_rebuild_params {
	/* format parameters when no checkpoint records them (0: from it) */
	uint32_t sector_size;
	uint64_t capacity_bytes;
};

/*
 * Write a new superblock for the log found on the media: format id from the
 * log, capacity and sector size from the newest intact checkpoint (or p),
 * pointing at that checkpoint (or none: the next open replays the whole
 * log).  The superblock blocks are erased first.  The next ftl_open() then
 * recovers as after a crash.  Returns 0 or -errno with err set.
 */
int ftl_rebuild_superblock(struct nand_dev *dev, const struct ftl_rebuild_params *p,
			   char *err, size_t errlen);

#endif
