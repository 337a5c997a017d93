/*
 * hw/nand_sim_errors.c - the simulator's error model: bit errors of page
 * reads (wear, retention, read disturb) and grown bad blocks, and its
 * controls in hw/nand_sim.h.  Owns the per-block model state (struct
 * em_block), its random stream and its statistics.  Called by the media
 * (hw/nand_sim_media.c) on every read, program and erase while the model
 * is on, and by the op engine at open.
 *
 * The model (off unless asked for; parameters in struct nand_reliability,
 * hw/nand_sim.h) judges every read of a programmed page: it keeps per
 * block, in memory, the time of its first and last program since erase (a
 * page's program time is interpolated between them by its index) and its
 * reads since erase, and caches the block's wear-dependent coefficients
 * (recomputed when its erase count changes).  A read costs the RBER sum,
 * one random draw and one comparison: the number of bit errors in the page
 * is Poisson with mean L = RBER * page bits, and a draw u >= L means none
 * (P(0) = exp(-L) >= 1 - L).  Only otherwise are the errors counted
 * (inverse Poisson CDF from the same draw) and spread over the codewords.
 * Each read draws anew: errors are not sticky between reads of a page.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hw/nand_sim_int.h"

#define NS_PER_YEAR (365.25 * 86400e9)

/* The error model's clock: the device's (virtual, or the monotonic clock at
 * tick resolution: retention needs no better) plus nand_sim_age's advance. */
static uint64_t em_now(struct sim *s)
{
	if (s->virtual_time)
		return s->vclock + s->em_age_ns;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + s->em_age_ns;
}

double em_uniform(struct sim *s)
{
	return (double)(xorshift64s(&s->em_rng) >> 11) * 0x1.0p-53;
}

/* Block b's coefficients from its erase count. */
void em_rates(struct sim *s, uint32_t b)
{
	const struct nand_reliability *r = &s->rel;
	struct em_block *e = &s->em[b];
	double w = (double)s->blocks[b].erase_count / (s->dev.rated_pe_cycles ? s->dev.rated_pe_cycles : 1);
	double ww = pow(w, r->wear_exp);
	e->base = (float)(r->rber_fresh + r->rber_rated * ww);
	e->ret = (float)(r->rber_ret_year * (r->ret_fresh + (1 - r->ret_fresh) * ww) / NS_PER_YEAR);
	e->rd = (float)(r->rber_read * (1 + (r->read_wear - 1) * ww));
	double h = r->fail_rated * exp(r->fail_growth * (w - 1));
	if (h > 1)
		h = 1;
	e->p_erase = (float)(h / 2);
	e->p_prog = (float)(h / 2 / s->dev.geo.pages_per_block);
}

void em_programmed(struct sim *s, uint32_t b, uint32_t page)
{
	struct em_block *e = &s->em[b];
	uint64_t now = em_now(s);
	if (page == 0)
		e->t_first = now;
	e->t_last = now;
}

void em_erased(struct sim *s, uint32_t b)
{
	s->em[b].t_first = s->em[b].t_last = 0;
	s->em[b].reads = 0;
	em_rates(s, b);
}

/* Expected RBER of a read of page (programmed, wp pages in the block) now. */
static double em_rber(struct sim *s, uint32_t b, uint32_t page, uint32_t wp, uint64_t now)
{
	const struct em_block *e = &s->em[b];
	double t = (double)e->t_first;
	if (wp > 1)
		t += (double)(e->t_last - e->t_first) * page / (wp - 1);
	double age = (double)now - t;
	if (age < 0)
		age = 0;
	return e->base + e->ret * age + (double)e->rd * e->reads;
}

/* Smallest k with Poisson(lam) CDF(k) >= v (lam <= ~700). */
static uint32_t poisson_inv(double lam, double v)
{
	double p = exp(-lam), c = p;
	uint32_t k = 0, cap = (uint32_t)(lam + 12 * sqrt(lam) + 40);
	while (v > c && k < cap) {
		k++;
		p *= lam / k;
		c += p;
	}
	return k;
}

/* Judge a read of a programmed page: NAND_OK, NAND_CORRECTED (with the
 * counts in op) or NAND_UNCORRECTABLE. */
enum nand_status em_read(struct sim *s, struct nand_op *op, uint32_t wp)
{
	double lam = em_rber(s, op->block, op->page, wp, em_now(s)) * s->em_page_bits;
	double u = em_uniform(s);
	s->em_st.reads++;
	if (u >= lam)
		return NAND_OK; /* the common case: 1 - exp(-lam) <= lam */
	uint32_t ncw = s->em_ncw, ecc = s->rel.ecc_bits;
	uint32_t cnt[SIM_EM_MAX_CW] = { 0 };
	uint32_t total = 0, worst = 0;
	if (lam <= 700) {
		/* the page's errors, then each to a codeword at random */
		total = poisson_inv(lam, 1 - u);
		if (!total)
			return NAND_OK;
		if (ncw == 1) {
			worst = total;
		} else {
			for (uint32_t i = 0; i < total; i++) {
				uint32_t c = (uint32_t)(((xorshift64s(&s->em_rng) >> 32) * ncw) >> 32);
				if (++cnt[c] > worst)
					worst = cnt[c];
			}
		}
	} else {
		double lcw = lam / ncw;
		if (lcw > 700)
			worst = UINT32_MAX;
		for (uint32_t c = 0; c < ncw && worst <= ecc; c++) {
			uint32_t k = poisson_inv(lcw, em_uniform(s));
			total += k;
			if (k > worst)
				worst = k;
		}
	}
	if (worst > ecc) {
		s->em_st.reads_uncorrectable++;
		return NAND_UNCORRECTABLE;
	}
	s->em_st.reads_corrected++;
	s->em_st.bits_corrected += total;
	op->corrected_bits = (uint16_t)(total > UINT16_MAX ? UINT16_MAX : total);
	op->corrected_max = (uint16_t)(worst > UINT16_MAX ? UINT16_MAX : worst);
	return NAND_CORRECTED;
}

/* Error model on: state for every block; programmed pages count as
 * programmed now. */
int em_enable(struct sim *s)
{
	uint32_t n = nand_blocks(&s->dev.geo);
	struct em_block *em = calloc(n, sizeof *em);
	if (!em)
		return -ENOMEM;
	s->em = em;
	uint64_t now = em_now(s);
	for (uint32_t b = 0; b < n; b++) {
		em_rates(s, b);
		if (s->blocks[b].wp)
			em[b].t_first = em[b].t_last = now;
	}
	return 0;
}

int em_init(struct sim *s, const struct nand_sim_config *cfg, const struct nand_reliability *rel)
{
	const struct nand_geometry *g = &s->dev.geo;
	s->rel = *rel;
	s->dev.ecc_bits = s->rel.ecc_bits;
	s->dev.ecc_codeword_bytes = s->rel.ecc_codeword_bytes;
	uint32_t cwb = s->rel.ecc_codeword_bytes ? s->rel.ecc_codeword_bytes : g->page_size;
	s->em_ncw = g->page_size / cwb ? g->page_size / cwb : 1;
	if (s->em_ncw > SIM_EM_MAX_CW)
		s->em_ncw = SIM_EM_MAX_CW;
	s->em_page_bits = 8.0 * (g->page_size + g->spare_size);
	s->em_rng = (cfg->seed ? cfg->seed : 0x853c49e6748fea9bull) ^ 0xD1B54A32D192ED03ull;
	if (!s->em_rng)
		s->em_rng = 1;
	bool em = cfg->error_model;
	const char *env = getenv("FLASHD_SIM_ERROR_MODEL");
	if (env && *env)
		em = strcmp(env, "0") != 0;
	return em ? em_enable(s) : 0;
}

/* ---- controls ------------------------------------------------------------ */

int nand_sim_set_error_model(struct nand_dev *d, bool on)
{
	if (!nand_is_sim(d))
		return -EINVAL;
	struct sim *s = to_sim(d);
	if (on && !s->em)
		return em_enable(s);
	if (!on) {
		free(s->em);
		s->em = NULL;
	}
	return 0;
}

int nand_sim_set_erase_count(struct nand_dev *d, uint32_t block, uint32_t count)
{
	if (!nand_is_sim(d) || block >= nand_blocks(&d->geo))
		return -EINVAL;
	struct sim *s = to_sim(d);
	if (s->readonly)
		return -EROFS;
	struct sim_block b = s->blocks[block];
	b.erase_count = count;
	blk_store(s, block, b);
	if (s->em)
		em_rates(s, block);
	return 0;
}

int nand_sim_age(struct nand_dev *d, uint64_t ns)
{
	if (!nand_is_sim(d) || !to_sim(d)->em)
		return -EINVAL;
	to_sim(d)->em_age_ns += ns;
	return 0;
}

double nand_sim_page_rber(struct nand_dev *d, uint64_t ppa)
{
	if (!nand_is_sim(d) || !to_sim(d)->em || ppa >= nand_pages(&d->geo))
		return -1;
	struct sim *s = to_sim(d);
	uint32_t b = (uint32_t)(ppa / d->geo.pages_per_block), pg = (uint32_t)(ppa % d->geo.pages_per_block);
	uint32_t wp = s->blocks[b].wp;
	if (pg >= wp)
		return 0;
	return em_rber(s, b, pg, wp, em_now(s));
}

void nand_sim_error_stats(const struct nand_dev *d, struct nand_sim_error_stats *st)
{
	if (nand_is_sim(d))
		*st = ((const struct sim *)d)->em_st;
	else
		memset(st, 0, sizeof *st);
}
