/*
 * common/xorshift.h - xorshift64*: the seeded, reproducible random numbers
 * of the simulator (errors, factory bad blocks), flashctl's workloads and
 * the tests.  Fast and small, not for anything that must be unguessable.
 * The state must not start at 0 (it would stay 0).
 */
#ifndef FLASHD_COMMON_XORSHIFT_H
#define FLASHD_COMMON_XORSHIFT_H

#include <stdint.h>

/* the next number from state *S, which it advances */
static inline uint64_t xorshift64s(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

#endif
