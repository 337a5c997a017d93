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
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/crc32c.h"

#define CRC_POLY 0x82F63B78u   /* reflected Castagnoli polynomial */
#define CRC_STRIDE 1360u       /* multiple of 8; 3 strides = 4080 bytes */

static uint32_t table[256];
static uint32_t shift1[4][256]; /* shift the raw register by CRC_STRIDE zero bytes */
static uint32_t shift2[4][256]; /* ... by 2 * CRC_STRIDE */
static bool have_sse42;
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

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc_init);
#if defined(__x86_64__)
	if (have_sse42)
		return ~crc_raw_hw(~crc, buf, len);
#endif
	return ~crc_raw_sw(~crc, buf, len);
}

uint32_t crc32c_bytewise(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc_init);
	return ~crc_raw_sw(~crc, buf, len);
}

void crc32c_forge_tail(void *buf, size_t len, uint32_t target)
{
	uint8_t *p = buf;
	/* the raw register before the last 4 bytes, and the one wanted after */
	uint32_t r = ~crc32c(0, p, len - 4), want = ~target;
	/* undo 32 register steps: a step shifts right and xors the polynomial
	 * if the bit shifted out was 1; the polynomial's top bit tells which */
	for (int i = 0; i < 32; i++)
		want = (want & 0x80000000u) ? ((want ^ CRC_POLY) << 1) | 1 : want << 1;
	uint32_t b = want ^ r;
	for (int i = 0; i < 4; i++)
		p[len - 4 + i] = (uint8_t)(b >> (8 * i));
}
