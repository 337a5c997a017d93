"""ctl_forward.py PORT CTL [--http] - a forwarder from 127.0.0.1:PORT (TCP)
to flashd's control socket CTL, as doc/managing.md's "Dashboard" has one,
for the tests that reach the control API the way a browser does
(tests/functions.sh's start_ctl_forward starts it).

    (default)  bytes as they are, both ways
    --http     one HTTP request per connection: its Connection and
               Keep-Alive headers dropped, "Connection: close" sent
               instead, the answer passed back to its end
"""
import socket
import socketserver
import sys
import threading


def pump(a, b):
    """a's bytes to b until a's end, then b's write side shut"""
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def control(path):
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    return u


class Bytes(socketserver.BaseRequestHandler):
    def handle(self):
        u = control(self.server.ctl)
        t = threading.Thread(target=pump, args=(u, self.request), daemon=True)
        t.start()
        pump(self.request, u)
        t.join(30)
        u.close()


class OneRequest(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline()
        if not line:
            return
        hdrs, n = [], 0
        while True:
            h = self.rfile.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k = h.split(b":", 1)[0].strip().lower()
            if k == b"content-length":
                n = int(h.split(b":", 1)[1])
            if k not in (b"connection", b"keep-alive"):
                hdrs.append(h)
        body = self.rfile.read(n) if n else b""
        u = control(self.server.ctl)
        u.sendall(line + b"".join(hdrs) + b"Connection: close\r\n\r\n" + body)
        pump(u, self.request)
        u.close()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main(a):
    if len(a) not in (2, 3) or a[2:] not in ([], ["--http"]):
        print(__doc__, file=sys.stderr)
        return 2
    s = Server(("127.0.0.1", int(a[0])), OneRequest if a[2:] else Bytes)
    s.ctl = a[1]
    s.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
