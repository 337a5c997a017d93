/*
 * hw/nand_mtd.c - raw NAND driven by Linux through an MTD character device
 * (/dev/mtdN): the backend "mtd".
 *
 * Geometry.  MEMGETINFO gives the erase block and page sizes; sysfs
 * (/sys/dev/char/MAJ:MIN/) gives the device's size (MEMGETINFO's is 32-bit),
 * the free OOB bytes of the MTD_OPS_AUTO_OOB layout (oobavail), the ECC
 * strength and step, and the device's name.  MTD tells userspace nothing
 * of a chip's LUNs or planes, so the device is cut into MTD_DIES dies of
 * equal erase-block ranges (fewer on a small device: at least
 * MTD_MIN_BLOCKS_PER_DIE blocks each), one die per channel: the FTL stripes
 * its bands and parity across them.  Erase blocks past the last
 * whole die are not used.
 *
 * Spare.  The FTL's spare bytes go into the free OOB bytes followed by their
 * CRC32C (spare_size = oobavail - 4).  The free OOB bytes are not covered by
 * the chip's ECC (Linux's software Hamming and BCH cover the data only), so
 * a bit flip there would come back silently: the CRC finds it, and one
 * flipped bit is corrected by trying each (CRC-32C has a Hamming distance of
 * at least 6 at these lengths: one flip is found uniquely, and up to four
 * are never taken for one).  A spare that is erased but for one bit reads
 * as erased.  Anything worse is NAND_UNCORRECTABLE.  A page programmed
 * without spare leaves its OOB erased.
 *
 * Operations.  One worker thread per die runs that die's operations in
 * submission order - MEMREAD and MEMWRITE with MTD_OPS_AUTO_OOB, MEMERASE64 -
 * so dies work in parallel as far as the driver lets them (one chip takes
 * one operation at a time).  A finished operation goes onto the completion
 * list; the first one on an empty list makes the event fd readable; poll (on
 * the owner's thread) takes the list and reads the event fd, both under the
 * list's lock, so the fd is readable exactly while the list holds
 * something, then delivers in order.  Cost per operation: its ioctl, two
 * mutex round trips and a condition signal; the event fd is written and read
 * once per batch of completions.  No allocation per operation.
 *
 * The NAND rules of hw/nand.h, which the kernel does not keep (Linux 6.1
 * with nandsim: a page programmed twice returns success and reads back the
 * AND of both; programs out of order within a block succeed; MEMWRITE into
 * a block marked bad succeeds), are kept here: per block a write pointer,
 * the next page that may be programmed, owned by the block's die worker; a
 * program anywhere else fails NAND_PROGRAM_FAILED without reaching the chip,
 * and any program consumes its page, failed or not.  At open the write
 * pointer is found by reading: one past the last page that does not read
 * erased (raw: data and every OOB byte 0xFF, up to ecc_strength bits off in
 * each ECC step, with its share of the OOB bytes: an erased MLC page has its
 * bit flips too, and may have more in all than one step corrects), found by
 * bisection, as programs are in order.  A program cut by a power
 * loss on real NAND can leave a page that reads erased and yet holds charge;
 * it is taken as erased (the FTL reads what it programs there).  A block
 * whose erase failed takes no more programs until it is erased.
 *
 * Bad blocks: MEMGETBADBLOCK at open (factory and grown marks alike: MTD does
 * not tell them apart).  Such a block takes no read, program or erase
 * (NAND_BLOCK_BAD), as the simulator's factory-bad blocks.  The backend
 * never marks a block bad itself: the FTL retires a block whose erase
 * failed and keeps its own record (a mark would move the superblock, which
 * the FTL finds on the first good blocks).
 *
 * Read errors.  -EIO from MEMREAD is that page's (NAND_UNCORRECTABLE); an
 * error that says the device or the request failed is NAND_IO_ERROR
 * (nand_mtd_read_status).
 *
 * ECC.  MEMREAD returns -EBADMSG when a step was beyond the ECC
 * (NAND_UNCORRECTABLE) and -EUCLEAN as soon as one bit was corrected,
 * whatever bitflip_threshold says (mtdchar's MEMREAD sets its code from the
 * request's ecc_stats; it is the kernel's own mtd_read_oob() that says
 * -EUCLEAN only from bitflip_threshold on).  The backend goes by the
 * counts, not the code.  A read that corrected bits is
 * NAND_CORRECTED with corrected_bits = ecc_stats.corrected_bitflips and
 * corrected_max = ecc_stats.max_bitflips (the worst step): the FTL compares
 * corrected_max with ecc_bits (= ecc_strength) to decide on relocating.
 *
 * Erase counts: raw NAND keeps none.  They are counted here from 0 at each
 * open, in memory (no NAND_CAP_ERASE_COUNTS).  sync is a no-op: a program
 * or erase is on the chip when its ioctl returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include <mtd/mtd-user.h>

#include "common/crc32c.h"
#include "common/queue.h"
#include "hw/nand_backend.h"

#define MTD_DIES 4
#define MTD_MIN_BLOCKS_PER_DIE 16
#define MTD_SPARE_CRC 4 /* bytes of the spare's CRC32C after it */

struct mtd_die {
	struct mtd *m;
	uint32_t index;
	pthread_t thread;
	bool started;
	pthread_cond_t cv;            /* work queued, or stop */
	struct nand_op *head, *tail;  /* queued, not started (FIFO; under m->qmu) */
	uint8_t *oob;                 /* the worker's free-OOB buffer: oobavail bytes */
};

struct mtd {
	struct nand_dev dev;
	int fd;
	bool readonly;
	uint32_t oobavail;            /* free OOB bytes per page (spare + CRC) */
	uint32_t oobsize;             /* all OOB bytes per page */
	uint32_t blocks_used;         /* whole dies' worth of erase blocks */
	uint64_t erasesize;
	/* per block; wp and erase_failed are owned by the block's die worker
	 * (by open before the workers start) */
	uint16_t *wp;                 /* next page that may be programmed */
	uint8_t *erase_failed;        /* 1: erase failed, no programs until erased */
	uint8_t *bad;                 /* marked bad at open (constant after open) */
	uint32_t *erases;             /* since open; written by the worker, read
				       * by the owner (atomic) */
	struct mtd_die *dies;
	pthread_mutex_t qmu;          /* the dies' queues and stop */
	bool stop;
	pthread_mutex_t cmu;          /* the completion list and the event fd */
	/* the completion list: changed under cmu; done_head is also read
	 * without it (poll and next_due: is anything there?), so it is
	 * stored atomically (release) and loaded so (acquire) */
	struct nand_op *done_head, *done_tail;
};

static struct mtd *to_mtd(struct nand_dev *d)
{
	return (struct mtd *)d;
}

static uint64_t page_offset(const struct mtd *m, uint32_t block, uint32_t page)
{
	return (uint64_t)block * m->erasesize + (uint64_t)page * m->dev.geo.page_size;
}

/* ---- spare: the FTL's bytes, then their CRC32C ----------------------------- */

static uint32_t spare_crc(const uint8_t *spare, uint32_t len)
{
	return crc32c(0, spare, len);
}

void nand_mtd_spare_pack(uint8_t *oob, const void *spare, uint32_t len)
{
	memcpy(oob, spare, len);
	uint32_t crc = spare_crc(oob, len);
	memcpy(oob + len, &crc, sizeof crc);
}

static bool crc_matches(const uint8_t *oob, uint32_t len)
{
	uint32_t crc;
	memcpy(&crc, oob + len, sizeof crc);
	return crc == spare_crc(oob, len);
}

/* Cost: one CRC; on a mismatch up to 8 * (len + 4) more (a bit flip is
 * rare: only then). */
int nand_mtd_spare_unpack(uint8_t *oob, void *spare, uint32_t len)
{
	uint32_t n = len + MTD_SPARE_CRC;
	uint32_t zeros = 0;
	for (uint32_t i = 0; i < n && zeros < 2; i++)
		zeros += (uint32_t)__builtin_popcount((uint8_t)~oob[i]);
	if (zeros < 2) {
		memset(spare, 0xFF, len);
		return (int)zeros;
	}
	int rc = 0;
	if (!crc_matches(oob, len)) {
		rc = -1;
		for (uint32_t bit = 0; bit < 8 * n && rc < 0; bit++) {
			oob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			if (crc_matches(oob, len))
				rc = 1;
			else
				oob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
		if (rc < 0)
			return -1;
	}
	memcpy(spare, oob, len);
	return rc;
}

/* ---- the operations (on the die's worker) ---------------------------------- */

/*
 * A MEMREAD's result (0 or -errno) as the read's status, ECC counts aside
 * (-EUCLEAN is NAND_OK here: the counts say what was corrected).  -EBADMSG:
 * a step was beyond the ECC.  -EIO: the driver could not read this page (a
 * chip or controller error on it): the page is lost as an uncorrectable one
 * is - the FTL rebuilds it from parity or reports its units lost - and the
 * device is not failed for it.  Anything else (the device gone: ENODEV,
 * ENXIO; no memory; a bad request) is the backend failing: NAND_IO_ERROR.
 */
enum nand_status nand_mtd_read_status(int rc)
{
	switch (rc) {
	case 0:
	case -EUCLEAN:
		return NAND_OK;
	case -EBADMSG:
	case -EIO:
		return NAND_UNCORRECTABLE;
	default:
		return NAND_IO_ERROR;
	}
}

static enum nand_status mtd_read(struct mtd *m, struct mtd_die *die, struct nand_op *op)
{
	const struct nand_geometry *g = &m->dev.geo;
	if (!op->data && !op->spare)
		return NAND_OK;
	struct mtd_read_req rq = {
		.start = page_offset(m, op->block, op->page),
		.len = op->data ? g->page_size : 0,
		.ooblen = op->spare ? m->oobavail : 0,
		.usr_data = (uintptr_t)op->data,
		.usr_oob = op->spare ? (uintptr_t)die->oob : 0,
		.mode = MTD_OPS_AUTO_OOB,
	};
	int rc = ioctl(m->fd, MEMREAD, &rq) < 0 ? -errno : 0;
	enum nand_status st = nand_mtd_read_status(rc);
	if (st != NAND_OK) {
		op->err = st == NAND_IO_ERROR ? rc : 0;
		return st;
	}
	if (op->data && (op->flags & NAND_OPF_DATA_CRC))
		op->data_crc = crc32c(0, op->data, g->page_size); /* the kernel copied it */
	uint32_t bits = rq.ecc_stats.corrected_bitflips, worst = rq.ecc_stats.max_bitflips;
	if (op->spare) {
		int s = nand_mtd_spare_unpack(die->oob, op->spare, g->spare_size);
		if (s < 0)
			return NAND_UNCORRECTABLE;
		bits += (uint32_t)s;
		if (s && worst < 1)
			worst = 1;
	}
	if (!bits)
		return NAND_OK;
	op->corrected_bits = (uint16_t)(bits > UINT16_MAX ? UINT16_MAX : bits);
	op->corrected_max = (uint16_t)(worst > UINT16_MAX ? UINT16_MAX : worst ? worst : 1);
	return NAND_CORRECTED;
}

static enum nand_status mtd_program(struct mtd *m, struct mtd_die *die, struct nand_op *op)
{
	const struct nand_geometry *g = &m->dev.geo;
	uint32_t b = op->block;
	if (!op->data || op->page != m->wp[b] || m->erase_failed[b])
		return NAND_PROGRAM_FAILED; /* out of order, twice, or not erased: nothing written */
	m->wp[b] = (uint16_t)(op->page + 1); /* consumed, whatever the chip says */
	if (op->spare)
		nand_mtd_spare_pack(die->oob, op->spare, g->spare_size);
	struct mtd_write_req rq = {
		.start = page_offset(m, b, op->page),
		.len = g->page_size,
		.ooblen = op->spare ? m->oobavail : 0,
		.usr_data = (uintptr_t)op->data,
		.usr_oob = op->spare ? (uintptr_t)die->oob : 0,
		.mode = MTD_OPS_AUTO_OOB,
	};
	int rc = ioctl(m->fd, MEMWRITE, &rq) < 0 ? -errno : 0;
	if (rc == -EIO)
		return NAND_PROGRAM_FAILED; /* the chip reported a failed program */
	if (rc) {
		op->err = rc;
		return NAND_IO_ERROR;
	}
	return NAND_OK;
}

static enum nand_status mtd_erase(struct mtd *m, struct nand_op *op)
{
	uint32_t b = op->block;
	struct erase_info_user64 ei = { .start = (uint64_t)b * m->erasesize, .length = m->erasesize };
	int rc = ioctl(m->fd, MEMERASE64, &ei) < 0 ? -errno : 0;
	if (rc == -EIO) {
		/* what the block holds now is unknown: no programs until an
		 * erase succeeds */
		m->erase_failed[b] = 1;
		m->wp[b] = (uint16_t)m->dev.geo.pages_per_block;
		return NAND_ERASE_FAILED;
	}
	if (rc) {
		op->err = rc;
		return NAND_IO_ERROR;
	}
	m->wp[b] = 0;
	m->erase_failed[b] = 0;
	__atomic_store_n(&m->erases[b], m->erases[b] + 1, __ATOMIC_RELAXED);
	return NAND_OK;
}

static void mtd_execute(struct mtd *m, struct mtd_die *die, struct nand_op *op)
{
	op->err = 0;
	op->corrected_bits = op->corrected_max = 0;
	if (m->bad[op->block]) {
		op->status = NAND_BLOCK_BAD;
		return;
	}
	switch (op->type) {
	case NAND_OP_READ:
		op->status = mtd_read(m, die, op);
		break;
	case NAND_OP_PROGRAM:
		op->status = mtd_program(m, die, op);
		break;
	case NAND_OP_ERASE:
		op->status = mtd_erase(m, op);
		break;
	default:
		op->status = NAND_INVALID;
	}
}

/* A finished op onto the completion list; the event fd goes readable with
 * the list's first entry. */
static void complete(struct mtd *m, struct nand_op *op)
{
	op->next = NULL;
	pthread_mutex_lock(&m->cmu);
	if (m->done_tail) {
		m->done_tail->next = op;
	} else {
		__atomic_store_n(&m->done_head, op, __ATOMIC_RELEASE);
		uint64_t one = 1;
		if (write(m->dev.event_fd, &one, sizeof one) < 0) {
			/* an eventfd write fails only on overflow: it is readable */
		}
	}
	m->done_tail = op;
	pthread_mutex_unlock(&m->cmu);
}

static void *die_main(void *arg)
{
	struct mtd_die *die = arg;
	struct mtd *m = die->m;
	pthread_mutex_lock(&m->qmu);
	for (;;) {
		while (!die->head && !m->stop)
			pthread_cond_wait(&die->cv, &m->qmu);
		if (m->stop)
			break;
		struct nand_op *op = die->head;
		die->head = op->next;
		if (!die->head)
			die->tail = NULL;
		pthread_mutex_unlock(&m->qmu);
		mtd_execute(m, die, op);
		complete(m, op);
		pthread_mutex_lock(&m->qmu);
	}
	pthread_mutex_unlock(&m->qmu);
	return NULL;
}

/* ---- ops --------------------------------------------------------------------- */

static int mtd_submit(struct nand_dev *d, struct nand_op *op)
{
	struct mtd *m = to_mtd(d);
	const struct nand_geometry *g = &d->geo;
	if (op->block >= nand_blocks(g) || op->page >= g->pages_per_block ||
	    (m->readonly && op->type != NAND_OP_READ)) {
		op->status = NAND_INVALID;
		op->err = 0;
		op->corrected_bits = op->corrected_max = 0;
		complete(m, op);
		return 0;
	}
	struct mtd_die *die = &m->dies[nand_block_die(g, op->block)];
	pthread_mutex_lock(&m->qmu);
	QUEUE_APPEND(die->head, die->tail, op, next);
	pthread_cond_signal(&die->cv);
	pthread_mutex_unlock(&m->qmu);
	return 0;
}

static int mtd_poll(struct nand_dev *d, uint64_t now_ns)
{
	struct mtd *m = to_mtd(d);
	if (!__atomic_load_n(&m->done_head, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&m->cmu);
	struct nand_op *op = m->done_head;
	__atomic_store_n(&m->done_head, NULL, __ATOMIC_RELEASE);
	m->done_tail = NULL;
	if (op) {
		uint64_t v;
		if (read(d->event_fd, &v, sizeof v) < 0) {
			/* EAGAIN cannot happen: it was written with the first entry */
		}
	}
	pthread_mutex_unlock(&m->cmu);
	int n = 0;
	while (op) {
		struct nand_op *next = op->next;
		n++;
		nand_deliver(d, op); /* handlers may submit more */
		op = next;
	}
	return n;
}

static uint64_t mtd_next_due(struct nand_dev *d)
{
	/* finished ones are due now; running ones signal the event fd */
	return __atomic_load_n(&to_mtd(d)->done_head, __ATOMIC_ACQUIRE) ? 0 : UINT64_MAX;
}

static int mtd_sync(struct nand_dev *d)
{
	return 0; /* a program or erase is on the chip when its ioctl returns */
}

static uint32_t mtd_erase_count(struct nand_dev *d, uint32_t block)
{
	struct mtd *m = to_mtd(d);
	return block < nand_blocks(&d->geo) ? __atomic_load_n(&m->erases[block], __ATOMIC_RELAXED) : 0;
}

static bool mtd_factory_bad(struct nand_dev *d, uint32_t block)
{
	return block >= nand_blocks(&d->geo) || to_mtd(d)->bad[block];
}

static uint64_t mtd_now(struct nand_dev *d)
{
	return nand_now_ns();
}

/* Until t, or until a completion is ready (the event fd). */
static void mtd_wait_until(struct nand_dev *d, uint64_t t)
{
	if (mtd_next_due(d) == 0)
		return;
	struct pollfd pfd = { .fd = d->event_fd, .events = POLLIN };
	if (t == UINT64_MAX) {
		while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
			;
		return;
	}
	uint64_t now = nand_now_ns();
	if (t <= now)
		return;
	struct timespec ts = { (time_t)((t - now) / 1000000000u), (long)((t - now) % 1000000000u) };
	(void)ppoll(&pfd, 1, &ts, NULL);
}

static void mtd_free(struct mtd *m)
{
	if (m->dies) {
		for (uint32_t i = 0; i < nand_dies(&m->dev.geo); i++) {
			if (m->dies[i].started)
				pthread_cond_destroy(&m->dies[i].cv);
			free(m->dies[i].oob);
		}
	}
	free(m->dies);
	free(m->wp);
	free(m->erase_failed);
	free(m->bad);
	free(m->erases);
	if (m->dev.event_fd >= 0)
		close(m->dev.event_fd);
	if (m->fd >= 0)
		close(m->fd);
	pthread_mutex_destroy(&m->qmu);
	pthread_mutex_destroy(&m->cmu);
	free(m);
}

static void mtd_stop_workers(struct mtd *m)
{
	pthread_mutex_lock(&m->qmu);
	m->stop = true;
	for (uint32_t i = 0; i < nand_dies(&m->dev.geo); i++)
		if (m->dies[i].started)
			pthread_cond_signal(&m->dies[i].cv);
	pthread_mutex_unlock(&m->qmu);
	for (uint32_t i = 0; i < nand_dies(&m->dev.geo); i++)
		if (m->dies[i].started)
			pthread_join(m->dies[i].thread, NULL);
}

static void mtd_close(struct nand_dev *d)
{
	struct mtd *m = to_mtd(d);
	/* the operations each worker runs finish; queued ones are abandoned */
	mtd_stop_workers(m);
	mtd_free(m);
}

static const struct nand_ops mtd_ops = {
	.name = "mtd",
	.submit = mtd_submit,
	.poll = mtd_poll,
	.next_due = mtd_next_due,
	.sync = mtd_sync,
	.erase_count = mtd_erase_count,
	.factory_bad = mtd_factory_bad,
	.now = mtd_now,
	.wait_until = mtd_wait_until,
	.close = mtd_close,
};

/* ---- open ------------------------------------------------------------------ */

/* One value of a sysfs directory: 0 and buf, or -errno. */
static int sysfs_read(const char *dir, const char *attr, char *buf, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, attr);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	bool ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (!ok)
		return -EIO;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int sysfs_u64(const char *dir, const char *attr, uint64_t *out)
{
	char buf[32], *end;
	int rc = sysfs_read(dir, attr, buf, sizeof buf);
	if (rc)
		return rc;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (end == buf || *end || errno)
		return -EINVAL;
	*out = v;
	return 0;
}

static int sysfs_u32(const char *dir, const char *attr, uint32_t *out)
{
	uint64_t v;
	int rc = sysfs_u64(dir, attr, &v);
	if (rc)
		return rc;
	if (v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/*
 * The layout of an MTD device from MEMGETINFO (mi: type, page, OOB and
 * erase block sizes) and its sysfs directory (size: MEMGETINFO's is 32-bit,
 * so a device of 4 GiB or more would be taken modulo 4 GiB; oobavail,
 * ecc_strength, ecc_step_size, name).  0, or -errno and why in err.
 */
int nand_mtd_layout(const char *sysdir, const struct mtd_info_user *mi,
		    struct nand_mtd_layout *out, char *err, size_t errlen)
{
	*out = (struct nand_mtd_layout){ 0 };
	if (mi->type != MTD_NANDFLASH && mi->type != MTD_MLCNANDFLASH) {
		snprintf(err, errlen, "not raw NAND (MTD type %s)",
			 mi->type == MTD_NORFLASH ? "NOR" : "other than NAND");
		return -ENODEV;
	}
	int rc = sysfs_u64(sysdir, "size", &out->size);
	if (rc) {
		snprintf(err, errlen, "cannot read its size from sysfs (%s)", strerror(-rc));
		return rc;
	}
	rc = sysfs_u32(sysdir, "oobavail", &out->oobavail);
	if (rc) {
		snprintf(err, errlen, "cannot read its oobavail from sysfs (%s)", strerror(-rc));
		return rc;
	}
	(void)sysfs_u32(sysdir, "ecc_strength", &out->ecc_strength);
	(void)sysfs_u32(sysdir, "ecc_step_size", &out->ecc_step);
	(void)sysfs_read(sysdir, "name", out->name, sizeof out->name);
	if (!mi->writesize || !mi->erasesize || mi->erasesize % mi->writesize ||
	    mi->erasesize / mi->writesize > UINT16_MAX || mi->writesize % 512 || mi->oobsize > 4096) {
		snprintf(err, errlen, "unsupported NAND geometry");
		return -EINVAL;
	}
	if (out->oobavail <= MTD_SPARE_CRC || out->oobavail > mi->oobsize) {
		snprintf(err, errlen, "%s free OOB bytes per page: too few for spare data and its CRC",
			 out->oobavail ? "only a few" : "no");
		return -EINVAL;
	}
	uint64_t nblocks = out->size / mi->erasesize;
	if (nblocks > UINT32_MAX) {
		snprintf(err, errlen, "too many erase blocks (%llu)", (unsigned long long)nblocks);
		return -EINVAL;
	}
	uint32_t ndies = MTD_DIES;
	while (ndies > 1 && nblocks / ndies < MTD_MIN_BLOCKS_PER_DIE)
		ndies /= 2;
	out->geo = (struct nand_geometry){ .channels = ndies, .dies_per_channel = 1,
					   .planes_per_die = 1,
					   .blocks_per_die = (uint32_t)(nblocks / ndies),
					   .pages_per_block = mi->erasesize / mi->writesize,
					   .page_size = mi->writesize,
					   .spare_size = out->oobavail - MTD_SPARE_CRC };
	if (!out->geo.blocks_per_die) {
		snprintf(err, errlen, "no erase blocks");
		return -EINVAL;
	}
	out->erasesize = mi->erasesize;
	out->oobsize = mi->oobsize;
	return 0;
}

/* Zero bits in p[0..n): an erased byte is 0xFF. */
static uint32_t zero_bits(const uint8_t *p, size_t n)
{
	uint32_t zeros = 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		zeros += (uint32_t)__builtin_popcountll(~v);
	}
	for (; i < n; i++)
		zeros += (uint32_t)__builtin_popcount((uint8_t)~p[i]);
	return zeros;
}

/*
 * Does a page read raw (data, then oobsize OOB bytes) read erased?  Judged
 * per ECC step as the ECC would: the data in steps of step bytes, each with
 * an equal share of the OOB bytes (the last share takes the remainder),
 * every step at most strength bits off 0xFF.  An erased page's own bit
 * flips are per step as a programmed page's are: the whole page may have
 * many more than strength, and would read corrected.  step 0 or not a
 * divisor of page_size: the page is one step.  1 yes, 0 no.
 */
int nand_mtd_raw_erased(const uint8_t *raw, uint32_t page_size, uint32_t oobsize, uint32_t step,
			uint32_t strength)
{
	uint32_t nsteps = step && page_size % step == 0 ? page_size / step : 1;
	uint32_t dstep = page_size / nsteps, ostep = oobsize / nsteps;
	for (uint32_t i = 0; i < nsteps; i++) {
		uint32_t olen = i + 1 < nsteps ? ostep : oobsize - i * ostep;
		if (zero_bits(raw + (size_t)i * dstep, dstep) +
			    zero_bits(raw + page_size + (size_t)i * ostep, olen) > strength)
			return 0;
	}
	return 1;
}

/* Does page read erased (nand_mtd_raw_erased)?  buf: writesize + oobsize
 * bytes.  1 yes, 0 no, -errno. */
static int page_erased(struct mtd *m, uint32_t block, uint32_t page, uint8_t *buf)
{
	const struct nand_geometry *g = &m->dev.geo;
	struct mtd_read_req rq = {
		.start = page_offset(m, block, page),
		.len = g->page_size,
		.ooblen = m->oobsize,
		.usr_data = (uintptr_t)buf,
		.usr_oob = (uintptr_t)(buf + g->page_size),
		.mode = MTD_OPS_RAW,
	};
	if (ioctl(m->fd, MEMREAD, &rq) < 0 && errno != EUCLEAN && errno != EBADMSG)
		return -errno;
	return nand_mtd_raw_erased(buf, g->page_size, m->oobsize, m->dev.ecc_codeword_bytes,
				   m->dev.ecc_bits);
}

int nand_mtd_block_wp(uint32_t ppb, int (*erased)(void *ctx, uint32_t page), void *ctx,
		      uint32_t *wp, uint32_t *unreadable)
{
	int e = erased(ctx, ppb - 1);
	if (e == -EIO) {
		(*unreadable)++;
		e = 0;
	}
	if (e == 0) {
		*wp = ppb;
		return 0;
	}
	uint32_t lo = 0, hi = ppb - 1; /* page hi reads erased; is lo the first? */
	while (e >= 0 && lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		e = erased(ctx, mid);
		if (e == -EIO) {
			(*unreadable)++;
			e = 0;
		}
		if (e > 0)
			hi = mid;
		else if (e == 0)
			lo = mid + 1;
	}
	if (e < 0)
		return e;
	*wp = lo;
	return 0;
}

struct scan_ctx {
	struct mtd *m;
	uint32_t block;
	uint8_t *buf;
};

static int scan_page_erased(void *ctx, uint32_t page)
{
	struct scan_ctx *c = ctx;
	return page_erased(c->m, c->block, page, c->buf);
}

/* Every good block's write pointer and bad mark.  Cost: a MEMGETBADBLOCK
 * per block, and per good block a raw read of its last page, and of
 * log2(pages per block) more if that one is erased.  Pages whose raw
 * read failed (nand_mtd_block_wp): counted in *unreadable. */
static int scan_blocks(struct mtd *m, uint32_t *unreadable, char *err, size_t errlen)
{
	const struct nand_geometry *g = &m->dev.geo;
	uint32_t ppb = g->pages_per_block;
	uint8_t *buf = aligned_alloc(4096, ((size_t)g->page_size + m->oobsize + 4095) & ~(size_t)4095);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t b = 0; b < m->blocks_used && !rc; b++) {
		loff_t off = (loff_t)((uint64_t)b * m->erasesize);
		int bad = ioctl(m->fd, MEMGETBADBLOCK, &off);
		if (bad < 0 && errno != EOPNOTSUPP) {
			rc = -errno;
			snprintf(err, errlen, "MEMGETBADBLOCK of erase block %u: %s", b, strerror(-rc));
			break;
		}
		m->bad[b] = bad > 0;
		if (m->bad[b])
			continue;
		struct scan_ctx c = { m, b, buf };
		uint32_t wp = 0;
		rc = nand_mtd_block_wp(ppb, scan_page_erased, &c, &wp, unreadable);
		if (rc) {
			snprintf(err, errlen, "reading erase block %u: %s", b, strerror(-rc));
			break;
		}
		m->wp[b] = (uint16_t)wp;
	}
	free(buf);
	return rc;
}

static int fail_open(struct mtd *m, char *err, size_t errlen, int rc, const char *fmt,
		     const char *path, const char *why)
{
	if (err && errlen && fmt)
		snprintf(err, errlen, fmt, path, why);
	mtd_free(m);
	return rc;
}

int nand_mtd_open(const struct nand_spec *spec, struct nand_dev **out, char *err, size_t errlen)
{
	const char *path = spec->path;
	if (!path || !path[0]) {
		snprintf(err, errlen, "the mtd backend needs a device (/dev/mtdN)");
		return -EINVAL;
	}
	struct mtd *m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	m->fd = -1;
	m->dev.event_fd = -1;
	m->readonly = spec->readonly;
	pthread_mutex_init(&m->qmu, NULL);
	pthread_mutex_init(&m->cmu, NULL);

	m->fd = open(path, (spec->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (m->fd < 0)
		return fail_open(m, err, errlen, -errno, "cannot open %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(m->fd, &st) < 0 || !S_ISCHR(st.st_mode))
		return fail_open(m, err, errlen, -ENODEV, "%s is not a character device%s", path,
				 " (raw NAND is /dev/mtdN)");
	if (flock(m->fd, (spec->readonly ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0)
		return fail_open(m, err, errlen, errno == EWOULDBLOCK ? -EBUSY : -errno,
				 "%s is in use by another process (%s)", path, "locked");
	struct mtd_info_user mi;
	if (ioctl(m->fd, MEMGETINFO, &mi) < 0)
		return fail_open(m, err, errlen, -ENODEV, "%s is not an MTD device (MEMGETINFO: %s)",
				 path, strerror(errno));
	char sysdir[64], why[256];
	snprintf(sysdir, sizeof sysdir, "/sys/dev/char/%u:%u", major(st.st_rdev), minor(st.st_rdev));
	struct nand_mtd_layout lay;
	int rc = nand_mtd_layout(sysdir, &mi, &lay, why, sizeof why);
	if (rc)
		return fail_open(m, err, errlen, rc, "%s: %s", path, why);
	m->dev.geo = lay.geo;
	m->erasesize = lay.erasesize;
	m->oobsize = lay.oobsize;
	m->oobavail = lay.oobavail;
	m->blocks_used = nand_blocks(&lay.geo);
	m->dev.ops = &mtd_ops;
	m->dev.priv = m;
	m->dev.caps = 0;
	m->dev.ecc_bits = lay.ecc_strength;
	m->dev.ecc_codeword_bytes = lay.ecc_step;
	snprintf(m->dev.preset, sizeof m->dev.preset, "mtd:%.27s", lay.name[0] ? lay.name : "?");

	uint32_t n = m->blocks_used, ndies = nand_dies(&lay.geo);
	m->wp = calloc(n, sizeof *m->wp);
	m->erase_failed = calloc(n, 1);
	m->bad = calloc(n, 1);
	m->erases = calloc(n, sizeof *m->erases);
	m->dies = calloc(ndies, sizeof *m->dies);
	if (!m->wp || !m->erase_failed || !m->bad || !m->erases || !m->dies)
		return fail_open(m, err, errlen, -ENOMEM, "%s: out of memory%s", path, "");
	uint32_t unreadable = 0;
	rc = scan_blocks(m, &unreadable, why, sizeof why);
	if (rc)
		return fail_open(m, err, errlen, rc, "%s: %s", path, why);
	if (unreadable && spec->log) {
		snprintf(why, sizeof why,
			 "%s: %u page(s) could not be read raw (EIO) while finding the blocks' "
			 "write pointers; taken as programmed (their blocks are not written "
			 "again until erased)",
			 path, unreadable);
		spec->log(spec->log_arg, NAND_LOG_WARNING, why);
	}
	m->dev.event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (m->dev.event_fd < 0)
		return fail_open(m, err, errlen, -errno, "%s: eventfd: %s", path, strerror(errno));
	for (uint32_t i = 0; i < ndies; i++) {
		struct mtd_die *die = &m->dies[i];
		die->m = m;
		die->index = i;
		die->oob = malloc(lay.oobavail);
		if (!die->oob) {
			mtd_stop_workers(m);
			return fail_open(m, err, errlen, -ENOMEM, "%s: out of memory%s", path, "");
		}
		pthread_cond_init(&die->cv, NULL);
		int e = pthread_create(&die->thread, NULL, die_main, die);
		if (e) {
			pthread_cond_destroy(&die->cv);
			mtd_stop_workers(m);
			return fail_open(m, err, errlen, -e, "%s: cannot start a worker thread: %s", path,
					 strerror(e));
		}
		die->started = true;
		char tn[24]; /* a thread name: up to 15 characters (i < MTD_DIES) */
		snprintf(tn, sizeof tn, "flashd-mtd%u", i);
		pthread_setname_np(die->thread, tn);
	}
	*out = &m->dev;
	return 0;
}
