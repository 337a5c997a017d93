#!/bin/bash
# timeout: 600
# TLS (NBD_OPT_STARTTLS) against real clients, with keys made here:
# certificates by certtool (a CA, the server's for localhost/127.0.0.1, a
# client's, a client's of another CA, a revoked one and the CRL), PSK files
# by psktool and by hand.
#   0. configuration errors: a missing certificate directory or key, TLS
#      without keys, a bad PSK file, a bad mode: refused with the file and
#      line, before any image is created;
#   1. tls = required, x509 and PSK: nbdinfo/nbdcopy/nbdsh (nbds:// URIs,
#      tls-certificates=, tls-psk-file=) and qemu-img/qemu-io (tls-creds-x509,
#      tls-creds-psk; TLS 1.3 and, through qemu's priority string, TLS 1.2)
#      write and read back; a plaintext client is refused (TLS required); a
#      wrong key or an unknown identity is refused with a log line; the raw
#      protocol: every option before STARTTLS gets ERR_TLS_REQD and the
#      stream stays in sync (tests/nbd/raw_tls.py);
#   2. tls_verify_peer with a CRL: a client certificate of the CA works; none,
#      one of another CA, or a revoked one is refused, the reason logged;
#   3. tls = allowed from a config file, one export tls = required, one
#      tls = off, a second listener with tls=off: plaintext and TLS clients
#      both served, the TLS-only export hidden and refused without TLS, the
#      state negotiated before STARTTLS forgotten (raw_tls.py);
#   4. the hardened configuration, read out of doc/security.md (only its
#      listen address moved to 127.0.0.1): tls_verify_peer with tls_psk
#      serves a client certificate of the CA (read-write, or read-only by
#      allow_ro) and a PSK client, over TLS 1.3 and TLS 1.2, from libnbd,
#      qemu-io and openssl s_client (which offers certificate suites with
#      its PSK; tests/nbd/openssl_starttls.py); no certificate, another
#      CA's, a wrong key, an unknown identity and plaintext are refused.
source "$(dirname "$0")/functions.sh"
requires certtool psktool

PKI=$T/pki
mkdir -p "$PKI"

# ---- keys -------------------------------------------------------------------
tls_ca "$PKI/ca" "flashd test CA"
tls_ca "$PKI/rogue-ca" "some other CA"
tls_cert "$PKI/ca" "$PKI/server" server localhost
tls_cert "$PKI/ca" "$PKI/client" client client1
tls_cert "$PKI/ca" "$PKI/revoked" client revoked1
tls_cert "$PKI/rogue-ca" "$PKI/rogue" client intruder
cp "$PKI/ca/ca-cert.pem" "$PKI/rogue/ca-cert.pem"   # trusts the right server CA
mkdir -p "$PKI/nocert" && cp "$PKI/ca/ca-cert.pem" "$PKI/nocert/"
# the server's directory with a CRL revoking revoked1
cp -r "$PKI/server" "$PKI/server-crl"
tls_crl "$PKI/ca" "$PKI/revoked/client-cert.pem" "$PKI/server-crl/ca-crl.pem"
psktool -u alice -p "$T/keys.psk" >/dev/null
mkdir -p "$T/wrongkey" "$T/mallory"
tls_psk_line alice >"$T/wrongkey/keys.psk"
tls_psk_line mallory >"$T/mallory/keys.psk"
mkdir -p "$T/psk" && cp "$T/keys.psk" "$T/psk/keys.psk"   # qemu's dir=
ok "keys made"

# ---- 0. configuration errors ------------------------------------------------------
conf_head="[dimm dimm0]
preset = test-1g"
printf '[server]\ntls = required\ntls_certificates = %s\n%s\n' "$T/nowhere" "$conf_head" >"$T/nodir.conf"
conf_err nodir "nodir.conf:3: [server] tls_certificates = '$T/nowhere': cannot read $T/nowhere/server-cert.pem: No such file or directory"
mkdir -p "$T/nokey" && cp "$PKI/server/server-cert.pem" "$T/nokey/"
printf '[server]\ntls = allowed\n\ntls_certificates = %s\n%s\n' "$T/nokey" "$conf_head" >"$T/nokey.conf"
conf_err nokey "nokey.conf:4: [server] tls_certificates = '$T/nokey': cannot read $T/nokey/server-key.pem"
mkdir -p "$T/badkey" && cp "$PKI/server/server-cert.pem" "$T/badkey/" &&
	cp "$PKI/client/client-key.pem" "$T/badkey/server-key.pem"
printf '[server]\ntls_certificates = %s\n%s\n' "$T/badkey" "$conf_head" >"$T/badkey.conf"
conf_err badkey "server-key.pem: not a usable private key for $T/badkey/server-cert.pem: key values mismatch"
printf '[server]\ntls = required\n%s\n' "$conf_head" >"$T/nokeys.conf"
conf_err nokeys "TLS is enabled (tls = allowed or required) but there are no keys"
printf 'alice:00112233\nbob:xyz1\n' >"$T/bad.psk"
printf '[server]\ntls = required\ntls_psk = %s\n%s\n' "$T/bad.psk" "$conf_head" >"$T/badpsk.conf"
conf_err badpsk "badpsk.conf:3: [server] tls_psk = '$T/bad.psk': $T/bad.psk:2: the key of 'bob' is not hexadecimal"
printf '[server]\ntls = maybe\n%s\n' "$conf_head" >"$T/badmode.conf"
conf_err badmode "badmode.conf:2: [server] tls = 'maybe': tls must be off, allowed or required"
printf '[server]\nlisten = 127.0.0.1:1 tls=sometimes\n%s\n' "$conf_head" >"$T/badlisten.conf"
conf_err badlisten "tls= takes off, allowed or required"
printf '[server]\ntls_verify_peer = yes\ntls_psk = %s\n%s\n' "$T/keys.psk" "$conf_head" >"$T/verifypsk.conf"
conf_err verifypsk "tls_verify_peer = yes needs tls_certificates"

# ---- 1. required: x509 and PSK -------------------------------------------------------
start_flashd --preset test-1g --timing off --tls required --tls-certificates "$PKI/server" \
	--tls-psk "$T/keys.psk"
P=$FLASHD_PORT
X509_0="nbds://localhost:$P/dimm0?tls-certificates=$PKI/client"
X509_1="nbds://localhost:$P/dimm1?tls-certificates=$PKI/client"
PSK_0="nbds://alice@localhost:$P/dimm0?tls-psk-file=$T/keys.psk"
PSK_1="nbds://alice@localhost:$P/dimm1?tls-psk-file=$T/keys.psk"

nbdinfo "$X509_0" >"$T/info.out" 2>&1 || { cat "$T/info.out"; fail "nbdinfo x509"; }
grep -q 'with TLS' "$T/info.out" || fail "nbdinfo x509: not over TLS: $(cat "$T/info.out")"
nbdinfo "$PSK_0" >"$T/info.out" 2>&1 || { cat "$T/info.out"; fail "nbdinfo PSK"; }
grep -q 'with TLS' "$T/info.out" || fail "nbdinfo PSK: not over TLS"
grep -q "PSK identity 'alice'" "$T/flashd.log" || fail "no PSK identity in the log"
ok "nbdinfo over TLS (x509 and PSK)"

# nbdcopy in over x509, back out over PSK; nbdsh (Python) reads it over x509
random_file "$T/data" 24
nbdcopy "$T/data" "$X509_0" || fail "nbdcopy to the export over x509"
nbdcopy "$PSK_0" - | head -c $((24 << 20)) >"$T/back" || true
cmp "$T/data" "$T/back" || fail "data copied in over x509 reads back differently over PSK"
"$PYTHON" - "$X509_0" "$PSK_0" "$T/data" <<'PY' || fail "nbdsh (libnbd Python) over TLS"
import sys, nbd
data = open(sys.argv[3], "rb").read()
for uri in sys.argv[1:3]:
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)   # tls-psk-file= names a local file
    h.connect_uri(uri)
    assert h.get_tls_negotiated(), uri
    assert h.pread(1 << 20, 5 << 20) == data[5 << 20:6 << 20], uri
    h.pwrite(b"\x42" * 65536, 40 << 20)
    h.flush()
    h.shutdown()
PY
ok "nbdcopy and nbdsh: 24 MiB in over x509, read back over PSK and x509"

# qemu: x509 and PSK, TLS 1.3 and TLS 1.2
qx509() { echo "--object tls-creds-x509,id=tls0,endpoint=client,dir=$PKI/client$1"; }
qpsk() { echo "--object tls-creds-psk,id=tls0,endpoint=client,dir=$T/psk,username=alice$1"; }
qnbd() { echo "driver=nbd,host=localhost,port=$P,export=$1,tls-creds=tls0"; }
# log_lines PATTERN: how many lines of flashd's log match (grep)
log_lines() { grep -c "$1" "$T/flashd.log" || true; }
# log_grew N0 PATTERN: up to 5 s for more than N0 lines of flashd's log to
# match PATTERN; their count in n1; false when there are not
log_grew() {
	local _
	for _ in $(seq 50); do
		n1=$(log_lines "$2")
		[ "$n1" -gt "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
random_file "$T/qdata" 4
# shellcheck disable=SC2046
qemu-img convert -n -f raw $(qpsk "") --target-image-opts "$T/qdata" "$(qnbd dimm1)" ||
	fail "qemu-img convert into dimm1 over PSK"
# shellcheck disable=SC2046
qemu-img convert $(qx509 "") --image-opts "$(qnbd dimm1)" -O raw "$T/qback" ||
	fail "qemu-img convert out of dimm1 over x509"
cmp -n $((4 << 20)) "$T/qdata" "$T/qback" || fail "qemu-img: data differs"
rm -f "$T/qback"
n_before=$(grep -c 'TLS established: TLSv1.2' "$T/flashd.log" || true)
# shellcheck disable=SC2046
qemu-io $(qpsk ",priority=NORMAL:-VERS-TLS1.3") --image-opts "$(qnbd dimm1)" \
	-c 'write -P 0x5c 8M 1M' >"$T/qio.out" 2>&1 || { cat "$T/qio.out"; fail "qemu-io write over TLS 1.2 PSK"; }
# shellcheck disable=SC2046
qemu-io $(qx509 ",priority=NORMAL:-VERS-TLS1.3") --image-opts "$(qnbd dimm1)" \
	-c 'read -P 0x5c 8M 1M' >"$T/qio.out" 2>&1 || { cat "$T/qio.out"; fail "qemu-io read over TLS 1.2 x509"; }
grep -qi 'pattern verification failed' "$T/qio.out" && fail "qemu-io: pattern differs"
n_after=$(grep -c 'TLS established: TLSv1.2' "$T/flashd.log" || true)
[ "$n_after" -ge $((n_before + 2)) ] || fail "qemu with -VERS-TLS1.3 did not connect with TLS 1.2"
grep -q 'TLS established: TLSv1.2, .*PSK' "$T/flashd.log" || fail "no TLS 1.2 PSK session in the log"
nbd_py_region() { "$PYTHON" - "$@" <<'PY'
import sys, nbd
uri, off, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
want = open(path, "rb").read()
h = nbd.NBD(); h.set_uri_allow_local_file(True); h.connect_uri(uri)
assert h.pread(len(want), off) == want
h.shutdown()
PY
}
nbd_py_region "$PSK_1" 0 "$T/qdata" || fail "what qemu-img wrote over PSK reads differently with libnbd"
ok "qemu-img and qemu-io over TLS 1.3 and TLS 1.2, x509 and PSK"

# refused: plaintext, wrong key, unknown identity, unknown CA
out=$(LIBNBD_DEBUG=1 nbdinfo "$FLASHD_URI0" 2>&1) && fail "a plaintext client was served in required mode"
grep -q 'TLS is required' <<<"$out" || fail "plaintext client: no TLS-required message: $out"
out=$(nbdinfo --list "nbd://127.0.0.1:$P/" 2>&1) && fail "a plaintext LIST succeeded in required mode"
ok "plaintext clients refused (server says: TLS is required)"
for who in wrongkey mallory; do
	id=alice
	[ $who = mallory ] && id=mallory
	n0=$(log_lines 'TLS handshake failed')
	nbdinfo "nbds://$id@localhost:$P/dimm0?tls-psk-file=$T/$who/keys.psk" >/dev/null 2>&1 &&
		fail "$who: PSK client with a wrong key was served"
	log_grew "$n0" 'TLS handshake failed' || true
	[ "$n1" -eq $((n0 + 1)) ] || fail "$who: want one 'TLS handshake failed' line, got $((n1 - n0))"
done
grep -q "unknown PSK identity 'mallory'" "$T/flashd.log" || fail "unknown identity not named in the log"
nbdinfo "nbds://localhost:$P/dimm0?tls-certificates=$PKI/rogue-ca" >/dev/null 2>&1 &&
	fail "a client trusting another CA accepted the server"
grep 'TLS handshake failed' "$T/flashd.log" | sed 's/^/    log: /'
ok "wrong PSK key, unknown identity refused (one log line each)"

run_check "raw protocol, tls = required" \
	timeout 120 "$PYTHON" "$NBD_CHECKS/raw_tls.py" --uri "$FLASHD_URI0" --ca "$PKI/ca/ca-cert.pem" \
	--mode required
# unix socket: same mode (--tls), PSK
nbdinfo "nbds+unix://alice@/dimm0?socket=$FLASHD_SOCK&tls-psk-file=$T/keys.psk" >/dev/null ||
	summary_add "nbdinfo over the unix socket with PSK failed"
flashd_running
stop_flashd
check_flashd_log
checks_passed || fail "checks failed"
ok "tls = required"

# ---- 2. client certificates, CRL ------------------------------------------------------
mv "$T/flashd.log" "$T/flashd-required.log"
start_flashd --preset test-1g --timing off --tls required --tls-certificates "$PKI/server-crl" \
	--tls-verify-peer
P=$FLASHD_PORT
nbdinfo "nbds://localhost:$P/dimm0?tls-certificates=$PKI/client" >/dev/null ||
	fail "verify-peer: a client certificate of the CA was refused"
grep -q 'client certificate .*CN=client1' "$T/flashd.log" || fail "client certificate not in the log"
# shellcheck disable=SC2046
qemu-img info $(qx509 "") --image-opts "driver=nbd,host=localhost,port=$P,export=dimm0,tls-creds=tls0" \
	>/dev/null || fail "verify-peer: qemu-img with a client certificate was refused"
for who in nocert rogue revoked; do
	n0=$(log_lines 'TLS handshake failed')
	nbdinfo "nbds://localhost:$P/dimm0?tls-certificates=$PKI/$who" >/dev/null 2>&1 &&
		fail "verify-peer: client '$who' was served"
	log_grew "$n0" 'TLS handshake failed' || true
	[ "$n1" -eq $((n0 + 1)) ] || fail "verify-peer: $who: want one 'TLS handshake failed' line"
	echo "    $who: $(grep 'TLS handshake failed' "$T/flashd.log" | tail -n1 | sed 's/.*TLS handshake failed: //')"
done
grep -q 'TLS handshake failed: .*peer did not return a certificate' "$T/flashd.log" ||
	fail "no certificate: reason not logged"
# GnuTLS sends no certificate the server's CA list does not name (above:
# "did not return a certificate"); OpenSSL (Python's ssl) sends it anyway
"$PYTHON" - "$P" "$PKI" "$NBD_CHECKS" <<'PY' || fail "rogue certificate sent by Python was not refused"
import ssl, sys
sys.path.insert(0, sys.argv[3])
from nbdraw import *
c = Conn.open("nbd://127.0.0.1:%s/dimm0" % sys.argv[1])
c.handshake()
reps = c.final_reply(OPT_STARTTLS)
assert reps[-1][0] == REP_ACK, reps
ctx = ssl.create_default_context(cafile=sys.argv[2] + "/ca/ca-cert.pem")
ctx.load_cert_chain(sys.argv[2] + "/rogue/client-cert.pem", sys.argv[2] + "/rogue/client-key.pem")
try:
    c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    # TLS 1.3: the client learns of the refusal on its first read
    reps = c.final_reply(OPT_LIST)
    sys.exit("served: %r" % reps)
except (ssl.SSLError, Closed, ConnectionError, OSError) as e:
    print("refused: %s" % e)
PY
for _ in $(seq 50); do
	grep -q 'TLS handshake failed: .*CN=intruder.*unable to get local issuer' "$T/flashd.log" && break
	sleep 0.1
done
grep -q 'TLS handshake failed: .*CN=intruder.*unable to get local issuer' "$T/flashd.log" ||
	fail "certificate of another CA: reason not logged"
grep -q 'TLS handshake failed: .*CN=revoked1.*certificate revoked' "$T/flashd.log" ||
	fail "revoked certificate: reason not logged"
flashd_running
stop_flashd
check_flashd_log
ok "tls_verify_peer: CA-signed client served; none, another CA's, revoked refused"

# ---- 3. allowed, per export and per listener -----------------------------------------------
mv "$T/flashd.log" "$T/flashd-verify.log"
rm -rf "$FLASHD_STATE"
P2=$(free_port)
cat >"$T/allowed.conf" <<EOF
[server]
tls = allowed
tls_certificates = $PKI/server
[dimm dimm0]
preset = test-1g
[dimm dimm1]
preset = test-1g
tls = required
[dimm dimm2]
preset = test-1g
tls = off
EOF
FLASHD_PORT=
start_flashd --config "$T/allowed.conf" --timing off --listen "127.0.0.1:$(free_port) tls=off"
P=$FLASHD_PORT
nbdinfo "$FLASHD_URI0" | grep -q 'without TLS' || fail "allowed: plaintext dimm0"
nbdinfo "nbds://localhost:$P/dimm0?tls-certificates=$PKI/client" | grep -q 'with TLS' ||
	fail "allowed: TLS dimm0"
nbdinfo "nbds://localhost:$P/dimm1?tls-certificates=$PKI/client" >/dev/null || fail "allowed: TLS dimm1"
out=$(LIBNBD_DEBUG=1 nbdinfo "$FLASHD_URI1" 2>&1) && fail "allowed: TLS-only dimm1 served in plaintext"
grep -q "export 'dimm1' requires TLS" <<<"$out" || fail "allowed: dimm1 without TLS: no reason given"
nbdinfo --list --json "nbd://127.0.0.1:$P/" | "$PYTHON" -c '
import json, sys
names = sorted(e["export-name"] for e in json.load(sys.stdin)["exports"])
assert names == ["dimm0", "dimm2"], names' || fail "allowed: plaintext LIST should show dimm0 and dimm2"
nbdinfo "nbd://127.0.0.1:$P/dimm2" >/dev/null || fail "allowed: plaintext dimm2 (tls = off)"
nbdinfo "nbds://localhost:$P/dimm2?tls-certificates=$PKI/client" >/dev/null 2>&1 &&
	fail "allowed: dimm2 (tls = off) served over TLS"
# plaintext in, TLS out
random_file "$T/data2" 8
nbdcopy "$T/data2" "$FLASHD_URI0"
nbd_py_region "nbds://localhost:$P/dimm0?tls-certificates=$PKI/client" 0 "$T/data2" ||
	fail "allowed: plaintext write reads differently over TLS"
run_check "raw protocol, tls = allowed" \
	timeout 120 "$PYTHON" "$NBD_CHECKS/raw_tls.py" --uri "$FLASHD_URI0" --ca "$PKI/ca/ca-cert.pem" \
	--mode allowed --tls-only-export dimm1 --plain-export dimm2
# the second listener: tls=off
P2=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$T/flashd.log" | tail -n1)
[ -n "$P2" ] && [ "$P2" != "$P" ] || fail "the tls=off listener is not in the log"
nbdinfo "nbd://127.0.0.1:$P2/dimm0" >/dev/null || fail "tls=off listener: plaintext dimm0"
nbdinfo "nbds://localhost:$P2/dimm0?tls-certificates=$PKI/client" >/dev/null 2>&1 &&
	fail "tls=off listener: TLS accepted"
out=$(LIBNBD_DEBUG=1 nbdinfo "nbd://127.0.0.1:$P2/dimm1" 2>&1) && fail "tls=off listener: dimm1 served"
grep -q "served over TLS only, which this listener does not offer" <<<"$out" ||
	fail "tls=off listener: dimm1 refusal does not say why"
flashd_running
stop_flashd
check_flashd_log
checks_passed || fail "checks failed"
ok "tls = allowed: both kinds of client, per-export and per-listener modes"

# ---- 4. doc/security.md's hardened configuration, verbatim ----------------------------------
# The block after "## A hardened configuration" in doc/security.md, as an admin
# copies it, next to its relative pki/server and keys.psk; only the listen
# address changes (tests bind 127.0.0.1), its tls=required stays.
# tls_verify_peer = yes with tls_psk: x509 clients need a certificate of the
# CA, PSK clients their key, over TLS 1.3 and TLS 1.2 both.
mv "$T/flashd.log" "$T/flashd-allowed.log"
H=$T/hardened
mkdir -p "$H/pki"
cp -r "$PKI/server" "$H/pki/server"
cp "$T/keys.psk" "$H/keys.psk"
tls_cert "$PKI/ca" "$PKI/host1" client host1
tls_cert "$PKI/ca" "$PKI/backup" client backup
awk '/^## A hardened configuration$/ { found = 1; next }
	found && /^    / { sub(/^    /, ""); print; started = 1; next }
	found && started && /^$/ { print; next }
	found && started { exit }' "$top/doc/security.md" >"$H/readme.conf"
grep -q '^tls_verify_peer = yes' "$H/readme.conf" && grep -q '^tls_psk = keys.psk' "$H/readme.conf" ||
	fail "the hardened configuration of doc/security.md not found, or without tls_verify_peer and tls_psk: $(cat "$H/readme.conf")"
P=$(free_port)
sed "s/^listen = 0\.0\.0\.0:10809 /listen = 127.0.0.1:$P /" "$H/readme.conf" >"$H/flashd.conf"
[ "$(diff "$H/readme.conf" "$H/flashd.conf" | grep -c '^>')" = 1 ] ||
	fail "the hardened configuration of doc/security.md has no 'listen = 0.0.0.0:10809 tls=...' line to move to 127.0.0.1"
sed 's/^/    conf: /' "$H/flashd.conf"
# start_flashd's --listen would replace the file's listener (and its mode)
FLASHD_STATE=$T/hstate FLASHD_PORT=$P
FLASHD_SOCK=$FLASHD_STATE/flashd.sock
mkdir -p "$FLASHD_STATE"
"$FLASHD" --foreground --config "$H/flashd.conf" --preset test-1g --timing off \
	--state-dir "$FLASHD_STATE" --unix "$FLASHD_SOCK" --pidfile "$FLASHD_STATE/flashd.pid" \
	>>"$T/flashd.log" 2>&1 &
FLASHD_PID=$!
track_pid "$FLASHD_PID"
for _ in $(seq 600); do
	kill -0 "$FLASHD_PID" 2>/dev/null || fail "flashd with the hardened configuration of doc/security.md exited"
	[ "$(cat "$FLASHD_STATE/flashd.pid" 2>/dev/null)" = "$FLASHD_PID" ] && break
	sleep 0.1
done
[ "$(cat "$FLASHD_STATE/flashd.pid" 2>/dev/null)" = "$FLASHD_PID" ] || fail "flashd did not become ready"

HX="nbds://localhost:$P/dimm0?tls-certificates"
HPSK="nbds://alice@localhost:$P/dimm0?tls-psk-file"
# served: read-write over a CA certificate (CN=host1) and a PSK (alice)
"$PYTHON" - "$HX=$PKI/host1" "$HPSK=$H/keys.psk" <<'PY' || fail "hardened: host1's certificate or alice's PSK refused"
import sys, nbd
for i, uri in enumerate(sys.argv[1:]):
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)
    h.connect_uri(uri)
    assert h.get_tls_negotiated(), uri
    assert not h.is_read_only(), uri
    h.pwrite(bytes([0x60 + i]) * 65536, i << 20)
    h.flush()
    h.shutdown()
h = nbd.NBD(); h.set_uri_allow_local_file(True); h.connect_uri(sys.argv[1])
for i in range(len(sys.argv) - 1):
    assert h.pread(65536, i << 20) == bytes([0x60 + i]) * 65536, i
h.shutdown()
PY
grep -q "TLS established: TLSv1.3, .*PSK identity 'alice'" "$T/flashd.log" || fail "hardened: no TLS 1.3 PSK session in the log"
grep -q "TLS established: TLSv1.3, .*client certificate .*CN=host1" "$T/flashd.log" ||
	fail "hardened: no TLS 1.3 session with host1's certificate in the log"
ok "hardened: libnbd with host1's certificate and with alice's PSK (TLS 1.3): read-write"
# qemu: both kinds, TLS 1.3 and TLS 1.2
hq() { echo "driver=nbd,host=localhost,port=$P,export=dimm0,tls-creds=tls0"; }
for prio in "" ",priority=NORMAL:-VERS-TLS1.3"; do
	qemu-io --object "tls-creds-psk,id=tls0,endpoint=client,dir=$H,username=alice$prio" \
		--image-opts "$(hq)" -c 'write -P 0x71 2M 64k' >"$T/qio.out" 2>&1 ||
		{ cat "$T/qio.out"; fail "hardened: qemu-io with alice's PSK${prio:+ (TLS 1.2)}"; }
	qemu-io --object "tls-creds-x509,id=tls0,endpoint=client,dir=$PKI/host1$prio" \
		--image-opts "$(hq)" -c 'read -P 0x71 2M 64k' >"$T/qio.out" 2>&1 ||
		{ cat "$T/qio.out"; fail "hardened: qemu-io with host1's certificate${prio:+ (TLS 1.2)}"; }
	grep -qi 'pattern verification failed' "$T/qio.out" && fail "hardened: qemu-io read other data"
done
grep -q "TLS established: TLSv1.2, .*PSK identity 'alice'" "$T/flashd.log" || fail "hardened: no TLS 1.2 PSK session"
grep -q "TLS established: TLSv1.2, .*client certificate .*CN=host1" "$T/flashd.log" ||
	fail "hardened: no TLS 1.2 session with host1's certificate"
ok "hardened: qemu-io with host1's certificate and with alice's PSK, TLS 1.3 and TLS 1.2"
# an OpenSSL PSK client offers the certificate suites too (GnuTLS's only
# what it has keys for): TLS 1.2 must still choose a PSK suite, which asks
# for no certificate
alice_key=$(sed -n 's/^alice://p' "$H/keys.psk")
for v in -tls1_2 -tls1_3; do
	n0=$(log_lines "TLS established: TLSv1.${v#-tls1_}, .*PSK identity 'alice'")
	timeout 60 "$PYTHON" "$NBD_CHECKS/openssl_starttls.py" "nbd://127.0.0.1:$P/dimm0" "$v" \
		-psk_identity alice -psk "$alice_key" -CAfile "$PKI/ca/ca-cert.pem" >"$T/sclient.out" 2>&1 || true
	log_grew "$n0" "TLS established: TLSv1.${v#-tls1_}, .*PSK identity 'alice'" ||
		{ cat "$T/sclient.out"; tail -n 3 "$T/flashd.log"; fail "hardened: openssl s_client $v with alice's PSK refused"; }
	grep "TLS established: TLSv1.${v#-tls1_}, .*PSK identity 'alice'" "$T/flashd.log" | tail -n1 | sed 's/.*: TLS/    s_client: TLS/'
done
# and with host1's certificate: a certificate suite, the certificate verified
n0=$(log_lines "TLS established: TLSv1.2, .*client certificate .*CN=host1")
timeout 60 "$PYTHON" "$NBD_CHECKS/openssl_starttls.py" "nbd://127.0.0.1:$P/dimm0" -tls1_2 \
	-cert "$PKI/host1/client-cert.pem" -key "$PKI/host1/client-key.pem" -CAfile "$PKI/ca/ca-cert.pem" \
	>"$T/sclient.out" 2>&1 || true
log_grew "$n0" "TLS established: TLSv1.2, .*client certificate .*CN=host1" ||
	{ cat "$T/sclient.out"; fail "hardened: openssl s_client -tls1_2 with host1's certificate refused"; }
ok "hardened: openssl s_client with alice's PSK (TLS 1.2 and 1.3) and with host1's certificate (TLS 1.2)"
# backup's certificate: read-only (allow_ro)
"$PYTHON" - "$HX=$PKI/backup" <<'PY' || fail "hardened: backup's certificate not served read-only"
import sys, nbd
h = nbd.NBD(); h.set_uri_allow_local_file(True); h.connect_uri(sys.argv[1])
assert h.is_read_only()
assert h.pread(65536, 0) == b"\x60" * 65536
h.shutdown()
PY
ok "hardened: backup's certificate reads, read-only"
# refused: no certificate, another CA's, a wrong PSK key, an unknown identity
for who in nocert rogue wrongkey mallory; do
	case $who in
	nocert | rogue) uri="$HX=$PKI/$who" ;;
	wrongkey) uri="$HPSK=$T/wrongkey/keys.psk" ;;
	mallory) uri="nbds://mallory@localhost:$P/dimm0?tls-psk-file=$T/mallory/keys.psk" ;;
	esac
	n0=$(log_lines 'TLS handshake failed')
	nbdinfo "$uri" >/dev/null 2>&1 && fail "hardened: client '$who' was served"
	log_grew "$n0" 'TLS handshake failed' || true
	[ "$n1" -eq $((n0 + 1)) ] || fail "hardened: $who: want one 'TLS handshake failed' line, got $((n1 - n0))"
	echo "    $who: $(grep 'TLS handshake failed' "$T/flashd.log" | tail -n1 | sed 's/.*TLS handshake failed: //')"
done
qemu-io --object "tls-creds-psk,id=tls0,endpoint=client,dir=$T/wrongkey,username=alice,priority=NORMAL:-VERS-TLS1.3" \
	--image-opts "$(hq)" -c 'read 0 4k' >/dev/null 2>&1 && fail "hardened: a wrong PSK key was served over TLS 1.2"
out=$(LIBNBD_DEBUG=1 nbdinfo "nbd://127.0.0.1:$P/dimm0" 2>&1) && fail "hardened: a plaintext client was served"
grep -q 'TLS is required' <<<"$out" || fail "hardened: plaintext client: no TLS-required message"
ok "hardened: no certificate, another CA's, a wrong key (TLS 1.3 and 1.2), an unknown identity, plaintext: refused"
# dimm1: the local unix socket (plaintext), not a TLS client on 127.0.0.1
nbdinfo "nbd+unix:///dimm1?socket=$FLASHD_SOCK" >/dev/null || fail "hardened: dimm1 over the unix socket"
nbdinfo "nbds://localhost:$P/dimm1?tls-certificates=$PKI/host1" >/dev/null 2>&1 &&
	fail "hardened: dimm1 served to 127.0.0.1 (allow = 10.1.0.0/16 unix)"
ok "hardened: dimm1 served on the unix socket only"
flashd_running
stop_flashd
check_flashd_log
ok "the hardened configuration of doc/security.md: x509 and PSK clients both"
