/*
 * server/main.c - flashd: serve every ioDimm over NBD.
 *
 * With no options: the embedded default, a simulated ioDrive Duo (two
 * ioDimms of preset iodimm-mlc-320, stock format) exported as dimm0 and
 * dimm1 on 127.0.0.1:10809, state under ./var/ when run from the checkout
 * (else /var/lib/flashd).
 *
 * Start-up steps (undone in reverse on failure): configuration, state
 * directory, ioDimms (each opens its image and FTL on its own thread),
 * listeners, control socket, pidfile, READY.  Shutdown on SIGTERM/SIGINT:
 * stop accepting, drop connections still negotiating, let every ioDimm
 * answer what is in flight and close its FTL with a checkpoint.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include "server/flashd.h"

static struct server srv;
static int pidfile_fd = -1;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashd [options]\n"
		"  -c, --config FILE       configuration (see conf/flashd.conf); default: an\n"
		"                          embedded simulated ioDrive Duo (dimm0, dimm1)\n"
		"  -s, --state-dir DIR     NAND images and sockets (default ./var in the checkout,\n"
		"                          else /var/lib/flashd)\n"
		"  -l, --listen HOST:PORT  NBD on TCP; repeatable; IPv6 as [ADDR]:PORT\n"
		"                          (default 127.0.0.1:10809)\n"
		"  -u, --unix PATH         NBD on a unix socket too (default STATE_DIR/flashd.sock)\n"
		"      --control PATH      control socket (default STATE_DIR/flashd.ctl)\n"
		"  -p, --preset NAME       preset of the default card's ioDimms (iodimm-mlc-320)\n"
		"      --timing on|off     NAND timing model of the simulated media (default on)\n"
		"      --poll-us N         after a request, poll N us before sleeping (default 50;\n"
		"                          0: always sleep; saves a wake-up per request at low depth)\n"
		"  -f, --foreground        do not fork; log to stderr\n"
		"  -P, --pidfile FILE      write the pid there\n"
		"      --syslog            log to syslog\n"
		"  -v, --verbose           more logging (per-option negotiation detail)\n"
		"  -V, --version\n");
}

/* ---- helpers ------------------------------------------------------------ */

struct dimm *server_find_export(struct server *s, const char *name, size_t len)
{
	if (len == 0) {
		/* the default export: the first ioDimm that is up */
		for (int i = 0; i < s->ndimms; i++)
			if (!s->dimms[i].open_error)
				return &s->dimms[i];
		return NULL;
	}
	for (int i = 0; i < s->ndimms; i++) {
		struct dimm *d = &s->dimms[i];
		if (!d->open_error && strlen(d->cfg->export_name) == len &&
		    !memcmp(d->cfg->export_name, name, len))
			return d;
	}
	return NULL;
}

void server_conn_closed(struct server *s)
{
	pthread_mutex_lock(&s->lock);
	s->nconns--;
	pthread_mutex_unlock(&s->lock);
}

static char *default_state_dir(void)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *dir = dirname(exe);          /* .../build */
		char probe[4200];
		snprintf(probe, sizeof probe, "%s/../server/main.c", dir);
		if (access(probe, F_OK) == 0) {
			char path[4200];
			snprintf(path, sizeof path, "%s/../var", dir);
			char *real = realpath(dir, NULL);
			if (real) {
				snprintf(path, sizeof path, "%s/var", dirname(real));
				char *p = strdup(path);
				free(real);
				return p;
			}
			return strdup(path);
		}
	}
	return strdup("/var/lib/flashd");
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

/* ---- listeners ---------------------------------------------------------- */

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *arg)
{
	char peer[96] = "unix";
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
		snprintf(peer, sizeof peer, "%s:%u", a, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *in = (struct sockaddr_in6 *)sa;
		char a[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof a);
		snprintf(peer, sizeof peer, "[%s]:%u", a, ntohs(in->sin6_port));
	} else {
		static unsigned long unix_seq;
		snprintf(peer, sizeof peer, "unix#%lu", ++unix_seq);
	}
	if (sa->sa_family != AF_UNIX) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	pthread_mutex_lock(&srv.lock);
	bool full = srv.nconns >= srv.cfg.max_connections;
	if (!full)
		srv.nconns++;
	pthread_mutex_unlock(&srv.lock);
	if (full || srv.shutting_down) {
		log_warn("%s: refused: %s", peer,
			 full ? "connection limit reached (max_connections)" : "shutting down");
		close(fd);
		return;
	}
	handshake_start(&srv, fd, peer);
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	int e = EVUTIL_SOCKET_ERROR();
	log_err("accept: %s", evutil_socket_error_to_string(e));
	if (e == EMFILE || e == ENFILE) {
		/* out of descriptors: pause accepting for a moment */
		evconnlistener_disable(l);
		struct timeval tv = { 0, 200000 };
		event_base_once(srv.base, -1, EV_TIMEOUT,
				(event_callback_fn)(void (*)(void))evconnlistener_enable, l, &tv);
	}
}

static int add_listener(struct evconnlistener *l)
{
	if (!l)
		return -1;
	evconnlistener_set_error_cb(l, accept_error_cb);
	struct evconnlistener **a = realloc(srv.listeners, (size_t)(srv.nlisteners + 1) * sizeof *a);
	if (!a)
		return -1;
	srv.listeners = a;
	srv.listeners[srv.nlisteners++] = l;
	return 0;
}

static int listen_tcp(const char *spec, char *err, size_t errlen)
{
	char host[256];
	const char *port;
	if (spec[0] == '[') {
		const char *e = strchr(spec, ']');
		if (!e || e[1] != ':') {
			snprintf(err, errlen, "bad listen address '%s' (IPv6: [ADDR]:PORT)", spec);
			return -EINVAL;
		}
		snprintf(host, sizeof host, "%.*s", (int)(e - spec - 1), spec + 1);
		port = e + 2;
	} else {
		const char *c = strrchr(spec, ':');
		if (!c) {
			snprintf(err, errlen, "bad listen address '%s' (HOST:PORT)", spec);
			return -EINVAL;
		}
		snprintf(host, sizeof host, "%.*s", (int)(c - spec), spec);
		port = c + 1;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "listen address '%s': %s", spec, gai_strerror(rc));
		return -EINVAL;
	}
	int made = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		struct evconnlistener *l = evconnlistener_new_bind(
			srv.base, accept_cb, NULL,
			LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
			ai->ai_addr, (int)ai->ai_addrlen);
		if (!l) {
			snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
			freeaddrinfo(res);
			return -errno ? -errno : -EADDRINUSE;
		}
		add_listener(l);
		made++;
	}
	freeaddrinfo(res);
	log_info("listening on %s", spec);
	return made ? 0 : -EINVAL;
}

static int listen_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "unix socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			return -EEXIST;
		}
		unlink(path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	chmod(path, 0660);
	if (add_listener(evconnlistener_new(srv.base, accept_cb, NULL, LEV_OPT_CLOSE_ON_FREE, -1, fd)) < 0) {
		snprintf(err, errlen, "cannot listen on %s", path);
		return -ENOMEM;
	}
	log_info("listening on %s", path);
	return 0;
}

/* ---- shutdown ----------------------------------------------------------- */

static void shutdown_server(void)
{
	if (srv.shutting_down)
		return;
	srv.shutting_down = true;
	log_info("shutting down: finishing requests in flight, writing checkpoints");
	sd_notify(0, "STOPPING=1");
	for (int i = 0; i < srv.nlisteners; i++)
		evconnlistener_free(srv.listeners[i]);
	srv.nlisteners = 0;
	if (srv.cfg.unix_path)
		unlink(srv.cfg.unix_path);
	handshake_shutdown_all(&srv);
	for (int i = 0; i < srv.ndimms; i++)
		dimm_stop(&srv.dimms[i]);
	for (int i = 0; i < srv.ndimms; i++)
		dimm_join(&srv.dimms[i]);
	ctl_stop(&srv);
	event_base_loopexit(srv.base, NULL);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	if (sig == SIGHUP) {
		log_info("SIGHUP: nothing to reload (restart flashd to apply configuration changes)");
		return;
	}
	log_info("received %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	shutdown_server();
}

static void ftl_logger(void *arg, const char *msg)
{
	log_warn("ftl: %s", msg);
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv)
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
		{ "foreground", no_argument, 0, 'f' },
		{ "pidfile", required_argument, 0, 'P' },
		{ "syslog", no_argument, 0, 'S' },
		{ "verbose", no_argument, 0, 'v' },
		{ "version", no_argument, 0, 'V' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	struct server_cfg cli = { .timing = -1, .poll_us = -1 };
	const char *config = NULL;
	char err[1024] = "";
	int c;

	while ((c = getopt_long(argc, argv, "c:s:l:u:p:fP:vVh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 's': cli.state_dir = strdup(optarg); break;
		case 'l':
			cli.listen = realloc(cli.listen, (size_t)(cli.nlisten + 1) * sizeof *cli.listen);
			cli.listen[cli.nlisten++] = strdup(optarg);
			break;
		case 'u': cli.unix_path = strdup(optarg); break;
		case 'C': cli.control_path = strdup(optarg); break;
		case 'p':
			if (!nand_preset_find(optarg)) {
				fprintf(stderr, "flashd: unknown preset '%s'; known presets:\n", optarg);
				for (size_t i = 0; nand_preset_at(i); i++)
					fprintf(stderr, "  %s\n", nand_preset_at(i)->name);
				return 2;
			}
			cli.default_preset = strdup(optarg);
			break;
		case 'T':
			if (!strcmp(optarg, "on"))
				cli.timing = 1;
			else if (!strcmp(optarg, "off"))
				cli.timing = 0;
			else {
				fprintf(stderr, "flashd: --timing takes on or off\n");
				return 2;
			}
			break;
		case 'O': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < 0 || v > 10000) {
				fprintf(stderr, "flashd: --poll-us takes 0 to 10000 (microseconds)\n");
				return 2;
			}
			cli.poll_us = (int)v;
			break;
		}
		case 'f': cli.foreground = true; break;
		case 'P': cli.pidfile = strdup(optarg); break;
		case 'S': cli.use_syslog = true; break;
		case 'v': cli.verbose++; break;
		case 'V': printf("flashd %s\n", FLASHD_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "flashd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}

	/* command line first, so it wins over the file */
	srv.cfg = cli;
	if (config && config_load(&srv.cfg, config, err, sizeof err)) {
		fprintf(stderr, "flashd: %s\n", err);
		return 2;
	}
	if (cli.nlisten && config) {
		/* --listen replaces the file's addresses: keep only the first cli.nlisten */
		for (int i = cli.nlisten; i < srv.cfg.nlisten; i++)
			free(srv.cfg.listen[i]);
		srv.cfg.nlisten = cli.nlisten;
	}
	if (!srv.cfg.state_dir)
		srv.cfg.state_dir = default_state_dir();
	if (!srv.cfg.unix_path) {
		char p[4200];
		snprintf(p, sizeof p, "%s/flashd.sock", srv.cfg.state_dir);
		srv.cfg.unix_path = strdup(p);
	}
	if (config_finish(&srv.cfg, err, sizeof err)) {
		fprintf(stderr, "flashd: %s\n", err);
		return 2;
	}
	log_init(srv.cfg.use_syslog, srv.cfg.verbose);
	ftl_set_logger(ftl_logger, NULL);

	int rc = mkdir_p(srv.cfg.state_dir);
	if (rc) {
		log_err("cannot create state directory %s: %s", srv.cfg.state_dir, strerror(-rc));
		return 1;
	}
	if (!srv.cfg.foreground) {
		/* classic daemon: fork, new session, stdio to /dev/null */
		pid_t pid = fork();
		if (pid < 0) {
			log_err("fork: %s", strerror(errno));
			return 1;
		}
		if (pid > 0)
			return 0;
		setsid();
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			if (!srv.cfg.use_syslog)
				log_init(true, srv.cfg.verbose);
			dup2(nul, 2);
			close(nul);
		}
	}
	signal(SIGPIPE, SIG_IGN);
	evthread_use_pthreads();
	pthread_mutex_init(&srv.lock, NULL);
	srv.base = event_base_new();
	srv.started = time(NULL);
	if (!srv.base) {
		log_err("cannot create the event loop");
		return 1;
	}

	if (srv.cfg.pidfile) {
		pidfile_fd = open(srv.cfg.pidfile, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (pidfile_fd < 0 || flock(pidfile_fd, LOCK_EX | LOCK_NB) < 0) {
			log_err("pidfile %s: %s", srv.cfg.pidfile,
				errno == EWOULDBLOCK ? "another flashd holds it" : strerror(errno));
			return 1;
		}
	}

	/* ioDimms: each opens its image and FTL on its own thread, in parallel */
	srv.ndimms = srv.cfg.ndimms;
	srv.dimms = calloc((size_t)srv.ndimms, sizeof *srv.dimms);
	for (int i = 0; i < srv.ndimms; i++) {
		struct dimm *d = &srv.dimms[i];
		d->srv = &srv;
		d->cfg = &srv.cfg.dimms[i];
		d->index = i;
		rc = dimm_start(d);
		if (rc) {
			log_err("%s: cannot start its thread: %s", d->cfg->name, strerror(-rc));
			return 1;
		}
	}
	int up = 0;
	for (int i = 0; i < srv.ndimms; i++) {
		struct dimm *d = &srv.dimms[i];
		if (dimm_wait_ready(d)) {
			log_err("%s: %s; it is not exported", d->cfg->name, d->open_errmsg);
			dimm_join(d);
		} else {
			up++;
		}
	}
	if (!up) {
		log_err("no ioDimm could be opened; exiting");
		return 1;
	}

	for (int i = 0; i < srv.cfg.nlisten; i++) {
		if (listen_tcp(srv.cfg.listen[i], err, sizeof err)) {
			log_err("%s", err);
			goto fail;
		}
	}
	if (srv.cfg.unix_path && srv.cfg.unix_path[0] && listen_unix(srv.cfg.unix_path, err, sizeof err)) {
		log_err("%s", err);
		goto fail;
	}
	if (ctl_start(&srv, err, sizeof err)) {
		log_err("%s", err);
		goto fail;
	}
	srv.sig_term = evsignal_new(srv.base, SIGTERM, signal_cb, NULL);
	srv.sig_int = evsignal_new(srv.base, SIGINT, signal_cb, NULL);
	srv.sig_hup = evsignal_new(srv.base, SIGHUP, signal_cb, NULL);
	event_add(srv.sig_term, NULL);
	event_add(srv.sig_int, NULL);
	event_add(srv.sig_hup, NULL);

	if (pidfile_fd >= 0) {
		char buf[32];
		int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
		if (ftruncate(pidfile_fd, 0) < 0 || pwrite(pidfile_fd, buf, (size_t)n, 0) != n)
			log_warn("cannot write pidfile %s", srv.cfg.pidfile);
	}
	log_info("flashd %s ready: %d ioDimm(s), control socket %s", FLASHD_VERSION, up,
		 srv.cfg.control_path);
	sd_notifyf(0, "READY=1\nSTATUS=serving %d ioDimm(s)\nMAINPID=%d", up, (int)getpid());

	event_base_dispatch(srv.base);

	if (!srv.shutting_down)
		shutdown_server();
	if (srv.cfg.pidfile)
		unlink(srv.cfg.pidfile);
	event_free(srv.sig_term);
	event_free(srv.sig_int);
	event_free(srv.sig_hup);
	event_base_free(srv.base);
	free(srv.listeners);
	free(srv.dimms);
	config_free(&srv.cfg);
	log_info("stopped");
	return 0;

fail:
	for (int i = 0; i < srv.ndimms; i++)
		dimm_stop(&srv.dimms[i]);
	for (int i = 0; i < srv.ndimms; i++)
		dimm_join(&srv.dimms[i]);
	if (srv.cfg.pidfile)
		unlink(srv.cfg.pidfile);
	return 1;
}
