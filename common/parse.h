/*
 * common/parse.h - strict parsers for the numbers of configuration files
 * and command-line options (flashd.conf, flashd and flashctl options, the
 * nbdkit plugin's parameters).  common/ depends on nothing.
 *
 * Every parser takes the whole string or nothing:
 *   - no leading or trailing whitespace, no trailing characters of any kind
 *     ("10 connections", "4096x", "512x" are errors);
 *   - decimal only: no hex, octal, exponents, "nan", "inf" or "infinity";
 *   - a value outside the caller's range, or too large for the result type,
 *     is an error, never clamped or wrapped ("-1" is not 2^64 - 1).
 * Return: 0 and *out set; -EINVAL when the text is not of the grammar (or a
 * size is not a whole number of bytes); -ERANGE when it is, but the value is
 * outside [min, max] or overflows; -ENOMEM (parse_double, parse_percent
 * only) when the C locale for strtod_l cannot be had.  On error *out is
 * left unchanged.
 * Ranges are inclusive at both ends; a caller that wants "more than 0"
 * checks that itself after a range starting at 0.
 * The decimal point is '.' whatever the locale.  Thread-safe.
 */
#ifndef FLASHD_COMMON_PARSE_H
#define FLASHD_COMMON_PARSE_H

#include <stdint.h>

/* An unsigned decimal integer, [0-9]+ (no sign), in [min, max]. */
int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/*
 * A finite decimal number, [+-]?[0-9]+(.[0-9]+)?, in [min, max].  A minus
 * sign is accepted by the grammar so that "-5" is reported as out of range
 * (-ERANGE) rather than as malformed; a range with min >= 0 rejects it.
 */
int parse_double(const char *s, double min, double max, double *out);

/*
 * A byte count: NUMBER[UNIT][B|iB] with NUMBER as in parse_double but
 * unsigned ([0-9]+(.[0-9]+)?), UNIT one of K M G T (either case; binary:
 * 2^10, 2^20, 2^30, 2^40), then nothing, "B" or "iB" ("iB" only after a
 * unit).  "512", "512B", "4K", "4KiB", "1.5G", "512M" are sizes; "512b",
 * "512iB", "4 K", "1.3K" (1331.2 bytes) and "0x10" are not.
 * A fraction is allowed when the result is a whole number of bytes
 * (at most 18 digits after the point); the result must fit in 64 bits
 * (-ERANGE otherwise) and lie in [min, max].
 */
int parse_byte_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/*
 * A percentage "N%": N as in parse_double, immediately followed by '%'
 * and nothing else ("80%", "12.5%"; not "80", "80 %", "nan%", "inf%").
 * *out is N (80 for "80%"), in [min, max].
 */
int parse_percent(const char *s, double min, double max, double *out);

#endif
