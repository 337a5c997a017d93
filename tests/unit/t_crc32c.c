/*
 * t_crc32c - the three-stream CRC32C (and, where the CPU has AVX-512 and
 * VPCLMULQDQ, the carry-less folding path for 256 bytes and more) against
 * the known check value and the byte-at-a-time reference, at every length
 * around the stride and fold boundaries and at random offsets and seeds.
 */
#include <string.h>

#include "common/crc32c.h"
#include "tests/unit/t.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(void)
{
	CHECK_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
	CHECK_EQ(crc32c_bytewise(0, "123456789", 9), 0xE3069283u);
	CHECK_EQ(crc32c(0, "", 0), 0);
	/* forging the tail gives any CRC wanted */
	{
		static uint8_t page[4096];
		for (uint32_t t = 0; t < 2000; t++) {
			uint32_t want = t * 0x9E3779B1u;
			page[t % 4000] ^= (uint8_t)t;
			crc32c_forge_tail(page, sizeof page, want);
			CHECK_EQ(crc32c(0, page, sizeof page), want);
			CHECK_EQ(crc32c_bytewise(0, page, sizeof page), want);
		}
	}

	static uint8_t buf[3 * 16384 + 64];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (uint8_t)next();
	/* every length up to three rounds of three strides, odd offsets too */
	for (size_t len = 0; len <= 3 * 4080 + 40; len++) {
		size_t off = len % 7;
		uint32_t seed = (uint32_t)next();
		CHECK_EQ(crc32c(seed, buf + off, len), crc32c_bytewise(seed, buf + off, len));
	}
	/* chaining: crc of A||B from crc of A */
	for (int i = 0; i < 2000; i++) {
		size_t a = next() % 20000, b = next() % 20000, off = next() % 64;
		uint32_t whole = crc32c(0, buf + off, a + b);
		uint32_t part = crc32c(crc32c(0, buf + off, a), buf + off + a, b);
		CHECK_EQ(whole, part);
		CHECK_EQ(whole, crc32c_bytewise(0, buf + off, a + b));
	}
	/* copy and CRC in one pass: the copy is exact and the CRC the
	 * source's, at every length around the fold boundaries, odd offsets */
	{
		static uint8_t dst[16384 + 64];
		for (size_t len = 0; len <= 16384; len += (len < 1100 ? 1 : 61)) {
			size_t so = next() % 64, dof = next() % 64;
			uint32_t seed = (uint32_t)next();
			memset(dst, 0xA5, sizeof dst);
			uint32_t c = crc32c_copy(seed, dst + dof, buf + so, len);
			CHECK_EQ(c, crc32c_bytewise(seed, buf + so, len));
			CHECK(memcmp(dst + dof, buf + so, len) == 0);
			CHECK(dof == 0 || dst[dof - 1] == 0xA5);
			CHECK(dst[dof + len] == 0xA5);
		}
	}
	/* a flipped bit anywhere in a page changes the CRC */
	uint32_t page = crc32c(0, buf, 4096);
	for (int bit = 0; bit < 4096 * 8; bit += 61) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		CHECK(crc32c(0, buf, 4096) != page);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	printf("ok (%s)\n", crc32c_folding() ? "folding path on: AVX-512 VPCLMULQDQ"
					      : "folding path off: this CPU lacks it");
	return 0;
}
