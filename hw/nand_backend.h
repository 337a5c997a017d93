/*
 * hw/nand_backend.h - what a NAND backend implements, and the generic
 * layer's helpers for it (internal to hw/; the FTL and the server see
 * hw/nand.h only).
 *
 * Adding a backend NAME:
 *   1. hw/nand_NAME.c: a struct nand_ops (every operation without "Optional"
 *      or a capability in hw/nand.h), and nand_NAME_open() below, which
 *      fills the struct nand_dev it returns: ops, geo, preset (what the
 *      device is), caps, event_fd (-1, or an eventfd it writes when a
 *      completion is ready), ecc_bits / ecc_codeword_bytes if known,
 *      rated_pe_cycles if known.
 *   2. One line in the table in hw/nand.c (the name `backend =` takes).
 *   3. poll hands each completion over with nand_deliver() (it keeps the
 *      in-flight count); completions made on other threads wait in the
 *      backend until poll, so op->done always runs on the owner's thread.
 *   4. Keep the NAND rules of hw/nand.h whatever the medium lets through;
 *      tests/unit/t_nand_conformance.c checks them (FLASHD_TEST_NAND names a
 *      device of the new backend to check).
 */
#ifndef FLASHD_HW_NAND_BACKEND_H
#define FLASHD_HW_NAND_BACKEND_H

#include "hw/nand.h"

/* One entry of the backend table. */
struct nand_backend {
	const char *name;
	int (*open)(const struct nand_spec *spec, struct nand_dev **out, char *err, size_t errlen);
};

int nand_sim_open_spec(const struct nand_spec *spec, struct nand_dev **out, char *err,
		       size_t errlen);
int nand_mtd_open(const struct nand_spec *spec, struct nand_dev **out, char *err, size_t errlen);

/*
 * The mtd backend's spare in the free OOB bytes (hw/nand_mtd.c; here for
 * tests): len spare bytes, then their CRC32C.  unpack: the spare read back
 * (oob: len + 4 bytes, may be changed) into spare: 0 as written, 1 one bit
 * corrected, -1 not trustworthy; erased (every byte 0xFF, or all but one
 * bit) reads as erased.
 */
void nand_mtd_spare_pack(uint8_t *oob, const void *spare, uint32_t len);
int nand_mtd_spare_unpack(uint8_t *oob, void *spare, uint32_t len);

/*
 * Does a page read raw (page_size data bytes, then oobsize OOB bytes) read
 * erased: at most strength bits off 0xFF in each ECC step of step data
 * bytes with its share of the OOB (hw/nand_mtd.c; here for tests)?  1 or 0.
 */
int nand_mtd_raw_erased(const uint8_t *raw, uint32_t page_size, uint32_t oobsize, uint32_t step,
			uint32_t strength);

/*
 * A MEMREAD's result (0 or -errno) as the read's status (hw/nand_mtd.c;
 * here for tests): NAND_OK (0, -EUCLEAN), NAND_UNCORRECTABLE (-EBADMSG; and
 * -EIO, the page could not be read), NAND_IO_ERROR (anything else: the
 * device gone, no memory...).
 */
enum nand_status nand_mtd_read_status(int rc);

/*
 * A block's write pointer at open (hw/nand_mtd.c; here for tests), from
 * erased(ctx, page): 1 the page reads erased, 0 programmed, -errno.  Pages
 * are programmed in order, so the programmed ones are a prefix: the last
 * page is read, then a binary search.  A page whose raw read fails with
 * -EIO (no ECC applies to raw reads: the chip failed on that page) counts
 * as programmed and in *unreadable: the write pointer may then stand past
 * erased pages (not programmed until the block is erased again), never
 * before a programmed one, and the FTL sees that page's error when it
 * reads it.  Any other error is returned.
 */
int nand_mtd_block_wp(uint32_t pages_per_block, int (*erased)(void *ctx, uint32_t page), void *ctx,
		      uint32_t *wp, uint32_t *unreadable);

/*
 * The layout of an MTD device (hw/nand_mtd.c; here for tests): from mi
 * (MEMGETINFO: type, page, OOB and erase block sizes) and the device's
 * sysfs directory sysdir (/sys/dev/char/MAJ:MIN: size - 64-bit, where
 * MEMGETINFO's is 32-bit -, oobavail, ecc_strength, ecc_step_size, name).
 * 0, or a negative errno and why in err.
 */
struct mtd_info_user;
struct nand_mtd_layout {
	struct nand_geometry geo;  /* the dies the FTL sees */
	uint64_t size;             /* bytes */
	uint64_t erasesize;
	uint32_t oobsize;          /* all OOB bytes per page */
	uint32_t oobavail;         /* free OOB bytes per page (spare + CRC) */
	uint32_t ecc_strength;     /* bits per ECC step (0: unknown) */
	uint32_t ecc_step;         /* data bytes per ECC step (0: unknown) */
	char name[64];
};
int nand_mtd_layout(const char *sysdir, const struct mtd_info_user *mi,
		    struct nand_mtd_layout *out, char *err, size_t errlen);

/* Hand a completed operation to its owner (from the backend's poll, on the
 * owner's thread). */
static inline void nand_deliver(struct nand_dev *d, struct nand_op *op)
{
	d->inflight--;
	op->done(op);
}

/* Every queued operation was dropped without a completion (the simulator's
 * power cut: they belong to the world before it). */
static inline void nand_abandon_all(struct nand_dev *d)
{
	d->inflight = 0;
}

#endif
