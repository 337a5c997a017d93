/*
 * hw/nand_sim_int.h - internal to the simulator (hw/nand_sim*.c, and only
 * those include it): struct sim, the image's on-media structures, and the
 * functions one part of the simulator calls in another.  Each part owns
 * one concept:
 *
 *   hw/nand_sim.c          the op engine: struct nand_ops, submit / poll,
 *                          the completion queues, sync, open and close
 *   hw/nand_sim_image.c    the store: image file or RAM, its layout,
 *                          creation, lock, block table check and repair
 *   hw/nand_sim_media.c    NAND semantics of read, program and erase on
 *                          the store (wear, bad and torn blocks)
 *   hw/nand_sim_timing.c   the device clock, the timing model and the
 *                          thermal model it drives
 *   hw/nand_sim_errors.c   the error model (bit errors, grown bad blocks)
 *   hw/nand_sim_faults.c   fault injection (power cuts, forced errors)
 *
 * Image file layout (little-endian, x86_64 only):
 *   [0, 4096)              struct sim_header
 *   [4096, data_off)       struct sim_block per erase block (the physical
 *                          state: write pointer, erase count, bad marks)
 *   [data_off, ...)        one slot per page: page_size data bytes followed
 *                          by spare_size spare bytes
 * A block table entry is replaced by one 16-byte store (entry and its CRC
 * together, blk_store), so a kill never leaves an entry that fails its
 * CRC; an entry that does was damaged from outside and is rebuilt from the
 * pages at open (see nand_sim_open in hw/nand.h).
 */
#ifndef FLASHD_HW_NAND_SIM_INT_H
#define FLASHD_HW_NAND_SIM_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/xorshift.h"
#include "hw/nand_backend.h"
#include "hw/nand_sim.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the image format is little-endian; this host is not"
#endif

#define SIM_MAGIC "FLASHSIM"
#define SIM_VERSION 2         /* 2: block table entries carry a CRC32C */
#define SIM_NO_PAGE 0xFFFF
#define SIM_MAX_DIES 512
#define SIM_EM_MAX_CW 64          /* codewords per page the model tracks */
#define SIM_TH_WINDOW_NS 100000000ull /* thermal model step: 100 ms */
#define SIM_TH_AMBIENT_MC 25000

enum sim_block_flags {
	SB_FACTORY_BAD = 1 << 0,  /* marked bad at the factory */
	SB_FAIL_PROGRAM = 1 << 1, /* grown bad: programs fail */
	SB_FAIL_ERASE = 1 << 2,   /* grown bad: erases fail */
	SB_ERASE_TORN = 1 << 3,   /* an erase was interrupted: pages unreadable */
};

struct __attribute__((packed)) sim_block {
	uint16_t wp;          /* pages programmed since the last erase */
	uint16_t torn_page;   /* page whose program was interrupted or failed */
	uint8_t flags;        /* enum sim_block_flags */
	uint8_t pad[3];
	uint32_t erase_count;
	uint32_t crc;         /* crc32c of the 12 bytes before it (version 2) */
};
_Static_assert(sizeof(struct sim_block) == 16, "sim_block is on media");

struct sim_header { /* naturally aligned: no padding */
	char magic[8];
	uint32_t version;
	uint32_t header_size;
	struct nand_geometry geo;       /* 7 x u32 */
	char preset[32];
	struct nand_timing timing;      /* 4 x u32 */
	uint32_t rated_pe_cycles;
	uint64_t table_off;
	uint64_t data_off;
	uint64_t slot_size;
	uint8_t die_failed[SIM_MAX_DIES / 8];
	uint32_t crc;                   /* crc32 of the bytes before it */
	/* version 2: after crc, so that version 1 headers keep their CRC */
	uint32_t ext_crc;               /* crc32 of seed */
	uint64_t seed;                  /* factory bad blocks were drawn with it */
	uint8_t pad[4096 - 8 - 4 - 4 - 28 - 32 - 16 - 4 - 24 - SIM_MAX_DIES / 8 - 4 - 12];
};
_Static_assert(sizeof(struct sim_header) == 4096, "sim_header is on media");

/* A die in the timing model. */
enum die_phase {
	DP_IDLE,
	DP_WORK,                      /* sensing, programming or erasing */
	DP_WAIT_CHAN,                 /* waiting for its channel */
	DP_XFER,                      /* moving a page over the channel */
};

#define NO_DIE UINT32_MAX

struct sdie {
	struct nand_op *qhead, *qtail; /* submitted, not started (FIFO) */
	struct nand_op *cur;          /* in service */
	uint8_t phase;                /* enum die_phase */
	uint64_t until;               /* DP_WORK, DP_XFER: when the phase ends */
	uint64_t started;             /* when cur started (die time accounting) */
	uint32_t hpos;                /* index in the event heap, NO_DIE if none */
	uint32_t next_wait;           /* next die waiting for the channel */
};

struct schan {
	bool busy;
	uint32_t whead, wtail;        /* dies waiting for it (FIFO), NO_DIE */
};

struct page_err {
	uint64_t ppa;
	enum nand_status st;
};

/* A page programmed with NAND_OPF_META on metadata-only media, kept whole
 * but for its last bytes that repeat its last byte (a page of records is
 * mostly padding: a footer of 128 entries fills half of its 4 KiB): malloc'd
 * at its program, freed at its block's erase; a block's few such pages are
 * a list (a table of page_per_block pointers cost 8 bytes per page of
 * every block that has one). */
struct sim_kept {
	struct sim_kept *next;        /* the block's other kept pages */
	uint32_t page;
	uint32_t len;                 /* data bytes kept; the rest are fill */
	uint8_t fill;
	uint8_t data[];
};

/* Error model state of one block (memory only). */
struct em_block {
	uint64_t t_first, t_last;     /* first / last program since erase (em clock) */
	uint32_t reads;               /* reads since erase (saturating) */
	float base;                   /* RBER right after programming */
	float ret;                    /* RBER added per ns of retention */
	float rd;                     /* RBER added per read of the block */
	float p_prog;                 /* probability that a program fails */
	float p_erase;                /* probability that an erase fails */
};

struct sim {
	struct nand_dev dev;
	int fd;                       /* -1: RAM */
	bool readonly;
	bool timing;
	bool sync_on_flush;
	/* asynchronous sync (sim_sync_start): one thread runs fdatasync while
	 * the owner goes on; sync_req / sync_done are tickets, sync_err is
	 * sticky; all under sync_mu (sync_done also read atomically) */
	bool sync_thread_up;
	bool sync_stop;
	pthread_t sync_thread;
	pthread_mutex_t sync_mu;
	pthread_cond_t sync_cv;
	uint64_t sync_req, sync_done;
	int sync_err;
	bool virtual_time;
	bool discard_on_erase;        /* punch a hole for erased blocks (file) */
	uint8_t *ff_spare;            /* image file: spare_size bytes of 0xFF */
	uint16_t *backed;             /* image file, per block: its pages below
	                               * this were written since open and not
	                               * punched since, so the file holds them
	                               * (media_program) */
	uint64_t vclock;
	struct nand_timing tm;
	struct sim_header *hdr;       /* mapped header (+ table) or malloc'd */
	size_t map_len;
	struct sim_block *blocks;
	uint8_t *ram;                 /* RAM media: page slots (metadata only:
	                               * meta_slot bytes per page: per chunk,
	                               * kept spare bytes, then the chunk's
	                               * data CRC32C) */
	size_t ram_len;
	bool metadata_only;
	uint32_t meta_keep, meta_slot;
	uint32_t meta_chunks;         /* chunks per page (metadata only) */
	uint32_t meta_zero_crc;       /* crc32c of a chunk's zeros before its
	                               * tail: a read delivers zeros and the
	                               * tail that makes the chunk's CRC */
	struct sim_kept **kept;       /* metadata only: [block] its
	                               * NAND_OPF_META pages (8 bytes a block) */
	uint64_t busy_ns;             /* die time of every scheduled op */
	uint64_t data_off, slot_size;
	/* timing model: dies, channels, and the dies whose phase ends next */
	struct sdie *dies;
	struct schan *chans;
	uint32_t *events;             /* min-heap of dies by dies[].until */
	uint32_t nevents;
	/* completions: untimed ops at once; timed ones as their phases end,
	 * in time order; both delivered by poll */
	struct nand_op *fifo_head, *fifo_tail;
	struct nand_op *done_head, *done_tail;
	uint64_t ticket;
	/* faults */
	uint64_t ops_executed;
	uint64_t cut_at;              /* 0: no cut armed */
	bool dead;
	uint32_t corrected_ppm, uncorrectable_ppm;
	uint64_t rng;
	struct page_err *perr;
	size_t perr_len, perr_cap;
	uint64_t submits, refuse_at;  /* refuse the refuse_at-th submit (0: off) */
	uint64_t programs, io_error_from; /* programs fail NAND_IO_ERROR from here */
	uint32_t table_repairs;       /* entries rebuilt at open */
	/* error model (em == NULL: off) */
	struct nand_reliability rel;
	struct em_block *em;
	uint64_t em_rng;
	uint64_t em_age_ns;           /* nand_sim_age: added to the em clock */
	double em_page_bits;
	uint32_t em_ncw;              /* codewords per page */
	struct nand_sim_error_stats em_st;
	/* thermal model */
	struct nand_thermal th;
	int32_t th_ambient;           /* mC */
	double th_temp;               /* mC */
	uint64_t th_t;                /* device clock of the last step */
	uint64_t th_work;             /* die work (ns) at the last step */
	uint64_t th_untimed_ns;       /* nominal die time of untimed ops */
	uint64_t th_cost[3];          /* nominal die time per op type */
	nand_log_fn log;
	void *log_arg;
};

/* ---- small helpers every part uses ------------------------------------- */

static inline struct sim *to_sim(struct nand_dev *d)
{
	return (struct sim *)d;
}

static inline uint8_t *ram_slot(struct sim *s, uint64_t ppa)
{
	return s->ram + ppa * s->slot_size;
}

static inline uint32_t blk_crc(const struct sim_block *b)
{
	return crc32c(0, b, offsetof(struct sim_block, crc));
}

/* Replace entry b with nb and its CRC in one 16-byte store (see the top). */
static inline void blk_store(struct sim *s, uint32_t b, struct sim_block nb)
{
	nb.crc = blk_crc(&nb);
#if defined(__SSE2__)
	__m128i v;
	memcpy(&v, &nb, sizeof v);
	_mm_store_si128((__m128i *)(void *)&s->blocks[b], v);
#else
	memcpy(&s->blocks[b], &nb, sizeof nb);
#endif
}

/* ---- hw/nand_sim.c: the op engine -------------------------------------- */

extern const struct nand_ops sim_ops, sim_ops_untimed;
void sim_log(struct sim *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- hw/nand_sim_image.c: the store ------------------------------------- */

/* Open the media cfg asks for (RAM, or an image file opened or created):
 * *p is the preset (NULL: the image's own, looked up).  On failure, what
 * s holds is released by sim_free. */
int store_open(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset **p,
	       char *err, size_t errlen);
/* Release everything s holds (open or half-opened) and s itself. */
void sim_free(struct sim *s);
void header_seal(struct sim *s);

/* ---- hw/nand_sim_media.c: NAND semantics -------------------------------- */

enum nand_status media_read(struct sim *s, struct nand_op *op);
enum nand_status media_program(struct sim *s, struct nand_op *op, bool interrupted);
enum nand_status media_erase(struct sim *s, struct nand_op *op, bool interrupted);
void media_fence(void);
/* Free what metadata-only media keep of block b's NAND_OPF_META pages. */
void kept_drop_block(struct sim *s, uint32_t b);

/* ---- hw/nand_sim_timing.c: clock, timing and thermal models ------------- */

/* Clock, timing model and thermal model of an opened store (th: the card's
 * thermal parameters). */
int timing_init(struct sim *s, const struct nand_sim_config *cfg, const struct nand_thermal *th);
uint64_t sim_now(struct nand_dev *d);
void sim_wait_until(struct nand_dev *d, uint64_t t);
void timing_advance(struct sim *s, uint64_t now);
void timed_submit(struct sim *s, struct nand_op *op, uint64_t now);
void timing_reset(struct sim *s);
void th_step(struct sim *s, uint64_t now);
int sim_temperature_mc(struct nand_dev *d, int32_t *mc);

/* ---- hw/nand_sim_errors.c: the error model ------------------------------ */

/* The card's ECC and error model (rel: its parameters); the model runs if
 * cfg or FLASHD_SIM_ERROR_MODEL asks for it. */
int em_init(struct sim *s, const struct nand_sim_config *cfg, const struct nand_reliability *rel);
double em_uniform(struct sim *s);
void em_rates(struct sim *s, uint32_t b);
void em_programmed(struct sim *s, uint32_t b, uint32_t page);
void em_erased(struct sim *s, uint32_t b);
enum nand_status em_read(struct sim *s, struct nand_op *op, uint32_t wp);

/* ---- hw/nand_sim_faults.c: fault injection ------------------------------ */

/* An operation executes: true if an armed power cut happens on it (the
 * device is dead from then on). */
bool fault_cut_now(struct sim *s);
/* A submission: true if an injected refusal is due on it. */
bool fault_refuse_submit(struct sim *s);
enum nand_status page_error_lookup(struct sim *s, uint64_t ppa);
void page_errors_drop_block(struct sim *s, uint32_t block);

#endif
