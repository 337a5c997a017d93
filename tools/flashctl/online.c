/*
 * The verbs on a running flashd's ioDimms: status, attach, detach,
 * checkpoint, beacon, inject, format of an ioDimm, reload and version.
 * Each is one request over the control socket (ctl_client.c) and prints
 * flashd's answer; flashd does the work (server/ctl.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/version.h"
#include "tools/flashctl/flashctl.h"

/*
 * flashctl status [-a] [--json] [--control SOCKET] [DIMM]
 *
 * Exit status, for monitoring scripts (as Nagios plugins count): 0 the
 * health shown is ok, 1 warning, 2 degraded or failed, 3 flashd could not
 * be asked (not running, no such ioDimm, a bad answer).  The text is
 * coloured (green, yellow, red) when stdout is a terminal, unless NO_COLOR
 * is set or TERM is dumb.
 */
#define STATUS_UNKNOWN 3

int cmd_status(struct invocation *inv, int argc, char **argv)
{
	bool all = verb_flag(inv, argc, argv, "all");
	bool json = inv->json;
	if (optind + 1 < argc)
		die("status takes at most one DIMM");
	char path[600], name[400];
	if (optind < argc) {
		url_escape(name, sizeof name, argv[optind]);
		snprintf(path, sizeof path, "/v1/dimms/%s", name);
	} else {
		snprintf(path, sizeof path, "/v1/status");
	}
	const char *term = getenv("TERM");
	bool color = !json && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && !(term && !strcmp(term, "dumb"));
	if (!json)
		strcat(path, all ? "?format=text&all=1" : "?format=text");
	if (color)
		strcat(path, "&color=1");
	struct http_resp r;
	char err[600];
	if (ctl_call(ctl_path(inv->control), "GET", path, &r, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return STATUS_UNKNOWN;
	}
	char msg[1024];
	if (r.code != 200 && json_string(r.body, "error", msg, sizeof msg)) {
		fprintf(stderr, "%s: %s\n", prog, msg);
		free(r.body);
		return STATUS_UNKNOWN;
	}
	fputs(r.body, stdout);
	free(r.body);
	if (r.code != 200)
		return STATUS_UNKNOWN;
	if (!strcmp(r.health, "ok"))
		return 0;
	if (!strcmp(r.health, "warning"))
		return 1;
	if (!strcmp(r.health, "degraded") || !strcmp(r.health, "failed"))
		return 2;
	fprintf(stderr, "%s: flashd did not say the health (X-Flashd-Health: '%s')\n", prog, r.health);
	return STATUS_UNKNOWN;
}

/* POST /v1/dimms/DIMM/VERB[?query]: print the message; 0 if it went well. */
static int post_action(const char *control, const char *dimm, const char *verb, const char *query,
		       bool json)
{
	char name[400], path[1200];
	url_escape(name, sizeof name, dimm);
	snprintf(path, sizeof path, "/v1/dimms/%s/%s%s%s", name, verb, query && query[0] ? "?" : "",
		 query ? query : "");
	struct http_resp r;
	ctl_call_or_die(control, "POST", path, &r);
	char msg[1024];
	if (json)
		fputs(r.body, stdout);
	else if (json_string(r.body, r.code == 200 ? "message" : "error", msg, sizeof msg))
		fprintf(r.code == 200 ? stdout : stderr, "%s%s\n", r.code == 200 ? "" : "flashctl: ", msg);
	else
		fprintf(stderr, "%s: HTTP %d: %s", prog, r.code, r.body);
	free(r.body);
	return r.code == 200 ? 0 : 1;
}

/* flashctl attach|detach|checkpoint|beacon|inject DIMM ... [--control SOCKET]
 * [--json]; detach [--force] */
int cmd_action(struct invocation *inv, int argc, char **argv)
{
	const char *verb = inv->verb->name;
	bool force = verb_flag(inv, argc, argv, "force");
	const char *control = inv->control;
	bool json = inv->json;
	if (!strcmp(verb, "beacon")) {
		/* flashctl beacon DIMM [on|off] */
		if (optind + 1 != argc && optind + 2 != argc)
			die("beacon needs a DIMM, then on (the default) or off");
		const char *st = optind + 2 == argc ? argv[optind + 1] : "on";
		if (strcmp(st, "on") && strcmp(st, "off"))
			die("beacon %s: '%s' is neither on nor off", argv[optind], st);
		char q[16];
		snprintf(q, sizeof q, "state=%s", st);
		return post_action(ctl_path(control), argv[optind], verb, q, json);
	}
	if (!strcmp(verb, "inject")) {
		/* flashctl inject DIMM die-fail N | bad-block B | bit-errors PPM | temperature C */
		if (optind + 3 != argc)
			die("inject needs a DIMM, a fault (die-fail, bad-block, bit-errors, temperature) "
			    "and its value");
		const char *w = argv[optind + 1];
		if (strcmp(w, "die-fail") && strcmp(w, "bad-block") && strcmp(w, "bit-errors") &&
		    strcmp(w, "temperature"))
			die("inject: unknown fault '%s' (die-fail N, bad-block B, bit-errors PPM, "
			    "temperature C)", w);
		char q[300], v[200];
		url_escape(v, sizeof v, argv[optind + 2]);
		snprintf(q, sizeof q, "what=%s&value=%s", w, v);
		return post_action(ctl_path(control), argv[optind], verb, q, json);
	}
	if (optind + 1 != argc)
		die("%s needs exactly one DIMM (flashctl status lists them)", verb);
	if (force && strcmp(verb, "detach"))
		die("--force is for detach only");
	return post_action(ctl_path(control), argv[optind], verb, force ? "force=yes" : NULL, json);
}

/* flashctl format DIMM ...: through the daemon (detached ioDimms only). */
int format_daemon(const char *control, const char *dimm, uint32_t sector, const char *cap,
		  double op, int parity, bool yes, bool json)
{
	char q[400] = "", v[200];
	if (sector)
		snprintf(q + strlen(q), sizeof q - strlen(q), "sector_size=%u", sector);
	if (parity >= 0)
		snprintf(q + strlen(q), sizeof q - strlen(q), "%sparity_width=%d", q[0] ? "&" : "",
			 parity);
	if (cap) {
		url_escape(v, sizeof v, cap);
		snprintf(q + strlen(q), sizeof q - strlen(q), "%scapacity=%s", q[0] ? "&" : "", v);
	}
	if (op >= 0)
		snprintf(q + strlen(q), sizeof q - strlen(q), "%sop=%g", q[0] ? "&" : "", op);
	/* flashd formats only with this: the request says it means it */
	snprintf(q + strlen(q), sizeof q - strlen(q), "%sconfirm=yes", q[0] ? "&" : "");
	if (!yes) {
		char question[600];
		snprintf(question, sizeof question,
			 "Formatting ioDimm %s (through flashd at %s) erases every sector on it.", dimm,
			 control);
		if (!isatty(STDIN_FILENO))
			die("formatting %s erases every sector on it: add --yes (no terminal to ask on)", dimm);
		if (!confirm(question))
			die("not formatted");
	}
	return post_action(control, dimm, "format", q, json);
}

/* Print the {"key", "message"} items of flashd's list "name" as
 * "  PREFIX KEY: MESSAGE" lines; how many there were. */
static int print_reload_items(const char *json, const char *name, const char *prefix)
{
	char pat[64], key[256], msg[1200];
	snprintf(pat, sizeof pat, "\"%s\": [", name);
	const char *p = strstr(json, pat);
	int n = 0;
	if (!p)
		return 0;
	p += strlen(pat);
	for (;;) {
		while (*p == ' ' || *p == ',')
			p++;
		if (strncmp(p, "{\"key\": ", 8) != 0)
			break;
		p += 8;
		if (!json_read_str(&p, key, sizeof key) || strncmp(p, ", \"message\": ", 13) != 0)
			break;
		p += 13;
		if (!json_read_str(&p, msg, sizeof msg))
			break;
		printf("  %s %s: %s\n", prefix, key, msg);
		n++;
		if (*p == '}')
			p++;
	}
	return n;
}

/* flashctl reload [--control SOCKET] [--json]: what SIGHUP does, with the result */
int cmd_reload(struct invocation *inv, int argc, char **argv)
{
	verb_flag(inv, argc, argv, NULL);
	bool json = inv->json;
	if (optind != argc)
		die("reload takes no arguments");
	struct http_resp r;
	ctl_call_or_die(ctl_path(inv->control), "POST", "/v1/reload", &r);
	char msg[1400];
	if (json) {
		fputs(r.body, stdout);
	} else if (r.code != 200) {
		if (json_string(r.body, "error", msg, sizeof msg))
			fprintf(stderr, "%s: reload refused, nothing changed: %s\n", prog, msg);
		else
			fprintf(stderr, "%s: HTTP %d: %s", prog, r.code, r.body);
	} else {
		if (json_string(r.body, "message", msg, sizeof msg))
			printf("%s\n", msg);
		print_reload_items(r.body, "applied", "applied:");
		print_reload_items(r.body, "not_applied", "not applied:");
	}
	free(r.body);
	return r.code == 200 ? 0 : 1;
}

/* flashctl version [--control SOCKET]: this tool's and the running flashd's */
int cmd_version(struct invocation *inv, int argc, char **argv)
{
	verb_flag(inv, argc, argv, NULL);
	printf("flashctl %s\n", FLASHD_VERSION);
	const char *control = ctl_path(inv->control);
	struct http_resp r;
	char err[600], v[64];
	if (ctl_call(control, "GET", "/v1/version", &r, err, sizeof err)) {
		printf("flashd: %s\n", err);
		return 0;
	}
	if (r.code == 200 && json_string(r.body, "version", v, sizeof v)) {
		const char *pid = strstr(r.body, "\"pid\": ");
		printf("flashd %s (pid %d, control socket %s)\n", v, pid ? atoi(pid + 7) : 0, control);
	} else {
		printf("flashd: unexpected answer from %s (HTTP %d)\n", control, r.code);
	}
	free(r.body);
	return 0;
}

