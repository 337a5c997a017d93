#!/bin/sh
# plot.sh - the reviews' charts from `flashctl bench --csv` files.
#
#   tests/bench/plot.sh OUT_PREFIX STOCK.csv [HIGHPERF.csv]
#
# Writes OUT_PREFIX-iops.png (IOPS over virtual time, preconditioning and
# measurement) and OUT_PREFIX-latsd.png (latency standard deviation per
# interval), one line per CSV: the stock format (20 % OP) against the
# high-performance one (36 % OP), as the reviews compared them.  Needs
# gnuplot (Debian's gnuplot-nox; scripts/deps.sh bench installs it).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 OUT_PREFIX STOCK.csv [HIGHPERF.csv]" >&2; exit 2; }
out=$1
stock=$2
hp=${3:-}
command -v gnuplot >/dev/null || { echo "$0: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
plot_line() { # FILE COLUMN TITLE
	printf "'%s' using 2:%s with lines lw 2 title '%s'" "$1" "$2" "$3"
}
for what in iops latsd; do
	if [ $what = iops ]; then col=3; ylabel="4K random write IOPS (one ioDimm)"; else col=5; ylabel="latency std-dev (ms)"; fi
	lines=$(plot_line "$stock" $col "stock format, 20% OP")
	[ -n "$hp" ] && lines="$lines, $(plot_line "$hp" $col "high-performance format, 36% OP")"
	gnuplot <<GP
set datafile separator ','
set terminal pngcairo size 1000,500 noenhanced
set output '$out-$what.png'
set xlabel 'virtual time (s): preconditioning, then measurement'
set ylabel '$ylabel'
set key top right
set grid
plot $lines
GP
done
echo "wrote $out-iops.png $out-latsd.png"
