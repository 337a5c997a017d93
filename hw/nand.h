/*
 * hw/nand.h - the raw NAND interface of one ioDimm, and the simulated ioDimm.
 *
 * This is the only header of the hw/ layer.  A card backend (today only the
 * simulator; a real FPGA driver later) implements struct nand_ops.  The layer
 * knows nothing of the FTL: it moves pages, spare bytes and erase blocks.
 *
 * Addressing.  A die is (channel, die-in-channel); dies are numbered
 * die = channel * dies_per_channel + die_in_channel.  Erase blocks are
 * numbered globally, block = die * blocks_per_die + block_in_die, and a page
 * is ppa = block * pages_per_block + page_in_block.  Planes are reported for
 * information; the interface addresses blocks, not planes.
 *
 * Asynchrony.  nand_submit() queues one operation and returns at once; its
 * completion is delivered later by nand_poll(), which calls op->done.  A
 * backend never calls op->done from inside nand_submit(), so a completion
 * handler may submit more work without recursion.  nand_submit() returns 0,
 * or a negative errno when the backend cannot take the operation at all (its
 * queue cannot grow, the device is gone): the operation is then not queued,
 * done() is never called for it, and the caller must treat it as failed.  Operations on one die
 * complete in the order they were submitted (a read submitted before an
 * erase of the same block reads the old data); operations on different dies
 * run in parallel.  With the simulator's timing model off, every operation
 * is complete as soon as it is submitted and the next nand_poll() delivers it.
 *
 * NAND rules the backends enforce: an erased page reads as all 0xFF (data
 * and spare); pages of a block are programmed in increasing order, each at
 * most once between erases (NAND_PROGRAM_FAILED otherwise, nothing written).
 */
#ifndef FLASHD_HW_NAND_H
#define FLASHD_HW_NAND_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NAND_OPS_VERSION 1

struct nand_geometry {
	uint32_t channels;
	uint32_t dies_per_channel;
	uint32_t planes_per_die;
	uint32_t blocks_per_die;  /* erase blocks per die */
	uint32_t pages_per_block;
	uint32_t page_size;       /* data bytes per page */
	uint32_t spare_size;      /* OOB bytes per page */
};

static inline uint32_t nand_dies(const struct nand_geometry *g)
{
	return g->channels * g->dies_per_channel;
}
static inline uint32_t nand_blocks(const struct nand_geometry *g)
{
	return nand_dies(g) * g->blocks_per_die;
}
static inline uint64_t nand_pages(const struct nand_geometry *g)
{
	return (uint64_t)nand_blocks(g) * g->pages_per_block;
}
static inline uint64_t nand_raw_bytes(const struct nand_geometry *g)
{
	return nand_pages(g) * g->page_size;
}
static inline uint32_t nand_block_die(const struct nand_geometry *g, uint32_t block)
{
	return block / g->blocks_per_die;
}

/* Result of one operation. */
enum nand_status {
	NAND_OK = 0,
	NAND_CORRECTED,          /* read: ECC corrected bit errors; data is good
				  * (op->corrected_bits says how many) */
	NAND_UNCORRECTABLE,      /* read: data and spare are not trustworthy */
	NAND_PROGRAM_FAILED,     /* program: page not (reliably) written */
	NAND_ERASE_FAILED,       /* erase: block not erased */
	NAND_BLOCK_BAD,          /* the block is marked bad (factory or grown) */
	NAND_POWER_LOSS,         /* the device lost power: nothing happened */
	NAND_INVALID,            /* bad address or argument (a caller bug) */
	NAND_IO_ERROR,           /* the backend's own storage failed (the image
				  * file's filesystem is full, the host disk
				  * returned EIO): not a NAND fault, the block
				  * is not worn; nothing was written; op->err
				  * holds the negative errno */
};
const char *nand_status_name(enum nand_status st);

enum nand_op_type {
	NAND_OP_READ,    /* data (may be NULL: spare only) and spare (may be NULL) */
	NAND_OP_PROGRAM, /* data and spare (spare may be NULL: written as 0xFF) */
	NAND_OP_ERASE,   /* whole block; page is ignored */
};

/*
 * One operation.  The caller owns the memory and must keep it, and the
 * buffers it points to, untouched until op->done has been called.
 */
struct nand_op {
	enum nand_op_type type;
	uint32_t block;
	uint32_t page;             /* page in block */
	void *data;                /* page_size bytes */
	void *spare;               /* spare_size bytes */
	uint32_t flags;            /* NAND_OPF_* */
	enum nand_status status;   /* set before done() is called */
	int err;                   /* NAND_IO_ERROR: negative errno, else 0 */
	/* reads, set before done() is called: the bit errors ECC corrected in
	 * the page (all its codewords) and in its worst codeword.  0 with
	 * NAND_OK; at least 1 with NAND_CORRECTED; 0 otherwise.  The margin
	 * left is dev->ecc_bits - corrected_max (when ecc_bits is known): a
	 * read whose worst codeword nears ecc_bits is the cue to relocate the
	 * block's data before the next read fails.  (They fill what was
	 * padding: the op's size and layout are unchanged.) */
	uint16_t corrected_bits;
	uint16_t corrected_max;
	void (*done)(struct nand_op *op);
	void *priv;                /* for the caller */
	uint64_t priv2;            /* for the caller */
	/* owned by the backend while the op is queued */
	struct nand_op *next;
	uint64_t due_ns;
	uint64_t ticket;
};

/* Program flags. */
enum nand_op_flags {
	/* the page holds metadata whose bytes matter beyond their checksum
	 * (superblock, checkpoint, trim record): backends that keep only
	 * metadata (the simulator's metadata_only mode) keep these pages whole;
	 * others ignore the flag */
	NAND_OPF_META = 1 << 0,
};

struct nand_dev;

/* One ops table per backend; size and version are stamped in. */
struct nand_ops {
	uint32_t struct_size;      /* sizeof(struct nand_ops) */
	uint32_t version;          /* NAND_OPS_VERSION */
	const char *name;
	int (*submit)(struct nand_dev *dev, struct nand_op *op);
	/* Deliver every completion due at now_ns; returns how many. */
	int (*poll)(struct nand_dev *dev, uint64_t now_ns);
	/* Earliest due time of a queued completion, or UINT64_MAX if none. */
	uint64_t (*next_due)(struct nand_dev *dev);
	/* Make every completed program/erase survive a host crash (fdatasync).
	 * 0 or a negative errno (-ENOSPC, -EIO from the backend's storage). */
	int (*sync)(struct nand_dev *dev);
	uint32_t (*erase_count)(struct nand_dev *dev, uint32_t block);
	/* Factory bad-block marks (read without erasing anything). */
	bool (*factory_bad)(struct nand_dev *dev, uint32_t block);
	/* The device's clock (ns) and a wait until a time on it. */
	uint64_t (*now)(struct nand_dev *dev);
	void (*wait_until)(struct nand_dev *dev, uint64_t t_ns);
	void (*close)(struct nand_dev *dev);
	/*
	 * Optional (NULL: not offered; check with nand_read_now_fn).  Execute
	 * a read at once and return its status instead of queueing a
	 * completion: for backends whose media is memory and that model no
	 * time (the simulator with its timing model off).  Same semantics as a
	 * submitted NAND_OP_READ, which sees every operation submitted before
	 * it.  Cost: the page copy; no queueing, no completion callback.
	 */
	enum nand_status (*read_now)(struct nand_dev *dev, uint32_t block, uint32_t page,
				     void *data, void *spare);
	/*
	 * Optional (NULL: no sensor; call through nand_temperature_mc).  The
	 * controller's temperature in milli-degrees Celsius into *mc; 0 or a
	 * negative errno.
	 */
	int (*temperature_mc)(struct nand_dev *dev, int32_t *mc);
	/*
	 * Optional (NULL: sync is done at once; call through nand_sync_start).
	 * Start what sync does without waiting for it: *ticket names this
	 * sync (0: already done).  sync_poll: 1 once every sync up to ticket
	 * has finished, 0 while it runs, or a negative errno (sticky).  While
	 * one runs, next_due reports a time soon, so the owner polls.
	 */
	int (*sync_start)(struct nand_dev *dev, uint64_t *ticket);
	int (*sync_poll)(struct nand_dev *dev, uint64_t ticket);
	/*
	 * Optional (NULL: nothing to do).  A hint: the owner will read this
	 * page soon.  A backend that keeps pages in a file starts fetching it
	 * (the simulator's image: otherwise every first touch of a page not
	 * in the page cache is a disk read in turn); no effect on results.
	 */
	void (*prefetch)(struct nand_dev *dev, uint32_t block, uint32_t page);
	/*
	 * Optional (NULL: not offered; check with nand_read_soon_fn).  A
	 * hint for a backend that offers read_now: this page is read_now's
	 * next; start moving it towards the CPU (the simulator: one prefetch
	 * instruction for the page's first line, whose miss - a cache and a
	 * TLB miss - the copy would otherwise wait for).  No system call, no
	 * effect on results; any block and page (invalid ones are ignored).
	 */
	void (*read_soon)(struct nand_dev *dev, uint32_t block, uint32_t page);
};

struct nand_dev {
	const struct nand_ops *ops;
	struct nand_geometry geo;
	char preset[32];
	uint32_t rated_pe_cycles;  /* endurance of one block */
	uint64_t inflight;         /* submitted and not yet delivered */
	void *priv;                /* backend state */
	/* ECC strength: bits corrected per codeword of ecc_codeword_bytes
	 * data bytes (the spare bytes are shared out among a page's
	 * codewords); 0: unknown */
	uint32_t ecc_bits;
	uint32_t ecc_codeword_bytes;
	/* corrected_bits / corrected_max (see struct nand_op) of the last read
	 * the backend executed: how a read_now caller, which gets only the
	 * status, learns them (valid right after read_now returns) */
	uint16_t last_corrected_bits;
	uint16_t last_corrected_max;
};

static inline int nand_submit(struct nand_dev *d, struct nand_op *op)
{
	return d->ops->submit(d, op);
}
static inline int nand_poll(struct nand_dev *d, uint64_t now_ns)
{
	return d->ops->poll(d, now_ns);
}
static inline uint64_t nand_next_due(struct nand_dev *d)
{
	return d->ops->next_due(d);
}
static inline int nand_sync(struct nand_dev *d)
{
	return d->ops->sync(d);
}
/* Asynchronous sync (see nand_ops.sync_start): backends without it sync at
 * once here (and *ticket is 0: done). */
static inline int nand_sync_start(struct nand_dev *d, uint64_t *ticket)
{
	*ticket = 0;
	if (d->ops->struct_size >= offsetof(struct nand_ops, sync_poll) + sizeof(void *) &&
	    d->ops->sync_start)
		return d->ops->sync_start(d, ticket);
	return d->ops->sync(d);
}
static inline void nand_prefetch(struct nand_dev *d, uint32_t block, uint32_t page)
{
	if (d->ops->struct_size >= offsetof(struct nand_ops, prefetch) + sizeof(void *) &&
	    d->ops->prefetch)
		d->ops->prefetch(d, block, page);
}
static inline int nand_sync_poll(struct nand_dev *d, uint64_t ticket)
{
	if (!ticket)
		return 1;
	return d->ops->sync_poll(d, ticket);
}
static inline uint32_t nand_erase_count(struct nand_dev *d, uint32_t block)
{
	return d->ops->erase_count(d, block);
}
static inline bool nand_factory_bad(struct nand_dev *d, uint32_t block)
{
	return d->ops->factory_bad(d, block);
}
static inline uint64_t nand_now(struct nand_dev *d)
{
	return d->ops->now(d);
}
static inline void nand_wait_until(struct nand_dev *d, uint64_t t_ns)
{
	d->ops->wait_until(d, t_ns);
}
void nand_close(struct nand_dev *d);

typedef enum nand_status (*nand_read_now_t)(struct nand_dev *, uint32_t, uint32_t, void *,
					     void *);
typedef void (*nand_read_soon_t)(struct nand_dev *, uint32_t, uint32_t);
/* The backend's read_soon, or NULL (not offered, or an older ops table). */
static inline nand_read_soon_t nand_read_soon_fn(const struct nand_dev *d)
{
	if (d->ops->struct_size < offsetof(struct nand_ops, read_soon) + sizeof(nand_read_soon_t))
		return NULL;
	return d->ops->read_soon;
}
/* The backend's read_now, or NULL (not offered, or an older ops table). */
static inline nand_read_now_t nand_read_now_fn(const struct nand_dev *d)
{
	if (d->ops->struct_size < offsetof(struct nand_ops, read_now) + sizeof(nand_read_now_t))
		return NULL;
	return d->ops->read_now;
}

/*
 * The controller's temperature in milli-degrees Celsius: 0 and *mc, or
 * -ENOTSUP if the backend has no sensor (or an older ops table).
 */
static inline int nand_temperature_mc(struct nand_dev *d, int32_t *mc)
{
	if (d->ops->struct_size < offsetof(struct nand_ops, temperature_mc) +
					  sizeof(d->ops->temperature_mc) ||
	    !d->ops->temperature_mc)
		return -ENOTSUP;
	return d->ops->temperature_mc(d, mc);
}

/* Monotonic wall clock in nanoseconds (the simulator's real-time base). */
uint64_t nand_now_ns(void);

/* ---- presets ---------------------------------------------------------- */

struct nand_timing {
	uint32_t read_us, program_us, erase_us;
	uint32_t xfer_mbps;        /* channel transfer rate, MB/s (0: free) */
};

/*
 * The simulator's error model (used when it is turned on: see
 * nand_sim_config.error_model).  The raw bit-error rate of a page read is
 *
 *   RBER = rber_fresh + rber_rated * w^wear_exp                     (wear)
 *        + rber_ret_year * (ret_fresh + (1 - ret_fresh) * w^wear_exp)
 *                        * age / 1 year                        (retention)
 *        + rber_read * (1 + (read_wear - 1) * w^wear_exp) * reads
 *                                                           (read disturb)
 *
 * with w = erase count / rated P/E of the block, age the time since the
 * page was programmed, and reads the reads of its block since its last
 * erase.  Bit errors per codeword are Poisson with mean RBER * codeword
 * bits; a codeword with more than ecc_bits errors makes the page
 * uncorrectable.  Grown bad blocks: a block fails in a P/E cycle with
 * probability fail_rated * exp(fail_growth * (w - 1)), half of it on its
 * erase, half spread over its page programs.
 */
struct nand_reliability {
	double rber_fresh;
	double rber_rated;
	double wear_exp;
	double rber_ret_year;
	double ret_fresh;
	double rber_read;
	double read_wear;
	uint32_t ecc_bits;         /* bits corrected per codeword */
	uint32_t ecc_codeword_bytes;
	double fail_rated;
	double fail_growth;
};

/*
 * The simulator's thermal model: the controller heads for
 *   ambient + idle_rise + busy_rise * (die busy fraction)
 * with a first-order lag of time constant tau_ms.
 */
struct nand_thermal {
	int32_t idle_rise_mc;
	int32_t busy_rise_mc;
	uint32_t tau_ms;
};

struct nand_preset {
	const char *name;
	const char *description;
	struct nand_geometry geo;
	struct nand_timing timing;
	uint32_t rated_pe_cycles;
	uint32_t factory_bad_ppm;  /* factory bad blocks, parts per million */
	struct nand_reliability rel;
	struct nand_thermal thermal;
};

const struct nand_preset *nand_preset_find(const char *name);
const struct nand_preset *nand_preset_at(size_t i); /* NULL past the end */

/* ---- the simulated ioDimm --------------------------------------------- */

/* Where the simulator reports what it noticed and repaired at open. */
typedef void (*nand_log_fn)(void *arg, const char *msg);

struct nand_sim_config {
	const char *preset;        /* required when creating an image */
	const char *path;          /* image file; NULL keeps everything in RAM */
	bool create;               /* create (or overwrite) the image: built as
				    * PATH.creating, renamed to PATH once
				    * complete (PATH never names a half-made
				    * image; one in use is not replaced) */
	bool readonly;             /* open the image read-only */
	bool timing;               /* timing model on: ops take preset time */
	bool sync_on_flush;        /* nand_sync() calls fdatasync (file only) */
	bool discard_on_erase;     /* file: punch a hole when a block is erased
				    * (saves disk space between erase and reuse,
				    * costs a filesystem call per erase) */
	bool virtual_time;         /* timing model on a simulated clock that jumps
				    * ahead when waited on (fast timed tests) */
	uint64_t seed;             /* for factory bad blocks and random errors */
	/* RAM only: keep each page's first meta_spare_bytes spare bytes and
	 * the CRC32C of its data, not the data (the rest of the spare reads
	 * 0xFF; data reads return zeros whose last 4 bytes make that CRC):
	 * for timing studies of full-size devices, 56 bytes per page instead
	 * of 4 KiB.  What is read back is not what was written, except for
	 * pages programmed with NAND_OPF_META, which are kept whole. */
	bool metadata_only;
	uint32_t meta_spare_bytes;
	/* RAM, or an image being created (it keeps its geometry): blocks per
	 * die instead of the preset's (0: the preset's), for scaled-down
	 * studies and tests with the preset's dies, pages and timing */
	uint32_t blocks_per_die;
	nand_log_fn log;           /* notices (NULL: none) */
	void *log_arg;
	/* The error model of the preset (struct nand_reliability): bit errors
	 * growing with wear, retention time and read disturb, ECC up to a
	 * threshold, grown bad blocks past the rated P/E.  Off by default (the
	 * media then behave as before: no errors but the injected ones).  The
	 * environment variable FLASHD_SIM_ERROR_MODEL=1 turns it on for every
	 * device opened (=0 off), for running existing programs and tests on
	 * aging media.  Its state (when each block was programmed, reads since
	 * erase) lives in memory: at open every programmed page counts as just
	 * programmed.  Erase counts and grown bad marks are in the image. */
	bool error_model;
	/* Thermal model: ambient temperature, milli-degrees C (0: 25 C). */
	int32_t ambient_mc;
};

/*
 * Open (or create) a simulated ioDimm.  The image file holds a header, a
 * per-block table (write pointer, erase count, bad marks) and the pages,
 * each page followed by its spare bytes; it is sparse: erased pages take no
 * space.  The file is locked; a second opener gets -EBUSY.  Returns 0 and
 * *out, or negative errno; *err (if not NULL) gets a message.
 *
 * The block table is the simulator's record of the physical state; every
 * entry carries a CRC32C.  At open, an entry that fails its CRC is not
 * trusted: it is rebuilt from the pages themselves (write pointer: the last
 * programmed page slot; erase count: the highest of its die; factory bad
 * mark: from the image's seed; injected faults are forgotten), and each
 * rebuild is reported through cfg->log.  A read-only open repairs in memory
 * only.  Images of table version 1 (no CRCs) are upgraded on a read-write
 * open.
 */
int nand_sim_open(const struct nand_sim_config *cfg, struct nand_dev **out,
		  char *err, size_t errlen);
bool nand_is_sim(const struct nand_dev *d);

/* Fault injection (simulator only).  All persist in the image except the
 * power cut and the random error rates. */
struct nand_sim_faults {
	/* power cut: the op_countdown-th operation from now is interrupted
	 * (0 = off).  An interrupted program leaves that page unreadable
	 * (NAND_UNCORRECTABLE); an interrupted erase leaves the block's pages
	 * unreadable; afterwards every operation fails with NAND_POWER_LOSS
	 * until nand_sim_power_on(). */
	uint64_t power_cut_after;
	/* raw bit errors on reads: probabilities per page read, in ppm */
	uint32_t corrected_ppm;
	uint32_t uncorrectable_ppm;
	/* the refuse_submit_after-th nand_submit() from now returns -ENODEV
	 * and queues nothing (0 = off); once only */
	uint64_t refuse_submit_after;
	/* programs fail with NAND_IO_ERROR (-ENOSPC) as if the image file's
	 * filesystem were full, from the io_error_after-th program on (0 =
	 * off), until cleared */
	uint64_t io_error_after;
};
int nand_sim_set_faults(struct nand_dev *d, const struct nand_sim_faults *f);
/* Only the random error rates of struct nand_sim_faults (ppm per page
 * read); the other faults set stay as they are. */
int nand_sim_set_error_rates(struct nand_dev *d, uint32_t corrected_ppm, uint32_t uncorrectable_ppm);
bool nand_sim_powered(const struct nand_dev *d);
void nand_sim_power_on(struct nand_dev *d);
/* Count of operations executed so far (for choosing a cut point). */
uint64_t nand_sim_op_count(const struct nand_dev *d);
/* A grown bad block: programs (fail_program) and/or erases (fail_erase) fail. */
int nand_sim_fail_block(struct nand_dev *d, uint32_t block, bool fail_program, bool fail_erase);
/* One page reads back with this status from now on, until its block is erased. */
int nand_sim_page_error(struct nand_dev *d, uint64_t ppa, enum nand_status st);
/* Bit rot beyond what ECC notices: invert nbytes stored bytes of page ppa
 * from offset (offsets at or past page_size are in the spare area); reads
 * still return NAND_OK.  Persistent (in the image) until the block is
 * erased.  -EINVAL if the page is not programmed or the range is outside. */
int nand_sim_flip_bytes(struct nand_dev *d, uint64_t ppa, uint32_t offset, uint32_t nbytes);
/* A whole die stops working: reads uncorrectable, programs/erases fail. */
int nand_sim_fail_die(struct nand_dev *d, uint32_t die);
/* Timing model on or off at run time. */
void nand_sim_set_timing(struct nand_dev *d, bool on);
/* Block table entries rebuilt at open because they failed their CRC. */
uint32_t nand_sim_table_repairs(const struct nand_dev *d);
/* Timing model: die time spent so far, summed over all dies (ns).  Die
 * utilisation over an interval = delta / (dies * interval). */
uint64_t nand_sim_die_busy_ns(const struct nand_dev *d);

/* ---- error model (see struct nand_reliability) ---- */

/* Turn the error model on or off at run time (0, -ENOMEM, -EINVAL).
 * Turning it on counts every programmed page as programmed now. */
int nand_sim_set_error_model(struct nand_dev *d, bool on);
/* Aging media fast, for tests.  Set a block's erase count (in the image,
 * as if it had been erased that often; its wear terms follow). */
int nand_sim_set_erase_count(struct nand_dev *d, uint32_t block, uint32_t count);
/* Move the error model's retention clock ahead: every programmed page is
 * ns older.  The device's clock (nand_now) does not move.  -EINVAL if the
 * model is off. */
int nand_sim_age(struct nand_dev *d, uint64_t ns);
/* The model's expected raw bit-error rate of a read of page ppa now; 0 for
 * an erased page, negative if the model is off or ppa is out of range. */
double nand_sim_page_rber(struct nand_dev *d, uint64_t ppa);

struct nand_sim_error_stats {
	uint64_t reads;            /* page reads the model judged */
	uint64_t reads_corrected;  /* NAND_CORRECTED by the model */
	uint64_t reads_uncorrectable; /* beyond ECC */
	uint64_t bits_corrected;
	uint64_t program_fails;    /* grown bad: programs fail from then on */
	uint64_t erase_fails;      /* grown bad: erases fail from then on */
};
void nand_sim_error_stats(const struct nand_dev *d, struct nand_sim_error_stats *st);

/* ---- thermal model (see struct nand_thermal; read with nand_temperature_mc) ---- */

/* Ambient temperature from now on (the controller heads for it with the
 * model's time constant). */
void nand_sim_set_ambient_mc(struct nand_dev *d, int32_t mc);
/* Force the controller temperature now (it relaxes from there): for fault
 * injection. */
void nand_sim_set_temperature_mc(struct nand_dev *d, int32_t mc);

#endif
