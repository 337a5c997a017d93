/*
 * hw/nand.h - the raw NAND interface of one ioDimm: the seam between the FTL
 * and whatever holds the pages.
 *
 * This is the only public header of the hw/ layer.  The layer knows nothing
 * of the FTL: it moves pages, spare bytes and erase blocks.  A device is
 * opened with nand_open() from a struct nand_spec that names its backend:
 *   sim  the simulated ioDimm (hw/nand_sim.c; its own controls - fault
 *        injection, timing and error models, presets - are in hw/nand_sim.h,
 *        offered when the device has NAND_CAP_SIM)
 *   mtd  raw NAND driven by Linux through /dev/mtdN (hw/nand_mtd.c)
 * The generic layer (hw/nand.c) owns the backend table, the in-flight count
 * (dev->inflight), the status names and the clock.  A backend implements
 * struct nand_ops and an open function (hw/nand_backend.h says how); it must
 * keep the NAND rules below itself, whatever its medium lets through, so the
 * FTL sees one contract.  tests/unit/t_nand_conformance.c checks them on
 * every backend.
 *
 * Addressing.  A die is (channel, die-in-channel); dies are numbered
 * die = channel * dies_per_channel + die_in_channel.  Erase blocks are
 * numbered globally, block = die * blocks_per_die + block_in_die, and a page
 * is ppa = block * pages_per_block + page_in_block.  Planes are reported for
 * information; the interface addresses blocks, not planes.
 *
 * Asynchrony.  nand_submit() queues one operation and returns at once; its
 * completion is delivered later by nand_poll(), which calls op->done on the
 * caller's thread.  A backend never calls op->done from inside nand_submit(),
 * so a completion handler may submit more work without recursion.
 * nand_submit() returns 0, or a negative errno when the backend cannot take
 * the operation at all (its queue cannot grow, the device is gone): the
 * operation is then not queued, done() is never called for it, and the
 * caller must treat it as failed.  Operations on one die complete in the
 * order they were submitted (a read submitted before an erase of the same
 * block reads the old data); operations on different dies run in parallel.
 * When to poll: nand_next_due() is the earliest time a completion is due on
 * the device's clock (the simulator knows it); a backend whose operations
 * finish on other threads does not know it in advance and says UINT64_MAX,
 * and instead makes nand_event_fd() readable when one has finished (the
 * owner's event loop waits on it; nand_wait_until() waits on it too).
 *
 * NAND rules the backends enforce: an erased page reads as all 0xFF (data
 * and spare); pages of a block are programmed in increasing order, each at
 * most once between erases (NAND_PROGRAM_FAILED otherwise, nothing written);
 * a block marked bad takes no program or erase (NAND_BLOCK_BAD).
 */
#ifndef FLASHD_HW_NAND_H
#define FLASHD_HW_NAND_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
	/* reads with NAND_OPF_DATA_CRC, set before done() is called when the
	 * status is NAND_OK or NAND_CORRECTED and data is not NULL: the
	 * CRC32C (crc32c(0, data, page_size)) of the bytes delivered in data,
	 * summed as they are copied (one pass; fills what was padding) */
	uint32_t data_crc;
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

/* Operation flags. */
enum nand_op_flags {
	/* program: the page holds metadata whose bytes matter beyond their
	 * checksum (superblock, checkpoint, trim record): backends that keep
	 * only metadata (the simulator's metadata_only mode) keep these pages
	 * whole; others ignore the flag */
	NAND_OPF_META = 1 << 0,
	/* read: set op->data_crc (every backend does; the caller then checks
	 * the page without another pass over it) */
	NAND_OPF_DATA_CRC = 1 << 1,
};

struct nand_dev;

/*
 * Where a backend reports what it noticed and repaired (at open, and its
 * error model's grown bad blocks), at a priority with syslog's numbers, as
 * the FTL's (ftl.h, enum ftl_log_level): WARNING something wants attention
 * (an image repaired), NOTICE a fault the layers above handle as designed
 * (a block grown bad), INFO routine (an image upgraded).  The message names
 * the image or block, not its owner: the callback adds that.
 */
enum nand_log_level {
	NAND_LOG_ERR = 3,
	NAND_LOG_WARNING = 4,
	NAND_LOG_NOTICE = 5,
	NAND_LOG_INFO = 6,
};
typedef void (*nand_log_fn)(void *arg, int level, const char *msg);

/*
 * What nand_open() opens.  The fields a backend does not use are ignored.
 */
struct nand_spec {
	const char *backend;       /* "sim" (NULL: "sim") or "mtd" */
	const char *path;          /* sim: the image file (NULL: RAM);
				    * mtd: the character device, /dev/mtdN */
	bool readonly;             /* programs and erases refused (NAND_INVALID) */
	bool sync_on_flush;        /* sim: nand_sync() calls fdatasync (file) */
	nand_log_fn log;           /* what it noticed (NULL: none) */
	void *log_arg;
	/* the simulator's (backend "sim"; more in hw/nand_sim.h) */
	const char *preset;        /* the simulated device; needed to create */
	bool create;               /* create (or overwrite) the image */
	bool timing;               /* timing model on: ops take preset time */
	uint64_t seed;             /* factory bad blocks and random errors */
};

/*
 * The simulator's presets (what spec.preset names; the rest of each is in
 * hw/nand_sim.h): the i-th one's name (NULL past the end), and a preset's
 * one-line description (NULL: no such preset).
 */
const char *nand_preset_name(size_t i);
const char *nand_preset_description(const char *name);

/*
 * Open a device: 0 and *out, or a negative errno (-ENOENT for an unknown
 * backend, -EBUSY if another process has it open) and a message in err.
 */
int nand_open(const struct nand_spec *spec, struct nand_dev **out, char *err, size_t errlen);
/* The backend's name ("sim", "mtd"). */
const char *nand_backend_name(const struct nand_dev *d);

/* What a device offers beyond the operations every backend has. */
enum nand_caps {
	/* read_now and read_soon: reads executed at once (memory media
	 * without a timing model) */
	NAND_CAP_READ_NOW = 1 << 0,
	/* temperature_mc: a sensor */
	NAND_CAP_TEMPERATURE = 1 << 1,
	/* erase_count() is the block's lifetime count, kept by the medium;
	 * without it the counts start at 0 when the device is opened (raw NAND
	 * keeps none: the FTL has to) */
	NAND_CAP_ERASE_COUNTS = 1 << 2,
	/* the simulator: its controls (hw/nand_sim.h: fault injection, timing
	 * and error models) apply to this device */
	NAND_CAP_SIM = 1 << 3,
};

/* One ops table per backend. */
struct nand_ops {
	const char *name;
	/* Queue op (nand_submit counts it in flight when this returns 0). */
	int (*submit)(struct nand_dev *dev, struct nand_op *op);
	/* Deliver (nand_deliver) every completion due at now_ns; returns how many. */
	int (*poll)(struct nand_dev *dev, uint64_t now_ns);
	/* Earliest due time of a queued completion, 0 if one is ready, or
	 * UINT64_MAX if none is known (none queued, or the backend signals
	 * completions on its event fd instead). */
	uint64_t (*next_due)(struct nand_dev *dev);
	/* Make every completed program/erase survive a host crash (fdatasync).
	 * 0 or a negative errno (-ENOSPC, -EIO from the backend's storage). */
	int (*sync)(struct nand_dev *dev);
	/* Erases of a block (see NAND_CAP_ERASE_COUNTS). */
	uint32_t (*erase_count)(struct nand_dev *dev, uint32_t block);
	/* Bad-block marks found on the medium (read without erasing anything). */
	bool (*factory_bad)(struct nand_dev *dev, uint32_t block);
	/* The device's clock (ns) and a wait until a time on it, or until a
	 * completion is signalled on the event fd, whichever is first. */
	uint64_t (*now)(struct nand_dev *dev);
	void (*wait_until)(struct nand_dev *dev, uint64_t t_ns);
	/* Stop: operations still queued are abandoned (done() is never
	 * called); those executing are waited for; then free everything. */
	void (*close)(struct nand_dev *dev);
	/*
	 * NAND_CAP_READ_NOW.  Execute a read at once and return its status
	 * instead of queueing a completion.  Same semantics as a submitted
	 * NAND_OP_READ, which sees every operation submitted before it.  Cost:
	 * the page copy; no queueing, no completion callback.  data_crc not
	 * NULL: as a read with NAND_OPF_DATA_CRC, *data_crc is the CRC32C of
	 * the data (summed in the copy: the same one pass).
	 */
	enum nand_status (*read_now)(struct nand_dev *dev, uint32_t block, uint32_t page,
				     void *data, void *spare, uint32_t *data_crc);
	/*
	 * NAND_CAP_READ_NOW.  A hint: this page is read_now's next; start
	 * moving it towards the CPU (the simulator: one prefetch instruction
	 * for the page's first line, whose miss - a cache and a TLB miss - the
	 * copy would otherwise wait for).  No system call, no effect on
	 * results; any block and page (invalid ones are ignored).
	 */
	void (*read_soon)(struct nand_dev *dev, uint32_t block, uint32_t page);
	/*
	 * NAND_CAP_TEMPERATURE.  The controller's temperature in milli-degrees
	 * Celsius into *mc; 0 or a negative errno.
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
};

struct nand_dev {
	const struct nand_ops *ops;
	struct nand_geometry geo;
	char preset[32];           /* what the device is (sim: its preset) */
	uint32_t rated_pe_cycles;  /* endurance of one block (0: unknown) */
	uint32_t caps;             /* enum nand_caps */
	/* submitted and not yet delivered: counted by nand_submit and
	 * nand_deliver (hw/nand_backend.h) on the owner's thread only */
	uint64_t inflight;
	/* readable when a completion is ready for nand_poll (which drains it),
	 * for an event loop to wait on; -1: the backend has none, its
	 * completions are due at known times (nand_next_due) */
	int event_fd;
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
	int rc = d->ops->submit(d, op);
	if (rc == 0)
		d->inflight++;
	return rc;
}
static inline int nand_poll(struct nand_dev *d, uint64_t now_ns)
{
	return d->ops->poll(d, now_ns);
}
static inline uint64_t nand_next_due(struct nand_dev *d)
{
	return d->ops->next_due(d);
}
static inline int nand_event_fd(const struct nand_dev *d)
{
	return d->event_fd;
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
	if (d->ops->sync_start)
		return d->ops->sync_start(d, ticket);
	return d->ops->sync(d);
}
static inline void nand_prefetch(struct nand_dev *d, uint32_t block, uint32_t page)
{
	if (d->ops->prefetch)
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
/* Wait until t_ns on the device's clock, or (a backend with an event fd)
 * until a completion is ready.  t_ns UINT64_MAX: until a completion; at
 * once on a backend without an event fd (nothing would end the wait). */
static inline void nand_wait_until(struct nand_dev *d, uint64_t t_ns)
{
	if (t_ns == UINT64_MAX && d->event_fd < 0)
		return;
	d->ops->wait_until(d, t_ns);
}
/* Close the device (see nand_ops.close); NULL is a no-op. */
void nand_close(struct nand_dev *d);

typedef enum nand_status (*nand_read_now_t)(struct nand_dev *, uint32_t, uint32_t, void *,
					     void *, uint32_t *);
typedef void (*nand_read_soon_t)(struct nand_dev *, uint32_t, uint32_t);
/* The backend's read_soon, or NULL (no NAND_CAP_READ_NOW). */
static inline nand_read_soon_t nand_read_soon_fn(const struct nand_dev *d)
{
	return (d->caps & NAND_CAP_READ_NOW) ? d->ops->read_soon : NULL;
}
/* The backend's read_now, or NULL (no NAND_CAP_READ_NOW). */
static inline nand_read_now_t nand_read_now_fn(const struct nand_dev *d)
{
	return (d->caps & NAND_CAP_READ_NOW) ? d->ops->read_now : NULL;
}

/*
 * The controller's temperature in milli-degrees Celsius: 0 and *mc, or
 * -ENOTSUP if the backend has no sensor.
 */
static inline int nand_temperature_mc(struct nand_dev *d, int32_t *mc)
{
	if (!(d->caps & NAND_CAP_TEMPERATURE))
		return -ENOTSUP;
	return d->ops->temperature_mc(d, mc);
}

/* Monotonic wall clock in nanoseconds (the base of every real-time device
 * clock). */
uint64_t nand_now_ns(void);

#endif
