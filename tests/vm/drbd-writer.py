#!/usr/bin/python3
"""drbd-writer.py - the verifiable write pattern of the DRBD pair test
(tests/vm/test-drbd.sh), run inside the node VMs.

  drbd-writer.py write DEV --seed S --blocks N --first-gen G --batch B
                 --log FILE [--batches K]
  drbd-writer.py verify DEV --seed S --blocks N --flushed RANGES --max-gen G

Every write is one 4 KiB block, numbered by a generation g = G, G+1, ...;
its block is blk(S, g) (a hash of the seed and g, below N) and its content
is a function of (S, block, g): a header naming them and filler derived
from the header.  write opens DEV with O_DIRECT, writes B generations,
logs "wrote G", calls fdatasync (which reaches the device as a FLUSH) and
logs "flushed G"; then the next batch at once, so unflushed writes are
always in flight.  The log is appended with one write(2) per line (the
test puts it on the 9p share: it outlives the VM).  SIGTERM ends it after
the current batch's flush ("stopped G"); --batches K after K batches.

verify reads blocks 0..N-1 (O_DIRECT) and checks each against the flushed
generations (RANGES: "A-B,C-D", inclusive): a block whose newest flushed
generation is F must hold generation F or a later one that maps to it (a
write that was never flushed may or may not have survived), never an older
one (lost), zeros (lost) or anything else (garbage); a block with no
flushed generation holds zeros or a generation that maps to it.  Prints
the counts; exit status 0 only when nothing is lost and nothing is garbage.
"""
import argparse
import hashlib
import mmap
import os
import signal
import struct
import sys
import time

BS = 4096
MAGIC = b"FLASHDRB"
HDR = struct.Struct("<8sQQQ")  # magic, seed, block, generation
MASK = (1 << 64) - 1


def blk(seed, g, nblocks):
    """splitmix64 of seed and g, below nblocks"""
    z = (seed * 0x9E3779B97F4A7C15 + g) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) % nblocks


def content(seed, b, g):
    h = HDR.pack(MAGIC, seed, b, g)
    return h + (hashlib.sha256(h).digest() * (BS // 32))[: BS - HDR.size]


def parse_ranges(text):
    out = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out.append((int(a), int(b or a)))
    return out


def do_write(a):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    fd = os.open(a.dev, os.O_RDWR | os.O_DIRECT)
    log = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(line):
        os.write(log, ("%s t=%.3f\n" % (line, time.monotonic())).encode())

    buf = mmap.mmap(-1, BS)
    g = a.first_gen - 1
    note("start %d seed %d blocks %d batch %d" % (a.first_gen, a.seed, a.blocks, a.batch))
    batches = 0
    try:
        while not stop and (a.batches == 0 or batches < a.batches):
            for _ in range(a.batch):
                g += 1
                b = blk(a.seed, g, a.blocks)
                buf[:] = content(a.seed, b, g)
                if os.pwrite(fd, buf, b * BS) != BS:
                    raise OSError("short write")
            note("wrote %d" % g)
            os.fdatasync(fd)
            note("flushed %d" % g)
            batches += 1
    except OSError as e:
        note("error %s at generation %d" % (e, g))
        return 1
    note("stopped %d" % g)
    return 0


def do_verify(a):
    ranges = parse_ranges(a.flushed)
    newest = {}  # block -> newest flushed generation
    for lo, hi in ranges:
        for g in range(lo, hi + 1):
            newest[blk(a.seed, g, a.blocks)] = g
    fd = os.open(a.dev, os.O_RDONLY | os.O_DIRECT)
    chunk = 256
    buf = mmap.mmap(-1, chunk * BS)
    exact = newer = lost = garbage = zeros = unflushed = 0
    bad = []
    zero = bytes(BS)
    for first in range(0, a.blocks, chunk):
        n = min(chunk, a.blocks - first)
        got = os.preadv(fd, [memoryview(buf)[: n * BS]], first * BS)
        if got != n * BS:
            print("short read at block %d" % first)
            return 1
        for i in range(n):
            b = first + i
            data = buf[i * BS:(i + 1) * BS]
            f = newest.get(b, 0)
            if data == zero:
                if f:
                    lost += 1
                    bad.append("block %d: zeros, flushed generation %d lost" % (b, f))
                else:
                    zeros += 1
                continue
            magic, seed, hb, g = HDR.unpack_from(data)
            if (magic != MAGIC or seed != a.seed or hb != b or g > a.max_gen
                    or blk(a.seed, g, a.blocks) != b or data != content(a.seed, b, g)):
                garbage += 1
                bad.append("block %d: not a pattern block of it (header %r %d %d %d)"
                           % (b, magic, seed, hb, g))
            elif g < f:
                lost += 1
                bad.append("block %d: generation %d, flushed generation %d lost" % (b, g, f))
            elif not f:
                unflushed += 1
            elif g == f:
                exact += 1
            else:
                newer += 1
    print("verify %s: %d blocks, %d with flushed data (flushed generations %s): "
          "%d at their newest flushed generation, %d at a newer unflushed one, "
          "%d LOST, %d GARBAGE; %d never-flushed blocks hold an unflushed write, %d zeros"
          % (a.dev, a.blocks, len(newest), a.flushed, exact, newer, lost, garbage, unflushed, zeros))
    for line in bad[:20]:
        print("  " + line)
    return 0 if not lost and not garbage and exact + newer == len(newest) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["write", "verify"])
    p.add_argument("dev")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--blocks", type=int, required=True)
    p.add_argument("--first-gen", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=0)
    p.add_argument("--log")
    p.add_argument("--flushed", default="")
    p.add_argument("--max-gen", type=int, default=MASK)
    a = p.parse_args()
    if a.mode == "write":
        if not a.log:
            p.error("write needs --log")
        return do_write(a)
    return do_verify(a)


if __name__ == "__main__":
    sys.exit(main())
