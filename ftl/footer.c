/*
 * ftl/footer.c - the footers of the blocks the streams write, and the end of
 * a block's programs.
 *
 * Each block a stream opens gets a footer from the pool (footer_attach, by
 * writer.c's set_next_page); every program submitted into it notes its
 * page's unit, sequence number and data CRC there (footer_note: writer.c,
 * parity.c, parity_ppl.c); submitting the last data page (the pages of a
 * block are submitted in page order) also submits the footer into the
 * block's last footer_pages pages.  The block closes when all of them are
 * programmed (blk_programs_settled), or retires when a program failed
 * (blk_program_failed); both change the block through block.c.
 *
 * Owns f->footers, f->footer_free and f->footer_of.  Calls only block.c,
 * upage.c and core.c, so the program completions of every writer of NAND
 * pages (writer.c, parity.c, parity_ppl.c) and die.c, stopping the blocks
 * of a dead die, can call it.  Cost: one
 * footer of footer_pages pages per block open for writing.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

int footer_init(struct ftl *f)
{
	/* the open bands of the three sets, and as many more whose pages are
	 * all handed out while their footers are not yet programmed, plus the
	 * user ring's worth of blocks whose pages are handed out but not yet
	 * submitted */
	uint32_t n = 8 * f->ndies + f->stream[STREAM_USER].ring.nslots / f->data_pages + 4;
	f->footers = ftl_alloc(f, n * sizeof *f->footers);
	f->footer_of = ftl_alloc(f, (size_t)f->nblocks * sizeof *f->footer_of);
	uint8_t *bufs = ftl_alloc_pages(f, (size_t)n * f->footer_pages * f->page_size);
	uint8_t *spares = ftl_alloc(f, (size_t)n * f->footer_pages * f->spare_size);
	struct nand_op *ops = ftl_alloc(f, (size_t)n * f->footer_pages * sizeof *ops);
	if (!f->footers || !f->footer_of || !bufs || !spares || !ops)
		return -ENOMEM;
	for (uint32_t i = n; i-- > 0;) {
		struct footer *fo = &f->footers[i];
		fo->f = f;
		fo->block = FTL_NO_BLOCK;
		fo->buf = bufs + (size_t)i * f->footer_pages * f->page_size;
		fo->spares = spares + (size_t)i * f->footer_pages * f->spare_size;
		fo->ops = ops + (size_t)i * f->footer_pages;
		fo->next_free = f->footer_free;
		f->footer_free = fo;
	}
	return 0;
}

void footer_attach(struct ftl *f, uint32_t b)
{
	struct footer *fo = f->footer_free;
	f->footer_free = fo->next_free;
	fo->block = b;
	fo->pending = 0;
	memset(fo->buf, 0xFF, (size_t)f->footer_pages * f->page_size);
	f->footer_of[b] = (uint32_t)(fo - f->footers) + 1;
}

static struct footer *footer_get(struct ftl *f, uint32_t b)
{
	uint32_t i = f->footer_of[b];
	return i ? &f->footers[i - 1] : NULL;
}

static void footer_release(struct ftl *f, struct footer *fo)
{
	f->footer_of[fo->block] = 0;
	fo->block = FTL_NO_BLOCK;
	fo->next_free = f->footer_free;
	f->footer_free = fo;
}


static void footer_done(struct nand_op *op)
{
	struct footer *fo = op->priv;
	struct ftl *f = fo->f;
	uint32_t b = op->block;
	f->blk[b].inflight--;
	if (ftl_op_stops(f, op))
		return;
	if (op->status == NAND_OK) {
		f->st.nand_pages_programmed++;
		f->st.meta_pages_programmed++;
	} else {
		/* only an accelerator: GC and recovery read the spares instead */
		f->st.program_failures++;
		blk_program_failed(f, b);
	}
	if (!--fo->pending)
		footer_release(f, fo);
	blk_programs_settled(f, b);
}

/* The last data page of b was submitted: program its footer behind it. */
static void footer_write(struct ftl *f, struct footer *fo)
{
	struct ftl_footer_hdr h = { .version = FTL_MEDIA_VERSION, .block = fo->block,
				    .format_id = f->format_id, .data_pages = f->data_pages };
	memcpy(h.magic, FTL_FOOTER_MAGIC, 8);
	struct ftl_footer_entry *e = (struct ftl_footer_entry *)(fo->buf + sizeof h);
	uint64_t max_seq = 0;
	for (uint32_t p = 0; p < f->data_pages; p++)
		if (e[p].lba != FTL_FOOTER_NONE && e[p].seq > max_seq)
			max_seq = e[p].seq;
	h.entries_crc = crc32c(0, e, (size_t)f->data_pages * sizeof *e);
	h.crc = crc32c(0, &h, offsetof(struct ftl_footer_hdr, crc));
	memcpy(fo->buf, &h, sizeof h);
	fo->pending = f->footer_pages;
	for (uint32_t i = 0; i < f->footer_pages; i++) {
		struct nand_op *op = &fo->ops[i];
		uint8_t *data = fo->buf + (size_t)i * f->page_size;
		uint8_t *spare = fo->spares + (size_t)i * f->spare_size;
		spare_build(f, spare, FTL_PG_FOOTER, i, max_seq, data, true);
		op_program(op, NAND_OPF_META, fo->block, f->data_pages + i, data, spare, footer_done,
			   fo);
		ftl_nand_submit(f, op);
	}
}

/* A program of page ppa was submitted: note it in its block's footer. */
void footer_note(struct ftl *f, uint32_t ppa, uint32_t lba, uint64_t seq, uint32_t crc)
{
	uint32_t b = ppa_block(f, ppa), p = ppa_page(f, ppa);
	struct footer *fo = footer_get(f, b);
	if (!fo || p >= f->data_pages)
		return;
	struct ftl_footer_entry *e = (struct ftl_footer_entry *)(fo->buf + sizeof(struct ftl_footer_hdr));
	e[p] = (struct ftl_footer_entry){ .seq = seq, .lba = lba, .data_crc = crc };
	if (p == f->data_pages - 1)
		footer_write(f, fo);
}

int footer_parse(struct ftl *f, uint32_t block, const uint8_t *buf, const uint8_t *spares,
		 const struct ftl_footer_entry **entries)
{
	struct ftl_footer_hdr h;
	for (uint32_t i = 0; i < f->footer_pages; i++) {
		struct ftl_spare sp;
		if (spare_parse(f, spares + (size_t)i * f->spare_size, &sp) != 0 ||
		    sp.type != FTL_PG_FOOTER || sp.lba != i ||
		    sp.data_crc != crc32c(0, buf + (size_t)i * f->page_size, f->page_size))
			return -EILSEQ;
	}
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, FTL_FOOTER_MAGIC, 8) != 0 || h.version != FTL_MEDIA_VERSION ||
	    h.crc != crc32c(0, &h, offsetof(struct ftl_footer_hdr, crc)) || h.block != block ||
	    h.format_id != f->format_id || h.data_pages != f->data_pages ||
	    h.entries_crc != crc32c(0, buf + sizeof h, (size_t)f->data_pages * sizeof **entries))
		return -EILSEQ;
	const struct ftl_footer_entry *e = (const struct ftl_footer_entry *)(buf + sizeof h);
	for (uint32_t p = 0; p < f->data_pages; p++)
		if (e[p].seq >= FTL_SEQ_LIMIT)
			return -EILSEQ;
	*entries = e;
	return 0;
}

/* A block whose last program finished: close it, or hand it to GC to retire. */
void blk_programs_settled(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	if (k->inflight)
		return;
	if (k->state == BLK_OPEN && k->wp == f->ppb)
		blk_set_closed(f, b);
	else if (k->state == BLK_RETIRING && k->next == FTL_NO_BLOCK && f->retire.head != b)
		blist_push(f, &f->retire, b);
}

/* The program of a block failed: stop using the block; GC retires it. */
void blk_program_failed(struct ftl *f, uint32_t b)
{
	struct blk *k = &f->blk[b];
	if (k->state != BLK_OPEN)
		return;
	struct footer *fo = footer_get(f, b);
	if (fo && k->wp < f->ppb) {
		/* its footer pages were never handed out: no footer */
		footer_release(f, fo);
	}
	/* its band goes on without it (set_next_page skips it); a NAND page
	 * of it partly handed out is programmed as it is (ftl/upage.c), or
	 * the units in it would wait for units nobody hands out */
	blk_set_retiring(f, b);
	if (f->upp > 1)
		upage_seal(f->dev, b);
	ftl_log(FTL_LOG_NOTICE, "block %u: program failed, retiring it (a grown bad block: its "
		"data is written elsewhere, the reserves take it)", b);
}
