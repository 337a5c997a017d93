#!/bin/bash
# test-fuzz-smoke.sh - the libFuzzer harness, briefly (make fuzz runs it for
# an hour).
#
#   1. builds the targets (make fuzz-build: clang, installed by
#      scripts/deps.sh fuzz if missing)
#   2. replays tests/fuzz/regress/*/* (tests/fuzz/regress.sh): every
#      reproducer of a past finding must neither crash, leak nor hang
#   3. fuzzes every target for FUZZ_SMOKE_SECONDS in all (default 50, split
#      as make fuzz splits its time): no crash, leak, timeout or
#      out-of-memory (tests/fuzz/run.sh; known findings are suppressed
#      there, and fail in step 2 until they are fixed)
# Without clang (scripts/deps.sh fuzz installs it, here if need be) it
# skips, or fails under make check.
# timeout: 400
source "$(dirname "$0")/functions.sh"
cd "$top"
command -v clang >/dev/null 2>&1 || scripts/deps.sh fuzz || true
requires clang
t0=$(date +%s)
make -s -j"$(nproc)" fuzz-build || { echo "FAIL: make fuzz-build"; exit 1; }
echo "built in $(($(date +%s) - t0)) s"
rc=0
echo "=== regression inputs (tests/fuzz/regress/)"
tests/fuzz/regress.sh || rc=1
echo "=== fuzzing for ${FUZZ_SMOKE_SECONDS:-50} s"
FUZZ_OUT=build/fuzz/smoke tests/fuzz/run.sh "${FUZZ_SMOKE_SECONDS:-50}" || rc=1
exit $rc
