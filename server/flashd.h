/*
 * server/flashd.h - the flashd daemon: configuration, ioDimms and their
 * threads, NBD handshake and transmission, the control socket.
 *
 * Threads and ownership:
 *   main thread  - listeners, NBD handshakes, the control socket, signals.
 *   one thread per ioDimm - owns that ioDimm's NAND device and FTL (which is
 *                  not thread-safe) and every connection in transmission to
 *                  it, on its own event loop.  All connections of an ioDimm
 *                  share one FTL on one thread, so a FLUSH on any of them
 *                  covers writes completed on all of them (CAN_MULTI_CONN).
 *                  The thread lives as long as flashd, attached or not (an
 *                  ioDimm that failed to open, or was detached, keeps its
 *                  thread, which opens it again on `attach`).
 * After a successful NBD_OPT_GO (or EXPORT_NAME) the main thread hands the
 * socket to the ioDimm thread (dimm_adopt), with whatever bytes it had
 * already read past the handshake.
 *
 * Command channel.  The main thread never waits for an ioDimm thread while
 * it serves (only at start-up, for each open result, and at shutdown, for
 * the threads to end).  Management work (status and statistics snapshots,
 * attach, detach, format, checkpoint) is a struct dimm_cmd posted to the
 * ioDimm's queue (dimm_post); the thread runs it on its own loop and posts
 * it back to the server's done queue (dimm_cmd_reply), which wakes the main
 * loop (srv->cmd_ev); ctl.c answers the HTTP request once every command it
 * posted is back (or, for snapshots, after CTL_SNAPSHOT_TIMEOUT_S, saying
 * which ioDimm did not answer).  Every posted command comes back exactly
 * once, also when the thread ends (with -ESHUTDOWN).
 *
 * Attach state.  d->mstate and d->exported belong to the main thread: an
 * export is offered to handshakes only while exported, which is set when an
 * attach (or the start-up open) has come back successfully and cleared
 * before a detach is posted.  So the main thread reads d->size and d->info
 * (written by the ioDimm thread while it opens, before it replies) only
 * while exported, and hands no socket to an ioDimm after posting its
 * detach.  The ioDimm thread's own view is d->ftl (NULL: detached).
 *
 * Lock order: server.lock (connection counts) before dimm.lock (hand-off
 * queue, command queue, open result); server.cmd_lock (done queue) is taken
 * alone.  None is held while calling into the FTL.
 * Connection slots: server.nconns counts every accepted socket until it is
 * closed (handshake or transmission), with its address's count (struct
 * conn_slot), dimm.nconns those handed to that ioDimm; each close path
 * gives back exactly the slots it holds.
 * Detach: the export is withdrawn at once (new handshakes are refused); the
 * ioDimm thread answers what is in flight, answers requests that arrive
 * after with NBD_ESHUTDOWN, and closes each connection once it is idle
 * (after shutdown_timeout seconds it force-closes what is left), then closes
 * the FTL with a checkpoint and the image.
 * Shutdown: SIGTERM stops accepting and drops handshakes; each ioDimm stops
 * reading, answers what is in flight and closes its connections, or after
 * shutdown_timeout seconds force-closes what is left (replies dropped);
 * then it closes its FTL with a checkpoint.
 */
#ifndef FLASHD_SERVER_H
#define FLASHD_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/queue.h>
#ifndef LIST_FOREACH_SAFE /* glibc's sys/queue.h has no _SAFE forms */
#define LIST_FOREACH_SAFE(var, head, field, tvar)                               \
	for ((var) = LIST_FIRST(head); (var) && ((tvar) = LIST_NEXT(var, field), 1); \
	     (var) = (tvar))
#endif
#include <stdint.h>
#include <syslog.h>
#include <event2/event.h>

#include "common/acl.h"
#include "ftl/ftl.h"
#include "server/version.h"
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
/* A daemon that is starting (main.c): warnings and errors to stderr too (the
 * caller's, which waits for the start's result), as well as to syslog. */
void log_also_stderr(bool on);
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

/*
 * Health thresholds (server/health.c): [server] keys, which a [dimm]
 * section may override for its ioDimm.  Applied by a reload.
 */
struct health_limits {
	double reserves_warn;     /* percent: a warning below it (default 10) */
	double endurance_warn;    /* percent of the rated P/E cycles used: a warning
				   * from it on (default 80) */
	double temperature_warn;  /* degrees C: a warning from it on, below the 78 C
				   * throttle (default 75) */
	unsigned set;             /* HL_* bits: the keys given in that section */
};
#define HL_RESERVES 1u
#define HL_ENDURANCE 2u
#define HL_TEMPERATURE 4u
#define HEALTH_RESERVES_WARN_DEFAULT 10.0
#define HEALTH_ENDURANCE_WARN_DEFAULT 80.0
#define HEALTH_TEMPERATURE_WARN_DEFAULT 75.0

struct dimm_cfg {
	char *name;           /* section name: [dimm NAME] */
	char *card;           /* [card ...] it belongs to */
	char *export_name;    /* NBD export name (default: NAME) */
	char *description;
	char *backend;        /* "sim" (the simulated ioDimm) or "mtd" (raw NAND) */
	char *preset;         /* sim: the simulated device; mtd: "" */
	char *image;          /* absolute path of the NAND image (sim), or of
			       * the MTD character device (mtd: key device) */
	bool device_set;      /* image came from the device key */
	bool readonly;
	uint32_t sector_size; /* used when the image is formatted */
	uint64_t capacity;    /* bytes; 0: use op_percent */
	double capacity_pct;  /* of the stock capacity (fio-format -s N%) */
	double op_percent;
	uint32_t parity_width;/* used when the image is formatted: 0 or 1 */
	int timing;           /* -1: card/server default */
	int sync;             /* fdatasync on flush: -1 default (on) */
	uint64_t cp_interval; /* bytes of log between checkpoints; 0: automatic */
	bool no_flush_parity; /* flush_parity = off (parity formats) */
	/* given in the file: an existing image's format must match them */
	bool sector_size_set, capacity_set, parity_set;
	int tls;              /* enum tls_mode: TLS_OFF serves plaintext sessions only,
			       * TLS_REQUIRED TLS sessions only; -1 (unset): both */
	/* access rules (common/acl.h): allow (read-write) and allow_ro
	 * entries; none: every client.  *_line: the first line with a
	 * tls: entry of that kind, for the cross-checks of config_finish */
	struct acl acl;
	bool list_denied;     /* list this export to clients the rules refuse */
	int acl_cert_line, acl_psk_line, acl_tls_line;
	struct health_limits health; /* keys given here (health_limits_of: the rest) */
};

/* TLS mode of a listener (doc/proto.md, "TLS support"): TLS_OFF is NOTLS,
 * TLS_ALLOWED is SELECTIVETLS (STARTTLS offered; exports with tls = required
 * need it), TLS_REQUIRED is FORCEDTLS (every option but STARTTLS and ABORT
 * gets NBD_REP_ERR_TLS_REQD until TLS is up). */
enum tls_mode { TLS_OFF, TLS_ALLOWED, TLS_REQUIRED };
const char *tls_mode_name(int mode);
int tls_mode_parse(const char *s);   /* -1 if s is not off|allowed|required */

struct server_cfg {
	char **listen;        /* "HOST:PORT", optionally followed by " tls=MODE" */
	int nlisten;
	char *unix_path;
	char *control_path;
	char *state_dir;
	char *pidfile;
	/* the export the empty name picks (an export name; NULL: none, the
	 * empty name is refused); never another ioDimm while it is not served */
	char *default_export;
	int default_export_line;  /* where the file set it, for errors */
	bool foreground;
	bool use_syslog;
	int verbose;
	int max_connections;
	int max_conn_per_addr;   /* max_connections_per_address; 0: no cap; -1: unset (256) */
	/* connections that have not chosen an export (handshaking): in all
	 * (0: unset, min(128, max_connections / 2)) and per address (0: no
	 * cap; -1: unset, 16) */
	int max_handshakes;
	int max_hs_per_addr;
	int handshake_timeout;   /* seconds */
	int idle_timeout;        /* seconds without progress after the handshake; 0: off */
	/* the same while over 3/4 of max_connections are open (0: off; -1:
	 * unset, 600) */
	int idle_timeout_busy;
	uint64_t buffer_limit;   /* bytes of large request buffers, all connections (0: unset) */
	int shutdown_timeout;    /* seconds after SIGTERM before connections are force-closed; 0: default */
	int poll_us;             /* ioDimm threads poll this long after activity; -1: default */
	int timing;              /* default timing model for every ioDimm */
	int fault_injection;     /* flashctl inject on simulated ioDimms; -1: unset (no) */
	int allow_degraded;      /* serve what opens (-1: unset, then no) */
	char *default_preset;
	/* TLS (server/tls.c); *_where: where the key was given, for errors
	 * ("FILE:LINE: [server] tls_certificates = 'DIR'" or "--tls-...") */
	int tls;                 /* default mode of every listener; -1: unset (off) */
	int unix_tls;            /* the unix socket's mode; -1: tls */
	char *tls_certificates;  /* DIR: ca-cert.pem, server-cert.pem, server-key.pem, ca-crl.pem */
	char *tls_certificates_where;
	char *tls_psk;           /* FILE: identity:hexkey per line */
	char *tls_psk_where;
	int tls_verify_peer;     /* require a client certificate signed by the CA; -1: unset (no) */
	/* sockets and files: -1 unset (modes 0660, umask 077, group: flashd's) */
	int unix_mode, control_mode, umask;
	long unix_gid, control_gid;
	struct health_limits health;  /* keys given (health_limits_of: defaults) */
	/* the read-only HTTP listener (metrics_http.c): "HOST:PORT" or NULL
	 * (off); who may use it (metrics_allow: addresses and networks, no
	 * rules: everyone who reaches it); Host names it answers besides IP
	 * literals, localhost and this host's name (space-separated) */
	char *metrics_listen;
	struct acl metrics_allow;
	char *metrics_host_names;
	struct dimm_cfg *dimms;
	int ndimms;
	char *config_file;
};

int config_load(struct server_cfg *cfg, const char *path, char *err, size_t errlen);
void config_default_duo(struct server_cfg *cfg);
int config_finish(struct server_cfg *cfg, char *err, size_t errlen);
void config_free(struct server_cfg *cfg);
/* Start-up and reload: the command line cli (kept as it is), the file path
 * (NULL: none), fallback_state_dir, config_finish; see config.c. */
int config_build(const struct server_cfg *cli, const char *path, const char *fallback_state_dir,
		 struct server_cfg *out, char *err, size_t errlen);
uint64_t parse_bytes(const char *s, bool *ok);

/* ---- connection slots ---------------------------------------------------- */

/*
 * Every accepted socket holds one slot of max_connections and, over TCP,
 * one of its address's max_connections_per_address (admit.c, under
 * server.lock) until it is closed; the slot travels with the socket
 * (handshake, handoff, transmission) and is given back exactly once
 * through server_conn_closed.  The address is IPv6 or IPv4-mapped IPv6
 * (an IPv4 client counts the same on either kind of listener; IPv6
 * clients count per /64).  Until it has chosen an export the socket also
 * holds a slot of the handshake budget (max_handshakes, and over TCP its
 * address's max_handshakes_per_address), given back at the hand-off
 * (server_conn_admitted) or with the connection: clients that never
 * negotiate cannot take the slots negotiated clients need.  The unix
 * socket has a budget of its own (max_handshakes again), so TCP clients
 * cannot fill it.  A full budget closes no newcomer: a connection of that
 * budget (of that address, when the address's is full) in handshake for
 * HS_GRACE_S is evicted, the oldest that has sent no option first
 * (handshake_evict; a client that negotiates takes milliseconds); if there
 * is none yet, the newcomer waits unanswered, with its connection slot, in
 * that budget's waiting room until a handshake slot frees or one passes
 * its grace (admit.c, "waiting room").
 */
struct conn_slot {
	uint8_t addr[16];
	bool per_addr;        /* counted per address (TCP); unix clients are not,
			       * and have a handshake budget of their own */
	bool handshaking;     /* holds a handshake slot */
};

/* admit.c: connections held by slot's address (unix socket clients: all of
 * them, as one address), and by the address that holds the most. */
struct server;
int server_conns_of(struct server *s, const struct conn_slot *slot);
int server_conns_top(struct server *s);

/* ---- ioDimms ------------------------------------------------------------ */

struct conn;
struct server;
struct listener;
struct evconnlistener;
struct evhttp_bound_socket;

/* What the handshake negotiated, handed to the ioDimm thread. */
struct handoff {
	int fd;
	bool structured;
	bool meta_allocation;   /* base:allocation selected for this export */
	uint16_t tflags;        /* transmission flags sent */
	bool block_size;        /* bound by NBD_INFO_BLOCK_SIZE: GO asked for it */
	bool readonly;          /* read-only for this client (allow_ro) */
	char peer[96];
	char who[256];          /* peer and identities (TLS; unix: uid, pid), for a
	                         * detach refused while it is connected */
	struct conn_slot slot;
	struct ssl_st *ssl;     /* TLS session (OpenSSL SSL), NULL: plaintext */
	uint8_t *leftover;      /* bytes read past the handshake */
	size_t nleftover;
	struct handoff *next;
};

/*
 * Server-side I/O counters of one export since flashd started (they go on
 * across detach and attach; the FTL's lifetime counters are in ftl_stats).
 * Written by the ioDimm thread only (conn_reply.c, per request: no lock, no
 * allocation), copied into snapshots by the same thread.  Two latencies,
 * in buckets whose upper bounds are lat_bounds_ns[] (the last bucket: above
 * them all):
 *   lat  as the client sees it: from the request complete in the socket
 *        (its header, a WRITE's payload; over TCP the kernel's receive
 *        timestamp) to its reply handed to the kernel, every wait inside
 *        flashd included (the socket while the thread was busy, limits,
 *        the FTL's queue, write buffer, throttling and thermal holds, the
 *        send queue); replies dropped with their connection are not counted
 *   svc  service: from the request parsed to its reply queued (the FTL's
 *        share; every answered request)
 */
enum io_kind { IOK_READ, IOK_WRITE, IOK_FLUSH, IOK_TRIM, IOK_ZEROES, IOK_OTHER, IOK_N };
enum lat_class { LAT_READ, LAT_WRITE, LAT_FLUSH, LAT_OTHER, LAT_N };
#define LAT_NBOUNDS 36
extern const uint64_t lat_bounds_ns[LAT_NBOUNDS];
extern const char *const io_kind_names[IOK_N];
extern const char *const lat_class_names[LAT_N];

struct io_counters {
	uint64_t ops[IOK_N], errors[IOK_N], bytes[IOK_N];
	uint64_t lat[LAT_N][LAT_NBOUNDS + 1];   /* per bucket, not cumulative */
	uint64_t lat_sum_ns[LAT_N];
	uint64_t svc[LAT_N][LAT_NBOUNDS + 1];
	uint64_t svc_sum_ns[LAT_N];
	/* ftl_poll() calls (programs, GC, erases, checkpoints): the longest
	 * one, and how many took over 10 ms; the ioDimm thread serves no
	 * socket meanwhile, so this bounds what the FTL's background work
	 * adds to a request's wait on the thread */
	uint64_t ftl_turn_max_ns, ftl_turns_over_10ms;
};

/* An ioDimm as the main thread sees it (d->mstate). */
enum dimm_mstate {
	DM_STARTING,      /* opening at start-up */
	DM_ATTACHED,      /* FTL open, exported */
	DM_DETACHED,      /* closed by `detach` (or a format) */
	DM_FAILED,        /* the last open failed: d->open_errmsg */
	DM_ATTACHING,     /* attach posted */
	DM_DETACHING,     /* detach posted: draining, then closing */
	DM_FORMATTING,    /* format posted */
	DM_CHECKPOINTING, /* checkpoint posted: exported, requests served */
};
const char *dimm_mstate_name(enum dimm_mstate st);

/*
 * ---- DRBD (server/drbd.c) -------------------------------------------------
 *
 * Whether an ioDimm's export is the lower device of a DRBD resource on this
 * node (deploy/drbd/README.md: the kernel NBD client attaches the export
 * over flashd's unix socket as /dev/nbdN, the disk of /dev/drbdM), and that
 * resource's state, read on monitor.c's tick from:
 *   /etc/nbdtab                     which export of which socket is nbdN
 *   /sys/block/nbdN/pid             nbdN is connected
 *   /sys/block/nbdN/holders/drbdM   DRBD minor M holds nbdN as its disk
 *   /proc/drbd                      M's connection, roles, disk states,
 *                                   resync progress (DRBD 8.4's format)
 *   /dev/drbd/by-res/RES[/VOL]      M's resource name (drbd-utils' udev rules)
 * health.c turns it into reasons; ctl_json.c and ctl_text.c show it.  Strings are as DRBD
 * spells them ("" when it does not say).
 */
struct drbd_lower {
	bool lower;                /* the export is the disk of minor M here */
	int minor;
	char nbd[16];              /* "nbd0" */
	char resource[64];         /* "" without udev's by-res link */
	char cstate[24], role[16], peer_role[16], disk[16], peer_disk[16], protocol[2];
	int sync_permille;         /* resync done (sync'ed: 42.3% -> 423); -1: none */
	char sync_finish[16];      /* the resync's "finish: 0:01:02", or "" */
};
/* The line of MINOR in TEXT (/proc/drbd's content) into l's DRBD fields
 * (not lower, minor, nbd, resource); false if TEXT has none for MINOR. */
bool drbd_parse_proc(const char *text, int minor, struct drbd_lower *l);
/* The minor's resource under ROOT/dev/drbd/by-res ("" ROOT: the system's). */
void drbd_resource_name(const char *root, int minor, char *out, size_t len);
/* The lower device state of the export EXPORT served on the unix socket
 * SOCK, under ROOT ("" for the system; tests give a directory): false (l
 * cleared) if it is none.  TEXT: /proc/drbd's content (without a line for
 * the minor, as DRBD 9's, the states are ""). */
bool drbd_lookup(const char *root, const char *text, const char *sock, const char *export,
		 struct drbd_lower *l);
struct server;
/* Main thread, monitor.c's tick: every ioDimm's d->drbd afresh (cleared
 * when DRBD is not loaded: no /proc/drbd).  Cost: a read of /proc/drbd,
 * and only if it exists /etc/nbdtab and a few sysfs entries per ioDimm. */
void drbd_refresh(struct server *srv);

/* A snapshot of one ioDimm (status, statistics, metrics). */
struct dimm_status {
	char name[64], export_name[256], card[64], backend[8], preset[32], state[32];
	char model[128];        /* the preset's description: the card's model */
	char image[512];
	char error[1024];       /* why it failed, or "" */
	bool answered;          /* filled by the ioDimm thread (else by main) */
	bool attached, readonly;
	bool beacon;            /* main thread's d->beacon */
	struct ftl_info info;
	struct ftl_stats stats;
	uint32_t page_size;     /* NAND page bytes (for NAND bytes from pages) */
	uint64_t ram_peak;      /* highest ram_bytes seen since flashd started */
	uint64_t gc_pages_relocated, gc_blocks_collected; /* since flashd started */
	struct io_counters io;
	uint32_t connections;
	uint64_t total_connections;
	bool timing;
	struct drbd_lower drbd; /* main thread's d->drbd */
};

/*
 * ---- health (server/health.c) ---------------------------------------------
 *
 * One model, computed in one place and shown the same way by every view
 * (flashctl status and its exit code, --json, /metrics, the dashboard,
 * systemd's STATUS=, the log): health_eval() turns a snapshot of an
 * ioDimm and its thresholds into a state and the reasons for it, each with
 * the action an admin should take.  The server's state is the worst of its
 * ioDimms'.  States, from best to worst:
 *   ok        serving as it should (notes, level ok, may say why it is not
 *             serving on purpose: detached, formatting)
 *   warning   serving, but something needs attention: reserves or
 *             endurance past their threshold, temperature high or writes
 *             throttled, a rebuild from parity running, a dead die
 *             rebuilt, units lost, a damaged checkpoint; on a DRBD node,
 *             the pair's redundancy lost for now: disconnected from the
 *             peer, a resync running, this node's or the peer's disk not
 *             UpToDate (the ioDimm itself serves: never worse than warning)
 *   degraded  serving less than it should: write-reduced, worn out
 *             (read-only), no space, parity lost on some stripes, thermal
 *             stop, dies failed beyond what parity covers
 *   failed    not serving: it did not open, or its FTL stopped on an error
 */
enum health_state { HEALTH_OK, HEALTH_WARNING, HEALTH_DEGRADED, HEALTH_FAILED };
#define HEALTH_NSTATES 4

enum health_reason {
	HR_OPEN_FAILED,        /* failed: the image or FTL did not open */
	HR_FTL_FAILED,         /* failed: the FTL stopped on an error */
	HR_READ_ONLY,          /* degraded: no spare block left (worn out) */
	HR_NO_SPACE,           /* degraded: no room for writes */
	HR_WRITE_REDUCED,      /* degraded: reserves at 5 %: writes throttled */
	HR_THERMAL_STOP,       /* degraded: 85 C: host I/O held */
	HR_DIES_LOST,          /* degraded: dead dies beyond what parity covers */
	HR_PARITY_LOST,        /* degraded: stripes without parity until GC rewrites them */
	HR_RESERVES_LOW,       /* warning: reserves below reserves_warn */
	HR_ENDURANCE_HIGH,     /* warning: endurance used at endurance_warn */
	HR_THERMAL_THROTTLED,  /* warning: 78 C: writes throttled */
	HR_TEMPERATURE_HIGH,   /* warning: at temperature_warn */
	HR_REBUILDING,         /* warning: a dead die's data being rebuilt from parity */
	HR_DIE_REBUILT,        /* warning: a dead die, its data rebuilt */
	HR_LOST_UNITS,         /* warning: units unreadable (media errors) */
	HR_CHECKPOINT_DAMAGED, /* warning: the map was rebuilt from the whole log */
	HR_NO_ANSWER,          /* warning: the ioDimm thread did not answer */
	HR_DRBD_DISCONNECTED,  /* warning: its DRBD resource lost the peer */
	HR_DRBD_RESYNC,        /* warning: its DRBD resource is resyncing */
	HR_DRBD_DISK,          /* warning: this node's DRBD disk not UpToDate */
	HR_DRBD_PEER_DISK,     /* warning: the peer's DRBD disk not UpToDate */
	HR_DETACHED,           /* ok (note): detached on purpose */
	HR_BUSY,               /* ok (note): attaching, detaching, formatting */
};
#define HEALTH_NREASONS 23

struct health_item {
	enum health_reason reason;
	enum health_state level;   /* what it makes the ioDimm */
	char msg[320];             /* what is wrong, with the figures */
	char action[320];          /* what to do about it ("" for some notes) */
};

struct health {
	enum health_state state;   /* the worst level of the items; ok without any */
	int n;
	struct health_item item[HEALTH_NREASONS]; /* worst level first */
};

const char *health_state_name(enum health_state s);   /* "ok", "warning", ... */
const char *health_reason_name(enum health_reason r); /* "reserves_low", ... */
/* The thresholds of ioDimm d under the server's configuration. */
void health_limits_of(const struct server_cfg *cfg, const struct dimm_cfg *d,
		      struct health_limits *lim);
/* The health of the ioDimm a snapshot shows (pure: no locks, no I/O). */
void health_eval(const struct dimm_status *st, const struct health_limits *lim, struct health *h);
/* The worst of n states (ok for none). */
enum health_state health_worst(const struct health *h, int n);

enum dimm_cmd_type {
	DCMD_STATUS,      /* snapshot: st */
	DCMD_ATTACH,      /* open the image and the FTL */
	DCMD_DETACH,      /* drain and close the connections, close the FTL */
	DCMD_FORMAT,      /* low-level format (detached only) */
	DCMD_CHECKPOINT,  /* hold requests, close the FTL (checkpoint), reopen */
	DCMD_STALL,       /* test hook (FLASHD_TEST_HOOKS=1): sleep stall_ms */
	DCMD_INJECT,      /* a fault into the simulated NAND ([server] fault_injection) */
};

/* What a DCMD_INJECT does (flashctl inject). */
enum inject_kind {
	INJ_DIE_FAIL,     /* value: die; every operation on it fails from now on */
	INJ_BAD_BLOCK,    /* value: block; its programs and erases fail from now on */
	INJ_BIT_ERRORS,   /* value: reads per million that come back uncorrectable
	                   * (random, not sticky: a read again may succeed), and
	                   * 10x that many corrected; 0 turns it off */
	INJ_TEMPERATURE,  /* value: milli-degrees C, the controller's temperature
	                   * now (it relaxes from there towards ambient) */
};

/* Format parameters of a DCMD_FORMAT; 0 / unset: the ioDimm's [dimm] keys. */
struct dimm_format_req {
	uint32_t sector_size;
	uint64_t capacity;      /* bytes */
	double capacity_pct;    /* of the stock capacity */
	double op_percent;
	int parity_width;       /* -1: the [dimm] key's */
};

struct ctl_req;

/* One request on the command channel; see "Command channel" above. */
struct dimm_cmd {
	enum dimm_cmd_type type;
	struct dimm *d;
	struct ctl_req *owner;  /* main thread: whom the reply goes to */
	int slot;               /* the owner's per-ioDimm slot */
	/* arguments */
	struct dimm_format_req fmt;
	uint32_t stall_ms;
	enum inject_kind inject;
	int64_t inject_value;
	bool force;             /* DCMD_DETACH: even with clients connected */
	/* DCMD_CHECKPOINT in progress: the FTL's ticket, when it was asked */
	uint64_t cp_ticket, cp_t0;
	/* results */
	int rc;                 /* 0 or negative errno */
	char msg[1536];         /* what happened, for the client */
	struct dimm_status st;  /* DCMD_STATUS; the others fill it too */
	bool sample;            /* the monitor's once-a-second snapshot (monitor.c):
				 * owned by it, routed back to it, never freed */
	struct dimm_cmd *next;
};

struct dimm {
	struct server *srv;
	struct dimm_cfg *cfg;
	int index;
	/* ---- ioDimm thread only (main: see "Attach state") ---- */
	struct nand_dev *dev;
	struct ftl *ftl;            /* NULL while detached */
	struct ftl_info info;       /* as opened (main reads it while exported) */
	uint64_t size;              /* export size in bytes (likewise) */

	pthread_t thread;
	bool thread_started;
	struct event_base *base;
	struct event *wake_ev;      /* hand-offs, commands, stop */
	struct event *timer_ev;     /* next FTL deadline (timed media) */
	struct event *deadline_ev;  /* shutdown: force-close what is still open */
	struct event *op_ev;        /* detach / checkpoint: deadline of the drain */
	struct event *nand_ev;      /* the NAND backend's completions (its event fd) */
	bool stopping;              /* stop seen by the thread, deadline armed */
	LIST_HEAD(conn_list, conn) conns; /* connections in transmission */
	struct conn *dirty;         /* connections with replies to send */
	uint64_t activity;          /* bumped per receive and send: extends a spin */
	uint32_t reads_in_ftl;      /* clients' READs inside the FTL (conn.c; dimm_loop) */
	struct dimm_cmd *op;        /* detach or checkpoint in progress */
	struct io_counters io;
	uint64_t ram_peak;
	uint64_t gc_base_pages, gc_base_blocks; /* of FTL instances closed */
	bool tick_armed;            /* conn.c's once-a-second tick is scheduled */
	/* conn_buf.c, buffer_limit: activated (from any ioDimm thread, under
	 * server.budget_lock) to trim what this ioDimm's connections keep and
	 * to retry those waiting; exists while the ioDimm has connections */
	struct event *budget_ev;

	/* ---- main thread only ---- */
	enum dimm_mstate mstate;
	bool exported;              /* offered to handshakes */
	bool beacon;                /* locate LED lit (flashctl beacon; simulated) */
	struct drbd_lower drbd;     /* as DRBD uses the export here (drbd.c alone sets it) */
	struct dimm_monitor *mon;   /* health and history (monitor.c) */

	pthread_mutex_t lock;       /* protects the fields below */
	struct handoff *incoming;
	struct dimm_cmd *cmds, *cmds_tail;
	bool stop;                  /* drain and close, then leave the loop */
	bool ready;                 /* start-up open done (open_error says how) */
	int open_error;             /* the last open's result */
	char open_errmsg[1024];
	uint32_t nconns;
	uint64_t total_conns;
};

/* Start the thread (stop and reload signals blocked in it: the main
 * thread takes them): it opens media and FTL, then activates srv->start_ev. */
int dimm_start(struct dimm *d);
/* Is the start-up open result known (*rc, if not NULL: 0 or -errno;
 * -ECANCELED: not opened, flashd was stopping)?  Never blocks. */
bool dimm_ready(struct dimm *d, int *rc);
void dimm_adopt(struct dimm *d, struct handoff *h);
void dimm_stop(struct dimm *d);                 /* ask to drain, close, checkpoint */
void dimm_join(struct dimm *d);
/* Main thread: queue cmd for d's thread; it comes back through the
 * server's done queue (ctl.c: ctl_cmd_done). */
void dimm_post(struct dimm *d, struct dimm_cmd *cmd);
/* A snapshot the main thread can make without the ioDimm thread: names,
 * main state, open error, connection counts; no FTL figures. */
void dimm_status_main(struct dimm *d, struct dimm_status *st);
uint16_t dimm_tflags(struct dimm *d, bool structured);
void dimm_describe(struct dimm *d, char *buf, size_t len);
/* ioDimm thread: drive the FTL, send ready replies, re-arm the timer */
void dimm_kick(struct dimm *d);
/* ioDimm thread (conn_reply.c): the latency bucket of ns */
int lat_bucket(uint64_t ns);
/* The FTL's logger (ftl_set_logger): each message at its level, named by
 * the ioDimm whose thread logs it (every FTL runs on its ioDimm's thread):
 * "dimm0: die 5 failed ..." */
void dimm_ftl_log(void *arg, int level, const char *msg);

/* ---- server ------------------------------------------------------------- */

/* Refusals logged at most once per 10 s, the others counted and summed up
 * in one line when the 10 s are over (admit.c refusal_log; main thread). */
struct refusal_log {
	const char *what;           /* what is counted: "connection(s)" */
	const char *refused;        /* between who and why: ": refused: " */
	uint64_t last_ns;           /* the last line logged */
	unsigned long held;         /* refusals since, not logged */
	char who[128], why[400];    /* the last of them */
	struct event *ev;           /* logs the count when the period ends */
};
struct server;
void refusal_log(struct server *srv, struct refusal_log *r, const char *who, const char *why);

struct server {
	struct server_cfg cfg;
	struct event_base *base;
	struct dimm *dimms;
	int ndimms;
	struct listener *listeners; /* every listening socket, control socket included */
	struct evhttp *ctl;
	struct listener *ctl_listener;  /* the control socket's accept back-off */
	struct event *sig_term, *sig_int, *sig_hup;
	/* start-up: each ioDimm thread activates it once its open result is
	 * known (under its dimm.lock), ending the main loop's wait (main.c) */
	struct event *start_ev;
	bool shutting_down;
	bool test_hooks;            /* FLASHD_TEST_HOOKS=1: /v1/dimms/NAME/test-stall */
	time_t started;
	pthread_mutex_t lock;
	int nconns;                 /* all connections, handshaking or not */
	int nhandshakes;            /* TCP ones that have not chosen an export */
	int nhandshakes_unix;       /* unix socket ones (a budget of their own) */
	int nconns_unix;            /* unix socket connections */
	struct refusal_log nbd_refusals, ctl_refusals;
	struct refusal_log name_refusals; /* names of no export (handshake.c) */
	struct refusal_log denied_refusals; /* exports' access rules (handshake.c) */
	struct addr_count **addr_tab; /* per-address connection counts (admit.c) */
	/* bytes of every request buffer that exists, in flight or kept for
	 * reuse (conn_buf.c, "Memory in total"), all ioDimm threads together
	 * (atomic); about <= cfg.buffer_limit plus a little per connection */
	uint64_t buf_bytes;
	/* connections waiting for buffer_limit, first come first served
	 * (conn_buf.c), and the ioDimms' budget_ev: under budget_lock, taken
	 * alone.  budget_waiters (atomic reads): the queue's length, > 0
	 * meaning "pressure" (nothing is kept for reuse) */
	pthread_mutex_t budget_lock;
	TAILQ_HEAD(budget_queue, conn) budget_q; /* waiting for buffer_limit, FIFO */
	int budget_waiters;
	int budget_kick;            /* atomic: a wake of the queue's head is pending */
	uint64_t budget_log_ns;     /* rate-limited "waits for buffer_limit" log */
	unsigned long budget_log_held;
	LIST_HEAD(hs_list, hs) handshakes; /* connections in handshake */
	LIST_HEAD(ctl_req_list, ctl_req) ctl_reqs; /* control requests not yet finished */
	struct monitor *monitor;    /* health and history sampler (monitor.c) */
	struct metrics_http *metrics_http; /* the read-only listener (metrics_http.c) */
	struct evhttp_bound_socket *ctl_bound;
	int ctl_sending;            /* replies handed to evhttp, not yet written */
	bool ctl_closing;           /* ctl_shutdown ran: exit once they are */
	/* done queue of the command channel (ioDimm threads -> main) */
	pthread_mutex_t cmd_lock;
	struct dimm_cmd *done, *done_tail;
	struct event *cmd_ev;
};

/*
 * Reload (SIGHUP, POST /v1/reload; reload.c): the configuration file flashd
 * started with is read again through config_build, as at start-up; a file
 * with an error changes nothing (rc, error).  Otherwise what can change
 * while serving is applied (applied[]) and every other key that differs is
 * listed with why it was not (not_applied[]: "needs a restart"); both are
 * logged, the second at warning level.  No connection is touched.
 */
struct reload_item {
	char key[160];      /* "[server] listen", "[dimm dimm0] description" */
	char msg[900];      /* what changed, and for not_applied why not */
};
struct reload_result {
	int rc;             /* 0, or -errno: error says why, nothing changed */
	char error[1200];
	char config[1024];  /* the file read ("" if flashd runs without one) */
	struct reload_item *applied, *not_applied;
	int napplied, nnot_applied;
};
void server_reload(struct server *srv, const char *why, struct reload_result *r);
void reload_result_free(struct reload_result *r);
/* Add an item to r (and log it: info if applied, else warning). */
void reload_item(struct reload_result *r, bool applied, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The ioDimm an NBD export name picks, served or not: the empty name picks
 * [server] default_export; NULL if none (unset, or no such export).  The
 * caller checks d->exported: a default export that is not served is refused,
 * never replaced by another ioDimm. */
struct dimm *server_find_export(struct server *srv, const char *name, size_t len);
/* The ioDimm named name (its export name), exported or not, or NULL. */
struct dimm *server_find_dimm_by_export(struct server *srv, const char *name, size_t len);
/* Tell systemd and the log what is served (after an attach or a detach). */
void server_update_status(struct server *srv);
void server_conn_closed(struct server *srv, const struct conn_slot *slot);
/* The connection chose its export: its handshake slot is given back. */
void server_conn_admitted(struct server *srv, struct conn_slot *slot);
/* Back off and retry when accept fails (out of descriptors or memory)
 * instead of spinning; owned: closing the watch frees the listener too. */
struct listener *listener_watch(struct server *srv, struct evconnlistener *evl, const char *name,
				bool owned);
void listener_close(struct listener *l);

/* Split a listen spec "ADDR[ tls=MODE]": ADDR into addr, the mode (or -1)
 * into *mode.  0, or -EINVAL with the reason in err. */
int listen_split(const char *spec, char *addr, size_t addrlen, int *mode, char *err, size_t errlen);
/* listen.c: give a socket file its group (gid -1: keep) and mode; 0 or -errno
 * with err saying why */
int socket_perms(const char *path, const char *what, int mode, long gid, char *err, size_t errlen);
/* listen.c: a listening unix socket at a path, made as this says; a socket
 * file left there (by an earlier run) is replaced */
struct unix_socket {
	const char *what;      /* its name in messages: "control socket" */
	const char *failed;    /* "FAILED PATH: reason" when it cannot be made */
	int backlog;
	int mode;              /* socket_perms: its mode and group (-1: keep) */
	long gid;
	bool refuse_file;      /* another file there: an error (else bind's) */
};
/* the socket's fd, or -errno with err saying why */
int unix_socket_listen(const char *path, const struct unix_socket *us, char *err, size_t errlen);

/* tls.c: the OpenSSL context, made from the configuration before any image
 * opens (a missing or unreadable file is a configuration error there). */
struct ssl_st;
/* What the callbacks of one TLS handshake found (owned by the handshake;
 * detached from the session at hand-off). */
struct tls_note {
	char why[256];            /* why the peer was refused, "" if not by us */
	char psk_identity[128];   /* the PSK identity accepted, "" if none */
};
int tls_init(struct server_cfg *cfg, char *err, size_t errlen);
/* Reload: the key files of n again if changed (1), unchanged (0), or
 * -errno with err set and the running keys kept (tls.c) */
int tls_reload(const struct server_cfg *n, int verify_peer, char *err, size_t errlen);
bool tls_available(void);            /* a context exists: STARTTLS can be answered */
struct ssl_st *tls_session_new(struct tls_note *note);
void tls_describe(struct ssl_st *ssl, const struct tls_note *note, char *buf, size_t len);
void tls_last_error(struct ssl_st *ssl, int ret, char *buf, size_t len);
void tls_error_text(unsigned long e, char *buf, size_t len);
void tls_close(struct ssl_st *ssl, bool notify);  /* close_notify (best effort), free */
void tls_exit(void);

/* handshake.c */
void handshake_start(struct server *srv, int fd, const char *peer, int tls_mode,
		     const struct conn_slot *slot);
void handshake_shutdown_all(struct server *srv);
/* A handshake budget is full ("connection slots"): close a connection in
 * handshake of that budget (the unix socket's if unix_sock; of addr only,
 * if addr) that has been in it for HS_GRACE_S: the oldest that has sent no
 * option, else the oldest; its peer into peer.  true if one was closed;
 * false if none may go yet, with *wait_ns the time until the first may
 * (0: there is none). */
#define HS_GRACE_S 2
#define HS_GRACE_TEXT "2 s"
bool handshake_evict(struct server *srv, bool unix_sock, const uint8_t *addr, uint64_t *wait_ns,
		     char *peer, size_t peerlen);
/* Start-up: warn about exports without access rules that a non-loopback
 * TCP listener serves without TLS required (every host may use them). */
void handshake_acl_warnings(const struct server_cfg *cfg);

/* conn.c and conn_*.c (ioDimm thread) */
void conn_adopt(struct dimm *d, struct handoff *h);
void conn_flush_dirty(struct dimm *d);
void conn_stop_all(struct dimm *d, const char *why);
void conn_drain_all(struct dimm *d, const char *why);  /* detach */
/* The connections not closing, into buf ("who, who, ..."); their number. */
int conn_describe_all(struct dimm *d, char *buf, size_t len);
int conn_drain_step(struct dimm *d);   /* close idle draining ones; how many are left */
int conn_abort_all(struct dimm *d, const char *why);

/* ctl.c (main thread) */
int ctl_start(struct server *srv, char *err, size_t errlen);
/* After every ioDimm thread has ended: stop accepting, answer what is
 * left, and end the main loop once those replies are written (at most 1 s). */
void ctl_shutdown(struct server *srv);
/* After the main loop: free the control socket. */
void ctl_stop(struct server *srv);
/* The done queue's event (srv->cmd_ev): route replies to their requests. */
void ctl_cmd_done(evutil_socket_t fd, short what, void *arg);
/* ioDimm thread: post cmd back to the main thread. */
void dimm_cmd_reply(struct dimm_cmd *cmd);
/* Main thread: every command posted back so far, in order, taken off the
 * done queue (the caller owns them); NULL if none. */
struct dimm_cmd *dimm_cmds_done(struct server *srv);
/* The read-only listener's requests (metrics_http.c has checked the peer,
 * the method and the Host): GET /metrics, /v1/status, /v1/history, /,
 * /dashboard[/FILE]; anything else 404. */
struct evhttp_request;
struct evkeyvalq;
void ctl_serve_readonly(struct server *srv, struct evhttp_request *req, const char *path,
			struct evkeyvalq *q);
/* ctl_text.c: latency at quantile q (0..1) of one class's bucket counts
 * (lat_bounds_ns), interpolated in its bucket; 0 if nothing was counted. */
double lat_quantile(const uint64_t *cnt, double q);

/*
 * monitor.c (main thread): once a second every ioDimm's snapshot goes
 * through health_eval; a change of its health is logged (warning when
 * worse, notice when better) and told to systemd (server_update_status),
 * and the figures go into a ring of HISTORY_SAMPLES per ioDimm, served as
 * /v1/history: what happened before a client asked.  Memory: fixed at
 * start, nothing allocated per sample.
 */
#define HISTORY_SAMPLES 300        /* 5 minutes at one a second */
#define HISTORY_PERIOD_MS 1000
int monitor_start(struct server *srv);
void monitor_stop(struct server *srv);
/* ctl_cmd_done: a sample command (cmd->sample) is back */
void monitor_sample_done(struct dimm_cmd *cmd);
/* The health of d at the last sample (of its main state before the first). */
const struct health *monitor_health(const struct dimm *d);
/* GET /v1/history[?since=MS]: the samples taken after since (unix ms). */
struct evbuffer;
void monitor_history_json(struct server *srv, struct evbuffer *b, int64_t since_ms);
/* Reload: apply changed health thresholds, metrics_allow and
 * metrics_host_names (taken from n); metrics_listen needs a restart. */
void monitor_reload(struct server *srv, struct server_cfg *n, struct reload_result *r);

/* metrics_http.c (main thread): metrics_listen, bound before any image
 * opens (an address that cannot be bound stops the start); stop frees it. */
int metrics_http_start(struct server *srv, char *err, size_t errlen);
void metrics_http_stop(struct server *srv);

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
