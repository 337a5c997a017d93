#!/usr/bin/python3
"""protocol_libnbd.py - NBD protocol checks through libnbd (python3-libnbd).

Every option and command of the NBD protocol (doc/proto.md of
NetworkBlockDevice/nbd), driven by libnbd against a running server, checked
against the spec: OPT_LIST, OPT_INFO, OPT_GO, STRUCTURED_REPLY,
LIST/SET_META_CONTEXT (base:allocation), READ (structured OFFSET_DATA and
OFFSET_HOLE chunks, DF), WRITE (+FUA), FLUSH, TRIM, WRITE_ZEROES (+NO_HOLE,
FAST_ZERO), CACHE, BLOCK_STATUS (+REQ_ONE), DISC; bounds, alignment, zero
lengths, unknown flags, read-only exports, CAN_MULTI_CONN, many requests in
flight.  Server-agnostic: the export and what to expect come from the
command line, so the same checks run against flashd and against nbdkit with
flashd's plugin.

  protocol_libnbd.py --uri nbd://127.0.0.1:PORT/dimm0 [--sector-size 512]
      [--readonly-uri URI] [--list-uri URI --exports dimm0,dimm1]
      [--fresh] [--no-read-holes] [--no-hole-status] [--size BYTES]
      [--long-payloadless]   (flashd: WRITE_ZEROES and CACHE of any length)

Against nbdkit with flashd's plugin (one export, any name accepted, holes
read back as data, block sizes advertised but not enforced):

  nbdkit -U SOCK build/nbdkit-flashd-plugin.so image=IMG preset=test-1g
  protocol_libnbd.py --uri "nbd+unix:///?socket=SOCK" --fresh \
      --no-read-holes --any-export-name --lenient-limits

The writable export is scribbled over (the first 160 MiB and the last
1 MiB).  --fresh: the export was never written before this run, so all of
it must report hole+zero first.
"""
import argparse
import os
import sys

import nbd

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import (aio_wait, alive, check, connect, expect_err, extents, finish, log,
                     outcome, pattern, section, status_at)

MiB = 1 << 20
HOLE, ZERO = nbd.STATE_HOLE, nbd.STATE_ZERO
UNKNOWN_FLAG = 1 << 5          # the first command flag bit no revision defines

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--uri", required=True, help="writable export")
ap.add_argument("--readonly-uri", help="a read-only export (NBD_FLAG_READ_ONLY) with a formatted image")
ap.add_argument("--list-uri", help="URI for NBD_OPT_LIST (default: --uri)")
ap.add_argument("--exports", help="comma-separated export names NBD_OPT_LIST must show")
ap.add_argument("--descriptions", action="store_true", help="every listed export must carry a description")
ap.add_argument("--sector-size", type=int, default=512, help="expected minimum block size")
ap.add_argument("--preferred", type=int, default=4096, help="expected preferred block size (0: any valid)")
ap.add_argument("--max-block", type=int, default=32 * MiB, help="expected maximum block size (0: any valid)")
ap.add_argument("--size", type=int, default=0, help="expected export size (0: any)")
ap.add_argument("--fresh", action="store_true", help="the export has never been written")
ap.add_argument("--no-read-holes", action="store_true",
                help="do not require OFFSET_HOLE chunks when reading unallocated ranges")
ap.add_argument("--no-hole-status", action="store_true",
                help="do not require base:allocation to report trimmed ranges as holes")
ap.add_argument("--any-export-name", action="store_true",
                help="the server serves every export name (no NBD_REP_ERR_UNKNOWN checks)")
ap.add_argument("--lenient-limits", action="store_true",
                help="do not require EINVAL for requests over the maximum block size or not "
                     "aligned to the minimum (SHOULDs of the spec), only that the connection survives")
ap.add_argument("--long-payloadless", action="store_true",
                help="the server takes WRITE_ZEROES and CACHE longer than the maximum block size "
                     "(flashd: only READ and WRITE are limited); require success for them")
ap.add_argument("--only", help="comma-separated section name prefixes to run")
args = ap.parse_args()

SS = args.sector_size
LIMIT_ERR = ("EINVAL", "OK") if args.lenient_limits else "EINVAL"
# WRITE_ZEROES (without FAST_ZERO) and CACHE over the maximum block size
LONG_ERR = "OK" if args.long_payloadless else LIMIT_ERR
only = args.only.split(",") if args.only else None


def want(name):
    return only is None or any(name.startswith(p) for p in only)


def region(k):
    """8 MiB scratch region k (0..11) at the start of the export."""
    return k * 8 * MiB


BIG = 96 * MiB   # [96 MiB, 160 MiB): requests longer than the maximum block size


h = connect(args.uri, name="main")
SIZE = h.get_size()
MAXB = h.get_block_size(nbd.SIZE_MAXIMUM)

# ---- negotiated features ---------------------------------------------------
if want("flags"):
    with section("flags: transmission flags and handshake"):
        check(h.get_protocol() == "newstyle-fixed", "protocol %s, want newstyle-fixed" % h.get_protocol())
        hf = h.get_handshake_flags()
        check(hf & nbd.HANDSHAKE_FLAG_FIXED_NEWSTYLE, "server did not set NBD_FLAG_FIXED_NEWSTYLE")
        check(h.get_structured_replies_negotiated(), "structured replies not negotiated")
        for f in ("can_flush", "can_fua", "can_trim", "can_zero", "can_fast_zero", "can_df",
                  "can_cache", "can_multi_conn"):
            check(getattr(h, f)(), "%s is false" % f)
        check(not h.is_read_only(), "writable export advertises NBD_FLAG_READ_ONLY")
        check(h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), "base:allocation not selected by SET_META_CONTEXT")
        if args.size:
            check(SIZE == args.size, "export size %d, want %d" % (SIZE, args.size))

    with section("flags: block sizes (NBD_INFO_BLOCK_SIZE rules)"):
        mn = h.get_block_size(nbd.SIZE_MINIMUM)
        pr = h.get_block_size(nbd.SIZE_PREFERRED)
        mx = h.get_block_size(nbd.SIZE_MAXIMUM)
        log("     size %d, block sizes min %d preferred %d max %d" % (SIZE, mn, pr, mx))
        check(mn == SS, "minimum block size %d, want %d (the sector size)" % (mn, SS))
        check(mn & (mn - 1) == 0 and mn <= 65536, "minimum %d not a power of 2 <= 64 KiB" % mn)
        check(pr & (pr - 1) == 0 and pr >= max(mn, 512), "preferred %d not a power of 2 >= max(min, 512)" % pr)
        if args.preferred:
            check(pr == args.preferred, "preferred block size %d, want %d" % (pr, args.preferred))
        check(mx == 0xFFFFFFFF or mx % mn == 0, "maximum %d not a multiple of the minimum" % mx)
        check(mx >= min(pr, SIZE), "maximum %d below min(preferred, size)" % mx)
        check(SIZE < MiB or mx >= MiB, "maximum %d below 1 MiB" % mx)
        if args.max_block:
            check(mx == args.max_block, "maximum block size %d, want %d" % (mx, args.max_block))
        check(SIZE % mn == 0, "export size %d not a multiple of the minimum block size" % SIZE)

# ---- handshake options -----------------------------------------------------
if want("opt"):
    with section("opt: NBD_OPT_LIST"):
        g = nbd.NBD()
        g.set_opt_mode(True)
        g.connect_uri(args.list_uri or args.uri)
        seen = []

        def lcb(name, desc):
            seen.append((name, desc))
            return 0
        n = g.opt_list(lcb)
        check(n == len(seen), "opt_list returned %d but called back %d times" % (n, len(seen)))
        log("     exports: %s" % seen)
        names = [s[0] for s in seen]
        check(len(set(names)) == len(names), "an export is listed twice: %s" % names)
        if args.exports:
            for e in args.exports.split(","):
                check(e in names, "export %r missing from NBD_OPT_LIST (%s)" % (e, names))
        if args.descriptions:
            for nm, d in seen:
                check(d, "export %r listed without a description" % nm)
        g.opt_abort()

    with section("opt: NBD_OPT_INFO then NBD_OPT_GO report the same"):
        g = nbd.NBD()
        g.set_opt_mode(True)
        g.set_full_info(True)
        g.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
        g.connect_uri(args.uri)
        check(g.aio_is_negotiating(), "not negotiating in opt mode")
        name = g.get_export_name()
        # unknown export: NBD_REP_ERR_UNKNOWN, and haggling goes on
        g.set_export_name("no-such-export-" + name)
        r = outcome(g.opt_info)
        check(r != "OK" or args.any_export_name, "NBD_OPT_INFO for a nonexistent export succeeded")
        check(g.aio_is_negotiating(), "connection unusable after a failed NBD_OPT_INFO")
        g.set_export_name(name)
        g.opt_info()
        feats = ("is_read_only", "can_flush", "can_fua", "can_trim", "can_zero", "can_fast_zero",
                 "can_df", "can_cache", "can_multi_conn", "is_rotational")
        before = {f: getattr(g, f)() for f in feats}
        before["size"] = g.get_size()
        before["bs"] = [g.get_block_size(k) for k in (nbd.SIZE_MINIMUM, nbd.SIZE_PREFERRED, nbd.SIZE_MAXIMUM)]
        before["desc"] = outcome(g.get_export_description)
        g.opt_go()
        check(g.aio_is_ready(), "not in transmission after opt_go")
        after = {f: getattr(g, f)() for f in feats}
        after["size"] = g.get_size()
        after["bs"] = [g.get_block_size(k) for k in (nbd.SIZE_MINIMUM, nbd.SIZE_PREFERRED, nbd.SIZE_MAXIMUM)]
        after["desc"] = outcome(g.get_export_description)
        check(before == after, "NBD_OPT_INFO said %s, NBD_OPT_GO said %s" % (before, after))
        check(g.get_canonical_export_name() == name,
              "canonical name %r, want %r" % (g.get_canonical_export_name(), name))
        g.pread(SS, 0)
        g.shutdown()

    with section("opt: NBD_OPT_GO to a nonexistent export fails, haggling continues"):
        g = nbd.NBD()
        g.set_opt_mode(True)
        g.connect_uri(args.uri)
        name = g.get_export_name()
        g.set_export_name("no-such-export")
        if not args.any_export_name:
            check(outcome(g.opt_go) != "OK", "NBD_OPT_GO to a nonexistent export succeeded")
        g.set_export_name(name)
        g.opt_go()
        g.pread(SS, 0)
        g.shutdown()

    with section("opt: LIST_META_CONTEXT"):
        for queries, expect in (([], True), (["base:"], True), (["base:allocation"], True),
                                (["x-no-such-namespace:thing"], False), (["base:no-such-leaf"], False)):
            g = nbd.NBD()
            g.set_opt_mode(True)
            for q in queries:
                g.add_meta_context(q)
            g.connect_uri(args.uri)
            got = []

            def mcb(name):
                got.append(name)
                return 0
            n = g.opt_list_meta_context(mcb)
            check(n == len(got), "returned %d, called back %d times" % (n, len(got)))
            if expect:
                check("base:allocation" in got, "queries %s: base:allocation not listed (%s)" % (queries, got))
            else:
                check(got == [], "queries %s matched %s" % (queries, got))
            for c in got:
                check(":" in c and not c.startswith(":"), "context %r has no namespace" % c)
            g.opt_abort()

    with section("opt: SET_META_CONTEXT ignores unknown contexts"):
        g = connect(args.uri, meta=("x-no-such-namespace:foo", "base:no-such-leaf",
                                    nbd.CONTEXT_BASE_ALLOCATION, "qemu:no-such-thing"))
        check(g.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), "base:allocation not selected")
        check(not g.can_meta_context("x-no-such-namespace:foo"), "unknown context reported as selected")
        check(not g.can_meta_context("base:no-such-leaf"), "unknown base: leaf reported as selected")
        extents(g, 64 * 1024, 0)
        g.shutdown()
        g2 = connect(args.uri, meta=("x-no-such-namespace:foo", "base:"))
        check(not g2.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
              "'base:' must select nothing in SET_META_CONTEXT")
        g2.pread(SS, 0)
        g2.shutdown()

    with section("opt: simple replies without NBD_OPT_STRUCTURED_REPLY"):
        g = connect(args.uri, structured=False, meta=(), strict=0)
        check(not g.get_structured_replies_negotiated(), "structured replies negotiated anyway")
        check(not g.can_df(), "NBD_FLAG_SEND_DF set without structured replies")
        data = pattern(1, 64 * 1024)
        g.pwrite(data, region(0))
        check(g.pread(len(data), region(0)) == data, "simple-reply read differs")
        # errors in simple replies, and the stream stays in sync
        expect_err("EINVAL", g.pread, SS, SIZE)
        expect_err("ENOSPC", g.pwrite, b"\0" * SS, SIZE)
        check(g.pread(SS, region(0)) == data[:SS], "read after errors differs (desync?)")
        g.shutdown()

# ---- READ ----------------------------------------------------------------
if want("read"):
    with section("read: structured OFFSET_DATA / OFFSET_HOLE chunks"):
        base = region(1)
        h.trim(2 * MiB, base)
        data = pattern(2, 256 * 1024)
        h.pwrite(data, base)
        # [base, +256K) data, [+256K, +512K) hole (trimmed)
        chunks = []

        def ccb(subbuf, offset, status, error):
            chunks.append((offset, len(subbuf), status, bytes(subbuf)))
            return 0
        buf = h.pread_structured(512 * 1024, base, ccb)
        check(buf[:256 * 1024] == data, "data part differs")
        check(buf[256 * 1024:].count(0) == 256 * 1024, "trimmed part does not read as zeroes")
        chunks.sort()
        pos = base
        for off, n, st, b in chunks:
            check(off == pos, "chunks leave a gap or overlap at %d (chunk at %d)" % (pos, off))
            check(n > 0, "empty chunk")
            check(st in (nbd.READ_DATA, nbd.READ_HOLE), "chunk status %d" % st)
            pos += n
        check(pos == base + 512 * 1024, "chunks cover up to %d, want %d" % (pos, base + 512 * 1024))
        kinds = [(off - base, n, "data" if st == nbd.READ_DATA else "hole") for off, n, st, b in chunks]
        log("     chunks: %s" % kinds)
        for off, n, st, b in chunks:
            if off < base + 256 * 1024:
                check(st == nbd.READ_DATA, "written range reported as a hole chunk")
        if not args.no_read_holes:
            check(any(st == nbd.READ_HOLE for off, n, st, b in chunks),
                  "no OFFSET_HOLE chunk for a trimmed range")

    with section("read: DF flag gives one content chunk (<= 64 KiB must work)"):
        base = region(1)
        for off, n in ((base + 224 * 1024, 64 * 1024), (base, 64 * 1024), (base + 256 * 1024, 64 * 1024),
                       (base + 256 * 1024 - max(SS, 1024), 2 * max(SS, 1024))):
            chunks = []

            def dcb(subbuf, offset, status, error):
                chunks.append((offset, len(subbuf), status))
                return 0
            buf = h.pread_structured(n, off, dcb, nbd.CMD_FLAG_DF)
            check(len(chunks) == 1, "DF read [%d,+%d) came in %d chunks" % (off - base, n, len(chunks)))
            check(chunks[0][0] == off and chunks[0][1] == n, "DF chunk %s does not cover the request" % (chunks,))
            full = h.pread(n, off)
            check(buf == full, "DF read content differs from a plain read")

    with section("read: errors are error chunks; FUA accepted on READ"):
        s = connect(args.uri, strict=0)
        expect_err("EINVAL", s.pread, SS, SIZE)                  # one past the end
        expect_err("EINVAL", s.pread, 2 * SS, SIZE - SS)         # straddles the end
        expect_err("EINVAL", s.pread, SS, 1 << 62)               # far beyond
        expect_err("EINVAL", s.pread_structured, SS, SIZE, lambda *a: 0)
        check(s.pread(SS, 0, nbd.CMD_FLAG_FUA) is not None, "")  # FUA valid on every command
        expect_err("EINVAL", s.pread, SS, 0, UNKNOWN_FLAG)
        expect_err("EINVAL", s.pread, SS, 0, 1 << 15)
        expect_err("EINVAL", s.pread, SS, 0, nbd.CMD_FLAG_NO_HOLE)   # not a READ flag
        expect_err("EINVAL", s.pread, SS, 0, nbd.CMD_FLAG_REQ_ONE)
        check(s.pread(SS, SIZE - SS) is not None, "")
        s.shutdown()

# ---- WRITE / FLUSH -----------------------------------------------------------
if want("write"):
    with section("write: WRITE, WRITE+FUA, FLUSH (+FUA) read back"):
        base = region(2)
        a, b = pattern(3, MiB), pattern(4, MiB)
        h.pwrite(a, base)
        h.pwrite(b, base + MiB, nbd.CMD_FLAG_FUA)
        h.flush()
        s = connect(args.uri, strict=0)
        s.flush(nbd.CMD_FLAG_FUA)   # FUA MUST be accepted on every command
        check(h.pread(2 * MiB, base) == a + b, "read back differs")
        # maximum size write and read
        big = pattern(5, MAXB if MAXB <= 32 * MiB else 32 * MiB)
        h.pwrite(big, region(3))
        check(h.pread(len(big), region(3)) == big, "maximum-size write reads back differently")
        # partial-sector-unit writes (512e read-modify-write)
        if SS < 4096:
            h.pwrite(b"\x11" * 8192, base)
            h.pwrite(b"\x22" * SS, base + SS)
            h.pwrite(b"\x33" * SS, base + 4096 + 3 * SS)
            exp = bytearray(b"\x11" * 8192)
            exp[SS:2 * SS] = b"\x22" * SS
            exp[4096 + 3 * SS:4096 + 4 * SS] = b"\x33" * SS
            check(h.pread(8192, base) == bytes(exp), "sub-4K writes read back wrongly")
        s.shutdown()

    with section("write: errors (ENOSPC past the end, EINVAL flags), stream stays in sync"):
        s = connect(args.uri, strict=0)
        last = pattern(6, SS)
        s.pwrite(last, SIZE - SS)
        check(s.pread(SS, SIZE - SS) == last, "last sector reads back differently")
        expect_err("ENOSPC", s.pwrite, b"\xee" * SS, SIZE)
        expect_err("ENOSPC", s.pwrite, b"\xee" * 2 * SS, SIZE - SS)
        check(s.pread(SS, SIZE - SS) == last, "a failed write past the end changed the last sector")
        expect_err("EINVAL", s.pwrite, b"\xee" * SS, region(2), UNKNOWN_FLAG)
        expect_err("EINVAL", s.pwrite, b"\xee" * SS, region(2), nbd.CMD_FLAG_DF)
        expect_err("EINVAL", s.pwrite, b"\xee" * SS, region(2), nbd.CMD_FLAG_REQ_ONE)
        check(s.pread(SS, region(2)) != b"\xee" * SS, "a rejected write was applied")
        check(s.pread(SS, SIZE - SS) == last, "desync after rejected writes")
        expect_err(("EINVAL", "EOPNOTSUPP", "ENOTSUP"), s.flush, UNKNOWN_FLAG)
        s.flush()
        s.shutdown()

# ---- TRIM / WRITE_ZEROES / CACHE --------------------------------------------
if want("trim"):
    with section("trim: TRIM makes a hole that reads as zeroes; bounds and flags"):
        base = region(4)
        h.pwrite(pattern(7, 2 * MiB), base)
        h.trim(MiB, base, nbd.CMD_FLAG_FUA)
        st = status_at(h, base, 2 * MiB)
        log("     status after trim: %s" % [(o - base, n, f) for o, n, f in st])
        for o, n, f in st:
            if o < base + MiB and not args.no_hole_status:
                check(f == HOLE | ZERO, "trimmed [%d,+%d) reports %d, want hole+zero" % (o - base, n, f))
            if o >= base + MiB:
                check(f & (HOLE | ZERO) == 0, "written [%d,+%d) reports %d, want 0" % (o - base, n, f))
        if not args.no_hole_status:
            check(h.pread(MiB, base).count(0) == MiB, "trimmed range reported zero does not read as zeroes")
        s = connect(args.uri, strict=0)
        expect_err("EINVAL", s.trim, SS, SIZE)
        expect_err("EINVAL", s.trim, 2 * SS, SIZE - SS)
        expect_err("EINVAL", s.trim, SS, base, UNKNOWN_FLAG)
        expect_err("EINVAL", s.trim, SS, base, nbd.CMD_FLAG_NO_HOLE)
        # longer than the maximum block size: success or EINVAL, never a disconnect
        n = min(2 * MAXB, 64 * MiB, SIZE - BIG)
        r = outcome(s.trim, n, BIG)
        check(r in ("OK", "EINVAL"), "TRIM longer than the maximum block size -> %s" % r)
        check(s.pread(SS, base + MiB) == pattern(7, 2 * MiB)[MiB:MiB + SS], "desync after trim errors")
        s.shutdown()

if want("zero"):
    with section("zero: WRITE_ZEROES (plain, NO_HOLE, FUA) reads back zeroes"):
        base = region(5)
        d = pattern(8, 4 * MiB)
        h.pwrite(d, base)
        h.zero(MiB, base)
        h.zero(MiB, base + MiB, nbd.CMD_FLAG_NO_HOLE | nbd.CMD_FLAG_FUA)
        got = h.pread(4 * MiB, base)
        check(got[:2 * MiB].count(0) == 2 * MiB, "zeroed range does not read as zeroes")
        check(got[2 * MiB:] == d[2 * MiB:], "data after the zeroed range changed")
        st = status_at(h, base, 2 * MiB)
        log("     status after zero: %s" % [(o - base, n, f) for o, n, f in st])
        for o, n, f in st:
            if o >= base + MiB:
                check(not f & HOLE, "NO_HOLE zeroed range [%d,+%d) reports a hole (must be provisioned)" % (o - base, n))
            if f & ZERO:
                check(h.pread(n, o).count(0) == n, "range reported zero is not zero")
        if SS < 4096:
            # zeroing inside a 4 KiB unit must keep its other sectors
            h.pwrite(b"\xab" * 8192, base)
            h.zero(2 * SS, base + SS)
            h.zero(SS, base + 4096 + SS, nbd.CMD_FLAG_NO_HOLE)
            exp = bytearray(b"\xab" * 8192)
            exp[SS:3 * SS] = bytes(2 * SS)
            exp[4096 + SS:4096 + 2 * SS] = bytes(SS)
            check(h.pread(8192, base) == bytes(exp), "sub-4K WRITE_ZEROES read back wrongly")

    with section("zero: FAST_ZERO semantics"):
        base = region(5)
        s = connect(args.uri, strict=0)
        d = pattern(9, 2 * MiB)
        s.pwrite(d, base)
        r = outcome(s.zero, MiB, base, nbd.CMD_FLAG_FAST_ZERO)
        check(r in ("OK", "ENOTSUP", "EOPNOTSUPP"), "FAST_ZERO -> %s, want success or ENOTSUP" % r)
        got = s.pread(MiB, base)
        if r == "OK":
            check(got.count(0) == MiB, "FAST_ZERO succeeded but the range is not zero")
        else:
            check(got == d[:MiB], "failed FAST_ZERO changed the data")
        r = outcome(s.zero, MiB, base + MiB, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
        check(r in ("OK", "ENOTSUP", "EOPNOTSUPP"), "FAST_ZERO|NO_HOLE -> %s" % r)
        got = s.pread(MiB, base + MiB)
        if r == "OK":
            check(got.count(0) == MiB, "FAST_ZERO|NO_HOLE succeeded but the range is not zero")
        else:
            check(got == d[MiB:], "failed FAST_ZERO|NO_HOLE changed the data")
        # without FAST_ZERO the server MUST NOT fail with ENOTSUP
        s.pwrite(d, base)
        s.zero(MiB, base, nbd.CMD_FLAG_NO_HOLE)
        # FAST_ZERO is exempt from the maximum block size: success or ENOTSUP
        if SIZE >= BIG + 64 * MiB and MAXB < 64 * MiB:
            r = outcome(s.zero, 64 * MiB, BIG, nbd.CMD_FLAG_FAST_ZERO)
            check(r in ("OK", "ENOTSUP", "EOPNOTSUPP"), "FAST_ZERO over the maximum block size -> %s" % r)
        s.shutdown()

    with section("zero: bounds, maximum, flags"):
        s = connect(args.uri, strict=0)
        expect_err("ENOSPC", s.zero, SS, SIZE)
        expect_err("ENOSPC", s.zero, 2 * SS, SIZE - SS)
        if MAXB < SIZE:
            # over the maximum without FAST_ZERO
            if expect_err(LONG_ERR, s.zero, MAXB + SS, BIG) == "OK":
                check(s.pread(SS, BIG) == bytes(SS) and s.pread(SS, BIG + MAXB) == bytes(SS),
                      "WRITE_ZEROES over the maximum block size succeeded but did not zero")
        expect_err("EINVAL", s.zero, SS, region(5), UNKNOWN_FLAG)
        expect_err("EINVAL", s.zero, SS, region(5), nbd.CMD_FLAG_REQ_ONE)
        expect_err("EINVAL", s.zero, SS, region(5), nbd.CMD_FLAG_DF)
        s.pread(SS, 0)
        s.shutdown()

if want("cache"):
    with section("cache: CACHE succeeds in range, EINVAL outside"):
        s = connect(args.uri, strict=0)
        s.cache(MiB, region(2))
        s.cache(MiB, region(2), nbd.CMD_FLAG_FUA)
        expect_err("EINVAL", s.cache, SS, SIZE)
        expect_err("EINVAL", s.cache, 2 * SS, SIZE - SS)
        if MAXB < SIZE:
            expect_err(LONG_ERR, s.cache, MAXB + SS, 0)
        expect_err("EINVAL", s.cache, SS, 0, UNKNOWN_FLAG)
        expect_err("EINVAL", s.cache, SS, 0, nbd.CMD_FLAG_NO_HOLE)
        check(s.pread(MiB, region(2)) == h.pread(MiB, region(2)), "")
        s.shutdown()

# ---- BLOCK_STATUS ----------------------------------------------------------------
if want("status"):
    if args.fresh:
        with section("status: a never-written export is one hole+zero extent"):
            g = connect(args.uri)
            # (this connection's checks above wrote regions; look at the far part)
            off = 512 * MiB if SIZE > 600 * MiB else SIZE // 2
            off -= off % SS
            ext = extents(g, SIZE - 8 * MiB - off, off)
            log("     never-written [%d, %d): %s" % (off, SIZE - 8 * MiB, ext[:4]))
            check(ext[0][1] == HOLE | ZERO, "never-written range reports %d, want hole+zero" % ext[0][1])
            check(g.pread(MiB, off).count(0) == MiB, "never-written range does not read as zeroes")
            g.shutdown()

    with section("status: base:allocation after writes, trims, zeroes; REQ_ONE"):
        base = region(7)
        h.trim(8 * MiB, base)
        h.pwrite(pattern(10, MiB), base + MiB)
        h.pwrite(pattern(11, 64 * 1024), base + 3 * MiB)
        ext = extents(h, 4 * MiB, base)
        log("     extents: %s" % ext)
        for n, f in ext:
            check(n > 0 and n % SS == 0, "extent length %d not a positive multiple of %d" % (n, SS))
            check(f & ~(HOLE | ZERO) == 0, "reserved status bits set: %#x" % f)
        check(sum(n for n, f in ext[:-1]) < 4 * MiB, "extents after the request was covered")
        exp = [(0, MiB, HOLE | ZERO), (MiB, MiB, 0), (2 * MiB, MiB, HOLE | ZERO), (3 * MiB, 64 * 1024, 0),
               (3 * MiB + 64 * 1024, MiB - 64 * 1024, HOLE | ZERO)]
        st = status_at(h, base, 4 * MiB)
        for o, n, f in st:
            r = o - base
            for eo, en, ef in exp:
                if eo <= r < eo + en:
                    check(r + n <= eo + en, "extent [%d,+%d) spans differing ranges" % (r, n))
                    if ef == 0:
                        check(f & (HOLE | ZERO) == 0, "written [%d,+%d) reports %d, want 0" % (r, n, f))
                    elif not args.no_hole_status:
                        check(f == ef, "trimmed [%d,+%d) reports %d, want hole+zero" % (r, n, f))
            if f & ZERO:
                check(h.pread(n, o).count(0) == n, "[%d,+%d) reported zero reads non-zero" % (r, n))
        # REQ_ONE: one extent, not longer than the request
        for off, n in ((base, 4 * MiB), (base + MiB + 512 * 1024, 2 * MiB), (base + 3 * MiB, 4096)):
            e1 = extents(h, n, off, nbd.CMD_FLAG_REQ_ONE)
            check(len(e1) == 1, "REQ_ONE gave %d extents" % len(e1))
            check(0 < e1[0][0] <= n, "REQ_ONE extent %d longer than the request %d" % (e1[0][0], n))
        # near the end, and FUA (valid on every command)
        e2 = extents(h, SS, SIZE - SS)
        check(e2[0][0] == SS, "last-sector extent %d, want %d (never past the export end)" % (e2[0][0], SS))
        s = connect(args.uri, strict=0)
        extents(s, MiB, base, nbd.CMD_FLAG_FUA)
        s.shutdown()

    with section("status: errors (past the end, bad flags)"):
        s = connect(args.uri, strict=0)

        def bs(n, off, flags=0):
            s.block_status(n, off, lambda *a: 0, flags)
        expect_err("EINVAL", bs, SS, SIZE)
        expect_err("EINVAL", bs, 2 * SS, SIZE - SS)
        expect_err("EINVAL", bs, SS, 0, UNKNOWN_FLAG)
        expect_err("EINVAL", bs, SS, 0, nbd.CMD_FLAG_DF)
        expect_err("EINVAL", bs, SS, 0, nbd.CMD_FLAG_NO_HOLE)
        bs(SS, 0)
        s.shutdown()

# ---- edge cases ------------------------------------------------------------
if want("edge"):
    with section("edge: zero-length requests never disconnect"):
        s = connect(args.uri, strict=0)
        res = {}
        res["read"] = outcome(s.pread, 0, region(2))
        res["write"] = outcome(s.pwrite, b"", region(2))
        res["trim"] = outcome(s.trim, 0, region(2))
        res["zero"] = outcome(s.zero, 0, region(2))
        res["cache"] = outcome(s.cache, 0, region(2))
        res["block_status"] = outcome(s.block_status, 0, region(2), lambda *a: 0)
        res["read@end"] = outcome(s.pread, 0, SIZE)
        log("     zero-length outcomes: %s" % res)
        # the spec leaves the outcome open; the connection must survive
        check(s.aio_is_ready(), "connection not usable after zero-length requests")
        check(s.pread(SS, region(2)) == h.pread(SS, region(2)), "desync after zero-length requests")
        s.shutdown()

    if SS > 1:
        with section("edge: requests not aligned to the minimum block size -> EINVAL"):
            s = connect(args.uri, strict=0)
            u = SS // 2 if SS > 512 else 1
            before = s.pread(4 * SS, region(2))
            expect_err(LIMIT_ERR, s.pread, SS, region(2) + u)
            expect_err(LIMIT_ERR, s.pread, SS + u, region(2))
            expect_err(LIMIT_ERR, s.pwrite, b"\xcd" * SS, region(2) + u)
            expect_err(LIMIT_ERR, s.pwrite, b"\xcd" * (SS + u), region(2))
            expect_err(LIMIT_ERR, s.trim, SS, region(2) + u)
            expect_err(LIMIT_ERR, s.trim, u, region(2))
            expect_err(LIMIT_ERR, s.zero, SS, region(2) + u)
            expect_err(LIMIT_ERR, s.zero, u, region(2))
            expect_err(LIMIT_ERR, s.cache, SS, region(2) + u)
            expect_err(LIMIT_ERR, s.block_status, SS, region(2) + u, lambda *a: 0)
            if SS >= 4096:
                expect_err(LIMIT_ERR, s.pread, 512, region(2))
                expect_err(LIMIT_ERR, s.pwrite, b"\xcd" * 512, region(2) + 512)
            if not args.lenient_limits:
                check(s.pread(4 * SS, region(2)) == before, "an unaligned request changed data or desynced")
            check(s.pread(4 * SS, region(2)) == h.pread(4 * SS, region(2)), "desync after unaligned requests")
            s.shutdown()

    with section("edge: over the maximum block size"):
        if MAXB < SIZE and MAXB + SS <= 48 * MiB:
            s = connect(args.uri, strict=0)
            expect_err(LIMIT_ERR, s.pread, MAXB + SS, 0)
            s.pread(SS, 0)
            s.shutdown()

# ---- read-only export -----------------------------------------------------------
if args.readonly_uri and want("readonly"):
    with section("readonly: flags and EPERM for every write"):
        r = connect(args.readonly_uri, strict=0)
        check(r.is_read_only(), "read-only export without NBD_FLAG_READ_ONLY")
        check(not r.can_trim() and not r.can_zero(), "read-only export advertises TRIM/WRITE_ZEROES")
        check(not r.can_fast_zero(), "FAST_ZERO advertised without WRITE_ZEROES")
        rs = r.get_size()
        before = r.pread(64 * 1024, 0)
        expect_err("EPERM", r.pwrite, b"\x5a" * 4096, 0)
        expect_err("EPERM", r.pwrite, b"\x5a" * 4096, 0, nbd.CMD_FLAG_FUA)
        expect_err(("EPERM", "EINVAL"), r.trim, 4096, 0)
        expect_err(("EPERM", "EINVAL"), r.zero, 4096, 0)
        # big write: payload must be consumed (or the connection closed)
        expect_err("EPERM", r.pwrite, b"\x5a" * MiB, 0)
        check(r.pread(64 * 1024, 0) == before, "a refused write changed the read-only export")
        r.flush()
        r.cache(4096, 0)
        extents(r, 64 * 1024, 0)
        check(r.pread(4096, rs - 4096) is not None, "")
        r.shutdown()

# ---- CAN_MULTI_CONN and concurrency -----------------------------------------------
if want("multi"):
    with section("multi: FLUSH on one connection covers writes completed on another"):
        a = connect(args.uri, name="conn-a")
        b = connect(args.uri, name="conn-b")
        check(a.can_multi_conn() and b.can_multi_conn(), "CAN_MULTI_CONN not advertised")
        base = region(8)
        d = pattern(12, 4 * MiB)
        a.pwrite(d, base)
        b.flush()
        check(b.pread(4 * MiB, base) == d, "a write completed on connection A is not visible on B")
        b.pwrite(d[::-1], base, nbd.CMD_FLAG_FUA)
        check(a.pread(4 * MiB, base) == d[::-1], "a FUA write on B is not visible on A")
        a.shutdown()
        b.shutdown()

    with section("multi: 128 writes then 128 reads in flight on one connection", timeout=120):
        base = region(9)
        g = connect(args.uri, name="aio")
        n = 128
        datas = [pattern(100 + i, 64 * 1024) for i in range(n)]
        cks = [g.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(datas[i])), base + i * 64 * 1024)
               for i in range(n)]
        log("     in flight after queueing writes: %d" % g.aio_in_flight())
        aio_wait(g, cks)
        for c in cks:
            g.aio_command_completed(c)
        bufs = [nbd.Buffer(64 * 1024) for i in range(n)]
        # reverse order, mixed with other commands
        cks = []
        for i in reversed(range(n)):
            cks.append(g.aio_pread(bufs[i], base + i * 64 * 1024))
            if i % 16 == 0:
                cks.append(g.aio_flush())
                cks.append(g.aio_block_status(64 * 1024, base + i * 64 * 1024, lambda *a: 0))
        aio_wait(g, cks)
        for i in range(n):
            check(bufs[i].to_bytearray() == datas[i], "aio read %d differs" % i)
        # mixed reads and writes of distinct areas, many in flight
        cks = []
        for i in range(n):
            if i % 2:
                cks.append(g.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(datas[n - 1 - i])),
                                        base + i * 64 * 1024, flags=nbd.CMD_FLAG_FUA if i % 4 == 1 else 0))
            else:
                cks.append(g.aio_pread(bufs[i], base + i * 64 * 1024))
        aio_wait(g, cks)
        for i in range(n):
            exp = datas[n - 1 - i] if i % 2 else datas[i]
            got = bufs[i].to_bytearray() if i % 2 == 0 else g.pread(64 * 1024, base + i * 64 * 1024)
            check(got == exp, "mixed aio request %d: wrong data" % i)
        g.shutdown()

# ---- DISC ----------------------------------------------------------------------
if want("disc"):
    with section("disc: DISC with requests in flight, server keeps serving"):
        g = connect(args.uri, name="disc")
        bufs = [nbd.Buffer(MiB) for i in range(8)]
        for i in range(8):
            g.aio_pread(bufs[i], region(9) + i * MiB)
        g.shutdown()      # libnbd sends NBD_CMD_DISC after the pending replies
        alive(args.uri)

h.shutdown()
finish()
