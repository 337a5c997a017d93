"""openssl_starttls.py - OpenSSL's s_client as an NBD TLS client.

    openssl_starttls.py URI [S_CLIENT OPTION...]

Negotiates up to NBD_OPT_STARTTLS on URI (nbdraw.py), then runs
`openssl s_client -unix SOCK OPTION...` and relays its connection to the
negotiated stream: the TLS handshake is s_client's (its PSK and cipher
options: -psk_identity, -psk, -tls1_2, -cipher...), which libnbd and qemu
(GnuTLS) cannot be asked for.  s_client's stdin is empty, so it closes
after the handshake.  Prints s_client's output; exits with its status.
"""
import os
import select
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbdraw import Conn, OPT_STARTTLS, REP_ACK  # noqa: E402


def main():
    c = Conn.open(sys.argv[1])
    c.handshake()
    reps = c.final_reply(OPT_STARTTLS)
    assert reps[-1][0] == REP_ACK, reps
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "relay.sock")
        lsn = socket.socket(socket.AF_UNIX)
        lsn.bind(path)
        lsn.listen(1)
        p = subprocess.Popen(["openssl", "s_client", "-unix", path] + sys.argv[2:],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        lsn.settimeout(10)
        a, _ = lsn.accept()
        peers = {a: c.sock, c.sock: a}
        c.sock.settimeout(None)
        open_ = set(peers)
        while open_:
            r, _, _ = select.select(list(open_), [], [], 20)
            if not r:
                break  # nothing for 20 s: give up
            for s in r:
                try:
                    data = s.recv(65536)
                except ConnectionResetError:
                    data = b""
                if data:
                    peers[s].sendall(data)
                else:
                    open_.discard(s)
                    try:
                        peers[s].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
        a.close()
        c.sock.close()
        out, _ = p.communicate(timeout=20)
    sys.stdout.write(out.decode(errors="replace"))
    sys.exit(p.returncode)


main()
