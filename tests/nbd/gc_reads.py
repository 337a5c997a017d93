#!/usr/bin/python3
"""gc_reads.py - reads while GC moves the same data: every byte checked.

    gc_reads.py fill URI STATE            write every 4 KiB block (version 0)
    gc_reads.py run URI STATE SECONDS     rewrite odd blocks, read everything
    gc_reads.py verify URI STATE          read the whole export back
    gc_reads.py stalled URI STATE SECONDS 1 MiB reads whose replies the
                                          client leaves unread while
                                          another connection rewrites

Each 4 KiB block holds a 16-byte header (magic, block number, version) and
filler drawn from a fixed random pool at an offset that depends on block
and version, so a block carrying another block's data, or an older
version, or garbage, is told apart and named.  STATE (a file) keeps the
version of every block between the steps.

run: one connection rewrites random odd blocks (QD 64), so every band
holds live even blocks among dead odd ones and GC relocates the even
blocks the whole time; three other connections read random 64 KiB ranges
(QD 8 each: 512 KiB of replies queue, deep enough for the server's
send threads) and 4 KiB blocks.  An even block must always read its version 0;
an odd block is checked when no write to it was in flight from the read's
issue to its completion (then it must read the version it had).  Exit 1
with the first mismatches named.

stalled: a reader sends 64 reads of 1 MiB and reads no reply while a
writer rewrites odd blocks for SECONDS (QD 64), so GC erases and reuses
the blocks those reads came from while their replies still wait in the
server (16 MiB in flight: several MiB beyond the socket buffers); then
the replies are read and their even blocks (always version 0) checked.
(A server that sent replies from the medium would have to keep the blocks
or copy what it had not sent before their erase.)
"""
import array
import os
import random
import select
import struct
import sys
import time

import nbd

BS = 4096
MAGIC = 0x6C66617368676372  # "rcghsafl"
POOL = random.Random(20261205).randbytes(1 << 20)
HDR = struct.Struct("<QII")


def content(block, version):
    off = ((block * 2654435761) ^ (version * 40503)) % (len(POOL) - BS) & ~7
    return HDR.pack(MAGIC, block, version) + POOL[off + HDR.size:off + BS]


def describe(buf, block, version):
    magic, b, v = HDR.unpack_from(buf)
    if magic != MAGIC:
        what = "no block header (garbage or zeroes)"
    elif b != block:
        what = "block %d's data (version %d)" % (b, v)
    elif v != version:
        what = "version %d" % v
    else:
        what = "the right header but other bytes"
    return "block %d (byte %d): want version %d, got %s" % (block, block * BS, version, what)


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def load(path, n):
    v = array.array("I")
    with open(path, "rb") as f:
        v.frombytes(f.read())
    if len(v) != n:
        sys.exit("%s: %d versions, want %d" % (path, len(v), n))
    return v


def save(path, v):
    with open(path + ".tmp", "wb") as f:
        f.write(v.tobytes())
    os.replace(path + ".tmp", path)


def fill(uri, path):
    h = connect(uri)
    n = h.get_size() // BS
    step = 256
    for b0 in range(0, n, step):
        k = min(step, n - b0)
        h.pwrite(b"".join(content(b, 0) for b in range(b0, b0 + k)), b0 * BS)
    h.flush()
    save(path, array.array("I", [0]) * n)
    print("filled %d blocks of 4 KiB" % n)


def verify(uri, path):
    h = connect(uri)
    n = h.get_size() // BS
    ver = load(path, n)
    bad = 0
    step = 256
    for b0 in range(0, n, step):
        k = min(step, n - b0)
        buf = h.pread(k * BS, b0 * BS)
        for i in range(k):
            want = content(b0 + i, ver[b0 + i])
            if buf[i * BS:(i + 1) * BS] != want:
                bad += 1
                if bad <= 10:
                    print("MISMATCH " + describe(buf[i * BS:(i + 1) * BS], b0 + i, ver[b0 + i]))
    if bad:
        print("FAIL: %d of %d blocks wrong" % (bad, n))
        sys.exit(1)
    print("verified %d blocks" % n)


def run(uri, path, seconds):
    w = connect(uri)
    readers = [connect(uri) for _ in range(3)]
    n = w.get_size() // BS
    ver = load(path, n)
    inflight = bytearray(n)          # a write in flight per block (0 or 1)
    touched = array.array("I", ver)  # newest version issued per block
    rng = random.Random(1)
    stats = {"writes": 0, "reads": 0, "checked": 0, "skipped": 0, "bad": 0}
    odd = n // 2

    def write_done(block, version, err):
        inflight[block] = 0
        if err.value:
            print("FAIL: write of block %d: %s" % (block, err))
            stats["bad"] += 1
        else:
            ver[block] = version
        stats["writes"] += 1
        return 1

    def read_done(b0, k, buf, snap, err):
        stats["reads"] += 1
        if err.value:
            print("FAIL: read of blocks %d-%d: %s" % (b0, b0 + k - 1, err))
            stats["bad"] += 1
            return 1
        data = buf.to_bytearray()
        for i in range(k):
            b = b0 + i
            t, v = snap[i]
            if t is None or inflight[b] or touched[b] != t:
                stats["skipped"] += 1  # a write raced this read
                continue
            got = bytes(data[i * BS:(i + 1) * BS])
            if got != content(b, v):
                stats["bad"] += 1
                if stats["bad"] <= 10:
                    print("MISMATCH " + describe(got, b, v))
            else:
                stats["checked"] += 1
        return 1

    def issue_write():
        b = 2 * rng.randrange(odd) + 1
        while inflight[b]:  # two writes to one block in flight: either may land last
            b = 2 * rng.randrange(odd) + 1
        v = touched[b] + 1
        touched[b] = v
        inflight[b] = 1
        buf = nbd.Buffer.from_bytearray(bytearray(content(b, v)))
        w.aio_pwrite(buf, b * BS,
                     completion=lambda err, b=b, v=v, buf=buf: write_done(b, v, err))

    def issue_read(h, k):
        b0 = rng.randrange(n - k + 1)
        snap = [(None, 0) if inflight[b] else (touched[b], ver[b]) for b in range(b0, b0 + k)]
        buf = nbd.Buffer(k * BS)
        h.aio_pread(buf, b0 * BS,
                    completion=lambda err, b0=b0, k=k, buf=buf, snap=snap: read_done(b0, k, buf, snap, err))

    handles = [w] + readers
    end = time.monotonic() + seconds
    while time.monotonic() < end and stats["bad"] < 10:
        while w.aio_in_flight() < 64:
            issue_write()
        for j, h in enumerate(readers):
            while h.aio_in_flight() < 8:
                issue_read(h, 1 if j == 2 else 16)
        # one event loop for the four connections (single-threaded: the
        # bookkeeping above needs no lock)
        rd, wr = [], []
        for h in handles:
            d = h.aio_get_direction()
            if d & nbd.AIO_DIRECTION_READ:
                rd.append(h.aio_get_fd())
            if d & nbd.AIO_DIRECTION_WRITE:
                wr.append(h.aio_get_fd())
        r, wready, _ = select.select(rd, wr, [], 5)
        if not r and not wready:
            print("FAIL: no reply for 5 s")
            sys.exit(1)
        for h in handles:
            fd = h.aio_get_fd()
            if fd in r:
                h.aio_notify_read()
            if fd in wready:
                h.aio_notify_write()
    for h in handles:
        while h.aio_in_flight():
            h.poll(-1)
    w.flush()
    save(path, ver)
    print("%(writes)d writes, %(reads)d reads: %(checked)d blocks checked, "
          "%(skipped)d skipped (a write raced them), %(bad)d wrong" % stats)
    if stats["bad"]:
        print("FAIL: wrong data while GC ran")
        sys.exit(1)
    if stats["checked"] < 5000 * seconds:
        print("FAIL: only %d blocks checked in %g s (want 5,000 a second)" % (stats["checked"], seconds))
        sys.exit(1)


def stalled(uri, path, seconds):
    w = connect(uri)
    r = connect(uri)
    n = w.get_size() // BS
    ver = load(path, n)
    touched = array.array("I", ver)
    rng = random.Random(2)
    odd = n // 2
    k = 256
    bufs = []
    for _ in range(64):
        b0 = 2 * rng.randrange((n - k) // 2)
        buf = nbd.Buffer(k * BS)
        r.aio_pread(buf, b0 * BS)
        bufs.append((b0, buf))
    pending = {}

    def write_done(block, version, err):
        del pending[block]
        if err.value:
            sys.exit("FAIL: write of block %d: %s" % (block, err))
        ver[block] = version
        return 1

    writes = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while w.aio_in_flight() < 64:
            b = 2 * rng.randrange(odd) + 1
            if b in pending:
                continue
            v = touched[b] + 1
            touched[b] = v
            buf = nbd.Buffer.from_bytearray(bytearray(content(b, v)))
            pending[b] = buf
            w.aio_pwrite(buf, b * BS, completion=lambda err, b=b, v=v: write_done(b, v, err))
            writes += 1
        w.poll(-1)
    while w.aio_in_flight():
        w.poll(-1)
    w.flush()
    save(path, ver)
    while r.aio_in_flight():
        r.poll(-1)
    bad = checked = 0
    for b0, buf in bufs:
        data = buf.to_bytearray()
        for i in range(0, k, 2):
            got = bytes(data[i * BS:(i + 1) * BS])
            if got != content(b0 + i, 0):
                bad += 1
                if bad <= 10:
                    print("MISMATCH " + describe(got, b0 + i, 0))
            else:
                checked += 1
    print("stalled reads: 64 x 1 MiB left unread during %d writes: %d even blocks checked, %d wrong"
          % (writes, checked, bad))
    if bad:
        print("FAIL: a reply held while GC ran carried other data")
        sys.exit(1)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    cmd, uri, path = sys.argv[1:4]
    if cmd == "fill":
        fill(uri, path)
    elif cmd == "run":
        run(uri, path, float(sys.argv[4]))
    elif cmd == "verify":
        verify(uri, path)
    elif cmd == "stalled":
        stalled(uri, path, float(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
