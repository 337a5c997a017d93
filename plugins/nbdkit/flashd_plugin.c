/*
 * plugins/nbdkit/flashd_plugin.c - the flashd FTL inside nbdkit.
 *
 *   nbdkit ./build/nbdkit-flashd-plugin.so image=PATH [preset=NAME]
 *          [sector-size=512|4096] [capacity=BYTES|PCT%] [op=PCT]
 *          [timing=on|off] [sync=on|off]
 *
 * image=PATH is a NAND image as flashd uses it (one ioDimm).  If it does not
 * exist it is created with preset= and formatted (sector-size, capacity or
 * op, as flashctl format).  The image is locked: flashd, flashctl or a
 * second nbdkit opening it get a clear "in use" error.
 *
 * Threading: nbdkit calls in parallel from its threads, but an FTL belongs
 * to one thread.  The plugin runs one FTL thread; each request is queued to
 * it and its caller waits on its own condition variable (the FTL thread
 * takes requests many at a time, so concurrent requests overlap on the
 * media's dies).  Lock order: queue lock only; never held across FTL calls.
 */
#define NBDKIT_API_VERSION 2
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nbdkit-plugin.h>

#include "common/parse.h"
#include "common/queue.h"
#include "common/units.h"
#include "ftl/ftl.h"
#include "hw/nand.h"

#define MAX_REQUEST (32u << 20)

static char *image;
static char *preset;
static uint32_t sector_size = 512;
static uint64_t capacity;
static double capacity_pct;
static double op_percent;
static bool timing;
static bool sync_on_flush = true;

static struct nand_dev *dev;
static struct ftl *ftl;
static struct ftl_info info;

/* ---- the FTL thread ----------------------------------------------------- */

enum job_kind { JOB_IO, JOB_EXTENTS };

struct job {
	enum job_kind kind;
	struct ftl_io io;
	/* extents */
	uint64_t off, len;
	bool req_one;
	struct nbdkit_extents *extents;
	int ext_rc;
	/* completion */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	struct job *next;
};

static pthread_t thread;
static bool thread_running;
static int wake_fd = -1;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static struct job *queue, *queue_tail;
static bool stopping;

static void job_done(struct job *j)
{
	pthread_mutex_lock(&j->lock);
	j->done = true;
	pthread_cond_signal(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

static void io_done(struct ftl_io *io)
{
	job_done(io->priv);
}

static void run_extents(struct job *j)
{
	uint64_t off = j->off, end = j->off + j->len;
	j->ext_rc = 0;
	while (off < end) {
		bool mapped;
		uint64_t n = ftl_map_extent(ftl, off, end - off, &mapped);
		if (!n)
			break;
		if (nbdkit_add_extent(j->extents, off, n,
				      mapped ? 0 : NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO) < 0) {
			j->ext_rc = -1;
			break;
		}
		off += n;
		if (j->req_one)
			break;
	}
	job_done(j);
}

static void *ftl_thread(void *arg)
{
	for (;;) {
		pthread_mutex_lock(&qlock);
		struct job *j = queue;
		queue = queue_tail = NULL;
		bool stop = stopping;
		pthread_mutex_unlock(&qlock);
		while (j) {
			struct job *next = j->next;
			if (j->kind == JOB_IO)
				ftl_submit(ftl, &j->io);
			else
				run_extents(j);
			j = next;
		}
		ftl_poll(ftl);
		if (stop && ftl_idle(ftl))
			break;
		/* sleep until a request arrives or the medium has a completion due */
		uint64_t due = ftl_next_deadline(ftl);
		int timeout = -1;
		if (due != UINT64_MAX) {
			uint64_t now = nand_now(dev);
			timeout = due <= now ? 0 : (int)((due - now + 999999) / 1000000);
		}
		struct pollfd pfd = { .fd = wake_fd, .events = POLLIN };
		if (poll(&pfd, 1, timeout) > 0) {
			uint64_t v;
			if (read(wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
				nbdkit_error("flashd: wake-up read: %m");
		}
	}
	return NULL;
}

static int run_job(struct job *j)
{
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->cond, NULL);
	j->done = false;
	j->io.done = io_done;
	j->io.priv = j;
	pthread_mutex_lock(&qlock);
	QUEUE_APPEND(queue, queue_tail, j, next);
	pthread_mutex_unlock(&qlock);
	uint64_t one = 1;
	if (write(wake_fd, &one, sizeof one) < 0)
		nbdkit_error("flashd: wake-up write: %m");
	pthread_mutex_lock(&j->lock);
	while (!j->done)
		pthread_cond_wait(&j->cond, &j->lock);
	pthread_mutex_unlock(&j->lock);
	pthread_cond_destroy(&j->cond);
	pthread_mutex_destroy(&j->lock);
	return 0;
}

static int do_io(enum ftl_io_type type, uint32_t flags, void *buf, uint32_t count, uint64_t off)
{
	struct job j = { .kind = JOB_IO };
	j.io = (struct ftl_io){ .type = type, .flags = flags, .offset = off, .length = count,
				.buf = buf };
	run_job(&j);
	if (j.io.status) {
		nbdkit_set_error(-j.io.status);
		nbdkit_error("flashd: %s at %llu+%u: %s",
			     type == FTL_IO_READ ? "read" : type == FTL_IO_WRITE ? "write" :
			     type == FTL_IO_FLUSH ? "flush" : type == FTL_IO_TRIM ? "trim" : "zero",
			     (unsigned long long)off, count, strerror(-j.io.status));
		return -1;
	}
	return 0;
}

/* ---- configuration ------------------------------------------------------ */

static int parse_onoff(const char *key, const char *v, bool *out)
{
	int r = nbdkit_parse_bool(v);
	if (r < 0)
		return -1;
	*out = r;
	(void)key;
	return 0;
}

static int flashd_config(const char *key, const char *value)
{
	if (!strcmp(key, "image")) {
		free(image);
		image = nbdkit_absolute_path(value);
		return image ? 0 : -1;
	}
	if (!strcmp(key, "preset")) {
		if (!nand_preset_description(value)) {
			nbdkit_error("flashd: unknown preset '%s'", value);
			return -1;
		}
		free(preset);
		preset = strdup(value);
		return 0;
	}
	if (!strcmp(key, "sector-size")) {
		if (nbdkit_parse_uint32_t("sector-size", value, &sector_size) < 0)
			return -1;
		if (sector_size != 512 && sector_size != 4096) {
			nbdkit_error("flashd: sector-size must be 512 or 4096");
			return -1;
		}
		return 0;
	}
	if (!strcmp(key, "capacity")) {
		size_t n = strlen(value);
		if (n && value[n - 1] == '%') {
			if (parse_percent(value, 0, 100, &capacity_pct) || capacity_pct <= 0) {
				nbdkit_error("flashd: bad capacity '%s' (more than 0%% and at most 100%% "
					     "of the stock capacity)", value);
				return -1;
			}
			return 0;
		}
		int64_t v = nbdkit_parse_size(value);
		if (v <= 0) {
			nbdkit_error("flashd: bad capacity '%s'", value);
			return -1;
		}
		capacity = (uint64_t)v;
		return 0;
	}
	if (!strcmp(key, "op")) {
		if (parse_double(value, FTL_MIN_OP_PERCENT, FTL_MAX_OP_PERCENT, &op_percent)) {
			nbdkit_error("flashd: op must be %.0f to %.0f", FTL_MIN_OP_PERCENT,
				     FTL_MAX_OP_PERCENT);
			return -1;
		}
		return 0;
	}
	if (!strcmp(key, "timing"))
		return parse_onoff(key, value, &timing);
	if (!strcmp(key, "sync"))
		return parse_onoff(key, value, &sync_on_flush);
	nbdkit_error("flashd: unknown parameter '%s'", key);
	return -1;
}

static int flashd_config_complete(void)
{
	if (!image) {
		nbdkit_error("flashd: image=PATH is required");
		return -1;
	}
	return 0;
}

/* What the simulator repaired at open is worth seeing without -v; the
 * rest (an image upgraded, a block grown bad) with -v. */
static void sim_log_to_nbdkit(void *arg, int level, const char *msg)
{
	if (level <= NAND_LOG_ERR)
		nbdkit_error("flashd: %s", msg);
	else if (level == NAND_LOG_WARNING)
		nbdkit_error("flashd: warning: %s", msg);
	else
		nbdkit_debug("flashd nand: %s", msg);
}

/* Errors are shown; the rest with -v (nbdkit --verbose). */
static void ftl_log_to_nbdkit(void *arg, int level, const char *msg)
{
	if (level <= FTL_LOG_ERR)
		nbdkit_error("flashd: %s", msg);
	else
		nbdkit_debug("flashd ftl: %s", msg);
}

/* Open (create, format) the image and the FTL, before nbdkit forks. */
static int flashd_get_ready(void)
{
	char err[512];
	struct stat st;
	bool exists = stat(image, &st) == 0;
	if (!exists && !preset) {
		nbdkit_error("flashd: %s does not exist; preset=NAME is needed to create it", image);
		return -1;
	}
	ftl_set_logger(ftl_log_to_nbdkit, NULL);
	/* the simulator only: a backend with threads of its own (mtd) would
	 * lose them when nbdkit forks after this */
	struct nand_spec ns = { .backend = "sim", .path = image, .preset = preset,
				.create = !exists, .timing = timing, .sync_on_flush = sync_on_flush,
				.log = sim_log_to_nbdkit };
	int rc = nand_open(&ns, &dev, err, sizeof err);
	if (rc) {
		nbdkit_error("flashd: %s", err);
		return -1;
	}
	struct ftl_info fi;
	rc = ftl_probe(dev, &fi, err, sizeof err);
	if (rc == -EUCLEAN) {
		nbdkit_error("flashd: %s: %s; not formatting it: 'flashctl recover %s' reports what "
			     "is there and can rebuild the superblock, 'flashctl format' erases it",
			     image, err, image);
		return -1;
	}
	if (rc && rc != -ENODATA) {
		nbdkit_error("flashd: %s: %s", image, err[0] ? err : strerror(-rc));
		return -1;
	}
	if (rc == -ENODATA) {
		struct ftl_format_params fp = { .sector_size = sector_size, .capacity_bytes = capacity,
						.op_percent = op_percent };
		if (capacity_pct > 0)
			fp.capacity_bytes = (uint64_t)((double)ftl_capacity_for_op(dev, ftl_stock_op_percent(dev)) *
						       capacity_pct / 100.0);
		if (ftl_format(dev, &fp, err, sizeof err)) {
			nbdkit_error("flashd: format: %s", err);
			return -1;
		}
	}
	rc = ftl_open(dev, NULL, &ftl, err, sizeof err);
	if (rc) {
		nbdkit_error("flashd: %s", err);
		return -1;
	}
	ftl_get_info(ftl, &info);
	nbdkit_debug("flashd: %s: %llu bytes, %u-byte sectors, %s shutdown", image,
		     (unsigned long long)info.capacity, info.sector_size,
		     info.was_clean ? "clean" : "unclean");
	return 0;
}

/* Threads do not survive nbdkit's fork into the background: start it here. */
static int flashd_after_fork(void)
{
	wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wake_fd < 0) {
		nbdkit_error("flashd: eventfd: %m");
		return -1;
	}
	int rc = pthread_create(&thread, NULL, ftl_thread, NULL);
	if (rc) {
		nbdkit_error("flashd: cannot start the FTL thread: %s", strerror(rc));
		return -1;
	}
	thread_running = true;
	return 0;
}

static void flashd_cleanup(void)
{
	if (thread_running) {
		pthread_mutex_lock(&qlock);
		stopping = true;
		pthread_mutex_unlock(&qlock);
		uint64_t one = 1;
		if (write(wake_fd, &one, sizeof one) < 0)
			nbdkit_debug("flashd: wake-up write failed");
		pthread_join(thread, NULL);
		thread_running = false;
	}
	if (ftl) {
		int rc = ftl_close(ftl);
		if (rc)
			nbdkit_error("flashd: closing the FTL: %s", strerror(-rc));
		ftl = NULL;
	}
	if (dev) {
		nand_close(dev);
		dev = NULL;
	}
	if (wake_fd >= 0)
		close(wake_fd);
	wake_fd = -1;
}

static void flashd_unload(void)
{
	flashd_cleanup();
	free(image);
	free(preset);
}

/* ---- connections and requests ------------------------------------------- */

static int handle_dummy;

static void *flashd_open(int readonly)
{
	return &handle_dummy;
}

static int64_t flashd_get_size(void *h)
{
	return (int64_t)info.capacity;
}

static int flashd_block_size(void *h, uint32_t *min, uint32_t *pref, uint32_t *max)
{
	*min = info.sector_size;
	*pref = 4096;
	*max = MAX_REQUEST;
	return 0;
}

static int yes(void *h)
{
	return 1;
}

static int flashd_can_fua(void *h)
{
	return NBDKIT_FUA_NATIVE;
}

static int flashd_can_cache(void *h)
{
	return NBDKIT_CACHE_NATIVE;
}

static int flashd_thread_model(void)
{
	return NBDKIT_THREAD_MODEL_PARALLEL;
}

static int flashd_pread(void *h, void *buf, uint32_t count, uint64_t off, uint32_t flags)
{
	return do_io(FTL_IO_READ, 0, buf, count, off);
}

static int flashd_pwrite(void *h, const void *buf, uint32_t count, uint64_t off, uint32_t flags)
{
	return do_io(FTL_IO_WRITE, (flags & NBDKIT_FLAG_FUA) ? FTL_IO_FUA : 0, (void *)buf, count, off);
}

static int flashd_flush(void *h, uint32_t flags)
{
	return do_io(FTL_IO_FLUSH, 0, NULL, 0, 0);
}

static int flashd_trim(void *h, uint32_t count, uint64_t off, uint32_t flags)
{
	return do_io(FTL_IO_TRIM, (flags & NBDKIT_FLAG_FUA) ? FTL_IO_FUA : 0, NULL, count, off);
}

static int flashd_zero(void *h, uint32_t count, uint64_t off, uint32_t flags)
{
	uint32_t fl = (flags & NBDKIT_FLAG_FUA) ? FTL_IO_FUA : 0;
	if (!(flags & NBDKIT_FLAG_MAY_TRIM)) {
		/* must stay allocated: zero pages are written, as slow as a write */
		if (flags & NBDKIT_FLAG_FAST_ZERO) {
			nbdkit_set_error(ENOTSUP);
			return -1;
		}
		fl |= FTL_IO_NO_HOLE;
	}
	return do_io(FTL_IO_WRITE_ZEROES, fl, NULL, count, off);
}

static int flashd_cache(void *h, uint32_t count, uint64_t off, uint32_t flags)
{
	return 0; /* the data is in RAM or on (simulated) NAND already */
}

static int flashd_extents(void *h, uint32_t count, uint64_t off, uint32_t flags,
			  struct nbdkit_extents *extents)
{
	struct job j = { .kind = JOB_EXTENTS, .off = off, .len = count,
			 .req_one = flags & NBDKIT_FLAG_REQ_ONE, .extents = extents };
	run_job(&j);
	return j.ext_rc;
}

static const char *flashd_export_description(void *h)
{
	static char desc[256];
	snprintf(desc, sizeof desc, "flashd ioDimm %s (%s): %s, %u-byte sectors", image,
		 dev ? dev->preset : "?", SIZE_TEXT((double)info.capacity), info.sector_size);
	return desc;
}

static void flashd_dump_plugin(void)
{
	printf("flashd_presets=");
	for (size_t i = 0; nand_preset_name(i); i++)
		printf("%s%s", i ? "," : "", nand_preset_name(i));
	printf("\n");
}

static struct nbdkit_plugin plugin = {
	.name = "flashd",
	.longname = "flashd flash translation layer over a simulated ioDimm",
	.version = "0.1",
	.description = "The flashd FTL inside nbdkit: image=PATH [preset=NAME] ...",
	.unload = flashd_unload,
	.config = flashd_config,
	.config_complete = flashd_config_complete,
	.config_help = "image=PATH       NAND image (created if missing)\n"
		       "preset=NAME      ioDimm preset for a new image (flashctl presets)\n"
		       "sector-size=N    512 or 4096, for a new format\n"
		       "capacity=SIZE    bytes or PCT% of stock, for a new format\n"
		       "op=PCT           over-provisioning, % of raw, for a new format\n"
		       "timing=on|off    NAND timing model (default off)\n"
		       "sync=on|off      fdatasync the image on flush (default on)",
	.magic_config_key = "image",
	.get_ready = flashd_get_ready,
	.after_fork = flashd_after_fork,
	.cleanup = flashd_cleanup,
	.thread_model = flashd_thread_model,
	.open = flashd_open,
	.get_size = flashd_get_size,
	.block_size = flashd_block_size,
	.can_write = yes,
	.can_flush = yes,
	.can_trim = yes,
	.can_zero = yes,
	.can_fast_zero = yes,
	.can_fua = flashd_can_fua,
	.can_multi_conn = yes,
	.can_extents = yes,
	.can_cache = flashd_can_cache,
	.pread = flashd_pread,
	.pwrite = flashd_pwrite,
	.flush = flashd_flush,
	.trim = flashd_trim,
	.zero = flashd_zero,
	.cache = flashd_cache,
	.extents = flashd_extents,
	.export_description = flashd_export_description,
	.dump_plugin = flashd_dump_plugin,
	.errno_is_preserved = 0,
};

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
NBDKIT_REGISTER_PLUGIN(plugin)
