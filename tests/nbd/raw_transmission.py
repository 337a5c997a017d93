#!/usr/bin/python3
"""raw_transmission.py - NBD transmission phase spoken byte by byte.

Checks requests and replies against doc/proto.md of NetworkBlockDevice/nbd
at the wire level: simple replies (exact framing, no payload on errors),
structured replies (chunk rules, READ errors as error chunks even for bad
flags, absolute offsets, DONE last, DF), handles echoed verbatim, unknown
commands and flags (EINVAL, stream in sync), oversize READ (EINVAL, in sync),
oversize WRITE (EINVAL with the payload consumed, or a hard disconnect),
rejected WRITEs whose payload looks like requests (must not be parsed),
bad request magic (disconnect), BLOCK_STATUS rules, NBD_CMD_DISC with
requests in flight, and 1024 requests pipelined on one connection.

  raw_transmission.py --uri nbd://127.0.0.1:PORT/dimm0 [--sector-size 512]
      [--readonly-uri URI] [--max-block 33554432]
Scribbles over [160 MiB, 192 MiB) of the writable export.
"""
import argparse
import os
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbdraw import *  # noqa: F401,F403
from testlib import alive, check, finish, log, pattern, section

MiB = 1 << 20
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--uri", required=True)
ap.add_argument("--readonly-uri")
ap.add_argument("--sector-size", type=int, default=512)
ap.add_argument("--max-block", type=int, default=32 * MiB)
ap.add_argument("--close-timeout", type=float, default=3.0)
ap.add_argument("--reply-timeout", type=float, default=20.0)
args = ap.parse_args()

URI = args.uri
SS = args.sector_size
CT = args.close_timeout
BASE = 160 * MiB
HANDLES = (0, 1, 0xFFFFFFFFFFFFFFFF, 0x0123456789ABCDEF, 0x8000000000000000, 0x25609513)


def session(structured=True, meta=("base:allocation",), uri=URI):
    c = Conn.open(uri, timeout=args.reply_timeout)
    c.handshake()
    c.go(structured=structured, meta=meta if structured else ())
    return c


def in_sync(c, what, off=BASE, n=4096):
    """A READ right after something odd must get its own, correct reply."""
    h = 0x5EC0DE
    r = c.cmd(CMD_READ, 0, off, n, handle=h)
    check(r.handle == h, "%s: reply handle %#x, want %#x" % (what, r.handle, h))
    check(r.error == 0, "%s: READ after it failed: %s" % (what, errname(r.error)))
    return read_data(r, off, n)


def expect_error(r, want, what):
    if isinstance(want, int):
        want = (want,)
    check(r.error in want, "%s -> %s, want %s" % (what, errname(r.error), "/".join(errname(w) for w in want)))
    if r.structured:
        check_chunks(r, "any")
        check(all(t in (RT_ERROR, RT_ERROR_OFFSET, RT_NONE) for f, t, p in r.chunks),
              "%s: content chunks in an error reply" % what)
    else:
        check(r.data == b"", "%s: simple error reply carried data" % what)


# prepare known data
c0 = session()
SIZE = c0.size
DATA = pattern(42, 4 * MiB)
r = c0.cmd(CMD_WRITE, 0, BASE, payload=DATA)
check(r.error == 0, "setup write failed: %s" % errname(r.error))
c0.cmd(CMD_TRIM, 0, BASE + 4 * MiB, 4 * MiB)
c0.close()

# ---- simple replies ------------------------------------------------------------
with section("simple replies: exact framing, handles echoed, no payload on error"):
    c = session(structured=False)
    check(not c.tflags & TF_SEND_DF, "SEND_DF without structured replies")
    for h in HANDLES:
        c.request(CMD_READ, 0, h, BASE, 4096)
        hdr = c.recvn(16)
        magic, err, hh = struct.unpack(">IIQ", hdr)
        check(magic == SIMPLE_REPLY_MAGIC, "reply magic %#x" % magic)
        check(err == 0 and hh == h, "error %d handle %#x, want 0 and %#x" % (err, hh, h))
        check(c.recvn(4096) == DATA[:4096], "READ data differs")
    # an error: header only, then the next reply follows at once
    c.send(Conn.pack_request(CMD_READ, 0, 0xE1, SIZE, 4096) + Conn.pack_request(CMD_READ, 0, 0xE2, BASE, SS))
    magic, err, hh = struct.unpack(">IIQ", c.recvn(16))
    check((magic, err, hh) == (SIMPLE_REPLY_MAGIC, EINVAL, 0xE1), "READ past the end: %#x %d %#x" % (magic, err, hh))
    magic, err, hh = struct.unpack(">IIQ", c.recvn(16))
    check((magic, err, hh) == (SIMPLE_REPLY_MAGIC, 0, 0xE2), "next reply: %#x %d %#x (payload after an error?)" % (magic, err, hh))
    check(c.recvn(SS) == DATA[:SS], "data of the next reply differs")
    for cmd, fl, off, ln in ((CMD_FLUSH, 0, 0, 0), (CMD_TRIM, 0, BASE + 6 * MiB, 4096),
                             (CMD_WRITE_ZEROES, 0, BASE + 6 * MiB, 4096), (CMD_CACHE, 0, BASE, 4096)):
        c.request(cmd, fl, 0xC0 + cmd, off, ln)
        magic, err, hh = struct.unpack(">IIQ", c.recvn(16))
        check((magic, err, hh) == (SIMPLE_REPLY_MAGIC, 0, 0xC0 + cmd), "command %d: %#x %d %#x" % (cmd, magic, err, hh))
    r = c.cmd(CMD_BLOCK_STATUS, 0, BASE, 4096)
    check(not r.structured and r.error == EINVAL,
          "BLOCK_STATUS without structured replies -> %r, want a simple EINVAL" % r)
    in_sync(c, "simple replies")
    c.close()

# ---- structured replies --------------------------------------------------------
with section("structured READ: chunk rules, absolute offsets, content"):
    c = session()
    for off, n in ((BASE, 4096), (BASE + 3 * MiB, 2 * MiB), (BASE + 4 * MiB - 8192, 16384),
                   (BASE + 5 * MiB, MiB), (BASE + 512, 1024)):
        if off % SS or n % SS:
            continue
        r = c.cmd(CMD_READ, 0, off, n)
        got = read_data(r, off, n)
        exp = (DATA + bytes(8 * MiB))[off - BASE:off - BASE + n]
        check(got == exp, "READ [%d,+%d) content differs" % (off - BASE, n))
        for f, t, p in r.chunks:
            if t == RT_OFFSET_HOLE:
                ho, hn = struct.unpack(">QI", p)
                check(exp[ho - off:ho - off + hn].count(0) == hn, "OFFSET_HOLE over non-zero data")
    r = c.cmd(CMD_READ, CMD_FLAG_DF, BASE + 4 * MiB - 32768, 65536)
    read_data(r, BASE + 4 * MiB - 32768, 65536)
    content = [x for x in r.chunks if x[1] in (RT_OFFSET_DATA, RT_OFFSET_HOLE)]
    check(len(content) == 1, "DF read with %d content chunks" % len(content))
    check(content[0][1] == RT_OFFSET_DATA, "DF read over data and hole must be OFFSET_DATA")
    for h in HANDLES:
        r = c.cmd(CMD_READ, 0, BASE, SS, handle=h)
        check(r.handle == h, "handle %#x echoed as %#x" % (h, r.handle))
        read_data(r, BASE, SS)
    c.close()

with section("structured READ errors are error chunks (never simple replies)"):
    c = session()
    for what, fl, off, n in (("past the end", 0, SIZE, 4096), ("straddling the end", 0, SIZE - 4096, 8192),
                             ("unknown flag", 1 << 5, BASE, 4096), ("flag 0x8000", 0x8000, BASE, 4096),
                             ("NO_HOLE flag", CMD_FLAG_NO_HOLE, BASE, 4096),
                             ("REQ_ONE flag", CMD_FLAG_REQ_ONE, BASE, 4096),
                             ("over the maximum", 0, BASE, args.max_block + SS),
                             ("length 2^32-1", 0, 0, 0xFFFFFFFF)):
        r = c.cmd(CMD_READ, fl, off, n)
        check(r.structured, "READ %s answered with a simple reply (G8: forbidden after STRUCTURED_REPLY)" % what)
        expect_error(r, EINVAL, "READ " + what)
        check(r.message == b"" or b"\0" not in r.message, "error message with NUL")
    in_sync(c, "READ errors")
    r = c.cmd(CMD_READ, CMD_FLAG_FUA, BASE, 4096)
    check(r.error == 0, "READ with FUA -> %s (FUA MUST be accepted on every command)" % errname(r.error))
    r = c.cmd(CMD_READ, 0, BASE, 0)
    check(r.error in (0, EINVAL), "zero-length READ -> %s" % errname(r.error))
    check_chunks(r, "read", BASE, 0)
    check(not [x for x in r.chunks if x[1] in (RT_OFFSET_DATA, RT_OFFSET_HOLE)],
          "content chunk for a zero-length READ (each chunk MUST describe at least one byte)")
    in_sync(c, "zero-length READ")
    c.close()

with section("other commands: replies well formed, errors EINVAL"):
    c = session()
    for cmd, fl, off, n, want in (
            (CMD_FLUSH, 0, 0, 0, 0), (CMD_FLUSH, CMD_FLAG_FUA, 0, 0, 0),
            (CMD_CACHE, 0, BASE, MiB, 0), (CMD_TRIM, 0, BASE + 6 * MiB, 4096, 0),
            (CMD_WRITE_ZEROES, 0, BASE + 6 * MiB, 4096, 0),
            (CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, BASE + 6 * MiB, 4096, 0),
            (CMD_FLUSH, 1 << 5, 0, 0, EINVAL), (CMD_TRIM, CMD_FLAG_DF, BASE, 4096, EINVAL),
            (CMD_CACHE, CMD_FLAG_REQ_ONE, BASE, 4096, EINVAL), (CMD_CACHE, 0, SIZE, 4096, EINVAL),
            (CMD_TRIM, 0, SIZE, 4096, EINVAL), (CMD_WRITE_ZEROES, 0, SIZE, 4096, ENOSPC),
            (CMD_BLOCK_STATUS, 0, SIZE, 4096, EINVAL), (CMD_BLOCK_STATUS, 1 << 5, BASE, 4096, EINVAL)):
        r = c.cmd(cmd, fl, off, n)
        if r.structured:
            check_chunks(r, "block_status" if cmd == CMD_BLOCK_STATUS else "other", off, n)
        if want:
            expect_error(r, want, "command %d flags %#x [%d,+%d)" % (cmd, fl, off, n))
        else:
            check(r.error == 0, "command %d flags %#x -> %s" % (cmd, fl, errname(r.error)))
            if r.structured:
                check(all(t == RT_NONE for f, t, p in r.chunks), "command %d: chunks %s" % (cmd, r.chunks))
    in_sync(c, "other commands")
    c.close()

with section("unknown command types -> EINVAL, stream in sync"):
    for structured in (False, True):
        c = session(structured=structured)
        for cmd in (CMD_RESIZE, 9, 0x100, 0xFFFF):
            r = c.cmd(cmd, 0, BASE, 4096)
            expect_error(r, EINVAL, "command type %d" % cmd)
        in_sync(c, "unknown commands")
        c.close()

with section("BLOCK_STATUS: context id, descriptors, REQ_ONE"):
    c = session()
    cid = c.contexts["base:allocation"]
    for off, n, fl in ((BASE, 8 * MiB, 0), (BASE + 3 * MiB, 2 * MiB, 0), (BASE + 3 * MiB, 2 * MiB, CMD_FLAG_REQ_ONE),
                       (BASE + 4 * MiB, MiB, CMD_FLAG_REQ_ONE), (SIZE - 4096, 4096, 0)):
        r = c.cmd(CMD_BLOCK_STATUS, fl, off, n)
        ext = block_status_extents(r, off, n, req_one=bool(fl & CMD_FLAG_REQ_ONE), min_block=SS)
        check(list(ext) == [cid], "chunks for contexts %s, want [%d]" % (list(ext), cid))
        e = ext[cid]
        check(off + sum(x for x, s in e) <= SIZE, "extents run past the end of the export")
        for x, s in e:
            check(s & ~(STATE_HOLE | STATE_ZERO) == 0, "reserved status bits %#x" % s)
        if off == BASE and n == 8 * MiB:
            log("     extents: %s" % e)
            check(e[0][1] == 0, "written range has status %d" % e[0][1])
    in_sync(c, "block status")
    c.close()

# ---- WRITE payload handling ------------------------------------------------------------
def trap_payload(n):
    """A WRITE payload made of valid READ requests: if a server parses a
    rejected WRITE's payload as requests, replies with handle 0xBAD... come."""
    one = Conn.pack_request(CMD_READ, 0, 0xBAD0BAD0BAD0BAD0, BASE, 512)
    return (one * (n // len(one) + 1))[:n]


with section("rejected WRITEs: payload consumed, never parsed as requests"):
    for structured in (False, True):
        c = session(structured=structured)
        cases = [("past the end", 0, SIZE, 64 * 1024, ENOSPC), ("straddling the end", 0, SIZE - 4096, 65536, ENOSPC),
                 ("unknown flag", 1 << 5, BASE, 65536, EINVAL), ("DF flag", CMD_FLAG_DF, BASE, 65536, EINVAL),
                 ("past the end, 1 MiB", 0, SIZE, MiB, ENOSPC), ("past the end, 4 MiB", 0, 1 << 62, 4 * MiB, ENOSPC)]
        if SS > 1:
            cases.append(("misaligned offset", 0, BASE + 1, 65536, EINVAL))
            cases.append(("misaligned length", 0, BASE, 65536 + 1, EINVAL))
        for what, fl, off, n, want in cases:
            payload = trap_payload(n)
            h = 0x77
            c.request(CMD_WRITE, fl, h, off, n, payload)
            r = c.reply_for(h)
            expect_error(r, want, "WRITE " + what)
            got = in_sync(c, "rejected WRITE " + what)
            check(got == DATA[:4096], "rejected WRITE %s changed data" % what)
            check(not c.done, "replies to requests never sent (payload parsed as requests?): %s" % list(c.done))
        c.close()

with section("WRITE over the maximum block size: EINVAL (payload consumed) or hard disconnect"):
    c = session()
    n = args.max_block + SS
    # (away from DATA: a server that accepts it anyway must not spoil later checks)
    c.request(CMD_WRITE, 0, 0x99, BASE + 8 * MiB, n)          # header only for now
    closed, got = c.expect_silence_then_close(CT)
    if closed:
        log("     server disconnected after a %d-byte WRITE header (allowed: >= 2^25 bytes)" % n)
        check(got == b"" or len(got) >= 16, "partial reply before the disconnect")
    else:
        c.settimeout(args.reply_timeout)
        try:
            c.send(trap_payload(n))
            r = c.reply_for(0x99)
            expect_error(r, EINVAL, "WRITE over the maximum")
            in_sync(c, "oversize WRITE")
        except Closed:
            log("     server disconnected while receiving the oversize payload")
    c.close()
    # a huge length must not make the server wait for gigabytes
    c = session()
    c.request(CMD_WRITE, 0, 0x9A, BASE, 0xFFFFFFFF)
    closed, got = c.expect_silence_then_close(CT)
    if not closed:
        c.send_if_open(b"\0" * 65536)
        log("     server waits for the payload of a 4 GiB WRITE (connection kept)")
    c.close()
    alive(URI)

with section("bad request magic: hard disconnect, no reply"):
    for magic in (0x12560953, 0x25609514, 0, IHAVEOPT >> 32):
        c = session()
        c.request(CMD_READ, 0, 0x42, BASE, 4096, magic=magic)
        c.send_if_open(Conn.pack_request(CMD_READ, 0, 0x43, BASE, 4096))
        closed, got = c.expect_silence_then_close(CT)
        check(closed, "request magic %#x: connection still open" % magic)
        check(got == b"", "request magic %#x answered: %r" % (magic, got[:32]))
    alive(URI)

# ---- DISC, pipelining ----------------------------------------------------------------
with section("DISC: outstanding requests answered, then the server closes"):
    for structured in (False, True):
        c = session(structured=structured)
        reqs = b"".join(Conn.pack_request(CMD_READ, 0, 0x100 + i, BASE + i * 65536, 65536) for i in range(16))
        reqs += Conn.pack_request(CMD_FLUSH, 0, 0x200, 0, 0)
        reqs += Conn.pack_request(CMD_DISC, 0, 0x300, 0, 0)
        c.send(reqs)
        lens = {0x100 + i: 65536 for i in range(16)}
        for i in range(16):
            r = c.reply_for(0x100 + i, lens)
            check(read_data(r, BASE + i * 65536, 65536) == DATA[i * 65536:(i + 1) * 65536], "read %d after DISC" % i)
        r = c.reply_for(0x200)
        check(r.error == 0, "FLUSH before DISC -> %s" % errname(r.error))
        closed, got = c.expect_silence_then_close(CT)
        check(closed, "connection open after NBD_CMD_DISC")
        check(got == b"", "server replied to NBD_CMD_DISC: %r" % got[:32])

with section("1024 requests pipelined on one connection (replies may come in any order)", timeout=90):
    c = session()
    n = 1024
    lens = {}
    reqs = []
    for i in range(n):
        h = 0xF000000000000000 | i
        off = BASE + (i * 4096) % (4 * MiB)
        reqs.append(Conn.pack_request(CMD_READ, 0, h, off, 4096))
        lens[h] = (off, 4096)
    t0 = time.monotonic()
    c.send(b"".join(reqs))
    c.settimeout(8)    # a reply gap of 8 s is a hang
    got = 0
    try:
        for h in lens:
            off, ln = lens[h]
            r = c.reply_for(h, None)
            check(read_data(r, off, ln) == DATA[off - BASE:off - BASE + ln], "pipelined read %#x wrong" % h)
            got += 1
    except (OSError, Closed) as e:
        check(False, "only %d of %d pipelined replies arrived (%s: %s)" % (
            len(c.arrivals), n, type(e).__name__, e))
    check(len(set(c.arrivals)) == len(c.arrivals) == n, "%d replies for %d requests" % (len(c.arrivals), n))
    order = [h & 0xFFFF for h in c.arrivals]
    inorder = sum(1 for a, b in zip(order, order[1:]) if b == a + 1)
    log("     %d replies in %.2f s, %d in request order" % (len(order), time.monotonic() - t0, inorder + 1))
    in_sync(c, "pipelined reads")
    c.close()

if args.readonly_uri:
    with section("read-only export: write commands -> EPERM, payload consumed"):
        c = Conn.open(args.readonly_uri, timeout=args.reply_timeout)
        c.handshake()
        c.go()
        check(c.tflags & TF_READ_ONLY, "NBD_FLAG_READ_ONLY not set")
        before = read_data(c.cmd(CMD_READ, 0, 0, 65536), 0, 65536)
        for n in (4096, MiB):
            c.request(CMD_WRITE, 0, 0x55, 0, n, trap_payload(n))
            expect_error(c.reply_for(0x55), EPERM, "WRITE of %d bytes to a read-only export" % n)
        r = c.cmd(CMD_WRITE_ZEROES, 0, 0, 4096)
        expect_error(r, (EPERM, EINVAL), "WRITE_ZEROES to a read-only export")
        r = c.cmd(CMD_TRIM, 0, 0, 4096)
        expect_error(r, (EPERM, EINVAL), "TRIM on a read-only export")
        check(read_data(c.cmd(CMD_READ, 0, 0, 65536), 0, 65536) == before, "read-only export changed")
        check(not c.done, "stray replies: %s" % list(c.done))
        c.close()

with section("server alive after the transmission checks"):
    alive(URI)

finish()
