/*
 * common/parse.c - strict number parsers (contracts in common/parse.h).
 *
 * Each parser first checks the whole string against its grammar with a
 * hand-written scanner (so strtod never gets a chance to accept
 * whitespace, signs, hex, exponents, "nan" or "inf", or to stop early), then
 * computes the value: integers and byte sizes exactly with overflow checks,
 * decimals with strtod_l in the C locale.
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/parse.h"

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Length of the leading [+-]?[0-9]+(.[0-9]+)? of s (no sign unless
 * sign_ok); 0 if s does not start with one. */
static size_t scan_decimal(const char *s, bool sign_ok)
{
	size_t i = 0;
	if (sign_ok && (s[0] == '+' || s[0] == '-'))
		i++;
	size_t d = i;
	while (is_digit(s[i]))
		i++;
	if (i == d)
		return 0;
	if (s[i] == '.') {
		size_t f = ++i;
		while (is_digit(s[i]))
			i++;
		if (i == f)
			return 0;
	}
	return i;
}

/* Value of the first len characters of s, already checked by scan_decimal. */
static int decimal_value(const char *s, size_t len, double min, double max, double *out)
{
	char *copy = strndup(s, len);
	if (!copy)
		return -ENOMEM;
	/* not plain strtod: in a locale whose decimal point is ',' it would
	 * stop at the '.' and return the integer part */
	locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!c) {
		free(copy);
		return -ENOMEM;
	}
	double v = strtod_l(copy, NULL, c);
	freelocale(c);
	free(copy);
	/* a long run of digits overflows to infinity; underflow is just small */
	if (!isfinite(v) || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

/* *OUT the value of the N decimal digits at S; -ERANGE past UINT64_MAX */
static int digits_value(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	size_t n = 0;
	while (is_digit(s[n]))
		n++;
	if (!n || s[n])
		return -EINVAL;
	uint64_t v;
	if (digits_value(s, n, &v) || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int parse_double(const char *s, double min, double max, double *out)
{
	size_t n = scan_decimal(s, true);
	if (!n || s[n])
		return -EINVAL;
	return decimal_value(s, n, min, max, out);
}

int parse_percent(const char *s, double min, double max, double *out)
{
	size_t n = scan_decimal(s, true);
	if (!n || s[n] != '%' || s[n + 1])
		return -EINVAL;
	return decimal_value(s, n, min, max, out);
}

int parse_byte_size(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	size_t n = scan_decimal(s, false);
	if (!n)
		return -EINVAL;
	const char *unit = s + n;
	unsigned shift = 0;
	switch (*unit) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	}
	const char *suffix = shift ? unit + 1 : unit;
	if (*suffix && strcmp(suffix, "B") != 0 && !(shift && !strcmp(suffix, "iB")))
		return -EINVAL;

	/* integer part, exactly */
	const char *dot = memchr(s, '.', n);
	size_t nint = dot ? (size_t)(dot - s) : n;
	uint64_t whole;
	if (digits_value(s, nint, &whole) || whole > (UINT64_MAX >> shift))
		return -ERANGE;
	whole <<= shift;

	/*
	 * Fraction F / 10^k (trailing zeros dropped) times 2^shift, by binary
	 * long division: after step j, q = floor(F * 2^j / D), r the remainder.
	 * r < D <= 10^18, so 2r fits; q < 2^shift.  Whole bytes iff r == 0.
	 */
	if (dot) {
		const char *f = dot + 1;
		size_t k = (size_t)(s + n - f);
		while (k && f[k - 1] == '0')
			k--;
		if (k > 18)
			return -EINVAL;
		uint64_t num = 0, den = 1;
		for (size_t i = 0; i < k; i++) {
			num = num * 10 + (unsigned)(f[i] - '0');
			den *= 10;
		}
		uint64_t q = 0, r = num;
		for (unsigned j = 0; j < shift; j++) {
			r *= 2;
			q = q * 2 + r / den;
			r %= den;
		}
		if (r)
			return -EINVAL;
		if (whole > UINT64_MAX - q)
			return -ERANGE;
		whole += q;
	}
	if (whole < min || whole > max)
		return -ERANGE;
	*out = whole;
	return 0;
}
