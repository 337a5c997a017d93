/*
 * common/units.c - sizes as flashd's tools print them (common/units.h).
 */
#include "common/units.h"

#include <stdio.h>

const char *size_text(char *buf, size_t len, double bytes)
{
	if (bytes >= 1024.0 * 1024 * 1024)
		snprintf(buf, len, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
	else
		snprintf(buf, len, "%.2f MiB", bytes / (1024.0 * 1024));
	return buf;
}
