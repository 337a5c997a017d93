/*
 * hw/nand_sim_faults.c - fault injection on the simulator (its controls in
 * hw/nand_sim.h): power cuts after N operations, refused submissions,
 * image I/O errors, read error rates, bad pages, blocks and dies, flipped
 * bytes.  Owns the armed faults and the page error list.  The controls are
 * called by tests, flashctl and the server (flashctl inject) on a device
 * with NAND_CAP_SIM; the op engine and the media ask here whether a fault
 * strikes.
 */
#include <errno.h>
#include <stdlib.h>

#include "hw/nand_sim_int.h"

bool fault_cut_now(struct sim *s)
{
	s->ops_executed++;
	if (!s->cut_at || s->ops_executed < s->cut_at)
		return false;
	s->dead = true;
	s->cut_at = 0;
	return true;
}

bool fault_refuse_submit(struct sim *s)
{
	if (!s->refuse_at || ++s->submits < s->refuse_at)
		return false;
	s->refuse_at = 0; /* injected: the backend cannot take it */
	return true;
}

enum nand_status page_error_lookup(struct sim *s, uint64_t ppa)
{
	for (size_t i = 0; i < s->perr_len; i++)
		if (s->perr[i].ppa == ppa)
			return s->perr[i].st;
	return NAND_OK;
}

void page_errors_drop_block(struct sim *s, uint32_t block)
{
	uint64_t lo = (uint64_t)block * s->dev.geo.pages_per_block;
	uint64_t hi = lo + s->dev.geo.pages_per_block;
	size_t j = 0;
	for (size_t i = 0; i < s->perr_len; i++)
		if (s->perr[i].ppa < lo || s->perr[i].ppa >= hi)
			s->perr[j++] = s->perr[i];
	s->perr_len = j;
}

int nand_sim_set_faults(struct nand_dev *d, const struct nand_sim_faults *f)
{
	if (!nand_is_sim(d))
		return -EOPNOTSUPP;
	struct sim *s = to_sim(d);
	s->cut_at = f->power_cut_after ? s->ops_executed + f->power_cut_after : 0;
	s->corrected_ppm = f->corrected_ppm;
	s->uncorrectable_ppm = f->uncorrectable_ppm;
	s->submits = 0;
	s->refuse_at = f->refuse_submit_after;
	s->io_error_from = f->io_error_after ? s->programs + f->io_error_after : 0;
	return 0;
}

int nand_sim_set_error_rates(struct nand_dev *d, uint32_t corrected_ppm, uint32_t uncorrectable_ppm)
{
	if (!nand_is_sim(d))
		return -EOPNOTSUPP;
	struct sim *s = to_sim(d);
	s->corrected_ppm = corrected_ppm;
	s->uncorrectable_ppm = uncorrectable_ppm;
	return 0;
}

bool nand_sim_powered(const struct nand_dev *d)
{
	return !((const struct sim *)d)->dead;
}

void nand_sim_power_on(struct nand_dev *d)
{
	struct sim *s = to_sim(d);
	/* the queued completions belong to the world before the cut */
	s->fifo_head = s->fifo_tail = NULL;
	nand_abandon_all(d);
	s->dead = false;
	s->cut_at = 0;
	timing_reset(s);
}

uint64_t nand_sim_op_count(const struct nand_dev *d)
{
	return ((const struct sim *)d)->ops_executed;
}

int nand_sim_fail_block(struct nand_dev *d, uint32_t block, bool fail_program, bool fail_erase)
{
	if (!nand_is_sim(d) || block >= nand_blocks(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	struct sim_block b = s->blocks[block];
	if (fail_program)
		b.flags |= SB_FAIL_PROGRAM;
	if (fail_erase)
		b.flags |= SB_FAIL_ERASE;
	blk_store(s, block, b);
	return 0;
}

int nand_sim_page_error(struct nand_dev *d, uint64_t ppa, enum nand_status st)
{
	if (!nand_is_sim(d) || ppa >= nand_pages(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	for (size_t i = 0; i < s->perr_len; i++)
		if (s->perr[i].ppa == ppa) {
			s->perr[i].st = st;
			return 0;
		}
	if (s->perr_len == s->perr_cap) {
		size_t cap = s->perr_cap ? s->perr_cap * 2 : 16;
		struct page_err *p = realloc(s->perr, cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		s->perr = p;
		s->perr_cap = cap;
	}
	s->perr[s->perr_len++] = (struct page_err){ ppa, st };
	return 0;
}

int nand_sim_flip_bytes(struct nand_dev *d, uint64_t ppa, uint32_t offset, uint32_t nbytes)
{
	if (!nand_is_sim(d) || ppa >= nand_pages(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	const struct nand_geometry *g = &d->geo;
	uint32_t block = (uint32_t)(ppa / g->pages_per_block);
	if (s->readonly || s->metadata_only || ppa % g->pages_per_block >= s->blocks[block].wp ||
	    offset > s->slot_size || nbytes > s->slot_size - offset)
		return -EINVAL;
	uint8_t *p = ram_slot(s, ppa) + offset;
	for (uint32_t i = 0; i < nbytes; i++)
		p[i] ^= 0xFF;
	return 0;
}

int nand_sim_fail_die(struct nand_dev *d, uint32_t die)
{
	if (!nand_is_sim(d) || die >= nand_dies(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	s->hdr->die_failed[die / 8] |= (uint8_t)(1u << (die % 8));
	if (s->fd >= 0)
		header_seal(s);
	return 0;
}
