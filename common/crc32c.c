/*
 * common/crc32c.c - CRC32C (Castagnoli), the checksum of every on-media
 * structure and of every page's data.
 *
 * With SSE4.2 the crc32 instruction does 8 bytes per instruction, but each
 * depends on the last (3 cycles latency, 1 per cycle throughput), so long
 * buffers run as three independent streams of CRC_STRIDE bytes whose CRCs
 * are then combined: about 2.5x faster for a 4 KiB page (one round of
 * 3 x 1360 bytes plus 16).  Combining uses linearity of the raw (not
 * inverted) CRC register: crc(c, A||B) = shift(crc(c, A), |B|) ^ crc(0, B),
 * where shift by n bytes is a fixed GF(2)-linear map, kept as four byte
 * tables per stride.  Without SSE4.2: a byte table.
 *
 * With AVX-512 and VPCLMULQDQ (Ice Lake and later), buffers of 256 bytes
 * or more are first folded 256 bytes at a time by carry-less multiplies,
 * four 512-bit accumulators of four 128-bit lanes each, which is not
 * limited to one crc32 instruction per cycle: about 4x for a 4 KiB page.
 * Folding (reflected domain: the first byte holds the highest powers): a
 * 128-bit lane with halves H (bytes 0-7) and L (bytes 8-15) D bits before
 * the place it moves to is worth H x^(64+D) + L x^D mod P, computed as
 * clmul(H, x^(64+D-1) mod P) ^ clmul(L, x^(D-1) mod P) (a reflected clmul
 * multiplies by one more x); the constants are computed at start-up.  The
 * last 128 bits left are a message with the same CRC: two crc32
 * instructions finish it.  The initial register is XORed into the first 4
 * bytes (what a reflected CRC does with it).  A self-check against the
 * table version at start-up decides whether it is used.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/crc32c.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define CRC_POLY 0x82F63B78u   /* reflected Castagnoli polynomial */
#define CRC_STRIDE 1360u       /* multiple of 8; 3 strides = 4080 bytes */

static uint32_t table[256];
static uint32_t shift1[4][256]; /* shift the raw register by CRC_STRIDE zero bytes */
static uint32_t shift2[4][256]; /* ... by 2 * CRC_STRIDE */
static bool have_sse42;
static bool have_fold;      /* AVX-512 + VPCLMULQDQ path checked and on */
/* fold constants by distance in bits: {x^(64+D-1), x^(D-1)} mod P, as
 * reflected 64-bit values (the 32-bit remainder in the upper half) */
enum { FD_2048, FD_1536, FD_1024, FD_512, FD_384, FD_256, FD_128, FD_N };
static uint64_t fold_k[FD_N][2];
static const uint32_t fold_dist[FD_N] = { 2048, 1536, 1024, 512, 384, 256, 128 };
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint32_t shift_zeros(uint32_t c, size_t n)
{
	while (n--)
		c = table[c & 0xFF] ^ (c >> 8);
	return c;
}

static void shift_table(uint32_t t[4][256], size_t n)
{
	uint32_t bit[32];
	for (int i = 0; i < 32; i++)
		bit[i] = shift_zeros(1u << i, n);
	for (int k = 0; k < 4; k++)
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t s = 0;
			for (int j = 0; j < 8; j++)
				if (v & (1u << j))
					s ^= bit[8 * k + j];
			t[k][v] = s;
		}
}

/* x^n mod P, normal bit order (bit 31: x^31) */
static uint32_t xpow_mod(uint32_t n)
{
	uint64_t r = 1;
	while (n--) {
		r <<= 1;
		if (r & (1ull << 32))
			r ^= 0x11EDC6F41ull;
	}
	return (uint32_t)r;
}

static uint32_t reflect32(uint32_t v)
{
	uint32_t r = 0;
	for (int i = 0; i < 32; i++)
		if (v & (1u << i))
			r |= 1u << (31 - i);
	return r;
}

#if defined(__x86_64__)
static bool fold_self_check(void);
#endif

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (CRC_POLY & -(c & 1));
		table[i] = c;
	}
	shift_table(shift1, CRC_STRIDE);
	shift_table(shift2, 2 * CRC_STRIDE);
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_sse42 = __builtin_cpu_supports("sse4.2");
	for (int i = 0; i < FD_N; i++) {
		fold_k[i][0] = (uint64_t)reflect32(xpow_mod(64 + fold_dist[i] - 1)) << 32;
		fold_k[i][1] = (uint64_t)reflect32(xpow_mod(fold_dist[i] - 1)) << 32;
	}
	if (have_sse42 && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul"))
		have_fold = fold_self_check();
#endif
}

static inline uint32_t shift_by(const uint32_t t[4][256], uint32_t c)
{
	return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
}

/* Raw register update, byte at a time (no inversion). */
static uint32_t crc_raw_sw(uint32_t c, const uint8_t *p, size_t len)
{
	while (len--)
		c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_raw_hw(uint32_t crc, const uint8_t *p,
							       size_t len)
{
	uint64_t c = crc;
	while (len >= 3 * CRC_STRIDE) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < CRC_STRIDE; i += 8) {
			uint64_t v0, v1, v2;
			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + CRC_STRIDE + i, 8);
			memcpy(&v2, p + 2 * CRC_STRIDE + i, 8);
			c = __builtin_ia32_crc32di(c, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		c = shift_by(shift2, (uint32_t)c) ^ shift_by(shift1, (uint32_t)c1) ^ (uint32_t)c2;
		p += 3 * CRC_STRIDE;
		len -= 3 * CRC_STRIDE;
	}
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		len -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return c32;
}
#endif

#if defined(__x86_64__)
#define FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

/* one 128-bit lane folded over distance d (index into fold_k) */
FOLD_TARGET static inline __m128i fold128(__m128i x, int d)
{
	__m128i k = _mm_loadu_si128((const __m128i *)(const void *)fold_k[d]);
	return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* every 128-bit lane of x folded over distance d */
FOLD_TARGET static inline __m512i fold512(__m512i x, int d)
{
	__m512i k = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)fold_k[d]));
	return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
				_mm512_clmulepi64_epi128(x, k, 0x11));
}

/* Raw register update of len >= 256 bytes; returns the register after the
 * whole multiple of 256 bytes, *done set to how many bytes that was.  With
 * dst, each 64 bytes loaded are also stored there (crc32c_copy: the copy
 * rides on the fold's loads); a constant NULL compiles the stores away. */
#define FOLD_LOAD(off, k)                                                     \
	({                                                                    \
		__m512i v_ = _mm512_loadu_si512((const void *)(p + (off) + 64 * (k))); \
		if (dst)                                                      \
			_mm512_storeu_si512((void *)(dst + (off) + 64 * (k)), v_); \
		v_;                                                           \
	})
FOLD_TARGET static inline __attribute__((always_inline)) uint32_t
crc_fold_body(uint32_t crc, const uint8_t *p, uint8_t *dst, size_t len, size_t *done)
{
	size_t n = len & ~(size_t)255;
	__m512i a0 = FOLD_LOAD(0, 0), a1 = FOLD_LOAD(0, 1);
	__m512i a2 = FOLD_LOAD(0, 2), a3 = FOLD_LOAD(0, 3);
	a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
	for (size_t off = 256; off < n; off += 256) {
		a0 = _mm512_xor_si512(fold512(a0, FD_2048), FOLD_LOAD(off, 0));
		a1 = _mm512_xor_si512(fold512(a1, FD_2048), FOLD_LOAD(off, 1));
		a2 = _mm512_xor_si512(fold512(a2, FD_2048), FOLD_LOAD(off, 2));
		a3 = _mm512_xor_si512(fold512(a3, FD_2048), FOLD_LOAD(off, 3));
	}
	/* the four accumulators onto the last 64 bytes' place */
	__m512i x = _mm512_xor_si512(_mm512_xor_si512(fold512(a0, FD_1536), fold512(a1, FD_1024)),
				     _mm512_xor_si512(fold512(a2, FD_512), a3));
	/* its four lanes onto the last 16 bytes' place */
	__m128i r = _mm_xor_si128(_mm_xor_si128(fold128(_mm512_extracti32x4_epi32(x, 0), FD_384),
						fold128(_mm512_extracti32x4_epi32(x, 1), FD_256)),
				  _mm_xor_si128(fold128(_mm512_extracti32x4_epi32(x, 2), FD_128),
						_mm512_extracti32x4_epi32(x, 3)));
	uint64_t lo = (uint64_t)_mm_cvtsi128_si64(r), hi = (uint64_t)_mm_extract_epi64(r, 1);
	*done = n;
	return (uint32_t)__builtin_ia32_crc32di(__builtin_ia32_crc32di(0, lo), hi);
}
#undef FOLD_LOAD

FOLD_TARGET static uint32_t crc_fold(uint32_t crc, const uint8_t *p, size_t len, size_t *done)
{
	return crc_fold_body(crc, p, NULL, len, done);
}

FOLD_TARGET static uint32_t crc_fold_copy(uint32_t crc, uint8_t *dst, const uint8_t *p, size_t len,
					  size_t *done)
{
	return crc_fold_body(crc, p, dst, len, done);
}

static uint32_t crc_raw_any(uint32_t c, const uint8_t *p, size_t len)
{
	if (have_fold && len >= 256) {
		size_t done;
		c = crc_fold(c, p, len, &done);
		p += done;
		len -= done;
	}
	return crc_raw_hw(c, p, len);
}

/* The folding path against the table one, at start-up. */
static bool fold_self_check(void)
{
	uint8_t buf[4096 + 300];
	uint32_t v = 0x12345678;
	for (size_t i = 0; i < sizeof buf; i++) {
		v = v * 1103515245u + 12345u;
		buf[i] = (uint8_t)(v >> 16);
	}
	static const size_t lens[] = { 256, 257, 300, 511, 512, 1000, 4096, 4096 + 255 };
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		size_t done;
		uint32_t c = crc_fold(0xA5A5A5A5u, buf + (i & 3), lens[i], &done);
		c = crc_raw_hw(c, buf + (i & 3) + done, lens[i] - done);
		if (c != crc_raw_sw(0xA5A5A5A5u, buf + (i & 3), lens[i]))
			return false;
	}
	return true;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc_init);
#if defined(__x86_64__)
	if (have_sse42)
		return ~crc_raw_any(~crc, buf, len);
#endif
	return ~crc_raw_sw(~crc, buf, len);
}

uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&init_once, crc_init);
#if defined(__x86_64__)
	if (have_fold && len >= 256) {
		size_t done;
		uint32_t c = crc_fold_copy(~crc, dst, src, len, &done);
		memcpy((uint8_t *)dst + done, (const uint8_t *)src + done, len - done);
		return ~crc_raw_hw(c, (const uint8_t *)src + done, len - done);
	}
#endif
	memcpy(dst, src, len);
	return crc32c(crc, dst, len);
}

bool crc32c_folding(void)
{
	pthread_once(&init_once, crc_init);
	return have_fold;
}

uint32_t crc32c_bytewise(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc_init);
	return ~crc_raw_sw(~crc, buf, len);
}

uint32_t crc32c_tail(uint32_t head, uint32_t target)
{
	/* the raw register before the last 4 bytes, and the one wanted after */
	uint32_t r = ~head, want = ~target;
	/* undo 32 register steps: a step shifts right and xors the polynomial
	 * if the bit shifted out was 1; the polynomial's top bit tells which */
	for (int i = 0; i < 32; i++)
		want = (want & 0x80000000u) ? ((want ^ CRC_POLY) << 1) | 1 : want << 1;
	return want ^ r;
}

void crc32c_forge_tail(void *buf, size_t len, uint32_t target)
{
	uint8_t *p = buf;
	uint32_t b = crc32c_tail(crc32c(0, p, len - 4), target);
	for (int i = 0; i < 4; i++)
		p[len - 4 + i] = (uint8_t)(b >> (8 * i));
}
