#!/usr/bin/python3
"""raw_handshake.py - the NBD handshake spoken byte by byte.

Checks the fixed-newstyle handshake of a server against doc/proto.md of
NetworkBlockDevice/nbd: greeting, client flags, option framing and reply
magic, NBD_OPT_LIST, NBD_OPT_INFO/NBD_OPT_GO (NBD_INFO_* payloads, unknown
info types, unknown exports, malformed requests, INFO/GO consistency;
block size constraints bind only a client whose GO asked for them),
NBD_OPT_STRUCTURED_REPLY, LIST/SET_META_CONTEXT query semantics,
NBD_OPT_EXPORT_NAME (with and without NO_ZEROES, unknown export),
NBD_OPT_ABORT, STARTTLS on a NOTLS server, unknown options with payloads,
bad option magic, unknown client flags.

  raw_handshake.py --uri nbd://127.0.0.1:PORT/dimm0 [--other-export dimm1]
      [--exports dimm0,dimm1] [--sector-size 512]
"""
import argparse
import os
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbdraw import *  # noqa: F401,F403
from testlib import alive, check, finish, log, section

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--uri", required=True, help="writable export (its name is used in options)")
ap.add_argument("--other-export", help="a second export on the same server")
ap.add_argument("--exports", help="comma-separated names NBD_OPT_LIST must show")
ap.add_argument("--sector-size", type=int, default=512)
ap.add_argument("--close-timeout", type=float, default=3.0,
                help="seconds the server may take to drop a connection it must drop")
args = ap.parse_args()

URI = args.uri
EXPORT = parse_uri(URI)[2]
CT = args.close_timeout


def conn(handshake=True, cflags=None):
    c = Conn.open(URI)
    if handshake:
        c.handshake(cflags)
    return c


def still_parses(c, what):
    """After something odd, the next option must still be parsed right."""
    reps = c.final_reply(OPT_LIST)
    check(reps[-1][0] == REP_ACK, "NBD_OPT_LIST after %s -> %s" % (what, repname(reps[-1][0])))
    names = [d[4:4 + struct.unpack(">I", d[:4])[0]].decode() for t, d in reps[:-1]]
    check(EXPORT in names or EXPORT == "", "NBD_OPT_LIST after %s does not list %r" % (what, EXPORT))


def check_tflags(tf, structured, what):
    check(tf & TF_HAS_FLAGS, "%s: NBD_FLAG_HAS_FLAGS clear" % what)
    check(not tf & TF_SEND_RESIZE, "%s: experimental NBD_FLAG_SEND_RESIZE set" % what)
    check(tf < (1 << 12), "%s: undefined transmission flag bits set: %#x" % (what, tf))
    if not structured:
        check(not tf & TF_SEND_DF, "%s: NBD_FLAG_SEND_DF set without structured replies" % what)
    if not tf & TF_SEND_WRITE_ZEROES:
        check(not tf & TF_SEND_FAST_ZERO, "%s: FAST_ZERO without WRITE_ZEROES" % what)


def check_string(s, what):
    if isinstance(s, str):
        s = s.encode()
    check(b"\0" not in s, "%s contains NUL" % what)
    check(len(s) <= 4096, "%s longer than 4096 bytes" % what)
    s.decode("utf-8")


def export_name_or_closed(c, name):
    """NBD_OPT_EXPORT_NAME NAME on C: (size, transmission flags), or None
    when the server closes the connection instead."""
    try:
        return c.export_name(name)
    except Closed:
        return None


def dropped(c, what):
    closed, got = c.expect_silence_then_close(CT)
    check(closed, "%s: connection still open after %.0f s (the server must drop it)" % (what, CT))
    return got


# ---- greeting and client flags ---------------------------------------------------
with section("greeting: NBDMAGIC, IHAVEOPT, FIXED_NEWSTYLE"):
    c = conn(handshake=False)
    hf = c.greeting()
    check(hf & FLAG_FIXED_NEWSTYLE, "NBD_FLAG_FIXED_NEWSTYLE not set")
    log("     handshake flags %#x" % hf)
    c.close()

with section("client flags: unknown bits make the server drop the connection"):
    for bad in (1 << 2, 1 << 31, FLAG_C_FIXED_NEWSTYLE | (1 << 5), 0xFFFFFFFF):
        c = conn(handshake=False)
        c.greeting()
        c.send(struct.pack(">I", bad))
        # a well-formed option after it must not be answered
        c.send_if_open(struct.pack(">QII", IHAVEOPT, OPT_LIST, 0))
        got = dropped(c, "client flags %#x" % bad)
        check(got == b"", "server answered after client flags %#x: %r" % (bad, got[:40]))
        c.close()

with section("client flags: NO_ZEROES accepted when advertised, 0 handled"):
    c = conn(handshake=False)
    hf = c.greeting()
    if hf & FLAG_NO_ZEROES:
        c.send(struct.pack(">I", FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES))
        still_parses(c, "C_NO_ZEROES")
    c.close()
    # no FIXED_NEWSTYLE: the server may honour fixed newstyle or drop us
    c = conn(cflags=0)
    got = export_name_or_closed(c, EXPORT)
    log("     client flags 0 accepted (size %d)" % got[0] if got else "     client flags 0: connection dropped")
    c.close()

# ---- option framing ---------------------------------------------------------------
with section("options: bad option magic drops the connection"):
    c = conn()
    c.option(OPT_LIST, magic=0x1122334455667788)
    c.send_if_open(struct.pack(">QII", IHAVEOPT, OPT_LIST, 0))
    got = dropped(c, "bad option magic")
    check(got == b"", "server answered an option with a bad magic: %r" % got[:40])

with section("options: unknown options get ERR_UNSUP, payload skipped"):
    c = conn()
    for opt, payload in ((0x1234, b""), (0x7FFFFFFF, os.urandom(100)), (OPT_PEEK_EXPORT, b""),
                         (OPT_EXTENDED_HEADERS, b""), (0x44, b"IHAVEOPT" + struct.pack(">II", OPT_ABORT, 0)),
                         (0x55, os.urandom(16000))):  # flashd keeps up to 16 KiB
        reps = c.final_reply(opt, payload)
        check(len(reps) == 1, "option %#x got %d replies" % (opt, len(reps)))
        check(reps[0][0] == REP_ERR_UNSUP, "option %#x -> %s, want ERR_UNSUP" % (opt, repname(reps[0][0])))
        check_string(reps[0][1], "error message")
        still_parses(c, "unknown option %#x with %d bytes" % (opt, len(payload)))
    c.close()

with section("options: an unknown option of 1 MiB is skipped or refused, then parsing goes on"):
    c = conn()
    reps = c.final_reply(0x66, b"\x5a" * (1 << 20))
    check(reps[0][0] in (REP_ERR_UNSUP, REP_ERR_TOO_BIG), "-> %s" % repname(reps[0][0]))
    still_parses(c, "1 MiB unknown option")
    c.close()

with section("options: STARTTLS on a NOTLS server"):
    c = conn()
    reps = c.final_reply(OPT_STARTTLS)
    check(reps[-1][0] in (REP_ERR_UNSUP, REP_ERR_POLICY, REP_ERR_INVALID),
          "STARTTLS -> %s, want ERR_UNSUP or ERR_POLICY" % repname(reps[-1][0]))
    still_parses(c, "STARTTLS")
    c.close()

with section("options: ABORT is acknowledged (data ignored), then the server closes"):
    for payload in (b"", b"junk data"):
        c = conn()
        reps = c.final_reply(OPT_ABORT, payload)
        check(reps == [(REP_ACK, b"")], "ABORT with %d bytes -> %s" % (len(payload), [repname(t) for t, d in reps]))
        check(c.wait_closed(CT), "server did not close after NBD_OPT_ABORT")
    # a client that sends ABORT and leaves at once
    for i in range(5):
        c = conn()
        c.option(OPT_ABORT)
        c.reset()

# ---- NBD_OPT_LIST -------------------------------------------------------------------
with section("LIST: NBD_REP_SERVER entries then ACK; data is refused"):
    c = conn()
    reps = c.final_reply(OPT_LIST)
    check(reps[-1][0] == REP_ACK, "LIST ended with %s" % repname(reps[-1][0]))
    names = []
    for t, d in reps[:-1]:
        check(t == REP_SERVER, "LIST reply type %s" % repname(t))
        check(len(d) >= 4, "REP_SERVER shorter than 4 bytes")
        nl = struct.unpack(">I", d[:4])[0]
        check(nl <= len(d) - 4, "REP_SERVER name length %d > reply length - 4" % nl)
        name, desc = d[4:4 + nl], d[4 + nl:]
        check_string(name, "export name")
        check_string(desc, "export description")
        names.append(name.decode())
        log("     export %r: %r" % (name.decode(), desc.decode()))
    if args.exports:
        for e in args.exports.split(","):
            check(e in names, "export %r not listed (%s)" % (e, names))
    reps = c.final_reply(OPT_LIST, b"xx")
    check(reps[-1][0] == REP_ERR_INVALID, "LIST with data -> %s, want ERR_INVALID" % repname(reps[-1][0]))
    still_parses(c, "LIST with data")
    # every listed name is accepted by NBD_OPT_INFO
    for n in names:
        final, got, _ = c.info(OPT_INFO, n)
        check(final == REP_ACK, "INFO for listed export %r -> %s" % (n, repname(final)))
    c.close()

# ---- NBD_OPT_INFO / NBD_OPT_GO ---------------------------------------------------------
with section("INFO: NBD_INFO_EXPORT, NAME, DESCRIPTION, BLOCK_SIZE payloads"):
    c = conn()
    final, got, reps = c.info(OPT_INFO, EXPORT, ())
    check(final == REP_ACK, "INFO -> %s" % repname(final))
    check(INFO_EXPORT in got, "INFO acked without NBD_INFO_EXPORT")
    check(got["order"].count(INFO_EXPORT) == 1, "NBD_INFO_EXPORT sent %d times" % got["order"].count(INFO_EXPORT))
    size, tf = got[INFO_EXPORT]
    check_tflags(tf, False, "INFO without structured replies")
    final, got, reps = c.info(OPT_INFO, EXPORT, (INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE, 0x7FFF, 0x1234))
    check(final == REP_ACK, "INFO with an unknown info type -> %s (must be ignored)" % repname(final))
    for it in set(got["order"]):
        check(got["order"].count(it) == 1, "info type %d sent %d times" % (it, got["order"].count(it)))
    check(INFO_BLOCK_SIZE in got or args.sector_size == 1,
          "NBD_INFO_BLOCK_SIZE requested but not sent (minimum %d is not the default)" % args.sector_size)
    if INFO_BLOCK_SIZE in got:
        mn, pr, mx = got[INFO_BLOCK_SIZE]
        check(mn == args.sector_size, "minimum block size %d, want %d" % (mn, args.sector_size))
        check(mn & (mn - 1) == 0 and mn <= 65536, "bad minimum %d" % mn)
        check(pr & (pr - 1) == 0 and pr >= max(mn, 512), "bad preferred %d" % pr)
        check(mx == 0xFFFFFFFF or mx % mn == 0, "bad maximum %d" % mx)
        check(size % mn == 0, "size %d not a multiple of the minimum %d" % (size, mn))
    if INFO_NAME in got:
        check_string(got[INFO_NAME], "NBD_INFO_NAME")
    if INFO_DESCRIPTION in got:
        check_string(got[INFO_DESCRIPTION], "NBD_INFO_DESCRIPTION")
    log("     infos: %s" % {k: v for k, v in got.items() if k != "order"})
    c.close()

with section("INFO: unknown export -> ERR_UNKNOWN without NBD_REP_INFO; malformed -> ERR_INVALID"):
    c = conn()
    final, got, reps = c.info(OPT_INFO, "no-such-export")
    check(final == REP_ERR_UNKNOWN, "INFO no-such-export -> %s, want ERR_UNKNOWN" % repname(final))
    check(len(reps) == 1, "NBD_REP_INFO sent for an unknown export")
    final, got, reps = c.info(OPT_GO, "no-such-export")
    check(final == REP_ERR_UNKNOWN, "GO no-such-export -> %s, want ERR_UNKNOWN" % repname(final))
    e = EXPORT.encode()
    bad = {
        "name length past the option": struct.pack(">I", 1000) + e + struct.pack(">H", 0),
        "too short": b"\0\0",
        "trailing bytes": Conn.info_data(EXPORT, (INFO_BLOCK_SIZE,)) + b"\0",
        "info count past the option": struct.pack(">I", len(e)) + e + struct.pack(">H", 3) + struct.pack(">H", 3),
    }
    for what, data in bad.items():
        for opt in (OPT_INFO, OPT_GO):
            reps = c.final_reply(opt, data)
            check(reps[-1][0] == REP_ERR_INVALID, "%s with %s -> %s, want ERR_INVALID" % (
                "INFO" if opt == OPT_INFO else "GO", what, repname(reps[-1][0])))
            check(all(t == REP_INFO for t, d in reps[:-1]), "unexpected reply types")
    still_parses(c, "malformed INFO/GO")
    # after all that, GO still works on this connection
    size, tf = c.go(EXPORT, structured=False)
    r = c.cmd(CMD_READ, 0, 0, 4096)
    check(r.error == 0 and len(r.data) == 4096, "read after haggling failed: %r" % r)
    c.close()

with section("INFO then GO with the same request report the same information"):
    c = conn()
    c.structured_reply()
    req = (INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION)
    f1, g1, _ = c.info(OPT_INFO, EXPORT, req)
    f2, g2, _ = c.info(OPT_GO, EXPORT, req)
    check(f1 == REP_ACK and f2 == REP_ACK, "INFO %s, GO %s" % (repname(f1), repname(f2)))
    check(sorted(g1["order"]) == sorted(g2["order"]), "INFO sent %s, GO sent %s" % (g1["order"], g2["order"]))
    for k in g1:
        if k != "order":
            check(g1[k] == g2[k], "info %s: INFO said %r, GO said %r" % (k, g1[k], g2[k]))
    check_tflags(g2[INFO_EXPORT][1], True, "GO with structured replies")
    check(g2[INFO_EXPORT][1] & TF_SEND_DF, "SEND_DF not advertised with structured replies")
    # transmission starts right after the ACK: no padding bytes
    c.request(CMD_READ, 0, 0xA1, 0, 4096)
    r = c.reply_for(0xA1)
    check(r.structured, "simple reply to a READ after structured replies were negotiated")
    read_data(r, 0, 4096)
    c.close()

def misaligned_served(c, what):
    """A client without block size constraints: a misaligned READ is served
    with the bytes an aligned READ shows."""
    r = c.cmd(CMD_READ, 0, 0, 8192)
    check(r.error == 0 and len(r.data) == 8192, "%s: aligned read: %r" % (what, r))
    r2 = c.cmd(CMD_READ, 0, 1, 100)
    check(r2.error == 0, "%s: misaligned read -> %s, want success (no constraints were negotiated)" % (
        what, errname(r2.error)))
    check(r2.data == r.data[1:101], "%s: misaligned read returned other bytes than an aligned one" % what)
    r3 = c.cmd(CMD_READ, 0, 4095, 2)
    check(r3.error == 0 and r3.data == r.data[4095:4097], "%s: read across a unit boundary: %r" % (what, r3))


with section("GO without NBD_INFO_BLOCK_SIZE: accepted, no constraints (misaligned I/O served)"):
    c = conn()
    size, tf = c.go(EXPORT, infos=(), structured=False)
    misaligned_served(c, "GO without NBD_INFO_BLOCK_SIZE")
    c.close()

with section("INFO with NBD_INFO_BLOCK_SIZE, then GO without it: no constraints (INFO only informs)"):
    c = conn()
    final, got, reps = c.info(OPT_INFO, EXPORT, (INFO_BLOCK_SIZE,))
    check(final == REP_ACK and INFO_BLOCK_SIZE in got, "INFO with NBD_INFO_BLOCK_SIZE -> %s" % repname(final))
    c.go(EXPORT, infos=(), structured=False)
    misaligned_served(c, "INFO, then GO without NBD_INFO_BLOCK_SIZE")
    c.close()

with section("GO with NBD_INFO_BLOCK_SIZE: bound by it, misaligned I/O fails cleanly"):
    c = conn()
    size, tf = c.go(EXPORT, infos=(INFO_BLOCK_SIZE,), structured=False)
    if args.sector_size > 1:
        r = c.cmd(CMD_READ, 0, 1, 512 if args.sector_size > 512 else 100)
        check(r.error == EINVAL, "misaligned read -> %s, want EINVAL" % errname(r.error))
        check(r.data == b"", "misaligned read failed but sent data")
    r = c.cmd(CMD_READ, 0, 0, 4096)
    check(r.error == 0 and len(r.data) == 4096, "aligned read after a misaligned one: %r" % r)
    c.close()

with section("STRUCTURED_REPLY: ACK; with data ERR_INVALID; repeated ACK or ERR_INVALID"):
    c = conn()
    reps = c.final_reply(OPT_STRUCTURED_REPLY, b"x")
    check(reps[-1][0] == REP_ERR_INVALID, "STRUCTURED_REPLY with data -> %s" % repname(reps[-1][0]))
    reps = c.final_reply(OPT_STRUCTURED_REPLY)
    check(reps == [(REP_ACK, b"")], "STRUCTURED_REPLY -> %s" % [repname(t) for t, d in reps])
    c.structured = True
    reps = c.final_reply(OPT_STRUCTURED_REPLY)
    check(reps[-1][0] in (REP_ACK, REP_ERR_INVALID), "repeated STRUCTURED_REPLY -> %s" % repname(reps[-1][0]))
    size, tf = c.go(EXPORT)
    check(tf & TF_SEND_DF, "DF not advertised after STRUCTURED_REPLY")
    c.close()

# ---- meta contexts -------------------------------------------------------------------
def meta(c, opt, name, queries, raw=None):
    reps = c.final_reply(opt, raw if raw is not None else Conn.meta_data(name, queries))
    ctx = []
    for t, d in reps[:-1]:
        check(t == REP_META_CONTEXT, "reply type %s" % repname(t))
        check(len(d) >= 5, "META_CONTEXT reply of %d bytes" % len(d))
        cid = struct.unpack(">I", d[:4])[0]
        nm = d[4:].decode("utf-8")
        ctx.append((cid, nm))
    return reps[-1][0], ctx


with section("META: SET before STRUCTURED_REPLY is refused"):
    c = conn()
    final, ctx = meta(c, OPT_SET_META_CONTEXT, EXPORT, ["base:allocation"])
    check(final & 0x80000000, "SET_META_CONTEXT before STRUCTURED_REPLY -> %s (must be an error)" % repname(final))
    check(not ctx, "contexts selected without structured replies")
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, [])
    log("     LIST_META_CONTEXT before STRUCTURED_REPLY -> %s %s" % (repname(final), ctx))
    check(final == REP_ACK or final & 0x80000000, "")
    still_parses(c, "meta context before structured replies")
    c.close()

with section("META: LIST_META_CONTEXT queries"):
    c = conn()
    c.structured_reply()
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, [])
    check(final == REP_ACK, "LIST (all) -> %s" % repname(final))
    check("base:allocation" in [n for i, n in ctx], "LIST (all) misses base:allocation: %s" % ctx)
    for cid, n in ctx:
        check(":" in n and n.index(":") > 0, "context %r lacks a namespace" % n)
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, ["base:"])
    check(final == REP_ACK and "base:allocation" in [n for i, n in ctx], "LIST base: -> %s %s" % (repname(final), ctx))
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, ["base:allocation"])
    check(final == REP_ACK and [n for i, n in ctx] == ["base:allocation"], "LIST base:allocation -> %s" % ctx)
    for cid, n in ctx:
        check(cid == 0, "LIST_META_CONTEXT reply with context id %d (SHOULD be 0)" % cid)
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, ["x-no-such:ctx", "base:nothing-here"])
    check(final == REP_ACK and ctx == [], "LIST of unknown contexts -> %s %s, want a bare ACK" % (repname(final), ctx))
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, "no-such-export", ["base:allocation"])
    check(final & 0x80000000, "LIST for a nonexistent export -> %s" % repname(final))
    # a query length beyond the option: syntactically invalid
    e = EXPORT.encode()
    raw = struct.pack(">I", len(e)) + e + struct.pack(">I", 1) + struct.pack(">I", 100) + b"base:allocation"
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, None, raw)
    check(final == REP_ERR_INVALID, "query length past the option -> %s, want ERR_INVALID" % repname(final))
    raw = struct.pack(">I", 1000) + e + struct.pack(">I", 0)
    final, ctx = meta(c, OPT_LIST_META_CONTEXT, EXPORT, None, raw)
    check(final == REP_ERR_INVALID, "name length past the option -> %s, want ERR_INVALID" % repname(final))
    still_parses(c, "malformed LIST_META_CONTEXT")
    c.close()

with section("META: SET_META_CONTEXT selects base:allocation, ignores the rest"):
    c = conn()
    c.structured_reply()
    final, ctx = meta(c, OPT_SET_META_CONTEXT, EXPORT, ["x-unknown:foo", "base:allocation", "base:", "base:other"])
    check(final == REP_ACK, "SET -> %s" % repname(final))
    check([n for i, n in ctx] == ["base:allocation"], "SET selected %s, want only base:allocation" % ctx)
    cid = ctx[0][0]
    final, ctx = meta(c, OPT_SET_META_CONTEXT, EXPORT, ["base:"])
    check(final == REP_ACK and ctx == [], "SET base: -> %s %s, want no contexts" % (repname(final), ctx))
    final, ctx = meta(c, OPT_SET_META_CONTEXT, EXPORT, [])
    check(final == REP_ACK and ctx == [], "SET with no queries -> %s %s" % (repname(final), ctx))
    final, ctx = meta(c, OPT_SET_META_CONTEXT, EXPORT, ["base:allocation", "base:allocation"])
    check(final == REP_ACK and ctx and all(n == "base:allocation" for i, n in ctx), "SET twice -> %s" % ctx)
    ids = {}
    for i, n in ctx:
        check(ids.setdefault(i, n) == n, "context id %d used for two contexts" % i)
    cid = ctx[-1][0]
    size, tf = c.go(EXPORT)
    r = c.cmd(CMD_BLOCK_STATUS, 0, 0, 65536)
    ext = block_status_extents(r, 0, 65536, min_block=args.sector_size)
    check(list(ext) == [cid], "BLOCK_STATUS chunk for context ids %s, SET gave %d" % (list(ext), cid))
    c.close()

with section("META: SET replaces the selection; none selected -> BLOCK_STATUS EINVAL"):
    c = conn()
    c.structured_reply()
    meta(c, OPT_SET_META_CONTEXT, EXPORT, ["base:allocation"])
    final, ctx = meta(c, OPT_SET_META_CONTEXT, EXPORT, ["x-unknown:foo"])
    check(final == REP_ACK and ctx == [], "SET unknown -> %s %s" % (repname(final), ctx))
    c.go(EXPORT)
    r = c.cmd(CMD_BLOCK_STATUS, 0, 0, 65536)
    check(r.error == EINVAL, "BLOCK_STATUS with no context selected -> %s, want EINVAL" % errname(r.error))
    r = c.cmd(CMD_READ, 0, 0, 4096)
    read_data(r, 0, 4096)
    c.close()
    # a failed SET also clears the selection
    c = conn()
    c.structured_reply()
    meta(c, OPT_SET_META_CONTEXT, EXPORT, ["base:allocation"])
    final, ctx = meta(c, OPT_SET_META_CONTEXT, "no-such-export", ["base:allocation"])
    check(final & 0x80000000, "SET for a nonexistent export -> %s" % repname(final))
    c.go(EXPORT)
    r = c.cmd(CMD_BLOCK_STATUS, 0, 0, 65536)
    check(r.error == EINVAL, "BLOCK_STATUS after a failed SET -> %s, want EINVAL" % errname(r.error))
    c.close()

if args.other_export:
    with section("META: contexts set for another export do not apply"):
        c = conn()
        c.structured_reply()
        final, ctx = meta(c, OPT_SET_META_CONTEXT, args.other_export, ["base:allocation"])
        check(final == REP_ACK and len(ctx) == 1, "SET for %s -> %s %s" % (args.other_export, repname(final), ctx))
        c.go(EXPORT)
        r = c.cmd(CMD_BLOCK_STATUS, 0, 0, 65536)
        check(r.error == EINVAL, "BLOCK_STATUS on %s with the context set for %s -> %s, want EINVAL" % (
            EXPORT, args.other_export, errname(r.error)))
        c.close()

# ---- NBD_OPT_EXPORT_NAME --------------------------------------------------------------------
with section("EXPORT_NAME: 10 bytes with NO_ZEROES, 134 without"):
    for nz in (True, False):
        c = conn(handshake=False)
        hf = c.greeting()
        if nz and not hf & FLAG_NO_ZEROES:
            continue
        c.send(struct.pack(">I", FLAG_C_FIXED_NEWSTYLE | (FLAG_C_NO_ZEROES if nz else 0)))
        c.option(OPT_EXPORT_NAME, EXPORT.encode())
        size, tf = struct.unpack(">QH", c.recvn(10))
        check_tflags(tf, False, "EXPORT_NAME")
        if not nz:
            pad = c.recvn(124)
            check(pad == bytes(124), "the 124 bytes after EXPORT_NAME are not zero")
        # the next bytes must be the reply to our first request
        r = c.cmd(CMD_READ, 0, 0, 4096, handle=0x5EED)
        check(not r.structured and r.error == 0 and len(r.data) == 4096, "read after EXPORT_NAME: %r" % r)
        # EXPORT_NAME negotiates no block sizes: no constraints
        misaligned_served(c, "EXPORT_NAME")
        c.close()

with section("EXPORT_NAME: structured replies negotiated before it are used"):
    c = conn()
    c.structured_reply()
    c.option(OPT_EXPORT_NAME, EXPORT.encode())
    size, tf = struct.unpack(">QH", c.recvn(10))
    check(tf & TF_SEND_DF, "SEND_DF not set after STRUCTURED_REPLY + EXPORT_NAME")
    r = c.cmd(CMD_READ, 0, 0, 4096)
    check(r.structured, "simple reply to READ after STRUCTURED_REPLY")
    read_data(r, 0, 4096)
    c.close()

with section("EXPORT_NAME: unknown export -> prompt hard disconnect, no option reply"):
    c = conn()
    t0 = time.monotonic()
    c.option(OPT_EXPORT_NAME, b"no-such-export")
    closed, got = c.expect_silence_then_close(max(CT, 12))
    dt = time.monotonic() - t0
    check(closed, "connection still open %.0f s after EXPORT_NAME of a nonexistent export" % dt)
    check(got == b"", "server sent %d bytes (%r) for a nonexistent EXPORT_NAME" % (len(got), got[:20]))
    check(dt <= CT, "the server took %.1f s to drop the connection after EXPORT_NAME named no export "
          "(the spec: it MUST terminate the session; this client hangs meanwhile)" % dt)

with section("EXPORT_NAME: empty name is the default export or a disconnect"):
    c = conn()
    got = export_name_or_closed(c, "")
    if got:
        check_tflags(got[1], False, "default export")
        log("     default export: %d bytes" % got[0])
    else:
        log("     no default export (disconnect)")
    c.close()

# ---- after GO ---------------------------------------------------------------------------
with section("after GO an option header is a bad request: disconnect"):
    c = conn()
    c.go(EXPORT)
    c.option(OPT_LIST)      # 16 bytes: with the next one more than a request header
    c.send_if_open(struct.pack(">QII", IHAVEOPT, OPT_ABORT, 0))
    got = dropped(c, "option after GO")
    check(got == b"", "server answered an option sent in transmission: %r" % got[:40])

with section("server alive after the handshake checks"):
    alive(URI)

finish()
