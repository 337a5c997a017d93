/*
 * The SNIA PTS-E steady-state rule over a measurement window of
 * STEADY_ROUNDS rounds: the data excursion (max - min) within 20 % of the
 * window's mean, and the slope excursion (the least-squares line's slope
 * times STEADY_ROUNDS - 1 rounds) within 10 % of it.  Pure arithmetic;
 * bench.c decides what a round is.
 */
#include <math.h>

#include "tools/flashctl/flashctl.h"

struct steady steady_rule(const double y[STEADY_ROUNDS])
{
	const double n = STEADY_ROUNDS, xmean = (n - 1) / 2;
	double sum = 0, min = y[0], max = y[0];
	for (int i = 0; i < STEADY_ROUNDS; i++) {
		sum += y[i];
		min = y[i] < min ? y[i] : min;
		max = y[i] > max ? y[i] : max;
	}
	struct steady s = { .mean = sum / n };
	if (!(s.mean > 0))
		return s; /* nothing measured: no steady state, excursions 0 */
	/* slope = sum (x - xmean) y / sum (x - xmean)^2, x = 0 .. n - 1 */
	double sxy = 0, sxx = 0;
	for (int i = 0; i < STEADY_ROUNDS; i++) {
		sxy += (i - xmean) * y[i];
		sxx += (i - xmean) * (i - xmean);
	}
	s.excursion_pct = 100 * (max - min) / s.mean;
	s.slope_pct = 100 * sxy / sxx * (n - 1) / s.mean;
	s.reached = s.excursion_pct <= STEADY_EXCURSION_PCT && fabs(s.slope_pct) <= STEADY_SLOPE_PCT;
	return s;
}
