/*
 * ftl/crc32c.c - CRC32C (Castagnoli), the checksum of every on-media
 * structure.  Uses the SSE4.2 instruction when the CPU has it (about
 * 8 bytes per cycle), else a byte table.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ftl/ftl_int.h"

static uint32_t table[256];
static int have_sse42 = -1;

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & -(c & 1));
		table[i] = c;
	}
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
							      size_t len)
{
	uint64_t c = crc;
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
	const uint8_t *p = buf;
	crc = ~crc;
#if defined(__x86_64__)
	if (have_sse42 < 0) {
		__builtin_cpu_init();
		have_sse42 = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		if (!have_sse42)
			table_init();
	}
	if (have_sse42)
		return ~crc32c_hw(crc, p, len);
#else
	if (have_sse42 < 0) {
		table_init();
		have_sse42 = 0;
	}
#endif
	while (len--)
		crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
	return ~crc;
}
