#!/usr/bin/python3
"""raw_hostile.py - the hostile-client findings of issue 12, one check each.

Run against a flashd started by tests/test-nbd-hostile.sh (loopback only;
clients use source addresses 127.0.0.1 to 127.0.0.8 to look like several
hosts), whose configuration sets max_connections = 64,
max_connections_per_address = 8, buffer_limit = 128M, idle_timeout = 0,
idle_timeout_busy = 0 and an export "secret" that only 192.0.2.0/24 may
use.

  option limits       an option over 16 KiB is answered TOO_BIG and the
                      connection goes on; one over 1 MiB closes it; the
                      33rd option is answered TOO_BIG and the connection
                      closes (an EXPORT_NAME there: closed unanswered; an
                      ABORT: acknowledged)
  option flood        clients that flood options and never read the
                      replies cost (almost) no memory (was: 18 -> 423 MiB)
  meta context ACL    LIST/SET_META_CONTEXT on a denied export: POLICY, no
                      context revealed
  per-address cap     the 9th connection of an address is refused, another
                      address still gets in; refusals are not logged one by
                      one, and those held back are summed up when the
                      period ends
  pipelined reads     40 clients pipelining 32 MiB READs, never reading:
                      flashd grows by at most about buffer_limit (was +3.5
                      GiB), and a well-behaved client on the same export is
                      served meanwhile (was: stalled 10 s)
  idle buffers        a connection idle after large reads gives its buffers back
  buffer_limit        (reloaded to 64M, idle_timeout 3) a request waiting
                      for buffer_limit longer than idle_timeout is not
                      closed as idle and is served once the budget comes
                      free; a refused request (out of range) does not wait
                      for a buffer; two busy clients keeping 32 MiB buffers
                      for reuse give them back when a third client's 1 MiB
                      READ waits (was: 11 s, until one disconnected); the
                      first in the queue of waiters, paused with 14 MiB of
                      its own replies unread, goes on once its buffer fits
                      (else everyone behind it waits for ever); the
                      budget in use and the waiting count are in the status
  in-flight cap       480 pipelined 4 KiB READs (unix socket), unread, are
                      all parsed: each charges its payload to the 16 MiB
                      cap (was: its 128 KiB buffer, about 128 requests)
  control socket      a huge body, huge headers and an endless header line
                      are refused early and cost no memory; NBD handshakes
                      go on meanwhile
  idle_timeout_busy   (reloaded to 2 s) 40 idle clients keep their
                      connections; once over 48 of the 64 slots are open
                      they are dropped; a lone idle client outlasts 56
                      connections of 7 other addresses, busy or idle
  idle lock-out       64 idle clients after the handshake lock out a new
                      client; with idle_timeout set (reload) they are
                      dropped and the new client gets in

  raw_hostile.py --port P --unix-sock S --control C --pid PID --log FLASHD_LOG
                 --config FLASHD_CONF
"""
import argparse
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd  # noqa: E402
from nbdraw import *  # noqa: F401,F403,E402
from testlib import check, finish, log, section  # noqa: E402

MiB = 1 << 20
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--unix-sock", required=True)
ap.add_argument("--control", required=True)
ap.add_argument("--pid", type=int, required=True)
ap.add_argument("--log", required=True, help="flashd's log file")
ap.add_argument("--config", required=True, help="flashd's configuration file (rewritten for the reload)")
args = ap.parse_args()

EXPORT = "dimm0"
PER_ADDR = 8
MAX_CONN = 64
BUFFER_LIMIT = 128 * MiB


def rss():
    with open("/proc/%d/status" % args.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def mib(n):
    return "%.1f MiB" % (n / MiB)


class SrcConn(Conn):
    """A TCP connection from a chosen loopback source address."""

    def __init__(self, src="127.0.0.1", export=EXPORT, timeout=10.0, rcvbuf=None):
        self.family = socket.AF_INET
        self.address = ("127.0.0.1", args.port)
        self.export = export
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if rcvbuf:   # before connect: a small receive window
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind((src, 0))
        self.sock.connect(self.address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.hflags = None
        self.structured = False
        self.pending = {}
        self.done = {}
        self.arrivals = []


def refused(c):
    """True if the server closed c without a greeting (connection refused
    by a limit)."""
    try:
        c.greeting()
        return False
    except (Closed, ConnectionResetError):
        return True


def log_size():
    return os.path.getsize(args.log)


def log_since(pos):
    with open(args.log, "rb") as f:
        f.seek(pos)
        return f.read().decode(errors="replace")


def good_client(deadline=10.0):
    """A well-behaved libnbd client on the same export (unix socket): a
    4 KiB write and read back must complete within deadline (liveness, not
    performance)."""
    res = {}

    def run():
        try:
            h = nbd.NBD()
            h.connect_uri("nbd+unix:///%s?socket=%s" % (EXPORT, args.unix_sock))
            d = os.urandom(4096)
            h.pwrite(d, 300 * MiB)
            res["ok"] = h.pread(4096, 300 * MiB) == d
            h.shutdown()
        except Exception as e:  # noqa: BLE001
            res["err"] = e
    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(deadline)
    check(not t.is_alive(), "a well-behaved client was not served within %.0f s" % deadline)
    check("err" not in res, "the well-behaved client failed: %s" % res.get("err"))
    check(res.get("ok"), "the well-behaved client read back other data")
    return time.monotonic() - t0


def ctl_get(path):
    """GET path on the control socket: the body (HTTP/1.0, read to EOF)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(args.control)
    s.sendall(b"GET %s HTTP/1.0\r\n\r\n" % path.encode())
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    return head, body


@contextlib.contextmanager
def busy_timeout_2():
    """idle_timeout_busy = 2 by a reload, from no connection on; 0 again
    at the end of the section (not when a check in it failed)"""
    wait_no_connections("the section before")
    with open(args.config) as f:
        conf = f.read()
    reload_with(conf.replace("idle_timeout_busy = 0", "idle_timeout_busy = 2"), "idle_timeout_busy 2")
    yield
    reload_with(conf, "idle_timeout_busy 0")


def open_clients(first, n, addr0=1):
    """clients first .. first+n-1, each past GO, PER_ADDR of them from each
    address from 127.0.0.ADDR0 on"""
    out = []
    for i in range(first, first + n):
        c = SrcConn("127.0.0.%d" % (addr0 + i // PER_ADDR), timeout=20)
        c.handshake()
        c.go()
        out.append(c)
    return out


def wait_no_connections(what, timeout=20.0):
    """Every connection of the section before is gone (the slots too)."""
    end = time.monotonic() + timeout
    while True:
        n = json.loads(ctl_get("/v1/status")[1])["connections"]
        if n == 0:
            return
        if time.monotonic() > end:
            check(False, "%d connection(s) still open %.0f s after %s" % (n, timeout, what))
        time.sleep(0.1)


def settle_rss(limit, timeout=10.0):
    """Wait (up to timeout) for flashd's RSS to drop to limit or below."""
    end = time.monotonic() + timeout
    r = rss()
    while r > limit and time.monotonic() < end:
        time.sleep(0.2)
        r = rss()
    return r


# ---- option limits -----------------------------------------------------------------
with section("option limits: size and count"):
    c = SrcConn()
    c.handshake()
    # 20 KiB: read and discarded, answered TOO_BIG; the stream stays in sync
    reps = c.final_reply(OPT_INFO, Conn.info_data(EXPORT) + b"\0" * (20 << 10))
    check(reps[-1][0] == REP_ERR_TOO_BIG, "a 20 KiB option: %s, want NBD_REP_ERR_TOO_BIG" % repname(reps[-1][0]))
    reps = c.final_reply(OPT_LIST)
    check(reps[-1][0] == REP_ACK, "LIST after an oversized option: %s" % repname(reps[-1][0]))
    c.close()
    # over 1 MiB: hard disconnect, nothing more is read
    c = SrcConn()
    c.handshake()
    c.option(OPT_INFO, b"", length=2 * MiB)
    check(c.wait_closed(5), "a 2 MiB option length did not close the connection")
    c.close()
    # option count: 32 are answered, the 33rd gets TOO_BIG and the connection closes
    c = SrcConn()
    c.handshake()
    for i in range(32):
        reps = c.final_reply(OPT_LIST)
        check(reps[-1][0] == REP_ACK, "LIST #%d: %s" % (i + 1, repname(reps[-1][0])))
    c.option(OPT_LIST)
    _, rtype, _ = c.opt_reply(OPT_LIST)
    check(rtype == REP_ERR_TOO_BIG, "option #33: %s, want NBD_REP_ERR_TOO_BIG" % repname(rtype))
    check(c.wait_closed(5), "the connection stayed open after too many options")
    c.close()
    # the 33rd option is NBD_OPT_EXPORT_NAME: it has no option reply, so
    # the connection closes without one (was: a TOO_BIG option reply)
    c = SrcConn()
    c.handshake()
    for i in range(32):
        c.final_reply(OPT_LIST)
    c.option(OPT_EXPORT_NAME, EXPORT.encode())
    closed, got = c.expect_silence_then_close(5)
    check(closed and not got, "EXPORT_NAME as option #33: %d bytes sent before the close, want none" % len(got))
    c.close()
    # the 33rd option is NBD_OPT_ABORT: acknowledged, then closed
    c = SrcConn()
    c.handshake()
    for i in range(32):
        c.final_reply(OPT_LIST)
    c.option(OPT_ABORT)
    _, rtype, _ = c.opt_reply(OPT_ABORT)
    check(rtype == REP_ACK, "ABORT as option #33: %s, want NBD_REP_ACK" % repname(rtype))
    check(c.wait_closed(5), "the connection stayed open after ABORT as option #33")
    c.close()
    log("     20 KiB option: TOO_BIG; 2 MiB: closed; 33rd option: TOO_BIG and closed "
        "(EXPORT_NAME: closed unanswered; ABORT: ACK)")

# ---- option flood ------------------------------------------------------------------
with section("option flood without reading the replies", timeout=90):
    before = rss()
    flood = struct.pack(">QII", IHAVEOPT, OPT_LIST, 0) * (64 << 10)  # 1 MiB of LIST options
    sent = [0]

    def flooder(src):
        c = SrcConn(src)
        c.handshake()
        c.sock.settimeout(10)
        try:
            for _ in range(32):   # up to 32 MiB, never reading a reply
                c.sock.sendall(flood)
                sent[0] += len(flood)
        except OSError:
            pass   # closed by the server: fine
        finally:
            c.reset()
    ts = [threading.Thread(target=flooder, args=("127.0.0.%d" % (2 + i % 4),)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    grew = rss() - before
    log("     8 flooders sent %s of options; flashd RSS %s -> %s (%+.1f MiB)" %
        (mib(sent[0]), mib(before), mib(rss()), grew / MiB))
    check(grew < 16 * MiB, "flooding options grew flashd by %s (bound: 16 MiB)" % mib(grew))

# ---- META_CONTEXT under access control ----------------------------------------------
with section("META_CONTEXT options on an export the client may not use"):
    wait_no_connections("the section before")
    c = SrcConn()
    c.handshake()
    c.structured_reply()
    for opt in (OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT):
        for q in ((), ("base:allocation",), ("base:",)):
            if opt == OPT_SET_META_CONTEXT and not q:
                continue
            reps = c.final_reply(opt, Conn.meta_data("secret", q))
            check(not any(t == REP_META_CONTEXT for t, _ in reps),
                  "option %d on the denied export revealed a context: %r" % (opt, reps))
            check(reps[-1][0] == REP_ERR_POLICY,
                  "option %d on the denied export: %s, want NBD_REP_ERR_POLICY" % (opt, repname(reps[-1][0])))
    reps = c.final_reply(OPT_LIST_META_CONTEXT, Conn.meta_data("no-such-export", ()))
    check(reps[-1][0] == REP_ERR_UNKNOWN, "unknown export: %s" % repname(reps[-1][0]))
    # the allowed export still works on the same connection
    c.go(EXPORT, meta=("base:allocation",))
    check(c.contexts.get("base:allocation"), "base:allocation not selected on the allowed export")
    c.close()

# ---- per-address cap ----------------------------------------------------------------
with section("per-address connection cap; refusals not logged one by one", timeout=90):
    wait_no_connections("the section before")
    held = []
    for i in range(PER_ADDR):
        c = SrcConn("127.0.0.1")
        c.greeting()
        held.append(c)
    time.sleep(0.2)
    check(refused(SrcConn("127.0.0.1")), "connection #%d from 127.0.0.1 was not refused "
          "(max_connections_per_address = %d)" % (PER_ADDR + 1, PER_ADDR))
    other = SrcConn("127.0.0.2")
    other.handshake()
    other.go()
    r = other.cmd(CMD_READ, offset=0, length=4096)
    check(r.error == 0, "a client from another address was not served: %r" % r)
    other.close()
    pos = log_size()
    for _ in range(200):
        c = SrcConn("127.0.0.1")
        refused(c)
        c.close()
    time.sleep(0.5)
    lines = [ln for ln in log_since(pos).splitlines() if "refused" in ln]
    log("     200 refusals logged in %d line(s)" % len(lines))
    check(len(lines) <= 3, "200 refused connections logged %d lines (want a rate-limited few)" % len(lines))
    # the ones held back are summed up when the period ends, without
    # waiting for another refusal (was: only with the next refusal)
    end = time.monotonic() + 13
    while "more connection(s) refused" not in log_since(pos) and time.monotonic() < end:
        time.sleep(0.2)
    check("more connection(s) refused" in log_since(pos),
          "the refusals held back were not summed up within 13 s:\n" + log_since(pos))
    for c in held:
        c.close()

# ---- pipelined large reads never read -----------------------------------------------
with section("40 clients pipelining 32 MiB READs without reading", timeout=120):
    wait_no_connections("the section before")
    time.sleep(1)
    good_client()
    before = settle_rss(rss(), 0)
    hostile = []
    for i in range(40):
        c = SrcConn("127.0.0.%d" % (1 + i // PER_ADDR), timeout=20)
        c.handshake()
        c.go(infos=(), structured=False)
        c.send(b"".join(Conn.pack_request(CMD_READ, 0, k + 1, k * 32 * MiB, 32 * MiB) for k in range(8)))
        hostile.append(c)
    time.sleep(3)
    peak = rss()
    dt = good_client(10.0)
    peak = max(peak, rss())
    grew = peak - before
    log("     flashd RSS %s -> %s (%+.1f MiB; buffer_limit %s); well-behaved client served in %.2f s" %
        (mib(before), mib(peak), grew / MiB, mib(BUFFER_LIMIT), dt))
    check(grew < BUFFER_LIMIT + 64 * MiB, "40 stalled readers grew flashd by %s (bound: buffer_limit "
          "%s + 64 MiB)" % (mib(grew), mib(BUFFER_LIMIT)))
    for c in hostile:
        c.reset()
    after = settle_rss(before + 32 * MiB)
    log("     after they left: %s" % mib(after))
    check(after <= before + 32 * MiB, "flashd kept %s after the stalled readers left" % mib(after - before))

# ---- idle connections give their buffers back ---------------------------------------
with section("an idle connection gives its buffers back", timeout=60):
    wait_no_connections("the section before")
    before = rss()
    c = SrcConn("127.0.0.3")
    c.handshake()
    c.go(infos=(), structured=False)
    for k in range(4):
        r = c.cmd(CMD_READ, offset=k * 32 * MiB, length=32 * MiB)
        check(r.error == 0, "32 MiB read failed: %r" % r)
    busy = rss()
    after = settle_rss(before + 16 * MiB, 10)
    log("     RSS %s, after 4 x 32 MiB reads %s, idle %s" % (mib(before), mib(busy), mib(after)))
    check(after <= before + 16 * MiB, "an idle connection still holds %s" % mib(after - before))
    r = c.cmd(CMD_READ, offset=0, length=4096)
    check(r.error == 0, "a read after the idle period failed: %r" % r)
    c.close()

# ---- buffer_limit: waiting connections, kept buffers, refused requests ---------------
def reload_with(text, what):
    """Rewrite the configuration file to text, reload, wait for it."""
    with open(args.config, "w") as f:
        f.write(text)
    pos = log_size()
    os.kill(args.pid, signal.SIGHUP)
    end = time.monotonic() + 10
    while "reload of" not in log_since(pos) and time.monotonic() < end:
        time.sleep(0.1)
    check("reload of" in log_since(pos), "the reload (%s) was not logged" % what)


def status():
    return json.loads(ctl_get("/v1/status")[1])


bstop = threading.Event()


def budget_wait_checks():
    """With two clients holding the whole budget in flight: a refused
    request is answered at once, a 1 MiB READ waits longer than
    idle_timeout without being closed and is served once they go."""
    fails = []
    # two clients hold the whole budget in flight (a 32 MiB READ each,
    # read slowly: making progress, so not idle)
    holders = []
    for i in range(2):
        c = SrcConn("127.0.0.5", timeout=20)
        c.handshake()
        c.go(infos=(), structured=False)
        c.send(Conn.pack_request(CMD_READ, 0, 1, i * 32 * MiB, 32 * MiB))
        holders.append(c)
    bstop.clear()

    def slow_reader(c):
        while not bstop.is_set():
            try:
                if not c.sock.recv(256 << 10):
                    return
            except OSError:
                return
            time.sleep(0.3)
    readers = [threading.Thread(target=slow_reader, args=(c,), daemon=True) for c in holders]
    for t in readers:
        t.start()
    time.sleep(0.5)
    used = status()["buffers"]
    log("     two slow readers of 32 MiB: buffers %s of %s" % (mib(used["bytes"]), mib(used["limit"])))
    check(used["bytes"] >= 64 * MiB, "two 32 MiB READs in flight hold only %s of buffers" % mib(used["bytes"]))

    # a 1 MiB READ does not fit: it waits, longer than idle_timeout, and is
    # not closed for it (was: closed as idle after 3 s)
    w = SrcConn("127.0.0.6", timeout=20)
    w.handshake()
    w.go(infos=(), structured=False)
    w.send(Conn.pack_request(CMD_READ, 0, 7, 64 * MiB, MiB))
    tw = time.monotonic()
    time.sleep(1)
    st = status()["buffers"]
    if st["waiting"] < 1:
        fails.append("no connection counted as waiting for buffer_limit: %r" % st)

    # refused requests need no buffer: answered at once, budget full or not
    # (was: a READ out of range waited for its 32 MiB like any other)
    r = SrcConn("127.0.0.7", timeout=2)
    r.handshake()
    r.go(infos=(), structured=False)
    t0 = time.monotonic()
    try:
        rep = r.cmd(CMD_READ, offset=1 << 50, length=32 * MiB)
        if rep.error != EINVAL:
            fails.append("a READ beyond the end with the budget full: error %d, want EINVAL" % rep.error)
        log("     a refused 32 MiB READ with the budget full was answered in %.2f s" % (time.monotonic() - t0))
    except (Closed, OSError) as e:
        fails.append("a READ beyond the end with the budget full was not answered within 2 s (%s)" % e)
    r.close()

    w.sock.settimeout(max(0.1, tw + 5 - time.monotonic()))
    try:
        got = w.sock.recv(1)
        fails.append("the waiting client got %s while the budget was full" % ("closed" if not got else "a reply"))
    except socket.timeout:
        pass
    except OSError as e:
        fails.append("the waiting client was closed while it waited (%s)" % e)
    # the holders go: the waiting READ is served (woken, not polled)
    bstop.set()
    for c in holders:
        c.reset()
    t0 = time.monotonic()
    w.sock.settimeout(10)
    try:
        rep = w.reply_for(7, {7: MiB})
        if rep.error or len(rep.data) != MiB:
            fails.append("the waiting READ: error %d" % rep.error)
        log("     a 1 MiB READ waited %.1f s (idle_timeout 3 s) and was served %.2f s after the "
            "budget came free" % (time.monotonic() - tw, time.monotonic() - t0))
    except (Closed, OSError) as e:
        fails.append("the client waiting for buffer_limit was closed: %s" % e)
    w.close()
    # logged at most once per 10 s: the 40 pipelining clients above may
    # have had the line
    if "waits for buffer_limit" not in log_since(0):
        fails.append("no log line says a request waits for buffer_limit")
    check(not fails, "; ".join(fails))


def budget_busy_checks():
    """Two busy clients keeping buffers for reuse (a 32 MiB WRITE and READ
    each, then 4 KiB reads without a pause) give them back when a third
    client's 1 MiB READ waits (was: 11 s, until a busy client left)."""
    uri = "nbd://127.0.0.1:%d/%s" % (args.port, EXPORT)
    ready = [threading.Event(), threading.Event()]
    counts = [0, 0]
    errs = []

    def busy(i):
        try:
            h = nbd.NBD()
            h.connect_uri(uri)
            base = (4 + 2 * i) * 32 * MiB
            d = os.urandom(32 * MiB)
            h.pwrite(d, base)
            if h.pread(32 * MiB, base) != d:
                errs.append("busy client %d read back other data" % i)
            ready[i].set()
            while not bstop.is_set():
                h.pread(4096, base)
                counts[i] += 1
            h.shutdown()
        except Exception as e:  # noqa: BLE001
            errs.append("busy client %d: %s" % (i, e))
            ready[i].set()
    bstop.clear()
    bt = [threading.Thread(target=busy, args=(i,), daemon=True) for i in range(2)]
    for t in bt:
        t.start()
    for e in ready:
        e.wait(60)
    time.sleep(0.3)
    used = status().get("buffers", {}).get("bytes", -1)
    res = {}

    def third():
        try:
            h = nbd.NBD()
            h.connect_uri(uri)
            res["data"] = h.pread(MiB, 0)
            h.shutdown()
        except Exception as e:  # noqa: BLE001
            res["err"] = e
    c0 = list(counts)
    t = threading.Thread(target=third, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(5)
    dt = time.monotonic() - t0
    c1 = list(counts)
    log("     busy clients keep %s; a third client's 1 MiB READ took %.2f s; the busy ones made "
        "%d and %d reads meanwhile" % (mib(used), dt, c1[0] - c0[0], c1[1] - c0[1]))
    bstop.set()
    for x in bt:
        x.join(20)
    t.join(20)
    check(not t.is_alive() and dt < 5, "a 1 MiB READ was not served within 5 s beside two busy "
          "clients keeping buffers (buffer_limit 64M)")
    check("err" not in res, "the third client failed: %s" % res.get("err"))
    check(all(b > a for a, b in zip(c0, c1)), "the busy clients stalled meanwhile: %r -> %r" % (c0, c1))
    check(not errs, "; ".join(errs))


def budget_head_checks():
    """The head of the budget queue, paused with its own unread replies
    (between half and all of the in-flight limit), must still go on when
    its buffer fits, or every waiter behind it waits for ever."""
    def reader(src, offset, length, rcvbuf=None):
        c = SrcConn(src, timeout=20, rcvbuf=rcvbuf)
        c.handshake()
        c.go(infos=(), structured=False)
        c.send(Conn.pack_request(CMD_READ, 0, 1, offset, length))
        time.sleep(0.3)
        return c
    h1 = reader("127.0.0.5", 0, 32 * MiB)                            # 32 MiB
    x = reader("127.0.0.6", 32 * MiB, 14 * MiB, rcvbuf=64 << 10)     # 16 MiB buffer, never read
    h2 = reader("127.0.0.5", 48 * MiB, 16 * MiB)                     # 16 MiB: the budget is full
    x.send(Conn.pack_request(CMD_READ, 0, 2, 64 * MiB, 2 * MiB))     # waits: the queue's head
    time.sleep(0.3)
    w = reader("127.0.0.7", 80 * MiB, MiB)                           # waits behind it
    time.sleep(0.5)
    st = status()["buffers"]
    log("     budget full (%s of %s), %d connection(s) waiting" % (mib(st["bytes"]), mib(st["limit"]),
                                                                st["waiting"]))
    check(st["waiting"] >= 2, "want two connections waiting for buffer_limit: %r" % st)
    h1.reset()
    h2.reset()
    t0 = time.monotonic()
    w.sock.settimeout(5)
    try:
        rep = w.reply_for(1, {1: MiB})
        check(rep.error == 0, "the READ behind the head: error %d" % rep.error)
        log("     the READ behind a head with 14 MiB of unread replies was served %.2f s after the "
            "budget came free" % (time.monotonic() - t0))
    except socket.timeout:
        check(False, "a READ behind the queue's head (paused with its own unread replies) was not "
              "served within 5 s of the budget coming free")
    finally:
        x.reset()
        w.close()


with open(args.config) as f:
    orig_conf = f.read()
with section("buffer_limit: reload to 64M, idle_timeout 3"):
    wait_no_connections("the section before")
    reload_with(orig_conf.replace("buffer_limit = 128M", "buffer_limit = 64M")
                .replace("idle_timeout = 0", "idle_timeout = 3"), "buffer_limit 64M, idle_timeout 3")
with section("buffer_limit: refusals do not wait; a waiting client is not idle and is woken", timeout=60):
    try:
        budget_wait_checks()
    finally:
        bstop.set()
with section("buffer_limit: busy clients give kept buffers back to a waiting one", timeout=120):
    wait_no_connections("the section before")
    try:
        budget_busy_checks()
    finally:
        bstop.set()
with section("buffer_limit: the queue's head paused by its own replies holds up no one", timeout=60):
    wait_no_connections("the section before")
    reload_with(orig_conf.replace("buffer_limit = 128M", "buffer_limit = 64M"), "buffer_limit 64M, idle_timeout 0")
    budget_head_checks()
with section("buffer_limit: the configuration back"):
    try:
        wait_no_connections("the buffer_limit checks")
    finally:
        reload_with(orig_conf, "the configuration back")

# ---- in-flight cap: payload, not buffer capacity ------------------------------------
def reads_answered():
    return next(d for d in status()["dimms"] if d["name"] == EXPORT)["io"]["ops"]["read"]


with section("the in-flight cap counts payload: 480 pipelined 4 KiB READs, unread, are all parsed",
             timeout=60):
    wait_no_connections("the section before")
    # over the unix socket its send buffer takes only ~200 KiB of replies;
    # the rest wait in flashd.  Each READ charges 4 KiB to the 16 MiB cap
    # (was: the 128 KiB buffer it carries, stopping at about 128 requests)
    before = reads_answered()
    c = Conn(socket.AF_UNIX, args.unix_sock, EXPORT, timeout=10)
    c.handshake()
    c.go(infos=(), structured=False)
    n = 480
    c.send(b"".join(Conn.pack_request(CMD_READ, 0, k + 1, k * 4096, 4096) for k in range(n)))
    end = time.monotonic() + 5
    got = reads_answered() - before
    while got < n and time.monotonic() < end:
        time.sleep(0.1)
        got = reads_answered() - before
    log("     %d of %d pipelined 4 KiB READs answered while the client read nothing" % (got, n))
    check(got >= n, "only %d of %d pipelined 4 KiB READs were parsed while the client did not read "
          "(the in-flight cap counts buffer capacity?)" % (got, n))
    for k in range(n):
        r = c.reply_for(k + 1, {k + 1: 4096})
        check(r.error == 0, "READ %d: %r" % (k + 1, r))
    c.close()


# ---- control socket ----------------------------------------------------------------
def ctl_abuse(head, fill, total):
    """Send head, then fill repeated up to total bytes; the number of bytes
    sent before flashd closed the connection (or total)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(args.control)
    n = 0
    try:
        s.sendall(head)
        while n < total:
            s.sendall(fill)
            n += len(fill)
    except OSError:
        pass
    finally:
        s.close()
    return n


with section("control socket: huge body, huge headers, an endless header line", timeout=120):
    wait_no_connections("the section before")
    before = rss()
    chunk = b"x" * MiB
    n1 = ctl_abuse(b"POST /v1/reload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1 << 30), chunk, 256 * MiB)
    hdr = b"X-Junk: " + b"y" * 1000 + b"\r\n"
    n2 = ctl_abuse(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n", hdr * 1024, 256 * MiB)
    # an endless header line while NBD clients negotiate
    stop = threading.Event()
    n3 = [0]

    def endless():
        n3[0] = ctl_abuse(b"GET /v1/status HTTP/1.1\r\nX-Endless: ", chunk, 256 * MiB)
        stop.set()
    t = threading.Thread(target=endless, daemon=True)
    t.start()
    hs = 0
    t0 = time.monotonic()
    while not stop.is_set() and hs < 20:
        c = SrcConn("127.0.0.4", timeout=10)
        c.handshake()
        c.final_reply(OPT_LIST)
        c.close()
        hs += 1
    t.join(30)
    grew = rss() - before
    log("     body: %s sent before the close; headers: %s; endless line: %s; %d NBD handshakes "
        "meanwhile (%.2f s); RSS %+.1f MiB" % (mib(n1), mib(n2), mib(n3[0]), hs, time.monotonic() - t0,
                                               grew / MiB))
    for what, n in (("a 1 GiB body", n1), ("1 GiB of headers", n2), ("an endless header line", n3[0])):
        check(n < 64 * MiB, "%s: flashd took %s before closing the connection" % (what, mib(n)))
    check(grew < 16 * MiB, "the control socket abuse grew flashd by %s" % mib(grew))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(args.control)
    s.sendall(b"GET /v1/version HTTP/1.0\r\n\r\n")
    got = s.recv(4096)
    s.close()
    check(got.startswith(b"HTTP/1.") and b" 200 " in got.split(b"\r\n")[0],
          "control socket after the abuse: %r" % got[:80])

# ---- idle lock-out, and idle_timeout --------------------------------------------------
with section("idle_timeout_busy: idle clients are dropped only while over 3/4 of the slots are open",
             timeout=120), busy_timeout_2():
    # the default (600 s) made short: below 3/4 of max_connections an idle
    # client (a mounted disk with nothing to write) keeps its connection;
    # above, idle ones give their slots back
    calm = MAX_CONN * 3 // 4 - 8
    idle = open_clients(0, calm)
    gone = sum(1 for c in idle if c.wait_closed(4.5 if c is idle[0] else 0.01))
    log("     %d idle clients (3/4 of max_connections = %d): %d dropped after 4.5 s" % (
        len(idle), MAX_CONN * 3 // 4, gone))
    check(gone == 0, "%d of %d idle clients dropped with only %d of %d slots open" % (
        gone, len(idle), len(idle), MAX_CONN))
    idle += open_clients(calm, MAX_CONN - calm)
    # once over 3/4 are open, the first ones (idle for 4.5 s) go at the
    # next tick; those opened later may stay (their count falls below 3/4)
    end = time.monotonic() + 4
    gone = sum(1 for c in idle[:calm] if c.wait_closed(max(0.2, end - time.monotonic())))
    log("     %d more opened (over 3/4): %d of the first %d dropped within 4 s" % (
        MAX_CONN - calm, gone, calm))
    check(gone == calm, "over 3/4 of the slots open, only %d of %d clients idle for 4.5 s were "
          "dropped (idle_timeout_busy = 2)" % (gone, calm))
    for c in idle:
        c.close()
    wait_no_connections("the idle clients")

with section("idle_timeout_busy: a lone idle client outlasts the addresses that hold the most slots",
             timeout=90), busy_timeout_2():
    # the finding: 7 addresses holding 56 of the 64 slots, each connection
    # kept busy, made idle_timeout_busy fire at the only idle client, a
    # mounted disk say (the kernel client does not reconnect); now it closes
    # idle connections only of addresses holding more than half as many as
    # the one that holds the most
    lone = SrcConn("127.0.0.1", timeout=20)
    lone.handshake()
    lone.go()
    flood = open_clients(0, 7 * PER_ADDR, addr0=2)
    end = time.monotonic() + 5
    while time.monotonic() < end:   # the flood keeps busy: a read on each every 0.5 s
        for c in flood:
            c.cmd(CMD_READ, offset=0, length=512)
        time.sleep(0.5)
    dropped = lone.wait_closed(0.01)
    log("     %d busy connections from 127.0.0.2-8 for 5 s: the lone idle client %s" % (
        len(flood), "was dropped" if dropped else "kept its connection"))
    check(not dropped, "idle_timeout_busy dropped the lone idle client from 127.0.0.1 while 7 other "
          "addresses held %d busy slots" % len(flood))
    # once the flood idles too, its connections go, the lone one stays
    end = time.monotonic() + 5
    gone = sum(1 for c in flood if c.wait_closed(max(0.01, end - time.monotonic())))
    dropped = lone.wait_closed(0.01)
    log("     the flood idle: %d of its %d connections dropped within 5 s; the lone client %s" % (
        gone, len(flood), "was dropped" if dropped else "kept its connection"))
    check(gone >= len(flood) + 1 - MAX_CONN * 3 // 4, "only %d of %d idle connections of the flooding "
          "addresses dropped (idle_timeout_busy = 2)" % (gone, len(flood)))
    check(not dropped, "the lone idle client from 127.0.0.1 was dropped once the flood idled")
    if not dropped:
        check(lone.cmd(CMD_READ, offset=0, length=4096).error == 0, "the lone client's read failed")
    for c in flood + [lone]:
        c.close()
    wait_no_connections("the flood")

with section("idle clients after the handshake; idle_timeout drops them", timeout=120):
    wait_no_connections("the section before")
    idle = open_clients(0, MAX_CONN)
    check(refused(SrcConn("127.0.0.9")), "a new client got in with %d idle connections open "
          "(max_connections = %d)" % (MAX_CONN, MAX_CONN))
    # the finding: without an idle timeout they would hold the slots for ever
    with open(args.config) as f:
        conf = f.read()
    with open(args.config, "w") as f:
        f.write(conf.replace("idle_timeout = 0", "idle_timeout = 2"))
    pos = log_size()
    os.kill(args.pid, signal.SIGHUP)
    end = time.monotonic() + 10
    while "reload of" not in log_since(pos) and time.monotonic() < end:
        time.sleep(0.1)
    check("idle_timeout" in log_since(pos), "the reload did not apply idle_timeout:\n" + log_since(pos))
    served = False
    end = time.monotonic() + 15
    while time.monotonic() < end and not served:
        c = SrcConn("127.0.0.9")
        if not refused(c):
            c.cflags = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES
            c.send(struct.pack(">I", c.cflags))
            c.go()
            r = c.cmd(CMD_READ, offset=0, length=4096)
            served = r.error == 0
        c.close()
        if not served:
            time.sleep(0.5)
    check(served, "no new client got in within 15 s with idle_timeout = 2")
    # the idle check runs once a second per ioDimm: clients whose time runs
    # out a tick after the first ones may need up to two more ticks
    end = time.monotonic() + 3
    gone = sum(1 for c in idle if c.wait_closed(max(0.2, end - time.monotonic())))
    log("     %d of %d idle clients dropped by idle_timeout; the new client was served" % (gone, len(idle)))
    check(gone == len(idle), "only %d of %d idle clients were dropped" % (gone, len(idle)))
    for c in idle:
        c.close()

finish()
