#!/usr/bin/python3
"""raw_abuse.py - malformed and hostile NBD clients.

Truncated handshakes (close or reset at every stage), huge option lengths,
bad magics, unknown client flags, oversize requests, clients that go away
in the middle of a WRITE payload, clients that reset the connection with
many reads queued (repeated), hundreds of clients that connect and never
negotiate (also 16 from each of 32 other addresses, reopened as they are
closed: a normal client must still get in over TCP and the unix socket), a
burst of 64 clients connecting at once (all served), and long-lived
connections with mixed request sizes.  After
every abuse the server must still serve a normal client correctly, and
(with --flashctl/--control) the connection count must drop back to zero
once the abusive clients are gone.

  raw_abuse.py --uri nbd://127.0.0.1:PORT/dimm0 [--unix-uri nbd+unix:///dimm0?socket=S]
      [--flashctl build/flashctl --control STATE/flashd.ctl] [--idle-clients 200]
      [--spread-clients 16 --spread-addrs 32] [--burst 64]
"""
import argparse
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd  # noqa: E402
from nbdraw import *  # noqa: F401,F403,E402
from testlib import alive, check, connect, finish, log, pattern, section  # noqa: E402

MiB = 1 << 20
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--uri", required=True, help="writable export over TCP")
ap.add_argument("--unix-uri", help="the same export over the unix socket")
ap.add_argument("--flashctl", help="flashctl binary, to read the connection count")
ap.add_argument("--control", help="flashd control socket")
ap.add_argument("--idle-clients", type=int, default=200)
ap.add_argument("--spread-clients", type=int, default=16,
                help="raw connections from each of --spread-addrs addresses (max_handshakes_per_address)")
ap.add_argument("--spread-addrs", type=int, default=32, help="addresses 127.0.0.2 and on")
ap.add_argument("--burst", type=int, default=64, help="libnbd clients connecting at once")
ap.add_argument("--resets", type=int, default=60)
ap.add_argument("--close-timeout", type=float, default=3.0)
args = ap.parse_args()

URI = args.uri
URIS = [u for u in (args.uri, args.unix_uri) if u]
EXPORT = parse_uri(URI)[2]
CT = args.close_timeout
BASE = 192 * MiB


def connections():
    if not (args.flashctl and args.control):
        return None
    out = subprocess.check_output([args.flashctl, "status", "--control", args.control, "--json"], timeout=20)
    return json.loads(out)["connections"]


LEAKED = [0]   # connections already known to be leaked by an earlier failure


def settled(what, timeout=5.0):
    """The server is alive, serves correctly, and (if we can see it) holds
    no more connections than before once the abusive clients are gone."""
    for u in URIS:
        alive(u, offset=BASE + 8 * MiB, tag="alive after " + what)
    if connections() is None:
        return
    want = LEAKED[0]
    end = time.monotonic() + timeout
    n = connections()
    while n != want and time.monotonic() < end:
        time.sleep(0.1)
        n = connections()
    if n != want:
        LEAKED[0] = n
        check(False, "after %s the server still counts %d connection(s), want %d "
              "(leaked connections never go away)" % (what, n, want))


def opened(uri):
    return Conn.open(uri, timeout=10)


def go_bytes(name, structured=True):
    e = name.encode()
    b = b""
    if structured:
        b += struct.pack(">QII", IHAVEOPT, OPT_STRUCTURED_REPLY, 0)
    data = struct.pack(">I", len(e)) + e + struct.pack(">HH", 1, INFO_BLOCK_SIZE)
    return b + struct.pack(">QII", IHAVEOPT, OPT_GO, len(data)) + data


def ready(uri):
    c = opened(uri)
    c.handshake()
    c.go()
    return c


# known data for the read checks
h0 = connect(URI)
DATA = pattern(7, 8 * MiB)
h0.pwrite(DATA, BASE)
h0.shutdown()

# ---- truncated handshakes ----------------------------------------------------------
with section("truncated handshakes: close or reset at every stage", timeout=120):
    stages = {
        "connect only": lambda c: None,
        "greeting read": lambda c: c.greeting(),
        "2 of 4 flag bytes": lambda c: (c.greeting(), c.send(b"\0\0")),
        "flags only": lambda c: c.handshake(),
        "8 bytes of an option header": lambda c: (c.handshake(), c.send(struct.pack(">Q", IHAVEOPT))),
        "option header, no data": lambda c: (c.handshake(), c.option(OPT_GO, b"", length=20)),
        "half the option data": lambda c: (c.handshake(), c.send(go_bytes(EXPORT, False)[:-6])),
        "LIST, reply unread": lambda c: (c.handshake(), c.option(OPT_LIST)),
        "INFO, reply unread": lambda c: (c.handshake(), c.option(OPT_INFO, Conn.info_data(EXPORT)) ),
        "GO, reply unread": lambda c: (c.handshake(), c.send(go_bytes(EXPORT))),
        "GO + half a request": lambda c: (c.handshake(), c.send(go_bytes(EXPORT) + Conn.pack_request(CMD_READ, 0, 1, 0, 512)[:13])),
        "GO + read, reply unread": lambda c: (c.handshake(), c.send(go_bytes(EXPORT) + Conn.pack_request(CMD_READ, 0, 1, BASE, MiB))),
        "EXPORT_NAME + write header": lambda c: (c.handshake(), c.option(OPT_EXPORT_NAME, EXPORT.encode()),
                                                 c.send(Conn.pack_request(CMD_WRITE, 0, 1, BASE + 8 * MiB, 4096))),
    }
    for uri in URIS:
        for name, act in stages.items():
            for how in ("close", "reset"):
                c = opened(uri)
                try:
                    act(c)
                except (Closed, OSError) as e:
                    check(False, "%s: server closed early: %s" % (name, e))
                time.sleep(0.01)
                c.reset() if how == "reset" else c.close()
        settled("truncated handshakes over %s" % uri.split(":")[0])

with section("truncated WRITE payloads: client leaves in the middle of a WRITE", timeout=120):
    cases = [("small write, half the payload", 0, 64 * 1024, 32 * 1024),
             ("1 MiB write, 1000 bytes of payload", 0, MiB, 1000),
             ("8 MiB write, 5 MiB of payload", 0, 8 * MiB, 5 * MiB),
             ("rejected 1 MiB write (past the end), half the payload", -1, MiB, MiB // 2),
             ("rejected 1 MiB write (unknown flag), 10 bytes of payload", -2, MiB, 10)]
    bad = []
    for uri in URIS:
        for what, kind, n, sent in cases:
            for how in ("close", "reset"):
                c = ready(uri)
                off, fl = BASE + 8 * MiB, 0
                if kind == -1:
                    off = c.size
                elif kind == -2:
                    fl = 1 << 5
                c.request(CMD_WRITE, fl, 0x1, off, n, b"\x66" * sent)
                time.sleep(0.05)
                c.reset() if how == "reset" else c.close()
                try:
                    settled("%s, then %s, over %s" % (what, "reset" if how == "reset" else "close",
                                                      uri.split(":")[0]), timeout=2)
                except AssertionError as e:
                    bad.append(str(e))
    for b in bad:
        log("     " + b)
    check(not bad, "%d of %d cases failed (first: %s)" % (len(bad), 4 * len(cases) if len(URIS) > 1 else 2 * len(cases), bad[0] if bad else ""))


# ---- option lengths and magics ---------------------------------------------------------
with section("huge option lengths: refused or dropped, never read for gigabytes"):
    for opt in (OPT_LIST, OPT_GO, OPT_INFO, OPT_EXPORT_NAME, OPT_SET_META_CONTEXT, 0x4242):
        for length in (0xFFFFFFFF, 0x80000000, 64 * MiB):
            c = opened(URI)
            c.handshake()
            c.option(opt, b"", length=length)
            c.send_if_open(b"\0" * 4096)
            closed, got = c.expect_silence_then_close(CT)
            if not closed:
                # waiting for the data is only fine if the server refuses it
                # quickly once it has it: a client could make it read 4 GiB
                check(False, "option %d with length %#x: neither refused nor dropped within %.0f s "
                      "(got %d bytes)" % (opt, length, CT, len(got)))
            if got:
                check(len(got) >= 20 and struct.unpack(">QII", got[:16])[2] & 0x80000000,
                      "option %d with length %#x answered with a non-error: %r" % (opt, length, got[:20]))
            c.close()
    # large but not absurd (up to 1 MiB, the server's discard limit): read,
    # discarded, refused; then parsing continues
    c = opened(URI)
    c.handshake()
    reps = c.final_reply(OPT_INFO, b"\0" * MiB)
    check(reps[-1][0] & 0x80000000, "1 MiB NBD_OPT_INFO -> %s" % repname(reps[-1][0]))
    reps = c.final_reply(OPT_LIST)
    check(reps[-1][0] == REP_ACK, "LIST after a 1 MiB option -> %s" % repname(reps[-1][0]))
    c.close()
    settled("huge options")

with section("bad magics and unknown client flags, repeatedly"):
    for i in range(20):
        c = opened(URIS[i % len(URIS)])
        c.greeting()
        c.send_if_open(struct.pack(">I", 0xFFFFFFFC | (i & 3)))
        check(c.wait_closed(CT), "unknown client flags: not dropped")
        c = opened(URIS[i % len(URIS)])
        c.handshake()
        c.option(OPT_GO, b"xxxx", magic=IHAVEOPT ^ (1 << i))
        check(c.wait_closed(CT), "bad option magic: not dropped")
        c = ready(URIS[i % len(URIS)])
        c.request(CMD_READ, 0, 1, 0, 512, magic=REQUEST_MAGIC ^ (1 << i))
        check(c.wait_closed(CT), "bad request magic: not dropped")
    settled("bad magics")

with section("oversize requests: READ > max gets EINVAL in sync, WRITE > max dropped"):
    c = ready(URI)
    for n in (32 * MiB + 512, 64 * MiB, 0xFFFFFE00):
        r = c.cmd(CMD_READ, 0, 0, n)
        check(r.error == EINVAL, "READ of %d bytes -> %s" % (n, errname(r.error)))
    r = c.cmd(CMD_READ, 0, BASE, 4096)
    check(read_data(r, BASE, 4096) == DATA[:4096], "desync after oversize READs")
    c.request(CMD_WRITE, 0, 2, BASE, 0xFFFFFE00)
    c.send_if_open(b"\0" * 65536)
    closed, got = c.expect_silence_then_close(CT)
    if not closed:
        log("     a 4 GiB WRITE header did not end the connection")
    c.close()
    settled("oversize requests")

# ---- resets with work queued ---------------------------------------------------------------
with section("reset with many reads queued, repeatedly", timeout=240):
    t0 = time.monotonic()
    for i in range(args.resets):
        uri = URIS[i % len(URIS)]
        c = ready(uri)
        n = 400 if i % 3 else 64
        ln = 256 * 1024 if i % 2 else 4096
        reqs = b"".join(Conn.pack_request(CMD_READ, 0, j, BASE + (j * ln) % (8 * MiB), ln) for j in range(n))
        if i % 4 == 3:
            # (a write the server got before the reset may still land:
            # keep it away from the area the alive check uses)
            reqs += Conn.pack_request(CMD_WRITE, 0, n, BASE + 16 * MiB, 65536, b"\x44" * 65536)
        c.sock.setblocking(False)
        try:
            c.sock.send(reqs)
        except BlockingIOError:
            pass
        if i % 5 == 4:
            time.sleep(0.05)    # let replies pile up in the socket buffers
        c.reset()
        if i % 10 == 9:
            settled("%d resets" % (i + 1))
    log("     %d resets in %.1f s" % (args.resets, time.monotonic() - t0))
    settled("resets with reads queued")

# ---- idle clients ---------------------------------------------------------------------------------
def idle_socket(fam, addr, src=None):
    """A connection that never negotiates (None if it could not connect)."""
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(10)
    if src:
        s.bind((src, 0))
    try:
        s.connect(addr)
    except OSError:
        s.close()
        return None
    return s


with section("%d clients that connect and never negotiate" % args.idle_clients, timeout=120):
    # the TCP ones from 127.0.0.2-9, within each address's handshake
    # budget (max_handshakes_per_address: over it, an address gets a slot
    # only as its own handshakes end or grow old); the normal client below
    # comes from 127.0.0.1
    idle = []
    refused = 0
    before = connections()
    t0 = time.monotonic()
    for i in range(args.idle_clients):
        fam, addr, _ = parse_uri(URIS[i % len(URIS)])
        s = idle_socket(fam, addr, "127.0.0.%d" % (2 + i // 2 % 8) if fam == socket.AF_INET else None)
        if s is None:
            refused += 1
            continue
        try:
            if i % 4 in (1, 2):
                if len(s.recv(18)) < 18:    # read the greeting, say nothing
                    refused += 1
                elif i % 4 == 2:
                    s.send(struct.pack(">I", FLAG_C_FIXED_NEWSTYLE))   # flags, no option
        except OSError:
            refused += 1
        idle.append(s)
    log("     %d idle clients connected in %.2f s (%d of those that read seen refused)" % (
        len(idle), time.monotonic() - t0, refused))
    n = connections()
    if n is not None:
        log("     server counts %d connections" % n)
    # a normal client is served meanwhile
    for u in URIS:
        r = subprocess.run(["nbdinfo", "--size", u], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "nbdinfo failed while %d clients idle: %s" % (len(idle), r.stderr.strip()))
        alive(u, offset=BASE + 8 * MiB, tag="alive with idle clients")
    # they all still get a greeting if they read now (unless the server timed them out)
    greeted = 0
    for i, s in enumerate(idle):
        if i % 4 == 0:
            try:
                s.settimeout(0.5)
                g = s.recv(18)
                greeted += len(g) == 18 and g[:8] == b"NBDMAGIC"
            except OSError:
                pass
    log("     %d of %d silent clients had their greeting waiting" % (greeted, len(idle[::4])))
    for s in idle:
        s.close()
    settled("%d idle clients" % len(idle), timeout=10)

LEGIT = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from testlib import connect
for uri in sys.argv[2:]:
    served, err = 0, ""
    for i in range(10):
        try:
            h = connect(uri, name="normal client %%d" %% i)
            d = os.urandom(4096)
            h.pwrite(d, %d + i * 4096)
            served += h.pread(4096, %d + i * 4096) == d
            h.shutdown()
        except Exception as e:
            err = err or str(e)
    print("%%s %%d %%s" %% (uri.split(":")[0], served, err), flush=True)
""" % (BASE + 16 * MiB, BASE + 16 * MiB)

with section("%d raw connections from each of 127.0.0.2-%d, reopened as they are closed; normal "
             "clients get in" % (args.spread_clients, args.spread_addrs + 1), timeout=120):
    # the findings: 5 x 256 such connections took every slot of
    # max_connections; then, with a handshake budget that refused
    # newcomers, 16 from each of eight addresses took the whole budget
    # (TCP and unix alike).  Now the oldest silent ones make room for
    # newcomers and the unix socket has a budget of its own.
    import selectors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.spread_addrs * args.spread_clients + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    fam, addr, _ = parse_uri(URI)
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed by the server": 0}

    def raw_open(src):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.bind((src, 0))
        s.setblocking(False)
        s.connect_ex(addr)
        sel.register(s, selectors.EVENT_READ, src)
        stats["opened"] += 1

    for k in range(2, args.spread_addrs + 2):
        for _ in range(args.spread_clients):
            raw_open("127.0.0.%d" % k)
    legit = subprocess.Popen([sys.executable, "-c", LEGIT, os.path.dirname(os.path.abspath(__file__))] + URIS,
                             stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while legit.poll() is None and time.monotonic() - t0 < 90:
        for key, _ in sel.select(0.1):
            s = key.fileobj
            try:
                gone = not s.recv(64)   # the greeting; nothing: closed
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                sel.unregister(s)
                s.close()
                stats["closed by the server"] += 1
                raw_open(key.data)
    if legit.poll() is None:
        legit.kill()
    out = legit.communicate()[0]
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
    log("     %d raw connections opened, %d of them closed by the server, in %.1f s" % (
        stats["opened"], stats["closed by the server"], time.monotonic() - t0))
    got = dict((ln.split(" ", 2)[0], ln.split(" ", 2)[1:]) for ln in out.splitlines())
    for u in URIS:
        kind = u.split(":")[0]
        served, err = got.get(kind, ["0", "no answer from the client process"])
        log("     a normal client over %s: %s of 10 connections served" % (kind, served))
        check(served == "10", "with %d x %d raw connections held from 127.0.0.2-%d, only %s of 10 "
              "connections of a normal client over %s were served: %s" % (
                  args.spread_addrs, args.spread_clients, args.spread_addrs + 1, served, kind, err))
    settled("raw connections from %d addresses" % args.spread_addrs, timeout=15)

with section("a burst: %d libnbd clients connect at once, every one served" % args.burst, timeout=60):
    # the finding: the per-address handshake budget (16) closed the clients
    # of a burst from one host beyond it (64 at once: 20 served); now they
    # wait for their turn in the order they came
    import threading
    for u in URIS:
        results = []
        barrier = threading.Barrier(args.burst)

        def one(i, u=u, results=results, barrier=barrier):
            h = nbd.NBD()
            try:
                barrier.wait(10)
                h.connect_uri(u)
                results.append(len(h.pread(4096, BASE + (i % 8) * MiB)) == 4096)
                h.shutdown()
            except Exception as e:  # noqa: BLE001
                results.append(str(e))
        ths = [threading.Thread(target=one, args=(i,)) for i in range(args.burst)]
        t0 = time.monotonic()
        for t in ths:
            t.start()
        for t in ths:
            t.join(30)
        errs = [r for r in results if r is not True]
        served = len(results) - len(errs)
        log("     over %s: %d of %d served in %.1f s" % (u.split(":")[0], served, args.burst,
                                                        time.monotonic() - t0))
        check(served == args.burst, "a burst of %d clients over %s: only %d served (%d: %s)" % (
            args.burst, u.split(":")[0], served, len(errs), errs[:1]))
    settled("a burst of %d clients" % args.burst)

# ---- long-lived connections ------------------------------------------------------------------------
with section("one connection, 3000 requests alternating 4 KiB and 1 MiB reads", timeout=180):
    h = connect(URI, name="mixed")
    t0 = time.monotonic()
    done = 0
    for i in range(1500):
        for n in (4096, MiB):
            b = nbd.Buffer(n)
            ck = h.aio_pread(b, BASE + (i % 7) * MiB)
            end = time.monotonic() + 10
            while not h.aio_command_completed(ck):
                h.poll(1)
                check(time.monotonic() < end, "request %d (%d-byte read) unanswered for 10 s "
                      "(after %d answered requests on this connection)" % (done + 1, n, done))
            done += 1
    log("     %d requests in %.1f s" % (done, time.monotonic() - t0))
    h.shutdown()
    settled("mixed request sizes")

with section("one connection, 4000 requests of mixed sizes, 64 in flight", timeout=180):
    h = connect(URI, name="mixed-aio")
    sizes = [4096, 65536, 512 * 1024, 2 * MiB]
    t0 = time.monotonic()
    inflight = []
    issued = 0
    last = time.monotonic()
    while issued < 4000 or inflight:
        while issued < 4000 and len(inflight) < 64:
            n = sizes[(issued * 7) % 4]
            off = BASE + ((issued * 4096) % (6 * MiB))
            if issued % 2:
                buf = nbd.Buffer(n)
                inflight.append(("r", off, n, buf, h.aio_pread(buf, off)))
            else:
                buf = nbd.Buffer.from_bytearray(bytearray(DATA[off - BASE:off - BASE + n]))
                inflight.append(("w", off, n, buf, h.aio_pwrite(buf, off)))
            issued += 1
        h.poll(1)
        keep = []
        for x in inflight:
            if h.aio_command_completed(x[4]):
                last = time.monotonic()
                if x[0] == "r":
                    check(x[3].to_bytearray() == DATA[x[1] - BASE:x[1] - BASE + x[2]], "read returned wrong data")
            else:
                keep.append(x)
        inflight = keep
        check(time.monotonic() - last < 10, "no reply for 10 s with %d requests in flight "
              "(after %d issued on this connection)" % (len(inflight), issued))
    log("     4000 requests in %.1f s" % (time.monotonic() - t0))
    check(h.pread(8 * MiB, BASE) == DATA, "data changed")
    h.shutdown()
    settled("mixed sizes in flight")

finish()
