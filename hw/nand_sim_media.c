/*
 * hw/nand_sim_media.c - the NAND semantics of the simulated media: what a
 * read, a program and an erase do to the store (hw/nand_sim_image.c) - the
 * rules of hw/nand.h (in-order programs, program-once, erased pages read
 * 0xFF), wear (erase counts), factory and grown bad blocks, failed dies,
 * torn pages and erases.  Owns the block table entries and the page slots
 * while the device is open.  Called by the op engine (hw/nand_sim.c)
 * alone, one operation at a time, on the device's owner thread.
 *
 * Ordering of a program against a process kill: page bytes are written
 * before the write pointer moves, so a killed process leaves the page
 * erased, never a half-recorded page.
 *
 * Erased pages are never read from the store: a page at or past its
 * block's write pointer reads as 0xFF, and erasing punches a hole in an
 * image file.  Errors of the image file itself (no space to back a block,
 * EIO) are NAND_IO_ERROR, never NAND program failures: the NAND is not
 * worn.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hw/nand_sim_int.h"

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
void media_fence(void)
{
#if defined(__SSE2__)
	_mm_sfence();
#endif
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
			uint64_t v = xorshift64s(&x);
			memcpy((uint8_t *)op->data + i, &v, 8);
		}
	if (op->spare)
		for (uint32_t i = 0; i + 8 <= g->spare_size; i += 8) {
			uint64_t v = xorshift64s(&x);
			memcpy((uint8_t *)op->spare + i, &v, 8);
		}
}

/* Metadata-only media: what is kept of page `page` of block b, or NULL. */
static const struct sim_kept *kept_find(const struct sim *s, uint32_t b, uint32_t page)
{
	const struct sim_kept *k = s->kept[b];
	while (k && k->page != page)
		k = k->next;
	return k;
}

/* Metadata-only media: keep page op->page of op->block whole (see struct
 * sim_kept); false if out of memory. */
static bool kept_add(struct sim *s, const struct nand_op *op)
{
	uint32_t len = s->dev.geo.page_size;
	const uint8_t *d = op->data;
	uint8_t fill = d[len - 1];
	while (len && d[len - 1] == fill)
		len--;
	struct sim_kept *k = malloc(sizeof *k + len);
	if (!k)
		return false;
	*k = (struct sim_kept){ .next = s->kept[op->block], .page = op->page, .len = len,
				.fill = fill };
	memcpy(k->data, d, len);
	s->kept[op->block] = k;
	return true;
}

void kept_drop_block(struct sim *s, uint32_t b)
{
	for (struct sim_kept *k = s->kept[b], *next; k; k = next) {
		next = k->next;
		free(k);
	}
	s->kept[b] = NULL;
}

/* Reads with NAND_OPF_DATA_CRC: the common one (a programmed page of RAM
 * media or a mapped image) sums the data in its copy (crc32c_copy); the
 * others - erased pages, metadata_only - sum what they delivered after. */
enum nand_status media_read(struct sim *s, struct nand_op *op)
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
		const struct sim_kept *whole = kept_find(s, op->block, op->page);
		uint32_t n = s->meta_chunks, chunk = g->page_size / n, share = g->spare_size / n;
		if (op->data && whole) {
			memcpy(op->data, whole->data, whole->len);
			memset((uint8_t *)op->data + whole->len, whole->fill, g->page_size - whole->len);
		} else if (op->data)
			memset(op->data, 0, g->page_size);
		if (op->spare)
			memset(op->spare, 0xFF, g->spare_size);
		uint32_t crc = 0;
		for (uint32_t c = 0; c < n; c++) {
			const uint8_t *mc = m + (size_t)c * (s->meta_keep + 4);
			memcpy(&crc, mc + s->meta_keep, 4);
			if (op->data && !whole) {
				uint32_t tail = crc32c_tail(s->meta_zero_crc, crc);
				memcpy((uint8_t *)op->data + (size_t)(c + 1) * chunk - 4, &tail, 4);
			}
			if (op->spare)
				memcpy((uint8_t *)op->spare + (size_t)c * share, mc, s->meta_keep);
		}
		/* one chunk of zeros and its tail has its kept CRC by making:
		 * a read costs a memset, no pass of the CRC over the page
		 * (forging the tail and summing the result were two) */
		if (want_crc)
			op->data_crc = n == 1 && !whole ? crc : crc32c(0, op->data, g->page_size);
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
		uint32_t r = (uint32_t)(xorshift64s(&s->rng) % 1000000u);
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

enum nand_status media_program(struct sim *s, struct nand_op *op, bool interrupted)
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
		uint32_t crc = s->meta_chunks == 1 ? crc32c(0, op->data, g->page_size) : 0;
		if ((op->flags & NAND_OPF_META) && !kept_add(s, op))
			return NAND_PROGRAM_FAILED; /* out of memory: nothing kept */
		uint32_t n = s->meta_chunks, chunk = g->page_size / n, share = g->spare_size / n;
		for (uint32_t c = 0; c < n; c++) {
			uint8_t *mc = m + (size_t)c * (s->meta_keep + 4);
			if (op->spare)
				memcpy(mc, (const uint8_t *)op->spare + (size_t)c * share, s->meta_keep);
			else
				memset(mc, 0xFF, s->meta_keep);
			if (n > 1)
				crc = crc32c(0, (const uint8_t *)op->data + (size_t)c * chunk, chunk);
			memcpy(mc + s->meta_keep, &crc, 4);
		}
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

enum nand_status media_erase(struct sim *s, struct nand_op *op, bool interrupted)
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
	if (s->metadata_only)
		kept_drop_block(s, op->block);
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
