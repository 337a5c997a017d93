/*
 * hw/nand_sim_image.c - the simulator's store: an image file, or RAM.
 * Owns the store's layout (hw/nand_sim_int.h), creating an image,
 * opening it (lock, checks, version upgrade), the block table check and
 * repair, and releasing the store.  Called by the op engine
 * (hw/nand_sim.c) at open and close, and header_seal by fault injection.
 *
 * Header, block table and pages of an image file are mapped shared
 * (MAP_SHARED): moving a page is a memory copy.  With no path everything
 * lives in anonymous memory.  The header and block table are backed with
 * disk space at open, so stores into them cannot fault on a full
 * filesystem.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "hw/nand_sim_int.h"

static uint32_t crc32_plain(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t crc = ~0u;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
	}
	return ~crc;
}

void header_seal(struct sim *s)
{
	s->hdr->crc = crc32_plain(s->hdr, offsetof(struct sim_header, crc));
	s->hdr->ext_crc = crc32_plain(&s->hdr->seed, sizeof s->hdr->seed);
}

static void seterr(char *err, size_t len, const char *fmt, const char *a, const char *b)
{
	if (err && len)
		snprintf(err, len, fmt, a, b);
}

/*
 * Who holds the flock on fd's file: "locked by pid N (COMM)" into buf, from
 * /proc/locks (flock locks are not visible to F_GETLK / F_OFD_GETLK); the
 * first holder listed, or "locked" if none is found (it let go meanwhile,
 * another pid namespace, no /proc).  Reads /proc: an open's error path only.
 */
static void lock_holder(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "locked");
	struct stat st;
	FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		char kind[16];
		int pid;
		unsigned maj, min;
		unsigned long ino;
		/* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's
		 * line has "->" after the number and does not parse */
		if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", kind, &pid, &maj, &min, &ino) != 5 ||
		    strcmp(kind, "FLOCK") || ino != (unsigned long)st.st_ino || maj != major(st.st_dev) ||
		    min != minor(st.st_dev))
			continue;
		char path[64], comm[32] = "";
		snprintf(path, sizeof path, "/proc/%d/comm", pid);
		FILE *c = fopen(path, "re");
		if (c) {
			if (fgets(comm, sizeof comm, c))
				comm[strcspn(comm, "\n")] = 0;
			fclose(c);
		}
		if (comm[0])
			snprintf(buf, len, "locked by pid %d (%s)", pid, comm);
		else
			snprintf(buf, len, "locked by pid %d", pid);
		break;
	}
	fclose(f);
}

/* Factory bad marks: drawn from the seed, one draw per block that may be
 * bad (block 0 of every die is guaranteed good, as NAND vendors do).
 * Calls mark(s, block) for each bad block. */
static void factory_bad_draw(struct sim *s, const struct nand_preset *p, uint64_t seed,
			     void (*mark)(struct sim *s, uint32_t b, void *arg), void *arg)
{
	uint32_t n = nand_blocks(&s->dev.geo);
	uint64_t rng = seed ? seed : 0x9E3779B97F4A7C15ull;
	if (!p->factory_bad_ppm)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (i % s->dev.geo.blocks_per_die != 0 && xorshift64s(&rng) % 1000000u < p->factory_bad_ppm)
			mark(s, i, arg);
}

static void mark_factory_bad(struct sim *s, uint32_t b, void *arg)
{
	struct sim_block e = s->blocks[b];
	e.flags |= SB_FACTORY_BAD;
	blk_store(s, b, e);
}

static void init_blocks(struct sim *s, const struct nand_preset *p, uint64_t seed)
{
	uint32_t n = nand_blocks(&s->dev.geo);
	struct sim_block e = { .torn_page = SIM_NO_PAGE };
	for (uint32_t i = 0; i < n; i++)
		blk_store(s, i, e);
	factory_bad_draw(s, p, seed, mark_factory_bad, NULL);
}

/* ---- block table check and repair -------------------------------------- */

static bool slot_blank(const uint8_t *p, size_t len)
{
	/* erased: never written (a hole reads 0x00) or written as erased (0xFF) */
	uint8_t v = p[0];
	if (v != 0 && v != 0xFF)
		return false;
	for (size_t i = 1; i < len; i++)
		if (p[i] != v)
			return false;
	return true;
}

static void mark_in_bitmap(struct sim *s, uint32_t b, void *arg)
{
	uint8_t *bits = arg;
	bits[b / 8] |= (uint8_t)(1u << (b % 8));
}

/*
 * Check every entry's CRC; rebuild the ones that fail from the pages.
 * Cost: a CRC of the whole table (16 bytes per block) at every open, and a
 * scan of the page slots of each damaged block.
 */
static int table_check(struct sim *s, const struct nand_preset *p, const char *path)
{
	const struct nand_geometry *g = &s->dev.geo;
	uint32_t n = nand_blocks(g), ndies = nand_dies(g), bad = 0;
	for (uint32_t b = 0; b < n; b++)
		bad += s->blocks[b].crc != blk_crc(&s->blocks[b]);
	if (!bad)
		return 0;
	uint32_t *die_max = calloc(ndies, sizeof *die_max);
	uint8_t *factory = calloc((n + 7) / 8, 1);
	if (!die_max || !factory) {
		free(die_max);
		free(factory);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		const struct sim_block *e = &s->blocks[b];
		uint32_t die = nand_block_die(g, b);
		if (e->crc == blk_crc(e) && e->erase_count > die_max[die])
			die_max[die] = e->erase_count;
	}
	if (p)
		factory_bad_draw(s, p, s->hdr->seed, mark_in_bitmap, factory);
	else
		sim_log(s, NAND_LOG_WARNING, "%s: preset %s is unknown: factory bad marks of rebuilt entries are lost",
			path, s->hdr->preset);
	for (uint32_t b = 0; b < n; b++) {
		struct sim_block e = s->blocks[b];
		if (e.crc == blk_crc(&e))
			continue;
		struct sim_block r = { .torn_page = SIM_NO_PAGE,
				       .erase_count = die_max[nand_block_die(g, b)] };
		if (factory[b / 8] & (1u << (b % 8))) {
			r.flags = SB_FACTORY_BAD;
		} else {
			/* pages are programmed in order: the write pointer is one
			 * past the last slot that is not blank */
			uint64_t first = (uint64_t)b * g->pages_per_block;
			for (uint32_t pg = g->pages_per_block; pg > 0; pg--)
				if (!slot_blank(ram_slot(s, first + pg - 1), s->slot_size)) {
					r.wp = (uint16_t)pg;
					break;
				}
		}
		sim_log(s, NAND_LOG_WARNING, "%s: block table entry of block %u fails its checksum (write pointer %u, "
			   "erase count %u as stored); rebuilt from the pages: write pointer %u, "
			   "erase count %u%s",
			path, b, e.wp, e.erase_count, r.wp, r.erase_count,
			r.flags & SB_FACTORY_BAD ? ", factory bad" : "");
		blk_store(s, b, r);
		s->table_repairs++;
	}
	if (!s->readonly) {
		msync(s->hdr, s->map_len, MS_SYNC);
		fsync(s->fd);
	}
	free(die_max);
	free(factory);
	return 0;
}

/*
 * Creating an image file.  It is built under a temporary name beside the
 * image (PATH.creating, locked like an image) and renamed to PATH only once
 * its header and block table are written and synced: PATH never names a
 * half-made image, so a creation cut short at any point (a signal, a
 * crash, a full disk) leaves no image, and the next creation starts again
 * (in the PATH.creating left behind, if any).  A symbolic link at PATH is
 * followed, as open(O_CREAT) would: the image is made where it points.
 */
static char *create_target(const char *path)
{
	char *cur = strdup(path);
	for (int depth = 0; cur && depth < 8; depth++) {
		struct stat st;
		char link[4096];
		if (lstat(cur, &st) < 0 || !S_ISLNK(st.st_mode))
			break;
		ssize_t n = readlink(cur, link, sizeof link - 1);
		if (n < 0)
			break;
		link[n] = 0;
		const char *slash = strrchr(cur, '/');
		int dirlen = link[0] != '/' && slash ? (int)(slash - cur + 1) : 0;
		char *next = malloc((size_t)dirlen + (size_t)n + 1);
		if (next)
			sprintf(next, "%.*s%s", dirlen, cur, link);
		free(cur);
		cur = next;
	}
	return cur;
}

/* The complete image at *tmp becomes target (and *tmp is freed and NULL
 * once renamed).  An image already there is replaced only if no process
 * has it open (its lock is held across the rename, so none can open it
 * meanwhile); the directory is synced, so the name survives a power cut as
 * the image's contents do. */
static int image_publish(char **tmp, const char *target, char *err, size_t errlen)
{
	int rc = 0, old = open(target, O_RDONLY | O_CLOEXEC);
	if (old >= 0 && flock(old, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		char who[80];
		lock_holder(old, who, sizeof who);
		seterr(err, errlen, "NAND image %s is in use by another process (%s)", target, who);
		close(old);
		return rc;
	}
	char *dir = strdup(target);
	if (!dir) {
		rc = -ENOMEM;
	} else if (rename(*tmp, target) < 0) {
		rc = -errno;
		seterr(err, errlen, "cannot rename the new NAND image to %s: %s", target, strerror(-rc));
	} else {
		free(*tmp);
		*tmp = NULL; /* it is the image now */
		int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fsync(dfd) < 0) {
			rc = -errno;
			seterr(err, errlen, "created NAND image %s, but syncing its directory failed: %s",
			       target, strerror(-rc));
		}
		if (dfd >= 0)
			close(dfd);
	}
	free(dir);
	if (old >= 0)
		close(old);
	return rc;
}

static int geometry_ok(const struct nand_geometry *g)
{
	if (!g->channels || !g->dies_per_channel || !g->blocks_per_die || !g->pages_per_block ||
	    !g->page_size || !g->spare_size)
		return 0;
	if (nand_dies(g) > SIM_MAX_DIES || g->pages_per_block > 4096 || g->spare_size > 256 ||
	    g->page_size % 512)
		return 0;
	return 1;
}

/* RAM media of preset p: header and block table in allocated memory, the
 * page slots (or, metadata only, what is kept of them) in an anonymous
 * mapping. */
static int ram_open(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset *p,
		    char *err, size_t errlen)
{
	if (!p) {
		seterr(err, errlen, "a RAM device needs a preset%s%s", "", "");
		return -EINVAL;
	}
	s->dev.geo = p->geo;
	if (cfg->blocks_per_die)
		s->dev.geo.blocks_per_die = cfg->blocks_per_die;
	s->slot_size = p->geo.page_size + p->geo.spare_size;
	if (cfg->metadata_only) {
		uint32_t chunk = cfg->meta_chunk_bytes ? cfg->meta_chunk_bytes : p->geo.page_size;
		uint32_t nchunks = p->geo.page_size / chunk;
		if (!cfg->meta_spare_bytes || p->geo.page_size % chunk ||
		    cfg->meta_spare_bytes > p->geo.spare_size / nchunks) {
			seterr(err, errlen, "metadata-only media keep 1 to spare_size spare bytes "
			       "per chunk, of chunks that divide the page%s%s", "", "");
			return -EINVAL;
		}
		s->metadata_only = true;
		s->meta_keep = cfg->meta_spare_bytes;
		s->meta_chunks = nchunks;
		/* packed: rounding 44 bytes up to 48 cost 4 bytes a page (the
		 * slots are read and written with memcpy, unaligned) */
		s->meta_slot = nchunks * (s->meta_keep + 4);
		s->slot_size = s->meta_slot;
		s->kept = calloc(nand_blocks(&s->dev.geo), sizeof *s->kept);
		uint8_t *zeros = calloc(1, chunk);
		if (!s->kept || !zeros) {
			free(zeros);
			return -ENOMEM;
		}
		s->meta_zero_crc = crc32c(0, zeros, chunk - 4);
		free(zeros);
	}
	s->hdr = calloc(1, sizeof(struct sim_header) +
			      (size_t)nand_blocks(&s->dev.geo) * sizeof(struct sim_block));
	if (!s->hdr)
		return -ENOMEM;
	s->blocks = (struct sim_block *)(s->hdr + 1);
	s->ram_len = (size_t)(nand_pages(&s->dev.geo) * s->slot_size);
	s->ram = mmap(NULL, s->ram_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s->ram == MAP_FAILED) {
		int rc = -errno;
		s->ram = NULL;
		seterr(err, errlen, "cannot map RAM for the NAND image%s%s", "", "");
		return rc;
	}
	/* huge pages where the kernel allows them: random page copies
	 * then miss the TLB far less (measured: ~25 % more 4 KiB reads/s) */
	madvise(s->ram, s->ram_len, MADV_HUGEPAGE);
	memcpy(s->hdr->magic, SIM_MAGIC, 8);
	s->hdr->geo = s->dev.geo;
	snprintf(s->hdr->preset, sizeof s->hdr->preset, "%s", p->name);
	s->hdr->timing = p->timing;
	s->hdr->rated_pe_cycles = p->rated_pe_cycles;
	s->hdr->seed = cfg->seed;
	init_blocks(s, p, cfg->seed);
	return 0;
}

/*
 * Open open_path into s->fd and lock it (shared if read-only, else
 * exclusive).  The lock is taken on the file opened; the name may have
 * moved to another file meanwhile (an image created beside it and renamed
 * over it, image_publish, which holds the old one's lock only until the
 * rename): then the file locked is one nobody else will find, and its
 * writes would vanish.  Open again until the name still names the file
 * locked.  On failure s->fd is -1.
 */
static int image_lock_open(struct sim *s, const struct nand_sim_config *cfg, const char *open_path,
			   int flags, char *err, size_t errlen)
{
	for (int tries = 0;; tries++) {
		s->fd = open(open_path, flags | O_CLOEXEC, 0644);
		if (s->fd < 0) {
			int rc = -errno;
			seterr(err, errlen, "cannot open NAND image %s: %s", open_path,
			       strerror(-rc));
			return rc;
		}
		if (flock(s->fd, (cfg->readonly ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
			int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
			char who[80];
			lock_holder(s->fd, who, sizeof who);
			if (cfg->create)
				snprintf(who + strlen(who), sizeof who - strlen(who), ", being created");
			seterr(err, errlen, "NAND image %s is in use by another process (%s)",
			       open_path, who);
			close(s->fd);
			s->fd = -1;
			return rc;
		}
		struct stat locked, named;
		if (fstat(s->fd, &locked) == 0 && stat(open_path, &named) == 0 &&
		    locked.st_dev == named.st_dev && locked.st_ino == named.st_ino)
			return 0;
		close(s->fd);
		s->fd = -1;
		if (tries == 8) {
			seterr(err, errlen, "NAND image %s is in use by another process (%s)",
			       open_path, "replaced while opening");
			return -EBUSY;
		}
	}
}

/* A new image of preset p in s->fd (named *tmp, locked): sized, header and
 * block table written and synced, then published as target. */
static int image_create(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset *p,
			char **tmp, const char *target, char *err, size_t errlen)
{
	int rc;
	if (!p) {
		seterr(err, errlen, "creating %s needs a preset%s", cfg->path, "");
		return -EINVAL;
	}
	struct nand_geometry g = p->geo;
	if (cfg->blocks_per_die)
		g.blocks_per_die = cfg->blocks_per_die;
	if (!geometry_ok(&g)) {
		seterr(err, errlen, "preset %s: a geometry NAND images cannot hold (dies, over 4096 "
		       "pages a block or over 256 spare bytes a page)%s", p->name, "");
		return -EINVAL;
	}
	uint64_t table = (uint64_t)nand_blocks(&g) * sizeof(struct sim_block);
	uint64_t data_off = (4096 + table + (1 << 20) - 1) & ~((uint64_t)(1 << 20) - 1);
	uint64_t slot = g.page_size + g.spare_size;
	uint64_t total = data_off + nand_pages(&g) * slot;
	if (ftruncate(s->fd, 0) < 0 || ftruncate(s->fd, (off_t)total) < 0) {
		rc = -errno;
		seterr(err, errlen, "cannot size NAND image %s: %s", cfg->path, strerror(-rc));
		return rc;
	}
	if (fallocate(s->fd, 0, 0, (off_t)data_off) < 0 && errno != EOPNOTSUPP) {
		rc = -errno;
		seterr(err, errlen, "cannot reserve space for the block table of %s: %s",
		       cfg->path, strerror(-rc));
		return rc;
	}
	s->map_len = data_off;
	s->hdr = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->hdr == MAP_FAILED) {
		rc = -errno;
		s->hdr = NULL;
		return rc;
	}
	memcpy(s->hdr->magic, SIM_MAGIC, 8);
	s->hdr->version = SIM_VERSION;
	s->hdr->header_size = sizeof(struct sim_header);
	s->hdr->geo = g;
	snprintf(s->hdr->preset, sizeof s->hdr->preset, "%s", p->name);
	s->hdr->timing = p->timing;
	s->hdr->rated_pe_cycles = p->rated_pe_cycles;
	s->hdr->table_off = 4096;
	s->hdr->data_off = data_off;
	s->hdr->slot_size = slot;
	s->hdr->seed = cfg->seed;
	s->blocks = (struct sim_block *)((uint8_t *)s->hdr + 4096);
	s->dev.geo = g;
	init_blocks(s, p, cfg->seed);
	header_seal(s);
	if (msync(s->hdr, s->map_len, MS_SYNC) < 0 || fsync(s->fd) < 0) {
		rc = -errno;
		seterr(err, errlen, "cannot write NAND image %s: %s", *tmp, strerror(-rc));
		return rc;
	}
	return image_publish(tmp, target, err, errlen);
}

/* The image in s->fd: header checked (against preset *p if one is given,
 * else *p becomes the image's own, NULL if unknown), header and block
 * table mapped, a version 1 image upgraded. */
static int image_load(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset **p,
		      char *err, size_t errlen)
{
	int rc;
	struct sim_header h;
	ssize_t n = pread(s->fd, &h, sizeof h, 0);
	if (n != (ssize_t)sizeof h || memcmp(h.magic, SIM_MAGIC, 8) != 0) {
		seterr(err, errlen, "%s is not a flashd NAND image%s", cfg->path, "");
		return -EINVAL;
	}
	if ((h.version != 1 && h.version != SIM_VERSION) || h.header_size != sizeof h ||
	    h.crc != crc32_plain(&h, offsetof(struct sim_header, crc)) || !geometry_ok(&h.geo) ||
	    (h.version >= 2 && h.ext_crc != crc32_plain(&h.seed, sizeof h.seed))) {
		seterr(err, errlen, "%s: NAND image header is damaged or of another version%s",
		       cfg->path, "");
		return -EINVAL;
	}
	struct stat st;
	uint64_t table = (uint64_t)nand_blocks(&h.geo) * sizeof(struct sim_block);
	if (fstat(s->fd, &st) < 0 || h.table_off != 4096 || h.data_off < 4096 + table ||
	    h.slot_size != (uint64_t)h.geo.page_size + h.geo.spare_size ||
	    (uint64_t)st.st_size < h.data_off + nand_pages(&h.geo) * h.slot_size) {
		seterr(err, errlen, "%s: NAND image is truncated or inconsistent%s", cfg->path, "");
		return -EINVAL;
	}
	if (*p && strcmp((*p)->name, h.preset) != 0) {
		seterr(err, errlen, "%s holds preset %s, not the one configured", cfg->path,
		       h.preset);
		return -EINVAL;
	}
	if (!*p)
		*p = nand_preset_find(h.preset);
	if (!cfg->readonly && fallocate(s->fd, 0, 0, (off_t)h.data_off) < 0 &&
	    errno != EOPNOTSUPP) {
		rc = -errno;
		seterr(err, errlen, "cannot reserve space for the block table of %s: %s",
		       cfg->path, strerror(-rc));
		return rc;
	}
	/* read-only: a private mapping, so damaged entries can be
	 * repaired in memory without writing the image */
	s->map_len = h.data_off;
	s->hdr = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE,
		      cfg->readonly ? MAP_PRIVATE : MAP_SHARED, s->fd, 0);
	if (s->hdr == MAP_FAILED) {
		rc = -errno;
		s->hdr = NULL;
		return rc;
	}
	s->blocks = (struct sim_block *)((uint8_t *)s->hdr + 4096);
	s->dev.geo = h.geo;
	if (h.version == 1 && !cfg->readonly) {
		/* upgrade: checksum every entry */
		uint32_t nb = nand_blocks(&h.geo);
		for (uint32_t b = 0; b < nb; b++)
			blk_store(s, b, s->blocks[b]);
		s->hdr->version = SIM_VERSION;
		s->hdr->seed = 0; /* version 1 images were drawn with seed 0 */
		header_seal(s);
		if (msync(s->hdr, s->map_len, MS_SYNC) < 0 || fsync(s->fd) < 0) {
			rc = -errno;
			seterr(err, errlen, "cannot upgrade %s: %s", cfg->path, strerror(-rc));
			return rc;
		}
		sim_log(s, NAND_LOG_INFO, "%s: upgraded the image to version %d (checksummed block table)",
			cfg->path, SIM_VERSION);
	}
	return 0;
}

/* The page slots of the image whose header is mapped, the block table
 * checked (preset p: for the factory bad marks of rebuilt entries), and
 * what the file holds of each block. */
static int image_map_pages(struct sim *s, const struct nand_sim_config *cfg,
			   const struct nand_preset *p, char *err, size_t errlen)
{
	int rc;
	s->data_off = s->hdr->data_off;
	s->slot_size = s->hdr->slot_size;
	/* the pages are mapped shared: reads and programs are memory copies,
	 * and land in the page cache at once (a killed process loses nothing) */
	s->ram_len = (size_t)(nand_pages(&s->dev.geo) * s->slot_size);
	s->ram = mmap(NULL, s->ram_len, PROT_READ | (cfg->readonly ? 0 : PROT_WRITE), MAP_SHARED,
		      s->fd, (off_t)s->data_off);
	if (s->ram == MAP_FAILED) {
		rc = -errno;
		s->ram = NULL;
		seterr(err, errlen, "cannot map NAND image %s: %s", cfg->path, strerror(-rc));
		return rc;
	}
	/* a NAND read touches one slot: a fault on an image page that is not in
	 * the page cache reads that page, not the disk's read-around window
	 * (read_ahead_kb, 8 MiB on a virtio disk here: a restart's first-page
	 * scan of ~88k blocks read ~15 GB at 1.7 GB/s for 9 s); sim_prefetch
	 * still asks for exactly the pages a batch of reads will touch */
	(void)madvise(s->ram, s->ram_len, MADV_RANDOM);
	if (s->hdr->version >= 2) {
		rc = table_check(s, p, cfg->path);
		if (rc) {
			seterr(err, errlen, "checking the block table of %s: %s", cfg->path, strerror(-rc));
			return rc;
		}
	}
	s->ff_spare = malloc(s->dev.geo.spare_size ? s->dev.geo.spare_size : 1);
	if (!s->ff_spare)
		return -ENOMEM;
	memset(s->ff_spare, 0xFF, s->dev.geo.spare_size);
	s->backed = calloc(nand_blocks(&s->dev.geo), sizeof *s->backed);
	if (!s->backed)
		return -ENOMEM;
	/* what is below each block's write pointer is in the file (a torn
	 * page never was) */
	for (uint32_t b = 0; b < nand_blocks(&s->dev.geo); b++) {
		uint32_t w = s->blocks[b].wp;
		if (s->blocks[b].torn_page != SIM_NO_PAGE && s->blocks[b].torn_page < w)
			w = s->blocks[b].torn_page;
		s->backed[b] = (uint16_t)w;
	}
	return 0;
}

/* An image file: opened, or created (made as tmp, renamed to target once
 * complete: create_target); a creation that fails leaves nothing. */
static int image_open(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset **p,
		      char *err, size_t errlen)
{
	char *target = NULL, *tmp = NULL;
	int flags = cfg->readonly ? O_RDONLY : O_RDWR;
	const char *open_path = cfg->path;
	if (cfg->create) {
		target = create_target(cfg->path);
		tmp = target ? malloc(strlen(target) + sizeof ".creating") : NULL;
		if (!tmp) {
			free(target);
			return -ENOMEM;
		}
		sprintf(tmp, "%s.creating", target);
		open_path = tmp;
		flags = O_RDWR | O_CREAT;
	}
	int rc = image_lock_open(s, cfg, open_path, flags, err, errlen);
	if (rc) {
		free(tmp);
		free(target);
		return rc;
	}
	if (cfg->create)
		rc = image_create(s, cfg, *p, &tmp, target, err, errlen);
	else
		rc = image_load(s, cfg, p, err, errlen);
	if (!rc)
		rc = image_map_pages(s, cfg, *p, err, errlen);
	if (rc && tmp)
		unlink(tmp); /* a creation that failed leaves nothing (locked: ours) */
	free(tmp);
	free(target);
	return rc;
}

int store_open(struct sim *s, const struct nand_sim_config *cfg, const struct nand_preset **p,
	       char *err, size_t errlen)
{
	if (cfg->metadata_only && cfg->path) {
		seterr(err, errlen, "metadata-only media live in RAM (no image file)%s%s", "", "");
		return -EINVAL;
	}
	return cfg->path ? image_open(s, cfg, p, err, errlen) : ram_open(s, cfg, *p, err, errlen);
}

void sim_free(struct sim *s)
{
	if (s->fd >= 0) {
		if (s->hdr)
			munmap(s->hdr, s->map_len);
		close(s->fd);
	} else {
		free(s->hdr);
	}
	if (s->ram)
		munmap(s->ram, s->ram_len);
	if (s->kept) {
		for (uint32_t b = 0; b < nand_blocks(&s->dev.geo); b++)
			kept_drop_block(s, b);
		free(s->kept);
	}
	free(s->dies);
	free(s->chans);
	free(s->events);
	free(s->ff_spare);
	free(s->backed);
	free(s->perr);
	free(s->em);
	free(s);
}

uint32_t nand_sim_table_repairs(const struct nand_dev *d)
{
	return nand_is_sim(d) ? ((const struct sim *)d)->table_repairs : 0;
}
