/*
 * tests/unit/fixture.h - what the FTL unit tests share: a simulated device
 * in RAM, a format, an open that must succeed, and 4 KiB units whose data
 * names the unit and its version, written and checked against a version
 * array (ver[u] == 0: never written, reads zeros); struct fx holds them
 * for the usual set-up.  Each helper exits with a message when something
 * it needs fails, as a CHECK does.
 */
#ifndef FLASHD_TEST_FIXTURE_H
#define FLASHD_TEST_FIXTURE_H

#include <signal.h>
#include <stdbool.h>
#include <unistd.h>

#include "ftl/ftl.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"

/* the FTL's log lines, shown only with T_VERBOSE set:
 * ftl_set_logger(quiet_log, NULL) */
static inline void quiet_log(void *arg, int level, const char *msg)
{
	if (getenv("T_VERBOSE"))
		fprintf(stderr, "ftl: %s\n", msg);
}

static inline void on_alarm(int sig)
{
	static const char msg[] = ": timed out (a hang)\n";
	ssize_t n = write(2, program_invocation_short_name,
			  strlen(program_invocation_short_name));
	n = write(2, msg, sizeof msg - 1);
	(void)n;
	_exit(1);
}

/* a hang ends the program, exit 1 with "PROG: timed out (a hang)", after
 * SECONDS rather than at the test runner's limit */
static inline void watchdog(unsigned seconds)
{
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

/* the 4 KiB of unit UNIT at version VER */
static inline void fill(uint8_t *b, uint64_t unit, uint32_t ver)
{
	for (int i = 0; i < 4096; i += 8) {
		uint64_t v = (unit << 32 | ver) * 0x9E3779B97F4A7C15ull + (uint64_t)i;
		memcpy(b + i, &v, 8);
	}
}

/* ftl_poll F until *DONE (set by an I/O's completion), waiting on D's
 * clock for F's next deadline; false when nothing is due and it is not
 * done: a hang */
static inline bool poll_until_done(struct ftl *f, struct nand_dev *d, const bool *done)
{
	while (!*done) {
		ftl_poll(f);
		if (*done)
			break;
		uint64_t due = ftl_next_deadline(f);
		if (due == UINT64_MAX)
			return false;
		nand_wait_until(d, due);
	}
	return true;
}

/* a simulated device in RAM as CFG says */
static inline struct nand_dev *sim_open_ok(const struct nand_sim_config *cfg)
{
	struct nand_dev *d;
	char err[256];
	int rc = nand_sim_open(cfg, &d, err, sizeof err);
	if (rc) {
		fprintf(stderr, "nand_sim_open: %s (%d)\n", err, rc);
		exit(1);
	}
	return d;
}

/* preset PRESET in RAM; TIMED: the timing model on the virtual clock */
static inline struct nand_dev *dev_new(const char *preset, bool timed)
{
	struct nand_sim_config cfg = { .preset = preset, .timing = timed, .virtual_time = timed };
	return sim_open_ok(&cfg);
}

static inline void format_with(struct nand_dev *d, uint32_t sector, double op, uint32_t parity)
{
	char err[256];
	struct ftl_format_params fp = { .sector_size = sector, .op_percent = op,
					.parity_width = parity };
	int rc = ftl_format(d, &fp, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ftl_format: %s (%d)\n", err, rc);
		exit(1);
	}
}

/* 4096-byte sectors, OP % over-provisioning (0: the preset's), no parity */
static inline void format(struct nand_dev *d, double op)
{
	format_with(d, 4096, op, 0);
}

static inline struct ftl *open_with(struct nand_dev *d, const struct ftl_open_params *p)
{
	struct ftl *f;
	char err[256];
	int rc = ftl_open(d, p, &f, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ftl_open: %s (%d)\n", err, rc);
		exit(1);
	}
	return f;
}

static inline struct ftl *open_ok(struct nand_dev *d)
{
	return open_with(d, NULL);
}

/* preset PRESET in RAM (*D; TIMED: the timing model on the virtual clock),
 * formatted with 4 KiB sectors and the preset's over-provisioning, and the
 * FTL open on it as P says (NULL: the defaults) */
static inline struct ftl *dev_ftl(struct nand_dev **d, const char *preset, bool timed,
				  const struct ftl_open_params *p)
{
	*d = dev_new(preset, timed);
	format(*d, 0);
	return open_with(*d, p);
}

/* the FTL opened on D (formatted), which must succeed; *UNITS its units
 * and *VER a version for each (all 0: never written; close_free frees it) */
static inline struct ftl *open_units(struct nand_dev *d, uint64_t *units, uint32_t **ver)
{
	struct ftl *f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	*units = info.units;
	*ver = calloc(*units, sizeof **ver);
	CHECK(*ver);
	return f;
}

/*
 * The set-up most FTL tests start from: preset PRESET in RAM (TIMED: the
 * timing model on the virtual clock), formatted with 4 KiB sectors, OP %
 * over-provisioning and PARITY parity columns, the FTL open on it, its
 * info, its units (info.units) and ver[] (one version per unit, all 0:
 * never written).  The test owns it from fx_start to fx_end.
 */
struct fx {
	struct nand_dev *d;
	struct ftl *f;
	struct ftl_info info;
	uint64_t units;
	uint32_t *ver;
};

static inline struct fx fx_start(const char *preset, bool timed, double op, uint32_t parity)
{
	struct fx x;
	x.d = dev_new(preset, timed);
	format_with(x.d, 4096, op, parity);
	x.f = open_ok(x.d);
	ftl_get_info(x.f, &x.info);
	x.units = x.info.units;
	x.ver = calloc(x.units, sizeof *x.ver);
	CHECK(x.ver);
	return x;
}

/* a clean close, which must succeed, and an open again */
static inline void fx_reopen(struct fx *x)
{
	CHECK_RC(ftl_close(x->f));
	x->f = open_ok(x->d);
}

/* the FTL closed already: the device closed, ver[] freed */
static inline void fx_free(struct fx *x)
{
	nand_close(x->d);
	free(x->ver);
}

/* the end of a test: a clean close of F, which must succeed; D closed */
static inline void close_ok(struct ftl *f, struct nand_dev *d)
{
	CHECK_RC(ftl_close(f));
	nand_close(d);
}

/* close_ok, and VER freed */
static inline void close_free(struct ftl *f, struct nand_dev *d, uint32_t *ver)
{
	close_ok(f, d);
	free(ver);
}

static inline void fx_end(struct fx *x)
{
	close_free(x->f, x->d, x->ver);
}

static inline void write_unit(struct ftl *f, uint64_t u, uint32_t ver)
{
	uint8_t b[4096];
	fill(b, u, ver);
	CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
}

/* unit U reads its data at version VER (0: zeros) */
static inline void check_unit(struct ftl *f, uint64_t u, uint32_t ver)
{
	uint8_t b[4096], e[4096];
	int rc = ftl_read_sync(f, b, u * 4096, 4096);
	if (rc) {
		fprintf(stderr, "unit %" PRIu64 ": read failed (%s)\n", u, strerror(-rc));
		exit(1);
	}
	if (ver)
		fill(e, u, ver);
	else
		memset(e, 0, sizeof e);
	if (memcmp(b, e, sizeof b)) {
		fprintf(stderr, "unit %" PRIu64 ": wrong data (expected version %u)\n", u, ver);
		exit(1);
	}
}

/* every unit, 0 to UNITS - 1, written at version 1 (ver[u] = 1), and a
 * flush */
static inline void write_all(struct ftl *f, uint32_t *ver, uint64_t units)
{
	for (uint64_t u = 0; u < units; u++)
		write_unit(f, u, ver[u] = 1);
	CHECK_RC(ftl_flush_sync(f));
}

/* N writes: units 0.. in order while i < UNITS, then random ones (SEED);
 * ver[] counts the versions */
static inline void churn(struct ftl *f, uint32_t *ver, uint64_t units, uint64_t n, uint64_t *seed)
{
	uint8_t b[4096];
	for (uint64_t i = 0; i < n; i++) {
		uint64_t u = i < units ? i : t_rand(seed) % units;
		ver[u]++;
		fill(b, u, ver[u]);
		CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
	}
}

/* every unit reads its version's data; a unit with LOST[u] set must fail
 * with EIO, any other may when EIO_OK.  Returns the number of EIOs. */
static inline uint64_t verify_units(struct ftl *f, const uint32_t *ver, uint64_t units,
				    const uint8_t *lost, bool eio_ok)
{
	uint8_t b[4096], e[4096];
	uint64_t eio = 0;
	for (uint64_t u = 0; u < units; u++) {
		int rc = ftl_read_sync(f, b, u * 4096, 4096);
		if (lost && lost[u]) {
			if (rc != -EIO) {
				fprintf(stderr, "unit %" PRIu64 " should be lost, read gave %d\n", u, rc);
				exit(1);
			}
			eio++;
			continue;
		}
		if (rc == -EIO && eio_ok) {
			eio++;
			continue;
		}
		if (rc) {
			fprintf(stderr, "unit %" PRIu64 ": read failed (%s)\n", u, strerror(-rc));
			exit(1);
		}
		if (!ver[u])
			memset(e, 0, sizeof e);
		else
			fill(e, u, ver[u]);
		if (memcmp(b, e, 4096)) {
			fprintf(stderr, "unit %" PRIu64 " holds wrong data\n", u);
			exit(1);
		}
	}
	return eio;
}

static inline uint64_t verify(struct ftl *f, const uint32_t *ver, uint64_t units, bool eio_ok)
{
	return verify_units(f, ver, units, NULL, eio_ok);
}

static inline uint64_t verify_lost(struct ftl *f, const uint32_t *ver, uint64_t units,
				   const uint8_t *lost)
{
	return verify_units(f, ver, units, lost, false);
}

#endif
