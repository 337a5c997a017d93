#!/usr/bin/python3
"""manage_busy.py - a control request that waits on a busy ioDimm thread
holds up nothing else: not NBD handshakes (to any export), not other
control requests, not the other ioDimm (tests/test-manage.sh).

  manage_busy.py stall --ctl SOCK --busy URI --other URI [--flashctl PATH]
      flashd runs with FLASHD_TEST_HOOKS=1: the busy export's thread is
      made to sleep 12 s (POST /v1/dimms/NAME/test-stall).  Meanwhile a full
      status and /metrics wait for it; handshakes to both exports, version,
      the other ioDimm's status (curl-like and flashctl) must each answer
      within 0.5 s; the full status answers after its 5 s limit, saying the
      busy ioDimm did not answer; the stall's own reply arrives after 12 s
      (past evhttp's 10 s timeout: long actions are not cut off).
  manage_busy.py load --ctl SOCK --busy URI --other URI --seconds S
      while something else (fio) loads the busy export: status, metrics,
      handshakes keep answering promptly; prints the latencies.
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctlclient  # noqa: E402
import nbdraw  # noqa: E402
import promcheck  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["stall", "load"])
ap.add_argument("--ctl", required=True)
ap.add_argument("--busy", required=True)
ap.add_argument("--other", required=True)
ap.add_argument("--flashctl")
ap.add_argument("--seconds", type=float, default=6.0)
args = ap.parse_args()

failures = []


def fail(msg):
    print("FAIL " + msg, flush=True)
    failures.append(msg)


def timed(fn, *a):
    t0 = time.monotonic()
    r = fn(*a)
    return time.monotonic() - t0, r


def handshake(uri):
    """Fixed-newstyle handshake and NBD_OPT_GO; then close.  Returns the size."""
    c = nbdraw.Conn.open(uri, timeout=10.0)
    try:
        c.handshake()
        size, _ = c.go()
        return size
    finally:
        c.close()


def handshake_and_read(uri):
    c = nbdraw.Conn.open(uri, timeout=10.0)
    try:
        c.handshake()
        c.go()
        r = c.cmd(nbdraw.CMD_READ, offset=0, length=4096)
        if r.error:
            raise AssertionError("read error %d" % r.error)
        return True
    finally:
        c.close()


class Background(threading.Thread):
    def __init__(self, fn, *a):
        super().__init__(daemon=True)
        self.fn, self.a = fn, a
        self.result = self.error = None
        self.t0 = time.monotonic()
        self.elapsed = None
        self.start()

    def run(self):
        try:
            self.result = self.fn(*self.a)
        except Exception as e:  # reported by the caller
            self.error = e
        self.elapsed = time.monotonic() - self.t0


def busy_name():
    return nbdraw.parse_uri(args.busy)[2]


def other_name():
    return nbdraw.parse_uri(args.other)[2]


def stall():
    busy, other = busy_name(), other_name()
    stall_req = Background(ctlclient.post, args.ctl, "/v1/dimms/%s/test-stall?ms=12000" % busy)
    time.sleep(0.5)
    status = Background(ctlclient.get_json, args.ctl, "/v1/status")
    metrics = Background(ctlclient.request, args.ctl, "GET", "/metrics")
    time.sleep(0.2)
    worst = {}
    checks = [
        ("NBD handshake to %s (busy)" % busy, lambda: handshake(args.busy)),
        ("NBD handshake and a read on %s" % other, lambda: handshake_and_read(args.other)),
        ("GET /v1/version", lambda: ctlclient.get_json(args.ctl, "/v1/version")),
        ("GET /v1/dimms/%s" % other, lambda: ctlclient.get_json(args.ctl, "/v1/dimms/" + other)),
    ]
    if args.flashctl:
        checks.append(("flashctl status %s" % other, lambda: subprocess.run(
            [args.flashctl, "status", "--control", args.ctl, other], check=True,
            stdout=subprocess.DEVNULL, timeout=10)))
    end = time.monotonic() + 3.0
    rounds = 0
    while time.monotonic() < end:
        for what, fn in checks:
            try:
                dt, _ = timed(fn)
            except Exception as e:
                fail("%s failed while %s is busy: %s" % (what, busy, e))
                return
            worst[what] = max(worst.get(what, 0), dt)
        rounds += 1
        time.sleep(0.02)
    if status.elapsed is not None:
        fail("the full status answered after %.2f s, before the busy thread could" % status.elapsed)
    for what, dt in worst.items():
        print("%-40s worst %.3f s over %d tries while %s sleeps" % (what, dt, rounds, busy))
        if dt > 0.5:
            fail("%s took %.3f s while %s's thread was busy (want < 0.5 s)" % (what, dt, busy))
    status.join(15)
    metrics.join(15)
    if status.error:
        fail("the full status failed: %s" % status.error)
    else:
        print("full status answered after %.2f s" % status.elapsed)
        if not 4.5 <= status.elapsed <= 8:
            fail("the full status answered after %.2f s, want its 5 s limit" % status.elapsed)
        d = ctlclient.dimm(status.result, busy)
        o = ctlclient.dimm(status.result, other)
        if "did not answer" not in d.get("note", ""):
            fail("the status does not say %s did not answer: %s" % (busy, d))
        if "stats" in d or "stats" not in o:
            fail("the status should have figures for %s only" % other)
    if metrics.error:
        fail("/metrics failed: %s" % metrics.error)
    else:
        code, headers, body = metrics.result
        print("/metrics answered after %.2f s" % metrics.elapsed)
        try:
            fams = promcheck.parse(body.decode())
            have = {s[1]["dimm"] for s in fams["flashd_dimm_capacity_bytes"]["samples"]}
            if have != {other}:
                fail("/metrics has capacity figures for %s, want only %s" % (sorted(have), other))
        except promcheck.PromError as e:
            fail("/metrics with a busy ioDimm is not valid: %s" % e)
    stall_req.join(20)
    if stall_req.error:
        fail("the stall request failed: %s" % stall_req.error)
    else:
        code, reply = stall_req.result
        print("12 s stall answered after %.2f s: %s" % (stall_req.elapsed, reply))
        if code != 200 or not reply.get("ok") or stall_req.elapsed < 11.5:
            fail("the stall's reply: HTTP %d after %.2f s: %s" % (code, stall_req.elapsed, reply))
    dt, d = timed(ctlclient.get_json, args.ctl, "/v1/dimms/" + busy)
    print("status of %s after the stall: %.3f s" % (busy, dt))
    if "stats" not in d or dt > 0.5:
        fail("after the stall, %s's status (%.3f s) lacks figures: %s" % (busy, dt, d))


def load():
    busy = busy_name()
    lat = {"status": [], "metrics": [], "handshake": [], "version": []}
    first = ctlclient.dimm(ctlclient.get_json(args.ctl, "/v1/status"), busy)["io"]["ops"]["write"]
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        lat["status"].append(timed(ctlclient.get_json, args.ctl, "/v1/status")[0])
        lat["metrics"].append(timed(ctlclient.request, args.ctl, "GET", "/metrics")[0])
        lat["handshake"].append(timed(handshake, args.other)[0])
        lat["handshake"].append(timed(handshake, args.busy)[0])
        lat["version"].append(timed(ctlclient.get_json, args.ctl, "/v1/version")[0])
        time.sleep(0.05)
    last = ctlclient.dimm(ctlclient.get_json(args.ctl, "/v1/status"), busy)["io"]["ops"]["write"]
    print("writes to %s during the run: %d" % (busy, last - first))
    if last - first < 10:
        fail("the load did not reach %s (%d writes)" % (busy, last - first))
    limits = {"status": 2.0, "metrics": 2.0, "handshake": 1.0, "version": 1.0}
    for k, v in lat.items():
        print("%-10s n=%3d median %.4f s, worst %.4f s" % (k, len(v), statistics.median(v), max(v)))
        if max(v) > limits[k]:
            fail("%s took %.3f s under load (limit %.1f s)" % (k, max(v), limits[k]))


stall() if args.mode == "stall" else load()
if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("ok: nothing waited for the busy ioDimm")
