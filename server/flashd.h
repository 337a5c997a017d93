/*
 * server/flashd.h - the flashd daemon: configuration, ioDimms and their
 * threads, NBD handshake and transmission, the control socket.
 *
 * Threads and ownership:
 *   main thread  - listeners, NBD handshakes, the control socket, signals.
 *   one thread per ioDimm - owns that ioDimm's FTL (which is not
 *                  thread-safe) and every connection in transmission to it,
 *                  on its own event loop.  All connections of an ioDimm share
 *                  one FTL on one thread, so a FLUSH on any of them covers
 *                  writes completed on all of them (CAN_MULTI_CONN).
 * After a successful NBD_OPT_GO (or EXPORT_NAME) the main thread hands the
 * socket to the ioDimm thread (dimm_adopt), with whatever bytes it had
 * already read past the handshake.
 * Lock order: server.lock (connection counts) before dimm.lock (hand-off
 * queue, stats snapshot); neither is held while calling into the FTL.
 * Connection slots: server.nconns counts every accepted socket until it is
 * closed (handshake or transmission), dimm.nconns those handed to that
 * ioDimm; each close path gives back exactly the slots it holds.
 * Shutdown: SIGTERM stops accepting and drops handshakes; each ioDimm stops
 * reading, answers what is in flight and closes its connections, or after
 * shutdown_timeout seconds force-closes what is left (replies dropped);
 * then it closes its FTL with a checkpoint.
 */
#ifndef FLASHD_SERVER_H
#define FLASHD_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>
#include <event2/event.h>

#include "ftl/ftl.h"

#define FLASHD_VERSION "0.1"
/*
 * Request sizes (doc/proto.md, "Block size constraints").  A client that
 * asked for NBD_INFO_BLOCK_SIZE in its NBD_OPT_GO is held to what it was
 * told: offsets and lengths multiples of the sector, READ and WRITE at most
 * MAX_PAYLOAD (else EINVAL).  Any other client (NBD_OPT_EXPORT_NAME, GO
 * without the request) may use any byte alignment and READ/WRITE up to
 * MAX_PAYLOAD_ANY.  For both, TRIM, WRITE_ZEROES, CACHE and BLOCK_STATUS
 * take any length that stays inside the export (up to 2^32 - 1).  A WRITE
 * over the client's limit is answered EINVAL once its payload has been read
 * and dropped, up to MAX_WRITE_DISCARD; only a longer one is a hard
 * disconnect (the spec allows it for payloads deemed a denial of service).
 */
#define MAX_PAYLOAD (32u << 20)        /* NBD maximum block size we advertise */
#define MAX_PAYLOAD_ANY (64u << 20)    /* READ/WRITE limit without negotiation */
#define MAX_WRITE_DISCARD (128u << 20) /* larger WRITE payloads: hard disconnect */

/* ---- logging ------------------------------------------------------------ */

void log_init(bool use_syslog, int verbose);
void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern int log_verbose;
#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                  \
	do {                                            \
		if (log_verbose)                        \
			log_msg(LOG_DEBUG, __VA_ARGS__); \
	} while (0)

/* ---- configuration ------------------------------------------------------ */

struct dimm_cfg {
	char *name;           /* section name: [dimm NAME] */
	char *card;           /* [card ...] it belongs to */
	char *export_name;    /* NBD export name (default: NAME) */
	char *description;
	char *preset;
	char *image;          /* absolute path of the NAND image */
	bool readonly;
	uint32_t sector_size; /* used when the image is formatted */
	uint64_t capacity;    /* bytes; 0: use op_percent */
	double capacity_pct;  /* of the stock capacity (fio-format -s N%) */
	double op_percent;
	int timing;           /* -1: card/server default */
	int sync;             /* fdatasync on flush: -1 default (on) */
};

struct server_cfg {
	char **listen;        /* "HOST:PORT" */
	int nlisten;
	char *unix_path;
	char *control_path;
	char *state_dir;
	char *pidfile;
	bool foreground;
	bool use_syslog;
	int verbose;
	int max_connections;
	int handshake_timeout;   /* seconds */
	int shutdown_timeout;    /* seconds after SIGTERM before connections are force-closed; 0: default */
	int poll_us;             /* ioDimm threads poll this long after activity; -1: default */
	int timing;              /* default timing model for every ioDimm */
	char *default_preset;
	struct dimm_cfg *dimms;
	int ndimms;
	char *config_file;
};

int config_load(struct server_cfg *cfg, const char *path, char *err, size_t errlen);
void config_default_duo(struct server_cfg *cfg);
int config_finish(struct server_cfg *cfg, char *err, size_t errlen);
void config_free(struct server_cfg *cfg);
uint64_t parse_bytes(const char *s, bool *ok);

/* ---- ioDimms ------------------------------------------------------------ */

struct conn;
struct server;
struct listener;
struct evconnlistener;

/* What the handshake negotiated, handed to the ioDimm thread. */
struct handoff {
	int fd;
	bool structured;
	bool meta_allocation;   /* base:allocation selected for this export */
	uint16_t tflags;        /* transmission flags sent */
	bool block_size;        /* bound by NBD_INFO_BLOCK_SIZE: GO asked for it */
	char peer[96];
	uint8_t *leftover;      /* bytes read past the handshake */
	size_t nleftover;
	struct handoff *next;
};

struct dimm_status {
	char name[64], export_name[256], preset[32], state[32];
	char image[512];
	bool attached, readonly;
	struct ftl_info info;
	struct ftl_stats stats;
	uint32_t connections;
	uint64_t total_connections;
	double timing;
};

struct dimm {
	struct server *srv;
	struct dimm_cfg *cfg;
	int index;
	struct nand_dev *dev;
	struct ftl *ftl;
	struct ftl_info info;
	uint64_t size;              /* export size in bytes */

	pthread_t thread;
	struct event_base *base;
	struct event *wake_ev;      /* hand-offs, status requests, stop */
	struct event *timer_ev;     /* next FTL deadline (timed media) */
	struct event *deadline_ev;  /* shutdown: force-close what is still open */
	bool stopping;              /* stop seen by the thread, deadline armed */
	struct conn *conns;         /* connections in transmission */
	struct conn *dirty;         /* connections with replies to send */
	uint64_t activity;          /* bumped per receive: ends or extends a spin */

	pthread_mutex_t lock;       /* protects the fields below */
	pthread_cond_t cond;
	struct handoff *incoming;
	bool stop;                  /* drain and close, then leave the loop */
	bool status_wanted;
	uint64_t status_gen;        /* bumped when status is refreshed */
	struct dimm_status status;
	bool ready;                 /* opened (or failed: open_error) */
	int open_error;
	char open_errmsg[512];
	uint32_t nconns;
	uint64_t total_conns;
};

int dimm_start(struct dimm *d);                 /* thread: open media and FTL */
int dimm_wait_ready(struct dimm *d);
void dimm_adopt(struct dimm *d, struct handoff *h);
void dimm_stop(struct dimm *d);                 /* ask to drain, close, checkpoint */
void dimm_join(struct dimm *d);
int dimm_get_status(struct dimm *d, struct dimm_status *out); /* fresh snapshot */
uint16_t dimm_tflags(struct dimm *d, bool structured);
void dimm_describe(struct dimm *d, char *buf, size_t len);
/* ioDimm thread: drive the FTL, send ready replies, re-arm the timer */
void dimm_kick(struct dimm *d);

/* ---- server ------------------------------------------------------------- */

struct server {
	struct server_cfg cfg;
	struct event_base *base;
	struct dimm *dimms;
	int ndimms;
	struct listener *listeners; /* every listening socket, control socket included */
	struct evhttp *ctl;
	struct listener *ctl_listener;  /* the control socket's accept back-off */
	struct event *sig_term, *sig_int, *sig_hup;
	bool shutting_down;
	time_t started;
	pthread_mutex_t lock;
	int nconns;                 /* all connections, handshaking or not */
	struct hs *handshakes;      /* connections in handshake */
};

struct dimm *server_find_export(struct server *srv, const char *name, size_t len);
void server_conn_closed(struct server *srv);
/* Back off and retry when accept fails (out of descriptors or memory)
 * instead of spinning; owned: closing the watch frees the listener too. */
struct listener *listener_watch(struct server *srv, struct evconnlistener *evl, const char *name,
				bool owned);
void listener_close(struct listener *l);

/* handshake.c */
void handshake_start(struct server *srv, int fd, const char *peer);
void handshake_shutdown_all(struct server *srv);

/* conn.c (ioDimm thread) */
void conn_adopt(struct dimm *d, struct handoff *h);
void conn_flush_dirty(struct dimm *d);
void conn_stop_all(struct dimm *d);
int conn_abort_all(struct dimm *d);

/* ctl.c (main thread) */
int ctl_start(struct server *srv, char *err, size_t errlen);
void ctl_stop(struct server *srv);

/* byte order helpers */
static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}
static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}
static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

#endif
