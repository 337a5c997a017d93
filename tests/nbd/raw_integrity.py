#!/usr/bin/python3
"""raw_integrity.py - every request answered, every slot freed, no stalls.

Raw-protocol checks of server bugs that a client sees as a hang, a leak or
a crash (one sub-command each; tests/test-nbd-integrity.sh drives them):

  big          two pipelined 32 MiB READs and one 32 MiB WRITE on one
               connection (the advertised maximum), then other mixes of
               four 32 MiB requests, with structured and simple replies:
               every reply arrives, READs return the right data, WRITEs
               read back.  Replies are read while requests are still being
               sent, as real clients (libnbd, the kernel) do.
  zero-writes  rejected zero-length WRITEs (DF flag, past the end, read-only
               export) each get their error reply, in order, stream in
               sync; then hundreds of connections send them and leave
               (close, reset, NBD_CMD_DISC) without waiting for the replies:
               the server's connection count returns to where it was and a
               new client is served.
  stall        writes known data (saved to --data-out), then sends many
               READs and never reads a reply; touches --mark once stalled,
               then waits (up to --wait s) for the server to drop it.
  flood        opens --count TCP connections at once (more than the
               server's descriptor limit), holds them --hold s, closes
               them; then a normal client must be served.

  raw_integrity.py big --uri nbd://127.0.0.1:PORT/dimm0 [--unix-uri URI]
  raw_integrity.py zero-writes --uri URI --readonly-uri URI --connections 300
      [--flashctl build/flashctl --control STATE/flashd.ctl]
  raw_integrity.py stall --uri URI --offset N --data-out FILE --mark FILE
  raw_integrity.py flood --uri URI --count 600 --hold 3
Scribbles over [256 MiB, 480 MiB) of the writable export (big), and
[64 MiB, 72 MiB) (stall).
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbdraw import *  # noqa: F401,F403,E402
from testlib import CheckFailed, alive, check, finish, log, section  # noqa: E402

MiB = 1 << 20
BIG = 32 * MiB
TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8     # tcp_info.tcpi_state (linux/tcp_states.h)

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("what", choices=("big", "zero-writes", "stall", "flood"))
ap.add_argument("--uri", required=True, help="writable export")
ap.add_argument("--unix-uri", help="the same export over the unix socket (big)")
ap.add_argument("--readonly-uri", help="a read-only export (zero-writes)")
ap.add_argument("--connections", type=int, default=300)
ap.add_argument("--flashctl")
ap.add_argument("--control")
ap.add_argument("--reply-timeout", type=float, default=20.0)
ap.add_argument("--offset", type=int, default=64 * MiB)
ap.add_argument("--data-out")
ap.add_argument("--mark")
ap.add_argument("--reads", type=int, default=2000)
ap.add_argument("--wait", type=float, default=120.0)
ap.add_argument("--count", type=int, default=600)
ap.add_argument("--hold", type=float, default=3.0)
args = ap.parse_args()

URI = args.uri
RT = args.reply_timeout


def session(uri=URI, structured=True):
    c = Conn.open(uri, timeout=RT)
    c.handshake()
    c.go(structured=structured)
    return c


def reply(c, handle, what, lengths=None):
    """The reply for handle, or a check failure naming what was waited for."""
    try:
        return c.reply_for(handle, lengths)
    except socket.timeout:
        raise CheckFailed("no reply to %s within %.0f s (the server stopped answering)" % (what, RT))
    except Closed as e:
        raise CheckFailed("connection closed while waiting for the reply to %s: %s" % (what, e))


def connections():
    if not (args.flashctl and args.control):
        return None
    out = subprocess.check_output([args.flashctl, "status", "--control", args.control, "--json"], timeout=20)
    return json.loads(out)["connections"]


def wait_connections(want, what, timeout=10.0):
    if want is None:
        return
    end = time.monotonic() + timeout
    n = connections()
    while n != want and time.monotonic() < end:
        time.sleep(0.1)
        n = connections()
    check(n == want, "after %s the server counts %d connection(s), want %d (slots leaked)" % (what, n, want))


# ---- big: large pipelined requests --------------------------------------------

def pipeline(c, reqs, tag):
    """Send reqs [(cmd, flags, offset, payload or length)] in one stream from
    a thread while this thread reads the replies; returns {index: Reply}."""
    lengths = {}
    for i, (cmd, fl, off, p) in enumerate(reqs):
        if cmd == CMD_READ:
            lengths[i + 1] = p
    err = []

    def sender():
        try:
            for i, (cmd, fl, off, p) in enumerate(reqs):
                if cmd == CMD_WRITE:
                    c.request(cmd, fl, i + 1, off, len(p), p)
                else:
                    c.request(cmd, fl, i + 1, off, p)
        except Exception as e:  # noqa: BLE001 - reported below
            err.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t0 = time.monotonic()
    t.start()
    out = {}
    for i in range(len(reqs)):
        out[i] = reply(c, i + 1, "request %d of %s" % (i + 1, tag), lengths)
    t.join(RT)
    check(not t.is_alive(), "%s: sending did not finish" % tag)
    check(not err, "%s: sending failed: %s" % (tag, err[0] if err else ""))
    log("     %s: %d requests, %d MiB, %.2f s" % (tag, len(reqs), sum(
        len(p) if cmd == CMD_WRITE else p for cmd, _, _, p in reqs) >> 20, time.monotonic() - t0))
    return out


def big_checks():
    base = 256 * MiB
    # known data for the READs: A at base, B at base + 32 MiB
    a, b = os.urandom(BIG), os.urandom(BIG)
    with section("prefill 64 MiB for the read checks"):
        c = session()
        r = pipeline(c, [(CMD_WRITE, 0, base, a), (CMD_WRITE, 0, base + BIG, b)], "prefill")
        check(all(x.error == 0 for x in r.values()), "prefill writes failed: %s" % r)
        c.close()
    known = {base: a, base + BIG: b}
    wbase = base + 2 * BIG      # written by the mixes below: 5 slots of 32 MiB
    uris = [u for u in (URI, args.unix_uri) if u]
    mixes = [
        ("READ READ WRITE", "RRW"),
        ("WRITE READ READ", "WRR"),
        ("READ WRITE READ", "RWR"),
        ("WRITE x4", "WWWW"),
        ("READ x4", "RRRR"),
        ("READ WRITE READ WRITE (fio bs=32M iodepth=4)", "RWRW"),
        ("WRITE WRITE READ READ WRITE", "WWRRW"),
    ]
    for uri in uris:
        for structured in (True, False):
            for name, mix in mixes:
                # simple replies: three mixes are enough (keeps the run short)
                if not structured and mix not in ("RRW", "RWRW", "WWRRW"):
                    continue
                tag = "%s, %s replies, %s" % (name, "structured" if structured else "simple",
                                              "unix" if uri.startswith("nbd+unix") else "tcp")
                with section(tag, timeout=int(3 * RT) + 30):
                    reqs, want, written = [], [], {}
                    ri = wi = 0
                    for k in mix:
                        if k == "R":
                            off = base + (ri % 2) * BIG
                            reqs.append((CMD_READ, 0, off, BIG))
                            want.append(known[off])
                            ri += 1
                        else:
                            off = wbase + (wi % 5) * BIG
                            p = os.urandom(BIG)
                            reqs.append((CMD_WRITE, CMD_FLAG_FUA if wi % 2 else 0, off, p))
                            want.append(None)
                            written[off] = p
                            wi += 1
                    c = session(uri, structured)
                    got = pipeline(c, reqs, tag)
                    for i, (cmd, fl, off, p) in enumerate(reqs):
                        r = got[i]
                        check(r.error == 0, "request %d (%s at %d): %s" % (
                            i + 1, "READ" if cmd == CMD_READ else "WRITE", off, errname(r.error)))
                        if cmd == CMD_READ:
                            check(read_data(r, off, BIG) == want[i], "READ %d at %d returned wrong data" % (i + 1, off))
                    # the writes read back (on the same connection, after their replies)
                    for off, p in written.items():
                        h = 0x7000 + (off - wbase) // BIG
                        c.request(CMD_READ, 0, h, off, BIG)
                        r = reply(c, h, "read-back of the WRITE at %d" % off, {h: BIG})
                        check(read_data(r, off, BIG) == p, "the WRITE at %d does not read back" % off)
                    c.request(CMD_DISC)
                    c.close()
    with section("the server still serves a normal client"):
        alive(URI, offset=base - MiB, tag="alive after the big requests")


# ---- zero-writes: rejected zero-length WRITEs ------------------------------------

def zero_write_cases(c, ro):
    """(flags, offset, expected error, label) of rejected zero-length WRITEs
    for connection c (ro: on a read-only export)."""
    if ro:
        return [(0, 0, EPERM, "read-only export"), (0, c.size, EPERM, "read-only export, at the end")]
    return [(CMD_FLAG_DF, 0, EINVAL, "DF flag"),
            (0, c.size + 4096, ENOSPC, "past the end"),
            (CMD_FLAG_DF | CMD_FLAG_FUA, 4096, EINVAL, "DF|FUA")]


def zero_writes():
    uris = [(URI, False)] + ([(args.readonly_uri, True)] if args.readonly_uri else [])
    base = connections()
    if base is not None:
        log("     baseline: %d connection(s)" % base)

    with section("each rejected zero-length WRITE gets its error reply, in order"):
        for uri, ro in uris:
            for structured in (True, False):
                c = session(uri, structured)
                what = "%s, %s replies" % ("read-only" if ro else "writable", "structured" if structured else "simple")
                for fl, off, err, label in zero_write_cases(c, ro):
                    c.request(CMD_WRITE, fl, 0x2000, off, 0)
                    r = reply(c, 0x2000, "a zero-length WRITE (%s, %s)" % (label, what))
                    check(r.error == err, "zero-length WRITE (%s, %s) -> %s, want %s" % (
                        label, what, errname(r.error), errname(err)))
                    if structured:
                        check_chunks(r, "write")
                # several pipelined, a READ among them: all answered, READ intact
                cases = zero_write_cases(c, ro)
                stream = b""
                for i, (fl, off, err, label) in enumerate(cases):
                    stream += Conn.pack_request(CMD_WRITE, fl, 0x3000 + i, off, 0)
                stream += Conn.pack_request(CMD_READ, 0, 0x3100, 0, 4096)
                if not ro:
                    stream += Conn.pack_request(CMD_WRITE, 0, 0x3101, 0, 0)     # valid, empty
                c.send(stream)
                for i, (fl, off, err, label) in enumerate(cases):
                    r = reply(c, 0x3000 + i, "pipelined zero-length WRITE %d (%s, %s)" % (i, label, what))
                    check(r.error == err, "pipelined zero-length WRITE (%s, %s) -> %s, want %s" % (
                        label, what, errname(r.error), errname(err)))
                r = reply(c, 0x3100, "the READ after them (%s)" % what, {0x3100: 4096})
                read_data(r, 0, 4096)
                if not ro:
                    r = reply(c, 0x3101, "a valid zero-length WRITE (%s)" % what)
                    check(r.error == 0, "valid zero-length WRITE -> %s" % errname(r.error))
                c.request(CMD_DISC)
                check(c.wait_closed(5), "no close after NBD_CMD_DISC (%s)" % what)

    with section("%d connections send rejected zero-length WRITEs and leave" % args.connections, timeout=180):
        t0 = time.monotonic()
        for i in range(args.connections):
            uri, ro = uris[i % len(uris)]
            c = session(uri, structured=bool(i % 2))
            cases = zero_write_cases(c, ro)
            k = 1 + i % 3
            c.send(b"".join(Conn.pack_request(CMD_WRITE, cases[j % len(cases)][0], 0x100 + j,
                                              cases[j % len(cases)][1], 0) for j in range(k)))
            how = i % 4
            if how == 0:
                c.close()
            elif how == 1:
                c.reset()
            elif how == 2:
                c.request(CMD_DISC)
                c.close()
            else:
                time.sleep(0.002)
                c.close()
        log("     %d connections in %.1f s" % (args.connections, time.monotonic() - t0))
        wait_connections(base, "%d connections with rejected zero-length WRITEs" % args.connections)

    with section("a new client is served afterwards"):
        alive(URI, tag="alive after the zero-length WRITEs")
        wait_connections(base, "the alive check")


# ---- stall: a client that never reads its replies -----------------------------

def stall():
    check(parse_uri(URI)[0] == socket.AF_INET, "stall needs a TCP URI")
    off = args.offset
    data = os.urandom(8 * MiB)
    with section("write 8 MiB of known data"):
        c = session(structured=False)
        for i in range(8):
            h = 0x100 + i
            c.request(CMD_WRITE, 0, h, off + i * MiB, MiB, data[i * MiB:(i + 1) * MiB])
            r = reply(c, h, "WRITE %d" % i)
            check(r.error == 0, "WRITE %d: %s" % (i, errname(r.error)))
        if args.data_out:
            with open(args.data_out, "wb") as f:
                f.write(data)
    with section("send %d READs of 1 MiB, read no reply" % args.reads):
        # a small receive buffer: the replies back up into the server at once
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        reqs = b"".join(Conn.pack_request(CMD_READ, 0, 0x1000 + i, off + (i % 8) * MiB, MiB)
                        for i in range(args.reads))
        c.sock.setblocking(False)
        sent = 0
        end = time.monotonic() + 5
        while sent < len(reqs) and time.monotonic() < end:
            try:
                sent += c.sock.send(reqs[sent:])
            except BlockingIOError:
                time.sleep(0.05)
        log("     sent %d of %d READ requests; reading nothing" % (sent // 28, args.reads))
        check(sent >= 28 * 100, "the server took only %d requests" % (sent // 28))
    if args.mark:
        open(args.mark, "w").close()
    with section("the server drops the stalled client (waits up to %.0f s)" % args.wait, timeout=int(args.wait) + 30):
        # without reading: that would unstall the server.  The replies it
        # sent wait unread here, ahead of any FIN; a connection closed with
        # replies dropped ends in a reset (TCP state CLOSE).
        t0 = time.monotonic()
        closed = False
        while not closed and time.monotonic() < t0 + args.wait:
            time.sleep(0.2)
            closed = c.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in (TCP_CLOSE, TCP_CLOSE_WAIT)
        check(closed, "the server did not drop the stalled client within %.0f s" % args.wait)
        log("     dropped %.1f s after the stall began" % (time.monotonic() - t0))
    c.close()


# ---- flood: more connections than the server has descriptors -------------------

def flood():
    fam, addr, _ = parse_uri(URI)
    check(fam == socket.AF_INET, "flood needs a TCP URI")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.count + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.count + 256), hard))
    socks = []
    with section("open %d TCP connections at once, hold them %.0f s" % (args.count, args.hold)):
        for i in range(args.count):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(addr)      # beyond the backlog: SYN retried, stays pending
            socks.append(s)
        time.sleep(args.hold)
        greeted = 0
        for s in socks:
            try:
                greeted += len(s.recv(18)) == 18
            except OSError:
                pass
        log("     %d of %d connections got the greeting" % (greeted, len(socks)))
        check(greeted > 0, "no connection was greeted (server dead?)")
        check(greeted < len(socks), "every connection was greeted: the descriptor limit was not reached")
    for s in socks:
        s.close()
    with section("after the flood a normal client is served", timeout=60):
        t0 = time.monotonic()
        alive(URI, tag="alive after the flood")
        log("     served %.1f s after the flood closed" % (time.monotonic() - t0))


if args.what == "big":
    big_checks()
elif args.what == "zero-writes":
    zero_writes()
elif args.what == "stall":
    stall()
else:
    flood()
finish()
