#!/bin/bash
# run.sh - run flashd's tests and print "N passed, N failed, N skipped".
#
#   tests/run.sh              every test: unit programs (build/tests/t_*),
#                             then shell tests (tests/test-*.sh), then the
#                             kernel-client VM tests (tests/vm/test-*.sh)
#   tests/run.sh NAME...      only the tests whose name contains NAME
#
# A shell test with a "# long: yes" line runs only when named (make
# check-drbd runs tests/vm/test-drbd.sh so), never in the plain list.
#
# Each test runs alone with its output in build/test-logs/<name>.log; a
# failing test's last lines are printed.  A test passes only by exiting 0.
# Exit status 77 is a skip: the test cannot run here (not root, no network
# namespaces...; tests/functions.sh, skip); its "SKIP: why" line is listed
# in the summary, and it never counts as a pass.  FLASHD_NO_SKIP=1 counts
# every skip as a failure.
# The per-test time limit is 1200 s, or "# timeout: N" in a shell test.
set -u
cd "$(dirname "$0")/.."
top=$PWD
logs=$top/build/test-logs
mkdir -p "$logs"

tests=()
for t in build/tests/t_* tests/test-*.sh tests/vm/test-*.sh; do
	[ -e "$t" ] || continue
	case $t in *.d | *.o) continue ;; esac
	if [ $# -gt 0 ]; then
		hit=
		for pat in "$@"; do [[ $t == *"$pat"* ]] && hit=1; done
		[ -n "$hit" ] || continue
	elif [[ $t == *.sh ]] && grep -q '^# long: yes' "$t"; then
		continue
	fi
	tests+=("$t")
done

pass=0
fail=0
skip=0
failed=()
skipped=()
start_all=$(date +%s)
for t in "${tests[@]}"; do
	name=$(basename "$t" .sh)
	limit=1200
	if [[ $t == *.sh ]]; then
		l=$(sed -n 's/^# timeout: *\([0-9][0-9]*\).*/\1/p' "$t" | head -n1)
		[ -n "$l" ] && limit=$l
	fi
	start=$EPOCHREALTIME
	timeout -k 10 "$limit" "$t" >"$logs/$name.log" 2>&1 </dev/null
	rc=$?
	secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	if [ $rc -eq 77 ] && [ "${FLASHD_NO_SKIP:-}" != 1 ]; then
		why=$(grep -a '^SKIP: ' "$logs/$name.log" | tail -n1 | sed 's/^SKIP: //')
		skip=$((skip + 1))
		skipped+=("$name (${why:-no reason given})")
		printf 'SKIP %-28s %6ss  (%s)\n' "$name" "$secs" "${why:-no reason given}"
	elif [ $rc -eq 0 ]; then
		pass=$((pass + 1))
		printf 'PASS %-28s %6ss\n' "$name" "$secs"
	else
		fail=$((fail + 1))
		failed+=("$name")
		why="exit $rc"
		[ $rc -eq 124 ] && why="timed out after ${limit}s"
		[ $rc -eq 77 ] && why="skipped, and FLASHD_NO_SKIP=1"
		printf 'FAIL %-28s %6ss  (%s; log: %s)\n' "$name" "$secs" "$why" "build/test-logs/$name.log"
		tail -n 25 "$logs/$name.log" | sed 's/^/    | /'
	fi
done
echo "total time $(($(date +%s) - start_all))s"
[ $skip -gt 0 ] && printf 'skipped: %s\n' "${skipped[@]}"
[ $fail -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
