/*
 * server/health.c - the health model (flashd.h, "health"): from a snapshot
 * of an ioDimm (its main state, FTL info and statistics, the DRBD
 * resource it is the lower device of) and its thresholds to a state and its reasons, each with the action to take.
 *
 * Every view renders what health_eval returns (ctl_*.c: status text and JSON,
 * /metrics, the exit status flashctl status derives from them; monitor.c:
 * systemd's STATUS=, the log, /v1/history), so they cannot disagree.  Pure:
 * no locks, no I/O, no allocation; O(reasons).  tests/unit/t_health.c
 * checks every reason and the order of the states.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "server/flashd.h"

const char *health_state_name(enum health_state s)
{
	switch (s) {
	case HEALTH_OK: return "ok";
	case HEALTH_WARNING: return "warning";
	case HEALTH_DEGRADED: return "degraded";
	case HEALTH_FAILED: return "failed";
	}
	return "?";
}

const char *health_reason_name(enum health_reason r)
{
	switch (r) {
	case HR_OPEN_FAILED: return "open_failed";
	case HR_FTL_FAILED: return "ftl_failed";
	case HR_READ_ONLY: return "read_only";
	case HR_NO_SPACE: return "no_space";
	case HR_WRITE_REDUCED: return "write_reduced";
	case HR_THERMAL_STOP: return "thermal_stop";
	case HR_DIES_LOST: return "dies_lost";
	case HR_PARITY_LOST: return "parity_lost";
	case HR_RESERVES_LOW: return "reserves_low";
	case HR_ENDURANCE_HIGH: return "endurance_high";
	case HR_THERMAL_THROTTLED: return "thermal_throttled";
	case HR_TEMPERATURE_HIGH: return "temperature_high";
	case HR_REBUILDING: return "rebuilding";
	case HR_DIE_REBUILT: return "die_rebuilt";
	case HR_LOST_UNITS: return "lost_units";
	case HR_CHECKPOINT_DAMAGED: return "checkpoint_damaged";
	case HR_NO_ANSWER: return "no_answer";
	case HR_DRBD_DISCONNECTED: return "drbd_disconnected";
	case HR_DRBD_RESYNC: return "drbd_resync";
	case HR_DRBD_DISK: return "drbd_disk";
	case HR_DRBD_PEER_DISK: return "drbd_peer_disk";
	case HR_DETACHED: return "detached";
	case HR_BUSY: return "busy";
	}
	return "?";
}

void health_limits_of(const struct server_cfg *cfg, const struct dimm_cfg *d,
		      struct health_limits *lim)
{
	const struct health_limits *s = &cfg->health, *o = d ? &d->health : NULL;
	lim->reserves_warn = o && (o->set & HL_RESERVES) ? o->reserves_warn :
			     s->set & HL_RESERVES ? s->reserves_warn : HEALTH_RESERVES_WARN_DEFAULT;
	lim->endurance_warn = o && (o->set & HL_ENDURANCE) ? o->endurance_warn :
			      s->set & HL_ENDURANCE ? s->endurance_warn : HEALTH_ENDURANCE_WARN_DEFAULT;
	lim->temperature_warn = o && (o->set & HL_TEMPERATURE) ? o->temperature_warn :
				s->set & HL_TEMPERATURE ? s->temperature_warn :
							  HEALTH_TEMPERATURE_WARN_DEFAULT;
	lim->set = HL_RESERVES | HL_ENDURANCE | HL_TEMPERATURE;
}

static void add(struct health *h, enum health_reason r, enum health_state level, const char *action,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void add(struct health *h, enum health_reason r, enum health_state level, const char *action,
		const char *fmt, ...)
{
	if (h->n >= HEALTH_NREASONS)
		return;
	/* worst level first, in the order of the checks within a level */
	int at = h->n;
	while (at > 0 && h->item[at - 1].level < level)
		at--;
	memmove(&h->item[at + 1], &h->item[at], (size_t)(h->n - at) * sizeof h->item[0]);
	struct health_item *it = &h->item[at];
	h->n++;
	it->reason = r;
	it->level = level;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(it->msg, sizeof it->msg, fmt, ap);
	va_end(ap);
	snprintf(it->action, sizeof it->action, "%s", action);
	if (level > h->state)
		h->state = level;
}

/* The reasons a working FTL gives (answered, attached). */
static void eval_ftl(const struct dimm_status *st, const struct health_limits *lim, struct health *h)
{
	const struct ftl_info *fi = &st->info;
	const struct ftl_stats *s = &st->stats;
	char act[512];

	if (fi->state == FTL_STATE_FAILED) {
		if (fi->error == -ENOSPC)
			snprintf(act, sizeof act, "free space on the file system that holds %.80s, then "
				 "'flashctl detach %.20s' and 'flashctl attach %.20s' (recovery from the media)",
				 st->image, st->name, st->name);
		else
			snprintf(act, sizeof act, "'flashctl detach %.20s' and 'flashctl attach %.20s' "
				 "(recovery from the media); if that fails, 'flashctl recover %.80s', and "
				 "replace the card",
				 st->name, st->name, st->image);
		add(h, HR_FTL_FAILED, HEALTH_FAILED, act, "the FTL stopped after an error (%s): every "
		    "request fails", fi->error ? strerror(-fi->error) : "unknown");
		return;
	}
	bool reserves_state = false;
	if (fi->state == FTL_STATE_READONLY && !st->readonly) {
		reserves_state = true;
		add(h, HR_READ_ONLY, HEALTH_DEGRADED, "copy the data off and replace the card: "
		    "writes fail, every unit stays readable",
		    "worn out, read-only: %s", fi->health[0] ? fi->health : "no spare block left");
	} else if (fi->state == FTL_STATE_NO_SPACE) {
		reserves_state = true;
		add(h, HR_NO_SPACE, HEALTH_DEGRADED, "free space (trim what is unused: fstrim, "
		    "blkdiscard) or copy the data off and reformat with more over-provisioning; if bad "
		    "blocks ate the reserves, replace the card",
		    "no room for writes: they fail with ENOSPC (%llu usable blocks, %llu needed)",
		    (unsigned long long)(s->blocks_total - s->blocks_bad),
		    (unsigned long long)s->blocks_needed);
	} else if (fi->state == FTL_STATE_WRITE_REDUCED) {
		reserves_state = true;
		add(h, HR_WRITE_REDUCED, HEALTH_DEGRADED, "replace the card soon; copy the data off "
		    "(writes are throttled to about 10 MB/s, at 0 % reserves it becomes read-only)",
		    "write-reduced: %s", fi->health[0] ? fi->health : "reserves low");
	}
	if (fi->thermal == FTL_THERMAL_STOPPED)
		add(h, HR_THERMAL_STOP, HEALTH_DEGRADED, "check cooling: airflow, fans, the slot "
		    "and its neighbours",
		    "thermal stop (at %d C), now %.1f C: host I/O held until it cools below %d C",
		    FTL_THERMAL_STOP_MC / 1000, fi->temp_mc / 1000.0, FTL_THERMAL_RESUME_MC / 1000);
	if (s->dies_failed > fi->parity_width) {
		if (fi->parity_width)
			add(h, HR_DIES_LOST, HEALTH_DEGRADED, "copy the data off and replace the card",
			    "%u dies failed, more than the %u parity die per stripe covers: data in "
			    "stripes with two dead dies is lost (reads of it fail with EIO)",
			    s->dies_failed, fi->parity_width);
		else
			add(h, HR_DIES_LOST, HEALTH_DEGRADED, "copy the data off and replace the card",
			    "%u die%s failed and the format has no parity: the data on %s is lost "
			    "(reads of it fail with EIO)", s->dies_failed, s->dies_failed == 1 ? "" : "s",
			    s->dies_failed == 1 ? "it" : "them");
	} else if (s->dies_failed && s->rebuild_bands_left) {
		add(h, HR_REBUILDING, HEALTH_WARNING, "keep the card in service until the rebuild "
		    "ends, then plan to replace it (a second dead die in a stripe before that loses "
		    "data)",
		    "%u die%s failed: rebuilding from parity onto the other dies, %u of %u bands left",
		    s->dies_failed, s->dies_failed == 1 ? "" : "s", s->rebuild_bands_left,
		    s->rebuild_bands_total);
	} else if (s->dies_failed) {
		add(h, HR_DIE_REBUILT, HEALTH_WARNING, "plan to replace the card: it runs on fewer "
		    "dies",
		    "%u die%s failed; %s data was rebuilt from parity onto the other dies",
		    s->dies_failed, s->dies_failed == 1 ? "" : "s", s->dies_failed == 1 ? "its" : "their");
	}
	if (fi->parity_width && s->parity_stripes_unprotected &&
	    s->refresh_marked > s->refresh_collected)
		add(h, HR_PARITY_LOST, HEALTH_DEGRADED, "keep writes going (GC rewrites those bands); "
		    "if it comes back, replace the card",
		    "%llu stripes without parity (a parity block failed): a second error there loses "
		    "data until GC has rewritten their bands", (unsigned long long)s->parity_stripes_unprotected);
	if (!reserves_state && s->reserve_percent < lim->reserves_warn)
		add(h, HR_RESERVES_LOW, HEALTH_WARNING, "plan to replace the card: at 5 % reserves "
		    "writes are throttled, at 0 % it becomes read-only",
		    "reserves %.1f %% (warning below %g %%): %llu grown bad blocks", s->reserve_percent,
		    lim->reserves_warn, (unsigned long long)s->blocks_bad_grown);
	if (s->rated_pe_cycles && s->endurance_used_percent >= lim->endurance_warn)
		add(h, HR_ENDURANCE_HIGH, HEALTH_WARNING, "plan to replace the card: blocks fail more "
		    "and more past the rated cycles",
		    "endurance %.1f %% used (warning from %g %%): average erase count %.0f of %u rated",
		    s->endurance_used_percent, lim->endurance_warn, s->erase_avg, s->rated_pe_cycles);
	if (fi->thermal == FTL_THERMAL_THROTTLED)
		add(h, HR_THERMAL_THROTTLED, HEALTH_WARNING, "check cooling: airflow, fans, the slot "
		    "and its neighbours",
		    "hot: %.1f C (throttle at %d C): host writes paced to about 40 MB/s",
		    fi->temp_mc / 1000.0, FTL_THERMAL_THROTTLE_MC / 1000);
	else if (fi->thermal == FTL_THERMAL_OK && fi->temp_mc != FTL_TEMP_NONE &&
		 fi->temp_mc >= lim->temperature_warn * 1000)
		add(h, HR_TEMPERATURE_HIGH, HEALTH_WARNING, "check cooling: airflow, fans, the slot "
		    "and its neighbours",
		    "temperature %.1f C (warning from %g C; writes are throttled at %d C)",
		    fi->temp_mc / 1000.0, lim->temperature_warn, FTL_THERMAL_THROTTLE_MC / 1000);
	if (s->lost_units) {
		if (s->lost_first <= s->lost_last)
			add(h, HR_LOST_UNITS, HEALTH_WARNING, "restore those bytes from a backup (a "
			    "write over a lost unit makes it readable again)",
			    "%llu units (4 KiB) lost to media errors, within bytes %llu to %llu: reads of "
			    "them fail with EIO", (unsigned long long)s->lost_units,
			    (unsigned long long)(s->lost_first * FTL_UNIT_SIZE),
			    (unsigned long long)(s->lost_last * FTL_UNIT_SIZE + FTL_UNIT_SIZE - 1));
		else
			add(h, HR_LOST_UNITS, HEALTH_WARNING, "restore what reads EIO from a backup (a "
			    "write over a lost unit makes it readable again)",
			    "%llu units (4 KiB) lost to media errors: reads of them fail with EIO",
			    (unsigned long long)s->lost_units);
	}
	if (fi->checkpoint_damaged) {
		snprintf(act, sizeof act, "'flashctl checkpoint %.40s' writes a new one; if it "
			 "happens again, look at the media errors (flashctl status -a %.40s)", st->name,
			 st->name);
		add(h, HR_CHECKPOINT_DAMAGED, HEALTH_WARNING, act, "the newest checkpoint was "
		    "damaged: the map was rebuilt from the whole log at open");
	}
}

static bool one_of(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (!strcmp(s, *set))
			return true;
	return false;
}

/*
 * The reasons of a DRBD lower device (st->drbd, drbd.c): the pair lost
 * its redundancy for now.  Warnings only: this ioDimm serves; it is the
 * second copy that is missing or behind (deploy/drbd/README.md, "Health").
 */
static void eval_drbd(const struct dimm_status *st, struct health *h)
{
	static const char *const resync[] = { "SyncSource", "SyncTarget", "PausedSyncS", "PausedSyncT",
		"StartingSyncS", "StartingSyncT", "WFBitMapS", "WFBitMapT", "WFSyncUUID", NULL };
	static const char *const connected[] = { "Connected", "VerifyS", "VerifyT", NULL };
	const struct drbd_lower *l = &st->drbd;
	char res[96], act[512];
	if (!l->lower || !l->cstate[0])
		return; /* DRBD 9's /proc/drbd says nothing: no claim */
	if (l->resource[0])
		snprintf(res, sizeof res, "DRBD resource %.60s", l->resource);
	else
		snprintf(res, sizeof res, "DRBD device /dev/drbd%d", l->minor);
	const char *rn = l->resource[0] ? l->resource : "all";
	bool syncing = one_of(l->cstate, resync);
	if (syncing) {
		bool target = l->cstate[strlen(l->cstate) - 1] == 'T';
		char done[64] = "";
		if (l->sync_permille >= 0)
			snprintf(done, sizeof done, ": %.1f %% done%s%s%s", l->sync_permille / 10.0,
				 l->sync_finish[0] ? ", about " : "", l->sync_finish,
				 l->sync_finish[0] ? " left" : "");
		snprintf(act, sizeof act, "let it finish (cat /proc/drbd shows the progress)%s%s%s",
			 !strncmp(l->cstate, "Paused", 6) ? "; it is paused: 'drbdadm resume-sync " : "",
			 !strncmp(l->cstate, "Paused", 6) ? rn : "", !strncmp(l->cstate, "Paused", 6) ? "'" : "");
		add(h, HR_DRBD_RESYNC, HEALTH_WARNING, act, "%s resyncing %s the peer (cs:%s)%s: %s", res,
		    target ? "from" : "to", l->cstate, done,
		    target ? "this node's copy is not usable alone until it ends"
			   : "the peer's copy is not usable alone until it ends");
	} else if (!one_of(l->cstate, connected)) {
		if (!strcmp(l->cstate, "StandAlone"))
			snprintf(act, sizeof act, "'drbdadm connect %s' on both nodes (after a split brain, "
				 "first as deploy/drbd/README.md says)", rn);
		else
			snprintf(act, sizeof act, "check the peer node and the replication link; 'drbdadm "
				 "cstate %s' on both nodes", rn);
		add(h, HR_DRBD_DISCONNECTED, HEALTH_WARNING, act, "%s disconnected from its peer (cs:%s, "
		    "this node %s): writes are not replicated", res, l->cstate[0] ? l->cstate : "unknown",
		    l->role[0] ? l->role : "unknown");
	}
	/* a resync says what the disks are; so does DUnknown for a peer gone */
	if (syncing)
		return;
	if (l->disk[0] && strcmp(l->disk, "UpToDate")) {
		if (!strcmp(l->disk, "Diskless"))
			snprintf(act, sizeof act, "check flashd and nbd@%s, then 'drbdadm adjust %s': DRBD "
				 "takes this disk back and resyncs it", l->nbd, rn);
		else
			snprintf(act, sizeof act, "connect to a peer with an UpToDate disk ('drbdadm "
				 "connect %s'): it resyncs this one", rn);
		add(h, HR_DRBD_DISK, HEALTH_WARNING, act, "%s: this node's disk is %s (ds:%s/%s): %s", res,
		    l->disk, l->disk, l->peer_disk[0] ? l->peer_disk : "?",
		    !strcmp(l->disk, "Diskless") ? "DRBD does not use this ioDimm"
						 : "this node's copy is not the current data");
	}
	if (one_of(l->cstate, connected) && l->peer_disk[0] && strcmp(l->peer_disk, "UpToDate"))
		add(h, HR_DRBD_PEER_DISK, HEALTH_WARNING, "on the peer: check its flashd and NBD attach, "
		    "then 'drbdadm adjust' there (it resyncs)", "%s: the peer's disk is %s (ds:%s/%s): "
		    "writes are not replicated", res, l->peer_disk, l->disk[0] ? l->disk : "?", l->peer_disk);
}

/* The reasons of an ioDimm that is not attached, or did not answer. */
static void eval_main(const struct dimm_status *st, struct health *h)
{
	char act[512];
	if (!strcmp(st->state, "failed")) {
		snprintf(act, sizeof act, "fix what the message says ('flashctl recover %.100s' "
			 "reports what the image holds), then 'flashctl attach %.40s'", st->image,
			 st->name);
		add(h, HR_OPEN_FAILED, HEALTH_FAILED, act, "did not open: %s",
		    st->error[0] ? st->error : "unknown error");
	} else if (!strcmp(st->state, "detached")) {
		snprintf(act, sizeof act, "'flashctl attach %.60s' serves it again", st->name);
		add(h, HR_DETACHED, HEALTH_OK, act, "detached: not exported");
	} else if (!strcmp(st->state, "attached") || !strcmp(st->state, "checkpointing")) {
		/* the thread did not answer in time (busy): nothing is known */
		add(h, HR_NO_ANSWER, HEALTH_WARNING, "look again; if it lasts, the log says what the "
		    "ioDimm is doing", "the ioDimm thread did not answer in time: its health is not "
		    "known");
	} else {
		add(h, HR_BUSY, HEALTH_OK, "", "%s: figures once that is done", st->state);
	}
}

void health_eval(const struct dimm_status *st, const struct health_limits *lim, struct health *h)
{
	h->state = HEALTH_OK;
	h->n = 0;
	if (st->answered && st->attached)
		eval_ftl(st, lim, h);
	else
		eval_main(st, h);
	eval_drbd(st, h);
}

enum health_state health_worst(const struct health *h, int n)
{
	enum health_state w = HEALTH_OK;
	for (int i = 0; i < n; i++)
		if (h[i].state > w)
			w = h[i].state;
	return w;
}
