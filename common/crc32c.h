/*
 * common/crc32c.h - CRC32C (Castagnoli), the checksum of every on-media
 * structure of the FTL, of every page's data, and of the simulator's block
 * table entries.  Shared by hw/ and ftl/ (common/ depends on nothing).
 */
#ifndef FLASHD_COMMON_CRC32C_H
#define FLASHD_COMMON_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* Copy len bytes from src to dst (not overlapping) and return
 * crc32c(crc, src, len) in one pass over the source: on the folding path
 * the copy stores what the CRC loads (a host write's page into the write
 * buffer: its CRC without a second read of the page); otherwise a copy and
 * then the CRC of the copy. */
uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);
/* Whether long buffers take the carry-less multiply path (AVX-512 with
 * VPCLMULQDQ, checked against the table path at start-up). */
bool crc32c_folding(void);
/* The same, a byte at a time (reference for tests). */
uint32_t crc32c_bytewise(uint32_t crc, const void *buf, size_t len);
/* Set the last 4 bytes of buf (len >= 4) so that crc32c(0, buf, len) ==
 * target: CRC32C is linear and the last 4 bytes' step is invertible.  For
 * media that keep a page's checksum but not its bytes (benchmarks). */
void crc32c_forge_tail(void *buf, size_t len, uint32_t target);
/* The same when the bytes before the tail are known by their crc32c, head:
 * the 4 tail bytes, as a little-endian word.  (Media that deliver the same
 * bytes before every tail sum them once.) */
uint32_t crc32c_tail(uint32_t head, uint32_t target);

#endif
