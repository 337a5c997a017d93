/*
 * common/units.h - sizes as flashd's tools print them (flashctl, flashctl
 * status through the control socket, the log, export descriptions).
 * common/ depends on nothing.
 *
 * One convention everywhere: binary units, two decimals, GiB from 1 GiB
 * up and MiB below ("52.00 MiB", "1.00 GiB", "298.02 GiB"), so a small
 * export never reads "0.0 GiB" and no tool mixes MB with GiB.
 */
#ifndef FLASHD_COMMON_UNITS_H
#define FLASHD_COMMON_UNITS_H

#include <stddef.h>

/* bytes as text into buf (len bytes, cut if shorter); returns buf */
const char *size_text(char *buf, size_t len, double bytes);

/* The same in a buffer of its own that lives to the end of the enclosing
 * block (a compound literal): for printf arguments. */
#define SIZE_TEXT(bytes) size_text((char[32]){ 0 }, 32, (bytes))

#endif
