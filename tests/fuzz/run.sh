#!/bin/bash
# tests/fuzz/run.sh - run the libFuzzer targets (make fuzz).
#
#   tests/fuzz/run.sh SECONDS [TARGET...]     (targets: nbd image config acl)
#
# SECONDS is split among the targets by weight (nbd 4, image 3, config 2,
# acl 1); each runs in turn with its working corpus in $FUZZ_OUT/corpus/T
# (kept between runs, seeded from tests/fuzz/corpus/T), its findings in
# $FUZZ_OUT/findings/T/ (crash-*, leak-*, timeout-*, oom-*) and its log in
# $FUZZ_OUT/logs/T.log (FUZZ_OUT: default build/fuzz; the smoke test uses
# build/fuzz/smoke).  After a
# finding the target is started again for the rest of its time (at most 20
# times).  At the end one line per target: executions, exec/s, coverage
# (libFuzzer's cov: edges and ft: features), corpus size, peak RSS, and
# findings; exit status 1 if there is any finding.
#
# Known findings, reported and not fixed yet, are suppressed so that the
# time goes to new ones, and listed in the summary: tests/fuzz/known/
# ubsan.supp (UBSan suppressions), libevent.txt (libevent warnings, one
# substring a line, that fuzz_nbd does not count) and image.txt (damage
# fuzz_image steps around).  Their reproducers
# are in tests/fuzz/regress/ (tests/fuzz/regress.sh replays them with
# nothing suppressed).
#
# Environment: FUZZ_NICE (default 10), FUZZ_EXTRA (more libFuzzer options),
# FUZZ_NO_SUPP=1 (suppress nothing).  One process at a time.
set -u
cd "$(dirname "$0")/../.."
top=$PWD
secs=${1:?usage: tests/fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(nbd image config acl)
nice_n=${FUZZ_NICE:-10}

declare -A weight=([nbd]=4 [image]=3 [config]=2 [acl]=1)
declare -A maxlen=([nbd]=16384 [image]=4096 [config]=4096 [acl]=1024)
declare -A dict=([nbd]=tests/fuzz/nbd.dict [config]=tests/fuzz/config.dict [acl]=tests/fuzz/acl.dict)
total_w=0
for t in "${targets[@]}"; do
	[ -n "${weight[$t]:-}" ] || { echo "run.sh: unknown target $t" >&2; exit 2; }
	[ -x "build/fuzz/fuzz_$t" ] || { echo "run.sh: build/fuzz/fuzz_$t missing (make fuzz-build)" >&2; exit 2; }
	total_w=$((total_w + weight[$t]))
done

supp=$top/tests/fuzz/known/ubsan.supp
ubsan="halt_on_error=1:print_stacktrace=1"
[ -f "$supp" ] && [ -z "${FUZZ_NO_SUPP:-}" ] && ubsan="$ubsan:suppressions=$supp"
export UBSAN_OPTIONS=$ubsan
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
if [ -f tests/fuzz/known/image.txt ] && [ -z "${FUZZ_NO_SUPP:-}" ]; then
	FUZZ_IMAGE_KNOWN=$(grep -v '^#' tests/fuzz/known/image.txt | grep . | paste -sd ' ')
	export FUZZ_IMAGE_KNOWN
fi
if [ -f tests/fuzz/known/libevent.txt ] && [ -z "${FUZZ_NO_SUPP:-}" ]; then
	FUZZ_NBD_EVENT_IGNORE=$(grep -v '^#' tests/fuzz/known/libevent.txt | grep . | paste -sd '|')
	export FUZZ_NBD_EVENT_IGNORE
fi

out=${FUZZ_OUT:-build/fuzz}
logdir=$out/logs
mkdir -p "$logdir"
summary=()
bad=0
errors=0
t_start=$(date +%s)
for t in "${targets[@]}"; do
	share=$((secs * weight[$t] / total_w))
	[ "$share" -ge 5 ] || share=5
	corpus=$out/corpus/$t
	findings=$out/findings/$t
	mkdir -p "$corpus" "$findings"
	log=$logdir/$t.log
	: >"$log"
	opts=(-timeout=30 -rss_limit_mb=4096 -max_len="${maxlen[$t]}" -print_final_stats=1
		-artifact_prefix="$findings/" -reload=0)
	[ -n "${dict[$t]:-}" ] && opts+=(-dict="${dict[$t]}")
	echo "=== fuzz_$t: ${share}s (log: $log)"
	start=$(date +%s)
	end=$((start + share))
	runs=0
	while :; do
		left=$((end - $(date +%s)))
		[ "$left" -ge 3 ] || break
		runs=$((runs + 1))
		nice -n "$nice_n" "build/fuzz/fuzz_$t" "${opts[@]}" -max_total_time="$left" ${FUZZ_EXTRA:-} \
			"$corpus" "tests/fuzz/corpus/$t" >>"$log" 2>&1
		rc=$?
		[ $rc -eq 0 ] && break
		# a leak LeakSanitizer finds at exit (fuzz_nbd: flashd's threads
		# free asynchronously, so libFuzzer's per-input leak check gives
		# up and only the check at exit remains) has no input file
		if [ -z "$(find "$findings" -type f -newermt "@$start")" ] &&
			! tail -n 200 "$log" | grep -q 'ERROR: LeakSanitizer'; then
			echo "    fuzz_$t failed with status $rc and no finding written: harness error (log: $log)"
			tail -n 5 "$log" | sed 's/^/      | /'
			errors=$((errors + 1))
			break
		fi
		echo "    fuzz_$t stopped with status $rc (a finding; see the log), run $runs"
		[ $runs -lt 20 ] || break
	done
	elapsed=$(($(date +%s) - start))
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | awk '{ s += $1 } END { print s + 0 }')
	rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | sort -n | tail -n1)
	last=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE|INITED).*cov:' "$log" | tail -n1)
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<<"$last")
	n_crash=$(find "$findings" -name 'crash-*' -newermt "@$start" | wc -l)
	n_leak=$(find "$findings" -name 'leak-*' -newermt "@$start" | wc -l)
	n_leak_exit=$(grep -c 'ERROR: LeakSanitizer' "$log")
	[ "$n_leak_exit" -le "$n_leak" ] || n_leak=$n_leak_exit
	n_timeout=$(find "$findings" -name 'timeout-*' -newermt "@$start" | wc -l)
	n_oom=$(find "$findings" -name 'oom-*' -newermt "@$start" | wc -l)
	found=$((n_crash + n_leak + n_timeout + n_oom))
	[ $found -eq 0 ] || bad=1
	line=$(printf '%-7s %6ss %11s execs %7s exec/s  cov %5s ft %6s corpus %-12s rss %5s MB  crashes %d leaks %d timeouts %d ooms %d' \
		"$t" "$elapsed" "$execs" "$((execs / (elapsed > 0 ? elapsed : 1)))" "${cov:-?}" "${ft:-?}" \
		"${corp:-?}" "${rss:-?}" "$n_crash" "$n_leak" "$n_timeout" "$n_oom")
	summary+=("$line")
	echo "    $line"
done
tests/fuzz/sweep.sh
echo "=== fuzzing summary ($(($(date +%s) - t_start)) s)"
printf '%s\n' "${summary[@]}"
if [ -z "${FUZZ_NO_SUPP:-}" ] && [ -d tests/fuzz/known ]; then
	echo "known findings suppressed (reproducers in tests/fuzz/regress/):"
	grep -hv '^#' tests/fuzz/known/* 2>/dev/null | grep . | sed 's/^/  /'
fi
if [ $errors -ne 0 ]; then
	echo "HARNESS ERRORS: $errors target(s) could not run"
	exit 2
fi
if [ $bad -ne 0 ]; then
	echo "FINDINGS: see $out/findings/*/ and $out/logs/"
	exit 1
fi
echo "no crash, leak, timeout or out-of-memory"
