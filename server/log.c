/*
 * server/log.c - one line per event, with its priority: to syslog (--syslog,
 * log = syslog, or a daemon without a terminal) at that priority; to the
 * journal when stderr is the journal's stream (systemd sets JOURNAL_STREAM
 * to its "device:inode"), as "<N>message" lines that journald reads as
 * priority N (sd-daemon(3)), without our own timestamp; else to stderr
 * with a timestamp and the level's name ("flashd[warning]: ...").
 * Every message is one line of text whatever it quotes (log_escape).
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
static bool also_stderr; /* warnings and errors, besides syslog */

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

void log_also_stderr(bool on)
{
	also_stderr = on;
}

void log_init(bool use_syslog, int verbose)
{
	to_syslog = use_syslog;
	to_journal = !use_syslog && stderr_is_journal();
	log_verbose = verbose;
	if (use_syslog)
		openlog("flashd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

/* Length of the UTF-8 character at p that may be shown as it is: 1 to 4; 0
 * for a control character (C0, DEL, C1 U+0080..U+009F) or a byte that does
 * not start a well-formed sequence (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
static size_t printable_len(const unsigned char *p)
{
	unsigned char c = p[0];
	if (c < 0x80)
		return c < 0x20 || c == 0x7f ? 0 : 1;
	size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 :
		   c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xc2 && p[1] < 0xa0) || (c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||
	    (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
		return 0;
	return n;
}

/*
 * msg into out (len bytes) with every byte of a control character or of
 * malformed UTF-8 as \xHH: the strings a client chooses (export names, PSK
 * identities, HTTP paths) can neither start a line of their own (CR, LF) nor
 * send escape sequences to the terminal that shows the log.  Everything is
 * escaped here, so no call site can forget.  A message cut at len is cut
 * between characters.
 */
static void log_escape(char *out, size_t len, const char *msg)
{
	const unsigned char *p = (const unsigned char *)msg;
	size_t o = 0;
	while (*p) {
		size_t n = printable_len(p);
		if (n) {
			if (o + n >= len)
				break;
			memcpy(out + o, p, n);
			o += n;
			p += n;
		} else {
			if (o + 4 >= len)
				break;
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p++);
		}
	}
	out[o] = 0;
}

void log_msg(int prio, const char *fmt, ...)
{
	char raw[2048], msg[4 * sizeof raw];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	log_escape(msg, sizeof msg, raw);
	if (to_syslog) {
		syslog(prio, "%s", msg);
		if (also_stderr && (prio & 7) <= LOG_WARNING)
			fprintf(stderr, "flashd: %s\n", msg);
		return;
	}
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
