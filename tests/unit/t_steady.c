/*
 * t_steady - the SNIA PTS-E steady-state rule of flashctl bench
 * (tools/flashctl/steady.c) on windows worked out by hand: excursion
 * (max - min) / mean, slope excursion = least-squares slope x 4 / mean,
 * limits 20 % and 10 % inclusive.
 */
#include <math.h>
#include <stdio.h>

#include "tools/flashctl/flashctl.h"

static int fails;

static void check(int line, double y0, double y1, double y2, double y3, double y4, double mean,
		  double exc, double slope, bool reached)
{
	const double y[STEADY_ROUNDS] = { y0, y1, y2, y3, y4 };
	struct steady s = steady_rule(y);
	if (fabs(s.mean - mean) > 1e-9 || fabs(s.excursion_pct - exc) > 1e-9 ||
	    fabs(s.slope_pct - slope) > 1e-9 || s.reached != reached) {
		fprintf(stderr, "line %d: mean %.6f excursion %.6f %% slope %.6f %% %s; want %.6f %.6f %% "
				"%.6f %% %s\n", line, s.mean, s.excursion_pct, s.slope_pct,
			s.reached ? "reached" : "not reached", mean, exc, slope,
			reached ? "reached" : "not reached");
		fails++;
	}
}
#define CHECK(...) check(__LINE__, __VA_ARGS__)

int main(void)
{
	CHECK(100, 100, 100, 100, 100, 100, 0, 0, true);
	/* rising 2 a round: slope 2 x 4 = 8 of mean 104, excursion 8 too */
	CHECK(100, 102, 104, 106, 108, 104, 800.0 / 104, 800.0 / 104, true);
	/* rising 3 a round: excursion 12/106 = 11.3 % passes, slope 11.3 % fails */
	CHECK(100, 103, 106, 109, 112, 106, 1200.0 / 106, 1200.0 / 106, false);
	/* flat but noisy: slope 0, excursion 20/98 = 20.4 % fails */
	CHECK(90, 110, 90, 110, 90, 98, 2000.0 / 98, 0, false);
	/* excursion exactly 20 %: within; sum (x - 2) y = 10, slope 1, 4 % */
	CHECK(90, 110, 100, 100, 100, 100, 20, 4, true);
	/* falling: sum (x - 2) y = -20800, slope -2080, x 4 = -8320 of 5860 */
	CHECK(1500, 2000, 8600, 8600, 8600, 5860, 710000.0 / 5860, 832000.0 / 5860, false);
	CHECK(8600, 8600, 8600, 2000, 1500, 5860, 710000.0 / 5860, -832000.0 / 5860, false);
	/* nothing measured */
	CHECK(0, 0, 0, 0, 0, 0, 0, 0, false);
	if (fails) {
		fprintf(stderr, "t_steady: %d failures\n", fails);
		return 1;
	}
	printf("t_steady: ok\n");
	return 0;
}
