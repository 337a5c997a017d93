/*
 * tests/unit/t.h - checks for the unit test programs.  A failed check
 * prints where and why and exits 1; tests/run.sh counts the exit status.
 */
#ifndef FLASHD_TEST_T_H
#define FLASHD_TEST_T_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                    \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

#define CHECK_RC(expr)                                                                 \
	do {                                                                           \
		long _rc = (long)(expr);                                               \
		if (_rc < 0) {                                                         \
			fprintf(stderr, "%s:%d: %s returned %ld (%s)\n", __FILE__, __LINE__, \
				#expr, _rc, strerror((int)-_rc));                      \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

#define CHECK_EQ(a, b)                                                                 \
	do {                                                                           \
		long long _a = (long long)(a), _b = (long long)(b);                    \
		if (_a != _b) {                                                        \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, \
				__LINE__, #a, _a, #b, _b);                             \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static inline uint64_t t_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

#endif
