#!/bin/bash
# timeout: 300
# Reload and root-formatted images (issue 13):
#   1. SIGHUP with a changed [dimm] description (and verbose, poll_us,
#      max_connections): nbdinfo --list shows the new description, a
#      connection opened before the reload still reads and writes, the log
#      has one info line per applied key and no warning;
#   2. a file with an error on SIGHUP and on `flashctl reload`: flashd keeps
#      running with the old configuration (description unchanged), the log
#      and flashctl's message name the file and line, flashctl exits 1;
#      the same connection still works afterwards;
#   2b. allow = (another address), list_denied and allow_ro changed by
#      `flashctl reload`: the next handshake is refused, listed, admitted
#      read-only; a connection opened before keeps reading and writing;
#   3. a changed listen address (flashd started with the address in the
#      file): a warning "needs a restart" per key not applied, the old port
#      still serves, the new one is not bound; `flashctl reload` lists it
#      under "not applied" (and --json as not_applied), exit 0;
#   3b. tls_certificates rotated in place (a certificate of another CA) and
#      `flashctl reload`: the next TLS client sees the new certificate, a
#      session made before keeps working; a key file that does not load is
#      an error and the keys in force stay;
#   4. as root, `flashctl format` into a directory owned by nobody:nogroup
#      gives an image owned by nobody:nogroup that nobody can open with
#      `flashctl info`; in a user namespace, where chown fails, it prints
#      the chown command to run.  Without root (or user namespaces) the
#      test ends as a skip (exit 77) naming what was not run.
source "$(dirname "$0")/functions.sh"

CONF=$T/flashd.conf
dimms_conf "$CONF" server.shutdown_timeout=5 dimm0.description="first description"
start_flashd --config "$CONF" --timing off

# list_desc URI_BASE EXPORT: the description nbdinfo --list shows for EXPORT
list_desc() {
	nbdinfo --list --json "$1" | $PYTHON -c '
import json, sys
for e in json.load(sys.stdin)["exports"]:
    if e["export-name"] == sys.argv[1]:
        print(e.get("description", ""))
' "$2"
}
base=nbd://127.0.0.1:$FLASHD_PORT
[ "$(list_desc "$base" dimm0)" = "first description" ] || fail "dimm0's description at start: $(list_desc "$base" dimm0)"

# ---- 1 and 2: one connection open across both reloads ------------------------------------
$PYTHON - "$FLASHD_URI0" "$FLASHD_PID" "$CONF" "$FLASHCTL" "$FLASHD_CTL" "$base" "$T/flashd.log" <<'EOF'
import json, os, re, signal, subprocess, sys, time
import nbd

uri, pid, conf, flashctl, ctl, base, log = sys.argv[1:]
pid = int(pid)

def fail(msg):
    sys.exit("FAIL: " + msg)

def desc(export):
    out = subprocess.run(["nbdinfo", "--list", "--json", base], check=True, capture_output=True,
                         text=True).stdout
    for e in json.loads(out)["exports"]:
        if e["export-name"] == export:
            return e.get("description", "")
    fail("no export " + export)

def log_since(n):
    with open(log) as f:
        return f.read()[n:]

def wait_log(n, pattern):
    for _ in range(100):
        text = log_since(n)
        if re.search(pattern, text):
            return text
        time.sleep(0.05)
    fail("the log has no line matching %r after the reload:\n%s" % (pattern, log_since(n)))

h = nbd.NBD()
h.connect_uri(uri)
a = os.urandom(1 << 20)
h.pwrite(a, 0)
h.flush()

# 1. description, verbose, poll_us, max_connections
with open(conf) as f:
    text = f.read()
good = text.replace("first description", "second description").replace(
    "shutdown_timeout = 5", "shutdown_timeout = 5\nverbose = yes\npoll_us = 20\nmax_connections = 100")
with open(conf, "w") as f:
    f.write(good)
n = len(open(log).read())
os.kill(pid, signal.SIGHUP)
got = wait_log(n, r"reload of .* done")
for key in [r"\[dimm dimm0\] description: 'first description' -> 'second description'",
            r"\[server\] verbose: no -> yes", r"\[server\] poll_us: 50 us -> 20 us",
            r"\[server\] max_connections: 1024 -> 100",
            r"\[server\] max_handshakes: 128 -> 12"]:   # unset: max_connections / 8
    if not re.search(r"flashd\[info\]: reload: " + key, got):
        fail("no info line for %s:\n%s" % (key, got))
if "flashd[warning]" in got or "flashd[error]" in got:
    fail("a reload that applies everything logged a warning or error:\n" + got)
if "5 change(s) applied, 0 not applied" not in got:
    fail("the summary line is wrong:\n" + got)
if desc("dimm0") != "second description":
    fail("nbdinfo --list shows %r after the reload" % desc("dimm0"))
if h.pread(len(a), 0) != a:
    fail("the connection opened before the reload reads other data")
b = os.urandom(1 << 20)
h.pwrite(b, 1 << 20)
h.flush()
if h.pread(len(b), 1 << 20) != b:
    fail("a write after the reload does not read back")
print("ok: SIGHUP applied the description, verbose, poll_us and max_connections; the open connection works")

# 2. a file with an error: nothing changes
lines = good.replace("second description", "third description").split("\n")
bad_line = next(i for i, l in enumerate(lines) if l.startswith("poll_us")) + 1
lines[bad_line - 1] = "poll_us = 20x"
with open(conf, "w") as f:
    f.write("\n".join(lines))
n = len(open(log).read())
os.kill(pid, signal.SIGHUP)
where = "%s:%d: [server] poll_us = '20x'" % (conf, bad_line)
got = wait_log(n, re.escape(where))
if not re.search(r"flashd\[error\]: reload: " + re.escape(where) + r".*nothing changed", got):
    fail("the bad file is not logged at error level with file and line:\n" + got)
if "description" in got:
    fail("a rejected reload applied something:\n" + got)
r = subprocess.run([flashctl, "reload", "--control", ctl], capture_output=True, text=True)
if r.returncode != 1 or where not in r.stderr or "nothing changed" not in r.stderr:
    fail("flashctl reload with a bad file: exit %d, %r" % (r.returncode, r.stderr))
os.kill(pid, 0)
if desc("dimm0") != "second description":
    fail("a rejected reload changed the description to %r" % desc("dimm0"))
if h.pread(len(a), 0) != a or h.pread(len(b), 1 << 20) != b:
    fail("the connection reads other data after the rejected reload")
h.pwrite(a, 2 << 20)
h.flush()
if h.pread(len(a), 2 << 20) != a:
    fail("a write after the rejected reload does not read back")
h.shutdown()
with open(conf, "w") as f:
    f.write(good)
print("ok: a file with an error (%s) changed nothing; flashd and the connection go on" % where)
EOF
flashd_running
ok "SIGHUP: description and limits applied live, a bad file rejected as a whole"

# ---- 2b. access rules: a reload applies allow, allow_ro and list_denied to the next handshake
$PYTHON - "$FLASHD_URI1" "$FLASHCTL" "$FLASHD_CTL" "$CONF" "$base" <<'EOF'
import os, subprocess, sys
import nbd

uri, flashctl, ctl, conf, base = sys.argv[1:]
orig = open(conf).read()

def fail(msg):
    open(conf, "w").write(orig)
    sys.exit("FAIL: " + msg)

def reload_with(rules):
    open(conf, "w").write(orig.replace("[dimm dimm1]\n", "[dimm dimm1]\n" + rules))
    r = subprocess.run([flashctl, "reload", "--control", ctl], capture_output=True, text=True)
    if r.returncode != 0:
        fail("flashctl reload exit %d: %s" % (r.returncode, r.stderr))
    return r.stdout

def connect():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h

def listed():  # the names NBD_OPT_LIST gives (nbdinfo --list fails on a refused one)
    names = []
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_uri(base)
    h.opt_list(lambda name, desc: names.append(name))
    h.opt_abort()
    return names

old = connect()  # admitted while dimm1 has no rule
a = os.urandom(65536)
old.pwrite(a, 0)
old.flush()

out = reload_with("allow = 192.0.2.1\n")
if "applied: [dimm dimm1] allow/allow_ro: none (no restriction) -> 1 rule(s)" not in out:
    fail("flashctl reload did not apply allow = 192.0.2.1:\n" + out)
try:
    connect()
    fail("a handshake from 127.0.0.1 after a reload to allow = 192.0.2.1 was admitted")
except nbd.Error as e:
    refused = str(e)
if "dimm1" in listed():
    fail("dimm1 is listed to a client its new rules refuse")
if old.pread(len(a), 0) != a:
    fail("the connection opened before the reload reads other data")
old.pwrite(a, 65536)
old.flush()
print("ok: allow = 192.0.2.1 by reload: the next handshake is refused (%s); the open connection "
      "still reads and writes" % refused)

out = reload_with("allow = 192.0.2.1\nlist_denied = yes\n")
if "applied: [dimm dimm1] list_denied: no -> yes" not in out:
    fail("flashctl reload did not apply list_denied = yes:\n" + out)
if "dimm1" not in listed():
    fail("list_denied = yes by reload: dimm1 is not listed")

out = reload_with("allow_ro = 127.0.0.1\n")
if "applied: [dimm dimm1] allow/allow_ro" not in out:
    fail("flashctl reload did not apply allow_ro = 127.0.0.1:\n" + out)
h = connect()
if not h.is_read_only():
    fail("allow_ro = 127.0.0.1 by reload: the next connection is not read-only")
if h.pread(len(a), 0) != a:
    fail("the read-only connection reads other data")
try:
    h.pwrite(a, 0)
    fail("a write on the allow_ro connection succeeded")
except nbd.Error:
    pass
h.shutdown()

reload_with("")
h = connect()
h.pwrite(a, 2 * 65536)
h.flush()
h.shutdown()
old.shutdown()
open(conf, "w").write(orig)
print("ok: list_denied = yes and allow_ro by reload apply to the next handshake; no rule: read-write again")
EOF
flashd_running
ok "reload applies allow, allow_ro and list_denied to the next handshake; open connections keep theirs"
stop_flashd

# ---- 3. a changed listen address -----------------------------------------------------------
PORT2=$(free_port)
PORT3=$(free_port)
dimms_conf "$CONF" server.listen=127.0.0.1:$PORT2 dimm0.description=served
"$FLASHD" --foreground --state-dir "$FLASHD_STATE" --config "$CONF" --timing off \
	--pidfile "$FLASHD_STATE/flashd.pid" >"$T/flashd2.log" 2>&1 &
FLASHD_PID=$!
track_pid "$FLASHD_PID"
for _ in $(seq 1 300); do
	[ "$(cat "$FLASHD_STATE/flashd.pid" 2>/dev/null)" = "$FLASHD_PID" ] && break
	kill -0 "$FLASHD_PID" || fail "flashd (listen from the file) did not start"
	sleep 0.1
done
sed -i "s/127.0.0.1:$PORT2/127.0.0.1:$PORT3/; s/^description = served/description = still served/" "$CONF"
sed -i '/^\[dimm dimm1\]/a readonly = yes' "$CONF"
kill -HUP "$FLASHD_PID"
for _ in $(seq 1 50); do
	grep -q 'reload of .* done' "$T/flashd2.log" && break
	sleep 0.1
done
cat "$T/flashd2.log"
grep -q "flashd\[warning\]: reload: \[server\] listen: 127.0.0.1:$PORT2 -> 127.0.0.1:$PORT3: needs a restart" "$T/flashd2.log" ||
	fail "no warning that the listen address needs a restart"
grep -q "flashd\[warning\]: reload: \[dimm dimm1\] readonly: no -> yes: needs a restart" "$T/flashd2.log" ||
	fail "no warning that readonly needs a restart"
[ "$(grep -c 'flashd\[warning\]: reload:' "$T/flashd2.log")" = 2 ] || fail "not one warning per key"
grep -q "1 change(s) applied, 2 not applied" "$T/flashd2.log" || fail "wrong summary"
[ "$(list_desc "nbd://127.0.0.1:$PORT2" dimm0)" = "still served" ] ||
	fail "the old address does not serve the new description"
if nbdinfo --list "nbd://127.0.0.1:$PORT3" >/dev/null 2>&1; then
	fail "the new listen address is bound without a restart"
fi
nbdsh_sys -u "nbd://127.0.0.1:$PORT2/dimm1" -c 'h.pwrite(b"x" * 512, 0); h.flush()' ||
	fail "dimm1 became read-only on reload"
out=$("$FLASHCTL" reload --control "$FLASHD_CTL")
echo "$out"
grep -q "^reloaded $CONF: 0 change(s) applied, 2 not applied" <<<"$out" || fail "flashctl reload: no summary"
grep -q "^  not applied: \[server\] listen: 127.0.0.1:$PORT2 -> 127.0.0.1:$PORT3: needs a restart" <<<"$out" ||
	fail "flashctl reload does not list the listen address"
grep -q "^  not applied: \[dimm dimm1\] readonly" <<<"$out" || fail "flashctl reload does not list readonly"
! grep -q "^  applied:" <<<"$out" || fail "flashctl reload lists something as applied the second time"
"$FLASHCTL" reload --control "$FLASHD_CTL" --json | $PYTHON -c '
import json, sys
r = json.load(sys.stdin)
assert r["ok"] is True and r["applied"] == [], r
keys = [i["key"] for i in r["not_applied"]]
assert keys == ["[server] listen", "[dimm dimm1] readonly"], keys
assert all("needs a restart" in i["message"] for i in r["not_applied"]), r
' || fail "flashctl reload --json"
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$FLASHD_CTL" http://localhost/v1/reload)
[ "$code" = 405 ] || fail "GET /v1/reload answers $code, want 405"
kill -0 "$FLASHD_PID" || fail "flashd died"
kill -TERM "$FLASHD_PID"
wait "$FLASHD_PID" || fail "flashd exited $? after SIGTERM"
! grep -qE 'flashd\[(error|crit)\]' "$T/flashd2.log" || fail "error lines in the log"
ok "a changed listen address (and readonly): one warning each, needs a restart; flashctl reload lists them"

# ---- 3b. TLS keys rotated by a reload ------------------------------------------------------
# The server's certificate is replaced in place by one of another CA: after
# `flashctl reload` a client trusting only the new CA gets in and one
# trusting only the old CA does not (so the new certificate is the one
# presented), while a TLS session made before keeps working.  Then a key
# file that does not load: an error, and the keys in force stay.
requires certtool
PKI=$T/pki
tls_ca "$PKI/ca1" "flashd test CA 1"
tls_ca "$PKI/ca2" "flashd test CA 2"
tls_cert "$PKI/ca1" "$PKI/srv1" server localhost
tls_cert "$PKI/ca2" "$PKI/srv2" server localhost
mkdir -p "$PKI/trust1" "$PKI/trust2" "$PKI/live"
cp "$PKI/ca1/ca-cert.pem" "$PKI/trust1/"
cp "$PKI/ca2/ca-cert.pem" "$PKI/trust2/"
cp "$PKI/srv1/server-cert.pem" "$PKI/srv1/server-key.pem" "$PKI/live/"
cat >"$CONF" <<EOF
[server]
tls = required
tls_certificates = $PKI/live
[dimm dimm0]
preset = test-1g
EOF
FLASHD_PORT=$(free_port)
start_flashd --config "$CONF" --timing off
$PYTHON - "127.0.0.1:$FLASHD_PORT" "$PKI" "$FLASHCTL" "$FLASHD_CTL" <<'EOF'
import os, shutil, subprocess, sys
import nbd

addr, pki, flashctl, ctl = sys.argv[1:]

def fail(msg):
    sys.exit("FAIL: " + msg)

def connect(trust):
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)
    h.connect_uri("nbds://%s/dimm0?tls-certificates=%s/%s" % (addr, pki, trust))
    return h

def refused(trust):
    try:
        connect(trust).shutdown()
        return False
    except nbd.Error:
        return True

def reload():
    r = subprocess.run([flashctl, "reload", "--control", ctl], capture_output=True, text=True)
    if r.returncode != 0:
        fail("flashctl reload exit %d: %s" % (r.returncode, r.stderr))
    return r.stdout

old = connect("trust1")
a = os.urandom(65536)
old.pwrite(a, 0)
old.flush()
if not refused("trust2"):
    fail("a client trusting only CA 2 got in before the rotation")
out = reload()
if "tls keys" in out or "0 change(s) applied, 0 not applied" not in out:
    fail("a reload with the same key files reported a change:\n" + out)

for f in ("server-cert.pem", "server-key.pem"):
    shutil.copy(os.path.join(pki, "srv2", f), os.path.join(pki, "live", f))
out = reload()
if "applied: [server] tls keys: certificates %s/live read again" % pki not in out:
    fail("flashctl reload did not read the new certificate:\n" + out)
new = connect("trust2")
if new.pread(len(a), 0) != a:
    fail("the session made after the rotation reads other data")
new.shutdown()
if not refused("trust1"):
    fail("after the rotation a client trusting only CA 1 still got in: the old certificate is presented")
if old.pread(len(a), 0) != a:
    fail("the TLS session made before the rotation reads other data")
old.pwrite(a, 65536)
old.flush()
print("ok: a certificate rotated in place is presented after flashctl reload; the session made "
      "before still reads and writes")

with open(os.path.join(pki, "live", "server-key.pem"), "w") as f:
    f.write("not a key\n")
r = subprocess.run([flashctl, "reload", "--control", ctl], capture_output=True, text=True)
out = r.stdout + r.stderr
if "not applied: [server] tls keys:" not in out or "the running keys stay in force" not in out:
    fail("a key file that does not load: flashctl reload says (exit %d):\n%s" % (r.returncode, out))
h = connect("trust2")
if h.pread(len(a), 0) != a:
    fail("a session after the failed reload reads other data")
h.shutdown()
old.shutdown()
print("ok: a key file that does not load is reported, and the keys in force stay")
EOF
grep -q "flashd\[error\]: reload: TLS keys: .*server-key.pem.*the running keys stay in force" "$T/flashd.log" ||
	fail "no error line for the key file that does not load"
flashd_running
stop_flashd
ok "TLS keys rotated by reload: new handshakes present the new certificate, open sessions stay; a bad key file keeps the old keys"

# ---- 4. root formats into the service's directory -----------------------------------------
# (the last section: without root the test ends here, as a skip)
[ "$(id -u)" = 0 ] || skip "not run: 4. format as root into the service's directory (not root)"
chmod 0711 "$T" # nobody must reach its directory below
SVC=$T/svc
mkdir "$SVC"
chown nobody:nogroup "$SVC"
chmod 0750 "$SVC"
out=$("$FLASHCTL" format "$SVC/dimm0.img" --preset test-1g)
echo "$out"
grep -q "^$SVC/dimm0.img: owner set to nobody:nogroup, the owner of $SVC" <<<"$out" ||
	fail "format does not say it gave the image to nobody:nogroup"
[ "$(stat -c %U:%G "$SVC/dimm0.img")" = nobody:nogroup ] || fail "image owned by $(stat -c %U:%G "$SVC/dimm0.img")"
setpriv --reuid nobody --regid nogroup --clear-groups "$FLASHCTL" info "$SVC/dimm0.img" >"$T/info.txt" ||
	fail "nobody cannot open the image with flashctl info"
grep -q "format: 1677720 sectors of 512 bytes" "$T/info.txt" || fail "flashctl info as nobody: $(cat "$T/info.txt")"
# again on the existing image (now owned by nobody): nothing to change
out=$("$FLASHCTL" format "$SVC/dimm0.img" --preset test-1g --yes)
! grep -q "owner set" <<<"$out" || fail "a second format changed the owner again"
ok "format as root into nobody's directory: the image is nobody's and nobody opens it"

# chown impossible: root in a user namespace cannot give a file to an unmapped user
SVC2=$T/svc2
mkdir "$SVC2"
chown nobody:nogroup "$SVC2"
chmod 0777 "$SVC2"
if unshare --user --map-root-user true 2>/dev/null; then
	unshare --user --map-root-user "$FLASHCTL" format "$SVC2/dimm0.img" --preset test-1g \
		>"$T/ns.out" 2>"$T/ns.err" || fail "format in a user namespace failed: $(cat "$T/ns.err")"
	cat "$T/ns.out" "$T/ns.err"
	grep -q "could not change that (Invalid argument)" "$T/ns.err" || fail "no warning that chown failed"
	grep -qx "    chown 65534:65534 $SVC2/dimm0.img" "$T/ns.err" || fail "the chown command is not printed"
	ok "where chown fails, format prints the chown to run"
else
	skip_part "4. format where chown fails (no user namespaces here)"
fi
