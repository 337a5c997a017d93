/*
 * hw/nand.c - the generic NAND layer: the backend table, opening and
 * closing a device, the simulator's preset names, status names and the
 * clock.  (The in-flight count is
 * kept by nand_submit in hw/nand.h and nand_deliver in hw/nand_backend.h.)
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hw/nand_backend.h"
#include "hw/nand_sim.h" /* the presets */

static const struct nand_backend backends[] = {
	{ "sim", nand_sim_open_spec },
	{ "mtd", nand_mtd_open },
};

int nand_open(const struct nand_spec *spec, struct nand_dev **out, char *err, size_t errlen)
{
	const char *name = spec->backend && spec->backend[0] ? spec->backend : "sim";
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (!strcmp(backends[i].name, name))
			return backends[i].open(spec, out, err, errlen);
	if (err && errlen)
		snprintf(err, errlen, "unknown NAND backend '%s' (known: sim, mtd)", name);
	return -ENOENT;
}

const char *nand_backend_name(const struct nand_dev *d)
{
	return d->ops->name;
}

void nand_close(struct nand_dev *d)
{
	if (d)
		d->ops->close(d);
}

const char *nand_preset_name(size_t i)
{
	const struct nand_preset *p = nand_preset_at(i);
	return p ? p->name : NULL;
}

const char *nand_preset_description(const char *name)
{
	const struct nand_preset *p = name ? nand_preset_find(name) : NULL;
	return p ? p->description : NULL;
}

uint64_t nand_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
	case NAND_IO_ERROR: return "backend-io-error";
	}
	return "?";
}
