/*
 * hw/presets.c - geometry, timing and endurance of the ioDimms flashd knows.
 *
 * iodimm-mlc-320 is one ioDimm of the 640 GB ioDrive Duo.  Where each
 * number comes from (brief.md section 1 unless said):
 *   channels 25          25 NAND channels, one package per channel
 *   dies_per_channel 4   Samsung K9MDG08U5M packages: 4 dies (K9LBG08U0M)
 *   blocks_per_die 8192  16 GB per package / 4 dies / 512 KiB blocks:
 *                        400 GiB raw, as the brief's 400 GB raw NAND
 *   pages 128 x 4 KiB + 128 B spare   the K9LBG08U0M page and block
 *   planes_per_die 2     the die's two planes; not modelled in the timing
 *                        (the sequential figures are met without it)
 *   read 60 us, program 800 us, erase 1.5 ms   the brief's MLC typicals of
 *                        the era (unverified); they give the card's
 *                        reviewed throughput (brief: program bound 512
 *                        MB/s, channel bound 1 GB/s per ioDimm)
 *   xfer 40 MB/s         per channel: the brief's channel bound (25 x 40)
 *   rated P/E 5000       the low end of the brief's 5-10k for MLC
 *   factory bad 2000 ppm an assumption (datasheets of the era allow up to
 *                        ~2 % bad blocks at shipment; 0.2 % is typical),
 *                        not a measured figure
 * iodimm-slc-160 (ioDrive 160 GB SLC) uses the brief's SLC typicals (25 /
 * 250 / 1500 us, 100k P/E) on the same array with 64-page blocks.
 * The test-* presets are small devices for tests and studies, with the MLC
 * timings.  mlc-16k is a later, denser MLC generation with 16 KiB pages
 * (four FTL units: ftl/upage.c): 4 MiB blocks, read 80 us, program 1.3 ms,
 * erase 5 ms, 200 MB/s channels, 3000 P/E - figures typical of that
 * generation's parts (assumed, not one datasheet's); of the page's ~1.2 KiB
 * of OOB, the ECC leaves the FTL 256 bytes (64 a unit; an assumption).
 *
 * Error model (struct nand_reliability in hw/nand.h; used only when the
 * simulator's error model is turned on).  Sources, and what is assumed:
 *   - Form: RBER rises steeply with P/E cycles, and with data age and read
 *     count as power laws whose factors grow with cycles (Mielke et al.,
 *     "Bit Error Rate in NAND Flash Memories", IRPS 2008: write, retention
 *     and read-disturb errors all contribute, UBER is a strong function of
 *     cycling and retention time; Hetzler, "The error rate surface for MLC
 *     NAND flash", 2012, fits E = h(C) A^k R^g + offset(C) on 3x-nm MLC).
 *     Here: wear as a power law of w = erases / rated, retention and read
 *     disturb linear in age and reads (exponents 1: an assumption that also
 *     keeps pow() off the read path) with factors growing with wear.
 *   - rber_fresh 1e-8, rber_rated 1e-4: the brief's typical RBER of MLC of
 *     2009-2012, fresh and at rated P/E.  wear_exp 2: assumed (power-law
 *     growth, exponent not measured here).
 *   - rber_ret_year 1.1e-3: calibrated so that a block at rated P/E holds
 *     its data one year at UBER ~1e-16 (RBER 1.2e-3 with the wear term),
 *     the point where this ECC runs out: MLC of the era is specified as 1
 *     year retention at rated P/E (Hetzler's 3x-nm parts: 1 year at 3,000
 *     cycles, UBER 1e-15).  Two years at rated P/E (RBER 2.3e-3) makes about
 *     one codeword in 10^6 uncorrectable, and at twice rated P/E a few
 *     months do.  ret_fresh 0.05: a fresh block keeps data ~10 years at
 *     low error counts (the "10 years retention" of datasheets; assumed).
 *   - rber_read 3e-10 per read of the block, read_wear 10: MLC read disturb
 *     of about 1 bit error per 10^5 reads of a page (M-Systems, "Implementing
 *     MLC NAND flash": "on the order of 1 bit error per approximately 10^5
 *     repetitive reads"), 1 bit in a 33,792-bit page per 10^5 reads is
 *     ~3e-10 per bit per read; read disturb grows with wear (Cai et al.,
 *     "Read Disturb Errors in MLC NAND Flash Memory", DSN 2015), taken as
 *     10x at rated P/E (assumed).  So 10^5 reads of a block at rated P/E
 *     add 3e-4, 4x10^5 bring it near the ECC limit.
 *   - ECC 40 bits per 1 KiB codeword (the spare bytes shared out): an
 *     assumption from the brief, not the ioDrive's published figure;
 *     comparable to the 3x-nm MLC practice of BCH-15 per 512-byte sector.
 *   - Grown bad blocks: a block fails in a P/E cycle with probability
 *     4.7e-6 * exp(5 (w - 1)): about 0.5 % of blocks fail before rated P/E,
 *     half of them by twice rated (assumed, to give "worn out" a shape;
 *     datasheets of the era guarantee ~98 % valid blocks over the rated
 *     endurance).
 * SLC (iodimm-slc-160): RBER 1e-9 fresh, 1e-6 at rated 100k P/E, retention
 * and read disturb 10x lower than MLC: assumed (SLC is about an order of
 * magnitude more robust in the sources above), same controller ECC.
 *
 * Thermal model (struct nand_thermal): idle 10 C over ambient, +35 C at
 * all dies busy, time constant 60 s: assumed, so that the stock card at
 * full load in a 25 C room settles at 70 C, under the vendor's 78 C write
 * throttle, and reaches it from about 33 C ambient up (the throttle at
 * 78 C and the stop at 85 C are the vendor's; the rest is not measured).
 */
#include <string.h>

#include "hw/nand_sim.h"

/* the error model (struct nand_reliability) with the ECC and grown bad
 * block figures above; FRESH and RATED: RBER fresh and at rated P/E,
 * RET_YEAR: retention's per year, READ: read disturb's per read */
#define RELIABILITY(fresh, rated, ret_year, read)                                 \
	{ .rber_fresh = fresh, .rber_rated = rated, .wear_exp = 2,                \
	  .rber_ret_year = ret_year, .ret_fresh = 0.05,                           \
	  .rber_read = read, .read_wear = 10,                                     \
	  .ecc_bits = 40, .ecc_codeword_bytes = 1024,                             \
	  .fail_rated = 4.7e-6, .fail_growth = 5 }
#define MLC_2009_RELIABILITY RELIABILITY(1e-8, 1e-4, 1.1e-3, 3e-10)
#define SLC_2009_RELIABILITY RELIABILITY(1e-9, 1e-6, 1.1e-4, 3e-11)
#define IODIMM_THERMAL { .idle_rise_mc = 10000, .busy_rise_mc = 35000, .tau_ms = 60000 }

/* CH channels x DIES dies of PLANES planes, BLOCKS blocks a die of PAGES
 * pages of 4 KiB + 128 B spare */
#define GEO(ch, dies, planes, blocks, pages)                                       \
	{ .channels = ch, .dies_per_channel = dies, .planes_per_die = planes,      \
	  .blocks_per_die = blocks, .pages_per_block = pages,                      \
	  .page_size = 4096, .spare_size = 128 }
#define TIMING(read, program, erase)                                               \
	{ .read_us = read, .program_us = program, .erase_us = erase, .xfer_mbps = 40 }

/* an MLC device: the MLC timings but ERASE_US, RATED P/E cycles, BAD_PPM
 * factory bad blocks, the MLC error model and the ioDimm's thermal model;
 * the geometry last (GEO) */
#define MLC(name_, description_, erase_us, rated, bad_ppm, ...)                   \
	{ .name = name_, .description = description_, .geo = __VA_ARGS__,         \
	  .timing = TIMING(60, 800, erase_us), .rated_pe_cycles = rated,           \
	  .factory_bad_ppm = bad_ppm, .rel = MLC_2009_RELIABILITY,                 \
	  .thermal = IODIMM_THERMAL }
/* a test device: iodimm-mlc-320's timings and endurance, BAD_PPM factory
 * bad blocks */
#define TEST_MLC(name_, description_, bad_ppm, ...)                               \
	MLC(name_, description_, 1500, 5000, bad_ppm, __VA_ARGS__)
#define TEST_64M_GEO GEO(2, 2, 1, 64, 64)

static const struct nand_preset presets[] = {
	MLC("iodimm-mlc-320", "ioDrive Duo 640GB ioDimm: 400 GiB MLC, 25 channels x 4 dies",
	    1500, 5000, 2000, GEO(25, 4, 2, 8192, 128)),
	{
		.name = "iodimm-slc-160",
		.description = "ioDrive 160GB SLC ioDimm: 200 GiB SLC, 25 channels x 4 dies",
		.geo = GEO(25, 4, 2, 8192, 64),
		.timing = TIMING(25, 250, 1500),
		.rated_pe_cycles = 100000,
		.factory_bad_ppm = 1000,
		.rel = SLC_2009_RELIABILITY,
		.thermal = IODIMM_THERMAL,
	},
	TEST_MLC("test-1g", "test device: 1 GiB raw MLC, 4 channels x 2 dies, 2048 blocks",
		 0, GEO(4, 2, 1, 256, 128)),
	TEST_MLC("test-4g", "test device: 4 GiB raw MLC, 8 channels x 2 dies, 8192 blocks",
		 0, GEO(8, 2, 1, 512, 128)),
	TEST_MLC("test-64m", "test device: 64 MiB raw, 2 channels x 2 dies, 256 blocks of 64 pages",
		 0, TEST_64M_GEO),
	TEST_MLC("test-64m-bad", "test device: as test-64m with 3% factory bad blocks",
		 30000, TEST_64M_GEO),
	TEST_MLC("test-16m", "test device: 16 MiB raw, 1 channel x 2 dies, 128 blocks of 32 pages",
		 0, GEO(1, 2, 1, 64, 32)),
	MLC("test-128m-512p", "test device: 128 MiB raw, 1 die, 64 blocks of 512 pages (large blocks)",
	    3000, 3000, 0, GEO(1, 1, 1, 64, 512)),
	/* pages of several FTL units (ftl/upage.c) */
	{
		.name = "mlc-16k",
		.description = "16 KiB-page MLC: 32 GiB raw, 4 channels x 4 dies, 4 MiB blocks",
		.geo = { .channels = 4, .dies_per_channel = 4, .planes_per_die = 2,
			 .blocks_per_die = 512, .pages_per_block = 256,
			 .page_size = 16384, .spare_size = 256 },
		.timing = { .read_us = 80, .program_us = 1300, .erase_us = 5000, .xfer_mbps = 200 },
		.rated_pe_cycles = 3000,
		.factory_bad_ppm = 2000,
		.rel = MLC_2009_RELIABILITY,
		.thermal = IODIMM_THERMAL,
	},
	TEST_MLC("test-8k", "test device: 128 MiB raw, 2 channels x 2 dies, 8 KiB pages", 0,
		 { .channels = 2, .dies_per_channel = 2, .planes_per_die = 1, .blocks_per_die = 64,
		   .pages_per_block = 64, .page_size = 8192, .spare_size = 128 }),
	TEST_MLC("test-16k", "test device: 128 MiB raw, 2 channels x 2 dies, 16 KiB pages", 0,
		 { .channels = 2, .dies_per_channel = 2, .planes_per_die = 1, .blocks_per_die = 64,
		   .pages_per_block = 32, .page_size = 16384, .spare_size = 256 }),
};

const struct nand_preset *nand_preset_find(const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].name, name) == 0)
			return &presets[i];
	return NULL;
}

const struct nand_preset *nand_preset_at(size_t i)
{
	return i < sizeof presets / sizeof presets[0] ? &presets[i] : NULL;
}
