/*
 * tests/unit/t.h - checks for the unit test programs.  A failed check
 * prints where and why and exits 1; tests/run.sh counts the exit status.
 */
#ifndef FLASHD_TEST_T_H
#define FLASHD_TEST_T_H

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xorshift.h"

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

/*
 * A test program made of named parts, each a function of its own:
 *
 *   static const struct t_part parts[] = { { "pages", pages }, ... };
 *   int main(int argc, char **argv) { ...; return t_parts(argc, argv, parts, n); }
 *
 * No argument runs every part in order and prints "ok"; NAME runs that part
 * alone; --list prints the names, one a line (tests/run.sh runs each part as
 * a job of its own, so the parts of a long test run in parallel).  An
 * unknown name is an error (exit 2), never a silent pass.
 */
struct t_part {
	const char *name;
	void (*run)(void);
};

static inline int t_parts(int argc, char **argv, const struct t_part *parts, size_t n)
{
	const char *only = argc > 1 ? argv[1] : NULL;
	if (only && !strcmp(only, "--list")) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", parts[i].name);
		return 0;
	}
	size_t ran = 0;
	for (size_t i = 0; i < n; i++) {
		if (only && strcmp(only, parts[i].name))
			continue;
		parts[i].run();
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "%s: no part named %s (--list shows them)\n", argv[0], only);
		return 2;
	}
	printf("ok\n");
	return 0;
}

/* the tests' random numbers: xorshift64* from seed *S */
static inline uint64_t t_rand(uint64_t *s)
{
	return xorshift64s(s);
}

/* a number below N from t_rand (0 when N is 0) */
static inline uint64_t t_rand_below(uint64_t *s, uint64_t n)
{
	return n ? t_rand(s) % n : 0;
}

/* a randomized test's failure on stderr, what it needs to be run again:
 * "FAIL (seed SEED, config PRESET/SECTOR[/timed], STEP N): " and FMT's
 * message on one line */
static inline void t_vfail(uint64_t seed, const char *preset, unsigned sector, bool timed,
			   const char *step, uint64_t n, const char *fmt, va_list ap)
{
	fprintf(stderr, "FAIL (seed %" PRIu64 ", config %s/%u%s, %s %" PRIu64 "): ", seed, preset,
		sector, timed ? "/timed" : "", step, n);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

#endif
