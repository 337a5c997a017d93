#!/bin/bash
# run.sh - run flashd's tests; the last line is "N passed, N failed, N skipped".
#
#   tests/run.sh [-j JOBS] [--quick | --long] [NAME...]
#
#   (default)   every test (make check): the unit programs build/tests/t_*
#               (with and without sanitizers), the shell tests
#               tests/test-*.sh and the VM tests tests/vm/test-*.sh
#   --quick     make check-quick, the edit-test loop: the unit programs
#               without sanitizers (t_ftl_model with 100,000 operations)
#               and the shell tests marked "# quick" in their header
#   --long      make check-long, long explorations: t_ftl_model on
#               FLASHD_LONG_SEEDS (8) more seeds, each configuration
#               alone with a million operations, and its parts with the
#               run's seed (t_ftl_model.seed.cN), t_ftl_align on more seeds
#   NAME...     only the jobs whose name or file contains a NAME
#
# A shell test with a "# long: yes" line runs only when named (make
# check-drbd runs tests/vm/test-drbd.sh so), never in a list of all.
#   -j JOBS     jobs at a time (default $FLASHD_TEST_JOBS, else cores + 1)
#
# Jobs.  A unit program made of parts (tests/unit/t.h: t_parts, or a
# "--list" of its own) runs each part as a job of its own
# (t_ftl_parity.die, t_ftl_parity-san.die, ...).  t_ftl_model's parts (one
# configuration each) run with its fixed seed, so that make check gives the
# same verdict for the same commit; --long runs them again with a seed that
# changes every run (t_ftl_model.seed.cN; printed at the start; T_SEED=N
# repeats it).  Independent jobs run in
# parallel, the longest first (their times from the previous run's
# build/test-logs/times.tsv); a shell test marked "# exclusive: WHY" in its
# header runs alone, after the others; one marked "# jobs: N (WHY)" counts
# as N of the JOBS (a VM test: 2, its TCG guest takes a core of its own),
# and waits, holding the queue, until N are free (or none run: with -j
# less than N it runs alone).  Per-job time limit: 1200 s, or
# "# timeout: N" in a shell test's header, both for a test alone on the
# machine: with more jobs than cores a job that shares them gets its limit
# times jobs/cores (1.5 for the default 3 jobs on 2 cores).
#
# Results.  Exit status 0 passes; 77 is a skip (the test cannot run here:
# not root, no network namespaces...; its "SKIP: why" line is shown in the
# summary), never counted as a pass; anything else fails, and the log's last
# lines are printed.  FLASHD_NO_SKIP=1 counts every skip as a failure.
# (A test that lacks a program scripts/deps.sh installs fails instead of
# skipping under make check: tests/functions.sh, requires.)
# Logs: build/test-logs/NAME.log; build/test-logs/times.tsv: one line per
# job, "name<TAB>seconds<TAB>pass|fail|skip" (jobs this run did not run keep
# their line from an earlier run).  The exit status is 0 when nothing failed
# and something passed.
set -u
cd "$(dirname "$0")/.."
top=$PWD
logs=$top/build/test-logs
times=$logs/times.tsv
mkdir -p "$logs"

mode=all
slots=${FLASHD_TEST_JOBS:-$(($(nproc) + 1))}
pats=()
while [ $# -gt 0 ]; do
	case $1 in
	-j) slots=$2; shift ;;
	-j*) slots=${1#-j} ;;
	--quick) mode=quick ;;
	--long) mode=long ;;
	-h | --help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "run.sh: unknown option $1 (--help)" >&2; exit 2 ;;
	*) pats+=("$1") ;;
	esac
	shift
done
[[ $slots =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j wants a number, not '$slots'" >&2; exit 2; }

# the rotating seed of t_ftl_model.seed (T_SEED=N: that one); the jobs get
# their seed as an argument, so T_SEED must not reach them
seed=${T_SEED:-$((SRANDOM % 100000000))}
unset T_SEED

# ---- the jobs -----------------------------------------------------------------
J_NAME=() J_FILE=() J_CMD=() J_LIMIT=() J_EXCL=() J_WEIGHT=()

wanted() { # wanted NAME FILE: no NAME given, or one of them in NAME or FILE
	[ ${#pats[@]} -eq 0 ] && return 0
	local p
	for p in "${pats[@]}"; do
		[[ $1 == *"$p"* || $2 == *"$p"* ]] && return 0
	done
	return 1
}

cores=$(nproc)
add_job() { # add_job NAME FILE LIMIT EXCLUSIVE(0|1) WEIGHT CMD... (words without spaces)
	wanted "$1" "$2" || return 0
	local limit=$3
	# a job beside others gets cores/slots of a core at most: more time
	[ "$4" = 0 ] && [ "$slots" -gt "$cores" ] && limit=$(((limit * slots + cores - 1) / cores))
	J_NAME+=("$1") J_FILE+=("$2") J_LIMIT+=("$limit") J_EXCL+=("$4") J_WEIGHT+=("$5")
	shift 5
	J_CMD+=("$*")
}

unit_jobs() { # unit_jobs BIN: the jobs of one unit program
	local bin=$1 name=${1##*/} src part i
	src=tests/unit/${name%-san}.c
	case $mode:$name in
	quick:*-san) return ;;
	quick:t_ftl_model) add_job "$name" "$bin" 1200 0 1 "$bin" -n 100000 ;;
	quick:* | all:*)
		# a program made of parts (t.h's t_parts, or its own --list)
		if grep -qE 't_parts\(|"--list"' "$src" 2>/dev/null; then
			for part in $("$bin" --list); do
				add_job "$name.$part" "$bin" 1200 0 1 "$bin" "$part"
			done
		else
			add_job "$name" "$bin" 1200 0 1 "$bin"
		fi
		;;
	long:t_ftl_model)
		for ((i = 0; i < ${FLASHD_LONG_SEEDS:-8}; i++)); do
			# runs use seeds S..S+7 (one per configuration): no overlap
			add_job "$name.long$i" "$bin" 3600 0 1 "$bin" -s "$((seed + 8 * (i + 1)))"
		done
		for ((i = 0; i < 8; i++)); do
			add_job "$name.c$i" "$bin" 3600 0 1 "$bin" -c "$i" -s "$seed"
		done
		for part in $("$bin" --list); do
			add_job "$name.seed.$part" "$bin" 1200 0 1 "$bin" -s "$seed" "$part"
		done
		;;
	long:t_ftl_align)
		for ((i = 0; i < 4; i++)); do
			add_job "$name.long$i" "$bin" 3600 0 1 "$bin" -s "$((seed + 4 * (i + 1)))"
		done
		;;
	esac
}

shell_jobs() { # shell_jobs FILE
	local t=$1 name limit weight excl=0
	name=$(basename "$t" .sh)
	[ "$mode" = long ] && return
	[ "$mode" = quick ] && ! grep -q '^# quick$' "$t" && return
	[ ${#pats[@]} -eq 0 ] && grep -q '^# long: yes' "$t" && return
	limit=$(sed -n 's/^# timeout: *\([0-9][0-9]*\).*/\1/p' "$t" | head -n1)
	weight=$(sed -n 's/^# jobs: *\([1-9][0-9]*\).*/\1/p' "$t" | head -n1)
	grep -q '^# exclusive:' "$t" && excl=1
	add_job "$name" "$t" "${limit:-1200}" "$excl" "${weight:-1}" "$t"
}

for t in build/tests/t_*; do
	[ -x "$t" ] || continue
	case $t in *.d | *.o) continue ;; esac
	unit_jobs "$t"
done
for t in tests/test-*.sh tests/vm/test-*.sh; do
	[ -e "$t" ] && shell_jobs "$t"
done
njobs=${#J_NAME[@]}
if [ "$njobs" -eq 0 ]; then
	echo "run.sh: no test matches${pats[*]:+ ${pats[*]}} (built? make all)" >&2
	exit 1
fi

# ---- the order: longest first ---------------------------------------------------
# seconds from the last run, else a guess: the long unit tests first
declare -A last
if [ -r "$times" ]; then
	while IFS=$'\t' read -r n s _; do last[$n]=$s; done <"$times"
fi
guess() { # seconds, for a run without times.tsv (a fresh clone): a 2-core run's
	case $1 in
	test-kernel-clients) echo 220 ;; # with the VM cache's first build
	test-nbd-align) echo 180 ;;
	test-fuzz-smoke | t_ftl_model.c[67] | test-nandsim) echo 120 ;;
	test-flashback | test-write-amplification | test-nbd-gc-reads | test-systemd) echo 90 ;;
	t_ftl_parity-san.*dead_at_open* | t_ftl_parity.gc_hole | test-nbd-* | test-manage* | \
		test-dashboard) echo 40 ;;
	t_ftl_parity-san.* | t_ftl_model*) echo 20 ;;
	t_*) echo 5 ;;
	*) echo 20 ;;
	esac
}
order=$(for ((j = 0; j < njobs; j++)); do
	printf '%s %s %d\n' "${J_EXCL[j]}" "${last[${J_NAME[j]}]:-$(guess "${J_NAME[j]}")}" "$j"
done | sort -s -k1,1n -k2,2gr | awk '{ print $3 }')
queue=($order)

# ---- running them ---------------------------------------------------------------
pass=0 fail=0 skip=0
failed=() skipped=()
declare -A pid_job
J_SECS=() J_RES=()
running=0 # the weights of the jobs that run
sum=0

start_job() {
	local j=$1
	# shellcheck disable=SC2086 # J_CMD is words without spaces
	timeout -k 10 "${J_LIMIT[j]}" ${J_CMD[j]} >"$logs/${J_NAME[j]}.log" 2>&1 </dev/null &
	pid_job[$!]=$j
	J_START[j]=$EPOCHREALTIME
	running=$((running + J_WEIGHT[j]))
}

finish_job() { # finish_job JOB RC
	local j=$1 rc=$2 name=${J_NAME[$1]} secs why
	secs=$(awk -v a="${J_START[j]}" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	J_SECS[j]=$secs
	sum=$(awk -v a="$sum" -v b="$secs" 'BEGIN { print a + b }')
	running=$((running - J_WEIGHT[j]))
	if [ "$rc" -eq 77 ] && [ "${FLASHD_NO_SKIP:-}" != 1 ]; then
		why=$(grep -a '^SKIP: ' "$logs/$name.log" | tail -n1 | sed 's/^SKIP: //')
		skip=$((skip + 1))
		skipped+=("$name (${why:-no reason given})")
		J_RES[j]=skip
		printf 'SKIP %-40s %6ss  (%s)\n' "$name" "$secs" "${why:-no reason given}"
	elif [ "$rc" -eq 0 ]; then
		pass=$((pass + 1))
		J_RES[j]=pass
		printf 'PASS %-40s %6ss\n' "$name" "$secs"
	else
		fail=$((fail + 1))
		failed+=("$name")
		J_RES[j]=fail
		why="exit $rc"
		[ "$rc" -eq 124 ] && why="timed out after ${J_LIMIT[j]}s"
		[ "$rc" -eq 77 ] && why="skipped, and FLASHD_NO_SKIP=1"
		printf 'FAIL %-40s %6ss  (%s; log: %s)\n' "$name" "$secs" "$why" "build/test-logs/$name.log"
		tail -n 25 "$logs/$name.log" | sed 's/^/    | /'
	fi
}

reap() { # wait for one job to end
	local p rc
	wait -n -p p "${!pid_job[@]}"
	rc=$?
	finish_job "${pid_job[$p]}" "$rc"
	unset "pid_job[$p]"
}

stop_all() {
	local p
	for p in "${!pid_job[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${!pid_job[@]}"; do wait "$p" 2>/dev/null; done
	echo "run.sh: interrupted"
	exit 130
}
trap stop_all INT TERM HUP

start_all=$EPOCHREALTIME
[[ " ${J_NAME[*]}" == *" t_ftl_model.seed."* ]] &&
	echo "t_ftl_model.seed: seed $seed this run (again: T_SEED=$seed tests/run.sh t_ftl_model.seed)"
[ "$mode" = long ] && echo "seeds from $seed (again: T_SEED=$seed tests/run.sh --long)"
for j in "${queue[@]}"; do
	if [ "${J_EXCL[j]}" = 1 ]; then
		while [ $running -gt 0 ]; do reap; done
		start_job "$j"
		reap
		continue
	fi
	while [ $running -gt 0 ] && [ $((running + J_WEIGHT[j])) -gt "$slots" ]; do reap; done
	start_job "$j"
done
while [ $running -gt 0 ]; do reap; done
wall=$(awk -v a="$start_all" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')

# times.tsv: this run's jobs, then the other lines of the last one
{
	for ((j = 0; j < njobs; j++)); do
		printf '%s\t%s\t%s\n' "${J_NAME[j]}" "${J_SECS[j]}" "${J_RES[j]}"
		unset "last[${J_NAME[j]}]"
	done
	if [ -r "$times" ]; then
		while IFS=$'\t' read -r n s r; do
			if [ -n "${last[$n]+x}" ]; then printf '%s\t%s\t%s\n' "$n" "$s" "$r"; fi
		done <"$times"
	fi
} >"$times.new" && mv "$times.new" "$times"

printf 'total time %ss for %.0fs of tests, %s jobs at a time (load %s)\n' "$wall" "$sum" "$slots" \
	"$(cut -d' ' -f1-3 /proc/loadavg)"
[ $skip -gt 0 ] && printf 'skipped: %s\n' "${skipped[@]}"
[ $fail -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
