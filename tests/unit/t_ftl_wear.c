/*
 * t_ftl_wear - the FTL on wearing media, with the simulator's error model
 * on (bit errors growing with wear, retention and read disturb; grown bad
 * blocks past the rated P/E).
 *
 *   t_ftl_wear [PART | --list]       (t.h: t_parts; no PART: all of them)
 *
 *   refresh        a band aged to its rated P/E and by years of retention
 *                  reads with its ECC margin nearly gone: the reads mark it,
 *                  GC relocates it first, and every unit reads back
 *   wear_levelling cold bands (written once, never again) on young blocks
 *                  while the rest of the device is worn: GC takes the cold
 *                  bands as victims so they take their share of erases
 *   wear_levelling_nocount  the same on a medium that keeps no erase counts
 *                  (raw NAND): the FTL's own counts even the wear
 *   erase_counts   on a medium without counts, the FTL's counts survive a
 *                  clean reopen exactly and a crash within their bound;
 *                  a checkpoint without them (an older flashd's) opens
 *   close_mid_checkpoint  a close while a periodic checkpoint is written:
 *                  the eraser runs again for close's own, which ends
 *   wear_out       a small device driven to the end of its life: online,
 *                  write-reduced, read-only; every transition checked, and
 *                  every unit still reads its last data
 *   thermal        the controller heated past 78 C: host writes paced;
 *                  past 85 C: host I/O held and a checkpoint written, then
 *                  everything goes on once it has cooled below 75 C; a
 *                  close while stopped does not wait for the cooling
 */
#include <math.h>

#include "ftl/ftl_int.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

#define NS_PER_YEAR (365ull * 24 * 3600 * 1000000000ull)

static struct nand_dev *dev_aging(const char *preset, bool timed, uint64_t seed)
{
	struct nand_sim_config cfg = { .preset = preset, .error_model = true, .seed = seed,
				       .timing = timed, .virtual_time = timed };
	return sim_open_ok(&cfg);
}

/* Let background work (GC, erases) run until nothing moves. */
static void settle(struct ftl *f)
{
	int quiet = 0;
	for (int i = 0; i < 10000000 && quiet < 50; i++) {
		int n = ftl_poll(f);
		uint64_t dl = ftl_next_deadline(f);
		if (!n && ftl_idle(f) && dl == UINT64_MAX)
			quiet++;
		else
			quiet = 0;
		if (dl != UINT64_MAX && dl > nand_now(ftl_device(f)))
			nand_wait_until(ftl_device(f), dl);
	}
}

static void refresh(void)
{
	struct nand_dev *d = dev_aging("test-64m", false, 3);
	format(d, 20);
	uint64_t units;
	uint32_t *ver;
	struct ftl *f = open_units(d, &units, &ver);
	write_all(f, ver, units);
	settle(f);
	/* every block at its rated P/E, and 1.5 years of retention: a page
	 * read then corrects ~15 bits per codeword on average (ECC: 40) */
	uint32_t rated = d->rated_pe_cycles;
	uint32_t nblocks = nand_blocks(&d->geo);
	for (uint32_t k = 0; k < nblocks; k++)
		CHECK_RC(nand_sim_set_erase_count(d, k, rated));
	CHECK_RC(nand_sim_age(d, NS_PER_YEAR * 3 / 2));
	struct ftl_stats st0, st;
	ftl_get_stats(f, &st0);
	verify(f, ver, units, false);
	ftl_get_stats(f, &st);
	printf("refresh: first read of the aged device: %" PRIu64 " reads corrected, %" PRIu64
	       " bands marked\n",
	       st.read_errors_corrected - st0.read_errors_corrected, st.refresh_marked);
	CHECK(st.refresh_marked > 0);
	settle(f);
	ftl_get_stats(f, &st);
	/* relocated: the marked bands were collected, their blocks erased */
	uint32_t erased_again = 0;
	for (uint32_t k = 0; k < nblocks; k++)
		erased_again += nand_erase_count(d, k) > rated;
	printf("refresh: %" PRIu64 " bands collected, %" PRIu64 " pages relocated, %u blocks "
	       "erased since aging\n",
	       st.refresh_collected, st.gc_pages_relocated - st0.gc_pages_relocated, erased_again);
	/* bands still open when marked are collected once they close */
	CHECK(st.refresh_collected <= st.refresh_marked);
	CHECK(st.gc_pages_relocated - st0.gc_pages_relocated > 0);
	CHECK(erased_again > 0);
	/* every unit reads back, and the relocated data has its margin back:
	 * fewer bands get marked on this pass than on the first */
	uint64_t marked = st.refresh_marked;
	verify(f, ver, units, false);
	ftl_get_stats(f, &st);
	printf("refresh: second read: %" PRIu64 " more bands marked\n", st.refresh_marked - marked);
	CHECK(st.refresh_marked - marked < marked);
	CHECK_EQ(st.lost_units, 0);
	/* host writes close the open bands: the marked ones among them are
	 * collected then */
	for (uint64_t u = 0; u < units / 3; u++) {
		write_unit(f, u, ++ver[u]);
	}
	CHECK_RC(ftl_flush_sync(f));
	settle(f);
	ftl_get_stats(f, &st);
	printf("refresh: after writes, %" PRIu64 " of %" PRIu64 " marked bands collected\n",
	       st.refresh_collected, st.refresh_marked);
	CHECK_EQ(st.refresh_collected, st.refresh_marked);
	verify(f, ver, units, false);
	settle(f);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	verify(f, ver, units, false);
	close_free(f, d, ver);
}

/*
 * Raw NAND (the MTD backend) keeps no erase counts: the simulator with its
 * counter hidden from the FTL (erase_count 0, no NAND_CAP_ERASE_COUNTS);
 * the test reads the hidden one as the truth.
 */
static const struct nand_ops *sim_ops;
static struct nand_ops nocount_ops;

static uint32_t nocount_erase_count(struct nand_dev *d, uint32_t block)
{
	return 0;
}

static void hide_counts(struct nand_dev *d)
{
	sim_ops = d->ops;
	nocount_ops = *d->ops;
	nocount_ops.erase_count = nocount_erase_count;
	d->ops = &nocount_ops;
	d->caps &= ~(uint32_t)NAND_CAP_ERASE_COUNTS;
}

static void show_counts(struct nand_dev *d)
{
	d->ops = sim_ops;
	d->caps |= NAND_CAP_ERASE_COUNTS;
}

/* the medium's erases of block k, hidden from the FTL or not */
static uint32_t medium_count(struct nand_dev *d, uint32_t k)
{
	return d->ops == &nocount_ops ? sim_ops->erase_count(d, k) : nand_erase_count(d, k);
}

/* each block's erases as the medium has them now: an array the caller
 * frees */
static uint32_t *medium_counts_now(struct nand_dev *d)
{
	uint32_t nb = nand_blocks(&d->geo);
	uint32_t *c = calloc(nb, sizeof *c);
	CHECK(c);
	for (uint32_t k = 0; k < nb; k++)
		c[k] = medium_count(d, k);
	return c;
}

/* erase counts of the blocks that hold data (not bad, not the superblock
 * blocks: block 0 of dies 0 and 1) */
static void erase_spread(struct nand_dev *d, uint32_t *emin, uint32_t *emax)
{
	uint32_t nb = nand_blocks(&d->geo), bpd = d->geo.blocks_per_die;
	*emin = UINT32_MAX;
	*emax = 0;
	for (uint32_t k = 0; k < nb; k++) {
		if (k == 0 || k == bpd)
			continue;
		uint32_t ec = medium_count(d, k);
		*emin = ec < *emin ? ec : *emin;
		*emax = ec > *emax ? ec : *emax;
	}
}

static void wear_levelling(bool medium_counts)
{
	const char *what = medium_counts ? "wear levelling" : "wear levelling (no medium counts)";
	struct nand_dev *d = dev_aging("test-16m", false, 5);
	format(d, 20);
	if (!medium_counts)
		hide_counts(d);
	uint64_t units;
	uint32_t *ver;
	struct ftl *f = open_units(d, &units, &ver);
	uint64_t cold = units / 2;
	for (uint64_t u = 0; u < units; u++)
		write_unit(f, u, ver[u] = 1);
	/* only the upper half is ever rewritten: the lower half is cold */
	uint32_t spread = d->rated_pe_cycles / 20; /* block.c: WL_SPREAD_DIV */
	uint32_t emin, emax;
	uint64_t seed = 99, writes = 0;
	do {
		for (int i = 0; i < 20000; i++) {
			uint64_t u = cold + t_rand(&seed) % (units - cold);
			write_unit(f, u, ++ver[u]);
		}
		writes += 20000;
		erase_spread(d, &emin, &emax);
	} while (emax < 3 * spread);
	struct ftl_stats st;
	ftl_get_stats(f, &st);
	printf("%s: %" PRIu64 " writes to the hot half: erase counts %u..%u (threshold %u), "
	       "%" PRIu64 " bands collected for wear levelling, WA %.2f\n",
	       what, writes, emin, emax, spread, st.wl_collected, st.write_amplification);
	CHECK(st.wl_collected > 0);
	/* the cold blocks took their share: within the threshold and the
	 * erases of a check interval or two */
	CHECK(emax - emin < spread + spread / 2);
	verify(f, ver, units, false);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	verify(f, ver, units, false);
	close_free(f, d, ver);
}

/* The medium's erase counts over the blocks ftl_get_stats counts (not
 * bad; no grown bad blocks without the error model), less base[] (the
 * counts at format; NULL: none). */
struct counts {
	uint32_t min, max, n;
	uint64_t sum;
};

static void medium_counts(struct nand_dev *d, const uint32_t *base, struct counts *c)
{
	*c = (struct counts){ .min = UINT32_MAX };
	for (uint32_t k = 0; k < nand_blocks(&d->geo); k++) {
		if (nand_factory_bad(d, k))
			continue;
		uint32_t ec = medium_count(d, k) - (base ? base[k] : 0);
		c->min = ec < c->min ? ec : c->min;
		c->max = ec > c->max ? ec : c->max;
		c->sum += ec;
		c->n++;
	}
}

/* The FTL's counts (ftl_get_stats) are the medium's (c) exactly. */
static void check_counts_exact(struct ftl *f, const struct counts *c, const char *what)
{
	struct ftl_stats st;
	ftl_get_stats(f, &st);
	printf("erase counts %s: the FTL's %u..%u mean %.3f, the medium's %u..%u mean %.3f\n", what,
	       st.erase_min, st.erase_max, st.erase_avg, c->min, c->max, (double)c->sum / c->n);
	CHECK_EQ(st.erase_min, c->min);
	CHECK_EQ(st.erase_max, c->max);
	CHECK(fabs(st.erase_avg * c->n - (double)c->sum) < 0.5);
}

/* What a flashd from before the erase counts writes: every checkpoint
 * header block rewritten without the pages of counts after its header
 * (the header pages are the same, so this is the older format).  The
 * simulator counts that erase too. */
static void strip_counts(struct nand_dev *d)
{
	uint32_t ppb = d->geo.pages_per_block, ps = d->geo.page_size, ss = d->geo.spare_size;
	uint8_t *data = malloc((size_t)ppb * ps), *spare = malloc((size_t)ppb * ss);
	uint32_t stripped = 0;
	for (uint32_t b = 0; b < nand_blocks(&d->geo); b++) {
		uint32_t p = 0;
		for (; p < ppb; p++) {
			struct nand_op rd = { .type = NAND_OP_READ, .block = b, .page = p,
					      .data = data + (size_t)p * ps,
					      .spare = spare + (size_t)p * ss };
			if (nand_op_sync(d, &rd) != NAND_OK)
				break;
			struct ftl_spare sp;
			memcpy(&sp, spare + (size_t)p * ss, sizeof sp);
			if (sp.magic != FTL_SPARE_MAGIC || sp.type != FTL_PG_CKPT)
				break;
			if (sp.lba == FTL_CP_WEAR_LBA)
				break;
		}
		if (p == ppb || p == 0)
			continue;
		struct ftl_spare sp;
		memcpy(&sp, spare + (size_t)p * ss, sizeof sp);
		if (sp.magic != FTL_SPARE_MAGIC || sp.type != FTL_PG_CKPT || sp.lba != FTL_CP_WEAR_LBA)
			continue;
		struct nand_op er = { .type = NAND_OP_ERASE, .block = b };
		CHECK_EQ(nand_op_sync(d, &er), NAND_OK);
		for (uint32_t k = 0; k < p; k++) {
			struct nand_op pr = { .type = NAND_OP_PROGRAM, .block = b, .page = k,
					      .flags = NAND_OPF_META, .data = data + (size_t)k * ps,
					      .spare = spare + (size_t)k * ss };
			CHECK_EQ(nand_op_sync(d, &pr), NAND_OK);
		}
		stripped++;
	}
	CHECK(stripped > 0);
	free(data);
	free(spare);
}

/*
 * Erase counts on a medium that keeps none (the simulator's hidden): the
 * FTL's own, in its checkpoints.
 *  - a clean close and reopen: exactly the medium's erases since the format
 *  - a crash: counts from the last checkpoint, plus one for every block
 *    recovery finds erased or rewritten since it (that held older data
 *    then), so each block's count is between what it was at that
 *    checkpoint and the truth: behind by at most its erases since - 1
 *  - a checkpoint without counts (an older flashd's) opens, the counts
 *    starting from 0, or from the medium's where it keeps them, and the
 *    next checkpoint holds them
 */
static void erase_counts(void)
{
	struct nand_dev *d = dev_new("test-16m", false);
	format(d, 20);
	hide_counts(d);
	uint32_t nb = nand_blocks(&d->geo);
	uint32_t *base = medium_counts_now(d), *before = calloc(nb, sizeof *before);
	uint64_t units, seed = 7;
	uint32_t *ver;
	struct ftl *f = open_units(d, &units, &ver);
	churn(f, ver, units, 12 * units, &seed);
	settle(f);
	CHECK_RC(ftl_close(f));
	/* (the open erases blocks the close left dirty: counted by both) */
	f = open_ok(d);
	struct counts m;
	medium_counts(d, base, &m);
	CHECK(m.max >= 20);
	check_counts_exact(f, &m, "after a clean reopen");
	verify(f, ver, units, false);

	/* a crash: a checkpoint, then writes (more than a checkpoint's worth
	 * would start another), flushed and settled, and no close */
	CHECK_RC(ftl_close(f));
	struct ftl_open_params op = { .checkpoint_interval = 1000 * units };
	f = open_with(d, &op);
	churn(f, ver, units, 2 * units, &seed);
	settle(f);
	for (uint32_t k = 0; k < nb; k++)
		before[k] = medium_count(d, k) - base[k];
	uint64_t ticket = ftl_checkpoint_request(f);
	int r;
	while (!(r = ftl_checkpoint_poll(f, ticket)))
		ftl_poll(f);
	CHECK_EQ(r, 1);
	churn(f, ver, units, 2 * units, &seed);
	CHECK_RC(ftl_flush_sync(f));
	settle(f);
	ftl_abandon(f);
	struct counts truth;
	medium_counts(d, base, &truth);
	uint64_t floor = 0;
	for (uint32_t k = 0; k < nb; k++)
		floor += nand_factory_bad(d, k) ? 0 : before[k];
	f = open_ok(d);
	verify(f, ver, units, false);
	struct ftl_stats st;
	ftl_get_stats(f, &st);
	double sum = st.erase_avg * truth.n;
	printf("erase counts after a crash: the FTL's %u..%u, %.0f erases in all; the medium's "
	       "%u..%u, %" PRIu64 " (%" PRIu64 " since the checkpoint)\n",
	       st.erase_min, st.erase_max, sum, truth.min, truth.max, truth.sum,
	       truth.sum - floor);
	CHECK(truth.sum - floor > 0);
	CHECK(sum >= (double)floor - 0.5);
	CHECK(sum > (double)floor + 0.5); /* recovery counted blocks written since */
	CHECK(sum <= (double)truth.sum + 0.5);
	CHECK(st.erase_max <= truth.max);
	CHECK_RC(ftl_close(f));

	/* a checkpoint without counts: they start from 0 ... */
	strip_counts(d);
	f = open_ok(d);
	verify(f, ver, units, false);
	ftl_get_stats(f, &st);
	printf("erase counts from a checkpoint without them: %u..%u\n", st.erase_min, st.erase_max);
	CHECK(st.erase_max <= 1); /* 1: a block the close left dirty, erased by the open */
	CHECK_RC(ftl_close(f));
	/* ... or from the medium's, which then persist in the FTL's */
	strip_counts(d);
	show_counts(d);
	f = open_ok(d);
	verify(f, ver, units, false);
	medium_counts(d, NULL, &m);
	check_counts_exact(f, &m, "from the medium's, a checkpoint without them");
	CHECK_RC(ftl_close(f));
	hide_counts(d);
	f = open_ok(d);
	medium_counts(d, NULL, &m);
	check_counts_exact(f, &m, "kept by the FTL from then on");
	verify(f, ver, units, false);
	close_free(f, d, ver);
	free(base);
	free(before);
}

/*
 * A close while a periodic checkpoint is being written (timed, test-64m at
 * 20 %, counts hidden as on raw NAND): the close's request marks that
 * checkpoint clean too, and its counts stop the eraser (no erase after the
 * last checkpoint's counts); but close's own checkpoint follows and needs
 * the blocks that commit released, erased.  The one before the last must
 * not leave the eraser stopped: the close ends, and a reopen finds every
 * unit and the counts exact.
 */
static bool cp_writing(struct ftl *f, void *arg)
{
	return f->cp.phase == CP_WRITE && !f->cp.sealed;
}

static void close_mid_checkpoint(void)
{
	struct nand_dev *d = dev_new("test-64m", true);
	format(d, 20);
	hide_counts(d);
	uint32_t *base = medium_counts_now(d);
	uint64_t units, seed = 7;
	uint32_t *ver;
	struct ftl *f = open_units(d, &units, &ver);
	churn(f, ver, units, 5 * units, &seed);
	cp_request(f, false); /* as a periodic one */
	CHECK_RC(ftl_run_until(f, cp_writing, NULL));
	uint32_t dirty = f->dirty.count;
	int rc = ftl_close(f);
	if (rc) {
		fprintf(stderr, "close_mid_checkpoint: a close while a checkpoint was being written "
			"(%u blocks dirty) returned %d\n", dirty, rc);
		exit(1);
	}
	f = open_ok(d);
	verify(f, ver, units, false);
	struct counts m;
	medium_counts(d, base, &m);
	check_counts_exact(f, &m, "after a close during a checkpoint");
	close_free(f, d, ver);
	free(base);
}

/*
 * Wear-out: test-64m at 30 % over-provisioning (44 spare blocks: at 20 %
 * there are 18, and 10 % of that is under one block) with every block
 * started at 2.6 times its rated P/E, where the error model fails about
 * 1.4 % of blocks per P/E cycle (on a program or an erase).  Random host writes on the virtual clock until the
 * device turns read-only; every state change is recorded and checked:
 * ONLINE -> WRITE_REDUCED -> READONLY, in that order, each at its reserve
 * threshold, throttled writes in WRITE_REDUCED, -EROFS after; then every
 * unit must read its last written data, before and after a reopen.
 */
/* state changes as logged, the first 8 in order: keep_arrow keeps the
 * TO of a line "... -> TO", up to a character of STOP */
struct arrows {
	char to[8][64];
	int n;
};

static void keep_arrow(struct arrows *a, const char *msg, const char *stop)
{
	const char *arrow = strstr(msg, " -> ");
	if (arrow && a->n < 8) {
		const char *to = arrow + 4;
		snprintf(a->to[a->n++], sizeof a->to[0], "%.*s", (int)strcspn(to, stop), to);
	}
}

/* the FTL's state changes as logged (block.c, health_update) */
static struct arrows states;
static void log_states(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strncmp(msg, "state ", 6) == 0)
		keep_arrow(&states, msg, ":");
	fprintf(stderr, "ftl: %s\n", msg);
}

struct transition {
	enum ftl_state from, to;
	double reserves;
	uint64_t bad, writes;
	uint64_t t_ns;
};

static void wear_out(void)
{
	/* WEAR_SEED: the error model's seed (t_ftl_wear wear_out, by hand) */
	const char *wseed = getenv("WEAR_SEED");
	struct nand_dev *d = dev_aging("test-64m", true, wseed ? (uint64_t)atoll(wseed) : 11);
	format(d, 30);
	uint64_t units;
	uint32_t *ver;
	struct ftl *f = open_units(d, &units, &ver);
	write_all(f, ver, units);
	ftl_set_logger(log_states, NULL);
	uint32_t rated = d->rated_pe_cycles, nb = nand_blocks(&d->geo);
	for (uint32_t k = 0; k < nb; k++)
		CHECK_RC(nand_sim_set_erase_count(d, k, rated * 26 / 10));

	struct transition tr[16];
	int ntr = 0;
	uint8_t b[4096];
	struct ftl_info info;
	enum ftl_state prev = FTL_STATE_ONLINE;
	uint64_t seed = 1234, writes = 0, reduced_writes = 0;
	uint64_t reduced_ns = 0;
	struct ftl_stats st;
	int rc = 0;
	while (writes < 50 * units) {
		uint64_t u = t_rand(&seed) % units;
		fill(b, u, ver[u] + 1);
		uint64_t t0 = nand_now(d);
		rc = ftl_write_sync(f, b, u * 4096, 4096, 0);
		if (rc == 0) {
			ver[u]++;
			writes++;
		}
		ftl_get_info(f, &info);
		if (prev == FTL_STATE_WRITE_REDUCED && rc == 0) {
			reduced_writes++;
			reduced_ns += nand_now(d) - t0;
		}
		if (info.state != prev) {
			ftl_get_stats(f, &st);
			CHECK(ntr < 16);
			tr[ntr++] = (struct transition){ prev, info.state, st.reserve_percent,
							 st.blocks_bad_grown, writes, nand_now(d) };
			printf("wear-out: %s -> %s after %" PRIu64 " writes, %.1f s: reserves %.1f%%, "
			       "%" PRIu64 " grown bad, endurance used %.1f%%; %s\n",
			       ftl_state_name(prev), ftl_state_name(info.state), writes,
			       (double)nand_now(d) / 1e9, st.reserve_percent, st.blocks_bad_grown,
			       st.endurance_used_percent, info.health);
			prev = info.state;
		}
		if (rc) {
			ftl_get_stats(f, &st);
			printf("wear-out: write failed (%s) after %" PRIu64 " writes: state %s, reserves "
			       "%.1f%%, %" PRIu64 " bad (%" PRIu64 " grown), needed %" PRIu64 "\n",
			       strerror(-rc), writes, ftl_state_name(info.state), st.reserve_percent,
			       st.blocks_bad, st.blocks_bad_grown, st.blocks_needed);
			CHECK_EQ(rc, -EROFS);
			break;
		}
	}
	ftl_get_stats(f, &st);
	CHECK_EQ(rc, -EROFS);
	/* as seen between host writes: write-reduced, then read-only; or
	 * read-only at once when the reserves fell through write-reduced
	 * while one write waited (GC retiring blocks of a band): the log
	 * below has every transition (error-model seeds 36, 39, 42) */
	CHECK(ntr == 2 || ntr == 1);
	CHECK_EQ(tr[0].from, FTL_STATE_ONLINE);
	if (ntr == 2) {
		CHECK_EQ(tr[0].to, FTL_STATE_WRITE_REDUCED);
		CHECK(tr[0].reserves <= FTL_RESERVE_REDUCED_PERCENT);
	}
	CHECK_EQ(tr[ntr - 1].to, FTL_STATE_READONLY);
	CHECK(tr[ntr - 1].reserves == 0);
	/* throttled: a write took FTL_REDUCED_WRITE_NS or more on average,
	 * beyond the first FTL_THROTTLE_BURST (110 writes in that mode gave
	 * 284 us on average: error-model seed 29) */
	if (reduced_writes > 64) {
		double per = (double)reduced_ns / (double)(reduced_writes - FTL_THROTTLE_BURST);
		printf("wear-out: %" PRIu64 " writes in write-reduced mode, %.0f us each on average "
		       "after the first %d\n", reduced_writes, per / 1e3, FTL_THROTTLE_BURST);
		CHECK(per >= FTL_REDUCED_WRITE_NS * 0.8);
	}
	/* each logged at warning level (everything the FTL logs is), in order:
	 * the 10 % warning, write-reduced, read-only */
	CHECK_EQ(states.n, 3);
	CHECK(strcmp(states.to[0], "online, reserves low") == 0);
	CHECK(strcmp(states.to[1], "write-reduced") == 0);
	CHECK(strcmp(states.to[2], "read-only") == 0);
	/* read-only: writes, trims and zeroes refused, flush fine */
	CHECK_EQ(ftl_write_sync(f, b, 0, 4096, 0), -EROFS);
	CHECK_EQ(ftl_trim_sync(f, 0, 4096, 0), -EROFS);
	CHECK_EQ(ftl_write_zeroes_sync(f, 0, 4096, 0), -EROFS);
	CHECK_RC(ftl_flush_sync(f));
	printf("wear-out: %" PRIu64 " program and %" PRIu64 " erase failures, %" PRIu64
	       " refreshes, %" PRIu64 " units lost\n",
	       st.program_failures, st.erase_failures, st.refresh_collected, st.lost_units);
	CHECK_EQ(st.lost_units, 0);
	verify(f, ver, units, false);
	settle(f);
	verify(f, ver, units, false);
	/* the state survives a reopen (the checkpoint keeps the bad blocks) */
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK_EQ(info.state, FTL_STATE_READONLY);
	verify(f, ver, units, false);
	CHECK_EQ(ftl_write_sync(f, b, 0, 4096, 0), -EROFS);
	CHECK_RC(ftl_close(f));
	ftl_set_logger(NULL, NULL);
	nand_close(d);
	free(ver);
}

static struct arrows thermal_states;

static void log_thermal(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "thermal state"))
		keep_arrow(&thermal_states, msg, " ");
	fprintf(stderr, "ftl: %s\n", msg);
}

static void th_done(struct ftl_io *io)
{
	*(int *)io->priv = io->status == 0 ? 1 : -1;
}

/* Run the FTL on its virtual clock until *flag is set (or a limit). */
static void run_until_flag(struct nand_dev *d, struct ftl *f, const int *flag, uint64_t limit_ns)
{
	uint64_t t0 = nand_now(d);
	while (!*flag && nand_now(d) - t0 < limit_ns) {
		ftl_poll(f);
		if (*flag)
			break;
		uint64_t due = ftl_next_deadline(f);
		if (due != UINT64_MAX && due > nand_now(d))
			nand_wait_until(d, due);
	}
}

static void thermal(void)
{
	struct nand_dev *d = dev_aging("test-64m", true, 21);
	format(d, 30);
	struct ftl *f = open_ok(d);
	struct ftl_info info;
	struct ftl_stats st;
	ftl_get_info(f, &info);
	CHECK(info.temp_mc != FTL_TEMP_NONE);
	CHECK(info.temp_mc < FTL_THERMAL_THROTTLE_MC);
	CHECK_EQ(info.thermal, FTL_THERMAL_OK);
	uint64_t units = info.units;
	uint8_t b[4096];
	ftl_set_logger(log_thermal, NULL);

	/* 80 C: throttled; a run of writes takes FTL_THERMAL_WRITE_NS each */
	nand_sim_set_temperature_mc(d, 80000);
	ftl_sensors_changed(f);
	ftl_get_info(f, &info);
	CHECK_EQ(info.thermal, FTL_THERMAL_THROTTLED);
	uint64_t t0 = nand_now(d);
	for (int i = 0; i < 400; i++) {
		nand_sim_set_temperature_mc(d, 80000); /* hold it there */
		fill(b, (uint64_t)i % units, 2);
		CHECK_RC(ftl_write_sync(f, b, ((uint64_t)i % units) * 4096, 4096, 0));
	}
	double per = (double)(nand_now(d) - t0) / 400;
	printf("thermal: 80 C: %.0f us per 4 KiB write (paced to %llu)\n", per / 1e3,
	       FTL_THERMAL_WRITE_NS / 1000);
	CHECK(per >= FTL_THERMAL_WRITE_NS * 0.8);

	/* 86 C: a write is held (not failed), a checkpoint is written */
	ftl_get_stats(f, &st);
	uint64_t cps = st.checkpoints;
	nand_sim_set_temperature_mc(d, 86000);
	uint64_t t_hot = nand_now(d);
	int flag = 0;
	struct ftl_io io = { .type = FTL_IO_WRITE, .offset = 0, .length = 4096, .buf = b,
			     .done = th_done, .priv = &flag };
	fill(b, 0, 3);
	ftl_sensors_changed(f);
	ftl_get_info(f, &info);
	CHECK_EQ(info.thermal, FTL_THERMAL_STOPPED);
	ftl_submit(f, &io);
	ftl_poll(f);
	CHECK_EQ(flag, 0);
	run_until_flag(d, f, &flag, 300ull * 1000000000);
	CHECK_EQ(flag, 1);
	double held_s = (double)(nand_now(d) - t_hot) / 1e9;
	ftl_get_info(f, &info);
	ftl_get_stats(f, &st);
	printf("thermal: 86 C: a write held %.1f s (virtual) until %.1f C, max %.1f C, %" PRIu64
	       " checkpoint(s) meanwhile\n",
	       held_s, info.temp_mc / 1000.0, info.temp_max_mc / 1000.0, st.checkpoints - cps);
	CHECK(held_s > 1.0);
	CHECK(info.temp_mc < FTL_THERMAL_RESUME_MC);
	CHECK(info.temp_max_mc >= 85000);
	CHECK(st.checkpoints > cps);
	CHECK(info.thermal != FTL_THERMAL_STOPPED);
	uint8_t r[4096];
	CHECK_RC(ftl_read_sync(f, r, 0, 4096));
	CHECK(memcmp(r, b, 4096) == 0);
	/* each change logged, in order */
	CHECK(thermal_states.n >= 3);
	CHECK(strcmp(thermal_states.to[0], "throttled") == 0);
	CHECK(strcmp(thermal_states.to[1], "stopped") == 0);
	CHECK(strcmp(thermal_states.to[2], "ok") == 0 || strcmp(thermal_states.to[2], "throttled") == 0);

	/* stopped again, then closed: the held write completes, nothing waits
	 * for the cooling */
	nand_sim_set_temperature_mc(d, 90000);
	ftl_sensors_changed(f);
	ftl_get_info(f, &info);
	CHECK_EQ(info.thermal, FTL_THERMAL_STOPPED);
	flag = 0;
	fill(b, 1, 4);
	io = (struct ftl_io){ .type = FTL_IO_WRITE, .offset = 4096, .length = 4096, .buf = b,
			      .done = th_done, .priv = &flag };
	ftl_submit(f, &io);
	ftl_poll(f);
	CHECK_EQ(flag, 0);
	CHECK_RC(ftl_close(f));
	CHECK_EQ(flag, 1);
	f = open_ok(d);
	CHECK_RC(ftl_read_sync(f, r, 4096, 4096));
	CHECK(memcmp(r, b, 4096) == 0);
	CHECK_RC(ftl_close(f));
	ftl_set_logger(NULL, NULL);
	nand_close(d);
}

static void wear_levelling_counted(void) { wear_levelling(true); }
static void wear_levelling_nocount(void) { wear_levelling(false); }

static const struct t_part parts[] = {
	{ "refresh", refresh },
	{ "wear_levelling", wear_levelling_counted },
	{ "wear_levelling_nocount", wear_levelling_nocount },
	{ "erase_counts", erase_counts },
	{ "close_mid_checkpoint", close_mid_checkpoint },
	{ "wear_out", wear_out },
	{ "thermal", thermal },
};

int main(int argc, char **argv)
{
	ftl_set_logger(NULL, NULL);
	return t_parts(argc, argv, parts, sizeof parts / sizeof parts[0]);
}
