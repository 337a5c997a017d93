"""ctlclient.py - flashd's control socket (HTTP over a unix socket) for the
management tests (tests/test-manage*.sh).

    code, headers, body = request(SOCK, "GET", "/v1/status")
    st = get_json(SOCK, "/v1/status")            # fails unless 200
    code, reply = post(SOCK, "/v1/dimms/dimm0/detach")

HTTP/1.1 through Python's http.client, so these are not flashctl's bytes:
the tests drive the API with a second client.  Like flashctl it names the
loopback as Host and sends X-Flashd-Action with a POST: flashd refuses
requests that look like a web page's (server/ctl_access.c, cross_site).
"""
import http.client
import json
import socket


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def request(sock, method, url, timeout=60.0):
    c = UnixHTTPConnection(sock, timeout)
    try:
        headers = {"Content-Length": "0", "X-Flashd-Action": "1"} if method == "POST" else {}
        c.request(method, url, headers=headers)
        r = c.getresponse()
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


def get_json(sock, url, timeout=60.0):
    code, headers, body = request(sock, "GET", url, timeout)
    if code != 200:
        raise AssertionError("GET %s: HTTP %d: %s" % (url, code, body[:300]))
    if not headers.get("content-type", "").startswith("application/json"):
        raise AssertionError("GET %s: Content-Type %r" % (url, headers.get("content-type")))
    return json.loads(body)


def post(sock, url, timeout=120.0):
    code, headers, body = request(sock, "POST", url, timeout)
    return code, json.loads(body)


def dimm(status, name):
    for d in status["dimms"]:
        if d["name"] == name:
            return d
    raise AssertionError("no dimm %s in the status" % name)
