#!/bin/bash
# timeout: 300
# quick
# Strict configuration (server/config.c, common/parse.c):
#   1. every bad configuration below makes flashd exit with status 2 within
#      10 s, before it opens anything (the state directory is as it was: no
#      image created, grown or formatted, no socket), with an error that
#      names the key (or section) and the bad value: loose numbers (nan%,
#      inf%, 0%, 150%, 20abc, 512x, a capacity of 80 bytes, op nan/inf,
#      "10 connections", sector_size 4096x), bad listen ports (in the file
#      and with --listen), a repeated [dimm] section or key, and two ioDimms
#      on the same image file (./x.img and x.img, a symlink, a hard link, a
#      dangling symlink to the other's future image);
#   2. a valid configuration with sizes (512M, 4K), percentages (80%, op
#      30%), indented keys and a [dimm] section without keys starts, exports
#      what it says, and stops cleanly; with fault_injection = yes it warns
#      at start and status shows it (text under the first line, JSON), not
#      without; listen = :PORT (every address, IPv6 and IPv4 on one socket)
#      serves over 127.0.0.1 and ::1;
#   3. the hardening keys (max_connections_per_address, idle_timeout,
#      buffer_limit, max_handshakes, idle_timeout_busy, default_export
#      naming no export) refuse bad values; a relative tls_psk in the file is
#      found next to the file, from any working directory.
source "$(dirname "$0")/functions.sh"

# snapshot of a directory: every path with its size (empty if it is missing)
snapshot() {
	[ -d "$1" ] || return 0
	(cd "$1" && find . -printf '%p %s %y\n' | sort)
}

# expect_bad WHAT NEEDLE... [-- FLASHD_ARGS...] <CONFIG
#   flashd --config CONFIG must exit 2 within 10 s, leave $T/bad-state as it
#   found it, and print every NEEDLE (fixed strings).  The caller may prepare
#   $T/bad-state before (it is recreated empty if PREPARED is not set).
expect_bad() {
	local what=$1 needles=() args=() conf=$T/bad.conf state=$T/bad-state rc=0 t0 before after
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		needles+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	args=("$@")
	if [ -z "${PREPARED:-}" ]; then
		rm -rf "$state"
		mkdir -p "$state"
	fi
	cat >"$conf"
	before=$(snapshot "$state")
	t0=$EPOCHREALTIME
	timeout 10 "$FLASHD" --foreground --config "$conf" --state-dir "$state" --preset test-1g \
		--timing off "${args[@]}" >"$T/bad.out" 2>&1 || rc=$?
	after=$(snapshot "$state")
	echo "$what: exit $rc after $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s: $(cat "$T/bad.out")"
	[ $rc -eq 2 ] || fail "$what: flashd exited with status $rc, want 2"
	[ "$before" = "$after" ] || fail "$what: the state directory changed:
before:
$before
after:
$after"
	local n
	for n in "${needles[@]}"; do
		grep -qF -- "$n" "$T/bad.out" || fail "$what: the error does not mention '$n'"
	done
}

# ---- 1. bad configurations ---------------------------------------------------------
dimm_with() {
	printf '[dimm a]\npreset = test-1g\n%s\n' "$1"
}

for v in 'nan%' 'inf%' '0%' '150%' '-5%' '20abc' '512x' '1.3K' '1e9' '0x100000' '80' '512 M' '99999999999T'; do
	dimm_with "capacity = $v" | expect_bad "capacity = $v" "capacity" "'$v'"
done
dimm_with "capacity = 80" | expect_bad "capacity = 80 (bytes)" "capacity" "'80'" "did you mean 80%?"
for v in nan inf -inf 3 95 20x '20 %'; do
	dimm_with "op = $v" | expect_bad "op = $v" "op" "'$v'"
done
for v in 4096x 4095 1024 0 -512; do
	dimm_with "sector_size = $v" | expect_bad "sector_size = $v" "sector_size" "'$v'"
done
dimm_with "flush_parity = maybe" | expect_bad "flush_parity = maybe" "flush_parity" "'maybe'"
for kv in 'max_connections = 10 connections' 'max_connections = 0' 'max_connections = -1' \
	'max_connections = 99999999999999999999' 'handshake_timeout = 0' 'handshake_timeout = 1.5' \
	'poll_us = 10001' 'poll_us = nan'; do
	key=${kv%% =*}
	val=${kv#*= }
	printf '[server]\n%s\n[dimm a]\n' "$kv" | expect_bad "$kv" "$key" "'$val'"
done
for v in 127.0.0.1:99999 127.0.0.1:87546 127.0.0.1:port 127.0.0.1:10809x 127.0.0.1:0 \
	127.0.0.1 '[::1]' '::1:10809' '[127.0.0.1]:10809' '300.0.0.1:10809' 'a host:10809' ':99999'; do
	printf '[server]\nlisten = %s\n[dimm a]\n' "$v" | expect_bad "listen = $v" "listen" "'$v'"
done
# on the command line, with and without a file
for v in 127.0.0.1:99999 127.0.0.1:87546; do
	printf '[dimm a]\n' | expect_bad "--listen $v" "listen" "'$v'" -- --listen "$v"
done
rc=0
timeout 10 "$FLASHD" --foreground --state-dir "$T/cli-state" --listen 127.0.0.1:99999 >"$T/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--listen 127.0.0.1:99999 without a file: exit $rc, want 2"
grep -qF "'127.0.0.1:99999'" "$T/bad.out" || fail "--listen 127.0.0.1:99999: no error naming it: $(cat "$T/bad.out")"
[ ! -e "$T/cli-state" ] || fail "--listen 127.0.0.1:99999: the state directory was created"
ok "loose numbers and bad listen addresses are refused before anything is opened"
# a well-formed address that cannot be bound (not on this host: TEST-NET-1)
# is reported before any ioDimm opens: no image is created
rm -rf "$T/bind-state"
mkdir -p "$T/bind-state"
rc=0
timeout 20 "$FLASHD" --foreground --no-config --state-dir "$T/bind-state" --preset test-1g --timing off \
	--listen 192.0.2.1:10809 >"$T/bind.out" 2>&1 || rc=$?
cat "$T/bind.out"
[ $rc -eq 1 ] || fail "--listen 192.0.2.1:10809: exit $rc, want 1"
grep -q "192.0.2.1:10809" "$T/bind.out" || fail "the error does not name the address"
grep -q "formatting\|opened in" "$T/bind.out" && fail "ioDimms were opened before the listen address failed"
[ -z "$(ls "$T/bind-state")" ] || fail "the state directory changed: $(ls "$T/bind-state")"
ok "an address that cannot be bound is reported before any image is opened"

printf '[dimm a]\npreset = test-1g\n[dimm b]\n[dimm a]\nop = 20\n' |
	expect_bad "duplicate [dimm a]" "[dimm a]" ":4:" "line 1"
printf '[dimm a]\ncapacity = 80%%\n\n[dimm a]\n' | expect_bad "duplicate empty [dimm a]" "[dimm a]" ":4:"
printf '[server]\npoll_us = 10\n[server]\n[dimm a]\n' | expect_bad "duplicate [server]" "[server]" ":3:"
printf '[card c]\n[card c]\n[dimm a]\n' | expect_bad "duplicate [card c]" "[card c]" ":2:"
printf '[dimm a]\ncapacity = 80%%\ncapacity = 1G\n' | expect_bad "repeated key" "capacity" "'1G'" "line 2"
printf '[dimm a]\ncapacity = 80%%\nop = 20\n' | expect_bad "capacity and op" "op" "'20'" "not both"
printf '[dimm]\n' | expect_bad "[dimm] without a name" "[dimm]"
printf '[card duo0]\n[dimm a]\ncard = duo1\n' | expect_bad "card without a section" "card" "'duo1'" "no [card duo1]"
printf '[dimm ../a]\n' | expect_bad "[dimm ../a]" "[dimm ../a]"
# a file that names no ioDimm is a mistake, not the embedded pair
printf '[server]\nverbose = yes\n' | expect_bad "only [server]" "no [dimm NAME] section"
printf '' | expect_bad "an empty file" "no [dimm NAME] section"
ok "repeated sections and keys are refused"

# backend = sim (image, preset) or mtd (device), in any order of the keys
printf '[dimm a]\nbackend = ubi\n' | expect_bad "backend = ubi" "backend" "'ubi'" "sim" "mtd"
printf '[dimm a]\nbackend = mtd\n' | expect_bad "mtd without device" "[dimm a]" "device = /dev/mtdN"
printf '[dimm a]\nbackend = mtd\nimage = a.img\n' | expect_bad "mtd, then image" "image" "'a.img'" "device"
printf '[dimm a]\nimage = a.img\nbackend = mtd\n' | expect_bad "image, then mtd" "backend" "'mtd'" "not image"
printf '[dimm a]\nbackend = mtd\npreset = test-1g\n' | expect_bad "mtd, then preset" "preset" "no preset"
printf '[dimm a]\npreset = test-1g\ndevice = /dev/mtd0\nbackend = mtd\n' |
	expect_bad "preset, then mtd" "backend" "'mtd'" "no preset"
printf '[dimm a]\ndevice = mtd0\n' | expect_bad "relative device" "device" "'mtd0'" "absolute"
printf '[dimm a]\nbackend = sim\ndevice = /dev/mtd0\n' | expect_bad "sim, then device" "device" "backend = mtd"
printf '[dimm a]\ndevice = /dev/mtd0\nimage = a.img\n' | expect_bad "device and image" "image" "not both"
printf '[dimm a]\ndevice = /dev/mtd0\n[dimm b]\ndevice = /dev/./mtd0\n' |
	expect_bad "two ioDimms on one device" "[dimm a]" "[dimm b]" "same file"
# a device that is not raw NAND: refused when it is opened, nothing created
rm -rf "$T/mtd-state"
mkdir -p "$T/mtd-state"
printf '[dimm a]\ndevice = /dev/null\n' >"$T/mtd.conf"
"$FLASHD" --foreground --config "$T/mtd.conf" --state-dir "$T/mtd-state" --check-config >"$T/mtd.out" 2>&1 ||
	fail "--check-config with device = /dev/null: $(cat "$T/mtd.out")"
grep -qF "[dimm a] export 'a', raw NAND device /dev/null" "$T/mtd.out" || fail "--check-config: $(cat "$T/mtd.out")"
rc=0
timeout 20 "$FLASHD" --foreground --config "$T/mtd.conf" --state-dir "$T/mtd-state" --unix "$T/mtd.sock" \
	>"$T/mtd.out" 2>&1 || rc=$?
cat "$T/mtd.out"
[ $rc -ne 0 ] || fail "flashd served /dev/null as raw NAND"
grep -qF "/dev/null is not an MTD device" "$T/mtd.out" || fail "the error does not say /dev/null is not an MTD device"
ok "backend and device: sim and mtd keys checked in any order; a device that is not MTD is refused"

printf '[dimm a]\nimage = ./x.img\n[dimm b]\nimage = x.img\n' |
	expect_bad "./x.img and x.img" "x.img of [dimm a]" "x.img of [dimm b]" "same file"
printf '[dimm a]\n[dimm b]\nimage = sub/../a.img\n' |
	expect_bad "a.img and sub/../a.img" "[dimm a]" "[dimm b]" "same file"
# the image exists, the other is a symlink to it; a hard link; a dangling
# symlink to the other's image that does not exist yet
rm -rf "$T/bad-state"
mkdir -p "$T/bad-state/sub"
: >"$T/bad-state/x.img"
ln -s x.img "$T/bad-state/link.img"
ln -s ../x.img "$T/bad-state/sub/link.img"
ln "$T/bad-state/x.img" "$T/bad-state/hard.img"
ln -s later.img "$T/bad-state/dangling.img"
ln -s "$T/bad-state" "$T/state-link"
export PREPARED=1
printf '[dimm a]\nimage = x.img\n[dimm b]\nimage = link.img\n' |
	expect_bad "symlink" "x.img of [dimm a]" "link.img of [dimm b]" "same file"
printf '[dimm a]\nimage = sub/link.img\n[dimm b]\nimage = %s/x.img\n' "$T/state-link" |
	expect_bad "symlink in a directory, absolute path through a symlinked directory" \
		"sub/link.img of [dimm a]" "state-link/x.img of [dimm b]" "same file"
printf '[dimm a]\nimage = hard.img\n[dimm b]\nimage = x.img\n' |
	expect_bad "hard link" "hard.img of [dimm a]" "x.img of [dimm b]" "same file"
printf '[dimm a]\nimage = later.img\n[dimm b]\nimage = dangling.img\n' |
	expect_bad "dangling symlink" "later.img of [dimm a]" "dangling.img of [dimm b]" "same file"
unset PREPARED
ok "two ioDimms on one image file are refused, however it is named"

# ---- 2. a valid configuration -----------------------------------------------------
FLASHD_PORT=$(free_port)
cat >"$T/good.conf" <<EOF
[server]
listen = 127.0.0.1:$FLASHD_PORT
max_connections = 64
handshake_timeout = 10
poll_us = 0
fault_injection = yes

[dimm a]
preset = test-1g
	capacity = 512M   ; indented, with a comment
	sector_size = 4K
[dimm b]
capacity = 80%
[dimm c]
op = 30%
[dimm d]
EOF
start_flashd --config "$T/good.conf" --preset test-1g --timing off
flashd_status | $PYTHON -c '
import json, sys
d = {x["name"]: x for x in json.load(sys.stdin)["dimms"]}
assert sorted(d) == ["a", "b", "c", "d"], sorted(d)
f = {n: x["format"] for n, x in d.items()}
assert f["a"]["capacity_bytes"] == 512 << 20 and f["a"]["sector_size"] == 4096, f["a"]
assert abs(f["b"]["op_percent"] - 36) < 0.1 and f["b"]["sector_size"] == 512, f["b"]
assert abs(f["c"]["op_percent"] - 30) < 0.1, f["c"]
assert abs(f["d"]["op_percent"] - 20) < 0.1, f["d"]
' || fail "the exports are not formatted as configured"
[ "$(nbdinfo --size "nbd://127.0.0.1:$FLASHD_PORT/a")" = $((512 << 20)) ] || fail "export a is not 512 MiB"
# fault_injection = yes lets the control socket break the ioDimms: said at start and in status
grep -qE "flashd\[warning\]: \[server\] fault_injection = yes: whoever may use the control socket .* can break" \
	"$T/flashd.log" || fail "no start-up warning for fault_injection = yes"
"$FLASHCTL" status --control "$FLASHD_CTL" >"$T/fi-status.txt" || true
sed -n 2p "$T/fi-status.txt" | grep -q "^Fault injection: on (\[server\] fault_injection = yes)" ||
	{ cat "$T/fi-status.txt"; fail "flashctl status does not show fault injection on under its first line"; }
[ "$(flashd_status | $PYTHON -c 'import json, sys; print(json.load(sys.stdin)["fault_injection"])')" = True ] ||
	fail "status JSON: fault_injection is not true"
stop_flashd
check_flashd_log
ok "a valid configuration (512M, 4K, 80%, op 30%, an empty [dimm d]) starts and stops; fault_injection = yes is warned about and shown in status"

# ---- 2b. listen = :PORT: every address, IPv6 and IPv4 on one socket ------------------
P=$(free_port)
printf '[server]\nlisten = :%s\n[dimm a]\npreset = test-1g\n' "$P" >"$T/dual.conf"
"$FLASHD" --check-config --config "$T/dual.conf" --state-dir "$T/dualstate" >"$T/dual.out" 2>&1 ||
	fail "listen = :PORT refused: $(cat "$T/dual.out")"
"$FLASHD" --foreground --config "$T/dual.conf" --state-dir "$T/dualstate" --timing off \
	--pidfile "$T/dual.pid" >>"$T/flashd.log" 2>&1 &
pid=$!
track_pid $pid
wait_ready $pid "$T/dual.pid" "flashd with listen = :$P"
# fault_injection off (the default): not in status
"$FLASHCTL" status --control "$T/dualstate/flashd.ctl" | grep -q "Fault injection" &&
	fail "flashctl status shows fault injection while it is off"
[ "$("$FLASHCTL" status --json --control "$T/dualstate/flashd.ctl" |
	$PYTHON -c 'import json, sys; print(json.load(sys.stdin)["fault_injection"])')" = False ] ||
	fail "status JSON: fault_injection is not false by default"
grep -q "listening on :$P (every address, IPv6 and IPv4)" "$T/flashd.log" ||
	grep -q "listening on :$P (every IPv4 address (no IPv6 here))" "$T/flashd.log" ||
	fail "no dual-stack listener in the log"
size=$(nbdinfo --size "nbd://127.0.0.1:$P/a") && [ "$size" -gt 0 ] || fail "export a over 127.0.0.1 (listen = :$P)"
via="127.0.0.1"
if ip -6 addr show dev lo 2>/dev/null | grep -q '::1/128'; then
	[ "$(nbdinfo --size "nbd://[::1]:$P/a")" = "$size" ] || fail "export a over ::1 (listen = :$P)"
	via="$via and ::1"
fi
kill -TERM $pid
wait $pid || fail "flashd with listen = :$P: exit status $?"
ok "listen = :$P serves every address (checked over $via)"

# ---- 3. hardening keys, and TLS paths relative to the configuration file ------------
expect_bad "max_connections_per_address" "max_connections_per_address" "'lots'" <<EOF
[server]
max_connections_per_address = lots
EOF
expect_bad "idle_timeout" "idle_timeout" "'-1'" <<EOF
[server]
idle_timeout = -1
EOF
expect_bad "buffer_limit" "buffer_limit" "'1M'" "64M to 1T" <<EOF
[server]
buffer_limit = 1M
EOF
expect_bad "default_export" "bad.conf:2: [server] default_export = 'dimm9': no export has that name" \
	"(the exports: dimm0, x)" <<EOF
[server]
default_export = dimm9
[dimm dimm0]
[dimm d1]
export = x
EOF
expect_bad "max_handshakes" "max_handshakes" "'0'" "from 1 to 1000000" <<EOF
[server]
max_handshakes = 0
EOF
expect_bad "idle_timeout_busy" "idle_timeout_busy" "'ten'" <<EOF
[server]
idle_timeout_busy = ten
EOF
expect_bad "default_export empty" "default_export" "the export name is empty" <<EOF
[server]
default_export =
EOF
mkdir -p "$T/etc/keys"
tls_psk_line alice >"$T/etc/keys/keys.psk"
cat >"$T/etc/flashd.conf" <<EOF
[server]
tls = allowed
tls_psk = keys/keys.psk
max_connections_per_address = 4
idle_timeout = 60
buffer_limit = 256M
[dimm a]
preset = test-1g
EOF
# from another working directory: keys/keys.psk is next to the file
(cd / && "$FLASHD" --check-config --config "$T/etc/flashd.conf" --state-dir "$T/cfgstate") >"$T/rel.out" 2>&1 ||
	fail "a tls_psk path relative to the configuration file was not found: $(cat "$T/rel.out")"
sed -i 's|keys/keys.psk|keys/missing.psk|' "$T/etc/flashd.conf"
rc=0
(cd / && "$FLASHD" --check-config --config "$T/etc/flashd.conf" --state-dir "$T/cfgstate") >"$T/rel.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "a missing relative tls_psk: exit $rc, want 2"
grep -qF "$T/etc/keys/missing.psk" "$T/rel.out" ||
	fail "the error does not name the missing key file by its full path: $(cat "$T/rel.out")"
ok "hardening keys checked; tls_psk relative to the configuration file's directory"
