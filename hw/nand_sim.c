/*
 * hw/nand_sim.c - the simulated ioDimm: NAND pages, spare bytes, erase
 * blocks, wear, bad blocks, faults and (optionally) timing.
 *
 * Image file layout (little-endian, x86_64 only):
 *   [0, 4096)              struct sim_header
 *   [4096, data_off)       struct sim_block per erase block (the physical
 *                          state: write pointer, erase count, bad marks)
 *   [data_off, ...)        one slot per page: page_size data bytes followed
 *                          by spare_size spare bytes
 * Header, block table and pages are mapped shared (MAP_SHARED): moving a
 * page is a memory copy.  Erased pages are never read from the file: a page at or
 * past its block's write pointer reads as 0xFF, and erasing punches a hole.
 * With no path everything lives in anonymous memory.
 *
 * An operation executes (changes the media) when it is submitted; its
 * completion is queued and delivered by poll.  With the timing model on,
 * time is simulated event by event, as the card's controller would run it:
 * each die serves its queue in submission order (a read senses for tR,
 * then moves the page out over its channel; a program moves the page in,
 * then programs for tPROG; an erase takes tBERS), and each channel moves one
 * page at a time, granted to the dies waiting for it in the order they
 * asked.  The channel is held only while a page moves, so a die busy
 * sensing or programming never holds up the other dies on its channel.
 * Events are processed up to "now" whenever the device is submitted to or
 * polled; a completion is due when its last phase ends.
 *
 * Ordering of a program against a process kill: page bytes are written
 * before the write pointer moves, so a killed process leaves the page
 * erased, never a half-recorded page.  A block table entry is replaced by
 * one 16-byte store (entry and its CRC together), so a kill never leaves an
 * entry that fails its CRC; an entry that does was damaged from outside and
 * is rebuilt from the pages at open (see nand_sim_open in hw/nand.h).
 *
 * The error model (off unless asked for; parameters in struct
 * nand_reliability, hw/nand.h) judges every read of a programmed page: it
 * keeps per block, in memory, the time of its first and last program since
 * erase (a page's program time is interpolated between them by its index)
 * and its reads since erase, and caches the block's wear-dependent
 * coefficients (recomputed when its erase count changes).  A read costs the
 * RBER sum, one random draw and one comparison: the number of bit errors in
 * the page is Poisson with mean L = RBER * page bits, and a draw u >= L means
 * none (P(0) = exp(-L) >= 1 - L).  Only otherwise are the errors counted
 * (inverse Poisson CDF from the same draw) and spread over the codewords.
 * Each read draws anew: errors are not sticky between reads of a page.
 *
 * The thermal model integrates die work (the timing model's die time, or,
 * with timing off, each operation's nominal time) into a first-order
 * temperature, stepped at most every SIM_TH_WINDOW_NS on poll and at every
 * query.
 *
 * Errors of the image file itself (no space to back a block, EIO) are
 * NAND_IO_ERROR, never NAND program failures: the NAND is not worn.  The
 * header and block table are backed with disk space at open, so stores into
 * them cannot fault on a full filesystem.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
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
#define NS_PER_YEAR (365.25 * 86400e9)

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
	                               * meta_slot bytes per page: kept spare
	                               * bytes, then the data CRC32C) */
	size_t ram_len;
	bool metadata_only;
	uint32_t meta_keep, meta_slot;
	uint8_t ***kept;              /* metadata only: [block][page] data of
	                               * NAND_OPF_META pages, NULL if none */
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

static uint32_t crc32_plain(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t crc = ~0u;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
	}
	return ~crc;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static struct sim *to_sim(struct nand_dev *d)
{
	return (struct sim *)d;
}

static inline uint8_t *ram_slot(struct sim *s, uint64_t ppa)
{
	return s->ram + ppa * s->slot_size;
}

static void header_seal(struct sim *s)
{
	s->hdr->crc = crc32_plain(s->hdr, offsetof(struct sim_header, crc));
	s->hdr->ext_crc = crc32_plain(&s->hdr->seed, sizeof s->hdr->seed);
}

static void sim_log(struct sim *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sim_log(struct sim *s, int level, const char *fmt, ...)
{
	if (!s->log)
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	s->log(s->log_arg, level, buf);
}

/*
 * A program's copy into the media: non-temporal stores.  The page is not
 * read again soon (by GC or a host read, much later), and a plain copy
 * first reads every destination line for ownership.  `flashctl simulate
 * --preset test-1g --op 20 --ram`, last pass, same session: 272k-283k
 * writes/s with memcpy, 350k-381k with these stores (251k-258k with an
 * sfence after each page: so no fence here).  Ordering: this thread's own
 * loads see its streaming stores; other threads (the sync thread's
 * fdatasync, the kernel's writeback) see them after a fence: media_fence()
 * before every sync and at close, and the kernel's write-protect of a page
 * before writeback interrupts this CPU, which drains them.  Falls back to
 * memcpy for unaligned or odd sizes.
 */
static void copy_nt(void *dst, const void *src, size_t n)
{
#if defined(__SSE2__)
	if (((uintptr_t)dst & 15) == 0 && (n & 63) == 0) {
		__m128i *d = dst;
		const __m128i *p = src;
		for (size_t i = 0; i < n / 16; i += 4) {
			__m128i a = _mm_loadu_si128(p + i), b = _mm_loadu_si128(p + i + 1);
			__m128i c = _mm_loadu_si128(p + i + 2), e = _mm_loadu_si128(p + i + 3);
			_mm_stream_si128(d + i, a);
			_mm_stream_si128(d + i + 1, b);
			_mm_stream_si128(d + i + 2, c);
			_mm_stream_si128(d + i + 3, e);
		}
		return;
	}
#endif
	memcpy(dst, src, n);
}

/* Streaming stores visible to other threads (and the kernel) from here. */
static void media_fence(void)
{
#if defined(__SSE2__)
	_mm_sfence();
#endif
}

static uint32_t blk_crc(const struct sim_block *b)
{
	return crc32c(0, b, offsetof(struct sim_block, crc));
}

/* Replace entry b with nb and its CRC in one 16-byte store (see top). */
static void blk_store(struct sim *s, uint32_t b, struct sim_block nb)
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

/* ---- error model ------------------------------------------------------- */

/* The error model's clock: the device's (virtual, or the monotonic clock at
 * tick resolution: retention needs no better) plus nand_sim_age's advance. */
static uint64_t em_now(struct sim *s)
{
	if (s->virtual_time)
		return s->vclock + s->em_age_ns;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + s->em_age_ns;
}

static double em_uniform(struct sim *s)
{
	return (double)(rng_next(&s->em_rng) >> 11) * 0x1.0p-53;
}

/* Block b's coefficients from its erase count. */
static void em_rates(struct sim *s, uint32_t b)
{
	const struct nand_reliability *r = &s->rel;
	struct em_block *e = &s->em[b];
	double w = (double)s->blocks[b].erase_count / (s->dev.rated_pe_cycles ? s->dev.rated_pe_cycles : 1);
	double ww = pow(w, r->wear_exp);
	e->base = (float)(r->rber_fresh + r->rber_rated * ww);
	e->ret = (float)(r->rber_ret_year * (r->ret_fresh + (1 - r->ret_fresh) * ww) / NS_PER_YEAR);
	e->rd = (float)(r->rber_read * (1 + (r->read_wear - 1) * ww));
	double h = r->fail_rated * exp(r->fail_growth * (w - 1));
	if (h > 1)
		h = 1;
	e->p_erase = (float)(h / 2);
	e->p_prog = (float)(h / 2 / s->dev.geo.pages_per_block);
}

static void em_programmed(struct sim *s, uint32_t b, uint32_t page)
{
	struct em_block *e = &s->em[b];
	uint64_t now = em_now(s);
	if (page == 0)
		e->t_first = now;
	e->t_last = now;
}

static void em_erased(struct sim *s, uint32_t b)
{
	s->em[b].t_first = s->em[b].t_last = 0;
	s->em[b].reads = 0;
	em_rates(s, b);
}

/* Expected RBER of a read of page (programmed, wp pages in the block) now. */
static double em_rber(struct sim *s, uint32_t b, uint32_t page, uint32_t wp, uint64_t now)
{
	const struct em_block *e = &s->em[b];
	double t = (double)e->t_first;
	if (wp > 1)
		t += (double)(e->t_last - e->t_first) * page / (wp - 1);
	double age = (double)now - t;
	if (age < 0)
		age = 0;
	return e->base + e->ret * age + (double)e->rd * e->reads;
}

/* Smallest k with Poisson(lam) CDF(k) >= v (lam <= ~700). */
static uint32_t poisson_inv(double lam, double v)
{
	double p = exp(-lam), c = p;
	uint32_t k = 0, cap = (uint32_t)(lam + 12 * sqrt(lam) + 40);
	while (v > c && k < cap) {
		k++;
		p *= lam / k;
		c += p;
	}
	return k;
}

/* Judge a read of a programmed page: NAND_OK, NAND_CORRECTED (with the
 * counts in op) or NAND_UNCORRECTABLE. */
static enum nand_status em_read(struct sim *s, struct nand_op *op, uint32_t wp)
{
	double lam = em_rber(s, op->block, op->page, wp, em_now(s)) * s->em_page_bits;
	double u = em_uniform(s);
	s->em_st.reads++;
	if (u >= lam)
		return NAND_OK; /* the common case: 1 - exp(-lam) <= lam */
	uint32_t ncw = s->em_ncw, ecc = s->rel.ecc_bits;
	uint32_t cnt[SIM_EM_MAX_CW] = { 0 };
	uint32_t total = 0, worst = 0;
	if (lam <= 700) {
		/* the page's errors, then each to a codeword at random */
		total = poisson_inv(lam, 1 - u);
		if (!total)
			return NAND_OK;
		if (ncw == 1) {
			worst = total;
		} else {
			for (uint32_t i = 0; i < total; i++) {
				uint32_t c = (uint32_t)(((rng_next(&s->em_rng) >> 32) * ncw) >> 32);
				if (++cnt[c] > worst)
					worst = cnt[c];
			}
		}
	} else {
		double lcw = lam / ncw;
		if (lcw > 700)
			worst = UINT32_MAX;
		for (uint32_t c = 0; c < ncw && worst <= ecc; c++) {
			uint32_t k = poisson_inv(lcw, em_uniform(s));
			total += k;
			if (k > worst)
				worst = k;
		}
	}
	if (worst > ecc) {
		s->em_st.reads_uncorrectable++;
		return NAND_UNCORRECTABLE;
	}
	s->em_st.reads_corrected++;
	s->em_st.bits_corrected += total;
	op->corrected_bits = (uint16_t)(total > UINT16_MAX ? UINT16_MAX : total);
	op->corrected_max = (uint16_t)(worst > UINT16_MAX ? UINT16_MAX : worst);
	return NAND_CORRECTED;
}

/* Error model on: state for every block; programmed pages count as
 * programmed now. */
static int em_enable(struct sim *s)
{
	uint32_t n = nand_blocks(&s->dev.geo);
	struct em_block *em = calloc(n, sizeof *em);
	if (!em)
		return -ENOMEM;
	s->em = em;
	uint64_t now = em_now(s);
	for (uint32_t b = 0; b < n; b++) {
		em_rates(s, b);
		if (s->blocks[b].wp)
			em[b].t_first = em[b].t_last = now;
	}
	return 0;
}

/* ---- thermal model ------------------------------------------------------- */

static uint64_t sim_now(struct nand_dev *d);

/* Step the temperature to now (device clock): the die busy fraction since
 * the last step drives the target; first-order lag towards it. */
static void th_step(struct sim *s, uint64_t now)
{
	if (now <= s->th_t)
		return;
	double dt = (double)(now - s->th_t);
	uint64_t work = s->busy_ns + s->th_untimed_ns;
	double busy = (double)(work - s->th_work) / (dt * nand_dies(&s->dev.geo));
	if (busy > 1)
		busy = 1;
	double target = s->th_ambient + s->th.idle_rise_mc + s->th.busy_rise_mc * busy;
	double tau = s->th.tau_ms ? s->th.tau_ms * 1e6 : 1;
	s->th_temp = target + (s->th_temp - target) * exp(-dt / tau);
	s->th_t = now;
	s->th_work = work;
}

static int sim_temperature_mc(struct nand_dev *d, int32_t *mc)
{
	struct sim *s = (struct sim *)d;
	th_step(s, sim_now(d));
	*mc = (int32_t)lround(s->th_temp);
	return 0;
}

/* ---- media access ------------------------------------------------------ */

static enum nand_status page_error_lookup(struct sim *s, uint64_t ppa)
{
	for (size_t i = 0; i < s->perr_len; i++)
		if (s->perr[i].ppa == ppa)
			return s->perr[i].st;
	return NAND_OK;
}

static void page_errors_drop_block(struct sim *s, uint32_t block)
{
	uint64_t lo = (uint64_t)block * s->dev.geo.pages_per_block;
	uint64_t hi = lo + s->dev.geo.pages_per_block;
	size_t j = 0;
	for (size_t i = 0; i < s->perr_len; i++)
		if (s->perr[i].ppa < lo || s->perr[i].ppa >= hi)
			s->perr[j++] = s->perr[i];
	s->perr_len = j;
}

static bool die_failed(struct sim *s, uint32_t block)
{
	uint32_t die = nand_block_die(&s->dev.geo, block);
	return s->hdr->die_failed[die / 8] & (1u << (die % 8));
}

static void fill_garbage(struct sim *s, struct nand_op *op)
{
	const struct nand_geometry *g = &s->dev.geo;
	uint64_t x = s->rng ^ ((uint64_t)op->block << 20) ^ op->page;
	if (op->data)
		for (uint32_t i = 0; i + 8 <= g->page_size; i += 8) {
			uint64_t v = rng_next(&x);
			memcpy((uint8_t *)op->data + i, &v, 8);
		}
	if (op->spare)
		for (uint32_t i = 0; i + 8 <= g->spare_size; i += 8) {
			uint64_t v = rng_next(&x);
			memcpy((uint8_t *)op->spare + i, &v, 8);
		}
}

/* Reads with NAND_OPF_DATA_CRC: the common one (a programmed page of RAM
 * media or a mapped image) sums the data in its copy (crc32c_copy); the
 * others - erased pages, metadata_only - sum what they delivered after. */
static enum nand_status media_read(struct sim *s, struct nand_op *op)
{
	const struct nand_geometry *g = &s->dev.geo;
	struct sim_block *b = &s->blocks[op->block];
	uint64_t ppa = (uint64_t)op->block * g->pages_per_block + op->page;
	bool want_crc = op->data && (op->flags & NAND_OPF_DATA_CRC);

	if (b->flags & SB_FACTORY_BAD)
		return NAND_BLOCK_BAD;
	if (die_failed(s, op->block) || (b->flags & SB_ERASE_TORN) ||
	    (b->torn_page != SIM_NO_PAGE &&
	     (op->page == b->torn_page ||
	      ((b->flags & SB_FAIL_PROGRAM) && op->page > b->torn_page)))) {
		fill_garbage(s, op);
		return NAND_UNCORRECTABLE;
	}
	if (s->em && s->em[op->block].reads != UINT32_MAX)
		s->em[op->block].reads++; /* read disturb: every read of the block */
	if (op->page >= b->wp) {
		if (op->data)
			memset(op->data, 0xFF, g->page_size);
		if (op->spare)
			memset(op->spare, 0xFF, g->spare_size);
		if (want_crc)
			op->data_crc = crc32c(0, op->data, g->page_size);
		return NAND_OK;
	}
	if (s->metadata_only) {
		const uint8_t *m = s->ram + ppa * s->meta_slot;
		const uint8_t *whole = s->kept[op->block] ? s->kept[op->block][op->page] : NULL;
		if (op->data && whole) {
			memcpy(op->data, whole, g->page_size);
		} else if (op->data) {
			uint32_t crc;
			memcpy(&crc, m + s->meta_keep, 4);
			memset(op->data, 0, g->page_size);
			crc32c_forge_tail(op->data, g->page_size, crc);
		}
		if (op->spare) {
			memcpy(op->spare, m, s->meta_keep);
			memset((uint8_t *)op->spare + s->meta_keep, 0xFF, g->spare_size - s->meta_keep);
		}
		if (want_crc)
			op->data_crc = crc32c(0, op->data, g->page_size);
	} else {
		const uint8_t *src = ram_slot(s, ppa);
		if (want_crc)
			op->data_crc = crc32c_copy(0, op->data, src, g->page_size);
		else if (op->data)
			memcpy(op->data, src, g->page_size);
		if (op->spare)
			memcpy(op->spare, src + g->page_size, g->spare_size);
	}
	enum nand_status st = NAND_OK;
	if (s->perr_len)
		st = page_error_lookup(s, ppa);
	if (st == NAND_OK && (s->uncorrectable_ppm || s->corrected_ppm)) {
		uint32_t r = (uint32_t)(rng_next(&s->rng) % 1000000u);
		if (r < s->uncorrectable_ppm)
			st = NAND_UNCORRECTABLE;
		else if (r < s->uncorrectable_ppm + s->corrected_ppm)
			st = NAND_CORRECTED;
	}
	if (st == NAND_OK && s->em)
		st = em_read(s, op, b->wp);
	else if (st == NAND_CORRECTED)
		op->corrected_bits = op->corrected_max = 1; /* injected: nominal */
	if (st == NAND_UNCORRECTABLE)
		fill_garbage(s, op);
	return st;
}

static enum nand_status media_program(struct sim *s, struct nand_op *op, bool interrupted)
{
	const struct nand_geometry *g = &s->dev.geo;
	struct sim_block b = s->blocks[op->block];
	uint64_t ppa = (uint64_t)op->block * g->pages_per_block + op->page;

	if (b.flags & SB_FACTORY_BAD)
		return NAND_BLOCK_BAD;
	if (op->page != b.wp || !op->data)
		return NAND_PROGRAM_FAILED; /* out of order or twice: nothing written */
	s->programs++;
	if (!interrupted && s->io_error_from && s->programs >= s->io_error_from) {
		op->err = -ENOSPC; /* injected: as if the filesystem were full */
		return NAND_IO_ERROR;
	}
	if (s->em && !interrupted && !(b.flags & (SB_FAIL_PROGRAM | SB_ERASE_TORN)) &&
	    !die_failed(s, op->block) && em_uniform(s) < s->em[op->block].p_prog) {
		/* worn out: grown bad, programs fail from now on */
		b.flags |= SB_FAIL_PROGRAM;
		s->em_st.program_fails++;
		sim_log(s, NAND_LOG_NOTICE, "error model: block %u grown bad: program of page %u failed at erase count %u",
			op->block, op->page, b.erase_count);
	}
	if (interrupted || die_failed(s, op->block) || (b.flags & (SB_FAIL_PROGRAM | SB_ERASE_TORN))) {
		/* the page is consumed and unreadable */
		if (b.torn_page == SIM_NO_PAGE)
			b.torn_page = (uint16_t)op->page;
		if (s->backed && s->backed[op->block] > op->page)
			s->backed[op->block] = (uint16_t)op->page; /* not written: may be a hole */
		b.wp = (uint16_t)(op->page + 1);
		blk_store(s, op->block, b);
		if (s->em)
			em_programmed(s, op->block, op->page);
		return interrupted ? NAND_POWER_LOSS : NAND_PROGRAM_FAILED;
	}
	if (s->metadata_only) {
		uint8_t *m = s->ram + ppa * s->meta_slot;
		uint32_t crc = crc32c(0, op->data, g->page_size);
		if (op->flags & NAND_OPF_META) {
			if (!s->kept[op->block])
				s->kept[op->block] = calloc(g->pages_per_block, sizeof(uint8_t *));
			uint8_t *copy = s->kept[op->block] ? malloc(g->page_size) : NULL;
			if (!copy)
				return NAND_PROGRAM_FAILED; /* out of memory: nothing kept */
			memcpy(copy, op->data, g->page_size);
			s->kept[op->block][op->page] = copy;
		}
		if (op->spare)
			memcpy(m, op->spare, s->meta_keep);
		else
			memset(m, 0xFF, s->meta_keep);
		memcpy(m + s->meta_keep, &crc, 4);
	} else if (s->fd >= 0 && op->page >= s->backed[op->block]) {
		/* an image file, a page it may not hold yet (a hole): one
		 * pwritev, not a store into the mapping.  A first store into a
		 * page of the mapping is a page fault per 4 KiB (a fresh image:
		 * every program; ~40 % of the ioDimm thread in a VM, where a
		 * fault exits to the hypervisor), and one into a hole on a full
		 * filesystem is SIGBUS, where this returns ENOSPC: an error of
		 * the image file, not of the NAND (the page is not programmed:
		 * wp stays).  The mapping sees the data at once (one page
		 * cache). */
		struct iovec iov[2] = {
			{ .iov_base = (void *)op->data, .iov_len = g->page_size },
			{ .iov_base = op->spare ? op->spare : s->ff_spare, .iov_len = g->spare_size },
		};
		ssize_t n = pwritev(s->fd, iov, 2, (off_t)(s->data_off + ppa * s->slot_size));
		if (n != (ssize_t)(g->page_size + g->spare_size)) {
			op->err = n < 0 ? -errno : -ENOSPC; /* short: the filesystem is full */
			return NAND_IO_ERROR;
		}
		s->backed[op->block] = (uint16_t)(op->page + 1);
	} else {
		/* RAM media, or an image file's page the file already holds
		 * (written since open, erased without a hole punched): a store
		 * into the mapping, no system call (a pwritev per program cost
		 * make bench's 4K random writes QD32 on tmpfs images 21 %:
		 * 141k -> 112k IOPS) */
		uint8_t *dst = ram_slot(s, ppa);
		copy_nt(dst, op->data, g->page_size);
		if (op->spare)
			copy_nt(dst + g->page_size, op->spare, g->spare_size);
		else
			memset(dst + g->page_size, 0xFF, g->spare_size);
	}
	b.wp = (uint16_t)(op->page + 1);
	blk_store(s, op->block, b);
	if (s->em)
		em_programmed(s, op->block, op->page);
	return NAND_OK;
}

static void media_discard(struct sim *s, uint32_t block)
{
	const struct nand_geometry *g = &s->dev.geo;
	uint64_t len = (uint64_t)g->pages_per_block * s->slot_size;
	uint64_t off = (uint64_t)block * len;
	/* only whole 4 KiB pages inside the block's range */
	uint64_t lo = (off + 4095) & ~4095ull, hi = (off + len) & ~4095ull;
	if (hi <= lo)
		return;
	/* RAM media keeps its pages: giving them back costs a page fault per
	 * page on the next program */
	if (s->fd < 0)
		return;
	if (!s->readonly)
		fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)(s->data_off + lo), (off_t)(hi - lo));
}

static enum nand_status media_erase(struct sim *s, struct nand_op *op, bool interrupted)
{
	struct sim_block b = s->blocks[op->block];

	if (b.flags & SB_FACTORY_BAD)
		return NAND_BLOCK_BAD;
	if (interrupted) {
		b.flags |= SB_ERASE_TORN;
		b.erase_count++;
		blk_store(s, op->block, b);
		if (s->em)
			em_rates(s, op->block);
		return NAND_POWER_LOSS;
	}
	if (s->em && !(b.flags & SB_FAIL_ERASE) && !die_failed(s, op->block) &&
	    em_uniform(s) < s->em[op->block].p_erase) {
		/* worn out: grown bad, erases fail from now on (the data stay) */
		b.flags |= SB_FAIL_ERASE;
		blk_store(s, op->block, b);
		s->em_st.erase_fails++;
		sim_log(s, NAND_LOG_NOTICE, "error model: block %u grown bad: erase failed at erase count %u",
			op->block, b.erase_count);
	}
	if (die_failed(s, op->block) || (b.flags & SB_FAIL_ERASE))
		return NAND_ERASE_FAILED;
	bool had_pages = b.wp != 0 || (b.flags & SB_ERASE_TORN);
	if (s->metadata_only && s->kept[op->block]) {
		for (uint32_t p = 0; p < s->dev.geo.pages_per_block; p++)
			free(s->kept[op->block][p]);
		free(s->kept[op->block]);
		s->kept[op->block] = NULL;
	}
	b.wp = 0;
	b.torn_page = SIM_NO_PAGE;
	b.flags &= (uint8_t)~SB_ERASE_TORN;
	b.erase_count++;
	blk_store(s, op->block, b);
	if (s->em)
		em_erased(s, op->block);
	if (s->perr_len)
		page_errors_drop_block(s, op->block);
	if (had_pages && s->discard_on_erase) {
		media_discard(s, op->block);
		if (s->backed)
			s->backed[op->block] = 0;
	}
	return NAND_OK;
}

/* ---- timing model ------------------------------------------------------ */

static uint64_t sim_now(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	return s->virtual_time ? s->vclock : nand_now_ns();
}

static void sim_wait_until(struct nand_dev *d, uint64_t t)
{
	struct sim *s = to_sim(d);
	if (s->virtual_time) {
		if (t > s->vclock)
			s->vclock = t;
		return;
	}
	uint64_t now = nand_now_ns();
	if (t <= now)
		return;
	struct timespec ts = { (time_t)((t - now) / 1000000000u), (long)((t - now) % 1000000000u) };
	nanosleep(&ts, NULL);
}

static uint64_t xfer_ns(struct sim *s, uint32_t bytes)
{
	if (!s->tm.xfer_mbps)
		return 0;
	return (uint64_t)bytes * 1000ull / s->tm.xfer_mbps; /* MB/s = bytes/us */
}

/* ---- the event loop of the timing model ---------------------------------- */

static bool ev_less(const struct sim *s, uint32_t a, uint32_t b)
{
	return s->dies[a].until < s->dies[b].until || (s->dies[a].until == s->dies[b].until && a < b);
}

static void ev_set(struct sim *s, uint32_t i, uint32_t d)
{
	s->events[i] = d;
	s->dies[d].hpos = i;
}

/* Die d's phase ends at dies[d].until: add it to the heap (it is in it at
 * most once: a die has one phase at a time). */
static void ev_push(struct sim *s, uint32_t d)
{
	uint32_t i = s->nevents++;
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (!ev_less(s, d, s->events[parent]))
			break;
		ev_set(s, i, s->events[parent]);
		i = parent;
	}
	ev_set(s, i, d);
}

static uint32_t ev_pop(struct sim *s)
{
	uint32_t top = s->events[0], last = s->events[--s->nevents], i = 0, n = s->nevents;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && ev_less(s, s->events[c + 1], s->events[c]))
			c++;
		if (!ev_less(s, s->events[c], last))
			break;
		ev_set(s, i, s->events[c]);
		i = c;
	}
	if (n)
		ev_set(s, i, last);
	s->dies[top].hpos = NO_DIE;
	return top;
}

static uint32_t xfer_bytes(struct sim *s, const struct nand_op *op)
{
	const struct nand_geometry *g = &s->dev.geo;
	if (op->type == NAND_OP_PROGRAM)
		return g->page_size + g->spare_size;
	return (op->data ? g->page_size : 0) + (op->spare ? g->spare_size : 0);
}

static void phase(struct sim *s, uint32_t d, enum die_phase ph, uint64_t until)
{
	s->dies[d].phase = (uint8_t)ph;
	s->dies[d].until = until;
	ev_push(s, d);
}

static void xfer_start(struct sim *s, uint32_t d, uint64_t t)
{
	s->chans[d / s->dev.geo.dies_per_channel].busy = true;
	phase(s, d, DP_XFER, t + xfer_ns(s, xfer_bytes(s, s->dies[d].cur)));
}

/* Die d needs its channel at t: now if free, else after those waiting. */
static void chan_request(struct sim *s, uint32_t d, uint64_t t)
{
	struct schan *c = &s->chans[d / s->dev.geo.dies_per_channel];
	if (!c->busy) {
		xfer_start(s, d, t);
		return;
	}
	s->dies[d].phase = DP_WAIT_CHAN;
	s->dies[d].next_wait = NO_DIE;
	if (c->wtail == NO_DIE)
		c->whead = d;
	else
		s->dies[c->wtail].next_wait = d;
	c->wtail = d;
}

static void chan_release(struct sim *s, uint32_t d, uint64_t t)
{
	struct schan *c = &s->chans[d / s->dev.geo.dies_per_channel];
	c->busy = false;
	uint32_t w = c->whead;
	if (w == NO_DIE)
		return;
	c->whead = s->dies[w].next_wait;
	if (c->whead == NO_DIE)
		c->wtail = NO_DIE;
	xfer_start(s, w, t);
}

static void die_start(struct sim *s, uint32_t d, uint64_t t)
{
	struct sdie *e = &s->dies[d];
	struct nand_op *op = e->qhead;
	e->phase = DP_IDLE;
	if (!op)
		return;
	e->qhead = op->next;
	if (!e->qhead)
		e->qtail = NULL;
	op->next = NULL;
	e->cur = op;
	e->started = t;
	switch (op->type) {
	case NAND_OP_READ:
		phase(s, d, DP_WORK, t + s->tm.read_us * 1000ull); /* sense */
		break;
	case NAND_OP_PROGRAM:
		chan_request(s, d, t); /* the page goes in first */
		break;
	default:
		phase(s, d, DP_WORK, t + s->tm.erase_us * 1000ull);
		break;
	}
}

static void die_complete(struct sim *s, uint32_t d, uint64_t t)
{
	struct sdie *e = &s->dies[d];
	struct nand_op *op = e->cur;
	e->cur = NULL;
	s->busy_ns += t - e->started;
	op->due_ns = t;
	op->next = NULL;
	if (s->done_tail)
		s->done_tail->next = op;
	else
		s->done_head = op;
	s->done_tail = op;
	die_start(s, d, t);
}

/* Run the model up to now: every phase that ends by then, in time order. */
static void advance(struct sim *s, uint64_t now)
{
	while (s->nevents && s->dies[s->events[0]].until <= now) {
		uint32_t d = ev_pop(s);
		struct sdie *e = &s->dies[d];
		uint64_t t = e->until;
		enum nand_op_type type = e->cur->type;
		if (e->phase == DP_WORK) {
			if (type == NAND_OP_READ)
				chan_request(s, d, t); /* sensed: the page goes out */
			else
				die_complete(s, d, t); /* programmed or erased */
		} else { /* DP_XFER */
			chan_release(s, d, t);
			if (type == NAND_OP_READ)
				die_complete(s, d, t);
			else
				phase(s, d, DP_WORK, t + s->tm.program_us * 1000ull);
		}
	}
}

/* Queue a timed op on its die (the model has run up to now). */
static void timed_submit(struct sim *s, struct nand_op *op, uint64_t now)
{
	uint32_t d = nand_block_die(&s->dev.geo, op->block);
	struct sdie *e = &s->dies[d];
	op->next = NULL;
	if (e->qtail)
		e->qtail->next = op;
	else
		e->qhead = op;
	e->qtail = op;
	if (!e->cur)
		die_start(s, d, now);
}

static void timing_reset(struct sim *s)
{
	uint32_t ndies = nand_dies(&s->dev.geo);
	for (uint32_t d = 0; d < ndies; d++)
		s->dies[d] = (struct sdie){ .hpos = NO_DIE, .next_wait = NO_DIE };
	for (uint32_t c = 0; c < s->dev.geo.channels; c++)
		s->chans[c] = (struct schan){ .whead = NO_DIE, .wtail = NO_DIE };
	s->nevents = 0;
	s->done_head = s->done_tail = NULL;
}

/* ---- ops --------------------------------------------------------------- */

/* Execute an operation on the media (sets op->status). */
static void sim_execute(struct sim *s, struct nand_op *op)
{
	const struct nand_geometry *g = &s->dev.geo;

	op->err = 0;
	op->corrected_bits = op->corrected_max = 0;
	if (op->block >= nand_blocks(g) || op->page >= g->pages_per_block) {
		op->status = NAND_INVALID;
	} else if (s->dead) {
		op->status = NAND_POWER_LOSS;
	} else if (s->readonly && op->type != NAND_OP_READ) {
		op->status = NAND_INVALID;
	} else {
		bool cut = false;
		s->ops_executed++;
		if (s->cut_at && s->ops_executed >= s->cut_at) {
			cut = true;
			s->dead = true;
			s->cut_at = 0;
		}
		if (!s->timing && op->type <= NAND_OP_ERASE)
			s->th_untimed_ns += s->th_cost[op->type]; /* thermal: nominal die time */
		switch (op->type) {
		case NAND_OP_READ:
			op->status = cut ? NAND_POWER_LOSS : media_read(s, op);
			s->dev.last_corrected_bits = op->corrected_bits;
			s->dev.last_corrected_max = op->corrected_max;
			break;
		case NAND_OP_PROGRAM:
			op->status = media_program(s, op, cut);
			break;
		case NAND_OP_ERASE:
			op->status = media_erase(s, op, cut);
			break;
		default:
			op->status = NAND_INVALID;
		}
	}
}

static int sim_submit(struct nand_dev *d, struct nand_op *op)
{
	struct sim *s = to_sim(d);

	if (s->refuse_at && ++s->submits >= s->refuse_at) {
		s->refuse_at = 0; /* injected: the backend cannot take it */
		return -ENODEV;
	}
	sim_execute(s, op);
	op->next = NULL;
	op->ticket = s->ticket++;
	if (s->timing && op->status != NAND_INVALID && op->status != NAND_POWER_LOSS) {
		uint64_t now = sim_now(d);
		advance(s, now);
		timed_submit(s, op, now);
		return 0;
	}
	op->due_ns = 0;
	if (s->fifo_tail)
		s->fifo_tail->next = op;
	else
		s->fifo_head = op;
	s->fifo_tail = op;
	return 0;
}

static int sim_poll(struct nand_dev *d, uint64_t now_ns)
{
	struct sim *s = to_sim(d);
	int n = 0;

	/* only what is queued now: handlers may submit more */
	struct nand_op *op = s->fifo_head;
	s->fifo_head = s->fifo_tail = NULL;
	while (op) {
		struct nand_op *next = op->next;
		n++;
		nand_deliver(d, op);
		op = next;
	}
	advance(s, now_ns);
	if (now_ns >= s->th_t + SIM_TH_WINDOW_NS)
		th_step(s, sim_now(d)); /* the device clock: now_ns may be anything */
	/* only what is done now: handlers may submit (and complete) more */
	op = s->done_head;
	s->done_head = s->done_tail = NULL;
	while (op) {
		struct nand_op *next = op->next;
		n++;
		nand_deliver(d, op);
		op = next;
	}
	return n;
}

/* poll granularity while an asynchronous sync runs */
#define SIM_SYNC_POLL_NS 1000000ull

static uint64_t sim_next_due(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	if (s->fifo_head || s->done_head)
		return 0;
	uint64_t due = s->nevents ? s->dies[s->events[0]].until : UINT64_MAX;
	if (s->sync_thread_up &&
	    __atomic_load_n(&s->sync_done, __ATOMIC_ACQUIRE) < __atomic_load_n(&s->sync_req, __ATOMIC_ACQUIRE)) {
		uint64_t soon = sim_now(d) + SIM_SYNC_POLL_NS;
		if (soon < due)
			due = soon;
	}
	return due;
}

static int sim_sync(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	if (s->fd < 0 || !s->sync_on_flush || s->readonly)
		return 0;
	media_fence();
	if (fdatasync(s->fd) < 0)
		return -errno;
	return 0;
}

static void *sim_sync_main(void *arg)
{
	struct sim *s = arg;
	pthread_mutex_lock(&s->sync_mu);
	while (!s->sync_stop) {
		if (s->sync_done >= s->sync_req) {
			pthread_cond_wait(&s->sync_cv, &s->sync_mu);
			continue;
		}
		uint64_t upto = s->sync_req;
		pthread_mutex_unlock(&s->sync_mu);
		int rc = fdatasync(s->fd) < 0 ? -errno : 0;
		pthread_mutex_lock(&s->sync_mu);
		if (rc && !s->sync_err)
			s->sync_err = rc;
		__atomic_store_n(&s->sync_done, upto, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&s->sync_mu);
	return NULL;
}

/* fdatasync on a thread of its own: a checkpoint or a FLUSH waits for it
 * without stopping the owner's other I/O (it may take seconds when much
 * of the image is dirty in the page cache). */
static int sim_sync_start(struct nand_dev *d, uint64_t *ticket)
{
	struct sim *s = to_sim(d);
	*ticket = 0;
	if (s->fd < 0 || !s->sync_on_flush || s->readonly)
		return 0;
	if (s->virtual_time)
		return sim_sync(d); /* no wall clock to wait on: at once */
	media_fence();
	if (!s->sync_thread_up) {
		pthread_mutex_init(&s->sync_mu, NULL);
		pthread_cond_init(&s->sync_cv, NULL);
		if (pthread_create(&s->sync_thread, NULL, sim_sync_main, s) != 0) {
			pthread_cond_destroy(&s->sync_cv);
			pthread_mutex_destroy(&s->sync_mu);
			return sim_sync(d); /* no thread: at once */
		}
		pthread_setname_np(s->sync_thread, "flashd-sync");
		s->sync_thread_up = true;
	}
	pthread_mutex_lock(&s->sync_mu);
	*ticket = __atomic_add_fetch(&s->sync_req, 1, __ATOMIC_RELEASE);
	pthread_cond_signal(&s->sync_cv);
	pthread_mutex_unlock(&s->sync_mu);
	return 0;
}

static int sim_sync_poll(struct nand_dev *d, uint64_t ticket)
{
	struct sim *s = to_sim(d);
	pthread_mutex_lock(&s->sync_mu);
	int rc = s->sync_err ? s->sync_err : s->sync_done >= ticket;
	pthread_mutex_unlock(&s->sync_mu);
	return rc;
}

/* madvise(WILLNEED) on a written page's slot in the mapped image: the
 * kernel reads it ahead, so a batch of reads (a checkpoint, recovery) has
 * many disk reads in flight instead of one fault at a time.  Pages never
 * written (holes) and RAM media: nothing.  Cost: one syscall. */
static void sim_prefetch(struct nand_dev *d, uint32_t block, uint32_t page)
{
	struct sim *s = to_sim(d);
	const struct nand_geometry *g = &d->geo;
	if (s->fd < 0 || s->metadata_only || !s->ram || block >= nand_blocks(g) ||
	    page >= s->blocks[block].wp)
		return;
	uint64_t ppa = (uint64_t)block * g->pages_per_block + page;
	uintptr_t lo = (uintptr_t)ram_slot(s, ppa) & ~(uintptr_t)4095;
	uintptr_t hi = ((uintptr_t)ram_slot(s, ppa) + s->slot_size + 4095) & ~(uintptr_t)4095;
	(void)madvise((void *)lo, hi - lo, MADV_WILLNEED);
}

static void sim_sync_stop(struct sim *s)
{
	if (!s->sync_thread_up)
		return;
	pthread_mutex_lock(&s->sync_mu);
	s->sync_stop = true;
	pthread_cond_signal(&s->sync_cv);
	pthread_mutex_unlock(&s->sync_mu);
	pthread_join(s->sync_thread, NULL);
	pthread_cond_destroy(&s->sync_cv);
	pthread_mutex_destroy(&s->sync_mu);
	s->sync_thread_up = false;
}

static uint32_t sim_erase_count(struct nand_dev *d, uint32_t block)
{
	struct sim *s = to_sim(d);
	return block < nand_blocks(&d->geo) ? s->blocks[block].erase_count : 0;
}

static bool sim_factory_bad(struct nand_dev *d, uint32_t block)
{
	struct sim *s = to_sim(d);
	return block >= nand_blocks(&d->geo) || (s->blocks[block].flags & SB_FACTORY_BAD);
}

static void sim_close(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	/* deliver nothing: the caller has abandoned its operations */
	sim_sync_stop(s);
	media_fence();
	if (s->fd >= 0) {
		if (s->hdr)
			munmap(s->hdr, s->map_len);
		close(s->fd);
	} else {
		free(s->hdr);
	}
	if (s->ram)
		munmap(s->ram, s->ram_len);
	if (s->kept) {
		for (uint32_t b = 0; b < nand_blocks(&d->geo); b++) {
			if (!s->kept[b])
				continue;
			for (uint32_t p = 0; p < d->geo.pages_per_block; p++)
				free(s->kept[b][p]);
			free(s->kept[b]);
		}
		free(s->kept);
	}
	free(s->dies);
	free(s->chans);
	free(s->events);
	free(s->ff_spare);
	free(s->backed);
	free(s->perr);
	free(s->em);
	free(s);
}

/* Untimed media only: operations execute at submission anyway. */
static void sim_read_soon(struct nand_dev *d, uint32_t block, uint32_t page)
{
	struct sim *s = to_sim(d);
	const struct nand_geometry *g = &d->geo;
	if (!s->ram || s->metadata_only || block >= nand_blocks(g) || page >= g->pages_per_block)
		return;
	__builtin_prefetch(ram_slot(s, (uint64_t)block * g->pages_per_block + page));
}

static enum nand_status sim_read_now(struct nand_dev *d, uint32_t block, uint32_t page,
				     void *data, void *spare, uint32_t *data_crc)
{
	struct nand_op op = { .type = NAND_OP_READ, .block = block, .page = page,
			      .data = data, .spare = spare,
			      .flags = data_crc ? NAND_OPF_DATA_CRC : 0 };
	sim_execute(to_sim(d), &op);
	if (data_crc)
		*data_crc = op.data_crc;
	return op.status;
}

#define SIM_OPS_COMMON                                   \
	.name = "sim",                                   \
	.submit = sim_submit,                            \
	.poll = sim_poll,                                \
	.next_due = sim_next_due,                        \
	.sync = sim_sync,                                \
	.erase_count = sim_erase_count,                  \
	.factory_bad = sim_factory_bad,                  \
	.now = sim_now,                                  \
	.wait_until = sim_wait_until,                    \
	.close = sim_close,                              \
	.temperature_mc = sim_temperature_mc,            \
	.sync_start = sim_sync_start,                    \
	.sync_poll = sim_sync_poll,                      \
	.prefetch = sim_prefetch

/* timing model on: every operation takes its time */
static const struct nand_ops sim_ops = { SIM_OPS_COMMON };
/* timing model off: reads may also run at once */
static const struct nand_ops sim_ops_untimed = { SIM_OPS_COMMON, .read_now = sim_read_now,
						 .read_soon = sim_read_soon };

bool nand_is_sim(const struct nand_dev *d)
{
	return d && (d->ops == &sim_ops || d->ops == &sim_ops_untimed);
}

/* ---- open / create ----------------------------------------------------- */

static void seterr(char *err, size_t len, const char *fmt, const char *a, const char *b)
{
	if (err && len)
		snprintf(err, len, fmt, a, b);
}

/*
 * Who holds the flock on fd's file: "locked by pid N (COMM)" into buf, from
 * /proc/locks (flock locks are not visible to F_GETLK / F_OFD_GETLK); the
 * first holder listed, or "locked" if none is found (it let go meanwhile,
 * another pid namespace, no /proc).  Reads /proc: an open's error path only.
 */
static void lock_holder(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "locked");
	struct stat st;
	FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		char kind[16];
		int pid;
		unsigned maj, min;
		unsigned long ino;
		/* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's
		 * line has "->" after the number and does not parse */
		if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", kind, &pid, &maj, &min, &ino) != 5 ||
		    strcmp(kind, "FLOCK") || ino != (unsigned long)st.st_ino || maj != major(st.st_dev) ||
		    min != minor(st.st_dev))
			continue;
		char path[64], comm[32] = "";
		snprintf(path, sizeof path, "/proc/%d/comm", pid);
		FILE *c = fopen(path, "re");
		if (c) {
			if (fgets(comm, sizeof comm, c))
				comm[strcspn(comm, "\n")] = 0;
			fclose(c);
		}
		if (comm[0])
			snprintf(buf, len, "locked by pid %d (%s)", pid, comm);
		else
			snprintf(buf, len, "locked by pid %d", pid);
		break;
	}
	fclose(f);
}

/* Factory bad marks: drawn from the seed, one draw per block that may be
 * bad (block 0 of every die is guaranteed good, as NAND vendors do).
 * Calls mark(s, block) for each bad block. */
static void factory_bad_draw(struct sim *s, const struct nand_preset *p, uint64_t seed,
			     void (*mark)(struct sim *s, uint32_t b, void *arg), void *arg)
{
	uint32_t n = nand_blocks(&s->dev.geo);
	uint64_t rng = seed ? seed : 0x9E3779B97F4A7C15ull;
	if (!p->factory_bad_ppm)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (i % s->dev.geo.blocks_per_die != 0 && rng_next(&rng) % 1000000u < p->factory_bad_ppm)
			mark(s, i, arg);
}

static void mark_factory_bad(struct sim *s, uint32_t b, void *arg)
{
	struct sim_block e = s->blocks[b];
	e.flags |= SB_FACTORY_BAD;
	blk_store(s, b, e);
}

static void init_blocks(struct sim *s, const struct nand_preset *p, uint64_t seed)
{
	uint32_t n = nand_blocks(&s->dev.geo);
	struct sim_block e = { .torn_page = SIM_NO_PAGE };
	for (uint32_t i = 0; i < n; i++)
		blk_store(s, i, e);
	factory_bad_draw(s, p, seed, mark_factory_bad, NULL);
}

/* ---- block table check and repair -------------------------------------- */

static bool slot_blank(const uint8_t *p, size_t len)
{
	/* erased: never written (a hole reads 0x00) or written as erased (0xFF) */
	uint8_t v = p[0];
	if (v != 0 && v != 0xFF)
		return false;
	for (size_t i = 1; i < len; i++)
		if (p[i] != v)
			return false;
	return true;
}

static void mark_in_bitmap(struct sim *s, uint32_t b, void *arg)
{
	uint8_t *bits = arg;
	bits[b / 8] |= (uint8_t)(1u << (b % 8));
}

/*
 * Check every entry's CRC; rebuild the ones that fail from the pages.
 * Cost: a CRC of the whole table (16 bytes per block) at every open, and a
 * scan of the page slots of each damaged block.
 */
static int table_check(struct sim *s, const struct nand_preset *p, const char *path)
{
	const struct nand_geometry *g = &s->dev.geo;
	uint32_t n = nand_blocks(g), ndies = nand_dies(g), bad = 0;
	for (uint32_t b = 0; b < n; b++)
		bad += s->blocks[b].crc != blk_crc(&s->blocks[b]);
	if (!bad)
		return 0;
	uint32_t *die_max = calloc(ndies, sizeof *die_max);
	uint8_t *factory = calloc((n + 7) / 8, 1);
	if (!die_max || !factory) {
		free(die_max);
		free(factory);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		const struct sim_block *e = &s->blocks[b];
		uint32_t die = nand_block_die(g, b);
		if (e->crc == blk_crc(e) && e->erase_count > die_max[die])
			die_max[die] = e->erase_count;
	}
	if (p)
		factory_bad_draw(s, p, s->hdr->seed, mark_in_bitmap, factory);
	else
		sim_log(s, NAND_LOG_WARNING, "%s: preset %s is unknown: factory bad marks of rebuilt entries are lost",
			path, s->hdr->preset);
	for (uint32_t b = 0; b < n; b++) {
		struct sim_block e = s->blocks[b];
		if (e.crc == blk_crc(&e))
			continue;
		struct sim_block r = { .torn_page = SIM_NO_PAGE,
				       .erase_count = die_max[nand_block_die(g, b)] };
		if (factory[b / 8] & (1u << (b % 8))) {
			r.flags = SB_FACTORY_BAD;
		} else {
			/* pages are programmed in order: the write pointer is one
			 * past the last slot that is not blank */
			uint64_t first = (uint64_t)b * g->pages_per_block;
			for (uint32_t pg = g->pages_per_block; pg > 0; pg--)
				if (!slot_blank(ram_slot(s, first + pg - 1), s->slot_size)) {
					r.wp = (uint16_t)pg;
					break;
				}
		}
		sim_log(s, NAND_LOG_WARNING, "%s: block table entry of block %u fails its checksum (write pointer %u, "
			   "erase count %u as stored); rebuilt from the pages: write pointer %u, "
			   "erase count %u%s",
			path, b, e.wp, e.erase_count, r.wp, r.erase_count,
			r.flags & SB_FACTORY_BAD ? ", factory bad" : "");
		blk_store(s, b, r);
		s->table_repairs++;
	}
	if (!s->readonly) {
		msync(s->hdr, s->map_len, MS_SYNC);
		fsync(s->fd);
	}
	free(die_max);
	free(factory);
	return 0;
}

/*
 * Creating an image file.  It is built under a temporary name beside the
 * image (PATH.creating, locked like an image) and renamed to PATH only once
 * its header and block table are written and synced: PATH never names a
 * half-made image, so a creation cut short at any point (a signal, a
 * crash, a full disk) leaves no image, and the next creation starts again
 * (in the PATH.creating left behind, if any).  A symbolic link at PATH is
 * followed, as open(O_CREAT) would: the image is made where it points.
 */
static char *create_target(const char *path)
{
	char *cur = strdup(path);
	for (int depth = 0; cur && depth < 8; depth++) {
		struct stat st;
		char link[4096];
		if (lstat(cur, &st) < 0 || !S_ISLNK(st.st_mode))
			break;
		ssize_t n = readlink(cur, link, sizeof link - 1);
		if (n < 0)
			break;
		link[n] = 0;
		const char *slash = strrchr(cur, '/');
		int dirlen = link[0] != '/' && slash ? (int)(slash - cur + 1) : 0;
		char *next = malloc((size_t)dirlen + (size_t)n + 1);
		if (next)
			sprintf(next, "%.*s%s", dirlen, cur, link);
		free(cur);
		cur = next;
	}
	return cur;
}

/* The complete image at *tmp becomes target (and *tmp is freed and NULL
 * once renamed).  An image already there is replaced only if no process
 * has it open (its lock is held across the rename, so none can open it
 * meanwhile); the directory is synced, so the name survives a power cut as
 * the image's contents do. */
static int image_publish(char **tmp, const char *target, char *err, size_t errlen)
{
	int rc = 0, old = open(target, O_RDONLY | O_CLOEXEC);
	if (old >= 0 && flock(old, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		char who[80];
		lock_holder(old, who, sizeof who);
		seterr(err, errlen, "NAND image %s is in use by another process (%s)", target, who);
		close(old);
		return rc;
	}
	char *dir = strdup(target);
	if (!dir) {
		rc = -ENOMEM;
	} else if (rename(*tmp, target) < 0) {
		rc = -errno;
		seterr(err, errlen, "cannot rename the new NAND image to %s: %s", target, strerror(-rc));
	} else {
		free(*tmp);
		*tmp = NULL; /* it is the image now */
		int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fsync(dfd) < 0) {
			rc = -errno;
			seterr(err, errlen, "created NAND image %s, but syncing its directory failed: %s",
			       target, strerror(-rc));
		}
		if (dfd >= 0)
			close(dfd);
	}
	free(dir);
	if (old >= 0)
		close(old);
	return rc;
}

static int geometry_ok(const struct nand_geometry *g)
{
	if (!g->channels || !g->dies_per_channel || !g->blocks_per_die || !g->pages_per_block ||
	    !g->page_size || !g->spare_size)
		return 0;
	if (nand_dies(g) > SIM_MAX_DIES || g->pages_per_block > 4096 || g->spare_size > 256 ||
	    g->page_size % 512)
		return 0;
	return 1;
}

int nand_sim_open(const struct nand_sim_config *cfg, struct nand_dev **out, char *err,
		  size_t errlen)
{
	const struct nand_preset *p = NULL;
	struct sim *s = calloc(1, sizeof *s);
	char *target = NULL, *tmp = NULL; /* creating: the image, its name until complete */
	int rc;

	if (!s)
		return -ENOMEM;
	s->fd = -1;
	s->timing = cfg->timing;
	s->sync_on_flush = cfg->sync_on_flush;
	s->virtual_time = cfg->virtual_time;
	s->discard_on_erase = cfg->discard_on_erase;
	s->readonly = cfg->readonly;
	s->rng = cfg->seed ? cfg->seed : 0x853c49e6748fea9bull;
	s->log = cfg->log;
	s->log_arg = cfg->log_arg;

	if (cfg->preset) {
		p = nand_preset_find(cfg->preset);
		if (!p) {
			seterr(err, errlen, "unknown preset '%s'%s", cfg->preset, "");
			free(s);
			return -EINVAL;
		}
	}

	if (cfg->metadata_only && cfg->path) {
		seterr(err, errlen, "metadata-only media live in RAM (no image file)%s%s", "", "");
		free(s);
		return -EINVAL;
	}
	if (!cfg->path) {
		if (!p) {
			seterr(err, errlen, "a RAM device needs a preset%s%s", "", "");
			free(s);
			return -EINVAL;
		}
		s->dev.geo = p->geo;
		if (cfg->blocks_per_die)
			s->dev.geo.blocks_per_die = cfg->blocks_per_die;
		s->slot_size = p->geo.page_size + p->geo.spare_size;
		if (cfg->metadata_only) {
			if (!cfg->meta_spare_bytes || cfg->meta_spare_bytes > p->geo.spare_size) {
				seterr(err, errlen, "metadata-only media keep 1 to spare_size spare bytes%s%s",
				       "", "");
				free(s);
				return -EINVAL;
			}
			s->metadata_only = true;
			s->meta_keep = cfg->meta_spare_bytes;
			s->meta_slot = (s->meta_keep + 4 + 7) & ~7u;
			s->slot_size = s->meta_slot;
			s->kept = calloc(nand_blocks(&s->dev.geo), sizeof *s->kept);
			if (!s->kept) {
				free(s);
				return -ENOMEM;
			}
		}
		s->hdr = calloc(1, sizeof(struct sim_header) +
				      (size_t)nand_blocks(&s->dev.geo) * sizeof(struct sim_block));
		if (!s->hdr) {
			free(s);
			return -ENOMEM;
		}
		s->blocks = (struct sim_block *)(s->hdr + 1);
		s->ram_len = (size_t)(nand_pages(&s->dev.geo) * s->slot_size);
		s->ram = mmap(NULL, s->ram_len, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (s->ram == MAP_FAILED) {
			rc = -errno;
			free(s->hdr);
			free(s);
			seterr(err, errlen, "cannot map RAM for the NAND image%s%s", "", "");
			return rc;
		}
		/* huge pages where the kernel allows them: random page copies
		 * then miss the TLB far less (measured: ~25 % more 4 KiB reads/s) */
		madvise(s->ram, s->ram_len, MADV_HUGEPAGE);
		memcpy(s->hdr->magic, SIM_MAGIC, 8);
		s->hdr->geo = s->dev.geo;
		snprintf(s->hdr->preset, sizeof s->hdr->preset, "%s", p->name);
		s->hdr->timing = p->timing;
		s->hdr->rated_pe_cycles = p->rated_pe_cycles;
		s->hdr->seed = cfg->seed;
		init_blocks(s, p, cfg->seed);
		goto opened;
	}

	int flags = cfg->readonly ? O_RDONLY : O_RDWR;
	const char *open_path = cfg->path;
	if (cfg->create) {
		/* made as tmp, renamed to target once complete (create_target) */
		target = create_target(cfg->path);
		tmp = target ? malloc(strlen(target) + sizeof ".creating") : NULL;
		if (!tmp) {
			free(target);
			free(s);
			return -ENOMEM;
		}
		sprintf(tmp, "%s.creating", target);
		open_path = tmp;
		flags = O_RDWR | O_CREAT;
	}
	/* The lock is taken on the file opened; the name may have moved to
	 * another file meanwhile (an image created beside it and renamed over
	 * it, image_publish, which holds the old one's lock only until the
	 * rename): then the file locked is one nobody else will find, and
	 * its writes would vanish.  Open again until the name still names
	 * the file locked. */
	rc = 0;
	for (int tries = 0;; tries++) {
		s->fd = open(open_path, flags | O_CLOEXEC, 0644);
		if (s->fd < 0) {
			rc = -errno;
			seterr(err, errlen, "cannot open NAND image %s: %s", open_path,
			       strerror(-rc));
			break;
		}
		if (flock(s->fd, (cfg->readonly ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
			rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
			char who[80];
			lock_holder(s->fd, who, sizeof who);
			if (cfg->create)
				snprintf(who + strlen(who), sizeof who - strlen(who), ", being created");
			seterr(err, errlen, "NAND image %s is in use by another process (%s)",
			       open_path, who);
			close(s->fd);
			break;
		}
		struct stat locked, named;
		if (fstat(s->fd, &locked) == 0 && stat(open_path, &named) == 0 &&
		    locked.st_dev == named.st_dev && locked.st_ino == named.st_ino)
			break;
		close(s->fd);
		if (tries == 8) {
			rc = -EBUSY;
			seterr(err, errlen, "NAND image %s is in use by another process (%s)",
			       open_path, "replaced while opening");
			break;
		}
	}
	if (rc) {
		free(tmp);
		free(target);
		free(s);
		return rc;
	}

	if (cfg->create) {
		if (!p) {
			seterr(err, errlen, "creating %s needs a preset%s", cfg->path, "");
			rc = -EINVAL;
			goto fail;
		}
		struct nand_geometry g = p->geo;
		if (cfg->blocks_per_die)
			g.blocks_per_die = cfg->blocks_per_die;
		if (!geometry_ok(&g)) {
			rc = -EINVAL;
			goto fail;
		}
		uint64_t table = (uint64_t)nand_blocks(&g) * sizeof(struct sim_block);
		uint64_t data_off = (4096 + table + (1 << 20) - 1) & ~((uint64_t)(1 << 20) - 1);
		uint64_t slot = g.page_size + g.spare_size;
		uint64_t total = data_off + nand_pages(&g) * slot;
		if (ftruncate(s->fd, 0) < 0 || ftruncate(s->fd, (off_t)total) < 0) {
			rc = -errno;
			seterr(err, errlen, "cannot size NAND image %s: %s", cfg->path, strerror(-rc));
			goto fail;
		}
		if (fallocate(s->fd, 0, 0, (off_t)data_off) < 0 && errno != EOPNOTSUPP) {
			rc = -errno;
			seterr(err, errlen, "cannot reserve space for the block table of %s: %s",
			       cfg->path, strerror(-rc));
			goto fail;
		}
		s->map_len = data_off;
		s->hdr = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
		if (s->hdr == MAP_FAILED) {
			rc = -errno;
			s->hdr = NULL;
			goto fail;
		}
		memcpy(s->hdr->magic, SIM_MAGIC, 8);
		s->hdr->version = SIM_VERSION;
		s->hdr->header_size = sizeof(struct sim_header);
		s->hdr->geo = g;
		snprintf(s->hdr->preset, sizeof s->hdr->preset, "%s", p->name);
		s->hdr->timing = p->timing;
		s->hdr->rated_pe_cycles = p->rated_pe_cycles;
		s->hdr->table_off = 4096;
		s->hdr->data_off = data_off;
		s->hdr->slot_size = slot;
		s->hdr->seed = cfg->seed;
		s->blocks = (struct sim_block *)((uint8_t *)s->hdr + 4096);
		s->dev.geo = g;
		init_blocks(s, p, cfg->seed);
		header_seal(s);
		if (msync(s->hdr, s->map_len, MS_SYNC) < 0 || fsync(s->fd) < 0) {
			rc = -errno;
			seterr(err, errlen, "cannot write NAND image %s: %s", tmp, strerror(-rc));
			goto fail;
		}
		rc = image_publish(&tmp, target, err, errlen);
		if (rc)
			goto fail;
	} else {
		struct sim_header h;
		ssize_t n = pread(s->fd, &h, sizeof h, 0);
		if (n != (ssize_t)sizeof h || memcmp(h.magic, SIM_MAGIC, 8) != 0) {
			seterr(err, errlen, "%s is not a flashd NAND image%s", cfg->path, "");
			rc = -EINVAL;
			goto fail;
		}
		if ((h.version != 1 && h.version != SIM_VERSION) || h.header_size != sizeof h ||
		    h.crc != crc32_plain(&h, offsetof(struct sim_header, crc)) || !geometry_ok(&h.geo) ||
		    (h.version >= 2 && h.ext_crc != crc32_plain(&h.seed, sizeof h.seed))) {
			seterr(err, errlen, "%s: NAND image header is damaged or of another version%s",
			       cfg->path, "");
			rc = -EINVAL;
			goto fail;
		}
		struct stat st;
		uint64_t table = (uint64_t)nand_blocks(&h.geo) * sizeof(struct sim_block);
		if (fstat(s->fd, &st) < 0 || h.table_off != 4096 || h.data_off < 4096 + table ||
		    h.slot_size != (uint64_t)h.geo.page_size + h.geo.spare_size ||
		    (uint64_t)st.st_size < h.data_off + nand_pages(&h.geo) * h.slot_size) {
			seterr(err, errlen, "%s: NAND image is truncated or inconsistent%s", cfg->path, "");
			rc = -EINVAL;
			goto fail;
		}
		if (p && strcmp(p->name, h.preset) != 0) {
			seterr(err, errlen, "%s holds preset %s, not the one configured", cfg->path,
			       h.preset);
			rc = -EINVAL;
			goto fail;
		}
		if (!p)
			p = nand_preset_find(h.preset);
		if (!cfg->readonly && fallocate(s->fd, 0, 0, (off_t)h.data_off) < 0 &&
		    errno != EOPNOTSUPP) {
			rc = -errno;
			seterr(err, errlen, "cannot reserve space for the block table of %s: %s",
			       cfg->path, strerror(-rc));
			goto fail;
		}
		/* read-only: a private mapping, so damaged entries can be
		 * repaired in memory without writing the image */
		s->map_len = h.data_off;
		s->hdr = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE,
			      cfg->readonly ? MAP_PRIVATE : MAP_SHARED, s->fd, 0);
		if (s->hdr == MAP_FAILED) {
			rc = -errno;
			s->hdr = NULL;
			goto fail;
		}
		s->blocks = (struct sim_block *)((uint8_t *)s->hdr + 4096);
		s->dev.geo = h.geo;
		if (h.version == 1 && !cfg->readonly) {
			/* upgrade: checksum every entry */
			uint32_t n = nand_blocks(&h.geo);
			for (uint32_t b = 0; b < n; b++)
				blk_store(s, b, s->blocks[b]);
			s->hdr->version = SIM_VERSION;
			s->hdr->seed = 0; /* version 1 images were drawn with seed 0 */
			header_seal(s);
			if (msync(s->hdr, s->map_len, MS_SYNC) < 0 || fsync(s->fd) < 0) {
				rc = -errno;
				seterr(err, errlen, "cannot upgrade %s: %s", cfg->path, strerror(-rc));
				goto fail;
			}
			sim_log(s, NAND_LOG_INFO, "%s: upgraded the image to version %d (checksummed block table)",
				cfg->path, SIM_VERSION);
		}
	}
	s->data_off = s->hdr->data_off;
	s->slot_size = s->hdr->slot_size;
	/* the pages are mapped shared: reads and programs are memory copies,
	 * and land in the page cache at once (a killed process loses nothing) */
	s->ram_len = (size_t)(nand_pages(&s->dev.geo) * s->slot_size);
	s->ram = mmap(NULL, s->ram_len, PROT_READ | (cfg->readonly ? 0 : PROT_WRITE), MAP_SHARED,
		      s->fd, (off_t)s->data_off);
	if (s->ram == MAP_FAILED) {
		rc = -errno;
		s->ram = NULL;
		seterr(err, errlen, "cannot map NAND image %s: %s", cfg->path, strerror(-rc));
		goto fail;
	}
	/* a NAND read touches one slot: a fault on an image page that is not in
	 * the page cache reads that page, not the disk's read-around window
	 * (read_ahead_kb, 8 MiB on a virtio disk here: a restart's first-page
	 * scan of ~88k blocks read ~15 GB at 1.7 GB/s for 9 s); sim_prefetch
	 * still asks for exactly the pages a batch of reads will touch */
	(void)madvise(s->ram, s->ram_len, MADV_RANDOM);
	if (s->hdr->version >= 2) {
		rc = table_check(s, p, cfg->path);
		if (rc) {
			seterr(err, errlen, "checking the block table of %s: %s", cfg->path, strerror(-rc));
			goto fail;
		}
	}

opened:
	s->dev.ops = s->timing ? &sim_ops : &sim_ops_untimed;
	s->dev.caps = NAND_CAP_SIM | NAND_CAP_TEMPERATURE | NAND_CAP_ERASE_COUNTS |
		      (s->timing ? 0 : NAND_CAP_READ_NOW);
	s->dev.event_fd = -1; /* completions are due at known times */
	s->dev.priv = s;
	snprintf(s->dev.preset, sizeof s->dev.preset, "%s", s->hdr->preset);
	s->dev.rated_pe_cycles = s->hdr->rated_pe_cycles;
	s->tm = s->hdr->timing;
	s->dies = calloc(nand_dies(&s->dev.geo), sizeof *s->dies);
	s->chans = calloc(s->dev.geo.channels, sizeof *s->chans);
	s->events = calloc(nand_dies(&s->dev.geo), sizeof *s->events);
	if (s->fd >= 0 && (s->ff_spare = malloc(s->dev.geo.spare_size ? s->dev.geo.spare_size : 1)))
		memset(s->ff_spare, 0xFF, s->dev.geo.spare_size);
	if (s->fd >= 0 && !s->metadata_only &&
	    (s->backed = calloc(nand_blocks(&s->dev.geo), sizeof *s->backed))) {
		/* what is below each block's write pointer is in the file (a
		 * torn page never was) */
		for (uint32_t b = 0; b < nand_blocks(&s->dev.geo); b++) {
			uint32_t w = s->blocks[b].wp;
			if (s->blocks[b].torn_page != SIM_NO_PAGE && s->blocks[b].torn_page < w)
				w = s->blocks[b].torn_page;
			s->backed[b] = (uint16_t)w;
		}
	}
	if (!s->dies || !s->chans || !s->events || (s->fd >= 0 && !s->ff_spare) ||
	    (s->fd >= 0 && !s->metadata_only && !s->backed)) {
		rc = -ENOMEM;
		goto fail;
	}
	timing_reset(s);
	/* the card's ECC, error model and thermal model: the preset's, or for an
	 * image of an unknown preset the stock MLC card's */
	const struct nand_preset *rp = p ? p : nand_preset_find("iodimm-mlc-320");
	s->rel = rp->rel;
	s->th = rp->thermal;
	s->dev.ecc_bits = s->rel.ecc_bits;
	s->dev.ecc_codeword_bytes = s->rel.ecc_codeword_bytes;
	{
		const struct nand_geometry *g = &s->dev.geo;
		uint32_t cwb = s->rel.ecc_codeword_bytes ? s->rel.ecc_codeword_bytes : g->page_size;
		s->em_ncw = g->page_size / cwb ? g->page_size / cwb : 1;
		if (s->em_ncw > SIM_EM_MAX_CW)
			s->em_ncw = SIM_EM_MAX_CW;
		s->em_page_bits = 8.0 * (g->page_size + g->spare_size);
		uint64_t x = xfer_ns(s, g->page_size + g->spare_size);
		s->th_cost[NAND_OP_READ] = s->tm.read_us * 1000ull + x;
		s->th_cost[NAND_OP_PROGRAM] = s->tm.program_us * 1000ull + x;
		s->th_cost[NAND_OP_ERASE] = s->tm.erase_us * 1000ull;
	}
	s->em_rng = (cfg->seed ? cfg->seed : 0x853c49e6748fea9bull) ^ 0xD1B54A32D192ED03ull;
	if (!s->em_rng)
		s->em_rng = 1;
	s->th_ambient = cfg->ambient_mc ? cfg->ambient_mc : SIM_TH_AMBIENT_MC;
	s->th_temp = s->th_ambient + s->th.idle_rise_mc; /* idle, settled */
	s->th_t = sim_now(&s->dev);
	bool em = cfg->error_model;
	const char *env = getenv("FLASHD_SIM_ERROR_MODEL");
	if (env && *env)
		em = strcmp(env, "0") != 0;
	if (em && (rc = em_enable(s)) < 0)
		goto fail;
	free(target);
	*out = &s->dev;
	return 0;

fail:
	if (tmp)
		unlink(tmp); /* a creation that failed leaves nothing (locked: ours) */
	free(tmp);
	free(target);
	if (s->ram && s->fd >= 0)
		munmap(s->ram, s->ram_len);
	if (s->hdr && s->fd >= 0)
		munmap(s->hdr, s->map_len);
	if (s->fd >= 0)
		close(s->fd);
	free(s->dies);
	free(s->chans);
	free(s->events);
	free(s->ff_spare);
	free(s->backed);
	free(s);
	return rc;
}

/* ---- fault injection --------------------------------------------------- */

int nand_sim_set_faults(struct nand_dev *d, const struct nand_sim_faults *f)
{
	if (!nand_is_sim(d))
		return -EOPNOTSUPP;
	struct sim *s = to_sim(d);
	s->cut_at = f->power_cut_after ? s->ops_executed + f->power_cut_after : 0;
	s->corrected_ppm = f->corrected_ppm;
	s->uncorrectable_ppm = f->uncorrectable_ppm;
	s->submits = 0;
	s->refuse_at = f->refuse_submit_after;
	s->io_error_from = f->io_error_after ? s->programs + f->io_error_after : 0;
	return 0;
}

int nand_sim_set_error_rates(struct nand_dev *d, uint32_t corrected_ppm, uint32_t uncorrectable_ppm)
{
	if (!nand_is_sim(d))
		return -EOPNOTSUPP;
	struct sim *s = to_sim(d);
	s->corrected_ppm = corrected_ppm;
	s->uncorrectable_ppm = uncorrectable_ppm;
	return 0;
}

bool nand_sim_powered(const struct nand_dev *d)
{
	return !((const struct sim *)d)->dead;
}

void nand_sim_power_on(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	/* the queued completions belong to the world before the cut */
	s->fifo_head = s->fifo_tail = NULL;
	nand_abandon_all(d);
	s->dead = false;
	s->cut_at = 0;
	timing_reset(s);
}

uint64_t nand_sim_op_count(const struct nand_dev *d)
{
	return ((const struct sim *)d)->ops_executed;
}

int nand_sim_fail_block(struct nand_dev *d, uint32_t block, bool fail_program, bool fail_erase)
{
	if (!nand_is_sim(d) || block >= nand_blocks(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	struct sim_block b = s->blocks[block];
	if (fail_program)
		b.flags |= SB_FAIL_PROGRAM;
	if (fail_erase)
		b.flags |= SB_FAIL_ERASE;
	blk_store(s, block, b);
	return 0;
}

int nand_sim_page_error(struct nand_dev *d, uint64_t ppa, enum nand_status st)
{
	if (!nand_is_sim(d) || ppa >= nand_pages(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	for (size_t i = 0; i < s->perr_len; i++)
		if (s->perr[i].ppa == ppa) {
			s->perr[i].st = st;
			return 0;
		}
	if (s->perr_len == s->perr_cap) {
		size_t cap = s->perr_cap ? s->perr_cap * 2 : 16;
		struct page_err *p = realloc(s->perr, cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		s->perr = p;
		s->perr_cap = cap;
	}
	s->perr[s->perr_len++] = (struct page_err){ ppa, st };
	return 0;
}

int nand_sim_flip_bytes(struct nand_dev *d, uint64_t ppa, uint32_t offset, uint32_t nbytes)
{
	if (!nand_is_sim(d) || ppa >= nand_pages(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	const struct nand_geometry *g = &d->geo;
	uint32_t block = (uint32_t)(ppa / g->pages_per_block);
	if (s->readonly || s->metadata_only || ppa % g->pages_per_block >= s->blocks[block].wp ||
	    offset > s->slot_size || nbytes > s->slot_size - offset)
		return -EINVAL;
	uint8_t *p = ram_slot(s, ppa) + offset;
	for (uint32_t i = 0; i < nbytes; i++)
		p[i] ^= 0xFF;
	return 0;
}

int nand_sim_fail_die(struct nand_dev *d, uint32_t die)
{
	if (!nand_is_sim(d) || die >= nand_dies(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	s->hdr->die_failed[die / 8] |= (uint8_t)(1u << (die % 8));
	if (s->fd >= 0)
		header_seal(s);
	return 0;
}

void nand_sim_set_timing(struct nand_dev *d, bool on)
{
	to_sim(d)->timing = on;
}

uint64_t nand_sim_die_busy_ns(const struct nand_dev *d)
{
	return nand_is_sim(d) ? ((const struct sim *)d)->busy_ns : 0;
}

uint32_t nand_sim_table_repairs(const struct nand_dev *d)
{
	return nand_is_sim(d) ? ((const struct sim *)d)->table_repairs : 0;
}

/* ---- error model and thermal model: control ------------------------------ */

int nand_sim_set_error_model(struct nand_dev *d, bool on)
{
	if (!nand_is_sim(d))
		return -EINVAL;
	struct sim *s = to_sim(d);
	if (on && !s->em)
		return em_enable(s);
	if (!on) {
		free(s->em);
		s->em = NULL;
	}
	return 0;
}

int nand_sim_set_erase_count(struct nand_dev *d, uint32_t block, uint32_t count)
{
	if (!nand_is_sim(d) || block >= nand_blocks(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	if (s->readonly)
		return -EROFS;
	struct sim_block b = s->blocks[block];
	b.erase_count = count;
	blk_store(s, block, b);
	if (s->em)
		em_rates(s, block);
	return 0;
}

int nand_sim_age(struct nand_dev *d, uint64_t ns)
{
	if (!nand_is_sim(d) || !to_sim(d)->em)
		return -EINVAL;
	to_sim(d)->em_age_ns += ns;
	return 0;
}

double nand_sim_page_rber(struct nand_dev *d, uint64_t ppa)
{
	if (!nand_is_sim(d) || !to_sim(d)->em || ppa >= nand_pages(&d->geo))
		return -1;
	struct sim *s = to_sim(d);
	uint32_t b = (uint32_t)(ppa / d->geo.pages_per_block), pg = (uint32_t)(ppa % d->geo.pages_per_block);
	uint32_t wp = s->blocks[b].wp;
	if (pg >= wp)
		return 0;
	return em_rber(s, b, pg, wp, em_now(s));
}

void nand_sim_error_stats(const struct nand_dev *d, struct nand_sim_error_stats *st)
{
	if (nand_is_sim(d))
		*st = ((const struct sim *)d)->em_st;
	else
		memset(st, 0, sizeof *st);
}

void nand_sim_set_ambient_mc(struct nand_dev *d, int32_t mc)
{
	if (!nand_is_sim(d))
		return;
	struct sim *s = to_sim(d);
	th_step(s, sim_now(d)); /* the past at the old ambient */
	s->th_ambient = mc;
}

void nand_sim_set_temperature_mc(struct nand_dev *d, int32_t mc)
{
	if (!nand_is_sim(d))
		return;
	struct sim *s = to_sim(d);
	th_step(s, sim_now(d));
	s->th_temp = mc;
}

/* The backend table's entry (hw/nand.c): the simulator with the spec's
 * settings, the rest at their defaults. */
int nand_sim_open_spec(const struct nand_spec *spec, struct nand_dev **out, char *err,
		       size_t errlen)
{
	struct nand_sim_config cfg = { .preset = spec->preset, .path = spec->path,
				       .create = spec->create, .readonly = spec->readonly,
				       .timing = spec->timing, .sync_on_flush = spec->sync_on_flush,
				       .seed = spec->seed, .log = spec->log, .log_arg = spec->log_arg };
	return nand_sim_open(&cfg, out, err, errlen);
}
