#!/bin/bash
# timeout: 120
# tests/run.sh itself, on a scratch tree of fake tests (tiny scripts in
# place of the unit programs and shell tests), so that what make check
# reports is what happened: exit 0 passes, 77 (tests/functions.sh: skip,
# requires) is a skip, listed with its reason and never counted as a
# pass, anything else fails; the last line is "N passed, N failed, N
# skipped"; FLASHD_NO_SKIP=1 makes a skip a failure; under
# FLASHD_DEPS_INSTALLED=1 (make check) a missing program fails; nothing
# but skips is not a success; a test that left a part out (skip_part,
# part_requires) and would pass is a skip listing the parts, and fails
# when something else failed.
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

fake_test "$W/build/tests/t_ok" 'echo fine'
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

run -- t_ok test-pass test-skip test-needs
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
