/*
 * ftl/upage.c - the FTL's 4 KiB units over NAND pages of 8 or 16 KiB.
 *
 * Owns a nand_dev of the unit geometry (page_size 4096; pages_per_block
 * and spare_size scaled by the units per page, upp) over the real device,
 * which stays its owner's: ftl_geometry_init makes it, ftl_geometry_fini
 * closes it.  The FTL sees one unit per page and keeps the NAND rules of
 * hw/nand.h on units; this file turns them into the device's:
 * - a program of unit slot s of NAND page p is gathered until the page's
 *   upp units are in (in any order: a pad may complete a page before the
 *   unit handed out first in it is submitted; one page of a block at a
 *   time), then the page is programmed at once and every unit completes
 *   with its status: a torn page takes all its units, as a torn 4 KiB page
 *   takes its one;
 * - a read reads the whole NAND page and hands out the unit's slice (and
 *   its share of the spare bytes); an erase is the block's erase;
 * - upage_seal programs a page still gathering as it is (its missing units
 *   erased), for an owner that writes nothing more into the block (a
 *   checkpoint's last pages, a block retired after a failed program, a
 *   close): a later program into the block fails (PROGRAM_FAILED) until
 *   it is erased.
 * The FTL hands a NAND page's units out in a row and pads a page partly
 * handed out when it waits for it (writer.c, parity_ppl.c upage_pad), so
 * nothing waits here for units that never come.  Costs: a unit read moves
 * the whole NAND page (the timing model charges the transfer); a program
 * copies each unit once into the page buffer.  Called only through the
 * nand_dev it returns, on the ioDimm's thread.
 */
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "ftl/ftl_int.h"
#include "hw/nand_backend.h"

#define UP_MAX 4 /* units per NAND page: 16 KiB */

/* an operation on the NAND page and the unit operations it carries */
struct up_ctx {
	struct nand_op op;
	struct nand_op *v[UP_MAX];   /* programs: by slot in the page */
	uint32_t n;                  /* how many v holds */
	struct up_dev *u;
	uint8_t *buf, *spare;        /* a NAND page and its spare bytes */
	struct up_ctx *next_free;
	struct up_ctx *next_all;     /* every context made, freed at close */
};

struct up_dev {
	struct nand_dev dev;         /* the unit view; priv = this */
	struct nand_dev *inner;
	uint32_t upp, vspare;        /* units per page, spare bytes per unit */
	struct up_ctx **gather;      /* [blocks] the page gathering, or NULL */
	uint32_t *sealed;            /* [blocks] units below are sealed (all:
	                              * UINT32_MAX, until the next erase) */
	struct up_ctx *free, *all;
	struct nand_op *failed;      /* refused units, delivered at the next poll */
};

/* A context from the pool, which grows to the most ever in flight at once
 * (the FTL's own bounds: its rings, checkpoint and pad ops). */
static struct up_ctx *ctx_get(struct up_dev *u)
{
	struct up_ctx *c = u->free;
	if (c) {
		u->free = c->next_free;
	} else {
		c = calloc(1, sizeof *c);
		if (!c)
			return NULL;
		c->u = u;
		c->buf = aligned_alloc(4096, u->inner->geo.page_size);
		c->spare = malloc(u->inner->geo.spare_size);
		if (!c->buf || !c->spare) {
			free(c->buf);
			free(c->spare);
			free(c);
			return NULL;
		}
		c->next_all = u->all;
		u->all = c;
	}
	memset(&c->op, 0, sizeof c->op);
	memset(c->v, 0, sizeof c->v);
	c->n = 0;
	return c;
}

static void ctx_put(struct up_dev *u, struct up_ctx *c)
{
	c->next_free = u->free;
	u->free = c;
}

static void ctx_done(struct nand_op *op)
{
	struct up_ctx *c = op->priv;
	struct up_dev *u = c->u;
	struct nand_op *v[UP_MAX];
	uint32_t n = 0;
	for (uint32_t i = 0; i < UP_MAX; i++) {
		struct nand_op *x = c->v[i];
		if (!x)
			continue;
		v[n++] = x;
		x->status = op->status;
		x->err = op->err;
		x->corrected_bits = op->corrected_bits;
		x->corrected_max = op->corrected_max;
		if (op->type == NAND_OP_READ) {
			uint32_t slot = x->page % u->upp;
			const uint8_t *unit = c->buf + (size_t)slot * FTL_UNIT_SIZE;
			if (x->data)
				memcpy(x->data, unit, FTL_UNIT_SIZE);
			if (x->flags & NAND_OPF_DATA_CRC) /* the unit's, not the page's */
				x->data_crc = crc32c(0, unit, FTL_UNIT_SIZE);
			if (x->spare)
				memcpy(x->spare, c->spare + (size_t)slot * u->vspare, u->vspare);
		}
	}
	ctx_put(u, c);
	for (uint32_t i = 0; i < n; i++)
		nand_deliver(&u->dev, v[i]);
}

static void fail_later(struct up_dev *u, struct nand_op *v, enum nand_status st)
{
	v->status = st;
	v->next = u->failed;
	u->failed = v;
}

static int inner_submit(struct up_dev *u, struct up_ctx *c)
{
	c->op.done = ctx_done;
	c->op.priv = c;
	return nand_submit(u->inner, &c->op);
}

/* Program the block's page still gathering, as it is; programs into the
 * block fail until its next erase (its owner writes nothing more there). */
static void seal(struct up_dev *u, uint32_t block)
{
	struct up_ctx *g = u->gather[block];
	u->sealed[block] = UINT32_MAX;
	if (!g)
		return;
	u->gather[block] = NULL;
	if (inner_submit(u, g)) {
		for (uint32_t i = 0; i < UP_MAX; i++)
			if (g->v[i])
				fail_later(u, g->v[i], NAND_INVALID);
		ctx_put(u, g);
	}
}

static int up_submit(struct nand_dev *d, struct nand_op *v)
{
	struct up_dev *u = d->priv;
	uint32_t ppage = v->page / u->upp, slot = v->page % u->upp;
	if (v->type == NAND_OP_PROGRAM) {
		struct up_ctx *g = u->gather[v->block];
		/* into a sealed block, below the page gathering, a slot taken,
		 * or a page beyond while one gathers: the NAND would not take it */
		if (v->page < u->sealed[v->block] || (g && (g->op.page != ppage || g->v[slot]))) {
			fail_later(u, v, NAND_PROGRAM_FAILED);
			return 0;
		}
		if (!g) {
			if (!(g = ctx_get(u)))
				return -ENOMEM;
			g->op.type = NAND_OP_PROGRAM;
			g->op.block = v->block;
			g->op.page = ppage;
			g->op.data = g->buf;
			g->op.spare = g->spare;
			memset(g->buf, 0xFF, u->inner->geo.page_size);
			memset(g->spare, 0xFF, u->inner->geo.spare_size);
			u->gather[v->block] = g;
		}
		memcpy(g->buf + (size_t)slot * FTL_UNIT_SIZE, v->data, FTL_UNIT_SIZE);
		if (v->spare)
			memcpy(g->spare + (size_t)slot * u->vspare, v->spare, u->vspare);
		g->op.flags |= v->flags;
		g->v[slot] = v;
		if (++g->n < u->upp)
			return 0;
		u->gather[v->block] = NULL;
		u->sealed[v->block] = (ppage + 1) * u->upp; /* programmed: below is done */
		int rc = inner_submit(u, g);
		if (rc) {
			for (uint32_t i = 0; i < u->upp; i++)
				if (g->v[i] && g->v[i] != v)
					fail_later(u, g->v[i], NAND_INVALID);
			ctx_put(u, g);
		}
		return rc; /* v itself refused: its owner sees rc */
	}
	struct up_ctx *c = ctx_get(u);
	if (!c)
		return -ENOMEM;
	c->op.type = v->type;
	c->op.block = v->block;
	c->op.flags = v->flags & ~NAND_OPF_DATA_CRC; /* ctx_done sums the unit */
	if (v->type == NAND_OP_READ) {
		c->op.page = ppage;
		c->op.data = v->data || (v->flags & NAND_OPF_DATA_CRC) ? c->buf : NULL;
		c->op.spare = v->spare ? c->spare : NULL;
	} else {
		c->op.page = 0;
		u->sealed[v->block] = 0;
	}
	c->v[0] = v;
	c->n = 1;
	int rc = inner_submit(u, c);
	if (rc)
		ctx_put(u, c);
	return rc;
}

void upage_seal(struct nand_dev *d, uint32_t block)
{
	seal(d->priv, block);
}

void upage_seal_all(struct nand_dev *d)
{
	struct up_dev *u = d->priv;
	uint32_t nb = nand_blocks(&u->inner->geo);
	for (uint32_t b = 0; b < nb; b++)
		seal(u, b);
}

static int up_poll(struct nand_dev *d, uint64_t now)
{
	struct up_dev *u = d->priv;
	int n = 0;
	while (u->failed) {
		struct nand_op *v = u->failed;
		u->failed = v->next;
		v->next = NULL;
		nand_deliver(d, v);
		n++;
	}
	return n + nand_poll(u->inner, now);
}

static uint64_t up_next_due(struct nand_dev *d)
{
	struct up_dev *u = d->priv;
	return u->failed ? 0 : nand_next_due(u->inner);
}

static int up_sync(struct nand_dev *d)
{
	return nand_sync(((struct up_dev *)d->priv)->inner);
}

static uint32_t up_erase_count(struct nand_dev *d, uint32_t b)
{
	return nand_erase_count(((struct up_dev *)d->priv)->inner, b);
}

static bool up_factory_bad(struct nand_dev *d, uint32_t b)
{
	return nand_factory_bad(((struct up_dev *)d->priv)->inner, b);
}

static uint64_t up_now(struct nand_dev *d)
{
	return nand_now(((struct up_dev *)d->priv)->inner);
}

static void up_wait_until(struct nand_dev *d, uint64_t t)
{
	nand_wait_until(((struct up_dev *)d->priv)->inner, t);
}

static int up_temperature_mc(struct nand_dev *d, int32_t *mc)
{
	return nand_temperature_mc(((struct up_dev *)d->priv)->inner, mc);
}

/* The view only: operations still gathering or queued on the device (an
 * abandoned FTL's) are abandoned, as a backend's close abandons what is
 * queued; the device stays open. */
static void up_close(struct nand_dev *d)
{
	struct up_dev *u = d->priv;
	while (u->all) {
		struct up_ctx *c = u->all;
		u->all = c->next_all;
		free(c->buf);
		free(c->spare);
		free(c);
	}
	free(u->gather);
	free(u->sealed);
	free(u);
}

static const struct nand_ops up_ops = {
	.name = "upage",
	.submit = up_submit,
	.poll = up_poll,
	.next_due = up_next_due,
	.sync = up_sync,
	.erase_count = up_erase_count,
	.factory_bad = up_factory_bad,
	.now = up_now,
	.wait_until = up_wait_until,
	.close = up_close,
	.temperature_mc = up_temperature_mc,
};

struct nand_dev *upage_wrap(struct nand_dev *inner)
{
	struct up_dev *u = calloc(1, sizeof *u);
	uint32_t nb = nand_blocks(&inner->geo);
	if (!u)
		return NULL;
	u->inner = inner;
	u->upp = inner->geo.page_size / FTL_UNIT_SIZE;
	u->vspare = inner->geo.spare_size / u->upp;
	u->gather = calloc(nb, sizeof *u->gather);
	u->sealed = calloc(nb, sizeof *u->sealed);
	if (!u->gather || !u->sealed) {
		free(u->gather);
		free(u->sealed);
		free(u);
		return NULL;
	}
	u->dev = *inner;
	u->dev.ops = &up_ops;
	u->dev.inflight = 0;
	/* read_now would bypass the gathering; the simulator's own features
	 * (fault injection, its clock's knobs) stay with the device */
	u->dev.caps = inner->caps & ~(NAND_CAP_READ_NOW | NAND_CAP_SIM);
	u->dev.priv = u;
	u->dev.geo.page_size = FTL_UNIT_SIZE;
	u->dev.geo.pages_per_block *= u->upp;
	u->dev.geo.spare_size = u->vspare;
	return &u->dev;
}
