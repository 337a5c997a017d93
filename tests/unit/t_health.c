/*
 * t_health - the health model (server/health.c): every reason from the
 * snapshot that causes it, at its level, with its figures and its action;
 * worst level first; thresholds from [server], overridden per [dimm]; the
 * server's state is the worst of its ioDimms'; a healthy snapshot is ok
 * with no reason at all.  DRBD (server/drbd.c): /proc/drbd as DRBD 8.4
 * prints it parsed, the nbdtab -> nbdN -> drbdM chain found in a tree made
 * like the system's, and each state of the resource as its reason.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/flashd.h"
#include "tests/unit/t.h"

/* A healthy, attached ioDimm as a snapshot shows it. */
static void healthy(struct dimm_status *st)
{
	memset(st, 0, sizeof *st);
	snprintf(st->name, sizeof st->name, "dimm0");
	snprintf(st->image, sizeof st->image, "/var/lib/flashd/dimm0.img");
	snprintf(st->state, sizeof st->state, "online");
	st->answered = st->attached = true;
	st->info.state = FTL_STATE_ONLINE;
	st->info.thermal = FTL_THERMAL_OK;
	st->info.temp_mc = 40000;
	st->info.temp_max_mc = 45000;
	st->stats.reserve_percent = 100;
	st->stats.rated_pe_cycles = 5000;
	st->stats.erase_avg = 10;
	st->stats.endurance_used_percent = 0.2;
	st->stats.lost_first = 1;
	st->stats.lost_last = 0;
}

static const struct health_limits defaults = { HEALTH_RESERVES_WARN_DEFAULT,
					       HEALTH_ENDURANCE_WARN_DEFAULT,
					       HEALTH_TEMPERATURE_WARN_DEFAULT, 7 };

/* the item of reason r, or NULL */
static const struct health_item *find(const struct health *h, enum health_reason r)
{
	for (int i = 0; i < h->n; i++)
		if (h->item[i].reason == r)
			return &h->item[i];
	return NULL;
}

/* h has reason r at level, its message holds text, it has an action
 * holding act (NULL: any non-empty one) */
static void expect(const struct health *h, enum health_state state, enum health_reason r,
		   enum health_state level, const char *text, const char *act)
{
	const struct health_item *it = find(h, r);
	if (!it || it->level != level || h->state != state || !strstr(it->msg, text) ||
	    !it->action[0] || (act && !strstr(it->action, act))) {
		fprintf(stderr, "want %s with %s (%s) containing '%s', action '%s'; got %s:\n",
			health_state_name(state), health_reason_name(r), health_state_name(level), text,
			act ? act : "(any)", health_state_name(h->state));
		for (int i = 0; i < h->n; i++)
			fprintf(stderr, "  %s (%s): %s -> %s\n", health_reason_name(h->item[i].reason),
				health_state_name(h->item[i].level), h->item[i].msg, h->item[i].action);
		exit(1);
	}
}

/* ST evaluated with the default limits into H: its state LEVEL, for
 * reason R at that level (expect says the rest) */
static void eval_expect(const struct dimm_status *st, struct health *h, enum health_state level,
			enum health_reason r, const char *text, const char *act)
{
	health_eval(st, &defaults, h);
	expect(h, level, r, level, text, act);
}

/*
 * /proc/drbd of DRBD 8.4.11 (Debian 12's drbd.ko) on the two nodes of
 * tests/vm/test-drbd.sh: the minor lines as that test logged them, the
 * progress lines in the format of 8.4's drbd_proc.c.
 */
static const char proc_synced[] =
	"version: 8.4.11 (api:1/proto:86-101)\n"
	"srcversion: F73C670A7EC572DB9CF3E5B \n"
	" 0: cs:Connected ro:Primary/Secondary ds:UpToDate/UpToDate C r-----\n"
	"    ns:1048576 nr:0 dw:24576 dr:1049620 al:8 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0\n";
static const char proc_peer_gone[] =
	"version: 8.4.11 (api:1/proto:86-101)\n"
	"srcversion: F73C670A7EC572DB9CF3E5B \n"
	" 0: cs:WFConnection ro:Primary/Unknown ds:UpToDate/DUnknown C r-----\n"
	"    ns:0 nr:0 dw:24576 dr:2080 al:8 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:24576\n";
static const char proc_resync[] =
	"version: 8.4.11 (api:1/proto:86-101)\n"
	"srcversion: F73C670A7EC572DB9CF3E5B \n"
	" 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent C r-----\n"
	"    ns:13516 nr:0 dw:0 dr:14560 al:8 bm:0 lo:0 pe:2 ua:0 ap:0 ep:1 wo:f oos:88884\n"
	"\t[==>.................] sync'ed: 13.4% (88884/102400)K\n"
	"\tfinish: 0:00:05 speed: 16,896 (16,896) K/sec\n"
	" 1: cs:Unconfigured\n"
	" 2: cs:StandAlone ro:Secondary/Unknown ds:Outdated/DUnknown   r-----\n"
	"    ns:0 nr:0 dw:0 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0\n";
static const char proc_diskless[] =
	"version: 8.4.11 (api:1/proto:86-101)\n"
	"srcversion: F73C670A7EC572DB9CF3E5B \n"
	" 0: cs:Connected ro:Primary/Secondary ds:Diskless/UpToDate C r-----\n";
static const char proc_peer_diskless[] =
	"version: 8.4.11 (api:1/proto:86-101)\n"
	"srcversion: F73C670A7EC572DB9CF3E5B \n"
	" 0: cs:Connected ro:Primary/Secondary ds:UpToDate/Diskless C r-----\n";

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f && fputs(text, f) >= 0 && !fclose(f));
}

/* a healthy snapshot whose export is the lower device of r0, as /proc/drbd
 * (text) says */
static void drbd_snapshot(struct dimm_status *st, const char *text)
{
	healthy(st);
	CHECK(drbd_parse_proc(text, 0, &st->drbd));
	st->drbd.lower = true;
	st->drbd.minor = 0;
	snprintf(st->drbd.nbd, sizeof st->drbd.nbd, "nbd0");
	snprintf(st->drbd.resource, sizeof st->drbd.resource, "r0");
}

static void check_drbd(void)
{
	struct drbd_lower l;
	struct dimm_status st;
	struct health h;

	/* ---- /proc/drbd ---- */
	CHECK(drbd_parse_proc(proc_synced, 0, &l));
	CHECK(!strcmp(l.cstate, "Connected") && !strcmp(l.role, "Primary") &&
	      !strcmp(l.peer_role, "Secondary") && !strcmp(l.disk, "UpToDate") &&
	      !strcmp(l.peer_disk, "UpToDate") && !strcmp(l.protocol, "C"));
	CHECK_EQ(l.sync_permille, -1);
	CHECK(!l.sync_finish[0]);
	CHECK(drbd_parse_proc(proc_resync, 0, &l));
	CHECK(!strcmp(l.cstate, "SyncSource") && !strcmp(l.peer_disk, "Inconsistent"));
	CHECK_EQ(l.sync_permille, 134);
	CHECK(!strcmp(l.sync_finish, "0:00:05"));
	/* the next minors: their lines are theirs, not minor 0's */
	CHECK(drbd_parse_proc(proc_resync, 1, &l));
	CHECK(!strcmp(l.cstate, "Unconfigured") && !l.role[0] && !l.disk[0]);
	CHECK(drbd_parse_proc(proc_resync, 2, &l));
	CHECK(!strcmp(l.cstate, "StandAlone") && !strcmp(l.disk, "Outdated") && !l.protocol[0]);
	CHECK_EQ(l.sync_permille, -1);
	CHECK(!drbd_parse_proc(proc_synced, 1, &l));
	CHECK(!drbd_parse_proc("", 0, &l));

	/* ---- nbdtab -> nbd0 -> drbd0, in a tree like the system's ---- */
	char root[] = "/tmp/t_health-drbd.XXXXXX", p[512];
	CHECK(mkdtemp(root));
	const char *dirs[] = { "etc", "sys", "sys/block", "sys/block/nbd0", "sys/block/nbd0/holders",
			       "sys/block/nbd0/holders/drbd0", "dev", "dev/drbd", "dev/drbd/by-res" };
	for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
		snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
		CHECK(!mkdir(p, 0755));
	}
	snprintf(p, sizeof p, "%s/etc/nbdtab", root);
	put(p, "# deploy/drbd/nbdtab\n"
	       "nbd1 192.0.2.1 dimm0\n"
	       "nbd0 /run/flashd/flashd.sock dimm0 unix,timeout=10\n");
	snprintf(p, sizeof p, "%s/dev/drbd/by-res/r0", root);
	CHECK(!symlink("../../drbd0", p));
	/* not connected yet: no /sys/block/nbd0/pid */
	CHECK(!drbd_lookup(root, proc_synced, "/run/flashd/flashd.sock", "dimm0", &l));
	CHECK(!l.lower);
	snprintf(p, sizeof p, "%s/sys/block/nbd0/pid", root);
	put(p, "812\n");
	CHECK(drbd_lookup(root, proc_synced, "/run/flashd/flashd.sock", "dimm0", &l));
	CHECK(l.lower && l.minor == 0 && !strcmp(l.nbd, "nbd0") && !strcmp(l.resource, "r0"));
	CHECK(!strcmp(l.role, "Primary") && !strcmp(l.cstate, "Connected"));
	/* another flashd's socket, another export, DRBD without minor 0 */
	CHECK(!drbd_lookup(root, proc_synced, "/run/other/flashd.sock", "dimm0", &l));
	CHECK(!drbd_lookup(root, proc_synced, "/run/flashd/flashd.sock", "dimm1", &l));
	/* DRBD 9's /proc/drbd has no minor lines: the chain, states unknown */
	CHECK(drbd_lookup(root, "version: 9.2.4 (api:2/proto:86-122)\n", "/run/flashd/flashd.sock",
			  "dimm0", &l));
	CHECK(l.lower && !strcmp(l.resource, "r0") && !l.cstate[0] && !l.role[0]);
	healthy(&st);
	st.drbd = l;
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.n, 0);
	/* a resource of volumes: by-res/RES/VOL */
	snprintf(p, sizeof p, "%s/dev/drbd/by-res/r0", root);
	CHECK(!unlink(p) && !mkdir(p, 0755));
	snprintf(p, sizeof p, "%s/dev/drbd/by-res/r0/0", root);
	CHECK(!symlink("../../../drbd0", p));
	drbd_resource_name(root, 0, l.resource, sizeof l.resource);
	CHECK(!strcmp(l.resource, "r0"));
	drbd_resource_name(root, 1, l.resource, sizeof l.resource);
	CHECK(!l.resource[0]);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	CHECK(!system(cmd));

	/* ---- the reasons ---- */
	drbd_snapshot(&st, proc_synced);
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);
	CHECK_EQ(h.n, 0);
	/* the primary's peer is gone (VM killed): the survivor, promoted */
	drbd_snapshot(&st, proc_peer_gone);
	eval_expect(&st, &h, HEALTH_WARNING, HR_DRBD_DISCONNECTED,
		    "DRBD resource r0 disconnected from its peer (cs:WFConnection, this node "
		    "Primary): writes are not replicated",
		    "check the peer node and the replication link");
	CHECK_EQ(h.n, 1); /* DUnknown: no peer disk reason besides */
	drbd_snapshot(&st, proc_resync);
	eval_expect(&st, &h, HEALTH_WARNING, HR_DRBD_RESYNC,
		    "DRBD resource r0 resyncing to the peer (cs:SyncSource): 13.4 % done, about "
		    "0:00:05 left", "let it finish");
	CHECK_EQ(h.n, 1);
	CHECK(drbd_parse_proc(proc_resync, 2, &st.drbd));
	eval_expect(&st, &h, HEALTH_WARNING, HR_DRBD_DISCONNECTED, "(cs:StandAlone, this node "
		    "Secondary)", "'drbdadm connect r0'");
	expect(&h, HEALTH_WARNING, HR_DRBD_DISK, HEALTH_WARNING, "this node's disk is Outdated",
	       "'drbdadm connect r0'");
	/* flashd killed on the primary: DRBD detached its disk */
	drbd_snapshot(&st, proc_diskless);
	eval_expect(&st, &h, HEALTH_WARNING, HR_DRBD_DISK, "this node's disk is Diskless "
		    "(ds:Diskless/UpToDate): DRBD does not use this ioDimm", "'drbdadm adjust r0'");
	CHECK_EQ(h.n, 1);
	drbd_snapshot(&st, proc_peer_diskless);
	eval_expect(&st, &h, HEALTH_WARNING, HR_DRBD_PEER_DISK, "the peer's disk is Diskless",
		    "on the peer");
	CHECK_EQ(h.n, 1);
	/* worse reasons of the card come first; DRBD's never make it worse
	 * than warning */
	drbd_snapshot(&st, proc_peer_gone);
	st.info.state = FTL_STATE_WRITE_REDUCED;
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_DEGRADED);
	CHECK_EQ(h.item[0].reason, HR_WRITE_REDUCED);
	CHECK(find(&h, HR_DRBD_DISCONNECTED));
	/* not a lower device: nothing, whatever its fields say */
	drbd_snapshot(&st, proc_peer_gone);
	st.drbd.lower = false;
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.n, 0);
}

/* A healthy snapshot is ok with no reason; every reason and level has a name. */
static void check_ok(void)
{
	struct dimm_status st;
	struct health h;

	/* healthy: ok, nothing to say */
	healthy(&st);
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);
	CHECK_EQ(h.n, 0);

	/* the names every view prints */
	CHECK(!strcmp(health_state_name(HEALTH_DEGRADED), "degraded"));
	for (int r = 0; r < HEALTH_NREASONS; r++) {
		CHECK(strcmp(health_reason_name(r), "?") != 0);
		for (int q = 0; q < r; q++)
			CHECK(strcmp(health_reason_name(r), health_reason_name(q)) != 0);
	}
}

/* Each warning from the figure that causes it, and not at its threshold. */
static void check_warnings(void)
{
	struct dimm_status st;
	struct health h;

	/* ---- warnings ---- */
	healthy(&st);
	st.stats.reserve_percent = 9.5;
	st.stats.blocks_bad_grown = 12;
	eval_expect(&st, &h, HEALTH_WARNING, HR_RESERVES_LOW, "reserves 9.5 %", "replace the card");
	CHECK(strstr(h.item[0].msg, "12 grown bad blocks"));
	st.stats.reserve_percent = 10;  /* at the threshold: not below it */
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);

	healthy(&st);
	st.stats.endurance_used_percent = 80;
	st.stats.erase_avg = 4000;
	eval_expect(&st, &h, HEALTH_WARNING, HR_ENDURANCE_HIGH, "endurance 80.0 % used", "replace");
	st.stats.endurance_used_percent = 79.9;
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);

	healthy(&st);
	st.info.thermal = FTL_THERMAL_THROTTLED;
	st.info.temp_mc = 80000;
	eval_expect(&st, &h, HEALTH_WARNING, HR_THERMAL_THROTTLED, "80.0 C", "cooling");
	CHECK(!find(&h, HR_TEMPERATURE_HIGH)); /* one reason for one cause */

	healthy(&st);
	st.info.temp_mc = 76000;
	eval_expect(&st, &h, HEALTH_WARNING, HR_TEMPERATURE_HIGH, "76.0 C", "cooling");
	st.info.temp_mc = FTL_TEMP_NONE;  /* no sensor: nothing to say */
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);

	healthy(&st);
	st.info.parity_width = 1;
	st.stats.dies_failed = 1;
	st.stats.rebuild_bands_left = 7;
	st.stats.rebuild_bands_total = 20;
	eval_expect(&st, &h, HEALTH_WARNING, HR_REBUILDING, "7 of 20 bands left", "replace");
	st.stats.rebuild_bands_left = 0;
	eval_expect(&st, &h, HEALTH_WARNING, HR_DIE_REBUILT, "rebuilt from parity", "replace");
	CHECK(!find(&h, HR_REBUILDING) && !find(&h, HR_DIES_LOST));

	healthy(&st);
	st.stats.lost_units = 3;
	st.stats.lost_first = 10;
	st.stats.lost_last = 12;
	eval_expect(&st, &h, HEALTH_WARNING, HR_LOST_UNITS, "within bytes 40960 to 53247", "backup");
	st.stats.lost_first = 1;  /* a count kept across a reopen, without the range */
	st.stats.lost_last = 0;
	eval_expect(&st, &h, HEALTH_WARNING, HR_LOST_UNITS, "3 units", "backup");

	healthy(&st);
	st.info.checkpoint_damaged = true;
	eval_expect(&st, &h, HEALTH_WARNING, HR_CHECKPOINT_DAMAGED, "rebuilt from the whole log",
		    "flashctl checkpoint dimm0");
}

/* Each reason at the degraded level, and the warnings it stands for. */
static void check_degraded(void)
{
	struct dimm_status st;
	struct health h;

	/* ---- degraded ---- */
	healthy(&st);
	st.info.state = FTL_STATE_WRITE_REDUCED;
	st.stats.reserve_percent = 4;
	snprintf(st.info.health, sizeof st.info.health, "reserves 4.0%% (3 spare blocks left)");
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_WRITE_REDUCED, "reserves 4.0%", "replace the card");
	CHECK(!find(&h, HR_RESERVES_LOW)); /* the state says it */

	healthy(&st);
	st.info.state = FTL_STATE_READONLY;
	st.stats.reserve_percent = 0;
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_READ_ONLY, "worn out", "copy the data off");
	st.readonly = true;  /* configured read-only: as asked, nothing wrong */
	st.stats.reserve_percent = 100;
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);

	healthy(&st);
	st.info.state = FTL_STATE_NO_SPACE;
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_NO_SPACE, "ENOSPC", "free space");

	healthy(&st);
	st.info.thermal = FTL_THERMAL_STOPPED;
	st.info.temp_mc = 86000;
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_THERMAL_STOP, "thermal stop (at 85 C), now 86.0 C",
		    "cooling");
	CHECK(!find(&h, HR_TEMPERATURE_HIGH) && !find(&h, HR_THERMAL_THROTTLED));

	healthy(&st);
	st.stats.dies_failed = 1;   /* no parity */
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_DIES_LOST, "no parity", "replace the card");
	st.info.parity_width = 1;
	st.stats.dies_failed = 2;   /* beyond one parity die */
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_DIES_LOST, "2 dies failed, more than", "replace");
	CHECK(!find(&h, HR_DIE_REBUILT) && !find(&h, HR_REBUILDING));

	healthy(&st);
	st.info.parity_width = 1;
	st.stats.parity_stripes_unprotected = 4;
	st.stats.refresh_marked = 2;
	st.stats.refresh_collected = 1;
	eval_expect(&st, &h, HEALTH_DEGRADED, HR_PARITY_LOST, "4 stripes without parity", "GC");
	st.stats.refresh_collected = 2;  /* rewritten */
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);
}

/* Failed ioDimms, then one not attached: busy, detached, not answering. */
static void check_failed(void)
{
	struct dimm_status st;
	struct health h;

	/* ---- failed ---- */
	healthy(&st);
	st.info.state = FTL_STATE_FAILED;
	st.info.error = -EIO;
	eval_expect(&st, &h, HEALTH_FAILED, HR_FTL_FAILED, "Input/output error",
		    "flashctl recover /var/lib/flashd/dimm0.img");
	st.info.error = -ENOSPC;
	eval_expect(&st, &h, HEALTH_FAILED, HR_FTL_FAILED, "No space", "free space on the file system");

	memset(&st, 0, sizeof st);
	snprintf(st.name, sizeof st.name, "dimm1");
	snprintf(st.image, sizeof st.image, "/x/dimm1.img");
	snprintf(st.state, sizeof st.state, "failed");
	snprintf(st.error, sizeof st.error, "dimm1.img: Permission denied");
	eval_expect(&st, &h, HEALTH_FAILED, HR_OPEN_FAILED, "Permission denied", "flashctl attach dimm1");
	CHECK(strstr(h.item[0].action, "flashctl recover /x/dimm1.img"));

	/* ---- not attached, no figures ---- */
	snprintf(st.state, sizeof st.state, "detached");
	st.error[0] = 0;
	eval_expect(&st, &h, HEALTH_OK, HR_DETACHED, "detached", "flashctl attach dimm1");
	snprintf(st.state, sizeof st.state, "formatting");
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_OK);
	CHECK(find(&h, HR_BUSY) && strstr(h.item[0].msg, "formatting"));
	snprintf(st.state, sizeof st.state, "attached");  /* the thread did not answer */
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_WARNING);
	CHECK(find(&h, HR_NO_ANSWER));
}

/* Several reasons at once: worst level first, all of them kept. */
static void check_several(void)
{
	struct dimm_status st;
	struct health h;

	/* ---- several at once: worst level first, all of them kept ---- */
	healthy(&st);
	st.stats.lost_units = 1;
	st.stats.lost_first = st.stats.lost_last = 5;
	st.info.thermal = FTL_THERMAL_STOPPED;
	st.info.temp_mc = 90000;
	st.stats.endurance_used_percent = 95;
	st.info.checkpoint_damaged = true;
	health_eval(&st, &defaults, &h);
	CHECK_EQ(h.state, HEALTH_DEGRADED);
	CHECK_EQ(h.n, 4);
	CHECK_EQ(h.item[0].reason, HR_THERMAL_STOP);
	for (int i = 1; i < h.n; i++)
		CHECK(h.item[i].level <= h.item[i - 1].level);
}

/* Thresholds from the [server] keys, overridden per [dimm]. */
static void check_thresholds(void)
{
	struct dimm_status st;
	struct health h;
	/* ---- thresholds: [server] keys, a [dimm] overrides ---- */
	struct server_cfg cfg;
	struct dimm_cfg dc;
	struct health_limits lim;
	memset(&cfg, 0, sizeof cfg);
	memset(&dc, 0, sizeof dc);
	health_limits_of(&cfg, &dc, &lim);
	CHECK(lim.reserves_warn == 10 && lim.endurance_warn == 80 && lim.temperature_warn == 75);
	cfg.health.reserves_warn = 30;
	cfg.health.set = HL_RESERVES;
	dc.health.endurance_warn = 50;
	dc.health.temperature_warn = 0;
	dc.health.set = HL_ENDURANCE | HL_TEMPERATURE;
	health_limits_of(&cfg, &dc, &lim);
	CHECK(lim.reserves_warn == 30 && lim.endurance_warn == 50 && lim.temperature_warn == 0);
	healthy(&st);
	st.stats.reserve_percent = 25;
	st.stats.endurance_used_percent = 60;
	health_eval(&st, &lim, &h);
	CHECK(find(&h, HR_RESERVES_LOW) && find(&h, HR_ENDURANCE_HIGH) && find(&h, HR_TEMPERATURE_HIGH));
	dc.health.set = 0;  /* another ioDimm: the server's */
	health_limits_of(&cfg, &dc, &lim);
	CHECK(lim.reserves_warn == 30 && lim.endurance_warn == 80);
}

/* The server's state: the worst of its ioDimms'. */
static void check_server(void)
{
	/* ---- the server: the worst of its ioDimms ---- */
	struct health all[3];
	memset(all, 0, sizeof all);
	CHECK_EQ(health_worst(all, 3), HEALTH_OK);
	all[1].state = HEALTH_WARNING;
	CHECK_EQ(health_worst(all, 3), HEALTH_WARNING);
	all[2].state = HEALTH_FAILED;
	all[0].state = HEALTH_DEGRADED;
	CHECK_EQ(health_worst(all, 3), HEALTH_FAILED);
	CHECK_EQ(health_worst(all, 0), HEALTH_OK);
}

int main(void)
{
	check_ok();
	check_warnings();
	check_degraded();
	check_failed();
	check_several();
	check_thresholds();
	check_server();
	check_drbd();

	printf("t_health: every reason, levels, order, thresholds and the server's state checked; "
	       "DRBD's /proc/drbd, lower device lookup and reasons too\n");
	return 0;
}
