#!/bin/bash
# tests/fuzz/regress.sh - replay every input under tests/fuzz/regress/TARGET/
# through build/fuzz/fuzz_TARGET (three times each: some findings depend on
# timing), with nothing suppressed.  Prints one line per input; exit 1 if
# any still crashes, leaks or hangs.  Put a finding's minimised reproducer
# there (build/fuzz/fuzz_T -minimize_crash=1 -max_total_time=60
# -exact_artifact_path=tests/fuzz/regress/T/NAME build/fuzz/findings/T/crash-...)
# together with its report.
set -u
cd "$(dirname "$0")/../.."
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
unset FUZZ_NBD_EVENT_IGNORE FUZZ_IMAGE_KNOWN
logdir=build/fuzz/logs
mkdir -p "$logdir"
pass=0
fail=0
for d in tests/fuzz/regress/*/; do
	t=$(basename "$d")
	for f in "$d"*; do
		[ -f "$f" ] || continue
		log=$logdir/regress-$t-$(basename "$f").log
		if timeout -k 5 120 "build/fuzz/fuzz_$t" -runs=3 -timeout=30 "$f" >"$log" 2>&1; then
			pass=$((pass + 1))
			echo "ok   $t/$(basename "$f")"
		else
			fail=$((fail + 1))
			echo "FAIL $t/$(basename "$f") (log: $log):"
			grep -E 'runtime error|ERROR: |fuzz_[a-z]*: |SUMMARY' "$log" | head -n 5 | sed 's/^/    /'
		fi
	done
done
tests/fuzz/sweep.sh
echo "regression inputs: $pass pass, $fail fail"
[ $fail -eq 0 ]
