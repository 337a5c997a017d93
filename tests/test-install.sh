#!/bin/bash
# test-install.sh - `make install` and `make uninstall` into DESTDIR trees.
#
#   1. make install DESTDIR=$T/root PREFIX=/usr: every file where it belongs
#      (the tcmu-runner handler where Debian's tcmu-runner looks, the nbdkit
#      plugin in nbdkit --dump-config's plugindir), with its mode, and
#      nothing else; nothing written outside DESTDIR;
#   2. each man page renders with `man -l` without a warning (and groff -ww
#      is silent), and names every option of the installed flashd --help,
#      every verb and option of flashctl --help and bench --help, every
#      key of conf/flashd.conf and every parameter of the nbdkit plugin's
#      --help (so a new option without its documentation fails here);
#   3. the installed flashd and flashctl run (--version), the installed
#      example configuration checks, nbdkit loads the installed plugin;
#   4. the installed unit: Documentation= names installed man pages only,
#      ExecStart names the installed flashd, and `systemd-analyze verify`
#      passes (without systemd-analyze the test ends as a skip, or fails
#      under make check: scripts/deps.sh check installs systemd);
#   5. make uninstall leaves no file behind; with an /etc/flashd/flashd.conf
#      that existed before, install and uninstall both leave it as it was;
#   6. the default PREFIX (/usr/local) puts programs, unit and man pages
#      under /usr/local and the unit's ExecStart says so;
#   7. make run (make -n on an empty build directory) builds flashd and
#      flashctl and nothing else (no test, no sanitizer build, no plugin),
#      then runs flashd --foreground, with one --listen per word of LISTEN.
# timeout: 300
source "$(dirname "$0")/functions.sh"

cd "$top"
MAKE=(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s)

ROOT=$T/root
"${MAKE[@]}" install DESTDIR="$ROOT" PREFIX=/usr >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log"; fail "make install DESTDIR=$ROOT PREFIX=/usr failed"; }
ok "make install DESTDIR=... PREFIX=/usr"
# it writes nothing outside DESTDIR (every redirection of its recipe), so
# installs into two trees can run at once as test-drbd's two nodes do: a
# file both wrote in the tree could reach one of them half written
outside=$("${MAKE[@]}" -n install DESTDIR="$ROOT" PREFIX=/usr | grep -o '>[^ ;&|)]*' |
	grep -v -e "^>$ROOT/" -e '^>/dev/null$' -e '^>$' || true)
[ -z "$outside" ] || fail "make install writes outside DESTDIR: $outside"
ok "make install writes only under DESTDIR"

# ---- 1. the files and their modes -------------------------------------------
multiarch=$(${CC:-cc} -print-multiarch 2>/dev/null || true)
[ -n "$multiarch" ] || multiarch=x86_64-linux-gnu
tcmu_dir=/usr/lib/$multiarch/tcmu-runner
nbdkit_dir=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
[ -n "$nbdkit_dir" ] || fail "nbdkit --dump-config gives no plugindir"

expected="755 /usr/sbin/flashd
755 /usr/bin/flashctl
644 $tcmu_dir/handler_flashd.so
644 $nbdkit_dir/nbdkit-flashd-plugin.so
644 /lib/systemd/system/flashd.service
644 /usr/share/man/man8/flashd.8
644 /usr/share/man/man8/flashctl.8
644 /usr/share/man/man5/flashd.conf.5
644 /usr/share/man/man1/nbdkit-flashd-plugin.1
644 /usr/share/doc/flashd/flashd.conf.example
644 /usr/share/doc/flashd/README.md
644 /usr/share/doc/flashd/README.deploy.md
755 /usr/share/doc/flashd/examples/iscsi-lun.sh
644 /usr/share/doc/flashd/examples/prometheus/prometheus.yml
644 /usr/share/doc/flashd/examples/prometheus/flashd-alerts.yml
644 /usr/share/doc/flashd/examples/prometheus/flashd-alerts.test.yml
644 /etc/flashd/flashd.conf
$(for f in doc/*.md doc/*.png; do echo "644 /usr/share/doc/flashd/$f"; done)"

installed=$(cd "$ROOT" && find . ! -type d -printf '%m /%P\n' | sort)
if [ "$installed" != "$(sort <<<"$expected")" ]; then
	diff <(sort <<<"$expected") <(echo "$installed") || true
	fail "the installed tree differs from what was expected (< expected, > installed)"
fi
cmp -s conf/flashd.conf "$ROOT/etc/flashd/flashd.conf" || fail "/etc/flashd/flashd.conf is not conf/flashd.conf"
cmp -s conf/flashd.conf "$ROOT/usr/share/doc/flashd/flashd.conf.example" || fail "flashd.conf.example differs"
cmp -s build/flashd "$ROOT/usr/sbin/flashd" || fail "the installed flashd is not build/flashd"
ok "$(wc -l <<<"$installed") files, each with its mode, nothing else"

# ---- 2. man pages -----------------------------------------------------------
MAN=$ROOT/usr/share/man
for page in man8/flashd.8 man8/flashctl.8 man5/flashd.conf.5 man1/nbdkit-flashd-plugin.1; do
	f=$MAN/$page
	MANWIDTH=80 man --warnings -l "$f" >"$T/page.txt" 2>"$T/page.err" || fail "man -l $page failed"
	[ ! -s "$T/page.err" ] || { cat "$T/page.err"; fail "man --warnings -l $page warns"; }
	groff -man -ww -z "$f" 2>"$T/page.err" || fail "groff -man $page failed"
	[ ! -s "$T/page.err" ] || { cat "$T/page.err"; fail "groff -ww warns on $page"; }
	for sec in NAME SYNOPSIS DESCRIPTION FILES "SEE ALSO"; do
		grep -q "^$sec" "$T/page.txt" || fail "$page has no $sec section"
	done
	grep -q '@VERSION@' "$f" && fail "$page still says @VERSION@"
	# rendered text, hyphenation at line ends undone, for the word checks
	MANWIDTH=1000 man -l "$f" 2>/dev/null | sed 's/\xe2\x80\x90/-/g' >"$T/${page##*/}.txt"
done
ok "man -l renders flashd(8), flashctl(8), flashd.conf(5), nbdkit-flashd-plugin(1) without warnings"

# every long option of --help appears in the page (as --name)
check_words() { # page what words...
	local page=$1 what=$2 w missing=
	shift 2
	for w in "$@"; do
		grep -qF -- "$w" "$T/$page.txt" || missing="$missing $w"
	done
	[ -z "$missing" ] || fail "$page does not document these $what:$missing"
}
F=$ROOT/usr/sbin/flashd
C=$ROOT/usr/bin/flashctl
mapfile -t fopts < <("$F" --help | grep -E '^ +-' | grep -o -- '--[a-z][a-z-]*' | sort -u)
[ ${#fopts[@]} -ge 15 ] || fail "flashd --help lists only ${#fopts[@]} options?"
check_words flashd.8 "flashd options" "${fopts[@]}"
for s in SIGTERM SIGHUP "EXIT STATUS" /etc/flashd/flashd.conf /var/lib/flashd; do
	check_words flashd.8 "topics" "$s"
done
mapfile -t copts < <({ "$C" --help; "$C" bench --help; } | grep -o -- '--[a-z][a-z-]*' | sort -u)
check_words flashctl.8 "flashctl options" "${copts[@]}"
mapfile -t verbs < <("$C" --help | sed -n 's/^ *flashctl \([a-z][a-z]*\).*/\1/p' | sort -u)
[ ${#verbs[@]} -ge 12 ] || fail "flashctl --help lists only ${#verbs[@]} verbs?"
for v in "${verbs[@]}"; do
	grep -qE "^ +$v( |$)" "$T/flashctl.8.txt" || fail "flashctl.8 has no entry for the verb $v"
done
# the keys of the example and of the key table (server/config_keys.c's
# cfg_keys, one row per key), so that a key the example leaves out is
# documented too
mapfile -t tkeys < <(sed -n "s/^\t[A-Z]*('[sd]', \"\([a-z_]*\)\".*/\1/p" server/config_keys.c | sort -u)
[ ${#tkeys[@]} -ge 50 ] || fail "server/config_keys.c's table has only ${#tkeys[@]} keys?"
mapfile -t keys < <({ sed -n 's/^#\{0,1\}\([a-z_][a-z_]*\) = .*/\1/p' conf/flashd.conf
			printf '%s\n' "${tkeys[@]}"; } | sort -u)
[ ${#keys[@]} -ge 20 ] || fail "conf/flashd.conf has only ${#keys[@]} keys?"
for k in "${keys[@]}"; do
	grep -qE "^ +$k( |$)" "$T/flashd.conf.5.txt" || fail "flashd.conf.5 has no entry for the key $k"
done
check_words flashd.conf.5 "sections" "[server]" "[card NAME]" "[dimm NAME]"
# the plugin's page: nbdkit's layout, an entry for each parameter of its --help
for sec in PARAMETERS EXAMPLES; do
	grep -q "^$sec" "$T/nbdkit-flashd-plugin.1.txt" || fail "nbdkit-flashd-plugin.1 has no $sec section"
done
check_words nbdkit-flashd-plugin.1 "synopsis" "nbdkit flashd [image=]PATH"
mapfile -t params < <(nbdkit "$ROOT$nbdkit_dir/nbdkit-flashd-plugin.so" --help | sed -n 's/^\([a-z][a-z-]*\)=.*/\1/p')
[ ${#params[@]} -ge 7 ] || fail "the nbdkit plugin's --help lists only ${#params[@]} parameters?"
for k in "${params[@]}"; do
	grep -qE "^ +\[?$k\]?=" "$T/nbdkit-flashd-plugin.1.txt" || fail "nbdkit-flashd-plugin.1 has no entry for the parameter $k"
done
ok "the pages name ${#fopts[@]} flashd options, ${#verbs[@]} flashctl verbs and ${#copts[@]} options, ${#keys[@]} configuration keys, ${#params[@]} plugin parameters"

# ---- 3. the installed programs run ------------------------------------------
[ "$("$F" --version)" = "flashd $(sed -n 's/^#define FLASHD_VERSION "\(.*\)"/\1/p' server/version.h)" ] ||
	fail "installed flashd --version says '$("$F" --version)'"
"$C" --version | grep -q '^flashctl ' || fail "installed flashctl --version"
"$F" --check-config --config "$ROOT/etc/flashd/flashd.conf" --state-dir "$T/state" >"$T/check.out" ||
	{ cat "$T/check.out"; fail "the installed flashd.conf does not check"; }
nbdkit "$ROOT$nbdkit_dir/nbdkit-flashd-plugin.so" --dump-plugin >"$T/plugin.out" 2>&1 ||
	{ cat "$T/plugin.out"; fail "nbdkit cannot load the installed plugin"; }
grep -q '^name=flashd' "$T/plugin.out" || fail "the installed plugin's name is not flashd"
ok "installed flashd and flashctl run (--version), the installed config checks, nbdkit loads the plugin"

# ---- 4. the unit ------------------------------------------------------------
UNIT=$ROOT/lib/systemd/system/flashd.service
doc=$(sed -n 's/^Documentation=//p' "$UNIT")
[ -n "$doc" ] || fail "the unit has no Documentation="
for d in $doc; do
	case $d in
	man:*\(*\))
		n=${d#man:}; sec=${n##*(}; sec=${sec%)}; n=${n%(*}
		[ -f "$MAN/man$sec/$n.$sec" ] || fail "Documentation=$d: no $MAN/man$sec/$n.$sec installed"
		;;
	*) fail "Documentation=$d is not an installed man page" ;;
	esac
done
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$UNIT")
[ "$exe" = /usr/sbin/flashd ] || fail "ExecStart runs $exe, not /usr/sbin/flashd"
[ -x "$ROOT$exe" ] || fail "ExecStart's $exe is not installed"
if part_requires "4. systemd-analyze verify of the unit" systemd-analyze; then
	# verify looks for ExecStart's binary and the man pages on this host:
	# point both into DESTDIR
	mkdir -p "$T/unit"
	sed "s|^ExecStart=$exe|ExecStart=$ROOT$exe|" "$UNIT" >"$T/unit/flashd.service"
	MANPATH=$MAN systemd-analyze verify "$T/unit/flashd.service" >"$T/verify.out" 2>&1 ||
		{ cat "$T/verify.out"; fail "systemd-analyze verify failed"; }
	[ ! -s "$T/verify.out" ] || { cat "$T/verify.out"; fail "systemd-analyze verify warns"; }
	ok "unit: Documentation= $doc installed; systemd-analyze verify is clean"
fi

# ---- 5. uninstall -----------------------------------------------------------
"${MAKE[@]}" uninstall DESTDIR="$ROOT" PREFIX=/usr >"$T/uninstall.log" 2>&1 ||
	{ cat "$T/uninstall.log"; fail "make uninstall failed"; }
left=$(cd "$ROOT" && find . ! -type d)
[ -z "$left" ] || { echo "$left"; fail "make uninstall left files behind"; }
[ ! -e "$ROOT/usr/share/doc/flashd" ] || fail "make uninstall left the doc directory"
[ ! -e "$ROOT/etc/flashd" ] || fail "make uninstall left /etc/flashd"
ok "make uninstall removes every file make install put there"

# a configuration that was there before: install keeps it, uninstall too
ROOT2=$T/root2
mkdir -p "$ROOT2/etc/flashd"
printf '[dimm mine]\npreset = test-1g\n' >"$ROOT2/etc/flashd/flashd.conf"
chmod 0640 "$ROOT2/etc/flashd/flashd.conf"
cp -p "$ROOT2/etc/flashd/flashd.conf" "$T/mine.conf"
"${MAKE[@]}" install DESTDIR="$ROOT2" PREFIX=/usr >"$T/install2.log" 2>&1 ||
	{ cat "$T/install2.log"; fail "make install over an existing config failed"; }
cmp -s "$T/mine.conf" "$ROOT2/etc/flashd/flashd.conf" || fail "make install replaced an existing flashd.conf"
grep -q "exists: kept" "$T/install2.log" || fail "make install did not say it kept the existing flashd.conf"
"${MAKE[@]}" uninstall DESTDIR="$ROOT2" PREFIX=/usr >"$T/uninstall2.log" 2>&1 ||
	{ cat "$T/uninstall2.log"; fail "make uninstall failed"; }
left=$(cd "$ROOT2" && find . ! -type d -printf '%m /%P\n')
[ "$left" = "640 /etc/flashd/flashd.conf" ] || { echo "$left"; fail "uninstall left other files, or not the config"; }
cmp -s "$T/mine.conf" "$ROOT2/etc/flashd/flashd.conf" || fail "make uninstall changed an existing flashd.conf"
ok "an existing /etc/flashd/flashd.conf survives install and uninstall unchanged"

# ---- 6. the default PREFIX --------------------------------------------------
ROOT3=$T/root3
"${MAKE[@]}" install DESTDIR="$ROOT3" >"$T/install3.log" 2>&1 ||
	{ cat "$T/install3.log"; fail "make install with the default PREFIX failed"; }
for f in /usr/local/sbin/flashd /usr/local/bin/flashctl /usr/local/lib/systemd/system/flashd.service \
	/usr/local/share/man/man8/flashd.8 /usr/local/share/man/man8/flashctl.8 \
	/usr/local/share/man/man5/flashd.conf.5 /usr/local/share/man/man1/nbdkit-flashd-plugin.1 \
	/usr/local/share/doc/flashd/flashd.conf.example \
	/etc/flashd/flashd.conf "$tcmu_dir/handler_flashd.so" "$nbdkit_dir/nbdkit-flashd-plugin.so"; do
	[ -f "$ROOT3$f" ] || fail "PREFIX=/usr/local: $f not installed"
done
grep -q '^ExecStart=/usr/local/sbin/flashd ' "$ROOT3/usr/local/lib/systemd/system/flashd.service" ||
	fail "PREFIX=/usr/local: the unit's ExecStart does not name /usr/local/sbin/flashd"
"${MAKE[@]}" uninstall DESTDIR="$ROOT3" >/dev/null 2>&1 || fail "make uninstall (default PREFIX) failed"
left=$(cd "$ROOT3" && find . ! -type d)
[ -z "$left" ] || { echo "$left"; fail "make uninstall (default PREFIX) left files behind"; }
ok "default PREFIX=/usr/local: programs, unit (ExecStart /usr/local/sbin/flashd), man pages; uninstall clean"

# ---- 7. make run ------------------------------------------------------------
# what it would do on a clean build tree (make -n runs nothing, creates nothing)
CLEAN=$T/clean-build
"${MAKE[@]}" -n run BUILD="$CLEAN" >"$T/run-n.out" 2>&1 || { cat "$T/run-n.out"; fail "make -n run failed"; }
built=$(sed -n "s|.* -o $CLEAN/\([^ ]*\) .*|\1|p" "$T/run-n.out" | grep -v '^obj/' | sort | paste -sd' ')
[ "$built" = "flashctl flashd" ] || fail "make run links '$built', want 'flashctl flashd' only"
! grep -qE 'tests/|-fsanitize|nbdkit-flashd-plugin|handler_flashd' "$T/run-n.out" ||
	fail "make run builds more than it runs: $(grep -m1 -E 'tests/|-fsanitize|nbdkit-flashd-plugin|handler_flashd' "$T/run-n.out")"
[ "$(tail -n1 "$T/run-n.out")" = "$CLEAN/flashd --foreground" ] ||
	fail "make run's last command: '$(tail -n1 "$T/run-n.out")', want '$CLEAN/flashd --foreground'"
"${MAKE[@]}" -n run BUILD="$CLEAN" LISTEN="0.0.0.0:10809 [::1]:10810" >"$T/run-n2.out" 2>&1 ||
	{ cat "$T/run-n2.out"; fail "make -n run LISTEN=... failed"; }
want="$CLEAN/flashd --foreground --listen 0.0.0.0:10809 --listen [::1]:10810"
[ "$(tail -n1 "$T/run-n2.out")" = "$want" ] || fail "make run LISTEN=...: '$(tail -n1 "$T/run-n2.out")', want '$want'"
[ ! -e "$CLEAN" ] || fail "make -n run created $CLEAN"
ok "make run builds flashd and flashctl only, runs flashd --foreground; LISTEN gives one --listen per address"

echo "PASS"
