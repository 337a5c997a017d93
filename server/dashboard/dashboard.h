/* server/dashboard/dashboard.h - the dashboard's files (index.html,
 * dashboard.js, dashboard.css in this directory), embedded into flashd at
 * build time by embed.sh (the Makefile writes build/gen/dashboard_files.c)
 * and served by server/ctl.c on the control socket: / (and /dashboard) is
 * index.html, /dashboard/NAME the others. */
#ifndef FLASHD_DASHBOARD_H
#define FLASHD_DASHBOARD_H
#include <stddef.h>

struct dashboard_file {
	const char *name;          /* "index.html", "dashboard.js", ... */
	const char *content_type;
	const unsigned char *data;
	size_t len;
};

/* ends with a { NULL } entry */
extern const struct dashboard_file dashboard_files[];

#endif
