#!/bin/bash
# timeout: 120
# quick
# tests/run.sh itself, on a scratch tree of fake tests (tiny scripts in
# place of the unit programs and shell tests), so that what make check
# reports is what happened:
#   1. results: exit 0 passes, 77 (tests/functions.sh: skip, requires) is
#      a skip, listed with its reason and never counted as a pass,
#      anything else fails; the last line is "N passed, N failed, N
#      skipped"; FLASHD_NO_SKIP=1 makes a skip a failure; under
#      FLASHD_DEPS_INSTALLED=1 (make check) a missing program fails;
#      nothing but skips is not a success; a test that left a part out
#      (skip_part, part_requires) and would pass is a skip listing the
#      parts, and fails when something else failed;
#   2. a program made of parts (t.h: t_parts) runs each part as a job;
#      t_ftl_model's parts run with its own seed (make check), and with
#      the run's seed (T_SEED=N) under --long, which no job sees in its
#      environment;
#   3. jobs run in parallel (three 2-second tests at once with -j 3), a
#      test marked "# exclusive" runs with nothing else, one marked
#      "# jobs: 2" beside one other job at most (with -j 1 alone),
#      "# timeout: N" stops a test (times jobs/cores with more jobs than
#      cores), one marked "# long: yes" runs only when named;
#   4. build/test-logs/times.tsv has name, seconds and result per job, and
#      a run of some tests keeps the lines of the others; every run
#      writes it.
source "$(dirname "$0")/functions.sh"

W=$T/tree
mkdir -p "$W/tests/unit" "$W/build/tests"
cp "$top/tests/run.sh" "$top/tests/functions.sh" "$W/tests/"

fake_test() { # fake_test PATH BODY...: an executable bash script
	local p=$1
	shift
	printf '#!/bin/bash\n' >"$p"
	printf '%s\n' "$@" >>"$p"
	chmod +x "$p"
}
# a trace of when each job ran: "NAME start|end EPOCHREALTIME"
traced() { # traced NAME SECONDS: the body of a test that sleeps
	echo "echo \"$1 start \$EPOCHREALTIME\" >>$W/trace; sleep $2; echo \"$1 end \$EPOCHREALTIME\" >>$W/trace"
}
# check_trace: the Python program on stdin, run with iv, the trace read:
# {NAME: {"start": T, "end": T}}; its exit status
check_trace() {
	$PYTHON - "$W/trace" <<PY
import sys
iv = {}
for line in open(sys.argv[1]):
    name, what, t = line.split()
    iv.setdefault(name, {})[what] = float(t)
$(cat)
PY
}

fake_test "$W/build/tests/t_ok" 'echo fine'
fake_test "$W/build/tests/t_parted" 'case $1 in --list) printf "a\nb\n" ;; a) echo part a ;; *) echo "part $1 fails"; exit 1 ;; esac'
echo 'int main(int argc, char **argv) { return t_parts(argc, argv, parts, 2); }' >"$W/tests/unit/t_parted.c"
fake_test "$W/build/tests/t_ftl_model" '[ "$1" = --list ] && { printf "c0\nc1\n"; exit 0; }' 'echo "args: $*; T_SEED=${T_SEED:-unset}"'
echo 'if (argc == 2 && !strcmp(argv[1], "--list"))' >"$W/tests/unit/t_ftl_model.c"
fake_test "$W/tests/test-pass.sh" 'echo all good'
fake_test "$W/tests/test-fail.sh" 'echo boom; exit 1'
fake_test "$W/tests/test-skip.sh" 'source "$(dirname "$0")/functions.sh"' 'skip "no widget here"' 'exit 0'
fake_test "$W/tests/test-needs.sh" 'source "$(dirname "$0")/functions.sh"' 'requires sh no-such-program-xyz' 'exit 0'
fake_test "$W/tests/test-halfway.sh" 'source "$(dirname "$0")/functions.sh"' \
	'skip_part "3. the widget part (no widget here)"' 'ok "1, 2"' 'skip_part "4. the other part (no gizmo)"' 'exit 0'
fake_test "$W/tests/test-halfbroken.sh" 'source "$(dirname "$0")/functions.sh"' \
	'skip_part "3. the widget part (no widget here)"' 'fail "2 broke"'
fake_test "$W/tests/test-gadget.sh" 'source "$(dirname "$0")/functions.sh"' \
	'if part_requires "the gadget check" sh no-such-program-xyz; then echo "the gadget check ran"; fi' 'ok "the rest"'
fake_test "$W/tests/test-slow1.sh" "$(traced slow1 2)"
fake_test "$W/tests/test-slow2.sh" "$(traced slow2 2)"
fake_test "$W/tests/test-slow3.sh" "$(traced slow3 2)"
fake_test "$W/tests/test-alone.sh" '# exclusive: the fake test of exclusive' "$(traced alone 1)"
fake_test "$W/tests/test-twojobs.sh" '# jobs: 2 (the fake test of jobs)' "$(traced twojobs 1)"
fake_test "$W/tests/test-hang.sh" '# timeout: 1' 'sleep 30'
fake_test "$W/tests/test-pair.sh" '# long: yes (make check-drbd)' 'echo ran >"$(dirname "$0")/pair-ran"'

# run [ENV=V...] -- ARGS...: tests/run.sh in the tree, in an environment
# without make check's settings; sets $out and $rc
run() {
	local envs=(-u FLASHD_DEPS_INSTALLED -u FLASHD_NO_SKIP -u FLASHD_TEST_JOBS -u T_SEED)
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	rc=0
	out=$(env "${envs[@]}" "$W/tests/run.sh" "$@" 2>&1) || rc=$?
	echo "$out" | sed 's/^/    | /'
}
want_line() { # want_line REGEX WHAT
	grep -qE "$1" <<<"$out" || fail "$2: no line matching '$1' in the output above"
}

# ---- 1. results -----------------------------------------------------------------
run -- -j 2 t_ok test-pass test-skip test-needs
[ "$(tail -n1 <<<"$out")" = "2 passed, 0 failed, 2 skipped" ] || fail "summary line: $(tail -n1 <<<"$out")"
[ $rc -eq 0 ] || fail "a run with passes and skips only: exit $rc, want 0"
want_line '^SKIP test-skip +[0-9.]+s  \(no widget here\)$' "the skip's own line"
want_line '^skipped: test-skip \(no widget here\)$' "the summary's skip list"
want_line '^skipped: test-needs \(not installed: no-such-program-xyz ' "requires names the program"
ok "exit 77 is a skip, with its reason, not a pass"

run FLASHD_NO_SKIP=1 -- t_ok test-pass test-skip
[ "$(tail -n1 <<<"$out")" = "2 passed, 1 failed, 0 skipped" ] || fail "FLASHD_NO_SKIP=1: $(tail -n1 <<<"$out")"
[ $rc -ne 0 ] || fail "FLASHD_NO_SKIP=1 with a skip: exit 0"
want_line '^FAIL test-skip .*skipped, and FLASHD_NO_SKIP=1' "FLASHD_NO_SKIP's failure"
ok "FLASHD_NO_SKIP=1: a skip fails"

run FLASHD_DEPS_INSTALLED=1 -- test-needs
[ "$(tail -n1 <<<"$out")" = "0 passed, 1 failed, 0 skipped" ] || fail "requires under make check: $(tail -n1 <<<"$out")"
want_line 'FAIL: not installed: no-such-program-xyz' "requires' failure"
ok "FLASHD_DEPS_INSTALLED=1: a missing program fails"

run -- test-skip
[ $rc -ne 0 ] || fail "a run of skips only exits 0"
run -- test-pass test-fail
[ "$(tail -n1 <<<"$out")" = "1 passed, 1 failed, 0 skipped" ] || fail "a failure: $(tail -n1 <<<"$out")"
[ $rc -ne 0 ] || fail "a run with a failure exits 0"
want_line '^    \| boom$' "the failing test's last lines"
ok "a failure fails the run; skips alone do not pass it"

run -- test-halfway test-gadget test-pass
[ "$(tail -n1 <<<"$out")" = "1 passed, 0 failed, 2 skipped" ] || fail "parts not run: $(tail -n1 <<<"$out")"
want_line '^skipped: test-halfway \(not run: 3\. the widget part \(no widget here\); 4\. the other part \(no gizmo\)\)$' \
	"the summary's list of the parts not run"
want_line '^skipped: test-gadget \(not run: the gadget check \(not installed: no-such-program-xyz; ' \
	"part_requires names the part and the program"
! grep -q "the gadget check ran" "$W/build/test-logs/test-gadget.log" || fail "part_requires was true without the program"
run FLASHD_DEPS_INSTALLED=1 -- test-gadget
[ "$(tail -n1 <<<"$out")" = "0 passed, 1 failed, 0 skipped" ] || fail "part_requires under make check: $(tail -n1 <<<"$out")"
run -- test-halfbroken test-pass
[ "$(tail -n1 <<<"$out")" = "1 passed, 1 failed, 0 skipped" ] || fail "a part not run, then a failure: $(tail -n1 <<<"$out")"
ok "a test that left parts out is a skip naming them, never a pass; a failure still fails"

# ---- 2. parts, seeds -----------------------------------------------------------------
run -- t_parted
want_line '^PASS t_parted\.a ' "part a"
want_line '^FAIL t_parted\.b ' "part b"
[ "$(tail -n1 <<<"$out")" = "1 passed, 1 failed, 0 skipped" ] || fail "parts: $(tail -n1 <<<"$out")"
run T_SEED=4242 -- t_ftl_model
[ "$(tail -n1 <<<"$out")" = "2 passed, 0 failed, 0 skipped" ] || fail "t_ftl_model's jobs: $(tail -n1 <<<"$out")"
! grep -q 'seed' <<<"$out" || fail "make check ran t_ftl_model with a rotating seed"
logs=$W/build/test-logs
grep -qx 'args: c1; T_SEED=unset' "$logs/t_ftl_model.c1.log" ||
	fail "t_ftl_model's fixed-seed part c1: $(cat "$logs/t_ftl_model.c1.log")"
run T_SEED=4242 -- --long t_ftl_model
want_line '^t_ftl_model\.seed: seed 4242 this run' "the run's seed"
grep -qx 'args: -s 4242 c1; T_SEED=unset' "$logs/t_ftl_model.seed.c1.log" ||
	fail "t_ftl_model.seed.c1: $(cat "$logs/t_ftl_model.seed.c1.log")"
run -- --long t_ftl_model
seed=$(sed -n 's/^t_ftl_model\.seed: seed \([0-9]*\) this run.*/\1/p' <<<"$out")
grep -qx "args: -s $seed c0; T_SEED=unset" "$logs/t_ftl_model.seed.c0.log" ||
	fail "t_ftl_model.seed.c0 without T_SEED: seed '$seed', $(cat "$logs/t_ftl_model.seed.c0.log")"
ok "parts are jobs; t_ftl_model runs its seed, and under --long the run's ($seed)"

# ---- 3. parallel, exclusive, timeout -----------------------------------------
rm -f "$W/trace"
t0=$EPOCHREALTIME
run -- -j 3 test-slow test-alone
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
[ "$(tail -n1 <<<"$out")" = "4 passed, 0 failed, 0 skipped" ] || fail "parallel: $(tail -n1 <<<"$out")"
# the three slow tests ran at the same time; the exclusive one with none
check_trace <<'PY' || fail "not run as they should (the trace above)"
slow = [iv["slow%d" % i] for i in (1, 2, 3)]
if max(v["start"] for v in slow) >= min(v["end"] for v in slow):
    sys.exit("the three slow tests did not all run at once: %s" % slow)
a = iv["alone"]
for name, v in iv.items():
    if name != "alone" and v["start"] < a["end"] and a["start"] < v["end"]:
        sys.exit("%s ran from %.2f to %.2f, alone from %.2f to %.2f" % (name, v["start"], v["end"], a["start"], a["end"]))
PY
# a job of weight 2 first (the longest: no time yet), one beside it, the
# third after it
rm -f "$W/trace"
run -- -j 3 test-twojobs test-slow1 test-slow2
[ "$(tail -n1 <<<"$out")" = "3 passed, 0 failed, 0 skipped" ] || fail "# jobs: 2: $(tail -n1 <<<"$out")"
check_trace <<'PY' || fail "# jobs: 2: not run as it should (the trace above)"
two = iv["twojobs"]
beside = [n for n, v in iv.items() if n != "twojobs" and v["start"] < two["end"] and two["start"] < v["end"]]
if len(beside) != 1:
    sys.exit("twojobs (2 of 3 jobs) ran beside %s: %s" % (beside or "none", iv))
PY
run -- -j 1 test-twojobs
[ "$(tail -n1 <<<"$out")" = "1 passed, 0 failed, 0 skipped" ] || fail "# jobs: 2 with -j 1: $(tail -n1 <<<"$out")"
run -- -j 1 test-hang
want_line '^FAIL test-hang .*timed out after 1s' "the time limit"
# twice as many jobs as cores: twice the limit for a job that shares them
run -- -j "$((2 * $(nproc)))" test-hang
want_line '^FAIL test-hang .*timed out after 2s' "the time limit of a job beside others"
run -- -j 4
! grep -q 'test-pair' <<<"$out" && [ ! -e "$W/tests/pair-ran" ] || fail "a '# long: yes' test ran in a run of all"
run -- test-pair
want_line '^PASS test-pair ' "a '# long: yes' test named"
ok "in parallel (4 tests in $secs s), exclusive alone, '# jobs: 2' beside one, time limit kept and scaled"

# ---- 4. times.tsv -----------------------------------------------------------------
tsv=$W/build/test-logs/times.tsv
run -- -j 3 t_ok test-pass test-skip test-fail
grep -qP '^test-skip\t[0-9]+\.[0-9]\tskip$' "$tsv" || fail "times.tsv: no skip line: $(cat "$tsv")"
grep -qP '^test-fail\t[0-9]+\.[0-9]\tfail$' "$tsv" || fail "times.tsv: no fail line"
grep -qP '^t_ok\t[0-9]+\.[0-9]\tpass$' "$tsv" || fail "times.tsv: no pass line"
grep -qP '^test-slow1\t[0-9]+\.[0-9]\tpass$' "$tsv" || fail "times.tsv lost an earlier run's line"
[ "$(awk -F'\t' 'NF != 3' "$tsv" | wc -l)" = 0 ] || fail "times.tsv: a line without 3 fields: $(cat "$tsv")"
# a run of only the jobs of the last line of times.tsv updates it too
rm -f "$tsv"
run -- test-skip
run FLASHD_NO_SKIP=1 -- test-skip
grep -qP '^test-skip\t[0-9]+\.[0-9]\tfail$' "$tsv" || fail "times.tsv not updated by a run of its last job: $(cat "$tsv")"
ok "times.tsv: name, seconds, result; earlier lines kept; every run writes it"
