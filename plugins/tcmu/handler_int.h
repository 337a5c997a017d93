/*
 * plugins/tcmu/handler_int.h - internal to the flashd tcmu-runner handler:
 * its tunables, the device and command structures shared by its SCSI side
 * (handler_flashd.c) and its NBD side (handler_nbd.c), and what one side
 * calls in the other.
 */
#ifndef FLASHD_TCMU_HANDLER_INT_H
#define FLASHD_TCMU_HANDLER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <libnbd.h>

#include "plugins/tcmu/tcmu_abi.h"

/* ------------------------------------------------------------------ tunables */

#define FLASHD_SUBTYPE "flashd"
#define FLASHD_DEFAULT_SOCKET "/run/flashd/flashd.sock"
#define FLASHD_CONNECT_TIMEOUT_MS 10000	/* one connection attempt */
#define FLASHD_OPEN_TIMEOUT_MS 15000	/* open(): keep trying this long */
#define FLASHD_IO_TIMEOUT_MS 20000	/* no reply while requests are out: dead */
#define FLASHD_BACKOFF_MIN_MS 100
#define FLASHD_BACKOFF_MAX_MS 5000
#define FLASHD_BACKOFF_HOLD_MS 1000	/* the longest backoff while commands are held */
#define FLASHD_GRACE_DEFAULT_S 20	/* hold commands while down (cfgstring grace=) */
#define FLASHD_GRACE_MAX_S 3600
#define FLASHD_MAX_REQ (32u << 20)	/* NBD's safe payload without advertised max */
#define FLASHD_MAX_TRIM (1u << 30)	/* per NBD trim/zero request (32-bit length) */
#define FLASHD_MAX_UNMAP_BYTES (1ull << 30) /* advertised MAXIMUM UNMAP LBA COUNT */
#define FLASHD_MAX_DIRECT_RUNS 4	/* more scattered iovecs: bounce buffer */
#define FLASHD_PATTERN_BUF (1u << 20)	/* write-same pattern buffer */

/* ------------------------------------------------------------------ types */

enum fl_op { OP_READ, OP_WRITE, OP_FLUSH, OP_TRIM, OP_ZERO, OP_PATTERN };

enum fl_state { ST_DOWN, ST_CONNECTING, ST_READY };

struct fl_target {
	char *export;
	char *path;		/* unix socket, or NULL */
	char *host, *port;	/* TCP */
	unsigned grace_s;	/* hold commands this long while down */
	char desc[160];		/* for log messages (tcmu-runner cuts lines at ~256 bytes) */
};

struct fl_dev;

/* One SCSI-level command; split into one or more NBD requests. */
struct fl_cmd {
	struct fl_dev *d;
	struct tcmur_cmd *cmd;
	enum fl_op op;
	uint64_t off, len;
	struct iovec *iov;
	size_t iov_cnt;
	void *buf;		/* bounce or pattern buffer (owned) */
	size_t buf_len;
	bool bounce;
	bool fua;		/* FUA requested by the initiator */
	bool post_flush;	/* FUA without server FUA support: flush after */
	unsigned refs;		/* issuer + NBD requests not yet freed */
	unsigned issued, answered;
	int err;		/* first errno of a real error reply */
	bool lost;		/* a request lost with the connection (send again) */
	struct fl_cmd *next;
};

struct fl_stats {
	uint64_t ops[6], bytes[6], errors, reconnects, bounced;
	uint64_t rejected;	/* failed at once while disconnected (atomic) */
	uint64_t held, expired;	/* held while down; of those, failed after the grace */
	unsigned max_inflight;
};

struct fl_dev {
	struct tcmu_device *dev;
	struct fl_target t;
	uint64_t size;		/* backstore bytes */
	uint32_t block_size;

	pthread_t thread;
	int efd;		/* eventfd: wakes the I/O thread */

	pthread_mutex_t lock;	/* protects state, queue, stopping, grace_over */
	enum fl_state state;
	bool stopping;
	bool grace_over;	/* down longer than the grace: fail new commands at once */
	struct fl_cmd *q_head, *q_tail;

	/* I/O thread only (and open() before the thread starts) */
	struct nbd_handle *h;
	bool is_tcp;
	int64_t export_size;
	uint32_t min_block, max_req;
	bool ro, can_flush, can_fua, can_trim, can_zero;
	unsigned inflight;	/* NBD requests issued, not yet freed */
	int64_t last_progress, connect_deadline, next_attempt;
	unsigned backoff_ms, attempts;
	int64_t down_since;
	char last_err[1024];
	struct fl_cmd *deferred;	/* commands needing a follow-up flush */
	struct fl_cmd *held_head, *held_tail;	/* held while down, oldest first */
	bool holding;		/* lost commands go to held (not stopping, grace not over) */
	bool draining;		/* the server answered ESHUTDOWN: close, reconnect */
	struct fl_stats st;
};

/* Hidden: tcmu-runner dlopen()s the handler, which exports handler_init
 * alone, so no symbol of the runner's can take the place of these. */
#pragma GCC visibility push(hidden)

/* ---- handler_flashd.c: the SCSI side ------------------------------------ */

/* Translate an errno from flashd/libnbd into a TCMU status (+ sense). */
int errno_to_sts(struct fl_cmd *c, int err);

/* ---- handler_nbd.c: the NBD side ---------------------------------------- */

void cmd_free(struct fl_cmd *c);
/* Blocking connect used by open(): retry until FLASHD_OPEN_TIMEOUT_MS.
 * 0; -1 not connected, -2 connected but the export does not fit (with
 * d->last_err set). */
int connect_sync(struct fl_dev *d);
/* The device's I/O thread (arg: its struct fl_dev), until d->stopping. */
void *io_thread(void *arg);

#pragma GCC visibility pop

#endif
