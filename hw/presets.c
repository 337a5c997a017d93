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
 * timings.
 */
#include <string.h>

#include "hw/nand.h"

static const struct nand_preset presets[] = {
	{
		.name = "iodimm-mlc-320",
		.description = "ioDrive Duo 640GB ioDimm: 400 GiB MLC, 25 channels x 4 dies",
		.geo = { .channels = 25, .dies_per_channel = 4, .planes_per_die = 2,
			 .blocks_per_die = 8192, .pages_per_block = 128,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 5000,
		.factory_bad_ppm = 2000,
	},
	{
		.name = "iodimm-slc-160",
		.description = "ioDrive 160GB SLC ioDimm: 200 GiB SLC, 25 channels x 4 dies",
		.geo = { .channels = 25, .dies_per_channel = 4, .planes_per_die = 2,
			 .blocks_per_die = 8192, .pages_per_block = 64,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 25, .program_us = 250, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 100000,
		.factory_bad_ppm = 1000,
	},
	{
		.name = "test-1g",
		.description = "test device: 1 GiB raw MLC, 4 channels x 2 dies, 2048 blocks",
		.geo = { .channels = 4, .dies_per_channel = 2, .planes_per_die = 1,
			 .blocks_per_die = 256, .pages_per_block = 128,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 5000,
		.factory_bad_ppm = 0,
	},
	{
		.name = "test-4g",
		.description = "test device: 4 GiB raw MLC, 8 channels x 2 dies, 8192 blocks",
		.geo = { .channels = 8, .dies_per_channel = 2, .planes_per_die = 1,
			 .blocks_per_die = 512, .pages_per_block = 128,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 5000,
		.factory_bad_ppm = 0,
	},
	{
		.name = "test-64m",
		.description = "test device: 64 MiB raw, 2 channels x 2 dies, 256 blocks of 64 pages",
		.geo = { .channels = 2, .dies_per_channel = 2, .planes_per_die = 1,
			 .blocks_per_die = 64, .pages_per_block = 64,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 5000,
		.factory_bad_ppm = 0,
	},
	{
		.name = "test-64m-bad",
		.description = "test device: as test-64m with 3% factory bad blocks",
		.geo = { .channels = 2, .dies_per_channel = 2, .planes_per_die = 1,
			 .blocks_per_die = 64, .pages_per_block = 64,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 5000,
		.factory_bad_ppm = 30000,
	},
	{
		.name = "test-16m",
		.description = "test device: 16 MiB raw, 1 channel x 2 dies, 128 blocks of 32 pages",
		.geo = { .channels = 1, .dies_per_channel = 2, .planes_per_die = 1,
			 .blocks_per_die = 64, .pages_per_block = 32,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 1500, .xfer_mbps = 40 },
		.rated_pe_cycles = 5000,
		.factory_bad_ppm = 0,
	},
	{
		.name = "test-128m-512p",
		.description = "test device: 128 MiB raw, 1 die, 64 blocks of 512 pages (large blocks)",
		.geo = { .channels = 1, .dies_per_channel = 1, .planes_per_die = 1,
			 .blocks_per_die = 64, .pages_per_block = 512,
			 .page_size = 4096, .spare_size = 128 },
		.timing = { .read_us = 60, .program_us = 800, .erase_us = 3000, .xfer_mbps = 40 },
		.rated_pe_cycles = 3000,
		.factory_bad_ppm = 0,
	},
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

const char *nand_status_name(enum nand_status st)
{
	switch (st) {
	case NAND_OK: return "ok";
	case NAND_CORRECTED: return "corrected";
	case NAND_UNCORRECTABLE: return "uncorrectable";
	case NAND_PROGRAM_FAILED: return "program-failed";
	case NAND_ERASE_FAILED: return "erase-failed";
	case NAND_BLOCK_BAD: return "block-bad";
	case NAND_POWER_LOSS: return "power-loss";
	case NAND_INVALID: return "invalid";
	case NAND_IO_ERROR: return "image-io-error";
	}
	return "?";
}
