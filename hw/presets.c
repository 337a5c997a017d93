/*
 * hw/presets.c - geometry, timing and endurance of the ioDimms flashd knows.
 *
 * iodimm-mlc-320 is one ioDimm of the 640 GB ioDrive Duo: 25 channels of
 * Samsung K9MDG08U5M packages (4 dies of K9LBG08U0M each), 4 KiB + 128 B
 * pages, 128 pages per block, 8192 blocks per die: 400 GiB raw.  Timing
 * figures are the datasheet-era typicals quoted in the brief (unverified).
 * The test-* presets are small devices for tests and studies.
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
