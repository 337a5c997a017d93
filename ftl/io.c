/*
 * ftl/io.c - host requests: validation, reads, writes (with 512e
 * read-modify-write), trims and zeroes, flush and FUA; writes pass the
 * throttle of write-reduced mode (throttle.c) unit by unit.  Entered
 * through io_start (ftl.c's ftl_submit runs the progress turn after it).
 *
 * Queues (FIFO):
 *   wq_write   - writes, trims, zeroes and flushes in arrival order; only
 *                the head is being worked on.  It waits for free slots in
 *                the user ring, for a read-modify-write pre-read, or for a
 *                checkpoint to finish.
 *   wq_read    - reads that ran out of read ops.
 *   wq_durable - flushes and FUA writes whose data is in the ring, waiting
 *                for the ring's done cursor to pass wait_pos.
 *   wq_syncing - those whose data is programmed, waiting for the medium's
 *                sync (nand_sync_start: one at a time, each for all of
 *                them; the others wait in wq_durable meanwhile).
 * Reads never wait behind writes: a read sees every write that completed
 * before it was submitted (buffered data is read from its slot).
 */
#include <errno.h>

#include "ftl/ftl_int.h"

enum io_state {
	IO_NEW,
	IO_READING,      /* reads issued up to io->unit */
};

void ioq_push(struct ioq *q, struct ftl_io *io)
{
	io->wait_next = NULL;
	if (q->tail)
		q->tail->wait_next = io;
	else
		q->head = io;
	q->tail = io;
}

static void ioq_push_front(struct ioq *q, struct ftl_io *io)
{
	io->wait_next = q->head;
	q->head = io;
	if (!q->tail)
		q->tail = io;
}

struct ftl_io *ioq_pop(struct ioq *q)
{
	struct ftl_io *io = q->head;
	if (io) {
		q->head = io->wait_next;
		if (!q->head)
			q->tail = NULL;
		io->wait_next = NULL;
	}
	return io;
}

/* Needs free pages (so fails once the FTL is out of space): data writes and
 * zeroes that must be written as zero pages.  Trims and plain zeroes unmap. */
static bool io_needs_space(const struct ftl_io *io)
{
	return io->type == FTL_IO_WRITE || (io->flags & FTL_IO_NO_HOLE);
}

static void rop_put(struct ftl *f, struct rop *ro)
{
	ro->io = NULL;
	ro->next_free = f->rop_free;
	f->rop_free = ro;
}

void io_complete(struct ftl *f, struct ftl_io *io, int status)
{
	for (int i = 0; i < 2; i++) {
		struct rop *ro = io->rmw_op[i];
		if (ro) {
			io->rmw_op[i] = NULL;
			if (ro->copy_len == 0)
				ro->io = NULL; /* in flight: freed when it lands */
			else
				rop_put(f, ro);
		}
	}
	f->ios_in_flight--;
	io->status = status;
	io->done(io);
}

/* ---- reads -------------------------------------------------------------- */

static void read_finish_one(struct ftl *f, struct ftl_io *io)
{
	io->pending--;
	if (!io->pending && io->unit == io->end_unit && io->state == IO_READING)
		io_complete(f, io, io->status);
}

/*
 * The verdict on a read of unit's page ppa (with NAND_OPF_DATA_CRC: the
 * medium summed the data in its copy, op->data_crc): 0 or an error.  The
 * spare must name the unit, the data must match the CRC32C in the spare (a
 * CORRECTED read is checked too: ECC can miscorrect), and the page must not
 * be older than its block's last erase (blk_min_seq).
 */
static int read_verdict(struct ftl *f, const struct nand_op *op, const void *spare,
			uint64_t unit, uint32_t ppa)
{
	if (op->status != NAND_OK && op->status != NAND_CORRECTED && ftl_op_stops(f, op))
		return f->error;
	if (op->block < f->nblocks)
		die_note(f, op->block, DIE_READ, op->status == NAND_OK || op->status == NAND_CORRECTED);
	if (op->status == NAND_CORRECTED) {
		f->st.read_errors_corrected++;
		blk_read_health(f, ppa_block(f, ppa), op->status, op->corrected_max);
	} else if (op->status != NAND_OK) {
		f->st.read_errors_uncorrectable++;
		blk_read_health(f, ppa_block(f, ppa), op->status, op->corrected_max);
		return -EIO;
	}
	return ftl_check_data(f, op->data_crc, spare, unit, ppa);
}

/* reads again after an uncorrectable read, before parity or EIO */
#define READ_RETRIES 2

static void rop_finish(struct ftl *f, struct rop *ro, int err);
static void rop_submit(struct ftl *f, struct rop *ro, uint32_t ppa, void *data);

/*
 * A read failed, but the unit has moved meanwhile (GC relocated it, or the
 * host rewrote or trimmed it): read it where it is now.  A rebuild must
 * not be tried at the old place: GC may have erased the rest of its stripe
 * by then.  Returns true if it took over the rop.
 */
static bool rop_moved(struct ftl *f, struct rop *ro)
{
	uint32_t e = f->l2p[ro->unit];
	if (e == ro->expect || e == L2P_LOST || f->error)
		return false;
	uint8_t *data = ro->op.data;
	if (e == L2P_UNMAPPED) {
		memset(data, 0, f->page_size);
		rop_finish(f, ro, 0);
	} else if (l2p_is_slot(e)) {
		memcpy(data, slot_data(f, e), f->page_size);
		rop_finish(f, ro, 0);
	} else {
		ro->expect = e;
		rop_submit(f, ro, e, data);
	}
	return true;
}

/* A page that could not be read, rebuilt from its stripe (or not). */
static void rop_rebuilt(struct ftl *f, struct rb_req *rq, int status)
{
	struct rop *ro = (struct rop *)((char *)rq - offsetof(struct rop, rb));
	int err = status;
	if (!err && f->error)
		err = f->error;
	if (!err)
		err = ftl_check_data(f, crc32c(0, rq->data, f->page_size), ro->spare, ro->unit,
				     ro->expect);
	if (err && rop_moved(f, ro))
		return;
	rop_finish(f, ro, err);
}

static void rop_done(struct nand_op *op)
{
	struct rop *ro = op->priv;
	struct ftl *f = ro->f;
	int err = read_verdict(f, op, ro->spare, ro->unit, ro->expect);

	if (err == -EIO && f->parity && rop_moved(f, ro))
		return;
	if (err == -EIO && ro->retries < READ_RETRIES && op->status == NAND_UNCORRECTABLE &&
	    !die_is_dead(f, op->block) && !f->error) {
		/* again first: a read's bit errors differ from try to try (with
		 * parity too: a band that lost members may have no stripe to
		 * rebuild from; one retry left such a unit EIO once in ~10^7
		 * reads at 300 ppm, t_ftl_model seed 9) */
		ro->retries++;
		f->st.nand_pages_read++;
		ftl_nand_submit(f, op);
		return;
	}
	if (err == -EIO && f->parity && !ro->rebuilt && !f->error &&
	    (!ro->io || ro->io->status == 0 || ro->rmw)) {
		ro->rebuilt = true;
		ro->rb.ppa = ro->expect;
		ro->rb.data = op->data;
		ro->rb.spare = ro->spare;
		ro->rb.done = rop_rebuilt;
		if (par_rebuild(f, &ro->rb) == 0)
			return;
	}
	rop_finish(f, ro, err);
}

static void rop_finish(struct ftl *f, struct rop *ro, int err)
{
	struct ftl_io *io = ro->io;
	if (ro->rmw) {
		/* pre-read of a partially written unit; the write resumes in io_kick */
		ro->copy_len = err ? 2u : 1u; /* 1: ready, 2: failed */
		if (!io) /* the write ended meanwhile */
			rop_put(f, ro);
		return;
	}
	if (!io) {
		rop_put(f, ro);
		return;
	}
	if (err && !io->status)
		io->status = err;
	else if (!err && ro->copy_len)
		memcpy(ro->copy_dst, ro->bounce + ro->copy_off, ro->copy_len);
	rop_put(f, ro);
	read_finish_one(f, io);
}

static void rop_submit(struct ftl *f, struct rop *ro, uint32_t ppa, void *data)
{
	struct nand_op *op = &ro->op;
	op->type = NAND_OP_READ;
	op->block = ppa_block(f, ppa);
	op->page = ppa_page(f, ppa);
	op->data = data;
	op->spare = ro->spare;
	op->flags = NAND_OPF_DATA_CRC;
	op->done = rop_done;
	op->priv = ro;
	ro->rebuilt = false;
	ro->retries = 0;
	f->st.nand_pages_read++;
	ftl_nand_submit(f, op);
}

static void read_continue(struct ftl *f, struct ftl_io *io)
{
	uint64_t end = io->offset + io->length;
	io->state = IO_READING;
	while (io->unit < io->end_unit) {
		uint64_t u = io->unit;
		uint64_t ustart = u * FTL_UNIT_SIZE;
		uint64_t lo = ustart > io->offset ? ustart : io->offset;
		uint64_t hi = ustart + FTL_UNIT_SIZE < end ? ustart + FTL_UNIT_SIZE : end;
		uint8_t *dst = (uint8_t *)io->buf + (lo - io->offset);
		uint32_t len = (uint32_t)(hi - lo);
		uint32_t e = f->l2p[u];

		if (e == L2P_UNMAPPED) {
			memset(dst, 0, len);
		} else if (e == L2P_LOST) {
			if (!io->status)
				io->status = -EIO;
		} else if (e & L2P_SLOT) {
			memcpy(dst, slot_data(f, e) + (lo - ustart), len);
		} else if (f->read_now && len == FTL_UNIT_SIZE) {
			/* memory media: read in place, no op, no completion; the
			 * next unit's page is hinted first, so its miss overlaps
			 * this copy (build/pagecopy: +40-50 % on random pages) */
			uint32_t next = u + 1 < io->end_unit ? f->l2p[u + 1] : L2P_UNMAPPED;
			if (f->read_soon && l2p_is_ppa(next))
				f->read_soon(f->dev, ppa_block(f, next), ppa_page(f, next));
			uint8_t *spare = f->read_now_spare;
			f->st.nand_pages_read++;
			struct nand_op now = { .block = ppa_block(f, e), .page = ppa_page(f, e) };
			/* one pass over the page: copied into the host's buffer
			 * and summed together (data_crc) */
			now.status = f->read_now(f->dev, now.block, now.page, dst, spare, &now.data_crc);
			now.corrected_max = f->dev->last_corrected_max;
			int err = read_verdict(f, &now, spare, u, e);
			if (err && (f->parity || now.status == NAND_UNCORRECTABLE) && !f->error &&
			    f->rop_free) {
				/* read again, or rebuilt from its stripe: through a
				 * read op */
				goto async;
			}
			if (err && !io->status)
				io->status = err;
		} else {
		async:;
			struct rop *ro = f->rop_free;
			if (!ro) {
				io->pending++; /* hold completion while queued */
				ioq_push_front(&f->wq_read, io);
				return;
			}
			f->rop_free = ro->next_free;
			ro->io = io;
			ro->unit = u;
			ro->expect = e;
			ro->rmw = false;
			io->pending++;
			if (len == FTL_UNIT_SIZE) {
				ro->copy_len = 0;
				rop_submit(f, ro, e, dst);
			} else {
				ro->copy_off = (uint32_t)(lo - ustart);
				ro->copy_len = len;
				ro->copy_dst = dst;
				rop_submit(f, ro, e, ro->bounce);
			}
		}
		io->unit++;
	}
	if (!io->pending)
		io_complete(f, io, io->status);
}

/* ---- writes, trims, zeroes --------------------------------------------- */

/* Issue (or reissue) the pre-read of unit u for a partial write. */
static void rmw_issue(struct ftl *f, struct ftl_io *io, int which, uint64_t u, uint32_t e)
{
	struct rop *ro = f->rop_free;
	if (!ro)
		return; /* retried on the next kick */
	f->rop_free = ro->next_free;
	ro->io = io;
	ro->unit = u;
	ro->expect = e;
	ro->rmw = true;
	ro->copy_len = 0; /* in flight */
	io->rmw_op[which] = ro;
	rop_submit(f, ro, e, ro->bounce);
}

/*
 * Work on the head of wq_write.  Returns true when every unit is buffered
 * or unmapped (the io may still wait to be durable), false to wait.
 */
static bool write_continue(struct ftl *f, struct ftl_io *io)
{
	struct ring *r = &f->stream[STREAM_USER].ring;
	uint64_t end = io->offset + io->length;
	bool zero = io->type != FTL_IO_WRITE;
	bool unmap = zero && !(io->flags & FTL_IO_NO_HOLE);
	uint64_t first_unit = io->offset / FTL_UNIT_SIZE;

	while (io->unit < io->end_unit) {
		uint64_t u = io->unit;
		uint64_t ustart = u * FTL_UNIT_SIZE;
		uint64_t lo = ustart > io->offset ? ustart : io->offset;
		uint64_t hi = ustart + FTL_UNIT_SIZE < end ? ustart + FTL_UNIT_SIZE : end;
		bool full = lo == ustart && hi == ustart + FTL_UNIT_SIZE;

		if (full && unmap) {
			/* the run of whole units from u: drop their mappings */
			uint64_t run_end = end / FTL_UNIT_SIZE;
			uint32_t n = (uint32_t)(run_end - u);
			if (!trim_pending_add(f, (uint32_t)u, n, false)) {
				if (ring_free(r) < 1 || !trim_close_record(f))
					return false;
				continue;
			}
			for (uint64_t x = u; x < run_end; x++) {
				uint32_t e = f->l2p[x];
				if (l2p_is_ppa(e))
					blk_invalidate(f, e);
				f->l2p[x] = L2P_UNMAPPED;
			}
			io->unit = run_end;
			continue;
		}

		/* one slot for the unit, one kept for a trim record */
		if (ring_free(r) < 2)
			return false;
		if (f->throttle_ns && !throttle_pass(f))
			return false;
		if (f->ntrim_pend && trim_pending_overlaps(f, u) && !trim_close_record(f))
			return false;

		uint32_t idx = (uint32_t)(r->fill & r->mask);
		uint8_t *dst = ring_fill_data(r, idx);
		uint32_t e = f->l2p[u];
		/* a whole unit's CRC comes with its copy (one pass over the
		 * host's data, hot from the socket); a merged one's at program */
		uint32_t crc = 0;
		if (full) {
			crc = crc32c_copy(0, dst,
					  zero ? f->zero_page : (uint8_t *)io->buf + (lo - io->offset),
					  FTL_UNIT_SIZE);
		} else {
			if (e == L2P_UNMAPPED) {
				memset(dst, 0, FTL_UNIT_SIZE);
			} else if (e == L2P_LOST) {
				io->status = -EIO;
				io->unit++;
				continue;
			} else if (e & L2P_SLOT) {
				memcpy(dst, slot_data(f, e), FTL_UNIT_SIZE);
			} else {
				int which = u == first_unit ? 0 : 1;
				struct rop *ro = io->rmw_op[which];
				if (ro && ro->copy_len == 0)
					return false; /* pre-read in flight */
				if (!ro || ro->expect != e || ro->unit != u) {
					if (ro) {
						rop_put(f, ro);
						io->rmw_op[which] = NULL;
					}
					rmw_issue(f, io, which, u, e);
					return false;
				}
				if (ro->copy_len == 2) {
					/* the old content is unreadable: keep it, fail */
					io->status = -EIO;
					io->unit++;
					continue;
				}
				memcpy(dst, ro->bounce, FTL_UNIT_SIZE);
			}
			memcpy(dst + (lo - ustart),
			       zero ? f->zero_page : (uint8_t *)io->buf + (lo - io->offset), hi - lo);
		}

		/* the page it will be programmed to, taken now: what the ring
		 * holds can always drain without GC */
		struct stream *us = &f->stream[STREAM_USER];
		uint32_t set = user_set(f, e);
		uint32_t ppa = set_next_page(f, &us->set[set], user_floor(f));
		if (ppa == FTL_NO_BLOCK)
			ppa = set_next_page(f, &us->set[set ^ 1], user_floor(f));
		if (ppa == FTL_NO_BLOCK) {
			f->stream[STREAM_USER].stalled = true;
			return false;
		}
		f->stream[STREAM_USER].stalled = false;
		struct slot *sl = &r->slots[idx];
		sl->state = SLOT_FILLED;
		sl->type = FTL_PG_DATA;
		sl->crc_known = full;
		sl->data_crc = crc;
		sl->ppa = ppa;
		sl->lba = (uint32_t)u;
		sl->prev = l2p_is_slot(e) ? slot_prev(f, e) : e;
		sl->seq = seq_take(f);
		r->fill++;
		f->l2p[u] = L2P_SLOT | idx;
		if (l2p_is_ppa(e))
			blk_invalidate(f, e);
		f->st.host_pages_written++;
		io->unit++;
	}
	return true;
}

static void durable_push(struct ftl *f, struct ftl_io *io)
{
	io->wait_pos = f->stream[STREAM_USER].ring.fill;
	io->par_ticket = f->par_ticket;
	ioq_push(&f->wq_durable, io);
}

/*
 * Complete flushes and FUA writes whose data is programmed and synced: one
 * sync for all that are ready, run beside other I/O (on an image file an
 * fdatasync can take seconds; reads and writes go on meanwhile).
 */
static int durable_kick(struct ftl *f)
{
	struct ring *r = &f->stream[STREAM_USER].ring;
	int n = 0;

	if (f->wq_syncing.head) {
		int rc = nand_sync_poll(f->dev, f->durable_ticket);
		if (!rc)
			return 0; /* next_due brings the owner back */
		if (rc < 0)
			ftl_fail(f, -EIO, "syncing the medium failed");
		struct ftl_io *io;
		while ((io = ioq_pop(&f->wq_syncing))) {
			io_complete(f, io, rc < 0 ? -EIO : io->status);
			n++;
		}
		if (rc < 0)
			return n;
	}
	/* a partial-parity page failed its program (par_ppl_failed): its
	 * stripe gets another before the flushes waiting complete */
	if (f->ppl_redo) {
		if (!par_flush_ppl(f))
			return n; /* no ring slot now */
		f->ppl_redo = false;
		for (struct ftl_io *io = f->wq_durable.head; io; io = io->wait_next) {
			io->wait_pos = r->fill;
			io->par_ticket = f->par_ticket;
		}
	}
	while (f->wq_durable.head && f->wq_durable.head->wait_pos <= r->done &&
	       par_sealed_done(f, f->wq_durable.head->par_ticket))
		ioq_push(&f->wq_syncing, ioq_pop(&f->wq_durable));
	if (!f->wq_syncing.head)
		return n;
	if (nand_sync_start(f->dev, &f->durable_ticket) < 0) {
		f->durable_ticket = 0;
		ftl_fail(f, -EIO, "syncing the medium failed");
		struct ftl_io *io;
		while ((io = ioq_pop(&f->wq_syncing)))
			io_complete(f, io, -EIO);
	}
	return n + 1;
}

/*
 * The head write waits for a read-modify-write pre-read: issue the
 * pre-reads of the partial units of the next RMW_AHEAD writes now, so
 * their reads overlap instead of each stalling the queue in turn for a
 * NAND read (one die's queue, milliseconds when it is busy).  Buffering
 * stays in arrival order: write_continue checks that a pre-read still
 * reads the unit's current mapping and issues it again if not.
 */
#define RMW_AHEAD 64

static void rmw_prefetch(struct ftl *f, struct ftl_io *head)
{
	struct ftl_io *io = head->wait_next;
	for (int k = 0; io && k < RMW_AHEAD && f->rop_free; io = io->wait_next, k++) {
		if (io->type == FTL_IO_FLUSH || !io->length)
			continue;
		uint64_t end = io->offset + io->length;
		uint64_t first = io->offset / FTL_UNIT_SIZE, last = (end - 1) / FTL_UNIT_SIZE;
		for (int which = 0; which < 2; which++) {
			uint64_t u = which ? last : first;
			if (which && last == first)
				break;
			bool partial = which ? end % FTL_UNIT_SIZE != 0
					     : io->offset % FTL_UNIT_SIZE != 0 ||
					       end < (first + 1) * FTL_UNIT_SIZE;
			uint32_t e = f->l2p[u];
			if (!partial || io->rmw_op[which] || !l2p_is_ppa(e) || e == L2P_UNMAPPED ||
			    e == L2P_LOST || !f->rop_free)
				continue;
			rmw_issue(f, io, which, u, e);
		}
	}
}

int io_kick(struct ftl *f)
{
	int n = 0;
	struct ftl_io *io;

	if (f->error)
		return 0;
	f->throttle_wait = false; /* set again below while a write still waits */
	while ((io = f->wq_write.head) != NULL) {
		if (io->type == FTL_IO_FLUSH) {
			if (f->ntrim_pend && !trim_close_record(f))
				break;
			if (!par_flush_ppl(f))
				break;
			ioq_pop(&f->wq_write);
			durable_push(f, io);
			n++;
			continue;
		}
		if (f->wear_ro || f->seq_ro) {
			/* worn out while waiting: read-only now */
			ioq_pop(&f->wq_write);
			io_complete(f, io, -EROFS);
			n++;
			continue;
		}
		if (f->no_space && io_needs_space(io)) {
			/* out of space while waiting for it */
			ioq_pop(&f->wq_write);
			io_complete(f, io, -ENOSPC);
			n++;
			continue;
		}
		if (!write_continue(f, io)) {
			/* waiting: for ring slots, a checkpoint, or an RMW
			 * pre-read (then the next writes' pre-reads start too) */
			if (io->rmw_op[0] || io->rmw_op[1])
				rmw_prefetch(f, io);
			break;
		}
		ioq_pop(&f->wq_write);
		n++;
		if (io->flags & FTL_IO_FUA) {
			if ((io->type != FTL_IO_WRITE && f->ntrim_pend && !trim_close_record(f)) ||
			    !par_flush_ppl(f)) {
				/* no slot for the record: finish as a flush later */
				io->type = FTL_IO_FLUSH;
				ioq_push_front(&f->wq_write, io);
				break;
			}
			durable_push(f, io);
		} else {
			io_complete(f, io, io->status);
		}
	}
	while (f->wq_read.head && f->rop_free) {
		io = ioq_pop(&f->wq_read);
		io->pending--;
		read_continue(f, io);
		n++;
	}
	n += durable_kick(f);
	return n;
}

/* The sticky error: everything waiting fails. */
void io_fail_all(struct ftl *f)
{
	struct ftl_io *io;
	while ((io = ioq_pop(&f->wq_write)))
		io_complete(f, io, f->error);
	while ((io = ioq_pop(&f->wq_durable)))
		io_complete(f, io, f->error);
	while ((io = ioq_pop(&f->wq_syncing)))
		io_complete(f, io, f->error);
	while ((io = ioq_pop(&f->wq_held)))
		io_complete(f, io, f->error);
	while ((io = ioq_pop(&f->wq_read))) {
		io->pending--;
		io->unit = io->end_unit; /* issue nothing more */
		io->status = f->error;
		if (!io->pending)
			io_complete(f, io, f->error);
		/* else: completes when its reads in flight land */
	}
}

/* ---- submit ------------------------------------------------------------- */

static int io_validate(struct ftl *f, const struct ftl_io *io)
{
	if (f->error)
		return f->error;
	if (io->type == FTL_IO_FLUSH)
		return 0;
	if (io->type > FTL_IO_WRITE_ZEROES)
		return -EINVAL;
	uint64_t cap = f->units * FTL_UNIT_SIZE;
	/* FTL_IO_ANY_ALIGN: byte ranges; read_continue copies partial units
	 * (copy_off/copy_len) and write_continue read-modify-writes them */
	if (!(io->flags & FTL_IO_ANY_ALIGN) &&
	    (io->offset % f->sector_size || io->length % f->sector_size))
		return -EINVAL;
	if (io->offset > cap || io->length > cap - io->offset)
		return io->type == FTL_IO_READ ? -EINVAL : -ENOSPC;
	if ((io->type == FTL_IO_READ || io->type == FTL_IO_WRITE) && io->length && !io->buf)
		return -EINVAL;
	if (io->type != FTL_IO_READ) {
		if (f->readonly || f->wear_ro || f->seq_ro)
			return -EROFS; /* opened read-only, or worn out (block.c) */
		/* out of spare blocks: unmapping still works (it frees space) */
		if (f->no_space && io_needs_space(io))
			return -ENOSPC;
	}
	return 0;
}

bool io_start(struct ftl *f, struct ftl_io *io)
{
	int rc = io_validate(f, io);

	io->status = 0;
	io->pending = 0;
	io->state = IO_NEW;
	io->wait_next = NULL;
	io->rmw_op[0] = io->rmw_op[1] = NULL;
	io->unit = io->offset / FTL_UNIT_SIZE;
	/* length 0 touches no unit, even at an offset inside one */
	io->end_unit = io->length ? (io->offset + io->length + FTL_UNIT_SIZE - 1) / FTL_UNIT_SIZE
				  : io->unit;
	f->ios_in_flight++;
	if (rc) {
		io_complete(f, io, rc);
		return false;
	}
	if (f->thermal == FTL_THERMAL_STOPPED) {
		ioq_push(&f->wq_held, io); /* counted in ios_in_flight */
		return false;
	}
	io_dispatch(f, io);
	return true;
}

/* Host I/O held while the FTL was stopped for heat goes on, in order. */
void io_release_held(struct ftl *f)
{
	struct ftl_io *io;
	while ((io = ioq_pop(&f->wq_held)))
		io_dispatch(f, io);
}

/* Host I/O held for heat completes with status, not started: how many. */
int io_fail_held(struct ftl *f, int status)
{
	int n = 0;
	struct ftl_io *io;
	while ((io = ioq_pop(&f->wq_held))) {
		io_complete(f, io, status);
		n++;
	}
	return n;
}

/* An io validated and counted in ios_in_flight: start it or queue it. */
void io_dispatch(struct ftl *f, struct ftl_io *io)
{
	switch (io->type) {
	case FTL_IO_READ:
		f->st.host_read_ops++;
		f->st.host_read_bytes += io->length;
		f->st.host_pages_read += io->end_unit - io->unit;
		if (f->wq_read.head) {
			io->pending++;
			ioq_push(&f->wq_read, io);
		} else {
			read_continue(f, io);
		}
		break;
	case FTL_IO_WRITE:
		f->st.host_write_ops++;
		f->st.host_write_bytes += io->length;
		ioq_push(&f->wq_write, io);
		break;
	case FTL_IO_TRIM:
		f->st.host_trim_ops++;
		f->st.host_trim_bytes += io->length;
		ioq_push(&f->wq_write, io);
		break;
	case FTL_IO_WRITE_ZEROES:
		f->st.host_zero_ops++;
		f->st.host_zero_bytes += io->length;
		ioq_push(&f->wq_write, io);
		break;
	case FTL_IO_FLUSH:
		f->st.host_flush_ops++;
		if (f->readonly) {
			io_complete(f, io, 0);
			return;
		}
		ioq_push(&f->wq_write, io);
		break;
	}
}

/* ---- allocation map ----------------------------------------------------- */

uint64_t ftl_map_extent(struct ftl *f, uint64_t off, uint64_t len, bool *mapped)
{
	uint64_t cap = f->units * FTL_UNIT_SIZE;
	if (off >= cap || !len) {
		*mapped = false;
		return 0;
	}
	if (len > cap - off)
		len = cap - off;
	uint64_t u = off / FTL_UNIT_SIZE, end = off + len;
	bool m = f->l2p[u] != L2P_UNMAPPED;
	uint64_t x = u + 1;
	uint64_t end_unit = (end + FTL_UNIT_SIZE - 1) / FTL_UNIT_SIZE;
	while (x < end_unit && (f->l2p[x] != L2P_UNMAPPED) == m)
		x++;
	*mapped = m;
	uint64_t run_end = x * FTL_UNIT_SIZE;
	return (run_end < end ? run_end : end) - off;
}
