/*
 * ftl/throttle.c - the write throttle of write-reduced mode (ftl.h): its
 * rate from its two causes (health_update in block.c: reserves low;
 * thermal_check in ftl.c: the card hot), and the pass each host unit
 * takes before io.c buffers it.  Owns f->throttle_ns and f->throttle_at;
 * sets f->throttle_wait, which io.c clears at each turn and
 * ftl_next_deadline reads.  Calls nothing of the FTL, so the files that
 * change a cause call it from any floor.
 */
#include "ftl/ftl_int.h"

void throttle_update(struct ftl *f)
{
	uint64_t ns = f->health_throttle_ns > f->thermal_throttle_ns ? f->health_throttle_ns
								       : f->thermal_throttle_ns;
	if (ns && !f->throttle_ns)
		f->throttle_at = 0; /* a fresh start: the burst is allowed */
	f->throttle_ns = ns;
	if (!ns)
		f->throttle_wait = false;
}

/*
 * Write-reduced mode (ftl.h): each host unit buffered takes throttle_ns of
 * device time, with a burst of FTL_THROTTLE_BURST units; a write that must wait
 * sets throttle_wait, and ftl_next_deadline() names throttle_at.  One clock
 * read per unit, only in that mode.
 */
bool throttle_pass(struct ftl *f)
{
	uint64_t now = nand_now(f->dev);
	uint64_t floor = now - FTL_THROTTLE_BURST * f->throttle_ns;
	if (now > FTL_THROTTLE_BURST * f->throttle_ns && f->throttle_at < floor)
		f->throttle_at = floor;
	if (f->throttle_at > now) {
		f->throttle_wait = true;
		return false;
	}
	f->throttle_wait = false;
	f->throttle_at += f->throttle_ns;
	return true;
}
