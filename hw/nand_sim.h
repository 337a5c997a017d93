/*
 * hw/nand_sim.h - the simulated ioDimm: presets, opening an image with every
 * setting, and the controls only the simulator has (fault injection, timing,
 * error and thermal models).
 *
 * Internal to hw/ in spirit: the FTL and the server reach a device through
 * hw/nand.h.  They include this header only for what exists on the
 * simulator alone - the presets that describe simulated devices, and the
 * controls below, used only on a device with NAND_CAP_SIM.
 */
#ifndef FLASHD_HW_NAND_SIM_H
#define FLASHD_HW_NAND_SIM_H

#include "hw/nand.h"

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
	 * for timing studies of full-size devices, meta_spare_bytes + 4 bytes
	 * per page (per chunk) instead of 4 KiB.  What is read back is not
	 * what was written, except for pages programmed with NAND_OPF_META,
	 * which are kept whole (less the run of their last byte at the end).
	 * meta_chunk_bytes (0: the page): the page is kept in chunks of that
	 * many data bytes, each with a CRC and the first meta_spare_bytes of
	 * its share of the spare (an FTL's 4 KiB units in a larger page). */
	bool metadata_only;
	uint32_t meta_spare_bytes;
	uint32_t meta_chunk_bytes;
	/* RAM, or an image being created (it keeps its geometry): blocks per
	 * die instead of the preset's (0: the preset's), for scaled-down
	 * studies and tests with the preset's dies, pages and timing */
	uint32_t blocks_per_die;
	nand_log_fn log;           /* what it noticed (NULL: none) */
	void *log_arg;
	/* The error model of the preset (struct nand_reliability): bit errors
	 * growing with wear, retention time and read disturb, ECC up to a
	 * threshold, grown bad blocks past the rated P/E.  Off by default (the
	 * media then have no errors but the injected ones).  The
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
/* Is d the simulator (NAND_CAP_SIM)?  Every nand_sim_* control below
 * refuses (-EOPNOTSUPP, -EINVAL or nothing) any other device. */
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
