/*
 * server/log.c - one line per event, with its priority: to syslog (--syslog,
 * log = syslog, or a daemon without a terminal) at that priority; to the
 * journal when stderr is the journal's stream (systemd sets JOURNAL_STREAM
 * to its "device:inode"), as "<N>message" lines that journald reads as
 * priority N (sd-daemon(3)), without our own timestamp; else to stderr
 * with a timestamp and the level's name ("flashd[warning]: ...").
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "server/flashd.h"

int log_verbose;
static bool to_syslog, to_journal;

/* Is stderr the stream JOURNAL_STREAM names?  (It may have been inherited
 * by a child whose stderr went elsewhere.) */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	char end;
	if (!js || sscanf(js, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return false;
	struct stat st;
	return fstat(2, &st) == 0 && (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

void log_init(bool use_syslog, int verbose)
{
	to_syslog = use_syslog;
	to_journal = !use_syslog && stderr_is_journal();
	log_verbose = verbose;
	if (use_syslog)
		openlog("flashd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_msg(int prio, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (to_syslog) {
		syslog(prio, "%s", msg);
		return;
	}
	/* one line per message: a newline inside would start a line of the
	 * default priority */
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	if (to_journal) {
		fprintf(stderr, "<%d>%s\n", prio & 7, msg);
		return;
	}
	struct timespec ts;
	struct tm tm;
	char when[32];
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
	static const char *const names[] = { "emerg", "alert", "crit", "error",
					     "warning", "notice", "info", "debug" };
	fprintf(stderr, "%s.%03ld flashd[%s]: %s\n", when, ts.tv_nsec / 1000000,
		names[prio & 7], msg);
}
