/*
 * The control socket client: the one way flashctl talks to a running
 * flashd.  Owns finding the socket (ctl_path), the HTTP/1.0 exchange over
 * it (one request per connection: flashd answers and closes) and reading
 * flashd's JSON answers.  Used by the online verbs (online.c, stats.c);
 * the other side is server/ctl.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tools/flashctl/flashctl.h"

static const char *default_control(void)
{
	static char path[4200];
	const char *env = getenv("FLASHD_CONTROL");
	if (env)
		return env;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(path, sizeof path, "%s/../var/flashd.ctl", exe);
			if (access(path, F_OK) == 0)
				return path;
		}
	}
	if (access("/run/flashd/flashd.ctl", F_OK) == 0)
		return "/run/flashd/flashd.ctl";
	return "/var/lib/flashd/flashd.ctl";
}

void url_escape(char *out, size_t len, const char *s)
{
	size_t o = 0;
	for (; *s && o + 4 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    strchr("._~-", c))
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, len - o, "%%%02X", c);
	}
	out[o] = 0;
}

/*
 * One HTTP/1.0 request over the control socket; flashd answers and closes.
 * Returns 0 with *r filled (free r->body), or -errno if flashd could not be
 * reached (err says why); dies on a garbled answer.
 */
int ctl_call(const char *control, const char *method, const char *path, struct http_resp *r,
	     char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(control) >= sizeof sa.sun_path)
		die("control socket path too long: %s", control);
	strcpy(sa.sun_path, control);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot reach flashd at %s: %s (is it running? --control PATH)",
			 control, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	/* Host: the loopback, X-Flashd-Action on an action: what flashd asks
	 * of a request that is not a web page's (server/ctl.c, cross_site) */
	char req[1024];
	int n = snprintf(req, sizeof req,
			 "%s %s HTTP/1.0\r\nHost: localhost\r\n%sContent-Length: 0\r\n\r\n", method, path,
			 strcmp(method, "POST") ? "" : "X-Flashd-Action: 1\r\n");
	if (n >= (int)sizeof req)
		die("request path too long");
	for (int off = 0; off < n;) {
		ssize_t w = write(fd, req + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die("writing to %s: %s", control, strerror(errno));
		off += (int)w;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			die("out of memory");
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		if (!buf)
			die("out of memory");
		ssize_t got = read(fd, buf + len, cap - len - 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			die("reading from %s: %s", control, strerror(errno));
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	buf[len] = 0;
	char *body = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.", 7) != 0 || !body || len < 12)
		die("unexpected answer from %s%s", control, len ? "" : " (connection closed without one)");
	r->code = atoi(buf + 9);
	r->health[0] = 0;
	*body = 0;  /* the headers end here */
	for (const char *h = strstr(buf, "\r\n"); h && *h; h = strstr(h + 2, "\r\n")) {
		static const char name[] = "\r\nX-Flashd-Health: ";
		if (!strncasecmp(h, name, sizeof name - 1)) {
			snprintf(r->health, sizeof r->health, "%.*s", (int)strcspn(h + sizeof name - 1, "\r"),
				 h + sizeof name - 1);
			break;
		}
	}
	body += 4;
	r->body = strdup(body);
	free(buf);
	if (!r->body)
		die("out of memory");
	return 0;
}

void ctl_call_or_die(const char *control, const char *method, const char *path, struct http_resp *r)
{
	char err[600];
	if (ctl_call(control, method, path, r, err, sizeof err))
		die("%s", err);
}

/* s just past a JSON string's opening quote: its characters unescaped into
 * out (cut at len - 1, NUL-terminated if len); returns where it stopped,
 * at the closing quote or the end of the text. */
static const char *json_unescape(const char *s, char *out, size_t len)
{
	size_t o = 0;
	for (; *s && *s != '"'; s++) {
		char ch = *s;
		if (ch == '\\' && s[1]) {
			s++;
			if (*s == 'u' && strlen(s) >= 5) {
				unsigned v = (unsigned)strtoul((char[]){ s[1], s[2], s[3], s[4], 0 }, NULL, 16);
				ch = v < 0x80 ? (char)v : '?';
				s += 4;
			} else {
				ch = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
			}
		}
		if (o + 1 < len)
			out[o++] = ch;
	}
	if (len)
		out[o] = 0;
	return s;
}

bool json_string(const char *json, const char *key, char *out, size_t len)
{
	char pat[80];
	snprintf(pat, sizeof pat, "\"%s\": \"", key);
	const char *p = strstr(json, pat);
	if (!p || !len)
		return false;
	json_unescape(p + strlen(pat), out, len);
	return true;
}

bool json_read_str(const char **p, char *out, size_t len)
{
	if (**p != '"')
		return false;
	const char *s = json_unescape(*p + 1, out, len);
	if (*s != '"')
		return false;
	*p = s + 1;
	return true;
}

const char *ctl_path(const char *given)
{
	return given ? given : default_control();
}

