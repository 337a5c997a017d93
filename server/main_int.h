/*
 * server/main_int.h - what flashd's main-thread files share: main.c (start,
 * stop, signals), admit.c (connection slots), listen.c (listening sockets)
 * and reload.c (the configuration while running).  The rest of the server
 * uses flashd.h.
 */
#ifndef FLASHD_MAIN_INT_H
#define FLASHD_MAIN_INT_H

#include <stdint.h>
#include <time.h>

#include "server/flashd.h"

/* The server of this process (main.c).  Main thread, but for what
 * struct server says is shared. */
extern struct server srv;

/* CLOCK_MONOTONIC in ns: the main thread's log rate limits and back-off. */
static inline uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* admit.c */
void admit_connection(int fd, const char *peer, int tls_mode, const struct conn_slot *slot);
void waiting_drop_all(void);            /* shutdown: the waiting room is closed */
void addr_tab_free(struct server *s);   /* exit */

/* listen.c */
int listen_tcp(const char *fullspec, char *err, size_t errlen);
int listen_unix(const char *path, char *err, size_t errlen);
void listeners_enable(struct server *s, bool on);
void listeners_close_owned(struct server *s);

/* reload.c */
int config_build_first(const struct server_cfg *cli, const char *config, struct server_cfg *out,
		       char *err, size_t errlen);
void reload_exit(void);

#endif
