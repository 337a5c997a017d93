/*
 * tests/bench/pagecopy.c - the bound of an in-process random 4 KiB read on
 * this machine: copies of random pages out of a region as large as a
 * test-1g ioDimm's media, laid out as the simulator keeps them (4 KiB of
 * data and 128 bytes of spare per slot, so most pages straddle two memory
 * pages), one at a time, as the FTL's read path does.  Six ways:
 *   copy        data and spare into a buffer (memcpy): what a read cannot
 *               do without;
 *   copy+crc    the same, then the CRC32C of the copy (durability rule 5:
 *               every read checks it): the least a checked read costs;
 *   copy+pf     the copy with the next page's first line prefetched one
 *               read ahead (what a batched read could win);
 *   copy+crc+pf both;
 *   fused       the copy and the CRC in one pass (crc32c_copy);
 *   fused+pf    that with the prefetch.
 * Issue 14 asks for 2.0M reads/s in `flashctl simulate --preset test-1g
 * --ram`; make bench prints the in-process read rate as a share of
 * copy+crc measured here in the same run.  Printed: millions of pages/s,
 * the median of --reps runs of --pages pages each.
 *
 * Built by make (build/pagecopy): build/pagecopy [--mib 1024] [--pages N]
 * [--reps 3] [--json]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/crc32c.h"

#define PAGE 4096u
#define SPARE 128u
#define SLOT (PAGE + SPARE)

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile uint32_t sink; /* keeps the CRCs from being optimised out */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	size_t mib = 1024, pages = 2000000;
	int reps = 3, json = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--pages") && i + 1 < argc)
			pages = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else {
			fprintf(stderr, "usage: pagecopy [--mib N] [--pages N] [--reps N] [--json]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > 99 || !pages || mib < 16) {
		fprintf(stderr, "pagecopy: bad arguments\n");
		return 2;
	}
	size_t nslots = (mib << 20) / SLOT;
	uint8_t *media = mmap(NULL, nslots * SLOT, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *idx = malloc(pages * sizeof *idx);
	uint8_t *dst = aligned_alloc(PAGE, 64 * PAGE);
	uint8_t *spare = aligned_alloc(64, 64 * SPARE);
	if (media == MAP_FAILED || !idx || !dst || !spare) {
		fprintf(stderr, "pagecopy: out of memory\n");
		return 1;
	}
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < nslots * SLOT; i += 64)
		media[i] = (uint8_t)i; /* every line touched: no first-touch faults below */
	for (size_t i = 0; i < pages; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		idx[i] = (uint32_t)(x % nslots);
	}
	static const struct {
		const char *name;
		bool crc;   /* CRC32C of the copy, after it */
		bool fused; /* copy and CRC in one pass (crc32c_copy) */
		bool pf;    /* the next page's first line prefetched */
	} modes[] = {
		{ "copy", false, false, false },      { "copy+crc", true, false, false },
		{ "copy+pf", false, false, true },    { "copy+crc+pf", true, false, true },
		{ "fused", false, true, false },      { "fused+pf", false, true, true },
	};
	enum { NMODES = sizeof modes / sizeof modes[0] };
	double rate[NMODES][99];
	for (int r = 0; r < reps; r++) {
		for (int m = 0; m < NMODES; m++) {
			double t = now_s();
			for (size_t i = 0; i < pages; i++) {
				const uint8_t *s = media + (size_t)idx[i] * SLOT;
				uint8_t *d = dst + (i & 63) * PAGE;
				if (modes[m].pf && i + 1 < pages)
					__builtin_prefetch(media + (size_t)idx[i + 1] * SLOT);
				if (modes[m].fused)
					sink ^= crc32c_copy(0, d, s, PAGE);
				else
					memcpy(d, s, PAGE);
				memcpy(spare + (i & 63) * SPARE, s + PAGE, SPARE);
				if (modes[m].crc)
					sink ^= crc32c(0, d, PAGE);
			}
			rate[m][r] = (double)pages / (now_s() - t) / 1e6;
		}
	}
	if (json)
		printf("{");
	for (int m = 0; m < NMODES; m++) {
		qsort(rate[m], (size_t)reps, sizeof(double), cmp_double);
		double med = rate[m][(reps - 1) / 2];
		if (json)
			printf("%s\"%s\": %.4f", m ? ", " : "", modes[m].name, med);
		else
			printf("random 4 KiB pages out of %zu MiB, %-12s %.2fM/s (median of %d; %.2f-%.2f)\n",
			       mib, modes[m].name, med, reps, rate[m][0], rate[m][reps - 1]);
	}
	if (json)
		printf("}\n");
	return 0;
}
