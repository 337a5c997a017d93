"""nandsim_crash.py - a writer flashd is killed under, and the check after.

    nandsim_crash.py init URI STATE UNITS         write every unit once, flush
    nandsim_crash.py write URI STATE UNITS SEED   write until the connection dies
    nandsim_crash.py check URI STATE              read back; then what was read
                                                  is the baseline
    nandsim_crash.py page FILE UNIT GEN OOBFREE   a nanddump of one page (data +
                                                  OOB) holds UNIT's GEN, and
                                                  its OOB the FTL's spare with
                                                  the mtd backend's CRC

Every write is one 4 KiB unit k of [0, UNITS): (k, generation) in its first
16 bytes, then bytes drawn from (k, generation), so any unit read back says
which write it is and whether it is whole.  The writer journals in STATE
(a file on the guest's tmpfs, which outlives flashd):
    S k:g ...   before a batch is sent (it may land, or not)
    F           a FLUSH was answered: every batch sent before it is durable
    B k:g ...   the baseline: what the last check read (0: never written)
The check reads every unit in the journal: it must hold its last durable
generation or one sent after it (never an older one, never a torn one; a
unit never flushed may also read as zeros).  Standard library,
tests/nbd/nbdraw.py and image_tool.py only (the guest has no libnbd Python
module).
"""
import os
import random
import struct
import sys

import nbdraw
from image_tool import PG_DATA, crc32c, parse_spare

UNIT = 4096


def pattern(k, g):
    body = random.Random(k * 1000003 + g).randbytes(UNIT - 16)
    return struct.pack("<QQ", k, g) + body


def connect(uri):
    c = nbdraw.Conn.open(uri, timeout=60.0)
    c.handshake()
    c.go(structured=False)
    return c


def journal(state):
    """(baseline, durable, sent-after-last-flush) from the journal."""
    base, durable, pending = {}, {}, {}
    if not os.path.exists(state):
        return base, durable, pending
    with open(state) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "B":
                for kg in w[1:]:
                    k, g = map(int, kg.split(":"))
                    base[k] = g
                    durable[k] = g
            elif w[0] == "S":
                for kg in w[1:]:
                    k, g = map(int, kg.split(":"))
                    pending.setdefault(k, []).append(g)
            elif w[0] == "F":
                for k, gs in pending.items():
                    durable[k] = gs[-1]
                pending = {}
    return base, durable, pending


def write(uri, state, units, seed):
    _, durable, pending = journal(state)
    gen = 1 + max([g for g in durable.values()] + [g for gs in pending.values() for g in gs] + [0])
    rnd = random.Random(seed)
    c = connect(uri)
    j = open(state, "a")
    batches = 0
    try:
        while True:
            ks = rnd.sample(range(units), 8)
            j.write("S " + " ".join("%d:%d" % (k, gen + i) for i, k in enumerate(ks)) + "\n")
            j.flush()
            for i, k in enumerate(ks):
                c.request(nbdraw.CMD_WRITE, handle=i + 1, offset=k * UNIT,
                          payload=pattern(k, gen + i))
            for i in range(len(ks)):
                r = c.reply_for(i + 1)
                if r.error:
                    print("write failed: %s" % nbdraw.errname(r.error), flush=True)
                    return 1
            gen += len(ks)
            batches += 1
            if batches % 4 == 0:
                r = c.cmd(nbdraw.CMD_FLUSH, offset=0, length=0)
                if r.error:
                    print("flush failed: %s" % nbdraw.errname(r.error), flush=True)
                    return 1
                j.write("F\n")
                j.flush()
                print("flushed %d batches" % batches, flush=True)
    except (nbdraw.Closed, OSError) as e:
        print("connection gone after %d batches: %s" % (batches, e), flush=True)
        return 0


def init(uri, state, units):
    """Generation 1 of every unit, flushed: the baseline."""
    c = connect(uri)
    for i in range(0, units, 32):
        part = range(i, min(i + 32, units))
        for k in part:
            c.request(nbdraw.CMD_WRITE, handle=k + 1, offset=k * UNIT, payload=pattern(k, 1))
        for k in part:
            r = c.reply_for(k + 1)
            if r.error:
                print("write of unit %d failed: %s" % (k, nbdraw.errname(r.error)))
                return 1
    r = c.cmd(nbdraw.CMD_FLUSH, offset=0, length=0)
    if r.error:
        print("flush failed: %s" % nbdraw.errname(r.error))
        return 1
    c.request(nbdraw.CMD_DISC)
    with open(state, "w") as f:
        f.write("B " + " ".join("%d:1" % k for k in range(units)) + "\n")
    return 0


def check(uri, state):
    base, durable, pending = journal(state)
    units = sorted(set(durable) | set(pending))
    c = connect(uri)
    seen, bad, flushed = {}, [], 0
    for i in range(0, len(units), 32):
        part = units[i:i + 32]
        for h, k in enumerate(part):
            c.request(nbdraw.CMD_READ, handle=h + 1, offset=k * UNIT, length=UNIT)
        lengths = {h + 1: UNIT for h in range(len(part))}  # replies come in any order
        for h, k in enumerate(part):
            r = c.reply_for(h + 1, lengths)
            if r.error:
                bad.append("unit %d: read failed: %s" % (k, nbdraw.errname(r.error)))
                continue
            allowed = set(pending.get(k, []))
            d = durable.get(k, 0)
            allowed.add(d)
            flushed += d != 0
            if r.data == bytes(UNIT):
                g = 0
            else:
                k2, g = struct.unpack("<QQ", r.data[:16])
                if k2 != k or r.data != pattern(k, g):
                    bad.append("unit %d: holds neither a whole write of it nor zeros" % k)
                    continue
            if g not in allowed:
                bad.append("unit %d: generation %d, want %d (flushed) or one of %s (sent after)"
                           % (k, g, d, sorted(pending.get(k, []))))
                continue
            seen[k] = g
    c.request(nbdraw.CMD_DISC)
    for b in bad[:20]:
        print(b)
    if bad:
        print("%d of %d units wrong" % (len(bad), len(units)))
        return 1
    with open(state + ".new", "w") as f:
        f.write("B " + " ".join("%d:%d" % kv for kv in sorted(seen.items())) + "\n")
    os.replace(state + ".new", state)
    print("%d units as written: %d with flushed data, %d sent after their last flush"
          % (len(units), flushed, sum(1 for k in units if k in pending)))
    return 0


def page(path, k, g, oobfree):
    """nanddump --oob of one page: its data is (k, g); its OOB's free bytes
    (from offset 2: the bad-block marker comes first) hold the FTL's spare
    (magic "SFTL", type data, lba k) and, in their last 4 bytes, the mtd
    backend's CRC32C of the rest."""
    raw = open(path, "rb").read()
    if len(raw) < UNIT + 2 + oobfree:
        print("%s: %d bytes, not a page with its OOB" % (path, len(raw)))
        return 1
    if raw[:UNIT] != pattern(k, g):
        print("page data is not unit %d generation %d" % (k, g))
        return 1
    free = raw[UNIT + 2:UNIT + 2 + oobfree]
    sp = parse_spare(free)
    if sp is None or sp["type"] != PG_DATA or sp["lba"] != k:
        print("OOB: %s, want the FTL's data spare of unit %d" % (sp or "no FTL spare (magic)", k))
        return 1
    crc = struct.unpack("<I", free[-4:])[0]
    if crc != crc32c(free[:-4]):
        print("OOB: the backend's spare CRC %#x does not match %#x" % (crc, crc32c(free[:-4])))
        return 1
    return 0


def main(a):
    if a[:1] == ["init"] and len(a) == 4:
        return init(a[1], a[2], int(a[3]))
    if a[:1] == ["write"] and len(a) == 5:
        return write(a[1], a[2], int(a[3]), int(a[4]))
    if a[:1] == ["check"] and len(a) == 3:
        return check(a[1], a[2])
    if a[:1] == ["page"] and len(a) == 5:
        return page(a[1], int(a[2]), int(a[3]), int(a[4]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
