#!/usr/bin/python3
"""raw_align.py - clients with and without block size constraints (issue 15).

doc/proto.md of NetworkBlockDevice/nbd, "Block size constraints": a client
that sends NBD_OPT_GO with an NBD_INFO_BLOCK_SIZE request must keep to the
advertised minimum (the sector) and maximum (32 MiB); flashd answers it
EINVAL when it does not, and the stream stays in sync.  A client that does
not ask (NBD_OPT_EXPORT_NAME, or GO without the request) gets the spec's
defaults: any byte alignment, and READ/WRITE up to 64 MiB.  For both,
TRIM, WRITE_ZEROES, CACHE and BLOCK_STATUS take any length inside the
export.  Every data check goes against a byte-exact model of the region it
uses.  Sub-commands (tests/test-nbd-align.sh drives them):

  checks  one export (--sector-size): for each kind of client (GO with
          the request, structured and simple; GO without it, structured
          and simple; EXPORT_NAME, simple and structured):
          - the issue's READ at offset 1 of 1,048,590 bytes;
          - random byte-granular READ/WRITE/TRIM/WRITE_ZEROES, pipelined
            (requests in flight disjoint), model-checked, region re-read;
          - three connections writing different bytes of the same sectors
            at once (read-modify-write inside the FTL loses nothing);
          - READ and WRITE of 33 MiB, 50 MB and 64 MiB at odd offsets,
            pipelined 64 MiB mixes, structured and simple replies;
          - over the limits: READ 64 MiB + 1 -> EINVAL, WRITE 64 MiB + 1 and
            128 MiB -> EINVAL with the payload consumed (a payload of valid
            requests is never parsed), WRITE over 128 MiB -> hard
            disconnect without a reply;
          - negotiating clients: every misaligned command and READ/WRITE
            over 32 MiB -> EINVAL, one by one and pipelined, in sync, data
            unchanged;
          - long TRIM / WRITE_ZEROES (plain, NO_HOLE, FAST_ZERO) over 32 MiB,
            CACHE and BLOCK_STATUS up to the whole export, at odd offsets for
            the clients that may;
          - with --pid: eight pipelined 64 MiB READs whose replies are not
            read for a while: flashd's anonymous memory grows by less than
            112 MiB (a big request waits until its buffer fits under the
            connection's 96 MiB beside what is in flight).
  trace   the issue's trace: a client without constraints reads and writes
          random 1 KiB-aligned ranges of up to 50 MB over a 50 MiB region
          (at an offset that is not 4 KiB-aligned), each READ checked, then
          reads everything back; then the same pipelined (disjoint ranges
          in flight).  --save FILE keeps the region's final content.
  verify  the trace region reads as --file says (a client without
          constraints, the region's own unaligned boundaries).
  huge    an export of 4 GiB or more: TRIM, WRITE_ZEROES (plain and
          FAST_ZERO), CACHE and BLOCK_STATUS of length 2^32 - 1 (without
          constraints; 2^32 - sector with them), markers inside and outside
          the ranges checked.

  raw_align.py checks --uri URI --sector-size 512 [--pid PID]
  raw_align.py trace --uri URI [--seed N] [--save FILE]
  raw_align.py huge --uri URI --sector-size 512
  raw_align.py verify --uri URI --file FILE   (the trace region holds FILE)
Scribbles over the whole export (checks), [300 MiB + 1 KiB, +50 MiB)
(trace), or the first 4 GiB + 1 MiB (huge).
"""
import argparse
import os
import random
import socket
import struct
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbdraw import *  # noqa: F401,F403,E402
from testlib import CheckFailed, check, finish, log, section  # noqa: E402

MiB = 1 << 20
MAXB = 32 * MiB            # advertised maximum
MAX_ANY = 64 * MiB         # READ/WRITE limit without negotiation
MAX_DISCARD = 128 * MiB    # WRITE payloads up to this are consumed, larger: disconnect

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("what", choices=("checks", "trace", "huge", "verify"))
ap.add_argument("--uri", required=True)
ap.add_argument("--sector-size", type=int, default=512)
ap.add_argument("--pid", type=int, help="flashd's pid (memory bound check)")
ap.add_argument("--seed", type=int, default=15)
ap.add_argument("--save", help="trace: write the region's final content here")
ap.add_argument("--file", help="verify: what the trace region must hold (from trace --save)")
ap.add_argument("--reply-timeout", type=float, default=60.0)
args = ap.parse_args()

URI = args.uri
SS = args.sector_size
RT = args.reply_timeout
rng = random.Random(args.seed)

# (name, negotiated, structured, how): how is "go" or "export_name"
KINDS = [
    ("GO+BLOCK_SIZE, structured", True, True, "go"),
    ("GO+BLOCK_SIZE, simple", True, False, "go"),
    ("GO without BLOCK_SIZE, structured", False, True, "go"),
    ("GO without BLOCK_SIZE, simple", False, False, "go"),
    ("EXPORT_NAME, simple", False, False, "export_name"),
    ("EXPORT_NAME, structured", False, True, "export_name"),
]
FREE_KINDS = [k for k in KINDS if not k[1]]
NEG_KINDS = [k for k in KINDS if k[1]]


def client(kind, uri=URI):
    """A connection in transmission, negotiated as kind says (structured
    ones also select base:allocation)."""
    name, neg, structured, how = kind
    c = Conn.open(uri, timeout=RT)
    c.handshake()
    c.kind = name
    c.neg = neg
    meta = ("base:allocation",) if structured else ()
    if how == "go":
        c.go(infos=(INFO_BLOCK_SIZE,) if neg else (), structured=structured, meta=meta)
        if neg:
            check(c.block_size and c.block_size[0] == SS and c.block_size[2] == MAXB,
                  "%s: NBD_INFO_BLOCK_SIZE %s, want min %d max %d" % (name, c.block_size, SS, MAXB))
    else:
        if structured:
            c.structured_reply()
            reps = c.final_reply(OPT_SET_META_CONTEXT, Conn.meta_data(c.export, meta))
            check(reps[-1][0] == REP_ACK, "SET_META_CONTEXT refused")
            c.contexts = {d[4:].decode(): struct.unpack(">I", d[:4])[0] for t, d in reps[:-1]}
        c.export_name()
    return c


_h = [0x1000]


def handle():
    _h[0] += 1
    return _h[0]


def reply(c, h, what, length=None):
    """The reply for handle h.  length: h's READ length, or a dict of the
    lengths of every READ in flight (a simple reply to another READ may
    arrive first, and its data must be read)."""
    lengths = length if isinstance(length, dict) else {h: length} if length is not None else None
    try:
        return c.reply_for(h, lengths)
    except socket.timeout:
        raise CheckFailed("%s: no reply to %s within %.0f s" % (c.kind, what, RT))
    except Closed as e:
        raise CheckFailed("%s: connection closed waiting for the reply to %s: %s" % (c.kind, what, e))


def expect(r, err, what):
    check(r.error == err, "%s -> %s, want %s" % (what, errname(r.error), errname(err)))


def do_read(c, off, n, what="READ"):
    h = handle()
    c.request(CMD_READ, 0, h, off, n)
    r = reply(c, h, "%s at %d+%d" % (what, off, n), n)
    check(r.error == 0, "%s: %s at %d+%d -> %s" % (c.kind, what, off, n, errname(r.error)))
    return read_data(r, off, n)


def do_cmd(c, cmd, off, n, flags=0, payload=None):
    h = handle()
    if cmd == CMD_WRITE:
        c.request(cmd, flags, h, off, n, payload)
    else:
        c.request(cmd, flags, h, off, n)
    return reply(c, h, "command %d at %d+%d" % (cmd, off, n), n if cmd == CMD_READ else None)


def trap_payload(n):
    """A WRITE payload made of valid READ requests (handle 0xBAD...): if the
    server parsed a rejected WRITE's payload, replies to them would come."""
    one = Conn.pack_request(CMD_READ, 0, 0xBAD0BAD0BAD0BAD0, 0, 512)
    reps = n // len(one) + 1
    return (one * reps)[:n]


class Model:
    """What [base, base + size) of the export must read."""

    def __init__(self, base, size):
        self.base, self.size = base, size
        self.b = bytearray(size)

    def load(self, c):
        """Take the current content as the truth (aligned reads)."""
        pos = 0
        while pos < self.size:
            n = min(MAXB, self.size - pos)
            self.b[pos:pos + n] = do_read(c, self.base + pos, n, "model load")
            pos += n

    def write(self, off, data):
        self.b[off - self.base:off - self.base + len(data)] = data

    def zero(self, off, n):
        self.b[off - self.base:off - self.base + n] = bytes(n)

    def want(self, off, n):
        return bytes(self.b[off - self.base:off - self.base + n])

    def check(self, got, off, what):
        want = self.want(off, len(got))
        if got != want:
            i = next(i for i in range(len(got)) if got[i] != want[i])
            raise CheckFailed("%s: byte %d of %d (export offset %d) reads %#x, want %#x" % (
                what, i, len(got), off + i, got[i], want[i]))

    def verify(self, c, step=None, what="read-back"):
        """Read the whole region back (pieces as large as c may use)."""
        step = step or (MAXB if c.neg else MAX_ANY)
        pos = self.base
        end = self.base + self.size
        while pos < end:
            n = min(step, end - pos)
            self.check(do_read(c, pos, n, what), pos, "%s (%s)" % (what, c.kind))
            pos += n


def in_sync(c, model, what):
    """A READ right after something odd gets its own, correct reply, and no
    reply to a request never sent arrived."""
    off = model.base + 8 * MiB
    model.check(do_read(c, off, 4096, "in-sync READ"), off, "%s: READ after %s" % (c.kind, what))
    check(not c.done, "%s: replies to requests never sent after %s: %s" % (c.kind, what, list(c.done)))


def rand_range(lo, hi, maxlen, align=1):
    n = rng.choice((rng.randint(1, 64), rng.randint(1, 3 * 4096), rng.randint(1, 256 << 10),
                    rng.randint(1, maxlen)))
    n = max(align, n // align * align)
    off = rng.randint(lo, hi - n) // align * align
    return off, n


# ---- checks ---------------------------------------------------------------------

def checks():
    c0 = client(NEG_KINDS[0])
    size = c0.size
    log("     export size %d, sector %d" % (size, SS))
    check(size >= 700 * MiB, "the checks need an export of 700 MiB or more")
    # regions (each kind uses its own slice, so a failure does not cascade)
    model = Model(0, 400 * MiB)
    with section("model: load [0, 400 MiB)"):
        model.load(c0)

    with section("the issue's READ at offset 1 of 1,048,590 bytes"):
        for kind in KINDS:
            c = client(kind)
            h = handle()
            c.request(CMD_READ, 0, h, 1, 1048590)
            r = reply(c, h, "READ 1+1048590", 1048590)
            if c.neg and SS > 1:
                expect(r, EINVAL, "%s: READ at offset 1 of 1,048,590 bytes" % kind[0])
                in_sync(c, model, "the misaligned READ")
            else:
                model.check(read_data(r, 1, 1048590), 1, "%s: READ 1+1048590" % kind[0])
            c.close()

    with section("random byte-granular READ/WRITE/TRIM/WRITE_ZEROES, pipelined, model-checked", timeout=300):
        for i, kind in enumerate(FREE_KINDS):
            lo, hi = 16 * MiB + i * 12 * MiB, 16 * MiB + (i + 1) * 12 * MiB
            c = client(kind)
            nreq = 0
            for rnd in range(30):
                batch, busy = [], []
                for _ in range(rng.randint(1, 8)):
                    off, n = rand_range(lo, hi, 2 * MiB)
                    if any(off < b + m and b < off + n for b, m in busy):
                        continue
                    busy.append((off, n))
                    kindop = rng.choice((CMD_READ, CMD_READ, CMD_WRITE, CMD_WRITE, CMD_WRITE,
                                         CMD_TRIM, CMD_WRITE_ZEROES))
                    flags = 0
                    if kindop == CMD_WRITE_ZEROES and rng.random() < 0.4:
                        flags |= CMD_FLAG_NO_HOLE
                    if kindop != CMD_READ and rng.random() < 0.2:
                        flags |= CMD_FLAG_FUA
                    data = os.urandom(n) if kindop == CMD_WRITE else None
                    batch.append((handle(), kindop, flags, off, n, data))
                stream = b"".join(Conn.pack_request(k, fl, h, off, n, d or b"")
                                  for h, k, fl, off, n, d in batch)
                c.send(stream)
                lens = {h: n for h, k, fl, off, n, d in batch if k == CMD_READ}
                for h, k, fl, off, n, d in batch:
                    r = reply(c, h, "request at %d+%d" % (off, n), lens)
                    check(r.error == 0, "%s: command %d at %d+%d -> %s" % (kind[0], k, off, n, errname(r.error)))
                    if k == CMD_READ:
                        model.check(read_data(r, off, n), off, "%s: READ %d+%d" % (kind[0], off, n))
                    elif k == CMD_WRITE:
                        model.write(off, d)
                    else:
                        model.zero(off, n)     # flashd zeroes the partial units of a TRIM
                    nreq += 1
            sub = Model(lo, hi - lo)
            sub.b = model.b[lo:hi]
            sub.verify(c, what="region read-back")
            log("     %s: %d requests" % (kind[0], nreq))
            c.close()

    with section("three connections write different bytes of the same sectors at once", timeout=180):
        base = 64 * MiB + 1000
        nsec = 64
        cuts = [0, SS // 5 + 3, SS // 2 + 1, SS]    # three byte ranges per sector
        conns = [client(FREE_KINDS[i % len(FREE_KINDS)]) for i in range(3)]
        final = {}
        errs = []

        def writer(j, c):
            try:
                for rnd in range(20):
                    stream, hs = b"", []
                    for s in range(nsec):
                        off = base + s * SS + cuts[j]
                        n = cuts[j + 1] - cuts[j]
                        d = bytes([(j * 64 + rnd * 3 + s) & 0xFF or 1]) * n
                        h = (j + 1) << 32 | rnd << 16 | s
                        stream += Conn.pack_request(CMD_WRITE, 0, h, off, n, d)
                        hs.append(h)
                        final[(j, s)] = (off, d)
                    c.send(stream)
                    for h in hs:
                        r = c.reply_for(h)
                        if r.error:
                            errs.append("connection %d: WRITE -> %s" % (j, errname(r.error)))
            except Exception as e:  # noqa: BLE001 - reported below
                errs.append("connection %d: %s" % (j, e))

        ts = [threading.Thread(target=writer, args=(j, conns[j]), daemon=True) for j in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        check(not errs, "; ".join(errs[:3]))
        for (j, s), (off, d) in final.items():
            model.write(off, d)
        got = do_read(conns[0], base, nsec * SS)
        model.check(got, base, "bytes written to the same sectors by three connections")
        for c in conns:
            c.close()

    with section("READ and WRITE of 33 MiB, 50 MB, 64 MiB at odd offsets", timeout=300):
        for i, kind in enumerate(KINDS):
            c = client(kind)
            lim = MAXB if c.neg else MAX_ANY
            base = 96 * MiB + i * 40 * MiB
            if c.neg:
                offs = [(base, MAXB), (base + MAXB // 2, 4 * MiB)]
            else:
                offs = [(base + 1, 33 * MiB), (base + 3 * MiB + 1024, 50 * 10 ** 6 // 1024 * 1024),
                        (base + 7, MAX_ANY - 3)]
            for off, n in offs:
                d = os.urandom(n)
                r = do_cmd(c, CMD_WRITE, off, n, CMD_FLAG_FUA if n > MAXB else 0, d)
                check(r.error == 0, "%s: WRITE %d+%d -> %s" % (kind[0], off, n, errname(r.error)))
                model.write(off, d)
            roff = base + (3 if not c.neg else 0)
            n = min(lim, 40 * MiB - (roff - base))
            model.check(do_read(c, roff, n), roff, "%s: READ %d+%d" % (kind[0], roff, n))
            c.close()

    with section("pipelined 64 MiB READ/WRITE mixes (client reads while sending)", timeout=300):
        for kind in FREE_KINDS[:2] + FREE_KINDS[3:]:
            c = client(kind)
            base = 100 * MiB + 5
            reqs = []
            for k, off in (("R", base), ("R", base + MAX_ANY + 1), ("W", base + 2 * MAX_ANY + 2),
                           ("R", base + 7), ("W", base + 3 * MAX_ANY + 3)):
                reqs.append((k, off, os.urandom(MAX_ANY) if k == "W" else None))
            # writes must not overlap the reads in flight
            err = []

            def sender():
                try:
                    for i, (k, off, d) in enumerate(reqs):
                        if k == "W":
                            c.request(CMD_WRITE, 0, 0x500 + i, off, MAX_ANY, d)
                        else:
                            c.request(CMD_READ, 0, 0x500 + i, off, MAX_ANY)
                except Exception as e:  # noqa: BLE001
                    err.append(e)
            rd = [(off, off + MAX_ANY) for k, off, d in reqs if k == "R"]
            wr = [(off, off + MAX_ANY) for k, off, d in reqs if k == "W"]
            if any(a < d and c_ < b for a, b in rd for c_, d in wr):
                raise CheckFailed("test bug: pipelined reads overlap writes")
            t = threading.Thread(target=sender, daemon=True)
            t0 = time.monotonic()
            t.start()
            for i, (k, off, d) in enumerate(reqs):
                r = reply(c, 0x500 + i, "pipelined request %d" % i,
                          {0x500 + j: MAX_ANY for j, x in enumerate(reqs) if x[0] == "R"})
                check(r.error == 0, "%s: pipelined %s %d -> %s" % (kind[0], k, i, errname(r.error)))
                if k == "R":
                    model.check(read_data(r, off, MAX_ANY), off, "%s: pipelined READ %d" % (kind[0], i))
                del r
            t.join(RT)
            check(not err, "%s: sending failed: %s" % (kind[0], err))
            for k, off, d in reqs:
                if k == "W":
                    model.write(off, d)
                    model.check(do_read(c, off, MAX_ANY), off, "%s: pipelined WRITE read back" % kind[0])
            log("     %s: %.1f s" % (kind[0], time.monotonic() - t0))
            c.close()

    with section("over the limits: EINVAL in sync, payloads consumed; huge WRITE: hard disconnect", timeout=300):
        for kind in KINDS:
            c = client(kind)
            lim = MAXB if c.neg else MAX_ANY
            base = 200 * MiB
            for n in (lim + 1, lim + SS, MAX_DISCARD, 0xFFFFFFFF):
                expect(do_cmd(c, CMD_READ, base if n < MAX_DISCARD else 0, n),
                       EINVAL, "%s: READ of %d bytes" % (kind[0], n))
            in_sync(c, model, "oversize READs")
            for n in (lim + SS, MAX_DISCARD) if kind in (KINDS[0], KINDS[3]) else (lim + 1,):
                r = do_cmd(c, CMD_WRITE, base, n, 0, trap_payload(n))
                expect(r, EINVAL, "%s: WRITE of %d bytes" % (kind[0], n))
                in_sync(c, model, "a WRITE of %d bytes" % n)
            model.check(do_read(c, base, 4096), base, "%s: data under the refused WRITEs" % kind[0])
            # over MAX_DISCARD: a hard disconnect, no reply at all
            c.request(CMD_WRITE, 0, 0x99, base, MAX_DISCARD + 1)
            c.send_if_open(b"\0" * 65536)
            closed, got = c.expect_silence_then_close(10)
            check(closed, "%s: a WRITE of 128 MiB + 1 did not end the connection" % kind[0])
            check(got == b"", "%s: %d bytes of reply before the disconnect" % (kind[0], len(got)))
            c.close()

    with section("clients bound by NBD_INFO_BLOCK_SIZE: misaligned -> EINVAL, in sync, data unchanged"):
        if SS > 1:
            for kind in NEG_KINDS:
                c = client(kind)
                base = 210 * MiB
                u = SS // 2 if SS > 512 else 1
                bad = [(CMD_READ, 0, base + u, SS), (CMD_READ, 0, base, SS + u),
                       (CMD_WRITE, 0, base + u, SS), (CMD_WRITE, 0, base, SS + u),
                       (CMD_TRIM, 0, base + u, SS), (CMD_TRIM, 0, base, u),
                       (CMD_WRITE_ZEROES, 0, base + u, SS), (CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, base, u),
                       (CMD_CACHE, 0, base + u, SS), (CMD_WRITE, 0, base, MAXB + SS)]
                if kind[2]:
                    bad.append((CMD_BLOCK_STATUS, 0, base + u, SS))
                for cmd, fl, off, n in bad:
                    r = do_cmd(c, cmd, off, n, fl, trap_payload(n) if cmd == CMD_WRITE else None)
                    expect(r, EINVAL, "%s: command %d at %d+%d" % (kind[0], cmd, off, n))
                    in_sync(c, model, "command %d at %d+%d" % (cmd, off, n))
                # all of them pipelined, a good READ last
                stream, hs = b"", []
                for cmd, fl, off, n in bad:
                    h = handle()
                    hs.append(h)
                    stream += Conn.pack_request(cmd, fl, h, off, n, trap_payload(n) if cmd == CMD_WRITE else b"")
                hr = handle()
                stream += Conn.pack_request(CMD_READ, 0, hr, base, 8192)
                c.send(stream)
                lens = {h: n for h, (cmd, fl, off, n) in zip(hs, bad) if cmd == CMD_READ}
                lens[hr] = 8192
                for h, (cmd, fl, off, n) in zip(hs, bad):
                    expect(reply(c, h, "pipelined bad command %d" % cmd, lens),
                           EINVAL, "%s: pipelined command %d at %d+%d" % (kind[0], cmd, off, n))
                r = reply(c, hr, "the READ after them", 8192)
                model.check(read_data(r, base, 8192), base, "%s: data after the refused requests" % kind[0])
                check(not c.done, "%s: replies to requests never sent: %s" % (kind[0], list(c.done)))
                c.close()

    with section("long TRIM and WRITE_ZEROES (over 32 MiB), both kinds", timeout=300):
        for i, kind in enumerate(KINDS):
            c = client(kind)
            odd = 0 if c.neg else 777
            base = 220 * MiB + (i % 2) * 90 * MiB
            d = os.urandom(80 * MiB)
            for p in range(0, len(d), MAXB):
                r = do_cmd(c, CMD_WRITE, base + p, min(MAXB, len(d) - p), 0, d[p:p + MAXB])
                check(r.error == 0, "prefill: %s" % errname(r.error))
                model.write(base + p, d[p:p + MAXB])
            cases = [(CMD_WRITE_ZEROES, 0, base + odd, 40 * MiB + 3 * odd),
                     (CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, base + 41 * MiB + odd, 34 * MiB + odd),
                     (CMD_TRIM, 0, base + 2 * odd, 78 * MiB - odd),
                     (CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, base + 5 * MiB + odd, 70 * MiB)]
            for cmd, fl, off, n in cases:
                # fresh data under each case, so each one's zeros show
                d = os.urandom(n + 2 * 4096)
                for p in range(0, len(d), MAXB):
                    dd = d[p:p + MAXB]
                    check(do_cmd(c, CMD_WRITE, off - 4096 + p, len(dd), 0, dd).error == 0, "refill")
                    model.write(off - 4096 + p, dd)
                r = do_cmd(c, cmd, off, n, fl)
                if fl & CMD_FLAG_FAST_ZERO and r.error == ENOTSUP:
                    log("     %s: FAST_ZERO of %d bytes -> ENOTSUP" % (kind[0], n))
                else:
                    check(r.error == 0, "%s: command %d flags %#x at %d+%d -> %s" % (
                        kind[0], cmd, fl, off, n, errname(r.error)))
                    model.zero(off, n)
                # read back with a margin (aligned for the negotiating kinds)
                pos, end = off - 4096, off + n + 4096
                while pos < end:
                    m = min(MAXB, end - pos)
                    model.check(do_read(c, pos, m), pos, "%s: after command %d flags %#x at %d+%d" % (
                        kind[0], cmd, fl, off, n))
                    pos += m
            c.close()

    with section("CACHE and BLOCK_STATUS of any length in range, both kinds"):
        for kind in KINDS:
            c = client(kind)
            odd = 0 if c.neg else 1
            for off, n in ((odd, size - odd), (100 * MiB + odd, 100 * MiB)):
                r = do_cmd(c, CMD_CACHE, off, n)
                check(r.error == 0, "%s: CACHE %d+%d -> %s" % (kind[0], off, n, errname(r.error)))
                if kind[2]:
                    r = do_cmd(c, CMD_BLOCK_STATUS, off, n)
                    ext = block_status_extents(r, off, n, min_block=1)
                    e = ext[c.contexts["base:allocation"]]
                    check(sum(x for x, s in e) <= size - off, "%s: extents past the end" % kind[0])
                    # every extent after the first ends on a unit boundary or the end
                    pos = off
                    for x, s in e:
                        pos += x
                        check(pos % 4096 == 0 or pos == off + n or pos == size,
                              "%s: extent ends at %d, not a unit boundary" % (kind[0], pos))
            for cmd in (CMD_CACHE, CMD_TRIM, CMD_BLOCK_STATUS):
                if cmd == CMD_BLOCK_STATUS and not kind[2]:
                    continue
                expect(do_cmd(c, cmd, odd, 0xFFFFFFFF if size - odd < 0xFFFFFFFF else size),
                       EINVAL, "%s: command %d past the end" % (kind[0], cmd))
            expect(do_cmd(c, CMD_WRITE_ZEROES, odd, size - odd + SS), ENOSPC,
                   "%s: WRITE_ZEROES past the end" % kind[0])
            in_sync(c, model, "commands over the whole export")
            c.close()

    if args.pid:
        with section("eight pipelined 64 MiB READs, replies read late: memory stays bounded", timeout=180):
            def rss_anon():
                with open("/proc/%d/status" % args.pid) as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            return int(line.split()[1]) * 1024
                return 0
            c = client(FREE_KINDS[1])
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)
            before = rss_anon()
            base = 1
            stream = b"".join(Conn.pack_request(CMD_READ, 0, 0x700 + i, base + i * 4096, MAX_ANY)
                              for i in range(8))
            c.send(stream)
            peak = before
            for _ in range(20):
                time.sleep(0.1)
                peak = max(peak, rss_anon())
            # now take the replies, slowly at first
            for i in range(8):
                r = reply(c, 0x700 + i, "pipelined 64 MiB READ %d" % i, {0x700 + j: MAX_ANY for j in range(8)})
                model.check(read_data(r, base + i * 4096, MAX_ANY)[:8 * MiB], base + i * 4096,
                            "pipelined 64 MiB READ %d" % i)
                peak = max(peak, rss_anon())
            log("     flashd RssAnon %.0f MiB before, peak %.0f MiB" % (before / MiB, peak / MiB))
            # a 64 MiB READ is parsed only when its buffer fits under 96 MiB
            # beside what is in flight: here one buffer at a time, reused
            # (without that gate two would be in flight: 128 MiB)
            check(peak - before < 112 * MiB, "flashd grew by %.0f MiB for one connection's 64 MiB READs "
                  "(want one 64 MiB buffer at a time, < 112 MiB)" % ((peak - before) / MiB))
            c.close()

    with section("the whole region reads back as modelled"):
        model.verify(client(NEG_KINDS[1]))


# ---- trace ----------------------------------------------------------------------

TRACE_BASE = 300 * MiB + 1024         # not 4 KiB-aligned
TRACE_LEN = 50 * MiB


def trace():
    base = TRACE_BASE
    region = TRACE_LEN
    maxlen = 50 * 10 ** 6 // 1024 * 1024
    kinds = [k for k in FREE_KINDS if k[3] == "export_name" and not k[2]] + \
            [k for k in FREE_KINDS if k[3] == "go" and k[2]]
    model = Model(base, region)
    with section("fill the 50 MiB region with one WRITE", timeout=120):
        c = client(kinds[0])
        d = os.urandom(region)
        r = do_cmd(c, CMD_WRITE, base, region, 0, d)
        check(r.error == 0, "WRITE of 50 MiB -> %s" % errname(r.error))
        model.write(base, d)
        c.close()

    def length():
        # log-uniform from 1 KiB to 50 MB, 1 KiB-aligned
        k = int(2 ** rng.uniform(0, 15.6)) * 1024
        return min(k, maxlen, region)

    for kind in kinds:
        with section("trace, one request at a time (%s)" % kind[0], timeout=600):
            c = client(kind)
            t0 = time.monotonic()
            nb = 0
            for i in range(60 if kind is kinds[0] else 40):
                n = length() if i % 5 else maxlen
                off = base + rng.randint(0, (region - n) // 1024) * 1024
                if rng.random() < 0.5:
                    d = os.urandom(n)
                    r = do_cmd(c, CMD_WRITE, off, n, 0, d)
                    check(r.error == 0, "WRITE %d+%d -> %s (server errored a transaction)" % (
                        off, n, errname(r.error)))
                    model.write(off, d)
                else:
                    model.check(do_read(c, off, n), off, "trace READ %d+%d" % (off, n))
                nb += n
            log("     %d MiB in %.1f s" % (nb >> 20, time.monotonic() - t0))
            model.verify(c, step=maxlen, what="read-back of the whole region")
            c.close()

    with section("trace, pipelined (up to four disjoint requests in flight)", timeout=600):
        c = client(kinds[-1])
        for rnd in range(12):
            batch, busy = [], []
            for _ in range(rng.randint(2, 4)):
                n = min(length(), 16 * MiB)
                off = base + rng.randint(0, (region - n) // 1024) * 1024
                if any(off < b + m and b < off + n for b, m in busy):
                    continue
                busy.append((off, n))
                d = os.urandom(n) if rng.random() < 0.5 else None
                batch.append((handle(), off, n, d))
            err = []

            def sender():
                try:
                    for h, off, n, d in batch:
                        c.request(CMD_WRITE if d else CMD_READ, 0, h, off, n, d or b"")
                except Exception as e:  # noqa: BLE001
                    err.append(e)
            t = threading.Thread(target=sender, daemon=True)
            t.start()
            lens = {h: n for h, off, n, d in batch if d is None}
            for h, off, n, d in batch:
                r = reply(c, h, "pipelined request at %d+%d" % (off, n), lens)
                check(r.error == 0, "pipelined %s %d+%d -> %s" % ("WRITE" if d else "READ", off, n,
                                                                 errname(r.error)))
                if d is None:
                    model.check(read_data(r, off, n), off, "pipelined READ %d+%d" % (off, n))
            t.join(RT)
            check(not err, "sending failed: %s" % err)
            for h, off, n, d in batch:
                if d:
                    model.write(off, d)
        model.verify(c, step=maxlen, what="read-back after the pipelined trace")
        c.close()
    if args.save:
        with open(args.save, "wb") as f:
            f.write(model.b)


# ---- huge: lengths of 2^32 - 1 ------------------------------------------------------

def huge():
    L = 0xFFFFFFFF
    c = client(NEG_KINDS[0])
    size = c.size
    check(size > (1 << 32) + MiB, "huge needs an export larger than 4 GiB + 1 MiB (size %d)" % size)
    c.close()
    marks = [0, 1, 4095, 4096, 1 << 30, (1 << 30) + 17, (1 << 32) - 2, (1 << 32) - 1, 1 << 32,
             (1 << 32) + 1, (1 << 32) + 4096]

    def put_marks(c):
        for a in sorted({m // SS * SS for m in marks}):
            d = bytearray(os.urandom(SS))
            for m in marks:
                if a <= m < a + SS:
                    d[m - a] = 0xA5
            check(do_cmd(c, CMD_WRITE, a, SS, 0, bytes(d)).error == 0, "marker WRITE")

    def byte_at(c, m):
        a = m // SS * SS
        return do_read(c, a, SS)[m - a]

    for kind in (KINDS[0], KINDS[2], KINDS[5]):
        for cmd, fl in ((CMD_WRITE_ZEROES, 0), (CMD_TRIM, 0), (CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO)):
            with section("%s: command %d flags %#x of 2^32 - 1 bytes" % (kind[0], cmd, fl), timeout=300):
                c = client(kind)
                put_marks(c)
                off, n = (1, L) if not c.neg else (SS, (1 << 32) - SS)
                if c.neg:
                    expect(do_cmd(c, cmd, 1, L, fl), EINVAL, "%s: misaligned command of 2^32 - 1" % kind[0])
                t0 = time.monotonic()
                r = do_cmd(c, cmd, off, n, fl)
                if fl & CMD_FLAG_FAST_ZERO and r.error == ENOTSUP:
                    log("     FAST_ZERO -> ENOTSUP")
                    c.close()
                    continue
                check(r.error == 0, "%s: command %d at %d+%d -> %s" % (kind[0], cmd, off, n, errname(r.error)))
                log("     %d bytes in %.2f s" % (n, time.monotonic() - t0))
                for m in marks:
                    b = byte_at(c, m)
                    inside = off <= m < off + n
                    check(b == (0 if inside else 0xA5), "%s: byte %d reads %#x after the command (%s)" % (
                        kind[0], m, b, "inside, want 0" if inside else "outside, want 0xa5"))
                c.close()
        with section("%s: CACHE and BLOCK_STATUS of 2^32 - 1 bytes" % kind[0]):
            c = client(kind)
            off, n = (1, L) if not c.neg else (SS, (1 << 32) - SS)
            check(do_cmd(c, CMD_CACHE, off, n).error == 0, "CACHE of %d bytes failed" % n)
            if kind[2]:
                r = do_cmd(c, CMD_BLOCK_STATUS, off, n)
                e = block_status_extents(r, off, n, min_block=1)[c.contexts["base:allocation"]]
                check(sum(x for x, s in e) <= size - off, "extents past the end")
            c.close()


def verify():
    with section("the trace region holds what the trace wrote", timeout=120):
        model = Model(TRACE_BASE, TRACE_LEN)
        with open(args.file, "rb") as f:
            model.b[:] = f.read()
        check(len(model.b) == TRACE_LEN, "%s holds %d bytes, want %d" % (args.file, len(model.b), TRACE_LEN))
        model.verify(client(FREE_KINDS[2]), step=MAX_ANY, what="trace region")


if args.what == "checks":
    checks()
elif args.what == "trace":
    trace()
elif args.what == "verify":
    verify()
else:
    huge()
finish()
