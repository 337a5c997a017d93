/*
 * ftl/trim.c - trim records: how unmapping becomes durable.
 *
 * Trims (and write-zeroes, and units lost to media errors) change only the
 * l2p.  The ranges collect in a pending list; a record page holding them is
 * put in the user stream when a flush needs it, when the list is full, or
 * before a write to a unit in the list (so the record's sequence number
 * orders it before that write).  Recovery applies records in log order.
 * Cost: a write tests the pending list only if its unit lies between the
 * lowest and highest pending unit.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

uint32_t trim_record_capacity(struct ftl *f)
{
	return (f->page_size - (uint32_t)sizeof(struct ftl_trim_hdr)) /
	       (uint32_t)sizeof(struct ftl_trim_range);
}

bool trim_pending_overlaps(struct ftl *f, uint64_t unit)
{
	if (unit < f->trim_lo || unit >= f->trim_hi)
		return false;
	for (uint32_t i = 0; i < f->ntrim_pend; i++) {
		const struct ftl_trim_range *t = &f->trim_pend[i];
		uint32_t n = t->count & ~FTL_TRIM_LOST;
		if (unit >= t->start && unit - t->start < n)
			return true;
	}
	return false;
}

static void bounds_add(struct ftl *f, uint32_t start, uint32_t count)
{
	if (start < f->trim_lo)
		f->trim_lo = start;
	if (start + count > f->trim_hi)
		f->trim_hi = start + count;
}

bool trim_pending_add(struct ftl *f, uint32_t start, uint32_t count, bool lost)
{
	uint32_t flag = lost ? FTL_TRIM_LOST : 0;
	if (!count)
		return true;
	if (f->ntrim_pend) {
		struct ftl_trim_range *last = &f->trim_pend[f->ntrim_pend - 1];
		uint32_t n = last->count & ~FTL_TRIM_LOST;
		if ((last->count & FTL_TRIM_LOST) == flag && last->start + n == start &&
		    (uint64_t)n + count < FTL_TRIM_LOST) {
			last->count += count;
			bounds_add(f, start, count);
			return true;
		}
	}
	if (f->ntrim_pend == f->trim_cap)
		return false;
	f->trim_pend[f->ntrim_pend++] = (struct ftl_trim_range){ start, count | flag };
	bounds_add(f, start, count);
	return true;
}

bool trim_close_record(struct ftl *f)
{
	/* records may dip below the GC reserve: finishing a victim waits for
	 * them, and only the checkpoint's own blocks are out of reach */
	return trim_close_record_floor(f, f->cp_reserve);
}

bool trim_close_record_floor(struct ftl *f, uint32_t floor)
{
	struct ring *r = &f->stream[STREAM_USER].ring;
	if (!f->ntrim_pend)
		return true;
	if (ring_free(r) < 1)
		return false;
	uint32_t ppa = stream_next_page(f, &f->stream[STREAM_USER], floor);
	if (ppa == FTL_NO_BLOCK)
		return false;
	uint32_t idx = (uint32_t)(r->fill & r->mask);
	uint8_t *page = ring_fill_data(r, idx);
	struct ftl_trim_hdr h = { FTL_TRIM_MAGIC, f->ntrim_pend };
	size_t len = f->ntrim_pend * sizeof(struct ftl_trim_range);
	memcpy(page, &h, sizeof h);
	memcpy(page + sizeof h, f->trim_pend, len);
	memset(page + sizeof h + len, 0, f->page_size - sizeof h - len);

	struct slot *sl = &r->slots[idx];
	sl->state = SLOT_FILLED;
	sl->type = FTL_PG_TRIM;
	sl->crc_known = false;
	sl->ppa = ppa;
	sl->lba = f->ntrim_pend;
	sl->seq = seq_take(f);
	r->fill++;
	f->trim_rec_end = r->fill;
	f->ntrim_pend = 0;
	f->trim_lo = UINT32_MAX;
	f->trim_hi = 0;
	return true;
}

/* Recovery: apply one record (the l2p holds no slot references then). */
void trim_apply_record(struct ftl *f, const void *page, uint64_t seq)
{
	struct ftl_trim_hdr h;
	memcpy(&h, page, sizeof h);
	if (h.magic != FTL_TRIM_MAGIC || h.nranges > trim_record_capacity(f)) {
		ftl_log(FTL_LOG_WARNING, "trim record seq %llu is damaged; ignored", (unsigned long long)seq);
		return;
	}
	const uint8_t *p = (const uint8_t *)page + sizeof h;
	for (uint32_t i = 0; i < h.nranges; i++) {
		struct ftl_trim_range t;
		memcpy(&t, p + i * sizeof t, sizeof t);
		uint32_t n = t.count & ~FTL_TRIM_LOST;
		uint32_t to = (t.count & FTL_TRIM_LOST) ? L2P_LOST : L2P_UNMAPPED;
		if (t.start >= f->units || n > f->units - t.start)
			continue;
		for (uint64_t u = t.start; u < (uint64_t)t.start + n; u++)
			f->l2p[u] = to;
	}
}
