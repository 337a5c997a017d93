/*
 * ftl/core.c - what every other file of the FTL uses and that uses none of
 * them: logging and the sticky failure (ftl_fail), submission of
 * operations to the medium and the verdict on their completions
 * (ftl_op_stops), the check of a data page against its spare, memory
 * counted per FTL and freed at close (with the unit view of larger pages,
 * ftl/upage.c), the spare's codec, and the synchronous operations and
 * batched reads of the open and format paths.  Calls only
 * hw/ and common/; may be called by every file of ftl/.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/mman.h>

#include "ftl/ftl_int.h"

/* ---- logging ------------------------------------------------------------ */

static void (*log_fn)(void *arg, int level, const char *msg);
static void *log_arg;

void ftl_set_logger(void (*fn)(void *arg, int level, const char *msg), void *arg)
{
	log_fn = fn;
	log_arg = arg;
}

void ftl_log(int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (log_fn)
		log_fn(log_arg, level, buf);
	else
		fprintf(stderr, "ftl: %s\n", buf);
}

void ftl_fail(struct ftl *f, int err, const char *why)
{
	if (f->error)
		return;
	f->error = err;
	if (!f->quiet_fail)
		ftl_log(FTL_LOG_ERR, "failed, every request fails from now on (%s): %s; reopening "
			"it recovers from what is on the media", strerror(-err), why);
}

void ftl_failf(struct ftl *f, int err, const char *fmt, ...)
{
	char why[384];
	va_list ap;
	if (f->error)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	ftl_fail(f, err, why);
}

/* ---- operations on the medium ------------------------------------------- */

void ftl_nand_submit(struct ftl *f, struct nand_op *op)
{
	int rc = nand_submit(f->dev, op);
	if (rc == 0)
		return;
	ftl_failf(f, -EIO, "the NAND backend refused an operation (%s)", strerror(-rc));
	op->status = NAND_INVALID;
	op->err = rc;
	op->next = f->refused;
	f->refused = op;
	f->need_poll = true;
}

int ftl_deliver_refused(struct ftl *f)
{
	int n = 0;
	while (f->refused) {
		struct nand_op *op = f->refused;
		f->refused = op->next;
		op->next = NULL;
		op->done(op);
		n++;
	}
	return n;
}

bool ftl_op_stops(struct ftl *f, const struct nand_op *op)
{
	switch (op->status) {
	case NAND_POWER_LOSS:
		ftl_fail(f, -EIO, "medium lost power");
		return true;
	case NAND_IO_ERROR:
		ftl_failf(f, op->err == -ENOSPC ? -ENOSPC : -EIO,
			  "the backend's own storage failed (%s) at block %u page %u: not a NAND "
			  "fault, nothing retired; data flushed before is intact; free space or fix "
			  "the disk, then restart",
			  strerror(op->err ? -op->err : EIO), op->block, op->page);
		return true;
	case NAND_INVALID:
		ftl_failf(f, -EIO, "the medium refused an operation on block %u page %u as invalid",
			  op->block, op->page);
		return true;
	default:
		return f->error != 0;
	}
}

static bool log_this_one(uint64_t n)
{
	/* the first 10, then at powers of two: a bad page read in a loop
	 * must not flood the log */
	return n <= 10 || (n & (n - 1)) == 0;
}

void ftl_crc_error(struct ftl *f, uint32_t ppa, const char *what)
{
	f->st.crc_errors++;
	if (log_this_one(f->st.crc_errors))
		ftl_log(FTL_LOG_WARNING, "block %u page %u: %s fails its data CRC (bit rot beyond ECC); treated as "
			"unreadable (%llu such pages so far)",
			ppa_block(f, ppa), ppa_page(f, ppa), what,
			(unsigned long long)f->st.crc_errors);
}

int ftl_check_data(struct ftl *f, uint32_t data_crc, const void *spare, uint64_t unit, uint32_t ppa)
{
	struct ftl_spare sp;
	if (spare_parse(f, spare, &sp) != 0 || sp.type != FTL_PG_DATA || sp.lba != unit) {
		f->st.read_errors_uncorrectable++;
		if (log_this_one(f->st.read_errors_uncorrectable))
			ftl_log(FTL_LOG_ERR, "unit %llu: page %u does not hold it (map or spare "
				"damaged): it reads EIO until rewritten",
				(unsigned long long)unit, ppa);
		return -EIO;
	}
	if (data_crc != sp.data_crc) {
		f->st.read_errors_uncorrectable++;
		ftl_crc_error(f, ppa, "data page");
		return -EIO;
	}
	uint64_t oldest = f->blk_min_seq[ppa_block(f, ppa)];
	if (sp.seq < oldest) {
		/* written before the block's last erase: the storage returned
		 * an older copy of the page (a lost write, a restored file) */
		f->st.read_errors_uncorrectable++;
		if (log_this_one(++f->stale_reads))
			ftl_log(FTL_LOG_ERR, "unit %llu: page %u holds an older copy (sequence %llu; its block "
				"was written from %llu on): the storage returned a page older than "
				"what the FTL wrote there; treated as unreadable (%llu such reads)",
				(unsigned long long)unit, ppa, (unsigned long long)sp.seq,
				(unsigned long long)oldest, (unsigned long long)f->stale_reads);
		return -EIO;
	}
	return 0;
}

const char *ftl_state_name(enum ftl_state st)
{
	switch (st) {
	case FTL_STATE_ONLINE: return "online";
	case FTL_STATE_READONLY: return "read-only";
	case FTL_STATE_WRITE_REDUCED: return "write-reduced";
	case FTL_STATE_NO_SPACE: return "no-space";
	case FTL_STATE_FAILED: return "failed";
	}
	return "?";
}

/* ---- memory: every allocation is recorded and freed at close ----------- */

struct alloc_rec {
	void *p;
	size_t size;
	bool mapped;
};

static void *track(struct ftl *f, void *p, size_t size, bool mapped)
{
	if (!p)
		return NULL;
	if (f->nallocs == f->cap_allocs) {
		size_t cap = f->cap_allocs ? f->cap_allocs * 2 : 64;
		struct alloc_rec *a = realloc(f->allocs, cap * sizeof *a);
		if (!a) {
			if (mapped)
				munmap(p, size);
			else
				free(p);
			return NULL;
		}
		f->allocs = a;
		f->cap_allocs = cap;
	}
	f->allocs[f->nallocs++] = (struct alloc_rec){ p, size, mapped };
	f->ram_bytes += size;
	return p;
}

void *ftl_alloc(struct ftl *f, size_t size)
{
	return track(f, calloc(1, size ? size : 1), size, false);
}

void *ftl_alloc_pages(struct ftl *f, size_t size)
{
	size_t len = (size + 4095) & ~(size_t)4095;
	void *p = aligned_alloc(4096, len ? len : 4096);
	if (p)
		memset(p, 0, len);
	return track(f, p, len, false);
}

void *ftl_alloc_lazy(struct ftl *f, size_t size)
{
	size_t len = (size + 4095) & ~(size_t)4095;
	void *p = mmap(NULL, len ? len : 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	return track(f, p == MAP_FAILED ? NULL : p, len ? len : 4096, true);
}

void *ftl_map(struct ftl *f, size_t size)
{
	size_t len = (size + 4095) & ~(size_t)4095;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	/* huge pages where the kernel offers them: the l2p of a 320 GiB
	 * ioDimm is 335 MB, touched at once at open (82k faults otherwise) */
	if (p != MAP_FAILED)
		(void)madvise(p, len, MADV_HUGEPAGE);
	return track(f, p == MAP_FAILED ? NULL : p, len, true);
}

void ftl_geometry_fini(struct ftl *f)
{
	if (f->upp > 1 && f->dev)
		nand_close(f->dev); /* the unit view only: the device stays open */
	f->dev = NULL;
}

void ftl_free_all(struct ftl *f)
{
	for (size_t i = 0; i < f->nallocs; i++) {
		if (f->allocs[i].mapped)
			munmap(f->allocs[i].p, f->allocs[i].size);
		else
			free(f->allocs[i].p);
	}
	free(f->allocs);
	free(f->cp.hdr_buf);
	free(f->cp.load_doomed);
	free(f->cp.load_refresh);
	free(f->cp.load_fresh);
	ftl_geometry_fini(f);
	free(f);
}

/* ---- spare -------------------------------------------------------------- */

void spare_build(struct ftl *f, void *spare, uint8_t type, uint32_t lba, uint64_t seq,
		 const void *data, bool with_crc)
{
	spare_build_crc(f, spare, type, lba, seq,
			with_crc && data ? crc32c(0, data, f->page_size) : 0);
}

void spare_build_crc(struct ftl *f, void *spare, uint8_t type, uint32_t lba, uint64_t seq,
		     uint32_t data_crc)
{
	spare_build_full(f, spare, type, lba, seq, data_crc, 0);
}

void spare_build_full(struct ftl *f, void *spare, uint8_t type, uint32_t lba, uint64_t seq,
		      uint32_t data_crc, uint32_t reserved)
{
	struct ftl_spare sp = {
		.magic = FTL_SPARE_MAGIC,
		.type = type,
		.version = FTL_MEDIA_VERSION,
		.lba = lba,
		.data_crc = data_crc,
		.seq = seq,
		.format_id = f->format_id,
		.reserved = reserved,
	};
	sp.crc = crc32c(0, &sp, offsetof(struct ftl_spare, crc));
	memcpy(spare, &sp, sizeof sp);
	memset((uint8_t *)spare + sizeof sp, 0xFF, f->spare_size - sizeof sp);
}

int spare_parse(struct ftl *f, const void *spare, struct ftl_spare *out)
{
	memcpy(out, spare, sizeof *out);
	if (out->magic == 0xFFFFFFFFu && out->crc == 0xFFFFFFFFu && out->seq == UINT64_MAX)
		return -ENODATA;
	if (out->magic != FTL_SPARE_MAGIC ||
	    out->crc != crc32c(0, out, offsetof(struct ftl_spare, crc)) ||
	    out->version != FTL_MEDIA_VERSION || out->seq >= FTL_SEQ_LIMIT)
		return -EILSEQ;
	if (out->format_id != f->format_id)
		return -EILSEQ;
	return 0;
}

/* ---- XOR of pages (parity, checkpoint parity) --------------------------- */

void xor_into(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t a, b;
		memcpy(&a, dst + i, 8);
		memcpy(&b, src + i, 8);
		a ^= b;
		memcpy(dst + i, &a, 8);
	}
	for (; i < n; i++)
		dst[i] ^= src[i];
}

/* ---- sequence numbers: seq_take's slow path ------------------------------ */

/* seq_take past FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM / 2 (ftl_int.h): only an
 * image whose numbers were already near the limit at open gets here, after
 * some 2^39 writes.  Host writes are refused from here on; what is buffered,
 * GC and checkpoints still number their pages (far fewer than the 2^39
 * left), and the last number the media accept fails the FTL instead of
 * being passed. */
uint64_t seq_take_slow(struct ftl *f)
{
	if (!f->seq_ro) {
		f->seq_ro = true;
		ftl_log(FTL_LOG_ERR, "sequence numbers near their limit (%llu of %llu): writes are refused "
			"(read-only); copy the data off and re-format the ioDimm",
			(unsigned long long)f->next_seq, (unsigned long long)FTL_SEQ_LIMIT);
	}
	if (f->next_seq >= FTL_SEQ_LIMIT - 1) {
		ftl_fail(f, -EROFS, "sequence numbers exhausted");
		return FTL_SEQ_LIMIT - 1;
	}
	return f->next_seq++;
}

/* ---- synchronous reads (open, format, recovery) ------------------------- */

#define READ_TRIES 3 /* reads of a page that came back uncorrectable */

static void batch_op_done(struct nand_op *op)
{
	*(bool *)op->priv = true;
}

static void count_op_done(struct nand_op *op)
{
	(*(uint32_t *)op->priv)--;
}

enum nand_status nand_programs_sync(struct nand_dev *dev, struct nand_op *ops, uint32_t n)
{
	uint32_t left = 0;
	enum nand_status st = NAND_OK;
	for (uint32_t i = 0; i < n; i++) {
		ops[i].done = count_op_done;
		ops[i].priv = &left;
		int rc = nand_submit(dev, &ops[i]);
		if (rc) {
			ops[i].status = NAND_INVALID;
			ops[i].err = rc;
			continue;
		}
		left++;
	}
	while (left) {
		nand_wait_until(dev, nand_next_due(dev));
		nand_poll(dev, nand_now(dev));
	}
	for (uint32_t i = 0; i < n && st == NAND_OK; i++)
		st = ops[i].status;
	return st;
}

enum nand_status nand_op_sync(struct nand_dev *dev, struct nand_op *op)
{
	bool done = false;
	op->done = batch_op_done;
	op->priv = &done;
	int rc = nand_submit(dev, op);
	if (rc) {
		/* refused: nothing queued, nothing to wait for */
		op->status = NAND_INVALID;
		op->err = rc;
		return op->status;
	}
	for (int tries = 1;; tries++) {
		while (!done) {
			/* UINT64_MAX: until the backend signals (at once if it
			 * cannot) */
			nand_wait_until(dev, nand_next_due(dev));
			nand_poll(dev, nand_now(dev));
		}
		/* a read's bit errors differ from try to try: read again before
		 * taking a page as unreadable (and a log entry as never made) */
		if (op->type != NAND_OP_READ || op->status != NAND_UNCORRECTABLE ||
		    tries == READ_TRIES)
			return op->status;
		done = false;
		if (nand_submit(dev, op)) {
			op->status = NAND_INVALID;
			return op->status;
		}
	}
}

struct batch_slot {
	struct nand_op op;
	bool done;
	uint8_t tries;
	uint64_t index;
};

static void batch_slot_done(struct nand_op *op)
{
	((struct batch_slot *)op->priv)->done = true;
}

int read_batch(struct ftl *f, uint64_t count, uint32_t window,
	       void (*setup)(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op),
	       void (*result)(struct ftl *f, void *ctx, uint64_t i, struct nand_op *op), void *ctx)
{
	struct batch_slot *s = calloc(window, sizeof *s);
	uint8_t *bufs = aligned_alloc(4096, (size_t)window * f->page_size);
	uint8_t *spares = malloc((size_t)window * f->spare_size);
	uint64_t next = 0, finished = 0;
	uint32_t inflight = 0;
	int rc = 0;

	if (!s || !bufs || !spares) {
		free(s);
		free(bufs);
		free(spares);
		return -ENOMEM;
	}
	/* completions are taken in submission order, so results come in order */
	uint32_t head = 0;
	uint64_t ahead = 0; /* pages hinted to the backend (nand_prefetch) */
	while (finished < count) {
		/* hint the next pages well before they are read: a backend on a
		 * file fetches them in parallel (setup has no side effects) */
		while (ahead < count && ahead < next + 8 * (uint64_t)window) {
			struct nand_op pf = { .type = NAND_OP_READ };
			setup(f, ctx, ahead++, &pf);
			nand_prefetch(f->dev, pf.block, pf.page);
		}
		while (next < count && inflight < window) {
			uint32_t k = (uint32_t)(next % window);
			struct nand_op *op = &s[k].op;
			memset(op, 0, sizeof *op);
			op->type = NAND_OP_READ;
			op->data = bufs + (size_t)k * f->page_size;
			op->spare = spares + (size_t)k * f->spare_size;
			setup(f, ctx, next, op);
			op->done = batch_slot_done;
			op->priv = &s[k];
			s[k].done = false;
			s[k].tries = 1;
			s[k].index = next;
			next++;
			inflight++;
			if (nand_submit(f->dev, op)) {
				/* refused: collect what is in flight, then fail */
				op->status = NAND_INVALID;
				s[k].done = true;
				rc = -EIO;
				count = next;
				break;
			}
		}
		nand_wait_until(f->dev, nand_next_due(f->dev));
		nand_poll(f->dev, nand_now(f->dev));
		while (inflight && s[head].done) {
			struct nand_op *op = &s[head].op;
			if (op->status == NAND_UNCORRECTABLE && s[head].tries < READ_TRIES && !rc) {
				/* read again (as nand_op_sync); results stay in order */
				s[head].tries++;
				s[head].done = false;
				if (nand_submit(f->dev, op) == 0)
					break;
				op->status = NAND_INVALID;
				s[head].done = true;
			}
			if (op->status == NAND_POWER_LOSS || op->status == NAND_INVALID ||
			    op->status == NAND_IO_ERROR)
				rc = -EIO;
			else if (!rc)
				result(f, ctx, s[head].index, op);
			inflight--;
			finished++;
			head = head + 1 == window ? 0 : head + 1;
		}
	}
	free(s);
	free(bufs);
	free(spares);
	return rc;
}
