/*
 * tests/fuzz/image_craft.h - crafting simulator images (fuzz_image and
 * t_ftl_image): where each size, count, index and sequence field the FTL
 * reads from the media is, the extreme values to set it to, and making
 * the checksums over it valid again, so that the checks behind the
 * checksums are the ones tested.
 *
 * A page slot of the image is page_size data bytes followed by the spare
 * (hw/nand_sim_int.h); a block table entry is 16 bytes (u16 write pointer, u16
 * torn page, u8 flags, 3 pad, u32 erase count, u32 CRC32C of the 12 bytes
 * before it).  Header-only: static functions.
 */
#ifndef FLASHD_IMAGE_CRAFT_H
#define FLASHD_IMAGE_CRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/crc32c.h"
#include "ftl/media.h"

/* which structure a field is in (and so which pages it applies to) */
enum craft_kind {
	CK_SB,          /* superblock page: struct ftl_sb */
	CK_CP_HDR,      /* checkpoint header page 0: struct ftl_cp_hdr */
	CK_CP_LIST,     /* its u32 lists after the header: index = word */
	CK_FOOT_HDR,    /* block footer page 0: struct ftl_footer_hdr */
	CK_FOOT_ENTRY,  /* its entries: index = data page */
	CK_TRIM_HDR,    /* trim record: struct ftl_trim_hdr */
	CK_TRIM_RANGE,  /* its ranges: index = range */
	CK_SPARE,       /* struct ftl_spare of any page */
	CK_TABLE,       /* the simulator's block table entry of the page's block */
	CK_NKINDS
};

struct craft_field {
	const char *name;
	uint8_t kind;
	uint8_t width;  /* bytes: 1, 2, 4 or 8 */
	uint16_t off;   /* in the structure (in the element, for lists) */
};

/* (not listed: magics, CRCs, format ids, times, and what is read but used
 * as no size, index or order: the checkpoint header's clean flag and
 * statistics counters, the spare's flags) */
#define CF(k, s, m) { #s "." #m, k, sizeof(((struct s *)0)->m), offsetof(struct s, m) }
static const struct craft_field craft_fields[] = {
	CF(CK_SB, ftl_sb, version),
	CF(CK_SB, ftl_sb, size),
	CF(CK_SB, ftl_sb, format_id),
	CF(CK_SB, ftl_sb, sb_seq),
	CF(CK_SB, ftl_sb, sector_size),
	CF(CK_SB, ftl_sb, unit_size),
	CF(CK_SB, ftl_sb, units),
	CF(CK_SB, ftl_sb, cp_block),
	CF(CK_SB, ftl_sb, cp_nblocks),
	CF(CK_SB, ftl_sb, cp_seq),
	CF(CK_SB, ftl_sb, clean),
	CF(CK_SB, ftl_sb, open_count),
	CF(CK_SB, ftl_sb, parity_width),
	CF(CK_SB, ftl_sb, cp_mirror_block),
	CF(CK_SB, ftl_sb, flags),
	CF(CK_CP_HDR, ftl_cp_hdr, version),
	CF(CK_CP_HDR, ftl_cp_hdr, size),
	CF(CK_CP_HDR, ftl_cp_hdr, cp_seq),
	CF(CK_CP_HDR, ftl_cp_hdr, units),
	CF(CK_CP_HDR, ftl_cp_hdr, l2p_pages),
	CF(CK_CP_HDR, ftl_cp_hdr, hdr_pages),
	CF(CK_CP_HDR, ftl_cp_hdr, nblocks),
	CF(CK_CP_HDR, ftl_cp_hdr, nopen),
	CF(CK_CP_HDR, ftl_cp_hdr, nbad),
	CF(CK_CP_HDR, ftl_cp_hdr, sector_size),
	CF(CK_CP_HDR, ftl_cp_hdr, ngroups),
	CF(CK_CP_HDR, ftl_cp_hdr, l2p_written),
	CF(CK_CP_HDR, ftl_cp_hdr, flags),
	{ "cp_list.word", CK_CP_LIST, 4, 0 },
	CF(CK_FOOT_HDR, ftl_footer_hdr, version),
	CF(CK_FOOT_HDR, ftl_footer_hdr, block),
	CF(CK_FOOT_HDR, ftl_footer_hdr, data_pages),
	CF(CK_FOOT_ENTRY, ftl_footer_entry, seq),
	CF(CK_FOOT_ENTRY, ftl_footer_entry, lba),
	CF(CK_FOOT_ENTRY, ftl_footer_entry, data_crc),
	CF(CK_TRIM_HDR, ftl_trim_hdr, nranges),
	CF(CK_TRIM_RANGE, ftl_trim_range, start),
	CF(CK_TRIM_RANGE, ftl_trim_range, count),
	CF(CK_SPARE, ftl_spare, type),
	CF(CK_SPARE, ftl_spare, lba),
	CF(CK_SPARE, ftl_spare, seq),
	CF(CK_SPARE, ftl_spare, reserved),
	{ "table.wp", CK_TABLE, 2, 0 },
	{ "table.torn_page", CK_TABLE, 2, 2 },
	{ "table.flags", CK_TABLE, 1, 4 },
	{ "table.erase_count", CK_TABLE, 4, 8 },
};
#undef CF
#define CRAFT_NFIELDS (sizeof craft_fields / sizeof craft_fields[0])

/* what the extreme values are derived from */
struct craft_limits {
	uint64_t units;        /* the format's capacity in units */
	uint32_t nblocks, ppb, data_pages, page_size, nbands, row_width;
};

#define CRAFT_NVALUES 27

/* Value k (0 .. CRAFT_NVALUES - 1) for a field whose stored value is orig,
 * truncated to width bytes: the type's edges, the 32-bit edges, products
 * that wrap (2^62 + 1: times 4096 it is 4096), the sequence numbers'
 * limit and its headroom (FTL_SEQ_LIMIT - 1, FTL_SEQ_LIMIT -
 * FTL_SEQ_HEADROOM and one below), and the geometry's limits around the
 * places where a count becomes an index. */
static inline uint64_t craft_value(unsigned k, uint64_t orig, unsigned width,
				   const struct craft_limits *l)
{
	uint64_t max = width >= 8 ? UINT64_MAX : (1ull << (8 * width)) - 1;
	uint64_t raw_units = (uint64_t)l->nblocks * l->ppb;
	uint64_t v;
	switch (k % CRAFT_NVALUES) {
	case 0: v = 0; break;
	case 1: v = 1; break;
	case 2: v = max; break;
	case 3: v = max - 1; break;
	case 4: v = 1ull << 31; break;
	case 5: v = 1ull << 32; break;
	case 6: v = (1ull << 31) - 1; break;
	case 7: v = (1ull << 62) + 1; break;
	case 8: v = 1ull << 63; break;
	case 9: v = orig + 1; break;
	case 10: v = orig - 1; break;
	case 11: v = l->units; break;
	case 12: v = l->units + 1; break;
	case 13: v = raw_units; break;
	case 14: v = raw_units + 1; break;
	case 15: v = l->nblocks; break;
	case 16: v = l->nblocks - 1; break;
	case 17: v = l->ppb; break;
	case 18: v = l->data_pages; break;
	case 19: v = l->page_size; break;
	case 20: v = l->nbands; break;
	case 21: v = (1ull << l->row_width) - 1; break; /* every column of a stripe */
	case 22: v = orig * 2 + 1; break;
	case 23: v = orig | 0x80000000u; break; /* bit 31: the flag bits of lists */
	case 24: v = (1ull << 62) - 1; break;
	case 25: v = (1ull << 62) - (1ull << 40); break;
	default: v = (1ull << 62) - (1ull << 40) - 1; break;
	}
	return v & max;
}

static inline uint64_t craft_get(const uint8_t *p, unsigned width)
{
	uint64_t v = 0;
	memcpy(&v, p, width);
	return v;
}

static inline void craft_put(uint8_t *p, unsigned width, uint64_t v)
{
	memcpy(p, &v, width);
}

/*
 * Where field fd of element `index` is in a page slot (data, then spare);
 * the index is taken modulo the elements a page holds.  Not for CK_TABLE.
 */
static inline uint32_t craft_offset(const struct craft_field *fd, uint32_t index,
				    uint32_t page_size)
{
	switch (fd->kind) {
	case CK_CP_LIST:
		return (uint32_t)(sizeof(struct ftl_cp_hdr) +
				  4 * (index % ((page_size - sizeof(struct ftl_cp_hdr)) / 4)));
	case CK_FOOT_ENTRY: {
		uint32_t n = (uint32_t)((page_size - sizeof(struct ftl_footer_hdr)) /
					sizeof(struct ftl_footer_entry));
		return (uint32_t)(sizeof(struct ftl_footer_hdr) +
				  sizeof(struct ftl_footer_entry) * (index % n) + fd->off);
	}
	case CK_TRIM_RANGE: {
		uint32_t n = (uint32_t)((page_size - sizeof(struct ftl_trim_hdr)) /
					sizeof(struct ftl_trim_range));
		return (uint32_t)(sizeof(struct ftl_trim_hdr) +
				  sizeof(struct ftl_trim_range) * (index % n) + fd->off);
	}
	case CK_SPARE:
		return page_size + fd->off;
	default:
		return fd->off;
	}
}

/* Do the fields of a kind apply to the page whose spare is sp? */
static inline bool craft_applies(unsigned kind, const struct ftl_spare *sp)
{
	if (sp->magic != FTL_SPARE_MAGIC)
		return kind == CK_TABLE;
	switch (kind) {
	case CK_SB: return sp->type == FTL_PG_SB;
	case CK_CP_HDR:
	case CK_CP_LIST: return sp->type == FTL_PG_CKPT && sp->lba == 0;
	case CK_FOOT_HDR:
	case CK_FOOT_ENTRY: return sp->type == FTL_PG_FOOTER && sp->lba == 0;
	case CK_TRIM_HDR:
	case CK_TRIM_RANGE: return sp->type == FTL_PG_TRIM;
	default: return true;
	}
}

/*
 * Make the checksums of a patched page slot valid again, as the FTL
 * computes them: its structure's (superblock, checkpoint header and the
 * lists in its first page, footer header and the entries in its first
 * page), the spare's data CRC (where the golden slot had one) and the
 * spare's own.
 */
static inline void craft_fix_slot(uint8_t *slot, const uint8_t *golden_slot, uint32_t page_size)
{
	struct ftl_spare sp, gsp;
	memcpy(&sp, slot + page_size, sizeof sp);
	memcpy(&gsp, golden_slot + page_size, sizeof gsp);
	if (sp.type == FTL_PG_SB) {
		struct ftl_sb sb;
		memcpy(&sb, slot, sizeof sb);
		sb.crc = crc32c(0, &sb, offsetof(struct ftl_sb, crc));
		memcpy(slot, &sb, sizeof sb);
	} else if (sp.type == FTL_PG_CKPT && sp.lba == 0) {
		/* the words lists_crc covers, as cp_read counts them */
		struct ftl_cp_hdr h;
		memcpy(&h, slot, sizeof h);
		const uint8_t *lists = slot + sizeof h;
		uint64_t room = (page_size - sizeof h) / 4;
		uint64_t n = (uint64_t)h.nblocks + h.nopen + h.nbad;
		if (h.flags & FTL_CP_SPARSE)
			n += ((uint64_t)h.l2p_pages + 31) / 32;
		if ((h.flags & FTL_CP_PARITY) && h.ngroups && h.ngroups <= h.nblocks)
			n += 1 + 2 * (uint64_t)h.ngroups;
		if ((h.flags & FTL_CP_REFRESH) && n < room) {
			uint32_t nref;
			memcpy(&nref, lists + 4 * n, 4);
			n += 1 + (uint64_t)nref;
		}
		if (n <= room)
			h.lists_crc = crc32c(0, lists, (size_t)n * 4);
		h.crc = crc32c(0, &h, offsetof(struct ftl_cp_hdr, crc));
		memcpy(slot, &h, sizeof h);
	} else if (sp.type == FTL_PG_FOOTER && sp.lba == 0) {
		struct ftl_footer_hdr h;
		memcpy(&h, slot, sizeof h);
		uint64_t n = h.data_pages;
		if (sizeof h + n * sizeof(struct ftl_footer_entry) <= page_size)
			h.entries_crc = crc32c(0, slot + sizeof h, (size_t)n * sizeof(struct ftl_footer_entry));
		h.crc = crc32c(0, &h, offsetof(struct ftl_footer_hdr, crc));
		memcpy(slot, &h, sizeof h);
	}
	if (gsp.data_crc && gsp.data_crc == crc32c(0, golden_slot, page_size))
		sp.data_crc = crc32c(0, slot, page_size);
	sp.crc = crc32c(0, &sp, offsetof(struct ftl_spare, crc));
	memcpy(slot + page_size, &sp, sizeof sp);
}

static inline void craft_fix_table(uint8_t e[16])
{
	uint32_t crc = crc32c(0, e, 12);
	memcpy(e + 12, &crc, 4);
}

#endif
