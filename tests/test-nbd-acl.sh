#!/bin/bash
# test-nbd-acl.sh - access control per export ([dimm] allow, allow_ro,
# list_denied), socket and file permissions, the control socket's check.
#
#   0. configuration errors (bad CIDR, host bits, unknown keyword, tls:CN=
#      without tls_verify_peer, bad mode, unknown group) name FILE:LINE, in
#      --check-config too, and nothing is created; the start-up warning for
#      an export without rules behind a non-loopback listener without TLS
#   1. networks: listeners on 127.0.0.1, [::1], [::ffff:127.0.0.1] and a
#      unix socket; dimm0 allows 127.0.0.1/32, unix and tls:alice: ::1 gets
#      NBD_REP_ERR_POLICY and does not see it in nbdinfo --list, 127.0.0.1
#      and the IPv4-mapped client (matched as 127.0.0.1) do
#   2. read-only rule (dimm1: allow_ro = 127.0.0.0/8): reads work, writes
#      get EPERM from flashd (libnbd strict mode off) and qemu-io refuses
#   3. TLS identities over ::1 (PSK): alice allowed, bob denied
#   3b. default_export = dimm0: the empty name is dimm0; while dimm0 is
#      detached it is refused (INFO, GO, META_CONTEXT: NBD_REP_ERR_UNKNOWN;
#      EXPORT_NAME: closed), never served by dimm1; unset (reload): refused,
#      the message naming only the exports the client may use; a client
#      dimm0's rules refuse gets NBD_REP_ERR_POLICY for INFO and
#      LIST/SET_META_CONTEXT (before STRUCTURED_REPLY too), detached or not,
#      and no message names dimm0 when it sent the empty name
#   4. control socket: `nobody` gets 403 for detach and reload (nothing is
#      reloaded) and 200 for status; socket modes and groups as configured;
#      a refused path with ESC and CR is logged with them escaped
#   5. images 0600, a state directory flashd makes 0700
# timeout: 300
# quick
source "$(dirname "$0")/functions.sh"
requires psktool

mkdir -p "$T/pub"
chmod 0711 "$T"
chmod 0755 "$T/pub"
psktool -u alice -p "$T/keys.psk" >/dev/null
psktool -u bob -p "$T/keys.psk" >/dev/null
grep '^alice:' "$T/keys.psk" >"$T/alice.psk"
grep '^bob:' "$T/keys.psk" >"$T/bob.psk"
ok "keys made"

# ---- 0. configuration errors ----------------------------------------------------------
bad_rule() { # bad_rule NAME 'allow line' EXPECTED
	printf '[dimm dimm0]\npreset = test-1g\n%s\n' "$2" >"$T/$1.conf"
	conf_err "$1" "$1.conf:3: [dimm dimm0] ${2%% =*} = '${2#*= }': $3"
}
bad_rule cidr 'allow = 127.0.0.1 10.0.0.0/33' "'10.0.0.0/33': the prefix length must be a number from 0 to 32"
bad_rule hostbits 'allow_ro = 10.1.2.3/8' "'10.1.2.3/8' has host bits set (the network is 10.0.0.0/8)"
bad_rule keyword 'allow = unix everyone' "'everyone' is not an IPv4 or IPv6 address, nor all, unix or tls:NAME"
bad_rule v6 'allow = 2001:db8::/129' "'2001:db8::/129': the prefix length must be a number from 0 to 128"
bad_rule tlskind 'allow = tls:O=acme' "'tls:O=acme': unknown identity kind"
bad_rule listd 'list_denied = maybe' "list_denied must be yes or no"
printf '[server]\ntls_psk = %s\n[dimm dimm0]\npreset = test-1g\nallow = 127.0.0.1\nallow = tls:CN=host1\n' \
	"$T/keys.psk" >"$T/cn.conf"
conf_err cn "cn.conf:6: [dimm dimm0]: 'tls:CN=host1' needs tls_verify_peer = yes"
printf '[dimm dimm0]\npreset = test-1g\n\nallow = tls:alice\n' >"$T/noid.conf"
conf_err noid "noid.conf:4: [dimm dimm0]: a tls: entry, but no TLS identity can be proven"
printf '[server]\nunix_mode = 0999\n[dimm dimm0]\npreset = test-1g\n' >"$T/mode.conf"
conf_err mode "mode.conf:2: [server] unix_mode = '0999': unix_mode must be an octal mode"
printf '[server]\ncontrol_group = no-such-group-here\n[dimm dimm0]\npreset = test-1g\n' >"$T/grp.conf"
conf_err grp "grp.conf:2: [server] control_group = 'no-such-group-here': no such group"
# start-up warning: no rule, a listener on every address, no TLS required
printf '[server]\nlisten = 0.0.0.0:10809\nlisten = 127.0.0.1:10810\n[dimm dimm0]\npreset = test-1g\n[dimm dimm1]\npreset = test-1g\nallow = 10.0.0.0/8\n' >"$T/open.conf"
out=$("$FLASHD" --check-config --config "$T/open.conf" 2>&1) || fail "open.conf: $out"
grep -qF "export 'dimm0' ([dimm dimm0]) has no allow rule and listener 0.0.0.0:10809 is not loopback" <<<"$out" ||
	fail "no warning for an open export: $out"
! grep -q "dimm1.*has no allow rule" <<<"$out" || fail "warning for an export with rules: $out"
! grep -q "listener 127.0.0.1:10810" <<<"$out" || fail "warning for a loopback listener: $out"
printf '[server]\nlisten = 0.0.0.0:10809 tls=required\ntls_psk = %s\n[dimm dimm0]\npreset = test-1g\n' "$T/keys.psk" >"$T/req.conf"
out=$("$FLASHD" --check-config --config "$T/req.conf" 2>&1) || fail "req.conf: $out"
! grep -q "no allow rule" <<<"$out" || fail "warning although TLS is required: $out"
ok "warning for an export without rules on a non-loopback listener without TLS"

# ---- 1. the server ---------------------------------------------------------------------
P=$(free_port)
P3=$(free_port)
cat >"$T/acl.conf" <<CONF
[server]
default_export = dimm0
tls = allowed
tls_psk = $T/keys.psk
control = $T/pub/flashd.ctl
control_mode = 0666
unix_mode = 0660
unix_group = nogroup

[dimm dimm0]
preset = test-1g
allow = 127.0.0.1/32 unix
allow = tls:alice

[dimm dimm1]
preset = test-1g
allow_ro = 127.0.0.0/8
CONF
FLASHD_PORT=$P
start_flashd --config "$T/acl.conf" --timing off --listen "[::1]:$P" --listen "[::ffff:127.0.0.1]:$P3"
CTL=$T/pub/flashd.ctl
V4="nbd://127.0.0.1:$P"
V6="nbd://[::1]:$P"
MAPPED="nbd://[::ffff:127.0.0.1]:$P3"

# 1. networks
nbdinfo --list "$V4" >"$T/l4" 2>&1 || { cat "$T/l4"; fail "nbdinfo --list over 127.0.0.1"; }
grep -q 'export="dimm0"' "$T/l4" && grep -q 'export="dimm1"' "$T/l4" || { cat "$T/l4"; fail "list over 127.0.0.1 lacks an export"; }
nbdinfo --list "$V6" >"$T/l6" 2>&1 || true
! grep -q 'dimm[01]' "$T/l6" || { cat "$T/l6"; fail "::1 sees exports it may not use"; }
ok "nbdinfo --list: both exports over 127.0.0.1, none over ::1"

# a name that is no export is logged with the client, escaped, one line per
# 10 s (the others summed up when the 10 s are over: checked in 4)
go_refused() { # go_refused N ADDR NAME REPLY WHAT: N handshakes from ADDR, each's GO of NAME answered REPLY
	"$PYTHON" - "$NBD_CHECKS" "$P" "$@" <<'PY'
import os, socket, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
from nbdraw import *
port, n, addr, name, want, what = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
for i in range(n):
    c = Conn(socket.AF_INET6 if ":" in addr else socket.AF_INET, (addr, port))
    c.handshake()
    final, _, _ = c.info(OPT_GO, os.fsencode(name))
    if final != globals()[want]:
        sys.exit("FAIL: GO of %s: %s" % (what, repname(final)))
    c.close()
PY
}
go_refused 3 127.0.0.1 $'nosuch\x1b[2J\r' REP_ERR_UNKNOWN "an unknown name" || fail "unknown export names"
n=$(grep -cF "NBD_OPT_GO refused: no such export 'nosuch\x1b[2J\x0d'" "$T/flashd.log") || true
[ "$n" = 1 ] || { grep nosuch "$T/flashd.log" || true; fail "unknown export name logged $n times, want once"; }
grep -qE "flashd\[warning\]: 127\.0\.0\.1:[0-9]+: NBD_OPT_GO refused: no such export 'nosuch" "$T/flashd.log" ||
	{ grep nosuch "$T/flashd.log" || true; fail "the unknown export's line does not name the client at warning"; }
ok "unknown export names: logged with the client's address, escaped, once for 3 tries"

goinfo() { # goinfo URI [PSKFILE]: prints ok / ro / the error
	"$PYTHON" - "$@" <<'PY'
import nbd, sys
h = nbd.NBD()
h.set_uri_allow_local_file(True)
try:
    h.connect_uri(sys.argv[1])
    print("ro" if h.is_read_only() else "ok")
    h.shutdown()
except nbd.Error as e:
    print("error: %s (errno %s)" % (e.string, e.errno))
PY
}
r=$(goinfo "$V4/dimm0"); [ "$r" = ok ] || fail "127.0.0.1 dimm0: $r"
r=$(goinfo "$V6/dimm0")
[[ $r == error:* ]] || fail "::1 dimm0 was served: $r"
grep -q "NBD_OPT_GO refused: export 'dimm0' (\[dimm dimm0\]) does not allow this client (\[::1\]:" "$T/flashd.log" ||
	fail "no refusal in the log"
LIBNBD_DEBUG=1 nbdinfo "$V6/dimm0" >"$T/dbg" 2>&1 && fail "nbdinfo ::1 dimm0 succeeded"
grep -qE 'NBD_REP_ERR_POLICY|policy|not available to this client' "$T/dbg" || { tail -5 "$T/dbg"; fail "::1 did not get NBD_REP_ERR_POLICY"; }
grep -q 'not available to this client (access rules)' "$T/dbg" || { tail -5 "$T/dbg"; fail "no reason for ::1"; }
ok "::1 gets NBD_REP_ERR_POLICY for dimm0 ($r), logged"
# a flood of denied requests gives a bounded number of lines (one per 10 s,
# the others summed up when the 10 s are over: checked in 4)
go_refused 50 ::1 dimm0 REP_ERR_POLICY "dimm0 over ::1" || fail "a flood of denied requests"
n=$(grep -c "does not allow this client" "$T/flashd.log") || true
[ "$n" -le 2 ] || fail "50 denied requests gave $n log lines"
ok "50 denied requests from ::1: $n log line(s)"
r=$(goinfo "$FLASHD_UNIX_URI0"); [ "$r" = ok ] || fail "unix dimm0: $r"
r=$(goinfo "$FLASHD_UNIX_URI1"); [[ $r == error:* ]] || fail "unix dimm1 was served: $r"
ok "unix socket: dimm0 (unix) served, dimm1 refused"
r=$(goinfo "$MAPPED/dimm0"); [ "$r" = ok ] || fail "IPv4-mapped dimm0: $r"
grep -q '\[::ffff:127.0.0.1\]:[0-9]*: export dimm0' "$T/flashd.log" || fail "the mapped client is not in the log"
nbdinfo --list "$MAPPED" >"$T/lm" 2>&1 || { cat "$T/lm"; fail "nbdinfo --list mapped"; }
grep -q 'export="dimm0"' "$T/lm" || fail "the IPv4-mapped client does not see dimm0"
ok "IPv4-mapped client [::ffff:127.0.0.1] matched as 127.0.0.1"

# 2. read-only rule
r=$(goinfo "$V4/dimm1"); [ "$r" = ro ] || fail "127.0.0.1 dimm1: $r, want read-only"
"$PYTHON" - "$V4/dimm1" <<'PY' || fail "read-only rule"
import errno, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
assert h.is_read_only()
assert len(h.pread(65536, 0)) == 65536
h.set_strict_mode(0)  # send the write anyway: flashd must refuse it
for op in (lambda: h.pwrite(b"x" * 4096, 0), lambda: h.trim(4096, 0), lambda: h.zero(4096, 0)):
    try:
        op()
        sys.exit("a write to a read-only rule succeeded")
    except nbd.Error as e:
        assert e.errno == errno.EPERM or "(EPERM)" in str(e), e
h.flush()
h.shutdown()
PY
qemu-io -r -f raw -c 'read 0 64k' "$V4/dimm1" >"$T/qr" 2>&1 || { cat "$T/qr"; fail "qemu-io read"; }
qemu-io -f raw -c 'write 0 4k' "$V4/dimm1" >"$T/qw" 2>&1 && ! grep -qi 'error\|read-only\|denied' "$T/qw" && fail "qemu-io write succeeded"
qemu-img info "$V4/dimm1" >/dev/null 2>&1 || fail "qemu-img info dimm1"
r=$(goinfo "$V6/dimm1"); [[ $r == error:* ]] || fail "::1 dimm1 was served: $r"
grep -q "export dimm1.*read-only (allow_ro)" "$T/flashd.log" || fail "read-only not logged"
ok "allow_ro: reads work, writes EPERM from flashd, qemu-io refuses; ::1 denied"

# 3. TLS identities
r=$(goinfo "nbds://alice@[::1]:$P/dimm0?tls-psk-file=$T/alice.psk"); [ "$r" = ok ] || fail "alice over ::1: $r"
r=$(goinfo "nbds://bob@[::1]:$P/dimm0?tls-psk-file=$T/bob.psk"); [[ $r == error:* ]] || fail "bob over ::1 was served: $r"
# bob's refusal names his identity; it comes within 10 s of those of 1,
# so it is in the line that sums them up when the 10 s are over
for i in $(seq 1 120); do
	grep -qE "[0-9]+ more request\(s\) for an export its access rules deny refused in the last .*does not allow this client \(\[::1\]:[0-9]*, TLS as PSK identity bob\)" "$T/flashd.log" && break
	[ "$i" = 120 ] && { grep "does not allow" "$T/flashd.log"; fail "bob's refusal is not in the log"; }
	sleep 0.1
done
nbdinfo --list "nbds://alice@[::1]:$P/?tls-psk-file=$T/alice.psk" 2>&1 | grep -q 'export="dimm0"' || fail "alice does not see dimm0"
nbdinfo --list "nbds://bob@[::1]:$P/?tls-psk-file=$T/bob.psk" 2>&1 | grep -q 'export="dimm0"' && fail "bob sees dimm0"
ok "PSK identities: alice allowed and listed, bob refused and not listed"

# 3b. the default export and exports a client may not use
# (raw options: the empty name, META_CONTEXT, a detached export)
defexp() { # defexp PHASE: checks of one phase, raw NBD over 127.0.0.1 and ::1
	"$PYTHON" - "$NBD_CHECKS" "$P" "$1" <<'PY'
import socket, struct, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
from nbdraw import *
port, phase = int(sys.argv[2]), sys.argv[3]

def conn(v6, structured=False):
    c = Conn(socket.AF_INET6 if v6 else socket.AF_INET, ("::1" if v6 else "127.0.0.1", port))
    c.handshake()
    if structured:
        c.structured_reply()
    return c

def opt(c, o, name, queries=None):
    """INFO/GO (queries None, asking for NBD_INFO_NAME) or LIST/SET_META_CONTEXT:
    (final reply, its message, the infos)"""
    if queries is None:
        final, got, reps = c.info(o, name, (INFO_NAME,))
    else:
        reps, got = c.final_reply(o, Conn.meta_data(name, queries)), {}
        final = reps[-1][0]
    return final, reps[-1][1].decode(errors="replace") if final & 0x80000000 else "", got

def want(what, got, final, msg="", bad=()):
    if got != final:
        sys.exit("FAIL: %s: %s (%s), want %s" % (what, repname(got), msg, repname(final)))
    for b in bad:
        if b in msg:
            sys.exit("FAIL: %s: the message names %r: %s" % (what, b, msg))
    print("ok: %s: %s%s" % (what, repname(got), " (%s)" % msg if msg else ""))

if phase == "served":
    f, m, got = opt(conn(False), OPT_INFO, "")
    want("127.0.0.1: INFO of the empty name", f, REP_ACK, m)
    if got.get(INFO_NAME) != "dimm0" or got[INFO_EXPORT][1] & TF_READ_ONLY:
        sys.exit("FAIL: the empty name is not dimm0 (read-write): %r" % got)
    f, m, _ = opt(conn(True), OPT_INFO, "")
    want("::1 (dimm0 denied): INFO of the empty name", f, REP_ERR_POLICY, m, ("dimm0", "dimm1"))
    for o in (OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT):
        for name in ("dimm0", ""):
            for structured in (False, True):
                f, m, _ = opt(conn(True, structured), o, name, ["base:allocation"])
                want("::1: %s META_CONTEXT on '%s' (dimm0, denied)%s" % (
                    "LIST" if o == OPT_LIST_META_CONTEXT else "SET", name,
                    "" if structured else " before STRUCTURED_REPLY"), f, REP_ERR_POLICY, m,
                    ("dimm1",) + (("dimm0",) if not name else ()))
elif phase == "detached":
    c = conn(False, True)
    for o in (OPT_INFO, OPT_GO):
        f, m, got = opt(c, o, "")
        want("127.0.0.1: %s of the empty name, dimm0 detached" % ("INFO" if o == OPT_INFO else "GO"),
             f, REP_ERR_UNKNOWN, m)
        if "not served" not in m:
            sys.exit("FAIL: the refusal does not say the default export is not served: %s" % m)
    f, m, _ = opt(c, OPT_LIST_META_CONTEXT, "", ["base:allocation"])
    want("127.0.0.1: LIST_META_CONTEXT of the empty name, dimm0 detached", f, REP_ERR_UNKNOWN, m)
    f, m, got = opt(c, OPT_INFO, "dimm1")
    want("127.0.0.1: INFO of dimm1 meanwhile", f, REP_ACK, m)
    c = conn(False)
    c.option(OPT_EXPORT_NAME, b"")
    closed, data = c.expect_silence_then_close(5)
    if not closed or data:
        sys.exit("FAIL: EXPORT_NAME of the empty name with dimm0 detached: %d bytes%s (another "
                 "ioDimm?)" % (len(data), "" if closed else ", still open"))
    print("ok: 127.0.0.1: EXPORT_NAME of the empty name, dimm0 detached: closed unanswered")
    for o, q in ((OPT_INFO, None), (OPT_LIST_META_CONTEXT, ["base:allocation"])):
        f, m, _ = opt(conn(True, True), o, "dimm0", q)
        want("::1 (denied): %s of dimm0, detached" % ("INFO" if q is None else "LIST_META_CONTEXT"),
             f, REP_ERR_POLICY, m, ("detached", "attach"))
elif phase == "unset":
    f, m, _ = opt(conn(False), OPT_INFO, "")
    want("127.0.0.1: INFO of the empty name, no default_export", f, REP_ERR_UNKNOWN, m)
    if "'dimm0'" not in m or "'dimm1'" not in m:
        sys.exit("FAIL: the refusal does not name the exports 127.0.0.1 may use: %s" % m)
    f, m, _ = opt(conn(True), OPT_INFO, "")
    want("::1: INFO of the empty name, no default_export", f, REP_ERR_UNKNOWN, m, ("dimm0", "dimm1"))
PY
}
defexp served || fail "the default export or META_CONTEXT, dimm0 served"
"$FLASHCTL" detach dimm0 --control "$CTL" >/dev/null || fail "detach dimm0"
defexp detached || fail "the default export, dimm0 detached"
"$FLASHCTL" attach dimm0 --control "$CTL" >/dev/null || fail "attach dimm0"
sed -i '/^default_export = /d' "$T/acl.conf"
"$FLASHCTL" reload --control "$CTL" >"$T/reload" 2>&1 || { cat "$T/reload"; fail "reload"; }
grep -q "default_export" "$T/reload" || { cat "$T/reload"; fail "the reload did not apply default_export"; }
defexp unset || fail "the empty name without default_export"
ok "default_export: the empty name is dimm0, refused while it is detached (never dimm1) or unset; refusals name no export the client may not use; META_CONTEXT refused like INFO"

# 4. sockets and the control socket
[ "$(stat -c %a "$CTL")" = 666 ] || fail "control socket mode $(stat -c %a "$CTL")"
[ "$(stat -c '%a %G' "$FLASHD_SOCK")" = "660 nogroup" ] || fail "unix socket: $(stat -c '%a %G' "$FLASHD_SOCK")"
NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
logmark=$(wc -l <"$T/flashd.log") # root's reloads above are in the log
"${NOBODY[@]}" "$FLASHCTL" status --control "$CTL" >"$T/ns" 2>&1 || { cat "$T/ns"; fail "nobody: status"; }
code=$("${NOBODY[@]}" curl -s -o /dev/null -w '%{http_code}' --unix-socket "$CTL" http://localhost/v1/status) || true
[ "$code" = 200 ] || fail "nobody: GET /v1/status: $code"
body=$("${NOBODY[@]}" curl -s -w '\n%{http_code}' -X POST -H "X-Flashd-Action: 1" --unix-socket "$CTL" http://localhost/v1/dimms/dimm0/detach) || true
[ "${body##*$'\n'}" = 403 ] || fail "nobody: POST detach: $body"
grep -q 'not in the control socket' <<<"$body" || fail "403 without a reason: $body"
"${NOBODY[@]}" "$FLASHCTL" detach dimm0 --control "$CTL" >"$T/nd" 2>&1 && fail "nobody could detach"
r=$(goinfo "$V4/dimm0"); [ "$r" = ok ] || fail "dimm0 gone after nobody's detach: $r"
grep -q "control socket: /v1/dimms/dimm0/detach refused: uid 65534" "$T/flashd.log" || fail "403 not logged"
# reload is an action like the others: a half-edited file is not nobody's to load
body=$("${NOBODY[@]}" curl -s -w '\n%{http_code}' -X POST -H "X-Flashd-Action: 1" --unix-socket "$CTL" http://localhost/v1/reload) || true
[ "${body##*$'\n'}" = 403 ] || fail "nobody: POST /v1/reload: $body"
grep -q 'not in the control socket' <<<"$body" || fail "reload: 403 without a reason: $body"
"${NOBODY[@]}" "$FLASHCTL" reload --control "$CTL" >"$T/nr" 2>&1 && fail "nobody could reload: $(cat "$T/nr")"
tail -n +$((logmark + 1)) "$T/flashd.log" | grep -q "control socket (uid=[0-9]* pid=[0-9]*): reloading" &&
	fail "nobody's reload request reloaded the configuration"
# a client's ESC and CR reach the log escaped, never as they are
code=$("${NOBODY[@]}" curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-Flashd-Action: 1" --unix-socket "$CTL" \
	"http://localhost/v1/dimms/dimm0/detach%1B%5B2J%0D") || true
[ "$code" = 403 ] || fail "nobody: POST detach<ESC>[2J<CR>: $code"
grep -qF 'control socket: /v1/dimms/dimm0/detach\x1b[2J\x0d refused: uid 65534' "$T/flashd.log" ||
	fail "the refused path is not logged with ESC and CR escaped"
! LC_ALL=C grep -q $'[\x1b\r]' "$T/flashd.log" || fail "the log holds a raw ESC or CR"
# the unknown export names of 1 not logged one by one, summed up
for i in $(seq 1 120); do
	grep -qE "[0-9]+ more request\(s\) for an unknown export refused in the last" "$T/flashd.log" && break
	[ "$i" = 120 ] && fail "the unknown export names held back were never summed up in the log"
	sleep 0.1
done
# every action is logged with who asked (SO_PEERCRED): flashctl's uid and pid
sh -c 'echo $$ >"$1"; exec "$2" checkpoint dimm0 --control "$3" >/dev/null' _ "$T/act.pid" "$FLASHCTL" "$CTL" ||
	fail "root: checkpoint"
grep -q "dimm0: checkpoint requested over the control socket by uid=$(id -u) pid=$(cat "$T/act.pid")\$" "$T/flashd.log" ||
	{ grep "requested over" "$T/flashd.log"; fail "the checkpoint's log line does not name uid=$(id -u) pid=$(cat "$T/act.pid")"; }
sh -c 'echo $$ >"$1"; exec "$2" reload --control "$3" >/dev/null' _ "$T/act.pid" "$FLASHCTL" "$CTL" ||
	fail "root: reload"
grep -q "control socket (uid=$(id -u) pid=$(cat "$T/act.pid")): reloading" "$T/flashd.log" ||
	fail "the reload's log line does not name uid=$(id -u) pid=$(cat "$T/act.pid")"
ok "control socket: nobody gets 200 for status and 403 for detach and reload; root may act, logged with uid= and pid=; the log escapes ESC and CR"

# 5. files
for f in "$FLASHD_STATE"/dimm0.img "$FLASHD_STATE"/dimm1.img; do
	[ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f")"
done
ok "images created 0600"
stop_flashd
P2=$(free_port)
"$FLASHD" --foreground --no-config --preset test-1g --timing off --state-dir "$T/fresh/state" \
	--listen "127.0.0.1:$P2" --pidfile "$T/fresh.pid" >>"$T/flashd.log" 2>&1 &
pid=$!
track_pid $pid
wait_ready $pid "$T/fresh.pid" "second flashd"
[ "$(stat -c %a "$T/fresh/state")" = 700 ] || fail "state dir mode $(stat -c %a "$T/fresh/state")"
[ "$(stat -c %a "$T/fresh/state/dimm0.img")" = 600 ] || fail "fresh image mode"
[ "$(stat -c %a "$T/fresh/state/flashd.ctl")" = 660 ] || fail "default control socket mode $(stat -c %a "$T/fresh/state/flashd.ctl")"
r=$(goinfo "nbd://127.0.0.1:$P2"); [ "$r" = ok ] || fail "the embedded default serves no default export: $r"
kill -TERM $pid
wait $pid || fail "second flashd exit status"
ok "state directory created 0700, images 0600, control socket 0660 by default; the embedded default's empty name is dimm0"
echo "all ACL tests passed"
