/*
 * server/log.c - one line per event, to stderr (with a timestamp) or syslog.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/flashd.h"

int log_verbose;
static bool to_syslog;

void log_init(bool use_syslog, int verbose)
{
	to_syslog = use_syslog;
	log_verbose = verbose;
	if (use_syslog)
		openlog("flashd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_msg(int prio, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (to_syslog) {
		syslog(prio, "%s", msg);
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
