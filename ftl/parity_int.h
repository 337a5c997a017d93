/*
 * ftl/parity_int.h - what the files of Flashback parity share: a band's
 * parity context and its stripes (struct band_par, struct par_stripe).
 * parity.c owns them and alone changes them; parity_ppl.c,
 * parity_rebuild.c and parity_recover.c read them (a stripe's XOR so far,
 * its members).  Included by those four files only; the rest of ftl/ sees
 * parity through ftl_int.h.
 */
#ifndef FLASHD_FTL_PARITY_INT_H
#define FLASHD_FTL_PARITY_INT_H

#include "ftl/ftl_int.h"

/*
 * Stripes of one band in progress at once.  With the parity rotating, a
 * stripe's parity program queues behind the data programs and GC reads of
 * a busy die; with 16 slots a GC band waiting for one made its relocations
 * fall back to the other temperature's band (writer.c), mixing hot and
 * cold data: 80/20 WA 2.766 with 16 slots, 2.516 with 64 (2.550 with the
 * parity fixed in the last column; bench, doc/ftl.md "Flashback parity").
 * Memory: PAR_STRIPES pages per parity context (36 contexts on the ioDimm:
 * 9 MiB).
 */
#define PAR_STRIPES 64

enum { PS_FREE, PS_FILLING, PS_PROGRAMMING };

struct par_stripe {
	uint32_t page;            /* the stripe (page index) while not FREE */
	uint8_t state;            /* PS_* */
	bool sealed;              /* its last data page was handed out */
	uint64_t ticket;          /* sealed: f->par_ticket then (a flush
	                           * waits for its parity program) */
	uint64_t opened;          /* f->par_opens when it left FREE */
	uint64_t last_handout;    /* f->handouts at its newest member */
	bool gc_linked;           /* on f->gc_stripes (a GC band's, not FREE) */
	struct par_stripe *gc_prev, *gc_next;
	uint16_t need;            /* handed out, not yet submitted */
	uint32_t sub_mask;        /* columns submitted (XORed into acc) */
	uint64_t max_seq;         /* newest sequence number among them */
	struct nand_op op;        /* the parity program */
	uint8_t *acc;             /* one page: XOR of the submitted data */
	uint8_t *spare;           /* one spare area: the parity page's own
	                           * ftl_spare, then the XOR of the members' */
};

struct band_par {
	struct ftl *f;
	uint32_t band;            /* FTL_NO_BLOCK: free */
	uint32_t pcol;            /* the parity column */
	uint32_t next;            /* next stripe whose parity is due */
	uint32_t busy;            /* stripes not FREE */
	bool dead;                /* the parity block failed: no more parity */
	bool gc;                  /* a band of the GC stream (f->gc_stripes) */
	struct par_stripe st[PAR_STRIPES];
	struct band_par *next_free;
};

#define SPARE_SZ ((uint32_t)sizeof(struct ftl_spare))

/* the column (channel) of block b in its band */
static inline uint32_t block_col(const struct ftl *f, uint32_t b)
{
	return block_die(f, b) / f->dies_per_channel;
}

static inline struct band_par *band_par_of(const struct ftl *f, uint32_t bi)
{
	uint16_t i = f->band[bi].par;
	return i ? &f->par_pool[i - 1] : NULL;
}

/* parity.c: the parity column of band bi among the columns in mask */
uint32_t par_pick_pcol(const struct ftl *f, uint32_t bi, uint32_t mask);
/* parity_ppl.c: the pad and partial-parity programs (par_init) */
int par_ppl_init(struct ftl *f);
int par_pad_init(struct ftl *f, uint32_t npad);
/* parity_rebuild.c: the rebuild contexts (par_init) */
int rb_init(struct ftl *f);

#endif
