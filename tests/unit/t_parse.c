/*
 * t_parse - the strict number parsers of common/parse.h: whole strings only,
 * no NaN/infinity/hex/exponents/whitespace, ranges, overflow, byte sizes
 * with units and fractions that must come out as whole bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "common/parse.h"

static int fails;
#define U(s, mn, mx, rc, v) do { uint64_t o = 777; int r = parse_uint(s, mn, mx, &o); if (r != rc || (!r && o != (uint64_t)(v))) { fprintf(stderr, "line %d: parse_uint(\"%s\"): %d %llu\n", __LINE__, s, r, (unsigned long long)o); fails++; } } while (0)
#define Z(s, rc, v) do { uint64_t o = 777; int r = parse_byte_size(s, 0, UINT64_MAX, &o); if (r != rc || (!r && o != (uint64_t)(v))) { fprintf(stderr, "line %d: parse_byte_size(\"%s\"): %d %llu\n", __LINE__, s, r, (unsigned long long)o); fails++; } } while (0)
#define D(s, mn, mx, rc, v) do { double o = 777; int r = parse_double(s, mn, mx, &o); if (r != rc || (!r && o != (v))) { fprintf(stderr, "line %d: parse_double(\"%s\"): %d %g\n", __LINE__, s, r, o); fails++; } } while (0)
#define P(s, mn, mx, rc, v) do { double o = 777; int r = parse_percent(s, mn, mx, &o); if (r != rc || (!r && o != (v))) { fprintf(stderr, "line %d: parse_percent(\"%s\"): %d %g\n", __LINE__, s, r, o); fails++; } } while (0)

int main(void) {
	U("0", 0, 10, 0, 0); U("10", 0, 10, 0, 10); U("11", 0, 10, -ERANGE, 0); U("", 0, 10, -EINVAL, 0);
	U(" 1", 0, 10, -EINVAL, 0); U("1 ", 0, 10, -EINVAL, 0); U("-1", 0, 10, -EINVAL, 0); U("+1", 0, 10, -EINVAL, 0);
	U("0x10", 0, 100, -EINVAL, 0); U("10 connections", 0, 100, -EINVAL, 0); U("18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX);
	U("18446744073709551616", 0, UINT64_MAX, -ERANGE, 0); U("99999999999999999999999", 0, UINT64_MAX, -ERANGE, 0); U("010", 0, 100, 0, 10);
	U("65535", 1, 65535, 0, 65535); U("99999", 1, 65535, -ERANGE, 0); U("0", 1, 65535, -ERANGE, 0);
	Z("512", 0, 512); Z("512B", 0, 512); Z("512b", -EINVAL, 0); Z("512iB", -EINVAL, 0); Z("512x", -EINVAL, 0); Z("20abc", -EINVAL, 0);
	Z("4K", 0, 4096); Z("4k", 0, 4096); Z("4KiB", 0, 4096); Z("4KB", 0, 4096); Z("4Kib", -EINVAL, 0); Z("4 K", -EINVAL, 0);
	Z("1.5G", 0, 3ull << 29); Z("1.3K", -EINVAL, 0); Z("0.5K", 0, 512); Z("512.0", 0, 512); Z("512.5", -EINVAL, 0);
	Z("1.50000000000000000000000000M", 0, 3ull << 19); Z("0.0009765625K", 0, 1); Z("0.00048828125K", -EINVAL, 0);
	Z("16777215.999999940395355224609375T", -EINVAL, 0);
	Z("16777215T", 0, 16777215ull << 40); Z("16777216T", -ERANGE, 0); Z("16777215.9990234375T", 0, (16777215ull << 40) + 1098437885952ull);
	Z("18446744073709551615", 0, UINT64_MAX); Z("18446744073709551616", -ERANGE, 0);
	Z("nan", -EINVAL, 0); Z("inf", -EINVAL, 0); Z("-1", -EINVAL, 0); Z("1e3", -EINVAL, 0); Z("", -EINVAL, 0); Z("K", -EINVAL, 0); Z(".5K", -EINVAL, 0); Z("1.K", -EINVAL, 0);
	Z("1P", -EINVAL, 0); Z("1TB", 0, 1ull << 40); Z("1TiB", 0, 1ull << 40); Z("1TBB", -EINVAL, 0);
	D("20", 5, 90, 0, 20); D("20.5", 5, 90, 0, 20.5); D("nan", 5, 90, -EINVAL, 0); D("inf", 5, 90, -EINVAL, 0); D("-inf", 5, 90, -EINVAL, 0);
	D("4", 5, 90, -ERANGE, 0); D("-5", 5, 90, -ERANGE, 0); D("20x", 5, 90, -EINVAL, 0); D("1e1", 5, 90, -EINVAL, 0); D("0x10", 0, 90, -EINVAL, 0);
	D(" 20", 5, 90, -EINVAL, 0); D("20%", 5, 90, -EINVAL, 0);
	char big[400]; big[0] = '1'; for (int i = 1; i < 399; i++) big[i] = '0'; big[399] = 0; D(big, 0, INFINITY, -ERANGE, 0);
	D("0.00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001", 0, 1, 0, 0);
	P("80%", 0, 100, 0, 80); P("12.5%", 0, 100, 0, 12.5); P("nan%", 0, 100, -EINVAL, 0); P("inf%", 0, 100, -EINVAL, 0); P("150%", 0, 100, -ERANGE, 0);
	P("80", 0, 100, -EINVAL, 0); P("80 %", 0, 100, -EINVAL, 0); P("80%%", 0, 100, -EINVAL, 0); P("%", 0, 100, -EINVAL, 0); P("0%", 0, 100, 0, 0); P("-1%", 0, 100, -ERANGE, 0);
	printf("%d failures\n", fails);
	return fails != 0;
}
