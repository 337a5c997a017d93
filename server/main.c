/*
 * server/main.c - flashd: serve every ioDimm over NBD.  This file owns the
 * process: the command line, the start (a table of steps, start_steps),
 * the signals, the daemon's fork and the stop; admission of connections is
 * admit.c, the listening sockets listen.c, the configuration's reload
 * reload.c (main_int.h).
 *
 * With no options: the embedded default, a simulated ioDrive Duo (two
 * ioDimms of preset iodimm-mlc-320, stock format) exported as dimm0 and
 * dimm1 on 127.0.0.1:10809, state under ./var/ when run from the checkout
 * (else /var/lib/flashd).
 *
 * Configuration: --config FILE, else /etc/flashd/flashd.conf if it exists,
 * else the embedded default; the command line wins over the file for every
 * key.  --check-config checks it (everything but the images) and exits: 0
 * if it is good, 2 with the error otherwise.
 *
 * Start-up steps (start_steps; undone on failure, and on SIGTERM or
 * SIGINT meanwhile, then exit 0: "signals" below): configuration, state
 * directory, daemon, event loop, pidfile (locked), TCP listeners, ioDimms
 * (each opens its image and FTL on its own thread; every result is known
 * before READY), unix socket, control socket, READY (pidfile written).
 * Health policy: flashd starts only if every configured ioDimm opens (else
 * it logs why and exits 1); with --allow-degraded (allow_degraded = yes) it
 * serves those that open, logs a warning per ioDimm that did not and tells
 * systemd "STATUS=degraded: ..." (the others stay attachable: flashctl
 * attach retries the open).  Without --foreground the command returns once
 * that is decided, as systemd's start job does ("daemon" below).  Shutdown on SIGTERM/SIGINT:
 * stop accepting, drop connections still negotiating, let every ioDimm
 * answer what is in flight (for at most shutdown_timeout seconds, then the
 * connections left are force-closed) and close its FTL with a checkpoint.
 * SIGHUP (and POST /v1/reload): server_reload reads the configuration file
 * again through config_build, as at start-up, applies what can change while
 * serving and logs, one warning per key, what needs a restart.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "common/parse.h"
#include "hw/nand.h"
#include "server/flashd.h"
#include "server/main_int.h"

#define DEFAULT_CONFIG "/etc/flashd/flashd.conf"

struct server srv;
static int pidfile_fd = -1;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashd [options]\n"
		"  -c, --config FILE       configuration (see conf/flashd.conf); default:\n"
		"                          " DEFAULT_CONFIG " if it exists, else an\n"
		"                          embedded simulated ioDrive Duo (dimm0, dimm1)\n"
		"      --no-config         the embedded default even if " DEFAULT_CONFIG "\n"
		"                          exists\n"
		"      --check-config      check the configuration (without opening images or\n"
		"                          sockets) and exit: 0 if good, 2 if not\n"
		"      --allow-degraded    serve the ioDimms that open when some do not (default:\n"
		"                          refuse to start unless every one opens)\n"
		"  -s, --state-dir DIR     NAND images and sockets (default ./var in the checkout,\n"
		"                          else /var/lib/flashd)\n"
		"  -l, --listen HOST:PORT  NBD on TCP; repeatable; IPv6 as [ADDR]:PORT; :PORT for\n"
		"                          every address, IPv6 and IPv4 (default 127.0.0.1:10809)\n"
		"                          HOST:PORT' tls=MODE': that listener's TLS mode\n"
		"  -u, --unix PATH         NBD on a unix socket too (default STATE_DIR/flashd.sock)\n"
		"      --tls off|allowed|required\n"
		"                          STARTTLS on every listener: off (default), allowed\n"
		"                          (the client chooses), required (nothing without TLS)\n"
		"      --unix-tls MODE     the unix socket's TLS mode (default: --tls)\n"
		"      --tls-certificates DIR\n"
		"                          server-cert.pem, server-key.pem, ca-cert.pem [ca-crl.pem]\n"
		"      --tls-psk FILE      pre-shared keys, identity:hexkey per line (psktool)\n"
		"      --tls-verify-peer   require a client certificate signed by ca-cert.pem\n"
		"      --control PATH      control socket (default STATE_DIR/flashd.ctl)\n"
		"  -p, --preset NAME       preset of the default card's ioDimms (iodimm-mlc-320)\n"
		"      --timing on|off     NAND timing model of the simulated media (default on)\n"
		"      --poll-us N         after a request, poll N us before sleeping (default 50;\n"
		"                          0: always sleep; saves a wake-up per request at low depth)\n"
		"      --shutdown-timeout N\n"
		"                          on SIGTERM, close the connections still open after\n"
		"                          N s, dropping their replies (default 10)\n"
		"  -f, --foreground        do not fork; log to stderr\n"
		"  -P, --pidfile FILE      write the pid there\n"
		"      --syslog            log to syslog\n"
		"  -v, --verbose           more logging (per-option negotiation detail)\n"
		"  -V, --version\n"
		"Command-line options win over the file.  Management: flashctl (status, attach,\n"
		"detach, format, checkpoint, stats --live) over the control socket.\n");
}

/* ---- helpers ------------------------------------------------------------ */

struct dimm *server_find_dimm_by_export(struct server *s, const char *name, size_t len)
{
	for (int i = 0; i < s->ndimms; i++) {
		struct dimm *d = &s->dimms[i];
		if (strlen(d->cfg->export_name) == len && !memcmp(d->cfg->export_name, name, len))
			return d;
	}
	return NULL;
}

struct dimm *server_find_export(struct server *s, const char *name, size_t len)
{
	if (len == 0) {
		const char *def = s->cfg.default_export;
		return def ? server_find_dimm_by_export(s, def, strlen(def)) : NULL;
	}
	return server_find_dimm_by_export(s, name, len);
}

static int mkdir_p(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	}
	if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
/* ---- descriptor limit --------------------------------------------------- */

/* Every connection holds a descriptor: lift the soft limit to the hard one
 * (flashd uses no select(), so any number is fine). */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the descriptor limit to %llu: %s",
				 (unsigned long long)rl.rlim_max, strerror(errno));
	}
}

static int open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	if (!dir)
		return 64; /* a guess on the safe side */
	int n = 0;
	for (struct dirent *e; (e = readdir(dir));)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* the directory's own */
}

/* Once everything is open: can max_connections be met?  If not, accepting
 * will fail with EMFILE at some point (and back off: accept_error_cb). */
static void check_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return;
	/* a descriptor per connection, a few for control clients */
	uint64_t used = (uint64_t)open_fds(), need = used + (uint64_t)srv.cfg.max_connections + 8;
	if (rl.rlim_cur >= need)
		return;
	log_warn("the descriptor limit (%llu, hard %llu) is below what max_connections = %d needs "
		 "(about %llu): beyond about %llu connections, new clients wait until others leave; "
		 "raise the limit (ulimit -n, LimitNOFILE=) or lower max_connections",
		 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
		 srv.cfg.max_connections, (unsigned long long)need,
		 (unsigned long long)(rl.rlim_cur > used ? rl.rlim_cur - used : 0));
}

/* ---- shutdown ----------------------------------------------------------- */

static void shutdown_server(void)
{
	if (srv.shutting_down)
		return;
	srv.shutting_down = true;
	log_info("shutting down: finishing requests in flight (for at most %d s), writing checkpoints",
		 srv.cfg.shutdown_timeout);
	sd_notify(0, "STOPPING=1");
	/* the NBD listeners; the control socket's goes with ctl_stop */
	listeners_close_owned(&srv);
	if (srv.cfg.unix_path)
		unlink(srv.cfg.unix_path);
	waiting_drop_all();
	handshake_shutdown_all(&srv);
	for (int i = 0; i < srv.ndimms; i++)
		dimm_stop(&srv.dimms[i]);
	/* bounded: each ioDimm force-closes its connections after
	 * shutdown_timeout, then closes its FTL (checkpoint) */
	for (int i = 0; i < srv.ndimms; i++)
		dimm_join(&srv.dimms[i]);
	/* answers what waited for the ioDimms, then ends the loop once the
	 * replies are out */
	ctl_shutdown(&srv);
}
/* ---- signals ------------------------------------------------------------ */

/*
 * SIGTERM, SIGINT and SIGHUP are blocked from the first line of main until
 * their events are on the loop, before the pidfile, a socket or an image is
 * opened; the ioDimm threads keep them blocked (dimm_start), so the main
 * thread's loop takes them.  While starting (until every ioDimm's open
 * result is known) the main thread waits in that loop, so a signal then is
 * taken at once:
 *   SIGTERM, SIGINT  the start stops: an ioDimm whose open has not begun
 *                    is not opened, one that is opening is closed cleanly
 *                    (checkpoint) once open, and flashd exits 0.  An open
 *                    is not cut short (an image being created or formatted
 *                    is never left half-made anyway: nand_open,
 *                    ftl_format).
 *   SIGHUP           remembered: the configuration file is read again
 *                    once flashd is ready (what the file says by then is
 *                    what runs).
 * Main thread only.
 */
static bool starting = true;    /* until the open results are known */
static int stop_signal;         /* the signal that stopped the start */
static bool reload_deferred;    /* SIGHUP while starting */

static const char *signal_name(int sig)
{
	return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	if (starting) {
		if (sig == SIGHUP) {
			if (!reload_deferred && !stop_signal)
				log_info("received SIGHUP while starting: the configuration file is read "
					 "again once flashd is ready");
			reload_deferred = true;
		} else if (!stop_signal) {
			stop_signal = (int)sig;
			log_info("received %s while starting: stopping (ioDimms being opened are closed "
				 "cleanly once open, the others are not opened)", signal_name((int)sig));
			sd_notify(0, "STOPPING=1");
			for (int i = 0; i < srv.ndimms; i++)
				dimm_stop(&srv.dimms[i]);
		}
		return;
	}
	if (sig == SIGHUP) {
		if (srv.shutting_down)
			return;
		struct reload_result r;
		server_reload(&srv, "SIGHUP", &r);
		reload_result_free(&r);
		return;
	}
	log_info("received %s", signal_name((int)sig));
	shutdown_server();
}

/* Is every ioDimm's start-up open result known? */
static bool opens_known(void)
{
	for (int i = 0; i < srv.ndimms; i++)
		if (!dimm_ready(&srv.dimms[i], NULL))
			return false;
	return true;
}

/* An ioDimm thread has its open result (it activates srv.start_ev): once
 * all have, the start-up loop ends.  (An activation that comes after the
 * main thread saw every result is run by the serving loop: nothing to do.) */
static void open_result_cb(evutil_socket_t fd, short what, void *arg)
{
	if (starting && opens_known())
		event_base_loopbreak(srv.base);
}

/* ---- daemon ------------------------------------------------------------- */

/*
 * Without --foreground flashd forks; the parent (the command the admin or
 * an init script ran) exits only once the start's result is known, with
 * the same meaning as READY=1 for systemd (Type=notify): 0 once flashd is
 * ready (every ioDimm open, or with --allow-degraded those that opened:
 * the warnings for the others were on stderr), else the child's exit
 * status (1: the start failed, its reasons on stderr; 0: a signal stopped
 * it), or 1 if it died.  ready_fd: the child's end of the pipe, -1 once
 * ready (or in the foreground).
 */
static int ready_fd = -1;

static int daemon_wait(pid_t pid, int fd)
{
	char c;
	ssize_t n;
	while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n == 1)
		return 0; /* ready: the child serves on */
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			fprintf(stderr, "flashd: waiting for the daemon: %s\n", strerror(errno));
			return 1;
		}
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	fprintf(stderr, "flashd: the daemon was killed by signal %d before it was ready\n",
		WTERMSIG(st));
	return 1;
}

/* The child is ready: let the parent exit 0; its stderr to /dev/null. */
static void daemon_ready(void)
{
	if (ready_fd < 0)
		return;
	if (write(ready_fd, "r", 1) != 1)
		log_warn("cannot tell the parent process that flashd is ready: %s", strerror(errno));
	close(ready_fd);
	ready_fd = -1;
	log_also_stderr(false);
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 2);
		close(nul);
	}
}

/* ---- command line ------------------------------------------------------- */

/* option NAME's value (optarg) into *OUT: a whole number from MIN to MAX,
 * in UNIT; -1 (said on stderr) when it is not one */
static int cli_int(const char *name, int min, int max, const char *unit, int *out)
{
	uint64_t v;
	if (parse_uint(optarg, (uint64_t)min, (uint64_t)max, &v)) {
		fprintf(stderr, "flashd: %s takes %d to %d (%s), not '%s'\n", name, min, max, unit,
			optarg);
		return -1;
	}
	*out = (int)v;
	return 0;
}

/*
 * The command line into *cli, *config, *check_only and *no_config.
 * Returns -1 to go on, else the exit status (--help, --version: 0; a bad
 * option: 2).
 */
static int parse_options(int argc, char **argv, struct server_cfg *cli, const char **config,
			 bool *check_only, bool *no_config)
{
	static const struct option opts[] = {
		{ "config", required_argument, 0, 'c' },
		{ "state-dir", required_argument, 0, 's' },
		{ "listen", required_argument, 0, 'l' },
		{ "unix", required_argument, 0, 'u' },
		{ "control", required_argument, 0, 'C' },
		{ "preset", required_argument, 0, 'p' },
		{ "timing", required_argument, 0, 'T' },
		{ "poll-us", required_argument, 0, 'O' },
		{ "shutdown-timeout", required_argument, 0, 'D' },
		{ "foreground", no_argument, 0, 'f' },
		{ "pidfile", required_argument, 0, 'P' },
		{ "syslog", no_argument, 0, 'S' },
		{ "verbose", no_argument, 0, 'v' },
		{ "version", no_argument, 0, 'V' },
		{ "help", no_argument, 0, 'h' },
		{ "allow-degraded", no_argument, 0, 'A' },
		{ "check-config", no_argument, 0, 'K' },
		{ "no-config", no_argument, 0, 'N' },
		{ "tls", required_argument, 0, 1001 },
		{ "unix-tls", required_argument, 0, 1002 },
		{ "tls-certificates", required_argument, 0, 1003 },
		{ "tls-psk", required_argument, 0, 1004 },
		{ "tls-verify-peer", no_argument, 0, 1005 },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:s:l:u:p:fP:vVh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': *config = optarg; break;
		case 's': cli->state_dir = strdup(optarg); break;
		case 'l':
			cli->listen = realloc(cli->listen, (size_t)(cli->nlisten + 1) * sizeof *cli->listen);
			cli->listen[cli->nlisten++] = strdup(optarg);
			break;
		case 'u': cli->unix_path = strdup(optarg); break;
		case 'C': cli->control_path = strdup(optarg); break;
		case 'p':
			if (!nand_preset_description(optarg)) {
				fprintf(stderr, "flashd: unknown preset '%s'; known presets:\n", optarg);
				for (size_t i = 0; nand_preset_name(i); i++)
					fprintf(stderr, "  %s\n", nand_preset_name(i));
				return 2;
			}
			cli->default_preset = strdup(optarg);
			break;
		case 'T':
			if (!strcmp(optarg, "on"))
				cli->timing = 1;
			else if (!strcmp(optarg, "off"))
				cli->timing = 0;
			else {
				fprintf(stderr, "flashd: --timing takes on or off\n");
				return 2;
			}
			break;
		case 'O':
			if (cli_int("--poll-us", 0, 10000, "microseconds", &cli->poll_us))
				return 2;
			break;
		case 'D':
			if (cli_int("--shutdown-timeout", 1, 3600, "seconds", &cli->shutdown_timeout))
				return 2;
			break;
		case 'f': cli->foreground = true; break;
		case 'P': cli->pidfile = strdup(optarg); break;
		case 'S': cli->use_syslog = true; break;
		case 'v': cli->verbose++; break;
		case 'V': printf("flashd %s\n", FLASHD_VERSION); return 0;
		case 'A': cli->allow_degraded = 1; break;
		case 'K': *check_only = true; break;
		case 'N': *no_config = true; break;
		case 1001:
		case 1002: {
			int m = tls_mode_parse(optarg);
			if (m < 0) {
				fprintf(stderr, "flashd: --%s takes off, allowed or required, not '%s'\n",
					c == 1001 ? "tls" : "unix-tls", optarg);
				return 2;
			}
			*(c == 1001 ? &cli->tls : &cli->unix_tls) = m;
			break;
		}
		case 1003:
		case 1004: {
			char w[4200];
			snprintf(w, sizeof w, "--%s '%s'", c == 1003 ? "tls-certificates" : "tls-psk", optarg);
			if (c == 1003) {
				cli->tls_certificates = strdup(optarg);
				cli->tls_certificates_where = strdup(w);
			} else {
				cli->tls_psk = strdup(optarg);
				cli->tls_psk_where = strdup(w);
			}
			break;
		}
		case 1005: cli->tls_verify_peer = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "flashd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (*config && *no_config) {
		fprintf(stderr, "flashd: --config and --no-config exclude each other\n");
		return 2;
	}
	return -1;
}

/* --check-config: what the good configuration srv.cfg would serve. */
static void print_config(void)
{
	printf("flashd: configuration %s is good: %d ioDimm(s)%s\n",
	       srv.cfg.config_file ? srv.cfg.config_file : "(embedded default)", srv.cfg.ndimms,
	       srv.cfg.allow_degraded ? ", degraded start allowed" : "");
	for (int i = 0; i < srv.cfg.ndimms; i++) {
		struct dimm_cfg *d = &srv.cfg.dimms[i];
		if (!strcmp(d->backend, "mtd"))
			printf("  [dimm %s] export '%s', raw NAND device %s%s\n", d->name,
			       d->export_name, d->image, d->readonly ? ", read-only" : "");
		else
			printf("  [dimm %s] export '%s', preset %s, image %s%s\n", d->name,
			       d->export_name, d->preset, d->image, d->readonly ? ", read-only" : "");
	}
	for (int i = 0; i < srv.cfg.nlisten; i++)
		printf("  listen %s\n", srv.cfg.listen[i]);
	if (srv.cfg.unix_path && srv.cfg.unix_path[0])
		printf("  unix socket %s\n", srv.cfg.unix_path);
	printf("  control socket %s\n", srv.cfg.control_path);
	if (tls_available())
		printf("  TLS: %s%s%s%s, default mode %s, unix socket %s\n",
		       srv.cfg.tls_certificates ? "certificates " : "",
		       srv.cfg.tls_certificates ? srv.cfg.tls_certificates : "",
		       srv.cfg.tls_psk ? (srv.cfg.tls_certificates ? ", PSK file " : "PSK file ") : "",
		       srv.cfg.tls_psk ? srv.cfg.tls_psk : "", tls_mode_name(srv.cfg.tls),
		       tls_mode_name(srv.cfg.unix_tls));
}

/* ---- start: a table of steps -------------------------------------------- */

/*
 * The start-up steps, in order (the header's "Start-up steps").  A step
 * returns START_ON to go on; START_EXIT to end main at once with
 * st->exit_status (nothing to undo yet, or the daemon's parent); or
 * START_UNDO: the start failed (exit 1) or a signal stopped it (exit 0),
 * and what the steps so far made is undone (start_undo: the step's
 * undo_dimms says whether ioDimm threads exist by then).
 */
enum start_result { START_ON, START_EXIT, START_UNDO };

struct start {
	int exit_status;            /* of START_EXIT, START_UNDO */
	int up;                     /* ioDimms open */
	sigset_t stop_sigs;         /* blocked from the first line of main */
	char err[1024];
};

static enum start_result step_state_dir(struct start *st)
{
	/* images, the state directory and everything else flashd makes:
	 * 0600 / 0700 by default (umask = in [server]) */
	umask((mode_t)srv.cfg.umask);
	int rc = mkdir_p(srv.cfg.state_dir);
	if (rc) {
		log_err("cannot create state directory %s: %s", srv.cfg.state_dir, strerror(-rc));
		return START_EXIT;
	}
	return START_ON;
}

static enum start_result step_daemon(struct start *st)
{
	if (srv.cfg.foreground)
		return START_ON;
	/* classic daemon: fork, new session, stdin and stdout to /dev/null;
	 * the parent exits once the start's result is known (daemon_wait),
	 * and till then the child's warnings and errors also go to the
	 * caller's stderr (daemon_ready ends that) */
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		log_err("pipe: %s", strerror(errno));
		return START_EXIT;
	}
	pid_t pid = fork();
	if (pid < 0) {
		log_err("fork: %s", strerror(errno));
		return START_EXIT;
	}
	if (pid > 0) {
		close(pfd[1]);
		st->exit_status = daemon_wait(pid, pfd[0]);
		return START_EXIT;
	}
	close(pfd[0]);
	ready_fd = pfd[1];
	setsid();
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 0);
		dup2(nul, 1);
		close(nul);
	}
	if (!srv.cfg.use_syslog)
		log_init(true, srv.cfg.verbose);
	log_also_stderr(true);
	return START_ON;
}

static enum start_result step_event_loop(struct start *st)
{
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	evthread_use_pthreads();
	pthread_mutex_init(&srv.lock, NULL);
	pthread_mutex_init(&srv.cmd_lock, NULL);
	pthread_mutex_init(&srv.budget_lock, NULL);
	TAILQ_INIT(&srv.budget_q);
	srv.base = event_base_new();
	srv.nbd_refusals = (struct refusal_log){ .what = "connection(s)", .refused = ": refused: " };
	srv.ctl_refusals = (struct refusal_log){ .what = "control request(s)", .refused = " refused: " };
	srv.name_refusals = (struct refusal_log){ .what = "request(s) for an unknown export", .refused = ": " };
	srv.denied_refusals = (struct refusal_log){ .what = "request(s) for an export its access rules deny", .refused = ": " };
	srv.started = time(NULL);
	if (srv.base) {
		srv.cmd_ev = event_new(srv.base, -1, EV_READ, ctl_cmd_done, &srv);
		srv.start_ev = event_new(srv.base, -1, EV_READ, open_result_cb, NULL);
		srv.sig_term = evsignal_new(srv.base, SIGTERM, signal_cb, NULL);
		srv.sig_int = evsignal_new(srv.base, SIGINT, signal_cb, NULL);
		srv.sig_hup = evsignal_new(srv.base, SIGHUP, signal_cb, NULL);
	}
	if (!srv.base || !srv.cmd_ev || !srv.start_ev || !srv.sig_term || !srv.sig_int ||
	    !srv.sig_hup || event_add(srv.sig_term, NULL) || event_add(srv.sig_int, NULL) ||
	    event_add(srv.sig_hup, NULL)) {
		log_err("cannot create the event loop");
		return START_EXIT;
	}
	sigprocmask(SIG_UNBLOCK, &st->stop_sigs, NULL);
	return START_ON;
}

static enum start_result step_pidfile(struct start *st)
{
	if (!srv.cfg.pidfile)
		return START_ON;
	pidfile_fd = open(srv.cfg.pidfile, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (pidfile_fd >= 0)
		fchmod(pidfile_fd, 0644); /* readable by all whatever the umask */
	if (pidfile_fd < 0 || flock(pidfile_fd, LOCK_EX | LOCK_NB) < 0) {
		log_err("pidfile %s: %s", srv.cfg.pidfile,
			errno == EWOULDBLOCK ? "another flashd holds it" : strerror(errno));
		return START_EXIT;
	}
	return START_ON;
}

/* TCP listeners first: an address that cannot be bound (in use, not on
 * this host) is reported before any image is opened.  Nothing is accepted
 * before READY (disabled while the loop waits for the opens; clients wait
 * in the backlog).  The unix and control sockets come after the images:
 * binding them replaces a socket file, which must not happen to another
 * flashd using the same state directory (its image locks stop this one
 * first). */
static enum start_result step_tcp_listeners(struct start *st)
{
	for (int i = 0; i < srv.cfg.nlisten; i++) {
		if (listen_tcp(srv.cfg.listen[i], st->err, sizeof st->err)) {
			log_err("%s", st->err);
			return START_UNDO;
		}
	}
	if (metrics_http_start(&srv, st->err, sizeof st->err)) {
		log_err("%s", st->err);
		return START_UNDO;
	}
	listeners_enable(&srv, false);
	event_base_loop(srv.base, EVLOOP_NONBLOCK); /* a signal that came so far */
	if (stop_signal) {
		st->exit_status = 0;
		return START_UNDO;
	}
	return START_ON;
}

/* ioDimms: each opens its image and FTL on its own thread, in parallel;
 * every open result is known before READY (flashd.h, "Attach state": the
 * ready handshake orders d->info and d->size before their use); meanwhile
 * the loop takes signals ("signals" above). */
static enum start_result step_dimms(struct start *st)
{
	srv.ndimms = srv.cfg.ndimms;
	srv.dimms = calloc((size_t)srv.ndimms, sizeof *srv.dimms);
	for (int i = 0; i < srv.ndimms; i++) {
		struct dimm *d = &srv.dimms[i];
		d->srv = &srv;
		d->cfg = &srv.cfg.dimms[i];
		d->index = i;
		int rc = dimm_start(d);
		if (rc) {
			log_err("%s: cannot start its thread: %s", d->cfg->name, strerror(-rc));
			return START_EXIT;
		}
	}
	while (!opens_known())
		event_base_dispatch(srv.base);
	starting = false;
	for (int i = 0; i < srv.ndimms; i++) {
		struct dimm *d = &srv.dimms[i];
		int orc;
		dimm_ready(d, &orc);
		if (orc == -ECANCELED && stop_signal) {
			log_info("%s: not opened (flashd is stopping)", d->cfg->name);
			d->mstate = DM_FAILED;
		} else if (orc) {
			d->mstate = DM_FAILED;
			if (srv.cfg.allow_degraded)
				log_warn("%s: %s; it is not exported (degraded start allowed; after fixing "
					 "it, 'flashctl attach %s')", d->cfg->name, d->open_errmsg, d->cfg->name);
			else
				log_err("%s: %s", d->cfg->name, d->open_errmsg);
		} else {
			d->mstate = DM_ATTACHED;
			d->exported = true;
			st->up++;
		}
	}
	if (stop_signal) {
		st->exit_status = 0;
		return START_UNDO;
	}
	listeners_enable(&srv, true); /* the TCP ones; accepting once the loop runs */
	if (!st->up || (st->up < srv.ndimms && !srv.cfg.allow_degraded)) {
		if (!st->up)
			log_err("no ioDimm could be opened; exiting");
		else
			log_err("refusing to start: %d of %d ioDimm(s) did not open (--allow-degraded, or "
				"allow_degraded = yes in [server], serves the others)", srv.ndimms - st->up,
				srv.ndimms);
		return START_UNDO;
	}
	return START_ON;
}

static enum start_result step_unix_socket(struct start *st)
{
	if (srv.cfg.unix_path && srv.cfg.unix_path[0] &&
	    listen_unix(srv.cfg.unix_path, st->err, sizeof st->err)) {
		log_err("%s", st->err);
		return START_UNDO;
	}
	return START_ON;
}

static enum start_result step_control_socket(struct start *st)
{
	if (ctl_start(&srv, st->err, sizeof st->err)) {
		log_err("%s", st->err);
		return START_UNDO;
	}
	if (monitor_start(&srv)) {
		log_err("cannot start the health monitor: out of memory");
		return START_UNDO;
	}
	return START_ON;
}

static enum start_result step_ready(struct start *st)
{
	if (pidfile_fd >= 0) {
		char buf[32];
		int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
		if (ftruncate(pidfile_fd, 0) < 0 || pwrite(pidfile_fd, buf, (size_t)n, 0) != n)
			log_warn("cannot write pidfile %s", srv.cfg.pidfile);
	}
	check_fd_limit();
	if (srv.cfg.fault_injection == 1)
		log_warn("[server] fault_injection = yes: whoever may use the control socket %s can break "
			 "the ioDimms (flashctl inject: dead dies, bad blocks, lost data); set it to no unless "
			 "this is a test", srv.cfg.control_path);
	if (st->up < srv.ndimms)
		log_warn("flashd %s ready, degraded: serving %d of %d ioDimm(s), control socket %s",
			 FLASHD_VERSION, st->up, srv.ndimms, srv.cfg.control_path);
	else
		log_info("flashd %s ready: %d ioDimm(s), control socket %s", FLASHD_VERSION, st->up,
			 srv.cfg.control_path);
	server_update_status(&srv);
	sd_notifyf(0, "READY=1\nMAINPID=%d", (int)getpid());
	daemon_ready();
	if (reload_deferred) {
		struct reload_result r;
		server_reload(&srv, "SIGHUP (received while starting)", &r);
		reload_result_free(&r);
	}
	return START_ON;
}

static const struct start_step {
	const char *name;
	enum start_result (*run)(struct start *st);
	bool undo_dimms;            /* START_UNDO stops the ioDimm threads first */
} start_steps[] = {
	{ "state directory", step_state_dir, false },
	{ "daemon", step_daemon, false },
	{ "event loop", step_event_loop, false },
	{ "pidfile", step_pidfile, false },
	{ "TCP listeners", step_tcp_listeners, false },
	{ "ioDimms", step_dimms, true },
	{ "unix socket", step_unix_socket, true },
	{ "control socket", step_control_socket, true },
	{ "ready", step_ready, true },
};

/* START_UNDO: nothing was posted on the command channel yet, so no reply
 * to wait for.  Each ioDimm that opened closes cleanly (checkpoint). */
static int start_undo(const struct start *st, bool undo_dimms)
{
	if (undo_dimms) {
		for (int i = 0; i < srv.ndimms; i++)
			dimm_stop(&srv.dimms[i]);
		for (int i = 0; i < srv.ndimms; i++)
			dimm_join(&srv.dimms[i]);
	}
	ctl_stop(&srv);
	monitor_stop(&srv);
	metrics_http_stop(&srv);
	if (srv.cfg.pidfile)
		unlink(srv.cfg.pidfile);
	if (!st->exit_status)
		log_info("stopped by %s before it was ready", signal_name(stop_signal));
	return st->exit_status;
}

/* The serving loop ended (shutdown_server): free everything, exit 0. */
static int serve_end(void)
{
	if (!srv.shutting_down)
		shutdown_server();
	ctl_stop(&srv);
	monitor_stop(&srv);
	metrics_http_stop(&srv);
	if (srv.cfg.pidfile)
		unlink(srv.cfg.pidfile);
	event_free(srv.sig_term);
	event_free(srv.sig_int);
	event_free(srv.sig_hup);
	event_free(srv.cmd_ev);
	event_free(srv.start_ev);
	if (srv.nbd_refusals.ev)
		event_free(srv.nbd_refusals.ev);
	if (srv.ctl_refusals.ev)
		event_free(srv.ctl_refusals.ev);
	if (srv.name_refusals.ev)
		event_free(srv.name_refusals.ev);
	if (srv.denied_refusals.ev)
		event_free(srv.denied_refusals.ev);
	event_base_free(srv.base);
	free(srv.dimms);
	addr_tab_free(&srv);
	config_free(&srv.cfg);
	reload_exit();
	tls_exit();
	log_info("stopped");
	return 0;
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct server_cfg cli = { .timing = -1, .fault_injection = -1, .poll_us = -1,
				  .allow_degraded = -1, .tls = -1,
				  .unix_tls = -1, .tls_verify_peer = -1,
				  .unix_mode = -1, .control_mode = -1, .umask = -1, .unix_gid = -1,
				  .control_gid = -1, .max_conn_per_addr = -1, .max_hs_per_addr = -1,
				  .idle_timeout_busy = -1 };
	/* A fixed mmap threshold (which also stops glibc from raising it after
	 * the first large free): every block of 128 KiB or more - request
	 * buffers, input buffers, a control request's large evbuffer chains -
	 * is its own mapping and goes back to the kernel when freed, instead
	 * of staying in the heap after a burst (hostile or not). */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	/* the stop and reload signals wait until their events are on the loop
	 * ("signals" above): none kills a start that has begun */
	struct start st = { .exit_status = 1 }; /* of a start undone: failed, or 0 if stopped by a signal */
	sigemptyset(&st.stop_sigs);
	sigaddset(&st.stop_sigs, SIGTERM);
	sigaddset(&st.stop_sigs, SIGINT);
	sigaddset(&st.stop_sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &st.stop_sigs, NULL);
	const char *config = NULL;
	bool check_only = false, no_config = false;

	int rc = parse_options(argc, argv, &cli, &config, &check_only, &no_config);
	if (rc >= 0)
		return rc;
	if (!config && !no_config && access(DEFAULT_CONFIG, F_OK) == 0)
		config = DEFAULT_CONFIG;
	/* command line first, so it wins over the file; cli is kept for
	 * SIGHUP's reload */
	if (config_build_first(&cli, config, &srv.cfg, st.err, sizeof st.err)) {
		fprintf(stderr, "flashd: %s\n", st.err);
		return 2;
	}
	/* TLS keys are read now: a missing or bad file stops flashd before any
	 * image opens (and --check-config reports it) */
	if (tls_init(&srv.cfg, st.err, sizeof st.err)) {
		fprintf(stderr, "flashd: %s\n", st.err);
		config_free(&srv.cfg);
		return 2;
	}
	handshake_acl_warnings(&srv.cfg);
	if (check_only) {
		print_config();
		tls_exit();
		config_free(&srv.cfg);
		return 0;
	}
	srv.test_hooks = getenv("FLASHD_TEST_HOOKS") && !strcmp(getenv("FLASHD_TEST_HOOKS"), "1");
	log_init(srv.cfg.use_syslog, srv.cfg.verbose);
	ftl_set_logger(dimm_ftl_log, NULL);

	for (size_t i = 0; i < sizeof start_steps / sizeof start_steps[0]; i++) {
		enum start_result r = start_steps[i].run(&st);
		if (r == START_EXIT)
			return st.exit_status;
		if (r == START_UNDO)
			return start_undo(&st, start_steps[i].undo_dimms);
	}
	event_base_dispatch(srv.base);
	return serve_end();
}
