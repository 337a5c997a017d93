/*
 * ftl/gc_int.h - what the garbage collection files share: gc.c (the
 * victims: scan, examine, finish) and gc_admit.c (pacing, room, which
 * victim).  Included by those two files only; the rest of ftl/ sees GC
 * through ftl_int.h.
 */
#ifndef FLASHD_FTL_GC_INT_H
#define FLASHD_FTL_GC_INT_H

#include "ftl/ftl_int.h"

/* the credit one victim page costs (f->gc_credit; gc_user_page earns
 * gc_ratio per user page) */
#define CREDIT_ONE 16

/* gc_admit.c */
/* the user stream's submitted hook: a host page earns GC credit */
void gc_user_page(struct ftl *f, const struct slot *sl, bool retry);
/* the pool is low, or blocks wait to be retired or refreshed */
bool gc_needed(struct ftl *f);
/* GC runs without pacing when writes are stuck or blocks must be retired */
bool gc_unpaced(struct ftl *f);
/* 1: a victim started; 0: not; -1: none can start now (this round) */
int victim_admit(struct ftl *f);

/* gc.c */
/* the index of a free victim slot, -1 if none */
int victim_free_slot(struct ftl *f);
/* block b becomes victim slot vi: retire (a program failed on it), urgent
 * (unpaced) */
void victim_start(struct ftl *f, int vi, uint32_t b, bool retire, bool urgent);

#endif
