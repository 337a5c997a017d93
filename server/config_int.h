/*
 * server/config_int.h - what server/config.c (reading flashd.conf: lines,
 * sections, defaults, cross-checks, reload) and server/config_keys.c (the
 * key table: each key's parsing and storage) share.  Nothing else includes
 * it; the rest of flashd uses server/flashd.h's config_* functions.
 */
#ifndef FLASHD_CONFIG_INT_H
#define FLASHD_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "server/flashd.h"

struct card_cfg {
	char *name;
	int timing;
};

struct seen {
	char *name;
	int line;
};

/* One config_load: owned by it, the key parsers read path and lineno. */
struct parse_ctx {
	struct server_cfg *cfg;
	const char *path;
	FILE *fp;
	int lineno;            /* line inih is parsing: one reader call per line */
	struct card_cfg cards[16];
	int ncards;
	struct seen *sections; /* every section header so far */
	int nsections;
	struct seen *keys;     /* keys of the current section */
	int nkeys;
	char err[1024];        /* the first error; parsing stops there */
};

/* config.c: strdup and realloc that exit on out of memory (start-up and
 * reload only, never on the I/O path); xstrdup(NULL) is "". */
char *xstrdup(const char *s);
void *xrealloc(void *p, size_t n);

/* config_keys.c */
/* key = value in [card NAME] (card: NAME), else in [dimm NAME] (d: that
 * ioDimm) or [server] (d NULL): 0, or -1 with why (the part of the error
 * after "FILE:LINE: [SECTION] KEY = 'VALUE': "). */
int config_key(struct parse_ctx *x, const char *card, struct dimm_cfg *d, const char *key,
	       const char *value, char *why, size_t len);
/* Whether key may be given more than once in its section (listen, allow, ...). */
bool config_key_repeatable(const char *key);
/* The table's defaults (rows with DEFAULT) of the keys neither the file nor
 * the command line set: of [server] (d NULL) or of the ioDimm d. */
void config_key_defaults(struct server_cfg *cfg, struct dimm_cfg *d);
/* A listen address "ADDR[ tls=MODE]": 0, or -EINVAL with the reason in err. */
int check_listen_spec(const char *spec, char *err, size_t errlen);

#endif
